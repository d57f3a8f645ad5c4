//! An application team's view of the `backfill` library: a small shop
//! service that repairs two of its tables, written as a host service
//! would write it.
//!
//! The crate depends on `backfill` the way any service does (a path or
//! version, default features) and names only items pinned in
//! docs/public-api.txt: no test-support crate of the library, nothing
//! hidden from its documentation. CI refuses any other path
//! (`.ci/facade-only`). Its test runs both repairs to completion against
//! PostgreSQL, which proves that the public façade is enough to define a
//! repair (declared with [`SqlRepair`] and written by hand as a
//! [`Repair`]), register it, start the runtime, await the outcome, follow
//! the events and stop.

use backfill::events::Event;
use backfill::host::{AppError, Application, Embedded, HostConfig};
use backfill::repair::DefinitionError;
use backfill::{
    async_trait, AsyncPgConnection, Batches, Engine, Registry, Repair, RepairError,
    SelectThenMutate, SourceSet, SqlRepair, State, Validation,
};
// diesel and diesel-async as the library re-exports them: the very
// versions it was built with, so this crate pins neither (EMB-10).
use backfill::{diesel, diesel_async};
use diesel::sql_types::{Array, BigInt, Nullable};
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection};
use std::collections::HashMap;
use std::time::Duration;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::broadcast::Receiver;

/// The declarative repair: every account's normalized email.
pub const EMAIL_NORM: &str = "accounts.email-norm.v1";

/// The hand-written repair: every order's amount in cents.
pub const ORDER_CENTS: &str = "orders.amount-cents.v1";

/// The service's own schema. Each repaired table counts in `repairs` how
/// often a repair touched a row, so the service (and its test) can tell a
/// row repaired once from one repaired twice or never.
pub const SCHEMA: &str = "
    CREATE TABLE IF NOT EXISTS accounts (
        id bigint PRIMARY KEY,
        email text NOT NULL,
        email_norm text,
        repairs integer NOT NULL DEFAULT 0
    );
    CREATE TABLE IF NOT EXISTS orders (
        id bigint PRIMARY KEY,
        amount numeric(12, 2) NOT NULL,
        amount_cents bigint,
        repairs integer NOT NULL DEFAULT 0
    );
";

/// How long the service waits for the runtime to publish a completion it
/// already reads in PostgreSQL: events are published after the commit
/// that `wait_for` sees, so one may trail the state by a moment.
const EVENT_GRACE: Duration = Duration::from_secs(10);

/// The declarative repair. For one table with one integer key,
/// [`SqlRepair`] writes the batch and validation statements from these
/// fragments.
pub fn email_norm() -> Result<SqlRepair, DefinitionError> {
    SqlRepair::new(EMAIL_NORM, "accounts")
        .key("id")
        .set("email_norm = lower(email), repairs = repairs + 1")
        .validate_where("email_norm IS DISTINCT FROM lower(email)")
        .description("Lower-case copy of each account's email")
        // Small batches, so that a run over a few thousand rows takes
        // several batches and the runtime's checkpointing is exercised.
        .batch_size(250)
        .build()
}

/// The hand-written repair, in the two-statement batch form: the engine
/// checks the keys [`OrderCents::select_keys`] returns before
/// [`OrderCents::mutate`] changes exactly those rows.
#[derive(Debug, Clone, Copy, Default)]
pub struct OrderCents;

/// At most this many keys per batch.
const ORDER_BATCH: u32 = 300;

#[derive(QueryableByName)]
struct Bound {
    #[diesel(sql_type = Nullable<BigInt>)]
    max: Option<i64>,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[async_trait]
impl Repair for OrderCents {
    type Key = i64;

    fn id(&self) -> &str {
        ORDER_CENTS
    }

    fn description(&self) -> &str {
        "Each order's amount in integer cents"
    }

    fn batch_limit(&self) -> u32 {
        ORDER_BATCH
    }

    fn tables(&self) -> Vec<String> {
        vec!["orders".to_owned()]
    }

    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        // The rows that exist now are the work; rows inserted later are
        // the application's to write correctly.
        let bound: Bound = diesel::sql_query("SELECT max(id) AS max, count(*) AS n FROM orders")
            .get_result(conn)
            .await?;
        Ok(match bound.max {
            None => SourceSet::Empty,
            Some(upper) => SourceSet::Bounded {
                upper,
                rows: Some(bound.n),
            },
        })
    }

    fn batches(&self) -> Batches<'_, i64> {
        Batches::TwoStatements(self)
    }

    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        let Some(bound) = bound else {
            return Ok(Validation::Success);
        };
        let bad: Count = diesel::sql_query(
            "SELECT count(*) AS n FROM orders \
             WHERE id <= $1 AND amount_cents IS DISTINCT FROM (amount * 100)::bigint",
        )
        .bind::<BigInt, _>(*bound)
        .get_result(conn)
        .await?;
        // The diagnostic is shown to operators: a count, never row values.
        Ok(if bad.n == 0 {
            Validation::Success
        } else {
            Validation::Failure(format!("{} orders up to the bound lack their cents", bad.n))
        })
    }
}

