//! CLM-6: a backfill through a failover. A production host (`Host`: the
//! supervisor, runners, lease renewer and health monitor, migrations
//! included) connects with one URL naming a primary and its streaming
//! standby, `target_session_attrs=read-write`. The primary is killed as a
//! crash would kill it while the backfill runs, the standby is promoted,
//! and the same host, never restarted, finishes the run on the new
//! primary.
//!
//! The repair is the non-idempotent counter (`n = n + 1`, valid only at
//! `n = 1`): a batch applied twice, or one whose rows survived without its
//! checkpoint, shows as a row at 2 or a row left at 0. The throwaway
//! clusters commit with `synchronous_commit = off` and stream
//! asynchronously, so the last batches the old primary committed may never
//! reach the standby; the test then sees the new primary's checkpoint
//! behind the one last read on the old primary, and those batches run
//! again.

use super::support::log::Log;
use super::support::repairs::items_sql;
use super::support::standby::StandbyPair;
use super::support::{engine_config, Deadline};
use backfill::host::{Host, HostConfig};
use backfill::repair::Registry;
use backfill::SqlRepair;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use std::time::{Duration, Instant};

const ID: &str = "items.failover.v1";
const ROWS: i64 = 200_000;
const BATCH: i64 = 1000;

/// What the `backfill` row says, read through the multi-host URL.
#[derive(Debug, Clone, diesel::QueryableByName)]
struct Row {
    #[diesel(sql_type = diesel::sql_types::Text)]
    state: String,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    rows_done: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    batches_done: i64,
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    generation: i64,
    #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
    last_error: Option<String>,
}

/// A reader of the backfill's row as an operator's client would read it:
/// one connection through the multi-host URL, opened again whenever the
/// server behind it is gone, so it follows the failover too.
struct Reader {
    url: String,
    conn: Option<AsyncPgConnection>,
}

impl Reader {
    fn new(url: String) -> Self {
        Reader { url, conn: None }
    }

    /// The row, or `None` while no server that accepts writes answers.
    async fn row(&mut self) -> Option<Row> {
        if self.conn.is_none() {
            // Bounded: a connection attempt must not outlast the test's
            // own deadline while the servers change roles.
            let connect = AsyncPgConnection::establish(&self.url);
            self.conn = tokio::time::timeout(Duration::from_secs(5), connect)
                .await
                .ok()?
                .ok();
        }
        let conn = self.conn.as_mut()?;
        let read = diesel::sql_query(format!(
            "SELECT state, rows_done, batches_done, generation, last_error \
             FROM backfill WHERE id = '{ID}'"
        ))
        .get_result::<Row>(conn);
        match tokio::time::timeout(Duration::from_secs(5), read).await {
            Ok(Ok(row)) => Some(row),
            _ => {
                self.conn = None;
                None
            }
        }
    }

    /// One bigint (as `v`) from the server that accepts writes.
    async fn scalar(&mut self, sql: &str) -> i64 {
        let conn = match self.conn.as_mut() {
            Some(conn) => conn,
            None => self.conn.insert(
                AsyncPgConnection::establish(&self.url)
                    .await
                    .expect("connect through the multi-host URL"),
            ),
        };
        super::support::scalar_on(conn, sql).await
    }
}

/// The events an operator's log shows for a failover, printed by event
/// in the test's output (`--nocapture`) beside the measured times.
const FAILOVER_EVENTS: &[&str] = &[
    "backend_error",
    "backoff_scheduled",
    "stale_owner_rejected",
    "renew_failed",
    "claim_failed",
    "claim_lost",
    "claim_untrusted",
    "claim_acquired",
    "claim_takeover",
    "runner_exited",
    "health_unknown",
    "wake_listener_lost",
    "progress_sample_failed",
    "presence_failed",
    "failed",
    "blocked",
];

