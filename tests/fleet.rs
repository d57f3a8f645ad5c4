//! Repairs that serve a fleet (docs/CONTRACT.md section 12.8), through the
//! production startup path (`Host::start`), the runtime, the admin API
//! over HTTP and a real PostgreSQL.
//!
//! Index:
//! - FLT-1 one runtime over twenty databases: every row repaired exactly
//!   once in each, and one database dropped mid-run reported unavailable
//!   while the others complete: `flt01_one_runtime_*`; a database that
//!   cannot be reached at start is retried and joins, databases added to
//!   and removed from the source at run time join and are drained:
//!   `flt01_databases_join_*`; malformed and duplicated entries are
//!   startup errors naming them: `flt01_a_malformed_*` (and the unit
//!   tests of `src/host/fleet.rs`); in one JSON log of two databases,
//!   every claim, batch and completion line names its database:
//!   `flt01_every_member_log_line_*`; an idle database's pool shrinks to
//!   the connections its polls reuse: `flt01_an_idle_databases_pool_*`,
//!   and holds its wake-up listener only while it works:
//!   `flt01_an_idle_databases_listener_*`; its presence rides on its
//!   claim polls: `flt01_an_idle_databases_claim_polls_*`
//! - FLT-2 with runners scarce the higher priority is claimed first (the
//!   timeline's claim times), and a process-wide runner cap and a rollout
//!   cap hold (every batch's time), and a rollout cap set over HTTP
//!   outlives a restart: `flt02_*`; the budget's own rules:
//!   unit tests of `src/throttle/budget.rs`
//! - FLT-5 one database's lock waiters hold only that database's runner;
//!   the other database completes: `flt05_*`
//! - FLT-6 the fleet's HTTP view: every database listed with aggregates,
//!   a filter by database, a fleet-wide pause that each database audits
//!   on its own and a database that is down reported, an action on one
//!   database, a settings change in every database (and one refused by
//!   its database), a rollout cap audited in each database, readiness of
//!   the fleet or of one database, bad input:
//!   `flt06_the_fleet_view_*`; the fleet listener's OpenAPI document
//!   lists its routes and the fields it serves:
//!   `flt06_the_fleet_listener_serves_an_openapi_document_*`; each
//!   database's own admin API under its name, and its bad input:
//!   `flt06_each_databases_own_admin_api_*`
//! - FLT-4 a dependent repair waits, unclaimed and visible as
//!   `waiting_for`, while its dependency runs, and runs once it
//!   completed: `flt04_a_dependent_*`; automatic mode starts both and
//!   honours the order: `flt04_automatic_mode_*`; an unknown dependency
//!   or a cycle is a startup error naming the IDs, before anything
//!   reaches PostgreSQL: `flt04_an_unknown_dependency_or_a_cycle_*`
//!
//! The tests take turns (`SERIAL`): a fleet holds a pool per database, and
//! the server's connections are shared by every test of the binary.
//!
//! The dependent repair writes, into every row it fixes, how many rows
//! of its dependency's table were fixed at that moment, so the order of
//! the two runs is read from the data itself, not from timing.

mod support;

/// One test at a time: see the module's documentation.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

use backfill::host::{
    Availability, Database, DatabaseSource, Fleet, FleetConfig, FleetError, Host, HostConfig,
    HostError,
};
use backfill::repair::{DefinitionError, Registry};
use backfill::AsyncPgConnection;
use backfill::{SqlRepair, State};
use diesel_async::{AsyncConnection, SimpleAsyncConnection};
use std::sync::Arc;
use std::time::Duration;
use support::http::request;
use support::{engine_config, test_db, Deadline, TestDb};

const A: &str = "shop.a";
const B: &str = "shop.b";
const C: &str = "shop.c";
const ROWS: i64 = 300;
const TOKEN: &str = "fleet-operator-token-0123456789";

/// A table `name` of `ROWS` rows to fix (`n = 0`).
fn table_sql(name: &str) -> String {
    format!(
        "CREATE TABLE {name} (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0); \
         INSERT INTO {name} (id) SELECT g FROM generate_series(1, {ROWS}) g"
    )
}

/// `A` and `C` set `n = 1`; `B`, declared after `A`, sets `n` to the
/// number of `A`'s rows fixed when its batch runs, and validates that it
/// saw all of them.
fn shop(after: &[&str]) -> Registry {
    let simple = |id: &str, table: &str| {
        SqlRepair::new(id, table)
            .key("id")
            .set("n = 1")
            .filter("n = 0")
            .validate_where("n <> 1")
            .batch_size(50)
            .build()
            .expect("valid repair")
    };
    let dependent = SqlRepair::new(B, "b_items")
        .key("id")
        .set("n = (SELECT count(*) FROM a_items WHERE n = 1)")
        .filter("n = 0")
        .validate_where(format!("n <> {ROWS}"))
        .batch_size(50)
        .after(after.iter().copied())
        .build()
        .expect("valid repair");
    Registry::new()
        .with(simple(A, "a_items"))
        .and_then(|r| r.with(dependent))
        .and_then(|r| r.with(simple(C, "c_items")))
        .expect("valid registry")
}

fn host_config(db: &TestDb, auto: bool) -> HostConfig {
    let mut config = HostConfig::new(db.url.clone());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.admin_listen = "127.0.0.1:0".parse().unwrap();
    config.auto_backfills = auto;
    config.engine = engine_config();
    config.runtime.poll_interval = Duration::from_millis(50);
    config.admin_auth =
        backfill::admin::AuthConfig::from_sources(Some(TOKEN), None, false).unwrap();
    config
}

async fn fleet_db() -> TestDb {
    let db = test_db().await;
    for table in ["a_items", "b_items", "c_items"] {
        db.exec(&table_sql(table)).await;
    }
    db
}

/// `method path` on the admin listener as the operator; the JSON answer.
async fn admin(host: &Host, method: &str, path: &str, body: Option<&str>) -> serde_json::Value {
    let auth = format!("Bearer {TOKEN}");
    let key = format!("fleet-{}", rand::random::<u64>());
    let mut headers = vec![("Authorization", auth.as_str())];
    if body.is_some() {
        headers.push(("Idempotency-Key", key.as_str()));
        headers.push(("Content-Type", "application/json"));
    }
    let response = request(host.admin_addr, method, path, &headers, body).await;
    assert_eq!(response.status, 200, "{}", response.text);
    serde_json::from_str(&response.text).expect("a JSON answer")
}

async fn completed(host: &Host, id: &str) {
    let row = host
        .engine()
        .wait_for(
            id,
            &[State::Completed, State::Failed, State::Blocked],
            Duration::from_secs(90),
        )
        .await
        .unwrap();
    assert_eq!(row.state, State::Completed, "{id}: {:?}", row.last_error);
}

/// FLT-4: `B` starts after `A`. While `A` runs (held outside its run
/// window by the operator's setting), `start` of `B` is accepted and `B`
/// stays `running` without ever being claimed (generation 0, no batch),
/// shown as `waiting_for: [A]` in the detail view and the list, while
/// `C`, started after `B` and so behind it in claim order, is claimed
/// and completes. Once `A`'s window opens, `A` completes, then `B` runs:
/// every row of `B` saw all of `A`'s rows fixed, and `waiting_for` is
/// empty. Guards: the claim's dependency filter (without it `B` is
/// claimed before `C`, and its rows see `A` unfinished) and the view's
/// `waiting_for`.
#[actix_rt::test]
async fn flt04_a_dependent_waits_unclaimed_while_its_dependency_runs_then_runs_after_it() {
    let _serial = SERIAL.lock().await;
    use chrono::Timelike;
    let db = fleet_db().await;
    let host = Host::start(host_config(&db, false), shop(&[A]))
        .await
        .unwrap();
    let hour = chrono::Utc::now().hour();
    let closed = format!(
        r#"{{"window_start_hour": {}, "window_end_hour": {}}}"#,
        (hour + 2) % 24,
        (hour + 3) % 24
    );
    admin(
        &host,
        "PATCH",
        &format!("/admin/backfills/{A}/settings"),
        Some(&closed),
    )
    .await;
    host.engine().start(A).await.unwrap();
    host.embedded.runtime.wake();
    let mut wait = Deadline::new("A's runner holds its claim outside the window");
    while db
        .text(&format!(
            "SELECT throttle->>'signal' AS v FROM backfill WHERE id = '{A}'"
        ))
        .await
        .as_deref()
        != Some("outside_window")
    {
        wait.tick().await;
    }

    host.engine().start(B).await.unwrap();
    let generation = |db: &TestDb| {
        let db = db.url.clone();
        async move {
            let mut conn =
                <backfill::AsyncPgConnection as diesel_async::AsyncConnection>::establish(&db)
                    .await
                    .unwrap();
            support::scalar_on(
                &mut conn,
                &format!(
                    "SELECT generation AS v FROM backfill WHERE id = '{B}' AND state = 'running' \
                     AND owner IS NULL AND batches_done = 0"
                ),
            )
            .await
        }
    };
    let started = generation(&db).await;
    host.engine().start(C).await.unwrap();
    host.embedded.runtime.wake();
    completed(&host, C).await;
    assert_eq!(
        generation(&db).await,
        started,
        "B is started but never claimed while A runs"
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM b_items WHERE n <> 0")
            .await,
        0
    );
    let detail = admin(&host, "GET", &format!("/admin/backfills/{B}"), None).await;
    assert_eq!(detail["waiting_for"], serde_json::json!([A]), "{detail}");
    let list = admin(&host, "GET", "/admin/backfills", None).await;
    let listed = |id: &str| {
        list["items"]
            .as_array()
            .and_then(|items| items.iter().find(|v| v["id"] == id))
            .cloned()
            .unwrap_or_else(|| panic!("{id} is listed: {list}"))
    };
    assert_eq!(listed(B)["waiting_for"], serde_json::json!([A]));
    assert_eq!(listed(A)["waiting_for"], serde_json::json!([]));
    assert_eq!(listed(C)["waiting_for"], serde_json::json!([]));

    let open = format!(
        r#"{{"window_start_hour": {}, "window_end_hour": {}}}"#,
        (hour + 23) % 24,
        (hour + 2) % 24
    );
    admin(
        &host,
        "PATCH",
        &format!("/admin/backfills/{A}/settings"),
        Some(&open),
    )
    .await;
    completed(&host, B).await;
    assert_eq!(
        db.scalar(&format!(
            "SELECT count(*) AS v FROM b_items WHERE n = {ROWS}"
        ))
        .await,
        ROWS,
        "every batch of B ran after A completed"
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT count(*) AS v FROM backfill a, backfill b WHERE a.id = '{A}' \
             AND b.id = '{B}' AND a.state = 'completed' AND b.completed_at > a.completed_at"
        ))
        .await,
        1
    );
    let detail = admin(&host, "GET", &format!("/admin/backfills/{B}"), None).await;
    assert_eq!(detail["waiting_for"], serde_json::json!([]), "{detail}");
    host.stop().await;
}

