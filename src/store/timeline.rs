//! The timeline of one backfill (OBS-4): the records the timeline triggers
//! write in the transactions that change a backfill or its partitions
//! (claims, state changes, retryable errors, throttling, explicit
//! validations), read together with the operator actions that took
//! effect, from the audit.

use super::StoreError;
use chrono::{DateTime, Utc};
use diesel::sql_types::{BigInt, Integer, Nullable, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// One entry of a backfill's timeline.
#[derive(Debug, Clone, PartialEq, QueryableByName)]
pub struct TimelineRow {
    /// `runtime` (a record of the timeline triggers, whoever made the
    /// change) or `operator` (an action that took effect, from the audit).
    #[diesel(sql_type = Text)]
    pub source: String,
    /// The record's sequence number within its source.
    #[diesel(sql_type = BigInt)]
    pub seq: i64,
    /// When the change was recorded.
    #[diesel(sql_type = Timestamptz)]
    pub at: DateTime<Utc>,
    /// A runtime record's kind (`state`, `claimed`, `error`, `throttled`,
    /// `unthrottled`, `validated`) or an operator's action.
    #[diesel(sql_type = Text)]
    pub kind: String,
    /// The partition a runtime record is about, if any.
    #[diesel(sql_type = Nullable<Integer>)]
    pub part: Option<i32>,
    /// The state before a lifecycle transition or operator action; `None`
    /// for other records.
    #[diesel(sql_type = Nullable<Text>)]
    pub from_state: Option<String>,
    /// The state the change left, when it records one.
    #[diesel(sql_type = Nullable<Text>)]
    pub state: Option<String>,
    /// The claiming worker of a claim, or the operator of an action.
    #[diesel(sql_type = Nullable<Text>)]
    pub actor: Option<String>,
    /// The generation the change left (for a claim, the new claim's).
    #[diesel(sql_type = Nullable<BigInt>)]
    pub generation: Option<i64>,
    /// An action's outcome (`applied`, `converged`); none for runtime
    /// records.
    #[diesel(sql_type = Nullable<Text>)]
    pub outcome: Option<String>,
    /// The bounded diagnostic or detail the change recorded.
    #[diesel(sql_type = Nullable<Text>)]
    pub detail: Option<String>,
    /// The reason an operator gave for an action.
    #[diesel(sql_type = Nullable<Text>)]
    pub reason: Option<String>,
}

/// The newest `limit` entries of the timeline of `id`, newest first: the
/// timeline triggers' records and the operator actions of the audit that
/// took effect (`applied` or `converged`; refusals stay in the audit
/// only). No lock; two index ranges.
pub async fn timeline_list(
    conn: &mut AsyncPgConnection,
    id: &str,
    limit: i64,
) -> Result<Vec<TimelineRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(
            "SELECT * FROM ( \
                 (SELECT 'runtime' AS source, seq, at, kind, part, from_state, state, \
                      owner AS actor, generation, NULL::text AS outcome, detail, \
                      NULL::text AS reason \
                  FROM backfill_event WHERE backfill_id = $1 ORDER BY seq DESC LIMIT $2) \
                 UNION ALL \
                 (SELECT 'operator', seq, at, action, NULL, prior_state, resulting_state, \
                      actor, generation, outcome, detail, reason \
                  FROM backfill_audit \
                  WHERE backfill_id = $1 AND outcome IN ('applied', 'converged') \
                  ORDER BY seq DESC LIMIT $2)) AS t \
             ORDER BY at DESC, source, seq DESC LIMIT $2",
        )
        .bind::<Text, _>(id)
        .bind::<BigInt, _>(limit),
    )
    .load(conn)
    .await?)
}
