//! The batch commit seam (EX-6, CLM-2): one fenced batch per call, and the
//! three ways its commit travels. At the bound the fence and COMMIT go
//! alone. Otherwise the same message opens the next batch's transaction,
//! and either the next batch's body runs on the pair's other connection
//! while this one commits (overlapped), or the next batch's one-statement
//! body is pipelined behind the commit on the same connection.

use super::claim::{rollback_to_pool, Claim, Open};
use super::config::millis;
use super::error::{body_error, EngineError, TxError};
use super::outcome::BatchOutcome;
use super::Engine;
use crate::key::{render_json, KeyError};
use crate::repair::{BodyError, DynRepair, SelectedBatch, SelectionError};
use crate::store::{self, PooledConn, StoreError};
use diesel_async::AsyncPgConnection;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Where the batch after this one stands once this one committed.
// One value per batch, moved once and never stored: boxing the connection
// would allocate on every batch to save a stack copy.
#[allow(clippy::large_enum_variant)]
enum Next {
    /// On this batch's connection: its body already sent behind the
    /// commit (`Some`) or not yet run (`None`).
    Same(Option<Result<SelectedBatch, BodyError>>),
    /// Run on the pair's other connection while this batch committed.
    Other(PooledConn<'static>, Result<SelectedBatch, BodyError>),
    /// Nothing opened: the commit went alone because the operator asked
    /// for a pause between batches, through which an open transaction
    /// would sit idle.
    Fresh,
}

impl Next {
    /// Keys the next batch's body selected and changed in this step.
    fn keys(&self) -> usize {
        match self {
            Next::Same(Some(Ok(selected))) | Next::Other(_, Ok(selected)) => selected.keys,
            _ => 0,
        }
    }
}

/// A committed batch: the claim's new checkpoint, the keys it changed, and
/// the next batch (`None`: the checkpoint reached the bound and the claim
/// ended).
struct Committed {
    checkpoint: Vec<u8>,
    keys: usize,
    next: Option<Next>,
    /// Keys selected and changed by the bodies that ran in this step: this
    /// batch's own (unless it was sent ahead by the previous step) and the
    /// next batch's. What the step's duration is the cost of (THR-3).
    ran: usize,
}

/// What every step of one batch reads: the definition, the claim's bound,
/// the size in force (the limit every body of this step is given and
/// checked against, EX-4 and THR-3), the batch timeouts in milliseconds,
/// and whether the commit goes alone, opening no next batch (a repair
/// with a loop inside the server, whose next step is a call of the loop).
struct Seam<'a> {
    def: &'a dyn DynRepair,
    bound: &'a [u8],
    limit: u32,
    stmt_ms: i64,
    lock_ms: i64,
    alone: bool,
}

