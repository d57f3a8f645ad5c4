//! The supervisor: one per process.
//!
//! Registers the local definitions before it claims anything (REG-4), then
//! on every poll tick and every [`Wake`] (a hint: NOTIFY, an admin action)
//! claims eligible backfills up to `max_concurrent_runners` and hands each
//! claim to a holder: a [`Runner`] per `running` ID, or the [`Validator`]
//! for a `validating` one, tracking it with the [`LeaseRenewer`]. Holders
//! report back with [`RunnerExited`] / [`ValidationFinished`]. [`Shutdown`]
//! drains: no new claims, runners stop after their in-flight batch and
//! release their claims, within the grace period. Then the supervisor
//! stops itself, the renewer and the validator, which lets go of the
//! backend (and so of its connection pool): a host that starts runtimes
//! one after another does not keep every earlier one's connections.

use crate::lease_renewer::{GiveUp, LeaseRenewer, StopRenewing, Track, Untrack, Withdraw};
use crate::metrics::{inc, RuntimeMetrics};
use crate::runner::{ExitReason, Runner, RunnerExited, Stop};
use crate::validator::{Validate, ValidationFinished, Validator};
use crate::{Backend, ClaimInfo, ClaimKey, ConfigError, RuntimeConfig, Timing};
use actix::prelude::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// Look for claimable work now (a hint; losing it changes nothing).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Wake;

/// Drain and stop claiming. Resolves when every holder ended or the grace
/// period passed; the supervisor, the renewer and the validator then stop
/// (a [`Status`] sent afterwards gets no answer).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Shutdown;

/// A snapshot of what this process holds (for hosts and tests; the
/// authority is PostgreSQL).
#[derive(Message)]
#[rtype(result = "SupervisorStatus")]
pub struct Status;

/// What [`Status`] answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SupervisorStatus {
    /// Whether the local definitions are registered, which must happen
    /// before the first claim (REG-4).
    pub registered: bool,
    /// Whether the process is shutting down: it claims nothing more and
    /// waits for its runners to end.
    pub draining: bool,
    /// `(id, generation, is_validation)` of every held claim (a
    /// partitioned backfill's ID once per partition held).
    pub held: Vec<(String, i64, bool)>,
    /// IDs this process refuses to claim (REG-4 fail closed).
    pub excluded: Vec<String>,
}

enum Holder<B: Backend> {
    Runner(Addr<Runner<B>>),
    Validation,
}

struct Held<B: Backend> {
    generation: i64,
    holder: Holder<B>,
}

/// The supervisor actor.
pub struct Supervisor<B: Backend> {
    backend: Arc<B>,
    config: RuntimeConfig,
    timing: Timing,
    renewer: Option<Addr<LeaseRenewer<B>>>,
    validator: Option<Addr<Validator<B>>>,
    held: HashMap<ClaimKey, Held<B>>,
    excluded: Vec<String>,
    registered: bool,
    registering: bool,
    claiming: bool,
    draining: bool,
    drain_waiters: Vec<oneshot::Sender<()>>,
    metrics: Arc<RuntimeMetrics>,
    /// How many claims `held` has, for readers outside the actor (a host
    /// that keeps its wake-up listener only while it works).
    held_count: Arc<AtomicUsize>,
}

impl<B: Backend> Supervisor<B> {
    /// A supervisor over `backend`.
    pub fn new(backend: Arc<B>, config: RuntimeConfig) -> Result<Self, ConfigError> {
        let timing = config.timing(backend.lease_ttl())?;
        Ok(Self {
            backend,
            config,
            timing,
            renewer: None,
            validator: None,
            held: HashMap::new(),
            held_count: Arc::new(AtomicUsize::new(0)),
            excluded: Vec::new(),
            registered: false,
            registering: false,
            claiming: false,
            draining: false,
            drain_waiters: Vec::new(),
            metrics: Arc::new(RuntimeMetrics::default()),
        })
    }

