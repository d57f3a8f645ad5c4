//! Notifications of state changes to webhooks (docs/CONTRACT.md 12.7),
//! against real PostgreSQL and a receiver on 127.0.0.1 in the test.
//!
//! Index:
//! - `ntf01_blocked_retried_completed_each_arrive_signed`: a backfill
//!   blocks, is retried and completes; the receiver sees `blocked` then
//!   `completed`, each with the documented body and a valid signature.
//! - `ntf01_a_change_committed_while_no_sender_runs_is_delivered_later`:
//!   one sender per fleet; a change committed after the first sender
//!   stopped (and a try that failed before) is delivered by the next
//!   sender with the event ID queued in the change's statement; a
//!   fenced-out change queues nothing.
//! - `ntf02_a_failing_receiver_ends_dead_and_never_holds_a_batch`: while
//!   the receiver holds a delivery unanswered the backfill runs to
//!   completion; answering 500 every time, each notification is dead
//!   after the configured tries, in the admin view and the counts.
//! - `ntf01_a_lasting_throttle_is_notified_once_per_condition`: the sender
//!   finds a throttle the runner recorded and notifies it once.
//! - `ntf03_bodies_and_the_admin_view_hold_no_secret_url_or_row_data`.
//! - `ntf02_https_receiver_gets_the_signed_notification_over_verified_tls`:
//!   an `https://` target whose certificate a test-time CA issued, with
//!   that CA in `ca_file`, gets the notification over TLS, signed.
//! - `ntf02_https_receiver_with_an_untrusted_certificate_never_gets_it`:
//!   the same receiver without the CA configured: every try fails with
//!   "certificate not trusted" (no URL, no secret) until it is dead.
//! - Across processes (SIGKILL with a delivery in flight): cli/tests/
//!   process.rs, `ntf01_sigkill_*`.

mod support;

use backfill::__private::store;
use backfill::notify::{sign, Body, NotifyConfig, Pass, Secret, Sender, Target, SIGNATURE_HEADER};
use backfill::{Action, RepairError, State};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use support::admin::{admin, call, serve, setup, ID, READER};
use support::webhook::{Received, Receiver, TestCa};
use support::TestDb;

const SECRET: &str = "s3cret-signing-key-0123456789";
const ROW_MARKER: &str = "ROWDATA-7f3a-marker";

fn config(url: &str, max_attempts: u32) -> NotifyConfig {
    NotifyConfig {
        targets: vec![Target {
            name: "ops".into(),
            url: url.into(),
            events: ["blocked", "failed", "completed", "validation_failed"]
                .map(String::from)
                .to_vec(),
            secret: Secret::new(SECRET),
        }],
        timeout: Duration::from_secs(30),
        max_attempts,
        backoff_base: Duration::from_millis(1),
        backoff_max: Duration::from_millis(2),
        ..NotifyConfig::default()
    }
}

fn sender(db: &TestDb, url: &str, max_attempts: u32) -> Sender {
    Sender::new(db.pool.clone(), db.url.clone(), config(url, max_attempts)).expect("sender")
}

/// Block the counter (a missing prerequisite) from `pending` or a retry.
async fn block(engine: &backfill::Engine, hooks: &support::repairs::Hooks, action: Action) {
    *hooks.fail_after_mutate.lock() = Some(RepairError::Blocked(
        "prerequisite missing: run the migration".into(),
    ));
    engine.act(ID, action).await.expect("act");
    support::drive(engine, "w1").await;
    *hooks.fail_after_mutate.lock() = None;
    let row = engine.get(ID).await.expect("get");
    assert_eq!(row.state, State::Blocked);
}

async fn complete(engine: &backfill::Engine) {
    engine.act(ID, Action::Retry).await.expect("retry");
    support::drive(engine, "w1").await;
    let row = engine.get(ID).await.expect("get");
    assert_eq!(row.state, State::Completed);
}

