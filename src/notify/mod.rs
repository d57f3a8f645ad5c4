//! Notifications of state changes to webhooks (NTF-1..NTF-3).
//!
//! The statements that change a backfill's state queue a row in the
//! outbox in the same statement (`store::OUTBOX_ENQUEUE`); one [`Sender`]
//! per fleet (an advisory lock) delivers each row at least once to its
//! target, signed, with a timeout, bounded retries and a dead state.
//! Targets are `http://` or `https://` URLs; over https the receiver's
//! certificate is verified against Mozilla's roots plus the optional
//! [`NotifyConfig::ca_file`].
//! Configuration: [`NotifyConfig`]; the body: [`Body`].

mod body;
mod post;
mod sender;

#[doc(hidden)]
pub use body::Body;
pub use post::{sign, SIGNATURE_HEADER};
#[doc(hidden)]
pub use sender::{Pass, Sender};

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The fewest bytes a target's secret may have.
pub const MIN_SECRET_BYTES: usize = 16;

/// The events a target may subscribe to.
pub const EVENTS: [&str; 6] = [
    "blocked",
    "failed",
    "completed",
    "validation_failed",
    "throttled",
    "undo_completed",
];

/// A target's signing secret. Its `Debug` never shows it.
#[derive(Clone)]
pub struct Secret(Vec<u8>);

impl Secret {
    /// A secret of these bytes; [`NotifyConfig::validate`] checks its
    /// length.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Secret(bytes.into())
    }

    /// A secret as kept in a file: one trailing newline (or CR LF) is not
    /// part of it.
    pub fn from_file_text(text: &[u8]) -> Self {
        let text = text.strip_suffix(b"\n").unwrap_or(text);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        Secret(text.to_vec())
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// One webhook: where notifications of which events go, signed with which
/// secret. The name (`[a-z0-9_-]{1,32}`) is what the database and the
/// admin API know of it; the URL and the secret stay in configuration.
#[derive(Clone)]
pub struct Target {
    /// The target's name (`[a-z0-9_-]{1,32}`), the only part of it the
    /// database, the logs and the admin API see (NTF-3).
    pub name: String,
    /// `http://host[:port][/path]` or `https://host[:port][/path]`
    /// (default ports 80 and 443). Over https the receiver's certificate
    /// must be valid for the host and chain to a public root or a
    /// certificate of [`NotifyConfig::ca_file`].
    pub url: String,
    /// Event names from [`EVENTS`].
    pub events: Vec<String>,
    /// The HMAC-SHA256 signing key of the bodies sent to this target
    /// (NTF-2); at least 16 bytes.
    pub secret: Secret,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The URL can carry credentials or tokens in its path: not logged.
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("events", &self.events)
            .finish_non_exhaustive()
    }
}

/// The notification sender's configuration. Without targets no sender
/// runs and nothing is queued.
#[derive(Debug, Clone)]
pub struct NotifyConfig {
    /// The webhooks to notify (NTF-1); none by default.
    pub targets: Vec<Target>,
    /// A PEM file of CA certificates trusted for `https://` targets
    /// besides Mozilla's roots (a private CA's receivers). Read when the
    /// sender is built. Default none.
    pub ca_file: Option<PathBuf>,
    /// How often the sender looks for due notifications. Default 1 s.
    pub interval: Duration,
    /// One delivery's bound: connect, TLS handshake, send, and the
    /// status line. Default 5 s.
    pub timeout: Duration,
    /// Tries per notification before it is dead. Default 8.
    pub max_attempts: u32,
    /// The delay after the first failed try, doubled per try up to
    /// `backoff_max`. Defaults 1 s and 5 min.
    pub backoff_base: Duration,
    /// The longest delay between two tries. Default 5 min.
    pub backoff_max: Duration,
    /// How long a throttle condition lasts before it is a `throttled`
    /// notification. Default 1 h.
    pub throttled_after: Duration,
    /// How long delivered and dead notifications stay in the outbox.
    /// Default 7 days.
    pub retention: Duration,
    /// How long the subscription the sender writes stays in force without
    /// being renewed: a fleet whose sender is gone for longer stops
    /// queueing. Default 7 days.
    pub subscription_ttl: Duration,
}

