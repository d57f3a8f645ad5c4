//! Statements over `backfill_audit` (AUD-1) and `backfill_request` (ADM-4).

use super::StoreError;
use crate::lifecycle::State;
use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Integer, Jsonb, Nullable, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

/// One audit record to write. Every text is bounded by the table's CHECKs.
#[derive(Debug, Clone, Default)]
pub struct NewAudit<'a> {
    /// The backfill the action named, or `*` for a request that names no
    /// single backfill.
    pub backfill_id: &'a str,
    /// The action requested (`start`, `pause`, `settings`, ...).
    pub action: &'a str,
    /// The authenticated principal; `None` when the authority names no
    /// individual (trusted network, unauthenticated; AUTH-2).
    pub actor: Option<&'a str>,
    /// The source of authority: `token`, `trusted-network` or `none`.
    pub authority: &'a str,
    /// The request's idempotency key or request id, if it sent one and may
    /// have it recorded (AUD-3).
    pub correlation: Option<&'a str>,
    /// The backfill's state before the action, when it was read.
    pub prior_state: Option<State>,
    /// The backfill's state after the action, when it was read.
    pub resulting_state: Option<State>,
    /// The generation the action left, where relevant.
    pub generation: Option<i64>,
    /// The bounded outcome code (`applied`, `converged`, `conflict`,
    /// `rejected`, ...).
    pub outcome: &'a str,
    /// A bounded, redacted detail of the outcome (AUD-2).
    pub detail: Option<&'a str>,
    /// The operator's reason for an action, if given.
    pub reason: Option<&'a str>,
}

/// A stored audit record.
#[derive(Debug, Clone, QueryableByName, serde::Serialize)]
pub struct AuditRow {
    /// The record's sequence number, increasing in insertion order.
    #[diesel(sql_type = BigInt)]
    pub seq: i64,
    /// When the record was written.
    #[diesel(sql_type = Timestamptz)]
    pub at: DateTime<Utc>,
    /// The backfill the action named; `*` when it named none, or when the
    /// requests of a coalesced window named different ones (AUD-3).
    #[diesel(sql_type = Text)]
    pub backfill_id: String,
    /// The action requested; `*` when the requests of a coalesced window
    /// asked for different ones.
    #[diesel(sql_type = Text)]
    pub action: String,
    /// The authenticated principal; `None` when the authority names no
    /// individual (AUTH-2).
    #[diesel(sql_type = Nullable<Text>)]
    pub actor: Option<String>,
    /// The source of authority: `token`, `trusted-network` or `none`.
    #[diesel(sql_type = Text)]
    pub authority: String,
    /// The request's idempotency key or request id, if recorded (AUD-3).
    #[diesel(sql_type = Nullable<Text>)]
    pub correlation: Option<String>,
    /// The backfill's state before the action, when it was read.
    #[diesel(sql_type = Nullable<Text>)]
    pub prior_state: Option<State>,
    /// The backfill's state after the action, when it was read.
    #[diesel(sql_type = Nullable<Text>)]
    pub resulting_state: Option<State>,
    /// The generation the action left, where relevant.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub generation: Option<i64>,
    /// The bounded outcome code (`applied`, `converged`, `conflict`,
    /// `rejected`, ...).
    #[diesel(sql_type = Text)]
    pub outcome: String,
    /// A bounded, redacted detail of the outcome (AUD-2).
    #[diesel(sql_type = Nullable<Text>)]
    pub detail: Option<String>,
    /// Requests the row stands for: 1, or more for a coalesced window of
    /// rejections (API-3).
    #[diesel(sql_type = BigInt)]
    pub request_count: i64,
    /// Peer address of a coalesced window's requests.
    #[diesel(sql_type = Nullable<Text>)]
    pub source: Option<String>,
    /// When the latest request of a coalesced window was counted.
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub last_at: Option<DateTime<Utc>>,
    /// The operator's reason for an action, if given.
    #[diesel(sql_type = Nullable<Text>)]
    pub reason: Option<String>,
}

