//! Whether the database URL reaches PostgreSQL through a pooler that
//! hands each transaction another server session (transaction pooling:
//! PgBouncer, RDS Proxy, Supavisor, pgcat in that mode), checked once at
//! startup (EMB-13).
//!
//! The runtime's sessions keep prepared statements between transactions
//! (every store statement is a cached prepared statement, [`cached`]).
//! Behind such a pooler a statement prepared on one server session is
//! later sent to another, which does not have it, and fails with
//! SQLSTATE 26000 far from its cause: a batch, a validation, a renewal.
//! The probe provokes exactly that at startup, so the host refuses to
//! start with one line naming the setting to change instead.

use super::{cached, connect_dedicated, StoreError};
use diesel::sql_types::Integer;
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use std::time::Duration;

/// How long the probe's second statement may wait for a server session
/// before the wait itself counts as the finding: a direct session never
/// waits on another session's open transaction to run `SELECT 1`.
const WAIT: Duration = Duration::from_secs(3);

/// What the probe saw of a pooler in transaction mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolerFinding {
    /// A statement this session prepared was missing on the server
    /// session that ran its next transaction.
    PreparedStatementLost,
    /// This session's statement waited for another session's open
    /// transaction: both were handed the same server session.
    SharedServerSession,
}

impl PoolerFinding {
    /// The one line an operator reads: what was seen, and what to change.
    pub fn message(self) -> String {
        let seen = match self {
            PoolerFinding::PreparedStatementLost => {
                "a statement prepared in one transaction was missing on the server session of \
                 the next (SQLSTATE 26000)"
            }
            PoolerFinding::SharedServerSession => {
                "one session's statement waited for another session's open transaction on the \
                 same server session"
            }
        };
        format!(
            "the database URL reaches PostgreSQL through a pooler in transaction mode: {seen}; \
             the runtime keeps prepared statements across transactions, so point the URL at \
             PostgreSQL directly or at a pool in session mode (PgBouncer: pool_mode = session), \
             or enable the pooler's prepared statement support (PgBouncer 1.21+: \
             max_prepared_statements)"
        )
    }
}

#[derive(QueryableByName)]
struct One {
    #[diesel(sql_type = Integer)]
    one: i32,
}

/// One cached prepared statement, `SELECT 1`. No lock, no table.
async fn pooler_probe_select(conn: &mut AsyncPgConnection) -> Result<i32, diesel::result::Error> {
    let row: One = cached(diesel::sql_query("SELECT 1 AS one"))
        .get_result(conn)
        .await?;
    Ok(row.one)
}

/// Whether `url` goes through a pooler in transaction mode that loses
/// prepared statements. Two dedicated sessions: the first prepares and
/// runs `SELECT 1`; the second opens a transaction (taking, behind such a
/// pooler, the server session the first just gave back, which it hands
/// out most recently used first); the first then runs its prepared
/// statement again. Directly, or through a session-mode pool, the first
/// session runs it on its own server session. Behind transaction pooling
/// it lands on another server session, where the statement is missing
/// (or, with one server session in the pool, waits for the second's
/// transaction). A pooler that tracks prepared statements itself passes.
/// No lock, no table; the second session's transaction runs nothing.
///
/// A pooler that hands out server sessions round robin may not show
/// itself here; the error a lost statement causes later is still
/// classified as such ([`crate::failure::classify`]).
pub async fn pooler_probe(url: &str) -> Result<Option<PoolerFinding>, StoreError> {
    let mut first = connect_dedicated(url).await?;
    let mut second = connect_dedicated(url).await?;
    if let Err(error) = pooler_probe_select(&mut first).await {
        return lost_or(error);
    }
    second.batch_execute("BEGIN; SELECT 1").await?;
    let again = tokio::time::timeout(WAIT, pooler_probe_select(&mut first)).await;
    // The second session's transaction ran nothing; ending it frees the
    // server session a waiting first session needs.
    second.batch_execute("COMMIT").await?;
    match again {
        Ok(Ok(_)) => Ok(None),
        Ok(Err(error)) => lost_or(error),
        Err(_) => Ok(Some(PoolerFinding::SharedServerSession)),
    }
}

/// A probe statement's error: a lost prepared statement is the finding,
/// anything else is the store's error.
fn lost_or(error: diesel::result::Error) -> Result<Option<PoolerFinding>, StoreError> {
    if crate::failure::describe(&error) == "prepared statement missing" {
        Ok(Some(PoolerFinding::PreparedStatementLost))
    } else {
        Err(StoreError::from(error))
    }
}
