//! The throughput runners: the PL/pgSQL loop (alone, K at once, and
//! committing through the product's fence), the minimal client loop, and
//! the engine through the actor runtime.

use super::args::{BenchError, Shape};
use super::context::Ctx;
use super::repair::ItemsRepair;
use super::sql::{plpgsql_procedure_sql, Advance, Id, Micros};
use super::stats::{JournalUse, RunClock, RunResult, Timing};
use super::timed::Timed;
use backfill::__private::store::{self, cached, StoreError};
use backfill::engine::{Engine, EngineConfig};
use backfill::repair::Registry;
use backfill::runtime::RuntimeHandle;
use backfill::throttle::health::{HealthConfig, Monitor};
use diesel::sql_types::{Array, BigInt, Text};
use diesel_async::{AsyncConnection, RunQueryDsl, SimpleAsyncConnection};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

/// The time slice of the `engine-server` runs' loop: long enough that a
/// call's own round trips and the runtime's step between calls are a
/// small share of it, short enough that a pause or a throttle waits at
/// most this long.
const SERVER_SLICE: Duration = Duration::from_millis(250);

impl Ctx {
    pub(super) async fn plpgsql(&mut self, batch: u32, rep: u32) -> Result<RunResult, BenchError> {
        let rows = self.args.rows;
        self.reset("items", rows).await?;
        self.exec(&plpgsql_procedure_sql(
            "bench_plpgsql",
            "items",
            "plpgsql",
            batch,
            Advance::Plain,
        ))
        .await?;
        let (timing, mut lat) = self.call_loop("CALL bench_plpgsql()", "plpgsql").await?;
        let verified = self.verify("items").await?;
        Ok(RunResult::new(
            "plpgsql", batch, rows, rep, timing, &mut lat, verified,
        ))
    }

    /// Settle, then run `call` (a procedure of [`plpgsql_procedure_sql`])
    /// under the run's clock, and read back the batch latencies it
    /// recorded under `runner`.
    async fn call_loop(&self, call: &str, runner: &str) -> Result<(Timing, Vec<u64>), BenchError> {
        self.settle().await;
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let clock = RunClock::start(&self.pool).await;
        // CALL must not run inside a transaction block (the procedure
        // commits); the simple protocol runs it as its own statement.
        conn.batch_execute(call).await?;
        let timing = clock.stop(&self.pool).await;
        let lat: Vec<Micros> =
            diesel::sql_query("SELECT micros FROM bench_latency WHERE runner = $1")
                .bind::<Text, _>(runner)
                .load(&mut conn)
                .await?;
        Ok((
            timing,
            lat.into_iter().map(|m| m.micros.max(0) as u64).collect(),
        ))
    }

    /// The `plpgsql` loop committing every batch through the product's
    /// fence on a backfill the engine registered, started and claimed
    /// ([`Advance::Fenced`]): a batch's cost with its loop inside the
    /// server, fence and checkpoint included. The claim's lease is made
    /// long enough for the whole run, since no renewer runs beside the
    /// procedure; the row ends in `validating`, which no later run claims
    /// (each registers its own IDs).
    pub(super) async fn plpgsql_fenced(
        &mut self,
        batch: u32,
        rep: u32,
    ) -> Result<RunResult, BenchError> {
        let rows = self.args.rows;
        self.reset("items", rows).await?;
        self.run_seq += 1;
        let (registry, ids) =
            self.registry_for(&["items".to_string()], batch, rep, Shape::OneStatement)?;
        let id = &ids[0];
        let pool = store::build_pool(&self.url, 2).await?;
        let config = EngineConfig {
            lease_ttl: Duration::from_secs(24 * 3600),
            ..self.engine_config()
        };
        let engine = Engine::new(pool, registry, config)?;
        engine.register().await?;
        engine.start(id).await?;
        let worker = format!("bench-fenced-{}", std::process::id());
        let claim = engine
            .claim_next(&worker, &[])
            .await?
            .ok_or_else(|| BenchError::Run(format!("{id}: started but not claimable")))?;
        self.exec(&plpgsql_procedure_sql(
            "bench_plpgsql_fenced",
            "items",
            "plpgsql-fenced",
            batch,
            Advance::Fenced,
        ))
        .await?;
        // The ID and the worker are the bench's own (letters, digits,
        // dots and dashes), so they are written into the CALL as text.
        let call = format!(
            "CALL bench_plpgsql_fenced('{id}', '{worker}', {})",
            claim.generation
        );
        let (timing, mut lat) = self.call_loop(&call, "plpgsql-fenced").await?;
        // Every row repaired once, and the fence took the backfill to the
        // end of its range.
        let validating = engine.get(id).await?.state == backfill::State::Validating;
        let verified = validating && self.verify("items").await?;
        Ok(RunResult::new(
            "plpgsql-fenced",
            batch,
            rows,
            rep,
            timing,
            &mut lat,
            verified,
        ))
    }

