//! The process's presence (PAR-6): the heartbeat the lease renewer
//! records every round, and the same heartbeat carried by a claim poll
//! between rounds, so that the poll is an idle database's only query
//! (FLT-1).
//!
//! The renewer offers the presence it would record (its free runners and
//! the backfills it serves); a claim poll that finds the recorded
//! presence older than half a round records the offer in its own
//! statement; and a renewer that holds no claim (so no claim can be
//! beyond its share) skips a round in which a poll recorded it. A round
//! is skipped only for a poll within the last round, and polls stop
//! while every runner is busy, when the rounds record it; so the
//! presence is recorded at least every two rounds, well within the lease
//! TTL it lives for.

use super::config::millis;
use super::error::EngineError;
use super::Engine;
use crate::store::{self, Heartbeat, StoreError};
use std::time::{Duration, Instant};

impl Engine {
    /// The heartbeat of `worker` with `free_runners` free, serving every
    /// registered backfill but the `given_up` ones (REG-4).
    fn heartbeat(&self, worker: &str, free_runners: usize, given_up: &[String]) -> Heartbeat {
        Heartbeat {
            worker: worker.to_string(),
            ids: self
                .registry
                .claimable_ids()
                .into_iter()
                .filter(|id| !given_up.contains(id))
                .collect(),
            free_runners: i32::try_from(free_runners).unwrap_or(i32::MAX),
            ttl_ms: millis(self.config.lease_ttl),
        }
    }

    /// Offer `worker`'s presence (`free_runners` free, serving all but
    /// `given_up`) for its claim polls to record between the lease
    /// renewer's rounds, `round` apart (PAR-6, FLT-1). An offer that
    /// differs from the last one counts as not recorded yet, so the next
    /// round records it.
    #[doc(hidden)]
    pub fn offer_presence(
        &self,
        worker: &str,
        free_runners: usize,
        given_up: &[String],
        round: Duration,
    ) {
        self.offers
            .offer(self.heartbeat(worker, free_runners, given_up), round);
    }

    /// Whether a claim poll recorded `worker`'s offered presence within
    /// `within`: the lease renewer then skips a round in which it holds
    /// no claim.
    #[doc(hidden)]
    pub fn presence_polled_within(&self, worker: &str, within: Duration) -> bool {
        self.offers.polled_within(worker, within)
    }

    /// Record `worker`'s presence (PAR-6): the backfills it serves (those
    /// registered, but the `given_up` ones it cannot interpret, REG-4) and
    /// its `free_runners`, live for one lease TTL; and answer its partition
    /// claims beyond its fair share, `(id, part, generation)`, which it is
    /// to give back at their next batch boundary. Off the batch path: the
    /// lease renewer calls it in its rounds, claims or not.
    #[doc(hidden)]
    pub async fn presence(
        &self,
        worker: &str,
        free_runners: usize,
        given_up: &[String],
    ) -> Result<Vec<store::ExcessClaim>, EngineError> {
        let beat = self.heartbeat(worker, free_runners, given_up);
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        let sent = Instant::now();
        let excess = store::worker_heartbeat(&mut conn, &beat).await?;
        self.offers.recorded(&beat, sent);
        Ok(excess)
    }

    /// Forget `worker`'s presence (PAR-6): it stops serving, so the other
    /// processes' shares grow at once. Its offer goes first, so no claim
    /// poll records the presence again.
    #[doc(hidden)]
    pub async fn leave(&self, worker: &str) -> Result<(), EngineError> {
        self.offers.withdraw(worker);
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        Ok(store::worker_leave(&mut conn, worker).await?)
    }
}
