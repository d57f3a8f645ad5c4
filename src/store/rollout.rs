//! The rollout caps a fleet's operator set (FLT-2), kept in every
//! database of the fleet so a restarted process holds a repair to them.

use super::StoreError;
use chrono::{DateTime, Utc};
use diesel::sql_types::{Integer, Nullable, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// One repair's stored rollout cap.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct StoredRollout {
    /// The repair's stable ID.
    #[diesel(sql_type = Text)]
    pub repair_id: String,
    /// The most databases that may run it at once; `None`: no cap.
    #[diesel(sql_type = Nullable<Integer>)]
    pub max_databases: Option<i32>,
    /// When the setting process set it, by its clock.
    #[diesel(sql_type = Timestamptz)]
    pub set_at: DateTime<Utc>,
}

/// Record repair `id`'s cap as set at `set_at`, unless a newer setting is
/// already stored (two processes of one fleet setting it at once: the
/// later one stays). An upsert of the repair's row; no other lock. Zero
/// rows when a newer setting was kept, which is not an error.
pub async fn rollout_set(
    conn: &mut AsyncPgConnection,
    id: &str,
    max_databases: Option<i32>,
    set_at: DateTime<Utc>,
) -> Result<usize, StoreError> {
    Ok(diesel::sql_query(
        "INSERT INTO backfill_rollout (repair_id, max_databases, set_at) VALUES ($1, $2, $3) \
         ON CONFLICT (repair_id) DO UPDATE \
         SET max_databases = excluded.max_databases, set_at = excluded.set_at \
         WHERE backfill_rollout.set_at <= excluded.set_at",
    )
    .bind::<Text, _>(id)
    .bind::<Nullable<Integer>, _>(max_databases)
    .bind::<Timestamptz, _>(set_at)
    .execute(conn)
    .await?)
}

/// Every stored rollout cap. A plain read; no lock.
pub async fn rollout_list(conn: &mut AsyncPgConnection) -> Result<Vec<StoredRollout>, StoreError> {
    Ok(diesel::sql_query(
        "SELECT repair_id, max_databases, set_at FROM backfill_rollout ORDER BY repair_id",
    )
    .load(conn)
    .await?)
}
