//! `backfill ctl dry-run` (DRY-1..DRY-4): the request's path and the
//! report as text: each batch, the forecast for the remaining range, the
//! error of a batch that failed, and the sample of changed rows when the
//! token may see one. Unknowns print as `unknown`, never as zero.

use backfill::engine::{DryRunReport, Forecast};
use serde_json::Value;

/// The dry run's path with the options given; the server's defaults apply
/// to the others.
pub(super) fn path(id: &str, batches: Option<u32>, sample: Option<u32>) -> String {
    let query: Vec<String> = [("batches", batches), ("sample", sample)]
        .into_iter()
        .filter_map(|(name, value)| Some(format!("{name}={}", value?)))
        .collect();
    if query.is_empty() {
        format!("/admin/backfills/{id}/dry-run")
    } else {
        format!("/admin/backfills/{id}/dry-run?{}", query.join("&"))
    }
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
            b.partition.map_or_else(|| "-".into(), |p| p.to_string()),
            b.batch_size,
            b.keys,
            known(b.rows_changed),
            b.duration_ms,
            known(b.wal_bytes),
            key(&b.to),
        );
    }
    out += "lock waits: unknown (PostgreSQL does not report them per statement)\n";
    out += &format!(
        "rows locked at once: at most one batch's ({} keys); each batch was rolled back, \
         its locks released, once measured\n",
        r.max_keys_locked
    );
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

#[cfg(test)]
mod tests {
    use super::path;

    /// DRY-1: the client sends only the options given, so the server's
    /// defaults apply to the others.
    #[test]
    fn dry01_the_path_carries_only_the_options_given() {
        assert_eq!(path("a.v1", None, None), "/admin/backfills/a.v1/dry-run");
        assert_eq!(
            path("a.v1", Some(2), None),
            "/admin/backfills/a.v1/dry-run?batches=2"
        );
        assert_eq!(
            path("a.v1", Some(2), Some(0)),
            "/admin/backfills/a.v1/dry-run?batches=2&sample=0"
        );
    }
}
