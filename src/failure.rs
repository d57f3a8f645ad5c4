//! How failures are told to operators: the [`RepairError`] a repair
//! returns, the bound on every diagnostic (AUD-2), and the fixed,
//! redacted vocabulary database errors are described and classified in
//! (RT-1). A leaf: the repair API and the store both use it, and it uses
//! neither.

use diesel::result::{DatabaseErrorKind, Error as DieselError};

/// Longest operator-facing diagnostic, in bytes (AUD-2).
pub const MAX_DIAGNOSTIC_BYTES: usize = 512;

/// `s` cut to at most `max` bytes on a char boundary, without a marker:
/// for values that must fit a column rather than be read as cut.
pub fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// Truncate a diagnostic to [`MAX_DIAGNOSTIC_BYTES`] on a char boundary.
pub fn bounded(message: impl Into<String>) -> String {
    let message = message.into();
    if message.len() > MAX_DIAGNOSTIC_BYTES {
        format!("{}...", cut(&message, MAX_DIAGNOSTIC_BYTES - 3))
    } else {
        message
    }
}

/// `message` with `step` appended, the two together bounded to
/// [`MAX_DIAGNOSTIC_BYTES`]: `message` is the part cut, so the step (what
/// to do) always survives.
pub fn bounded_with_step(message: &str, step: &str) -> String {
    if message.len() + step.len() <= MAX_DIAGNOSTIC_BYTES {
        return format!("{message}{step}");
    }
    let room = MAX_DIAGNOSTIC_BYTES.saturating_sub(step.len() + 3);
    format!("{}...{step}", cut(message, room))
}

/// `message` without a closing "then retry" step. A blocked diagnostic
/// ends with it ([`classify`]'s does, and repairs' own often do): right
/// for a `blocked` or `failed` row, which the operator's retry continues,
/// wrong for a `pending` row whose start failed, where retry does not
/// apply and the caller appends the step that does.
pub fn without_retry_step(message: &str) -> &str {
    let trimmed = message.trim_end().trim_end_matches(['.', ' ']);
    match trimmed.strip_suffix("then retry") {
        Some(rest) => rest.trim_end_matches([',', ';', ' ']),
        None => message,
    }
}

/// An error a repair returns, classified so the engine can record it durably
/// before it counts as handled (RT-1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RepairError {
    /// Transient: the batch is retried after a bounded backoff.
    #[error("retryable: {0}")]
    Retryable(String),
    /// An unmet prerequisite or data invariant that needs the operator; the
    /// message must say what to do (bounded, no row values).
    #[error("blocked: {0}")]
    Blocked(String),
    /// Not worth retrying: the backfill goes to `failed`.
    #[error("fatal: {0}")]
    Fatal(String),
}

impl RepairError {
    /// Stable vocabulary used in the database and in metrics labels.
    pub fn kind(&self) -> &'static str {
        match self {
            RepairError::Retryable(_) => "retryable",
            RepairError::Blocked(_) => "blocked",
            RepairError::Fatal(_) => "fatal",
        }
    }

    /// The bounded diagnostic.
    pub fn message(&self) -> String {
        match self {
            RepairError::Retryable(m) | RepairError::Blocked(m) | RepairError::Fatal(m) => {
                bounded(m.as_str())
            }
        }
    }
}

/// Database errors raised by a repair's own SQL are classified by kind, and
/// their text is replaced by a fixed description: a raw PostgreSQL message
/// can carry row values or SQL (AUD-2).
impl From<diesel::result::Error> for RepairError {
    fn from(error: diesel::result::Error) -> Self {
        classify(&error)
    }
}

/// A bounded, redacted description of a database error.
pub fn describe(error: &DieselError) -> String {
    match error {
        DieselError::DatabaseError(kind, info) => {
            let message = info.message();
            let what = match kind {
                DatabaseErrorKind::UniqueViolation => "unique violation",
                DatabaseErrorKind::ForeignKeyViolation => "foreign key violation",
                DatabaseErrorKind::NotNullViolation => "not-null violation",
                DatabaseErrorKind::CheckViolation => "check violation",
                DatabaseErrorKind::SerializationFailure => "serialization failure",
                DatabaseErrorKind::ReadOnlyTransaction => "read-only transaction",
                DatabaseErrorKind::ClosedConnection => "connection closed",
                // No SQLSTATE: the client could not talk to the server (the
                // socket closed, the server went away).
                DatabaseErrorKind::UnableToSendCommand => "connection lost",
                // 57P01/57P02 (shutdown), 25P03 (idle-in-transaction
                // timeout), 57P05 (idle session timeout): the server ended
                // the session; the next attempt gets a new one.
                _ if message.contains("terminating connection") => "connection terminated",
                // 57P03: starting up, shutting down, in recovery.
                _ if message.contains("the database system is") => "server unavailable",
                // 53300.
                _ if message.contains("too many clients")
                    || message.contains("too many connections") =>
                {
                    "too many connections"
                }
                _ if message.contains("statement timeout") => "statement timeout",
                _ if message.contains("lock timeout") => "lock timeout",
                _ if message.contains("deadlock") => "deadlock detected",
                _ if message.contains("canceling statement") => "statement cancelled",
                _ if message.contains("does not exist") => "missing relation, column or function",
                _ => "database error",
            };
            match info.constraint_name() {
                Some(c) if c.len() <= 63 => format!("{what} (constraint {c})"),
                _ => what.to_string(),
            }
        }
        DieselError::NotFound => "row not found".into(),
        DieselError::RollbackTransaction => "transaction rolled back".into(),
        DieselError::BrokenTransactionManager => "broken transaction state".into(),
        DieselError::DeserializationError(_) => "cannot decode a returned value".into(),
        DieselError::SerializationError(_) => "cannot encode a parameter".into(),
        _ => "database client error".into(),
    }
}

/// Classify a database error raised by a repair's SQL (RT-1): transient
/// conditions are retryable, a missing relation or column is an unmet
/// prerequisite (blocked), and everything else is fatal.
pub fn classify(error: &DieselError) -> RepairError {
    let text = describe(error);
    let retryable = match error {
        DieselError::DatabaseError(kind, _) => {
            matches!(
                kind,
                DatabaseErrorKind::SerializationFailure
                    | DatabaseErrorKind::ClosedConnection
                    | DatabaseErrorKind::UnableToSendCommand
            ) || matches!(
                text.as_str(),
                "statement timeout"
                    | "lock timeout"
                    | "deadlock detected"
                    | "statement cancelled"
                    | "connection terminated"
                    | "server unavailable"
                    | "too many connections"
            )
        }
        DieselError::BrokenTransactionManager => true,
        _ => false,
    };
    if retryable {
        RepairError::Retryable(text)
    } else if text.starts_with("missing relation") {
        RepairError::Blocked(format!(
            "{text}: the repair's schema prerequisite is not in place; apply the migration, then retry"
        ))
    } else {
        RepairError::Fatal(text)
    }
}
