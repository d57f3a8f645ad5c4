//! Partitioned execution in the engine (PAR-1..PAR-4): dividing the range
//! at `start`, claiming and renewing partitions, and recording a
//! partition's failure. A partition claim is a [`Claim`] whose bound is
//! the partition's upper end and whose checkpoint is the partition's, so
//! the batch seam runs it unchanged; only its fence
//! (`store::Advance::part`) differs.

use super::claim::{check_claimed, Claim, OpenBatch, Phase};
use super::config::millis;
use super::error::{body_error, EngineError};
use super::outcome::FailureOutcome;
use super::Engine;
use crate::repair::{plan_partitions, DynRepair, Registry, RepairError};
use crate::store::{self, StoreError};
use diesel_async::{AsyncConnection, AsyncPgConnection};

/// Claim a partition inside the caller's transaction (the claim
/// transaction of [`Engine::claim_next_excluding`]), checking the stored
/// keys against the local key type like a backfill claim (REG-4).
pub(super) async fn claim_partition_in(
    conn: &mut AsyncPgConnection,
    registry: &Registry,
    worker: &str,
    ids: &[String],
    exclude: &[(String, u32)],
    ttl_ms: i64,
) -> Result<Option<Claim>, EngineError> {
    let Some(row) = store::partition_claim(conn, worker, ids, exclude, ttl_ms).await? else {
        return Ok(None);
    };
    check_claimed(
        registry,
        &row.id,
        [Some(row.upper.as_slice()), row.checkpoint.as_deref()],
    )?;
    let part = u32::try_from(row.part).map_err(|_| EngineError::UnknownState(row.id.clone()))?;
    Ok(Some(Claim {
        id: row.id,
        worker: worker.to_string(),
        generation: row.generation,
        phase: Phase::Execute,
        partition: Some(part),
        takeover_from: row.prior_owner,
        bound: Some(row.upper),
        checkpoint: row.checkpoint,
        open: OpenBatch::default(),
        pacing: Default::default(),
        permit: None,
    }))
}

/// Divide the range up to `bound` into partitions in the `start`
/// transaction (PAR-1), when the definition allows more than one: ask the
/// repair for its split points, check them, and write one row per range.
/// A refused point is [`EngineError::Split`], and the caller's
/// transaction rolls back with nothing written. Returns how many
/// partitions were written (0: the backfill runs without partitions).
pub(super) async fn split_in(
    conn: &mut AsyncPgConnection,
    def: &dyn DynRepair,
    id: &str,
    bound: &[u8],
) -> Result<usize, EngineError> {
    let partitions = def.partitions();
    if partitions <= 1 {
        return Ok(0);
    }
    let points = def
        .split_points(conn, bound, partitions)
        .await
        .map_err(|e| body_error(id, e))?;
    let ranges = plan_partitions(&points, bound, partitions, &|key| def.check_key(key)).map_err(
        |error| EngineError::Split {
            id: id.to_string(),
            error,
        },
    )?;
    if ranges.len() <= 1 {
        return Ok(0);
    }
    Ok(store::partition_insert(conn, id, &ranges).await?)
}

impl Engine {
    /// Renew the listed partition claims `(id, part, generation)` of
    /// `worker` in one statement; returns those renewed. A claim missing
    /// from the answer is lost (CLM-3).
    ///
    /// Then, in a statement of its own, roll the partitions' counters up
    /// into the row of each backfill renewed here
    /// (`store::backfill_progress_roll_up`), so the backfill row's
    /// `rows_done` and `batches_done` trail its partitions by at most
    /// about one renewal interval while it runs (one more when the row
    /// was locked at that moment), without a batch ever touching the
    /// backfill row. Those counters are a reader's convenience, not
    /// state: a failed roll-up is logged and the renewal's answer stands.
    #[doc(hidden)]
    pub async fn renew_partitions(
        &self,
        worker: &str,
        claims: &[(String, u32, i64)],
    ) -> Result<Vec<(String, u32, i64)>, EngineError> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let rows = store::partition_renew(&mut conn, worker, claims, millis(self.config.lease_ttl))
            .await?;
        let mut ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
        ids.sort();
        ids.dedup();
        if !ids.is_empty() {
            if let Err(error) = store::backfill_progress_roll_up(&mut conn, &ids).await {
                tracing::warn!(
                    event = "progress_roll_up_failed",
                    error = %error,
                    "the partitions' counters were not rolled up into the backfill rows; \
                     the next renewal tries again"
                );
            }
        }
        Ok(rows
            .into_iter()
            .filter_map(|r| Some((r.id, u32::try_from(r.part).ok()?, r.generation)))
            .collect())
    }

    /// Record a partition's failure and drop its claim (RT-1, PAR-3), in
    /// one transaction: a retryable failure backs the partition off; a
    /// blocked, fatal or exhausted one makes the backfill `blocked` or
    /// `failed`, names the partition, and fences every partition.
    pub(super) async fn record_partition_failure(
        &self,
        claim: &Claim,
        part: u32,
        error: &RepairError,
    ) -> Result<FailureOutcome, EngineError> {
        let retry = &self.config.retry;
        let message = error.message();
        let record = store::PartitionFailureRecord {
            id: &claim.id,
            part,
            worker: &claim.worker,
            generation: claim.generation,
            kind: error.kind(),
            message: &message,
            max_attempts: retry.max_attempts,
            backoff_base_ms: millis(retry.backoff_base),
            backoff_max_ms: millis(retry.backoff_max),
            batch_size: claim.size_after(error),
        };
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let row = conn
            .transaction::<_, EngineError, _>(async |conn| {
                Ok(store::partition_record_failure(conn, &record).await?)
            })
            .await?;
        if row
            .as_ref()
            .is_some_and(|r| r.state == crate::lifecycle::State::Blocked)
        {
            // The block is the backfill's, at its own generation; the
            // keys are sought in this partition's remaining range.
            if let Some(backfill) = store::backfill_get(&mut conn, &claim.id).await? {
                drop(conn);
                self.record_blocking_keys(
                    &claim.id,
                    backfill.generation,
                    claim.checkpoint.as_deref(),
                    claim.bound.as_deref(),
                )
                .await;
            }
        }
        Ok(match row {
            None => FailureOutcome::Stale,
            Some(row) => FailureOutcome::Recorded {
                state: row.state,
                attempts: row.attempts,
                next_attempt_at: row.next_attempt_at,
            },
        })
    }
}
