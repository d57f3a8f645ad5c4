//! The pace controller of a latency budget (THR-6): additive increase,
//! multiplicative decrease (AIMD) of one number, the claim's level.
//!
//! AIMD is chosen over a gradient limiter or a Vegas-style estimate
//! because the signal is a tail percentile read over a short window: it is
//! noisy, it lags the pace that caused it by one window, and the budget's
//! first duty is to get out of the application's way quickly when it
//! passes the target. Halving reacts within one reading to a load step;
//! small additive steps climb back without overshooting by more than one
//! step; and several claims sharing one signal converge to a fair share,
//! which is AIMD's classic property. A gradient limiter needs a stable
//! no-load latency to divide by, which a ratio budget measures only now
//! and then.
//!
//! The level maps to a pace ([`Controller::size`], [`Controller::pause`]):
//! at level 1 the backfill runs as it would without a budget; below it the
//! batch shrinks (shorter row locks and bursts) and a pause follows each
//! batch so that the share of time spent in batches is about the level.

use std::time::Duration;

/// The lowest level: one share in 32. Below it a backfill would run so
/// rarely that finishing it is no longer a plan; a target it cannot hold
/// here is reported as unmeetable, and the backfill keeps this pace.
pub const FLOOR: f64 = 1.0 / 32.0;
/// What a reading over the target multiplies the level by.
pub const DECREASE: f64 = 0.5;
/// What a reading with room adds to the level.
pub const INCREASE: f64 = 0.05;
/// A reading at or under this share of the target has room to climb;
/// between it and the target the level holds, so a pace that just meets
/// the target is not pushed over it at every reading.
pub const HEADROOM: f64 = 0.9;
/// The longest pause a budget puts after one batch, so a claim at its
/// floor still asks for its signal and settings every second.
pub const MAX_PAUSE: Duration = Duration::from_secs(1);

/// What one reading did to the level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Under the target with room: the level rose (or stayed at 1).
    Raised,
    /// Near the target, or no reading under a policy that goes on: the
    /// level held.
    Held,
    /// Over the target (or no reading under a policy that throttles):
    /// the level was cut.
    Cut,
    /// Over the target at the floor already: the target cannot be met by
    /// pacing this backfill; it runs at the floor.
    Unmeetable,
}

/// One claim's controller.
#[derive(Debug, Clone, PartialEq)]
pub struct Controller {
    level: f64,
    last: Option<Step>,
}

impl Default for Controller {
    fn default() -> Self {
        Controller {
            level: 1.0,
            last: None,
        }
    }
}

impl Controller {
    /// The level in force, within [`FLOOR`]..=1.
    pub fn level(&self) -> f64 {
        self.level
    }

    /// What the last reading did, if any came.
    #[cfg(test)]
    pub fn last(&self) -> Option<Step> {
        self.last
    }

    /// Whether the budget holds the backfill below its full pace.
    pub fn cutting(&self) -> bool {
        self.level < 1.0
    }

    /// Judge one reading against `target`. `None` is a reading that could
    /// not be taken: with `throttle_unknown` it counts as over the target,
    /// otherwise the level holds (never raised without evidence).
    pub fn observe(
        &mut self,
        reading: Option<Duration>,
        target: Duration,
        throttle_unknown: bool,
    ) -> Step {
        let over = match reading {
            Some(reading) => reading > target,
            None if throttle_unknown => true,
            None => {
                self.last = Some(Step::Held);
                return Step::Held;
            }
        };
        let step = if over {
            if self.level <= FLOOR {
                Step::Unmeetable
            } else {
                self.level = (self.level * DECREASE).max(FLOOR);
                Step::Cut
            }
        } else if reading.is_some_and(|r| r.as_secs_f64() <= target.as_secs_f64() * HEADROOM) {
            self.level = (self.level + INCREASE).min(1.0);
            Step::Raised
        } else {
            Step::Held
        };
        self.last = Some(step);
        step
    }

    /// The size of the next batch given the size it would have without a
    /// budget: the full size down to level 1/2, then in proportion, at
    /// least one key.
    pub fn size(&self, full: u32) -> u32 {
        let share = (2.0 * self.level).min(1.0);
        ((f64::from(full) * share).ceil() as u32).clamp(1.min(full), full)
    }

