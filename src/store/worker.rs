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

/// The live, unfinished partition claims of worker `$W` on backfill `b`.
/// `$W` is replaced by the statement's parameter of the worker ID.
const OWN: &str = "(SELECT count(*) FROM backfill_partition q WHERE q.backfill_id = b.id \
     AND q.owner = $W AND q.lease_expires_at > clock_timestamp() \
     AND q.checkpoint IS DISTINCT FROM q.upper)";

/// Worker `$W`'s fair share of backfill `b`'s partitions. The partitions
/// that may run at once (its unfinished ones, at most its `concurrency`
/// setting) are dealt out over the processes that serve `b`, in the order
/// of their worker IDs: each gets the quotient, and the first ones one
/// more each for the remainder, so the shares add up to exactly the
/// partitions there are (three processes split four partitions as two,
/// one and one). A process serves `b` while its presence is live, it has registered
/// `b` (REG-4), and it has a free runner or runs one of `b`'s partitions;
/// `$W` itself always counts, whether its presence was written yet or
/// not.
const SHARE: &str = "(SELECT q.u / q.s + CASE WHEN q.r < q.u % q.s THEN 1 ELSE 0 END \
     FROM (SELECT least((SELECT count(*) FROM backfill_partition u WHERE u.backfill_id = b.id \
                 AND u.checkpoint IS DISTINCT FROM u.upper), \
                 coalesce((b.settings->>'concurrency')::integer, 64)) AS u, \
             1 + (SELECT count(*) FROM backfill_worker w WHERE SERVING) AS s, \
             (SELECT count(*) FROM backfill_worker w WHERE SERVING AND w.worker_id < $W) AS r) AS q)";

/// Whether process `w` (a `backfill_worker` row) other than `$W` serves
/// backfill `b`; see [`SHARE`].
const SERVING: &str = "w.worker_id <> $W AND w.expires_at > clock_timestamp() \
     AND b.id = ANY (w.ids) AND (w.free_runners > 0 OR EXISTS (SELECT 1 FROM backfill_partition o \
         WHERE o.backfill_id = b.id AND o.owner = w.worker_id \
           AND o.lease_expires_at > clock_timestamp()))";

/// [`SHARE`] for the worker of parameter `worker_param`.
fn share(worker_param: &str) -> String {
    SHARE
        .replace("SERVING", SERVING)
        .replace("$W", worker_param)
}

/// The condition under which worker `$W` may claim another partition of
/// backfill `b`: it holds fewer than its share.
pub(super) fn below_share(worker_param: &str) -> String {
    format!(
        "{} < {}",
        OWN.replace("$W", worker_param),
        share(worker_param)
    )
}

/// Record that `worker` serves `ids` and has `free_runners` free, for
/// `ttl_ms` from PostgreSQL's clock, and forget the presences that ended
/// more than a day ago. An upsert of the worker's own row; no other lock.
pub async fn worker_heartbeat(
    conn: &mut AsyncPgConnection,
    worker: &str,
    ids: &[String],
    free_runners: i32,
    ttl_ms: i64,
) -> Result<(), StoreError> {
    super::cached(
        diesel::sql_query(
            "WITH gone AS (DELETE FROM backfill_worker \
                 WHERE expires_at < clock_timestamp() - interval '1 day' AND worker_id <> $1) \
             INSERT INTO backfill_worker (worker_id, ids, free_runners, expires_at) \
             VALUES ($1, $2, $3, clock_timestamp() + $4 * interval '1 millisecond') \
             ON CONFLICT (worker_id) DO UPDATE SET ids = EXCLUDED.ids, \
                 free_runners = EXCLUDED.free_runners, expires_at = EXCLUDED.expires_at",
        )
        .bind::<Text, _>(worker)
        .bind::<Array<Text>, _>(ids)
        .bind::<Integer, _>(free_runners.max(0))
        .bind::<BigInt, _>(ttl_ms),
    )
    .execute(conn)
    .await?;
    Ok(())
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

/// The live partition claims of `worker` on `running` backfills beyond
/// its fair share of each: of a backfill whose share is n, all but its n
/// lowest unfinished partitions. Nothing while the worker is the only
/// process serving a backfill: its share is then every partition that
/// may run. The caller gives them back at a batch
/// boundary (a runner's graceful stop), so no batch is lost and no
/// takeover is needed. Reads only; takes no lock.
pub async fn worker_excess_claims(
    conn: &mut AsyncPgConnection,
    worker: &str,
) -> Result<Vec<ExcessClaim>, StoreError> {
    Ok(super::cached(
        diesel::sql_query(format!(
            "SELECT m.backfill_id AS id, m.part, m.generation \
         FROM (SELECT p.backfill_id, p.part, p.generation, \
                   row_number() OVER (PARTITION BY p.backfill_id ORDER BY p.part) AS n \
               FROM backfill_partition p \
               WHERE p.owner = $1 AND p.lease_expires_at > clock_timestamp() \
                 AND p.checkpoint IS DISTINCT FROM p.upper) AS m \
         JOIN backfill b ON b.id = m.backfill_id \
         WHERE b.state = 'running' AND m.n > {share} \
         ORDER BY m.backfill_id, m.part",
            share = share("$1"),
        ))
        .bind::<Text, _>(worker),
    )
    .load(conn)
    .await?)
}
