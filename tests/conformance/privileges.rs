//! Least privilege (EMB-12): the runtime needs no superuser. A database
//! owned by a plain login role is migrated and served by that role, and a
//! service role holding only the grants docs/guides/operating.md lists
//! ("Roles and privileges") serves it with migrations off. Both run
//! through the production host (`Host::start`: migrations, registration,
//! the runtime and its lease renewer, the health monitor, the notification
//! sender and the admin API) against real PostgreSQL, on a database and
//! roles each test creates under names no other test uses and drops at
//! its end, pass or fail.

use super::support::http::{request, Response};
use super::support::log::Log;
use super::support::webhook::Receiver;
use super::support::{engine_config, scalar_on, server_url, with_database, Deadline};
use super::with_user;
use backfill::admin::AuthConfig;
use backfill::host::{AppError, Application, Host, HostConfig};
use backfill::notify::{NotifyConfig, Secret, Target};
use backfill::repair::{DefinitionError, Registry};
use backfill::throttle::health::HealthCheck;
use backfill::{SqlRepair, State};
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The journaled, partitioned repair: `n = n + 1` on every item.
const NORM: &str = "items.priv-norm.v1";
/// The repair that runs its batches in a loop inside the server (EX-8):
/// `m = m + 1` on every item.
const LOOP: &str = "items.priv-loop.v1";
const ROWS: i64 = 2000;
const TOKEN: &str = "privileges-operator-token-0123456789";

/// The application's schema: one table, a column for each repair, so
/// the two never touch the same column.
const APP_SQL: &str = "CREATE TABLE items (id bigint PRIMARY KEY, \
         n integer NOT NULL DEFAULT 0, m integer NOT NULL DEFAULT 0); \
     INSERT INTO items (id) SELECT g FROM generate_series(1, 2000) g";

/// The attributes that would make a role more than a plain login role.
const PLAIN: &str = "LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS";

/// The grants the operating guide gives a service role, as written there:
/// the test runs the guide's own block, so a grant the guide leaves out is
/// one the test runs without.
fn documented_grants(database: &str, service: &str) -> String {
    const GUIDE: &str = include_str!("../../docs/guides/operating.md");
    const MARKER: &str = "tests/conformance/privileges.rs runs this block";
    let after = &GUIDE[GUIDE
        .find(MARKER)
        .expect("the guide marks the grants block")..];
    let start = after
        .find("```sql\n")
        .expect("a sql block after the marker")
        + "```sql\n".len();
    let block = &after[start..];
    let end = block.find("```").expect("the end of the sql block");
    block[..end]
        .replace("app_db", database)
        .replace("backfill_service", service)
}

/// A database owned by a role of its own, and a service role, on the
/// shared server. Dropped when the test ends, pass or fail: roles belong
/// to the server, and one a failed test left would stay.
struct Tenancy {
    database: String,
    owner: String,
    service: String,
}

impl Tenancy {
    async fn create() -> Tenancy {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let base = format!(
            "bfp_{}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst),
            rand::random::<u32>()
        );
        let tenancy = Tenancy {
            database: base.clone(),
            owner: format!("{base}_owner"),
            service: format!("{base}_service"),
        };
        let mut admin = superuser().await;
        for role in [&tenancy.owner, &tenancy.service] {
            admin
                .batch_execute(&format!("CREATE ROLE {role} {PLAIN}"))
                .await
                .expect("create a plain login role");
        }
        // CREATE DATABASE refuses to run inside a multi-statement string.
        admin
            .batch_execute(&format!(
                "CREATE DATABASE {} OWNER {}",
                tenancy.database, tenancy.owner
            ))
            .await
            .expect("create the owner's database");
        tenancy
    }

    /// The database's URL as `role`.
    fn url(&self, role: &str) -> String {
        with_user(&with_database(server_url(), &self.database), role)
    }

    /// A session of `role` in the database.
    async fn connect(&self, role: &str) -> AsyncPgConnection {
        AsyncPgConnection::establish(&self.url(role))
            .await
            .unwrap_or_else(|e| panic!("connect as {role}: {e}"))
    }
}

impl Drop for Tenancy {
    fn drop(&mut self) {
        let statements = [
            format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.database),
            format!("DROP ROLE IF EXISTS {}", self.service),
            format!("DROP ROLE IF EXISTS {}", self.owner),
        ];
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(mut conn) =
                    backfill::__private::store::connect_dedicated(server_url()).await
                {
                    // One message each: DROP DATABASE runs in none shared.
                    for sql in &statements {
                        let _ = conn.batch_execute(sql).await;
                    }
                }
            });
        })
        .join();
    }
}

