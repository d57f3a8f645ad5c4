//! `backfill-actors`: the actix runtime of backfill.
//!
//! A [`supervisor::Supervisor`] per process claims work and spawns one
//! [`runner::Runner`] per claimed backfill ID, a
//! [`lease_renewer::LeaseRenewer`] keeps every claim of the process alive,
//! and a [`validator::Validator`] runs lifecycle validation.
//!
//! The runtime is generic over the narrow [`Backend`] trait, which the
//! `backfill` crate implements over its engine (River's driver/domain
//! split). This crate knows stable IDs, generations, timings and outcomes;
//! it never sees SQL or a connection, and its state is a cache of
//! PostgreSQL's with a trust window, never an authority.

#![deny(missing_docs)]

pub mod lease_renewer;
pub mod metrics;
pub mod runner;
pub mod supervisor;
pub mod validator;

use actix::{Actor, Addr, AsyncContext, Context};
use async_trait::async_trait;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// Start an actor whose every handler runs inside the caller's current
/// `tracing` span. `Actor::start` spawns the actor's future bare, so an
/// embedder's span (a fleet names each database's runtime by one) would
/// stop at the first actor; started here, the supervisor and everything it
/// starts log inside that span.
pub(crate) fn start_in_current_span<A>(actor: A) -> Addr<A>
where
    A: Actor<Context = Context<A>>,
{
    let context = Context::new();
    let address = context.address();
    actix_rt::spawn(
        context
            .into_future(actor)
            .instrument(tracing::Span::current()),
    );
    address
}

/// What identifies a claim in the runtime: the stable ID and, for a
/// partition claim, the partition (PAR-2). Claims of one process are held,
/// renewed and excluded by this key, so two partitions of one backfill are
/// two claims.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClaimKey {
    /// The backfill's stable ID.
    pub id: String,
    /// `None`: the backfill's own row (a backfill without partitions, or
    /// any backfill's validation).
    pub partition: Option<u32>,
}

impl ClaimKey {
    /// The key of a claim on a backfill's own row.
    pub fn whole(id: impl Into<String>) -> Self {
        Self {
            id: id.into(),
            partition: None,
        }
    }
}

impl std::fmt::Display for ClaimKey {
    /// The stable ID, with the partition when there is one (`id[3]`), as
    /// logs name the claim.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.partition {
            Some(part) => write!(f, "{}[{part}]", self.id),
            None => f.write_str(&self.id),
        }
    }
}

/// What the runtime needs to know about a claim. The claim itself is an
/// opaque fencing token owned by the backend. It is deliberately not
/// `Clone`: it may carry a resource (the engine's open batch connection)
/// that only the one runner holding it may use, so the runner moves it
/// into its last call instead of copying it.
pub trait ClaimInfo: Send + Sync + Unpin + 'static {
    /// The stable ID.
    fn id(&self) -> &str;
    /// The fencing generation of this claim (the partition's, for a
    /// partition claim).
    fn generation(&self) -> i64;
    /// The partition this claim advances, if it is a partition claim
    /// (PAR-2). Default: none.
    fn partition(&self) -> Option<u32> {
        None
    }
    /// The claim's key in the runtime.
    fn key(&self) -> ClaimKey {
        ClaimKey {
            id: self.id().to_string(),
            partition: self.partition(),
        }
    }
    /// Whether the claim is for lifecycle validation (`validating`) rather
    /// than batch execution (`running`).
    fn is_validation(&self) -> bool;
    /// The previous owner whose expired claim this one took over.
    fn takeover_from(&self) -> Option<&str>;
    /// The batch size in force, for the progress log (THR-3); `None` when
    /// the backend does not size batches.
    fn batch_size(&self) -> Option<u32> {
        None
    }
}

/// What a recorded failure left a backfill in: all the runtime must tell
/// apart (the lifecycle itself is the backend's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Still `running`, after a backoff (RT-2).
    Retrying,
    /// `blocked`: an operator must act.
    Blocked,
    /// `failed`: retries exhausted or validation rejected the result.
    Failed,
}

