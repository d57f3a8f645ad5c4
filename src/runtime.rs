//! The bridge between the engine and the actor runtime: `Engine`
//! implements `backfill_actors::Backend`, so the runtime drives fenced
//! PostgreSQL transactions without seeing SQL.

use crate::engine::{
    BatchOutcome, Claim, Engine, EngineError, FailureOutcome, Phase, ValidationRun,
};
use crate::events::Event;
use crate::lifecycle::State;
use crate::repair::RepairError;

pub use backfill_actors::{RuntimeConfig, RuntimeHandle, RuntimeMetrics};

/// The runtime's side of the bridge: what the engine implements for the
/// actors. Plumbing, not part of the public API.
#[doc(hidden)]
pub use backfill_actors::{
    Backend, BackendError, ClaimInfo, ClaimKey, Disposition, ErrorKind, Gate, StepOutcome,
    ValidationOutcome,
};

impl ClaimInfo for Claim {
    fn id(&self) -> &str {
        &self.id
    }
    fn generation(&self) -> i64 {
        self.generation
    }
    fn partition(&self) -> Option<u32> {
        self.partition
    }
    fn is_validation(&self) -> bool {
        self.phase == Phase::Validate
    }
    fn takeover_from(&self) -> Option<&str> {
        self.takeover_from.as_deref()
    }
    fn batch_size(&self) -> Option<u32> {
        Some(self.last_batch().0).filter(|&size| size > 0)
    }
}

/// `work`'s output, or `None` if it panicked (a bug in a repair's code,
/// say). The caller records the panic against the backfill like any other
/// failure ([`panicked`], RT-1, RT-2). Uncaught, it would end the runner or
/// the validator task without a word to the supervisor, and the renewer
/// would keep the lease alive with nobody working on it (CLM-3).
async fn unless_panicked<T>(work: impl std::future::Future<Output = T>) -> Option<T> {
    use futures_util::FutureExt;
    std::panic::AssertUnwindSafe(work).catch_unwind().await.ok()
}

/// The fatal error a panic in `id`'s repair is recorded as. The panic's
/// message is not kept: it may carry row values (AUD-2); the panic hook
/// has already written it to the worker's stderr.
fn panicked(id: &str) -> EngineError {
    tracing::error!(event = "repair_panicked", backfill = %id, "the repair's code panicked; recorded as fatal");
    EngineError::Repair {
        id: id.to_string(),
        error: crate::repair::RepairError::Fatal(
            "the repair's code panicked (see the worker's log)".into(),
        ),
    }
}

fn backend_error(error: EngineError) -> BackendError {
    BackendError(crate::repair::bounded(error.to_string()))
}

/// How many sessions recording one failure may lose before the failure is
/// left unrecorded (see [`Engine::record`]).
const RECORD_TRIES: u32 = 3;

/// What recording an error produced, in the runtime's vocabulary.
struct Recorded {
    disposition: Disposition,
    kind: ErrorKind,
    message: String,
    attempts: i32,
}

/// The runtime's view of a lifecycle state a failure was recorded as:
/// `blocked` and `failed` are themselves, anything else (`running` with a
/// backoff) is a retry.
fn disposition(state: State) -> Disposition {
    match state {
        State::Blocked => Disposition::Blocked,
        State::Failed => Disposition::Failed,
        _ => Disposition::Retrying,
    }
}

fn error_kind(error: &RepairError) -> ErrorKind {
    match error {
        RepairError::Retryable(_) => ErrorKind::Retryable,
        RepairError::Blocked(_) => ErrorKind::Blocked,
        RepairError::Fatal(_) => ErrorKind::Fatal,
    }
}

