//! Partitions of a backfill (PAR-1..PAR-3): writing them at `start`,
//! reading them, claiming, renewing and releasing one, recording a
//! partition's failure, and fencing every partition when the backfill's
//! lifecycle changes. A backfill without partition rows never reaches
//! these statements' writes.
//!
//! Lock order, kept by every statement here that takes both: the
//! `backfill` row first, then its partitions. The admin actions lock the
//! backfill row first (`backfill_lock`), and the partition fence
//! (`backfill_partition_advance`) locks it first at a partition's end, so
//! no two of them can wait on each other in a cycle.

use super::lease::StateRow;
use super::outbox::{CHANGED_COLUMNS, OUTBOX_ENQUEUE};
use super::StoreError;
use chrono::{DateTime, Utc};
use diesel::deserialize::QueryableByName;
use diesel::sql_types::{Array, BigInt, Binary, Integer, Jsonb, Nullable, Text, Timestamptz};
use diesel::OptionalExtension;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

/// One partition's range as `start` writes it: `(lower, upper]` in the
/// stored key encoding, `lower` `None` before every key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRange {
    /// The exclusive lower end in the key encoding; `None` lies before
    /// every key (the first partition).
    pub lower: Option<Vec<u8>>,
    /// The lower end rendered as JSON for display.
    pub lower_json: Option<Value>,
    /// The inclusive upper end in the key encoding; the last partition's is
    /// the bound.
    pub upper: Vec<u8>,
    /// The upper end rendered as JSON for display.
    pub upper_json: Value,
}

/// A partition row as the admin view and the tests read it.
#[derive(Debug, Clone, QueryableByName)]
pub struct PartitionRow {
    /// The backfill the partition belongs to.
    #[diesel(sql_type = Text)]
    pub backfill_id: String,
    /// The partition's number, from 0 in key order.
    #[diesel(sql_type = Integer)]
    pub part: i32,
    /// The exclusive lower end of its range; `None` lies before every key.
    /// Fixed at `start` (PAR-1).
    #[diesel(sql_type = Nullable<Binary>)]
    pub lower: Option<Vec<u8>>,
    /// The lower end rendered as JSON for display.
    #[diesel(sql_type = Nullable<Jsonb>)]
    pub lower_json: Option<Value>,
    /// The inclusive upper end of its range; fixed at `start` (PAR-1).
    #[diesel(sql_type = Binary)]
    pub upper: Vec<u8>,
    /// The upper end rendered as JSON for display.
    #[diesel(sql_type = Jsonb)]
    pub upper_json: Value,
    /// The partition's own checkpoint (PAR-2): it starts at `lower` (`None`
    /// before every key) and has ended when it equals `upper`. Never moves
    /// backward nor past `upper`.
    #[diesel(sql_type = Nullable<Binary>)]
    pub checkpoint: Option<Vec<u8>>,
    /// The checkpoint rendered as JSON for display.
    #[diesel(sql_type = Nullable<Jsonb>)]
    pub checkpoint_json: Option<Value>,
    /// The partition's own fencing generation (PAR-2), advanced by each of
    /// its claims and takeovers.
    #[diesel(sql_type = BigInt)]
    pub generation: i64,
    /// The worker ID holding the partition's claim; `None` when unclaimed.
    #[diesel(sql_type = Nullable<Text>)]
    pub owner: Option<String>,
    /// When the partition's claim expires, by PostgreSQL's clock (CLM-3);
    /// set exactly when `owner` is.
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// Consecutive retryable failures of this partition (RT-2).
    #[diesel(sql_type = Integer)]
    pub attempts: i32,
    /// The end of the partition's retry backoff; `None` when none applies.
    #[diesel(sql_type = Nullable<Timestamptz>)]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The bounded diagnostic of the partition's last failure.
    #[diesel(sql_type = Nullable<Text>)]
    pub last_error: Option<String>,
    /// Keys the partition's committed batches processed (diagnostic).
    #[diesel(sql_type = BigInt)]
    pub rows_done: i64,
    /// Batches the partition committed (diagnostic).
    #[diesel(sql_type = BigInt)]
    pub batches_done: i64,
    /// The batch size the partition's last batch or statement timeout left
    /// in force (THR-3); `None` before its first batch.
    #[diesel(sql_type = Nullable<Integer>)]
    pub batch_size: Option<i32>,
    /// The runner's throttle condition as `partition_throttle_set` wrote
    /// it (with `since` and `generation`), or `NULL`.
    #[diesel(sql_type = Nullable<Jsonb>)]
    pub throttle: Option<Value>,
    /// When the partition's row last changed.
    #[diesel(sql_type = Timestamptz)]
    pub updated_at: DateTime<Utc>,
}