    fn register(&mut self, ctx: &mut Context<Self>) {
        if self.registering || self.registered {
            return;
        }
        self.registering = true;
        let backend = self.backend.clone();
        ctx.spawn(
            async move { backend.register().await }
                .into_actor(self)
                .map(|result, act, ctx| {
                    act.registering = false;
                    match result {
                        Ok(()) => {
                            act.registered = true;
                            tracing::info!(event = "registered", worker = %act.config.worker_id);
                            act.tick(ctx);
                        }
                        Err(error) => {
                            tracing::error!(event = "register_failed", error = %error.0, "will retry on the next poll");
                        }
                    }
                }),
        );
    }

    /// One claim round: fill free capacity with claims.
    fn tick(&mut self, ctx: &mut Context<Self>) {
        if self.draining || self.claiming {
            return;
        }
        if !self.registered {
            return self.register(ctx);
        }
        let free = self
            .config
            .max_concurrent_runners
            .saturating_sub(self.held.len());
        if free == 0 {
            return;
        }
        self.claiming = true;
        let backend = self.backend.clone();
        let worker = self.config.worker_id.clone();
        let mut exclude: Vec<ClaimKey> = self.excluded.iter().map(ClaimKey::whole).collect();
        exclude.extend(self.held.keys().cloned());
        let fut = async move {
            let mut claims = Vec::new();
            let mut refused = Vec::new();
            let mut error = None;
            while claims.len() < free {
                let sent = Instant::now();
                match backend.claim_next(&worker, &exclude).await {
                    Ok(Ok(Some(claim))) => {
                        exclude.push(claim.key());
                        claims.push((claim, sent));
                    }
                    Ok(Ok(None)) => break,
                    Ok(Err(id)) => {
                        exclude.push(ClaimKey::whole(id.clone()));
                        refused.push(id);
                    }
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
            (claims, refused, error)
        };
        ctx.spawn(
            fut.into_actor(self)
                .map(|(claims, refused, error), act, ctx| {
                    act.claiming = false;
                    if let Some(error) = error {
                        tracing::warn!(event = "claim_failed", error = %error.0);
                    }
                    for id in refused {
                        tracing::error!(event = "fail_closed", backfill = %id, "this process cannot interpret the row (key type or state); not claiming it again");
                        act.give_up(id);
                    }
                    for (claim, sent) in claims {
                        act.adopt(ctx, claim, sent);
                    }
                }),
        );
    }

    /// Hand a fresh claim to its holder and start renewing it.
    fn adopt(&mut self, ctx: &mut Context<Self>, claim: B::Claim, sent: Instant) {
        let key = claim.key();
        let id = key.to_string();
        let generation = claim.generation();
        inc(if claim.takeover_from().is_some() {
            &self.metrics.claims_taken_over
        } else {
            &self.metrics.claims_acquired
        });
        match claim.takeover_from() {
            Some(prior) => {
                tracing::warn!(event = "claim_takeover", backfill = %id, generation, worker = %self.config.worker_id, prior_owner = %prior)
            }
            None => {
                tracing::info!(event = "claim_acquired", backfill = %id, generation, worker = %self.config.worker_id, validation = claim.is_validation())
            }
        }
        if self.draining {
            // Shutdown raced the claim: hand it straight back.
            let backend = self.backend.clone();
            ctx.spawn(
                async move {
                    let _ = backend.release(&claim).await;
                }
                .into_actor(self),
            );
            return;
        }
        let (Some(renewer), Some(validator)) = (self.renewer.clone(), self.validator.clone())
        else {
            return;
        };
        let holder = if claim.is_validation() {
            renewer.do_send(Track {
                key: key.clone(),
                generation,
                holder: validator.clone().recipient(),
            });
            validator.do_send(Validate(claim));
            Holder::Validation
        } else {
            let runner = crate::start_in_current_span(Runner::new(
                self.backend.clone(),
                &self.config,
                self.timing,
                claim,
                sent,
                ctx.address().recipient(),
                self.metrics.clone(),
            ));
            renewer.do_send(Track {
                key: key.clone(),
                generation,
                holder: runner.clone().recipient(),
            });
            Holder::Runner(runner)
        };
        self.held.insert(key, Held { generation, holder });
        self.held_count.store(self.held.len(), Ordering::Relaxed);
    }

    /// Stop claiming `id` (the row cannot be interpreted here, REG-4), and
    /// stop presenting it, so the other processes' shares of it do not
    /// wait for this one (PAR-6).
    fn give_up(&mut self, id: String) {
        if let Some(renewer) = &self.renewer {
            renewer.do_send(GiveUp { id: id.clone() });
        }
        self.excluded.push(id);
    }

    fn forget(&mut self, key: ClaimKey, generation: i64) {
        if matches!(self.held.get(&key), Some(h) if h.generation == generation) {
            self.held.remove(&key);
            self.held_count.store(self.held.len(), Ordering::Relaxed);
        }
        if let Some(renewer) = &self.renewer {
            renewer.do_send(Untrack { key, generation });
        }
        if self.draining && self.held.is_empty() {
            for waiter in self.drain_waiters.drain(..) {
                let _ = waiter.send(());
            }
        }
    }
}

impl<B: Backend> Actor for Supervisor<B> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if crate::system_dropping() {
            ctx.stop();
            return;
        }
        self.renewer = Some(crate::start_in_current_span(LeaseRenewer::new(
            self.backend.clone(),
            self.config.worker_id.clone(),
            self.timing,
            self.config.max_concurrent_runners,
            self.metrics.clone(),
        )));
        self.validator = Some(crate::start_in_current_span(Validator::new(
            self.backend.clone(),
            ctx.address().recipient(),
            self.metrics.clone(),
        )));
        self.register(ctx);
        ctx.run_interval(self.config.poll_interval, |act, ctx| act.tick(ctx));
    }
}

