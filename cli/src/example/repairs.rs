//! The four example repairs over `events`.
//!
//! | ID | key | fills |
//! |---|---|---|
//! | `events.author-norm.v1` | `id` (bigint) | `author_norm = lower(btrim(author))`; journaled, so it can be undone |
//! | `events.content-len.v1` | `(created_at, id)` | `content_len = char_length(content)` |
//! | `events.tag-count.v1` | `id` | `tag_count = jsonb_array_length(tags)`; blocks on non-array tags |
//! | `events.touch-count.v1` | `id` | `touch_count = touch_count + 1` (deliberately NOT idempotent) |
//!
//! Every repair selects all keys in `(checkpoint, bound]` in key order (not
//! only the rows that still need work), so the checkpoint means "every row up
//! to here is done" and `rows` at capture time is the true amount of work.

// Every mutation locks its rows in id order first (a CTE with ORDER BY id
// FOR UPDATE): the four repairs touch the same rows concurrently, and one
// lock order for all of them turns would-be deadlocks into short waits.
use async_trait::async_trait;
use backfill::repair::{
    Batches, Journal, Repair, RepairError, SelectThenMutate, SourceSet, Validation,
};
use chrono::{DateTime, Utc};
use diesel::sql_types::{Array, BigInt, Bool, Nullable, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// Stable ID of [`AuthorNorm`].
pub const AUTHOR_NORM_ID: &str = "events.author-norm.v1";
/// Stable ID of [`ContentLen`].
pub const CONTENT_LEN_ID: &str = "events.content-len.v1";
/// Stable ID of [`TagCount`].
pub const TAG_COUNT_ID: &str = "events.tag-count.v1";
/// Stable ID of [`TouchCount`].
pub const TOUCH_COUNT_ID: &str = "events.touch-count.v1";

/// Default keys per batch when a repair is built with [`Default`].
pub const DEFAULT_BATCH: u32 = 1000;

/// The one definition of author normalization, used by the repair, its
/// validation, the read path and the write path, so that repaired, unrepaired
/// and newly written rows can never disagree (EX-7). PostgreSQL's `lower`
/// is used everywhere (never Rust's `to_lowercase`) because the two differ
/// for some non-ASCII characters.
macro_rules! normalize_author {
    ($expr:literal) => {
        concat!("lower(btrim(", $expr, "))")
    };
}
pub(crate) use normalize_author;

/// The tag count of a row, NULL when `tags` is not a JSON array (so the
/// expression itself never raises on bad data).
macro_rules! tag_count_of {
    ($expr:literal) => {
        concat!(
            "(CASE WHEN jsonb_typeof(",
            $expr,
            ") = 'array' THEN jsonb_array_length(",
            $expr,
            ") END)"
        )
    };
}
pub(crate) use tag_count_of;

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

#[derive(QueryableByName)]
struct IdBound {
    #[diesel(sql_type = Nullable<BigInt>)]
    upper: Option<i64>,
    #[diesel(sql_type = BigInt)]
    rows: i64,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

#[derive(QueryableByName)]
struct CompoundKey {
    #[diesel(sql_type = Timestamptz)]
    created_at: DateTime<Utc>,
    #[diesel(sql_type = BigInt)]
    id: i64,
}

#[derive(QueryableByName)]
struct CheckedId {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Bool)]
    ok: bool,
}

/// Bound of a bigint-keyed repair: the greatest id and the row count, read
/// in one statement so they describe the same snapshot.
async fn capture_id_bound(conn: &mut AsyncPgConnection) -> Result<SourceSet<i64>, RepairError> {
    let row: IdBound = diesel::sql_query("SELECT max(id) AS upper, count(*) AS rows FROM events")
        .get_result(conn)
        .await?;
    Ok(match row.upper {
        None => SourceSet::Empty,
        Some(upper) => SourceSet::Bounded {
            upper,
            rows: Some(row.rows),
        },
    })
}

/// Up to `limit` ids in `(after, bound]`, ascending. `i64::MIN` stands for
/// "before every key": ids are bigserial (positive), so nothing is skipped.
async fn select_ids(
    conn: &mut AsyncPgConnection,
    after: Option<&i64>,
    bound: &i64,
    limit: u32,
) -> Result<Vec<i64>, RepairError> {
    let rows: Vec<Id> =
        diesel::sql_query("SELECT id FROM events WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3")
            .bind::<BigInt, _>(after.copied().unwrap_or(i64::MIN))
            .bind::<BigInt, _>(*bound)
            .bind::<BigInt, _>(i64::from(limit))
            .load(conn)
            .await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
}

