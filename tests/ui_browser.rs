//! The web client in a real browser (CT-12, ADM-1..5): headless Chromium
//! from Debian's `chromium` package, driven by `playwright-core`
//! (`tests/ui/browser.mjs`), against the real admin server and a real
//! PostgreSQL. Each test builds its states through the production paths
//! (the admin API and the engine), serves the admin API with the client at
//! `/ui`, and runs one scenario of the script. Where the scenario needs the
//! server or PostgreSQL in between (stop the server, look at a state), the
//! script prints `STEP <name> [payload]` and waits for a line on its
//! standard input.
//!
//! Index (each test's doc comment names the behaviour whose removal fails
//! it):
//! - the list renders the server's state, the server's rates and
//!   sparkline only for running rows, the run chart (OBS-5):
//!   `ct12_ui_browser_list_renders_server_state`
//! - unknown totals: `adm03_ui_browser_unknown_total_renders_unknown`
//! - a failed refresh: `adm03_ui_browser_failed_refresh_shows_stale_marker`
//! - blocked: `ct12_ui_browser_blocked_shows_diagnostic_and_offers_retry_and_validate`
//! - actions from the page reach PostgreSQL, a lost response is retried
//!   with its key: `adm04_ui_browser_pause_then_resume_changes_postgresql`
//! - explicit validation: `ct11_ui_browser_validate_completed_shows_typed_outcome`
//! - authorization: `ct09_ui_browser_unauthorized_shows_token_prompt_and_no_data`
//! - live settings from the page reach PostgreSQL and the audit, a lost
//!   answer is retried with its key:
//!   `thr04_ui_browser_settings_form_changes_batch_size_in_postgres`
//! - a refused change shows the server's 422 (and a reader's 403) and
//!   changes nothing: `thr04_ui_browser_settings_form_shows_422_and_changes_nothing`
//! - a runner held back by a real health signal:
//!   `thr02_ui_browser_throttled_backfill_shows_signal_value_and_threshold`
//! - the fleet page (FLT-6) on a fleet's listener: every database with
//!   its availability and a down one's reason, the totals, the database
//!   filter, a pause on every database (one audited request each, a lost
//!   answer retried with its key, the down database's 503 shown), a
//!   resume on one database, and one database's backfill on its own page,
//!   read and resumed through that database's API under its name:
//!   `flt06_ui_browser_fleet_page_lists_databases_and_pauses_all`
//! - AUTH-4, in every scenario: the page is served under the admin
//!   listener's Content-Security-Policy and the client runs with no
//!   violation of it (`browser.mjs` fails the scenario otherwise)
//!
//! Screenshots of the list and detail pages go to `target/ui-screenshots/`.
//! A missing Chromium or `tests/ui/node_modules` is installed on first use
//! (`support::prereq`: Debian's `chromium` when root, `npm ci` into
//! `tests/ui`); what cannot be installed fails every test in one line
//! naming the command that would fix it, before its fixture is built;
//! nothing is skipped.

mod support;

use backfill::admin::{Admin, AdminConfig, AuthConfig};
use backfill::host::{AppError, Application, Host, HostConfig};
use backfill::throttle::health::HealthCheck;
use backfill::{BatchOutcome, Claim, Engine, Phase, Registry, RepairError, SqlRepair, State};
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use support::admin::{
    call, engine_config, serve_with_ui, tokens_file, TestServer, OPERATOR, READER,
};
use support::prereq;
use support::repairs::{events_sql, items_sql, CompoundCounter, Counter, Hooks};
use support::Deadline;
use support::TestDb;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

const RUNNING: &str = "items.counter";
const PENDING: &str = "items.other";
const PAUSED: &str = "orders.counter";
const BLOCKED: &str = "tags.counter";
const COMPLETED: &str = "users.counter";
const UNKNOWN: &str = "events.compound-counter";
const ALL: [&str; 6] = [RUNNING, PENDING, PAUSED, BLOCKED, COMPLETED, UNKNOWN];

/// The blocked repair's diagnostic, as an operator would read it.
const BLOCKED_MESSAGE: &str = "tags column holds malformed JSON in some rows; fix them, then retry";

/// The programs a scenario needs, provided when missing (see
/// `support::prereq`): Chromium, playwright-core and node. Every test
/// calls it first, so that a missing one fails in its one line before any
/// database or server is set up.
fn prerequisites() -> PathBuf {
    let chromium = prereq::chromium();
    prereq::playwright(&ui_dir());
    prereq::node();
    chromium
}

fn ui_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ui")
}

/// `target/ui-screenshots`, beside the test's own temporary directory.
fn screenshot_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = tmp.parent().unwrap_or(tmp).join("ui-screenshots");
    std::fs::create_dir_all(&dir).expect("create the screenshot directory");
    dir
}

/// The fixture's engine settings: the admin tests' (a 5 s lock timeout),
/// with a claim's lease and its open batch's idle time long enough to
/// outlast a browser start. The fixture holds claims, with their next
/// batch's transaction open (the pipelined seam), while Chromium starts
/// and loads the page, and ten browsers starting at once on two loaded
/// cores take longer than the suite's 10 s statement timeout, after which
/// the server ends the idle session (EX-5) and the next batch reads
/// "connection lost". The lease stays under 90 s so the page words it in
/// seconds ("lease expires in 84 s"), which the scenarios read.
fn fixture_config() -> backfill::EngineConfig {
    backfill::EngineConfig {
        lease_ttl: Duration::from_secs(85),
        statement_timeout: Duration::from_secs(60),
        ..engine_config()
    }
}

/// The backfills of one test: every repair registered, each on a table of
/// its own so that their runs never meet, and the running one required
/// (it gates readiness).
struct Fixture {
    db: TestDb,
    engine: Engine,
    server: Option<TestServer>,
    hooks: Arc<Hooks>,
}

