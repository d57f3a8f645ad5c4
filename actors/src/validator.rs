//! The validator: one per process.
//!
//! The supervisor sends [`Validate`] with a claim on a `validating` row;
//! the validator runs the definition's validation and the fenced
//! completion through [`Backend::validate`] (VAL-1..3), one at a time per
//! stable ID, and reports [`ValidationFinished`] upward (`do_send`).
//! Explicit operator validations are served by the admin layer in
//! PostgreSQL (VAL-6 is serialized there, not in this process).

use crate::lease_renewer::LeaseStatus;
use crate::metrics::{inc, RuntimeMetrics};
use crate::{Backend, ClaimInfo, ValidationOutcome};
use actix::prelude::*;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

/// Validate a claimed `validating` row.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Validate<C: ClaimInfo>(pub C);

/// Sent to the supervisor when a validation ended.
#[derive(Message, Debug, Clone)]
#[rtype(result = "()")]
pub struct ValidationFinished {
    /// The backfill validated.
    pub id: String,
    /// The generation of the validation's claim.
    pub generation: i64,
    /// How the validation ended, or the backend error that kept it from
    /// ending durably.
    pub outcome: Result<ValidationOutcome, String>,
}

/// The validator actor.
pub struct Validator<B: Backend> {
    backend: Arc<B>,
    supervisor: Recipient<ValidationFinished>,
    in_flight: HashSet<String>,
    metrics: Arc<RuntimeMetrics>,
}

impl<B: Backend> Validator<B> {
    /// A validator reporting to `supervisor`.
    pub fn new(
        backend: Arc<B>,
        supervisor: Recipient<ValidationFinished>,
        metrics: Arc<RuntimeMetrics>,
    ) -> Self {
        Self {
            backend,
            supervisor,
            in_flight: HashSet::new(),
            metrics,
        }
    }
}

impl<B: Backend> Actor for Validator<B> {
    type Context = Context<Self>;
}

impl<B: Backend> Handler<Validate<B::Claim>> for Validator<B> {
    type Result = ();
    fn handle(&mut self, msg: Validate<B::Claim>, ctx: &mut Self::Context) {
        let claim = msg.0;
        let id = claim.id().to_string();
        let generation = claim.generation();
        if !self.in_flight.insert(id.clone()) {
            // One validation per stable ID at a time in this process; the
            // claim is exclusive, so this only guards against a duplicate
            // message.
            return;
        }
        let backend = self.backend.clone();
        let started = Instant::now();
        let fut = async move { backend.validate(&claim).await };
        ctx.spawn(fut.into_actor(self).map(move |result, act, _| {
            act.in_flight.remove(&id);
            let took = started.elapsed();
            act.metrics.observe_validation(&result, took);
            let duration_ms = took.as_millis() as u64;
            inc(match &result {
                Ok(ValidationOutcome::Completed) => &act.metrics.validations_completed,
                Ok(ValidationOutcome::Rejected { .. }) => &act.metrics.validations_rejected,
                Ok(ValidationOutcome::Stale) => &act.metrics.stale_rejections,
                Ok(ValidationOutcome::Busy) => &act.metrics.validation_errors,
                Ok(ValidationOutcome::FailClosed { .. }) => &act.metrics.fail_closed,
                Ok(ValidationOutcome::Recorded { .. }) | Err(_) => &act.metrics.validation_errors,
            });
            match &result {
                Ok(ValidationOutcome::Completed) => {
                    tracing::info!(event = "completed", backfill = %id, generation, duration_ms)
                }
                Ok(ValidationOutcome::Rejected { disposition, detail }) => {
                    tracing::error!(event = "validation_failed", backfill = %id, generation, state = %disposition, diagnostic = %detail, duration_ms)
                }
                Ok(ValidationOutcome::Stale) => {
                    tracing::warn!(event = "stale_owner_rejected", backfill = %id, generation, phase = "validation")
                }
                Ok(ValidationOutcome::Busy) => {
                    tracing::info!(event = "validation_busy", backfill = %id, generation, "an explicit validation is running; will retry")
                }
                Ok(ValidationOutcome::Recorded { disposition, kind, message, attempts }) => {
                    tracing::warn!(event = "validation_error", backfill = %id, generation, state = %disposition, kind = %kind, attempts, diagnostic = %message)
                }
                Ok(ValidationOutcome::FailClosed { message }) => {
                    tracing::error!(event = "fail_closed", backfill = %id, diagnostic = %message)
                }
                Err(error) => {
                    tracing::error!(event = "backend_error", backfill = %id, error = %error.0)
                }
            }
            act.supervisor.do_send(ValidationFinished {
                id,
                generation,
                outcome: result.map_err(|e| e.0),
            });
        }));
    }
}

impl<B: Backend> Handler<LeaseStatus> for Validator<B> {
    type Result = ();
    fn handle(&mut self, msg: LeaseStatus, _ctx: &mut Self::Context) {
        // A validation is one transaction whose completion is fenced by
        // PostgreSQL; a lost lease makes that completion fail, so there is
        // nothing to stop here.
        if let LeaseStatus::Lost { generation } = msg {
            tracing::debug!(event = "validation_claim_lost", generation);
        }
    }
}