/// Run a `count(*) AS n` query bound to one bigint upper bound.
async fn count_up_to(
    conn: &mut AsyncPgConnection,
    sql: &'static str,
    bound: Option<&i64>,
) -> Result<i64, RepairError> {
    // An empty source set has no bound: nothing is "up to the bound", so
    // i64::MIN makes every count zero.
    let row: Count = diesel::sql_query(sql)
        .bind::<BigInt, _>(bound.copied().unwrap_or(i64::MIN))
        .get_result(conn)
        .await?;
    Ok(row.n)
}

// ------------------------------------------------------------ author-norm

/// `events.author-norm.v1`: fill `author_norm = lower(btrim(author))` for
/// existing rows, keyed by the bigint primary key. Idempotent. Journaled
/// (UNDO-1): the engine records each changed row's `author_norm` before and
/// after, so an operator can dry-run it, run it and take it back with
/// `backfill ctl undo events.author-norm.v1`.
#[derive(Debug, Clone, Copy)]
pub struct AuthorNorm {
    batch: u32,
}

impl AuthorNorm {
    /// A definition that repairs at most `batch` rows per transaction.
    pub fn new(batch: u32) -> Self {
        Self { batch }
    }
}

impl Default for AuthorNorm {
    fn default() -> Self {
        Self::new(DEFAULT_BATCH)
    }
}

#[async_trait]
impl Repair for AuthorNorm {
    type Key = i64;

    fn id(&self) -> &str {
        AUTHOR_NORM_ID
    }

    fn description(&self) -> &str {
        "events: fill author_norm = lower(btrim(author)), keyed by id"
    }

    fn batch_limit(&self) -> u32 {
        self.batch
    }

    /// Sessions queued for a lock on `events` hold these batches back
    /// when the lock-waiter limit is set (THR-1).
    fn tables(&self) -> Vec<String> {
        vec!["events".into()]
    }

    fn journal(&self) -> Option<Journal> {
        Some(Journal::new("events", ["id"], ["author_norm"]))
    }

    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        capture_id_bound(conn).await
    }

    fn batches(&self) -> Batches<'_, i64> {
        Batches::TwoStatements(self)
    }

    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        let bad = count_up_to(
            conn,
            concat!(
                "SELECT count(*) AS n FROM events WHERE id <= $1 AND author_norm IS DISTINCT FROM ",
                normalize_author!("author")
            ),
            bound,
        )
        .await?;
        Ok(if bad == 0 {
            Validation::Success
        } else {
            Validation::Failure(format!(
                "{bad} events up to the bound have author_norm missing or different from \
                 lower(btrim(author))"
            ))
        })
    }
}

#[async_trait]
impl SelectThenMutate<i64> for AuthorNorm {
    async fn select_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Vec<i64>, RepairError> {
        select_ids(conn, after, bound, limit).await
    }
    async fn mutate(&self, conn: &mut AsyncPgConnection, keys: &[i64]) -> Result<(), RepairError> {
        diesel::sql_query(concat!(
            "WITH locked AS (SELECT id FROM events WHERE id = ANY($1) ORDER BY id FOR UPDATE) \
             UPDATE events SET author_norm = ",
            normalize_author!("author"),
            " FROM locked WHERE events.id = locked.id"
        ))
        .bind::<Array<BigInt>, _>(keys)
        .execute(conn)
        .await?;
        Ok(())
    }
}

// ------------------------------------------------------------ content-len

/// `events.content-len.v1`: fill `content_len = char_length(content)`,
/// keyed by the compound `(created_at, id)`: `created_at` has many ties,
/// and the compound key cannot skip or repeat them (EX-2). Idempotent.
#[derive(Debug, Clone, Copy)]
pub struct ContentLen {
    batch: u32,
}

impl ContentLen {
    /// A definition that repairs at most `batch` rows per transaction.
    pub fn new(batch: u32) -> Self {
        Self { batch }
    }
}

impl Default for ContentLen {
    fn default() -> Self {
        Self::new(DEFAULT_BATCH)
    }
}

#[async_trait]
impl Repair for ContentLen {
    type Key = (DateTime<Utc>, i64);

    fn id(&self) -> &str {
        CONTENT_LEN_ID
    }

    fn description(&self) -> &str {
        "events: fill content_len = char_length(content), keyed by (created_at, id)"
    }

    fn batch_limit(&self) -> u32 {
        self.batch
    }

