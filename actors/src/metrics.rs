//! Runtime metrics for operators (OBS-1): what this process attempted, what
//! PostgreSQL accepted, and how long batches and lifecycle validations
//! took. Counters and histograms are atomics inside `prometheus` handles,
//! updated where the supervisor, runners and validator log the same
//! events; nothing here does I/O, so the batch path pays a few atomic adds.
//! A host exposes them by registering them into its own registry at scrape
//! time ([`RuntimeMetrics::register`]); this crate renders no text and
//! serves nothing.
//!
//! Labels come from bounded vocabularies only (OBS-2): the outcome labels
//! below are fixed enums, never IDs or keys. Telemetry never authorizes
//! anything.

use crate::{BackendError, StepOutcome, ValidationOutcome};
use prometheus::core::Collector;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, Opts, Registry,
};
use std::time::Duration;

/// Upper bounds, in seconds, of the duration histograms' buckets (a final
/// `+Inf` bucket is implied). A batch of a cheap repair commits in about a
/// millisecond; one held up by a lock or a slow statement is bounded by the
/// statement and lock timeouts, whose defaults are tens of seconds; a
/// lifecycle validation scans and may take as long. Roughly 2.5x steps keep
/// each decade resolved with 15 buckets.
pub const DURATION_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// How a batch ended: the `outcome` label of
/// `backfill_batch_duration_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchEnd {
    /// Mutation and checkpoint committed.
    Committed,
    /// The fence rejected the batch of a stale owner; it rolled back. The
    /// same batches, and only they, count in
    /// `backfill_stale_rejections_total`.
    Stale,
    /// An operator's pause took effect at the fence; the batch rolled
    /// back. Kept apart from `stale` because a pause is no stale owner
    /// and does not count in `backfill_stale_rejections_total`.
    Paused,
    /// Any failure: recorded (retrying, blocked, failed), fail-closed, or
    /// a backend that could not make the outcome durable.
    Error,
}

impl BatchEnd {
    /// Every label value, in exposition order.
    pub const ALL: [BatchEnd; 4] = [
        BatchEnd::Committed,
        BatchEnd::Stale,
        BatchEnd::Paused,
        BatchEnd::Error,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            BatchEnd::Committed => "committed",
            BatchEnd::Stale => "stale",
            BatchEnd::Paused => "paused",
            BatchEnd::Error => "error",
        }
    }

    fn of(outcome: &Result<StepOutcome, BackendError>) -> Self {
        match outcome {
            Ok(StepOutcome::Committed { .. }) => BatchEnd::Committed,
            Ok(StepOutcome::Stale) => BatchEnd::Stale,
            Ok(StepOutcome::Paused) => BatchEnd::Paused,
            Ok(StepOutcome::Recorded { .. } | StepOutcome::FailClosed { .. }) | Err(_) => {
                BatchEnd::Error
            }
        }
    }
}

/// How a lifecycle validation ended: the `outcome` label of
/// `backfill_validation_duration_seconds`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValidationEnd {
    /// The postcondition held and the fenced completion committed.
    Completed,
    /// The postcondition was false; the backfill is `failed` or `blocked`.
    Rejected,
    /// The fence rejected the completion.
    Stale,
    /// Busy (an explicit validation held the ID), recorded errors,
    /// fail-closed rows and backend failures.
    Error,
}

impl ValidationEnd {
    /// Every label value, in exposition order.
    pub const ALL: [ValidationEnd; 4] = [
        ValidationEnd::Completed,
        ValidationEnd::Rejected,
        ValidationEnd::Stale,
        ValidationEnd::Error,
    ];

    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            ValidationEnd::Completed => "completed",
            ValidationEnd::Rejected => "rejected",
            ValidationEnd::Stale => "stale",
            ValidationEnd::Error => "error",
        }
    }

    fn of(outcome: &Result<ValidationOutcome, BackendError>) -> Self {
        match outcome {
            Ok(ValidationOutcome::Completed) => ValidationEnd::Completed,
            Ok(ValidationOutcome::Rejected { .. }) => ValidationEnd::Rejected,
            Ok(ValidationOutcome::Stale) => ValidationEnd::Stale,
            Ok(
                ValidationOutcome::Busy
                | ValidationOutcome::Recorded { .. }
                | ValidationOutcome::FailClosed { .. },
            )
            | Err(_) => ValidationEnd::Error,
        }
    }
}