/// FLT-4 in automatic mode: the host starts both required repairs at
/// once; `B` waits for `A` on its own and completes after it, every row
/// of `B` seeing all of `A`'s rows fixed. Guard: the claim's dependency
/// filter (without it `B`'s validation finds rows that saw `A`
/// unfinished, or its rows are counted wrong).
#[actix_rt::test]
async fn flt04_automatic_mode_starts_a_dependent_that_runs_after_its_dependency() {
    let _serial = SERIAL.lock().await;
    let db = fleet_db().await;
    let mut config = host_config(&db, true);
    config.required = Some(vec![A.into(), B.into()]);
    let host = Host::start(config, shop(&[A])).await.unwrap();
    completed(&host, B).await;
    completed(&host, A).await;
    assert_eq!(
        db.scalar(&format!(
            "SELECT count(*) AS v FROM b_items WHERE n = {ROWS}"
        ))
        .await,
        ROWS
    );
    host.stop().await;
}

/// FLT-4: a dependency on an ID no definition registers, and a cycle of
/// dependencies, are startup errors naming the IDs, before anything
/// reaches PostgreSQL: the host is pointed at a database that does not
/// exist, with migrations on, so any connection would fail otherwise. A
/// dependency on oneself is refused when it is registered. Guard: the
/// host's dependency check before migrating.
#[actix_rt::test]
async fn flt04_an_unknown_dependency_or_a_cycle_is_a_startup_error_naming_the_ids() {
    let _serial = SERIAL.lock().await;
    let absent = support::with_database(
        support::server_url(),
        &format!("bft_absent_{}", rand::random::<u32>()),
    );
    let repair = |id: &str, after: &[&str]| {
        SqlRepair::new(id, "items")
            .key("id")
            .set("n = 1")
            .validate_where("n <> 1")
            .after(after.iter().copied())
            .build()
            .expect("valid repair")
    };
    let unknown = Registry::new().with(repair(B, &["shop.gone"])).unwrap();
    let cycle = Registry::new()
        .with(repair(A, &[C]))
        .and_then(|r| r.with(repair(B, &[A])))
        .and_then(|r| r.with(repair(C, &[B])))
        .unwrap();
    for (registry, expected, names) in [
        (
            unknown,
            DefinitionError::UnknownDependency {
                id: B.into(),
                dependency: "shop.gone".into(),
            },
            vec![B, "shop.gone"],
        ),
        (
            cycle,
            DefinitionError::DependencyCycle(vec![A.into(), C.into(), B.into(), A.into()]),
            vec![A, B, C],
        ),
    ] {
        let mut config = HostConfig::new(absent.clone());
        config.listen = "127.0.0.1:0".parse().unwrap();
        config.admin_listen = "127.0.0.1:0".parse().unwrap();
        config.migrate = true;
        match Host::start(config, registry).await {
            Err(HostError::Definition(e)) => {
                let text = e.to_string();
                assert_eq!(e, expected);
                for name in names {
                    assert!(text.contains(name), "{text}");
                }
            }
            Err(e) => panic!("expected a definition error, got {e}"),
            Ok(_) => panic!("a host started with {expected}"),
        }
    }
    assert_eq!(
        Registry::new().with(repair(A, &[A])).unwrap_err(),
        DefinitionError::DependencyCycle(vec![A.into(), A.into()])
    );
}

const EVENTS: &str = "events.fix";

/// The fleet's repair: every row of `events` gets `n = n + 1` once.
fn events_registry() -> Registry {
    Registry::new()
        .with(
            SqlRepair::new(EVENTS, "events")
                .key("id")
                .set("n = n + 1")
                .validate_where("n <> 1")
                .batch_size(50)
                .build()
                .expect("valid repair"),
        )
        .expect("valid registry")
}

/// A database name of this test run, `bft_` first so CI's cleanup finds it.
fn fleet_db_name(tag: &str, i: usize) -> String {
    format!(
        "bft_{tag}_{}_{}_{i}",
        std::process::id(),
        rand::random::<u32>()
    )
}

/// Create the database `name` with an `events` table of `ROWS` rows, and
/// keep no connection to it.
async fn create_fleet_db(name: &str) -> String {
    let mut server = AsyncPgConnection::establish(support::server_url())
        .await
        .unwrap();
    server
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let url = support::with_database(support::server_url(), name);
    let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
    conn.batch_execute(&table_sql("events")).await.unwrap();
    url
}

/// Create the database `name` as a copy of `template` (which nothing may
/// be connected to): its tables keep their OIDs, as tenants cloned from
/// one template do.
async fn copy_fleet_db(template: &str, name: &str) -> String {
    let mut server = AsyncPgConnection::establish(support::server_url())
        .await
        .unwrap();
    server
        .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {template}"))
        .await
        .unwrap();
    support::with_database(support::server_url(), name)
}

async fn drop_fleet_db(name: &str) {
    let mut server = AsyncPgConnection::establish(support::server_url())
        .await
        .unwrap();
    server
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await
        .unwrap();
}

async fn scalar_at(url: &str, sql: &str) -> i64 {
    let mut conn = AsyncPgConnection::establish(url).await.unwrap();
    support::scalar_on(&mut conn, sql).await
}

/// How many `applied` audit rows of `action` on the events backfill the
/// database at `url` holds that also match `condition` (SQL).
async fn applied_audits(url: &str, action: &str, condition: &str) -> i64 {
    scalar_at(
        url,
        &format!(
            "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{EVENTS}' \
             AND action = '{action}' AND outcome = 'applied' AND {condition}"
        ),
    )
    .await
}

/// Each database's runtime: automatic mode, one runner, a small pool, and
/// retries enough to keep a lock-held backfill running for a while.
fn fleet_config() -> FleetConfig {
    let mut host = HostConfig::new("postgres://unused");
    host.auto_backfills = true;
    host.pool_size = Some(3);
    host.engine = engine_config();
    host.engine.retry.max_attempts = 100;
    host.engine.retry.backoff_base = Duration::from_millis(50);
    host.engine.retry.backoff_max = Duration::from_millis(100);
    host.runtime.max_concurrent_runners = 1;
    host.runtime.poll_interval = Duration::from_millis(100);
    let mut config = FleetConfig::new(host);
    // The tests refresh by hand (`run_once`); the loop stays out of the way.
    config.refresh_interval = Duration::from_secs(600);
    config
}

/// [`fleet_config`] in manual mode, operated over HTTP with `TOKEN`.
fn operated_config() -> FleetConfig {
    let mut config = fleet_config();
    config.host.auto_backfills = false;
    config.host.admin_auth =
        backfill::admin::AuthConfig::from_sources(Some(TOKEN), None, false).unwrap();
    config
}

async fn drop_fleet_dbs(names: &[String]) {
    for name in names {
        drop_fleet_db(name).await;
    }
}

async fn wait_completed(fleet: &Fleet, name: &str) {
    let engine = fleet
        .engine(name)
        .unwrap()
        .unwrap_or_else(|| panic!("{name} runs"));
    let row = engine
        .wait_for(
            EVENTS,
            &[State::Completed, State::Failed, State::Blocked],
            Duration::from_secs(120),
        )
        .await
        .unwrap();
    assert_eq!(row.state, State::Completed, "{name}: {:?}", row.last_error);
}

