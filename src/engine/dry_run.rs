//! The dry run (DRY-1, DRY-2, DRY-4): up to K batches of a `pending` or
//! `paused` backfill run exactly as the real run would run them, measured,
//! and rolled back.
//!
//! Everything happens in ONE transaction on one pooled connection, opened
//! like a real batch's (`BEGIN` and the batch timeouts) and always rolled
//! back: the share lock on the backfill row (so no action changes its
//! state, bound or checkpoint meanwhile), for a `pending` backfill the
//! bound `start` would capture, the forecast's count, and the batches, one
//! after the other, each in a savepoint it is rolled back to once it is
//! measured, so that a failed batch is reported and no batch's row locks
//! outlive it. The batches run the
//! registered repair's own batch body (`DynRepair::batch`, the same
//! statements and checks as `run_batch`) with the size the live settings
//! put in force, from the stored checkpoint; they never claim and never
//! reach the fence, so no checkpoint, bound, state, counter, event or
//! metric moves.

use super::config::millis;
use super::dry_report::{
    add_counts, DryBatch, DryRunError, DryRunOptions, DryRunReport, Forecast, Ran, SampleRow,
};
use super::error::{body_error, EngineError};
use super::Engine;
use crate::key::render_json;
use crate::lifecycle::State;
use crate::repair::{bounded, plan_partitions, DynRepair, EncodedSource, RowCount};
use crate::store::{self, BackfillRow, StoreError};
use crate::throttle::settings::Settings;
use crate::throttle::sizing::{Policy, Sizing};
use diesel_async::AsyncPgConnection;
use serde_json::Value;
use std::time::{Duration, Instant};

/// How long the forecast's count of the remaining rows may run before the
/// planner's estimate stands in for it.
pub const DRY_RUN_COUNT_TIMEOUT: Duration = Duration::from_secs(1);

/// What [`Engine::dry_run`] found.
#[derive(Debug)]
pub enum DryRun {
    /// The batches ran (or the first failed) and were rolled back.
    Ran(Box<DryRunReport>),
    /// The backfill is in a state a dry run does not run in (only
    /// `pending` and `paused` are); nothing ran. The row as read.
    NotAllowed(Box<BackfillRow>),
}

/// Why a report of a repair without a journal has no sample.
const NO_JOURNAL: &str = "this repair keeps no journal, so the rows it changes cannot be shown";

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
        let mut report = blank_report(&row, options, stmt_ms, lock_ms);
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
        // The journal entries the batches write are the ones after the
        // last committed one: read where the batches start, before any of them.
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
        let sample = journal_from.map(|after_seq| (after_seq, options.sample));
        let ran = run_batches(conn, &plan, sizing, options.batches, sample).await?;
        if journal_from.is_some() {
            report.sample = Some(ran.sample.iter().cloned().map(SampleRow::from).collect());
        }
        report.max_keys_locked = ran.batches.iter().map(|b| b.keys).max().unwrap_or(0);
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

/// The report before anything ran: what the row says, nothing measured.
fn blank_report(
    row: &BackfillRow,
    options: DryRunOptions,
    statement_timeout_ms: i64,
    lock_timeout_ms: i64,
) -> DryRunReport {
    DryRunReport {
        backfill_id: row.id.clone(),
        state: row.state,
        generation: row.generation,
        batches_asked: options.batches,
        from: row.checkpoint_json.clone(),
        bound: row.bound_json.clone(),
        bound_captured: false,
        statement_timeout_ms,
        lock_timeout_ms,
        batches: Vec::new(),
        error: None,
        reached_bound: false,
        forecast: Forecast::unknown(),
        sample: None,
        sample_note: None,
        max_keys_locked: 0,
        rolled_back: true,
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

/// Up to `asked` batches through the plan's ranges, each in a savepoint,
/// measured, then rolled back to it; the first that fails ends them. With
/// `sample` (the last journal entry before the batches, and how many rows
/// to sample), the rows each batch journaled are read before its
/// rollback.
///
/// Rolling each batch back as soon as it is measured ends its row locks
/// (an aborted subtransaction's locks go with it), so the dry run holds
/// at most one batch's rows at a time, as the real run, which commits
/// batch by batch, does; holding every batch until the final rollback
/// would block the application longer than the run it previews. The next
/// batch starts from the checkpoint the previous one would have
/// committed, as in the real run.
async fn run_batches(
    conn: &mut AsyncPgConnection,
    plan: &Plan<'_>,
    mut sizing: Sizing,
    asked: u32,
    sample: Option<(i64, u32)>,
) -> Result<Ran, EngineError> {
    let tables = plan.def.tables();
    let mut ran = Ran {
        sample: Vec::new(),
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
        let wal_after = store::dry_run_wal_position(conn).await?;
        let rows_after = changes(conn, &tables).await?;
        if let Some((after_seq, want)) = sample {
            let left = i64::from(want) - i64::try_from(ran.sample.len()).unwrap_or(i64::MAX);
            if left > 0 {
                let entries = store::journal_entries(conn, plan.id, after_seq, left).await?;
                ran.sample.extend(entries);
            }
        }
        store::dry_run_rollback_to(conn).await?;
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
