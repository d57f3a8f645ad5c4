//! Statements over the `backfill` table: registration, lifecycle
//! transitions, claims and the fenced checkpoint advance.
//!
//! Lifecycle transitions are enforced twice in PostgreSQL: by each UPDATE's
//! WHERE clause (a disallowed source state matches zero rows) and by the
//! `backfill_guard` trigger, which rejects any UPDATE that breaks the
//! lifecycle table, moves the bound or the checkpoint backward, or touches a
//! completed row (LC-1, LC-4, REG-5).

use super::StoreError;
use crate::failure::bounded;
use crate::lifecycle::State;
use chrono::{DateTime, Utc};
use diesel::deserialize::{self, FromSql, QueryableByName};
use diesel::pg::Pg;
use diesel::row::{Field, NamedRow, Row};
use diesel::sql_types::{Array, BigInt, Binary, Bool, Integer, Jsonb, Nullable, Text, Timestamptz};
use diesel::OptionalExtension;
use diesel_async::{AnsiTransactionManager, AsyncPgConnection, RunQueryDsl, TransactionManager};
use serde_json::Value;

/// Every column of a backfill row, plus the database clock at read time so
/// callers judge lease expiry by PostgreSQL time (CLM-3), never their own.
const COLUMNS: &str = "id, state, bound, bound_json, empty_source, checkpoint, checkpoint_json, \
     key_type, source_rows, generation, owner, lease_expires_at, attempts, next_attempt_at, \
     last_error_kind, last_error, last_error_at, rows_done, batches_done, validation_outcome, \
     validation_detail, validated_at, description, build_info, registered_at, updated_at, \
     started_at, completed_at, settings, batch_size, throttle, clock_timestamp() AS db_now";

/// One backfill row as stored. Decoded by position (see the
/// `QueryableByName` impl below), in the order of [`COLUMNS`].
#[derive(Debug, Clone)]
pub struct BackfillRow {
    pub id: String,
    pub state: State,
    pub bound: Option<Vec<u8>>,
    pub bound_json: Option<Value>,
    pub empty_source: bool,
    pub checkpoint: Option<Vec<u8>>,
    pub checkpoint_json: Option<Value>,
    pub key_type: Option<String>,
    pub source_rows: Option<i64>,
    pub generation: i64,
    pub owner: Option<String>,
    pub lease_expires_at: Option<DateTime<Utc>>,
    pub attempts: i32,
    pub next_attempt_at: Option<DateTime<Utc>>,
    pub last_error_kind: Option<String>,
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
    pub rows_done: i64,
    pub batches_done: i64,
    pub validation_outcome: Option<String>,
    pub validation_detail: Option<String>,
    pub validated_at: Option<DateTime<Utc>>,
    pub description: Option<String>,
    pub build_info: Option<String>,
    pub registered_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub completed_at: Option<DateTime<Utc>>,
    /// Live settings as stored (THR-4); read them with
    /// [`crate::settings::Settings::from_stored`].
    pub settings: Value,
    /// The batch size in force at the last batch or statement timeout
    /// (THR-3).
    pub batch_size: Option<i32>,
    /// The throttle condition the claim's runner last reported (THR-2);
    /// current only while its `generation` is the row's and the row is
    /// claimed.
    pub throttle: Option<Value>,
    pub db_now: DateTime<Utc>,
}

