//! Statements of the admin layer beyond audit and idempotency records.

use super::StoreError;
use diesel::sql_types::{Bool, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// Try to take the transaction-scoped advisory lock that serializes explicit
/// validation of one stable ID across every process (VAL-6). Does not wait:
/// `false` means another validation of the ID holds it until its
/// transaction ends. Released at commit or rollback, so a crashed validator
/// never leaves it behind.
pub async fn validation_try_lock(
    conn: &mut AsyncPgConnection,
    id: &str,
) -> Result<bool, StoreError> {
    #[derive(QueryableByName)]
    struct Locked {
        #[diesel(sql_type = Bool)]
        locked: bool,
    }
    let row: Locked = super::cached(diesel::sql_query(
        "SELECT pg_try_advisory_xact_lock(hashtextextended('backfill-validate:' || $1, 0)) AS locked",
    )
    .bind::<Text, _>(id))
    .get_result(conn)
    .await?;
    Ok(row.locked)
}
