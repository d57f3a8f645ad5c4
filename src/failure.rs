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
                // 26000, before the relation test below, whose words it
                // shares: a statement prepared on one server session and
                // used on another, which a pooler in transaction mode does.
                _ if message.contains("prepared statement")
                    && message.contains("does not exist") =>
                {
                    "prepared statement missing"
                }
                // 08P01: the server (or a pooler speaking for it) saw a
                // message it did not expect on the wire.
                _ if is_protocol_violation(message) => "protocol violation",
                // A pooler's own errors (PgBouncer reports them as 08P01):
                // it could not give the client a server session in time.
                _ if is_pooler_error(message) => "pooler unavailable",
                _ if message.contains("does not exist") => "missing relation, column or function",
                // 42501: the role lacks a privilege the statement needs.
                _ if message.starts_with("permission denied") => "permission denied",
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

/// Texts of SQLSTATE 08P01 (`protocol_violation`) from PostgreSQL's wire
/// protocol code. diesel-async hands errors over without their SQLSTATE,
/// so the class is read off the server's (untranslated, see the pool's
/// session setup) message.
fn is_protocol_violation(message: &str) -> bool {
    [
        "protocol violation",
        "bind message supplies",
        "invalid frontend message type",
        "unexpected message type",
        "insufficient data left in message",
        "invalid message format",
    ]
    .iter()
    .any(|text| message.contains(text))
}

/// Texts of the errors PgBouncer sends for itself (with SQLSTATE 08P01):
/// no server session within its wait, a server session lost under it, or
/// its client limit reached.
fn is_pooler_error(message: &str) -> bool {
    [
        "query_wait_timeout",
        "server conn crashed",
        "pgbouncer cannot connect to server",
        "server login has been failing",
        "no more connections allowed",
        "server_idle_timeout",
        "client_login_timeout",
    ]
    .iter()
    .any(|text| message.contains(text))
}

/// What a prepared statement missing on the server most likely means, and
/// what to change: the runtime's sessions go through a pooler that hands
/// each transaction another server session.
const PREPARED_STATEMENT_STEP: &str = ": the server session does not have a statement \
    this session prepared, as happens behind a pooler in transaction mode (PgBouncer, RDS \
    Proxy, Supavisor, pgcat); connect the runtime directly or through session pooling, or \
    enable the pooler's prepared statement support (PgBouncer 1.21+: max_prepared_statements), \
    then retry";

/// What a permission error most likely means, and what to do: the
/// runtime's role lacks a grant.
const PERMISSION_STEP: &str = ": the runtime's role lacks a privilege this step needs (the \
    operating guide's Roles and privileges lists the grants); grant it, then retry";

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
                    | "protocol violation"
                    | "pooler unavailable"
            )
        }
        DieselError::BrokenTransactionManager => true,
        _ => false,
    };
    if retryable {
        RepairError::Retryable(text)
    } else if text == "permission denied" {
        RepairError::Blocked(format!("{text}{PERMISSION_STEP}"))
    } else if text == "prepared statement missing" {
        RepairError::Blocked(bounded(format!("{text}{PREPARED_STATEMENT_STEP}")))
    } else if text.starts_with("missing relation") {
        RepairError::Blocked(format!(
            "{text}: the repair's schema prerequisite is not in place; apply the migration, then retry"
        ))
    } else {
        RepairError::Fatal(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server_error(message: &str) -> DieselError {
        DieselError::DatabaseError(DatabaseErrorKind::Unknown, Box::new(message.to_string()))
    }

    /// RT-1: a prepared statement missing on the server (26000) is never a
    /// missing relation nor fatal: it blocks, naming the pooler and what
    /// to change; a protocol violation (08P01) and a pooler's own errors
    /// are retried; a missing relation still blocks as one.
    #[test]
    fn rt01_pooler_errors_are_told_apart_from_a_missing_relation() {
        match classify(&server_error(r#"prepared statement "s4" does not exist"#)) {
            RepairError::Blocked(m) => {
                assert!(m.starts_with("prepared statement missing: "), "{m}");
                assert!(m.contains("transaction mode") && m.contains("max_prepared_statements"));
                assert!(m.ends_with("then retry") && m.len() <= MAX_DIAGNOSTIC_BYTES);
                assert!(!m.contains("s4"), "no statement names: {m}");
            }
            other => panic!("{other:?}"),
        }
        for message in [
            "bind message supplies 2 parameters, but prepared statement \"s1\" requires 1",
            "invalid frontend message type 0",
            "query_wait_timeout",
            "server conn crashed?",
            "pgbouncer cannot connect to server",
        ] {
            assert!(
                matches!(classify(&server_error(message)), RepairError::Retryable(_)),
                "{message}"
            );
        }
        assert!(matches!(
            classify(&server_error(r#"relation "items" does not exist"#)),
            RepairError::Blocked(m) if m.starts_with("missing relation")
        ));
        // 42501 blocks too, naming the grant to give, not the table.
        match classify(&server_error("permission denied for table items")) {
            RepairError::Blocked(m) => {
                assert!(m.starts_with("permission denied: ") && m.ends_with("then retry"));
                assert!(!m.contains("items"), "{m}");
            }
            other => panic!("{other:?}"),
        }
    }
}
