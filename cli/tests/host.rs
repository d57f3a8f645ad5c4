//! CT-13: the configuration matrix through the real startup path
//! (`Host::start`, the same function `backfill serve` runs) and the real
//! `/readyz` listener, against a real PostgreSQL.
//!
//! Index:
//! - (migrate off, auto off): `ct13_off_off_*`
//! - (migrate off, auto on):  `ct13_off_on_*`, `ct13_migrate_off_missing_schema_*`,
//!   `ct13_auto_start_retries_*`
//! - (migrate on,  auto off): `ct13_on_off_*`
//! - (migrate on,  auto on):  `ct13_on_on_*`
//! - CFG-2 restart rebuilds the gate: `ct13_restart_*`; NOTIFY as a hint:
//!   `clm01_notify_*`; CFG-3 and OBS-1/2 (admin listener, /metrics) inside
//!   `ct13_off_on_*`; OBS-2 unknown is not zero: `obs02_*`
//! - OBS-1 durations of execution and validation as histograms in
//!   seconds, every family with HELP and TYPE: `obs01_*`
//! - AUTH-3 the Host allow-list of a started trusted-network host and its
//!   refusal of a non-loopback address: `auth03_*`; AUTH-4 the headers of
//!   the admin listener, unknown paths and `/metrics` included: `auth04_*`
//!
//! Gates are held closed deterministically with a second session's row lock
//! (the batches wait on it), never with sleeps.

#[path = "../../tests/support/mod.rs"]
mod support;

use backfill::engine::EngineConfig;
use backfill::host::{Host, HostConfig, HostError};
use backfill::runtime::RuntimeConfig;
use backfill_cli::example::{self, ExampleApp};
use diesel_async::{AsyncPgConnection, SimpleAsyncConnection};
use std::time::Duration;
use support::http::get;
use support::{eventually, test_db, TestDb};

fn host_config(db: &TestDb, migrate: bool, auto: bool) -> HostConfig {
    let ttl = Duration::from_secs(10);
    let mut config = HostConfig::new(db.url.clone());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.admin_listen = "127.0.0.1:0".parse().unwrap();
    config.migrate = migrate;
    config.auto_backfills = auto;
    config.pool_size = Some(8);
    config.engine = EngineConfig {
        lease_ttl: ttl,
        lock_timeout: Duration::from_secs(30),
        ..EngineConfig::default()
    };
    config.runtime = RuntimeConfig {
        worker_id: "host-test".into(),
        poll_interval: Duration::from_millis(50),
        ..RuntimeConfig::default()
    };
    config
}

/// The example application with batches of 50 keys.
fn app() -> ExampleApp {
    ExampleApp { batch_size: 50 }
}

/// A database with the example schema and `rows` seeded events.
async fn app_db(rows: u64, bad: u64) -> TestDb {
    let db = test_db().await;
    example::migrate(&db.url).await.unwrap();
    example::seed(&db.pool, rows, bad).await.unwrap();
    db
}

async fn states(db: &TestDb) -> Vec<(String, String)> {
    let ids = example::repair_ids();
    let mut out = Vec::new();
    for id in ids {
        let state = db
            .text(&format!(
                "SELECT state AS v FROM backfill WHERE id = '{id}'"
            ))
            .await
            .unwrap_or_else(|| "missing".into());
        out.push((id.to_string(), state));
    }
    out
}

async fn all_in(db: &TestDb, state: &str) -> bool {
    states(db).await.iter().all(|(_, s)| s == state)
}

/// Hold a row lock on one event so every repair's batch waits on it.
async fn hold_event_lock(db: &TestDb) -> AsyncPgConnection {
    let mut conn = db.connect().await;
    conn.batch_execute(
        "BEGIN; SELECT id FROM events WHERE id = (SELECT min(id) FROM events) FOR UPDATE",
    )
    .await
    .unwrap();
    conn
}

