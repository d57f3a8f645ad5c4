//! Production safety (docs/CONTRACT.md section 12.3): throttling on
//! database health, batch sizing toward a target duration, and the pause
//! between batches, through the production runtime (`Embedded`: the
//! supervisor, runners, lease renewer and health monitor) against real
//! PostgreSQL.
//!
//! Index:
//! - THR-3 sizing toward a target, the statement-timeout halving and the
//!   batch contract at the size in force: `thr3_*`
//!
//! Batch cost is made real with `pg_sleep` per row in the repair's SET
//! expression, so sizes and durations are PostgreSQL's, not a mock's.

mod support;

use backfill::events::Event;
use backfill::host::{Embedded, HostConfig, Spawned};
use backfill::repair::Registry;
use backfill::repair::SqlRepairBuilder;
use backfill::{SqlRepair, State};
use std::time::Duration;
use support::repairs::{items_sql, Counter, Hooks, SELECT_DEFINITION_LIMIT};
use support::{engine_config, test_db, TestDb};
use tokio::sync::broadcast::error::RecvError;

const SLOW: &str = "items.slow.v1";

/// `items` with `rows` rows and a repair whose every row costs `per_row`
/// of PostgreSQL's time (`pg_sleep` in the SET expression, evaluated per
/// updated row).
fn slow_repair(per_row: Duration) -> SqlRepairBuilder {
    SqlRepair::new(SLOW, "items")
        .key("id")
        .set(format!(
            "n = n + 1 + length(pg_sleep({})::text)",
            per_row.as_secs_f64()
        ))
        .validate_where("n <> 1")
        .batch_size(1000)
}

fn config(db: &TestDb) -> HostConfig {
    let mut config = HostConfig::new(db.url.clone());
    config.migrate = true;
    config.auto_backfills = false;
    config.engine = engine_config();
    config.runtime.poll_interval = Duration::from_millis(50);
    config
}

/// One committed batch as the engine reported it.
#[derive(Debug, Clone, Copy)]
struct Batch {
    keys: usize,
    size: u32,
    took: Duration,
}

