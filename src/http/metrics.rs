//! `GET /metrics`: Prometheus text exposition (OBS-1, OBS-2).
//!
//! Lifecycle counts and the gate come from PostgreSQL at scrape time; the
//! runtime counters from this process. Labels use bounded vocabularies only
//! (states, gate modes): never stable IDs, keys, rows or actors, which
//! belong to the authorized admin views. A failed read is exported as
//! unknown (`backfill_state_known 0`), never as zeros.

use crate::admin::flood::Reason;
use crate::admin::Admin;
use crate::lifecycle::State;
use crate::readiness::Readiness;
use crate::store::{self, Pool};
use actix_web::{web, HttpResponse};
use backfill_actors::RuntimeMetrics;
use std::fmt::Write;
use std::sync::Arc;

/// What the endpoint reads.
#[derive(Clone)]
pub struct MetricsSource {
    pub pool: Pool,
    /// The engine, for its batch-path counters.
    pub engine: crate::engine::Engine,
    pub readiness: Readiness,
    pub runtime: Arc<RuntimeMetrics>,
}

async fn metrics(
    source: web::Data<MetricsSource>,
    admin: Option<web::Data<Admin>>,
) -> HttpResponse {
    let mut out = String::with_capacity(4096);
    let counts = match source.pool.get().await {
        Ok(mut conn) => store::backfill_count_by_state(&mut conn).await.ok(),
        Err(_) => None,
    };
    let _ = writeln!(
        out,
        "# HELP backfill_state_known Whether lifecycle counts could be read from PostgreSQL.\n# TYPE backfill_state_known gauge\nbackfill_state_known {}",
        u8::from(counts.is_some())
    );
    if let Some(counts) = counts {
        let _ = writeln!(
            out,
            "# HELP backfill_backfills Backfills per lifecycle state.\n# TYPE backfill_backfills gauge"
        );
        for state in State::ALL {
            let n = counts
                .iter()
                .find(|(s, _)| *s == state)
                .map(|(_, n)| *n)
                .unwrap_or(0);
            let _ = writeln!(out, "backfill_backfills{{state=\"{state}\"}} {n}");
        }
    }
    let report = source.readiness.evaluate().await;
    let _ = writeln!(
        out,
        "# HELP backfill_gate_open Readiness gate of required backfills (1 open, 0 closed; absent when unknown).\n# TYPE backfill_gate_open gauge"
    );
    if let Some(open) = report.backfill_gate.open {
        let _ = writeln!(
            out,
            "backfill_gate_open{{mode=\"{}\"}} {}",
            report.backfill_gate.mode,
            u8::from(open)
        );
    }
    let _ = writeln!(
        out,
        "# HELP backfill_gate_gating Required backfills keeping the gate closed (absent when unknown).\n# TYPE backfill_gate_gating gauge"
    );
    // Unknown is not zero (OBS-2): when the gate could not be read, no
    // count is exported, as for `backfill_gate_open`.
    if report.backfill_gate.open.is_some() {
        let _ = writeln!(
            out,
            "backfill_gate_gating {}",
            report.backfill_gate.gating.len()
        );
    }
    for (name, help, value) in source.runtime.snapshot() {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    }
    let _ = writeln!(
        out,
        "# HELP backfill_overlap_serial_batches_total Batches of repairs that overlap commits which ran serially because the pool could not spare a second connection.\n# TYPE backfill_overlap_serial_batches_total counter\nbackfill_overlap_serial_batches_total {}",
        source.engine.serial_fallbacks()
    );
    // API-3: admin requests refused for lack of credentials, by reason
    // (`unauthorized` answered 401, `throttled` answered 429); the audit
    // holds the same counts per source and window.
    if let Some(admin) = admin {
        let _ = writeln!(
            out,
            "# HELP backfill_admin_rejected_total Admin requests refused without valid credentials.\n# TYPE backfill_admin_rejected_total counter"
        );
        for reason in Reason::ALL {
            let _ = writeln!(
                out,
                "backfill_admin_rejected_total{{reason=\"{}\"}} {}",
                reason.as_str(),
                admin.flood().counted(reason)
            );
        }
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4")
        .body(out)
}

/// Mount `GET /metrics`.
pub fn configure(cfg: &mut web::ServiceConfig, source: web::Data<MetricsSource>) {
    cfg.app_data(source)
        .route("/metrics", web::get().to(metrics));
}