/// CT-13 (off, off): no migrations, `pending` rows are not started, no
/// backfill gate (200 while work is pending); work started by hand is still
/// recovered (CFG-4). Guard: the manual-mode branch of `Readiness` and the
/// auto-start switch.
#[actix_rt::test]
async fn ct13_off_off_manual_never_gates_and_recovers_started_work() {
    let db = app_db(300, 0).await;
    let host = Host::start(host_config(&db, false, false), app())
        .await
        .unwrap();
    let ready = get(host.serving_addr, "/readyz").await;
    assert_eq!(ready.status, 200, "{}", ready.text);
    assert_eq!(ready.body["backfill_gate"]["mode"], "manual");
    assert!(all_in(&db, "pending").await, "manual mode starts nothing");

    // An operator starts one by hand; the runtime recovers it even though
    // automatic mode is off.
    host.engine().start(example::TOUCH_COUNT_ID).await.unwrap();
    host.runtime().wake();
    eventually("the started backfill completes", || async {
        db.text(&format!(
            "SELECT state AS v FROM backfill WHERE id = '{}'",
            example::TOUCH_COUNT_ID
        ))
        .await
        .as_deref()
            == Some("completed")
    })
    .await;
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill WHERE state = 'pending'")
            .await,
        3
    );
    assert_eq!(get(host.serving_addr, "/readyz").await.status, 200);
    host.stop().await;
}

/// CT-13 (off, on): with a compatible schema, required backfills start and
/// readiness stays 503 (naming each gating ID and state) until all are
/// `completed`. Guard: the backfill input of `Readiness::evaluate`.
#[actix_rt::test]
async fn ct13_off_on_gates_until_every_required_backfill_completes() {
    let db = app_db(300, 0).await;
    let mut lock = hold_event_lock(&db).await;
    let host = Host::start(host_config(&db, false, true), app())
        .await
        .unwrap();
    let ready = get(host.serving_addr, "/readyz").await;
    assert_eq!(ready.status, 503, "{}", ready.text);
    assert_eq!(ready.body["ready"], false);
    let gating = ready.body["backfill_gate"]["gating"].as_array().unwrap();
    assert_eq!(gating.len(), 4, "{}", ready.text);
    assert!(gating.iter().all(|g| g["state"] == "running"));
    assert_eq!(get(host.serving_addr, "/livez").await.status, 200);
    // CFG-3: the admin boundary answers while serving is gated.
    assert_ne!(host.admin_addr, host.serving_addr);
    let gated = get(host.admin_addr, "/metrics").await;
    assert_eq!(gated.status, 200);
    assert!(
        gated
            .text
            .contains("backfill_gate_open{mode=\"automatic\"} 0"),
        "{}",
        gated.text
    );

    lock.batch_execute("ROLLBACK").await.unwrap();
    eventually("ready", || async {
        get(host.serving_addr, "/readyz").await.status == 200
    })
    .await;
    assert!(all_in(&db, "completed").await);
    // OBS-1/OBS-2: lifecycle counts, gate and runtime counters, with
    // bounded labels only (no stable IDs).
    let metrics = get(host.admin_addr, "/metrics").await.text;
    assert!(
        metrics.contains("backfill_backfills{state=\"completed\"} 4"),
        "{metrics}"
    );
    assert!(metrics.contains("backfill_gate_open{mode=\"automatic\"} 1"));
    assert!(!metrics.contains("backfill_batches_committed_total 0\n"));
    assert!(!metrics.contains("events."), "no stable IDs in metrics");
    host.stop().await;
}

/// The value of the one sample named exactly `series` (name and labels).
fn sample(text: &str, series: &str) -> f64 {
    let values: Vec<f64> = text
        .lines()
        .filter_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().expect("a number"))
        .collect();
    assert_eq!(values.len(), 1, "one sample {series}: {text}");
    values[0]
}

/// One histogram series of `family` with `outcome`: checks its bucket
/// lines (upper bounds ascending from 1 ms to 60 s then `+Inf`, counts
/// cumulative, `+Inf` equal to `_count`) and returns `(count, sum)`.
fn histogram(text: &str, family: &str, outcome: &str) -> (u64, f64) {
    let prefix = format!("{family}_bucket{{outcome=\"{outcome}\",le=\"");
    let buckets: Vec<(f64, u64)> = text
        .lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .map(|rest| {
            let (le, count) = rest.split_once("\"} ").expect("le=\"..\"} count");
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().expect("a bound")
            };
            (le, count.parse().expect("a count"))
        })
        .collect();
    assert!(buckets.len() >= 2, "{family} {outcome} buckets: {text}");
    assert_eq!(buckets[0].0, 0.001, "first bucket 1 ms");
    assert_eq!(
        buckets[buckets.len() - 2].0,
        60.0,
        "last finite bucket 60 s"
    );
    assert_eq!(buckets[buckets.len() - 1].0, f64::INFINITY);
    for pair in buckets.windows(2) {
        assert!(pair[0].0 < pair[1].0, "bounds ascend: {buckets:?}");
        assert!(pair[0].1 <= pair[1].1, "counts are cumulative: {buckets:?}");
    }
    let labels = format!("{{outcome=\"{outcome}\"}}");
    let count = sample(text, &format!("{family}_count{labels}")) as u64;
    let sum = sample(text, &format!("{family}_sum{labels}"));
    assert_eq!(buckets[buckets.len() - 1].1, count, "+Inf = _count");
    (count, sum)
}