impl PartitionRow {
    /// Whether the partition's checkpoint reached its upper end.
    pub fn ended(&self) -> bool {
        self.checkpoint.as_deref() == Some(self.upper.as_slice())
    }
}

const PARTITION_COLUMNS: &str = "backfill_id, part, lower, lower_json, upper, upper_json, \
     checkpoint, checkpoint_json, generation, owner, lease_expires_at, attempts, \
     next_attempt_at, last_error, rows_done, batches_done, batch_size, throttle, updated_at";

/// Write the partitions of `id` in the `start` transaction that captured
/// the bound (PAR-1), numbered from 0 in key order, each starting with its
/// checkpoint at its lower end. The insert guard of migration
/// `..._partitions` refuses rows for a backfill that was not started in
/// this same transaction. Takes the new rows' locks only.
pub async fn partition_insert(
    conn: &mut AsyncPgConnection,
    id: &str,
    ranges: &[PartitionRange],
) -> Result<usize, StoreError> {
    let parts: Vec<i32> = (0..ranges.len() as i32).collect();
    let lowers: Vec<Option<&[u8]>> = ranges.iter().map(|r| r.lower.as_deref()).collect();
    let lower_json: Vec<Option<&Value>> = ranges.iter().map(|r| r.lower_json.as_ref()).collect();
    let uppers: Vec<&[u8]> = ranges.iter().map(|r| r.upper.as_slice()).collect();
    let upper_json: Vec<&Value> = ranges.iter().map(|r| &r.upper_json).collect();
    Ok(super::cached(
        diesel::sql_query(
            "INSERT INTO backfill_partition \
                 (backfill_id, part, lower, lower_json, upper, upper_json, checkpoint, checkpoint_json) \
             SELECT $1, u.part, u.lower, u.lower_json, u.upper, u.upper_json, u.lower, u.lower_json \
             FROM unnest($2::integer[], $3::bytea[], $4::jsonb[], $5::bytea[], $6::jsonb[]) \
                 AS u(part, lower, lower_json, upper, upper_json)",
        )
        .bind::<Text, _>(id)
        .bind::<Array<Integer>, _>(parts)
        .bind::<Array<Nullable<Binary>>, _>(lowers)
        .bind::<Array<Nullable<Jsonb>>, _>(lower_json)
        .bind::<Array<Binary>, _>(uppers)
        .bind::<Array<Jsonb>, _>(upper_json),
    )
    .execute(conn)
    .await?)
}

/// The partitions of the listed backfills, by ID and part. Reads committed
/// rows; no lock, no fence. Empty for a backfill without partitions.
pub async fn partition_list(
    conn: &mut AsyncPgConnection,
    ids: &[String],
) -> Result<Vec<PartitionRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!(
            "SELECT {PARTITION_COLUMNS} FROM backfill_partition \
             WHERE backfill_id = ANY($1) ORDER BY backfill_id, part"
        ))
        .bind::<Array<Text>, _>(ids),
    )
    .load(conn)
    .await?)
}

/// What a partition claim returns: what a runner needs so that no batch
/// has to read the row again.
#[derive(Debug, Clone, QueryableByName)]
pub struct PartitionClaimRow {
    /// The backfill whose partition was claimed.
    #[diesel(sql_type = Text)]
    pub id: String,
    /// The claimed partition's number.
    #[diesel(sql_type = Integer)]
    pub part: i32,
    /// The generation this claim advanced the partition to; its batches
    /// present it at commit (CLM-2, PAR-2).
    #[diesel(sql_type = BigInt)]
    pub generation: i64,
    /// The partition's inclusive upper end, where its batches stop.
    #[diesel(sql_type = Binary)]
    pub upper: Vec<u8>,
    /// The partition's committed checkpoint the claim continues after
    /// (CLM-4); `None` before every key, which only the first partition
    /// starts at.
    #[diesel(sql_type = Nullable<Binary>)]
    pub checkpoint: Option<Vec<u8>>,
    /// When the new lease expires, by PostgreSQL's clock (CLM-3).
    #[diesel(sql_type = Timestamptz)]
    pub lease_expires_at: DateTime<Utc>,
    /// The owner whose expired claim this one replaced (a takeover), if
    /// any.
    #[diesel(sql_type = Nullable<Text>)]
    pub prior_owner: Option<String>,
}

