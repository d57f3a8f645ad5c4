//! Health signals for throttling (THR-1, THR-2): what a runner consults
//! before every batch.
//!
//! One [`Monitor`] per process reads every signal on an interval and keeps
//! the latest [`Snapshot`], each reading with the time it was taken; a
//! runner never queries per batch, it judges the cached snapshot with
//! [`Snapshot::evaluate`] against its backfill's [`Thresholds`] (the
//! process's, overlaid with the backfill's live settings). The signals:
//!
//! - replication lag of every standby, in bytes of WAL
//!   (`pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)`, the main one)
//!   and in time (`replay_lag`, which PostgreSQL measures only while
//!   replay advances and keeps for seconds after a standby caught up, so
//!   a standby replayed up to the current WAL position counts 0);
//! - WAL generated per second, from the WAL position's growth between two
//!   readings;
//! - the age of the oldest open transaction of another client session of
//!   the database;
//! - sessions waiting for a lock on each of the repair's tables;
//! - an optional check the application supplies ([`HealthCheck`]).
//!
//! A signal that cannot be read (the role may not see it, the statement
//! failed, the server is a standby) is [`Reading::Unknown`] with a bounded
//! reason: never taken as healthy, never failing the other signals, and
//! handled by the stated [`UnknownPolicy`]. Throttling is a condition of
//! the runtime, not of the lifecycle (THR-2): a [`Verdict`] tells whether
//! the next batch may start and, if not, names the signal, its value and
//! its threshold.

mod evaluate;
mod monitor;

#[doc(hidden)]
pub use monitor::Monitor;

use crate::throttle::settings::{Field, Settings};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

/// Per-signal limits; `None` = signal not checked. A signal is past its
/// limit when its value is strictly greater.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Thresholds {
    /// Replication lag of any standby, in bytes of WAL not yet replayed.
    pub max_lag_bytes: Option<u64>,
    /// Replication lag of any standby, in time (`replay_lag`).
    pub max_lag: Option<Duration>,
    /// WAL generated per second, server-wide.
    pub max_wal_bytes_per_s: Option<u64>,
    /// Sessions waiting for a lock on the repair's tables, together.
    pub max_lock_waiters: Option<u64>,
    /// Age of the oldest open transaction of another client session.
    pub max_xact_age: Option<Duration>,
}

/// The replication lag limit in force unless configured otherwise: a
/// standby 64 MiB behind is minutes of replay on a slow replica, and
/// stopping there costs a healthy setup nothing.
pub const DEFAULT_MAX_LAG_BYTES: u64 = 64 << 20;

/// Every signal off except a conservative replication lag limit
/// ([`DEFAULT_MAX_LAG_BYTES`]): the other limits depend on the workload,
/// while falling standbys behind hurts every setup that has them.
impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            max_lag_bytes: Some(DEFAULT_MAX_LAG_BYTES),
            max_lag: None,
            max_wal_bytes_per_s: None,
            max_lock_waiters: None,
            max_xact_age: None,
        }
    }
}

impl Thresholds {
    /// No signal checked.
    pub fn none() -> Self {
        Thresholds {
            max_lag_bytes: None,
            max_lag: None,
            max_wal_bytes_per_s: None,
            max_lock_waiters: None,
            max_xact_age: None,
        }
    }

    /// These limits with one backfill's live settings laid over them
    /// (THR-4): each of `max_lag_bytes`, `max_lag_ms`,
    /// `max_wal_bytes_per_s`, `max_lock_waiters` and `max_xact_age_ms`
    /// that is set replaces the process's limit; an unset one keeps it.
    /// Settings cannot switch a process limit off (clearing a setting
    /// means "the default"); a large value does that.
    pub fn overlay(&self, settings: &Settings) -> Thresholds {
        let ms = |field| settings.get(field).map(Duration::from_millis);
        Thresholds {
            max_lag_bytes: settings.get(Field::MaxLagBytes).or(self.max_lag_bytes),
            max_lag: ms(Field::MaxLagMs).or(self.max_lag),
            max_wal_bytes_per_s: settings
                .get(Field::MaxWalBytesPerS)
                .or(self.max_wal_bytes_per_s),
            max_lock_waiters: settings
                .get(Field::MaxLockWaiters)
                .or(self.max_lock_waiters),
            max_xact_age: ms(Field::MaxXactAgeMs).or(self.max_xact_age),
        }
    }

