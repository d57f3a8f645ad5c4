//! `backfill bench` from flags to report: the database, the runs in their
//! order, the extras, and the report on stdout and in Markdown.

use super::args::{BenchArgs, BenchError, Runner, Shape};
use super::context::Ctx;
use super::extras::{admin_list, rss, takeover, takeover_owner};
use super::partitioned::partition_worker;
use super::report::{Report, METHOD};
use super::sql::{TextValue, SETUP_SQL};
use super::stats::RunResult;
use backfill::__private::store::{self, StoreError};
use backfill::repair::MAX_PARTITIONS;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use std::path::Path;

/// Run the bench as `args` says; returns the process exit code (0, or 2
/// when a run failed verification). Must run inside an actix system.
pub async fn run(args: BenchArgs) -> Result<i32, BenchError> {
    check(&args)?;
    if let Some(url) = &args.takeover_owner {
        takeover_owner(&args, url).await?;
        return Ok(0);
    }
    if let Some(url) = &args.partition_worker {
        partition_worker(&args, url).await?;
        return Ok(0);
    }
    // A throwaway cluster when no server was given; stopped on drop.
    let (server, _cluster) = match &args.database_url {
        Some(url) => (url.clone(), None),
        None => {
            // With pg_stat_statements loaded, the runs' cost counts the
            // statements the clients send; the connections let the
            // `fleet` run serve 64 databases, each with its own pool.
            let cluster = tokio::task::spawn_blocking(|| {
                backfill_ephemeral::EphemeralPostgres::start_with(
                    "bench",
                    &[
                        ("shared_preload_libraries", "pg_stat_statements"),
                        ("max_connections", "500"),
                    ],
                )
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
    // The statement counts of the runs' cost, where the server has the
    // library loaded (else this fails and the counts stay unknown).
    let _ = ctx
        .exec("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        .await;
    let mut report = Report {
        cores,
        pg_version: pg_version(&ctx).await?,
        durability: durability(&ctx).await?,
        rows: args.rows,
        reps: args.reps,
        k,
        partitions: partition_list(&args, cores),
        runs: Vec::new(),
        takeover: None,
        rss: None,
        admin_list: None,
        adaptive: None,
        fleet: None,
    };
    let result = measure(&mut ctx, &mut report).await;
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
        write_markdown(path, &report)?;
    }
    Ok(if report.verified() { 0 } else { 2 })
}

/// Refuse flags no run can use.
fn check(args: &BenchArgs) -> Result<(), BenchError> {
    if args.rows == 0 || args.reps == 0 || args.batch.is_empty() || args.batch.contains(&0) {
        return Err(BenchError::Args(
            "--rows, --reps and every --batch must be positive".into(),
        ));
    }
    if args.k == Some(0) {
        return Err(BenchError::Args("--k must be positive".into()));
    }
    if args
        .partitions
        .iter()
        .any(|&p| p == 0 || p > MAX_PARTITIONS)
    {
        return Err(BenchError::Args(format!(
            "every --partitions must be 1 to {MAX_PARTITIONS}"
        )));
    }
    Ok(())
}

/// The server's version, without the platform it was built on.
async fn pg_version(ctx: &Ctx) -> Result<String, BenchError> {
    let mut conn = ctx.pool.get().await.map_err(StoreError::from)?;
    let v: TextValue = diesel::sql_query("SELECT version() AS v")
        .get_result(&mut conn)
        .await?;
    Ok(v.v.split(" on ").next().unwrap_or(&v.v).to_string())
}

/// The server's `fsync` and `synchronous_commit`. Commit cost depends on
/// these more than on anything the engine does; the throwaway cluster
/// runs with both off.
async fn durability(ctx: &Ctx) -> Result<String, BenchError> {
    let mut conn = ctx.pool.get().await.map_err(StoreError::from)?;
    let v: TextValue = diesel::sql_query(
        "SELECT 'fsync=' || current_setting('fsync') || ', synchronous_commit=' \
             || current_setting('synchronous_commit') AS v",
    )
    .get_result(&mut conn)
    .await?;
    Ok(v.v)
}

/// Every run the flags ask for, each batch size and repetition in turn,
/// then the extras at the first batch size; into `report`.
async fn measure(ctx: &mut Ctx, report: &mut Report) -> Result<(), BenchError> {
    let mut only = ctx.args.only.clone();
    only.sort();
    only.dedup();
    for batch in ctx.args.batch.clone() {
        for rep in 1..=ctx.args.reps {
            // Even repetitions run the runners in reverse order, so a
            // machine that speeds up or slows down over a repetition
            // does not favour the same runner every time.
            let order: Vec<Runner> = if rep % 2 == 0 {
                only.iter().rev().copied().collect()
            } else {
                only.clone()
            };
            for &runner in &order {
                let runs = run_one(ctx, runner, batch, rep, report).await?;
                for run in runs {
                    if !ctx.args.json {
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
    }
    let first = ctx.args.batch[0];
    if only.contains(&Runner::Takeover) {
        report.takeover = Some(takeover(ctx, first).await?);
    }
    if only.contains(&Runner::Rss) {
        report.rss = Some(rss(ctx, first).await?);
    }
    if only.contains(&Runner::AdminList) {
        report.admin_list = Some(admin_list(ctx).await?);
    }
    if only.contains(&Runner::Fleet) {
        report.fleet = Some(super::fleet::fleet(ctx, first).await?);
    }
    if only.contains(&Runner::Adaptive) {
        report.adaptive = Some(ctx.adaptive().await?);
    }
    Ok(())
}

/// The throughput runs of `runner` (one, or one per `--partitions` value
/// for `engine-p`); none for the extras, which [`measure`] runs once
/// after all of them.
async fn run_one(
    ctx: &mut Ctx,
    runner: Runner,
    batch: u32,
    rep: u32,
    report: &Report,
) -> Result<Vec<RunResult>, BenchError> {
    let rows = ctx.args.rows;
    let k = report.k;
    let items = ["items".to_string()];
    let run = match runner {
        Runner::Plpgsql => ctx.plpgsql(batch, rep).await?,
        Runner::PlpgsqlFenced => ctx.plpgsql_fenced(batch, rep).await?,
        Runner::Client => ctx.client(batch, rep).await?,
        Runner::Engine => {
            ctx.engine_run("engine", &items, rows, batch, rep, Shape::OneStatement)
                .await?
        }
        Runner::EngineSql => {
            ctx.engine_run("engine-sql", &items, rows, batch, rep, Shape::Sql)
                .await?
        }
        Runner::EngineJournal => {
            ctx.engine_run("engine-journal", &items, rows, batch, rep, Shape::Journaled)
                .await?
        }
        Runner::EngineKeys => {
            ctx.engine_run("engine-keys", &items, rows, batch, rep, Shape::TwoStatement)
                .await?
        }
        Runner::EngineSerial => {
            ctx.engine_run("engine-serial", &items, rows, batch, rep, Shape::Serial)
                .await?
        }
        Runner::EngineHealth => {
            ctx.engine_run("engine-health", &items, rows, batch, rep, Shape::Monitored)
                .await?
        }
        Runner::EngineP => return engine_p(ctx, batch, rep, &report.partitions).await,
        Runner::EnginePProcs => {
            let p = (2 * report.cores as u32).min(MAX_PARTITIONS);
            ctx.engine_p_procs(batch, rep, p).await?
        }
        Runner::EngineK => {
            let tables = k_tables(k);
            let each = (rows / k as u64).max(1);
            let r = ctx
                .engine_run("engine-k", &tables, each, batch, rep, Shape::OneStatement)
                .await?;
            ctx.drop_tables(&tables).await?;
            r
        }
        Runner::EngineServer => {
            ctx.engine_run(
                "engine-server",
                &items,
                rows,
                batch,
                rep,
                Shape::InServer(1),
            )
            .await?
        }
        Runner::EngineServerP => {
            let p = (report.cores as u32).clamp(1, MAX_PARTITIONS);
            let name = format!("engine-server-p{p}");
            ctx.engine_run(&name, &items, rows, batch, rep, Shape::InServer(p))
                .await?
        }
        Runner::EngineServerK => {
            let tables = k_tables(k);
            let each = (rows / k as u64).max(1);
            let r = ctx
                .engine_run(
                    "engine-server-k",
                    &tables,
                    each,
                    batch,
                    rep,
                    Shape::InServer(1),
                )
                .await?;
            ctx.drop_tables(&tables).await?;
            r
        }
        Runner::PlpgsqlK => {
            let tables = k_tables(k);
            let each = (rows / k as u64).max(1);
            let r = ctx.plpgsql_k(&tables, each, batch, rep).await?;
            ctx.drop_tables(&tables).await?;
            r
        }
        Runner::Takeover | Runner::Rss | Runner::AdminList | Runner::Adaptive | Runner::Fleet => {
            return Ok(Vec::new())
        }
    };
    Ok(vec![run])
}

/// The `engine-p` runs, one per P of `partitions` (`engine-p<P>`).
async fn engine_p(
    ctx: &mut Ctx,
    batch: u32,
    rep: u32,
    partitions: &[u32],
) -> Result<Vec<RunResult>, BenchError> {
    // Alternating like the runners (see [`measure`]), so drift does not
    // favour the same P every repetition.
    let mut ps = partitions.to_vec();
    if rep % 2 == 0 {
        ps.reverse();
    }
    let items = ["items".to_string()];
    let rows = ctx.args.rows;
    let mut runs = Vec::new();
    for p in ps {
        let name = format!("engine-p{p}");
        let shape = Shape::Partitioned(p);
        runs.push(
            ctx.engine_run(&name, &items, rows, batch, rep, shape)
                .await?,
        );
    }
    Ok(runs)
}

/// The partitions of the `engine-p` runs: `--partitions`, or the cores,
/// at most [`MAX_PARTITIONS`].
fn partition_list(args: &BenchArgs, cores: usize) -> Vec<u32> {
    if args.partitions.is_empty() {
        return vec![(cores as u32).clamp(1, MAX_PARTITIONS)];
    }
    let mut ps = args.partitions.clone();
    ps.sort_unstable();
    ps.dedup();
    ps
}

/// The report as the Markdown file `path` (benches/README.md), headed by
/// the invocation that made it and how to read it.
fn write_markdown(path: &Path, report: &Report) -> Result<(), BenchError> {
    // The invocation as given, so the file says how to regenerate it.
    let command: Vec<String> = std::env::args().skip(1).collect();
    let text = format!(
        "# Throughput benchmark\n\nGenerated by `backfill {}` (release build). \
         Numbers are noisy on a shared 2-core machine; the ratios are what count.\n\n{METHOD}\n{}",
        command.join(" "),
        report.markdown()
    );
    std::fs::write(path, text)
        .map_err(|e| BenchError::Run(format!("cannot write {}: {e}", path.display())))
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
