//! One signed HTTP/1.1 POST to a webhook, over plain TCP (`http://`) or
//! TLS (`https://`).
//!
//! TLS is rustls with the ring provider, set on the client configuration
//! itself so no process-wide default provider is needed. The receiver's
//! certificate is verified against Mozilla's roots (`webpki-roots`) plus
//! the CA certificates of [`super::NotifyConfig::ca_file`], and must name
//! the URL's host. Nothing here says the URL or the secret in an error:
//! the error is stored in the outbox and shown by the admin API, so TLS
//! failures are reduced to a fixed phrase per kind.

use hmac::{Hmac, Mac};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use sha2::Sha256;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
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
    /// `https://`: the POST goes over TLS.
    tls: bool,
    host: String,
    port: u16,
    /// Path and query, starting with `/`.
    path: String,
}

impl Endpoint {
    /// Parse `http://host[:port][/path]` or `https://host[:port][/path]`
    /// (default ports 80 and 443); the error says what is wrong without
    /// repeating the URL.
    pub(crate) fn parse(url: &str) -> Result<Endpoint, String> {
        let (tls, rest) = if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else {
            return Err("must be an http:// or https:// URL".into());
        };
        let default_port = if tls { 443 } else { 80 };
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
                "" => (host, default_port),
                _ => (host, port_of(rest.strip_prefix(':').unwrap_or("?"))?),
            }
        } else {
            match authority.split_once(':') {
                Some((host, port)) => (host, port_of(port)?),
                None => (authority, default_port),
            }
        };
        if host.is_empty() || port == 0 {
            return Err("has no host or port".into());
        }
        if tls && ServerName::try_from(host).is_err() {
            // Checked here so a bad name stops startup rather than
            // failing every try.
            return Err("has a host that is not a valid TLS server name".into());
        }
        Ok(Endpoint {
            tls,
            host: host.to_string(),
            port,
            path,
        })
    }

    /// The `Host` header: the port only when it is not the scheme's
    /// default, IPv6 addresses in brackets.
    fn host_header(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        if self.port == if self.tls { 443 } else { 80 } {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }
}