/// Decode by position, checking each column's name.
///
/// The derived impl looks every field up by name, a linear search over the
/// row's columns: about 50,000 name comparisons for a list page of 100
/// rows, a visible share of the admin list's CPU profile. Here each column is found at the next position and its name is compared
/// once. A column that is not where [`COLUMNS`] puts it is still found by
/// name, so a reordering costs speed, never correctness; debug builds (the
/// tests) panic on it instead, so it cannot go unnoticed.
impl QueryableByName<Pg> for BackfillRow {
    fn build<'a>(row: &impl NamedRow<'a, Pg>) -> deserialize::Result<Self> {
        let mut c = Columns { row, at: 0 };
        Ok(Self {
            id: c.next::<Text, _>("id")?,
            state: c.next::<Text, _>("state")?,
            bound: c.next::<Nullable<Binary>, _>("bound")?,
            bound_json: c.next::<Nullable<Jsonb>, _>("bound_json")?,
            empty_source: c.next::<Bool, _>("empty_source")?,
            checkpoint: c.next::<Nullable<Binary>, _>("checkpoint")?,
            checkpoint_json: c.next::<Nullable<Jsonb>, _>("checkpoint_json")?,
            key_type: c.next::<Nullable<Text>, _>("key_type")?,
            source_rows: c.next::<Nullable<BigInt>, _>("source_rows")?,
            generation: c.next::<BigInt, _>("generation")?,
            owner: c.next::<Nullable<Text>, _>("owner")?,
            lease_expires_at: c.next::<Nullable<Timestamptz>, _>("lease_expires_at")?,
            attempts: c.next::<Integer, _>("attempts")?,
            next_attempt_at: c.next::<Nullable<Timestamptz>, _>("next_attempt_at")?,
            last_error_kind: c.next::<Nullable<Text>, _>("last_error_kind")?,
            last_error: c.next::<Nullable<Text>, _>("last_error")?,
            last_error_at: c.next::<Nullable<Timestamptz>, _>("last_error_at")?,
            rows_done: c.next::<BigInt, _>("rows_done")?,
            batches_done: c.next::<BigInt, _>("batches_done")?,
            validation_outcome: c.next::<Nullable<Text>, _>("validation_outcome")?,
            validation_detail: c.next::<Nullable<Text>, _>("validation_detail")?,
            validated_at: c.next::<Nullable<Timestamptz>, _>("validated_at")?,
            description: c.next::<Nullable<Text>, _>("description")?,
            build_info: c.next::<Nullable<Text>, _>("build_info")?,
            registered_at: c.next::<Timestamptz, _>("registered_at")?,
            updated_at: c.next::<Timestamptz, _>("updated_at")?,
            started_at: c.next::<Nullable<Timestamptz>, _>("started_at")?,
            completed_at: c.next::<Nullable<Timestamptz>, _>("completed_at")?,
            settings: c.next::<Jsonb, _>("settings")?,
            batch_size: c.next::<Nullable<Integer>, _>("batch_size")?,
            throttle: c.next::<Nullable<Jsonb>, _>("throttle")?,
            db_now: c.next::<Timestamptz, _>("db_now")?,
        })
    }
}

/// The one place database text becomes a lifecycle [`State`]. The
/// column's domain admits only the contract's states; a text this build
/// does not know (a newer schema's state, say) fails the read instead of
/// being guessed at (REG-4: fail closed).
impl FromSql<Text, Pg> for State {
    fn from_sql(bytes: diesel::pg::PgValue<'_>) -> deserialize::Result<Self> {
        let text = <String as FromSql<Text, Pg>>::from_sql(bytes)?;
        text.parse()
            .map_err(|_| format!("unknown lifecycle state {:?}", bounded(text)).into())
    }
}

/// A cursor over one row's columns in the order of [`COLUMNS`].
struct Columns<'r, R> {
    row: &'r R,
    at: usize,
}

impl<'r, R> Columns<'r, R> {
    /// The next column, expected to be called `name`.
    fn next<'a, ST, T>(&mut self, name: &str) -> deserialize::Result<T>
    where
        R: NamedRow<'a, Pg>,
        T: FromSql<ST, Pg>,
    {
        let here = self.at;
        self.at += 1;
        match Row::get(self.row, here) {
            Some(field) if field.field_name() == Some(name) => T::from_nullable_sql(field.value()),
            _ => {
                debug_assert!(false, "column `{name}` is not at position {here}");
                NamedRow::get::<ST, T>(self.row, name)
            }
        }
    }
}

/// What a successful claim returns: everything a runner needs so that no
/// batch has to re-read the row.
#[derive(Debug, Clone, QueryableByName)]
pub struct ClaimRow {
    #[diesel(sql_type = Text)]
    pub id: String,
    #[diesel(sql_type = Text)]
    pub state: State,
    #[diesel(sql_type = BigInt)]
    pub generation: i64,
    #[diesel(sql_type = Nullable<Binary>)]
    pub bound: Option<Vec<u8>>,
    #[diesel(sql_type = Nullable<Binary>)]
    pub checkpoint: Option<Vec<u8>>,
    #[diesel(sql_type = Bool)]
    pub empty_source: bool,
    #[diesel(sql_type = Timestamptz)]
    pub lease_expires_at: DateTime<Utc>,
    /// The owner whose expired claim this one replaced (a takeover), if any.
    #[diesel(sql_type = Nullable<Text>)]
    pub prior_owner: Option<String>,
}

