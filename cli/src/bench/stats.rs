//! One measured run and what measures it: wall and CPU clocks, latency
//! statistics and medians.

use super::cost::{Cost, CostMark};
use backfill::__private::store::Pool;
use serde_json::{json, Value};
use std::time::Instant;

/// One measured run.
#[derive(Debug, Clone)]
pub struct RunResult {
    pub runner: String,
    pub batch: u32,
    pub rows: u64,
    pub rep: u32,
    pub seconds: f64,
    pub batches: usize,
    pub batch_mean_ms: f64,
    pub batch_p99_ms: f64,
    pub verified: bool,
    /// How busy the machine's cores were over the timed part of the run
    /// (0 to 1, all processes: PostgreSQL, this process and the rest);
    /// `None` where `/proc/stat` cannot be read.
    pub cpu_busy: Option<f64>,
    /// What the run's journal took (`engine-journal` only).
    pub journal: Option<JournalUse>,
    /// The run's CPU (client and server) and WAL.
    pub cost: Cost,
}

/// The journal a journaled run wrote, as the framework's own readings
/// report it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JournalUse {
    /// Rows the run's backfills journaled.
    pub rows: i64,
    /// Their stored size, `pg_column_size` of each journal entry summed.
    pub row_bytes: i64,
    /// How much `pg_total_relation_size` of the journal (heap, TOAST and
    /// index) grew over the run.
    pub disk_bytes: i64,
}

impl JournalUse {
    /// Stored bytes per journaled row.
    pub(super) fn row_bytes_per_row(&self) -> Option<f64> {
        (self.rows > 0).then(|| self.row_bytes as f64 / self.rows as f64)
    }

    /// Bytes on disk per journaled row, TOAST and index included.
    pub(super) fn disk_bytes_per_row(&self) -> Option<f64> {
        (self.rows > 0).then(|| self.disk_bytes as f64 / self.rows as f64)
    }

    fn json(&self) -> Value {
        json!({
            "rows": self.rows,
            "row_bytes": self.row_bytes,
            "disk_bytes": self.disk_bytes,
            "row_bytes_per_row": self.row_bytes_per_row().map(round3),
            "disk_bytes_per_row": self.disk_bytes_per_row().map(round3),
        })
    }
}

impl RunResult {
    /// A run of `rows` rows timed by `timing`, with per-batch latencies in
    /// microseconds (sorted in place for the percentile).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        runner: &str,
        batch: u32,
        rows: u64,
        rep: u32,
        timing: Timing,
        latencies: &mut [u64],
        verified: bool,
    ) -> Self {
        let (batch_mean_ms, batch_p99_ms) = latency_stats(latencies);
        Self {
            runner: runner.to_string(),
            batch,
            rows,
            rep,
            seconds: timing.seconds,
            batches: latencies.len(),
            batch_mean_ms,
            batch_p99_ms,
            verified,
            cpu_busy: timing.cpu_busy,
            journal: None,
            cost: timing.cost,
        }
    }

    /// The same run, with what its journal took.
    pub(super) fn with_journal(mut self, journal: JournalUse) -> Self {
        self.journal = Some(journal);
        self
    }

    pub(super) fn rows_per_s(&self) -> f64 {
        self.rows as f64 / self.seconds.max(1e-9)
    }

    /// Rows over the summed batch latencies: the batch path alone, without
    /// the engine's start, claim, validation and the gaps between
    /// batches. Meaningless for the K runners, whose batches overlap.
    pub(super) fn batch_phase_rows_per_s(&self) -> Option<f64> {
        let seconds = self.batch_mean_ms * self.batches as f64 / 1000.0;
        // The partitioned runners' batches overlap too (`engine-p<P>`,
        // `engine-p-procs`).
        let overlapping = matches!(self.runner.as_str(), "engine-k" | "plpgsql-k")
            || self.runner.starts_with("engine-p");
        (!overlapping && seconds > 0.0).then(|| self.rows as f64 / seconds)
    }

    pub(super) fn json(&self) -> Value {
        json!({
            "runner": self.runner, "batch": self.batch, "rows": self.rows, "rep": self.rep,
            "seconds": round3(self.seconds), "rows_per_s": self.rows_per_s().round(),
            "batches": self.batches, "batch_mean_ms": round3(self.batch_mean_ms),
            "batch_p99_ms": round3(self.batch_p99_ms), "verified": self.verified,
            "batch_phase_rows_per_s": self.batch_phase_rows_per_s().map(f64::round),
            "cpu_busy": self.cpu_busy.map(round3),
            "journal": self.journal.as_ref().map(JournalUse::json),
            "cost": self.cost.json(self.rows, self.batches),
        })
    }
}

