//! `backfill bench`: same-run throughput of the product path against the
//! server-side limit and a minimal client loop.
//!
//! One invocation, one database (`backfill_bench` on the given server, or a
//! throwaway cluster), the canonical workload: `items(id bigint primary
//! key, email text not null, email_norm text, touched int not null default
//! 0)` with N rows; the repair sets `email_norm = lower(email)` and
//! `touched = touched + 1` by id in batches of B, checkpoint committed with
//! every batch. Every runner does the same statements per batch (select at
//! most B keys after the checkpoint, update them by id, advance the
//! checkpoint, commit), so the differences are round trips and overhead:
//!
//! 1. `plpgsql`: a procedure that loops the batches with `COMMIT` per batch
//!    (no client round trips at all: the server-side limit);
//! 2. `client`: a minimal hand-written loop on one connection (BEGIN, select,
//!    update, checkpoint, COMMIT), no claims or fencing;
//! 3. `engine`: the product path: registered repair, `start`, the actor
//!    runtime claiming, renewing and running fenced batches through
//!    validation to `completed`, the repair in its one-statement form;
//! 4. `engine-sql`: the same as `engine` with the repair declared as a
//!    `SqlRepair` (the library writes its statements), read against the
//!    hand-written one of `engine`;
//! 5. `engine-keys`: the same with the repair's two-statement form (select
//!    the keys, then update them by id);
//! 6. `engine-serial`: the same as `engine` with a repair that does not
//!    overlap commits (`Repair::overlap_commits`), the baseline of that;
//! 7. `engine-k`: K independent backfills over K disjoint tables at once;
//! 8. `plpgsql-k`: K `plpgsql` loops over the same K tables at once, the
//!    machine's own scaling limit that `engine-k` is read against.
//!
//! After every run every row must have `email_norm = lower(email)` and
//! `touched = 1` (a 2 is a batch applied twice): otherwise the run is
//! invalid and the command exits non-zero. Extras: `takeover` (latency of a
//! takeover after SIGKILL of the owner process), `rss` (peak RSS of a
//! worker over a long run) and `admin-list` (list latency under concurrent
//! clients, after a warm-up). A benchmark prints numbers; it asserts nothing
//! about timings.
//!
//! The bench's SQL is for its own tables only; the framework's tables are
//! touched only through the engine.

use async_trait::async_trait;
use backfill::engine::{Engine, EngineConfig, EngineError};
use backfill::repair::{
    Batches, BigIntSummary, Mutated, Registry, Repair, RepairError, SelectAndMutate,
    SelectThenMutate, SourceSet, SqlRepair, Validation,
};
use backfill::runtime::{Backend, BackendError, Disposition, StepOutcome, ValidationOutcome};
use backfill::runtime::{RuntimeConfig, RuntimeHandle};
use backfill::store::{self, cached, Pool, StoreError};
use diesel::sql_types::{Array, BigInt, Nullable, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What `backfill bench` can measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Runner {
    /// PL/pgSQL procedure, COMMIT per batch: the server-side limit.
    Plpgsql,
    /// Minimal hand-written client loop on one connection.
    Client,
    /// The product path: one backfill through the actor runtime, the
    /// repair in its one-statement form (`SelectAndMutate`).
    Engine,
    /// The same as `engine`, the repair declared as a `SqlRepair` instead
    /// of written by hand.
    EngineSql,
    /// The same, the repair in its two-statement form (`select_keys`, then
    /// `mutate` with the keys).
    EngineKeys,
    /// The same as `engine`, the repair declaring that it does not overlap
    /// commits (`Repair::overlap_commits` false): each batch's body runs
    /// after the previous batch committed, on the same connection.
    EngineSerial,
    /// K backfills over K disjoint tables at once (K = cores by default).
    EngineK,
    /// K `plpgsql` loops over the same K tables at once: how far the
    /// server itself scales on this machine, the reference for `engine-k`.
    PlpgsqlK,
    /// Takeover latency after SIGKILL of the owning process.
    Takeover,
    /// Peak RSS of the worker over a long engine run (`--rss-rows`).
    Rss,
    /// Admin API list latency (p50/p99) with 10,000 registered backfills
    /// under 32 concurrent clients.
    AdminList,
}

/// How the engine runs' repair is declared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// One-statement form, overlapping commits (`engine`, `engine-k`).
    OneStatement,
    /// Two-statement form, overlapping commits (`engine-keys`).
    TwoStatement,
    /// One-statement form, batches one after the other (`engine-serial`).
    Serial,
    /// The declarative `SqlRepair` of the same update (`engine-sql`).
    Sql,
}

/// Flags of `backfill bench`.
#[derive(clap::Args, Debug, Clone)]
pub struct BenchArgs {
    /// PostgreSQL server URL; the bench (re)creates its own database on it
    /// and drops it at the end. Unset: a throwaway cluster.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// Name of the bench database created on that server.
    #[arg(long, default_value = "backfill_bench")]
    pub database: String,
    /// Rows of the canonical table (N).
    #[arg(long, default_value_t = 1_000_000)]
    pub rows: u64,
    /// Batch sizes (B), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000")]
    pub batch: Vec<u32>,
    /// Repetitions per runner and batch size; the report shows medians.
    #[arg(long, default_value_t = 3)]
    pub reps: u32,
    /// What to run, comma-separated.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "plpgsql,client,engine,engine-sql,engine-keys,engine-serial,engine-k,plpgsql-k"
    )]
    pub only: Vec<Runner>,
    /// Backfills of `engine-k` and loops of `plpgsql-k` (default: the
    /// number of cores). The N rows are split evenly over K tables.
    #[arg(long)]
    pub k: Option<usize>,
    /// Print one JSON object on stdout instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the report as Markdown to this file (benches/README.md).
    #[arg(long)]
    pub markdown: Option<PathBuf>,
    /// Lease TTL of the engine runs and of the takeover measurement, ms.
    #[arg(long, default_value_t = 5_000)]
    pub lease_ttl_ms: u64,
    /// Supervisor poll interval of the engine runs and takeover, ms.
    #[arg(long, default_value_t = 250)]
    pub poll_interval_ms: u64,
    /// Rows of the `rss` run.
    #[arg(long, default_value_t = 10_000_000)]
    pub rss_rows: u64,
    /// Keep the bench database afterwards.
    #[arg(long)]
    pub keep: bool,
    /// Internal: run as the owner process of the takeover measurement on
    /// this database URL until killed.
    #[arg(long, hide = true)]
    pub takeover_owner: Option<String>,
}

/// Errors of the bench.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Invalid flags.
    #[error("invalid arguments: {0}")]
    Args(String),
    /// A run did not finish as it must.
    #[error("{0}")]
    Run(String),
}

impl From<diesel::result::Error> for BenchError {
    fn from(e: diesel::result::Error) -> Self {
        BenchError::Store(StoreError::Database(e))
    }
}

/// One measured run.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub runner: &'static str,
    pub batch: u32,
    pub rows: u64,
    pub rep: u32,
    pub seconds: f64,
    pub batches: usize,
    pub batch_mean_ms: f64,
    pub batch_p99_ms: f64,
    pub verified: bool,
    /// How busy the machine's cores were over the timed part of the run
    /// (0 to 1, all processes: PostgreSQL, this process and the rest);
    /// `None` where `/proc/stat` cannot be read.
    pub cpu_busy: Option<f64>,
}

impl RunResult {
    /// A run of `rows` rows timed by `timing`, with per-batch latencies in
    /// microseconds (sorted in place for the percentile).
    #[allow(clippy::too_many_arguments)]
    fn new(
        runner: &'static str,
        batch: u32,
        rows: u64,
        rep: u32,
        timing: Timing,
        latencies: &mut [u64],
        verified: bool,
    ) -> Self {
        let (batch_mean_ms, batch_p99_ms) = latency_stats(latencies);
        Self {
            runner,
            batch,
            rows,
            rep,
            seconds: timing.seconds,
            batches: latencies.len(),
            batch_mean_ms,
            batch_p99_ms,
            verified,
            cpu_busy: timing.cpu_busy,
        }
    }

    fn rows_per_s(&self) -> f64 {
        self.rows as f64 / self.seconds.max(1e-9)
    }

    /// Rows over the summed batch latencies: the batch path alone, without
    /// the engine's start, claim, validation and the gaps between
    /// batches. Meaningless for the K runners, whose batches overlap.
    fn batch_phase_rows_per_s(&self) -> Option<f64> {
        let seconds = self.batch_mean_ms * self.batches as f64 / 1000.0;
        let overlapping = matches!(self.runner, "engine-k" | "plpgsql-k");
        (!overlapping && seconds > 0.0).then(|| self.rows as f64 / seconds)
    }

    fn json(&self) -> Value {
        json!({
            "runner": self.runner, "batch": self.batch, "rows": self.rows, "rep": self.rep,
            "seconds": round3(self.seconds), "rows_per_s": self.rows_per_s().round(),
            "batches": self.batches, "batch_mean_ms": round3(self.batch_mean_ms),
            "batch_p99_ms": round3(self.batch_p99_ms), "verified": self.verified,
            "batch_phase_rows_per_s": self.batch_phase_rows_per_s().map(f64::round),
            "cpu_busy": self.cpu_busy.map(round3),
        })
    }
}

