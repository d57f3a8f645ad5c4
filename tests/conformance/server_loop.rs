//! The batch loop inside the server (EX-8): one step of a repair declared
//! with `SqlRepair::server_loop` is one call of an installed procedure that
//! commits batch after batch behind the product's fence.

use super::*;
use backfill::repair::{
    Batches, BigIntSummary, Mutated, Repair, SelectAndMutate, ServerBatch, SourceSet, SqlRepair,
    Validation,
};

const LOOP_ID: &str = "items.in-server";

/// The counter as a declared repair running in the server: `n = n + 1` in
/// batches of `limit`, calls of `slice`, validated by every `n` being 1.
fn declared(limit: u32, slice: Duration) -> backfill::repair::SqlRepairBuilder {
    SqlRepair::new(LOOP_ID, "items")
        .key("id")
        .set("n = n + 1")
        .validate_where("n <> 1")
        .batch_size(limit)
        .server_loop(slice)
}

/// [`declared`] in up to `partitions` partitions, built.
fn in_server(limit: u32, slice: Duration, partitions: u32) -> SqlRepair {
    declared(limit, slice)
        .partitions(partitions)
        .build()
        .expect("valid declaration")
}

/// A database with `rows` items and the in-server counter started on an
/// engine with `config`.
async fn loop_started(rows: i64, repair: SqlRepair, config: EngineConfig) -> (TestDb, Engine) {
    loop_started_with(rows, Registry::new().with(repair), config).await
}

/// A database with `rows` items and `registry`'s `LOOP_ID` started on an
/// engine with `config`.
async fn loop_started_with(
    rows: i64,
    registry: Result<Registry, DefinitionError>,
    config: EngineConfig,
) -> (TestDb, Engine) {
    let db = test_db().await;
    db.exec(&items_sql(rows)).await;
    let registry = registry.expect("valid definition");
    let engine = Engine::new(db.pool.clone(), registry, config).expect("engine");
    engine.register().await.unwrap();
    engine.start(LOOP_ID).await.unwrap();
    (db, engine)
}

/// The backfill row's committed checkpoint as JSON text, and its counters.
async fn progress(db: &TestDb) -> (Option<String>, i64, i64) {
    let checkpoint = db
        .text(&format!(
            "SELECT checkpoint_json::text AS v FROM backfill WHERE id = '{LOOP_ID}'"
        ))
        .await;
    let rows = db
        .scalar(&format!(
            "SELECT rows_done AS v FROM backfill WHERE id = '{LOOP_ID}'"
        ))
        .await;
    let batches = db
        .scalar(&format!(
            "SELECT batches_done AS v FROM backfill WHERE id = '{LOOP_ID}'"
        ))
        .await;
    (checkpoint, rows, batches)
}

/// Drive the backfill to `completed`: every one of the `rows` items then
/// repaired exactly once (the validation would refuse any other `n`).
async fn completes_once(db: &TestDb, engine: &Engine, rows: i64) {
    drive(engine, "w").await;
    assert_eq!(engine.get(LOOP_ID).await.unwrap().state, State::Completed);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n = 1")
            .await,
        rows
    );
}

/// EX-8: one step runs every batch of the range inside the server: the
/// step reports all 1,000 keys, the row counts 100 fenced batches of 10
/// and moved to `validating`, and validation completes with every item
/// repaired exactly once. Guard: the engine's call of the loop in
/// `run_batch` (without it the step is one batch of 10 keys).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ex08_one_step_runs_the_batches_in_the_server_each_fenced() {
    let repair = in_server(10, Duration::from_secs(60), 1);
    let (db, engine) = loop_started(1000, repair, config()).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    assert_eq!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            keys: 1000,
            reached_bound: true
        }
    );
    assert_eq!(progress(&db).await, (Some("1000".into()), 1000, 100));
    assert_eq!(engine.get(LOOP_ID).await.unwrap().state, State::Validating);
    completes_once(&db, &engine, 1000).await;
}