impl Fixture {
    async fn new() -> Self {
        prerequisites();
        let db = support::test_db().await;
        db.exec(&items_sql(10)).await;
        for table in ["orders", "tags", "users"] {
            db.exec(&items_sql(10).replace("items", table)).await;
        }
        db.exec(&events_sql(9)).await;
        let hooks = Hooks::new();
        let registry = Registry::new()
            .with(Counter::new(RUNNING, 4, Hooks::new()))
            .and_then(|r| r.with(Counter::new(PENDING, 4, Hooks::new())))
            .and_then(|r| r.with(Counter::new(PAUSED, 4, Hooks::new()).on_table("orders")))
            .and_then(|r| r.with(Counter::new(BLOCKED, 4, hooks.clone()).on_table("tags")))
            .and_then(|r| r.with(Counter::new(COMPLETED, 4, Hooks::new()).on_table("users")))
            .and_then(|r| r.with(CompoundCounter { limit: 3 }))
            .expect("definitions");
        let engine = Engine::new(db.pool.clone(), registry, fixture_config()).expect("engine");
        engine.register().await.expect("register");
        let principals = AuthConfig::parse_tokens_file(&tokens_file()).expect("tokens file");
        let admin = Admin::new(
            engine.clone(),
            AdminConfig {
                auth: AuthConfig::Tokens(principals),
                auto_backfills: true,
                required: BTreeSet::from([RUNNING.to_string()]),
            },
        );
        let server = serve_with_ui(admin);
        Self {
            db,
            engine,
            server: Some(server),
            hooks,
        }
    }

    fn url(&self) -> String {
        self.server.as_ref().expect("server").url.clone()
    }

    /// An action through the admin API, as an operator's client sends it.
    async fn act(&self, id: &str, action: &str) {
        let key = format!("setup-{action}-{id}");
        let r = call(
            &self.url(),
            "POST",
            &format!("/admin/backfills/{id}/{action}"),
            Some(OPERATOR),
            Some(&key),
        )
        .await;
        assert_eq!(r.status, 200, "{action} {id}: {}", r.text);
    }

    /// Claim `id` alone (every other ID excluded).
    async fn claim(&self, id: &str, worker: &str) -> Claim {
        let others: Vec<String> = ALL
            .iter()
            .filter(|other| **other != id)
            .map(|s| s.to_string())
            .collect();
        self.engine
            .claim_next(worker, &others)
            .await
            .expect("claim")
            .unwrap_or_else(|| panic!("{id} is not claimable"))
    }

    /// One committed batch on a held claim.
    /// One committed batch of `claim`, then a progress sample of it, as
    /// the runtime's renewer would take (OBS-5).
    async fn batch(&self, claim: &mut Claim) {
        match self.engine.run_batch(claim).await.expect("batch") {
            BatchOutcome::Committed { .. } => {}
            other => panic!("batch of {}: {other:?}", claim.id),
        }
        let sampled = vec![(claim.id.clone(), claim.partition, claim.generation)];
        self.engine
            .sample_progress(&claim.worker, &sampled)
            .await
            .expect("sample");
    }

    /// Run `id` to `completed`: batches to the bound, then validation.
    async fn complete(&self, id: &str) {
        let mut claim = self.claim(id, "worker-2").await;
        while let BatchOutcome::Committed {
            reached_bound: false,
            ..
        } = self.engine.run_batch(&mut claim).await.expect("batch")
        {}
        let claim = self.claim(id, "worker-2").await;
        assert_eq!(claim.phase, Phase::Validate);
        self.engine
            .validate_claimed(&claim)
            .await
            .expect("validate");
        assert_eq!(self.state(id).await, "completed");
    }

    /// Every state of the list: running with a held claim (40%), pending,
    /// paused (40%), blocked with its diagnostic, completed, and running
    /// with an unknown total. Returns the held claims (dropping them would
    /// not release them; they stay held as a live worker's would).
    async fn all_states(&self) -> Vec<Claim> {
        self.act(RUNNING, "start").await;
        let mut running = self.claim(RUNNING, "worker-1").await;
        self.batch(&mut running).await;

        self.act(PAUSED, "start").await;
        let mut paused = self.claim(PAUSED, "worker-1").await;
        self.batch(&mut paused).await;
        self.engine.release(&paused).await.expect("release");
        self.act(PAUSED, "pause").await;

        self.act(BLOCKED, "start").await;
        // The rows the block names (RT-4): the counter's negative ones.
        self.db
            .exec("UPDATE tags SET n = -1 WHERE id IN (2, 7)")
            .await;
        *self.hooks.fail_after_mutate.lock() = Some(RepairError::Blocked(BLOCKED_MESSAGE.into()));
        let mut blocked = self.claim(BLOCKED, "worker-1").await;
        let error = self
            .engine
            .run_batch(&mut blocked)
            .await
            .expect_err("the blocked repair fails its batch");
        let class = error.classification().expect("recordable");
        self.engine
            .record_failure(&blocked, &class)
            .await
            .expect("record");
        assert_eq!(self.state(BLOCKED).await, "blocked");

        self.act(COMPLETED, "start").await;
        self.complete(COMPLETED).await;

        self.act(UNKNOWN, "start").await;
        let mut unknown = self.claim(UNKNOWN, "worker-1").await;
        self.batch(&mut unknown).await;
        vec![running, unknown]
    }

    async fn state(&self, id: &str) -> String {
        self.db
            .text(&format!(
                "SELECT state AS v FROM backfill WHERE id = '{id}'"
            ))
            .await
            .expect("state")
    }

    /// What each row must show, read from PostgreSQL (not from the API the
    /// page reads): state, the percentage (or `unknown`), the rows, and
    /// whether it gates readiness.
    async fn expected_rows(&self) -> Value {
        #[derive(diesel::QueryableByName)]
        struct Row {
            #[diesel(sql_type = diesel::sql_types::Text)]
            id: String,
            #[diesel(sql_type = diesel::sql_types::Text)]
            state: String,
            #[diesel(sql_type = diesel::sql_types::BigInt)]
            rows_done: i64,
            #[diesel(sql_type = diesel::sql_types::Nullable<diesel::sql_types::BigInt>)]
            source_rows: Option<i64>,
        }
        use diesel_async::RunQueryDsl;
        let mut conn = self.db.pool.get().await.expect("pool");
        let rows: Vec<Row> =
            diesel::sql_query("SELECT id, state, rows_done, source_rows FROM backfill ORDER BY id")
                .load(&mut conn)
                .await
                .expect("rows");
        let expected: Vec<Value> = rows
            .into_iter()
            .map(|r| {
                let pct = match (r.state.as_str(), r.source_rows) {
                    ("completed" | "validating", _) => "100.0%".to_string(),
                    ("pending", _) | (_, None) => "unknown".to_string(),
                    (_, Some(total)) => {
                        format!("{:.1}%", r.rows_done as f64 * 100.0 / total as f64)
                    }
                };
                let total = r
                    .source_rows
                    .map(|t| t.to_string())
                    .unwrap_or_else(|| "unknown".into());
                json!({
                    "id": r.id,
                    "state": r.state,
                    "pct": pct,
                    "rows": format!("{} of {}", r.rows_done, total),
                    "gating": r.id == RUNNING,
                })
            })
            .collect();
        Value::Array(expected)
    }

