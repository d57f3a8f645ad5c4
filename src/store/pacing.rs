//! Statements of a claim's pacing: the live settings and size in force a
//! runner reads between batches (THR-3, THR-4), and the throttle
//! condition it reports (THR-2).

use super::StoreError;
use diesel::sql_types::{BigInt, Integer, Jsonb, Nullable, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

/// What a runner reads of its backfill between batches.
#[derive(Debug, Clone, QueryableByName)]
pub struct Pacing {
    /// The live settings operators set (THR-4), as stored.
    #[diesel(sql_type = Jsonb)]
    pub settings: Value,
    /// The batch size the last batch or statement timeout left in force
    /// (THR-3); `None` before the first batch.
    #[diesel(sql_type = Nullable<Integer>)]
    pub batch_size: Option<i32>,
}

/// The live settings and the size in force of `id`. Reads the committed
/// row; takes no lock and applies no fence (settings are not a claim's to
/// guard: the batch fence still decides what commits).
pub async fn backfill_pacing_read(
    conn: &mut AsyncPgConnection,
    id: &str,
) -> Result<Option<Pacing>, StoreError> {
    use diesel::OptionalExtension;
    Ok(super::cached(
        diesel::sql_query("SELECT settings, batch_size FROM backfill WHERE id = $1")
            .bind::<Text, _>(id),
    )
    .get_result(conn)
    .await
    .optional()?)
}

/// Record the throttle condition of a claim's runner (THR-2, THR-5):
/// `Some` with `{signal, value, threshold, text}`, to which PostgreSQL
/// adds `since` and the row's generation; `None` clears it. `since` is
/// PostgreSQL's clock when throttling began: a condition written over one
/// recorded under the same generation (a refreshed reading, another
/// signal) keeps the recorded `since`. Fence: the claim's owner and
/// generation, so a runner that lost its claim cannot label the next
/// owner's run; `false` means it did not match. Takes the row lock for
/// the statement only; written when throttling begins or ends and when
/// the reading changes while throttled (at most once per health
/// interval), never per batch.
pub async fn backfill_throttle_set(
    conn: &mut AsyncPgConnection,
    id: &str,
    worker: &str,
    generation: i64,
    throttle: Option<&Value>,
) -> Result<bool, StoreError> {
    let n = super::cached(
        diesel::sql_query(
            "UPDATE backfill SET throttle = CASE WHEN $4::jsonb IS NULL THEN NULL \
                 ELSE $4::jsonb || jsonb_build_object( \
                     'since', CASE WHEN throttle->'generation' = to_jsonb(generation) \
                                   THEN coalesce(throttle->'since', to_jsonb(now())) \
                                   ELSE to_jsonb(now()) END, \
                     'generation', generation) END \
             WHERE id = $1 AND owner = $2 AND generation = $3",
        )
        .bind::<Text, _>(id)
        .bind::<Text, _>(worker)
        .bind::<BigInt, _>(generation)
        .bind::<Nullable<Jsonb>, _>(throttle),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}
