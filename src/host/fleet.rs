//! One runtime over a fleet of databases (FLT-1): shards, or one database
//! per tenant, each still the only authority for its own rows.
//!
//! A [`Fleet`] runs one [`Embedded`] per database of its
//! [`DatabaseSource`], with the same [`Application`]: each database gets
//! its own pool, migrations, schema check, registration, automatic starts,
//! actor runtime, health monitor and readiness, exactly as a single-database
//! host does, so nothing of the contract changes inside one database. A
//! backfill is named by (database, stable ID). The fleet adds no
//! coordinator and no table: it only starts, watches and stops the
//! members.
//!
//! A database that cannot be started (it does not exist yet, refuses
//! connections, fails its schema check) or stops answering is marked
//! `unavailable` with the reason, and the refresh loop retries it; the
//! other databases go on. The loop ([`Fleet::run_once`], every
//! [`FleetConfig::refresh_interval`]) also lists the source again, so
//! databases added at run time join and removed ones are drained.

use super::{AppError, Application, Embedded, HostConfig, HostError};
use crate::admin::{
    Admin, Availability, DatabaseStatus, FleetAdmin, FleetMember, FleetMembers, FleetReadiness,
};
use crate::engine::Engine;
use crate::failure::bounded;
use crate::readiness::ReadinessReport;
use crate::throttle::budget::RunnerBudget;
use chrono::{DateTime, Utc};
use futures_util::future::join_all;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// One database of a fleet: the name operators and the admin API use for
/// it, and its URL. The URL may carry a password, so it is never logged,
/// shown or put in an error; `Debug` shows the name only.
#[derive(Clone, PartialEq, Eq)]
pub struct Database {
    /// 1 to 63 characters of `[a-z0-9._-]`, unique in the fleet.
    pub name: String,
    /// A `postgres://` or `postgresql://` URL.
    pub url: String,
}

impl Database {
    /// The database `name` at `url`.
    pub fn new(name: impl Into<String>, url: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            url: url.into(),
        }
    }
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Database")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// Where a fleet's databases come from: a static list (`Vec<Database>`)
/// or the host's own callback, asked at startup and again on every
/// refresh, so tenants can be added and removed at run time.
#[async_trait::async_trait]
pub trait DatabaseSource: Send + Sync + 'static {
    /// The databases the fleet serves now. An error at startup stops it;
    /// later, the fleet logs it and keeps the databases it has.
    async fn databases(&self) -> Result<Vec<Database>, AppError>;
}

#[async_trait::async_trait]
impl DatabaseSource for Vec<Database> {
    async fn databases(&self) -> Result<Vec<Database>, AppError> {
        Ok(self.clone())
    }
}

/// A fleet's settings.
#[derive(Debug, Clone)]
pub struct FleetConfig {
    /// What every database's runtime runs with (migrations, automatic
    /// mode, required set, engine, runtime, health, webhooks); its
    /// `database_url` is replaced by each database's, and its listeners
    /// are not used. Mind the pool: each database has its own
    /// ([`HostConfig::pool_size`]), so a fleet of D databases may hold D
    /// times its connections on the server.
    pub host: HostConfig,
    /// How often the fleet lists its source again, probes every database
    /// (one read of its readiness; a database read ready is not read
    /// again while its claim polls are answered, for up to eleven
    /// refreshes), and retries the unavailable ones. Default 5 s; at
    /// least 100 ms.
    pub refresh_interval: Duration,
    /// The most runners this process runs at once over all its databases
    /// (FLT-2); each database's own cap is
    /// `host.runtime.max_concurrent_runners`. While runners are scarce, a
    /// database with higher-priority work ([`crate::Repair::priority`])
    /// waiting gets the next one first. `None`: no cap beyond the
    /// databases' own.
    pub max_runners: Option<usize>,
    /// Rollout caps at start, by repair ID: the most databases that run
    /// the repair at once ([`Fleet::set_rollout`] changes them live).
    pub rollout: BTreeMap<String, u32>,
}

