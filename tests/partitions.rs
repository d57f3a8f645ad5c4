//! Partitioned execution (docs/CONTRACT.md section 12.2, PAR-1..PAR-5)
//! through the production store and engine against a real PostgreSQL.
//!
//! Index (each test's doc comment names the guard whose removal fails it):
//! - PAR-1 split validation, exact cover, partitions written at `start`:
//!   `par1_*`
//! - PAR-2 partitions claimed by two engines on separate pools, a stale
//!   partition owner rejected at commit, a runtime completing a
//!   partitioned backfill: `par2_*`
//! - PAR-3 pause, resume and a blocked partition across partitions:
//!   `par3_*`
//! - PAR-4 the last partition's end moves the backfill to `validating`
//!   exactly once; validation decides completion: `par4_*`
//!
//! Races are forced with gates in the test repair (between mutation and
//! commit) and a second session holding a row lock; nothing sleeps to make
//! a race happen.

mod support;

use backfill::engine::ActionOutcome;
use backfill::key::Key;
use backfill::repair::{
    even_splits, plan_partitions, Batches, DefinitionError, Repair, RepairError, SourceSet,
    SplitError, Validation,
};
use backfill::{async_trait, AsyncPgConnection};
use backfill::{BatchOutcome, Claim, Engine, EngineError, Phase, Registry, State};
use chrono::{DateTime, TimeZone, Utc};
use diesel_async::RunQueryDsl;
use std::sync::Arc;
use support::repairs::{items_sql, Counter, Hooks};
use support::{drive, engine_config, eventually, test_db, TestDb};

const ID: &str = "items.counter";

/// Where a [`Parted`] repair's split points come from.
#[derive(Clone)]
enum Points {
    /// [`even_splits`] over the items' `min(id)` and the bound.
    Even,
    /// Exactly these (to test the engine's checks).
    Fixed(Vec<i64>),
}

/// The counter repair (`n = n + 1`, validated by every `n` being 1) with
/// partitions: a wrapper handing out the form of the repair it wraps.
struct Parted {
    inner: Counter,
    partitions: u32,
    points: Points,
}

#[derive(diesel::QueryableByName)]
struct Min {
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
    min: Option<i64>,
}

#[async_trait]
impl Repair for Parted {
    type Key = i64;

    fn id(&self) -> &str {
        self.inner.id
    }

    fn batch_limit(&self) -> u32 {
        self.inner.batch_limit()
    }

    fn partitions(&self) -> u32 {
        self.partitions
    }

    async fn split_points(
        &self,
        conn: &mut AsyncPgConnection,
        bound: &i64,
        partitions: u32,
    ) -> Result<Vec<i64>, RepairError> {
        Ok(match &self.points {
            Points::Fixed(points) => points.clone(),
            Points::Even => {
                let row: Min = diesel::sql_query("SELECT min(id) AS min FROM items")
                    .get_result(conn)
                    .await?;
                even_splits(row.min.unwrap_or(*bound), *bound, partitions)
            }
        })
    }

    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        self.inner.capture_bound(conn).await
    }

    fn batches(&self) -> Batches<'_, i64> {
        self.inner.batches()
    }

    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        self.inner.validate(conn, bound).await
    }
}

fn parted(limit: u32, hooks: Arc<Hooks>, partitions: u32, points: Points) -> Parted {
    Parted {
        inner: Counter::new(ID, limit, hooks),
        partitions,
        points,
    }
}

/// An engine over its own pool (a process of its own) with `repair`.
async fn engine_for(db: &TestDb, repair: Parted) -> Engine {
    // Room for a connection per claim (each carries its open batch)
    // and a few for claims, actions and reads.
    let pool = backfill::store::build_pool(&db.url, 10).await.unwrap();
    Engine::new(pool, Registry::new().with(repair).unwrap(), engine_config()).unwrap()
}