#[async_trait]
impl SelectThenMutate<i64> for OrderCents {
    async fn select_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Vec<i64>, RepairError> {
        let ids: Vec<Id> = diesel::sql_query(
            "SELECT id FROM orders WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3",
        )
        .bind::<BigInt, _>(after.copied().unwrap_or(i64::MIN))
        .bind::<BigInt, _>(*bound)
        .bind::<BigInt, _>(i64::from(limit))
        .load(conn)
        .await?;
        Ok(ids.into_iter().map(|row| row.id).collect())
    }

    async fn mutate(&self, conn: &mut AsyncPgConnection, keys: &[i64]) -> Result<(), RepairError> {
        diesel::sql_query(
            "UPDATE orders SET amount_cents = (amount * 100)::bigint, repairs = repairs + 1 \
             WHERE id = ANY($1)",
        )
        .bind::<Array<BigInt>, _>(keys)
        .execute(conn)
        .await?;
        Ok(())
    }
}

/// The service as the library sees it: its repairs and its schema.
#[derive(Debug, Clone, Copy, Default)]
pub struct Shop;

#[async_trait]
impl Application for Shop {
    fn registry(&self) -> Result<Registry, DefinitionError> {
        Registry::new().with(email_norm()?)?.with(OrderCents)
    }

    async fn migrate(&self, database_url: &str) -> Result<(), AppError> {
        let mut conn = AsyncPgConnection::establish(database_url).await?;
        conn.batch_execute(SCHEMA).await?;
        Ok(())
    }
}

/// What the service learned about one repair: the final state and
/// validation as PostgreSQL records them, and what the events said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub id: String,
    pub state: State,
    /// The recorded outcome of the lifecycle validation (`success` when the
    /// postcondition held).
    pub validation: Option<String>,
    /// Rows the runtime recorded as done.
    pub rows_done: i64,
    /// Keys the runtime's progress events reported, summed.
    pub keys_reported: usize,
    /// Whether a `completed` state event arrived.
    pub completion_event: bool,
}

/// Start the runtime on `database_url` (migrating the framework's tables
/// and [`SCHEMA`]), run both repairs until they complete, and stop it.
/// Each repair must complete within `timeout`; a repair that fails or
/// blocks is an error naming its diagnostic.
pub async fn run_repairs(database_url: &str, timeout: Duration) -> Result<Vec<Outcome>, AppError> {
    let mut config = HostConfig::new(database_url);
    // The service starts its repairs itself, after it subscribed to the
    // events, so that it sees every event of their runs.
    config.auto_backfills = false;
    let spawned = Embedded::spawn(config, Shop).await?;
    let events = spawned.engine.events().subscribe();
    let outcome = drive(&spawned.engine, events, timeout).await;
    // Stop in every case: it drains the runtime and releases its claims.
    spawned.stop().await;
    outcome
}

async fn drive(
    engine: &Engine,
    mut events: Receiver<Event>,
    timeout: Duration,
) -> Result<Vec<Outcome>, AppError> {
    let ids = [EMAIL_NORM, ORDER_CENTS];
    for id in ids {
        engine.start(id).await?;
    }
    let mut rows = Vec::new();
    for id in ids {
        // The state is read from PostgreSQL, never inferred from events;
        // a `failed` or `blocked` repair ends the wait with its diagnostic.
        rows.push(engine.wait_for(id, &[State::Completed], timeout).await?);
    }

    // Progress and completion as the events told them, read until every
    // completion arrived or the grace period ran out.
    let mut keys: HashMap<String, usize> = HashMap::new();
    let mut completed: Vec<String> = Vec::new();
    let deadline = tokio::time::Instant::now() + EVENT_GRACE;
    while completed.len() < ids.len() {
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Ok(Ok(Event::Progress { id, keys: n, .. })) => *keys.entry(id).or_default() += n,
            Ok(Ok(Event::State {
                id,
                state: State::Completed,
            })) => completed.push(id),
            Ok(Ok(_)) => {}
            // Events are hints: a lagging subscriber loses the oldest and
            // reads on.
            Ok(Err(RecvError::Lagged(_))) => {}
            Ok(Err(RecvError::Closed)) | Err(_) => break,
        }
    }

    Ok(rows
        .into_iter()
        .map(|row| Outcome {
            keys_reported: keys.get(&row.id).copied().unwrap_or(0),
            completion_event: completed.contains(&row.id),
            id: row.id,
            state: row.state,
            validation: row.validation_outcome,
            rows_done: row.rows_done,
        })
        .collect())
}
