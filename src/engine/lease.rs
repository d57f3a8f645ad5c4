//! A claim's life outside its batches: taking it (new or by takeover),
//! renewing its lease, giving it back, and ending it with a recorded
//! failure.

use super::claim::{check_claimed, rollback_to_pool, Claim, Open, OpenBatch, Phase};
use super::config::millis;
use super::error::EngineError;
use super::outcome::FailureOutcome;
use super::partition::claim_partition_in;
use super::Engine;
use crate::lifecycle::State;
use crate::repair::RepairError;
use crate::store::{self, StoreError};
use crate::throttle::budget::Permit;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use std::time::Instant;

impl Engine {
    /// Claim the next eligible backfill this process has a definition for,
    /// skipping `exclude` (CLM-1). A new claim or a takeover after expiry
    /// advances the generation. If the row's bound or checkpoint is not of
    /// the local key type, the claim is rolled back and a typed
    /// [`EngineError::KeyMismatch`] returned: nothing changes (REG-4).
    #[doc(hidden)]
    pub async fn claim_next(
        &self,
        worker: &str,
        exclude: &[String],
    ) -> Result<Option<Claim>, EngineError> {
        self.claim_next_excluding(worker, exclude, &[]).await
    }

    /// [`Engine::claim_next`], also skipping the partitions in
    /// `exclude_parts` (those this process already holds). A backfill
    /// without partitions, or one in `validating`, is claimed on its own
    /// row first; otherwise a partition of a `running` partitioned
    /// backfill (PAR-2). A backfill whose definition starts after others
    /// is skipped while any of them is not `completed` (FLT-4).
    #[doc(hidden)]
    pub async fn claim_next_excluding(
        &self,
        worker: &str,
        exclude: &[String],
        exclude_parts: &[(String, u32)],
    ) -> Result<Option<Claim>, EngineError> {
        let ids = self.registry.claimable_ids();
        if ids.is_empty() {
            return Ok(None);
        }
        let ttl = millis(self.config.lease_ttl);
        let registry = self.registry.clone();
        let worker = worker.to_string();
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let ids = if registry.has_dependencies() {
            // Read before the claim's transaction: a dependency that
            // completes just after this read is seen by the next poll.
            let completed =
                store::backfill_completed_among(&mut conn, &registry.all_dependencies()).await?;
            ids.into_iter()
                .filter(|id| {
                    registry
                        .dependencies(id)
                        .iter()
                        .all(|d| completed.contains(d))
                })
                .collect()
        } else {
            ids
        };
        if ids.is_empty() {
            return Ok(None);
        }
        // First see which work is claimable, without a transaction, so an
        // idle poll is one read; with priorities or a budget, then claim
        // only the one repair chosen (FLT-2).
        let (ids, permit) = match self
            .choose(&mut conn, &worker, ids, exclude, exclude_parts)
            .await?
        {
            Some(chosen) => chosen,
            None => return Ok(None),
        };
        let claimed = conn
            .transaction::<_, EngineError, _>(async |conn| {
                let Some(row) = store::backfill_claim(conn, &worker, &ids, exclude, ttl).await?
                else {
                    let ids: Vec<String> = ids
                        .iter()
                        .filter(|id| !exclude.contains(id))
                        .cloned()
                        .collect();
                    return claim_partition_in(conn, &registry, &worker, &ids, exclude_parts, ttl)
                        .await;
                };
                check_claimed(
                    &registry,
                    &row.id,
                    [row.bound.as_deref(), row.checkpoint.as_deref()],
                )?;
                let phase = match row.state {
                    State::Running => Phase::Execute,
                    State::Validating => Phase::Validate,
                    _ => return Err(EngineError::UnknownState(row.id.clone())),
                };
                Ok(Some(Claim {
                    id: row.id,
                    worker: worker.clone(),
                    generation: row.generation,
                    phase,
                    partition: None,
                    takeover_from: row.prior_owner,
                    bound: row.bound,
                    checkpoint: row.checkpoint,
                    open: OpenBatch::default(),
                    pacing: Default::default(),
                    permit: None,
                }))
            })
            .await?;
        self.note_poll_answered();
        Ok(claimed.map(|mut claim| {
            claim.permit = permit;
            claim
        }))
    }

