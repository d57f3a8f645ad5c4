//! Where a request comes from (AUTH-3): the hostnames of `Host` headers
//! and origins as they are compared, the trusted-network allow-list, and
//! whether a request was sent by a page of another site.

use super::auth::AuthError;
use super::request::RequestMeta;
use crate::repair::bounded;

/// The hostname of a `Host` header or an origin's authority, without its
/// port, brackets or a trailing dot, in lower case; `None` when it is not
/// one (an unclosed bracket, an empty name).
pub(crate) fn hostname(authority: &str) -> Option<String> {
    let authority = authority.trim();
    let name = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.strip_prefix(':').is_some_and(is_port)) {
            return None;
        }
        inside
    } else if authority.matches(':').count() > 1 {
        // A bare IPv6 address: an allow-list entry, never a valid Host.
        authority
    } else {
        match authority.split_once(':') {
            Some((name, port)) if is_port(port) => name,
            Some(_) => return None,
            None => authority,
        }
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    let allowed = |b: u8| b.is_ascii_alphanumeric() || b"-._:".contains(&b);
    (!name.is_empty() && name.bytes().all(allowed)).then_some(name)
}

fn is_port(text: &str) -> bool {
    !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit())
}

/// An allow-list entry for trusted-network mode (AUTH-3) as it is
/// compared: a hostname or address, lower case, without a port (one given
/// is ignored: a rebinding page names its own host, whatever the port).
#[doc(hidden)]
pub fn allowed_host(entry: &str) -> Result<String, AuthError> {
    hostname(entry).ok_or_else(|| {
        AuthError::Config(format!(
            "allowed host {:?} is not a hostname or an address",
            bounded(entry)
        ))
    })
}

/// The `Host` forms every admin boundary answers to in trusted-network
/// mode: the loopback names a local browser or tool uses.
#[doc(hidden)]
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Whether a request's `Origin` or `Sec-Fetch-Site` says it was sent by a
/// page of another site (AUTH-3). `Sec-Fetch-Site` values other than
/// `same-origin` and `none` (the user typed it) count; an `Origin` counts
/// unless its scheme is http(s) and its host and port are the `Host` the
/// request was sent to; `Origin: null` (a sandboxed or opaque page) counts.
pub(super) fn cross_site(meta: &RequestMeta<'_>) -> bool {
    if let Some(site) = meta.fetch_site {
        let site = site.trim();
        if !(site.eq_ignore_ascii_case("same-origin") || site.eq_ignore_ascii_case("none")) {
            return true;
        }
    }
    let Some(origin) = meta.origin else {
        return false;
    };
    let origin = origin.trim();
    let (authority, default_port) = if let Some(rest) = origin.strip_prefix("http://") {
        (rest, "80")
    } else if let Some(rest) = origin.strip_prefix("https://") {
        (rest, "443")
    } else {
        return true;
    };
    let Some(host) = meta.host else {
        return true;
    };
    let with_port = |authority: &str| -> Option<(String, String)> {
        let name = hostname(authority)?;
        let port = match authority.rsplit_once(':') {
            Some((_, port)) if is_port(port) => port.to_string(),
            _ => default_port.to_string(),
        };
        Some((name, port))
    };
    match (with_port(authority), with_port(host.trim())) {
        (Some(a), Some(b)) => a != b,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta<'a>(
        host: Option<&'a str>,
        origin: Option<&'a str>,
        site: Option<&'a str>,
    ) -> RequestMeta<'a> {
        RequestMeta {
            host,
            origin,
            fetch_site: site,
            ..Default::default()
        }
    }

    /// AUTH-3: a Host or origin authority is compared by its hostname in
    /// lower case, without port, brackets or a trailing dot; what is no
    /// hostname matches nothing.
    #[test]
    fn auth03_hostnames_are_compared_without_port_or_case() {
        let name = |s: &str| hostname(s);
        assert_eq!(name("LocalHost.:8081").as_deref(), Some("localhost"));
        assert_eq!(name("[::1]:8081").as_deref(), Some("::1"));
        assert_eq!(name("::1").as_deref(), Some("::1"));
        assert_eq!(name("127.0.0.1").as_deref(), Some("127.0.0.1"));
        for bad in [
            "",
            ":80",
            "[::1",
            "[::1]x",
            "a b",
            "evil.example:x",
            "user@host",
            "h:123456",
        ] {
            assert_eq!(name(bad), None, "{bad}");
        }
        assert_eq!(
            allowed_host("Admin.Internal:9000").expect("a host"),
            "admin.internal"
        );
        assert!(allowed_host("not a host").is_err());
    }

    /// AUTH-3: what counts as sent by another site: `Sec-Fetch-Site`
    /// other than `same-origin` or `none`, an `Origin` that is not this
    /// Host's (scheme default ports compared as such), `Origin: null`, or
    /// an origin with no Host to compare it with. No header says nothing.
    #[test]
    fn auth03_cross_site_is_what_origin_or_fetch_site_says() {
        let h = Some("127.0.0.1:8081");
        assert!(!cross_site(&meta(h, None, None)));
        assert!(!cross_site(&meta(h, None, Some("same-origin"))));
        assert!(!cross_site(&meta(h, None, Some("none"))));
        assert!(cross_site(&meta(h, None, Some("cross-site"))));
        assert!(cross_site(&meta(h, None, Some("same-site"))));
        assert!(!cross_site(&meta(h, Some("http://127.0.0.1:8081"), None)));
        assert!(!cross_site(&meta(
            Some("admin"),
            Some("http://ADMIN:80"),
            None
        )));
        assert!(!cross_site(&meta(
            Some("admin:443"),
            Some("https://admin"),
            None
        )));
        assert!(cross_site(&meta(h, Some("http://127.0.0.1:8082"), None)));
        assert!(cross_site(&meta(
            h,
            Some("https://127.0.0.1:8081.evil"),
            None
        )));
        assert!(cross_site(&meta(h, Some("null"), None)));
        assert!(cross_site(&meta(h, Some("file://"), None)));
        assert!(cross_site(&meta(None, Some("http://127.0.0.1:8081"), None)));
    }
}