impl Engine {
    /// Classify and durably record an engine error for `claim` (RT-1).
    /// `Ok(None)`: the claim was stale, nothing recorded. `Err(message)`:
    /// the error is this process's own (REG-4 fail closed) and is not
    /// recorded against the backfill; the claim is released.
    async fn record(
        &self,
        claim: &Claim,
        error: EngineError,
    ) -> Result<Result<Option<Recorded>, String>, BackendError> {
        let Some(class) = error.classification() else {
            let _ = self.release(claim).await;
            return Ok(Err(crate::repair::bounded(error.to_string())));
        };
        // The failure is recorded on a pooled session of its own, which the
        // cause of the failure may have cut off too: when the server dies
        // or is failed over (CLM-6), a session whose end the pool had not
        // yet seen fails as well. Unrecorded, the error would leave the
        // claim to expire (CLM-3) before anyone retried the backfill, so a
        // lost session is tried again on another; a pool that cannot
        // connect at all has already waited its connection timeout, and is
        // not.
        let mut tries = 1;
        let recorded = loop {
            match self.record_failure(claim, &class).await {
                Err(EngineError::Store(e @ crate::store::StoreError::Database(_)))
                    if tries < RECORD_TRIES && crate::store::is_transient(&e) =>
                {
                    tries += 1;
                }
                recorded => break recorded,
            }
        };
        match recorded {
            Ok(FailureOutcome::Recorded {
                state, attempts, ..
            }) => {
                self.events().publish(|| Event::State {
                    id: claim.id.clone(),
                    state,
                });
                Ok(Ok(Some(Recorded {
                    disposition: disposition(state),
                    kind: error_kind(&class),
                    message: class.message(),
                    attempts,
                })))
            }
            Ok(FailureOutcome::Stale) => Ok(Ok(None)),
            Err(e) => Err(backend_error(e)),
        }
    }
}

#[async_trait::async_trait]
impl Backend for Engine {
    type Claim = Claim;

    async fn register(&self) -> Result<(), BackendError> {
        Engine::register(self).await.map_err(backend_error)
    }

    async fn claim_next(
        &self,
        worker: &str,
        exclude: &[ClaimKey],
    ) -> Result<Result<Option<Claim>, String>, BackendError> {
        let whole: Vec<String> = exclude
            .iter()
            .filter(|k| k.partition.is_none())
            .map(|k| k.id.clone())
            .collect();
        let parts: Vec<(String, u32)> = exclude
            .iter()
            .filter_map(|k| Some((k.id.clone(), k.partition?)))
            .collect();
        match Engine::claim_next_excluding(self, worker, &whole, &parts).await {
            Ok(Some(claim)) => {
                self.events().publish(|| Event::Claimed {
                    id: claim.id.clone(),
                    generation: claim.generation,
                    validation: claim.phase == Phase::Validate,
                });
                Ok(Ok(Some(claim)))
            }
            Ok(None) => Ok(Ok(None)),
            Err(EngineError::KeyMismatch { id, .. })
            | Err(EngineError::NoDefinition(id))
            | Err(EngineError::UnknownState(id)) => Ok(Err(id)),
            Err(e) => Err(backend_error(e)),
        }
    }

    async fn gate(&self, claim: &mut Claim) -> Result<Gate, BackendError> {
        Ok(
            match Engine::gate(self, claim).await.map_err(backend_error)? {
                crate::engine::Gate::Go => Gate::Go,
                crate::engine::Gate::Pause(delay) => Gate::Pause(delay),
                crate::engine::Gate::Throttled { throttle, recheck } => Gate::Throttled {
                    signal: throttle.signal.as_str(),
                    text: throttle.text,
                    recheck,
                },
            },
        )
    }

    async fn step(&self, claim: &mut Claim) -> Result<StepOutcome, BackendError> {
        let batch = unless_panicked(self.run_batch(claim)).await;
        match batch.unwrap_or_else(|| Err(panicked(&claim.id))) {
            Ok(BatchOutcome::Committed {
                keys,
                reached_bound,
            }) => {
                self.events().publish(|| {
                    let (size, took) = claim.last_batch();
                    Event::Progress {
                        id: claim.id.clone(),
                        keys,
                        size,
                        took,
                        at: std::time::Instant::now(),
                    }
                });
                // A partition's end is not the backfill's: the fence
                // moves the backfill on only with its last partition.
                if reached_bound && claim.partition.is_none() {
                    self.events().publish(|| Event::State {
                        id: claim.id.clone(),
                        state: State::Validating,
                    });
                }
                Ok(StepOutcome::Committed {
                    keys,
                    reached_bound,
                })
            }
            // Why the fence said no, read after the rollback: a pause is
            // an operator's decision taking effect, and is told apart so
            // that it neither warns nor counts as a stale owner.
            Ok(BatchOutcome::Stale) => Ok(match self.get(&claim.id).await {
                Ok(row) if row.state == State::Paused => StepOutcome::Paused,
                _ => StepOutcome::Stale,
            }),
            Err(error) => Ok(match self.record(claim, error).await? {
                Ok(Some(r)) => StepOutcome::Recorded {
                    disposition: r.disposition,
                    kind: r.kind,
                    message: r.message,
                    attempts: r.attempts,
                },
                Ok(None) => StepOutcome::Stale,
                Err(message) => StepOutcome::FailClosed { message },
            }),
        }
    }

