//! Repair definitions as an embedder writes them, through the production
//! registry and engine against a real PostgreSQL.
//!
//! Index:
//! - EMB-2 stable IDs computed by the repair value: `emb02_*`
//! - EMB-4 one batch form per repair, and the declarative `SqlRepair`:
//!   `emb04_*`

mod support;

use backfill::engine::ValidationRun;
use backfill::repair::{
    Batches, BigIntSummary, DefinitionError, Mutated, Repair, RepairError, SelectAndMutate,
    SelectThenMutate, SourceSet, SqlRepair, Validation,
};
use backfill::{async_trait, AsyncPgConnection, Engine, Phase, Registry, State};
use diesel::sql_types::{Array, BigInt, Nullable};
use diesel::QueryableByName;
use diesel_async::RunQueryDsl;
use support::{drive, engine_config, test_db, TestDb};

#[derive(QueryableByName)]
struct Id {
    #[diesel(sql_type = BigInt)]
    id: i64,
}

#[derive(QueryableByName)]
struct MaxId {
    #[diesel(sql_type = Nullable<BigInt>)]
    max: Option<i64>,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

/// `n = n + 1` on every row of one table with the `items` shape, in the
/// form its parameter says; the stable ID is computed from the table
/// (EMB-2). Validation wants every `n` at exactly 1, so a batch applied
/// twice or never shows.
struct Bump {
    id: String,
    table: &'static str,
}

impl Bump {
    fn for_table(table: &'static str) -> Self {
        Self {
            id: format!("{table}.bump.v1"),
            table,
        }
    }
}

async fn max_id(conn: &mut AsyncPgConnection, table: &str) -> Result<SourceSet<i64>, RepairError> {
    let row: MaxId = diesel::sql_query(format!("SELECT max(id) AS max FROM {table}"))
        .get_result(conn)
        .await?;
    Ok(match row.max {
        None => SourceSet::Empty,
        Some(upper) => SourceSet::Bounded { upper, rows: None },
    })
}

async fn all_bumped_once(
    conn: &mut AsyncPgConnection,
    table: &str,
    bound: Option<&i64>,
) -> Result<Validation, RepairError> {
    let bad: Count = diesel::sql_query(format!(
        "SELECT count(*) AS n FROM {table} WHERE id <= $1 AND n <> 1"
    ))
    .bind::<Nullable<BigInt>, _>(bound.copied())
    .get_result(conn)
    .await?;
    Ok(if bad.n == 0 {
        Validation::Success
    } else {
        Validation::Failure(format!("{} rows do not have n = 1", bad.n))
    })
}

/// Only the two-statement form: no `SelectAndMutate` implementation.
#[async_trait]
impl Repair for Bump {
    type Key = i64;
    fn id(&self) -> &str {
        &self.id
    }
    fn batch_limit(&self) -> u32 {
        10
    }
    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        max_id(conn, self.table).await
    }
    fn batches(&self) -> Batches<'_, i64> {
        Batches::TwoStatements(self)
    }
    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        all_bumped_once(conn, self.table, bound).await
    }
}

#[async_trait]
impl SelectThenMutate<i64> for Bump {
    async fn select_keys(
        &self,
        conn: &mut AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Vec<i64>, RepairError> {
        let rows: Vec<Id> = diesel::sql_query(format!(
            "SELECT id FROM {} WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3",
            self.table
        ))
        .bind::<BigInt, _>(after.copied().unwrap_or(i64::MIN))
        .bind::<BigInt, _>(*bound)
        .bind::<BigInt, _>(i64::from(limit))
        .load(conn)
        .await?;
        Ok(rows.into_iter().map(|r| r.id).collect())
    }
    async fn mutate(&self, conn: &mut AsyncPgConnection, keys: &[i64]) -> Result<(), RepairError> {
        diesel::sql_query(format!(
            "UPDATE {} SET n = n + 1 WHERE id = ANY($1)",
            self.table
        ))
        .bind::<Array<BigInt>, _>(keys)
        .execute(conn)
        .await?;
        Ok(())
    }
}

/// The same repair in the one-statement form only: no `SelectThenMutate`
/// implementation.
struct BumpInOne(Bump);

#[async_trait]
impl Repair for BumpInOne {
    type Key = i64;
    fn id(&self) -> &str {
        &self.0.id
    }
    fn batch_limit(&self) -> u32 {
        10
    }
    async fn capture_bound(
        &self,
        conn: &mut AsyncPgConnection,
    ) -> Result<SourceSet<i64>, RepairError> {
        max_id(conn, self.0.table).await
    }
    fn batches(&self) -> Batches<'_, i64> {
        Batches::OneStatement(self)
    }
    async fn validate(
        &self,
        conn: &mut AsyncPgConnection,
        bound: Option<&i64>,
    ) -> Result<Validation, RepairError> {
        all_bumped_once(conn, self.0.table, bound).await
    }
}

