//! Statements that read the server's health signals for throttling
//! (THR-1): WAL position and standbys, open transactions, lock waiters.
//!
//! Every statement reads statistics views only: none writes, none locks a
//! table, none waits for a lock, and none fails when the role lacks
//! privileges. The views show another role's sessions and standbys without
//! their details then, and each statement counts such hidden rows so the
//! caller can tell "nothing there" from "cannot see". Each takes a shared
//! reference to the connection so the caller can pipeline them: sent
//! together they cost one round trip, and as separate statements one that
//! fails does not take the others' readings with it.

use super::StoreError;
use chrono::{DateTime, Utc};
use diesel::sql_types::{Array, BigInt, Bool, Integer, Nullable, Text, Timestamptz};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// What the server reports about its own WAL position and its standbys.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct HealthReplication {
    /// The server is itself a standby in recovery: it has no WAL position
    /// of its own and reports none.
    #[diesel(sql_type = Bool)]
    pub in_recovery: bool,
    /// The current WAL write position in bytes from the start of WAL;
    /// `None` in recovery. A `bigint` holds 8 EiB of WAL, which no server
    /// writes.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub wal_bytes: Option<i64>,
    /// The server's clock when the position was read, the time base of
    /// WAL rates.
    #[diesel(sql_type = Timestamptz)]
    pub read_at: DateTime<Utc>,
    /// Replication connections whose details this role may not see
    /// (without the privileges of `pg_read_all_stats`, e.g. `pg_monitor`).
    #[diesel(sql_type = BigInt)]
    pub hidden: i64,
    /// Visible standbys that report a replay position. WAL clients that
    /// never replay (`pg_basebackup`, `pg_receivewal`) report none and are
    /// not standbys here.
    #[diesel(sql_type = BigInt)]
    pub standbys: i64,
    /// The largest replay lag in bytes over those standbys; `None` without
    /// standbys or in recovery.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub lag_bytes: Option<i64>,
    /// The largest `replay_lag` in microseconds over those standbys, 0 for
    /// a standby that has replayed up to the current WAL position;
    /// `None` when none has a measurement. PostgreSQL measures
    /// `replay_lag` only as replay crosses WAL it sent since the last
    /// measurement, and clears it only at the standby's second reply
    /// after catching up (`wal_receiver_status_interval`, 10 s by
    /// default), so a standby 0 bytes behind keeps showing the lag of the
    /// WAL it last replayed: stale, not lagging.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub replay_lag_us: Option<i64>,
    /// Standbys behind the current position whose `replay_lag` is NULL.
    /// PostgreSQL measures it only as replay advances and clears it once a
    /// standby has caught up, so a standby that fell behind while its
    /// replay stood still has no time lag to report.
    #[diesel(sql_type = BigInt)]
    pub unmeasured: i64,
}

/// Read the WAL position, the server clock and every standby's replay
/// position and lag from `pg_stat_replication`. Locks nothing; reads the
/// WAL insert state and the WAL senders' shared memory. In recovery
/// `pg_current_wal_lsn()` would raise, so it is not called there and the
/// position and byte lags are NULL. A standby whose replay position has
/// reached the position read here is 0 bytes behind and counts a time
/// lag of 0, whatever its stale `replay_lag` says.
pub async fn health_read_replication(
    mut conn: &AsyncPgConnection,
) -> Result<HealthReplication, StoreError> {
    Ok(super::cached(diesel::sql_query(
        "SELECT pg_is_in_recovery() AS in_recovery, \
                pg_wal_lsn_diff(c.lsn, '0/0')::bigint AS wal_bytes, \
                c.at AS read_at, \
                r.hidden, r.standbys, r.lag_bytes, r.replay_lag_us, r.unmeasured \
         FROM (SELECT CASE WHEN pg_is_in_recovery() THEN NULL ELSE pg_current_wal_lsn() END AS lsn, \
                      clock_timestamp() AS at) c \
         CROSS JOIN LATERAL ( \
             SELECT count(*) FILTER (WHERE s.state IS NULL) AS hidden, \
                    count(*) FILTER (WHERE s.replay_lsn IS NOT NULL) AS standbys, \
                    max(greatest(pg_wal_lsn_diff(c.lsn, s.replay_lsn), 0))::bigint AS lag_bytes, \
                    max(CASE WHEN s.replay_lsn >= c.lsn THEN 0 \
                             ELSE extract(epoch FROM s.replay_lag) * 1000000 END)::bigint \
                        AS replay_lag_us, \
                    count(*) FILTER (WHERE s.replay_lag IS NULL AND s.replay_lsn < c.lsn) \
                        AS unmeasured \
             FROM pg_stat_replication s \
             WHERE s.state IS DISTINCT FROM 'backup') r",
    ))
    .get_result(&mut conn)
    .await?)
}

/// The open transactions of other client sessions in this database.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct HealthTransactions {
    /// Age of the oldest open transaction, in microseconds; `None` when no
    /// other session of this database has one open.
    #[diesel(sql_type = Nullable<BigInt>)]
    pub oldest_us: Option<i64>,
    /// Sessions of other roles this role may not see (without the
    /// privileges of `pg_read_all_stats`): their database, kind and
    /// transaction are hidden, so any of them could be an old transaction
    /// here. Server processes without a role are not counted.
    #[diesel(sql_type = BigInt)]
    pub hidden: i64,
    /// The process ID of the session holding the oldest transaction.
    #[diesel(sql_type = Nullable<Integer>)]
    pub oldest_pid: Option<i32>,
    /// That session's `application_name`, cut to 64 characters; `None`
    /// without one (or without a transaction).
    #[diesel(sql_type = Nullable<Text>)]
    pub oldest_application: Option<String>,
}

