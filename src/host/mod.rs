//! The embedding API: a host service hands the library its application
//! (migrations, schema check, repairs, routes) and a configuration; the
//! library starts everything in the contract's order (docs/CONTRACT.md section 8).
//!
//! The order is the contract: check the configuration and the
//! application's definitions (nothing touches PostgreSQL before they are
//! known valid) -> migrate (when on) -> check the schema (always,
//! independently) -> register every definition -> start required
//! `pending` backfills (automatic mode only) -> start the runtime (always:
//! started work stays recoverable in manual mode, CFG-4) -> the wake-up
//! listener -> (with the `http` feature) the listeners. With webhooks
//! configured, the notification sender subscribes before the automatic
//! starts and runs its loop beside the others. Readiness is first
//! evaluated only after registration, so the complete required set is
//! known before anyone can observe the gate (CFG-2).
//!
//! [`Embedded`] is that sequence without HTTP, for a service that serves
//! its own way (axum, tonic, an existing actix-web `App`); [`Host`] adds
//! the serving and admin listeners.

mod auto_start;
mod fleet;
#[cfg(feature = "http")]
mod server;
mod spawned;
mod wake;

pub use crate::admin::{Availability, DatabaseStatus, FleetReadiness};
pub use fleet::{Database, DatabaseSource, Fleet, FleetConfig, FleetError};
#[cfg(feature = "http")]
pub use server::Host;
pub use spawned::Spawned;

use crate::admin::{Admin, AdminConfig, AuthConfig};
use crate::engine::{Engine, EngineConfig, EngineError};
use crate::notify::{NotifyConfig, Sender};
use crate::readiness::Readiness;
use crate::repair::{DefinitionError, Registry};
use crate::runtime::{RuntimeConfig, RuntimeHandle};
use crate::store::{self, Pool, StoreError};
use crate::throttle::health::{HealthCheck, HealthConfig, Monitor};
use crate::throttle::latency::{LatencyConfig, LatencyMonitor};
use diesel_async::AsyncPgConnection;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

/// An application's own failure (its migrations or its schema check),
/// described in the application's words.
pub type AppError = Box<dyn std::error::Error + Send + Sync>;

/// What a host service hands the library: its schema, its repairs and its
/// routes. Only [`Application::registry`] is required.
#[async_trait::async_trait]
pub trait Application: Send + Sync + 'static {
    /// The application's repairs. Called once, at startup, before
    /// anything reaches PostgreSQL; a duplicate or invalid ID is a startup
    /// error.
    fn registry(&self) -> Result<Registry, DefinitionError>;

    /// The application's own health check, consulted with the database's
    /// signals before every batch (THR-1): `Err(reason)` holds every
    /// backfill of the process back until it passes again. Default: none.
    fn health_check(&self) -> Option<Arc<dyn HealthCheck>> {
        None
    }

    /// Apply the application's own migrations. Runs only when migrations
    /// are on, after the framework's.
    async fn migrate(&self, database_url: &str) -> Result<(), AppError> {
        let _ = database_url;
        Ok(())
    }

    /// Check, read-only, that the schema the application and its repairs
    /// need is in place. Runs in every configuration: with migrations off
    /// a backfill never changes schema, so a missing table must stop
    /// startup instead (CFG-5). The error's text is shown to the operator:
    /// name what is missing, never row values.
    async fn check_schema(&self, conn: &mut AsyncPgConnection) -> Result<(), AppError> {
        let _ = conn;
        Ok(())
    }

    /// The application's own routes on the serving listener, beside
    /// `/readyz` and `/livez`.
    #[cfg(feature = "http")]
    fn configure(&self, cfg: &mut actix_web::web::ServiceConfig, pool: &Pool) {
        let _ = (cfg, pool);
    }
}

/// A registry alone is an application without migrations, schema check or
/// routes of its own.
#[async_trait::async_trait]
impl Application for Registry {
    fn registry(&self) -> Result<Registry, DefinitionError> {
        Ok(self.clone())
    }
}

