//! Partitions claimed, fenced, paused, blocked and ended (PAR-2..PAR-4).

use super::*;

/// PAR-2: two engines on separate pools claim different partitions of one
/// backfill and commit concurrently; while A's batch on partition 0 sits
/// between its mutation and its commit, B commits batches on partition 1,
/// A's lease expires and B takes partition 0 over; A's commit is then
/// rejected (mutation and checkpoint roll back) while B completes both.
/// Guard: the partition fence's claim conditions in
/// `backfill_partition_advance` (owner, generation, lease); checked by
/// hand: with them removed, A's stale batch commits and this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par02_stale_partition_owner_is_rejected_at_commit() {
    let db = test_db().await;
    db.exec(&items_sql(200)).await;
    let hooks_a = Hooks::new();
    let a = engine_for(
        &db,
        parted(10, hooks_a.clone(), 2, Points::Fixed(vec![100])),
    )
    .await;
    let b = engine_for(&db, parted(10, Hooks::new(), 2, Points::Fixed(vec![100]))).await;
    a.register().await.unwrap();
    b.register().await.unwrap();
    a.start(ID).await.unwrap();

    let claim_a = a.claim_next("a", &[]).await.unwrap().unwrap();
    let mut claim_b = b.claim_next("b", &[]).await.unwrap().unwrap();
    assert_eq!((claim_a.partition, claim_b.partition), (Some(0), Some(1)));
    assert!(b.claim_next("b", &[]).await.unwrap().is_none());

    let mut gate = hooks_a.gate_after_mutate();
    let in_flight = spawn_batch(&a, claim_a);
    gate.reached().await;
    for _ in 0..3 {
        assert!(matches!(
            b.run_batch(&mut claim_b).await.unwrap(),
            BatchOutcome::Committed { keys: 10, .. }
        ));
    }
    db.exec(
        "UPDATE backfill_partition SET lease_expires_at = clock_timestamp() - interval '1 second' \
         WHERE part = 0",
    )
    .await;
    let mut takeover = b.claim_next("b", &[]).await.unwrap().unwrap();
    assert_eq!(takeover.partition, Some(0));
    assert_eq!(takeover.takeover_from.as_deref(), Some("a"));
    gate.release();
    let (outcome, _stale) = in_flight.await.unwrap();
    assert_eq!(outcome.unwrap(), BatchOutcome::Stale);
    hooks_a.clear_gates();
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE id <= 100 AND n <> 0")
            .await,
        0
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE id > 100 AND n = 1")
            .await,
        30
    );

    run_to_end(&b, &mut takeover).await;
    run_to_end(&b, &mut claim_b).await;
    assert_eq!(state(&b).await, State::Validating);
    drive(&b, "b").await;
    assert_eq!(state(&b).await, State::Completed);
    assert_eq!(count_n(&db, 1).await, 200);
}

/// PAR-2 through the actor runtime: two runtimes on separate pools run a
/// 4-partition backfill to `completed`, every row repaired exactly once
/// (the counter's validation fails on any row not at 1), with both
/// holding partitions. The first runtime's batches wait at a gate until
/// the second holds a partition, so a slow start of the second cannot
/// let the first finish every partition alone.
#[actix_rt::test]
async fn par02_two_runtimes_complete_a_partitioned_backfill() {
    use backfill::runtime::{RuntimeConfig, RuntimeHandle};
    let (db, first, hooks) = started(400, 5, 4).await;
    let mut gate = hooks.gate_after_mutate();
    let second = engine_for(&db, parted(5, Hooks::new(), 4, Points::Even)).await;
    let config = |worker: &str| RuntimeConfig {
        worker_id: worker.into(),
        poll_interval: std::time::Duration::from_millis(50),
        max_concurrent_runners: 2,
        ..RuntimeConfig::default()
    };
    let one = RuntimeHandle::start(Arc::new(first.clone()), config("one")).unwrap();
    gate.reached().await;
    let two = RuntimeHandle::start(Arc::new(second), config("two")).unwrap();
    eventually("the second runtime holds a partition", || async {
        db.scalar("SELECT count(*) AS v FROM backfill_partition WHERE owner = 'two'")
            .await
            > 0
    })
    .await;
    hooks.clear_gates();
    // One permit for each of the first runtime's runners that may wait.
    gate.release();
    gate.release();
    let owners = Arc::new(parking_lot::Mutex::new(std::collections::BTreeSet::new()));
    eventually("completion", || {
        let owners = owners.clone();
        let db = &db;
        let first = &first;
        async move {
            if let Some(owner) = db
                .text("SELECT string_agg(owner, ',') AS v FROM backfill_partition")
                .await
            {
                owners.lock().extend(owner.split(',').map(str::to_string));
            }
            first.get(ID).await.unwrap().state == State::Completed
        }
    })
    .await;
    one.shutdown().await;
    two.shutdown().await;
    assert_eq!(count_n(&db, 1).await, 400);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_partition WHERE checkpoint = upper")
            .await,
        4
    );
    let owners = owners.lock().clone();
    assert!(
        owners.contains("one") && owners.contains("two"),
        "{owners:?}"
    );
}

