//! `backfill demo --databases N`: the example application over a fleet of
//! N tenant databases (FLT-1, FLT-6), so a newcomer sees one repair roll
//! across many databases from one runtime.
//!
//! Each tenant gets a database of its own on the demo's server
//! (`<database-name>_t01` ..), migrated and seeded with its share of the
//! events; one `Fleet` serves them all with the same application, and its
//! listener answers the fleet's view (`/admin/fleet`) and readiness. The
//! display is one row per database, read through the fleet's admin
//! service, the same numbers the API shows.

use crate::example::{self, ExampleApp, ExampleError};
use crate::screen::{self, Screen};
use backfill::__private::store::{self, StoreError};
use backfill::admin::{DatabaseSummary, FleetOverview, RequestMeta};
use backfill::host::{Application, Database, Fleet, FleetConfig, HostConfig};
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

/// What the fleet demo is asked to do (the demo's own options).
#[derive(Debug, Clone)]
pub struct FleetDemo {
    /// Tenant databases, 2 or more.
    pub databases: u32,
    /// Events over all tenants, each seeded with its share.
    pub rows: u64,
    /// Malformed events seeded into the first tenant.
    pub bad_rows: u64,
    /// The tenants' databases are `<database_name>_t01` ..
    pub database_name: String,
    pub exit_when_done: bool,
    /// Where the fleet's view listens.
    pub admin_listen: std::net::SocketAddr,
    pub batch_size: u32,
    /// `None`: a random one, printed.
    pub operator_token: Option<String>,
}

/// How the fleet demo ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetExit {
    /// Every database completed (with `exit_when_done`), or a signal.
    Done,
    /// A backfill ended `failed` or `blocked` in some database.
    Stuck,
}

/// Why the fleet demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum FleetDemoError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("example application: {0}")]
    Example(#[from] ExampleError),
    #[error("{0}")]
    Other(String),
}

/// Run the fleet demo on `server_url` until done (with
/// `exit_when_done`) or `signal`.
pub async fn run_on<S: std::future::Future<Output = ()>>(
    server_url: &str,
    config: &FleetDemo,
    mut signal: std::pin::Pin<&mut S>,
) -> Result<FleetExit, FleetDemoError> {
    let started = tokio::select! {
        started = start_fleet(server_url, config) => started?,
        _ = signal.as_mut() => return Ok(FleetExit::Done),
    };
    let (fleet, token, reach) = started;
    let exit = progress(&fleet, &token, reach, config.exit_when_done, signal).await;
    println!("stopping: draining every database's runtime ...");
    fleet.stop().await;
    println!("stopped");
    Ok(exit)
}

/// Create, migrate and seed every tenant's database, then start the
/// fleet and its listener; the token and the lines that say how to reach
/// it.
async fn start_fleet(
    server_url: &str,
    config: &FleetDemo,
) -> Result<(Fleet, String, Vec<String>), FleetDemoError> {
    let n = config.databases;
    let per_tenant = (config.rows / u64::from(n)).max(1);
    let mut databases = Vec::new();
    let started = Instant::now();
    println!("creating {n} tenant databases with {per_tenant} events each ...");
    for i in 1..=n {
        let name = format!("{}_t{i:02}", config.database_name);
        let url = store::database_recreate(server_url, &name).await?;
        store::run_migrations(&url).await?;
        example::migrate(&url).await?;
        let pool = store::build_pool(&url, 2).await?;
        // The malformed tags, if asked for, go to the first tenant only,
        // so one database shows a blocked backfill among completed ones.
        let bad = if i == 1 { config.bad_rows } else { 0 };
        example::seed(&pool, per_tenant, bad).await?;
        databases.push(Database::new(format!("t{i:02}"), url));
    }
    println!(
        "created and seeded {n} databases in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    let token = config.operator_token.clone().unwrap_or_else(|| {
        let bytes: [u8; 16] = rand::random();
        hex::encode(bytes)
    });
    let app = ExampleApp {
        batch_size: config.batch_size,
    };
    let mut host = HostConfig::new(String::new());
    host.migrate = false;
    host.auto_backfills = true;
    host.runtime.max_concurrent_runners = 2;
    host.pool_size = Some(
        host.pool_needed(
            &app.registry()
                .map_err(|e| FleetDemoError::Other(e.to_string()))?,
        ),
    );
    host.admin_auth = backfill::admin::AuthConfig::from_sources(Some(&token), None, false)
        .map_err(|e| FleetDemoError::Other(e.to_string()))?;
    let mut fleet_config = FleetConfig::new(host);
    fleet_config.refresh_interval = Duration::from_secs(1);
    let mut fleet = Fleet::start(fleet_config, databases, app)
        .await
        .map_err(|e| FleetDemoError::Other(e.to_string()))?;
    let addr = match fleet.listen(config.admin_listen) {
        Ok(addr) => addr,
        Err(e) => {
            fleet.stop().await;
            return Err(FleetDemoError::Other(format!(
                "cannot listen on {}: {e}",
                config.admin_listen
            )));
        }
    };
    let reach = vec![
        String::new(),
        format!(
            "databases {}_t01 .. {}_t{n:02} (one per tenant)",
            config.database_name, config.database_name
        ),
        format!("fleet     http://{addr}/admin/fleet  (every database and the totals)"),
        format!("backfills http://{addr}/admin/fleet/backfills[?database=t01]"),
        format!("readiness http://{addr}/readyz[?database=t01]"),
        "stop      Ctrl-C (drains every database's runtime)".to_string(),
        format!("operator token: {token}"),
        format!("try: BACKFILL_URL=http://{addr} BACKFILL_TOKEN={token} backfill ctl fleet status"),
        String::new(),
    ];
    for line in &reach {
        println!("{line}");
    }
    Ok((fleet, token, reach))
}

