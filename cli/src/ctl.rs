//! `backfill ctl`: the operator CLI over the admin HTTP API (ADM-1).
//!
//! It only projects what the API returns and sends the actions of CONTRACT
//! section 3; it keeps no lifecycle of its own and never synthesises an
//! outcome. Unknown stays unknown and a failed refresh is shown as stale,
//! never as zero (ADM-3).
//!
//! Exit codes: 0 ok, 2 usage (also 400/404/422), 3 conflict (409),
//! 4 unauthorized (401/403), 5 server or network error.

use crate::screen::{self, Column, Row, Screen, Table};
use backfill::admin::{
    ActionResponse, AuditPage, BackfillView, ConflictBody, ErrorBody, ValidationResponse,
};
use backfill::settings::Field;
use backfill::State;
use chrono::{DateTime, Utc};
use clap::{Args, Subcommand};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Arguments of `backfill ctl`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// Base URL of the admin API.
    #[arg(long, env = "BACKFILL_URL", default_value = "http://127.0.0.1:8081")]
    pub url: String,
    /// Bearer token.
    #[arg(long, env = "BACKFILL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// `backfill ctl` subcommands.
#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// List backfills.
    List,
    /// Show one backfill in detail.
    Show { id: String },
    /// Start a pending backfill (captures its bound).
    Start { id: String },
    /// Pause a running or validating backfill.
    Pause { id: String },
    /// Resume a paused backfill.
    Resume { id: String },
    /// Retry a blocked or failed backfill at its bound and checkpoint.
    Retry { id: String },
    /// Run explicit validation (read-only).
    Validate { id: String },
    /// Change live settings while the backfill runs (each process applies
    /// them at its next batch); prints the resulting settings.
    Set(SetArgs),
    /// Show the audit log of one backfill.
    Audit {
        id: String,
        /// Number of records.
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Live table with progress bars, rows/s and ETA.
    Watch {
        /// Only this backfill.
        id: Option<String>,
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 2.0)]
        interval: f64,
        /// Stop after this many refreshes (default: until interrupted).
        #[arg(long)]
        count: Option<u64>,
    },
}

/// Arguments of `backfill ctl set`: each flag sets one setting (the server
/// checks its range), `--clear` removes one so its default applies again.
#[derive(Debug, Args)]
pub struct SetArgs {
    pub id: String,
    /// A fixed batch size (excludes --target-batch-ms).
    #[arg(long, value_name = "N")]
    pub batch_size: Option<u64>,
    /// A target batch duration in ms: the size adapts toward it.
    #[arg(long, value_name = "N")]
    pub target_batch_ms: Option<u64>,
    /// The smallest size the adaptive sizing may choose.
    #[arg(long, value_name = "N")]
    pub min_batch_size: Option<u64>,
    /// The largest size the adaptive sizing may choose.
    #[arg(long, value_name = "N")]
    pub max_batch_size: Option<u64>,
    /// Pause between batches, in ms.
    #[arg(long, value_name = "N")]
    pub pause_ms: Option<u64>,
    /// Replication lag limit of every standby, in bytes.
    #[arg(long, value_name = "N")]
    pub max_lag_bytes: Option<u64>,
    /// Replication lag limit of every standby, in ms.
    #[arg(long, value_name = "N")]
    pub max_lag_ms: Option<u64>,
    /// WAL generated per second, server-wide.
    #[arg(long, value_name = "N")]
    pub max_wal_bytes_per_s: Option<u64>,
    /// Sessions waiting for a lock on the repair's tables.
    #[arg(long, value_name = "N")]
    pub max_lock_waiters: Option<u64>,
    /// Age of the oldest open transaction of another session, in ms.
    #[arg(long, value_name = "N")]
    pub max_xact_age_ms: Option<u64>,
    /// Partitions of a partitioned backfill running at once, fleet-wide.
    #[arg(long, value_name = "N")]
    pub concurrency: Option<u64>,
    /// Clear a setting (e.g. `pause-ms`); repeatable.
    #[arg(long, value_name = "NAME")]
    pub clear: Vec<String>,
}

