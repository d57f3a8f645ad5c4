//! Runtime counters for operators (OBS-1): what this process attempted and
//! what PostgreSQL accepted. Plain atomics, updated where the supervisor
//! logs the same events; no I/O on the batch path. Labels a host derives
//! from them use bounded vocabularies only (OBS-2): never IDs or keys.
//! Telemetry never authorizes anything.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one runtime.
#[derive(Debug, Default)]
pub struct RuntimeMetrics {
    pub claims_acquired: AtomicU64,
    pub claims_taken_over: AtomicU64,
    pub claims_renewed: AtomicU64,
    pub claims_lost: AtomicU64,
    pub renew_failures: AtomicU64,
    pub claims_released: AtomicU64,
    pub stale_rejections: AtomicU64,
    pub batches_attempted: AtomicU64,
    pub batches_committed: AtomicU64,
    pub keys_committed: AtomicU64,
    pub batch_millis_total: AtomicU64,
    pub errors_retryable: AtomicU64,
    pub errors_blocked: AtomicU64,
    pub errors_failed: AtomicU64,
    pub fail_closed: AtomicU64,
    pub validations_completed: AtomicU64,
    pub validations_rejected: AtomicU64,
    pub validation_errors: AtomicU64,
    pub validation_millis_total: AtomicU64,
    /// Runners that hold a claim but start no batch because a health
    /// signal is past its threshold (a gauge).
    pub runners_throttled: AtomicU64,
    /// Times a runner became throttled.
    pub throttle_events: AtomicU64,
}

/// Add one to a counter.
pub(crate) fn inc(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Take one from a gauge.
pub(crate) fn dec(gauge: &AtomicU64) {
    gauge.fetch_sub(1, Ordering::Relaxed);
}

/// Add `n` to a counter.
pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// A counter's exposition name, its help text, and the field that holds
/// it.
type Counter = (
    &'static str,
    &'static str,
    fn(&RuntimeMetrics) -> &AtomicU64,
);

/// Every counter, in exposition order.
const COUNTERS: [Counter; 19] = [
    (
        "backfill_claims_acquired_total",
        "Claims acquired (new claims).",
        |m| &m.claims_acquired,
    ),
    (
        "backfill_claims_taken_over_total",
        "Claims acquired by takeover of an expired owner.",
        |m| &m.claims_taken_over,
    ),
    (
        "backfill_claims_renewed_total",
        "Successful claim renewals.",
        |m| &m.claims_renewed,
    ),
    (
        "backfill_claims_lost_total",
        "Claims that could no longer be renewed.",
        |m| &m.claims_lost,
    ),
    (
        "backfill_renew_failures_total",
        "Renewal rounds that failed to reach PostgreSQL.",
        |m| &m.renew_failures,
    ),
    (
        "backfill_claims_released_total",
        "Claims given back on shutdown.",
        |m| &m.claims_released,
    ),
    (
        "backfill_stale_rejections_total",
        "Batches or validations rejected by the fence at commit.",
        |m| &m.stale_rejections,
    ),
    (
        "backfill_batches_attempted_total",
        "Batches started.",
        |m| &m.batches_attempted,
    ),
    (
        "backfill_batches_committed_total",
        "Batches whose mutation and checkpoint committed.",
        |m| &m.batches_committed,
    ),
    (
        "backfill_keys_committed_total",
        "Keys whose mutation committed.",
        |m| &m.keys_committed,
    ),
    (
        "backfill_batch_milliseconds_total",
        "Time spent in batches.",
        |m| &m.batch_millis_total,
    ),
    (
        "backfill_errors_retryable_total",
        "Retryable errors recorded (backoff scheduled).",
        |m| &m.errors_retryable,
    ),
    (
        "backfill_errors_blocked_total",
        "Errors that blocked a backfill.",
        |m| &m.errors_blocked,
    ),
    (
        "backfill_errors_failed_total",
        "Errors that failed a backfill (fatal or exhausted).",
        |m| &m.errors_failed,
    ),
    (
        "backfill_fail_closed_total",
        "Rows this process refused to interpret (REG-4).",
        |m| &m.fail_closed,
    ),
    (
        "backfill_validations_completed_total",
        "Lifecycle validations that completed a backfill.",
        |m| &m.validations_completed,
    ),
    (
        "backfill_validations_rejected_total",
        "Lifecycle validations that found the postcondition false.",
        |m| &m.validations_rejected,
    ),
    (
        "backfill_validation_errors_total",
        "Lifecycle validations that errored.",
        |m| &m.validation_errors,
    ),
    (
        "backfill_validation_milliseconds_total",
        "Time spent in lifecycle validation.",
        |m| &m.validation_millis_total,
    ),
];

impl RuntimeMetrics {
    /// `(name, help, value)` of every counter, for exposition.
    pub fn snapshot(&self) -> Vec<(&'static str, &'static str, u64)> {
        COUNTERS
            .iter()
            .map(|(name, help, counter)| (*name, *help, counter(self).load(Ordering::Relaxed)))
            .collect()
    }
}
