//! Health signals for throttling (THR-1, THR-2), read from real servers.
//!
//! Replication lag and what a standby or an unprivileged role can read
//! are tested on a throwaway primary with a real streaming standby
//! (`support::standby`); the signals that need no standby run on the test
//! server, in a database of their own (transaction age and lock waiters
//! are per database, so other tests' sessions do not count). Every wait
//! is for a condition (a session blocked behind a held lock, replay caught
//! up), polled with a deadline.

mod support;

use async_trait::async_trait;
use backfill::__private::store;
use backfill::throttle::health::{
    HealthCheck, HealthConfig, Monitor, Reading, Signal, Snapshot, Thresholds, Throttle,
    UnknownPolicy, Verdict,
};
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use support::standby::StandbyPair;
use support::Deadline;

const MIB: u64 = 1 << 20;
/// Staleness is not under test except where it is: a reading taken in the
/// test is always fresh.
const FRESH: Duration = Duration::from_secs(600);

/// Readings bounded generously: a loaded test machine must not turn a
/// slow statement into an unknown signal.
fn config() -> HealthConfig {
    HealthConfig {
        interval: Duration::from_secs(1),
        timeout: Duration::from_secs(20),
        thresholds: Thresholds::default(),
        unknown: UnknownPolicy::Proceed,
    }
}

fn judge(
    snapshot: &Snapshot,
    limits: &Thresholds,
    tables: &[String],
    policy: UnknownPolicy,
) -> Verdict {
    snapshot.evaluate(limits, tables, policy, snapshot.taken, FRESH)
}

fn go() -> Verdict {
    Verdict::Go { unknown: vec![] }
}

fn throttle(verdict: Verdict) -> Throttle {
    match verdict {
        Verdict::Throttle(t) => t,
        go => panic!("expected a throttle, got {go:?}"),
    }
}

fn known<T: std::fmt::Debug + Clone>(reading: &Reading<T>) -> T {
    match reading {
        Reading::Known(v) => v.clone(),
        Reading::Unknown(reason) => panic!("expected a reading, unknown: {reason}"),
    }
}

/// The current WAL position of the server behind `conn`, in bytes.
async fn wal_position(conn: &mut AsyncPgConnection) -> i64 {
    support::scalar_on(
        conn,
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint AS v",
    )
    .await
}

/// THR-1: with the standby's replay paused, a 300k-row insert on the
/// primary is at least its own WAL behind on the standby at once; the
/// verdict names the byte lag with its value and limit, and after replay
/// resumes the lag falls back and the verdict is go again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thr01_replication_lag_bytes_grow_while_replay_is_paused() {
    let pair = StandbyPair::start().await;
    let mut primary = pair.primary().await;
    primary
        .batch_execute("CREATE TABLE filler (id bigint, pad text)")
        .await
        .expect("create");
    pair.wait_caught_up().await;
    let pool = store::build_pool(&pair.primary_url(), 2)
        .await
        .expect("pool");
    let monitor = Monitor::new(pool, config(), vec![], None);
    let limits = Thresholds {
        max_lag_bytes: Some(8 * MIB),
        ..Thresholds::none()
    };

    let caught_up = monitor.run_once().await;
    assert_eq!(caught_up.standbys, Reading::Known(1));
    assert!(known(&caught_up.lag_bytes).expect("a standby") < 8 * MIB);
    assert_eq!(
        judge(&caught_up, &limits, &[], UnknownPolicy::Throttle),
        go()
    );

    pair.pause_replay().await;
    let before = wal_position(&mut primary).await;
    primary
        .batch_execute(
            "INSERT INTO filler SELECT g, repeat('x', 20) FROM generate_series(1, 300000) g",
        )
        .await
        .expect("insert");
    let written = (wal_position(&mut primary).await - before) as u64;
    assert!(
        written > 8 * MIB,
        "the insert wrote only {written} bytes of WAL"
    );

    let behind = monitor.run_once().await;
    let lag = known(&behind.lag_bytes).expect("a standby");
    assert!(lag >= written, "lag {lag} < WAL written {written}");
    let t = throttle(judge(&behind, &limits, &[], UnknownPolicy::Proceed));
    assert_eq!(t.signal, Signal::ReplicationLagBytes);
    assert_eq!(t.value, Some(lag as f64));
    assert_eq!(t.threshold, Some((8 * MIB) as f64));
    assert!(
        t.text.starts_with("replication lag ") && t.text.ends_with(" > 8.0 MiB"),
        "{}",
        t.text
    );

    pair.resume_replay().await;
    let mut wait = Deadline::new("the lag falls back after replay resumes");
    loop {
        let snapshot = monitor.run_once().await;
        if judge(&snapshot, &limits, &[], UnknownPolicy::Throttle) == go() {
            assert!(known(&snapshot.lag_bytes).expect("a standby") <= 8 * MIB);
            break;
        }
        wait.tick().await;
    }
}