/// OBS-1: after the example application's repairs ran real batches and
/// validations against PostgreSQL, `/metrics` exports their durations as
/// histograms in seconds (`backfill_batch_duration_seconds`,
/// `backfill_validation_duration_seconds`), labelled only by outcome:
/// one committed observation per committed batch, one completed per
/// completed validation, positive sums, well-formed buckets; every family
/// has HELP and TYPE, every counter ends in `_total`, and no family is in
/// milliseconds. Guards: `observe_batch` in the runner and
/// `observe_validation` in the validator (without them the counts stay 0).
#[actix_rt::test]
async fn obs01_batch_and_validation_durations_are_histograms_in_seconds() {
    let db = app_db(300, 0).await;
    let host = Host::start(host_config(&db, false, true), app())
        .await
        .unwrap();
    eventually("every repair completed", || async {
        all_in(&db, "completed").await
    })
    .await;
    // The validator counts a validation after its completion committed,
    // so the row can read `completed` a moment before the count does; it
    // observes the duration just before it counts.
    eventually("every validation counted", || async {
        get(host.admin_addr, "/metrics")
            .await
            .text
            .contains("\nbackfill_validations_completed_total 4\n")
    })
    .await;
    let text = get(host.admin_addr, "/metrics").await.text;

    let committed = sample(&text, "backfill_batches_committed_total") as u64;
    // 300 rows in batches of 50, for each of the four repairs.
    assert!(committed >= 24, "{text}");
    let (count, sum) = histogram(&text, "backfill_batch_duration_seconds", "committed");
    assert_eq!(count, committed, "one observation per committed batch");
    assert!(sum > 0.0 && sum < 60.0 * count as f64, "seconds: {sum}");
    for outcome in ["stale", "error"] {
        histogram(&text, "backfill_batch_duration_seconds", outcome);
    }
    let (count, sum) = histogram(&text, "backfill_validation_duration_seconds", "completed");
    assert_eq!(count, 4, "one per completed validation");
    assert_eq!(
        sample(&text, "backfill_validations_completed_total") as u64,
        4
    );
    assert!(sum > 0.0, "seconds: {sum}");

    // Every family: HELP and TYPE, counters named `_total`, base units.
    let mut types = std::collections::BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("# TYPE name kind");
            types.insert(name.to_string(), kind.to_string());
        }
    }
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap_or_default();
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|s| name.strip_suffix(s))
            .find(|f| types.get(*f).map(String::as_str) == Some("histogram"))
            .unwrap_or(name);
        let kind = types
            .get(family)
            .unwrap_or_else(|| panic!("no TYPE for {name}"));
        assert!(
            text.contains(&format!("# HELP {family} ")),
            "no HELP for {family}"
        );
        assert_eq!(kind == "counter", family.ends_with("_total"), "{family}");
        assert!(!family.contains("milli"), "base units: {family}");
    }
    assert!(!text.contains("events."), "no stable IDs in metrics");
    host.stop().await;
}

/// CT-13 (off, *): missing schema with `--migrate off` fails startup with a
/// clear message naming what is missing, and changes no schema.
#[actix_rt::test]
async fn ct13_migrate_off_missing_schema_fails_startup_naming_it() {
    let db = test_db().await; // framework tables only, no `events`
    let err = Host::start(host_config(&db, false, true), app())
        .await
        .err()
        .expect("startup must fail");
    assert!(matches!(err, HostError::Schema(_)), "{err}");
    assert!(err.to_string().contains("events"), "{err}");
    assert_eq!(
        err.to_string().matches("schema is not compatible").count(),
        1,
        "said once: {err}"
    );
    assert_eq!(
        db.scalar(
            "SELECT count(*) AS v FROM information_schema.tables WHERE table_name = 'events'"
        )
        .await,
        0,
        "a backfill never changes schema"
    );
}