// ---------------------------------------------------------------- PAR-3

/// PAR-3: a pause during a 4-partition run stops every partition: the
/// batch between its mutation and its commit is rejected, and so is every
/// other partition's next batch; nothing commits after the pause's commit.
/// Resume continues each partition from its own checkpoint (the counter's
/// validation sees every row at exactly 1). Guard: `partitions_fence` in
/// the pause's transaction (the partition fence also checks the backfill
/// is `running`, which backs it up for batches that start later);
/// checked by hand: without it the partitions keep their claims and this
/// test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par03_pause_stops_every_partition_and_resume_continues_each() {
    let (db, engine, hooks) = started(400, 10, 4).await;
    let mut claims = claim_all(&engine, 4).await;
    let mut gate = hooks.gate_after_mutate();
    let in_flight = spawn_batch(&engine, claims.remove(0));
    gate.reached().await;
    assert!(matches!(
        engine.pause(ID).await.unwrap(),
        ActionOutcome::Applied {
            prior: State::Running,
            ..
        }
    ));
    let after_pause = checkpoints(&db).await;
    gate.release();
    let (outcome, _) = in_flight.await.unwrap();
    assert_eq!(outcome.unwrap(), BatchOutcome::Stale);
    hooks.clear_gates();
    for claim in &mut claims {
        assert_eq!(engine.run_batch(claim).await.unwrap(), BatchOutcome::Stale);
    }
    assert_eq!(checkpoints(&db).await, after_pause);
    assert_eq!(count_n(&db, 1).await, 40);
    assert!(engine.claim_next("w", &[]).await.unwrap().is_none());
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_partition WHERE owner IS NOT NULL")
            .await,
        0
    );

    assert!(matches!(
        engine.resume(ID).await.unwrap(),
        ActionOutcome::Applied { .. }
    ));
    assert_eq!(checkpoints(&db).await, after_pause);
    drive(&engine, "w").await;
    assert_eq!(state(&engine).await, State::Completed);
    assert_eq!(count_n(&db, 1).await, 400);
}

/// PAR-3: a pause and a resume both commit while a partition's batch
/// sits between its mutation and its commit; the backfill is `running`
/// again when the batch commits, so only the partition generations the
/// two actions advanced tell it is stale (the ABA of pause and resume).
/// Guard: `partitions_fence` in the actions' transactions; checked by
/// hand: without it the stale batch commits and this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par03_pause_and_resume_under_a_batch_in_flight_reject_it() {
    let (db, engine, hooks) = started(400, 10, 4).await;
    let mut claims = claim_all(&engine, 4).await;
    let before = checkpoints(&db).await;
    let mut gate = hooks.gate_after_mutate();
    let in_flight = spawn_batch(&engine, claims.remove(1));
    gate.reached().await;
    engine.pause(ID).await.unwrap();
    engine.resume(ID).await.unwrap();
    assert_eq!(state(&engine).await, State::Running);
    gate.release();
    let (outcome, _) = in_flight.await.unwrap();
    assert_eq!(outcome.unwrap(), BatchOutcome::Stale);
    hooks.clear_gates();
    assert_eq!(checkpoints(&db).await, before);
    assert_eq!(count_n(&db, 1).await, 40);
    drop(claims);
    drive(&engine, "w").await;
    assert_eq!(state(&engine).await, State::Completed);
    assert_eq!(count_n(&db, 1).await, 400);
}