/// THR-2: a role without pg_monitor sees the standby's row in
/// pg_stat_replication without positions. The lag is unknown, not zero:
/// listed under Proceed, throttling under Throttle; the signals it can
/// read stay known. Granted pg_monitor, the same monitor reads the lag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thr02_a_role_without_pg_monitor_reads_replication_lag_as_unknown() {
    let pair = StandbyPair::start().await;
    let mut primary = pair.primary().await;
    primary
        .batch_execute("CREATE ROLE watcher LOGIN; CREATE TABLE t (id int)")
        .await
        .expect("setup");
    let url = pair
        .primary_url()
        .replacen("postgres://postgres@", "postgres://watcher@", 1);
    let pool = store::build_pool(&url, 2).await.expect("pool");
    let tables = vec!["t".to_string()];
    let monitor = Monitor::new(pool, config(), tables.clone(), None);

    let blind = monitor.run_once().await;
    for reason in [
        blind.lag_bytes.reason(),
        blind.lag.reason(),
        blind.standbys.reason(),
    ] {
        let reason = reason.expect("unknown to this role");
        assert!(reason.contains("pg_monitor"), "{reason}");
    }
    // The walsender's session belongs to another role too: hidden, it
    // could be an old transaction.
    assert!(blind.xact_age.reason().is_some());
    // What every role may read is read.
    assert_eq!(
        known(&blind.lock_waiters),
        BTreeMap::from([("t".to_string(), 0)])
    );
    assert_eq!(blind.wal_bytes_per_s, Reading::Known(None));

    let limits = Thresholds::default();
    assert_eq!(
        judge(&blind, &limits, &tables, UnknownPolicy::Proceed),
        Verdict::Go {
            unknown: vec![Signal::ReplicationLagBytes]
        }
    );
    let t = throttle(judge(&blind, &limits, &tables, UnknownPolicy::Throttle));
    assert_eq!(t.signal, Signal::ReplicationLagBytes);
    assert_eq!(t.value, None);
    assert_eq!(t.threshold, Some((64 * MIB) as f64));
    assert!(
        t.text.starts_with("replication lag unknown: "),
        "{}",
        t.text
    );

    primary
        .batch_execute("GRANT pg_monitor TO watcher")
        .await
        .expect("grant");
    let seeing = monitor.run_once().await;
    assert_eq!(seeing.standbys, Reading::Known(1));
    assert!(known(&seeing.lag_bytes).is_some());
    known(&seeing.xact_age);
    assert_eq!(
        judge(&seeing, &limits, &tables, UnknownPolicy::Throttle),
        go()
    );
}

/// THR-2: pointed at a standby, where pg_current_wal_lsn() raises, the
/// WAL position and lags are unknown with the reason, and the other
/// signals are still read: one unreadable signal fails no other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thr02_a_standby_in_recovery_reads_wal_signals_as_unknown_and_the_rest() {
    let pair = StandbyPair::start().await;
    pair.primary()
        .await
        .batch_execute("CREATE TABLE t (id int)")
        .await
        .expect("create");
    pair.wait_caught_up().await;
    let pool = store::build_pool(&pair.standby_url(), 2)
        .await
        .expect("pool");
    let monitor = Monitor::new(pool, config(), vec!["t".to_string()], None);
    let snapshot = monitor.run_once().await;
    for reason in [
        snapshot.wal_bytes_per_s.reason(),
        snapshot.lag_bytes.reason(),
        snapshot.lag.reason(),
    ] {
        let reason = reason.expect("unknown on a standby");
        assert!(reason.contains("standby in recovery"), "{reason}");
    }
    assert_eq!(known(&snapshot.xact_age), Duration::ZERO);
    assert_eq!(
        known(&snapshot.lock_waiters),
        BTreeMap::from([("t".to_string(), 0)])
    );
}