/// Start `id`, then collect its committed batches until it leaves
/// `running` (for validation, or failed or blocked).
async fn run_collecting(spawned: &Spawned, id: &str) -> Vec<Batch> {
    let mut events = spawned.engine.events().subscribe();
    spawned.engine.start(id).await.unwrap();
    spawned.runtime.wake();
    let mut batches = vec![];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let event = tokio::time::timeout_at(deadline, events.recv())
            .await
            .expect("the backfill reached validation in time");
        match event {
            Ok(Event::Progress {
                id: of,
                keys,
                size,
                took,
            }) if of == id => batches.push(Batch { keys, size, took }),
            Ok(Event::State { id: of, state })
                if of == id
                    && matches!(
                        state,
                        State::Validating | State::Completed | State::Failed | State::Blocked
                    ) =>
            {
                return batches;
            }
            Ok(_) => {}
            Err(RecvError::Lagged(n)) => panic!("the test fell {n} events behind"),
            Err(RecvError::Closed) => panic!("events closed"),
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// THR-3: from a size far too small, the size grows toward the target
/// duration and settles there: the later batches take within 25 % of the
/// target, and no step grows by more than the gentle factor.
#[actix_rt::test]
async fn thr3_batch_size_converges_to_the_target_duration() {
    let db = test_db().await;
    db.exec(&items_sql(4000)).await;
    let target = Duration::from_millis(40);
    let repair = slow_repair(Duration::from_micros(500))
        .target_batch(target, 5, 2000)
        .build()
        .unwrap();
    let spawned = Embedded::spawn(config(&db), Registry::new().with(repair).unwrap())
        .await
        .unwrap();
    let batches = run_collecting(&spawned, SLOW).await;
    spawned.stop().await;
    assert_eq!(batches[0].size, 5, "starts at the range's minimum");
    for pair in batches.windows(2) {
        assert!(
            f64::from(pair[1].size) <= f64::from(pair[0].size) * backfill::pace::GROW + 1.0,
            "grows gently: {pair:?}"
        );
    }
    for b in &batches {
        assert!(
            b.keys <= b.size as usize,
            "EX-4 at the size in force: {b:?}"
        );
    }
    // Some tens of keys take 40 ms (pg_sleep sleeps at least its
    // argument): reached in well under 15 batches from 5.
    assert!(batches.len() > 25, "{} batches", batches.len());
    let settled: Vec<_> = batches[15..batches.len() - 1]
        .iter()
        .map(|b| b.took)
        .collect();
    let m = median(settled);
    assert!(
        m >= target * 3 / 4 && m <= target * 5 / 4,
        "median batch {m:?} is not within 25 % of {target:?}: {batches:?}"
    );
    // The size in force is stored with the row: one the settled batches
    // ran with.
    let stored = db
        .scalar(&format!(
            "SELECT batch_size::bigint AS v FROM backfill WHERE id = '{SLOW}'"
        ))
        .await;
    let settled = &batches[15..];
    let (lo, hi) = (
        settled.iter().map(|b| b.size).min().unwrap(),
        settled.iter().map(|b| b.size).max().unwrap(),
    );
    assert!(
        (i64::from(lo)..=i64::from(hi) * 3 / 2).contains(&stored),
        "the size in force {stored} is recorded ({lo}..={hi})"
    );
}

/// THR-3: a batch that hits the statement timeout halves the size before
/// the retry, and the backfill completes instead of failing; the size in
/// force survives the claim (it is stored with the row).
#[actix_rt::test]
async fn thr3_statement_timeout_halves_the_size_and_completes() {
    let db = test_db().await;
    db.exec(&items_sql(1500)).await;
    let mut config = config(&db);
    // 1000 keys take 500 ms and 500 take 250 ms: both past the timeout;
    // 250 keys (125 ms) fit.
    config.engine.statement_timeout = Duration::from_millis(200);
    config.engine.retry.max_attempts = 5;
    let repair = slow_repair(Duration::from_micros(500))
        .target_batch(Duration::from_millis(100), 10, 2000)
        .build()
        .unwrap();
    let spawned = Embedded::spawn(config, Registry::new().with(repair).unwrap())
        .await
        .unwrap();
    // The size a previous run left in force.
    db.exec(&format!(
        "UPDATE backfill SET batch_size = 1000 WHERE id = '{SLOW}'"
    ))
    .await;
    let batches = run_collecting(&spawned, SLOW).await;
    let row = spawned
        .engine
        .wait_for(
            SLOW,
            &[State::Completed, State::Failed, State::Blocked],
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    spawned.stop().await;
    assert_eq!(row.state, State::Completed);
    assert_eq!(
        row.last_error.as_deref(),
        Some("statement timeout"),
        "the timeouts were recorded"
    );
    assert!(
        batches[0].size <= 250,
        "the first committed batch ran at the halved size: {batches:?}"
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n = 1")
            .await,
        1500,
        "every row repaired exactly once"
    );
}

/// THR-3 with EX-4: the limit a selection is checked against is the size
/// in force, not the definition's limit. A repair that selects up to its
/// own limit whatever it is asked is refused once an operator's batch
/// size is smaller, and nothing of that batch commits.
#[actix_rt::test]
async fn thr3_selection_is_checked_against_the_size_in_force() {
    let db = test_db().await;
    db.exec(&items_sql(300)).await;
    let hooks = Hooks::new();
    hooks
        .select_mode
        .store(SELECT_DEFINITION_LIMIT, std::sync::atomic::Ordering::SeqCst);
    let repair = Counter::new("items.counter", 50, hooks.clone());
    let spawned = Embedded::spawn(config(&db), Registry::new().with(repair).unwrap())
        .await
        .unwrap();
    db.exec("UPDATE backfill SET settings = '{\"batch_size\": 10}' WHERE id = 'items.counter'")
        .await;
    spawned.engine.start("items.counter").await.unwrap();
    spawned.runtime.wake();
    let row = spawned
        .engine
        .wait_for(
            "items.counter",
            &[State::Blocked, State::Failed],
            Duration::from_secs(60),
        )
        .await
        .unwrap();
    spawned.stop().await;
    let error = row.last_error.unwrap_or_default();
    assert!(
        error.contains("the batch limit is 10"),
        "refused at the size in force: {error}"
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n <> 0")
            .await,
        0
    );
    assert!(row.checkpoint.is_none());
}
