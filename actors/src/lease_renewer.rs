//! The lease renewer: one per process.
//!
//! The supervisor sends [`Track`] when it hands a claim to a holder (a
//! runner or the validator) and [`Untrack`] when the holder exits. Every
//! `renew_interval` the renewer renews all tracked claims in ONE backend
//! call and tells each holder, with a [`LeaseStatus`], either how long it
//! may still trust its claim or that the claim is lost (CLM-3). A failed
//! renewal sends nothing: the holder's trust window simply runs out before
//! the lease can have expired in PostgreSQL.
//!
//! Every `sample_interval` it also has the backend record the progress of
//! the claims it tracks (OBS-5), in one call, so rates come from the
//! server; a failed sample is logged and the next one tries again.
//!
//! Every `renew_interval`, claims or not, it records the process's
//! presence and free runners (PAR-6), unless it holds no claim and a
//! claim poll recorded the presence it offered since the last round
//! (FLT-1: an idle database then answers only its polls). The backend
//! answers the partition claims the process holds beyond its fair share,
//! and the renewer sends their holders [`LeaseStatus::Yield`]: each gives
//! its claim back at its next batch boundary, for another process to
//! take. When the renewer stops, it withdraws the presence, so the other
//! processes' shares grow at once.

use crate::metrics::{inc, RuntimeMetrics};
use crate::{Backend, ClaimKey, Timing};
use actix::prelude::*;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

/// Start renewing a claim for `holder`.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Track {
    /// The claim to renew.
    pub key: ClaimKey,
    /// The claim's generation; renewal is fenced by it.
    pub generation: i64,
    /// The runner or validator told how each renewal went.
    pub holder: Recipient<LeaseStatus>,
}

/// Stop renewing a claim (its holder exited).
#[derive(Message)]
#[rtype(result = "()")]
pub struct Untrack {
    /// The claim to stop renewing.
    pub key: ClaimKey,
    /// Its generation: a newer claim under the same key stays tracked.
    pub generation: i64,
}

/// Stop presenting backfill `id` (PAR-6): the supervisor gave up on it
/// (REG-4), so this process no longer counts toward its shares.
#[derive(Message)]
#[rtype(result = "()")]
pub struct GiveUp {
    /// The backfill's stable ID.
    pub id: String,
}

/// Withdraw the process's presence and present no more (PAR-6): the
/// supervisor drains, and the claims it gives back are for the other
/// processes to take at once. Sent once, by the supervisor.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Withdraw;

/// Stop the renewer: its supervisor drained and ends, so nothing is left
/// to renew. Sent once, by the supervisor, which awaits the answer: it
/// comes once the presence is withdrawn (or its withdrawal failed), so a
/// host that exits right after its shutdown leaves no presence behind.
#[derive(Message)]
#[rtype(result = "()")]
pub struct StopRenewing;

/// Sent by the renewer to a claim's holder.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
#[rtype(result = "()")]
pub enum LeaseStatus {
    /// Renewed; the holder may trust the claim until `trusted_until`.
    Renewed {
        /// The generation of the renewed claim.
        generation: i64,
        /// The end of the trust window: three quarters of the lease TTL
        /// after the renewal was sent.
        trusted_until: Instant,
    },
    /// PostgreSQL no longer lets this claim renew (expired, taken over,
    /// paused): the holder must not start another batch.
    Lost {
        /// The generation of the lost claim.
        generation: i64,
    },
    /// The process holds more partitions of this backfill than its fair
    /// share (PAR-6): the holder gives the claim back after its current
    /// batch, as on a graceful stop.
    Yield {
        /// The generation of the claim to give back.
        generation: i64,
    },
}

/// The renewer actor.
pub struct LeaseRenewer<B: Backend> {
    backend: Arc<B>,
    worker_id: String,
    timing: Timing,
    claims: HashMap<ClaimKey, (i64, Recipient<LeaseStatus>)>,
    in_flight: bool,
    sampling: bool,
    /// A presence round is in flight.
    presenting: bool,
    /// The presence was withdrawn (draining): no more rounds.
    withdrawn: bool,
    /// The backfills the supervisor gave up on, which the presence leaves
    /// out.
    given_up: Vec<String>,
    /// The claims already asked to yield, so each is logged once.
    yielding: HashSet<(ClaimKey, i64)>,
    /// The process's runner limit, for the free runners it reports.
    max_runners: usize,
    metrics: Arc<RuntimeMetrics>,
}

