//! The dry run (DRY-1, DRY-2, DRY-4): up to K batches of a `pending` or
//! `paused` backfill run exactly as the real run would run them, measured,
//! and rolled back.
//!
//! Everything happens in ONE transaction on one pooled connection, opened
//! like a real batch's (`BEGIN` and the batch timeouts) and always rolled
//! back: the share lock on the backfill row (so no action changes its
//! state, bound or checkpoint meanwhile), for a `pending` backfill the
//! bound `start` would capture, the forecast's count, and the batches, one
//! after the other, each in a savepoint so that a failed batch is reported
//! and what the batches before it did stays readable. The batches run the
//! registered repair's own batch body (`DynRepair::batch`, the same
//! statements and checks as `run_batch`) with the size the live settings
//! put in force, from the stored checkpoint; they never claim and never
//! reach the fence, so no checkpoint, bound, state, counter, event or
//! metric moves.

use super::config::millis;
use super::error::{body_error, EngineError};
use super::Engine;
use crate::key::render_json;
use crate::lifecycle::State;
use crate::pace::{Policy, Sizing};
use crate::repair::{bounded, plan_partitions, DynRepair, EncodedSource, RowCount};
use crate::settings::Settings;
use crate::store::{self, BackfillRow, StoreError};
use diesel_async::AsyncPgConnection;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::{Duration, Instant};

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
/// How long the forecast's count of the remaining rows may run before the
/// planner's estimate stands in for it.
pub const DRY_RUN_COUNT_TIMEOUT: Duration = Duration::from_secs(1);

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

/// What [`Engine::dry_run`] found.
#[derive(Debug)]
pub enum DryRun {
    /// The batches ran (or the first failed) and were rolled back.
    Ran(Box<DryRunReport>),
    /// The backfill is in a state a dry run does not run in (only
    /// `pending` and `paused` are); nothing ran. The row as read.
    NotAllowed(Box<BackfillRow>),
}

/// The report of one dry run. Every change it measured was rolled back.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct DryRunReport {
    pub backfill_id: String,
    /// The state it ran in: `pending` or `paused` (unchanged).
    pub state: State,
    /// The generation it ran against (unchanged).
    pub generation: i64,
    /// Batches asked for.
    pub batches_asked: u32,
    /// The checkpoint it started from; `null` from the start.
    #[cfg_attr(feature = "http", schema(schema_with = crate::admin::view::key_schema))]
    pub from: Option<Value>,
    /// The bound: the stored one, or for a `pending` backfill the one
    /// `start` would capture now (`bound_captured`); `null` when the
    /// source set is empty.
    #[cfg_attr(feature = "http", schema(schema_with = crate::admin::view::key_schema))]
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
    #[cfg_attr(feature = "http", schema(schema_with = crate::admin::view::key_schema))]
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
    pub key: Value,
    pub before: Value,
    pub after: Value,
}

/// Why a report of a repair without a journal has no sample.
const NO_JOURNAL: &str = "this repair keeps no journal, so the rows it changes cannot be shown";

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

/// One key range the batches run through: `(after, upper]`.
struct Range {
    after: Option<Vec<u8>>,
    upper: Vec<u8>,
    partition: Option<u32>,
}

/// What the dry run works with once the row is read and the ranges known.
struct Plan<'a> {
    id: &'a str,
    def: &'a dyn DynRepair,
    ranges: Vec<Range>,
    stmt_ms: i64,
    lock_ms: i64,
}

/// The batches as they ran.
struct Ran {
    batches: Vec<DryBatch>,
    error: Option<DryRunError>,
    reached_bound: bool,
    /// The size the next batch would run with.
    size: u32,
}

impl Engine {
    /// Run up to `options.batches` batches of `id` as the real run would,
    /// inside one transaction that is rolled back, and report what they
    /// did and what the whole remaining range would take (DRY-1, DRY-2).
    /// Only a `pending` or `paused` backfill runs; another state answers
    /// [`DryRun::NotAllowed`] with nothing run. A batch that fails ends
    /// the dry run with its classified error in the report (DRY-4).
    pub async fn dry_run(&self, id: &str, options: DryRunOptions) -> Result<DryRun, EngineError> {
        options.check().map_err(EngineError::InvalidDryRun)?;
        let stmt_ms = millis(self.config.statement_timeout);
        let lock_ms = millis(self.config.lock_timeout);
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        store::batch_begin(&mut conn, stmt_ms, lock_ms).await?;
        let result = self.dry_run_in(&mut conn, id, options).await;
        // Whatever ran, nothing of it commits. A rollback that fails
        // leaves the connection broken, and the pool discards it; the
        // server rolls the transaction back when the session ends.
        let _ = store::batch_rollback(&mut conn).await;
        result
    }