/// The TLS client configuration of every https target: Mozilla's roots
/// plus `extra` CA certificates, ring as the provider, TLS 1.2 and 1.3.
/// The error is a short reason for the configuration error.
pub(crate) fn tls_config(extra: &[CertificateDer<'static>]) -> Result<Arc<ClientConfig>, String> {
    let mut roots = RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    for (i, cert) in extra.iter().enumerate() {
        roots
            .add(cert.clone())
            .map_err(|_| format!("certificate {} is not a usable CA certificate", i + 1))?;
    }
    let mut config = ClientConfig::builder_with_provider(Arc::new(ring_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|_| "the TLS provider offers no safe protocol version".to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// rustls's ring provider. rustls marks it deprecated for lacking
/// post-quantum key exchange; it is used anyway because it builds with a
/// plain Rust toolchain (aws-lc-rs needs a C build), and a notification
/// (IDs, a state, a bounded diagnostic) is not a long-lived secret that
/// "record now, decrypt later" would threaten.
#[allow(deprecated)]
fn ring_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

fn port_of(text: &str) -> Result<u16, String> {
    text.parse().map_err(|_| "has an invalid port".to_string())
}

/// POST `body` with `headers` and answer the response's status code, all
/// within `timeout` (connect, TLS handshake, send, status line); a
/// failure is a short description for the outbox. `tls` is used for an
/// `https://` endpoint.
pub(crate) async fn post(
    endpoint: &Endpoint,
    tls: &Arc<ClientConfig>,
    headers: &[(&str, String)],
    body: &[u8],
    timeout: Duration,
) -> Result<u16, String> {
    match tokio::time::timeout(timeout, exchange(endpoint, tls, headers, body)).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {} ms", timeout.as_millis())),
    }
}

async fn exchange(
    endpoint: &Endpoint,
    tls: &Arc<ClientConfig>,
    headers: &[(&str, String)],
    body: &[u8],
) -> Result<u16, String> {
    let stream = TcpStream::connect((endpoint.host.as_str(), endpoint.port))
        .await
        .map_err(|e| format!("cannot connect: {}", io_kind(&e)))?;
    let mut head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nUser-Agent: backfill\r\nConnection: close\r\n",
        endpoint.path,
        endpoint.host_header(),
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    if !endpoint.tls {
        return converse(stream, &request).await;
    }
    let name = ServerName::try_from(endpoint.host.clone())
        .map_err(|_| "tls handshake failed: invalid server name".to_string())?;
    let stream = tokio_rustls::TlsConnector::from(tls.clone())
        .connect(name, stream)
        .await
        .map_err(|e| format!("tls handshake failed: {}", io_kind(&e)))?;
    converse(stream, &request).await
}

/// Send `request` and read up to the status line.
async fn converse<S>(mut stream: S, request: &[u8]) -> Result<u16, String>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    stream
        .write_all(request)
        .await
        .map_err(|e| format!("cannot send: {}", io_kind(&e)))?;
    // TLS buffers records: flush so the request leaves now.
    stream
        .flush()
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

/// The kind of an I/O error, in words that never carry the address: a
/// TLS failure by its rustls kind, anything else by its I/O kind.
fn io_kind(e: &std::io::Error) -> String {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => tls_kind(tls).to_string(),
        None => format!("{:?}", e.kind()).to_lowercase(),
    }
}

/// A fixed phrase per kind of TLS failure. The rustls error's own text
/// can name the host (`NotValidForNameContext`), so it is never used.
#[allow(deprecated)] // Matching the deprecated variants too is harmless.
fn tls_kind(e: &rustls::Error) -> &'static str {
    use rustls::Error;
    match e {
        Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => {
                "certificate not trusted"
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                "certificate expired"
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                "certificate not yet valid"
            }
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                "certificate not valid for the host"
            }
            CertificateError::Revoked => "certificate revoked",
            CertificateError::BadEncoding => "certificate malformed",
            _ => "certificate rejected",
        },
        Error::NoCertificatesPresented => "no certificate presented",
        Error::AlertReceived(_) => "the receiver sent a TLS alert",
        Error::PeerIncompatible(_) => "no TLS version or cipher in common",
        Error::InappropriateMessage { .. }
        | Error::InappropriateHandshakeMessage { .. }
        | Error::InvalidMessage(_)
        | Error::PeerMisbehaved(_)
        | Error::PeerSentOversizedRecord => "not a valid TLS peer",
        _ => "tls error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ntf03_endpoints_parse_and_refuse() {
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
        assert!(!e.tls);
        for bad in [
            "http://::1/",
            "ftp://x/",
            "HTTPS://x/",
            "wss://x/",
            "http://",
            "https://",
            "http://u:p@x/",
            "https://u:p@x/",
            "https://token@x/",
            "http://x:0/",
            "https://x:0/",
            "http://x:port/",
            "https://x:99999/",
            "http://x/a b",
            "https://x/a#frag",
            "https://bad_host!/x",
            "x",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    /// NTF-1: `https://` is accepted, on 443 unless a port is given.
    #[test]
    fn ntf01_https_endpoints_default_to_port_443() {
        let e = Endpoint::parse("https://hooks.slack.com/services/T0/B0/x").expect("parse");
        assert!(e.tls);
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("hooks.slack.com", 443, "/services/T0/B0/x")
        );
        assert_eq!(e.host_header(), "hooks.slack.com");
        let e = Endpoint::parse("https://127.0.0.1:8443?x=1").expect("parse");
        assert_eq!(
            (e.host.as_str(), e.port, e.path.as_str()),
            ("127.0.0.1", 8443, "/?x=1")
        );
        assert_eq!(e.host_header(), "127.0.0.1:8443");
        let e = Endpoint::parse("https://[::1]/x").expect("parse");
        assert_eq!((e.host.as_str(), e.port), ("::1", 443));
        assert_eq!(e.host_header(), "[::1]");
        let e = Endpoint::parse("http://[::1]:81/x").expect("parse");
        assert_eq!(e.host_header(), "[::1]:81");
    }

    /// NTF-3: a TLS failure is stored as a fixed phrase; the rustls
    /// error's own text, which can name the host, is not used.
    #[test]
    fn ntf03_tls_failures_are_fixed_phrases() {
        let untrusted = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        assert_eq!(io_kind(&untrusted), "certificate not trusted");
        let name = rustls::Error::InvalidCertificate(CertificateError::NotValidForNameContext {
            expected: ServerName::try_from("hooks.internal").expect("name"),
            presented: vec!["other.internal".into()],
        });
        assert!(name.to_string().contains("hooks.internal"));
        assert_eq!(tls_kind(&name), "certificate not valid for the host");
        let plain = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(io_kind(&plain), "connectionrefused");
    }

    /// NTF-1: the extra CA file's certificates must be CA certificates
    /// rustls can use; the Mozilla roots are always there.
    #[test]
    fn ntf01_tls_config_takes_the_public_roots_and_refuses_garbage() {
        tls_config(&[]).expect("the public roots alone");
        let garbage = CertificateDer::from(vec![0x30, 0x03, 0x02, 0x01, 0x00]);
        let e = tls_config(&[garbage]).expect_err("not a certificate");
        assert!(e.contains("certificate 1"), "{e}");
    }

    /// RFC 4231 test case 2.
    #[test]
    fn ntf02_signature_is_hmac_sha256() {
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn ntf02_status_lines() {
        assert_eq!(status_code(b"HTTP/1.1 204 No Content"), Some(204));
        assert_eq!(status_code(b"HTTP/1.0 503"), Some(503));
        assert_eq!(status_code(b"SSH-2.0"), None);
    }
}
