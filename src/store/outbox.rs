//! The notification outbox (NTF-1, NTF-2): the fragment that queues a
//! state change's notification inside the statement that makes the
//! change, and the sender's statements (subscription, the long-throttle
//! detection, due rows, delivery outcomes, pruning) and reads (the admin
//! list, the counts `/metrics` reads).

use super::StoreError;
use chrono::{DateTime, Utc};
use diesel::sql_types::{Array, BigInt, Bool, Integer, Nullable, Text, Timestamptz, Uuid};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// The CTE member that queues the notification of a state change, for a
/// statement whose changed backfill row is the CTE `changed` (columns
/// `id, state, generation, last_error_kind, last_error, undo_of`). The
/// event follows from the state the row was left in: `completed` (or
/// `undo_completed` for a row with `undo_of`), `validation_failed` (a
/// `failed` row whose error kind is `validation`), `failed`, `blocked`;
/// any other state queues nothing. One row per target subscribed to the
/// event with an unexpired subscription; none without. Part of the
/// statement, so it commits or rolls back with the change itself.
pub(super) const OUTBOX_ENQUEUE: &str = "queued AS ( \
     INSERT INTO backfill_outbox (target, event, backfill_id, generation, state, \
         error_kind, detail, undo_of) \
     SELECT s.target, e.event, d.id, d.generation, d.state, d.last_error_kind, \
         left(d.last_error, 512), d.undo_of \
     FROM changed d \
     CROSS JOIN LATERAL (SELECT CASE \
         WHEN d.state = 'completed' AND d.undo_of IS NULL THEN 'completed' \
         WHEN d.state = 'completed' THEN 'undo_completed' \
         WHEN d.state = 'failed' AND d.last_error_kind = 'validation' THEN 'validation_failed' \
         WHEN d.state IN ('failed', 'blocked') THEN d.state END AS event) e \
     JOIN backfill_notify_subscription s \
         ON s.event = e.event AND s.expires_at > now())";

/// The columns `changed` returns for [`OUTBOX_ENQUEUE`].
pub(super) const CHANGED_COLUMNS: &str =
    "id, state, generation, last_error_kind, last_error, undo_of";

/// Try to become the fleet's one notification sender: a session-level
/// advisory lock, on a dedicated connection that holds it for as long as
/// it lives, so a sender that dies (or loses its session) hands over
/// without a timeout. Does not wait.
pub async fn notify_leader_try_lock(conn: &mut AsyncPgConnection) -> Result<bool, StoreError> {
    #[derive(QueryableByName)]
    struct Locked {
        #[diesel(sql_type = Bool)]
        locked: bool,
    }
    let row: Locked = super::cached(diesel::sql_query(
        "SELECT pg_try_advisory_lock(hashtextextended('backfill-notify-sender', 0)) AS locked",
    ))
    .get_result(conn)
    .await?;
    Ok(row.locked)
}

/// Whether the session that holds the sender's lock is still alive (its
/// locks live with it). No lock taken; an error means it is gone.
pub async fn notify_leader_ping(conn: &mut AsyncPgConnection) -> Result<(), StoreError> {
    super::cached(diesel::sql_query("SELECT 1"))
        .execute(conn)
        .await?;
    Ok(())
}

