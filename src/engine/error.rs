//! The engine's errors, how the runtime records each of them (RT-1), and
//! the error type inside an engine transaction.

use crate::key::KeyError;
use crate::repair::{BodyError, DefinitionError, RepairError, SelectionError, SplitError};
use crate::store::{self, BackfillRow, StoreError};
use crate::throttle::settings::SettingsError;

impl From<diesel::result::Error> for EngineError {
    fn from(e: diesel::result::Error) -> Self {
        EngineError::Store(StoreError::Database(e))
    }
}

/// Errors of the engine layer.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A statement of the store failed (its message is already redacted).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No row for this stable ID.
    #[error("unknown backfill {0:?}")]
    UnknownBackfill(String),
    /// This process has no definition for the ID (REG-4).
    #[error("no local definition for backfill {0:?}")]
    NoDefinition(String),
    /// A definition was refused: an invalid stable ID or declaration, or
    /// an ID registered twice in this process.
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    /// A stored bound or checkpoint is not of the local key type (REG-4:
    /// fail closed). Nothing was changed.
    #[error("backfill {id:?}: {error}")]
    KeyMismatch {
        /// The backfill whose stored key could not be read.
        id: String,
        /// How the stored key differs from the local key type.
        error: KeyError,
    },
    /// The repair's selection broke the batch contract (EX-3, EX-4); the
    /// batch was rolled back (a two-statement repair's before its mutation
    /// ran).
    #[error("backfill {id:?}: {error}")]
    Selection {
        /// The backfill whose batch was rolled back.
        id: String,
        /// The rule of the batch contract the selection broke.
        error: SelectionError,
    },
    /// The repair's split points were refused at `start` (PAR-1); the
    /// start rolled back and nothing was written.
    #[error("backfill {id:?}: {error}")]
    Split {
        /// The backfill whose start was refused.
        id: String,
        /// Why the split points were refused.
        error: SplitError,
    },
    /// The repair returned an error; the transaction was rolled back.
    #[error("backfill {id:?}: {error}")]
    Repair {
        /// The backfill whose repair failed.
        id: String,
        /// The repair's error with its class (RT-1).
        error: RepairError,
    },
    /// A claim came back in a state that is not claimable (REG-4: fail
    /// closed rather than run it). A state text this build does not know
    /// at all already fails the read in the store.
    #[error("backfill {0:?} was claimed in a state that cannot be worked on")]
    UnknownState(String),
    /// Invalid configuration.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// Dry-run options out of their limits (DRY-1); the message names the
    /// limit. Nothing ran.
    #[error("{0}")]
    InvalidDryRun(String),
    /// A settings change that is refused (THR-4); nothing was changed.
    #[error(transparent)]
    InvalidSettings(#[from] SettingsError),
    /// The backfill is `completed`: terminal, so its settings no longer
    /// change (LC-4). Nothing was changed; the row as it is.
    #[error("backfill {:?} is completed: its settings no longer change", .0.id)]
    Completed(Box<BackfillRow>),
    /// The backfill's definition keeps no journal, so it cannot be undone
    /// (UNDO-1) and has no journal to prune (UNDO-4). Nothing was changed.
    #[error("backfill {0:?} keeps no journal: its repair declares none, so there is nothing to undo or prune")]
    NotJournaled(String),
    /// The backfill is itself an undo; undoing it is refused (UNDO-3: the
    /// fixed repair runs under a new stable ID). Nothing was changed.
    #[error("backfill {0:?} is an undo; an undo is never undone (run the fixed repair under a new stable ID)")]
    UndoOfUndo(String),
    /// The backfill has an undo, so it does not run again (UNDO-2): a
    /// resume or retry would repair again what the undo restores.
    #[error("backfill {0:?} has an undo; it does not run again (run the fixed repair under a new stable ID)")]
    Undone(String),
    /// The journal is still needed: an undo of it has not completed, or
    /// the backfill still writes it (UNDO-4). Nothing was changed.
    #[error("the journal of {id:?} is still needed: {why}")]
    JournalInUse {
        /// The backfill whose journal was to be deleted.
        id: String,
        /// Which of the two holds: the backfill may still write it, or
        /// its undo has not completed.
        why: String,
    },
}

impl EngineError {
    /// How the runtime should record this error (RT-1). `None` means it
    /// must not be recorded against the backfill at all: a key mismatch is
    /// this process's problem (fail closed and leave the row alone).
    pub fn classification(&self) -> Option<RepairError> {
        match self {
            EngineError::Repair { error, .. } => Some(error.clone()),
            EngineError::Selection { error, .. } => Some(RepairError::Fatal(format!(
                "the repair's key selection broke the batch contract: {error}"
            ))),
            EngineError::Store(e) if store::is_transient(e) => {
                Some(RepairError::Retryable(e.to_string()))
            }
            EngineError::Store(e) => Some(RepairError::Fatal(e.to_string())),
            EngineError::KeyMismatch { .. }
            | EngineError::NoDefinition(_)
            | EngineError::UnknownBackfill(_)
            | EngineError::UnknownState(_)
            | EngineError::Definition(_)
            | EngineError::Split { .. }
            | EngineError::Config(_)
            | EngineError::InvalidDryRun(_)
            | EngineError::InvalidSettings(_)
            | EngineError::Completed(_)
            | EngineError::NotJournaled(_)
            | EngineError::UndoOfUndo(_)
            | EngineError::Undone(_)
            | EngineError::JournalInUse { .. } => None,
        }
    }
}

/// Errors inside an engine transaction: anything here rolls it back.
#[derive(Debug, thiserror::Error)]
pub(super) enum TxError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("stale")]
    Stale,
    #[error("busy")]
    Busy,
}

impl From<diesel::result::Error> for TxError {
    fn from(e: diesel::result::Error) -> Self {
        TxError::Engine(EngineError::Store(StoreError::Database(e)))
    }
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Engine(EngineError::Store(e))
    }
}

pub(super) fn body_error(id: &str, error: BodyError) -> EngineError {
    match error {
        BodyError::Repair(error) => EngineError::Repair {
            id: id.to_string(),
            error,
        },
        BodyError::Selection(error) => EngineError::Selection {
            id: id.to_string(),
            error,
        },
        BodyError::Key(error) => EngineError::KeyMismatch {
            id: id.to_string(),
            error,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::EngineError;
    use crate::key::KeyError;
    use crate::repair::RepairError;
    use crate::store::StoreError;

    /// RT-1: a store error is recorded as retryable when it is transient
    /// (no connection could be had) and as fatal otherwise; a repair's own
    /// error is recorded as it was classified; this process's problems
    /// (here a key mismatch and its configuration) are not recorded.
    #[test]
    fn rt01_store_errors_are_retryable_only_when_transient() {
        let classify = |e: EngineError| e.classification();
        assert!(matches!(
            classify(EngineError::Store(StoreError::Pool("no connection".into()))),
            Some(RepairError::Retryable(m)) if m.contains("no connection")
        ));
        assert!(matches!(
            classify(EngineError::Store(StoreError::Migration("bad".into()))),
            Some(RepairError::Fatal(m)) if m.contains("bad")
        ));
        let blocked = RepairError::Blocked("grant it".into());
        let repair = EngineError::Repair {
            id: "t.v1".into(),
            error: blocked.clone(),
        };
        assert_eq!(classify(repair), Some(blocked));
        let mismatch = EngineError::KeyMismatch {
            id: "t.v1".into(),
            error: KeyError::Malformed,
        };
        assert_eq!(classify(mismatch), None);
        assert_eq!(classify(EngineError::Config("x".into())), None);
    }
}
