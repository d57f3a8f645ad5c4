//! The dry run (docs/CONTRACT.md section 12.5, DRY-1..DRY-4) through the
//! production engine, admin layer and HTTP server against a real
//! PostgreSQL.
//!
//! Index (each test's doc comment names the guard whose removal fails it):
//! - DRY-1 nothing changes (table checksum and the backfill row, pending
//!   and paused, with and without partitions), the forecast counts the
//!   real run's rows, other states 409, bad input 404/422: `dry01_*`
//! - DRY-2 per-batch counts equal the real run's first K batches, and the
//!   dry run is audited: `dry02_*`
//! - DRY-3 the sample of changed rows only with `backfill:inspect`:
//!   `dry03_*`
//! - DRY-4 a failing batch reports its classified error and changes
//!   nothing; no event moves: `dry04_*`

mod support;

use backfill::admin::{sha256, Admin, AdminConfig, AuthConfig};
use backfill::{BatchOutcome, Engine, Registry, SqlRepair};
use diesel_async::SimpleAsyncConnection;
use serde_json::Value;
use std::collections::BTreeSet;
use support::admin::{call, serve, Resp};
use support::TestDb;

/// The repair under test: `n = n + 1` and a long note over the items whose
/// id is not a multiple of 10 (90 of 100), ten keys a batch, journaled.
const ID: &str = "items.fix";
/// A repair whose every batch fails in PostgreSQL (division by zero).
const BROKEN: &str = "items.broken";
/// The same update over every item in two partitions.
const PARTS: &str = "items.parts";

/// Tokens: the operator (read, operate, inspect) and a principal that may
/// operate but not inspect.
const INSPECTOR: &str = "inspector-token-0123456789";
const OPERATOR: &str = "operator-token-0123456789";

fn registry() -> Registry {
    let fix = SqlRepair::new(ID, "items")
        .key("id")
        .set("n = n + 1, note = repeat('x', 500)")
        .filter("id % 10 <> 0")
        .validate_where("n <> 1")
        .batch_size(10)
        .journal(["n", "note"])
        .build()
        .expect("definition");
    let broken = SqlRepair::new(BROKEN, "items")
        .key("id")
        .set("n = n / 0")
        .validate_where("false")
        .batch_size(10)
        .build()
        .expect("definition");
    let parts = SqlRepair::new(PARTS, "items")
        .key("id")
        .set("n = n + 1")
        .validate_where("n <> 1")
        .batch_size(10)
        .partitions(2)
        .build()
        .expect("definition");
    Registry::new()
        .with(fix)
        .expect("registers")
        .with(broken)
        .expect("registers")
        .with(parts)
        .expect("registers")
}

fn admin(engine: Engine) -> Admin {
    let d = |t: &str| hex::encode(sha256(t));
    let file = format!(
        r#"[{{"name": "inspector", "sha256": "{}", "capabilities": ["backfill:read", "backfill:operate", "backfill:inspect"]}},
            {{"name": "ops", "sha256": "{}", "capabilities": ["backfill:read", "backfill:operate"]}}]"#,
        d(INSPECTOR),
        d(OPERATOR)
    );
    Admin::new(
        engine,
        AdminConfig {
            auth: AuthConfig::Tokens(AuthConfig::parse_tokens_file(&file).expect("tokens")),
            auto_backfills: false,
            required: BTreeSet::new(),
        },
    )
}

/// A database with 100 items and both repairs registered.
async fn setup() -> (TestDb, Engine) {
    let db = support::test_db().await;
    db.exec(
        "CREATE TABLE items (id bigint PRIMARY KEY, n integer NOT NULL DEFAULT 0, note text); \
         INSERT INTO items (id) SELECT g FROM generate_series(1, 100) g",
    )
    .await;
    let engine =
        Engine::new(db.pool.clone(), registry(), support::engine_config()).expect("engine");
    engine.register().await.expect("register");
    (db, engine)
}