/// CT-13 (on, off): migrations run (the app schema appears), `pending`
/// rows are not started, readiness is never gated by backfills.
#[actix_rt::test]
async fn ct13_on_off_migrates_and_never_gates() {
    let db = test_db().await;
    let host = Host::start(host_config(&db, true, false), app())
        .await
        .unwrap();
    assert_eq!(
        db.scalar(
            "SELECT count(*) AS v FROM information_schema.tables WHERE table_name = 'events'"
        )
        .await,
        1
    );
    assert_eq!(get(host.serving_addr, "/readyz").await.status, 200);
    assert!(all_in(&db, "pending").await);
    host.stop().await;
}

/// CT-13 (on, on) with recovery: the gate stays closed while a required
/// backfill is `paused`, `blocked` and `failed`, and opens only after each
/// is recovered through the store path and validated. Guards: CFG-1 (every
/// non-completed state gates) and VAL-1 (the bound alone never opens it).
#[actix_rt::test]
async fn ct13_on_on_gates_through_paused_blocked_failed_and_recovers() {
    let db = test_db().await;
    example::migrate(&db.url).await.unwrap();
    example::seed(&db.pool, 300, 5).await.unwrap();
    // A pre-existing touch_count makes the non-idempotent repair's
    // validation fail (it requires exactly 1): `failed`.
    db.exec("UPDATE events SET touch_count = 7 WHERE id = (SELECT max(id) FROM events)")
        .await;
    let mut lock = hold_event_lock(&db).await;
    let host = Host::start(host_config(&db, true, true), app())
        .await
        .unwrap();
    // Pause one while everything waits on the lock.
    host.engine().pause(example::AUTHOR_NORM_ID).await.unwrap();
    lock.batch_execute("ROLLBACK").await.unwrap();

    eventually("blocked and failed appear", || async {
        let s = states(&db).await;
        s.iter().any(|(_, st)| st == "blocked") && s.iter().any(|(_, st)| st == "failed")
    })
    .await;
    let ready = get(host.serving_addr, "/readyz").await;
    assert_eq!(ready.status, 503);
    let gating: Vec<String> = ready.body["backfill_gate"]["gating"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["state"].as_str().unwrap().to_string())
        .collect();
    for expected in ["paused", "blocked", "failed"] {
        assert!(gating.iter().any(|s| s == expected), "{gating:?}");
    }

    // Recover each through the store path.
    db.exec("UPDATE events SET tags = '[]'::jsonb WHERE jsonb_typeof(tags) <> 'array'")
        .await;
    db.exec("UPDATE events SET touch_count = 1 WHERE touch_count <> 1")
        .await;
    for (id, state) in states(&db).await {
        match state.as_str() {
            "paused" => {
                host.engine().resume(&id).await.unwrap();
            }
            "blocked" | "failed" => {
                host.engine().retry(&id).await.unwrap();
            }
            _ => {}
        }
    }
    host.runtime().wake();
    eventually("ready after recovery", || async {
        get(host.serving_addr, "/readyz").await.status == 200
    })
    .await;
    assert!(all_in(&db, "completed").await);
    host.stop().await;
}

/// CFG-2: a restart rebuilds the gate from PostgreSQL only: a second host
/// on a database whose required backfills are mid-flight is 503 from its
/// first answer, and 200 from its first answer once they are completed.
#[actix_rt::test]
async fn ct13_restart_rebuilds_gate_from_postgres() {
    let db = app_db(200, 0).await;
    let mut lock = hold_event_lock(&db).await;
    let first = Host::start(host_config(&db, false, true), app())
        .await
        .unwrap();
    first.stop().await;
    let second = Host::start(host_config(&db, false, true), app())
        .await
        .unwrap();
    assert_eq!(get(second.serving_addr, "/readyz").await.status, 503);
    lock.batch_execute("ROLLBACK").await.unwrap();
    eventually("completed", || async { all_in(&db, "completed").await }).await;
    second.stop().await;
    let third = Host::start(host_config(&db, false, true), app())
        .await
        .unwrap();
    assert_eq!(get(third.serving_addr, "/readyz").await.status, 200);
    third.stop().await;
}

