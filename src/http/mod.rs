//! HTTP boundaries (actix-web, the `http` feature): the serving health
//! endpoints, metrics, the web client and the admin API with its OpenAPI
//! document. Each mounts into any actix-web `App`; none holds lifecycle
//! state of its own (ADM-1).

pub mod admin;
pub mod metrics;
pub mod serving;
pub mod ui;

use crate::admin::Admin;
use actix_web::middleware::DefaultHeaders;
use actix_web::web;
use metrics::MetricsSource;

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

/// The admin boundary: the admin API and `GET /openapi.json`, `/metrics`
/// and the web client at `/ui`. Clone it into an `HttpServer` factory and
/// mount it with `App::new().configure(|cfg| routes.configure(cfg))`.
#[derive(Clone)]
pub struct AdminRoutes {
    metrics: web::Data<MetricsSource>,
    admin: web::Data<Admin>,
}

impl AdminRoutes {
    /// Routes over `admin` (authorization, audit, actions) and `metrics`
    /// (what `/metrics` reads).
    pub fn new(admin: Admin, metrics: MetricsSource) -> Self {
        Self {
            metrics: web::Data::new(metrics),
            admin: web::Data::new(admin),
        }
    }

    /// Mount every admin route.
    pub fn configure(&self, cfg: &mut web::ServiceConfig) {
        admin::configure(cfg, self.admin.clone());
        metrics::configure(cfg, self.metrics.clone());
        ui::configure(cfg);
    }
}
