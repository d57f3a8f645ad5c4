//! Repairs that serve a fleet (docs/CONTRACT.md section 12.8), through the
//! production startup path (`Host::start`), the runtime, the admin API
//! over HTTP and a real PostgreSQL.
//!
//! Index:
//! - FLT-4 a dependent repair waits, unclaimed and visible as
//!   `waiting_for`, while its dependency runs, and runs once it
//!   completed: `flt04_a_dependent_*`; automatic mode starts both and
//!   honours the order: `flt04_automatic_mode_*`; an unknown dependency
//!   or a cycle is a startup error naming the IDs, before anything
//!   reaches PostgreSQL: `flt04_an_unknown_dependency_or_a_cycle_*`
//!
//! The dependent repair writes, into every row it fixes, how many rows
//! of its dependency's table were fixed at that moment, so the order of
//! the two runs is read from the data itself, not from timing.

mod support;

use backfill::host::{Host, HostConfig, HostError};
use backfill::repair::{DefinitionError, Registry};
use backfill::{SqlRepair, State};
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
