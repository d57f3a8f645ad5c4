//! `backfill ctl` against a live admin server (ADM-1, ADM-3, CT-11 client
//! part; OBS-5 the server's rate: `obs05_*`; FLT-6 `ctl fleet` against the
//! fleet demo's listener: `flt06_*`): the real binary, the real HTTP
//! server, a real PostgreSQL.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::Command;
use support::admin::*;

/// Exit code, stdout, stderr of one `backfill ctl` run.
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn ctl(url: &str, token: Option<&str>, args: &[&str]) -> Out {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_backfill"));
    cmd.arg("ctl").arg("--url").arg(url);
    cmd.args(args)
        .env_remove("BACKFILL_TOKEN")
        .env_remove("BACKFILL_TOKEN_FILE")
        .env_remove("BACKFILL_URL");
    // The form the guide recommends: the environment, not the command
    // line (which every local user can read, and which `ctl` warns of).
    if let Some(t) = token {
        cmd.env("BACKFILL_TOKEN", t);
    }
    run(cmd).await
}

/// Run a prepared `backfill ctl` command.
async fn run(mut cmd: Command) -> Out {
    let out = actix_rt::task::spawn_blocking(move || cmd.output())
        .await
        .expect("join")
        .expect("run backfill ctl");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// AUTH-5 in the client: `ctl` takes its token from BACKFILL_TOKEN, from
/// a file named by --token-file or BACKFILL_TOKEN_FILE (its first line),
/// or from --token, which works and warns once, in one line, that every
/// local user can read it; an unreadable or empty token file is exit 2
/// in one line and nothing is sent. Guards: the file source, the warning.
#[actix_rt::test]
async fn adm01_ctl_takes_its_token_from_env_a_file_or_argv_with_a_warning() {
    let (_db, engine, _hooks) = setup(10).await;
    let server = serve(admin(engine.clone()));
    let url = server.url.as_str();
    let dir = std::env::temp_dir().join(format!("bft-ctl-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("token");
    std::fs::write(&file, format!("{READER}\nignored second line\n")).expect("token file");
    let empty = dir.join("empty");
    std::fs::write(&empty, "\n").expect("empty file");
    let base = || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_backfill"));
        cmd.env_remove("BACKFILL_TOKEN")
            .env_remove("BACKFILL_TOKEN_FILE")
            .env_remove("BACKFILL_URL")
            .args(["ctl", "--url", url]);
        cmd
    };

    let from_env = ctl(url, Some(READER), &["list"]).await;
    assert_eq!(from_env.code, 0, "{}", from_env.stderr);
    assert_eq!(from_env.stderr, "", "no warning for the environment");

    let mut cmd = base();
    cmd.arg("--token-file").arg(&file).arg("list");
    let from_file = run(cmd).await;
    assert_eq!(from_file.code, 0, "{}", from_file.stderr);
    assert_eq!(from_file.stderr, "");
    let mut cmd = base();
    cmd.env("BACKFILL_TOKEN_FILE", &file).arg("list");
    let from_file_env = run(cmd).await;
    assert_eq!(from_file_env.code, 0, "{}", from_file_env.stderr);
    assert_eq!(from_file_env.stdout, from_file.stdout);

    let mut cmd = base();
    cmd.args(["--token", READER, "list"]);
    let from_argv = run(cmd).await;
    assert_eq!(from_argv.code, 0, "{}", from_argv.stderr);
    assert_eq!(from_argv.stderr.lines().count(), 1, "{}", from_argv.stderr);
    assert!(
        from_argv.stderr.contains("readable by every local user")
            && from_argv.stderr.contains("BACKFILL_TOKEN")
            && from_argv.stderr.contains("--token-file"),
        "{}",
        from_argv.stderr
    );

    for bad in [dir.join("missing"), empty] {
        let mut cmd = base();
        cmd.arg("--token-file").arg(&bad).arg("list");
        let refused = run(cmd).await;
        assert_eq!(refused.code, 2, "{}", refused.stderr);
        assert_eq!(
            refused.stderr.trim().lines().count(),
            1,
            "{}",
            refused.stderr
        );
        assert!(
            refused.stderr.contains("--token-file"),
            "{}",
            refused.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    server.stop().await;
}

/// ADM-1: list, start, pause, a conflict (exit 3), a bad token (exit 4), a
/// malformed ID (exit 2), watch with one refresh, and on a completed row an
/// explicit validation whose outcome the client shows (CT-11). Guard: the
/// CLI's status mapping (409 -> 3, 401/403 -> 4) and the idempotency key
/// it sends (without it the server answers 400 and the start fails).
#[actix_rt::test]
async fn adm01_ctl_drives_the_admin_api_with_exit_codes() {
    let (db, engine, _hooks) = setup(10).await;
    let server = serve(admin(engine.clone()));
    let url = server.url.as_str();

    let list = ctl(url, Some(READER), &["list"]).await;
    assert_eq!(list.code, 0, "{}", list.stderr);
    assert!(
        list.stdout.contains(ID) && list.stdout.contains("pending"),
        "{}",
        list.stdout
    );
    assert!(
        list.stdout.contains("unknown"),
        "pending progress is unknown: {}",
        list.stdout
    );

    let json = ctl(url, Some(READER), &["list", "--json"]).await;
    let page: serde_json::Value = serde_json::from_str(&json.stdout).expect("--json is JSON");
    assert_eq!(page["items"][0]["id"], ID);

    let start = ctl(url, Some(OPERATOR), &["start", ID]).await;
    assert_eq!(start.code, 0, "{}", start.stderr);
    assert!(
        start
            .stdout
            .contains("applied (pending -> running), generation 1"),
        "{}",
        start.stdout
    );
    let again = ctl(url, Some(OPERATOR), &["start", ID]).await;
    assert_eq!(again.code, 0);
    assert!(
        again.stdout.contains("no change, it is already running"),
        "{}",
        again.stdout
    );

    let pause = ctl(url, Some(OPERATOR), &["pause", ID]).await;
    assert_eq!(pause.code, 0, "{}", pause.stderr);
    assert!(
        pause.stdout.contains("running -> paused"),
        "{}",
        pause.stdout
    );

    let conflict = ctl(url, Some(OPERATOR), &["retry", ID]).await;
    assert_eq!(conflict.code, 3, "{} {}", conflict.stdout, conflict.stderr);
    assert!(
        conflict.stderr.contains("current state paused"),
        "{}",
        conflict.stderr
    );

    let bad = ctl(url, Some("wrong-token"), &["list"]).await;
    assert_eq!(bad.code, 4, "{}", bad.stderr);
    assert!(!bad.stdout.contains(ID));
    let none = ctl(url, None, &["pause", ID]).await;
    assert_eq!(none.code, 4);
    let ro = ctl(url, Some(READER), &["resume", ID]).await;
    assert_eq!(ro.code, 4, "read-only principal cannot act");
    let usage = ctl(url, Some(READER), &["show", "Not An ID"]).await;
    assert_eq!(usage.code, 2, "{}", usage.stderr);
    let missing = ctl(url, Some(READER), &["show"]).await;
    assert_eq!(missing.code, 2);

    let watch = ctl(
        url,
        Some(READER),
        &["watch", ID, "--count", "1", "--interval", "0.1"],
    )
    .await;
    assert_eq!(watch.code, 0, "{}", watch.stderr);
    assert!(
        watch.stdout.contains(ID) && watch.stdout.contains("paused"),
        "{}",
        watch.stdout
    );
    assert!(
        watch.stdout.contains("ROWS/S") && watch.stdout.contains('['),
        "{}",
        watch.stdout
    );

    let resume = ctl(url, Some(OPERATOR), &["resume", ID]).await;
    assert_eq!(resume.code, 0, "{}", resume.stderr);
    drive(&engine).await;
    let validate = ctl(url, Some(OPERATOR), &["validate", ID]).await;
    assert_eq!(validate.code, 0, "{}", validate.stderr);
    assert!(
        validate.stdout.contains("success (state completed)"),
        "{}",
        validate.stdout
    );
    let show = ctl(url, Some(READER), &["show", ID]).await;
    assert!(
        show.stdout.contains("completed") && show.stdout.contains("validation    success"),
        "{}",
        show.stdout
    );
    let watch = ctl(
        url,
        Some(READER),
        &["watch", "--count", "2", "--interval", "0.05"],
    )
    .await;
    assert_eq!(watch.code, 0);
    assert!(
        watch.stdout.contains("100.0%") && watch.stdout.contains("completed"),
        "{}",
        watch.stdout
    );
    // A completed backfill does not move: no rate, no time left.
    let row = watch
        .stdout
        .lines()
        .rfind(|l| l.starts_with(ID))
        .unwrap_or_default();
    assert!(
        !row.contains("unknown") && !row.contains("done"),
        "{}",
        watch.stdout
    );

    let audit = ctl(url, Some(READER), &["audit", ID]).await;
    assert_eq!(audit.code, 0);
    for word in ["start", "pause", "resume", "validate", "conflict", "ops"] {
        assert!(audit.stdout.contains(word), "{word}: {}", audit.stdout);
    }
    // Every action the client sent carried a key: one audit row per start.
    assert_eq!(
        db.scalar(&format!("SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{ID}' AND action = 'start' AND outcome = 'applied'")).await,
        1
    );
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// ADM-3: when the server cannot be reached, `watch` shows the refresh as
/// stale (never zero) and exits 5; so do reads and actions.
#[actix_rt::test]
async fn adm03_ctl_failed_refresh_is_stale_and_exits_5() {
    let (_db, engine, _hooks) = setup(3).await;
    let server = serve(admin(engine));
    let url = server.url.clone();
    server.stop().await;
    let watch = ctl(&url, Some(READER), &["watch", "--count", "1"]).await;
    assert_eq!(watch.code, 5, "{}", watch.stderr);
    assert!(watch.stdout.contains("STALE"), "{}", watch.stdout);
    assert!(!watch.stdout.contains("0.0%"), "{}", watch.stdout);
    let list = ctl(&url, Some(READER), &["list"]).await;
    assert_eq!(list.code, 5);
    let start = ctl(&url, Some(OPERATOR), &["start", ID]).await;
    assert_eq!(start.code, 5);
}

/// A TCP proxy in front of the server whose FIRST connection forwards the
/// request, waits until the server has answered (so the action committed),
/// then closes the client's connection without the response: a response
/// lost after commit. Later connections are piped through unchanged.
fn lossy_proxy(upstream: &str) -> String {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    let upstream = upstream.trim_start_matches("http://").to_string();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut first = true;
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let Ok(mut server) = TcpStream::connect(&upstream) else {
                return;
            };
            if first {
                first = false;
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match client.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                server.write_all(&request).expect("forward");
                // Block until the server's answer starts: it has committed.
                let _ = server.read(&mut buf);
                let _ = client.shutdown(Shutdown::Both);
                continue;
            }
            let (mut c2, mut s2) = (
                client.try_clone().expect("clone"),
                server.try_clone().expect("clone"),
            );
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut c2, &mut s2);
                let _ = s2.shutdown(Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut server, &mut client);
                let _ = client.shutdown(Shutdown::Write);
            });
        }
    });
    format!("http://{addr}")
}

