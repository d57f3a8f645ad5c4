//! The monitor: one task per process that reads every signal on an
//! interval while batches need them, and keeps the latest snapshot.

use super::{HealthCheck, HealthConfig, Reading, Snapshot, MAX_REASON_BYTES, MIN_INTERVAL};
use crate::failure::cut;
use crate::store::{
    self, HealthLockWaiters, HealthReplication, HealthTransactions, Pool, StoreError,
};
use chrono::{DateTime, Utc};
use diesel_async::AsyncPgConnection;
use futures_util::FutureExt;
use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why the privilege-dependent signals are unknown to a role that may not
/// see other roles' sessions and standbys.
const NO_PRIVILEGE: &str =
    "this role may not see other roles' sessions and standbys: grant it pg_monitor";
/// Why the WAL signals are unknown on a standby.
const IN_RECOVERY: &str = "the server is a standby in recovery: read it on the primary";

/// Reads the health signals on an interval and keeps the latest snapshot.
///
/// Readings follow demand: the loop reads every interval while runners
/// consult the signals ([`Monitor::for_batch`]) and for two intervals
/// after the last of them, then rests, so an idle database costs no health
/// statements. A batch that finds the
/// snapshot older than the interval (the first after a rest) reads afresh
/// before it is judged.
///
/// Every reading goes through the shared pool: one connection for the
/// database signals, its three statements pipelined (one round trip, each
/// failing on its own), and the application check beside it, each bounded
/// by [`HealthConfig::timeout`]. Readings never raise: whatever cannot be
/// read is [`Reading::Unknown`].
pub struct Monitor {
    pool: Pool,
    config: HealthConfig,
    tables: Vec<String>,
    check: Option<Arc<dyn HealthCheck>>,
    latest: parking_lot::Mutex<Option<Arc<Snapshot>>>,
    /// The previous WAL position and the server's clock at it. Also
    /// serializes readings, so concurrent callers of [`Monitor::run_once`]
    /// measure the WAL rate over consecutive readings.
    wal: tokio::sync::Mutex<Option<WalMark>>,
    /// When a batch last consulted the signals; `None` before the first.
    demanded: parking_lot::Mutex<Option<Instant>>,
}

/// A WAL position and when the server read it.
#[derive(Debug, Clone, Copy)]
struct WalMark {
    bytes: u64,
    at: DateTime<Utc>,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor")
            .field("config", &self.config)
            .field("tables", &self.tables)
            .field("check", &self.check.is_some())
            .finish_non_exhaustive()
    }
}

