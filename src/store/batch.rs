//! The batch transaction: its `BEGIN` and timeouts, its rollback, and the
//! fenced checkpoint advance that travels with its COMMIT (EX-5, EX-6,
//! CLM-2).

use super::StoreError;
use diesel::sql_types::Text;
use diesel_async::{AnsiTransactionManager, AsyncPgConnection, RunQueryDsl, TransactionManager};
use serde_json::Value;

/// Open a batch transaction and bound it (EX-5) in ONE round trip: `BEGIN`
/// and the `SET LOCAL` timeouts of [`begin_sql`] travel as one
/// simple-protocol message. Only a claim's first batch uses it; later
/// batches start in the transaction [`checkpoint_advance_commit_reopen`]
/// opened. The values are integers formatted here, never
/// caller text, so nothing can be injected; `SET LOCAL` ends with the
/// transaction like `set_config(.., true)`. diesel-async's transaction
/// manager tracks the transaction, so a connection returned to the pool
/// with it still open is discarded. It ends with the fence's COMMIT
/// ([`checkpoint_advance_commit`]) or [`batch_rollback`].
pub async fn batch_begin(
    conn: &mut AsyncPgConnection,
    statement_timeout_ms: i64,
    lock_timeout_ms: i64,
) -> Result<(), StoreError> {
    use diesel_async::SimpleAsyncConnection;
    let begun = AnsiTransactionManager::begin_transaction_sql(
        conn,
        &begin_sql(statement_timeout_ms, lock_timeout_ms),
    )
    .await;
    if let Err(error) = begun {
        // The transaction manager counts the transaction only when the
        // whole message succeeded; if a SET failed after BEGIN ran, the
        // server sits in an aborted transaction the pool cannot see, and
        // would hand out. End it here (a warning when there is none).
        let _ = conn.batch_execute("ROLLBACK").await;
        return Err(error.into());
    }
    Ok(())
}

/// `BEGIN` and the batch timeouts as one simple-protocol text. The idle
/// timeout bounds the time the transaction may sit between statements
/// (EX-5), which matters for an open batch (see
/// [`checkpoint_advance_commit_reopen`]):
/// a runner that stops without releasing cannot leave it open for longer
/// than one statement may run. None of these statements takes a snapshot,
/// a lock or a transaction ID.
fn begin_sql(statement_timeout_ms: i64, lock_timeout_ms: i64) -> String {
    format!(
        "BEGIN; SET LOCAL statement_timeout = {statement_timeout_ms}; \
         SET LOCAL lock_timeout = {lock_timeout_ms}; \
         SET LOCAL idle_in_transaction_session_timeout = {statement_timeout_ms}"
    )
}

/// Roll back the transaction opened by [`batch_begin`].
pub async fn batch_rollback(conn: &mut AsyncPgConnection) -> Result<(), StoreError> {
    AnsiTransactionManager::rollback_transaction(conn).await?;
    Ok(())
}

