//! Bounded failure, operator retry, classification (CT-8, RT-1).

use super::*;

/// CT-8 / RT-1 / RT-2: a persistent retryable error is recorded with backoff
/// each time and ends in `failed` after `max_attempts`, never a hot loop;
/// operator retry keeps bound and checkpoint. Guard: the attempts bound in
/// `backfill_record_failure`.
#[tokio::test]
async fn ct08_persistent_retryable_errors_end_in_failed_and_retry_keeps_progress() {
    let (db, engine, hooks) = started(30, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.run_batch(&mut claim).await.unwrap();
    *hooks.fail_after_mutate.lock() = Some(RepairError::Retryable("flaky".into()));
    let before = engine.get(ID).await.unwrap();
    let mut outcomes = Vec::new();
    for _ in 0..3 {
        let err = engine.run_batch(&mut claim).await.unwrap_err();
        let outcome = engine
            .record_failure(&claim, &err.classification().unwrap())
            .await
            .unwrap();
        outcomes.push(outcome.clone());
        if let FailureOutcome::Recorded {
            state: State::Running,
            next_attempt_at,
            ..
        } = outcome
        {
            assert!(next_attempt_at.is_some(), "retry is scheduled with backoff");
            // Wait for the (millisecond) backoff by PostgreSQL's clock.
            claim = loop {
                if let Some(c) = engine.claim_next("w", &[]).await.unwrap() {
                    break c;
                }
                tokio::task::yield_now().await;
            };
        }
    }
    assert!(matches!(
        outcomes.last(),
        Some(FailureOutcome::Recorded {
            state: State::Failed,
            attempts: 3,
            ..
        })
    ));
    let failed = engine.get(ID).await.unwrap();
    assert_eq!(failed.state, State::Failed);
    assert_eq!(failed.last_error_kind.as_deref(), Some("retryable"));
    assert_eq!(failed.checkpoint, before.checkpoint);
    assert!(engine.claim_next("w", &[]).await.unwrap().is_none());

    *hooks.fail_after_mutate.lock() = None;
    assert!(matches!(
        engine.retry(ID).await.unwrap(),
        ActionOutcome::Applied {
            prior: State::Failed,
            ..
        }
    ));
    let retried = engine.get(ID).await.unwrap();
    assert_eq!(retried.state, State::Running);
    assert_eq!(retried.attempts, 0);
    assert_eq!(retried.bound, before.bound);
    assert_eq!(retried.checkpoint, before.checkpoint);
    drive_to_completed(&db, &engine, 30).await;
}

/// CT-8 / RT-1: a blocked error goes to `blocked` with its bounded
/// diagnostic at once (no retries); retry keeps the checkpoint.
#[tokio::test]
async fn ct08_blocked_error_is_durable_with_diagnostic() {
    let (_db, engine, hooks) = started(30, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.run_batch(&mut claim).await.unwrap();
    let long = format!("add the column first; {}", "x".repeat(2000));
    *hooks.fail_after_mutate.lock() = Some(RepairError::Blocked(long));
    let err = engine.run_batch(&mut claim).await.unwrap_err();
    let outcome = engine
        .record_failure(&claim, &err.classification().unwrap())
        .await
        .unwrap();
    assert!(matches!(
        outcome,
        FailureOutcome::Recorded {
            state: State::Blocked,
            ..
        }
    ));
    let row = engine.get(ID).await.unwrap();
    let diag = row.last_error.unwrap();
    assert!(diag.starts_with("add the column first"));
    assert!(diag.len() <= 512, "diagnostics are bounded");
    assert_eq!(row.checkpoint_json, Some(serde_json::json!(10)));
    *hooks.fail_after_mutate.lock() = None;
    engine.retry(ID).await.unwrap();
    assert_eq!(
        engine.get(ID).await.unwrap().checkpoint_json,
        Some(serde_json::json!(10))
    );
}

/// RT-1 whatever the server's language: the pool's sessions get
/// untranslated messages, so a statement timeout is recognised by its text
/// (diesel-async reports no SQLSTATE) and classified retryable. The
/// database's own default is set to another value first; removing
/// `session_messages_untranslated` from the pool's connection setup fails
/// the first assertion. A role that may not set `lc_messages` still gets
/// working connections, with the database's setting.
#[tokio::test]
async fn rt01_pool_sessions_report_errors_untranslated() {
    #[derive(diesel::QueryableByName)]
    struct Setting {
        #[diesel(sql_type = diesel::sql_types::Text)]
        lc_messages: String,
    }
    async fn lc_messages(pool: &backfill::__private::store::Pool) -> String {
        let mut conn = pool.get().await.expect("pool");
        let row: Setting = diesel::sql_query("SHOW lc_messages")
            .get_result(&mut conn)
            .await
            .expect("show lc_messages");
        row.lc_messages
    }
    let db = test_db().await;
    db.exec(&format!(
        "ALTER DATABASE {} SET lc_messages = 'C.UTF-8'",
        db.name
    ))
    .await;
    let pool = backfill::__private::store::build_pool(&db.url, 2)
        .await
        .expect("pool");
    assert_eq!(lc_messages(&pool).await, "C");
    let mut conn = pool.get().await.expect("pool");
    let timeout = diesel_async::SimpleAsyncConnection::batch_execute(
        &mut *conn,
        "SET statement_timeout = 1; SELECT pg_sleep(1)",
    )
    .await
    .expect_err("the statement times out");
    assert!(
        matches!(
            backfill::__private::store::classify(&timeout),
            RepairError::Retryable(_)
        ),
        "{timeout}"
    );
    drop(conn);
    drop(pool);

    // Dropped with the test database (support's `Drop`), whether or not an
    // assertion below fails.
    let role = db.role();
    db.exec(&format!("CREATE ROLE {role} LOGIN")).await;
    let pool = backfill::__private::store::build_pool(&with_user(&db.url, &role), 1)
        .await
        .expect("a role without the privilege still connects");
    assert_eq!(lc_messages(&pool).await, "C.UTF-8");
}

/// RT-1 against the server's own errors: a prepared statement the session
/// does not have (26000, what a pooler in transaction mode causes) blocks
/// with a diagnostic that names the pooler, and a session the server ends
/// (`pg_terminate_backend`, 57P01) is retried; neither is taken for a
/// missing relation. Through a host, a validation that meets 26000 leaves
/// the backfill `blocked` with that diagnostic, never `failed` as fatal.
/// Guard: the prepared-statement case in `failure::describe`, ahead of
/// its "does not exist" relation case.
#[actix_rt::test]
async fn rt01_a_lost_prepared_statement_blocks_naming_the_pooler() {
    use backfill::__private::store::{build_pool, classify};
    use backfill::host::{Embedded, HostConfig};
    use diesel_async::SimpleAsyncConnection;
    let db = test_db().await;
    let pool = build_pool(&db.url, 2).await.expect("pool");
    let mut conn = pool.get().await.expect("pool");
    let missing = conn
        .batch_execute("EXECUTE bf_never_prepared")
        .await
        .expect_err("no such statement");
    match classify(&missing) {
        RepairError::Blocked(m) => {
            assert!(m.starts_with("prepared statement missing: "), "{m}");
            assert!(m.contains("pooler in transaction mode"), "{m}");
        }
        other => panic!("{other:?}"),
    }
    let mut victim = pool.get().await.expect("pool");
    victim.batch_execute("SELECT 1").await.expect("a session");
    #[derive(diesel::QueryableByName)]
    struct Pid {
        #[diesel(sql_type = diesel::sql_types::Integer)]
        pid: i32,
    }
    let pid: Pid = diesel::sql_query("SELECT pg_backend_pid() AS pid")
        .get_result(&mut *victim)
        .await
        .expect("pid");
    conn.batch_execute(&format!("SELECT pg_terminate_backend({})", pid.pid))
        .await
        .expect("terminate");
    let ended = victim
        .batch_execute("SELECT 1")
        .await
        .expect_err("the session was ended");
    assert!(
        matches!(classify(&ended), RepairError::Retryable(_)),
        "{ended}"
    );
    drop((conn, victim));
    drop(pool);

    db.exec(
        "CREATE TABLE pooled (id bigint PRIMARY KEY, n integer NOT NULL DEFAULT 0); \
         INSERT INTO pooled (id) SELECT g FROM generate_series(1, 50) g; \
         CREATE FUNCTION bf_lost_statement() RETURNS boolean LANGUAGE plpgsql AS $$ \
         BEGIN RAISE EXCEPTION 'prepared statement \"s4\" does not exist' \
             USING ERRCODE = 'invalid_sql_statement_name'; END $$",
    )
    .await;
    const POOLED: &str = "pooled.n.v1";
    let repair = backfill::SqlRepair::new(POOLED, "pooled")
        .key("id")
        .set("n = 1")
        .validate_where("bf_lost_statement()")
        .build()
        .expect("definition");
    let mut host = HostConfig::new(db.url.clone());
    host.migrate = false;
    host.auto_backfills = false;
    host.engine = config();
    host.runtime.poll_interval = Duration::from_millis(50);
    let spawned = Embedded::spawn(host, Registry::new().with(repair).expect("registers"))
        .await
        .expect("host");
    spawned.engine.start(POOLED).await.expect("start");
    spawned.runtime.wake();
    let row = spawned
        .engine
        .wait_for(
            POOLED,
            &[State::Blocked, State::Failed, State::Completed],
            Duration::from_secs(60),
        )
        .await
        .expect("settled");
    spawned.stop().await;
    assert_eq!(row.state, State::Blocked, "{:?}", row.last_error);
    let diagnostic = row.last_error.unwrap_or_default();
    assert!(
        diagnostic.contains("prepared statement missing")
            && diagnostic.contains("max_prepared_statements"),
        "{diagnostic}"
    );
}

/// RT-1 against the server's own 42501: a statement the role may not run
/// blocks (an operator's grant is the fix) with a diagnostic that points
/// at the guide's grant list and names no table; it is never fatal.
/// Guard: the permission case in `failure::describe`.
#[tokio::test]
async fn rt01_a_missing_grant_blocks_naming_the_fix() {
    use backfill::__private::store::{classify, connect_dedicated};
    use diesel_async::SimpleAsyncConnection;
    let db = test_db().await;
    db.exec("CREATE TABLE secret_items (id bigint PRIMARY KEY)")
        .await;
    let role = db.role();
    db.exec(&format!("CREATE ROLE {role} LOGIN")).await;
    let mut conn = connect_dedicated(&with_user(&db.url, &role))
        .await
        .expect("the role connects");
    let denied = conn
        .batch_execute("SELECT * FROM secret_items")
        .await
        .expect_err("no grant");
    match classify(&denied) {
        RepairError::Blocked(m) => {
            assert!(m.starts_with("permission denied: "), "{m}");
            assert!(m.contains("Roles and privileges"), "{m}");
            assert!(!m.contains("secret_items"), "{m}");
        }
        other => panic!("{other:?}"),
    }
}