    async fn dry_run_in(
        &self,
        conn: &mut AsyncPgConnection,
        id: &str,
        options: DryRunOptions,
    ) -> Result<DryRun, EngineError> {
        let row = store::backfill_lock_shared(conn, id)
            .await?
            .ok_or_else(|| EngineError::UnknownBackfill(id.to_string()))?;
        if !matches!(row.state, State::Pending | State::Paused) {
            return Ok(DryRun::NotAllowed(Box::new(row)));
        }
        let def = self
            .registry
            .get(id)
            .cloned()
            .ok_or_else(|| EngineError::NoDefinition(id.to_string()))?;
        let stmt_ms = millis(self.config.statement_timeout);
        let lock_ms = millis(self.config.lock_timeout);
        let mut report = DryRunReport {
            backfill_id: id.to_string(),
            state: row.state,
            generation: row.generation,
            batches_asked: options.batches,
            from: row.checkpoint_json.clone(),
            bound: row.bound_json.clone(),
            bound_captured: false,
            statement_timeout_ms: stmt_ms,
            lock_timeout_ms: lock_ms,
            batches: Vec::new(),
            error: None,
            reached_bound: false,
            forecast: Forecast::unknown(),
            sample: None,
            sample_note: None,
            rolled_back: true,
        };
        let ranges = match self.ranges(conn, &*def, &row, &mut report).await? {
            Ok(ranges) => ranges,
            Err(error) => {
                report.error = Some(error);
                return Ok(DryRun::Ran(Box::new(report)));
            }
        };
        let plan = Plan {
            id,
            def: &*def,
            ranges,
            stmt_ms,
            lock_ms,
        };
        let rows = self.count_remaining(conn, &plan).await?;
        let sizing = Sizing::new(
            Policy::new(
                &Settings::from_stored(&row.settings),
                def.batch_limit(),
                def.batch_target(),
            ),
            row.batch_size.and_then(|s| u32::try_from(s).ok()),
        );
        // The journal rows the batches write are the ones after the last
        // committed one: read where the batches start, before any of them.
        let journal_from = match (def.journal(), options.sample) {
            (None, _) => {
                report.sample_note = Some(NO_JOURNAL.into());
                None
            }
            (Some(_), 0) => {
                report.sample_note = Some("no sample was asked for".into());
                None
            }
            (Some(_), _) => Some(store::journal_seq_last(conn, id).await?),
        };
        let ran = run_batches(conn, &plan, sizing, options.batches).await?;
        if let Some(after_seq) = journal_from {
            let entries =
                store::journal_entries(conn, id, after_seq, i64::from(options.sample)).await?;
            report.sample = Some(entries.into_iter().map(SampleRow::from).collect());
        }
        let pause = Settings::from_stored(&row.settings).pause();
        report.forecast = Forecast::from_measured(rows, &ran, pause);
        report.batches = ran.batches;
        report.error = ran.error;
        report.reached_bound = ran.reached_bound;
        Ok(DryRun::Ran(Box::new(report)))
    }

    /// The key ranges the batches run through, in key order: for a
    /// `pending` backfill the range up to the bound `start` would capture
    /// now, divided into the partitions `start` would write (captured and
    /// split here, in the dry run's transaction, with the validation
    /// timeout `start` runs them under); for a `paused` one the rest of its
    /// own range, or of each partition not at its end. The inner `Err`:
    /// capturing the bound or splitting it failed, classified.
    async fn ranges(
        &self,
        conn: &mut AsyncPgConnection,
        def: &dyn DynRepair,
        row: &BackfillRow,
        report: &mut DryRunReport,
    ) -> Result<Result<Vec<Range>, DryRunError>, EngineError> {
        if row.state == State::Pending {
            store::batch_set_timeouts(
                conn,
                millis(self.config.validation_timeout),
                report.lock_timeout_ms,
            )
            .await?;
            store::dry_run_savepoint(conn).await?;
            let captured = capture_ranges(conn, def, &row.id).await;
            let ranges = match captured {
                Ok((bound, ranges)) => {
                    store::dry_run_release(conn).await?;
                    report.bound = bound;
                    ranges
                }
                Err(error) => {
                    store::dry_run_rollback_to(conn).await?;
                    return Ok(Err(classified(0, error)));
                }
            };
            store::batch_set_timeouts(conn, report.statement_timeout_ms, report.lock_timeout_ms)
                .await?;
            report.bound_captured = true;
            return Ok(Ok(ranges));
        }
        let parts = store::partition_list(conn, std::slice::from_ref(&row.id)).await?;
        if !parts.is_empty() {
            return Ok(Ok(parts
                .into_iter()
                .filter(|p| !p.ended())
                .map(|p| Range {
                    after: p.checkpoint,
                    upper: p.upper,
                    partition: u32::try_from(p.part).ok(),
                })
                .collect()));
        }
        Ok(Ok(match &row.bound {
            Some(bound) if row.checkpoint.as_ref() != Some(bound) => vec![Range {
                after: row.checkpoint.clone(),
                upper: bound.clone(),
                partition: None,
            }],
            _ => Vec::new(),
        }))
    }