/// Append one audit record, in the caller's transaction: an accepted change
/// and its audit row commit together or not at all (AUD-1).
pub async fn audit_insert(
    conn: &mut AsyncPgConnection,
    audit: &NewAudit<'_>,
) -> Result<i64, StoreError> {
    #[derive(QueryableByName)]
    struct Seq {
        #[diesel(sql_type = BigInt)]
        seq: i64,
    }
    let row: Seq = super::cached(
        diesel::sql_query(
            "INSERT INTO backfill_audit (backfill_id, action, actor, authority, correlation, \
             prior_state, resulting_state, generation, outcome, detail, reason) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING seq",
        )
        .bind::<Text, _>(audit.backfill_id)
        .bind::<Text, _>(audit.action)
        .bind::<Nullable<Text>, _>(audit.actor)
        .bind::<Text, _>(audit.authority)
        .bind::<Nullable<Text>, _>(audit.correlation)
        .bind::<Nullable<Text>, _>(audit.prior_state.map(State::as_str))
        .bind::<Nullable<Text>, _>(audit.resulting_state.map(State::as_str))
        .bind::<Nullable<BigInt>, _>(audit.generation)
        .bind::<Text, _>(audit.outcome)
        .bind::<Nullable<Text>, _>(audit.detail)
        .bind::<Nullable<Text>, _>(audit.reason),
    )
    .get_result(conn)
    .await?;
    Ok(row.seq)
}

/// Count `requests` more rejections into the coalesced audit row `window`
/// (API-3), or, when `window` is `None` (or names no row), open a new one
/// from `first` (the requests being counted) with `source` and the count;
/// returns the row's `seq`. A row keeps its backfill ID and action only
/// while the requests counted into it share them; once one differs, that
/// column becomes `*` (AUD-3). Locks: the window row's row lock for the
/// UPDATE, nothing beyond the insert otherwise. Outside any caller
/// transaction: the rejected requests changed nothing, and one writer per
/// process (`admin::flood`) is the only one to touch its rows, so the lock
/// is never waited on.
pub async fn audit_coalesce(
    conn: &mut AsyncPgConnection,
    window: Option<i64>,
    first: &NewAudit<'_>,
    source: Option<&str>,
    requests: i64,
) -> Result<i64, StoreError> {
    #[derive(QueryableByName)]
    struct Seq {
        #[diesel(sql_type = BigInt)]
        seq: i64,
    }
    let row: Seq = super::cached(
        diesel::sql_query(
            "WITH bumped AS ( \
               UPDATE backfill_audit SET request_count = request_count + $12, last_at = now(), \
                 backfill_id = CASE WHEN backfill_id = $2 THEN backfill_id ELSE '*' END, \
                 action = CASE WHEN action = $3 THEN action ELSE '*' END \
               WHERE seq = $1 RETURNING seq), \
             opened AS ( \
               INSERT INTO backfill_audit (backfill_id, action, actor, authority, correlation, \
                 prior_state, resulting_state, generation, outcome, detail, request_count, \
                 source, last_at) \
               SELECT $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, now() \
               WHERE NOT EXISTS (SELECT 1 FROM bumped) RETURNING seq) \
             SELECT seq FROM bumped UNION ALL SELECT seq FROM opened",
        )
        .bind::<Nullable<BigInt>, _>(window)
        .bind::<Text, _>(first.backfill_id)
        .bind::<Text, _>(first.action)
        .bind::<Nullable<Text>, _>(first.actor)
        .bind::<Text, _>(first.authority)
        .bind::<Nullable<Text>, _>(first.correlation)
        .bind::<Nullable<Text>, _>(first.prior_state.map(State::as_str))
        .bind::<Nullable<Text>, _>(first.resulting_state.map(State::as_str))
        .bind::<Nullable<BigInt>, _>(first.generation)
        .bind::<Text, _>(first.outcome)
        .bind::<Nullable<Text>, _>(first.detail)
        .bind::<BigInt, _>(requests)
        .bind::<Nullable<Text>, _>(source),
    )
    .get_result(conn)
    .await?;
    Ok(row.seq)
}

