//! The runner: one per claimed backfill ID in `running`.
//!
//! Spawned by the supervisor with a claim; loops fenced batches through
//! [`Backend::step`]. Between batches (never during one) it observes
//! [`Stop`] from the supervisor and [`LeaseStatus`] from the lease renewer,
//! and its own trust window: after seeing stop intent, a lost lease or an
//! expired trust window it starts no further batch (EX-5). It tells the
//! supervisor why it ended with [`RunnerExited`] (`do_send`, upward).
//!
//! Before each batch it asks [`Backend::gate`]: a pause between batches
//! or a health signal past its threshold (THR-1) holds the batch back
//! while the claim stays renewed, logged once as `throttled` and once as
//! `unthrottled` when the signal recovers (THR-2).
//!
//! It logs each batch as `batch_committed` at debug level and, at info,
//! one `progress` event per `RuntimeConfig::progress_log_interval`: the
//! batch path writes no log line at the default level.

use crate::lease_renewer::LeaseStatus;
use crate::metrics::{add, dec, inc, RuntimeMetrics};
use crate::{Backend, ClaimInfo, Disposition, Gate, RuntimeConfig, StepOutcome, Timing};
use actix::prelude::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The longest a runner waits on a pause between batches before it asks
/// the gate again.
const PAUSE_SLICE: Duration = Duration::from_secs(1);

/// Stop after the current batch and give the claim back (shutdown).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stop;

/// Why a runner ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitReason {
    /// The checkpoint reached the bound; the row is `validating`.
    ReachedBound,
    /// The fence rejected a batch (paused, taken over, expired).
    Stale,
    /// The lease renewal failed or the trust window ended.
    LeaseLost,
    /// An error was recorded durably; what it left the backfill in.
    Recorded {
        /// What the recorded error left the backfill in.
        disposition: Disposition,
    },
    /// The row cannot be interpreted by this process (REG-4).
    FailClosed,
    /// Stopped on request; the claim was given back.
    Stopped,
    /// The backend failed; the lease will expire.
    BackendError,
}

/// Sent by a runner when it ends.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct RunnerExited {
    /// The backfill the runner worked on.
    pub id: String,
    /// The partition the runner advanced, if any (PAR-2).
    pub partition: Option<u32>,
    /// The generation of the runner's claim.
    pub generation: i64,
    /// Why it ended.
    pub reason: ExitReason,
    /// Batches it committed.
    pub batches: u64,
    /// Keys its committed batches selected.
    pub keys: u64,
}

/// Run the next batch (sent by the runner to itself).
#[derive(Message)]
#[rtype(result = "()")]
struct NextBatch;

/// The runner actor.
pub struct Runner<B: Backend> {
    backend: Arc<B>,
    id: String,
    partition: Option<u32>,
    /// How logs name the claim: the ID, with the partition (`id[3]`).
    name: String,
    generation: i64,
    /// `None` while a batch owns the claim.
    claim: Option<B::Claim>,
    trusted_until: Instant,
    supervisor: Recipient<RunnerExited>,
    stopping: bool,
    lost: bool,
    busy: bool,
    batches: u64,
    keys: u64,
    /// Totals at the last `progress` event, and when it was logged.
    logged: (u64, u64, Instant),
    progress_log_interval: Duration,
    metrics: Arc<RuntimeMetrics>,
    /// The signal holding batches back, and since when (THR-2).
    throttled: Option<(&'static str, Instant)>,
}

impl<B: Backend> Runner<B> {
    /// A runner for `claim`, whose claim request was sent at `sent`.
    pub(crate) fn new(
        backend: Arc<B>,
        config: &RuntimeConfig,
        timing: Timing,
        claim: B::Claim,
        sent: Instant,
        supervisor: Recipient<RunnerExited>,
        metrics: Arc<RuntimeMetrics>,
    ) -> Self {
        Self {
            backend,
            id: claim.id().to_string(),
            partition: claim.partition(),
            name: claim.key().to_string(),
            generation: claim.generation(),
            claim: Some(claim),
            trusted_until: timing.trusted_until(sent),
            supervisor,
            stopping: false,
            lost: false,
            busy: false,
            batches: 0,
            keys: 0,
            logged: (0, 0, Instant::now()),
            progress_log_interval: config.progress_log_interval,
            metrics,
            throttled: None,
        }
    }

    /// A `progress` event when the interval has passed since the last one
    /// (or since the claim): totals of this claim and the rate since then.
    fn log_progress(&mut self) {
        let (batches, keys, at) = self.logged;
        let elapsed = at.elapsed();
        if elapsed < self.progress_log_interval {
            return;
        }
        let keys_per_s = ((self.keys - keys) as f64 / elapsed.as_secs_f64()).round() as u64;
        let batch_size = self.claim.as_ref().and_then(ClaimInfo::batch_size);
        tracing::info!(
            event = "progress",
            backfill = %self.name,
            generation = self.generation,
            batches = self.batches,
            keys = self.keys,
            batches_since = self.batches - batches,
            keys_per_s,
            batch_size,
        );
        self.logged = (self.batches, self.keys, Instant::now());
    }

