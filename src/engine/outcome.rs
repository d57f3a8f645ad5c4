//! What the engine's calls report: the outcome types of batches, failures,
//! validation, operator actions and `start`.

use super::error::EngineError;
use crate::lifecycle::State;
use crate::repair::{bounded, BodyError};
use crate::store::BackfillRow;
use chrono::{DateTime, Utc};

/// The result of one batch.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOutcome {
    /// Mutation and checkpoint committed together. `reached_bound` means the
    /// row is now `validating` and the claim was released (VAL-1).
    Committed { keys: usize, reached_bound: bool },
    /// The fence rejected the batch (paused, taken over, lease expired): the
    /// whole transaction rolled back (CLM-2).
    Stale,
}

/// The result of recording an execution error (RT-1).
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureOutcome {
    /// Durably recorded; the claim was released.
    Recorded {
        state: State,
        attempts: i32,
        next_attempt_at: Option<DateTime<Utc>>,
    },
    /// The claim was no longer ours; nothing recorded.
    Stale,
}

/// The result of lifecycle validation (VAL-1..3).
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValidationRun {
    /// Validation succeeded and the fenced completion committed.
    Completed,
    /// Validation failed; the row is `failed` or `blocked` with the detail.
    Rejected { state: State, detail: String },
    /// The fence rejected the result (paused or retried meanwhile).
    Stale,
    /// An explicit validation of the same ID is running (VAL-6: at most
    /// one validation per stable ID at a time); nothing ran.
    Busy,
}

/// What explicit validation (`Engine::validate_in`) did, with the row as
/// it was read before the definition ran.
#[derive(Debug)]
pub(crate) struct ExplicitValidation {
    pub(crate) row: BackfillRow,
    pub(crate) outcome: ExplicitOutcome,
}

/// The outcome of explicit validation (VAL-4): either the definition ran
/// and its verdict was recorded, or nothing ran and the variant says why.
#[derive(Debug)]
pub(crate) enum ExplicitOutcome {
    /// The definition ran and its bounded outcome was recorded (VAL-7):
    /// `outcome` is `success` or `failure`, `detail` the bounded
    /// diagnostic of a failure, `validated_at` PostgreSQL's time of the
    /// record.
    Recorded {
        outcome: &'static str,
        detail: Option<String>,
        validated_at: Option<DateTime<Utc>>,
    },
    /// The row is `pending`: there is nothing to validate yet.
    NotStarted,
    /// Another validation of the ID holds its lock (VAL-6).
    Busy,
    /// The checkpoint has not reached the bound.
    NotAtBound,
    /// This process has no definition for the ID.
    NoDefinition,
    /// The definition could not run; not a verdict on the data.
    NotRun(BodyError),
}

/// The result of an operator action.
#[derive(Debug, Clone)]
pub enum ActionOutcome {
    /// The transition committed; the row after it.
    Applied {
        /// The state before the transition.
        prior: State,
        /// The row after it.
        row: Box<BackfillRow>,
    },
    /// The row already is where the action leads (LC-3); nothing changed.
    Converged(Box<BackfillRow>),
    /// Not allowed from the current state (ADM-5); nothing changed.
    Conflict(Box<BackfillRow>),
}

impl ActionOutcome {
    /// The row as the action left it.
    pub fn row(&self) -> &BackfillRow {
        match self {
            ActionOutcome::Applied { row, .. } => row,
            ActionOutcome::Converged(row) | ActionOutcome::Conflict(row) => row,
        }
    }
}

/// What [`Engine::start`] did. `start` is idempotent by stable ID: only a
/// `pending` row is started (its bound captured, once); on any other row
/// nothing changes, and the caller learns the state it found, so a row
/// already `completed` is never mistaken for a run that just happened.
///
/// [`Engine::start`]: crate::engine::Engine::start
#[derive(Debug, Clone)]
pub enum Started {
    /// This call captured the bound and moved the row to `running` (or
    /// straight to `validating` for an empty source set, EX-1).
    Started(Box<BackfillRow>),
    /// The row was already past `pending`; nothing changed.
    AlreadyStarted {
        /// The state the row was found in.
        state: State,
        /// The row as it is.
        row: Box<BackfillRow>,
    },
}

impl Started {
    /// The row as the call left it.
    pub fn row(&self) -> &BackfillRow {
        match self {
            Started::Started(row) | Started::AlreadyStarted { row, .. } => row,
        }
    }
}

/// Why [`Engine::wait_for`] returned without the state it waited for.
///
/// [`Engine::wait_for`]: crate::engine::Engine::wait_for
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The timeout passed; `state` is the last one read from PostgreSQL.
    #[error("timed out waiting; the backfill is {state}")]
    Timeout {
        /// The last state read from PostgreSQL.
        state: State,
    },
    /// The backfill cannot reach a state waited for without an operator
    /// (EMB-8): it is `blocked` or `failed` (and that state was not waited
    /// for), or `pending` with a recorded automatic start that failed for
    /// a reason a retry of the same start does not fix by itself.
    /// `diagnostic` is the row's, bounded; the message says what to do for
    /// `state`.
    #[error("{}", needs_operator(.id, *.state, .diagnostic.as_deref()))]
    NeedsOperator {
        /// The backfill waited for.
        id: String,
        /// The state it is in: `blocked`, `failed` or `pending`.
        state: State,
        /// The row's bounded diagnostic; `None` when none was recorded.
        diagnostic: Option<String>,
    },
    /// Reading the backfill failed (an unknown ID among them).
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// The message of [`WaitError::NeedsOperator`]: what happened and the step
/// that applies to the state the row is in.
fn needs_operator(id: &str, state: State, diagnostic: Option<&str>) -> String {
    let diagnostic = diagnostic.unwrap_or("no diagnostic recorded");
    match state {
        State::Pending => {
            format!("backfill {id:?} is pending: its automatic start failed: {diagnostic}")
        }
        _ => format!(
            "backfill {id:?} is {state} and stays so until an operator retries it: {diagnostic}"
        ),
    }
}

impl WaitError {
    /// The error for `row` when it cannot reach any of `states` without an
    /// operator (see [`WaitError::NeedsOperator`]); `None` while waiting
    /// may still end well. A `pending` row without a recorded start
    /// failure is not judged: someone may yet start it.
    pub(crate) fn needs_operator(row: &BackfillRow, states: &[State]) -> Option<WaitError> {
        if states.contains(&row.state) {
            return None;
        }
        let stuck = match row.state {
            State::Blocked | State::Failed => true,
            // A retryable start failure (a lock held during a deploy) is
            // expected to pass on the automatic start's next try.
            State::Pending => row
                .start_failure()
                .is_some_and(|(kind, _)| kind != "retryable"),
            _ => false,
        };
        stuck.then(|| WaitError::NeedsOperator {
            id: row.id.clone(),
            state: row.state,
            diagnostic: row.last_error.as_deref().map(bounded),
        })
    }
}