/// FLT-1: one fleet over twenty databases on the local server, one repair
/// in automatic mode. One database's backfill is held mid-run by a row
/// lock, then that database is dropped: the next refresh reports it
/// unavailable with a reason, and the fleet is not ready, while each of
/// the other nineteen completes with every row repaired exactly once
/// (`n = n + 1` over every row, so a second application shows as 2).
/// Guards: the probe of a running database (without it the dropped one
/// stays available) and each database's own runtime (a shared one would
/// not repair the other databases' rows).
#[actix_rt::test]
async fn flt01_one_runtime_serves_twenty_databases_and_reports_a_dropped_one() {
    let _serial = SERIAL.lock().await;
    let names: Vec<String> = (0..20).map(|i| fleet_db_name("fleet", i)).collect();
    let mut databases = Vec::new();
    for (i, name) in names.iter().enumerate() {
        databases.push(Database::new(
            format!("t{i:02}"),
            create_fleet_db(name).await,
        ));
    }
    let victim = databases[7].clone();
    let mut lock = AsyncPgConnection::establish(&victim.url).await.unwrap();
    lock.batch_execute("BEGIN; SELECT * FROM events WHERE id = 1 FOR UPDATE")
        .await
        .unwrap();
    let fleet = Fleet::start(fleet_config(), databases.clone(), events_registry())
        .await
        .unwrap();
    assert_eq!(fleet.databases().len(), 20);
    assert!(fleet
        .databases()
        .iter()
        .all(|d| d.availability == Availability::Available));
    let mut wait = Deadline::new("the victim's backfill runs into the row lock");
    while scalar_at(
        &victim.url,
        &format!("SELECT attempts::bigint AS v FROM backfill WHERE id = '{EVENTS}'"),
    )
    .await
        == 0
    {
        wait.tick().await;
    }
    assert_eq!(
        scalar_at(
            &victim.url,
            &format!(
                "SELECT count(*) AS v FROM backfill WHERE id = '{EVENTS}' AND state = 'running'"
            )
        )
        .await,
        1,
        "the victim is mid-run when it is dropped"
    );
    drop(lock);
    drop_fleet_db(&names[7]).await;
    fleet.run_once().await;
    let status = fleet.database("t07").unwrap();
    assert_eq!(status.availability, Availability::Unavailable, "{status:?}");
    assert!(status.reason.is_some(), "{status:?}");
    assert!(!status.reason.unwrap().contains("postgres://"));

    for db in databases.iter().filter(|d| d.name != "t07") {
        wait_completed(&fleet, &db.name).await;
        assert_eq!(
            scalar_at(&db.url, "SELECT count(*) AS v FROM events WHERE n = 1").await,
            ROWS,
            "{}: every row once",
            db.name
        );
        assert_eq!(
            scalar_at(&db.url, "SELECT count(*) AS v FROM events WHERE n <> 1").await,
            0,
            "{}: no row twice",
            db.name
        );
    }
    fleet.run_once().await;
    let readiness = fleet.readiness(None).unwrap();
    assert!(!readiness.ready);
    let not_ready: Vec<&str> = readiness
        .not_ready
        .iter()
        .map(|s| s.name.as_str())
        .collect();
    assert_eq!(not_ready, ["t07"]);
    assert!(fleet.readiness(Some("t00")).unwrap().ready);
    assert!(matches!(
        fleet.readiness(Some("t99")),
        Err(FleetError::UnknownDatabase(name)) if name == "t99"
    ));
    fleet.stop().await;
    drop_fleet_dbs(&names).await;
}

/// A source the test changes while the fleet runs (a tenant directory).
#[derive(Clone, Default)]
struct Tenants(Arc<parking_lot::Mutex<Vec<Database>>>);

#[backfill::async_trait]
impl DatabaseSource for Tenants {
    async fn databases(&self) -> Result<Vec<Database>, backfill::host::AppError> {
        Ok(self.0.lock().clone())
    }
}

/// FLT-1: a listed database that does not exist at start is unavailable,
/// not a startup error, and joins at the first refresh after it is
/// created, then completes; a database added to the source at run time
/// joins and completes; one removed from the source is drained and no
/// longer listed. Guards: the retry of an unavailable database and the
/// source's re-listing in `run_once`.
#[actix_rt::test]
async fn flt01_databases_join_when_reachable_or_added_and_leave_when_removed() {
    let _serial = SERIAL.lock().await;
    let names: Vec<String> = (0..3).map(|i| fleet_db_name("tenant", i)).collect();
    let first = Database::new("first", create_fleet_db(&names[0]).await);
    let late = Database::new(
        "late",
        support::with_database(support::server_url(), &names[1]),
    );
    let tenants = Tenants::default();
    *tenants.0.lock() = vec![first.clone(), late.clone()];
    let fleet = Fleet::start(fleet_config(), tenants.clone(), events_registry())
        .await
        .unwrap();
    let status = fleet.database("late").unwrap();
    assert_eq!(status.availability, Availability::Unavailable);
    assert!(fleet.engine("late").unwrap().is_none());
    wait_completed(&fleet, "first").await;

    create_fleet_db(&names[1]).await;
    let added = Database::new("added", create_fleet_db(&names[2]).await);
    tenants.0.lock().push(added.clone());
    fleet.run_once().await;
    assert_eq!(
        fleet.database("late").unwrap().availability,
        Availability::Available
    );
    wait_completed(&fleet, "late").await;
    wait_completed(&fleet, "added").await;
    for db in [&late, &added] {
        assert_eq!(
            scalar_at(&db.url, "SELECT count(*) AS v FROM events WHERE n = 1").await,
            ROWS
        );
    }

    tenants.0.lock().retain(|d| d.name != "first");
    fleet.run_once().await;
    let listed: Vec<String> = fleet.databases().into_iter().map(|d| d.name).collect();
    assert_eq!(listed, ["added", "late"]);
    assert!(matches!(
        fleet.engine("first"),
        Err(FleetError::UnknownDatabase(_))
    ));
    fleet.run_once().await;
    assert!(fleet.readiness(None).unwrap().ready);
    fleet.stop().await;
    drop_fleet_dbs(&names).await;
}

/// A TCP listener that accepts connections and never answers (a stuck
/// proxy, a half-dead host), keeping each open; each accept is sent on
/// the channel.
async fn stuck_server() -> (String, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
            let _ = tx.send(());
        }
    });
    (format!("postgres://postgres@127.0.0.1:{port}/stuck"), rx)
}

/// FLT-1: one database whose server accepts connections and never
/// answers does not freeze the fleet. The fleet starts within its
/// connection bound with that database unavailable, naming why, while the
/// other completes; a refresh that is still waiting on it holds nothing
/// another refresh needs: meanwhile a second refresh drains it and joins
/// a new database. Guards: the connection attempt's bound (without it
/// the start never returns), the start of unavailable databases outside
/// the members lock (without it the second refresh waits for the first).
#[actix_rt::test]
async fn flt01_a_database_that_never_answers_freezes_nothing() {
    let _serial = SERIAL.lock().await;
    let names: Vec<String> = (0..2).map(|i| fleet_db_name("stuck", i)).collect();
    let first = Database::new("first", create_fleet_db(&names[0]).await);
    let (stuck_url, mut accepted) = stuck_server().await;
    let tenants = Tenants::default();
    *tenants.0.lock() = vec![first.clone(), Database::new("stuck", stuck_url)];
    // A start that hangs fails here rather than hanging the suite.
    let fleet = tokio::time::timeout(
        Duration::from_secs(90),
        Fleet::start(fleet_config(), tenants.clone(), events_registry()),
    )
    .await
    .expect("the fleet started despite a database that never answers")
    .unwrap();
    let stuck = fleet.database("stuck").unwrap();
    assert_eq!(stuck.availability, Availability::Unavailable);
    assert!(
        stuck
            .reason
            .as_deref()
            .is_some_and(|r| r.contains("did not answer")),
        "{stuck:?}"
    );
    wait_completed(&fleet, "first").await;
    while accepted.try_recv().is_ok() {}

    let added = Database::new("added", create_fleet_db(&names[1]).await);
    let first_refresh_done = std::sync::atomic::AtomicBool::new(false);
    let refresh = async {
        fleet.run_once().await;
        first_refresh_done.store(true, std::sync::atomic::Ordering::SeqCst);
    };
    let meanwhile = async {
        // The first refresh is connecting to the stuck database.
        accepted
            .recv()
            .await
            .expect("the refresh tries the stuck database");
        {
            let mut listed = tenants.0.lock();
            listed.retain(|d| d.name != "stuck");
            listed.push(added.clone());
        }
        fleet.run_once().await;
        assert!(
            !first_refresh_done.load(std::sync::atomic::Ordering::SeqCst),
            "the second refresh waited for the first"
        );
        let listed: Vec<String> = fleet.databases().into_iter().map(|d| d.name).collect();
        assert_eq!(listed, ["added", "first"]);
        assert_eq!(
            fleet.database("added").unwrap().availability,
            Availability::Available
        );
    };
    tokio::join!(refresh, meanwhile);
    wait_completed(&fleet, "added").await;
    fleet.stop().await;
    drop_fleet_dbs(&names).await;
}

/// Collects what a JSON log writes.
#[derive(Clone, Default)]
struct LogBuffer(Arc<parking_lot::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// FLT-1: in one log of many databases, each database's lines name it.
/// Two databases run one repair under the crate's JSON log format (the
/// one `backfill --log-format json` writes); every claim, batch and
/// completion event carries `database` naming the database it happened
/// in, and each database's events name only it, with spans filtered as
/// `RUST_LOG=warn` filters them. Guards: the member span around a
/// database's startup and its level (at `info` the filter drops it), and
/// the actors started inside it (a runner started bare logs without the
/// field).
#[actix_rt::test]
async fn flt01_every_member_log_line_names_its_database() {
    let _serial = SERIAL.lock().await;
    let buffer = LogBuffer::default();
    let writer = buffer.clone();
    use tracing_subscriber::layer::SubscriberExt;
    let subscriber = tracing_subscriber::fmt()
        .fmt_fields(backfill::logging::JsonLines)
        .event_format(backfill::logging::JsonLines)
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(move || writer.clone())
        .finish()
        // Spans as a filter set to `warn` keeps them: the member's name
        // must reach its warnings whatever the level an operator sets.
        .with(tracing_subscriber::filter::filter_fn(|meta| {
            meta.is_event() || *meta.level() <= tracing::Level::WARN
        }));
    // Thread-local: the fleet's actors run on this test's actix thread.
    let _logging = tracing::subscriber::set_default(subscriber);
    let names: Vec<String> = (0..2).map(|i| fleet_db_name("logs", i)).collect();
    let mut databases = Vec::new();
    for (i, name) in names.iter().enumerate() {
        databases.push(Database::new(format!("l{i}"), create_fleet_db(name).await));
    }
    let fleet = Fleet::start(fleet_config(), databases, events_registry())
        .await
        .unwrap();
    wait_completed(&fleet, "l0").await;
    wait_completed(&fleet, "l1").await;
    fleet.stop().await;
    drop_fleet_dbs(&names).await;

    let text = String::from_utf8(buffer.0.lock().clone()).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("every line is one JSON object"))
        .collect();
    for member in ["l0", "l1"] {
        for event in ["registered", "claim_acquired", "batch_committed"] {
            let named = lines
                .iter()
                .filter(|l| l["event"] == event && l["database"] == member)
                .count();
            assert!(named > 0, "{member}: no {event} names it:\n{text}");
        }
    }
    let unnamed: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| {
            ["claim_acquired", "batch_committed", "completed"]
                .contains(&l["event"].as_str().unwrap_or_default())
                && l.get("database").is_none()
        })
        .collect();
    assert!(unnamed.is_empty(), "lines without a database: {unnamed:?}");
}