/// Open a connection to `url` and run `sql` on it, returning it (to keep
/// what it holds).
async fn session(url: &str, sql: &str) -> AsyncPgConnection {
    let mut conn = AsyncPgConnection::establish(url).await.expect("connect");
    conn.batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    conn
}

/// Run `sql` on a connection of its own in a task: it blocks on a lock.
fn blocked(url: &str, sql: &'static str) -> tokio::task::JoinHandle<AsyncPgConnection> {
    let url = url.to_string();
    tokio::spawn(async move { session(&url, sql).await })
}

/// Read until `table` has `count` waiters.
async fn waiters_reach(monitor: &Monitor, table: &str, count: u64) -> Arc<Snapshot> {
    let mut wait = Deadline::new("the lock waiters the test set up");
    loop {
        let snapshot = monitor.run_once().await;
        if let Reading::Known(per_table) = &snapshot.lock_waiters {
            if per_table.get(table) == Some(&count) {
                return snapshot;
            }
        }
        wait.tick().await;
    }
}

/// THR-1: a session queued behind another's lock on one of the repair's
/// tables (schema-qualified) counts as a waiter for that table and not for
/// another; so do sessions queued for one row, the first of which waits on
/// the holder's transaction rather than on a lock of the table. The
/// throttle's text names the session at the head of the queue (its PID
/// and application name), and follows the queue while that session stays
/// open: one waiter, then two. Guard: the blocker read with the waiters
/// (`pg_blocking_pids`) and named in the text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thr01_lock_waiters_count_sessions_blocked_on_the_repairs_tables() {
    let db = support::test_db().await;
    db.exec(
        "CREATE SCHEMA s; CREATE TABLE s.items (id int PRIMARY KEY, v int); \
         INSERT INTO s.items VALUES (1, 0); CREATE TABLE other (id int)",
    )
    .await;
    let items = "s.items".to_string();
    let other = "other".to_string();
    let monitor = Monitor::new(
        db.pool.clone(),
        config(),
        vec![items.clone(), other.clone()],
        None,
    );
    let limits = Thresholds {
        max_lock_waiters: Some(0),
        ..Thresholds::none()
    };
    let quiet = monitor.run_once().await;
    assert_eq!(
        known(&quiet.lock_waiters),
        BTreeMap::from([(items.clone(), 0), (other.clone(), 0)])
    );

    // A holds AccessShare; B queues for AccessExclusive behind it.
    let mut a = session(
        &db.url,
        "SET application_name = 'nightly report'; BEGIN; SELECT * FROM s.items LIMIT 1",
    )
    .await;
    let a_pid = support::scalar_on(&mut a, "SELECT pg_backend_pid()::bigint AS v").await;
    let held_by_a = format!("held by pid {a_pid} (application \"nightly report\")");
    let b = blocked(
        &db.url,
        "BEGIN; LOCK TABLE s.items IN ACCESS EXCLUSIVE MODE",
    );
    let snapshot = waiters_reach(&monitor, &items, 1).await;
    assert_eq!(known(&snapshot.lock_waiters).get(&other), Some(&0));
    let t = throttle(judge(
        &snapshot,
        &limits,
        std::slice::from_ref(&items),
        UnknownPolicy::Proceed,
    ));
    assert_eq!(
        (t.signal, t.value, t.threshold),
        (Signal::LockWaiters, Some(1.0), Some(0.0))
    );
    assert_eq!(
        t.text,
        format!("lock waiters 1 > 0 on s.items, {held_by_a}")
    );
    assert_eq!(
        judge(
            &snapshot,
            &limits,
            std::slice::from_ref(&other),
            UnknownPolicy::Proceed
        ),
        go()
    );
    a.batch_execute("COMMIT").await.expect("commit a");
    b.await
        .expect("b")
        .batch_execute("COMMIT")
        .await
        .expect("commit b");
    waiters_reach(&monitor, &items, 0).await;

    // A holds row 1; B waits for A's transaction, C for the row after B.
    // While A stays open the text follows the queue and keeps naming A,
    // not B, which C waits for directly.
    let mut a = session(&db.url, "BEGIN; UPDATE s.items SET v = 1 WHERE id = 1").await;
    let a_pid = support::scalar_on(&mut a, "SELECT pg_backend_pid()::bigint AS v").await;
    let held_by_a = format!("held by pid {a_pid}");
    let judged = |snapshot: &Snapshot| {
        throttle(judge(
            snapshot,
            &limits,
            std::slice::from_ref(&items),
            UnknownPolicy::Proceed,
        ))
        .text
    };
    let b = blocked(&db.url, "UPDATE s.items SET v = 2 WHERE id = 1");
    let one = waiters_reach(&monitor, &items, 1).await;
    assert_eq!(
        judged(&one),
        format!("lock waiters 1 > 0 on s.items, {held_by_a}")
    );
    let c = blocked(&db.url, "UPDATE s.items SET v = 3 WHERE id = 1");
    let snapshot = waiters_reach(&monitor, &items, 2).await;
    assert_eq!(known(&snapshot.lock_waiters).get(&other), Some(&0));
    assert_eq!(
        judged(&snapshot),
        format!("lock waiters 2 > 0 on s.items, {held_by_a}")
    );
    a.batch_execute("COMMIT").await.expect("commit a");
    b.await.expect("b");
    c.await.expect("c");
    waiters_reach(&monitor, &items, 0).await;
}