/// Everything a dry run must leave as it was: the whole table's checksum,
/// the backfill's row with every column, and its partitions.
async fn fingerprint(db: &TestDb, id: &str) -> String {
    db.text(&format!(
        "SELECT concat_ws(' | ', \
             (SELECT md5(string_agg(t::text, ',' ORDER BY id)) FROM items t), \
             (SELECT b::text FROM backfill b WHERE id = '{id}'), \
             (SELECT string_agg(p::text, ',' ORDER BY part) FROM backfill_partition p \
                  WHERE backfill_id = '{id}')) AS v"
    ))
    .await
    .expect("fingerprint")
}

async fn dry_run(url: &str, id: &str, query: &str, token: &str) -> Resp {
    call(
        url,
        "POST",
        &format!("/admin/backfills/{id}/dry-run{query}"),
        Some(token),
        None,
    )
    .await
}

/// Run `n` real batches of `ID` from a fresh claim and give the claim
/// back: the keys and the checkpoint of each.
async fn real_batches(engine: &Engine, n: usize) -> Vec<(usize, Value)> {
    let mut claim = engine
        .claim_next("w1", &[])
        .await
        .expect("claim")
        .expect("claimable");
    let mut out = Vec::new();
    for _ in 0..n {
        match engine.run_batch(&mut claim).await.expect("batch") {
            BatchOutcome::Committed { keys, .. } => {
                out.push((keys, claim.checkpoint_json().expect("checkpoint")))
            }
            other => panic!("batch did not commit: {other:?}"),
        }
    }
    engine.release(&claim).await.expect("release");
    out
}

fn keys(report: &Value) -> Vec<u64> {
    report["batches"]
        .as_array()
        .expect("batches")
        .iter()
        .map(|b| b["keys"].as_u64().expect("keys"))
        .collect()
}

/// DRY-1: a dry run of a pending and of a paused backfill leaves the whole
/// table and the backfill row byte-identical; the forecast's row count is
/// the real run's (90 rows from the start, 60 after three batches); a
/// running backfill answers 409 naming its state, unknown IDs 404, batches
/// out of range 422 naming the limit. Guard: the rollback at the end of
/// `Engine::dry_run` (a commit there changes the checksum), and the state
/// check in `dry_run_in`.
#[actix_rt::test]
async fn dry01_dry_runs_of_pending_and_paused_backfills_change_nothing() {
    let (db, engine) = setup().await;
    let server = serve(admin(engine.clone()));
    let before = fingerprint(&db, ID).await;
    let r = dry_run(&server.url, ID, "", INSPECTOR).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        fingerprint(&db, ID).await,
        before,
        "pending: nothing changed"
    );
    assert_eq!(r.body["state"], "pending");
    assert_eq!(r.body["bound_captured"], true);
    assert_eq!(r.body["bound"], 99);
    assert_eq!(r.body["rolled_back"], true);
    assert_eq!(keys(&r.body), [10, 10, 10]);
    assert_eq!(r.body["forecast"]["rows"], 90, "{}", r.text);
    assert_eq!(r.body["forecast"]["rows_basis"], "exact");
    assert_eq!(r.body["forecast"]["batches"], 9);

    engine.start(ID).await.expect("start");
    let r = dry_run(&server.url, ID, "", INSPECTOR).await;
    assert_eq!(r.status, 409, "{}", r.text);
    assert_eq!(r.body["error"], "conflict");
    assert!(
        r.body["message"]
            .as_str()
            .expect("message")
            .contains("running"),
        "{}",
        r.text
    );
    assert_eq!(r.body["current"]["state"], "running");

    real_batches(&engine, 3).await;
    engine.pause(ID).await.expect("pause");
    let before = fingerprint(&db, ID).await;
    let r = dry_run(&server.url, ID, "?batches=20", INSPECTOR).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        fingerprint(&db, ID).await,
        before,
        "paused: nothing changed"
    );
    assert_eq!(r.body["from"], 33, "from the stored checkpoint");
    assert_eq!(r.body["bound_captured"], false);
    assert_eq!(r.body["forecast"]["rows"], 60);
    assert_eq!(
        r.body["reached_bound"], true,
        "60 rows take 6 of 20 batches"
    );
    assert_eq!(keys(&r.body), [10, 10, 10, 10, 10, 10]);

    // The forecast against the real run: the rest of it selects 60 keys.
    engine.resume(ID).await.expect("resume");
    support::drive(&engine, "w2").await;
    let row = engine.get(ID).await.expect("row");
    assert_eq!(row.state, backfill::State::Completed);
    assert_eq!(
        row.rows_done, 90,
        "the real run's rows: 30 before, 60 forecast"
    );

    for (path_id, query, status, needle) in [
        ("items.unknown", "", 404, "no backfill"),
        (ID, "?batches=0", 422, "between 1 and 20"),
        (ID, "?batches=21", 422, "between 1 and 20"),
        (ID, "?sample=51", 422, "between 0 and 50"),
        (ID, "?batches=x", 400, "malformed"),
        (ID, "", 409, "completed"),
    ] {
        let r = dry_run(&server.url, path_id, query, INSPECTOR).await;
        assert_eq!(r.status, status, "{path_id}{query}: {}", r.text);
        assert!(r.text.contains(needle), "{path_id}{query}: {}", r.text);
        if status == 422 {
            assert_eq!(r.body["error"], "out_of_range");
        }
    }
    server.stop().await;
}