impl SetArgs {
    /// The change as the API takes it: a JSON merge patch.
    fn change(&self) -> Result<serde_json::Map<String, Value>, CtlError> {
        let given = [
            (Field::BatchSize, self.batch_size),
            (Field::TargetBatchMs, self.target_batch_ms),
            (Field::MinBatchSize, self.min_batch_size),
            (Field::MaxBatchSize, self.max_batch_size),
            (Field::PauseMs, self.pause_ms),
            (Field::MaxLagBytes, self.max_lag_bytes),
            (Field::MaxLagMs, self.max_lag_ms),
            (Field::MaxWalBytesPerS, self.max_wal_bytes_per_s),
            (Field::MaxLockWaiters, self.max_lock_waiters),
            (Field::MaxXactAgeMs, self.max_xact_age_ms),
            (Field::Concurrency, self.concurrency),
        ];
        let mut change: serde_json::Map<String, Value> = given
            .into_iter()
            .filter_map(|(field, value)| Some((field.name().to_string(), Value::from(value?))))
            .collect();
        for name in &self.clear {
            // The flag's spelling (`pause-ms`) or the API's (`pause_ms`).
            let field = Field::parse(&name.replace('-', "_")).ok_or_else(|| {
                let known: Vec<String> = Field::ALL.iter().map(|f| flag(*f)).collect();
                CtlError::Usage(format!(
                    "--clear {:?}: not a setting; one of {}",
                    one_line(name),
                    known.join(", ")
                ))
            })?;
            if change.insert(field.name().into(), Value::Null).is_some() {
                return Err(CtlError::Usage(format!(
                    "--{} is both set and cleared",
                    flag(field)
                )));
            }
        }
        if change.is_empty() {
            return Err(CtlError::Usage(
                "set changes nothing: give a setting (e.g. --batch-size 500) or --clear NAME"
                    .into(),
            ));
        }
        Ok(change)
    }
}

/// A setting as its flag names it.
fn flag(field: Field) -> String {
    field.name().replace('_', "-")
}

/// The settings of a view in one line: `batch_size=500 pause_ms=250`, in
/// the order the settings are listed, or `none` when none is set.
fn settings_line(settings: &Value) -> String {
    let Some(set) = settings.as_object().filter(|s| !s.is_empty()) else {
        return "none (defaults apply)".into();
    };
    let mut names: Vec<&String> = set.keys().collect();
    // Known fields in their order, any other (a newer server's) after them.
    names.sort_by_key(|n| Field::parse(n).map_or(usize::MAX, |f| f as usize));
    names
        .into_iter()
        .map(|n| format!("{n}={}", set[n]))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Exit codes.
pub const EXIT_OK: i32 = 0;
pub const EXIT_USAGE: i32 = 2;
pub const EXIT_CONFLICT: i32 = 3;
pub const EXIT_UNAUTHORIZED: i32 = 4;
pub const EXIT_SERVER: i32 = 5;

/// Errors of the CLI: one readable line and an exit code.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Unauthorized(String),
    #[error("{0}")]
    Server(String),
}

impl CtlError {
    fn code(&self) -> i32 {
        match self {
            CtlError::Usage(_) => EXIT_USAGE,
            CtlError::Conflict(_) => EXIT_CONFLICT,
            CtlError::Unauthorized(_) => EXIT_UNAUTHORIZED,
            CtlError::Server(_) => EXIT_SERVER,
        }
    }

    /// Whether an action may be re-sent with the same idempotency key.
    fn retryable(&self) -> bool {
        matches!(self, CtlError::Server(_))
    }
}

/// Run `backfill ctl`; returns the process exit code.
pub fn run(args: CtlArgs) -> i32 {
    let system = actix_rt::System::new();
    match system.block_on(dispatch(args)) {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("backfill ctl: {e}");
            e.code()
        }
    }
}

struct Client {
    base: String,
    token: Option<String>,
    http: awc::Client,
}

/// One response: status and body.
struct Response {
    status: u16,
    body: Value,
}

