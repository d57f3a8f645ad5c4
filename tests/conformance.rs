//! Conformance tests of the durable core against a real PostgreSQL, through
//! the production store and engine (CONTRACT section 11).
//!
//! Index (each test's doc comment names the guard whose removal fails it):
//! - CT-1  claim race and takeover: `ct01_*`
//! - CT-2  bounded batches, range checks, timeouts: `ct02_*`
//! - CT-3  rollback of mutation and checkpoint together: `ct03_*`
//! - CT-4  restart from PostgreSQL state: `ct04_*`
//! - CT-5  stale owners rejected at commit: `ct05_*`
//! - CT-7  validation gates completion: `ct07_*`
//! - CT-8  bounded failure and operator retry: `ct08_*`
//! - VAL-6 lifecycle validation waits for an explicit one: `val06_*`
//! - EX-5/CLM-1 the open batch a claim carries between batches: `ex05_*`,
//!   `clm01_*`
//! - EX-6 one-statement batches pipelined behind the previous commit:
//!   `ex06_*`, `ct05_pause_rejects_the_batch_sent_ahead`,
//!   `ct02_one_statement_*`, `ct02_lock_timeout_of_a_batch_sent_ahead_*`,
//!   `ct04_termination_with_a_batch_sent_ahead_*`
//! - EX-6/CLM-2 overlapped commits (`Repair::overlap_commits`): the next
//!   batch's body on a second connection while the previous batch commits:
//!   `ex06_overlapped_*`, `ex06_second_connection_*`,
//!   `ex06_runner_does_not_wait_*`, `ex06_second_connection_goes_back_*`,
//!   `ct05_pause_rejects_an_overlapped_*`, `clm01_release_ends_both_*`
//! - REG-1/REG-4, LC-1, EX-2: registration, fail-closed keys, lifecycle
//!   enforced by the database, compound keys: `reg*`, `lc01_*`, `ex02_*`
//! - RT-1 errors classified whatever the server's language: `rt01_*`
//!
//! Races are forced with gates (a channel between the repair's mutation and
//! the batch's commit) and with a second connection holding row locks;
//! nothing here sleeps to make a race happen.

mod support;

use backfill::engine::{ActionOutcome, FailureOutcome, Started, ValidationRun};
use backfill::repair::{DefinitionError, RepairError, SelectionError};
use backfill::{
    Action, BatchOutcome, Claim, Engine, EngineConfig, EngineError, Phase, Registry, State,
};
use diesel_async::{AsyncConnection, RunQueryDsl};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use support::engine_config as config;
use support::repairs::*;
use support::{drive, test_db, TestDb};

const ID: &str = "items.counter";

/// An engine over `pool` with `counter` as its only definition.
fn counter_engine(pool: backfill::store::Pool, counter: Counter) -> Engine {
    let registry = Registry::new().with(counter).expect("valid definition");
    Engine::new(pool, registry, config()).expect("engine")
}

/// A database with `rows` items, the counter registered and started.
async fn started(rows: i64, limit: u32) -> (TestDb, Engine, Arc<Hooks>) {
    started_counter(rows, limit, None, |c| c).await
}

/// A second session inside a transaction that ran `sql`, holding its row
/// locks until the caller sends `ROLLBACK`.
async fn lock_holder(db: &TestDb, sql: &str) -> diesel_async::AsyncPgConnection {
    let mut holder = db.connect().await;
    diesel::sql_query("BEGIN")
        .execute(&mut holder)
        .await
        .unwrap();
    diesel::sql_query(sql).execute(&mut holder).await.unwrap();
    holder
}

async fn count_n(db: &TestDb, n: i32) -> i64 {
    db.scalar(&format!("SELECT count(*) AS v FROM items WHERE n = {n}"))
        .await
}

/// CT-5: pause, then the claim's next batch is rejected by the fence.
async fn pause_then_next_batch_is_stale(engine: &Engine, claim: &mut Claim) {
    assert!(matches!(
        engine.pause(ID).await.unwrap(),
        ActionOutcome::Applied { .. }
    ));
    assert_eq!(engine.run_batch(claim).await.unwrap(), BatchOutcome::Stale);
}

/// Resume the paused backfill and drive it to `completed`: all `rows`
/// items then repaired exactly once.
async fn resume_and_complete(db: &TestDb, engine: &Engine, rows: i64) {
    assert!(matches!(
        engine.resume(ID).await.unwrap(),
        ActionOutcome::Applied { .. }
    ));
    drive_to_completed(db, engine, rows).await;
}

/// Drive the backfill to `completed`: all `rows` items then repaired
/// exactly once (`n = 1`: a 2 is a batch applied twice).
async fn drive_to_completed(db: &TestDb, engine: &Engine, rows: i64) {
    drive(engine, "w").await;
    assert_eq!(state(engine).await, State::Completed);
    assert_eq!(count_n(db, 1).await, rows);
}

async fn state(engine: &Engine) -> State {
    engine.get(ID).await.expect("row").state
}

// ---------------------------------------------------------------- CT-1

/// CT-1: eight workers race for one row; exactly one claim wins and the
/// generation advances once. After expiry a second worker takes over at the
/// committed checkpoint and the first owner's next batch is rejected.
/// Guards: `FOR UPDATE SKIP LOCKED` + the unexpired-owner condition of
/// `backfill_claim` (two winners), the generation/owner fence of
/// `backfill_checkpoint_advance` (the stale batch would commit and count twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ct01_claim_race_has_one_owner_and_takeover_keeps_checkpoint() {
    let (db, engine, _hooks) = started(30, 10).await;
    let gen0 = engine.get(ID).await.unwrap().generation;

    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (engine, barrier) = (engine.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            engine.claim_next(&format!("w{i}"), &[]).await.unwrap()
        }));
    }
    let mut claims = Vec::new();
    for t in tasks {
        claims.extend(t.await.unwrap());
    }
    assert_eq!(claims.len(), 1, "exactly one worker owns the backfill");
    let mut first = claims.pop().unwrap();
    assert_eq!(first.generation, gen0 + 1);
    assert_eq!(first.takeover_from, None);

    assert_eq!(
        engine.run_batch(&mut first).await.unwrap(),
        BatchOutcome::Committed {
            keys: 10,
            reached_bound: false
        }
    );

    db.expire_lease(ID).await;
    let mut second = engine.claim_next("w-other", &[]).await.unwrap().unwrap();
    assert_eq!(second.generation, gen0 + 2);
    assert_eq!(second.takeover_from.as_deref(), Some(first.worker.as_str()));
    assert_eq!(second.checkpoint_json(), Some(serde_json::json!(10)));

    assert_eq!(
        engine.run_batch(&mut first).await.unwrap(),
        BatchOutcome::Stale
    );
    assert_eq!(count_n(&db, 1).await, 10, "the stale batch rolled back");

    while let BatchOutcome::Committed {
        reached_bound: false,
        ..
    } = engine.run_batch(&mut second).await.unwrap()
    {}
    drive(&engine, "w-other").await;
    assert_eq!(state(&engine).await, State::Completed);
    assert_eq!(
        count_n(&db, 1).await,
        30,
        "every item repaired exactly once"
    );
}

// ---------------------------------------------------------------- CT-2

/// CT-2: a source set larger than one batch advances by at most the batch
/// limit per transaction, and the checkpoint follows the last key.
/// Guard: the limit passed to the selection and checked by the engine.
#[tokio::test]
async fn ct02_batches_advance_at_most_the_limit_per_transaction() {
    let (db, engine, _hooks) = started(25, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    for (expected_done, expected_cp) in [(10, 10), (20, 20)] {
        let out = engine.run_batch(&mut claim).await.unwrap();
        assert_eq!(
            out,
            BatchOutcome::Committed {
                keys: 10,
                reached_bound: false
            }
        );
        assert_eq!(count_n(&db, 1).await, expected_done);
        let row = engine.get(ID).await.unwrap();
        assert_eq!(row.checkpoint_json, Some(serde_json::json!(expected_cp)));
        assert_eq!(row.rows_done, expected_done);
    }
    assert_eq!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            keys: 5,
            reached_bound: true
        }
    );
    assert_eq!(state(&engine).await, State::Validating);
}

/// CT-2 / EX-4: a selection returning more keys than the limit is a typed
/// error and changes nothing (no mutation, no checkpoint, no state).
/// Guard: the engine's count check in `check_selection`.
#[tokio::test]
async fn ct02_over_limit_selection_is_rejected_and_changes_nothing() {
    let (db, engine, hooks) = started(25, 10).await;
    hooks.select_mode.store(SELECT_OVER_LIMIT, Ordering::SeqCst);
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let before = engine.get(ID).await.unwrap();
    let err = engine.run_batch(&mut claim).await.unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Selection {
                error: SelectionError::OverLimit { got: 11, limit: 10 },
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(count_n(&db, 0).await, 25);
    let after = engine.get(ID).await.unwrap();
    assert_eq!(after.checkpoint, None);
    assert_eq!(after.state, State::Running);
    assert_eq!(after.generation, before.generation);
}

/// CT-2 / EX-3 / EX-7: rows inserted above the bound after `start` are never
/// touched; a selection that crosses the bound is rejected and rolled back.
/// Guards: the engine's range check and `$5 <= bound` in the fence.
#[tokio::test]
async fn ct02_rows_above_the_bound_are_never_touched() {
    let (db, engine, hooks) = started(20, 15).await;
    db.exec("INSERT INTO items (id) SELECT g FROM generate_series(21, 30) g")
        .await;
    hooks
        .select_mode
        .store(SELECT_IGNORE_BOUND, Ordering::SeqCst);
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.run_batch(&mut claim).await.unwrap();
    let err = engine.run_batch(&mut claim).await.unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Selection {
                error: SelectionError::AfterBound,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE id > 15 AND n > 0")
            .await,
        0
    );
    hooks.select_mode.store(SELECT_NORMAL, Ordering::SeqCst);
    assert!(engine.release(&claim).await.unwrap());
    drive(&engine, "w").await;
    assert_eq!(state(&engine).await, State::Completed);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE id > 20 AND n > 0")
            .await,
        0
    );
    assert_eq!(engine.get(ID).await.unwrap().bound_json, Some(20.into()));
}