/// DRY-1 with partitions (PAR-1): a dry run of a pending partitioned
/// backfill runs the batches of the partitions `start` would write, one
/// partition after the other, and writes none of them; once started and
/// paused, it runs from each partition's own checkpoint. The forecast
/// sums every partition's count and equals the real run's rows. Guard:
/// the split in `capture_ranges` (without it the batches carry no
/// partition) and the rollback.
#[actix_rt::test]
async fn dry01_partitioned_dry_runs_follow_the_partitions() {
    let (db, engine) = setup().await;
    let server = serve(admin(engine.clone()));
    let partitions = |r: &Resp| -> Vec<Value> {
        r.body["batches"]
            .as_array()
            .expect("batches")
            .iter()
            .map(|b| b["partition"].clone())
            .collect()
    };
    for state in ["pending", "paused"] {
        if state == "paused" {
            engine.start(PARTS).await.expect("start");
            engine.pause(PARTS).await.expect("pause");
        }
        let before = fingerprint(&db, PARTS).await;
        let r = dry_run(&server.url, PARTS, "?batches=20", INSPECTOR).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            fingerprint(&db, PARTS).await,
            before,
            "{state}: nothing changed"
        );
        assert_eq!(r.body["state"], state);
        let parts = partitions(&r);
        let first = parts.iter().filter(|p| **p == 0).count();
        assert!(first > 0 && first < parts.len(), "{state}: {parts:?}");
        assert!(parts[first..].iter().all(|p| *p == 1), "{state}: {parts:?}");
        assert_eq!(keys(&r.body).iter().sum::<u64>(), 100, "{}", r.text);
        assert_eq!(r.body["reached_bound"], true);
        assert_eq!(r.body["forecast"]["rows"], 100);
        assert_eq!(r.body["forecast"]["rows_basis"], "exact");
    }
    engine.resume(PARTS).await.expect("resume");
    support::drive(&engine, "w1").await;
    assert_eq!(engine.get(PARTS).await.expect("row").rows_done, 100);
    server.stop().await;
}

