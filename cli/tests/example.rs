//! The example application against a real PostgreSQL: its own migrations,
//! the schema-compatibility check, the seeder, the four repairs through the
//! production engine, and the `/events` handlers through a real actix
//! HttpServer with repaired and unrepaired rows side by side.
//!
//! Index:
//! - CFG-5 (migrations off needs a compatible schema): `cfg05_*`; EMB-1
//!   (the host's own migrations on top of the framework's, the demo's
//!   seeder speed): `emb01_*`; EX-2 (the seeder's ties): `ex02_seed_*`;
//!   EMB-4 (repair throughput): `emb04_*`
//! - EX-1/EX-2/EX-4 (empty sets, compound keys with ties, batch limit): `ex01_*`, `ex02_*`
//! - EX-7 (repaired and unrepaired rows side by side): `ex07_*`
//! - RT-1/RT-3 (blocked with a bounded diagnostic, operator retry): `rt01_*`
//! - VAL-3 (validation blocked/failure are durable): `val03_*`

#[path = "../../tests/support/mod.rs"]
mod support;

use backfill::engine::{ActionOutcome, Started, ValidationRun};
use backfill::repair::Repair;
use backfill::{BatchOutcome, Engine, State, Validation};
use backfill_cli::example::{
    self, SchemaError, SchemaItem, TouchCount, AUTHOR_NORM_ID, CONTENT_LEN_ID, TAG_COUNT_ID,
    TOUCH_COUNT_ID,
};
use serde_json::Value;
use std::collections::HashMap;
use std::time::Instant;
use support::engine_config as config;
use support::{drive, test_db, TestDb};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A test database with both the framework's and the example's migrations.
async fn example_db() -> TestDb {
    let db = test_db().await;
    example::migrate(&db.url).await.expect("example migrations");
    db
}

/// An engine over all four example repairs with `batch` keys per batch,
/// registered.
async fn example_engine(db: &TestDb, batch: u32) -> Engine {
    let registry = example::registry(batch).expect("valid definitions");
    let engine = Engine::new(db.pool.clone(), registry, config()).expect("engine");
    engine.register().await.expect("register");
    engine
}

async fn start(engine: &Engine, id: &str) {
    assert!(
        matches!(engine.start(id).await.expect("start"), Started::Started(_)),
        "start {id}"
    );
}

async fn state(engine: &Engine, id: &str) -> State {
    engine.get(id).await.expect("row").state
}

// ------------------------------------------------------------ schema

/// The example's migrations apply on top of the framework's, are
/// idempotent, and leave a schema `check_schema` accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emb01_example_migrations_apply_and_schema_checks_pass() {
    let db = example_db().await;
    example::migrate(&db.url)
        .await
        .expect("second run is a no-op");
    let mut conn = db.pool.get().await.expect("pool");
    example::check_schema(&mut conn).await.expect("compatible");
    assert_eq!(db.scalar("SELECT count(*) AS v FROM events").await, 0);
}

/// With migrations off, a missing table, column or framework table fails
/// the check with an error naming exactly what is missing (CFG: a backfill
/// never changes schema, so startup must fail clearly instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cfg05_check_schema_names_what_is_missing() {
    // Framework tables only: the example's table is missing.
    let db = test_db().await;
    let mut conn = db.pool.get().await.expect("pool");
    let err = example::check_schema(&mut conn).await.unwrap_err();
    assert_eq!(
        err.items(),
        &[SchemaItem::MissingTable("events".into())],
        "{err}"
    );

    // Example migrated, then a column the repairs need dropped and one with
    // the wrong type, and a framework table dropped.
    example::migrate(&db.url).await.expect("example migrations");
    db.exec(
        "ALTER TABLE events DROP COLUMN author_norm; \
         ALTER TABLE events ALTER COLUMN content_len TYPE text; \
         DROP TABLE backfill_request",
    )
    .await;
    let err = example::check_schema(&mut conn).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, SchemaError::Incompatible(_)));
    assert!(text.contains("missing column events.author_norm"), "{text}");
    assert!(text.contains("missing table backfill_request"), "{text}");
    assert!(
        text.contains("column events.content_len has type text, expected integer"),
        "{text}"
    );
    assert_eq!(err.items().len(), 3, "{text}");
}

