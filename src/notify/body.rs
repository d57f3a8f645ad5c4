//! The JSON body of a notification (NTF-3): IDs, states and the bounded
//! diagnostic the state change recorded; never row data, URLs or secrets.

use crate::store::OutboxRow;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// What the body says about delivery, for a receiver that sees an event
/// twice.
pub const DELIVERY: &str =
    "at-least-once: the same event_id can arrive more than once; de-duplicate on it";

/// A notification's body. The same outbox row always makes the same body,
/// so every retry carries the same `event_id` and content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Body {
    /// Stable across retries: the de-duplication key.
    pub event_id: uuid::Uuid,
    /// `blocked`, `failed`, `completed`, `validation_failed`, `throttled`
    /// or `undo_completed`.
    pub event: String,
    /// When the state change committed (its transaction's start, by
    /// PostgreSQL's clock) or the throttle was found long.
    pub occurred_at: DateTime<Utc>,
    /// The backfill the event is about.
    pub backfill_id: String,
    /// The partition a `throttled` notification is about, if any.
    pub partition: Option<i32>,
    /// The state the change left the backfill in.
    pub state: String,
    /// The backfill's generation after the change.
    pub generation: i64,
    /// For an undo: the backfill it takes back.
    pub undo_of: Option<String>,
    /// The recorded error's class (`retryable`, `blocked`, `fatal`,
    /// `validation`), if the change recorded one.
    pub error_kind: Option<String>,
    /// The bounded diagnostic (at most 512 bytes), or the throttle's text.
    pub detail: Option<String>,
    /// [`DELIVERY`].
    pub delivery: String,
    /// A one-line summary, which Slack-compatible incoming webhooks show.
    pub text: String,
}

impl Body {
    /// The body of one outbox row.
    pub fn of(row: &OutboxRow) -> Body {
        let part = row
            .part
            .map(|p| format!(" partition {p}"))
            .unwrap_or_default();
        let mut text = format!("backfill {}{part}: {}", row.backfill_id, row.event);
        if let Some(detail) = &row.detail {
            text.push_str(": ");
            text.push_str(detail);
        }
        Body {
            event_id: row.event_id,
            event: row.event.clone(),
            occurred_at: row.created_at,
            backfill_id: row.backfill_id.clone(),
            partition: row.part,
            state: row.state.clone(),
            generation: row.generation,
            undo_of: row.undo_of.clone(),
            error_kind: row.error_kind.clone(),
            detail: row.detail.clone(),
            delivery: DELIVERY.into(),
            text,
        }
    }
}
