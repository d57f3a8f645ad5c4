//! Embedding the library in a host service of its own (docs/CONTRACT.md
//! section 12.1), through the public API only: an application defined
//! here (its own table, migration, schema check, repair and route).
//!
//! Index:
//! - EMB-1 the configuration matrix of CT-13 through `Host::start` with
//!   this application, and its listeners on one address or on an address
//!   in use: `emb01_*`; the admin boundary and readiness mounted
//!   into an `App` the test builds itself: `emb01_admin_routes_mount_*`
//! - EMB-1, PAR-2, PAR-4 a partitioned repair of the application run by
//!   the host to `completed`: `emb01_partitioned_*`
//! - EMB-3 awaiting (re-reading PostgreSQL about once a second) and
//!   events: `emb03_*`
//! - EMB-6 settings checked before anything reaches PostgreSQL: `emb06_*`
//! - EMB-7 the runtime from a plain tokio context: `emb07_*`
//! - EMB-8 a failed automatic start recorded, shown and waited on, then
//!   retried; `wait_for` on a backfill that needs an operator: `emb08_*`
//! - EMB-13 behind a real PgBouncer: refused at start in transaction mode,
//!   run in session mode: `emb13_*` (`embed/pooler.rs`)
//!
//! Races (the gate must be closed while validation runs) are forced with
//! the validation gate of `support::repairs::Hooks`, not with sleeps.

#[path = "embed/pooler.rs"]
mod pooler;
mod support;

use backfill::engine::WaitError;
use backfill::events::Event;
use backfill::host::{AppError, Application, Embedded, Host, HostConfig, HostError};
use backfill::repair::{DefinitionError, Registry};
use backfill::{AsyncPgConnection, Engine, State};
use diesel_async::{RunQueryDsl, SimpleAsyncConnection};
use std::sync::Arc;
use std::time::Duration;
use support::http::{get, request};
use support::log::Log;
use support::repairs::{items_sql, Counter, Hooks};
use support::{engine_config, eventually, test_db, TestDb};

const ID: &str = "items.counter";
const TOKEN: &str = "embed-operator-token-0123456789";

/// The host service's own application: an `items` table, its counter
/// repair and one route.
struct Shop {
    hooks: Arc<Hooks>,
    rows: i64,
    /// Above 1: the repair is the declarative one, split into this many
    /// partitions at `start`.
    partitions: u32,
    /// The counter repair in two statements, so that the hooks' gate after
    /// its mutation holds a batch open before its fenced commit.
    gated: bool,
}

#[derive(diesel::QueryableByName)]
struct Present {
    #[diesel(sql_type = diesel::sql_types::Bool)]
    present: bool,
}

#[backfill::async_trait]
impl Application for Shop {
    fn registry(&self) -> Result<Registry, DefinitionError> {
        if self.partitions > 1 {
            let repair = backfill::repair::SqlRepair::new(ID, "items")
                .key("id")
                .set("n = n + 1")
                .validate_where("n <> 1")
                .batch_size(7)
                .partitions(self.partitions)
                .build()?;
            return Registry::new().with(repair);
        }
        let counter = Counter::new(ID, 10, self.hooks.clone());
        if self.gated {
            return Registry::new().with(counter);
        }
        Registry::new().with(counter.one_statement())
    }

    async fn migrate(&self, url: &str) -> Result<(), AppError> {
        use diesel_async::AsyncConnection;
        let mut conn = AsyncPgConnection::establish(url).await?;
        conn.batch_execute(&format!(
            "DO $$ BEGIN IF to_regclass('items') IS NULL THEN {}; END IF; END $$",
            items_sql(self.rows)
        ))
        .await?;
        Ok(())
    }

    async fn check_schema(&self, conn: &mut AsyncPgConnection) -> Result<(), AppError> {
        let row: Present = diesel::sql_query("SELECT to_regclass('items') IS NOT NULL AS present")
            .get_result(conn)
            .await?;
        if row.present {
            Ok(())
        } else {
            Err("schema is not compatible: table items is missing".into())
        }
    }

    fn configure(
        &self,
        cfg: &mut actix_web::web::ServiceConfig,
        _pool: &backfill::__private::store::Pool,
    ) {
        cfg.route("/shop", actix_web::web::get().to(|| async { "shop" }));
    }
}

fn shop(hooks: &Arc<Hooks>) -> Shop {
    Shop {
        hooks: hooks.clone(),
        rows: 200,
        partitions: 1,
        gated: false,
    }
}

fn config(db: &TestDb, migrate: bool, auto: bool) -> HostConfig {
    let mut config = HostConfig::new(db.url.clone());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.admin_listen = "127.0.0.1:0".parse().unwrap();
    config.migrate = migrate;
    config.auto_backfills = auto;
    config.engine = engine_config();
    config.runtime.poll_interval = Duration::from_millis(50);
    config.admin_auth =
        backfill::admin::AuthConfig::from_sources(Some(TOKEN), None, false).unwrap();
    config
}