impl Engine {
    /// Run one fenced batch (the commit seam, EX-6 and CLM-2): in ONE
    /// transaction set the timeouts, select at most the batch limit of keys
    /// in `(checkpoint, bound]`, check them (EX-3, EX-4), mutate, and advance
    /// the checkpoint with the fence. Any failure rolls back both mutation
    /// and checkpoint. On success the claim's checkpoint is updated.
    #[doc(hidden)]
    pub async fn run_batch(&self, claim: &mut Claim) -> Result<BatchOutcome, EngineError> {
        let def = self
            .registry
            .get(&claim.id)
            .ok_or_else(|| EngineError::NoDefinition(claim.id.clone()))?;
        if claim.bound.is_none() {
            // A running row always has a bound (the table's CHECK); a claim
            // without one is not ours to interpret.
            return Err(EngineError::KeyMismatch {
                id: claim.id.clone(),
                error: KeyError::Malformed,
            });
        }
        let started = Instant::now();
        let limit = claim.pacing.size(&**def);
        let stmt_ms = millis(self.config.statement_timeout);
        let lock_ms = millis(self.config.lock_timeout);
        // The transaction the previous batch's commit opened (maybe with
        // this batch's body already run), or a fresh one: BEGIN and the
        // SET LOCAL timeouts in one round trip, or a call of the repair's
        // loop inside the server (EX-8). `alone`: the repair has such a
        // loop, so this batch opens no next one.
        let (mut pooled, ahead, mut spare, alone) = match claim.open.take() {
            Some(Open { conn, ahead, spare }) => {
                (conn, ahead, spare, self.loops.installed(def.id()))
            }
            None => {
                let mut conn = self.pool.get_owned().await.map_err(StoreError::from)?;
                let server = self.server_loop(&**def, &mut conn).await?;
                // The loop runs at the declared size only (its statement
                // has the limit written in), and not between batches the
                // operator asked to pause between.
                if let Some(installed) = &server {
                    if limit == def.batch_limit() && !claim.pacing.pausing() {
                        return self.run_slice(claim, installed, limit, conn).await;
                    }
                }
                store::batch_begin(&mut conn, stmt_ms, lock_ms).await?;
                (conn, None, None, server.is_some())
            }
        };
        let seam = Seam {
            def: &**def,
            bound: claim.bound.as_deref().unwrap_or_default(),
            limit,
            stmt_ms,
            lock_ms,
            alone,
        };
        // The size this batch's body ran with: this step's, or the size in
        // force when the previous step sent it ahead.
        let own_size = match ahead {
            Some(_) => claim.pacing.sent_ahead,
            None => limit,
        };
        let overlap = self.decide_overlap(seam.def, &mut spare).await;
        // The body borrows the claim instead of cloning it per batch.
        let body = self
            .batch_in(&seam, claim, &mut pooled, ahead, overlap, &mut spare)
            .await;
        // A spare the batch did not use (it failed first, or reached the
        // bound) goes back to the pool, its empty transaction rolled back.
        if let Some(spare) = spare.take() {
            rollback_to_pool(spare).await;
        }
        let result = match body {
            Ok(done) => Ok(done),
            Err(error) => {
                // Mutation and checkpoint roll back together (EX-6), and so
                // does a next batch sent behind a failed commit. If the
                // rollback itself fails, the connection reports itself
                // broken and the pool discards it; the batch error is the
                // one worth returning.
                let _ = store::batch_rollback(&mut pooled).await;
                Err(error)
            }
        };
        if let Ok(done) = &result {
            claim
                .pacing
                .committed(own_size, limit, done.ran, started.elapsed());
        }
        settle(claim, pooled, result)
    }

