//! The outbox as the admin API shows it (NTF-2, NTF-3): each queued
//! notification's event, backfill, target name, status, tries and last
//! error. Never a URL or a secret: those are configuration the database
//! does not hold.

use super::{page_limit, Admin, AdminError, RequestMeta, ALL};
use crate::admin::auth::Capability;
use crate::store::{self, OutboxRow};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One queued notification.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct NotificationView {
    /// The stable event ID receivers de-duplicate on.
    #[cfg_attr(feature = "http", schema(value_type = String, format = "uuid"))]
    pub event_id: uuid::Uuid,
    /// Outbox order; pass as `before` to page.
    pub seq: i64,
    /// The target's configured name.
    pub target: String,
    /// The event: `blocked`, `failed`, `completed`, `validation_failed`,
    /// `undo_completed` or `throttled` (NTF-1).
    pub event: String,
    /// The backfill the event is about.
    pub backfill_id: String,
    /// The partition of a partition's throttle; `null` otherwise.
    pub partition: Option<i32>,
    /// `pending`, `delivered` or `dead` (every try failed).
    pub status: String,
    /// Delivery tries so far.
    pub attempts: i32,
    /// When a pending notification is tried next.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Why the last try failed (bounded), while it is not delivered.
    pub last_error: Option<String>,
    /// When the notification was queued, with the change it reports.
    pub created_at: DateTime<Utc>,
    /// When its status or tries last changed.
    pub updated_at: DateTime<Utc>,
}

impl From<OutboxRow> for NotificationView {
    fn from(row: OutboxRow) -> Self {
        NotificationView {
            event_id: row.event_id,
            seq: row.seq,
            target: row.target,
            event: row.event,
            backfill_id: row.backfill_id,
            partition: row.part,
            next_attempt_at: (row.status == "pending").then_some(row.next_attempt_at),
            status: row.status,
            attempts: row.attempts,
            last_error: row.last_error,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// A page of notifications, newest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct NotificationPage {
    /// The notifications of this page, newest first.
    pub items: Vec<NotificationView>,
    /// Pass as `before` for the next page; `null` = last page.
    pub next_before: Option<i64>,
}

impl Admin {
    /// GET /admin/notifications: the outbox, newest first, optionally of
    /// one status. Needs `backfill:read`.
    pub async fn notifications(
        &self,
        meta: &RequestMeta<'_>,
        status: Option<&str>,
        before: Option<i64>,
        limit: Option<i64>,
    ) -> Result<NotificationPage, AdminError> {
        self.authorize(meta, ALL, "notifications", Capability::Read)
            .await?;
        if let Some(status) = status {
            if !["pending", "delivered", "dead"].contains(&status) {
                return Err(AdminError::BadRequest(
                    "status must be pending, delivered or dead".into(),
                ));
            }
        }
        let limit = page_limit(limit)?;
        let mut conn = self.conn().await?;
        let rows = store::outbox_list(&mut conn, status, before, limit + 1).await?;
        let more = rows.len() as i64 > limit;
        let items: Vec<NotificationView> = rows
            .into_iter()
            .take(limit as usize)
            .map(NotificationView::from)
            .collect();
        let next_before = more.then(|| items.last().map(|n| n.seq)).flatten();
        Ok(NotificationPage { items, next_before })
    }
}