    /// Sessions queued for a lock on `events` hold these batches back
    /// when the lock-waiter limit is set (THR-1).
    fn tables(&self) -> Vec<String> {
        vec!["events".into()]
    }

    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<Self::Key>, RepairError> {
        // The greatest key by the (created_at, id) index; counted in the
        // same statement (one snapshot). Rows inserted later with an older
        // created_at fall inside the bound and are repaired too, which is
        // harmless: the repair is idempotent and such rows are also written
        // with content_len filled by the normal write path.
        #[derive(QueryableByName)]
        struct Bound {
            #[diesel(sql_type = Nullable<Timestamptz>)]
            created_at: Option<DateTime<Utc>>,
            #[diesel(sql_type = Nullable<BigInt>)]
            id: Option<i64>,
            #[diesel(sql_type = BigInt)]
            rows: i64,
        }
        let row: Bound = diesel::sql_query(
            "SELECT last.created_at, last.id, (SELECT count(*) FROM events) AS rows \
             FROM (SELECT 1) AS one LEFT JOIN LATERAL \
               (SELECT created_at, id FROM events ORDER BY created_at DESC, id DESC LIMIT 1) \
               AS last ON true",
        )
        .get_result(conn)
        .await?;
        Ok(match (row.created_at, row.id) {
            (Some(created_at), Some(id)) => SourceSet::Bounded {
                upper: (created_at, id),
                rows: Some(row.rows),
            },
            _ => SourceSet::Empty,
        })
    }

    fn batches(&self) -> Batches<'_, (DateTime<Utc>, i64)> {
        Batches::TwoStatements(self)
    }

    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&Self::Key>,
    ) -> Result<Validation, RepairError> {
        let Some((at, id)) = bound else {
            // Empty source set: nothing existed to repair.
            return Ok(Validation::Success);
        };
        let bad: Count = diesel::sql_query(
            "SELECT count(*) AS n FROM events \
             WHERE (created_at, id) <= ($1, $2) \
               AND content_len IS DISTINCT FROM char_length(content)",
        )
        .bind::<Timestamptz, _>(*at)
        .bind::<BigInt, _>(*id)
        .get_result(conn)
        .await?;
        Ok(if bad.n == 0 {
            Validation::Success
        } else {
            Validation::Failure(format!(
                "{} events up to the bound have content_len missing or different from \
                 char_length(content)",
                bad.n
            ))
        })
    }
}

#[async_trait]
impl SelectThenMutate<(DateTime<Utc>, i64)> for ContentLen {
    async fn select_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&(DateTime<Utc>, i64)>,
        bound: &(DateTime<Utc>, i64),
        limit: u32,
    ) -> Result<Vec<(DateTime<Utc>, i64)>, RepairError> {
        // Row-value comparisons walk the (created_at, id) index in order.
        // Two statements rather than one with an "after is NULL" flag, so
        // each keeps a plain index range condition.
        let rows: Vec<CompoundKey> = match after {
            Some((after_at, after_id)) => {
                diesel::sql_query(
                    "SELECT created_at, id FROM events \
                     WHERE (created_at, id) > ($1, $2) AND (created_at, id) <= ($3, $4) \
                     ORDER BY created_at, id LIMIT $5",
                )
                .bind::<Timestamptz, _>(*after_at)
                .bind::<BigInt, _>(*after_id)
                .bind::<Timestamptz, _>(bound.0)
                .bind::<BigInt, _>(bound.1)
                .bind::<BigInt, _>(i64::from(limit))
                .load(conn)
                .await?
            }
            None => {
                diesel::sql_query(
                    "SELECT created_at, id FROM events \
                     WHERE (created_at, id) <= ($1, $2) \
                     ORDER BY created_at, id LIMIT $3",
                )
                .bind::<Timestamptz, _>(bound.0)
                .bind::<BigInt, _>(bound.1)
                .bind::<BigInt, _>(i64::from(limit))
                .load(conn)
                .await?
            }
        };
        Ok(rows.into_iter().map(|k| (k.created_at, k.id)).collect())
    }
    async fn mutate(
        &self,
        conn: &mut AsyncPgConnection,
        keys: &[(DateTime<Utc>, i64)],
    ) -> Result<(), RepairError> {
        // `id` alone identifies a row (primary key); the compound key only
        // orders the walk. Both are matched anyway so that a row whose
        // created_at differs from the selected key is never touched.
        let ids: Vec<i64> = keys.iter().map(|k| k.1).collect();
        let ats: Vec<DateTime<Utc>> = keys.iter().map(|k| k.0).collect();
        diesel::sql_query(
            "WITH locked AS ( \
                 SELECT e.id FROM events e \
                 JOIN unnest($1::timestamptz[], $2::bigint[]) AS k(created_at, id) \
                   ON e.id = k.id AND e.created_at = k.created_at \
                 ORDER BY e.id FOR UPDATE OF e) \
             UPDATE events e SET content_len = char_length(e.content) \
             FROM locked WHERE e.id = locked.id",
        )
        .bind::<Array<Timestamptz>, _>(ats)
        .bind::<Array<BigInt>, _>(ids)
        .execute(conn)
        .await?;
        Ok(())
    }
}

