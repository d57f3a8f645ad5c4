//! The only place in the project that writes SQL for the backfill tables.
//!
//! One named function per statement, named `<entity>_<verb>`; each doc
//! comment states the locks it takes and the fence it applies. Every fenced
//! write returns zero rows as a typed outcome (`None`/`false`/[`FenceCommit::Stale`]),
//! never ignored. Repairs run their own SQL over their own tables; they never
//! see these tables. The statements that read the server's health signals
//! (`health_<verb>`, statistics views only) live here too.

mod admin;
mod audit;
mod backfill;
mod batch;
mod blocking;
mod dry_run;
mod health;
mod journal;
mod latency;
mod lease;
mod lifecycle;
mod outbox;
mod pacing;
mod partition;
mod pool;
mod pooler;
mod prepared;
mod progress;
mod rollout;
mod server_loop;
mod timeline;
mod wake;
mod worker;

pub use admin::*;
pub use audit::*;
pub use backfill::*;
pub use batch::*;
pub use blocking::*;
pub use dry_run::*;
pub use health::*;
pub use journal::*;
pub use latency::*;
pub use lease::*;
pub use lifecycle::*;
pub use outbox::*;
pub use pacing::*;
pub use partition::*;
pub(crate) use pool::NO_ANSWER;
pub use pool::{
    build_pool, build_pool_shrinking, connect_dedicated, database_recreate, run_embedded,
    run_migrations, url_with_database, Pool, PooledConn, CONNECT_TIMEOUT, MIGRATIONS,
};
pub use pooler::{pooler_probe, PoolerFinding};
pub use prepared::{cached, Cached};
pub use progress::*;
pub use rollout::*;
pub use server_loop::*;
pub use timeline::*;
pub use wake::*;
pub use worker::*;

use crate::failure::RepairError;
pub use crate::failure::{classify, describe};
use diesel::result::Error as DieselError;

/// Errors of the store layer. `Display` is redacted (AUD-2): raw database
/// messages can carry row values or SQL, so only a classification is shown.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A statement failed.
    #[error("database error: {}", describe(.0))]
    Database(#[from] DieselError),
    /// No connection could be had from the pool.
    #[error("database pool error: {0}")]
    Pool(String),
    /// Embedded migrations failed.
    #[error("migration error: {0}")]
    Migration(String),
    /// A database name outside `[a-z0-9_]{1,63}` (it is spliced into
    /// `CREATE DATABASE`, which takes no parameters).
    #[error("database name must match [a-z0-9_]{{1,63}}")]
    InvalidDatabaseName,
}

impl From<bb8::RunError<diesel_async::pooled_connection::PoolError>> for StoreError {
    fn from(error: bb8::RunError<diesel_async::pooled_connection::PoolError>) -> Self {
        match error {
            bb8::RunError::TimedOut => {
                StoreError::Pool("timed out waiting for a connection".into())
            }
            bb8::RunError::User(_) => StoreError::Pool("could not open a connection".into()),
        }
    }
}

/// A failed framework statement inside a repair's batch or validation (the
/// journal, an undo's reads), classified like the repair's own statements:
/// a lock timeout is retryable, a missing column blocks.
impl From<StoreError> for RepairError {
    fn from(error: StoreError) -> Self {
        match error {
            StoreError::Database(e) => classify(&e),
            other => RepairError::Retryable(other.to_string()),
        }
    }
}

/// Whether a store error is a transient database condition.
pub fn is_transient(error: &StoreError) -> bool {
    match error {
        StoreError::Database(e) => matches!(classify(e), RepairError::Retryable(_)),
        StoreError::Pool(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::result::DatabaseErrorKind;

    fn db_error(kind: DatabaseErrorKind, message: &str) -> DieselError {
        DieselError::DatabaseError(kind, Box::new(message.to_string()))
    }

    /// Which `lc_messages` values the pool warns about (RT-1).
    #[test]
    fn rt01_translated_message_settings_are_told_apart() {
        for english in [
            "C",
            "c",
            "C.UTF-8",
            "POSIX",
            "posix",
            "en_US.UTF-8",
            "en_GB",
            "en.UTF-8",
            "en",
            "EN",
            "",
            "  ",
        ] {
            assert!(pool::messages_untranslated(english), "{english:?}");
        }
        for translated in ["de_DE.UTF-8", "fr_FR", "ja_JP.eucJP", "es", "eng", "Ca"] {
            assert!(!pool::messages_untranslated(translated), "{translated:?}");
        }
    }

    /// RT-2: a session the server ended or the client lost is transient;
    /// a PostgreSQL restart must not fail running backfills.
    #[test]
    fn rt02_lost_sessions_are_retryable() {
        for error in [
            db_error(DatabaseErrorKind::UnableToSendCommand, "connection closed"),
            db_error(DatabaseErrorKind::ClosedConnection, "closed"),
            db_error(
                DatabaseErrorKind::Unknown,
                "terminating connection due to idle-in-transaction timeout",
            ),
            db_error(
                DatabaseErrorKind::Unknown,
                "terminating connection due to administrator command",
            ),
            db_error(
                DatabaseErrorKind::Unknown,
                "the database system is starting up",
            ),
            db_error(
                DatabaseErrorKind::Unknown,
                "sorry, too many clients already",
            ),
        ] {
            assert!(
                matches!(classify(&error), RepairError::Retryable(_)),
                "{error:?}"
            );
        }
    }

    /// RT-1: a pool that could not hand out a connection is transient
    /// (the server may be restarting); a bad database name or a failed
    /// migration is not.
    #[test]
    fn rt01_pool_errors_are_transient_and_configuration_errors_are_not() {
        assert!(is_transient(&StoreError::Pool("timed out".into())));
        assert!(!is_transient(&StoreError::InvalidDatabaseName));
        assert!(!is_transient(&StoreError::Migration("failed".into())));
        assert!(is_transient(&StoreError::Database(db_error(
            DatabaseErrorKind::ClosedConnection,
            "closed"
        ))));
        assert!(!is_transient(&StoreError::Database(db_error(
            DatabaseErrorKind::Unknown,
            "division by zero"
        ))));
    }

    /// The classification's text is the fixed vocabulary, never the
    /// server's message (which can carry row values).
    #[test]
    fn aud02_diagnostics_are_the_fixed_vocabulary() {
        let error = db_error(
            DatabaseErrorKind::Unknown,
            "terminating connection due to administrator command: secret-row-value",
        );
        assert_eq!(
            classify(&error),
            RepairError::Retryable("connection terminated".into())
        );
        let other = db_error(DatabaseErrorKind::Unknown, "division by zero: 42");
        assert_eq!(
            classify(&other),
            RepairError::Fatal("database error".into())
        );
    }
}