    /// Which repairs a claim may take, after one read of what is
    /// claimable: `None` when nothing is (so an idle poll opens no
    /// transaction); all of `ids` when no definition has a priority and no
    /// budget is attached; otherwise the one claimable repair of highest
    /// priority (that the budget's rollout cap allows), with the budget's
    /// permit for it (FLT-2), or `None` without a permit (the budget then
    /// knows this database waits).
    async fn choose(
        &self,
        conn: &mut AsyncPgConnection,
        worker: &str,
        ids: Vec<String>,
        exclude: &[String],
        exclude_parts: &[(String, u32)],
    ) -> Result<Option<(Vec<String>, Option<Permit>)>, EngineError> {
        let budget = self.budget.get();
        let part_ids: Vec<String> = exclude_parts.iter().map(|(id, _)| id.clone()).collect();
        let parts: Vec<i32> = exclude_parts
            .iter()
            .map(|(_, p)| i32::try_from(*p).unwrap_or(i32::MAX))
            .collect();
        // The poll carries the process's presence when it is due, so an
        // idle database answers one query per poll (PAR-6, FLT-1).
        let claimable = match self.offers.due(worker) {
            Some(beat) => {
                let sent = Instant::now();
                let claimable = store::backfill_claimable_heartbeat(
                    conn, &ids, exclude, &part_ids, &parts, &beat,
                )
                .await?;
                self.offers.polled(&beat, sent);
                claimable
            }
            None => store::backfill_claimable(conn, &ids, exclude, &part_ids, &parts).await?,
        };
        self.note_poll_answered();
        if claimable.is_empty() {
            return Ok(None);
        }
        if budget.is_none() && !self.registry.has_priorities() {
            return Ok(Some((ids, None)));
        }
        let candidates: Vec<(String, i32)> = claimable
            .into_iter()
            .map(|id| {
                let priority = self.registry.priority(&id);
                (id, priority)
            })
            .collect();
        Ok(match budget {
            Some((budget, database)) => budget
                .try_take(database, &candidates)
                .map(|permit| (vec![permit.id().to_string()], Some(permit))),
            // Every repair of the highest priority, so equal priorities
            // keep the claim's usual order.
            None => candidates.iter().map(|(_, p)| *p).max().map(|top| {
                let ids = candidates
                    .iter()
                    .filter(|(_, p)| *p == top)
                    .map(|(id, _)| id.clone())
                    .collect();
                (ids, None)
            }),
        })
    }

    /// Renew the listed claims of `worker` in one statement; returns the
    /// `(id, generation)` pairs that were renewed. A claim missing from the
    /// answer is lost: its runner must stop (CLM-3).
    #[doc(hidden)]
    pub async fn renew(
        &self,
        worker: &str,
        claims: &[(String, i64)],
    ) -> Result<Vec<(String, i64)>, EngineError> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = claims.iter().map(|(id, _)| id.clone()).collect();
        let gens: Vec<i64> = claims.iter().map(|(_, g)| *g).collect();
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let rows = store::lease_renew(
            &mut conn,
            worker,
            &ids,
            &gens,
            millis(self.config.lease_ttl),
        )
        .await?;
        Ok(rows.into_iter().map(|r| (r.id, r.generation)).collect())
    }

    /// Record a progress sample of each listed claim `worker` still holds
    /// on a `running` backfill (OBS-5): `(id, part, generation)`. Off the
    /// batch path; returns how many samples were written.
    #[doc(hidden)]
    pub async fn sample_progress(
        &self,
        worker: &str,
        claims: &[store::SampledClaim],
    ) -> Result<i32, EngineError> {
        if claims.is_empty() {
            return Ok(0);
        }
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        Ok(store::progress_sample(&mut conn, worker, claims).await?)
    }

    /// Give a claim back (graceful shutdown). `false`: it was already gone.
    /// An open batch the claim carries is rolled back first, and its
    /// connection does the release; if that connection is gone (the server
    /// ended the idle session), a fresh one does.
    #[doc(hidden)]
    pub async fn release(&self, claim: &Claim) -> Result<bool, EngineError> {
        let reused = match claim.open.take() {
            Some(Open {
                mut conn, spare, ..
            }) => {
                if let Some(spare) = spare {
                    rollback_to_pool(spare).await;
                }
                store::batch_rollback(&mut conn).await.ok().map(|()| conn)
            }
            None => None,
        };
        let mut conn = match reused {
            Some(conn) => conn,
            None => self.pool.get_owned().await.map_err(StoreError::from)?,
        };
        Ok(match claim.partition {
            Some(part) => {
                store::partition_release(
                    &mut conn,
                    &claim.id,
                    part,
                    &claim.worker,
                    claim.generation,
                )
                .await?
            }
            None => {
                store::lease_release(&mut conn, &claim.id, &claim.worker, claim.generation).await?
            }
        })
    }

    /// Durably record a classified execution error and drop the claim
    /// (RT-1, RT-2). Fenced by the claim.
    #[doc(hidden)]
    pub async fn record_failure(
        &self,
        claim: &Claim,
        error: &RepairError,
    ) -> Result<FailureOutcome, EngineError> {
        if let Some(part) = claim.partition {
            return self.record_partition_failure(claim, part, error).await;
        }
        let retry = &self.config.retry;
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let row = store::backfill_record_failure(
            &mut conn,
            &claim.id,
            &claim.worker,
            claim.generation,
            error.kind(),
            &error.message(),
            retry.max_attempts,
            millis(retry.backoff_base),
            millis(retry.backoff_max),
            claim.size_after(error),
        )
        .await?;
        drop(conn);
        if let Some(row) = &row {
            if row.state == State::Blocked {
                self.record_blocking_keys(
                    &claim.id,
                    claim.generation,
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
