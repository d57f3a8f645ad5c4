//! One backfill in detail for `show`: every field of the view on a line
//! of its own, and the settings in the one-line form `set` also prints.

use crate::screen;
use backfill::admin::BackfillView;
use backfill::throttle::settings::Field;
use chrono::{DateTime, Utc};
use serde_json::Value;

/// The backfill as `name value` lines, the names in one column.
pub(super) fn detail(b: &BackfillView) -> String {
    let mut lines = vec![
        ("id", b.id.clone()),
        (
            "description",
            b.description.clone().unwrap_or_else(|| "-".into()),
        ),
        ("state", b.state.to_string()),
        ("key type", b.key_type.clone().unwrap_or_else(|| "-".into())),
        ("bound", or_none(&b.bound)),
        ("checkpoint", or_none(&b.checkpoint)),
        ("progress", bar(b.progress.fraction)),
        (
            "rows",
            format!(
                "{} of {}",
                b.progress.rows_done,
                b.progress
                    .total_rows
                    .map(|t| t.to_string())
                    .unwrap_or_else(|| "unknown".into())
            ),
        ),
        ("rate", rate_line(b)),
        ("owner", owner_line(b)),
        ("settings", settings_line(&b.settings)),
        (
            "batch size",
            b.batch_size
                .map_or_else(|| "unknown".to_string(), |n| n.to_string()),
        ),
        ("generation", b.generation.to_string()),
        ("attempts", b.attempts.to_string()),
        ("next attempt", time(&b.next_attempt_at)),
        (
            "readiness",
            format!(
                "required={} gating={}",
                b.readiness.required, b.readiness.gating
            ),
        ),
        ("registered", b.registered_at.to_rfc3339()),
        ("started", time(&b.started_at)),
        ("completed", time(&b.completed_at)),
        ("updated", b.updated_at.to_rfc3339()),
    ];
    lines.extend(conditions(b));
    lines.push(("validation", validation_line(b)));
    lines.extend(journal_lines(b));
    let own: String = lines
        .into_iter()
        .map(|(k, v)| format!("{k:<13} {v}\n"))
        .collect();
    own + &super::partitions::partition_lines(b)
}

/// The server's rate, the last minute and the time left (OBS-5): `-`
/// unless `running`, `unknown` until the live claims have a rate.
fn rate_line(b: &BackfillView) -> String {
    let running = b.state == backfill::State::Running;
    if !running {
        return "-".into();
    }
    let (rate, eta) = super::table::rate_and_eta(b, running);
    let rate = match b.progress.rows_per_second {
        Some(_) => format!("{rate} rows/s"),
        None => "unknown (too few recent samples of a live claim)".into(),
    };
    format!(
        "{rate}, last minute {}, ETA {eta}",
        super::table::sparkline(&b.progress.sparkline)
    )
}

/// A key as JSON, or `none`.
fn or_none(v: &Option<Value>) -> String {
    v.as_ref()
        .map(|v| v.to_string())
        .unwrap_or_else(|| "none".into())
}

/// A time in RFC 3339, or `-`.
fn time(t: &Option<DateTime<Utc>>) -> String {
    t.map(|t| t.to_rfc3339()).unwrap_or_else(|| "-".into())
}

/// Who holds the claim and until when, or `none`.
fn owner_line(b: &BackfillView) -> String {
    match b.owner.disposition.as_str() {
        "none" => "none".to_string(),
        d => format!(
            "{d}: {} until {}",
            b.owner.worker.as_deref().unwrap_or("?"),
            time(&b.owner.until)
        ),
    }
}

/// The lines only some backfills have: the repairs it waits for (FLT-4),
/// the runner's throttle condition, why the automatic start of a
/// `pending` one failed (EMB-8) and the last recorded error.
fn conditions(b: &BackfillView) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    if !b.waiting_for.is_empty() {
        lines.push((
            "waiting for",
            format!("{} to complete", b.waiting_for.join(", ")),
        ));
    }
    if let Some(t) = &b.throttle {
        lines.push((
            "throttled",
            format!("{} (since {})", screen::one_line(&t.text), time(&t.since)),
        ));
    }
    if let Some(e) = &b.start_failed {
        lines.push((
            "start failed",
            format!(
                "{} {} ({})",
                e.kind.as_deref().unwrap_or("-"),
                screen::one_line(&e.message),
                time(&e.at)
            ),
        ));
    }
    if let Some(e) = &b.last_error {
        lines.push((
            "last error",
            format!(
                "{} {} ({})",
                e.kind.as_deref().unwrap_or("-"),
                e.message,
                time(&e.at)
            ),
        ));
    }
    if let Some(keys) = b.blocking_keys.as_ref().filter(|k| !k.is_empty()) {
        let keys: Vec<String> = keys.iter().map(Value::to_string).collect();
        lines.push((
            "blocking keys",
            screen::one_line(&format!(
                "{} (a sample; fix these rows, then retry)",
                keys.join(", ")
            )),
        ));
    }
    lines
}

