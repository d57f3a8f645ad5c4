//! The backfills as one table for `list` and `watch`: a row per backfill
//! with progress, the server's rate (OBS-5) and its last minute, time left
//! and the batch size in force, laid out to the terminal's width, with
//! what did not fit on a row below the table.

use crate::screen::{self, Column, Row, Table};
use backfill::admin::BackfillView;
use backfill::State;

/// The backfills as a table, laid out in `max` characters per line
/// (`None`: every column, for pipes), then the diagnostics of blocked and
/// failed rows that did not fit on their rows.
pub(super) fn table(
    items: &[BackfillView],
    marker: Option<&str>,
    max: Option<usize>,
) -> Vec<String> {
    let mut t = Table {
        columns: columns(),
        headers: true,
        indent: 0,
        rows: Vec::new(),
    };
    let mut diagnostics = Vec::new();
    for b in items {
        let (note, fill) = note_and_fill(b, marker, max.is_some());
        diagnostics.push((b.id.clone(), note));
        t.rows.push(Row {
            cells: cells(b),
            fill,
        });
    }
    let laid = t.layout(max);
    let mut lines = laid.lines;
    if let Some(max) = max {
        // Once in full below the table, bounded to a few lines.
        for ((id, diag), cut) in diagnostics.iter().zip(&laid.fill_cut) {
            if let (Some(diag), true) = (diag, cut) {
                lines.extend(screen::diagnostic(id, diag, 0, max));
            }
        }
    }
    lines
}

/// The table's columns, in the order of [`cells`].
fn columns() -> Vec<Column> {
    // Dropped highest rank first on a narrow terminal: the bar repeats the
    // percentage, validation and gating change rarely and the batch size
    // in force only with settings or load (`ctl show` has them), an ETA
    // needs the rate, and the ID, state and percentage stay.
    vec![
        Column::new("ID").shrink_to(12),
        Column::new("STATE"),
        Column::new("PROGRESS").drop(10),
        Column::new("DONE").right(),
        Column::new("ROWS").right().drop(3),
        Column::new("ROWS/S").right().drop(5),
        Column::new("TREND").drop(11),
        Column::new("ETA").right().drop(6),
        Column::new("BATCH").right().drop(7),
        Column::new("OWNER").drop(4),
        Column::new("GATING").drop(8),
        Column::new("VALIDATION").drop(9),
    ]
}

/// One backfill's cells, in the order of [`columns`].
fn cells(b: &BackfillView) -> Vec<String> {
    // Only a running backfill moves: in any other state a rate or a
    // time left would be invented, so both are "-" (not applicable,
    // which is neither zero nor unknown).
    let running = b.state == State::Running;
    let (rate, eta) = rate_and_eta(b, running);
    // The size in force, like the rate, only applies while batches run.
    let batch = match (running, b.batch_size) {
        (false, _) => "-".to_string(),
        (true, Some(n)) => n.to_string(),
        (true, None) => "unknown".into(),
    };
    let rows = match b.progress.total_rows {
        Some(t) => format!("{}/{}", b.progress.rows_done, t),
        None => format!("{}/?", b.progress.rows_done),
    };
    let (bar, percent) = bar_cells(b.progress.fraction);
    vec![
        b.id.clone(),
        b.state.to_string(),
        bar,
        percent,
        rows,
        rate,
        if running {
            sparkline(&b.progress.sparkline)
        } else {
            "-".into()
        },
        eta,
        batch,
        b.owner.disposition.clone(),
        if b.readiness.gating { "yes" } else { "no" }.into(),
        b.validation
            .as_ref()
            .map(|v| v.outcome.clone())
            .unwrap_or_else(|| "-".into()),
    ]
}

/// The server's rows per second (OBS-5) and the time left at that rate,
/// or "-" for both when the backfill is not `running`.
pub(super) fn rate_and_eta(b: &BackfillView, running: bool) -> (String, String) {
    let rate = b.progress.rows_per_second;
    let eta = match (running, rate, b.progress.total_rows) {
        (false, _, _) => "-".to_string(),
        (true, Some(r), Some(total)) if r > 0.0 => {
            let left = (total - b.progress.rows_done).max(0) as f64 / r;
            format!("{}s", left.round() as i64)
        }
        (true, _, _) => "unknown".into(),
    };
    let rate = match (running, rate) {
        (false, _) => "-".to_string(),
        (true, Some(r)) => format!("{r:.1}"),
        (true, None) => "unknown".into(),
    };
    (rate, eta)
}

