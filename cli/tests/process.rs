//! Crash and restart across real processes: `backfill serve` is started as
//! a child process and killed with SIGKILL (CT-4) or SIGTERM (graceful
//! release), and a new process continues from PostgreSQL.
//!
//! Index:
//! - CT-4 across processes: `ct04_sigkill_*`
//! - EMB-9 graceful shutdown releases claims: `emb09_sigterm_*`
//! - EMB-1 the demo's throwaway cluster outlives no signal: `emb01_demo_*`
//! - `--log-format json` writes list-valued fields as arrays: `obs02_*`
//! - startup refusals and warnings of the admin boundary: `auth03_*`
//!   (trusted-network mode on a non-loopback address), `auth05_*` (a token
//!   on the command line, malformed tokens files)
//! - a notification in flight when its sender is SIGKILLed is delivered
//!   after restart with the same event ID: `ntf01_*`
//!
//! Each kill point is reached with a PostgreSQL barrier, not a sleep: a
//! second session holds a row lock that the worker's batch waits on (kill
//! before commit), or an ACCESS EXCLUSIVE table lock queued behind the last
//! batch so that validation waits on it (kill during validation).

#[path = "../../tests/support/mod.rs"]
mod support;

use backfill_cli::example::{self, TOUCH_COUNT_ID};
use diesel_async::{AsyncPgConnection, SimpleAsyncConnection};
use std::process::{Child, Command, Stdio};
use std::time::Instant;
use support::{eventually, test_db, TestDb};

const LEASE_TTL_MS: u64 = 1500;
const POLL_MS: u64 = 100;

fn spawn_worker(db: &TestDb, name: &str) -> Child {
    spawn_worker_with(db, name, &[])
}

fn spawn_worker_with(db: &TestDb, name: &str, extra: &[&str]) -> Child {
    let log = std::fs::File::create(std::env::temp_dir().join(format!("{}-{name}.log", db.name)))
        .expect("log file");
    Command::new(env!("CARGO_BIN_EXE_backfill"))
        .args([
            "--log-format",
            "json",
            "serve",
            "--database-url",
            &db.url,
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
            "--migrate",
            "off",
            "--auto-backfills",
            "on",
            "--required",
            TOUCH_COUNT_ID,
            "--batch-size",
            "100",
            "--lease-ttl-ms",
            &LEASE_TTL_MS.to_string(),
            "--poll-interval-ms",
            &POLL_MS.to_string(),
            "--lock-timeout-ms",
            "120000",
            "--worker-id",
            name,
        ])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("spawn backfill serve")
}

fn sigkill(child: &mut Child) {
    child.kill().expect("SIGKILL");
    child.wait().expect("reap");
}

async fn row_text(db: &TestDb, column: &str) -> Option<String> {
    db.text(&format!(
        "SELECT {column}::text AS v FROM backfill WHERE id = '{TOUCH_COUNT_ID}'"
    ))
    .await
}

async fn rows_done(db: &TestDb) -> i64 {
    db.scalar(&format!(
        "SELECT coalesce((SELECT rows_done FROM backfill WHERE id = '{TOUCH_COUNT_ID}'), -1) AS v"
    ))
    .await
}

/// Whether some session of this database waits on a lock (the worker's
/// batch or validation reached the barrier).
async fn someone_waits_on_a_lock(db: &TestDb) -> bool {
    db.scalar(
        "SELECT count(*) AS v FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .await
        > 0
}

/// The invariant after any kill: every committed key was touched exactly
/// once and nothing else was touched (mutation and checkpoint are atomic).
async fn assert_exactly_committed(db: &TestDb) {
    let done = rows_done(db).await;
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM events WHERE touch_count = 1")
            .await,
        done,
        "rows touched once = rows committed"
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM events WHERE touch_count > 1")
            .await,
        0,
        "no batch applied twice"
    );
}

async fn lock_row_at(db: &TestDb, offset: i64) -> AsyncPgConnection {
    let mut conn = db.connect().await;
    conn.batch_execute(&format!(
        "BEGIN; SELECT id FROM events WHERE id = (SELECT id FROM events ORDER BY id OFFSET {offset} LIMIT 1) FOR UPDATE"
    ))
    .await
    .unwrap();
    conn
}