/// Errors of startup. Messages are for an operator: they name what is
/// wrong and never carry secrets or SQL.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The store failed: no connection, a statement, or the framework's
    /// own migrations.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The engine refused its configuration or a step of startup
    /// (registration, an automatic start).
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The application's definitions are unusable (duplicate or invalid
    /// stable ID, batch limit of 0, a dependency on an unregistered ID or
    /// a cycle of dependencies).
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    /// The schema the application and its repairs need is not in place
    /// (with migrations off, a backfill never changes schema). The text is
    /// the application's schema check's own.
    #[error("{0}")]
    Schema(String),
    /// The application's migrations failed.
    #[error("application migrations failed: {0}")]
    Migrate(String),
    /// The database URL reaches PostgreSQL through a pooler in
    /// transaction mode that loses the runtime's prepared statements
    /// (EMB-13); the text names what was seen and the settings to change.
    #[error("{0}")]
    Pooler(String),
    /// A required ID has no local definition.
    #[error("the required set names {0:?}, which the application does not define")]
    UnknownRequired(String),
    /// The pool cannot hold what the runtime needs at once.
    #[error(
        "pool size {pool} is too small: {runners} runners need at least {needed} connections \
         (one per runner, one more per runner whose repair overlaps commits, and 2 for claims, \
         renewals and validation)"
    )]
    PoolTooSmall {
        /// The pool size configured.
        pool: u32,
        /// The connections the runtime needs at once (EMB-6).
        needed: u32,
        /// The runtime's maximum concurrent runners.
        runners: usize,
    },
    /// A listener could not be opened.
    #[error("cannot listen on {addr}: {reason}")]
    Listen {
        /// The address that could not be bound.
        addr: SocketAddr,
        /// Why, as the operating system said.
        reason: String,
    },
    /// Invalid configuration.
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// The configuration of section 8 plus what the runtime and the listeners
/// need. [`HostConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The URL of the PostgreSQL database that holds the framework's
    /// tables and the application's data.
    pub database_url: String,
    /// Serving listener: the application's routes, `/readyz`, `/livez`
    /// ([`Host`] only).
    pub listen: SocketAddr,
    /// Admin listener (admin API, metrics, UI); may equal `listen`
    /// ([`Host`] only).
    pub admin_listen: SocketAddr,
    /// Run migrations (framework tables and the application's schema).
    pub migrate: bool,
    /// Start required backfills and gate readiness on them.
    pub auto_backfills: bool,
    /// Backfills that gate readiness in automatic mode; `None` = every
    /// definition of the application.
    pub required: Option<Vec<String>>,
    /// Who may use the admin API. No principals = every admin request is
    /// refused (AUTH-1).
    pub admin_auth: AuthConfig,
    /// In trusted-network mode, the `Host` names the admin boundary
    /// answers to besides the loopback names and the admin listen
    /// address (AUTH-3): the name operators reach it by.
    pub admin_allowed_hosts: Vec<String>,
    /// Let trusted-network mode listen on an address that is not loopback
    /// (AUTH-3). Off, [`Host::start`] refuses such an address; on, it
    /// starts with a warning: anyone who reaches the address holds every
    /// capability.
    pub admin_allow_remote_trusted: bool,
    /// Connections in the pool; `None` derives it from the runtime's
    /// maximum runners and the repairs (see [`HostConfig::pool_needed`]),
    /// with room for the admin API.
    pub pool_size: Option<u32>,
    /// How long a pooled connection may sit idle before the pool closes
    /// it (default 60 s, at least 1 s): after a burst of work, an idle
    /// database keeps only the connections its polls reuse and the wake-up
    /// listener, which matters when one process serves many databases.
    pub pool_idle_timeout: Duration,
    /// Close the wake-up listener (LISTEN/NOTIFY, a hint only) once the
    /// runtime has held no claim for this long, and open it again with
    /// the next claim; `None` (the default for one database) keeps it
    /// open. A fleet sets it for its databases (see
    /// `FleetConfig::new`), so an idle database holds no listener: its
    /// claim poll still finds a start within one poll interval, and a
    /// runner's settings are re-read when the listener opens again
    /// (THR-4). At least 1 s.
    pub idle_listener_close: Option<Duration>,
    /// The engine's settings; its lease TTL is the one the runtime uses.
    pub engine: EngineConfig,
    /// The actor runtime's settings: worker ID, runner limit, renewal,
    /// poll and sampling cadences, shutdown grace.
    pub runtime: RuntimeConfig,
    /// The health signals and their thresholds that hold batches back
    /// (THR-1); by default only a conservative replication-lag limit.
    pub health: HealthConfig,
    /// Webhooks notified of state changes (NTF-1); by default none, and
    /// then no sender runs and nothing is queued.
    pub notify: NotifyConfig,
    /// Latency budgets (THR-6): where the application's latency is
    /// sampled (the probe by default, or the host's own requests), and
    /// the budget of backfills whose settings set none (by default none:
    /// nothing is sampled until a backfill has a budget).
    pub latency: LatencyConfig,
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
            admin_allowed_hosts: Vec::new(),
            admin_allow_remote_trusted: false,
            pool_size: None,
            pool_idle_timeout: Duration::from_secs(60),
            idle_listener_close: None,
            engine: EngineConfig::default(),
            runtime: RuntimeConfig::default(),
            health: HealthConfig::default(),
            notify: NotifyConfig::default(),
            latency: LatencyConfig::default(),
        }
    }

    /// The fewest connections the runtime can work with: one per runner
    /// (each keeps one for its claim's open batch), one more per runner
    /// when any repair overlaps commits (its second connection), and two
    /// for claims, renewals and validation, or a lease could expire
    /// waiting for a connection to renew it.
    pub fn pool_needed(&self, registry: &Registry) -> u32 {
        let runners = self.runtime.max_concurrent_runners as u32;
        let per_runner = if registry.any_overlaps() { 2 } else { 1 };
        runners * per_runner + 2
    }

    /// The `Host` names answered in trusted-network mode besides the
    /// loopback ones: the admin listen address (unless it is a wildcard)
    /// and [`HostConfig::admin_allowed_hosts`], each checked (AUTH-3).
    fn allowed_hosts(&self) -> Result<Vec<String>, HostError> {
        let listen = self.admin_listen.ip();
        let mut hosts: Vec<String> = Vec::new();
        if !listen.is_unspecified() {
            hosts.push(listen.to_string());
        }
        for host in &self.admin_allowed_hosts {
            let name =
                crate::admin::allowed_host(host).map_err(|e| HostError::Config(e.to_string()))?;
            hosts.push(name);
        }
        Ok(hosts)
    }

    /// AUTH-3: trusted-network mode listens only on loopback unless
    /// [`HostConfig::admin_allow_remote_trusted`] says otherwise, and then
    /// says so at startup.
    #[cfg(feature = "http")]
    fn check_trusted_listen(&self) -> Result<(), HostError> {
        if !matches!(self.admin_auth, AuthConfig::TrustedNetwork) {
            return Ok(());
        }
        let listen = self.admin_listen;
        if listen.ip().is_loopback() {
            return Ok(());
        }
        if !self.admin_allow_remote_trusted {
            return Err(HostError::Config(format!(
                "trusted-network mode listens only on loopback, and {} is not: anyone who \
                 reaches it would hold every capability (to accept that, pass \
                 --admin-allow-remote-trusted)",
                listen.ip()
            )));
        }
        tracing::warn!(
            event = "admin_trusted_remote",
            admin = %listen,
            "the admin API is served without authentication on a non-loopback address: \
             everyone who can reach it holds every capability"
        );
        Ok(())
    }

    /// Check the configuration and the application's definitions before
    /// touching anything; the pool size in force.
    fn validate(&self, registry: &Registry) -> Result<u32, HostError> {
        self.engine.validate()?;
        self.health
            .validate()
            .map_err(|e| HostError::Config(e.to_string()))?;
        self.runtime
            .validate(self.engine.lease_ttl)
            .map_err(|e| HostError::Config(e.to_string()))?;
        self.notify
            .validate()
            .map_err(|e| HostError::Config(e.to_string()))?;
        self.latency
            .validate()
            .map_err(|e| HostError::Config(e.to_string()))?;
        if self.pool_idle_timeout < Duration::from_secs(1) {
            return Err(HostError::Config(
                "pool_idle_timeout must be at least 1 s".into(),
            ));
        }
        if self
            .idle_listener_close
            .is_some_and(|d| d < Duration::from_secs(1))
        {
            return Err(HostError::Config(
                "idle_listener_close must be at least 1 s".into(),
            ));
        }
        let needed = self.pool_needed(registry);
        match self.pool_size {
            // Room for the admin API and the application's own handlers
            // on top of what the runtime needs.
            None => Ok(needed + 4),
            Some(pool) if pool < needed => Err(HostError::PoolTooSmall {
                pool,
                needed,
                runners: self.runtime.max_concurrent_runners,
            }),
            Some(pool) => Ok(pool),
        }
    }
}

