//! Partitioned execution (docs/CONTRACT.md section 12.2, PAR-1..PAR-5)
//! through the production store and engine against a real PostgreSQL.
//! This file holds the partitioned test repair and the shared helpers;
//! the tests live in `tests/partitions/`: `split.rs` (PAR-1), `run.rs`
//! (PAR-2..PAR-4), `view.rs` (PAR-5, THR-2, THR-4) and `spread.rs`
//! (PAR-6).
//!
//! Index (each test's doc comment names the guard whose removal fails it):
//! - PAR-1 split validation, exact cover, partitions written at `start`:
//!   `par01_*` (also a refused split through the admin API: a 422)
//! - PAR-2 partitions claimed by two engines on separate pools, a stale
//!   partition owner rejected at commit, a runtime completing a
//!   partitioned backfill: `par02_*`
//! - PAR-3 pause, resume and a blocked partition across partitions:
//!   `par03_*`
//! - PAR-4 the last partition's end moves the backfill to `validating`
//!   exactly once; validation decides completion: `par04_*`
//! - PAR-5 the admin view aggregates and shows each partition; unknown
//!   totals stay unknown: `par05_*`
//! - PAR-6 a process holds its fair share of a backfill's partitions and
//!   gives back the rest, so three runtimes with default runners share
//!   one backfill, a shutdown returns only once the presence is
//!   withdrawn, and an idle runtime's poll is one read that carries the
//!   presence: `par06_*` (`partitions/spread.rs`)
//! - THR-4 the live `concurrency` setting caps partitions at once,
//!   fleet-wide, raised and lowered while it runs: `thr04_*`
//! - THR-2 the throttle condition written only by the claim in force, on
//!   the backfill's row and on a partition's: `thr02_*`
//!
//! Races are forced with gates in the test repair (between mutation and
//! commit) and a second session holding a row lock; nothing sleeps to make
//! a race happen.

#[path = "partitions/run.rs"]
mod run;
#[path = "partitions/split.rs"]
mod split;
#[path = "partitions/spread.rs"]
mod spread;
mod support;
#[path = "partitions/view.rs"]
mod view;

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
    /// Whether `start` captures the source set's size (else unknown).
    count_rows: bool,
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
        Ok(match self.inner.capture_bound(conn).await? {
            SourceSet::Bounded { upper, rows } => SourceSet::Bounded {
                upper,
                rows: rows.filter(|_| self.count_rows),
            },
            SourceSet::Empty => SourceSet::Empty,
        })
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
        count_rows: true,
    }
}

/// An engine over its own pool (a process of its own) with `repair`.
async fn engine_for(db: &TestDb, repair: Parted) -> Engine {
    // Room for a connection per claim (each carries its open batch)
    // and a few for claims, actions and reads.
    let pool = backfill::__private::store::build_pool(&db.url, 10)
        .await
        .unwrap();
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