impl Default for NotifyConfig {
    fn default() -> Self {
        Self {
            targets: Vec::new(),
            ca_file: None,
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(5),
            max_attempts: 8,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(300),
            throttled_after: Duration::from_secs(3600),
            retention: Duration::from_secs(7 * 24 * 3600),
            subscription_ttl: Duration::from_secs(7 * 24 * 3600),
        }
    }
}

/// Errors of the notification layer.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// Invalid configuration; `field` names it (`targets[0].url`, ..).
    #[error("invalid notification configuration: {field}: {reason}")]
    Config {
        /// The setting that is invalid.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A statement of the outbox or the subscription failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

fn config_error(field: impl Into<String>, reason: impl Into<String>) -> NotifyError {
    NotifyError::Config {
        field: field.into(),
        reason: reason.into(),
    }
}

impl NotifyConfig {
    /// Check every field; the first problem names its field.
    pub fn validate(&self) -> Result<(), NotifyError> {
        let mut names = std::collections::BTreeSet::new();
        for (i, t) in self.targets.iter().enumerate() {
            let field = |f: &str| format!("targets[{i}].{f}");
            let name_ok = !t.name.is_empty()
                && t.name.len() <= 32
                && t.name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'
                });
            if !name_ok {
                return Err(config_error(field("name"), "must match [a-z0-9_-]{1,32}"));
            }
            if !names.insert(t.name.as_str()) {
                return Err(config_error(field("name"), "names another target's name"));
            }
            post::Endpoint::parse(&t.url).map_err(|reason| config_error(field("url"), reason))?;
            if t.events.is_empty() {
                return Err(config_error(field("events"), "names no event"));
            }
            if let Some(e) = t.events.iter().find(|e| !EVENTS.contains(&e.as_str())) {
                return Err(config_error(
                    field("events"),
                    format!(
                        "unknown event {:?} (known: {})",
                        crate::failure::cut(e, 40),
                        EVENTS.join(", ")
                    ),
                ));
            }
            if t.secret.bytes().len() < MIN_SECRET_BYTES {
                return Err(config_error(
                    field("secret"),
                    format!("must have at least {MIN_SECRET_BYTES} bytes"),
                ));
            }
        }
        let positive = [
            ("interval", self.interval),
            ("timeout", self.timeout),
            ("backoff_base", self.backoff_base),
            ("retention", self.retention),
            ("subscription_ttl", self.subscription_ttl),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, d)| d.is_zero()) {
            return Err(config_error(*name, "must be above zero"));
        }
        if self.backoff_max < self.backoff_base {
            return Err(config_error("backoff_max", "must be at least backoff_base"));
        }
        if !(1..=100).contains(&self.max_attempts) {
            return Err(config_error("max_attempts", "must be within 1..=100"));
        }
        self.tls()?;
        Ok(())
    }

    /// The TLS client configuration of the https targets: Mozilla's roots
    /// and the certificates of `ca_file`. Its errors name `ca_file`.
    pub(crate) fn tls(&self) -> Result<Arc<rustls::ClientConfig>, NotifyError> {
        let extra = match &self.ca_file {
            Some(path) => read_ca_file(path).map_err(|reason| config_error("ca_file", reason))?,
            None => Vec::new(),
        };
        post::tls_config(&extra).map_err(|reason| config_error("ca_file", reason))
    }
}

