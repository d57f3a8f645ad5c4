//! The settings action (THR-4): change a backfill's live settings while it
//! runs, without a restart.
//!
//! A change is stored with the row and announced on the wake-up channel;
//! it is not a lifecycle transition and advances no generation, so a batch
//! in flight commits as usual, and the change is what the next read of the
//! row (a runner's, before its next batch) sees.

use super::{Engine, EngineError};
use crate::store::{self, BackfillRow, StoreError};
use crate::throttle::settings::Settings;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde_json::Value;

/// What a settings change did: the settings before and after it, and the
/// row as it left it.
#[derive(Debug, Clone)]
pub struct SettingsChange {
    /// The live settings before the change.
    pub prior: Settings,
    /// The live settings after it (equal to `prior` when it changed
    /// nothing).
    pub next: Settings,
    /// The backfill's row as the change left it.
    pub row: BackfillRow,
}

impl Engine {
    /// Apply `change` (a JSON merge patch of settings: a value sets a
    /// field, `null` clears it) to backfill `id` in its own transaction;
    /// see [`Engine::update_settings_in`].
    pub async fn update_settings(
        &self,
        id: &str,
        change: &Value,
    ) -> Result<SettingsChange, EngineError> {
        let mut conn = self.pool().get().await.map_err(StoreError::from)?;
        conn.transaction::<_, EngineError, _>(async |conn| {
            self.update_settings_in(conn, id, change).await
        })
        .await
    }

    /// Apply `change` inside the caller's transaction (the admin layer adds
    /// its audit row and idempotency record to the same one). Locks the row
    /// first, so the settings the change is applied to are the ones it
    /// replaces and concurrent changes of one ID serialize. The result is
    /// checked as a whole ([`Settings::apply`]) and against this engine's
    /// batch statement timeout ([`Settings::fits_timeout`]); a refused
    /// change is [`EngineError::InvalidSettings`] and a completed backfill
    /// [`EngineError::Completed`], and neither writes anything. An accepted
    /// change queues a wake-up for the ID, delivered only on commit, so
    /// other processes notice it before their next poll.
    #[doc(hidden)]
    pub async fn update_settings_in(
        &self,
        conn: &mut AsyncPgConnection,
        id: &str,
        change: &Value,
    ) -> Result<SettingsChange, EngineError> {
        let row = store::backfill_lock(conn, id)
            .await?
            .ok_or_else(|| EngineError::UnknownBackfill(id.to_string()))?;
        if row.state == crate::State::Completed {
            return Err(EngineError::Completed(Box::new(row)));
        }
        let prior = Settings::from_stored(&row.settings);
        let next = prior.apply(change)?;
        next.fits_timeout(self.config().statement_timeout)?;
        // The row is locked and not completed, so the fenced UPDATE
        // matches; if it did not, report the row as it is.
        let row = store::backfill_settings_update(conn, id, &next.to_json())
            .await?
            .ok_or(EngineError::Completed(Box::new(row)))?;
        store::wake_notify(conn, id).await?;
        Ok(SettingsChange { prior, next, row })
    }
}