impl<B: Backend> Handler<Wake> for Supervisor<B> {
    type Result = ();
    fn handle(&mut self, _msg: Wake, ctx: &mut Self::Context) {
        self.tick(ctx);
    }
}

impl<B: Backend> Handler<RunnerExited> for Supervisor<B> {
    type Result = ();
    fn handle(&mut self, msg: RunnerExited, ctx: &mut Self::Context) {
        let key = ClaimKey {
            id: msg.id,
            partition: msg.partition,
        };
        tracing::info!(event = "runner_exited", backfill = %key, generation = msg.generation, reason = ?msg.reason, batches = msg.batches, keys = msg.keys);
        if msg.reason == ExitReason::FailClosed {
            self.give_up(key.id.clone());
        }
        self.forget(key, msg.generation);
        // Reaching the bound makes the row claimable for validation now.
        if msg.reason == ExitReason::ReachedBound {
            self.tick(ctx);
        }
    }
}

impl<B: Backend> Handler<ValidationFinished> for Supervisor<B> {
    type Result = ();
    fn handle(&mut self, msg: ValidationFinished, ctx: &mut Self::Context) {
        if matches!(msg.outcome, Ok(crate::ValidationOutcome::FailClosed { .. })) {
            self.give_up(msg.id.clone());
        }
        self.forget(ClaimKey::whole(msg.id), msg.generation);
        // An explicit validation holds this ID's validation lock (VAL-6)
        // and the claim was given back. Claiming again at once would find
        // the same row and the same lock, over and over (a new generation
        // each time) for as long as that validation runs; the next poll
        // tries again instead.
        if !matches!(msg.outcome, Ok(crate::ValidationOutcome::Busy)) {
            self.tick(ctx);
        }
    }
}