/// Replace the subscription with `(targets[i], events[i])`, each valid for
/// `ttl_ms` from now: pairs not listed are deleted. Run by the sender
/// holding the lock; takes the rows' locks for the statement only.
pub async fn outbox_subscribe(
    conn: &mut AsyncPgConnection,
    targets: &[String],
    events: &[String],
    ttl_ms: i64,
) -> Result<(), StoreError> {
    super::cached(
        diesel::sql_query(
            "WITH want AS (SELECT * FROM unnest($1::text[], $2::text[]) AS w(target, event)), \
             gone AS (DELETE FROM backfill_notify_subscription s WHERE NOT EXISTS ( \
                 SELECT 1 FROM want w WHERE w.target = s.target AND w.event = s.event)) \
             INSERT INTO backfill_notify_subscription (target, event, expires_at) \
             SELECT target, event, now() + $3 * interval '1 millisecond' FROM want \
             ON CONFLICT (target, event) DO UPDATE SET expires_at = EXCLUDED.expires_at",
        )
        .bind::<Array<Text>, _>(targets)
        .bind::<Array<Text>, _>(events)
        .bind::<BigInt, _>(ttl_ms),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// Queue a `throttled` notification for every throttle condition that has
/// lasted at least `after_ms` (by its `since`, PostgreSQL's clock) on a
/// claimed `running` backfill or partition whose generation it carries,
/// once per subscribed target and condition (`dedupe`: the ID, the
/// partition, the generation and `since`; a second pass inserts nothing).
/// Reads without locks; the number of rows queued.
pub async fn outbox_enqueue_throttled(
    conn: &mut AsyncPgConnection,
    after_ms: i64,
) -> Result<usize, StoreError> {
    Ok(super::cached(
        diesel::sql_query(
            "WITH throttled AS ( \
                 SELECT b.id, NULL::integer AS part, b.generation, b.state, b.throttle \
                 FROM backfill b \
                 WHERE b.throttle IS NOT NULL AND b.state = 'running' AND b.owner IS NOT NULL \
                   AND (b.throttle->>'generation')::bigint = b.generation \
                 UNION ALL \
                 SELECT p.backfill_id, p.part, p.generation, b.state, p.throttle \
                 FROM backfill_partition p JOIN backfill b ON b.id = p.backfill_id \
                 WHERE p.throttle IS NOT NULL AND b.state = 'running' AND p.owner IS NOT NULL \
                   AND (p.throttle->>'generation')::bigint = p.generation) \
             INSERT INTO backfill_outbox (target, event, backfill_id, part, generation, state, \
                 detail, dedupe) \
             SELECT s.target, 'throttled', t.id, t.part, t.generation, t.state, \
                 left(t.throttle->>'text', 512), \
                 concat_ws(':', 'throttled', t.id, t.part, t.generation, t.throttle->>'since') \
             FROM throttled t JOIN backfill_notify_subscription s \
                 ON s.event = 'throttled' AND s.expires_at > now() \
             WHERE (t.throttle->>'since')::timestamptz <= now() - $1 * interval '1 millisecond' \
             ON CONFLICT (target, dedupe) DO NOTHING",
        )
        .bind::<BigInt, _>(after_ms),
    )
    .execute(conn)
    .await?)
}

/// One queued notification, as the sender delivers it and the admin API
/// lists it.
#[derive(Debug, Clone, QueryableByName)]
pub struct OutboxRow {
    /// The stable event ID a receiver de-duplicates on: the same on every
    /// try and after any restart (NTF-2).
    #[diesel(sql_type = Uuid)]
    pub event_id: uuid::Uuid,
    /// The notification's sequence number, in the order it was queued.
    #[diesel(sql_type = BigInt)]
    pub seq: i64,
    /// The name of the webhook target it is for (never its URL or secret,
    /// NTF-3).
    #[diesel(sql_type = Text)]
    pub target: String,
    /// The event: `blocked`, `failed`, `completed`, `validation_failed`,
    /// `undo_completed` or `throttled` (NTF-1).
    #[diesel(sql_type = Text)]
    pub event: String,
    /// The backfill the event is about.
    #[diesel(sql_type = Text)]
    pub backfill_id: String,
    /// The partition of a partition's throttle; `None` otherwise.
    #[diesel(sql_type = Nullable<Integer>)]
    pub part: Option<i32>,
    /// The generation the change left.
    #[diesel(sql_type = BigInt)]
    pub generation: i64,
    /// The state the change left.
    #[diesel(sql_type = Text)]
    pub state: String,
    /// The recorded error class of a block or failure, as the change
    /// recorded it.
    #[diesel(sql_type = Nullable<Text>)]
    pub error_kind: Option<String>,
    /// The bounded diagnostic the change recorded, or the throttle's text;
    /// never row data (NTF-3).
    #[diesel(sql_type = Nullable<Text>)]
    pub detail: Option<String>,
    /// For an event of an undo, the backfill it takes back (UNDO-2).
    #[diesel(sql_type = Nullable<Text>)]
    pub undo_of: Option<String>,
    /// When the notification was queued, in the transaction of the change.
    #[diesel(sql_type = Timestamptz)]
    pub created_at: DateTime<Utc>,
    /// `pending`, `delivered` or `dead` (NTF-2).
    #[diesel(sql_type = Text)]
    pub status: String,
    /// Delivery tries so far.
    #[diesel(sql_type = Integer)]
    pub attempts: i32,
    /// When the sender may try a `pending` notification next (its backoff).
    #[diesel(sql_type = Timestamptz)]
    pub next_attempt_at: DateTime<Utc>,
    /// A short phrase saying why the last try failed; never a URL or secret
    /// (NTF-3).
    #[diesel(sql_type = Nullable<Text>)]
    pub last_error: Option<String>,
    /// When the status or tries last changed; delivered and dead
    /// notifications are deleted a retention after it.
    #[diesel(sql_type = Timestamptz)]
    pub updated_at: DateTime<Utc>,
}

const OUTBOX_COLUMNS: &str = "event_id, seq, target, event, backfill_id, part, generation, \
     state, error_kind, detail, undo_of, created_at, status, attempts, next_attempt_at, \
     last_error, updated_at";

/// At most `limit` pending rows due by now, oldest first. No lock: only
/// the sender holding the advisory lock delivers.
pub async fn outbox_due(
    conn: &mut AsyncPgConnection,
    limit: i64,
) -> Result<Vec<OutboxRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!(
            "SELECT {OUTBOX_COLUMNS} FROM backfill_outbox \
             WHERE status = 'pending' AND next_attempt_at <= now() \
             ORDER BY seq LIMIT $1"
        ))
        .bind::<BigInt, _>(limit),
    )
    .load(conn)
    .await?)
}

