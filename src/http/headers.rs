//! The security headers every response of the admin listener carries
//! (AUTH-4), in a leaf file so the admin API, `/metrics` and the web
//! client each wrap their scope without importing the module that mounts
//! them.

use actix_web::middleware::DefaultHeaders;

/// The Content-Security-Policy of every admin-listener response (AUTH-4).
/// The web client is one page and one same-origin script, talks only to
/// its own origin and styles itself inline; nothing else may load, no
/// form may post anywhere, and no other page may frame it. The token it
/// keeps in the session therefore has nowhere to go even if markup were
/// ever injected.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     connect-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self'; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The security headers of every admin-listener response (AUTH-4): the
/// policy above, no MIME sniffing, no referrer, no framing (the header
/// older browsers read), and no caching of what an operator was shown.
/// A header a handler set itself is kept.
pub fn security_headers() -> DefaultHeaders {
    DefaultHeaders::new()
        .add(("Content-Security-Policy", CONTENT_SECURITY_POLICY))
        .add(("X-Content-Type-Options", "nosniff"))
        .add(("Referrer-Policy", "no-referrer"))
        .add(("X-Frame-Options", "DENY"))
        .add(("Cache-Control", "no-store"))
}
