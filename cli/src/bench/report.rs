//! The report: medians, ratios and their per-repetition ranges, as JSON or
//! Markdown, and how to read it.

use super::stats::{median, round3, RunResult};
use backfill::repair::MAX_PARTITIONS;
use serde_json::{json, Value};

pub(super) struct Report {
    pub(super) cores: usize,
    pub(super) pg_version: String,
    /// The server's `fsync` and `synchronous_commit`.
    pub(super) durability: String,
    pub(super) rows: u64,
    pub(super) reps: u32,
    pub(super) k: usize,
    /// The partitions of the `engine-p` runs (`engine-p<P>`), ascending.
    pub(super) partitions: Vec<u32>,
    pub(super) runs: Vec<RunResult>,
    pub(super) takeover: Option<Value>,
    pub(super) rss: Option<Value>,
    pub(super) admin_list: Option<Value>,
    /// The `adaptive` run's trace.
    pub(super) adaptive: Option<Value>,
    /// The `fleet` runs (FLT-1).
    pub(super) fleet: Option<Value>,
}

impl Report {
    /// Median of `f` over the runs of `runner` at `batch` that have a value.
    fn median_by(
        &self,
        runner: &str,
        batch: u32,
        f: impl Fn(&RunResult) -> Option<f64>,
    ) -> Option<f64> {
        let xs: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| r.runner == runner && r.batch == batch)
            .filter_map(f)
            .collect();
        (!xs.is_empty()).then(|| median(xs))
    }

    fn median_rps(&self, runner: &str, batch: u32) -> Option<f64> {
        self.median_by(runner, batch, |r| Some(r.rows_per_s()))
    }

    fn median_phase_rps(&self, runner: &str, batch: u32) -> Option<f64> {
        self.median_by(runner, batch, RunResult::batch_phase_rows_per_s)
    }

    fn batches(&self) -> Vec<u32> {
        let mut b: Vec<u32> = self.runs.iter().map(|r| r.batch).collect();
        b.sort_unstable();
        b.dedup();
        b
    }

    fn ratio(&self, a: Option<f64>, b: Option<f64>) -> Option<f64> {
        match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some((a / b * 1000.0).round() / 1000.0),
            _ => None,
        }
    }

    /// The `engine-p` run the `engine_p_vs_plpgsql` ratio reads: P = the
    /// cores when it ran, else the largest P.
    fn engine_p(&self) -> Option<String> {
        let p = self
            .partitions
            .iter()
            .find(|&&p| p as usize == self.cores)
            .or(self.partitions.last())?;
        Some(format!("engine-p{p}"))
    }

    /// `(engine/plpgsql, engine/client, engine-k/(k*engine),
    /// plpgsql-k/(k*plpgsql), engine-sql/engine, engine-p/plpgsql,
    /// engine-k/plpgsql-k, engine-journal/engine)` for `batch`.
    fn ratios(&self, batch: u32) -> [Option<f64>; 8] {
        let e = self.median_rps("engine", batch);
        let p = self.median_rps("plpgsql", batch);
        let k = self.k as f64;
        let ek = self.median_rps("engine-k", batch);
        let pk = self.median_rps("plpgsql-k", batch);
        let ep = self.engine_p().and_then(|r| self.median_rps(&r, batch));
        [
            self.ratio(e, p),
            self.ratio(e, self.median_rps("client", batch)),
            self.ratio(ek, e.map(|e| e * k)),
            self.ratio(pk, p.map(|p| p * k)),
            self.ratio(self.median_rps("engine-sql", batch), e),
            self.ratio(ep, p),
            self.ratio(ek, pk),
            self.ratio(self.median_rps("engine-journal", batch), e),
        ]
    }

    /// The same ratio within each repetition: `a`'s rows/s over `scale`
    /// times `b`'s. A repetition runs every runner once, back to back, so
    /// each pair saw the same minutes of the machine; the spread of these
    /// is the noise the medians hide. `(min, max)` over the repetitions
    /// that have both runs.
    fn rep_range(&self, a: &str, b: &str, scale: f64, batch: u32) -> Option<(f64, f64)> {
        let run = |runner: &str, rep: u32| {
            self.runs
                .iter()
                .find(|r| r.runner == runner && r.batch == batch && r.rep == rep)
        };
        let xs: Vec<f64> = (1..=self.reps)
            .filter_map(|rep| {
                let (x, y) = (run(a, rep)?, run(b, rep)?);
                let d = y.rows_per_s() * scale;
                (d > 0.0).then(|| x.rows_per_s() / d)
            })
            .collect();
        let min = xs.iter().copied().reduce(f64::min)?;
        let max = xs.iter().copied().reduce(f64::max)?;
        Some((round3(min), round3(max)))
    }

    /// [`Report::ratios`]' per-repetition ranges, in the same order.
    fn ranges(&self, batch: u32) -> [Option<(f64, f64)>; 8] {
        let k = self.k as f64;
        let ep = self.engine_p().unwrap_or_default();
        [
            self.rep_range("engine", "plpgsql", 1.0, batch),
            self.rep_range("engine", "client", 1.0, batch),
            self.rep_range("engine-k", "engine", k, batch),
            self.rep_range("plpgsql-k", "plpgsql", k, batch),
            self.rep_range("engine-sql", "engine", 1.0, batch),
            self.rep_range(&ep, "plpgsql", 1.0, batch),
            self.rep_range("engine-k", "plpgsql-k", 1.0, batch),
            self.rep_range("engine-journal", "engine", 1.0, batch),
        ]
    }

    /// `engine-health / engine` at `batch` and its per-repetition range:
    /// what the health monitor and the gate before each batch cost when
    /// nothing throttles.
    fn health_cost(&self, batch: u32) -> (Option<f64>, Option<(f64, f64)>) {
        (
            self.ratio(
                self.median_rps("engine-health", batch),
                self.median_rps("engine", batch),
            ),
            self.rep_range("engine-health", "engine", 1.0, batch),
        )
    }

    /// The paragraph on `engine-journal` at `batch`: its ratio to `engine`
    /// against the target, and the journal's bytes per row (medians over
    /// the runs); empty when it did not run.
    fn journal_cost(&self, batch: u32) -> String {
        let row = self.median_by("engine-journal", batch, |r| {
            r.journal.as_ref()?.row_bytes_per_row()
        });
        let disk = self.median_by("engine-journal", batch, |r| {
            r.journal.as_ref()?.disk_bytes_per_row()
        });
        let (Some(row), Some(disk)) = (row, disk) else {
            return String::new();
        };
        let [.., ratio] = self.ratios(batch);
        let [.., range] = self.ranges(batch);
        let ratio = match (ratio, range) {
            (Some(x), Some((lo, hi))) if self.reps > 1 => {
                format!("{x:.3} ({lo:.3}-{hi:.3} within repetitions)")
            }
            (Some(x), _) => format!("{x:.3}"),
            _ => "-".into(),
        };
        format!(
            "\nJournal, B = {batch}: engine-journal / engine = {ratio} (target >= 0.7); \
             {row:.1} bytes per journaled row as stored (`pg_column_size`), {disk:.1} bytes per \
             row of the journal's growth on disk (heap, TOAST and index).\n"
        )
    }

    pub(super) fn verified(&self) -> bool {
        self.runs.iter().all(|r| r.verified)
            && [&self.takeover, &self.rss, &self.adaptive]
                .into_iter()
                .flatten()
                .all(|v| v["verified"] != Value::Bool(false))
    }

    pub(super) fn json(&self) -> Value {
        let keys = [
            "engine_vs_plpgsql",
            "engine_vs_client",
            "engine_k_vs_k_engine",
            "plpgsql_k_vs_k_plpgsql",
            "engine_sql_vs_engine",
            "engine_p_vs_plpgsql",
            "engine_k_vs_plpgsql_k",
            "engine_journal_vs_engine",
        ];
        let mut ratios = json!({});
        for key in keys {
            ratios[key] = json!({});
        }
        let mut ranges = ratios.clone();
        for b in self.batches() {
            for ((key, v), range) in keys.iter().zip(self.ratios(b)).zip(self.ranges(b)) {
                ratios[key][b.to_string()] = json!(v);
                ranges[key][b.to_string()] = json!(range.map(|(lo, hi)| [lo, hi]));
            }
            // CPU (client and server) per row, engine over the server
            // loop: below 1 would mean the engine does less than the loop.
            ratios["engine_cpu_per_row_vs_plpgsql"][b.to_string()] = json!(self.ratio(
                self.median_by("engine", b, |r| r.cost.cpu_us_per_row(r.rows)),
                self.median_by("plpgsql", b, |r| r.cost.cpu_us_per_row(r.rows)),
            ));
            // The same, the loop in the server committing through the
            // product's fence over the plain loop: what the fence and the
            // checkpoint cost where no client drives the batches.
            ratios["plpgsql_fenced_cpu_per_row_vs_plpgsql"][b.to_string()] = json!(self.ratio(
                self.median_by("plpgsql-fenced", b, |r| r.cost.cpu_us_per_row(r.rows)),
                self.median_by("plpgsql", b, |r| r.cost.cpu_us_per_row(r.rows)),
            ));
            // The loop inside the server (EX-8) against the same
            // targets as the engine's own batches.
            let plpgsql = self.median_rps("plpgsql", b);
            ratios["engine_server_vs_plpgsql"][b.to_string()] =
                json!(self.ratio(self.median_rps("engine-server", b), plpgsql));
            ratios["engine_server_cpu_per_row_vs_plpgsql"][b.to_string()] = json!(self.ratio(
                self.median_by("engine-server", b, |r| r.cost.cpu_us_per_row(r.rows)),
                self.median_by("plpgsql", b, |r| r.cost.cpu_us_per_row(r.rows)),
            ));
            let server_p = format!(
                "engine-server-p{}",
                (self.cores as u32).clamp(1, MAX_PARTITIONS)
            );
            ratios["engine_server_p_vs_plpgsql"][b.to_string()] =
                json!(self.ratio(self.median_rps(&server_p, b), plpgsql));
            ratios["engine_server_k_vs_plpgsql_k"][b.to_string()] = json!(self.ratio(
                self.median_rps("engine-server-k", b),
                self.median_rps("plpgsql-k", b),
            ));
            for (key, a, base) in [
                ("engine_server_vs_plpgsql", "engine-server", "plpgsql"),
                ("engine_server_p_vs_plpgsql", server_p.as_str(), "plpgsql"),
                (
                    "engine_server_k_vs_plpgsql_k",
                    "engine-server-k",
                    "plpgsql-k",
                ),
            ] {
                ranges[key][b.to_string()] =
                    json!(self.rep_range(a, base, 1.0, b).map(|(lo, hi)| [lo, hi]));
            }
            let (v, range) = self.health_cost(b);
            ratios["engine_health_vs_engine"][b.to_string()] = json!(v);
            ranges["engine_health_vs_engine"][b.to_string()] =
                json!(range.map(|(lo, hi)| [lo, hi]));
        }
        json!({
            "cores": self.cores,
            "postgres_version": self.pg_version,
            "postgres_durability": self.durability,
            "rows": self.rows,
            "reps": self.reps,
            "k": self.k,
            "partitions": self.partitions,
            "engine_p_vs_plpgsql_runner": self.engine_p(),
            "verified": self.verified(),
            "ratios": ratios,
            "ratio_ranges_within_reps": ranges,
            "runs": self.runs.iter().map(RunResult::json).collect::<Vec<_>>(),
            "takeover": self.takeover,
            "rss": self.rss,
            "admin_list": self.admin_list,
            "admin_list_latency": Value::Null,
            "adaptive": self.adaptive,
            "fleet": self.fleet,
        })
    }

    pub(super) fn markdown(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "Machine: {} cores; {} ({}).\n\nN = {} rows, {} repetitions (medians), K = {} for engine-k and plpgsql-k (N split over K tables), P = {:?} for engine-p.\n\n",
            self.cores, self.pg_version, self.durability, self.rows, self.reps, self.k, self.partitions
        ));
        s.push_str(&self.runs_table());
        s.push_str(&self.ratios_table());
        s.push_str(&self.extras());
        s.push_str(&format!(
            "\nVerification (email_norm = lower(email) and touched = 1 on every row after every run, and for engine-journal every row journaled): {}.\n",
            if self.verified() { "passed" } else { "FAILED (invalid runs)" }
        ));
        s
    }

    /// The throughput runners in the order the tables show them.
    fn runner_order(&self) -> Vec<String> {
        let fixed = |names: &[&str]| names.iter().map(|n| n.to_string()).collect::<Vec<_>>();
        let mut order = fixed(&[
            "plpgsql",
            "plpgsql-fenced",
            "client",
            "engine",
            "engine-sql",
            "engine-journal",
            "engine-keys",
            "engine-serial",
            "engine-health",
        ]);
        order.extend(self.partitions.iter().map(|p| format!("engine-p{p}")));
        order.extend(fixed(&["engine-p-procs", "engine-k", "plpgsql-k"]));
        order
    }

    /// The Markdown table of the runs: a row per batch size and runner
    /// with the medians of its repetitions.
    fn runs_table(&self) -> String {
        let mut s = String::new();
        if !self.runs.is_empty() {
            s.push_str(
                "| B | runner | rows/s | batch mean ms | batch p99 ms | vs plpgsql | vs client | rows/s in batches | CPU busy |\n",
            );
            s.push_str("|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
        }
        for b in self.batches() {
            let p = self.median_rps("plpgsql", b);
            let c = self.median_rps("client", b);
            for runner in &self.runner_order() {
                let runner = runner.as_str();
                let Some(rps) = self.median_rps(runner, b) else {
                    continue;
                };
                let fmt = |x: Option<f64>| x.map(|x| format!("{x:.2}")).unwrap_or("-".into());
                let in_batches = self.median_phase_rps(runner, b);
                s.push_str(&format!(
                    "| {b} | {runner} | {:.0} | {:.3} | {:.3} | {} | {} | {} | {} |\n",
                    rps,
                    self.median_by(runner, b, |r| Some(r.batch_mean_ms))
                        .unwrap_or(0.0),
                    self.median_by(runner, b, |r| Some(r.batch_p99_ms))
                        .unwrap_or(0.0),
                    fmt(self.ratio(Some(rps), p)),
                    fmt(self.ratio(Some(rps), c)),
                    in_batches.map(|x| format!("{x:.0}")).unwrap_or("-".into()),
                    self.median_by(runner, b, |r| r.cpu_busy)
                        .map(|x| format!("{:.0}%", x * 100.0))
                        .unwrap_or("-".into()),
                ));
            }
        }
        s
    }

    /// The Markdown table of the ratios per batch size, each with its
    /// range within one repetition when there are several.
    fn ratios_table(&self) -> String {
        let mut s = String::new();
        let bs = self.batches();
        if !bs.is_empty() {
            s.push_str(&format!("\nRatios of the medians; in parentheses, the lowest and highest of the same ratio within one repetition (runs of a repetition are back to back).\n\n| B | engine / plpgsql | engine / client | engine xK / (K x engine) | plpgsql xK / (K x plpgsql) | engine / plpgsql in batches | engine-sql / engine | {} / plpgsql | engine xK / plpgsql xK | engine-journal / engine |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
                self.engine_p().unwrap_or_else(|| "engine-p".into())
            ));
            for b in bs {
                let f = |x: Option<f64>| x.map(|x| format!("{x:.2}")).unwrap_or("-".into());
                let with_range = |x: Option<f64>, r: Option<(f64, f64)>| match (x, r) {
                    (Some(x), Some((lo, hi))) if self.reps > 1 => {
                        format!("{x:.2} ({lo:.2}-{hi:.2})")
                    }
                    _ => f(x),
                };
                let [a, c, k, pk, sql, ep, kk, j] = self.ratios(b);
                let [ra, rc, rk, rpk, rsql, rep, rkk, rj] = self.ranges(b);
                let phase = self.ratio(
                    self.median_phase_rps("engine", b),
                    self.median_phase_rps("plpgsql", b),
                );
                s.push_str(&format!(
                    "| {b} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    with_range(a, ra),
                    with_range(c, rc),
                    with_range(k, rk),
                    with_range(pk, rpk),
                    f(phase),
                    with_range(sql, rsql),
                    with_range(ep, rep),
                    with_range(kk, rkk),
                    with_range(j, rj)
                ));
            }
        }
        s
    }

    /// A paragraph per extra measurement that ran: the health monitor's
    /// cost, takeover, RSS, admin list latency, the adaptive trace.
    fn extras(&self) -> String {
        let mut s = String::new();
        for b in self.batches() {
            if let (Some(x), range) = self.health_cost(b) {
                let range = range
                    .filter(|_| self.reps > 1)
                    .map(|(lo, hi)| format!(" ({lo:.3}-{hi:.3} within repetitions)"))
                    .unwrap_or_default();
                s.push_str(&format!(
                    "\nHealth monitor at its defaults, B = {b}: engine-health / engine = {x:.3}{range} (target >= 0.98).\n"
                ));
            }
        }
        for b in self.batches() {
            s.push_str(&self.journal_cost(b));
        }
        if let Some(t) = &self.takeover {
            s.push_str(&format!(
                "\nTakeover after SIGKILL of the owner: median {:.0} ms, max {:.0} ms over {} runs (lease TTL {} ms, poll interval {} ms; target <= {:.0} ms).\n",
                t["median_ms"].as_f64().unwrap_or(f64::NAN),
                t["max_ms"].as_f64().unwrap_or(f64::NAN),
                t["samples_ms"].as_array().map_or(0, |a| a.len()),
                t["lease_ttl_ms"],
                t["poll_interval_ms"],
                t["target_ms"].as_f64().unwrap_or(f64::NAN)
            ));
        }
        if let Some(r) = &self.rss {
            s.push_str(&format!(
                "\nWorker RSS over a {}-row engine run (B = {}, {:.0} rows/s): before {} MB, peak {} MB, early {} MB, late {} MB.\n",
                r["rows"], r["batch"], r["rows_per_s"].as_f64().unwrap_or(f64::NAN),
                r["rss_before_mb"], r["rss_peak_mb"],
                r["rss_early_mb"], r["rss_late_mb"]
            ));
        }
        if let Some(a) = &self.admin_list {
            s.push_str(&format!(
                "\nAdmin API list (`GET /admin/backfills?limit=100`) with {} registered backfills, {} concurrent clients, {} requests after {} unmeasured warm-up requests per client ({} errors): p50 {} ms, p99 {} ms (target p99 < 50 ms); slowest warm-up request {} ms.\n",
                a["backfills"], a["clients"], a["requests"], a["warmup_per_client"], a["errors"], a["p50_ms"], a["p99_ms"], a["cold_max_ms"]
            ));
        }
        if let Some(a) = &self.adaptive {
            s.push('\n');
            s.push_str(&super::adaptive::markdown(a));
        }
        if let Some(f) = &self.fleet {
            s.push_str(&super::fleet::markdown(f));
        }
        s
    }
}

