//! One signed HTTP/1.1 POST to a webhook, over a plain TCP connection.
//!
//! Plain HTTP only: the library's build without the `http` feature must
//! not depend on an HTTP client stack, and a webhook behind TLS is reached
//! through a TLS-terminating proxy (documented in the README). Nothing
//! here says the URL or the secret in an error: the error is stored in the
//! outbox and shown by the admin API.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The header carrying `sha256=<hex HMAC-SHA256 of the body>`.
pub const SIGNATURE_HEADER: &str = "X-Backfill-Signature";

/// The most of the answer read to find its status line.
const MAX_STATUS_BYTES: usize = 8192;

/// `sha256=` and the lowercase hex HMAC-SHA256 of `body` under `secret`.
pub fn sign(secret: &[u8], body: &[u8]) -> String {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => unreachable!("HMAC accepts keys of any length"),
    };
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Where a target's POSTs go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    host: String,
    port: u16,
    /// Path and query, starting with `/`.
    path: String,
}

impl Endpoint {
    /// Parse `http://host[:port][/path]`; the error says what is wrong
    /// without repeating the URL.
    pub(crate) fn parse(url: &str) -> Result<Endpoint, String> {
        let rest = if let Some(rest) = url.strip_prefix("http://") {
            rest
        } else if url.starts_with("https://") {
            return Err(
                "https is not spoken by this sender: put a TLS-terminating proxy in \
                 front of the receiver and give its http:// address"
                    .into(),
            );
        } else {
            return Err("must be an http:// URL".into());
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('/') => (&rest[..i], rest[i..].to_string()),
            Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
            None => (rest, "/".to_string()),
        };
        if authority.contains('@') {
            return Err("must not carry credentials".into());
        }
        if path.contains('#') || path.bytes().any(|b| b.is_ascii_whitespace() || b < 0x20) {
            return Err("has a fragment or whitespace in its path".into());
        }
        let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
            let (host, rest) = bracketed
                .split_once(']')
                .ok_or_else(|| "has an unclosed IPv6 bracket".to_string())?;
            match rest {
                "" => (host, 80),
                _ => (host, port_of(rest.strip_prefix(':').unwrap_or("?"))?),
            }
        } else {
            match authority.split_once(':') {
                Some((host, port)) => (host, port_of(port)?),
                None => (authority, 80),
            }
        };
        if host.is_empty() || port == 0 {
            return Err("has no host or port".into());
        }
        Ok(Endpoint {
            host: host.to_string(),
            port,
            path,
        })
    }
}

fn port_of(text: &str) -> Result<u16, String> {
    text.parse().map_err(|_| "has an invalid port".to_string())
}

/// POST `body` with `headers` and answer the response's status code, all
/// within `timeout`; a failure is a short description for the outbox.
pub(crate) async fn post(
    endpoint: &Endpoint,
    headers: &[(&str, String)],
    body: &[u8],
    timeout: Duration,
) -> Result<u16, String> {
    match tokio::time::timeout(timeout, exchange(endpoint, headers, body)).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
    }
}

async fn exchange(
    endpoint: &Endpoint,
    headers: &[(&str, String)],
    body: &[u8],
) -> Result<u16, String> {
    let mut stream = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|e| format!("cannot connect: {}", io_kind(&e)))?;
    let host = if endpoint.host.contains(':') {
        format!("[{}]:{}", endpoint.host, endpoint.port)
    } else {
        format!("{}:{}", endpoint.host, endpoint.port)
    };
    let mut head = format!(
        "POST {} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nUser-Agent: backfill\r\nConnection: close\r\n",
        endpoint.path,
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    stream
        .write_all(&request)
        .await
        .map_err(|e| format!("cannot send: {}", io_kind(&e)))?;
    let mut answer = Vec::with_capacity(256);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = answer.windows(2).position(|w| w == b"\r\n") {
            return status_code(&answer[..end]).ok_or_else(|| "not an HTTP answer".to_string());
        }
        if answer.len() >= MAX_STATUS_BYTES {
            return Err("not an HTTP answer".into());
        }
        let n = stream
            .read(&mut chunk)
            .await
            .map_err(|e| format!("cannot read the answer: {}", io_kind(&e)))?;
        if n == 0 {
            return Err("connection closed before an answer".into());
        }
        answer.extend_from_slice(&chunk[..n]);
    }
}

/// `HTTP/1.x NNN ...` -> NNN.
fn status_code(line: &[u8]) -> Option<u16> {
    let line = std::str::from_utf8(line).ok()?;
    let mut parts = line.split(' ');
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let code: u16 = parts.next()?.parse().ok()?;
    (100..=599).contains(&code).then_some(code)
}

/// The kind of an I/O error, in words that never carry the address.
fn io_kind(e: &std::io::Error) -> String {
    format!("{:?}", e.kind()).to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_refuse() {
        let e = Endpoint::parse("http://127.0.0.1:8088/hooks/a?x=1").expect("parse");
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("127.0.0.1", 8088, "/hooks/a?x=1")
        );
        let e = Endpoint::parse("http://hooks.internal").expect("parse");
        assert_eq!((e.port, e.path.as_str()), (80, "/"));
        let e = Endpoint::parse("http://[::1]:81/x").expect("parse");
        assert_eq!((e.host.as_str(), e.port), ("::1", 81));
        let e = Endpoint::parse("http://[::1]/x").expect("parse");
        assert_eq!((e.host.as_str(), e.port), ("::1", 80));
        for bad in [
            "http://::1/",
            "ftp://x/",
            "https://x/",
            "http://",
            "http://u:p@x/",
            "http://x:0/",
            "http://x:port/",
            "http://x/a b",
            "x",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    /// RFC 4231 test case 2.
    #[test]
    fn signature_is_hmac_sha256() {
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn status_lines() {
        assert_eq!(status_code(b"HTTP/1.1 204 No Content"), Some(204));
        assert_eq!(status_code(b"HTTP/1.0 503"), Some(503));
        assert_eq!(status_code(b"SSH-2.0"), None);
    }
}
