//! The before-image journal of journaled repairs (UNDO-1..UNDO-4): the
//! statements that write it (inside a batch's own transaction), the undo's
//! restoring batch over it, and the reads and the prune an operator uses.
//!
//! Identifiers spliced into these texts (the journaled table, its key and
//! journaled columns) were checked to be plain identifiers at registration
//! and are fixed per process, so every text is cached as a prepared
//! statement; the backfill IDs spliced in match `[a-z0-9._-]`.

use super::{cached, StoreError};
use diesel::sql_types::{Array, BigInt, Jsonb, Nullable, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

/// `jsonb_build_object('a', <alias>.a, 'b', <alias>.b)` over `columns`:
/// the one form every image takes, so two images compare equal exactly
/// when the values do.
pub fn journal_image(alias: &str, columns: &[String]) -> String {
    let pairs: Vec<String> = columns
        .iter()
        .map(|c| format!("'{c}', {alias}.{c}"))
        .collect();
    format!("jsonb_build_object({})", pairs.join(", "))
}

/// The data-modifying CTE body a journaled one-statement batch ends with:
/// it inserts, from the relation `source` with columns `__bf_row_key`,
/// `__bf_before` and `__bf_after`, the rows whose image changed. It runs in
/// the batch's statement, so it commits with the batch's fenced checkpoint
/// advance or not at all (UNDO-1). `id` is a checked stable ID.
pub fn journal_insert_from(id: &str, source: &str) -> String {
    format!(
        "INSERT INTO backfill_journal (backfill_id, row_key, before, after) \
         SELECT '{id}', __bf_row_key, __bf_before, __bf_after FROM {source} \
         WHERE __bf_before IS DISTINCT FROM __bf_after"
    )
}

/// The text of [`journal_images`] for a table: the key and the journaled
/// columns of the rows whose keys `$1` (a JSON array of objects, one
/// `{key column: value}` per key) names; with `lock`, `FOR UPDATE` of those
/// rows, so the image read before the mutation is the one it changes.
pub fn journal_images_sql(
    table: &str,
    key_columns: &[String],
    columns: &[String],
    lock: bool,
) -> String {
    let on: Vec<String> = key_columns
        .iter()
        .map(|k| format!("__bf_t.{k} = __bf_k.{k}"))
        .collect();
    format!(
        "SELECT {row_key} AS row_key, {image} AS image \
         FROM {table} AS __bf_t \
         JOIN jsonb_populate_recordset(NULL::{table}, $1) AS __bf_k ON {on}{lock}",
        row_key = journal_image("__bf_t", key_columns),
        image = journal_image("__bf_t", columns),
        on = on.join(" AND "),
        lock = if lock { " FOR UPDATE OF __bf_t" } else { "" },
    )
}

#[derive(QueryableByName)]
struct Image {
    #[diesel(sql_type = Jsonb)]
    row_key: Value,
    #[diesel(sql_type = Jsonb)]
    image: Value,
}

/// Read (and with a locking text, lock `FOR UPDATE`) the journaled columns
/// of the rows `keys` names, on the batch's transaction; `sql` comes from
/// [`journal_images_sql`]. Returns `(row key, image)` per row found.
pub async fn journal_images(
    conn: &mut AsyncPgConnection,
    sql: &str,
    keys: &Value,
) -> Result<Vec<(Value, Value)>, StoreError> {
    let rows: Vec<Image> = cached(diesel::sql_query(sql).bind::<Jsonb, _>(keys))
        .load(conn)
        .await?;
    Ok(rows.into_iter().map(|r| (r.row_key, r.image)).collect())
}

/// Write journal rows for backfill `id`, on the batch's transaction: one
/// per `(row key, before, after)` whose images differ. No lock beyond the
/// insert's; the batch's fence decides whether they commit (UNDO-1).
pub async fn journal_insert(
    conn: &mut AsyncPgConnection,
    id: &str,
    row_keys: &[Value],
    before: &[Value],
    after: &[Value],
) -> Result<u64, StoreError> {
    let n = cached(
        diesel::sql_query(
            "INSERT INTO backfill_journal (backfill_id, row_key, before, after) \
             SELECT $1, k, b, a FROM unnest($2::jsonb[], $3::jsonb[], $4::jsonb[]) AS x(k, b, a) \
             WHERE b IS DISTINCT FROM a",
        )
        .bind::<Text, _>(id)
        .bind::<Array<Jsonb>, _>(row_keys)
        .bind::<Array<Jsonb>, _>(before)
        .bind::<Array<Jsonb>, _>(after),
    )
    .execute(conn)
    .await?;
    Ok(n as u64)
}

/// The undo's batch over the journal of `original` (UNDO-2), as one
/// statement in the one-statement form with `limit` written in (or `$3`):
/// it takes the next journal rows by `seq` in `($1, $2]`, restores the
/// before-image of each row that still holds exactly what the repair
/// wrote (the comparison is in the UPDATE's WHERE, so a concurrent writer's
/// change is seen: PostgreSQL re-checks it on the row's newest version),
/// marks each journal row `restored` or `conflict`, and answers the
/// selected `seq` range as a `BigIntSummary`.
pub fn journal_restore_sql(
    original: &str,
    table: &str,
    key_columns: &[String],
    columns: &[String],
    limit: &str,
) -> String {
    let set: Vec<String> = columns
        .iter()
        .map(|c| format!("{c} = __bf_b.{c}"))
        .collect();
    let on: Vec<String> = key_columns
        .iter()
        .map(|k| format!("__bf_t.{k} = __bf_k.{k}"))
        .collect();
    format!(
        "WITH __bf_j AS (SELECT seq, row_key, before, after FROM backfill_journal \
             WHERE backfill_id = '{original}' AND seq > $1 AND seq <= $2 \
             ORDER BY seq LIMIT {limit}), \
         __bf_r AS (UPDATE {table} AS __bf_t SET {set} \
             FROM __bf_j, jsonb_populate_record(NULL::{table}, __bf_j.row_key) AS __bf_k, \
                 jsonb_populate_record(NULL::{table}, __bf_j.before) AS __bf_b \
             WHERE {on} AND {current} = __bf_j.after \
             RETURNING __bf_j.seq), \
         __bf_m AS (UPDATE backfill_journal AS __bf_u \
             SET undo = CASE WHEN __bf_u.seq IN (SELECT seq FROM __bf_r) \
                 THEN 'restored' ELSE 'conflict' END \
             FROM __bf_j WHERE __bf_u.backfill_id = '{original}' AND __bf_u.seq = __bf_j.seq) \
         SELECT min(seq) AS first, max(seq) AS last, count(*)::bigint AS n FROM __bf_j",
        set = set.join(", "),
        on = on.join(" AND "),
        current = journal_image("__bf_t", columns),
    )
}

#[derive(QueryableByName)]
struct Extent {
    #[diesel(sql_type = Nullable<BigInt>)]
    min: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    max: Option<i64>,
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// The journal of `id` as the undo's source set: the smallest and greatest
/// `seq` and the row count. No lock; read in the undo's `start`
/// transaction, which captures the greatest `seq` as its bound.
pub async fn journal_extent(
    conn: &mut AsyncPgConnection,
    id: &str,
) -> Result<(Option<i64>, Option<i64>, i64), StoreError> {
    let row: Extent = cached(
        diesel::sql_query(
            "SELECT min(seq) AS min, max(seq) AS max, count(*)::bigint AS n \
             FROM backfill_journal WHERE backfill_id = $1",
        )
        .bind::<Text, _>(id),
    )
    .get_result(conn)
    .await?;
    Ok((row.min, row.max, row.n))
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// Journal rows of `id` up to `seq` `bound` that the undo neither restored
/// nor recorded as a conflict: the undo's validation (UNDO-3) succeeds at
/// zero. No lock.
pub async fn journal_unresolved(
    conn: &mut AsyncPgConnection,
    id: &str,
    bound: i64,
) -> Result<i64, StoreError> {
    let row: Count = cached(
        diesel::sql_query(
            "SELECT count(*)::bigint AS n FROM backfill_journal \
             WHERE backfill_id = $1 AND seq <= $2 AND undo IS NULL",
        )
        .bind::<Text, _>(id)
        .bind::<BigInt, _>(bound),
    )
    .get_result(conn)
    .await?;
    Ok(row.n)
}

/// What an operator sees of one backfill's journal (UNDO-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, QueryableByName)]
pub struct JournalStats {
    /// Journal rows.
    #[diesel(sql_type = BigInt)]
    pub rows: i64,
    /// Their size as stored (`pg_column_size` of each row).
    #[diesel(sql_type = BigInt)]
    pub bytes: i64,
    /// Rows the undo restored.
    #[diesel(sql_type = BigInt)]
    pub restored: i64,
    /// Rows the undo left alone because they changed since (conflicts).
    #[diesel(sql_type = BigInt)]
    pub conflicts: i64,
}

/// Count the journal rows of `id`, their bytes and what the undo did with
/// them. No lock; it reads every journal row of the backfill (an index
/// range), so it serves the detail view, never a list.
pub async fn journal_stats(
    conn: &mut AsyncPgConnection,
    id: &str,
) -> Result<JournalStats, StoreError> {
    Ok(cached(
        diesel::sql_query(
            "SELECT count(*)::bigint AS rows, \
                 coalesce(sum(pg_column_size(j.*)), 0)::bigint AS bytes, \
                 count(*) FILTER (WHERE undo = 'restored')::bigint AS restored, \
                 count(*) FILTER (WHERE undo = 'conflict')::bigint AS conflicts \
             FROM backfill_journal AS j WHERE backfill_id = $1",
        )
        .bind::<Text, _>(id),
    )
    .get_result(conn)
    .await?)
}

#[derive(QueryableByName)]
struct RowKey {
    #[diesel(sql_type = Jsonb)]
    row_key: Value,
}

/// The keys of up to `limit` rows the undo of `id` recorded as conflicts,
/// in journal order (UNDO-2). No lock.
pub async fn journal_conflicts(
    conn: &mut AsyncPgConnection,
    id: &str,
    limit: i64,
) -> Result<Vec<Value>, StoreError> {
    let rows: Vec<RowKey> = cached(
        diesel::sql_query(
            "SELECT row_key FROM backfill_journal \
             WHERE backfill_id = $1 AND undo = 'conflict' ORDER BY seq LIMIT $2",
        )
        .bind::<Text, _>(id)
        .bind::<BigInt, _>(limit),
    )
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.row_key).collect())
}

/// One journal row written inside the current transaction, as a dry run's
/// sample shows it (DRY-3): the row's key and its before and after images.
#[derive(Debug, Clone, PartialEq, QueryableByName)]
pub struct JournalEntry {
    /// The row's key columns.
    #[diesel(sql_type = Jsonb)]
    pub row_key: Value,
    /// The journaled columns before the batch.
    #[diesel(sql_type = Jsonb)]
    pub before: Value,
    /// The journaled columns as the batch wrote them.
    #[diesel(sql_type = Jsonb)]
    pub after: Value,
}

/// Up to `limit` journal rows of `id` with `seq` above `after_seq`, in
/// `seq` order. No lock.
pub async fn journal_entries(
    conn: &mut AsyncPgConnection,
    id: &str,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<JournalEntry>, StoreError> {
    Ok(cached(
        diesel::sql_query(
            "SELECT row_key, before, after FROM backfill_journal \
             WHERE backfill_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind::<Text, _>(id)
        .bind::<BigInt, _>(after_seq)
        .bind::<BigInt, _>(limit),
    )
    .load(conn)
    .await?)
}

/// Delete the journal of `id` (UNDO-4): the caller has taken the row lock
/// of the backfill and of its undo and checked that no undo of it is
/// unfinished, in the same transaction. Returns the rows deleted.
pub async fn journal_prune(conn: &mut AsyncPgConnection, id: &str) -> Result<u64, StoreError> {
    let n = cached(
        diesel::sql_query("DELETE FROM backfill_journal WHERE backfill_id = $1")
            .bind::<Text, _>(id),
    )
    .execute(conn)
    .await?;
    Ok(n as u64)
}

#[derive(QueryableByName)]
struct Totals {
    #[diesel(sql_type = BigInt)]
    rows: i64,
    #[diesel(sql_type = BigInt)]
    bytes: i64,
}

/// The whole journal's planner row estimate and its size on disk
/// (indexes included), for `/metrics`: no scan, so a scrape stays cheap
/// however long the journal is. The estimate is -1 (unknown) until the
/// table was first analyzed. No lock.
pub async fn journal_totals(conn: &mut AsyncPgConnection) -> Result<(i64, i64), StoreError> {
    let row: Totals = cached(diesel::sql_query(
        "SELECT reltuples::bigint AS rows, pg_total_relation_size(oid)::bigint AS bytes \
         FROM pg_class WHERE oid = 'backfill_journal'::regclass",
    ))
    .get_result(conn)
    .await?;
    Ok((row.rows, row.bytes))
}

/// Insert the row of `undo`, the undo of `original` (UNDO-2), unless it
/// exists; the caller holds `original`'s row lock, so two concurrent undo
/// requests make one row. Returns whether this call inserted it.
pub async fn undo_insert(
    conn: &mut AsyncPgConnection,
    undo: &str,
    original: &str,
    description: &str,
    build_info: &str,
) -> Result<bool, StoreError> {
    let n = cached(
        diesel::sql_query(
            "INSERT INTO backfill (id, undo_of, description, build_info) \
             VALUES ($1, $2, NULLIF($3, ''), NULLIF($4, '')) ON CONFLICT (id) DO NOTHING",
        )
        .bind::<Text, _>(undo)
        .bind::<Text, _>(original)
        .bind::<Text, _>(description)
        .bind::<Text, _>(build_info),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}
