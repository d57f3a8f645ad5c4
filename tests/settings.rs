//! Live settings through the admin API (THR-4, with AUTH-1, AUD-1, ADM-4,
//! ADM-5 as they apply to it): the real HTTP server, the production admin
//! layer, engine and store, a real PostgreSQL. Every outcome is asserted
//! from PostgreSQL (the `settings` column, the audit and the stored
//! requests), not only from the response.
//!
//! Index (each test's doc comment names the guard whose removal fails it):
//! - an accepted change, visible at once, audited, announced; clearing:
//!   `thr04_change_*`
//! - refused changes: `thr04_invalid_*`, `thr04_malformed_*`; the body limit:
//!   `thr04_a_change_of_exactly_16_kib_*`
//! - authorization: `thr04_unauthorized_*`
//! - idempotency: `thr04_same_key_*`
//! - a completed backfill: `thr04_completed_*`
//! - the view's size in force and throttle condition: `thr04_view_*`
//! - the OpenAPI document: `thr04_openapi_*`
//! - FLT-3 a run window set, cleared, and refused half set or never
//!   opening: `flt03_*` (the window holding a runner back is in
//!   `tests/throttle.rs`)

mod support;

use backfill::__private::store;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;
use support::admin::*;
use support::TestDb;

const MERGE_PATCH: &str = "application/merge-patch+json";

fn settings_path(id: &str) -> String {
    format!("/admin/backfills/{id}/settings")
}

/// PATCH a change of `ID` as a merge patch.
async fn patch(server: &TestServer, token: Option<&str>, key: &str, body: &str) -> Resp {
    call_with_body(
        &server.url,
        "PATCH",
        &settings_path(ID),
        token,
        Some(key),
        Some((MERGE_PATCH, body)),
    )
    .await
}

