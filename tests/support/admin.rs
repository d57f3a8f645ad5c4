//! HTTP test support: the real actix `HttpServer` on 127.0.0.1:0 serving
//! the admin API over a test database, an `awc` client, principals of every
//! kind, and the end-of-test audit completeness check.

use super::repairs::{Counter, Hooks};
use super::TestDb;
use actix_web::{web, App, HttpServer};
use backfill::admin::{sha256, Admin, AdminConfig, AuthConfig};
use backfill::{BatchOutcome, Engine, EngineConfig, Phase, Registry};
use diesel_async::RunQueryDsl;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

pub const ID: &str = "items.counter";
pub const OTHER: &str = "items.other";

/// Tokens of the test principals.
pub const OPERATOR: &str = "operator-token-0123456789";
pub const READER: &str = "reader-token-0123456789";
pub const COMMUNITY: &str = "community-token-0123456789";

/// A tokens file: an operator (both capabilities), a read-only principal,
/// and a principal that only holds community/channel/membership roles.
pub fn tokens_file() -> String {
    let d = |t: &str| hex::encode(sha256(t));
    format!(
        r#"[
  {{"name": "ops", "sha256": "{}", "capabilities": ["backfill:read", "backfill:operate"]}},
  {{"name": "viewer", "sha256": "{}", "capabilities": ["backfill:read"]}},
  {{"name": "moderator", "sha256": "{}", "capabilities": ["community:owner", "channel:admin", "member"]}}
]"#,
        d(OPERATOR),
        d(READER),
        d(COMMUNITY)
    )
}

/// The tests' engine settings with a 5 s lock timeout: admin actions wait
/// for in-flight batches here rather than time out.
pub fn engine_config() -> EngineConfig {
    EngineConfig {
        lock_timeout: Duration::from_secs(5),
        ..super::engine_config()
    }
}

/// An engine with the counter (`ID`) and a second counter (`OTHER`).
pub fn engine(db: &TestDb, hooks: &Arc<Hooks>) -> Engine {
    let registry = Registry::new()
        .with(Counter::new(ID, 4, hooks.clone()))
        .expect("definition")
        .with(Counter::new(OTHER, 4, Hooks::new()))
        .expect("definition");
    Engine::new(db.pool.clone(), registry, engine_config()).expect("engine")
}

pub fn admin(engine: Engine) -> Admin {
    let principals = AuthConfig::parse_tokens_file(&tokens_file()).expect("tokens file");
    Admin::new(
        engine,
        AdminConfig {
            auth: AuthConfig::Tokens(principals),
            auto_backfills: true,
            required: BTreeSet::from([ID.to_string()]),
        },
    )
}

/// A database with `rows` items and both counters registered.
pub async fn setup(rows: i64) -> (TestDb, Engine, Arc<Hooks>) {
    let db = super::test_db().await;
    db.exec(&super::repairs::items_sql(rows)).await;
    let hooks = Hooks::new();
    let engine = engine(&db, &hooks);
    engine.register().await.expect("register");
    (db, engine, hooks)
}

/// The real HTTP server.
pub struct TestServer {
    pub url: String,
    handle: actix_web::dev::ServerHandle,
}

impl TestServer {
    /// Stop the server gracefully (a "restart" is stop + [`serve`]).
    pub async fn stop(self) {
        self.handle.stop(true).await;
    }
}

/// Serve `admin` on 127.0.0.1:0 with the production routes.
pub fn serve(admin: Admin) -> TestServer {
    serve_routes(admin, false)
}

/// Serve `admin` with the production routes and the web client at `/ui`,
/// as the admin listener of a host does.
pub fn serve_with_ui(admin: Admin) -> TestServer {
    serve_routes(admin, true)
}

fn serve_routes(admin: Admin, ui: bool) -> TestServer {
    let data = web::Data::new(admin);
    let server = HttpServer::new(move || {
        let data = data.clone();
        App::new().configure(move |cfg| {
            backfill::http::admin::configure(cfg, data);
            if ui {
                backfill::http::ui::configure(cfg);
            }
        })
    })
    .workers(2)
    .bind(("127.0.0.1", 0))
    .expect("bind");
    let port = server.addrs()[0].port();
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    TestServer {
        url: format!("http://127.0.0.1:{port}"),
        handle,
    }
}

/// One HTTP response: status and JSON body (Null when not JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Resp {
    pub status: u16,
    pub body: Value,
    pub text: String,
}

/// Send one request. `key` is the Idempotency-Key.
pub async fn call(
    server: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    key: Option<&str>,
) -> Resp {
    call_with_body(server, method, path, token, key, None).await
}

/// Send one request with a body: `(content type, body)`.
pub async fn call_with_body(
    server: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    key: Option<&str>,
    body: Option<(&str, &str)>,
) -> Resp {
    let client = awc::Client::builder()
        .timeout(Duration::from_secs(60))
        .finish();
    let url = format!("{server}{path}");
    let method = awc::http::Method::from_bytes(method.as_bytes()).expect("method");
    let mut req = client.request(method, url);
    if let Some(t) = token {
        req = req.insert_header(("Authorization", format!("Bearer {t}")));
    }
    if let Some(k) = key {
        req = req.insert_header(("Idempotency-Key", k));
    }
    let sent = match body {
        Some((content_type, body)) => {
            req.insert_header(("Content-Type", content_type))
                .send_body(body.to_string())
                .await
        }
        None => req.send().await,
    };
    let mut res = sent.expect("request");
    let bytes = res.body().limit(4 << 20).await.expect("body");
    let text = String::from_utf8_lossy(&bytes).to_string();
    Resp {
        status: res.status().as_u16(),
        body: serde_json::from_str(&text).unwrap_or(Value::Null),
        text,
    }
}