/// The machine's cumulative CPU time (all cores) from the first line of
/// `/proc/stat`, in clock ticks: busy (user, nice, system, irq, softirq,
/// steal) and total (busy plus idle and iowait). Comparing two readings
/// shows whether a run was bound by the machine's CPUs, which decides how
/// far K runs at once can scale on it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct CpuClock {
    busy: u64,
    total: u64,
}

impl CpuClock {
    fn now() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    fn parse(stat: &str) -> Option<Self> {
        let line = stat.lines().next()?;
        let mut fields = line.split_whitespace();
        if fields.next()? != "cpu" {
            return None;
        }
        let v: Vec<u64> = fields
            .take(8)
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        let [user, nice, system, idle, iowait, irq, softirq, steal] = v[..] else {
            return None;
        };
        let busy = user + nice + system + irq + softirq + steal;
        Some(Self {
            busy,
            total: busy + idle + iowait,
        })
    }

    /// Fraction of all cores busy between `start` and now.
    fn busy_since(start: Option<Self>) -> Option<f64> {
        let (start, end) = (start?, Self::now()?);
        let total = end.total.checked_sub(start.total)?;
        let busy = end.busy.checked_sub(start.busy)?;
        (total > 0).then(|| busy as f64 / total as f64)
    }
}

/// The timed part of a run: wall time and the machine's CPU use.
struct RunClock {
    started: Instant,
    cpu: Option<CpuClock>,
}

/// What a [`RunClock`] measured.
#[derive(Clone, Copy, Debug)]
struct Timing {
    seconds: f64,
    /// See [`RunResult::cpu_busy`].
    cpu_busy: Option<f64>,
}

impl RunClock {
    fn start() -> Self {
        Self {
            started: Instant::now(),
            cpu: CpuClock::now(),
        }
    }