/// CT-2 / EX-3: a selection that repeats the checkpoint key is rejected
/// (it would apply the mutation twice). Guard: the strictly-after check.
#[tokio::test]
async fn ct02_selection_repeating_the_checkpoint_is_rejected() {
    let (db, engine, hooks) = started(20, 5).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.run_batch(&mut claim).await.unwrap();
    hooks
        .select_mode
        .store(SELECT_REPEAT_CHECKPOINT, Ordering::SeqCst);
    let err = engine.run_batch(&mut claim).await.unwrap_err();
    assert!(matches!(
        err,
        EngineError::Selection {
            error: SelectionError::NotAfterCheckpoint,
            ..
        }
    ));
    assert_eq!(count_n(&db, 2).await, 0);
    assert_eq!(count_n(&db, 1).await, 5);
}

/// CT-2 / EX-5: a batch blocked on a row lock hits the per-batch
/// `lock_timeout`, is classified retryable and rolls back mutation and
/// checkpoint. Guard: `batch_set_timeouts` in the batch transaction (without
/// it the batch waits for the lock holder forever).
#[tokio::test]
async fn ct02_lock_timeout_rolls_back_mutation_and_checkpoint() {
    let (db, engine, _hooks) = started(20, 10).await;
    let mut blocker = lock_holder(&db, "SELECT id FROM items WHERE id = 5 FOR UPDATE").await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let err = tokio::time::timeout(Duration::from_secs(20), engine.run_batch(&mut claim))
        .await
        .expect("the batch must be bounded by lock_timeout")
        .unwrap_err();
    assert!(
        matches!(err.classification(), Some(RepairError::Retryable(ref m)) if m.contains("lock timeout")),
        "{err:?}"
    );
    assert_eq!(count_n(&db, 0).await, 20);
    assert_eq!(engine.get(ID).await.unwrap().checkpoint, None);
    diesel::sql_query("ROLLBACK")
        .execute(&mut blocker)
        .await
        .unwrap();
    assert!(matches!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed { keys: 10, .. }
    ));
}

// ---------------------------------------------------------------- CT-3

/// CT-3: the repair fails after its mutation ran; mutation and checkpoint
/// both roll back. Guard: the single transaction around mutation and
/// checkpoint (a mutation committed on its own would leave n = 1).
#[tokio::test]
async fn ct03_error_after_mutation_rolls_back_mutation_and_checkpoint() {
    let (db, engine, hooks) = started(20, 10).await;
    *hooks.fail_after_mutate.lock() = Some(RepairError::Fatal("boom".into()));
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let err = engine.run_batch(&mut claim).await.unwrap_err();
    assert!(matches!(err, EngineError::Repair { .. }));
    assert_eq!(count_n(&db, 0).await, 20);
    assert_eq!(engine.get(ID).await.unwrap().checkpoint, None);
}

/// CT-3: the checkpoint write itself fails (the backfill row is locked by a
/// second session, so the fenced UPDATE hits `lock_timeout`) after the
/// mutation ran: the mutation rolls back with it. Guard: mutation and
/// checkpoint in ONE transaction (written separately, n would be 1).
#[tokio::test]
async fn ct03_checkpoint_failure_rolls_back_the_mutation() {
    let (db, engine, _hooks) = started(20, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let sql = format!("SELECT id FROM backfill WHERE id = '{ID}' FOR UPDATE");
    let mut blocker = lock_holder(&db, &sql).await;
    // Bounded: if the checkpoint were written outside the batch transaction
    // (without its lock_timeout) this would wait on the blocker forever.
    let result = tokio::time::timeout(Duration::from_secs(10), engine.run_batch(&mut claim)).await;
    diesel::sql_query("ROLLBACK")
        .execute(&mut blocker)
        .await
        .unwrap();
    assert_eq!(
        count_n(&db, 1).await,
        0,
        "mutation rolled back with the checkpoint"
    );
    let err = result.expect("batch bounded by lock_timeout").unwrap_err();
    assert!(matches!(err, EngineError::Store(_)), "{err:?}");
    assert!(matches!(
        err.classification(),
        Some(RepairError::Retryable(_))
    ));
    assert_eq!(engine.get(ID).await.unwrap().checkpoint, None);
}

// ---------------------------------------------------------------- CT-4

/// CT-4: the worker is terminated mid-transaction (its future dropped after
/// the mutation ran, before commit); a fresh engine on a fresh pool takes
/// over and rebuilds progress from PostgreSQL without recapturing the bound.
/// Guard: the atomic batch (a committed mutation without checkpoint would be
/// applied twice: n = 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ct04_termination_mid_batch_then_fresh_engine_resumes() {
    let (db, engine, hooks) = started(30, 10).await;
    let bound_before = engine.get(ID).await.unwrap().bound;
    let mut gate = hooks.gate_after_mutate();
    let mut claim = engine.claim_next("doomed", &[]).await.unwrap().unwrap();
    let task = tokio::spawn({
        let engine = engine.clone();
        async move { engine.run_batch(&mut claim).await }
    });
    gate.reached().await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    drop(engine);
    hooks.clear_gates();

    let pool = backfill::store::build_pool(&db.url, 4).await.unwrap();
    let fresh = counter_engine(pool, Counter::new(ID, 10, hooks.clone()));
    fresh.register().await.unwrap();
    db.expire_lease(ID).await;
    drive(&fresh, "fresh").await;
    let row = fresh.get(ID).await.unwrap();
    assert_eq!(row.state, State::Completed);
    assert_eq!(row.bound, bound_before, "bound never recaptured");
    assert_eq!(count_n(&db, 1).await, 30);
}

/// CT-4: termination right after a batch commit; a fresh engine resumes
/// strictly after the committed checkpoint. Guard: the checkpoint carried in
/// the claim from PostgreSQL (resuming from worker memory or from the start
/// would make n = 2).
#[tokio::test]
async fn ct04_termination_after_commit_resumes_from_checkpoint() {
    let (db, engine, hooks) = started(30, 10).await;
    let mut claim = engine.claim_next("doomed", &[]).await.unwrap().unwrap();
    engine.run_batch(&mut claim).await.unwrap();
    let bound_before = engine.get(ID).await.unwrap().bound;
    drop(claim);
    drop(engine);

    let pool = backfill::store::build_pool(&db.url, 4).await.unwrap();
    let fresh = counter_engine(pool, Counter::new(ID, 10, hooks.clone()));
    db.expire_lease(ID).await;
    let claim = fresh.claim_next("fresh", &[]).await.unwrap().unwrap();
    assert_eq!(claim.checkpoint_json(), Some(serde_json::json!(10)));
    assert_eq!(claim.takeover_from.as_deref(), Some("doomed"));
    fresh.release(&claim).await.unwrap();
    drive(&fresh, "fresh").await;
    let row = fresh.get(ID).await.unwrap();
    assert_eq!(row.state, State::Completed);
    assert_eq!(row.bound, bound_before);
    assert_eq!(count_n(&db, 1).await, 30);
}

/// CT-4: termination during validation; validation is repeated by a fresh
/// engine and completes. Guard: completion only inside the fenced validation
/// transaction (a dropped validator completes nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ct04_termination_during_validation_is_repeated_after_restart() {
    let (db, engine, hooks) = started(10, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.run_batch(&mut claim).await.unwrap();
    let mut gate = hooks.gate_in_validate();
    let vclaim = engine.claim_next("doomed", &[]).await.unwrap().unwrap();
    assert_eq!(vclaim.phase, Phase::Validate);
    let task = tokio::spawn({
        let engine = engine.clone();
        async move { engine.validate_claimed(&vclaim).await }
    });
    gate.reached().await;
    task.abort();
    let _ = task.await;
    hooks.clear_gates();
    assert_eq!(state(&engine).await, State::Validating);

    let pool = backfill::store::build_pool(&db.url, 4).await.unwrap();
    let fresh = counter_engine(pool, Counter::new(ID, 10, hooks.clone()));
    db.expire_lease(ID).await;
    drive(&fresh, "fresh").await;
    assert_eq!(state(&fresh).await, State::Completed);
}

// ---------------------------------------------------------------- CT-5

