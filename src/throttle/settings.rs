//! Live per-backfill settings (THR-3, THR-4): what an operator may change
//! while a backfill runs, without a restart.
//!
//! Settings are stored with the backfill row as a JSON object (the
//! `settings` column) and changed only by the audited settings action
//! ([`crate::Engine::update_settings`]). A field that is absent takes the
//! definition's value (batch size, target) or the process's default
//! (health thresholds, see [`crate::throttle::health::Thresholds`]); a change sets
//! fields and clears them with `null`, like a JSON merge patch.
//!
//! Every field is a non-negative integer with a range, so a value is
//! checked in one place and the stored object cannot grow past its column
//! domain. The set of fields is closed: an unknown name in a change is an
//! error, never silently dropped.

use super::window::RunWindow;
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// The most partitions a definition may allow (`Repair::partitions`,
/// PAR-1), and so the most a backfill's `concurrency` setting may be.
/// Defined here, with the settings it bounds, so that neither this file
/// nor the pacing that reads settings depends on the repair module.
pub const MAX_PARTITIONS: u32 = 64;

/// One setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Field {
    /// A fixed batch size, in place of the definition's batch limit.
    BatchSize,
    /// A target batch duration: the runner sizes batches toward it (THR-3).
    TargetBatchMs,
    /// The smallest size the adaptive sizing may choose.
    MinBatchSize,
    /// The largest size the adaptive sizing may choose.
    MaxBatchSize,
    /// A pause between batches.
    PauseMs,
    /// Replication lag limit of every standby, in bytes of WAL.
    MaxLagBytes,
    /// Replication lag limit of every standby, in time.
    MaxLagMs,
    /// WAL generated per second, server-wide.
    MaxWalBytesPerS,
    /// Sessions waiting for a lock on one of the repair's tables.
    MaxLockWaiters,
    /// Age of the oldest open transaction of another session.
    MaxXactAgeMs,
    /// How many partitions of a partitioned backfill run at once,
    /// fleet-wide (PAR-2, THR-4): a claim is granted only while fewer
    /// partitions hold live claims. Lowering it stops no batch in flight:
    /// the live claims beyond it (the highest partitions) are refused
    /// their next renewal, so their runners stop after their batch. No
    /// effect without partitions.
    Concurrency,
    /// The hour (UTC, 0 to 23) from which batches may start (FLT-3); set
    /// together with [`Field::WindowEndHour`].
    WindowStartHour,
    /// The hour (UTC, 0 to 23) from which batches may no longer start;
    /// a window whose end is not after its start wraps past midnight.
    WindowEndHour,
    /// A latency budget as a ratio of its baseline, in percent (150: the
    /// percentile at most 1.5 times what it is while the backfill holds
    /// back, THR-6).
    LatencyRatioPct,
    /// A latency budget as an absolute bound, in microseconds.
    LatencyMaxUs,
    /// The percentile a latency budget judges (default 99).
    LatencyPercentile,
}

/// The largest batch an operator may set: a batch is one transaction, and
/// one much larger than this holds its row locks and WAL for too long.
pub const MAX_BATCH_SIZE: u64 = 100_000;

impl Field {
    /// Every field, in the order they are listed and audited.
    pub const ALL: [Field; 16] = [
        Field::BatchSize,
        Field::TargetBatchMs,
        Field::MinBatchSize,
        Field::MaxBatchSize,
        Field::PauseMs,
        Field::MaxLagBytes,
        Field::MaxLagMs,
        Field::MaxWalBytesPerS,
        Field::MaxLockWaiters,
        Field::MaxXactAgeMs,
        Field::Concurrency,
        Field::WindowStartHour,
        Field::WindowEndHour,
        Field::LatencyRatioPct,
        Field::LatencyMaxUs,
        Field::LatencyPercentile,
    ];

