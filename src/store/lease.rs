//! Claims over the `backfill` table: taking one (new or by takeover),
//! renewing and releasing leases, and recording a failure, which drops
//! the claim. Every write is fenced by owner, generation and a lease
//! unexpired by PostgreSQL's clock.

use super::outbox::{CHANGED_COLUMNS, OUTBOX_ENQUEUE};
use super::StoreError;
use crate::lifecycle::State;
use chrono::{DateTime, Utc};
use diesel::deserialize::QueryableByName;
use diesel::sql_types::{Array, BigInt, Binary, Bool, Integer, Nullable, Text, Timestamptz};
use diesel::OptionalExtension;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// What a successful claim returns: everything a runner needs so that no
/// batch has to re-read the row.
#[derive(Debug, Clone, QueryableByName)]
pub struct ClaimRow {
    /// The claimed backfill's stable ID.
    #[diesel(sql_type = Text)]
    pub id: String,
    /// The row's state: `running` (batches to run) or `validating`
    /// (validation to run).
    #[diesel(sql_type = Text)]
    pub state: State,
    /// The generation this claim advanced the row to; every fenced write
    /// presents it (CLM-2).
    #[diesel(sql_type = BigInt)]
    pub generation: i64,
    /// The captured bound in the key encoding; `None` for an empty source
    /// set.
    #[diesel(sql_type = Nullable<Binary>)]
    pub bound: Option<Vec<u8>>,
    /// The committed checkpoint the claim continues after (CLM-4); `None`
    /// before every key.
    #[diesel(sql_type = Nullable<Binary>)]
    pub checkpoint: Option<Vec<u8>>,
    /// Whether `start` found an empty source set (EX-1).
    #[diesel(sql_type = Bool)]
    pub empty_source: bool,
    /// When the new lease expires, by PostgreSQL's clock (CLM-3).
    #[diesel(sql_type = Timestamptz)]
    pub lease_expires_at: DateTime<Utc>,
    /// The owner whose expired claim this one replaced (a takeover), if any.
    #[diesel(sql_type = Nullable<Text>)]
    pub prior_owner: Option<String>,
}

/// A renewed claim.
#[derive(Debug, Clone, QueryableByName)]
pub struct RenewedRow {
    /// The backfill whose claim was renewed.
    #[diesel(sql_type = Text)]
    pub id: String,
    /// The generation of the renewed claim.
    #[diesel(sql_type = BigInt)]
    pub generation: i64,
}

/// The state a fenced write left behind.
#[derive(Debug, Clone, QueryableByName)]
pub struct StateRow {
    /// The backfill's state after the write.
    #[diesel(sql_type = Text)]
    pub state: State,
    /// Consecutive failed attempts after the write (RT-2).
    #[diesel(sql_type = Integer)]
    pub attempts: i32,
    /// The end of the retry backoff, when a retryable failure left one.
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub next_attempt_at: Option<DateTime<Utc>>,
}

/// Claim the next eligible backfill among `ids` (this process's definitions,
/// REG-4) that is not in `exclude`: a `running` row past its retry backoff or
/// a `validating` row, with no claim or an expired one (by PostgreSQL's
/// clock, CLM-3). Locks: `FOR UPDATE SKIP LOCKED` on the candidate, so
/// concurrent claimers never wait on or double-claim a row (CLM-1). Advances
/// the generation, which fences out any previous owner (CLM-4). The
/// candidate is chosen in a CTE with `LIMIT 1` (never `IN (subquery)`,
/// which can re-run the subquery and claim every row). A `running`
/// backfill with partitions is not claimed here: its partitions are
/// ([`super::partition_claim`], PAR-2); its validation is.
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
               AND (state = 'validating' OR NOT EXISTS ( \
                   SELECT 1 FROM backfill_partition p WHERE p.backfill_id = backfill.id)) \
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

/// The claim poll's read of which of `$1` have work a claim could take
/// now, skipping `$2` and the partitions `($3[i], $4[i])`.
const CLAIMABLE: &str = "SELECT b.id FROM backfill b \
     WHERE b.id = ANY($1) AND NOT (b.id = ANY($2)) \
     AND ((b.state IN ('running', 'validating') \
     AND (b.next_attempt_at IS NULL OR b.next_attempt_at <= clock_timestamp()) \
     AND (b.owner IS NULL OR b.lease_expires_at <= clock_timestamp()) \
     AND (b.state = 'validating' OR NOT EXISTS ( \
     SELECT 1 FROM backfill_partition p WHERE p.backfill_id = b.id))) \
     OR (b.state = 'running' AND EXISTS ( \
     SELECT 1 FROM backfill_partition p WHERE p.backfill_id = b.id \
     AND p.checkpoint IS DISTINCT FROM p.upper \
     AND (p.next_attempt_at IS NULL OR p.next_attempt_at <= clock_timestamp()) \
     AND (p.owner IS NULL OR p.lease_expires_at <= clock_timestamp()) \
     AND NOT EXISTS (SELECT 1 FROM unnest($3::text[], $4::integer[]) \
     AS x(id, part) \
     WHERE x.id = p.backfill_id AND x.part = p.part)))) \
     ORDER BY b.id";