    /// The rows a run over every range would select: counted under
    /// [`DRY_RUN_COUNT_TIMEOUT`], else the repair's estimate, each in a
    /// savepoint so a cancelled count leaves the transaction usable.
    /// Exact only when every range was counted.
    async fn count_remaining(
        &self,
        conn: &mut AsyncPgConnection,
        plan: &Plan<'_>,
    ) -> Result<RowCount, EngineError> {
        let mut total = RowCount::Exact(0);
        for range in &plan.ranges {
            let mut count = RowCount::Unknown;
            for exact in [true, false] {
                let timeout = if exact {
                    millis(DRY_RUN_COUNT_TIMEOUT)
                } else {
                    plan.stmt_ms
                };
                store::dry_run_savepoint(conn).await?;
                store::batch_set_timeouts(conn, timeout, plan.lock_ms).await?;
                let asked = plan
                    .def
                    .remaining_rows(conn, range.after.as_deref(), &range.upper, exact)
                    .await;
                match asked {
                    Ok(rows) => {
                        store::dry_run_release(conn).await?;
                        count = rows;
                    }
                    Err(_) => store::dry_run_rollback_to(conn).await?,
                }
                if count != RowCount::Unknown {
                    break;
                }
            }
            total = add_counts(total, count);
        }
        // The count's timeout outlives its savepoint's release.
        store::batch_set_timeouts(conn, plan.stmt_ms, plan.lock_ms).await?;
        Ok(total)
    }
}

/// The bound `start` would capture now and the ranges the run would have:
/// the whole range, or the partitions `start` would write (PAR-1), split
/// as `start` splits them. Inside the caller's savepoint; nothing is
/// written.
async fn capture_ranges(
    conn: &mut AsyncPgConnection,
    def: &dyn DynRepair,
    id: &str,
) -> Result<(Option<Value>, Vec<Range>), EngineError> {
    let (upper, upper_json) = match def.capture(conn).await.map_err(|e| body_error(id, e))? {
        EncodedSource::Empty => return Ok((None, Vec::new())),
        EncodedSource::Bounded {
            upper, upper_json, ..
        } => (upper, upper_json),
    };
    let whole = vec![Range {
        after: None,
        upper: upper.clone(),
        partition: None,
    }];
    let partitions = def.partitions();
    if partitions <= 1 {
        return Ok((Some(upper_json), whole));
    }
    let points = def
        .split_points(conn, &upper, partitions)
        .await
        .map_err(|e| body_error(id, e))?;
    let planned = plan_partitions(&points, &upper, partitions, &|key| def.check_key(key)).map_err(
        |error| EngineError::Split {
            id: id.to_string(),
            error,
        },
    )?;
    if planned.len() <= 1 {
        return Ok((Some(upper_json), whole));
    }
    let ranges = planned
        .into_iter()
        .enumerate()
        .map(|(part, r)| Range {
            after: r.lower,
            upper: r.upper,
            partition: u32::try_from(part).ok(),
        })
        .collect();
    Ok((Some(upper_json), ranges))
}

/// The sum of two counts: exact only if both are, unknown if either is.
fn add_counts(a: RowCount, b: RowCount) -> RowCount {
    match (a, b) {
        (RowCount::Unknown, _) | (_, RowCount::Unknown) => RowCount::Unknown,
        (RowCount::Exact(a), RowCount::Exact(b)) => RowCount::Exact(a.saturating_add(b)),
        (
            RowCount::Exact(a) | RowCount::Estimate(a),
            RowCount::Exact(b) | RowCount::Estimate(b),
        ) => RowCount::Estimate(a.saturating_add(b)),
    }
}