#[async_trait]
impl SelectAndMutate<i64> for BumpInOne {
    async fn select_and_mutate(
        &self,
        conn: &mut &AsyncPgConnection,
        after: Option<&i64>,
        bound: &i64,
        limit: u32,
    ) -> Result<Mutated<i64>, RepairError> {
        let row: BigIntSummary = diesel::sql_query(format!(
            "WITH k AS (SELECT array_agg(id ORDER BY id) AS a FROM (\
                 SELECT id FROM {t} WHERE id > $1 AND id <= $2 ORDER BY id LIMIT $3) AS s), \
             u AS (UPDATE {t} SET n = n + 1 WHERE id = ANY((SELECT a FROM k)::bigint[])) \
             SELECT a[1] AS first, a[cardinality(a)] AS last, \
                 coalesce(cardinality(a), 0)::bigint AS n FROM k",
            t = self.0.table
        ))
        .bind::<BigInt, _>(after.copied().unwrap_or(i64::MIN))
        .bind::<BigInt, _>(*bound)
        .bind::<BigInt, _>(i64::from(limit))
        .get_result(conn)
        .await?;
        Ok(row.into())
    }
}

/// A table of the `items` shape with ids 1..=rows, `n` = 0.
async fn items_table(db: &TestDb, table: &str, rows: i64) {
    db.exec(&format!(
        "CREATE TABLE {table} (id bigint PRIMARY KEY, n integer NOT NULL DEFAULT 0); \
         INSERT INTO {table} (id) SELECT g FROM generate_series(1, {rows}) g"
    ))
    .await;
}

async fn state(engine: &Engine, id: &str) -> State {
    engine.get(id).await.expect("row").state
}

/// Register, start and drive every definition of `registry` to a settled
/// state.
async fn run_all(db: &TestDb, registry: Registry) -> Engine {
    let ids = registry.ids();
    let engine = Engine::new(db.pool.clone(), registry, engine_config()).expect("engine");
    engine.register().await.expect("register");
    for id in &ids {
        engine.start(id).await.expect("start");
    }
    drive(&engine, "w").await;
    engine
}

/// EMB-2: one type, two tables, two stable IDs computed by the repair
/// values; both register as their own backfill and complete, each over its
/// own table only (n = 1 everywhere: nothing ran twice or crossed over).
/// Guard: the registry keying definitions by the ID each value returns (a
/// type-level ID would register one definition and refuse the second as a
/// duplicate).
#[tokio::test]
async fn emb02_parametrized_repair_registers_two_ids_from_one_type() {
    let db = test_db().await;
    items_table(&db, "items_a", 25).await;
    items_table(&db, "items_b", 7).await;
    let registry = Registry::new()
        .with(Bump::for_table("items_a"))
        .and_then(|r| r.with(Bump::for_table("items_b")))
        .expect("two IDs from one type");
    assert_eq!(
        registry.ids(),
        vec!["items_a.bump.v1".to_string(), "items_b.bump.v1".to_string()]
    );
    let engine = run_all(&db, registry).await;
    for (id, table, rows) in [
        ("items_a.bump.v1", "items_a", 25),
        ("items_b.bump.v1", "items_b", 7),
    ] {
        assert_eq!(state(&engine, id).await, State::Completed, "{id}");
        assert_eq!(engine.get(id).await.expect("row").rows_done, rows);
        let once = db
            .scalar(&format!("SELECT count(*) AS v FROM {table} WHERE n = 1"))
            .await;
        assert_eq!(once, rows, "{table}");
    }
}

/// EMB-2, REG-3: a computed ID is checked at registration like a literal
/// one, with typed errors: outside `[a-z0-9._-]` is `InvalidId`, the same
/// parameter twice is `DuplicateId`. Guard: `validate_id` and the
/// duplicate check in `Registry::register`.
#[tokio::test]
async fn emb02_invalid_computed_id_is_a_typed_error() {
    let err = Registry::new()
        .with(Bump::for_table("Items"))
        .expect_err("upper case in a computed ID");
    assert_eq!(err, DefinitionError::InvalidId("Items.bump.v1".into()));
    let err = Registry::new()
        .with(Bump::for_table("items"))
        .and_then(|r| r.with(Bump::for_table("items")))
        .expect_err("the same computed ID twice");
    assert_eq!(err, DefinitionError::DuplicateId("items.bump.v1".into()));
}

