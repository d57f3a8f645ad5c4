//! The presence of the processes that serve backfills, and the fair share
//! of a partitioned backfill's partitions it gives each (PAR-6).
//!
//! Without a share, the first process to poll claims every partition it
//! has runners for and a second process finds nothing to do. With it, a
//! process claims a partition only while it holds fewer than its share,
//! and gives back (at a batch boundary, through its runner) the claims it
//! holds beyond it, so the partitions of one backfill spread over the
//! processes that serve it and follow them as they come and go.

use super::StoreError;
use diesel::sql_types::{Array, BigInt, Integer, Text};
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl};

/// The live, unfinished partition claims of worker `WORKER` on backfill
/// `b`; `WORKER` is an SQL expression (a parameter, or a column).
const OWN: &str = "(SELECT count(*) FROM backfill_partition q WHERE q.backfill_id = b.id \
     AND q.owner = WORKER AND q.lease_expires_at > clock_timestamp() \
     AND q.checkpoint IS DISTINCT FROM q.upper)";

/// The processes that serve backfill `b`, `$W` among them, each with its
/// free runners, its live unfinished partitions of `b` and its fair share
/// of them (`worker_id`, `free`, `own`, `share`).
///
/// The partitions that may run at once (the unfinished ones, at most the
/// `concurrency` setting) are dealt out over the processes: each gets the
/// quotient, and the remainder goes one each to those that already hold
/// the most (then by worker ID), so the shares add up to exactly the
/// partitions there are (three processes split four partitions as two,
/// one and one) and a partition that ends moves no other. Another process
/// serves `b` while its presence is live, it has registered `b` (REG-4)
/// and not given up on it, and it has a free runner or runs one of `b`'s
/// partitions. `$W` always serves, with one free runner: it asks because
/// it has one.
const SERVERS: &str = "(SELECT x.worker_id, x.free, x.own, \
         x.u / x.s + CASE WHEN x.r < x.u % x.s THEN 1 ELSE 0 END AS share \
     FROM (SELECT y.worker_id, y.free, y.own, \
               row_number() OVER (ORDER BY y.own DESC, y.worker_id) - 1 AS r, \
               count(*) OVER () AS s, \
               least((SELECT count(*) FROM backfill_partition u WHERE u.backfill_id = b.id \
                          AND u.checkpoint IS DISTINCT FROM u.upper), \
                     coalesce((b.settings->>'concurrency')::integer, 64)) AS u \
           FROM (SELECT w.worker_id, w.free_runners AS free, OWN_OF_W AS own \
                 FROM backfill_worker w \
                 WHERE w.worker_id <> $W AND w.expires_at > clock_timestamp() \
                   AND b.id = ANY (w.ids) \
                   AND (w.free_runners > 0 OR OWN_OF_W > 0) \
                 UNION ALL SELECT $W, 1, OWN_OF_ME) AS y) AS x)";

/// [`SERVERS`] for the worker of parameter `worker_param`.
fn servers(worker_param: &str) -> String {
    SERVERS
        .replace("OWN_OF_W", &OWN.replace("WORKER", "w.worker_id"))
        .replace("OWN_OF_ME", &OWN.replace("WORKER", worker_param))
        .replace("$W", worker_param)
}

/// The condition under which worker `worker_param` may claim another
/// partition of backfill `b`: it holds fewer than its share, or no other
/// process that serves `b` and has a free runner holds fewer than its
/// own share. A share that its process cannot take (no free runner) so
/// never leaves a partition idle while another process could run it.
pub(super) fn below_share(worker_param: &str) -> String {
    format!(
        "(SELECT bool_or(v.worker_id = {me} AND v.own < v.share) \
             OR NOT bool_or(v.worker_id <> {me} AND v.free > 0 AND v.own < v.share) \
         FROM {servers} AS v)",
        me = worker_param,
        servers = servers(worker_param),
    )
}

/// Forget `worker`'s presence (a process that stops), so the others'
/// shares grow at once instead of when the presence would have expired.
pub async fn worker_leave(conn: &mut AsyncPgConnection, worker: &str) -> Result<(), StoreError> {
    super::cached(
        diesel::sql_query("DELETE FROM backfill_worker WHERE worker_id = $1")
            .bind::<Text, _>(worker),
    )
    .execute(conn)
    .await?;
    Ok(())
}

/// A partition claim its worker holds beyond its fair share.
#[derive(Debug, Clone, PartialEq, Eq, QueryableByName)]
pub struct ExcessClaim {
    /// The backfill of the claim.
    #[diesel(sql_type = Text)]
    pub id: String,
    /// The partition the worker holds beyond its share.
    #[diesel(sql_type = Integer)]
    pub part: i32,
    /// The partition's generation of the claim, so a holder gives back only
    /// the claim it was asked about.
    #[diesel(sql_type = BigInt)]
    pub generation: i64,
}

