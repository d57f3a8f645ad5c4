//! Lifecycle validation of a claimed `validating` row and its fenced
//! completion (VAL-1..3).

use super::claim::Claim;
use super::config::millis;
use super::error::{body_error, EngineError, TxError};
use super::outcome::ValidationRun;
use super::Engine;
use crate::lifecycle::State;
use crate::repair::{bounded, Validation};
use crate::store::{self, StoreError};
use diesel_async::AsyncConnection;

impl Engine {
    /// Lifecycle validation of a claimed `validating` row (VAL-1..3): the
    /// definition's validation and the fenced completion (or rejection)
    /// run in ONE transaction, so a stale validator cannot complete a
    /// paused or retried run. Repair errors roll back and are returned for
    /// [`Engine::record_failure`].
    #[doc(hidden)]
    pub async fn validate_claimed(&self, claim: &Claim) -> Result<ValidationRun, EngineError> {
        let def = self
            .registry
            .get(&claim.id)
            .ok_or_else(|| EngineError::NoDefinition(claim.id.clone()))?
            .clone();
        let (stmt_ms, lock_ms) = (
            millis(self.config.validation_timeout),
            millis(self.config.lock_timeout),
        );
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let result = conn
            .transaction::<_, TxError, _>(async |conn| {
                store::batch_set_timeouts(conn, stmt_ms, lock_ms).await?;
                // VAL-6: lifecycle and explicit validation of one ID never
                // run at the same time, in any process.
                if !store::validation_try_lock(conn, &claim.id).await? {
                    return Err(TxError::Busy);
                }
                let verdict = def
                    .validate(conn, claim.bound.as_deref())
                    .await
                    .map_err(|e| body_error(&claim.id, e))?;
                let (id, worker, generation) = (&claim.id, &claim.worker, claim.generation);
                match verdict {
                    Validation::Success => {
                        if store::validation_complete(conn, id, worker, generation).await? {
                            // Tells waiters in other processes (a hint).
                            store::wake_notify(conn, id).await?;
                            Ok(ValidationRun::Completed)
                        } else {
                            Err(TxError::Stale)
                        }
                    }
                    Validation::Failure(ref detail) | Validation::Blocked(ref detail) => {
                        let state = if matches!(verdict, Validation::Blocked(_)) {
                            State::Blocked
                        } else {
                            State::Failed
                        };
                        let detail = bounded(detail.as_str());
                        if store::validation_reject(conn, id, worker, generation, state, &detail)
                            .await?
                        {
                            store::wake_notify(conn, id).await?;
                            Ok(ValidationRun::Rejected { state, detail })
                        } else {
                            Err(TxError::Stale)
                        }
                    }
                }
            })
            .await;
        drop(conn);
        if let Ok(ValidationRun::Rejected {
            state: State::Blocked,
            ..
        }) = &result
        {
            self.record_blocking_keys(&claim.id, claim.generation, None, claim.bound.as_deref())
                .await;
        }
        match result {
            Ok(run) => Ok(run),
            Err(TxError::Stale) => Ok(ValidationRun::Stale),
            Err(TxError::Busy) => Ok(ValidationRun::Busy),
            Err(TxError::Engine(e)) => Err(e),
        }
    }
}