impl Client {
    async fn send(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<&Value>,
    ) -> Result<Response, CtlError> {
        let url = format!("{}{}", self.base.trim_end_matches('/'), path);
        let mut req = match method {
            "POST" => self.http.post(url),
            "PATCH" => self.http.patch(url),
            _ => self.http.get(url),
        };
        if let Some(token) = &self.token {
            req = req.insert_header(("Authorization", format!("Bearer {token}")));
        }
        if let Some(key) = key {
            req = req.insert_header(("Idempotency-Key", key));
        }
        let sent = match body {
            Some(body) => {
                req.insert_header(("Content-Type", "application/merge-patch+json"))
                    .send_body(body.to_string())
                    .await
            }
            None => req.send().await,
        };
        // Network errors carry no secrets but can be long; keep one line.
        let mut res = sent
            .map_err(|e| CtlError::Server(one_line(&format!("cannot reach {}: {e}", self.base))))?;
        let bytes = res
            .body()
            .limit(8 << 20)
            .await
            .map_err(|e| CtlError::Server(one_line(&format!("incomplete response: {e}"))))?;
        let status = res.status().as_u16();
        let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Response { status, body })
    }

    /// Map non-2xx statuses (other than a 409 conflict body the caller
    /// renders) to errors.
    fn check(response: Response) -> Result<Response, CtlError> {
        let message = || {
            serde_json::from_value::<ErrorBody>(response.body.clone())
                .map(|e| format!("{}: {}", e.error, e.message))
                .unwrap_or_else(|_| format!("HTTP {}", response.status))
        };
        match response.status {
            200..=299 => Ok(response),
            401 | 403 => Err(CtlError::Unauthorized(message())),
            409 => Err(CtlError::Conflict(conflict_line(&response.body))),
            400..=499 => Err(CtlError::Usage(message())),
            _ => Err(CtlError::Server(message())),
        }
    }

    async fn get(&self, path: &str) -> Result<Value, CtlError> {
        Ok(Self::check(self.send("GET", path, None, None).await?)?.body)
    }

    /// POST an action with one idempotency key (see [`Client::idempotent`]).
    async fn act(&self, path: &str) -> Result<Value, CtlError> {
        self.idempotent("POST", path, None).await
    }

    /// Send a request with one idempotency key, re-sending it on network
    /// and server errors: the server replays the first committed response,
    /// so a retry never duplicates the transition or the change (ADM-4).
    async fn idempotent(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, CtlError> {
        let key = uuid::Uuid::new_v4().to_string();
        let mut delay = Duration::from_millis(200);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = match self.send(method, path, Some(&key), body).await {
                Ok(r) => Self::check(r),
                Err(e) => Err(e),
            };
            match result {
                Err(e) if e.retryable() && attempt < 5 => {
                    actix_rt::time::sleep(delay).await;
                    delay *= 2;
                }
                other => return other.map(|r| r.body),
            }
        }
    }
}

fn one_line(s: &str) -> String {
    let line: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    backfill::repair::bounded(line)
}

fn conflict_line(body: &Value) -> String {
    match serde_json::from_value::<ConflictBody>(body.clone()) {
        Ok(c) => format!(
            "conflict: {} (current state {}, generation {})",
            c.message, c.current.state, c.current.generation
        ),
        Err(_) => "conflict".into(),
    }
}

/// Every backfill, following `next_after` page by page, so that a long
/// list is never cut at one page (ADM-2). Items stay as the server sent
/// them, for `--json`.
async fn list_all(client: &Client) -> Result<Vec<Value>, CtlError> {
    #[derive(serde::Deserialize)]
    struct Page {
        items: Vec<Value>,
        next_after: Option<String>,
    }
    let mut items = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let path = match &after {
            None => "/admin/backfills?limit=500".to_string(),
            Some(after) => format!("/admin/backfills?limit=500&after={after}"),
        };
        let page: Page = decode(client.get(&path).await?)?;
        items.extend(page.items);
        match page.next_after {
            // IDs are URL-safe; a cursor that is not an ID would inject,
            // one that repeats would loop. (Whether it moves forward is the
            // server's collation's to say, not byte order's.)
            Some(next)
                if backfill::repair::validate_id(&next).is_ok()
                    && after.as_deref() != Some(next.as_str()) =>
            {
                after = Some(next)
            }
            Some(_) => {
                return Err(CtlError::Server(
                    "the server's next_after does not continue the list".into(),
                ))
            }
            None => return Ok(items),
        }
    }
}