/// CT-5: pause commits while a batch is between mutation and commit; the
/// batch's fence fails and mutation and checkpoint roll back. Resume
/// continues from the checkpoint. Guard: the fence's claim conditions.
/// A pause changes all four (state, owner, generation, lease), so each
/// backs up the others; with all four removed this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ct05_pause_rejects_in_flight_batch() {
    let (db, engine, hooks) = started(20, 10).await;
    let mut gate = hooks.gate_after_mutate();
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let task = tokio::spawn({
        let engine = engine.clone();
        async move { engine.run_batch(&mut claim).await }
    });
    gate.reached().await;
    assert!(matches!(
        engine.pause(ID).await.unwrap(),
        ActionOutcome::Applied {
            prior: State::Running,
            ..
        }
    ));
    gate.release();
    assert_eq!(task.await.unwrap().unwrap(), BatchOutcome::Stale);
    hooks.clear_gates();
    assert_eq!(count_n(&db, 1).await, 0);
    assert_eq!(state(&engine).await, State::Paused);
    assert!(engine.claim_next("w", &[]).await.unwrap().is_none());

    assert!(matches!(
        engine.pause(ID).await.unwrap(),
        ActionOutcome::Converged(_)
    ));
    resume_and_complete(&db, &engine, 20).await;
}

/// CT-5: the lease expires (by PostgreSQL's clock) while a batch is in
/// flight; the commit is rejected. Guard: `lease_expires_at >
/// clock_timestamp()` in the fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ct05_lease_expiry_rejects_in_flight_batch() {
    let (db, engine, hooks) = started(20, 10).await;
    let mut gate = hooks.gate_after_mutate();
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let task = tokio::spawn({
        let engine = engine.clone();
        async move { engine.run_batch(&mut claim).await }
    });
    gate.reached().await;
    db.expire_lease(ID).await;
    gate.release();
    assert_eq!(task.await.unwrap().unwrap(), BatchOutcome::Stale);
    assert_eq!(count_n(&db, 1).await, 0);
}

/// CT-5: a takeover by the SAME worker ID (a restarted process keeps its
/// hostname-based ID) while the old batch is in flight. Owner, lease and
/// checkpoint all still match; only the generation tells the old batch from
/// the new claim. Guard: `generation = $3` in the fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ct05_takeover_by_same_worker_id_rejects_in_flight_batch() {
    let (db, engine, hooks) = started(20, 10).await;
    let mut gate = hooks.gate_after_mutate();
    let mut old = engine.claim_next("host-a", &[]).await.unwrap().unwrap();
    let task = tokio::spawn({
        let engine = engine.clone();
        async move { engine.run_batch(&mut old).await }
    });
    gate.reached().await;
    db.expire_lease(ID).await;
    let new = engine.claim_next("host-a", &[]).await.unwrap().unwrap();
    gate.release();
    assert_eq!(task.await.unwrap().unwrap(), BatchOutcome::Stale);
    hooks.clear_gates();
    assert_eq!(count_n(&db, 1).await, 0);
    let mut new = new;
    while let BatchOutcome::Committed {
        reached_bound: false,
        ..
    } = engine.run_batch(&mut new).await.unwrap()
    {}
    assert_eq!(count_n(&db, 1).await, 20);
    assert_eq!(count_n(&db, 2).await, 0);
}

/// CT-5 / VAL-3: pause while validation is in flight; the validator's
/// completion is rejected and the row stays paused. Guard: the fence of
/// `validation_complete`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ct05_pause_rejects_in_flight_validation() {
    let (_db, engine, hooks) = started(10, 10).await;
    drive_until_validating(&engine).await;
    let mut gate = hooks.gate_in_validate();
    let vclaim = engine.claim_next("v", &[]).await.unwrap().unwrap();
    let task = tokio::spawn({
        let engine = engine.clone();
        async move { engine.validate_claimed(&vclaim).await }
    });
    gate.reached().await;
    engine.pause(ID).await.unwrap();
    gate.release();
    assert_eq!(task.await.unwrap().unwrap(), ValidationRun::Stale);
    let row = engine.get(ID).await.unwrap();
    assert_eq!(row.state, State::Paused);
    assert!(row.completed_at.is_none());
}

async fn drive_until_validating(engine: &Engine) {
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    while let BatchOutcome::Committed {
        reached_bound: false,
        ..
    } = engine.run_batch(&mut claim).await.unwrap()
    {}
    assert_eq!(state(engine).await, State::Validating);
}

// ---------------------------------------------------------------- CT-7

/// CT-7 / VAL-1..3: reaching the bound enters `validating`, never
/// `completed`; a validation failure is durable and repeatable; operator
/// retry revalidates; only success reaches `completed`, which is immutable.
/// Guards: `validating` (not `completed`) in `backfill_checkpoint_advance`; the
/// `backfill_guard` trigger for immutability.
#[tokio::test]
async fn ct07_only_successful_validation_completes() {
    let (db, engine, _hooks) = started(10, 10).await;
    drive_until_validating(&engine).await;
    assert!(engine.get(ID).await.unwrap().completed_at.is_none());

    db.exec("UPDATE items SET n = 2 WHERE id = 3").await;
    for _ in 0..2 {
        let claim = engine.claim_next("v", &[]).await.unwrap().unwrap();
        let run = engine.validate_claimed(&claim).await.unwrap();
        assert!(
            matches!(run, ValidationRun::Rejected { state: State::Failed, ref detail } if detail.contains("1 items")),
            "{run:?}"
        );
        let row = engine.get(ID).await.unwrap();
        assert_eq!(row.state, State::Failed);
        assert_eq!(row.validation_outcome.as_deref(), Some("failure"));
        assert!(engine.claim_next("v", &[]).await.unwrap().is_none());
        assert!(matches!(
            engine.retry(ID).await.unwrap(),
            ActionOutcome::Applied { .. }
        ));
        assert_eq!(state(&engine).await, State::Validating);
    }
    db.exec("UPDATE items SET n = 1 WHERE id = 3").await;
    drive(&engine, "v").await;
    let row = engine.get(ID).await.unwrap();
    assert_eq!(row.state, State::Completed);
    assert_eq!(row.validation_outcome.as_deref(), Some("success"));

    for action in [Action::Start, Action::Pause, Action::Retry, Action::Resume] {
        assert!(matches!(
            engine.act(ID, action).await.unwrap(),
            ActionOutcome::Conflict(_)
        ));
    }
    let mut conn = db.connect().await;
    let direct = diesel::sql_query(format!(
        "UPDATE backfill SET state = 'running' WHERE id = '{ID}'"
    ))
    .execute(&mut conn)
    .await;
    assert!(
        direct.is_err(),
        "the database itself keeps completed immutable"
    );
}

/// CT-7 / EX-1: an empty source set goes straight to `validating` after
/// `start`, and validation completes it.
#[tokio::test]
async fn ct07_empty_source_set_goes_straight_to_validating() {
    let (_db, engine, _hooks) = started(0, 10).await;
    let row = engine.get(ID).await.unwrap();
    assert_eq!(row.state, State::Validating);
    assert!(row.empty_source);
    drive(&engine, "w").await;
    assert_eq!(state(&engine).await, State::Completed);
}

// ---------------------------------------------------------------- CT-8

/// CT-8 / RT-1 / RT-2: a persistent retryable error is recorded with backoff
/// each time and ends in `failed` after `max_attempts`, never a hot loop;
/// operator retry keeps bound and checkpoint. Guard: the attempts bound in
/// `backfill_record_failure`.
#[tokio::test]
async fn ct08_persistent_retryable_errors_end_in_failed_and_retry_keeps_progress() {
    let (db, engine, hooks) = started(30, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.run_batch(&mut claim).await.unwrap();
    *hooks.fail_after_mutate.lock() = Some(RepairError::Retryable("flaky".into()));
    let before = engine.get(ID).await.unwrap();
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let err = engine.run_batch(&mut claim).await.unwrap_err();
        let outcome = engine
            .record_failure(&claim, &err.classification().unwrap())
            .await
            .unwrap();
        outcomes.push(outcome.clone());
        if let FailureOutcome::Recorded {
            state: State::Running,
            next_attempt_at,
            ..
        } = outcome
        {
            assert!(next_attempt_at.is_some(), "retry is scheduled with backoff");
            // Wait for the (millisecond) backoff by PostgreSQL's clock.
            claim = loop {
                if let Some(c) = engine.claim_next("w", &[]).await.unwrap() {
                    break c;
                }
                tokio::task::yield_now().await;
            };
        }
    }
    assert!(matches!(
        outcomes.last(),
        Some(FailureOutcome::Recorded {
            state: State::Failed,
            attempts: 3,
            ..
        })
    ));
    let failed = engine.get(ID).await.unwrap();
    assert_eq!(failed.state, State::Failed);
    assert_eq!(failed.last_error_kind.as_deref(), Some("retryable"));
    assert_eq!(failed.checkpoint, before.checkpoint);
    assert!(engine.claim_next("w", &[]).await.unwrap().is_none());

    *hooks.fail_after_mutate.lock() = None;
    assert!(matches!(
        engine.retry(ID).await.unwrap(),
        ActionOutcome::Applied {
            prior: State::Failed,
            ..
        }
    ));
    let retried = engine.get(ID).await.unwrap();
    assert_eq!(retried.state, State::Running);
    assert_eq!(retried.attempts, 0);
    assert_eq!(retried.bound, before.bound);
    assert_eq!(retried.checkpoint, before.checkpoint);
    drive_to_completed(&db, &engine, 30).await;
}

