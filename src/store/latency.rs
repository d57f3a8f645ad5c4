//! Statements of the latency probe (THR-7): what an application's read of
//! the repaired table costs right now.
//!
//! The probe runs on a connection of its own, outside the pool, so a pool
//! busy with batches does not show as application latency and the probe
//! never takes a connection a batch needs. Every statement here reads;
//! none locks more than `AccessShareLock` on the table, none waits on a
//! row lock.

use super::StoreError;
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};

/// Where the default probe reads: the table and its one-column integer
/// primary key, both as PostgreSQL quotes them, and the key's range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTarget {
    /// The table, as `regclass` renders it (schema-qualified and quoted
    /// where the search path needs it).
    pub table: String,
    /// The key column quoted as an identifier; `None` when the table has
    /// no one-column integer primary key (the probe then reads one row).
    pub key: Option<String>,
    /// The least and greatest key, when there is a key and a row.
    pub range: Option<(i64, i64)>,
}

/// The probe target of `table` (a name as `to_regclass` takes it), or
/// `None` when no such table is visible. Reads the catalog, then the key's
/// `min` and `max` through its index: no lock beyond `AccessShareLock`.
pub async fn latency_probe_target(
    conn: &mut AsyncPgConnection,
    table: &str,
) -> Result<Option<ProbeTarget>, StoreError> {
    #[derive(QueryableByName)]
    struct Found {
        #[diesel(sql_type = Text)]
        rel: String,
        #[diesel(sql_type = Nullable<Text>)]
        key: Option<String>,
    }
    let found: Option<Found> = diesel::sql_query(
        "SELECT c.oid::regclass::text AS rel, \
                (SELECT quote_ident(a.attname) FROM pg_index i \
                   JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
                  WHERE i.indrelid = c.oid AND i.indisprimary AND i.indnkeyatts = 1 \
                    AND a.atttypid IN ('int2'::regtype, 'int4'::regtype, 'int8'::regtype)) AS key \
           FROM pg_class c WHERE c.oid = to_regclass($1)",
    )
    .bind::<Text, _>(table)
    .get_result(conn)
    .await
    .map(Some)
    .or_else(|e| match e {
        diesel::result::Error::NotFound => Ok(None),
        e => Err(e),
    })?;
    let Some(found) = found else {
        return Ok(None);
    };
    let range = match &found.key {
        None => None,
        Some(key) => {
            #[derive(QueryableByName)]
            struct Range {
                #[diesel(sql_type = Nullable<BigInt>)]
                lo: Option<i64>,
                #[diesel(sql_type = Nullable<BigInt>)]
                hi: Option<i64>,
            }
            // Both names come from the catalog, quoted by PostgreSQL.
            let r: Range = diesel::sql_query(format!(
                "SELECT min({key})::bigint AS lo, max({key})::bigint AS hi FROM {}",
                found.rel
            ))
            .get_result(conn)
            .await?;
            r.lo.zip(r.hi)
        }
    };
    Ok(Some(ProbeTarget {
        table: found.rel,
        key: found.key,
        range,
    }))
}

/// One probe read: the row of a key chosen at random within the target's
/// range (chosen by the server in an init plan, so the read is one index
/// lookup), or any one row of a table without such a key.
pub async fn latency_probe_read(
    conn: &mut AsyncPgConnection,
    target: &ProbeTarget,
) -> Result<(), StoreError> {
    match (&target.key, target.range) {
        (Some(key), Some((lo, hi))) => {
            super::cached(
                diesel::sql_query(format!(
                    "SELECT 1 FROM {} \
                      WHERE {key} = (SELECT $1 + floor(random() * $2)::bigint)",
                    target.table
                ))
                .bind::<BigInt, _>(lo)
                .bind::<BigInt, _>(hi.saturating_sub(lo).saturating_add(1)),
            )
            .execute(conn)
            .await?;
        }
        _ => {
            super::cached(diesel::sql_query(format!(
                "SELECT 1 FROM {} LIMIT 1",
                target.table
            )))
            .execute(conn)
            .await?;
        }
    }
    Ok(())
}

/// One probe of SQL the operator declared, run as given (simple query
/// protocol: no parameters, any statement the role may run).
pub async fn latency_probe_declared(
    conn: &mut AsyncPgConnection,
    sql: &str,
) -> Result<(), StoreError> {
    conn.batch_execute(sql).await?;
    Ok(())
}

/// Bound every statement of the probe's own connection, so a probe that
/// meets a lock or a stalled server ends and counts as slow.
pub async fn latency_probe_session(
    conn: &mut AsyncPgConnection,
    timeout_ms: u64,
) -> Result<(), StoreError> {
    conn.batch_execute(&format!(
        "SET statement_timeout = {timeout_ms}; SET lock_timeout = {timeout_ms}; \
         SET application_name = 'backfill latency probe'"
    ))
    .await?;
    Ok(())
}
