//! Undo through the before-image journal (UNDO-1..UNDO-4), through the
//! production engine, admin layer and HTTP server against real PostgreSQL.
//!
//! Index (each test's doc comment names the guard whose removal fails it):
//! - UNDO-1 the journal commits with its batch, or not at all: `undo01_*`
//! - UNDO-2 the reverse backfill, its conflict rule, partitions: `undo02_*`
//! - UNDO-3 the undo's validation, no undo of an undo, one undo: `undo03_*`
//! - UNDO-4 the journal's visibility and its audited prune: `undo04_*`
//!
//! Races are forced with PostgreSQL's own fence (a pause committed
//! between a claim and its batch) and row locks (a second connection's
//! uncommitted change a batch waits for, seen in `pg_locks`), never with
//! sleeps.

mod support;

use async_trait::async_trait;
use backfill::repair::{
    Batches, Journal, Repair, RepairError, SelectThenMutate, SourceSet, SqlRepair, Validation,
};
use backfill::{BatchOutcome, Engine, Registry, State};
use diesel::sql_types::BigInt;
use diesel::QueryableByName;
use diesel_async::{AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use serde_json::Value;
use support::admin::{admin, call, drive, serve, Resp, OPERATOR, READER};
use support::TestDb;

const ID: &str = "people.email-norm.v1";
const UNDO: &str = "people.email-norm.v1.undo";

/// `people` with `rows` rows whose `email_norm` is NULL, and the
/// checksum of every row before any repair.
async fn people(rows: i64) -> (TestDb, String) {
    let db = support::test_db().await;
    db.exec(&format!(
        "CREATE TABLE people (id bigint PRIMARY KEY, email text NOT NULL, email_norm text, \
             touched integer NOT NULL DEFAULT 0); \
         INSERT INTO people (id, email) SELECT g, 'User' || g || '@Example.COM' \
             FROM generate_series(1, {rows}) g"
    ))
    .await;
    let before = checksum(&db).await;
    (db, before)
}

/// Every row of `people`, as one comparable text.
async fn checksum(db: &TestDb) -> String {
    db.text("SELECT md5(string_agg(p::text, ',' ORDER BY id)) AS v FROM people p")
        .await
        .expect("rows")
}

/// The journaled repair: `email_norm = lower(email)`.
fn email_norm(partitions: u32) -> SqlRepair {
    SqlRepair::new(ID, "people")
        .key("id")
        .set("email_norm = lower(email)")
        .validate_where("email_norm IS DISTINCT FROM lower(email)")
        .journal(["email_norm"])
        .batch_size(100)
        .partitions(partitions)
        .build()
        .expect("definition")
}

fn engine(db: &TestDb, registry: Registry) -> Engine {
    Engine::new(db.pool.clone(), registry, support::admin::engine_config()).expect("engine")
}

/// A registered engine with the journaled repair, and the repair run to
/// `completed`.
async fn repaired(db: &TestDb, partitions: u32) -> Engine {
    let engine = engine(
        db,
        Registry::new()
            .with(email_norm(partitions))
            .expect("registers"),
    );
    engine.register().await.expect("register");
    engine.start(ID).await.expect("start");
    drive(&engine).await;
    assert_eq!(engine.get(ID).await.expect("row").state, State::Completed);
    engine
}

/// An engine with the journaled repair, `ID` started, and worker `w1`'s
/// claim of it.
async fn claimed(db: &TestDb) -> (Engine, backfill::Claim) {
    let engine = engine(db, Registry::new().with(email_norm(1)).expect("registers"));
    engine.register().await.expect("register");
    engine.start(ID).await.expect("start");
    let claim = engine
        .claim_next("w1", &[])
        .await
        .expect("claim")
        .expect("claimed");
    (engine, claim)
}

/// The operator's undo of `ID` through the API, with key `u-1`.
async fn undo_by_operator(url: &str) -> Resp {
    post(url, &format!("/admin/backfills/{ID}/undo"), OPERATOR, "u-1").await
}

async fn post(url: &str, path: &str, token: &str, key: &str) -> Resp {
    call(url, "POST", path, Some(token), Some(key)).await
}

async fn journal_rows(db: &TestDb, id: &str) -> i64 {
    db.scalar(&format!(
        "SELECT coalesce(sum(row_count), 0)::bigint AS v FROM backfill_journal \
         WHERE backfill_id = '{id}'"
    ))
    .await
}

/// UNDO-1, UNDO-2: a completed journaled repair is undone; the rows the
/// application changed since keep the application's value and are counted
/// as conflicts, every other row is byte-identical to its state before the
/// repair, and the original's row stays `completed` and names its undo.
/// Guards: the journal write in the batch statement (no journal, nothing
/// restored), the conflict rule's equality (the application's values
/// would be overwritten).
#[actix_rt::test]
async fn undo01_undo_restores_every_untouched_row_and_keeps_the_applications_changes() {
    let (db, before) = people(2_000).await;
    let engine = repaired(&db, 1).await;
    assert_eq!(
        journal_rows(&db, ID).await,
        2_000,
        "every changed row journaled"
    );
    let original = engine.get(ID).await.expect("row");

    // The application changes 5 % of the rows after the repair.
    db.exec("UPDATE people SET email_norm = 'app:' || id, touched = 1 WHERE id % 20 = 0")
        .await;
    let server = serve(admin(engine.clone()));
    let undo = undo_by_operator(&server.url).await;
    assert_eq!(undo.status, 200, "{}", undo.text);
    assert_eq!(undo.body["outcome"], "applied");
    assert_eq!(undo.body["backfill"]["id"], UNDO);
    assert_eq!(undo.body["backfill"]["undo_of"], ID);
    drive(&engine).await;
    assert_eq!(
        engine.get(UNDO).await.expect("undo").state,
        State::Completed
    );

    // Untouched rows: exactly as before the repair. Touched rows: the
    // application's values.
    let kept = db
        .scalar("SELECT count(*) AS v FROM people WHERE touched = 1 AND email_norm = 'app:' || id")
        .await;
    assert_eq!(kept, 100);
    db.exec("UPDATE people SET email_norm = NULL, touched = 0 WHERE touched = 1")
        .await;
    assert_eq!(checksum(&db).await, before, "every untouched row restored");

    // The counts are exact, and the original did not change (REG-5).
    let detail = call(
        &server.url,
        "GET",
        &format!("/admin/backfills/{UNDO}"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(detail.body["journal"]["restored"], 1_900, "{}", detail.text);
    assert_eq!(detail.body["journal"]["conflicts"], 100);
    let keys = detail.body["journal"]["conflict_keys"]
        .as_array()
        .expect("keys");
    assert_eq!(keys.len(), 20);
    assert_eq!(keys[0], serde_json::json!({"id": 20}));
    let after = engine.get(ID).await.expect("row");
    assert_eq!(after.state, State::Completed);
    assert_eq!(
        (after.generation, after.checkpoint),
        (original.generation, original.checkpoint)
    );
    let view = call(
        &server.url,
        "GET",
        &format!("/admin/backfills/{ID}"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(view.body["undo"]["id"], UNDO, "{}", view.text);
    assert_eq!(view.body["undo"]["state"], "completed");
    assert_eq!(view.body["journaled"], true);
    server.stop().await;
}

/// UNDO-1, UNDO-2: a declared repair journals columns of any type: an
/// array column holding NULLs, empty arrays and arrays of different
/// dimensions, beside scalar columns holding NULLs, is journaled and
/// undone to the byte. Guard: the array columns' own aggregate in the
/// journal entry (`array_agg` of those values refuses the NULL array and
/// the mixed dimensions, so every batch fails and nothing completes).
#[actix_rt::test]
async fn undo01_array_and_scalar_columns_of_any_value_are_journaled_and_restored() {
    let db = support::test_db().await;
    db.exec(
        "CREATE DOMAIN small_ints AS int[]; \
         CREATE TABLE tagged (id bigint PRIMARY KEY, tags int[], more small_ints, \
             label text, score numeric, seen timestamptz); \
         INSERT INTO tagged \
         SELECT g, \
             CASE g % 4 WHEN 0 THEN NULL WHEN 1 THEN '{}' WHEN 2 THEN ARRAY[g::int] \
                 ELSE ARRAY[[g::int, 1], [2, 3]] END, \
             CASE WHEN g % 3 = 0 THEN NULL ELSE ARRAY[g::int, g::int] END, \
             CASE WHEN g % 5 = 0 THEN NULL ELSE 'L' || g END, \
             CASE WHEN g % 7 = 0 THEN NULL ELSE g / 3.0 END, \
             CASE WHEN g % 2 = 0 THEN NULL ELSE timestamptz '2026-01-01' + g * interval '1 s' END \
         FROM generate_series(1, 300) g",
    )
    .await;
    let checksum = || async {
        db.text("SELECT md5(string_agg(t::text, ',' ORDER BY id)) AS v FROM tagged t")
            .await
            .expect("rows")
    };
    let before = checksum().await;
    let id = "tagged.flatten.v1";
    let repair = SqlRepair::new(id, "tagged")
        .key("id")
        .set("tags = ARRAY[0], more = NULL, label = upper(label), score = 1, seen = NULL")
        .validate_where("tags IS DISTINCT FROM ARRAY[0]")
        .journal(["tags", "more", "label", "score", "seen"])
        .batch_size(64)
        .build()
        .expect("definition");
    let engine = engine(&db, Registry::new().with(repair).expect("registers"));
    engine.register().await.expect("register");
    engine.start(id).await.expect("start");
    drive(&engine).await;
    assert_eq!(engine.get(id).await.expect("row").state, State::Completed);
    assert_eq!(journal_rows(&db, id).await, 300, "every row journaled");
    assert_ne!(checksum().await, before, "the repair changed the rows");

    let server = serve(admin(engine.clone()));
    let undo = post(
        &server.url,
        &format!("/admin/backfills/{id}/undo"),
        OPERATOR,
        "u-arrays",
    )
    .await;
    assert_eq!(undo.status, 200, "{}", undo.text);
    drive(&engine).await;
    let undo_id = format!("{id}.undo");
    assert_eq!(
        engine.get(&undo_id).await.expect("undo").state,
        State::Completed
    );
    assert_eq!(checksum().await, before, "every row restored to the byte");
    server.stop().await;
}

/// UNDO-1: a batch the fence rejects leaves no journal rows: a pause
/// commits between the claim and its batch, the batch's mutation and
/// journal run, and the fence rolls both back with the checkpoint. Guard:
/// the journal written in the batch's own transaction (a journal written
/// on its own would stay).
#[actix_rt::test]
async fn undo01_a_batch_rejected_at_the_fence_leaves_no_journal_rows() {
    let (db, before) = people(300).await;
    let (engine, mut claim) = claimed(&db).await;
    engine.pause(ID).await.expect("pause");
    assert_eq!(
        engine.run_batch(&mut claim).await.expect("batch"),
        BatchOutcome::Stale
    );
    assert_eq!(journal_rows(&db, ID).await, 0);
    assert_eq!(checksum(&db).await, before, "the mutation rolled back too");
    // A committed batch always has its journal rows.
    engine.resume(ID).await.expect("resume");
    let mut claim = engine
        .claim_next("w1", &[])
        .await
        .expect("claim")
        .expect("claimed");
    let outcome = engine.run_batch(&mut claim).await.expect("batch");
    assert!(
        matches!(outcome, BatchOutcome::Committed { keys: 100, .. }),
        "{outcome:?}"
    );
    drop(claim);
    assert_eq!(journal_rows(&db, ID).await, 100);
}

/// UNDO-1: a row an application changes while a batch waits for it is
/// never journaled with the batch's stale before-image, and never skipped:
/// a second connection holds the row's lock with an uncommitted change,
/// the batch blocks on it (seen in `pg_locks`), the change commits, and
/// the batch fails as a retryable serialization failure with nothing
/// written; run again, it journals the row as the application left it.
/// The undo then restores the application's value. Guards: the update's
/// `ctid` condition (joined by key instead, the batch writes the new
/// version under the snapshot's image, and the undo puts back NULL over
/// the application's write) and `backfill_journal_all_written` (without
/// it the batch commits without row 5, which is then never repaired).
#[actix_rt::test]
async fn undo01_a_row_changed_while_the_batch_waits_is_journaled_as_changed() {
    let (db, _) = people(300).await;
    let (engine, mut claim) = claimed(&db).await;
    let mut writer = db.connect().await;
    writer
        .batch_execute("BEGIN; UPDATE people SET email_norm = 'app' WHERE id = 5")
        .await
        .expect("the application's change");
    let (raced, ()) = tokio::join!(engine.run_batch(&mut claim), async {
        support::admin::wait_for_lock_waiters(&db, 1).await;
        writer.batch_execute("COMMIT").await.expect("commit");
    });
    let error = raced.expect_err("the batch raced the application's change");
    assert!(
        error.to_string().contains("serialization failure"),
        "{error}"
    );
    assert_eq!(journal_rows(&db, ID).await, 0);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM people WHERE email_norm = lower(email)")
            .await,
        0,
        "the batch rolled back"
    );
    let outcome = engine.run_batch(&mut claim).await;
    assert!(
        matches!(outcome, Ok(BatchOutcome::Committed { keys: 100, .. })),
        "{outcome:?}"
    );
    drop(claim);
    let journaled = db
        .text(&format!(
            "SELECT {before} AS v FROM backfill_journal AS j, \
                 jsonb_array_elements(j.row_key->'id') WITH ORDINALITY AS k(id, pos) \
             WHERE j.backfill_id = '{ID}' AND k.id = '5'",
            before = "(j.before->'email_norm'->(k.pos::int - 1))::text",
        ))
        .await;
    assert_eq!(journaled.as_deref(), Some(r#""app""#));
    db.expire_lease(ID).await;
    drive(&engine).await;
    let server = serve(admin(engine.clone()));
    let undo = undo_by_operator(&server.url).await;
    assert_eq!(undo.status, 200, "{}", undo.text);
    drive(&engine).await;
    assert_eq!(engine.get(UNDO).await.expect("row").state, State::Completed);
    assert_eq!(
        db.text("SELECT coalesce(email_norm, 'NULL') AS v FROM people WHERE id = 5")
            .await
            .as_deref(),
        Some("app")
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM people WHERE email_norm IS NOT NULL")
            .await,
        1
    );
    server.stop().await;
}

/// A hand-written two-statement repair that sets `email_norm` and
/// journals it through the engine.
struct HandWritten;

#[derive(QueryableByName)]
struct Max {
    #[diesel(sql_type = diesel::sql_types::Nullable<BigInt>)]
    max: Option<i64>,
}

#[derive(QueryableByName)]
struct Key {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

#[async_trait]
impl Repair for HandWritten {
    type Key = i64;

    fn id(&self) -> &str {
        ID
    }

    fn batch_limit(&self) -> u32 {
        64
    }

    fn journal(&self) -> Option<Journal> {
        Some(Journal::new("people", ["id"], ["email_norm"]))
    }

    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        let row: Max = diesel::sql_query("SELECT max(id) AS max FROM people")
            .get_result(conn)
            .await?;
        Ok(row
            .max
            .map_or(SourceSet::Empty, |upper| SourceSet::Bounded {
                upper,
                rows: None,
            }))
    }

    fn batches(&self) -> Batches<'_, i64> {
        Batches::TwoStatements(self)
    }

    async fn validate(
        &self,
        _conn: &mut AsyncPgConnection,
        _bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        Ok(Validation::Success)
    }
}

#[async_trait]
impl SelectThenMutate<i64> for HandWritten {
    async fn select_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Vec<i64>, RepairError> {
        let keys: Vec<Key> = diesel::sql_query(
            "SELECT id FROM people WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3",
        )
        .bind::<BigInt, _>(after.copied().unwrap_or(i64::MIN))
        .bind::<BigInt, _>(*bound)
        .bind::<BigInt, _>(i64::from(limit))
        .load(conn)
        .await?;
        Ok(keys.into_iter().map(|k| k.id).collect())
    }

    async fn mutate(&self, conn: &mut AsyncPgConnection, keys: &[i64]) -> Result<(), RepairError> {
        // Every third row already holds its value: no change, no journal.
        diesel::sql_query(
            "UPDATE people SET email_norm = lower(email) WHERE id = ANY($1) AND id % 3 <> 0",
        )
        .bind::<diesel::sql_types::Array<BigInt>, _>(keys)
        .execute(conn)
        .await?;
        Ok(())
    }
}

/// UNDO-1, UNDO-2: the engine journals a hand-written two-statement repair
/// around its `mutate`, only the rows it changed, and the undo restores
/// them. Guard: the engine's journal capture in the two-statement path.
#[actix_rt::test]
async fn undo01_the_engine_journals_a_two_statement_repair() {
    let (db, before) = people(500).await;
    let engine = engine(&db, Registry::new().with(HandWritten).expect("registers"));
    engine.register().await.expect("register");
    engine.start(ID).await.expect("start");
    drive(&engine).await;
    let changed = db
        .scalar("SELECT count(*) AS v FROM people WHERE email_norm IS NOT NULL")
        .await;
    assert_eq!(changed, 334);
    assert_eq!(journal_rows(&db, ID).await, changed);
    let sample = db
        .text(&format!(
            "SELECT (row_key->'id'->0)::text || ' ' || (before->'email_norm'->0)::text || ' ' \
                 || (after->'email_norm'->0)::text || ' ' || row_count AS v \
             FROM backfill_journal WHERE backfill_id = '{ID}' ORDER BY seq LIMIT 1"
        ))
        .await
        .expect("a journal row");
    assert_eq!(sample, r#"1 null "user1@example.com" 43"#);
    let server = serve(admin(engine.clone()));
    let undo = undo_by_operator(&server.url).await;
    assert_eq!(undo.status, 200, "{}", undo.text);
    drive(&engine).await;
    assert_eq!(checksum(&db).await, before);
    server.stop().await;
}

/// UNDO-2, PAR-1: the undo of a partitioned journaled backfill runs in as
/// many partitions and restores every row of every one. Guard: the undo's
/// `partitions`/`split_points` (one partition would be made).
#[actix_rt::test]
async fn undo02_a_partitioned_repair_is_undone_in_every_partition() {
    let (db, before) = people(1_000).await;
    let engine = repaired(&db, 4).await;
    let server = serve(admin(engine.clone()));
    let undo = undo_by_operator(&server.url).await;
    assert_eq!(undo.status, 200, "{}", undo.text);
    assert_eq!(
        undo.body["backfill"]["partitions"].as_array().map(Vec::len),
        Some(4),
        "{}",
        undo.text
    );
    drive(&engine).await;
    assert_eq!(
        engine.get(UNDO).await.expect("undo").state,
        State::Completed
    );
    assert_eq!(checksum(&db).await, before);
    let restored = db
        .scalar(&format!(
            "SELECT sum(restored)::bigint AS v FROM backfill_journal WHERE backfill_id = '{ID}'"
        ))
        .await;
    assert_eq!(restored, 1_000);
    server.stop().await;
}

/// UNDO-2: what an undo refuses, each with a typed 409 or 404 and no
/// change: an unknown ID, a repair without a journal, a running original;
/// a resume of an undone original is refused (`undone`); `operate` is
/// needed. Guards: the state check, the journal check, the capability.
#[actix_rt::test]
async fn undo02_refusals_are_typed_and_change_nothing() {
    let (db, _) = people(300).await;
    let plain = SqlRepair::new("people.plain.v1", "people")
        .key("id")
        .set("touched = 1")
        .validate_where("touched <> 1")
        .build()
        .expect("definition");
    let registry = Registry::new()
        .with(email_norm(1))
        .expect("registers")
        .with(plain)
        .expect("registers");
    let engine = engine(&db, registry);
    engine.register().await.expect("register");
    let server = serve(admin(engine.clone()));
    let path = |id: &str| format!("/admin/backfills/{id}/undo");

    let unknown = post(&server.url, &path("nobody.v1"), OPERATOR, "k-1").await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);
    let plain = post(&server.url, &path("people.plain.v1"), OPERATOR, "k-2").await;
    assert_eq!(
        (plain.status, plain.body["error"].as_str()),
        (409, Some("not_journaled")),
        "{}",
        plain.text
    );
    let reader = post(&server.url, &path(ID), READER, "k-3").await;
    assert_eq!(reader.status, 403);
    // `pending`, then `running`: not a state an undo starts from.
    let pending = post(&server.url, &path(ID), OPERATOR, "k-4").await;
    assert_eq!(
        (pending.status, pending.body["error"].as_str()),
        (409, Some("conflict")),
        "{}",
        pending.text
    );
    engine.start(ID).await.expect("start");
    let running = post(&server.url, &path(ID), OPERATOR, "k-5").await;
    assert_eq!(running.status, 409, "{}", running.text);
    assert_eq!(running.body["current"]["state"], "running");
    assert!(engine.get(UNDO).await.is_err(), "no undo row was made");

    // Paused part-way: the undo takes back what committed, and the
    // original does not run again.
    let mut claim = engine
        .claim_next("w1", &[])
        .await
        .expect("claim")
        .expect("claimed");
    engine.run_batch(&mut claim).await.expect("batch");
    drop(claim);
    engine.pause(ID).await.expect("pause");
    let undo = post(&server.url, &path(ID), OPERATOR, "k-6").await;
    assert_eq!(undo.status, 200, "{}", undo.text);
    let resume = post(
        &server.url,
        &format!("/admin/backfills/{ID}/resume"),
        OPERATOR,
        "k-7",
    )
    .await;
    assert_eq!(
        (resume.status, resume.body["error"].as_str()),
        (409, Some("undone")),
        "{}",
        resume.text
    );
    assert_eq!(engine.get(ID).await.expect("row").state, State::Paused);
    server.stop().await;

    // Another process whose definition of the ID declares no journal (an
    // older build, a changed definition) is refused the same way: the
    // refusal comes from the undo's row in PostgreSQL, not from what the
    // local definition declares.
    let unjournaled = SqlRepair::new(ID, "people")
        .key("id")
        .set("email_norm = lower(email)")
        .validate_where("email_norm IS DISTINCT FROM lower(email)")
        .batch_size(100)
        .build()
        .expect("definition");
    let other = self::engine(&db, Registry::new().with(unjournaled).expect("registers"));
    let before = db
        .text(&format!(
            "SELECT concat_ws('|', state, generation, checkpoint, \
                 (SELECT count(*) FROM people WHERE email_norm IS NOT NULL)) AS v \
             FROM backfill WHERE id = '{ID}'"
        ))
        .await;
    let server = serve(admin(other.clone()));
    for (action, key) in [("resume", "k-8"), ("retry", "k-9")] {
        let refused = post(
            &server.url,
            &format!("/admin/backfills/{ID}/{action}"),
            OPERATOR,
            key,
        )
        .await;
        assert_eq!(
            (refused.status, refused.body["error"].as_str()),
            (409, Some("undone")),
            "{action}: {}",
            refused.text
        );
    }
    let after = db
        .text(&format!(
            "SELECT concat_ws('|', state, generation, checkpoint, \
                 (SELECT count(*) FROM people WHERE email_norm IS NOT NULL)) AS v \
             FROM backfill WHERE id = '{ID}'"
        ))
        .await;
    assert_eq!(after, before, "nothing written");
    server.stop().await;
}

/// UNDO-3: an undo is never undone, two undo requests (other keys, at
/// once) make one reverse backfill, and the undo's validation fails while
/// a journal row is neither restored nor a conflict. Guards: the
/// undo-of-undo check, the row lock and existence check, the validation
/// query.
#[actix_rt::test]
async fn undo03_one_undo_per_backfill_never_an_undo_of_an_undo() {
    let (db, _) = people(500).await;
    let engine = repaired(&db, 1).await;
    let server = serve(admin(engine.clone()));
    let path = format!("/admin/backfills/{ID}/undo");
    let (a, b) = futures_util::join!(
        post(&server.url, &path, OPERATOR, "a"),
        post(&server.url, &path, OPERATOR, "b")
    );
    let mut outcomes = vec![a.body["outcome"].clone(), b.body["outcome"].clone()];
    outcomes.sort_by_key(Value::to_string);
    assert_eq!(
        outcomes,
        ["applied", "converged"],
        "{} / {}",
        a.text,
        b.text
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT count(*) AS v FROM backfill WHERE undo_of = '{ID}'"
        ))
        .await,
        1
    );
    drive(&engine).await;
    let again = post(
        &server.url,
        &format!("/admin/backfills/{UNDO}/undo"),
        OPERATOR,
        "c",
    )
    .await;
    assert_eq!(
        (again.status, again.body["error"].as_str()),
        (409, Some("undo_of_undo")),
        "{}",
        again.text
    );

    // The undo's validation, explicitly: success, then failure once a
    // journal row is unresolved.
    let validate = format!("/admin/backfills/{UNDO}/validate");
    let ok = post(&server.url, &validate, OPERATOR, "v-1").await;
    assert_eq!(ok.body["outcome"], "success", "{}", ok.text);
    db.exec(&format!(
        "UPDATE backfill_journal SET restored = NULL, conflicts = NULL \
         WHERE backfill_id = '{ID}' AND seq = \
         (SELECT min(seq) FROM backfill_journal WHERE backfill_id = '{ID}')"
    ))
    .await;
    let bad = post(&server.url, &validate, OPERATOR, "v-2").await;
    assert_eq!(bad.body["outcome"], "failure", "{}", bad.text);
    server.stop().await;
}

/// UNDO-4: the journal is visible in the detail view (rows, bytes), a
/// prune is refused while the undo is not finished and while the backfill
/// runs, and an applied prune deletes the journal and is audited with its
/// count. Guards: the unfinished-undo check, the audit row.
#[actix_rt::test]
async fn undo04_prune_waits_for_the_undo_and_is_audited() {
    let (db, _) = people(400).await;
    let engine = repaired(&db, 1).await;
    let server = serve(admin(engine.clone()));
    let view = call(
        &server.url,
        "GET",
        &format!("/admin/backfills/{ID}"),
        Some(READER),
        None,
    )
    .await;
    assert_eq!(view.body["journal"]["rows"], 400, "{}", view.text);
    assert!(
        view.body["journal"]["bytes"].as_i64().unwrap_or(0) > 0,
        "{}",
        view.text
    );

    let prune = format!("/admin/backfills/{ID}/journal/prune");
    let undo = post(
        &server.url,
        &format!("/admin/backfills/{ID}/undo"),
        OPERATOR,
        "u",
    )
    .await;
    assert_eq!(undo.status, 200, "{}", undo.text);
    let early = post(&server.url, &prune, OPERATOR, "p-1").await;
    assert_eq!(
        (early.status, early.body["error"].as_str()),
        (409, Some("journal_in_use")),
        "{}",
        early.text
    );
    assert_eq!(journal_rows(&db, ID).await, 400);
    drive(&engine).await;
    let reader = post(&server.url, &prune, READER, "p-2").await;
    assert_eq!(reader.status, 403);
    let applied = post(&server.url, &prune, OPERATOR, "p-3").await;
    assert_eq!(applied.status, 200, "{}", applied.text);
    assert_eq!(journal_rows(&db, ID).await, 0);
    let audit = db
        .text(&format!(
            "SELECT outcome || ': ' || detail AS v FROM backfill_audit \
             WHERE backfill_id = '{ID}' AND action = 'journal_prune' AND correlation = 'p-3'"
        ))
        .await;
    assert_eq!(
        audit.as_deref(),
        Some("applied: 400 journaled rows deleted")
    );
    support::admin::assert_audit_complete(&db).await;
    server.stop().await;
}

/// UNDO-4: a prune of a repair that keeps no journal is refused, 409
/// `not_journaled` with a message naming why, and audited as such; the
/// backfill is left as it was. Guard: the journal check of the prune
/// (without it the answer is `applied` with nothing deleted).
#[actix_rt::test]
async fn undo04_prune_of_a_repair_without_a_journal_is_refused() {
    const PLAIN: &str = "people.plain.v1";
    let (db, _) = people(50).await;
    let plain = SqlRepair::new(PLAIN, "people")
        .key("id")
        .set("touched = 1")
        .validate_where("touched <> 1")
        .build()
        .expect("definition");
    let engine = engine(&db, Registry::new().with(plain).expect("registers"));
    engine.register().await.expect("register");
    engine.start(PLAIN).await.expect("start");
    drive(&engine).await;
    let before = engine.get(PLAIN).await.expect("row");
    assert_eq!(before.state, State::Completed);
    let server = serve(admin(engine.clone()));

    let prune = format!("/admin/backfills/{PLAIN}/journal/prune");
    let refused = post(&server.url, &prune, OPERATOR, "p-1").await;
    assert_eq!(
        (refused.status, refused.body["error"].as_str()),
        (409, Some("not_journaled")),
        "{}",
        refused.text
    );
    let message = refused.body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(PLAIN) && message.contains("keeps no journal"),
        "{}",
        refused.text
    );
    assert_eq!(refused.body["current"]["state"], "completed");
    let after = engine.get(PLAIN).await.expect("row");
    assert_eq!(
        (after.state, after.generation),
        (before.state, before.generation)
    );
    let audit = db
        .text(&format!(
            "SELECT outcome || ': ' || detail AS v FROM backfill_audit \
             WHERE backfill_id = '{PLAIN}' AND action = 'journal_prune' AND correlation = 'p-1'"
        ))
        .await;
    assert!(
        audit
            .as_deref()
            .is_some_and(|a| a.starts_with("not_journaled: ") && a.contains("keeps no journal")),
        "{audit:?}"
    );
    support::admin::assert_audit_complete(&db).await;
    server.stop().await;
}

/// The journaled repair as a host's application.
struct People;

#[backfill::async_trait]
impl backfill::host::Application for People {
    fn registry(&self) -> Result<Registry, backfill::repair::DefinitionError> {
        Registry::new().with(email_norm(2))
    }
}

/// The operator token of the hosts below.
const HOST_TOKEN: &str = "undo-operator-token-0123456789";

/// A host over `db` serving [`People`] in automatic mode, its listeners
/// on free ports, the operator token [`HOST_TOKEN`].
async fn people_host(db: &TestDb) -> backfill::host::Host {
    use backfill::host::{Host, HostConfig};
    let mut config = HostConfig::new(db.url.clone());
    config.listen = "127.0.0.1:0".parse().expect("address");
    config.admin_listen = "127.0.0.1:0".parse().expect("address");
    config.engine = support::engine_config();
    config.runtime.poll_interval = std::time::Duration::from_millis(50);
    config.admin_auth =
        backfill::admin::AuthConfig::from_sources(Some(HOST_TOKEN), None, false).expect("auth");
    Host::start(config, People).await.expect("host")
}

/// The operator's undo of `ID` over `host`'s admin listener with
/// idempotency key `key`, run by the host to `completed`.
async fn undo_on_host(host: &backfill::host::Host, key: &str) {
    let bearer = format!("Bearer {HOST_TOKEN}");
    let undo = support::http::request(
        host.admin_addr,
        "POST",
        &format!("/admin/backfills/{ID}/undo"),
        &[("Authorization", &bearer), ("Idempotency-Key", key)],
        None,
    )
    .await;
    assert_eq!(undo.status, 200, "{}", undo.text);
    host.engine()
        .wait_for(
            UNDO,
            &[State::Completed],
            std::time::Duration::from_secs(60),
        )
        .await
        .expect("the undo completed");
}

/// UNDO-2, UNDO-4: under a host (the actor runtime, the admin listener
/// and `/metrics`), the automatic backfill completes, the undo started
/// over HTTP is claimed and run to `completed` by the supervisor like any
/// backfill, and `/metrics` shows the journal's size and, once analyzed,
/// its entry estimate. Guards: the undo IDs among the claimable ones, the
/// journal families of the scrape.
#[actix_rt::test]
async fn undo04_a_host_runs_the_undo_and_exports_the_journal() {
    use std::time::Duration;
    use support::http::get;
    let (db, before) = people(600).await;
    let host = people_host(&db).await;
    host.engine()
        .wait_for(ID, &[State::Completed], Duration::from_secs(60))
        .await
        .expect("completed");
    undo_on_host(&host, "host-undo").await;
    assert_eq!(checksum(&db).await, before);
    db.exec("ANALYZE backfill_journal").await;
    let metrics = get(host.admin_addr, "/metrics").await.text;
    // One entry per batch of 100 rows.
    assert!(
        metrics.contains("\nbackfill_journal_entries_estimate 6\n"),
        "{metrics}"
    );
    let bytes = metrics
        .lines()
        .find_map(|l| l.strip_prefix("backfill_journal_bytes "))
        .and_then(|v| v.parse::<i64>().ok())
        .expect("journal bytes");
    assert!(bytes > 0);
    host.stop().await;
}

/// UNDO-1 beside hot rows: while a second connection updates ten rows,
/// one in each batch, in a tight loop of short transactions (each holds
/// its row locks for a few milliseconds, as an application's does while
/// it works), the journaled repair run
/// by a host (its retry policy, three attempts) completes; every row is
/// repaired and journaled exactly once, and the undo afterwards restores
/// exactly what the repair wrote while the application's own column keeps
/// its writes. Guard: the locking retry of a batch that met a changed row
/// (without it every attempt at the hot rows fails the same way and the
/// backfill goes `failed`).
#[actix_rt::test]
async fn undo01_a_journaled_repair_gets_past_a_hot_row() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    let (db, _) = people(2000).await;
    let repaired_columns = "SELECT md5(string_agg(concat_ws('|', id, email, email_norm), ',' \
                            ORDER BY id)) AS v FROM people";
    let before = db.text(repaired_columns).await;
    let stop = Arc::new(AtomicBool::new(false));
    let updates = Arc::new(AtomicU64::new(0));
    let (started, first) = tokio::sync::oneshot::channel();
    let writer = {
        let (stop, updates, mut conn) = (stop.clone(), updates.clone(), db.connect().await);
        tokio::spawn(async move {
            let mut started = Some(started);
            while !AtomicBool::load(&stop, Ordering::Relaxed) {
                conn.batch_execute(
                    "BEGIN; UPDATE people SET touched = touched + 1 WHERE id % 200 = 50; \
                     SELECT pg_sleep(0.005); COMMIT",
                )
                .await
                .expect("the hot writer's update");
                updates.fetch_add(1, Ordering::Relaxed);
                if let Some(started) = started.take() {
                    let _ = started.send(());
                }
            }
        })
    };
    first.await.expect("the hot writer runs");
    let host = people_host(&db).await;
    let engine = host.engine().clone();
    let settled = engine
        .wait_for(
            ID,
            &[State::Completed, State::Failed],
            Duration::from_secs(60),
        )
        .await
        .expect("settled");
    let during = AtomicU64::load(&updates, Ordering::Relaxed);
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("the hot writer stops");
    assert_eq!(settled.state, State::Completed, "{:?}", settled.last_error);
    assert!(during > 1, "the hot writer ran beside the repair");
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM people WHERE email_norm = lower(email)")
            .await,
        2000
    );
    let journaled = db
        .text(&format!(
            "SELECT concat_ws('/', count(DISTINCT k.id), count(*), \
                 (SELECT sum(row_count) FROM backfill_journal WHERE backfill_id = '{ID}')) AS v \
             FROM backfill_journal AS j, jsonb_array_elements(j.row_key->'id') AS k(id) \
             WHERE j.backfill_id = '{ID}'"
        ))
        .await;
    assert_eq!(
        journaled.as_deref(),
        Some("2000/2000/2000"),
        "one entry per row"
    );
    undo_on_host(&host, "hot-undo").await;
    assert_eq!(db.text(repaired_columns).await, before);
    assert_eq!(
        db.scalar("SELECT sum(touched)::bigint AS v FROM people")
            .await,
        10 * i64::try_from(AtomicU64::load(&updates, Ordering::Relaxed)).expect("count"),
        "the application's writes are kept"
    );
    host.stop().await;
}