/// A database with `rows` items and a registered, started partitioned
/// counter (even split into `partitions`, batches of `limit`).
async fn started(rows: i64, limit: u32, partitions: u32) -> (TestDb, Engine, Arc<Hooks>) {
    let db = test_db().await;
    db.exec(&items_sql(rows)).await;
    let hooks = Hooks::new();
    let engine = engine_for(&db, parted(limit, hooks.clone(), partitions, Points::Even)).await;
    engine.register().await.unwrap();
    engine.start(ID).await.unwrap();
    (db, engine, hooks)
}

async fn partition_count(db: &TestDb) -> i64 {
    db.scalar("SELECT count(*) AS v FROM backfill_partition")
        .await
}

async fn count_n(db: &TestDb, n: i32) -> i64 {
    db.scalar(&format!("SELECT count(*) AS v FROM items WHERE n = {n}"))
        .await
}

async fn state(engine: &Engine) -> State {
    engine.get(ID).await.unwrap().state
}

/// The partitions' checkpoints, by part, as text (NULL as "-").
async fn checkpoints(db: &TestDb) -> String {
    db.text(
        "SELECT string_agg(coalesce(encode(checkpoint, 'hex'), '-'), ',' ORDER BY part) AS v \
         FROM backfill_partition",
    )
    .await
    .unwrap_or_default()
}

/// A batch run on a task of its own, and the claim it ran on.
type InFlight = tokio::task::JoinHandle<(Result<BatchOutcome, EngineError>, Claim)>;

/// Run one batch of `claim` on a task of its own; the claim comes back.
fn spawn_batch(engine: &Engine, mut claim: Claim) -> InFlight {
    let engine = engine.clone();
    tokio::spawn(async move {
        let outcome = engine.run_batch(&mut claim).await;
        (outcome, claim)
    })
}

/// Run `claim` until its partition ends.
async fn run_to_end(engine: &Engine, claim: &mut Claim) {
    loop {
        match engine.run_batch(claim).await.unwrap() {
            BatchOutcome::Committed {
                reached_bound: false,
                ..
            } => continue,
            BatchOutcome::Committed { .. } => return,
            BatchOutcome::Stale => panic!("partition {:?} went stale", claim.partition),
        }
    }
}

// ---------------------------------------------------------------- PAR-1

/// PAR-1: every bad input is a typed error at `start` and nothing is
/// written: points out of order, duplicated, at or past the bound, and
/// more than the partitions allow. Guard: the checks of
/// `repair::plan_partitions`, and the start transaction rolling back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par1_bad_split_points_are_refused_at_start_and_nothing_is_written() {
    let db = test_db().await;
    db.exec(&items_sql(100)).await;
    type Expect = fn(&SplitError) -> bool;
    let cases: [(Vec<i64>, Expect); 5] = [
        (vec![50, 25], |e| {
            matches!(e, SplitError::NotIncreasing { index: 1 })
        }),
        (vec![25, 25], |e| {
            matches!(e, SplitError::NotIncreasing { index: 1 })
        }),
        (vec![25, 100], |e| {
            matches!(e, SplitError::OutsideBound { index: 1 })
        }),
        (vec![150], |e| {
            matches!(e, SplitError::OutsideBound { index: 0 })
        }),
        (vec![10, 20, 30, 40], |e| {
            matches!(e, SplitError::TooMany { points: 4, .. })
        }),
    ];
    for (points, expected) in cases {
        let engine = engine_for(
            &db,
            parted(10, Hooks::new(), 4, Points::Fixed(points.clone())),
        )
        .await;
        engine.register().await.unwrap();
        match engine.start(ID).await {
            Err(EngineError::Split { error, .. }) => {
                assert!(expected(&error), "{points:?}: {error:?}")
            }
            other => panic!("{points:?}: expected a split error, got {other:?}"),
        }
        let row = engine.get(ID).await.unwrap();
        assert_eq!(row.state, State::Pending, "{points:?}");
        assert!(row.bound.is_none(), "{points:?}");
        assert_eq!(partition_count(&db).await, 0, "{points:?}");
    }
}