    /// Whether this batch overlaps its commit with the next batch's body
    /// (`Repair::overlap_commits`), giving a held spare back first when the
    /// pool is short. A repair that overlaps but cannot is counted
    /// (`serial_fallbacks`).
    async fn decide_overlap(
        &self,
        def: &dyn DynRepair,
        spare: &mut Option<PooledConn<'static>>,
    ) -> bool {
        // A spare held from earlier batches goes back while the pool is
        // short, so that other runners' claims, renewals and validation get
        // a connection within one batch instead of waiting for this claim
        // to end.
        if let Some(spare) = spare.take_if(|_| !self.pool_can_spare(true)) {
            rollback_to_pool(spare).await;
        }
        let overlap = def.overlap_commits() && (spare.is_some() || self.pool_can_spare(false));
        if def.overlap_commits() && !overlap {
            self.serial_fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        overlap
    }

    /// The batch inside its transaction on `conn`: its body (or the one
    /// sent ahead), the check that the checkpoint moves forward, and the
    /// commit in the one of the three ways that fits. An error here leaves
    /// the transaction for the caller to roll back.
    async fn batch_in(
        &self,
        seam: &Seam<'_>,
        claim: &Claim,
        conn: &mut AsyncPgConnection,
        ahead: Option<Result<SelectedBatch, BodyError>>,
        overlap: bool,
        spare: &mut Option<PooledConn<'static>>,
    ) -> Result<Committed, TxError> {
        let expected = claim.checkpoint.as_deref();
        let own_body = ahead.is_none();
        let selected = match ahead {
            Some(selected) => selected,
            None => seam.def.batch(conn, expected, seam.bound, seam.limit).await,
        }
        .map_err(|e| body_error(&claim.id, e))?;
        let keys = selected.keys;
        let (checkpoint, checkpoint_json) = next_checkpoint(claim, selected, seam.bound)?;
        let advance = store::Advance {
            id: &claim.id,
            part: claim.partition,
            worker: &claim.worker,
            generation: claim.generation,
            expected,
            checkpoint: &checkpoint,
            checkpoint_json: &checkpoint_json,
            rows: keys as i64,
            batch_size: i32::try_from(seam.limit).unwrap_or(i32::MAX),
        };
        // At the bound the row leaves `running` and the claim ends, so
        // no next batch is opened.
        let next = if checkpoint.as_slice() == seam.bound {
            commit_alone(conn, &advance).await?;
            None
        } else if claim.pacing.pausing() || seam.alone {
            commit_alone(conn, &advance).await?;
            Some(Next::Fresh)
        } else if overlap {
            Some(
                self.commit_overlapped(seam, conn, &advance, spare.take())
                    .await?,
            )
        } else {
            Some(commit_pipelined(seam, conn, &advance).await?)
        };
        let ran = if own_body { keys } else { 0 } + next.as_ref().map_or(0, Next::keys);
        Ok(Committed {
            checkpoint,
            keys,
            next,
            ran,
        })
    }

    /// Overlapped commit: the fence, the COMMIT and the next BEGIN on this
    /// connection while the next batch's body runs on the other
    /// (`Repair::overlap_commits`). That body commits only with the next
    /// batch's fence, which is sent after this commit returned and expects
    /// this checkpoint.
    async fn commit_overlapped(
        &self,
        seam: &Seam<'_>,
        conn: &AsyncPgConnection,
        advance: &store::Advance<'_>,
        spare: Option<PooledConn<'static>>,
    ) -> Result<Next, TxError> {
        let (fence, other) = futures_util::join!(
            store::checkpoint_advance_commit_reopen(conn, advance, seam.stmt_ms, seam.lock_ms),
            self.body_on_spare(seam, spare, advance.checkpoint)
        );
        let committed = matches!(fence, Ok(store::FenceCommit::Committed));
        let next = match other {
            Some((other, selected)) if committed => Next::Other(other, selected),
            Some((other, _)) => {
                rollback_to_pool(other).await;
                Next::Same(None)
            }
            None => {
                self.serial_fallbacks.fetch_add(1, Ordering::Relaxed);
                Next::Same(None)
            }
        };
        if fence? == store::FenceCommit::Stale {
            return Err(TxError::Stale);
        }
        Ok(next)
    }

    /// The next batch's body on the pair's other connection, for a repair
    /// that overlaps commits: `spare`, or a connection taken from the pool
    /// and begun (`BEGIN` and the timeouts). `None`: no connection could be
    /// had within [`spare_wait`] and nothing ran; the next batch
    /// then runs on the claim's own connection as usual.
    ///
    /// Why the wait is bounded: `pool_can_spare` only looked, so others may
    /// take the free connections before this get, and the pool's own
    /// timeout is 10 s. Meanwhile the claim's connection holds the next
    /// batch's open transaction, which the server ends once it sits idle
    /// for the statement timeout (EX-5). A get that gives up leaves any
    /// connection it started opening to the pool, for the next batch.
    async fn body_on_spare(
        &self,
        seam: &Seam<'_>,
        spare: Option<PooledConn<'static>>,
        after: &[u8],
    ) -> Option<(PooledConn<'static>, Result<SelectedBatch, BodyError>)> {
        let mut conn = match spare {
            Some(conn) => conn,
            None => {
                let mut conn = tokio::time::timeout(
                    spare_wait(self.config.statement_timeout),
                    self.pool.get_owned(),
                )
                .await
                .ok()?
                .ok()?;
                store::batch_begin(&mut conn, seam.stmt_ms, seam.lock_ms)
                    .await
                    .ok()?;
                conn
            }
        };
        let selected = seam
            .def
            .batch(&mut conn, Some(after), seam.bound, seam.limit)
            .await;
        Some((conn, selected))
    }

    /// Whether a runner may take (`holding` false) or keep (`holding`
    /// true) a second connection (`Open::spare`): only while two more stay
    /// free for claims, renewals, validation and the admin API, which is
    /// what the host's minimum pool size reserves. Checked before every
    /// batch, not only when the spare is taken: runners claimed later take
    /// their own connections, and a kept spare would then hold the reserve.
    fn pool_can_spare(&self, holding: bool) -> bool {
        let state = self.pool.state();
        let busy = state.connections.saturating_sub(state.idle_connections);
        let free = self.pool.config().max_size.saturating_sub(busy);
        free >= if holding { 2 } else { 3 }
    }
}

/// How long [`Engine::body_on_spare`] waits for a pool connection: long
/// enough to open one to a distant server (up to a second), and at most
/// half the idle time the server allows the claim's open transaction (its
/// statement timeout).
fn spare_wait(statement_timeout: Duration) -> Duration {
    (statement_timeout / 2).min(Duration::from_secs(1))
}

/// The checkpoint this batch commits, as bytes and JSON: its last key, or
/// the bound when no key is left.
fn next_checkpoint(
    claim: &Claim,
    selected: SelectedBatch,
    bound: &[u8],
) -> Result<(Vec<u8>, serde_json::Value), TxError> {
    // No key left in (checkpoint, bound]: the rest of the range
    // needs nothing, so the checkpoint moves to the bound.
    let (checkpoint, checkpoint_json) = match selected.last {
        Some(last) => last,
        None => (
            bound.to_vec(),
            render_json(bound).unwrap_or(serde_json::Value::Null),
        ),
    };
    // Stored checkpoints compare by their encoding, and the fence
    // wants it strictly forward. A key type whose encoding does not
    // strictly follow its own order (a timestamp below microsecond
    // precision encodes equal to its neighbour) would meet the
    // fence as a stale claim, batch after batch, never recorded;
    // fail closed with the reason instead (EX-3).
    if claim
        .checkpoint
        .as_deref()
        .is_some_and(|e| checkpoint.as_slice() <= e)
    {
        return Err(body_error(
            &claim.id,
            BodyError::Selection(SelectionError::NotAfterCheckpoint),
        )
        .into());
    }
    Ok((checkpoint, checkpoint_json))
}

/// Commit alone: the fence and the COMMIT in one message, and no next
/// batch opened behind them (at the bound, or before a pause).
async fn commit_alone(
    conn: &mut AsyncPgConnection,
    advance: &store::Advance<'_>,
) -> Result<(), TxError> {
    let fence = store::checkpoint_advance_commit(conn, advance).await?;
    if fence == store::FenceCommit::Stale {
        return Err(TxError::Stale);
    }
    Ok(())
}

/// Pipelined commit: the fence, the COMMIT, the next BEGIN and the next
/// batch's one-statement body (if the repair has one) in one round trip
/// (CLM-2, EX-6). The body runs after the commit, in the new transaction,
/// and commits only with the next batch's fence.
async fn commit_pipelined(
    seam: &Seam<'_>,
    conn: &AsyncPgConnection,
    advance: &store::Advance<'_>,
) -> Result<Next, TxError> {
    let (fence, next) = futures_util::join!(
        store::checkpoint_advance_commit_reopen(conn, advance, seam.stmt_ms, seam.lock_ms),
        seam.def
            .batch_ahead(conn, Some(advance.checkpoint), seam.bound, seam.limit)
    );
    if fence? == store::FenceCommit::Stale {
        return Err(TxError::Stale);
    }
    Ok(Next::Same(next.transpose()))
}

/// Hand a batch's result to the claim: its new checkpoint and the next
/// batch's open transaction, on this batch's connection or, after an
/// overlapped commit, on the pair's other one with this one as the spare.
fn settle(
    claim: &mut Claim,
    pooled: PooledConn<'static>,
    result: Result<Committed, TxError>,
) -> Result<BatchOutcome, EngineError> {
    match result {
        Ok(Committed {
            checkpoint,
            keys,
            next,
            ..
        }) => {
            claim.checkpoint = Some(checkpoint);
            let reached_bound = next.is_none();
            match next {
                None | Some(Next::Fresh) => {}
                Some(Next::Same(ahead)) => claim.open.put(Open {
                    conn: pooled,
                    ahead,
                    spare: None,
                }),
                Some(Next::Other(other, ahead)) => claim.open.put(Open {
                    conn: other,
                    ahead: Some(ahead),
                    spare: Some(pooled),
                }),
            }
            Ok(BatchOutcome::Committed {
                keys,
                reached_bound,
            })
        }
        Err(TxError::Stale | TxError::Busy) => Ok(BatchOutcome::Stale),
        Err(TxError::Engine(e)) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::{next_checkpoint, spare_wait, Next};
    use crate::engine::claim::Claim;
    use crate::engine::error::{EngineError, TxError};
    use crate::engine::tests::{one_definition, unconnected_engine};
    use crate::key::Key;
    use crate::repair::{BodyError, RepairError, SelectedBatch, SelectionError};
    use std::time::Duration;

    /// The wait for a spare connection is half the open transaction's idle
    /// allowance, capped at a second.
    #[test]
    fn ex05_spare_wait_is_half_the_statement_timeout_up_to_a_second() {
        let ms = Duration::from_millis;
        assert_eq!(spare_wait(ms(601)), ms(300) + Duration::from_micros(500));
        assert_eq!(spare_wait(ms(1_999)), ms(999) + Duration::from_micros(500));
        assert_eq!(spare_wait(ms(2_000)), ms(1_000));
        assert_eq!(spare_wait(Duration::from_secs(30)), ms(1_000));
    }

    /// A claim of `t.v1` whose committed checkpoint is `checkpoint`.
    fn claim_at(checkpoint: Option<i64>) -> Claim {
        Claim {
            bound: Some(100i64.to_bytes()),
            checkpoint: checkpoint.map(|c| c.to_bytes()),
            ..crate::engine::claim::tests::idle_claim()
        }
    }

    /// A body's result that selected `keys` keys up to `last`.
    fn selected(keys: usize, last: Option<i64>) -> SelectedBatch {
        SelectedBatch {
            keys,
            last: last.map(|l| (l.to_bytes(), serde_json::json!(l))),
        }
    }

    /// THR-3: a step's duration is the cost of the keys its bodies
    /// changed, so the next batch's body counts only when it ran and
    /// succeeded.
    #[test]
    fn thr03_the_next_batch_counts_the_keys_its_body_changed() {
        assert_eq!(Next::Same(Some(Ok(selected(7, Some(9))))).keys(), 7);
        assert_eq!(Next::Same(None).keys(), 0);
        assert_eq!(Next::Fresh.keys(), 0);
        let failed = BodyError::Repair(RepairError::Retryable("x".into()));
        assert_eq!(Next::Same(Some(Err(failed))).keys(), 0);
    }

    /// EX-3: the checkpoint moves to the batch's last key, or to the bound
    /// when no key was left, and only strictly forward: a last key at or
    /// below the committed checkpoint is refused as a selection error.
    #[test]
    fn ex03_the_checkpoint_moves_strictly_forward_to_the_last_key_or_the_bound() {
        let bound = 100i64.to_bytes();
        let forward = next_checkpoint(&claim_at(Some(5)), selected(2, Some(7)), &bound);
        assert_eq!(forward.ok(), Some((7i64.to_bytes(), serde_json::json!(7))));
        let first = next_checkpoint(&claim_at(None), selected(1, Some(1)), &bound);
        assert_eq!(first.ok(), Some((1i64.to_bytes(), serde_json::json!(1))));
        let rest = next_checkpoint(&claim_at(Some(5)), selected(0, None), &bound);
        assert_eq!(rest.ok(), Some((bound.clone(), serde_json::json!(100))));
        for last in [5, 3] {
            let refused = next_checkpoint(&claim_at(Some(5)), selected(1, Some(last)), &bound);
            assert!(
                matches!(
                    refused,
                    Err(TxError::Engine(EngineError::Selection {
                        error: SelectionError::NotAfterCheckpoint,
                        ..
                    }))
                ),
                "last key {last}"
            );
        }
    }

    /// EMB-6: a runner takes a second connection only while three stay
    /// free, and keeps one only while two do, so the pool's reserve for
    /// claims, renewals, validation and the admin API holds.
    #[test]
    fn emb06_a_spare_connection_leaves_the_pools_reserve_free() {
        for (max_size, take, keep) in [(3, true, true), (2, false, true), (1, false, false)] {
            let engine = unconnected_engine(one_definition(10), max_size);
            assert_eq!(engine.pool_can_spare(false), take, "take of {max_size}");
            assert_eq!(engine.pool_can_spare(true), keep, "keep of {max_size}");
        }
    }
}
