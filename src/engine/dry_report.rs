//! What a dry run reports (DRY-1..DRY-3) and how its figures are made
//! from what it measured: the options and their limits, the report's
//! types as the API sends them, the forecast scaled from the measured
//! batches, and the sample's values cut to their documented length.

use crate::lifecycle::State;
use crate::repair::RowCount;
use crate::store;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;

/// Batches a dry run runs when none are asked for.
pub const DRY_RUN_DEFAULT_BATCHES: u32 = 3;
/// The most batches one dry run runs: its transaction holds the row locks
/// of every batch until it rolls back.
pub const DRY_RUN_MAX_BATCHES: u32 = 20;
/// Changed rows a sample shows when none are asked for.
pub const DRY_RUN_DEFAULT_SAMPLE: u32 = 5;
/// The most changed rows one sample shows.
pub const DRY_RUN_MAX_SAMPLE: u32 = 50;
/// The longest a sample's value is shown, in characters: a longer string
/// (or the JSON text of a longer nested value) is cut there and ends in
/// `…`.
pub const SAMPLE_VALUE_MAX_CHARS: usize = 64;

/// What a dry run is asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DryRunOptions {
    /// Batches to run, 1 to [`DRY_RUN_MAX_BATCHES`].
    pub batches: u32,
    /// Changed rows to show, 0 (none) to [`DRY_RUN_MAX_SAMPLE`].
    pub sample: u32,
}

impl Default for DryRunOptions {
    fn default() -> Self {
        Self {
            batches: DRY_RUN_DEFAULT_BATCHES,
            sample: DRY_RUN_DEFAULT_SAMPLE,
        }
    }
}

impl DryRunOptions {
    /// Whether the options are within their limits; the message names the
    /// limit that is not.
    pub fn check(&self) -> Result<(), String> {
        if !(1..=DRY_RUN_MAX_BATCHES).contains(&self.batches) {
            return Err(format!(
                "batches must be between 1 and {DRY_RUN_MAX_BATCHES}"
            ));
        }
        if self.sample > DRY_RUN_MAX_SAMPLE {
            return Err(format!("sample must be between 0 and {DRY_RUN_MAX_SAMPLE}"));
        }
        Ok(())
    }
}

/// The report of one dry run. Every change it measured was rolled back.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct DryRunReport {
    /// The backfill that was dry-run.
    pub backfill_id: String,
    /// The state it ran in: `pending` or `paused` (unchanged).
    pub state: State,
    /// The generation it ran against (unchanged).
    pub generation: i64,
    /// Batches asked for.
    pub batches_asked: u32,
    /// The checkpoint it started from; `null` from the start.
    #[cfg_attr(feature = "http", schema(schema_with = crate::key::key_schema))]
    pub from: Option<Value>,
    /// The bound: the stored one, or for a `pending` backfill the one
    /// `start` would capture now (`bound_captured`); `null` when the
    /// source set is empty.
    #[cfg_attr(feature = "http", schema(schema_with = crate::key::key_schema))]
    pub bound: Option<Value>,
    /// Whether the bound was captured by this dry run (and rolled back).
    pub bound_captured: bool,
    /// The batch statement timeout each batch ran under, in ms.
    pub statement_timeout_ms: i64,
    /// The lock timeout each batch ran under, in ms.
    pub lock_timeout_ms: i64,
    /// The batches that ran, in order.
    pub batches: Vec<DryBatch>,
    /// The batch that failed, if one did: the next would not have run.
    pub error: Option<DryRunError>,
    /// Whether the batches reached the bound (nothing is left to run).
    pub reached_bound: bool,
    /// The whole remaining range under the current settings.
    pub forecast: Forecast,
    /// Changed rows with their values before and after, when asked for
    /// and allowed (`backfill:inspect`) and the repair keeps a journal.
    pub sample: Option<Vec<SampleRow>>,
    /// Why there is no sample, when there is none.
    pub sample_note: Option<String>,
    /// The most keys one batch selected: each batch is rolled back to
    /// its savepoint as soon as it is measured, which ends its row locks,
    /// so the dry run never holds more rows locked at once than this,
    /// like the real run, which commits batch by batch.
    pub max_keys_locked: u64,
    /// Always true: the dry run's transaction was rolled back.
    pub rolled_back: bool,
}

