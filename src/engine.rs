//! Fenced execution: start, claim, renew, release, the batch commit seam,
//! failure classification and lifecycle validation.
//!
//! Every method is one short PostgreSQL transaction on one pooled
//! connection; the engine keeps no state between calls beyond what the
//! caller hands back in a [`Claim`]. The one connection that outlives a
//! call is a running claim's *open batch*: the round trip that commits a
//! batch also opens the next batch's transaction (`BEGIN` and its
//! timeouts), and the claim carries that connection to the next
//! [`Engine::run_batch`], which so starts without a round trip. When the
//! repair has a one-statement form (`SelectAndMutate`), that
//! statement of the next batch is pipelined behind the commit too, so a
//! batch costs one round trip: the fence, COMMIT, BEGIN and the next
//! batch's work. The statement runs after the commit, inside the new
//! transaction, and commits only with the next batch's fence (EX-6,
//! CLM-2).
//!
//! A repair that overlaps commits (`Repair::overlap_commits`) has its claim
//! hold a second connection: the next batch's body runs there while the
//! previous batch's fence, COMMIT and next BEGIN run on the first, so the
//! commit's WAL flush is off the critical path. The two connections swap
//! roles every batch. A batch's fence is sent only after the previous
//! batch's commit returned and expects its checkpoint, so the order of
//! commits is the order of keys, and a batch whose predecessor did not
//! commit rolls back. The runtime (`backfill-actors`) drives these calls;
//! it never sees SQL.

use crate::events::Events;
use crate::key::{render_json, KeyError};
use crate::lifecycle::{Action, State};
use crate::repair::{bounded, BodyError, DefinitionError, RepairError, SelectionError, Validation};
use crate::repair::{DynRepair, EncodedSource, Registry, SelectedBatch};
use crate::settings::SettingsError;
use crate::store::{self, BackfillRow, Pool, PooledConn, StartValues, StoreError};
use chrono::{DateTime, Utc};
use diesel_async::{AsyncConnection, AsyncPgConnection};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod settings;
pub use settings::SettingsChange;

/// Bounded retry with exponential backoff (RT-2).
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Consecutive failed attempts after which a backfill is `failed`.
    /// Default 5.
    pub max_attempts: i32,
    /// Backoff after the first failure, doubled per consecutive failure.
    /// Default 1 s.
    pub backoff_base: Duration,
    /// Cap of the backoff. Default 60 s.
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
        }
    }
}

/// Engine configuration. Defaults are production-sane; [`EngineConfig::validate`]
/// rejects values that would break the contract (e.g. a zero lease).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// How long a claim lives without renewal (CLM-3). Default 30 s.
    pub lease_ttl: Duration,
    /// `statement_timeout` of each batch transaction (EX-5). Default 30 s.
    pub statement_timeout: Duration,
    /// `lock_timeout` of each batch transaction (EX-5). Default 5 s.
    pub lock_timeout: Duration,
    /// `statement_timeout` of validation and bound capture. Default 10 min.
    pub validation_timeout: Duration,
    /// Retry policy for execution errors.
    pub retry: RetryPolicy,
    /// Diagnostic build information recorded at registration (REG-2).
    pub build_info: String,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(30),
            statement_timeout: Duration::from_secs(30),
            lock_timeout: Duration::from_secs(5),
            validation_timeout: Duration::from_secs(600),
            retry: RetryPolicy::default(),
            build_info: concat!("backfill ", env!("CARGO_PKG_VERSION")).to_string(),
        }
    }
}

impl EngineConfig {
    /// Reject configurations that cannot honour the contract.
    pub fn validate(&self) -> Result<(), EngineError> {
        let ms = |d: Duration| d.as_millis();
        if ms(self.lease_ttl) < 100 {
            return Err(EngineError::Config(
                "lease_ttl must be at least 100ms".into(),
            ));
        }
        if ms(self.statement_timeout) == 0 || ms(self.lock_timeout) == 0 {
            return Err(EngineError::Config(
                "statement and lock timeouts must be positive (0 disables them in PostgreSQL)"
                    .into(),
            ));
        }
        if ms(self.validation_timeout) == 0 {
            return Err(EngineError::Config(
                "validation_timeout must be positive".into(),
            ));
        }
        // PostgreSQL rejects larger values, and it would reject them inside
        // an open transaction, on every batch.
        let max = Duration::from_millis(i32::MAX as u64);
        if self.statement_timeout > max || self.lock_timeout > max || self.validation_timeout > max
        {
            return Err(EngineError::Config(
                "statement, lock and validation timeouts must be at most 2147483647ms \
                 (about 24.8 days, PostgreSQL's limit)"
                    .into(),
            ));
        }
        if self.retry.max_attempts < 1 {
            return Err(EngineError::Config(
                "retry.max_attempts must be at least 1".into(),
            ));
        }
        if self.retry.backoff_base > self.retry.backoff_max {
            return Err(EngineError::Config(
                "retry.backoff_base must not exceed retry.backoff_max".into(),
            ));
        }
        Ok(())
    }
}

