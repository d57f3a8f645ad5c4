//! The undo actions without HTTP (UNDO-2, UNDO-4): `POST
//! /admin/backfills/{id}/undo` starts the reverse backfill of a journaled
//! backfill, `POST /admin/backfills/{id}/journal/prune` deletes a journal
//! no undo needs. Both need `backfill:operate`, an Idempotency-Key, and
//! commit their change, audit row and stored response in one transaction,
//! like the lifecycle actions.

use super::{
    replay, requested_id, to_json, Admin, AdminError, Capability, ConflictBody, Reply, RequestMeta,
    TxError,
};
use crate::engine::{EngineError, PruneOutcome, UndoOutcome, UNDOABLE};
use crate::lifecycle::State;
use crate::repair::bounded;
use crate::store::{self, BackfillRow, NewAudit};
use diesel_async::{AsyncConnection, AsyncPgConnection};

/// The audit action and stored request name of an undo.
const UNDO: &str = "undo";
/// The audit action and stored request name of a journal prune.
const PRUNE: &str = "journal_prune";

/// What one of these actions committed: the response, and the audit row's
/// outcome, states and detail.
struct Done {
    status: u16,
    body: serde_json::Value,
    outcome: &'static str,
    prior: State,
    row: BackfillRow,
    detail: Option<String>,
}

/// A refusal of the backfill's own (UNDO-2..4), answered like a state
/// conflict: 409 with the reason's code and the backfill as it is.
pub(super) struct Refusal {
    pub(super) body: serde_json::Value,
    pub(super) message: String,
    pub(super) row: BackfillRow,
}

/// The code a refusal is answered and audited with.
fn refusal_code(error: &EngineError) -> Option<&'static str> {
    Some(match error {
        EngineError::NotJournaled(_) => "not_journaled",
        EngineError::UndoOfUndo(_) => "undo_of_undo",
        EngineError::Undone(_) => "undone",
        EngineError::JournalInUse { .. } => "journal_in_use",
        EngineError::NoDefinition(_) => "no_definition",
        _ => return None,
    })
}

impl Admin {
    /// The 409 body of a refusal of `id` for `error`, with the row read
    /// (under the lock the action took) on the action's transaction.
    pub(super) async fn refusal(
        &self,
        conn: &mut AsyncPgConnection,
        id: &str,
        code: &str,
        error: &EngineError,
    ) -> Result<Refusal, TxError> {
        let row = store::backfill_get(conn, id)
            .await?
            .ok_or_else(AdminError::not_found)?;
        let message = bounded(error.to_string());
        let body = to_json(&ConflictBody {
            error: code.into(),
            message: message.clone(),
            current: self.view_on(conn, &row).await?,
        })?;
        Ok(Refusal { body, message, row })
    }

    /// [`Done`] for a refusal of the engine's, or the error as it is.
    async fn refused(
        &self,
        conn: &mut AsyncPgConnection,
        id: &str,
        error: EngineError,
    ) -> Result<Done, TxError> {
        let Some(code) = refusal_code(&error) else {
            return Err(error.into());
        };
        let Refusal { body, message, row } = self.refusal(conn, id, code, &error).await?;
        Ok(Done {
            status: 409,
            body,
            outcome: code,
            prior: row.state,
            row,
            detail: Some(message),
        })
    }

    /// POST /admin/backfills/{id}/undo (UNDO-2, UNDO-3): 200 `applied` with
    /// the new undo's view, 200 `converged` with the existing one's (one
    /// undo per backfill, whatever the keys), 409 `conflict` naming the
    /// original's state when it is not one an undo starts from, 409
    /// `not_journaled` or `undo_of_undo`, 404 for an unknown ID.
    pub async fn undo(&self, meta: &RequestMeta<'_>, id: &str) -> Result<Reply, AdminError> {
        self.journal_action(meta, id, UNDO).await
    }