/// One batch of a dry run.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct DryBatch {
    /// 1 for the first batch.
    pub batch: u32,
    /// The partition whose range it ran in; `null` without partitions.
    pub partition: Option<u32>,
    /// The batch size it ran with (the size in force).
    pub batch_size: u32,
    /// Keys the repair selected (what the real batch adds to `rows_done`).
    pub keys: u64,
    /// Rows inserted, updated or deleted in the repair's tables
    /// (`pg_stat_xact_user_tables`); `null` when the repair names no
    /// table.
    pub rows_changed: Option<i64>,
    /// Time of the batch's statements, in ms (the real batch adds its
    /// commit).
    pub duration_ms: f64,
    /// WAL inserted server-wide while the batch ran, in bytes; `null` when
    /// unreadable.
    pub wal_bytes: Option<i64>,
    /// Time spent waiting for locks, in ms: `null`, because PostgreSQL
    /// does not report it per statement. A batch that waited longer than
    /// the lock timeout fails with that error instead.
    pub lock_wait_ms: Option<f64>,
    /// The checkpoint the real batch would commit.
    #[cfg_attr(feature = "http", schema(schema_with = crate::key::key_schema))]
    pub to: Option<Value>,
}

/// The batch of a dry run that failed, classified as the runtime would
/// record it (RT-1).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct DryRunError {
    /// The batch that failed (0: capturing the bound, before any batch).
    pub batch: u32,
    /// `retryable`, `blocked` or `fatal`.
    pub kind: String,
    /// The bounded diagnostic, without row data.
    pub message: String,
}

/// The forecast for the whole remaining range, from the stored checkpoint
/// (or the start) to the bound. Every field is `null` when unknown.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct Forecast {
    /// Rows the run would still select.
    pub rows: Option<i64>,
    /// `exact` (counted), `estimate` (the planner's) or `unknown`.
    pub rows_basis: String,
    /// Batches at the size in force.
    pub batches: Option<i64>,
    /// Time of those batches at the measured mean batch time, plus the
    /// pause between batches, in ms.
    pub duration_ms: Option<f64>,
    /// WAL at the measured WAL per selected key, in bytes.
    pub wal_bytes: Option<i64>,
}

/// One changed row of a dry run's sample: its key and the values before
/// and after of the columns the repair changes, each truncated.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct SampleRow {
    /// The row's key columns in the table the repair writes.
    pub key: Value,
    /// The changed columns as they were before the batch, each value cut
    /// to 64 characters (DRY-3).
    pub before: Value,
    /// The same columns as the batch wrote them, cut the same way.
    pub after: Value,
}

impl From<store::JournalEntry> for SampleRow {
    fn from(entry: store::JournalEntry) -> Self {
        SampleRow {
            key: truncated(entry.row_key),
            before: truncated(entry.before),
            after: truncated(entry.after),
        }
    }
}