async fn state(engine: &Engine) -> State {
    engine.get(ID).await.unwrap().state
}

/// The host's backfill reaches `completed`, `/readyz` opens, `/metrics`
/// counts it among the completed (OBS-1), and every one of the
/// application's 200 rows was repaired exactly once.
async fn completed_and_ready(host: &Host, db: &TestDb) {
    let row = host
        .engine()
        .wait_for(ID, &[State::Completed], Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(row.state, State::Completed);
    assert_eq!(get(host.serving_addr, "/readyz").await.status, 200);
    let metrics = get(host.admin_addr, "/metrics").await.text;
    assert!(
        metrics.contains("backfill_backfills{state=\"completed\"} 1\n")
            && metrics.contains("backfill_backfills{state=\"running\"} 0\n"),
        "{metrics}"
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n = 1")
            .await,
        200
    );
}

/// Automatic mode: `/readyz` is 503 until the required backfill is
/// `completed`, and only validation completes it; the application's route
/// and the admin listener serve meanwhile (CFG-1, CFG-3).
async fn gates_until_validated(db: &TestDb, migrate: bool) {
    let hooks = Hooks::new();
    let mut validation = hooks.gate_in_validate();
    let host = Host::start(config(db, migrate, true), shop(&hooks))
        .await
        .unwrap();
    validation.reached().await;
    assert_eq!(state(host.engine()).await, State::Validating);
    let ready = get(host.serving_addr, "/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.text);
    assert!(ready.text.contains(ID), "{}", ready.text);
    assert_eq!(get(host.serving_addr, "/shop").await.text, "shop");
    let auth = format!("Bearer {TOKEN}");
    let list = request(
        host.admin_addr,
        "GET",
        "/admin/backfills",
        &[("Authorization", &auth)],
        None,
    )
    .await;
    assert_eq!(list.status, 200, "{}", list.text);
    validation.release();
    completed_and_ready(&host, db).await;
    host.stop().await;
}

/// OBS-3, THR-6: `/metrics` exports each running backfill's rows done,
/// whether a current throttle condition holds it back and, while a
/// latency budget paces it, the budget's reading and bound, labelled by
/// its ID,
/// read from PostgreSQL (what the per-backfill `BackfillStalled` alert
/// reads); a backfill that leaves `running` leaves both series. Guard:
/// `running_families` in the scrape.
#[actix_rt::test]
async fn obs03_metrics_export_each_running_backfills_progress_and_throttle() {
    let db = test_db().await;
    let hooks = Hooks::new();
    let host = Host::start(config(&db, true, false), shop(&hooks))
        .await
        .unwrap();
    let auth = format!("Bearer {TOKEN}");
    let patch = |pause_ms: u32, key: &'static str| {
        let auth = auth.clone();
        let addr = host.admin_addr;
        async move {
            let body = format!("{{\"pause_ms\": {pause_ms}}}");
            let r = request(
                addr,
                "PATCH",
                &format!("/admin/backfills/{ID}/settings"),
                &[
                    ("Authorization", &auth),
                    ("Idempotency-Key", key),
                    ("Content-Type", "application/merge-patch+json"),
                ],
                Some(&body),
            )
            .await;
            assert_eq!(r.status, 200, "{}", r.text);
        }
    };
    // A long pause after each batch keeps it running after its first.
    patch(3_600_000, "slow").await;
    host.engine().start(ID).await.unwrap();
    let mut deadline = support::Deadline::new("the first batch commits");
    while db
        .scalar(&format!(
            "SELECT rows_done AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await
        == 0
    {
        deadline.tick().await;
    }
    let series = |metrics: &str, family: &str| {
        metrics
            .lines()
            .find(|l| l.starts_with(&format!("{family}{{backfill=\"{ID}\"}} ")))
            .map(str::to_string)
    };
    let metrics = get(host.admin_addr, "/metrics").await.text;
    assert_eq!(
        series(&metrics, "backfill_running_rows_done").as_deref(),
        Some(format!("backfill_running_rows_done{{backfill=\"{ID}\"}} 10").as_str()),
        "{metrics}"
    );
    assert!(
        series(&metrics, "backfill_running_throttled").is_some_and(|l| l.ends_with(" 0")),
        "{metrics}"
    );
    // A condition of the claim in force, as a runner records it.
    let condition = |signal: &str, value: f64, threshold: f64| {
        let sql = format!(
            "UPDATE backfill SET throttle = jsonb_build_object('signal', '{signal}', \
                 'value', {value}, 'threshold', {threshold}, 'generation', generation) \
             WHERE id = '{ID}'"
        );
        let db = &db;
        async move { db.exec(&sql).await }
    };
    condition("lock_waiters", 3.0, 1.0).await;
    let metrics = get(host.admin_addr, "/metrics").await.text;
    assert!(
        series(&metrics, "backfill_running_throttled").is_some_and(|l| l.ends_with(" 1")),
        "{metrics}"
    );
    // A latency budget's condition (THR-6): its reading and bound too.
    condition("latency", 0.25, 0.05).await;
    let metrics = get(host.admin_addr, "/metrics").await.text;
    for line in [
        format!("backfill_latency_budget_seconds{{backfill=\"{ID}\",kind=\"reading\"}} 0.25"),
        format!("backfill_latency_budget_seconds{{backfill=\"{ID}\",kind=\"bound\"}} 0.05"),
    ] {
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
    db.exec(&format!(
        "UPDATE backfill SET throttle = NULL WHERE id = '{ID}'"
    ))
    .await;
    let metrics = get(host.admin_addr, "/metrics").await.text;
    assert!(
        !metrics.contains("backfill_latency_budget_seconds{"),
        "{metrics}"
    );
    patch(0, "fast").await;
    completed_and_ready(&host, &db).await;
    let metrics = get(host.admin_addr, "/metrics").await.text;
    assert_eq!(
        series(&metrics, "backfill_running_rows_done"),
        None,
        "{metrics}"
    );
    host.stop().await;
}

/// Manual mode: no gate, the row stays `pending` (CFG-4).
async fn never_gates(db: &TestDb, migrate: bool) {
    let hooks = Hooks::new();
    let host = Host::start(config(db, migrate, false), shop(&hooks))
        .await
        .unwrap();
    assert_eq!(get(host.serving_addr, "/readyz").await.status, 200);
    assert_eq!(get(host.serving_addr, "/shop").await.status, 200);
    assert_eq!(state(host.engine()).await, State::Pending);
    host.stop().await;
}

/// Migrations on, automatic on. Guards: the application's migration (no
/// `items`: the schema check fails), the gate (503 while validating).
#[actix_rt::test]
async fn emb01_migrate_on_auto_on_gates_until_completed() {
    let db = test_db().await;
    gates_until_validated(&db, true).await;
}

/// Migrations on, automatic off.
#[actix_rt::test]
async fn emb01_migrate_on_auto_off_never_gates() {
    let db = test_db().await;
    never_gates(&db, true).await;
}

/// Migrations off, automatic on: with the schema in place it gates like
/// the automatic mode above; without it, startup fails with the schema
/// check's words and nothing listens.
#[actix_rt::test]
async fn emb01_migrate_off_auto_on_needs_the_schema() {
    let db = test_db().await;
    let hooks = Hooks::new();
    let err = Host::start(config(&db, false, true), shop(&hooks))
        .await
        .err()
        .expect("startup must fail without the application's table");
    assert!(matches!(err, HostError::Schema(_)), "{err}");
    assert!(err.to_string().contains("items is missing"), "{err}");
    db.exec(&items_sql(200)).await;
    gates_until_validated(&db, false).await;
}

/// Migrations off, automatic off.
#[actix_rt::test]
async fn emb01_migrate_off_auto_off_never_gates() {
    let db = test_db().await;
    db.exec(&items_sql(200)).await;
    never_gates(&db, false).await;
}

/// The pieces one by one: a service with its own `App` mounts the admin
/// boundary and readiness beside its own route. Guards: admin
/// authorization (401 without a token), the gate (503 while pending in
/// automatic mode).
#[actix_rt::test]
async fn emb01_admin_routes_mount_into_an_app_of_the_service() {
    use actix_web::{test, web, App};
    let db = test_db().await;
    let hooks = Hooks::new();
    let mut validation = hooks.gate_in_validate();
    let app = shop(&hooks);
    let embedded = Embedded::start(config(&db, true, true), &app)
        .await
        .unwrap();
    validation.reached().await;
    let admin = embedded.admin_routes();
    let readiness = embedded.readiness_routes();
    let service = test::init_service(
        App::new()
            .configure(|cfg| admin.configure(cfg))
            .configure(readiness)
            .route("/mine", web::get().to(|| async { "mine" })),
    )
    .await;
    let call = |path: &str, token: Option<&str>| {
        let mut req = test::TestRequest::get().uri(path);
        if let Some(token) = token {
            req = req.insert_header(("Authorization", format!("Bearer {token}")));
        }
        req.to_request()
    };
    let mine = test::call_service(&service, call("/mine", None)).await;
    assert_eq!(mine.status(), 200);
    let denied = test::call_service(&service, call("/admin/backfills", None)).await;
    assert_eq!(denied.status(), 401);
    let listed = test::call_service(&service, call("/admin/backfills", Some(TOKEN))).await;
    assert_eq!(listed.status(), 200);
    let body: serde_json::Value = test::read_body_json(listed).await;
    assert!(body.to_string().contains(ID), "{body}");
    let gated = test::call_service(&service, call("/readyz", None)).await;
    assert_eq!(gated.status(), 503);
    validation.release();
    embedded
        .engine
        .wait_for(ID, &[State::Completed], Duration::from_secs(60))
        .await
        .unwrap();
    let ready = test::call_service(&service, call("/readyz", None)).await;
    assert_eq!(ready.status(), 200);
    embedded.stop().await;
}

/// One address for both listeners: the serving listener also mounts the
/// admin boundary, and the host reports that address for both. Guard: the
/// admin routes on the serving listener when the addresses are equal
/// (without them the admin list is a 404).
#[actix_rt::test]
async fn emb01_one_address_serves_the_application_and_the_admin_api() {
    let db = test_db().await;
    let hooks = Hooks::new();
    let mut config = config(&db, true, false);
    // A port that was free a moment ago: port 0 would ask for two.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    config.listen = ([127, 0, 0, 1], port).into();
    config.admin_listen = config.listen;
    let host = Host::start(config, shop(&hooks)).await.unwrap();
    assert_eq!(host.serving_addr.port(), port);
    assert_eq!(host.admin_addr, host.serving_addr);
    assert_eq!(get(host.serving_addr, "/shop").await.text, "shop");
    assert_eq!(get(host.serving_addr, "/readyz").await.status, 200);
    let auth = format!("Bearer {TOKEN}");
    let list = request(
        host.serving_addr,
        "GET",
        "/admin/backfills",
        &[("Authorization", &auth)],
        None,
    )
    .await;
    assert_eq!(list.status, 200, "{}", list.text);
    assert!(list.text.contains(ID), "{}", list.text);
    host.stop().await;
}

/// An address already in use fails the start with a listen error naming
/// it, for the serving listener and for the admin one alike. Guard: the
/// address each failure is reported with.
#[actix_rt::test]
async fn emb01_address_in_use_fails_the_start_naming_it() {
    let db = test_db().await;
    let hooks = Hooks::new();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = taken.local_addr().unwrap();
    let mut serving = config(&db, true, false);
    serving.listen = addr;
    let mut admin = config(&db, true, false);
    admin.admin_listen = addr;
    for config in [serving, admin] {
        let err = Host::start(config, shop(&hooks))
            .await
            .err()
            .expect("the address is in use");
        assert!(
            matches!(err, HostError::Listen { addr: a, .. } if a == addr),
            "{err}"
        );
    }
    drop(taken);
}

/// An engine on a pool of its own with the application's repair
/// registered, running no runtime: only re-reading PostgreSQL tells it
/// what another process did.
async fn waiter(db: &TestDb, hooks: &Arc<Hooks>) -> Engine {
    let pool = backfill::__private::store::build_pool(&db.url, 2)
        .await
        .unwrap();
    let waiter = Engine::new(pool, shop(hooks).registry().unwrap(), engine_config()).unwrap();
    waiter.register().await.unwrap();
    waiter
}

/// The wait ended at its timeout with the backfill still `pending`.
fn assert_timed_out_pending<T: std::fmt::Debug>(waited: &Result<T, WaitError>) {
    assert!(
        matches!(
            waited,
            Err(WaitError::Timeout {
                state: State::Pending
            })
        ),
        "{waited:?}"
    );
}

/// EMB-3: a waiter re-reads PostgreSQL about once a second when no event
/// comes, never in a loop: a 2.5 s wait that nothing ends takes a handful
/// of reads (the first, one a second and the last), counted as the
/// connections its pool handed out.
#[actix_rt::test]
async fn emb03_wait_for_rereads_about_once_a_second() {
    let db = test_db().await;
    let waiter = waiter(&db, &Hooks::new()).await;
    let before = waiter.pool().state().statistics.get_started;
    let waited = waiter
        .wait_for(ID, &[State::Completed], Duration::from_millis(2500))
        .await;
    assert_timed_out_pending(&waited);
    let reads = waiter.pool().state().statistics.get_started - before;
    assert!((3..=6).contains(&reads), "{reads} reads in 2.5 s");
}

/// EMB-3: while batches commit, a waiter reads PostgreSQL at most once
/// per `wait_progress_interval`, not once per batch, and reads at once
/// when the state changes. The batches run through the engine's own
/// runtime face (`Backend::step`, which publishes the progress events) on
/// an open claim, which takes no connection from the pool; the waiter's
/// reads are the connections the pool hands out meanwhile. With both
/// intervals at an hour, a wait over 30 batches reads twice: first, and
/// on the `validating` event. Guard: the progress arm in `wait_for`
/// (without it every batch is a read).
#[actix_rt::test]
async fn emb03_wait_for_reads_once_per_interval_while_batches_commit() {
    use backfill_actors::{Backend, StepOutcome};
    let db = test_db().await;
    db.exec(&items_sql(300)).await;
    let hooks = Hooks::new();
    let pool = backfill::__private::store::build_pool(&db.url, 4)
        .await
        .unwrap();
    let hour = Duration::from_secs(3600);
    let config = backfill::EngineConfig {
        wait_progress_interval: hour,
        wait_poll_interval: hour,
        ..engine_config()
    };
    let engine = Engine::new(pool, shop(&hooks).registry().unwrap(), config).unwrap();
    engine.register().await.unwrap();
    engine.start(ID).await.unwrap();
    let mut claim = Backend::claim_next(&engine, "w1", &[])
        .await
        .unwrap()
        .unwrap()
        .expect("claimed");
    // The first batch opens the claim's connections; later ones reuse them.
    let first = Backend::step(&engine, &mut claim).await.unwrap();
    assert!(matches!(first, StepOutcome::Committed { .. }), "{first:?}");
    let gets = || engine.pool().state().statistics.get_started;
    let before = gets();
    let mut progress = engine.events().subscribe();
    let (waited, batches) = tokio::join!(engine.wait_for(ID, &[State::Validating], hour), async {
        let mut batches = 0;
        loop {
            match Backend::step(&engine, &mut claim).await.unwrap() {
                StepOutcome::Committed { reached_bound, .. } => {
                    batches += 1;
                    if reached_bound {
                        return batches;
                    }
                }
                other => panic!("{other:?}"),
            }
        }
    });
    assert_eq!(waited.unwrap().state, State::Validating);
    assert_eq!(batches, 29, "300 rows in batches of 10, the first before");
    let mut events = 0;
    while let Ok(Event::Progress { .. }) = progress.try_recv() {
        events += 1;
    }
    assert_eq!(events, 29, "one progress event per batch");
    assert_eq!(gets() - before, 2, "reads: the first and on validating");
}

/// `wait_for` returns when another process (a runtime on its own pool)
/// completes the backfill; the waiter itself runs no runtime, so only
/// re-reading PostgreSQL can tell it. A subscriber sees claimed, progress,
/// validating, completed in that order; one that lagged behind still ends
/// with the right final state, read from PostgreSQL.
#[actix_rt::test]
async fn emb03_wait_for_and_events_follow_another_process() {
    let db = test_db().await;
    // 1,200 batches: more events than a subscriber may lag behind by.
    db.exec(&items_sql(12_000)).await;
    let hooks = Hooks::new();
    let waiter = waiter(&db, &hooks).await;
    let early = waiter
        .wait_for(ID, &[State::Completed], Duration::from_millis(50))
        .await;
    assert_timed_out_pending(&early);

    let app = shop(&hooks);
    let worker = Embedded::start(config(&db, false, false), &app)
        .await
        .unwrap();
    let mut events = worker.engine.events().subscribe();
    let mut lagging = worker.engine.events().subscribe();
    // Read every event as it comes, folding repeats, until completion.
    let reader = actix_rt::spawn(async move {
        let mut seen = Vec::new();
        while let Ok(event) = events.recv().await {
            let step = match event {
                Event::Claimed {
                    validation: false, ..
                } => "claimed",
                Event::Progress { .. } => "progress",
                Event::State {
                    state: State::Validating,
                    ..
                } => "validating",
                Event::State {
                    state: State::Completed,
                    ..
                } => "completed",
                _ => continue,
            };
            if seen.last() != Some(&step) {
                seen.push(step);
            }
            if step == "completed" {
                break;
            }
        }
        seen
    });
    worker.engine.start(ID).await.unwrap();
    worker.runtime.wake();

    let row = waiter
        .wait_for(ID, &[State::Completed], Duration::from_secs(90))
        .await
        .unwrap();
    assert_eq!(row.state, State::Completed);

    let seen = tokio::time::timeout(Duration::from_secs(30), reader)
        .await
        .expect("the subscriber saw completion")
        .unwrap();
    assert_eq!(seen, ["claimed", "progress", "validating", "completed"]);

    // The subscriber that never read lost the oldest events, and still
    // ends with the truth from PostgreSQL.
    assert!(matches!(
        lagging.try_recv(),
        Err(tokio::sync::broadcast::error::TryRecvError::Lagged(_))
    ));
    let row = worker
        .engine
        .wait_for(ID, &[State::Completed], Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(row.state, State::Completed);
    worker.stop().await;
}

/// A pool too small for the runners is one typed error naming both
/// numbers, before anything reaches PostgreSQL (not even the framework's
/// migrations ran). So are a duplicate definition and a required ID the
/// application does not define.
#[actix_rt::test]
async fn emb06_bad_configuration_fails_before_postgresql_is_touched() {
    let db = test_db().await;
    db.exec("DROP TABLE IF EXISTS backfill CASCADE").await;
    let hooks = Hooks::new();
    let mut small = config(&db, true, true);
    small.pool_size = Some(3);
    small.runtime.max_concurrent_runners = 4;
    let err = Host::start(small, shop(&hooks)).await.err().expect("error");
    assert!(
        matches!(
            err,
            HostError::PoolTooSmall {
                pool: 3,
                needed: 6,
                runners: 4
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(
        text.contains("pool size 3") && text.contains("at least 6"),
        "{text}"
    );

    let mut unknown = config(&db, true, true);
    unknown.required = Some(vec!["items.nobody-defines-this".into()]);
    let err = Host::start(unknown, shop(&hooks))
        .await
        .err()
        .expect("error");
    assert!(matches!(err, HostError::UnknownRequired(_)), "{err}");

    let twice = Registry::new()
        .with(Counter::new(ID, 10, hooks.clone()))
        .and_then(|r| r.with(Counter::new(ID, 10, hooks.clone())));
    assert!(matches!(twice, Err(DefinitionError::DuplicateId(_))));

    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM pg_tables WHERE tablename IN ('backfill', 'items')")
            .await,
        0,
        "nothing may be written before the configuration is known valid"
    );
}

/// EMB-1, PAR-2, PAR-4: the host's own supervisor claims the partitions
/// of the application's repair (four, split at `start`), works each to
/// its end, validates once over the whole bound and opens `/readyz`;
/// every row is repaired exactly once and each partition's checkpoint is
/// its upper end. Guards: the supervisor's partition claims (without
/// them nothing moves and the wait times out) and the completion at the
/// last partition's end.
#[actix_rt::test]
async fn emb01_partitioned_repair_runs_to_completed_in_the_host() {
    let db = test_db().await;
    let hooks = Hooks::new();
    let app = Shop {
        partitions: 4,
        ..shop(&hooks)
    };
    let host = Host::start(config(&db, true, true), app).await.unwrap();
    completed_and_ready(&host, &db).await;
    assert_eq!(
        db.scalar(
            "SELECT count(*) AS v FROM backfill_partition \
             WHERE checkpoint = upper AND owner IS NULL"
        )
        .await,
        4,
        "every partition ended and released"
    );
    assert_eq!(
        db.scalar("SELECT sum(rows_done)::bigint AS v FROM backfill_partition")
            .await,
        200
    );
    host.stop().await;
}

/// The value of one sample line (`name{labels} value`) of a scrape.
fn sample(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no sample {series} in {metrics}"))
        .parse()
        .unwrap()
}

/// OBS-1, CT-5: on the host's `/metrics`, a batch the fence rejects as a
/// stale owner's counts in `backfill_stale_rejections_total` and under
/// `backfill_batch_duration_seconds{outcome="stale"}` alike, once per
/// `stale_owner_rejected` event; a batch an operator's pause rolls back
/// counts under `outcome="paused"`, once per pause audited, and in neither
/// stale family. The stale owner is made by a real takeover (a second
/// engine claims after the lease expired) while the host's batch is held
/// by the gate between mutation and commit. Guards: `BatchEnd::of` keeping
/// a pause out of `stale`, and the runner counting the rejection.
#[actix_rt::test]
async fn obs01_a_stale_batch_counts_as_stale_on_both_families_a_paused_one_on_neither() {
    let (log, _capture) = Log::capture();
    let db = test_db().await;
    let hooks = Hooks::new();
    let app = Shop {
        gated: true,
        ..shop(&hooks)
    };
    let host = Host::start(config(&db, true, false), app).await.unwrap();
    let rival = waiter(&db, &hooks).await;
    let mut gate = hooks.gate_after_mutate();
    host.engine().start(ID).await.unwrap();
    gate.reached().await;
    // Another process takes the expired claim over: the generation moves
    // on, so the held batch's commit is a stale owner's.
    db.expire_lease(ID).await;
    let taken = rival
        .claim_next("rival", &[])
        .await
        .unwrap()
        .expect("takeover");
    gate.release();
    eventually("the stale runner exits", || async {
        host.embedded
            .runtime
            .status()
            .await
            .unwrap()
            .held
            .is_empty()
    })
    .await;
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n <> 0")
            .await,
        0,
        "the stale batch rolled back"
    );
    // Give the claim back so that the host runs the backfill again; its
    // next batch is held and paused through the admin API.
    hooks.clear_gates();
    let mut gate = hooks.gate_after_mutate();
    assert!(rival.release(&taken).await.unwrap());
    host.embedded.runtime.wake();
    gate.reached().await;
    let auth = format!("Bearer {TOKEN}");
    let paused = request(
        host.admin_addr,
        "POST",
        &format!("/admin/backfills/{ID}/pause"),
        &[("Authorization", &auth), ("Idempotency-Key", "obs01-pause")],
        None,
    )
    .await;
    assert_eq!(paused.status, 200, "{}", paused.text);
    gate.release();
    eventually("the paused runner exits", || async {
        host.embedded
            .runtime
            .status()
            .await
            .unwrap()
            .held
            .is_empty()
    })
    .await;

    let metrics = get(host.admin_addr, "/metrics").await.text;
    let stale_events = log.lines("stale_owner_rejected").len() as f64;
    let pauses = db
        .scalar(&format!(
            "SELECT count(*) AS v FROM backfill_audit \
             WHERE backfill_id = '{ID}' AND action = 'pause' AND outcome = 'applied'"
        ))
        .await as f64;
    assert_eq!(stale_events, 1.0, "{:?}", log.lines("stale_owner_rejected"));
    assert_eq!(pauses, 1.0);
    assert_eq!(
        sample(&metrics, "backfill_stale_rejections_total"),
        stale_events
    );
    assert_eq!(
        sample(
            &metrics,
            "backfill_batch_duration_seconds_count{outcome=\"stale\"}"
        ),
        stale_events
    );
    assert_eq!(
        sample(
            &metrics,
            "backfill_batch_duration_seconds_count{outcome=\"paused\"}"
        ),
        pauses
    );
    assert_eq!(state(host.engine()).await, State::Paused);
    host.stop().await;
}

/// OBS-1, VAL-4: an explicit validation that finds the postcondition
/// false counts on the host's `/metrics` under
/// `backfill_validations_rejected_total{kind="explicit"}`, once per
/// `failure` audit row (its replay runs nothing and counts nothing), and
/// not as a lifecycle rejection. Guard: `Admin::validate` counting into
/// the host's runtime metrics.
#[actix_rt::test]
async fn obs01_a_failed_explicit_validation_counts_on_the_hosts_metrics() {
    let db = test_db().await;
    let hooks = Hooks::new();
    let host = Host::start(config(&db, true, true), shop(&hooks))
        .await
        .unwrap();
    completed_and_ready(&host, &db).await;
    db.exec("UPDATE items SET n = 2 WHERE id = 3").await;
    let auth = format!("Bearer {TOKEN}");
    for _ in 0..2 {
        let bad = request(
            host.admin_addr,
            "POST",
            &format!("/admin/backfills/{ID}/validate"),
            &[("Authorization", &auth), ("Idempotency-Key", "obs01-v")],
            None,
        )
        .await;
        assert_eq!(bad.status, 200, "{}", bad.text);
        assert_eq!(bad.body["outcome"], "failure", "{}", bad.text);
    }
    let failures = db
        .scalar(&format!(
            "SELECT count(*) AS v FROM backfill_audit \
             WHERE backfill_id = '{ID}' AND action = 'validate' AND outcome = 'failure'"
        ))
        .await as f64;
    assert_eq!(failures, 1.0);
    let metrics = get(host.admin_addr, "/metrics").await.text;
    let rejected = |kind: &str| {
        sample(
            &metrics,
            &format!("backfill_validations_rejected_total{{kind=\"{kind}\"}}"),
        )
    };
    assert_eq!(rejected("explicit"), failures);
    assert_eq!(rejected("lifecycle"), 0.0);
    host.stop().await;
}

/// EMB-7: a plain tokio service (no actix system of its own) starts the
/// runtime, starts a backfill and awaits its completion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emb07_runtime_from_plain_tokio_completes_a_backfill() {
    let db = test_db().await;
    db.exec(&items_sql(500)).await;
    let hooks = Hooks::new();
    let mut config = config(&db, false, false);
    config.runtime.poll_interval = Duration::from_millis(50);
    let spawned = Embedded::spawn(config, shop(&hooks)).await.unwrap();
    spawned.engine.start(ID).await.unwrap();
    spawned.runtime.wake();
    let row = spawned
        .engine
        .wait_for(ID, &[State::Completed], Duration::from_secs(90))
        .await
        .unwrap();
    assert_eq!(row.state, State::Completed);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n = 1")
            .await,
        500
    );
    spawned.stop().await;
}

/// EMB-8, the quickstart on a database without the repair's table, in
/// automatic mode: startup completes; the row stays `pending` and carries
/// why its start failed, in words for a pending row (no "then retry");
/// the admin view, `/readyz` and the event channel name it; `wait_for`
/// returns the typed error instead of waiting for its timeout; once the
/// table exists, the automatic start's retry (nudged, not slept for)
/// starts it, clears the record, and it completes. Guards: the record on
/// the row (no diagnostic in the view or `/readyz`), the `wait_for` check
/// (a timeout instead of `NeedsOperator`), the retry of a blocked start
/// (the row stays `pending`).
#[actix_rt::test]
async fn emb08_failed_automatic_start_is_recorded_shown_and_retried() {
    let db = test_db().await;
    let hooks = Hooks::new();
    let app = Registry::new()
        .with(Counter::new(ID, 10, hooks.clone()).one_statement())
        .unwrap();
    let host = Host::start(config(&db, true, true), app).await.unwrap();

    let row = host.engine().get(ID).await.unwrap();
    assert_eq!(row.state, State::Pending);
    let (kind, diagnostic) = row.start_failure().expect("the failed start is recorded");
    assert_eq!(kind, "blocked");
    assert!(diagnostic.contains("missing relation"), "{diagnostic}");
    assert!(
        diagnostic.contains("the automatic start tries again"),
        "{diagnostic}"
    );
    assert!(!diagnostic.contains("then retry"), "{diagnostic}");

    let auth = format!("Bearer {TOKEN}");
    let view = request(
        host.admin_addr,
        "GET",
        &format!("/admin/backfills/{ID}"),
        &[("Authorization", &auth)],
        None,
    )
    .await;
    assert_eq!(view.status, 200, "{}", view.text);
    assert_eq!(view.body["state"], "pending", "{}", view.text);
    assert_eq!(
        view.body["start_failed"]["kind"], "blocked",
        "{}",
        view.text
    );
    assert_eq!(
        view.body["start_failed"]["message"], diagnostic,
        "{}",
        view.text
    );
    assert!(view.body["last_error"].is_null(), "{}", view.text);

    let ready = get(host.serving_addr, "/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.text);
    let gating = &ready.body["backfill_gate"]["gating"][0];
    assert_eq!(gating["id"], ID, "{}", ready.text);
    assert!(
        gating["start_failed"]
            .as_str()
            .is_some_and(|t| t.starts_with("blocked: missing relation")),
        "{}",
        ready.text
    );

    let waited = host
        .engine()
        .wait_for(ID, &[State::Completed], Duration::from_secs(10))
        .await;
    match &waited {
        Err(error @ WaitError::NeedsOperator { state, .. }) => {
            assert_eq!(*state, State::Pending);
            let text = error.to_string();
            assert!(text.contains("automatic start failed"), "{text}");
            assert!(!text.contains("then retry"), "{text}");
        }
        other => panic!("expected NeedsOperator, got {other:?}"),
    }

    // The retry publishes on the engine's channel too.
    let mut events = host.engine().events().subscribe();
    host.embedded.retry_auto_starts();
    let event = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match events.recv().await {
                Ok(event @ Event::StartFailed { .. }) => return event,
                Ok(_) => continue,
                Err(e) => panic!("{e}"),
            }
        }
    })
    .await
    .expect("a StartFailed event");
    assert!(
        matches!(&event, Event::StartFailed { id, kind: "blocked", retrying: true, diagnostic }
            if id == ID && diagnostic.contains("missing relation")),
        "{event:?}"
    );

    db.exec(&items_sql(200)).await;
    host.embedded.retry_auto_starts();
    let engine = host.engine();
    support::eventually("the retried start", || async {
        engine.get(ID).await.unwrap().state != State::Pending
    })
    .await;
    let row = engine.get(ID).await.unwrap();
    assert!(row.last_error.is_none(), "{:?}", row.last_error);
    completed_and_ready(&host, &db).await;
    host.stop().await;
}

/// EMB-8: `wait_for` on a `blocked` backfill returns the typed error at
/// once when `blocked` is not among the states waited for, with the row's
/// diagnostic and the step for a blocked row (retry); waiting for
/// `blocked` itself returns the row. Guard: the check of a blocked row in
/// `wait_for` (without it the first wait times out).
#[actix_rt::test]
async fn emb08_wait_for_a_blocked_row_not_waited_for_is_an_error() {
    let db = test_db().await;
    db.exec(&items_sql(30)).await;
    let hooks = Hooks::new();
    *hooks.fail_validate.lock() = Some(backfill::repair::RepairError::Blocked(
        "grant the role, then retry".into(),
    ));
    let engine = waiter(&db, &hooks).await;
    engine.start(ID).await.unwrap();
    support::drive(&engine, "w1").await;
    assert_eq!(state(&engine).await, State::Blocked);

    let waited = engine
        .wait_for(ID, &[State::Completed], Duration::from_secs(10))
        .await;
    match &waited {
        Err(
            error @ WaitError::NeedsOperator {
                state: State::Blocked,
                diagnostic: Some(diagnostic),
                ..
            },
        ) => {
            assert!(diagnostic.contains("grant the role"), "{diagnostic}");
            let text = error.to_string();
            assert!(text.contains("until an operator retries it"), "{text}");
        }
        other => panic!("expected NeedsOperator, got {other:?}"),
    }
    let row = engine
        .wait_for(
            ID,
            &[State::Blocked, State::Completed],
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert_eq!(row.state, State::Blocked);
}
