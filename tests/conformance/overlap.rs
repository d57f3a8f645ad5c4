//! One-statement batches pipelined behind the previous commit, and overlapped commits (EX-6, CLM-2).

use super::*;

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
    // Batch 1's fence waits on the holder's row lock for as long as the
    // test takes between the gates, however loaded the machine: a lock
    // timeout far beyond that (the shared config's 300 ms is not).
    let engine = Engine::new(
        db.pool.clone(),
        engine.registry().clone(),
        EngineConfig {
            lock_timeout: Duration::from_secs(30),
            ..config()
        },
    )
    .unwrap();
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
    let pool = backfill::__private::store::build_pool(&db.url, 4)
        .await
        .expect("pool");
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
