//! The `fleet` run (FLT-1): the same N rows over D databases served by one
//! fleet, for each D of `--fleet-databases`, and what an idle database
//! costs afterwards.
//!
//! Each database gets the canonical table with N / D rows and the
//! declarative repair of `engine-sql`; the fleet runs one runner per
//! database in automatic mode. The time counts from the fleet's start to
//! the last database's completion (creating and seeding the databases is
//! not counted). Then, once every database has been idle for a few
//! seconds, the bench reads each database's connections
//! (`pg_stat_activity`) and transactions (`pg_stat_database`, committed
//! and rolled back) over a few seconds: the fixed cost of a database that
//! has nothing to do, with the pools' idle timeout at 2 s so the
//! connections have settled by the end of the window. A D whose
//! connections would not fit the server's `max_connections` is skipped
//! and reported as such.

use super::args::BenchError;
use super::context::Ctx;
use super::sql::{table_sql, verify};
use backfill::__private::store;
use backfill::host::{Application, Database, Fleet, FleetConfig, HostConfig};
use backfill::repair::{DefinitionError, Registry};
use backfill::{SqlRepair, State};
use diesel::sql_types::BigInt;
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// The repair every database of the fleet runs.
const ID: &str = "items.fleet";
/// How long the idle cost is watched: three fleet refreshes and more
/// than one presence round at the product's defaults.
const IDLE_WINDOW: Duration = Duration::from_secs(15);
/// How long after the last completion the watch starts: the last
/// batches' wind-down (validation, the health monitor's rest, the pools'
/// idle timeout) is over by then, so the window sees an idle database.
const IDLE_SETTLE: Duration = Duration::from_secs(3);
/// The member pools' idle timeout in this run (`pool_idle_timeout`).
const IDLE_POOL_TIMEOUT: Duration = Duration::from_secs(2);

/// The fleet's application: the canonical repair.
struct Items {
    batch: u32,
}

#[backfill::async_trait]
impl Application for Items {
    fn registry(&self) -> Result<Registry, DefinitionError> {
        Registry::new().with(
            SqlRepair::new(ID, "items")
                .key("id")
                .set("email_norm = lower(email), touched = touched + 1")
                .validate_where("email_norm IS DISTINCT FROM lower(email)")
                .batch_size(self.batch)
                .overlap_commits(true)
                .build()?,
        )
    }
}