/// THR-1: another session's open transaction shows its age, bounded by
/// the time since it began, and the throttle names the session holding it
/// (PID and application name); the monitor's own session and transactions in
/// other databases do not count, and the age is gone once it commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thr01_an_open_transaction_of_another_session_shows_its_age() {
    let db = support::test_db().await;
    let monitor = Monitor::new(db.pool.clone(), config(), vec![], None);
    let limits = Thresholds {
        max_xact_age: Some(Duration::from_millis(250)),
        ..Thresholds::none()
    };
    // Elsewhere on the server, an open transaction that is not this
    // database's.
    let mut elsewhere = session(support::server_url(), "BEGIN; SELECT 1").await;
    let idle = monitor.run_once().await;
    assert_eq!(known(&idle.xact_age), Duration::ZERO);

    let began = Instant::now();
    let mut other = session(
        &db.url,
        "SET application_name = 'nightly report'; BEGIN; SELECT 1",
    )
    .await;
    let mut wait = Deadline::new("the open transaction ages");
    let old = loop {
        let snapshot = monitor.run_once().await;
        if known(&snapshot.xact_age) >= Duration::from_millis(300) {
            break snapshot;
        }
        wait.tick().await;
    };
    let age = known(&old.xact_age);
    assert!(
        age <= began.elapsed() + Duration::from_millis(50),
        "age {age:?} older than the transaction"
    );
    let t = throttle(judge(&old, &limits, &[], UnknownPolicy::Proceed));
    assert_eq!(t.signal, Signal::TransactionAge);
    assert_eq!(t.value, Some(age.as_secs_f64()));
    assert_eq!(t.threshold, Some(0.25));
    // The text names the session holding it.
    assert!(
        t.text.contains(", held by pid ") && t.text.ends_with("(application \"nightly report\")"),
        "{}",
        t.text
    );

    other.batch_execute("COMMIT").await.expect("commit");
    let after = monitor.run_once().await;
    assert_eq!(known(&after.xact_age), Duration::ZERO);
    assert_eq!(judge(&after, &limits, &[], UnknownPolicy::Throttle), go());
    elsewhere.batch_execute("COMMIT").await.expect("commit");
}

