//! One view of a fleet (FLT-6): every database's backfills, with
//! per-database and fleet-wide aggregates, and an action on one database
//! or on all of them.
//!
//! The fleet has no state of its own: each answer is assembled from every
//! database's own admin service, so each database authorizes, audits and
//! answers for itself (AUD-1 stays per database), and a database that is
//! unavailable is reported with its reason, never left out in silence.
//! Only the first check, that the caller holds the capability at all,
//! happens here, before any database is asked.

use super::{
    Admin, AdminError, BackfillView, CallerView, Capability, Reply, RequestBody, RequestMeta,
    MAX_PAGE,
};
use crate::failure::bounded;
use crate::lifecycle::{Action, State};
use chrono::{DateTime, Utc};
use diesel_async::AsyncConnection;
use futures_util::future::join_all;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;

/// Whether a database of a fleet is being served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Availability {
    /// Its runtime runs and its last probe reached it.
    Available,
    /// It could not be started, or its last probe did not reach it; the
    /// fleet retries it every refresh.
    Unavailable,
}

/// What the fleet knows of one database.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct DatabaseStatus {
    /// The database's name.
    pub name: String,
    /// Whether it is being served.
    pub availability: Availability,
    /// Why it is unavailable, bounded (never its URL); `None` when
    /// available.
    pub reason: Option<String>,
    /// When its availability last changed, by this process's clock.
    pub since: DateTime<Utc>,
    /// Its readiness (section 8 of the contract) at the last probe:
    /// `Some(true)` ready, `Some(false)` not yet (a required backfill has
    /// not completed), `None` unknown (unavailable).
    pub ready: Option<bool>,
}

/// The fleet's readiness: ready when every database in question is
/// available and ready.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct FleetReadiness {
    /// Every database in question is available and ready.
    pub ready: bool,
    /// The databases that keep it closed, with their status.
    pub not_ready: Vec<DatabaseStatus>,
}

impl FleetReadiness {
    /// Readiness over `statuses`.
    pub fn of(statuses: Vec<DatabaseStatus>) -> Self {
        let not_ready: Vec<DatabaseStatus> = statuses
            .into_iter()
            .filter(|s| s.availability != Availability::Available || s.ready != Some(true))
            .collect();
        Self {
            ready: not_ready.is_empty(),
            not_ready,
        }
    }
}

/// One database as the fleet's admin view reaches it: its status and,
/// while its runtime runs, its admin service.
#[derive(Clone)]
pub struct FleetMember {
    /// The database's status.
    pub status: DatabaseStatus,
    /// Its admin service; `None` while it has never started.
    pub admin: Option<Admin>,
}

impl FleetMember {
    /// Its admin service while it is served (its runtime runs and its
    /// last probe reached it); `None` otherwise, and then the fleet
    /// reports the database rather than asks it.
    pub fn served(&self) -> Option<&Admin> {
        match (&self.admin, self.status.availability) {
            (Some(admin), Availability::Available) => Some(admin),
            _ => None,
        }
    }

    /// Why it is not served, for a 503.
    fn unavailable(&self) -> AdminError {
        AdminError::Unavailable(
            self.status
                .reason
                .clone()
                .unwrap_or_else(|| "the database is unavailable".into()),
        )
    }
}

/// Where the fleet's admin view finds the databases (the host's fleet).
pub trait FleetMembers: Send + Sync + 'static {
    /// Every database, by name.
    fn members(&self) -> Vec<FleetMember>;

    /// Cap the databases that run repair `id` at once (FLT-2), or lift
    /// the cap (`None`), as an operator set it at `set_at`.
    fn set_rollout(&self, id: &str, max_databases: Option<u32>, set_at: DateTime<Utc>);

    /// The rollout cap of repair `id`, if any.
    fn rollout(&self, id: &str) -> Option<u32>;
}