    async fn stop_server(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop().await;
        }
    }
}

/// One run of `tests/ui/browser.mjs`: its standard output read line by
/// line, its standard error kept for the failure message.
struct Browser {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: Arc<parking_lot::Mutex<String>>,
    scenario: String,
}

impl Browser {
    async fn start(scenario: &str, url: &str, expect: &Value) -> Self {
        let chromium = prerequisites();
        let mut child = Command::new(prereq::node())
            .arg(ui_dir().join("browser.mjs"))
            .arg(scenario)
            .env("BACKFILL_UI_URL", url)
            .env("BACKFILL_UI_TOKEN", OPERATOR)
            .env("BACKFILL_UI_READER_TOKEN", READER)
            .env("BACKFILL_UI_EXPECT", expect.to_string())
            .env("BACKFILL_UI_SCREENSHOTS", screenshot_dir())
            .env("BACKFILL_CHROMIUM", &chromium)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("run node");
        let stdin = child.stdin.take().expect("stdin");
        let lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let stderr = Arc::new(parking_lot::Mutex::new(String::new()));
        let mut err = BufReader::new(child.stderr.take().expect("stderr")).lines();
        let keep = stderr.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = err.next_line().await {
                let mut all = keep.lock();
                all.push_str(&line);
                all.push('\n');
            }
        });
        Self {
            child,
            stdin,
            lines,
            stderr,
            scenario: scenario.to_string(),
        }
    }

    fn failure(&self, what: &str) -> String {
        format!(
            "browser scenario {}: {what}\n--- browser.mjs stderr ---\n{}",
            self.scenario,
            self.stderr.lock()
        )
    }

    /// Wait (at most 90 s) for `STEP <name>`; returns its payload.
    async fn step(&mut self, name: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line()).await;
            match line {
                Ok(Ok(Some(line))) => {
                    eprintln!("[{}] {line}", self.scenario);
                    if let Some(rest) = line.strip_prefix("STEP ") {
                        let (step, payload) = rest.split_once(' ').unwrap_or((rest, ""));
                        assert_eq!(step, name, "{}", self.failure("steps out of order"));
                        return payload.to_string();
                    }
                }
                Ok(_) => {
                    // The script ended before the step: show why.
                    let status = self.child.wait().await.ok();
                    panic!(
                        "{}",
                        self.failure(&format!("ended ({status:?}) before step {name}"))
                    );
                }
                Err(_) => panic!("{}", self.failure(&format!("no step {name} within 90 s"))),
            }
        }
    }

    /// Let the script go on past its current step.
    async fn go(&mut self) {
        self.stdin
            .write_all(b"go\n")
            .await
            .expect("write to browser.mjs");
        self.stdin.flush().await.expect("flush");
    }

    /// Wait for the script to end; it must say `PASS` and exit 0.
    async fn finish(mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        let mut passed = false;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => {
                    eprintln!("[{}] {line}", self.scenario);
                    passed |= line == format!("PASS {}", self.scenario);
                }
                Ok(_) => break,
                Err(_) => panic!("{}", self.failure("did not end within 90 s")),
            }
        }
        let status = tokio::time::timeout_at(deadline, self.child.wait())
            .await
            .map_err(|_| self.failure("did not exit"))
            .unwrap()
            .expect("wait for browser.mjs");
        assert!(
            status.success() && passed,
            "{}",
            self.failure(&format!("exit {status:?}"))
        );
    }
}

/// A Chromium that is not there fails a browser test in one line naming
/// the fix, before its fixture: this binary run again for one scenario
/// with `BACKFILL_CHROMIUM` at a missing path. Guard: the check in
/// `prerequisites` (without it the scenario fails later, inside node, with
/// playwright's launch error, or a fixture's database is built first).
#[test]
fn ct12_ui_browser_missing_chromium_fails_in_one_line_naming_the_fix() {
    let missing = "/nonexistent/chromium";
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "ct12_ui_browser_list_renders_server_state"])
        .env(prereq::CHROMIUM_ENV, missing)
        .output()
        .expect("run the test binary");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("1 failed"), "{text}");
    let start = format!("{}={missing} does not exist", prereq::CHROMIUM_ENV);
    assert!(
        text.lines()
            .any(|l| l.starts_with(&start) && l.contains("apt-get install -y chromium")),
        "{text}"
    );
    // The fixture was never built: no scenario and no server started.
    assert!(!text.contains("browser scenario"), "{text}");
}

/// The list shows each backfill as PostgreSQL has it: state, percentage,
/// rows, the gating marker on the required one, the blocked one's
/// diagnostic, only the actions its state allows; the server's rows/s, an
/// ETA and a sparkline appear for the running row once the server has two
/// progress samples of its claim (OBS-5: a batch committed and sampled
/// while the page is open), never before and never for rows that are not
/// running; the detail page draws the run chart; the state filter narrows
/// the list. Guards: `row`/`progressCell`/`markers`/`rateEta`/`actionsFor`/
/// `serverRate`/`runChartHtml` in app.js (any of them wrong fails the
/// comparison with PostgreSQL or the server).
#[actix_rt::test]
async fn ct12_ui_browser_list_renders_server_state() {
    let fx = Fixture::new().await;
    let mut claims = fx.all_states().await;
    let mut browser = Browser::start("list", &fx.url(), &fx.expected_rows().await).await;
    browser.step("loaded").await;
    // Progress while the page watches: a rate needs two reads apart.
    fx.batch(&mut claims[0]).await;
    browser.go().await;
    browser.finish().await;
}

/// A running backfill whose definition cannot count its source shows
/// `unknown` (no bar, no percentage, "of unknown" rows) and an ETA of
/// "unknown (total unknown)" once its rate is measured, never 0%. Guard:
/// `progressInfo`/`rateEta` treating a null total as unknown.
#[actix_rt::test]
async fn adm03_ui_browser_unknown_total_renders_unknown() {
    let fx = Fixture::new().await;
    let mut claims = fx.all_states().await;
    let mut browser = Browser::start("unknown", &fx.url(), &fx.expected_rows().await).await;
    browser.step("loaded").await;
    fx.batch(&mut claims[1]).await;
    browser.go().await;
    browser.finish().await;
}