/// THR-1: the WAL rate is unknown until a second reading, then at least
/// the WAL written between the two readings over the time between them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thr01_wal_rate_is_known_from_the_second_reading_and_counts_the_writes() {
    let db = support::test_db().await;
    let monitor = Monitor::new(db.pool.clone(), config(), vec![], None);
    let limits = Thresholds {
        max_wal_bytes_per_s: Some(1),
        ..Thresholds::none()
    };
    let start = Instant::now();
    let first = monitor.run_once().await;
    assert_eq!(first.wal_bytes_per_s, Reading::Known(None));
    assert_eq!(
        judge(&first, &limits, &[], UnknownPolicy::Proceed),
        Verdict::Go {
            unknown: vec![Signal::WalRate]
        }
    );

    let mut conn = db.connect().await;
    let before = wal_position(&mut conn).await;
    conn.batch_execute(
        "CREATE TABLE w (id bigint, pad text); \
         INSERT INTO w SELECT g, repeat('x', 20) FROM generate_series(1, 50000) g",
    )
    .await
    .expect("write");
    let written = (wal_position(&mut conn).await - before) as f64;
    let second = monitor.run_once().await;
    let elapsed = start.elapsed().as_secs_f64();
    let rate = known(&second.wal_bytes_per_s).expect("a rate from two readings") as f64;
    assert!(
        rate >= 0.95 * written / elapsed,
        "rate {rate} below {written} bytes over {elapsed} s"
    );
    let t = throttle(judge(&second, &limits, &[], UnknownPolicy::Proceed));
    assert_eq!(t.signal, Signal::WalRate);
}

/// A check the test switches between answers.
struct Switch(AtomicU8);

const HEALTHY: u8 = 0;
const UNHEALTHY: u8 = 1;
const HANGS: u8 = 2;
const PANICS: u8 = 3;

#[async_trait]
impl HealthCheck for Switch {
    async fn check(&self) -> Result<(), String> {
        match self.0.load(Ordering::SeqCst) {
            HEALTHY => Ok(()),
            UNHEALTHY => Err("queue depth 5000 > 1000".into()),
            HANGS => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                Ok(())
            }
            _ => panic!("the check broke"),
        }
    }
}

/// THR-1, THR-2: the application's check throttles with its reason when
/// it fails; one that hangs past the timeout or panics is unknown, and
/// the monitor goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thr01_an_application_check_that_fails_throttles_with_its_reason() {
    let db = support::test_db().await;
    let switch = Arc::new(Switch(AtomicU8::new(HEALTHY)));
    let check: Arc<dyn HealthCheck> = switch.clone();
    let config = HealthConfig {
        timeout: Duration::from_millis(300),
        ..config()
    };
    let monitor = Monitor::new(db.pool.clone(), config, vec![], Some(check));
    let limits = Thresholds::none();

    let healthy = monitor.run_once().await;
    assert_eq!(healthy.application, Some(Reading::Known(Ok(()))));
    assert_eq!(judge(&healthy, &limits, &[], UnknownPolicy::Throttle), go());

    switch.0.store(UNHEALTHY, Ordering::SeqCst);
    let unhealthy = monitor.run_once().await;
    let t = throttle(judge(&unhealthy, &limits, &[], UnknownPolicy::Proceed));
    assert_eq!(
        t,
        Throttle {
            signal: Signal::Application,
            value: None,
            threshold: None,
            text: "application check: queue depth 5000 > 1000".into(),
        }
    );

    for (answer, reason) in [(HANGS, "took longer than 300 ms"), (PANICS, "panicked")] {
        switch.0.store(answer, Ordering::SeqCst);
        let unknown = monitor.run_once().await;
        let got = unknown
            .application
            .as_ref()
            .and_then(Reading::reason)
            .expect("unknown");
        assert!(got.contains(reason), "{got}");
        // The database signals are read all the same.
        known(&unknown.xact_age);
        assert_eq!(
            judge(&unknown, &limits, &[], UnknownPolicy::Proceed),
            Verdict::Go {
                unknown: vec![Signal::Application]
            }
        );
        assert_eq!(
            throttle(judge(&unknown, &limits, &[], UnknownPolicy::Throttle)).signal,
            Signal::Application
        );
    }
}

