//! The latency samples a budget is judged by (THR-7): a bounded ring of
//! recent durations with the time each was recorded.
//!
//! The probe and the host's own requests record here; the gate reads a
//! percentile over the samples since its last reading. The ring keeps the
//! newest [`CAPACITY`] samples, so a host answering many requests costs a
//! fixed amount of memory and each reading sorts at most that many.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The most samples kept.
pub const CAPACITY: usize = 8192;

/// Recent latency samples, shared between whoever records and the gate.
#[derive(Debug, Default)]
pub struct Recorder {
    samples: parking_lot::Mutex<VecDeque<(Instant, Duration)>>,
}

impl Recorder {
    /// Record one duration, taken now.
    pub fn record(&self, took: Duration) {
        self.record_at(Instant::now(), took);
    }

    /// Record one duration, as taken at `at`.
    pub fn record_at(&self, at: Instant, took: Duration) {
        let mut samples = self.samples.lock();
        if samples.len() == CAPACITY {
            samples.pop_front();
        }
        samples.push_back((at, took));
    }

    /// The samples recorded in `(from, to]`, sorted.
    pub fn between(&self, from: Instant, to: Instant) -> Vec<Duration> {
        let mut got: Vec<Duration> = self
            .samples
            .lock()
            .iter()
            .filter(|(at, _)| *at > from && *at <= to)
            .map(|(_, took)| *took)
            .collect();
        got.sort_unstable();
        got
    }
}

/// The `percentile` (50 to 99) of `sorted`, by the nearest-rank method;
/// `None` for no samples.
pub fn percentile(sorted: &[Duration], percentile: u8) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (f64::from(percentile) / 100.0 * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// A handle an embedding service records its own request latencies on
/// (THR-7), so that its own percentile paces the backfills it runs.
/// Cheap to clone; recording takes a short lock and never blocks on I/O.
/// Pass it as [`super::LatencySource::Host`] in the host's latency
/// configuration; `backfill::http::RecordLatency` is a ready actix-web
/// middleware that records every request's duration on it.
#[derive(Debug, Clone, Default)]
pub struct LatencyHandle(pub(crate) Arc<Recorder>);

impl LatencyHandle {
    /// A handle with no samples yet.
    pub fn new() -> LatencyHandle {
        LatencyHandle::default()
    }

    /// Record that one request took `took`.
    pub fn record(&self, took: Duration) {
        self.0.record(took);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// THR-7: the nearest-rank percentile, and only the samples of the
    /// window asked for.
    #[test]
    fn thr07_a_percentile_is_read_over_the_window_asked_for() {
        let ms = Duration::from_millis;
        let sorted: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(percentile(&sorted, 99), Some(ms(99)));
        assert_eq!(percentile(&sorted, 50), Some(ms(50)));
        assert_eq!(percentile(&[], 99), None);
        assert_eq!(percentile(&[ms(3)], 99), Some(ms(3)));
        let r = Recorder::default();
        let t0 = Instant::now();
        r.record_at(t0, ms(9));
        r.record_at(t0 + ms(10), ms(2));
        r.record_at(t0 + ms(20), ms(1));
        assert_eq!(r.between(t0, t0 + ms(20)), vec![ms(1), ms(2)]);
        for _ in 0..CAPACITY {
            r.record_at(t0 + ms(30), ms(5));
        }
        assert_eq!(
            r.between(t0, t0 + ms(20)),
            Vec::<Duration>::new(),
            "the oldest fell out"
        );
    }
}