// ------------------------------------------------------------ seeding

/// The seeder inserts exactly N rows, unrepaired, with many created_at
/// ties, padded mixed-case authors, and exactly the requested bad tags.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ex02_seed_inserts_unrepaired_rows_with_ties_and_bad_tags() {
    let db = example_db().await;
    let n = example::seed(&db.pool, 250_123, 17).await.expect("seed");
    assert_eq!(n, 250_123);
    assert_eq!(db.scalar("SELECT count(*) AS v FROM events").await, 250_123);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM events WHERE jsonb_typeof(tags) <> 'array'")
            .await,
        17
    );
    let distinct = db
        .scalar("SELECT count(DISTINCT created_at) AS v FROM events")
        .await;
    assert!(distinct < 250_123 / 4, "many created_at ties: {distinct}");
    assert!(
        db.scalar("SELECT count(*) AS v FROM events WHERE author <> lower(btrim(author))")
            .await
            > 100_000,
        "most authors need normalizing"
    );
    assert_eq!(
        db.scalar(
            "SELECT count(*) AS v FROM events WHERE author_norm IS NOT NULL \
             OR content_len IS NOT NULL OR tag_count IS NOT NULL OR touch_count <> 0"
        )
        .await,
        0
    );
    assert_eq!(example::seed(&db.pool, 0, 5).await.expect("seed"), 0);
}

/// Speed of a 1,000,000-row seed (run with `--ignored`; prints rows/s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: seeds one million rows"]
async fn emb01_seed_one_million_rows_speed() {
    let db = example_db().await;
    let t = Instant::now();
    let n = example::seed(&db.pool, 1_000_000, 100).await.expect("seed");
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(n, 1_000_000);
    println!(
        "seeded {n} rows in {secs:.2}s = {:.0} rows/s",
        n as f64 / secs
    );
    // The database is ~200 MB: drop it rather than leave it on the shared
    // server (the other tests' databases are small and left for inspection).
    let name = db.name.clone();
    drop(db);
    let mut admin = db_admin().await;
    diesel_async::RunQueryDsl::execute(
        diesel::sql_query(format!("DROP DATABASE {name} WITH (FORCE)")),
        &mut admin,
    )
    .await
    .expect("drop the benchmark database");
}

/// Throughput of each repair over 200,000 rows with the default batch of
/// 1000 (run with `--ignored`; prints rows/s per repair).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "benchmark: repairs 200,000 rows four times"]
async fn emb04_repair_throughput() {
    let db = example_db().await;
    example::seed(&db.pool, 200_000, 0).await.expect("seed");
    let engine = example_engine(&db, example::DEFAULT_BATCH).await;
    for id in example::repair_ids() {
        start(&engine, id).await;
        let t = Instant::now();
        drive(&engine, "bench").await;
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(state(&engine, id).await, State::Completed, "{id}");
        println!(
            "{id}: 200000 rows in {secs:.2}s = {:.0} rows/s",
            200_000.0 / secs
        );
    }
    let name = db.name.clone();
    drop(db);
    let mut admin = db_admin().await;
    diesel_async::RunQueryDsl::execute(
        diesel::sql_query(format!("DROP DATABASE {name} WITH (FORCE)")),
        &mut admin,
    )
    .await
    .expect("drop the benchmark database");
}

async fn db_admin() -> diesel_async::AsyncPgConnection {
    use diesel_async::AsyncConnection;
    diesel_async::AsyncPgConnection::establish(support::server_url())
        .await
        .expect("connect to the test server")
}

// ------------------------------------------------------------ repairs