/// A renewed claim.
#[derive(Debug, Clone, QueryableByName)]
pub struct RenewedRow {
    #[diesel(sql_type = Text)]
    pub id: String,
    #[diesel(sql_type = BigInt)]
    pub generation: i64,
}

/// The state a fenced write left behind.
#[derive(Debug, Clone, QueryableByName)]
pub struct StateRow {
    #[diesel(sql_type = Text)]
    pub state: State,
    #[diesel(sql_type = Integer)]
    pub attempts: i32,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub next_attempt_at: Option<DateTime<Utc>>,
}

/// Upsert the definitions of this process (REG-1, REG-2): one row per
/// stable ID, whatever the order or number of registering processes.
/// Metadata is last-write-wins and touches nothing else. No lock beyond the
/// insert's; no fence (metadata is never a fence, CLM-5).
pub async fn backfill_register(
    conn: &mut AsyncPgConnection,
    ids: &[String],
    descriptions: &[String],
    build_info: &str,
) -> Result<(), StoreError> {
    super::cached(
        diesel::sql_query(
            "INSERT INTO backfill (id, description, build_info) \
         SELECT d.id, NULLIF(d.description, ''), NULLIF($3, '') \
         FROM unnest($1::text[], $2::text[]) AS d(id, description) \
         ON CONFLICT (id) DO UPDATE SET description = EXCLUDED.description, \
             build_info = EXCLUDED.build_info, updated_at = now() \
         WHERE backfill.description IS DISTINCT FROM EXCLUDED.description \
            OR backfill.build_info IS DISTINCT FROM EXCLUDED.build_info",
        )
        .bind::<Array<Text>, _>(ids)
        .bind::<Array<Text>, _>(descriptions)
        .bind::<Text, _>(build_info),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Read one row. No lock.
pub async fn backfill_get(
    conn: &mut AsyncPgConnection,
    id: &str,
) -> Result<Option<BackfillRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!("SELECT {COLUMNS} FROM backfill WHERE id = $1"))
            .bind::<Text, _>(id),
    )
    .get_result(conn)
    .await
    .optional()?)
}

/// Read a page of rows ordered by ID, strictly after `after`. No lock.
/// Every stable ID sorts after the empty string, so the first page is the
/// same index range scan as the others (an `IS NULL OR` would not be).
pub async fn backfill_list(
    conn: &mut AsyncPgConnection,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<BackfillRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!(
            "SELECT {COLUMNS} FROM backfill WHERE id > coalesce($1, '') ORDER BY id LIMIT $2"
        ))
        .bind::<Nullable<Text>, _>(after)
        .bind::<BigInt, _>(limit),
    )
    .load(conn)
    .await?)
}

/// Read the rows of the given IDs (readiness). No lock.
pub async fn backfill_get_many(
    conn: &mut AsyncPgConnection,
    ids: &[String],
) -> Result<Vec<BackfillRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!(
            "SELECT {COLUMNS} FROM backfill WHERE id = ANY($1) ORDER BY id"
        ))
        .bind::<Array<Text>, _>(ids),
    )
    .load(conn)
    .await?)
}

/// Lock one row `FOR UPDATE` for the rest of the caller's transaction, so an
/// action reads the prior state it will transition from and concurrent
/// actions on the same ID serialize (ADM-4).
pub async fn backfill_lock(
    conn: &mut AsyncPgConnection,
    id: &str,
) -> Result<Option<BackfillRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!(
            "SELECT {COLUMNS} FROM backfill WHERE id = $1 FOR UPDATE"
        ))
        .bind::<Text, _>(id),
    )
    .get_result(conn)
    .await
    .optional()?)
}