/// PAR-1: a split point of another key type is refused by its type tag.
/// Guard: `check_key` in `plan_partitions`.
#[test]
fn par1_split_points_of_another_key_type_are_refused() {
    let check = |bytes: &[u8]| i64::from_bytes(bytes).map(|_| ());
    let bound = 100i64.to_bytes();
    let text = "m".to_string().to_bytes();
    assert!(matches!(
        plan_partitions(&[text], &bound, 4, &check),
        Err(SplitError::KeyType { index: 0, .. })
    ));
    let wide = (10i32).to_bytes();
    assert!(matches!(
        plan_partitions(&[5i64.to_bytes(), wide], &bound, 4, &check),
        Err(SplitError::KeyType { index: 1, .. })
    ));
}

/// PAR-1: 0 partitions, or more than the documented maximum, is a
/// registration error. Guard: the check in `Registry::register`.
#[test]
fn par1_zero_or_too_many_partitions_are_a_definition_error() {
    for partitions in [0, backfill::repair::MAX_PARTITIONS + 1] {
        let repair = parted(10, Hooks::new(), partitions, Points::Even);
        assert!(matches!(
            Registry::new().with(repair),
            Err(DefinitionError::InvalidPartitions { .. })
        ));
    }
    assert!(Registry::new()
        .with(parted(
            10,
            Hooks::new(),
            backfill::repair::MAX_PARTITIONS,
            Points::Even
        ))
        .is_ok());
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Every key up to the bound lies in exactly one range, and the ranges
/// are contiguous from "nothing" to the bound.
fn assert_exact_cover<K: Key>(points: &[K], bound: &K, probes: &[K]) {
    let check = |bytes: &[u8]| K::from_bytes(bytes).map(|_| ());
    let encoded: Vec<Vec<u8>> = points.iter().map(Key::to_bytes).collect();
    let bound_bytes = bound.to_bytes();
    let ranges = plan_partitions(&encoded, &bound_bytes, 64, &check).unwrap();
    assert_eq!(ranges.len(), points.len() + 1);
    assert!(ranges[0].lower.is_none());
    assert_eq!(ranges.last().unwrap().upper, bound_bytes);
    for pair in ranges.windows(2) {
        assert_eq!(pair[1].lower.as_deref(), Some(pair[0].upper.as_slice()));
    }
    for probe in probes.iter().chain(points).chain(std::iter::once(bound)) {
        let key = probe.to_bytes();
        let within = ranges
            .iter()
            .filter(|r| r.lower.as_deref().is_none_or(|l| key.as_slice() > l) && key <= r.upper)
            .count();
        let expected = usize::from(probe <= bound);
        assert_eq!(within, expected, "{probe:?}");
    }
}

/// PAR-1: the exact-cover property over random bigint and compound
/// `(timestamp, bigint)` keys: contiguous, disjoint ranges whose union is
/// `(nothing, bound]`. Guard: the range construction of `plan_partitions`.
#[test]
fn par1_ranges_cover_the_range_exactly() {
    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
    for _ in 0..200 {
        let mut keys: Vec<i64> = (0..(rng.next() % 20 + 2))
            .map(|_| rng.next() as i64 / 1024)
            .collect();
        keys.sort();
        keys.dedup();
        let bound = *keys.last().unwrap();
        let points: Vec<i64> = keys[..keys.len() - 1].iter().copied().take(63).collect();
        let probes: Vec<i64> = (0..50).map(|_| rng.next() as i64 / 1024).collect();
        assert_exact_cover(&points, &bound, &probes);
    }
    let at = |s: u64, id: u64| -> (DateTime<Utc>, i64) {
        (
            Utc.timestamp_opt(1_700_000_000 + (s % 1000) as i64, 0)
                .unwrap(),
            (id % 100) as i64,
        )
    };
    for _ in 0..200 {
        let mut keys: Vec<(DateTime<Utc>, i64)> = (0..(rng.next() % 20 + 2))
            .map(|_| at(rng.next(), rng.next()))
            .collect();
        keys.sort();
        keys.dedup();
        let bound = *keys.last().unwrap();
        let points: Vec<_> = keys[..keys.len() - 1].to_vec();
        let probes: Vec<_> = (0..50).map(|_| at(rng.next(), rng.next())).collect();
        assert_exact_cover(&points, &bound, &probes);
    }
}

/// PAR-1: `start` writes the partitions in its own transaction, with the
/// ranges the split made; one partition (the default) writes none.
/// Guard: `split_in` in `Engine::start_in`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par1_start_writes_the_partitions_and_one_partition_writes_none() {
    let (db, engine, _hooks) = started(100, 10, 4).await;
    assert_eq!(state(&engine).await, State::Running);
    let uppers = db
        .text("SELECT string_agg(upper_json::text, ',' ORDER BY part) AS v FROM backfill_partition")
        .await;
    assert_eq!(uppers.as_deref(), Some("25,50,75,100"));
    let lowers = db
        .text(
            "SELECT string_agg(coalesce(lower_json::text, '-'), ',' ORDER BY part) AS v \
             FROM backfill_partition",
        )
        .await;
    assert_eq!(lowers.as_deref(), Some("-,25,50,75"));
    // Partitions are written only by the start that captured the bound.
    let mut conn = db.pool.get().await.unwrap();
    let late = diesel::sql_query(
        "INSERT INTO backfill_partition (backfill_id, part, lower, upper, upper_json) \
         SELECT id, 9, NULL, bound, bound_json FROM backfill",
    )
    .execute(&mut conn)
    .await;
    assert!(late.is_err());
    drop(conn);

    let single = test_db().await;
    single.exec(&items_sql(100)).await;
    let one = engine_for(
        &single,
        parted(10, Hooks::new(), 1, Points::Fixed(vec![50])),
    )
    .await;
    one.register().await.unwrap();
    one.start(ID).await.unwrap();
    assert_eq!(partition_count(&single).await, 0);
    drive(&one, "w").await;
    assert_eq!(state(&one).await, State::Completed);
    assert_eq!(count_n(&single, 1).await, 100);
}

