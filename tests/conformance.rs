//! Conformance tests of the durable core against a real PostgreSQL, through
//! the production store and engine (docs/CONTRACT.md section 11). This
//! file holds the shared helpers; the tests live in `tests/conformance/`,
//! one file per area: `claims.rs` (CT-1, CLM-1), `batches.rs` (CT-2, CT-3,
//! EX-5), `restart.rs` (CT-4), `stale.rs` (CT-5), `validation.rs` (CT-7,
//! VAL-6), `failure.rs` (CT-8, RT-1), `overlap.rs` (EX-6),
//! `registration.rs` (REG-1, REG-4, LC-1, EX-2), `server_loop.rs`
//! (EX-8) and `privileges.rs` (EMB-12).
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
//! - VAL-7 an explicit validation's record and what it reports: `val07_*`
//! - EX-5/CLM-1 the open batch a claim carries between batches, and the
//!   timeouts that bound validation: `ex05_*`, `clm01_*`
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
//!   enforced by the database, compound keys: `reg01_*`, `reg04_*`, `lc01_*`,
//!   `ex02_*`; an invalid stable ID (EMB-2): `emb02_*`
//! - RT-1 errors classified whatever the server's language: `rt01_*`
//! - EMB-4 the store's statements prepared once per connection: `emb04_*`
//! - AUD-2 an engine's `Debug` leaves the database out: `aud02_*`
//! - EX-8 the batch loop inside the server: `ex08_*`, and in
//!   `server_loop.rs` the fence (`ct05_pause_rejects_the_batch_in_flight_inside_the_loop`),
//!   per-batch commits (`ex06_a_failing_batch_in_the_loop_*`), the call's
//!   bound (`ex05_a_call_of_the_loop_*`), partitions (`par02_*`), the
//!   journal (`undo01_*`), batches at an operator's size
//!   (`ex08_a_batch_at_another_size_*`) and the batch contract
//!   (`ex04_the_loop_refuses_*`)
//! - EMB-12 no superuser: a database's plain owner migrates and serves it,
//!   a service role with the operating guide's grants serves it with
//!   migrations off: `emb12_*`
//!
//! Races are forced with gates (a channel between the repair's mutation and
//! the batch's commit) and with a second connection holding row locks;
//! nothing here sleeps to make a race happen.

#[path = "conformance/batches.rs"]
mod batches;
#[path = "conformance/claims.rs"]
mod claims;
#[path = "conformance/failure.rs"]
mod failure;
#[path = "conformance/overlap.rs"]
mod overlap;
#[path = "conformance/privileges.rs"]
mod privileges;
#[path = "conformance/registration.rs"]
mod registration;
#[path = "conformance/restart.rs"]
mod restart;
#[path = "conformance/server_loop.rs"]
mod server_loop;
#[path = "conformance/stale.rs"]
mod stale;
mod support;
#[path = "conformance/validation.rs"]
mod validation;

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
fn counter_engine(pool: backfill::__private::store::Pool, counter: Counter) -> Engine {
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

// ---------------------------------------------------------------- CT-2

// ---------------------------------------------------------------- CT-3

// ---------------------------------------------------------------- CT-4

// ---------------------------------------------------------------- CT-5

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

// ---------------------------------------------------------------- CT-8

// ------------------------------------------------ REG, LC-1, EX-2, bad input

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

// ------------------------------------------------- one-statement batches

/// A database with `rows` items and the counter, in its one-statement form
/// (`SelectAndMutate`), registered and started.
async fn started_one_statement(rows: i64, limit: u32) -> (TestDb, Engine, Arc<Hooks>) {
    started_counter(rows, limit, None, Counter::one_statement).await
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

/// `url` with its user replaced by `user`.
fn with_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a postgres:// URL");
    let host = rest.split_once('@').map(|(_, host)| host).unwrap_or(rest);
    format!("{scheme}://{user}@{host}")
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
        Some(size) => backfill::__private::store::build_pool(&db.url, size)
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
