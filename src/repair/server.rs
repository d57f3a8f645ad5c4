//! [`ServerBatch`]: what a repair hands the engine to run its batches in a
//! loop inside PostgreSQL (EX-8).

use std::time::Duration;

/// A repair's batch as a statement PostgreSQL runs in a loop of its own
/// (EX-8), from [`Repair::server_batch`](super::Repair::server_batch).
///
/// The engine installs a procedure around `statement` (once per process
/// and text, named by the text's hash) and calls it once per step. The
/// procedure runs batch after batch, each in its own transaction that
/// commits the batch's mutations with its fenced checkpoint, exactly as a
/// batch sent by the engine does (EX-6, CLM-2), and returns after the
/// first batch that ends later than `slice` from the call's start, at the
/// bound, or at the first error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerBatch {
    /// One statement: it selects at most the repair's
    /// [`batch_limit`](super::Repair::batch_limit) keys in `($1, $2]`
    /// (the checkpoint and the bound, `bigint`; `$1` is
    /// `-9223372036854775808` before the first key), changes them, and
    /// answers one row of three `bigint` columns: the first and last key
    /// selected and their count (`NULL`, `NULL`, `0` when none is left).
    /// The limit is a literal in the text, so PostgreSQL keeps one plan.
    /// It must not name `$3` or later, nor variables whose names start
    /// with `__bf_`, which are the procedure's own.
    pub statement: String,
    /// How long one call may keep starting batches: pauses, throttles,
    /// settings and events act between calls.
    pub slice: Duration,
}