/// Every example repair runs to `completed` through the production engine,
/// in many small batches, and its postcondition holds on every row. The
/// non-idempotent touch-count repair ends with touch_count = 1 everywhere:
/// no batch was applied twice and none was skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ex04_every_example_repair_completes_through_the_engine() {
    let db = example_db().await;
    example::seed(&db.pool, 3_000, 0).await.expect("seed");
    let engine = example_engine(&db, 97).await;
    for id in example::repair_ids() {
        start(&engine, id).await;
        let row = engine.get(id).await.expect("row");
        assert_eq!(row.source_rows, Some(3_000), "{id}: progress is known");
    }
    drive(&engine, "w1").await;
    for id in example::repair_ids() {
        let row = engine.get(id).await.expect("row");
        assert_eq!(state(&engine, id).await, State::Completed, "{id}: {row:?}");
        assert_eq!(row.rows_done, 3_000, "{id}");
        assert_eq!(row.batches_done, 31, "{id}: ceil(3000 / 97) batches");
    }
    assert_eq!(
        db.scalar(
            "SELECT count(*) AS v FROM events WHERE author_norm IS DISTINCT FROM lower(btrim(author)) \
             OR content_len IS DISTINCT FROM char_length(content) \
             OR tag_count IS DISTINCT FROM jsonb_array_length(tags) \
             OR touch_count <> 1"
        )
        .await,
        0
    );
}

/// EX-1: on an empty table every repair captures an empty source set and
/// goes straight to validation, then completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ex01_empty_table_completes_without_batches() {
    let db = example_db().await;
    let engine = example_engine(&db, 10).await;
    for id in example::repair_ids() {
        start(&engine, id).await;
        let row = engine.get(id).await.expect("row");
        assert!(row.empty_source, "{id}");
        assert_eq!(state(&engine, id).await, State::Validating, "{id}");
    }
    drive(&engine, "w1").await;
    for id in example::repair_ids() {
        assert_eq!(state(&engine, id).await, State::Completed, "{id}");
        assert_eq!(engine.get(id).await.expect("row").batches_done, 0);
    }
}

/// EX-2: the compound (created_at, id) repair with a batch limit that cuts
/// through runs of tied created_at values repairs every row exactly once
/// and never more than the limit per batch. Rows created above the bound
/// are left to the write path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ex02_compound_key_repair_crosses_ties_without_skipping() {
    let db = example_db().await;
    example::seed(&db.pool, 1_000, 0).await.expect("seed");
    assert!(
        db.scalar(
            "SELECT count(*) AS v FROM (SELECT created_at FROM events GROUP BY 1 \
             HAVING count(*) > 5) t"
        )
        .await
            > 50,
        "the seed has runs of ties longer than a batch"
    );
    let engine = example_engine(&db, 5).await;
    start(&engine, CONTENT_LEN_ID).await;
    // A row created after start with a timestamp above the bound.
    db.exec(
        "INSERT INTO events (created_at, author, kind, content) VALUES (now(), 'x', 1, 'late')",
    )
    .await;
    let mut claim = engine
        .claim_next("w1", &[])
        .await
        .expect("claim")
        .expect("claimable");
    let mut batches = 0;
    loop {
        let before = db
            .scalar("SELECT count(*) AS v FROM events WHERE content_len IS NOT NULL")
            .await;
        let outcome = engine.run_batch(&mut claim).await.expect("batch");
        let after = db
            .scalar("SELECT count(*) AS v FROM events WHERE content_len IS NOT NULL")
            .await;
        assert!(after - before <= 5, "EX-4: at most the limit per batch");
        batches += 1;
        if let BatchOutcome::Committed {
            reached_bound: true,
            ..
        } = outcome
        {
            break;
        }
    }
    assert_eq!(batches, 200);
    drive(&engine, "w1").await;
    assert_eq!(state(&engine, CONTENT_LEN_ID).await, State::Completed);
    assert_eq!(
        db.scalar(
            "SELECT count(*) AS v FROM events WHERE content_len IS DISTINCT FROM char_length(content)"
        )
        .await,
        1,
        "only the row above the bound is left to the write path"
    );
}