/// Connections open to the database `name`, read from the server's own
/// database so the reading adds none.
async fn connections_to(name: &str) -> i64 {
    let mut server = AsyncPgConnection::establish(support::server_url())
        .await
        .unwrap();
    support::scalar_on(
        &mut server,
        &format!("SELECT count(*) AS v FROM pg_stat_activity WHERE datname = '{name}'"),
    )
    .await
}

/// FLT-1 idle cost: after a burst of work, an idle database's pool lets
/// its idle connections go and keeps those its polls reuse, beside the
/// wake-up listener. The test fills the member's pool of four (every
/// connection checked out at once), returns them, and waits for the
/// database's connections to fall to three at most while the runtime
/// keeps polling (one connection its polls keep warm, a second for two
/// polls that overlap, and the listener). Guard: the pool's idle timeout
/// (bb8's default of ten minutes keeps all five).
#[actix_rt::test]
async fn flt01_an_idle_databases_pool_shrinks_to_the_connections_its_polls_use() {
    let _serial = SERIAL.lock().await;
    let name = fleet_db_name("idle", 0);
    let db = Database::new("idle", create_fleet_db(&name).await);
    let mut config = fleet_config();
    config.host.pool_size = Some(4);
    // The listener stays, as the count below expects.
    config.host.idle_listener_close = None;
    config.host.pool_idle_timeout = Duration::from_secs(1);
    let fleet = Fleet::start(config, vec![db], events_registry())
        .await
        .unwrap();
    wait_completed(&fleet, "idle").await;
    let engine = fleet.engine("idle").unwrap().unwrap();
    {
        let pool = engine.pool();
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(pool.get().await.unwrap());
        }
        assert!(
            connections_to(&name).await >= 5,
            "four pooled and the listener"
        );
    }
    let mut wait = Deadline::new("the idle pool shrinks to the connections its polls use");
    while connections_to(&name).await > 3 {
        wait.tick().await;
    }
    fleet.stop().await;
    drop_fleet_db(&name).await;
}

/// FLT-1: a fleet's database holds its wake-up listener only while it
/// works. Its repair's run window is closed, so a started backfill stays
/// claimed without committing: LISTEN opens once it is claimed, and
/// closes (`idle_listener_close`, 1 s here) after a pause released the
/// claim; a resume is claimed again by the poll and LISTEN opens again.
/// Guard: the idle close (without it the LISTEN session stays).
#[actix_rt::test]
async fn flt01_an_idle_databases_listener_closes_until_it_has_work() {
    use chrono::Timelike;
    let _serial = SERIAL.lock().await;
    let name = fleet_db_name("listen", 0);
    let d0 = Database::new("d0", create_fleet_db(&name).await);
    let mut config = fleet_config();
    config.host.auto_backfills = false;
    config.host.idle_listener_close = Some(Duration::from_secs(1));
    let hour = u64::from(chrono::Utc::now().hour());
    let registry = Registry::new()
        .with(
            SqlRepair::new(EVENTS, "events")
                .key("id")
                .set("n = n + 1")
                .validate_where("n <> 1")
                .run_window((hour + 2) % 24, (hour + 3) % 24)
                .build()
                .expect("valid repair"),
        )
        .unwrap();
    let fleet = Fleet::start(config, vec![d0.clone()], registry)
        .await
        .unwrap();
    let listening = format!(
        "SELECT count(*) AS v FROM pg_stat_activity WHERE datname = '{name}' \
         AND query LIKE 'LISTEN%'"
    );
    let engine = fleet.engine("d0").unwrap().expect("d0 runs");
    engine.start(EVENTS).await.unwrap();
    for round in 0..2 {
        let mut wait = Deadline::new("a LISTEN session while d0 holds a claim");
        while scalar_at(&d0.url, &listening).await == 0 {
            wait.tick().await;
        }
        engine.pause(EVENTS).await.unwrap();
        let mut wait = Deadline::new("no LISTEN session once d0 holds none");
        while scalar_at(&d0.url, &listening).await > 0 {
            wait.tick().await;
        }
        if round == 0 {
            engine.act(EVENTS, backfill::Action::Resume).await.unwrap();
        }
    }
    fleet.stop().await;
    drop_fleet_db(&name).await;
}

/// A fleet of one database `d0` (the `i`th of its kind) whose required
/// backfill completed, refreshed once and read ready: its name, its
/// entry and the fleet.
async fn read_ready(i: usize) -> (String, Database, Fleet) {
    let name = fleet_db_name("settled", i);
    let d0 = Database::new("d0", create_fleet_db(&name).await);
    let fleet = Fleet::start(fleet_config(), vec![d0.clone()], events_registry())
        .await
        .unwrap();
    wait_completed(&fleet, "d0").await;
    fleet.run_once().await;
    assert_eq!(fleet.database("d0").unwrap().ready, Some(true));
    (name, d0, fleet)
}

/// FLT-1 idle cost: a ready database's refresh rests on its answered
/// claim polls. Its required backfill completes (which never changes
/// again, REG-5), and a refresh reads it ready. Then its completed row is
/// taken away behind the fleet's back (triggers off, as a restore to an
/// earlier state would). While PostgreSQL keeps answering its polls,
/// eleven refreshes reuse the reading (still ready: a minute at the
/// default 5 s) and the twelfth reads again and sees it wait. Guard: the
/// reuse (without it the first refresh after the change reads it not
/// ready) and its bound (without it the twelfth still reads ready).
#[actix_rt::test]
async fn flt01_a_ready_databases_refresh_reuses_its_reading_while_its_polls_answer() {
    let _serial = SERIAL.lock().await;
    let (name, d0, fleet) = read_ready(0).await;
    let engine = fleet.engine("d0").unwrap().expect("d0 runs");
    let mut conn = AsyncPgConnection::establish(&d0.url).await.unwrap();
    conn.batch_execute(&format!(
        "SET session_replication_role = replica; \
         DELETE FROM backfill WHERE id = '{EVENTS}'; \
         RESET session_replication_role"
    ))
    .await
    .unwrap();
    for refresh in 1..=12 {
        let before = engine.polls_answered();
        let mut wait = Deadline::new("a claim poll of d0 answered");
        while engine.polls_answered() == before {
            wait.tick().await;
        }
        fleet.run_once().await;
        let ready = fleet.database("d0").unwrap().ready;
        if refresh <= 11 {
            assert_eq!(ready, Some(true), "refresh {refresh} reuses d0's reading");
        } else {
            assert_eq!(ready, Some(false), "refresh {refresh} reads d0 again");
        }
    }
    fleet.stop().await;
    drop_fleet_db(&name).await;
}

/// FLT-1: a ready database whose claim polls stop answering is read
/// again at once. Its backfill completes and a refresh reads it ready;
/// then it is dropped, and the second refresh after reports it
/// unavailable at the latest (the first may still count a poll answered
/// before the drop). Guard: the answered polls as the condition of the
/// reuse (without it, the dropped database reads ready for eleven
/// refreshes).
#[actix_rt::test]
async fn flt01_a_ready_database_that_stops_answering_is_read_again_at_once() {
    let _serial = SERIAL.lock().await;
    let (name, _d0, fleet) = read_ready(1).await;
    drop_fleet_db(&name).await;
    fleet.run_once().await;
    fleet.run_once().await;
    let status = fleet.database("d0").unwrap();
    assert_eq!(status.availability, Availability::Unavailable, "{status:?}");
    fleet.stop().await;
}

/// FLT-1 idle cost, PAR-6: an idle database's presence rides on its
/// claim polls, so a poll is the one query it answers. A trigger logs
/// which statement wrote each presence (the claim poll's read of what is
/// claimable, or the lease renewer's round); once the backfill completed
/// and polls wrote the presence twice (so no round of the busy time is
/// still in flight), the next four writes all come from polls, never
/// more than a TTL apart. With a lease TTL of 6 s the renewer's round is
/// 2 s and a poll writes when the presence is a second old, so the four
/// span at least one round, with a second of slack for a poll held up
/// by a loaded machine. Guards: the poll's heartbeat (without it no poll
/// ever writes) and the renewer's skip (without it its rounds write).
#[actix_rt::test]
async fn flt01_an_idle_databases_claim_polls_carry_its_presence() {
    let _serial = SERIAL.lock().await;
    let name = fleet_db_name("presence", 0);
    let d0 = Database::new("d0", create_fleet_db(&name).await);
    let mut config = fleet_config();
    config.host.engine.lease_ttl = Duration::from_secs(6);
    let fleet = Fleet::start(config, vec![d0.clone()], events_registry())
        .await
        .unwrap();
    wait_completed(&fleet, "d0").await;
    let mut conn = AsyncPgConnection::establish(&d0.url).await.unwrap();
    conn.batch_execute(support::PRESENCE_LOG).await.unwrap();
    let mut wait = Deadline::new("two claim polls of the idle d0 record its presence");
    while support::scalar_on(
        &mut conn,
        "SELECT count(*) AS v FROM presence_log WHERE by = 'poll'",
    )
    .await
        < 2
    {
        wait.tick().await;
    }
    conn.batch_execute("DELETE FROM presence_log")
        .await
        .unwrap();
    let mut wait = Deadline::new("four presence writes of the idle d0");
    while support::scalar_on(&mut conn, "SELECT count(*) AS v FROM presence_log").await < 4 {
        wait.tick().await;
    }
    let by = support::scalar_on(
        &mut conn,
        "SELECT count(*) AS v FROM presence_log WHERE by <> 'poll'",
    )
    .await;
    assert_eq!(
        by, 0,
        "every presence of the idle database came with a poll"
    );
    let gap = support::scalar_on(
        &mut conn,
        "SELECT coalesce(max(extract(epoch FROM g) * 1000), 0)::bigint AS v FROM \
             (SELECT at - lag(at) OVER (ORDER BY at) AS g FROM presence_log) AS x",
    )
    .await;
    assert!(
        gap < 6_000,
        "presence writes {gap} ms apart outlive the TTL"
    );
    drop(conn);
    fleet.stop().await;
    drop_fleet_db(&name).await;
}

