//! The lifecycle of docs/CONTRACT.md section 3, as Rust values.
//!
//! The authority is PostgreSQL (the WHERE clauses in `store` and the
//! `backfill_guard` trigger); this module only names states and actions for
//! the engine, the admin API and the clients.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A backfill's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Registered but not started; no bound yet.
    Pending,
    /// Started; may be claimed once any retry backoff has elapsed.
    Running,
    /// The operator wants it stopped: no new claims, and work in flight is
    /// fenced.
    Paused,
    /// A prerequisite or a data condition requires operator remediation
    /// (RT-1, RT-4).
    Blocked,
    /// Retries are exhausted, or validation rejected the result.
    Failed,
    /// The checkpoint has reached the bound; the row may be validated
    /// (VAL-1).
    Validating,
    /// Validation succeeded. Terminal; never changes again (REG-5).
    Completed,
}

impl State {
    /// All states, in lifecycle order.
    pub const ALL: [State; 7] = [
        State::Pending,
        State::Running,
        State::Paused,
        State::Blocked,
        State::Failed,
        State::Validating,
        State::Completed,
    ];

    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Running => "running",
            State::Paused => "paused",
            State::Blocked => "blocked",
            State::Failed => "failed",
            State::Validating => "validating",
            State::Completed => "completed",
        }
    }

    /// The next states the contract allows (docs/CONTRACT.md section 3).
    pub fn next_states(self) -> &'static [State] {
        match self {
            State::Pending => &[State::Running],
            State::Running => &[
                State::Paused,
                State::Blocked,
                State::Failed,
                State::Validating,
            ],
            State::Paused | State::Blocked | State::Failed => &[State::Running, State::Validating],
            State::Validating => &[
                State::Paused,
                State::Completed,
                State::Failed,
                State::Blocked,
            ],
            State::Completed => &[],
        }
    }
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stored state name this process does not know (REG-4: fail closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown lifecycle state")]
pub struct UnknownState;

impl FromStr for State {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        State::ALL
            .into_iter()
            .find(|state| state.as_str() == s)
            .ok_or(UnknownState)
    }
}

/// An operator action (docs/CONTRACT.md section 3). There is deliberately no reset,
/// rewind, delete, force-complete or cancel (ADM-6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Capture the bound of a `pending` backfill and run it.
    Start,
    /// Stop a `running` or `validating` backfill, fencing the work in
    /// flight.
    Pause,
    /// Let a `paused` backfill run (or validate) again.
    Resume,
    /// Run a `blocked` or `failed` backfill again, keeping its history,
    /// bound and checkpoint (RT-3).
    Retry,
    /// Validate explicitly: read-only, with no claim (VAL-4, VAL-7).
    Validate,
}

impl Action {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Start => "start",
            Action::Pause => "pause",
            Action::Resume => "resume",
            Action::Retry => "retry",
            Action::Validate => "validate",
        }
    }

    /// States from which the action performs a transition.
    pub fn sources(self) -> &'static [State] {
        match self {
            Action::Start => &[State::Pending],
            Action::Pause => &[State::Running, State::Validating],
            Action::Resume => &[State::Paused],
            Action::Retry => &[State::Blocked, State::Failed],
            Action::Validate => &[],
        }
    }

    /// States in which a repeat of the action has already converged (LC-3):
    /// the request is answered with the current state, not a conflict.
    pub fn converged(self) -> &'static [State] {
        match self {
            Action::Start | Action::Resume | Action::Retry => &[State::Running, State::Validating],
            Action::Pause => &[State::Paused],
            Action::Validate => &[],
        }
    }
}

impl FromStr for Action {
    type Err = UnknownState;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            Action::Start,
            Action::Pause,
            Action::Resume,
            Action::Retry,
            Action::Validate,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
        .ok_or(UnknownState)
    }
}
