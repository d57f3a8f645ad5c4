//! Statements of a dry run (DRY-1, DRY-2): the share lock that keeps the
//! backfill's state still while it runs, the savepoint around each of its
//! batches, the two measurements it reads inside its transaction before
//! the rollback, and where its journal entries start. None of them writes a
//! row.

use super::backfill::COLUMNS;
use super::{BackfillRow, StoreError};
use diesel::sql_types::{Array, BigInt, Nullable, Text};
use diesel::{OptionalExtension, QueryableByName};
use diesel_async::{AnsiTransactionManager, AsyncPgConnection, RunQueryDsl, TransactionManager};

/// Read one row and lock it `FOR SHARE` for the rest of the caller's
/// transaction: the dry run's batches then run against the state, bound
/// and checkpoint it read, because every lifecycle action (`start`,
/// `resume`, `retry`, `pause`) takes the row `FOR UPDATE` first
/// ([`super::backfill_lock`]) and so waits until the dry run rolls back.
/// Two dry runs of one backfill can share it. No fence; nothing written.
pub async fn backfill_lock_shared(
    conn: &mut AsyncPgConnection,
    id: &str,
) -> Result<Option<BackfillRow>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!(
            "SELECT {COLUMNS} FROM backfill WHERE id = $1 FOR SHARE"
        ))
        .bind::<Text, _>(id),
    )
    .get_result(conn)
    .await
    .optional()?)
}

/// Open a savepoint inside the caller's transaction (diesel's transaction
/// manager names it and counts the depth), so one failed step of a dry run
/// rolls back alone and what the steps before it did can still be read.
/// No lock.
pub async fn dry_run_savepoint(conn: &mut AsyncPgConnection) -> Result<(), StoreError> {
    AnsiTransactionManager::begin_transaction(conn).await?;
    Ok(())
}

/// Release the savepoint of [`dry_run_savepoint`]: what ran inside stays
/// part of the enclosing transaction (which the dry run rolls back).
pub async fn dry_run_release(conn: &mut AsyncPgConnection) -> Result<(), StoreError> {
    AnsiTransactionManager::commit_transaction(conn).await?;
    Ok(())
}

/// Roll back to the savepoint of [`dry_run_savepoint`] (and end it): the
/// enclosing transaction is usable again, without anything done since.
pub async fn dry_run_rollback_to(conn: &mut AsyncPgConnection) -> Result<(), StoreError> {
    AnsiTransactionManager::rollback_transaction(conn).await?;
    Ok(())
}

#[derive(QueryableByName)]
struct Measure {
    #[diesel(sql_type = Nullable<BigInt>)]
    v: Option<i64>,
}

/// The server's WAL insert position in bytes from `0/0`
/// (`pg_current_wal_insert_lsn()`): a batch's WAL is the difference of
/// the positions before and after it. Server-wide, so WAL other sessions
/// write meanwhile counts too. `None` where the position cannot be read
/// (a server in recovery, which runs no batches). No lock.
pub async fn dry_run_wal_position(conn: &mut AsyncPgConnection) -> Result<Option<i64>, StoreError> {
    let row: Measure = super::cached(diesel::sql_query(
        "SELECT CASE WHEN pg_is_in_recovery() THEN NULL \
             ELSE pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0')::bigint END AS v",
    ))
    .get_result(conn)
    .await?;
    Ok(row.v)
}

/// Rows inserted, updated and deleted so far in the current transaction
/// in `tables` (as `to_regclass` names them), from
/// `pg_stat_xact_user_tables`: a batch's changed rows are the difference
/// before and after it. A table that does not resolve counts nothing;
/// `None` when no table resolves. Counts the statements' row operations
/// on those tables themselves (not on partitions of a partitioned table,
/// nor rows an update found unchanged and skipped, which PostgreSQL does
/// not skip). No lock.
pub async fn dry_run_table_changes(
    conn: &mut AsyncPgConnection,
    tables: &[String],
) -> Result<Option<i64>, StoreError> {
    let row: Measure = super::cached(
        diesel::sql_query(
            "SELECT sum(s.n_tup_ins + s.n_tup_upd + s.n_tup_del)::bigint AS v \
             FROM pg_stat_xact_user_tables s \
             WHERE s.relid IN (SELECT to_regclass(t) FROM unnest($1::text[]) AS t)",
        )
        .bind::<Array<Text>, _>(tables),
    )
    .get_result(conn)
    .await?;
    Ok(row.v)
}

/// The greatest journal `seq` of `id` (0 when it has none): a dry run's
/// batches write their journal entries after it, inside its transaction, and
/// its sample reads them back before the rollback. Reads the end of the
/// journal's primary key; no lock.
pub async fn journal_seq_last(conn: &mut AsyncPgConnection, id: &str) -> Result<i64, StoreError> {
    let row: Measure = super::cached(
        diesel::sql_query("SELECT max(seq) AS v FROM backfill_journal WHERE backfill_id = $1")
            .bind::<Text, _>(id),
    )
    .get_result(conn)
    .await?;
    Ok(row.v.unwrap_or(0))
}