impl Monitor {
    /// A monitor of the server behind `pool`, watching lock waiters on
    /// `tables` (every repair's tables in the process; names as
    /// `to_regclass` takes them) and calling `check` if given. Validate
    /// `config` first ([`HealthConfig::validate`]); an interval below
    /// [`MIN_INTERVAL`] is raised to it here so [`Monitor::run`] cannot
    /// spin.
    pub fn new(
        pool: Pool,
        mut config: HealthConfig,
        tables: Vec<String>,
        check: Option<Arc<dyn HealthCheck>>,
    ) -> Self {
        config.interval = config.interval.max(MIN_INTERVAL);
        Monitor {
            pool,
            config,
            tables,
            check,
            latest: parking_lot::Mutex::new(None),
            wal: tokio::sync::Mutex::new(None),
            demanded: parking_lot::Mutex::new(None),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &HealthConfig {
        &self.config
    }

    /// The tables whose lock waiters are read.
    pub fn tables(&self) -> &[String] {
        &self.tables
    }

    /// The latest snapshot, if any reading finished yet.
    pub fn latest(&self) -> Option<Arc<Snapshot>> {
        self.latest.lock().clone()
    }

    /// The snapshot a batch is judged by (THR-1), and a demand that keeps
    /// the loop reading: the latest if it is at most one interval old,
    /// otherwise one read now. While batches ask, the loop keeps it so;
    /// a batch that comes while the loop's reading is under way waits
    /// for that reading rather than taking another.
    pub async fn for_batch(&self) -> Arc<Snapshot> {
        *self.demanded.lock() = Some(Instant::now());
        self.fresh(self.config.interval).await
    }

    /// The latest snapshot if it is at most `max_age` old, otherwise one
    /// read now (for a reader such as `/metrics` that shows the signals
    /// without running a batch on them: it asks for no further readings).
    pub async fn fresh(&self, max_age: Duration) -> Arc<Snapshot> {
        let young = |s: &Arc<Snapshot>| s.taken.elapsed() <= max_age;
        if let Some(snapshot) = self.latest().filter(young) {
            return snapshot;
        }
        // Callers that found it old together share one reading: whoever
        // waited for another's reading takes that one.
        let wal = self.wal.lock().await;
        match self.latest().filter(young) {
            Some(snapshot) => snapshot,
            None => self.read(wal).await,
        }
    }

    /// Whether a batch consulted the signals within the last two
    /// intervals: the loop reads only then. A runner between batches asks
    /// at least that often unless it waits out a retry's backoff, and
    /// then its next batch reads for itself.
    fn wanted(&self) -> bool {
        self.demanded
            .lock()
            .is_some_and(|at| at.elapsed() <= 2 * self.config.interval)
    }

    /// Read every signal once, keep the snapshot as the latest and return
    /// it. Takes at most about [`HealthConfig::timeout`] (after a reading
    /// already under way in another task).
    pub async fn run_once(&self) -> Arc<Snapshot> {
        let wal = self.wal.lock().await;
        self.read(wal).await
    }

    /// One reading, with the WAL mark held (see [`Monitor::run_once`]).
    async fn read(&self, mut wal: tokio::sync::MutexGuard<'_, Option<WalMark>>) -> Arc<Snapshot> {
        let taken = Instant::now();
        let at = Utc::now();
        let (database, application) =
            futures_util::join!(self.read_database(), self.read_application());
        let DatabaseReadings {
            replication,
            transactions,
            lock_waiters,
            lock_holders,
        } = database;

        let (lag_bytes, lag, standbys, wal_bytes_per_s) = match replication {
            Ok(r) => {
                let rate = wal_rate(&mut wal, &r);
                let (lag_bytes, lag, standbys) = replication_readings(&r);
                (lag_bytes, lag, standbys, rate)
            }
            // The previous mark stays: the next reading measures the rate
            // over the gap.
            Err(reason) => (
                Reading::Unknown(reason.clone()),
                Reading::Unknown(reason.clone()),
                Reading::Unknown(reason.clone()),
                Reading::Unknown(reason),
            ),
        };
        let xact_holder = transactions.as_ref().ok().and_then(holder);
        let xact_age = match transactions {
            Ok(t) if t.hidden > 0 => Reading::Unknown(NO_PRIVILEGE.into()),
            Ok(t) => Reading::Known(micros(t.oldest_us.unwrap_or(0))),
            Err(reason) => Reading::Unknown(reason),
        };
        let snapshot = Arc::new(Snapshot {
            taken,
            at,
            lag_bytes,
            lag,
            standbys,
            wal_bytes_per_s,
            xact_age,
            xact_holder,
            lock_waiters,
            lock_holders,
            application,
        });
        *self.latest.lock() = Some(snapshot.clone());
        snapshot
    }

    /// Read every [`HealthConfig::interval`] while batches ask for the
    /// signals (see [`Monitor::for_batch`]), until the task is aborted.
    /// A reading that outlasts the interval delays the next one rather
    /// than letting readings pile up.
    pub async fn run(self: Arc<Self>) {
        let mut ticks = tokio::time::interval(self.config.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            if self.wanted() {
                self.run_once().await;
            }
        }
    }

    /// The database signals, each statement's outcome on its own; a
    /// failure to get a connection or a timeout makes all of them unknown.
    async fn read_database(&self) -> DatabaseReadings {
        let (tables, invalid) = checked_tables(&self.tables);
        let read = async {
            let conn = self.pool.get().await.map_err(StoreError::from)?;
            let conn: &AsyncPgConnection = &conn;
            // Polled together, the three are sent before any answer is
            // awaited: one round trip.
            let (replication, transactions, locks) = futures_util::join!(
                store::health_read_replication(conn),
                store::health_read_transactions(conn),
                async {
                    if tables.is_empty() {
                        Ok(Vec::new())
                    } else {
                        store::health_count_lock_waiters(conn, &tables).await
                    }
                }
            );
            Ok::<_, StoreError>((replication, transactions, locks))
        };
        let (replication, transactions, locks) =
            match tokio::time::timeout(self.config.timeout, read).await {
                Ok(Ok(results)) => results,
                Ok(Err(e)) => return DatabaseReadings::unknown(&reason_of(&e)),
                Err(_) => {
                    return DatabaseReadings::unknown(&format!(
                        "reading the database took longer than {}",
                        super::evaluate::seconds_text(self.config.timeout.as_secs_f64())
                    ))
                }
            };
        let (lock_waiters, lock_holders) = match (invalid, locks) {
            (Some(reason), _) => (Reading::Unknown(reason), BTreeMap::new()),
            (None, Ok(rows)) => lock_readings(rows),
            (None, Err(e)) => (Reading::Unknown(reason_of(&e)), BTreeMap::new()),
        };
        DatabaseReadings {
            replication: replication.map_err(|e| reason_of(&e)),
            transactions: transactions.map_err(|e| reason_of(&e)),
            lock_waiters,
            lock_holders,
        }
    }

    /// The application check's answer, bounded in time; a panic in it is
    /// an unknown answer, not the end of the monitor.
    async fn read_application(&self) -> Option<Reading<Result<(), String>>> {
        let check = self.check.as_ref()?;
        let answer = tokio::time::timeout(
            self.config.timeout,
            AssertUnwindSafe(check.check()).catch_unwind(),
        )
        .await;
        Some(match answer {
            Ok(Ok(Ok(()))) => Reading::Known(Ok(())),
            Ok(Ok(Err(reason))) => Reading::Known(Err(cut(&reason, MAX_REASON_BYTES))),
            Ok(Err(_)) => Reading::Unknown("the application check panicked".into()),
            Err(_) => Reading::Unknown(format!(
                "the application check took longer than {}",
                super::evaluate::seconds_text(self.config.timeout.as_secs_f64())
            )),
        })
    }
}

/// The database's part of a snapshot, before the WAL rate is worked out.
struct DatabaseReadings {
    replication: Result<HealthReplication, String>,
    transactions: Result<HealthTransactions, String>,
    lock_waiters: Reading<BTreeMap<String, u64>>,
    lock_holders: BTreeMap<String, String>,
}

impl DatabaseReadings {
    fn unknown(reason: &str) -> Self {
        DatabaseReadings {
            replication: Err(reason.to_string()),
            transactions: Err(reason.to_string()),
            lock_waiters: Reading::Unknown(reason.to_string()),
            lock_holders: BTreeMap::new(),
        }
    }
}

/// A store error as a reading's reason: the store's redacted text.
fn reason_of(error: &StoreError) -> String {
    cut(&error.to_string(), MAX_REASON_BYTES)
}

/// The session holding the oldest transaction, as the throttle names it:
/// `pid 4242 (application "psql")`. The name is the session's own text,
/// so it is shown quoted with control characters escaped.
fn holder(t: &HealthTransactions) -> Option<String> {
    session_name(t.oldest_pid?, t.oldest_application.as_deref())
}

/// A session as a throttle's text names it: `pid N`, and its application
/// name when it has one.
fn session_name(pid: i32, application: Option<&str>) -> Option<String> {
    Some(match application {
        Some(name) => format!("pid {pid} (application {:?})", cut(name, 64)),
        None => format!("pid {pid}"),
    })
}

fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

/// Byte lag, time lag and the number of standbys from one reading.
fn replication_readings(
    r: &HealthReplication,
) -> (
    Reading<Option<u64>>,
    Reading<Option<Duration>>,
    Reading<usize>,
) {
    if r.hidden > 0 {
        return (
            Reading::Unknown(NO_PRIVILEGE.into()),
            Reading::Unknown(NO_PRIVILEGE.into()),
            Reading::Unknown(NO_PRIVILEGE.into()),
        );
    }
    let standbys = Reading::Known(usize::try_from(r.standbys).unwrap_or(0));
    if r.in_recovery {
        return (
            Reading::Unknown(IN_RECOVERY.into()),
            Reading::Unknown(IN_RECOVERY.into()),
            standbys,
        );
    }
    if r.standbys == 0 {
        return (Reading::Known(None), Reading::Known(None), standbys);
    }
    let lag_bytes = Reading::Known(Some(u64::try_from(r.lag_bytes.unwrap_or(0)).unwrap_or(0)));
    let lag = if r.unmeasured > 0 {
        Reading::Unknown(
            "a standby is behind and has no replay lag measured: PostgreSQL measures it only \
             while replay advances"
                .into(),
        )
    } else {
        Reading::Known(Some(micros(r.replay_lag_us.unwrap_or(0))))
    };
    (lag_bytes, lag, standbys)
}

/// The WAL rate since the previous mark, moving the mark to this reading.
/// The first reading, and one whose position or server clock did not move
/// forward (another server behind the same address, a clock step), starts
/// over.
fn wal_rate(mark: &mut Option<WalMark>, r: &HealthReplication) -> Reading<Option<u64>> {
    let Some(bytes) = r.wal_bytes.and_then(|b| u64::try_from(b).ok()) else {
        *mark = None;
        return Reading::Unknown(IN_RECOVERY.into());
    };
    let here = WalMark {
        bytes,
        at: r.read_at,
    };
    let rate = mark.and_then(|previous| {
        let seconds = (here.at - previous.at).num_microseconds()? as f64 / 1e6;
        (here.bytes >= previous.bytes && seconds > 0.0)
            .then(|| ((here.bytes - previous.bytes) as f64 / seconds).round() as u64)
    });
    *mark = Some(here);
    Reading::Known(rate)
}

/// Per-table waiters; a table that does not resolve cannot be watched,
/// which is a wrong name, not "nobody waits".
/// The waiters per table, and a session each table's waiters wait for.
fn lock_readings(
    rows: Vec<HealthLockWaiters>,
) -> (Reading<BTreeMap<String, u64>>, BTreeMap<String, String>) {
    let mut per_table = BTreeMap::new();
    let mut holders = BTreeMap::new();
    for row in rows {
        if !row.found {
            let reason = format!("table {:?} not found", cut(&row.name, 64));
            return (Reading::Unknown(reason), BTreeMap::new());
        }
        if let Some(pid) = row.blocker_pid {
            if let Some(name) = session_name(pid, row.blocker_application.as_deref()) {
                holders.insert(row.name.clone(), name);
            }
        }
        per_table.insert(row.name, u64::try_from(row.waiters).unwrap_or(0));
    }
    (Reading::Known(per_table), holders)
}

/// The tables to send (each once), or why the lock waiters cannot be
/// read: `to_regclass` raises on a malformed name, and one bad name must
/// not fail the reading of the others' signals.
fn checked_tables(tables: &[String]) -> (Vec<String>, Option<String>) {
    let mut out: Vec<String> = Vec::new();
    for table in tables {
        if !relation_name_ok(table) {
            return (
                Vec::new(),
                Some(format!(
                    "{:?} is not a table name (schema.table at most, quoted where needed)",
                    cut(table, 64)
                )),
            );
        }
        if !out.contains(table) {
            out.push(table.clone());
        }
    }
    (out, None)
}

/// Whether `to_regclass` takes `name` without raising: one or two
/// dot-separated parts (a third, the database, raises unless it is the
/// current one), each a run of characters other than dots and spaces or a
/// double-quoted identifier with `""` for a quote, spaces allowed around
/// the dots and ends. The rules of PostgreSQL's `SplitIdentifierString`.
fn relation_name_ok(name: &str) -> bool {
    let mut rest = name.trim_start();
    let mut parts = 0;
    loop {
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut inner = quoted;
            let mut len = 0;
            loop {
                let Some(end) = inner.find('"') else {
                    return false;
                };
                len += end;
                if inner[end + 1..].starts_with('"') {
                    len += 1;
                    inner = &inner[end + 2..];
                } else {
                    inner = &inner[end + 1..];
                    break;
                }
            }
            if len == 0 {
                return false;
            }
            rest = inner;
        } else {
            let end = rest
                .find(|c: char| c == '.' || c.is_whitespace())
                .unwrap_or(rest.len());
            if end == 0 {
                return false;
            }
            rest = &rest[end..];
        }
        parts += 1;
        rest = rest.trim_start();
        if rest.is_empty() {
            return parts <= 2;
        }
        match rest.strip_prefix('.') {
            Some(after) => rest = after.trim_start(),
            None => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replication() -> HealthReplication {
        HealthReplication {
            in_recovery: false,
            wal_bytes: Some(1_000),
            read_at: Utc::now(),
            hidden: 0,
            standbys: 0,
            lag_bytes: None,
            replay_lag_us: None,
            unmeasured: 0,
        }
    }

    #[test]
    fn thr01_relation_names_are_checked_as_postgresql_splits_them() {
        for ok in [
            "items",
            "public.items",
            " public . items ",
            "\"My Table\"",
            "s.\"a\"\"b\"",
            "a\"b",
        ] {
            assert!(relation_name_ok(ok), "{ok:?}");
        }
        for bad in [
            "",
            " ",
            "a.b.c",
            "a..b",
            ".a",
            "a.",
            "my table",
            "\"unterminated",
            "\"\"",
            "a.\"\"",
            "\"a\"b",
        ] {
            assert!(!relation_name_ok(bad), "{bad:?}");
        }
    }

    #[test]
    fn thr01_wal_rate_needs_two_readings_and_restarts_when_the_position_goes_back() {
        let mut mark = None;
        let mut r = replication();
        assert_eq!(wal_rate(&mut mark, &r), Reading::Known(None));
        r.wal_bytes = Some(1_000 + 3 * 1024 * 1024);
        r.read_at += chrono::Duration::milliseconds(500);
        assert_eq!(
            wal_rate(&mut mark, &r),
            Reading::Known(Some(6 * 1024 * 1024))
        );
        // Another server answered: start over.
        r.wal_bytes = Some(10);
        r.read_at += chrono::Duration::milliseconds(500);
        assert_eq!(wal_rate(&mut mark, &r), Reading::Known(None));
        // A standby has no position: unknown, and the mark is forgotten.
        r.wal_bytes = None;
        r.in_recovery = true;
        assert!(matches!(wal_rate(&mut mark, &r), Reading::Unknown(_)));
        assert!(mark.is_none());
    }

    #[test]
    fn thr02_hidden_standbys_make_replication_unknown_and_a_stalled_replay_has_no_time_lag() {
        let mut r = replication();
        assert_eq!(
            replication_readings(&r),
            (
                Reading::Known(None),
                Reading::Known(None),
                Reading::Known(0)
            )
        );
        r.hidden = 1;
        let (bytes, time, standbys) = replication_readings(&r);
        assert_eq!(bytes.reason(), Some(NO_PRIVILEGE));
        assert_eq!(time.reason(), Some(NO_PRIVILEGE));
        assert_eq!(standbys.reason(), Some(NO_PRIVILEGE));
        r.hidden = 0;
        r.standbys = 2;
        r.lag_bytes = Some(4096);
        r.unmeasured = 1;
        let (bytes, time, standbys) = replication_readings(&r);
        assert_eq!(bytes, Reading::Known(Some(4096)));
        assert!(time.reason().is_some());
        assert_eq!(standbys, Reading::Known(2));
        r.unmeasured = 0;
        r.replay_lag_us = Some(1_500_000);
        assert_eq!(
            replication_readings(&r).1,
            Reading::Known(Some(Duration::from_millis(1500)))
        );
    }
}
