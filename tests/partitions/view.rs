//! What operators see and set of a partitioned backfill (PAR-5, THR-4),
//! and the fence on the throttle condition runners record (THR-2).

use super::*;

/// PAR-5: the admin detail and list of a partitioned backfill show the
/// progress aggregated over its partitions and each partition's range,
/// checkpoint, owner and progress; with the source size unknown, the
/// total and the fraction stay unknown (ADM-3), never 0. Guard:
/// `BackfillView::with_partitions` in the admin reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par05_admin_view_aggregates_and_shows_each_partition() {
    use support::admin::{admin, OPERATOR};
    let (_db, engine, _hooks) = started(400, 10, 4).await;
    let mut claims = claim_all(&engine, 4).await;
    for _ in 0..2 {
        engine.run_batch(&mut claims[0]).await.unwrap();
    }
    let admin = admin(engine.clone());
    let meta = backfill::admin::RequestMeta {
        bearer: Some(OPERATOR),
        ..Default::default()
    };
    let view = admin.detail(&meta, ID).await.unwrap();
    assert_eq!(view.progress.rows_done, 60);
    assert_eq!(view.progress.batches_done, 6);
    assert_eq!(view.progress.total_rows, Some(400));
    assert_eq!(view.progress.fraction, Some(0.15));
    let parts: Vec<_> = view
        .partitions
        .iter()
        .map(|p| {
            (
                p.part,
                p.lower.clone(),
                p.upper.clone(),
                p.checkpoint.clone(),
                p.rows_done,
                p.owner.disposition.clone(),
                p.owner.worker.clone(),
            )
        })
        .collect();
    let held = || ("held".to_string(), Some("w".to_string()));
    assert_eq!(
        parts,
        vec![
            (
                0,
                None,
                Some(100.into()),
                Some(30.into()),
                30,
                held().0,
                held().1
            ),
            (
                1,
                Some(100.into()),
                Some(200.into()),
                Some(110.into()),
                10,
                held().0,
                held().1
            ),
            (
                2,
                Some(200.into()),
                Some(300.into()),
                Some(210.into()),
                10,
                held().0,
                held().1
            ),
            (
                3,
                Some(300.into()),
                Some(400.into()),
                Some(310.into()),
                10,
                held().0,
                held().1
            ),
        ]
    );
    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(json["partitions"][1]["lower"], 100);
    assert!(json["partitions"][0]["lower"].is_null());
    let page = admin.list(&meta, None, None).await.unwrap();
    assert_eq!(page.items[0].progress.rows_done, 60);
    assert_eq!(page.items[0].partitions.len(), 4);
    // What /metrics exports: partitions by status.
    let mut conn = engine.pool().get().await.unwrap();
    let by_status = backfill::__private::store::partition_count_by_status(&mut conn)
        .await
        .unwrap();
    assert_eq!(by_status, [("ended", 0), ("claimed", 4), ("waiting", 0)]);
    drop(conn);

    let unknown = test_db().await;
    unknown.exec(&items_sql(400)).await;
    let mut repair = parted(10, Hooks::new(), 4, Points::Even);
    repair.count_rows = false;
    let engine = engine_for(&unknown, repair).await;
    engine.register().await.unwrap();
    engine.start(ID).await.unwrap();
    let _claims = claim_all(&engine, 4).await;
    let view = support::admin::admin(engine.clone())
        .detail(&meta, ID)
        .await
        .unwrap();
    assert_eq!(view.progress.rows_done, 40);
    assert_eq!(view.progress.total_rows, None);
    assert_eq!(view.progress.fraction, None);
}

