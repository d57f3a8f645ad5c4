//! Registration, fail-closed keys, the lifecycle in the database, compound keys (REG-1, REG-4, LC-1, EX-2).

use super::*;

/// REG-1 / REG-2: two processes register the same ID (different metadata)
/// concurrently and repeatedly: one row, metadata last-write-wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reg01_registration_converges_on_one_row() {
    let db = test_db().await;
    db.exec(&items_sql(5)).await;
    let a = counter_engine(db.pool.clone(), Counter::new(ID, 10, Hooks::new()));
    let b = counter_engine(db.pool.clone(), Counter::new(ID, 10, Hooks::new()));
    let (ra, rb) = tokio::join!(a.register(), b.register());
    ra.unwrap();
    rb.unwrap();
    a.register().await.unwrap();
    assert_eq!(db.scalar("SELECT count(*) AS v FROM backfill").await, 1);
    a.start(ID).await.unwrap();
    b.register().await.unwrap();
    let row = a.get(ID).await.unwrap();
    assert_eq!(
        row.state,
        State::Running,
        "registration never resets a started row"
    );
}

/// AUD-2: an engine's `Debug` (what an embedder's logs show of it) names
/// its definitions and never the database it works on: the pool, whose
/// URL may carry a password, is left out.
#[tokio::test]
async fn aud02_engine_debug_names_its_definitions_never_its_database() {
    let db = test_db().await;
    let engine = counter_engine(db.pool.clone(), Counter::new(ID, 10, Hooks::new()));
    let shown = format!("{engine:?}");
    assert!(shown.starts_with("Engine"), "{shown}");
    assert!(shown.contains(ID), "{shown}");
    assert!(!shown.contains(&db.name), "{shown}");
    assert!(!shown.contains("postgres://"), "{shown}");
}

/// Bad input: an invalid stable ID is a typed error before anything reaches
/// the database.
#[tokio::test]
async fn emb02_invalid_stable_id_is_a_typed_error() {
    let err = Registry::new()
        .with(Counter::new("Not Valid!", 10, Hooks::new()))
        .unwrap_err();
    assert!(matches!(err, DefinitionError::InvalidId(_)));
    let err = Registry::new()
        .with(Counter::new("zero", 0, Hooks::new()))
        .unwrap_err();
    assert!(matches!(err, DefinitionError::ZeroBatchLimit(_)));
}

/// REG-4: a process whose definition has a different key type than the
/// stored bound fails closed with a typed error and changes nothing; a
/// process without the definition never claims the row.
#[tokio::test]
async fn reg04_wrong_key_type_fails_closed_and_missing_definition_never_claims() {
    let (db, engine, _hooks) = started(10, 10).await;
    let before = engine.get(ID).await.unwrap();
    let other = Engine::new(
        db.pool.clone(),
        Registry::new().with(TextKeyed { id: ID }).unwrap(),
        config(),
    )
    .unwrap();
    let err = other.claim_next("other", &[]).await.unwrap_err();
    assert!(matches!(err, EngineError::KeyMismatch { .. }), "{err:?}");
    let after = engine.get(ID).await.unwrap();
    assert_eq!(after.generation, before.generation);
    assert_eq!(after.owner, None);

    let stranger = Engine::new(
        db.pool.clone(),
        Registry::new()
            .with(Counter::new("something.else", 10, Hooks::new()))
            .unwrap(),
        config(),
    )
    .unwrap();
    assert!(stranger
        .claim_next("stranger", &[])
        .await
        .unwrap()
        .is_none());
    assert_eq!(engine.get(ID).await.unwrap().generation, before.generation);
}

/// LC-1 / LC-4: the database rejects transitions outside the lifecycle
/// table, bound changes and backward checkpoints, whatever code runs them.
/// Guard: the `backfill_guard` trigger.
#[tokio::test]
async fn lc01_database_rejects_transitions_outside_the_table() {
    let (db, engine, _hooks) = started(20, 10).await;
    let mut claim = engine.claim_next("w", &[]).await.unwrap().unwrap();
    engine.run_batch(&mut claim).await.unwrap();
    let mut conn = db.connect().await;
    for sql in [
        "UPDATE backfill SET state = 'completed', owner = NULL, lease_expires_at = NULL",
        "UPDATE backfill SET state = 'pending', owner = NULL, lease_expires_at = NULL",
        "UPDATE backfill SET bound = bound || '\\x00'::bytea",
        "UPDATE backfill SET checkpoint = NULL",
        "UPDATE backfill SET generation = generation - 1",
        "DELETE FROM backfill",
    ] {
        assert!(
            diesel::sql_query(sql).execute(&mut conn).await.is_err(),
            "{sql} must be rejected"
        );
    }
    conn.transaction::<_, diesel::result::Error, _>(async |c| {
        diesel::sql_query("SELECT 1").execute(c).await.map(|_| ())
    })
    .await
    .unwrap();
}

/// REG-1, LC-1: the single-column rules of `backfill` hold in the database
/// for any writer: an invalid stable ID, an unknown state, a negative
/// generation or attempt count and an oversized diagnostic are rejected,
/// and nothing changes. Guard: the column domains (migration
/// `..._column_domains`) that replaced the table CHECKs.
#[tokio::test]
async fn lc01_database_rejects_values_outside_the_column_rules() {
    let (db, engine, _hooks) = started(20, 10).await;
    let before = engine.get(ID).await.unwrap();
    let mut conn = db.connect().await;
    let long = "x".repeat(513);
    for sql in [
        "INSERT INTO backfill (id) VALUES ('Not A Valid ID')".to_string(),
        "INSERT INTO backfill (id) VALUES ('')".to_string(),
        "UPDATE backfill SET state = 'running-ish'".to_string(),
        "UPDATE backfill SET generation = -1".to_string(),
        "UPDATE backfill SET attempts = -1".to_string(),
        "UPDATE backfill SET source_rows = -1".to_string(),
        "UPDATE backfill SET last_error_kind = 'maybe'".to_string(),
        format!("UPDATE backfill SET last_error = '{long}'"),
        format!("UPDATE backfill SET description = '{long}'"),
    ] {
        assert!(
            diesel::sql_query(&sql).execute(&mut conn).await.is_err(),
            "{} must be rejected",
            &sql[..sql.len().min(60)]
        );
    }
    let after = engine.get(ID).await.unwrap();
    assert_eq!(after.state, before.state);
    assert_eq!(after.generation, before.generation);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill").await,
        1,
        "no row was added"
    );
}

/// EX-2: a compound `(created_at, id)` key over many ties neither skips
/// nor repeats a row.
#[tokio::test]
async fn ex02_compound_key_with_ties_neither_skips_nor_repeats() {
    let db = test_db().await;
    db.exec(&events_sql(100)).await;
    let engine = Engine::new(
        db.pool.clone(),
        Registry::new().with(CompoundCounter { limit: 7 }).unwrap(),
        config(),
    )
    .unwrap();
    engine.register().await.unwrap();
    engine.start("events.compound-counter").await.unwrap();
    drive(&engine, "w").await;
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM events WHERE n = 1")
            .await,
        100
    );
    let row = engine.get("events.compound-counter").await.unwrap();
    assert_eq!(row.state, State::Completed);
    assert_eq!(row.key_type.as_deref(), Some("(timestamptz, bigint)"));
}