impl<B: Backend> Handler<Shutdown> for Supervisor<B> {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, _msg: Shutdown, _ctx: &mut Self::Context) -> Self::Result {
        self.draining = true;
        tracing::info!(event = "draining", worker = %self.config.worker_id, held = self.held.len());
        // The claims given back while draining are for the other
        // processes to take at once (PAR-6).
        if let Some(renewer) = &self.renewer {
            renewer.do_send(Withdraw);
        }
        let (tx, rx) = oneshot::channel();
        if self.held.is_empty() {
            let _ = tx.send(());
        } else {
            self.drain_waiters.push(tx);
            for held in self.held.values() {
                if let Holder::Runner(runner) = &held.holder {
                    runner.do_send(Stop);
                }
            }
        }
        let grace = self.config.shutdown_grace;
        Box::pin(
            async move {
                if tokio::time::timeout(grace, rx).await.is_err() {
                    tracing::warn!(
                        event = "drain_timeout",
                        "grace period ended with work in flight; its leases will expire"
                    );
                }
            }
            .into_actor(self)
            .then(move |(), act, _ctx| {
                // The renewer's interval would keep it (and the backend it
                // holds) alive for good, so it is stopped; its answer comes
                // once the presence is withdrawn, bounded by the grace
                // period like the drain.
                let renewer = act.renewer.take();
                async move {
                    if let Some(renewer) = renewer {
                        let _ = tokio::time::timeout(grace, renewer.send(StopRenewing)).await;
                    }
                }
                .into_actor(act)
            })
            .map(|(), act, ctx| {
                // The validator ends once no address to it is left.
                act.validator = None;
                ctx.stop();
            }),
        )
    }
}

impl<B: Backend> Handler<Status> for Supervisor<B> {
    type Result = MessageResult<Status>;
    fn handle(&mut self, _msg: Status, _ctx: &mut Self::Context) -> Self::Result {
        let mut held: Vec<(String, i64, bool)> = self
            .held
            .iter()
            .map(|(key, h)| {
                (
                    key.id.clone(),
                    h.generation,
                    matches!(h.holder, Holder::Validation),
                )
            })
            .collect();
        held.sort();
        MessageResult(SupervisorStatus {
            registered: self.registered,
            draining: self.draining,
            held,
            excluded: self.excluded.clone(),
        })
    }
}

/// A handle on a running supervisor.
pub struct RuntimeHandle<B: Backend> {
    supervisor: Addr<Supervisor<B>>,
    metrics: Arc<RuntimeMetrics>,
    held_count: Arc<AtomicUsize>,
}

impl<B: Backend> Clone for RuntimeHandle<B> {
    fn clone(&self) -> Self {
        Self {
            supervisor: self.supervisor.clone(),
            metrics: self.metrics.clone(),
            held_count: self.held_count.clone(),
        }
    }
}

impl<B: Backend> RuntimeHandle<B> {
    /// Start the runtime on the current actix arbiter. Must be called from
    /// within an actix system.
    pub fn start(backend: Arc<B>, config: RuntimeConfig) -> Result<Self, ConfigError> {
        let supervisor = Supervisor::new(backend, config)?;
        let metrics = supervisor.metrics.clone();
        let held_count = supervisor.held_count.clone();
        Ok(Self {
            supervisor: crate::start_in_current_span(supervisor),
            metrics,
            held_count,
        })
    }

    /// How many claims (runs and validations) the runtime holds now,
    /// without asking the supervisor.
    pub fn claims_held(&self) -> usize {
        self.held_count.load(Ordering::Relaxed)
    }

    /// The runtime's counters (OBS-1).
    pub fn metrics(&self) -> &Arc<RuntimeMetrics> {
        &self.metrics
    }

    /// Look for work now (hint only).
    pub fn wake(&self) {
        self.supervisor.do_send(Wake);
    }

    /// A snapshot of the claims this process holds.
    pub async fn status(&self) -> Option<SupervisorStatus> {
        self.supervisor.send(Status).await.ok()
    }

    /// Drain: stop claiming, let in-flight batches finish, release claims.
    pub async fn shutdown(&self) {
        let _ = self.supervisor.send(Shutdown).await;
    }

    /// The supervisor's address.
    pub fn supervisor(&self) -> &Addr<Supervisor<B>> {
        &self.supervisor
    }
}