impl From<diesel::result::Error> for EngineError {
    fn from(e: diesel::result::Error) -> Self {
        EngineError::Store(StoreError::Database(e))
    }
}

/// Errors of the engine layer.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No row for this stable ID.
    #[error("unknown backfill {0:?}")]
    UnknownBackfill(String),
    /// This process has no definition for the ID (REG-4).
    #[error("no local definition for backfill {0:?}")]
    NoDefinition(String),
    #[error(transparent)]
    Definition(#[from] DefinitionError),
    /// A stored bound or checkpoint is not of the local key type (REG-4:
    /// fail closed). Nothing was changed.
    #[error("backfill {id:?}: {error}")]
    KeyMismatch { id: String, error: KeyError },
    /// The repair's selection broke the batch contract (EX-3, EX-4); the
    /// batch was rolled back (a two-statement repair's before its mutation
    /// ran).
    #[error("backfill {id:?}: {error}")]
    Selection { id: String, error: SelectionError },
    /// The repair returned an error; the transaction was rolled back.
    #[error("backfill {id:?}: {error}")]
    Repair { id: String, error: RepairError },
    /// A claim came back in a state that is not claimable (REG-4: fail
    /// closed rather than run it). A state text this build does not know
    /// at all already fails the read in the store.
    #[error("backfill {0:?} was claimed in a state that cannot be worked on")]
    UnknownState(String),
    /// Invalid configuration.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// A settings change that is refused (THR-4); nothing was changed.
    #[error(transparent)]
    InvalidSettings(#[from] SettingsError),
    /// The backfill is `completed`: terminal, so its settings no longer
    /// change (LC-4). Nothing was changed; the row as it is.
    #[error("backfill {:?} is completed: its settings no longer change", .0.id)]
    Completed(Box<BackfillRow>),
}

impl EngineError {
    /// How the runtime should record this error (RT-1). `None` means it
    /// must not be recorded against the backfill at all: a key mismatch is
    /// this process's problem (fail closed and leave the row alone).
    pub fn classification(&self) -> Option<RepairError> {
        match self {
            EngineError::Repair { error, .. } => Some(error.clone()),
            EngineError::Selection { error, .. } => Some(RepairError::Fatal(format!(
                "the repair's key selection broke the batch contract: {error}"
            ))),
            EngineError::Store(e) if store::is_transient(e) => {
                Some(RepairError::Retryable(e.to_string()))
            }
            EngineError::Store(e) => Some(RepairError::Fatal(e.to_string())),
            EngineError::KeyMismatch { .. }
            | EngineError::NoDefinition(_)
            | EngineError::UnknownBackfill(_)
            | EngineError::UnknownState(_)
            | EngineError::Definition(_)
            | EngineError::Config(_)
            | EngineError::InvalidSettings(_)
            | EngineError::Completed(_) => None,
        }
    }
}

/// What a claim is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `running`: execute batches.
    Execute,
    /// `validating`: run lifecycle validation.
    Validate,
}

/// A claim held by one worker: the fencing token every fenced write
/// presents. A cache of PostgreSQL state with a trust window, never an
/// authority.
#[derive(Debug)]
pub struct Claim {
    pub id: String,
    pub worker: String,
    pub generation: i64,
    pub phase: Phase,
    /// The previous owner whose expired claim this one took over (CLM-4).
    pub takeover_from: Option<String>,
    pub(crate) bound: Option<Vec<u8>>,
    pub(crate) checkpoint: Option<Vec<u8>>,
    /// The next batch's transaction, opened by the previous batch's commit
    /// message (see the module docs).
    pub(crate) open: OpenBatch,
}

/// A pooled connection inside a batch transaction that the previous
/// batch's commit opened. It has run `BEGIN` and the `SET LOCAL` timeouts
/// and, for a repair with a one-statement form, that statement of the
/// next batch, sent in the same round trip as the commit (`ahead`).
/// Without it the transaction holds no snapshot, lock or transaction ID;
/// with it, that batch's row locks until the next step commits or rolls
/// back, bounded like any batch by the statement and idle timeouts
/// (EX-5). Only the claim that committed the previous batch uses it,
/// which is why a claim is not `Clone`. Dropped while open (a runner that
/// stops without releasing), the pool sees the open transaction and
/// discards the connection, and PostgreSQL rolls the transaction back
/// with it.
#[derive(Default)]
pub(crate) struct OpenBatch(parking_lot::Mutex<Option<Open>>);

/// The contents of an [`OpenBatch`].
struct Open {
    conn: PooledConn<'static>,
    /// The next batch's body, already run in this transaction.
    ahead: Option<Result<SelectedBatch, BodyError>>,
    /// A repair that overlaps commits (`Repair::overlap_commits`): the
    /// pair's other connection, inside the transaction the previous
    /// batch's commit message opened (`BEGIN` and timeouts, nothing run).
    /// The batch after next runs its body there while the next batch
    /// commits on `conn`.
    spare: Option<PooledConn<'static>>,
}

