//! THR-6..8: a latency budget through the production runtime (`Embedded`:
//! supervisor, runners, the latency monitor and its probe) against real
//! PostgreSQL, under a real concurrent load.
//!
//! The load is a second connection that takes the row the probe reads
//! `FOR UPDATE` and holds it for a while, over and over: the probe's own
//! reads then wait on a real row lock, as an application's would behind a
//! hot row, and its percentile passes the budget's bound while the load
//! runs, and falls back under it when the load stops.

use super::support::{engine_config, test_db, Deadline, TestDb};
use backfill::events::Event;
use backfill::host::{Embedded, HostConfig};
use backfill::repair::Registry;
use backfill::throttle::latency::{Budget, LatencyConfig, Target};
use backfill::{SqlRepair, State};
use diesel_async::SimpleAsyncConnection;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ID: &str = "items.budget.v1";

fn config(db: &TestDb, bound: Duration) -> HostConfig {
    let mut config = HostConfig::new(db.url.clone());
    config.migrate = true;
    config.auto_backfills = false;
    config.engine = engine_config();
    config.runtime.poll_interval = Duration::from_millis(50);
    config.latency = LatencyConfig {
        probe_sql: Some("SELECT 1 FROM app_hot WHERE id = 1 FOR UPDATE".into()),
        // A reading a second: the load's lock holds each probe about
        // 200 ms, so a window still gets its samples while it runs; p90,
        // so one scheduling hiccup of a loaded machine (about a hundred
        // samples a window once the load stops) moves no reading.
        window: Duration::from_secs(1),
        min_samples: 4,
        default_budget: Some(Budget {
            percentile: 90,
            target: Target::Absolute(bound),
        }),
        ..LatencyConfig::default()
    };
    config
}

/// `items` with `rows` rows, and the repair `id` of them whose every batch
/// sleeps `batch_delay.secs` (0.1 s) once: an uncorrelated subquery runs
/// once per statement. So the backfill cannot finish before a test has
/// seen the cut and the release, however fast the machine is; the test
/// lifts the delay (`UPDATE batch_delay SET secs = 0`) once it has.
pub(super) async fn delayed_items(db: &TestDb, id: &str, rows: i64) -> SqlRepair {
    db.exec(&format!(
        "CREATE TABLE items (id bigint PRIMARY KEY, n integer NOT NULL DEFAULT 0); \
         INSERT INTO items (id) SELECT g FROM generate_series(1, {rows}) g; \
         CREATE TABLE batch_delay (secs float8 NOT NULL); INSERT INTO batch_delay VALUES (0.1); \
         CREATE FUNCTION batch_delay() RETURNS integer LANGUAGE plpgsql AS \
           $$ BEGIN PERFORM pg_sleep(secs) FROM batch_delay; RETURN 0; END $$"
    ))
    .await;
    SqlRepair::new(id, "items")
        .key("id")
        .set("n = n + 1 + (SELECT batch_delay())")
        .validate_where("n <> 1")
        .batch_size(1000)
        .build()
        .expect("definition")
}

/// A connection that holds the probe's row locked for `hold` at a time,
/// back to back, until `stop` is set.
fn hot_writer(db: &TestDb, hold: Duration, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    let url = db.url.clone();
    tokio::spawn(async move {
        use diesel_async::AsyncConnection;
        let mut conn = diesel_async::AsyncPgConnection::establish(&url)
            .await
            .expect("the load connects");
        let sql = format!(
            "BEGIN; SELECT 1 FROM app_hot WHERE id = 1 FOR UPDATE; SELECT pg_sleep({}); COMMIT",
            hold.as_secs_f64()
        );
        while !stop.load(Ordering::Relaxed) {
            conn.batch_execute(&sql).await.expect("the load runs");
        }
    })
}

/// The signal of the throttle condition on the backfill's row, if it is
/// current: reported under the row's generation while it is claimed, as
/// the admin view reads it.
async fn condition(db: &TestDb) -> Option<String> {
    db.text(&format!(
        "SELECT (SELECT throttle->>'signal' FROM backfill WHERE id = '{ID}' \
           AND owner IS NOT NULL AND (throttle->>'generation')::bigint = generation) AS v"
    ))
    .await
}

/// THR-6, THR-7: while a real load makes the probe's reads wait past the
/// bound, the budget cuts the pace (smaller batches, the condition
/// `latency` on the row with its reading over its bound); when the load
/// stops it climbs back to the full pace and clears the condition; the
/// timeline holds one entry for each, not one per batch, and every row
/// is repaired exactly once.
#[actix_rt::test]
async fn thr06_a_budget_cuts_the_pace_under_load_and_releases_after_it() {
    let db = test_db().await;
    let repair = delayed_items(&db, ID, 600_000).await;
    db.exec("CREATE TABLE app_hot (id int PRIMARY KEY); INSERT INTO app_hot VALUES (1)")
        .await;
    let spawned = Embedded::spawn(
        // A bound far above a point read's latency on a loaded machine
        // (the whole suite runs beside this test), far below the lock's
        // hold: the reading is over it only while the load runs.
        config(&db, Duration::from_millis(50)),
        Registry::new().with(repair).unwrap(),
    )
    .await
    .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let load = hot_writer(&db, Duration::from_millis(200), stop.clone());
    let mut events = spawned.engine.events().subscribe();
    spawned.engine.start(ID).await.unwrap();
    spawned.runtime.wake();

    // Under the load: the condition and a batch below the full size.
    let mut deadline = Deadline::new("the budget cuts the pace under load");
    let mut smaller = false;
    loop {
        while let Ok(event) = events.try_recv() {
            if let Event::Progress { id, size, .. } = event {
                smaller |= id == ID && size < 1000;
            }
        }
        if smaller && condition(&db).await.as_deref() == Some("latency") {
            break;
        }
        deadline.tick().await;
    }
    let over = db
        .scalar(&format!(
            "SELECT ((throttle->>'value')::float8 > (throttle->>'threshold')::float8)::int::bigint \
               AS v FROM backfill WHERE id = '{ID}' AND throttle->>'signal' = 'latency'"
        ))
        .await;
    assert_eq!(over, 1, "the condition shows a reading over its bound");

    // Without it: back to the full pace, the condition cleared while the
    // backfill still runs.
    stop.store(true, Ordering::Relaxed);
    load.await.unwrap();
    let mut deadline = Deadline::new("the budget releases after the load");
    while condition(&db).await.is_some() {
        deadline.tick().await;
    }
    let state = db
        .text(&format!(
            "SELECT state AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await;
    assert_eq!(state.as_deref(), Some("running"), "released while it ran");
    db.exec("UPDATE batch_delay SET secs = 0").await;

    let mut deadline = Deadline::new("the backfill completes");
    loop {
        let state = db
            .text(&format!(
                "SELECT state AS v FROM backfill WHERE id = '{ID}'"
            ))
            .await;
        if state.as_deref() == Some(State::Completed.as_str()) {
            break;
        }
        assert!(
            matches!(state.as_deref(), Some("running" | "validating")),
            "the backfill went {state:?}"
        );
        deadline.tick().await;
    }
    spawned.stop().await;
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n <> 1")
            .await,
        0
    );
    let entries = db
        .scalar(&format!(
            "SELECT count(*) AS v FROM backfill_event WHERE backfill_id = '{ID}' \
               AND kind IN ('throttled', 'unthrottled') AND detail LIKE 'latency%'"
        ))
        .await;
    assert!(
        (2..=6).contains(&entries),
        "coalesced: {entries} timeline entries for the budget"
    );
}
