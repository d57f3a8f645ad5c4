//! What the admin boundary shows (ADM-2, ADM-3): projections of one
//! PostgreSQL read, with unknown values kept unknown (`null`), never zero.

use super::journal_view::{JournalView, UndoLink};
use crate::failure::cut;
use crate::lifecycle::State;
use crate::repair::bounded;
use crate::store::{AuditRow, BackfillRow, PartitionRow};
use crate::throttle::settings::Settings;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Progress derived from the checkpoint and the captured source size.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct Progress {
    /// Keys whose mutation committed so far.
    pub rows_done: i64,
    /// Size of the source set captured at start; `null` = unknown.
    pub total_rows: Option<i64>,
    /// Fraction in `[0, 1]`; `null` = unknown (ADM-3: never shown as 0).
    pub fraction: Option<f64>,
    /// Committed batches.
    pub batches_done: i64,
    /// Rows per second over the recent progress samples of the live
    /// claims (OBS-5); `null` when not `running` (not applicable), and
    /// while unknown: a live claim with too few samples, none live, or
    /// only old samples. Read as `null` when absent.
    #[serde(default)]
    pub rows_per_second: Option<f64>,
    /// Rows per second in each 5-second bucket of the last minute, oldest
    /// first, for a sparkline (OBS-5); `null` buckets are unknown, not
    /// zero. Empty unless `running`.
    #[serde(default)]
    pub sparkline: Vec<Option<f64>>,
}

/// Who holds the claim, judged by PostgreSQL's clock.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct Ownership {
    /// `none`, `held` or `expired`.
    pub disposition: String,
    /// The worker holding (or last holding) the claim.
    pub worker: Option<String>,
    /// Lease expiry.
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub until: Option<DateTime<Utc>>,
}

/// A bounded diagnostic with its time.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct Diagnostic {
    /// `retryable`, `blocked`, `fatal` or `validation`.
    pub kind: Option<String>,
    /// Bounded (<= 512 bytes) and redacted.
    pub message: String,
    /// When it was recorded; `null` when unknown.
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub at: Option<DateTime<Utc>>,
}

/// The latest validation outcome recorded on the row.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct ValidationSummary {
    /// `success` or `failure`.
    pub outcome: String,
    /// Bounded diagnostic of a failure.
    pub detail: Option<String>,
    /// When the outcome was recorded.
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub at: Option<DateTime<Utc>>,
}

/// Readiness participation (CFG-1).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct Readiness {
    /// The deployment lists this ID as a required automatic backfill.
    pub required: bool,
    /// It currently keeps the readiness gate closed (automatic mode,
    /// required, not completed).
    pub gating: bool,
}

/// One backfill as the admin API shows it (ADM-2).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct BackfillView {
    /// The backfill's stable ID (REG-1).
    pub id: String,
    /// The description given at registration, bounded (REG-2); `null` when
    /// none was given.
    pub description: Option<String>,
    /// Lifecycle state.
    pub state: State,
    /// Key type of bound and checkpoint (e.g. `i64`).
    pub key_type: Option<String>,
    /// Inclusive upper bound in the key's own type; `null` before start,
    /// for an empty source set, or when the stored key cannot be decoded.
    #[cfg_attr(feature = "http", schema(schema_with = crate::key::key_schema))]
    pub bound: Option<Value>,
    /// Greatest committed key; `null` = before every key (or undecodable).
    #[cfg_attr(feature = "http", schema(schema_with = crate::key::key_schema))]
    pub checkpoint: Option<Value>,
    /// `start` found nothing to repair (EX-1).
    pub empty_source: bool,
    /// Progress derived from the checkpoint and the captured source size;
    /// for a partitioned backfill, the sum over its partitions (PAR-5).
    pub progress: Progress,
    /// Who holds the claim on the backfill's own row, judged by
    /// PostgreSQL's clock; the claims of a partitioned run are shown per
    /// partition.
    pub owner: Ownership,
    /// Fencing generation (CLM-1).
    pub generation: i64,
    /// Consecutive failed attempts (RT-2).
    pub attempts: i32,
    /// Earliest time a worker may claim it again after a retryable error.
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Last execution diagnostic; `null` for a `pending` row, which has
    /// not run (see `start_failed`).
    pub last_error: Option<Diagnostic>,
    /// For a `pending` row, why its last automatic start failed (EMB-8),
    /// as recorded on the row: the row stays `pending`, and the diagnostic
    /// ends with what to do. Cleared by a successful start; `null`
    /// otherwise.
    #[serde(default)]
    pub start_failed: Option<Diagnostic>,
    /// For a `blocked` backfill, a sample of the keys that hold it back
    /// (RT-4): at most 10, in the key's own type, as its definition
    /// reported them when it blocked; keys only, never the rows' values.
    /// Shown by the detail view; `null` in lists, when not blocked, or
    /// when the definition reports none.
    #[serde(default)]
    pub blocking_keys: Option<Vec<Value>>,
    /// Latest validation outcome and time.
    pub validation: Option<ValidationSummary>,
    /// Whether the backfill takes part in readiness and keeps the gate
    /// closed (CFG-1).
    pub readiness: Readiness,
    /// When the ID was first registered.
    #[serde(serialize_with = "timestamp::serialize")]
    pub registered_at: DateTime<Utc>,
    /// When the row last changed.
    #[serde(serialize_with = "timestamp::serialize")]
    pub updated_at: DateTime<Utc>,
    /// When `start` captured the bound; `null` while `pending`.
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub started_at: Option<DateTime<Utc>>,
    /// When validation completed the backfill (VAL-3); `null` until then.
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub completed_at: Option<DateTime<Utc>>,
    /// PostgreSQL's clock at read time.
    #[serde(serialize_with = "timestamp::serialize")]
    pub observed_at: DateTime<Utc>,
    /// Live settings an operator set (THR-4), only the fields set; `{}`
    /// when none is, and the definition's or the process's defaults apply.
    #[cfg_attr(feature = "http", schema(schema_with = settings_schema))]
    pub settings: Value,
    /// The batch size in force at the last batch or statement timeout
    /// (THR-3); `null` before the first batch (unknown).
    pub batch_size: Option<i32>,
    /// Why the runner holding the claim starts no batch (THR-1, THR-2);
    /// `null` when it is not throttled or nothing holds the claim.
    pub throttle: Option<Throttle>,
    /// The repairs this `pending` or `running` backfill starts after that
    /// are not `completed` yet (FLT-4), by stable ID: while any is listed,
    /// no process claims it. Empty otherwise, and when this server's
    /// definition declares no dependencies.
    #[serde(default)]
    pub waiting_for: Vec<String>,
    /// Each partition of a partitioned backfill, by part (PAR-5); empty
    /// for a backfill without partitions. `progress` then aggregates them.
    /// Read as empty when absent, from a server without partitions.
    #[serde(default)]
    pub partitions: Vec<PartitionView>,
    /// Whether this server's definition keeps a journal, so the backfill
    /// can be undone (UNDO-1).
    #[serde(default)]
    pub journaled: bool,
    /// For an undo, the backfill it takes back (UNDO-2); `null` otherwise.
    #[serde(default)]
    pub undo_of: Option<String>,
    /// The backfill's undo, once an operator started one (UNDO-2); shown
    /// by the detail view and action responses, `null` in lists.
    #[serde(default)]
    pub undo: Option<UndoLink>,
    /// The journal this backfill wrote (or, for an undo, the one it takes
    /// back) and what the undo did with it (UNDO-2, UNDO-4); shown by the
    /// detail view and action responses of journaled backfills and undos,
    /// `null` otherwise.
    #[serde(default)]
    pub journal: Option<JournalView>,
}