/// CT-8 / RT-1: a blocked error goes to `blocked` with its bounded
/// diagnostic at once (no retries); retry keeps the checkpoint.
#[tokio::test]
async fn ct08_blocked_error_is_durable_with_diagnostic() {
    let (_db, engine, hooks) = started(30, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.run_batch(&mut claim).await.unwrap();
    let long = format!("add the column first; {}", "x".repeat(2000));
    *hooks.fail_after_mutate.lock() = Some(RepairError::Blocked(long));
    let err = engine.run_batch(&mut claim).await.unwrap_err();
    let outcome = engine
        .record_failure(&claim, &err.classification().unwrap())
        .await
        .unwrap();
    assert!(matches!(
        outcome,
        FailureOutcome::Recorded {
            state: State::Blocked,
            ..
        }
    ));
    let row = engine.get(ID).await.unwrap();
    let diag = row.last_error.unwrap();
    assert!(diag.starts_with("add the column first"));
    assert!(diag.len() <= 512, "diagnostics are bounded");
    assert_eq!(row.checkpoint_json, Some(serde_json::json!(10)));
    *hooks.fail_after_mutate.lock() = None;
    engine.retry(ID).await.unwrap();
    assert_eq!(
        engine.get(ID).await.unwrap().checkpoint_json,
        Some(serde_json::json!(10))
    );
}

// ------------------------------------------------ REG, LC-1, EX-2, bad input

/// REG-1 / REG-2: two processes register the same ID (different metadata)
/// concurrently and repeatedly: one row, metadata last-write-wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reg01_registration_converges_on_one_row() {
    let db = test_db().await;
    db.exec(&items_sql(5)).await;
    let a = counter_engine(db.pool.clone(), Counter::new(ID, 10, Hooks::new()));
    let b = counter_engine(db.pool.clone(), Counter::new(ID, 10, Hooks::new()));
    let (ra, rb) = tokio::join!(a.register(), b.register());
    ra.unwrap();
    rb.unwrap();
    a.register().await.unwrap();
    assert_eq!(db.scalar("SELECT count(*) AS v FROM backfill").await, 1);
    a.start(ID).await.unwrap();
    b.register().await.unwrap();
    let row = a.get(ID).await.unwrap();
    assert_eq!(
        row.state,
        State::Running,
        "registration never resets a started row"
    );
}

/// Bad input: an invalid stable ID is a typed error before anything reaches
/// the database.
#[tokio::test]
async fn reg_invalid_stable_id_is_a_typed_error() {
    let err = Registry::new()
        .with(Counter::new("Not Valid!", 10, Hooks::new()))
        .unwrap_err();
    assert!(matches!(err, DefinitionError::InvalidId(_)));
    let err = Registry::new()
        .with(Counter::new("zero", 0, Hooks::new()))
        .unwrap_err();
    assert!(matches!(err, DefinitionError::ZeroBatchLimit(_)));
}

/// REG-4: a process whose definition has a different key type than the
/// stored bound fails closed with a typed error and changes nothing; a
/// process without the definition never claims the row.
#[tokio::test]
async fn reg04_wrong_key_type_fails_closed_and_missing_definition_never_claims() {
    let (db, engine, _hooks) = started(10, 10).await;
    let before = engine.get(ID).await.unwrap();
    let other = Engine::new(
        db.pool.clone(),
        Registry::new().with(TextKeyed { id: ID }).unwrap(),
        config(),
    )
    .unwrap();
    let err = other.claim_next("other", &[]).await.unwrap_err();
    assert!(matches!(err, EngineError::KeyMismatch { .. }), "{err:?}");
    let after = engine.get(ID).await.unwrap();
    assert_eq!(after.generation, before.generation);
    assert_eq!(after.owner, None);

    let stranger = Engine::new(
        db.pool.clone(),
        Registry::new()
            .with(Counter::new("something.else", 10, Hooks::new()))
            .unwrap(),
        config(),
    )
    .unwrap();
    assert!(stranger
        .claim_next("stranger", &[])
        .await
        .unwrap()
        .is_none());
    assert_eq!(engine.get(ID).await.unwrap().generation, before.generation);
}

/// LC-1 / LC-4: the database rejects transitions outside the lifecycle
/// table, bound changes and backward checkpoints, whatever code runs them.
/// Guard: the `backfill_guard` trigger.
#[tokio::test]
async fn lc01_database_rejects_transitions_outside_the_table() {
    let (db, engine, _hooks) = started(20, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.run_batch(&mut claim).await.unwrap();
    let mut conn = db.connect().await;
    for sql in [
        "UPDATE backfill SET state = 'completed', owner = NULL, lease_expires_at = NULL",
        "UPDATE backfill SET state = 'pending', owner = NULL, lease_expires_at = NULL",
        "UPDATE backfill SET bound = bound || '\\x00'::bytea",
        "UPDATE backfill SET checkpoint = NULL",
        "UPDATE backfill SET generation = generation - 1",
        "DELETE FROM backfill",
    ] {
        assert!(
            diesel::sql_query(sql).execute(&mut conn).await.is_err(),
            "{sql} must be rejected"
        );
    }
    conn.transaction::<_, diesel::result::Error, _>(async |c| {
        diesel::sql_query("SELECT 1").execute(c).await.map(|_| ())
    })
    .await
    .unwrap();
}

/// REG-1, LC-1: the single-column rules of `backfill` hold in the database
/// for any writer: an invalid stable ID, an unknown state, a negative
/// generation or attempt count and an oversized diagnostic are rejected,
/// and nothing changes. Guard: the column domains (migration
/// `..._column_domains`) that replaced the table CHECKs.
#[tokio::test]
async fn lc01_database_rejects_values_outside_the_column_rules() {
    let (db, engine, _hooks) = started(20, 10).await;
    let before = engine.get(ID).await.unwrap();
    let mut conn = db.connect().await;
    let long = "x".repeat(513);
    for sql in [
        "INSERT INTO backfill (id) VALUES ('Not A Valid ID')".to_string(),
        "INSERT INTO backfill (id) VALUES ('')".to_string(),
        "UPDATE backfill SET state = 'running-ish'".to_string(),
        "UPDATE backfill SET generation = -1".to_string(),
        "UPDATE backfill SET attempts = -1".to_string(),
        "UPDATE backfill SET source_rows = -1".to_string(),
        "UPDATE backfill SET last_error_kind = 'maybe'".to_string(),
        format!("UPDATE backfill SET last_error = '{long}'"),
        format!("UPDATE backfill SET description = '{long}'"),
    ] {
        assert!(
            diesel::sql_query(&sql).execute(&mut conn).await.is_err(),
            "{} must be rejected",
            &sql[..sql.len().min(60)]
        );
    }
    let after = engine.get(ID).await.unwrap();
    assert_eq!(after.state, before.state);
    assert_eq!(after.generation, before.generation);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill").await,
        1,
        "no row was added"
    );
}

/// EX-2: a compound `(created_at, id)` key over many ties neither skips
/// nor repeats a row.
#[tokio::test]
async fn ex02_compound_key_with_ties_neither_skips_nor_repeats() {
    let db = test_db().await;
    db.exec(&events_sql(100)).await;
    let engine = Engine::new(
        db.pool.clone(),
        Registry::new().with(CompoundCounter { limit: 7 }).unwrap(),
        config(),
    )
    .unwrap();
    engine.register().await.unwrap();
    engine.start("events.compound-counter").await.unwrap();
    drive(&engine, "w").await;
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM events WHERE n = 1")
            .await,
        100
    );
    let row = engine.get("events.compound-counter").await.unwrap();
    assert_eq!(row.state, State::Completed);
    assert_eq!(row.key_type.as_deref(), Some("(timestamptz, bigint)"));
}

/// VAL-6: lifecycle validation never runs while another validation of the
/// same ID (an explicit one, from any process) holds the per-ID lock; it
/// reports busy and changes nothing, and runs once the lock is free.
/// Guard: `validation_try_lock` in `validate_claimed`.
#[tokio::test]
async fn val06_lifecycle_validation_waits_for_a_running_explicit_validation() {
    let (db, engine, _hooks) = started(10, 10).await;
    drive_until_validating(&engine).await;
    let mut holder = db.connect().await;
    diesel::sql_query("BEGIN")
        .execute(&mut holder)
        .await
        .unwrap();
    diesel::sql_query(format!(
        "SELECT pg_advisory_xact_lock(hashtextextended('backfill-validate:' || '{ID}', 0))"
    ))
    .execute(&mut holder)
    .await
    .unwrap();
    let claim = engine.claim_next("v", &[]).await.unwrap().unwrap();
    assert_eq!(
        engine.validate_claimed(&claim).await.unwrap(),
        ValidationRun::Busy
    );
    assert_eq!(state(&engine).await, State::Validating);
    engine.release(&claim).await.unwrap();
    diesel::sql_query("COMMIT")
        .execute(&mut holder)
        .await
        .unwrap();
    drive(&engine, "v").await;
    assert_eq!(state(&engine).await, State::Completed);
}