/// FLT-1 bad input: a malformed entry and a duplicated name are startup
/// errors naming the entry, before any database is touched (the URLs
/// name databases that do not exist).
#[actix_rt::test]
async fn flt01_a_malformed_or_duplicated_entry_is_a_startup_error_naming_it() {
    let _serial = SERIAL.lock().await;
    let absent = support::with_database(support::server_url(), "bft_absent_fleet");
    let cases = [
        (
            vec![
                Database::new("ok", absent.clone()),
                Database::new("ok", absent.clone()),
            ],
            "database \"ok\" is listed twice",
        ),
        (
            vec![
                Database::new("ok", absent.clone()),
                Database::new("Not OK", absent.clone()),
            ],
            "database entry #1: the name must be 1 to 63 characters of [a-z0-9._-]",
        ),
        (
            vec![Database::new("ok", "mysql://elsewhere/db")],
            "database entry ok: the URL must start with postgres:// or postgresql://",
        ),
    ];
    for (databases, expected) in cases {
        match Fleet::start(fleet_config(), databases, events_registry()).await {
            Err(e) => assert_eq!(e.to_string(), expected),
            Ok(_) => panic!("a fleet started; expected {expected}"),
        }
    }
}

/// FLT-5: throttling stays local. In database `held`, a session holds a
/// SHARE lock on `events` and another queues behind it (lock waiters on
/// the repair's own table; reads such as the bound's capture still pass);
/// with a lock-waiter limit of 0, `held`'s runner holds its claim as
/// `lock_waiters` and changes nothing, while database `free`, served by
/// the same fleet, completes. Once the lock is released, `held`
/// completes too. `free` is a copy of `held` (tenants cloned from one
/// template), so `events` has the same OID in both and only the
/// database of a lock tells them apart. Guards: each database's own
/// health monitor (one monitor for the fleet would hold both, or
/// neither), and the lock-waiter count's own database (without it
/// `held`'s waiters hold `free` too).
#[actix_rt::test]
async fn flt05_one_databases_lock_waiters_hold_only_its_runners() {
    let _serial = SERIAL.lock().await;
    let names: Vec<String> = (0..2).map(|i| fleet_db_name("local", i)).collect();
    let held = Database::new("held", create_fleet_db(&names[0]).await);
    let free = Database::new("free", copy_fleet_db(&names[0], &names[1]).await);
    let oid = "SELECT 'events'::regclass::oid::bigint AS v";
    assert_eq!(
        scalar_at(&held.url, oid).await,
        scalar_at(&free.url, oid).await,
        "one OID for events in both"
    );
    let mut holder = AsyncPgConnection::establish(&held.url).await.unwrap();
    holder
        .batch_execute("BEGIN; LOCK TABLE events IN SHARE MODE")
        .await
        .unwrap();
    let url = held.url.clone();
    let waiter = actix_rt::spawn(async move {
        let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
        conn.batch_execute("BEGIN; LOCK TABLE events IN SHARE ROW EXCLUSIVE MODE; COMMIT")
            .await
            .unwrap();
    });
    let mut wait = Deadline::new("a session queues for a lock on events");
    while scalar_at(
        &held.url,
        "SELECT count(*) AS v FROM pg_locks WHERE NOT granted AND relation = 'events'::regclass",
    )
    .await
        == 0
    {
        wait.tick().await;
    }
    let mut config = fleet_config();
    config.host.health.thresholds.max_lock_waiters = Some(0);
    config.host.health.interval = Duration::from_millis(50);
    let fleet = Fleet::start(config, vec![held.clone(), free.clone()], events_registry())
        .await
        .unwrap();
    wait_completed(&fleet, "free").await;
    let mut wait = Deadline::new("held's runner records the lock waiters");
    while scalar_at(
        &held.url,
        &format!(
            "SELECT count(*) AS v FROM backfill WHERE id = '{EVENTS}' AND state = 'running' \
             AND throttle->>'signal' = 'lock_waiters'"
        ),
    )
    .await
        == 0
    {
        wait.tick().await;
    }
    assert_eq!(
        scalar_at(&held.url, "SELECT count(*) AS v FROM events WHERE n <> 0").await,
        0,
        "nothing committed in the throttled database"
    );

    holder.batch_execute("ROLLBACK").await.unwrap();
    waiter.await.unwrap();
    wait_completed(&fleet, "held").await;
    assert_eq!(
        scalar_at(&held.url, "SELECT count(*) AS v FROM events WHERE n = 1").await,
        ROWS
    );
    fleet.stop().await;
    drop_fleet_dbs(&names).await;
}

/// `method path` against a fleet's listener with the operator's token
/// (and a fresh idempotency key unless `key` names one); status and JSON.
async fn fleet_call(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    key: Option<&str>,
) -> (u16, serde_json::Value) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let mut headers = Vec::new();
    if let Some(auth) = &auth {
        headers.push(("Authorization", auth.as_str()));
    }
    if let Some(key) = key {
        headers.push(("Idempotency-Key", key));
    }
    let response = request(addr, method, path, &headers, None).await;
    let body = serde_json::from_str(&response.text)
        .unwrap_or_else(|_| panic!("{method} {path}: not JSON: {}", response.text));
    (response.status, body)
}

