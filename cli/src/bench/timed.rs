//! The engine as the runtime's backend with every batch timed.

use async_trait::async_trait;
use backfill::engine::Engine;
use backfill::runtime::{
    Backend, BackendError, ClaimKey, Disposition, StepOutcome, ValidationOutcome,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The engine as the runtime's backend, timing each batch and reporting
/// terminal outcomes. Latencies go into a vector sized up front, so the
/// batch path does not allocate as history grows.
pub(super) struct Timed {
    pub(super) engine: Engine,
    pub(super) latencies: parking_lot::Mutex<Vec<u64>>,
    pub(super) done: tokio::sync::mpsc::UnboundedSender<Result<String, String>>,
    pub(super) failures: AtomicU64,
}

#[async_trait]
impl Backend for Timed {
    type Claim = backfill::engine::Claim;

    async fn register(&self) -> Result<(), BackendError> {
        Backend::register(&self.engine).await
    }

    async fn claim_next(
        &self,
        worker: &str,
        exclude: &[ClaimKey],
    ) -> Result<Result<Option<Self::Claim>, String>, BackendError> {
        Backend::claim_next(&self.engine, worker, exclude).await
    }

    async fn step(&self, claim: &mut Self::Claim) -> Result<StepOutcome, BackendError> {
        let t = Instant::now();
        let outcome = Backend::step(&self.engine, claim).await;
        let micros = t.elapsed().as_micros() as u64;
        self.latencies.lock().push(micros);
        match &outcome {
            Ok(StepOutcome::Committed { .. }) => {}
            Ok(StepOutcome::Recorded {
                disposition: Disposition::Retrying,
                ..
            }) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
            }
            Ok(other) => {
                let _ = self.done.send(Err(format!("{}: {other:?}", claim.id)));
            }
            Err(e) => {
                let _ = self.done.send(Err(format!("{}: {}", claim.id, e.0)));
            }
        }
        outcome
    }

    async fn validate(&self, claim: &Self::Claim) -> Result<ValidationOutcome, BackendError> {
        let outcome = Backend::validate(&self.engine, claim).await;
        let _ = self.done.send(match &outcome {
            Ok(ValidationOutcome::Completed) => Ok(claim.id.clone()),
            Ok(other) => Err(format!("{}: {other:?}", claim.id)),
            Err(e) => Err(format!("{}: {}", claim.id, e.0)),
        });
        outcome
    }

    async fn renew(
        &self,
        worker: &str,
        claims: &[(ClaimKey, i64)],
    ) -> Result<Vec<(ClaimKey, i64)>, BackendError> {
        Backend::renew(&self.engine, worker, claims).await
    }

    async fn release(&self, claim: &Self::Claim) -> Result<bool, BackendError> {
        Backend::release(&self.engine, claim).await
    }

    fn lease_ttl(&self) -> Duration {
        Backend::lease_ttl(&self.engine)
    }
}