// ---------------------------------------------------------------- PAR-2

/// PAR-2: two engines on separate pools claim different partitions of one
/// backfill and commit concurrently; while A's batch on partition 0 sits
/// between its mutation and its commit, B commits batches on partition 1,
/// A's lease expires and B takes partition 0 over; A's commit is then
/// rejected (mutation and checkpoint roll back) while B completes both.
/// Guard: the partition fence's claim conditions in
/// `backfill_partition_advance` (owner, generation, lease); checked by
/// hand: with them removed, A's stale batch commits and this test fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par2_stale_partition_owner_is_rejected_at_commit() {
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
/// holding partitions.
#[actix_rt::test]
async fn par2_two_runtimes_complete_a_partitioned_backfill() {
    use backfill::runtime::{RuntimeConfig, RuntimeHandle};
    let (db, first, _hooks) = started(400, 5, 4).await;
    let second = engine_for(&db, parted(5, Hooks::new(), 4, Points::Even)).await;
    let config = |worker: &str| RuntimeConfig {
        worker_id: worker.into(),
        poll_interval: std::time::Duration::from_millis(50),
        max_concurrent_runners: 2,
        ..RuntimeConfig::default()
    };
    let one = RuntimeHandle::start(Arc::new(first.clone()), config("one")).unwrap();
    let two = RuntimeHandle::start(Arc::new(second), config("two")).unwrap();
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

/// Claim all `n` partitions on `engine` and run one batch on each.
async fn claim_all(engine: &Engine, n: usize) -> Vec<Claim> {
    let mut claims = Vec::new();
    for _ in 0..n {
        let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
        assert_eq!(claim.phase, Phase::Execute);
        assert!(matches!(
            engine.run_batch(&mut claim).await.unwrap(),
            BatchOutcome::Committed { .. }
        ));
        claims.push(claim);
    }
    claims.sort_by_key(|c| c.partition);
    claims
}

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
async fn par3_pause_stops_every_partition_and_resume_continues_each() {
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
async fn par3_pause_and_resume_under_a_batch_in_flight_reject_it() {
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
async fn par3_blocked_partition_blocks_the_backfill_and_names_itself() {
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
async fn par4_last_partition_end_moves_to_validating_exactly_once() {
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
async fn par4_validation_failure_leaves_every_partition_ended_and_not_completed() {
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