    /// The field's name in JSON, the CLI (with dashes) and the audit log.
    pub fn name(self) -> &'static str {
        match self {
            Field::BatchSize => "batch_size",
            Field::TargetBatchMs => "target_batch_ms",
            Field::MinBatchSize => "min_batch_size",
            Field::MaxBatchSize => "max_batch_size",
            Field::PauseMs => "pause_ms",
            Field::MaxLagBytes => "max_lag_bytes",
            Field::MaxLagMs => "max_lag_ms",
            Field::MaxWalBytesPerS => "max_wal_bytes_per_s",
            Field::MaxLockWaiters => "max_lock_waiters",
            Field::MaxXactAgeMs => "max_xact_age_ms",
            Field::Concurrency => "concurrency",
            Field::WindowStartHour => "window_start_hour",
            Field::WindowEndHour => "window_end_hour",
            Field::LatencyRatioPct => "latency_ratio_pct",
            Field::LatencyMaxUs => "latency_max_us",
            Field::LatencyPercentile => "latency_percentile",
        }
    }

    /// The field named `name`.
    pub fn parse(name: &str) -> Option<Field> {
        Field::ALL.into_iter().find(|f| f.name() == name)
    }

    /// The inclusive range of accepted values.
    pub fn range(self) -> (u64, u64) {
        match self {
            Field::BatchSize | Field::MinBatchSize | Field::MaxBatchSize => (1, MAX_BATCH_SIZE),
            // Below 10 ms a batch's round trips are most of it; above ten
            // minutes a batch outlives any sensible statement timeout.
            Field::TargetBatchMs => (10, 600_000),
            Field::PauseMs => (0, 3_600_000),
            Field::MaxLagBytes | Field::MaxWalBytesPerS => (0, 1 << 50),
            Field::MaxLagMs => (0, 86_400_000),
            Field::MaxLockWaiters => (0, 100_000),
            // The batches' own transactions are short but not instant.
            Field::MaxXactAgeMs => (1_000, 86_400_000),
            // At least one, or a partitioned backfill could never run;
            // at most the partitions a definition may allow.
            Field::Concurrency => (1, MAX_PARTITIONS as u64),
            Field::WindowStartHour | Field::WindowEndHour => (0, 23),
            // A target at or under the baseline could never be met; a
            // hundredfold is no budget any more.
            Field::LatencyRatioPct => (101, 10_000),
            // From a tenth of a millisecond (a cached read on a local
            // server) to a minute.
            Field::LatencyMaxUs => (100, 60_000_000),
            // A budget guards the tail; p100 is one sample's accident.
            Field::LatencyPercentile => (50, 99),
        }
    }
}

