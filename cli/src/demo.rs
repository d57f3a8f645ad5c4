//! `backfill demo`: zero-setup tour of the whole contract.
//!
//! Uses `DATABASE_URL` when set, otherwise a throwaway PostgreSQL from the
//! machine's binaries (removed on exit). Creates its own database, migrates,
//! seeds the example application, runs every example repair automatically
//! with a live progress display read from PostgreSQL, prints the admin URL
//! and operator token, and serves until Ctrl-C (or, with
//! `--exit-when-done`, until every required backfill is `completed`).

use crate::example::{self, ExampleApp, ExampleError};
use crate::fleet_demo::{self, FleetDemo, FleetDemoError, FleetExit};
use crate::screen::{self, Column, Row, Screen, Table};
use backfill::__private::store::{self, StoreError};
use backfill::admin::BackfillView;
use backfill::host::{Host, HostConfig, HostError};
use backfill::State;
use backfill_ephemeral::{EphemeralError, EphemeralPostgres};
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
    /// The database the demo (re)creates on the server.
    pub database_name: String,
    pub exit_when_done: bool,
    pub listen: SocketAddr,
    pub admin_listen: SocketAddr,
    pub batch_size: u32,
    pub operator_token: Option<String>,
    /// Above 1: a fleet of this many tenant databases (`FleetDemo`).
    pub databases: u32,
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
    #[error(transparent)]
    Fleet(#[from] FleetDemoError),
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

/// The progress lines under the header: one row per backfill, then the
/// diagnostics that did not fit on their rows. `max`: the widest line
/// allowed (`None` for pipes and logs, which get every column).
fn render(rows: &[BackfillView], max: Option<usize>) -> Vec<String> {
    let mut table = Table {
        columns: columns(),
        headers: false,
        indent: 2,
        rows: Vec::new(),
    };
    let mut diagnostics = Vec::new();
    for row in rows {
        let diag = row
            .last_error
            .as_ref()
            .filter(|_| matches!(row.state, State::Blocked | State::Failed))
            .map(|d| screen::one_line(&d.message));
        // Without a width (a log), the row carries the diagnostic bounded
        // as before; on a terminal, the rest of the row's width does.
        let fill = match (&diag, max) {
            (Some(d), None) => Some(screen::cut(d, 90)),
            (d, Some(_)) => d.clone(),
            (None, None) => None,
        };
        diagnostics.push((row.id.clone(), diag));
        table.rows.push(Row {
            cells: cells(row),
            fill,
        });
    }
    let laid = table.layout(max);
    let mut lines = laid.lines;
    if let Some(max) = max {
        // A diagnostic cut (or left out) on its row is shown once in full
        // below the table, bounded to a few lines.
        for ((id, diag), cut) in diagnostics.iter().zip(&laid.fill_cut) {
            if let (Some(diag), true) = (diag, cut) {
                lines.extend(screen::diagnostic(id, diag, 2, max));
            }
        }
    }
    lines
}

/// The display's columns, in the order of [`cells`].
fn columns() -> Vec<Column> {
    // Dropped in this order when the terminal is narrow: the bar repeats
    // the percentage, and an ETA needs the rate more than the other way.
    vec![
        Column::new("ID").shrink_to(12),
        Column::new("STATE"),
        Column::new("BAR").drop(3),
        Column::new("%").right(),
        Column::new("RATE").right().drop(1),
        Column::new("ETA").drop(2),
    ]
}

/// One backfill's cells, in the order of [`columns`], at the server's
/// rate (OBS-5; `None`: not measured yet), the number the admin API and
/// `ctl` show.
fn cells(row: &BackfillView) -> Vec<String> {
    let fraction = row.progress.fraction;
    let per_sec = row.progress.rows_per_second;
    let percent = fraction
        .map(|f| format!("{:.1}%", f * 100.0))
        .unwrap_or_else(|| "unknown".into());
    let bar = fraction
        .map(|f| {
            let filled = (f * 20.0).round() as usize;
            format!("[{}{}]", "#".repeat(filled), ".".repeat(20 - filled))
        })
        .unwrap_or_else(|| format!("[{}]", "?".repeat(20)));
    // Only a running backfill moves: any other state has no rate and
    // no time left to show, whatever the last samples said.
    let running = row.state == State::Running;
    let speed = match (running, per_sec) {
        (true, Some(r)) => format!("{r:.0} rows/s"),
        (true, None) => "measuring".into(),
        (false, _) => String::new(),
    };
    let eta = match (running, per_sec, row.progress.total_rows) {
        (true, Some(r), Some(total)) if r > 0.0 => {
            let left = (total - row.progress.rows_done).max(0) as f64 / r;
            format!("ETA {left:.0}s")
        }
        (true, _, _) => "ETA unknown".into(),
        (false, _, _) => String::new(),
    };
    vec![
        row.id.clone(),
        row.state.to_string(),
        bar,
        percent,
        speed,
        eta,
    ]
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
    if config.databases > 1 {
        let fleet = FleetDemo {
            databases: config.databases,
            rows: config.rows,
            bad_rows: config.bad_rows,
            database_name: config.database_name.clone(),
            exit_when_done: config.exit_when_done,
            admin_listen: config.admin_listen,
            batch_size: config.batch_size,
            operator_token: config.operator_token.clone(),
        };
        return Ok(
            match fleet_demo::run_on(server_url, &fleet, signal).await? {
                FleetExit::Done => DemoExit::Done,
                FleetExit::Stuck => DemoExit::Stuck,
            },
        );
    }
    let host = tokio::select! {
        host = start_host(server_url, config) => host?,
        _ = signal.as_mut() => return Ok(DemoExit::Done),
    };
    let (host, reach) = host;
    let exit = progress(&host, reach, config.exit_when_done, signal).await;
    println!("stopping: draining the runtime and releasing its claims ...");
    host.stop().await;
    println!("stopped");
    Ok(exit)
}

/// Create and seed the demo database, start the host and print how to
/// reach it (those lines are returned too: the live display draws them
/// again when it has to clear the screen).
async fn start_host(
    server_url: &str,
    config: &DemoConfig,
) -> Result<(Host, Vec<String>), DemoError> {
    let url = store::database_recreate(server_url, &config.database_name).await?;
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
    // Where the data is, without the URL itself: it may carry a password.
    let database = if config.database_url.is_some() {
        format!(
            "database  {} (on DATABASE_URL's server)",
            config.database_name
        )
    } else {
        format!(
            "database  {} (throwaway, removed at exit)",
            config.database_name
        )
    };
    let reach = vec![
        String::new(),
        database,
        format!(
            "serving   http://{}/events  (readiness: /readyz)",
            host.serving_addr
        ),
        format!("admin UI  http://{}/ui", host.admin_addr),
        format!("admin API http://{}/admin/backfills", host.admin_addr),
        format!("metrics   http://{}/metrics", host.admin_addr),
        "stop      Ctrl-C (drains: claims released at once)".to_string(),
        format!("operator token: {token}"),
        format!(
            "try: BACKFILL_URL=http://{} BACKFILL_TOKEN={token} backfill ctl list",
            host.admin_addr
        ),
        String::new(),
    ];
    for line in &reach {
        println!("{line}");
    }
    Ok((host, reach))
}

/// Redraw progress until done (with `exit_when_done`) or Ctrl-C.
async fn progress<S: std::future::Future<Output = ()>>(
    host: &Host,
    reach: Vec<String>,
    exit_when_done: bool,
    mut signal: std::pin::Pin<&mut S>,
) -> DemoExit {
    let tty = std::io::stdout().is_terminal();
    let mut screen = Screen::new(reach);
    let admin = host.embedded.admin();
    let mut last_print = Instant::now() - Duration::from_secs(60);
    let mut printed_ready = false;
    loop {
        let rows = admin.local_views(host.required()).await.ok();
        // Measured every frame: the terminal may have been resized.
        let size = tty.then(screen::size);
        let max = size.map(|s| screen::usable(s.cols));
        let lines = match &rows {
            Some(rows) => render(rows, max),
            None => vec!["  (progress unknown: the database could not be read)".into()],
        };
        // One read drives the whole frame, so header and lines agree.
        let ready = rows.as_ref().is_some_and(|rows| {
            !rows.is_empty() && rows.iter().all(|r| r.state == State::Completed)
        });
        // The frame that ends the demo is printed even between two timed
        // frames: it is the one whose diagnostic the exit message points
        // to.
        let stuck = rows.as_ref().is_some_and(|rows| {
            rows.iter()
                .any(|r| matches!(r.state, State::Failed | State::Blocked))
        });
        let header = format!(
            "backfills ({}), readiness: {}",
            if ready { "all completed" } else { "working" },
            if ready { "READY" } else { "gated (503)" }
        );
        let mut out = std::io::stdout().lock();
        if let Some(size) = size {
            let frame: Vec<String> = std::iter::once(header).chain(lines).collect();
            // A failed write to the terminal loses one frame; the next
            // one redraws everything.
            let _ = screen.draw(&mut out, size, &frame);
        } else if (ready && !printed_ready)
            || (exit_when_done && stuck)
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
        if rows.is_some() {
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