/// docs/CONTRACT.md section 0: NOTIFY is a wake-up hint. With a poll interval far
/// longer than the test's deadline, a backfill started by another process
/// (another engine on another pool) is picked up at once because the start
/// commits a NOTIFY the host LISTENs for. Guard: `wake_notify` in the start
/// transaction and the host's listener (without them this waits 10 min).
#[actix_rt::test]
async fn clm01_notify_wakes_the_supervisor_as_a_hint() {
    let db = app_db(200, 0).await;
    let mut config = host_config(&db, false, false);
    config.runtime.poll_interval = Duration::from_secs(600);
    let host = Host::start(config, app()).await.unwrap();
    // Let the listener connect; its first wake finds nothing to do.
    let other = backfill::Engine::new(
        backfill::__private::store::build_pool(&db.url, 2)
            .await
            .unwrap(),
        example::registry(50).unwrap(),
        EngineConfig::default(),
    )
    .unwrap();
    eventually("the listener is connected", || async {
        db.scalar(
            "SELECT count(*) AS v FROM pg_stat_activity \
             WHERE datname = current_database() AND query LIKE 'LISTEN%'",
        )
        .await
            > 0
    })
    .await;
    other.start(example::AUTHOR_NORM_ID).await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let state = db
            .text(&format!(
                "SELECT state AS v FROM backfill WHERE id = '{}'",
                example::AUTHOR_NORM_ID
            ))
            .await;
        if state.as_deref() == Some("completed") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not woken by NOTIFY"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    host.stop().await;
}

/// OBS-2, ADM-3: when PostgreSQL cannot be read, `/metrics` says the
/// lifecycle counts and the automatic gate are unknown
/// (`backfill_state_known 0`, no gate samples), never zero. In particular
/// it exports no `backfill_gate_gating 0`, which would read as "nothing
/// keeps the gate closed". Guard: the known-gate check before
/// `backfill_gate_gating` in src/http/metrics.rs (without it the count of
/// an unread gate is exported as 0).
#[actix_rt::test]
async fn obs02_metrics_of_an_unreadable_database_are_unknown_not_zero() {
    use backfill::http::metrics::MetricsSource;
    use backfill::readiness::Readiness;
    // A database that does not exist on a live server: every checkout
    // fails (after the pool's timeout).
    let url = support::with_database(support::server_url(), "bft_no_such_database");
    let pool = backfill::__private::store::build_pool(&url, 1)
        .await
        .expect("pool");
    let engine = backfill::Engine::new(
        pool.clone(),
        backfill::Registry::new(),
        EngineConfig::default(),
    )
    .expect("engine");
    let source = actix_web::web::Data::new(MetricsSource {
        pool: pool.clone(),
        engine,
        readiness: Readiness::new(pool, true, vec!["events.required".into()]),
        runtime: Default::default(),
    });
    let server = actix_web::HttpServer::new(move || {
        let source = source.clone();
        actix_web::App::new().configure(move |cfg| backfill::http::metrics::configure(cfg, source))
    })
    .workers(1)
    .bind(("127.0.0.1", 0))
    .expect("bind");
    let addr = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);
    let metrics = get(addr, "/metrics").await;
    assert_eq!(metrics.status, 200);
    let text = metrics.text;
    assert!(text.contains("backfill_state_known 0"), "{text}");
    let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
    for name in [
        "backfill_gate_open",
        "backfill_gate_gating",
        "backfill_backfills",
    ] {
        assert!(
            !samples.iter().any(|l| l.starts_with(name)),
            "{name} exported while unknown: {text}"
        );
    }
    handle.stop(true).await;
}

