//! PAR-6: the partitions of one backfill spread over the processes that
//! serve it, through the production store, engine and actor runtime.

use super::*;
use backfill::runtime::{RuntimeConfig, RuntimeHandle};
use std::collections::BTreeMap;
use std::time::Duration;

/// The `(part, owner)` of every live partition claim, by owner.
async fn holders(db: &TestDb) -> BTreeMap<String, usize> {
    let text = db
        .text(
            "SELECT string_agg(owner, ',' ORDER BY part) AS v FROM backfill_partition \
             WHERE owner IS NOT NULL AND lease_expires_at > clock_timestamp() \
               AND checkpoint IS DISTINCT FROM upper",
        )
        .await
        .unwrap_or_default();
    let mut by_owner = BTreeMap::new();
    for owner in text.split(',').filter(|o| !o.is_empty()) {
        *by_owner.entry(owner.to_string()).or_insert(0) += 1;
    }
    by_owner
}

fn parts(excess: &[backfill::__private::store::ExcessClaim]) -> Vec<i32> {
    excess.iter().map(|c| c.part).collect()
}

/// PAR-6: alone, a process may hold every partition; once two more
/// processes are present, its share of four partitions is two (the
/// shares, dealt in worker-ID order, are 2, 1, 1), its presence round
/// names the two claims beyond it, and once it gave them back it may not
/// take them again, while each other process takes exactly its one.
/// Guards: the share condition of the partition claim (the first process
/// would take its partitions back, the second a second one) and the
/// excess reading (no claim would be named to give back).
#[tokio::test]
async fn par06_a_process_holds_its_fair_share_and_names_the_claims_beyond_it() {
    let (_db, engine, _hooks) = started(400, 10, 4).await;
    assert!(engine.presence("a", 4, &[]).await.unwrap().is_empty());
    let mut held = Vec::new();
    while let Some(claim) = engine.claim_next("a", &[]).await.unwrap() {
        held.push(claim);
    }
    assert_eq!(held.len(), 4, "alone, a process may hold every partition");

    // Two more processes arrive, each with free runners.
    assert!(engine.presence("b", 4, &[]).await.unwrap().is_empty());
    assert!(engine.presence("c", 4, &[]).await.unwrap().is_empty());
    let excess = engine.presence("a", 0, &[]).await.unwrap();
    assert_eq!(parts(&excess), [2, 3], "a's share is 2 of 4");
    assert!(engine.claim_next("b", &[]).await.unwrap().is_none());

    // `a` gives them back at its batch boundary; it may not take them
    // again, and `b` and `c` take one each.
    for claim in held.iter().filter(|c| c.partition >= Some(2)) {
        assert!(engine.release(claim).await.unwrap());
    }
    assert!(engine.claim_next("a", &[]).await.unwrap().is_none());
    let b = engine.claim_next("b", &[]).await.unwrap().expect("b's one");
    assert_eq!(b.partition, Some(2));
    assert!(engine.claim_next("b", &[]).await.unwrap().is_none());
    let c = engine.claim_next("c", &[]).await.unwrap().expect("c's one");
    assert_eq!(c.partition, Some(3));
    for worker in ["a", "b", "c"] {
        let free = if worker == "a" { 2 } else { 3 };
        let excess = engine.presence(worker, free, &[]).await.unwrap();
        assert!(excess.is_empty(), "{worker}: {:?}", parts(&excess));
    }

    // A process that leaves stops counting at once: the two that remain
    // share the four partitions two and two.
    engine.leave("c").await.unwrap();
    assert!(engine.release(&c).await.unwrap());
    let again = engine
        .claim_next("b", &[])
        .await
        .unwrap()
        .expect("b's second");
    assert_eq!(again.partition, Some(3));
}

