//! Claims: the claim race, takeover and the open batch a claim carries (CT-1, CLM-1).

use super::*;

/// CT-1: eight workers race for one row; exactly one claim wins and the
/// generation advances once. After expiry a second worker takes over at the
/// committed checkpoint and the first owner's next batch is rejected.
/// Guards: `FOR UPDATE SKIP LOCKED` + the unexpired-owner condition of
/// `backfill_claim` (two winners), the generation/owner fence of
/// `backfill_checkpoint_advance` (the stale batch would commit and count twice).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ct01_claim_race_has_one_owner_and_takeover_keeps_checkpoint() {
    let (db, engine, _hooks) = started(30, 10).await;
    let gen0 = engine.get(ID).await.unwrap().generation;

    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for i in 0..8 {
        let (engine, barrier) = (engine.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            engine.claim_next(&format!("w{i}"), &[]).await.unwrap()
        }));
    }
    let mut claims = Vec::new();
    for t in tasks {
        claims.extend(t.await.unwrap());
    }
    assert_eq!(claims.len(), 1, "exactly one worker owns the backfill");
    let mut first = claims.pop().unwrap();
    assert_eq!(first.generation, gen0 + 1);
    assert_eq!(first.takeover_from, None);

    assert_eq!(
        engine.run_batch(&mut first).await.unwrap(),
        BatchOutcome::Committed {
            keys: 10,
            reached_bound: false
        }
    );

    db.expire_lease(ID).await;
    let mut second = engine.claim_next("w-other", &[]).await.unwrap().unwrap();
    assert_eq!(second.generation, gen0 + 2);
    assert_eq!(second.takeover_from.as_deref(), Some(first.worker.as_str()));
    assert_eq!(second.checkpoint_json(), Some(serde_json::json!(10)));

    assert_eq!(
        engine.run_batch(&mut first).await.unwrap(),
        BatchOutcome::Stale
    );
    assert_eq!(count_n(&db, 1).await, 10, "the stale batch rolled back");

    while let BatchOutcome::Committed {
        reached_bound: false,
        ..
    } = engine.run_batch(&mut second).await.unwrap()
    {}
    drive(&engine, "w-other").await;
    assert_eq!(state(&engine).await, State::Completed);
    assert_eq!(
        count_n(&db, 1).await,
        30,
        "every item repaired exactly once"
    );
}

/// CLM-1: releasing a claim that carries an open batch rolls that
/// transaction back and releases on the same connection: another worker
/// claims at once, at the committed checkpoint, and no session stays
/// inside a transaction. Guard: the rollback in `Engine::release` (without
/// it the release runs inside the open transaction and never commits, so
/// the row stays owned and row-locked).
#[tokio::test]
async fn clm01_release_ends_the_open_batch_and_frees_the_claim() {
    let (db, engine, _hooks) = started(30, 10).await;
    let claim = claim_and_commit_first_batch(&engine).await;
    assert!(engine.release(&claim).await.unwrap());
    assert_eq!(open_transactions(&db).await, 0);
    let other = engine.claim_next("w2", &[]).await.unwrap().unwrap();
    assert_eq!(other.generation, claim.generation + 1);
    assert_eq!(other.checkpoint_json(), Some(serde_json::json!(10)));
}

/// CLM-1: a graceful shutdown after the server ended the claim's open
/// batch still gives the claim back (on a fresh connection), so another
/// worker takes over at once instead of after the lease TTL. Guard: the
/// fallback in `Engine::release` when the open batch's rollback fails.
#[tokio::test]
async fn clm01_release_after_the_server_ended_the_open_batch() {
    let (_db, engine, claim) = open_batch_ended_by_the_server().await;
    assert!(engine.release(&claim).await.unwrap());
    let other = engine.claim_next("w2", &[]).await.unwrap().unwrap();
    assert_eq!(other.checkpoint_json(), Some(serde_json::json!(10)));
}

/// CLM-1: releasing a claim of a repair that overlaps commits rolls back
/// both of its transactions: another worker claims at once, at the
/// committed checkpoint, and no session stays inside a transaction.
/// Guard: the spare's rollback in `Engine::release` (dropped instead, its
/// connection is discarded).
#[tokio::test]
async fn clm01_release_ends_both_overlapped_transactions() {
    let (db, engine, _hooks) =
        started_counter(30, 10, None, |c| c.one_statement().overlapping()).await;
    let claim = claim_and_commit_first_batch(&engine).await;
    assert_eq!(busy(&engine), 2);
    assert!(engine.release(&claim).await.unwrap());
    assert_eq!(open_transactions(&db).await, 0);
    assert_eq!(busy(&engine), 0);
    assert_eq!(discarded(&engine), 0, "both rolled back, neither discarded");
    let other = engine.claim_next("w2", &[]).await.unwrap().unwrap();
    assert_eq!(other.checkpoint_json(), Some(serde_json::json!(10)));
    finish(&db, &engine, other, 30).await;
}
