//! The admin boundary without HTTP: authorization (AUTH-1, AUTH-2), audit
//! (AUD-1, AUD-2), idempotent operator actions (ADM-4, ADM-5) and explicit
//! validation (VAL-4..7).
//!
//! Every accepted action is ONE PostgreSQL transaction: idempotency-key lock
//! -> stored response (replay or 422) -> `Engine::act_in` -> audit row ->
//! stored response -> commit. If any step fails, nothing of it commits: an
//! unaudited change is not a success. Rejections (401/403/400/404/422) are
//! audited in their own short transaction. This layer never messages
//! runners: it commits an intent and at most calls the waker.

pub mod auth;
pub mod flood;
mod journal_view;
mod notifications;
mod settings;
mod undo;
pub mod view;

pub use auth::{AuthConfig, AuthError, Authority, Capability, Principal};
pub use flood::{FloodGate, FloodLimits};
pub use journal_view::{JournalView, UndoLink, MAX_CONFLICT_KEYS};
pub use notifications::{NotificationPage, NotificationView};
pub use settings::RequestBody;
pub use view::*;

use crate::engine::{ActionOutcome, Engine, EngineError, ExplicitOutcome, ExplicitValidation};
use crate::failure::cut;
use crate::lifecycle::{Action, State};
use crate::repair::bounded;
use crate::settings::SettingsError;

/// Largest request body read, in bytes. A change of every setting is a few
/// hundred bytes (the stored object is bounded to 2 KiB); reading stops
/// here, so a client cannot make the server hold more.
pub const MAX_BODY_BYTES: usize = 16 * 1024;
use crate::store::{self, BackfillRow, NewAudit, StoreError};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde_json::Value;
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;

/// Longest accepted idempotency key or request id, in bytes (the
/// `backfill_request` and `backfill_audit` columns are bounded to 200).
pub const MAX_KEY_BYTES: usize = 200;
/// Largest page.
pub const MAX_PAGE: i64 = 500;
/// Page size when none is given.
pub const DEFAULT_PAGE: i64 = 50;
/// The `backfill_id` recorded for requests that name no single backfill.
const ALL: &str = "*";

/// Configuration of the admin service.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    pub auth: AuthConfig,
    /// Automatic backfills switch (docs/CONTRACT.md section 8).
    pub auto_backfills: bool,
    /// Required automatic backfills: "readiness participation".
    pub required: BTreeSet<String>,
}

/// Called after an accepted start/resume/retry commits, with the ID.
pub type Waker = Arc<dyn Fn(&str) + Send + Sync>;

/// Errors of the admin layer. Every message is bounded and redacted (AUD-2).
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("a bearer token with a backfill capability is required")]
    Unauthorized,
    #[error("the principal lacks the {} capability", .0.as_str())]
    Forbidden(Capability),
    #[error("{0}")]
    BadRequest(String),
    #[error("no backfill with this ID")]
    NotFound,
    #[error("this Idempotency-Key was already used for a different request")]
    KeyReused,
    /// A settings change that is refused (THR-4); nothing changed.
    #[error("{0}")]
    InvalidSettings(SettingsError),
    #[error("the body must be application/json or application/merge-patch+json")]
    UnsupportedMediaType,
    #[error("the body is larger than {} bytes", MAX_BODY_BYTES)]
    PayloadTooLarge,
    #[error("this server has no definition for the backfill")]
    NoDefinition,
    /// The definition's split points were refused at `start` (PAR-1): a
    /// defect of the deployed repair, not of the request. The start
    /// rolled back; nothing was written.
    #[error("{0}")]
    InvalidSplit(String),
    /// API-3: too many rejected requests from this source; retry after
    /// this many seconds.
    #[error("too many rejected requests from this source; retry later")]
    TooManyRequests(u64),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

impl AdminError {
    /// HTTP status of the error.
    pub fn status(&self) -> u16 {
        match self {
            AdminError::Unauthorized => 401,
            AdminError::Forbidden(_) => 403,
            AdminError::BadRequest(_) => 400,
            AdminError::NotFound => 404,
            AdminError::KeyReused => 422,
            AdminError::InvalidSettings(_) => 422,
            AdminError::UnsupportedMediaType => 415,
            AdminError::PayloadTooLarge => 413,
            AdminError::NoDefinition => 409,
            AdminError::InvalidSplit(_) => 422,
            AdminError::TooManyRequests(_) => 429,
            AdminError::Unavailable(_) => 503,
            AdminError::Internal(_) => 500,
        }
    }

