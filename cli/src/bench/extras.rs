//! The measurements beside throughput: takeover latency after SIGKILL,
//! the worker's peak RSS, and admin list latency.

use super::args::{BenchArgs, BenchError, Shape};
use super::context::Ctx;
use super::repair::ItemsRepair;
use super::sql::{Count, TextValue};
use super::stats::{median, round3};
use super::timed::Timed;
use actix_web::dev::ServerHandle;
use backfill::__private::store::{self, StoreError};
use backfill::admin::{Admin, AdminConfig, AuthConfig};
use backfill::engine::{Engine, EngineConfig};
use backfill::repair::Registry;
use backfill::runtime::{RuntimeConfig, RuntimeHandle};
use diesel::sql_types::Text;
use diesel_async::RunQueryDsl;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Takeover latency: an owner process holds the claim and is SIGKILLed;
/// a standby runtime in this process takes over once the lease expired.
pub(super) async fn takeover(ctx: &mut Ctx, batch: u32) -> Result<Value, BenchError> {
    let mut samples = Vec::new();
    for rep in 1..=ctx.args.reps {
        samples.push(takeover_once(ctx, batch, rep).await?);
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

/// The worker ID of the owner process of [`takeover`].
const OWNER: &str = "bench-owner";

/// One takeover: a fresh table and backfill, the owner process working on
/// it, SIGKILL, and the standby's run to the end. The latency in ms from
/// the kill to the standby's claim, and whether the run verified.
async fn takeover_once(ctx: &mut Ctx, batch: u32, rep: u32) -> Result<(f64, bool), BenchError> {
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
    let mut child = spawn_owner(ctx, &id, batch)?;
    wait_until_owned(ctx, &id).await?;
    // The standby is up and polling before the owner dies.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let backend = Arc::new(Timed {
        engine: engine.clone(),
        latencies: parking_lot::Mutex::new(Vec::with_capacity(4096)),
        done: tx,
        failures: AtomicU64::new(0),
        trace: None,
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
    let latency = wait_for_takeover(ctx, &id, &taker, killed).await?;
    // Let the standby finish, so the run is verified like the others.
    let finished = match rx.recv().await {
        Some(Ok(_)) => true,
        Some(Err(e)) => return Err(BenchError::Run(format!("takeover run failed: {e}"))),
        None => false,
    };
    runtime.shutdown().await;
    let verified = finished && ctx.verify(table).await?;
    Ok((latency.as_secs_f64() * 1000.0, verified))
}

/// Start this binary as the owner process of backfill `id`
/// ([`takeover_owner`]); it is killed when the handle is dropped.
fn spawn_owner(ctx: &Ctx, id: &str, batch: u32) -> Result<tokio::process::Child, BenchError> {
    ctx.child_command("--takeover-owner", batch.min(100))?
        .env("BENCH_TAKEOVER_ID", id)
        .stdout(std::process::Stdio::null())
        .spawn()
        .map_err(|e| BenchError::Run(format!("cannot start the owner process: {e}")))
}

/// Wait (at most 60 s) until the owner process holds the claim of `id`
/// and has committed a few batches, so the kill lands mid-run.
async fn wait_until_owned(ctx: &Ctx, id: &str) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut conn = ctx.pool.get().await.map_err(StoreError::from)?;
        let held: Count = diesel::sql_query(
            "SELECT count(*) AS n FROM backfill WHERE id = $1 AND owner = $2 \
             AND batches_done >= 3",
        )
        .bind::<Text, _>(id)
        .bind::<Text, _>(OWNER)
        .get_result(&mut conn)
        .await?;
        if held.n == 1 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(BenchError::Run("the owner process never claimed".into()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Poll (at most 120 s after `killed`) until `taker` holds the claim of
/// `id` or the backfill left `running`: the takeover latency.
async fn wait_for_takeover(
    ctx: &Ctx,
    id: &str,
    taker: &str,
    killed: Instant,
) -> Result<Duration, BenchError> {
    loop {
        let mut conn = ctx.pool.get().await.map_err(StoreError::from)?;
        let row: TextValue = diesel::sql_query(
            "SELECT coalesce(owner, '') || '/' || state AS v FROM backfill WHERE id = $1",
        )
        .bind::<Text, _>(id)
        .get_result(&mut conn)
        .await?;
        if row.v.starts_with(taker) || !row.v.ends_with("/running") {
            return Ok(killed.elapsed());
        }
        if killed.elapsed() > Duration::from_secs(120) {
            return Err(BenchError::Run("no takeover within 120 s".into()));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The owner side of [`takeover`]: claim the backfill and work on it
/// slowly until SIGKILLed.
pub(super) async fn takeover_owner(args: &BenchArgs, url: &str) -> Result<(), BenchError> {
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
        worker_id: OWNER.into(),
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
pub(super) async fn rss(ctx: &mut Ctx, batch: u32) -> Result<Value, BenchError> {
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

/// Backfills registered for the admin list measurement.
const LIST_BACKFILLS: usize = 10_000;
/// Concurrent clients of the admin list measurement.
const LIST_CLIENTS: usize = 32;
/// Requests per client before its measured ones (see [`admin_list`]).
const LIST_WARMUP: usize = 5;
/// Measured requests per client.
const LIST_REQUESTS: usize = 100;
/// The operator token the admin server takes and the clients send.
const LIST_TOKEN: &str = "bench-admin-token-0123456789abcdef";

/// Admin API list latency: 10,000 registered backfills, 32 concurrent
/// clients each reading the first page (`limit=100`) through the real HTTP
/// server with a bearer token.
///
/// Each client first sends `LIST_WARMUP` requests that are not in the
/// percentiles, and all clients start measuring together (a barrier). The
/// first requests open the clients' HTTP connections, the pool's
/// connections and their prepared statements, and so many cold requests
/// among the measured ones would decide the p99. The slowest warm-up request is reported
/// beside the percentiles (`cold_max_ms`), so the cold start stays visible.
pub(super) async fn admin_list(ctx: &Ctx) -> Result<Value, BenchError> {
    let ids: Vec<String> = (0..LIST_BACKFILLS)
        .map(|i| format!("bench.admin.{i:05}"))
        .collect();
    let descriptions = vec![String::new(); LIST_BACKFILLS];
    {
        let mut conn = ctx.pool.get().await.map_err(StoreError::from)?;
        store::backfill_register(&mut conn, &ids, &descriptions, "backfill bench").await?;
    }
    // Like every throughput run, start from flushed pages: the 10M-row
    // `rss` run before it leaves a checkpoint's worth of writes behind.
    ctx.settle().await;
    let (handle, addr) = admin_server(ctx).await?;
    let url = format!("http://{addr}/admin/backfills?limit=100");
    let barrier = Arc::new(tokio::sync::Barrier::new(LIST_CLIENTS + 1));
    let tasks: Vec<_> = (0..LIST_CLIENTS)
        .map(|_| actix_rt::spawn(list_client(url.clone(), barrier.clone())))
        .collect();
    barrier.wait().await;
    let started = Instant::now();
    let mut all = Vec::with_capacity(LIST_CLIENTS * LIST_REQUESTS);
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
        "backfills": LIST_BACKFILLS, "clients": LIST_CLIENTS, "requests": all.len(),
        "errors": errors, "warmup_per_client": LIST_WARMUP,
        "cold_max_ms": round3(cold_max as f64 / 1000.0),
        "page": 100, "p50_ms": pct(0.50), "p99_ms": pct(0.99),
        "requests_per_s": (all.len() as f64 / seconds.max(1e-9)).round(),
    }))
}

/// The admin routes on a listener of their own at a free local port, over
/// an engine with no repairs: its stop handle and address.
async fn admin_server(ctx: &Ctx) -> Result<(ServerHandle, SocketAddr), BenchError> {
    let auth = AuthConfig::from_sources(Some(LIST_TOKEN), None, false)
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
    Ok((handle, addr))
}

/// One client of [`admin_list`]: its warm-up requests, then (after the
/// barrier) its measured ones. Their latencies in microseconds, and the
/// number of requests that failed.
async fn list_client(url: String, barrier: Arc<tokio::sync::Barrier>) -> (Vec<u64>, Vec<u64>, u64) {
    let client = awc::Client::default();
    let mut cold = Vec::with_capacity(LIST_WARMUP);
    let mut micros = Vec::with_capacity(LIST_REQUESTS);
    let mut errors = 0u64;
    for i in 0..LIST_WARMUP + LIST_REQUESTS {
        if i == LIST_WARMUP {
            barrier.wait().await;
        }
        let t = Instant::now();
        match client
            .get(&url)
            .insert_header(("Authorization", format!("Bearer {LIST_TOKEN}")))
            .send()
            .await
        {
            Ok(mut res) if res.status().is_success() => {
                let _ = res.body().limit(16 * 1024 * 1024).await;
                let took = t.elapsed().as_micros() as u64;
                if i < LIST_WARMUP {
                    cold.push(took);
                } else {
                    micros.push(took);
                }
            }
            _ => errors += 1,
        }
    }
    (cold, micros, errors)
}
