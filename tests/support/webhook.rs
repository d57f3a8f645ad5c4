//! A webhook receiver for the notification tests: a tokio listener on
//! 127.0.0.1:0 that records every POST, answers a settable status, and can
//! hold the next request unanswered (the barrier "a delivery is in
//! flight").

use backfill::notify::Body;
use std::sync::atomic::AtomicU16;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

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
    /// `http://127.0.0.1:PORT/hooks/backfill`.
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
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!(
            "http://{}/hooks/backfill",
            listener.local_addr().expect("addr")
        );
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
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let (got, status, hold, arrived) =
                    (got.clone(), status.clone(), hold.clone(), arrived.clone());
                tokio::spawn(async move {
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

async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<Received> {
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