/// CT-4 across processes: SIGKILL the worker before a batch commit (its
/// batch waits on a row lock), right after commits, and during validation;
/// each time a new process continues from the PostgreSQL checkpoint without
/// recapturing the bound, and the non-idempotent repair ends with every
/// `touch_count` exactly 1. Guards: the atomic batch (a mutation committed
/// without its checkpoint would be applied twice) and takeover strictly
/// after the committed checkpoint (CLM-4). Prints the takeover latency.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ct04_sigkill_before_after_commit_and_during_validation_resumes_exactly_once() {
    let db = test_db().await;
    example::migrate(&db.url).await.unwrap();
    example::seed(&db.pool, 3000, 0).await.unwrap();
    let total = 3000;

    // 1. Kill before commit: the batch holding key #1551 waits on our lock.
    let mut barrier = lock_row_at(&db, 1550).await;
    let mut w1 = spawn_worker(&db, "w1");
    eventually("w1 waits mid-batch", || async {
        rows_done(&db).await == 1500 && someone_waits_on_a_lock(&db).await
    })
    .await;
    let bound = row_text(&db, "bound").await;
    assert!(bound.is_some());
    sigkill(&mut w1);
    let killed_at = Instant::now();
    barrier.batch_execute("ROLLBACK").await.unwrap();
    assert_exactly_committed(&db).await;
    assert_eq!(
        rows_done(&db).await,
        1500,
        "the in-flight batch rolled back"
    );

    // 2. A new process takes over after the lease expires, strictly after
    //    the checkpoint. Kill it right after further commits.
    let mut w2 = spawn_worker(&db, "w2");
    eventually("w2 takes over", || async {
        row_text(&db, "owner").await.as_deref() == Some("w2")
    })
    .await;
    let takeover = killed_at.elapsed();
    println!(
        "takeover after SIGKILL: {:.2}s (lease TTL {:.1}s, poll {:.1}s)",
        takeover.as_secs_f64(),
        LEASE_TTL_MS as f64 / 1000.0,
        POLL_MS as f64 / 1000.0
    );
    eventually("w2 commits more", || async { rows_done(&db).await >= 2000 }).await;
    sigkill(&mut w2);
    assert_exactly_committed(&db).await;

    // 3. Kill during validation: hold the last batch on a row lock, queue
    //    an ACCESS EXCLUSIVE lock behind it, let the batch commit; the
    //    validator then waits on the table lock and is killed there.
    let mut barrier = lock_row_at(&db, total - 1).await;
    let mut w3 = spawn_worker(&db, "w3");
    eventually("w3 waits in the last batch", || async {
        someone_waits_on_a_lock(&db).await && rows_done(&db).await >= total - 100
    })
    .await;
    let table_lock = {
        let url = db.url.clone();
        tokio::spawn(async move {
            let mut conn = <AsyncPgConnection as diesel_async::AsyncConnection>::establish(&url)
                .await
                .unwrap();
            conn.batch_execute("BEGIN; LOCK TABLE events IN ACCESS EXCLUSIVE MODE")
                .await
                .unwrap();
            conn
        })
    };
    // Our LOCK TABLE is queued behind the batch before we release the row.
    eventually("the table lock is queued", || async {
        db.scalar(
            "SELECT count(*) AS v FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
             WHERE c.relname = 'events' AND l.mode = 'AccessExclusiveLock' AND NOT l.granted",
        )
        .await
            > 0
    })
    .await;
    barrier.batch_execute("ROLLBACK").await.unwrap();
    let mut table_lock = table_lock.await.unwrap();
    eventually("validation waits on the table lock", || async {
        row_text(&db, "state").await.as_deref() == Some("validating")
            && row_text(&db, "owner").await.as_deref() == Some("w3")
            && someone_waits_on_a_lock(&db).await
    })
    .await;
    sigkill(&mut w3);
    table_lock.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(row_text(&db, "state").await.as_deref(), Some("validating"));
    assert_exactly_committed(&db).await;

    // 4. A last process validates and completes, at the original bound.
    let mut w4 = spawn_worker(&db, "w4");
    eventually("completion", || async {
        row_text(&db, "state").await.as_deref() == Some("completed")
    })
    .await;
    sigkill(&mut w4);
    assert_eq!(
        row_text(&db, "bound").await,
        bound,
        "bound never recaptured"
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM events WHERE touch_count = 1")
            .await,
        total
    );
}