/// DRY-2: the per-batch keys, rows changed and checkpoints of a dry run
/// equal those of the real run's first three batches; each batch wrote
/// WAL; the dry run is audited as `dry_run` with its outcome, and no
/// event of the engine moved. Guard: the per-batch measurement
/// (`run_batches`) and the audit insert in `Admin::dry_run`.
#[actix_rt::test]
async fn dry02_per_batch_counts_equal_the_real_runs_first_batches() {
    let (db, engine) = setup().await;
    let server = serve(admin(engine.clone()));
    let mut events = engine.events().subscribe();
    let r = dry_run(&server.url, ID, "?batches=3", OPERATOR).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(events.try_recv().is_err(), "a dry run publishes no event");
    let batches = r.body["batches"].as_array().expect("batches").clone();
    for b in &batches {
        assert_eq!(b["rows_changed"], b["keys"], "{b}");
        assert!(b["wal_bytes"].as_i64().expect("wal") > 0, "{b}");
        assert!(b["duration_ms"].as_f64().expect("duration") >= 0.0, "{b}");
        assert_eq!(b["lock_wait_ms"], Value::Null, "unknown stays unknown");
        assert_eq!(b["batch_size"], 10);
    }
    let forecast = &r.body["forecast"];
    assert!(forecast["wal_bytes"].as_i64().expect("wal forecast") > 0);
    assert!(forecast["duration_ms"].as_f64().is_some());

    engine.start(ID).await.expect("start");
    let real = real_batches(&engine, 3).await;
    let dry: Vec<(usize, Value)> = batches
        .iter()
        .map(|b| (b["keys"].as_u64().expect("keys") as usize, b["to"].clone()))
        .collect();
    assert_eq!(dry, real, "keys and checkpoints of the first three batches");

    let audit = db
        .text(&format!(
            "SELECT concat_ws('|', action, actor, outcome, prior_state, resulting_state, detail) AS v \
             FROM backfill_audit WHERE backfill_id = '{ID}' AND action = 'dry_run'"
        ))
        .await
        .expect("audit row");
    assert!(
        audit.starts_with("dry_run|ops|completed|pending|pending|3 of 3 batches ran, 30 keys"),
        "{audit}"
    );
    server.stop().await;
}

/// DRY-3: a principal holding `backfill:inspect` gets up to `sample`
/// changed rows of the first batch with their key and the before and
/// after values of the journaled columns, each cut to the documented
/// length; without the capability the report has counts only and says
/// why, and carries no row data; a repair without a journal says it has
/// none. Nothing of it stays in the journal. Guard: the capability check
/// in `Admin::dry_run`, and the sample read before the rollback.
#[actix_rt::test]
async fn dry03_the_sample_needs_the_inspect_capability_and_is_truncated() {
    let (db, engine) = setup().await;
    let server = serve(admin(engine.clone()));
    let r = dry_run(&server.url, ID, "?sample=3", INSPECTOR).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let sample = r.body["sample"].as_array().expect("a sample");
    assert_eq!(sample.len(), 3, "{}", r.text);
    let cut = "x".repeat(backfill::engine::SAMPLE_VALUE_MAX_CHARS) + "…";
    for (row, key) in sample.iter().zip([1, 2, 3]) {
        assert_eq!(row["key"], serde_json::json!({ "id": key }), "{row}");
        assert_eq!(
            row["before"],
            serde_json::json!({"n": 0, "note": null}),
            "{row}"
        );
        assert_eq!(
            row["after"],
            serde_json::json!({"n": 1, "note": cut}),
            "{row}"
        );
    }
    assert_eq!(r.body["sample_note"], Value::Null);
    let r = dry_run(&server.url, ID, "", INSPECTOR).await;
    assert_eq!(
        r.body["sample"].as_array().expect("default sample").len(),
        5
    );

    let r = dry_run(&server.url, ID, "?sample=3", OPERATOR).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["sample"], Value::Null);
    assert!(
        r.body["sample_note"]
            .as_str()
            .expect("note")
            .contains("backfill:inspect"),
        "{}",
        r.text
    );
    assert!(!r.text.contains("xxxx"), "no row data without inspect");

    let r = dry_run(&server.url, BROKEN, "", INSPECTOR).await;
    assert_eq!(r.body["sample"], Value::Null);
    assert!(
        r.body["sample_note"]
            .as_str()
            .expect("note")
            .contains("no journal"),
        "{}",
        r.text
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_journal")
            .await,
        0
    );
    server.stop().await;
}

