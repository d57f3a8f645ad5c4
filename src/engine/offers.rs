//! The presences the lease renewer offers for the claim polls to record
//! between its rounds (PAR-6, FLT-1), one per worker an engine serves;
//! `presence.rs` says how they are used.

use crate::store::Heartbeat;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The presence the lease renewer last offered for one worker.
#[derive(Debug, Clone)]
struct Offer {
    beat: Heartbeat,
    /// The renewer's round interval; a poll records the offer once the
    /// recorded presence is half of it old.
    round: Duration,
    /// When the offered presence was last sent and recorded, by a round
    /// or a poll; `None` while the offer is newer than any record.
    recorded_at: Option<Instant>,
    /// When a claim poll last sent and recorded it.
    polled_at: Option<Instant>,
}

/// The offers of an engine's workers (one per runtime it serves).
#[derive(Debug, Default)]
pub(super) struct Offers(Mutex<HashMap<String, Offer>>);

impl Offers {
    /// The heartbeat a claim poll of `worker` carries now, if one is due.
    pub(super) fn due(&self, worker: &str) -> Option<Heartbeat> {
        let offers = self.0.lock();
        let offer = offers.get(worker)?;
        let due = offer
            .recorded_at
            .is_none_or(|at| at.elapsed() >= offer.round / 2);
        due.then(|| offer.beat.clone())
    }

    /// Offer `beat` for the polls between rounds `round` apart; one that
    /// differs from the last offer counts as not recorded yet.
    pub(super) fn offer(&self, beat: Heartbeat, round: Duration) {
        let mut offers = self.0.lock();
        match offers.get_mut(&beat.worker) {
            Some(offer) if offer.beat == beat => offer.round = round,
            _ => {
                offers.insert(
                    beat.worker.clone(),
                    Offer {
                        beat,
                        round,
                        recorded_at: None,
                        polled_at: None,
                    },
                );
            }
        }
    }

    /// Whether a claim poll recorded `worker`'s offer within `within`.
    pub(super) fn polled_within(&self, worker: &str, within: Duration) -> bool {
        self.0
            .lock()
            .get(worker)
            .and_then(|offer| offer.polled_at)
            .is_some_and(|at| at.elapsed() < within)
    }

    /// Take `worker`'s offer back: no poll records its presence again.
    pub(super) fn withdraw(&self, worker: &str) {
        self.0.lock().remove(worker);
    }

    /// A round recorded `beat`, sent at `sent`.
    pub(super) fn recorded(&self, beat: &Heartbeat, sent: Instant) {
        self.note(beat, sent, false);
    }

    /// `beat`, sent at `sent`, was recorded by a claim poll (`polled`) or
    /// a round.
    fn note(&self, beat: &Heartbeat, sent: Instant, polled: bool) {
        let mut offers = self.0.lock();
        let Some(offer) = offers.get_mut(&beat.worker) else {
            return;
        };
        if offer.beat != *beat {
            return;
        }
        offer.recorded_at = Some(sent);
        if polled {
            offer.polled_at = Some(sent);
        }
    }

    /// A claim poll recorded `beat`, sent at `sent`.
    pub(super) fn polled(&self, beat: &Heartbeat, sent: Instant) {
        self.note(beat, sent, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn beat(free: i32) -> Heartbeat {
        Heartbeat {
            worker: "w".into(),
            ids: vec!["a".into()],
            free_runners: free,
            ttl_ms: 30_000,
        }
    }

    /// A new offer is due at once; once a poll recorded it, it is not due
    /// for half a round and counts as polled; a changed offer is due again
    /// and no longer counts as polled; a withdrawn one is never due.
    #[test]
    fn par06_an_offer_is_due_until_recorded_and_again_when_it_changes() {
        let offers = Offers::default();
        let round = Duration::from_secs(60);
        assert_eq!(offers.due("w"), None, "nothing offered");
        offers.offer(beat(4), round);
        let due = offers.due("w").expect("a new offer is due");
        offers.polled(&due, Instant::now());
        assert_eq!(offers.due("w"), None, "recorded less than half a round ago");
        assert!(offers.polled_within("w", round));
        offers.offer(beat(4), round);
        assert_eq!(offers.due("w"), None, "the same offer stays recorded");
        offers.offer(beat(3), round);
        assert_eq!(offers.due("w"), Some(beat(3)), "a changed offer is due");
        assert!(!offers.polled_within("w", round));
        offers.recorded(&beat(3), Instant::now());
        assert_eq!(offers.due("w"), None);
        assert!(!offers.polled_within("w", round), "a round is not a poll");
        offers.polled(&beat(4), Instant::now());
        assert!(
            !offers.polled_within("w", round),
            "an outdated beat is not the offer"
        );
        offers.withdraw("w");
        assert_eq!(offers.due("w"), None);
        let short = Duration::from_millis(2);
        offers.offer(beat(4), short);
        offers.polled(&beat(4), Instant::now() - short);
        assert_eq!(offers.due("w"), Some(beat(4)), "half a round passed");
    }
}
