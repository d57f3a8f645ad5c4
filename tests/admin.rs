//! Admin boundary conformance through the real HTTP server and a real
//! PostgreSQL (docs/CONTRACT.md section 9, CT-9, CT-10, CT-11 API part, AUD-1).
//!
//! Index (each test's doc comment names the guard whose removal fails it):
//! - CT-9  authorization on every admin route: `ct09_*`
//! - CT-10 idempotent actions (duplicate, concurrent, restart), conflicts:
//!   `ct10_*`
//! - CT-11 explicit validation on a completed row: `ct11_*`
//! - AUD-1 audit atomicity: `aud01_*`; completeness is asserted at the end
//!   of every test that performs accepted actions.
//! - ADM-2/3 projection, ADM-6 absent destructive routes, supervisor
//!   waker: `adm02_*`, `adm06_*`, `adm04_waker_*`
//! - API-1 OpenAPI document: `api01_openapi_*`; its declared constraints and key
//!   types: `api01_*` (live responses: `.ci/api-check`)
//! - API-2 405 with `Allow` on a known path: `api02_*`
//! - API-3 flood of rejected requests: `api03_*`
//! - Bad input: IDs no backfill can have: `aud01_invalid_ids_*`; malformed
//!   Idempotency-Keys: `adm04_*`
//! - OBS-4 the timeline of a backfill: `obs04_*`
//! - OBS-5 rates and the run chart from the progress history: `obs05_*`
//! - RT-4 the keys that block a repair: `rt04_*`
//!
//! Races use PostgreSQL's own lock queue (a test session holds the row lock
//! and the test waits until every request is queued) or repair gates.

mod support;

use backfill::BatchOutcome;
use diesel_async::SimpleAsyncConnection;
use futures_util::future::join_all;
use serde_json::Value;
use support::admin::*;

/// Every admin route: (method, path).
fn routes(id: &str) -> Vec<(&'static str, String)> {
    vec![
        ("GET", "/admin/backfills".into()),
        ("GET", format!("/admin/backfills/{id}")),
        ("GET", format!("/admin/audit?backfill={id}")),
        ("GET", format!("/admin/backfills/{id}/timeline")),
        ("GET", format!("/admin/backfills/{id}/progress")),
        ("POST", format!("/admin/backfills/{id}/start")),
        ("POST", format!("/admin/backfills/{id}/pause")),
        ("POST", format!("/admin/backfills/{id}/resume")),
        ("POST", format!("/admin/backfills/{id}/retry")),
        ("POST", format!("/admin/backfills/{id}/validate")),
        ("POST", format!("/admin/backfills/{id}/dry-run")),
        ("POST", format!("/admin/backfills/{id}/undo")),
        ("POST", format!("/admin/backfills/{id}/journal/prune")),
    ]
}

/// The body of a rejection carries nothing but `error` and `message`, and
/// neither names the backfill or its state.
fn assert_no_backfill_data(resp: &Resp, id: &str) {
    let obj = resp.body.as_object().expect("JSON error body");
    let mut keys: Vec<&String> = obj.keys().collect();
    keys.sort();
    assert_eq!(keys, ["error", "message"], "{}", resp.text);
    for word in [id, "pending", "running", "generation", "bound"] {
        assert!(!resp.text.contains(word), "leaked {word}: {}", resp.text);
    }
}