/// The non-idempotent repair's validation is the double-apply detector: a
/// row touched twice (or never) up to the bound fails validation, and rows
/// above the bound do not count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn val03_touch_count_validation_detects_double_apply() {
    let db = example_db().await;
    example::seed(&db.pool, 50, 0).await.expect("seed");
    let engine = example_engine(&db, 7).await;
    start(&engine, TOUCH_COUNT_ID).await;
    drive(&engine, "w1").await;
    assert_eq!(state(&engine, TOUCH_COUNT_ID).await, State::Completed);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM events WHERE touch_count <> 1")
            .await,
        0
    );

    let repair = TouchCount::new(7);
    let mut conn = db.pool.get().await.expect("pool");
    db.exec("INSERT INTO events (author, kind, content) VALUES ('new', 1, 'above the bound')")
        .await;
    assert_eq!(
        repair
            .validate(&mut conn, Some(&50))
            .await
            .expect("validate"),
        Validation::Success,
        "a new row above the bound (touch_count 0) is not the repair's business"
    );
    db.exec("UPDATE events SET touch_count = 2 WHERE id = 10")
        .await;
    match repair
        .validate(&mut conn, Some(&50))
        .await
        .expect("validate")
    {
        Validation::Failure(m) => {
            assert!(m.contains("1 events were touched more than once"), "{m}")
        }
        other => panic!("expected a failure, got {other:?}"),
    }
}

// ------------------------------------------------------------ blocked

/// The last execution diagnostic of a backfill.
async fn last_error(engine: &Engine, id: &str) -> String {
    engine
        .get(id)
        .await
        .expect("row")
        .last_error
        .unwrap_or_default()
}

/// RT-1/RT-3: bad `tags` rows block the tag-count repair with an
/// actionable, bounded diagnostic that counts the rows and carries no row
/// values; the checkpoint stops before the first bad row. After the
/// operator fixes the rows, `retry` resumes at the same bound and
/// checkpoint and the repair completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rt01_bad_tags_block_with_bounded_diagnostic_then_retry_completes() {
    let db = example_db().await;
    example::seed(&db.pool, 1_000, 7).await.expect("seed");
    let first_bad = db
        .scalar("SELECT min(id) AS v FROM events WHERE jsonb_typeof(tags) <> 'array'")
        .await;
    let engine = example_engine(&db, 50).await;
    start(&engine, TAG_COUNT_ID).await;
    drive(&engine, "w1").await;

    assert_eq!(state(&engine, TAG_COUNT_ID).await, State::Blocked);
    let blocked = engine.get(TAG_COUNT_ID).await.expect("row");
    assert_eq!(blocked.last_error_kind.as_deref(), Some("blocked"));
    let message = last_error(&engine, TAG_COUNT_ID).await;
    assert!(
        message.starts_with(
            "7 events after the checkpoint and up to the bound have tags that are not a JSON array"
        ),
        "{message}"
    );
    assert!(message.contains("then retry"), "actionable: {message}");
    assert!(message.len() <= 512, "bounded");
    for value in ["tag-", "{", "alice", "Alice", "event "] {
        assert!(!message.contains(value), "no row values: {message}");
    }
    let done = db
        .scalar("SELECT count(*) AS v FROM events WHERE tag_count IS NOT NULL")
        .await;
    assert!(
        done < first_bad,
        "the checkpoint stops before the first bad row"
    );
    let checkpoint = blocked.checkpoint.clone();

    // The operator's fix, then retry at the same bound and checkpoint.
    db.exec("UPDATE events SET tags = '[]' WHERE jsonb_typeof(tags) <> 'array'")
        .await;
    assert!(matches!(
        engine.retry(TAG_COUNT_ID).await.expect("retry"),
        ActionOutcome::Applied { .. }
    ));
    let retried = engine.get(TAG_COUNT_ID).await.expect("row");
    assert_eq!(retried.checkpoint, checkpoint);
    assert_eq!(retried.bound, blocked.bound);
    drive(&engine, "w1").await;
    assert_eq!(state(&engine, TAG_COUNT_ID).await, State::Completed);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM events WHERE tag_count IS DISTINCT FROM jsonb_array_length(tags)")
            .await,
        0
    );
}

/// Claim and run batches until the row is `validating`.
async fn run_to_validating(engine: &Engine, id: &str) {
    let mut claim = engine
        .claim_next("w1", &[])
        .await
        .expect("claim")
        .expect("claimable");
    while !matches!(
        engine.run_batch(&mut claim).await.expect("batch"),
        BatchOutcome::Committed {
            reached_bound: true,
            ..
        }
    ) {}
    assert_eq!(state(engine, id).await, State::Validating);
}