    fn exit(&mut self, ctx: &mut Context<Self>, reason: ExitReason) {
        self.unthrottle();
        self.supervisor.do_send(RunnerExited {
            id: self.id.clone(),
            partition: self.partition,
            generation: self.generation,
            reason,
            batches: self.batches,
            keys: self.keys,
        });
        ctx.stop();
    }

    /// Give the claim back, then exit (graceful shutdown).
    fn release_and_exit(&mut self, ctx: &mut Context<Self>) {
        // The claim moves into the release: the runner is done with it, and
        // the backend may give back resources the claim carries.
        let Some(claim) = self.claim.take() else {
            return;
        };
        let backend = self.backend.clone();
        self.busy = true;
        ctx.spawn(
            async move { backend.release(&claim).await }
                .into_actor(self)
                .map(|result, act, ctx| {
                    let released = matches!(result, Ok(true));
                    if released {
                        inc(&act.metrics.claims_released);
                    }
                    tracing::info!(event = "claim_released", backfill = %act.name, generation = act.generation, released);
                    act.exit(ctx, ExitReason::Stopped);
                }),
        );
    }

    fn next(&mut self, ctx: &mut Context<Self>) {
        if self.busy {
            return;
        }
        if self.stopping {
            return self.release_and_exit(ctx);
        }
        if self.lost {
            return self.exit(ctx, ExitReason::LeaseLost);
        }
        if Instant::now() >= self.trusted_until {
            tracing::warn!(event = "claim_untrusted", backfill = %self.name, generation = self.generation, "trust window ended without a renewal; stopping before the lease can expire");
            return self.exit(ctx, ExitReason::LeaseLost);
        }
        let Some(mut claim) = self.claim.take() else {
            return;
        };
        self.busy = true;
        let backend = self.backend.clone();
        let metrics = self.metrics.clone();
        // The gate and the batch in one future: a batch the gate lets
        // through costs no extra hop through the actor.
        let fut = async move {
            let gate = match backend.gate(&mut claim).await {
                Ok(Gate::Go) => Gate::Go,
                Ok(gate) => return (claim, Turn::Gated(gate)),
                Err(error) => return (claim, Turn::Ran(Err(error), Duration::ZERO)),
            };
            debug_assert_eq!(gate, Gate::Go);
            inc(&metrics.batches_attempted);
            let started = Instant::now();
            let outcome = backend.step(&mut claim).await;
            let took = started.elapsed();
            metrics.observe_batch(&outcome, took);
            (claim, Turn::Ran(outcome, took))
        };
        ctx.spawn(fut.into_actor(self).map(|(claim, turn), act, ctx| {
            act.busy = false;
            act.claim = Some(claim);
            match turn {
                Turn::Gated(gate) => act.wait(ctx, gate),
                Turn::Ran(outcome, took) => {
                    act.unthrottle();
                    act.finished(ctx, outcome, took);
                }
            }
        }));
    }

    /// The gate said not yet: wait, then ask again. Stop and a lost lease
    /// still end the runner meanwhile (their handlers call `next`).
    fn wait(&mut self, ctx: &mut Context<Self>, gate: Gate) {
        let delay = match gate {
            Gate::Go => Duration::ZERO,
            // A long pause is waited in slices, the gate asked again after
            // each: a live settings change (a shorter pause, THR-4) then
            // takes effect within a slice, not after the old pause ended.
            Gate::Pause(delay) => delay.min(PAUSE_SLICE),
            Gate::Throttled {
                signal,
                text,
                recheck,
            } => {
                if self.throttled.is_none() {
                    inc(&self.metrics.runners_throttled);
                    inc(&self.metrics.throttle_events);
                    tracing::warn!(event = "throttled", backfill = %self.name, generation = self.generation, signal, condition = %text, "a health signal is past its threshold; no batch starts until it recovers");
                    self.throttled = Some((signal, Instant::now()));
                }
                recheck
            }
        };
        ctx.run_later(delay, |act, ctx| act.next(ctx));
    }

    /// Leave the throttled condition, if in it.
    fn unthrottle(&mut self) {
        if let Some((signal, since)) = self.throttled.take() {
            dec(&self.metrics.runners_throttled);
            let throttled_ms = since.elapsed().as_millis() as u64;
            tracing::info!(event = "unthrottled", backfill = %self.name, generation = self.generation, signal, throttled_ms);
        }
    }