/// Count a try of each of `event_ids` before it is sent (NTF-2), so a
/// sender that dies between its POST and recording the answer has still
/// used the try: a row whose tries keep killing the sender ends `dead`
/// after `max_attempts`, never retried without bound. Each try's next one
/// is due after `least(base * 2^attempts, max)`, the backoff a failure
/// would give it, so a try cut off by a crash is retried after it; a row
/// that already used every try is marked `dead` instead of sent again.
/// Fence: the row is still `pending`. The rows to send now, in the order
/// given.
pub async fn outbox_attempt(
    conn: &mut AsyncPgConnection,
    event_ids: &[uuid::Uuid],
    max_attempts: i32,
    backoff_base_ms: i64,
    backoff_max_ms: i64,
) -> Result<Vec<uuid::Uuid>, StoreError> {
    #[derive(QueryableByName)]
    struct Sent {
        #[diesel(sql_type = Uuid)]
        event_id: uuid::Uuid,
    }
    let rows: Vec<Sent> = super::cached(
        diesel::sql_query(
            "WITH tried AS (UPDATE backfill_outbox SET \
                 status = CASE WHEN attempts >= $2 THEN 'dead' ELSE status END, \
                 last_error = CASE WHEN attempts >= $2 \
                     THEN 'the sender stopped during each of its tries' ELSE last_error END, \
                 attempts = attempts + CASE WHEN attempts >= $2 THEN 0 ELSE 1 END, \
                 next_attempt_at = clock_timestamp() \
                     + least($3 * power(2, least(attempts, 30)), $4) * interval '1 millisecond', \
                 updated_at = now() \
             WHERE event_id = ANY($1) AND status = 'pending' \
             RETURNING event_id, status) \
             SELECT event_id FROM tried WHERE status = 'pending'",
        )
        .bind::<Array<Uuid>, _>(event_ids)
        .bind::<Integer, _>(max_attempts)
        .bind::<BigInt, _>(backoff_base_ms)
        .bind::<BigInt, _>(backoff_max_ms),
    )
    .load(conn)
    .await?;
    let sent: std::collections::HashSet<uuid::Uuid> =
        rows.into_iter().map(|r| r.event_id).collect();
    Ok(event_ids
        .iter()
        .copied()
        .filter(|id| sent.contains(id))
        .collect())
}

