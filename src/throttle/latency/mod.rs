//! Latency budgets (THR-6..8): the application beside a backfill keeps its
//! latency.
//!
//! A budget is a live setting of a backfill (and a process default): a
//! percentile of the application's latency and its target, either a ratio
//! of a baseline measured while the backfill holds back
//! (`latency_ratio_pct`) or an absolute bound (`latency_max_us`). The
//! runtime paces each budgeted claim to hold it: a [`Controller`] per
//! claim moves a level that shrinks the batch and puts a pause after it
//! when a reading passes the target, and raises it while there is room.
//!
//! - [`recorder`]: recent latency samples and the [`LatencyHandle`] a host
//!   records its own request durations on.
//! - [`controller`]: the AIMD controller and the pace a level gives.
//! - [`monitor`]: one per database: the probe that samples on a
//!   connection of its own, and the baseline it measures while budgeted
//!   claims hold back for a moment.
//!
//! The room decides; the engine's gate (`engine/gate.rs`) consults it
//! before each batch and records the condition `latency` on the claim's
//! row while the budget holds the backfill below its full pace.

pub(crate) mod controller;
pub(crate) mod monitor;
mod recorder;

pub(crate) use controller::Controller;
pub(crate) use monitor::LatencyMonitor;
pub use recorder::LatencyHandle;

use crate::throttle::settings::{Field, Settings};
use std::time::Duration;

/// Where the samples a budget is judged by come from.
#[derive(Debug, Clone, Default)]
pub enum LatencySource {
    /// The runtime's own probe: on a connection of its own, every
    /// [`LatencyConfig::probe_interval`], a primary-key read of the
    /// budgeted backfill's first table (a key chosen at random within the
    /// key range), or [`LatencyConfig::probe_sql`] when set.
    #[default]
    Probe,
    /// The host's own request latencies, recorded on this handle (by the
    /// host's code or the `backfill::http::RecordLatency` middleware).
    Host(LatencyHandle),
}

impl LatencySource {
    /// The source's name in the throttle condition.
    pub fn as_str(&self) -> &'static str {
        match self {
            LatencySource::Probe => "probe",
            LatencySource::Host(_) => "host",
        }
    }
}

/// What a budget targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The percentile at most this many percent of its baseline (150:
    /// 1.5 times what it is while the backfill holds back).
    Ratio(u32),
    /// The percentile at most this long.
    Absolute(Duration),
}

/// A latency budget: a percentile and its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The percentile judged, 50 to 99.
    pub percentile: u8,
    /// Its target.
    pub target: Target,
}

/// The percentile of a budget that names none.
pub const DEFAULT_PERCENTILE: u8 = 99;

impl Budget {
    /// The budget of a backfill: its live settings' target
    /// (`latency_ratio_pct` or `latency_max_us`) and percentile
    /// (`latency_percentile`), else the process default. `None`: no budget.
    pub fn of(settings: &Settings, default: Option<Budget>) -> Option<Budget> {
        let target = match (
            settings.get(Field::LatencyRatioPct),
            settings.get(Field::LatencyMaxUs),
        ) {
            (Some(pct), _) => Some(Target::Ratio(u32::try_from(pct).unwrap_or(u32::MAX))),
            (None, Some(us)) => Some(Target::Absolute(Duration::from_micros(us))),
            (None, None) => None,
        };
        let percentile = settings
            .get(Field::LatencyPercentile)
            .and_then(|p| u8::try_from(p).ok());
        match (target, default) {
            (Some(target), d) => Some(Budget {
                percentile: percentile
                    .or(d.map(|d| d.percentile))
                    .unwrap_or(DEFAULT_PERCENTILE),
                target,
            }),
            (None, Some(d)) => Some(Budget {
                percentile: percentile.unwrap_or(d.percentile),
                ..d
            }),
            (None, None) => None,
        }
    }

    /// The bound a reading is judged against, given the baseline of this
    /// budget's percentile; `None` for a ratio without a baseline yet.
    pub fn bound(&self, baseline: Option<Duration>) -> Option<Duration> {
        match self.target {
            Target::Absolute(bound) => Some(bound),
            Target::Ratio(pct) => baseline.map(|b| b.mul_f64(f64::from(pct) / 100.0)),
        }
    }
}