/// EX-8: a call ends after its time slice, not at the bound: with a
/// 1 ms slice each step commits one batch and the runner's next step
/// carries on from the checkpoint the call reported. Guard: the slice's
/// exit in the procedure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ex08_a_call_starts_no_batch_after_its_slice() {
    let repair = in_server(10, Duration::from_millis(1), 1);
    let (db, engine) = loop_started(1000, repair, config()).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let mut steps = 0;
    loop {
        steps += 1;
        match engine.run_batch(&mut claim).await.unwrap() {
            BatchOutcome::Committed {
                reached_bound: true,
                ..
            } => break,
            BatchOutcome::Committed { keys, .. } => assert!(keys < 1000),
            BatchOutcome::Stale => panic!("stale"),
        }
    }
    assert!(steps > 1, "one call ran the whole range");
    assert_eq!(progress(&db).await, (Some("1000".into()), 1000, 100));
}

/// CT-5 inside the loop: a pause that commits while a batch of the loop
/// waits for a row lock makes that batch's fence fail; its mutation rolls
/// back with it, the three batches before it stay committed, and after
/// `resume` the backfill completes with every item repaired exactly once.
/// The race is forced by a second session holding item 35's row lock.
/// Guard: the fence call in the procedure (without it the batch commits
/// and the loop runs on past the pause).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ct05_pause_rejects_the_batch_in_flight_inside_the_loop() {
    let repair = in_server(10, Duration::from_secs(60), 1);
    let (db, engine) = loop_started(100, repair, config()).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let mut holder = lock_holder(&db, "SELECT 1 FROM items WHERE id = 35 FOR UPDATE").await;
    let runner = engine.clone();
    let in_flight = tokio::spawn(async move { runner.run_batch(&mut claim).await });
    support::admin::wait_for_lock_waiters(&db, 1).await;
    assert!(matches!(
        engine.pause(LOOP_ID).await.unwrap(),
        ActionOutcome::Applied { .. }
    ));
    diesel::sql_query("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    assert_eq!(in_flight.await.unwrap().unwrap(), BatchOutcome::Stale);
    assert_eq!(progress(&db).await, (Some("30".into()), 30, 3));
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n = 1 AND id <= 30")
            .await,
        30
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n <> 0 AND id > 30")
            .await,
        0
    );
    assert!(matches!(
        engine.resume(LOOP_ID).await.unwrap(),
        ActionOutcome::Applied { .. }
    ));
    completes_once(&db, &engine, 100).await;
}

/// EX-6 inside the loop: a batch that fails (a CHECK constraint refuses
/// item 55's new value) rolls back alone; the five batches before it stay
/// committed with their checkpoint, the step fails with the classified
/// error, and the claim resumes from the committed checkpoint once the
/// cause is gone. Guards: the COMMIT after every batch in the procedure
/// (without it the whole call rolls back), and the read of the checkpoint
/// after a failed call (without it the claim's next fence expects the
/// checkpoint the call started from and is refused as stale).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ex06_a_failing_batch_in_the_loop_leaves_the_batches_before_it() {
    let repair = in_server(10, Duration::from_secs(60), 1);
    let (db, engine) = loop_started(100, repair, config()).await;
    db.exec("ALTER TABLE items ADD CONSTRAINT not_55 CHECK (id <> 55 OR n = 0)")
        .await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    match engine.run_batch(&mut claim).await {
        Err(EngineError::Repair {
            error: RepairError::Fatal(message),
            ..
        }) => assert_eq!(message, "check violation (constraint not_55)"),
        other => panic!("expected the batch's check violation, got {other:?}"),
    }
    assert_eq!(progress(&db).await, (Some("50".into()), 50, 5));
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n = 1")
            .await,
        50
    );
    db.exec("ALTER TABLE items DROP CONSTRAINT not_55").await;
    assert_eq!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            keys: 50,
            reached_bound: true
        }
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n = 1")
            .await,
        100
    );
}