    /// Stable error code (also the audit outcome of a rejection).
    pub fn code(&self) -> &'static str {
        match self {
            AdminError::Unauthorized => "unauthorized",
            AdminError::Forbidden(_) => "forbidden",
            AdminError::BadRequest(_) => "bad_request",
            AdminError::NotFound => "not_found",
            AdminError::KeyReused => "idempotency_key_reused",
            AdminError::InvalidSettings(_) => "invalid_settings",
            AdminError::UnsupportedMediaType => "unsupported_media_type",
            AdminError::PayloadTooLarge => "payload_too_large",
            AdminError::NoDefinition => "no_definition",
            AdminError::InvalidSplit(_) => "invalid_split",
            AdminError::TooManyRequests(_) => "too_many_requests",
            AdminError::Unavailable(_) => "unavailable",
            AdminError::Internal(_) => "internal",
        }
    }

    /// The JSON error body.
    pub fn body(&self) -> ErrorBody {
        ErrorBody {
            error: self.code().into(),
            message: bounded(self.to_string()),
            field: match self {
                AdminError::InvalidSettings(e) => e.field().map(str::to_string),
                _ => None,
            },
        }
    }
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> Self {
        // StoreError's Display is already redacted (store::describe).
        if store::is_transient(&e) {
            AdminError::Unavailable(bounded(e.to_string()))
        } else {
            AdminError::Internal(bounded(e.to_string()))
        }
    }
}

impl From<EngineError> for AdminError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::UnknownBackfill(_) => AdminError::NotFound,
            EngineError::NoDefinition(_) => AdminError::NoDefinition,
            EngineError::InvalidSettings(e) => AdminError::InvalidSettings(e),
            e @ EngineError::Split { .. } => AdminError::InvalidSplit(bounded(e.to_string())),
            EngineError::Store(e) => e.into(),
            // Repair diagnostics are bounded and redacted by contract.
            other => AdminError::Internal(bounded(other.to_string())),
        }
    }
}

/// What a caller presents with one request.
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestMeta<'a> {
    /// The bearer token, if any.
    pub bearer: Option<&'a str>,
    /// The `Idempotency-Key` header, if any.
    pub idempotency_key: Option<&'a str>,
    /// A request id for correlation when there is no idempotency key.
    pub request_id: Option<&'a str>,
    /// The peer address: rejections are coalesced and rate-limited per
    /// source (API-3). `None` (not a socket peer) is a source of its own.
    pub source: Option<IpAddr>,
}

impl RequestMeta<'_> {
    fn correlation(&self) -> Option<String> {
        self.idempotency_key
            .or(self.request_id)
            .map(|c| cut(c, MAX_KEY_BYTES))
    }
}

/// A response that went through the idempotent path: replayed verbatim to
/// every retry of the same key (200 applied/converged, 409 conflict).
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

/// Errors inside an admin transaction: anything here rolls it back.
#[derive(Debug, thiserror::Error)]
enum TxError {
    #[error(transparent)]
    Admin(#[from] AdminError),
    #[error("database error")]
    Db(#[from] diesel::result::Error),
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Admin(e.into())
    }
}

impl From<EngineError> for TxError {
    fn from(e: EngineError) -> Self {
        TxError::Admin(e.into())
    }
}

impl From<TxError> for AdminError {
    fn from(e: TxError) -> Self {
        match e {
            TxError::Admin(e) => e,
            TxError::Db(e) => StoreError::Database(e).into(),
        }
    }
}

/// The admin service over one engine.
#[derive(Clone)]
pub struct Admin {
    engine: Engine,
    config: Arc<AdminConfig>,
    waker: Option<Waker>,
    flood: Arc<FloodGate>,
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

/// The ID as an audit row can hold it: at most 128 bytes and no NUL,
/// which PostgreSQL's text cannot store (a rejection must still be
/// audited, AUD-1).
fn audit_id(id: &str) -> String {
    cut(&id.replace('\0', "\u{fffd}"), 128)
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
        }
    }

    /// Replace the bounds of the rejection path (API-3).
    pub fn with_flood_limits(mut self, limits: FloodLimits) -> Self {
        self.flood = Arc::new(FloodGate::new(limits));
        self
    }

    /// The rejection gate: what was coalesced or refused (API-3).
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

    fn view(&self, row: &BackfillRow, parts: &[store::PartitionRow]) -> BackfillView {
        let mut view = BackfillView::from_row(
            row,
            self.config.required.contains(&row.id),
            self.config.auto_backfills,
        )
        .with_partitions(row, parts);
        view.journaled = self.engine.registry().journal(&row.id).is_some();
        view
    }