impl std::fmt::Display for Disposition {
    /// The lifecycle state's name, as operators read it in the log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Disposition::Retrying => "running",
            Disposition::Blocked => "blocked",
            Disposition::Failed => "failed",
        })
    }
}

/// How a recorded error was classified (RT-1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The error may pass: the backfill stays `running` under a bounded
    /// backoff (RT-2).
    Retryable,
    /// An unmet prerequisite or data invariant: the backfill is `blocked`
    /// until an operator acts.
    Blocked,
    /// Retrying cannot help: the backfill is `failed`.
    Fatal,
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ErrorKind::Retryable => "retryable",
            ErrorKind::Blocked => "blocked",
            ErrorKind::Fatal => "fatal",
        })
    }
}

/// Whether an actor's `started` runs while its actix system is being
/// dropped. An actor that never ran is polled once more then (an embedder
/// that returns, for example with `?`, before stopping the runtime); no
/// reactor runs, so no timer can be armed and no child started. An actor
/// that arms timers stops instead of panicking; the claims of a runtime
/// dropped this way expire with their leases (EMB-9).
pub(crate) fn system_dropping() -> bool {
    tokio::runtime::Handle::try_current().is_err()
}

/// The outcome of one batch step, after the backend made it durable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepOutcome {
    /// Mutation and checkpoint committed together. `reached_bound`: the row
    /// is now `validating` and the claim was released.
    Committed {
        /// Keys the batch selected and committed.
        keys: usize,
        /// Whether the checkpoint reached the bound with this batch.
        reached_bound: bool,
    },
    /// The fence rejected the batch (taken over, lease expired).
    Stale,
    /// The fence rejected the batch because an operator paused the
    /// backfill while it ran: the rollback is the pause taking effect
    /// (CT-5), not a stale owner.
    Paused,
    /// The batch failed; the error was classified and recorded durably
    /// (RT-1) and the claim released. `disposition` is what that left the
    /// backfill in, `kind` the classification, `message` a bounded
    /// diagnostic.
    Recorded {
        /// What the failure left the backfill in.
        disposition: Disposition,
        /// How the error was classified.
        kind: ErrorKind,
        /// The bounded diagnostic recorded.
        message: String,
        /// Consecutive failed attempts, this one included (RT-2).
        attempts: i32,
    },
    /// The backend cannot interpret this backfill (REG-4: fail closed):
    /// nothing was changed; the runtime stops and stops claiming the ID.
    FailClosed {
        /// Why the backfill cannot be interpreted, bounded.
        message: String,
    },
}

/// The outcome of lifecycle validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ValidationOutcome {
    /// Fenced completion committed.
    Completed,
    /// Validation failed; the row is `failed` or `blocked`.
    Rejected {
        /// `Failed`, or `Blocked` when validation names an unmet
        /// prerequisite (VAL-3).
        disposition: Disposition,
        /// The validation's bounded diagnostic.
        detail: String,
    },
    /// Fence rejected the result.
    Stale,
    /// Another validation of the same ID was running (VAL-6); nothing ran
    /// and the claim was given back.
    Busy,
    /// Validation errored; recorded durably like a batch failure.
    Recorded {
        /// What the failure left the backfill in.
        disposition: Disposition,
        /// How the error was classified.
        kind: ErrorKind,
        /// The bounded diagnostic recorded.
        message: String,
        /// Consecutive failed attempts, this one included (RT-2).
        attempts: i32,
    },
    /// Cannot interpret the row (REG-4).
    FailClosed {
        /// Why the row cannot be interpreted, bounded.
        message: String,
    },
}

/// What the backend says before a batch: whether the runner may start
/// one now (THR-1). Asked between batches only; a batch in flight
/// commits or rolls back as usual.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Run the batch now.
    Go,
    /// Wait this long first (the operator's pause between batches), then
    /// ask again.
    Pause(Duration),
    /// A health signal is past its threshold: start no batch and ask
    /// again after `recheck`. The claim stays held and renewed; this is a
    /// runtime condition, never a lifecycle state (THR-2).
    Throttled {
        /// The signal's metric label (a bounded vocabulary, OBS-2).
        signal: &'static str,
        /// Signal, value and threshold for operators, bounded.
        text: String,
        /// How long to wait before asking again.
        recheck: Duration,
    },
}

