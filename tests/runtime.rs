//! Conformance tests of the actor runtime (`backfill-actors` driven over the
//! real engine) against a real PostgreSQL.
//!
//! Index:
//! - CT-5 through the runtime: `ct05_pause_mid_batch_*`
//! - CT-6 rolling deployment: `ct06_*`
//! - EMB-9 graceful shutdown releases claims: `emb09_graceful_shutdown_*`
//! - EMB-6 the concurrency cap: `emb06_concurrency_cap_*`
//! - RT-1/CLM-3 a repair that panics: `rt01_panic_*`
//! - VAL-6 lifecycle validation waits for an explicit one at the poll
//!   interval: `val06_*`
//! - OBS-5 the renewer samples the progress of held claims: `obs05_*`
//!
//! Races are forced with gates in the test repair and a second session's
//! row locks; waiting for an outcome polls PostgreSQL with a deadline.

mod support;

use backfill::engine::RetryPolicy;
use backfill::runtime::{RuntimeConfig, RuntimeHandle};
use backfill::{Engine, EngineConfig, Registry};
use std::sync::Arc;
use std::time::Duration;
use support::log::Log;
use support::repairs::*;
use support::{eventually, test_db, TestDb};

const ID: &str = "items.counter";

fn engine_config(ttl: Duration) -> EngineConfig {
    EngineConfig {
        lease_ttl: ttl,
        statement_timeout: Duration::from_secs(10),
        lock_timeout: Duration::from_millis(300),
        validation_timeout: Duration::from_secs(10),
        retry: RetryPolicy {
            max_attempts: 50,
            backoff_base: Duration::from_millis(20),
            backoff_max: Duration::from_millis(100),
        },
        build_info: "runtime-test".into(),
        ..EngineConfig::default()
    }
}

/// The runtime's settings; its lease TTL is the engine's.
fn runtime_config(worker: &str) -> RuntimeConfig {
    RuntimeConfig {
        worker_id: worker.into(),
        poll_interval: Duration::from_millis(50),
        max_concurrent_runners: 4,
        shutdown_grace: Duration::from_secs(10),
        ..RuntimeConfig::default()
    }
}

async fn engine_on_own_pool(db: &TestDb, registry: Registry, ttl: Duration) -> Engine {
    let pool = backfill::__private::store::build_pool(&db.url, 4)
        .await
        .unwrap();
    Engine::new(pool, registry, engine_config(ttl)).unwrap()
}

/// A database with `rows` items, the counter (batches of 10, `hooks`)
/// registered and started on an engine with its own pool.
async fn started(rows: i64, hooks: Arc<Hooks>, ttl: Duration) -> (TestDb, Engine) {
    let db = test_db().await;
    db.exec(&items_sql(rows)).await;
    let engine = engine_on_own_pool(
        &db,
        Registry::new().with(Counter::new(ID, 10, hooks)).unwrap(),
        ttl,
    )
    .await;
    engine.register().await.unwrap();
    engine.start(ID).await.unwrap();
    (db, engine)
}

/// Wake the runtime, wait until the backfill completes with every one of
/// `rows` items repaired exactly once, then shut the runtime down.
async fn completes(db: &TestDb, runtime: RuntimeHandle<Engine>, rows: i64) {
    runtime.wake();
    eventually("completion", || async {
        state_of(db, ID).await == "completed"
    })
    .await;
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n = 1")
            .await,
        rows
    );
    runtime.shutdown().await;
}

/// Wait (polling PostgreSQL or the runtime) until `check` holds.
async fn state_of(db: &TestDb, id: &str) -> String {
    db.text(&format!(
        "SELECT state AS v FROM backfill WHERE id = '{id}'"
    ))
    .await
    .unwrap()
}

