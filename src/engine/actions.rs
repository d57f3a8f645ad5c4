//! Operator actions: `start`, `pause`, `resume` and `retry` in a
//! transaction of their own or inside the caller's (`act_in`), and
//! explicit validation inside the caller's (`validate_in`).

use super::config::millis;
use super::error::{body_error, EngineError};
use super::outcome::{ActionOutcome, ExplicitOutcome, ExplicitValidation, Started};
use super::Engine;
use crate::events::Event;
use crate::lifecycle::{Action, State};
use crate::repair::{bounded, BodyError, DynRepair, EncodedSource, Validation};
use crate::store::{self, BackfillRow, StartValues, StoreError};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use std::convert::Infallible;

/// The outcome of the definition's validation, run inside a savepoint that
/// is always rolled back so explicit validation stays read-only (VAL-4).
enum Sandbox {
    Verdict(Result<Validation, BodyError>),
    Db(diesel::result::Error),
}

impl From<diesel::result::Error> for Sandbox {
    fn from(e: diesel::result::Error) -> Self {
        Sandbox::Db(e)
    }
}

impl Engine {
    /// `start` (docs/CONTRACT.md section 3) in its own transaction; see
    /// [`Started`] for what a second call answers.
    pub async fn start(&self, id: &str) -> Result<Started, EngineError> {
        Ok(match self.act(id, Action::Start).await? {
            ActionOutcome::Applied { row, .. } => Started::Started(row),
            ActionOutcome::Converged(row) | ActionOutcome::Conflict(row) => {
                Started::AlreadyStarted {
                    state: row.state,
                    row,
                }
            }
        })
    }

    /// Record on the `pending` row why its automatic start failed, and
    /// publish it ([`Event::StartFailed`]) once recorded (EMB-8). `false`:
    /// the row is no longer `pending` (another process started it), and
    /// nothing was recorded or published. A later successful start clears
    /// the record.
    pub(crate) async fn record_start_failure(
        &self,
        id: &str,
        kind: &'static str,
        diagnostic: &str,
        retrying: bool,
    ) -> Result<bool, EngineError> {
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let recorded =
            store::backfill_start_failure_record(&mut conn, id, kind, diagnostic).await?;
        if recorded {
            self.events.publish(|| Event::StartFailed {
                id: id.to_string(),
                kind,
                diagnostic: diagnostic.to_string(),
                retrying,
            });
        }
        Ok(recorded)
    }

    /// `pause` in its own transaction.
    pub async fn pause(&self, id: &str) -> Result<ActionOutcome, EngineError> {
        self.act(id, Action::Pause).await
    }

    /// `resume` in its own transaction.
    pub async fn resume(&self, id: &str) -> Result<ActionOutcome, EngineError> {
        self.act(id, Action::Resume).await
    }

    /// `retry` in its own transaction.
    pub async fn retry(&self, id: &str) -> Result<ActionOutcome, EngineError> {
        self.act(id, Action::Retry).await
    }

    /// Perform `action` in its own transaction.
    pub async fn act(&self, id: &str, action: Action) -> Result<ActionOutcome, EngineError> {
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let id = id.to_string();
        conn.transaction::<_, EngineError, _>(async |conn| self.act_in(conn, &id, action).await)
            .await
    }

    /// Perform a lifecycle action inside the caller's transaction (the admin
    /// layer adds its audit row and idempotency record to the same one).
    /// Locks the row first, so the prior state is exact and concurrent
    /// actions on one ID serialize. `start` captures the bound with the
    /// local definition in this same transaction (docs/CONTRACT.md section 3). No
    /// action changes bound or checkpoint or selects `completed` (LC-4).
    #[doc(hidden)]
    pub async fn act_in(
        &self,
        conn: &mut AsyncPgConnection,
        id: &str,
        action: Action,
    ) -> Result<ActionOutcome, EngineError> {
        let row = store::backfill_lock(conn, id)
            .await?
            .ok_or_else(|| EngineError::UnknownBackfill(id.to_string()))?;
        let prior = row.state;
        if matches!(action, Action::Resume | Action::Retry) {
            self.refuse_if_undone(conn, id).await?;
        }
        if !action.sources().contains(&prior) {
            return Ok(if action.converged().contains(&prior) {
                ActionOutcome::Converged(Box::new(row))
            } else {
                ActionOutcome::Conflict(Box::new(row))
            });
        }
        let after = match action {
            Action::Start => self.start_in(conn, id).await?,
            Action::Pause => store::backfill_pause(conn, id).await?,
            Action::Resume => store::backfill_reactivate(conn, id, &[State::Paused], false).await?,
            Action::Retry => {
                store::backfill_reactivate(conn, id, &[State::Blocked, State::Failed], true).await?
            }
            Action::Validate => None,
        };
        // Every partition's in-flight batch is fenced by the transaction
        // that changes the backfill's state (PAR-3); a backfill without
        // partitions has no rows to fence.
        if after.is_some() && matches!(action, Action::Pause | Action::Resume | Action::Retry) {
            store::partitions_fence(conn, id, action == Action::Retry).await?;
        }
        // Wake every supervisor when work became claimable (a hint,
        // delivered only on commit).
        if matches!(action, Action::Start | Action::Resume | Action::Retry) && after.is_some() {
            store::wake_notify(conn, id).await?;
        }
        // The row is locked, so the fenced UPDATE cannot miss; if it did,
        // report the current state rather than a transition.
        Ok(match after {
            Some(row) => ActionOutcome::Applied {
                prior,
                row: Box::new(row),
            },
            None => ActionOutcome::Conflict(Box::new(row)),
        })
    }