/// A backfill without partitions shows none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par05_a_backfill_without_partitions_shows_none() {
    use support::admin::{admin, OPERATOR};
    let db = test_db().await;
    db.exec(&items_sql(40)).await;
    let engine = engine_for(&db, parted(10, Hooks::new(), 1, Points::Even)).await;
    engine.register().await.unwrap();
    engine.start(ID).await.unwrap();
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.run_batch(&mut claim).await.unwrap();
    let meta = backfill::admin::RequestMeta {
        bearer: Some(OPERATOR),
        ..Default::default()
    };
    let view = admin(engine.clone()).detail(&meta, ID).await.unwrap();
    assert!(view.partitions.is_empty());
    assert_eq!(view.progress.rows_done, 10);
}

// ---------------------------------------------------------------- THR-4

/// THR-4: the live `concurrency` setting caps how many partitions hold
/// claims at once, across engines: at 2 a third claim is refused; raised
/// to 3 it is granted; lowered to 1 the claims of the higher partitions
/// are refused their renewal (their runners stop), and nothing else is
/// granted. Guard: the live-claim count in `partition_claim` and
/// `partition_renew`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thr04_concurrency_setting_caps_partitions_at_once() {
    let (db, a, _hooks) = started(400, 10, 4).await;
    let b = engine_for(&db, parted(10, Hooks::new(), 4, Points::Even)).await;
    a.update_settings(ID, &serde_json::json!({"concurrency": 2}))
        .await
        .unwrap();
    let first = a.claim_next("a", &[]).await.unwrap().unwrap();
    let second = b.claim_next("b", &[]).await.unwrap().unwrap();
    assert!(a.claim_next("a", &[]).await.unwrap().is_none());
    assert!(b.claim_next("b", &[]).await.unwrap().is_none());
    a.update_settings(ID, &serde_json::json!({"concurrency": 3}))
        .await
        .unwrap();
    let third = b.claim_next("b", &[]).await.unwrap().unwrap();
    assert!(a.claim_next("a", &[]).await.unwrap().is_none());
    let parts = [first.partition, second.partition, third.partition];
    assert_eq!(parts, [Some(0), Some(1), Some(2)]);

    a.update_settings(ID, &serde_json::json!({"concurrency": 1}))
        .await
        .unwrap();
    let renewed_a = a
        .renew_partitions("a", &[(ID.to_string(), 0, first.generation)])
        .await
        .unwrap();
    assert_eq!(renewed_a.len(), 1);
    let held_b = [
        (ID.to_string(), 1, second.generation),
        (ID.to_string(), 2, third.generation),
    ];
    assert!(b.renew_partitions("b", &held_b).await.unwrap().is_empty());
    assert!(b.claim_next("b", &[]).await.unwrap().is_none());
}

/// An application check that answers "unhealthy" while `down` is set.
struct Switch {
    down: Arc<std::sync::atomic::AtomicBool>,
}

#[backfill::async_trait]
impl backfill::throttle::health::HealthCheck for Switch {
    async fn check(&self) -> Result<(), String> {
        if std::sync::atomic::AtomicBool::load(&self.down, std::sync::atomic::Ordering::SeqCst) {
            Err("maintenance window".into())
        } else {
            Ok(())
        }
    }
}

