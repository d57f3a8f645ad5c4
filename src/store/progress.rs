//! The progress history of each run (OBS-5): samples of the live claims'
//! counters, written by the claim holders off the batch path and read by
//! the admin API to derive rates, sparklines and the run chart.

use super::StoreError;
use chrono::{DateTime, Utc};
use diesel::sql_types::{Array, BigInt, Integer, Nullable, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// One recorded sample of a claim's counters.
#[derive(Debug, Clone, PartialEq, QueryableByName)]
pub struct ProgressSample {
    /// The sampled backfill.
    #[diesel(sql_type = Text)]
    pub backfill_id: String,
    /// The partition, or `None` for a claim on the backfill's own row.
    #[diesel(sql_type = Nullable<Integer>)]
    pub part: Option<i32>,
    /// The claim's generation when it was taken.
    #[diesel(sql_type = BigInt)]
    pub generation: i64,
    /// When the sample was taken, by PostgreSQL's clock.
    #[diesel(sql_type = Timestamptz)]
    pub at: DateTime<Utc>,
    /// The claim's `rows_done` counter at that time.
    #[diesel(sql_type = BigInt)]
    pub rows_done: i64,
}

/// A claim to sample: `(id, part, generation)`, `part` `None` for the
/// backfill's own row.
pub type SampledClaim = (String, Option<u32>, i64);

/// Record one sample of each listed claim `worker` still holds on a
/// `running` backfill, then thin every series that outgrew its bound
/// (`backfill_progress_sample`). No lock on the claim rows: a claim that
/// was lost or moved on is simply not sampled. Returns the samples
/// written.
pub async fn progress_sample(
    conn: &mut AsyncPgConnection,
    worker: &str,
    claims: &[SampledClaim],
) -> Result<i32, StoreError> {
    #[derive(QueryableByName)]
    struct Written {
        #[diesel(sql_type = Integer)]
        written: i32,
    }
    let ids: Vec<&str> = claims.iter().map(|(id, _, _)| id.as_str()).collect();
    let parts: Vec<Option<i32>> = claims
        .iter()
        .map(|(_, p, _)| p.map(|p| i32::try_from(p).unwrap_or(i32::MAX)))
        .collect();
    let gens: Vec<i64> = claims.iter().map(|(_, _, g)| *g).collect();
    let row: Written = super::cached(
        diesel::sql_query(
            "SELECT backfill_progress_sample($1, $2::text[], $3::integer[], $4::bigint[]) \
             AS written",
        )
        .bind::<Text, _>(worker)
        .bind::<Array<Text>, _>(ids)
        .bind::<Array<Nullable<Integer>>, _>(parts)
        .bind::<Array<BigInt>, _>(gens),
    )
    .get_result(conn)
    .await?;
    Ok(row.written)
}

/// The samples of the listed backfills taken at or after `since` (all of
/// them when `None`), by backfill, part and time. No lock; one index
/// range per series.
pub async fn progress_list(
    conn: &mut AsyncPgConnection,
    ids: &[String],
    since: Option<DateTime<Utc>>,
) -> Result<Vec<ProgressSample>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(
            "SELECT backfill_id, part, generation, at, rows_done FROM backfill_progress \
             WHERE backfill_id = ANY($1::text[]) AND ($2::timestamptz IS NULL OR at >= $2) \
             ORDER BY backfill_id, coalesce(part, -1), at",
        )
        .bind::<Array<Text>, _>(ids)
        .bind::<Nullable<Timestamptz>, _>(since),
    )
    .load(conn)
    .await?)
}
