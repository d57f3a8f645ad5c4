//! The `backfill` row as every read decodes it, registration, and the
//! reads: one row, a page, several IDs, the row lock an action takes
//! first, and the count per state.

use super::StoreError;
use crate::failure::bounded;
use crate::lifecycle::State;
use chrono::{DateTime, Utc};
use diesel::deserialize::{self, FromSql, QueryableByName};
use diesel::pg::Pg;
use diesel::row::{Field, NamedRow, Row};
use diesel::sql_types::{Array, BigInt, Binary, Bool, Integer, Jsonb, Nullable, Text, Timestamptz};
use diesel::OptionalExtension;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

/// Every column of a backfill row, plus the database clock at read time so
/// callers judge lease expiry by PostgreSQL time (CLM-3), never their own.
pub(super) const COLUMNS: &str =
    "id, state, bound, bound_json, empty_source, checkpoint, checkpoint_json, \
     key_type, source_rows, generation, owner, lease_expires_at, attempts, next_attempt_at, \
     last_error_kind, last_error, last_error_at, rows_done, batches_done, validation_outcome, \
     validation_detail, validated_at, description, build_info, registered_at, updated_at, \
     started_at, completed_at, settings, batch_size, throttle, undo_of, clock_timestamp() AS db_now";

/// One backfill row as stored. Decoded by position (see the
/// `QueryableByName` impl below), in the order of [`COLUMNS`].
#[derive(Debug, Clone)]
pub struct BackfillRow {
    /// The backfill's stable ID, as registered (REG-1).
    pub id: String,
    /// The lifecycle state (LC-1), checked by the table's guard trigger on
    /// every change.
    pub state: State,
    /// The inclusive upper bound in the order-preserving key encoding,
    /// captured once by `start` and never changed; `None` while `pending`
    /// and for an empty source set (EX-1).
    pub bound: Option<Vec<u8>>,
    /// The bound rendered as JSON for display; never compared.
    pub bound_json: Option<Value>,
    /// Whether `start` found an empty source set (EX-1): there is then no
    /// bound and no work, and the row moved straight to `validating`.
    pub empty_source: bool,
    /// The greatest key whose mutation has committed, in the key encoding;
    /// `None` lies before every key. It only moves forward and never past
    /// the bound (EX-3).
    pub checkpoint: Option<Vec<u8>>,
    /// The checkpoint rendered as JSON for display; never compared.
    pub checkpoint_json: Option<Value>,
    /// The name of the key type the bound was captured with (diagnostic);
    /// `None` before `start`.
    pub key_type: Option<String>,
    /// The size of the source set, when the definition could count it at
    /// `start`; `None` means unknown, and progress is then shown as unknown
    /// (ADM-3).
    pub source_rows: Option<i64>,
    /// The fencing generation (CLM-1): advanced by every claim, takeover
    /// and fencing admin transition, and never moves backward.
    pub generation: i64,
    /// The worker ID holding the claim on the row itself; `None` when
    /// unclaimed. The batches of a partitioned run claim its partitions
    /// instead (PAR-2).
    pub owner: Option<String>,
    /// When the claim expires by PostgreSQL's clock (CLM-3); set exactly
    /// when `owner` is.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// Consecutive failed attempts while `running` (RT-2); a committed
    /// batch resets it to 0.
    pub attempts: i32,
    /// The end of the retry backoff: the row is not claimed before this
    /// time; `None` when no backoff applies.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// The class of the last recorded error: `retryable`, `blocked`,
    /// `fatal` or `validation` (RT-1).
    pub last_error_kind: Option<String>,
    /// The bounded, redacted diagnostic of the last recorded error (AUD-2);
    /// for a `pending` row, why its automatic start failed (EMB-8).
    pub last_error: Option<String>,
    /// When the last error was recorded.
    pub last_error_at: Option<DateTime<Utc>>,
    /// Keys the committed batches processed: a diagnostic counter, never
    /// authority. For a partitioned run, the sum over its partitions,
    /// rolled up while it runs and exact once it ends.
    pub rows_done: i64,
    /// Batches committed: a diagnostic counter like `rows_done`, and rolled
    /// up the same way for a partitioned run.
    pub batches_done: i64,
    /// The outcome of the latest validation, lifecycle or explicit:
    /// `success` or `failure` (VAL-4, VAL-7); `None` before the first.
    pub validation_outcome: Option<String>,
    /// The bounded diagnostic of the latest validation's failure.
    pub validation_detail: Option<String>,
    /// When the latest validation outcome was recorded.
    pub validated_at: Option<DateTime<Utc>>,
    /// Description supplied at registration: diagnostic metadata, last
    /// write wins (REG-2).
    pub description: Option<String>,
    /// Build information supplied at registration: diagnostic metadata,
    /// last write wins (REG-2).
    pub build_info: Option<String>,
    /// When the row was first registered.
    pub registered_at: DateTime<Utc>,
    /// When the row last changed.
    pub updated_at: DateTime<Utc>,
    /// When `start` captured the bound; `None` while `pending`.
    pub started_at: Option<DateTime<Utc>>,
    /// When validation completed the row (VAL-3); `None` until then.
    pub completed_at: Option<DateTime<Utc>>,
    /// Live settings as stored (THR-4); read them with
    /// [`crate::throttle::settings::Settings::from_stored`].
    pub settings: Value,
    /// The batch size in force at the last batch or statement timeout
    /// (THR-3).
    pub batch_size: Option<i32>,
    /// The throttle condition the claim's runner last reported (THR-2);
    /// current only while its `generation` is the row's and the row is
    /// claimed.
    pub throttle: Option<Value>,
    /// For the undo of a journaled backfill, the backfill it takes back
    /// (UNDO-2); `None` for every other row.
    pub undo_of: Option<String>,
    /// PostgreSQL's clock at the time of the read, so callers judge lease
    /// expiry by the database's time, never their own (CLM-3).
    pub db_now: DateTime<Utc>,
}

