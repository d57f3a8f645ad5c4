//! The keys that hold a blocked repair back (RT-4): asked of the
//! definition once a batch or the lifecycle validation blocked, and
//! recorded with the block for the operator, keys only.

use super::config::millis;
use super::error::{body_error, TxError};
use super::Engine;
use crate::store::{self, StoreError};
use diesel_async::AsyncConnection;
use serde_json::Value;

/// At most this many blocking keys are asked for and kept.
pub const MAX_BLOCKING_KEYS: u32 = 10;

impl Engine {
    /// Ask the definition of `id` for up to [`MAX_BLOCKING_KEYS`] keys in
    /// `(after, bound]` that block it, and record them with the block at
    /// `generation`, in one transaction under the batch timeouts. The
    /// block itself is already durable: a failure here is logged and
    /// leaves the diagnostic alone. Returns the keys recorded, if any.
    pub(crate) async fn record_blocking_keys(
        &self,
        id: &str,
        generation: i64,
        after: Option<&[u8]>,
        bound: Option<&[u8]>,
    ) -> Option<Vec<Value>> {
        let (Some(def), Some(bound)) = (self.registry.get(id).cloned(), bound) else {
            return None;
        };
        let (stmt_ms, lock_ms) = (
            millis(self.config.statement_timeout),
            millis(self.config.lock_timeout),
        );
        let result = async {
            let mut conn = self.pool.get().await.map_err(StoreError::from)?;
            conn.transaction::<_, TxError, _>(async |conn| {
                store::batch_set_timeouts(conn, stmt_ms, lock_ms).await?;
                let keys = def
                    .blocking_keys(conn, after, bound, MAX_BLOCKING_KEYS)
                    .await
                    .map_err(|e| body_error(id, e))?;
                let json = (!keys.is_empty()).then(|| Value::Array(keys.clone()));
                if store::backfill_blocking_keys_record(conn, id, generation, json.as_ref()).await?
                {
                    Ok(keys)
                } else {
                    Err(TxError::Stale)
                }
            })
            .await
        }
        .await;
        match result {
            Ok(keys) => Some(keys),
            Err(TxError::Stale) => None,
            Err(error) => {
                tracing::warn!(
                    event = "blocking_keys_failed",
                    backfill = %id,
                    error = %error,
                    "the keys that block the repair were not recorded; its diagnostic stands"
                );
                None
            }
        }
    }
}
