//! A backfill's timeline as the admin API shows it (OBS-4): what happened
//! to it, newest first, automatic or by an operator, from the records the
//! timeline triggers write with each change and the operator actions of
//! the audit that took effect.

use super::view::audit_text;
use super::{page_limit, requested_id, Admin, AdminError, RequestMeta};
use crate::admin::auth::Capability;
use crate::store::{self, TimelineRow};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One entry of a backfill's timeline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct TimelineEntry {
    /// `runtime`: a change recorded with the transaction that made it,
    /// whoever made it. `operator`: an action that took effect (from the
    /// audit, with its actor).
    pub source: String,
    /// When the change was recorded (for an action, when it was audited).
    pub at: DateTime<Utc>,
    /// For `runtime`: `state` (the lifecycle moved), `claimed`, `error` (a
    /// retryable failure; the backfill kept running), `throttled`,
    /// `unthrottled` or `validated` (an explicit validation). For
    /// `operator`: the action (`pause`, `retry`, `settings`, ...).
    pub kind: String,
    /// The partition a runtime entry is about, if any.
    pub partition: Option<i32>,
    /// The state before a lifecycle transition or an action; `null` for
    /// other entries.
    pub from_state: Option<String>,
    /// The state the change or action left, when it records one.
    pub state: Option<String>,
    /// The worker that claimed, or the operator who acted.
    pub actor: Option<String>,
    /// The generation the change left (for a claim, the new claim's).
    pub generation: Option<i64>,
    /// An action's outcome: `applied`, or `converged` when it was already
    /// in effect.
    pub outcome: Option<String>,
    /// The bounded diagnostic of a block, failure or error, the throttle's
    /// signal, value and threshold, a validation's outcome, or an action's
    /// detail.
    pub detail: Option<String>,
    /// The reason the operator gave for an action.
    pub reason: Option<String>,
}

impl From<TimelineRow> for TimelineEntry {
    /// Texts are escaped for display as audit text is (AUD-3).
    fn from(r: TimelineRow) -> Self {
        let shown = |t: String| audit_text(&t);
        TimelineEntry {
            source: r.source,
            at: r.at,
            kind: shown(r.kind),
            partition: r.part,
            from_state: r.from_state,
            state: r.state,
            actor: r.actor.map(shown),
            generation: r.generation,
            outcome: r.outcome,
            detail: r.detail.map(shown),
            reason: r.reason.map(shown),
        }
    }
}

/// The newest entries of a backfill's timeline, newest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct Timeline {
    /// The backfill the timeline is of.
    pub backfill_id: String,
    /// The newest entries, newest first.
    pub items: Vec<TimelineEntry>,
}

impl Admin {
    /// GET /admin/backfills/{id}/timeline: the newest `limit` entries
    /// (default 50, at most 500). Needs `backfill:read`; an unknown ID is
    /// a 404.
    pub async fn timeline(
        &self,
        meta: &RequestMeta<'_>,
        id: &str,
        limit: Option<i64>,
    ) -> Result<Timeline, AdminError> {
        self.authorize(meta, id, "timeline", Capability::Read)
            .await?;
        requested_id("the path's ID", id)?;
        let limit = page_limit(limit)?;
        let mut conn = self.conn().await?;
        store::backfill_get(&mut conn, id)
            .await?
            .ok_or_else(AdminError::not_found)?;
        let rows = store::timeline_list(&mut conn, id, limit).await?;
        Ok(Timeline {
            backfill_id: id.to_string(),
            items: rows.into_iter().map(TimelineEntry::from).collect(),
        })
    }
}