/// EX-5 for the loop: a call is bounded by its slice plus the statement
/// timeout, whatever its batches wait for. A batch waiting on item 35's
/// row lock (lock timeout 5 s) is cancelled by the statement timeout of
/// the call (100 ms slice + 300 ms); the batches before it stay committed.
/// Guard: the statement timeout set around the call (without it the
/// batch ends only by the 5 s lock timeout and the step reports that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ex05_a_call_of_the_loop_is_bounded_by_slice_and_statement_timeout() {
    let repair = in_server(10, Duration::from_millis(100), 1);
    let config = EngineConfig {
        statement_timeout: Duration::from_millis(300),
        lock_timeout: Duration::from_secs(5),
        ..config()
    };
    let (db, engine) = loop_started(100, repair, config).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let mut holder = lock_holder(&db, "SELECT 1 FROM items WHERE id = 35 FOR UPDATE").await;
    let outcome = loop {
        match engine.run_batch(&mut claim).await {
            Ok(BatchOutcome::Committed { .. }) => continue,
            other => break other,
        }
    };
    match outcome {
        Err(EngineError::Repair {
            error: RepairError::Retryable(message),
            ..
        }) => assert_eq!(message, "statement timeout"),
        other => panic!("expected the call's statement timeout, got {other:?}"),
    }
    diesel::sql_query("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    assert_eq!(progress(&db).await, (Some("30".into()), 30, 3));
}

/// PAR-2 with the loop: each partition's claim runs its own range in one
/// call, fenced by the partition's function, and the last one moves the
/// backfill to `validating`. Guard: the partition branch of the
/// procedure (the backfill's own fence refuses a partitioned row's claim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par02_partitions_run_their_ranges_in_the_loop() {
    let repair = in_server(10, Duration::from_secs(60), 2);
    let (db, engine) = loop_started(200, repair, config()).await;
    let mut first = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let mut second = engine.claim_next("w", &[]).await.unwrap().unwrap();
    assert_eq!((first.partition, second.partition), (Some(0), Some(1)));
    for claim in [&mut first, &mut second] {
        match engine.run_batch(claim).await.unwrap() {
            BatchOutcome::Committed {
                keys,
                reached_bound: true,
            } => assert!(keys >= 90, "{keys} keys in one call"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(engine.get(LOOP_ID).await.unwrap().state, State::Validating);
    completes_once(&db, &engine, 200).await;
}

/// UNDO-1 inside the loop: a journaled declared repair's statement runs in
/// the loop as it is, so every batch journals the rows it changed in its
/// own transaction: one entry per batch, every row once. Guard: the
/// journaled statement handed to the loop (`SqlRepair::server_batch` with
/// `batch_statement`; the plain statement journals nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo01_a_journaled_repair_journals_every_batch_of_the_loop() {
    let repair = declared(10, Duration::from_secs(60))
        .journal(["n"])
        .build()
        .expect("valid declaration");
    let (db, engine) = loop_started(100, repair, config()).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    assert_eq!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            keys: 100,
            reached_bound: true
        }
    );
    let journal = |what: &str| {
        format!("SELECT {what} AS v FROM backfill_journal WHERE backfill_id = '{LOOP_ID}'")
    };
    assert_eq!(db.scalar(&journal("count(*)")).await, 10);
    assert_eq!(
        db.scalar(&journal("coalesce(sum(row_count), 0)::bigint"))
            .await,
        100
    );
}

/// EX-8, RT-1: a loop that cannot be installed (here its statement does
/// not parse) fails its first step before any batch ran, as a block that
/// says what to check, and the recorded failure leaves every row as it
/// was. Guard: the mapping of the installation's error (without it the
/// error is the store's, recorded as fatal with no hint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ex08_a_loop_that_cannot_be_installed_blocks_with_nothing_changed() {
    let repair = declared(10, Duration::from_secs(1))
        .set("n = n +")
        .build()
        .expect("valid declaration");
    let (db, engine) = loop_started(100, repair, config()).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let error = engine.run_batch(&mut claim).await.unwrap_err();
    match &error {
        EngineError::Repair {
            error: RepairError::Blocked(message),
            ..
        } => assert!(
            message.starts_with("the loop inside the server could not be installed"),
            "{message}"
        ),
        other => panic!("expected a block, got {other:?}"),
    }
    let class = error.classification().unwrap();
    engine.record_failure(&claim, &class).await.unwrap();
    assert_eq!(engine.get(LOOP_ID).await.unwrap().state, State::Blocked);
    assert_eq!(progress(&db).await.2, 0);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n <> 0")
            .await,
        0
    );
}

