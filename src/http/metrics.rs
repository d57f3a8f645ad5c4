//! `GET /metrics`: Prometheus text exposition, format 0.0.4 (OBS-1, OBS-2).
//!
//! Every scrape builds one registry: the runtime's counters and duration
//! histograms (`RuntimeMetrics::register`, live handles), then the families
//! read at scrape time (lifecycle counts and the gate from PostgreSQL, the
//! engine's and the admin gate's counters from this process), and renders
//! it with `prometheus::TextEncoder`. One registry means one sorted
//! exposition in which a name used twice is an error, not a duplicate
//! family; every family carries HELP and TYPE, and counters are named
//! `*_total` on every line, which is what `promtool check metrics` reads
//! (CI runs it against a live server in `.ci/api-check`). The
//! OpenMetrics encoder of the `prometheus-client` crate names a counter's
//! HELP and TYPE without `_total`, which that check reports as a family
//! without help for every counter.
//!
//! Labels use bounded vocabularies only (states, gate modes, outcomes,
//! rejection reasons): never stable IDs, keys, rows or actors, which belong
//! to the authorized admin views. A failed read is exported as unknown
//! (`backfill_state_known 0`, no gate samples), never as zeros.
//!
//! A gauge read at scrape time goes into `scrape_families`; one the runtime
//! keeps goes into `RuntimeMetrics` and arrives here through `register`.

use crate::admin::flood::Reason;
use crate::admin::Admin;
use crate::lifecycle::State;
use crate::readiness::{GateReport, Readiness};
use crate::store::{self, Pool};
use crate::throttle::health::{Reading, Signal, Snapshot};
use actix_web::{web, HttpRequest, HttpResponse};
use backfill_actors::RuntimeMetrics;
use prometheus::core::Collector;
use prometheus::{
    GaugeVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};
use std::sync::Arc;

/// What the endpoint reads.
#[derive(Clone)]
pub struct MetricsSource {
    /// The pool a scrape reads the counts per state and partition from.
    pub pool: Pool,
    /// The engine, for its batch-path counters.
    pub engine: crate::engine::Engine,
    /// The readiness gate whose state `/metrics` reports.
    pub readiness: Readiness,
    /// The actor runtime's counters (claims, renewals, runners).
    pub runtime: Arc<RuntimeMetrics>,
}