// ------------------------------------------------------- open batch (EX-5)

/// Sessions of the test database sitting inside a transaction (aborted or
/// not) between statements.
async fn open_transactions(db: &TestDb) -> i64 {
    db.scalar(
        "SELECT count(*) AS v FROM pg_stat_activity \
         WHERE datname = current_database() AND state LIKE 'idle in transaction%'",
    )
    .await
}

/// Claim as `w` and commit the first batch of 10 keys, leaving the next
/// batch open on the claim.
async fn claim_and_commit_first_batch(engine: &Engine) -> backfill::engine::Claim {
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    assert_eq!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            keys: 10,
            reached_bound: false
        }
    );
    claim
}

/// EX-5, CLM-2: a committed batch leaves the next batch's transaction open
/// on its claim (BEGIN and the timeouts, nothing else). That transaction
/// holds no snapshot, no transaction ID and no lock but its own virtual
/// transaction ID, so neither DDL on the target table nor a pause waits for
/// it; the claim's next batch runs in it and, after the pause, is rejected
/// by the fence and rolled back. This holds for a two-statement repair
/// (the counter here); a one-statement repair's next statement runs in the
/// open batch by design (`ex06_*`). Guards: the reopen text of
/// `checkpoint_advance_commit_reopen` taking nothing (a statement there
/// that reads the table keeps its lock until the next batch and fails the
/// lock assertion and the ALTER), and the fence in the same message as
/// COMMIT (the paused batch must not commit).
#[tokio::test]
async fn ex05_open_batch_holds_no_snapshot_lock_or_xid() {
    let (db, engine, _hooks) = started(30, 10).await;
    let mut claim = claim_and_commit_first_batch(&engine).await;
    assert_eq!(open_transactions(&db).await, 1, "the next batch is open");
    assert_eq!(
        db.scalar(
            "SELECT count(*) AS v FROM pg_stat_activity \
             WHERE datname = current_database() AND state = 'idle in transaction' \
               AND backend_xmin IS NULL AND backend_xid IS NULL",
        )
        .await,
        1,
        "the open batch holds no snapshot and no transaction ID"
    );
    assert_eq!(
        db.scalar(
            "SELECT count(*) AS v FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE a.datname = current_database() AND a.state = 'idle in transaction' \
               AND l.locktype <> 'virtualxid'",
        )
        .await,
        0,
        "the open batch holds no lock"
    );
    db.exec(
        "BEGIN; SET LOCAL lock_timeout = '2s'; \
         ALTER TABLE items ADD COLUMN extra int; COMMIT",
    )
    .await;
    pause_then_next_batch_is_stale(&engine, &mut claim).await;
    assert_eq!(count_n(&db, 1).await, 10, "the stale batch rolled back");
    assert_eq!(open_transactions(&db).await, 0);
    resume_and_complete(&db, &engine, 30).await;
}

/// CLM-1: releasing a claim that carries an open batch rolls that
/// transaction back and releases on the same connection: another worker
/// claims at once, at the committed checkpoint, and no session stays
/// inside a transaction. Guard: the rollback in `Engine::release` (without
/// it the release runs inside the open transaction and never commits, so
/// the row stays owned and row-locked).
#[tokio::test]
async fn clm01_release_ends_the_open_batch_and_frees_the_claim() {
    let (db, engine, _hooks) = started(30, 10).await;
    let claim = claim_and_commit_first_batch(&engine).await;
    assert!(engine.release(&claim).await.unwrap());
    assert_eq!(open_transactions(&db).await, 0);
    let other = engine.claim_next("w2", &[]).await.unwrap().unwrap();
    assert_eq!(other.generation, claim.generation + 1);
    assert_eq!(other.checkpoint_json(), Some(serde_json::json!(10)));
}

/// EX-5: a claim dropped while it carries an open batch (a runner that
/// stops without releasing) takes its connection along: the pool discards
/// a connection that is inside a transaction, PostgreSQL ends the session,
/// and nothing stays open. Guard: the open batch living in the claim and
/// the pool's broken-connection check it relies on.
#[tokio::test]
async fn ex05_dropped_claim_leaves_no_open_transaction() {
    let (db, engine, _hooks) = started(30, 10).await;
    let claim = claim_and_commit_first_batch(&engine).await;
    assert_eq!(open_transactions(&db).await, 1);
    drop(claim);
    support::eventually("no session inside a transaction", || async {
        open_transactions(&db).await == 0
    })
    .await;
    db.expire_lease(ID).await;
    drive(&engine, "w2").await;
    assert_eq!(state(&engine).await, State::Completed);
    assert_eq!(count_n(&db, 1).await, 30);
}

/// A started counter over 30 items with a 300 ms statement timeout, its
/// first batch committed as `w`, and the open batch that followed ended by
/// PostgreSQL's idle-in-transaction timeout.
async fn open_batch_ended_by_the_server() -> (TestDb, Engine, backfill::engine::Claim) {
    let db = test_db().await;
    db.exec(&items_sql(30)).await;
    let registry = Registry::new()
        .with(Counter::new(ID, 10, Hooks::new()))
        .expect("valid definition");
    let engine = Engine::new(
        db.pool.clone(),
        registry,
        EngineConfig {
            statement_timeout: Duration::from_millis(300),
            ..config()
        },
    )
    .expect("engine");
    engine.register().await.unwrap();
    engine.start(ID).await.unwrap();
    let claim = claim_and_commit_first_batch(&engine).await;
    assert_eq!(open_transactions(&db).await, 1);
    support::eventually("PostgreSQL ends the idle open batch", || async {
        open_transactions(&db).await == 0
    })
    .await;
    (db, engine, claim)
}

/// EX-5: the open batch's idle time is bounded by the statement timeout: a
/// claim that sits on it longer (a stalled runner) loses the session to
/// PostgreSQL, and its next batch fails as a transient error with nothing
/// committed, which the runtime records as retryable (RT-1, RT-2). Guards:
/// the `idle_in_transaction_session_timeout` of the batch transaction
/// (without it the session stays open and the wait below times out), and
/// `store::classify` treating a session the server ended as transient
/// (it was fatal before this test: the backfill would have failed).
#[tokio::test]
async fn ex05_idle_open_batch_is_ended_by_the_statement_timeout() {
    let (db, engine, mut claim) = open_batch_ended_by_the_server().await;
    let error = engine.run_batch(&mut claim).await.unwrap_err();
    let class = error.classification();
    assert!(
        matches!(class, Some(RepairError::Retryable(_))),
        "a lost session is transient: {error}"
    );
    assert_eq!(count_n(&db, 1).await, 10, "nothing more committed");
    // What the runtime does with it: record, back off, go on.
    assert!(matches!(
        engine
            .record_failure(&claim, &class.unwrap())
            .await
            .unwrap(),
        FailureOutcome::Recorded {
            state: State::Running,
            ..
        }
    ));
    support::eventually("the backfill completes after the backoff", || async {
        drive(&engine, "w").await;
        state(&engine).await == State::Completed
    })
    .await;
    assert_eq!(count_n(&db, 1).await, 30);
}

/// CLM-1: a graceful shutdown after the server ended the claim's open
/// batch still gives the claim back (on a fresh connection), so another
/// worker takes over at once instead of after the lease TTL. Guard: the
/// fallback in `Engine::release` when the open batch's rollback fails.
#[tokio::test]
async fn clm01_release_after_the_server_ended_the_open_batch() {
    let (_db, engine, claim) = open_batch_ended_by_the_server().await;
    assert!(engine.release(&claim).await.unwrap());
    let other = engine.claim_next("w2", &[]).await.unwrap().unwrap();
    assert_eq!(other.checkpoint_json(), Some(serde_json::json!(10)));
}

// ------------------------------------------------- one-statement batches

/// A database with `rows` items and the counter, in its one-statement form
/// (`SelectAndMutate`), registered and started.
async fn started_one_statement(rows: i64, limit: u32) -> (TestDb, Engine, Arc<Hooks>) {
    started_counter(rows, limit, None, Counter::one_statement).await
}

/// EX-6, CLM-2: with a one-statement repair, each batch's statement is
/// sent behind the previous batch's commit, yet commits only with its own
/// fenced checkpoint: after every step the committed rows are exactly the
/// rows up to the committed checkpoint, and the run completes with every
/// item repaired once. Guard: the next batch's statement running in the
/// reopened transaction (sent ahead of the fence, in the committing
/// transaction, it would commit one batch early: 20 rows at checkpoint 10).
#[tokio::test]
async fn ex06_one_statement_batches_commit_with_their_own_checkpoint() {
    let (db, engine, _hooks) = started_one_statement(25, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    for done in [10, 20] {
        assert_eq!(
            engine.run_batch(&mut claim).await.unwrap(),
            BatchOutcome::Committed {
                keys: 10,
                reached_bound: false
            }
        );
        assert_eq!(count_n(&db, 1).await, done, "committed rows = checkpoint");
        let row = engine.get(ID).await.unwrap();
        assert_eq!(row.checkpoint_json, Some(serde_json::json!(done)));
        assert_eq!(row.rows_done, done);
    }
    assert_eq!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            keys: 5,
            reached_bound: true
        }
    );
    assert_eq!(
        open_transactions(&db).await,
        0,
        "nothing opened past the bound"
    );
    drive_to_completed(&db, &engine, 25).await;
}