/// Where the batch after this one stands once this one committed.
// One value per batch, moved once and never stored: boxing the connection
// would allocate on every batch to save a stack copy.
#[allow(clippy::large_enum_variant)]
enum Next {
    /// On this batch's connection: its body already sent behind the
    /// commit (`Some`) or not yet run (`None`).
    Same(Option<Result<SelectedBatch, BodyError>>),
    /// Run on the pair's other connection while this batch committed.
    Other(PooledConn<'static>, Result<SelectedBatch, BodyError>),
}

impl OpenBatch {
    fn take(&self) -> Option<Open> {
        self.0.lock().take()
    }

    fn put(&self, open: Open) {
        *self.0.lock() = Some(open);
    }
}

impl std::fmt::Debug for OpenBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.lock().is_some() {
            "OpenBatch(open)"
        } else {
            "OpenBatch(none)"
        })
    }
}

impl Claim {
    /// The committed checkpoint as JSON, as far as this claim knows.
    pub fn checkpoint_json(&self) -> Option<serde_json::Value> {
        self.checkpoint.as_deref().and_then(render_json)
    }
}

/// The result of one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOutcome {
    /// Mutation and checkpoint committed together. `reached_bound` means the
    /// row is now `validating` and the claim was released (VAL-1).
    Committed { keys: usize, reached_bound: bool },
    /// The fence rejected the batch (paused, taken over, lease expired): the
    /// whole transaction rolled back (CLM-2).
    Stale,
}

/// The result of recording an execution error (RT-1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureOutcome {
    /// Durably recorded; the claim was released.
    Recorded {
        state: State,
        attempts: i32,
        next_attempt_at: Option<DateTime<Utc>>,
    },
    /// The claim was no longer ours; nothing recorded.
    Stale,
}

/// The result of lifecycle validation (VAL-1..3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValidationRun {
    /// Validation succeeded and the fenced completion committed.
    Completed,
    /// Validation failed; the row is `failed` or `blocked` with the detail.
    Rejected { state: State, detail: String },
    /// The fence rejected the result (paused or retried meanwhile).
    Stale,
    /// An explicit validation of the same ID is running (VAL-6: at most
    /// one validation per stable ID at a time); nothing ran.
    Busy,
}

/// The result of an operator action.
#[derive(Debug, Clone)]
pub enum ActionOutcome {
    /// The transition committed; the row after it.
    Applied { prior: State, row: Box<BackfillRow> },
    /// The row already is where the action leads (LC-3); nothing changed.
    Converged(Box<BackfillRow>),
    /// Not allowed from the current state (ADM-5); nothing changed.
    Conflict(Box<BackfillRow>),
}

impl ActionOutcome {
    /// The row as the action left it.
    pub fn row(&self) -> &BackfillRow {
        match self {
            ActionOutcome::Applied { row, .. } => row,
            ActionOutcome::Converged(row) | ActionOutcome::Conflict(row) => row,
        }
    }
}

/// What [`Engine::start`] did. `start` is idempotent by stable ID: only a
/// `pending` row is started (its bound captured, once); on any other row
/// nothing changes, and the caller learns the state it found, so a row
/// already `completed` is never mistaken for a run that just happened.
#[derive(Debug, Clone)]
pub enum Started {
    /// This call captured the bound and moved the row to `running` (or
    /// straight to `validating` for an empty source set, EX-1).
    Started(Box<BackfillRow>),
    /// The row was already past `pending`; nothing changed.
    AlreadyStarted { state: State, row: Box<BackfillRow> },
}

impl Started {
    /// The row as the call left it.
    pub fn row(&self) -> &BackfillRow {
        match self {
            Started::Started(row) | Started::AlreadyStarted { row, .. } => row,
        }
    }
}

/// Why [`Engine::wait_for`] returned without the state it waited for.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    /// The timeout passed; `state` is the last one read from PostgreSQL.
    #[error("timed out waiting; the backfill is {state}")]
    Timeout { state: State },
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// Errors inside an engine transaction: anything here rolls it back.
#[derive(Debug, thiserror::Error)]
enum TxError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("stale")]
    Stale,
    #[error("busy")]
    Busy,
}

impl From<diesel::result::Error> for TxError {
    fn from(e: diesel::result::Error) -> Self {
        TxError::Engine(EngineError::Store(StoreError::Database(e)))
    }
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        TxError::Engine(EngineError::Store(e))
    }
}

fn body_error(id: &str, error: BodyError) -> EngineError {
    match error {
        BodyError::Repair(error) => EngineError::Repair {
            id: id.to_string(),
            error,
        },
        BodyError::Selection(error) => EngineError::Selection {
            id: id.to_string(),
            error,
        },
        BodyError::Key(error) => EngineError::KeyMismatch {
            id: id.to_string(),
            error,
        },
    }
}

/// Roll back a connection's batch transaction and return it to the pool;
/// if the rollback fails, the connection reports itself broken and the
/// pool discards it.
async fn rollback_to_pool(mut conn: PooledConn<'static>) {
    let _ = store::batch_rollback(&mut conn).await;
}