/// PAR-6 through the actor runtime, with the default of four runners per
/// process: the first runtime takes all four partitions of a running
/// backfill; two more runtimes start, and the first gives partitions back
/// at a batch boundary until each of the three runs at least one at the
/// same time. The run then completes with every row repaired exactly once
/// (the counter's validation fails on any row not at 1). Guard: the
/// yield of the claims beyond the share (without it, the first runtime
/// keeps every partition until each ends).
#[actix_rt::test]
async fn par06_three_runtimes_with_default_runners_share_one_backfill() {
    let (db, first, _hooks) = started(2_000, 5, 4).await;
    // Slow enough that the others arrive long before a partition ends
    // (a runner pausing between batches gives its claim back at once).
    first
        .update_settings(ID, &serde_json::json!({"pause_ms": 250}))
        .await
        .unwrap();
    let config = |worker: &str| RuntimeConfig {
        worker_id: worker.into(),
        poll_interval: Duration::from_millis(50),
        renew_interval: Some(Duration::from_millis(200)),
        ..RuntimeConfig::default()
    };
    assert_eq!(RuntimeConfig::default().max_concurrent_runners, 4);
    let one = RuntimeHandle::start(Arc::new(first.clone()), config("one")).unwrap();
    eventually("the first runtime holds every partition", || async {
        holders(&db).await.get("one") == Some(&4)
    })
    .await;
    let second = engine_for(&db, parted(5, Hooks::new(), 4, Points::Even)).await;
    let third = engine_for(&db, parted(5, Hooks::new(), 4, Points::Even)).await;
    let two = RuntimeHandle::start(Arc::new(second), config("two")).unwrap();
    let three = RuntimeHandle::start(Arc::new(third), config("three")).unwrap();
    eventually("each runtime runs a partition", || async {
        let now = holders(&db).await;
        ["one", "two", "three"]
            .iter()
            .all(|w| now.get(*w).is_some_and(|n| *n >= 1))
    })
    .await;
    first
        .update_settings(ID, &serde_json::json!({"pause_ms": null}))
        .await
        .unwrap();
    eventually("completion", || async {
        first.get(ID).await.unwrap().state == State::Completed
    })
    .await;
    one.shutdown().await;
    two.shutdown().await;
    three.shutdown().await;
    assert_eq!(count_n(&db, 1).await, 2_000);
}

/// PAR-6: a share is a claim on idle runners, never a reason to leave a
/// partition idle. A process whose runners are all busy elsewhere does
/// not hold back another that has room (it takes the partition beyond
/// its share), and a process that gave up on the backfill (REG-4: it
/// cannot interpret the row) does not count toward its shares at all.
/// Guards: the exception for a share whose process has no free runner,
/// and the given-up backfills left out of the presence.
#[tokio::test]
async fn par06_a_share_its_process_cannot_take_leaves_no_partition_idle() {
    let (_db, engine, _hooks) = started(400, 10, 4).await;
    assert!(engine.presence("a", 4, &[]).await.unwrap().is_empty());
    let a = engine
        .claim_next("a", &[])
        .await
        .unwrap()
        .expect("a's first");
    assert!(engine.presence("b", 4, &[]).await.unwrap().is_empty());
    for _ in 0..2 {
        engine
            .claim_next("b", &[])
            .await
            .unwrap()
            .expect("b's share");
    }
    assert!(
        engine.claim_next("b", &[]).await.unwrap().is_none(),
        "a has a free runner and lacks one of its two"
    );
    // `a`'s runners are now all busy: its share no longer holds `b` back.
    assert!(engine.presence("a", 0, &[]).await.unwrap().is_empty());
    let fourth = engine
        .claim_next("b", &[])
        .await
        .unwrap()
        .expect("b runs the fourth");
    assert_eq!(fourth.partition, Some(3));
    assert!(engine.release(&fourth).await.unwrap());

    // `a` gives up on the backfill: it counts for nothing, whatever it
    // holds or has free.
    assert!(engine
        .presence("a", 4, &[ID.to_string()])
        .await
        .unwrap()
        .is_empty());
    assert!(engine.release(&a).await.unwrap());
    let mut taken = 0;
    while engine.claim_next("b", &[]).await.unwrap().is_some() {
        taken += 1;
    }
    assert_eq!(taken, 2, "b takes every partition left");
}

