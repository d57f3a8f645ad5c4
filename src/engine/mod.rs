//! Fenced execution: start, claim, renew, release, the batch commit seam,
//! failure classification and lifecycle validation.
//!
//! Every method is one short PostgreSQL transaction on one pooled
//! connection; the engine keeps no state of a claim between calls beyond
//! what the caller hands back in a [`Claim`] (what it keeps is the
//! process's: counters, and the presence a claim poll may record). The one connection that outlives a
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
//! commit rolls back. A repair with a loop inside the server
//! (`Repair::server_batch`, EX-8) runs a step as one call of its
//! procedure instead, which commits batch after batch behind the same
//! fence and leaves no batch open. The runtime (`backfill-actors`) drives
//! these calls; it never sees SQL.

mod actions;
mod batch;
mod blocking;
mod claim;
mod config;
mod dry_report;
mod dry_run;
mod error;
mod gate;
mod installed;
mod latency;
mod lease;
mod offers;
mod outcome;
mod partition;
mod presence;
mod server_loop;
mod settings;
mod undo;
mod validate;

pub use claim::{Claim, Phase};
pub use config::{EngineConfig, RetryPolicy};
pub use dry_report::{
    DryBatch, DryRunError, DryRunOptions, DryRunReport, Forecast, SampleRow,
    DRY_RUN_DEFAULT_BATCHES, DRY_RUN_DEFAULT_SAMPLE, DRY_RUN_MAX_BATCHES, DRY_RUN_MAX_SAMPLE,
    SAMPLE_VALUE_MAX_CHARS,
};
pub use dry_run::{DryRun, DRY_RUN_COUNT_TIMEOUT};
pub use error::EngineError;
pub use gate::Gate;
#[doc(hidden)]
pub use gate::SETTINGS_REFRESH;
pub use outcome::{ActionOutcome, BatchOutcome, FailureOutcome, Started, ValidationRun, WaitError};
pub(crate) use outcome::{ExplicitOutcome, ExplicitValidation};
pub use settings::SettingsChange;
pub use undo::{PruneOutcome, UndoOutcome, UNDOABLE};