/// What a row has to say beyond its cells, and what of it goes on the
/// row itself (`fits`: a terminal, which cuts the row to its width).
fn note_and_fill(
    b: &BackfillView,
    marker: Option<&str>,
    fits: bool,
) -> (Option<String>, Option<String>) {
    let diag = b
        .last_error
        .as_ref()
        .filter(|_| matches!(b.state, State::Blocked | State::Failed))
        .map(|e| screen::one_line(&e.message));
    // The note is the diagnostic of a blocked or failed row, or that its
    // runner is throttled (THR-2); a blocked or failed row holds no claim,
    // so never both. A terminal gets it in what is left of the row and,
    // when it does not fit there, below the table. A pipe gets the table
    // as it always was plus the throttled (or waiting-for, FLT-4) marker,
    // which is short and says why a running row does not move.
    let throttled = b
        .throttle
        .as_ref()
        .map(|t| format!("throttled: {}", screen::one_line(&t.text)))
        .or_else(|| {
            (!b.waiting_for.is_empty())
                .then(|| format!("waiting for: {}", b.waiting_for.join(", ")))
        });
    let note = diag.or_else(|| throttled.clone());
    let on_row = if fits { note.clone() } else { throttled };
    let fill = match (marker, on_row) {
        (Some(m), Some(n)) => Some(format!("({m}) {n}")),
        (Some(m), None) => Some(format!("({m})")),
        (None, n) => n,
    };
    (note, fill)
}

/// The last minute's rates as one block character per bucket, scaled to
/// the highest; `.` where the rate is unknown (never drawn as zero).
pub(super) fn sparkline(rates: &[Option<f64>]) -> String {
    const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let top = rates.iter().flatten().fold(0.0f64, |a, r| a.max(*r));
    if rates.is_empty() {
        return "unknown".into();
    }
    rates
        .iter()
        .map(|r| match r {
            None => '.',
            Some(_) if top <= 0.0 => BLOCKS[0],
            Some(r) => BLOCKS[((r / top) * 7.0).round().clamp(0.0, 7.0) as usize],
        })
        .collect()
}

/// The progress bar and the percentage; unknown says so (ADM-3).
fn bar_cells(fraction: Option<f64>) -> (String, String) {
    match fraction {
        Some(f) => {
            let f = f.clamp(0.0, 1.0);
            let filled = (f * 20.0).round() as usize;
            (
                format!("[{}{}]", "#".repeat(filled), "-".repeat(20 - filled)),
                format!("{:.1}%", f * 100.0),
            )
        }
        None => (format!("[{:^20}]", "unknown"), "unknown".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::super::sample::throttled;
    use super::*;

    /// THR-2 in `list`/`watch`: the throttled marker goes on the runner's
    /// row (a pipe gets it in full), and at every terminal width the table
    /// still fits with the row on one line and the marker shown, below the
    /// table when the row has no room for it. Guard: the marker as the
    /// row's note in `table` (a row fill, which `Table::layout` cuts, shown
    /// below when cut like a diagnostic).
    #[test]
    fn thr04_throttled_marker_is_on_the_row_and_fits_every_width() {
        let items = [throttled()];
        let piped = table(&items, None, None);
        assert!(
            piped[1].ends_with("  throttled: replication lag 47.7 MiB > 15.3 MiB"),
            "{piped:?}"
        );
        assert!(piped[0].contains("BATCH") && piped[1].contains(" 500 "));
        for max in [30, 40, 60, 79, 119, 199] {
            let lines = table(&items, None, Some(max));
            assert!(lines.iter().all(|l| screen::width(l) <= max), "{lines:?}");
            assert!(lines[1].starts_with("events.cont"), "one row: {lines:?}");
            // On the row, or below the table when it does not fit there.
            let text = lines[1..].join(" ");
            let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
            assert!(
                text.contains("throttled: replication lag 47.7 MiB > 15.3 MiB"),
                "{max}: {lines:?}"
            );
        }
        let wide = table(&items, None, Some(199));
        assert!(wide[1].contains("throttled: replication lag 47.7 MiB > 15.3 MiB"));
    }
}