/// How to read the report (the head of benches/README.md).
pub(super) const METHOD: &str = "\
Every runner does the same statements per batch: select at most B keys after \
the checkpoint, update them by id (`email_norm = lower(email)`, \
`touched = touched + 1`), advance the checkpoint, commit.\n\n\
- `plpgsql`: a PL/pgSQL procedure looping the batches with COMMIT per batch: \
the server-side limit, no client round trips.\n\
- `plpgsql-fenced`: the same procedure advancing, with each batch, the \
checkpoint of a backfill the engine started and claimed through the \
product's fence (`backfill_checkpoint_advance`, the key in its stored \
encoding) instead of a plain progress row: a batch's cost with its loop \
inside the server, fence and checkpoint included. Read its CPU per row \
against `plpgsql`'s and `engine`'s.\n\
- `client`: a minimal Rust loop on one connection: BEGIN, select, update, \
checkpoint, COMMIT (5 round trips, cached prepared statements), no claims or fencing.\n\
- `engine`: the product path end to end: `start` (bound capture), the actor \
runtime claiming, renewing and running fenced batches, then the validation \
scan and `completed`. The repair has its one-statement form \
(`SelectAndMutate::select_and_mutate`: `WITH k AS (SELECT array_agg(id ORDER BY id) AS a \
FROM (SELECT id .. LIMIT B) AS s), u AS (UPDATE .. WHERE id = ANY((SELECT a FROM k)::bigint[])) \
SELECT a[1], a[cardinality(a)], cardinality(a) FROM k`), so a batch is ONE round trip: the fenced \
checkpoint advance + COMMIT, the next batch's BEGIN + SET LOCAL timeouts, \
and the next batch's statement, pipelined (the claim keeps that open \
transaction, so no pool checkout either). The repair overlaps commits \
(`Repair::overlap_commits`): the claim holds a second connection, and each \
batch's statement runs there while the previous batch's fence and COMMIT run \
on the first, so the commit's WAL flush is off the critical path.\n\
- `engine-sql`: `engine` with the repair declared as a `SqlRepair` \
(`SqlRepair::new(id, \"items\").key(\"id\").set(..).validate_where(..)`), which writes \
the same one-statement batch; `engine-sql / engine` is the cost of declaring instead of \
hand-writing.\n\
- `engine-journal`: `engine-sql` with the repair's journal on \
(`.journal([\"email_norm\", \"touched\"])`, the columns its SET list writes): the one \
statement also reads the selected rows' before-images with their keys, updates exactly \
those row versions, and \
inserts one `backfill_journal` entry holding the changed rows' images column-major, in the batch's transaction. \
Declared rather than hand-written, because a hand-written one-statement form \
cannot be journaled (registration refuses it; the engine journals only the \
two-statement form, around `mutate`). `engine-journal / engine` is the cost of \
the journal (plus that of declaring, which `engine-sql / engine` shows). \
After the run the bench checks that the journal holds every row once (every row changes), \
and reports the journal's bytes per row as stored and as its growth on disk, \
then vacuums the journal outside the timed part (autovacuum would otherwise \
land in the next run).\n\
- `engine-keys`: the same engine with the repair's two-statement form \
(select the keys, then update them by id): 3 round trips per batch \
(select, update, fence + COMMIT + next BEGIN), overlapping commits too.\n\
- `engine-serial`: `engine` with a repair that does not overlap commits: \
each batch's statement runs behind the previous batch's COMMIT on the same \
connection.\n\
- `engine-health`: `engine` with the process's health monitor attached at \
its defaults (every signal read once a second on a task of its own; the \
replication byte-lag limit on) and every batch asking the gate first, as \
`engine` does too: `engine-health / engine` is what throttling costs when \
nothing throttles.\n\
- `engine-p<P>`: one backfill of N rows in P partitions (split evenly over \
the key range at `start`), P runners in one process claiming, fencing and \
running a partition each, one-statement form; `engine-p1` is `engine`'s \
unpartitioned path. `engine-p-procs`: the same backfill in 2 x cores \
partitions worked by two processes (this one and a child), each with its \
own pool and runtime running half of them, until `completed` (its batch \
latencies are this process's half).\n\
- `engine-k`: K backfills over K disjoint tables of N/K rows at once, one \
process, one-statement form.\n\
- `engine-server`, `engine-server-p<P>` (P = cores) and `engine-server-k`: \
`engine`, `engine-p<P>` and `engine-k` with the repair's batches in a loop \
inside the server (`Repair::server_batch`, EX-8): each step of the runtime is \
one `CALL` of a procedure installed around the same one-statement batch, which \
commits batch after batch through the same fence for a slice of 250 ms. Their \
batch latencies are per call. Read against `plpgsql` and `plpgsql-k` \
(`engine_server_*` ratios in `--json`).\n\
- `plpgsql-k`: K `plpgsql` loops over the same K tables at once, one \
connection each: how far the server itself scales with K writers on this \
machine. Read `engine xK / (K x engine)` against \
`plpgsql xK / (K x plpgsql)`.\n\n\
rows/s = rows / wall time of the whole run (for the engine including start, \
claim and validation). rows/s in batches = rows / the sum of the batch \
latencies: the batch path alone (not shown for the K runners, whose batches overlap). Batch latency: client and engine from BEGIN to COMMIT \
returned (engine: the whole `step`, from the select to the commit message's \
reply); plpgsql by the server's clock \
per loop iteration. CPU busy = the share of all the machine's cores that \
were busy over the timed part of the run (`/proc/stat`: PostgreSQL, this \
process and anything else); near 100% the run is bound by the machine's \
CPUs, and K runs at once cannot scale past what is left. After every run \
every row must have `email_norm = lower(email)` and `touched = 1`, and \
`engine-journal` must have journaled every row.\n";