    fn stop(&self) -> Timing {
        Timing {
            seconds: self.started.elapsed().as_secs_f64(),
            cpu_busy: CpuClock::busy_since(self.cpu),
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Mean and p99 of per-batch latencies in microseconds, as milliseconds.
fn latency_stats(micros: &mut [u64]) -> (f64, f64) {
    if micros.is_empty() {
        return (0.0, 0.0);
    }
    micros.sort_unstable();
    let mean = micros.iter().sum::<u64>() as f64 / micros.len() as f64;
    let idx = ((micros.len() as f64 * 0.99).ceil() as usize).clamp(1, micros.len()) - 1;
    (mean / 1000.0, micros[idx] as f64 / 1000.0)
}

fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

// ------------------------------------------------------------------ SQL

/// A fresh canonical table of `rows` rows. Table names are generated here
/// from fixed prefixes and numbers, never from input, so splicing them
/// into SQL is safe. Autovacuum is off for the table: every
/// run leaves N dead row versions behind, and an autovacuum worker could
/// start on the table in the middle of some runs and not others (the
/// launcher wakes once a minute). Every runner gets the same table; the
/// reset's `VACUUM ANALYZE` still runs.
fn table_sql(table: &str, rows: u64) -> String {
    format!(
        "DROP TABLE IF EXISTS {table}; \
         CREATE TABLE {table} (id bigint PRIMARY KEY, email text NOT NULL, email_norm text, \
             touched int NOT NULL DEFAULT 0) WITH (autovacuum_enabled = off); \
         INSERT INTO {table} (id, email) \
             SELECT g, 'User' || g || '@Example.COM' FROM generate_series(1, {rows}) AS g;"
    )
}

const SETUP_SQL: &str = "\
CREATE TABLE IF NOT EXISTS bench_progress (runner text PRIMARY KEY, checkpoint bigint NOT NULL, \
    batches bigint NOT NULL);
CREATE TABLE IF NOT EXISTS bench_latency (runner text NOT NULL, micros bigint NOT NULL);";

/// The `plpgsql` baseline as procedure `name` over `table` in batches of
/// `batch`, recording its progress and latencies under `runner`. Every
/// instance has the same static statements (PL/pgSQL caches their plans),
/// only the names and the batch size differ: `plpgsql-k` runs K of them at
/// once. Names are bench-generated. The batch size is written into the
/// text, as in every runner's select (see [`ItemsRepair`]).
fn plpgsql_procedure_sql(name: &str, table: &str, runner: &str, batch: u32) -> String {
    format!(
        "CREATE OR REPLACE PROCEDURE {name}()
LANGUAGE plpgsql AS $$
DECLARE
    v_ckpt bigint := 0;
    v_bound bigint;
    v_keys bigint[];
    v_t0 timestamptz;
    v_lat bigint[] := '{{}}';
BEGIN
    SELECT coalesce(max(id), 0) INTO v_bound FROM {table};
    INSERT INTO bench_progress VALUES ('{runner}', 0, 0)
        ON CONFLICT (runner) DO UPDATE SET checkpoint = 0, batches = 0;
    COMMIT;
    LOOP
        v_t0 := clock_timestamp();
        -- The same statements as the client and the engine, minus the
        -- round trips: select at most B keys, update them by id, advance.
        SELECT array_agg(id ORDER BY id) INTO v_keys FROM (
            SELECT id FROM {table} WHERE id > v_ckpt AND id <= v_bound ORDER BY id LIMIT {batch}
        ) AS k;
        EXIT WHEN v_keys IS NULL;
        UPDATE {table} SET email_norm = lower(email), touched = touched + 1 WHERE id = ANY(v_keys);
        v_ckpt := v_keys[array_upper(v_keys, 1)];
        UPDATE bench_progress SET checkpoint = v_ckpt, batches = batches + 1
            WHERE runner = '{runner}';
        COMMIT;
        v_lat := v_lat || (extract(epoch FROM clock_timestamp() - v_t0) * 1000000)::bigint;
    END LOOP;
    DELETE FROM bench_latency WHERE runner = '{runner}';
    INSERT INTO bench_latency SELECT '{runner}', unnest(v_lat);
    COMMIT;
END $$;"
    )
}

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

#[derive(QueryableByName)]
struct MaxId {
    #[diesel(sql_type = Nullable<BigInt>)]
    max: Option<i64>,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct Micros {
    #[diesel(sql_type = BigInt)]
    micros: i64,
}

#[derive(QueryableByName)]
struct TextValue {
    #[diesel(sql_type = Text)]
    v: String,
}

/// `Ok(true)` when every row of `table` is repaired exactly once.
async fn verify(conn: &mut AsyncPgConnection, table: &str) -> Result<bool, BenchError> {
    let bad: Count = diesel::sql_query(format!(
        "SELECT count(*) AS n FROM {table} \
         WHERE email_norm IS DISTINCT FROM lower(email) OR touched <> 1"
    ))
    .get_result(conn)
    .await?;
    Ok(bad.n == 0)
}

// --------------------------------------------------------------- repair

/// The canonical repair of the bench, over one `items`-shaped table.
///
/// Its statements are cached prepared statements (see
/// [`store::cached`]): the text is fixed per table and batch size.
///
/// The batch size is written into the text (`LIMIT 1000`), not bound
/// (`LIMIT $3`), as `Repair::batch_limit` advises. With a bound limit
/// PostgreSQL's generic plan cannot know how many rows the statement
/// reads, and at 1M rows the plan cache kept choosing custom plans, so
/// every batch planned its statement anew: 6% of the engine backend's CPU
/// at B = 100 (2% with the literal, which leaves the fence's planning).
/// The engine always asks for `batch_limit()` keys; a smaller limit (never
/// asked today) falls back to the bound form. Every runner uses the same
/// select text, the PL/pgSQL loop included.
pub struct ItemsRepair {
    id: String,
    table: String,
    batch: u32,
    /// Selects with the literal limit `batch`.
    select: String,
    update: String,
    /// The one-statement form with the literal limit.
    fused: String,
    /// Whether [`Repair::batches`] answers the one-statement form.
    one_statement: bool,
    bound: String,
    validate: String,
    /// Extra time each mutation holds its transaction (takeover owner only,
    /// so the run lasts long enough to be killed mid-way).
    throttle: Duration,
    /// What [`Repair::overlap_commits`] answers.
    overlap: bool,
}

impl ItemsRepair {
    /// A repair of `table` (a bench-generated name) in batches of `batch`,
    /// under a stable ID made per run (EMB-2).
    pub fn new(id: String, table: &str, batch: u32) -> Self {
        Self {
            id,
            table: table.to_string(),
            batch,
            select: Self::select_sql(table, batch),
            update: format!(
                "UPDATE {table} SET email_norm = lower(email), touched = touched + 1 \
                 WHERE id = ANY($1)"
            ),
            fused: Self::fused_sql(table, batch),
            one_statement: true,
            bound: format!("SELECT max(id) AS max FROM {table}"),
            validate: format!(
                "SELECT count(*) AS n FROM {table} \
                 WHERE id <= $1 AND email_norm IS DISTINCT FROM lower(email)"
            ),
            throttle: Duration::ZERO,
            overlap: true,
        }
    }

    /// `sql` (written with this repair's batch size) bound to `after` and
    /// `bound`. For a smaller `limit`, never asked today, the text's
    /// `LIMIT <batch>` becomes `LIMIT $3` bound to it: a second cached
    /// statement, built only if that ever happens.
    fn query(
        &self,
        sql: &str,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> diesel::query_builder::BoxedSqlQuery<
        'static,
        diesel::pg::Pg,
        diesel::query_builder::SqlQuery,
    > {
        let after = after.copied().unwrap_or(i64::MIN);
        if limit == self.batch {
            return diesel::sql_query(sql.to_string())
                .into_boxed()
                .bind::<BigInt, _>(after)
                .bind::<BigInt, _>(*bound);
        }
        let literal = format!("LIMIT {}", self.batch);
        diesel::sql_query(sql.replace(&literal, "LIMIT $3"))
            .into_boxed()
            .bind::<BigInt, _>(after)
            .bind::<BigInt, _>(*bound)
            .bind::<BigInt, _>(i64::from(limit))
    }

    /// The select of every non-PL/pgSQL runner, the client loop's included.
    fn select_sql(table: &str, batch: u32) -> String {
        format!("SELECT id FROM {table} WHERE id > $1 AND id <= $2 ORDER BY id LIMIT {batch}")
    }

    /// The keys stay on the server: the CTE collects them into one array
    /// (`array_agg`, as the PL/pgSQL loop does), the update takes them from
    /// it (an index scan on the primary key whatever the plan cache
    /// decides), and the answer is one row read off the array.
    ///
    /// This shape replaced `WITH k AS MATERIALIZED (SELECT id ..), u AS
    /// (UPDATE .. WHERE id = ANY(ARRAY(SELECT id FROM k))) SELECT min(id),
    /// max(id), count(*) FROM k`, which scans the materialized keys twice
    /// more. Timed inside one PL/pgSQL loop that alternated the two shapes
    /// batch by batch (so the machine's drift falls on both alike), the old
    /// shape took 0.15-0.34 ms more per B=1000 batch than the loop's own
    /// two statements, this one -0.04 to +0.12 ms; at B=100 neither
    /// differed. In the bench (300k rows, B=1000, 7 runs each, alternating)
    /// engine / plpgsql went from a median of 0.86 to 0.93.
    fn fused_sql(table: &str, batch: u32) -> String {
        format!(
            "WITH k AS (SELECT array_agg(id ORDER BY id) AS a FROM (\
                 SELECT id FROM {table} WHERE id > $1 AND id <= $2 ORDER BY id LIMIT {batch}) AS s), \
             u AS (UPDATE {table} SET email_norm = lower(email), touched = touched + 1 \
                 WHERE id = ANY((SELECT a FROM k)::bigint[])) \
             SELECT a[1] AS first, a[cardinality(a)] AS last, \
                 coalesce(cardinality(a), 0)::bigint AS n FROM k"
        )
    }

    /// The same repair in its two-statement form only.
    pub fn two_statement(mut self) -> Self {
        self.one_statement = false;
        self
    }

    /// The same repair, declaring that it does not overlap commits.
    pub fn serial(mut self) -> Self {
        self.overlap = false;
        self
    }

    /// The same update declared as a [`SqlRepair`], which writes its own
    /// statements (the one-statement form, as `fused_sql`).
    pub fn declared(self) -> Result<SqlRepair, BenchError> {
        SqlRepair::new(self.id, self.table)
            .key("id")
            .set("email_norm = lower(email), touched = touched + 1")
            .validate_where("email_norm IS DISTINCT FROM lower(email)")
            .batch_size(self.batch)
            .overlap_commits(self.overlap)
            .build()
            .map_err(|e| BenchError::Run(e.to_string()))
    }
}

#[async_trait]
impl Repair for ItemsRepair {
    type Key = i64;

    fn id(&self) -> &str {
        &self.id
    }

    fn batch_limit(&self) -> u32 {
        self.batch
    }

    /// Each row's repair reads only that row, so a batch never reads what
    /// an earlier one wrote (`serial` says otherwise, for comparison).
    fn overlap_commits(&self) -> bool {
        self.overlap
    }

    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        let row: MaxId = diesel::sql_query(&self.bound).get_result(conn).await?;
        Ok(match row.max {
            None => SourceSet::Empty,
            Some(upper) => SourceSet::Bounded {
                upper,
                rows: Some(upper),
            },
        })
    }

    fn batches(&self) -> Batches<'_, i64> {
        if self.one_statement {
            Batches::OneStatement(self)
        } else {
            Batches::TwoStatements(self)
        }
    }

    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        let bad: Count = diesel::sql_query(&self.validate)
            .bind::<BigInt, _>(bound.copied().unwrap_or(i64::MIN))
            .get_result(conn)
            .await?;
        Ok(if bad.n == 0 {
            Validation::Success
        } else {
            Validation::Failure(format!("{} rows are not normalized", bad.n))
        })
    }
}

#[async_trait]
impl SelectThenMutate<i64> for ItemsRepair {
    async fn select_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Vec<i64>, RepairError> {
        let rows: Vec<Id> = cached(self.query(&self.select, after, bound, limit))
            .load(conn)
            .await?;
        Ok(rows.into_iter().map(|r| r.id).collect())
    }
    async fn mutate(&self, conn: &mut AsyncPgConnection, keys: &[i64]) -> Result<(), RepairError> {
        cached(diesel::sql_query(&self.update).bind::<Array<BigInt>, _>(keys))
            .execute(conn)
            .await?;
        if !self.throttle.is_zero() {
            tokio::time::sleep(self.throttle).await;
        }
        Ok(())
    }
}

#[async_trait]
impl SelectAndMutate<i64> for ItemsRepair {
    async fn select_and_mutate(
        &self,
        conn: &mut &AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Mutated<i64>, RepairError> {
        let row: BigIntSummary = cached(self.query(&self.fused, after, bound, limit))
            .get_result(conn)
            .await?;
        if !self.throttle.is_zero() {
            tokio::time::sleep(self.throttle).await;
        }
        Ok(row.into())
    }
}

// ------------------------------------------------------- timed backend

/// The engine as the runtime's backend, timing each batch and reporting
/// terminal outcomes. Latencies go into a vector sized up front, so the
/// batch path does not allocate as history grows.
struct Timed {
    engine: Engine,
    latencies: parking_lot::Mutex<Vec<u64>>,
    done: tokio::sync::mpsc::UnboundedSender<Result<String, String>>,
    failures: AtomicU64,
}

#[async_trait]
impl Backend for Timed {
    type Claim = backfill::engine::Claim;

    async fn register(&self) -> Result<(), BackendError> {
        Backend::register(&self.engine).await
    }

    async fn claim_next(
        &self,
        worker: &str,
        exclude: &[String],
    ) -> Result<Result<Option<Self::Claim>, String>, BackendError> {
        Backend::claim_next(&self.engine, worker, exclude).await
    }

    async fn step(&self, claim: &mut Self::Claim) -> Result<StepOutcome, BackendError> {
        let t = Instant::now();
        let outcome = Backend::step(&self.engine, claim).await;
        let micros = t.elapsed().as_micros() as u64;
        self.latencies.lock().push(micros);
        match &outcome {
            Ok(StepOutcome::Committed { .. }) => {}
            Ok(StepOutcome::Recorded {
                disposition: Disposition::Retrying,
                ..
            }) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
            }
            Ok(other) => {
                let _ = self.done.send(Err(format!("{}: {other:?}", claim.id)));
            }
            Err(e) => {
                let _ = self.done.send(Err(format!("{}: {}", claim.id, e.0)));
            }
        }
        outcome
    }

    async fn validate(&self, claim: &Self::Claim) -> Result<ValidationOutcome, BackendError> {
        let outcome = Backend::validate(&self.engine, claim).await;
        let _ = self.done.send(match &outcome {
            Ok(ValidationOutcome::Completed) => Ok(claim.id.clone()),
            Ok(other) => Err(format!("{}: {other:?}", claim.id)),
            Err(e) => Err(format!("{}: {}", claim.id, e.0)),
        });
        outcome
    }

    async fn renew(
        &self,
        worker: &str,
        claims: &[(String, i64)],
    ) -> Result<Vec<(String, i64)>, BackendError> {
        Backend::renew(&self.engine, worker, claims).await
    }

    async fn release(&self, claim: &Self::Claim) -> Result<bool, BackendError> {
        Backend::release(&self.engine, claim).await
    }

    fn lease_ttl(&self) -> Duration {
        Backend::lease_ttl(&self.engine)
    }
}

// ------------------------------------------------------------- context

struct Ctx {
    args: BenchArgs,
    url: String,
    pool: Pool,
    run_seq: u64,
}

impl Ctx {
    fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            lease_ttl: Duration::from_millis(self.args.lease_ttl_ms),
            build_info: "backfill bench".into(),
            ..EngineConfig::default()
        }
    }

    fn runtime_config(&self, worker: &str, runners: usize) -> RuntimeConfig {
        RuntimeConfig {
            worker_id: worker.to_string(),
            poll_interval: Duration::from_millis(self.args.poll_interval_ms),
            max_concurrent_runners: runners,
            ..RuntimeConfig::default()
        }
    }

    async fn exec(&self, sql: &str) -> Result<(), BenchError> {
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        conn.batch_execute(sql).await?;
        Ok(())
    }

    /// (Re)create `table` with `rows` fresh rows, vacuumed and analyzed so
    /// every runner starts from the same physical state (hint bits set,
    /// visibility map current). VACUUM cannot share a transaction block.
    async fn reset(&self, table: &str, rows: u64) -> Result<(), BenchError> {
        self.exec(&table_sql(table, rows)).await?;
        self.exec(&format!("VACUUM ANALYZE {table}")).await
    }

