//! Test support: one fresh PostgreSQL database per test.
//!
//! The server is `DATABASE_URL` when set; otherwise a throwaway cluster is
//! started from the machine's own PostgreSQL binaries (initdb + pg_ctl, as
//! the `postgres` user when running as root); otherwise the test fails
//! loudly. A test that needs PostgreSQL never silently skips.

#![allow(dead_code)]

pub mod admin;
pub mod http;
pub mod log;
pub mod pgbouncer;
pub mod prereq;
pub mod repairs;
pub mod standby;
pub mod webhook;

use backfill::__private::store::{self, Pool};
use backfill::engine::RetryPolicy;
use backfill::EngineConfig;
use diesel_async::{AsyncConnection, AsyncPgConnection, RunQueryDsl, SimpleAsyncConnection};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// A database created for one test, with the framework's migrations applied.
pub struct TestDb {
    pub url: String,
    pub name: String,
    pub pool: Pool,
}

impl TestDb {
    /// The one login role a test may create on the shared server (as
    /// `CREATE ROLE <role> LOGIN`); dropped with the database.
    pub fn role(&self) -> String {
        format!("{}_role", self.name)
    }

    /// A fresh connection outside the pool (for barriers: a second session
    /// that holds locks while the code under test runs).
    pub async fn connect(&self) -> AsyncPgConnection {
        AsyncPgConnection::establish(&self.url)
            .await
            .expect("connect to the test database")
    }

    /// Run one SQL statement (test setup and inspection only; production
    /// SQL lives in src/store).
    pub async fn exec(&self, sql: &str) {
        let mut conn = self.pool.get().await.expect("pool");
        conn.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Query one bigint.
    pub async fn scalar(&self, sql: &str) -> i64 {
        #[derive(diesel::QueryableByName)]
        struct V {
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            v: i64,
        }
        let mut conn = self.pool.get().await.expect("pool");
        let row: V = diesel::sql_query(sql)
            .get_result(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        row.v
    }

    /// Query one text (NULL as None).
    pub async fn text(&self, sql: &str) -> Option<String> {
        #[derive(diesel::QueryableByName)]
        struct V {
            #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::Text>)]
            v: Option<String>,
        }
        let mut conn = self.pool.get().await.expect("pool");
        let row: V = diesel::sql_query(sql)
            .get_result(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        row.v
    }

    /// Make a claim's lease expire now, as if its owner stopped renewing
    /// long ago (simulates the passage of PostgreSQL time, CLM-3).
    pub async fn expire_lease(&self, id: &str) {
        self.exec(&format!(
            "UPDATE backfill SET lease_expires_at = clock_timestamp() - interval '1 second' \
             WHERE id = '{id}' AND owner IS NOT NULL"
        ))
        .await;
    }
}

/// Query one bigint (as column `v`) on a connection of the test's own.
pub async fn scalar_on(conn: &mut AsyncPgConnection, sql: &str) -> i64 {
    #[derive(diesel::QueryableByName)]
    struct V {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        v: i64,
    }
    let row: V = diesel::sql_query(sql)
        .get_result(conn)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    row.v
}

/// Each test's database is dropped when the test ends (pass or fail), so
/// test runs do not accumulate databases on a shared server. So is the
/// role [`TestDb::role`] names, which a test may create: roles belong to
/// the server, not to the database, and one left by a test that failed
/// half-way would stay.
impl Drop for TestDb {
    fn drop(&mut self) {
        let name = self.name.clone();
        let role = self.role();
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(mut conn) = store::connect_dedicated(server_url()).await {
                    // Two messages: DROP DATABASE refuses to run inside a
                    // multi-statement string.
                    let _ = conn
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                    let _ = conn
                        .batch_execute(&format!("DROP ROLE IF EXISTS {role}"))
                        .await;
                }
            });
        })
        .join();
    }
}

/// The server every test database is created on.
pub fn server_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| match std::env::var("DATABASE_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => throwaway_cluster().unwrap_or_else(|e| {
            panic!(
                "tests need PostgreSQL: set DATABASE_URL, or install the PostgreSQL server \
                 binaries (initdb, pg_ctl) so a throwaway cluster can be started: {e}"
            )
        }),
    })
}

/// Replace the database name of a `postgres://` URL.
pub fn with_database(url: &str, name: &str) -> String {
    store::url_with_database(url, name)
}

