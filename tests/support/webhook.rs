//! A webhook receiver for the notification tests: a tokio listener on
//! 127.0.0.1:0 that records every POST, answers a settable status, and can
//! hold the next request unanswered (the barrier "a delivery is in
//! flight"). [`Receiver::start_tls`] speaks TLS with a certificate of a
//! [`TestCa`] made for the test.

use backfill::notify::Body;
use std::sync::atomic::AtomicU16;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

/// A CA made at test time and a server certificate it issued for
/// `localhost` and 127.0.0.1, for an https receiver.
pub struct TestCa {
    /// The CA certificate, PEM: what the sender is told to trust.
    pub ca_pem: String,
    server: Arc<rustls::ServerConfig>,
}

impl TestCa {
    pub fn new() -> TestCa {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        ca.distinguished_name
            .push(DnType::CommonName, "backfill test CA");
        let ca_cert = ca.self_signed(&ca_key).expect("CA certificate");
        let issuer = Issuer::new(ca, ca_key);
        let key = KeyPair::generate().expect("server key");
        let mut params = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".into()])
            .expect("server params");
        params
            .distinguished_name
            .push(DnType::CommonName, "localhost");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.signed_by(&key, &issuer).expect("server certificate");
        // The provider the sender uses (deprecated only for lacking
        // post-quantum key exchange, see src/notify/post.rs).
        #[allow(deprecated)]
        let provider = rustls::crypto::ring::default_provider();
        let server = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .expect("protocol versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .expect("server config");
        TestCa {
            ca_pem: ca_cert.pem(),
            server: Arc::new(server),
        }
    }
}

/// A connection the receiver reads a request from: plain or TLS.
trait Conn: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Conn for T {}

/// One request the receiver got.
#[derive(Debug, Clone)]
pub struct Received {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn body(&self) -> Body {
        serde_json::from_slice(&self.body).expect("documented body")
    }
}

/// A webhook receiver: records every request, answers `status`, and
/// holds the next request unanswered while a hold is set.
pub struct Receiver {
    /// `http://127.0.0.1:PORT/hooks/backfill` (`https://` from
    /// [`Receiver::start_tls`]).
    pub url: String,
    got: Arc<Mutex<Vec<Received>>>,
    /// The status every answer has.
    pub status: Arc<AtomicU16>,
    hold: Arc<Mutex<Option<tokio::sync::oneshot::Receiver<()>>>>,
    /// Notified once per request received.
    pub arrived: Arc<tokio::sync::Notify>,
}

impl Receiver {
    pub async fn start(status: u16) -> Receiver {
        Self::listen(status, None).await
    }

    /// A receiver that speaks only TLS, with `ca`'s server certificate.
    pub async fn start_tls(status: u16, ca: &TestCa) -> Receiver {
        Self::listen(status, Some(ca.server.clone())).await
    }

    async fn listen(status: u16, tls: Option<Arc<rustls::ServerConfig>>) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!(
            "{}://{}/hooks/backfill",
            if tls.is_some() { "https" } else { "http" },
            listener.local_addr().expect("addr")
        );
        let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
        let r = Receiver {
            url,
            got: Arc::default(),
            status: Arc::new(AtomicU16::new(status)),
            hold: Arc::default(),
            arrived: Arc::default(),
        };
        let (got, status, hold, arrived) = (
            r.got.clone(),
            r.status.clone(),
            r.hold.clone(),
            r.arrived.clone(),
        );
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (got, status, hold, arrived, acceptor) = (
                    got.clone(),
                    status.clone(),
                    hold.clone(),
                    arrived.clone(),
                    acceptor.clone(),
                );
                tokio::spawn(async move {
                    let mut stream: Box<dyn Conn> = match acceptor {
                        // A client that refuses the certificate ends the
                        // handshake: nothing is received.
                        Some(acceptor) => match acceptor.accept(tcp).await {
                            Ok(tls) => Box::new(tls),
                            Err(_) => return,
                        },
                        None => Box::new(tcp),
                    };
                    let Some(request) = read_request(&mut stream).await else {
                        return;
                    };
                    got.lock().expect("lock").push(request);
                    arrived.notify_one();
                    let held = hold.lock().expect("lock").take();
                    if let Some(release) = held {
                        let _ = release.await;
                    }
                    let code = status.load(Ordering::SeqCst);
                    let answer = format!(
                        "HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        r
    }

    pub fn got(&self) -> Vec<Received> {
        self.got.lock().expect("lock").clone()
    }

    /// Hold the next request unanswered until the returned sender fires.
    pub fn hold_next(&self) -> tokio::sync::oneshot::Sender<()> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        *self.hold.lock().expect("lock") = Some(rx);
        tx
    }
}

async fn read_request(stream: &mut (impl AsyncRead + Unpin)) -> Option<Received> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).ok()?;
    let mut lines = head.split("\r\n");
    assert!(lines.next()?.starts_with("POST /hooks/backfill HTTP/1.1"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))?
        .1
        .parse()
        .ok()?;
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Received { headers, body })
}