/// One partition as the admin API shows it (PAR-5): its range
/// `(lower, upper]`, checkpoint, claim and progress.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct PartitionView {
    /// The partition's number, from 0 in key order.
    pub part: i32,
    /// Exclusive lower end; `null` = before every key.
    #[cfg_attr(feature = "http", schema(schema_with = crate::key::key_schema))]
    pub lower: Option<Value>,
    /// Inclusive upper end.
    #[cfg_attr(feature = "http", schema(schema_with = crate::key::key_schema))]
    pub upper: Option<Value>,
    /// Greatest committed key of the partition; `null` = before every key.
    #[cfg_attr(feature = "http", schema(schema_with = crate::key::key_schema))]
    pub checkpoint: Option<Value>,
    /// The checkpoint reached the upper end.
    pub ended: bool,
    /// Who holds the partition's claim, judged by PostgreSQL's clock
    /// (PAR-2).
    pub owner: Ownership,
    /// Keys whose mutation committed in this partition.
    pub rows_done: i64,
    /// Committed batches of this partition.
    pub batches_done: i64,
    /// Consecutive retryable failures of this partition (RT-2).
    pub attempts: i32,
    /// Earliest time it may be claimed again after a retryable error.
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Its last execution diagnostic, bounded.
    pub last_error: Option<String>,
    /// The batch size in force at its last batch; `null` before one.
    pub batch_size: Option<i32>,
    /// Its runner's throttle condition (THR-2), while a current claim
    /// holds the partition; `null` otherwise.
    pub throttle: Option<Throttle>,
    /// Rows per second of its live claim (OBS-5); `null` when no claim
    /// is live or its rate is unknown yet.
    #[serde(default)]
    pub rows_per_second: Option<f64>,
}

/// `none`, `held` or `expired`, judged by PostgreSQL's clock `now`.
fn disposition(
    owner: Option<&String>,
    until: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> &'static str {
    match (owner, until) {
        (Some(_), Some(until)) if until > now => "held",
        (Some(_), _) => "expired",
        _ => "none",
    }
}

impl PartitionView {
    fn from_row(row: &PartitionRow, now: DateTime<Utc>) -> Self {
        Self {
            part: row.part,
            lower: row.lower_json.clone(),
            upper: Some(row.upper_json.clone()),
            checkpoint: row.checkpoint_json.clone(),
            ended: row.ended(),
            owner: Ownership {
                disposition: disposition(row.owner.as_ref(), row.lease_expires_at, now).into(),
                worker: row.owner.clone(),
                until: row.lease_expires_at,
            },
            rows_done: row.rows_done,
            batches_done: row.batches_done,
            attempts: row.attempts,
            next_attempt_at: row.next_attempt_at,
            last_error: row.last_error.as_deref().map(bounded),
            batch_size: row.batch_size,
            throttle: Throttle::from_partition(row),
            rows_per_second: None,
        }
    }
}

/// A runner's throttle condition (THR-2): a runtime condition, never a
/// lifecycle state.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct Throttle {
    /// The health signal past its threshold (e.g. `replication_lag_bytes`).
    pub signal: String,
    /// Its value when last read; `null` when it could not be read.
    pub value: Option<f64>,
    /// The threshold it is past.
    pub threshold: Option<f64>,
    /// Signal, value and threshold in words, bounded.
    pub text: String,
    /// Since when the runner has been throttled.
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub since: Option<DateTime<Utc>>,
}

