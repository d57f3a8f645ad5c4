//! The `adaptive` run (THR-3): one backfill sized toward a target batch
//! duration from a deliberately bad start, with every committed batch's
//! size and duration traced over time, so the report shows how fast the
//! sizing reaches its target and how closely it holds it.

use super::args::BenchError;
use super::context::Ctx;
use super::repair::ItemsRepair;
use super::stats::{median, round3};
use super::timed::{Sample, Timed};
use backfill::__private::store;
use backfill::engine::Engine;
use backfill::repair::Registry;
use backfill::runtime::RuntimeHandle;
use backfill::throttle::sizing::BatchTarget;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How close to the target a batch must be to count as on target: the
/// tolerance the sizing is tested against.
const TOLERANCE: f64 = 0.25;

impl Ctx {
    /// Run the canonical repair once, sized toward `--target-batch-ms`
    /// from `--start-batch` keys (the smallest size; the largest is N),
    /// and report the trace.
    pub(super) async fn adaptive(&mut self) -> Result<Value, BenchError> {
        let rows = self.args.rows;
        let target = Duration::from_millis(self.args.target_batch_ms.max(1));
        let start = self.args.start_batch.max(1);
        let table = ["items".to_string()];
        self.reset_settled(&table, rows).await?;
        self.run_seq += 1;
        let id = format!("bench.adaptive.r{}.{}", self.run_seq, std::process::id());
        let max = u32::try_from(rows).unwrap_or(u32::MAX).max(start);
        let repair = ItemsRepair::new(id.clone(), "items", max).adaptive(BatchTarget {
            duration: target,
            min: start,
            max,
        });
        let mut registry = Registry::new();
        registry
            .register(repair)
            .map_err(|e| BenchError::Run(e.to_string()))?;
        let pool = store::build_pool(&self.url, 5).await?;
        let engine = Engine::new(pool, registry, self.engine_config())?;
        engine.register().await?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let backend = Arc::new(Timed {
            engine: engine.clone(),
            latencies: parking_lot::Mutex::new(Vec::with_capacity(4096)),
            done: tx,
            failures: AtomicU64::new(0),
            trace: Some(parking_lot::Mutex::new(Vec::with_capacity(4096))),
        });
        let began = Instant::now();
        engine.start(&id).await?;
        let runtime = RuntimeHandle::start(
            backend.clone(),
            self.runtime_config(&format!("bench-adaptive-{}", std::process::id()), 1),
        )
        .map_err(|e| BenchError::Run(e.to_string()))?;
        let outcome = rx.recv().await;
        let wall = began.elapsed();
        runtime.shutdown().await;
        match outcome {
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(BenchError::Run(format!("adaptive run failed: {e}"))),
            None => {
                return Err(BenchError::Run(
                    "adaptive run ended without an outcome".into(),
                ))
            }
        }
        let samples = backend
            .trace
            .as_ref()
            .map_or_else(Vec::new, |t| t.lock().clone());
        let verified =
            backend.failures.load(Ordering::Relaxed) == 0 && self.verify("items").await?;
        Ok(trace_json(
            &samples, began, target, start, rows, wall, verified,
        ))
    }
}

/// The report's view of one trace: every batch (time since the start,
/// size, duration), the first batch from which every later one is within
/// [`TOLERANCE`] of the target (the last batch, cut short by the bound,
/// excepted), and the run's throughput.
fn trace_json(
    samples: &[Sample],
    began: Instant,
    target: Duration,
    start: u32,
    rows: u64,
    wall: Duration,
    verified: bool,
) -> Value {
    let target_ms = target.as_secs_f64() * 1000.0;
    let on_target = |s: &Sample| {
        let ms = s.took.as_secs_f64() * 1000.0;
        (ms - target_ms).abs() <= TOLERANCE * target_ms
    };
    // The last batch only takes what is left below the bound.
    let judged = samples.len().saturating_sub(1);
    let converged = (0..judged)
        .find(|&i| samples[i..judged].iter().all(on_target))
        .map(|i| i + 1);
    // On a shared machine one slow batch resets `converged`; the share of
    // batches on target after the first one that was tells the rest.
    let first = samples[..judged].iter().position(on_target);
    let (share, median_ms) = match first {
        Some(i) => {
            let after = &samples[i..judged];
            let share = after.iter().filter(|s| on_target(s)).count() as f64 / after.len() as f64;
            let ms = after
                .iter()
                .map(|s| s.took.as_secs_f64() * 1000.0)
                .collect();
            (Some(round3(share)), Some(round3(median(ms))))
        }
        None => (None, None),
    };
    let batches: Vec<Value> = samples
        .iter()
        .map(|s| {
            json!({
                "at_ms": round3(s.at.saturating_duration_since(began).as_secs_f64() * 1000.0),
                "size": s.size,
                "ms": round3(s.took.as_secs_f64() * 1000.0),
            })
        })
        .collect();
    json!({
        "target_ms": target_ms,
        "start_size": start,
        "tolerance": TOLERANCE,
        "rows": rows,
        "rows_per_s": round3(rows as f64 / wall.as_secs_f64().max(1e-9)),
        "converged_from_batch": converged,
        "first_on_target_batch": first.map(|i| i + 1),
        "on_target_share_after_first": share,
        "median_ms_after_first": median_ms,
        "verified": verified,
        "batches": batches,
    })
}