/// CT-5 through the runtime: pause while a runner is mid-batch (held at the
/// gate between mutation and commit). The batch rolls back, the runner
/// exits without starting another batch, and resume continues from the
/// checkpoint to completion with every item repaired exactly once. The
/// rollback is logged at info as the pause taking effect, never as a
/// stale owner's warning. Guards: the fence at commit (else n = 1 for the
/// paused batch and the resumed run makes n = 2), the runner's stop on a
/// stale outcome, and the runtime's reading of the paused row after the
/// rejection (without it the pause logs `stale_owner_rejected` at WARN).
#[actix_rt::test]
async fn ct05_pause_mid_batch_rolls_back_and_resume_continues() {
    let (log, _capture) = Log::capture();
    let hooks = Hooks::new();
    let ttl = Duration::from_secs(10);
    let (db, engine) = started(40, hooks.clone(), ttl).await;
    let mut gate = hooks.gate_after_mutate();
    let runtime = RuntimeHandle::start(Arc::new(engine.clone()), runtime_config("w1")).unwrap();
    gate.reached().await;
    engine.pause(ID).await.unwrap();
    gate.release();
    eventually("the runner exits", || async {
        runtime.status().await.unwrap().held.is_empty()
    })
    .await;
    assert_eq!(state_of(&db, ID).await, "paused");
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n <> 0")
            .await,
        0,
        "the in-flight batch rolled back"
    );
    assert_eq!(log.lines("stale_owner_rejected"), Vec::<String>::new());
    let paused = log.lines("batch_paused");
    assert!(
        paused.len() == 1 && paused[0].contains("INFO"),
        "{paused:?}"
    );
    hooks.clear_gates();

    engine.resume(ID).await.unwrap();
    completes(&db, runtime, 40).await;
}

