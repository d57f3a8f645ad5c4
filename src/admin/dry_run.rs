//! The dry run at the admin boundary (DRY-1, DRY-3, DRY-4): authorized
//! (`backfill:operate`, and `backfill:inspect` for the sample of changed
//! rows), checked, run through [`Engine::dry_run`](crate::Engine::dry_run)
//! and audited as its own action with its outcome. It changes nothing, so
//! it needs no idempotency key: a repeated request runs again.

use super::{requested_id, to_json, Admin, AdminError, Capability, Reply, RequestMeta};
use crate::admin::view::ConflictBody;
use crate::engine::{
    DryRun, DryRunOptions, DryRunReport, DRY_RUN_DEFAULT_BATCHES, DRY_RUN_DEFAULT_SAMPLE,
};
use crate::repair::bounded;
use crate::store::{self, BackfillRow, NewAudit};

/// The action's name in the audit log.
pub const DRY_RUN_ACTION: &str = "dry_run";

/// Why a report carries no sample when the principal may not see one.
const NOT_INSPECT: &str =
    "counts only: a sample of changed rows needs the backfill:inspect capability";

impl Admin {
    /// POST /admin/backfills/{id}/dry-run: up to `batches` batches run and
    /// rolled back, with the forecast, and for a principal holding
    /// `backfill:inspect` up to `sample` changed rows. 200 with the report
    /// (a failed batch is part of it); 409 when the backfill is neither
    /// `pending` nor `paused`, naming its state; 422 for options out of
    /// their limits. Every outcome is audited (`dry_run`).
    pub async fn dry_run(
        &self,
        meta: &RequestMeta<'_>,
        id: &str,
        batches: Option<i64>,
        sample: Option<i64>,
    ) -> Result<Reply, AdminError> {
        let authority = self
            .authorize(meta, id, DRY_RUN_ACTION, Capability::Operate)
            .await?;
        let checked = requested_id("the path's ID", id).and_then(|()| options(batches, sample));
        let options = match checked {
            Ok(options) => options,
            Err(error) => {
                return Err(self
                    .rejected(&authority, id, DRY_RUN_ACTION, meta, error)
                    .await)
            }
        };
        let inspect = authority.can(Capability::Inspect);
        let asked = DryRunOptions {
            sample: if inspect { options.sample } else { 0 },
            ..options
        };
        let ran = match self.engine.dry_run(id, asked).await {
            Ok(ran) => ran,
            Err(error) => {
                return Err(self
                    .rejected(&authority, id, DRY_RUN_ACTION, meta, error.into())
                    .await)
            }
        };
        let (status, row_state, generation, outcome, detail, body) = match ran {
            DryRun::Ran(mut report) => {
                if !inspect {
                    report.sample = None;
                    report.sample_note = Some(NOT_INSPECT.into());
                }
                let (outcome, detail) = summary(&report);
                let body = to_json(&report)?;
                (200, report.state, report.generation, outcome, detail, body)
            }
            DryRun::NotAllowed(row) => {
                let message = format!(
                    "a dry run needs a pending or paused backfill; this one is {}",
                    row.state
                );
                let body = self.conflict(&row, &message).await?;
                (409, row.state, row.generation, "conflict", message, body)
            }
        };
        let correlation = meta.correlation();
        let detail = bounded(detail);
        let audit = NewAudit {
            backfill_id: id,
            action: DRY_RUN_ACTION,
            actor: authority.actor.as_deref(),
            authority: authority.source,
            correlation: correlation.as_deref(),
            prior_state: Some(row_state),
            resulting_state: Some(row_state),
            generation: Some(generation),
            outcome,
            detail: Some(&detail),
            reason: None,
        };
        // The dry run's own transaction was rolled back; its audit row is
        // a write of its own. A dry run that cannot be audited is not
        // answered (AUD-1).
        let mut conn = self.conn().await?;
        store::audit_insert(&mut conn, &audit).await?;
        Ok(Reply { status, body })
    }

    /// The typed 409 body: the message and the backfill as it is.
    async fn conflict(
        &self,
        row: &BackfillRow,
        message: &str,
    ) -> Result<serde_json::Value, AdminError> {
        let mut conn = self.conn().await?;
        let current = self.view_on(&mut conn, row).await?;
        to_json(&ConflictBody {
            error: "conflict".into(),
            message: message.into(),
            current,
        })
    }
}

/// The options a request asks for, within their limits (422 naming the
/// limit otherwise).
fn options(batches: Option<i64>, sample: Option<i64>) -> Result<DryRunOptions, AdminError> {
    let out_of_range =
        |field: &'static str, message: String| AdminError::OutOfRange { field, message };
    let options = DryRunOptions {
        batches: match batches {
            None => DRY_RUN_DEFAULT_BATCHES,
            Some(n) => u32::try_from(n).unwrap_or(0),
        },
        sample: match sample {
            None => DRY_RUN_DEFAULT_SAMPLE,
            Some(n) => u32::try_from(n).unwrap_or(u32::MAX),
        },
    };
    options.check().map_err(|message| {
        let field = if message.starts_with("batches") {
            "batches"
        } else {
            "sample"
        };
        out_of_range(field, message)
    })?;
    Ok(options)
}

/// The audit outcome and detail of a report: `completed` or
/// `batch_failed`, with counts and the error's kind, never row data.
fn summary(report: &DryRunReport) -> (&'static str, String) {
    let keys: u64 = report.batches.iter().map(|b| b.keys).sum();
    let forecast = match report.forecast.rows {
        Some(rows) => format!("{rows} rows ({})", report.forecast.rows_basis),
        None => "unknown rows".into(),
    };
    let counts = format!(
        "{} of {} batches ran, {keys} keys, rolled back; forecast {forecast}",
        report.batches.len(),
        report.batches_asked
    );
    match &report.error {
        Some(e) => (
            "batch_failed",
            format!(
                "{counts}; batch {} failed ({}): {}",
                e.batch, e.kind, e.message
            ),
        ),
        None => ("completed", counts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DRY-1: absent options take their defaults; options out of range
    /// are a 422 naming the field and the limit.
    #[test]
    fn dry01_request_options_default_and_are_bounded() {
        let d = options(None, None).expect("defaults");
        assert_eq!(
            (d.batches, d.sample),
            (DRY_RUN_DEFAULT_BATCHES, DRY_RUN_DEFAULT_SAMPLE)
        );
        for (batches, sample, field) in [
            (Some(0), None, "batches"),
            (Some(21), None, "batches"),
            (Some(-1), None, "batches"),
            (Some(i64::MAX), None, "batches"),
            (None, Some(51), "sample"),
            (None, Some(-1), "sample"),
        ] {
            let err = options(batches, sample).expect_err("out of range");
            assert_eq!(err.status(), 422);
            assert_eq!(err.body().field.as_deref(), Some(field));
            assert!(err.to_string().contains("between"), "{err}");
        }
    }
}