/// `PUT /admin/fleet/rollout/{id}`: the cap a repair's rollout is held to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct Rollout {
    /// The repair's stable ID.
    #[serde(default)]
    pub id: String,
    /// The most databases that run it at once; `null`: no cap.
    pub max_databases: Option<u32>,
    /// In an answer: the databases whose audit log recorded the change
    /// (AUD-1), by name.
    #[serde(default)]
    pub audited: Vec<String>,
    /// In an answer: the databases that could not record it (down, or
    /// the write failed), by name; the cap is in force all the same.
    #[serde(default)]
    pub not_audited: Vec<String>,
}

/// How many of a database's backfills are in each state.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct StateCounts {
    /// `pending`.
    pub pending: u32,
    /// `running`.
    pub running: u32,
    /// `paused`.
    pub paused: u32,
    /// `blocked`.
    pub blocked: u32,
    /// `failed`.
    pub failed: u32,
    /// `validating`.
    pub validating: u32,
    /// `completed`.
    pub completed: u32,
}

impl StateCounts {
    fn add(&mut self, state: State) {
        let slot = match state {
            State::Pending => &mut self.pending,
            State::Running => &mut self.running,
            State::Paused => &mut self.paused,
            State::Blocked => &mut self.blocked,
            State::Failed => &mut self.failed,
            State::Validating => &mut self.validating,
            State::Completed => &mut self.completed,
        };
        *slot += 1;
    }

    fn total(&self) -> u32 {
        self.pending
            + self.running
            + self.paused
            + self.blocked
            + self.failed
            + self.validating
            + self.completed
    }
}

/// One database in the fleet's overview.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct DatabaseSummary {
    /// Its availability and readiness.
    #[serde(flatten)]
    pub status: DatabaseStatus,
    /// Its backfills by state; all zero when it could not be read.
    pub backfills: StateCounts,
    /// Rows per second over its running backfills (OBS-5); `null` when
    /// none has a known rate.
    pub rows_per_second: Option<f64>,
    /// Seconds until its slowest running backfill ends, from its rate and
    /// remaining rows, of those whose total is known; `null` otherwise.
    pub eta_seconds: Option<f64>,
    /// Why its backfills could not be read (it answered the probe but not
    /// this read), bounded; `null` otherwise.
    pub error: Option<String>,
}

/// The fleet-wide aggregates.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct FleetTotals {
    /// Databases in the fleet.
    pub databases: u32,
    /// Databases being served.
    pub available: u32,
    /// Databases unavailable (not started, or not answering).
    pub unavailable: u32,
    /// Available databases whose every backfill is `completed`.
    pub completed: u32,
    /// Databases with a backfill `running` or `validating`.
    pub running: u32,
    /// Databases with a backfill `blocked` or `failed` (an operator's
    /// turn).
    pub blocked: u32,
    /// Rows per second over the whole fleet.
    pub rows_per_second: f64,
    /// The slowest database's `eta_seconds`; `null` when none is known.
    pub eta_seconds: Option<f64>,
}

/// `GET /admin/fleet`: every database and the fleet's totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct FleetOverview {
    /// Every database, by name.
    pub databases: Vec<DatabaseSummary>,
    /// The aggregates over them.
    pub totals: FleetTotals,
}

/// One backfill of one database.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct FleetBackfill {
    /// The database that holds it.
    pub database: String,
    /// The backfill as that database's admin view shows it.
    #[serde(flatten)]
    pub view: BackfillView,
}

/// `GET /admin/fleet/backfills`: the backfills of every database (or of
/// one), and the databases that could not be read.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct FleetBackfills {
    /// Backfills by database, then ID; at most 500 per database.
    pub items: Vec<FleetBackfill>,
    /// The databases not listed, each with why.
    pub unavailable: Vec<DatabaseStatus>,
}

/// What one database answered to a fleet action.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct DatabaseReply {
    /// The database.
    pub database: String,
    /// Its HTTP status: its own answer, or 503 when it is unavailable.
    pub status: u16,
    /// Its JSON answer, or the error body.
    #[cfg_attr(feature = "http", schema(value_type = Object))]
    pub body: Value,
}

