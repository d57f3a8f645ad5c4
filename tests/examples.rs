//! The examples under `examples/`, run as a newcomer runs them, against
//! PostgreSQL: each does what its header says (EMB-1, EMB-7, EMB-9).
//!
//! Index:
//! - `embed`: serves, its backfill completes and `/readyz` opens, and
//!   SIGTERM drains and exits 0: `emb01_*`
//! - `tokio_service`: from `#[tokio::main]`, starts the backfill, awaits
//!   its completion and exits 0: `emb07_*`
//! - `actix_service`: on a busy port it leaves with `?` after the start,
//!   without a panic: `emb09_*`
//!
//! Cargo builds the examples with `cargo test` (without a target filter)
//! next to `deps/`; a test run on its own after a change needs `cargo
//! build -p backfill --examples` first, and says so when one is missing.

mod support;

use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::http::get;
use support::test_db;

/// The items table every example repairs, `rows` of them with mixed-case
/// emails.
fn items(rows: i64) -> String {
    format!(
        "CREATE TABLE items (id bigint PRIMARY KEY, email text, email_norm text);
         INSERT INTO items (id, email) SELECT g, 'User' || g || '@Example.COM'
           FROM generate_series(1, {rows}) AS g"
    )
}

/// The example `name`'s binary as a command, its stderr piped.
fn example(name: &str) -> Command {
    let path = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.join("examples").join(name)))
        .filter(|path| path.exists())
        .unwrap_or_else(|| {
            panic!("examples/{name} is not built: `cargo build -p backfill --examples`")
        });
    let mut command = Command::new(path);
    command
        .env("RUST_BACKTRACE", "0")
        .stdin(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Wait up to 90 s for `child` to end on its own.
async fn ended(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("the example did not end {what} (a stale build? `cargo build -p backfill --examples`)");
        }
        actix_rt::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Everything `child` wrote to stderr (after it ended).
fn stderr_of(child: &mut Child) -> String {
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    stderr
}

/// EMB-7: `tokio_service` starts the repair from a plain tokio `main`,
/// awaits its completion by state and exits 0 with every row repaired,
/// as its header says; and (EMB-11) the runtime's events reach its log
/// through the one line that installs the library's log format. Guards:
/// the example's start and `wait_for`, and `logging::install` (without it
/// stderr holds no event).
#[actix_rt::test]
async fn emb07_tokio_service_example_completes_the_repair_and_exits() {
    let db = test_db().await;
    db.exec(&items(300)).await;
    let mut child = example("tokio_service")
        .env("DATABASE_URL", &db.url)
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the example");
    let status = ended(&mut child, "after its backfill").await;
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().expect("stdout"), &mut stdout)
        .expect("read stdout");
    let stderr = stderr_of(&mut child);
    assert_eq!(status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("items.email-norm.v1 ended completed"),
        "{stdout}"
    );
    for event in ["registered", "claim_acquired", "completed"] {
        assert!(
            stderr.contains(&format!("event=\"{event}\"")),
            "no {event} event in the log: {stderr}"
        );
    }
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE email_norm = lower(email)")
            .await,
        300
    );
}

/// EMB-1: `embed` migrates its own table, serves its route, completes its
/// backfill so that `/readyz` opens, and drains on SIGTERM, exiting 0 with
/// its claim released. Guard: the example's `Host::start` and
/// `run_until_signal`.
#[actix_rt::test]
async fn emb01_embed_example_serves_completes_and_drains_on_sigterm() {
    let db = test_db().await;
    let mut child = example("embed")
        .env("DATABASE_URL", &db.url)
        .env("BACKFILL_OPERATOR_TOKEN", "emb01-operator-token-0123")
        .env("LISTEN", "127.0.0.1:0")
        .env("ADMIN_LISTEN", "127.0.0.1:0")
        .stdout(Stdio::piped())
        .spawn()
        .expect("run the example");
    // Its first line names the addresses it bound: "serving ADDR (...)".
    let mut stdout = std::io::BufReader::new(child.stdout.take().expect("stdout"));
    let line = actix_rt::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).map(|_| line)
    })
    .await
    .expect("join")
    .expect("read the first line");
    let serving: std::net::SocketAddr = line
        .strip_prefix("serving ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|addr| addr.parse().ok())
        .unwrap_or_else(|| panic!("the serving line: {line:?}"));
    assert!(line.contains("; admin "), "{line}");
    support::eventually("the backfill completes and /readyz opens", || async move {
        get(serving, "/readyz").await.status == 200
    })
    .await;
    assert_eq!(get(serving, "/hello").await.text, "hello");
    let pid = child.id().to_string();
    let killed = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let status = ended(&mut child, "on SIGTERM").await;
    let stderr = stderr_of(&mut child);
    assert_eq!(status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(
        db.text("SELECT state::text AS v FROM backfill WHERE id = 'items.email-norm.v1'")
            .await
            .as_deref(),
        Some("completed")
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE email_norm IS DISTINCT FROM lower(email)")
            .await,
        0
    );
}

/// EMB-9: an embedder whose service fails after the runtime started (here
/// `examples/actix_service.rs` on a port already taken) leaves `main` with
/// `?`, without `stop()`. The process ends with the service's error and
/// exit status 1, and no panic: the actors that never ran, polled once
/// more while the actix system is dropped, stop instead of arming timers.
/// Guard: the reactor check at the top of the supervisor's and the lease
/// renewer's `started`.
#[actix_rt::test]
async fn emb09_dropping_the_runtime_after_a_failed_bind_does_not_panic() {
    let db = test_db().await;
    db.exec(
        "CREATE TABLE items (id bigint PRIMARY KEY, email text, email_norm text);
         INSERT INTO items (id, email) SELECT g, 'U' || g FROM generate_series(1, 100) AS g",
    )
    .await;
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("hold a port");
    let listen = busy.local_addr().expect("address").to_string();
    let mut child = example("actix_service")
        .env("DATABASE_URL", &db.url)
        .env("BACKFILL_OPERATOR_TOKEN", "emb09-operator-token-0123")
        .env("LISTEN", &listen)
        .env("RUST_BACKTRACE", "0")
        .stdout(Stdio::null())
        .spawn()
        .expect("run the example");
    let status = ended(&mut child, "on a busy port").await;
    let stderr = stderr_of(&mut child);
    drop(busy);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.to_lowercase().contains("in use"), "{stderr}");
}