impl Throttle {
    /// The condition the row's `throttle` column holds, if it is current:
    /// reported by the runner of the row's generation while a claim is
    /// held. One reported under an earlier claim is history, not a
    /// condition (a paused or released row is not throttled). Fields of
    /// an unexpected shape are shown as unknown, never dropped with the
    /// condition (ADM-3).
    pub fn from_row(row: &BackfillRow) -> Option<Throttle> {
        Self::current(row.throttle.as_ref(), row.owner.is_some(), row.generation)
    }

    /// The same for a partition's runner (PAR-5): current only while the
    /// partition is claimed under the generation that reported it.
    pub fn from_partition(row: &PartitionRow) -> Option<Throttle> {
        Self::current(row.throttle.as_ref(), row.owner.is_some(), row.generation)
    }

    fn current(stored: Option<&Value>, claimed: bool, generation: i64) -> Option<Throttle> {
        let stored = stored?.as_object()?;
        if !claimed || stored.get("generation").and_then(Value::as_i64) != Some(generation) {
            return None;
        }
        let text = |name: &str| stored.get(name).and_then(Value::as_str);
        let signal = text("signal").map_or_else(|| "unknown".to_string(), |s| cut(s, 64));
        Some(Throttle {
            text: bounded(text("text").unwrap_or(&signal)),
            value: stored.get("value").and_then(Value::as_f64),
            threshold: stored.get("threshold").and_then(Value::as_f64),
            since: text("since")
                .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                .map(|t| t.with_timezone(&Utc)),
            signal,
        })
    }
}

/// The schema of the view's `settings`: each field of
/// [`crate::throttle::settings::Field`] an integer within its range, present only
/// when set.
#[cfg(feature = "http")]
fn settings_schema() -> utoipa::openapi::schema::Schema {
    settings_object(false)
        .description(Some(
            "The live settings set on this backfill, only the fields set; {} when none is.",
        ))
        .build()
        .into()
}

/// An object of the settings fields with their integer ranges, closed to
/// other names; in a change (`nullable`) each may also be `null` (clear).
#[cfg(feature = "http")]
pub(crate) fn settings_object(nullable: bool) -> utoipa::openapi::schema::ObjectBuilder {
    use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, SchemaType, Type};
    let kinds = if nullable {
        SchemaType::from_iter([Type::Integer, Type::Null])
    } else {
        SchemaType::Type(Type::Integer)
    };
    crate::throttle::settings::Field::ALL.into_iter().fold(
        ObjectBuilder::new().additional_properties(Some(AdditionalProperties::FreeForm(false))),
        |object, field| {
            let (min, max) = field.range();
            let bound = |v: u64| Some(usize::try_from(v).unwrap_or(usize::MAX));
            object.property(
                field.name(),
                ObjectBuilder::new()
                    .schema_type(kinds.clone())
                    .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                        utoipa::openapi::KnownFormat::Int64,
                    )))
                    .minimum(bound(min))
                    .maximum(bound(max)),
            )
        },
    )
}

impl BackfillView {
    /// Project a row. `required`/`auto` come from the deployment config.
    pub fn from_row(row: &BackfillRow, required: bool, auto: bool) -> Self {
        let disposition = disposition(row.owner.as_ref(), row.lease_expires_at, row.db_now);
        Self {
            id: row.id.clone(),
            description: row.description.as_deref().map(bounded),
            state: row.state,
            key_type: row.key_type.clone(),
            bound: row.bound_json.clone(),
            checkpoint: row.checkpoint_json.clone(),
            empty_source: row.empty_source,
            progress: Progress {
                rows_done: row.rows_done,
                total_rows: row.source_rows,
                fraction: fraction(row, row.rows_done),
                batches_done: row.batches_done,
                rows_per_second: None,
                sparkline: Vec::new(),
            },
            owner: Ownership {
                disposition: disposition.into(),
                worker: row.owner.clone(),
                until: row.lease_expires_at,
            },
            generation: row.generation,
            attempts: row.attempts,
            next_attempt_at: row.next_attempt_at,
            last_error: row
                .last_error
                .as_deref()
                .filter(|_| row.start_failure().is_none())
                .map(|m| Diagnostic {
                    kind: row.last_error_kind.clone(),
                    message: bounded(m),
                    at: row.last_error_at,
                }),
            start_failed: row.start_failure().map(|(kind, m)| Diagnostic {
                kind: Some(kind.to_string()),
                message: bounded(m),
                at: row.last_error_at,
            }),
            blocking_keys: None,
            validation: row
                .validation_outcome
                .as_ref()
                .map(|outcome| ValidationSummary {
                    outcome: outcome.clone(),
                    detail: row.validation_detail.as_deref().map(bounded),
                    at: row.validated_at,
                }),
            readiness: Readiness {
                required,
                gating: required && auto && row.state != State::Completed,
            },
            registered_at: row.registered_at,
            updated_at: row.updated_at,
            started_at: row.started_at,
            completed_at: row.completed_at,
            observed_at: row.db_now,
            settings: Settings::from_stored(&row.settings).to_json(),
            batch_size: row.batch_size,
            throttle: Throttle::from_row(row),
            waiting_for: Vec::new(),
            partitions: Vec::new(),
            journaled: false,
            undo_of: row.undo_of.clone(),
            undo: None,
            journal: None,
        }
    }

