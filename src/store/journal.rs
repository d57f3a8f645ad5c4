//! The before-image journal of journaled repairs (UNDO-1..UNDO-4): the
//! statements that write it (inside a batch's own transaction), the undo's
//! restoring batch over it, and the reads and the prune an operator uses.
//!
//! A journaled batch writes one entry: its rows' keys and journaled
//! columns before and after, column-major (`{"id": [1, 2], ...}`, element
//! i of every array belonging to row i), so that a batch costs one heap
//! tuple, one index entry and one compressed value per image rather than
//! one of each per row. Reads that show rows ([`journal_entries`],
//! [`journal_conflicts`]) and the undo take an entry apart again with
//! [`entry_row`].
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
/// the one form a row's image takes, so two images compare equal exactly
/// when the values do.
pub fn journal_image(alias: &str, columns: &[String]) -> String {
    let pairs: Vec<String> = columns
        .iter()
        .map(|c| format!("'{c}', {alias}.{c}"))
        .collect();
    format!("jsonb_build_object({})", pairs.join(", "))
}

/// Row `pos` (from 0) of the column-major entry image `image`, as the
/// row's own image (`{"a": 1}` of `{"a": [1, 2]}` at 0): the same JSON
/// values [`journal_image`] makes of that row, so the two compare equal
/// exactly when the row holds what the entry recorded.
pub fn entry_row(image: &str, pos: &str) -> String {
    format!("(SELECT jsonb_object_agg(key, value -> {pos}) FROM jsonb_each({image}))")
}

/// The data-modifying CTE body a journaled one-statement batch ends with:
/// it inserts one entry of the rows of the relation `source`, which has a
/// column `__bf_k<i>` per key column (integers) and `__bf_b<i>`,
/// `__bf_a<i>` per journaled column (before and after). It runs in the
/// batch's statement, so it commits with the batch's fenced checkpoint
/// advance or not at all (UNDO-1); a batch that wrote no row writes no
/// entry. `id` is a checked stable ID.
///
/// A column's array is built by `to_jsonb(array_agg(..))`, which makes
/// the same JSON array as `jsonb_agg` at about half its cost, except for
/// the columns in `array_columns`: `array_agg` of arrays refuses a NULL
/// or arrays of different dimensions, so those take `jsonb_agg`, which
/// takes any value. The integer keys take `array_agg`. The aggregates of
/// one query read the rows in one order, so the arrays line up.
pub fn journal_entry_from(
    id: &str,
    source: &str,
    key_columns: &[String],
    columns: &[String],
    array_columns: &[String],
) -> String {
    let image = |names: &[String], prefix: &str| {
        let pairs: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, c)| {
                if array_columns.contains(c) {
                    format!("'{c}', jsonb_agg({prefix}{i})")
                } else {
                    format!("'{c}', to_jsonb(array_agg({prefix}{i}))")
                }
            })
            .collect();
        format!("jsonb_build_object({})", pairs.join(", "))
    };
    format!(
        "INSERT INTO backfill_journal (backfill_id, row_count, row_key, before, after) \
         SELECT '{id}', count(*), {keys}, {before}, {after} FROM {source} HAVING count(*) > 0",
        keys = image(key_columns, "__bf_k"),
        before = image(columns, "__bf_b"),
        after = image(columns, "__bf_a"),
    )
}

#[derive(QueryableByName)]
struct ColumnName {
    #[diesel(sql_type = Text)]
    name: String,
}