/// DRY-1: a dry run holds no more rows locked at once than one batch, as
/// the real run does: while its third batch waits for a row another
/// session holds (seen in `pg_locks`), a third session can lock every row
/// of its first two batches at once (`NOWAIT`); the report states the
/// most keys one batch held. Guard: the rollback to each batch's
/// savepoint once it is measured (released instead, the first batches'
/// rows stay locked until the end and `NOWAIT` fails).
#[actix_rt::test]
async fn dry01_a_dry_run_releases_each_batchs_row_locks_before_the_next() {
    let (db, _) = setup().await;
    // Lock waits long enough to look while the third batch waits.
    let engine =
        Engine::new(db.pool.clone(), registry(), support::admin::engine_config()).expect("engine");
    let server = serve(admin(engine.clone()));
    let mut holder = db.connect().await;
    // Batches of ten keys over ids that are not multiples of ten: the
    // third starts at 23.
    holder
        .batch_execute("BEGIN; SELECT 1 FROM items WHERE id = 25 FOR UPDATE")
        .await
        .expect("hold a row of the third batch");
    let url = server.url.clone();
    let running = actix_rt::spawn(async move { dry_run(&url, ID, "?batches=3", OPERATOR).await });
    support::admin::wait_for_lock_waiters(&db, 1).await;
    let mut prober = db.connect().await;
    let probe = prober
        .batch_execute("BEGIN; SELECT 1 FROM items WHERE id <= 22 FOR UPDATE NOWAIT; ROLLBACK")
        .await;
    holder.batch_execute("COMMIT").await.expect("release");
    let report = running.await.expect("join");
    assert!(
        probe.is_ok(),
        "the first two batches' rows were still locked: {probe:?}"
    );
    assert_eq!(report.status, 200, "{}", report.text);
    assert_eq!(report.body["batches"].as_array().map(Vec::len), Some(3));
    assert_eq!(report.body["max_keys_locked"], 10, "{}", report.text);
    server.stop().await;
}

/// DRY-4: a batch that fails reports its classified error with its
/// bounded diagnostic and changes nothing: a batch that waits for a row
/// another session holds longer than the lock timeout is retryable (the
/// batches before it still reported), a batch PostgreSQL rejects (division
/// by zero) is fatal; both are audited `batch_failed`. Guard: the
/// savepoint rollback and classification of a failed batch in
/// `run_batches`.
#[actix_rt::test]
async fn dry04_a_failing_batch_reports_its_classified_error_and_changes_nothing() {
    let (db, engine) = setup().await;
    let server = serve(admin(engine.clone()));
    let before = fingerprint(&db, ID).await;
    let mut holder = db.connect().await;
    holder
        .batch_execute("BEGIN; SELECT 1 FROM items WHERE id = 15 FOR UPDATE")
        .await
        .expect("hold a row of the second batch");
    let r = dry_run(&server.url, ID, "?batches=3", OPERATOR).await;
    holder.batch_execute("ROLLBACK").await.expect("release");
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(keys(&r.body), [10], "the first batch ran");
    assert_eq!(r.body["error"]["batch"], 2, "{}", r.text);
    assert_eq!(r.body["error"]["kind"], "retryable");
    assert!(
        r.body["error"]["message"]
            .as_str()
            .expect("message")
            .contains("lock timeout"),
        "{}",
        r.text
    );
    assert_eq!(fingerprint(&db, ID).await, before);

    let before = fingerprint(&db, BROKEN).await;
    let r = dry_run(&server.url, BROKEN, "", OPERATOR).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.body["error"]["batch"], 1, "{}", r.text);
    assert_eq!(r.body["error"]["kind"], "fatal");
    assert!(r.body["batches"].as_array().expect("batches").is_empty());
    assert_eq!(fingerprint(&db, BROKEN).await, before);
    let failed = db
        .scalar(
            "SELECT count(*) AS v FROM backfill_audit \
             WHERE action = 'dry_run' AND outcome = 'batch_failed'",
        )
        .await;
    assert_eq!(failed, 2);
    server.stop().await;
}