/// The captured source set, in stored form.
pub struct StartValues<'a> {
    pub bound: Option<&'a [u8]>,
    pub bound_json: Option<&'a Value>,
    pub key_type: &'a str,
    pub source_rows: Option<i64>,
}

/// `start`: `pending` -> `running` (or `validating` for an empty source set,
/// EX-1) with the bound captured, in the caller's transaction. Fence: the
/// row must still be `pending`, so a second start matches zero rows and can
/// never recapture the bound. Advances the generation.
pub async fn backfill_start(
    conn: &mut AsyncPgConnection,
    id: &str,
    values: StartValues<'_>,
) -> Result<Option<BackfillRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!(
            "UPDATE backfill SET \
             state = CASE WHEN $2::bytea IS NULL THEN 'validating' ELSE 'running' END, \
             bound = $2, bound_json = $3, empty_source = ($2::bytea IS NULL), key_type = $4, \
             source_rows = $5, generation = generation + 1, attempts = 0, \
             next_attempt_at = NULL, started_at = now(), updated_at = now() \
         WHERE id = $1 AND state = 'pending' \
         RETURNING {COLUMNS}"
        ))
        .bind::<Text, _>(id)
        .bind::<Nullable<Binary>, _>(values.bound)
        .bind::<Nullable<Jsonb>, _>(values.bound_json)
        .bind::<Text, _>(values.key_type)
        .bind::<Nullable<BigInt>, _>(values.source_rows),
    )
    .get_result(conn)
    .await
    .optional()?)
}

/// Claim the next eligible backfill among `ids` (this process's definitions,
/// REG-4) that is not in `exclude`: a `running` row past its retry backoff or
/// a `validating` row, with no claim or an expired one (by PostgreSQL's
/// clock, CLM-3). Locks: `FOR UPDATE SKIP LOCKED` on the candidate, so
/// concurrent claimers never wait on or double-claim a row (CLM-1). Advances
/// the generation, which fences out any previous owner (CLM-4). The
/// candidate is chosen in a CTE with `LIMIT 1` (never `IN (subquery)`,
/// which can re-run the subquery and claim every row).
pub async fn backfill_claim(
    conn: &mut AsyncPgConnection,
    worker: &str,
    ids: &[String],
    exclude: &[String],
    ttl_ms: i64,
) -> Result<Option<ClaimRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(
            "WITH candidate AS ( \
             SELECT id, owner AS prior_owner FROM backfill \
             WHERE id = ANY($2) AND NOT (id = ANY($3)) \
               AND state IN ('running', 'validating') \
               AND (next_attempt_at IS NULL OR next_attempt_at <= clock_timestamp()) \
               AND (owner IS NULL OR lease_expires_at <= clock_timestamp()) \
             ORDER BY next_attempt_at NULLS FIRST, updated_at, id \
             LIMIT 1 \
             FOR UPDATE SKIP LOCKED) \
         UPDATE backfill b SET owner = $1, \
             lease_expires_at = clock_timestamp() + $4 * interval '1 millisecond', \
             generation = b.generation + 1, next_attempt_at = NULL, updated_at = now() \
         FROM candidate c WHERE b.id = c.id \
         RETURNING b.id, b.state, b.generation, b.bound, b.checkpoint, b.empty_source, \
             b.lease_expires_at, c.prior_owner",
        )
        .bind::<Text, _>(worker)
        .bind::<Array<Text>, _>(ids)
        .bind::<Array<Text>, _>(exclude)
        .bind::<BigInt, _>(ttl_ms),
    )
    .get_result(conn)
    .await
    .optional()?)
}

/// Renew every listed claim this worker holds, in one statement. Fence:
/// same owner, same generation and a lease that has not expired yet by
/// PostgreSQL's clock; a claim missing from the result is lost (CLM-3).
pub async fn lease_renew(
    conn: &mut AsyncPgConnection,
    worker: &str,
    ids: &[String],
    generations: &[i64],
    ttl_ms: i64,
) -> Result<Vec<RenewedRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(
            "UPDATE backfill b SET \
             lease_expires_at = clock_timestamp() + $4 * interval '1 millisecond' \
         FROM unnest($2::text[], $3::bigint[]) AS h(id, generation) \
         WHERE b.id = h.id AND b.generation = h.generation AND b.owner = $1 \
           AND b.lease_expires_at > clock_timestamp() \
         RETURNING b.id, b.generation",
        )
        .bind::<Text, _>(worker)
        .bind::<Array<Text>, _>(ids)
        .bind::<Array<BigInt>, _>(generations)
        .bind::<BigInt, _>(ttl_ms),
    )
    .load(conn)
    .await?)
}