#[derive(QueryableByName)]
struct Candidate {
    #[diesel(sql_type = Text)]
    id: String,
    #[diesel(sql_type = Integer)]
    concurrency: i32,
}

/// The part of the claim statements that says which partitions are
/// claimable: not ended, past its retry backoff, no claim or an expired
/// one by PostgreSQL's clock (CLM-3), not excluded by the caller.
const CLAIMABLE: &str = "p.checkpoint IS DISTINCT FROM p.upper \
     AND (p.next_attempt_at IS NULL OR p.next_attempt_at <= clock_timestamp()) \
     AND (p.owner IS NULL OR p.lease_expires_at <= clock_timestamp()) \
     AND NOT EXISTS (SELECT 1 FROM unnest($2::text[], $3::integer[]) AS x(id, part) \
                     WHERE x.id = p.backfill_id AND x.part = p.part)";

/// Partitions of `b` whose claims are live: what the concurrency setting
/// (THR-4) counts, fleet-wide.
const LIVE: &str = "(SELECT count(*) FROM backfill_partition q WHERE q.backfill_id = b.id \
     AND q.owner IS NOT NULL AND q.lease_expires_at > clock_timestamp())";

/// Claim a claimable partition of a `running` backfill among `ids` (REG-4),
/// skipping the `(exclude_ids[i], exclude_parts[i])` pairs, in TWO
/// statements that must run in one transaction (the caller's). The first
/// picks a backfill with a claimable partition and room under its
/// concurrency setting and locks its row `FOR NO KEY UPDATE SKIP LOCKED`;
/// the second, under a snapshot taken after that lock, counts its live
/// partition claims again and claims one partition `FOR UPDATE SKIP
/// LOCKED`, advancing that partition's generation (CLM-1, CLM-4, PAR-2).
/// Claims of one backfill's partitions so take turns on its row, and the
/// concurrency setting holds however many processes claim. Both also
/// require that `worker` holds fewer of the backfill's partitions than
/// its fair share ([`worker_heartbeat`](super::worker_heartbeat),
/// PAR-6). `None`: nothing claimable (or the race for it was lost).
pub async fn partition_claim(
    conn: &mut AsyncPgConnection,
    worker: &str,
    ids: &[String],
    exclude: &[(String, u32)],
    ttl_ms: i64,
) -> Result<Option<PartitionClaimRow>, StoreError> {
    let ex_ids: Vec<&str> = exclude.iter().map(|(id, _)| id.as_str()).collect();
    let ex_parts: Vec<i32> = exclude
        .iter()
        .map(|(_, p)| i32::try_from(*p).unwrap_or(i32::MAX))
        .collect();
    let candidate: Option<Candidate> = super::cached(
        diesel::sql_query(format!(
            "SELECT b.id, coalesce((b.settings->>'concurrency')::integer, 64) AS concurrency \
             FROM backfill b \
             WHERE b.id = ANY($1) AND b.state = 'running' \
               AND (b.next_attempt_at IS NULL OR b.next_attempt_at <= clock_timestamp()) \
               AND EXISTS (SELECT 1 FROM backfill_partition p WHERE p.backfill_id = b.id AND {CLAIMABLE}) \
               AND {LIVE} < coalesce((b.settings->>'concurrency')::integer, 64) \
               AND {below_share} \
             ORDER BY b.updated_at, b.id LIMIT 1 \
             FOR NO KEY UPDATE OF b SKIP LOCKED",
            below_share = super::worker::below_share("$4"),
        ))
        .bind::<Array<Text>, _>(ids)
        .bind::<Array<Text>, _>(&ex_ids)
        .bind::<Array<Integer>, _>(&ex_parts)
        .bind::<Text, _>(worker),
    )
    .get_result(conn)
    .await
    .optional()?;
    let Some(candidate) = candidate else {
        return Ok(None);
    };
    Ok(super::cached(
        diesel::sql_query(format!(
            "WITH candidate AS ( \
                 SELECT p.backfill_id, p.part, p.owner AS prior_owner \
                 FROM backfill_partition p JOIN backfill b ON b.id = p.backfill_id \
                 WHERE p.backfill_id = $1 AND b.state = 'running' AND {CLAIMABLE} \
                   AND {LIVE} < $5 AND {below_share} \
                 ORDER BY p.part LIMIT 1 \
                 FOR UPDATE OF p SKIP LOCKED) \
             UPDATE backfill_partition p SET owner = $4, \
                 lease_expires_at = clock_timestamp() + $6 * interval '1 millisecond', \
                 generation = p.generation + 1, next_attempt_at = NULL, updated_at = now() \
             FROM candidate c WHERE p.backfill_id = c.backfill_id AND p.part = c.part \
             RETURNING p.backfill_id AS id, p.part, p.generation, p.upper, p.checkpoint, \
                 p.lease_expires_at, c.prior_owner",
            below_share = super::worker::below_share("$4"),
        ))
        .bind::<Text, _>(&candidate.id)
        .bind::<Array<Text>, _>(&ex_ids)
        .bind::<Array<Integer>, _>(&ex_parts)
        .bind::<Text, _>(worker)
        .bind::<Integer, _>(candidate.concurrency)
        .bind::<BigInt, _>(ttl_ms),
    )
    .get_result(conn)
    .await
    .optional()?)
}