/// Read the age of the oldest open transaction among the other client
/// sessions of the current database from `pg_stat_activity`, leaving out
/// this session, and which session holds it (its PID and application
/// name, so an operator can find it). Locks nothing; reads the backends'
/// shared status.
/// Transactions in other databases are left out: they hold neither locks
/// on this database's tables nor back its vacuum horizon (shared catalogs
/// aside).
pub async fn health_read_transactions(
    mut conn: &AsyncPgConnection,
) -> Result<HealthTransactions, StoreError> {
    Ok(super::cached(diesel::sql_query(
        "WITH o AS ( \
             SELECT pid, nullif(left(application_name, 64), '') AS application \
             FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() AND backend_type = 'client backend' \
               AND datname = current_database() AND xact_start IS NOT NULL \
             ORDER BY xact_start LIMIT 1 \
         ) \
         SELECT (extract(epoch FROM max(clock_timestamp() - a.xact_start) \
                     FILTER (WHERE a.backend_type = 'client backend' \
                                 AND a.datname = current_database())) \
                 * 1000000)::bigint AS oldest_us, \
                count(*) FILTER (WHERE a.backend_type IS NULL AND a.usesysid IS NOT NULL) \
                    AS hidden, \
                (SELECT pid FROM o) AS oldest_pid, \
                (SELECT application FROM o) AS oldest_application \
         FROM pg_stat_activity a \
         WHERE a.pid <> pg_backend_pid()",
    ))
    .get_result(&mut conn)
    .await?)
}

/// Sessions waiting for a lock on one table.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct HealthLockWaiters {
    /// The table's name as given.
    #[diesel(sql_type = Text)]
    pub name: String,
    /// Whether the name resolves to a relation.
    #[diesel(sql_type = Bool)]
    pub found: bool,
    /// Sessions waiting for a lock on it.
    #[diesel(sql_type = BigInt)]
    pub waiters: i64,
    /// The process ID of a session the waiters wait for, one that is not
    /// waiting itself when there is one (the head of the queue); `None`
    /// without waiters.
    #[diesel(sql_type = Nullable<Integer>)]
    pub blocker_pid: Option<i32>,
    /// That session's `application_name`, cut to 64 characters; `None`
    /// without one.
    #[diesel(sql_type = Nullable<Text>)]
    pub blocker_application: Option<String>,
}

/// Count the sessions waiting for a lock on each of `tables` (names as
/// `to_regclass` takes them: optionally schema-qualified, quoted where
/// needed; a malformed name raises, so the caller checks them first).
/// Locks nothing; reads the lock manager's table (`pg_locks`), which
/// every role may read.
///
/// A session waits on a table when a relation lock or a row's tuple lock
/// on it is not granted, or when it waits for the transaction holding a
/// row of it while holding that row's tuple lock: the first of several
/// sessions queued for one row waits on the holder's transaction ID, the
/// others on the tuple lock the first one holds.
///
/// For a table with waiters it also names one session they wait for
/// (`pg_blocking_pids`, which reads the lock manager's state under its
/// locks, called only for waiting sessions), preferring one that waits
/// for nothing itself, so an operator can find the head of the queue.
pub async fn health_count_lock_waiters(
    mut conn: &AsyncPgConnection,
    tables: &[String],
) -> Result<Vec<HealthLockWaiters>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(
            "WITH t AS ( \
                 SELECT DISTINCT n.name, to_regclass(n.name)::oid AS rel \
                 FROM unnest($1::text[]) AS n(name) \
             ), l AS ( \
                 SELECT locktype, relation, pid, granted FROM pg_locks \
                 WHERE locktype = 'transactionid' \
                    OR database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
             ), w AS ( \
                 SELECT DISTINCT t.name, x.pid FROM t JOIN l x \
                 ON NOT x.granted AND ( \
                     (x.locktype IN ('relation', 'tuple') AND x.relation = t.rel) \
                     OR (x.locktype = 'transactionid' AND EXISTS ( \
                         SELECT 1 FROM l h \
                         WHERE h.pid = x.pid AND h.granted AND h.locktype = 'tuple' \
                           AND h.relation = t.rel))) \
             ), b AS ( \
                 SELECT DISTINCT ON (w.name) w.name, bp.pid \
                 FROM w CROSS JOIN LATERAL unnest(pg_blocking_pids(w.pid)) AS bp(pid) \
                 ORDER BY w.name, bp.pid IN (SELECT pid FROM w), bp.pid \
             ) \
             SELECT t.name, t.rel IS NOT NULL AS found, \
                    (SELECT count(*) FROM w WHERE w.name = t.name) AS waiters, \
                    b.pid AS blocker_pid, \
                    nullif(left(a.application_name, 64), '') AS blocker_application \
             FROM t LEFT JOIN b ON b.name = t.name \
                 LEFT JOIN pg_stat_activity a ON a.pid = b.pid \
             ORDER BY t.name",
        )
        .bind::<Array<Text>, _>(tables),
    )
    .load(&mut conn)
    .await?)
}
