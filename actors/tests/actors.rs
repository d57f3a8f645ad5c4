//! Unit tests of the actor logic over a scripted in-memory backend.
//!
//! These test the runtime's own decisions (when to stop, what to renew,
//! the concurrency cap), not the contract's persistence guarantees: those
//! are proven against real PostgreSQL in the root crate's tests
//! (`tests/runtime.rs`, `tests/process.rs`).

use async_trait::async_trait;
use backfill_actors::supervisor::Status;
use backfill_actors::{
    Backend, BackendError, ClaimInfo, ClaimKey, Disposition, ErrorKind, RuntimeConfig,
    RuntimeHandle, StepOutcome, ValidationOutcome,
};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone, Debug)]
struct FakeClaim {
    id: String,
    generation: i64,
}

impl ClaimInfo for FakeClaim {
    fn id(&self) -> &str {
        &self.id
    }
    fn generation(&self) -> i64 {
        self.generation
    }
    fn is_validation(&self) -> bool {
        false
    }
    fn takeover_from(&self) -> Option<&str> {
        None
    }
}

/// A backend with `ids` claimable once each; every step commits one key
/// (never reaching the bound) after `step_delay`.
#[derive(Default)]
struct Fake {
    ids: Mutex<Vec<String>>,
    steps: AtomicUsize,
    renew_ok: AtomicBool,
    /// Renewals succeed but renew nothing: every claim is lost.
    renew_lost: AtomicBool,
    /// Every step fails, recorded with this disposition.
    recorded: Option<Disposition>,
    renewals: AtomicUsize,
    releases: AtomicUsize,
    step_delay: Duration,
    /// The lease TTL the fake grants, in milliseconds.
    lease_ttl_ms: AtomicU64,
    /// Registrations started, and how long each takes.
    registers: AtomicUsize,
    register_delay: Duration,
    /// Every step reaches the bound, and the ID is claimable again (for
    /// its validation) from then on.
    reach_bound: bool,
    /// Claims handed out.
    claims: AtomicUsize,
}

#[async_trait]
impl Backend for Fake {
    type Claim = FakeClaim;
    async fn register(&self) -> Result<(), BackendError> {
        self.registers.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.register_delay).await;
        Ok(())
    }
    async fn claim_next(
        &self,
        _worker: &str,
        exclude: &[ClaimKey],
    ) -> Result<Result<Option<FakeClaim>, String>, BackendError> {
        let mut ids = self.ids.lock();
        let pos = ids
            .iter()
            .position(|id| !exclude.iter().any(|k| k.id == *id));
        if pos.is_some() {
            self.claims.fetch_add(1, Ordering::SeqCst);
        }
        Ok(Ok(pos.map(|p| FakeClaim {
            id: ids.remove(p),
            generation: 1,
        })))
    }
    async fn step(&self, claim: &mut FakeClaim) -> Result<StepOutcome, BackendError> {
        tokio::time::sleep(self.step_delay).await;
        self.steps.fetch_add(1, Ordering::SeqCst);
        if self.reach_bound {
            self.ids.lock().push(claim.id.clone());
            return Ok(StepOutcome::Committed {
                keys: 1,
                reached_bound: true,
            });
        }
        if let Some(disposition) = self.recorded {
            return Ok(StepOutcome::Recorded {
                disposition,
                kind: ErrorKind::Retryable,
                message: "scripted failure".into(),
                attempts: 1,
            });
        }
        Ok(StepOutcome::Committed {
            keys: 1,
            reached_bound: false,
        })
    }
    async fn validate(&self, _claim: &FakeClaim) -> Result<ValidationOutcome, BackendError> {
        Ok(ValidationOutcome::Completed)
    }
    async fn renew(
        &self,
        _worker: &str,
        claims: &[(ClaimKey, i64)],
    ) -> Result<Vec<(ClaimKey, i64)>, BackendError> {
        self.renewals.fetch_add(1, Ordering::SeqCst);
        if self.renew_lost.load(Ordering::SeqCst) {
            Ok(Vec::new())
        } else if self.renew_ok.load(Ordering::SeqCst) {
            Ok(claims.to_vec())
        } else {
            Err(BackendError("database unreachable".into()))
        }
    }
    fn lease_ttl(&self) -> Duration {
        Duration::from_millis(self.lease_ttl_ms.load(Ordering::SeqCst))
    }
    async fn release(&self, _claim: &FakeClaim) -> Result<bool, BackendError> {
        self.releases.fetch_add(1, Ordering::SeqCst);
        Ok(true)
    }
}