/// Up to `asked` batches through the plan's ranges, each in a savepoint,
/// measured; the first that fails ends them.
async fn run_batches(
    conn: &mut AsyncPgConnection,
    plan: &Plan<'_>,
    mut sizing: Sizing,
    asked: u32,
) -> Result<Ran, EngineError> {
    let tables = plan.def.tables();
    let mut ran = Ran {
        batches: Vec::new(),
        error: None,
        reached_bound: plan.ranges.is_empty(),
        size: sizing.size(),
    };
    let mut ranges = plan.ranges.iter();
    let mut current = ranges.next().map(|r| (r, r.after.clone()));
    for batch in 1..=asked {
        let Some((range, after)) = current.take() else {
            break;
        };
        let limit = sizing.size();
        let wal_before = store::dry_run_wal_position(conn).await?;
        let rows_before = changes(conn, &tables).await?;
        store::dry_run_savepoint(conn).await?;
        let started = Instant::now();
        let body = plan
            .def
            .batch(conn, after.as_deref(), &range.upper, limit)
            .await;
        let took = started.elapsed();
        let selected = match body {
            Ok(selected) => selected,
            Err(error) => {
                store::dry_run_rollback_to(conn).await?;
                ran.error = Some(classified(batch, body_error(plan.id, error)));
                return Ok(ran);
            }
        };
        store::dry_run_release(conn).await?;
        let wal_after = store::dry_run_wal_position(conn).await?;
        let rows_after = changes(conn, &tables).await?;
        // The checkpoint the real batch would commit: its last key, or
        // the range's end when no key was left.
        let (to, to_json) = match selected.last {
            Some(last) => last,
            None => (
                range.upper.clone(),
                render_json(&range.upper).unwrap_or(Value::Null),
            ),
        };
        sizing.observe(selected.keys, took);
        ran.batches.push(DryBatch {
            batch,
            partition: range.partition,
            batch_size: limit,
            keys: selected.keys as u64,
            rows_changed: rows_after.zip(rows_before).map(|(a, b)| a - b),
            duration_ms: took.as_secs_f64() * 1000.0,
            wal_bytes: wal_after.zip(wal_before).map(|(a, b)| a - b),
            lock_wait_ms: None,
            to: Some(to_json),
        });
        current = if to == range.upper {
            ranges.next().map(|r| (r, r.after.clone()))
        } else {
            Some((range, Some(to)))
        };
        ran.reached_bound = current.is_none();
    }
    ran.size = sizing.size();
    Ok(ran)
}

/// Rows changed so far in the transaction in `tables`; `None` without
/// tables to count in.
async fn changes(
    conn: &mut AsyncPgConnection,
    tables: &[String],
) -> Result<Option<i64>, StoreError> {
    if tables.is_empty() {
        return Ok(None);
    }
    store::dry_run_table_changes(conn, tables).await
}

/// A failed step as the runtime would classify it (RT-1). An error the
/// runtime would not record against the backfill (a stored key of another
/// type, say) is fatal for the dry run: it cannot go on either.
fn classified(batch: u32, error: EngineError) -> DryRunError {
    let (kind, message) = match error.classification() {
        Some(e) => (e.kind(), e.message()),
        None => ("fatal", error.to_string()),
    };
    DryRunError {
        batch,
        kind: kind.to_string(),
        message: bounded(message),
    }
}

impl Forecast {
    fn unknown() -> Self {
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
    fn from_measured(rows: RowCount, ran: &Ran, pause: Duration) -> Self {
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
            error: None,
            reached_bound: false,
            size: 10,
        }
    }

    /// DRY-2: the forecast scales the measured batches to the remaining
    /// rows at the size in force, with the pause between batches.
    #[test]
    fn dry2_forecast_scales_the_measured_batches() {
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
    fn dry2_unknowns_stay_unknown() {
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
    fn dry3_sample_values_are_truncated() {
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
    fn dry2_counts_add_up_to_the_weakest_basis() {
        use RowCount::*;
        assert_eq!(add_counts(Exact(2), Exact(3)), Exact(5));
        assert_eq!(add_counts(Exact(2), Estimate(3)), Estimate(5));
        assert_eq!(add_counts(Estimate(2), Unknown), Unknown);
    }

    /// DRY-1: the number of batches and the sample size are bounded, and
    /// the refusal names the limit.
    #[test]
    fn dry1_options_are_bounded() {
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