/// What one scrape read, before any of it is rendered.
struct Scrape {
    /// Backfills per state; `None` when PostgreSQL could not be read.
    counts: Option<Vec<(State, i64)>>,
    /// Each running backfill's rows done and whether it is throttled;
    /// `None` when PostgreSQL could not be read.
    running: Option<Vec<store::RunningProgress>>,
    /// Partitions per status; `None` when PostgreSQL could not be read.
    partitions: Option<[(&'static str, i64); 3]>,
    /// The journal's planner entry estimate and its bytes on disk (UNDO-4);
    /// `None` when they could not be read.
    journal: Option<(i64, i64)>,
    /// Queued notifications per status; `None` when PostgreSQL could not
    /// be read.
    notifications: Option<[(&'static str, i64); 3]>,
    gate: GateReport,
    serial_fallbacks: u64,
    /// Refused admin requests per reason; `None` without an admin boundary.
    rejected: Option<Vec<(Reason, u64)>>,
    /// The health monitor's latest snapshot; `None` without a monitor or
    /// before its first reading.
    health: Option<Arc<Snapshot>>,
}

async fn metrics(
    req: HttpRequest,
    source: web::Data<MetricsSource>,
    admin: Option<web::Data<Admin>>,
) -> HttpResponse {
    if let Some(refused) = super::host_allowed::refusal(&req, "metrics").await {
        return refused;
    }
    let (counts, partitions, journal, notifications, running) = match source.pool.get().await {
        Ok(mut conn) => (
            store::backfill_count_by_state(&mut conn).await.ok(),
            store::partition_count_by_status(&mut conn).await.ok(),
            store::journal_totals(&mut conn).await.ok(),
            store::outbox_count_by_status(&mut conn).await.ok(),
            store::backfill_running_progress(&mut conn).await.ok(),
        ),
        Err(_) => (None, None, None, None, None),
    };
    let report = source.readiness.evaluate().await;
    let scrape = Scrape {
        counts,
        running,
        partitions,
        journal,
        notifications,
        gate: report.backfill_gate,
        serial_fallbacks: source.engine.serial_fallbacks(),
        rejected: admin.map(|admin| {
            Reason::ALL
                .into_iter()
                .map(|reason| (reason, admin.flood().counted(reason)))
                .collect()
        }),
        // A scrape reads the signals afresh when the monitor rested (no
        // batch asked for them lately), so no gauge shows an old reading.
        health: match source.engine.health() {
            Some(monitor) => Some(monitor.fresh(monitor.config().interval).await),
            None => None,
        },
    };
    let encoder = TextEncoder::new();
    match exposition(&source.runtime, scrape, &encoder) {
        Ok(body) => HttpResponse::Ok()
            .content_type(prometheus::TEXT_FORMAT)
            .body(body),
        // Only a metric defined twice or with an invalid name gets here: a
        // bug, reported without detail rather than as a partial exposition
        // a scraper would read as complete.
        Err(error) => {
            tracing::error!(event = "metrics_unrenderable", error = %error);
            HttpResponse::InternalServerError()
                .content_type("text/plain; charset=utf-8")
                .body("metrics could not be rendered\n")
        }
    }
}

/// The whole exposition of one scrape.
fn exposition(
    runtime: &RuntimeMetrics,
    scrape: Scrape,
    encoder: &TextEncoder,
) -> prometheus::Result<String> {
    let registry = Registry::new();
    runtime.register(&registry)?;
    for family in scrape_families(scrape)? {
        registry.register(family)?;
    }
    encoder.encode_to_string(&registry.gather())
}

/// The families read at scrape time, with their values set.
fn scrape_families(scrape: Scrape) -> prometheus::Result<Vec<Box<dyn Collector>>> {
    let mut out = lifecycle_families(scrape.counts.as_deref())?;
    if let Some(running) = &scrape.running {
        out.extend(running_families(running)?);
    }
    // PAR-5: partitions of every partitioned backfill by status (bounded
    // labels, OBS-2); absent when they could not be read.
    if let Some(partitions) = scrape.partitions {
        out.push(labelled_gauges(
            "backfill_partitions",
            "Partitions of partitioned backfills by status: ended, claimed, waiting.",
            "status",
            &partitions,
        )?);
    }
    // NTF-2: the outbox by status; a dead notification stays counted
    // until the retention prunes it.
    if let Some(notifications) = scrape.notifications {
        out.push(labelled_gauges(
            "backfill_notifications",
            "Queued webhook notifications by status: pending, delivered, dead.",
            "status",
            &notifications,
        )?);
    }
    // UNDO-4: the before-image journal of every backfill together (an ID
    // is never a label, OBS-2; the admin view has it per backfill). The
    // entry count (one entry per journaled batch) is the planner's
    // estimate, absent until the table was first analyzed, so a scrape
    // never scans the journal.
    if let Some((entries, bytes)) = scrape.journal {
        if entries >= 0 {
            let estimate = IntGauge::new(
                "backfill_journal_entries_estimate",
                "Entries (one per journaled batch) of the before-image journal of all backfills (planner estimate).",
            )?;
            estimate.set(entries);
            out.push(Box::new(estimate));
        }
        let size = IntGauge::new(
            "backfill_journal_bytes",
            "Bytes on disk of the before-image journal of all backfills, indexes included.",
        )?;
        size.set(bytes);
        out.push(Box::new(size));
    }
    out.extend(gate_families(&scrape.gate)?);
    let serial = IntCounter::new(
        "backfill_overlap_serial_batches_total",
        "Batches of repairs that overlap commits which ran serially because the pool could not spare a second connection.",
    )?;
    serial.inc_by(scrape.serial_fallbacks);
    out.push(Box::new(serial));
    if let Some(snapshot) = &scrape.health {
        out.extend(health_families(snapshot)?);
    }
    // API-3: admin requests refused for lack of credentials, by reason
    // (`unauthorized` answered 401, `throttled` answered 429); the audit
    // holds the same counts per source and window.
    if let Some(rejected) = scrape.rejected {
        let family = IntCounterVec::new(
            Opts::new(
                "backfill_admin_rejected_total",
                "Admin requests refused without valid credentials.",
            ),
            &["reason"],
        )?;
        for (reason, n) in rejected {
            family.with_label_values(&[reason.as_str()]).inc_by(n);
        }
        out.push(Box::new(family));
    }
    Ok(out)
}

/// Whether lifecycle counts could be read and, when they could, the
/// backfills per state: every state, zero included, since an absent
/// series would read as unknown rather than as none.
fn lifecycle_families(
    counts: Option<&[(State, i64)]>,
) -> prometheus::Result<Vec<Box<dyn Collector>>> {
    let known = IntGauge::new(
        "backfill_state_known",
        "Whether lifecycle counts could be read from PostgreSQL.",
    )?;
    known.set(i64::from(counts.is_some()));
    let mut out: Vec<Box<dyn Collector>> = vec![Box::new(known)];
    if let Some(counts) = counts {
        let per_state: Vec<(&str, i64)> = State::ALL
            .iter()
            .map(|state| {
                let n = counts
                    .iter()
                    .find(|(s, _)| s == state)
                    .map_or(0, |(_, n)| *n);
                (state.as_str(), n)
            })
            .collect();
        out.push(labelled_gauges(
            "backfill_backfills",
            "Backfills per lifecycle state.",
            "state",
            &per_state,
        )?);
    }
    Ok(out)
}

/// Each running backfill's rows done and whether a throttle holds it
/// back, labelled by its ID (OBS-3), so a stall alert can see one backfill
/// that stopped while another progresses. The values come from PostgreSQL,
/// so every process serving the database exports the same ones and a
/// restart loses nothing; a backfill that leaves `running` leaves both.
/// Bounded: backfills are finite, and at most 1000 are read.
fn running_families(
    running: &[store::RunningProgress],
) -> prometheus::Result<Vec<Box<dyn Collector>>> {
    let rows = IntGaugeVec::new(
        Opts::new(
            "backfill_running_rows_done",
            "Rows a running backfill's committed batches changed so far, per backfill.",
        ),
        &["backfill"],
    )?;
    let throttled = IntGaugeVec::new(
        Opts::new(
            "backfill_running_throttled",
            "Whether a throttle condition holds a running backfill back now (1) or not (0).",
        ),
        &["backfill"],
    )?;
    // THR-6: a paced backfill's latency reading beside its bound, so a
    // dashboard draws both on one time axis; absent while no budget paces
    // it (or its reading is unknown).
    let latency = GaugeVec::new(
        Opts::new(
            "backfill_latency_budget_seconds",
            "A latency budget's reading and bound while it paces a running backfill, in seconds.",
        ),
        &["backfill", "kind"],
    )?;
    for r in running {
        rows.with_label_values(&[r.id.as_str()]).set(r.rows_done);
        throttled
            .with_label_values(&[r.id.as_str()])
            .set(i64::from(r.throttled));
        for (kind, value) in [
            ("reading", r.latency_seconds),
            ("bound", r.latency_bound_seconds),
        ] {
            if let Some(v) = value {
                latency.with_label_values(&[r.id.as_str(), kind]).set(v);
            }
        }
    }
    Ok(vec![Box::new(rows), Box::new(throttled), Box::new(latency)])
}

/// One gauge family with one bounded label and a value per label value.
fn labelled_gauges(
    name: &str,
    help: &str,
    label: &str,
    values: &[(&str, i64)],
) -> prometheus::Result<Box<dyn Collector>> {
    let family = IntGaugeVec::new(Opts::new(name, help), &[label])?;
    for (value, n) in values {
        family.with_label_values(&[value]).set(*n);
    }
    Ok(Box::new(family))
}

/// The readiness gate's state and how many required backfills keep it
/// closed. Unknown is not zero (OBS-2): when the gate could not be read,
/// neither is exported (a `backfill_gate_gating 0` would read as "nothing
/// keeps it closed").
fn gate_families(gate: &GateReport) -> prometheus::Result<Vec<Box<dyn Collector>>> {
    let Some(open) = gate.open else {
        return Ok(Vec::new());
    };
    let gate_open = IntGaugeVec::new(
        Opts::new(
            "backfill_gate_open",
            "Readiness gate of required backfills (1 open, 0 closed; absent when unknown).",
        ),
        &["mode"],
    )?;
    gate_open
        .with_label_values(&[gate.mode])
        .set(i64::from(open));
    let gating = IntGauge::new(
        "backfill_gate_gating",
        "Required backfills keeping the gate closed (absent when unknown).",
    )?;
    gating.set(i64::try_from(gate.gating.len()).unwrap_or(i64::MAX));
    Ok(vec![Box::new(gate_open), Box::new(gating)])
}

/// The health signals throttling reads (THR-2), one gauge per signal in
/// its base unit, present only while the signal is known; and
/// `backfill_health_signal_known` per signal, so an unreadable signal
/// reads as unknown, never as a healthy zero.
fn health_families(snapshot: &Snapshot) -> prometheus::Result<Vec<Box<dyn Collector>>> {
    let mut out: Vec<Box<dyn Collector>> = Vec::new();
    let known = IntGaugeVec::new(
        Opts::new(
            "backfill_health_signal_known",
            "Whether the health monitor could read the signal at its last reading (1) or not (0).",
        ),
        &["signal"],
    )?;
    let values: [(Signal, &str, &str, Option<f64>); 6] = [
        (
            Signal::ReplicationLagBytes,
            "backfill_health_replication_lag_bytes",
            "WAL bytes the standby furthest behind has yet to replay (absent without a standby or when unknown).",
            snapshot.lag_bytes.known().copied().flatten().map(|b| b as f64),
        ),
        (
            Signal::ReplicationLag,
            "backfill_health_replication_lag_seconds",
            "Replay lag in time of the standby furthest behind (absent without a standby or when unknown).",
            snapshot.lag.known().copied().flatten().map(|d| d.as_secs_f64()),
        ),
        (
            Signal::WalRate,
            "backfill_health_wal_bytes_per_second",
            "WAL the server generated per second between the last two readings (absent when unknown).",
            snapshot.wal_bytes_per_s.known().copied().flatten().map(|b| b as f64),
        ),
        (
            Signal::LockWaiters,
            "backfill_health_lock_waiters",
            "Sessions waiting for a lock on a table a repair names (absent when unknown).",
            snapshot.lock_waiters.known().map(|t| t.values().sum::<u64>() as f64),
        ),
        (
            Signal::TransactionAge,
            "backfill_health_oldest_transaction_seconds",
            "Age of the oldest open transaction of another session (absent when unknown).",
            snapshot.xact_age.known().map(|d| d.as_secs_f64()),
        ),
        (
            Signal::Application,
            "backfill_health_application_healthy",
            "Whether the application's own check passed (1) or failed (0); absent without a check or when unknown.",
            snapshot
                .application
                .as_ref()
                .and_then(Reading::known)
                .map(|r| if r.is_ok() { 1.0 } else { 0.0 }),
        ),
    ];
    for (signal, name, help, value) in values {
        if signal == Signal::Application && snapshot.application.is_none() {
            continue;
        }
        known
            .with_label_values(&[signal.as_str()])
            .set(i64::from(snapshot.reason(signal).is_none()));
        if let Some(value) = value {
            let gauge = prometheus::Gauge::new(name, help)?;
            gauge.set(value);
            out.push(Box::new(gauge));
        }
    }
    out.push(Box::new(known));
    Ok(out)
}

/// Mount `GET /metrics`.
pub fn configure(cfg: &mut web::ServiceConfig, source: web::Data<MetricsSource>) {
    cfg.app_data(source).service(
        web::resource("/metrics")
            .wrap(super::headers::security_headers())
            .route(web::get().to(metrics)),
    );
}