/// `POST /admin/fleet/backfills/{id}/{action}`: each database's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct FleetReply {
    /// One answer per database acted on, by name.
    pub results: Vec<DatabaseReply>,
}

/// The fleet's admin service over a host's [`FleetMembers`].
#[derive(Clone)]
pub struct FleetAdmin {
    members: Arc<dyn FleetMembers>,
    auth: super::AuthConfig,
}

impl FleetAdmin {
    /// The admin view over `members`; `auth` is the databases' own
    /// authentication, checked once here before any database is asked.
    pub fn new(members: Arc<dyn FleetMembers>, auth: super::AuthConfig) -> Self {
        Self { members, auth }
    }

    /// Refuse a caller without `capability`, before any database is asked.
    fn authorize(
        &self,
        meta: &RequestMeta<'_>,
        capability: Capability,
    ) -> Result<super::Authority, AdminError> {
        let authority = self
            .auth
            .authenticate(meta.bearer)
            .ok_or_else(|| AdminError::unauthorized(meta.bearer))?;
        if authority.can(capability) {
            Ok(authority)
        } else {
            Err(AdminError::Forbidden(capability))
        }
    }

    /// The members, only `database` when one is named (404 when unknown).
    fn chosen(&self, database: Option<&str>) -> Result<Vec<FleetMember>, AdminError> {
        let members = self.members.members();
        match database {
            None => Ok(members),
            Some(name) => {
                let one: Vec<FleetMember> = members
                    .into_iter()
                    .filter(|m| m.status.name == name)
                    .collect();
                if one.is_empty() {
                    Err(AdminError::UnknownDatabase(bounded(name)))
                } else {
                    Ok(one)
                }
            }
        }
    }

    /// Set the rollout cap of repair `id` (FLT-2); needs
    /// `backfill:operate`. A cap of 0 (it would never run), an ID that is
    /// not a stable ID or a reason header that is not one is a 400, and
    /// changes nothing. The cap lives in this process and applies to its
    /// next claims. The change is logged (`fleet_rollout_set`, with the
    /// principal) and recorded in the audit log of every database that
    /// is served (action `rollout`, with the cap and the reason): the
    /// databases are where an operator reads who changed what ran on their
    /// rows. The answer names the databases that could not record it.
    pub async fn set_rollout(
        &self,
        meta: &RequestMeta<'_>,
        id: &str,
        max_databases: Option<u32>,
    ) -> Result<Rollout, AdminError> {
        let authority = self.authorize(meta, Capability::Operate)?;
        crate::repair::validate_id(id)
            .map_err(|_| AdminError::BadRequest("the path's ID is not a stable ID".into()))?;
        if max_databases == Some(0) {
            return Err(AdminError::BadRequest(
                "max_databases must be at least 1, or null for no cap".into(),
            ));
        }
        let reason = match meta.reason {
            None => None,
            Some(raw) => super::reason::decode_reason(raw).map_err(|problem| {
                AdminError::BadRequest(format!(
                    "the {} header: {problem}",
                    super::reason::REASON_HEADER
                ))
            })?,
        };
        let set_at = Utc::now();
        self.members.set_rollout(id, max_databases, set_at);
        tracing::info!(
            event = "fleet_rollout_set",
            repair = %id,
            max_databases = max_databases.map_or(-1, i64::from),
            actor = %authority.principal(),
        );
        let detail = match max_databases {
            Some(cap) => format!("max_databases={cap}"),
            None => "max_databases=null".to_string(),
        };
        let correlation = meta.idempotency_key.or(meta.request_id);
        let members = self.members.members();
        let records = members.iter().map(|m| async {
            let recorded = match m.served() {
                Some(admin) => admin
                    .record_rollout(
                        &authority,
                        id,
                        (max_databases, set_at),
                        &detail,
                        reason.as_deref(),
                        correlation,
                    )
                    .await
                    .is_ok(),
                None => false,
            };
            (m.status.name.clone(), recorded)
        });
        let mut rollout = Rollout {
            id: id.to_string(),
            max_databases: self.members.rollout(id),
            audited: Vec::new(),
            not_audited: Vec::new(),
        };
        for (name, recorded) in join_all(records).await {
            if recorded {
                rollout.audited.push(name);
            } else {
                rollout.not_audited.push(name);
            }
        }
        Ok(rollout)
    }