/// Why a settings value or change is refused. Nothing is changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// The change is not a JSON object.
    #[error("settings must be a JSON object")]
    NotAnObject,
    /// The change sets nothing.
    #[error("the change names no setting")]
    Empty,
    /// A name that is not a setting.
    #[error("unknown setting {0:?}")]
    UnknownField(String),
    /// A value that is not a non-negative integer or null.
    #[error("{field} must be a non-negative integer or null")]
    NotAnInteger {
        /// The setting's name.
        field: &'static str,
    },
    /// A value outside the field's range.
    #[error("{field} must be between {min} and {max}, got {got}")]
    OutOfRange {
        /// The setting's name.
        field: &'static str,
        /// The least value allowed, in the setting's unit, which its
        /// name's suffix states (`_ms`, `_bytes`, `_bytes_per_s`; a count
        /// without one).
        min: u64,
        /// The greatest value allowed.
        max: u64,
        /// The value given.
        got: u64,
    },
    /// Two settings that contradict each other.
    #[error("{0}")]
    Conflict(&'static str),
    /// Two settings of which at most one may be set.
    #[error("{field} and {other} exclude each other: clear one with null")]
    Excludes {
        /// The setting named as refused.
        field: &'static str,
        /// The one it excludes.
        other: &'static str,
    },
    /// A run window that is half set or can never open (FLT-3).
    #[error("{field}: {problem}")]
    Window {
        /// The setting that makes the window wrong.
        field: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A target batch duration the batch's statement timeout would cut
    /// short: a batch sized toward it would be cancelled at the timeout
    /// instead of committing.
    #[error("{field} must be below the batch statement timeout of {timeout_ms} ms, got {got}")]
    NotBelowTimeout {
        /// The setting's name (`target_batch_ms`).
        field: &'static str,
        /// The engine's batch statement timeout, in milliseconds.
        timeout_ms: u64,
        /// The value given, in milliseconds.
        got: u64,
    },
}

impl SettingsError {
    /// The setting the error is about, when it is about one.
    pub fn field(&self) -> Option<&str> {
        match self {
            SettingsError::UnknownField(name) => Some(name),
            SettingsError::NotAnInteger { field }
            | SettingsError::OutOfRange { field, .. }
            | SettingsError::NotBelowTimeout { field, .. }
            | SettingsError::Excludes { field, .. }
            | SettingsError::Window { field, .. } => Some(field),
            _ => None,
        }
    }
}

/// The settings of one backfill: the fields set, each within its range.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settings(BTreeMap<Field, u64>);

impl Settings {
    /// The value of `field`, if set.
    pub fn get(&self, field: Field) -> Option<u64> {
        self.0.get(&field).copied()
    }

    /// A value of a field whose range fits `u32` (sizes and milliseconds
    /// up to an hour).
    fn get_u32(&self, field: Field) -> Option<u32> {
        self.get(field)
            .map(|v| u32::try_from(v).unwrap_or(u32::MAX))
    }

    /// The fixed batch size, if set.
    pub fn batch_size(&self) -> Option<u32> {
        self.get_u32(Field::BatchSize)
    }

    /// The target batch duration, if set.
    pub fn target_batch(&self) -> Option<std::time::Duration> {
        self.get(Field::TargetBatchMs)
            .map(std::time::Duration::from_millis)
    }

    /// The adaptive sizing's smallest size, if set.
    pub fn min_batch_size(&self) -> Option<u32> {
        self.get_u32(Field::MinBatchSize)
    }

    /// The adaptive sizing's largest size, if set.
    pub fn max_batch_size(&self) -> Option<u32> {
        self.get_u32(Field::MaxBatchSize)
    }

    /// The pause between batches (zero when unset).
    pub fn pause(&self) -> std::time::Duration {
        std::time::Duration::from_millis(self.get(Field::PauseMs).unwrap_or(0))
    }

    /// Whether nothing is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The settings as stored: a JSON object of the fields set.
    pub fn to_json(&self) -> Value {
        Value::Object(
            self.0
                .iter()
                .map(|(f, v)| (f.name().to_string(), Value::from(*v)))
                .collect(),
        )
    }

    /// Settings read back from the row. The column's domain keeps it an
    /// object; a field this release does not know, or a value out of its
    /// range (written by another release), is left out rather than failing
    /// every batch: the default applies, as for an unset field.
    pub fn from_stored(value: &Value) -> Settings {
        let mut settings = Settings::default();
        if let Value::Object(map) = value {
            for (name, v) in map {
                if let (Some(field), Some(v)) = (Field::parse(name), v.as_u64()) {
                    let (min, max) = field.range();
                    if (min..=max).contains(&v) {
                        settings.0.insert(field, v);
                    }
                }
            }
        }
        settings
    }

    /// These settings with `change` applied: each named field set to its
    /// value, or cleared by `null`. Every name, value and the result as a
    /// whole are checked; on any error nothing is applied.
    pub fn apply(&self, change: &Value) -> Result<Settings, SettingsError> {
        let Value::Object(change) = change else {
            return Err(SettingsError::NotAnObject);
        };
        if change.is_empty() {
            return Err(SettingsError::Empty);
        }
        let mut next = self.clone();
        for (name, value) in change {
            let field = Field::parse(name)
                .ok_or_else(|| SettingsError::UnknownField(crate::failure::cut(name, 64)))?;
            if value.is_null() {
                next.0.remove(&field);
                continue;
            }
            let v = value.as_u64().ok_or(SettingsError::NotAnInteger {
                field: field.name(),
            })?;
            let (min, max) = field.range();
            if !(min..=max).contains(&v) {
                return Err(SettingsError::OutOfRange {
                    field: field.name(),
                    min,
                    max,
                    got: v,
                });
            }
            next.0.insert(field, v);
        }
        next.validate()?;
        Ok(next)
    }

    /// The run window (FLT-3), when both of its hours are set.
    pub fn window(&self) -> Option<RunWindow> {
        RunWindow::new(
            self.get(Field::WindowStartHour)?,
            self.get(Field::WindowEndHour)?,
        )
        .ok()
    }

    /// The rules between fields.
    pub fn validate(&self) -> Result<(), SettingsError> {
        match (
            self.get(Field::WindowStartHour),
            self.get(Field::WindowEndHour),
        ) {
            (Some(_), None) => {
                return Err(SettingsError::Window {
                    field: Field::WindowEndHour.name(),
                    problem: "a run window needs its end hour too (or clear both with null)",
                })
            }
            (None, Some(_)) => {
                return Err(SettingsError::Window {
                    field: Field::WindowStartHour.name(),
                    problem: "a run window needs its start hour too (or clear both with null)",
                })
            }
            (Some(start), Some(end)) if start == end => {
                return Err(SettingsError::Window {
                    field: Field::WindowEndHour.name(),
                    problem: "a run window whose end equals its start never opens",
                })
            }
            _ => {}
        }
        if self.batch_size().is_some() && self.target_batch().is_some() {
            return Err(SettingsError::Conflict(
                "batch_size and target_batch_ms exclude each other: clear one with null",
            ));
        }
        if self.get(Field::LatencyRatioPct).is_some() && self.get(Field::LatencyMaxUs).is_some() {
            return Err(SettingsError::Excludes {
                field: Field::LatencyMaxUs.name(),
                other: Field::LatencyRatioPct.name(),
            });
        }
        if let (Some(min), Some(max)) = (self.min_batch_size(), self.max_batch_size()) {
            if min > max {
                return Err(SettingsError::Conflict(
                    "min_batch_size must not exceed max_batch_size",
                ));
            }
        }
        Ok(())
    }

    /// Whether a batch sized toward the target duration can commit before
    /// the batch's `statement_timeout` cancels it: the target must be
    /// below the timeout. Checked where the timeout is known (the engine
    /// that stores the settings), not in [`Settings::apply`].
    pub fn fits_timeout(&self, statement_timeout: Duration) -> Result<(), SettingsError> {
        let timeout_ms = u64::try_from(statement_timeout.as_millis()).unwrap_or(u64::MAX);
        match self.get(Field::TargetBatchMs) {
            Some(got) if got >= timeout_ms => Err(SettingsError::NotBelowTimeout {
                field: Field::TargetBatchMs.name(),
                timeout_ms,
                got,
            }),
            _ => Ok(()),
        }
    }

    /// What changed from `self` to `next`, for the audit log:
    /// `batch_size: 500 -> 100; pause_ms: unset -> 250`.
    pub fn diff(&self, next: &Settings) -> String {
        let mut out = String::new();
        for field in Field::ALL {
            let (a, b) = (self.get(field), next.get(field));
            if a == b {
                continue;
            }
            let show = |v: Option<u64>| v.map_or("unset".to_string(), |v| v.to_string());
            if !out.is_empty() {
                out.push_str("; ");
            }
            let _ = write!(out, "{}: {} -> {}", field.name(), show(a), show(b));
        }
        if out.is_empty() {
            out.push_str("no change");
        }
        out
    }
}

impl From<&Settings> for Map<String, Value> {
    fn from(settings: &Settings) -> Self {
        match settings.to_json() {
            Value::Object(map) => map,
            _ => Map::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn thr04_apply_sets_clears_and_checks_every_field() {
        let s = Settings::default()
            .apply(&json!({"batch_size": 500, "pause_ms": 0}))
            .unwrap();
        assert_eq!(s.batch_size(), Some(500));
        assert_eq!(s.pause(), std::time::Duration::ZERO);
        assert_eq!(s.to_json(), json!({"batch_size": 500, "pause_ms": 0}));
        let t = s
            .apply(&json!({"batch_size": null, "target_batch_ms": 50}))
            .unwrap();
        assert_eq!(t.batch_size(), None);
        assert_eq!(t.target_batch(), Some(std::time::Duration::from_millis(50)));
        assert_eq!(
            s.diff(&t),
            "batch_size: 500 -> unset; target_batch_ms: unset -> 50"
        );
        assert_eq!(t.diff(&t), "no change");
        for field in Field::ALL {
            let (min, max) = field.range();
            // A run window's hour goes with the other one (FLT-3), set
            // here to an hour that is neither end of the range.
            let partner = match field {
                Field::WindowStartHour => Some(Field::WindowEndHour),
                Field::WindowEndHour => Some(Field::WindowStartHour),
                _ => None,
            };
            let base = Settings(partner.map(|p| (p, 12)).into_iter().collect());
            assert!(base.apply(&json!({field.name(): min})).is_ok());
            assert!(base.apply(&json!({field.name(): max})).is_ok());
            assert_eq!(
                base.apply(&json!({field.name(): max + 1})),
                Err(SettingsError::OutOfRange {
                    field: field.name(),
                    min,
                    max,
                    got: max + 1
                })
            );
            if min > 0 {
                assert!(matches!(
                    base.apply(&json!({field.name(): min - 1})),
                    Err(SettingsError::OutOfRange { .. })
                ));
            }
            for bad in [json!(-1), json!(1.5), json!("5"), json!(true)] {
                assert_eq!(
                    Settings::default().apply(&json!({field.name(): bad})),
                    Err(SettingsError::NotAnInteger {
                        field: field.name()
                    })
                );
            }
            assert_eq!(Field::parse(field.name()), Some(field));
        }
    }

    #[test]
    fn thr04_apply_refuses_unknown_empty_and_contradicting_changes() {
        let s = Settings::default();
        assert_eq!(
            s.apply(&json!({"batch_sise": 5})),
            Err(SettingsError::UnknownField("batch_sise".into()))
        );
        assert_eq!(s.apply(&json!({})), Err(SettingsError::Empty));
        assert_eq!(s.apply(&json!([1])), Err(SettingsError::NotAnObject));
        assert!(matches!(
            s.apply(&json!({"batch_size": 5, "target_batch_ms": 50})),
            Err(SettingsError::Conflict(_))
        ));
        assert!(matches!(
            s.apply(&json!({"min_batch_size": 50, "max_batch_size": 5})),
            Err(SettingsError::Conflict(_))
        ));
        assert!(s
            .apply(&json!({"min_batch_size": 5, "max_batch_size": 5}))
            .is_ok());
    }

    #[test]
    fn thr04_target_must_be_below_the_statement_timeout() {
        let timeout = Duration::from_secs(30);
        let at = |ms: u64| {
            Settings::default()
                .apply(&json!({"target_batch_ms": ms}))
                .unwrap()
        };
        assert_eq!(at(29_999).fits_timeout(timeout), Ok(()));
        let error = at(30_000).fits_timeout(timeout).unwrap_err();
        assert_eq!(
            error,
            SettingsError::NotBelowTimeout {
                field: "target_batch_ms",
                timeout_ms: 30_000,
                got: 30_000
            }
        );
        assert_eq!(error.field(), Some("target_batch_ms"));
        assert_eq!(Settings::default().fits_timeout(Duration::ZERO), Ok(()));
    }

    #[test]
    fn thr04_stored_settings_keep_known_fields_in_range() {
        let s = Settings::from_stored(&json!({
            "batch_size": 7, "pause_ms": 10, "later_field": 3, "max_batch_size": 0
        }));
        assert_eq!(s.to_json(), json!({"batch_size": 7, "pause_ms": 10}));
        assert!(Settings::from_stored(&json!(null)).is_empty());
    }
}