/// With the server gone, the page keeps the last data it read, marks it
/// "Stale: last refreshed N s ago" with a growing age, shows no rate, and
/// never turns to zeros or "Live"; the detail page opened then is stale
/// too. Guard: the refresh's error path (keeping `views`, setting
/// `lastError`) and `statusLine`.
#[actix_rt::test]
async fn adm03_ui_browser_failed_refresh_shows_stale_marker() {
    let mut fx = Fixture::new().await;
    let _claims = fx.all_states().await;
    let mut browser = Browser::start("stale", &fx.url(), &fx.expected_rows().await).await;
    browser.step("loaded").await;
    fx.stop_server().await;
    browser.go().await;
    browser.finish().await;
}

/// A blocked backfill shows its diagnostic in the list and on its detail
/// page, offers exactly `retry` and `validate`, its audit trail names who
/// started it, and its timeline (OBS-4) shows the block with its
/// diagnostic, the claim by its worker and the operator's start; with no
/// rate ever recorded there is no run chart, and the page says so (OBS-5);
/// the diagnostic card names the keys that block it (RT-4).
/// Guards: `actionsFor("blocked")`, the diagnostic card, the audit read of
/// the detail page, its timeline read and `runChartHtml`'s empty case.
#[actix_rt::test]
async fn ct12_ui_browser_blocked_shows_diagnostic_and_offers_retry_and_validate() {
    let fx = Fixture::new().await;
    let _claims = fx.all_states().await;
    let mut expect = fx.expected_rows().await;
    expect
        .as_array_mut()
        .expect("rows")
        .push(json!({"message": BLOCKED_MESSAGE}));
    let browser = Browser::start("blocked", &fx.url(), &expect).await;
    browser.finish().await;
}

/// Bulk pause (ADM-4): the running rows, filtered, paused with one
/// confirmation; each gets one audited request of its own, and no row the
/// list did not show is touched. Guards: `bulkTargets` over the shown
/// rows and one request (one key) per backfill in `sendBulk`.
#[actix_rt::test]
async fn adm04_ui_browser_bulk_pause_sends_one_audited_request_each() {
    let fx = Fixture::new().await;
    let _claims = fx.all_states().await;
    let mut browser = Browser::start("bulk", &fx.url(), &fx.expected_rows().await).await;
    browser.step("paused").await;
    for id in [RUNNING, UNKNOWN] {
        assert_eq!(fx.state(id).await, "paused", "{id}");
        assert_eq!(
            fx.db
                .scalar(&format!(
                    "SELECT count(DISTINCT correlation) AS v FROM backfill_audit \
                     WHERE backfill_id = '{id}' AND action = 'pause' AND outcome = 'applied'"
                ))
                .await,
            1,
            "{id}: one audited request"
        );
    }
    for id in [PENDING, PAUSED, BLOCKED, COMPLETED] {
        assert_eq!(
            fx.db
                .scalar(&format!(
                    "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{id}' \
                     AND action = 'pause' AND correlation LIKE 'ui-%'"
                ))
                .await,
            0,
            "{id} was not shown: the page sent it nothing"
        );
    }
    browser.go().await;
    browser.finish().await;
}

/// Pause from the detail page, confirmed in the page's dialog (Escape sends
/// nothing), with its response lost after the commit: the page says the
/// outcome is unknown and offers to retry, and the retry carries the same
/// Idempotency-Key, so PostgreSQL holds one applied pause and one replay of
/// it. The reason typed in the dialog (OBS-4) travels with the request
/// and its retry and is stored with the applied pause's audit row. Then
/// resume, by keyboard alone, back to `running`. Each state is asserted in
/// PostgreSQL. Guards: the confirm dialog, `keyFor` (a new key on retry
/// would record a second, `converged` pause), the actions' requests and
/// `reasonHeaders`.
#[actix_rt::test]
async fn adm04_ui_browser_pause_then_resume_changes_postgresql() {
    let fx = Fixture::new().await;
    let _claims = fx.all_states().await;
    let generation = format!("SELECT generation AS v FROM backfill WHERE id = '{RUNNING}'");
    let pauses = format!(
        "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{RUNNING}' \
         AND action = 'pause'"
    );
    let before = fx.db.scalar(&generation).await;
    let mut browser = Browser::start("pause-resume", &fx.url(), &fx.expected_rows().await).await;

    browser.step("cancelled").await;
    assert_eq!(fx.state(RUNNING).await, "running", "Escape sent nothing");
    assert_eq!(
        fx.db.scalar(&pauses).await,
        0,
        "a cancelled dialog sends nothing"
    );
    browser.go().await;

    // The first request committed; only its response was lost.
    browser.step("lost").await;
    assert_eq!(fx.state(RUNNING).await, "paused");
    browser.go().await;

    let key = browser.step("paused").await;
    assert!(key.starts_with("ui-"), "the page's key: {key}");
    assert_eq!(fx.state(RUNNING).await, "paused");
    assert_eq!(
        fx.db.scalar(&generation).await,
        before + 1,
        "one pause, one fence"
    );
    let audit = |outcome: &str| {
        format!(
            "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{RUNNING}' \
             AND action = 'pause' AND outcome = '{outcome}' AND correlation = '{key}'"
        )
    };
    assert_eq!(
        fx.db.scalar(&audit("applied")).await,
        1,
        "the pause applied once"
    );
    assert_eq!(
        fx.db
            .text(&format!(
                "SELECT reason AS v FROM backfill_audit WHERE backfill_id = '{RUNNING}' \
                 AND action = 'pause' AND outcome = 'applied'"
            ))
            .await
            .as_deref(),
        Some("quiet hours — café"),
        "the reason stored with the pause"
    );
    assert_eq!(
        fx.db.scalar(&audit("replayed")).await,
        1,
        "the retry replayed it"
    );
    assert_eq!(fx.db.scalar(&pauses).await, 2, "no other pause was sent");
    browser.go().await;

    browser.step("resumed").await;
    assert_eq!(fx.state(RUNNING).await, "running");
    assert_eq!(
        fx.db
            .scalar(&format!(
                "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{RUNNING}' \
                 AND action = 'resume' AND outcome = 'applied' AND actor = 'ops' \
                 AND prior_state = 'paused' AND resulting_state = 'running'"
            ))
            .await,
        1
    );
    browser.go().await;
    browser.finish().await;
    support::admin::assert_audit_complete(&fx.db).await;
}

