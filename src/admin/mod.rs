//! The admin boundary without HTTP: authorization (AUTH-1..3), audit
//! (AUD-1..3), idempotent operator actions (ADM-4, ADM-5) and explicit
//! validation (VAL-4..7).
//!
//! Every accepted action is ONE PostgreSQL transaction: idempotency-key lock
//! -> stored response (replay or 422) -> `Engine::act_in` -> audit row ->
//! stored response -> commit. If any step fails, nothing of it commits: an
//! unaudited change is not a success. Rejections of 400, 401, 403 and 421
//! are coalesced per caller and window (`flood`); the others (404, 422 ...)
//! are audited in their own short transaction. This layer never messages
//! runners: it commits an intent and at most calls the waker.

mod auth;
mod dry_run;
mod error;
mod fleet;
pub(crate) mod flood;
mod journal_view;
mod notifications;
mod origin;
mod reason;
mod request;
mod run_rate;
mod settings;
mod suggest;
mod timeline;
mod undo;
pub(crate) mod view;

pub use auth::{
    read_token_file, sha256, AuthConfig, AuthError, Authority, Capability, Principal, OPERATOR,
};
pub use dry_run::DRY_RUN_ACTION;
pub use error::AdminError;
pub use fleet::{
    Availability, DatabaseReply, DatabaseStatus, DatabaseSummary, FleetAdmin, FleetBackfill,
    FleetBackfills, FleetMember, FleetMembers, FleetOverview, FleetReadiness, FleetReply,
    FleetTotals, Rollout, StateCounts,
};
pub use flood::FloodLimits;
#[doc(hidden)]
pub use flood::{FloodGate, Reason as FloodReason};
pub use journal_view::{JournalView, UndoLink, MAX_CONFLICT_KEYS};
pub use notifications::{NotificationPage, NotificationView};
pub(crate) use origin::hostname;
#[doc(hidden)]
pub use origin::{allowed_host, LOOPBACK_HOSTS};
pub use reason::{decode_reason, encode_reason, MAX_REASON_HEADER, REASON_HEADER};
pub use request::{Reply, RequestMeta, DEFAULT_PAGE, MAX_BODY_BYTES, MAX_KEY_BYTES, MAX_PAGE};
pub use run_rate::{PartitionRates, RunChart, RunInterval, CHART_BUCKETS, SPARK_BUCKETS};
pub use settings::RequestBody;
pub use timeline::{Timeline, TimelineEntry};
pub use view::*;

use crate::engine::{ActionOutcome, Engine, EngineError, ExplicitOutcome, ExplicitValidation};
use crate::failure::cut;
use crate::lifecycle::{Action, State};
use crate::repair::bounded;
use crate::store::{self, BackfillRow, NewAudit, StoreError};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use error::TxError;
use origin::cross_site;
use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Arc;

/// The `backfill_id` recorded for requests that name no single backfill.
const ALL: &str = "*";

/// Configuration of the admin service.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// How callers authenticate: bearer tokens of principals, or a trusted
    /// network boundary (AUTH-1, AUTH-2).
    pub auth: AuthConfig,
    /// Automatic backfills switch (docs/CONTRACT.md section 8).
    pub auto_backfills: bool,
    /// Required automatic backfills: "readiness participation".
    pub required: BTreeSet<String>,
}

/// Called after an accepted start/resume/retry commits, with the ID.
pub type Waker = Arc<dyn Fn(&str) + Send + Sync>;

/// The admin service over one engine.
#[derive(Clone)]
pub struct Admin {
    engine: Engine,
    config: Arc<AdminConfig>,
    waker: Option<Waker>,
    flood: Arc<FloodGate>,
    /// Hostnames answered in trusted-network mode (AUTH-3), normalized
    /// by [`hostname`].
    allowed_hosts: Arc<Vec<String>>,
    /// The runtime metrics of the host serving this boundary: an explicit
    /// validation runs here, without the actor runtime, and its rejection
    /// must count on the same `/metrics` as a lifecycle one.
    metrics: Option<Arc<backfill_actors::RuntimeMetrics>>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("config", &self.config)
            .finish()
    }
}