/// ADM-4 through the client: the first response to `start` is lost after
/// the server committed; `backfill ctl` re-sends with the SAME
/// Idempotency-Key and prints the original outcome. One transition, one
/// generation advance, one `applied` audit row plus one `replayed` row.
/// Guard: the client's key reuse across re-sends (a fresh key per attempt
/// would print `converged`) and the server's stored response.
#[actix_rt::test]
async fn adm04_ctl_resends_with_the_same_key_after_a_lost_response() {
    let (db, engine, _hooks) = setup(5).await;
    let server = serve(admin(engine));
    let proxy = lossy_proxy(&server.url);
    let start = ctl(&proxy, Some(OPERATOR), &["start", ID]).await;
    assert_eq!(start.code, 0, "{}", start.stderr);
    assert!(
        start
            .stdout
            .contains("applied (pending -> running), generation 1"),
        "{}",
        start.stdout
    );
    assert_eq!(
        db.scalar(&format!(
            "SELECT generation AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await,
        1
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_audit WHERE outcome = 'applied'")
            .await,
        1
    );
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM backfill_audit WHERE outcome = 'replayed'")
            .await,
        1,
        "the re-send was answered from the stored response"
    );
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// Bad input: a usage error is one readable line naming the problem and
/// exit code 2, whether clap finds it (a missing ID, an unknown command or
/// flag) or the client does (an interval `Duration` cannot hold), and
/// nothing is sent. Guards: `usage_error` in main.rs (without it clap
/// prints the problem over several lines plus a usage block) and the
/// bound on `--interval` (without it `watch` goes on to send requests,
/// and after its first refresh panics turning 1e20 s into a `Duration`).
#[actix_rt::test]
async fn adm01_ctl_usage_errors_are_one_line_with_exit_2() {
    // Nothing listens here: a request would fail with exit 5, not 2.
    let url = "http://127.0.0.1:9";
    for (args, names) in [
        (&["show"][..], "<ID>"),
        (&["frob"][..], "frob"),
        (&["list", "--bogus"][..], "--bogus"),
        (
            &["watch", "--count", "1", "--interval", "1e20"][..],
            "--interval",
        ),
        (
            &["watch", "--count", "1", "--interval", "abc"][..],
            "--interval",
        ),
    ] {
        let out = ctl(url, Some(READER), args).await;
        assert_eq!(out.code, 2, "{args:?}: {}", out.stderr);
        assert_eq!(
            out.stderr.trim().lines().count(),
            1,
            "{args:?}: {}",
            out.stderr
        );
        assert!(out.stderr.contains(names), "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
    }
}

/// ADM-2: `list` and `watch` show every backfill, however many pages the
/// API splits them into (500 per page): with 1,200 more registered, `list
/// --json`, the `list` table and `watch --json` each name every one of
/// them. Guard: `list_all` following `next_after` (without it the client
/// shows the first 500 and says nothing of the rest).
#[actix_rt::test]
async fn adm02_ctl_list_and_watch_follow_every_page() {
    let (db, engine, _hooks) = setup(3).await;
    let ids: Vec<String> = (0..1200).map(|i| format!("bulk.{i:05}")).collect();
    let descriptions = vec![String::new(); ids.len()];
    {
        let mut conn = engine.pool().get().await.expect("connection");
        backfill::__private::store::backfill_register(&mut conn, &ids, &descriptions, "test")
            .await
            .expect("register");
    }
    let total = db.scalar("SELECT count(*) AS v FROM backfill").await;
    assert!(total > 1200);
    let server = serve(admin(engine));
    let url = server.url.as_str();

    let list = ctl(url, Some(READER), &["list", "--json"]).await;
    assert_eq!(list.code, 0, "{}", list.stderr);
    let body: serde_json::Value = serde_json::from_str(&list.stdout).expect("json");
    assert_eq!(body["items"].as_array().unwrap().len() as i64, total);
    assert_eq!(body["next_after"], serde_json::Value::Null);

    let table = ctl(url, Some(READER), &["list"]).await;
    assert_eq!(table.code, 0, "{}", table.stderr);
    assert!(
        table.stdout.contains("bulk.01199"),
        "the last page is shown"
    );

    let watch = ctl(url, Some(READER), &["watch", "--count", "1", "--json"]).await;
    assert_eq!(watch.code, 0, "{}", watch.stderr);
    let items: Vec<serde_json::Value> =
        serde_json::from_str(watch.stdout.trim()).expect("one JSON array");
    assert_eq!(items.len() as i64, total);
    server.stop().await;
}

/// THR-4 through the client: `ctl set` sends the flags as one change
/// (values set, `--clear` as null) with an Idempotency-Key and prints the
/// resulting settings; a value the server refuses, a name that is not a
/// setting and an empty change are one readable line with exit 2 and
/// change nothing, a read-only principal exits 4. `list`, `show` and
/// `watch` show the batch size in force and mark a throttled runner
/// (THR-2). Guards: `SetArgs::change` and the PATCH in `set_settings`
/// (without them nothing is stored), `Client::check`'s 4xx mapping (a 422 would
/// exit 5), and the throttle marker in `table`/`detail`.
#[actix_rt::test]
async fn thr04_ctl_set_changes_settings_and_refuses_bad_values() {
    let (db, engine, _hooks) = setup(10).await;
    let server = serve(admin(engine.clone()));
    let url = server.url.as_str();
    let stored = || async {
        db.text(&format!(
            "SELECT settings::text AS v FROM backfill WHERE id = '{ID}'"
        ))
        .await
        .unwrap_or_default()
    };

    let set = ctl(
        url,
        Some(OPERATOR),
        &["set", ID, "--batch-size", "100", "--pause-ms", "250"],
    )
    .await;
    assert_eq!(set.code, 0, "{}", set.stderr);
    assert_eq!(
        set.stdout.trim(),
        format!("settings {ID}: batch_size=100 pause_ms=250")
    );
    assert_eq!(stored().await, r#"{"pause_ms": 250, "batch_size": 100}"#);
    assert_eq!(
        db.text(
            "SELECT detail AS v FROM backfill_audit WHERE action = 'settings' AND outcome = 'applied'"
        )
        .await
        .as_deref(),
        Some("batch_size: unset -> 100; pause_ms: unset -> 250"),
        "audited with the key the client sent"
    );
    let clear = ctl(url, Some(OPERATOR), &["set", ID, "--clear", "pause-ms"]).await;
    assert_eq!(clear.code, 0, "{}", clear.stderr);
    assert_eq!(
        clear.stdout.trim(),
        format!("settings {ID}: batch_size=100")
    );

    let before = stored().await;
    for (args, says) in [
        (
            &["set", ID, "--batch-size", "0"][..],
            "must be a whole number between 1 and 100000",
        ),
        (&["set", ID, "--target-batch-ms", "50"][..], "exclude"),
        (&["set", ID, "--clear", "bogus"][..], "bogus"),
        (
            &["set", ID, "--pause-ms", "5", "--clear", "pause_ms"][..],
            "both set and cleared",
        ),
        (&["set", ID][..], "changes nothing"),
        (&["set", ID, "--pause-ms=-1"][..], "--pause-ms"),
    ] {
        let out = ctl(url, Some(OPERATOR), args).await;
        assert_eq!(out.code, 2, "{args:?}: {} {}", out.stdout, out.stderr);
        assert_eq!(
            out.stderr.trim().lines().count(),
            1,
            "{args:?}: {}",
            out.stderr
        );
        assert!(out.stderr.contains(says), "{args:?}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{args:?}: {}", out.stdout);
    }
    let ro = ctl(url, Some(READER), &["set", ID, "--pause-ms", "5"]).await;
    assert_eq!(ro.code, 4, "{}", ro.stderr);
    assert_eq!(stored().await, before, "nothing changed");

    // A runner that holds the claim reports a throttle condition.
    let start = ctl(url, Some(OPERATOR), &["start", ID]).await;
    assert_eq!(start.code, 0, "{}", start.stderr);
    let claim = engine
        .claim_next("worker-a", &[])
        .await
        .expect("claim")
        .expect("claimed");
    db.exec(&format!(
        "UPDATE backfill SET batch_size = 40, throttle = jsonb_build_object(\
             'signal', 'replication_lag_bytes', 'value', 5.0e7, 'threshold', 1.6e7, \
             'text', 'replication lag 47.7 MiB > 15.3 MiB', \
             'since', '2026-12-01T10:00:00Z', 'generation', {}) \
         WHERE id = '{ID}'",
        claim.generation
    ))
    .await;
    let marker = "throttled: replication lag 47.7 MiB > 15.3 MiB";
    let list = ctl(url, Some(READER), &["list"]).await;
    assert_eq!(list.code, 0, "{}", list.stderr);
    let row = list
        .stdout
        .lines()
        .find(|l| l.starts_with(ID))
        .unwrap_or_default();
    assert!(row.contains(marker), "{}", list.stdout);
    assert!(
        list.stdout
            .lines()
            .next()
            .unwrap_or_default()
            .contains("BATCH")
            && row.split_whitespace().any(|c| c == "40"),
        "{}",
        list.stdout
    );
    let show = ctl(url, Some(READER), &["show", ID]).await;
    for line in [
        "settings      batch_size=100",
        "batch size    40",
        "throttled     replication lag 47.7 MiB > 15.3 MiB (since 2026-12-01T10:00:00+00:00)",
    ] {
        assert!(show.stdout.contains(line), "{line}: {}", show.stdout);
    }
    let watch = ctl(url, Some(READER), &["watch", ID, "--count", "1"]).await;
    assert_eq!(watch.code, 0, "{}", watch.stderr);
    assert!(watch.stdout.contains(marker), "{}", watch.stdout);
    server.stop().await;
    assert_audit_complete(&db).await;
}

/// DRY-1 in the client: `ctl dry-run` prints the report (each batch, the
/// forecast, why there is no sample) and changes nothing; `--json` prints
/// the API's report; a K out of range is the server's 422 as one readable
/// line with exit 2, and a K that is not a number is clap's, one line
/// too; a dry run whose batch fails exits 8 after its report. Guards: the
/// query the client builds (without `batches` the server runs its default
/// of 3, not 2), the exit code of a failed batch.
#[actix_rt::test]
async fn dry01_ctl_dry_run_prints_the_report_and_refuses_a_bad_k() {
    let (db, engine, hooks) = setup(10).await;
    let server = serve(admin(engine.clone()));
    let url = server.url.as_str();
    let before = snapshot(&db, ID).await;

    let out = ctl(url, Some(OPERATOR), &["dry-run", ID, "--batches", "2"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    for needle in [
        "2 of 2 batches ran, rolled back",
        "forecast for the remaining range",
        "lock waits: unknown",
        "backfill:inspect",
    ] {
        assert!(out.stdout.contains(needle), "{needle}: {}", out.stdout);
    }
    assert_eq!(snapshot(&db, ID).await, before, "nothing changed");

    let out = ctl(url, Some(OPERATOR), &["--json", "dry-run", ID]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let report: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON report");
    assert_eq!(report["rolled_back"], true);
    assert_eq!(report["batches_asked"], 3);

    for (k, needle) in [("21", "between 1 and 20"), ("abc", "--batches")] {
        let out = ctl(url, Some(OPERATOR), &["dry-run", ID, "--batches", k]).await;
        assert_eq!(out.code, 2, "{k}: {}", out.stderr);
        assert_eq!(out.stderr.trim().lines().count(), 1, "{k}: {}", out.stderr);
        assert!(out.stderr.contains(needle), "{k}: {}", out.stderr);
    }
    assert_eq!(snapshot(&db, ID).await, before, "nothing changed");

    // A batch that fails in the dry run: the report names it, and the
    // exit code is the dry run's own, so a script cannot take it for a
    // clean preview.
    *hooks.fail_after_mutate.lock() = Some(backfill::repair::RepairError::Fatal("boom".into()));
    let out = ctl(url, Some(OPERATOR), &["dry-run", ID, "--batches", "2"]).await;
    assert_eq!(out.code, 8, "{}{}", out.stdout, out.stderr);
    assert!(
        out.stdout.contains("batch 1 failed (fatal)"),
        "{}",
        out.stdout
    );
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("batch 1 failed"), "{}", out.stderr);
    let out = ctl(url, Some(OPERATOR), &["--json", "dry-run", ID]).await;
    assert_eq!(out.code, 8, "{}", out.stderr);
    assert_eq!(snapshot(&db, ID).await, before, "nothing changed");
    server.stop().await;
}

/// UNDO-2, UNDO-4: `ctl undo` starts the reverse backfill and says what it
/// restores, `ctl show` names the undo and the journal, a second prune
/// while the undo runs is refused with exit 3 and one line naming why,
/// and `ctl journal prune` deletes the journal once the undo completed.
/// Guard: the CLI's undo and prune paths and the journal lines of `show`.
#[actix_rt::test]
async fn undo02_ctl_undoes_shows_the_journal_and_prunes() {
    use backfill::repair::SqlRepair;
    use backfill::{Engine, Registry};
    const JOURNALED: &str = "items.bump.v1";
    let db = support::test_db().await;
    db.exec(&support::repairs::items_sql(30)).await;
    let repair = SqlRepair::new(JOURNALED, "items")
        .key("id")
        .set("n = n + 1")
        .validate_where("n <> 1")
        .journal(["n"])
        .batch_size(7)
        .build()
        .expect("definition");
    let registry = Registry::new().with(repair).expect("registers");
    let engine = Engine::new(db.pool.clone(), registry, engine_config()).expect("engine");
    engine.register().await.expect("register");
    engine.start(JOURNALED).await.expect("start");
    drive(&engine).await;
    let server = serve(admin(engine.clone()));
    let url = server.url.as_str();

    let show = ctl(url, Some(READER), &["show", JOURNALED]).await;
    assert_eq!(show.code, 0, "{}", show.stderr);
    assert!(
        show.stdout.contains("journal       30 rows"),
        "{}",
        show.stdout
    );
    assert!(
        show.stdout.contains("backfill ctl undo items.bump.v1"),
        "{}",
        show.stdout
    );

    let undo = ctl(url, Some(OPERATOR), &["undo", JOURNALED]).await;
    assert_eq!(undo.code, 0, "{}", undo.stderr);
    assert!(
        undo.stdout
            .contains("undo items.bump.v1: applied; items.bump.v1.undo is running"),
        "{}",
        undo.stdout
    );
    let early = ctl(url, Some(OPERATOR), &["journal", "prune", JOURNALED]).await;
    assert_eq!(early.code, 3, "{} {}", early.stdout, early.stderr);
    assert_eq!(early.stderr.lines().count(), 1, "{}", early.stderr);
    assert!(early.stderr.contains("undo"), "{}", early.stderr);

    drive(&engine).await;
    let undone = ctl(url, Some(READER), &["show", "items.bump.v1.undo"]).await;
    assert!(
        undone.stdout.contains("undo of       items.bump.v1"),
        "{}",
        undone.stdout
    );
    assert!(
        undone.stdout.contains("restored 30, conflicts 0"),
        "{}",
        undone.stdout
    );
    let prune = ctl(url, Some(OPERATOR), &["journal", "prune", JOURNALED]).await;
    assert_eq!(prune.code, 0, "{}", prune.stderr);
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM items WHERE n = 0")
            .await,
        30,
        "every row restored"
    );
    server.stop().await;
}

/// UNDO-4: `ctl journal prune` of a repair that keeps no journal is
/// refused with exit 3 and one line saying it keeps none, never the
/// "applied; the journal is deleted" of a prune. Guard: the server's
/// journal check of the prune.
#[actix_rt::test]
async fn undo04_ctl_prune_of_a_repair_without_a_journal_exits_3() {
    let (_db, engine, _hooks) = setup(5).await;
    engine.start(ID).await.expect("start");
    drive(&engine).await;
    let server = serve(admin(engine.clone()));
    let out = ctl(&server.url, Some(OPERATOR), &["journal", "prune", ID]).await;
    assert_eq!(out.code, 3, "{} {}", out.stdout, out.stderr);
    assert_eq!(out.stdout, "", "{}", out.stdout);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr.contains("keeps no journal") && out.stderr.contains(ID),
        "{}",
        out.stderr
    );
    server.stop().await;
}

/// AUTH-1: `ctl`'s exit-4 line for a 401 tells no token from a refused
/// one: without a token it names BACKFILL_TOKEN and --token-file, with a
/// wrong one it says the token was refused (never printing it); a 403
/// still names the missing capability. Guard: `Client::unauthorized_line`.
#[actix_rt::test]
async fn auth01_ctl_says_whether_a_token_was_given_or_refused() {
    let (_db, engine, _hooks) = setup(1).await;
    let server = serve(admin(engine.clone()));
    let url = server.url.as_str();
    let wrong = "wrong-token-0123456789";
    let none = ctl(url, None, &["list"]).await;
    assert_eq!(none.code, 4, "{}", none.stderr);
    assert_eq!(none.stderr.trim().lines().count(), 1, "{}", none.stderr);
    assert!(
        none.stderr.contains("no token given")
            && none.stderr.contains("BACKFILL_TOKEN")
            && none.stderr.contains("--token-file"),
        "{}",
        none.stderr
    );
    let refused = ctl(url, Some(wrong), &["pause", ID]).await;
    assert_eq!(refused.code, 4, "{}", refused.stderr);
    assert_eq!(
        refused.stderr.trim().lines().count(),
        1,
        "{}",
        refused.stderr
    );
    assert!(
        refused.stderr.contains("refused the token given") && !refused.stderr.contains(wrong),
        "{}",
        refused.stderr
    );
    let forbidden = ctl(url, Some(READER), &["pause", ID]).await;
    assert_eq!(forbidden.code, 4, "{}", forbidden.stderr);
    assert!(
        forbidden.stderr.contains("forbidden"),
        "{}",
        forbidden.stderr
    );
    server.stop().await;
}

/// No database: a fleet's listener as its routes are, without members.
struct NoMembers;

impl backfill::admin::FleetMembers for NoMembers {
    fn members(&self) -> Vec<backfill::admin::FleetMember> {
        Vec::new()
    }
    fn set_rollout(&self, _: &str, _: Option<u32>, _: chrono::DateTime<chrono::Utc>) {}
    fn rollout(&self, _: &str) -> Option<u32> {
        None
    }
}

/// FLT-6: a single-database command pointed at a fleet's listener (whose
/// routes are `/admin/fleet/...` and `/databases/NAME/admin/...`) exits 2
/// with one line saying the URL is a fleet listener and what to use
/// instead, with a token and without; never a bare "HTTP 404". Guard:
/// `Client::fleet_hint`.
#[actix_rt::test]
async fn flt06_ctl_pointed_at_a_fleet_listener_says_so() {
    use actix_web::{App, HttpServer};
    use backfill::admin::{AuthConfig, FleetAdmin};
    let principals = AuthConfig::parse_tokens_file(&tokens_file()).expect("tokens file");
    let fleet = FleetAdmin::new(
        std::sync::Arc::new(NoMembers),
        AuthConfig::Tokens(principals),
    );
    let routes = backfill::http::fleet::FleetRoutes::new(fleet);
    let server = HttpServer::new(move || {
        let routes = routes.clone();
        App::new().configure(move |cfg| routes.configure(cfg))
    })
    .workers(1)
    .bind(("127.0.0.1", 0))
    .expect("bind");
    let url = format!("http://127.0.0.1:{}", server.addrs()[0].port());
    let server = server.run();
    let handle = server.handle();
    actix_rt::spawn(server);

    for (token, args) in [(Some(READER), &["list"][..]), (None, &["show", ID][..])] {
        let out = ctl(&url, token, args).await;
        assert_eq!(out.code, 2, "{args:?}: {} {}", out.stdout, out.stderr);
        assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
        assert!(
            out.stderr.contains(&format!("{url} is a fleet listener"))
                && out.stderr.contains("backfill ctl fleet")
                && out
                    .stderr
                    .contains(&format!("--url {url}/databases/<name>")),
            "{args:?}: {}",
            out.stderr
        );
    }
    handle.stop(true).await;
}

/// AUD-3: `ctl audit` shows control and bidirectional characters that an
/// audit row holds escaped, so none reaches the operator's terminal.
/// Guard: `audit_text` (on the server's `AuditEntry` and again in `ctl`).
#[actix_rt::test]
async fn aud03_ctl_audit_shows_control_characters_escaped() {
    let (db, engine, _hooks) = setup(3).await;
    let server = serve(admin(engine));
    db.exec(&format!(
        "INSERT INTO backfill_audit (backfill_id, action, actor, authority, correlation, outcome) \
         VALUES ('{ID}', 'start', E'ops\\x1b[2J', 'token', E'k\\r\\n\\u202e', 'applied')"
    ))
    .await;
    let audit = ctl(&server.url, Some(READER), &["audit", ID]).await;
    assert_eq!(audit.code, 0, "{}", audit.stderr);
    assert!(
        !audit
            .stdout
            .chars()
            .any(|c| c == '\u{1b}' || c == '\r' || c == '\u{202e}'),
        "{:?}",
        audit.stdout
    );
    assert!(audit.stdout.contains("ops\\u{001b}[2J"), "{}", audit.stdout);
    assert!(
        audit.stdout.contains("k\\u{000d}\\u{000a}\\u{202e}"),
        "{}",
        audit.stdout
    );
    server.stop().await;
}

/// Answers that mean what they say (ADM-1 in the client): a validation
/// that finds the postcondition false exits 7, an ID the server does not
/// know exits 6 naming that ID, a retry of a running backfill says it
/// changed nothing and what retry is for, a negative setting is refused
/// by the CLI naming its flag, and the server's refusal of a combination
/// names the CLI's flags rather than the API's fields; `audit` says when
/// there is nothing and shows each row's detail. Guards: the failure
/// check after `validate`, the 404 mapping, `action_line`,
/// `setting_value` with negative numbers allowed, `in_flag_words`, the
/// audit's empty line and detail line.
#[actix_rt::test]
async fn adm01_ctl_answers_name_failures_ids_and_flags() {
    let (db, engine, _hooks) = setup(10).await;
    let server = serve(admin(engine.clone()));
    let url = server.url.as_str();

    let empty = ctl(url, Some(READER), &["audit", ID]).await;
    assert_eq!(empty.code, 0, "{}", empty.stderr);
    assert_eq!(empty.stdout.trim(), format!("no audit records for {ID}"));

    let typo = ctl(url, Some(READER), &["show", "items.no-such.v1"]).await;
    assert_eq!(typo.code, 6, "{}", typo.stderr);
    assert!(typo.stderr.contains("items.no-such.v1"), "{}", typo.stderr);
    assert_eq!(typo.stderr.trim().lines().count(), 1, "{}", typo.stderr);
    // A near miss is answered with the ID it likely meant (ADM-1).
    let near = ctl(url, Some(READER), &["show", "items.countr"]).await;
    assert_eq!(near.code, 6, "{}", near.stderr);
    assert_eq!(near.stderr.trim().lines().count(), 1, "{}", near.stderr);
    assert!(
        near.stderr
            .contains(&format!("no backfill items.countr; did you mean {ID}?")),
        "{}",
        near.stderr
    );

    let start = ctl(url, Some(OPERATOR), &["start", ID]).await;
    assert_eq!(start.code, 0, "{}", start.stderr);
    let retry = ctl(url, Some(OPERATOR), &["retry", ID]).await;
    assert_eq!(retry.code, 0, "{}", retry.stderr);
    assert!(
        retry.stdout.contains("no change, it is running")
            && retry.stdout.contains("only to a blocked or failed"),
        "{}",
        retry.stdout
    );
    assert!(!retry.stdout.contains("converged"), "{}", retry.stdout);

    let negative = ctl(url, Some(OPERATOR), &["set", ID, "--pause-ms", "-1"]).await;
    assert_eq!(negative.code, 2, "{}", negative.stderr);
    assert_eq!(
        negative.stderr.trim().lines().count(),
        1,
        "{}",
        negative.stderr
    );
    assert!(
        negative.stderr.contains("--pause-ms") && negative.stderr.contains("between 0 and 3600000"),
        "{}",
        negative.stderr
    );
    // A word and a number out of range are told the same bound, once.
    let bound = format!(
        "between 1 and {}",
        backfill::throttle::settings::MAX_BATCH_SIZE
    );
    for bad in ["fast", "0"] {
        let refused = ctl(url, Some(OPERATOR), &["set", ID, "--batch-size", bad]).await;
        assert_eq!(refused.code, 2, "{bad}: {}", refused.stderr);
        assert_eq!(
            refused.stderr.trim().lines().count(),
            1,
            "{}",
            refused.stderr
        );
        assert!(
            refused.stderr.contains("--batch-size") && refused.stderr.contains(&bound),
            "{bad}: {}",
            refused.stderr
        );
    }
    let both = ctl(
        url,
        Some(OPERATOR),
        &["set", ID, "--batch-size", "5", "--target-batch-ms", "100"],
    )
    .await;
    assert_eq!(both.code, 2, "{}", both.stderr);
    assert!(
        both.stderr.contains("--batch-size and --target-batch-ms")
            && both.stderr.contains("--clear NAME")
            && !both.stderr.contains("null"),
        "{}",
        both.stderr
    );
    let set = ctl(url, Some(OPERATOR), &["set", ID, "--pause-ms", "5"]).await;
    assert_eq!(set.code, 0, "{}", set.stderr);
    let audit = ctl(url, Some(READER), &["audit", ID]).await;
    assert!(
        audit.stdout.contains("detail: pause_ms: unset -> 5"),
        "{}",
        audit.stdout
    );

    drive(&engine).await;
    let ok = ctl(url, Some(OPERATOR), &["validate", ID]).await;
    assert_eq!(ok.code, 0, "{}", ok.stderr);
    db.exec("UPDATE items SET n = 0 WHERE id = 1").await;
    let failed = ctl(url, Some(OPERATOR), &["validate", ID]).await;
    assert_eq!(failed.code, 7, "{} {}", failed.stdout, failed.stderr);
    assert!(failed.stdout.contains("failure"), "{}", failed.stdout);
    assert!(failed.stderr.contains("failed"), "{}", failed.stderr);
    let json = ctl(url, Some(OPERATOR), &["--json", "validate", ID]).await;
    assert_eq!(json.code, 7, "{}", json.stderr);
    server.stop().await;
}

/// OBS-4: `ctl history` prints a backfill's timeline oldest first: the
/// operator's start with the reason given by `--reason`, the claim by its
/// worker, the state changes up to completed with the validation's
/// outcome; an unknown ID exits 6 naming it, `--json` is the API's
/// document, and `--reason` on a command that is no action exits 2.
/// Guards: the timeline endpoint (without it the command fails), the
/// reason header the client sends.
#[actix_rt::test]
async fn obs04_ctl_history_prints_the_timeline_oldest_first() {
    let (_db, engine, _hooks) = setup(6).await;
    let server = serve(admin(engine.clone()));
    let url = server.url.as_str();
    let empty = ctl(url, Some(READER), &["history", ID]).await;
    assert_eq!(empty.code, 0, "{}", empty.stderr);
    assert_eq!(
        empty.stdout.trim(),
        format!("nothing recorded for {ID} yet")
    );
    let misplaced = ctl(url, Some(READER), &["list", "--reason", "why"]).await;
    assert_eq!(misplaced.code, 2, "{}", misplaced.stderr);
    assert!(
        misplaced.stderr.contains("--reason goes with an action"),
        "{}",
        misplaced.stderr
    );
    let start = ctl(
        url,
        Some(OPERATOR),
        &["start", ID, "--reason", "first run — café"],
    )
    .await;
    assert_eq!(start.code, 0, "{}", start.stderr);
    support::drive(&engine, "w7").await;
    let history = ctl(url, Some(READER), &["history", ID]).await;
    assert_eq!(history.code, 0, "{}", history.stderr);
    let lines: Vec<&str> = history.stdout.lines().collect();
    assert!(lines[0].starts_with("AT "), "{}", history.stdout);
    let expected = [
        ("operator", "start", "pending -> running", "ops"),
        ("runtime", "state", "pending -> running", "-"),
        ("runtime", "claimed", "running", "w7"),
        ("runtime", "state", "running -> validating", "-"),
        ("runtime", "claimed", "validating", "w7"),
        ("runtime", "state", "validating -> completed", "-"),
    ];
    assert_eq!(lines.len(), expected.len() + 1, "{}", history.stdout);
    for (line, (by, what, state, who)) in lines[1..].iter().zip(expected) {
        // The timestamp is two words: date and time.
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(&words[2..4], [by, what], "{line}");
        assert!(line.contains(state) && line.contains(who), "{line}");
    }
    assert!(
        lines
            .last()
            .is_some_and(|l| l.ends_with("validation success")),
        "{}",
        history.stdout
    );
    assert!(
        lines[1].ends_with("applied; reason: first run — café"),
        "{}",
        history.stdout
    );
    let json = ctl(
        url,
        Some(READER),
        &["history", ID, "--json", "--limit", "2"],
    )
    .await;
    let doc: serde_json::Value = serde_json::from_str(&json.stdout).expect("--json is JSON");
    assert_eq!(doc["items"].as_array().map(Vec::len), Some(2));
    let unknown = ctl(url, Some(READER), &["history", "no.such.backfill"]).await;
    assert_eq!(unknown.code, 6, "{}", unknown.stderr);
    assert!(
        unknown.stderr.contains("no.such.backfill"),
        "{}",
        unknown.stderr
    );
    server.stop().await;
}

/// OBS-5: `list` and `show` print the rate the server derived from its
/// progress samples, the same number the API (and so the web client)
/// reports, with the last minute as a trend and a time left; one sample
/// is `unknown`, never a client's own measurement. Guard: the table's
/// rate cell read from the view (a client-side rate has no previous
/// sample in a one-shot `list` and prints `unknown`).
#[actix_rt::test]
async fn obs05_ctl_list_and_show_print_the_servers_rate() {
    let (_db, engine, _hooks) = setup(40).await;
    let server = serve(admin(engine.clone()));
    let url = server.url.as_str();
    engine.start(ID).await.expect("start");
    let mut claim = engine
        .claim_next("w1", &[])
        .await
        .expect("claim")
        .expect("claimed");
    let claims = vec![(ID.to_string(), None, claim.generation)];
    engine.sample_progress("w1", &claims).await.expect("sample");
    let show = ctl(url, Some(READER), &["show", ID]).await;
    assert!(
        show.stdout.contains("rate          unknown"),
        "{}",
        show.stdout
    );
    for _ in 0..2 {
        engine.run_batch(&mut claim).await.expect("batch");
    }
    engine.sample_progress("w1", &claims).await.expect("sample");
    let view = call(
        url,
        "GET",
        &format!("/admin/backfills/{ID}"),
        Some(READER),
        None,
    )
    .await;
    let rate = view.body["progress"]["rows_per_second"]
        .as_f64()
        .expect("the server's rate");
    let shown = format!("{rate:.1}");

    let list = ctl(url, Some(READER), &["list"]).await;
    assert_eq!(list.code, 0, "{}", list.stderr);
    let header: Vec<&str> = list
        .stdout
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let row: Vec<&str> = list
        .stdout
        .lines()
        .find(|l| l.starts_with(ID))
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    let cell = |name: &str| header.iter().position(|h| *h == name).map(|i| row[i]);
    assert_eq!(cell("ROWS/S"), Some(shown.as_str()), "{}", list.stdout);
    assert!(
        cell("TREND").is_some_and(|t| t.ends_with('█')),
        "{}",
        list.stdout
    );
    assert!(
        cell("ETA").is_some_and(|t| t.ends_with('s')),
        "{}",
        list.stdout
    );
    let show = ctl(url, Some(READER), &["show", ID]).await;
    assert!(
        show.stdout
            .contains(&format!("rate          {shown} rows/s, last minute ")),
        "{}",
        show.stdout
    );
    server.stop().await;
}

/// FLT-1, FLT-6 end to end: `backfill demo --databases 3` creates three
/// tenant databases, one fleet serves them, and `ctl fleet status` shows
/// each database and the totals until all three completed every backfill;
/// a fleet-wide pause of a completed backfill is refused by every
/// database, one line each, exit 3; a malformed `--database` is exit 2
/// before anything is sent; `ctl fleet set` of the completed backfill in
/// one database is that database's 409, one line, exit 3; `ctl fleet
/// rollout` sets and lifts a rollout
/// cap (a cap of 0 is exit 2); `ctl show` and `ctl history` with one
/// database's prefix as the URL read that database through the fleet's
/// listener, and an unknown database is exit 6 naming it; SIGTERM drains
/// the fleet and the demo exits 0.
/// Guards: the demo's fleet path (one database would show one row),
/// the CLI's per-database lines and exit code, and the 404 of an unknown
/// database told apart from an unknown backfill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flt06_ctl_fleet_status_and_actions_against_the_fleet_demo() {
    use std::io::BufRead;
    use std::process::Stdio;
    let prefix = format!("bft_fleetdemo_{}", std::process::id());
    let token = "fleet-demo-token-0123456789";
    let mut child = Command::new(env!("CARGO_BIN_EXE_backfill"))
        .args(["demo", "--databases", "3", "--rows", "3000"])
        .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
        .args(["--database-name", &prefix])
        .env("DATABASE_URL", support::server_url())
        .env("BACKFILL_OPERATOR_TOKEN", token)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the demo");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let url = loop {
        let line = rx
            .recv_timeout(std::time::Duration::from_secs(120))
            .expect("the demo prints its fleet address");
        if let Some(rest) = line.strip_prefix("fleet     http://") {
            let addr = rest.split('/').next().unwrap().to_string();
            break format!("http://{addr}");
        }
    };
    let mut wait = support::Deadline::new("every tenant database completes");
    loop {
        let out = ctl(&url, Some(token), &["fleet", "status", "--json"]).await;
        assert_eq!(out.code, 0, "{}", out.stderr);
        let body: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        if body["totals"]["completed"] == 3 {
            break;
        }
        // Each poll is a process of its own: poll a few times a second.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        wait.tick().await;
    }
    let out = ctl(&url, Some(token), &["fleet", "status"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    for name in ["t01", "t02", "t03"] {
        assert!(
            out.stdout
                .lines()
                .any(|l| l.starts_with(name) && l.contains("4 completed")),
            "{}",
            out.stdout
        );
    }
    assert!(
        out.stdout
            .contains("fleet: 3 databases (3 available, 0 unavailable); 3 completed"),
        "{}",
        out.stdout
    );

    let id = backfill_cli::example::AUTHOR_NORM_ID;
    let out = ctl(&url, Some(token), &["fleet", "pause", id]).await;
    assert_eq!(out.code, 3, "{} {}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{}", out.stdout);
    assert!(
        lines[0].starts_with(&format!("t01: pause {id}: HTTP 409")),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("3 of 3 databases did not accept it"),
        "{}",
        out.stderr
    );
    let out = ctl(
        &url,
        Some(token),
        &["fleet", "pause", id, "--database", "Bad Name"],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert!(
        out.stderr.contains("is not a database name"),
        "{}",
        out.stderr
    );
    // A settings change of a completed backfill: the one database asked
    // refuses it (409), one line, exit 3.
    let out = ctl(
        &url,
        Some(token),
        &["fleet", "set", id, "--pause-ms", "5", "--database", "t02"],
    )
    .await;
    assert_eq!(out.code, 3, "{} {}", out.stdout, out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{}", out.stdout);
    assert!(
        lines[0].starts_with(&format!("t02: set {id}: HTTP 409")),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("1 of 1 databases did not accept it"),
        "{}",
        out.stderr
    );

    let out = ctl(
        &url,
        Some(token),
        &["fleet", "rollout", id, "--max-databases", "2"],
    )
    .await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(
        out.stdout.trim(),
        format!("rollout {id}: at most 2 databases at once")
    );
    let out = ctl(
        &url,
        Some(token),
        &["fleet", "rollout", id, "--max-databases", "0"],
    )
    .await;
    assert_eq!(out.code, 2, "{}", out.stderr);
    let out = ctl(&url, Some(token), &["fleet", "rollout", id, "--clear"]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), format!("rollout {id}: no cap"));

    // One database's own admin API through the fleet's listener: every
    // single-database command works with the database's prefix as its
    // URL; an unknown database is named as such, one line, exit 6.
    let one = format!("{url}/databases/t02");
    let out = ctl(&one, Some(token), &["show", id]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("completed"), "{}", out.stdout);
    let out = ctl(&one, Some(token), &["history", id]).await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("completed"), "{}", out.stdout);
    let out = ctl(&format!("{url}/databases/t09"), Some(token), &["show", id]).await;
    assert_eq!(out.code, 6, "{} {}", out.stdout, out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("unknown_database"), "{}", out.stderr);

    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
    for i in 1..=3 {
        let mut conn =
            <diesel_async::AsyncPgConnection as diesel_async::AsyncConnection>::establish(
                support::server_url(),
            )
            .await
            .unwrap();
        diesel_async::SimpleAsyncConnection::batch_execute(
            &mut conn,
            &format!("DROP DATABASE IF EXISTS {prefix}_t{i:02} WITH (FORCE)"),
        )
        .await
        .unwrap();
    }
}