/// The runtime embedded in a service, without listeners: the engine, the
/// actor runtime, the readiness gate, automatic starts (retried in the
/// background after a passing failure) and the wake-up listener.
///
/// Call [`Embedded::stop`] to drain. Dropped without it (for example when
/// the service returns an error with `?` after the start), it detaches:
/// the runtime works on while the actix system runs and ends with it,
/// without a panic; its claims are then taken over once their leases
/// expire (EMB-9).
pub struct Embedded {
    /// The connection pool the engine and the admin API share.
    pub pool: Pool,
    /// The engine: actions, reads, [`Engine::wait_for`] and events.
    pub engine: Engine,
    /// The handle of the actor runtime that claims and runs backfills.
    pub runtime: RuntimeHandle<Engine>,
    /// The readiness gate (section 8 of the contract), evaluated from
    /// PostgreSQL on every read.
    pub readiness: Readiness,
    /// The required (gating) IDs.
    pub required: Vec<String>,
    automatic: bool,
    auth: AuthConfig,
    /// The `Host` names answered in trusted-network mode (AUTH-3).
    allowed_hosts: Vec<String>,
    /// Wakes the retry of failed automatic starts before its next turn.
    retry_now: Arc<tokio::sync::Notify>,
    tasks: Vec<actix_rt::task::JoinHandle<()>>,
}

