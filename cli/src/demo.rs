//! `backfill demo`: zero-setup tour of the whole contract.
//!
//! Uses `DATABASE_URL` when set, otherwise a throwaway PostgreSQL from the
//! machine's binaries (removed on exit). Creates its own database, migrates,
//! seeds the example application, runs every example repair automatically
//! with a live progress display read from PostgreSQL, prints the admin URL
//! and operator token, and serves until Ctrl-C (or, with
//! `--exit-when-done`, until every required backfill is `completed`).

use crate::example::{self, ExampleApp, ExampleError};
use backfill::ephemeral::{EphemeralError, EphemeralPostgres};
use backfill::host::{Host, HostConfig, HostError};
use backfill::store::{self, BackfillRow, StoreError};
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Options of `backfill demo`.
#[derive(Debug, Clone)]
pub struct DemoConfig {
    /// `None`: start a throwaway cluster.
    pub database_url: Option<String>,
    pub rows: u64,
    /// Events seeded with malformed tags, to show a `blocked` backfill.
    pub bad_rows: u64,
    pub exit_when_done: bool,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub batch_size: u32,
    pub operator_token: Option<String>,
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Ephemeral(#[from] EphemeralError),
    #[error("example application: {0}")]
    Example(#[from] ExampleError),
    #[error("{0}")]
    Other(String),
}

/// How the demo ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DemoExit {
    /// Every required backfill completed (with `--exit-when-done`) or the
    /// operator pressed Ctrl-C.
    Done,
    /// A required backfill ended `failed` or `blocked`.
    Stuck,
}

/// Per-backfill rate tracking for the display.
struct Rate {
    at: Instant,
    rows: i64,
    per_sec: Option<f64>,
}

fn render(rows: &[BackfillRow], rates: &mut HashMap<String, Rate>) -> Vec<String> {
    let now = Instant::now();
    rows.iter()
        .map(|row| {
            let rate = rates.entry(row.id.clone()).or_insert(Rate {
                at: now,
                rows: row.rows_done,
                per_sec: None,
            });
            let elapsed = now.duration_since(rate.at).as_secs_f64();
            if elapsed >= 0.5 {
                let delta = (row.rows_done - rate.rows).max(0) as f64;
                rate.per_sec = Some(delta / elapsed);
                rate.at = now;
                rate.rows = row.rows_done;
            }
            let fraction = match (row.state.as_str(), row.source_rows) {
                ("completed" | "validating", _) => Some(1.0),
                (_, Some(total)) if total > 0 => {
                    Some((row.rows_done as f64 / total as f64).min(1.0))
                }
                (_, Some(0)) => Some(1.0),
                _ => None,
            };
            let percent = fraction
                .map(|f| format!("{:5.1}%", f * 100.0))
                .unwrap_or_else(|| "unknown".into());
            let bar = fraction
                .map(|f| {
                    let filled = (f * 20.0).round() as usize;
                    format!("[{}{}]", "#".repeat(filled), ".".repeat(20 - filled))
                })
                .unwrap_or_else(|| format!("[{}]", "?".repeat(20)));
            let speed = match (row.state.as_str(), rate.per_sec) {
                ("running", Some(r)) => format!("{:>9.0} rows/s", r),
                ("running", None) => "  measuring    ".into(),
                _ => "               ".into(),
            };
            let eta = match (row.state.as_str(), rate.per_sec, row.source_rows) {
                ("running", Some(r), Some(total)) if r > 0.0 => {
                    let left = (total - row.rows_done).max(0) as f64 / r;
                    format!("ETA {:>5.0}s", left)
                }
                ("running", _, _) => "ETA unknown".into(),
                _ => String::new(),
            };
            let diag = row
                .last_error
                .as_deref()
                .filter(|_| matches!(row.state.as_str(), "blocked" | "failed"))
                .map(|d| format!("  ({})", d.chars().take(90).collect::<String>()))
                .unwrap_or_default();
            format!(
                "  {:<28} {:<10} {} {} {} {}{}",
                row.id, row.state, bar, percent, speed, eta, diag
            )
        })
        .collect()
}

/// Run the demo. Must run inside an actix system.
pub async fn run(config: DemoConfig) -> Result<DemoExit, DemoError> {
    // Ctrl-C and SIGTERM are handled from the very start: polled once, the
    // listener installs its handlers, so a signal during the cluster's
    // start, the seeding or the host's start ends the demo through the
    // cleanup below instead of killing the process and leaving the
    // throwaway cluster (which pg_ctl detached) running.
    let signal = backfill::host::wait_for_signal();
    tokio::pin!(signal);
    let early = futures_util::poll!(signal.as_mut()).is_ready();
    let mut ephemeral = None;
    let server_url = match &config.database_url {
        Some(url) => url.clone(),
        None => {
            println!("DATABASE_URL is not set: starting a throwaway PostgreSQL ...");
            let pg = tokio::task::spawn_blocking(|| EphemeralPostgres::start("demo"))
                .await
                .map_err(|_| DemoError::Other("the PostgreSQL start task panicked".into()))??;
            let url = pg.url();
            ephemeral = Some(pg);
            url
        }
    };
    let result = if early {
        Ok(DemoExit::Done)
    } else {
        run_on(&server_url, &config, signal.as_mut()).await
    };
    if let Some(mut pg) = ephemeral {
        tokio::task::spawn_blocking(move || pg.stop()).await.ok();
        println!("throwaway PostgreSQL stopped and removed");
    }
    result
}

async fn run_on<S: std::future::Future<Output = ()>>(
    server_url: &str,
    config: &DemoConfig,
    mut signal: std::pin::Pin<&mut S>,
) -> Result<DemoExit, DemoError> {
    let host = tokio::select! {
        host = start_host(server_url, config) => host?,
        _ = signal.as_mut() => return Ok(DemoExit::Done),
    };
    let exit = progress(&host, config.exit_when_done, signal).await;
    host.stop().await;
    Ok(exit)
}

/// Create and seed the demo database, start the host and print how to
/// reach it.
async fn start_host(server_url: &str, config: &DemoConfig) -> Result<Host, DemoError> {
    let url = store::database_recreate(server_url, "backfill_demo").await?;
    store::run_migrations(&url).await?;
    example::migrate(&url).await?;
    let pool = store::build_pool(&url, 4).await?;
    let started = Instant::now();
    println!("seeding {} events ...", config.rows);
    let seeded = example::seed(&pool, config.rows, config.bad_rows).await?;
    let took = started.elapsed().as_secs_f64();
    println!(
        "seeded {seeded} events in {took:.1}s ({:.0} rows/s)",
        seeded as f64 / took.max(0.001)
    );

    let token = config.operator_token.clone().unwrap_or_else(|| {
        // 32 hex characters: long enough for the admin layer's minimum.
        let bytes: [u8; 16] = rand::random();
        hex::encode(bytes)
    });
    let mut host_config = HostConfig::new(url.clone());
    host_config.listen = config.listen;
    host_config.admin_listen = config.admin_listen;
    host_config.migrate = false;
    host_config.auto_backfills = true;
    host_config.admin_auth = backfill::admin::AuthConfig::from_sources(Some(&token), None, false)
        .map_err(|e| DemoError::Other(e.to_string()))?;
    let app = ExampleApp {
        batch_size: config.batch_size,
    };
    let host = Host::start(host_config, app).await?;
    println!();
    println!(
        "serving   http://{}/events  (readiness: /readyz)",
        host.serving_addr
    );
    println!("admin UI  http://{}/ui", host.admin_addr);
    println!("admin API http://{}/admin/backfills", host.admin_addr);
    println!("operator token: {token}");
    println!(
        "try: BACKFILL_URL=http://{} BACKFILL_TOKEN={token} backfill ctl list",
        host.admin_addr
    );
    println!();
    Ok(host)
}

/// Redraw progress until done (with `exit_when_done`) or Ctrl-C.
async fn progress<S: std::future::Future<Output = ()>>(
    host: &Host,
    exit_when_done: bool,
    mut signal: std::pin::Pin<&mut S>,
) -> DemoExit {
    let tty = std::io::stdout().is_terminal();
    let mut rates = HashMap::new();
    let mut drawn = 0usize;
    let mut last_print = Instant::now() - Duration::from_secs(60);
    let mut printed_ready = false;
    loop {
        let rows = match host.engine().pool().get().await {
            Ok(mut conn) => store::backfill_get_many(&mut conn, host.required())
                .await
                .ok(),
            Err(_) => None,
        };
        let lines = match &rows {
            Some(rows) => render(rows, &mut rates),
            None => vec!["  (progress unknown: the database could not be read)".into()],
        };
        // One read drives the whole frame, so header and lines agree.
        let ready = rows
            .as_ref()
            .is_some_and(|rows| !rows.is_empty() && rows.iter().all(|r| r.state == "completed"));
        let header = format!(
            "backfills ({}), readiness: {}",
            if ready { "all completed" } else { "working" },
            if ready { "READY" } else { "gated (503)" }
        );
        let mut out = std::io::stdout().lock();
        if tty {
            if drawn > 0 {
                let _ = write!(out, "\x1b[{drawn}A");
            }
            let _ = writeln!(out, "\x1b[2K{header}");
            for line in &lines {
                let _ = writeln!(out, "\x1b[2K{line}");
            }
            drawn = lines.len() + 1;
        } else if (ready && !printed_ready)
            || (!ready && last_print.elapsed() >= Duration::from_secs(2))
        {
            // Not a terminal (a log, a pipe): a frame every 2 s while work
            // goes on, the final frame once, then silence until something
            // changes.
            let _ = writeln!(out, "{header}");
            for line in &lines {
                let _ = writeln!(out, "{line}");
            }
            last_print = Instant::now();
            printed_ready = ready;
        }
        let _ = out.flush();
        drop(out);
        if let Some(rows) = &rows {
            let stuck = rows
                .iter()
                .any(|r| matches!(r.state.as_str(), "failed" | "blocked"));
            if exit_when_done && ready {
                println!("every required backfill is completed");
                return DemoExit::Done;
            }
            if exit_when_done && stuck {
                println!("a required backfill is failed or blocked; see the diagnostic above");
                return DemoExit::Stuck;
            }
        }
        tokio::select! {
            _ = signal.as_mut() => return DemoExit::Done,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}