/// A session of the test server's superuser (the harness's, never the
/// runtime's).
async fn superuser() -> AsyncPgConnection {
    AsyncPgConnection::establish(server_url())
        .await
        .expect("connect as the test server's superuser")
}

/// The application's own health check, failing while `held` is set: the
/// runners keep their claims renewed and start no batch (THR-1), so the
/// test sees what the lease renewer writes for a held claim.
#[derive(Default)]
struct Hold {
    held: AtomicBool,
}

#[backfill::async_trait]
impl HealthCheck for Hold {
    async fn check(&self) -> Result<(), String> {
        if self.held.load(Ordering::SeqCst) {
            Err("held by the test".into())
        } else {
            Ok(())
        }
    }
}

/// The application: both repairs over `items`, its schema created by its
/// own migration (run only with migrations on), and the hold.
struct Shop {
    hold: Arc<Hold>,
}

#[backfill::async_trait]
impl Application for Shop {
    fn registry(&self) -> Result<Registry, DefinitionError> {
        Registry::new()
            .with(
                SqlRepair::new(NORM, "items")
                    .key("id")
                    .set("n = n + 1")
                    .validate_where("n <> 1")
                    .batch_size(100)
                    .partitions(2)
                    .journal(["n"])
                    .build()?,
            )?
            .with(
                SqlRepair::new(LOOP, "items")
                    .key("id")
                    .set("m = m + 1")
                    .validate_where("m <> 1")
                    .batch_size(100)
                    .server_loop(Duration::from_millis(200))
                    .build()?,
            )
    }

    fn health_check(&self) -> Option<Arc<dyn HealthCheck>> {
        Some(self.hold.clone())
    }

    async fn migrate(&self, database_url: &str) -> Result<(), AppError> {
        let mut conn = AsyncPgConnection::establish(database_url).await?;
        conn.batch_execute(APP_SQL).await?;
        Ok(())
    }
}

/// A host on `url` with short intervals: a lease of 1.5 s (renewed every
/// 0.5 s), progress sampled every 0.1 s, health read every 50 ms.
fn host_config(url: String, migrate: bool) -> HostConfig {
    let mut config = HostConfig::new(url);
    config.listen = "127.0.0.1:0".parse().expect("address");
    config.admin_listen = "127.0.0.1:0".parse().expect("address");
    config.migrate = migrate;
    config.auto_backfills = false;
    config.engine = engine_config();
    config.engine.lease_ttl = Duration::from_millis(1500);
    config.runtime.poll_interval = Duration::from_millis(50);
    config.runtime.progress_sample_interval = Duration::from_millis(100);
    config.health.interval = Duration::from_millis(50);
    config.admin_auth = AuthConfig::from_sources(Some(TOKEN), None, false).expect("auth");
    config
}

/// An admin request with the operator's token; `key` as its
/// Idempotency-Key.
async fn admin(host: &Host, method: &str, path: &str, key: Option<&str>) -> Response {
    let bearer = format!("Bearer {TOKEN}");
    let mut headers = vec![("Authorization", bearer.as_str())];
    if let Some(key) = key {
        headers.push(("Idempotency-Key", key));
    }
    request(host.admin_addr, method, path, &headers, None).await
}

/// POST action `action` on backfill `id` and expect it applied.
async fn act(host: &Host, id: &str, action: &str) {
    let r = admin(
        host,
        "POST",
        &format!("/admin/backfills/{id}/{action}"),
        Some(&format!("{id}-{action}")),
    )
    .await;
    assert_eq!(r.status, 200, "{action} {id}: {}", r.text);
}

/// Wait until `id` is `completed`, `blocked` or `failed`, and return its
/// state and diagnostic.
async fn settled(host: &Host, id: &str) -> (State, Option<String>) {
    let row = host
        .engine()
        .wait_for(
            id,
            &[State::Completed, State::Blocked, State::Failed],
            Duration::from_secs(90),
        )
        .await
        .unwrap_or_else(|e| panic!("{id} settles: {e}"));
    (row.state, row.last_error)
}

/// Poll `sql` (a count as `v`) on `conn` until it is at least 1.
async fn until_some(conn: &mut AsyncPgConnection, what: &'static str, sql: &str) {
    let mut wait = Deadline::new(what);
    while scalar_on(conn, sql).await < 1 {
        wait.tick().await;
    }
}

