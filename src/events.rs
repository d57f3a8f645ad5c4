//! Typed events of the backfills this process works on, and of lifecycle
//! changes other processes announce (EMB-3).
//!
//! Events are hints derived from PostgreSQL, like NOTIFY (docs/CONTRACT.md section
//! 0): a subscriber that lags loses the oldest ones, and a missed or
//! repeated event changes nothing committed. [`crate::Engine::wait_for`]
//! uses them only to re-read PostgreSQL sooner.

use crate::lifecycle::State;
use tokio::sync::broadcast;

/// Events a subscriber may fall behind by before it loses the oldest.
const CAPACITY: usize = 1024;

/// Something that happened to a backfill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// This process claimed it (`validation`: to validate it).
    Claimed {
        /// The backfill claimed.
        id: String,
        /// The generation of the new claim.
        generation: i64,
        /// Whether the claim is to validate it (it is `validating`) rather
        /// than to run batches.
        validation: bool,
    },
    /// This process committed a batch of `keys` keys, selected with
    /// `size` as its limit (the size in force, THR-3); `took` is the time
    /// the engine spent on the batch's step, and `at` when this process
    /// saw the commit (so a subscriber that reads late still knows when
    /// batches committed, and how far apart).
    Progress {
        /// The backfill the batch advanced.
        id: String,
        /// Keys the batch selected, added to the progress counters.
        keys: usize,
        /// The batch size in force, the batch's limit (THR-3).
        size: u32,
        /// The time the engine spent on the batch's step.
        took: std::time::Duration,
        /// When this process saw the commit.
        at: std::time::Instant,
    },
    /// It entered `state`, as recorded by this process.
    State {
        /// The backfill whose state changed.
        id: String,
        /// The state it entered.
        state: State,
    },
    /// Another process announced a change (NOTIFY); read the row for what.
    Changed {
        /// The backfill another process changed.
        id: String,
    },
    /// This process's automatic start of it failed and was recorded on
    /// its row, which stays `pending` (EMB-8): `kind` is `retryable`,
    /// `blocked` or `fatal`, `diagnostic` the bounded text recorded,
    /// `retrying` whether the automatic start tries again by itself.
    StartFailed {
        /// The backfill whose automatic start failed.
        id: String,
        /// The failure's class: `retryable`, `blocked` or `fatal`.
        kind: &'static str,
        /// The bounded diagnostic recorded on the row.
        diagnostic: String,
        /// Whether the automatic start tries again by itself.
        retrying: bool,
    },
}

impl Event {
    /// The stable ID the event is about.
    pub fn id(&self) -> &str {
        match self {
            Event::Claimed { id, .. }
            | Event::Progress { id, .. }
            | Event::State { id, .. }
            | Event::Changed { id }
            | Event::StartFailed { id, .. } => id,
        }
    }
}

/// The publishing side, shared by an engine and its clones.
#[derive(Clone)]
pub struct Events(broadcast::Sender<Event>);

impl Default for Events {
    fn default() -> Self {
        Self(broadcast::channel(CAPACITY).0)
    }
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Events")
            .field("subscribers", &self.0.receiver_count())
            .finish()
    }
}

impl Events {
    /// A new subscription: every event from now on, until it lags
    /// 1,024 events behind (then `RecvError::Lagged`, and it goes on
    /// from the oldest it still has).
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.0.subscribe()
    }

    /// Publish what `make` builds, only when someone listens: the batch
    /// path pays nothing for an unwatched engine.
    pub(crate) fn publish(&self, make: impl FnOnce() -> Event) {
        if self.0.receiver_count() > 0 {
            let _ = self.0.send(make());
        }
    }
}