/// Create a fresh database with the framework's migrations.
pub async fn test_db() -> TestDb {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let name = format!(
        "bft_{}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::SeqCst),
        rand::random::<u32>()
    );
    let server = server_url();
    let mut admin = AsyncPgConnection::establish(server)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to the test server: {e}"));
    diesel::sql_query(format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .expect("create test database");
    let url = with_database(server, &name);
    store::run_migrations(&url).await.expect("migrations");
    let pool = store::build_pool(&url, 8).await.expect("pool");
    TestDb { url, name, pool }
}

/// The throwaway cluster every test binary without `DATABASE_URL` shares:
/// the one an earlier binary started (its URL in `target/tmp`), while it
/// still listens, else a new one, kept running for the next. Under the
/// set-up lock, so binaries running at once start one between them; a
/// whole `cargo test --workspace` then leaves one cluster behind, not one
/// per binary.
fn throwaway_cluster() -> Result<String, String> {
    let _lock = prereq::SetupLock::take()?;
    let saved = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("test-cluster.url");
    if let Ok(url) = std::fs::read_to_string(&saved) {
        let url = url.trim().to_string();
        let listens = url
            .rsplit_once(':')
            .and_then(|(_, rest)| rest.split('/').next()?.parse::<u16>().ok())
            .is_some_and(|port| std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        if listens {
            return Ok(url);
        }
    }
    let url = backfill_ephemeral::EphemeralPostgres::start("test")
        .map(|pg| pg.keep())
        .map_err(|e| e.to_string())?;
    std::fs::write(&saved, &url).map_err(|e| {
        format!(
            "cannot record the throwaway cluster in {}: {e}",
            saved.display()
        )
    })?;
    Ok(url)
}

/// Engine settings for tests: a long lease, a short lock timeout (a lock
/// wait in a test is a bug to surface quickly) and millisecond backoff.
pub fn engine_config() -> EngineConfig {
    EngineConfig {
        lease_ttl: Duration::from_secs(30),
        statement_timeout: Duration::from_secs(10),
        lock_timeout: Duration::from_millis(300),
        validation_timeout: Duration::from_secs(10),
        retry: RetryPolicy {
            max_attempts: 3,
            backoff_base: Duration::from_millis(1),
            backoff_max: Duration::from_millis(5),
        },
        build_info: "test".into(),
        ..EngineConfig::default()
    }
}

/// Claim, run batches and validate until nothing is claimable: the loop the
/// actor runtime runs, driven directly through the production engine.
pub async fn drive(engine: &backfill::Engine, worker: &str) {
    use backfill::{BatchOutcome, Phase};
    for _ in 0..10_000 {
        let Some(mut claim) = engine.claim_next(worker, &[]).await.expect("claim") else {
            return;
        };
        match claim.phase {
            Phase::Execute => loop {
                match engine.run_batch(&mut claim).await {
                    Ok(BatchOutcome::Committed {
                        reached_bound: false,
                        ..
                    }) => continue,
                    Ok(_) => break,
                    Err(e) => {
                        let class = e.classification().expect("recordable");
                        engine.record_failure(&claim, &class).await.expect("record");
                        break;
                    }
                }
            },
            Phase::Validate => {
                if let Err(e) = engine.validate_claimed(&claim).await {
                    let class = e.classification().expect("recordable");
                    engine.record_failure(&claim, &class).await.expect("record");
                }
            }
        }
    }
    panic!("drive did not settle");
}

/// Wait until `check` holds, polling every 10 ms (PostgreSQL or a runtime
/// snapshot); fail with `what` after 90 s. Waiting for an outcome, never a
/// way to force a race.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(90);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// A wait for a condition PostgreSQL reaches on its own, as a loop: poll
/// every 10 ms, fail with what was awaited after 90 s. For checks that
/// borrow a connection mutably or keep what they read, which
/// [`eventually`]'s closure cannot.
pub struct Deadline {
    what: &'static str,
    until: tokio::time::Instant,
}

impl Deadline {
    /// Start waiting for `what`.
    pub fn new(what: &'static str) -> Self {
        Deadline {
            what,
            until: tokio::time::Instant::now() + Duration::from_secs(90),
        }
    }

    /// Fail if the time is up, else sleep before the next poll.
    pub async fn tick(&mut self) {
        assert!(
            tokio::time::Instant::now() < self.until,
            "timed out waiting for: {}",
            self.what
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// SQL that logs, in `presence_log (at, by)`, which statement wrote each
/// presence row (PAR-6): `poll` for a claim poll's read of what is
/// claimable, `round` for the lease renewer's heartbeat, else `other`.
/// Its function `log_presence()` logs `claim` when a trigger of another
/// table fires it, for a test that also watches the claim statements.
/// The classification follows the store's statement texts.
pub const PRESENCE_LOG: &str = "CREATE TABLE presence_log (\
         at timestamptz NOT NULL DEFAULT clock_timestamp(), by text NOT NULL); \
     CREATE FUNCTION log_presence() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
         INSERT INTO presence_log (by) VALUES (CASE \
             WHEN TG_TABLE_NAME <> 'backfill_worker' THEN 'claim' \
             WHEN current_query() LIKE '%SELECT b.id FROM backfill b WHERE%' THEN 'poll' \
             WHEN current_query() LIKE '%PARTITION BY p.backfill_id%' THEN 'round' \
             ELSE 'other' END); \
         RETURN NULL; END $$; \
     CREATE TRIGGER log_presence AFTER INSERT OR UPDATE ON backfill_worker \
         FOR EACH ROW EXECUTE FUNCTION log_presence()";