impl<B: Backend> LeaseRenewer<B> {
    /// A renewer for the claims of `worker_id`.
    pub(crate) fn new(
        backend: Arc<B>,
        worker_id: String,
        timing: Timing,
        max_runners: usize,
        metrics: Arc<RuntimeMetrics>,
    ) -> Self {
        Self {
            backend,
            worker_id,
            timing,
            claims: HashMap::new(),
            in_flight: false,
            sampling: false,
            presenting: false,
            withdrawn: false,
            given_up: Vec::new(),
            yielding: HashSet::new(),
            max_runners,
            metrics,
        }
    }

    /// Every tracked claim with its generation.
    fn tracked(&self) -> Vec<(ClaimKey, i64)> {
        self.claims
            .iter()
            .map(|(id, (generation, _))| (id.clone(), *generation))
            .collect()
    }

    /// One renewal round: renew every tracked claim in one backend call.
    fn run_once(&mut self, ctx: &mut Context<Self>) {
        if self.in_flight || self.claims.is_empty() {
            return;
        }
        self.in_flight = true;
        let pairs = self.tracked();
        let backend = self.backend.clone();
        let worker = self.worker_id.clone();
        let sent = Instant::now();
        let fut = async move {
            let result = backend.renew(&worker, &pairs).await;
            (pairs, result)
        };
        ctx.spawn(fut.into_actor(self).map(move |(pairs, result), act, _| {
            act.in_flight = false;
            let renewed = match result {
                Ok(renewed) => renewed,
                Err(error) => {
                    inc(&act.metrics.renew_failures);
                    tracing::warn!(event = "renew_failed", worker = %act.worker_id, error = %error.0, "lease renewal failed; holders stop when their trust window ends");
                    return;
                }
            };
            let trusted_until = act.timing.trusted_until(sent);
            for (id, generation) in pairs {
                let Some((current, holder)) = act.claims.get(&id) else {
                    continue;
                };
                if *current != generation {
                    continue;
                }
                if renewed.iter().any(|(r, g)| *r == id && *g == generation) {
                    inc(&act.metrics.claims_renewed);
                    tracing::debug!(event = "claim_renewed", backfill = %id, generation);
                    holder.do_send(LeaseStatus::Renewed {
                        generation,
                        trusted_until,
                    });
                } else {
                    inc(&act.metrics.claims_lost);
                    tracing::warn!(event = "claim_lost", backfill = %id, generation, worker = %act.worker_id);
                    holder.do_send(LeaseStatus::Lost { generation });
                    act.claims.remove(&id);
                }
            }
        }));
    }
}

impl<B: Backend> LeaseRenewer<B> {
    /// One sampling round: record the progress of every tracked claim in
    /// one backend call. A round still in flight is not overtaken.
    fn sample_once(&mut self, ctx: &mut Context<Self>) {
        if self.sampling || self.claims.is_empty() {
            return;
        }
        self.sampling = true;
        let pairs = self.tracked();
        let backend = self.backend.clone();
        let worker = self.worker_id.clone();
        let fut = async move { backend.sample_progress(&worker, &pairs).await };
        ctx.spawn(fut.into_actor(self).map(|result, act, _| {
            act.sampling = false;
            if let Err(error) = result {
                tracing::warn!(event = "progress_sample_failed", worker = %act.worker_id, error = %error.0, "progress was not sampled; rates skip this interval");
            }
        }));
    }
}