/// What only journaled backfills and undos have (UNDO-2, UNDO-4): the
/// backfill an undo takes back, a backfill's undo, and the journal.
fn journal_lines(b: &BackfillView) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    if let Some(original) = &b.undo_of {
        lines.push(("undo of", original.clone()));
    }
    if let Some(undo) = &b.undo {
        lines.push(("undo", format!("{} ({})", undo.id, undo.state)));
    } else if b.journaled {
        lines.push((
            "undo",
            format!("none (`backfill ctl undo {}` starts one)", b.id),
        ));
    }
    if let Some(j) = &b.journal {
        lines.push((
            "journal",
            format!(
                "{} rows, {} bytes; restored {}, conflicts {}",
                j.rows, j.bytes, j.restored, j.conflicts
            ),
        ));
        if !j.conflict_keys.is_empty() {
            let keys: Vec<String> = j.conflict_keys.iter().map(Value::to_string).collect();
            lines.push(("conflict keys", screen::one_line(&keys.join(" "))));
        }
    }
    lines
}

/// The last validation's outcome, detail and time, or `none yet`.
fn validation_line(b: &BackfillView) -> String {
    match &b.validation {
        Some(v) => format!(
            "{}{} at {}",
            v.outcome,
            v.detail
                .as_deref()
                .map(|d| format!(": {d}"))
                .unwrap_or_default(),
            time(&v.at)
        ),
        None => "none yet".into(),
    }
}

/// The progress bar with its percentage, or a bar that says unknown
/// (ADM-3).
fn bar(fraction: Option<f64>) -> String {
    match fraction {
        Some(f) => {
            let f = f.clamp(0.0, 1.0);
            let filled = (f * 20.0).round() as usize;
            format!(
                "[{}{}] {:>5.1}%",
                "#".repeat(filled),
                "-".repeat(20 - filled),
                f * 100.0
            )
        }
        None => format!("[{:^20}] {:>6}", "unknown", "?"),
    }
}

/// The settings of a view in one line: `batch_size=500 pause_ms=250`, in
/// the order the settings are listed, or `none` when none is set.
pub(super) fn settings_line(settings: &Value) -> String {
    let Some(set) = settings.as_object().filter(|s| !s.is_empty()) else {
        return "none (defaults apply)".into();
    };
    let mut names: Vec<&String> = set.keys().collect();
    // Known fields in their order, any other (a newer server's) after them.
    names.sort_by_key(|n| Field::parse(n).map_or(usize::MAX, |f| f as usize));
    names
        .into_iter()
        .map(|n| format!("{n}={}", set[n]))
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::super::sample::throttled;
    use super::*;
    use serde_json::json;

    #[test]
    fn thr04_settings_line_lists_fields_in_order() {
        assert_eq!(
            settings_line(&json!({"pause_ms": 250, "batch_size": 500, "later": 1})),
            "batch_size=500 pause_ms=250 later=1"
        );
        assert_eq!(settings_line(&json!({})), "none (defaults apply)");
        let b = throttled();
        assert!(detail(&b).contains("throttled     replication lag 47.7 MiB > 15.3 MiB (since"));
    }

    /// EMB-8: `show` names why the automatic start of a pending backfill
    /// failed, on a line of its own.
    #[test]
    fn emb08_show_names_a_failed_automatic_start() {
        let mut b = throttled();
        b.state = backfill::State::Pending;
        b.throttle = None;
        assert!(!detail(&b).contains("start failed"));
        b.start_failed = Some(backfill::admin::Diagnostic {
            kind: Some("blocked".into()),
            message: "missing relation; the automatic start tries again within 30 s".into(),
            at: None,
        });
        assert!(
            detail(&b).contains(
                "start failed  blocked missing relation; the automatic start tries again \
                 within 30 s (-)"
            ),
            "{}",
            detail(&b)
        );
    }
}