/// Which of `ids` have work a claim could take now (FLT-2), without
/// claiming it: a backfill `backfill_claim` would take (not in
/// `exclude`), or a `running` one with a partition `partition_claim`
/// would (not one of the `(exclude_part_ids[i], exclude_parts[i])` this
/// process holds). No lock, so the answer may be stale by the time a
/// claim follows; it also leaves out the partition claim's concurrency
/// and fair-share conditions, so it may name an ID whose claim then finds
/// nothing. The budget uses it to know which priority a database waits
/// with, and a claim that finds nothing gives its permit back.
pub async fn backfill_claimable(
    conn: &mut AsyncPgConnection,
    ids: &[String],
    exclude: &[String],
    exclude_part_ids: &[String],
    exclude_parts: &[i32],
) -> Result<Vec<String>, StoreError> {
    let rows: Vec<ClaimableId> = super::cached(
        diesel::sql_query(CLAIMABLE)
            .bind::<Array<Text>, _>(ids)
            .bind::<Array<Text>, _>(exclude)
            .bind::<Array<Text>, _>(exclude_part_ids)
            .bind::<Array<Integer>, _>(exclude_parts),
    )
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// [`backfill_claimable`] that also records `beat`, the presence of the
/// process that polls (PAR-6), as [`worker_heartbeat`](super::worker_heartbeat)
/// does but without reading the claims to give back: one statement, so
/// an idle database's claim poll is its only query (FLT-1). The upsert is
/// a data-modifying CTE; the read of what is claimable does not read
/// `backfill_worker`, so it answers the same as without it. Locks only
/// the worker's own presence row.
pub async fn backfill_claimable_heartbeat(
    conn: &mut AsyncPgConnection,
    ids: &[String],
    exclude: &[String],
    exclude_part_ids: &[String],
    exclude_parts: &[i32],
    beat: &super::Heartbeat,
) -> Result<Vec<String>, StoreError> {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let sql = SQL.get_or_init(|| {
        format!(
            "WITH {ctes} {CLAIMABLE}",
            ctes = super::worker::heartbeat_ctes("$5", "$6", "$7", "$8")
        )
    });
    let rows: Vec<ClaimableId> = super::cached(
        diesel::sql_query(sql.as_str())
            .bind::<Array<Text>, _>(ids)
            .bind::<Array<Text>, _>(exclude)
            .bind::<Array<Text>, _>(exclude_part_ids)
            .bind::<Array<Integer>, _>(exclude_parts)
            .bind::<Text, _>(&beat.worker)
            .bind::<Array<Text>, _>(&beat.ids)
            .bind::<Integer, _>(beat.free_runners.max(0))
            .bind::<BigInt, _>(beat.ttl_ms),
    )
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

#[derive(QueryableByName)]
struct ClaimableId {
    #[diesel(sql_type = Text)]
    id: String,
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

/// Record a classified execution error durably (RT-1) and drop the claim.
/// `kind` is `retryable`, `blocked` or `fatal`: retryable stays in its state
/// with `next_attempt_at` pushed out by exponential backoff (base doubled per
/// consecutive attempt, capped) until `max_attempts` is reached, then
/// `failed` (RT-2); blocked goes to `blocked`; fatal to `failed`. Fence:
/// owner, generation and unexpired lease; `None` = stale, nothing recorded.
/// `batch_size`, when given, becomes the size in force (a statement
/// timeout halves it before the retry, THR-3). A move to `blocked` or
/// `failed` queues its notification in the same statement (NTF-1).
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
    Ok(super::cached(diesel::sql_query(format!(
        "WITH changed AS (UPDATE backfill SET \
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
         RETURNING attempts, next_attempt_at, {CHANGED_COLUMNS}), {OUTBOX_ENQUEUE} \
         SELECT state, attempts, next_attempt_at FROM changed",
    ))
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
