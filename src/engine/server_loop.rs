//! The batch loop inside the server (EX-8): a step of a repair that
//! answers [`Repair::server_batch`](crate::repair::Repair::server_batch)
//! is one call of an installed procedure that commits batch after batch
//! behind the same fence, instead of one batch sent by the engine.

use super::claim::Claim;
use super::config::millis;
use super::error::EngineError;
use super::installed::Installed;
use super::outcome::BatchOutcome;
use super::Engine;
use crate::key::Key;
use crate::repair::{DynRepair, RepairError, SelectionError};
use crate::store::{self, PooledConn, SliceCall, SliceOutcome, StoreError};
use diesel_async::AsyncPgConnection;
use std::time::Instant;

impl Engine {
    /// The loop of `def`, installed on first use on `conn` (see
    /// [`store::server_loop_install`]); `None` for a repair without one.
    /// Asked on the connection the batch then runs on, so finding out
    /// costs a repair without a loop no connection of its own.
    pub(super) async fn server_loop(
        &self,
        def: &dyn DynRepair,
        conn: &mut AsyncPgConnection,
    ) -> Result<Option<Installed>, EngineError> {
        if let Some(known) = self.loops.get(def.id()) {
            return Ok(known);
        }
        let installed = match def
            .server_batch(conn)
            .await
            .map_err(|e| super::error::body_error(def.id(), e))?
        {
            None => None,
            Some(batch) => Some(Installed {
                procedure: store::server_loop_install(conn, &batch.statement, def.batch_limit())
                    .await
                    .map_err(|e| install_error(def.id(), e))?
                    .into(),
                slice: batch.slice,
            }),
        };
        self.loops.insert(def.id(), installed.clone());
        Ok(installed)
    }

    /// One step as a call of the loop: batches of `limit` keys from
    /// the claim's checkpoint, each committed with its fenced checkpoint,
    /// for one time slice. The claim's checkpoint follows what committed,
    /// also when a batch failed part way (read back from the row), so the
    /// next step's fence expects the right one.
    pub(super) async fn run_slice(
        &self,
        claim: &mut Claim,
        installed: &Installed,
        limit: u32,
        mut conn: PooledConn<'static>,
    ) -> Result<BatchOutcome, EngineError> {
        let started = Instant::now();
        let stmt_ms = millis(self.config.statement_timeout);
        let key = |bytes: &[u8]| {
            i64::from_bytes(bytes).map_err(|error| EngineError::KeyMismatch {
                id: claim.id.clone(),
                error,
            })
        };
        let from = match claim.checkpoint.as_deref() {
            Some(bytes) => key(bytes)?,
            None => i64::MIN,
        };
        let bound_bytes = claim.bound.clone().unwrap_or_default();
        let bound = key(&bound_bytes)?;
        // A call never outlasts a third of the lease, so the renewer keeps
        // the claim alive through it and a stale owner's call ends soon.
        let slice_ms = millis(installed.slice.min(self.config.lease_ttl / 3));
        let call = SliceCall {
            procedure: &installed.procedure,
            from,
            bound,
            id: &claim.id,
            part: claim.partition,
            worker: &claim.worker,
            generation: claim.generation,
            expected: claim.checkpoint.as_deref(),
            batch_size: i32::try_from(limit).unwrap_or(i32::MAX),
            slice_ms,
            lock_ms: millis(self.config.lock_timeout),
            call_timeout_ms: slice_ms.saturating_add(stmt_ms),
        };
        match store::server_loop_call(&mut conn, &call).await {
            Ok(SliceOutcome::Committed {
                batches,
                keys,
                checkpoint,
            }) => {
                let batches = u32::try_from(batches.max(1)).unwrap_or(u32::MAX);
                let keys = usize::try_from(keys.max(0)).unwrap_or(usize::MAX);
                // Sizing and the progress event see the mean batch.
                claim.pacing.committed(
                    limit,
                    limit,
                    keys / batches as usize,
                    started.elapsed() / batches,
                );
                let reached_bound = checkpoint == bound_bytes;
                claim.checkpoint = Some(checkpoint);
                Ok(BatchOutcome::Committed {
                    keys,
                    reached_bound,
                })
            }
            Ok(SliceOutcome::Stale) => Ok(BatchOutcome::Stale),
            Err(error) => {
                if let Ok(checkpoint) =
                    store::claim_checkpoint_get(&mut conn, &claim.id, claim.partition).await
                {
                    claim.checkpoint = checkpoint;
                }
                Err(slice_error(&claim.id, error))
            }
        }
    }
}

/// A failed call's error as a failed batch's: the loop's own check of the
/// batch contract (`BF002`) as a selection error (EX-3, EX-4), any other
/// database error classified like the repair's own SQL (RT-1), and the
/// rest (no connection) as the store's.
fn slice_error(id: &str, error: StoreError) -> EngineError {
    match error {
        StoreError::Database(diesel::result::Error::DatabaseError(_, info))
            if info.message() == "backfill batch broke the batch contract" =>
        {
            EngineError::Selection {
                id: id.to_string(),
                error: SelectionError::Inconsistent,
            }
        }
        StoreError::Database(error) => EngineError::Repair {
            id: id.to_string(),
            error: RepairError::from(error),
        },
        error => EngineError::Store(error),
    }
}

/// An installation's database error as a block the operator can act on
/// (RT-1): the statement does not compile as PL/pgSQL, the engine's role
/// lacks the right to create the procedure, or the search path names no
/// schema to create it in. Nothing ran.
fn install_error(id: &str, error: StoreError) -> EngineError {
    match error {
        StoreError::Database(error) => EngineError::Repair {
            id: id.to_string(),
            error: RepairError::Blocked(format!(
                "the loop inside the server could not be installed ({}): check the repair's \
                 statement, and that the engine's role has CREATE on the first schema of \
                 its search path",
                crate::failure::describe(&error)
            )),
        },
        error => EngineError::Store(error),
    }
}