/// How long a fleet's database keeps its wake-up listener after its last
/// claim, unless the host's configuration says otherwise
/// ([`HostConfig::idle_listener_close`]).
pub const IDLE_LISTENER_CLOSE: Duration = Duration::from_secs(30);

impl FleetConfig {
    /// Defaults around `host`; a database closes its wake-up listener
    /// [`IDLE_LISTENER_CLOSE`] after its last claim unless `host` sets
    /// its own time.
    pub fn new(mut host: HostConfig) -> Self {
        host.idle_listener_close = host.idle_listener_close.or(Some(IDLE_LISTENER_CLOSE));
        Self {
            host,
            refresh_interval: Duration::from_secs(5),
            max_runners: None,
            rollout: BTreeMap::new(),
        }
    }

    /// Check the fleet's own settings.
    pub fn validate(&self) -> Result<(), FleetError> {
        if self.refresh_interval < Duration::from_millis(100) {
            return Err(FleetError::Config(
                "refresh_interval must be at least 100 ms".into(),
            ));
        }
        if self.max_runners == Some(0) {
            return Err(FleetError::Config("max_runners must be at least 1".into()));
        }
        if let Some(id) = self
            .rollout
            .iter()
            .find(|(_, cap)| **cap == 0)
            .map(|(id, _)| id)
        {
            return Err(FleetError::Config(format!(
                "the rollout cap of {id:?} must be at least 1"
            )));
        }
        Ok(())
    }
}

/// Why a fleet cannot start, or an action on it is refused.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// A setting of the fleet itself is out of range.
    #[error("invalid fleet configuration: {0}")]
    Config(String),
    /// The host configuration or the application's definitions are
    /// unusable; the same for every database, so checked once.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The source could not list the databases at startup.
    #[error("the database source failed: {0}")]
    Source(String),
    /// A database entry is malformed; named by its name, or its place in
    /// the list when the name is what is wrong.
    #[error("database entry {entry}: {reason}")]
    InvalidEntry {
        /// The entry's name, or `#<index>` when the name is invalid.
        entry: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// Two entries have the same name.
    #[error("database {0:?} is listed twice")]
    Duplicate(String),
    /// No database of the fleet has this name.
    #[error("unknown database {0:?}")]
    UnknownDatabase(String),
}

/// What readers see of one database.
#[derive(Clone)]
struct View {
    status: DatabaseStatus,
    /// Its engine and admin service while its runtime runs.
    served: Option<(Engine, Admin)>,
}

/// One database's place in the fleet: its runtime while it has one.
struct Member {
    url: String,
    embedded: Option<Embedded>,
    /// Its last readiness reading while that said ready, for the
    /// refreshes that need not ask again.
    settled: Option<Settled>,
}

/// A ready database's last reading. Ready means every backfill its
/// readiness waits for is `completed`, which never changes again
/// (REG-5), so from then on its readiness can change only by the
/// database no longer answering; while its claim polls keep being
/// answered, a refresh reuses the reading instead of reading again, an
/// idle database's refresh so costing it no query (FLT-1). Every
/// [`SETTLED_REFRESHES`]th refresh reads again all the same.
struct Settled {
    report: ReadinessReport,
    /// [`Engine::polls_answered`] when it was taken or last reused.
    polls_answered: u64,
    /// The refreshes that reused it since it was read.
    reused: u32,
}

/// How many refreshes in a row may reuse a ready database's reading
/// (a minute at the default refresh interval).
const SETTLED_REFRESHES: u32 = 11;

impl Settled {
    /// The readiness of `embedded`'s runtime: the `settled` reading when
    /// PostgreSQL answered a claim poll since the last refresh, else a
    /// reading from PostgreSQL, kept in `settled` when it says ready.
    async fn readiness(settled: &mut Option<Settled>, embedded: &Embedded) -> ReadinessReport {
        let answered = embedded.engine.polls_answered();
        if let Some(settled) = settled {
            if settled.polls_answered < answered && settled.reused < SETTLED_REFRESHES {
                settled.polls_answered = answered;
                settled.reused += 1;
                return settled.report.clone();
            }
        }
        let report = embedded.readiness.evaluate().await;
        *settled = report.ready.then(|| Settled {
            report: report.clone(),
            polls_answered: answered,
            reused: 0,
        });
        report
    }
}