/// The trace as Markdown: the convergence in one sentence, then the
/// batches up to a little past it (and the last one), not all of them.
pub(super) fn markdown(v: &Value) -> String {
    let batches = v["batches"].as_array().map_or(&[][..], Vec::as_slice);
    let converged = v["converged_from_batch"].as_u64();
    let mut out =
        format!(
        "## Adaptive batch size (THR-3)\n\nOne backfill of {} rows sized toward {} ms per batch \
         from {} keys (`--only adaptive`): {} batches, {:.0} rows/s, verified {}. ",
        v["rows"], v["target_ms"], v["start_size"], batches.len(),
        v["rows_per_s"].as_f64().unwrap_or(0.0), v["verified"]
    );
    let pct = v["tolerance"].as_f64().unwrap_or(TOLERANCE) * 100.0;
    if let Some(first) = v["first_on_target_batch"].as_u64() {
        out.push_str(&format!(
            "Batch {first} was the first within {pct:.0} % of the target; from there on {:.0} % \
             of the batches were, median {} ms. ",
            v["on_target_share_after_first"].as_f64().unwrap_or(0.0) * 100.0,
            v["median_ms_after_first"]
        ));
    }
    out.push_str(&match converged {
        Some(n) => format!("From batch {n} on, every batch but the last was.\n\n"),
        None if v["first_on_target_batch"].is_u64() => {
            "No batch marks a point after which every batch was.\n\n".to_string()
        }
        None => "No batch reached the target.\n\n".to_string(),
    });
    out.push_str("| batch | at (ms) | size | took (ms) |\n|---:|---:|---:|---:|\n");
    let shown = v["first_on_target_batch"]
        .as_u64()
        .map_or(batches.len(), |n| (n as usize + 5).min(batches.len()));
    for (i, b) in batches.iter().enumerate() {
        if i < shown || i + 1 == batches.len() {
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                i + 1,
                b["at_ms"],
                b["size"],
                b["ms"]
            ));
        } else if i == shown {
            out.push_str("| ... | | | |\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(began: Instant, ms: u64, size: u32) -> Sample {
        Sample {
            at: began + Duration::from_millis(ms),
            size,
            took: Duration::from_millis(ms),
        }
    }

    /// Convergence is the first batch after which every batch (but the
    /// short last one) is within the tolerance; a late outlier moves it.
    #[test]
    fn thr03_convergence_is_where_every_later_batch_holds_the_target() {
        let t0 = Instant::now();
        let target = Duration::from_millis(50);
        let ms = [2, 5, 20, 45, 55, 48, 10];
        let samples: Vec<Sample> = ms.iter().map(|&m| sample(t0, m, 10)).collect();
        let v = trace_json(&samples, t0, target, 10, 100, Duration::from_secs(1), true);
        assert_eq!(v["converged_from_batch"], 4);
        let late = [2, 45, 55, 90, 48, 50, 1];
        let samples: Vec<Sample> = late.iter().map(|&m| sample(t0, m, 10)).collect();
        let v = trace_json(&samples, t0, target, 10, 100, Duration::from_secs(1), true);
        assert_eq!(v["converged_from_batch"], 5);
        assert_eq!(v["first_on_target_batch"], 2);
        // Batches 2..=6: 45, 55, 90, 48, 50; four of five on target.
        assert_eq!(v["on_target_share_after_first"], 0.8);
        let text = markdown(&v);
        assert!(text.contains("From batch 5 on"), "{text}");
        assert!(text.contains("Batch 2 was the first"), "{text}");
    }
}
