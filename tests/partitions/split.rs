//! Dividing the range at `start` (PAR-1).

use super::*;

/// PAR-1: every bad input is a typed error at `start` and nothing is
/// written: points out of order, duplicated, at or past the bound, and
/// more than the partitions allow. Guard: the checks of
/// `repair::plan_partitions`, and the start transaction rolling back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par01_bad_split_points_are_refused_at_start_and_nothing_is_written() {
    let db = test_db().await;
    db.exec(&items_sql(100)).await;
    type Expect = fn(&SplitError) -> bool;
    let cases: [(Vec<i64>, Expect); 5] = [
        (vec![50, 25], |e| {
            matches!(e, SplitError::NotIncreasing { index: 1 })
        }),
        (vec![25, 25], |e| {
            matches!(e, SplitError::NotIncreasing { index: 1 })
        }),
        (vec![25, 100], |e| {
            matches!(e, SplitError::OutsideBound { index: 1 })
        }),
        (vec![150], |e| {
            matches!(e, SplitError::OutsideBound { index: 0 })
        }),
        (vec![10, 20, 30, 40], |e| {
            matches!(e, SplitError::TooMany { points: 4, .. })
        }),
    ];
    for (points, expected) in cases {
        let engine = engine_for(
            &db,
            parted(10, Hooks::new(), 4, Points::Fixed(points.clone())),
        )
        .await;
        engine.register().await.unwrap();
        match engine.start(ID).await {
            Err(EngineError::Split { error, .. }) => {
                assert!(expected(&error), "{points:?}: {error:?}")
            }
            other => panic!("{points:?}: expected a split error, got {other:?}"),
        }
        let row = engine.get(ID).await.unwrap();
        assert_eq!(row.state, State::Pending, "{points:?}");
        assert!(row.bound.is_none(), "{points:?}");
        assert_eq!(partition_count(&db).await, 0, "{points:?}");
    }
}

/// PAR-1: a split point of another key type is refused by its type tag.
/// Guard: `check_key` in `plan_partitions`.
#[test]
fn par01_split_points_of_another_key_type_are_refused() {
    let check = |bytes: &[u8]| i64::from_bytes(bytes).map(|_| ());
    let bound = 100i64.to_bytes();
    let text = "m".to_string().to_bytes();
    assert!(matches!(
        plan_partitions(&[text], &bound, 4, &check),
        Err(SplitError::KeyType { index: 0, .. })
    ));
    let wide = (10i32).to_bytes();
    assert!(matches!(
        plan_partitions(&[5i64.to_bytes(), wide], &bound, 4, &check),
        Err(SplitError::KeyType { index: 1, .. })
    ));
}

/// PAR-1: 0 partitions, or more than the documented maximum, is a
/// registration error. Guard: the check in `Registry::register`.
#[test]
fn par01_zero_or_too_many_partitions_are_a_definition_error() {
    for partitions in [0, backfill::repair::MAX_PARTITIONS + 1] {
        let repair = parted(10, Hooks::new(), partitions, Points::Even);
        assert!(matches!(
            Registry::new().with(repair),
            Err(DefinitionError::InvalidPartitions { .. })
        ));
    }
    assert!(Registry::new()
        .with(parted(
            10,
            Hooks::new(),
            backfill::repair::MAX_PARTITIONS,
            Points::Even
        ))
        .is_ok());
}

/// A small deterministic generator (xorshift), so failures reproduce.
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Every key up to the bound lies in exactly one range, and the ranges
/// are contiguous from "nothing" to the bound.
fn assert_exact_cover<K: Key>(points: &[K], bound: &K, probes: &[K]) {
    let check = |bytes: &[u8]| K::from_bytes(bytes).map(|_| ());
    let encoded: Vec<Vec<u8>> = points.iter().map(Key::to_bytes).collect();
    let bound_bytes = bound.to_bytes();
    let ranges = plan_partitions(&encoded, &bound_bytes, 64, &check).unwrap();
    assert_eq!(ranges.len(), points.len() + 1);
    assert!(ranges[0].lower.is_none());
    assert_eq!(ranges.last().unwrap().upper, bound_bytes);
    for pair in ranges.windows(2) {
        assert_eq!(pair[1].lower.as_deref(), Some(pair[0].upper.as_slice()));
    }
    for probe in probes.iter().chain(points).chain(std::iter::once(bound)) {
        let key = probe.to_bytes();
        let within = ranges
            .iter()
            .filter(|r| r.lower.as_deref().is_none_or(|l| key.as_slice() > l) && key <= r.upper)
            .count();
        let expected = usize::from(probe <= bound);
        assert_eq!(within, expected, "{probe:?}");
    }
}

/// PAR-1: the exact-cover property over random bigint and compound
/// `(timestamp, bigint)` keys: contiguous, disjoint ranges whose union is
/// `(nothing, bound]`. Guard: the range construction of `plan_partitions`.
#[test]
fn par01_ranges_cover_the_range_exactly() {
    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
    for _ in 0..200 {
        let mut keys: Vec<i64> = (0..(rng.next() % 20 + 2))
            .map(|_| rng.next() as i64 / 1024)
            .collect();
        keys.sort();
        keys.dedup();
        let bound = *keys.last().unwrap();
        let points: Vec<i64> = keys[..keys.len() - 1].iter().copied().take(63).collect();
        let probes: Vec<i64> = (0..50).map(|_| rng.next() as i64 / 1024).collect();
        assert_exact_cover(&points, &bound, &probes);
    }
    let at = |s: u64, id: u64| -> (DateTime<Utc>, i64) {
        (
            Utc.timestamp_opt(1_700_000_000 + (s % 1000) as i64, 0)
                .unwrap(),
            (id % 100) as i64,
        )
    };
    for _ in 0..200 {
        let mut keys: Vec<(DateTime<Utc>, i64)> = (0..(rng.next() % 20 + 2))
            .map(|_| at(rng.next(), rng.next()))
            .collect();
        keys.sort();
        keys.dedup();
        let bound = *keys.last().unwrap();
        let points: Vec<_> = keys[..keys.len() - 1].to_vec();
        let probes: Vec<_> = (0..50).map(|_| at(rng.next(), rng.next())).collect();
        assert_exact_cover(&points, &bound, &probes);
    }
}