/// Record a delivery the receiver accepted (its try was counted by
/// [`outbox_attempt`]). Fence: the row is still `pending`; `false` = it
/// was not (already recorded).
pub async fn outbox_delivered(
    conn: &mut AsyncPgConnection,
    event_id: uuid::Uuid,
) -> Result<bool, StoreError> {
    let n = super::cached(
        diesel::sql_query(
            "UPDATE backfill_outbox SET status = 'delivered', \
                 last_error = NULL, updated_at = now() \
             WHERE event_id = $1 AND status = 'pending'",
        )
        .bind::<Uuid, _>(event_id),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Record a failed try (`error` bounded, no URL or secret; the try was
/// counted by [`outbox_attempt`]): the next try after `least(base *
/// 2^(attempts - 1), max)`, or `dead` once `max_attempts` tries failed.
/// Fence: the row is still `pending`; `None` = it was not. The status it
/// was left in.
pub async fn outbox_failed(
    conn: &mut AsyncPgConnection,
    event_id: uuid::Uuid,
    error: &str,
    max_attempts: i32,
    backoff_base_ms: i64,
    backoff_max_ms: i64,
) -> Result<Option<String>, StoreError> {
    use diesel::OptionalExtension;
    #[derive(QueryableByName)]
    struct Status {
        #[diesel(sql_type = Text)]
        status: String,
    }
    let row: Option<Status> = super::cached(
        diesel::sql_query(
            "UPDATE backfill_outbox SET last_error = $2, \
                 status = CASE WHEN attempts >= $3 THEN 'dead' ELSE 'pending' END, \
                 next_attempt_at = clock_timestamp() \
                     + least($4 * power(2, least(greatest(attempts - 1, 0), 30)), $5) \
                     * interval '1 millisecond', \
                 updated_at = now() \
             WHERE event_id = $1 AND status = 'pending' \
             RETURNING status",
        )
        .bind::<Uuid, _>(event_id)
        .bind::<Text, _>(crate::failure::bounded(error))
        .bind::<Integer, _>(max_attempts)
        .bind::<BigInt, _>(backoff_base_ms)
        .bind::<BigInt, _>(backoff_max_ms),
    )
    .get_result(conn)
    .await
    .optional()?;
    Ok(row.map(|r| r.status))
}

/// Delete delivered and dead rows last changed more than `retention_ms`
/// ago, so the outbox stays bounded. The number deleted.
pub async fn outbox_prune(
    conn: &mut AsyncPgConnection,
    retention_ms: i64,
) -> Result<usize, StoreError> {
    Ok(super::cached(
        diesel::sql_query(
            "DELETE FROM backfill_outbox WHERE status <> 'pending' \
               AND updated_at < now() - $1 * interval '1 millisecond'",
        )
        .bind::<BigInt, _>(retention_ms),
    )
    .execute(conn)
    .await?)
}

/// A page of the outbox, newest first: rows below `before` (a `seq`),
/// optionally of one status. No lock.
pub async fn outbox_list(
    conn: &mut AsyncPgConnection,
    status: Option<&str>,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<OutboxRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!(
            "SELECT {OUTBOX_COLUMNS} FROM backfill_outbox \
             WHERE ($1::text IS NULL OR status = $1) AND ($2::bigint IS NULL OR seq < $2) \
             ORDER BY seq DESC LIMIT $3"
        ))
        .bind::<Nullable<Text>, _>(status)
        .bind::<Nullable<BigInt>, _>(before)
        .bind::<BigInt, _>(limit),
    )
    .load(conn)
    .await?)
}

/// Notifications per status (`pending`, `delivered`, `dead`), for
/// `/metrics`. No lock.
pub async fn outbox_count_by_status(
    conn: &mut AsyncPgConnection,
) -> Result<[(&'static str, i64); 3], StoreError> {
    #[derive(QueryableByName)]
    struct ByStatus {
        #[diesel(sql_type = BigInt)]
        pending: i64,
        #[diesel(sql_type = BigInt)]
        delivered: i64,
        #[diesel(sql_type = BigInt)]
        dead: i64,
    }
    let row: ByStatus = super::cached(diesel::sql_query(
        "SELECT count(*) FILTER (WHERE status = 'pending') AS pending, \
             count(*) FILTER (WHERE status = 'delivered') AS delivered, \
             count(*) FILTER (WHERE status = 'dead') AS dead \
         FROM backfill_outbox",
    ))
    .get_result(conn)
    .await?;
    Ok([
        ("pending", row.pending),
        ("delivered", row.delivered),
        ("dead", row.dead),
    ])
}