impl Embedded {
    /// Start in the contract's order. Must run inside an actix system
    /// (`actix_web::main`, `actix_rt::System`); from plain tokio, see
    /// [`Embedded::spawn`].
    pub async fn start(config: HostConfig, app: &dyn Application) -> Result<Self, HostError> {
        Self::start_with(config, app, None).await
    }

    /// [`Embedded::start`] whose engine takes its claims on `budget`'s
    /// permits as the named database (FLT-2), attached before the runtime
    /// can claim anything.
    ///
    /// A fleet's member logs everything it does, from its migrations to
    /// its runners' batches and its background tasks, inside a
    /// `fleet_member` span whose `database` field names it (FLT-1), so an
    /// operator reading one log of many databases can tell them apart.
    pub(crate) async fn start_with(
        config: HostConfig,
        app: &dyn Application,
        budget: Option<(Arc<crate::throttle::budget::RunnerBudget>, String)>,
    ) -> Result<Self, HostError> {
        // A span's level only decides whether a filter keeps it, and this
        // one must be kept whenever any event inside it is: at `info` a
        // filter set to `warn` would drop it, and the warnings of a
        // database would lose their name.
        let span = match &budget {
            Some((_, database)) => tracing::error_span!("fleet_member", database = %database),
            None => tracing::Span::none(),
        };
        Self::start_in_span(config, app, budget)
            .instrument(span)
            .await
    }