/// VAL-3: the tag-count validation reports a bad row that appeared after
/// its batch as `blocked` (an unmet data prerequisite, count only) and a
/// wrong count as `failed`; after the fix, retry re-validates and
/// completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn val03_tag_count_validation_blocks_on_bad_data_and_fails_on_wrong_counts() {
    let db = example_db().await;
    example::seed(&db.pool, 200, 0).await.expect("seed");
    let engine = example_engine(&db, 64).await;
    start(&engine, TAG_COUNT_ID).await;
    run_to_validating(&engine, TAG_COUNT_ID).await;

    // Bad data behind the checkpoint: validation blocks.
    db.exec("UPDATE events SET tags = '\"oops\"' WHERE id IN (3, 4)")
        .await;
    let claim = engine
        .claim_next("v1", &[])
        .await
        .expect("claim")
        .expect("validating is claimable");
    match engine.validate_claimed(&claim).await.expect("validate") {
        ValidationRun::Rejected { state, detail } => {
            assert_eq!(state, State::Blocked);
            assert!(
                detail.starts_with("2 events up to the bound have tags that are not a JSON array"),
                "{detail}"
            );
            assert!(!detail.contains("oops"), "no row values: {detail}");
        }
        other => panic!("expected blocked, got {other:?}"),
    }
    assert_eq!(state(&engine, TAG_COUNT_ID).await, State::Blocked);

    // Fixed data but a wrong stored count: validation fails.
    db.exec(
        "UPDATE events SET tags = '[\"a\"]', tag_count = 1 WHERE id IN (3, 4); \
             UPDATE events SET tag_count = 42 WHERE id = 5",
    )
    .await;
    engine.retry(TAG_COUNT_ID).await.expect("retry");
    assert_eq!(state(&engine, TAG_COUNT_ID).await, State::Validating);
    drive(&engine, "v1").await;
    assert_eq!(state(&engine, TAG_COUNT_ID).await, State::Failed);

    db.exec("UPDATE events SET tag_count = jsonb_array_length(tags) WHERE id = 5")
        .await;
    engine.retry(TAG_COUNT_ID).await.expect("retry");
    drive(&engine, "v1").await;
    assert_eq!(state(&engine, TAG_COUNT_ID).await, State::Completed);
}

// ------------------------------------------------------------ HTTP

/// One HTTP/1.1 request over a plain TCP connection; returns the status and
/// the JSON body.
async fn http(addr: std::net::SocketAddr, method: &str, path: &str, body: &str) -> (u16, Value) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.expect("read");
    let raw = String::from_utf8(raw).expect("utf-8 response");
    let (head, body) = raw.split_once("\r\n\r\n").expect("http response");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let json = serde_json::from_str(body).unwrap_or_else(|_| panic!("json body: {body}"));
    (status, json)
}

