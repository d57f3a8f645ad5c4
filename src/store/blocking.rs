//! The sample of keys that hold a blocked repair back (RT-4), kept on the
//! backfill row apart from its lifecycle columns: the runtime records it
//! after the block, and the detail view reads it.

use super::StoreError;
use diesel::sql_types::{BigInt, Jsonb, Nullable, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use serde_json::Value;

/// Record `keys` (a JSON array, or `None` when the definition reports
/// none) as the blocking keys of `id`. Fence: the row is `blocked` at
/// `generation`, the block this sample belongs to; `false` (zero rows)
/// means the row moved on (retried, taken over) and nothing was written.
/// Locks the backfill row for the update.
pub async fn backfill_blocking_keys_record(
    conn: &mut AsyncPgConnection,
    id: &str,
    generation: i64,
    keys: Option<&Value>,
) -> Result<bool, StoreError> {
    let n = super::cached(
        diesel::sql_query(
            "UPDATE backfill SET blocking_keys = $3 \
             WHERE id = $1 AND generation = $2 AND state = 'blocked'",
        )
        .bind::<Text, _>(id)
        .bind::<BigInt, _>(generation)
        .bind::<Nullable<Jsonb>, _>(keys),
    )
    .execute(conn)
    .await?;
    Ok(n == 1)
}

/// The blocking keys of `id` while it is `blocked`; `None` otherwise, or
/// when none was recorded. No lock.
pub async fn backfill_blocking_keys_get(
    conn: &mut AsyncPgConnection,
    id: &str,
) -> Result<Option<Value>, StoreError> {
    #[derive(QueryableByName)]
    struct Keys {
        #[diesel(sql_type = Nullable<Jsonb>)]
        keys: Option<Value>,
    }
    let row: Option<Keys> = super::cached(
        diesel::sql_query(
            "SELECT blocking_keys AS keys FROM backfill WHERE id = $1 AND state = 'blocked'",
        )
        .bind::<Text, _>(id),
    )
    .get_result(conn)
    .await
    .map(Some)
    .or_else(|e| match e {
        diesel::result::Error::NotFound => Ok(None),
        e => Err(e),
    })?;
    Ok(row.and_then(|r| r.keys))
}
