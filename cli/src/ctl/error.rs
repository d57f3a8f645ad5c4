//! What `backfill ctl` reports when it fails: `CtlError`, one readable
//! line with its exit code, and the bound that keeps every such line
//! short.

/// Exit codes (the operating guide's list).
pub const EXIT_OK: i32 = 0;
/// A command line the CLI or the server refuses as malformed.
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_CONFLICT: i32 = 3;
pub const EXIT_UNAUTHORIZED: i32 = 4;
pub const EXIT_SERVER: i32 = 5;
/// The ID names no backfill the server knows.
pub const EXIT_NOT_FOUND: i32 = 6;
/// The request was carried out and reports a failure: a validation whose
/// postcondition does not hold.
pub const EXIT_FAILED: i32 = 7;
/// A dry run ran and one of its batches failed: the run it previews would
/// fail there too (the report names the batch, its class and diagnostic).
pub const EXIT_DRY_RUN_FAILED: i32 = 8;

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
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Failed(String),
    #[error("{0}")]
    DryRunFailed(String),
}

impl CtlError {
    pub(super) fn code(&self) -> i32 {
        match self {
            CtlError::Usage(_) => EXIT_USAGE,
            CtlError::Conflict(_) => EXIT_CONFLICT,
            CtlError::Unauthorized(_) => EXIT_UNAUTHORIZED,
            CtlError::Server(_) => EXIT_SERVER,
            CtlError::NotFound(_) => EXIT_NOT_FOUND,
            CtlError::Failed(_) => EXIT_FAILED,
            CtlError::DryRunFailed(_) => EXIT_DRY_RUN_FAILED,
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
