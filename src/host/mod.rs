//! Startup of an embedding service: the migrations switch, schema
//! compatibility, registration, automatic starts, the actor runtime, the
//! readiness gate and the HTTP listeners (CONTRACT section 8).
//!
//! The order is the contract: migrate (when on) -> check the schema
//! (always, independently) -> register every definition -> start required
//! `pending` backfills (automatic mode only) -> start the runtime (always:
//! started work stays recoverable in manual mode, CFG-4) -> open the
//! listeners. Readiness is first evaluated only after registration, so the
//! complete required set is known before anyone can observe the gate
//! (CFG-2).

pub mod demo;
pub mod ephemeral;
pub mod readiness;

use crate::admin::{Admin, AdminConfig, AuthConfig};
use crate::engine::{Engine, EngineConfig, EngineError};
use crate::example;
use crate::http;
use crate::runtime::{RuntimeConfig, RuntimeHandle};
use crate::store::{self, Pool, StoreError};
use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpServer};
use readiness::Readiness;
use std::net::SocketAddr;
use std::sync::Arc;

/// Errors of startup. Messages are for an operator: they name what is
/// wrong and never carry secrets or SQL.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The schema the application and its repairs need is not in place
    /// (with `--migrate off`, a backfill never changes schema). The text
    /// is the schema check's own, which already says so.
    #[error("{0}")]
    Schema(String),
    /// A `--required` ID has no local definition.
    #[error("--required names {0:?}, which this build does not define")]
    UnknownRequired(String),
    /// A listener could not be opened.
    #[error("cannot listen on {addr}: {reason}")]
    Listen { addr: SocketAddr, reason: String },
    /// Invalid configuration.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// The throwaway database could not be started.
    #[error(transparent)]
    Ephemeral(#[from] ephemeral::EphemeralError),
    /// The example application failed.
    #[error("example application: {0}")]
    Example(String),
}

/// Everything `serve` needs.
#[derive(Debug, Clone)]
pub struct HostConfig {
    pub database_url: String,
    /// Serving listener: the example application, `/readyz`, `/livez`.
    pub listen: SocketAddr,
    /// Admin listener (admin API, metrics, UI); may equal `listen`.
    pub admin_listen: SocketAddr,
    /// Run migrations (framework tables and application schema).
    pub migrate: bool,
    /// Start required backfills and gate readiness on them.
    pub auto_backfills: bool,
    /// Backfills that gate readiness in automatic mode; `None` = all
    /// definitions of this build.
    pub required: Option<Vec<String>>,
    /// Who may use the admin API (`--operator-token`,
    /// `--admin-tokens-file`, `--admin-auth`). No principals = every admin
    /// request is refused (AUTH-1).
    pub admin_auth: AuthConfig,
    /// Keys per batch for the example repairs.
    pub batch_size: u32,
    /// Connections in the pool; at least `runtime.max_concurrent_runners`
    /// + 2 (each runner keeps one for its claim).
    pub pool_size: u32,
    pub engine: EngineConfig,
    pub runtime: RuntimeConfig,
}

impl HostConfig {
    /// Defaults for `database_url`, listening on loopback.
    pub fn new(database_url: impl Into<String>) -> Self {
        Self {
            database_url: database_url.into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin_listen: SocketAddr::from(([127, 0, 0, 1], 8081)),
            migrate: true,
            auto_backfills: true,
            required: None,
            admin_auth: AuthConfig::Tokens(Vec::new()),
            batch_size: 1000,
            pool_size: 16,
            engine: EngineConfig::default(),
            runtime: RuntimeConfig::default(),
        }
    }

    /// Check the configuration before touching anything.
    pub fn validate(&self) -> Result<(), HostError> {
        self.engine.validate()?;
        self.runtime
            .validate()
            .map_err(|e| HostError::Config(e.to_string()))?;
        if self.runtime.lease_ttl != self.engine.lease_ttl {
            return Err(HostError::Config(
                "the runtime's lease TTL must equal the engine's".into(),
            ));
        }
        if self.batch_size == 0 {
            return Err(HostError::Config("batch size must be at least 1".into()));
        }
        // Each runner keeps one connection for the whole claim (its open
        // batch, see `engine`); claims, renewals, validation and the admin
        // API need at least two more, or a lease could expire waiting for a
        // connection to renew it.
        let needed = self.runtime.max_concurrent_runners as u32 + 2;
        if self.pool_size < needed {
            return Err(HostError::Config(format!(
                "pool size must be at least the maximum runners plus 2 ({needed})"
            )));
        }
        Ok(())
    }
}