/// Give a claim back (graceful shutdown), so another process can continue
/// at once. Fence: same owner and generation; `false` means the claim was
/// already gone. State, bound and checkpoint are untouched.
pub async fn lease_release(
    conn: &mut AsyncPgConnection,
    id: &str,
    worker: &str,
    generation: i64,
) -> Result<bool, StoreError> {
    let n = super::cached(
        diesel::sql_query(
            "UPDATE backfill SET owner = NULL, lease_expires_at = NULL, updated_at = now() \
         WHERE id = $1 AND owner = $2 AND generation = $3",
        )
        .bind::<Text, _>(id)
        .bind::<Text, _>(worker)
        .bind::<BigInt, _>(generation),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}

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
    pub id: &'a str,
    pub worker: &'a str,
    pub generation: i64,
    /// The checkpoint the batch started from (`None`: before every key).
    pub expected: Option<&'a [u8]>,
    pub checkpoint: &'a [u8],
    pub checkpoint_json: &'a Value,
    /// Keys the batch changed, added to `rows_done`.
    pub rows: i64,
    /// The size the batch ran with, recorded as the size in force (THR-3).
    pub batch_size: i32,
}

impl Advance<'_> {
    /// `SELECT backfill_checkpoint_advance(..); COMMIT` with every value
    /// hex-encoded ([`hex_literal`]).
    fn fence_commit_sql(&self) -> String {
        format!(
            "SELECT backfill_checkpoint_advance({}, {}, {}, {}, {}, ({})::jsonb, {}, {}); COMMIT",
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
        Err(diesel::result::Error::DatabaseError(_, info))
            if info.message() == "backfill stale fence" =>
        {
            Ok(FenceCommit::Stale)
        }
        Err(error) => Err(error.into()),
    }
}

/// Record a classified execution error durably (RT-1) and drop the claim.
/// `kind` is `retryable`, `blocked` or `fatal`: retryable stays in its state
/// with `next_attempt_at` pushed out by exponential backoff (base doubled per
/// consecutive attempt, capped) until `max_attempts` is reached, then
/// `failed` (RT-2); blocked goes to `blocked`; fatal to `failed`. Fence:
/// owner, generation and unexpired lease; `None` = stale, nothing recorded.
/// `batch_size`, when given, becomes the size in force (a statement
/// timeout halves it before the retry, THR-3).
#[allow(clippy::too_many_arguments)]
pub async fn backfill_record_failure(
    conn: &mut AsyncPgConnection,
    id: &str,
    worker: &str,
    generation: i64,
    kind: &str,
    message: &str,
    max_attempts: i32,
    backoff_base_ms: i64,
    backoff_max_ms: i64,
    batch_size: Option<i32>,
) -> Result<Option<StateRow>, StoreError> {
    Ok(super::cached(diesel::sql_query(
        "UPDATE backfill SET \
             attempts = CASE WHEN $4 = 'retryable' THEN attempts + 1 ELSE attempts END, \
             state = CASE WHEN $4 = 'blocked' THEN 'blocked' \
                          WHEN $4 = 'fatal' THEN 'failed' \
                          WHEN attempts + 1 >= $6 THEN 'failed' \
                          ELSE state END, \
             next_attempt_at = CASE WHEN $4 = 'retryable' AND attempts + 1 < $6 \
                 THEN clock_timestamp() + least($7 * power(2, attempts), $8) * interval '1 millisecond' \
                 ELSE NULL END, \
             owner = NULL, lease_expires_at = NULL, \
             last_error_kind = $4, last_error = $5, last_error_at = now(), updated_at = now(), \
             batch_size = coalesce($9, batch_size) \
         WHERE id = $1 AND owner = $2 AND generation = $3 \
           AND state IN ('running', 'validating') AND lease_expires_at > clock_timestamp() \
         RETURNING state, attempts, next_attempt_at",
    )
    .bind::<Text, _>(id)
    .bind::<Text, _>(worker)
    .bind::<BigInt, _>(generation)
    .bind::<Text, _>(kind)
    .bind::<Text, _>(message)
    .bind::<Integer, _>(max_attempts)
    .bind::<BigInt, _>(backoff_base_ms)
    .bind::<BigInt, _>(backoff_max_ms)
    .bind::<Nullable<Integer>, _>(batch_size))
    .get_result(conn)
    .await
    .optional()?)
}