    /// Who the caller is and what it may do in the fleet's databases (they
    /// share one authentication): any token the databases know, whatever
    /// its capabilities, so a client offers only what it may do (FLT-6).
    pub fn me(&self, meta: &RequestMeta<'_>) -> Result<CallerView, AdminError> {
        let authority = self
            .auth
            .authenticate(meta.bearer)
            .ok_or_else(|| AdminError::unauthorized(meta.bearer))?;
        Ok(CallerView {
            principal: authority.actor.clone(),
            authority: authority.source.to_string(),
            capabilities: authority.capability_names(),
        })
    }

    /// The admin service of database `name`, to answer a request to its
    /// own admin API through the fleet's listener (FLT-6). A caller the
    /// databases' authentication does not know is refused first (401), so
    /// the names of a fleet's databases are not told to anyone; then an
    /// unknown name is a 404 and a database that is not served a 503 with
    /// its reason. The database's own service authorizes, audits and
    /// answers the request, as on its own listener.
    pub fn member(&self, bearer: Option<&str>, name: &str) -> Result<Admin, AdminError> {
        self.auth
            .authenticate(bearer)
            .ok_or_else(|| AdminError::unauthorized(bearer))?;
        let member = self.chosen(Some(name))?.swap_remove(0);
        match member.served() {
            Some(admin) => Ok(admin.clone()),
            None => Err(member.unavailable()),
        }
    }

    /// Each served database's running backfills with their rows done and
    /// whether a throttle holds them back, read from each database now
    /// (for `/metrics`, OBS-3); a database that cannot be read is left
    /// out, as its availability says.
    pub(crate) async fn running_progress(
        &self,
    ) -> Vec<(String, Vec<crate::store::RunningProgress>)> {
        let reads = self.members.members().into_iter().filter_map(|m| {
            let admin = m.served()?.clone();
            Some(async move {
                let mut conn = admin.engine().pool().get().await.ok()?;
                let rows = crate::store::backfill_running_progress(&mut conn)
                    .await
                    .ok()?;
                Some((m.status.name, rows))
            })
        });
        futures_util::future::join_all(reads)
            .await
            .into_iter()
            .flatten()
            .collect()
    }

    /// Every database's status, as of the last probe (for `/metrics`).
    pub fn statuses(&self) -> Vec<DatabaseStatus> {
        self.members
            .members()
            .into_iter()
            .map(|m| m.status)
            .collect()
    }

    /// Readiness of the whole fleet, or of `database` alone (404 when
    /// unknown), as of the last probe. Unauthenticated, like `/readyz`.
    pub fn readiness(&self, database: Option<&str>) -> Result<FleetReadiness, AdminError> {
        let members = self.chosen(database)?;
        Ok(FleetReadiness::of(
            members.into_iter().map(|m| m.status).collect(),
        ))
    }

    /// Every database's backfills (or one database's), read from each
    /// database now; needs `backfill:read`.
    pub async fn backfills(
        &self,
        meta: &RequestMeta<'_>,
        database: Option<&str>,
    ) -> Result<FleetBackfills, AdminError> {
        self.authorize(meta, Capability::Read)?;
        let members = self.chosen(database)?;
        let pages = list_each(&members, meta).await;
        let mut out = FleetBackfills {
            items: Vec::new(),
            unavailable: Vec::new(),
        };
        for (member, page) in members.into_iter().zip(pages) {
            match page {
                Some(Ok(page)) => {
                    out.items
                        .extend(page.items.into_iter().map(|view| FleetBackfill {
                            database: member.status.name.clone(),
                            view,
                        }))
                }
                Some(Err(e)) if matches!(e.status(), 401 | 403 | 421) => return Err(e),
                Some(Err(e)) => out.unavailable.push(DatabaseStatus {
                    availability: Availability::Unavailable,
                    reason: Some(bounded(e.to_string())),
                    ready: None,
                    ..member.status
                }),
                None => out.unavailable.push(member.status),
            }
        }
        Ok(out)
    }