/// EX-7: with a repair half done (some rows repaired, some not, and legacy
/// rows whose tags are not arrays), GET renders every row correctly,
/// computing unrepaired values on read with the repair's own expression;
/// POST writes the derived columns itself; bad input is a 400 naming the
/// field.
#[actix_web::test]
async fn ex07_events_api_serves_repaired_and_unrepaired_rows_side_by_side() {
    let db = example_db().await;
    example::seed(&db.pool, 120, 3).await.expect("seed");
    let engine = example_engine(&db, 40).await;
    for id in [AUTHOR_NORM_ID, CONTENT_LEN_ID] {
        start(&engine, id).await;
    }
    // One batch of each: 40 rows repaired, 80 not.
    for _ in 0..2 {
        let mut claim = engine
            .claim_next("w1", &[])
            .await
            .expect("claim")
            .expect("claimable");
        engine.run_batch(&mut claim).await.expect("batch");
        engine.release(&claim).await.expect("release");
    }
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM events WHERE author_norm IS NULL")
            .await,
        80
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM events WHERE content_len IS NULL")
            .await,
        80
    );

    let pool = db.pool.clone();
    let server = actix_web::HttpServer::new(move || {
        actix_web::App::new().configure(|cfg| example::configure(cfg, pool.clone()))
    })
    .workers(1)
    .bind(("127.0.0.1", 0))
    .expect("bind");
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);

    // POST: a new row with every derived column written by the write path.
    let (status, created) = http(
        addr,
        "POST",
        "/events",
        r#"{"author":"  MiXeD Case ","kind":3,"content":"héllo","tags":["a","b"]}"#,
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["author_normalized"], "mixed case");
    assert_eq!(created["content_len"], 5);
    assert_eq!(created["tag_count"], 2);
    let new_id = created["id"].as_i64().expect("id");
    assert_eq!(
        db.text(&format!(
            "SELECT author_norm AS v FROM events WHERE id = {new_id} \
             AND content_len = 5 AND tag_count = 2"
        ))
        .await
        .as_deref(),
        Some("mixed case"),
        "POST stores the derived columns itself"
    );

    // GET: every row, repaired or not, renders the same values the repairs
    // would store.
    let (status, page) = http(addr, "GET", "/events?limit=500", "").await;
    assert_eq!(status, 200, "{page}");
    let events = page["events"].as_array().expect("events");
    assert_eq!(events.len(), 121);
    let expected: HashMap<i64, (String, i64)> = {
        #[derive(diesel::QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            id: i64,
            #[diesel(sql_type = diesel::sql_types::Text)]
            norm: String,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            len: i64,
        }
        let mut conn = db.pool.get().await.expect("pool");
        let rows: Vec<Row> = diesel_async::RunQueryDsl::load(
            diesel::sql_query(
                "SELECT id, lower(btrim(author)) AS norm, char_length(content)::bigint AS len \
                 FROM events",
            ),
            &mut conn,
        )
        .await
        .expect("expected values");
        rows.into_iter().map(|r| (r.id, (r.norm, r.len))).collect()
    };
    let mut legacy_bad_tags = 0;
    for event in events {
        let id = event["id"].as_i64().expect("id");
        let (norm, len) = &expected[&id];
        assert_eq!(event["author_normalized"], norm.as_str(), "{event}");
        assert_eq!(event["content_len"].as_i64(), Some(*len), "{event}");
        match event["tags"].as_array() {
            Some(tags) => assert_eq!(event["tag_count"].as_u64(), Some(tags.len() as u64)),
            None => {
                legacy_bad_tags += 1;
                assert!(event["tag_count"].is_null(), "{event}");
            }
        }
    }
    assert_eq!(legacy_bad_tags, 3, "legacy rows with bad tags still render");
    let (_, page) = http(addr, "GET", "/events", "").await;
    assert_eq!(
        page["events"].as_array().map(Vec::len),
        Some(50),
        "default limit"
    );
    assert_eq!(
        page["events"][0]["id"].as_i64(),
        Some(new_id),
        "newest first"
    );

    // Bad input: 400 with a JSON error naming the field.
    for path in ["/events?limit=0", "/events?limit=501", "/events?limit=ten"] {
        let (status, err) = http(addr, "GET", path, "").await;
        assert_eq!(status, 400, "{path}");
        assert_eq!(err["field"], "limit", "{err}");
    }
    for (body, field) in [
        ("nope", "body"),
        (r#"{"kind":1,"content":"x"}"#, "author"),
        (r#"{"author":"a","kind":"x","content":"x"}"#, "kind"),
        (
            r#"{"author":"a","kind":1,"content":"x","tags":"t"}"#,
            "tags",
        ),
    ] {
        let (status, err) = http(addr, "POST", "/events", body).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(err["field"], field, "{err}");
    }
    assert_eq!(db.scalar("SELECT count(*) AS v FROM events").await, 121);

    // The repairs still complete afterwards, and the new row above their
    // bounds keeps what the write path stored.
    drive(&engine, "w1").await;
    for id in [AUTHOR_NORM_ID, CONTENT_LEN_ID] {
        assert_eq!(state(&engine, id).await, State::Completed, "{id}");
    }
    handle.stop(true).await;
}