/// PAR-6: a runtime's shutdown returns only once its presence is gone, so
/// a host that exits right after it leaves no presence behind to hold the
/// others' shares back for a lease TTL. A second connection holds the
/// presence row locked: the shutdown's withdrawal waits on it and the
/// shutdown does not return; once the lock goes, it returns with the
/// presence deleted. Guard: the supervisor awaiting the renewer's
/// withdrawal (without it the shutdown returns while the withdrawal is
/// still blocked).
#[actix_rt::test]
async fn par06_shutdown_returns_once_the_presence_is_withdrawn() {
    use diesel_async::SimpleAsyncConnection;
    let (db, engine, _hooks) = started(100, 10, 2).await;
    let config = RuntimeConfig {
        worker_id: "leaving".into(),
        poll_interval: Duration::from_millis(50),
        renew_interval: Some(Duration::from_millis(200)),
        ..RuntimeConfig::default()
    };
    let runtime = RuntimeHandle::start(Arc::new(engine.clone()), config).unwrap();
    let present = "SELECT count(*) AS v FROM backfill_worker WHERE worker_id = 'leaving'";
    eventually("the runtime is present", || async {
        db.scalar(present).await == 1
    })
    .await;
    let mut lock = db.connect().await;
    lock.batch_execute(
        "BEGIN; SELECT 1 FROM backfill_worker WHERE worker_id = 'leaving' FOR UPDATE",
    )
    .await
    .unwrap();
    let stopping = actix_rt::spawn(async move { runtime.shutdown().await });
    eventually("the withdrawal waits on the lock", || async {
        db.scalar(
            "SELECT count(*) AS v FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND query LIKE 'DELETE FROM backfill_worker%'",
        )
        .await
            >= 1
    })
    .await;
    assert!(
        !stopping.is_finished(),
        "the shutdown returned with the presence still in place"
    );
    lock.batch_execute("ROLLBACK").await.unwrap();
    stopping.await.unwrap();
    assert_eq!(db.scalar(present).await, 0, "the presence is gone");
}

/// PAR-6, FLT-1 idle cost, for a runtime over one database: an idle
/// runtime polls with one read that carries its presence. Its backfill
/// is registered and never started, so nothing is claimable. Triggers
/// log which statement wrote each presence (the poll's read, or the
/// lease renewer's round) and every UPDATE statement on the claim
/// tables (a statement trigger fires even when no row matches). Once
/// polls wrote the presence twice (so the renewer's first round, at its
/// start, has landed), the next three writes come from polls and no
/// claim statement runs. The renewer's round is 2 s and a poll writes
/// when the presence is a second old, so the three span at least one
/// round, with a second of slack for a poll held up by a loaded machine.
/// Guards: the read before the claim's transaction (without it every
/// poll runs the claim's UPDATEs and no poll writes the presence) and
/// the renewer's skip (without it its rounds write).
#[actix_rt::test]
async fn par06_an_idle_runtime_polls_with_one_read_that_carries_its_presence() {
    let db = test_db().await;
    db.exec(&items_sql(10)).await;
    let engine = engine_for(&db, parted(10, Hooks::new(), 2, Points::Even)).await;
    engine.register().await.unwrap();
    db.exec(&format!(
        "{}; \
         CREATE TRIGGER log_claim AFTER UPDATE ON backfill \
             FOR EACH STATEMENT EXECUTE FUNCTION log_presence(); \
         CREATE TRIGGER log_claim AFTER UPDATE ON backfill_partition \
             FOR EACH STATEMENT EXECUTE FUNCTION log_presence()",
        support::PRESENCE_LOG
    ))
    .await;
    let config = RuntimeConfig {
        worker_id: "idle".into(),
        poll_interval: Duration::from_millis(50),
        renew_interval: Some(Duration::from_secs(2)),
        ..RuntimeConfig::default()
    };
    let runtime = RuntimeHandle::start(Arc::new(engine.clone()), config).unwrap();
    eventually(
        "two polls of the idle runtime record its presence",
        || async {
            db.scalar("SELECT count(*) AS v FROM presence_log WHERE by = 'poll'")
                .await
                > 1
        },
    )
    .await;
    db.exec("DELETE FROM presence_log").await;
    eventually("three presence writes of the idle runtime", || async {
        db.scalar("SELECT count(*) AS v FROM presence_log").await >= 3
    })
    .await;
    let text = db
        .text("SELECT string_agg(by, ',' ORDER BY at) AS v FROM presence_log WHERE by <> 'poll'")
        .await;
    assert_eq!(text, None, "only the polls' reads wrote, and no claim ran");
    runtime.shutdown().await;
}