/// A duration in whole milliseconds, as `set_config` and the store's
/// interval arithmetic take it (saturating, never wrapping).
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The fenced execution engine over one pool and one registry.
#[derive(Clone)]
pub struct Engine {
    pool: Pool,
    registry: Arc<Registry>,
    config: Arc<EngineConfig>,
    events: Events,
    /// Batches of a repair that overlaps commits which ran one after the
    /// other because no second connection could be had (EMB-6: the
    /// embedder can see the pool is too small for overlap).
    serial_fallbacks: Arc<AtomicU64>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("registry", &self.registry)
            .field("config", &self.config)
            .finish()
    }
}

impl Engine {
    /// An engine over `pool` for the definitions in `registry`.
    pub fn new(pool: Pool, registry: Registry, config: EngineConfig) -> Result<Self, EngineError> {
        config.validate()?;
        Ok(Self {
            pool,
            registry: Arc::new(registry),
            config: Arc::new(config),
            events: Events::default(),
            serial_fallbacks: Arc::default(),
        })
    }

    /// How many batches of repairs that overlap commits ran serially
    /// because the pool could not spare a second connection (see
    /// [`crate::Repair::overlap_commits`]). Rising steadily, it says the
    /// pool is too small for the runners' overlap.
    pub fn serial_fallbacks(&self) -> u64 {
        self.serial_fallbacks.load(Ordering::Relaxed)
    }