/// EX-8, THR-4: a batch at another size than the declared one (an
/// operator's `batch_size`) is sent by the engine and commits alone,
/// leaving no transaction open; once the setting is cleared, the next
/// claim's step is a call of the loop again and runs the rest. Guard: the
/// commit alone of a repair with a loop (without it the batch opens the
/// next one behind its commit and the claim holds it open).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ex08_a_batch_at_another_size_commits_alone_and_the_loop_resumes() {
    let repair = in_server(10, Duration::from_secs(60), 1);
    let (db, engine) = loop_started(100, repair, config()).await;
    let size = |n: serde_json::Value| serde_json::json!({ "batch_size": n });
    engine
        .update_settings(LOOP_ID, &size(5.into()))
        .await
        .unwrap();
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.gate(&mut claim).await.unwrap();
    for _ in 0..2 {
        assert_eq!(
            engine.run_batch(&mut claim).await.unwrap(),
            BatchOutcome::Committed {
                keys: 5,
                reached_bound: false
            }
        );
        assert_eq!(open_transactions(&db).await, 0);
    }
    assert!(engine.release(&claim).await.unwrap());
    engine
        .update_settings(LOOP_ID, &size(serde_json::Value::Null))
        .await
        .unwrap();
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.gate(&mut claim).await.unwrap();
    assert_eq!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            keys: 90,
            reached_bound: true
        }
    );
    completes_once(&db, &engine, 100).await;
}

/// A hand-written repair whose loop statement breaks the batch contract:
/// it changes the first 20 items and reports them, twice its limit of 10.
struct OverLimit;

/// The statement of [`OverLimit`], for the loop and (never reached) the
/// engine's own batches alike.
const OVER_LIMIT_SQL: &str = "WITH u AS (UPDATE items SET n = n + 1 WHERE id <= 20 RETURNING id) \
     SELECT min(id) AS first, max(id) AS last, count(*) AS n FROM u";

#[async_trait::async_trait]
impl Repair for OverLimit {
    type Key = i64;

    fn id(&self) -> &str {
        LOOP_ID
    }

    fn batch_limit(&self) -> u32 {
        10
    }

    async fn server_batch(
        &self,
        _conn: &mut diesel_async::AsyncPgConnection,
    ) -> Result<Option<ServerBatch>, RepairError> {
        Ok(Some(ServerBatch {
            statement: OVER_LIMIT_SQL.into(),
            slice: Duration::from_secs(60),
        }))
    }

    async fn capture_bound(
        &self,
        _conn: &mut diesel_async::AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        Ok(SourceSet::Bounded {
            upper: 100,
            rows: None,
        })
    }

    fn batches(&self) -> Batches<'_, i64> {
        Batches::OneStatement(self)
    }

    async fn validate(
        &self,
        _conn: &mut diesel_async::AsyncPgConnection,
        _bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        Ok(Validation::Success)
    }
}

#[async_trait::async_trait]
impl SelectAndMutate<i64> for OverLimit {
    async fn select_and_mutate(
        &self,
        conn: &mut &diesel_async::AsyncPgConnection,
        _after: Option<&i64>,
        _bound: &i64,
        _limit: u32,
    ) -> Result<Mutated<i64>, RepairError> {
        let row: BigIntSummary = diesel::sql_query(OVER_LIMIT_SQL).get_result(conn).await?;
        Ok(row.into())
    }
}

/// EX-4, EX-8: the loop checks every batch's summary against the batch
/// contract before its fence: a statement that changed 20 keys under a
/// limit of 10 fails the step as a selection error, and its changes roll
/// back with it. Guard: the contract check in the procedure (without it
/// the batch commits 20 keys).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ex04_the_loop_refuses_a_batch_over_its_limit() {
    let (db, engine) = loop_started_with(100, Registry::new().with(OverLimit), config()).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    match engine.run_batch(&mut claim).await {
        Err(EngineError::Selection {
            error: SelectionError::Inconsistent,
            ..
        }) => {}
        other => panic!("expected a selection error, got {other:?}"),
    }
    assert_eq!(progress(&db).await, (None, 0, 0));
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n <> 0")
            .await,
        0
    );
}