/// One runtime over many databases (FLT-1). Must run inside an actix
/// system, like [`Embedded`]. Call [`Fleet::stop`] to drain every
/// database's runtime.
pub struct Fleet {
    shared: Arc<Shared>,
    task: Option<actix_rt::task::JoinHandle<()>>,
    /// The listeners opened by [`Fleet::listen`], stopped with the fleet.
    #[cfg(feature = "http")]
    servers: Vec<actix_web::dev::ServerHandle>,
}

/// What the refresh loop and the fleet's readers share.
struct Shared {
    config: FleetConfig,
    app: Arc<dyn Application>,
    source: Arc<dyn DatabaseSource>,
    /// The process's runners over every database (FLT-2).
    budget: Arc<RunnerBudget>,
    /// The members; only the refresh loop and `stop` change it, each
    /// holding it across their awaits so they never overlap.
    members: tokio::sync::Mutex<BTreeMap<String, Member>>,
    /// What readers see: a status and, while it runs, the engine of every
    /// database. Locked only to copy or replace entries, never across an
    /// await.
    views: parking_lot::Mutex<BTreeMap<String, View>>,
    /// The refreshes run so far, which pace the reading of the stored
    /// rollout caps.
    refreshes: AtomicU32,
}

impl Fleet {
    /// Check the configuration and the application's definitions once,
    /// list the databases (a malformed or duplicated entry is an error
    /// naming it), start every database's runtime (one that fails is
    /// marked unavailable and retried, not an error), then refresh every
    /// [`FleetConfig::refresh_interval`].
    pub async fn start(
        config: FleetConfig,
        source: impl DatabaseSource,
        app: impl Application,
    ) -> Result<Self, FleetError> {
        config.validate()?;
        let registry = app.registry().map_err(HostError::from)?;
        registry.check_dependencies().map_err(HostError::from)?;
        config.host.validate(&registry)?;
        let databases = source
            .databases()
            .await
            .map_err(|e| FleetError::Source(bounded(e.to_string())))?;
        check_entries(&databases)?;
        // A want outlives a few of a database's claim polls, so a waiting
        // database keeps its place between polls and loses it soon after
        // it stops asking.
        let budget = RunnerBudget::new(
            config.max_runners.unwrap_or(usize::MAX),
            config.host.runtime.poll_interval * 4,
        );
        for (id, cap) in &config.rollout {
            budget.set_rollout(id, Some(*cap));
        }
        let shared = Arc::new(Shared {
            config,
            budget,
            app: Arc::new(app),
            source: Arc::new(source),
            members: tokio::sync::Mutex::new(BTreeMap::new()),
            views: parking_lot::Mutex::new(BTreeMap::new()),
            refreshes: AtomicU32::new(0),
        });
        shared.join(databases).await;
        let loop_shared = shared.clone();
        let task = actix_rt::spawn(async move {
            let mut tick = actix_rt::time::interval(loop_shared.config.refresh_interval);
            tick.tick().await;
            loop {
                tick.tick().await;
                loop_shared.run_once().await;
            }
        });
        Ok(Self {
            shared,
            task: Some(task),
            #[cfg(feature = "http")]
            servers: Vec::new(),
        })
    }

    /// One refresh: list the source again (new databases join, removed
    /// ones are drained), retry the unavailable databases and probe the
    /// others. The loop calls it; a test may call it to refresh now.
    pub async fn run_once(&self) {
        self.shared.run_once().await;
    }

    /// Every database's status, by name.
    pub fn databases(&self) -> Vec<DatabaseStatus> {
        self.shared
            .views
            .lock()
            .values()
            .map(|view| view.status.clone())
            .collect()
    }