/// A backend call that could not be made durable (e.g. the database is
/// unreachable). The runtime stops the affected work and lets the lease
/// expire; PostgreSQL keeps whatever was committed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BackendError(pub String);

/// The narrow interface the runtime drives. Every method is one or a few
/// short PostgreSQL transactions in the implementation.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// The fencing token of a claim.
    type Claim: ClaimInfo;

    /// Register (upsert) every local definition (REG-1). Called before the
    /// first claim (REG-4).
    async fn register(&self) -> Result<(), BackendError>;

    /// Claim the next eligible backfill (or partition of one) this process
    /// has a definition for, skipping `exclude`: a key without a partition
    /// excludes the whole ID, one with a partition that partition.
    /// `Ok(Err(id))`: the row `id` cannot be interpreted by this process;
    /// nothing changed (REG-4).
    async fn claim_next(
        &self,
        worker: &str,
        exclude: &[ClaimKey],
    ) -> Result<Result<Option<Self::Claim>, String>, BackendError>;

    /// Whether the next batch of `claim` may start now (THR-1). The
    /// default lets every batch run.
    async fn gate(&self, _claim: &mut Self::Claim) -> Result<Gate, BackendError> {
        Ok(Gate::Go)
    }

    /// Run one fenced batch, recording any failure durably before
    /// returning.
    async fn step(&self, claim: &mut Self::Claim) -> Result<StepOutcome, BackendError>;

    /// Run lifecycle validation with fenced completion, recording any
    /// error durably before returning.
    async fn validate(&self, claim: &Self::Claim) -> Result<ValidationOutcome, BackendError>;

    /// Renew the listed `(key, generation)` claims of `worker`; returns the
    /// ones renewed. Missing ones are lost.
    async fn renew(
        &self,
        worker: &str,
        claims: &[(ClaimKey, i64)],
    ) -> Result<Vec<(ClaimKey, i64)>, BackendError>;

    /// Record a progress sample of each listed `(key, generation)` claim
    /// of `worker` (OBS-5), every [`RuntimeConfig::progress_sample_interval`]
    /// while the process holds claims. The default records nothing.
    async fn sample_progress(
        &self,
        _worker: &str,
        _claims: &[(ClaimKey, i64)],
    ) -> Result<(), BackendError> {
        Ok(())
    }

    /// Record that `worker` is present, with `free_runners` free runners,
    /// serving every registered backfill but the `given_up` ones (REG-4),
    /// and answer the `(key, generation)` claims it holds beyond its fair
    /// share of a partitioned backfill (PAR-6), which its runners give
    /// back at their next batch boundary. Called once per renewal round,
    /// also while the process holds no claim, unless a claim poll recorded
    /// the presence since the last round ([`Backend::offer_presence`]).
    /// The default records nothing and answers none.
    async fn presence(
        &self,
        _worker: &str,
        _free_runners: usize,
        _given_up: &[String],
    ) -> Result<Vec<(ClaimKey, i64)>, BackendError> {
        Ok(Vec::new())
    }

    /// Offer `worker`'s presence (as [`Backend::presence`] would record
    /// it) for the claim polls to record between the renewer's rounds,
    /// `round` apart, when a poll is a query anyway. Called at every
    /// round before it is sent. The default keeps nothing.
    fn offer_presence(
        &self,
        _worker: &str,
        _free_runners: usize,
        _given_up: &[String],
        _round: Duration,
    ) {
    }

    /// Whether a claim poll recorded `worker`'s offered presence within
    /// `within`: a renewer that holds no claim then skips its round (no
    /// claim can be beyond its share). The default: never.
    fn presence_polled_within(&self, _worker: &str, _within: Duration) -> bool {
        false
    }

    /// Withdraw `worker`'s presence (PAR-6): the process stops serving.
    /// The default does nothing.
    async fn leave(&self, _worker: &str) -> Result<(), BackendError> {
        Ok(())
    }

    /// Give a claim back (graceful shutdown).
    async fn release(&self, claim: &Self::Claim) -> Result<bool, BackendError>;

    /// The TTL of the leases [`Backend::claim_next`] and [`Backend::renew`]
    /// grant: the runtime derives its renewal cadence and trust window
    /// from it.
    fn lease_ttl(&self) -> Duration;
}