/// A renewed partition claim.
#[derive(Debug, Clone, QueryableByName)]
pub struct RenewedPartition {
    /// The backfill whose partition claim was renewed.
    #[diesel(sql_type = Text)]
    pub id: String,
    /// The renewed partition's number.
    #[diesel(sql_type = Integer)]
    pub part: i32,
    /// The generation of the renewed claim.
    #[diesel(sql_type = BigInt)]
    pub generation: i64,
}

/// Renew every listed partition claim of this worker in one statement.
/// Fence: owner, the partition's generation, a lease not yet expired by
/// PostgreSQL's clock; a claim missing from the result is lost (CLM-3).
/// A claim is also refused when the concurrency setting (THR-4) was
/// lowered below it: when as many live claims of lower partitions exist,
/// so a lowered setting takes effect within one renewal. Locks the
/// partition rows only.
pub async fn partition_renew(
    conn: &mut AsyncPgConnection,
    worker: &str,
    claims: &[(String, u32, i64)],
    ttl_ms: i64,
) -> Result<Vec<RenewedPartition>, StoreError> {
    let ids: Vec<&str> = claims.iter().map(|(id, _, _)| id.as_str()).collect();
    let parts: Vec<i32> = claims
        .iter()
        .map(|(_, p, _)| i32::try_from(*p).unwrap_or(i32::MAX))
        .collect();
    let gens: Vec<i64> = claims.iter().map(|(_, _, g)| *g).collect();
    Ok(super::cached(
        diesel::sql_query(
            "UPDATE backfill_partition p SET \
                 lease_expires_at = clock_timestamp() + $5 * interval '1 millisecond' \
             FROM unnest($2::text[], $3::integer[], $4::bigint[]) AS h(id, part, generation), \
                 backfill b \
             WHERE p.backfill_id = h.id AND p.part = h.part AND p.generation = h.generation \
               AND p.owner = $1 AND p.lease_expires_at > clock_timestamp() AND b.id = h.id \
               AND (SELECT count(*) FROM backfill_partition q \
                    WHERE q.backfill_id = p.backfill_id AND q.part < p.part \
                      AND q.owner IS NOT NULL AND q.lease_expires_at > clock_timestamp()) \
                   < coalesce((b.settings->>'concurrency')::integer, 64) \
             RETURNING p.backfill_id AS id, p.part, p.generation",
        )
        .bind::<Text, _>(worker)
        .bind::<Array<Text>, _>(ids)
        .bind::<Array<Integer>, _>(parts)
        .bind::<Array<BigInt>, _>(gens)
        .bind::<BigInt, _>(ttl_ms),
    )
    .load(conn)
    .await?)
}