/// Graceful shutdown across processes: SIGTERM makes the worker finish or
/// roll back its batch, release its claim and exit 0, so another process
/// continues at once instead of after the lease TTL. Guard: the release on
/// drain (without it the owner stays set until expiry).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emb09_sigterm_releases_the_claim_and_exits_cleanly() {
    let db = test_db().await;
    example::migrate(&db.url).await.unwrap();
    example::seed(&db.pool, 3000, 0).await.unwrap();
    let mut barrier = lock_row_at(&db, 1000).await;
    let mut w = spawn_worker(&db, "term");
    eventually("the worker waits mid-run", || async {
        someone_waits_on_a_lock(&db).await
    })
    .await;
    let status = Command::new("kill")
        .args(["-TERM", &w.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    barrier.batch_execute("ROLLBACK").await.unwrap();
    let exit = w.wait().unwrap();
    assert!(exit.success(), "exit status {exit:?}");
    assert_eq!(row_text(&db, "owner").await, None, "the claim was released");
    assert_exactly_committed(&db).await;
}

/// The demo stopped while it seeds (Ctrl-C or SIGTERM before its progress
/// screen) still stops and removes its throwaway PostgreSQL: the process
/// exits and neither the cluster's directory nor its postmaster outlive
/// it. Guard: the signal listener installed at the start of `demo::run`
/// (without it the first SIGTERM kills the process at once, and the
/// cluster pg_ctl detached keeps running with its directory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emb01_demo_stopped_while_seeding_removes_its_throwaway_cluster() {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_backfill"))
        .args(["demo", "--rows", "20000000", "--listen", "127.0.0.1:0"])
        .args(["--admin-listen", "127.0.0.1:0"])
        .env_remove("DATABASE_URL")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the demo");
    let pid = child.id();
    let stdout = child.stdout.take().expect("stdout");
    // Wait (on the child's own output, not a clock) until it seeds.
    let seeding = tokio::task::spawn_blocking(move || {
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.starts_with("seeding"))
    })
    .await
    .unwrap();
    assert!(seeding, "the demo never started seeding");
    let prefix = format!("backfill-demo-pg-{pid}-");
    let cluster_dirs = || {
        std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(Result::ok)
            .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
            .count()
    };
    assert_eq!(cluster_dirs(), 1, "the throwaway cluster is there");
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.code().is_some(), "ended by the signal: {status:?}");
    assert_eq!(cluster_dirs(), 0, "the throwaway cluster was removed");
}

/// OBS-2 (structured logs): `backfill serve --log-format json` writes one
/// JSON object per line, and a list-valued field is a JSON array of
/// strings: the `registered` event's `required` is the IDs given with
/// `--required`, in the order given, while its other fields keep their
/// types (`definitions` a number, `automatic` a bool). Guards: the
/// `Json` wrapper on `required` in `Embedded::start` and the binary's
/// `JsonLines` formatter (without either the field is one string).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn obs02_json_log_writes_list_fields_as_arrays_of_strings() {
    use std::time::Duration;
    let db = test_db().await;
    example::migrate(&db.url).await.unwrap();
    example::seed(&db.pool, 100, 0).await.unwrap();
    let required = [TOUCH_COUNT_ID, example::repair_ids()[0]];
    assert_ne!(required[0], required[1]);
    let mut args = vec!["--admin-listen", "127.0.0.1:0", "--auto-backfills", "on"];
    args.push("--required");
    args.extend(required);
    let (mut child, rx) = serve_logging(&db, &args, &[]);
    let registered = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(90))
            .expect("backfill serve logs its registration");
        let event: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {line}"));
        assert!(event.is_object(), "{line}");
        if event["event"] == "registered" && event.get("required").is_some() {
            break event;
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let listed: Vec<&str> = registered["required"]
        .as_array()
        .unwrap_or_else(|| panic!("required is an array: {registered}"))
        .iter()
        .map(|id| id.as_str().expect("each ID a string"))
        .collect();
    assert_eq!(listed, required, "{registered}");
    assert_eq!(registered["definitions"], example::repair_ids().len());
    assert_eq!(registered["automatic"], true);
    assert_eq!(registered["level"], "INFO");
}

/// `backfill serve` on the test database with the example schema and
/// `args` (automatic starts off unless they say otherwise), `env` set;
/// its JSON log lines arrive on the receiver. The caller kills it.
fn serve_logging(
    db: &TestDb,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_backfill"))
        .args(["--log-format", "json", "serve", "--database-url", &db.url])
        .args(["--listen", "127.0.0.1:0", "--migrate", "off"])
        .args(args)
        .args(auto_off(args))
        .env_remove("BACKFILL_OPERATOR_TOKEN")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn backfill serve");
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    // Reads the log to its end, so the server never blocks on a full pipe.
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    (child, rx)
}