impl<B: Backend> LeaseRenewer<B> {
    /// One presence round (PAR-6): record the process's presence and free
    /// runners, and ask the holders of the claims beyond its fair share to
    /// give them back. A failed round is logged; the presence then lapses
    /// only if the rounds keep failing for a lease TTL.
    fn present_once(&mut self, ctx: &mut Context<Self>) {
        if self.presenting || self.withdrawn {
            return;
        }
        let free = self.max_runners.saturating_sub(self.claims.len());
        let round = self.timing.renew_interval;
        self.backend
            .offer_presence(&self.worker_id, free, &self.given_up, round);
        // Holding no claim, the round would only record what a claim poll
        // recorded since the last one: nothing to give back is possible.
        if self.claims.is_empty() && self.backend.presence_polled_within(&self.worker_id, round) {
            return;
        }
        self.presenting = true;
        let backend = self.backend.clone();
        let worker = self.worker_id.clone();
        let given_up = self.given_up.clone();
        let fut = async move { backend.presence(&worker, free, &given_up).await };
        ctx.spawn(fut.into_actor(self).map(|result, act, _| {
            act.presenting = false;
            let excess = match result {
                Ok(excess) => excess,
                Err(error) => {
                    tracing::warn!(event = "presence_failed", worker = %act.worker_id, error = %error.0, "presence was not recorded; the fair share counts this process until its presence lapses");
                    return;
                }
            };
            if act.withdrawn {
                return;
            }
            for (key, generation) in excess {
                let Some((current, holder)) = act.claims.get(&key) else {
                    continue;
                };
                if *current != generation {
                    continue;
                }
                if act.yielding.insert((key.clone(), generation)) {
                    tracing::info!(event = "claim_yielded", backfill = %key.id, partition = key.partition, generation, worker = %act.worker_id, "another process lacks its fair share; given back after the current batch");
                }
                holder.do_send(LeaseStatus::Yield { generation });
            }
        }));
    }
}

impl<B: Backend> Actor for LeaseRenewer<B> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if crate::system_dropping() {
            ctx.stop();
            return;
        }
        ctx.run_interval(self.timing.renew_interval, |act, ctx| act.run_once(ctx));
        ctx.run_interval(self.timing.renew_interval, |act, ctx| act.present_once(ctx));
        self.present_once(ctx);
        ctx.run_interval(self.timing.sample_interval, |act, ctx| act.sample_once(ctx));
    }
}

impl<B: Backend> Handler<Track> for LeaseRenewer<B> {
    type Result = ();
    fn handle(&mut self, msg: Track, _ctx: &mut Self::Context) {
        self.claims.insert(msg.key, (msg.generation, msg.holder));
    }
}

impl<B: Backend> Handler<Untrack> for LeaseRenewer<B> {
    type Result = ();
    fn handle(&mut self, msg: Untrack, _ctx: &mut Self::Context) {
        if matches!(self.claims.get(&msg.key), Some((g, _)) if *g == msg.generation) {
            self.claims.remove(&msg.key);
        }
        self.yielding.remove(&(msg.key, msg.generation));
    }
}

impl<B: Backend> Handler<GiveUp> for LeaseRenewer<B> {
    type Result = ();
    fn handle(&mut self, msg: GiveUp, _ctx: &mut Self::Context) {
        if !self.given_up.contains(&msg.id) {
            self.given_up.push(msg.id);
        }
    }
}

impl<B: Backend> LeaseRenewer<B> {
    /// Withdraw the presence and present no more; resolves once it is
    /// withdrawn or the withdrawal failed (logged). If the system ends
    /// before it is withdrawn, it lapses after one lease TTL.
    fn withdraw(&mut self) -> impl ActorFuture<Self, Output = ()> {
        self.withdrawn = true;
        let backend = self.backend.clone();
        let worker = self.worker_id.clone();
        let fut = async move { backend.leave(&worker).await };
        fut.into_actor(self).map(|result, act, _ctx| {
            if let Err(error) = result {
                tracing::warn!(event = "presence_not_withdrawn", worker = %act.worker_id, error = %error.0, "the presence lapses after one lease TTL");
            }
        })
    }
}

impl<B: Backend> Handler<Withdraw> for LeaseRenewer<B> {
    type Result = ();
    fn handle(&mut self, _msg: Withdraw, ctx: &mut Self::Context) {
        ctx.wait(self.withdraw());
    }
}

impl<B: Backend> Handler<StopRenewing> for LeaseRenewer<B> {
    type Result = ResponseActFuture<Self, ()>;
    fn handle(&mut self, _msg: StopRenewing, _ctx: &mut Self::Context) -> Self::Result {
        // Withdraw the presence first (again, should a presence round
        // have landed after the drain's withdrawal), so the other
        // processes may take this one's partitions at once; answer and
        // stop once it is done.
        Box::pin(self.withdraw().map(|(), _act, ctx| ctx.stop()))
    }
}