impl BackfillRow {
    /// Why the last automatic start of this `pending` row failed, as
    /// recorded (EMB-8): `(kind, diagnostic)`. A `pending` row has never
    /// run, so its error columns hold nothing else; `None` for every other
    /// state.
    pub fn start_failure(&self) -> Option<(&str, &str)> {
        match (self.state, &self.last_error) {
            (State::Pending, Some(diagnostic)) => Some((
                self.last_error_kind.as_deref().unwrap_or("fatal"),
                diagnostic,
            )),
            _ => None,
        }
    }
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
            undo_of: c.next::<Nullable<Text>, _>("undo_of")?,
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

/// Up to `limit` stored IDs whose length is within `lengths` (inclusive),
/// ordered by ID: the candidates of a 404's suggestions, which are only
/// ever a few characters longer or shorter than the ID asked for. No lock.
pub async fn backfill_ids_by_length(
    conn: &mut AsyncPgConnection,
    lengths: std::ops::RangeInclusive<i32>,
    limit: i64,
) -> Result<Vec<String>, StoreError> {
    let rows: Vec<IdRow> = super::cached(
        diesel::sql_query(
            "SELECT id FROM backfill WHERE length(id) BETWEEN $1 AND $2 ORDER BY id LIMIT $3",
        )
        .bind::<Integer, _>(*lengths.start())
        .bind::<Integer, _>(*lengths.end())
        .bind::<BigInt, _>(limit),
    )
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
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

/// One stable ID, as a statement answers it.
#[derive(QueryableByName)]
struct IdRow {
    #[diesel(sql_type = Text)]
    id: String,
}

/// Which of `ids` are `completed` (FLT-4): the dependencies a dependent
/// backfill no longer waits for. No lock: a completed backfill stays
/// completed, so a claim that saw it completed cannot be wrong later.
pub async fn backfill_completed_among(
    conn: &mut AsyncPgConnection,
    ids: &[String],
) -> Result<Vec<String>, StoreError> {
    let rows: Vec<IdRow> = super::cached(
        diesel::sql_query(
            "SELECT id FROM backfill WHERE id = ANY($1) AND state = 'completed' ORDER BY id",
        )
        .bind::<Array<Text>, _>(ids),
    )
    .load(conn)
    .await?;
    Ok(rows.into_iter().map(|r| r.id).collect())
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

/// One running backfill's progress as `/metrics` exports it.
#[derive(Debug, Clone, PartialEq, QueryableByName)]
pub struct RunningProgress {
    /// The backfill's ID.
    #[diesel(sql_type = Text)]
    pub id: String,
    /// Rows its committed batches changed so far (a partitioned one's
    /// summed over its partitions).
    #[diesel(sql_type = BigInt)]
    pub rows_done: i64,
    /// Whether a throttle condition of the claim in force holds it (or
    /// one of its partitions) back now.
    #[diesel(sql_type = Bool)]
    pub throttled: bool,
    /// While its latency budget paces it (THR-6): the reading, in seconds
    /// (the highest of its partitions'); `None` otherwise or unknown.
    #[diesel(sql_type = Nullable<diesel::sql_types::Double>)]
    pub latency_seconds: Option<f64>,
    /// The bound that reading was judged against, in seconds.
    #[diesel(sql_type = Nullable<diesel::sql_types::Double>)]
    pub latency_bound_seconds: Option<f64>,
}

/// The backfills that are `running`, with their rows done, whether a
/// current throttle condition holds them back (on the row, or on a
/// partition, under that claim's generation) and, while a latency budget
/// paces them, its reading and bound, for a per-backfill stall alert
/// (OBS-3) and the budget's metrics (THR-6). At most 1000, by ID. No lock.
pub async fn backfill_running_progress(
    conn: &mut AsyncPgConnection,
) -> Result<Vec<RunningProgress>, StoreError> {
    Ok(super::cached(diesel::sql_query(
        "SELECT b.id, greatest(b.rows_done, (SELECT coalesce(sum(p.rows_done), 0)::bigint \
                 FROM backfill_partition p WHERE p.backfill_id = b.id)) AS rows_done, \
             (b.owner IS NOT NULL AND b.throttle IS NOT NULL \
                  AND (b.throttle->>'generation')::bigint = b.generation) \
             OR EXISTS (SELECT 1 FROM backfill_partition p WHERE p.backfill_id = b.id \
                  AND p.owner IS NOT NULL AND p.throttle IS NOT NULL \
                  AND (p.throttle->>'generation')::bigint = p.generation) AS throttled, \
             l.value AS latency_seconds, l.bound AS latency_bound_seconds \
         FROM backfill b LEFT JOIN LATERAL ( \
             SELECT max((c.t->>'value')::float8) AS value, \
                    max((c.t->>'threshold')::float8) AS bound \
             FROM (SELECT b.throttle AS t, b.generation AS g, b.owner AS o \
                   UNION ALL SELECT p.throttle, p.generation, p.owner \
                   FROM backfill_partition p WHERE p.backfill_id = b.id) c \
             WHERE c.o IS NOT NULL AND c.t->>'signal' = 'latency' \
               AND (c.t->>'generation')::bigint = c.g) l ON true \
         WHERE b.state = 'running' ORDER BY b.id LIMIT 1000",
    ))
    .load(conn)
    .await?)
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