/// Metrics of one runtime. The handles are shared (cloning one clones a
/// reference to the same atomic), so tests and hosts read the same values
/// the actors write.
#[derive(Clone)]
pub struct RuntimeMetrics {
    /// New claims acquired (`backfill_claims_acquired_total`).
    pub claims_acquired: IntCounter,
    /// Claims acquired by taking over an expired owner's
    /// (`backfill_claims_taken_over_total`).
    pub claims_taken_over: IntCounter,
    /// Successful claim renewals (`backfill_claims_renewed_total`).
    pub claims_renewed: IntCounter,
    /// Claims that could no longer be renewed
    /// (`backfill_claims_lost_total`).
    pub claims_lost: IntCounter,
    /// Renewal rounds that failed to reach PostgreSQL
    /// (`backfill_renew_failures_total`).
    pub renew_failures: IntCounter,
    /// Claims given back on shutdown (`backfill_claims_released_total`).
    pub claims_released: IntCounter,
    /// Batches or validations of a stale owner rejected by the fence at
    /// commit, a pause's batch not counted
    /// (`backfill_stale_rejections_total`): the batches observed under
    /// [`BatchEnd::Stale`] and the validations under
    /// [`ValidationEnd::Stale`], so the counter and the histograms agree.
    pub stale_rejections: IntCounter,
    /// Batches started (`backfill_batches_attempted_total`).
    pub batches_attempted: IntCounter,
    /// Batches whose mutation and checkpoint committed
    /// (`backfill_batches_committed_total`).
    pub batches_committed: IntCounter,
    /// Keys whose mutation committed (`backfill_keys_committed_total`).
    pub keys_committed: IntCounter,
    /// Retryable errors recorded with a backoff
    /// (`backfill_errors_retryable_total`).
    pub errors_retryable: IntCounter,
    /// Errors that blocked a backfill (`backfill_errors_blocked_total`).
    pub errors_blocked: IntCounter,
    /// Errors that failed a backfill, fatal or exhausted
    /// (`backfill_errors_failed_total`).
    pub errors_failed: IntCounter,
    /// Rows this process refused to interpret, REG-4
    /// (`backfill_fail_closed_total`).
    pub fail_closed: IntCounter,
    /// Lifecycle validations that completed a backfill
    /// (`backfill_validations_completed_total`).
    pub validations_completed: IntCounter,
    /// Lifecycle validations that found the postcondition false
    /// (`backfill_validations_rejected_total{kind="lifecycle"}`).
    pub validations_rejected: IntCounter,
    /// Explicit (operator) validations whose definition found the
    /// postcondition false, counted by the admin layer of the host that
    /// answered them (`backfill_validations_rejected_total{kind="explicit"}`):
    /// one family, so a sum over `kind` counts every rejection and a rule
    /// that pages on a failed or blocked backfill selects `lifecycle`.
    pub explicit_validations_rejected: IntCounter,
    validations_rejected_by_kind: IntCounterVec,
    /// Lifecycle validations that errored
    /// (`backfill_validation_errors_total`).
    pub validation_errors: IntCounter,
    /// Runners that hold a claim but start no batch because a health
    /// signal is past its threshold (a gauge).
    pub runners_throttled: IntGauge,
    /// Times a runner became throttled.
    pub throttle_events: IntCounter,
    batch_duration: HistogramVec,
    /// The children of `batch_duration`, indexed like [`BatchEnd::ALL`]:
    /// resolved once, so an observation looks up no label values.
    batch_durations: [Histogram; 4],
    validation_duration: HistogramVec,
    /// The children of `validation_duration`, indexed like
    /// [`ValidationEnd::ALL`].
    validation_durations: [Histogram; 4],
}

/// A counter with a name and help text fixed in this file.
fn counter(name: &str, help: &str) -> IntCounter {
    // Only an invalid metric name makes this fail: a bug in the constant
    // above the call, which every test that builds a runtime would hit.
    IntCounter::new(name, help).expect("a valid counter definition")
}

/// A gauge with a name and help text fixed in this file.
fn gauge(name: &str, help: &str) -> IntGauge {
    // As for `counter`: the definition is a constant of this file.
    IntGauge::new(name, help).expect("a valid gauge definition")
}