/// The machine's cumulative CPU time (all cores) from the first line of
/// `/proc/stat`, in clock ticks: busy (user, nice, system, irq, softirq,
/// steal) and total (busy plus idle and iowait). Comparing two readings
/// shows whether a run was bound by the machine's CPUs, which decides how
/// far K runs at once can scale on it.
#[derive(Clone, Copy, Debug, PartialEq)]
struct CpuClock {
    busy: u64,
    total: u64,
}

impl CpuClock {
    fn now() -> Option<Self> {
        Self::parse(&std::fs::read_to_string("/proc/stat").ok()?)
    }

    fn parse(stat: &str) -> Option<Self> {
        let line = stat.lines().next()?;
        let mut fields = line.split_whitespace();
        if fields.next()? != "cpu" {
            return None;
        }
        let v: Vec<u64> = fields
            .take(8)
            .map(|f| f.parse().ok())
            .collect::<Option<_>>()?;
        let [user, nice, system, idle, iowait, irq, softirq, steal] = v[..] else {
            return None;
        };
        let busy = user + nice + system + irq + softirq + steal;
        Some(Self {
            busy,
            total: busy + idle + iowait,
        })
    }

    /// Fraction of all cores busy between `start` and now.
    fn busy_since(start: Option<Self>) -> Option<f64> {
        let (start, end) = (start?, Self::now()?);
        let total = end.total.checked_sub(start.total)?;
        let busy = end.busy.checked_sub(start.busy)?;
        (total > 0).then(|| busy as f64 / total as f64)
    }
}

/// The timed part of a run: wall time, the machine's CPU use and the
/// run's cost.
pub(super) struct RunClock {
    started: Instant,
    cpu: Option<CpuClock>,
    mark: CostMark,
}

/// What a [`RunClock`] measured.
#[derive(Clone, Copy, Debug)]
pub(super) struct Timing {
    pub(super) seconds: f64,
    /// See [`RunResult::cpu_busy`].
    pub(super) cpu_busy: Option<f64>,
    /// See [`RunResult::cost`].
    pub(super) cost: Cost,
}

impl RunClock {
    /// Start the clocks; `pool` reaches the bench's database, whose
    /// backends' CPU the cost counts.
    pub(super) async fn start(pool: &Pool) -> Self {
        let mark = CostMark::now(pool).await;
        Self {
            started: Instant::now(),
            cpu: CpuClock::now(),
            mark,
        }
    }

    pub(super) async fn stop(&self, pool: &Pool) -> Timing {
        let seconds = self.started.elapsed().as_secs_f64();
        let cpu_busy = CpuClock::busy_since(self.cpu);
        let end = CostMark::now(pool).await;
        Timing {
            seconds,
            cpu_busy,
            cost: self.mark.cost_until(&end, pool).await,
        }
    }
}

pub(super) fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Mean and p99 of per-batch latencies in microseconds, as milliseconds.
pub(super) fn latency_stats(micros: &mut [u64]) -> (f64, f64) {
    if micros.is_empty() {
        return (0.0, 0.0);
    }
    micros.sort_unstable();
    let mean = micros.iter().sum::<u64>() as f64 / micros.len() as f64;
    let idx = ((micros.len() as f64 * 0.99).ceil() as usize).clamp(1, micros.len()) - 1;
    (mean / 1000.0, micros[idx] as f64 / 1000.0)
}

pub(super) fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(|a, b| a.total_cmp(b));
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn emb04_cpu_clock_reads_the_machine_line_of_proc_stat() {
        let stat = "cpu  100 5 50 800 20 3 2 10 0 0\ncpu0 50 2 25 400 10 1 1 5 0 0\n";
        assert_eq!(
            CpuClock::parse(stat),
            Some(CpuClock {
                busy: 100 + 5 + 50 + 3 + 2 + 10,
                total: 170 + 800 + 20,
            })
        );
        assert_eq!(CpuClock::parse("cpu0 1 2 3 4 5 6 7 8\n"), None);
        assert_eq!(CpuClock::parse("cpu  1 2 3\n"), None);
        assert_eq!(CpuClock::parse(""), None);
    }

    #[test]
    fn emb04_stats() {
        let mut xs: Vec<u64> = (1..=100).map(|x| x * 1000).collect();
        let (mean, p99) = latency_stats(&mut xs);
        assert!((mean - 50.5).abs() < 1e-9);
        assert!((p99 - 99.0).abs() < 1e-9);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