/// EX-6: the COMMIT itself fails (a deferred constraint trigger rejects an
/// item of the first batch at commit) while the next batch's statement is
/// already on its way behind it: neither batch commits, the checkpoint
/// stays, and the error comes back. Guard: the next batch's `BEGIN` as a
/// message of its own in `checkpoint_advance_commit_reopen` (inside the
/// fence's message, PostgreSQL skips it after the failed COMMIT and the
/// statement behind runs, and commits, on its own: items 11..20 at n = 1).
#[tokio::test]
async fn ex06_batch_sent_behind_a_failed_commit_does_not_commit() {
    let (db, engine, _hooks) = started_one_statement(30, 10).await;
    db.exec(
        "CREATE FUNCTION items_reject() RETURNS trigger LANGUAGE plpgsql AS \
             $$ BEGIN RAISE EXCEPTION 'item rejected at commit'; END $$; \
         CREATE CONSTRAINT TRIGGER items_reject AFTER UPDATE ON items \
             DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.id = 5) \
             EXECUTE FUNCTION items_reject()",
    )
    .await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let err = engine.run_batch(&mut claim).await.unwrap_err();
    assert!(matches!(err, EngineError::Store(_)), "{err:?}");
    assert_eq!(count_n(&db, 1).await, 0, "neither batch committed");
    assert_eq!(engine.get(ID).await.unwrap().checkpoint, None);
    assert_eq!(
        open_transactions(&db).await,
        0,
        "the batch behind rolled back"
    );
}

/// CT-5, EX-5: a pause between two steps rejects the batch that was sent
/// ahead behind the last commit: its rows, changed in the open
/// transaction, roll back with the stale fence, and after resume every
/// item is repaired once. Guard: the fence's claim conditions (state,
/// owner, generation, lease: a pause changes all four); with all four
/// removed the batch sent ahead commits items 11..20 and this test fails.
#[tokio::test]
async fn ct05_pause_rejects_the_batch_sent_ahead() {
    let (db, engine, _hooks) = started_one_statement(30, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    assert_eq!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            keys: 10,
            reached_bound: false
        }
    );
    pause_then_next_batch_is_stale(&engine, &mut claim).await;
    assert_eq!(count_n(&db, 1).await, 10);
    assert_eq!(open_transactions(&db).await, 0);
    resume_and_complete(&db, &engine, 30).await;
}

/// EX-3: a one-statement batch whose summary counts keys but names no
/// first or last key is rejected and rolled back, not read as "nothing
/// left": the checkpoint stays, nothing commits, and the backfill is not
/// moved to the bound. Guard: `Mutated::from_summary` (with every shape
/// without both keys read as `Nothing`, the checkpoint jumps to the bound
/// with 10 items mutated and 40 never repaired).
#[tokio::test]
async fn ct02_one_statement_summary_without_keys_is_rejected() {
    let (db, engine, hooks) = started_one_statement(50, 10).await;
    hooks
        .select_mode
        .store(SELECT_SUMMARY_WITHOUT_KEYS, Ordering::SeqCst);
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    rejects_selection(&engine, &mut claim, SelectionError::Inconsistent).await;
    assert_eq!(count_n(&db, 1).await, 0, "the mutation rolled back");
    let row = engine.get(ID).await.unwrap();
    assert_eq!(row.checkpoint_json, None);
    assert_eq!(row.state, State::Running);
}

/// EX-4: a repair whose batch limit turns 0 after registration (the limit
/// is asked for every batch) gets a selection error on both the
/// two-statement and the one-statement form; nothing commits and the
/// checkpoint stays. Guard: `Erased::limit` (without it the empty
/// selection moves the checkpoint to the bound: `Committed { keys: 0,
/// reached_bound: true }` with nothing repaired).
#[tokio::test]
async fn ct02_batch_limit_of_zero_at_run_time_is_rejected() {
    for one_statement in [false, true] {
        let (db, engine, hooks) = started_counter(30, 10, None, |c| {
            if one_statement {
                c.one_statement()
            } else {
                c
            }
        })
        .await;
        hooks.zero_limit.store(true, Ordering::SeqCst);
        let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
        rejects_selection(&engine, &mut claim, SelectionError::ZeroLimit).await;
        let row = engine.get(ID).await.unwrap();
        assert_eq!(row.checkpoint_json, None);
        assert_eq!(row.state, State::Running);
        assert_eq!(count_n(&db, 1).await, 0);
    }
}

/// Run one batch and expect it to commit `keys` keys short of the bound.
async fn commits(engine: &Engine, claim: &mut Claim, keys: usize) {
    assert_eq!(
        engine.run_batch(claim).await.unwrap(),
        BatchOutcome::Committed {
            keys,
            reached_bound: false
        }
    );
}

/// Run one batch and expect the engine to reject its selection (EX-3,
/// EX-4) with `expected`.
async fn rejects_selection(engine: &Engine, claim: &mut Claim, expected: SelectionError) {
    let err = engine.run_batch(claim).await.unwrap_err();
    assert!(
        matches!(&err, EngineError::Selection { error, .. } if *error == expected),
        "{err:?}"
    );
}

/// A repair over timestamps that builds its keys in Rust, with
/// nanoseconds the key encoding (like PostgreSQL) keeps to microseconds:
/// its second batch's key is the checkpoint plus 500 ns, after it as a
/// timestamp and equal to it once encoded.
struct NanosKeyed;

fn nanos_t0() -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap()
}

#[backfill::async_trait]
impl backfill::repair::Repair for NanosKeyed {
    type Key = chrono::DateTime<chrono::Utc>;
    fn id(&self) -> &str {
        "items.nanos"
    }
    fn batch_limit(&self) -> u32 {
        1
    }
    async fn capture_bound(
        &self,
        _conn: &mut backfill::AsyncPgConnection,
    ) -> Result<backfill::repair::SourceSet<Self::Key>, RepairError> {
        Ok(backfill::repair::SourceSet::Bounded {
            upper: nanos_t0() + chrono::Duration::seconds(10),
            rows: None,
        })
    }
    fn batches(&self) -> backfill::repair::Batches<'_, Self::Key> {
        backfill::repair::Batches::TwoStatements(self)
    }
    async fn validate(
        &self,
        _conn: &mut backfill::AsyncPgConnection,
        _bound: Option<&Self::Key>,
    ) -> Result<backfill::repair::Validation, RepairError> {
        Ok(backfill::repair::Validation::Success)
    }
}

#[backfill::async_trait]
impl backfill::repair::SelectThenMutate<chrono::DateTime<chrono::Utc>> for NanosKeyed {
    async fn select_keys(
        &self,
        _conn: &mut backfill::AsyncPgConnection,
        after: Option<&chrono::DateTime<chrono::Utc>>,
        _bound: &chrono::DateTime<chrono::Utc>,
        _limit: u32,
    ) -> Result<Vec<chrono::DateTime<chrono::Utc>>, RepairError> {
        Ok(vec![match after {
            None => nanos_t0(),
            Some(after) => *after + chrono::Duration::nanoseconds(500),
        }])
    }
    async fn mutate(
        &self,
        _conn: &mut backfill::AsyncPgConnection,
        _keys: &[chrono::DateTime<chrono::Utc>],
    ) -> Result<(), RepairError> {
        Ok(())
    }
}

/// EX-3: a batch whose new checkpoint does not encode strictly after the
/// old one (a key after it by the key type's order, equal once encoded)
/// fails closed with a selection error, which the runtime records as
/// fatal, instead of meeting the fence as a stale claim batch after batch,
/// never recorded. Guard: the encoded-checkpoint check in `run_batch`
/// (without it the second batch comes back `Stale`).
#[tokio::test]
async fn ct02_checkpoint_that_does_not_advance_once_encoded_fails_closed() {
    let db = test_db().await;
    let engine = Engine::new(
        db.pool.clone(),
        Registry::new().with(NanosKeyed).expect("valid definition"),
        config(),
    )
    .expect("engine");
    engine.register().await.unwrap();
    engine.start("items.nanos").await.unwrap();
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    commits(&engine, &mut claim, 1).await;
    rejects_selection(&engine, &mut claim, SelectionError::NotAfterCheckpoint).await;
}

/// EX-4: a one-statement batch that reports more keys than the limit is
/// rejected before its commit and rolled back, both as a claim's first
/// batch and when it was sent ahead behind a commit. Guard:
/// `check_mutated` (without it both would commit 11 items).
#[tokio::test]
async fn ct02_one_statement_over_limit_is_rejected_and_rolled_back() {
    let (db, engine, hooks) = started_one_statement(50, 10).await;
    let over_limit = |err: EngineError| {
        assert!(
            matches!(
                err,
                EngineError::Selection {
                    error: SelectionError::OverLimit { got: 11, limit: 10 },
                    ..
                }
            ),
            "{err:?}"
        )
    };
    hooks.select_mode.store(SELECT_OVER_LIMIT, Ordering::SeqCst);
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    over_limit(engine.run_batch(&mut claim).await.unwrap_err());
    assert_eq!(count_n(&db, 1).await, 0);

    // Batch 1 commits and sends batch 2 ahead, both within the limit; then
    // batch 2 commits and sends batch 3 ahead over it.
    hooks.select_mode.store(SELECT_NORMAL, Ordering::SeqCst);
    engine.run_batch(&mut claim).await.unwrap();
    hooks.select_mode.store(SELECT_OVER_LIMIT, Ordering::SeqCst);
    engine.run_batch(&mut claim).await.unwrap();
    over_limit(engine.run_batch(&mut claim).await.unwrap_err());
    assert_eq!(count_n(&db, 1).await, 20);
    assert_eq!(
        engine.get(ID).await.unwrap().checkpoint_json,
        Some(serde_json::json!(20))
    );
    assert_eq!(open_transactions(&db).await, 0);
}

