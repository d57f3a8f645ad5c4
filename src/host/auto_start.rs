//! Automatic starts of the required backfills (automatic mode), the record
//! of a failed one on its row (EMB-8), and their retry in the background
//! while the cause may pass.

use crate::engine::{Engine, EngineError};
use crate::failure::{bounded, bounded_with_step, without_retry_step};
use crate::runtime::RuntimeHandle;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The longest wait between two tries of a failed automatic start; the
/// diagnostic of a retried one names it.
pub(super) const RETRY_MAX: Duration = Duration::from_secs(30);

/// What an automatic start came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Started {
    /// Started, or already past `pending`: nothing more to do.
    Done,
    /// Failed for a reason that may pass (a lock held during a deploy, a
    /// lost connection, a table or grant the deploy has not created yet):
    /// recorded on the row and worth trying again.
    RetryLater,
    /// Failed for good; recorded on the row, left `pending` for the
    /// operator's start.
    Refused,
}

/// Start one required backfill. The gate stays closed while the row stays
/// `pending`; a failure is recorded on the row and published as
/// [`crate::events::Event::StartFailed`], so it is seen without a log
/// subscriber.
pub(super) async fn auto_start(engine: &Engine, id: &str) -> Started {
    match engine.start(id).await {
        Ok(outcome) => {
            tracing::info!(event = "auto_start", backfill = %id, state = %outcome.row().state);
            Started::Done
        }
        Err(error) => {
            let (kind, diagnostic, retrying) = diagnostic(&error);
            tracing::error!(event = "auto_start_failed", backfill = %id, kind, retrying, error = %diagnostic);
            if let Err(e) = engine
                .record_start_failure(id, kind, &diagnostic, retrying)
                .await
            {
                tracing::warn!(event = "auto_start_record_failed", backfill = %id, error = %bounded(e.to_string()));
            }
            if retrying {
                Started::RetryLater
            } else {
                Started::Refused
            }
        }
    }
}

/// The recorded kind and diagnostic of a failed start, and whether the
/// automatic start tries again. The diagnostic ends with what to do for a
/// `pending` row: a retry applies only to `blocked` and `failed` rows, so
/// a closing "then retry" of the cause's text gives way to the step that
/// does apply. Bounded like every diagnostic (AUD-2): the repair's
/// capture error is its own text.
fn diagnostic(error: &EngineError) -> (&'static str, String, bool) {
    let (kind, text) = match error.classification() {
        Some(e) => (e.kind(), e.message()),
        // Not a verdict on the data (a definition's split points, say),
        // but still why this row did not start.
        None => ("fatal", bounded(error.to_string())),
    };
    let cause = without_retry_step(&text);
    let retrying = matches!(kind, "retryable" | "blocked");
    let step = if retrying {
        format!(
            "; the automatic start tries again within {} s",
            RETRY_MAX.as_secs()
        )
    } else {
        "; fix the cause, then start it (the automatic start does not try again)".to_string()
    };
    (kind, bounded_with_step(cause, &step), retrying)
}

/// Try the failed automatic starts again, from the poll interval doubling
/// up to [`RETRY_MAX`], or at once when `now` is notified, until each has
/// started or failed for good; wake the runtime after each start.
pub(super) async fn retry(
    engine: Engine,
    runtime: RuntimeHandle<Engine>,
    mut ids: Vec<String>,
    poll: Duration,
    now: Arc<Notify>,
) {
    let mut wait = poll.max(Duration::from_millis(50));
    while !ids.is_empty() {
        tokio::select! {
            _ = actix_rt::time::sleep(wait) => {}
            _ = now.notified() => {}
        }
        let mut left = Vec::new();
        for id in ids {
            match auto_start(&engine, &id).await {
                Started::Done => runtime.wake(),
                Started::RetryLater => left.push(id),
                Started::Refused => {}
            }
        }
        ids = left;
        wait = (wait * 2).min(RETRY_MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::diagnostic;
    use crate::engine::EngineError;
    use crate::failure::MAX_DIAGNOSTIC_BYTES;
    use crate::repair::RepairError;

    fn repair(error: RepairError) -> EngineError {
        EngineError::Repair {
            id: "t.v1".into(),
            error,
        }
    }

    /// EMB-8: a start blocked on a missing table is retried, and its
    /// diagnostic says so instead of "then retry", which does not apply to
    /// a `pending` row; a fatal one says to start it.
    #[test]
    fn emb08_start_diagnostic_names_the_step_of_a_pending_row() {
        let missing = RepairError::Blocked(
            "missing relation, column or function: the repair's schema prerequisite is not \
             in place; apply the migration, then retry"
                .into(),
        );
        let (kind, text, retrying) = diagnostic(&repair(missing));
        assert_eq!((kind, retrying), ("blocked", true));
        assert!(!text.contains("retry"), "{text}");
        assert!(
            text.ends_with("apply the migration; the automatic start tries again within 30 s"),
            "{text}"
        );
        let (kind, text, retrying) = diagnostic(&repair(RepairError::Fatal("bad".into())));
        assert_eq!((kind, retrying), ("fatal", false));
        assert!(
            text.starts_with("bad; fix the cause, then start it"),
            "{text}"
        );
        let (_, long, _) = diagnostic(&repair(RepairError::Blocked("x".repeat(600))));
        assert!(long.len() <= MAX_DIAGNOSTIC_BYTES, "{}", long.len());
        assert!(long.ends_with("tries again within 30 s"), "{long}");
    }
}