/// Which of `columns` of `table` hold arrays (their type, or a domain's
/// base type, is of the array category), so that
/// [`journal_entry_from`] aggregates them with `jsonb_agg`. A column this
/// does not find (a name the table lacks) is answered as an array, the
/// form that takes any value; the batch statement then fails on the name
/// itself. Reads the catalog only; no lock beyond the relation's
/// `AccessShareLock` that resolving `table` takes. A table that does not
/// exist fails like the batch would (`undefined_table`).
pub async fn journal_array_columns(
    conn: &AsyncPgConnection,
    table: &str,
    columns: &[String],
) -> Result<Vec<String>, StoreError> {
    // A shared connection, as a batch's pipelined statement has it.
    let mut conn = conn;
    let scalar: Vec<ColumnName> = cached(
        diesel::sql_query(
            "SELECT a.attname::text AS name FROM pg_attribute AS a \
             JOIN pg_type AS t ON t.oid = a.atttypid \
             WHERE a.attrelid = $1::regclass AND a.attname = ANY($2) \
             AND NOT a.attisdropped AND t.typcategory <> 'A'",
        )
        .bind::<Text, _>(table)
        .bind::<Array<Text>, _>(columns),
    )
    .load(&mut conn)
    .await?;
    Ok(columns
        .iter()
        .filter(|c| !scalar.iter().any(|s| &s.name == *c))
        .cloned()
        .collect())
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

/// Write the journal entry of a batch of backfill `id`, on the batch's
/// transaction: the rows of `(row key, before, after)` (each a row's own
/// image, as [`journal_images`] reads them) whose images differ, turned
/// column-major in their order. No entry when none differs. No lock
/// beyond the insert's; the batch's fence decides whether it commits
/// (UNDO-1). Returns the rows journaled.
pub async fn journal_insert(
    conn: &mut AsyncPgConnection,
    id: &str,
    row_keys: &[Value],
    before: &[Value],
    after: &[Value],
) -> Result<u64, StoreError> {
    let entry: Vec<Journaled> = cached(
        diesel::sql_query(
            "WITH x AS (SELECT k, b, a, ord \
                 FROM unnest($2::jsonb[], $3::jsonb[], $4::jsonb[]) WITH ORDINALITY AS x(k, b, a, ord) \
                 WHERE b IS DISTINCT FROM a), \
             c AS (SELECT 'k' AS image, e.key, jsonb_agg(e.value ORDER BY x.ord) AS v \
                     FROM x, jsonb_each(x.k) AS e GROUP BY e.key \
                 UNION ALL SELECT 'b', e.key, jsonb_agg(e.value ORDER BY x.ord) \
                     FROM x, jsonb_each(x.b) AS e GROUP BY e.key \
                 UNION ALL SELECT 'a', e.key, jsonb_agg(e.value ORDER BY x.ord) \
                     FROM x, jsonb_each(x.a) AS e GROUP BY e.key) \
             INSERT INTO backfill_journal (backfill_id, row_count, row_key, before, after) \
             SELECT $1, (SELECT count(*) FROM x), \
                 jsonb_object_agg(key, v) FILTER (WHERE image = 'k'), \
                 coalesce(jsonb_object_agg(key, v) FILTER (WHERE image = 'b'), '{}'), \
                 coalesce(jsonb_object_agg(key, v) FILTER (WHERE image = 'a'), '{}') \
             FROM c HAVING (SELECT count(*) FROM x) > 0 \
             RETURNING row_count",
        )
        .bind::<Text, _>(id)
        .bind::<Array<Jsonb>, _>(row_keys)
        .bind::<Array<Jsonb>, _>(before)
        .bind::<Array<Jsonb>, _>(after),
    )
    .load(conn)
    .await?;
    Ok(entry.into_iter().next().map_or(0, |e| e.row_count as u64))
}

#[derive(QueryableByName)]
struct Journaled {
    #[diesel(sql_type = diesel::sql_types::Integer)]
    row_count: i32,
}

/// The undo's batch over the journal of `original` (UNDO-2), as one
/// statement in the one-statement form with `limit` written in (or `$3`).
/// Its keys are the journal's entries (`seq`): it takes the next entries
/// by `seq` in `($1, $2]` while the rows before each number fewer than
/// `limit` (so at least one, and about `limit` rows), takes them apart
/// into rows, restores the before-image of each row that still holds
/// exactly what the repair wrote (the comparison is in the UPDATE's WHERE,
/// so a concurrent writer's change is seen: PostgreSQL re-checks it on the
/// row's newest version), records on each entry how many rows it restored
/// and the positions of the others as conflicts, and answers the entries'
/// `seq` range and count as a `BigIntSummary`.
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
        "WITH __bf_e AS (SELECT seq, sum(row_count) OVER (ORDER BY seq) - row_count AS ahead \
             FROM (SELECT seq, row_count FROM backfill_journal \
                 WHERE backfill_id = '{original}' AND seq > $1 AND seq <= $2 \
                 ORDER BY seq LIMIT {limit}) AS __bf_s), \
         __bf_j AS (SELECT j.seq, j.row_count, j.row_key, j.before, j.after \
             FROM __bf_e JOIN backfill_journal AS j \
                 ON j.backfill_id = '{original}' AND j.seq = __bf_e.seq \
             WHERE __bf_e.ahead < {limit}), \
         __bf_x AS (SELECT __bf_j.seq, __bf_p AS pos, {row_key} AS row_key, \
                 {before} AS before, {after} AS after \
             FROM __bf_j, generate_series(0, __bf_j.row_count - 1) AS __bf_p), \
         __bf_r AS (UPDATE {table} AS __bf_t SET {set} \
             FROM __bf_x, jsonb_populate_record(NULL::{table}, __bf_x.row_key) AS __bf_k, \
                 jsonb_populate_record(NULL::{table}, __bf_x.before) AS __bf_b \
             WHERE {on} AND {current} = __bf_x.after \
             RETURNING __bf_x.seq, __bf_x.pos), \
         __bf_o AS (SELECT __bf_x.seq, count(__bf_r.pos)::integer AS restored, \
                 coalesce(array_agg(__bf_x.pos ORDER BY __bf_x.pos) \
                     FILTER (WHERE __bf_r.pos IS NULL), '{{}}') AS conflicts \
             FROM __bf_x LEFT JOIN __bf_r ON __bf_r.seq = __bf_x.seq AND __bf_r.pos = __bf_x.pos \
             GROUP BY __bf_x.seq), \
         __bf_m AS (UPDATE backfill_journal AS __bf_u \
             SET restored = __bf_o.restored, conflicts = __bf_o.conflicts \
             FROM __bf_o WHERE __bf_u.backfill_id = '{original}' AND __bf_u.seq = __bf_o.seq) \
         SELECT min(seq) AS first, max(seq) AS last, count(*)::bigint AS n FROM __bf_j",
        row_key = entry_row("__bf_j.row_key", "__bf_p"),
        before = entry_row("__bf_j.before", "__bf_p"),
        after = entry_row("__bf_j.after", "__bf_p"),
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
/// `seq` and the number of entries (the undo's keys). No lock; read in the undo's `start`
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

/// Journaled rows of `id` in entries up to `seq` `bound` that the undo has
/// not taken (neither restored nor recorded as conflicts): the undo's
/// validation (UNDO-3) succeeds at zero. No lock.
pub async fn journal_unresolved(
    conn: &mut AsyncPgConnection,
    id: &str,
    bound: i64,
) -> Result<i64, StoreError> {
    let row: Count = cached(
        diesel::sql_query(
            "SELECT coalesce(sum(row_count), 0)::bigint AS n FROM backfill_journal \
             WHERE backfill_id = $1 AND seq <= $2 AND restored IS NULL",
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
    /// Journaled rows.
    #[diesel(sql_type = BigInt)]
    pub rows: i64,
    /// Their size as stored (`pg_column_size` of each entry).
    #[diesel(sql_type = BigInt)]
    pub bytes: i64,
    /// Rows the undo restored.
    #[diesel(sql_type = BigInt)]
    pub restored: i64,
    /// Rows the undo left alone because they changed since (conflicts).
    #[diesel(sql_type = BigInt)]
    pub conflicts: i64,
}

/// Count the journaled rows of `id`, their bytes and what the undo did
/// with them. No lock; it reads every journal entry of the backfill (an
/// index range), so it serves the detail view, never a list.
pub async fn journal_stats(
    conn: &mut AsyncPgConnection,
    id: &str,
) -> Result<JournalStats, StoreError> {
    Ok(cached(
        diesel::sql_query(
            "SELECT coalesce(sum(row_count), 0)::bigint AS rows, \
                 coalesce(sum(pg_column_size(j.*)), 0)::bigint AS bytes, \
                 coalesce(sum(restored), 0)::bigint AS restored, \
                 coalesce(sum(cardinality(conflicts)), 0)::bigint AS conflicts \
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
        diesel::sql_query(format!(
            "SELECT {row_key} AS row_key \
         FROM backfill_journal AS j, unnest(j.conflicts) AS c(pos) \
         WHERE j.backfill_id = $1 AND cardinality(j.conflicts) > 0 \
         ORDER BY j.seq, c.pos LIMIT $2",
            row_key = entry_row("j.row_key", "c.pos"),
        ))
        .bind::<Text, _>(id)
        .bind::<BigInt, _>(limit),
    )
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.row_key).collect())
}

/// One row of a journal entry written inside the current transaction, as
/// a dry run's sample shows it (DRY-3): the row's key and its before and after images.
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

/// Up to `limit` journaled rows of `id` whose values changed, in entries
/// with `seq` above `after_seq`, in journal order (an entry also holds the
/// rows a batch wrote with equal values). No lock.
pub async fn journal_entries(
    conn: &mut AsyncPgConnection,
    id: &str,
    after_seq: i64,
    limit: i64,
) -> Result<Vec<JournalEntry>, StoreError> {
    Ok(cached(
        diesel::sql_query(format!(
            "SELECT row_key, before, after FROM (\
                 SELECT j.seq, p.pos, {row_key} AS row_key, {before} AS before, \
                     {after} AS after \
                 FROM backfill_journal AS j, generate_series(0, j.row_count - 1) AS p(pos) \
                 WHERE j.backfill_id = $1 AND j.seq > $2) AS r \
             WHERE before IS DISTINCT FROM after ORDER BY seq, pos LIMIT $3",
            row_key = entry_row("j.row_key", "p.pos"),
            before = entry_row("j.before", "p.pos"),
            after = entry_row("j.after", "p.pos"),
        ))
        .bind::<Text, _>(id)
        .bind::<BigInt, _>(after_seq)
        .bind::<BigInt, _>(limit),
    )
    .load(conn)
    .await?)
}

/// Delete the journal of `id` (UNDO-4): the caller has taken the row lock
/// of the backfill and of its undo and checked that no undo of it is
/// unfinished, in the same transaction. Returns the rows their entries
/// held.
pub async fn journal_prune(conn: &mut AsyncPgConnection, id: &str) -> Result<u64, StoreError> {
    let row: Count = cached(
        diesel::sql_query(
            "WITH d AS (DELETE FROM backfill_journal WHERE backfill_id = $1 RETURNING row_count) \
             SELECT coalesce(sum(row_count), 0)::bigint AS n FROM d",
        )
        .bind::<Text, _>(id),
    )
    .get_result(conn)
    .await?;
    Ok(row.n as u64)
}

#[derive(QueryableByName)]
struct Totals {
    #[diesel(sql_type = BigInt)]
    rows: i64,
    #[diesel(sql_type = BigInt)]
    bytes: i64,
}

/// The whole journal's planner estimate of its entries (one per journaled
/// batch) and its size on disk (TOAST and indexes included), for `/metrics`: no scan, so a scrape stays cheap
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