/// The stored settings of `ID`, from PostgreSQL.
async fn stored(db: &TestDb) -> Value {
    let text = db
        .text(&format!(
            "SELECT settings::text AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await
        .expect("settings is NOT NULL");
    serde_json::from_str(&text).expect("settings is JSON")
}

/// Audit rows of the settings action with this outcome.
async fn audited(db: &TestDb, outcome: &str) -> i64 {
    db.scalar(&format!(
        "SELECT coalesce(sum(request_count), 0)::bigint AS v FROM backfill_audit \
         WHERE action = 'settings' AND outcome = '{outcome}'"
    ))
    .await
}

async fn start(server: &TestServer) {
    let r = call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{ID}/start"),
        Some(OPERATOR),
        Some("start"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
}

/// THR-4, AUD-1: a change of a running backfill whose runner holds its
/// claim is answered with the view showing it, is in GET at once and in
/// PostgreSQL, is audited once with prior and new values, the row's
/// state and generation, and is announced on the wake-up channel; the
/// claim is not fenced out (its next batch commits), and nothing else of
/// the row moves. Clearing with `null` removes the field. Guards:
/// `store::backfill_settings_update` (without it nothing is stored), the
/// audit insert of `Admin::update_settings` with `Settings::diff`, the
/// `wake_notify` of `Engine::update_settings_in` (no notification), and
/// the UPDATE leaving the generation alone (a generation advance makes
/// the claim's next batch stale).
#[actix_rt::test]
async fn thr04_change_is_audited_visible_at_once_and_cleared_with_null() {
    let (db, engine, _hooks) = setup(20).await;
    let server = serve(admin(engine.clone()));
    start(&server).await;
    let mut claim = engine
        .claim_next("worker-a", &[])
        .await
        .expect("claim")
        .expect("claimed");
    engine.run_batch(&mut claim).await.expect("first batch");
    let generation = claim.generation;
    let before = snapshot(&db, ID).await;
    let mut listener = db.connect().await;
    store::wake_listen(&mut listener).await.expect("LISTEN");
    let mut wakes = std::pin::pin!(listener.notifications_stream());

    let r = patch(
        &server,
        Some(OPERATOR),
        "c1",
        r#"{"batch_size": 100, "pause_ms": 250}"#,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let set = json!({"batch_size": 100, "pause_ms": 250});
    assert_eq!(r.body["settings"], set, "{}", r.text);
    assert_eq!(r.body["id"], ID);
    assert_eq!(r.body["state"], "running");
    assert_eq!(stored(&db).await, set);
    let detail = call(
        &server.url,
        "GET",
        &format!("/admin/backfills/{ID}"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(detail.body["settings"], set, "{}", detail.text);
    let wake = tokio::time::timeout(Duration::from_secs(10), wakes.next())
        .await
        .expect("a wake-up within 10 s")
        .expect("the listener is open")
        .expect("a notification");
    assert_eq!(wake.payload, ID);
    assert_eq!(snapshot(&db, ID).await, before, "nothing else changed");
    let audit = db
        .text(
            "SELECT concat_ws('|', actor, correlation, prior_state, resulting_state, generation, \
                 outcome, detail) AS v \
             FROM backfill_audit WHERE action = 'settings'",
        )
        .await;
    assert_eq!(
        audit.as_deref(),
        Some(
            format!(
                "ops|c1|running|running|{generation}|applied|\
                 batch_size: unset -> 100; pause_ms: unset -> 250"
            )
            .as_str()
        )
    );
    // The runner's claim still holds: its next batch commits.
    assert!(
        matches!(
            engine.run_batch(&mut claim).await.expect("second batch"),
            backfill::BatchOutcome::Committed { .. }
        ),
        "a settings change does not fence out the claim"
    );

    let r = patch(&server, Some(OPERATOR), "c2", r#"{"pause_ms": null}"#).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["settings"], json!({"batch_size": 100}));
    assert_eq!(stored(&db).await, json!({"batch_size": 100}));
    assert_eq!(
        db.text(
            "SELECT detail AS v FROM backfill_audit WHERE action = 'settings' AND correlation = 'c2'"
        )
        .await
        .as_deref(),
        Some("pause_ms: 250 -> unset")
    );
    let r = patch(
        &server,
        Some(OPERATOR),
        "c3",
        r#"{"batch_size": null, "target_batch_ms": 9999}"#,
    )
    .await;
    assert_eq!(
        r.status, 200,
        "just below the statement timeout: {}",
        r.text
    );
    assert_eq!(stored(&db).await, json!({"target_batch_ms": 9999}));
    assert_eq!(audited(&db, "applied").await, 3);
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// THR-4: a refused change is a 422 `invalid_settings` naming the field
/// when the error is about one, and changes nothing: the stored settings
/// stay, no response is stored under its key, and each is audited as a
/// rejection. Cases: out of range (both ends), not an integer, an unknown
/// field, `batch_size` with `target_batch_ms` (in one change and against
/// the stored one), min above max, no field, not an object, and a target
/// at or above the engine's statement timeout (10 s in the tests).
/// Guards: `Settings::apply` in `Engine::update_settings_in` (without it
/// the values are stored), `Settings::fits_timeout` there (the timeout
/// cases are stored), and `ErrorBody::field` from `SettingsError::field`.
#[actix_rt::test]
async fn thr04_invalid_changes_are_422_with_the_field_and_change_nothing() {
    let (db, engine, _hooks) = setup(5).await;
    let server = serve(admin(engine));
    start(&server).await;
    let r = patch(&server, Some(OPERATOR), "base", r#"{"batch_size": 100}"#).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let before = stored(&db).await;
    let row_before = snapshot(&db, ID).await;
    let cases: [(&str, Option<&str>); 15] = [
        (r#"{"batch_size": 0}"#, Some("batch_size")),
        (r#"{"batch_size": 100001}"#, Some("batch_size")),
        (r#"{"pause_ms": 3600001}"#, Some("pause_ms")),
        (r#"{"max_xact_age_ms": 999}"#, Some("max_xact_age_ms")),
        (r#"{"pause_ms": -1}"#, Some("pause_ms")),
        (r#"{"pause_ms": 1.5}"#, Some("pause_ms")),
        (r#"{"pause_ms": "5"}"#, Some("pause_ms")),
        (r#"{"batch_sise": 5}"#, Some("batch_sise")),
        (r#"{"target_batch_ms": 50}"#, None),
        (r#"{"batch_size": 5, "target_batch_ms": 50}"#, None),
        (r#"{"min_batch_size": 50, "max_batch_size": 5}"#, None),
        (r#"{}"#, None),
        (r#"[{"batch_size": 5}]"#, None),
        (
            r#"{"batch_size": null, "target_batch_ms": 10000}"#,
            Some("target_batch_ms"),
        ),
        (
            r#"{"batch_size": null, "target_batch_ms": 600000}"#,
            Some("target_batch_ms"),
        ),
    ];
    for (i, (body, field)) in cases.iter().enumerate() {
        let key = format!("bad-{i}");
        let r = patch(&server, Some(OPERATOR), &key, body).await;
        assert_eq!(r.status, 422, "{body}: {}", r.text);
        assert_eq!(r.body["error"], "invalid_settings", "{body}: {}", r.text);
        let message = r.body["message"].as_str().unwrap_or_default();
        assert!(!message.is_empty() && !message.contains('\n'), "{body}");
        match field {
            Some(field) => assert_eq!(r.body["field"], *field, "{body}: {}", r.text),
            None => assert!(r.body.get("field").is_none(), "{body}: {}", r.text),
        }
        assert_eq!(stored(&db).await, before, "{body} changed nothing");
        // The rejection is audited with its message.
        assert_eq!(
            db.text(&format!(
                "SELECT outcome || '|' || detail AS v FROM backfill_audit \
                 WHERE action = 'settings' AND correlation = '{key}'"
            ))
            .await,
            Some(format!("invalid_settings|{message}")),
            "{body}"
        );
    }
    assert_eq!(audited(&db, "invalid_settings").await, cases.len() as i64);
    assert_eq!(audited(&db, "applied").await, 1, "only the baseline");
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_request WHERE idempotency_key LIKE 'bad-%'")
            .await,
        0,
        "no response stored for a refused change"
    );
    assert_eq!(snapshot(&db, ID).await, row_before);
    server.stop().await;
}

/// A body the server cannot read as a change: not JSON is a 400, another
/// media type a 415 naming the accepted ones in `Accept-Patch` (plain
/// `application/json` is accepted like the merge-patch type), a body past
/// the limit a 413; a missing Idempotency-Key is a 400. Each is audited,
/// changes nothing and stores nothing. Guard: `RequestBody::change`
/// (without the media type check a form post is parsed as JSON; without
/// the limit a large body is read whole and answered 422).
#[actix_rt::test]
async fn thr04_malformed_requests_are_400_413_415_and_change_nothing() {
    let (db, engine, _hooks) = setup(5).await;
    let server = serve(admin(engine));
    let path = settings_path(ID);
    let send = |key: Option<&'static str>, body: Option<(&'static str, String)>| {
        let (url, path) = (server.url.clone(), path.clone());
        async move {
            let body_ref = body.as_ref().map(|(t, b)| (*t, b.as_str()));
            call_with_body(&url, "PATCH", &path, Some(OPERATOR), key, body_ref).await
        }
    };
    let big = format!(r#"{{"pause_ms": 5, "pad": "{}"}}"#, "x".repeat(20_000));
    let cases = [
        (
            Some("m1"),
            Some((MERGE_PATCH, "{".to_string())),
            400,
            "bad_request",
        ),
        (
            Some("m2"),
            Some((MERGE_PATCH, "".to_string())),
            400,
            "bad_request",
        ),
        (
            Some("m3"),
            Some(("text/plain", r#"{"pause_ms": 5}"#.to_string())),
            415,
            "unsupported_media_type",
        ),
        (
            Some("m4"),
            Some((
                "application/x-www-form-urlencoded",
                "pause_ms=5".to_string(),
            )),
            415,
            "unsupported_media_type",
        ),
        (Some("m5"), None, 415, "unsupported_media_type"),
        (
            Some("m6"),
            Some((MERGE_PATCH, big)),
            413,
            "payload_too_large",
        ),
        (
            None,
            Some((MERGE_PATCH, r#"{"pause_ms": 5}"#.to_string())),
            400,
            "bad_request",
        ),
    ];
    let n = cases.len() as i64;
    for (key, body, status, code) in cases {
        let r = send(key, body).await;
        assert_eq!(r.status, status, "{key:?}: {}", r.text);
        assert_eq!(r.body["error"], code, "{key:?}: {}", r.text);
    }
    // The accepted types, for a client that got a 415.
    let client = awc::Client::default();
    let res = client
        .patch(format!("{}{path}", server.url))
        .insert_header(("Authorization", format!("Bearer {OPERATOR}")))
        .insert_header(("Idempotency-Key", "m7"))
        .insert_header(("Content-Type", "text/plain"))
        .send_body("{}")
        .await
        .expect("request");
    assert_eq!(res.status().as_u16(), 415);
    assert_eq!(
        res.headers()
            .get("accept-patch")
            .and_then(|v| v.to_str().ok()),
        Some("application/merge-patch+json, application/json")
    );
    assert_eq!(stored(&db).await, json!({}));
    assert_eq!(
        db.scalar(
            "SELECT sum(request_count)::bigint AS v FROM backfill_audit \
             WHERE action = 'settings' \
             AND outcome IN ('bad_request', 'unsupported_media_type', 'payload_too_large')"
        )
        .await,
        n + 1,
        "every rejection audited"
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_request")
            .await,
        0
    );
    // Plain JSON is a change too.
    let r = call_with_body(
        &server.url,
        "PATCH",
        &path,
        Some(OPERATOR),
        Some("j1"),
        Some(("application/json; charset=utf-8", r#"{"pause_ms": 5}"#)),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(stored(&db).await, json!({"pause_ms": 5}));
    server.stop().await;
}

/// AUTH-1, AUD-1: a change without a token or with an unknown one is a
/// 401, by a principal without `backfill:operate` (read-only, or only
/// community roles) a 403; none carries backfill data, none changes the
/// settings or stores a response, and every attempt is audited (the 403s
/// by name). Guard: the `Capability::Operate` check of
/// `Admin::update_settings` (with `Read` the viewer's change is applied).
#[actix_rt::test]
async fn thr04_unauthorized_changes_are_401_403_audited_and_change_nothing() {
    let (db, engine, _hooks) = setup(5).await;
    let server = serve(admin(engine));
    let cases = [
        (None, 401),
        (Some("not-a-known-token"), 401),
        (Some(READER), 403),
        (Some(COMMUNITY), 403),
    ];
    for (i, (token, status)) in cases.into_iter().enumerate() {
        let r = patch(&server, token, &format!("u{i}"), r#"{"pause_ms": 5}"#).await;
        assert_eq!(r.status, status, "{token:?}: {}", r.text);
        let keys: Vec<&String> = r.body.as_object().expect("JSON error").keys().collect();
        assert_eq!(keys, ["error", "message"], "{}", r.text);
        assert!(!r.text.contains(ID) && !r.text.contains("pending"));
    }
    assert_eq!(stored(&db).await, json!({}), "nothing changed");
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_request")
            .await,
        0
    );
    assert_eq!(audited(&db, "unauthorized").await, 2);
    assert_eq!(
        db.scalar(
            "SELECT sum(request_count)::bigint AS v FROM backfill_audit \
             WHERE action = 'settings' AND outcome = 'forbidden' \
             AND actor IN ('viewer', 'moderator')"
        )
        .await,
        2
    );
    assert_eq!(audited(&db, "applied").await, 0);
    server.stop().await;
}

/// ADM-4: the same Idempotency-Key with the same change (spacing and key
/// order aside) replays the first response and applies nothing again,
/// even after another change; with another change, or already used for
/// another action, it is a 422 `idempotency_key_reused` that changes
/// nothing; a key first used for a change cannot be reused for an
/// action either. Guards: the change's digest in the stored request
/// (`request_name`; without it the other change replays the first
/// answer) and the replay in `Admin::update_settings` (without it the
/// first change is applied again over the second).
#[actix_rt::test]
async fn thr04_same_key_replays_and_another_change_is_422() {
    let (db, engine, _hooks) = setup(5).await;
    let server = serve(admin(engine));
    let first = patch(&server, Some(OPERATOR), "k1", r#"{"pause_ms": 10}"#).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let other = patch(&server, Some(OPERATOR), "k2", r#"{"pause_ms": 20}"#).await;
    assert_eq!(other.status, 200, "{}", other.text);
    let again = patch(&server, Some(OPERATOR), "k1", r#"{ "pause_ms":10 }"#).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.body, first.body, "the first response, replayed");
    assert_eq!(
        stored(&db).await,
        json!({"pause_ms": 20}),
        "the replay applied nothing"
    );
    let reused = patch(&server, Some(OPERATOR), "k1", r#"{"pause_ms": 30}"#).await;
    assert_eq!(reused.status, 422, "{}", reused.text);
    assert_eq!(reused.body["error"], "idempotency_key_reused");
    let action_key = call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{ID}/start"),
        Some(OPERATOR),
        Some("k1"),
    )
    .await;
    assert_eq!(action_key.status, 422, "{}", action_key.text);
    let r = call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{ID}/start"),
        Some(OPERATOR),
        Some("k3"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let after_action = patch(&server, Some(OPERATOR), "k3", r#"{"pause_ms": 30}"#).await;
    assert_eq!(after_action.status, 422, "{}", after_action.text);
    assert_eq!(stored(&db).await, json!({"pause_ms": 20}));
    assert_eq!(audited(&db, "applied").await, 2);
    assert_eq!(audited(&db, "replayed").await, 1);
    assert_eq!(audited(&db, "idempotency_key_reused").await, 2);
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// ADM-5, LC-4: the settings of a completed backfill no longer change: a
/// change is a 409 whose body names the current state (even a change
/// that would be refused otherwise: the state is the answer), stored and
/// replayed like the lifecycle conflicts, audited as `conflict`, and the
/// settings stay. The store's fence refuses the row on its own. Guards:
/// the completed check of `Engine::update_settings_in` (without it the
/// invalid change is a 422) and the `state <> 'completed'` fence of
/// `store::backfill_settings_update` (without it the direct call stores).
#[actix_rt::test]
async fn thr04_completed_backfill_is_409_with_the_current_state() {
    let (db, engine, _hooks) = setup(5).await;
    let server = serve(admin(engine.clone()));
    start(&server).await;
    drive(&engine).await;
    assert_eq!(
        db.text(&format!(
            "SELECT state AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await
        .as_deref(),
        Some("completed")
    );
    for (key, body) in [("x1", r#"{"pause_ms": 5}"#), ("x2", r#"{"batch_size": 0}"#)] {
        let r = patch(&server, Some(OPERATOR), key, body).await;
        assert_eq!(r.status, 409, "{body}: {}", r.text);
        assert_eq!(r.body["error"], "conflict");
        assert_eq!(r.body["current"]["state"], "completed");
        assert_eq!(r.body["current"]["id"], ID);
        let again = patch(&server, Some(OPERATOR), key, body).await;
        assert_eq!((again.status, &again.body), (409, &r.body), "replayed");
    }
    assert_eq!(stored(&db).await, json!({}));
    assert_eq!(audited(&db, "conflict").await, 2);
    assert_eq!(audited(&db, "applied").await, 0);
    let mut conn = db.connect().await;
    let fenced = store::backfill_settings_update(&mut conn, ID, &json!({"pause_ms": 5}))
        .await
        .expect("statement");
    assert!(
        fenced.is_none(),
        "the store's fence refuses a completed row"
    );
    assert_eq!(stored(&db).await, json!({}));
    server.stop().await;
}

/// THR-2, THR-3 in the view: `batch_size` is the column's size in force
/// (`null` before the first batch), and `throttle` is shown from the
/// runner's report only while a claim is held and the report is of the
/// row's generation; fields of an unexpected shape are unknown (`null`),
/// never the reason to hide the condition. Guard: the owner and
/// generation checks of `Throttle::from_row` (without them a report of an
/// earlier claim, or of a paused row, is shown as current).
#[actix_rt::test]
async fn thr04_view_shows_size_in_force_and_throttle_of_the_current_claim() {
    let (db, engine, _hooks) = setup(10).await;
    let server = serve(admin(engine.clone()));
    start(&server).await;
    let detail = || async {
        call(
            &server.url,
            "GET",
            &format!("/admin/backfills/{ID}"),
            Some(READER),
            None,
        )
        .await
        .body
    };
    let view = detail().await;
    assert_eq!(view["settings"], json!({}));
    assert_eq!(view["batch_size"], Value::Null);
    assert_eq!(view["throttle"], Value::Null);
    let claim = engine
        .claim_next("worker-a", &[])
        .await
        .expect("claim")
        .expect("claimed");
    let report = |generation: i64| {
        format!(
            "UPDATE backfill SET batch_size = 40, throttle = jsonb_build_object(\
                 'signal', 'replication_lag_bytes', 'value', 5.0e7, 'threshold', 1.6e7, \
                 'text', 'replication lag 47.7 MiB > 15.3 MiB', \
                 'since', '2026-12-01T10:00:00Z', 'generation', {generation}) \
             WHERE id = '{ID}'"
        )
    };
    db.exec(&report(claim.generation)).await;
    let view = detail().await;
    assert_eq!(view["batch_size"], 40);
    assert_eq!(
        view["throttle"],
        json!({
            "signal": "replication_lag_bytes",
            "value": 5.0e7,
            "threshold": 1.6e7,
            "text": "replication lag 47.7 MiB > 15.3 MiB",
            "since": "2026-12-01T10:00:00Z"
        })
    );
    // An unreadable signal: its value is unknown, the condition stays.
    db.exec(&format!(
        "UPDATE backfill SET throttle = jsonb_set(throttle, '{{value}}', 'null') WHERE id = '{ID}'"
    ))
    .await;
    let view = detail().await;
    assert_eq!(view["throttle"]["value"], Value::Null);
    assert_eq!(view["throttle"]["signal"], "replication_lag_bytes");
    // A report of an earlier claim is history.
    db.exec(&report(claim.generation - 1)).await;
    assert_eq!(detail().await["throttle"], Value::Null);
    // A paused row holds no claim: nothing is throttled.
    db.exec(&report(claim.generation)).await;
    let r = call(
        &server.url,
        "POST",
        &format!("/admin/backfills/{ID}/pause"),
        Some(OPERATOR),
        Some("p1"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    db.exec(&report(
        r.body["backfill"]["generation"]
            .as_i64()
            .expect("generation"),
    ))
    .await;
    let view = detail().await;
    assert_eq!(view["state"], "paused");
    assert_eq!(view["throttle"], Value::Null);
    assert_eq!(view["batch_size"], 40, "the size in force stays known");
    server.stop().await;
}

/// API-1: the document declares the operation as the server checks it:
/// the ID and Idempotency-Key rules, the body under both media types,
/// every field with its range from `Field::range` and `null` to clear,
/// no other field and at least one, every status with its JSON body, and
/// the view's new fields. Guards: `SettingsPatch` and
/// `view::settings_object` (a field or range out of step with
/// `crate::throttle::settings` fails here; `.ci/api-check` then checks live answers
/// against the document).
#[actix_rt::test]
async fn thr04_openapi_declares_the_change_ranges_and_statuses() {
    use backfill::throttle::settings::Field;
    let (_db, engine, _hooks) = setup(1).await;
    let server = serve(admin(engine));
    let doc = call(&server.url, "GET", "/openapi.json", None, None)
        .await
        .body;
    let op = &doc["paths"]["/admin/backfills/{id}/settings"]["patch"];
    assert!(op.is_object(), "PATCH settings is declared");
    let params: Vec<&Value> = op["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .collect();
    for (name, max) in [("id", 128), ("Idempotency-Key", 200)] {
        let p = params
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("declares {name}"));
        assert_eq!(p["required"], true, "{name}");
        assert_eq!(p["schema"]["maxLength"], max, "{name}");
    }
    for media in ["application/json", MERGE_PATCH] {
        assert_eq!(
            op["requestBody"]["content"][media]["schema"]["$ref"],
            "#/components/schemas/SettingsPatch",
            "{media}"
        );
    }
    let patch = &doc["components"]["schemas"]["SettingsPatch"];
    assert_eq!(patch["additionalProperties"], false);
    assert_eq!(patch["minProperties"], 1);
    let properties = patch["properties"].as_object().expect("properties");
    assert_eq!(properties.len(), Field::ALL.len());
    for field in Field::ALL {
        let p = &properties[field.name()];
        let (min, max) = field.range();
        assert_eq!(
            (p["minimum"].as_u64(), p["maximum"].as_u64()),
            (Some(min), Some(max)),
            "{}",
            field.name()
        );
        assert_eq!(p["type"], json!(["integer", "null"]), "{}", field.name());
    }
    for status in [
        "200", "400", "401", "403", "404", "409", "413", "415", "422", "429", "500", "503",
    ] {
        assert!(
            op["responses"][status]["content"]["application/json"]["schema"].is_object(),
            "declares {status} with a body"
        );
    }
    assert!(op["responses"]["415"]["headers"]["Accept-Patch"].is_object());
    let view = &doc["components"]["schemas"]["BackfillView"]["properties"];
    assert_eq!(
        view["settings"]["properties"].as_object().map(|p| p.len()),
        Some(Field::ALL.len())
    );
    assert!(view["batch_size"].is_object() && view["throttle"].is_object());
    let throttle = &doc["components"]["schemas"]["Throttle"]["properties"];
    for name in ["signal", "value", "threshold", "text", "since"] {
        assert!(throttle[name].is_object(), "Throttle.{name}");
    }
    server.stop().await;
}

/// THR-4: a change is read up to 16 KiB: a valid change padded with JSON
/// whitespace to exactly 16,384 bytes is applied, one byte more is a 413
/// that changes nothing. The size is written out here, not taken from
/// the crate, so a changed limit fails. Guard: `MAX_BODY_BYTES` and the
/// body reader of the HTTP layer.
#[actix_rt::test]
async fn thr04_a_change_of_exactly_16_kib_is_read_and_one_byte_more_is_413() {
    const LIMIT: usize = 16 * 1024;
    let (db, engine, _hooks) = setup(5).await;
    let server = serve(admin(engine));
    let padded = |len: usize| {
        let change = r#"{"pause_ms": 7}"#;
        format!("{change}{}", " ".repeat(len - change.len()))
    };
    let over = patch(&server, Some(OPERATOR), "s1", &padded(LIMIT + 1)).await;
    assert_eq!(over.status, 413, "{}", over.text);
    assert_eq!(over.body["error"], "payload_too_large");
    assert_eq!(stored(&db).await, json!({}));
    let exact = patch(&server, Some(OPERATOR), "s2", &padded(LIMIT)).await;
    assert_eq!(exact.status, 200, "{}", exact.text);
    assert_eq!(stored(&db).await, json!({"pause_ms": 7}));
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// FLT-3: a run window is set and cleared as two settings that go
/// together; one half set, equal hours (a window that never opens) and an
/// hour past 23 are 422 `invalid_settings` naming the field, and change
/// nothing. Guard: the window rule of `Settings::validate` (without it the
/// half-set and never-opening windows are stored).
#[actix_rt::test]
async fn flt03_a_run_window_half_set_or_never_opening_is_a_422_naming_the_field() {
    let (db, engine, _hooks) = setup(5).await;
    let server = serve(admin(engine));
    start(&server).await;
    let before = stored(&db).await;
    let cases = [
        (r#"{"window_start_hour": 5}"#, "window_end_hour"),
        (r#"{"window_end_hour": 5}"#, "window_start_hour"),
        (
            r#"{"window_start_hour": 5, "window_end_hour": 5}"#,
            "window_end_hour",
        ),
        (
            r#"{"window_start_hour": 24, "window_end_hour": 5}"#,
            "window_start_hour",
        ),
    ];
    for (i, (body, field)) in cases.iter().enumerate() {
        let r = patch(&server, Some(OPERATOR), &format!("window-{i}"), body).await;
        assert_eq!(r.status, 422, "{body}: {}", r.text);
        assert_eq!(r.body["error"], "invalid_settings", "{body}: {}", r.text);
        assert_eq!(r.body["field"], *field, "{body}: {}", r.text);
        assert_eq!(stored(&db).await, before, "{body} changed nothing");
    }
    let night = r#"{"window_start_hour": 22, "window_end_hour": 6}"#;
    let r = patch(&server, Some(OPERATOR), "night", night).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        stored(&db).await,
        json!({"window_start_hour": 22, "window_end_hour": 6})
    );
    let half = patch(
        &server,
        Some(OPERATOR),
        "half",
        r#"{"window_end_hour": null}"#,
    )
    .await;
    assert_eq!(half.status, 422, "{}", half.text);
    assert_eq!(half.body["field"], "window_end_hour", "{}", half.text);
    let clear = r#"{"window_start_hour": null, "window_end_hour": null}"#;
    let r = patch(&server, Some(OPERATOR), "clear", clear).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(stored(&db).await, before);
}