/// EMB-12: a login role that owns its database, and is neither superuser
/// nor allowed to create databases or roles, runs the framework's
/// migrations and the application's through `Host::start`, then both a
/// journaled, partitioned repair and a repair whose loop runs inside the
/// server (which installs a procedure in the owner's schema) to
/// `completed`. Guard: anything the migrations or the runtime need beyond
/// what owning the database gives (a superuser's setting, an extension
/// only a superuser may create, a schema the owner may not create in)
/// fails the start or a backfill; run with `public` handed to another
/// role (`ALTER SCHEMA public OWNER TO postgres`), the start fails with
/// `permission denied for schema public`.
#[actix_rt::test]
async fn emb12_a_database_owner_without_superuser_migrates_and_runs_backfills() {
    let tenancy = Tenancy::create().await;
    let mut owner = tenancy.connect(&tenancy.owner).await;
    assert_eq!(
        scalar_on(
            &mut owner,
            "SELECT count(*) AS v FROM pg_roles WHERE rolname = current_user \
             AND NOT (rolsuper OR rolcreatedb OR rolcreaterole OR rolreplication OR rolbypassrls)"
        )
        .await,
        1,
        "the owner is a plain login role"
    );
    let host = Host::start(
        host_config(tenancy.url(&tenancy.owner), true),
        Shop {
            hold: Arc::default(),
        },
    )
    .await
    .expect("the owner migrates and starts the host");
    for (id, column) in [(NORM, "n"), (LOOP, "m")] {
        act(&host, id, "start").await;
        let (state, error) = settled(&host, id).await;
        assert_eq!(state, State::Completed, "{id}: {error:?}");
        assert_eq!(
            scalar_on(
                &mut owner,
                &format!("SELECT count(*) AS v FROM items WHERE {column} = 1")
            )
            .await,
            ROWS,
            "{id} repaired every item once"
        );
    }
    host.stop().await;
}