    /// The pause after a batch that took `took`: enough that batches fill
    /// about `level` of the time, at most [`MAX_PAUSE`].
    pub fn pause(&self, took: Duration) -> Duration {
        if self.level >= 1.0 {
            return Duration::ZERO;
        }
        took.mul_f64((1.0 - self.level) / self.level).min(MAX_PAUSE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic application beside the backfill: its p99 is the
    /// base latency plus a cost proportional to the backfill's share of
    /// time (its level), plus a load term that a load step raises.
    struct Model {
        base_ms: f64,
        per_level_ms: f64,
    }

    impl Model {
        fn p99(&self, level: f64) -> Duration {
            Duration::from_secs_f64((self.base_ms + self.per_level_ms * level) / 1000.0)
        }
    }

    const TARGET: Duration = Duration::from_micros(1_800);

    fn run(controller: &mut Controller, model: &Model, readings: usize) -> Vec<f64> {
        (0..readings)
            .map(|_| {
                let reading = model.p99(controller.level());
                controller.observe(Some(reading), TARGET, false);
                controller.level()
            })
            .collect()
    }

    /// THR-6: against an application whose p99 grows with the pace, the
    /// level settles where the reading is within the target, and stays
    /// there (no reading over the target once settled, apart from the
    /// single step of a sawtooth).
    #[test]
    fn thr06_the_controller_converges_under_the_target() {
        let model = Model {
            base_ms: 1.2,
            per_level_ms: 2.8,
        };
        let mut c = Controller::default();
        let levels = run(&mut c, &model, 200);
        let settled = &levels[50..];
        let over = settled.iter().filter(|l| model.p99(**l) > TARGET).count();
        assert!(
            over * 10 <= settled.len(),
            "{over} of {} over",
            settled.len()
        );
        let mean = settled.iter().sum::<f64>() / settled.len() as f64;
        // The level that meets the target exactly is 0.6/2.8 = 0.214.
        assert!((0.1..0.25).contains(&mean), "mean level {mean}");
    }

    /// THR-6: a load step (the application's own cost rises) is answered
    /// by cuts at once, and the level climbs back when the load is gone.
    #[test]
    fn thr06_the_controller_backs_off_on_a_step_and_climbs_back() {
        let quiet = Model {
            base_ms: 1.0,
            per_level_ms: 0.5,
        };
        let mut c = Controller::default();
        run(&mut c, &quiet, 20);
        assert_eq!(c.level(), 1.0, "room everywhere: full pace");
        let loaded = Model {
            base_ms: 1.5,
            per_level_ms: 2.0,
        };
        assert_eq!(
            c.observe(Some(loaded.p99(c.level())), TARGET, false),
            Step::Cut
        );
        run(&mut c, &loaded, 3);
        assert!(c.level() <= 0.25, "three readings cut to {}", c.level());
        let levels = run(&mut c, &quiet, 30);
        assert_eq!(levels.last().copied(), Some(1.0), "{levels:?}");
    }

    /// THR-8: a target the application misses with no backfill at all
    /// holds the level at the floor, says so, and never stops the
    /// backfill: size and pause stay finite and non-zero.
    #[test]
    fn thr08_an_unmeetable_target_holds_the_floor() {
        let slow = Model {
            base_ms: 5.0,
            per_level_ms: 1.0,
        };
        let mut c = Controller::default();
        let levels = run(&mut c, &slow, 40);
        assert!(levels[10..].iter().all(|l| *l == FLOOR), "{levels:?}");
        assert_eq!(c.last(), Some(Step::Unmeetable));
        assert!(c.size(1000) >= 1);
        let pause = c.pause(Duration::from_millis(10));
        assert!(pause > Duration::ZERO && pause <= MAX_PAUSE, "{pause:?}");
    }

    /// THR-7: a missing reading holds the level under the proceed policy
    /// (never raised without evidence) and cuts under the throttle policy.
    #[test]
    fn thr07_a_missing_reading_follows_the_unknown_policy() {
        let mut c = Controller::default();
        c.observe(Some(Duration::from_millis(9)), TARGET, false);
        let level = c.level();
        assert_eq!(c.observe(None, TARGET, false), Step::Held);
        assert_eq!(c.level(), level);
        assert_eq!(c.observe(None, TARGET, true), Step::Cut);
        assert!(c.level() < level);
    }

    /// THR-6: the pace of a level: full size and no pause at 1; smaller
    /// batches and a pause that leaves batches about `level` of the time
    /// below it.
    #[test]
    fn thr06_a_level_maps_to_size_and_pause() {
        let mut c = Controller::default();
        assert_eq!(
            (c.size(1000), c.pause(Duration::from_millis(20))),
            (1000, Duration::ZERO)
        );
        c.level = 0.25;
        assert_eq!(c.size(1000), 500);
        assert_eq!(
            c.pause(Duration::from_millis(20)),
            Duration::from_millis(60)
        );
        c.level = FLOOR;
        assert_eq!(c.size(1000), 63);
        assert_eq!(c.size(0), 0, "a limit of 0 stays the engine's to refuse");
    }
}