/// `value` with every string, and the JSON text of every nested value,
/// cut to [`SAMPLE_VALUE_MAX_CHARS`] characters: the top level of an image
/// is an object of columns (or the key's array), whose values are cut one
/// by one.
fn truncated(value: Value) -> Value {
    match value {
        Value::Object(columns) => Value::Object(
            columns
                .into_iter()
                .map(|(column, v)| (column, cut_value(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(cut_value).collect()),
        scalar => cut_value(scalar),
    }
}

/// One value within [`SAMPLE_VALUE_MAX_CHARS`]: a longer string, or a
/// nested value whose JSON text is longer, becomes its first characters
/// and `…`.
fn cut_value(value: Value) -> Value {
    let cut = |text: &str| {
        let mut short: String = text.chars().take(SAMPLE_VALUE_MAX_CHARS).collect();
        short.push('…');
        Value::String(short)
    };
    match value {
        Value::String(s) if s.chars().count() > SAMPLE_VALUE_MAX_CHARS => cut(&s),
        v @ (Value::Array(_) | Value::Object(_)) => {
            let text = v.to_string();
            if text.chars().count() > SAMPLE_VALUE_MAX_CHARS {
                cut(&text)
            } else {
                v
            }
        }
        v => v,
    }
}

/// The batches as they ran.
pub(super) struct Ran {
    pub(super) batches: Vec<DryBatch>,
    /// The journal entries the batches wrote, read before each batch was
    /// rolled back, up to the sample asked for.
    pub(super) sample: Vec<crate::store::JournalEntry>,
    pub(super) error: Option<DryRunError>,
    pub(super) reached_bound: bool,
    /// The size the next batch would run with.
    pub(super) size: u32,
}

/// The sum of two counts: exact only if both are, unknown if either is.
pub(super) fn add_counts(a: RowCount, b: RowCount) -> RowCount {
    match (a, b) {
        (RowCount::Unknown, _) | (_, RowCount::Unknown) => RowCount::Unknown,
        (RowCount::Exact(a), RowCount::Exact(b)) => RowCount::Exact(a.saturating_add(b)),
        (
            RowCount::Exact(a) | RowCount::Estimate(a),
            RowCount::Exact(b) | RowCount::Estimate(b),
        ) => RowCount::Estimate(a.saturating_add(b)),
    }
}

impl Forecast {
    pub(super) fn unknown() -> Self {
        Forecast {
            rows: None,
            rows_basis: "unknown".into(),
            batches: None,
            duration_ms: None,
            wal_bytes: None,
        }
    }

    /// The forecast for `rows` remaining rows from the batches that ran:
    /// batches at the size in force after them, their mean time per batch
    /// (of the batches that selected keys) plus the pause between batches,
    /// and their WAL per selected key. Nothing measured, nothing forecast.
    pub(super) fn from_measured(rows: RowCount, ran: &Ran, pause: Duration) -> Self {
        let (rows, basis) = match rows {
            RowCount::Exact(n) => (n, "exact"),
            RowCount::Estimate(n) => (n, "estimate"),
            RowCount::Unknown => return Forecast::unknown(),
        };
        let rows = rows.max(0);
        let size = i64::from(ran.size.max(1));
        let batches = (rows + size - 1) / size;
        let working: Vec<&DryBatch> = ran.batches.iter().filter(|b| b.keys > 0).collect();
        let keys: u64 = working.iter().map(|b| b.keys).sum();
        let duration_ms = (!working.is_empty()).then(|| {
            let mean = working.iter().map(|b| b.duration_ms).sum::<f64>() / working.len() as f64;
            let pauses = batches.saturating_sub(1) as f64 * pause.as_secs_f64() * 1000.0;
            batches as f64 * mean + pauses
        });
        let wal: Option<i64> = working.iter().map(|b| b.wal_bytes).sum();
        let wal_bytes = wal
            .filter(|_| keys > 0)
            .map(|wal| (wal as f64 / keys as f64 * rows as f64).round() as i64);
        Forecast {
            rows: Some(rows),
            rows_basis: basis.into(),
            batches: Some(batches),
            duration_ms: if rows == 0 { Some(0.0) } else { duration_ms },
            wal_bytes: if rows == 0 { Some(0) } else { wal_bytes },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(keys: u64, duration_ms: f64, wal_bytes: Option<i64>) -> DryBatch {
        DryBatch {
            batch: 1,
            partition: None,
            batch_size: 10,
            keys,
            rows_changed: None,
            duration_ms,
            wal_bytes,
            lock_wait_ms: None,
            to: None,
        }
    }

    fn ran(batches: Vec<DryBatch>) -> Ran {
        Ran {
            batches,
            sample: Vec::new(),
            error: None,
            reached_bound: false,
            size: 10,
        }
    }

    /// DRY-2: the forecast scales the measured batches to the remaining
    /// rows at the size in force, with the pause between batches.
    #[test]
    fn dry02_forecast_scales_the_measured_batches() {
        let measured = ran(vec![batch(10, 4.0, Some(1000)), batch(10, 6.0, Some(3000))]);
        let f = Forecast::from_measured(RowCount::Exact(95), &measured, Duration::from_millis(2));
        assert_eq!(f.rows, Some(95));
        assert_eq!(f.rows_basis, "exact");
        assert_eq!(f.batches, Some(10));
        assert_eq!(f.duration_ms, Some(10.0 * 5.0 + 9.0 * 2.0));
        assert_eq!(f.wal_bytes, Some(19_000));
        let f = Forecast::from_measured(RowCount::Estimate(5), &measured, Duration::ZERO);
        assert_eq!((f.rows_basis.as_str(), f.batches), ("estimate", Some(1)));
    }

    /// DRY-2: unknowns stay unknown: no count, no forecast; no measured
    /// WAL or no batch with keys, no WAL or time forecast.
    #[test]
    fn dry02_unknowns_stay_unknown() {
        let measured = ran(vec![batch(10, 4.0, None)]);
        let f = Forecast::from_measured(RowCount::Unknown, &measured, Duration::ZERO);
        assert_eq!((f.rows, f.batches, f.duration_ms), (None, None, None));
        assert_eq!(f.rows_basis, "unknown");
        let f = Forecast::from_measured(RowCount::Exact(30), &measured, Duration::ZERO);
        assert_eq!((f.wal_bytes, f.duration_ms), (None, Some(12.0)));
        let f = Forecast::from_measured(RowCount::Exact(30), &ran(vec![]), Duration::ZERO);
        assert_eq!(
            (f.batches, f.duration_ms, f.wal_bytes),
            (Some(3), None, None)
        );
    }

    /// DRY-3: every value of a sample is cut to its documented length,
    /// column by column; short values and numbers pass unchanged.
    #[test]
    fn dry03_sample_values_are_truncated() {
        let long = "é".repeat(SAMPLE_VALUE_MAX_CHARS + 10);
        let image = serde_json::json!({
            "note": long,
            "n": 7,
            "short": "abc",
            "doc": {"k": "x".repeat(100)},
        });
        let cut = truncated(image);
        let note = cut["note"].as_str().expect("string");
        assert_eq!(note.chars().count(), SAMPLE_VALUE_MAX_CHARS + 1);
        assert!(note.ends_with('…'));
        assert_eq!(cut["n"], 7);
        assert_eq!(cut["short"], "abc");
        assert!(cut["doc"].as_str().expect("cut to text").ends_with('…'));
        assert_eq!(
            truncated(serde_json::json!([1, "a"])),
            serde_json::json!([1, "a"])
        );
    }

    /// DRY-2: a sum of counts is exact only when every part is.
    #[test]
    fn dry02_counts_add_up_to_the_weakest_basis() {
        use RowCount::*;
        assert_eq!(add_counts(Exact(2), Exact(3)), Exact(5));
        assert_eq!(add_counts(Exact(2), Estimate(3)), Estimate(5));
        assert_eq!(add_counts(Estimate(2), Unknown), Unknown);
    }

    /// DRY-1: the number of batches and the sample size are bounded, and
    /// the refusal names the limit.
    #[test]
    fn dry01_options_are_bounded() {
        assert!(DryRunOptions::default().check().is_ok());
        let err = DryRunOptions {
            batches: DRY_RUN_MAX_BATCHES + 1,
            sample: 0,
        }
        .check()
        .expect_err("too many");
        assert!(err.contains("20"), "{err}");
        assert!(DryRunOptions {
            batches: 0,
            sample: 0
        }
        .check()
        .is_err());
        assert!(DryRunOptions {
            batches: 1,
            sample: DRY_RUN_MAX_SAMPLE + 1
        }
        .check()
        .is_err());
    }
}