/// A started host.
pub struct Host {
    pub engine: Engine,
    pub runtime: RuntimeHandle<Engine>,
    pub readiness: Readiness,
    /// Bound serving address (useful with port 0).
    pub serving_addr: SocketAddr,
    /// Bound admin address.
    pub admin_addr: SocketAddr,
    /// The required (gating) IDs.
    pub required: Vec<String>,
    servers: Vec<ServerHandle>,
    listener: actix_rt::task::JoinHandle<()>,
    auto_retry: actix_rt::task::JoinHandle<()>,
}

/// The routes of the admin listener: metrics, admin API, UI.
#[derive(Clone)]
struct AdminRoutes {
    metrics: web::Data<http::metrics::MetricsSource>,
    admin: web::Data<Admin>,
}

impl AdminRoutes {
    fn configure(&self, cfg: &mut web::ServiceConfig) {
        http::admin::configure(cfg, self.admin.clone());
        http::metrics::configure(cfg, self.metrics.clone());
        http::ui::configure(cfg);
    }
}

fn listen_error(addr: SocketAddr, error: std::io::Error) -> HostError {
    HostError::Listen {
        addr,
        reason: error.kind().to_string(),
    }
}

impl Host {
    /// Start everything in the contract's order. Must run inside an actix
    /// system (`actix_web::main` / `actix_rt::System`).
    pub async fn start(config: HostConfig) -> Result<Self, HostError> {
        config.validate()?;
        if config.migrate {
            store::run_migrations(&config.database_url).await?;
            example::migrate(&config.database_url)
                .await
                .map_err(|e| HostError::Example(e.to_string()))?;
        }
        let pool: Pool = store::build_pool(&config.database_url, config.pool_size).await?;
        {
            let mut conn = pool.get().await.map_err(StoreError::from)?;
            example::check_schema(&mut conn)
                .await
                .map_err(|e| HostError::Schema(e.to_string()))?;
        }
        let registry =
            example::registry(config.batch_size).map_err(|e| HostError::Config(e.to_string()))?;
        let required = match &config.required {
            Some(ids) => ids.clone(),
            None => registry.ids(),
        };
        for id in &required {
            if !registry.contains(id) {
                return Err(HostError::UnknownRequired(id.clone()));
            }
        }
        let engine = Engine::new(pool.clone(), registry, config.engine.clone())?;
        engine.register().await?;
        tracing::info!(event = "registered", definitions = engine.registry().len(), automatic = config.auto_backfills, required = ?required);
        let mut retry_starts = Vec::new();
        if config.auto_backfills {
            for id in &required {
                if !auto_start(&engine, id).await {
                    retry_starts.push(id.clone());
                }
            }
        }
        let runtime = RuntimeHandle::start(Arc::new(engine.clone()), config.runtime.clone())
            .map_err(|e| HostError::Config(e.to_string()))?;
        // A start that failed for a passing reason (a lock held during a
        // deploy, a restart of PostgreSQL) is tried again in the
        // background, or the gate would stay closed until an operator
        // started the backfill by hand.
        let auto_retry = actix_rt::spawn(retry_auto_starts(
            engine.clone(),
            runtime.clone(),
            retry_starts,
            config.runtime.poll_interval,
        ));
        let readiness = Readiness::new(pool.clone(), config.auto_backfills, required.clone());
        let listener = spawn_wake_listener(config.database_url.clone(), runtime.clone());

        let metrics = web::Data::new(http::metrics::MetricsSource {
            pool: pool.clone(),
            readiness: readiness.clone(),
            runtime: runtime.metrics().clone(),
        });
        let waker_runtime = runtime.clone();
        let admin_service = Admin::new(
            engine.clone(),
            AdminConfig {
                auth: config.admin_auth.clone(),
                auto_backfills: config.auto_backfills,
                required: required.iter().cloned().collect(),
            },
        )
        .with_waker(Arc::new(move |_id: &str| waker_runtime.wake()));
        let admin = AdminRoutes {
            metrics,
            admin: web::Data::new(admin_service),
        };
        let serving_pool = pool.clone();
        let serving_ready = web::Data::new(readiness.clone());
        // In-flight requests get the same grace as the runtime's drain on
        // shutdown, not actix's own 30 s (a slow request would hold the
        // process past a supervisor's kill).
        let http_grace = config.runtime.shutdown_grace.as_secs().max(1);
        // Port 0 asks for two fresh ports, so it never means "shared".
        let shared = config.listen == config.admin_listen && config.listen.port() != 0;
        let shared_admin = admin.clone();
        let serving = HttpServer::new(move || {
            let pool = serving_pool.clone();
            let ready = serving_ready.clone();
            let admin = shared_admin.clone();
            App::new()
                .configure(move |cfg| example::configure(cfg, pool))
                .configure(move |cfg| http::serving::configure(cfg, ready))
                .configure(move |cfg| {
                    if shared {
                        admin.configure(cfg)
                    }
                })
        })
        .disable_signals()
        .shutdown_timeout(http_grace)
        .workers(2)
        .bind(config.listen)
        .map_err(|e| listen_error(config.listen, e))?;
        let serving_addr = serving.addrs().first().copied().unwrap_or(config.listen);
        let serving = serving.run();
        let mut servers = vec![serving.handle()];
        actix_rt::spawn(serving);
        let admin_addr = if shared {
            serving_addr
        } else {
            // The admin boundary has its own listener so it stays reachable
            // while serving is gated (CFG-3).
            let server = HttpServer::new(move || {
                let admin = admin.clone();
                App::new().configure(move |cfg| admin.configure(cfg))
            })
            .disable_signals()
            .shutdown_timeout(http_grace)
            .workers(1)
            .bind(config.admin_listen)
            .map_err(|e| listen_error(config.admin_listen, e))?;
            let addr = server
                .addrs()
                .first()
                .copied()
                .unwrap_or(config.admin_listen);
            let server = server.run();
            servers.push(server.handle());
            actix_rt::spawn(server);
            addr
        };
        Ok(Self {
            engine,
            runtime,
            readiness,
            serving_addr,
            admin_addr,
            required,
            servers: std::mem::take(&mut servers),
            listener,
            auto_retry,
        })
    }