/// Passes until nothing is pending (delivered or dead), summed.
async fn settle(db: &TestDb, sender: &Sender) -> Pass {
    let mut total = Pass::default();
    for _ in 0..2000 {
        let pass = sender.run_once().await.expect("pass");
        assert!(pass.leading, "the only sender leads");
        total.delivered += pass.delivered;
        total.retried += pass.retried;
        total.dead += pass.dead;
        if outbox(db, "pending").await == 0 {
            return total;
        }
        // The backoff is 1-2 ms: wait it out before the next pass.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("the sender did not settle");
}

async fn outbox(db: &TestDb, status: &str) -> i64 {
    db.scalar(&format!(
        "SELECT count(*) AS v FROM backfill_outbox WHERE status = '{status}'"
    ))
    .await
}

/// Every request is signed over its exact body, its event headers match
/// the body, and the body is the documented one.
fn check_signed(r: &Received) -> Body {
    assert_eq!(
        r.header(SIGNATURE_HEADER),
        Some(sign(SECRET.as_bytes(), &r.body).as_str()),
        "signature"
    );
    let body = r.body();
    assert_eq!(
        r.header("X-Backfill-Event-Id"),
        Some(body.event_id.to_string().as_str())
    );
    assert_eq!(r.header("X-Backfill-Event"), Some(body.event.as_str()));
    assert_eq!(r.header("Content-Type"), Some("application/json"));
    assert_eq!(body.backfill_id, ID);
    assert!(body.delivery.contains("event_id"), "{}", body.delivery);
    body
}

#[actix_rt::test]
async fn ntf01_blocked_retried_completed_each_arrive_signed() {
    let (db, engine, hooks) = setup(10).await;
    let receiver = Receiver::start(204).await;
    let sender = sender(&db, &receiver.url, 3);
    // The first pass subscribes: only then are changes queued.
    assert!(sender.run_once().await.expect("pass").leading);

    block(&engine, &hooks, Action::Start).await;
    assert_eq!(settle(&db, &sender).await.delivered, 1);
    complete(&engine).await;
    assert_eq!(settle(&db, &sender).await.delivered, 1);

    let got = receiver.got();
    assert_eq!(got.len(), 2, "{got:?}");
    let blocked = check_signed(&got[0]);
    assert_eq!(
        (blocked.event.as_str(), blocked.state.as_str()),
        ("blocked", "blocked")
    );
    assert_eq!(blocked.error_kind.as_deref(), Some("blocked"));
    assert_eq!(
        blocked.detail.as_deref(),
        Some("prerequisite missing: run the migration")
    );
    let completed = check_signed(&got[1]);
    assert_eq!(
        (completed.event.as_str(), completed.state.as_str()),
        ("completed", "completed")
    );
    assert_eq!(completed.undo_of, None);
    assert!(completed.generation > blocked.generation);
    assert_ne!(blocked.event_id, completed.event_id);
    assert!(completed.text.contains(ID));
    assert_eq!(outbox(&db, "delivered").await, 2);
    assert_eq!(outbox(&db, "pending").await, 0);
}

#[actix_rt::test]
async fn ntf01_a_change_committed_while_no_sender_runs_is_delivered_later() {
    let (db, engine, hooks) = setup(10).await;
    let receiver = Receiver::start(503).await;
    let first = sender(&db, &receiver.url, 5);
    assert!(first.run_once().await.expect("pass").leading);
    // One sender per fleet: a second one does nothing while the first
    // holds the lock.
    let second = sender(&db, &receiver.url, 5);
    assert!(!second.run_once().await.expect("pass").leading);

    block(&engine, &hooks, Action::Start).await;
    let pass = first.run_once().await.expect("pass");
    assert_eq!((pass.delivered, pass.retried), (0, 1), "503 is retried");
    let blocked_id = receiver.got()[0].body().event_id;
    // The first sender stops; its lock goes with its session.
    drop(first);

    // A change that commits while no sender runs: queued by the
    // statement that made it.
    complete(&engine).await;
    let queued: String = db
        .text("SELECT event_id::text AS v FROM backfill_outbox WHERE event = 'completed'")
        .await
        .expect("queued with the change");
    // A change the fence refuses queues nothing (a stale owner's
    // completion and failure record).
    let before = db.scalar("SELECT count(*) AS v FROM backfill_outbox").await;
    let mut conn = db.pool.get().await.expect("pool");
    assert!(!store::validation_complete(&mut conn, ID, "w1", 1)
        .await
        .expect("stmt"));
    assert!(
        store::backfill_record_failure(&mut conn, ID, "w1", 1, "fatal", "x", 3, 1, 1, None)
            .await
            .expect("stmt")
            .is_none()
    );
    drop(conn);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_outbox").await,
        before
    );

    receiver.status.store(200, Ordering::SeqCst);
    support::eventually("the second sender takes over", || async {
        second.run_once().await.expect("pass").leading
    })
    .await;
    settle(&db, &second).await;
    let got = receiver.got();
    let delivered: Vec<Body> = got.iter().skip(1).map(check_signed).collect();
    assert_eq!(delivered.len(), 2, "{got:?}");
    assert!(delivered
        .iter()
        .any(|b| b.event_id == blocked_id && b.event == "blocked"));
    assert!(delivered
        .iter()
        .any(|b| b.event_id.to_string() == queued && b.event == "completed"));
    assert_eq!(outbox(&db, "delivered").await, 2);
}