    async fn validate(&self, claim: &Claim) -> Result<ValidationOutcome, BackendError> {
        let run = unless_panicked(self.validate_claimed(claim)).await;
        match run.unwrap_or_else(|| Err(panicked(&claim.id))) {
            Ok(ValidationRun::Completed) => {
                self.events().publish(|| Event::State {
                    id: claim.id.clone(),
                    state: State::Completed,
                });
                Ok(ValidationOutcome::Completed)
            }
            Ok(ValidationRun::Rejected { state, detail }) => {
                self.events().publish(|| Event::State {
                    id: claim.id.clone(),
                    state,
                });
                Ok(ValidationOutcome::Rejected {
                    disposition: disposition(state),
                    detail,
                })
            }
            Ok(ValidationRun::Stale) => Ok(ValidationOutcome::Stale),
            Ok(ValidationRun::Busy) => {
                // Give the claim back; the next poll tries again after the
                // explicit validation ended.
                let _ = self.release(claim).await;
                Ok(ValidationOutcome::Busy)
            }
            Err(error) => Ok(match self.record(claim, error).await? {
                Ok(Some(r)) => ValidationOutcome::Recorded {
                    disposition: r.disposition,
                    kind: r.kind,
                    message: r.message,
                    attempts: r.attempts,
                },
                Ok(None) => ValidationOutcome::Stale,
                Err(message) => ValidationOutcome::FailClosed { message },
            }),
        }
    }

    async fn renew(
        &self,
        worker: &str,
        claims: &[(ClaimKey, i64)],
    ) -> Result<Vec<(ClaimKey, i64)>, BackendError> {
        let whole: Vec<(String, i64)> = claims
            .iter()
            .filter(|(k, _)| k.partition.is_none())
            .map(|(k, g)| (k.id.clone(), *g))
            .collect();
        let parts: Vec<(String, u32, i64)> = claims
            .iter()
            .filter_map(|(k, g)| Some((k.id.clone(), k.partition?, *g)))
            .collect();
        let mut renewed: Vec<(ClaimKey, i64)> = Engine::renew(self, worker, &whole)
            .await
            .map_err(backend_error)?
            .into_iter()
            .map(|(id, g)| (ClaimKey::whole(id), g))
            .collect();
        let parts = Engine::renew_partitions(self, worker, &parts)
            .await
            .map_err(backend_error)?;
        renewed.extend(parts.into_iter().map(|(id, part, g)| {
            (
                ClaimKey {
                    id,
                    partition: Some(part),
                },
                g,
            )
        }));
        Ok(renewed)
    }

    async fn sample_progress(
        &self,
        worker: &str,
        claims: &[(ClaimKey, i64)],
    ) -> Result<(), BackendError> {
        let claims: Vec<crate::store::SampledClaim> = claims
            .iter()
            .map(|(k, g)| (k.id.clone(), k.partition, *g))
            .collect();
        Engine::sample_progress(self, worker, &claims)
            .await
            .map(|_| ())
            .map_err(backend_error)
    }

    async fn presence(
        &self,
        worker: &str,
        free_runners: usize,
        given_up: &[String],
    ) -> Result<Vec<(ClaimKey, i64)>, BackendError> {
        let excess = Engine::presence(self, worker, free_runners, given_up)
            .await
            .map_err(backend_error)?;
        Ok(excess
            .into_iter()
            .map(|c| {
                let key = ClaimKey {
                    id: c.id,
                    partition: u32::try_from(c.part).ok(),
                };
                (key, c.generation)
            })
            .collect())
    }

    fn offer_presence(
        &self,
        worker: &str,
        free_runners: usize,
        given_up: &[String],
        round: std::time::Duration,
    ) {
        Engine::offer_presence(self, worker, free_runners, given_up, round);
    }

    fn presence_polled_within(&self, worker: &str, within: std::time::Duration) -> bool {
        Engine::presence_polled_within(self, worker, within)
    }

    async fn leave(&self, worker: &str) -> Result<(), BackendError> {
        Engine::leave(self, worker).await.map_err(backend_error)
    }

    async fn release(&self, claim: &Claim) -> Result<bool, BackendError> {
        Engine::release(self, claim).await.map_err(backend_error)
    }

    fn lease_ttl(&self) -> std::time::Duration {
        self.config().lease_ttl
    }
}