/// PAR-3: a blocked partition blocks the backfill, its diagnostic names
/// the partition, and every other partition's claim is fenced; `retry`
/// resumes every partition from its own checkpoint. Guard: the blocked
/// branch of `partition_record_failure` (backfill state and
/// `partitions_fence`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par03_blocked_partition_blocks_the_backfill_and_names_itself() {
    let (db, engine, hooks) = started(400, 10, 4).await;
    let mut claims = claim_all(&engine, 4).await;
    let before = checkpoints(&db).await;
    *hooks.fail_after_mutate.lock() = Some(RepairError::Blocked("lookup table missing".into()));
    let error = engine.run_batch(&mut claims[2]).await.unwrap_err();
    let class = error.classification().unwrap();
    engine.record_failure(&claims[2], &class).await.unwrap();
    *hooks.fail_after_mutate.lock() = None;
    let row = engine.get(ID).await.unwrap();
    assert_eq!(row.state, State::Blocked);
    assert_eq!(
        row.last_error.as_deref(),
        Some("partition 2: lookup table missing")
    );
    for claim in [0, 1, 3] {
        assert_eq!(
            engine.run_batch(&mut claims[claim]).await.unwrap(),
            BatchOutcome::Stale
        );
    }
    assert_eq!(checkpoints(&db).await, before);

    assert!(matches!(
        engine.retry(ID).await.unwrap(),
        ActionOutcome::Applied { .. }
    ));
    assert_eq!(checkpoints(&db).await, before);
    drive(&engine, "w").await;
    assert_eq!(state(&engine).await, State::Completed);
    assert_eq!(count_n(&db, 1).await, 400);
}

/// PAR-3, LC-3: an action that changes nothing fences no partition, and
/// only `retry` resets the partitions' retry accounting: a resume of the
/// running backfill converges and leaves every partition's claim valid
/// (its next batch commits); a partition's retryable failure stays
/// counted across pause and resume, and is cleared by the retry that
/// follows a block. Guard: the retry flag of the partitions fence in
/// `Engine::act_in` (checked by hand: set on every action, the pause
/// clears the count and this test fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par03_converged_action_fences_nothing_and_only_retry_resets_attempts() {
    let (db, engine, hooks) = started(400, 10, 4).await;
    let mut claims = claim_all(&engine, 4).await;
    assert!(matches!(
        engine.resume(ID).await.unwrap(),
        ActionOutcome::Converged(_)
    ));
    for claim in claims.iter_mut() {
        assert!(matches!(
            engine.run_batch(claim).await.unwrap(),
            BatchOutcome::Committed { .. }
        ));
    }

    *hooks.fail_after_mutate.lock() = Some(RepairError::Retryable("deadlock".into()));
    let error = engine.run_batch(&mut claims[1]).await.unwrap_err();
    let class = error.classification().unwrap();
    engine.record_failure(&claims[1], &class).await.unwrap();
    assert_eq!(attempts(&db).await, "0,1,0,0");
    engine.pause(ID).await.unwrap();
    engine.resume(ID).await.unwrap();
    assert_eq!(attempts(&db).await, "0,1,0,0", "pause and resume keep it");

    *hooks.fail_after_mutate.lock() = Some(RepairError::Blocked("lookup table missing".into()));
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let error = engine.run_batch(&mut claim).await.unwrap_err();
    let class = error.classification().unwrap();
    engine.record_failure(&claim, &class).await.unwrap();
    *hooks.fail_after_mutate.lock() = None;
    assert_eq!(state(&engine).await, State::Blocked);
    assert!(matches!(
        engine.retry(ID).await.unwrap(),
        ActionOutcome::Applied { .. }
    ));
    assert_eq!(attempts(&db).await, "0,0,0,0", "retry clears it");
    drive(&engine, "w").await;
    assert_eq!(count_n(&db, 1).await, 400);
}