/// Explicit validation of a completed backfill from its page shows the
/// server's typed outcome: `success`, then, after a row was broken behind
/// its back, `failure` with the definition's diagnostic, while the state
/// stays `completed` (VAL-5); both runs are listed in its validation
/// history, each with its own key. Guards: `describeResult`/`resultOutcome`
/// and the validation card.
#[actix_rt::test]
async fn ct11_ui_browser_validate_completed_shows_typed_outcome() {
    let fx = Fixture::new().await;
    let _claims = fx.all_states().await;
    let mut browser = Browser::start("validate", &fx.url(), &fx.expected_rows().await).await;
    browser.step("validated").await;
    let validations = |outcome: &str| {
        format!(
            "SELECT count(DISTINCT correlation) AS v FROM backfill_audit \
             WHERE backfill_id = '{COMPLETED}' AND action = 'validate' AND outcome = '{outcome}'"
        )
    };
    assert_eq!(fx.db.scalar(&validations("success")).await, 1);
    fx.db.exec("UPDATE users SET n = 2 WHERE id = 3").await;
    browser.go().await;
    browser.step("failed").await;
    assert_eq!(fx.db.scalar(&validations("failure")).await, 1);
    assert_eq!(fx.state(COMPLETED).await, "completed");
    assert_eq!(
        fx.db
            .text(&format!(
                "SELECT validation_outcome AS v FROM backfill WHERE id = '{COMPLETED}'"
            ))
            .await
            .as_deref(),
        Some("failure")
    );
    browser.go().await;
    browser.finish().await;
}

/// A token the server rejects (401) shows the token prompt, focused, and no
/// data at all, on the list and on a detail page; a valid token then shows
/// the list, and changing to a rejected token drops it again. A token that
/// may read but not operate reads every row and is offered no action
/// button, and nothing changes in PostgreSQL. Guard: the 401 branch of the
/// refresh (`dropData`) and the prompt; the capabilities read from
/// `GET /admin/me`.
#[actix_rt::test]
async fn ct09_ui_browser_unauthorized_shows_token_prompt_and_no_data() {
    let fx = Fixture::new().await;
    let _claims = fx.all_states().await;
    let browser = Browser::start("unauthorized", &fx.url(), &fx.expected_rows().await).await;
    browser.finish().await;
    assert_eq!(
        fx.state(PAUSED).await,
        "paused",
        "a refused resume changes nothing"
    );
}

/// The live settings of `id` as PostgreSQL stores them (a JSON object).
async fn stored_settings(db: &TestDb, id: &str) -> Value {
    let text = db
        .text(&format!(
            "SELECT settings::text AS v FROM backfill WHERE id = '{id}'"
        ))
        .await
        .expect("settings");
    serde_json::from_str(&text).expect("settings are JSON")
}

/// How many `settings` audit rows of `id` have `outcome` (and, when
/// given, this correlation and detail).
async fn settings_audits(
    db: &TestDb,
    id: &str,
    outcome: &str,
    key: Option<&str>,
    detail: Option<&str>,
) -> i64 {
    let mut sql = format!(
        "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{id}' \
         AND action = 'settings' AND outcome = '{outcome}'"
    );
    if let Some(key) = key {
        sql.push_str(&format!(" AND correlation = '{key}'"));
    }
    if let Some(detail) = detail {
        sql.push_str(&format!(" AND detail = '{detail}'"));
    }
    db.scalar(&sql).await
}

/// The settings form of a running backfill's page, by keyboard: Escape in
/// its confirm dialog sends nothing; a change of the batch size whose
/// answer is lost after the commit is stored in PostgreSQL, and sending
/// the same change again carries the same Idempotency-Key (one `applied`
/// audit row with prior and new values, one `replayed`); the page's view
/// then shows the new value. A second change (reset the batch size, set a
/// pause) has a key of its own, sends `null` for the reset and is stored
/// and audited as such. Guards: the form's PATCH (`sendSettings`),
/// `settingsChange`, `keyFor` with the change as its request, the refresh
/// after an answer, and `settingsRows`.
#[actix_rt::test]
async fn thr04_ui_browser_settings_form_changes_batch_size_in_postgres() {
    let fx = Fixture::new().await;
    let _claims = fx.all_states().await;
    let generation = format!("SELECT generation AS v FROM backfill WHERE id = '{RUNNING}'");
    let before = fx.db.scalar(&generation).await;
    assert_eq!(stored_settings(&fx.db, RUNNING).await, json!({}));
    let mut browser = Browser::start("settings", &fx.url(), &fx.expected_rows().await).await;

    // The change committed; only its answer was lost.
    browser.step("lost").await;
    assert_eq!(
        stored_settings(&fx.db, RUNNING).await,
        json!({"batch_size": 7})
    );
    browser.go().await;

    let key = browser.step("applied").await;
    assert!(key.starts_with("ui-"), "the page's key: {key}");
    assert_eq!(
        stored_settings(&fx.db, RUNNING).await,
        json!({"batch_size": 7})
    );
    assert_eq!(
        settings_audits(
            &fx.db,
            RUNNING,
            "applied",
            Some(&key),
            Some("batch_size: unset -> 7")
        )
        .await,
        1,
        "the change applied once, with its prior and new value"
    );
    assert_eq!(
        settings_audits(&fx.db, RUNNING, "replayed", Some(&key), None).await,
        1,
        "the same change sent again replayed it"
    );
    assert_eq!(
        settings_audits(&fx.db, RUNNING, "applied", None, None).await,
        1,
        "no other change was applied"
    );
    browser.go().await;

    let second = browser.step("changed").await;
    assert_ne!(second, key, "a new change has a new key");
    assert_eq!(
        stored_settings(&fx.db, RUNNING).await,
        json!({"pause_ms": 250})
    );
    assert_eq!(
        settings_audits(
            &fx.db,
            RUNNING,
            "applied",
            Some(&second),
            Some("batch_size: 7 -> unset; pause_ms: unset -> 250")
        )
        .await,
        1
    );
    assert_eq!(
        fx.state(RUNNING).await,
        "running",
        "settings are no transition"
    );
    assert_eq!(
        fx.db.scalar(&generation).await,
        before,
        "and advance no generation"
    );
    browser.go().await;
    browser.finish().await;
    support::admin::assert_audit_complete(&fx.db).await;
}

