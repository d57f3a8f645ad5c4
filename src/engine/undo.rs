//! Taking a journaled backfill back (UNDO-2..UNDO-4): the operator's
//! `undo`, which creates and starts the reverse backfill in one
//! transaction, and the prune of a journal no undo needs any more.

use super::error::EngineError;
use super::outcome::ActionOutcome;
use super::Engine;
use crate::lifecycle::{Action, State};
use crate::repair::undo_id;
use crate::store::{self, BackfillRow};
use diesel_async::AsyncPgConnection;

/// The states an undo may start from: the original runs no batch in any
/// of them, so its journal is not growing (UNDO-2).
pub const UNDOABLE: [State; 4] = [
    State::Completed,
    State::Paused,
    State::Failed,
    State::Blocked,
];

/// What `undo` did.
#[derive(Debug)]
pub enum UndoOutcome {
    /// The reverse backfill was created and started: its row, `running`
    /// (or `validating` for an empty journal).
    Started(Box<BackfillRow>),
    /// The backfill already has its undo (a second request, with the same
    /// idempotency key or not, makes no second one): its row as it is.
    Existing(Box<BackfillRow>),
    /// The original is in a state an undo does not start from; its row.
    Conflict(Box<BackfillRow>),
}

/// What `journal prune` did.
#[derive(Debug)]
pub enum PruneOutcome {
    /// The journal's rows were deleted: how many, with the original's row.
    Pruned {
        /// The journal rows deleted.
        rows: u64,
        /// The original backfill's row.
        row: Box<BackfillRow>,
    },
}

impl Engine {
    /// `undo` of `id` inside the caller's transaction (the admin layer adds
    /// its audit row and idempotency record): lock the original's row,
    /// refuse an undo, an unjournaled or a running original, then insert
    /// the undo's row and `start` it, which captures the journal's
    /// greatest `seq` as its bound (and its partitions) and wakes the
    /// supervisors. The original's row is not changed (REG-5).
    pub(crate) async fn undo_in(
        &self,
        conn: &mut AsyncPgConnection,
        id: &str,
    ) -> Result<UndoOutcome, EngineError> {
        let row = store::backfill_lock(conn, id)
            .await?
            .ok_or_else(|| EngineError::UnknownBackfill(id.to_string()))?;
        if row.undo_of.is_some() || self.registry.undo_of(id).is_some() {
            return Err(EngineError::UndoOfUndo(id.to_string()));
        }
        if !self.registry.contains(id) {
            return Err(EngineError::NoDefinition(id.to_string()));
        }
        if self.registry.journal(id).is_none() {
            return Err(EngineError::NotJournaled(id.to_string()));
        }
        let undo = undo_id(id);
        if let Some(existing) = store::backfill_get(conn, &undo).await? {
            return Ok(UndoOutcome::Existing(Box::new(existing)));
        }
        if !UNDOABLE.contains(&row.state) {
            return Ok(UndoOutcome::Conflict(Box::new(row)));
        }
        let description = self
            .registry
            .get(&undo)
            .map(|r| r.description().to_string())
            .unwrap_or_default();
        store::undo_insert(conn, &undo, id, &description, &self.config.build_info).await?;
        Ok(match self.act_in(conn, &undo, Action::Start).await? {
            ActionOutcome::Applied { row, .. } => UndoOutcome::Started(row),
            ActionOutcome::Converged(row) | ActionOutcome::Conflict(row) => {
                UndoOutcome::Existing(row)
            }
        })
    }

    /// Refuse a resume or retry of a backfill that has an undo (UNDO-2):
    /// running it again would repair what the undo restores. Called with
    /// the original's row lock held.
    ///
    /// The undo's row decides, whatever the local definition declares: a
    /// process whose definition of the ID lost its journal (an older
    /// build, a changed definition) must not run an undone original again.
    /// A row is the undo of `id` by its `undo_of`, not by its name alone.
    pub(super) async fn refuse_if_undone(
        &self,
        conn: &mut AsyncPgConnection,
        id: &str,
    ) -> Result<(), EngineError> {
        match store::backfill_get(conn, &undo_id(id)).await? {
            Some(undo) if undo.undo_of.as_deref() == Some(id) => {
                Err(EngineError::Undone(id.to_string()))
            }
            _ => Ok(()),
        }
    }

    /// Delete the journal of `id` inside the caller's transaction (UNDO-4),
    /// with the original's row lock and its undo's: refused while the
    /// backfill runs (it still writes the journal), while an undo of it
    /// has not completed, and for a repair that keeps no journal.
    pub(crate) async fn journal_prune_in(
        &self,
        conn: &mut AsyncPgConnection,
        id: &str,
    ) -> Result<PruneOutcome, EngineError> {
        let row = store::backfill_lock(conn, id)
            .await?
            .ok_or_else(|| EngineError::UnknownBackfill(id.to_string()))?;
        // A repair that declares no journal has none to delete: answering
        // "applied, 0 rows" would read as if an undo had been given up.
        // Rows left by an earlier definition that did journal (or of an ID
        // this server has no definition for) are still pruned.
        if self.registry.journal(id).is_none() {
            let (_, _, entries) = store::journal_extent(conn, id).await?;
            if entries == 0 {
                return Err(EngineError::NotJournaled(id.to_string()));
            }
        }
        let in_use = |why: String| EngineError::JournalInUse {
            id: id.to_string(),
            why,
        };
        if matches!(row.state, State::Running | State::Validating) {
            return Err(in_use(format!(
                "the backfill is {} and may still write it; pause it first",
                row.state
            )));
        }
        if let Some(undo) = store::backfill_lock(conn, &undo_id(id)).await? {
            if undo.state != State::Completed {
                return Err(in_use(format!(
                    "its undo {} is {}, not completed",
                    undo.id, undo.state
                )));
            }
        }
        let rows = store::journal_prune(conn, id).await?;
        Ok(PruneOutcome::Pruned {
            rows,
            row: Box::new(row),
        })
    }
}
