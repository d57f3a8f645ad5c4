//! Batch sizing (THR-3): the size each batch of a claim runs with.
//!
//! A backfill runs either with a fixed size (the operator's `batch_size`,
//! else the definition's batch limit) or toward a target batch duration
//! within [min, max] (the operator's `target_batch_ms`, else the
//! definition's [`BatchTarget`]). Adaptive sizing measures
//! the cost per key of each committed batch, smooths it, and moves the size
//! toward the one that would take the target: growing by at most
//! [`GROW`] per batch, because a size that overshoots holds its locks and
//! WAL for longer than asked, and shrinking at once, because a batch that
//! runs long is the thing to stop. After a statement timeout the size is
//! halved before the retry, so a repair that meets a slow region recovers
//! instead of failing.
//!
//! The size in force is the limit the engine checks a selection against
//! (EX-4): whatever the sizing says, a repair never gets to return more.

use crate::throttle::settings::Settings;
use std::time::Duration;

/// The most a size grows from one batch to the next.
#[doc(hidden)]
pub const GROW: f64 = 1.5;

/// Weight of the newest measurement in the smoothed cost per key.
const SMOOTHING: f64 = 0.5;

/// A definition's target batch duration and the size range to search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchTarget {
    /// The batch duration the size is adjusted toward (THR-3).
    pub duration: Duration,
    /// The smallest batch size the runner may use.
    pub min: u32,
    /// The largest batch size the runner may use.
    pub max: u32,
}

/// How a claim sizes its batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[doc(hidden)]
pub enum Policy {
    Fixed(u32),
    Adaptive(BatchTarget),
}

impl Policy {
    /// The policy `settings` and the definition give: the operator's
    /// fixed size, else the operator's target, else the definition's
    /// target, else the definition's limit. The operator's min and max
    /// narrow whichever target applies.
    pub fn new(settings: &Settings, limit: u32, target: Option<BatchTarget>) -> Policy {
        if let Some(size) = settings.batch_size() {
            return Policy::Fixed(size.max(1));
        }
        let target = match (settings.target_batch(), target) {
            (Some(duration), t) => Some(BatchTarget {
                duration,
                min: t.map_or(1, |t| t.min),
                max: t.map_or(limit, |t| t.max),
            }),
            (None, t) => t,
        };
        match target {
            // A definition's limit of 0 stays 0: the engine refuses it
            // with its own error (EX-4) rather than running batches of 1.
            None => Policy::Fixed(limit),
            Some(t) => {
                let min = settings.min_batch_size().unwrap_or(t.min).max(1);
                let max = settings.max_batch_size().unwrap_or(t.max).max(min);
                Policy::Adaptive(BatchTarget {
                    duration: t.duration,
                    min,
                    max,
                })
            }
        }
    }

    fn clamp(&self, size: u32) -> u32 {
        match *self {
            Policy::Fixed(size) => size,
            Policy::Adaptive(t) => size.clamp(t.min, t.max),
        }
    }
}

/// One claim's sizing state.
#[derive(Debug, Clone, PartialEq)]
#[doc(hidden)]
pub struct Sizing {
    policy: Policy,
    size: u32,
    /// Smoothed milliseconds per key; `None` until a batch with keys.
    cost: Option<f64>,
}

impl Sizing {
    /// Sizing under `policy`, starting at `last` (the size the backfill's
    /// previous batch or timeout left in force) when adaptive, so a new
    /// claim resumes where the last one ended.
    pub fn new(policy: Policy, last: Option<u32>) -> Sizing {
        let size = match policy {
            Policy::Fixed(size) => size,
            Policy::Adaptive(t) => policy.clamp(last.unwrap_or(t.min)),
        };
        Sizing {
            policy,
            size,
            cost: None,
        }
    }

    /// The size the next batch runs with.
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The policy in force.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Switch to `policy` (the settings changed), keeping what was learnt.
    pub fn set_policy(&mut self, policy: Policy) {
        if policy == self.policy {
            return;
        }
        self.policy = policy;
        self.size = match policy {
            Policy::Fixed(size) => size,
            Policy::Adaptive(_) => policy.clamp(self.size),
        };
        self.resize();
    }