/// `--auto-backfills off` unless `args` set the flag themselves (clap
/// refuses it twice).
fn auto_off(args: &[&str]) -> &'static [&'static str] {
    if args.contains(&"--auto-backfills") {
        &[]
    } else {
        &["--auto-backfills", "off"]
    }
}

/// The log's events up to and including the first named `until` (or
/// the end of the log), as JSON objects or, for a line that is not one,
/// the line as a string.
fn events_until(rx: &std::sync::mpsc::Receiver<String>, until: &str) -> Vec<serde_json::Value> {
    let mut events = Vec::new();
    while let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(90)) {
        let event = serde_json::from_str(&line).unwrap_or(serde_json::Value::String(line));
        let done = event["event"] == until;
        events.push(event);
        if done {
            break;
        }
    }
    events
}

/// `backfill serve` with `args`: its exit status and its stderr, for a
/// startup that is expected to end on its own.
fn serve_exits(db: &TestDb, args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_backfill"))
        .args(["serve", "--database-url", &db.url, "--migrate", "off"])
        .args(["--listen", "127.0.0.1:0", "--auto-backfills", "off"])
        .args(args)
        .env_remove("BACKFILL_OPERATOR_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run backfill serve");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// AUTH-3: trusted-network mode on a non-loopback admin address is a
/// startup error, one line naming the address and the flag that allows
/// it, with nothing served; with `--admin-allow-remote-trusted` it starts,
/// with a warning. Guard: `HostConfig::check_trusted_listen`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth03_trusted_network_on_a_non_loopback_address_needs_the_second_flag() {
    let db = test_db().await;
    example::migrate(&db.url).await.unwrap();
    let trusted = [
        "--admin-auth",
        "trusted-network",
        "--admin-listen",
        "0.0.0.0:0",
    ];
    let (code, stderr) = serve_exits(&db, &trusted);
    assert_eq!(code, Some(1), "{stderr}");
    assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
    assert!(stderr.contains("0.0.0.0"), "{stderr}");
    assert!(stderr.contains("--admin-allow-remote-trusted"), "{stderr}");
    let mut args = trusted.to_vec();
    args.push("--admin-allow-remote-trusted");
    let (mut child, rx) = serve_logging(&db, &args, &[]);
    let events = events_until(&rx, "serving");
    let _ = child.kill();
    let _ = child.wait();
    let warned = events
        .iter()
        .any(|e| e["event"] == "admin_trusted_remote" && e["level"] == "WARN");
    assert!(warned, "{events:?}");
    assert_eq!(
        events.last().map(|e| &e["event"]),
        Some(&"serving".into()),
        "{events:?}"
    );
}

/// AUTH-5: a token given on the command line works but logs a warning
/// naming the safer forms; the same token from the environment or from
/// `--operator-token-file` logs none. Guard: `warn_token_on_argv` in the
/// binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth05_a_token_on_the_command_line_logs_a_warning() {
    let db = test_db().await;
    example::migrate(&db.url).await.unwrap();
    let token = "argv-token-0123456789";
    let file = std::env::temp_dir().join(format!("{}-token", db.name));
    std::fs::write(&file, format!("{token}\n")).expect("token file");
    let file_arg = file.to_string_lossy().into_owned();
    // Arguments, environment, and whether a warning is expected.
    type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], bool);
    let cases: [Case; 3] = [
        (&["--operator-token", token], &[], true),
        (&[], &[("BACKFILL_OPERATOR_TOKEN", token)], false),
        (&["--operator-token-file", &file_arg], &[], false),
    ];
    for (args, env, warns) in cases {
        let mut all = vec!["--admin-listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let (mut child, rx) = serve_logging(&db, &all, env);
        let events = events_until(&rx, "serving");
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(
            events.last().map(|e| &e["event"]),
            Some(&"serving".into()),
            "{events:?}"
        );
        let warning = events
            .iter()
            .find(|e| e["event"] == "operator_token_on_argv");
        assert_eq!(warning.is_some(), warns, "{args:?} {env:?}: {events:?}");
        if let Some(warning) = warning {
            let text = warning.to_string();
            assert!(text.contains("BACKFILL_OPERATOR_TOKEN"), "{text}");
            assert!(text.contains("--operator-token-file"), "{text}");
            assert!(
                !text.contains(token),
                "the token itself is not logged: {text}"
            );
        }
    }
    std::fs::remove_file(&file).expect("remove token file");
}