    /// The undo inside the action's transaction.
    async fn undo_tx(&self, conn: &mut AsyncPgConnection, id: &str) -> Result<Done, TxError> {
        let outcome = match self.engine.undo_in(conn, id).await {
            Ok(outcome) => outcome,
            Err(error) => return self.refused(conn, id, error).await,
        };
        let (code, undo) = match outcome {
            UndoOutcome::Started(undo) => ("applied", undo),
            UndoOutcome::Existing(undo) => ("converged", undo),
            UndoOutcome::Conflict(row) => {
                let current = self.view_on(conn, &row).await?;
                let states: Vec<&str> = UNDOABLE.iter().map(|s| s.as_str()).collect();
                return Ok(Done {
                    status: 409,
                    body: to_json(&ConflictBody {
                        error: "conflict".into(),
                        message: format!(
                            "undo is not allowed from {}: only from {}",
                            row.state,
                            states.join(", ")
                        ),
                        current,
                    })?,
                    outcome: "conflict",
                    prior: row.state,
                    row: *row,
                    detail: None,
                });
            }
        };
        let original = store::backfill_get(conn, id)
            .await?
            .ok_or_else(AdminError::not_found)?;
        let view = self.view_on(conn, &undo).await?;
        Ok(Done {
            status: 200,
            body: to_json(&super::ActionResponse {
                outcome: code.into(),
                action: UNDO.into(),
                prior_state: original.state,
                backfill: view,
            })?,
            outcome: code,
            prior: original.state,
            detail: Some(format!("undo {} is {}", undo.id, undo.state)),
            row: original,
        })
    }

    /// POST /admin/backfills/{id}/journal/prune (UNDO-4): 200 `applied`
    /// with the backfill's view (its journal now empty) and the count in
    /// the audit detail; 409 `journal_in_use` while the backfill runs or an
    /// undo of it has not completed, 409 `not_journaled` for a repair that
    /// keeps no journal; 404 for an unknown ID.
    pub async fn journal_prune(
        &self,
        meta: &RequestMeta<'_>,
        id: &str,
    ) -> Result<Reply, AdminError> {
        self.journal_action(meta, id, PRUNE).await
    }

    /// The prune inside the action's transaction.
    async fn prune_tx(&self, conn: &mut AsyncPgConnection, id: &str) -> Result<Done, TxError> {
        let PruneOutcome::Pruned { rows, row } = match self.engine.journal_prune_in(conn, id).await
        {
            Ok(outcome) => outcome,
            Err(error) => return self.refused(conn, id, error).await,
        };
        let view = self.view_on(conn, &row).await?;
        Ok(Done {
            status: 200,
            body: to_json(&super::ActionResponse {
                outcome: "applied".into(),
                action: PRUNE.into(),
                prior_state: row.state,
                backfill: view,
            })?,
            outcome: "applied",
            prior: row.state,
            detail: Some(format!("{rows} journaled rows deleted")),
            row: *row,
        })
    }

    /// The shared path of both actions: authorize (`operate`), check the
    /// ID and the Idempotency-Key, then in one transaction replay a stored
    /// answer or run the action, audit and store its answer. A refusal is
    /// audited in its own transaction and returned.
    async fn journal_action(
        &self,
        meta: &RequestMeta<'_>,
        id: &str,
        action: &'static str,
    ) -> Result<Reply, AdminError> {
        let authority = self
            .authorize(meta, id, action, Capability::Operate)
            .await?;
        if let Err(error) = requested_id("the path's ID", id) {
            return Err(self.rejected(&authority, id, action, meta, error).await);
        }
        let key = self.require_key(meta, &authority, id, action).await?;
        let reason = self.require_reason(meta, &authority, id, action).await?;
        let mut conn = self.conn().await?;
        let result = conn
            .transaction::<_, TxError, _>(async |conn| {
                if let Some(reply) = replay(conn, &authority, id, action, action, key).await? {
                    return Ok((reply, false));
                }
                let done = if action == UNDO {
                    self.undo_tx(conn, id).await?
                } else {
                    self.prune_tx(conn, id).await?
                };
                store::audit_insert(
                    conn,
                    &NewAudit {
                        backfill_id: id,
                        action,
                        actor: authority.actor.as_deref(),
                        authority: authority.source,
                        correlation: Some(key),
                        prior_state: Some(done.prior),
                        resulting_state: Some(done.row.state),
                        generation: Some(done.row.generation),
                        outcome: done.outcome,
                        detail: done.detail.as_deref(),
                        reason: reason.as_deref(),
                    },
                )
                .await?;
                store::request_insert(
                    conn,
                    authority.principal(),
                    key,
                    id,
                    action,
                    i32::from(done.status),
                    &done.body,
                )
                .await?;
                let woke = action == UNDO && done.outcome == "applied";
                Ok((
                    Reply {
                        status: done.status,
                        body: done.body,
                    },
                    woke,
                ))
            })
            .await;
        match result {
            Ok((reply, woke)) => {
                if woke {
                    if let Some(waker) = &self.waker {
                        waker(&crate::repair::undo_id(id));
                    }
                }
                Ok(reply)
            }
            Err(error) => Err(self
                .rejected(&authority, id, action, meta, error.into())
                .await),
        }
    }
}
