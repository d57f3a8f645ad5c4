//! Stale owners rejected at commit (CT-5).

use super::*;

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