/// Bound the current transaction (EX-5): `SET LOCAL statement_timeout` and
/// `lock_timeout`, passed as parameters through `set_config(.., true)`.
pub async fn batch_set_timeouts(
    conn: &mut AsyncPgConnection,
    statement_timeout_ms: i64,
    lock_timeout_ms: i64,
) -> Result<(), StoreError> {
    super::cached(
        diesel::sql_query(
            "SELECT set_config('statement_timeout', $1, true), \
                    set_config('lock_timeout', $2, true)",
        )
        .bind::<Text, _>(statement_timeout_ms.to_string())
        .bind::<Text, _>(lock_timeout_ms.to_string()),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// What [`checkpoint_advance_commit`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FenceCommit {
    /// The fence matched; mutation and checkpoint committed together.
    Committed,
    /// The fence did not match: nothing committed and the transaction is
    /// aborted; the caller must roll it back ([`batch_rollback`]).
    Stale,
}

/// Hex-encode a value for [`checkpoint_advance_commit`]'s message: only
/// hex digits reach the SQL text, whatever the value holds, so nothing can
/// be injected and no quoting setting matters.
fn hex_literal(bytes: &[u8]) -> String {
    format!("decode('{}', 'hex')", hex::encode(bytes))
}

fn text_literal(text: &str) -> String {
    format!("convert_from({}, 'UTF8')", hex_literal(text.as_bytes()))
}

/// The fence, the progress and the COMMIT of one batch in ONE round trip
/// (CLM-2, EX-6): `SELECT backfill_checkpoint_advance(..); COMMIT` as one
/// simple-protocol message in the transaction opened by [`batch_begin`] (or
/// by the previous batch, see [`checkpoint_advance_commit_reopen`]).
/// The function (migration `..._fence_function`) matches only if the row is
/// `running`, the generation and owner are the caller's, the lease has not
/// expired by `clock_timestamp()`, the checkpoint is still the one the batch
/// started from, and the new checkpoint is greater than it and at most the
/// bound (EX-3); at the bound the row enters `validating` and the claim is
/// released (VAL-1). It RAISES `BF001` when nothing matched: PostgreSQL
/// then skips the COMMIT of the same message and the transaction, mutation
/// included, is aborted ([`FenceCommit::Stale`]). It takes the row lock
/// until commit, so a concurrent pause either committed first (stale here)
/// or waits for this commit.
pub async fn checkpoint_advance_commit(
    conn: &mut AsyncPgConnection,
    advance: &Advance<'_>,
) -> Result<FenceCommit, StoreError> {
    use diesel::connection::TransactionDepthChange;
    use diesel_async::{AnsiTransactionManager, SimpleAsyncConnection, TransactionManager};
    let outcome = fence_outcome(conn.batch_execute(&advance.fence_commit_sql()).await)?;
    if outcome == FenceCommit::Committed {
        // The COMMIT ran inside the message: tell the transaction manager
        // the transaction is over.
        <AnsiTransactionManager as TransactionManager<AsyncPgConnection>>::transaction_manager_status_mut(conn)
            .transaction_state()?
            .change_transaction_depth(TransactionDepthChange::DecreaseDepth)?;
    }
    Ok(outcome)
}

/// [`checkpoint_advance_commit`], then the next batch's `BEGIN` and
/// timeouts ([`batch_begin`]), sent together in one round trip on a
/// shared reference, so the caller can pipeline the next batch's first
/// statement behind them (the repair's one-statement form). After a
/// commit the connection is inside the next batch's transaction; the
/// transaction manager's depth (one) is right as it is.
///
/// They are two messages, not one, because a statement pipelined behind
/// them must never run outside a transaction block. If the COMMIT fails
/// (a deferred constraint, say), PostgreSQL skips the rest of that
/// message, so a `BEGIN` inside it would be skipped too and the statement
/// behind would run, and commit, on its own. As a message of its own the
/// `BEGIN` still runs, the statement behind lands in that transaction and
/// the caller rolls it back. If the fence raises, the transaction is
/// aborted and the `BEGIN` and everything behind it fail without effect.
/// An error of the `BEGIN` alone (only a broken connection) is returned
/// as an error although the batch committed: the next claim resumes from
/// the committed checkpoint.
pub async fn checkpoint_advance_commit_reopen(
    conn: &AsyncPgConnection,
    advance: &Advance<'_>,
    statement_timeout_ms: i64,
    lock_timeout_ms: i64,
) -> Result<FenceCommit, StoreError> {
    use diesel_async::SimpleAsyncConnection;
    let fence = advance.fence_commit_sql();
    let begin = begin_sql(statement_timeout_ms, lock_timeout_ms);
    let (mut first, mut second) = (conn, conn);
    // `join!` polls the fence first, and a query is queued on the
    // connection when its future is first polled: the fence goes first.
    let (fenced, begun) =
        futures_util::join!(first.batch_execute(&fence), second.batch_execute(&begin));
    let outcome = fence_outcome(fenced)?;
    if outcome == FenceCommit::Committed {
        begun?;
    }
    Ok(outcome)
}

/// One batch's fence and progress: who claims to advance which backfill
/// from which checkpoint to which (see [`checkpoint_advance_commit`]).
#[derive(Debug, Clone, Copy)]
pub struct Advance<'a> {
    /// The backfill the batch advances.
    pub id: &'a str,
    /// The partition the batch advances (PAR-2); `None` for a backfill
    /// without partitions, whose own row is fenced and advanced.
    pub part: Option<u32>,
    /// The worker ID that must still hold the claim at commit (CLM-2).
    pub worker: &'a str,
    /// The claim's generation; the fence rejects the commit when it is no
    /// longer the current one (CLM-2).
    pub generation: i64,
    /// The checkpoint the batch started from (`None`: before every key).
    pub expected: Option<&'a [u8]>,
    /// The new checkpoint in the key encoding: the greatest key the batch
    /// selected, strictly after `expected` and at most the bound (EX-3).
    pub checkpoint: &'a [u8],
    /// The new checkpoint rendered as JSON for display.
    pub checkpoint_json: &'a Value,
    /// Keys the batch changed, added to `rows_done`.
    pub rows: i64,
    /// The size the batch ran with, recorded as the size in force (THR-3).
    pub batch_size: i32,
}

impl Advance<'_> {
    /// `SELECT backfill_checkpoint_advance(..); COMMIT` with every value
    /// hex-encoded ([`hex_literal`]). A partition claim's fence is
    /// `backfill_partition_advance` (migration `..._partitions`), which
    /// takes the partition's number after the ID: the partition's fence
    /// joined with the backfill's `running` state, and at the last
    /// partition's end the move of the backfill to `validating` (PAR-2,
    /// PAR-4), with the same raise on a stale claim.
    fn fence_commit_sql(&self) -> String {
        let (function, part) = match self.part {
            Some(part) => ("backfill_partition_advance", format!("{part}, ")),
            None => ("backfill_checkpoint_advance", String::new()),
        };
        format!(
            "SELECT {function}({}, {part}{}, {}, {}, {}, ({})::jsonb, {}, {}); COMMIT",
            text_literal(self.id),
            text_literal(self.worker),
            self.generation,
            self.expected
                .map(hex_literal)
                .unwrap_or_else(|| "NULL".into()),
            hex_literal(self.checkpoint),
            text_literal(&self.checkpoint_json.to_string()),
            self.rows,
            self.batch_size,
        )
    }
}

/// The fence function's raise is a stale claim, not an error.
fn fence_outcome(result: Result<(), diesel::result::Error>) -> Result<FenceCommit, StoreError> {
    match result {
        Ok(()) => Ok(FenceCommit::Committed),
        Err(error) if stale_fence(&error) => Ok(FenceCommit::Stale),
        Err(error) => Err(error.into()),
    }
}

/// Whether `error` is the batch fence's own (`BF001`, raised by
/// `backfill_checkpoint_advance` and `backfill_partition_advance` when
/// nothing matched), from a batch's commit message or from inside the
/// loop in the server.
pub(super) fn stale_fence(error: &diesel::result::Error) -> bool {
    matches!(error, diesel::result::Error::DatabaseError(_, info)
        if info.message() == "backfill stale fence")
}