    /// A batch of `keys` keys committed after `took`.
    pub fn observe(&mut self, keys: usize, took: Duration) {
        if keys == 0 {
            return;
        }
        let per_key = took.as_secs_f64() * 1000.0 / keys as f64;
        self.cost = Some(match self.cost {
            None => per_key,
            Some(c) => c + SMOOTHING * (per_key - c),
        });
        self.resize();
    }

    fn resize(&mut self) {
        let (Policy::Adaptive(t), Some(cost)) = (self.policy, self.cost) else {
            return;
        };
        let ideal = t.duration.as_secs_f64() * 1000.0 / cost.max(1e-6);
        let grown = (f64::from(self.size) * GROW).floor();
        let next = ideal.min(grown).clamp(1.0, f64::from(u32::MAX));
        self.size = self.policy.clamp(next as u32);
    }

    /// A batch hit the statement timeout: halve the size (within the
    /// policy's range; a fixed size stays what the operator set) and
    /// return it.
    pub fn on_timeout(&mut self) -> u32 {
        if let Policy::Adaptive(_) = self.policy {
            self.size = self.policy.clamp(self.size / 2);
            // What was learnt described the region before the slow one.
            self.cost = None;
        }
        self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target(ms: u64, min: u32, max: u32) -> BatchTarget {
        BatchTarget {
            duration: Duration::from_millis(ms),
            min,
            max,
        }
    }

    #[test]
    fn thr03_policy_prefers_operator_then_definition() {
        let none = Settings::default();
        assert_eq!(Policy::new(&none, 500, None), Policy::Fixed(500));
        let t = target(50, 10, 1000);
        assert_eq!(Policy::new(&none, 500, Some(t)), Policy::Adaptive(t));
        let fixed = none.apply(&json!({"batch_size": 20})).unwrap();
        assert_eq!(Policy::new(&fixed, 500, Some(t)), Policy::Fixed(20));
        let op = none
            .apply(&json!({"target_batch_ms": 80, "max_batch_size": 300}))
            .unwrap();
        assert_eq!(
            Policy::new(&op, 500, None),
            Policy::Adaptive(target(80, 1, 300))
        );
        assert_eq!(
            Policy::new(&op, 500, Some(t)),
            Policy::Adaptive(target(80, 10, 300))
        );
    }

    #[test]
    fn thr03_adaptive_size_grows_gently_and_shrinks_at_once() {
        let mut s = Sizing::new(Policy::Adaptive(target(50, 10, 100_000)), None);
        assert_eq!(s.size(), 10);
        // 0.1 ms per key: the target is 500 keys, reached by steps of 1.5x.
        let mut sizes = vec![];
        for _ in 0..12 {
            let keys = s.size() as usize;
            s.observe(keys, Duration::from_micros(100 * keys as u64));
            sizes.push(s.size());
        }
        assert_eq!(&sizes[..3], &[15, 22, 33]);
        assert_eq!(*sizes.last().unwrap(), 500);
        assert!(sizes.windows(2).all(|w| w[1] <= w[0] * 3 / 2 + 1));
        // Ten times slower: the size drops toward 50 within a few batches,
        // never growing meanwhile.
        let before = s.size();
        for _ in 0..6 {
            let keys = s.size() as usize;
            s.observe(keys, Duration::from_millis(keys as u64));
            assert!(s.size() <= before);
        }
        assert!((45..=60).contains(&s.size()), "{}", s.size());
    }

    #[test]
    fn thr03_timeout_halves_within_range_and_fixed_stays() {
        let mut s = Sizing::new(Policy::Adaptive(target(50, 10, 1000)), Some(400));
        assert_eq!(s.size(), 400);
        assert_eq!(s.on_timeout(), 200);
        assert_eq!(s.on_timeout(), 100);
        for _ in 0..5 {
            s.on_timeout();
        }
        assert_eq!(s.size(), 10);
        let mut f = Sizing::new(Policy::Fixed(300), Some(7));
        assert_eq!(f.size(), 300);
        assert_eq!(f.on_timeout(), 300);
        f.observe(300, Duration::from_secs(10));
        assert_eq!(f.size(), 300);
    }

    #[test]
    fn thr03_policy_change_keeps_size_in_the_new_range() {
        let mut s = Sizing::new(Policy::Adaptive(target(50, 10, 1000)), Some(900));
        s.set_policy(Policy::Adaptive(target(50, 10, 100)));
        assert_eq!(s.size(), 100);
        s.set_policy(Policy::Fixed(7));
        assert_eq!(s.size(), 7);
    }
}
