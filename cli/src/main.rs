//! The `backfill` binary: `demo`, `serve`, `seed` (and the operator CLI).

use anyhow::Context;
use backfill::engine::EngineConfig;
use backfill::host::{Host, HostConfig};
use backfill::notify::{NotifyConfig, NotifyError, Secret, Target};
use backfill::runtime::RuntimeConfig;
use backfill::throttle::health::{HealthConfig, Thresholds, UnknownPolicy};
use backfill_cli::demo::{DemoConfig, DemoExit};
use backfill_cli::example::ExampleApp;
use clap::parser::ValueSource;
use clap::{Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use std::io::IsTerminal;
use std::net::SocketAddr;
use std::time::Duration;

/// Crash-proof, operator-controlled data repairs on PostgreSQL.
#[derive(Parser, Debug)]
#[command(name = "backfill", version, about)]
struct Cli {
    /// Format of the log that `serve`, `demo`, `seed` and `bench` write to
    /// stderr (`ctl` writes none).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Zero-setup tour: throwaway database, seeded example app, every
    /// repair run automatically with live progress and the admin API.
    Demo(DemoArgs),
    /// Run the example application with the backfill runtime embedded.
    // Boxed: its flags make it far larger than the other variants.
    Serve(Box<ServeArgs>),
    /// Insert example events fast.
    Seed(SeedArgs),
    /// Operator CLI over the admin API.
    Ctl(backfill_cli::ctl::CtlArgs),
    /// Throughput benchmark: the engine against a PL/pgSQL loop and a
    /// minimal client loop on the same database (benches/README.md).
    Bench(backfill_cli::bench::BenchArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Switch {
    On,
    Off,
}

impl Switch {
    fn on(self) -> bool {
        self == Switch::On
    }
}

/// Runtime and batch knobs shared by `serve` and `demo`.
#[derive(Args, Debug, Clone)]
struct RuntimeArgs {
    /// Lease TTL of a claim, in milliseconds (CLM-3).
    #[arg(long, default_value_t = 30_000)]
    lease_ttl_ms: u64,
    /// Renewal cadence in milliseconds; default a third of the lease TTL.
    #[arg(long)]
    renew_interval_ms: Option<u64>,
    /// How often the supervisor looks for work, in milliseconds.
    #[arg(long, default_value_t = 1_000)]
    poll_interval_ms: u64,
    /// Maximum backfills this process works on at once.
    #[arg(long, default_value_t = 4)]
    max_runners: usize,
    /// How long shutdown waits for in-flight batches, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    shutdown_grace_ms: u64,
    /// How often each runner logs a `progress` event, in milliseconds
    /// (every batch is a `batch_committed` event at debug level).
    #[arg(long, default_value_t = 10_000)]
    progress_log_interval_ms: u64,
    /// How often the progress of held claims is recorded for rates and
    /// the run chart, in milliseconds (at least 100).
    #[arg(long, default_value_t = 2_000)]
    progress_sample_interval_ms: u64,
    /// `statement_timeout` of each batch transaction, in milliseconds.
    #[arg(long, default_value_t = 30_000)]
    statement_timeout_ms: u64,
    /// `lock_timeout` of each batch transaction, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    lock_timeout_ms: u64,
    /// Keys per batch for the example repairs.
    #[arg(long, default_value_t = 1_000)]
    batch_size: u32,
    /// This process's worker ID (the claim owner); default host-pid.
    #[arg(long, env = "BACKFILL_WORKER_ID")]
    worker_id: Option<String>,
    #[command(flatten)]
    health: HealthArgs,
}

/// Health signals that hold batches back (THR-1), process defaults; each
/// backfill may override them through its live settings.
#[derive(Args, Debug, Clone)]
struct HealthArgs {
    /// How often the health monitor reads the signals, in milliseconds.
    #[arg(long, default_value_t = 1_000)]
    health_interval_ms: u64,
    /// Replication byte-lag limit of every standby (0 = any lag).
    #[arg(long, default_value_t = backfill::throttle::health::DEFAULT_MAX_LAG_BYTES)]
    max_lag_bytes: u64,
    /// Replication time-lag limit, in milliseconds (off when unset).
    #[arg(long)]
    max_lag_ms: Option<u64>,
    /// WAL bytes per second limit, server-wide (off when unset).
    #[arg(long)]
    max_wal_bytes_per_s: Option<u64>,
    /// Sessions waiting for a lock on a repair's tables (off when unset).
    #[arg(long)]
    max_lock_waiters: Option<u64>,
    /// Age limit of the oldest other transaction, in milliseconds (off
    /// when unset).
    #[arg(long)]
    max_xact_age_ms: Option<u64>,
    /// What an unreadable signal does: proceed on the others (and say
    /// so), or hold batches back like a signal past its limit.
    #[arg(long, value_enum, default_value_t = UnknownSignals::Proceed)]
    unknown_signals: UnknownSignals,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum UnknownSignals {
    Proceed,
    Throttle,
}

impl HealthArgs {
    fn config(&self) -> HealthConfig {
        HealthConfig {
            interval: Duration::from_millis(self.health_interval_ms),
            thresholds: Thresholds {
                max_lag_bytes: Some(self.max_lag_bytes),
                max_lag: self.max_lag_ms.map(Duration::from_millis),
                max_wal_bytes_per_s: self.max_wal_bytes_per_s,
                max_lock_waiters: self.max_lock_waiters,
                max_xact_age: self.max_xact_age_ms.map(Duration::from_millis),
            },
            unknown: match self.unknown_signals {
                UnknownSignals::Proceed => UnknownPolicy::Proceed,
                UnknownSignals::Throttle => UnknownPolicy::Throttle,
            },
            ..HealthConfig::default()
        }
    }
}

impl RuntimeArgs {
    fn apply(&self, config: &mut HostConfig) {
        // The lease TTL is the engine's; the runtime derives its renewal
        // cadence and trust window from it.
        let ttl = Duration::from_millis(self.lease_ttl_ms);
        config.engine = EngineConfig {
            lease_ttl: ttl,
            statement_timeout: Duration::from_millis(self.statement_timeout_ms),
            lock_timeout: Duration::from_millis(self.lock_timeout_ms),
            ..EngineConfig::default()
        };
        config.runtime = RuntimeConfig {
            worker_id: self.worker_id.clone().unwrap_or_else(default_worker_id),
            renew_interval: self.renew_interval_ms.map(Duration::from_millis),
            poll_interval: Duration::from_millis(self.poll_interval_ms),
            max_concurrent_runners: self.max_runners,
            shutdown_grace: Duration::from_millis(self.shutdown_grace_ms),
            progress_log_interval: Duration::from_millis(self.progress_log_interval_ms),
            progress_sample_interval: Duration::from_millis(self.progress_sample_interval_ms),
        };
        config.health = self.health.config();
    }
}

fn default_worker_id() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".into());
    format!("{host}-{}", std::process::id())
}

#[derive(Args, Debug)]
struct ServeArgs {
    /// PostgreSQL URL.
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    /// Serving listener: the example application, /readyz and /livez.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Admin listener: admin API, metrics and UI (may equal --listen).
    #[arg(long, default_value = "127.0.0.1:8081")]
    admin_listen: SocketAddr,
    /// Run schema migrations (framework tables and application schema).
    #[arg(long, value_enum, default_value_t = Switch::On)]
    migrate: Switch,
    /// Start required backfills and gate readiness until they complete.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    auto_backfills: Switch,
    /// Backfills that gate readiness in automatic mode (default: all).
    #[arg(long, num_args = 1..)]
    required: Option<Vec<String>>,
    #[command(flatten)]
    admin: AdminAuthArgs,
    #[command(flatten)]
    runtime: RuntimeArgs,
    #[command(flatten)]
    webhook: WebhookArgs,
}

/// One webhook notified of state changes (target name `webhook`).
#[derive(Args, Debug)]
struct WebhookArgs {
    /// http:// or https:// URL notified of state changes; unset = no
    /// notifications. An https receiver's certificate is verified against
    /// the public (Mozilla) roots and --webhook-ca-file.
    #[arg(long, env = "BACKFILL_WEBHOOK", hide_env_values = true)]
    webhook: Option<String>,
    /// Events it is notified of, comma-separated: blocked, failed,
    /// completed, validation_failed, throttled, undo_completed.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "blocked,failed,completed,validation_failed,undo_completed"
    )]
    webhook_events: Vec<String>,
    /// File holding the HMAC-SHA256 signing secret (at least 16 bytes;
    /// one trailing newline is ignored). Required with --webhook.
    #[arg(long, env = "BACKFILL_WEBHOOK_SECRET_FILE")]
    webhook_secret_file: Option<std::path::PathBuf>,
    /// PEM file of CA certificates trusted for an https:// webhook besides
    /// the public roots (a receiver with a private CA's certificate).
    #[arg(long, env = "BACKFILL_WEBHOOK_CA_FILE")]
    webhook_ca_file: Option<std::path::PathBuf>,
    /// How long a throttle lasts before it is a `throttled` event, in
    /// seconds.
    #[arg(long, default_value_t = 3_600)]
    webhook_throttled_after_s: u64,
    /// Tries per notification before it is dead.
    #[arg(long, default_value_t = 8)]
    webhook_max_attempts: u32,
    /// One delivery's timeout, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    webhook_timeout_ms: u64,
}

impl WebhookArgs {
    /// The notification configuration these flags describe; errors name
    /// the flag.
    fn config(&self) -> anyhow::Result<NotifyConfig> {
        let mut config = NotifyConfig {
            throttled_after: Duration::from_secs(self.webhook_throttled_after_s),
            max_attempts: self.webhook_max_attempts,
            timeout: Duration::from_millis(self.webhook_timeout_ms),
            ca_file: self.webhook_ca_file.clone(),
            ..NotifyConfig::default()
        };
        let Some(url) = &self.webhook else {
            return Ok(config);
        };
        let path = self
            .webhook_secret_file
            .as_ref()
            .context("--webhook-secret-file is required with --webhook")?;
        let secret = std::fs::read(path)
            .with_context(|| format!("--webhook-secret-file: cannot read {}", path.display()))?;
        config.targets.push(Target {
            name: "webhook".into(),
            url: url.clone(),
            events: self
                .webhook_events
                .iter()
                .map(|e| e.trim().to_string())
                .collect(),
            secret: Secret::from_file_text(&secret),
        });
        config.validate().map_err(|e| match e {
            NotifyError::Config { field, reason } => {
                let flag = match field.rsplit('.').next().unwrap_or("") {
                    "url" => "--webhook",
                    "events" => "--webhook-events",
                    "secret" => "--webhook-secret-file",
                    "ca_file" => "--webhook-ca-file",
                    "max_attempts" => "--webhook-max-attempts",
                    "timeout" => "--webhook-timeout-ms",
                    _ => "--webhook",
                };
                anyhow::anyhow!("{flag}: {reason}")
            }
            other => other.into(),
        })?;
        Ok(config)
    }
}

#[derive(Args, Debug)]
struct DemoArgs {
    /// PostgreSQL server URL; unset = a throwaway cluster.
    #[arg(long, env = "DATABASE_URL")]
    database_url: Option<String>,
    /// Events to seed.
    #[arg(long, default_value_t = 1_000_000)]
    rows: u64,
    /// Events seeded with malformed tags (shows a `blocked` backfill).
    #[arg(long, default_value_t = 0)]
    bad_rows: u64,
    /// Database the demo drops and creates on the server ([a-z0-9_]).
    #[arg(long, default_value = "backfill_demo")]
    database_name: String,
    /// Exit 0 once every required backfill is completed (non-zero if one
    /// ends failed or blocked).
    #[arg(long)]
    exit_when_done: bool,
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    #[arg(long, default_value = "127.0.0.1:8081")]
    admin_listen: SocketAddr,
    /// Keys per batch.
    #[arg(long, default_value_t = 1_000)]
    batch_size: u32,
    /// Operator token (default: random, printed).
    #[arg(long, env = "BACKFILL_OPERATOR_TOKEN", hide_env_values = true)]
    operator_token: Option<String>,
    /// Tenant databases, 1 to 16: above 1, one fleet serves that many
    /// databases (`<database-name>_t01` ..), each seeded with its share
    /// of the events, and the fleet's view listens on --admin-listen.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=16))]
    databases: u32,
}

#[derive(Args, Debug)]
struct SeedArgs {
    #[arg(long, env = "DATABASE_URL")]
    database_url: String,
    #[arg(long, default_value_t = 100_000)]
    rows: u64,
    #[arg(long, default_value_t = 0)]
    bad_rows: u64,
    #[arg(long, value_enum, default_value_t = Switch::On)]
    migrate: Switch,
}

fn init_logging(format: LogFormat, default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    // Colour codes only on a terminal: a log file, a pipe or a journal
    // would otherwise carry escape sequences in every line.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        // Through the live displays' writer: while one redraws the
        // terminal, log lines wait for its next frame instead of breaking
        // it.
        .with_writer(|| backfill_cli::screen::LogWriter);
    match format {
        // The crate's own JSON formatter: list-valued fields as arrays.
        LogFormat::Json => builder
            .fmt_fields(backfill::logging::JsonLines)
            .event_format(backfill::logging::JsonLines)
            .init(),
        LogFormat::Text => builder.init(),
    }
}

fn main() {
    let matches = match Cli::command().try_get_matches() {
        Ok(matches) => matches,
        Err(error) => usage_error(error),
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(error) => usage_error(error),
    };
    // Whether a secret came on the command line, which every local user
    // can read in /proc/<pid>/cmdline (AUTH-5).
    let token_on_argv = matches.subcommand().is_some_and(|(_, sub)| {
        sub.try_get_raw("operator_token").is_ok_and(|v| v.is_some())
            && sub.value_source("operator_token") == Some(ValueSource::CommandLine)
    });
    let ctl_token_on_argv = matches.subcommand().is_some_and(|(name, sub)| {
        name == "ctl" && sub.value_source("token") == Some(ValueSource::CommandLine)
    });
    let mut cli = cli;
    if let Command::Ctl(args) = &mut cli.command {
        args.token_on_argv = ctl_token_on_argv;
    }
    let code = match run(cli, token_on_argv) {
        Ok(code) => code,
        Err(error) => {
            // One readable line; the chain is already bounded and redacted.
            eprintln!("error: {error:#}");
            1
        }
    };
    std::process::exit(code);
}

/// Bad arguments: one readable line and exit code 2, like every other
/// usage error of the CLI. clap's own report spreads the problem over
/// several lines (the missing argument's name on the second) followed by a
/// usage block; its first paragraph, joined, is the line. Help and version
/// requests print as clap prints them.
fn usage_error(error: clap::Error) -> ! {
    use clap::error::ErrorKind;
    if matches!(
        error.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        error.exit();
    }
    let text = error.render().to_string();
    let line = text
        .lines()
        .map(str::trim)
        .take_while(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let line = if line.is_empty() {
        "error: invalid arguments".to_string()
    } else {
        line
    };
    eprintln!("{line} (see --help)");
    std::process::exit(2);
}

/// AUTH-5: a token given on the command line still works, but every local
/// user can read it; say so, naming the forms that keep it private.
fn warn_token_on_argv() {
    tracing::warn!(
        event = "operator_token_on_argv",
        "--operator-token on the command line is readable by every local user of this \
         machine; pass the token in BACKFILL_OPERATOR_TOKEN or in a file named by \
         --operator-token-file instead"
    );
}

fn run(cli: Cli, token_on_argv: bool) -> anyhow::Result<i32> {
    match cli.command {
        Command::Serve(args) => {
            // Boxed in `Command` only to keep the enum small; moved out
            // whole so its fields can be moved out one by one.
            let args = *args;
            init_logging(cli.log_format, "info");
            if token_on_argv {
                warn_token_on_argv();
            }
            let mut config = HostConfig::new(args.database_url);
            config.listen = args.listen;
            config.admin_listen = args.admin_listen;
            config.migrate = args.migrate.on();
            config.auto_backfills = args.auto_backfills.on();
            config.required = args.required;
            config.admin_auth = args.admin.to_config()?;
            config.admin_allowed_hosts = args.admin.admin_allowed_host.clone();
            config.admin_allow_remote_trusted = args.admin.admin_allow_remote_trusted;
            config.notify = args.webhook.config()?;
            args.runtime.apply(&mut config);
            actix_rt::System::new().block_on(async move {
                let app = ExampleApp {
                    batch_size: args.runtime.batch_size,
                };
                let host = Host::start(config, app).await.context("startup failed")?;
                tracing::info!(event = "serving", listen = %host.serving_addr, admin = %host.admin_addr);
                host.run_until_signal().await;
                Ok(0)
            })
        }
        Command::Demo(args) => {
            init_logging(cli.log_format, "warn");
            if token_on_argv {
                warn_token_on_argv();
            }
            let config = DemoConfig {
                database_url: args.database_url,
                rows: args.rows,
                bad_rows: args.bad_rows,
                database_name: args.database_name,
                exit_when_done: args.exit_when_done,
                listen: args.listen,
                admin_listen: args.admin_listen,
                batch_size: args.batch_size,
                operator_token: args.operator_token,
                databases: args.databases,
            };
            actix_rt::System::new().block_on(async move {
                match backfill_cli::demo::run(config)
                    .await
                    .context("demo failed")?
                {
                    DemoExit::Done => Ok(0),
                    DemoExit::Stuck => Ok(1),
                }
            })
        }
        Command::Ctl(args) => Ok(backfill_cli::ctl::run(args)),
        Command::Bench(args) => {
            init_logging(cli.log_format, "warn");
            actix_rt::System::new().block_on(async move {
                backfill_cli::bench::run(args).await.context("bench failed")
            })
        }
        Command::Seed(args) => {
            init_logging(cli.log_format, "info");
            actix_rt::System::new().block_on(async move {
                if args.migrate.on() {
                    backfill::__private::store::run_migrations(&args.database_url).await?;
                    backfill_cli::example::migrate(&args.database_url).await?;
                }
                let pool = backfill::__private::store::build_pool(&args.database_url, 4).await?;
                let started = std::time::Instant::now();
                let n = backfill_cli::example::seed(&pool, args.rows, args.bad_rows).await?;
                println!(
                    "seeded {n} events in {:.1}s",
                    started.elapsed().as_secs_f64()
                );
                Ok(0)
            })
        }
    }
}

/// Command-line flags of the admin boundary, for hosts that serve it.
#[derive(Debug, Clone, clap::Args)]
pub struct AdminAuthArgs {
    /// A bearer token granting backfill:read, backfill:operate and
    /// backfill:inspect, audited
    /// as principal "operator". Prefer the environment variable or
    /// --operator-token-file: the command line is readable by every local
    /// user.
    #[arg(long, env = "BACKFILL_OPERATOR_TOKEN", hide_env_values = true)]
    pub operator_token: Option<String>,
    /// A file holding the operator token (its first line), instead of
    /// --operator-token.
    #[arg(
        long,
        env = "BACKFILL_OPERATOR_TOKEN_FILE",
        conflicts_with = "operator_token"
    )]
    pub operator_token_file: Option<std::path::PathBuf>,
    /// JSON file of principals: [{"name","sha256","capabilities"}].
    #[arg(long, env = "BACKFILL_ADMIN_TOKENS_FILE")]
    pub admin_tokens_file: Option<std::path::PathBuf>,
    /// `tokens` (default) or `trusted-network` (AUTH-2: the network boundary
    /// authorizes; audit names no individual actor).
    #[arg(long, default_value = "tokens", value_parser = ["tokens", "trusted-network"])]
    pub admin_auth: String,
    /// In trusted-network mode, a Host name the admin API answers to
    /// besides localhost, the loopback addresses and the admin listen
    /// address (repeatable).
    #[arg(long, value_name = "HOST")]
    pub admin_allowed_host: Vec<String>,
    /// Let trusted-network mode listen on a non-loopback address: everyone
    /// who can reach it holds every capability.
    #[arg(long)]
    pub admin_allow_remote_trusted: bool,
}

impl AdminAuthArgs {
    /// The configuration these flags describe.
    pub fn to_config(&self) -> Result<backfill::admin::AuthConfig, backfill::admin::AuthError> {
        let from_file = match &self.operator_token_file {
            Some(path) => Some(backfill::admin::read_token_file(path)?),
            None => None,
        };
        backfill::admin::AuthConfig::from_sources(
            from_file.as_deref().or(self.operator_token.as_deref()),
            self.admin_tokens_file.as_deref(),
            self.admin_auth == "trusted-network",
        )
    }
}