    async fn verify(&self, table: &str) -> Result<bool, BenchError> {
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        verify(&mut conn, table).await
    }

    /// Fresh `tables` of `rows_each` rows, then [`Ctx::settle`]: the start
    /// of every run over several tables.
    async fn reset_settled(&self, tables: &[String], rows_each: u64) -> Result<(), BenchError> {
        for table in tables {
            self.reset(table, rows_each).await?;
        }
        self.settle().await;
        Ok(())
    }

    /// Drop the K runners' tables after their run (N rows of disk).
    async fn drop_tables(&self, tables: &[String]) -> Result<(), BenchError> {
        for table in tables {
            self.exec(&format!("DROP TABLE IF EXISTS {table}")).await?;
        }
        Ok(())
    }

    /// Flush dirty pages so a checkpoint does not land inside a run.
    async fn settle(&self) {
        let _ = self.exec("CHECKPOINT").await;
    }

    async fn plpgsql(&mut self, batch: u32, rep: u32) -> Result<RunResult, BenchError> {
        let rows = self.args.rows;
        self.reset("items", rows).await?;
        self.exec(&plpgsql_procedure_sql(
            "bench_plpgsql",
            "items",
            "plpgsql",
            batch,
        ))
        .await?;
        self.settle().await;
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let clock = RunClock::start();
        // CALL must not run inside a transaction block (the procedure
        // commits); the simple protocol runs it as its own statement.
        conn.batch_execute("CALL bench_plpgsql()").await?;
        let timing = clock.stop();
        let lat: Vec<Micros> =
            diesel::sql_query("SELECT micros FROM bench_latency WHERE runner = 'plpgsql'")
                .load(&mut conn)
                .await?;
        drop(conn);
        let mut lat: Vec<u64> = lat.into_iter().map(|m| m.micros.max(0) as u64).collect();
        let verified = self.verify("items").await?;
        Ok(RunResult::new(
            "plpgsql", batch, rows, rep, timing, &mut lat, verified,
        ))
    }

    /// K `plpgsql` loops at once, one connection and one procedure per
    /// table (`bench_plpgsql_k<i>` over `items_k<i>`, created per run):
    /// what the server alone reaches with K writers on this machine.
    async fn plpgsql_k(
        &mut self,
        tables: &[String],
        rows_each: u64,
        batch: u32,
        rep: u32,
    ) -> Result<RunResult, BenchError> {
        for (i, table) in tables.iter().enumerate() {
            self.exec(&plpgsql_procedure_sql(
                &format!("bench_plpgsql_k{}", i + 1),
                table,
                &format!("plpgsql-k{}", i + 1),
                batch,
            ))
            .await?;
        }
        self.reset_settled(tables, rows_each).await?;
        let mut conns = Vec::with_capacity(tables.len());
        for _ in tables {
            conns.push(self.pool.get_owned().await.map_err(StoreError::from)?);
        }
        let clock = RunClock::start();
        // Each CALL is sent on the first poll, so the K loops start
        // together and run on K backends.
        futures_util::future::try_join_all(conns.iter_mut().enumerate().map(|(i, conn)| {
            let sql = format!("CALL bench_plpgsql_k{}()", i + 1);
            async move { conn.batch_execute(&sql).await }
        }))
        .await?;
        let timing = clock.stop();
        let lat: Vec<Micros> =
            diesel::sql_query("SELECT micros FROM bench_latency WHERE runner LIKE 'plpgsql-k%'")
                .load(&mut *conns[0])
                .await?;
        drop(conns);
        let mut lat: Vec<u64> = lat.into_iter().map(|m| m.micros.max(0) as u64).collect();
        let mut verified = true;
        for table in tables {
            verified &= self.verify(table).await?;
        }
        Ok(RunResult::new(
            "plpgsql-k",
            batch,
            rows_each * tables.len() as u64,
            rep,
            timing,
            &mut lat,
            verified,
        ))
    }

    async fn client(&mut self, batch: u32, rep: u32) -> Result<RunResult, BenchError> {
        let rows = self.args.rows;
        self.reset("items", rows).await?;
        self.exec(
            "INSERT INTO bench_progress VALUES ('client', 0, 0) \
             ON CONFLICT (runner) DO UPDATE SET checkpoint = 0, batches = 0",
        )
        .await?;
        self.settle().await;
        // One connection for the whole loop.
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let bound = rows as i64;
        let mut lat = Vec::with_capacity((rows / u64::from(batch)) as usize + 2);
        let mut checkpoint = 0i64;
        // The engine's select text, the batch size in it (see [`ItemsRepair`]).
        let select = ItemsRepair::select_sql("items", batch);
        let clock = RunClock::start();
        loop {
            let b = Instant::now();
            let last = conn
                .transaction::<_, diesel::result::Error, _>(async |conn| {
                    let keys: Vec<Id> = cached(
                        diesel::sql_query(&select)
                            .bind::<BigInt, _>(checkpoint)
                            .bind::<BigInt, _>(bound),
                    )
                    .load(conn)
                    .await?;
                    let keys: Vec<i64> = keys.into_iter().map(|k| k.id).collect();
                    let Some(&last) = keys.last() else {
                        return Ok(None);
                    };
                    cached(
                        diesel::sql_query(
                            "UPDATE items SET email_norm = lower(email), \
                             touched = touched + 1 WHERE id = ANY($1)",
                        )
                        .bind::<Array<BigInt>, _>(&keys),
                    )
                    .execute(conn)
                    .await?;
                    cached(
                        diesel::sql_query(
                            "UPDATE bench_progress SET checkpoint = $1, \
                             batches = batches + 1 WHERE runner = 'client'",
                        )
                        .bind::<BigInt, _>(last),
                    )
                    .execute(conn)
                    .await?;
                    Ok(Some(last))
                })
                .await?;
            let Some(last) = last else { break };
            checkpoint = last;
            lat.push(b.elapsed().as_micros() as u64);
        }
        let timing = clock.stop();
        drop(conn);
        let verified = self.verify("items").await?;
        Ok(RunResult::new(
            "client", batch, rows, rep, timing, &mut lat, verified,
        ))
    }

    /// Run `tables.len()` backfills (one per table, `rows_each` rows each)
    /// through one engine and one runtime until all are `completed`.
    async fn engine_run(
        &mut self,
        runner: &'static str,
        tables: &[String],
        rows_each: u64,
        batch: u32,
        rep: u32,
        shape: Shape,
    ) -> Result<RunResult, BenchError> {
        self.reset_settled(tables, rows_each).await?;
        self.run_seq += 1;
        let mut registry = Registry::new();
        let mut ids = Vec::new();
        for table in tables {
            let id = format!(
                "bench.{table}.b{batch}.r{rep}.{}.{}",
                self.run_seq,
                std::process::id()
            );
            ids.push(id.clone());
            let repair = ItemsRepair::new(id, table, batch);
            match shape {
                Shape::OneStatement => registry.register(repair),
                Shape::TwoStatement => registry.register(repair.two_statement()),
                Shape::Serial => registry.register(repair.serial()),
                Shape::Sql => registry.register(repair.declared()?),
            }
            .map_err(|e| BenchError::Run(e.to_string()))?;
        }
        // Two connections per runner (the repair overlaps commits, see
        // `Repair::overlap_commits`) plus renewer, validator and the bench.
        let pool = store::build_pool(&self.url, 2 * tables.len() as u32 + 3).await?;
        let engine = Engine::new(pool, registry, self.engine_config())?;
        engine.register().await?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let total_rows = rows_each * tables.len() as u64;
        let backend = Arc::new(Timed {
            engine: engine.clone(),
            latencies: parking_lot::Mutex::new(Vec::with_capacity(
                (total_rows / u64::from(batch)) as usize + 16 * tables.len(),
            )),
            done: tx,
            failures: AtomicU64::new(0),
        });
        let clock = RunClock::start();
        for id in &ids {
            engine.start(id).await?;
        }
        let runtime = RuntimeHandle::start(
            backend.clone(),
            self.runtime_config(&format!("bench-{}", std::process::id()), tables.len()),
        )
        .map_err(|e| BenchError::Run(e.to_string()))?;
        let mut completed = 0;
        let mut error = None;
        while completed < ids.len() {
            match rx.recv().await {
                Some(Ok(_)) => completed += 1,
                Some(Err(e)) => {
                    error = Some(e);
                    break;
                }
                None => break,
            }
        }
        let timing = clock.stop();
        runtime.shutdown().await;
        if let Some(e) = error {
            return Err(BenchError::Run(format!("{runner} run failed: {e}")));
        }
        let mut lat = std::mem::take(&mut *backend.latencies.lock());
        let mut verified = AtomicU64::load(&backend.failures, Ordering::Relaxed) == 0;
        for table in tables {
            verified &= self.verify(table).await?;
        }
        Ok(RunResult::new(
            runner, batch, total_rows, rep, timing, &mut lat, verified,
        ))
    }
}

// ------------------------------------------------------------ extras