/// Runtime configuration. Defaults follow the contract's expectations:
/// renew well inside the lease, stop trusting a claim before it can have
/// expired. The lease TTL is not here: it is the backend's
/// ([`Backend::lease_ttl`]), stated once where the leases are granted.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// This process's worker ID (the claim owner). Default: `worker-<pid>`.
    pub worker_id: String,
    /// Renewal cadence. Default (`None`): a third of the lease TTL.
    pub renew_interval: Option<Duration>,
    /// How often the supervisor looks for claimable work (NOTIFY and admin
    /// wake-ups come on top; they are hints only). Default 1 s.
    pub poll_interval: Duration,
    /// Maximum runners (claims) at once in this process. Default 4.
    pub max_concurrent_runners: usize,
    /// How long shutdown waits for in-flight batches. Default 10 s.
    pub shutdown_grace: Duration,
    /// How often a runner logs a `progress` event (info) while it commits
    /// batches. Each batch is a `batch_committed` event at debug level: at
    /// hundreds of batches a second, a line per batch at info would flood
    /// the operator's log and put log I/O on the batch path. Default 10 s.
    pub progress_log_interval: Duration,
    /// How often the lease renewer records the progress of the claims
    /// this process holds (OBS-5), the grain of every rate, sparkline and
    /// run chart. One statement per interval while claims are held, none
    /// when idle. Default 2 s.
    pub progress_sample_interval: Duration,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self {
            worker_id: format!("worker-{}", std::process::id()),
            renew_interval: None,
            poll_interval: Duration::from_secs(1),
            max_concurrent_runners: 4,
            shutdown_grace: Duration::from_secs(10),
            progress_log_interval: Duration::from_secs(10),
            progress_sample_interval: Duration::from_secs(2),
        }
    }
}

/// An invalid runtime configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid runtime configuration: {0}")]
pub struct ConfigError(pub String);

impl RuntimeConfig {
    /// Reject configurations that would let a claim expire while its owner
    /// still trusts it, for leases of `lease_ttl`.
    pub fn validate(&self, lease_ttl: Duration) -> Result<(), ConfigError> {
        self.timing(lease_ttl).map(|_| ())
    }

    /// The timings in force for leases of `lease_ttl`, checked.
    pub(crate) fn timing(&self, lease_ttl: Duration) -> Result<Timing, ConfigError> {
        if self.worker_id.is_empty() || self.worker_id.len() > 128 {
            return Err(ConfigError("worker_id must be 1-128 bytes".into()));
        }
        if lease_ttl < Duration::from_millis(100) {
            return Err(ConfigError("lease_ttl must be at least 100ms".into()));
        }
        let renew_interval = self.renew_interval.unwrap_or(lease_ttl / 3);
        if renew_interval.is_zero() || renew_interval * 2 > lease_ttl {
            return Err(ConfigError(
                "renew_interval must be positive and at most half the lease_ttl".into(),
            ));
        }
        if self.poll_interval.is_zero() {
            return Err(ConfigError("poll_interval must be positive".into()));
        }
        if self.max_concurrent_runners == 0 {
            return Err(ConfigError(
                "max_concurrent_runners must be at least 1".into(),
            ));
        }
        if self.progress_log_interval.is_zero() {
            return Err(ConfigError("progress_log_interval must be positive".into()));
        }
        if self.progress_sample_interval < Duration::from_millis(100) {
            return Err(ConfigError(
                "progress_sample_interval must be at least 100ms".into(),
            ));
        }
        Ok(Timing {
            lease_ttl,
            renew_interval,
            sample_interval: self.progress_sample_interval,
        })
    }
}

/// The lease timings in force: the backend's TTL and the renewal cadence
/// derived from it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub lease_ttl: Duration,
    pub renew_interval: Duration,
    /// How often held claims' progress is sampled (OBS-5).
    pub sample_interval: Duration,
}