    /// Each limit within the range an operator may set for it
    /// ([`Field::range`]), so a process default is never one a setting
    /// could not express.
    pub fn validate(&self) -> Result<(), HealthError> {
        let ms = |d: Option<Duration>| d.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        for (field, value) in [
            (Field::MaxLagBytes, self.max_lag_bytes),
            (Field::MaxLagMs, ms(self.max_lag)),
            (Field::MaxWalBytesPerS, self.max_wal_bytes_per_s),
            (Field::MaxLockWaiters, self.max_lock_waiters),
            (Field::MaxXactAgeMs, ms(self.max_xact_age)),
        ] {
            let (min, max) = field.range();
            if let Some(got) = value {
                if !(min..=max).contains(&got) {
                    return Err(HealthError::Threshold {
                        field: field.name(),
                        min,
                        max,
                        got,
                    });
                }
            }
        }
        Ok(())
    }

    /// Whether `signal` is checked under these limits. The application
    /// check has no limit here: it is checked whenever the monitor has one.
    pub fn checks(&self, signal: Signal) -> bool {
        match signal {
            Signal::ReplicationLagBytes => self.max_lag_bytes.is_some(),
            Signal::ReplicationLag => self.max_lag.is_some(),
            Signal::WalRate => self.max_wal_bytes_per_s.is_some(),
            Signal::LockWaiters => self.max_lock_waiters.is_some(),
            Signal::TransactionAge => self.max_xact_age.is_some(),
            Signal::Application => true,
            Signal::OutsideWindow | Signal::Latency => false,
        }
    }
}

/// What a runner does while a signal it checks cannot be read (THR-2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum UnknownPolicy {
    /// Judge by the signals that can be read and list the unknown ones in
    /// [`Verdict::Go`], so the runner says so. The default: a monitoring
    /// role missing a privilege should not stop every repair.
    #[default]
    Proceed,
    /// Hold the next batch as if the unknown signal were past its limit.
    Throttle,
}

impl UnknownPolicy {
    /// The policy's name in configuration and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            UnknownPolicy::Proceed => "proceed",
            UnknownPolicy::Throttle => "throttle",
        }
    }
}

/// The shortest reading interval: below it the readings would cost more
/// than the batches they guard.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);
/// The longest reading interval and read timeout: a minute-old reading no
/// longer guards anything.
pub const MAX_INTERVAL: Duration = Duration::from_secs(60);

/// The monitor's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthConfig {
    /// How often every signal is read (default 1 s; within
    /// [`MIN_INTERVAL`]..=[`MAX_INTERVAL`]).
    pub interval: Duration,
    /// How long one reading may take: the database statements (pool
    /// checkout included) and the application check each; past it the
    /// signal is unknown (default 2 s; within
    /// [`MIN_INTERVAL`]..=[`MAX_INTERVAL`]).
    pub timeout: Duration,
    /// The process's limits; a backfill's settings overlay them
    /// ([`Thresholds::overlay`]).
    pub thresholds: Thresholds,
    /// What an unknown signal does (default [`UnknownPolicy::Proceed`]).
    pub unknown: UnknownPolicy,
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            interval: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
            thresholds: Thresholds::default(),
            unknown: UnknownPolicy::Proceed,
        }
    }
}

impl HealthConfig {
    /// Check the interval, the timeout and every limit.
    pub fn validate(&self) -> Result<(), HealthError> {
        for (what, value) in [("interval", self.interval), ("timeout", self.timeout)] {
            if !(MIN_INTERVAL..=MAX_INTERVAL).contains(&value) {
                return Err(HealthError::Duration { what, value });
            }
        }
        self.thresholds.validate()
    }

    /// How old a snapshot may be before [`Snapshot::evaluate`] should
    /// count it as unknown: two missed readings, each allowed its timeout.
    pub fn stale_after(&self) -> Duration {
        2 * (self.interval + self.timeout)
    }
}