#[cfg(test)]
mod tests {
    use super::super::stats::Timing;
    use super::*;

    /// Ratios pair runs of the same repetition; the medians of the ratio
    /// table and the per-repetition range come from the same runs.
    #[test]
    fn emb04_ratio_ranges_pair_runs_of_one_repetition() {
        // rows / seconds = rows/s: engine 100 then 80, plpgsql 200 then 100.
        let run = |runner, rep, seconds| {
            let timing = Timing {
                seconds,
                cpu_busy: None,
                cost: Default::default(),
            };
            RunResult::new(runner, 100, 1000, rep, timing, &mut [], true)
        };
        let report = Report {
            cores: 2,
            pg_version: String::new(),
            durability: String::new(),
            rows: 1000,
            reps: 2,
            k: 2,
            partitions: vec![2],
            runs: vec![
                run("engine", 1, 10.0),
                run("plpgsql", 1, 5.0),
                run("engine", 2, 12.5),
                run("plpgsql", 2, 10.0),
                run("engine-k", 1, 10.0),
            ],
            takeover: None,
            rss: None,
            admin_list: None,
            adaptive: None,
            fleet: None,
        };
        assert_eq!(
            report.rep_range("engine", "plpgsql", 1.0, 100),
            Some((0.5, 0.8))
        );
        // Medians: engine 90, plpgsql 150.
        assert_eq!(report.ratios(100)[0], Some(0.6));
        // Only repetition 1 has both: 100 / (2 x 100).
        assert_eq!(
            report.rep_range("engine-k", "engine", 2.0, 100),
            Some((0.5, 0.5))
        );
        assert_eq!(report.rep_range("client", "engine", 1.0, 100), None);
        assert!(report.markdown().contains("| 100 | 0.60 (0.50-0.80) |"));
    }

