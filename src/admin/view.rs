//! What the admin boundary shows (ADM-2, ADM-3): projections of one
//! PostgreSQL read, with unknown values kept unknown (`null`), never zero.

use crate::failure::cut;
use crate::lifecycle::State;
use crate::repair::bounded;
use crate::settings::Settings;
use crate::store::{AuditRow, BackfillRow, PartitionRow};
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

/// The schema of a rendered key (`crate::key::render_json`), declared as
/// what the server sends (API-1): an integer (`i32`, `i64`), a string
/// (text, UUID, RFC 3339 timestamp), a flat array of those for a compound
/// key, or `null`.
#[cfg(feature = "http")]
fn key_schema() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Type};
    let scalar = || {
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::Integer).format(Some(
                utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::Int64),
            )))
            .item(ObjectBuilder::new().schema_type(Type::String))
    };
    scalar()
        .item(
            ArrayBuilder::new()
                .items(scalar())
                .min_items(Some(2))
                .max_items(Some(3)),
        )
        .item(ObjectBuilder::new().schema_type(Type::Null))
        .description(Some(
            "A key in its own JSON type: integer for i32/i64 keys, string for text, UUID and \
             timestamp keys, an array of those for compound keys; null when unknown or absent.",
        ))
        .build()
        .into()
}

/// One backfill as the admin API shows it (ADM-2).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct BackfillView {
    pub id: String,
    pub description: Option<String>,
    /// Lifecycle state.
    pub state: State,
    /// Key type of bound and checkpoint (e.g. `i64`).
    pub key_type: Option<String>,
    /// Inclusive upper bound in the key's own type; `null` before start,
    /// for an empty source set, or when the stored key cannot be decoded.
    #[cfg_attr(feature = "http", schema(schema_with = key_schema))]
    pub bound: Option<Value>,
    /// Greatest committed key; `null` = before every key (or undecodable).
    #[cfg_attr(feature = "http", schema(schema_with = key_schema))]
    pub checkpoint: Option<Value>,
    /// `start` found nothing to repair (EX-1).
    pub empty_source: bool,
    pub progress: Progress,
    pub owner: Ownership,
    /// Fencing generation (CLM-1).
    pub generation: i64,
    /// Consecutive failed attempts (RT-2).
    pub attempts: i32,
    /// Earliest time a worker may claim it again after a retryable error.
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Last execution diagnostic.
    pub last_error: Option<Diagnostic>,
    /// Latest validation outcome and time.
    pub validation: Option<ValidationSummary>,
    pub readiness: Readiness,
    #[serde(serialize_with = "timestamp::serialize")]
    pub registered_at: DateTime<Utc>,
    #[serde(serialize_with = "timestamp::serialize")]
    pub updated_at: DateTime<Utc>,
    #[serde(serialize_with = "timestamp::serialize_opt")]
    pub started_at: Option<DateTime<Utc>>,
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
    /// Each partition of a partitioned backfill, by part (PAR-5); empty
    /// for a backfill without partitions. `progress` then aggregates them.
    /// Read as empty when absent, from a server without partitions.
    #[serde(default)]
    pub partitions: Vec<PartitionView>,
}

/// One partition as the admin API shows it (PAR-5): its range
/// `(lower, upper]`, checkpoint, claim and progress.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct PartitionView {
    /// The partition's number, from 0 in key order.
    pub part: i32,
    /// Exclusive lower end; `null` = before every key.
    #[cfg_attr(feature = "http", schema(schema_with = key_schema))]
    pub lower: Option<Value>,
    /// Inclusive upper end.
    #[cfg_attr(feature = "http", schema(schema_with = key_schema))]
    pub upper: Option<Value>,
    /// Greatest committed key of the partition; `null` = before every key.
    #[cfg_attr(feature = "http", schema(schema_with = key_schema))]
    pub checkpoint: Option<Value>,
    /// The checkpoint reached the upper end.
    pub ended: bool,
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
/// [`crate::settings::Field`] an integer within its range, present only
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
    crate::settings::Field::ALL.into_iter().fold(
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
            },
            owner: Ownership {
                disposition: disposition.into(),
                worker: row.owner.clone(),
                until: row.lease_expires_at,
            },
            generation: row.generation,
            attempts: row.attempts,
            next_attempt_at: row.next_attempt_at,
            last_error: row.last_error.as_deref().map(|m| Diagnostic {
                kind: row.last_error_kind.clone(),
                message: bounded(m),
                at: row.last_error_at,
            }),
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
            partitions: Vec::new(),
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

/// A page of backfills, ordered by ID.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct BackfillPage {
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
    /// Always `conflict`.
    pub error: String,
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
    pub message: String,
    /// The setting an `invalid_settings` error is about, when it is about
    /// one; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// The outcome of an explicit validation (VAL-4): exactly one of
/// `success`, `failure` or `current-state`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct ValidationResponse {
    /// `success`, `failure` or `current-state`.
    pub outcome: String,
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
    pub seq: i64,
    #[serde(serialize_with = "timestamp::serialize")]
    pub at: DateTime<Utc>,
    pub backfill_id: String,
    pub action: String,
    /// The principal; `null` when the authority source claims no individual
    /// (trusted network, unauthenticated).
    pub actor: Option<String>,
    /// `token`, `trusted-network` or `none`.
    pub authority: String,
    /// Idempotency key or request id.
    pub correlation: Option<String>,
    pub prior_state: Option<State>,
    pub resulting_state: Option<State>,
    pub generation: Option<i64>,
    /// Bounded outcome code.
    pub outcome: String,
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
}

impl From<AuditRow> for AuditEntry {
    fn from(r: AuditRow) -> Self {
        Self {
            seq: r.seq,
            at: r.at,
            backfill_id: r.backfill_id,
            action: r.action,
            actor: r.actor,
            authority: r.authority,
            correlation: r.correlation,
            prior_state: r.prior_state,
            resulting_state: r.resulting_state,
            generation: r.generation,
            outcome: r.outcome,
            detail: r.detail,
            request_count: r.request_count,
            source: r.source,
            last_at: r.last_at,
        }
    }
}

/// A page of audit records, newest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[cfg_attr(feature = "http", derive(utoipa::ToSchema))]
pub struct AuditPage {
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
mod timestamp {
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
        fn writes_what_chrono_writes() {
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