    /// Explicit validation (VAL-4..7) inside the caller's transaction (the
    /// admin layer holds the idempotency-key lock and adds its audit row
    /// and stored response to the same one). Nothing runs on a `pending`
    /// row, and the definition runs only under the non-waiting per-ID
    /// advisory lock (VAL-6) and once the checkpoint reached the bound; it
    /// runs in a savepoint that is always rolled back, and only its bounded
    /// outcome is recorded (`validation_record`). No claim is taken and no
    /// lifecycle, bound, checkpoint or generation changes (VAL-5). The row
    /// is read, not locked, as it was read before the definition ran.
    pub(crate) async fn validate_in(
        &self,
        conn: &mut AsyncPgConnection,
        id: &str,
    ) -> Result<ExplicitValidation, EngineError> {
        let row = store::backfill_get(conn, id)
            .await?
            .ok_or_else(|| EngineError::UnknownBackfill(id.to_string()))?;
        let reached_bound =
            row.empty_source || (row.bound.is_some() && row.checkpoint == row.bound);
        let outcome = if row.state == State::Pending {
            ExplicitOutcome::NotStarted
        } else if !store::validation_try_lock(conn, id).await? {
            ExplicitOutcome::Busy
        } else if !(matches!(row.state, State::Validating | State::Completed)
            || (matches!(row.state, State::Paused | State::Blocked | State::Failed)
                && reached_bound))
        {
            ExplicitOutcome::NotAtBound
        } else if let Some(def) = self.registry.get(id).cloned() {
            self.validate_sandboxed(conn, &*def, id, row.bound.as_deref())
                .await?
        } else {
            ExplicitOutcome::NoDefinition
        };
        Ok(ExplicitValidation { row, outcome })
    }

    /// The definition's validation of explicit validation, with the
    /// validation timeouts, in a savepoint that is always rolled back; a
    /// verdict is recorded with PostgreSQL's time, read back.
    async fn validate_sandboxed(
        &self,
        conn: &mut AsyncPgConnection,
        def: &dyn DynRepair,
        id: &str,
        bound: Option<&[u8]>,
    ) -> Result<ExplicitOutcome, EngineError> {
        store::batch_set_timeouts(
            conn,
            millis(self.config.validation_timeout),
            millis(self.config.lock_timeout),
        )
        .await?;
        let sandbox = conn
            .transaction::<Infallible, Sandbox, _>(async |c| {
                Err(Sandbox::Verdict(def.validate(c, bound).await))
            })
            .await;
        let verdict = match sandbox {
            Err(Sandbox::Verdict(Ok(verdict))) => verdict,
            // Not a verdict on the data: nothing ran.
            Err(Sandbox::Verdict(Err(e))) => return Ok(ExplicitOutcome::NotRun(e)),
            Err(Sandbox::Db(e)) => return Err(e.into()),
            Ok(never) => match never {},
        };
        let (outcome, detail) = match verdict {
            Validation::Success => ("success", None),
            Validation::Failure(d) | Validation::Blocked(d) => ("failure", Some(bounded(d))),
        };
        store::validation_record(conn, id, outcome, detail.as_deref()).await?;
        // The recorded time is PostgreSQL's, read back.
        let after = store::backfill_get(conn, id)
            .await?
            .ok_or_else(|| EngineError::UnknownBackfill(id.to_string()))?;
        Ok(ExplicitOutcome::Recorded {
            outcome,
            detail,
            validated_at: after.validated_at,
        })
    }

    async fn start_in(
        &self,
        conn: &mut AsyncPgConnection,
        id: &str,
    ) -> Result<Option<BackfillRow>, EngineError> {
        let def = self
            .registry
            .get(id)
            .ok_or_else(|| EngineError::NoDefinition(id.to_string()))?;
        store::batch_set_timeouts(
            conn,
            millis(self.config.validation_timeout),
            millis(self.config.lock_timeout),
        )
        .await?;
        let source = def.capture(conn).await.map_err(|e| body_error(id, e))?;
        let key_type = def.key_type();
        let values = match &source {
            EncodedSource::Empty => StartValues {
                bound: None,
                bound_json: None,
                key_type: &key_type,
                source_rows: Some(0),
            },
            EncodedSource::Bounded {
                upper,
                upper_json,
                rows,
            } => StartValues {
                bound: Some(upper),
                bound_json: Some(upper_json),
                key_type: &key_type,
                source_rows: *rows,
            },
        };
        let started = store::backfill_start(conn, id, values).await?;
        if let (Some(_), EncodedSource::Bounded { upper, .. }) = (&started, &source) {
            super::partition::split_in(conn, &**def, id, upper).await?;
        }
        Ok(started)
    }
}