    /// K `plpgsql` loops at once, one connection and one procedure per
    /// table (`bench_plpgsql_k<i>` over `items_k<i>`, created per run):
    /// what the server alone reaches with K writers on this machine.
    pub(super) async fn plpgsql_k(
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
                Advance::Plain,
            ))
            .await?;
        }
        self.reset_settled(tables, rows_each).await?;
        let mut conns = Vec::with_capacity(tables.len());
        for _ in tables {
            conns.push(self.pool.get_owned().await.map_err(StoreError::from)?);
        }
        let clock = RunClock::start(&self.pool).await;
        // Each CALL is sent on the first poll, so the K loops start
        // together and run on K backends.
        futures_util::future::try_join_all(conns.iter_mut().enumerate().map(|(i, conn)| {
            let sql = format!("CALL bench_plpgsql_k{}()", i + 1);
            async move { conn.batch_execute(&sql).await }
        }))
        .await?;
        let timing = clock.stop(&self.pool).await;
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

    pub(super) async fn client(&mut self, batch: u32, rep: u32) -> Result<RunResult, BenchError> {
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
        let clock = RunClock::start(&self.pool).await;
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
        let timing = clock.stop(&self.pool).await;
        drop(conn);
        let verified = self.verify("items").await?;
        Ok(RunResult::new(
            "client", batch, rows, rep, timing, &mut lat, verified,
        ))
    }

    /// One repair per table in `shape`, under IDs made for this run
    /// (EMB-2), and those IDs.
    fn registry_for(
        &self,
        tables: &[String],
        batch: u32,
        rep: u32,
        shape: Shape,
    ) -> Result<(Registry, Vec<String>), BenchError> {
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
                Shape::OneStatement | Shape::Monitored => registry.register(repair),
                Shape::TwoStatement => registry.register(repair.two_statement()),
                Shape::Serial => registry.register(repair.serial()),
                Shape::Sql => registry.register(repair.declared()?),
                Shape::Journaled => registry.register(repair.journaled()?),
                Shape::Partitioned(p) => registry.register(repair.partitions(p)),
                Shape::InServer(p) => {
                    registry.register(repair.partitions(p).in_server(SERVER_SLICE))
                }
            }
            .map_err(|e| BenchError::Run(e.to_string()))?;
        }
        Ok((registry, ids))
    }

    /// Run `tables.len()` backfills (one per table, `rows_each` rows each)
    /// through one engine and one runtime until all are `completed`.
    pub(super) async fn engine_run(
        &mut self,
        runner: &str,
        tables: &[String],
        rows_each: u64,
        batch: u32,
        rep: u32,
        shape: Shape,
    ) -> Result<RunResult, BenchError> {
        self.reset_settled(tables, rows_each).await?;
        self.run_seq += 1;
        let (registry, ids) = self.registry_for(tables, batch, rep, shape)?;
        // A runner per backfill, or per partition: every claim runs at once.
        let runners = match shape {
            Shape::Partitioned(p) | Shape::InServer(p) => tables.len() * p as usize,
            _ => tables.len(),
        };
        // Two connections per runner (the repair overlaps commits, see
        // `Repair::overlap_commits`) plus renewer, validator and the bench.
        let pool = store::build_pool(&self.url, 2 * runners as u32 + 3).await?;
        let engine = Engine::new(pool.clone(), registry, self.engine_config())?;
        engine.register().await?;
        let monitor = match shape {
            Shape::Monitored => Some(monitored(&engine, pool).await),
            _ => None,
        };
        let journal_disk = match shape {
            Shape::Journaled => Some(self.journal_disk().await?),
            _ => None,
        };
        let total_rows = rows_each * tables.len() as u64;
        let (backend, mut rx) = timed(&engine, total_rows, batch, runners);
        let clock = RunClock::start(&self.pool).await;
        for id in &ids {
            engine.start(id).await?;
        }
        let runtime = RuntimeHandle::start(
            backend.clone(),
            self.runtime_config(&format!("bench-{}", std::process::id()), runners),
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
        let timing = clock.stop(&self.pool).await;
        runtime.shutdown().await;
        if let Some(task) = monitor {
            task.abort();
        }
        if let Some(e) = error {
            return Err(BenchError::Run(format!("{runner} run failed: {e}")));
        }
        let mut lat = std::mem::take(&mut *backend.latencies.lock());
        let mut verified = AtomicU64::load(&backend.failures, Ordering::Relaxed) == 0;
        for table in tables {
            verified &= self.verify(table).await?;
        }
        let run = RunResult::new(runner, batch, total_rows, rep, timing, &mut lat, verified);
        let Some(disk_before) = journal_disk else {
            return Ok(run);
        };
        let journal = self.journal_use(&ids, disk_before).await?;
        // The verification saw every row changed exactly once, so the
        // journal's entries hold exactly N rows: a missing one could not
        // be undone, an extra one would be undone twice.
        let mut run = run.with_journal(journal);
        if journal.rows != total_rows as i64 {
            eprintln!(
                "{runner}: {} journaled rows for {total_rows} rows changed",
                journal.rows
            );
            run.verified = false;
        }
        Ok(run)
    }

    /// The journal's size on disk (heap, TOAST and index), as `/metrics`
    /// reads it.
    async fn journal_disk(&self) -> Result<i64, BenchError> {
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        Ok(store::journal_totals(&mut conn).await?.1)
    }

    /// What the backfills `ids` journaled, read after their run as the
    /// admin view reads it, and how far the journal's size on disk grew
    /// from `disk_before`.
    async fn journal_use(
        &self,
        ids: &[String],
        disk_before: i64,
    ) -> Result<JournalUse, BenchError> {
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let mut journal = JournalUse {
            rows: 0,
            row_bytes: 0,
            disk_bytes: 0,
        };
        for id in ids {
            let stats = store::journal_stats(&mut conn, id).await?;
            journal.rows += stats.rows;
            journal.row_bytes += stats.bytes;
        }
        journal.disk_bytes = store::journal_totals(&mut conn).await?.1 - disk_before;
        // Freshly inserted journal entries make autovacuum due on the
        // journal (its insert threshold): left to it, the vacuum would
        // land inside whichever run comes next and slow that one. Done
        // here, outside every timed part; it changes no row.
        conn.batch_execute("VACUUM ANALYZE backfill_journal")
            .await?;
        Ok(journal)
    }
}

/// `engine` as a timed backend for a run of `total_rows` rows in batches
/// of `batch` over `claims` claims at once, and the receiver of its
/// terminal outcomes.
pub(super) fn timed(
    engine: &Engine,
    total_rows: u64,
    batch: u32,
    claims: usize,
) -> (Arc<Timed>, UnboundedReceiver<Result<String, String>>) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let backend = Arc::new(Timed {
        engine: engine.clone(),
        latencies: parking_lot::Mutex::new(Vec::with_capacity(
            (total_rows / u64::from(batch)) as usize + 16 * claims,
        )),
        done: tx,
        failures: AtomicU64::new(0),
        trace: None,
    });
    (backend, rx)
}

/// Attach a health monitor at the default configuration to `engine`, as
/// `Embedded` does (a first reading, then one every interval on a task of
/// its own), and return its task.
async fn monitored(engine: &Engine, pool: store::Pool) -> actix_rt::task::JoinHandle<()> {
    let monitor = Arc::new(Monitor::new(
        pool,
        HealthConfig::default(),
        engine.registry().tables(),
        None,
    ));
    monitor.run_once().await;
    engine.attach_health(monitor.clone());
    actix_rt::spawn(monitor.run())
}