    /// The journaled run's ratio is keyed by batch size like the others,
    /// and its paragraph reads the journal's bytes per row off the run.
    #[test]
    fn undo01_journal_ratio_and_bytes_per_row() {
        let timing = |seconds| Timing {
            seconds,
            cpu_busy: None,
            cost: Default::default(),
        };
        let journal = super::super::stats::JournalUse {
            rows: 1000,
            row_bytes: 200_000,
            disk_bytes: 276_000,
        };
        let report = Report {
            cores: 2,
            pg_version: String::new(),
            durability: String::new(),
            rows: 1000,
            reps: 1,
            k: 2,
            partitions: vec![2],
            runs: vec![
                RunResult::new("engine", 100, 1000, 1, timing(10.0), &mut [], true),
                RunResult::new("engine-journal", 100, 1000, 1, timing(12.5), &mut [], true)
                    .with_journal(journal),
            ],
            takeover: None,
            rss: None,
            admin_list: None,
            adaptive: None,
            fleet: None,
        };
        let json = report.json();
        assert_eq!(json["ratios"]["engine_journal_vs_engine"]["100"], 0.8);
        assert_eq!(
            json["ratio_ranges_within_reps"]["engine_journal_vs_engine"]["100"],
            serde_json::json!([0.8, 0.8])
        );
        assert_eq!(json["runs"][1]["journal"]["disk_bytes_per_row"], 276.0);
        let text = report.markdown();
        assert!(
            text.contains("engine-journal / engine = 0.800 (target >= 0.7); 200.0 bytes"),
            "{text}"
        );
        assert!(text.contains("276.0 bytes per row"), "{text}");
    }
}