/// A duration histogram labelled by `outcome`, and its child per label
/// value (created up front, so every outcome is exported from the first
/// scrape: an absent series would read as "unknown", not as zero).
fn durations<const N: usize>(
    name: &str,
    help: &str,
    outcomes: [&'static str; N],
) -> (HistogramVec, [Histogram; N]) {
    let opts = HistogramOpts::new(name, help).buckets(DURATION_BUCKETS.to_vec());
    // As for `counter`: the definition is a constant of this file.
    let vec = HistogramVec::new(opts, &["outcome"]).expect("a valid histogram definition");
    let children = outcomes.map(|outcome| vec.with_label_values(&[outcome]));
    (vec, children)
}

impl Default for RuntimeMetrics {
    fn default() -> Self {
        Self::new()
    }
}

/// The name and help text of each counter of one group, in the order of
/// the fields [`RuntimeMetrics::new`] binds them to; every name is
/// `backfill_<field>_total`, which a test checks.
type Definitions<const N: usize> = [(&'static str, &'static str); N];

/// What the supervisor and the renewer do with claims, and the fence's
/// rejections of what a claim tried to commit.
const CLAIM_COUNTERS: Definitions<7> = [
    (
        "backfill_claims_acquired_total",
        "Claims acquired (new claims).",
    ),
    (
        "backfill_claims_taken_over_total",
        "Claims acquired by takeover of an expired owner.",
    ),
    (
        "backfill_claims_renewed_total",
        "Successful claim renewals.",
    ),
    (
        "backfill_claims_lost_total",
        "Claims that could no longer be renewed.",
    ),
    (
        "backfill_renew_failures_total",
        "Renewal rounds that failed to reach PostgreSQL.",
    ),
    (
        "backfill_claims_released_total",
        "Claims given back on shutdown.",
    ),
    (
        "backfill_stale_rejections_total",
        "Batches or validations of a stale owner rejected by the fence at commit (a pause's is not counted).",
    ),
];

/// What the runners' batches did.
const BATCH_COUNTERS: Definitions<3> = [
    ("backfill_batches_attempted_total", "Batches started."),
    (
        "backfill_batches_committed_total",
        "Batches whose mutation and checkpoint committed.",
    ),
    (
        "backfill_keys_committed_total",
        "Keys whose mutation committed.",
    ),
];

/// Recorded failures, by what they left the backfill in, and the rows
/// this process would not read.
const ERROR_COUNTERS: Definitions<4> = [
    (
        "backfill_errors_retryable_total",
        "Retryable errors recorded (backoff scheduled).",
    ),
    (
        "backfill_errors_blocked_total",
        "Errors that blocked a backfill.",
    ),
    (
        "backfill_errors_failed_total",
        "Errors that failed a backfill (fatal or exhausted).",
    ),
    (
        "backfill_fail_closed_total",
        "Rows this process refused to interpret (REG-4).",
    ),
];

/// How lifecycle validations ended.
const VALIDATION_COUNTERS: Definitions<2> = [
    (
        "backfill_validations_completed_total",
        "Lifecycle validations that completed a backfill.",
    ),
    (
        "backfill_validation_errors_total",
        "Lifecycle validations that errored.",
    ),
];

/// The counters of one group, in the order of its definitions.
fn counters<const N: usize>(definitions: Definitions<N>) -> [IntCounter; N] {
    definitions.map(|(name, help)| counter(name, help))
}

impl RuntimeMetrics {
    /// Every metric at zero.
    pub fn new() -> Self {
        let [claims_acquired, claims_taken_over, claims_renewed, claims_lost, renew_failures, claims_released, stale_rejections] =
            counters(CLAIM_COUNTERS);
        let [batches_attempted, batches_committed, keys_committed] = counters(BATCH_COUNTERS);
        let [errors_retryable, errors_blocked, errors_failed, fail_closed] =
            counters(ERROR_COUNTERS);
        let [validations_completed, validation_errors] = counters(VALIDATION_COUNTERS);
        // As for `counter`: the definition is a constant of this file. Both
        // kinds are resolved up front, so each is exported from the first
        // scrape at zero rather than absent.
        let validations_rejected_by_kind = IntCounterVec::new(
            Opts::new(
                "backfill_validations_rejected_total",
                "Validations whose definition found the postcondition false: lifecycle ones (the backfill is failed or blocked) and explicit ones (nothing changes).",
            ),
            &["kind"],
        )
        .expect("a valid counter definition");
        let validations_rejected = validations_rejected_by_kind.with_label_values(&["lifecycle"]);
        let explicit_validations_rejected =
            validations_rejected_by_kind.with_label_values(&["explicit"]);
        let (batch_duration, batch_durations) = durations(
            "backfill_batch_duration_seconds",
            "Duration of one batch (select, mutate, fenced commit), by how it ended.",
            BatchEnd::ALL.map(BatchEnd::as_str),
        );
        let (validation_duration, validation_durations) = durations(
            "backfill_validation_duration_seconds",
            "Duration of one lifecycle validation with its fenced completion, by how it ended.",
            ValidationEnd::ALL.map(ValidationEnd::as_str),
        );
        Self {
            claims_acquired,
            claims_taken_over,
            claims_renewed,
            claims_lost,
            renew_failures,
            claims_released,
            stale_rejections,
            batches_attempted,
            batches_committed,
            keys_committed,
            errors_retryable,
            errors_blocked,
            errors_failed,
            fail_closed,
            validations_completed,
            validations_rejected,
            explicit_validations_rejected,
            validations_rejected_by_kind,
            validation_errors,
            runners_throttled: gauge(
                "backfill_runners_throttled",
                "Runners holding a claim that start no batch because a health signal is past its threshold.",
            ),
            throttle_events: counter(
                "backfill_throttle_events_total",
                "Times a runner became throttled by a health signal.",
            ),
            batch_duration,
            batch_durations,
            validation_duration,
            validation_durations,
        }
    }

    /// Register every metric of the runtime into `registry` (the handles
    /// are shared, so the registry reads the live values). A metric the
    /// runtime adds (a gauge per throttle signal, say, with the signal as
    /// a bounded label: an `IntGaugeVec` whose children are resolved in
    /// [`RuntimeMetrics::new`] like the histograms') is a field above,
    /// built in `new` and listed here; the host exports it without further
    /// change. Fails only if a name is registered twice.
    pub fn register(&self, registry: &Registry) -> prometheus::Result<()> {
        let collectors: [Box<dyn Collector>; 21] = [
            Box::new(self.claims_acquired.clone()),
            Box::new(self.claims_taken_over.clone()),
            Box::new(self.claims_renewed.clone()),
            Box::new(self.claims_lost.clone()),
            Box::new(self.renew_failures.clone()),
            Box::new(self.claims_released.clone()),
            Box::new(self.stale_rejections.clone()),
            Box::new(self.batches_attempted.clone()),
            Box::new(self.batches_committed.clone()),
            Box::new(self.keys_committed.clone()),
            Box::new(self.errors_retryable.clone()),
            Box::new(self.errors_blocked.clone()),
            Box::new(self.errors_failed.clone()),
            Box::new(self.fail_closed.clone()),
            Box::new(self.validations_completed.clone()),
            Box::new(self.validations_rejected_by_kind.clone()),
            Box::new(self.validation_errors.clone()),
            Box::new(self.runners_throttled.clone()),
            Box::new(self.throttle_events.clone()),
            Box::new(self.batch_duration.clone()),
            Box::new(self.validation_duration.clone()),
        ];
        for collector in collectors {
            registry.register(collector)?;
        }
        Ok(())
    }

    /// The batch duration histogram of one outcome.
    pub fn batch_duration(&self, end: BatchEnd) -> &Histogram {
        &self.batch_durations[end as usize]
    }

    /// The validation duration histogram of one outcome.
    pub fn validation_duration(&self, end: ValidationEnd) -> &Histogram {
        &self.validation_durations[end as usize]
    }

    /// Record how long a batch took, under how it ended.
    pub(crate) fn observe_batch(
        &self,
        outcome: &Result<StepOutcome, BackendError>,
        took: Duration,
    ) {
        self.batch_duration(BatchEnd::of(outcome))
            .observe(took.as_secs_f64());
    }

    /// Record how long a lifecycle validation took, under how it ended.
    pub(crate) fn observe_validation(
        &self,
        outcome: &Result<ValidationOutcome, BackendError>,
        took: Duration,
    ) {
        self.validation_duration(ValidationEnd::of(outcome))
            .observe(took.as_secs_f64());
    }
}

/// A counter or a gauge: what [`inc`] adds one to.
pub(crate) trait Increment {
    fn increment(&self);
}

impl Increment for IntCounter {
    fn increment(&self) {
        self.inc();
    }
}

impl Increment for IntGauge {
    fn increment(&self) {
        self.inc();
    }
}

/// Add one to a counter or a gauge.
pub(crate) fn inc(metric: &impl Increment) {
    metric.increment();
}

/// Take one from a gauge.
pub(crate) fn dec(gauge: &IntGauge) {
    gauge.dec();
}

/// Add `n` to a counter.
pub(crate) fn add(counter: &IntCounter, n: u64) {
    counter.inc_by(n);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every family registers once under its own name, and each duration
    /// histogram is exported for every outcome from the start, with all
    /// its buckets.
    #[test]
    fn obs01_every_family_registers_with_every_outcome() {
        let metrics = RuntimeMetrics::new();
        let registry = Registry::new();
        metrics.register(&registry).expect("register");
        let families = registry.gather();
        assert_eq!(families.len(), 21);
        let batch = families
            .iter()
            .find(|f| f.name() == "backfill_batch_duration_seconds")
            .expect("batch histogram");
        assert_eq!(batch.get_metric().len(), BatchEnd::ALL.len());
        let validation = families
            .iter()
            .find(|f| f.name() == "backfill_validation_duration_seconds")
            .expect("validation histogram");
        assert_eq!(validation.get_metric().len(), ValidationEnd::ALL.len());
        for metric in batch.get_metric() {
            assert_eq!(
                metric.get_histogram().get_bucket().len(),
                DURATION_BUCKETS.len()
            );
        }
    }

    /// Each counter field exports the name made of its own (the groups'
    /// definitions are bound to the fields by position), so no two swap.
    #[test]
    fn obs01_every_counter_exports_its_fields_name() {
        let m = RuntimeMetrics::new();
        let fields: [(&str, &IntCounter); 17] = [
            ("claims_acquired", &m.claims_acquired),
            ("claims_taken_over", &m.claims_taken_over),
            ("claims_renewed", &m.claims_renewed),
            ("claims_lost", &m.claims_lost),
            ("renew_failures", &m.renew_failures),
            ("claims_released", &m.claims_released),
            ("stale_rejections", &m.stale_rejections),
            ("batches_attempted", &m.batches_attempted),
            ("batches_committed", &m.batches_committed),
            ("keys_committed", &m.keys_committed),
            ("errors_retryable", &m.errors_retryable),
            ("errors_blocked", &m.errors_blocked),
            ("errors_failed", &m.errors_failed),
            ("fail_closed", &m.fail_closed),
            ("validations_completed", &m.validations_completed),
            ("validation_errors", &m.validation_errors),
            ("throttle_events", &m.throttle_events),
        ];
        for (field, counter) in fields {
            let desc = counter.desc();
            assert_eq!(desc[0].fq_name, format!("backfill_{field}_total"));
        }
        assert_eq!(
            m.runners_throttled.desc()[0].fq_name,
            "backfill_runners_throttled"
        );
        // The two kinds of rejection are one family, told apart by label.
        m.explicit_validations_rejected.inc();
        let registry = Registry::new();
        m.register(&registry).expect("register");
        let family = registry
            .gather()
            .into_iter()
            .find(|f| f.name() == "backfill_validations_rejected_total")
            .expect("rejections");
        let by_kind: Vec<(String, f64)> = family
            .get_metric()
            .iter()
            .map(|s| {
                let kind = s.get_label().iter().find(|l| l.name() == "kind");
                (
                    kind.expect("kind").value().to_string(),
                    s.get_counter().get_value(),
                )
            })
            .collect();
        assert_eq!(
            by_kind,
            [
                ("explicit".to_string(), 1.0),
                ("lifecycle".to_string(), 0.0)
            ]
        );
    }

    /// A stale owner's batch and a paused one both rolled back at the
    /// fence, but only the first is a stale rejection: each lands under
    /// its own outcome, so `outcome="stale"` counts what
    /// `backfill_stale_rejections_total` counts.
    #[test]
    fn obs01_a_paused_batch_is_not_observed_as_stale() {
        let metrics = RuntimeMetrics::new();
        metrics.observe_batch(&Ok(StepOutcome::Stale), Duration::from_millis(1));
        metrics.observe_batch(&Ok(StepOutcome::Paused), Duration::from_millis(1));
        metrics.observe_batch(&Ok(StepOutcome::Paused), Duration::from_millis(1));
        let count = |end| metrics.batch_duration(end).get_sample_count();
        assert_eq!(count(BatchEnd::Stale), 1);
        assert_eq!(count(BatchEnd::Paused), 2);
    }

    /// An observation lands under the outcome it is given and in seconds.
    #[test]
    fn obs01_observations_land_under_their_outcome_in_seconds() {
        let metrics = RuntimeMetrics::new();
        let committed = Ok(StepOutcome::Committed {
            keys: 1,
            reached_bound: false,
        });
        metrics.observe_batch(&committed, Duration::from_millis(1500));
        metrics.observe_batch(&Err(BackendError("down".into())), Duration::from_millis(2));
        let c = metrics.batch_duration(BatchEnd::Committed);
        assert_eq!(c.get_sample_count(), 1);
        assert!((c.get_sample_sum() - 1.5).abs() < 1e-9);
        assert_eq!(
            metrics.batch_duration(BatchEnd::Error).get_sample_count(),
            1
        );
        assert_eq!(
            metrics.batch_duration(BatchEnd::Stale).get_sample_count(),
            0
        );
        metrics.observe_validation(&Ok(ValidationOutcome::Busy), Duration::from_millis(3));
        assert_eq!(
            metrics
                .validation_duration(ValidationEnd::Error)
                .get_sample_count(),
            1
        );
    }
}