/// CT-13 (off, on), RT-1: an automatic start that fails for a passing
/// reason (here the events table is locked at startup, so capturing the
/// bound hits the lock timeout) is tried again in the background: once the
/// lock is gone, every required backfill starts and completes and the
/// gate opens, with no operator action. Guard: `retry_auto_starts` (without
/// it the rows stay `pending` and the process unready until someone starts
/// them by hand).
#[actix_rt::test]
async fn ct13_auto_start_retries_after_a_transient_failure() {
    let db = app_db(200, 0).await;
    let mut lock = db.connect().await;
    lock.batch_execute("BEGIN; LOCK events IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let mut config = host_config(&db, false, true);
    config.engine.lock_timeout = Duration::from_millis(200);
    let host = Host::start(config, app()).await.unwrap();
    assert!(all_in(&db, "pending").await, "{:?}", states(&db).await);
    assert_eq!(get(host.serving_addr, "/readyz").await.status, 503);

    lock.batch_execute("ROLLBACK").await.unwrap();
    eventually("every required backfill completes", || async {
        all_in(&db, "completed").await
    })
    .await;
    assert_eq!(get(host.serving_addr, "/readyz").await.status, 200);
    host.stop().await;
}

/// A host of no definitions on two fresh loopback ports.
fn bare_config(db: &TestDb) -> HostConfig {
    let mut config = HostConfig::new(db.url.clone());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.admin_listen = "127.0.0.1:0".parse().unwrap();
    config.auto_backfills = false;
    config
}

/// AUTH-3 through `Host::start`: in trusted-network mode the admin
/// listener answers its own address, the loopback names and a configured
/// name, and refuses any other Host with 421; a non-loopback admin address
/// is a startup error (`HostError::Config`) unless
/// `admin_allow_remote_trusted` is set. Guards: the allow-list built in
/// `HostConfig::allowed_hosts` and `HostConfig::check_trusted_listen`.
#[actix_rt::test]
async fn auth03_trusted_host_answers_only_its_names() {
    use support::http::request;
    let db = test_db().await;
    let mut config = bare_config(&db);
    config.admin_auth = backfill::admin::AuthConfig::TrustedNetwork;
    config.admin_allowed_hosts = vec!["ops.example".into()];
    // A loopback address outside LOOPBACK_HOSTS, so only the listen
    // address's own entry lets its Host through.
    config.admin_listen = "127.0.0.2:0".parse().unwrap();
    let mut remote = config.clone();
    remote.admin_listen = "0.0.0.0:0".parse().unwrap();
    match Host::start(remote, backfill::Registry::new()).await {
        Err(HostError::Config(text)) => {
            assert!(text.contains("--admin-allow-remote-trusted"), "{text}")
        }
        Err(other) => panic!("not a configuration error: {other}"),
        Ok(host) => {
            host.stop().await;
            panic!("trusted-network mode started on 0.0.0.0");
        }
    }
    let host = Host::start(config, backfill::Registry::new())
        .await
        .expect("start");
    let addr = host.admin_addr;
    let port = addr.port().to_string();
    let list = "/admin/backfills";
    for name in [
        addr.to_string(),
        format!("localhost:{port}"),
        "ops.example".into(),
    ] {
        let r = request(addr, "GET", list, &[("Host", &name)], None).await;
        assert_eq!(r.status, 200, "{name}: {}", r.text);
    }
    let r = request(addr, "GET", list, &[("Host", "evil.example")], None).await;
    assert_eq!(r.status, 421, "{}", r.text);
    assert_eq!(r.body["error"], "misdirected_request");
    host.stop().await;
}

/// AUTH-4 through `Host::start`: every answer of the dedicated admin
/// listener, a path no route serves and `/metrics` included, carries the
/// security headers. Guard: `http::security_headers` on the admin
/// listener's App and resources.
#[actix_rt::test]
async fn auth04_admin_listener_answers_carry_the_security_headers() {
    let db = test_db().await;
    let host = Host::start(bare_config(&db), backfill::Registry::new())
        .await
        .expect("start");
    for (path, status) in [
        ("/nowhere", 404),
        ("/metrics", 200),
        ("/ui", 200),
        ("/admin/audit", 401),
    ] {
        let r = get(host.admin_addr, path).await;
        assert_eq!(r.status, status, "{path}: {}", r.text);
        let csp = r.header("content-security-policy");
        assert_eq!(csp.len(), 1, "{path}: {}", r.head);
        assert!(csp[0].starts_with("default-src 'none';"), "{path}: {csp:?}");
        assert!(
            csp[0].ends_with("frame-ancestors 'none'"),
            "{path}: {csp:?}"
        );
        for (name, value) in [
            ("x-content-type-options", "nosniff"),
            ("referrer-policy", "no-referrer"),
            ("x-frame-options", "DENY"),
            ("cache-control", "no-store"),
        ] {
            assert_eq!(r.header(name), [value], "{path}: {name}");
        }
    }
    host.stop().await;
}