/// Takeover latency: an owner process holds the claim and is SIGKILLed;
/// a standby runtime in this process takes over once the lease expired.
async fn takeover(ctx: &mut Ctx, batch: u32) -> Result<Value, BenchError> {
    let mut samples = Vec::new();
    for rep in 1..=ctx.args.reps {
        let table = "items_takeover";
        ctx.reset(table, 200_000).await?;
        ctx.run_seq += 1;
        let id = format!(
            "bench.takeover.r{rep}.{}.{}",
            ctx.run_seq,
            std::process::id()
        );
        let registry = Registry::new()
            .with(ItemsRepair::new(id.clone(), table, batch.min(100)))
            .map_err(|e| BenchError::Run(e.to_string()))?;
        let pool = store::build_pool(&ctx.url, 4).await?;
        let engine = Engine::new(pool, registry, ctx.engine_config())?;
        engine.register().await?;
        engine.start(&id).await?;
        let exe = std::env::current_exe().map_err(|e| BenchError::Run(e.to_string()))?;
        let mut child = tokio::process::Command::new(exe)
            .arg("bench")
            .arg("--takeover-owner")
            .arg(&ctx.url)
            .arg("--lease-ttl-ms")
            .arg(ctx.args.lease_ttl_ms.to_string())
            .arg("--poll-interval-ms")
            .arg(ctx.args.poll_interval_ms.to_string())
            .arg("--batch")
            .arg(batch.min(100).to_string())
            .env("BENCH_TAKEOVER_ID", &id)
            .stdout(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| BenchError::Run(format!("cannot start the owner process: {e}")))?;
        let owner = "bench-owner";
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let mut conn = ctx.pool.get().await.map_err(StoreError::from)?;
            let held: Count = diesel::sql_query(
                "SELECT count(*) AS n FROM backfill WHERE id = $1 AND owner = $2 \
                 AND batches_done >= 3",
            )
            .bind::<Text, _>(&id)
            .bind::<Text, _>(owner)
            .get_result(&mut conn)
            .await?;
            if held.n == 1 {
                break;
            }
            if Instant::now() > deadline {
                return Err(BenchError::Run("the owner process never claimed".into()));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The standby is up and polling before the owner dies.
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let backend = Arc::new(Timed {
            engine: engine.clone(),
            latencies: parking_lot::Mutex::new(Vec::with_capacity(4096)),
            done: tx,
            failures: AtomicU64::new(0),
        });
        let taker = format!("bench-taker-{}", std::process::id());
        let runtime = RuntimeHandle::start(backend, ctx.runtime_config(&taker, 1))
            .map_err(|e| BenchError::Run(e.to_string()))?;
        tokio::time::sleep(Duration::from_millis(50)).await;
        // Child::start_kill sends SIGKILL on Unix.
        child
            .start_kill()
            .map_err(|e| BenchError::Run(format!("cannot kill the owner: {e}")))?;
        let killed = Instant::now();
        let _ = child.wait().await;
        let latency = loop {
            let mut conn = ctx.pool.get().await.map_err(StoreError::from)?;
            let row: TextValue = diesel::sql_query(
                "SELECT coalesce(owner, '') || '/' || state AS v FROM backfill WHERE id = $1",
            )
            .bind::<Text, _>(&id)
            .get_result(&mut conn)
            .await?;
            if row.v.starts_with(&taker) || !row.v.ends_with("/running") {
                break killed.elapsed();
            }
            if killed.elapsed() > Duration::from_secs(120) {
                return Err(BenchError::Run("no takeover within 120 s".into()));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        // Let the standby finish, so the run is verified like the others.
        let finished = match rx.recv().await {
            Some(Ok(_)) => true,
            Some(Err(e)) => return Err(BenchError::Run(format!("takeover run failed: {e}"))),
            None => false,
        };
        runtime.shutdown().await;
        let verified = finished && ctx.verify(table).await?;
        samples.push((latency.as_secs_f64() * 1000.0, verified));
    }
    let ms: Vec<f64> = samples.iter().map(|s| s.0).collect();
    let max = ms.iter().cloned().fold(0.0, f64::max);
    let bound_ms = (ctx.args.lease_ttl_ms + ctx.args.poll_interval_ms + 1000) as f64;
    Ok(json!({
        "lease_ttl_ms": ctx.args.lease_ttl_ms,
        "poll_interval_ms": ctx.args.poll_interval_ms,
        "samples_ms": ms.iter().map(|x| x.round()).collect::<Vec<_>>(),
        "median_ms": median(ms.clone()).round(),
        "max_ms": max.round(),
        "target_ms": bound_ms,
        "verified": samples.iter().all(|s| s.1),
    }))
}

/// The owner side of [`takeover`]: claim the backfill and work on it
/// slowly until SIGKILLed.
async fn takeover_owner(args: &BenchArgs, url: &str) -> Result<(), BenchError> {
    let id = std::env::var("BENCH_TAKEOVER_ID")
        .map_err(|_| BenchError::Args("BENCH_TAKEOVER_ID is not set".into()))?;
    let batch = <[u32]>::first(&args.batch).copied().unwrap_or(100);
    let mut repair = ItemsRepair::new(id, "items_takeover", batch);
    repair.throttle = Duration::from_millis(20);
    let registry = Registry::new()
        .with(repair)
        .map_err(|e| BenchError::Run(e.to_string()))?;
    let pool = store::build_pool(url, 4).await?;
    let config = EngineConfig {
        lease_ttl: Duration::from_millis(args.lease_ttl_ms),
        ..EngineConfig::default()
    };
    let engine = Engine::new(pool, registry, config)?;
    let rc = RuntimeConfig {
        worker_id: "bench-owner".into(),
        poll_interval: Duration::from_millis(args.poll_interval_ms),
        ..RuntimeConfig::default()
    };
    let _runtime =
        RuntimeHandle::start(Arc::new(engine), rc).map_err(|e| BenchError::Run(e.to_string()))?;
    // Run until killed; the parent kills us long before this ends.
    tokio::time::sleep(Duration::from_secs(600)).await;
    Ok(())
}

/// Resident set size of this process in kB (`VmRSS`, or `VmHWM` = peak).
fn rss_kb(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Peak RSS of this process (the worker) over one long engine run,
/// sampled every 250 ms.
async fn rss(ctx: &mut Ctx, batch: u32) -> Result<Value, BenchError> {
    let rows = ctx.args.rss_rows;
    let before = rss_kb("VmRSS:").unwrap_or(0);
    let samples = Arc::new(parking_lot::Mutex::new(Vec::with_capacity(4096)));
    let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
    let sampler = {
        let samples = samples.clone();
        actix_rt::spawn(async move {
            let t = Instant::now();
            loop {
                if let Some(kb) = rss_kb("VmRSS:") {
                    samples.lock().push((t.elapsed().as_secs_f64(), kb));
                }
                tokio::select! {
                    _ = &mut stop_rx => break,
                    _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                }
            }
        })
    };
    let run = ctx
        .engine_run(
            "rss",
            &["items_rss".to_string()],
            rows,
            batch,
            1,
            Shape::OneStatement,
        )
        .await;
    let _ = stop_tx.send(());
    let _ = sampler.await;
    ctx.exec("DROP TABLE IF EXISTS items_rss").await?;
    let run = run?;
    let samples = samples.lock().clone();
    let kbs: Vec<u64> = samples.iter().map(|s| s.1).collect();
    let peak = kbs.iter().copied().max().unwrap_or(0);
    // "Flat": the RSS of the last tenth of the run against the first tenth
    // after warm-up.
    let tenth = (kbs.len() / 10).max(1);
    let early = kbs
        .iter()
        .skip(tenth)
        .take(tenth)
        .copied()
        .max()
        .unwrap_or(0);
    let late = kbs.iter().rev().take(tenth).copied().max().unwrap_or(0);
    Ok(json!({
        "rows": rows, "batch": batch, "seconds": round3(run.seconds),
        "rows_per_s": run.rows_per_s().round(), "verified": run.verified,
        "rss_before_mb": round3(before as f64 / 1024.0),
        "rss_peak_mb": round3(peak as f64 / 1024.0),
        "rss_early_mb": round3(early as f64 / 1024.0),
        "rss_late_mb": round3(late as f64 / 1024.0),
        "vm_hwm_mb": round3(rss_kb("VmHWM:").unwrap_or(0) as f64 / 1024.0),
    }))
}

/// Admin API list latency: 10,000 registered backfills, 32 concurrent
/// clients each reading the first page (`limit=100`) through the real HTTP
/// server with a bearer token.
///
/// Each client first sends `WARMUP` requests that are not in the
/// percentiles, and all clients start measuring together (a barrier). The
/// first requests open the clients' HTTP connections, the pool's
/// connections and their prepared statements; with 40 measured requests
/// per client and no warm-up, those 32 cold requests were 2.5% of the
/// samples and so decided the p99. The slowest warm-up request is reported
/// beside the percentiles (`cold_max_ms`), so the cold start stays visible.
async fn admin_list(ctx: &Ctx) -> Result<Value, BenchError> {
    use backfill::admin::{Admin, AdminConfig, AuthConfig};
    const BACKFILLS: usize = 10_000;
    const CLIENTS: usize = 32;
    const WARMUP: usize = 5;
    const REQUESTS: usize = 100;
    let ids: Vec<String> = (0..BACKFILLS)
        .map(|i| format!("bench.admin.{i:05}"))
        .collect();
    let descriptions = vec![String::new(); BACKFILLS];
    {
        let mut conn = ctx.pool.get().await.map_err(StoreError::from)?;
        store::backfill_register(&mut conn, &ids, &descriptions, "backfill bench").await?;
    }
    // Like every throughput run, start from flushed pages: the 10M-row
    // `rss` run before it leaves a checkpoint's worth of writes behind.
    ctx.settle().await;
    let token = "bench-admin-token-0123456789abcdef";
    let auth = AuthConfig::from_sources(Some(token), None, false)
        .map_err(|e| BenchError::Run(e.to_string()))?;
    let pool = store::build_pool(&ctx.url, 8).await?;
    let engine = Engine::new(pool, Registry::new(), ctx.engine_config())?;
    let admin = actix_web::web::Data::new(Admin::new(
        engine,
        AdminConfig {
            auth,
            auto_backfills: false,
            required: Default::default(),
        },
    ));
    let server = actix_web::HttpServer::new(move || {
        let admin = admin.clone();
        actix_web::App::new().configure(move |cfg| backfill::http::admin::configure(cfg, admin))
    })
    .workers(2)
    .disable_signals()
    .bind("127.0.0.1:0")
    .map_err(|e| BenchError::Run(format!("cannot listen: {}", e.kind())))?;
    let addrs = server.addrs();
    let addr = addrs
        .into_iter()
        .next()
        .ok_or_else(|| BenchError::Run("no listen address".into()))?;
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    let url = format!("http://{addr}/admin/backfills?limit=100");
    let barrier = Arc::new(tokio::sync::Barrier::new(CLIENTS + 1));
    let mut tasks = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        let url = url.clone();
        let barrier = barrier.clone();
        tasks.push(actix_rt::spawn(async move {
            let client = awc::Client::default();
            let mut cold = Vec::with_capacity(WARMUP);
            let mut micros = Vec::with_capacity(REQUESTS);
            let mut errors = 0u64;
            for i in 0..WARMUP + REQUESTS {
                if i == WARMUP {
                    barrier.wait().await;
                }
                let t = Instant::now();
                match client
                    .get(&url)
                    .insert_header(("Authorization", format!("Bearer {token}")))
                    .send()
                    .await
                {
                    Ok(mut res) if res.status().is_success() => {
                        let _ = res.body().limit(16 * 1024 * 1024).await;
                        let took = t.elapsed().as_micros() as u64;
                        if i < WARMUP {
                            cold.push(took);
                        } else {
                            micros.push(took);
                        }
                    }
                    _ => errors += 1,
                }
            }
            (cold, micros, errors)
        }));
    }
    barrier.wait().await;
    let started = Instant::now();
    let mut all = Vec::with_capacity(CLIENTS * REQUESTS);
    let mut cold_max = 0u64;
    let mut errors = 0;
    for task in tasks {
        let (cold, micros, e) = task
            .await
            .map_err(|_| BenchError::Run("a client task panicked".into()))?;
        cold_max = cold.into_iter().fold(cold_max, u64::max);
        all.extend(micros);
        errors += e;
    }
    let seconds = started.elapsed().as_secs_f64();
    handle.stop(true).await;
    all.sort_unstable();
    let pct = |p: f64| -> f64 {
        if all.is_empty() {
            return 0.0;
        }
        let i = ((all.len() as f64 - 1.0) * p).round() as usize;
        round3(all[i] as f64 / 1000.0)
    };
    Ok(json!({
        "backfills": BACKFILLS, "clients": CLIENTS, "requests": all.len(), "errors": errors,
        "warmup_per_client": WARMUP, "cold_max_ms": round3(cold_max as f64 / 1000.0),
        "page": 100, "p50_ms": pct(0.50), "p99_ms": pct(0.99),
        "requests_per_s": (all.len() as f64 / seconds.max(1e-9)).round(),
    }))
}

// ------------------------------------------------------------ report

struct Report {
    cores: usize,
    pg_version: String,
    /// The server's `fsync` and `synchronous_commit`.
    durability: String,
    rows: u64,
    reps: u32,
    k: usize,
    runs: Vec<RunResult>,
    takeover: Option<Value>,
    rss: Option<Value>,
    admin_list: Option<Value>,
}

impl Report {
    /// Median of `f` over the runs of `runner` at `batch` that have a value.
    fn median_by(
        &self,
        runner: &str,
        batch: u32,
        f: impl Fn(&RunResult) -> Option<f64>,
    ) -> Option<f64> {
        let xs: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.runner == runner && r.batch == batch)
            .filter_map(f)
            .collect();
        (!xs.is_empty()).then(|| median(xs))
    }

    fn median_rps(&self, runner: &str, batch: u32) -> Option<f64> {
        self.median_by(runner, batch, |r| Some(r.rows_per_s()))
    }

    fn median_phase_rps(&self, runner: &str, batch: u32) -> Option<f64> {
        self.median_by(runner, batch, RunResult::batch_phase_rows_per_s)
    }

    fn batches(&self) -> Vec<u32> {
        let mut b: Vec<u32> = self.runs.iter().map(|r| r.batch).collect();
        b.sort_unstable();
        b.dedup();
        b
    }

    fn ratio(&self, a: Option<f64>, b: Option<f64>) -> Option<f64> {
        match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some((a / b * 1000.0).round() / 1000.0),
            _ => None,
        }
    }

    /// `(engine/plpgsql, engine/client, engine-k/(k*engine),
    /// plpgsql-k/(k*plpgsql), engine-sql/engine)` for `batch`.
    fn ratios(&self, batch: u32) -> [Option<f64>; 5] {
        let e = self.median_rps("engine", batch);
        let p = self.median_rps("plpgsql", batch);
        let k = self.k as f64;
        [
            self.ratio(e, p),
            self.ratio(e, self.median_rps("client", batch)),
            self.ratio(self.median_rps("engine-k", batch), e.map(|e| e * k)),
            self.ratio(self.median_rps("plpgsql-k", batch), p.map(|p| p * k)),
            self.ratio(self.median_rps("engine-sql", batch), e),
        ]
    }

    /// The same ratio within each repetition: `a`'s rows/s over `scale`
    /// times `b`'s. A repetition runs every runner once, back to back, so
    /// each pair saw the same minutes of the machine; the spread of these
    /// is the noise the medians hide. `(min, max)` over the repetitions
    /// that have both runs.
    fn rep_range(&self, a: &str, b: &str, scale: f64, batch: u32) -> Option<(f64, f64)> {
        let run = |runner: &str, rep: u32| {
            self.runs
                .iter()
                .find(|r| r.runner == runner && r.batch == batch && r.rep == rep)
        };
        let xs: Vec<f64> = (1..=self.reps)
            .filter_map(|rep| {
                let (x, y) = (run(a, rep)?, run(b, rep)?);
                let d = y.rows_per_s() * scale;
                (d > 0.0).then(|| x.rows_per_s() / d)
            })
            .collect();
        let min = xs.iter().copied().reduce(f64::min)?;
        let max = xs.iter().copied().reduce(f64::max)?;
        Some((round3(min), round3(max)))
    }

    /// [`Report::ratios`]' per-repetition ranges, in the same order.
    fn ranges(&self, batch: u32) -> [Option<(f64, f64)>; 5] {
        let k = self.k as f64;
        [
            self.rep_range("engine", "plpgsql", 1.0, batch),
            self.rep_range("engine", "client", 1.0, batch),
            self.rep_range("engine-k", "engine", k, batch),
            self.rep_range("plpgsql-k", "plpgsql", k, batch),
            self.rep_range("engine-sql", "engine", 1.0, batch),
        ]
    }

    fn verified(&self) -> bool {
        self.runs.iter().all(|r| r.verified)
            && [&self.takeover, &self.rss]
                .into_iter()
                .flatten()
                .all(|v| v["verified"] != Value::Bool(false))
    }

    fn json(&self) -> Value {
        let mut ratios = json!({
            "engine_vs_plpgsql": {}, "engine_vs_client": {}, "engine_k_vs_k_engine": {},
            "plpgsql_k_vs_k_plpgsql": {}, "engine_sql_vs_engine": {},
        });
        let mut ranges = ratios.clone();
        let keys = [
            "engine_vs_plpgsql",
            "engine_vs_client",
            "engine_k_vs_k_engine",
            "plpgsql_k_vs_k_plpgsql",
            "engine_sql_vs_engine",
        ];
        for b in self.batches() {
            for ((key, v), range) in keys.iter().zip(self.ratios(b)).zip(self.ranges(b)) {
                ratios[key][b.to_string()] = json!(v);
                ranges[key][b.to_string()] = json!(range.map(|(lo, hi)| [lo, hi]));
            }
        }
        json!({
            "cores": self.cores,
            "postgres_version": self.pg_version,
            "postgres_durability": self.durability,
            "rows": self.rows,
            "reps": self.reps,
            "k": self.k,
            "verified": self.verified(),
            "ratios": ratios,
            "ratio_ranges_within_reps": ranges,
            "runs": self.runs.iter().map(RunResult::json).collect::<Vec<_>>(),
            "takeover": self.takeover,
            "rss": self.rss,
            "admin_list": self.admin_list,
            "admin_list_latency": Value::Null,
        })
    }

    fn markdown(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "Machine: {} cores; {} ({}).\n\nN = {} rows, {} repetitions (medians), K = {} for engine-k and plpgsql-k (N split over K tables).\n\n",
            self.cores, self.pg_version, self.durability, self.rows, self.reps, self.k
        ));
        if !self.runs.is_empty() {
            s.push_str(
                "| B | runner | rows/s | batch mean ms | batch p99 ms | vs plpgsql | vs client | rows/s in batches | CPU busy |\n",
            );
            s.push_str("|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
        }
        for b in self.batches() {
            let p = self.median_rps("plpgsql", b);
            let c = self.median_rps("client", b);
            for runner in [
                "plpgsql",
                "client",
                "engine",
                "engine-sql",
                "engine-keys",
                "engine-serial",
                "engine-k",
                "plpgsql-k",
            ] {
                let Some(rps) = self.median_rps(runner, b) else {
                    continue;
                };
                let fmt = |x: Option<f64>| x.map(|x| format!("{x:.2}")).unwrap_or("-".into());
                let in_batches = self.median_phase_rps(runner, b);
                s.push_str(&format!(
                    "| {b} | {runner} | {:.0} | {:.3} | {:.3} | {} | {} | {} | {} |\n",
                    rps,
                    self.median_by(runner, b, |r| Some(r.batch_mean_ms))
                        .unwrap_or(0.0),
                    self.median_by(runner, b, |r| Some(r.batch_p99_ms))
                        .unwrap_or(0.0),
                    fmt(self.ratio(Some(rps), p)),
                    fmt(self.ratio(Some(rps), c)),
                    in_batches.map(|x| format!("{x:.0}")).unwrap_or("-".into()),
                    self.median_by(runner, b, |r| r.cpu_busy)
                        .map(|x| format!("{:.0}%", x * 100.0))
                        .unwrap_or("-".into()),
                ));
            }
        }
        let bs = self.batches();
        if !bs.is_empty() {
            s.push_str("\nRatios of the medians; in parentheses, the lowest and highest of the same ratio within one repetition (runs of a repetition are back to back).\n\n| B | engine / plpgsql | engine / client | engine xK / (K x engine) | plpgsql xK / (K x plpgsql) | engine / plpgsql in batches | engine-sql / engine |\n|---:|---:|---:|---:|---:|---:|---:|\n");
            for b in bs {
                let f = |x: Option<f64>| x.map(|x| format!("{x:.2}")).unwrap_or("-".into());
                let with_range = |x: Option<f64>, r: Option<(f64, f64)>| match (x, r) {
                    (Some(x), Some((lo, hi))) if self.reps > 1 => {
                        format!("{x:.2} ({lo:.2}-{hi:.2})")
                    }
                    _ => f(x),
                };
                let [a, c, k, pk, sql] = self.ratios(b);
                let [ra, rc, rk, rpk, rsql] = self.ranges(b);
                let phase = self.ratio(
                    self.median_phase_rps("engine", b),
                    self.median_phase_rps("plpgsql", b),
                );
                s.push_str(&format!(
                    "| {b} | {} | {} | {} | {} | {} | {} |\n",
                    with_range(a, ra),
                    with_range(c, rc),
                    with_range(k, rk),
                    with_range(pk, rpk),
                    f(phase),
                    with_range(sql, rsql)
                ));
            }
        }
        if let Some(t) = &self.takeover {
            s.push_str(&format!(
                "\nTakeover after SIGKILL of the owner: median {:.0} ms, max {:.0} ms over {} runs (lease TTL {} ms, poll interval {} ms; target <= {:.0} ms).\n",
                t["median_ms"].as_f64().unwrap_or(f64::NAN),
                t["max_ms"].as_f64().unwrap_or(f64::NAN),
                t["samples_ms"].as_array().map_or(0, |a| a.len()),
                t["lease_ttl_ms"],
                t["poll_interval_ms"],
                t["target_ms"].as_f64().unwrap_or(f64::NAN)
            ));
        }
        if let Some(r) = &self.rss {
            s.push_str(&format!(
                "\nWorker RSS over a {}-row engine run (B = {}, {:.0} rows/s): before {} MB, peak {} MB, early {} MB, late {} MB.\n",
                r["rows"], r["batch"], r["rows_per_s"].as_f64().unwrap_or(f64::NAN),
                r["rss_before_mb"], r["rss_peak_mb"],
                r["rss_early_mb"], r["rss_late_mb"]
            ));
        }
        if let Some(a) = &self.admin_list {
            s.push_str(&format!(
                "\nAdmin API list (`GET /admin/backfills?limit=100`) with {} registered backfills, {} concurrent clients, {} requests after {} unmeasured warm-up requests per client ({} errors): p50 {} ms, p99 {} ms (target p99 < 50 ms); slowest warm-up request {} ms.\n",
                a["backfills"], a["clients"], a["requests"], a["warmup_per_client"], a["errors"], a["p50_ms"], a["p99_ms"], a["cold_max_ms"]
            ));
        }
        s.push_str(&format!(
            "\nVerification (email_norm = lower(email) and touched = 1 on every row after every run): {}.\n",
            if self.verified() { "passed" } else { "FAILED (invalid runs)" }
        ));
        s
    }
}