fn config() -> RuntimeConfig {
    RuntimeConfig {
        worker_id: "unit".into(),
        poll_interval: Duration::from_millis(20),
        max_concurrent_runners: 2,
        shutdown_grace: Duration::from_secs(5),
        ..RuntimeConfig::default()
    }
}

/// Start the runtime over `fake`, whose leases last `ttl_ms`.
fn start(fake: &Arc<Fake>, ttl_ms: u64, config: RuntimeConfig) -> RuntimeHandle<Fake> {
    fake.lease_ttl_ms.store(ttl_ms, Ordering::SeqCst);
    RuntimeHandle::start(fake.clone(), config).unwrap()
}

async fn held(rt: &RuntimeHandle<Fake>) -> usize {
    rt.supervisor().send(Status).await.unwrap().held.len()
}

/// Wait until `ready` holds and no runner holds a claim, failing with
/// `what` after `bound`.
async fn until_released(
    rt: &RuntimeHandle<Fake>,
    ready: impl Fn() -> bool,
    bound: Duration,
    what: &str,
) {
    let deadline = std::time::Instant::now() + bound;
    while !ready() || held(rt).await > 0 {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Wait until `ready` holds, failing with `what` after `bound`.
async fn until(ready: impl Fn() -> bool, bound: Duration, what: &str) {
    let deadline = std::time::Instant::now() + bound;
    while !ready() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Wait until the supervisor has registered, failing after `deadline`.
async fn until_registered(rt: &RuntimeHandle<Fake>, deadline: std::time::Instant) {
    while !rt.status().await.is_some_and(|s| s.registered) {
        assert!(std::time::Instant::now() < deadline, "never registered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A backend whose claims of `ids` renew and whose steps take 5 ms.
fn renewing_fake(ids: Vec<String>) -> Arc<Fake> {
    Arc::new(Fake {
        ids: Mutex::new(ids),
        step_delay: Duration::from_millis(5),
        renew_ok: AtomicBool::new(true),
        ..Fake::default()
    })
}

/// The trust window: when renewals fail, the runner stops starting batches
/// before the lease (by the backend's clock) could have expired.
#[actix_rt::test]
async fn clm03_runner_stops_when_renewals_fail_before_the_lease_can_expire() {
    let fake = Arc::new(Fake {
        ids: Mutex::new(vec!["a".into()]),
        step_delay: Duration::from_millis(5),
        ..Fake::default()
    });
    let started = std::time::Instant::now();
    let rt = start(&fake, 1000, config());
    let ran = || fake.steps.load(Ordering::SeqCst) > 0;
    until_released(&rt, ran, Duration::from_secs(5), "runner never stopped").await;
    let stopped_after = started.elapsed();
    let steps = fake.steps.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        fake.steps.load(Ordering::SeqCst),
        steps,
        "no batch after the trust window ended"
    );
    assert!(
        stopped_after < Duration::from_millis(1000),
        "stopped after {stopped_after:?}, beyond the 1s lease"
    );
    assert!(fake.renewals.load(Ordering::SeqCst) >= 1);
}

/// CLM-3: a renewal PostgreSQL refuses (the claim was taken over, or
/// paused) stops the runner at once: no batch starts after the `Lost`
/// status, though its trust window (45 s of a minute's lease) would
/// allow them for the rest of the test.
#[actix_rt::test]
async fn clm03_runner_stops_at_once_when_its_claim_is_lost() {
    let fake = Arc::new(Fake {
        ids: Mutex::new(vec!["lost".into()]),
        step_delay: Duration::from_millis(5),
        renew_lost: AtomicBool::new(true),
        ..Fake::default()
    });
    let config = RuntimeConfig {
        renew_interval: Some(Duration::from_millis(50)),
        ..config()
    };
    let rt = start(&fake, 60_000, config);
    let renewed = || fake.renewals.load(Ordering::SeqCst) > 0;
    let what = "the runner still holds a lost claim";
    until_released(&rt, renewed, Duration::from_secs(10), what).await;
    let steps = fake.steps.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(fake.steps.load(Ordering::SeqCst), steps, "no batch after");
    rt.shutdown().await;
}

/// RT-1: a batch failure the backend recorded ends the runner (the
/// backend released the claim with the record), counted once under its
/// disposition, though the claim would still renew.
#[actix_rt::test]
async fn rt01_recorded_failure_ends_the_runner_and_is_counted_by_disposition() {
    for disposition in [
        Disposition::Retrying,
        Disposition::Blocked,
        Disposition::Failed,
    ] {
        let fake = Arc::new(Fake {
            ids: Mutex::new(vec!["fails".into()]),
            renew_ok: AtomicBool::new(true),
            recorded: Some(disposition),
            ..Fake::default()
        });
        let rt = start(&fake, 300, config());
        let metrics = rt.metrics().clone();
        let ran = || fake.steps.load(Ordering::SeqCst) > 0;
        let what = format!("{disposition:?}: the runner did not end");
        until_released(&rt, ran, Duration::from_secs(10), &what).await;
        rt.shutdown().await;
        assert_eq!(fake.steps.load(Ordering::SeqCst), 1, "{disposition:?}");
        let counted = [
            metrics.errors_retryable.get(),
            metrics.errors_blocked.get(),
            metrics.errors_failed.get(),
        ];
        let expected = match disposition {
            Disposition::Retrying => [1, 0, 0],
            Disposition::Blocked => [0, 1, 0],
            Disposition::Failed => [0, 0, 1],
        };
        assert_eq!(counted, expected, "{disposition:?}");
    }
}

/// CLM-3: a renewer with no claims makes no backend calls: an idle
/// process costs PostgreSQL nothing between claim polls.
#[actix_rt::test]
async fn clm03_an_idle_renewer_makes_no_backend_calls() {
    let fake = Arc::new(Fake::default());
    let config = RuntimeConfig {
        renew_interval: Some(Duration::from_millis(20)),
        ..config()
    };
    let rt = start(&fake, 300, config);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(held(&rt).await, 0);
    rt.shutdown().await;
    assert_eq!(
        fake.renewals.load(Ordering::SeqCst),
        0,
        "ten idle intervals"
    );
}

/// A wake-up (a NOTIFY or an admin action, relayed by the host) starts a
/// claim round at once instead of at the next poll: with an hour between
/// polls, work that appears after the first round is claimed when woken.
/// Wake-ups are hints, so the test repeats one until it lands between
/// rounds.
#[actix_rt::test]
async fn clm01_wake_starts_a_claim_round_before_the_next_poll() {
    let fake = renewing_fake(Vec::new());
    let config = RuntimeConfig {
        poll_interval: Duration::from_secs(3600),
        ..config()
    };
    let rt = start(&fake, 3000, config);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    until_registered(&rt, deadline).await;
    fake.ids.lock().push("woken".into());
    while held(&rt).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "a wake-up did not start a claim round"
        );
        rt.wake();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    rt.shutdown().await;
}

/// With renewals succeeding, the runner keeps going past the lease TTL.
#[actix_rt::test]
async fn clm03_renewals_extend_the_trust_window() {
    let fake = renewing_fake(vec!["a".into()]);
    let rt = start(&fake, 300, config());
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert_eq!(held(&rt).await, 1, "still working after 3 lease TTLs");
    assert!(fake.renewals.load(Ordering::SeqCst) >= 3);
    rt.shutdown().await;
    assert_eq!(fake.releases.load(Ordering::SeqCst), 1, "claim given back");
    assert!(
        rt.status().await.is_none(),
        "the supervisor ends with the drain"
    );
}

/// After the drain every actor of the runtime ends and lets go of the
/// backend, so a host (or the bench) that starts one runtime after another
/// does not keep each earlier one's backend and connection pool. Before
/// this, the renewer's interval and the supervisor's poll kept them for
/// the life of the process.
#[actix_rt::test]
async fn emb09_shutdown_lets_go_of_the_backend() {
    let fake = renewing_fake(vec!["a".into(), "b".into()]);
    let rt = start(&fake, 300, config());
    // Claims and actor stops are asynchronous: poll, bounded.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while held(&rt).await < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(held(&rt).await, 2, "two runners hold the backend");
    rt.shutdown().await;
    while Arc::strong_count(&fake) > 1 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        Arc::strong_count(&fake),
        1,
        "no actor of the runtime still holds the backend"
    );
    assert_eq!(
        fake.releases.load(Ordering::SeqCst),
        2,
        "both claims given back"
    );
}

/// The supervisor never holds more than `max_concurrent_runners` claims.
#[actix_rt::test]
async fn emb06_supervisor_caps_concurrent_runners() {
    let fake = renewing_fake((0..5).map(|i| format!("id{i}")).collect());
    let rt = start(&fake, 10_000, config());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(held(&rt).await, 2);
    assert_eq!(fake.ids.lock().len(), 3, "the rest was never claimed");
    rt.shutdown().await;
    assert_eq!(fake.releases.load(Ordering::SeqCst), 2);
}

/// Every info event of this test binary, as the operator's log would show
/// them. A process-wide subscriber, installed once: a thread's own
/// (`set_default`) misses events whenever another test thread registers
/// the same call site first without one (tracing caches each call site's
/// interest process-wide), which made this capture flaky. Tests tell their
/// events apart by backfill ID.
fn info_logs() -> &'static Mutex<Vec<u8>> {
    struct Sink(&'static Mutex<Vec<u8>>);
    impl std::io::Write for Sink {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    static LINES: std::sync::OnceLock<Mutex<Vec<u8>>> = std::sync::OnceLock::new();
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    let lines = LINES.get_or_init(|| Mutex::new(Vec::new()));
    INSTALLED.call_once(|| {
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || Sink(lines))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other subscriber");
    });
    lines
}

/// Info events named `event` about backfill `id`.
fn count_events(id: &str, event: &str) -> usize {
    let (event, id) = (format!("event=\"{event}\""), format!("backfill={id} "));
    String::from_utf8_lossy(&info_logs().lock())
        .lines()
        .filter(|line| line.contains(&event) && line.contains(&id))
        .count()
}

/// How long each step of `run_steps` takes at least.
const STEP: Duration = Duration::from_millis(5);

/// Run backfill `id` for `steps` batches with the given progress interval.
async fn run_steps(id: &str, progress_log_interval: Duration, steps: usize) {
    info_logs();
    let fake = Arc::new(Fake {
        ids: Mutex::new(vec![id.into()]),
        renew_ok: AtomicBool::new(true),
        step_delay: STEP,
        ..Fake::default()
    });
    let config = RuntimeConfig {
        progress_log_interval,
        ..config()
    };
    let rt = start(&fake, 10_000, config);
    let metrics = rt.metrics().clone();
    let ran = || fake.steps.load(Ordering::SeqCst) >= steps;
    until(ran, Duration::from_secs(10), "runner stalled").await;
    rt.shutdown().await;
    // Every step committed one key: the counters agree with each other.
    let (batches, keys) = (
        metrics.batches_committed.get(),
        metrics.keys_committed.get(),
    );
    assert!(batches >= steps as u64, "{batches} batches");
    assert_eq!(keys, batches, "one key per committed batch");
}

/// OBS-1 without flooding the operator's log: committed batches show up at
/// info as one `progress` event per interval, never as a line per batch
/// (`batch_committed` is debug). Guards: logging `batch_committed` at info
/// again, or logging `progress` on every batch, fails the first half; not
/// logging `progress` at all fails the second.
#[actix_rt::test]
async fn obs01_progress_is_logged_per_interval_not_per_batch() {
    run_steps("obs.quiet", Duration::from_secs(3600), 50).await;
    assert_eq!(count_events("obs.quiet", "batch_committed"), 0);
    assert_eq!(
        count_events("obs.quiet", "progress"),
        0,
        "no interval has passed"
    );
    assert_eq!(
        count_events("obs.quiet", "claim_acquired"),
        1,
        "capture works"
    );

    // An interval shorter than a batch: a `progress` event per batch,
    // each with the totals so far (one key per batch here) and the one
    // batch since the last event.
    run_steps("obs.busy", Duration::from_nanos(1), 50).await;
    assert!(count_events("obs.busy", "progress") >= 25);
    assert_eq!(count_events("obs.busy", "batch_committed"), 0);
    let progress = progress_fields("obs.busy");
    for (i, fields) in progress.iter().enumerate() {
        let n = i as u64 + 1;
        assert_eq!(&fields[..3], &[n, n, 1], "batches, keys, batches_since");
        // One key since the last event, which is at least a step ago: the
        // rate is of the keys since then, not of all of them.
        let most = (1.0 / STEP.as_secs_f64()).round() as u64;
        assert!(fields[3] <= most, "{} keys/s after batch {n}", fields[3]);
        // ... and, with events milliseconds apart, at least one a second.
        assert!(fields[3] >= 1, "{} keys/s after batch {n}", fields[3]);
    }
    // The fake does not size batches, so no batch size is reported.
    let logs = String::from_utf8_lossy(&info_logs().lock()).into_owned();
    assert!(!logs.contains("batch_size="), "no size: {logs}");
}

/// The `batches`, `keys`, `batches_since` and `keys_per_s` fields of each
/// `progress` event about backfill `id`, in order.
fn progress_fields(id: &str) -> Vec<[u64; 4]> {
    let field = |line: &str, name: &str| -> u64 {
        let start = line.find(&format!(" {name}=")).expect(name) + name.len() + 2;
        let digits: String = line[start..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        digits.parse().expect(name)
    };
    let id = format!("backfill={id} ");
    String::from_utf8_lossy(&info_logs().lock())
        .lines()
        .filter(|line| line.contains("event=\"progress\"") && line.contains(&id))
        .map(|line| {
            [
                field(line, "batches"),
                field(line, "keys"),
                field(line, "batches_since"),
                field(line, "keys_per_s"),
            ]
        })
        .collect()
}

#[test]
fn emb06_runtime_config_rejects_a_zero_progress_interval() {
    let config = RuntimeConfig {
        progress_log_interval: Duration::ZERO,
        ..RuntimeConfig::default()
    };
    assert!(config.validate(Duration::from_secs(30)).is_err());
}

/// CLM-3: a claim whose holder exited is no longer renewed. The runner
/// ends on a recorded failure while the backend would still renew its
/// claim; after that at most the round already in flight renews it, not
/// one every interval.
#[actix_rt::test]
async fn clm03_a_claim_is_not_renewed_after_its_holder_exits() {
    let fake = Arc::new(Fake {
        ids: Mutex::new(vec!["ends".into()]),
        renew_ok: AtomicBool::new(true),
        recorded: Some(Disposition::Retrying),
        ..Fake::default()
    });
    let config = RuntimeConfig {
        renew_interval: Some(Duration::from_millis(20)),
        ..config()
    };
    let rt = start(&fake, 300, config);
    let ran = || fake.steps.load(Ordering::SeqCst) > 0;
    until_released(&rt, ran, Duration::from_secs(10), "the runner did not end").await;
    let after_exit = fake.renewals.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let later = fake.renewals.load(Ordering::SeqCst);
    rt.shutdown().await;
    assert!(
        later <= after_exit + 1,
        "ten intervals after the runner ended: {after_exit} renewals, then {later}"
    );
}

/// REG-1: a process registers its definitions once. Claim polls that come
/// while the registration is still under way do not start another one.
#[actix_rt::test]
async fn reg01_polls_during_a_slow_registration_do_not_register_again() {
    let fake = Arc::new(Fake {
        register_delay: Duration::from_millis(300),
        ..Fake::default()
    });
    let rt = start(&fake, 3000, config());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    until_registered(&rt, deadline).await;
    rt.shutdown().await;
    assert_eq!(
        fake.registers.load(Ordering::SeqCst),
        1,
        "fifteen polls came during the registration"
    );
}

/// VAL-1: a runner that reaches the bound starts a claim round at once,
/// so the row, now waiting for validation, is claimed again without
/// waiting for the next poll (an hour away here).
#[actix_rt::test]
async fn val01_reaching_the_bound_starts_a_claim_round_at_once() {
    let fake = Arc::new(Fake {
        ids: Mutex::new(vec!["bounded".into()]),
        renew_ok: AtomicBool::new(true),
        reach_bound: true,
        ..Fake::default()
    });
    let config = RuntimeConfig {
        poll_interval: Duration::from_secs(3600),
        ..config()
    };
    let rt = start(&fake, 3000, config);
    let claimed_again = || fake.claims.load(Ordering::SeqCst) >= 2;
    let what = "reaching the bound did not start a claim round";
    until(claimed_again, Duration::from_secs(10), what).await;
    rt.shutdown().await;
}
