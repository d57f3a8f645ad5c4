//! `backfill ctl watch`: the table again at every refresh, rates taken
//! between refreshes, and a failed refresh shown as stale data with its
//! error, never as zero progress (ADM-3).

use super::client::{decode, list_all, Client};
use super::error::CtlError;
use super::table::table;
use crate::screen::{self, Screen, Size};
use backfill::admin::BackfillView;
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// Refresh every `interval` seconds, `count` times or until interrupted;
/// with a count, the last refresh's error is the outcome.
pub(super) async fn watch(
    client: &Client,
    id: Option<String>,
    interval: f64,
    count: Option<u64>,
    json: bool,
) -> Result<(), CtlError> {
    let tty = std::io::stdout().is_terminal();
    let mut screen = Screen::new(Vec::new());
    let mut frames = Frames { json, last: None };
    let mut refreshes = 0u64;
    loop {
        let fetched = fetch(client, id.as_deref()).await;
        // Measured every refresh: the terminal may have been resized.
        let size = (tty && !json).then(screen::size);
        let max = size.map(|s| screen::usable(s.cols));
        let (lines, last_error) = match fetched {
            Ok(items) => (frames.fresh(items, max), None),
            Err(e) => (frames.stale(&e, max), Some(e)),
        };
        show(&mut screen, size, tty, &lines);
        refreshes += 1;
        if count.is_some_and(|c| refreshes >= c) {
            return match last_error {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        actix_rt::time::sleep(Duration::from_secs_f64(interval)).await;
    }
}

/// One refresh's read: the one backfill asked for, or all of them.
async fn fetch(client: &Client, id: Option<&str>) -> Result<Vec<BackfillView>, CtlError> {
    match id {
        Some(id) => client
            .get(&format!("/admin/backfills/{id}"))
            .await
            .and_then(|v| decode::<BackfillView>(v).map(|b| vec![b])),
        None => list_all(client)
            .await
            .and_then(|items| decode::<Vec<BackfillView>>(Value::Array(items))),
    }
}

/// The frames of one watch: what it keeps from refresh to refresh.
struct Frames {
    json: bool,
    /// The last good refresh and its time, shown again when one fails.
    last: Option<(Vec<BackfillView>, DateTime<Utc>)>,
}

impl Frames {
    /// The frame of a good refresh, which a failed refresh shows again.
    fn fresh(&mut self, items: Vec<BackfillView>, max: Option<usize>) -> Vec<String> {
        let mut lines = Vec::new();
        let at = items
            .first()
            .map(|b| b.observed_at)
            .unwrap_or_else(Utc::now);
        if self.json {
            lines.push(serde_json::to_string(&items).unwrap_or_default());
        } else {
            lines.push(format!("refreshed {}", at.format("%H:%M:%S")));
            lines.extend(table(&items, None, max));
        }
        self.last = Some((items, at));
        lines
    }

    /// The frame of a failed refresh: the error and the last good data,
    /// marked stale, without rates.
    fn stale(&self, e: &CtlError, max: Option<usize>) -> Vec<String> {
        let mut lines = Vec::new();
        // ADM-3: a failed refresh is stale data, never zero progress.
        match (&self.last, self.json) {
            (_, true) => {
                lines.push(serde_json::json!({"stale": true, "error": e.to_string()}).to_string())
            }
            (Some((items, at)), false) => {
                lines.push(format!(
                    "STALE: refresh failed ({e}); showing data from {}",
                    at.format("%H:%M:%S")
                ));
                lines.extend(table(items, Some("stale"), max));
            }
            (None, false) => lines.push(format!("STALE: refresh failed ({e}); no data yet")),
        }
        lines
    }
}

/// Put a frame on stdout: redrawn in place on a terminal (`size`), else
/// printed line by line, a JSON frame on a terminal as a screen of its own.
fn show(screen: &mut Screen, size: Option<Size>, tty: bool, lines: &[String]) {
    let mut stdout = std::io::stdout().lock();
    match size {
        // A failed write to the terminal loses one frame; the next one
        // redraws everything.
        Some(size) => {
            let _ = screen.draw(&mut stdout, size, lines);
        }
        None => {
            let mut out = String::new();
            if tty {
                // JSON on a terminal: one document per screen.
                out.push_str("\x1b[2J\x1b[H");
            }
            for line in lines {
                out.push_str(line);
                out.push('\n');
            }
            let _ = stdout.write_all(out.as_bytes());
            let _ = stdout.flush();
        }
    }
}