/// How to read the report (the head of benches/README.md).
const METHOD: &str = "\
Every runner does the same statements per batch: select at most B keys after \
the checkpoint, update them by id (`email_norm = lower(email)`, \
`touched = touched + 1`), advance the checkpoint, commit.\n\n\
- `plpgsql`: a PL/pgSQL procedure looping the batches with COMMIT per batch: \
the server-side limit, no client round trips.\n\
- `client`: a minimal Rust loop on one connection: BEGIN, select, update, \
checkpoint, COMMIT (5 round trips, cached prepared statements), no claims or fencing.\n\
- `engine`: the product path end to end: `start` (bound capture), the actor \
runtime claiming, renewing and running fenced batches, then the validation \
scan and `completed`. The repair has its one-statement form \
(`SelectAndMutate::select_and_mutate`: `WITH k AS (SELECT array_agg(id ORDER BY id) AS a \
FROM (SELECT id .. LIMIT B) AS s), u AS (UPDATE .. WHERE id = ANY((SELECT a FROM k)::bigint[])) \
SELECT a[1], a[cardinality(a)], cardinality(a) FROM k`), so a batch is ONE round trip: the fenced \
checkpoint advance + COMMIT, the next batch's BEGIN + SET LOCAL timeouts, \
and the next batch's statement, pipelined (the claim keeps that open \
transaction, so no pool checkout either). The repair overlaps commits \
(`Repair::overlap_commits`): the claim holds a second connection, and each \
batch's statement runs there while the previous batch's fence and COMMIT run \
on the first, so the commit's WAL flush is off the critical path.\n\
- `engine-sql`: `engine` with the repair declared as a `SqlRepair` \
(`SqlRepair::new(id, \"items\").key(\"id\").set(..).validate_where(..)`), which writes \
the same one-statement batch; `engine-sql / engine` is the cost of declaring instead of \
hand-writing.\n\
- `engine-keys`: the same engine with the repair's two-statement form \
(select the keys, then update them by id): 3 round trips per batch \
(select, update, fence + COMMIT + next BEGIN), overlapping commits too.\n\
- `engine-serial`: `engine` with a repair that does not overlap commits: \
each batch's statement runs behind the previous batch's COMMIT on the same \
connection.\n\
- `engine-k`: K backfills over K disjoint tables of N/K rows at once, one \
process, one-statement form.\n\
- `plpgsql-k`: K `plpgsql` loops over the same K tables at once, one \
connection each: how far the server itself scales with K writers on this \
machine. Read `engine xK / (K x engine)` against \
`plpgsql xK / (K x plpgsql)`.\n\n\
rows/s = rows / wall time of the whole run (for the engine including start, \
claim and validation). rows/s in batches = rows / the sum of the batch \
latencies: the batch path alone (not shown for the K runners, whose batches overlap). Batch latency: client and engine from BEGIN to COMMIT \
returned (engine: the whole `step`, from the select to the commit message's \
reply); plpgsql by the server's clock \
per loop iteration. CPU busy = the share of all the machine's cores that \
were busy over the timed part of the run (`/proc/stat`: PostgreSQL, this \
process and anything else); near 100% the run is bound by the machine's \
CPUs, and K runs at once cannot scale past what is left. After every run \
every row must have `email_norm = lower(email)` and `touched = 1`.\n";

