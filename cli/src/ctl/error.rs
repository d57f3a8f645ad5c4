//! What `backfill ctl` reports when it fails: `CtlError`, one readable
//! line with its exit code, and the bound that keeps every such line
//! short.

/// Exit codes.
pub const EXIT_OK: i32 = 0;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_CONFLICT: i32 = 3;
pub const EXIT_UNAUTHORIZED: i32 = 4;
pub const EXIT_SERVER: i32 = 5;

/// Errors of the CLI: one readable line and an exit code.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Server(String),
}

impl CtlError {
    pub(super) fn code(&self) -> i32 {
        match self {
            CtlError::Usage(_) => EXIT_USAGE,
            CtlError::Conflict(_) => EXIT_CONFLICT,
            CtlError::Unauthorized(_) => EXIT_UNAUTHORIZED,
            CtlError::Server(_) => EXIT_SERVER,
        }
    }

    /// Whether an action may be re-sent with the same idempotency key.
    pub(super) fn retryable(&self) -> bool {
        matches!(self, CtlError::Server(_))
    }
}

/// A text for an error line: its whitespace folded into single spaces
/// and its length bounded like every diagnostic.
pub(super) fn one_line(s: &str) -> String {
    let line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    backfill::repair::bounded(line)
}