/// Fenced completion (VAL-3): `validating` -> `completed` after successful
/// validation, as the last statement of the validation transaction. Fence:
/// state `validating`, owner, generation and unexpired lease by
/// `clock_timestamp()`; a paused or retried run has a new generation and
/// matches nothing. `false` = stale.
pub async fn validation_complete(
    conn: &mut AsyncPgConnection,
    id: &str,
    worker: &str,
    generation: i64,
) -> Result<bool, StoreError> {
    let n = super::cached(
        diesel::sql_query(
            "UPDATE backfill SET state = 'completed', owner = NULL, lease_expires_at = NULL, \
             validation_outcome = 'success', validation_detail = NULL, validated_at = now(), \
             completed_at = now(), updated_at = now() \
         WHERE id = $1 AND state = 'validating' AND owner = $2 AND generation = $3 \
           AND lease_expires_at > clock_timestamp()",
        )
        .bind::<Text, _>(id)
        .bind::<Text, _>(worker)
        .bind::<BigInt, _>(generation),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Fenced rejection (VAL-3): `validating` -> `failed` (or `blocked` when the
/// validation names an unmet prerequisite) with the bounded diagnostic.
/// Same fence as [`validation_complete`]. `false` = stale.
pub async fn validation_reject(
    conn: &mut AsyncPgConnection,
    id: &str,
    worker: &str,
    generation: i64,
    to_state: State,
    detail: &str,
) -> Result<bool, StoreError> {
    let n = super::cached(
        diesel::sql_query(
            "UPDATE backfill SET state = $4, owner = NULL, lease_expires_at = NULL, \
             validation_outcome = 'failure', validation_detail = $5, validated_at = now(), \
             last_error_kind = 'validation', last_error = $5, last_error_at = now(), \
             updated_at = now() \
         WHERE id = $1 AND state = 'validating' AND owner = $2 AND generation = $3 \
           AND lease_expires_at > clock_timestamp() AND $4 IN ('failed', 'blocked')",
        )
        .bind::<Text, _>(id)
        .bind::<Text, _>(worker)
        .bind::<BigInt, _>(generation)
        .bind::<Text, _>(to_state.as_str())
        .bind::<Text, _>(detail),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// `pause`: `running`/`validating` -> `paused`, advancing the generation and
/// dropping the claim in one statement, so every in-flight batch or
/// validation of the old generation fails its fence at commit (CT-5).
/// Waits on the row lock of a batch that is committing. `None` = the row was
/// not in a pausable state.
pub async fn backfill_pause(
    conn: &mut AsyncPgConnection,
    id: &str,
) -> Result<Option<BackfillRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!(
            "UPDATE backfill SET state = 'paused', generation = generation + 1, owner = NULL, \
             lease_expires_at = NULL, updated_at = now() \
         WHERE id = $1 AND state IN ('running', 'validating') \
         RETURNING {COLUMNS}"
        ))
        .bind::<Text, _>(id),
    )
    .get_result(conn)
    .await
    .optional()?)
}

/// `resume` (from `paused`) and `retry` (from `blocked`/`failed`): back to
/// `running`, or to `validating` when the checkpoint already reached the
/// bound or the source set was empty. Claims nothing; the bound and the
/// checkpoint are untouched (LC-4, RT-3); retry also clears the attempt
/// count and backoff. Advances the generation so that nothing issued before
/// the action can commit after it. `None` = not in a source state.
pub async fn backfill_reactivate(
    conn: &mut AsyncPgConnection,
    id: &str,
    from_states: &[State],
    reset_attempts: bool,
) -> Result<Option<BackfillRow>, StoreError> {
    let from: Vec<&str> = from_states.iter().map(|s| s.as_str()).collect();
    Ok(super::cached(
        diesel::sql_query(format!(
            "UPDATE backfill SET \
             state = CASE WHEN empty_source OR checkpoint = bound THEN 'validating' \
                          ELSE 'running' END, \
             generation = generation + 1, next_attempt_at = NULL, \
             attempts = CASE WHEN $3 THEN 0 ELSE attempts END, updated_at = now() \
         WHERE id = $1 AND state = ANY($2) AND state IN ('paused', 'blocked', 'failed') \
         RETURNING {COLUMNS}"
        ))
        .bind::<Text, _>(id)
        .bind::<Array<Text>, _>(from)
        .bind::<Bool, _>(reset_attempts),
    )
    .get_result(conn)
    .await
    .optional()?)
}

/// Persist the bounded outcome of an explicit validation (VAL-7). Touches
/// only the validation columns: never lifecycle, bound, checkpoint,
/// generation or claim (VAL-5). No fence: it is a record, not a transition.
pub async fn validation_record(
    conn: &mut AsyncPgConnection,
    id: &str,
    outcome: &str,
    detail: Option<&str>,
) -> Result<bool, StoreError> {
    let n = super::cached(
        diesel::sql_query(
            "UPDATE backfill SET validation_outcome = $2, validation_detail = $3, \
             validated_at = now() \
         WHERE id = $1",
        )
        .bind::<Text, _>(id)
        .bind::<Text, _>(outcome)
        .bind::<Nullable<Text>, _>(detail),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Store a backfill's live settings (THR-4), in the caller's transaction,
/// which holds the row lock ([`backfill_lock`]) so the settings it read and
/// changed are the ones it replaces. Fence: the row must not be
/// `completed` (terminal, LC-4; the guard trigger does not cover this
/// column). Touches only `settings` and `updated_at`: never lifecycle,
/// bound, checkpoint, generation or claim, so a batch in flight commits as
/// usual. `None` = no such row, or it is completed.
pub async fn backfill_settings_update(
    conn: &mut AsyncPgConnection,
    id: &str,
    settings: &Value,
) -> Result<Option<BackfillRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!(
            "UPDATE backfill SET settings = $2, updated_at = now() \
         WHERE id = $1 AND state <> 'completed' \
         RETURNING {COLUMNS}"
        ))
        .bind::<Text, _>(id)
        .bind::<Jsonb, _>(settings),
    )
    .get_result(conn)
    .await
    .optional()?)
}

