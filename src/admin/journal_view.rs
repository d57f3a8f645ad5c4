//! What the admin boundary shows of a journaled backfill and its undo
//! (UNDO-2, UNDO-4): a leaf of view types, shared by the backfill view and
//! the undo actions.

use crate::lifecycle::State;
use crate::store::JournalStats;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How many conflict keys a view lists (UNDO-2); the count is exact.
pub const MAX_CONFLICT_KEYS: i64 = 20;

/// The undo of a backfill, as the original's view names it (UNDO-2).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct UndoLink {
    /// The undo's stable ID (`<id>.undo`).
    pub id: String,
    /// Its lifecycle state.
    pub state: State,
}

/// A backfill's journal (UNDO-4) and what its undo did with it (UNDO-2).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct JournalView {
    /// Journaled rows: the table rows committed batches changed.
    pub rows: i64,
    /// Their size as stored, in bytes.
    pub bytes: i64,
    /// Rows the undo restored.
    pub restored: i64,
    /// Rows the undo left alone because the application changed them
    /// since the repair wrote them (conflicts).
    pub conflicts: i64,
    /// The key columns of up to 20 conflicting rows, in journal order.
    pub conflict_keys: Vec<Value>,
}

impl JournalView {
    /// The view of `stats` with the first conflict keys.
    pub fn new(stats: JournalStats, conflict_keys: Vec<Value>) -> Self {
        Self {
            rows: stats.rows,
            bytes: stats.bytes,
            restored: stats.restored,
            conflicts: stats.conflicts,
            conflict_keys,
        }
    }
}
