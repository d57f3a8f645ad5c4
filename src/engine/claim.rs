//! The claim a worker holds, and what it carries from one batch to the
//! next: the open batch transaction and the state of its pacing.

use super::error::EngineError;
use crate::key::render_json;
use crate::pace::{Policy, Sizing};
use crate::repair::{BodyError, DynRepair, Registry, RepairError, SelectedBatch};
use crate::settings::Settings;
use crate::store::{self, PooledConn};
use std::time::{Duration, Instant};

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
    /// The partition this claim advances (PAR-2); `None` for a claim of
    /// the backfill's own row (a backfill without partitions, or any
    /// backfill's validation). A partition claim's `bound` is the
    /// partition's upper end and its checkpoint the partition's.
    pub partition: Option<u32>,
    /// The previous owner whose expired claim this one took over (CLM-4).
    pub takeover_from: Option<String>,
    pub(crate) bound: Option<Vec<u8>>,
    pub(crate) checkpoint: Option<Vec<u8>>,
    /// The next batch's transaction, opened by the previous batch's commit
    /// message (see the [`engine`](crate::engine) module docs).
    pub(crate) open: OpenBatch,
    /// Settings, sizing and pause of this claim's batches (THR-1..4).
    pub(crate) pacing: Pacing,
}

/// What a claim knows of its pacing.
#[derive(Debug, Default)]
pub(crate) struct Pacing {
    /// The live settings as last read, and when.
    pub(super) settings: Settings,
    pub(super) read_at: Option<Instant>,
    /// The engine's change count when the settings were read.
    pub(super) seen_changes: u64,
    /// The size in force the row had when the claim first read it.
    pub(super) stored_size: Option<u32>,
    sizing: Option<Sizing>,
    /// When the last batch committed (the pause counts from there).
    pub(super) last_commit: Option<Instant>,
    /// The signal recorded on the row as holding this claim back.
    pub(super) throttled: Option<&'static str>,
    /// The checked signals that were unknown when a batch last went ahead
    /// without them (logged once per change, THR-2).
    pub(super) unknown: Vec<&'static str>,
    /// The size and duration of the last committed batch.
    pub(crate) last: (u32, Duration),
    /// The size the last step gave a body it sent ahead.
    pub(super) sent_ahead: u32,
}

impl Pacing {
    /// The size the next batch runs with under the settings as last read
    /// and the definition's limit and target, asked again every batch.
    pub(super) fn size(&mut self, def: &dyn DynRepair) -> u32 {
        let policy = Policy::new(&self.settings, def.batch_limit(), def.batch_target());
        let stored = self.stored_size;
        let sizing = self
            .sizing
            .get_or_insert_with(|| Sizing::new(policy, stored));
        sizing.set_policy(policy);
        sizing.size()
    }

    /// A batch whose body ran with `size` committed in a step that ran
    /// with `limit`; `ran` keys were selected and changed in this step's
    /// statements, which took `took`.
    pub(super) fn committed(&mut self, size: u32, limit: u32, ran: usize, took: Duration) {
        if let Some(sizing) = self.sizing.as_mut() {
            sizing.observe(ran, took);
        }
        self.last = (size, took);
        self.sent_ahead = limit;
        self.last_commit = Some(Instant::now());
    }

    /// Whether the operator asked for a pause between batches: the commit
    /// then opens no next transaction, since it would sit idle through
    /// the pause.
    pub(super) fn pausing(&self) -> bool {
        !self.settings.pause().is_zero()
    }

    /// The size to leave in force after a statement timeout: half the
    /// current one within the target's range (THR-3). `None` for a fixed
    /// size, which is the operator's or the definition's to change.
    pub(super) fn after_timeout(&self) -> Option<i32> {
        let mut sizing = self.sizing.clone()?;
        let before = sizing.size();
        let after = sizing.on_timeout();
        (after != before).then(|| i32::try_from(after).unwrap_or(i32::MAX))
    }
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
pub(super) struct Open {
    pub(super) conn: PooledConn<'static>,
    /// The next batch's body, already run in this transaction.
    pub(super) ahead: Option<Result<SelectedBatch, BodyError>>,
    /// A repair that overlaps commits (`Repair::overlap_commits`): the
    /// pair's other connection, inside the transaction the previous
    /// batch's commit message opened (`BEGIN` and timeouts, nothing run).
    /// The batch after next runs its body there while the next batch
    /// commits on `conn`.
    pub(super) spare: Option<PooledConn<'static>>,
}

impl OpenBatch {
    pub(super) fn take(&self) -> Option<Open> {
        self.0.lock().take()
    }

    pub(super) fn put(&self, open: Open) {
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
    /// The size and duration of the last batch this claim committed.
    pub fn last_batch(&self) -> (u32, std::time::Duration) {
        self.pacing.last
    }

    /// The size a failure leaves in force: a statement timeout halves it
    /// before the retry (THR-3); any other failure leaves it.
    pub(super) fn size_after(&self, error: &RepairError) -> Option<i32> {
        match error {
            RepairError::Retryable(m) if m == "statement timeout" => self.pacing.after_timeout(),
            _ => None,
        }
    }

    /// The committed checkpoint as JSON, as far as this claim knows.
    pub fn checkpoint_json(&self) -> Option<serde_json::Value> {
        self.checkpoint.as_deref().and_then(render_json)
    }
}

/// Roll back a connection's batch transaction and return it to the pool;
/// if the rollback fails, the connection reports itself broken and the
/// pool discards it.
pub(super) async fn rollback_to_pool(mut conn: PooledConn<'static>) {
    let _ = store::batch_rollback(&mut conn).await;
}

/// Check a claimed row (a backfill's or a partition's) against this
/// process's definition of `id` before anything runs (REG-4: fail
/// closed): a definition must exist, and every stored key (`keys`: its
/// bound or upper end, its checkpoint) must be of the definition's key
/// type. Either miss is a typed error and the caller's claim transaction
/// rolls back.
pub(super) fn check_claimed(
    registry: &Registry,
    id: &str,
    keys: [Option<&[u8]>; 2],
) -> Result<(), EngineError> {
    let def = registry
        .get(id)
        .ok_or_else(|| EngineError::NoDefinition(id.to_string()))?;
    for stored in keys.into_iter().flatten() {
        def.check_key(stored)
            .map_err(|error| EngineError::KeyMismatch {
                id: id.to_string(),
                error,
            })?;
    }
    Ok(())
}
