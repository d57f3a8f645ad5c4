//! `engine-p-procs`: one partitioned backfill worked by two processes of
//! this binary at once, this one and a child ([`partition_worker`]), each
//! with its own pool and runtime. What the partitions buy when the
//! runners are not one process's tasks (PAR-1).

use super::args::{BenchArgs, BenchError};
use super::context::Ctx;
use super::repair::ItemsRepair;
use super::runners::timed;
use super::stats::{RunClock, RunResult};
use backfill::__private::store;
use backfill::engine::{Engine, EngineConfig};
use backfill::repair::Registry;
use backfill::runtime::{RuntimeConfig, RuntimeHandle};
use backfill::State;
use std::sync::atomic::Ordering;
use std::time::Duration;
use tokio::process::Child;
use tokio::sync::mpsc::UnboundedReceiver;

/// The table both processes work on.
const TABLE: &str = "items";
/// How often each process reads the backfill's state while it waits for
/// `completed`: the validation may run in the other process, whose events
/// this one does not see.
const STATE_POLL: Duration = Duration::from_millis(20);
/// What the child prints on stdout once its runtime is polling.
const READY: &str = "ready";

impl Ctx {
    /// One backfill of `--rows` rows in `partitions` partitions, half of
    /// them run here, the rest in a child process, until `completed`. The
    /// batch latencies are this process's; the child's stay there.
    pub(super) async fn engine_p_procs(
        &mut self,
        batch: u32,
        rep: u32,
        partitions: u32,
    ) -> Result<RunResult, BenchError> {
        let rows = self.args.rows;
        self.reset_settled(&[TABLE.to_string()], rows).await?;
        self.run_seq += 1;
        let id = format!(
            "bench.procs.b{batch}.r{rep}.{}.{}",
            self.run_seq,
            std::process::id()
        );
        let mine = (partitions as usize).div_ceil(2);
        let theirs = (partitions as usize - mine).max(1);
        let registry = Registry::new()
            .with(ItemsRepair::new(id.clone(), TABLE, batch).partitions(partitions))
            .map_err(|e| BenchError::Run(e.to_string()))?;
        let pool = store::build_pool(&self.url, 2 * mine as u32 + 3).await?;
        let engine = Engine::new(pool, registry, self.engine_config())?;
        engine.register().await?;
        let (backend, mut rx) = timed(&engine, rows, batch, mine);
        // The child is up and polling before the clock starts, so its
        // process start is not in the run.
        let mut child = spawn_worker(self, &id, batch, partitions, theirs)?;
        wait_ready(&mut child).await?;
        let clock = RunClock::start(&self.pool).await;
        engine.start(&id).await?;
        let worker = format!("bench-{}", std::process::id());
        let runtime = RuntimeHandle::start(backend.clone(), self.runtime_config(&worker, mine))
            .map_err(|e| BenchError::Run(e.to_string()))?;
        let outcome = wait_completed(&engine, &id, &mut rx, Some(&mut child)).await;
        let timing = clock.stop(&self.pool).await;
        runtime.shutdown().await;
        let child_ok = finish(&mut child).await;
        outcome.map_err(|e| BenchError::Run(format!("engine-p-procs run failed: {e}")))?;
        let mut lat = std::mem::take(&mut *backend.latencies.lock());
        let verified =
            backend.failures.load(Ordering::Relaxed) == 0 && child_ok && self.verify(TABLE).await?;
        Ok(RunResult::new(
            "engine-p-procs",
            batch,
            rows,
            rep,
            timing,
            &mut lat,
            verified,
        ))
    }
}

/// Start this binary as the second process of backfill `id`
/// ([`partition_worker`]) with `runners` runners; killed when the handle
/// is dropped.
fn spawn_worker(
    ctx: &Ctx,
    id: &str,
    batch: u32,
    partitions: u32,
    runners: usize,
) -> Result<Child, BenchError> {
    ctx.child_command("--partition-worker", batch)?
        .arg("--partitions")
        .arg(partitions.to_string())
        .arg("--k")
        .arg(runners.to_string())
        .arg("--rows")
        .arg(ctx.args.rows.to_string())
        .env("BENCH_PARTITION_ID", id)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| BenchError::Run(format!("cannot start the partition worker: {e}")))
}