/// FLT-6 through the fleet's HTTP listener, over databases `d0` and `d1`
/// and a database `down` that does not exist. The repair's run window is
/// closed, so started backfills stay `running`. A fleet-wide start and
/// pause answer per database (`down`: 503, reported, not skipped), each
/// database records its own audit row, and the same request again
/// replays without a second one. The overview counts databases and
/// backfills by state; the list filters by database and names `down` as
/// unavailable; an action limited to one database reaches only it;
/// `/readyz` gates on the fleet (closed by `down`) or on one database;
/// `/metrics` reports each database's availability; a rollout cap is set
/// over HTTP, and a cap of 0, a body that is not JSON or a missing token
/// is refused.
/// Bad input: no token 401, an unknown database 404, an unknown action
/// 400, each with a JSON body naming the problem. Guards: the per-database
/// fan-out of actions (without it a database keeps running), the report
/// of unavailable databases, and the database filter.
#[actix_rt::test]
async fn flt06_the_fleet_view_aggregates_filters_and_pauses_every_database() {
    use chrono::Timelike;
    let _serial = SERIAL.lock().await;
    let names: Vec<String> = (0..2).map(|i| fleet_db_name("view", i)).collect();
    let d0 = Database::new("d0", create_fleet_db(&names[0]).await);
    let d1 = Database::new("d1", create_fleet_db(&names[1]).await);
    let down = Database::new(
        "down",
        support::with_database(support::server_url(), "bft_absent_view"),
    );
    let hour = u64::from(chrono::Utc::now().hour());
    let registry = Registry::new()
        .with(
            SqlRepair::new(EVENTS, "events")
                .key("id")
                .set("n = n + 1")
                .validate_where("n <> 1")
                .run_window((hour + 2) % 24, (hour + 3) % 24)
                .build()
                .expect("valid repair"),
        )
        .unwrap();
    let config = operated_config();
    let mut fleet = Fleet::start(config, vec![d0.clone(), d1.clone(), down], registry)
        .await
        .unwrap();
    let addr = fleet.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let token = Some(TOKEN);

    let (status, body) = fleet_call(addr, "GET", "/admin/fleet", None, None).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (401, Some("unauthorized"))
    );

    let start = format!("/admin/fleet/backfills/{EVENTS}/start");
    let (status, body) = fleet_call(addr, "POST", &start, token, Some("start-1")).await;
    assert_eq!(status, 200, "{body}");
    let statuses = |body: &serde_json::Value| -> Vec<(String, u64)> {
        body["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["database"].as_str().unwrap().to_string(),
                    r["status"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        statuses(&body),
        [("d0".into(), 200), ("d1".into(), 200), ("down".into(), 503)]
    );
    let pause = format!("/admin/fleet/backfills/{EVENTS}/pause");
    for _ in 0..2 {
        let (status, body) = fleet_call(addr, "POST", &pause, token, Some("pause-1")).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            statuses(&body),
            [("d0".into(), 200), ("d1".into(), 200), ("down".into(), 503)]
        );
        assert_eq!(
            body["results"][0]["body"]["backfill"]["state"], "paused",
            "{body}"
        );
        assert_eq!(body["results"][2]["body"]["error"], "unavailable", "{body}");
    }
    for db in [&d0, &d1] {
        assert_eq!(
            applied_audits(&db.url, "pause", "true").await,
            1,
            "{}: one audit row of its own",
            db.name
        );
        assert_eq!(
            scalar_at(
                &db.url,
                &format!(
                    "SELECT count(*) AS v FROM backfill WHERE id = '{EVENTS}' AND state = 'paused'"
                )
            )
            .await,
            1
        );
    }

    let (status, overview) = fleet_call(addr, "GET", "/admin/fleet", token, None).await;
    assert_eq!(status, 200, "{overview}");
    let totals = &overview["totals"];
    assert_eq!(
        (
            &totals["databases"],
            &totals["available"],
            &totals["unavailable"]
        ),
        (
            &serde_json::json!(3),
            &serde_json::json!(2),
            &serde_json::json!(1)
        ),
        "{overview}"
    );
    assert_eq!(overview["databases"][0]["name"], "d0");
    assert_eq!(overview["databases"][0]["backfills"]["paused"], 1);
    assert_eq!(overview["databases"][2]["availability"], "unavailable");
    assert!(overview["databases"][2]["reason"].is_string(), "{overview}");
    assert!(!overview.to_string().contains("postgres://"));

    let (status, list) = fleet_call(addr, "GET", "/admin/fleet/backfills", token, None).await;
    assert_eq!(status, 200);
    let listed: Vec<(&str, &str)> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| (i["database"].as_str().unwrap(), i["id"].as_str().unwrap()))
        .collect();
    assert_eq!(listed, [("d0", EVENTS), ("d1", EVENTS)]);
    assert_eq!(list["unavailable"][0]["name"], "down");
    let (_, one) = fleet_call(
        addr,
        "GET",
        "/admin/fleet/backfills?database=d1",
        token,
        None,
    )
    .await;
    assert_eq!(one["items"].as_array().unwrap().len(), 1);
    assert_eq!(one["items"][0]["database"], "d1");

    let resume = format!("/admin/fleet/backfills/{EVENTS}/resume?database=d0");
    let (status, body) = fleet_call(addr, "POST", &resume, token, Some("resume-1")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(statuses(&body), [("d0".into(), 200)]);
    assert_eq!(
        scalar_at(
            &d1.url,
            &format!(
                "SELECT count(*) AS v FROM backfill WHERE id = '{EVENTS}' AND state = 'paused'"
            )
        )
        .await,
        1,
        "d1 is left alone"
    );

    // A settings change fans out like an action: each database applies
    // and audits it, the one that is down answers 503, and a refused
    // value is that database's own 422 naming the field.
    let settings_path = format!("/admin/fleet/backfills/{EVENTS}/settings");
    let auth = format!("Bearer {TOKEN}");
    let patch_headers = |key: &'static str| {
        [
            ("Authorization", auth.clone()),
            ("Content-Type", "application/merge-patch+json".to_string()),
            ("Idempotency-Key", key.to_string()),
        ]
    };
    let owned = patch_headers("settings-1");
    let headers_ref: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let patched = request(
        addr,
        "PATCH",
        &settings_path,
        &headers_ref,
        Some(r#"{"batch_size": 7}"#),
    )
    .await;
    assert_eq!(patched.status, 200, "{}", patched.text);
    let body: serde_json::Value = serde_json::from_str(&patched.text).unwrap();
    assert_eq!(
        statuses(&body),
        [("d0".into(), 200), ("d1".into(), 200), ("down".into(), 503)],
        "{body}"
    );
    assert_eq!(
        body["results"][0]["body"]["settings"]["batch_size"], 7,
        "{body}"
    );
    for db in [&d0, &d1] {
        assert_eq!(
            applied_audits(&db.url, "settings", "true").await,
            1,
            "{}: the change in its own audit log",
            db.name
        );
    }
    let owned = patch_headers("settings-2");
    let headers_ref: Vec<(&str, &str)> = owned.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let refused = request(
        addr,
        "PATCH",
        &format!("{settings_path}?database=d1"),
        &headers_ref,
        Some(r#"{"batch_size": 0}"#),
    )
    .await;
    assert_eq!(refused.status, 200, "{}", refused.text);
    let body: serde_json::Value = serde_json::from_str(&refused.text).unwrap();
    assert_eq!(statuses(&body), [("d1".into(), 422)], "{body}");
    assert_eq!(body["results"][0]["body"]["field"], "batch_size", "{body}");
    let unknown = request(
        addr,
        "PATCH",
        &format!("{settings_path}?database=nope"),
        &headers_ref,
        Some(r#"{"batch_size": 8}"#),
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.text);

    let auth = format!("Bearer {TOKEN}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    let mut with_reason = headers.to_vec();
    with_reason.push(("Backfill-Reason", "one%20tenant%20first"));
    let put = request(
        addr,
        "PUT",
        &format!("/admin/fleet/rollout/{EVENTS}"),
        &with_reason,
        Some(r#"{"max_databases": 1}"#),
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text);
    let body: serde_json::Value = serde_json::from_str(&put.text).unwrap();
    assert_eq!(
        body,
        serde_json::json!({"id": EVENTS, "max_databases": 1,
            "audited": ["d0", "d1"], "not_audited": ["down"]})
    );
    for db in [&d0, &d1] {
        assert_eq!(
            applied_audits(
                &db.url,
                "rollout",
                "detail = 'max_databases=1' AND reason = 'one tenant first'"
            )
            .await,
            1,
            "{}: the rollout cap in its own audit log",
            db.name
        );
    }
    let too_long = "a".repeat(2001);
    let mut bad_reason = headers.to_vec();
    bad_reason.push(("Backfill-Reason", too_long.as_str()));
    let refused = request(
        addr,
        "PUT",
        &format!("/admin/fleet/rollout/{EVENTS}"),
        &bad_reason,
        Some(r#"{"max_databases": 3}"#),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.text);
    assert!(refused.text.contains("Backfill-Reason"), "{}", refused.text);
    assert_eq!(
        scalar_at(
            &d0.url,
            "SELECT count(*) AS v FROM backfill_audit WHERE detail = 'max_databases=3'"
        )
        .await,
        0,
        "a refused change records nothing"
    );
    for (body, expected) in [(r#"{"max_databases": 0}"#, 400), ("not json", 400)] {
        let refused = request(
            addr,
            "PUT",
            &format!("/admin/fleet/rollout/{EVENTS}"),
            &headers,
            Some(body),
        )
        .await;
        assert_eq!(refused.status, expected, "{body}: {}", refused.text);
        assert!(refused.text.contains("\"bad_request\""), "{}", refused.text);
    }
    let unauthorized = request(
        addr,
        "PUT",
        &format!("/admin/fleet/rollout/{EVENTS}"),
        &[("Content-Type", "application/json")],
        Some(r#"{"max_databases": 2}"#),
    )
    .await;
    assert_eq!(unauthorized.status, 401);

    let metrics = request(addr, "GET", "/metrics", &[], None).await;
    assert_eq!(metrics.status, 200);
    // The fleet's exposition for `.ci/api-check`, which checks that the
    // shipped alert rules name only metrics and labels that exist.
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fleet-metrics.txt");
    std::fs::write(&out, &metrics.text).expect("write fleet-metrics.txt");
    for line in [
        "backfill_fleet_database_available{database=\"d0\"} 1",
        "backfill_fleet_database_available{database=\"down\"} 0",
        "backfill_fleet_databases{availability=\"unavailable\"} 1",
    ] {
        assert!(metrics.text.contains(line), "{line} in {}", metrics.text);
    }
    // OBS-3: d0's resumed backfill runs (outside its window, throttled by
    // it): its progress and throttle are exported per database, for the
    // per-backfill stall alert; paused d1's is not.
    let running: Vec<&str> = metrics
        .text
        .lines()
        .filter(|l| l.starts_with("backfill_running_"))
        .collect();
    let d0 = |family: &str| {
        running.iter().any(|l| {
            l.starts_with(family)
                && l.contains("database=\"d0\"")
                && l.contains(&format!("backfill=\"{EVENTS}\""))
        })
    };
    assert!(
        d0("backfill_running_rows_done{") && d0("backfill_running_throttled{"),
        "{running:?}"
    );
    assert!(
        !running.iter().any(|l| l.contains("database=\"d1\"")),
        "{running:?}"
    );
    let (status, _) = fleet_call(addr, "GET", "/readyz", None, None).await;
    assert_eq!(status, 503);
    let (status, _) = fleet_call(addr, "GET", "/readyz?database=d0", None, None).await;
    assert_eq!(status, 200);
    for (method, path, expected, code) in [
        ("GET", "/readyz?database=nope", 404, "unknown_database"),
        (
            "GET",
            "/admin/fleet/backfills?database=nope",
            404,
            "unknown_database",
        ),
        (
            "POST",
            "/admin/fleet/backfills/events.fix/pause?database=nope",
            404,
            "unknown_database",
        ),
        (
            "POST",
            "/admin/fleet/backfills/events.fix/explode",
            400,
            "bad_request",
        ),
    ] {
        let (status, body) = fleet_call(addr, method, path, token, Some("bad-1")).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (expected, Some(code)),
            "{path}: {body}"
        );
        assert!(body["message"].is_string(), "{body}");
    }
    fleet.stop().await;
    drop_fleet_dbs(&names).await;
}

/// FLT-6, API-1: the fleet listener serves its own OpenAPI 3 document,
/// generated from its handlers, listing every fleet route with its
/// methods and error bodies and nothing else, and the live overview's
/// fields are the documented ones. The document is written to
/// `target/tmp/fleet-openapi.json` for `.ci/run`'s validator and the
/// generated reference. Guards: a fleet route left out of the document,
/// or a field of the overview the document does not name.
#[actix_rt::test]
async fn flt06_the_fleet_listener_serves_an_openapi_document_of_its_routes() {
    let _serial = SERIAL.lock().await;
    let name = fleet_db_name("doc", 0);
    let d0 = Database::new("d0", create_fleet_db(&name).await);
    let config = operated_config();
    let mut fleet = Fleet::start(config, vec![d0], events_registry())
        .await
        .unwrap();
    let addr = fleet.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let response = request(addr, "GET", "/openapi.json", &[], None).await;
    assert_eq!(response.status, 200);
    let doc: serde_json::Value = serde_json::from_str(&response.text).unwrap();
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().expect("paths");
    let expected = [
        ("/admin/fleet", "get"),
        ("/admin/fleet/me", "get"),
        ("/admin/fleet/backfills", "get"),
        ("/admin/fleet/backfills/{id}/{action}", "post"),
        ("/admin/fleet/rollout/{id}", "put"),
        ("/admin/fleet/backfills/{id}/settings", "patch"),
        ("/readyz", "get"),
        ("/livez", "get"),
        ("/openapi.json", "get"),
    ];
    for (path, method) in expected {
        let op = &paths.get(path).unwrap_or_else(|| panic!("missing {path}"))[method];
        assert!(op.is_object(), "missing {method} {path}");
        if path.starts_with("/admin") {
            // Any known token may ask who it is.
            let statuses: &[&str] = if path == "/admin/fleet/me" {
                &["200", "401"]
            } else {
                &["200", "401", "403"]
            };
            for status in statuses {
                assert!(
                    op["responses"][status].is_object(),
                    "{method} {path} lacks {status}"
                );
            }
        }
        if path.contains("{id}") || path == "/admin/fleet/backfills" || path == "/readyz" {
            assert!(
                op["responses"]["400"].is_object(),
                "{method} {path} lacks 400"
            );
        }
    }
    assert_eq!(
        paths.len(),
        expected.len(),
        "no undocumented routes: {paths:?}"
    );
    let schemas = &doc["components"]["schemas"];
    let (status, overview) = fleet_call(addr, "GET", "/admin/fleet", Some(TOKEN), None).await;
    assert_eq!(status, 200, "{overview}");
    for (schema, live) in [
        ("FleetOverview", &overview),
        ("FleetTotals", &overview["totals"]),
        ("StateCounts", &overview["databases"][0]["backfills"]),
        ("DatabaseStatus", &overview["databases"][0]),
    ] {
        let documented = schemas[schema]["properties"]
            .as_object()
            .unwrap_or_else(|| panic!("{schema} has no properties"));
        let live = live
            .as_object()
            .unwrap_or_else(|| panic!("{schema}: {live}"));
        for field in documented.keys() {
            assert!(
                live.contains_key(field),
                "{schema}.{field} documented, not served"
            );
        }
        if schema != "DatabaseStatus" {
            for field in live.keys() {
                assert!(
                    documented.contains_key(field),
                    "{schema}.{field} served, not documented"
                );
            }
        }
    }
    let out = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("fleet-openapi.json");
    std::fs::write(&out, &response.text).expect("write fleet-openapi.json");
    fleet.stop().await;
    drop_fleet_db(&name).await;
}

/// FLT-2: a rollout cap set over the fleet's admin API outlives a
/// restart. Every database keeps it (with its audit row, in one
/// transaction), and a fleet started again over them holds the repair to
/// it rather than to its configured cap; a lifted cap stays lifted.
/// Guard: the stored caps taken as each database joins (without them the
/// restarted fleet is back at its configuration).
#[actix_rt::test]
async fn flt02_a_rollout_cap_set_over_http_holds_after_a_restart() {
    let _serial = SERIAL.lock().await;
    let names: Vec<String> = (0..2).map(|i| fleet_db_name("keep", i)).collect();
    let databases = vec![
        Database::new("d0", create_fleet_db(&names[0]).await),
        Database::new("d1", create_fleet_db(&names[1]).await),
    ];
    let config = || {
        let mut config = operated_config();
        config.rollout.insert(EVENTS.into(), 2);
        config
    };
    let auth = format!("Bearer {TOKEN}");
    let headers = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    let stored =
        format!("SELECT count(*) AS v FROM backfill_rollout WHERE repair_id = '{EVENTS}' AND CAP");
    for (body, cap, condition) in [
        (r#"{"max_databases": 1}"#, Some(1), "max_databases = 1"),
        (r#"{"max_databases": null}"#, None, "max_databases IS NULL"),
    ] {
        let mut fleet = Fleet::start(config(), databases.clone(), events_registry())
            .await
            .unwrap();
        let addr = fleet.listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let put = request(
            addr,
            "PUT",
            &format!("/admin/fleet/rollout/{EVENTS}"),
            &headers,
            Some(body),
        )
        .await;
        assert_eq!(put.status, 200, "{}", put.text);
        assert!(
            put.text.contains(r#""audited":["d0","d1"]"#),
            "{}",
            put.text
        );
        for db in &databases {
            assert_eq!(
                scalar_at(&db.url, &stored.replace("CAP", condition)).await,
                1,
                "{}: the cap is kept ({condition})",
                db.name
            );
        }
        assert_eq!(fleet.rollout(EVENTS), cap);
        fleet.stop().await;

        let fleet = Fleet::start(config(), databases.clone(), events_registry())
            .await
            .unwrap();
        assert_eq!(
            fleet.rollout(EVENTS),
            cap,
            "after a restart the stored cap holds, not the configured 2"
        );
        fleet.stop().await;
    }
    drop_fleet_dbs(&names).await;
}

/// FLT-2: a rollout cap set through one process reaches another process
/// of the same fleet while both run. Process `a` sets the cap over its
/// admin API; process `b`, started before over the same database, still
/// has none, and takes it at its twelfth refresh (about a minute at the
/// default 5 s), which reads the caps every database keeps. Guard: the
/// paced reading of the stored caps (without it `b` has no cap until it
/// restarts).
#[actix_rt::test]
async fn flt02_a_rollout_cap_set_through_one_process_reaches_another_running() {
    let _serial = SERIAL.lock().await;
    let name = fleet_db_name("reach", 0);
    let databases = vec![Database::new("d0", create_fleet_db(&name).await)];
    let mut a = Fleet::start(operated_config(), databases.clone(), events_registry())
        .await
        .unwrap();
    let mut config = operated_config();
    config.host.runtime.worker_id = "b".into();
    let b = Fleet::start(config, databases, events_registry())
        .await
        .unwrap();
    let addr = a.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let auth = format!("Bearer {TOKEN}");
    let put = request(
        addr,
        "PUT",
        &format!("/admin/fleet/rollout/{EVENTS}"),
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        Some(r#"{"max_databases": 1}"#),
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text);
    assert_eq!(a.rollout(EVENTS), Some(1));
    for refresh in 1..=12 {
        assert_eq!(b.rollout(EVENTS), None, "before refresh {refresh}");
        b.run_once().await;
    }
    assert_eq!(
        b.rollout(EVENTS),
        Some(1),
        "the twelfth refresh read the cap"
    );
    a.stop().await;
    b.stop().await;
    drop_fleet_db(&name).await;
}

/// FLT-6: every database's own admin API is served, unchanged, under
/// `/databases/{name}` on the fleet's listener: a start through `d0`'s
/// prefix reaches `d0` alone (its state, its audit row, its timeline),
/// `d1`'s detail still reads `pending`, and each prefix serves the admin
/// API's own document. Bad input: no token 401 (also for a name that does
/// not exist, so a fleet's names are not told to strangers), an unknown
/// database 404, a database that is down 503, a wrong method 405, each
/// with a JSON body. Guard: the member's service as the request's data
/// (without it every prefixed route fails, or reaches the wrong database).
#[actix_rt::test]
async fn flt06_each_databases_own_admin_api_is_served_under_its_name() {
    let _serial = SERIAL.lock().await;
    let names: Vec<String> = (0..2).map(|i| fleet_db_name("each", i)).collect();
    let d0 = Database::new("d0", create_fleet_db(&names[0]).await);
    let d1 = Database::new("d1", create_fleet_db(&names[1]).await);
    let down = Database::new(
        "down",
        support::with_database(support::server_url(), "bft_absent_each"),
    );
    let config = operated_config();
    let mut fleet = Fleet::start(
        config,
        vec![d0.clone(), d1.clone(), down],
        events_registry(),
    )
    .await
    .unwrap();
    let addr = fleet.listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let token = Some(TOKEN);

    let start = format!("/databases/d0/admin/backfills/{EVENTS}/start");
    let (status, body) = fleet_call(addr, "POST", &start, token, Some("each-1")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["backfill"]["id"], EVENTS, "{body}");
    assert_eq!(applied_audits(&d0.url, "start", "true").await, 1);
    assert_eq!(applied_audits(&d1.url, "start", "true").await, 0);
    let state_in = |url: String| async move {
        scalar_at(
            &url,
            &format!(
                "SELECT count(*) AS v FROM backfill WHERE id = '{EVENTS}' AND state = 'pending'"
            ),
        )
        .await
    };
    assert_eq!(state_in(d0.url.clone()).await, 0, "d0 was started");
    assert_eq!(state_in(d1.url.clone()).await, 1, "d1 was not");

    let detail = format!("/databases/d1/admin/backfills/{EVENTS}");
    let (status, body) = fleet_call(addr, "GET", &detail, token, None).await;
    assert_eq!(
        (status, body["state"].as_str()),
        (200, Some("pending")),
        "{body}"
    );
    let timeline = format!("/databases/d0/admin/backfills/{EVENTS}/timeline");
    let (status, body) = fleet_call(addr, "GET", &timeline, token, None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.to_string().contains("start"), "{body}");
    let (status, body) = fleet_call(addr, "GET", "/databases/d0/admin/audit", token, None).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.to_string().contains("\"start\""), "{body}");
    let (status, body) = fleet_call(addr, "GET", "/databases/d1/admin/audit", token, None).await;
    assert_eq!(status, 200, "{body}");
    assert!(!body.to_string().contains("\"start\""), "{body}");
    let (status, me) = fleet_call(addr, "GET", "/admin/fleet/me", token, None).await;
    assert_eq!(status, 200, "{me}");
    assert!(
        me["capabilities"].to_string().contains("backfill:operate"),
        "{me}"
    );
    let (status, _) = fleet_call(addr, "GET", "/admin/fleet/me", None, None).await;
    assert_eq!(status, 401);
    let (status, doc) = fleet_call(addr, "GET", "/databases/d1/openapi.json", token, None).await;
    assert_eq!(status, 200, "{doc}");
    assert!(doc["paths"]["/admin/backfills/{id}/timeline"].is_object());

    for (path, who, want, error) in [
        ("/databases/d0/admin/backfills", None, 401, "unauthorized"),
        ("/databases/nope/admin/backfills", None, 401, "unauthorized"),
        (
            "/databases/nope/admin/backfills",
            token,
            404,
            "unknown_database",
        ),
        ("/databases/down/admin/backfills", token, 503, "unavailable"),
        ("/databases/d0/admin/no-such-route", token, 404, "not_found"),
    ] {
        let (status, body) = fleet_call(addr, "GET", path, who, None).await;
        assert_eq!(
            (status, body["error"].as_str()),
            (want, Some(error)),
            "{path}: {body}"
        );
    }
    let (status, body) = fleet_call(addr, "DELETE", &detail, token, None).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (405, Some("method_not_allowed")),
        "{body}"
    );

    fleet.stop().await;
    drop_fleet_dbs(&names).await;
}

/// A table of `ROWS` rows whose repair stamps each row with the time its
/// batch ran (`at`), so the order and overlap of runs is read from the
/// data, by the server's one clock.
fn stamped_sql(name: &str) -> String {
    format!(
        "CREATE TABLE {name} (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0, at timestamptz); \
         INSERT INTO {name} (id) SELECT g FROM generate_series(1, {ROWS}) g"
    )
}

fn stamped(id: &str, table: &str, priority: i32) -> SqlRepair {
    stamped_batch(id, table, priority, 10)
}

fn stamped_batch(id: &str, table: &str, priority: i32, batch: u32) -> SqlRepair {
    SqlRepair::new(id, table)
        .key("id")
        .set("n = 1, at = clock_timestamp()")
        .filter("n = 0")
        .validate_where("n <> 1")
        .batch_size(batch)
        .priority(priority)
        .build()
        .expect("valid repair")
}

/// The first and last batch time of `table` in the database at `url`, in
/// microseconds since the epoch.
async fn run_interval(url: &str, table: &str) -> (i64, i64) {
    let first = scalar_at(
        url,
        &format!("SELECT (extract(epoch FROM min(at)) * 1000000)::bigint AS v FROM {table}"),
    )
    .await;
    let last = scalar_at(
        url,
        &format!("SELECT (extract(epoch FROM max(at)) * 1000000)::bigint AS v FROM {table}"),
    )
    .await;
    (first, last)
}

/// The most intervals that cover one instant.
fn most_at_once(intervals: &[(i64, i64)]) -> usize {
    let mut edges: Vec<(i64, i32)> = intervals
        .iter()
        .flat_map(|(a, b)| [(*a, 1), (*b, -1)])
        .collect();
    // At equal times a run that ends is counted out before one that starts.
    edges.sort();
    let (mut now, mut most) = (0i32, 0i32);
    for (_, step) in edges {
        now += step;
        most = most.max(now);
    }
    most as usize
}

/// The time of the first claim of `id` in the database at `url`, in
/// microseconds since the epoch, from the timeline PostgreSQL records in
/// the claim's own transaction.
async fn first_claim(url: &str, id: &str) -> i64 {
    scalar_at(
        url,
        &format!(
            "SELECT (extract(epoch FROM min(at)) * 1000000)::bigint AS v FROM backfill_event \
             WHERE backfill_id = '{id}' AND kind = 'claimed'"
        ),
    )
    .await
}

/// Four databases with stamped `hi_items`, `lo_items` and `gate_items`
/// tables, and the fleet's registry over them: `shop.hi` (priority 10),
/// `shop.lo` (0) and `shop.gate` (20, its run window closed now, so a
/// claim of it holds its runner and runs nothing).
async fn budget_fleet(tag: &str) -> (Vec<String>, Vec<Database>, Registry) {
    use chrono::Timelike;
    let names: Vec<String> = (0..4).map(|i| fleet_db_name(tag, i)).collect();
    let mut databases = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let url = create_fleet_db(name).await;
        let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
        conn.batch_execute(&format!(
            "{}; {}; {}",
            stamped_sql("hi_items"),
            stamped_sql("lo_items"),
            stamped_sql("gate_items")
        ))
        .await
        .unwrap();
        databases.push(Database::new(format!("b{i}"), url));
    }
    let hour = u64::from(chrono::Utc::now().hour());
    let gate = SqlRepair::new("shop.gate", "gate_items")
        .key("id")
        .set("n = 1")
        .validate_where("n <> 1")
        .priority(20)
        .run_window((hour + 2) % 24, (hour + 3) % 24)
        .build()
        .unwrap();
    let registry = Registry::new()
        .with(stamped("shop.hi", "hi_items", 10))
        .and_then(|r| r.with(stamped("shop.lo", "lo_items", 0)))
        .and_then(|r| r.with(gate))
        .unwrap();
    (names, databases, registry)
}

async fn all_completed(fleet: &Fleet, databases: &[Database], ids: &[&str]) {
    for db in databases {
        for id in ids {
            let row = fleet
                .engine(&db.name)
                .unwrap()
                .unwrap()
                .wait_for(
                    id,
                    &[State::Completed, State::Failed, State::Blocked],
                    Duration::from_secs(120),
                )
                .await
                .unwrap();
            assert_eq!(row.state, State::Completed, "{} {id}", db.name);
        }
    }
}

/// FLT-2: with one runner for the whole fleet, the higher priority is
/// claimed first. Four databases each hold a high-priority repair
/// (`shop.hi`, 10) and a low one (`shop.lo`, 0). The runner is made
/// scarce before that work starts: `shop.gate` (20) holds it outside its
/// run window while every database finds its work and waits for it;
/// pausing the gate frees it. From the timeline's claim times (one
/// server clock, written in each claim's transaction), every database's
/// `shop.hi` was claimed before any `shop.lo`, and from the batch times
/// no two runs overlapped. Guards: the budget's priority rule (without
/// it a low-priority claim comes between) and its cap.
#[actix_rt::test]
async fn flt02_with_runners_scarce_the_higher_priority_is_claimed_first() {
    let _serial = SERIAL.lock().await;
    let (names, databases, registry) = budget_fleet("prio").await;
    let mut config = fleet_config();
    config.host.auto_backfills = false;
    config.host.runtime.max_concurrent_runners = 2;
    config.host.pool_size = Some(4);
    config.max_runners = Some(1);
    let fleet = Fleet::start(config, databases.clone(), registry)
        .await
        .unwrap();
    let engine = |name: &str| fleet.engine(name).unwrap().unwrap();
    engine("b0").start("shop.gate").await.unwrap();
    let mut wait = Deadline::new("the gate holds the runner");
    while fleet.runners() < 1 {
        wait.tick().await;
    }
    for db in &databases {
        for id in ["shop.hi", "shop.lo"] {
            engine(&db.name).start(id).await.unwrap();
        }
    }
    let mut wait = Deadline::new("every database waits for the runner");
    while fleet.waiting() < 4 {
        wait.tick().await;
    }
    engine("b0").pause("shop.gate").await.unwrap();
    all_completed(&fleet, &databases, &["shop.hi", "shop.lo"]).await;
    assert_eq!(fleet.runners(), 0, "every permit went back");
    let mut hi = Vec::new();
    let mut lo = Vec::new();
    let mut runs = Vec::new();
    for db in &databases {
        hi.push(first_claim(&db.url, "shop.hi").await);
        lo.push(first_claim(&db.url, "shop.lo").await);
        runs.push(run_interval(&db.url, "hi_items").await);
        runs.push(run_interval(&db.url, "lo_items").await);
    }
    assert!(
        hi.iter().max() < lo.iter().min(),
        "every shop.hi is claimed before any shop.lo: hi {hi:?}, lo {lo:?}"
    );
    assert_eq!(most_at_once(&runs), 1, "one run at a time: {runs:?}");
    fleet.stop().await;
    drop_fleet_dbs(&names).await;
}

/// FLT-2: a fleet-wide cap of three runners over four databases of two
/// runners each, and a rollout cap of two databases for `shop.lo`, which
/// is started in every database at once, one key per batch so the runs
/// overlap. From the batch times (one server clock): never more than two
/// databases ran `shop.lo` at once, though three runners were free.
/// Then the cap is lifted live (`Fleet::set_rollout`) and `shop.hi`, one
/// key per batch too, runs in all four databases: never more than three
/// at once. Guards: the rollout cap (three would run) and the budget's
/// cap (four would).
#[actix_rt::test]
async fn flt02_the_runner_cap_and_the_rollout_cap_hold_throughout() {
    let _serial = SERIAL.lock().await;
    let (names, databases, _) = budget_fleet("caps").await;
    let registry = Registry::new()
        .with(stamped_batch("shop.hi", "hi_items", 10, 1))
        .and_then(|r| r.with(stamped_batch("shop.lo", "lo_items", 0, 1)))
        .unwrap();
    let mut config = fleet_config();
    config.host.auto_backfills = false;
    config.host.runtime.max_concurrent_runners = 2;
    config.host.pool_size = Some(4);
    config.max_runners = Some(3);
    config.rollout.insert("shop.lo".into(), 2);
    let fleet = Fleet::start(config, databases.clone(), registry)
        .await
        .unwrap();
    let engine = |name: &str| fleet.engine(name).unwrap().unwrap();
    for db in &databases {
        engine(&db.name).start("shop.lo").await.unwrap();
    }
    all_completed(&fleet, &databases, &["shop.lo"]).await;
    fleet.set_rollout("shop.lo", None).unwrap();
    for db in &databases {
        engine(&db.name).start("shop.hi").await.unwrap();
    }
    all_completed(&fleet, &databases, &["shop.hi"]).await;
    let mut hi = Vec::new();
    let mut lo = Vec::new();
    for db in &databases {
        hi.push(run_interval(&db.url, "hi_items").await);
        lo.push(run_interval(&db.url, "lo_items").await);
    }
    assert!(
        most_at_once(&lo) <= 2,
        "shop.lo in at most two databases: {lo:?}"
    );
    assert!(most_at_once(&hi) <= 3, "at most three runs at once: {hi:?}");
    assert!(
        matches!(
            fleet.set_rollout("shop.lo", Some(0)),
            Err(FleetError::Config(_))
        ),
        "a cap of 0 would never run"
    );
    fleet.stop().await;
    drop_fleet_dbs(&names).await;
}
