//! The shop service runs both of its repairs against PostgreSQL through
//! the library's public API alone (EMB-10).
//!
//! Runs against `DATABASE_URL` when it is set (a server where the user may
//! create databases), else against a throwaway cluster from the machine's
//! PostgreSQL binaries, as the library's own tests do. The test creates a
//! database of its own, named `bft_emb10_..` so CI's cleanup drops it
//! should the test die before it does. The throwaway cluster comes from
//! the workspace's test harness crate, a dev-dependency only: the service
//! itself depends on `backfill` alone.

use backfill::host::Application;
use backfill::State;
use backfill::{diesel, diesel_async};
use backfill_embedder_check::{run_repairs, Shop, EMAIL_NORM, ORDER_CENTS};
use backfill_ephemeral::EphemeralPostgres;
use diesel::sql_types::BigInt;
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Rows seeded into each repaired table.
const ROWS: i64 = 2_000;

/// A database of this test's own on the server `DATABASE_URL` names, or
/// on a throwaway cluster when it is unset.
struct TestDatabase {
    server: String,
    name: String,
    url: String,
    /// The throwaway cluster, stopped and removed when the value is
    /// dropped (after the database itself).
    _cluster: Option<EphemeralPostgres>,
}

impl TestDatabase {
    async fn create() -> Self {
        let (server, cluster) = match std::env::var("DATABASE_URL") {
            Ok(url) if !url.is_empty() => (url, None),
            _ => {
                let cluster = tokio::task::spawn_blocking(|| EphemeralPostgres::start("embedder"))
                    .await
                    .expect("start the throwaway cluster")
                    .unwrap_or_else(|e| {
                        panic!(
                            "this test needs PostgreSQL: set DATABASE_URL, or install the \
                             PostgreSQL server binaries (initdb, pg_ctl): {e}"
                        )
                    });
                (cluster.url(), Some(cluster))
            }
        };
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("the clock is after 1970")
            .subsec_nanos();
        let name = format!("bft_emb10_{}_{nanos}", std::process::id());
        let mut conn = AsyncPgConnection::establish(&server)
            .await
            .expect("connect to the test server");
        conn.batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create the test database");
        let url = with_database(&server, &name);
        Self {
            server,
            name,
            url,
            _cluster: cluster,
        }
    }

    async fn drop_it(self) {
        let mut conn = AsyncPgConnection::establish(&self.server)
            .await
            .expect("connect to the test server");
        conn.batch_execute(&format!(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            self.name
        ))
        .await
        .expect("drop the test database");
    }
}

/// `url` with its database name replaced by `name` (any query string kept).
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let authority_start = base.find("://").map_or(0, |i| i + 3);
    let server = match base[authority_start..].find('/') {
        Some(slash) => &base[..authority_start + slash],
        None => base,
    };
    format!("{server}/{name}{query}")
}

#[derive(QueryableByName)]
struct Tally {
    #[diesel(sql_type = BigInt)]
    rows: i64,
    #[diesel(sql_type = BigInt)]
    once: i64,
    #[diesel(sql_type = BigInt)]
    right: i64,
}

/// How many rows `table` has, how many of them a repair touched exactly
/// once, and how many hold the repaired value `check` describes.
async fn tally(conn: &mut AsyncPgConnection, table: &str, check: &str) -> Tally {
    diesel::sql_query(format!(
        "SELECT count(*) AS rows, count(*) FILTER (WHERE repairs = 1) AS once, \
         count(*) FILTER (WHERE {check}) AS right FROM {table}"
    ))
    .get_result(conn)
    .await
    .expect("count the repaired rows")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emb10_an_embedder_runs_a_repair_through_the_facade_alone() {
    let db = TestDatabase::create().await;

    // The service's schema, as its own migration writes it, and rows
    // that predate the repairs.
    Shop.migrate(&db.url)
        .await
        .expect("the service's migration");
    let mut conn = AsyncPgConnection::establish(&db.url)
        .await
        .expect("connect to the test database");
    conn.batch_execute(&format!(
        "INSERT INTO accounts (id, email) \
           SELECT g, 'User' || g || '@Example.COM' FROM generate_series(1, {ROWS}) AS g;
         INSERT INTO orders (id, amount) \
           SELECT g, (g * 1.25)::numeric(12, 2) FROM generate_series(1, {ROWS}) AS g;"
    ))
    .await
    .expect("seed the tables");

    let outcomes = run_repairs(&db.url, Duration::from_secs(120))
        .await
        .unwrap_or_else(|e| panic!("the repairs did not complete: {e}"));

    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
    for (outcome, id) in outcomes.iter().zip([EMAIL_NORM, ORDER_CENTS]) {
        assert_eq!(outcome.id, id, "{outcome:?}");
        assert_eq!(outcome.state, State::Completed, "{outcome:?}");
        assert_eq!(
            outcome.validation.as_deref(),
            Some("success"),
            "{outcome:?}"
        );
        assert_eq!(outcome.rows_done, ROWS, "{outcome:?}");
        assert_eq!(outcome.keys_reported, ROWS as usize, "{outcome:?}");
        assert!(outcome.completion_event, "no completion event: {outcome:?}");
    }

    // Every row repaired, each exactly once, whatever the batches.
    let accounts = tally(&mut conn, "accounts", "email_norm = lower(email)").await;
    let orders = tally(&mut conn, "orders", "amount_cents = (amount * 100)::bigint").await;
    for (table, t) in [("accounts", accounts), ("orders", orders)] {
        assert_eq!(t.rows, ROWS, "{table}: rows");
        assert_eq!(t.once, ROWS, "{table}: rows repaired exactly once");
        assert_eq!(t.right, ROWS, "{table}: rows holding the repaired value");
    }

    drop(conn);
    db.drop_it().await;
}

/// EMB-10: the test's own database sits on the test server, whatever the
/// form of its URL.
#[test]
fn emb10_the_test_database_replaces_only_the_database_name() {
    assert_eq!(
        with_database("postgres://postgres@127.0.0.1:5432/postgres", "bft_x"),
        "postgres://postgres@127.0.0.1:5432/bft_x"
    );
    assert_eq!(
        with_database("postgres://u:p@h/app?sslmode=disable", "bft_x"),
        "postgres://u:p@h/bft_x?sslmode=disable"
    );
    assert_eq!(
        with_database("postgres://h:5432", "bft_x"),
        "postgres://h:5432/bft_x"
    );
}