/// The NOTIFY channel that wakes supervisors. A hint only: a lost, late,
/// duplicated or replayed notification changes nothing committed.
pub const WAKE_CHANNEL: &str = "backfill_wake";

/// `LISTEN` for wake-ups on a dedicated connection.
pub async fn wake_listen(conn: &mut AsyncPgConnection) -> Result<(), StoreError> {
    diesel::sql_query(format!("LISTEN {WAKE_CHANNEL}"))
        .execute(conn)
        .await?;
    Ok(())
}

/// Queue a wake-up for `id` in the caller's transaction: PostgreSQL
/// delivers it only if (and when) the transaction commits.
pub async fn wake_notify(conn: &mut AsyncPgConnection, id: &str) -> Result<(), StoreError> {
    super::cached(
        diesel::sql_query("SELECT pg_notify($1, $2)")
            .bind::<Text, _>(WAKE_CHANNEL)
            .bind::<Text, _>(id),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Number of backfills per lifecycle state (metrics). No lock.
pub async fn backfill_count_by_state(
    conn: &mut AsyncPgConnection,
) -> Result<Vec<(State, i64)>, StoreError> {
    #[derive(QueryableByName)]
    struct ByState {
        #[diesel(sql_type = Text)]
        state: State,
        #[diesel(sql_type = BigInt)]
        n: i64,
    }
    let rows: Vec<ByState> = super::cached(diesel::sql_query(
        "SELECT state, count(*) AS n FROM backfill GROUP BY state",
    ))
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| (r.state, r.n)).collect())
}
