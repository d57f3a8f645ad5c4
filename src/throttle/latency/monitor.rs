//! The latency monitor: one per database, the probe that samples the
//! application's latency and the baseline budgeted claims hold back for.

use super::recorder::{percentile, Recorder};
use super::{LatencyConfig, LatencySource};
use crate::store::{self, ProbeTarget};
use diesel_async::AsyncPgConnection;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long after the last budgeted claim asked the probe keeps reading;
/// past it the probe rests and gives its connection back.
const DEMAND: Duration = Duration::from_secs(2);
/// How long budgeted claims hold back before the baseline's samples
/// count: a batch that had started finishes first.
const SETTLE: Duration = Duration::from_millis(200);
/// How often the probe target's key range is read again, so rows added
/// at the end of the table are probed too.
const TARGET_REFRESH: Duration = Duration::from_secs(30);

/// Where a budgeted claim stands with the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The baseline is being measured: start no batch until then.
    Holding(Instant),
    /// Go on by the readings.
    Ready,
}

/// A measured baseline: the samples taken while budgeted claims held back.
#[derive(Debug, Clone)]
struct Baseline {
    sorted: Vec<Duration>,
    at: Instant,
}

#[derive(Debug, Default)]
struct State {
    /// When a budgeted claim last asked.
    demanded: Option<Instant>,
    /// The table the default probe reads: the first a budgeted claim named.
    table: Option<String>,
    baseline: Option<Baseline>,
    /// The current hold: samples count from its first instant to its last.
    hold: Option<(Instant, Instant)>,
}

/// Samples the application's latency and keeps the baseline (THR-7).
#[derive(Debug)]
pub struct LatencyMonitor {
    url: String,
    config: LatencyConfig,
    recorder: Arc<Recorder>,
    state: parking_lot::Mutex<State>,
}

