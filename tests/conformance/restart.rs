//! Restart from PostgreSQL state (CT-4).

use super::*;

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

    let pool = backfill::__private::store::build_pool(&db.url, 4)
        .await
        .unwrap();
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

    let pool = backfill::__private::store::build_pool(&db.url, 4)
        .await
        .unwrap();
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

    let pool = backfill::__private::store::build_pool(&db.url, 4)
        .await
        .unwrap();
    let fresh = counter_engine(pool, Counter::new(ID, 10, hooks.clone()));
    db.expire_lease(ID).await;
    drive(&fresh, "fresh").await;
    assert_eq!(state(&fresh).await, State::Completed);
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