/// Refused changes from the page of a paused backfill: batch size 0 shows
/// the server's 422 `invalid_settings` beside the form, marks the field it
/// names and keeps what was typed; a value that is not a number is
/// refused by the form itself, with no dialog; min above max shows the
/// other 422; the
/// page's view of the settings stays the server's through later refreshes;
/// and PostgreSQL holds no setting and two audited refusals. A token that
/// may read but not operate is offered neither the form nor an action
/// (`GET /admin/me` names its capabilities), so it sends nothing. Guards:
/// `describeSettingsResult` and the form's error path (showing the body,
/// never applying it), and the withdrawal on the caller's capabilities.
#[actix_rt::test]
async fn thr04_ui_browser_settings_form_shows_422_and_changes_nothing() {
    let fx = Fixture::new().await;
    let _claims = fx.all_states().await;
    let mut browser =
        Browser::start("settings-invalid", &fx.url(), &fx.expected_rows().await).await;
    browser.step("refused").await;
    assert_eq!(stored_settings(&fx.db, PAUSED).await, json!({}));
    assert_eq!(
        settings_audits(&fx.db, PAUSED, "invalid_settings", None, None).await,
        2,
        "both refusals are audited"
    );
    assert_eq!(
        settings_audits(&fx.db, PAUSED, "applied", None, None).await,
        0
    );
    browser.go().await;
    browser.step("forbidden").await;
    assert_eq!(stored_settings(&fx.db, PAUSED).await, json!({}));
    assert_eq!(
        fx.db
            .scalar(&format!(
                "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{PAUSED}' \
                 AND action = 'settings' AND outcome = 'forbidden' AND actor = 'viewer'"
            ))
            .await,
        0,
        "the reader is offered nothing to send"
    );
    assert_eq!(fx.state(PAUSED).await, "paused");
    browser.go().await;
    browser.finish().await;
}

/// The backfill of the throttle test.
const THROTTLED: &str = "items.fix.v1";

/// The application's own health check: unhealthy while `down` is set.
#[derive(Default)]
struct Maintenance {
    down: AtomicBool,
}

#[backfill::async_trait]
impl HealthCheck for Maintenance {
    async fn check(&self) -> Result<(), String> {
        if self.down.load(Ordering::SeqCst) {
            Err("maintenance window".into())
        } else {
            Ok(())
        }
    }
}

/// An application with one repair over `items` (its table, watched for
/// lock waiters) and the maintenance check.
struct Shop {
    check: Arc<Maintenance>,
}

#[backfill::async_trait]
impl Application for Shop {
    fn registry(&self) -> Result<Registry, backfill::repair::DefinitionError> {
        Registry::new().with(
            SqlRepair::new(THROTTLED, "items")
                .key("id")
                .set("n = n + 1")
                .validate_where("n <> 1")
                .batch_size(50)
                .build()?,
        )
    }

    fn health_check(&self) -> Option<Arc<dyn HealthCheck>> {
        Some(self.check.clone())
    }

    async fn check_schema(&self, _conn: &mut AsyncPgConnection) -> Result<(), AppError> {
        Ok(())
    }
}

/// The signal the row records as holding `THROTTLED` back, once it is
/// `signal`.
async fn wait_for_throttle(db: &TestDb, signal: &str) {
    let sql = format!("SELECT throttle->>'signal' AS v FROM backfill WHERE id = '{THROTTLED}'");
    let mut wait = Deadline::new("the runner records the throttle");
    while db.text(&sql).await.as_deref() != Some(signal) {
        wait.tick().await;
    }
}

/// A backfill run by the production runtime (a `Host`, with its health
/// monitor, runner and the web client on its admin listener) and held back
/// for real: first by the application's health check (the list's marker
/// names it, its reason in the title), then, with the check passing, by a
/// session queued for a lock on the repair's table past a limit of 0
/// waiters: the marker reads `throttled: lock_waiters 1 past 0`, in the
/// list and beside the state on its page, whose throttle card names
/// signal, value, threshold and the server's condition, while the state
/// stays `running`. When the lock is released the backfill completes and
/// the marker and card go. Guards: `markers`/`throttleInfo` and the
/// throttle card.
#[actix_rt::test]
async fn thr02_ui_browser_throttled_backfill_shows_signal_value_and_threshold() {
    prerequisites();
    let db = support::test_db().await;
    db.exec(&items_sql(300)).await;
    let mut config = HostConfig::new(db.url.clone());
    config.listen = "127.0.0.1:0".parse().expect("address");
    config.admin_listen = "127.0.0.1:0".parse().expect("address");
    config.auto_backfills = false;
    config.engine = engine_config();
    config.engine.lease_ttl = Duration::from_millis(1500);
    config.runtime.poll_interval = Duration::from_millis(50);
    config.health.interval = Duration::from_millis(50);
    config.health.thresholds.max_lock_waiters = Some(0);
    config.admin_auth =
        AuthConfig::Tokens(AuthConfig::parse_tokens_file(&tokens_file()).expect("tokens file"));
    let check = Arc::new(Maintenance::default());
    check.down.store(true, Ordering::SeqCst);
    let host = Host::start(
        config,
        Shop {
            check: check.clone(),
        },
    )
    .await
    .expect("host");
    host.engine().start(THROTTLED).await.expect("start");
    host.embedded.runtime.wake();
    wait_for_throttle(&db, "application").await;

    let url = format!("http://{}", host.admin_addr);
    let mut browser = Browser::start("throttled", &url, &json!([])).await;
    browser.step("application").await;

    // A session holds a lock on items and another queues behind it.
    let mut holder = db.connect().await;
    holder
        .batch_execute("BEGIN; SELECT count(*) FROM items")
        .await
        .expect("hold a lock");
    let waiter_url = db.url.clone();
    let waiter = actix_rt::spawn(async move {
        let mut conn = AsyncPgConnection::establish(&waiter_url)
            .await
            .expect("connect");
        conn.batch_execute("BEGIN; LOCK TABLE items IN ACCESS EXCLUSIVE MODE; COMMIT")
            .await
            .expect("the queued lock");
    });
    support::admin::wait_for_lock_waiters(&db, 1).await;
    check.down.store(false, Ordering::SeqCst);
    wait_for_throttle(&db, "lock_waiters").await;
    assert_eq!(
        db.scalar(&format!(
            "SELECT rows_done AS v FROM backfill WHERE id = '{THROTTLED}'"
        ))
        .await,
        0,
        "no batch ran while throttled"
    );
    browser.go().await;
    browser.step("lock").await;

    holder.batch_execute("ROLLBACK").await.expect("release");
    waiter.await.expect("the waiter");
    let row = host
        .engine()
        .wait_for(
            THROTTLED,
            &[State::Completed, State::Failed, State::Blocked],
            Duration::from_secs(90),
        )
        .await
        .expect("wait for the end");
    assert_eq!(row.state, State::Completed, "{:?}", row.last_error);
    browser.go().await;
    browser.finish().await;
    host.stop().await;
}