/// The certificates of a PEM file; other PEM sections (a key) are
/// skipped. The reason says what is wrong without the path, which the
/// caller knows.
fn read_ca_file(
    path: &std::path::Path,
) -> Result<Vec<rustls::pki_types::CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let text = std::fs::read(path).map_err(|e| {
        format!(
            "cannot be read: {}",
            format!("{:?}", e.kind()).to_lowercase()
        )
    })?;
    let certs = CertificateDer::pem_slice_iter(&text)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "is not a valid PEM file".to_string())?;
    if certs.is_empty() {
        return Err("holds no PEM certificate".into());
    }
    Ok(certs)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target() -> Target {
        Target {
            name: "ops".into(),
            url: "http://127.0.0.1:9/hook".into(),
            events: vec!["failed".into()],
            secret: Secret::new("0123456789abcdef"),
        }
    }

    fn field_of(config: &NotifyConfig) -> String {
        match config.validate() {
            Err(NotifyError::Config { field, .. }) => field,
            other => panic!("{other:?}"),
        }
    }

    /// Bad input names its field: a URL that is neither http nor https,
    /// an unknown event, a short secret, an unusable CA file.
    #[test]
    fn ntf03_bad_configuration_names_the_field() {
        let ok = NotifyConfig {
            targets: vec![target()],
            ..NotifyConfig::default()
        };
        ok.validate().expect("valid");
        let mut c = ok.clone();
        c.targets[0].url = "ftp://example/x".into();
        assert_eq!(field_of(&c), "targets[0].url");
        c.targets[0].url = "https://example/x".into();
        c.validate().expect("https is accepted");
        c.targets[0].url = "https://example:8443/x".into();
        c.validate().expect("https with a port is accepted");
        let mut c = ok.clone();
        c.targets[0].events = vec!["exploded".into()];
        assert_eq!(field_of(&c), "targets[0].events");
        let mut c = ok.clone();
        c.targets[0].secret = Secret::new("short");
        assert_eq!(field_of(&c), "targets[0].secret");
        let mut c = ok.clone();
        c.max_attempts = 0;
        assert_eq!(field_of(&c), "max_attempts");
        let mut c = ok;
        c.ca_file = Some("/nonexistent/backfill-ca.pem".into());
        assert_eq!(field_of(&c), "ca_file");
    }

    /// NTF-1: a CA file that cannot be read or holds no certificate stops
    /// startup naming `ca_file`, and the reason says which.
    #[test]
    fn ntf01_an_unusable_ca_file_names_the_field() {
        let dir = std::env::temp_dir().join(format!("backfill-ca-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).expect("dir");
        let reason_of = |text: Option<&[u8]>| {
            let path = dir.join("ca.pem");
            let _ = std::fs::remove_file(&path);
            if let Some(text) = text {
                std::fs::write(&path, text).expect("write");
            }
            let c = NotifyConfig {
                targets: vec![target()],
                ca_file: Some(path),
                ..NotifyConfig::default()
            };
            match c.validate() {
                Err(NotifyError::Config { field, reason }) => {
                    assert_eq!(field, "ca_file");
                    reason
                }
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(reason_of(None), "cannot be read: notfound");
        assert_eq!(reason_of(Some(b"")), "holds no PEM certificate");
        assert_eq!(
            reason_of(Some(
                b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
            )),
            "holds no PEM certificate"
        );
        assert_eq!(
            reason_of(Some(
                b"-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"
            )),
            "is not a valid PEM file"
        );
        assert_eq!(
            reason_of(Some(
                b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
            )),
            "certificate 1 is not a usable CA certificate"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Neither the secret nor the URL is in a target's `Debug`.
    #[test]
    fn ntf03_debug_hides_url_and_secret() {
        let text = format!("{:?}", target());
        assert!(!text.contains("0123456789abcdef") && !text.contains("127.0.0.1"));
    }

    #[test]
    fn ntf01_a_secret_file_loses_its_trailing_newline() {
        assert_eq!(Secret::from_file_text(b"abc\r\n").bytes(), b"abc");
        assert_eq!(Secret::from_file_text(b"abc").bytes(), b"abc");
    }
}