/// Claim, run batches and validate until nothing is claimable.
pub async fn drive(engine: &Engine) {
    for _ in 0..1000 {
        let Some(mut claim) = engine.claim_next("w1", &[]).await.expect("claim") else {
            return;
        };
        match claim.phase {
            Phase::Execute => {
                while let BatchOutcome::Committed {
                    reached_bound: false,
                    ..
                } = engine.run_batch(&mut claim).await.expect("batch")
                {}
            }
            Phase::Validate => {
                engine.validate_claimed(&claim).await.expect("validate");
            }
        }
    }
    panic!("drive did not settle");
}

/// Everything an admin request must not change, as one comparable string.
pub async fn snapshot(db: &TestDb, id: &str) -> String {
    db.text(&format!(
        "SELECT concat_ws('|', state, encode(bound, 'hex'), encode(checkpoint, 'hex'), generation, \
             owner, lease_expires_at, attempts, started_at, completed_at, rows_done, \
             (SELECT string_agg(id || ':' || n, ',' ORDER BY id) FROM items)) AS v \
         FROM backfill WHERE id = '{id}'"
    ))
    .await
    .expect("row")
}

/// Wait (polling PostgreSQL's lock table, not a timer) until `n` lock
/// requests are waiting in this test database: the barrier that proves
/// concurrent requests are queued inside PostgreSQL.
pub async fn wait_for_lock_waiters(db: &TestDb, n: i64) {
    #[derive(diesel::QueryableByName)]
    struct V {
        #[diesel(sql_type = diesel::sql_types::BigInt)]
        v: i64,
    }
    // Its own connection: the requests under test may hold the whole pool.
    let mut conn = db.connect().await;
    for _ in 0..3000 {
        let waiting: V = diesel::sql_query(
            "SELECT count(*) AS v FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE NOT l.granted AND a.datname = current_database()",
        )
        .get_result(&mut conn)
        .await
        .expect("pg_locks");
        if waiting.v >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{n} lock waiters never appeared");
}

/// AUD-1: every accepted transition or settings change has exactly one
/// `applied` audit row with its idempotency key, and there is no `applied`
/// audit row without a committed record of it.
pub async fn assert_audit_complete(db: &TestDb) {
    // A settings change answers with the backfill, not an outcome, and
    // its request is stored as `settings:<digest of the change>`.
    const ACCEPTED: &str = "r.status = 200 AND (r.response->>'outcome' = 'applied' \
         OR r.action LIKE 'settings:%')";
    let accepted = db
        .scalar(&format!(
            "SELECT count(*) AS v FROM backfill_request r WHERE {ACCEPTED}"
        ))
        .await;
    let unmatched = db
        .scalar(&format!(
            "SELECT count(*) AS v FROM backfill_request r \
             WHERE {ACCEPTED} AND \
               (SELECT count(*) FROM backfill_audit a WHERE a.correlation = r.idempotency_key \
                  AND a.actor IS NOT DISTINCT FROM nullif(r.principal, '') \
                  AND a.outcome = 'applied' AND a.backfill_id = r.backfill_id \
                  AND a.action = split_part(r.action, ':', 1)) <> 1"
        ))
        .await;
    let applied_audits = db
        .scalar("SELECT count(*) AS v FROM backfill_audit WHERE outcome = 'applied'")
        .await;
    assert_eq!(
        unmatched, 0,
        "every accepted action has exactly one audit row"
    );
    assert_eq!(
        applied_audits, accepted,
        "no audit row claims a transition that did not commit"
    );
}

/// A counter whose validation, once `careless` is set, also WRITES
/// (`n = n + 100` on every item) after reaching its verdict: a definition
/// that breaks the read-only rule, to prove explicit validation cannot
/// commit a definition's writes (VAL-4, VAL-5).
pub struct CarelessCounter {
    pub inner: Counter,
    pub careless: Arc<std::sync::atomic::AtomicBool>,
}

#[backfill::async_trait]
impl backfill::Repair for CarelessCounter {
    type Key = i64;
    fn id(&self) -> &str {
        self.inner.id()
    }
    fn batch_limit(&self) -> u32 {
        self.inner.batch_limit()
    }
    async fn capture_bound(
        &self,
        conn: &mut backfill::AsyncPgConnection,
    ) -> Result<backfill::SourceSet<i64>, backfill::RepairError> {
        self.inner.capture_bound(conn).await
    }
    fn batches(&self) -> backfill::Batches<'_, i64> {
        // The inner counter's two-statement form, whatever its flag says.
        backfill::Batches::TwoStatements(&self.inner)
    }
    async fn validate(
        &self,
        conn: &mut backfill::AsyncPgConnection,
        bound: Option<&i64>,
    ) -> Result<backfill::Validation, backfill::RepairError> {
        let verdict = self.inner.validate(conn, bound).await?;
        if std::sync::atomic::AtomicBool::load(&self.careless, std::sync::atomic::Ordering::SeqCst)
        {
            diesel::sql_query("UPDATE items SET n = n + 100")
                .execute(conn)
                .await?;
        }
        Ok(verdict)
    }
}