    /// The view of a partitioned backfill: `parts` are its partitions
    /// (those of other IDs are ignored), shown each, and `progress`
    /// aggregates them (PAR-5). An unknown total stays unknown (ADM-3).
    pub fn with_partitions(mut self, row: &BackfillRow, parts: &[PartitionRow]) -> Self {
        let parts: Vec<&PartitionRow> = parts.iter().filter(|p| p.backfill_id == row.id).collect();
        if parts.is_empty() {
            return self;
        }
        let rows_done = parts.iter().map(|p| p.rows_done).sum();
        self.progress.rows_done = rows_done;
        self.progress.batches_done = parts.iter().map(|p| p.batches_done).sum();
        self.progress.fraction = fraction(row, rows_done);
        self.partitions = parts
            .into_iter()
            .map(|p| PartitionView::from_row(p, row.db_now))
            .collect();
        // The backfill is throttled while any of its runners is: the
        // first throttled partition, named, stands for the backfill.
        if self.throttle.is_none() {
            self.throttle = self.partitions.iter().find_map(|p| {
                p.throttle.clone().map(|t| Throttle {
                    text: bounded(format!("partition {}: {}", p.part, t.text)),
                    ..t
                })
            });
        }
        self
    }
}

/// Progress as a fraction of the captured total: `null` when the total is
/// unknown (ADM-3), 1 once the checkpoint reached the bound.
fn fraction(row: &BackfillRow, rows_done: i64) -> Option<f64> {
    match row.state {
        State::Validating | State::Completed => Some(1.0),
        _ if row.empty_source => Some(1.0),
        State::Pending => None,
        _ => match row.source_rows {
            Some(total) if total > 0 => Some((rows_done as f64 / total as f64).min(1.0)),
            _ => None,
        },
    }
}

/// Who the caller is to the admin API and what it may do (AUTH-1): what
/// a client reads before it offers an action, rather than learn it from a
/// refusal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct CallerView {
    /// The principal the token names; `null` in trusted-network mode,
    /// where no individual is named.
    pub principal: Option<String>,
    /// `token` or `trusted-network`.
    pub authority: String,
    /// The capabilities held: `backfill:read`, `backfill:operate`,
    /// `backfill:inspect`.
    pub capabilities: Vec<String>,
}

/// A page of backfills, ordered by ID.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct BackfillPage {
    /// The backfills of this page, in ID order.
    pub items: Vec<BackfillView>,
    /// Pass as `after` for the next page; `null` = last page.
    pub next_after: Option<String>,
}

/// The response of an accepted action (200).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct ActionResponse {
    /// `applied` (the transition committed) or `converged` (already there,
    /// LC-3: nothing changed).
    pub outcome: String,
    /// The action that was requested (`start`, `pause`, `resume`, `retry`,
    /// ...).
    pub action: String,
    /// State before the action.
    pub prior_state: State,
    /// The backfill after the action.
    pub backfill: BackfillView,
}

/// The typed conflict (409, ADM-5).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct ConflictBody {
    /// `conflict` when the current state does not allow the action; a
    /// refusal of the backfill's own names its reason instead (`undone`,
    /// `not_journaled`, `undo_of_undo`, `journal_in_use`, `no_definition`).
    pub error: String,
    /// Why the action is refused, bounded (for a state conflict, the state
    /// it is not allowed from).
    pub message: String,
    /// The current server state.
    pub current: BackfillView,
}

/// An error (4xx/5xx other than 409 conflicts). Bounded and redacted.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct ErrorBody {
    /// Stable code: `unauthorized`, `forbidden`, `bad_request`,
    /// `not_found`, `method_not_allowed`, `idempotency_key_reused`,
    /// `invalid_settings`, `invalid_split`, `unsupported_media_type`,
    /// `payload_too_large`, `no_definition`, `too_many_requests`,
    /// `unavailable`, `internal`.
    pub error: String,
    /// What went wrong, in words; bounded and redacted (AUD-2).
    pub message: String,
    /// The setting an `invalid_settings` error is about, when it is about
    /// one; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// For a `not_found` of a backfill route, asked by a caller who may
    /// read: at most 3 known IDs within a small edit distance of the one
    /// asked for, nearest first; absent when there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub did_you_mean: Vec<String>,
}

/// The outcome of an explicit validation (VAL-4): exactly one of
/// `success`, `failure` or `current-state`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct ValidationResponse {
    /// `success`, `failure` or `current-state`.
    pub outcome: String,
    /// The backfill that was asked to validate.
    pub backfill_id: String,
    /// Lifecycle state when the validation ran (or did not).
    pub state: State,
    /// Generation observed; validation never changes it (VAL-5).
    pub generation: i64,
    /// Bounded diagnostic of a `failure`.
    pub detail: Option<String>,
    /// Why nothing ran (`current-state` only).
    pub reason: Option<String>,
    /// When the outcome was recorded (`success`/`failure`).
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub validated_at: Option<DateTime<Utc>>,
}