/// OBS-4 on a partition: each retryable failure is a timeline entry, also
/// when its diagnostic repeats the last one word for word, and a throttle
/// whose signal changes while the partition stays held back is recorded
/// as a throttle of the new signal (a new reading of the same signal is
/// not). Guards: the attempt count and the signal in the partition
/// timeline trigger (without them the second error and the second
/// throttle leave no entry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par03_a_partitions_repeated_errors_and_signal_changes_are_each_recorded() {
    use backfill::__private::store;
    let (db, engine, hooks) = started(400, 10, 2).await;
    let mut claims = claim_all(&engine, 2).await;
    *hooks.fail_after_mutate.lock() = Some(RepairError::Retryable("deadlock".into()));
    for round in 0..2 {
        let claim = if round == 0 {
            &mut claims[0]
        } else {
            // The failure released the claim; take it again once its
            // millisecond backoff has passed.
            claims[0] = loop {
                if let Some(claim) = engine.claim_next("w", &[]).await.unwrap() {
                    break claim;
                }
                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
            };
            &mut claims[0]
        };
        let error = engine.run_batch(claim).await.unwrap_err();
        let class = error.classification().unwrap();
        engine.record_failure(claim, &class).await.unwrap();
    }
    *hooks.fail_after_mutate.lock() = None;
    let part = claims[0].partition.expect("a partition claim");
    let entries = |kind: &'static str| {
        let db = &db;
        async move {
            db.scalar(&format!(
                "SELECT count(*) AS v FROM backfill_event \
                 WHERE backfill_id = '{ID}' AND part = {part} AND kind = '{kind}'"
            ))
            .await
        }
    };
    assert_eq!(entries("error").await, 2, "one entry per failure");

    let other = &claims[1];
    let other_part = other.partition.expect("a partition claim");
    let mut conn = db.pool.get().await.expect("pool");
    for signal in ["lock_waiters", "lock_waiters", "replication_lag"] {
        let condition = serde_json::json!({"signal": signal, "value": 3.0, "threshold": 1.0});
        let set = store::partition_throttle_set(
            &mut conn,
            ID,
            other_part,
            &other.worker,
            other.generation,
            Some(&condition),
        )
        .await
        .expect("throttle");
        assert!(set, "the claim in force writes its condition");
    }
    store::partition_throttle_set(
        &mut conn,
        ID,
        other_part,
        &other.worker,
        other.generation,
        None,
    )
    .await
    .expect("unthrottle");
    let kinds = db
        .text(&format!(
            "SELECT string_agg(kind || ':' || split_part(detail, ' ', 1), ',' ORDER BY seq) AS v \
             FROM backfill_event WHERE backfill_id = '{ID}' AND part = {other_part} \
               AND kind IN ('throttled', 'unthrottled')"
        ))
        .await;
    assert_eq!(
        kinds.as_deref(),
        Some("throttled:lock_waiters,throttled:replication_lag,unthrottled:replication_lag")
    );
}

/// The partitions' retry counts, by part.
async fn attempts(db: &TestDb) -> String {
    db.text("SELECT string_agg(attempts::text, ',' ORDER BY part) AS v FROM backfill_partition")
        .await
        .unwrap_or_default()
}

// ---------------------------------------------------------------- PAR-4

