//! What every run shares ([`Ctx`]): the flags, the bench database and its
//! pool, and the table resets, verification and settling around a run.

use super::args::{BenchArgs, BenchError};
use super::sql::{table_sql, verify};
use backfill::__private::store::{Pool, StoreError};
use backfill::engine::EngineConfig;
use backfill::runtime::RuntimeConfig;
use diesel_async::SimpleAsyncConnection;
use std::time::Duration;

/// The state every run of one invocation shares.
pub(super) struct Ctx {
    pub(super) args: BenchArgs,
    pub(super) url: String,
    pub(super) pool: Pool,
    pub(super) run_seq: u64,
}

impl Ctx {
    pub(super) fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            lease_ttl: Duration::from_millis(self.args.lease_ttl_ms),
            build_info: "backfill bench".into(),
            ..EngineConfig::default()
        }
    }

    pub(super) fn runtime_config(&self, worker: &str, runners: usize) -> RuntimeConfig {
        RuntimeConfig {
            worker_id: worker.to_string(),
            poll_interval: Duration::from_millis(self.args.poll_interval_ms),
            max_concurrent_runners: runners,
            ..RuntimeConfig::default()
        }
    }

    pub(super) async fn exec(&self, sql: &str) -> Result<(), BenchError> {
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        conn.batch_execute(sql).await?;
        Ok(())
    }

    /// (Re)create `table` with `rows` fresh rows, vacuumed and analyzed so
    /// every runner starts from the same physical state (hint bits set,
    /// visibility map current). VACUUM cannot share a transaction block.
    pub(super) async fn reset(&self, table: &str, rows: u64) -> Result<(), BenchError> {
        self.exec(&table_sql(table, rows)).await?;
        self.exec(&format!("VACUUM ANALYZE {table}")).await
    }

    pub(super) async fn verify(&self, table: &str) -> Result<bool, BenchError> {
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        verify(&mut conn, table).await
    }

    /// Fresh `tables` of `rows_each` rows, then [`Ctx::settle`]: the start
    /// of every run over several tables.
    pub(super) async fn reset_settled(
        &self,
        tables: &[String],
        rows_each: u64,
    ) -> Result<(), BenchError> {
        for table in tables {
            self.reset(table, rows_each).await?;
        }
        self.settle().await;
        Ok(())
    }

    /// Drop the K runners' tables after their run (N rows of disk).
    pub(super) async fn drop_tables(&self, tables: &[String]) -> Result<(), BenchError> {
        for table in tables {
            self.exec(&format!("DROP TABLE IF EXISTS {table}")).await?;
        }
        Ok(())
    }

    /// This binary as a second bench process in the role `flag` names
    /// (`--takeover-owner`, `--partition-worker`) on this run's database,
    /// with the run's lease TTL, poll interval and `batch`; killed when
    /// its handle is dropped. The caller adds the role's own flags.
    pub(super) fn child_command(
        &self,
        flag: &str,
        batch: u32,
    ) -> Result<tokio::process::Command, BenchError> {
        let exe = std::env::current_exe().map_err(|e| BenchError::Run(e.to_string()))?;
        let mut command = tokio::process::Command::new(exe);
        command
            .arg("bench")
            .arg(flag)
            .arg(&self.url)
            .arg("--lease-ttl-ms")
            .arg(self.args.lease_ttl_ms.to_string())
            .arg("--poll-interval-ms")
            .arg(self.args.poll_interval_ms.to_string())
            .arg("--batch")
            .arg(batch.to_string())
            .kill_on_drop(true);
        Ok(command)
    }

    /// Flush dirty pages so a checkpoint does not land inside a run.
    pub(super) async fn settle(&self) {
        let _ = self.exec("CHECKPOINT").await;
    }
}