/// EMB-4: a repair that implements only `SelectAndMutate` is complete: it
/// registers, runs in batches of its limit through the engine (committed
/// rows = checkpoint after each batch) and completes, every row repaired
/// once. Guard: `Erased::batch` dispatching on `Repair::batches` (with the
/// two-statement path taken, this type has no selection to run).
#[tokio::test]
async fn emb04_one_statement_form_alone_completes() {
    let db = test_db().await;
    items_table(&db, "items", 25).await;
    let registry = Registry::new()
        .with(BumpInOne(Bump::for_table("items")))
        .expect("valid");
    let engine = Engine::new(db.pool.clone(), registry, engine_config()).expect("engine");
    engine.register().await.expect("register");
    engine.start("items.bump.v1").await.expect("start");
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    for done in [10, 20] {
        engine.run_batch(&mut claim).await.expect("batch");
        let once = db
            .scalar("SELECT count(*) AS v FROM items WHERE n = 1")
            .await;
        assert_eq!(once, done, "committed rows = checkpoint");
    }
    let last = engine.run_batch(&mut claim).await.expect("batch");
    assert_eq!(
        last,
        backfill::BatchOutcome::Committed {
            keys: 5,
            reached_bound: true
        }
    );
    drive(&engine, "w").await;
    assert_eq!(state(&engine, "items.bump.v1").await, State::Completed);
    let once = db
        .scalar("SELECT count(*) AS v FROM items WHERE n = 1")
        .await;
    assert_eq!(once, 25);
}

/// EMB-4: a repair that implements only `SelectThenMutate` is complete:
/// it registers, runs through the engine and completes with every row
/// repaired once. Guard: `Erased::batch` running the selection, its check
/// and the mutation for `Batches::TwoStatements`.
#[tokio::test]
async fn emb04_two_statement_form_alone_completes() {
    let db = test_db().await;
    items_table(&db, "items", 25).await;
    let registry = Registry::new()
        .with(Bump::for_table("items"))
        .expect("valid");
    let engine = run_all(&db, registry).await;
    assert_eq!(state(&engine, "items.bump.v1").await, State::Completed);
    assert_eq!(engine.get("items.bump.v1").await.unwrap().rows_done, 25);
    let once = db
        .scalar("SELECT count(*) AS v FROM items WHERE n = 1")
        .await;
    assert_eq!(once, 25);
}

const EMAIL_ID: &str = "emails.email-norm.v1";

/// The declarative repair of the `emails` table: `email_norm =
/// lower(email)` where `email` is set, in batches of 10.
fn email_norm() -> SqlRepair {
    SqlRepair::new(EMAIL_ID, "emails")
        .key("id")
        .set("email_norm = lower(email)")
        .filter("email IS NOT NULL")
        .validate_where("email_norm IS DISTINCT FROM lower(email)")
        .batch_size(10)
        .overlap_commits(true)
        .count_rows(true)
        .build()
        .expect("valid SQL repair")
}

/// 25 rows, every fifth without an email; `email_norm` starts as 'stale'
/// everywhere, so a row the repair must not touch shows if it was.
async fn emails_table(db: &TestDb) {
    db.exec(
        "CREATE TABLE emails (id bigint PRIMARY KEY, email text, email_norm text); \
         INSERT INTO emails (id, email, email_norm) \
             SELECT g, CASE WHEN g % 5 = 0 THEN NULL ELSE 'User' || g || '@Example.COM' END, \
                 'stale' FROM generate_series(1, 25) g",
    )
    .await;
}