/// THR-2: a snapshot older than the staleness bound is every checked
/// signal unknown, however healthy it read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thr02_a_stale_snapshot_counts_every_checked_signal_unknown() {
    let db = support::test_db().await;
    db.exec("CREATE TABLE t (id int)").await;
    let tables = vec!["t".to_string()];
    let monitor = Monitor::new(db.pool.clone(), config(), tables.clone(), None);
    let limits = Thresholds {
        max_lock_waiters: Some(5),
        max_xact_age: Some(Duration::from_secs(60)),
        ..Thresholds::default()
    };
    let snapshot = monitor.run_once().await;
    let bound = Duration::from_secs(5);
    assert_eq!(
        snapshot.evaluate(
            &limits,
            &tables,
            UnknownPolicy::Throttle,
            snapshot.taken + bound,
            bound
        ),
        go()
    );
    let later = snapshot.taken + bound + Duration::from_millis(1);
    assert_eq!(
        snapshot.evaluate(&limits, &tables, UnknownPolicy::Proceed, later, bound),
        Verdict::Go {
            unknown: vec![
                Signal::ReplicationLagBytes,
                Signal::LockWaiters,
                Signal::TransactionAge
            ]
        }
    );
    let t = throttle(snapshot.evaluate(&limits, &tables, UnknownPolicy::Throttle, later, bound));
    assert_eq!((t.signal, t.value), (Signal::ReplicationLagBytes, None));
    assert!(t.text.contains("5.0 s old"), "{}", t.text);
}

/// THR-2: a malformed or missing table name makes the lock waiters
/// unknown and nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thr02_a_bad_table_name_makes_only_lock_waiters_unknown() {
    let db = support::test_db().await;
    for (table, reason) in [("a.b.c", "not a table name"), ("missing", "not found")] {
        let monitor = Monitor::new(db.pool.clone(), config(), vec![table.to_string()], None);
        let snapshot = monitor.run_once().await;
        let got = snapshot.lock_waiters.reason().expect("unknown");
        assert!(got.contains(reason), "{table}: {got}");
        assert_eq!(known(&snapshot.lag_bytes), None);
        assert_eq!(known(&snapshot.xact_age), Duration::ZERO);
    }
}

/// Counts the monitor's readings: each reading calls the check once.
struct Counted(Arc<AtomicUsize>);

#[async_trait]
impl HealthCheck for Counted {
    async fn check(&self) -> Result<(), String> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

/// THR-1 (and the idle cost of FLT-1): the monitor's task reads on its
/// interval while batches ask for the signals, so a runner mostly takes
/// a cached snapshot, and rests otherwise. No reading before any batch
/// asked; the first batch's ask reads at once; the task then keeps the
/// snapshot young (the next asks read nothing themselves) and stops once
/// no batch asked for two intervals. A scrape's fresh read reads once
/// and does not wake the task. Guard: the task's demand check (without
/// it the task reads while nothing asks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thr01_the_monitor_reads_while_batches_ask_and_rests_otherwise() {
    let db = support::test_db().await;
    let config = HealthConfig {
        interval: Duration::from_millis(20),
        timeout: Duration::from_millis(100),
        ..config()
    };
    // The task rests two intervals after the last ask; four readings'
    // timeouts cover a reading under way then.
    let rest = 2 * config.interval + 4 * config.timeout;
    let readings = Arc::new(AtomicUsize::new(0));
    let count = || readings.load(Ordering::SeqCst);
    let check: Arc<dyn HealthCheck> = Arc::new(Counted(readings.clone()));
    let monitor = Arc::new(Monitor::new(db.pool.clone(), config, vec![], Some(check)));
    let task = tokio::spawn(monitor.clone().run());
    // Many intervals with nothing asking: nothing read.
    tokio::time::sleep(rest * 2).await;
    assert_eq!(count(), 0, "the task read while no batch asked");
    assert!(monitor.latest().is_none());

    let first = monitor.for_batch().await;
    // Its own reading (the task, woken by the ask, may have read since).
    assert!(count() >= 1, "the first ask reads at once");
    let mut wait = Deadline::new("the task reading while batches ask");
    while monitor.latest().expect("kept").taken <= first.taken {
        monitor.for_batch().await;
        wait.tick().await;
    }
    let young = monitor.latest().expect("kept");
    let before = count();
    let served = monitor.for_batch().await;
    if served.taken == young.taken {
        assert_eq!(
            count(),
            before,
            "a young snapshot is served without a reading"
        );
    }