impl Timing {
    /// How long after a claim or renewal request was *sent* the holder may
    /// still trust it: three quarters of the TTL. PostgreSQL computed the
    /// expiry after the request was sent, so the real lease outlives this
    /// window even with a slow round trip (the trust window of River's
    /// elector).
    pub fn trust_window(&self) -> Duration {
        self.lease_ttl * 3 / 4
    }

    /// The instant until which a claim requested at `sent` is trusted.
    pub fn trusted_until(&self, sent: Instant) -> Instant {
        sent + self.trust_window()
    }
}

pub use metrics::RuntimeMetrics;
pub use supervisor::{RuntimeHandle, Supervisor};

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> RuntimeConfig {
        RuntimeConfig {
            worker_id: "w".into(),
            ..RuntimeConfig::default()
        }
    }

    /// CLM-3: every limit of the runtime configuration holds exactly at
    /// its edge: a 1- and 128-byte worker ID, a 100 ms lease, a renewal
    /// at exactly half the lease; one step past each is refused.
    #[test]
    fn clm03_runtime_config_limits_hold_exactly_at_their_edges() {
        let ttl = Duration::from_secs(3);
        let with = |f: &dyn Fn(&mut RuntimeConfig)| {
            let mut c = config();
            f(&mut c);
            c
        };
        assert!(config().validate(ttl).is_ok());
        assert!(with(&|c| c.worker_id = String::new())
            .validate(ttl)
            .is_err());
        assert!(with(&|c| c.worker_id = "w".repeat(128))
            .validate(ttl)
            .is_ok());
        assert!(with(&|c| c.worker_id = "w".repeat(129))
            .validate(ttl)
            .is_err());
        assert!(config().validate(Duration::from_millis(100)).is_ok());
        assert!(config().validate(Duration::from_millis(99)).is_err());
        let half = |c: &mut RuntimeConfig| c.renew_interval = Some(Duration::from_millis(1500));
        assert!(with(&half).validate(ttl).is_ok());
        let past_half =
            |c: &mut RuntimeConfig| c.renew_interval = Some(Duration::from_micros(1_500_001));
        assert!(with(&past_half).validate(ttl).is_err());
        assert!(with(&|c| c.renew_interval = Some(Duration::ZERO))
            .validate(ttl)
            .is_err());
        assert!(with(&|c| c.poll_interval = Duration::ZERO)
            .validate(ttl)
            .is_err());
        assert!(with(&|c| c.max_concurrent_runners = 0)
            .validate(ttl)
            .is_err());
        assert!(with(&|c| c.max_concurrent_runners = 1)
            .validate(ttl)
            .is_ok());
        assert!(with(&|c| c.progress_log_interval = Duration::ZERO)
            .validate(ttl)
            .is_err());
        let timing = config().timing(ttl).expect("timing");
        assert_eq!(timing.lease_ttl, ttl);
        assert_eq!(timing.renew_interval, Duration::from_secs(1), "a third");
    }

    /// CLM-3: a claim is trusted for three quarters of its lease from the
    /// moment its request was sent.
    #[test]
    fn clm03_trust_window_is_three_quarters_of_the_lease() {
        let timing = Timing {
            lease_ttl: Duration::from_secs(4),
            renew_interval: Duration::from_secs(1),
            sample_interval: Duration::from_secs(2),
        };
        assert_eq!(timing.trust_window(), Duration::from_secs(3));
        let sent = Instant::now();
        assert_eq!(timing.trusted_until(sent), sent + Duration::from_secs(3));
    }

    /// RT-1: error kinds read in the operator's log as the contract names
    /// them.
    #[test]
    fn rt01_error_kinds_display_as_their_names() {
        let names = [ErrorKind::Retryable, ErrorKind::Blocked, ErrorKind::Fatal]
            .map(|kind| kind.to_string());
        assert_eq!(names, ["retryable", "blocked", "fatal"]);
    }

    /// RT-2: a disposition reads as the lifecycle state it left the
    /// backfill in (a retry keeps it `running`).
    #[test]
    fn rt02_dispositions_display_as_lifecycle_states() {
        let names = [
            Disposition::Retrying,
            Disposition::Blocked,
            Disposition::Failed,
        ]
        .map(|disposition| disposition.to_string());
        assert_eq!(names, ["running", "blocked", "failed"]);
    }
}