/// PAR-4: partitions ending one by one leave the backfill `running` until
/// the last one, whose end moves it to `validating` with its checkpoint
/// at the bound; when the last two end at once, their commits take turns
/// on the backfill row (both wait on a lock a second session holds) and
/// the transition happens exactly once: one validation claim, then
/// completion. Guard: the `FOR UPDATE` of the backfill row at a
/// partition's end in `backfill_partition_advance`; checked by hand: with
/// it removed, the two commits never wait on the row together and this
/// test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par04_last_partition_end_moves_to_validating_exactly_once() {
    let (db, engine, hooks) = started(80, 10, 4).await;
    let mut claims = claim_all(&engine, 4).await;
    for claim in &mut claims[..2] {
        run_to_end(&engine, claim).await;
        assert_eq!(state(&engine).await, State::Running);
    }
    let mut gate = hooks.gate_after_mutate();
    let last = [claims.pop().unwrap(), claims.pop().unwrap()];
    let mut holder = db.connect().await;
    diesel::sql_query("BEGIN")
        .execute(&mut holder)
        .await
        .unwrap();
    diesel::sql_query("SELECT id FROM backfill FOR UPDATE")
        .execute(&mut holder)
        .await
        .unwrap();
    let tasks: Vec<_> = last.into_iter().map(|c| spawn_batch(&engine, c)).collect();
    gate.reached().await;
    gate.reached().await;
    gate.release();
    gate.release();
    eventually("both final commits wait on the backfill row", || async {
        db.scalar(
            "SELECT count(*) AS v FROM pg_stat_activity \
             WHERE wait_event_type = 'Lock' AND query LIKE '%backfill_partition_advance%'",
        )
        .await
            == 2
    })
    .await;
    assert_eq!(state(&engine).await, State::Running);
    diesel::sql_query("COMMIT")
        .execute(&mut holder)
        .await
        .unwrap();
    for task in tasks {
        let (outcome, _) = task.await.unwrap();
        assert!(matches!(
            outcome.unwrap(),
            BatchOutcome::Committed {
                reached_bound: true,
                ..
            }
        ));
    }
    hooks.clear_gates();
    let row = engine.get(ID).await.unwrap();
    assert_eq!(row.state, State::Validating);
    assert_eq!(row.checkpoint, row.bound);
    assert_eq!(row.rows_done, 80);
    let validation = engine.claim_next("w", &[]).await.unwrap().unwrap();
    assert_eq!(
        (validation.phase, validation.partition),
        (Phase::Validate, None)
    );
    assert!(engine.claim_next("w", &[]).await.unwrap().is_none());
    engine.validate_claimed(&validation).await.unwrap();
    assert_eq!(state(&engine).await, State::Completed);
}

/// PAR-4: a validation failure after every partition ended leaves every
/// partition ended and the backfill `failed`, not completed; only
/// validation completes. Guard: the fenced completion of lifecycle
/// validation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par04_validation_failure_leaves_every_partition_ended_and_not_completed() {
    let (db, engine, _hooks) = started(80, 10, 4).await;
    for mut claim in claim_all(&engine, 4).await {
        run_to_end(&engine, &mut claim).await;
    }
    assert_eq!(state(&engine).await, State::Validating);
    db.exec("UPDATE items SET n = 7 WHERE id = 13").await;
    let validation = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.validate_claimed(&validation).await.unwrap();
    let row = engine.get(ID).await.unwrap();
    assert_eq!(row.state, State::Failed);
    assert!(row.completed_at.is_none());
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_partition WHERE checkpoint = upper")
            .await,
        4
    );
}

/// PAR-1/PAR-2 for the declarative repair: `SqlRepair::partitions` splits
/// `[min(key), bound]` evenly at `start`, and the partitions run to
/// `completed` with every row repaired once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par02_sql_repair_runs_in_partitions() {
    let db = test_db().await;
    db.exec(&items_sql(100)).await;
    let repair = backfill::repair::SqlRepair::new(ID, "items")
        .key("id")
        .set("n = n + 1")
        .validate_where("n <> 1")
        .batch_size(7)
        .partitions(4)
        .build()
        .unwrap();
    let pool = backfill::__private::store::build_pool(&db.url, 10)
        .await
        .unwrap();
    let engine = Engine::new(pool, Registry::new().with(repair).unwrap(), engine_config()).unwrap();
    engine.register().await.unwrap();
    engine.start(ID).await.unwrap();
    let uppers = db
        .text("SELECT string_agg(upper_json::text, ',' ORDER BY part) AS v FROM backfill_partition")
        .await;
    assert_eq!(uppers.as_deref(), Some("25,50,75,100"));
    drive(&engine, "w").await;
    assert_eq!(state(&engine).await, State::Completed);
    assert_eq!(count_n(&db, 1).await, 100);
}

/// PAR-2 / CLM-3: giving a partition claim back reports that it was
/// released and leaves the partition without an owner; giving the same
/// claim back again reports that it was already gone. Guard: the owner
/// and generation fence of `partition_release` and the outcome it reports.
#[tokio::test]
async fn par02_a_partition_claim_is_given_back_once() {
    let (db, engine, _hooks) = started(40, 10, 2).await;
    let claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let part = claim.partition.expect("a partition claim");
    assert!(engine.release(&claim).await.unwrap());
    assert!(!engine.release(&claim).await.unwrap(), "already given back");
    let owned = format!(
        "SELECT count(*) AS v FROM backfill_partition WHERE part = {part} AND owner IS NOT NULL"
    );
    assert_eq!(db.scalar(&owned).await, 0);
}