/// EMB-12: a service role that holds exactly the grants the operating
/// guide lists, on a database whose owner ran the migrations and took
/// PostgreSQL's defaults for every role away (USAGE on the schema, EXECUTE
/// on the framework's functions, CONNECT), serves it with migrations off:
/// refused requests are audited, a dry run, a journaled and partitioned
/// repair held by the application's check (its claims renewed, progress
/// sampled, the process's presence and the throttle recorded) then run to
/// `completed` with its webhook delivered, an undo and a journal prune,
/// all through the admin API. Two needs beyond the list, as the guide
/// says: a repair whose loop runs inside the server is `blocked` naming
/// CREATE until the role may create in the schema, and completes after
/// that grant and a retry; and without pg_read_all_stats the transaction
/// age is unknown (other roles' sessions are hidden), never healthy, the
/// runners going ahead on the other signals and saying so, while lock
/// waiters and the WAL rate are read; with it, the age is read. Guard:
/// each grant of the guide's block; without any one of them (say DELETE
/// on backfill_event, which every state change's timeline trigger needs)
/// the run fails.
#[actix_rt::test]
async fn emb12_a_service_role_with_the_documented_grants_runs_backfills() {
    let (log, _guard) = Log::capture();
    let tenancy = Tenancy::create().await;
    let service = tenancy.service.clone();
    backfill::__private::store::run_migrations(&tenancy.url(&tenancy.owner))
        .await
        .expect("the owner's migrations");
    let mut owner = tenancy.connect(&tenancy.owner).await;
    owner
        .batch_execute(&format!(
            "{APP_SQL}; \
             REVOKE ALL ON DATABASE {} FROM PUBLIC; \
             REVOKE ALL ON SCHEMA public FROM PUBLIC; \
             REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA public FROM PUBLIC",
            tenancy.database
        ))
        .await
        .expect("the application's table, and no defaults for every role");
    owner
        .batch_execute(&documented_grants(&tenancy.database, &service))
        .await
        .expect("the guide's grants");

    let receiver = Receiver::start(204).await;
    let hold = Arc::new(Hold::default());
    hold.held.store(true, Ordering::SeqCst);
    let mut config = host_config(tenancy.url(&service), false);
    config.health.thresholds.max_xact_age = Some(Duration::from_secs(3600));
    config.notify = NotifyConfig {
        targets: vec![Target {
            name: "ops".into(),
            url: receiver.url.clone(),
            events: vec!["completed".into()],
            secret: Secret::new("privileges-webhook-secret"),
        }],
        interval: Duration::from_millis(50),
        ..NotifyConfig::default()
    };
    let host = Host::start(config, Shop { hold: hold.clone() })
        .await
        .expect("the service role starts the host");

    // Another role's session, which this role may not look into.
    let mut other_role = superuser().await;
    let monitor = host.engine().health().expect("the host's monitor").clone();
    let blind = monitor.run_once().await;
    let reason = blind
        .xact_age
        .reason()
        .expect("the transaction age is unknown to this role");
    assert!(reason.contains("pg_monitor"), "{reason}");
    assert!(
        blind.lock_waiters.known().is_some(),
        "{:?}",
        blind.lock_waiters
    );
    assert!(
        blind.wal_bytes_per_s.known().is_some(),
        "{:?}",
        blind.wal_bytes_per_s
    );

    let refused = request(host.admin_addr, "GET", "/admin/backfills", &[], None).await;
    assert_eq!(refused.status, 401, "{}", refused.text);
    until_some(
        &mut owner,
        "the refused request's audit row",
        "SELECT count(*) AS v FROM backfill_audit WHERE source IS NOT NULL",
    )
    .await;

    let dry = admin(
        &host,
        "POST",
        &format!("/admin/backfills/{NORM}/dry-run?batches=1"),
        None,
    )
    .await;
    assert_eq!(dry.status, 200, "{}", dry.text);

    act(&host, NORM, "start").await;
    for (what, sql) in [
        (
            "a progress sample of a held claim",
            "SELECT count(*) AS v FROM backfill_progress",
        ),
        (
            "the process's presence",
            "SELECT count(*) AS v FROM backfill_worker",
        ),
        (
            "the throttle in the timeline",
            "SELECT count(*) AS v FROM backfill_event WHERE kind = 'throttled'",
        ),
    ] {
        until_some(&mut owner, what, sql).await;
    }
    hold.held.store(false, Ordering::SeqCst);
    let (state, error) = settled(&host, NORM).await;
    assert_eq!(state, State::Completed, "{error:?}");
    assert_eq!(
        scalar_on(&mut owner, "SELECT count(*) AS v FROM items WHERE n = 1").await,
        ROWS
    );
    let unknown = log.lines("health_unknown");
    assert!(
        unknown.iter().any(|l| l.contains("transaction_age")),
        "the runners said they went ahead without it: {unknown:?}"
    );
    until_some(
        &mut owner,
        "the completion's webhook delivered",
        &format!(
            "SELECT count(*) AS v FROM backfill_outbox \
             WHERE backfill_id = '{NORM}' AND event = 'completed' AND status = 'delivered'"
        ),
    )
    .await;
    assert!(receiver
        .got()
        .iter()
        .any(|r| r.body().backfill_id == NORM && r.body().event == "completed"));
    for path in [
        format!("/admin/backfills/{NORM}"),
        format!("/admin/backfills/{NORM}/timeline"),
        format!("/admin/backfills/{NORM}/progress"),
        format!("/admin/audit?backfill={NORM}"),
        "/admin/notifications?status=delivered".to_string(),
    ] {
        let r = admin(&host, "GET", &path, None).await;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
    }

    // The loop inside the server is installed on first use, in the
    // schema: the one need beyond the list.
    act(&host, LOOP, "start").await;
    let (state, error) = settled(&host, LOOP).await;
    assert_eq!(state, State::Blocked, "{error:?}");
    let error = error.expect("the block's diagnostic");
    assert!(error.contains("CREATE"), "{error}");
    owner
        .batch_execute(&format!("GRANT CREATE ON SCHEMA public TO {service}"))
        .await
        .expect("grant CREATE on the schema");
    act(&host, LOOP, "retry").await;
    let (state, error) = settled(&host, LOOP).await;
    assert_eq!(state, State::Completed, "{error:?}");
    assert_eq!(
        scalar_on(&mut owner, "SELECT count(*) AS v FROM items WHERE m = 1").await,
        ROWS
    );

    act(&host, NORM, "undo").await;
    let (state, error) = settled(&host, &format!("{NORM}.undo")).await;
    assert_eq!(state, State::Completed, "{error:?}");
    assert_eq!(
        scalar_on(&mut owner, "SELECT count(*) AS v FROM items WHERE n = 0").await,
        ROWS,
        "the undo restored every item"
    );
    act(&host, NORM, "journal/prune").await;
    assert_eq!(
        scalar_on(&mut owner, "SELECT count(*) AS v FROM backfill_journal").await,
        0
    );

    other_role
        .batch_execute(&format!("GRANT pg_read_all_stats TO {service}"))
        .await
        .expect("grant pg_read_all_stats");
    let seeing = monitor.run_once().await;
    assert!(seeing.xact_age.known().is_some(), "{:?}", seeing.xact_age);
    host.stop().await;
}