impl LatencyMonitor {
    /// A monitor of the database at `url` (the probe connects there, on a
    /// connection of its own). Validate `config` first.
    pub fn new(url: impl Into<String>, config: LatencyConfig) -> LatencyMonitor {
        let recorder = match &config.source {
            LatencySource::Host(handle) => handle.0.clone(),
            LatencySource::Probe => Arc::default(),
        };
        LatencyMonitor {
            url: url.into(),
            config,
            recorder,
            state: parking_lot::Mutex::default(),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> &LatencyConfig {
        &self.config
    }

    /// A budgeted claim of a repair on `table` asks where it stands, and
    /// keeps the probe reading. With `baseline` (a ratio budget), a
    /// missing or old baseline starts a hold now; at the end of a hold the
    /// baseline is what the samples in it say.
    pub fn ask(&self, table: Option<&str>, baseline: bool, now: Instant) -> Phase {
        let mut state = self.state.lock();
        state.demanded = Some(now);
        if state.table.is_none() {
            state.table = table.map(str::to_string);
        }
        if let Some((from, to)) = state.hold {
            if now < to {
                return Phase::Holding(to);
            }
            let sorted = self.recorder.between(from, to);
            state.hold = None;
            state.baseline = (sorted.len() >= self.config.min_samples)
                .then_some(Baseline { sorted, at: now })
                .or(state.baseline.take());
            return Phase::Ready;
        }
        let old = state
            .baseline
            .as_ref()
            .is_none_or(|b| now.duration_since(b.at) >= self.config.baseline_every);
        if baseline && old {
            let from = now + SETTLE;
            let to = from + self.config.baseline_hold;
            state.hold = Some((from, to));
            return Phase::Holding(to);
        }
        Phase::Ready
    }

    /// The baseline of `pct`, if one was measured.
    pub fn baseline(&self, pct: u8) -> Option<Duration> {
        let state = self.state.lock();
        state
            .baseline
            .as_ref()
            .and_then(|b| percentile(&b.sorted, pct))
    }

    /// The `pct` percentile of the samples in `(from, to]`, or why there is
    /// none (too few samples: a reading that cannot be taken).
    pub fn reading(&self, pct: u8, from: Instant, to: Instant) -> Result<Duration, String> {
        let sorted = self.recorder.between(from, to);
        if sorted.len() < self.config.min_samples {
            return Err(format!(
                "{} latency samples in the last window, {} needed",
                sorted.len(),
                self.config.min_samples
            ));
        }
        percentile(&sorted, pct).ok_or_else(|| "no latency samples".to_string())
    }

    /// Whether a budgeted claim asked within [`DEMAND`].
    fn wanted(&self) -> Option<Option<String>> {
        let state = self.state.lock();
        state
            .demanded
            .filter(|at| at.elapsed() < DEMAND)
            .map(|_| state.table.clone())
    }

    /// The probe's loop, for a monitor whose source is the probe: while
    /// budgeted claims ask, one probe every interval on a connection of
    /// its own, each timed into the samples; at rest, no connection.
    pub async fn run(self: Arc<Self>) {
        if !matches!(self.config.source, LatencySource::Probe) {
            return;
        }
        let mut probe: Option<Probe> = None;
        loop {
            let Some(table) = self.wanted() else {
                probe = None;
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            if probe.is_none() {
                probe = Probe::open(&self.url, &self.config).await;
                if probe.is_none() {
                    tokio::time::sleep(self.config.probe_timeout).await;
                    continue;
                }
            }
            if let Some(p) = probe.as_mut() {
                let started = Instant::now();
                let done = tokio::time::timeout(
                    self.config.probe_timeout,
                    p.once(table.as_deref(), self.config.probe_sql.as_deref()),
                )
                .await;
                let took = started.elapsed();
                match done {
                    Ok(Ok(())) => self.recorder.record_at(started, took),
                    // A probe cut off by its timeout waited as long as the
                    // application would: it is a sample, and the
                    // connection, in an unknown state, is made anew.
                    Ok(Err(_)) | Err(_) => {
                        self.recorder
                            .record_at(started, took.max(self.config.probe_timeout));
                        probe = None;
                    }
                }
            }
            tokio::time::sleep(self.config.probe_interval).await;
        }
    }
}

/// The probe's connection and what it reads.
struct Probe {
    conn: AsyncPgConnection,
    target: Option<(ProbeTarget, Instant)>,
}

impl Probe {
    async fn open(url: &str, config: &LatencyConfig) -> Option<Probe> {
        let mut conn = match store::connect_dedicated(url).await {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(event = "latency_probe_failed", error = %e, "the latency probe cannot connect");
                return None;
            }
        };
        let timeout = u64::try_from(config.probe_timeout.as_millis()).unwrap_or(u64::MAX);
        store::latency_probe_session(&mut conn, timeout)
            .await
            .ok()?;
        Some(Probe { conn, target: None })
    }

    async fn once(
        &mut self,
        table: Option<&str>,
        sql: Option<&str>,
    ) -> Result<(), store::StoreError> {
        if let Some(sql) = sql {
            return store::latency_probe_declared(&mut self.conn, sql).await;
        }
        let Some(table) = table else {
            return store::latency_probe_declared(&mut self.conn, "SELECT 1").await;
        };
        let stale = self
            .target
            .as_ref()
            .is_none_or(|(_, at)| at.elapsed() >= TARGET_REFRESH);
        if stale {
            match store::latency_probe_target(&mut self.conn, table).await? {
                Some(target) => self.target = Some((target, Instant::now())),
                None => return store::latency_probe_declared(&mut self.conn, "SELECT 1").await,
            }
        }
        match &self.target {
            Some((target, _)) => store::latency_probe_read(&mut self.conn, target).await,
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::throttle::latency::LatencyHandle;

    /// THR-7: a ratio budget's first ask starts a hold; the samples
    /// recorded in the hold, after the settling time, are the baseline;
    /// an absolute budget never holds.
    #[test]
    fn thr07_the_baseline_is_measured_while_budgeted_claims_hold_back() {
        let handle = LatencyHandle::new();
        let config = LatencyConfig {
            source: LatencySource::Host(handle.clone()),
            min_samples: 2,
            ..LatencyConfig::default()
        };
        let m = LatencyMonitor::new("postgres://unused", config);
        let t0 = Instant::now();
        assert_eq!(m.ask(Some("t"), false, t0), Phase::Ready);
        let Phase::Holding(until) = m.ask(Some("t"), true, t0) else {
            panic!("a ratio budget without a baseline holds");
        };
        // One sample before the hold counts (settling) not, two in it do.
        handle
            .0
            .record_at(t0 + Duration::from_millis(100), Duration::from_millis(50));
        handle
            .0
            .record_at(t0 + Duration::from_millis(400), Duration::from_millis(2));
        handle
            .0
            .record_at(t0 + Duration::from_millis(600), Duration::from_millis(3));
        assert_eq!(
            m.ask(Some("t"), true, until - Duration::from_millis(1)),
            Phase::Holding(until)
        );
        assert_eq!(m.ask(Some("t"), true, until), Phase::Ready);
        assert_eq!(m.baseline(99), Some(Duration::from_millis(3)));
        assert_eq!(
            m.ask(Some("t"), true, until + Duration::from_secs(1)),
            Phase::Ready
        );
        assert!(m.reading(99, t0, until).is_ok());
        assert!(m
            .reading(99, until, until + Duration::from_secs(1))
            .is_err());
    }
}