/// Why a health configuration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HealthError {
    /// The interval or timeout outside its range.
    #[error("health {what} must be between 10 ms and 60 s, got {value:?}")]
    Duration {
        /// Which one: `interval` or `timeout`.
        what: &'static str,
        /// The duration given.
        value: Duration,
    },
    /// A limit outside the range an operator may set.
    #[error("health threshold {field} must be between {min} and {max}, got {got}")]
    Threshold {
        /// The threshold's setting name (`max_lag_bytes`, ...).
        field: &'static str,
        /// The least value allowed, in the setting's unit, which its
        /// name's suffix states (`_ms`, `_bytes`, `_bytes_per_s`; a count
        /// without one).
        min: u64,
        /// The greatest value allowed.
        max: u64,
        /// The value given.
        got: u64,
    },
}

/// The application's own health check: `Err(reason)` = unhealthy, and the
/// reason (bounded to [`MAX_REASON_BYTES`]) is shown as the throttle's
/// text. Called once per interval by the monitor, never per batch, and
/// bounded by [`HealthConfig::timeout`]; a check that times out or panics
/// is unknown.
#[async_trait::async_trait]
pub trait HealthCheck: Send + Sync + 'static {
    /// Whether the application can take more load now.
    async fn check(&self) -> Result<(), String>;
}

/// Longest reason of an unknown reading or a failed application check,
/// in bytes; the throttle's whole text stays within the diagnostic bound.
pub const MAX_REASON_BYTES: usize = 200;

/// One health signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Replication lag of the standby furthest behind, in bytes.
    ReplicationLagBytes,
    /// Replication lag of the standby furthest behind, in time.
    ReplicationLag,
    /// WAL generated per second.
    WalRate,
    /// Sessions waiting for a lock on the repair's tables.
    LockWaiters,
    /// Age of the oldest open transaction of another session.
    TransactionAge,
    /// The application's own check.
    Application,
    /// Not a health signal: the backfill's run window is closed (FLT-3).
    /// The gate judges it before the health signals; it is not in
    /// [`Signal::ALL`] and has no reading.
    OutsideWindow,
    /// Not a health signal either: a latency budget holds the backfill
    /// below its full pace (THR-6). The gate judges it after the health
    /// signals; its value and threshold are the reading and the bound.
    Latency,
}

impl Signal {
    /// Every signal, in the order [`Snapshot::evaluate`] judges them.
    pub const ALL: [Signal; 6] = [
        Signal::ReplicationLagBytes,
        Signal::ReplicationLag,
        Signal::WalRate,
        Signal::LockWaiters,
        Signal::TransactionAge,
        Signal::Application,
    ];

    /// A bounded label for metrics, logs and the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::ReplicationLagBytes => "replication_lag_bytes",
            Signal::ReplicationLag => "replication_lag",
            Signal::WalRate => "wal_rate",
            Signal::LockWaiters => "lock_waiters",
            Signal::TransactionAge => "transaction_age",
            Signal::Application => "application",
            Signal::OutsideWindow => "outside_window",
            Signal::Latency => "latency",
        }
    }

    /// The unit of [`Throttle::value`] and [`Throttle::threshold`]:
    /// `bytes`, `seconds`, `bytes_per_second`, `sessions`, or empty for
    /// the application check, which has no number.
    pub fn unit(self) -> &'static str {
        match self {
            Signal::ReplicationLagBytes => "bytes",
            Signal::ReplicationLag | Signal::TransactionAge | Signal::Latency => "seconds",
            Signal::WalRate => "bytes_per_second",
            Signal::LockWaiters => "sessions",
            Signal::Application | Signal::OutsideWindow => "",
        }
    }
}

impl fmt::Display for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Signal::ReplicationLagBytes => "replication lag",
            Signal::ReplicationLag => "replication time lag",
            Signal::WalRate => "WAL rate",
            Signal::LockWaiters => "lock waiters",
            Signal::TransactionAge => "oldest transaction",
            Signal::Application => "application check",
            Signal::OutsideWindow => "run window",
            Signal::Latency => "latency budget",
        })
    }
}

