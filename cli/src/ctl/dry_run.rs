//! `backfill ctl dry-run`: run a backfill's next batches and roll them
//! back (DRY-1..DRY-4), and print the report: each batch, the forecast
//! for the remaining range, the error of a batch that failed, and the
//! sample of changed rows when the token may see one. Unknowns print as
//! `unknown`, never as zero.

use super::client::{decode, Client};
use super::error::CtlError;
use backfill::engine::{DryRunReport, Forecast};
use serde_json::Value;

/// `dry-run`: POST the dry run and print its report.
pub(super) async fn dry_run(
    client: &Client,
    id: &str,
    batches: Option<u32>,
    sample: Option<u32>,
    json: bool,
) -> Result<(), CtlError> {
    let mut query = Vec::new();
    if let Some(k) = batches {
        query.push(format!("batches={k}"));
    }
    if let Some(n) = sample {
        query.push(format!("sample={n}"));
    }
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{}", query.join("&"))
    };
    let body = client
        .post(&format!("/admin/backfills/{id}/dry-run{query}"))
        .await?;
    if json {
        super::dispatch::print_json(&body);
    } else {
        print!("{}", report(&decode(body)?));
    }
    Ok(())
}

fn known<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "unknown".into(), |v| v.to_string())
}

fn key(value: &Option<Value>) -> String {
    value.as_ref().map_or_else(|| "-".into(), Value::to_string)
}

/// The report as text.
pub(super) fn report(r: &DryRunReport) -> String {
    let mut out = format!(
        "dry run {} ({}, generation {}): {} of {} batches ran, rolled back\n",
        r.backfill_id,
        r.state,
        r.generation,
        r.batches.len(),
        r.batches_asked
    );
    let from = r.from.as_ref().map_or("the start".into(), Value::to_string);
    let captured = if r.bound_captured {
        " (as start would capture it now)"
    } else {
        ""
    };
    out += &format!("range: from {from} to bound {}{captured}\n", key(&r.bound));
    out += &format!(
        "{:<6} {:<9} {:>6} {:>8} {:>10} {:>12} {:>10} TO\n",
        "BATCH", "PARTITION", "SIZE", "KEYS", "CHANGED", "TIME_MS", "WAL_BYTES"
    );
    for b in &r.batches {
        out += &format!(
            "{:<6} {:<9} {:>6} {:>8} {:>10} {:>12.3} {:>10} {}\n",
            b.batch,
            known(b.partition),
            b.batch_size,
            b.keys,
            known(b.rows_changed),
            b.duration_ms,
            known(b.wal_bytes),
            key(&b.to),
        );
    }
    out += "lock waits: unknown (PostgreSQL does not report them per statement)\n";
    if let Some(e) = &r.error {
        out += &format!("batch {} failed ({}): {}\n", e.batch, e.kind, e.message);
    }
    if r.reached_bound {
        out += "the batches reached the bound\n";
    }
    out += &forecast(&r.forecast);
    match (&r.sample, &r.sample_note) {
        (Some(rows), _) => {
            out += &format!("sample: {} changed rows\n", rows.len());
            for row in rows {
                out += &format!("  {}: {} -> {}\n", row.key, row.before, row.after);
            }
        }
        (None, Some(note)) => out += &format!("sample: {note}\n"),
        (None, None) => {}
    }
    out
}

fn forecast(f: &Forecast) -> String {
    let rows = match f.rows {
        Some(rows) => format!("{rows} rows ({})", f.rows_basis),
        None => "unknown rows".into(),
    };
    format!(
        "forecast for the remaining range: {rows}, {} batches, {} ms, {} bytes of WAL\n",
        known(f.batches),
        known(f.duration_ms.map(|ms| format!("{ms:.0}"))),
        known(f.wal_bytes),
    )
}