    // Nothing asks any more: the task stops.
    tokio::time::sleep(rest * 2).await;
    let resting = count();
    tokio::time::sleep(rest * 2).await;
    assert_eq!(count(), resting, "the task rests once no batch asks");

    let scraped = monitor.fresh(Duration::ZERO).await;
    assert!(scraped.taken > young.taken);
    assert_eq!(count(), resting + 1, "a scrape reads once");
    tokio::time::sleep(rest * 2).await;
    assert_eq!(count(), resting + 1, "a scrape does not wake the task");
    task.abort();
}

/// What the primary reports of its one standby at one moment.
#[derive(Debug, PartialEq, diesel::QueryableByName)]
struct Replay {
    /// Bytes of WAL not yet replayed: the current position minus the
    /// replay position.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    behind: i64,
    /// The replay position, to tell one report from the next.
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    replayed: i64,
    /// `replay_lag` in microseconds; `None` when PostgreSQL has none.
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    lag_us: Option<i64>,
}

async fn replay(primary: &mut AsyncPgConnection) -> Replay {
    use diesel_async::RunQueryDsl;
    diesel::sql_query(
        "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn)::bigint AS behind, \
                pg_wal_lsn_diff(replay_lsn, '0/0')::bigint AS replayed, \
                (extract(epoch FROM replay_lag) * 1000000)::bigint AS lag_us \
         FROM pg_stat_replication WHERE replay_lsn IS NOT NULL",
    )
    .get_result(primary)
    .await
    .expect("the standby's row")
}

/// THR-5 with a real standby: PostgreSQL measures `replay_lag` only as
/// replay crosses newly sent WAL and clears it only at the standby's
/// second report after catching up, so after `pg_wal_replay_resume()` a
/// standby that has replayed everything (0 bytes behind) keeps reporting
/// the lag of the WAL it replayed last. While the primary reports that
/// stale lag past the limit for a standby 0 bytes behind, before and
/// after the monitor's reading, the reading is a time lag of 0 and the
/// verdict lets batches go. The standby reports every 2 s, so the stale
/// window is 2 s wide, far longer than one reading. While replay is
/// paused the same limit holds batches back. Guard: the
/// `replay_lsn >= c.lsn` case in `store::health_read_replication`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thr05_a_standby_zero_bytes_behind_with_a_stale_replay_lag_holds_nothing_back() {
    let pair = StandbyPair::start_with(&[("wal_receiver_status_interval", "2s")]).await;
    let mut primary = pair.primary().await;
    primary
        .batch_execute("CREATE TABLE filler (id bigint)")
        .await
        .expect("create");
    pair.wait_caught_up().await;
    let pool = store::build_pool(&pair.primary_url(), 2)
        .await
        .expect("pool");
    let monitor = Monitor::new(pool, config(), vec![], None);
    let limit = Duration::from_secs(1);
    let limits = Thresholds {
        max_lag: Some(limit),
        ..Thresholds::none()
    };
    let past = |r: &Replay| r.lag_us.is_some_and(|us| us > 1_500_000);

    pair.pause_replay().await;
    primary
        .batch_execute("INSERT INTO filler SELECT generate_series(1, 1000)")
        .await
        .expect("insert");
    let mut wait = Deadline::new("the time lag grows past the limit while replay is paused");
    while !past(&replay(&mut primary).await) {
        wait.tick().await;
    }
    let t = throttle(judge(
        &*monitor.run_once().await,
        &limits,
        &[],
        UnknownPolicy::Proceed,
    ));
    assert_eq!(t.signal, Signal::ReplicationLag, "{}", t.text);

    pair.resume_replay().await;
    let mut wait = Deadline::new("a standby 0 bytes behind reports a stale lag");
    loop {
        let before = replay(&mut primary).await;
        if before.behind == 0 && past(&before) {
            let snapshot = monitor.run_once().await;
            let after = replay(&mut primary).await;
            // The same report throughout: nothing replayed or cleared in
            // between, so the monitor read exactly this stale lag.
            if after == before {
                assert_eq!(known(&snapshot.lag_bytes), Some(0));
                assert_eq!(known(&snapshot.lag), Some(Duration::ZERO));
                assert_eq!(
                    judge(&snapshot, &limits, &[], UnknownPolicy::Throttle),
                    go(),
                    "0 bytes behind with replay_lag {:?} us",
                    before.lag_us
                );
                break;
            }
        }
        wait.tick().await;
    }
}