    /// Every database with its backfills by state, rates and ETA, and the
    /// fleet's totals; needs `backfill:read`.
    pub async fn overview(&self, meta: &RequestMeta<'_>) -> Result<FleetOverview, AdminError> {
        self.authorize(meta, Capability::Read)?;
        let members = self.members.members();
        let pages = list_each(&members, meta).await;
        let mut totals = FleetTotals::default();
        let mut databases = Vec::new();
        for (member, page) in members.into_iter().zip(pages) {
            let summary = summarize(member.status, page);
            totals.add(&summary);
            databases.push(summary);
        }
        Ok(FleetOverview { databases, totals })
    }

    /// `action` on the backfill `id` in every database (or in one): one
    /// request to each database's own admin service, which authorizes,
    /// audits and answers it in that database, with the same idempotency
    /// key, so a retry of the whole request replays every answer (ADM-4).
    /// An unavailable database answers 503; it is never skipped.
    pub async fn act(
        &self,
        meta: &RequestMeta<'_>,
        database: Option<&str>,
        id: &str,
        action: Action,
    ) -> Result<FleetReply, AdminError> {
        self.authorize(meta, Capability::Operate)?;
        let members = self.chosen(database)?;
        Ok(each_member(
            members,
            |admin| async move { admin.act(meta, id, action).await },
        )
        .await)
    }

    /// A live settings change (THR-4) of the backfill `id` in every
    /// database (or in one), as [`FleetAdmin::act`] sends an action: each
    /// database's own admin service applies, audits and answers the same
    /// JSON merge patch under the same idempotency key, and refuses it on
    /// its own terms (422 naming the field, 409 when completed).
    pub async fn update_settings(
        &self,
        meta: &RequestMeta<'_>,
        database: Option<&str>,
        id: &str,
        body: RequestBody<'_>,
    ) -> Result<FleetReply, AdminError> {
        self.authorize(meta, Capability::Operate)?;
        let members = self.chosen(database)?;
        Ok(each_member(members, |admin| async move {
            admin.update_settings(meta, id, body).await
        })
        .await)
    }
}

/// Ask every member at once with `call`, and gather each database's
/// status and body by name; an unavailable database answers 503 with its
/// reason, and is never skipped.
async fn each_member<F, Fut>(members: Vec<FleetMember>, call: F) -> FleetReply
where
    F: Fn(Admin) -> Fut,
    Fut: std::future::Future<Output = Result<Reply, AdminError>>,
{
    let replies = join_all(members.iter().map(|m| {
        let admin = m.served().map(|admin| call(admin.clone()));
        async move {
            match admin {
                Some(reply) => Some(reply.await),
                None => None,
            }
        }
    }))
    .await;
    let results = members
        .into_iter()
        .zip(replies)
        .map(|(member, reply)| {
            let (status, body) = match reply {
                Some(Ok(Reply { status, body })) => (status, body),
                Some(Err(e)) => (
                    e.status(),
                    serde_json::to_value(e.body()).unwrap_or_default(),
                ),
                None => {
                    let e = member.unavailable();
                    (
                        e.status(),
                        serde_json::to_value(e.body()).unwrap_or_default(),
                    )
                }
            };
            DatabaseReply {
                database: member.status.name,
                status,
                body,
            }
        })
        .collect();
    FleetReply { results }
}