/// One audit record (AUD-1).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct AuditEntry {
    /// The record's sequence number, increasing in insertion order; pass it
    /// as `before` to page on.
    pub seq: i64,
    /// When the record was written (for a coalesced window, its first
    /// request).
    #[serde(serialize_with = "timestamp::serialize")]
    pub at: DateTime<Utc>,
    /// The backfill the action named; `*` when it named none, or when the
    /// requests of a coalesced window named different ones (AUD-3).
    pub backfill_id: String,
    /// The action requested; `*` when the requests of a coalesced window
    /// asked for different ones.
    pub action: String,
    /// The principal; `null` when the authority source claims no individual
    /// (trusted network, unauthenticated).
    pub actor: Option<String>,
    /// `token`, `trusted-network` or `none`.
    pub authority: String,
    /// Idempotency key or request id.
    pub correlation: Option<String>,
    /// The backfill's state before the action; `null` when it was not read
    /// (a refusal before the row was read).
    pub prior_state: Option<State>,
    /// The backfill's state after the action; `null` when it was not read.
    pub resulting_state: Option<State>,
    /// The generation the action left, where relevant.
    pub generation: Option<i64>,
    /// Bounded outcome code.
    pub outcome: String,
    /// A bounded, redacted detail of the outcome (AUD-2), escaped for
    /// display (AUD-3).
    pub detail: Option<String>,
    /// How many requests this record stands for: 1, or the count of a
    /// window of coalesced rejections of one source (API-3), whose first
    /// request the other fields describe.
    pub request_count: i64,
    /// Peer address of a coalesced window's requests.
    pub source: Option<String>,
    /// When the latest request of a coalesced window was counted.
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub last_at: Option<DateTime<Utc>>,
    /// The reason the operator gave (the `Backfill-Reason` header).
    pub reason: Option<String>,
}