    /// Stop the listeners and drain the runtime (claims are released so
    /// another process continues at once), at the same time: the drain
    /// does not wait for slow HTTP requests, and both are bounded by the
    /// shutdown grace.
    pub async fn stop(self) {
        self.listener.abort();
        self.auto_retry.abort();
        let servers =
            futures_util::future::join_all(self.servers.iter().map(|server| server.stop(true)));
        futures_util::join!(servers, self.runtime.shutdown());
    }

    /// Run until SIGINT or SIGTERM, then stop gracefully.
    pub async fn run_until_signal(self) {
        wait_for_signal().await;
        tracing::info!(event = "shutdown_requested");
        self.stop().await;
    }
}

/// LISTEN for wake-ups on a dedicated connection and wake the supervisor on
/// each one (and after every reconnect). A hint only: the poll interval
/// finds the same work if a notification is lost (CONTRACT section 0).
fn spawn_wake_listener(
    url: String,
    runtime: RuntimeHandle<Engine>,
) -> actix_rt::task::JoinHandle<()> {
    use futures_util::StreamExt;
    actix_rt::spawn(async move {
        loop {
            match store::connect_dedicated(&url).await {
                Ok(mut conn) => {
                    if store::wake_listen(&mut conn).await.is_ok() {
                        runtime.wake();
                        let mut stream = std::pin::pin!(conn.notifications_stream());
                        while let Some(Ok(_)) = stream.next().await {
                            runtime.wake();
                        }
                    }
                    tracing::warn!(
                        event = "wake_listener_lost",
                        "LISTEN connection ended; reconnecting (polling continues)"
                    );
                }
                Err(error) => {
                    tracing::warn!(event = "wake_listener_lost", error = %error, "cannot LISTEN; polling continues");
                }
            }
            actix_rt::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    })
}

/// Resolve on SIGINT (Ctrl-C) or SIGTERM.
pub async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Start one required backfill (automatic mode). `false`: it failed for a
/// reason that may pass (retryable), so it is worth trying again; a
/// definite failure is logged and left to the operator.
async fn auto_start(engine: &Engine, id: &str) -> bool {
    match engine.start(id).await {
        Ok(outcome) => {
            tracing::info!(event = "auto_start", backfill = %id, state = %outcome.row().state);
            true
        }
        Err(error) => {
            let retryable = matches!(
                error.classification(),
                Some(crate::repair::RepairError::Retryable(_))
            );
            // The gate stays closed (the row stays pending). Bounded like
            // every diagnostic (AUD-2): the repair's capture error is its
            // own text.
            tracing::error!(event = "auto_start_failed", backfill = %id, retryable, error = %crate::repair::bounded(error.to_string()));
            !retryable
        }
    }
}

/// Try the failed automatic starts again, from the poll interval doubling
/// up to 30 s, until each has started or failed for good; wake the runtime
/// after each start.
async fn retry_auto_starts(
    engine: Engine,
    runtime: RuntimeHandle<Engine>,
    mut ids: Vec<String>,
    poll: std::time::Duration,
) {
    let mut wait = poll.max(std::time::Duration::from_millis(50));
    while !ids.is_empty() {
        actix_rt::time::sleep(wait).await;
        let mut left = Vec::new();
        for id in ids {
            if auto_start(&engine, &id).await {
                runtime.wake();
            } else {
                left.push(id);
            }
        }
        ids = left;
        wait = (wait * 2).min(std::time::Duration::from_secs(30));
    }
}