    /// The events of the backfills this engine works on (claims, batches,
    /// state changes), and, when a host's wake-up listener runs, changes
    /// other processes announce. Hints only (EMB-3).
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// Wait until `id` is in one of `states`, reading PostgreSQL again on
    /// every event about it and at least every `poll`-ish second, for at
    /// most `timeout`. The answer is always a row read from PostgreSQL,
    /// never an event's word (EMB-3).
    pub async fn wait_for(
        &self,
        id: &str,
        states: &[State],
        timeout: Duration,
    ) -> Result<BackfillRow, WaitError> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Subscribe before the first read, so nothing between the read and
        // the wait goes unnoticed.
        let mut events = self.events.subscribe();
        loop {
            let row = self.get(id).await?;
            let state = row.state;
            if states.contains(&state) {
                return Ok(row);
            }
            let reread = tokio::time::Instant::now() + Duration::from_secs(1);
            let wake = reread.min(deadline);
            loop {
                tokio::select! {
                    event = events.recv() => match event {
                        Ok(event) if event.id() != id => continue,
                        // About `id`, lagged or closed: read again.
                        _ => break,
                    },
                    _ = tokio::time::sleep_until(wake) => break,
                }
            }
            if tokio::time::Instant::now() >= deadline {
                let row = self.get(id).await?;
                let state = row.state;
                return if states.contains(&state) {
                    Ok(row)
                } else {
                    Err(WaitError::Timeout { state })
                };
            }
        }
    }

    /// The pool this engine uses.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The local definitions.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Register (upsert) every local definition in one statement (REG-1,
    /// REG-4). A process calls this before it claims anything.
    pub async fn register(&self) -> Result<(), EngineError> {
        let ids: Vec<String> = self.registry.iter().map(|r| r.id().to_string()).collect();
        let descriptions: Vec<String> = self
            .registry
            .iter()
            .map(|r| bounded(r.description()))
            .collect();
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        store::backfill_register(&mut conn, &ids, &descriptions, &self.config.build_info).await?;
        Ok(())
    }

    /// Read one backfill row.
    pub async fn get(&self, id: &str) -> Result<BackfillRow, EngineError> {
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        store::backfill_get(&mut conn, id)
            .await?
            .ok_or_else(|| EngineError::UnknownBackfill(id.to_string()))
    }

    /// Claim the next eligible backfill this process has a definition for,
    /// skipping `exclude` (CLM-1). A new claim or a takeover after expiry
    /// advances the generation. If the row's bound or checkpoint is not of
    /// the local key type, the claim is rolled back and a typed
    /// [`EngineError::KeyMismatch`] returned: nothing changes (REG-4).
    pub async fn claim_next(
        &self,
        worker: &str,
        exclude: &[String],
    ) -> Result<Option<Claim>, EngineError> {
        let ids = self.registry.ids();
        if ids.is_empty() {
            return Ok(None);
        }
        let ttl = millis(self.config.lease_ttl);
        let registry = self.registry.clone();
        let worker = worker.to_string();
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        conn.transaction::<_, EngineError, _>(async |conn| {
            let Some(row) = store::backfill_claim(conn, &worker, &ids, exclude, ttl).await? else {
                return Ok(None);
            };
            let def = registry
                .get(&row.id)
                .ok_or_else(|| EngineError::NoDefinition(row.id.clone()))?;
            for stored in [row.bound.as_deref(), row.checkpoint.as_deref()]
                .into_iter()
                .flatten()
            {
                def.check_key(stored)
                    .map_err(|error| EngineError::KeyMismatch {
                        id: row.id.clone(),
                        error,
                    })?;
            }
            let phase = match row.state {
                State::Running => Phase::Execute,
                State::Validating => Phase::Validate,
                _ => return Err(EngineError::UnknownState(row.id.clone())),
            };
            Ok(Some(Claim {
                id: row.id,
                worker: worker.clone(),
                generation: row.generation,
                phase,
                takeover_from: row.prior_owner,
                bound: row.bound,
                checkpoint: row.checkpoint,
                open: OpenBatch::default(),
            }))
        })
        .await
    }

    /// Renew the listed claims of `worker` in one statement; returns the
    /// `(id, generation)` pairs that were renewed. A claim missing from the
    /// answer is lost: its runner must stop (CLM-3).
    pub async fn renew(
        &self,
        worker: &str,
        claims: &[(String, i64)],
    ) -> Result<Vec<(String, i64)>, EngineError> {
        if claims.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<String> = claims.iter().map(|(id, _)| id.clone()).collect();
        let gens: Vec<i64> = claims.iter().map(|(_, g)| *g).collect();
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let rows = store::lease_renew(
            &mut conn,
            worker,
            &ids,
            &gens,
            millis(self.config.lease_ttl),
        )
        .await?;
        Ok(rows.into_iter().map(|r| (r.id, r.generation)).collect())
    }

    /// Give a claim back (graceful shutdown). `false`: it was already gone.
    /// An open batch the claim carries is rolled back first, and its
    /// connection does the release; if that connection is gone (the server
    /// ended the idle session), a fresh one does.
    pub async fn release(&self, claim: &Claim) -> Result<bool, EngineError> {
        let reused = match claim.open.take() {
            Some(Open {
                mut conn, spare, ..
            }) => {
                if let Some(spare) = spare {
                    rollback_to_pool(spare).await;
                }
                store::batch_rollback(&mut conn).await.ok().map(|()| conn)
            }
            None => None,
        };
        let mut conn = match reused {
            Some(conn) => conn,
            None => self.pool.get_owned().await.map_err(StoreError::from)?,
        };
        Ok(store::lease_release(&mut conn, &claim.id, &claim.worker, claim.generation).await?)
    }

    /// Run one fenced batch (the commit seam, EX-6 and CLM-2): in ONE
    /// transaction set the timeouts, select at most the batch limit of keys
    /// in `(checkpoint, bound]`, check them (EX-3, EX-4), mutate, and advance
    /// the checkpoint with the fence. Any failure rolls back both mutation
    /// and checkpoint. On success the claim's checkpoint is updated.
    pub async fn run_batch(&self, claim: &mut Claim) -> Result<BatchOutcome, EngineError> {
        let def = self
            .registry
            .get(&claim.id)
            .ok_or_else(|| EngineError::NoDefinition(claim.id.clone()))?;
        let Some(bound) = claim.bound.as_deref() else {
            // A running row always has a bound (the table's CHECK); a claim
            // without one is not ours to interpret.
            return Err(EngineError::KeyMismatch {
                id: claim.id.clone(),
                error: KeyError::Malformed,
            });
        };
        let (stmt_ms, lock_ms) = (
            millis(self.config.statement_timeout),
            millis(self.config.lock_timeout),
        );
        // The transaction the previous batch's commit opened (maybe with
        // this batch's body already run), or a fresh one: BEGIN and the
        // SET LOCAL timeouts in one round trip.
        let (mut pooled, ahead, mut spare) = match claim.open.take() {
            Some(Open { conn, ahead, spare }) => (conn, ahead, spare),
            None => {
                let mut conn = self.pool.get_owned().await.map_err(StoreError::from)?;
                store::batch_begin(&mut conn, stmt_ms, lock_ms).await?;
                (conn, None, None)
            }
        };
        // A spare held from earlier batches goes back while the pool is
        // short, so that other runners' claims, renewals and validation get
        // a connection within one batch instead of waiting for this claim
        // to end.
        if let Some(spare) = spare.take_if(|_| !self.pool_can_spare(true)) {
            rollback_to_pool(spare).await;
        }
        let overlap = def.overlap_commits() && (spare.is_some() || self.pool_can_spare(false));
        if def.overlap_commits() && !overlap {
            self.serial_fallbacks.fetch_add(1, Ordering::Relaxed);
        }
        let conn = &mut *pooled;
        // The body borrows the claim instead of cloning it per batch.
        let body = async {
            let expected = claim.checkpoint.as_deref();
            let selected = match ahead {
                Some(selected) => selected,
                None => def.batch(conn, expected, bound).await,
            }
            .map_err(|e| body_error(&claim.id, e))?;
            // No key left in (checkpoint, bound]: the rest of the range
            // needs nothing, so the checkpoint moves to the bound.
            let (checkpoint, checkpoint_json) = match selected.last {
                Some(last) => last,
                None => (
                    bound.to_vec(),
                    render_json(bound).unwrap_or(serde_json::Value::Null),
                ),
            };
            // Stored checkpoints compare by their encoding, and the fence
            // wants it strictly forward. A key type whose encoding does not
            // strictly follow its own order (a timestamp below microsecond
            // precision encodes equal to its neighbour) would meet the
            // fence as a stale claim, batch after batch, never recorded;
            // fail closed with the reason instead (EX-3).
            if expected.is_some_and(|e| checkpoint.as_slice() <= e) {
                return Err(body_error(
                    &claim.id,
                    BodyError::Selection(SelectionError::NotAfterCheckpoint),
                )
                .into());
            }
            let advance = store::Advance {
                id: &claim.id,
                worker: &claim.worker,
                generation: claim.generation,
                expected,
                checkpoint: &checkpoint,
                checkpoint_json: &checkpoint_json,
                rows: selected.keys as i64,
            };
            // At the bound the row leaves `running` and the claim ends, so
            // no next batch is opened.
            if checkpoint.as_slice() == bound {
                let fence = store::checkpoint_advance_commit(conn, &advance).await?;
                if fence == store::FenceCommit::Stale {
                    return Err(TxError::Stale);
                }
                return Ok((checkpoint, selected.keys, None));
            }
            let shared: &AsyncPgConnection = conn;
            if overlap {
                // The fence, the COMMIT and the next BEGIN on this
                // connection while the next batch's body runs on the
                // other (`Repair::overlap_commits`). That body commits
                // only with the next batch's fence, which is sent after
                // this commit returned and expects this checkpoint.
                let (fence, other) = futures_util::join!(
                    store::checkpoint_advance_commit_reopen(shared, &advance, stmt_ms, lock_ms),
                    self.body_on_spare(&**def, spare.take(), &checkpoint, bound, stmt_ms, lock_ms)
                );
                let committed = matches!(fence, Ok(store::FenceCommit::Committed));
                let next = match other {
                    Some((other, selected)) if committed => Next::Other(other, selected),
                    Some((other, _)) => {
                        rollback_to_pool(other).await;
                        Next::Same(None)
                    }
                    None => {
                        self.serial_fallbacks.fetch_add(1, Ordering::Relaxed);
                        Next::Same(None)
                    }
                };
                if fence? == store::FenceCommit::Stale {
                    return Err(TxError::Stale);
                }
                return Ok((checkpoint, selected.keys, Some(next)));
            }
            // The fence, the COMMIT, the next BEGIN and the next batch's
            // one-statement body (if the repair has one) in one round trip
            // (CLM-2, EX-6). The body runs after the commit, in the new
            // transaction, and commits only with the next batch's fence.
            let (fence, next) = futures_util::join!(
                store::checkpoint_advance_commit_reopen(shared, &advance, stmt_ms, lock_ms),
                def.batch_ahead(shared, Some(&checkpoint), bound)
            );
            if fence? == store::FenceCommit::Stale {
                return Err(TxError::Stale);
            }
            Ok((
                checkpoint,
                selected.keys,
                Some(Next::Same(next.transpose())),
            ))
        }
        .await;
        // A spare the batch did not use (it failed first, or reached the
        // bound) goes back to the pool, its empty transaction rolled back.
        if let Some(spare) = spare.take() {
            rollback_to_pool(spare).await;
        }
        let result = match body {
            Ok(done) => Ok(done),
            Err(error) => {
                // Mutation and checkpoint roll back together (EX-6), and so
                // does a next batch sent behind a failed commit. If the
                // rollback itself fails, the connection reports itself
                // broken and the pool discards it; the batch error is the
                // one worth returning.
                let _ = store::batch_rollback(conn).await;
                Err(error)
            }
        };
        match result {
            Ok((checkpoint, keys, next)) => {
                claim.checkpoint = Some(checkpoint);
                let reached_bound = next.is_none();
                match next {
                    None => {}
                    Some(Next::Same(ahead)) => claim.open.put(Open {
                        conn: pooled,
                        ahead,
                        spare: None,
                    }),
                    Some(Next::Other(other, ahead)) => claim.open.put(Open {
                        conn: other,
                        ahead: Some(ahead),
                        spare: Some(pooled),
                    }),
                }
                Ok(BatchOutcome::Committed {
                    keys,
                    reached_bound,
                })
            }
            Err(TxError::Stale | TxError::Busy) => Ok(BatchOutcome::Stale),
            Err(TxError::Engine(e)) => Err(e),
        }
    }

    /// The next batch's body on the pair's other connection, for a repair
    /// that overlaps commits: `spare`, or a connection taken from the pool
    /// and begun (`BEGIN` and the timeouts). `None`: no connection could be
    /// had within [`Engine::spare_wait`] and nothing ran; the next batch
    /// then runs on the claim's own connection as usual.
    ///
    /// Why the wait is bounded: `pool_can_spare` only looked, so others may
    /// take the free connections before this get, and the pool's own
    /// timeout is 10 s. Meanwhile the claim's connection holds the next
    /// batch's open transaction, which the server ends once it sits idle
    /// for the statement timeout (EX-5). A get that gives up leaves any
    /// connection it started opening to the pool, for the next batch.
    async fn body_on_spare(
        &self,
        def: &dyn DynRepair,
        spare: Option<PooledConn<'static>>,
        after: &[u8],
        bound: &[u8],
        stmt_ms: i64,
        lock_ms: i64,
    ) -> Option<(PooledConn<'static>, Result<SelectedBatch, BodyError>)> {
        let mut conn = match spare {
            Some(conn) => conn,
            None => {
                let mut conn = tokio::time::timeout(self.spare_wait(), self.pool.get_owned())
                    .await
                    .ok()?
                    .ok()?;
                store::batch_begin(&mut conn, stmt_ms, lock_ms).await.ok()?;
                conn
            }
        };
        let selected = def.batch(&mut conn, Some(after), bound).await;
        Some((conn, selected))
    }

    /// How long [`Engine::body_on_spare`] waits for a pool connection: long
    /// enough to open one to a distant server, and at most half the idle
    /// time the server allows the claim's open transaction.
    fn spare_wait(&self) -> Duration {
        (self.config.statement_timeout / 2).min(Duration::from_secs(1))
    }

    /// Whether a runner may take (`holding` false) or keep (`holding`
    /// true) a second connection (`Open::spare`): only while two more stay
    /// free for claims, renewals, validation and the admin API, which is
    /// what the host's minimum pool size reserves. Checked before every
    /// batch, not only when the spare is taken: runners claimed later take
    /// their own connections, and a kept spare would then hold the reserve.
    fn pool_can_spare(&self, holding: bool) -> bool {
        let state = self.pool.state();
        let busy = state.connections.saturating_sub(state.idle_connections);
        let free = self.pool.config().max_size.saturating_sub(busy);
        free >= if holding { 2 } else { 3 }
    }

    /// Durably record a classified execution error and drop the claim
    /// (RT-1, RT-2). Fenced by the claim.
    pub async fn record_failure(
        &self,
        claim: &Claim,
        error: &RepairError,
    ) -> Result<FailureOutcome, EngineError> {
        let retry = &self.config.retry;
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let row = store::backfill_record_failure(
            &mut conn,
            &claim.id,
            &claim.worker,
            claim.generation,
            error.kind(),
            &error.message(),
            retry.max_attempts,
            millis(retry.backoff_base),
            millis(retry.backoff_max),
        )
        .await?;
        Ok(match row {
            None => FailureOutcome::Stale,
            Some(row) => FailureOutcome::Recorded {
                state: row.state,
                attempts: row.attempts,
                next_attempt_at: row.next_attempt_at,
            },
        })
    }

    /// Lifecycle validation of a claimed `validating` row (VAL-1..3): the
    /// definition's validation and the fenced completion (or rejection)
    /// run in ONE transaction, so a stale validator cannot complete a
    /// paused or retried run. Repair errors roll back and are returned for
    /// [`Engine::record_failure`].
    pub async fn validate_claimed(&self, claim: &Claim) -> Result<ValidationRun, EngineError> {
        let def = self
            .registry
            .get(&claim.id)
            .ok_or_else(|| EngineError::NoDefinition(claim.id.clone()))?
            .clone();
        let (stmt_ms, lock_ms) = (
            millis(self.config.validation_timeout),
            millis(self.config.lock_timeout),
        );
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let result = conn
            .transaction::<_, TxError, _>(async |conn| {
                store::batch_set_timeouts(conn, stmt_ms, lock_ms).await?;
                // VAL-6: lifecycle and explicit validation of one ID never
                // run at the same time, in any process.
                if !store::validation_try_lock(conn, &claim.id).await? {
                    return Err(TxError::Busy);
                }
                let verdict = def
                    .validate(conn, claim.bound.as_deref())
                    .await
                    .map_err(|e| body_error(&claim.id, e))?;
                let (id, worker, generation) = (&claim.id, &claim.worker, claim.generation);
                match verdict {
                    Validation::Success => {
                        if store::validation_complete(conn, id, worker, generation).await? {
                            // Tells waiters in other processes (a hint).
                            store::wake_notify(conn, id).await?;
                            Ok(ValidationRun::Completed)
                        } else {
                            Err(TxError::Stale)
                        }
                    }
                    Validation::Failure(ref detail) | Validation::Blocked(ref detail) => {
                        let state = if matches!(verdict, Validation::Blocked(_)) {
                            State::Blocked
                        } else {
                            State::Failed
                        };
                        let detail = bounded(detail.as_str());
                        if store::validation_reject(conn, id, worker, generation, state, &detail)
                            .await?
                        {
                            store::wake_notify(conn, id).await?;
                            Ok(ValidationRun::Rejected { state, detail })
                        } else {
                            Err(TxError::Stale)
                        }
                    }
                }
            })
            .await;
        match result {
            Ok(run) => Ok(run),
            Err(TxError::Stale) => Ok(ValidationRun::Stale),
            Err(TxError::Busy) => Ok(ValidationRun::Busy),
            Err(TxError::Engine(e)) => Err(e),
        }
    }

    /// `start` (docs/CONTRACT.md section 3) in its own transaction; see
    /// [`Started`] for what a second call answers.
    pub async fn start(&self, id: &str) -> Result<Started, EngineError> {
        Ok(match self.act(id, Action::Start).await? {
            ActionOutcome::Applied { row, .. } => Started::Started(row),
            ActionOutcome::Converged(row) | ActionOutcome::Conflict(row) => {
                Started::AlreadyStarted {
                    state: row.state,
                    row,
                }
            }
        })
    }

    /// `pause` in its own transaction.
    pub async fn pause(&self, id: &str) -> Result<ActionOutcome, EngineError> {
        self.act(id, Action::Pause).await
    }

    /// `resume` in its own transaction.
    pub async fn resume(&self, id: &str) -> Result<ActionOutcome, EngineError> {
        self.act(id, Action::Resume).await
    }

    /// `retry` in its own transaction.
    pub async fn retry(&self, id: &str) -> Result<ActionOutcome, EngineError> {
        self.act(id, Action::Retry).await
    }

    /// Perform `action` in its own transaction.
    pub async fn act(&self, id: &str, action: Action) -> Result<ActionOutcome, EngineError> {
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let id = id.to_string();
        conn.transaction::<_, EngineError, _>(async |conn| self.act_in(conn, &id, action).await)
            .await
    }

    /// Perform a lifecycle action inside the caller's transaction (the admin
    /// layer adds its audit row and idempotency record to the same one).
    /// Locks the row first, so the prior state is exact and concurrent
    /// actions on one ID serialize. `start` captures the bound with the
    /// local definition in this same transaction (docs/CONTRACT.md section 3). No
    /// action changes bound or checkpoint or selects `completed` (LC-4).
    pub async fn act_in(
        &self,
        conn: &mut AsyncPgConnection,
        id: &str,
        action: Action,
    ) -> Result<ActionOutcome, EngineError> {
        let row = store::backfill_lock(conn, id)
            .await?
            .ok_or_else(|| EngineError::UnknownBackfill(id.to_string()))?;
        let prior = row.state;
        if !action.sources().contains(&prior) {
            return Ok(if action.converged().contains(&prior) {
                ActionOutcome::Converged(Box::new(row))
            } else {
                ActionOutcome::Conflict(Box::new(row))
            });
        }
        let after = match action {
            Action::Start => self.start_in(conn, id).await?,
            Action::Pause => store::backfill_pause(conn, id).await?,
            Action::Resume => store::backfill_reactivate(conn, id, &[State::Paused], false).await?,
            Action::Retry => {
                store::backfill_reactivate(conn, id, &[State::Blocked, State::Failed], true).await?
            }
            Action::Validate => None,
        };
        // Wake every supervisor when work became claimable (a hint,
        // delivered only on commit).
        if matches!(action, Action::Start | Action::Resume | Action::Retry) && after.is_some() {
            store::wake_notify(conn, id).await?;
        }
        // The row is locked, so the fenced UPDATE cannot miss; if it did,
        // report the current state rather than a transition.
        Ok(match after {
            Some(row) => ActionOutcome::Applied {
                prior,
                row: Box::new(row),
            },
            None => ActionOutcome::Conflict(Box::new(row)),
        })
    }

    async fn start_in(
        &self,
        conn: &mut AsyncPgConnection,
        id: &str,
    ) -> Result<Option<BackfillRow>, EngineError> {
        let def = self
            .registry
            .get(id)
            .ok_or_else(|| EngineError::NoDefinition(id.to_string()))?;
        store::batch_set_timeouts(
            conn,
            millis(self.config.validation_timeout),
            millis(self.config.lock_timeout),
        )
        .await?;
        let source = def.capture(conn).await.map_err(|e| body_error(id, e))?;
        let key_type = def.key_type();
        let values = match &source {
            EncodedSource::Empty => StartValues {
                bound: None,
                bound_json: None,
                key_type: &key_type,
                source_rows: Some(0),
            },
            EncodedSource::Bounded {
                upper,
                upper_json,
                rows,
            } => StartValues {
                bound: Some(upper),
                bound_json: Some(upper_json),
                key_type: &key_type,
                source_rows: *rows,
            },
        };
        Ok(store::backfill_start(conn, id, values).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_rejects_timeouts_postgresql_cannot_take() {
        assert!(EngineConfig::default().validate().is_ok());
        let day = Duration::from_secs(86_400);
        for config in [
            EngineConfig {
                statement_timeout: 30 * day,
                ..EngineConfig::default()
            },
            EngineConfig {
                lock_timeout: 30 * day,
                ..EngineConfig::default()
            },
            EngineConfig {
                validation_timeout: 30 * day,
                ..EngineConfig::default()
            },
            EngineConfig {
                statement_timeout: Duration::ZERO,
                ..EngineConfig::default()
            },
        ] {
            assert!(matches!(config.validate(), Err(EngineError::Config(_))));
        }
        let edge = EngineConfig {
            statement_timeout: Duration::from_millis(i32::MAX as u64),
            ..EngineConfig::default()
        };
        assert!(edge.validate().is_ok());
    }
}