/// Roll the partitions' counters up into the rows of the listed `running`
/// backfills (PAR-5, THR-5): each backfill's `rows_done` and
/// `batches_done` become the sums over its partitions, so a reader of the
/// backfill row sees a partitioned run move. Called after partition lease
/// renewal, never on the batch path: batches advance only their
/// partition's counters and never wait on the backfill row. The backfill
/// row is locked `FOR NO KEY UPDATE SKIP LOCKED`, so a row locked by
/// anyone else (an admin action, a claim round, a partition's end) is
/// skipped rather than waited for; it is caught up at the next renewal.
/// Counters only grow (`greatest`): a roll-up whose snapshot predates
/// another's cannot move them back. Rows whose counters already match
/// are neither locked nor written. A backfill without partitions, or no
/// longer `running` (the last partition's fence writes the exact sums),
/// is left alone. Returns the IDs written.
pub async fn backfill_progress_roll_up(
    conn: &mut AsyncPgConnection,
    ids: &[String],
) -> Result<Vec<String>, StoreError> {
    #[derive(QueryableByName)]
    struct Written {
        #[diesel(sql_type = Text)]
        id: String,
    }
    let rows: Vec<Written> = super::cached(
        diesel::sql_query(
            "WITH s AS ( \
                 SELECT backfill_id AS id, sum(rows_done)::bigint AS rows, \
                        sum(batches_done)::bigint AS batches \
                 FROM backfill_partition WHERE backfill_id = ANY($1::text[]) \
                 GROUP BY backfill_id \
             ), l AS ( \
                 SELECT b.id, s.rows, s.batches FROM backfill b JOIN s ON s.id = b.id \
                 WHERE b.state = 'running' \
                   AND (s.rows > b.rows_done OR s.batches > b.batches_done) \
                 FOR NO KEY UPDATE OF b SKIP LOCKED \
             ) \
             UPDATE backfill b SET rows_done = greatest(b.rows_done, l.rows), \
                 batches_done = greatest(b.batches_done, l.batches) \
             FROM l WHERE b.id = l.id AND b.state = 'running' \
             RETURNING b.id",
        )
        .bind::<Array<Text>, _>(ids),
    )
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// Give a partition claim back (graceful shutdown). Fence: owner and the
/// partition's generation; `false`: the claim was already gone.
pub async fn partition_release(
    conn: &mut AsyncPgConnection,
    id: &str,
    part: u32,
    worker: &str,
    generation: i64,
) -> Result<bool, StoreError> {
    let n = super::cached(
        diesel::sql_query(
            "UPDATE backfill_partition SET owner = NULL, lease_expires_at = NULL, \
                 updated_at = now() \
             WHERE backfill_id = $1 AND part = $2 AND owner = $3 AND generation = $4",
        )
        .bind::<Text, _>(id)
        .bind::<Integer, _>(i32::try_from(part).unwrap_or(i32::MAX))
        .bind::<Text, _>(worker)
        .bind::<BigInt, _>(generation),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Record (or clear, `None`) the throttle condition of a partition's
/// runner (THR-2, THR-5), as `backfill_throttle_set` does for a
/// backfill's own claim: stamped with `since` (PostgreSQL's clock when
/// throttling began, kept while a condition of the same generation is
/// refreshed) and the partition's generation, and fenced by owner and
/// generation, so a runner that lost the partition cannot label the next
/// owner's run; `false` means it did not match. Takes the partition's
/// row lock for the statement only; written when throttling begins or
/// ends and when the reading changes (at most once per health interval),
/// never per batch.
pub async fn partition_throttle_set(
    conn: &mut AsyncPgConnection,
    id: &str,
    part: u32,
    worker: &str,
    generation: i64,
    throttle: Option<&Value>,
) -> Result<bool, StoreError> {
    let n = super::cached(
        diesel::sql_query(
            "UPDATE backfill_partition SET throttle = CASE WHEN $5::jsonb IS NULL THEN NULL \
                 ELSE $5::jsonb || jsonb_build_object( \
                     'since', CASE WHEN throttle->'generation' = to_jsonb(generation) \
                                   THEN coalesce(throttle->'since', to_jsonb(now())) \
                                   ELSE to_jsonb(now()) END, \
                     'generation', generation) END \
             WHERE backfill_id = $1 AND part = $2 AND owner = $3 AND generation = $4",
        )
        .bind::<Text, _>(id)
        .bind::<Integer, _>(i32::try_from(part).unwrap_or(i32::MAX))
        .bind::<Text, _>(worker)
        .bind::<BigInt, _>(generation)
        .bind::<Nullable<Jsonb>, _>(throttle),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// Fence every partition of `id` (PAR-3): advance each generation and drop
/// each claim, so every in-flight batch of every partition fails its
/// fence at commit. Called in the transaction of the admin action that
/// changes the backfill's state, after it locked the backfill row;
/// `reset_attempts` (retry) also clears the partitions' retry counts and
/// backoffs. Locks every partition row of `id`; zero rows for a backfill
/// without partitions.
pub async fn partitions_fence(
    conn: &mut AsyncPgConnection,
    id: &str,
    reset_attempts: bool,
) -> Result<usize, StoreError> {
    Ok(super::cached(
        diesel::sql_query(
            "UPDATE backfill_partition SET generation = generation + 1, owner = NULL, \
                 lease_expires_at = NULL, updated_at = now(), \
                 attempts = CASE WHEN $2 THEN 0 ELSE attempts END, \
                 next_attempt_at = CASE WHEN $2 THEN NULL ELSE next_attempt_at END \
             WHERE backfill_id = $1",
        )
        .bind::<Text, _>(id)
        .bind::<diesel::sql_types::Bool, _>(reset_attempts),
    )
    .execute(conn)
    .await?)
}

#[derive(QueryableByName)]
struct PartitionFailure {
    #[diesel(sql_type = Integer)]
    attempts: i32,
    #[diesel(sql_type = Nullable<Timestamptz>)]
    next_attempt_at: Option<DateTime<Utc>>,
}

/// A failure of one partition, as [`partition_record_failure`] records it.
#[derive(Debug, Clone, Copy)]
pub struct PartitionFailureRecord<'a> {
    /// The backfill whose partition failed.
    pub id: &'a str,
    /// The partition that failed.
    pub part: u32,
    /// The worker ID that must still hold the partition's claim (the
    /// fence).
    pub worker: &'a str,
    /// The claim's partition generation, checked by the fence (CLM-2).
    pub generation: i64,
    /// `retryable`, `blocked` or `fatal`.
    pub kind: &'a str,
    /// The bounded diagnostic to record; prefixed with the partition's
    /// number when it moves the backfill (PAR-3).
    pub message: &'a str,
    /// Retryable failures allowed before the backfill fails (RT-2).
    pub max_attempts: i32,
    /// The first retry backoff, in milliseconds; it doubles with each
    /// attempt.
    pub backoff_base_ms: i64,
    /// The longest retry backoff, in milliseconds.
    pub backoff_max_ms: i64,
    /// The batch size to leave in force (THR-3: smaller after a statement
    /// timeout); `None` keeps the stored one.
    pub batch_size: Option<i32>,
}

/// Record a classified failure of one partition durably (RT-1, PAR-3) and
/// drop its claim, in statements that must share the caller's transaction.
/// Locks the backfill row first (the lock order above), then updates the
/// partition, fenced by owner, partition generation, unexpired lease and
/// the backfill being `running`; `None` = stale, nothing recorded. A
/// retryable failure under the attempt limit stays on the partition, with
/// its backoff (RT-2); a blocked, fatal or exhausted one moves the
/// backfill to `blocked` or `failed` with a diagnostic naming the
/// partition, and fences every partition in the same transaction; that
/// move queues its notification in the same statement (NTF-1).
pub async fn partition_record_failure(
    conn: &mut AsyncPgConnection,
    f: &PartitionFailureRecord<'_>,
) -> Result<Option<StateRow>, StoreError> {
    let part = i32::try_from(f.part).unwrap_or(i32::MAX);
    let Some(row) = super::backfill_lock(conn, f.id).await? else {
        return Ok(None);
    };
    let failure: Option<PartitionFailure> = super::cached(
        diesel::sql_query(
            "UPDATE backfill_partition p SET \
                 attempts = CASE WHEN $5 = 'retryable' THEN p.attempts + 1 ELSE p.attempts END, \
                 next_attempt_at = CASE WHEN $5 = 'retryable' AND p.attempts + 1 < $7 \
                     THEN clock_timestamp() + least($8 * power(2, p.attempts), $9) \
                         * interval '1 millisecond' \
                     ELSE NULL END, \
                 owner = NULL, lease_expires_at = NULL, last_error = $6, updated_at = now(), \
                 batch_size = coalesce($10, p.batch_size) \
             FROM backfill b \
             WHERE p.backfill_id = $1 AND p.part = $2 AND p.owner = $3 AND p.generation = $4 \
               AND p.lease_expires_at > clock_timestamp() AND b.id = $1 AND b.state = 'running' \
             RETURNING p.attempts, p.next_attempt_at",
        )
        .bind::<Text, _>(f.id)
        .bind::<Integer, _>(part)
        .bind::<Text, _>(f.worker)
        .bind::<BigInt, _>(f.generation)
        .bind::<Text, _>(f.kind)
        .bind::<Text, _>(f.message)
        .bind::<Integer, _>(f.max_attempts)
        .bind::<BigInt, _>(f.backoff_base_ms)
        .bind::<BigInt, _>(f.backoff_max_ms)
        .bind::<Nullable<Integer>, _>(f.batch_size),
    )
    .get_result(conn)
    .await
    .optional()?;
    let Some(failure) = failure else {
        return Ok(None);
    };
    if failure.next_attempt_at.is_some() {
        return Ok(Some(StateRow {
            state: row.state,
            attempts: failure.attempts,
            next_attempt_at: failure.next_attempt_at,
        }));
    }
    let state: StateRow = super::cached(
        diesel::sql_query(format!(
            "WITH changed AS (UPDATE backfill SET \
                 state = CASE WHEN $2 = 'blocked' THEN 'blocked' ELSE 'failed' END, \
                 attempts = $4, next_attempt_at = NULL, \
                 last_error_kind = $2, last_error = $3, last_error_at = now(), updated_at = now() \
             WHERE id = $1 AND state = 'running' \
             RETURNING attempts, next_attempt_at, {CHANGED_COLUMNS}), {OUTBOX_ENQUEUE} \
             SELECT state, attempts, next_attempt_at FROM changed",
        ))
        .bind::<Text, _>(f.id)
        .bind::<Text, _>(f.kind)
        .bind::<Text, _>(crate::failure::bounded(format!(
            "partition {}: {}",
            f.part, f.message
        )))
        .bind::<Integer, _>(failure.attempts),
    )
    .get_result(conn)
    .await?;
    partitions_fence(conn, f.id, false).await?;
    Ok(Some(state))
}

/// Partitions per status, over every backfill, for `/metrics` (PAR-5):
/// `ended` (checkpoint at its upper end), `claimed` (a lease unexpired by
/// PostgreSQL's clock) and `waiting` (neither). No lock.
pub async fn partition_count_by_status(
    conn: &mut AsyncPgConnection,
) -> Result<[(&'static str, i64); 3], StoreError> {
    #[derive(QueryableByName)]
    struct ByStatus {
        #[diesel(sql_type = BigInt)]
        ended: i64,
        #[diesel(sql_type = BigInt)]
        claimed: i64,
        #[diesel(sql_type = BigInt)]
        waiting: i64,
    }
    let row: ByStatus = super::cached(diesel::sql_query(
        "SELECT count(*) FILTER (WHERE checkpoint = upper) AS ended, \
             count(*) FILTER (WHERE checkpoint IS DISTINCT FROM upper \
                 AND owner IS NOT NULL AND lease_expires_at > clock_timestamp()) AS claimed, \
             count(*) FILTER (WHERE checkpoint IS DISTINCT FROM upper \
                 AND (owner IS NULL OR lease_expires_at <= clock_timestamp())) AS waiting \
         FROM backfill_partition",
    ))
    .get_result(conn)
    .await?;
    Ok([
        ("ended", row.ended),
        ("claimed", row.claimed),
        ("waiting", row.waiting),
    ])
}
