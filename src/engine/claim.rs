//! The claim a worker holds, and the open batch transaction it carries
//! from one batch to the next.

use crate::key::render_json;
use crate::repair::{BodyError, SelectedBatch};
use crate::store::{self, PooledConn};

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
    /// message (see the [`engine`](crate::engine) module docs).
    pub(crate) open: OpenBatch,
    /// Settings, sizing and pause of this claim's batches (THR-1..4).
    pub(crate) pacing: super::pacing::Pacing,
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