/// A process's presence as one heartbeat records it: worker `worker`
/// serves `ids` and has `free_runners` free, for `ttl_ms` from
/// PostgreSQL's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    /// The process's worker ID.
    pub worker: String,
    /// The backfills it serves (registered, and not given up on).
    pub ids: Vec<String>,
    /// Its runners free now.
    pub free_runners: i32,
    /// How long the presence lives, in milliseconds.
    pub ttl_ms: i64,
}

/// The heartbeat's writes as two CTEs, `gone` (forget the presences that
/// ended more than a day ago, never the worker's own) and `beat` (upsert
/// the worker's row), over the parameters named `worker`, `ids`, `free`
/// and `ttl` (e.g. `$1`): shared by [`worker_heartbeat`] and the claim
/// poll that records presence
/// ([`backfill_claimable_heartbeat`](super::backfill_claimable_heartbeat)).
pub(super) fn heartbeat_ctes(worker: &str, ids: &str, free: &str, ttl: &str) -> String {
    format!(
        "gone AS (DELETE FROM backfill_worker \
             WHERE expires_at < clock_timestamp() - interval '1 day' AND worker_id <> {worker}), \
         beat AS (INSERT INTO backfill_worker (worker_id, ids, free_runners, expires_at) \
             VALUES ({worker}, {ids}, {free}, clock_timestamp() + {ttl} * interval '1 millisecond') \
             ON CONFLICT (worker_id) DO UPDATE SET ids = EXCLUDED.ids, \
                 free_runners = EXCLUDED.free_runners, expires_at = EXCLUDED.expires_at)"
    )
}

/// Record `beat` (the worker serves its `ids` with its free runners, for
/// its TTL from PostgreSQL's clock), forget the presences that ended more
/// than a day ago, and answer the live partition claims of the worker on
/// `running` backfills that another process is waiting for: of a
/// backfill whose share for the worker is n, its unfinished partitions
/// above the n lowest, as many as the other processes that serve the
/// backfill and have free runners lack of their own shares. Nothing
/// while no other process lacks one (a process alone keeps every
/// partition). The caller gives them back at a batch boundary (a
/// runner's graceful stop), so nothing committed is lost and no takeover
/// is needed.
///
/// One statement, so a presence round costs one query: the upsert of the
/// worker's own row is a data-modifying CTE, and the shares do not read
/// that row ([`SERVERS`] counts the worker by itself), so the statement's
/// snapshot taken before the upsert answers the same as a read after it.
/// Locks only the worker's own presence row; the owner index finds its
/// claims.
pub async fn worker_heartbeat(
    conn: &mut AsyncPgConnection,
    beat: &Heartbeat,
) -> Result<Vec<ExcessClaim>, StoreError> {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let sql = SQL.get_or_init(|| {
        format!(
            "WITH {ctes} \
             SELECT m.backfill_id AS id, m.part, m.generation \
             FROM (SELECT p.backfill_id, p.part, p.generation, \
                       row_number() OVER (PARTITION BY p.backfill_id ORDER BY p.part) AS n \
                   FROM backfill_partition p \
                   WHERE p.owner = $1 AND p.lease_expires_at > clock_timestamp() \
                     AND p.checkpoint IS DISTINCT FROM p.upper) AS m \
             JOIN backfill b ON b.id = m.backfill_id \
             CROSS JOIN LATERAL (SELECT \
                     max(v.share) FILTER (WHERE v.worker_id = $1) AS share, \
                     coalesce(sum(least(v.share - v.own, v.free)) \
                         FILTER (WHERE v.worker_id <> $1 AND v.free > 0 AND v.own < v.share), 0) \
                         AS wanted \
                 FROM {servers} AS v) AS s \
             WHERE b.state = 'running' AND m.n > s.share AND m.n <= s.share + s.wanted \
             ORDER BY m.backfill_id, m.part",
            ctes = heartbeat_ctes("$1", "$2", "$3", "$4"),
            servers = servers("$1"),
        )
    });
    Ok(super::cached(
        diesel::sql_query(sql.as_str())
            .bind::<Text, _>(&beat.worker)
            .bind::<Array<Text>, _>(&beat.ids)
            .bind::<Integer, _>(beat.free_runners.max(0))
            .bind::<BigInt, _>(beat.ttl_ms),
    )
    .load(conn)
    .await?)
}