/// PAR-1: `start` writes the partitions in its own transaction, with the
/// ranges the split made; one partition (the default) writes none.
/// Guard: `split_in` in `Engine::start_in`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par01_start_writes_the_partitions_and_one_partition_writes_none() {
    let (db, engine, _hooks) = started(100, 10, 4).await;
    assert_eq!(state(&engine).await, State::Running);
    let uppers = db
        .text("SELECT string_agg(upper_json::text, ',' ORDER BY part) AS v FROM backfill_partition")
        .await;
    assert_eq!(uppers.as_deref(), Some("25,50,75,100"));
    let lowers = db
        .text(
            "SELECT string_agg(coalesce(lower_json::text, '-'), ',' ORDER BY part) AS v \
             FROM backfill_partition",
        )
        .await;
    assert_eq!(lowers.as_deref(), Some("-,25,50,75"));
    // Partitions are written only by the start that captured the bound.
    let mut conn = db.pool.get().await.unwrap();
    let late = diesel::sql_query(
        "INSERT INTO backfill_partition (backfill_id, part, lower, upper, upper_json) \
         SELECT id, 9, NULL, bound, bound_json FROM backfill",
    )
    .execute(&mut conn)
    .await;
    assert!(late.is_err());
    drop(conn);

    let single = test_db().await;
    single.exec(&items_sql(100)).await;
    let one = engine_for(
        &single,
        parted(10, Hooks::new(), 1, Points::Fixed(vec![50])),
    )
    .await;
    one.register().await.unwrap();
    one.start(ID).await.unwrap();
    assert_eq!(partition_count(&single).await, 0);
    drive(&one, "w").await;
    assert_eq!(state(&one).await, State::Completed);
    assert_eq!(count_n(&single, 1).await, 100);
}

/// PAR-1: a partition whose range holds no rows (one below every key, one
/// whose rows are gone) ends at its first batch, which commits no key, and
/// the backfill completes. Guard: the move to the partition's upper end
/// when nothing is left (`next_checkpoint`) under the partition fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn par01_a_partition_without_rows_ends_at_once() {
    let db = test_db().await;
    db.exec(&items_sql(100)).await;
    db.exec("DELETE FROM items WHERE id > 20 AND id <= 40")
        .await;
    let points = Points::Fixed(vec![-5, 20, 40]);
    let engine = engine_for(&db, parted(10, Hooks::new(), 4, points)).await;
    engine.register().await.unwrap();
    engine.start(ID).await.unwrap();
    assert_eq!(partition_count(&db).await, 4);
    for expected in [Some(0), Some(1), Some(2)] {
        let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
        assert_eq!(claim.partition, expected);
        if expected != Some(1) {
            let outcome = engine.run_batch(&mut claim).await.unwrap();
            assert_eq!(
                outcome,
                BatchOutcome::Committed {
                    keys: 0,
                    reached_bound: true
                }
            );
        } else {
            run_to_end(&engine, &mut claim).await;
        }
    }
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_partition WHERE checkpoint = upper")
            .await,
        3
    );
    drive(&engine, "w").await;
    assert_eq!(state(&engine).await, State::Completed);
    assert_eq!(count_n(&db, 1).await, 80);
}

/// PAR-1 through the admin API: a start whose split points are refused
/// answers 422 `invalid_split` naming the problem, writes nothing (the
/// row stays `pending`, no partition rows) and is audited as a rejection
/// (AUD-1). Guard: `AdminError::InvalidSplit` for `EngineError::Split`
/// (without it the answer is a 500 `internal`).
#[actix_rt::test]
async fn par01_refused_split_is_a_422_through_the_admin_api() {
    use support::admin::{admin, call, serve, OPERATOR};
    let db = test_db().await;
    db.exec(&items_sql(100)).await;
    let engine = engine_for(
        &db,
        parted(10, Hooks::new(), 4, Points::Fixed(vec![50, 25])),
    )
    .await;
    engine.register().await.unwrap();
    let server = serve(admin(engine.clone()));
    let path = format!("/admin/backfills/{ID}/start");
    let resp = call(&server.url, "POST", &path, Some(OPERATOR), Some("split-1")).await;
    assert_eq!(resp.status, 422, "{}", resp.text);
    assert_eq!(resp.body["error"], "invalid_split", "{}", resp.text);
    let message = resp.body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("split point 1 is not strictly greater"),
        "{message}"
    );
    let row = engine.get(ID).await.unwrap();
    assert_eq!(row.state, State::Pending);
    assert!(row.bound.is_none());
    assert_eq!(partition_count(&db).await, 0);
    let audited = db
        .scalar(
            "SELECT count(*) AS v FROM backfill_audit \
             WHERE action = 'start' AND outcome = 'invalid_split'",
        )
        .await;
    assert_eq!(audited, 1);
    server.stop().await;
}