/// CLM-6: a backfill a third of the way through when its primary crashes
/// carries on, in the same process, on the standby promoted in its place,
/// and completes with every row repaired exactly once and its row
/// consistent: completed, unclaimed, every batch of the surviving history
/// counted once.
///
/// Guard: a runtime that gives the backfill up on a lost connection
/// (failing it or failing closed), that records the lost batch's failure
/// on another dead pooled connection and so leaves its claim to expire,
/// or that trusts its own memory of the checkpoint over the new
/// primary's (repairing again rows the new primary already has, or
/// skipping ones it lost) fails here.
#[actix_rt::test]
async fn clm06_a_backfill_follows_a_failover_and_repairs_each_row_once() {
    let pair = StandbyPair::start().await;
    pair.primary()
        .await
        .batch_execute(&items_sql(ROWS))
        .await
        .expect("seed the items");
    let url = pair.multi_host_url();
    let repair = SqlRepair::new(ID, "items")
        .key("id")
        .set("n = n + 1")
        .validate_where("n <> 1")
        .batch_size(BATCH as u32)
        .build()
        .unwrap();
    let mut config = HostConfig::new(url.clone());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.admin_listen = "127.0.0.1:0".parse().unwrap();
    config.migrate = true;
    config.auto_backfills = false;
    config.engine = engine_config();
    config.runtime.poll_interval = Duration::from_millis(50);
    // The host's actors run on this thread, so the log captured here is
    // the one an operator would read.
    let (log, _guard) = Log::capture();
    let host = Host::start(config, Registry::new().with(repair).unwrap())
        .await
        .expect("the host starts through the multi-host URL");
    host.engine().start(ID).await.unwrap();
    host.runtime().wake();

    let mut reader = Reader::new(url);
    let mut wait = Deadline::new("a third of the rows are repaired");
    let before_crash = loop {
        if let Some(row) = reader.row().await {
            assert_eq!(row.state, "running", "before the crash: {row:?}");
            if row.rows_done >= ROWS / 3 {
                break row;
            }
        }
        wait.tick().await;
    };

    pair.crash_primary().await;
    let crashed = Instant::now();
    pair.promote_standby().await;
    let promoted = Instant::now();

    // What survived: the new primary's row, right after the promotion.
    let mut wait = Deadline::new("the promoted standby answers");
    let at_promotion = loop {
        if let Some(row) = reader.row().await {
            break row;
        }
        wait.tick().await;
    };
    assert_eq!(
        at_promotion.state, "running",
        "the crash came mid-run: {at_promotion:?}"
    );
    assert!(at_promotion.rows_done < ROWS, "{at_promotion:?}");

    // The first batch the new primary commits: the runtime carries on.
    let mut wait = Deadline::new("a batch commits on the new primary");
    let carried_on = loop {
        if let Some(row) = reader.row().await {
            assert!(
                matches!(row.state.as_str(), "running" | "validating" | "completed"),
                "after the failover: {row:?}"
            );
            if row.rows_done > at_promotion.rows_done || row.state != "running" {
                break promoted.elapsed();
            }
        }
        wait.tick().await;
    };

    let mut wait = Deadline::new("the backfill completes on the new primary");
    let done = loop {
        if let Some(row) = reader.row().await {
            assert!(
                matches!(row.state.as_str(), "running" | "validating" | "completed"),
                "after the failover: {row:?}, last error {:?}",
                row.last_error
            );
            if row.state == "completed" {
                break row;
            }
        }
        wait.tick().await;
    };

    for event in FAILOVER_EVENTS {
        for line in log.lines(event) {
            eprintln!("{line}");
        }
    }
    eprintln!(
        "failover: the old primary had repaired at least {} rows, the standby kept {}; \
         promotion took {:?}; the first batch on the new primary committed {carried_on:?} \
         after the promotion ({:?} after the crash); generation {} before, {} at completion",
        before_crash.rows_done,
        at_promotion.rows_done,
        promoted - crashed,
        (promoted - crashed) + carried_on,
        before_crash.generation,
        done.generation,
    );

    // Exactly once: n = n + 1 leaves 1 only on a row repaired once.
    assert_eq!(
        reader
            .scalar("SELECT count(*) AS v FROM items WHERE n <> 1")
            .await,
        0,
        "every row repaired exactly once"
    );
    assert_eq!(reader.scalar("SELECT count(*) AS v FROM items").await, ROWS);
    // The state row: completed by a successful validation, unclaimed, the
    // checkpoint at the bound, and every batch of the surviving history
    // counted once (a fixed batch size over contiguous keys).
    let consistent = reader
        .scalar(&format!(
            "SELECT count(*) AS v FROM backfill WHERE id = '{ID}' \
               AND state = 'completed' AND validation_outcome = 'success' \
               AND owner IS NULL AND lease_expires_at IS NULL \
               AND checkpoint = bound AND completed_at IS NOT NULL"
        ))
        .await;
    assert_eq!(consistent, 1, "the state row is consistent: {done:?}");
    assert_eq!(done.rows_done, ROWS, "{done:?}");
    assert_eq!(done.batches_done, ROWS / BATCH, "{done:?}");
    // How it carried on, from the new primary's timeline: the lost batch's
    // failure was recorded there as retryable and the claim given back, so
    // the backfill was claimed again at once; no claim was taken over,
    // which would mean a claim left to expire (a lease's wait) instead.
    let recorded = reader
        .scalar(&format!(
            "SELECT count(*) AS v FROM backfill_event WHERE backfill_id = '{ID}' \
               AND kind = 'error' AND generation = {}",
            at_promotion.generation
        ))
        .await;
    assert_eq!(recorded, 1, "the lost batch's failure was recorded once");
    let taken_over = reader
        .scalar(&format!(
            "SELECT count(*) AS v FROM backfill_event WHERE backfill_id = '{ID}' \
               AND kind = 'claimed' AND detail LIKE 'taken over from %'"
        ))
        .await;
    assert_eq!(taken_over, 0, "no claim was left to expire");
    host.stop().await;
}