fn decode<T: serde::de::DeserializeOwned>(value: Value) -> Result<T, CtlError> {
    serde_json::from_value(value)
        .map_err(|_| CtlError::Server("the server's response has an unexpected shape".into()))
}

fn print_json(value: &Value) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_else(|_| value.to_string())
    );
}

async fn dispatch(args: CtlArgs) -> Result<(), CtlError> {
    if !(args.url.starts_with("http://") || args.url.starts_with("https://")) {
        return Err(CtlError::Usage(
            "--url must start with http:// or https://".into(),
        ));
    }
    let client = Client {
        base: args.url.clone(),
        token: args.token.clone(),
        http: awc::Client::builder()
            .timeout(Duration::from_secs(30))
            .finish(),
    };
    let json = args.json;
    // Stable IDs are URL-safe by construction; anything else is a typo.
    let enc = |id: &str| -> Result<String, CtlError> {
        backfill::repair::validate_id(id)
            .map(|()| id.to_string())
            .map_err(|_| CtlError::Usage(format!("{:?} is not a stable backfill ID", one_line(id))))
    };
    match &args.command {
        CtlCommand::List => {
            let items = list_all(&client).await?;
            if json {
                print_json(&serde_json::json!({ "items": items, "next_after": null }));
            } else {
                let items: Vec<BackfillView> = decode(Value::Array(items))?;
                // On a terminal the table fits its width; a pipe gets every
                // column.
                let max = std::io::stdout()
                    .is_terminal()
                    .then(|| screen::usable(screen::size().cols));
                for line in table(&items, &BTreeMap::new(), None, max) {
                    println!("{line}");
                }
            }
        }
        CtlCommand::Show { id } => {
            let body = client
                .get(&format!("/admin/backfills/{}", enc(id)?))
                .await?;
            if json {
                print_json(&body);
            } else {
                print!("{}", detail(&decode(body)?));
            }
        }
        CtlCommand::Start { id }
        | CtlCommand::Pause { id }
        | CtlCommand::Resume { id }
        | CtlCommand::Retry { id } => {
            let action = match &args.command {
                CtlCommand::Start { .. } => "start",
                CtlCommand::Pause { .. } => "pause",
                CtlCommand::Resume { .. } => "resume",
                _ => "retry",
            };
            let body = client
                .act(&format!("/admin/backfills/{}/{action}", enc(id)?))
                .await?;
            if json {
                print_json(&body);
            } else {
                let r: ActionResponse = decode(body)?;
                println!(
                    "{action} {}: {} ({} -> {}), generation {}",
                    r.backfill.id,
                    r.outcome,
                    r.prior_state,
                    r.backfill.state,
                    r.backfill.generation
                );
            }
        }
        CtlCommand::Validate { id } => {
            let body = client
                .act(&format!("/admin/backfills/{}/validate", enc(id)?))
                .await?;
            if json {
                print_json(&body);
            } else {
                let r: ValidationResponse = decode(body)?;
                let tail = r
                    .detail
                    .or(r.reason)
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default();
                println!(
                    "validate {}: {} (state {}){tail}",
                    r.backfill_id, r.outcome, r.state
                );
            }
        }
        CtlCommand::Set(set) => {
            let change = Value::Object(set.change()?);
            let body = client
                .idempotent(
                    "PATCH",
                    &format!("/admin/backfills/{}/settings", enc(&set.id)?),
                    Some(&change),
                )
                .await?;
            if json {
                print_json(&body);
            } else {
                let b: BackfillView = decode(body)?;
                println!("settings {}: {}", b.id, settings_line(&b.settings));
            }
        }
        CtlCommand::Audit { id, limit } => {
            let limit = *limit;
            let body = client
                .get(&format!("/admin/audit?backfill={}&limit={limit}", enc(id)?))
                .await?;
            if json {
                print_json(&body);
            } else {
                let page: AuditPage = decode(body)?;
                println!(
                    "{:<6} {:<20} {:<9} {:<12} {:<24} {:<23} {:>4} CORRELATION",
                    "SEQ", "AT", "ACTION", "ACTOR", "OUTCOME", "TRANSITION", "GEN"
                );
                for e in page.items {
                    let transition = match (&e.prior_state, &e.resulting_state) {
                        (Some(p), Some(r)) => format!("{p} -> {r}"),
                        _ => "-".into(),
                    };
                    println!(
                        "{:<6} {:<20} {:<9} {:<12} {:<24} {:<23} {:>4} {}",
                        e.seq,
                        e.at.format("%Y-%m-%d %H:%M:%S"),
                        e.action,
                        e.actor.unwrap_or_else(|| format!("({})", e.authority)),
                        e.outcome,
                        transition,
                        e.generation
                            .map(|g| g.to_string())
                            .unwrap_or_else(|| "-".into()),
                        e.correlation.unwrap_or_default()
                    );
                }
            }
        }
        CtlCommand::Watch {
            id,
            interval,
            count,
        } => {
            let (interval, count) = (*interval, *count);
            // A day at most: `Duration` cannot hold every float, and an
            // operator watching wants refreshes, not a sleep of years.
            if !(interval.is_finite() && interval > 0.0 && interval <= 86_400.0) {
                return Err(CtlError::Usage(
                    "--interval must be a number of seconds above 0 and at most 86400".into(),
                ));
            }
            return watch(
                &client,
                id.as_deref().map(enc).transpose()?,
                interval,
                count,
                json,
            )
            .await;
        }
    }
    Ok(())
}