    /// The status of the database `name`.
    pub fn database(&self, name: &str) -> Result<DatabaseStatus, FleetError> {
        self.shared
            .views
            .lock()
            .get(name)
            .map(|view| view.status.clone())
            .ok_or_else(|| FleetError::UnknownDatabase(name.to_string()))
    }

    /// The engine of the database `name` while its runtime runs: its
    /// actions, reads and [`Engine::wait_for`]. `Ok(None)` while it is
    /// unavailable and has never started.
    pub fn engine(&self, name: &str) -> Result<Option<Engine>, FleetError> {
        self.shared
            .views
            .lock()
            .get(name)
            .map(|view| view.served.as_ref().map(|(engine, _)| engine.clone()))
            .ok_or_else(|| FleetError::UnknownDatabase(name.to_string()))
    }

    /// Readiness of the whole fleet, or of the database `name` alone, as
    /// of the last probe: ready when every database in question is
    /// available and ready.
    pub fn readiness(&self, name: Option<&str>) -> Result<FleetReadiness, FleetError> {
        let statuses = match name {
            Some(name) => vec![self.database(name)?],
            None => self.databases(),
        };
        Ok(FleetReadiness::of(statuses))
    }

    /// Cap the databases that run repair `id` at once (FLT-2), or lift
    /// the cap with `None`; applies to the next claim, and claims held now
    /// run on. The cap is this process's: unlike one set through the
    /// fleet's admin API (`PUT /admin/fleet/rollout/{id}`), which every
    /// database keeps, it is not stored, and a restart starts from
    /// [`FleetConfig::rollout`] and the stored caps.
    pub fn set_rollout(&self, id: &str, max_databases: Option<u32>) -> Result<(), FleetError> {
        if max_databases == Some(0) {
            return Err(FleetError::Config(format!(
                "the rollout cap of {:?} must be at least 1",
                bounded(id)
            )));
        }
        self.shared
            .budget
            .set_rollout_at(id, max_databases, Utc::now());
        tracing::info!(
            event = "fleet_rollout_set",
            repair = %bounded(id),
            max_databases = max_databases.map_or(-1, i64::from),
            actor = "host",
        );
        Ok(())
    }

    /// The rollout cap in force for repair `id`, if any: configured, set
    /// live, or taken from the databases as they joined (FLT-2).
    pub fn rollout(&self, id: &str) -> Option<u32> {
        self.shared.budget.rollout(id)
    }

    /// The runners the fleet's databases hold now, against
    /// [`FleetConfig::max_runners`].
    pub fn runners(&self) -> usize {
        self.shared.budget.held()
    }

    /// Databases that found work but wait for a runner of the budget now.
    pub fn waiting(&self) -> usize {
        self.shared.budget.waiting()
    }

    /// The fleet's admin service (FLT-6): every database's backfills,
    /// the aggregates, and actions on one database or all, each
    /// authorized and audited by the database it reaches.
    pub fn admin(&self) -> FleetAdmin {
        FleetAdmin::new(
            self.shared.clone(),
            self.shared.config.host.admin_auth.clone(),
        )
    }

    /// Serve the fleet's HTTP boundary on `addr` (feature `http`): `GET
    /// /admin/fleet`, `GET /admin/fleet/backfills`, `POST
    /// /admin/fleet/backfills/{id}/{action}`, `GET /readyz` (with
    /// `?database=` for one database), `GET /livez`, `GET /metrics`, `GET
    /// /openapi.json`, and the web client at `/ui`, which shows the fleet
    /// page there.
    /// Returns the address bound (port 0 asks for a free one); the
    /// listener stops with the fleet.
    #[cfg(feature = "http")]
    pub fn listen(&mut self, addr: std::net::SocketAddr) -> std::io::Result<std::net::SocketAddr> {
        let routes = crate::http::fleet::FleetRoutes::new(self.admin());
        let grace = self
            .shared
            .config
            .host
            .runtime
            .shutdown_grace
            .as_secs()
            .max(1);
        let server = actix_web::HttpServer::new(move || {
            let routes = routes.clone();
            // The web client is served here too: it asks `/admin/fleet`
            // to find out that it talks to a fleet and shows the fleet page.
            actix_web::App::new()
                .wrap(crate::http::security_headers())
                .configure(move |cfg| routes.configure(cfg))
                .configure(crate::http::ui::configure)
        })
        .disable_signals()
        .shutdown_timeout(grace)
        .workers(1)
        .bind(addr)?;
        let bound = server.addrs().first().copied().unwrap_or(addr);
        let server = server.run();
        self.servers.push(server.handle());
        actix_rt::spawn(server);
        Ok(bound)
    }