/// CT-4, EX-6: the step is dropped (a timeout around `run_batch`) while
/// the batch sent ahead behind its commit is still running: the previous
/// batch stays committed with its checkpoint, the batch sent ahead never
/// commits, no session is left in a transaction, and the pool hands out
/// only clean connections. Guard: the transaction manager's depth of one
/// while the step is in flight (at zero the pool takes the dropped
/// connection back inside the batch sent ahead's transaction, and a later
/// caller's statements commit it: 20 items).
#[tokio::test]
async fn ct04_termination_with_a_batch_sent_ahead_keeps_only_the_committed_batch() {
    let (db, engine, hooks) = started_one_statement(30, 10).await;
    // Only the batch sent ahead sleeps: the first batch commits at once,
    // and the step is still waiting on the batch behind it at the timeout.
    hooks.sleep_ms.store(3000, Ordering::SeqCst);
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let dropped =
        tokio::time::timeout(Duration::from_millis(1000), engine.run_batch(&mut claim)).await;
    assert!(dropped.is_err(), "dropped in flight: {dropped:?}");
    hooks.sleep_ms.store(0, Ordering::SeqCst);
    support::eventually("no session is active or in a transaction", || async {
        db.scalar(
            "SELECT count(*) AS v FROM pg_stat_activity \
             WHERE datname = current_database() AND pid <> pg_backend_pid() \
               AND (state = 'active' OR state LIKE 'idle in transaction%')",
        )
        .await
            == 0
    })
    .await;
    assert_eq!(count_n(&db, 1).await, 10, "batch 1 committed, batch 2 not");
    assert_eq!(count_n(&db, 2).await, 0);
    assert_eq!(
        engine.get(ID).await.unwrap().checkpoint_json,
        Some(serde_json::json!(10))
    );
    // Inside the batch sent ahead's transaction a transaction ID would
    // already be assigned (its UPDATE took one).
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut conn = engine.pool().get_owned().await.unwrap();
        let fresh =
            diesel::sql_query("SELECT 1 AS v WHERE pg_current_xact_id_if_assigned() IS NULL")
                .execute(&mut *conn)
                .await
                .unwrap();
        assert_eq!(fresh, 1, "a pooled connection outside any transaction");
        held.push(conn);
    }
    drop(held);
    db.expire_lease(ID).await;
    drive(&engine, "w2").await;
    assert_eq!(state(&engine).await, State::Completed);
    assert_eq!(count_n(&db, 1).await, 30);
}

/// CT-2, RT-1: the batch sent ahead hits `lock_timeout` on a row another
/// session holds, after the previous batch committed: that step reports
/// its commit, the next step returns the retryable error, nothing of the
/// batch sent ahead commits, and after the backoff the run completes with
/// every item repaired once. Guard: the error kept with the open batch
/// (dropped, the next step runs its statement in the aborted transaction
/// and reports a fatal error instead of the retryable lock timeout).
#[tokio::test]
async fn ct02_lock_timeout_of_a_batch_sent_ahead_rolls_it_back() {
    let (db, engine, _hooks) = started_one_statement(30, 10).await;
    let mut holder = lock_holder(&db, "UPDATE items SET n = n WHERE id = 15").await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    assert_eq!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            keys: 10,
            reached_bound: false
        }
    );
    let err = engine.run_batch(&mut claim).await.unwrap_err();
    let class = err.classification();
    assert!(matches!(class, Some(RepairError::Retryable(_))), "{err:?}");
    assert_eq!(count_n(&db, 1).await, 10);
    assert_eq!(
        engine.get(ID).await.unwrap().checkpoint_json,
        Some(serde_json::json!(10))
    );
    diesel::sql_query("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    assert_eq!(open_transactions(&db).await, 0);
    engine
        .record_failure(&claim, &class.unwrap())
        .await
        .unwrap();
    support::eventually("the backfill completes after the backoff", || async {
        drive(&engine, "w").await;
        state(&engine).await == State::Completed
    })
    .await;
    assert_eq!(count_n(&db, 1).await, 30);
}

/// `url` with its user replaced by `user`.
fn with_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let host = rest.split_once('@').map(|(_, host)| host).unwrap_or(rest);
    format!("{scheme}://{user}@{host}")
}

/// RT-1 whatever the server's language: the pool's sessions get
/// untranslated messages, so a statement timeout is recognised by its text
/// (diesel-async reports no SQLSTATE) and classified retryable. The
/// database's own default is set to another value first; removing
/// `session_messages_untranslated` from the pool's connection setup fails
/// the first assertion. A role that may not set `lc_messages` still gets
/// working connections, with the database's setting.
#[tokio::test]
async fn rt01_pool_sessions_report_errors_untranslated() {
    #[derive(diesel::QueryableByName)]
    struct Setting {
        #[diesel(sql_type = diesel::sql_types::Text)]
        lc_messages: String,
    }
    async fn lc_messages(pool: &backfill::store::Pool) -> String {
        let mut conn = pool.get().await.expect("pool");
        let row: Setting = diesel::sql_query("SHOW lc_messages")
            .get_result(&mut conn)
            .await
            .expect("show lc_messages");
        row.lc_messages
    }
    let db = test_db().await;
    db.exec(&format!(
        "ALTER DATABASE {} SET lc_messages = 'C.UTF-8'",
        db.name
    ))
    .await;
    let pool = backfill::store::build_pool(&db.url, 2).await.expect("pool");
    assert_eq!(lc_messages(&pool).await, "C");
    let mut conn = pool.get().await.expect("pool");
    let timeout = diesel_async::SimpleAsyncConnection::batch_execute(
        &mut *conn,
        "SET statement_timeout = 1; SELECT pg_sleep(1)",
    )
    .await
    .expect_err("the statement times out");
    assert!(
        matches!(
            backfill::store::classify(&timeout),
            RepairError::Retryable(_)
        ),
        "{timeout}"
    );
    drop(conn);
    drop(pool);

    // Dropped with the test database (support's `Drop`), whether or not an
    // assertion below fails.
    let role = db.role();
    db.exec(&format!("CREATE ROLE {role} LOGIN")).await;
    let pool = backfill::store::build_pool(&with_user(&db.url, &role), 1)
        .await
        .expect("a role without the privilege still connects");
    assert_eq!(lc_messages(&pool).await, "C.UTF-8");
}

// ------------------------------------------- overlapped commits (EX-6, CLM-2)

/// A database with `rows` items and the counter, as `shape` makes it,
/// registered and started on an engine over `pool` (the test database's
/// own pool of 8 when `None`).
async fn started_counter(
    rows: i64,
    limit: u32,
    pool: Option<u32>,
    shape: impl FnOnce(Counter) -> Counter,
) -> (TestDb, Engine, Arc<Hooks>) {
    let db = test_db().await;
    db.exec(&items_sql(rows)).await;
    let hooks = Hooks::new();
    let pool = match pool {
        Some(size) => backfill::store::build_pool(&db.url, size)
            .await
            .expect("pool"),
        None => db.pool.clone(),
    };
    let engine = counter_engine(pool, shape(Counter::new(ID, limit, hooks.clone())));
    engine.register().await.expect("register");
    assert!(matches!(
        engine.start(ID).await.expect("start"),
        Started::Started(_)
    ));
    (db, engine, hooks)
}

/// Connections of the engine's pool in use (checked out, not idle).
fn busy(engine: &Engine) -> u32 {
    let state = engine.pool().state();
    state.connections - state.idle_connections
}

/// Connections the engine's pool threw away instead of reusing (returned
/// inside a transaction, or broken).
fn discarded(engine: &Engine) -> u64 {
    let stats = engine.pool().state().statistics;
    stats.connections_closed_broken + stats.connections_closed_invalid
}

/// Run the claim's batches until the bound, then drive the backfill to
/// `completed`: all `rows` items repaired exactly once.
async fn finish(db: &TestDb, engine: &Engine, mut claim: Claim, rows: i64) {
    while let BatchOutcome::Committed {
        reached_bound: false,
        ..
    } = engine.run_batch(&mut claim).await.unwrap()
    {}
    drive_to_completed(db, engine, rows).await;
}