/// Check an ID taken from a request (path, `after`, `backfill`) before it
/// reaches PostgreSQL: an ID that no backfill can have is a 400 naming the
/// rule, not a query (a NUL byte, say, makes PostgreSQL fail the statement
/// and the caller would see a 500).
fn requested_id(what: &str, id: &str) -> Result<(), AdminError> {
    crate::repair::validate_id(id).map_err(|_| {
        AdminError::BadRequest(format!(
            "{what} must be a backfill ID: 1 to 128 characters from a-z, 0-9, '.', '_' and '-'"
        ))
    })
}

/// The ID as an audit row holds it: itself when it is a valid backfill
/// ID (or `*`), else a placeholder with its length. Whatever a caller put
/// in an ID that no backfill can have (escape sequences, line breaks,
/// bidirectional overrides, a NUL) is never stored (AUD-3).
fn audit_id(id: &str) -> String {
    if id == ALL || crate::repair::validate_id(id).is_ok() {
        id.to_string()
    } else {
        format!("(invalid ID, {} bytes)", id.len())
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<Value, AdminError> {
    serde_json::to_value(value).map_err(|_| AdminError::Internal("cannot encode a response".into()))
}

impl Admin {
    /// The admin service for `engine`.
    pub fn new(engine: Engine, config: AdminConfig) -> Self {
        Self {
            engine,
            config: Arc::new(config),
            waker: None,
            flood: Arc::new(FloodGate::new(FloodLimits::default())),
            allowed_hosts: Arc::new(LOOPBACK_HOSTS.map(String::from).to_vec()),
            metrics: None,
        }
    }

    /// Count explicit validations that found the postcondition false in
    /// `metrics` (`backfill_validations_rejected_total{kind="explicit"}`),
    /// the runtime metrics the host's `/metrics` exports.
    pub fn with_metrics(mut self, metrics: Arc<backfill_actors::RuntimeMetrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Answer in trusted-network mode also to requests whose `Host` names
    /// one of `hosts`, on top of [`LOOPBACK_HOSTS`] (AUTH-3). Pass names
    /// checked by [`allowed_host`]: an entry that is no hostname can match
    /// no request and so allows nothing.
    pub fn with_allowed_hosts<I: IntoIterator<Item = String>>(mut self, hosts: I) -> Self {
        let mut allowed: Vec<String> = self.allowed_hosts.as_ref().clone();
        for host in hosts {
            let name = hostname(&host).unwrap_or(host);
            if !allowed.contains(&name) {
                allowed.push(name);
            }
        }
        self.allowed_hosts = Arc::new(allowed);
        self
    }

    /// The hostnames answered in trusted-network mode.
    pub fn allowed_hosts(&self) -> &[String] {
        &self.allowed_hosts
    }

    /// Replace the bounds of the rejection path (API-3).
    pub fn with_flood_limits(mut self, limits: FloodLimits) -> Self {
        self.flood = Arc::new(FloodGate::new(limits));
        self
    }

    /// The rejection gate: what was coalesced or refused (API-3).
    #[doc(hidden)]
    pub fn flood(&self) -> &FloodGate {
        &self.flood
    }

    /// Call `waker(id)` after an accepted start/resume/retry commits (the
    /// host wakes its supervisor; losing the call changes nothing).
    pub fn with_waker(mut self, waker: Waker) -> Self {
        self.waker = Some(waker);
        self
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The view of `row` with its partitions; `completed` are the
    /// dependencies (FLT-4) known to be completed, as
    /// [`Admin::completed_dependencies`] read them.
    fn view(
        &self,
        row: &BackfillRow,
        parts: &[store::PartitionRow],
        completed: &[String],
    ) -> BackfillView {
        let mut view = BackfillView::from_row(
            row,
            self.config.required.contains(&row.id),
            self.config.auto_backfills,
        )
        .with_partitions(row, parts);
        let registry = self.engine.registry();
        view.journaled = registry.journal(&row.id).is_some();
        if matches!(row.state, State::Pending | State::Running) {
            view.waiting_for = registry
                .dependencies(&row.id)
                .iter()
                .filter(|d| !completed.contains(d))
                .cloned()
                .collect();
        }
        view
    }

    /// Which dependencies of `rows` (FLT-4) are completed, in one read;
    /// none is read when no row's definition declares any.
    async fn completed_dependencies(
        &self,
        conn: &mut diesel_async::AsyncPgConnection,
        rows: &[BackfillRow],
    ) -> Result<Vec<String>, StoreError> {
        let registry = self.engine.registry();
        let mut wanted: Vec<String> = rows
            .iter()
            .filter(|r| matches!(r.state, State::Pending | State::Running))
            .flat_map(|r| registry.dependencies(&r.id).iter().cloned())
            .collect();
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        wanted.sort();
        wanted.dedup();
        store::backfill_completed_among(conn, &wanted).await
    }

    /// [`Admin::view`] with the row's partitions read on `conn` (PAR-5)
    /// and, for a journaled backfill, its undo (UNDO-2). Action answers
    /// use it inside their transaction, under the row lock, so it reads
    /// nothing that grows with the data.
    async fn view_on(
        &self,
        conn: &mut diesel_async::AsyncPgConnection,
        row: &BackfillRow,
    ) -> Result<BackfillView, StoreError> {
        let parts = store::partition_list(conn, std::slice::from_ref(&row.id)).await?;
        self.view_of_parts(conn, row, &parts).await
    }

    /// [`Admin::view_on`] with the row's partitions as the caller read
    /// them, so a caller that needs them too reads them once.
    async fn view_of_parts(
        &self,
        conn: &mut diesel_async::AsyncPgConnection,
        row: &BackfillRow,
        parts: &[store::PartitionRow],
    ) -> Result<BackfillView, StoreError> {
        let completed = self
            .completed_dependencies(conn, std::slice::from_ref(row))
            .await?;
        let mut view = self.view(row, parts, &completed);
        if view.journaled && row.undo_of.is_none() {
            let undo = crate::repair::undo_id(&row.id);
            view.undo = store::backfill_get(conn, &undo).await?.map(|u| UndoLink {
                id: u.id,
                state: u.state,
            });
        }
        Ok(view)
    }

    /// The journal a detail view shows (UNDO-2, UNDO-4): a journaled
    /// backfill's own, or for an undo the one it takes back. It counts the
    /// backfill's journal entries (an index range), so only the detail view
    /// reads it, outside any transaction an action holds.
    async fn journal_on(
        &self,
        conn: &mut diesel_async::AsyncPgConnection,
        view: &mut BackfillView,
    ) -> Result<(), StoreError> {
        let original = match &view.undo_of {
            Some(original) => original.clone(),
            None if view.journaled => view.id.clone(),
            None => return Ok(()),
        };
        let stats = store::journal_stats(conn, &original).await?;
        let keys = if stats.conflicts > 0 {
            store::journal_conflicts(conn, &original, MAX_CONFLICT_KEYS).await?
        } else {
            Vec::new()
        };
        view.journal = Some(JournalView::new(stats, keys));
        Ok(())
    }

    async fn conn(&self) -> Result<store::PooledConn<'_>, AdminError> {
        Ok(self.engine.pool().get().await.map_err(StoreError::from)?)
    }

    /// Audit a rejected request in its own transaction. A failure here is
    /// logged, not returned: the rejection changed nothing (AUD-1).
    async fn audit_rejection(
        &self,
        authority: &Authority,
        id: &str,
        action: &str,
        meta: &RequestMeta<'_>,
        error: &AdminError,
        prior: Option<(State, i64)>,
    ) {
        let correlation = meta.correlation();
        let id = audit_id(id);
        let detail = bounded(error.to_string());
        let audit = NewAudit {
            backfill_id: &id,
            action,
            actor: authority.actor.as_deref(),
            authority: authority.source,
            correlation: correlation.as_deref(),
            prior_state: prior.map(|p| p.0),
            resulting_state: prior.map(|p| p.0),
            generation: prior.map(|p| p.1),
            outcome: error.code(),
            detail: Some(&detail),
            reason: None,
        };
        let result = match self.conn().await {
            Ok(mut conn) => store::audit_insert(&mut conn, &audit)
                .await
                .map_err(AdminError::from),
            Err(e) => Err(e),
        };
        if let Err(e) = result {
            tracing::warn!(action, outcome = error.code(), error = %e, "could not audit a rejected admin request");
        }
    }

    /// Count a refused request in the rejection gate and answer once its
    /// count is written: `error`, or 429 past the caller's rate. The
    /// caller is the authenticated principal, else the peer address
    /// (API-3, AUD-3); nothing of the request but its (checked) ID and
    /// action is kept.
    async fn refuse(
        &self,
        authority: Option<&Authority>,
        meta: &RequestMeta<'_>,
        id: &str,
        action: &str,
        reason: flood::Reason,
        error: AdminError,
    ) -> AdminError {
        let caller = match authority.and_then(|a| a.actor.clone()) {
            Some(name) => flood::Caller::Principal(name),
            None => flood::Caller::source(meta.source),
        };
        let request = flood::Rejected {
            backfill_id: audit_id(id),
            action: cut(action, 32),
            authority: authority.map_or("none", |a| a.source),
            detail: bounded(error.to_string()),
        };
        let (verdict, start_writer) = self.flood.reject(caller, reason, request);
        if start_writer {
            tokio::spawn(self.flood.clone().flush(self.engine.pool().clone()));
        }
        match verdict {
            flood::Verdict::Refused { ticket } => {
                self.flood.written(ticket).await;
                error
            }
            flood::Verdict::Throttled { retry_after } => AdminError::TooManyRequests(retry_after),
        }
    }

    /// Why the admin boundary refuses this request before looking at its
    /// credentials, if it does (AUTH-3): in trusted-network mode a `Host`
    /// outside the allow-list (a DNS-rebinding page names its own
    /// domain), and in every mode a state-changing request that a page of
    /// another site sent.
    fn boundary(&self, meta: &RequestMeta<'_>, need: Capability) -> Option<flood::Reason> {
        if matches!(self.config.auth, AuthConfig::TrustedNetwork) {
            // A request without a Host is no browser's (browsers always
            // send one, and rebinding needs a browser): an in-process
            // caller of this layer, or an HTTP/1.0 client on the network
            // this mode trusts.
            let foreign = meta.host.is_some_and(|host| {
                !hostname(host).is_some_and(|h| self.allowed_hosts.contains(&h))
            });
            if foreign {
                return Some(flood::Reason::Misdirected);
            }
        }
        (need == Capability::Operate && cross_site(meta)).then_some(flood::Reason::CrossSite)
    }

    /// Refuse a request to a route outside the admin API (`/metrics`, the
    /// web client, `/openapi.json`) whose `Host` the boundary does not
    /// answer for in trusted-network mode (AUTH-3): a DNS-rebinding page
    /// must not read the metrics either. Counted and audited like every
    /// refusal of the boundary.
    pub(crate) async fn refuse_misdirected(
        &self,
        meta: &RequestMeta<'_>,
        action: &str,
    ) -> Result<(), AdminError> {
        match self.boundary(meta, Capability::Read) {
            Some(reason @ flood::Reason::Misdirected) => Err(self
                .refuse(None, meta, ALL, action, reason, AdminError::Misdirected)
                .await),
            _ => Ok(()),
        }
    }

    /// Check the boundary, authenticate and authorize (AUTH-1..3). Every
    /// refusal (421, 403, 401) returns nothing protected and is counted
    /// into a coalesced audit row of its caller and window, and past a
    /// rate refused with 429 (API-3, AUD-3). The checks are in memory, so
    /// authorized requests never touch that path.
    async fn authorize(
        &self,
        meta: &RequestMeta<'_>,
        id: &str,
        action: &str,
        need: Capability,
    ) -> Result<Authority, AdminError> {
        let authority = self.authenticate(meta, id, action, need).await?;
        if !authority.can(need) {
            let error = AdminError::Forbidden(need);
            let reason = flood::Reason::Forbidden;
            return Err(self
                .refuse(Some(&authority), meta, id, action, reason, error)
                .await);
        }
        Ok(authority)
    }

    /// GET /admin/me: the caller's principal and capabilities (AUTH-1).
    /// Any authenticated caller may read its own: it is no secret to it,
    /// and a client needs it before offering an action. The boundary and
    /// the refusal of a missing or unknown token are those of every route.
    pub async fn me(&self, meta: &RequestMeta<'_>) -> Result<CallerView, AdminError> {
        let authority = self.authenticate(meta, ALL, "me", Capability::Read).await?;
        Ok(CallerView {
            principal: authority.actor.clone(),
            authority: authority.source.to_string(),
            capabilities: authority.capability_names(),
        })
    }

    /// The boundary (for a request needing `need`) and the caller's
    /// credentials, without a capability check; refusals as in
    /// [`Admin::authorize`].
    async fn authenticate(
        &self,
        meta: &RequestMeta<'_>,
        id: &str,
        action: &str,
        need: Capability,
    ) -> Result<Authority, AdminError> {
        if let Some(reason) = self.boundary(meta, need) {
            let error = match reason {
                flood::Reason::Misdirected => AdminError::Misdirected,
                _ => AdminError::CrossSite,
            };
            return Err(self.refuse(None, meta, id, action, reason, error).await);
        }
        match self.config.auth.authenticate(meta.bearer) {
            Some(authority) => Ok(authority),
            None => {
                let reason = flood::Reason::Unauthorized;
                let error = AdminError::unauthorized(meta.bearer);
                Err(self.refuse(None, meta, id, action, reason, error).await)
            }
        }
    }

    /// GET /admin/backfills: a page ordered by ID (ADM-2), read from
    /// PostgreSQL on every call.
    pub async fn list(
        &self,
        meta: &RequestMeta<'_>,
        after: Option<&str>,
        limit: Option<i64>,
    ) -> Result<BackfillPage, AdminError> {
        self.authorize(meta, ALL, "list", Capability::Read).await?;
        if let Some(after) = after {
            requested_id("after", after)?;
        }
        let limit = page_limit(limit)?;
        // The connection goes back to the pool before the page is built:
        // concurrent readers wait for connections, not for each other's
        // rendering.
        let (rows, parts, samples, completed) = {
            let mut conn = self.conn().await?;
            let rows = store::backfill_list(&mut conn, after, limit + 1).await?;
            let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
            let parts = store::partition_list(&mut conn, &ids).await?;
            let samples = self.recent_samples(&mut conn, &rows).await?;
            let completed = self.completed_dependencies(&mut conn, &rows).await?;
            (rows, parts, samples, completed)
        };
        let more = rows.len() as i64 > limit;
        let items: Vec<BackfillView> = rows
            .iter()
            .take(limit as usize)
            .map(|r| {
                self.view(r, &parts, &completed)
                    .with_rates(r, &parts, &samples)
            })
            .collect();
        let next_after = more.then(|| items.last().map(|v| v.id.clone())).flatten();
        Ok(BackfillPage { items, next_after })
    }

    /// GET /admin/backfills/{id} (ADM-2).
    pub async fn detail(
        &self,
        meta: &RequestMeta<'_>,
        id: &str,
    ) -> Result<BackfillView, AdminError> {
        self.authorize(meta, id, "show", Capability::Read).await?;
        requested_id("the path's ID", id)?;
        let mut conn = self.conn().await?;
        let row = store::backfill_get(&mut conn, id)
            .await?
            .ok_or_else(AdminError::not_found)?;
        let parts = store::partition_list(&mut conn, std::slice::from_ref(&row.id)).await?;
        let mut view = self.view_of_parts(&mut conn, &row, &parts).await?;
        self.journal_on(&mut conn, &mut view).await?;
        if row.state == State::Blocked {
            view.blocking_keys = store::backfill_blocking_keys_get(&mut conn, id)
                .await?
                .and_then(|keys| keys.as_array().cloned());
        }
        let samples = self
            .recent_samples(&mut conn, std::slice::from_ref(&row))
            .await?;
        Ok(view.with_rates(&row, &parts, &samples))
    }

    /// GET /admin/audit: newest first, optionally for one backfill.
    pub async fn audit(
        &self,
        meta: &RequestMeta<'_>,
        backfill: Option<&str>,
        before: Option<i64>,
        limit: Option<i64>,
    ) -> Result<AuditPage, AdminError> {
        self.authorize(meta, backfill.unwrap_or(ALL), "audit", Capability::Read)
            .await?;
        if let Some(backfill) = backfill {
            requested_id("backfill", backfill)?;
        }
        let limit = page_limit(limit)?;
        let mut conn = self.conn().await?;
        let rows = store::audit_list(&mut conn, backfill, before, limit + 1).await?;
        let more = rows.len() as i64 > limit;
        let items: Vec<AuditEntry> = rows
            .into_iter()
            .take(limit as usize)
            .map(AuditEntry::from)
            .collect();
        let next_before = more.then(|| items.last().map(|e| e.seq)).flatten();
        Ok(AuditPage { items, next_before })
    }

    /// Check the Idempotency-Key of a POST; a missing or malformed key is
    /// a 400, audited.
    async fn require_key<'a>(
        &self,
        meta: &RequestMeta<'a>,
        authority: &Authority,
        id: &str,
        action: &str,
    ) -> Result<&'a str, AdminError> {
        let problem = match meta.idempotency_key {
            None => "the Idempotency-Key header is required",
            Some(k) if k.is_empty() || k.len() > MAX_KEY_BYTES => {
                "the Idempotency-Key must be 1..=200 bytes"
            }
            Some(k) if !k.bytes().all(|b| b.is_ascii_graphic()) => {
                "the Idempotency-Key must be printable ASCII without spaces"
            }
            Some(k) => return Ok(k),
        };
        let error = AdminError::BadRequest(problem.into());
        Err(self.rejected(authority, id, action, meta, error).await)
    }

    /// Audit an error that surfaced after authorization, then return it:
    /// a 400 is counted into the caller's coalesced row like every
    /// refusal of its input (AUD-3), anything else (404, 409, 422 ...)
    /// gets a row of its own.
    async fn rejected(
        &self,
        authority: &Authority,
        id: &str,
        action: &str,
        meta: &RequestMeta<'_>,
        error: AdminError,
    ) -> AdminError {
        if matches!(error, AdminError::BadRequest(_)) {
            let reason = flood::Reason::BadRequest;
            return self
                .refuse(Some(authority), meta, id, action, reason, error)
                .await;
        }
        self.audit_rejection(authority, id, action, meta, &error, None)
            .await;
        error
    }

    /// POST /admin/backfills/{id}/{start|pause|resume|retry|validate}
    /// (ADM-4, ADM-5, AUD-1). The transition, its audit row and the stored
    /// response commit in one transaction, under the advisory lock of the
    /// idempotency key, so duplicates (sequential, concurrent, or after a
    /// lost response or a restart) replay the first response.
    pub async fn act(
        &self,
        meta: &RequestMeta<'_>,
        id: &str,
        action: Action,
    ) -> Result<Reply, AdminError> {
        let authority = self
            .authorize(meta, id, action.as_str(), Capability::Operate)
            .await?;
        if let Err(error) = requested_id("the path's ID", id) {
            return Err(self
                .rejected(&authority, id, action.as_str(), meta, error)
                .await);
        }
        let key = self
            .require_key(meta, &authority, id, action.as_str())
            .await?;
        let reason = self
            .require_reason(meta, &authority, id, action.as_str())
            .await?;
        let reason = reason.as_deref();
        if action == Action::Validate {
            return self.validate(meta, &authority, id, key, reason).await;
        }
        let result = self.act_tx(&authority, id, action, key, reason).await;
        match result {
            Ok((reply, woke)) => {
                if woke {
                    if let Some(waker) = &self.waker {
                        waker(id);
                    }
                }
                Ok(reply)
            }
            Err(error) => Err(self
                .rejected(&authority, id, action.as_str(), meta, error)
                .await),
        }
    }

    async fn act_tx(
        &self,
        authority: &Authority,
        id: &str,
        action: Action,
        key: &str,
        reason: Option<&str>,
    ) -> Result<(Reply, bool), AdminError> {
        let mut conn = self.conn().await?;
        let result = conn
            .transaction::<_, TxError, _>(async |conn| {
                if let Some(reply) =
                    replay(conn, authority, id, action.as_str(), action.as_str(), key).await?
                {
                    return Ok((reply, false));
                }
                // What to audit and answer: the refusal of an undone
                // backfill's resume or retry (UNDO-2), or the action's own
                // outcome; both take the one audited, stored path below.
                let (prior, row, code, status, body, detail) =
                    match self.engine.act_in(conn, id, action).await {
                        Err(e @ EngineError::Undone(_)) => {
                            let refusal = self.refusal(conn, id, "undone", &e).await?;
                            let prior = refusal.row.state;
                            let detail = Some(refusal.message);
                            (prior, refusal.row, "undone", 409, refusal.body, detail)
                        }
                        other => {
                            let outcome = other?;
                            let (prior, code, status) = match &outcome {
                                ActionOutcome::Applied { prior, .. } => (*prior, "applied", 200),
                                ActionOutcome::Converged(row) => (row.state, "converged", 200),
                                ActionOutcome::Conflict(row) => (row.state, "conflict", 409),
                            };
                            let row = outcome.row().clone();
                            let view = self.view_on(conn, &row).await?;
                            let body = if status == 409 {
                                to_json(&ConflictBody {
                                    error: "conflict".into(),
                                    message: format!(
                                        "{} is not allowed from {}",
                                        action.as_str(),
                                        row.state
                                    ),
                                    current: view,
                                })?
                            } else {
                                to_json(&ActionResponse {
                                    outcome: code.into(),
                                    action: action.as_str().into(),
                                    prior_state: prior,
                                    backfill: view,
                                })?
                            };
                            (prior, row, code, status, body, None)
                        }
                    };
                store::audit_insert(
                    conn,
                    &NewAudit {
                        backfill_id: id,
                        action: action.as_str(),
                        actor: authority.actor.as_deref(),
                        authority: authority.source,
                        correlation: Some(key),
                        prior_state: Some(prior),
                        resulting_state: Some(row.state),
                        generation: Some(row.generation),
                        outcome: code,
                        detail: detail.as_deref(),
                        reason,
                    },
                )
                .await?;
                store::request_insert(
                    conn,
                    authority.principal(),
                    key,
                    id,
                    action.as_str(),
                    status,
                    &body,
                )
                .await?;
                let woke = code == "applied"
                    && matches!(action, Action::Start | Action::Resume | Action::Retry);
                Ok((
                    Reply {
                        status: status as u16,
                        body,
                    },
                    woke,
                ))
            })
            .await;
        Ok(result?)
    }

    /// Explicit validation (VAL-4..7), inside one transaction that holds the
    /// idempotency-key lock and a non-waiting per-ID advisory lock. The
    /// definition runs in a savepoint that is always rolled back
    /// (`Engine::validate_in`); only the bounded outcome
    /// (`validation_record`), the audit row and the stored response
    /// commit. No claim is taken and no lifecycle, bound,
    /// checkpoint or generation changes (VAL-5). A request that finds
    /// another validation running gets `current-state` and its answer is
    /// not stored, so retrying the same key later runs it.
    async fn validate(
        &self,
        meta: &RequestMeta<'_>,
        authority: &Authority,
        id: &str,
        key: &str,
        reason: Option<&str>,
    ) -> Result<Reply, AdminError> {
        let action = Action::Validate;
        let mut conn = self.conn().await?;
        let result = conn
            .transaction::<_, TxError, _>(async |conn| {
                if let Some(reply) =
                    replay(conn, authority, id, action.as_str(), action.as_str(), key).await?
                {
                    // A replay ran nothing: its rejection was counted once.
                    return Ok((reply, false));
                }
                let ExplicitValidation { row, outcome } = self.engine.validate_in(conn, id).await?;
                let (response, keep) = validation_response(&row, outcome);
                let rejected = response.outcome == "failure";
                let body = to_json(&response)?;
                store::audit_insert(
                    conn,
                    &NewAudit {
                        backfill_id: id,
                        action: action.as_str(),
                        actor: authority.actor.as_deref(),
                        authority: authority.source,
                        correlation: Some(key),
                        prior_state: Some(row.state),
                        resulting_state: Some(row.state),
                        generation: Some(row.generation),
                        outcome: &response.outcome,
                        detail: response.detail.as_deref().or(response.reason.as_deref()),
                        reason,
                    },
                )
                .await?;
                if keep {
                    store::request_insert(
                        conn,
                        authority.principal(),
                        key,
                        id,
                        action.as_str(),
                        200,
                        &body,
                    )
                    .await?;
                }
                Ok((Reply { status: 200, body }, rejected))
            })
            .await;
        match result {
            Ok((reply, rejected)) => {
                // Counted once the outcome committed, as the audit row did.
                if let (true, Some(metrics)) = (rejected, &self.metrics) {
                    metrics.explicit_validations_rejected.inc();
                }
                Ok(reply)
            }
            Err(e) => Err(self
                .rejected(authority, id, action.as_str(), meta, e.into())
                .await),
        }
    }
}

/// The response to explicit validation of `row`, and whether it is stored
/// for the idempotency key: an answer that says nothing ran for a passing
/// reason (another validation holds the lock, the definition could not
/// run) is not, so a retry of the key runs it.
fn validation_response(row: &BackfillRow, outcome: ExplicitOutcome) -> (ValidationResponse, bool) {
    let current = |reason: &str| ValidationResponse {
        outcome: "current-state".into(),
        backfill_id: row.id.clone(),
        state: row.state,
        generation: row.generation,
        detail: None,
        reason: Some(reason.into()),
        validated_at: None,
    };
    let mut keep = true;
    let response = match outcome {
        ExplicitOutcome::NotStarted => current("not started: there is nothing to validate yet"),
        ExplicitOutcome::Busy => {
            keep = false;
            current("another validation of this backfill is running; retry for its outcome")
        }
        ExplicitOutcome::NotAtBound => {
            current("the checkpoint has not reached the bound; nothing to validate yet")
        }
        ExplicitOutcome::NoDefinition => current("this server has no definition for the backfill"),
        ExplicitOutcome::Recorded {
            outcome,
            detail,
            validated_at,
        } => ValidationResponse {
            outcome: outcome.into(),
            detail,
            reason: None,
            validated_at,
            ..current("")
        },
        ExplicitOutcome::NotRun(e) => {
            // Not a verdict on the data: report that nothing ran, and let
            // a retry of the key run it.
            keep = false;
            current(&bounded(format!("validation could not run: {e}")))
        }
    };
    (response, keep)
}

/// Take the idempotency-key lock and, if the key already answered, audit
/// the replay and return its stored response; a key used for another
/// request (another action or ID, or another body) is a 422 (ADM-4).
/// `request` is what the key is stored with: the action's name, or for a
/// request with a body its name and the body's digest.
async fn replay(
    conn: &mut AsyncPgConnection,
    authority: &Authority,
    id: &str,
    action: &str,
    request: &str,
    key: &str,
) -> Result<Option<Reply>, TxError> {
    store::request_lock(conn, authority.principal(), key).await?;
    let Some(stored) = store::request_get(conn, authority.principal(), key).await? else {
        return Ok(None);
    };
    if stored.backfill_id != id || stored.action != request {
        return Err(AdminError::KeyReused.into());
    }
    store::audit_insert(
        conn,
        &NewAudit {
            backfill_id: id,
            action,
            actor: authority.actor.as_deref(),
            authority: authority.source,
            correlation: Some(key),
            outcome: "replayed",
            ..Default::default()
        },
    )
    .await?;
    Ok(Some(Reply {
        status: u16::try_from(stored.status).unwrap_or(500),
        body: stored.response,
    }))
}

fn page_limit(limit: Option<i64>) -> Result<i64, AdminError> {
    match limit {
        None => Ok(DEFAULT_PAGE),
        Some(n) if (1..=MAX_PAGE).contains(&n) => Ok(n),
        Some(_) => Err(AdminError::BadRequest(format!(
            "limit must be between 1 and {MAX_PAGE}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AUD-3: a valid ID (or `*`) is recorded as it is; anything else as
    /// a placeholder with its length in bytes.
    #[test]
    fn aud03_an_invalid_id_is_recorded_as_a_placeholder() {
        assert_eq!(audit_id("items.counter"), "items.counter");
        assert_eq!(audit_id("*"), "*");
        assert_eq!(audit_id("a\u{1b}[31m"), "(invalid ID, 6 bytes)");
        assert_eq!(audit_id(&"x".repeat(500)), "(invalid ID, 500 bytes)");
    }
}