/// EMB-4: `SqlRepair` runs through the engine to `completed`: every row
/// matching the filter normalized, the others untouched, the bound and the
/// count taken with the filter. Its validation predicate is the one that
/// decides: a row corrupted after its batch committed and before
/// validation fails the lifecycle validation (`failed`, with the count in
/// the detail); repaired again and retried, the backfill completes; a row
/// corrupted after completion fails the repair's validation. Guards: the
/// filter in the statements (without it, the 5 email-less rows turn NULL
/// and stay out of the 'stale' count), `validate_where` in the validation
/// statement (without it, validation cannot tell the corrupted row from
/// the repaired ones: the rejection and the completion cannot both hold).
#[tokio::test]
async fn emb04_sql_repair_completes_and_validates() {
    let db = test_db().await;
    emails_table(&db).await;
    let registry = Registry::new().with(email_norm()).expect("valid");
    let engine = Engine::new(db.pool.clone(), registry, engine_config()).expect("engine");
    engine.register().await.expect("register");
    engine.start(EMAIL_ID).await.expect("start");
    let row = engine.get(EMAIL_ID).await.unwrap();
    assert_eq!(row.source_rows, Some(20), "counted with the filter");
    assert_eq!(
        row.bound_json,
        Some(serde_json::json!(24)),
        "max id with an email"
    );

    // Every batch, then corruption before validation.
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    while let backfill::BatchOutcome::Committed {
        reached_bound: false,
        ..
    } = engine.run_batch(&mut claim).await.expect("batch")
    {}
    db.exec("UPDATE emails SET email_norm = 'corrupt' WHERE id = 3")
        .await;
    let claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    assert_eq!(claim.phase, Phase::Validate);
    match engine
        .validate_claimed(&claim)
        .await
        .expect("validation ran")
    {
        ValidationRun::Rejected { state, detail } => {
            assert_eq!(state, State::Failed);
            assert!(detail.contains("1 rows"), "{detail}");
        }
        other => panic!("corrupted row passed validation: {other:?}"),
    }

    // Repaired and retried: the same predicate now passes.
    db.exec("UPDATE emails SET email_norm = lower(email) WHERE id = 3")
        .await;
    engine.retry(EMAIL_ID).await.expect("retry");
    drive(&engine, "w").await;
    assert_eq!(state(&engine, EMAIL_ID).await, State::Completed);
    let normalized = db
        .scalar("SELECT count(*) AS v FROM emails WHERE email_norm = lower(email)")
        .await;
    assert_eq!(normalized, 20);
    let untouched = db
        .scalar("SELECT count(*) AS v FROM emails WHERE email IS NULL AND email_norm = 'stale'")
        .await;
    assert_eq!(untouched, 5, "rows outside the filter are left alone");

    // Corrupted after completion: the repair's validation says so.
    db.exec("UPDATE emails SET email_norm = 'corrupt' WHERE id IN (7, 8)")
        .await;
    let mut conn = db.pool.get().await.expect("pool");
    let verdict = email_norm()
        .validate(&mut conn, Some(&24))
        .await
        .expect("validation ran");
    assert_eq!(
        verdict,
        Validation::Failure("2 rows up to the bound violate the validation predicate".into())
    );
}

/// EMB-4: table and key names are checked when the repair is built,
/// before any SQL is written: anything but a plain (for the table,
/// optionally schema-qualified) lower-case identifier is
/// `InvalidIdentifier` (PostgreSQL would fold an upper-case one); a
/// missing part is `Incomplete`; a bad ID is `InvalidId`. A valid
/// schema-qualified table is accepted. Guard: `check_identifier` in
/// `SqlRepairBuilder::build`.
#[tokio::test]
async fn emb04_sql_repair_rejects_bad_identifiers() {
    let build = |table: &str, key: &str| {
        SqlRepair::new("t.fix.v1", table)
            .key(key)
            .set("a = 1")
            .validate_where("a <> 1")
            .build()
    };
    for (table, key) in [
        ("items; DROP TABLE items", "id"),
        ("items", "id = id OR true"),
        ("\"items\"", "id"),
        ("1items", "id"),
        ("a.b.c", "id"),
        ("items", "items.id"),
        ("Items", "id"),
        ("items", "ID"),
        ("", "id"),
        ("items", ""),
    ] {
        assert!(
            matches!(
                build(table, key),
                Err(DefinitionError::InvalidIdentifier(_))
            ),
            "{table:?} {key:?}"
        );
    }
    assert!(build("app.items", "id").is_ok());
    assert!(matches!(
        SqlRepair::new("t.fix.v1", "items")
            .set("a = 1")
            .validate_where("a <> 1")
            .build(),
        Err(DefinitionError::Incomplete {
            missing: "key column",
            ..
        })
    ));
    assert!(matches!(
        SqlRepair::new("T.fix", "items")
            .key("id")
            .set("a = 1")
            .validate_where("a <> 1")
            .build(),
        Err(DefinitionError::InvalidId(_))
    ));
}