    /// [`Admin::view`] with the row's partitions read on `conn` (PAR-5),
    /// and for a journaled backfill or an undo its journal and undo
    /// (UNDO-2, UNDO-4).
    async fn view_on(
        &self,
        conn: &mut diesel_async::AsyncPgConnection,
        row: &BackfillRow,
    ) -> Result<BackfillView, StoreError> {
        let parts = store::partition_list(conn, std::slice::from_ref(&row.id)).await?;
        let mut view = self.view(row, &parts);
        let journal_of = match &row.undo_of {
            Some(original) => Some(original.clone()),
            None if view.journaled => {
                let undo = crate::repair::undo_id(&row.id);
                view.undo = store::backfill_get(conn, &undo).await?.map(|u| UndoLink {
                    id: u.id,
                    state: u.state,
                });
                Some(row.id.clone())
            }
            None => None,
        };
        if let Some(original) = journal_of {
            let stats = store::journal_stats(conn, &original).await?;
            let keys = if stats.conflicts > 0 {
                store::journal_conflicts(conn, &original, MAX_CONFLICT_KEYS).await?
            } else {
                Vec::new()
            };
            view.journal = Some(JournalView::new(stats, keys));
        }
        Ok(view)
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

    /// Authenticate and authorize; 401/403 are audited and return nothing
    /// protected (AUTH-1). Requests without valid credentials are audited
    /// coalesced per source and window, and past a rate refused with 429
    /// (API-3); authentication is checked first, in memory, so authorized
    /// requests never touch that path.
    async fn authorize(
        &self,
        meta: &RequestMeta<'_>,
        id: &str,
        action: &str,
        need: Capability,
    ) -> Result<Authority, AdminError> {
        let Some(authority) = self.config.auth.authenticate(meta.bearer) else {
            let first = flood::FirstRequest {
                backfill_id: audit_id(id),
                action: cut(action, 32),
                correlation: meta.correlation(),
                detail: bounded(AdminError::Unauthorized.to_string()),
            };
            let (verdict, start_writer) = self.flood.reject(meta.source, first);
            if start_writer {
                tokio::spawn(self.flood.clone().flush(self.engine.pool().clone()));
            }
            return Err(match verdict {
                flood::Verdict::Unauthorized { ticket } => {
                    self.flood.written(ticket).await;
                    AdminError::Unauthorized
                }
                flood::Verdict::Throttled { retry_after } => {
                    AdminError::TooManyRequests(retry_after)
                }
            });
        };
        if !authority.can(need) {
            let error = AdminError::Forbidden(need);
            self.audit_rejection(&authority, id, action, meta, &error, None)
                .await;
            return Err(error);
        }
        Ok(authority)
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
        let (rows, parts) = {
            let mut conn = self.conn().await?;
            let rows = store::backfill_list(&mut conn, after, limit + 1).await?;
            let ids: Vec<String> = rows.iter().map(|r| r.id.clone()).collect();
            let parts = store::partition_list(&mut conn, &ids).await?;
            (rows, parts)
        };
        let more = rows.len() as i64 > limit;
        let items: Vec<BackfillView> = rows
            .iter()
            .take(limit as usize)
            .map(|r| self.view(r, &parts))
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
            .ok_or(AdminError::NotFound)?;
        Ok(self.view_on(&mut conn, &row).await?)
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
        self.audit_rejection(authority, id, action, meta, &error, None)
            .await;
        Err(error)
    }

    /// Audit an error that surfaced after authorization, then return it.
    async fn rejected(
        &self,
        authority: &Authority,
        id: &str,
        action: &str,
        meta: &RequestMeta<'_>,
        error: AdminError,
    ) -> AdminError {
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
        if action == Action::Validate {
            return self.validate(meta, &authority, id, key).await;
        }
        let result = self.act_tx(&authority, id, action, key).await;
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
    ) -> Result<(Reply, bool), AdminError> {
        let mut conn = self.conn().await?;
        let result = conn
            .transaction::<_, TxError, _>(async |conn| {
                if let Some(reply) =
                    replay(conn, authority, id, action.as_str(), action.as_str(), key).await?
                {
                    return Ok((reply, false));
                }
                let outcome = match self.engine.act_in(conn, id, action).await {
                    Err(e @ EngineError::Undone(_)) => {
                        let refusal = self.refusal(conn, id, "undone", &e).await?;
                        let row = &refusal.row;
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
                                outcome: "undone",
                                detail: Some(&refusal.message),
                            },
                        )
                        .await?;
                        store::request_insert(conn, key, id, action.as_str(), 409, &refusal.body)
                            .await?;
                        return Ok((
                            Reply {
                                status: 409,
                                body: refusal.body,
                            },
                            false,
                        ));
                    }
                    other => other?,
                };
                let (prior, code, status) = match &outcome {
                    ActionOutcome::Applied { prior, .. } => (*prior, "applied", 200),
                    ActionOutcome::Converged(row) => (row.state, "converged", 200),
                    ActionOutcome::Conflict(row) => (row.state, "conflict", 409),
                };
                let row = outcome.row();
                let view = self.view_on(conn, row).await?;
                let body = if status == 409 {
                    to_json(&ConflictBody {
                        error: "conflict".into(),
                        message: format!("{} is not allowed from {}", action.as_str(), row.state),
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
                        detail: None,
                    },
                )
                .await?;
                store::request_insert(conn, key, id, action.as_str(), status, &body).await?;
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
    ) -> Result<Reply, AdminError> {
        let action = Action::Validate;
        let mut conn = self.conn().await?;
        let result = conn
            .transaction::<_, TxError, _>(async |conn| {
                if let Some(reply) =
                    replay(conn, authority, id, action.as_str(), action.as_str(), key).await?
                {
                    return Ok(reply);
                }
                let ExplicitValidation { row, outcome } = self.engine.validate_in(conn, id).await?;
                let (response, keep) = validation_response(&row, outcome);
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
                    },
                )
                .await?;
                if keep {
                    store::request_insert(conn, key, id, action.as_str(), 200, &body).await?;
                }
                Ok(Reply { status: 200, body })
            })
            .await;
        match result {
            Ok(reply) => Ok(reply),
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
    store::request_lock(conn, key).await?;
    let Some(stored) = store::request_get(conn, key).await? else {
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
