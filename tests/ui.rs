//! CT-12: the web client. Its projection logic (`src/http/ui/app.js`) is
//! tested with node's built-in runner (`tests/ui/app.test.js`), and the
//! host serves the page and script on the admin listener.

mod support;

use backfill::host::{Host, HostConfig};
use backfill::throttle::settings::Field;
use std::process::Command;
use support::http::get;
use support::test_db;

/// Runs `node --test tests/ui/`: unknown and failure states stay honest and
/// only the contract's actions are offered (CT-12).
#[test]
fn ct12_client_projection_tests_pass_under_node() {
    let output = Command::new(support::prereq::node())
        .args(["--test", "tests/ui/"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run node");
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("# fail 0"), "{text}");
}

/// THR-4: the settings form offers exactly the settings the server takes,
/// with the server's ranges in its hints: `SETTINGS` in app.js, read by
/// node, against `Field::ALL`. A field added, renamed or re-ranged on one
/// side only fails here.
#[test]
fn thr04_client_settings_are_the_servers_fields_and_ranges() {
    let script = "const s = require('./src/http/ui/app.js').SETTINGS; \
                  process.stdout.write(JSON.stringify(s.map((f) => [f.name, f.min, f.max])))";
    let output = Command::new(support::prereq::node())
        .args(["-e", script])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run node");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let client: Vec<(String, u64, u64)> =
        serde_json::from_slice(&output.stdout).expect("SETTINGS as JSON");
    let server: Vec<(String, u64, u64)> = Field::ALL
        .into_iter()
        .map(|f| (f.name().to_string(), f.range().0, f.range().1))
        .collect();
    assert_eq!(client, server);
}

/// The admin listener serves the client; the page itself carries no data.
#[actix_rt::test]
async fn ct12_admin_listener_serves_the_client() {
    let db = test_db().await;
    let mut config = HostConfig::new(db.url.clone());
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.admin_listen = "127.0.0.1:0".parse().unwrap();
    config.auto_backfills = false;
    let host = Host::start(config, backfill::Registry::new())
        .await
        .unwrap();
    let page = get(host.admin_addr, "/ui").await;
    assert_eq!(page.status, 200);
    assert!(page.text.contains("/ui/app.js"));
    let script = get(host.admin_addr, "/ui/app.js").await;
    assert_eq!(script.status, 200);
    assert!(script.text.contains("Idempotency-Key"));
    host.stop().await;
}