/// NTF-2: a try is counted before it is sent. A sender that dies between
/// its POST and recording the answer (its pass dropped while the receiver
/// holds the request) leaves the row pending with the try counted; the
/// next pass sends it again under the same event ID (the duplicate the
/// receiver de-duplicates). A row during each of whose tries the sender
/// dies ends dead after the configured tries, never retried without
/// bound. Guard: `outbox_attempt` ahead of the POST (without it the
/// attempts stay 0 and the poison row is sent forever).
#[actix_rt::test]
async fn ntf02_a_try_is_counted_before_its_post_so_a_crash_cannot_loop() {
    let (db, engine, hooks) = setup(10).await;
    let receiver = Receiver::start(204).await;
    let sender = sender(&db, &receiver.url, 2);
    assert!(sender.run_once().await.expect("pass").leading);
    block(&engine, &hooks, Action::Start).await;
    let attempts = || async {
        db.text("SELECT concat_ws('|', status, attempts) AS v FROM backfill_outbox")
            .await
    };
    // The sender dies while its POST is at the receiver: the pass is
    // dropped once the request has arrived and before it is answered.
    let crash = || async {
        let _held = receiver.hold_next();
        let before = receiver.got().len();
        let pass = sender.run_once();
        tokio::pin!(pass);
        // The receiver's count, not its `arrived` notification: a permit
        // left by an earlier delivery would end the wait before the POST.
        let arrived = async {
            while receiver.got().len() == before {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::select! {
            done = &mut pass => panic!("the pass ended: {done:?}"),
            () = arrived => {}
        }
    };
    crash().await;
    assert_eq!(attempts().await.as_deref(), Some("pending|1"));
    // The next pass, after the backoff (1-2 ms), sends it again and it
    // is delivered: two requests, one event ID.
    tokio::time::sleep(Duration::from_millis(5)).await;
    assert_eq!(settle(&db, &sender).await.delivered, 1);
    let got = receiver.got();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(
        check_signed(&got[0]).event_id,
        check_signed(&got[1]).event_id
    );
    assert_eq!(outbox(&db, "delivered").await, 1);

    // A notification whose every try ends the sender: after the two tries
    // it is dead and no longer sent.
    db.exec("DELETE FROM backfill_outbox").await;
    block(&engine, &hooks, Action::Retry).await;
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(5)).await;
        crash().await;
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    let pass = sender.run_once().await.expect("pass");
    assert_eq!(pass.dead, 1, "{pass:?}");
    assert_eq!(attempts().await.as_deref(), Some("dead|2"));
    assert_eq!(receiver.got().len(), 4, "never sent a third time");
}

#[actix_rt::test]
async fn ntf02_a_failing_receiver_ends_dead_and_never_holds_a_batch() {
    let (db, engine, hooks) = setup(40).await;
    let receiver = Receiver::start(500).await;
    let sender = Arc::new(sender(&db, &receiver.url, 3));
    assert!(sender.run_once().await.expect("pass").leading);
    block(&engine, &hooks, Action::Start).await;

    // The sender's first try is held by the receiver, unanswered ...
    let release = receiver.hold_next();
    let trying = actix_rt::spawn({
        let sender = sender.clone();
        async move { sender.run_once().await.expect("pass") }
    });
    receiver.arrived.notified().await;
    // ... while the backfill is retried and runs every batch and its
    // validation to completion: nothing of it waits on the webhook.
    complete(&engine).await;
    assert!(!trying.is_finished(), "the delivery is still held");
    release.send(()).expect("release");
    assert_eq!(trying.await.expect("join").retried, 1);

    let pass = settle(&db, &sender).await;
    assert_eq!(pass.delivered, 0);
    assert_eq!(outbox(&db, "dead").await, 2, "dead after the last try");
    assert_eq!(outbox(&db, "pending").await, 0);
    // Exactly the configured tries per notification.
    let got = receiver.got();
    for event in ["blocked", "completed"] {
        let tries: Vec<Body> = got
            .iter()
            .map(check_signed)
            .filter(|b| b.event == event)
            .collect();
        assert_eq!(tries.len(), 3, "{event}");
        assert!(
            tries.iter().all(|b| b == &tries[0]),
            "same event, same body"
        );
    }
    // A dead notification is no longer tried.
    assert_eq!(
        sender.run_once().await.expect("pass"),
        Pass {
            leading: true,
            ..Pass::default()
        }
    );

    // The admin view and the counts /metrics reads show them.
    let server = serve(admin(engine.clone()));
    let r = call(
        &server.url,
        "GET",
        "/admin/notifications?status=dead",
        Some(READER),
        None,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let items = r.body["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "{}", r.text);
    for item in items {
        assert_eq!(item["status"], "dead");
        assert_eq!(item["attempts"], 3);
        assert_eq!(item["target"], "ops");
        assert_eq!(item["last_error"], "the receiver answered 500");
    }
    let mut conn = db.pool.get().await.expect("pool");
    let counts = store::outbox_count_by_status(&mut conn)
        .await
        .expect("counts");
    assert_eq!(counts, [("pending", 0), ("delivered", 0), ("dead", 2)]);
    server.stop().await;
}

#[actix_rt::test]
async fn ntf03_bodies_and_the_admin_view_hold_no_secret_url_or_row_data() {
    let (db, engine, hooks) = setup(10).await;
    db.exec(&format!(
        "ALTER TABLE items ADD COLUMN note text NOT NULL DEFAULT '{ROW_MARKER}'"
    ))
    .await;
    let receiver = Receiver::start(200).await;
    let sender = sender(&db, &receiver.url, 3);
    assert!(sender.run_once().await.expect("pass").leading);
    block(&engine, &hooks, Action::Start).await;
    complete(&engine).await;
    settle(&db, &sender).await;

    let port = receiver.url.trim_start_matches("http://").to_string();
    let secret_hex = hex::encode(SECRET);
    let forbidden = [
        SECRET,
        secret_hex.as_str(),
        port.as_str(),
        "/hooks/",
        ROW_MARKER,
    ];
    let got = receiver.got();
    assert_eq!(got.len(), 2);
    for r in &got {
        let text = String::from_utf8_lossy(&r.body);
        for f in forbidden {
            assert!(!text.contains(f), "body holds {f:?}: {text}");
        }
    }
    let server = serve(admin(engine.clone()));
    for path in [
        "/admin/notifications",
        "/admin/backfills",
        "/admin/backfills/items.counter",
    ] {
        let r = call(&server.url, "GET", path, Some(READER), None).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        for f in forbidden {
            assert!(!r.text.contains(f), "{path} holds {f:?}: {}", r.text);
        }
    }
    server.stop().await;
    // Nor does the database hold the URL or the secret anywhere.
    let stored = db
        .text(
            "SELECT concat((SELECT string_agg(o::text, ',') FROM backfill_outbox o), \
                 (SELECT string_agg(s::text, ',') FROM backfill_notify_subscription s)) AS v",
        )
        .await
        .expect("rows");
    for f in forbidden {
        assert!(!stored.contains(f), "the database holds {f:?}");
    }
}

#[actix_rt::test]
async fn ntf01_a_lasting_throttle_is_notified_once_per_condition() {
    let (db, engine, _hooks) = setup(10).await;
    let receiver = Receiver::start(200).await;
    let mut config = config(&receiver.url, 3);
    config.targets[0].events = vec!["throttled".into()];
    // Any recorded throttle has lasted long enough.
    config.throttled_after = Duration::ZERO;
    let sender = Sender::new(db.pool.clone(), db.url.clone(), config).expect("sender");
    assert!(sender.run_once().await.expect("pass").leading);
    engine.act(ID, Action::Start).await.expect("start");
    let claim = engine
        .claim_next("w1", &[])
        .await
        .expect("claim")
        .expect("claimed");
    let condition = serde_json::json!({
        "signal": "replication_lag_bytes", "value": 2, "threshold": 1,
        "text": "replication byte lag 2 B > 1 B"
    });
    let mut conn = db.pool.get().await.expect("pool");
    assert!(
        store::backfill_throttle_set(&mut conn, ID, "w1", claim.generation, Some(&condition))
            .await
            .expect("throttle")
    );
    drop(conn);
    let pass = sender.run_once().await.expect("pass");
    assert_eq!((pass.throttled, pass.delivered), (1, 1));
    // The same condition again: nothing new.
    assert_eq!(sender.run_once().await.expect("pass").throttled, 0);
    let got = receiver.got();
    assert_eq!(got.len(), 1);
    let body = check_signed(&got[0]);
    assert_eq!(
        (body.event.as_str(), body.state.as_str()),
        ("throttled", "running")
    );
    assert_eq!(
        body.detail.as_deref(),
        Some("replication byte lag 2 B > 1 B")
    );
    assert_eq!(body.generation, claim.generation);
}

/// `ca`'s certificate in a PEM file of this test's own.
fn ca_file(db: &TestDb, ca: &TestCa) -> std::path::PathBuf {
    let path = std::env::temp_dir().join(format!("{}-webhook-ca.pem", db.name));
    std::fs::write(&path, &ca.ca_pem).expect("write the CA file");
    path
}

#[actix_rt::test]
async fn ntf02_https_receiver_gets_the_signed_notification_over_verified_tls() {
    let (db, engine, hooks) = setup(10).await;
    let ca = TestCa::new();
    let receiver = Receiver::start_tls(204, &ca).await;
    assert!(receiver.url.starts_with("https://127.0.0.1:"));
    let mut config = config(&receiver.url, 3);
    // The receiver's certificate chains to this CA only: without it the
    // handshake fails (the next test).
    config.ca_file = Some(ca_file(&db, &ca));
    let sender = Sender::new(db.pool.clone(), db.url.clone(), config).expect("sender");
    assert!(sender.run_once().await.expect("pass").leading);

    block(&engine, &hooks, Action::Start).await;
    let pass = settle(&db, &sender).await;
    assert_eq!((pass.delivered, pass.retried), (1, 0), "first try");
    let got = receiver.got();
    assert_eq!(got.len(), 1, "{got:?}");
    let body = check_signed(&got[0]);
    assert_eq!(body.event, "blocked");
    assert_eq!(outbox(&db, "delivered").await, 1);
}

#[actix_rt::test]
async fn ntf02_https_receiver_with_an_untrusted_certificate_never_gets_it() {
    let (db, engine, hooks) = setup(10).await;
    let ca = TestCa::new();
    let receiver = Receiver::start_tls(204, &ca).await;
    // No `ca_file`: the test CA is not among the public roots.
    let sender = sender(&db, &receiver.url, 3);
    assert!(sender.run_once().await.expect("pass").leading);

    block(&engine, &hooks, Action::Start).await;
    let pass = sender.run_once().await.expect("pass");
    assert_eq!((pass.delivered, pass.retried), (0, 1), "failed, retried");
    const UNTRUSTED: &str = "tls handshake failed: certificate not trusted";
    let last_error = "SELECT last_error AS v FROM backfill_outbox";
    assert_eq!(db.text(last_error).await.as_deref(), Some(UNTRUSTED));
    assert_eq!(outbox(&db, "pending").await, 1, "to be tried again");

    let pass = settle(&db, &sender).await;
    assert_eq!((pass.delivered, pass.dead), (0, 1), "dead after 3 tries");
    assert_eq!(
        db.scalar("SELECT attempts::bigint AS v FROM backfill_outbox")
            .await,
        3
    );
    let stored = db.text(last_error).await.expect("last error");
    assert_eq!(stored, UNTRUSTED);
    let address = receiver.url.trim_start_matches("https://").to_string();
    for forbidden in [
        receiver.url.as_str(),
        address.as_str(),
        "127.0.0.1",
        "/hooks/",
        SECRET,
    ] {
        assert!(
            !stored.contains(forbidden),
            "{stored:?} holds {forbidden:?}"
        );
    }
    assert!(receiver.got().is_empty(), "nothing was received");
}
