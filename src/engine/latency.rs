//! The latency budget's word on a claim's next batch (THR-6..8): hold for
//! the baseline, pace below the full speed, or nothing.
//!
//! The gate (`gate.rs`) asks [`Engine::latency_for`] after the run window
//! and the health signals. What it keeps per claim ([`LatencyPace`]) the
//! claim's pacing carries: the controller, the budget last in force and
//! the last reading, so the size and the pause of the next batch follow
//! the level, and the condition recorded on the row says why.

use super::Engine;
use crate::repair::DynRepair;
use crate::throttle::health::{Signal, Throttle, UnknownPolicy};
use crate::throttle::latency::controller::{Step, FLOOR};
use crate::throttle::latency::monitor::Phase;
use crate::throttle::latency::{Budget, Controller, Target};
use crate::throttle::settings::Settings;
use std::time::{Duration, Instant};

/// What a claim keeps of its latency budget.
#[derive(Debug, Default)]
pub(crate) struct LatencyPace {
    pub(super) controller: Controller,
    budget: Option<Budget>,
    read_at: Option<Instant>,
    /// The reading and the bound it was judged against.
    reading: Option<(Result<Duration, String>, Option<Duration>)>,
    /// The reading of the last cut.
    cut_at: Option<Duration>,
    /// The baseline of the budget's percentile at the last reading.
    baseline: Option<Duration>,
}

impl LatencyPace {
    /// The size of the next batch given the one it would have without a
    /// budget.
    pub(super) fn size(&self, full: u32) -> u32 {
        self.controller.size(full)
    }

    /// Whether the budget holds the claim below its full pace, so a pause
    /// follows each batch.
    pub(super) fn cutting(&self) -> bool {
        self.controller.cutting()
    }

    /// The baseline at the last reading, in seconds, for the row's record.
    pub(super) fn baseline_secs(&self) -> Option<f64> {
        self.baseline.map(|b| b.as_secs_f64())
    }
}

/// What the budget says of the next batch.
pub(super) enum LatencyGate {
    /// No budget, or nothing to say: the claim runs at its full pace.
    Free,
    /// Start no batch before the baseline is measured; ask again after
    /// the duration.
    Hold(Throttle, Duration),
    /// Run, at the pace the controller gives; the condition says why.
    Paced(Throttle),
}

impl Engine {
    /// The budget's word on a claim's next batch: its `settings`' budget
    /// (or the process default) judged on the database's latency samples,
    /// kept in the claim's `pace`.
    pub(super) fn latency_for(
        &self,
        pace: &mut LatencyPace,
        settings: &Settings,
        def: &dyn DynRepair,
    ) -> LatencyGate {
        let Some(monitor) = self.latency.get() else {
            return LatencyGate::Free;
        };
        let config = monitor.config();
        let budget = Budget::of(settings, config.default_budget);
        if budget != pace.budget {
            // A new or cleared budget starts from the full pace.
            *pace = LatencyPace {
                budget,
                ..LatencyPace::default()
            };
        }
        let Some(budget) = budget else {
            return LatencyGate::Free;
        };
        let now = Instant::now();
        let tables = def.tables();
        let ratio = matches!(budget.target, Target::Ratio(_));
        if let Phase::Holding(until) = monitor.ask(tables.first().map(String::as_str), ratio, now) {
            let left = until.saturating_duration_since(now);
            let text = format!(
                "latency budget: measuring the p{} baseline ({}), holding back {:.1} s",
                budget.percentile,
                config.source.as_str(),
                left.as_secs_f64()
            );
            let throttle = Throttle {
                signal: Signal::Latency,
                value: None,
                threshold: None,
                text,
            };
            return LatencyGate::Hold(
                throttle,
                left.clamp(Duration::from_millis(10), Duration::from_millis(250)),
            );
        }
        let due = pace
            .read_at
            .is_none_or(|at| now.duration_since(at) >= config.window);
        if due {
            let from = pace.read_at.unwrap_or(now - config.window);
            let baseline = monitor.baseline(budget.percentile);
            let bound = budget.bound(baseline);
            let reading = match bound {
                Some(_) => monitor.reading(budget.percentile, from, now),
                None => Err("no baseline measured yet: too few samples while held back".into()),
            };
            // Batches ran before the first reading only if the window is
            // full; the first ask only starts the window.
            if pace.read_at.is_some() {
                let throttle_unknown = self
                    .health
                    .get()
                    .is_some_and(|h| h.config().unknown == UnknownPolicy::Throttle);
                let step = pace.controller.observe(
                    reading.as_ref().ok().copied(),
                    bound.unwrap_or(Duration::MAX),
                    throttle_unknown,
                );
                if matches!(step, Step::Cut | Step::Unmeetable) {
                    pace.cut_at = reading.as_ref().ok().copied();
                }
            }
            pace.read_at = Some(now);
            pace.reading = Some((reading, bound));
            pace.baseline = baseline;
        }
        if !pace.controller.cutting() {
            return LatencyGate::Free;
        }
        LatencyGate::Paced(paced_throttle(pace, budget, config.source.as_str()))
    }
}

/// Milliseconds with two decimals: latencies a budget guards are often
/// around one millisecond.
fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// The condition of a claim the budget holds below its full pace: the
/// reading, the bound and the baseline, the level, and whether the pace
/// is being cut, climbing back, or at its floor with the target out of
/// reach (THR-8).
fn paced_throttle(pace: &LatencyPace, budget: Budget, source: &str) -> Throttle {
    let baseline = pace.baseline;
    let level = pace.controller.level();
    let pct = (level * 100.0).round();
    let p = budget.percentile;
    let (reading, bound) = match &pace.reading {
        Some((r, b)) => (r.clone(), *b),
        None => (Err("no reading yet".into()), None),
    };
    let against = match (budget.target, baseline) {
        (Target::Ratio(r), Some(b)) => format!(" ({r} % of baseline {}, {source})", ms(b)),
        _ => format!(" ({source})"),
    };
    let text = match (&reading, bound) {
        (Err(why), _) => format!("latency p{p} unknown: {why}; pace held at {pct} %"),
        (Ok(r), Some(b)) if *r > b && level <= FLOOR => format!(
            "latency p{p} {} > {}{against} even at the floor pace ({pct} %): the target cannot be met; running at the floor",
            ms(*r),
            ms(b)
        ),
        (Ok(r), Some(b)) if *r > b => {
            format!("latency p{p} {} > {}{against}: pace cut to {pct} %", ms(*r), ms(b))
        }
        (Ok(r), b) => format!(
            "latency p{p} {} within {}{against}: pace climbing back, {pct} %{}",
            ms(*r),
            b.map_or_else(|| "?".into(), ms),
            pace.cut_at
                .map(|c| format!(" (last cut at {})", ms(c)))
                .unwrap_or_default()
        ),
    };
    Throttle {
        signal: Signal::Latency,
        value: reading.ok().map(|r| r.as_secs_f64()),
        threshold: bound.map(|b| b.as_secs_f64()),
        text: crate::failure::cut(&text, 512),
    }
}