/// EX-6, CLM-2: with a repair that overlaps commits, batch 2's mutation
/// runs on a second connection while batch 1's fence still waits (a second
/// session holds the backfill row), and still commits only with its own
/// fence in the next step: after the first step exactly batch 1's rows are
/// committed, after the second exactly 20, and the run completes with
/// every item repaired once. Guard: the next batch's body on the spare
/// connection joined with the fence in `run_batch` (without it batch 2's
/// mutation runs only after batch 1 committed, and the gate below is never
/// reached while the row is held).
#[tokio::test]
async fn ex06_overlapped_batch_runs_while_the_previous_one_commits() {
    let (db, engine, hooks) = started_counter(30, 10, None, Counter::overlapping).await;
    let mut gate = hooks.gate_after_mutate();
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let mut holder = lock_holder(
        &db,
        "SELECT 1 FROM backfill WHERE id = 'items.counter' FOR UPDATE",
    )
    .await;
    let stepper = engine.clone();
    let step = tokio::spawn(async move {
        let outcome = stepper.run_batch(&mut claim).await;
        (claim, outcome)
    });
    gate.reached().await;
    gate.release();
    // Batch 1 mutated; its fence now waits for the row. Batch 2's mutation
    // comes to the gate all the same.
    gate.reached().await;
    assert_eq!(count_n(&db, 1).await, 0, "nothing committed yet");
    hooks.clear_gates();
    gate.release();
    diesel::sql_query("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    let (mut claim, outcome) = step.await.unwrap();
    assert_eq!(
        outcome.unwrap(),
        BatchOutcome::Committed {
            keys: 10,
            reached_bound: false
        }
    );
    assert_eq!(count_n(&db, 1).await, 10, "batch 2 waits for its own fence");
    assert_eq!(
        engine.get(ID).await.unwrap().checkpoint_json,
        Some(serde_json::json!(10))
    );
    assert_eq!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            keys: 10,
            reached_bound: false
        }
    );
    assert_eq!(count_n(&db, 1).await, 20);
    finish(&db, &engine, claim, 30).await;
}

/// CT-5, EX-6: a pause between two steps of a repair that overlaps
/// commits rejects the batch that ran on the second connection, and the
/// batch after it, which ran while that fence failed, rolls back too: no
/// session stays in a transaction, and after resume every item is repaired
/// once. Guards: the fence's claim conditions (with them removed batch 2
/// commits: 20 items), and the rollback of the overlapped body when the
/// fence before it did not commit (dropped instead, its connection is
/// discarded: the pool would reconnect for every pause).
#[tokio::test]
async fn ct05_pause_rejects_an_overlapped_batch_and_the_one_behind_it() {
    let (db, engine, _hooks) =
        started_counter(40, 10, None, |c| c.one_statement().overlapping()).await;
    let mut claim = claim_and_commit_first_batch(&engine).await;
    assert_eq!(
        open_transactions(&db).await,
        2,
        "batch 2 ran on the second connection; the first is open for batch 3"
    );
    pause_then_next_batch_is_stale(&engine, &mut claim).await;
    assert_eq!(count_n(&db, 1).await, 10, "batches 2 and 3 rolled back");
    assert_eq!(open_transactions(&db).await, 0);
    assert_eq!(busy(&engine), 0, "both connections are back in the pool");
    assert_eq!(discarded(&engine), 0, "both rolled back, neither discarded");
    resume_and_complete(&db, &engine, 40).await;
}

/// CLM-1: releasing a claim of a repair that overlaps commits rolls back
/// both of its transactions: another worker claims at once, at the
/// committed checkpoint, and no session stays inside a transaction.
/// Guard: the spare's rollback in `Engine::release` (dropped instead, its
/// connection is discarded).
#[tokio::test]
async fn clm01_release_ends_both_overlapped_transactions() {
    let (db, engine, _hooks) =
        started_counter(30, 10, None, |c| c.one_statement().overlapping()).await;
    let claim = claim_and_commit_first_batch(&engine).await;
    assert_eq!(busy(&engine), 2);
    assert!(engine.release(&claim).await.unwrap());
    assert_eq!(open_transactions(&db).await, 0);
    assert_eq!(busy(&engine), 0);
    assert_eq!(discarded(&engine), 0, "both rolled back, neither discarded");
    let other = engine.claim_next("w2", &[]).await.unwrap().unwrap();
    assert_eq!(other.checkpoint_json(), Some(serde_json::json!(10)));
    finish(&db, &engine, other, 30).await;
}

/// EX-6: the second connection is taken only for a repair that says it
/// overlaps commits (a repair may read what earlier batches wrote, and then
/// its batches must run one after the other), and only while two more
/// connections stay free for claims, renewals, validation and the admin
/// API. Either way the run completes with every item repaired once.
/// Guards: `Repair::overlap_commits` in `run_batch` (ignored, the default
/// repair holds two connections) and `Engine::pool_can_spare` (without it
/// the runner takes the last free connections of a pool of 3); the
/// serial-fallback counter (EMB-6) counts only the pool's refusals.
#[tokio::test]
async fn ex06_second_connection_only_when_the_repair_overlaps_and_the_pool_can_spare() {
    for (overlap, pool, expected) in [(false, None, 1), (true, None, 2), (true, Some(3), 1)] {
        let (db, engine, _hooks) = started_counter(30, 10, pool, |c| {
            let c = c.one_statement();
            if overlap {
                c.overlapping()
            } else {
                c
            }
        })
        .await;
        let claim = claim_and_commit_first_batch(&engine).await;
        assert_eq!(
            busy(&engine),
            expected,
            "overlap {overlap}, pool {pool:?}: connections the claim holds"
        );
        finish(&db, &engine, claim, 30).await;
        // EMB-6: an embedder can see when overlap fell back to serial.
        assert_eq!(
            engine.serial_fallbacks() > 0,
            overlap && pool.is_some(),
            "overlap {overlap}, pool {pool:?}: serial fallbacks counted"
        );
    }
}

/// EX-6, CLM-3: a runner keeps its second connection only while two more
/// stay free. Here the pool of 4 runs short after the claim took its pair:
/// another caller takes the last two connections and a third (a renewal,
/// say) waits for one. The next batch gives the spare back, the waiting
/// caller gets it, and the run still completes with every item repaired
/// once. Guard: the check of `Engine::pool_can_spare` before every batch
/// (without it the claim keeps both connections until it ends, and the
/// waiting get fails at the pool's 10 s timeout).
#[tokio::test]
async fn ex06_second_connection_goes_back_when_the_pool_runs_short() {
    let (db, engine, _hooks) =
        started_counter(40, 10, Some(4), |c| c.one_statement().overlapping()).await;
    let mut claim = claim_and_commit_first_batch(&engine).await;
    assert_eq!(busy(&engine), 2, "the claim holds its pair");
    let taken = [
        engine.pool().get_owned().await.expect("a free connection"),
        engine.pool().get_owned().await.expect("a free connection"),
    ];
    let pool = engine.pool().clone();
    let waiter = tokio::spawn(async move { pool.get_owned().await.map(drop).is_ok() });
    commits(&engine, &mut claim, 10).await;
    assert!(waiter.await.unwrap(), "the waiting caller got the spare");
    drop(taken);
    assert_eq!(count_n(&db, 1).await, 20);
    finish(&db, &engine, claim, 40).await;
}

/// EX-6, EX-5: a runner waits only briefly for its second connection.
/// Here the pool's last free connections are taken after the runner saw
/// them free and before it asks for one: the batch commits without a
/// second connection, and the next batch runs on the claim's own
/// connection, whose open transaction the server has not ended. Guard: the
/// bounded wait in `Engine::body_on_spare` (with the pool's 10 s timeout
/// instead, the claim's transaction sits idle past the 3 s statement
/// timeout, the server ends that session and the next batch fails).
#[tokio::test]
async fn ex06_runner_does_not_wait_for_a_taken_second_connection() {
    let db = test_db().await;
    db.exec(&items_sql(30)).await;
    let hooks = Hooks::new();
    let pool = backfill::store::build_pool(&db.url, 4).await.expect("pool");
    let registry = Registry::new()
        .with(Counter::new(ID, 10, hooks.clone()).overlapping())
        .expect("valid definition");
    let config = EngineConfig {
        statement_timeout: Duration::from_secs(3),
        ..config()
    };
    let engine = Engine::new(pool, registry, config).expect("engine");
    engine.register().await.expect("register");
    engine.start(ID).await.expect("start");
    let mut gate = hooks.gate_after_mutate();
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let stepper = engine.clone();
    let step = tokio::spawn(async move {
        let outcome = stepper.run_batch(&mut claim).await;
        (claim, outcome)
    });
    // Batch 1 holds one of the 4 connections and has decided to overlap
    // (3 free). Now the other three are taken.
    gate.reached().await;
    let mut taken = Vec::new();
    for _ in 0..3 {
        taken.push(engine.pool().get_owned().await.expect("a free connection"));
    }
    hooks.clear_gates();
    gate.release();
    let (mut claim, outcome) = step.await.unwrap();
    assert_eq!(
        outcome.unwrap(),
        BatchOutcome::Committed {
            keys: 10,
            reached_bound: false
        }
    );
    assert_eq!(
        busy(&engine),
        4,
        "the claim's one connection and the 3 taken"
    );
    drop(taken);
    // The next batch runs in the transaction the claim kept open.
    commits(&engine, &mut claim, 10).await;
    assert_eq!(count_n(&db, 1).await, 20);
    finish(&db, &engine, claim, 30).await;
}