/// The process's latency configuration.
#[derive(Debug, Clone)]
pub struct LatencyConfig {
    /// Where samples come from (default: the probe).
    pub source: LatencySource,
    /// SQL the probe runs in place of the primary-key read (one statement
    /// or several, no parameters). Bounded by [`LatencyConfig::probe_timeout`].
    pub probe_sql: Option<String>,
    /// How often the probe reads (default 10 ms).
    pub probe_interval: Duration,
    /// How long one probe may take; a probe cut off there counts as a
    /// sample of that length, since the application would wait as long
    /// (default 1 s).
    pub probe_timeout: Duration,
    /// How often a claim reads its percentile and adjusts its pace: the
    /// window a reading covers (default 500 ms).
    pub window: Duration,
    /// The fewest samples a reading needs; fewer is an unknown reading,
    /// handled by the health policy for unknown signals (default 20).
    pub min_samples: usize,
    /// How long budgeted claims hold back while the baseline is measured
    /// (default 1 s).
    pub baseline_hold: Duration,
    /// How old a baseline may grow before it is measured again (default
    /// 2 min).
    pub baseline_every: Duration,
    /// The budget of every backfill whose settings set none (default none).
    pub default_budget: Option<Budget>,
}

impl Default for LatencyConfig {
    fn default() -> Self {
        LatencyConfig {
            source: LatencySource::Probe,
            probe_sql: None,
            probe_interval: Duration::from_millis(10),
            probe_timeout: Duration::from_secs(1),
            window: Duration::from_millis(500),
            min_samples: 20,
            baseline_hold: Duration::from_secs(1),
            baseline_every: Duration::from_secs(120),
            default_budget: None,
        }
    }
}

/// Why a latency configuration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LatencyError {
    /// A duration outside its range.
    #[error("latency {what} must be between {min:?} and {max:?}, got {got:?}")]
    Duration {
        /// Which one.
        what: &'static str,
        /// The least allowed.
        min: Duration,
        /// The most allowed.
        max: Duration,
        /// The one given.
        got: Duration,
    },
    /// A default budget outside the ranges its settings have.
    #[error("latency default budget: {0}")]
    Budget(String),
}

impl LatencyConfig {
    /// Check every duration and the default budget against the ranges
    /// its settings have.
    pub fn validate(&self) -> Result<(), LatencyError> {
        let ms = Duration::from_millis;
        for (what, got, min, max) in [
            ("probe_interval", self.probe_interval, ms(1), ms(60_000)),
            ("probe_timeout", self.probe_timeout, ms(10), ms(60_000)),
            ("window", self.window, ms(50), ms(60_000)),
            ("baseline_hold", self.baseline_hold, ms(100), ms(60_000)),
            (
                "baseline_every",
                self.baseline_every,
                ms(1_000),
                ms(86_400_000),
            ),
        ] {
            if !(min..=max).contains(&got) {
                return Err(LatencyError::Duration {
                    what,
                    min,
                    max,
                    got,
                });
            }
        }
        if let Some(b) = self.default_budget {
            let mut change = serde_json::Map::new();
            change.insert(Field::LatencyPercentile.name().into(), b.percentile.into());
            match b.target {
                Target::Ratio(pct) => {
                    change.insert(Field::LatencyRatioPct.name().into(), pct.into())
                }
                Target::Absolute(d) => change.insert(
                    Field::LatencyMaxUs.name().into(),
                    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).into(),
                ),
            };
            Settings::default()
                .apply(&serde_json::Value::Object(change))
                .map_err(|e| LatencyError::Budget(e.to_string()))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// THR-6: a backfill's settings name its budget; a target without a
    /// percentile judges p99; the process default applies where the
    /// settings set no target, with their percentile if they set one.
    #[test]
    fn thr06_a_budget_comes_from_the_settings_else_the_default() {
        let s = |v: serde_json::Value| Settings::default().apply(&v).unwrap();
        assert_eq!(Budget::of(&Settings::default(), None), None);
        let ratio = Budget::of(&s(serde_json::json!({"latency_ratio_pct": 150})), None);
        assert_eq!(
            ratio,
            Some(Budget {
                percentile: 99,
                target: Target::Ratio(150)
            })
        );
        let default = Budget {
            percentile: 95,
            target: Target::Absolute(Duration::from_millis(5)),
        };
        let p90 = s(serde_json::json!({"latency_percentile": 90}));
        assert_eq!(
            Budget::of(&p90, Some(default)),
            Some(Budget {
                percentile: 90,
                ..default
            })
        );
        let r = ratio.unwrap();
        assert_eq!(r.bound(None), None);
        assert_eq!(
            r.bound(Some(Duration::from_millis(2))),
            Some(Duration::from_millis(3))
        );
        assert!(LatencyConfig::default().validate().is_ok());
        let bad = LatencyConfig {
            default_budget: Some(Budget {
                percentile: 100,
                target: Target::Ratio(150),
            }),
            ..LatencyConfig::default()
        };
        assert!(matches!(bad.validate(), Err(LatencyError::Budget(_))));
    }
}