    /// Stop refreshing and the listeners, and drain every database's
    /// runtime, together.
    pub async fn stop(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        #[cfg(feature = "http")]
        join_all(self.servers.iter().map(|server| server.stop(true))).await;
        let members = std::mem::take(&mut *self.shared.members.lock().await);
        join_all(
            members
                .into_values()
                .filter_map(|m| m.embedded)
                .map(Embedded::stop),
        )
        .await;
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

impl Shared {
    async fn run_once(&self) {
        let listed = match self.source.databases().await {
            Ok(listed) => Some(listed),
            Err(e) => {
                tracing::warn!(event = "fleet_source_failed", error = %bounded(e.to_string()));
                None
            }
        };
        if let Some(listed) = listed {
            self.follow(listed).await;
        }
        // The running databases are probed under the lock (each probe is
        // bounded by its pool's checkout timeout); the unavailable ones are
        // started outside it, so a database that never answers holds no
        // lock a join, a drain or a stop needs while its connection
        // attempts run out.
        let to_start: Vec<(String, String)> = {
            let mut members = self.members.lock().await;
            let probes = members.iter_mut().filter_map(|(name, member)| {
                let embedded = member.embedded.as_ref()?;
                let settled = &mut member.settled;
                Some(async move {
                    let report = Settled::readiness(settled, embedded).await;
                    (name.clone(), Probe::Report(report))
                })
            });
            for (name, probe) in join_all(probes).await {
                let served = members
                    .get(&name)
                    .and_then(|m| m.embedded.as_ref().map(served));
                self.record(&name, probe, served);
            }
            let refresh = self.refreshes.fetch_add(1, Ordering::Relaxed);
            if refresh % (SETTLED_REFRESHES + 1) == SETTLED_REFRESHES {
                self.adopt_rollouts(&members).await;
            }
            members
                .iter()
                .filter(|(_, m)| m.embedded.is_none())
                .map(|(name, m)| (name.clone(), m.url.clone()))
                .collect()
        };
        let started = join_all(to_start.into_iter().map(|(name, url)| async move {
            let outcome = self.start_member(&name, &url).await;
            (name, outcome)
        }))
        .await;
        let mut members = self.members.lock().await;
        for (name, outcome) in started {
            match (members.get_mut(&name), outcome) {
                // Still listed and still not running: it joins now.
                (Some(member), Ok(embedded)) if member.embedded.is_none() => {
                    let report = embedded.readiness.evaluate().await;
                    let served = Some(served(&embedded));
                    member.embedded = Some(embedded);
                    self.record(&name, Probe::Started(report), served);
                }
                // Drained meanwhile: the runtime just started goes again.
                (_, Ok(embedded)) => embedded.stop().await,
                (Some(_), Err(reason)) => self.record(&name, Probe::Failed(reason), None),
                (None, Err(_)) => {}
            }
        }
    }

    /// Take the newer rollout caps another process of the fleet stored
    /// (FLT-2). Every database the fleet serves keeps every cap set
    /// through it, so one database answering is enough: the first that
    /// does. Every twelfth refresh, the rhythm at which a ready database
    /// is read again, so an idle fleet pays one statement a minute for
    /// it, not one per database.
    async fn adopt_rollouts(&self, members: &BTreeMap<String, Member>) {
        for (name, member) in members {
            let Some(embedded) = &member.embedded else {
                continue;
            };
            let adopted = match embedded.pool.get().await {
                Ok(mut conn) => self.budget.adopt_stored(&mut conn).await.is_ok(),
                Err(_) => false,
            };
            if adopted {
                return;
            }
            tracing::debug!(event = "fleet_rollout_unread", database = %name);
        }
    }

    /// Start the databases of `listed` the fleet does not serve yet, and
    /// drain those no longer listed. A malformed or duplicated entry is
    /// skipped with a log line: the fleet is running, so it cannot refuse
    /// to start.
    async fn follow(&self, listed: Vec<Database>) {
        let mut valid: BTreeMap<String, String> = BTreeMap::new();
        for (index, db) in listed.into_iter().enumerate() {
            if let Err(e) = check_entry(index, &db) {
                tracing::warn!(event = "fleet_database_skipped", error = %e);
                continue;
            }
            if valid.insert(db.name.clone(), db.url).is_some() {
                let e = FleetError::Duplicate(db.name);
                tracing::warn!(event = "fleet_database_skipped", error = %e);
            }
        }
        let gone: Vec<String> = {
            let members = self.members.lock().await;
            members
                .keys()
                .filter(|name| !valid.contains_key(*name))
                .cloned()
                .collect()
        };
        for name in gone {
            let member = self.members.lock().await.remove(&name);
            self.views.lock().remove(&name);
            if let Some(embedded) = member.and_then(|m| m.embedded) {
                embedded.stop().await;
            }
            tracing::info!(event = "fleet_database_removed", database = %name);
        }
        let new: Vec<Database> = {
            let members = self.members.lock().await;
            valid
                .into_iter()
                .filter(|(name, _)| !members.contains_key(name))
                .map(|(name, url)| Database { name, url })
                .collect()
        };
        if !new.is_empty() {
            self.join(new).await;
        }
    }

    /// Start the runtimes of `databases` together and add them.
    async fn join(&self, databases: Vec<Database>) {
        let started = join_all(databases.into_iter().map(|db| async move {
            let outcome = self.start_member(&db.name, &db.url).await;
            (db, outcome)
        }))
        .await;
        let mut members = self.members.lock().await;
        for (db, outcome) in started {
            let (embedded, probe) = match outcome {
                Ok(embedded) => {
                    let report = embedded.readiness.evaluate().await;
                    (Some(embedded), Probe::Started(report))
                }
                Err(reason) => (None, Probe::Failed(reason)),
            };
            let served = embedded.as_ref().map(served);
            members.insert(
                db.name.clone(),
                Member {
                    url: db.url,
                    embedded,
                    settled: None,
                },
            );
            self.record(&db.name, probe, served);
        }
    }

    /// Start one database's runtime; the reason, bounded, when it fails.
    async fn start_member(&self, name: &str, url: &str) -> Result<Embedded, String> {
        let mut config = self.config.host.clone();
        config.database_url = url.to_string();
        Embedded::start_with(
            config,
            self.app.as_ref(),
            Some((self.budget.clone(), name.to_string())),
        )
        .await
        .map_err(|e| {
            tracing::debug!(event = "fleet_database_start_failed", database = %name);
            bounded(redact(&e, url))
        })
    }

    /// Record a probe's outcome, logging a change of availability.
    fn record(&self, name: &str, probe: Probe, served: Option<(Engine, Admin)>) {
        let (availability, reason, ready) = match probe {
            Probe::Started(report) | Probe::Report(report) if report.database == "ok" => {
                (Availability::Available, None, Some(report.ready))
            }
            Probe::Started(_) | Probe::Report(_) => (
                Availability::Unavailable,
                Some("the database does not answer".to_string()),
                None,
            ),
            Probe::Failed(reason) => (Availability::Unavailable, Some(reason), None),
        };
        let mut views = self.views.lock();
        let previous = views.get(name).map(|v| v.status.clone());
        let since = match &previous {
            Some(p) if p.availability == availability => p.since,
            _ => Utc::now(),
        };
        if previous.as_ref().map(|p| p.availability) != Some(availability) {
            match availability {
                Availability::Available => {
                    tracing::info!(event = "fleet_database_available", database = %name)
                }
                Availability::Unavailable => tracing::warn!(
                    event = "fleet_database_unavailable",
                    database = %name,
                    reason = reason.as_deref().unwrap_or_default(),
                ),
            }
        }
        views.insert(
            name.to_string(),
            View {
                status: DatabaseStatus {
                    name: name.to_string(),
                    availability,
                    reason,
                    since,
                    ready,
                },
                served,
            },
        );
    }
}

/// A running database's engine and admin service, for readers.
fn served(embedded: &Embedded) -> (Engine, Admin) {
    (embedded.engine.clone(), embedded.admin())
}

impl FleetMembers for Shared {
    fn set_rollout(&self, id: &str, max_databases: Option<u32>, set_at: DateTime<Utc>) {
        self.budget.set_rollout_at(id, max_databases, set_at);
    }

    fn rollout(&self, id: &str) -> Option<u32> {
        self.budget.rollout(id)
    }

    fn members(&self) -> Vec<FleetMember> {
        self.views
            .lock()
            .values()
            .map(|view| FleetMember {
                status: view.status.clone(),
                admin: view.served.as_ref().map(|(_, admin)| admin.clone()),
            })
            .collect()
    }
}

/// What a refresh learned of one database.
enum Probe {
    /// Its runtime was started now; its first readiness reading.
    Started(ReadinessReport),
    /// Its running runtime's readiness reading.
    Report(ReadinessReport),
    /// Its runtime could not be started, and why.
    Failed(String),
}

/// A start failure's text without the database's URL, should the error
/// quote it.
fn redact(error: &HostError, url: &str) -> String {
    error.to_string().replace(url, "<database url>")
}

/// Check every entry and refuse duplicated names.
fn check_entries(databases: &[Database]) -> Result<(), FleetError> {
    let mut seen = std::collections::BTreeSet::new();
    for (index, db) in databases.iter().enumerate() {
        check_entry(index, db)?;
        if !seen.insert(db.name.as_str()) {
            return Err(FleetError::Duplicate(db.name.clone()));
        }
    }
    Ok(())
}

/// A name of 1 to 63 characters of `[a-z0-9._-]`, and a PostgreSQL URL.
fn check_entry(index: usize, db: &Database) -> Result<(), FleetError> {
    let name_ok = !db.name.is_empty()
        && db.name.len() <= 63
        && db.name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_' || b == b'-'
        });
    if !name_ok {
        return Err(FleetError::InvalidEntry {
            entry: format!("#{index}"),
            reason: "the name must be 1 to 63 characters of [a-z0-9._-]",
        });
    }
    if !(db.url.starts_with("postgres://") || db.url.starts_with("postgresql://")) {
        return Err(FleetError::InvalidEntry {
            entry: db.name.clone(),
            reason: "the URL must start with postgres:// or postgresql://",
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flt01_malformed_and_duplicated_entries_are_named() {
        let url = "postgres://u:secret@db/x";
        assert!(check_entries(&[Database::new("a", url), Database::new("b", url)]).is_ok());
        let bad_name = check_entries(&[Database::new("a", url), Database::new("Bad Name", url)]);
        assert_eq!(
            bad_name.unwrap_err().to_string(),
            "database entry #1: the name must be 1 to 63 characters of [a-z0-9._-]"
        );
        let bad_url = check_entries(&[Database::new("t1", "mysql://u:secret@db/x")])
            .unwrap_err()
            .to_string();
        assert!(bad_url.starts_with("database entry t1: "), "{bad_url}");
        assert!(!bad_url.contains("secret"), "{bad_url}");
        let twice = check_entries(&[Database::new("t1", url), Database::new("t1", url)]);
        assert_eq!(
            twice.unwrap_err().to_string(),
            "database \"t1\" is listed twice"
        );
        assert!(!format!("{:?}", Database::new("t1", url)).contains("secret"));
    }
}