/// Audit text as it may be shown (AUD-3): control characters (C0, DEL,
/// C1), invisible and bidirectional formatting characters are written as
/// `\u{XXXX}`, so a stored escape sequence cannot recolour a terminal, a
/// CR/LF cannot forge a line and an override cannot reorder what an
/// operator reads. Escaping twice changes nothing more, so every place
/// that shows audit text (the API, the web client, `ctl`) can apply it.
pub fn audit_text(text: &str) -> String {
    let unsafe_char = |c: char| {
        c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}' | '\u{feff}' | '\u{061c}')
    };
    if !text.chars().any(unsafe_char) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if unsafe_char(c) {
            out.push_str(&format!("\\u{{{:04x}}}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

impl From<AuditRow> for AuditEntry {
    /// Every text is escaped for display ([`audit_text`]): rows written
    /// before IDs were checked, or by another writer, may hold anything.
    fn from(r: AuditRow) -> Self {
        let shown = |t: String| audit_text(&t);
        Self {
            seq: r.seq,
            at: r.at,
            backfill_id: shown(r.backfill_id),
            action: shown(r.action),
            actor: r.actor.map(shown),
            authority: shown(r.authority),
            correlation: r.correlation.map(shown),
            prior_state: r.prior_state,
            resulting_state: r.resulting_state,
            generation: r.generation,
            outcome: shown(r.outcome),
            detail: r.detail.map(shown),
            request_count: r.request_count,
            source: r.source.map(shown),
            last_at: r.last_at,
            reason: r.reason.map(shown),
        }
    }
}

/// A page of audit records, newest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct AuditPage {
    /// The records of this page, newest first.
    pub items: Vec<AuditEntry>,
    /// Pass as `before` for the next page; `null` = last page.
    pub next_before: Option<i64>,
}

/// Timestamps as chrono's own `Serialize` writes them (RFC 3339, `Z`,
/// as many fraction digits as needed), formatted in one piece.
///
/// chrono serializes through `collect_str`, and serde_json then escapes
/// every small piece chrono's formatter writes. A list page holds about a
/// thousand timestamps, and that escaping was about a tenth of the admin
/// list's CPU profile. The text is the same; the test below
/// compares the two.
pub(super) mod timestamp {
    use chrono::{DateTime, SecondsFormat, Utc};
    use serde::Serializer;

    pub fn serialize<S: Serializer>(at: &DateTime<Utc>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&at.to_rfc3339_opts(SecondsFormat::AutoSi, true))
    }

    pub fn serialize_opt<S: Serializer>(
        at: &Option<DateTime<Utc>>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match at {
            Some(at) => serialize(at, s),
            None => s.serialize_none(),
        }
    }

    #[cfg(test)]
    mod tests {
        use chrono::{DateTime, NaiveDate, TimeZone, Utc};

        #[derive(serde::Serialize)]
        struct Ours(#[serde(serialize_with = "super::serialize")] DateTime<Utc>);

        #[test]
        fn api01_writes_what_chrono_writes() {
            let day = NaiveDate::from_ymd_opt(2026, 11, 30).expect("date");
            let mut cases: Vec<DateTime<Utc>> = [0, 1_000_000, 123_456_000, 123_456_789]
                .into_iter()
                .map(|nanos| {
                    let t = day.and_hms_nano_opt(8, 5, 9, nanos).expect("time");
                    Utc.from_utc_datetime(&t)
                })
                .collect();
            // A leap second, the epoch, and years outside 0000-9999.
            let leap = day
                .and_hms_nano_opt(23, 59, 59, 1_500_000_000)
                .expect("leap");
            cases.push(Utc.from_utc_datetime(&leap));
            cases.push(DateTime::UNIX_EPOCH);
            cases.push(DateTime::<Utc>::MIN_UTC);
            cases.push(DateTime::<Utc>::MAX_UTC);
            for at in cases {
                let chrono = serde_json::to_string(&at).expect("chrono");
                let ours = serde_json::to_string(&Ours(at)).expect("ours");
                assert_eq!(ours, chrono);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AUD-3: control, bidirectional and invisible characters are shown
    /// escaped, and escaping again changes nothing; ordinary text, accents
    /// and all, is shown as it is.
    #[test]
    fn aud03_audit_text_escapes_controls_and_bidi_overrides() {
        assert_eq!(audit_text("items.counter"), "items.counter");
        assert_eq!(audit_text("caf\u{e9} \u{2192}"), "caf\u{e9} \u{2192}");
        assert_eq!(
            audit_text("\u{1b}[31mRED\r\nfake\u{202e}txt\u{0}\u{85}\u{200b}"),
            "\\u{001b}[31mRED\\u{000d}\\u{000a}fake\\u{202e}txt\\u{0000}\\u{0085}\\u{200b}"
        );
        let once = audit_text("\u{1b}x\u{2066}");
        assert_eq!(audit_text(&once), once);
    }
    use chrono::TimeDelta;
    use serde_json::json;

    /// A fixed instant moved by `secs` seconds; the rows read the database
    /// clock (`db_now`) as `at(0)`.
    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).expect("time")
    }

    /// A stored throttle condition as a runner of `generation` reports it.
    fn reported(generation: i64, text: &str) -> Value {
        json!({
            "generation": generation,
            "signal": "replication_lag_bytes",
            "value": 2048.0,
            "threshold": 1024.0,
            "text": text,
            "since": "2027-01-15T08:00:00Z",
        })
    }

    /// The condition `reported(_, text)` is shown as.
    fn shown(text: &str) -> Throttle {
        Throttle {
            signal: "replication_lag_bytes".into(),
            value: Some(2048.0),
            threshold: Some(1024.0),
            text: text.into(),
            since: Some(
                DateTime::parse_from_rfc3339("2027-01-15T08:00:00Z")
                    .expect("since")
                    .into(),
            ),
        }
    }

    /// An unclaimed, unthrottled backfill in `state` with nothing counted.
    fn backfill(id: &str, state: State) -> BackfillRow {
        BackfillRow {
            id: id.into(),
            state,
            bound: None,
            bound_json: None,
            empty_source: false,
            checkpoint: None,
            checkpoint_json: None,
            key_type: Some("i64".into()),
            source_rows: None,
            generation: 3,
            owner: None,
            lease_expires_at: None,
            attempts: 0,
            next_attempt_at: None,
            last_error_kind: None,
            last_error: None,
            last_error_at: None,
            rows_done: 0,
            batches_done: 0,
            validation_outcome: None,
            validation_detail: None,
            validated_at: None,
            description: None,
            build_info: None,
            registered_at: at(-100),
            updated_at: at(-10),
            started_at: None,
            completed_at: None,
            settings: json!({}),
            batch_size: None,
            throttle: None,
            undo_of: None,
            db_now: at(0),
        }
    }

    /// An unclaimed, unthrottled partition `(0, 100]` of `backfill_id`
    /// with its checkpoint at 50.
    fn partition(backfill_id: &str, part: i32) -> PartitionRow {
        PartitionRow {
            backfill_id: backfill_id.into(),
            part,
            lower: Some(vec![0]),
            lower_json: Some(json!(0)),
            upper: vec![100],
            upper_json: json!(100),
            checkpoint: Some(vec![50]),
            checkpoint_json: Some(json!(50)),
            generation: 3,
            owner: None,
            lease_expires_at: None,
            attempts: 0,
            next_attempt_at: None,
            last_error: None,
            rows_done: 0,
            batches_done: 0,
            batch_size: None,
            throttle: None,
            updated_at: at(-10),
        }
    }

    /// The partition claimed under its generation and throttled with `text`.
    fn throttled(mut p: PartitionRow, text: &str) -> PartitionRow {
        p.owner = Some("worker-p".into());
        p.lease_expires_at = Some(at(30));
        p.throttle = Some(reported(p.generation, text));
        p
    }

    #[test]
    fn adm02_a_claim_is_held_only_before_its_lease_expiry_by_the_database_clock() {
        let now = at(0);
        let worker = "worker-1".to_string();
        let owner = Some(&worker);
        assert_eq!(
            disposition(owner, Some(now + TimeDelta::seconds(1)), now),
            "held"
        );
        // At the expiry instant the lease no longer holds.
        assert_eq!(disposition(owner, Some(now), now), "expired");
        assert_eq!(
            disposition(owner, Some(now - TimeDelta::seconds(1)), now),
            "expired"
        );
        // An owner without a lease expiry holds nothing, yet the claim is
        // still shown as someone's rather than as no claim at all.
        assert_eq!(disposition(owner, None, now), "expired");
        assert_eq!(
            disposition(None, Some(now + TimeDelta::seconds(1)), now),
            "none"
        );
        assert_eq!(disposition(None, None, now), "none");
    }

    #[test]
    fn thr02_a_throttle_is_current_only_under_a_claim_of_its_generation() {
        let stored = reported(3, "lag 2048 > 1024");
        assert_eq!(
            Throttle::current(Some(&stored), true, 3),
            Some(shown("lag 2048 > 1024"))
        );
        assert_eq!(
            Throttle::current(Some(&stored), false, 3),
            None,
            "unclaimed"
        );
        assert_eq!(
            Throttle::current(Some(&stored), true, 4),
            None,
            "later claim"
        );
        assert_eq!(Throttle::current(Some(&stored), false, 4), None);
        assert_eq!(Throttle::current(None, true, 3), None);
        // A generation of the wrong type cannot be matched to the claim.
        let text_generation = json!({"generation": "3", "signal": "s"});
        assert_eq!(Throttle::current(Some(&text_generation), true, 3), None);
        for not_object in [json!(null), json!("throttled"), json!([3]), json!(3)] {
            assert_eq!(Throttle::current(Some(&not_object), true, 3), None);
        }
    }

    #[test]
    fn thr02_a_current_throttle_with_missing_fields_shows_them_as_unknown() {
        let bare = json!({"generation": 3, "value": "high", "since": "yesterday"});
        assert_eq!(
            Throttle::current(Some(&bare), true, 3),
            Some(Throttle {
                signal: "unknown".into(),
                value: None,
                threshold: None,
                text: "unknown".into(),
                since: None,
            })
        );
        // Without a text of its own the condition is described by its signal.
        let untexted = json!({"generation": 3, "signal": "replication_lag_bytes"});
        let shown = Throttle::current(Some(&untexted), true, 3).expect("current");
        assert_eq!(shown.text, "replication_lag_bytes");
    }

    #[test]
    fn thr02_rows_and_partitions_report_their_own_current_throttle() {
        let mut row = backfill("b", State::Running);
        row.throttle = Some(reported(3, "row"));
        assert_eq!(Throttle::from_row(&row), None, "an unclaimed row");
        row.owner = Some("worker-1".into());
        assert_eq!(Throttle::from_row(&row), Some(shown("row")));
        row.generation = 4;
        assert_eq!(Throttle::from_row(&row), None, "a later claim");

        let mut part = partition("b", 0);
        part.throttle = Some(reported(3, "part"));
        assert_eq!(
            Throttle::from_partition(&part),
            None,
            "an unclaimed partition"
        );
        part.owner = Some("worker-p".into());
        assert_eq!(Throttle::from_partition(&part), Some(shown("part")));
        part.generation = 4;
        assert_eq!(Throttle::from_partition(&part), None, "a later claim");
    }

    #[test]
    fn cfg01_only_a_required_automatic_backfill_gates_readiness_until_it_completes() {
        let cases = [
            (false, false, State::Running, false),
            (false, false, State::Completed, false),
            (false, true, State::Running, false),
            (false, true, State::Completed, false),
            (true, false, State::Running, false),
            (true, false, State::Completed, false),
            (true, true, State::Running, true),
            (true, true, State::Completed, false),
        ];
        for (required, auto, state, gating) in cases {
            let view = BackfillView::from_row(&backfill("b", state), required, auto);
            assert_eq!(
                view.readiness,
                Readiness { required, gating },
                "required {required}, auto {auto}, {state:?}"
            );
        }
    }

    #[test]
    fn adm03_fraction_is_unknown_without_a_positive_total_and_capped_at_one() {
        let of = |state: State, total: Option<i64>, rows_done: i64| {
            let mut row = backfill("b", state);
            row.source_rows = total;
            fraction(&row, rows_done)
        };
        // Past the bound the backfill is done whatever was counted.
        assert_eq!(of(State::Validating, None, 0), Some(1.0));
        assert_eq!(of(State::Completed, None, 0), Some(1.0));
        // Before start nothing was captured, so a total is not trusted.
        assert_eq!(of(State::Pending, Some(10), 5), None);
        assert_eq!(of(State::Running, None, 5), None);
        assert_eq!(of(State::Running, Some(0), 0), None);
        assert_eq!(of(State::Running, Some(-1), 0), None);
        assert_eq!(of(State::Running, Some(10), 0), Some(0.0));
        assert_eq!(of(State::Running, Some(10), 5), Some(0.5));
        assert_eq!(of(State::Paused, Some(4), 1), Some(0.25));
        // Rows may be counted past the captured total (keys inserted
        // after start); the fraction still never exceeds one.
        assert_eq!(of(State::Running, Some(10), 15), Some(1.0));

        let mut empty = backfill("b", State::Running);
        empty.empty_source = true;
        assert_eq!(fraction(&empty, 0), Some(1.0));
    }

    #[test]
    fn adm02_a_backfill_view_projects_its_row() {
        let mut row = backfill("b", State::Running);
        row.source_rows = Some(20);
        row.rows_done = 5;
        row.batches_done = 2;
        row.owner = Some("worker-1".into());
        row.lease_expires_at = Some(at(30));
        row.throttle = Some(reported(3, "row"));
        let view = BackfillView::from_row(&row, false, true);
        assert_eq!(
            view.progress,
            Progress {
                rows_done: 5,
                total_rows: Some(20),
                fraction: Some(0.25),
                batches_done: 2,
                rows_per_second: None,
                sparkline: Vec::new(),
            }
        );
        assert_eq!(
            view.owner,
            Ownership {
                disposition: "held".into(),
                worker: Some("worker-1".into()),
                until: Some(at(30)),
            }
        );
        assert_eq!(view.throttle, Some(shown("row")));
        assert_eq!(view.observed_at, at(0));
        assert!(view.partitions.is_empty());
    }

    #[test]
    fn par05_progress_aggregates_the_backfills_own_partitions() {
        let mut row = backfill("b", State::Running);
        row.source_rows = Some(100);
        row.rows_done = 7;
        row.batches_done = 1;
        let mut first = partition("b", 0);
        first.rows_done = 10;
        first.batches_done = 2;
        let mut second = partition("b", 1);
        second.rows_done = 30;
        second.batches_done = 3;
        let mut foreign = throttled(partition("other", 5), "foreign");
        foreign.rows_done = 1000;
        foreign.batches_done = 100;

        let view = BackfillView::from_row(&row, false, false)
            .with_partitions(&row, &[first, foreign, second]);
        let parts: Vec<i32> = view.partitions.iter().map(|p| p.part).collect();
        assert_eq!(parts, [0, 1]);
        assert_eq!(
            view.progress,
            Progress {
                rows_done: 40,
                total_rows: Some(100),
                fraction: Some(0.4),
                batches_done: 5,
                rows_per_second: None,
                sparkline: Vec::new(),
            }
        );
        assert_eq!(view.throttle, None);
    }

    #[test]
    fn par05_without_partitions_of_its_own_the_view_is_the_rows() {
        let mut row = backfill("b", State::Running);
        row.source_rows = Some(100);
        row.rows_done = 7;
        let alone = BackfillView::from_row(&row, false, false);
        let foreign = throttled(partition("other", 0), "foreign");
        let view = alone.clone().with_partitions(&row, &[foreign]);
        assert_eq!(view, alone);
    }

    #[test]
    fn par05_thr2_the_first_throttled_partition_stands_for_an_unthrottled_backfill() {
        let mut row = backfill("b", State::Running);
        row.owner = Some("worker-1".into());
        let parts = [
            partition("b", 0),
            throttled(partition("b", 1), "lag high"),
            throttled(partition("b", 2), "lag higher"),
        ];
        let view = BackfillView::from_row(&row, false, false).with_partitions(&row, &parts);
        assert_eq!(view.throttle, Some(shown("partition 1: lag high")));
        // Each partition still shows its own condition, unprefixed.
        assert_eq!(view.partitions[1].throttle, Some(shown("lag high")));

        // The backfill's own current condition is kept over its partitions'.
        row.throttle = Some(reported(3, "row"));
        let view = BackfillView::from_row(&row, false, false).with_partitions(&row, &parts);
        assert_eq!(view.throttle, Some(shown("row")));
    }

    #[test]
    fn par05_a_partition_view_projects_its_row() {
        let mut ended = partition("b", 2);
        ended.checkpoint = Some(vec![100]);
        ended.checkpoint_json = Some(json!(100));
        ended.owner = Some("worker-p".into());
        ended.lease_expires_at = Some(at(30));
        ended.attempts = 2;
        ended.next_attempt_at = Some(at(60));
        ended.last_error = Some("x".repeat(600));
        ended.rows_done = 12;
        ended.batches_done = 4;
        ended.batch_size = Some(250);
        ended.throttle = Some(reported(3, "part"));
        assert_eq!(
            PartitionView::from_row(&ended, at(0)),
            PartitionView {
                part: 2,
                lower: Some(json!(0)),
                upper: Some(json!(100)),
                checkpoint: Some(json!(100)),
                ended: true,
                owner: Ownership {
                    disposition: "held".into(),
                    worker: Some("worker-p".into()),
                    until: Some(at(30)),
                },
                rows_done: 12,
                batches_done: 4,
                attempts: 2,
                next_attempt_at: Some(at(60)),
                last_error: Some(format!("{}...", "x".repeat(509))),
                batch_size: Some(250),
                throttle: Some(shown("part")),
                rows_per_second: None,
            }
        );

        // Judged by the clock passed in: the same lease is over later on.
        let later = PartitionView::from_row(&ended, at(30));
        assert_eq!(later.owner.disposition, "expired");

        let mut open = partition("b", 0);
        open.lower = None;
        open.lower_json = None;
        let view = PartitionView::from_row(&open, at(0));
        assert!(!view.ended);
        assert_eq!(view.lower, None);
        assert_eq!(view.owner.disposition, "none");
        assert_eq!(view.last_error, None);
    }

    #[test]
    fn aud01_an_audit_entry_copies_every_field_of_its_row() {
        let entry = AuditEntry::from(AuditRow {
            seq: 41,
            at: at(-5),
            backfill_id: "b".into(),
            action: "pause".into(),
            actor: Some("alice".into()),
            authority: "token".into(),
            correlation: Some("idem-1".into()),
            prior_state: Some(State::Running),
            resulting_state: Some(State::Paused),
            generation: Some(3),
            outcome: "applied".into(),
            detail: Some("by hand".into()),
            request_count: 6,
            source: Some("10.0.0.9".into()),
            last_at: Some(at(-1)),
            reason: Some("quiet hours".into()),
        });
        assert_eq!(
            serde_json::to_value(&entry).expect("serialize"),
            json!({
                "seq": 41,
                "at": "2027-01-15T07:59:55Z",
                "backfill_id": "b",
                "action": "pause",
                "actor": "alice",
                "authority": "token",
                "correlation": "idem-1",
                "prior_state": "running",
                "resulting_state": "paused",
                "generation": 3,
                "outcome": "applied",
                "detail": "by hand",
                "request_count": 6,
                "source": "10.0.0.9",
                "last_at": "2027-01-15T07:59:59Z",
                "reason": "quiet hours",
            })
        );
    }

    #[test]
    fn adm03_an_unknown_time_serializes_as_null() {
        #[derive(Serialize)]
        struct Opt(#[serde(serialize_with = "timestamp::serialize_opt")] Option<DateTime<Utc>>);

        assert_eq!(serde_json::to_string(&Opt(None)).expect("none"), "null");
        assert_eq!(
            serde_json::to_string(&Opt(Some(at(0)))).expect("some"),
            "\"2027-01-15T08:00:00Z\""
        );
    }
}
