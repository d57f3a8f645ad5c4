//! THR-7: a latency budget held on the host's own request latencies,
//! recorded by `backfill::http::RecordLatency` on a real actix-web
//! service the test serves, through the production runtime (`Embedded`)
//! against real PostgreSQL.

use super::support::{engine_config, test_db, Deadline};
use backfill::host::{Embedded, HostConfig};
use backfill::http::RecordLatency;
use backfill::repair::Registry;
use backfill::throttle::latency::{Budget, LatencyConfig, LatencyHandle, LatencySource, Target};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ID: &str = "items.host-budget.v1";

/// THR-7: while the host's own route answers slower than the budget's
/// bound, the budget cuts the backfill's pace, its condition naming the
/// host as the source and its reading over the bound; once the route
/// answers fast again, the budget releases. The durations are the
/// middleware's, measured on real HTTP requests to a real service.
/// Guard: `RecordLatency` recording on the handle (without it the readings
/// stay unknown: no cut, and the condition never shows a reading).
#[actix_rt::test]
async fn thr07_the_hosts_own_request_latency_paces_the_backfill() {
    let db = test_db().await;
    let repair = super::budget::delayed_items(&db, ID, 200_000).await;
    let handle = LatencyHandle::new();
    let mut config = HostConfig::new(db.url.clone());
    config.migrate = true;
    config.auto_backfills = false;
    config.engine = engine_config();
    config.runtime.poll_interval = Duration::from_millis(50);
    config.latency = LatencyConfig {
        source: LatencySource::Host(handle.clone()),
        window: Duration::from_secs(1),
        min_samples: 3,
        default_budget: Some(Budget {
            percentile: 90,
            target: Target::Absolute(Duration::from_millis(60)),
        }),
        ..LatencyConfig::default()
    };
    let spawned = Embedded::spawn(config, Registry::new().with(repair).expect("registers"))
        .await
        .expect("host");

    // The host's own service: one route whose answer takes as long as the
    // test says, behind the middleware.
    let delay_ms = Arc::new(AtomicU64::new(200));
    let server = {
        let (handle, delay_ms) = (handle.clone(), delay_ms.clone());
        actix_web::HttpServer::new(move || {
            let delay_ms = delay_ms.clone();
            actix_web::App::new()
                .wrap(RecordLatency::new(handle.clone()))
                .route(
                    "/work",
                    actix_web::web::get().to(move || {
                        let delay = Duration::from_millis(delay_ms.load(Ordering::Relaxed));
                        async move {
                            actix_rt::time::sleep(delay).await;
                            "done"
                        }
                    }),
                )
        })
        .workers(1)
        .bind(("127.0.0.1", 0))
        .expect("bind")
    };
    let addr = server.addrs()[0];
    let server = server.run();
    let server_handle = server.handle();
    actix_rt::spawn(server);
    // The application's traffic: one request after another, all along.
    let traffic = actix_rt::spawn(async move {
        loop {
            let r = super::support::http::get(addr, "/work").await;
            assert_eq!(r.status, 200);
        }
    });

    spawned.engine.start(ID).await.expect("start");
    spawned.runtime.wake();
    let sql = format!(
        "SELECT (SELECT concat_ws('|', throttle->>'signal', \
             ((throttle->>'value')::float8 > (throttle->>'threshold')::float8)::text, \
             throttle->>'text') FROM backfill WHERE id = '{ID}' AND owner IS NOT NULL \
             AND (throttle->>'generation')::bigint = generation) AS v"
    );
    let condition = || db.text(&sql);
    let mut deadline = Deadline::new("the host's latency cuts the pace");
    let cut = loop {
        if let Some(c) = condition().await.filter(|c| c.starts_with("latency|true|")) {
            break c;
        }
        deadline.tick().await;
    };
    assert!(cut.contains("(host)"), "{cut}");

    // The route answers fast again: the budget releases while it runs.
    delay_ms.store(1, Ordering::Relaxed);
    let mut deadline = Deadline::new("the budget releases once the host is fast");
    while condition().await.is_some() {
        deadline.tick().await;
    }
    assert_eq!(
        db.text(&format!(
            "SELECT state AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await
        .as_deref(),
        Some("running"),
        "released while it ran"
    );
    traffic.abort();
    server_handle.stop(true).await;
    spawned.stop().await;
}