/// Why a first WAL rate reading is unknown.
pub(super) const WAL_RATE_FIRST: &str = "the WAL rate needs two readings";

/// One signal's reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reading<T> {
    /// Read.
    Known(T),
    /// Not readable; the bounded reason carries no SQL and no row data.
    Unknown(String),
}

impl<T> Reading<T> {
    /// The value, if read.
    pub fn known(&self) -> Option<&T> {
        match self {
            Reading::Known(v) => Some(v),
            Reading::Unknown(_) => None,
        }
    }

    /// Why it is unknown, if it is.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Reading::Known(_) => None,
            Reading::Unknown(reason) => Some(reason),
        }
    }
}

/// Every signal as read at one moment.
#[derive(Debug, Clone, PartialEq)]
#[doc(hidden)]
pub struct Snapshot {
    /// When the reading started, for staleness.
    pub taken: Instant,
    /// The same moment on the wall clock, for display.
    pub at: DateTime<Utc>,
    /// The replication lag in bytes of the standby furthest behind;
    /// `None`: no standby.
    pub lag_bytes: Reading<Option<u64>>,
    /// The replication lag in time of the standby furthest behind;
    /// `None`: no standby.
    pub lag: Reading<Option<Duration>>,
    /// Standbys replaying from this server.
    pub standbys: Reading<usize>,
    /// WAL bytes per second since the previous reading; `None` until two
    /// readings give a difference.
    pub wal_bytes_per_s: Reading<Option<u64>>,
    /// Age of the oldest open transaction of another client session of
    /// the database (zero when there is none).
    pub xact_age: Reading<Duration>,
    /// Who holds that transaction, for the throttle's text: `pid N`, and
    /// the session's application name when it has one; `None` without an
    /// open transaction.
    pub xact_holder: Option<String>,
    /// Sessions waiting for a lock, per table name as given to the monitor.
    pub lock_waiters: Reading<BTreeMap<String, u64>>,
    /// For each table with waiters, a session they wait for, as the
    /// throttle's text names it (`pid N`, with its application name).
    pub lock_holders: BTreeMap<String, String>,
    /// The application check's answer; `None` without a check.
    pub application: Option<Reading<Result<(), String>>>,
}

impl Snapshot {
    /// Why `signal` is unknown in this snapshot, if it is (stale
    /// snapshots aside, which [`Snapshot::evaluate`] judges).
    pub fn reason(&self, signal: Signal) -> Option<&str> {
        match signal {
            Signal::ReplicationLagBytes => self.lag_bytes.reason(),
            Signal::ReplicationLag => self.lag.reason(),
            Signal::WalRate => match &self.wal_bytes_per_s {
                Reading::Known(None) => Some(WAL_RATE_FIRST),
                other => other.reason(),
            },
            Signal::LockWaiters => self.lock_waiters.reason(),
            Signal::TransactionAge => self.xact_age.reason(),
            Signal::Application => self.application.as_ref().and_then(Reading::reason),
            Signal::OutsideWindow | Signal::Latency => None,
        }
    }
}

/// Whether the next batch may start.
#[derive(Debug, Clone, PartialEq)]
#[doc(hidden)]
pub enum Verdict {
    /// It may; `unknown` lists the checked signals that could not be read
    /// (under [`UnknownPolicy::Proceed`]), in [`Signal::ALL`] order, so
    /// the runner can say it went ahead without them.
    Go { unknown: Vec<Signal> },
    /// It may not.
    Throttle(Throttle),
}

/// Why the next batch waits: the first signal past its limit in
/// [`Signal::ALL`] order, or, when none is and the policy throttles on
/// unknown signals, the first unknown one.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Throttle {
    /// The signal.
    pub signal: Signal,
    /// Its value in [`Signal::unit`]; `None` when it is unknown or has no
    /// number (the application check).
    pub value: Option<f64>,
    /// Its limit in [`Signal::unit`]; `None` for the application check.
    pub threshold: Option<f64>,
    /// For people, bounded to 512 bytes: "replication lag 48.0 MiB >
    /// 16.0 MiB", "replication lag unknown: ...", "application check:
    /// queue too deep".
    pub text: String,
}