// -------------------------------------------------------------- tag-count

/// `events.tag-count.v1`: fill `tag_count = jsonb_array_length(tags)`.
///
/// Its data condition can fail: a row whose `tags` is not a JSON array has
/// no tag count. The repair then stops with [`RepairError::Blocked`] and an
/// actionable, bounded diagnostic that carries a count, never row values;
/// after the operator fixes the rows, `retry` resumes at the same checkpoint.
/// Validation reports such rows as [`Validation::Blocked`] (an unmet data
/// prerequisite) and wrong counts as [`Validation::Failure`].
#[derive(Debug, Clone, Copy)]
pub struct TagCount {
    batch: u32,
}

impl TagCount {
    /// A definition that repairs at most `batch` rows per transaction.
    pub fn new(batch: u32) -> Self {
        Self { batch }
    }
}

impl Default for TagCount {
    fn default() -> Self {
        Self::new(DEFAULT_BATCH)
    }
}

/// The operator's remedy for rows whose `tags` is not an array (no SQL text
/// and no row values, AUD-2).
const TAGS_REMEDY: &str = "have tags that are not a JSON array; set their tags to a JSON array \
     (for example [] or [\"tag\"]), then retry";

#[async_trait]
impl Repair for TagCount {
    type Key = i64;

    fn id(&self) -> &str {
        TAG_COUNT_ID
    }

    fn description(&self) -> &str {
        "events: fill tag_count = jsonb_array_length(tags); blocks on tags that are not arrays"
    }

    fn batch_limit(&self) -> u32 {
        self.batch
    }

    /// Sessions queued for a lock on `events` hold these batches back
    /// when the lock-waiter limit is set (THR-1).
    fn tables(&self) -> Vec<String> {
        vec!["events".into()]
    }

    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        capture_id_bound(conn).await
    }

    fn batches(&self) -> Batches<'_, i64> {
        Batches::TwoStatements(self)
    }

    /// The events whose tags are not an array: what the operator fixes
    /// before `retry` (RT-4). Their IDs only, never their tags.
    async fn blocking_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Vec<i64>, RepairError> {
        #[derive(QueryableByName)]
        struct Id {
            #[diesel(sql_type = BigInt)]
            id: i64,
        }
        let rows: Vec<Id> = diesel::sql_query(
            "SELECT id FROM events WHERE id > $1 AND id <= $2 \
             AND jsonb_typeof(tags) <> 'array' ORDER BY id LIMIT $3",
        )
        .bind::<BigInt, _>(after.copied().unwrap_or(i64::MIN))
        .bind::<BigInt, _>(*bound)
        .bind::<BigInt, _>(i64::from(limit))
        .load(conn)
        .await?;
        Ok(rows.into_iter().map(|r| r.id).collect())
    }

    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        let not_arrays = count_up_to(
            conn,
            "SELECT count(*) AS n FROM events WHERE id <= $1 AND jsonb_typeof(tags) <> 'array'",
            bound,
        )
        .await?;
        if not_arrays > 0 {
            return Ok(Validation::Blocked(format!(
                "{not_arrays} events up to the bound {TAGS_REMEDY}"
            )));
        }
        let wrong = count_up_to(
            conn,
            concat!(
                "SELECT count(*) AS n FROM events WHERE id <= $1 AND tag_count IS DISTINCT FROM ",
                tag_count_of!("tags")
            ),
            bound,
        )
        .await?;
        Ok(if wrong == 0 {
            Validation::Success
        } else {
            Validation::Failure(format!(
                "{wrong} events up to the bound have tag_count missing or different from the \
                 number of tags"
            ))
        })
    }
}

