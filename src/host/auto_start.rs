//! Automatic starts of the required backfills (automatic mode), and their
//! retry in the background after a failure that may pass.

use crate::engine::Engine;
use crate::repair::{bounded, RepairError};
use crate::runtime::RuntimeHandle;
use std::time::Duration;

/// What an automatic start came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Started {
    /// Started, or already past `pending`: nothing more to do.
    Done,
    /// Failed for a reason that may pass (a lock held during a deploy, a
    /// lost connection): worth trying again.
    RetryLater,
    /// Failed for good; logged and left `pending` for the operator.
    Refused,
}

/// Start one required backfill. The gate stays closed while the row stays
/// `pending`.
pub(super) async fn auto_start(engine: &Engine, id: &str) -> Started {
    match engine.start(id).await {
        Ok(outcome) => {
            tracing::info!(event = "auto_start", backfill = %id, state = %outcome.row().state);
            Started::Done
        }
        Err(error) => {
            let retryable = matches!(error.classification(), Some(RepairError::Retryable(_)));
            // Bounded like every diagnostic (AUD-2): the repair's capture
            // error is its own text.
            tracing::error!(event = "auto_start_failed", backfill = %id, retryable, error = %bounded(error.to_string()));
            if retryable {
                Started::RetryLater
            } else {
                Started::Refused
            }
        }
    }
}

/// Try the failed automatic starts again, from the poll interval doubling
/// up to 30 s, until each has started or failed for good; wake the runtime
/// after each start.
pub(super) async fn retry(
    engine: Engine,
    runtime: RuntimeHandle<Engine>,
    mut ids: Vec<String>,
    poll: Duration,
) {
    let mut wait = poll.max(Duration::from_millis(50));
    while !ids.is_empty() {
        actix_rt::time::sleep(wait).await;
        let mut left = Vec::new();
        for id in ids {
            match auto_start(&engine, &id).await {
                Started::Done => runtime.wake(),
                Started::RetryLater => left.push(id),
                Started::Refused => {}
            }
        }
        ids = left;
        wait = (wait * 2).min(Duration::from_secs(30));
    }
}