/// CT-9 / AUTH-1: for every admin route, no token -> 401, a principal with
/// only community/channel/member roles -> 403, the read-only principal on
/// an action -> 403; no response carries backfill data, the row and its
/// generation are unchanged, and every attempt is audited. Guard: the
/// capability check in `Admin::authorize` (removing it lets these through
/// and the test fails on the status, the data and the snapshot).
#[actix_rt::test]
async fn ct09_unauthorized_requests_get_nothing_and_change_nothing() {
    let (db, engine, _hooks) = setup(10).await;
    let server = serve(admin(engine.clone()));
    // A running row, so every action would have something to do.
    let r = call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{ID}/start"),
        Some(OPERATOR),
        Some("setup"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let before = snapshot(&db, ID).await;
    let audits_before = db
        .scalar("SELECT coalesce(sum(request_count), 0)::bigint AS v FROM backfill_audit")
        .await;
    let seq_before = db
        .scalar("SELECT coalesce(max(seq), 0) AS v FROM backfill_audit")
        .await;

    let mut attempts = 0;
    for (method, path) in routes(ID) {
        let is_action = method == "POST";
        let mut cases: Vec<(Option<&str>, u16)> = vec![
            (None, 401),
            (Some("not-a-known-token"), 401),
            (Some(COMMUNITY), 403),
        ];
        if is_action {
            cases.push((Some(READER), 403));
        }
        for (token, expected) in cases {
            attempts += 1;
            let key = format!("k-{attempts}");
            let resp = call(&server.url, method, &path, token, Some(&key)).await;
            assert_eq!(
                resp.status, expected,
                "{method} {path} with {token:?}: {}",
                resp.text
            );
            assert_no_backfill_data(&resp, ID);
        }
    }
    assert_eq!(snapshot(&db, ID).await, before, "nothing changed");
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_request WHERE idempotency_key LIKE 'k-%'")
            .await,
        0,
        "no idempotent response stored for a rejected request"
    );
    // Requests without valid credentials from one source are audited as
    // one row per window carrying their count (API-3); every attempt is
    // still counted, so the audit accounts for each of them (AUD-1).
    let audited = db
        .scalar(&format!(
            "SELECT coalesce(sum(request_count), 0)::bigint AS v FROM backfill_audit WHERE seq > {seq_before} \
             AND outcome IN ('unauthorized', 'forbidden') AND resulting_state IS NULL"
        ))
        .await;
    let audits_after = db
        .scalar("SELECT coalesce(sum(request_count), 0)::bigint AS v FROM backfill_audit")
        .await;
    assert_eq!(
        audits_after - audits_before,
        attempts,
        "every attempt audited"
    );
    assert_eq!(audited, attempts);
    // The community principal is audited by name, an anonymous caller is
    // not; each one's refusals share one coalesced row (AUD-3).
    assert_eq!(
        db.text("SELECT concat_ws('|', count(*), sum(request_count)) AS v FROM backfill_audit WHERE actor = 'moderator' AND outcome = 'forbidden'").await.as_deref(),
        Some("1|13")
    );
    assert_eq!(
        db.scalar("SELECT sum(request_count)::bigint AS v FROM backfill_audit WHERE actor IS NULL AND authority = 'none' AND outcome = 'unauthorized'").await,
        26
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_audit WHERE outcome = 'unauthorized' AND source = '127.0.0.1'").await,
        1,
        "one coalesced row for the window (API-3)"
    );
    // The read-only principal can read.
    let r = call(
        &server.url,
        "GET",
        &format!("/admin/backfills/{ID}"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.body["state"], "running");
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// AUTH-2: in trusted-network mode requests need no token and audit
/// records the network boundary as the authority and no individual actor.
#[actix_rt::test]
async fn ct09_trusted_network_claims_no_actor() {
    let (db, engine, _hooks) = setup(3).await;
    let admin = backfill::admin::Admin::new(
        engine,
        backfill::admin::AdminConfig {
            auth: backfill::admin::AuthConfig::TrustedNetwork,
            auto_backfills: false,
            required: Default::default(),
        },
    );
    let server = serve(admin);
    let r = call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{ID}/start"),
        None,
        Some("t1"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_audit WHERE authority = 'trusted-network' AND actor IS NULL AND outcome = 'applied'").await,
        1
    );
    server.stop().await;
    assert_audit_complete(&db).await;
}

async fn generation(db: &support::TestDb, id: &str) -> i64 {
    db.scalar(&format!(
        "SELECT generation AS v FROM backfill WHERE id = '{id}'"
    ))
    .await
}

/// CT-10 / ADM-4: the same Idempotency-Key sent twice, then from 8
/// concurrent tasks queued behind a row lock, then after a server restart:
/// one transition, one generation advance, one bound capture, identical
/// bodies. Guard: the idempotency-key lock and stored response
/// (`store::request_lock`/`request_get` in `Admin::act`); without them the
/// repeats would be answered `converged` with different bodies.
#[actix_rt::test]
async fn ct10_same_key_replays_one_transition_across_duplicates_concurrency_and_restart() {
    let (db, engine, _hooks) = setup(10).await;
    let server = serve(admin(engine.clone()));
    let start = format!("/admin/backfills/{ID}/start");
    assert_eq!(generation(&db, ID).await, 0);

    // Eight concurrent first deliveries, queued in PostgreSQL behind a row
    // lock held by the test, so they really race.
    let mut blocker = db.connect().await;
    blocker
        .batch_execute(&format!(
            "BEGIN; SELECT 1 FROM backfill WHERE id = '{ID}' FOR UPDATE"
        ))
        .await
        .expect("lock row");
    let url = server.url.clone();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (url, start) = (url.clone(), start.clone());
            actix_rt::spawn(async move {
                call(&url, "POST", &start, Some(OPERATOR), Some("key-1")).await
            })
        })
        .collect();
    // One request waits on the row lock, seven on the key's advisory lock.
    wait_for_lock_waiters(&db, 8).await;
    blocker.batch_execute("COMMIT").await.expect("release");
    let responses: Vec<Resp> = join_all(tasks)
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();
    for r in &responses {
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body, responses[0].body, "identical bodies");
    }
    assert_eq!(responses[0].body["outcome"], "applied");
    assert_eq!(responses[0].body["backfill"]["state"], "running");
    assert_eq!(generation(&db, ID).await, 1, "one generation advance");
    let bound = db
        .text(&format!(
            "SELECT encode(bound, 'hex') AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await;
    let started_at = db
        .text(&format!(
            "SELECT started_at::text AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await;

    // Sequential duplicate.
    let again = call(&server.url, "POST", &start, Some(OPERATOR), Some("key-1")).await;
    assert_eq!((again.status, &again.body), (200, &responses[0].body));

    // The source grows; a recaptured bound would show it.
    db.exec("INSERT INTO items (id) SELECT g FROM generate_series(11, 20) g")
        .await;

    // Restart: stop the server, start a new one (new engine, new pool) on
    // the same database, and retry as after a lost response.
    server.stop().await;
    let pool = backfill::__private::store::build_pool(&db.url, 4)
        .await
        .expect("pool");
    let engine2 =
        backfill::Engine::new(pool, engine.registry().clone(), engine_config()).expect("engine");
    let server = serve(admin(engine2));
    let after_restart = call(&server.url, "POST", &start, Some(OPERATOR), Some("key-1")).await;
    assert_eq!(
        (after_restart.status, &after_restart.body),
        (200, &responses[0].body)
    );
    // AUD-1: each replay (seven queued duplicates, the sequential one and
    // the one after the restart) is audited as the request it answered:
    // its action, principal, authority and key.
    assert_eq!(
        db.scalar(&format!(
            "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{ID}' \
             AND outcome = 'replayed' AND action = 'start' AND actor = 'ops' \
             AND authority = 'token' AND correlation = 'key-1'"
        ))
        .await,
        9
    );

    // Different keys for the same start, concurrently: they converge.
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (url, start) = (server.url.clone(), start.clone());
            actix_rt::spawn(async move {
                call(
                    &url,
                    "POST",
                    &start,
                    Some(OPERATOR),
                    Some(&format!("other-{i}")),
                )
                .await
            })
        })
        .collect();
    for r in join_all(tasks).await {
        let r = r.expect("task");
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.body["outcome"], "converged");
    }
    assert_eq!(generation(&db, ID).await, 1, "still one generation advance");
    assert_eq!(
        db.text(&format!(
            "SELECT encode(bound, 'hex') AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await,
        bound,
        "one bound capture"
    );
    assert_eq!(
        db.text(&format!(
            "SELECT started_at::text AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await,
        started_at
    );
    assert_eq!(
        db.scalar(&format!("SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{ID}' AND action = 'start' AND outcome = 'applied'")).await,
        1
    );

    // The same key for a different action or ID is a 422, and changes nothing.
    let r = call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{ID}/pause"),
        Some(OPERATOR),
        Some("key-1"),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.text);
    let r = call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{OTHER}/start"),
        Some(OPERATOR),
        Some("key-1"),
    )
    .await;
    assert_eq!(r.status, 422, "{}", r.text);
    assert_eq!(
        db.text(&format!(
            "SELECT state AS v FROM backfill WHERE id = '{OTHER}'"
        ))
        .await
        .as_deref(),
        Some("pending")
    );

    // No key: 400.
    let r = call(&server.url, "POST", &start, Some(OPERATOR), None).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.body["error"], "bad_request");
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// CT-10 / ADM-5, LC-3: a conflicting action returns 409 with the current
/// state and changes nothing; a converged repeat (pause on paused) returns
/// 200 with the current state; pause advances the generation once and
/// resume once. Guard: `ActionOutcome::Conflict` -> 409 in `Admin::act_tx`.
#[actix_rt::test]
async fn ct10_conflicts_carry_current_state_and_repeats_converge() {
    let (db, engine, _hooks) = setup(10).await;
    let server = serve(admin(engine));
    let path = |a: &str| format!("/admin/backfills/{ID}/{a}");
    let r = call(
        &server.url,
        "POST",
        &path("resume"),
        Some(OPERATOR),
        Some("c1"),
    )
    .await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert_eq!(r.body["error"], "conflict");
    assert_eq!(r.body["current"]["state"], "pending");
    assert_eq!(r.body["current"]["id"], ID);
    // The conflict is replayed for its key, even after the state changed.
    assert_eq!(
        call(
            &server.url,
            "POST",
            &path("start"),
            Some(OPERATOR),
            Some("c2")
        )
        .await
        .status,
        200
    );
    let replay = call(
        &server.url,
        "POST",
        &path("resume"),
        Some(OPERATOR),
        Some("c1"),
    )
    .await;
    assert_eq!((replay.status, replay.body), (409, r.body));

    let p1 = call(
        &server.url,
        "POST",
        &path("pause"),
        Some(OPERATOR),
        Some("c3"),
    )
    .await;
    assert_eq!(
        (p1.status, p1.body["outcome"].as_str()),
        (200, Some("applied"))
    );
    assert_eq!(p1.body["prior_state"], "running");
    assert_eq!(p1.body["backfill"]["state"], "paused");
    let g = generation(&db, ID).await;
    let p2 = call(
        &server.url,
        "POST",
        &path("pause"),
        Some(OPERATOR),
        Some("c4"),
    )
    .await;
    assert_eq!(
        (p2.status, p2.body["outcome"].as_str()),
        (200, Some("converged"))
    );
    assert_eq!(p2.body["backfill"]["state"], "paused");
    assert_eq!(
        generation(&db, ID).await,
        g,
        "a converged repeat changes nothing"
    );
    let retry = call(
        &server.url,
        "POST",
        &path("retry"),
        Some(OPERATOR),
        Some("c5"),
    )
    .await;
    assert_eq!(retry.status, 409);
    assert_eq!(retry.body["current"]["state"], "paused");
    let resumed = call(
        &server.url,
        "POST",
        &path("resume"),
        Some(OPERATOR),
        Some("c6"),
    )
    .await;
    assert_eq!(resumed.body["outcome"], "applied");
    assert_eq!(generation(&db, ID).await, g + 1);
    let r = call(
        &server.url,
        "POST",
        "/admin/backfills/no.such/start",
        Some(OPERATOR),
        Some("c7"),
    )
    .await;
    assert_eq!(r.status, 404);
    // Conflicts are audited with prior = resulting state.
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_audit WHERE outcome = 'conflict' AND prior_state = resulting_state").await,
        2
    );
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// AUD-1: an audit insert that fails (a trigger injected by the test)
/// leaves the transition uncommitted: state, bound and generation stay,
/// no idempotent response is stored, the error body is redacted; once the
/// fault is gone the same key applies the transition. Guard: the audit
/// insert inside the action's transaction in `Admin::act_tx`.
#[actix_rt::test]
async fn aud01_failed_audit_insert_rolls_back_the_transition() {
    let (db, engine, _hooks) = setup(10).await;
    let server = serve(admin(engine));
    db.exec(
        "CREATE FUNCTION inject_audit_failure() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN RAISE EXCEPTION 'injected secret-looking failure'; END $$; \
         CREATE TRIGGER inject_audit_failure BEFORE INSERT ON backfill_audit FOR EACH ROW \
         WHEN (NEW.outcome = 'applied') EXECUTE FUNCTION inject_audit_failure()",
    )
    .await;
    let before = snapshot(&db, ID).await;
    let start = format!("/admin/backfills/{ID}/start");
    let r = call(&server.url, "POST", &start, Some(OPERATOR), Some("a1")).await;
    assert!(r.status >= 500, "{}", r.text);
    assert!(
        !r.text.contains("injected") && !r.text.contains("INSERT"),
        "redacted: {}",
        r.text
    );
    assert_eq!(
        snapshot(&db, ID).await,
        before,
        "the transition did not commit"
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_request")
            .await,
        0
    );
    // The failed attempt itself is audited as an error.
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_audit WHERE correlation = 'a1' AND outcome = 'internal'").await,
        1
    );
    db.exec("DROP TRIGGER inject_audit_failure ON backfill_audit")
        .await;
    let r = call(&server.url, "POST", &start, Some(OPERATOR), Some("a1")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["outcome"], "applied");
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// CT-11 (API part), VAL-4..7: on a completed row with no claim, explicit
/// validation persists and returns its outcome and writes audit; no claim,
/// generation, data, lifecycle, bound, checkpoint or completion changes; a
/// forced data drift yields `failure` while the row stays completed; a
/// pending row answers `current-state`; a duplicate or a retry after a lost
/// response recovers the original outcome; a concurrent request with
/// another key gets `current-state` while one with the same key joins.
/// Guards: the savepoint that keeps the definition read-only, the per-ID
/// advisory lock (`store::validation_try_lock`) and the stored response.
#[actix_rt::test]
async fn ct11_explicit_validation_on_completed_row_is_read_only_and_idempotent() {
    let (db, engine, hooks) = setup(10).await;
    let server = serve(admin(engine.clone()));
    let validate = format!("/admin/backfills/{ID}/validate");
    let r = call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{ID}/start"),
        Some(OPERATOR),
        Some("s1"),
    )
    .await;
    assert_eq!(r.status, 200);
    drive(&engine).await;
    let before = snapshot(&db, ID).await;
    assert!(before.starts_with("completed|"), "{before}");
    assert_eq!(
        db.scalar(&format!(
            "SELECT count(*) AS v FROM backfill WHERE id = '{ID}' AND owner IS NULL"
        ))
        .await,
        1
    );

    // success
    let ok = call(&server.url, "POST", &validate, Some(OPERATOR), Some("v1")).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    assert_eq!(ok.body["outcome"], "success");
    assert_eq!(ok.body["state"], "completed");
    assert!(ok.body["validated_at"].is_string());
    // A verdict carries no reason; only `current-state` answers do.
    assert_eq!(
        (&ok.body["reason"], &ok.body["detail"]),
        (&Value::Null, &Value::Null)
    );
    assert_eq!(snapshot(&db, ID).await, before);
    let detail = call(
        &server.url,
        "GET",
        &format!("/admin/backfills/{ID}"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(detail.body["validation"]["outcome"], "success");
    assert_eq!(detail.body["validation"]["at"], ok.body["validated_at"]);
    // duplicate / lost response: the same key returns the original outcome
    let dup = call(&server.url, "POST", &validate, Some(OPERATOR), Some("v1")).await;
    assert_eq!(dup.body, ok.body);

    // failure after a forced drift; completion stays
    db.exec("UPDATE items SET n = 2 WHERE id = 3").await;
    let drifted = snapshot(&db, ID).await;
    let bad = call(&server.url, "POST", &validate, Some(OPERATOR), Some("v2")).await;
    assert_eq!(bad.status, 200, "{}", bad.text);
    assert_eq!(bad.body["outcome"], "failure");
    assert_eq!(bad.body["state"], "completed");
    let text = bad.body["detail"].as_str().expect("detail");
    assert!(!text.is_empty() && text.len() <= 512);
    assert_eq!(
        snapshot(&db, ID).await,
        drifted,
        "completion, generation and data unchanged"
    );
    let detail = call(
        &server.url,
        "GET",
        &format!("/admin/backfills/{ID}"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(detail.body["state"], "completed");
    assert_eq!(detail.body["validation"]["outcome"], "failure");

    // concurrent: v3 runs and waits in the definition; v4 gets current-state;
    // a duplicate of v3 joins it and gets the same outcome.
    let mut gate = hooks.gate_in_validate();
    let url = server.url.clone();
    let first = {
        let (url, validate) = (url.clone(), validate.clone());
        actix_rt::spawn(
            async move { call(&url, "POST", &validate, Some(OPERATOR), Some("v3")).await },
        )
    };
    gate.reached().await;
    // Bounded wait: without the per-ID lock this request would run a second
    // validation and block at the gate.
    let busy = tokio::time::timeout(
        std::time::Duration::from_secs(15),
        call(&server.url, "POST", &validate, Some(OPERATOR), Some("v4")),
    )
    .await
    .expect("a concurrent validation must answer current-state, not run");
    assert_eq!(busy.status, 200);
    assert_eq!(busy.body["outcome"], "current-state", "{}", busy.text);
    assert_eq!(busy.body["state"], "completed");
    assert!(busy.body["reason"]
        .as_str()
        .expect("reason")
        .contains("running"));
    let joined = {
        let (url, validate) = (url.clone(), validate.clone());
        actix_rt::spawn(
            async move { call(&url, "POST", &validate, Some(OPERATOR), Some("v3")).await },
        )
    };
    wait_for_lock_waiters(&db, 1).await;
    gate.release();
    let first = first.await.expect("task");
    let joined = joined.await.expect("task");
    hooks.clear_gates();
    assert_eq!(first.body["outcome"], "failure");
    assert_eq!(
        joined.body, first.body,
        "the duplicate joined the running validation"
    );
    // The current-state answer was not an outcome: retrying v4 runs it now.
    let v4 = call(&server.url, "POST", &validate, Some(OPERATOR), Some("v4")).await;
    assert_eq!(v4.body["outcome"], "failure");

    // pending: current-state without running
    let pending = call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{OTHER}/validate"),
        Some(OPERATOR),
        Some("v5"),
    )
    .await;
    assert_eq!(pending.body["outcome"], "current-state");
    assert_eq!(pending.body["state"], "pending");
    assert_eq!(
        pending.body["reason"],
        "not started: there is nothing to validate yet"
    );
    assert_eq!(pending.body["validated_at"], Value::Null);
    assert_eq!(
        db.text(&format!(
            "SELECT validation_outcome AS v FROM backfill WHERE id = '{OTHER}'"
        ))
        .await,
        None
    );

    assert_eq!(
        snapshot(&db, ID).await,
        drifted,
        "nothing but the validation record changed"
    );
    let audited = db
        .scalar(&format!(
            "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{ID}' AND action = 'validate' \
             AND prior_state = 'completed' AND resulting_state = 'completed'"
        ))
        .await;
    // v1, v1 replay (no state), v2, v3, v4 busy, v3 replay (no state), v4.
    assert_eq!(audited, 5);
    assert_eq!(
        db.scalar(&format!("SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{ID}' AND action = 'validate' AND outcome = 'replayed'")).await,
        2
    );
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// ADM-2, ADM-3: the detail renders bound and checkpoint in the key's type,
/// progress as a fraction (null while unknown), owner disposition, the
/// gating flag; the list pages by ID.
#[actix_rt::test]
async fn adm02_detail_and_list_project_postgres_state() {
    let (db, engine, _hooks) = setup(10).await;
    let server = serve(admin(engine.clone()));
    let d = call(
        &server.url,
        "GET",
        &format!("/admin/backfills/{ID}"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(d.body["state"], "pending");
    assert_eq!(
        d.body["progress"]["fraction"],
        Value::Null,
        "unknown, not zero"
    );
    assert_eq!(
        d.body["readiness"],
        serde_json::json!({"required": true, "gating": true})
    );
    call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{ID}/start"),
        Some(OPERATOR),
        Some("d1"),
    )
    .await;
    let mut claim = engine
        .claim_next("worker-a", &[])
        .await
        .expect("claim")
        .expect("claimed");
    engine.run_batch(&mut claim).await.expect("batch");
    let d = call(
        &server.url,
        "GET",
        &format!("/admin/backfills/{ID}"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(d.body["bound"], 10);
    assert_eq!(d.body["checkpoint"], 4);
    assert_eq!(d.body["progress"]["fraction"], 0.4);
    assert_eq!(d.body["owner"]["disposition"], "held");
    assert_eq!(d.body["owner"]["worker"], "worker-a");
    db.expire_lease(ID).await;
    let d = call(
        &server.url,
        "GET",
        &format!("/admin/backfills/{ID}"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(d.body["owner"]["disposition"], "expired");
    let page = call(
        &server.url,
        "GET",
        "/admin/backfills?limit=1",
        Some(READER),
        None,
    )
    .await;
    assert_eq!(page.body["items"].as_array().map(Vec::len), Some(1));
    assert_eq!(page.body["items"][0]["id"], ID);
    assert_eq!(page.body["next_after"], ID);
    let page2 = call(
        &server.url,
        "GET",
        &format!("/admin/backfills?limit=1&after={ID}"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(page2.body["items"][0]["id"], OTHER);
    assert_eq!(page2.body["items"][0]["readiness"]["required"], false);
    let bad = call(
        &server.url,
        "GET",
        "/admin/backfills?limit=0",
        Some(READER),
        None,
    )
    .await;
    assert_eq!(bad.status, 400);
    let audit = call(
        &server.url,
        "GET",
        &format!("/admin/audit?backfill={ID}"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(audit.body["items"][0]["action"], "start");
    assert_eq!(audit.body["items"][0]["actor"], "ops");
    assert_eq!(audit.body["items"][0]["correlation"], "d1");
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// The OpenAPI 3 document is served, generated from the handlers, and lists
/// every route with its methods and error bodies. The document is written
/// to `target/tmp/openapi.json` for `.ci/run`'s openapi-spec-validator step.
#[actix_rt::test]
async fn api01_openapi_document_lists_every_route() {
    let (_db, engine, _hooks) = setup(1).await;
    let server = serve(admin(engine));
    let r = call(&server.url, "GET", "/openapi.json", None, None).await;
    assert_eq!(r.status, 200);
    let doc = &r.body;
    assert!(doc["openapi"].as_str().expect("openapi").starts_with("3."));
    let paths = doc["paths"].as_object().expect("paths");
    let mut expected = vec![
        ("/admin/backfills", "get"),
        ("/admin/backfills/{id}", "get"),
        ("/admin/backfills/{id}/timeline", "get"),
        ("/admin/backfills/{id}/progress", "get"),
        ("/admin/audit", "get"),
        ("/admin/notifications", "get"),
        ("/admin/me", "get"),
        ("/openapi.json", "get"),
    ];
    let actions = [
        "start",
        "pause",
        "resume",
        "retry",
        "validate",
        "undo",
        "journal/prune",
    ];
    let action_paths: Vec<String> = actions
        .iter()
        .map(|a| format!("/admin/backfills/{{id}}/{a}"))
        .collect();
    for p in &action_paths {
        expected.push((p.as_str(), "post"));
    }
    expected.push(("/admin/backfills/{id}/settings", "patch"));
    expected.push(("/admin/backfills/{id}/dry-run", "post"));
    for (path, method) in &expected {
        let op = &paths.get(*path).unwrap_or_else(|| panic!("missing {path}"))[*method];
        assert!(op.is_object(), "missing {method} {path}");
        if path.starts_with("/admin") {
            // The caller's own capabilities need none: no 403.
            let statuses: &[&str] = if *path == "/admin/me" {
                &["200", "401"]
            } else {
                &["200", "401", "403"]
            };
            for status in statuses {
                assert!(
                    op["responses"][*status].is_object(),
                    "{method} {path} lacks {status}"
                );
            }
        }
        if matches!(*method, "post" | "patch") {
            assert!(op["responses"]["400"].is_object() && op["responses"]["422"].is_object());
        }
    }
    assert_eq!(
        paths.len(),
        expected.len(),
        "no undocumented or destructive routes"
    );
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("openapi.json");
    std::fs::write(&out, &r.text).expect("write openapi.json");
    server.stop().await;
}

/// The admin layer wakes the host's supervisor only after an accepted
/// start/resume/retry commits; converged repeats, conflicts, pauses and
/// replays do not wake it (the wake is a hint, never authority).
#[actix_rt::test]
async fn adm04_waker_fires_only_after_accepted_activation() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let (db, engine, _hooks) = setup(3).await;
    let woken = Arc::new(AtomicUsize::new(0));
    let w = woken.clone();
    let admin = admin(engine).with_waker(Arc::new(move |id: &str| {
        assert_eq!(id, ID);
        w.fetch_add(1, Ordering::SeqCst);
    }));
    let server = serve(admin);
    let path = |a: &str| format!("/admin/backfills/{ID}/{a}");
    let calls = [
        ("start", "w1", 1),
        ("start", "w1", 1),
        ("start", "w2", 1),
        ("pause", "w3", 1),
        ("retry", "w4", 1),
        ("resume", "w5", 2),
    ];
    for (action, key, expected) in calls {
        call(
            &server.url,
            "POST",
            &path(action),
            Some(OPERATOR),
            Some(key),
        )
        .await;
        assert_eq!(woken.load(Ordering::SeqCst), expected, "{action} {key}");
    }
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// ADM-6: no destructive control exists: reset, rewind, bound edit,
/// delete, force-complete, release and cancel are not routes, and trying
/// them changes nothing and answers a JSON `not_found` (guard: the
/// catch-all `no_route` of the admin routes; without it the body is
/// empty).
#[actix_rt::test]
async fn adm06_no_destructive_routes() {
    let (db, engine, _hooks) = setup(3).await;
    let server = serve(admin(engine));
    let r = call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{ID}/start"),
        Some(OPERATOR),
        Some("x1"),
    )
    .await;
    assert_eq!(r.status, 200);
    let before = snapshot(&db, ID).await;
    let base = format!("/admin/backfills/{ID}");
    let attempts = [
        ("DELETE", base.clone()),
        ("PUT", base.clone()),
        ("PATCH", base.clone()),
        ("POST", base.clone()),
        ("POST", format!("{base}/reset")),
        ("POST", format!("{base}/rewind")),
        ("POST", format!("{base}/complete")),
        ("POST", format!("{base}/release")),
        ("POST", format!("{base}/cancel")),
        ("POST", format!("{base}/bound")),
    ];
    for (method, path) in attempts {
        let r = call(&server.url, method, &path, Some(OPERATOR), Some("x2")).await;
        assert!(
            matches!(r.status, 404 | 405),
            "{method} {path}: {}",
            r.status
        );
        // A JSON error like every other rejection, not an empty body: 405
        // for another method on a known path (API-2), else 404.
        let code = if r.status == 405 {
            "method_not_allowed"
        } else {
            "not_found"
        };
        assert_eq!(r.body["error"], code, "{method} {path}: {}", r.text);
    }
    assert_eq!(snapshot(&db, ID).await, before);
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// VAL-4, VAL-6: when the definition cannot run (a transient error), the
/// answer is `current-state` with a bounded reason, nothing is recorded on
/// the row, and the same key runs the validation once it can.
#[actix_rt::test]
async fn ct11_validation_that_cannot_run_reports_current_state() {
    let (db, engine, hooks) = setup(4).await;
    let server = serve(admin(engine.clone()));
    call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{ID}/start"),
        Some(OPERATOR),
        Some("s"),
    )
    .await;
    drive(&engine).await;
    let validate = format!("/admin/backfills/{ID}/validate");
    let before = db
        .text(&format!(
            "SELECT validated_at::text AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await;
    *hooks.fail_validate.lock() = Some(backfill::RepairError::Retryable("lock timeout".into()));
    let r = call(&server.url, "POST", &validate, Some(OPERATOR), Some("u1")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["outcome"], "current-state");
    assert!(r.body["reason"]
        .as_str()
        .expect("reason")
        .contains("could not run"));
    assert_eq!(
        db.text(&format!(
            "SELECT validated_at::text AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await,
        before,
        "nothing recorded"
    );
    *hooks.fail_validate.lock() = None;
    let r = call(&server.url, "POST", &validate, Some(OPERATOR), Some("u1")).await;
    assert_eq!(r.body["outcome"], "success", "{}", r.text);
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// VAL-4, VAL-5: explicit validation of a paused row runs only once its
/// checkpoint reached the bound (or its source set was empty): paused
/// mid-run it answers `current-state` and runs nothing; paused at the
/// bound, or with an empty source set, the definition runs and succeeds.
/// Guard: the reached-bound condition of `Engine::validate_in`.
#[actix_rt::test]
async fn val04_paused_row_is_validated_only_at_its_bound() {
    let pause_and_validate = |url: String, key: &'static str| async move {
        let pause = call(
            &url,
            "POST",
            &format!("/admin/backfills/{ID}/pause"),
            Some(OPERATOR),
            Some(key),
        )
        .await;
        assert_eq!(pause.body["backfill"]["state"], "paused", "{}", pause.text);
        let key = format!("{key}-validate");
        call(
            &url,
            "POST",
            &format!("/admin/backfills/{ID}/validate"),
            Some(OPERATOR),
            Some(&key),
        )
        .await
    };
    let (db, engine, _hooks) = setup(10).await;
    let server = serve(admin(engine.clone()));
    let start = format!("/admin/backfills/{ID}/start");
    call(&server.url, "POST", &start, Some(OPERATOR), Some("s")).await;
    let mut claim = engine.claim_next("w1", &[]).await.unwrap().unwrap();
    assert!(matches!(
        engine.run_batch(&mut claim).await.unwrap(),
        BatchOutcome::Committed {
            reached_bound: false,
            ..
        }
    ));
    let mid = pause_and_validate(server.url.clone(), "p1").await;
    assert_eq!(mid.body["outcome"], "current-state", "{}", mid.text);
    assert!(
        mid.body["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("has not reached the bound"),
        "{}",
        mid.text
    );

    let resume = format!("/admin/backfills/{ID}/resume");
    call(&server.url, "POST", &resume, Some(OPERATOR), Some("r1")).await;
    let mut claim = engine.claim_next("w1", &[]).await.unwrap().unwrap();
    while let BatchOutcome::Committed {
        reached_bound: false,
        ..
    } = engine.run_batch(&mut claim).await.unwrap()
    {}
    let at_bound = pause_and_validate(server.url.clone(), "p2").await;
    assert_eq!(at_bound.body["outcome"], "success", "{}", at_bound.text);
    server.stop().await;

    let (_empty_db, engine, _hooks) = setup(0).await;
    let server = serve(admin(engine.clone()));
    let started = call(&server.url, "POST", &start, Some(OPERATOR), Some("s")).await;
    assert_eq!(
        started.body["backfill"]["state"], "validating",
        "{}",
        started.text
    );
    let empty = pause_and_validate(server.url.clone(), "p3").await;
    assert_eq!(empty.body["outcome"], "success", "{}", empty.text);
    server.stop().await;
    drop(db);
}

/// VAL-4, VAL-5: explicit validation is read-only even when a definition
/// writes during validation: its writes are rolled back (the savepoint in
/// `Admin::validate`), the outcome is still reported and recorded. Guard:
/// the always-rolled-back savepoint around the definition's validation.
#[actix_rt::test]
async fn ct11_explicit_validation_cannot_commit_definition_writes() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let db = support::test_db().await;
    db.exec(&support::repairs::items_sql(4)).await;
    let careless = Arc::new(AtomicBool::new(false));
    let registry = backfill::Registry::new()
        .with(CarelessCounter {
            inner: support::repairs::Counter::new(ID, 4, support::repairs::Hooks::new()),
            careless: careless.clone(),
        })
        .expect("definition");
    let engine = backfill::Engine::new(db.pool.clone(), registry, engine_config()).expect("engine");
    engine.register().await.expect("register");
    let server = serve(admin(engine.clone()));
    call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{ID}/start"),
        Some(OPERATOR),
        Some("s"),
    )
    .await;
    drive(&engine).await;
    let before = snapshot(&db, ID).await;
    assert!(before.starts_with("completed|"), "{before}");
    careless.store(true, Ordering::SeqCst);
    let r = call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{ID}/validate"),
        Some(OPERATOR),
        Some("w1"),
    )
    .await;
    assert_eq!(r.body["outcome"], "success", "{}", r.text);
    assert_eq!(
        snapshot(&db, ID).await,
        before,
        "the definition's writes did not commit"
    );
    assert_eq!(
        db.text(&format!(
            "SELECT validation_outcome AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await
        .as_deref(),
        Some("success")
    );
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// Bad input, AUD-1: an ID no backfill can have (a NUL byte sent as `%00`,
/// or upper case) is a 400 whose JSON names the rule, on every route that
/// takes an ID (the path, `after`, `backfill`), and changes nothing. A
/// rejected action with such an ID is audited like any other rejection,
/// with a token (400) and without one (401). Guards: `requested_id` in the
/// admin layer (without it the NUL reaches PostgreSQL, which fails the
/// statement: a 500) and `audit_id` (without it the audit insert of a NUL
/// ID fails, and the rejection goes unaudited).
#[actix_rt::test]
async fn aud01_invalid_ids_are_a_400_and_rejected_actions_are_audited() {
    let (db, engine, _hooks) = setup(3).await;
    let server = serve(admin(engine));
    let before = snapshot(&db, ID).await;
    let audits =
        || db.scalar("SELECT coalesce(sum(request_count), 0)::bigint AS v FROM backfill_audit");
    let audits_before = audits().await;
    let mut rejected_actions = 0;
    for bad in ["items%00counter", "Items.Counter"] {
        for path in [
            format!("/admin/backfills/{bad}"),
            format!("/admin/backfills?after={bad}"),
            format!("/admin/audit?backfill={bad}"),
        ] {
            let r = call(&server.url, "GET", &path, Some(READER), None).await;
            assert_eq!(r.status, 400, "GET {path}: {}", r.text);
            assert_eq!(r.body["error"], "bad_request", "{}", r.text);
            assert!(
                r.body["message"].as_str().unwrap().contains("backfill ID"),
                "{}",
                r.text
            );
        }
        for action in ["start", "pause", "resume", "retry", "validate"] {
            let path = format!("/admin/backfills/{bad}/{action}");
            for (token, expected) in [(Some(OPERATOR), 400), (None, 401)] {
                rejected_actions += 1;
                let key = format!("bad-id-{rejected_actions}");
                let r = call(&server.url, "POST", &path, token, Some(&key)).await;
                assert_eq!(r.status, expected, "POST {path} {token:?}: {}", r.text);
            }
        }
    }
    assert_eq!(
        audits().await - audits_before,
        rejected_actions,
        "every rejected action audited"
    );
    // The operator's share one coalesced row (AUD-3), the
    // unauthenticated ones another (API-3); neither holds the IDs, which
    // are stored as a placeholder with their length.
    for (who, outcome) in [
        ("actor = 'ops'", "bad_request"),
        ("actor IS NULL", "unauthorized"),
    ] {
        assert_eq!(
            db.text(&format!(
                "SELECT concat_ws('|', count(*), sum(request_count), min(backfill_id)) AS v \
                 FROM backfill_audit WHERE {who} AND outcome = '{outcome}'"
            ))
            .await
            .as_deref(),
            Some("1|10|(invalid ID, 13 bytes)"),
            "{outcome}"
        );
    }
    assert_eq!(snapshot(&db, ID).await, before, "nothing changed");
    server.stop().await;
}

/// API-1: the document declares what the server checks and sends: the ID
/// rule on the path and on `after`/`backfill`, `limit` 1..=500, the
/// Idempotency-Key's 1..=200 bytes, bound and checkpoint as any JSON
/// rendering of a key (integer, string, array) or null, and the error
/// statuses with their bodies. Guards: the `param`/tuple attributes in
/// `http::admin` and `view::key_schema` (removing one fails its assertion;
/// `.ci/api-check` then checks live responses against the document).
#[actix_rt::test]
async fn api01_openapi_declares_constraints_and_key_types() {
    let (_db, engine, _hooks) = setup(1).await;
    let server = serve(admin(engine));
    let doc = call(&server.url, "GET", "/openapi.json", None, None)
        .await
        .body;
    let param = |path: &str, method: &str, name: &str| -> Value {
        doc["paths"][path][method]["parameters"]
            .as_array()
            .unwrap_or_else(|| panic!("{method} {path} has parameters"))
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{method} {path} declares {name}"))["schema"]
            .clone()
    };
    let id_rule = |s: &Value| {
        assert_eq!(s["pattern"], "^[a-z0-9._-]{1,128}$", "{s}");
        assert_eq!(s["maxLength"], 128, "{s}");
    };
    id_rule(&param("/admin/backfills/{id}", "get", "id"));
    id_rule(&param("/admin/backfills", "get", "after"));
    id_rule(&param("/admin/audit", "get", "backfill"));
    for (path, method) in [("/admin/backfills", "get"), ("/admin/audit", "get")] {
        let limit = param(path, method, "limit");
        assert_eq!(
            (limit["minimum"].as_i64(), limit["maximum"].as_i64()),
            (Some(1), Some(500))
        );
    }
    for action in ["start", "pause", "resume", "retry", "validate"] {
        let path = format!("/admin/backfills/{{id}}/{action}");
        id_rule(&param(&path, "post", "id"));
        let key = param(&path, "post", "Idempotency-Key");
        assert_eq!(
            (key["minLength"].as_i64(), key["maxLength"].as_i64()),
            (Some(1), Some(200))
        );
        let responses = &doc["paths"][path.as_str()]["post"]["responses"];
        for status in [
            "400", "401", "403", "404", "421", "422", "429", "500", "503",
        ] {
            assert!(
                responses[status]["content"]["application/json"]["schema"].is_object(),
                "{action} declares {status} with a body"
            );
        }
        assert!(responses["401"]["headers"]["WWW-Authenticate"].is_object());
        assert!(responses["429"]["headers"]["Retry-After"].is_object());
    }
    let dry = "/admin/backfills/{id}/dry-run";
    id_rule(&param(dry, "post", "id"));
    for (name, min, max) in [("batches", 1, 20), ("sample", 0, 50)] {
        let limits = param(dry, "post", name);
        assert_eq!(
            (limits["minimum"].as_i64(), limits["maximum"].as_i64()),
            (Some(min), Some(max)),
            "{name}"
        );
    }
    let view = &doc["components"]["schemas"]["BackfillView"]["properties"];
    for field in ["bound", "checkpoint"] {
        let kinds: Vec<&Value> = view[field]["oneOf"]
            .as_array()
            .unwrap_or_else(|| panic!("{field} is a oneOf: {}", view[field]))
            .iter()
            .map(|s| &s["type"])
            .collect();
        for kind in ["integer", "string", "array", "null"] {
            assert!(
                kinds.iter().any(|k| *k == kind),
                "{field} allows {kind}: {kinds:?}"
            );
        }
    }
    server.stop().await;
}

/// API-2: a known path with an unsupported method answers 405 with an
/// `Allow` header and the JSON error body; an unknown path stays a JSON
/// 404. Nothing is audited or changed. Guard: the per-resource default
/// service in `http::admin::resource` (without it the catch-all answers
/// 404 and the test fails on the status).
#[actix_rt::test]
async fn api02_unsupported_method_on_a_known_path_is_405_with_allow() {
    let (db, engine, _hooks) = setup(3).await;
    let server = serve(admin(engine));
    let before = snapshot(&db, ID).await;
    let audits = db.scalar("SELECT count(*) AS v FROM backfill_audit").await;
    let cases = [
        ("TRACE", "/admin/backfills".to_string(), "GET"),
        ("POST", "/admin/backfills".to_string(), "GET"),
        ("DELETE", format!("/admin/backfills/{ID}"), "GET"),
        ("PUT", format!("/admin/backfills/{ID}"), "GET"),
        ("GET", format!("/admin/backfills/{ID}/pause"), "POST"),
        ("DELETE", format!("/admin/backfills/{ID}/start"), "POST"),
        ("PATCH", "/admin/audit".to_string(), "GET"),
        ("POST", "/openapi.json".to_string(), "GET"),
    ];
    for (method, path, allow) in cases {
        let client = awc::Client::default();
        let m = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
        let mut res = client
            .request(m, format!("{}{path}", server.url))
            .insert_header(("Authorization", format!("Bearer {OPERATOR}")))
            .insert_header(("Idempotency-Key", "api2"))
            .send()
            .await
            .expect("request");
        let body: Value = serde_json::from_slice(&res.body().await.expect("body")).expect("JSON");
        assert_eq!(res.status().as_u16(), 405, "{method} {path}: {body}");
        assert_eq!(
            res.headers().get("allow").and_then(|v| v.to_str().ok()),
            Some(allow),
            "{method} {path}"
        );
        assert_eq!(body["error"], "method_not_allowed", "{body}");
    }
    for path in ["/admin/backfills/x/reset", "/admin/nothing", "/admin"] {
        let r = call(&server.url, "DELETE", path, Some(OPERATOR), None).await;
        assert_eq!(r.status, 404, "{path}: {}", r.text);
        assert_eq!(r.body["error"], "not_found");
    }
    assert_eq!(snapshot(&db, ID).await, before, "nothing changed");
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_audit").await,
        audits,
        "no route ran, so nothing was audited"
    );
    server.stop().await;
}

/// API-3: 2,000 requests without credentials over loopback (64 at a time)
/// while an authorized client lists: every authorized request succeeds;
/// the rejections are audited as at most a few coalesced rows per source
/// and reason (one per window) whose counts add up to the requests made;
/// past the source's rate they are refused with 429, `Retry-After` and a
/// JSON body; the gate's counters (exported by `/metrics`) agree. Guards:
/// `FloodGate` (auditing each rejection with `audit_insert` writes 2,000
/// rows; without the rate there is no 429) and the order in
/// `Admin::authorize` (authentication before the gate).
#[actix_rt::test]
async fn api03_flood_of_rejected_requests_is_coalesced_and_authorized_requests_succeed() {
    use futures_util::StreamExt;
    use std::cell::Cell;
    const FLOOD: usize = 2_000;
    let (db, engine, _hooks) = setup(3).await;
    let admin = admin(engine);
    let gate = admin.clone();
    let server = serve(admin);
    let seq_before = db
        .scalar("SELECT coalesce(max(seq), 0) AS v FROM backfill_audit")
        .await;
    let done = Cell::new(false);
    let client = awc::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .finish();
    let flood = async {
        let answers: Vec<(u16, Option<String>, Value)> = futures_util::stream::iter(0..FLOOD)
            .map(|i| {
                let mut req = client.get(format!("{}/admin/backfills", server.url));
                if i % 2 == 1 {
                    req = req.insert_header(("Authorization", "Bearer not-a-known-token-1234"));
                }
                async move {
                    let mut res = req.send().await.expect("request");
                    let retry = res
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_string);
                    let body = res.body().await.expect("body");
                    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    (res.status().as_u16(), retry, body)
                }
            })
            .buffer_unordered(64)
            .collect()
            .await;
        done.set(true);
        answers
    };
    let operator = async {
        let mut served = 0;
        while !done.get() || served < 5 {
            let r = call(&server.url, "GET", "/admin/backfills", Some(READER), None).await;
            assert_eq!(
                r.status, 200,
                "authorized list during the flood: {}",
                r.text
            );
            assert_eq!(r.body["items"].as_array().map(Vec::len), Some(2));
            served += 1;
        }
        served
    };
    let (answers, served) = futures_util::join!(flood, operator);
    assert!(served >= 5);
    let unauthorized = answers.iter().filter(|a| a.0 == 401).count();
    let throttled = answers.iter().filter(|a| a.0 == 429).count();
    assert_eq!(unauthorized + throttled, FLOOD, "only 401 or 429");
    assert!(throttled > 0, "past the rate the source is refused");
    for (status, retry, body) in &answers {
        let code = if *status == 401 {
            "unauthorized"
        } else {
            "too_many_requests"
        };
        assert_eq!(body["error"], code, "{body}");
        if *status == 429 {
            let seconds: u64 = retry
                .as_deref()
                .expect("Retry-After")
                .parse()
                .expect("seconds");
            assert!(seconds >= 1);
        }
    }
    let counted = |outcome: &'static str| {
        let db = &db;
        async move {
            db.scalar(&format!(
                "SELECT coalesce(sum(request_count), 0)::bigint AS v FROM backfill_audit \
                 WHERE seq > {seq_before} AND outcome = '{outcome}' AND source = '127.0.0.1'"
            ))
            .await
        }
    };
    support::eventually("every rejection counted in the audit", || async {
        counted("unauthorized").await + counted("throttled").await == FLOOD as i64
    })
    .await;
    assert_eq!(counted("unauthorized").await, unauthorized as i64);
    assert_eq!(counted("throttled").await, throttled as i64);
    for outcome in ["unauthorized", "throttled"] {
        let rows = db
            .scalar(&format!(
                "SELECT count(*) AS v FROM backfill_audit WHERE seq > {seq_before} AND outcome = '{outcome}'"
            ))
            .await;
        assert!(
            (1..=3).contains(&rows),
            "{outcome}: {rows} rows, bounded by windows"
        );
    }
    use backfill::admin::FloodReason as Reason;
    assert_eq!(
        gate.flood().counted(Reason::Unauthorized),
        unauthorized as u64
    );
    assert_eq!(gate.flood().counted(Reason::Throttled), throttled as u64);
    assert_eq!(gate.flood().tracked_sources(), 1);
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// ADM-4: an Idempotency-Key is 1 to 200 printable ASCII bytes without
/// spaces. A missing, empty, 201-byte or spaced key is a 400 naming the
/// header that changes nothing; a key of exactly 200 bytes is accepted.
/// Guard: `Admin::require_key`.
#[actix_rt::test]
async fn adm04_idempotency_key_is_one_to_200_printable_bytes() {
    let (db, engine, _hooks) = setup(3).await;
    let server = serve(admin(engine));
    let start = format!("/admin/backfills/{ID}/start");
    let before = snapshot(&db, ID).await;
    let long = "k".repeat(201);
    for key in [None, Some(""), Some(long.as_str()), Some("two words")] {
        let r = call(&server.url, "POST", &start, Some(OPERATOR), key).await;
        assert_eq!(r.status, 400, "{key:?}: {}", r.text);
        assert_eq!(r.body["error"], "bad_request");
        let message = r.body["message"].as_str().unwrap_or_default();
        assert!(message.contains("Idempotency-Key"), "{message}");
    }
    assert_eq!(snapshot(&db, ID).await, before, "nothing changed");
    let key = "k".repeat(200);
    let r = call(&server.url, "POST", &start, Some(OPERATOR), Some(&key)).await;
    assert_eq!(
        (r.status, &r.body["outcome"]),
        (200, &Value::from("applied"))
    );
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// ADM-2, AUD-1: a page holding exactly `limit` items is the last one:
/// no `next_after` or `next_before` points past the end. Guard: the
/// `limit + 1` look-ahead in `Admin::list` and `Admin::audit`.
#[actix_rt::test]
async fn adm02_a_page_of_exactly_limit_items_is_the_last() {
    let (db, engine, _hooks) = setup(3).await;
    let server = serve(admin(engine));
    let page = |path: String| {
        let url = server.url.clone();
        async move { call(&url, "GET", &path, Some(READER), None).await.body }
    };
    let all = page("/admin/backfills?limit=2".into()).await;
    assert_eq!(all["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(all["next_after"], Value::Null, "two backfills, limit 2");
    let first = page("/admin/backfills?limit=1".into()).await;
    assert_eq!(first["next_after"], ID);
    for action in ["start", "pause", "resume"] {
        let path = format!("/admin/backfills/{ID}/{action}");
        let r = call(&server.url, "POST", &path, Some(OPERATOR), Some(action)).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let audited = db
        .scalar(&format!(
            "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{ID}'"
        ))
        .await;
    assert!(audited >= 3);
    let exact = page(format!("/admin/audit?backfill={ID}&limit={audited}")).await;
    assert_eq!(
        exact["items"].as_array().map(Vec::len),
        Some(audited as usize)
    );
    assert_eq!(
        exact["next_before"],
        Value::Null,
        "{audited} records, limit {audited}"
    );
    let short = page(format!("/admin/audit?backfill={ID}&limit={}", audited - 1)).await;
    assert!(short["next_before"].is_i64(), "one record left: {short}");
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// API-3, AUD-1: a coalesced window's audit row describes the window's
/// requests (their backfill and action, no Idempotency-Key, the 401's
/// message, no actor, authority `none`) and counts the others; the
/// throttled window's row says why. Guard: the `NewAudit` that
/// `FloodGate::flush` writes.
#[actix_rt::test]
async fn api03_a_coalesced_row_describes_the_first_request_of_its_window() {
    use backfill::admin::FloodLimits;
    let (db, engine, _hooks) = setup(3).await;
    let admin = admin(engine).with_flood_limits(FloodLimits {
        burst: 2,
        per_second: 1,
        ..FloodLimits::default()
    });
    let server = serve(admin);
    let pause = format!("/admin/backfills/{ID}/pause");
    for key in ["first-key", "second-key"] {
        let r = call(&server.url, "POST", &pause, None, Some(key)).await;
        assert_eq!(r.status, 401, "{}", r.text);
    }
    let r = call(&server.url, "POST", &pause, None, Some("third-key")).await;
    assert_eq!(r.status, 429, "{}", r.text);
    let row = |outcome: &'static str| {
        let db = &db;
        async move {
            db.text(&format!(
                "SELECT (SELECT concat_ws('|', backfill_id, action, coalesce(actor, '-'), \
                 authority, correlation, detail, request_count, source) \
                 FROM backfill_audit WHERE outcome = '{outcome}') AS v"
            ))
            .await
        }
    };
    assert_eq!(
        row("unauthorized").await.as_deref(),
        Some(
            "items.counter|pause|-|none|\
             no bearer token was sent: a backfill capability is required (send the header \
             `Authorization: Bearer <token>`; backfill ctl reads it from BACKFILL_TOKEN or \
             --token-file)|2|127.0.0.1"
        ),
        "no correlation: the caller chose it (AUD-3)"
    );
    support::eventually("the throttled window is written", || async {
        row("throttled").await.is_some()
    })
    .await;
    assert_eq!(
        row("throttled").await.as_deref(),
        Some(
            "items.counter|pause|-|none|\
             too many rejected requests from this caller|1|127.0.0.1"
        )
    );
    server.stop().await;
}

/// API-3, AUD-1: a 401 is answered only once its rejection is in the
/// audit: while a session holds the audit table locked, the writer waits
/// on the lock and so does the answer; released, the answer arrives with
/// the row already committed. Guard: `FloodGate::written` (without the
/// wait, the 401 arrives while its row cannot have been written).
#[actix_rt::test]
async fn api03_a_401_answers_only_once_its_rejection_is_audited() {
    use backfill::admin::FloodLimits;
    let (db, engine, _hooks) = setup(3).await;
    let admin = admin(engine).with_flood_limits(FloodLimits {
        audit_wait: std::time::Duration::from_secs(60),
        ..FloodLimits::default()
    });
    let server = serve(admin);
    let mut blocker = db.connect().await;
    blocker
        .batch_execute("BEGIN; LOCK TABLE backfill_audit IN SHARE ROW EXCLUSIVE MODE")
        .await
        .expect("lock the audit table");
    let url = server.url.clone();
    let mut request =
        actix_rt::spawn(async move { call(&url, "GET", "/admin/backfills", None, None).await });
    wait_for_lock_waiters(&db, 1).await;
    let early = actix_rt::time::timeout(std::time::Duration::from_millis(500), &mut request).await;
    assert!(early.is_err(), "answered before its rejection was written");
    blocker.batch_execute("COMMIT").await.expect("release");
    let r = request.await.expect("task");
    assert_eq!(r.status, 401, "{}", r.text);
    assert_eq!(
        db.scalar(
            "SELECT coalesce(sum(request_count), 0)::bigint AS v FROM backfill_audit \
             WHERE outcome = 'unauthorized'"
        )
        .await,
        1,
        "the row is there when the answer is"
    );
    server.stop().await;
}

/// Send one request with `headers` (a `Host` among them replaces the
/// URL's); the answer and its headers, names in lower case.
async fn send(
    server: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (Resp, Vec<(String, String)>) {
    let client = awc::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .finish();
    let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
    let mut req = client.request(method, format!("{server}{path}"));
    for (name, value) in headers {
        req = req.insert_header((*name, *value));
    }
    let mut res = req.send().await.expect("request");
    let head: Vec<(String, String)> = res
        .headers()
        .iter()
        .map(|(k, v)| {
            let value = v.to_str().unwrap_or("(not text)").to_string();
            (k.as_str().to_ascii_lowercase(), value)
        })
        .collect();
    let bytes = res.body().limit(4 << 20).await.expect("body");
    let text = String::from_utf8_lossy(&bytes).to_string();
    let resp = Resp {
        status: res.status().as_u16(),
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    };
    (resp, head)
}

/// An admin service in trusted-network mode (AUTH-2) over `engine`.
fn trusted_admin(engine: backfill::Engine) -> backfill::admin::Admin {
    backfill::admin::Admin::new(
        engine,
        backfill::admin::AdminConfig {
            auth: backfill::admin::AuthConfig::TrustedNetwork,
            auto_backfills: false,
            required: Default::default(),
        },
    )
}

/// Rejection limits that never answer 429 in a test of a few hundred
/// requests, so every refusal lands in its own reason's row.
fn roomy() -> backfill::admin::FloodLimits {
    backfill::admin::FloodLimits {
        burst: 10_000,
        ..backfill::admin::FloodLimits::default()
    }
}

/// `count|sum of request_count` of the audit rows with `outcome`.
async fn coalesced(db: &support::TestDb, outcome: &str) -> String {
    db.text(&format!(
        "SELECT concat_ws('|', count(*), coalesce(sum(request_count), 0)) AS v \
         FROM backfill_audit WHERE outcome = '{outcome}'"
    ))
    .await
    .unwrap_or_default()
}

/// AUTH-3: in trusted-network mode a request whose `Host` is not on the
/// allow-list (what a DNS-rebinding page sends: its own domain, resolved
/// to this address) answers 421 with a JSON error, returns no data,
/// changes nothing and is counted into one coalesced audit row; the
/// loopback names, the listen address and a configured name are answered,
/// in any case and with any port. Guard: the Host check in
/// `Admin::boundary`.
#[actix_rt::test]
async fn auth03_foreign_host_is_refused_in_trusted_network_mode() {
    let (db, engine, _hooks) = setup(3).await;
    let admin = trusted_admin(engine).with_allowed_hosts(["admin.internal:9000".to_string()]);
    let server = serve(admin);
    let port = server.url.rsplit(':').next().expect("port").to_string();
    let before = snapshot(&db, ID).await;
    let start = format!("/admin/backfills/{ID}/start");
    let foreign = [
        "attacker.example".to_string(),
        format!("attacker.example:{port}"),
        format!("localhost.attacker.example:{port}"),
        "127.0.0.1.nip.io".to_string(),
    ];
    for host in &foreign {
        for (method, path) in [("GET", "/admin/backfills"), ("POST", start.as_str())] {
            let headers = [("Host", host.as_str()), ("Idempotency-Key", "rebind")];
            let (r, _) = send(&server.url, method, path, &headers).await;
            assert_eq!(r.status, 421, "{method} {path} Host {host}: {}", r.text);
            assert_eq!(r.body["error"], "misdirected_request", "{}", r.text);
            assert_no_backfill_data(&r, ID);
        }
    }
    assert_eq!(snapshot(&db, ID).await, before, "nothing changed");
    assert_eq!(coalesced(&db, "misdirected_request").await, "1|8");
    for host in [
        format!("localhost:{port}"),
        format!("LOCALHOST.:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "Admin.Internal".to_string(),
    ] {
        let (r, _) = send(&server.url, "GET", "/admin/backfills", &[("Host", &host)]).await;
        assert_eq!(r.status, 200, "Host {host}: {}", r.text);
    }
    let headers = [("Host", "localhost"), ("Idempotency-Key", "local")];
    let (r, _) = send(&server.url, "POST", &start, &headers).await;
    assert_eq!(
        (r.status, &r.body["outcome"]),
        (200, &Value::from("applied"))
    );
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// AUTH-3 on every route of a host's admin listener: in trusted-network
/// mode `/metrics`, the web client and `/openapi.json` answer a foreign
/// `Host` (a DNS-rebinding page's) with 421 and the JSON error, carry none
/// of their content and are audited as one coalesced refusal; the
/// loopback names are answered. Guard: the allow-list check in front of
/// those routes (without it `/metrics` is served to any Host).
#[actix_rt::test]
async fn auth03_a_foreign_host_reads_no_route_of_a_trusted_listener() {
    use backfill::host::{Application, Host, HostConfig};
    use backfill::repair::{DefinitionError, Registry};
    use support::http::request;
    struct Nothing;
    #[backfill::async_trait]
    impl Application for Nothing {
        fn registry(&self) -> Result<Registry, DefinitionError> {
            Ok(Registry::new())
        }
    }
    let db = support::test_db().await;
    let mut config = HostConfig::new(db.url.clone());
    config.listen = "127.0.0.1:0".parse().expect("address");
    config.admin_listen = "127.0.0.1:0".parse().expect("address");
    config.engine = support::engine_config();
    config.admin_auth =
        backfill::admin::AuthConfig::from_sources(None, None, true).expect("trusted network");
    let host = Host::start(config, Nothing).await.expect("host");
    let routes = ["/metrics", "/ui", "/ui/app.js", "/openapi.json"];
    for path in routes {
        let refused = request(
            host.admin_addr,
            "GET",
            path,
            &[("Host", "attacker.example")],
            None,
        )
        .await;
        assert_eq!(refused.status, 421, "{path}: {}", refused.text);
        let body: Value = serde_json::from_str(&refused.text).expect("a JSON error");
        assert_eq!(body["error"], "misdirected_request", "{path}");
        assert!(
            !refused.text.contains("backfill_") && !refused.text.contains("openapi"),
            "{path} leaks: {}",
            refused.text
        );
        let local = format!("localhost:{}", host.admin_addr.port());
        let served = request(host.admin_addr, "GET", path, &[("Host", &local)], None).await;
        assert_eq!(served.status, 200, "{path}: {}", served.text);
    }
    host.stop().await;
    assert_eq!(coalesced(&db, "misdirected_request").await, "1|4");
}

/// AUTH-3: in both modes a state-changing request whose `Origin` or
/// `Sec-Fetch-Site` says another site sent it (a cross-site form post
/// needs no preflight) is refused with 403 `cross_site`: 300 of them
/// change nothing, store no response and leave one coalesced audit row
/// and nothing else. A cross-site read and a same-origin post are
/// answered. Guard: `cross_site` in `Admin::boundary`.
#[actix_rt::test]
async fn auth03_cross_site_posts_are_refused_in_both_modes() {
    const POSTS: usize = 300;
    for trusted in [false, true] {
        let (db, engine, _hooks) = setup(3).await;
        let admin = if trusted {
            trusted_admin(engine)
        } else {
            admin(engine)
        };
        let server = serve(admin.with_flood_limits(roomy()));
        let bearer = format!("Bearer {OPERATOR}");
        let token: Vec<(&str, &str)> = if trusted {
            vec![]
        } else {
            vec![("Authorization", bearer.as_str())]
        };
        let before = snapshot(&db, ID).await;
        let start = format!("/admin/backfills/{ID}/start");
        for i in 0..POSTS {
            let key = format!("csrf-{i}");
            let cross = match i % 4 {
                0 => ("Origin", "https://evil.example"),
                1 => ("Sec-Fetch-Site", "cross-site"),
                2 => ("Origin", "null"),
                _ => ("Origin", "http://127.0.0.1.evil.example"),
            };
            let mut headers = token.clone();
            headers.extend([cross, ("Idempotency-Key", key.as_str())]);
            let (r, _) = send(&server.url, "POST", &start, &headers).await;
            assert_eq!(r.status, 403, "trusted {trusted}, {cross:?}: {}", r.text);
            assert_eq!(r.body["error"], "cross_site", "{}", r.text);
            assert_no_backfill_data(&r, ID);
        }
        assert_eq!(snapshot(&db, ID).await, before, "nothing changed");
        assert_eq!(
            db.scalar("SELECT count(*) AS v FROM backfill_request")
                .await,
            0,
            "no response stored"
        );
        assert_eq!(coalesced(&db, "cross_site").await, "1|300");
        assert_eq!(
            db.scalar("SELECT count(*) AS v FROM backfill_audit").await,
            1,
            "no audit growth beyond the coalesced row"
        );
        let mut headers = token.clone();
        headers.push(("Origin", "https://evil.example"));
        let (r, _) = send(&server.url, "GET", "/admin/backfills", &headers).await;
        assert_eq!(r.status, 200, "a read is no state change: {}", r.text);
        let mut headers = token.clone();
        headers.extend([
            ("Origin", server.url.as_str()),
            ("Sec-Fetch-Site", "same-origin"),
            ("Idempotency-Key", "same-origin"),
        ]);
        let (r, _) = send(&server.url, "POST", &start, &headers).await;
        assert_eq!(r.status, 200, "same origin: {}", r.text);
        assert_eq!(r.body["outcome"], "applied");
        server.stop().await;
        assert_audit_complete(&db).await;
    }
}

/// The security headers every admin answer carries (AUTH-4).
const SECURITY_HEADERS: [(&str, &str); 5] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self' \
         'unsafe-inline'; img-src 'self'; base-uri 'none'; form-action 'none'; \
         frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
];

/// AUTH-4: every answer of the admin routes, whatever its status (200,
/// 400, 401, 403, 404, 405 or 409), the OpenAPI
/// document and the web client carry the CSP, nosniff, no-referrer, no
/// framing and no-store. Guard: `http::security_headers` on each resource.
#[actix_rt::test]
async fn auth04_every_admin_response_carries_the_security_headers() {
    let (_db, engine, _hooks) = setup(3).await;
    let server = serve_with_ui(admin(engine).with_flood_limits(roomy()));
    let operator = format!("Bearer {OPERATOR}");
    let reader = format!("Bearer {READER}");
    let pause = format!("/admin/backfills/{ID}/pause");
    type Case<'a> = (&'a str, String, Vec<(&'a str, &'a str)>, u16);
    let cases: Vec<Case> = vec![
        (
            "GET",
            "/admin/backfills".into(),
            vec![("Authorization", &operator)],
            200,
        ),
        (
            "GET",
            "/admin/backfills/BAD".into(),
            vec![("Authorization", &operator)],
            400,
        ),
        ("GET", "/admin/audit".into(), vec![], 401),
        (
            "POST",
            pause.clone(),
            vec![("Authorization", &reader), ("Idempotency-Key", "h")],
            403,
        ),
        (
            "POST",
            pause.clone(),
            vec![("Authorization", &operator), ("Idempotency-Key", "h")],
            409,
        ),
        (
            "DELETE",
            "/admin/nothing".into(),
            vec![("Authorization", &operator)],
            404,
        ),
        (
            "DELETE",
            pause.clone(),
            vec![("Authorization", &operator)],
            405,
        ),
        ("GET", "/openapi.json".into(), vec![], 200),
        ("GET", "/ui".into(), vec![], 200),
        ("GET", "/ui/app.js".into(), vec![], 200),
    ];
    for (method, path, headers, status) in cases {
        let (r, head) = send(&server.url, method, &path, &headers).await;
        assert_eq!(r.status, status, "{method} {path}: {}", r.text);
        for (name, value) in SECURITY_HEADERS {
            let got: Vec<&str> = head
                .iter()
                .filter(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
                .collect();
            assert_eq!(got, [value], "{method} {path}: {name}");
        }
    }
    server.stop().await;
}

/// AUD-3: a tokenless request with escape sequences, CR/LF and a
/// right-to-left override in its path, and its own Idempotency-Key and
/// X-Request-Id, leaves an audit row with none of them: the ID is a
/// placeholder with its length and no correlation is kept. So do the
/// same request from a read-only principal (403) and from an operator
/// (400). A row holding such characters anyway (an older writer's) is
/// shown escaped by the API. Guards: `audit_id` (the placeholder), the
/// `Rejected` of `Admin::refuse` (no correlation) and `audit_text`.
#[actix_rt::test]
async fn aud03_tokenless_control_characters_leave_no_audit_trace() {
    let (db, engine, _hooks) = setup(3).await;
    let server = serve(admin(engine));
    let raw = "\u{1b}[31mRED\n\rfake line\u{202e}txt";
    let path = "/admin/backfills/%1B%5B31mRED%0A%0Dfake%20line%E2%80%AEtxt/start";
    let operator = format!("Bearer {OPERATOR}");
    let reader = format!("Bearer {READER}");
    for (token, status) in [(None, 401), (Some(&reader), 403), (Some(&operator), 400)] {
        let mut headers = vec![
            ("Idempotency-Key", "attacker-chosen-key"),
            ("X-Request-Id", "attacker-chosen-correlation"),
        ];
        if let Some(token) = token {
            headers.push(("Authorization", token.as_str()));
        }
        let (r, _) = send(&server.url, "POST", path, &headers).await;
        assert_eq!(r.status, status, "{token:?}: {}", r.text);
    }
    let rows = db
        .text(
            "SELECT string_agg(concat_ws('|', backfill_id, action, actor, authority, \
             correlation, outcome, detail, source), E'\\n' ORDER BY seq) AS v FROM backfill_audit",
        )
        .await
        .expect("audit rows");
    let placeholder = format!("(invalid ID, {} bytes)", raw.len());
    assert_eq!(rows.lines().count(), 3, "{rows}");
    for line in rows.lines() {
        assert!(line.starts_with(&format!("{placeholder}|start|")), "{line}");
        assert!(!line.contains("attacker"), "{line}");
        assert!(!line.contains("RED"), "{line}");
        assert!(
            !line.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{line:?}"
        );
    }
    db.exec(
        "INSERT INTO backfill_audit (backfill_id, action, authority, correlation, outcome) \
         VALUES (E'\\x1b[31mRED\\r\\nx', 'start', 'none', E'\\u202eevil', 'unauthorized')",
    )
    .await;
    let (r, _) = send(
        &server.url,
        "GET",
        "/admin/audit?limit=1",
        &[("Authorization", &reader)],
    )
    .await;
    let shown = &r.body["items"][0];
    assert_eq!(
        shown["backfill_id"], "\\u{001b}[31mRED\\u{000d}\\u{000a}x",
        "{}",
        r.text
    );
    assert_eq!(shown["correlation"], "\\u{202e}evil", "{}", r.text);
    server.stop().await;
}

/// AUD-3: 300 refused requests of one read-only principal in one window
/// leave one coalesced row naming the principal with the count, and no
/// correlation; a second principal's refusals get a row of their own.
/// Guard: `Caller::Principal` in `Admin::refuse` (auditing each 403 with
/// `audit_insert` writes 300 rows).
#[actix_rt::test]
async fn aud03_rejections_of_one_principal_are_coalesced() {
    let (db, engine, _hooks) = setup(3).await;
    let server = serve(admin(engine).with_flood_limits(roomy()));
    let reader = format!("Bearer {READER}");
    let community = format!("Bearer {COMMUNITY}");
    let pause = format!("/admin/backfills/{ID}/pause");
    for i in 0..300 {
        let key = format!("ro-{i}");
        let headers = [
            ("Authorization", reader.as_str()),
            ("Idempotency-Key", key.as_str()),
        ];
        let (r, _) = send(&server.url, "POST", &pause, &headers).await;
        assert_eq!(r.status, 403, "{}", r.text);
    }
    let (r, _) = send(
        &server.url,
        "GET",
        "/admin/backfills",
        &[("Authorization", &community)],
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text);
    assert_eq!(
        db.text(
            "SELECT string_agg(concat_ws('|', backfill_id, action, actor, authority, \
             coalesce(correlation, '-'), request_count), ',' ORDER BY actor) AS v \
             FROM backfill_audit WHERE outcome = 'forbidden'"
        )
        .await
        .as_deref(),
        Some("*|list|moderator|token|-|1,items.counter|pause|viewer|token|-|300")
    );
    server.stop().await;
}

/// AUD-3 (ADM-4): idempotency keys belong to the principal that sent
/// them. A second operator who reuses the first one's key gets the answer
/// to their own request (converged, or their own action applied), never
/// the first one's stored response or a 422; each principal's retry
/// still replays their own. Guard: the principal in `store::request_*`.
#[actix_rt::test]
async fn aud03_a_second_principal_reusing_a_key_gets_its_own_answer() {
    use backfill::admin::{AdminConfig, AuthConfig, Principal};
    let (db, engine, _hooks) = setup(3).await;
    let both = ["backfill:read", "backfill:operate"];
    let principals = vec![
        Principal::from_token("first", OPERATOR, &both).expect("principal"),
        Principal::from_token("second", READER, &both).expect("principal"),
    ];
    let admin = backfill::admin::Admin::new(
        engine,
        AdminConfig {
            auth: AuthConfig::Tokens(principals),
            auto_backfills: false,
            required: Default::default(),
        },
    );
    let server = serve(admin);
    let start = format!("/admin/backfills/{ID}/start");
    let pause = format!("/admin/backfills/{ID}/pause");
    let r = call(&server.url, "POST", &start, Some(OPERATOR), Some("shared")).await;
    assert_eq!(r.body["outcome"], "applied", "{}", r.text);
    let r = call(&server.url, "POST", &start, Some(READER), Some("shared")).await;
    assert_eq!(
        (r.status, &r.body["outcome"]),
        (200, &Value::from("converged")),
        "{}",
        r.text
    );
    let r = call(&server.url, "POST", &pause, Some(READER), Some("shared-2")).await;
    assert_eq!(r.body["outcome"], "applied", "{}", r.text);
    let r = call(
        &server.url,
        "POST",
        &pause,
        Some(OPERATOR),
        Some("shared-2"),
    )
    .await;
    assert_eq!(
        r.body["outcome"], "converged",
        "not a 422 or the other's answer: {}",
        r.text
    );
    let r = call(&server.url, "POST", &start, Some(OPERATOR), Some("shared")).await;
    assert_eq!(
        r.body["outcome"], "applied",
        "first's own replay: {}",
        r.text
    );
    assert_eq!(
        db.text(
            "SELECT string_agg(concat_ws('|', actor, action, outcome), ',' ORDER BY seq) AS v \
             FROM backfill_audit"
        )
        .await
        .as_deref(),
        Some(
            "first|start|applied,second|start|converged,second|pause|applied,\
             first|pause|converged,first|start|replayed"
        )
    );
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// AUTH-1: `GET /admin/me` tells a valid token what it may do, so a client
/// offers only that: the reader holds read alone, the operator read and
/// operate, a principal with roles that are no capabilities none at all
/// (and no 403: knowing that is its answer), and a token-less or unknown
/// caller is refused (401) like on every route. Guard: `Admin::me`
/// reporting the authority's capabilities.
#[actix_rt::test]
async fn auth01_me_reports_the_callers_capabilities() {
    let (_db, engine, _hooks) = setup(1).await;
    let server = serve(admin(engine.clone()));
    let reader = call(&server.url, "GET", "/admin/me", Some(READER), None).await;
    assert_eq!(reader.status, 200, "{}", reader.text);
    assert_eq!(
        reader.body["capabilities"],
        serde_json::json!(["backfill:read"])
    );
    assert_eq!(reader.body["authority"], "token");
    let operator = call(&server.url, "GET", "/admin/me", Some(OPERATOR), None).await;
    assert_eq!(
        operator.body["capabilities"],
        serde_json::json!(["backfill:read", "backfill:operate"]),
        "{}",
        operator.text
    );
    assert_eq!(operator.body["principal"], "ops");
    let none = call(&server.url, "GET", "/admin/me", Some(COMMUNITY), None).await;
    assert_eq!(none.status, 200, "{}", none.text);
    assert_eq!(none.body["capabilities"], serde_json::json!([]));
    for token in [None, Some("not-a-known-token-0123")] {
        let refused = call(&server.url, "GET", "/admin/me", token, None).await;
        assert_eq!(refused.status, 401, "{}", refused.text);
        assert!(refused.body.get("capabilities").is_none());
    }
    server.stop().await;
}

/// AUTH-1: a 401 says whether a bearer token was sent (and never echoes
/// it) and how one is passed, on a read and on an action; the code stays
/// `unauthorized`. Guard: the `token_sent` of `AdminError::Unauthorized`.
#[actix_rt::test]
async fn auth01_a_401_tells_a_missing_token_from_a_refused_one() {
    let (_db, engine, _hooks) = setup(1).await;
    let server = serve(admin(engine.clone()));
    let wrong = "not-a-known-token-0123";
    for (method, path, key) in [
        ("GET", "/admin/backfills".to_string(), None),
        ("POST", format!("/admin/backfills/{ID}/pause"), Some("k-1")),
    ] {
        let none = call(&server.url, method, &path, None, key).await;
        let refused = call(&server.url, method, &path, Some(wrong), key).await;
        for r in [&none, &refused] {
            assert_eq!(r.status, 401, "{}", r.text);
            assert_eq!(r.body["error"], "unauthorized", "{}", r.text);
            let message = r.body["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("Authorization: Bearer")
                    && message.contains("BACKFILL_TOKEN")
                    && message.contains("--token-file"),
                "{}",
                r.text
            );
            assert!(
                !r.text.contains(wrong),
                "the token is not echoed: {}",
                r.text
            );
        }
        assert!(
            none.body["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("no bearer token was sent")),
            "{}",
            none.text
        );
        assert!(
            refused.body["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("the bearer token sent matches no principal")),
            "{}",
            refused.text
        );
    }
    server.stop().await;
}

/// ADM-1: the 404 of an unknown backfill ID names, in `did_you_mean`, at
/// most 3 registered or stored IDs nearest it (nearest first, none far
/// away), on a read and on an action; a caller without a token or with
/// too few capabilities is answered 401 or 403 first, with no IDs.
/// Guard: `Admin::with_suggestions` at the HTTP boundary.
#[actix_rt::test]
async fn adm01_an_unknown_id_is_answered_with_the_nearest_known_ids() {
    let (db, engine, _hooks) = setup(1).await;
    // Stored IDs this process has no definition for, copied from ID's row.
    for other in [
        "items.counted",
        "items.counter1",
        "items.counter2",
        "items.counter3",
        "far.away.v1",
    ] {
        db.exec(&format!(
            "INSERT INTO backfill SELECT (jsonb_populate_record(NULL::backfill, \
             to_jsonb(b) || jsonb_build_object('id', '{other}'))).* FROM backfill b \
             WHERE id = '{ID}'"
        ))
        .await;
    }
    let server = serve(admin(engine.clone()));
    let typo = "items.countr";
    let near = serde_json::json!(["items.counter", "items.counted", "items.counter1"]);
    let read = call(
        &server.url,
        "GET",
        &format!("/admin/backfills/{typo}"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(read.status, 404, "{}", read.text);
    assert_eq!(read.body["error"], "not_found");
    assert_eq!(read.body["did_you_mean"], near, "{}", read.text);
    let pause = format!("/admin/backfills/{typo}/pause");
    let act = call(&server.url, "POST", &pause, Some(OPERATOR), Some("k-1")).await;
    assert_eq!(act.status, 404, "{}", act.text);
    assert_eq!(act.body["did_you_mean"], near, "{}", act.text);
    let far = call(
        &server.url,
        "GET",
        "/admin/backfills/zzzz.nothing.v1",
        Some(READER),
        None,
    )
    .await;
    assert_eq!(far.status, 404, "{}", far.text);
    assert!(far.body.get("did_you_mean").is_none(), "{}", far.text);
    for (token, status) in [
        (None, 401),
        (Some("not-a-known-token-0123"), 401),
        (Some(READER), 403),
    ] {
        let refused = call(&server.url, "POST", &pause, token, Some("k-2")).await;
        assert_eq!(refused.status, status, "{}", refused.text);
        assert!(
            refused.body.get("did_you_mean").is_none(),
            "{}",
            refused.text
        );
        assert!(!refused.text.contains("items.counter"), "{}", refused.text);
    }
    server.stop().await;
}

/// OBS-4: a backfill's timeline holds, in order, every change the runtime
/// or an operator made, each recorded by the transaction that made it,
/// and the operator actions that took effect: started, claimed, blocked
/// with its diagnostic, retried, claimed again, validating, claimed for
/// validation, completed with the validation's outcome. A limit returns
/// the newest entries; an unknown ID is a 404, a bad limit a 400. Guard:
/// the timeline triggers (without them only the two actions remain).
#[actix_rt::test]
async fn obs04_timeline_records_each_change_and_the_actions_in_order() {
    use backfill::repair::RepairError;
    let (db, engine, hooks) = setup(8).await;
    let server = serve(admin(engine.clone()));
    let action = |verb: &'static str, key: &'static str| {
        let url = server.url.clone();
        async move {
            let path = format!("/admin/backfills/{ID}/{verb}");
            let r = call(&url, "POST", &path, Some(OPERATOR), Some(key)).await;
            assert_eq!(r.status, 200, "{}", r.text);
        }
    };
    action("start", "t-start").await;
    *hooks.fail_after_mutate.lock() = Some(RepairError::Blocked(
        "prerequisite missing: run the migration".into(),
    ));
    support::drive(&engine, "w1").await;
    *hooks.fail_after_mutate.lock() = None;
    action("retry", "t-retry").await;
    support::drive(&engine, "w2").await;

    let path = format!("/admin/backfills/{ID}/timeline");
    let timeline = call(&server.url, "GET", &path, Some(READER), None).await;
    assert_eq!(timeline.status, 200, "{}", timeline.text);
    let items = timeline.body["items"].as_array().expect("items").clone();
    let text = |v: &Value| v.as_str().unwrap_or("-").to_string();
    let lines: Vec<String> = items
        .iter()
        .rev()
        .map(|e| {
            format!(
                "{} {} {}->{} {} {}",
                text(&e["source"]),
                text(&e["kind"]),
                text(&e["from_state"]),
                text(&e["state"]),
                text(&e["actor"]),
                text(&e["detail"]),
            )
        })
        .collect();
    let actor = "ops";
    assert_eq!(
        lines,
        [
            format!("operator start pending->running {actor} -"),
            "runtime state pending->running - -".to_string(),
            "runtime claimed -->running w1 -".to_string(),
            "runtime state running->blocked - blocked: prerequisite missing: run the migration"
                .to_string(),
            format!("operator retry blocked->running {actor} -"),
            "runtime state blocked->running - -".to_string(),
            "runtime claimed -->running w2 -".to_string(),
            "runtime state running->validating - -".to_string(),
            "runtime claimed -->validating w2 -".to_string(),
            "runtime state validating->completed - validation success".to_string(),
        ],
        "{}",
        timeline.text
    );

    let newest = call(
        &server.url,
        "GET",
        &format!("{path}?limit=2"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(newest.body["items"].as_array().map(Vec::len), Some(2));
    assert_eq!(newest.body["items"][0]["state"], "completed");
    let bad = call(
        &server.url,
        "GET",
        &format!("{path}?limit=0"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    let unknown = call(
        &server.url,
        "GET",
        "/admin/backfills/no.such.backfill/timeline",
        Some(READER),
        None,
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
    drop(db);
    server.stop().await;
}

/// OBS-4: an action may carry the operator's reason in the
/// `Backfill-Reason` header (printable ASCII with UTF-8 percent-encoded):
/// it is stored with the action's audit row, a control character escaped,
/// and shown by the audit and the timeline. A header the OpenAPI document
/// does not allow (too long, raw non-ASCII bytes) is a 400 naming it and
/// changes nothing. Guards: the reason bound into the audit insert,
/// `require_reason` on the action path.
#[actix_rt::test]
async fn obs04_an_actions_reason_is_audited_and_shown_in_the_timeline() {
    let (db, engine, _hooks) = setup(8).await;
    let server = serve(admin(engine.clone()));
    let bearer = format!("Bearer {OPERATOR}");
    let start = format!("/admin/backfills/{ID}/start");
    let with_reason = |key: &'static str, reason: String| {
        let (url, start, bearer) = (server.url.clone(), start.clone(), bearer.clone());
        async move {
            let headers = [
                ("Authorization", bearer.as_str()),
                ("Idempotency-Key", key),
                ("Backfill-Reason", reason.as_str()),
            ];
            send(&url, "POST", &start, &headers).await.0
        }
    };
    let before = snapshot(&db, ID).await;
    for (key, reason) in [("r-long", "a".repeat(2001))] {
        let refused = with_reason(key, reason).await;
        assert_eq!(refused.status, 400, "{key}: {}", refused.text);
        assert_eq!(refused.body["error"], "bad_request", "{}", refused.text);
        assert!(
            refused.body["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("the Backfill-Reason header: ")),
            "{}",
            refused.text
        );
    }
    // Raw UTF-8 bytes in a header are not ASCII: refused by name too.
    let client = awc::Client::default();
    let mut raw = client
        .post(format!("{}{start}", server.url))
        .insert_header(("Authorization", bearer.as_str()))
        .insert_header(("Idempotency-Key", "r-raw"))
        .insert_header((
            "Backfill-Reason",
            awc::http::header::HeaderValue::from_bytes("café".as_bytes()).expect("bytes"),
        ))
        .send()
        .await
        .expect("request");
    assert_eq!(raw.status().as_u16(), 400);
    let text = raw.body().await.expect("body");
    assert!(String::from_utf8_lossy(&text).contains("Backfill-Reason"));
    assert_eq!(
        snapshot(&db, ID).await,
        before,
        "a refused reason changes nothing"
    );

    let reason = "quiet hours — café\\u{000a}";
    let sent = format!(
        "{}%0A",
        backfill::admin::encode_reason("quiet hours — café")
    );
    let applied = with_reason("r-ok", sent).await;
    assert_eq!(applied.status, 200, "{}", applied.text);
    let audit = call(
        &server.url,
        "GET",
        &format!("/admin/audit?backfill={ID}&limit=1"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(audit.body["items"][0]["action"], "start", "{}", audit.text);
    assert_eq!(audit.body["items"][0]["reason"], reason, "{}", audit.text);
    let timeline = call(
        &server.url,
        "GET",
        &format!("/admin/backfills/{ID}/timeline"),
        Some(READER),
        None,
    )
    .await;
    let items = timeline.body["items"].as_array().expect("items");
    let action = items
        .iter()
        .find(|e| e["source"] == "operator")
        .expect("the start in the timeline");
    assert_eq!(action["reason"], reason, "{}", timeline.text);
    assert!(
        items
            .iter()
            .filter(|e| e["source"] == "runtime")
            .all(|e| e["reason"].is_null()),
        "{}",
        timeline.text
    );
    server.stop().await;
}

/// OBS-5: the current rate is the server's, from the samples the claim
/// holder recorded: unknown with one sample, then rows over time between
/// the first and the newest sample of the live claim, the same in the
/// detail and the list, with a sparkline. Only the claim's holder, at
/// its generation, on a `running` backfill, records a sample. A pause
/// leaves no rate and shows as a paused interval in the run chart, closed
/// by the resume; the new claim's rate starts over rather than spanning
/// the pause. Guards: the owner and generation fence of
/// `backfill_progress_sample`, the generation filter of the rate.
#[actix_rt::test]
async fn obs05_rates_come_from_the_recorded_samples_of_the_live_claim() {
    let (db, engine, _hooks) = setup(40).await;
    let server = serve(admin(engine.clone()));
    let post = |verb: &'static str| {
        let url = server.url.clone();
        async move {
            let path = format!("/admin/backfills/{ID}/{verb}");
            let r = call(&url, "POST", &path, Some(OPERATOR), Some(verb)).await;
            assert_eq!(r.status, 200, "{}", r.text);
        }
    };
    let get = |path: String| {
        let url = server.url.clone();
        async move {
            let r = call(&url, "GET", &path, Some(READER), None).await;
            assert_eq!(r.status, 200, "{}", r.text);
            r.body
        }
    };
    let detail = format!("/admin/backfills/{ID}");
    let claims = |g: i64| vec![(ID.to_string(), None, g)];
    post("start").await;
    let mut claim = engine
        .claim_next("w1", &[])
        .await
        .expect("claim")
        .expect("claimed");
    let sample = |worker: &'static str, g: i64| {
        let engine = engine.clone();
        async move {
            engine
                .sample_progress(worker, &claims(g))
                .await
                .expect("sample")
        }
    };
    assert_eq!(sample("w1", claim.generation).await, 1);
    let one = get(detail.clone()).await;
    assert!(one["progress"]["rows_per_second"].is_null(), "{one}");

    for _ in 0..2 {
        let outcome = engine.run_batch(&mut claim).await.expect("batch");
        assert!(matches!(outcome, BatchOutcome::Committed { .. }));
    }
    assert_eq!(sample("w1", claim.generation).await, 1);
    assert_eq!(sample("w2", claim.generation).await, 0, "not the owner");
    assert_eq!(sample("w1", claim.generation + 1).await, 0, "not its claim");
    let rows = db
        .scalar("SELECT max(rows_done) - min(rows_done) AS v FROM backfill_progress")
        .await;
    let micros = db
        .scalar(
            "SELECT (extract(epoch FROM max(at) - min(at)) * 1000000)::bigint AS v \
             FROM backfill_progress",
        )
        .await;
    assert_eq!(rows, 8);
    let expected = rows as f64 * 1e6 / micros as f64;
    let two = get(detail.clone()).await;
    let rate = two["progress"]["rows_per_second"].as_f64().expect("a rate");
    assert!(
        (rate - expected).abs() <= expected * 1e-9,
        "{rate} {expected}"
    );
    let list = get("/admin/backfills".to_string()).await;
    let listed = list["items"]
        .as_array()
        .and_then(|items| items.iter().find(|v| v["id"] == ID))
        .expect("listed")
        .clone();
    assert_eq!(
        listed["progress"]["rows_per_second"],
        two["progress"]["rows_per_second"]
    );
    let spark = two["progress"]["sparkline"]
        .as_array()
        .expect("sparkline")
        .clone();
    assert_eq!(spark.len(), backfill::admin::SPARK_BUCKETS);
    assert!(
        spark.iter().any(|b| b.as_f64().is_some_and(|r| r > 0.0)),
        "{spark:?}"
    );

    post("pause").await;
    assert_eq!(sample("w1", claim.generation).await, 0, "paused");
    let paused = get(detail.clone()).await;
    assert!(paused["progress"]["rows_per_second"].is_null(), "{paused}");
    assert_eq!(paused["progress"]["sparkline"], serde_json::json!([]));
    let chart = get(format!("/admin/backfills/{ID}/progress")).await;
    assert!(chart["from"].is_string(), "{chart}");
    assert!(
        chart["total"]
            .as_array()
            .expect("total")
            .iter()
            .any(|b| b.as_f64().is_some_and(|r| r > 0.0)),
        "{chart}"
    );
    let open = &chart["intervals"][0];
    assert_eq!(
        (open["kind"].as_str(), open["to"].is_null()),
        (Some("paused"), true),
        "{chart}"
    );

    post("resume").await;
    drop(claim);
    let again = engine
        .claim_next("w1", &[])
        .await
        .expect("claim")
        .expect("claimed");
    assert_eq!(sample("w1", again.generation).await, 1);
    let resumed = get(detail.clone()).await;
    assert!(
        resumed["progress"]["rows_per_second"].is_null(),
        "one sample of the new claim has no rate: {resumed}"
    );
    let chart = get(format!("/admin/backfills/{ID}/progress")).await;
    let closed = &chart["intervals"][0];
    assert_eq!(
        (closed["kind"].as_str(), closed["to"].is_string()),
        (Some("paused"), true),
        "{chart}"
    );
    let unknown = call(
        &server.url,
        "GET",
        "/admin/backfills/no.such/progress",
        Some(READER),
        None,
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
    server.stop().await;
}

/// OBS-5: a series stays bounded however long the run: past 720 samples
/// every second sample of the older half goes, the newest 360 and the
/// very first stay, so the chart still spans the whole run. Guard: the
/// thinning in `backfill_progress_sample`.
#[actix_rt::test]
async fn obs05_a_long_series_is_thinned_to_its_bound_keeping_both_ends() {
    let (db, engine, _hooks) = setup(8).await;
    engine.start(ID).await.expect("start");
    let claim = engine
        .claim_next("w1", &[])
        .await
        .expect("claim")
        .expect("claimed");
    db.exec(&format!(
        "SELECT backfill_progress_sample('w1', ARRAY['{ID}'], ARRAY[NULL]::integer[], \
         ARRAY[{}]::bigint[]) FROM generate_series(1, 2000)",
        claim.generation
    ))
    .await;
    let count = db
        .scalar("SELECT count(*) AS v FROM backfill_progress")
        .await;
    assert!((540..=721).contains(&count), "{count}");
    // The newest 360 are contiguous: no gap among them is thinned.
    let newest_seq_span = db
        .scalar(
            "SELECT max(seq) - min(seq) AS v FROM (SELECT seq FROM backfill_progress \
             ORDER BY at DESC LIMIT 360) t",
        )
        .await;
    assert_eq!(newest_seq_span, 359);
    let first = db
        .scalar("SELECT min(seq) AS v FROM backfill_progress")
        .await;
    assert_eq!(first, 1, "the first sample stays");
}

/// RT-4: a block carries a sample of the keys that hold the repair back,
/// as the definition reports them after the batch blocked: the first 10
/// of the offending rows after the checkpoint, keys only, in the detail
/// view while the backfill is blocked (not in the list), and gone once a
/// retry moved it on. Guard: the engine's recording of the keys after a
/// blocked failure (without it the detail has none).
#[actix_rt::test]
async fn rt04_a_blocked_backfill_shows_a_sample_of_its_blocking_keys() {
    use backfill::repair::RepairError;
    let (db, engine, hooks) = setup(40).await;
    let server = serve(admin(engine.clone()));
    db.exec("UPDATE items SET n = -1 WHERE id IN (3, 5, 8, 11, 13, 17, 19, 23, 29, 31, 37, 39)")
        .await;
    engine.start(ID).await.expect("start");
    *hooks.fail_after_mutate.lock() = Some(RepairError::Blocked(
        "some items have a negative n; fix them, then retry".into(),
    ));
    support::drive(&engine, "w1").await;
    let path = format!("/admin/backfills/{ID}");
    let blocked = call(&server.url, "GET", &path, Some(READER), None).await;
    assert_eq!(blocked.body["state"], "blocked", "{}", blocked.text);
    assert_eq!(
        blocked.body["blocking_keys"],
        serde_json::json!([3, 5, 8, 11, 13, 17, 19, 23, 29, 31]),
        "{}",
        blocked.text
    );
    let list = call(&server.url, "GET", "/admin/backfills", Some(READER), None).await;
    assert!(
        list.body["items"][0]["blocking_keys"].is_null(),
        "{}",
        list.text
    );

    *hooks.fail_after_mutate.lock() = None;
    let retry = call(
        &server.url,
        "POST",
        &format!("{path}/retry"),
        Some(OPERATOR),
        Some("rt04-retry"),
    )
    .await;
    assert_eq!(retry.status, 200, "{}", retry.text);
    let retried = call(&server.url, "GET", &path, Some(READER), None).await;
    assert!(retried.body["blocking_keys"].is_null(), "{}", retried.text);
    server.stop().await;
}