// ------------------------------------------------------------- entry

/// Run the bench as `args` says; returns the process exit code (0, or 2
/// when a run failed verification). Must run inside an actix system.
pub async fn run(args: BenchArgs) -> Result<i32, BenchError> {
    if args.rows == 0 || args.reps == 0 || args.batch.is_empty() || args.batch.contains(&0) {
        return Err(BenchError::Args(
            "--rows, --reps and every --batch must be positive".into(),
        ));
    }
    if args.k == Some(0) {
        return Err(BenchError::Args("--k must be positive".into()));
    }
    if let Some(url) = &args.takeover_owner {
        takeover_owner(&args, url).await?;
        return Ok(0);
    }
    // A throwaway cluster when no server was given; stopped on drop.
    let (server, _cluster) = match &args.database_url {
        Some(url) => (url.clone(), None),
        None => {
            let cluster = tokio::task::spawn_blocking(|| {
                backfill::ephemeral::EphemeralPostgres::start("bench")
            })
            .await
            .map_err(|_| BenchError::Run("starting PostgreSQL panicked".into()))?
            .map_err(|e| BenchError::Run(e.to_string()))?;
            (cluster.url(), Some(cluster))
        }
    };
    let url = store::database_recreate(&server, &args.database).await?;
    store::run_migrations(&url).await?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let k = args.k.unwrap_or(cores);
    // `plpgsql-k` holds K connections at once; one more verifies.
    let pool = store::build_pool(&url, (k as u32).saturating_add(2).max(4)).await?;
    let mut ctx = Ctx {
        args: args.clone(),
        url,
        pool,
        run_seq: 0,
    };
    ctx.exec(SETUP_SQL).await?;
    let pg_version = {
        let mut conn = ctx.pool.get().await.map_err(StoreError::from)?;
        let v: TextValue = diesel::sql_query("SELECT version() AS v")
            .get_result(&mut conn)
            .await?;
        v.v.split(" on ").next().unwrap_or(&v.v).to_string()
    };
    // Commit cost depends on these more than on anything the engine does;
    // the throwaway cluster runs with both off.
    let durability = {
        let mut conn = ctx.pool.get().await.map_err(StoreError::from)?;
        let v: TextValue = diesel::sql_query(
            "SELECT 'fsync=' || current_setting('fsync') || ', synchronous_commit=' \
                 || current_setting('synchronous_commit') AS v",
        )
        .get_result(&mut conn)
        .await?;
        v.v
    };
    let mut only = args.only.clone();
    only.sort();
    only.dedup();
    let mut report = Report {
        cores,
        pg_version,
        durability,
        rows: args.rows,
        reps: args.reps,
        k,
        runs: Vec::new(),
        takeover: None,
        rss: None,
        admin_list: None,
    };
    let result = async {
        for &batch in &args.batch {
            for rep in 1..=args.reps {
                // Even repetitions run the runners in reverse order, so a
                // machine that speeds up or slows down over a repetition
                // does not favour the same runner every time.
                let order: Vec<Runner> = if rep % 2 == 0 {
                    only.iter().rev().copied().collect()
                } else {
                    only.clone()
                };
                for &runner in &order {
                    let run = match runner {
                        Runner::Plpgsql => ctx.plpgsql(batch, rep).await?,
                        Runner::Client => ctx.client(batch, rep).await?,
                        Runner::Engine => {
                            let table = ["items".into()];
                            ctx.engine_run("engine", &table, args.rows, batch, rep, Shape::OneStatement)
                                .await?
                        }
                        Runner::EngineSql => {
                            let table = ["items".into()];
                            ctx.engine_run("engine-sql", &table, args.rows, batch, rep, Shape::Sql)
                                .await?
                        }
                        Runner::EngineKeys => {
                            let table = ["items".into()];
                            ctx.engine_run("engine-keys", &table, args.rows, batch, rep, Shape::TwoStatement)
                                .await?
                        }
                        Runner::EngineSerial => {
                            let table = ["items".into()];
                            ctx.engine_run("engine-serial", &table, args.rows, batch, rep, Shape::Serial)
                                .await?
                        }
                        Runner::EngineK => {
                            let tables = k_tables(k);
                            let each = (args.rows / k as u64).max(1);
                            let r = ctx
                                .engine_run("engine-k", &tables, each, batch, rep, Shape::OneStatement)
                                .await?;
                            ctx.drop_tables(&tables).await?;
                            r
                        }
                        Runner::PlpgsqlK => {
                            let tables = k_tables(k);
                            let each = (args.rows / k as u64).max(1);
                            let r = ctx.plpgsql_k(&tables, each, batch, rep).await?;
                            ctx.drop_tables(&tables).await?;
                            r
                        }
                        Runner::Takeover | Runner::Rss | Runner::AdminList => continue,
                    };
                    if !args.json {
                        eprintln!(
                            "{} B={} rep {}: {:.0} rows/s, batch mean {:.3} ms, p99 {:.3} ms, verified {}",
                            run.runner, run.batch, run.rep, run.rows_per_s(),
                            run.batch_mean_ms, run.batch_p99_ms, run.verified
                        );
                    }
                    report.runs.push(run);
                }
            }
        }
        let first = args.batch[0];
        if only.contains(&Runner::Takeover) {
            report.takeover = Some(takeover(&mut ctx, first).await?);
        }
        if only.contains(&Runner::Rss) {
            report.rss = Some(rss(&mut ctx, first).await?);
        }
        if only.contains(&Runner::AdminList) {
            report.admin_list = Some(admin_list(&ctx).await?);
        }
        Ok::<(), BenchError>(())
    }
    .await;
    let pool = ctx.pool.clone();
    drop(ctx);
    drop(pool);
    if !args.keep {
        // Big tables: give the disk back. A new empty database of the same
        // name is cheaper to leave than to reason about; drop it outright.
        let _ = drop_database(&server, &args.database).await;
    }
    result?;
    if args.json {
        println!("{}", report.json());
    } else {
        println!("{}", report.markdown());
    }
    if let Some(path) = &args.markdown {
        // The invocation as given, so the file says how to regenerate it.
        let command: Vec<String> = std::env::args().skip(1).collect();
        let text = format!(
            "# Throughput benchmark\n\nGenerated by `backfill {}` (release build). \
             Numbers are noisy on a shared 2-core machine; the ratios are what count.\n\n{METHOD}\n{}",
            command.join(" "),
            report.markdown()
        );
        std::fs::write(path, text)
            .map_err(|e| BenchError::Run(format!("cannot write {}: {e}", path.display())))?;
    }
    Ok(if report.verified() { 0 } else { 2 })
}