/// UNDO-2 in the web client: a completed journaled backfill's page offers
/// undo, whose confirmation names the conflict rule; the undo it starts is
/// named on the page, and once it ran (two rows changed by the application
/// meanwhile) the page shows its progress from the journal and the
/// conflicts. Guards: `undoOffered`, the undo's consequence text,
/// `journalRows`.
#[actix_rt::test]
async fn undo02_ui_browser_undo_names_the_conflict_rule_and_shows_progress() {
    const JOURNALED: &str = "people.email-norm.v1";
    prerequisites();
    let db = support::test_db().await;
    db.exec(
        "CREATE TABLE people (id bigint PRIMARY KEY, email text NOT NULL, email_norm text); \
         INSERT INTO people (id, email) SELECT g, 'User' || g || '@Example.COM' \
             FROM generate_series(1, 10) g",
    )
    .await;
    let repair = SqlRepair::new(JOURNALED, "people")
        .key("id")
        .set("email_norm = lower(email)")
        .validate_where("email_norm IS DISTINCT FROM lower(email)")
        .journal(["email_norm"])
        .batch_size(4)
        .build()
        .expect("definition");
    let registry = Registry::new().with(repair).expect("registers");
    let engine = Engine::new(db.pool.clone(), registry, fixture_config()).expect("engine");
    engine.register().await.expect("register");
    engine.start(JOURNALED).await.expect("start");
    support::admin::drive(&engine).await;
    let principals = AuthConfig::parse_tokens_file(&tokens_file()).expect("tokens file");
    let admin = Admin::new(
        engine.clone(),
        AdminConfig {
            auth: AuthConfig::Tokens(principals),
            auto_backfills: true,
            required: BTreeSet::new(),
        },
    );
    let server = serve_with_ui(admin);
    let mut browser = Browser::start("undo", &server.url, &Value::Array(Vec::new())).await;
    browser.step("undo-started").await;
    db.exec("UPDATE people SET email_norm = 'app' WHERE id IN (3, 7)")
        .await;
    support::admin::drive(&engine).await;
    browser.go().await;
    browser.finish().await;
    assert_eq!(
        db.scalar("SELECT count(*) AS v FROM people WHERE email_norm IS NULL")
            .await,
        8
    );
    server.stop().await;
}

/// The repair of the fleet test, on an `events` table in each database.
const FLEET_REPAIR: &str = "events.fix";

/// The databases of the fleet test, dropped when it ends, pass or fail
/// (the fleet's pools are ended by `WITH (FORCE)`).
struct FleetDatabases(Vec<String>);

impl FleetDatabases {
    /// `n` new databases, each with an `events` table of 20 rows to fix;
    /// returns them and their URLs.
    async fn create(n: usize) -> (Self, Vec<String>) {
        let mut dbs = Self(Vec::new());
        let mut urls = Vec::new();
        let mut server = AsyncPgConnection::establish(support::server_url())
            .await
            .expect("connect to the test server");
        for i in 0..n {
            let name = format!(
                "bft_uifleet_{}_{}_{i}",
                std::process::id(),
                rand::random::<u32>()
            );
            server
                .batch_execute(&format!("CREATE DATABASE {name}"))
                .await
                .expect("create a fleet database");
            dbs.0.push(name.clone());
            let url = support::with_database(support::server_url(), &name);
            let mut conn = AsyncPgConnection::establish(&url).await.expect("connect");
            conn.batch_execute(
                "CREATE TABLE events (id bigint PRIMARY KEY, n bigint NOT NULL DEFAULT 0); \
                 INSERT INTO events (id) SELECT g FROM generate_series(1, 20) g",
            )
            .await
            .expect("the events table");
            urls.push(url);
        }
        (dbs, urls)
    }
}

impl Drop for FleetDatabases {
    fn drop(&mut self) {
        let names = std::mem::take(&mut self.0);
        let _ = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                if let Ok(mut conn) = AsyncPgConnection::establish(support::server_url()).await {
                    for name in names {
                        let _ = conn
                            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                            .await;
                    }
                }
            });
        })
        .join();
    }
}

/// One number read from the database at `url`.
async fn scalar_at(url: &str, sql: &str) -> i64 {
    let mut conn = AsyncPgConnection::establish(url).await.expect("connect");
    support::scalar_on(&mut conn, sql).await
}