/// Wait (at most 60 s) for the child's [`READY`] line. The read blocks a
/// thread of its own; a child that dies closes the pipe and ends it.
async fn wait_ready(child: &mut Child) -> Result<(), BenchError> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| BenchError::Run("the partition worker has no stdout".into()))?;
    let fd = stdout
        .into_owned_fd()
        .map_err(|e| BenchError::Run(format!("partition worker stdout: {e}")))?;
    let read = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        let mut reader = std::io::BufReader::new(std::fs::File::from(fd));
        std::io::BufRead::read_line(&mut reader, &mut line).map(|_| line)
    });
    match tokio::time::timeout(Duration::from_secs(60), read).await {
        Ok(Ok(Ok(line))) if line.trim() == READY => Ok(()),
        Ok(Ok(Ok(_))) => Err(BenchError::Run("the partition worker did not start".into())),
        Ok(Ok(Err(e))) => Err(BenchError::Run(format!("partition worker stdout: {e}"))),
        Ok(Err(_)) => Err(BenchError::Run(
            "reading the partition worker panicked".into(),
        )),
        Err(_) => Err(BenchError::Run(
            "the partition worker never got ready".into(),
        )),
    }
}

/// Wait until backfill `id` is `completed`: this process's runtime says
/// so when it ran the validation, the state read says so when the other
/// process did. A failed batch or validation here, a backfill that
/// stopped anywhere else, or a `child` that exited unsuccessfully ends
/// the wait with the reason.
async fn wait_completed(
    engine: &Engine,
    id: &str,
    rx: &mut UnboundedReceiver<Result<String, String>>,
    mut child: Option<&mut Child>,
) -> Result<(), String> {
    loop {
        tokio::select! {
            done = rx.recv() => match done {
                Some(Ok(_)) => return Ok(()),
                Some(Err(e)) => return Err(e),
                None => return Err("the runtime stopped".into()),
            },
            _ = tokio::time::sleep(STATE_POLL) => {
                let row = engine.get(id).await.map_err(|e| e.to_string())?;
                match row.state {
                    State::Completed => return Ok(()),
                    State::Failed | State::Blocked | State::Paused => {
                        return Err(format!("{id} is {:?}", row.state))
                    }
                    _ => {}
                }
                if let Some(child) = child.as_deref_mut() {
                    if let Ok(Some(status)) = child.try_wait() {
                        if !status.success() {
                            return Err(format!("the partition worker exited: {status}"));
                        }
                    }
                }
            },
        }
    }
}

/// Wait (at most 10 s) for the child to exit on its own after the
/// backfill completed, then kill it; whether it exited successfully.
async fn finish(child: &mut Child) -> bool {
    match tokio::time::timeout(Duration::from_secs(10), child.wait()).await {
        Ok(Ok(status)) => status.success(),
        _ => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            false
        }
    }
}

/// The child side of `engine-p-procs`: run `--k` runners on backfill
/// `BENCH_PARTITION_ID` (in `--partitions` partitions) until it is
/// `completed`; fail if any of its batches had to be retried.
pub(super) async fn partition_worker(args: &BenchArgs, url: &str) -> Result<(), BenchError> {
    let id = std::env::var("BENCH_PARTITION_ID")
        .map_err(|_| BenchError::Args("BENCH_PARTITION_ID is not set".into()))?;
    let batch = args.batch.first().copied().unwrap_or(1000);
    let partitions = args.partitions.first().copied().unwrap_or(2);
    let runners = args.k.unwrap_or(1);
    let registry = Registry::new()
        .with(ItemsRepair::new(id.clone(), TABLE, batch).partitions(partitions))
        .map_err(|e| BenchError::Run(e.to_string()))?;
    let pool = store::build_pool(url, 2 * runners as u32 + 3).await?;
    let config = EngineConfig {
        lease_ttl: Duration::from_millis(args.lease_ttl_ms),
        build_info: "backfill bench".into(),
        ..EngineConfig::default()
    };
    let engine = Engine::new(pool, registry, config)?;
    engine.register().await?;
    let (backend, mut rx) = timed(&engine, args.rows, batch, runners);
    let rc = RuntimeConfig {
        worker_id: format!("bench-worker-{}", std::process::id()),
        poll_interval: Duration::from_millis(args.poll_interval_ms),
        max_concurrent_runners: runners,
        ..RuntimeConfig::default()
    };
    let runtime =
        RuntimeHandle::start(backend.clone(), rc).map_err(|e| BenchError::Run(e.to_string()))?;
    println!("{READY}");
    let outcome = wait_completed(&engine, &id, &mut rx, None).await;
    runtime.shutdown().await;
    outcome.map_err(BenchError::Run)?;
    match backend.failures.load(Ordering::Relaxed) {
        0 => Ok(()),
        n => Err(BenchError::Run(format!("{n} batches were retried"))),
    }
}