    /// [`Embedded::start_with`]'s work, inside its span.
    async fn start_in_span(
        config: HostConfig,
        app: &dyn Application,
        budget: Option<(Arc<crate::throttle::budget::RunnerBudget>, String)>,
    ) -> Result<Self, HostError> {
        let registry = app.registry()?;
        registry.check_dependencies()?;
        let pool_size = config.validate(&registry)?;
        let allowed_hosts = config.allowed_hosts()?;
        let required = match &config.required {
            Some(ids) => ids.clone(),
            None => registry.ids(),
        };
        if let Some(id) = required.iter().find(|id| !registry.contains(id)) {
            return Err(HostError::UnknownRequired(id.clone()));
        }
        // Before anything else reaches the database: behind a pooler that
        // loses prepared statements the migrations, the claims and the
        // batches would fail one by one with a cause far from this one.
        // A server that never answered is reported at once; any other
        // error of the probe itself (no server, a refused login) is left
        // to the steps below, which report it as they always have.
        let probe = tokio::time::timeout(
            store::CONNECT_TIMEOUT * 2,
            store::pooler_probe(&config.database_url),
        );
        match probe.await {
            Ok(Ok(Some(finding))) => return Err(HostError::Pooler(finding.message())),
            Ok(Err(StoreError::Pool(why))) if why == store::NO_ANSWER => {
                return Err(StoreError::Pool(why).into())
            }
            _ => {}
        }
        if config.migrate {
            store::run_migrations(&config.database_url).await?;
            app.migrate(&config.database_url)
                .await
                .map_err(|e| HostError::Migrate(crate::repair::bounded(e.to_string())))?;
        }
        let pool: Pool =
            store::build_pool_shrinking(&config.database_url, pool_size, config.pool_idle_timeout)
                .await?;
        {
            let mut conn = pool.get().await.map_err(StoreError::from)?;
            app.check_schema(&mut conn)
                .await
                .map_err(|e| HostError::Schema(crate::repair::bounded(e.to_string())))?;
        }
        let engine = Engine::new(pool.clone(), registry, config.engine.clone())?;
        if let Some((budget, database)) = budget {
            // Before the first claim: a cap an operator set for the fleet
            // holds from this database's first claim on (FLT-2).
            let mut conn = pool.get().await.map_err(StoreError::from)?;
            budget.adopt_stored(&mut conn).await?;
            drop(conn);
            engine.attach_budget(budget, database);
        }
        engine.register().await?;
        // One reading before the first claim, so no batch starts on a
        // server that is already past a limit.
        let monitor = Arc::new(Monitor::new(
            pool.clone(),
            config.health.clone(),
            engine.registry().tables(),
            app.health_check(),
        ));
        monitor.run_once().await;
        engine.attach_health(monitor.clone());
        // The probe connects only while a budgeted claim asks for it.
        let latency = Arc::new(LatencyMonitor::new(
            config.database_url.clone(),
            config.latency.clone(),
        ));
        engine.attach_latency(latency.clone());
        tracing::info!(
            event = "registered",
            definitions = engine.registry().len(),
            automatic = config.auto_backfills,
            required = %crate::logging::Json(&required),
        );
        // Subscribed before the first start or claim, so no change this
        // process makes goes unqueued on a fleet's first start.
        let sender = if config.notify.targets.is_empty() {
            None
        } else {
            let sender = Sender::new(pool.clone(), config.database_url.clone(), config.notify)
                .map_err(|e| HostError::Config(e.to_string()))?;
            if let Err(e) = sender.subscribe().await {
                tracing::warn!(event = "notify_subscribe_failed", error = %e);
            }
            Some(Arc::new(sender))
        };
        let mut retry_starts = Vec::new();
        if config.auto_backfills {
            for id in &required {
                if auto_start::auto_start(&engine, id).await == auto_start::Started::RetryLater {
                    retry_starts.push(id.clone());
                }
            }
        }
        let runtime = RuntimeHandle::start(Arc::new(engine.clone()), config.runtime.clone())
            .map_err(|e| HostError::Config(e.to_string()))?;
        let retry_now = Arc::new(tokio::sync::Notify::new());
        let mut tasks = vec![
            actix_rt::spawn(monitor.run().in_current_span()),
            actix_rt::spawn(latency.run().in_current_span()),
            actix_rt::spawn(
                auto_start::retry(
                    engine.clone(),
                    runtime.clone(),
                    retry_starts,
                    config.runtime.poll_interval,
                    retry_now.clone(),
                )
                .in_current_span(),
            ),
            wake::spawn_listener(
                config.database_url.clone(),
                runtime.clone(),
                engine.clone(),
                config.idle_listener_close,
            ),
        ];
        if let Some(sender) = sender {
            tasks.push(actix_rt::spawn(sender.run().in_current_span()));
        }
        let readiness = Readiness::new(pool.clone(), config.auto_backfills, required.clone());
        Ok(Self {
            pool,
            engine,
            runtime,
            readiness,
            required,
            automatic: config.auto_backfills,
            auth: config.admin_auth,
            allowed_hosts,
            retry_now,
            tasks,
        })
    }

    /// Try the failed automatic starts that are retried (EMB-8) now,
    /// instead of at their next turn (within 30 s): for a service that has
    /// just created what they lacked (a table, a grant). A hint, like a
    /// wake-up: with nothing left to retry it does nothing.
    pub fn retry_auto_starts(&self) {
        self.retry_now.notify_one();
    }

    /// The admin service over this runtime (authorization, audit,
    /// idempotent actions); its actions wake the supervisor.
    pub fn admin(&self) -> Admin {
        let runtime = self.runtime.clone();
        Admin::new(
            self.engine.clone(),
            AdminConfig {
                auth: self.auth.clone(),
                auto_backfills: self.automatic,
                required: self.required.iter().cloned().collect(),
            },
        )
        .with_allowed_hosts(self.allowed_hosts.iter().cloned())
        .with_metrics(self.runtime.metrics().clone())
        .with_waker(Arc::new(move |_id: &str| runtime.wake()))
    }

    /// Drain the runtime: in-flight batches end, claims are released so
    /// another process continues at once; bounded by the shutdown grace.
    pub async fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
        self.runtime.shutdown().await;
    }
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