/// One line per database of the overview.
fn render(overview: &FleetOverview) -> Vec<String> {
    let mut lines: Vec<String> = overview.databases.iter().map(database_line).collect();
    let t = &overview.totals;
    lines.push(format!(
        "  fleet: {} of {} databases completed, {} running, {} blocked, {} unavailable; {:.0} rows/s",
        t.completed, t.databases, t.running, t.blocked, t.unavailable, t.rows_per_second
    ));
    lines
}

fn database_line(db: &DatabaseSummary) -> String {
    let c = &db.backfills;
    let total =
        c.pending + c.running + c.paused + c.blocked + c.failed + c.validating + c.completed;
    let what = match (&db.status.reason, &db.error) {
        (Some(reason), _) | (None, Some(reason)) => format!("unavailable: {reason}"),
        (None, None) => {
            let mut s = format!("{}/{total} completed", c.completed);
            if c.running + c.validating > 0 {
                s.push_str(&format!(", {} running", c.running + c.validating));
            }
            if c.blocked + c.failed > 0 {
                s.push_str(&format!(", {} blocked", c.blocked + c.failed));
            }
            s
        }
    };
    let rate = db
        .rows_per_second
        .map_or(String::new(), |r| format!(", {r:.0} rows/s"));
    format!("  {:<5} {what}{rate}", db.status.name)
}

/// Redraw the fleet's progress until done (with `exit_when_done`) or the
/// signal.
async fn progress<S: std::future::Future<Output = ()>>(
    fleet: &Fleet,
    token: &str,
    reach: Vec<String>,
    exit_when_done: bool,
    mut signal: std::pin::Pin<&mut S>,
) -> FleetExit {
    let tty = std::io::stdout().is_terminal();
    let mut screen = Screen::new(reach);
    let admin = fleet.admin();
    let meta = RequestMeta {
        bearer: Some(token),
        idempotency_key: None,
        request_id: None,
        source: None,
        host: None,
        origin: None,
        fetch_site: None,
        reason: None,
    };
    let mut last_print = Instant::now() - Duration::from_secs(60);
    let mut printed_done = false;
    loop {
        let overview = admin.overview(&meta).await.ok();
        let (done, stuck, lines) = match &overview {
            Some(o) => (
                o.totals.databases > 0 && o.totals.completed == o.totals.databases,
                o.totals.blocked > 0,
                render(o),
            ),
            None => (false, false, vec!["  (progress unknown)".into()]),
        };
        let header = format!(
            "tenant databases ({}), fleet readiness: {}",
            if done { "all completed" } else { "working" },
            if done { "READY" } else { "gated (503)" }
        );
        let mut out = std::io::stdout().lock();
        if tty {
            let size = screen::size();
            let frame: Vec<String> = std::iter::once(header).chain(lines).collect();
            let _ = screen.draw(&mut out, size, &frame);
        } else if (done && !printed_done)
            || (exit_when_done && stuck)
            || (!done && last_print.elapsed() >= Duration::from_secs(2))
        {
            let _ = writeln!(out, "{header}");
            for line in &lines {
                let _ = writeln!(out, "{line}");
            }
            last_print = Instant::now();
            printed_done = done;
        }
        let _ = out.flush();
        drop(out);
        if exit_when_done && done {
            println!("every tenant database completed every backfill");
            return FleetExit::Done;
        }
        if exit_when_done && stuck {
            println!("a backfill is failed or blocked in a tenant database; see above");
            return FleetExit::Stuck;
        }
        tokio::select! {
            _ = signal.as_mut() => return FleetExit::Done,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
    }
}