/// A page of audit records, newest first, optionally for one backfill and
/// strictly before `before` (a `seq`). No lock.
pub async fn audit_list(
    conn: &mut AsyncPgConnection,
    backfill_id: Option<&str>,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditRow>, StoreError> {
    Ok(diesel::sql_query(
        "SELECT seq, at, backfill_id, action, actor, authority, correlation, prior_state, \
             resulting_state, generation, outcome, detail, request_count, source, last_at, \
             reason \
         FROM backfill_audit \
         WHERE ($1::text IS NULL OR backfill_id = $1) AND ($2::bigint IS NULL OR seq < $2) \
         ORDER BY seq DESC LIMIT $3",
    )
    .bind::<Nullable<Text>, _>(backfill_id)
    .bind::<Nullable<BigInt>, _>(before)
    .bind::<BigInt, _>(limit)
    .load(conn)
    .await?)
}

/// A stored idempotent response.
#[derive(Debug, Clone, QueryableByName)]
pub struct RequestRow {
    /// The backfill the original request named.
    #[diesel(sql_type = Text)]
    pub backfill_id: String,
    /// The action the original request asked for; a retry with the same key
    /// and another action or backfill is refused.
    #[diesel(sql_type = Text)]
    pub action: String,
    /// The HTTP status of the stored response.
    #[diesel(sql_type = Integer)]
    pub status: i32,
    /// The stored response body, replayed verbatim to every retry of the
    /// key (ADM-4).
    #[diesel(sql_type = Jsonb)]
    pub response: Value,
}

/// Take the transaction-scoped advisory lock of one idempotency key of
/// `principal` (its name, or '' for an authority that names no
/// individual), so concurrent duplicates of one logical request run one at
/// a time and the later ones find the first one's stored response
/// (ADM-4). The principal's length goes into the lock's name so that no
/// principal and key can spell another pair's.
pub async fn request_lock(
    conn: &mut AsyncPgConnection,
    principal: &str,
    key: &str,
) -> Result<(), StoreError> {
    super::cached(
        diesel::sql_query(
            "SELECT pg_advisory_xact_lock(hashtextextended(\
             'backfill-request:' || length($1) || ':' || $1 || ':' || $2, 0))",
        )
        .bind::<Text, _>(principal)
        .bind::<Text, _>(key),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Read the stored response of `principal`'s idempotency key. No lock
/// (callers hold [`request_lock`]).
pub async fn request_get(
    conn: &mut AsyncPgConnection,
    principal: &str,
    key: &str,
) -> Result<Option<RequestRow>, StoreError> {
    let rows: Vec<RequestRow> = super::cached(
        diesel::sql_query(
            "SELECT backfill_id, action, status, response FROM backfill_request \
         WHERE principal = $1 AND idempotency_key = $2",
        )
        .bind::<Text, _>(principal)
        .bind::<Text, _>(key),
    )
    .load(conn)
    .await?;
    Ok(rows.into_iter().next())
}

/// Store the response of `principal`'s idempotency key, in the same
/// transaction as the action it answers.
pub async fn request_insert(
    conn: &mut AsyncPgConnection,
    principal: &str,
    key: &str,
    backfill_id: &str,
    action: &str,
    status: i32,
    response: &Value,
) -> Result<(), StoreError> {
    super::cached(diesel::sql_query(
        "INSERT INTO backfill_request (principal, idempotency_key, backfill_id, action, status, \
         response) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind::<Text, _>(principal)
    .bind::<Text, _>(key)
    .bind::<Text, _>(backfill_id)
    .bind::<Text, _>(action)
    .bind::<Integer, _>(status)
    .bind::<Jsonb, _>(response))
    .execute(conn)
    .await?;
    Ok(())
}
