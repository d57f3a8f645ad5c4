//! Pacing between batches (THR-1, THR-3, THR-4): whether a claim's next
//! batch may start, and with what size.
//!
//! [`Engine::gate`] runs before every batch of the runtime. It reads the
//! backfill's live settings again when another process announced a change
//! (the wake-up NOTIFY) or at the latest after [`SETTINGS_REFRESH`], so a
//! change reaches every process at its next batch without a query per
//! batch; it applies the operator's pause between batches; and it holds the
//! batch back while the health monitor's cached signals are past their
//! thresholds, after giving back the claim's open batch transaction, so a
//! throttled claim holds no snapshot, lock or idle transaction while it
//! waits (EX-5).

use super::claim::Claim;
use super::error::EngineError;
use super::Engine;
use crate::pace::{Policy, Sizing};
use crate::repair::DynRepair;
use crate::settings::Settings;
use crate::store::{self, StoreError};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The longest a claim goes without reading its settings again when no
/// change was announced (a lost NOTIFY, a process without a listener).
pub const SETTINGS_REFRESH: Duration = Duration::from_secs(1);

/// What a claim knows of its pacing.
#[derive(Debug, Default)]
pub(crate) struct Pacing {
    /// The live settings as last read, and when.
    settings: Settings,
    read_at: Option<Instant>,
    /// The engine's change count when the settings were read.
    seen_changes: u64,
    /// The size in force the row had when the claim first read it.
    stored_size: Option<u32>,
    sizing: Option<Sizing>,
    /// When the last batch committed (the pause counts from there).
    last_commit: Option<Instant>,
    /// The size and duration of the last committed batch.
    pub(crate) last: (u32, Duration),
    /// The size the last step gave a body it sent ahead.
    pub(super) sent_ahead: u32,
}

/// What [`Engine::gate`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Run the batch now.
    Go,
    /// Wait this long (the pause between batches), then ask again.
    Pause(Duration),
}

impl Pacing {
    /// The size the next batch runs with under the settings as last read
    /// and the definition's limit and target, asked again every batch.
    pub(super) fn size(&mut self, def: &dyn DynRepair) -> u32 {
        let policy = Policy::new(&self.settings, def.batch_limit(), def.batch_target());
        let stored = self.stored_size;
        let sizing = self
            .sizing
            .get_or_insert_with(|| Sizing::new(policy, stored));
        sizing.set_policy(policy);
        sizing.size()
    }

    /// A batch whose body ran with `size` committed in a step that ran
    /// with `limit`; `ran` keys were selected and changed in this step's
    /// statements, which took `took`.
    pub(super) fn committed(&mut self, size: u32, limit: u32, ran: usize, took: Duration) {
        if let Some(sizing) = self.sizing.as_mut() {
            sizing.observe(ran, took);
        }
        self.last = (size, took);
        self.sent_ahead = limit;
        self.last_commit = Some(Instant::now());
    }

    /// Whether the operator asked for a pause between batches: the commit
    /// then opens no next transaction, since it would sit idle through
    /// the pause.
    pub(super) fn pausing(&self) -> bool {
        !self.settings.pause().is_zero()
    }

    /// The size to leave in force after a statement timeout: half the
    /// current one within the target's range (THR-3). `None` for a fixed
    /// size, which is the operator's or the definition's to change.
    pub(super) fn after_timeout(&self) -> Option<i32> {
        let mut sizing = self.sizing.clone()?;
        let before = sizing.size();
        let after = sizing.on_timeout();
        (after != before).then(|| i32::try_from(after).unwrap_or(i32::MAX))
    }
}

impl Engine {
    /// Whether `claim`'s next batch may start now (THR-1), reading its
    /// settings again when they may have changed (THR-4).
    pub async fn gate(&self, claim: &mut Claim) -> Result<Gate, EngineError> {
        self.refresh_pacing(claim).await?;
        let pause = claim.pacing.settings.pause();
        if let Some(at) = claim.pacing.last_commit {
            let since = at.elapsed();
            if since < pause {
                return Ok(Gate::Pause(pause - since));
            }
        }
        Ok(Gate::Go)
    }

    /// Count an announced change of some backfill (the wake-up NOTIFY):
    /// every claim reads its settings again before its next batch.
    pub(crate) fn note_changed(&self) {
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Read the claim's settings and size in force again when a change
    /// was announced since, or when they are older than
    /// [`SETTINGS_REFRESH`].
    async fn refresh_pacing(&self, claim: &mut Claim) -> Result<(), EngineError> {
        let changes = self.changes.load(Ordering::Relaxed);
        let pacing = &mut claim.pacing;
        let fresh = pacing
            .read_at
            .is_some_and(|at| at.elapsed() < SETTINGS_REFRESH);
        if fresh && pacing.seen_changes == changes {
            return Ok(());
        }
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        if let Some(read) = store::backfill_pacing_read(&mut conn, &claim.id).await? {
            pacing.settings = Settings::from_stored(&read.settings);
            if pacing.read_at.is_none() {
                pacing.stored_size = read.batch_size.and_then(|s| u32::try_from(s).ok());
            }
        }
        pacing.read_at = Some(Instant::now());
        pacing.seen_changes = changes;
        Ok(())
    }
}