/// The K tables of `engine-k` and `plpgsql-k`.
fn k_tables(k: usize) -> Vec<String> {
    (1..=k).map(|i| format!("items_k{i}")).collect()
}

async fn drop_database(server: &str, name: &str) -> Result<(), BenchError> {
    let mut conn = AsyncPgConnection::establish(server)
        .await
        .map_err(|_| BenchError::Run("cannot connect to drop the bench database".into()))?;
    conn.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_clock_reads_the_machine_line_of_proc_stat() {
        let stat = "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\n";
        assert_eq!(
            CpuClock::parse(stat),
            Some(CpuClock {
                busy: 100 + 5 + 50 + 3 + 2 + 10,
                total: 170 + 800 + 20,
            })
        );
        assert_eq!(CpuClock::parse("cpu0 1 2 3 4 5 6 7 8\n"), None);
        assert_eq!(CpuClock::parse("cpu  1 2 3\n"), None);
        assert_eq!(CpuClock::parse(""), None);
    }

    /// The repair's statements carry the batch size as a literal; a smaller
    /// limit gets the bound form with the limit as its third parameter.
    #[test]
    fn items_repair_writes_its_batch_size_into_the_text() {
        let repair = ItemsRepair::new("bench.t".into(), "items", 100);
        let text = |limit| {
            let q = repair.query(&repair.select, Some(&7), &9, limit);
            diesel::debug_query::<diesel::pg::Pg, _>(&q).to_string()
        };
        let literal = text(100);
        assert!(literal.contains("LIMIT 100"), "{literal}");
        assert!(literal.contains("binds: [7, 9]"), "{literal}");
        let bound = text(40);
        assert!(bound.contains("LIMIT $3"), "{bound}");
        assert!(bound.contains("binds: [7, 9, 40]"), "{bound}");
    }

    #[test]
    fn stats() {
        let mut xs: Vec<u64> = (1..=100).map(|x| x * 1000).collect();
        let (mean, p99) = latency_stats(&mut xs);
        assert!((mean - 50.5).abs() < 1e-9);
        assert!((p99 - 99.0).abs() < 1e-9);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    /// Ratios pair runs of the same repetition; the medians of the ratio
    /// table and the per-repetition range come from the same runs.
    #[test]
    fn ratio_ranges_pair_runs_of_one_repetition() {
        // rows / seconds = rows/s: engine 100 then 80, plpgsql 200 then 100.
        let run = |runner, rep, seconds| {
            let timing = Timing {
                seconds,
                cpu_busy: None,
            };
            RunResult::new(runner, 100, 1000, rep, timing, &mut [], true)
        };
        let report = Report {
            cores: 2,
            pg_version: String::new(),
            durability: String::new(),
            rows: 1000,
            reps: 2,
            k: 2,
            runs: vec![
                run("engine", 1, 10.0),
                run("plpgsql", 1, 5.0),
                run("engine", 2, 12.5),
                run("plpgsql", 2, 10.0),
                run("engine-k", 1, 10.0),
            ],
            takeover: None,
            rss: None,
            admin_list: None,
        };
        assert_eq!(
            report.rep_range("engine", "plpgsql", 1.0, 100),
            Some((0.5, 0.8))
        );
        // Medians: engine 90, plpgsql 150.
        assert_eq!(report.ratios(100)[0], Some(0.6));
        // Only repetition 1 has both: 100 / (2 x 100).
        assert_eq!(
            report.rep_range("engine-k", "engine", 2.0, 100),
            Some((0.5, 0.5))
        );
        assert_eq!(report.rep_range("client", "engine", 1.0, 100), None);
        assert!(report.markdown().contains("| 100 | 0.60 (0.50-0.80) |"));
    }
}