/// Each member's first page of backfills (at most [`MAX_PAGE`]), read
/// from every available database at once; `None` for a database that
/// is not available, which is reported rather than asked.
async fn list_each(
    members: &[FleetMember],
    meta: &RequestMeta<'_>,
) -> Vec<Option<Result<super::BackfillPage, AdminError>>> {
    join_all(members.iter().map(|m| async move {
        match m.served() {
            Some(admin) => Some(admin.list(meta, None, Some(MAX_PAGE)).await),
            None => None,
        }
    }))
    .await
}

/// One database's summary from its status and, when it was asked, its
/// list of backfills.
fn summarize(
    status: DatabaseStatus,
    page: Option<Result<super::BackfillPage, AdminError>>,
) -> DatabaseSummary {
    let mut summary = DatabaseSummary {
        status,
        backfills: StateCounts::default(),
        rows_per_second: None,
        eta_seconds: None,
        error: None,
    };
    match page {
        Some(Ok(page)) => {
            for view in &page.items {
                summary.backfills.add(view.state);
                if !matches!(view.state, State::Running | State::Validating) {
                    continue;
                }
                let Some(rate) = view.progress.rows_per_second.filter(|r| *r > 0.0) else {
                    continue;
                };
                summary.rows_per_second = Some(summary.rows_per_second.unwrap_or(0.0) + rate);
                if let Some(total) = view.progress.total_rows {
                    let left = (total - view.progress.rows_done).max(0) as f64 / rate;
                    summary.eta_seconds = Some(summary.eta_seconds.map_or(left, |e| e.max(left)));
                }
            }
        }
        Some(Err(e)) => summary.error = Some(bounded(e.to_string())),
        None => {}
    }
    summary
}

impl FleetTotals {
    fn add(&mut self, db: &DatabaseSummary) {
        self.databases += 1;
        match db.status.availability {
            Availability::Available => self.available += 1,
            Availability::Unavailable => self.unavailable += 1,
        }
        let counts = &db.backfills;
        if db.status.availability == Availability::Available
            && db.error.is_none()
            && counts.total() > 0
            && counts.completed == counts.total()
        {
            self.completed += 1;
        }
        if counts.running + counts.validating > 0 {
            self.running += 1;
        }
        if counts.blocked + counts.failed > 0 {
            self.blocked += 1;
        }
        self.rows_per_second += db.rows_per_second.unwrap_or(0.0);
        if let Some(eta) = db.eta_seconds {
            self.eta_seconds = Some(self.eta_seconds.map_or(eta, |e| e.max(eta)));
        }
    }
}

impl Admin {
    /// Record a rollout cap (`cap`, set at its time) in this database, in
    /// one transaction with its audit row (AUD-1, action `rollout`): the
    /// cap is in force in the fleet's process, but what it changes runs on
    /// this database's rows, and a process that serves this database
    /// after a restart takes the cap from here (FLT-2).
    async fn record_rollout(
        &self,
        authority: &super::Authority,
        id: &str,
        cap: (Option<u32>, DateTime<Utc>),
        detail: &str,
        reason: Option<&str>,
        correlation: Option<&str>,
    ) -> Result<(), AdminError> {
        let (max_databases, set_at) = cap;
        let max_databases = max_databases.map(|c| i32::try_from(c).unwrap_or(i32::MAX));
        let mut conn = self.conn().await?;
        conn.transaction::<_, super::TxError, _>(async |conn| {
            crate::store::rollout_set(conn, id, max_databases, set_at).await?;
            crate::store::audit_insert(
                conn,
                &crate::store::NewAudit {
                    backfill_id: id,
                    action: "rollout",
                    actor: authority.actor.as_deref(),
                    authority: authority.source,
                    correlation,
                    prior_state: None,
                    resulting_state: None,
                    generation: None,
                    outcome: "applied",
                    detail: Some(detail),
                    reason,
                },
            )
            .await?;
            Ok(())
        })
        .await?;
        Ok(())
    }
}
