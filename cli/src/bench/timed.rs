//! The engine as the runtime's backend with every batch timed.

use async_trait::async_trait;
use backfill::engine::Engine;
use backfill::runtime::{
    Backend, BackendError, ClaimKey, Disposition, Gate, StepOutcome, ValidationOutcome,
};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One committed batch as the `adaptive` run traces it: when it ended,
/// the size it ran with and how long the engine says it took.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    pub(super) at: Instant,
    pub(super) size: u32,
    pub(super) took: Duration,
}

/// The engine as the runtime's backend, timing each batch and reporting
/// terminal outcomes. Latencies go into a vector sized up front, so the
/// batch path does not allocate as history grows. Every batch asks the
/// engine's gate first, as the product's backend does, so pacing and the
/// health monitor (when one is attached) cost what they cost there.
pub(super) struct Timed {
    pub(super) engine: Engine,
    pub(super) latencies: parking_lot::Mutex<Vec<u64>>,
    pub(super) done: tokio::sync::mpsc::UnboundedSender<Result<String, String>>,
    pub(super) failures: AtomicU64,
    /// Each committed batch's size and duration, when the run traces them.
    pub(super) trace: Option<parking_lot::Mutex<Vec<Sample>>>,
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

    async fn gate(&self, claim: &mut Self::Claim) -> Result<Gate, BackendError> {
        Backend::gate(&self.engine, claim).await
    }

    async fn step(&self, claim: &mut Self::Claim) -> Result<StepOutcome, BackendError> {
        let t = Instant::now();
        let outcome = Backend::step(&self.engine, claim).await;
        let micros = t.elapsed().as_micros() as u64;
        self.latencies.lock().push(micros);
        match &outcome {
            Ok(StepOutcome::Committed { .. }) => {
                if let Some(trace) = &self.trace {
                    let (size, took) = claim.last_batch();
                    trace.lock().push(Sample {
                        at: Instant::now(),
                        size,
                        took,
                    });
                }
            }
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
