//! Validation gates completion, one at a time (CT-7, VAL-6), and an
//! explicit one records only its outcome (VAL-7).

use super::*;

/// CT-7 / VAL-1..3: reaching the bound enters `validating`, never
/// `completed`; a validation failure is durable and repeatable; operator
/// retry revalidates; only success reaches `completed`, which is immutable.
/// Guards: `validating` (not `completed`) in `backfill_checkpoint_advance`; the
/// `backfill_guard` trigger for immutability.
#[tokio::test]
async fn ct07_only_successful_validation_completes() {
    let (db, engine, _hooks) = started(10, 10).await;
    drive_until_validating(&engine).await;
    assert!(engine.get(ID).await.unwrap().completed_at.is_none());

    db.exec("UPDATE items SET n = 2 WHERE id = 3").await;
    for _ in 0..2 {
        let claim = engine.claim_next("v", &[]).await.unwrap().unwrap();
        let run = engine.validate_claimed(&claim).await.unwrap();
        assert!(
            matches!(run, ValidationRun::Rejected { state: State::Failed, ref detail } if detail.contains("1 items")),
            "{run:?}"
        );
        let row = engine.get(ID).await.unwrap();
        assert_eq!(row.state, State::Failed);
        assert_eq!(row.validation_outcome.as_deref(), Some("failure"));
        assert!(engine.claim_next("v", &[]).await.unwrap().is_none());
        assert!(matches!(
            engine.retry(ID).await.unwrap(),
            ActionOutcome::Applied { .. }
        ));
        assert_eq!(state(&engine).await, State::Validating);
    }
    db.exec("UPDATE items SET n = 1 WHERE id = 3").await;
    drive(&engine, "v").await;
    let row = engine.get(ID).await.unwrap();
    assert_eq!(row.state, State::Completed);
    assert_eq!(row.validation_outcome.as_deref(), Some("success"));

    for action in [Action::Start, Action::Pause, Action::Retry, Action::Resume] {
        assert!(matches!(
            engine.act(ID, action).await.unwrap(),
            ActionOutcome::Conflict(_)
        ));
    }
    let mut conn = db.connect().await;
    let direct = diesel::sql_query(format!(
        "UPDATE backfill SET state = 'running' WHERE id = '{ID}'"
    ))
    .execute(&mut conn)
    .await;
    assert!(
        direct.is_err(),
        "the database itself keeps completed immutable"
    );
}

/// CT-7 / EX-1: an empty source set goes straight to `validating` after
/// `start`, and validation completes it.
#[tokio::test]
async fn ct07_empty_source_set_goes_straight_to_validating() {
    let (_db, engine, _hooks) = started(0, 10).await;
    let row = engine.get(ID).await.unwrap();
    assert_eq!(row.state, State::Validating);
    assert!(row.empty_source);
    drive(&engine, "w").await;
    assert_eq!(state(&engine).await, State::Completed);
}

/// VAL-6: lifecycle validation never runs while another validation of the
/// same ID (an explicit one, from any process) holds the per-ID lock; it
/// reports busy and changes nothing, and runs once the lock is free.
/// Guard: `validation_try_lock` in `validate_claimed`.
#[tokio::test]
async fn val06_lifecycle_validation_waits_for_a_running_explicit_validation() {
    let (db, engine, _hooks) = started(10, 10).await;
    drive_until_validating(&engine).await;
    let mut holder = db.connect().await;
    diesel::sql_query("BEGIN")
        .execute(&mut holder)
        .await
        .unwrap();
    diesel::sql_query(format!(
        "SELECT pg_advisory_xact_lock(hashtextextended('backfill-validate:' || '{ID}', 0))"
    ))
    .execute(&mut holder)
    .await
    .unwrap();
    let claim = engine.claim_next("v", &[]).await.unwrap().unwrap();
    assert_eq!(
        engine.validate_claimed(&claim).await.unwrap(),
        ValidationRun::Busy
    );
    assert_eq!(state(&engine).await, State::Validating);
    engine.release(&claim).await.unwrap();
    diesel::sql_query("COMMIT")
        .execute(&mut holder)
        .await
        .unwrap();
    drive(&engine, "v").await;
    assert_eq!(state(&engine).await, State::Completed);
}

/// EX-5, VAL-2: validation is bounded like a batch: a validation whose
/// read waits on a lock another session holds ends at the engine's lock
/// timeout, classified retryable, instead of waiting for the holder, and
/// the row stays `validating`. Guard: the timeouts `validate_claimed`
/// sets on its transaction (`batch_set_timeouts`).
#[tokio::test]
async fn ex05_validation_waiting_on_a_lock_ends_at_the_lock_timeout() {
    let (db, engine, _hooks) = started(4, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    assert!(matches!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            reached_bound: true,
            ..
        }
    ));
    let mut holder = lock_holder(&db, "LOCK TABLE items IN ACCESS EXCLUSIVE MODE").await;
    let claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    assert_eq!(claim.phase, Phase::Validate);
    let run = tokio::time::timeout(Duration::from_secs(30), engine.validate_claimed(&claim))
        .await
        .expect("validation bounded by the lock timeout");
    let error = run.unwrap_err();
    assert!(
        matches!(error.classification(), Some(RepairError::Retryable(_))),
        "{error:?}"
    );
    diesel::sql_query("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    assert_eq!(engine.get(ID).await.unwrap().state, State::Validating);
}

/// VAL-7: an explicit validation's outcome is written to its backfill's
/// row only, and the store says whether it was written: `true` for the
/// backfill, `false` for an ID no row has (nothing written anywhere).
/// Guard: the outcome `validation_record` reports.
#[tokio::test]
async fn val07_a_validation_record_reports_whether_it_was_written() {
    let (db, _engine, _hooks) = started(10, 10).await;
    let mut conn = db.connect().await;
    let recorded =
        backfill::__private::store::validation_record(&mut conn, "absent.v1", "success", None);
    assert!(!recorded.await.unwrap(), "no row has that ID");
    let written = "SELECT count(*) AS v FROM backfill WHERE validation_outcome IS NOT NULL";
    assert_eq!(db.scalar(written).await, 0);
    let recorded =
        backfill::__private::store::validation_record(&mut conn, ID, "failure", Some("3 items"));
    assert!(recorded.await.unwrap());
    let row = backfill::__private::store::backfill_get(&mut conn, ID)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.validation_outcome.as_deref(), Some("failure"));
    assert_eq!(row.validation_detail.as_deref(), Some("3 items"));
}