    /// Account for and log one batch's outcome, then go on or exit.
    fn finished(
        &mut self,
        ctx: &mut Context<Self>,
        outcome: Result<StepOutcome, crate::BackendError>,
        took: Duration,
    ) {
        let duration_ms = took.as_millis() as u64;
        match outcome {
            Ok(StepOutcome::Committed {
                keys,
                reached_bound,
            }) => {
                self.batches += 1;
                self.keys += keys as u64;
                inc(&self.metrics.batches_committed);
                add(&self.metrics.keys_committed, keys as u64);
                tracing::debug!(event = "batch_committed", backfill = %self.name, generation = self.generation, keys, duration_ms);
                self.log_progress();
                if reached_bound {
                    tracing::info!(event = "validating", backfill = %self.name, batches = self.batches, keys = self.keys);
                    self.exit(ctx, ExitReason::ReachedBound);
                } else {
                    ctx.notify(NextBatch);
                }
            }
            Ok(StepOutcome::Paused) => {
                tracing::info!(event = "batch_paused", backfill = %self.name, generation = self.generation, duration_ms, "paused by an operator; the batch in flight rolled back");
                self.exit(ctx, ExitReason::Stale);
            }
            Ok(StepOutcome::Stale) => {
                inc(&self.metrics.stale_rejections);
                tracing::warn!(event = "stale_owner_rejected", backfill = %self.name, generation = self.generation, duration_ms, "the fence rejected this batch; it rolled back");
                self.exit(ctx, ExitReason::Stale);
            }
            Ok(StepOutcome::Recorded {
                disposition,
                kind,
                message,
                attempts,
            }) => self.recorded(ctx, disposition, kind, &message, attempts),
            Ok(StepOutcome::FailClosed { message }) => {
                inc(&self.metrics.fail_closed);
                tracing::error!(event = "fail_closed", backfill = %self.name, diagnostic = %message);
                self.exit(ctx, ExitReason::FailClosed);
            }
            Err(error) => {
                tracing::error!(event = "backend_error", backfill = %self.name, error = %error.0);
                self.exit(ctx, ExitReason::BackendError);
            }
        }
    }

    /// A batch error the backend recorded durably (RT-1).
    fn recorded(
        &mut self,
        ctx: &mut Context<Self>,
        disposition: Disposition,
        kind: crate::ErrorKind,
        message: &str,
        attempts: i32,
    ) {
        inc(match disposition {
            Disposition::Blocked => &self.metrics.errors_blocked,
            Disposition::Failed => &self.metrics.errors_failed,
            Disposition::Retrying => &self.metrics.errors_retryable,
        });
        match disposition {
            Disposition::Blocked => {
                tracing::warn!(event = "blocked", backfill = %self.name, generation = self.generation, kind = %kind, diagnostic = %message)
            }
            Disposition::Failed => {
                tracing::error!(event = "failed", backfill = %self.name, generation = self.generation, kind = %kind, attempts, diagnostic = %message)
            }
            Disposition::Retrying => {
                tracing::warn!(event = "backoff_scheduled", backfill = %self.name, generation = self.generation, kind = %kind, attempts, diagnostic = %message)
            }
        }
        self.exit(ctx, ExitReason::Recorded { disposition });
    }
}

/// What one turn of the runner did.
enum Turn {
    /// The gate held the batch back.
    Gated(Gate),
    /// The batch ran, with its outcome and duration.
    Ran(Result<StepOutcome, crate::BackendError>, Duration),
}

impl<B: Backend> Actor for Runner<B> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.notify(NextBatch);
    }
}

impl<B: Backend> Handler<Stop> for Runner<B> {
    type Result = ();
    fn handle(&mut self, _msg: Stop, ctx: &mut Self::Context) {
        self.stopping = true;
        self.next(ctx);
    }
}

impl<B: Backend> Handler<NextBatch> for Runner<B> {
    type Result = ();
    fn handle(&mut self, _msg: NextBatch, ctx: &mut Self::Context) {
        self.next(ctx);
    }
}

impl<B: Backend> Handler<LeaseStatus> for Runner<B> {
    type Result = ();
    fn handle(&mut self, msg: LeaseStatus, ctx: &mut Self::Context) {
        match msg {
            LeaseStatus::Renewed {
                generation,
                trusted_until,
            } if generation == self.generation => {
                self.trusted_until = self.trusted_until.max(trusted_until);
            }
            LeaseStatus::Lost { generation } if generation == self.generation => {
                self.lost = true;
                self.next(ctx);
            }
            // Beyond the process's fair share (PAR-6): give the claim
            // back after the current batch, as on a graceful stop.
            LeaseStatus::Yield { generation } if generation == self.generation => {
                self.stopping = true;
                self.next(ctx);
            }
            _ => {}
        }
    }
}