/// AUTH-5: `backfill serve` refuses each malformed tokens file at startup
/// with one line naming the entry's line: a duplicate name, a duplicate
/// digest, an unknown `backfill:*` capability, a name with control or
/// markup characters, the built-in principal's name. Guard: the checks
/// in `AuthConfig::parse_tokens_file`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth05_each_malformed_tokens_file_is_refused_naming_its_line() {
    let db = test_db().await;
    let entry = |name: &str, token: &str, caps: &str| {
        let digest = hex::encode(backfill::admin::sha256(token));
        format!(r#"{{"name": "{name}", "sha256": "{digest}", "capabilities": [{caps}]}}"#)
    };
    let first = entry("ops", "ops-token", r#""backfill:read""#);
    let cases = [
        (entry("ops", "b-token", ""), "line 3: the name is already"),
        (entry("b", "ops-token", ""), "line 3: the sha256 is already"),
        (
            entry("b", "b-token", r#""backfill:admin""#),
            "line 3: unknown capability",
        ),
        (
            entry("b\\u0007", "b-token", ""),
            "line 3: a principal name may not",
        ),
        (
            entry("<img src=x>", "b-token", ""),
            "line 3: a principal name may not",
        ),
        (
            entry("operator", "b-token", ""),
            "line 3: the name \"operator\"",
        ),
    ];
    let path = std::env::temp_dir().join(format!("{}-tokens.json", db.name));
    let path_arg = path.to_string_lossy().into_owned();
    for (bad, problem) in cases {
        std::fs::write(&path, format!("[\n  {first},\n  {bad}\n]\n")).expect("tokens file");
        let (code, stderr) = serve_exits(&db, &["--admin-tokens-file", &path_arg]);
        assert_eq!(code, Some(1), "{bad}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "one line: {stderr}");
        assert!(stderr.contains(problem), "{problem}: {stderr}");
        assert!(!stderr.contains(&hex::encode(backfill::admin::sha256("b-token"))));
    }
    std::fs::remove_file(&path).expect("remove tokens file");
}

/// NTF-1/NTF-2 across processes: the backfill completes and its
/// notification is queued with the completion; the sender POSTs it and the
/// receiver holds the request unanswered (the barrier: the delivery is in
/// flight, its try counted but its answer not recorded), and the process
/// is SIGKILLed there. A new process delivers it, with the same event ID,
/// and records it delivered.
/// Guard: the outbox row written with the state change (without it the
/// notification exists only in the killed process, or nowhere).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ntf01_sigkill_with_a_delivery_in_flight_redelivers_the_same_event_id() {
    let db = test_db().await;
    example::migrate(&db.url).await.unwrap();
    example::seed(&db.pool, 300, 0).await.unwrap();
    let receiver = support::webhook::Receiver::start(204).await;
    let secret = std::env::temp_dir().join(format!("{}-webhook-secret", db.name));
    std::fs::write(&secret, "0123456789abcdef-secret\n").expect("secret file");
    let secret = secret.to_string_lossy().to_string();
    let flags = [
        "--webhook",
        receiver.url.as_str(),
        "--webhook-secret-file",
        secret.as_str(),
        "--webhook-timeout-ms",
        "600000",
    ];
    let release = receiver.hold_next();
    let mut w = spawn_worker_with(&db, "ntf-a", &flags);
    receiver.arrived.notified().await;
    sigkill(&mut w);
    let held = receiver.got()[0].body();
    assert_eq!(
        (held.event.as_str(), held.backfill_id.as_str()),
        ("completed", TOUCH_COUNT_ID)
    );
    // The try was counted before the POST (NTF-2); its answer was not
    // recorded.
    assert_eq!(
        db.scalar(
            "SELECT count(*) AS v FROM backfill_outbox WHERE status = 'pending' AND attempts = 1"
        )
        .await,
        1,
        "in flight: the try counted, its outcome not recorded"
    );
    drop(release);

    let mut w = spawn_worker_with(&db, "ntf-b", &flags);
    eventually("the new process delivers it", || async {
        db.scalar("SELECT count(*) AS v FROM backfill_outbox WHERE status = 'delivered'")
            .await
            == 1
    })
    .await;
    sigkill(&mut w);
    let got = receiver.got();
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[1].body().event_id, held.event_id, "the same event ID");
    assert_eq!(
        got[1].header(backfill::notify::SIGNATURE_HEADER),
        Some(backfill::notify::sign(b"0123456789abcdef-secret", &got[1].body).as_str())
    );
}