/// FLT-6 in the web client: a real `Fleet` over databases `d0` and `d1`
/// and a database `down` that does not exist, its listener serving the
/// client at `/ui`. The repair's run window is closed, so started
/// backfills stay `running`. The page finds out it talks to a fleet and
/// shows the fleet page; a reader's token reads it and is offered no
/// action (`GET /admin/fleet/me`); then, for the operator: the totals, one row per database with `down`
/// unavailable and its reason as the fleet reports it, the backfills of
/// both databases with their database, and `down` reported as not
/// listed; the database filter narrows both tables to one database and
/// stays in the address across a reload. A
/// pause on every database, confirmed with a reason, whose answer is
/// lost after the commit, is retried with the same Idempotency-Key: in
/// PostgreSQL each available database has its backfill paused, one
/// applied audit row of its own carrying the page's key and the reason,
/// and one replay; the page shows each database's answer, `down`'s 503
/// among them, and still offers the retry that would reach it. A resume
/// from `d0`'s row reaches `d0` alone. `d1`'s backfill opens on its own
/// page (its audit read through `/databases/d1`), and a resume from that
/// page reaches `d1` alone, audited there. The fleet page's settings form
/// refuses a value that is not a number without sending it, then sends
/// one merge patch to every database: each stores the new batch size and
/// audits it with the page's key and reason, and the page shows each
/// answer, `down`'s 503 among them. Guards: the fan-out of the
/// all-databases action (`sendFleet` without `?database=`; acting on one
/// database leaves the other running and shows one answer), the
/// listener probe (`listenerKind`), `fleetDatabaseRow`/`fleetAnswers`
/// (the down database's reason and 503), `keyFor` on the fleet's
/// requests and `fleetSettingsAnswers` (each database's settings answer).
#[actix_rt::test]
async fn flt06_ui_browser_fleet_page_lists_databases_and_pauses_all() {
    use backfill::host::{Availability, Database, Fleet, FleetConfig};
    use chrono::Timelike;
    prerequisites();
    let (_dbs, urls) = FleetDatabases::create(2).await;
    let databases = vec![
        Database::new("d0", urls[0].clone()),
        Database::new("d1", urls[1].clone()),
        Database::new(
            "down",
            support::with_database(support::server_url(), "bft_absent_ui_fleet"),
        ),
    ];
    let hour = u64::from(chrono::Utc::now().hour());
    let registry = Registry::new()
        .with(
            SqlRepair::new(FLEET_REPAIR, "events")
                .key("id")
                .set("n = n + 1")
                .validate_where("n <> 1")
                .run_window((hour + 2) % 24, (hour + 3) % 24)
                .build()
                .expect("definition"),
        )
        .expect("registers");
    let mut host = HostConfig::new("postgres://unused");
    host.auto_backfills = false;
    host.pool_size = Some(3);
    host.engine = engine_config();
    host.runtime.max_concurrent_runners = 1;
    host.runtime.poll_interval = Duration::from_millis(100);
    host.admin_auth =
        AuthConfig::Tokens(AuthConfig::parse_tokens_file(&tokens_file()).expect("tokens file"));
    let mut config = FleetConfig::new(host);
    // The test asks nothing of a refresh; the loop stays out of the way.
    config.refresh_interval = Duration::from_secs(600);
    let mut fleet = Fleet::start(config, databases, registry)
        .await
        .expect("fleet");
    let addr = fleet
        .listen("127.0.0.1:0".parse().expect("address"))
        .expect("listen");
    for name in ["d0", "d1"] {
        let engine = fleet.engine(name).expect("listed").expect("runs");
        engine.start(FLEET_REPAIR).await.expect("start");
    }
    let down = fleet.database("down").expect("listed");
    assert_eq!(down.availability, Availability::Unavailable);
    let reason = down.reason.expect("an unavailable database has a reason");
    let expect = json!({
        "repair": FLEET_REPAIR,
        "databases": [
            {"name": "d0", "availability": "available", "counts": "1 running"},
            {"name": "d1", "availability": "available", "counts": "1 running"},
            {"name": "down", "availability": "unavailable", "counts": "unknown", "reason": reason},
        ],
    });
    let state = format!(
        "SELECT count(*) AS v FROM backfill WHERE id = '{FLEET_REPAIR}' AND state = 'paused'"
    );
    let mut browser = Browser::start("fleet", &format!("http://{addr}"), &expect).await;

    // The first request committed in each database; only its answer was
    // lost.
    browser.step("lost").await;
    for (name, url) in [("d0", &urls[0]), ("d1", &urls[1])] {
        assert_eq!(
            scalar_at(url, &state).await,
            1,
            "{name} is paused before the retry"
        );
    }
    browser.go().await;

    let key = browser.step("paused").await;
    assert!(key.starts_with("ui-"), "the page's key: {key}");
    for (name, url) in [("d0", &urls[0]), ("d1", &urls[1])] {
        assert_eq!(scalar_at(url, &state).await, 1, "{name} is paused");
        let audit = |outcome: &str| {
            format!(
                "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{FLEET_REPAIR}' \
                 AND action = 'pause' AND outcome = '{outcome}' AND correlation = '{key}'"
            )
        };
        assert_eq!(
            scalar_at(url, &audit("applied")).await,
            1,
            "{name}: one applied pause of its own, with the page's key"
        );
        assert_eq!(
            scalar_at(url, &audit("replayed")).await,
            1,
            "{name}: the retry replayed it"
        );
        assert_eq!(
            scalar_at(
                url,
                &format!(
                    "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{FLEET_REPAIR}' \
                     AND action = 'pause' AND outcome = 'applied' AND actor = 'ops' \
                     AND reason = 'fleet quiet hours'"
                )
            )
            .await,
            1,
            "{name}: the operator and the reason are in its audit"
        );
    }
    browser.go().await;

    browser.step("resumed").await;
    let running = format!(
        "SELECT count(*) AS v FROM backfill WHERE id = '{FLEET_REPAIR}' AND state = 'running'"
    );
    assert_eq!(scalar_at(&urls[0], &running).await, 1, "d0 resumed");
    assert_eq!(scalar_at(&urls[1], &state).await, 1, "d1 is left alone");
    assert_eq!(
        scalar_at(
            &urls[1],
            &format!(
                "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{FLEET_REPAIR}' \
                 AND action = 'resume'"
            )
        )
        .await,
        0,
        "d1 received no resume"
    );
    browser.go().await;

    // Resumed from its own page, through d1's admin API on the fleet's
    // listener: d1 runs again and its own audit holds the resume.
    browser.step("detail-resumed").await;
    assert_eq!(scalar_at(&urls[1], &running).await, 1, "d1 resumed");
    assert_eq!(
        scalar_at(
            &urls[1],
            &format!(
                "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{FLEET_REPAIR}' \
                 AND action = 'resume' AND outcome = 'applied' AND actor = 'ops'"
            )
        )
        .await,
        1,
        "d1 audited the resume from its page"
    );
    browser.go().await;

    // The settings form of the fleet page: one merge patch, stored and
    // audited by each available database with the page's key and reason.
    let key = browser.step("fleet-settings").await;
    for (name, url) in [("d0", &urls[0]), ("d1", &urls[1])] {
        assert_eq!(
            scalar_at(
                url,
                &format!(
                    "SELECT count(*) AS v FROM backfill WHERE id = '{FLEET_REPAIR}' \
                     AND settings->>'batch_size' = '7'"
                )
            )
            .await,
            1,
            "{name} stores the new batch size"
        );
        assert_eq!(
            scalar_at(
                url,
                &format!(
                    "SELECT count(*) AS v FROM backfill_audit WHERE backfill_id = '{FLEET_REPAIR}' \
                     AND action = 'settings' AND outcome = 'applied' AND actor = 'ops' \
                     AND correlation = '{key}' AND reason = 'smaller batches fleet-wide'"
                )
            )
            .await,
            1,
            "{name} audited the settings change with the page's key and reason"
        );
    }
    browser.go().await;
    browser.finish().await;
    fleet.stop().await;
}