/// A caught-up, quiet snapshot whose only time lag is `lag`.
fn lagging(lag: Duration) -> Snapshot {
    Snapshot {
        taken: Instant::now(),
        at: chrono::Utc::now(),
        lag_bytes: Reading::Known(Some(0)),
        lag: Reading::Known(Some(lag)),
        standbys: Reading::Known(1),
        wal_bytes_per_s: Reading::Known(Some(0)),
        xact_age: Reading::Known(Duration::ZERO),
        xact_holder: None,
        lock_holders: BTreeMap::new(),
        lock_waiters: Reading::Known(BTreeMap::new()),
        application: None,
    }
}

/// The value and limit a throttle text shows ("<signal> <value><unit>
/// <op> <limit><unit>"), each with its unit, and the operator.
fn shown(text: &str) -> ((f64, String), String, (f64, String)) {
    let words: Vec<&str> = text.split(' ').collect();
    let n = words.len();
    assert!(n >= 5, "{text}");
    let number = |w: &str| w.parse::<f64>().unwrap_or_else(|_| panic!("{w} in {text}"));
    (
        (number(words[n - 5]), words[n - 4].to_string()),
        words[n - 3].to_string(),
        (number(words[n - 2]), words[n - 1].to_string()),
    )
}

/// THR-5: a throttle text cannot read as false. Rounded to one decimal, a
/// time lag of 1.04 s past a limit of 1 s would read "1.0 s > 1.0 s", so
/// the value is shown with the decimals it takes to be greater than
/// the limit shown, both in one unit, or "≥" when it is closer than a
/// microsecond. Over lags just past, well past and microseconds past
/// limits below and above a second, the text states a true comparison in
/// one unit. Guard: the loop over decimals in `comparison_text`
/// (`src/throttle/health/evaluate.rs`).
#[test]
fn thr05_a_throttle_text_never_reads_as_false() {
    let text = |lag: Duration, limit: Duration| {
        let limits = Thresholds {
            max_lag: Some(limit),
            ..Thresholds::none()
        };
        let t = throttle(judge(&lagging(lag), &limits, &[], UnknownPolicy::Proceed));
        assert_eq!(t.value, Some(lag.as_secs_f64()));
        t.text
    };
    let ms = Duration::from_millis;
    assert_eq!(
        text(ms(1_040), ms(1_000)),
        "replication time lag 1.04 s > 1.00 s"
    );
    assert_eq!(
        text(ms(7_500), ms(5_000)),
        "replication time lag 7.5 s > 5.0 s"
    );
    assert_eq!(
        text(Duration::from_micros(500_400), ms(500)),
        "replication time lag 500.4 ms > 500.0 ms"
    );
    assert_eq!(
        text(Duration::from_nanos(1_000_000_400), ms(1_000)),
        "replication time lag 1.000000 s \u{2265} 1.000000 s"
    );
    for limit_ms in [1, 10, 250, 999, 1_000, 1_001, 1_500, 60_000] {
        let limit = ms(limit_ms);
        for over in [
            Duration::from_micros(1),
            Duration::from_micros(7),
            ms(1),
            ms(3),
            ms(40),
            ms(49),
            ms(51),
            ms(960),
            ms(10_000),
        ] {
            let t = text(limit + over, limit);
            let ((value, unit), op, (shown_limit, limit_unit)) = shown(&t);
            assert_eq!(unit, limit_unit, "one unit: {t}");
            assert!(unit == "s" || unit == "ms", "a unit: {t}");
            assert_eq!(op, ">", "{t}");
            assert!(value > shown_limit, "reads as false: {t}");
        }
    }
}