/// A previous sample for rates: rows done at PostgreSQL time.
type Samples = BTreeMap<String, (i64, DateTime<Utc>)>;

async fn watch(
    client: &Client,
    id: Option<String>,
    interval: f64,
    count: Option<u64>,
    json: bool,
) -> Result<(), CtlError> {
    let tty = std::io::stdout().is_terminal();
    let mut screen = Screen::new(Vec::new());
    let mut previous: Samples = BTreeMap::new();
    let mut last: Option<(Vec<BackfillView>, DateTime<Utc>)> = None;
    let mut refreshes = 0u64;
    loop {
        let mut last_error: Option<CtlError> = None;
        let fetched = match &id {
            Some(id) => client
                .get(&format!("/admin/backfills/{id}"))
                .await
                .and_then(|v| decode::<BackfillView>(v).map(|b| vec![b])),
            None => list_all(client)
                .await
                .and_then(|items| decode::<Vec<BackfillView>>(Value::Array(items))),
        };
        // Measured every refresh: the terminal may have been resized.
        let size = (tty && !json).then(screen::size);
        let max = size.map(|s| screen::usable(s.cols));
        let mut lines: Vec<String> = Vec::new();
        match fetched {
            Ok(items) => {
                let at = items
                    .first()
                    .map(|b| b.observed_at)
                    .unwrap_or_else(Utc::now);
                if json {
                    lines.push(serde_json::to_string(&items).unwrap_or_default());
                } else {
                    lines.push(format!("refreshed {}", at.format("%H:%M:%S")));
                    lines.extend(table(&items, &previous, None, max));
                }
                previous = items
                    .iter()
                    .map(|b| (b.id.clone(), (b.progress.rows_done, b.observed_at)))
                    .collect();
                last = Some((items, at));
            }
            Err(e) => {
                // ADM-3: a failed refresh is stale data, never zero progress.
                match (&last, json) {
                    (_, true) => lines.push(
                        serde_json::json!({"stale": true, "error": e.to_string()}).to_string(),
                    ),
                    (Some((items, at)), false) => {
                        lines.push(format!(
                            "STALE: refresh failed ({e}); showing data from {}",
                            at.format("%H:%M:%S")
                        ));
                        lines.extend(table(items, &BTreeMap::new(), Some("stale"), max));
                    }
                    (None, false) => {
                        lines.push(format!("STALE: refresh failed ({e}); no data yet"))
                    }
                }
                last_error = Some(e);
            }
        }
        let mut stdout = std::io::stdout().lock();
        match size {
            // A failed write to the terminal loses one frame; the next one
            // redraws everything.
            Some(size) => {
                let _ = screen.draw(&mut stdout, size, &lines);
            }
            None => {
                let mut out = String::new();
                if tty {
                    // JSON on a terminal: one document per screen.
                    out.push_str("\x1b[2J\x1b[H");
                }
                for line in &lines {
                    out.push_str(line);
                    out.push('\n');
                }
                let _ = stdout.write_all(out.as_bytes());
                let _ = stdout.flush();
            }
        }
        drop(stdout);
        refreshes += 1;
        if count.is_some_and(|c| refreshes >= c) {
            return match last_error {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        actix_rt::time::sleep(Duration::from_secs_f64(interval)).await;
    }
}

fn bar(fraction: Option<f64>) -> String {
    match fraction {
        Some(f) => {
            let f = f.clamp(0.0, 1.0);
            let filled = (f * 20.0).round() as usize;
            format!(
                "[{}{}] {:>5.1}%",
                "#".repeat(filled),
                "-".repeat(20 - filled),
                f * 100.0
            )
        }
        None => format!("[{:^20}] {:>6}", "unknown", "?"),
    }
}

/// The backfills as a table, laid out in `max` characters per line
/// (`None`: every column, for pipes), then the diagnostics of blocked and
/// failed rows that did not fit on their rows.
fn table(
    items: &[BackfillView],
    previous: &Samples,
    marker: Option<&str>,
    max: Option<usize>,
) -> Vec<String> {
    // Dropped highest rank first on a narrow terminal: the bar repeats the
    // percentage, validation and gating change rarely and the batch size
    // in force only with settings or load (`ctl show` has them), an ETA
    // needs the rate, and the ID, state and percentage stay.
    let mut t = Table {
        columns: vec![
            Column::new("ID").shrink_to(12),
            Column::new("STATE"),
            Column::new("PROGRESS").drop(10),
            Column::new("DONE").right(),
            Column::new("ROWS").right().drop(3),
            Column::new("ROWS/S").right().drop(5),
            Column::new("ETA").right().drop(6),
            Column::new("BATCH").right().drop(7),
            Column::new("OWNER").drop(4),
            Column::new("GATING").drop(8),
            Column::new("VALIDATION").drop(9),
        ],
        headers: true,
        indent: 0,
        rows: Vec::new(),
    };
    let mut diagnostics = Vec::new();
    for b in items {
        // Only a running backfill moves: in any other state a rate or a
        // time left would be invented, so both are "-" (not applicable,
        // which is neither zero nor unknown).
        let running = b.state == State::Running;
        let rate = previous.get(&b.id).and_then(|(done, at)| {
            let secs = (b.observed_at - *at).num_milliseconds() as f64 / 1000.0;
            (secs > 0.0).then(|| (b.progress.rows_done - done) as f64 / secs)
        });
        let eta = match (running, rate, b.progress.total_rows) {
            (false, _, _) => "-".to_string(),
            (true, Some(r), Some(total)) if r > 0.0 => {
                let left = (total - b.progress.rows_done).max(0) as f64 / r;
                format!("{}s", left.round() as i64)
            }
            (true, _, _) => "unknown".into(),
        };
        let rate = match (running, rate) {
            (false, _) => "-".to_string(),
            (true, Some(r)) => format!("{r:.1}"),
            (true, None) => "unknown".into(),
        };
        // The size in force, like the rate, only applies while batches run.
        let batch = match (running, b.batch_size) {
            (false, _) => "-".to_string(),
            (true, Some(n)) => n.to_string(),
            (true, None) => "unknown".into(),
        };
        let rows = match b.progress.total_rows {
            Some(t) => format!("{}/{}", b.progress.rows_done, t),
            None => format!("{}/?", b.progress.rows_done),
        };
        let (bar, percent) = bar_cells(b.progress.fraction);
        let diag = b
            .last_error
            .as_ref()
            .filter(|_| matches!(b.state, State::Blocked | State::Failed))
            .map(|e| screen::one_line(&e.message));
        // What the row has to say beyond its cells: the diagnostic of a
        // blocked or failed row, or that its runner is throttled (THR-2);
        // a blocked or failed row holds no claim, so never both. A
        // terminal gets it in what is left of the row and, when it does
        // not fit there, below the table. A pipe gets the table as it
        // always was plus the throttled marker, which is short and says
        // why a running row does not move.
        let throttled = b
            .throttle
            .as_ref()
            .map(|t| format!("throttled: {}", screen::one_line(&t.text)));
        let note = diag.or_else(|| throttled.clone());
        let on_row = if max.is_some() {
            note.clone()
        } else {
            throttled
        };
        let fill = match (marker, on_row) {
            (Some(m), Some(n)) => Some(format!("({m}) {n}")),
            (Some(m), None) => Some(format!("({m})")),
            (None, n) => n,
        };
        diagnostics.push((b.id.clone(), note));
        t.rows.push(Row {
            cells: vec![
                b.id.clone(),
                b.state.to_string(),
                bar,
                percent,
                rows,
                rate,
                eta,
                batch,
                b.owner.disposition.clone(),
                if b.readiness.gating { "yes" } else { "no" }.into(),
                b.validation
                    .as_ref()
                    .map(|v| v.outcome.clone())
                    .unwrap_or_else(|| "-".into()),
            ],
            fill,
        });
    }
    let laid = t.layout(max);
    let mut lines = laid.lines;
    if let Some(max) = max {
        // Once in full below the table, bounded to a few lines.
        for ((id, diag), cut) in diagnostics.iter().zip(&laid.fill_cut) {
            if let (Some(diag), true) = (diag, cut) {
                lines.extend(screen::diagnostic(id, diag, 0, max));
            }
        }
    }
    lines
}

/// The progress bar and the percentage; unknown says so (ADM-3).
fn bar_cells(fraction: Option<f64>) -> (String, String) {
    match fraction {
        Some(f) => {
            let f = f.clamp(0.0, 1.0);
            let filled = (f * 20.0).round() as usize;
            (
                format!("[{}{}]", "#".repeat(filled), "-".repeat(20 - filled)),
                format!("{:.1}%", f * 100.0),
            )
        }
        None => (format!("[{:^20}]", "unknown"), "unknown".into()),
    }
}

fn detail(b: &BackfillView) -> String {
    let opt = |v: &Option<Value>| {
        v.as_ref()
            .map(|v| v.to_string())
            .unwrap_or_else(|| "none".into())
    };
    let time = |t: &Option<DateTime<Utc>>| t.map(|t| t.to_rfc3339()).unwrap_or_else(|| "-".into());
    let owner = match b.owner.disposition.as_str() {
        "none" => "none".to_string(),
        d => format!(
            "{d}: {} until {}",
            b.owner.worker.as_deref().unwrap_or("?"),
            time(&b.owner.until)
        ),
    };
    let mut lines = vec![
        ("id", b.id.clone()),
        (
            "description",
            b.description.clone().unwrap_or_else(|| "-".into()),
        ),
        ("state", b.state.to_string()),
        ("key type", b.key_type.clone().unwrap_or_else(|| "-".into())),
        ("bound", opt(&b.bound)),
        ("checkpoint", opt(&b.checkpoint)),
        ("progress", bar(b.progress.fraction)),
        (
            "rows",
            format!(
                "{} of {}",
                b.progress.rows_done,
                b.progress
                    .total_rows
                    .map(|t| t.to_string())
                    .unwrap_or_else(|| "unknown".into())
            ),
        ),
        ("owner", owner),
        ("settings", settings_line(&b.settings)),
        (
            "batch size",
            b.batch_size
                .map_or_else(|| "unknown".to_string(), |n| n.to_string()),
        ),
        ("generation", b.generation.to_string()),
        ("attempts", b.attempts.to_string()),
        ("next attempt", time(&b.next_attempt_at)),
        (
            "readiness",
            format!(
                "required={} gating={}",
                b.readiness.required, b.readiness.gating
            ),
        ),
        ("registered", b.registered_at.to_rfc3339()),
        ("started", time(&b.started_at)),
        ("completed", time(&b.completed_at)),
        ("updated", b.updated_at.to_rfc3339()),
    ];
    if let Some(t) = &b.throttle {
        lines.push((
            "throttled",
            format!("{} (since {})", screen::one_line(&t.text), time(&t.since)),
        ));
    }
    if let Some(e) = &b.last_error {
        lines.push((
            "last error",
            format!(
                "{} {} ({})",
                e.kind.as_deref().unwrap_or("-"),
                e.message,
                time(&e.at)
            ),
        ));
    }
    lines.push((
        "validation",
        match &b.validation {
            Some(v) => format!(
                "{}{} at {}",
                v.outcome,
                v.detail
                    .as_deref()
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default(),
                time(&v.at)
            ),
            None => "none yet".into(),
        },
    ));
    let own: String = lines
        .into_iter()
        .map(|(k, v)| format!("{k:<13} {v}\n"))
        .collect();
    own + &crate::partitions::partition_lines(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A running backfill whose runner is throttled.
    fn throttled() -> BackfillView {
        serde_json::from_value(json!({
            "id": "events.content-len.v1", "description": null, "state": "running",
            "key_type": "bigint", "bound": 20000, "checkpoint": 5000, "empty_source": false,
            "progress": {"rows_done": 5000, "total_rows": 20000, "fraction": 0.25,
                         "batches_done": 10},
            "owner": {"disposition": "held", "worker": "w1",
                      "until": "2026-12-01T10:00:30Z"},
            "generation": 7, "attempts": 0, "next_attempt_at": null, "last_error": null,
            "validation": null, "readiness": {"required": false, "gating": false},
            "registered_at": "2026-12-01T09:00:00Z", "updated_at": "2026-12-01T10:00:00Z",
            "started_at": "2026-12-01T09:30:00Z", "completed_at": null,
            "observed_at": "2026-12-01T10:00:01Z",
            "settings": {"pause_ms": 250, "batch_size": 500}, "batch_size": 500,
            "throttle": {"signal": "replication_lag_bytes", "value": 5.0e7,
                         "threshold": 1.6e7, "text": "replication lag 47.7 MiB > 15.3 MiB",
                         "since": "2026-12-01T09:59:00Z"}
        }))
        .expect("a view")
    }

    /// THR-2 in `list`/`watch`: the throttled marker goes on the runner's
    /// row (a pipe gets it in full), and at every terminal width the table
    /// still fits with the row on one line and the marker shown, below the
    /// table when the row has no room for it. Guard: the marker as the
    /// row's note in `table` (a row fill, which `Table::layout` cuts, shown
    /// below when cut like a diagnostic).
    #[test]
    fn thr4_throttled_marker_is_on_the_row_and_fits_every_width() {
        let items = [throttled()];
        let piped = table(&items, &BTreeMap::new(), None, None);
        assert!(
            piped[1].ends_with("  throttled: replication lag 47.7 MiB > 15.3 MiB"),
            "{piped:?}"
        );
        assert!(piped[0].contains("BATCH") && piped[1].contains(" 500 "));
        for max in [30, 40, 60, 79, 119, 199] {
            let lines = table(&items, &BTreeMap::new(), None, Some(max));
            assert!(lines.iter().all(|l| screen::width(l) <= max), "{lines:?}");
            assert!(lines[1].starts_with("events.cont"), "one row: {lines:?}");
            // On the row, or below the table when it does not fit there.
            let text = lines[1..].join(" ");
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(
                text.contains("throttled: replication lag 47.7 MiB > 15.3 MiB"),
                "{max}: {lines:?}"
            );
        }
        let wide = table(&items, &BTreeMap::new(), None, Some(199));
        assert!(wide[1].contains("throttled: replication lag 47.7 MiB > 15.3 MiB"));
    }

    #[test]
    fn thr4_settings_line_lists_fields_in_order() {
        assert_eq!(
            settings_line(&json!({"pause_ms": 250, "batch_size": 500, "later": 1})),
            "batch_size=500 pause_ms=250 later=1"
        );
        assert_eq!(settings_line(&json!({})), "none (defaults apply)");
        let b = throttled();
        assert!(detail(&b).contains("throttled     replication lag 47.7 MiB > 15.3 MiB (since"));
    }
}