use crate::events::{Event, Events};
use crate::lifecycle::State;
use crate::repair::{bounded, Registry};
use crate::store::{self, BackfillRow, Pool, StoreError};
use crate::throttle::budget::RunnerBudget;
use crate::throttle::health::Monitor;
use crate::throttle::latency::LatencyMonitor;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
    /// Changes other processes announced (the wake-up NOTIFY): a claim
    /// reads its settings again when this moved (THR-4).
    changes: Arc<AtomicU64>,
    /// Claim polls PostgreSQL answered: a fleet's refresh takes a rising
    /// count as proof that the database still answers (FLT-1).
    polls_answered: Arc<AtomicU64>,
    /// The process's health monitor, whose cached signals hold batches
    /// back (THR-1); unset for an engine driven without a host.
    health: Arc<std::sync::OnceLock<Arc<Monitor>>>,
    /// The database's latency monitor, whose samples pace budgeted
    /// claims (THR-6); unset for an engine driven without a host.
    latency: Arc<std::sync::OnceLock<Arc<LatencyMonitor>>>,
    /// The fleet's runner budget and this engine's database name in it
    /// (FLT-2), when attached.
    budget: Arc<std::sync::OnceLock<(Arc<RunnerBudget>, String)>>,
    /// The presences the lease renewer offers for the claim polls to
    /// record between its rounds (PAR-6).
    offers: Arc<offers::Offers>,
    /// The loops inside the server installed for the registry's repairs
    /// (EX-8).
    loops: Arc<installed::Loops>,
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
    /// An engine over `pool` for the definitions in `registry`. Refuses
    /// an invalid configuration and dependencies between definitions that
    /// name an unregistered ID or form a cycle (FLT-4).
    pub fn new(pool: Pool, registry: Registry, config: EngineConfig) -> Result<Self, EngineError> {
        config.validate()?;
        registry.check_dependencies()?;
        Ok(Self {
            pool,
            registry: Arc::new(registry),
            config: Arc::new(config),
            events: Events::default(),
            serial_fallbacks: Arc::default(),
            changes: Arc::default(),
            polls_answered: Arc::default(),
            health: Arc::default(),
            latency: Arc::default(),
            budget: Arc::default(),
            offers: Arc::default(),
            loops: Arc::default(),
        })
    }

    /// How many claim polls PostgreSQL has answered since the engine was
    /// made (a claim, or the answer that nothing is claimable). A poll
    /// that failed, or that asked nothing because nothing of this
    /// process could be claimed, does not count. A fleet's refresh reads
    /// it to see that a database still answers without asking it again
    /// (FLT-1).
    #[doc(hidden)]
    pub fn polls_answered(&self) -> u64 {
        self.polls_answered.load(Ordering::Relaxed)
    }

    /// Count one claim poll PostgreSQL answered.
    pub(crate) fn note_poll_answered(&self) {
        self.polls_answered.fetch_add(1, Ordering::Relaxed);
    }

    /// How many batches of repairs that overlap commits ran serially
    /// because the pool could not spare a second connection (see
    /// [`crate::Repair::overlap_commits`]). Rising steadily, it says the
    /// pool is too small for the runners' overlap.
    pub fn serial_fallbacks(&self) -> u64 {
        self.serial_fallbacks.load(Ordering::Relaxed)
    }

    /// Hold batches back on `monitor`'s signals (THR-1). Set once, before
    /// the runtime starts; a second monitor is refused (`false`).
    pub fn attach_health(&self, monitor: Arc<Monitor>) -> bool {
        self.health.set(monitor).is_ok()
    }

    /// Pace budgeted claims by `monitor`'s samples (THR-6). Set once,
    /// before the runtime starts; a second monitor is refused (`false`).
    pub(crate) fn attach_latency(&self, monitor: Arc<LatencyMonitor>) -> bool {
        self.latency.set(monitor).is_ok()
    }

    /// Take every claim on a permit of `budget`, as the database named
    /// `database` (FLT-2). Set once, before the runtime starts; a second
    /// budget is refused (`false`).
    pub fn attach_budget(&self, budget: Arc<RunnerBudget>, database: String) -> bool {
        self.budget.set((budget, database)).is_ok()
    }

    /// The health monitor batches are paced by, if one is attached.
    pub fn health(&self) -> Option<&Arc<Monitor>> {
        self.health.get()
    }

    /// The events of the backfills this engine works on (claims, batches,
    /// state changes), and, when a host's wake-up listener runs, changes
    /// other processes announce. Hints only (EMB-3).
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// Wait until `id` is in one of `states`, for at most `timeout`,
    /// reading PostgreSQL again at once on an event about its state (or a
    /// change another process announced), at most once per
    /// [`EngineConfig::wait_progress_interval`] while only its progress
    /// comes, and after [`EngineConfig::wait_poll_interval`] without any
    /// event. The answer is always a row read from PostgreSQL, never an
    /// event's word (EMB-3).
    ///
    /// Returns [`WaitError::NeedsOperator`] as soon as a read shows the
    /// backfill cannot get there without an operator (EMB-8): `blocked`
    /// or `failed` when those are not among `states`, or `pending` with a
    /// recorded automatic start that failed for other than a passing
    /// reason. Until the automatic start's next try succeeds, a row whose
    /// cause was just fixed still carries that record.
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
            if let Some(stuck) = WaitError::needs_operator(&row, states) {
                return Err(stuck);
            }
            let read_at = tokio::time::Instant::now();
            let mut wake = (read_at + self.config.wait_poll_interval).min(deadline);
            loop {
                tokio::select! {
                    event = events.recv() => match event {
                        Ok(event) if event.id() != id => continue,
                        // A claim or a batch of `id` leaves its state as it
                        // was: read again at the interval, not per batch.
                        Ok(Event::Claimed { .. } | Event::Progress { .. }) => {
                            wake = wake.min(read_at + self.config.wait_progress_interval);
                        }
                        // Its state, another process's change, lagged or
                        // closed: read again now.
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
                    Err(WaitError::needs_operator(&row, states)
                        .unwrap_or(WaitError::Timeout { state }))
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
}

#[cfg(test)]
mod tests {
    use super::{Engine, EngineConfig};
    use crate::events::Event;
    use crate::repair::{Registry, SqlRepair};
    use crate::store::Pool;
    use diesel_async::pooled_connection::AsyncDieselConnectionManager;
    use diesel_async::AsyncPgConnection;
    use std::time::Duration;

    /// An engine whose pool of `max_size` never connects: nothing listens
    /// on port 1, and a checkout gives up after a millisecond. It opens no
    /// connection up front and starts no task, so a plain test can build
    /// it, and any step that asks the pool for a connection fails with
    /// `StoreError::Pool` instead of reaching a server.
    pub(super) fn unconnected_engine(registry: Registry, max_size: u32) -> Engine {
        let manager = AsyncDieselConnectionManager::<AsyncPgConnection>::new(
            "postgres://backfill@127.0.0.1:1/nowhere",
        );
        let pool = Pool::builder()
            .max_size(max_size)
            .min_idle(None)
            .max_lifetime(None)
            .idle_timeout(None)
            .connection_timeout(Duration::from_millis(1))
            .build_unchecked(manager);
        Engine::new(pool, registry, EngineConfig::default()).expect("the default config is valid")
    }

    /// A registry of one SQL definition, `t.v1` over `t` (a bigint key),
    /// with a fixed batch of `batch` keys.
    pub(super) fn one_definition(batch: u32) -> Registry {
        let repair = SqlRepair::new("t.v1", "t")
            .key("id")
            .set("n = 0")
            .validate_where("n <> 0")
            .batch_size(batch)
            .build()
            .expect("a complete definition");
        Registry::new().with(repair).expect("registers")
    }

    /// EMB-3: every call of `events` hands out the engine's one bus, so a
    /// subscription taken through one call hears what is published
    /// through another (and through a clone of the engine).
    #[test]
    fn emb03_events_is_the_engines_one_bus() {
        let engine = unconnected_engine(one_definition(10), 4);
        let mut events = engine.events().subscribe();
        let changed = Event::Changed { id: "t.v1".into() };
        engine.clone().events().publish(|| changed.clone());
        assert_eq!(events.try_recv().ok(), Some(changed));
    }
}