#[derive(QueryableByName)]
struct N {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn scalar(conn: &mut AsyncPgConnection, sql: &str) -> Result<i64, BenchError> {
    let row: N = diesel::sql_query(sql).get_result(conn).await?;
    Ok(row.n)
}

/// The name of the fleet's database `i` of `d` (bench-generated).
fn name(ctx: &Ctx, d: usize, i: usize) -> String {
    format!("{}_f{d}_{i}", ctx.args.database)
}

/// Every D of `--fleet-databases`: its rows/s and its idle cost.
pub(super) async fn fleet(ctx: &Ctx, batch: u32) -> Result<Value, BenchError> {
    let mut admin = store::connect_dedicated(&ctx.url).await?;
    let max_connections = scalar(
        &mut admin,
        "SELECT current_setting('max_connections')::bigint AS n",
    )
    .await?;
    let mut runs = Vec::new();
    for &d in &ctx.args.fleet_databases {
        let d = d.max(1);
        let app = Items { batch };
        let mut host = HostConfig::new(String::new());
        host.migrate = true;
        host.auto_backfills = true;
        host.engine = ctx.engine_config();
        host.runtime = ctx.runtime_config("bench-fleet", 1);
        let registry = app.registry().map_err(|e| BenchError::Run(e.to_string()))?;
        let pool = host.pool_needed(&registry);
        host.pool_size = Some(pool);
        // Short enough that the idle window shows where an idle pool
        // settles; the default (60 s) gets there after a minute.
        host.pool_idle_timeout = IDLE_POOL_TIMEOUT;
        // The same for the wake-up listener, which a fleet's database
        // closes once it holds no claim (30 s by default).
        host.idle_listener_close = Some(IDLE_POOL_TIMEOUT);
        // Each database: its pool and its wake-up listener; ten more for
        // the bench's own sessions and the server's reserve.
        let needed = d as i64 * (i64::from(pool) + 1) + 10;
        if needed > max_connections {
            runs.push(json!({
                "databases": d,
                "skipped": format!(
                    "needs about {needed} connections, the server allows {max_connections}"
                ),
            }));
            continue;
        }
        runs.push(one(ctx, &mut admin, d, host, app).await?);
    }
    Ok(json!({ "rows": ctx.args.rows, "batch": batch, "runs": runs }))
}

/// One fleet of `d` databases: create and seed them, run, watch idle,
/// drop them.
async fn one(
    ctx: &Ctx,
    admin: &mut AsyncPgConnection,
    d: usize,
    host: HostConfig,
    app: Items,
) -> Result<Value, BenchError> {
    let each = (ctx.args.rows / d as u64).max(1);
    let mut databases = Vec::new();
    for i in 0..d {
        let url = store::database_recreate(&ctx.url, &name(ctx, d, i)).await?;
        let mut conn = store::connect_dedicated(&url).await?;
        conn.batch_execute(&table_sql("items", each)).await?;
        conn.batch_execute("VACUUM ANALYZE items").await?;
        databases.push(Database::new(format!("f{i}"), url));
    }
    // The fleet's own refresh (its probe of every database) at its
    // default, as an idle database pays it.
    let config = FleetConfig::new(host);
    let started = Instant::now();
    let fleet = Fleet::start(config, databases.clone(), app)
        .await
        .map_err(|e| BenchError::Run(e.to_string()))?;
    for db in &databases {
        let engine = fleet
            .engine(&db.name)
            .map_err(|e| BenchError::Run(e.to_string()))?
            .ok_or_else(|| BenchError::Run(format!("database {} did not start", db.name)))?;
        let row = engine
            .wait_for(
                ID,
                &[State::Completed, State::Failed, State::Blocked],
                Duration::from_secs(3600),
            )
            .await
            .map_err(|e| BenchError::Run(e.to_string()))?;
        if row.state != State::Completed {
            return Err(BenchError::Run(format!("{}: {}", db.name, row.state)));
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let mut verified = true;
    for db in &databases {
        let mut conn = store::connect_dedicated(&db.url).await?;
        verified &= verify(&mut conn, "items").await?;
    }
    let names: Vec<String> = (0..d).map(|i| name(ctx, d, i)).collect();
    let list = names
        .iter()
        .map(|n| format!("'{n}'"))
        .collect::<Vec<_>>()
        .join(",");
    let xacts = format!(
        "SELECT coalesce(sum(xact_commit + xact_rollback), 0)::bigint AS n \
         FROM pg_stat_database WHERE datname IN ({list})"
    );
    // The statements the fleet's sessions ran, where pg_stat_statements
    // is loaded (the bench's own cluster): unlike the transactions, they
    // leave out the server's own work in those databases (autovacuum
    // after the run's updates).
    let statements = format!(
        "SELECT coalesce(sum(s.calls), 0)::bigint AS n FROM pg_stat_statements s \
         JOIN pg_database d ON d.oid = s.dbid WHERE d.datname IN ({list})"
    );
    tokio::time::sleep(IDLE_SETTLE).await;
    // Statistics reach pg_stat_database when a backend reports them;
    // clearing the snapshot makes each read current.
    admin
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await?;
    let xacts_at_start = scalar(admin, &xacts).await?;
    let statements_at_start = scalar(admin, &statements).await.ok();
    tokio::time::sleep(IDLE_WINDOW).await;
    admin
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await?;
    let xacts_at_end = scalar(admin, &xacts).await?;
    let statements_at_end = scalar(admin, &statements).await.ok();
    let connections = scalar(
        admin,
        &format!("SELECT count(*)::bigint AS n FROM pg_stat_activity WHERE datname IN ({list})"),
    )
    .await?;
    fleet.stop().await;
    for n in &names {
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {n} WITH (FORCE)"))
            .await?;
    }
    let poll = ctx.args.poll_interval_ms as f64 / 1000.0;
    // Per database and second over the window, and per poll interval.
    let per_s = |n: i64| n as f64 / d as f64 / IDLE_WINDOW.as_secs_f64();
    let hundredths = |x: f64| (x * 100.0).round() / 100.0;
    let xacts_per_s = per_s(xacts_at_end - xacts_at_start);
    let statements_per_poll = match (statements_at_start, statements_at_end) {
        (Some(start), Some(end)) => json!(hundredths(per_s(end - start) * poll)),
        _ => Value::Null,
    };
    Ok(json!({
        "databases": d,
        "rows_each": each,
        "seconds": (seconds * 1000.0).round() / 1000.0,
        "rows_per_s": ((each * d as u64) as f64 / seconds).round(),
        "verified": verified,
        "idle_connections_per_db": hundredths(connections as f64 / d as f64),
        "idle_xacts_per_db_per_s": hundredths(xacts_per_s),
        "idle_xacts_per_db_per_poll": hundredths(xacts_per_s * poll),
        "idle_statements_per_db_per_poll": statements_per_poll,
    }))
}

/// The Markdown lines of the fleet run.
pub(super) fn markdown(f: &Value) -> String {
    let mut s = format!(
        "\nFleet (FLT-1): {} rows over D databases, one runner per database, B = {}; then, {} s after the last completion, each database idle for {} s:\n\n\
         | D | rows/s | seconds | verified | idle connections per database | idle transactions per database per poll | idle statements per database per poll |\n|---|---|---|---|---|---|---|\n",
        f["rows"], f["batch"], IDLE_SETTLE.as_secs(), IDLE_WINDOW.as_secs()
    );
    for r in f["runs"].as_array().cloned().unwrap_or_default() {
        if let Some(skipped) = r["skipped"].as_str() {
            s.push_str(&format!(
                "| {} | skipped: {skipped} | | | | | |\n",
                r["databases"]
            ));
        } else {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                r["databases"],
                r["rows_per_s"],
                r["seconds"],
                r["verified"],
                r["idle_connections_per_db"],
                r["idle_xacts_per_db_per_poll"],
                r["idle_statements_per_db_per_poll"]
            ));
        }
    }
    s
}