/// CT-6: two compatible processes (separate pools and runtimes) register one
/// ID in either order: one row. The first owner stalls mid-batch; after its
/// lease expires the second takes over and finishes; the prior owner's
/// in-flight batch is rejected at commit. A runtime without the definition
/// never claims the ID. Guards: generation fence, REG-4 (claims only IDs
/// with a local definition).
#[actix_rt::test]
async fn ct06_rolling_deployment_one_row_takeover_fences_prior_owner() {
    let db = test_db().await;
    db.exec(&items_sql(30)).await;
    let ttl = Duration::from_secs(10);
    let hooks_a = Hooks::new();
    let hooks_b = Hooks::new();
    let a = engine_on_own_pool(
        &db,
        Registry::new()
            .with(Counter::new(ID, 10, hooks_a.clone()))
            .unwrap(),
        ttl,
    )
    .await;
    let b = engine_on_own_pool(
        &db,
        Registry::new()
            .with(Counter::new(ID, 10, hooks_b.clone()))
            .unwrap(),
        ttl,
    )
    .await;
    let stranger = engine_on_own_pool(
        &db,
        Registry::new()
            .with(Counter::new("other.repair", 10, Hooks::new()))
            .unwrap(),
        ttl,
    )
    .await;
    // Either order converges on one row and one obligation.
    b.register().await.unwrap();
    a.register().await.unwrap();
    b.register().await.unwrap();
    assert_eq!(
        db.scalar(&format!(
            "SELECT count(*) AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await,
        1
    );
    a.start(ID).await.unwrap();

    let mut gate_a = hooks_a.gate_after_mutate();
    let runtime_a = RuntimeHandle::start(Arc::new(a.clone()), runtime_config("a")).unwrap();
    gate_a.reached().await;
    let gen_a = db
        .scalar(&format!(
            "SELECT generation AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await;

    let runtime_s = RuntimeHandle::start(Arc::new(stranger), runtime_config("stranger")).unwrap();
    let runtime_b = RuntimeHandle::start(Arc::new(b.clone()), runtime_config("b")).unwrap();
    // B cannot claim while A's lease is valid; make it expire (as if A
    // stopped renewing long ago) and B takes over.
    db.expire_lease(ID).await;
    eventually("B takes over", || async {
        db.text(&format!(
            "SELECT owner AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await
        .as_deref()
            == Some("b")
            || state_of(&db, ID).await != "running"
    })
    .await;
    assert!(
        db.scalar(&format!(
            "SELECT generation AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await
            > gen_a
    );
    // A's in-flight batch now reaches its commit and is rejected.
    gate_a.release();
    eventually("completion by B", || async {
        state_of(&db, ID).await == "completed"
    })
    .await;
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n = 1")
            .await,
        30,
        "every item exactly once: A's stale batch rolled back"
    );
    // Registration runs at the stranger's first ticks; on a loaded
    // machine it may finish after B's run. It never holds the ID.
    eventually("the stranger registers", || async {
        runtime_s.status().await.unwrap().registered
    })
    .await;
    let status = runtime_s.status().await.unwrap();
    assert!(status.held.is_empty(), "{:?}", status.held);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill WHERE owner = 'stranger'")
            .await,
        0
    );
    for rt in [&runtime_a, &runtime_b, &runtime_s] {
        rt.shutdown().await;
    }
}

/// Graceful shutdown (SIGTERM path): the runner finishes or rolls back its
/// batch, gives the claim back, and another process continues at once,
/// without waiting for lease expiry. Guard: `lease_release` on stop.
#[actix_rt::test]
async fn emb09_graceful_shutdown_releases_claims_for_immediate_pickup() {
    let db = test_db().await;
    db.exec(&items_sql(50)).await;
    let ttl = Duration::from_secs(60);
    let hooks = Hooks::new();
    let a = engine_on_own_pool(
        &db,
        Registry::new()
            .with(Counter::new(ID, 5, hooks.clone()))
            .unwrap(),
        ttl,
    )
    .await;
    a.register().await.unwrap();
    a.start(ID).await.unwrap();
    let mut gate = hooks.gate_after_mutate();
    let runtime_a = RuntimeHandle::start(Arc::new(a.clone()), runtime_config("a")).unwrap();
    gate.reached().await;
    // Shutdown while a batch is in flight; the batch may finish.
    let shutdown = {
        let runtime_a = runtime_a.clone();
        actix_rt::spawn(async move { runtime_a.shutdown().await })
    };
    hooks.clear_gates();
    gate.release();
    shutdown.await.unwrap();
    assert_eq!(
        db.text(&format!(
            "SELECT owner AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await,
        None,
        "the claim was given back"
    );
    let checkpoint_rows = db
        .scalar("SELECT count(*) AS v FROM items WHERE n = 1")
        .await;
    assert_eq!(checkpoint_rows, 5, "exactly the in-flight batch committed");

    // With a 60 s lease, only a release lets B continue now.
    let b = engine_on_own_pool(
        &db,
        Registry::new()
            .with(Counter::new(ID, 5, Hooks::new()))
            .unwrap(),
        ttl,
    )
    .await;
    let runtime_b = RuntimeHandle::start(Arc::new(b), runtime_config("b")).unwrap();
    eventually("B completes", || async {
        state_of(&db, ID).await == "completed"
    })
    .await;
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n = 1")
            .await,
        50
    );
    runtime_b.shutdown().await;
}

/// The runtime caps concurrency: with four backfills and a cap of two, it
/// never holds more than two claims, and all complete.
#[actix_rt::test]
async fn emb06_concurrency_cap_is_respected() {
    let db = test_db().await;
    let ttl = Duration::from_secs(10);
    let ids = ["c.one", "c.two", "c.three", "c.four"];
    let tables = ["t_one", "t_two", "t_three", "t_four"];
    let mut registry = Registry::new();
    for (id, table) in ids.into_iter().zip(tables) {
        db.exec(&items_sql(60).replace("items", table)).await;
        registry
            .register(Counter::new(id, 3, Hooks::new()).on_table(table))
            .unwrap();
    }
    let engine = engine_on_own_pool(&db, registry, ttl).await;
    engine.register().await.unwrap();
    for id in ids {
        engine.start(id).await.unwrap();
    }
    let config = RuntimeConfig {
        max_concurrent_runners: 2,
        ..runtime_config("capped")
    };
    let runtime = RuntimeHandle::start(Arc::new(engine), config).unwrap();
    let mut max_held = 0;
    let mut max_owned = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        max_held = max_held.max(runtime.status().await.unwrap().held.len());
        max_owned = max_owned.max(
            db.scalar("SELECT count(*) AS v FROM backfill WHERE owner IS NOT NULL")
                .await,
        );
        let done = db
            .scalar("SELECT count(*) AS v FROM backfill WHERE state = 'completed'")
            .await;
        if done == 4 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(max_held <= 2, "held {max_held}");
    assert!(max_owned <= 2, "owned {max_owned}");
    for table in tables {
        assert_eq!(
            db.scalar(&format!("SELECT count(*) AS v FROM {table} WHERE n = 1"))
                .await,
            60
        );
    }
    runtime.shutdown().await;
}

/// RT-1, RT-2, CLM-3: a repair whose code panics, in a batch or in
/// validation, is recorded as a fatal failure: the backfill goes to
/// `failed` with no owner, the runtime holds no claim for it, and the
/// runtime keeps working: after `retry` the same backfill goes on and
/// completes with every item repaired once. Guard: the panic capture in
/// the engine's `Backend` (`unless_panicked` in src/runtime.rs); without
/// it the runner or the validator dies silently, the renewer keeps the
/// lease alive and the row stays `running` (or `validating`), owned.
#[actix_rt::test]
async fn rt01_panic_in_a_repair_is_recorded_and_the_runtime_carries_on() {
    use std::sync::atomic::Ordering;
    let hooks = Hooks::new();
    let ttl = Duration::from_secs(10);
    let (db, engine) = started(20, hooks.clone(), ttl).await;
    let failed_by_panic = || async {
        db.scalar(&format!(
            "SELECT count(*) AS v FROM backfill WHERE id = '{ID}' AND state = 'failed' \
             AND owner IS NULL AND last_error_kind = 'fatal' \
             AND last_error LIKE '%panicked%'"
        ))
        .await
            == 1
    };

    hooks.panic_in_mutate.store(true, Ordering::SeqCst);
    let runtime = RuntimeHandle::start(Arc::new(engine.clone()), runtime_config("w1")).unwrap();
    eventually("the panic in a batch is recorded", failed_by_panic).await;
    eventually("the runtime holds no claim", || async {
        runtime.status().await.unwrap().held.is_empty()
    })
    .await;
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n <> 0")
            .await,
        0,
        "the batch that panicked rolled back"
    );

    hooks.panic_in_mutate.store(false, Ordering::SeqCst);
    hooks.panic_in_validate.store(true, Ordering::SeqCst);
    engine.retry(ID).await.unwrap();
    runtime.wake();
    eventually("the panic in validation is recorded", failed_by_panic).await;
    eventually("the runtime holds no claim", || async {
        runtime.status().await.unwrap().held.is_empty()
    })
    .await;
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n = 1")
            .await,
        20,
        "every batch committed before validation"
    );

    hooks.panic_in_validate.store(false, Ordering::SeqCst);
    engine.retry(ID).await.unwrap();
    completes(&db, runtime, 20).await;
}

/// VAL-6: while an explicit validation holds a backfill's validation lock,
/// the runtime's lifecycle validation finds it busy, gives the claim back
/// and tries again at the next poll, not at once: in the second after the
/// first busy try (half the 2 s poll interval) there is at most one more
/// try and one more generation. Once the lock is gone the backfill
/// completes. Guard: the supervisor not claiming again right after a busy
/// validation (without it the claim, the busy validation and the release
/// repeat back to back: 306 times in that second, each with a new
/// generation).
#[actix_rt::test]
async fn val06_busy_lifecycle_validation_waits_for_the_next_poll() {
    use diesel_async::RunQueryDsl;
    let ttl = Duration::from_secs(10);
    let (db, engine) = started(20, Hooks::new(), ttl).await;
    // The explicit validation: a second session holding the lock.
    let mut holder = db.connect().await;
    diesel::sql_query("BEGIN")
        .execute(&mut holder)
        .await
        .unwrap();
    assert!(
        backfill::__private::store::validation_try_lock(&mut holder, ID)
            .await
            .unwrap()
    );
    let config = RuntimeConfig {
        poll_interval: Duration::from_secs(2),
        ..runtime_config("w1")
    };
    let runtime = RuntimeHandle::start(Arc::new(engine.clone()), config).unwrap();
    let busy = || runtime.metrics().validation_errors.get();
    eventually("a busy lifecycle validation", || async { busy() >= 1 }).await;
    let generation = db
        .scalar(&format!(
            "SELECT generation AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(busy() <= 2, "{} busy validations in 1 s", busy());
    let later = db
        .scalar(&format!(
            "SELECT generation AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await;
    assert!(
        later - generation <= 1,
        "generation {generation} -> {later}"
    );
    diesel::sql_query("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    completes(&db, runtime, 20).await;
}

/// OBS-5 through the runtime: while a runner holds its claim (here held
/// mid-batch at a gate), the lease renewer records the claim's progress
/// at the sample interval, under the claim's generation, and the run
/// still completes exactly once. Guard: the renewer's sampling round
/// (without it no sample is ever written).
#[actix_rt::test]
async fn obs05_the_runtime_samples_the_progress_of_its_claims() {
    let hooks = Hooks::new();
    let (db, engine) = started(40, hooks.clone(), Duration::from_secs(10)).await;
    let mut gate = hooks.gate_after_mutate();
    let config = RuntimeConfig {
        progress_sample_interval: Duration::from_millis(100),
        ..runtime_config("w1")
    };
    let runtime = RuntimeHandle::start(Arc::new(engine.clone()), config).unwrap();
    gate.reached().await;
    eventually("two samples of the held claim", || async {
        db.scalar(&format!(
            "SELECT count(*) AS v FROM backfill_progress p JOIN backfill b ON b.id = p.backfill_id \
             WHERE p.backfill_id = '{ID}' AND p.part IS NULL AND p.generation = b.generation"
        ))
        .await
            >= 2
    })
    .await;
    hooks.clear_gates();
    gate.release();
    completes(&db, runtime, 40).await;
}