/// PAR-5, THR-2: a throttled partition's runner is visible: the partition
/// shows its condition, and the backfill shows it too, naming the
/// partition; once the signal recovers, both are gone. Guard: the
/// partition claim's condition written to its own row
/// (`store::partition_throttle_set`); the backfill row has no owner
/// while partitions run, so a write fenced by it shows nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par05_a_throttled_partition_shows_its_condition_until_it_recovers() {
    use backfill::engine::Gate;
    use backfill::throttle::health::{HealthConfig, Monitor};
    use support::admin::{admin, OPERATOR};
    let (db, engine, _hooks) = started(400, 10, 4).await;
    let mut claims = claim_all(&engine, 4).await;
    let down = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let monitor = Arc::new(Monitor::new(
        db.pool.clone(),
        HealthConfig::default(),
        vec!["items".into()],
        Some(Arc::new(Switch { down: down.clone() })),
    ));
    monitor.run_once().await;
    assert!(engine.attach_health(monitor.clone()));
    let gate = engine.gate(&mut claims[1]).await.unwrap();
    assert!(matches!(gate, Gate::Throttled { .. }), "{gate:?}");
    let admin = admin(engine.clone());
    let meta = backfill::admin::RequestMeta {
        bearer: Some(OPERATOR),
        ..Default::default()
    };
    let view = admin.detail(&meta, ID).await.unwrap();
    let throttled: Vec<i32> = view
        .partitions
        .iter()
        .filter(|p| p.throttle.is_some())
        .map(|p| p.part)
        .collect();
    assert_eq!(throttled, vec![1]);
    let own = view.partitions[1].throttle.as_ref().unwrap();
    assert_eq!(own.signal, "application");
    assert!(own.text.contains("maintenance window"), "{}", own.text);
    let whole = view.throttle.as_ref().expect("the backfill is throttled");
    assert!(whole.text.starts_with("partition 1: "), "{}", whole.text);
    down.store(false, std::sync::atomic::Ordering::SeqCst);
    monitor.run_once().await;
    let gate = engine.gate(&mut claims[1]).await.unwrap();
    assert_eq!(gate, Gate::Go);
    let view = admin.detail(&meta, ID).await.unwrap();
    assert!(view.throttle.is_none(), "{:?}", view.throttle);
    assert!(view.partitions.iter().all(|p| p.throttle.is_none()));
}

/// THR-2: the throttle condition a runner records is fenced by its claim,
/// on the backfill's own row and on a partition's, so a runner that lost
/// its claim cannot label the next owner's run: a write by another worker
/// or generation reports that it matched nothing and leaves the row
/// unlabelled; the claim's own write reports success and is stamped with
/// the claim's generation. Guard: the owner and generation fence of
/// `backfill_throttle_set` and `partition_throttle_set`, and the outcome
/// they report.
#[tokio::test]
async fn thr02_only_the_claim_in_force_records_a_throttle() {
    use backfill::__private::store;
    let throttle = serde_json::json!({
        "signal": "application", "value": 1.0, "threshold": 0.5, "text": "busy",
    });
    let labelled =
        |table: &str| format!("SELECT count(*) AS v FROM {table} WHERE throttle IS NOT NULL");
    let stamped = |table: &str| {
        format!("SELECT coalesce(max((throttle->>'generation')::bigint), -1) AS v FROM {table}")
    };

    // Without partitions, the claim is on the backfill's row.
    let (db, engine, _hooks) = started(20, 10, 1).await;
    let claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    assert_eq!(claim.partition, None);
    let mut conn = db.connect().await;
    let generation = claim.generation;
    for (worker, generation) in [("other", generation), ("w", generation + 1)] {
        let set = store::backfill_throttle_set(&mut conn, ID, worker, generation, Some(&throttle));
        assert!(!set.await.unwrap(), "{worker} at generation {generation}");
    }
    assert_eq!(db.scalar(&labelled("backfill")).await, 0);
    let set = store::backfill_throttle_set(&mut conn, ID, "w", generation, Some(&throttle));
    assert!(set.await.unwrap());
    assert_eq!(db.scalar(&stamped("backfill")).await, generation);

    // With partitions, the claim is on a partition's row.
    let (db, engine, _hooks) = started(40, 10, 2).await;
    let claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let part = claim.partition.expect("a partition claim");
    let mut conn = db.connect().await;
    let generation = claim.generation;
    for (worker, generation) in [("other", generation), ("w", generation + 1)] {
        let set =
            store::partition_throttle_set(&mut conn, ID, part, worker, generation, Some(&throttle));
        assert!(!set.await.unwrap(), "{worker} at generation {generation}");
    }
    assert_eq!(db.scalar(&labelled("backfill_partition")).await, 0);
    let set = store::partition_throttle_set(&mut conn, ID, part, "w", generation, Some(&throttle));
    assert!(set.await.unwrap());
    assert_eq!(db.scalar(&stamped("backfill_partition")).await, generation);
}