#[async_trait]
impl SelectThenMutate<i64> for TagCount {
    async fn select_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Vec<i64>, RepairError> {
        let after_id = after.copied().unwrap_or(i64::MIN);
        let rows: Vec<CheckedId> = diesel::sql_query(
            "SELECT id, jsonb_typeof(tags) = 'array' AS ok FROM events \
             WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3",
        )
        .bind::<BigInt, _>(after_id)
        .bind::<BigInt, _>(*bound)
        .bind::<BigInt, _>(i64::from(limit))
        .load(conn)
        .await?;
        if rows.iter().all(|r| r.ok) {
            return Ok(rows.into_iter().map(|r| r.id).collect());
        }
        // Only on the failure path: count every bad row still ahead, so the
        // operator fixes them all at once instead of one batch at a time.
        // The checkpoint has not moved past any of them.
        let bad: Count = diesel::sql_query(
            "SELECT count(*) AS n FROM events \
             WHERE id > $1 AND id <= $2 AND jsonb_typeof(tags) <> 'array'",
        )
        .bind::<BigInt, _>(after_id)
        .bind::<BigInt, _>(*bound)
        .get_result(conn)
        .await?;
        Err(RepairError::Blocked(format!(
            "{} events after the checkpoint and up to the bound {TAGS_REMEDY}",
            bad.n
        )))
    }
    async fn mutate(&self, conn: &mut AsyncPgConnection, keys: &[i64]) -> Result<(), RepairError> {
        // The selection checked that every key has array tags, in this same
        // transaction; the CASE keeps the statement from raising regardless.
        diesel::sql_query(concat!(
            "WITH locked AS (SELECT id FROM events WHERE id = ANY($1) ORDER BY id FOR UPDATE) \
             UPDATE events SET tag_count = ",
            tag_count_of!("tags"),
            " FROM locked WHERE events.id = locked.id"
        ))
        .bind::<Array<BigInt>, _>(keys)
        .execute(conn)
        .await?;
        Ok(())
    }
}

// ------------------------------------------------------------ touch-count

/// `events.touch-count.v1`: `touch_count = touch_count + 1` on every event
/// up to the bound.
///
/// Deliberately NOT idempotent: it is the instrument that detects a batch
/// applied twice (or a row skipped). If the engine ever committed one batch's
/// mutation twice, or committed a mutation without its checkpoint, some row
/// would end with `touch_count` 2 (or 0), and validation, which requires
/// exactly 1 for every row up to the bound, fails.
#[derive(Debug, Clone, Copy)]
pub struct TouchCount {
    batch: u32,
}

impl TouchCount {
    /// A definition that touches at most `batch` rows per transaction.
    pub fn new(batch: u32) -> Self {
        Self { batch }
    }
}

impl Default for TouchCount {
    fn default() -> Self {
        Self::new(DEFAULT_BATCH)
    }
}

#[async_trait]
impl Repair for TouchCount {
    type Key = i64;

    fn id(&self) -> &str {
        TOUCH_COUNT_ID
    }

    fn description(&self) -> &str {
        "events: touch_count + 1 on every row (non-idempotent double-apply detector)"
    }

    fn batch_limit(&self) -> u32 {
        self.batch
    }

    /// Sessions queued for a lock on `events` hold these batches back
    /// when the lock-waiter limit is set (THR-1).
    fn tables(&self) -> Vec<String> {
        vec!["events".into()]
    }

    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        capture_id_bound(conn).await
    }

    fn batches(&self) -> Batches<'_, i64> {
        Batches::TwoStatements(self)
    }

    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        // One scan for both counts: the validation reads every row up to
        // the bound, so it must not read them twice.
        #[derive(QueryableByName)]
        struct Touches {
            #[diesel(sql_type = BigInt)]
            twice: i64,
            #[diesel(sql_type = BigInt)]
            never: i64,
        }
        let Touches { twice, never } = diesel::sql_query(
            "SELECT count(*) FILTER (WHERE touch_count > 1) AS twice, \
                    count(*) FILTER (WHERE touch_count < 1) AS never \
             FROM events WHERE id <= $1",
        )
        .bind::<BigInt, _>(bound.copied().unwrap_or(i64::MIN))
        .get_result(conn)
        .await?;
        Ok(if twice == 0 && never == 0 {
            Validation::Success
        } else {
            Validation::Failure(format!(
                "touch_count must be exactly 1 up to the bound: {twice} events were touched \
                 more than once, {never} were not touched"
            ))
        })
    }
}

#[async_trait]
impl SelectThenMutate<i64> for TouchCount {
    async fn select_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Vec<i64>, RepairError> {
        select_ids(conn, after, bound, limit).await
    }
    async fn mutate(&self, conn: &mut AsyncPgConnection, keys: &[i64]) -> Result<(), RepairError> {
        diesel::sql_query(
            "WITH locked AS (SELECT id FROM events WHERE id = ANY($1) ORDER BY id FOR UPDATE) \
             UPDATE events SET touch_count = touch_count + 1 FROM locked WHERE events.id = locked.id",
        )
            .bind::<Array<BigInt>, _>(keys)
            .execute(conn)
            .await?;
        Ok(())
    }
}
