//! Bounded batches, range checks, timeouts and rollback (CT-2, CT-3, EX-5).

use super::*;

/// CT-2: a source set larger than one batch advances by at most the batch
/// limit per transaction, and the checkpoint follows the last key.
/// Guard: the limit passed to the selection and checked by the engine.
#[tokio::test]
async fn ct02_batches_advance_at_most_the_limit_per_transaction() {
    let (db, engine, _hooks) = started(25, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    for (expected_done, expected_cp) in [(10, 10), (20, 20)] {
        let out = engine.run_batch(&mut claim).await.unwrap();
        assert_eq!(
            out,
            BatchOutcome::Committed {
                keys: 10,
                reached_bound: false
            }
        );
        assert_eq!(count_n(&db, 1).await, expected_done);
        let row = engine.get(ID).await.unwrap();
        assert_eq!(row.checkpoint_json, Some(serde_json::json!(expected_cp)));
        assert_eq!(row.rows_done, expected_done);
    }
    assert_eq!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            keys: 5,
            reached_bound: true
        }
    );
    assert_eq!(state(&engine).await, State::Validating);
}

/// CT-2 / EX-4: a selection returning more keys than the limit is a typed
/// error and changes nothing (no mutation, no checkpoint, no state).
/// Guard: the engine's count check in `check_selection`.
#[tokio::test]
async fn ct02_over_limit_selection_is_rejected_and_changes_nothing() {
    let (db, engine, hooks) = started(25, 10).await;
    hooks.select_mode.store(SELECT_OVER_LIMIT, Ordering::SeqCst);
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let before = engine.get(ID).await.unwrap();
    let err = engine.run_batch(&mut claim).await.unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Selection {
                error: SelectionError::OverLimit { got: 11, limit: 10 },
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(count_n(&db, 0).await, 25);
    let after = engine.get(ID).await.unwrap();
    assert_eq!(after.checkpoint, None);
    assert_eq!(after.state, State::Running);
    assert_eq!(after.generation, before.generation);
}

/// CT-2 / EX-3 / EX-7: rows inserted above the bound after `start` are never
/// touched; a selection that crosses the bound is rejected and rolled back.
/// Guards: the engine's range check and `$5 <= bound` in the fence.
#[tokio::test]
async fn ct02_rows_above_the_bound_are_never_touched() {
    let (db, engine, hooks) = started(20, 15).await;
    db.exec("INSERT INTO items (id) SELECT g FROM generate_series(21, 30) g")
        .await;
    hooks
        .select_mode
        .store(SELECT_IGNORE_BOUND, Ordering::SeqCst);
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.run_batch(&mut claim).await.unwrap();
    let err = engine.run_batch(&mut claim).await.unwrap_err();
    assert!(
        matches!(
            err,
            EngineError::Selection {
                error: SelectionError::AfterBound,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE id > 15 AND n > 0")
            .await,
        0
    );
    hooks.select_mode.store(SELECT_NORMAL, Ordering::SeqCst);
    assert!(engine.release(&claim).await.unwrap());
    drive(&engine, "w").await;
    assert_eq!(state(&engine).await, State::Completed);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE id > 20 AND n > 0")
            .await,
        0
    );
    assert_eq!(engine.get(ID).await.unwrap().bound_json, Some(20.into()));
}

/// CT-2 / EX-3: a selection that repeats the checkpoint key is rejected
/// (it would apply the mutation twice). Guard: the strictly-after check.
#[tokio::test]
async fn ct02_selection_repeating_the_checkpoint_is_rejected() {
    let (db, engine, hooks) = started(20, 5).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.run_batch(&mut claim).await.unwrap();
    hooks
        .select_mode
        .store(SELECT_REPEAT_CHECKPOINT, Ordering::SeqCst);
    let err = engine.run_batch(&mut claim).await.unwrap_err();
    assert!(matches!(
        err,
        EngineError::Selection {
            error: SelectionError::NotAfterCheckpoint,
            ..
        }
    ));
    assert_eq!(count_n(&db, 2).await, 0);
    assert_eq!(count_n(&db, 1).await, 5);
}

/// CT-2 / EX-5: a batch blocked on a row lock hits the per-batch
/// `lock_timeout`, is classified retryable and rolls back mutation and
/// checkpoint. Guard: `batch_set_timeouts` in the batch transaction (without
/// it the batch waits for the lock holder forever).
#[tokio::test]
async fn ct02_lock_timeout_rolls_back_mutation_and_checkpoint() {
    let (db, engine, _hooks) = started(20, 10).await;
    let mut blocker = lock_holder(&db, "SELECT id FROM items WHERE id = 5 FOR UPDATE").await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let err = tokio::time::timeout(Duration::from_secs(20), engine.run_batch(&mut claim))
        .await
        .expect("the batch must be bounded by lock_timeout")
        .unwrap_err();
    assert!(
        matches!(err.classification(), Some(RepairError::Retryable(ref m)) if m.contains("lock timeout")),
        "{err:?}"
    );
    assert_eq!(count_n(&db, 0).await, 20);
    assert_eq!(engine.get(ID).await.unwrap().checkpoint, None);
    diesel::sql_query("ROLLBACK")
        .execute(&mut blocker)
        .await
        .unwrap();
    assert!(matches!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed { keys: 10, .. }
    ));
}

/// CT-3: the repair fails after its mutation ran; mutation and checkpoint
/// both roll back. Guard: the single transaction around mutation and
/// checkpoint (a mutation committed on its own would leave n = 1).
#[tokio::test]
async fn ct03_error_after_mutation_rolls_back_mutation_and_checkpoint() {
    let (db, engine, hooks) = started(20, 10).await;
    *hooks.fail_after_mutate.lock() = Some(RepairError::Fatal("boom".into()));
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let err = engine.run_batch(&mut claim).await.unwrap_err();
    assert!(matches!(err, EngineError::Repair { .. }));
    assert_eq!(count_n(&db, 0).await, 20);
    assert_eq!(engine.get(ID).await.unwrap().checkpoint, None);
}

/// CT-3: the checkpoint write itself fails (the backfill row is locked by a
/// second session, so the fenced UPDATE hits `lock_timeout`) after the
/// mutation ran: the mutation rolls back with it. Guard: mutation and
/// checkpoint in ONE transaction (written separately, n would be 1).
#[tokio::test]
async fn ct03_checkpoint_failure_rolls_back_the_mutation() {
    let (db, engine, _hooks) = started(20, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    let sql = format!("SELECT id FROM backfill WHERE id = '{ID}' FOR UPDATE");
    let mut blocker = lock_holder(&db, &sql).await;
    // Bounded: if the checkpoint were written outside the batch transaction
    // (without its lock_timeout) this would wait on the blocker forever.
    let result = tokio::time::timeout(Duration::from_secs(10), engine.run_batch(&mut claim)).await;
    diesel::sql_query("ROLLBACK")
        .execute(&mut blocker)
        .await
        .unwrap();
    assert_eq!(
        count_n(&db, 1).await,
        0,
        "mutation rolled back with the checkpoint"
    );
    let err = result.expect("batch bounded by lock_timeout").unwrap_err();
    assert!(matches!(err, EngineError::Store(_)), "{err:?}");
    assert!(matches!(
        err.classification(),
        Some(RepairError::Retryable(_))
    ));
    assert_eq!(engine.get(ID).await.unwrap().checkpoint, None);
}

/// EX-5, CLM-2: a committed batch leaves the next batch's transaction open
/// on its claim (BEGIN and the timeouts, nothing else). That transaction
/// holds no snapshot, no transaction ID and no lock but its own virtual
/// transaction ID, so neither DDL on the target table nor a pause waits for
/// it; the claim's next batch runs in it and, after the pause, is rejected
/// by the fence and rolled back. This holds for a two-statement repair
/// (the counter here); a one-statement repair's next statement runs in the
/// open batch by design (`ex06_*`). Guards: the reopen text of
/// `checkpoint_advance_commit_reopen` taking nothing (a statement there
/// that reads the table keeps its lock until the next batch and fails the
/// lock assertion and the ALTER), and the fence in the same message as
/// COMMIT (the paused batch must not commit).
#[tokio::test]
async fn ex05_open_batch_holds_no_snapshot_lock_or_xid() {
    let (db, engine, _hooks) = started(30, 10).await;
    let mut claim = claim_and_commit_first_batch(&engine).await;
    assert_eq!(open_transactions(&db).await, 1, "the next batch is open");
    assert_eq!(
        db.scalar(
            "SELECT count(*) AS v FROM pg_stat_activity \
             WHERE datname = current_database() AND state = 'idle in transaction' \
               AND backend_xmin IS NULL AND backend_xid IS NULL",
        )
        .await,
        1,
        "the open batch holds no snapshot and no transaction ID"
    );
    assert_eq!(
        db.scalar(
            "SELECT count(*) AS v FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE a.datname = current_database() AND a.state = 'idle in transaction' \
               AND l.locktype <> 'virtualxid'",
        )
        .await,
        0,
        "the open batch holds no lock"
    );
    db.exec(
        "BEGIN; SET LOCAL lock_timeout = '2s'; \
         ALTER TABLE items ADD COLUMN extra int; COMMIT",
    )
    .await;
    pause_then_next_batch_is_stale(&engine, &mut claim).await;
    assert_eq!(count_n(&db, 1).await, 10, "the stale batch rolled back");
    assert_eq!(open_transactions(&db).await, 0);
    resume_and_complete(&db, &engine, 30).await;
}

/// EX-5: a claim dropped while it carries an open batch (a runner that
/// stops without releasing) takes its connection along: the pool discards
/// a connection that is inside a transaction, PostgreSQL ends the session,
/// and nothing stays open. Guard: the open batch living in the claim and
/// the pool's broken-connection check it relies on.
#[tokio::test]
async fn ex05_dropped_claim_leaves_no_open_transaction() {
    let (db, engine, _hooks) = started(30, 10).await;
    let claim = claim_and_commit_first_batch(&engine).await;
    assert_eq!(open_transactions(&db).await, 1);
    drop(claim);
    support::eventually("no session inside a transaction", || async {
        open_transactions(&db).await == 0
    })
    .await;
    db.expire_lease(ID).await;
    drive(&engine, "w2").await;
    assert_eq!(state(&engine).await, State::Completed);
    assert_eq!(count_n(&db, 1).await, 30);
}

/// EX-5: the open batch's idle time is bounded by the statement timeout: a
/// claim that sits on it longer (a stalled runner) loses the session to
/// PostgreSQL, and its next batch fails as a transient error with nothing
/// committed, which the runtime records as retryable (RT-1, RT-2). Guards:
/// the `idle_in_transaction_session_timeout` of the batch transaction
/// (without it the session stays open and the wait below times out), and
/// `store::classify` treating a session the server ended as transient
/// (it was fatal before this test: the backfill would have failed).
#[tokio::test]
async fn ex05_idle_open_batch_is_ended_by_the_statement_timeout() {
    let (db, engine, mut claim) = open_batch_ended_by_the_server().await;
    let error = engine.run_batch(&mut claim).await.unwrap_err();
    let class = error.classification();
    assert!(
        matches!(class, Some(RepairError::Retryable(_))),
        "a lost session is transient: {error}"
    );
    assert_eq!(count_n(&db, 1).await, 10, "nothing more committed");
    // What the runtime does with it: record, back off, go on.
    assert!(matches!(
        engine
            .record_failure(&claim, &class.unwrap())
            .await
            .unwrap(),
        FailureOutcome::Recorded {
            state: State::Running,
            ..
        }
    ));
    support::eventually("the backfill completes after the backoff", || async {
        drive(&engine, "w").await;
        state(&engine).await == State::Completed
    })
    .await;
    assert_eq!(count_n(&db, 1).await, 30);
}

/// EX-3: a one-statement batch whose summary counts keys but names no
/// first or last key is rejected and rolled back, not read as "nothing
/// left": the checkpoint stays, nothing commits, and the backfill is not
/// moved to the bound. Guard: `Mutated::from_summary` (with every shape
/// without both keys read as `Nothing`, the checkpoint jumps to the bound
/// with 10 items mutated and 40 never repaired).
#[tokio::test]
async fn ct02_one_statement_summary_without_keys_is_rejected() {
    let (db, engine, hooks) = started_one_statement(50, 10).await;
    hooks
        .select_mode
        .store(SELECT_SUMMARY_WITHOUT_KEYS, Ordering::SeqCst);
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    rejects_selection(&engine, &mut claim, SelectionError::Inconsistent).await;
    assert_eq!(count_n(&db, 1).await, 0, "the mutation rolled back");
    let row = engine.get(ID).await.unwrap();
    assert_eq!(row.checkpoint_json, None);
    assert_eq!(row.state, State::Running);
}

/// EX-4: a repair whose batch limit turns 0 after registration (the limit
/// is asked for every batch) gets a selection error on both the
/// two-statement and the one-statement form; nothing commits and the
/// checkpoint stays. Guard: `Erased::limit` (without it the empty
/// selection moves the checkpoint to the bound: `Committed { keys: 0,
/// reached_bound: true }` with nothing repaired).
#[tokio::test]
async fn ct02_batch_limit_of_zero_at_run_time_is_rejected() {
    for one_statement in [false, true] {
        let (db, engine, hooks) = started_counter(30, 10, None, |c| {
            if one_statement {
                c.one_statement()
            } else {
                c
            }
        })
        .await;
        hooks.zero_limit.store(true, Ordering::SeqCst);
        let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
        rejects_selection(&engine, &mut claim, SelectionError::ZeroLimit).await;
        let row = engine.get(ID).await.unwrap();
        assert_eq!(row.checkpoint_json, None);
        assert_eq!(row.state, State::Running);
        assert_eq!(count_n(&db, 1).await, 0);
    }
}

/// EX-3: a batch whose new checkpoint does not encode strictly after the
/// old one (a key after it by the key type's order, equal once encoded)
/// fails closed with a selection error, which the runtime records as
/// fatal, instead of meeting the fence as a stale claim batch after batch,
/// never recorded. Guard: the encoded-checkpoint check in `run_batch`
/// (without it the second batch comes back `Stale`).
#[tokio::test]
async fn ct02_checkpoint_that_does_not_advance_once_encoded_fails_closed() {
    let db = test_db().await;
    let engine = Engine::new(
        db.pool.clone(),
        Registry::new().with(NanosKeyed).expect("valid definition"),
        config(),
    )
    .expect("engine");
    engine.register().await.unwrap();
    engine.start("items.nanos").await.unwrap();
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    commits(&engine, &mut claim, 1).await;
    rejects_selection(&engine, &mut claim, SelectionError::NotAfterCheckpoint).await;
}

/// EX-4: a one-statement batch that reports more keys than the limit is
/// rejected before its commit and rolled back, both as a claim's first
/// batch and when it was sent ahead behind a commit. Guard:
/// `check_mutated` (without it both would commit 11 items).
#[tokio::test]
async fn ct02_one_statement_over_limit_is_rejected_and_rolled_back() {
    let (db, engine, hooks) = started_one_statement(50, 10).await;
    let over_limit = |err: EngineError| {
        assert!(
            matches!(
                err,
                EngineError::Selection {
                    error: SelectionError::OverLimit { got: 11, limit: 10 },
                    ..
                }
            ),
            "{err:?}"
        )
    };
    hooks.select_mode.store(SELECT_OVER_LIMIT, Ordering::SeqCst);
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    over_limit(engine.run_batch(&mut claim).await.unwrap_err());
    assert_eq!(count_n(&db, 1).await, 0);

    // Batch 1 commits and sends batch 2 ahead, both within the limit; then
    // batch 2 commits and sends batch 3 ahead over it.
    hooks.select_mode.store(SELECT_NORMAL, Ordering::SeqCst);
    engine.run_batch(&mut claim).await.unwrap();
    hooks.select_mode.store(SELECT_OVER_LIMIT, Ordering::SeqCst);
    engine.run_batch(&mut claim).await.unwrap();
    over_limit(engine.run_batch(&mut claim).await.unwrap_err());
    assert_eq!(count_n(&db, 1).await, 20);
    assert_eq!(
        engine.get(ID).await.unwrap().checkpoint_json,
        Some(serde_json::json!(20))
    );
    assert_eq!(open_transactions(&db).await, 0);
}

/// CT-2, RT-1: the batch sent ahead hits `lock_timeout` on a row another
/// session holds, after the previous batch committed: that step reports
/// its commit, the next step returns the retryable error, nothing of the
/// batch sent ahead commits, and after the backoff the run completes with
/// every item repaired once. Guard: the error kept with the open batch
/// (dropped, the next step runs its statement in the aborted transaction
/// and reports a fatal error instead of the retryable lock timeout).
#[tokio::test]
async fn ct02_lock_timeout_of_a_batch_sent_ahead_rolls_it_back() {
    let (db, engine, _hooks) = started_one_statement(30, 10).await;
    let mut holder = lock_holder(&db, "UPDATE items SET n = n WHERE id = 15").await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    assert_eq!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            keys: 10,
            reached_bound: false
        }
    );
    let err = engine.run_batch(&mut claim).await.unwrap_err();
    let class = err.classification();
    assert!(matches!(class, Some(RepairError::Retryable(_))), "{err:?}");
    assert_eq!(count_n(&db, 1).await, 10);
    assert_eq!(
        engine.get(ID).await.unwrap().checkpoint_json,
        Some(serde_json::json!(10))
    );
    diesel::sql_query("ROLLBACK")
        .execute(&mut holder)
        .await
        .unwrap();
    assert_eq!(open_transactions(&db).await, 0);
    engine
        .record_failure(&claim, &class.unwrap())
        .await
        .unwrap();
    support::eventually("the backfill completes after the backoff", || async {
        drive(&engine, "w").await;
        state(&engine).await == State::Completed
    })
    .await;
    assert_eq!(count_n(&db, 1).await, 30);
}

