//! Wake-ups: `LISTEN` and `NOTIFY` on the channel that wakes supervisors.

use super::StoreError;
use diesel::sql_types::Text;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// The NOTIFY channel that wakes supervisors. A hint only: a lost, late,
/// duplicated or replayed notification changes nothing committed.
pub const WAKE_CHANNEL: &str = "backfill_wake";

/// `LISTEN` for wake-ups on a dedicated connection.
pub async fn wake_listen(conn: &mut AsyncPgConnection) -> Result<(), StoreError> {
    diesel::sql_query(format!("LISTEN {WAKE_CHANNEL}"))
        .execute(conn)
        .await?;
    Ok(())
}

/// Queue a wake-up for `id` in the caller's transaction: PostgreSQL
/// delivers it only if (and when) the transaction commits.
pub async fn wake_notify(conn: &mut AsyncPgConnection, id: &str) -> Result<(), StoreError> {
    super::cached(
        diesel::sql_query("SELECT pg_notify($1, $2)")
            .bind::<Text, _>(WAKE_CHANNEL)
            .bind::<Text, _>(id),
    )
    .execute(conn)
    .await?;
    Ok(())
}