/// EMB-4: the store's fixed statements are prepared once per connection
/// and then only bound and executed (one round trip, the fastest path):
/// the server lists one prepared statement for two executions of a
/// cached statement on one connection. Guard: `Cached` vouching that its
/// text is safe to cache (diesel re-prepares a plain `sql_query` on every
/// execution, unlisted).
#[tokio::test]
async fn emb04_store_statements_are_prepared_once_per_connection() {
    let db = test_db().await;
    let mut conn = db.connect().await;
    for _ in 0..2 {
        backfill::__private::store::wake_notify(&mut conn, ID)
            .await
            .unwrap();
    }
    let prepared = support::scalar_on(
        &mut conn,
        "SELECT count(*) AS v FROM pg_prepared_statements WHERE statement = 'SELECT pg_notify($1, $2)'",
    )
    .await;
    assert_eq!(prepared, 1);
}

/// EX-6: a batch's COMMIT travels inside the fence's message, and the
/// connection's transaction manager is told the transaction ended: a
/// backfill run to completion hands every connection back to its pool
/// clean (none closed as left in a transaction), so the pool does not
/// reconnect batch after batch. Guard: the depth decrease after a
/// committed fence in `checkpoint_advance_commit`.
#[tokio::test]
async fn ex06_committed_batches_leave_their_connections_clean() {
    let (_db, engine, _hooks) = started_counter(25, 10, Some(4), |c| c).await;
    drive(&engine, "w").await;
    assert_eq!(engine.get(ID).await.unwrap().state, State::Completed);
    let stats = engine.pool().state().statistics;
    assert_eq!(stats.connections_closed_broken, 0, "{stats:?}");
}
