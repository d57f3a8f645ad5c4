//! The command line of `backfill ctl`: its global flags, its subcommands
//! and the settings change `set` asks for, checked before anything is
//! sent.

use super::error::{one_line, CtlError};
use backfill::throttle::settings::Field;
use clap::{Args, Subcommand};
use serde_json::Value;

/// Arguments of `backfill ctl`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// Base URL of the admin API.
    #[arg(long, env = "BACKFILL_URL", default_value = "http://127.0.0.1:8081")]
    pub url: String,
    /// Bearer token. Prefer BACKFILL_TOKEN or --token-file: the command
    /// line is readable by every local user.
    #[arg(long, env = "BACKFILL_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// A file holding the bearer token (its first line), instead of
    /// --token.
    #[arg(long, env = "BACKFILL_TOKEN_FILE", conflicts_with = "token")]
    pub token_file: Option<std::path::PathBuf>,
    /// Whether --token came on the command line (set by the binary, which
    /// sees where each value came from): `ctl` then warns once.
    #[arg(skip)]
    pub token_on_argv: bool,
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Why you act (at most 2000 characters once percent-encoded, about
    /// 200 in any script): stored with the action's
    /// audit record and shown by `audit` and `history`. For start, pause,
    /// resume, retry, validate, undo, journal prune and set.
    #[arg(long, global = true)]
    pub reason: Option<String>,
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// `backfill ctl` subcommands.
#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// List backfills.
    List,
    /// Show one backfill in detail.
    Show { id: String },
    /// Start a pending backfill (captures its bound).
    Start { id: String },
    /// Pause a running or validating backfill.
    Pause { id: String },
    /// Resume a paused backfill.
    Resume { id: String },
    /// Retry a blocked or failed backfill at its bound and checkpoint.
    Retry { id: String },
    /// Run explicit validation (read-only).
    Validate { id: String },
    /// Run a pending or paused backfill's next batches exactly as the real
    /// run would, roll them back, and report them with a forecast for the
    /// remaining range (changes nothing; audited).
    DryRun {
        id: String,
        /// Batches to run, 1 to 20 (the server's default: 3).
        #[arg(long, value_name = "K")]
        batches: Option<u32>,
        /// Changed rows to show with their values, 0 to 50 (default 5);
        /// needs a token with backfill:inspect.
        #[arg(long, value_name = "N")]
        sample: Option<u32>,
    },
    /// Undo a journaled backfill: start its reverse backfill (`<id>.undo`),
    /// which restores every journaled row that still holds what the repair
    /// wrote; a row changed since is left alone and counted as a conflict.
    Undo { id: String },
    /// The before-image journal of a backfill.
    #[command(subcommand)]
    Journal(JournalCommand),
    /// Change live settings while the backfill runs (each process applies
    /// them at its next batch); prints the resulting settings.
    // A negative value is a value (refused by its parser, naming the
    // flag), not an unknown flag.
    #[command(allow_negative_numbers = true)]
    Set(Box<SetArgs>),
    /// Show the audit log of one backfill.
    Audit {
        id: String,
        /// Number of records.
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// Show what happened to one backfill, oldest first: claims, state
    /// changes with their diagnostics, retryable errors, throttling,
    /// validations and the operator actions that took effect.
    History {
        id: String,
        /// Number of the newest entries shown (1 to 500).
        #[arg(long, default_value_t = 50)]
        limit: i64,
    },
    /// A fleet of databases (served by a fleet's listener): each database
    /// with its availability and backfills, and the fleet's totals; or an
    /// action on a backfill in every database, or in one.
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// Live table with progress bars, rows/s and ETA.
    Watch {
        /// Only this backfill.
        id: Option<String>,
        /// Seconds between refreshes.
        #[arg(long, default_value_t = 2.0)]
        interval: f64,
        /// Stop after this many refreshes (default: until interrupted).
        #[arg(long)]
        count: Option<u64>,
    },
}

/// `backfill ctl fleet` subcommands.
#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Every database: availability, readiness, backfills by state,
    /// rows/s and ETA; then the fleet's totals.
    Status,
    /// Start the backfill in every database (or in `--database`).
    Start(FleetAction),
    /// Pause the backfill in every database (or in `--database`).
    Pause(FleetAction),
    /// Resume the backfill in every database (or in `--database`).
    Resume(FleetAction),
    /// Retry the backfill in every database (or in `--database`).
    Retry(FleetAction),
    /// Change the backfill's live settings in every database (or in
    /// `--database`), with the flags of `ctl set`; each database applies
    /// or refuses the change on its own.
    #[command(allow_negative_numbers = true)]
    Set(Box<FleetSet>),
    /// Cap how many databases run a repair at once (its rollout), or lift
    /// the cap with --clear; applies to the fleet's next claims.
    Rollout {
        id: String,
        /// The most databases that run it at once (at least 1).
        #[arg(
            long,
            value_name = "N",
            conflicts_with = "clear",
            required_unless_present = "clear"
        )]
        max_databases: Option<u32>,
        /// Lift the cap.
        #[arg(long)]
        clear: bool,
    },
}

/// A settings change for the fleet: `ctl set`'s arguments, and the one
/// database it is limited to, if any.
#[derive(Debug, Args)]
pub struct FleetSet {
    #[command(flatten)]
    pub settings: SetArgs,
    /// Only this database of the fleet.
    #[arg(long)]
    pub database: Option<String>,
}

/// The backfill a fleet action names, and the one database it is limited
/// to, if any.
#[derive(Debug, Args)]
pub struct FleetAction {
    pub id: String,
    /// Only this database of the fleet.
    #[arg(long)]
    pub database: Option<String>,
}

/// `backfill ctl journal` subcommands.
#[derive(Debug, Subcommand)]
pub enum JournalCommand {
    /// Delete the journal of a backfill (refused while it runs or while its
    /// undo has not completed); it can no longer be undone afterwards.
    Prune { id: String },
}

/// Arguments of `backfill ctl set`: each flag sets one setting (the server
/// checks its range), `--clear` removes one so its default applies again.
#[derive(Debug, Args)]
pub struct SetArgs {
    pub id: String,
    /// A fixed batch size (excludes --target-batch-ms).
    #[arg(long, value_name = "N", value_parser = |s: &str| setting_value(Field::BatchSize, s))]
    pub batch_size: Option<u64>,
    /// A target batch duration in ms: the size adapts toward it.
    #[arg(long, value_name = "N", value_parser = |s: &str| setting_value(Field::TargetBatchMs, s))]
    pub target_batch_ms: Option<u64>,
    /// The smallest size the adaptive sizing may choose.
    #[arg(long, value_name = "N", value_parser = |s: &str| setting_value(Field::MinBatchSize, s))]
    pub min_batch_size: Option<u64>,
    /// The largest size the adaptive sizing may choose.
    #[arg(long, value_name = "N", value_parser = |s: &str| setting_value(Field::MaxBatchSize, s))]
    pub max_batch_size: Option<u64>,
    /// Pause between batches, in ms.
    #[arg(long, value_name = "N", value_parser = |s: &str| setting_value(Field::PauseMs, s))]
    pub pause_ms: Option<u64>,
    /// Replication lag limit of every standby, in bytes.
    #[arg(long, value_name = "N", value_parser = |s: &str| setting_value(Field::MaxLagBytes, s))]
    pub max_lag_bytes: Option<u64>,
    /// Replication lag limit of every standby, in ms.
    #[arg(long, value_name = "N", value_parser = |s: &str| setting_value(Field::MaxLagMs, s))]
    pub max_lag_ms: Option<u64>,
    /// WAL generated per second, server-wide.
    #[arg(long, value_name = "N", value_parser = |s: &str| setting_value(Field::MaxWalBytesPerS, s))]
    pub max_wal_bytes_per_s: Option<u64>,
    /// Sessions waiting for a lock on the repair's tables.
    #[arg(long, value_name = "N", value_parser = |s: &str| setting_value(Field::MaxLockWaiters, s))]
    pub max_lock_waiters: Option<u64>,
    /// Age of the oldest open transaction of another session, in ms.
    #[arg(long, value_name = "N", value_parser = |s: &str| setting_value(Field::MaxXactAgeMs, s))]
    pub max_xact_age_ms: Option<u64>,
    /// Partitions of a partitioned backfill running at once, fleet-wide.
    #[arg(long, value_name = "N", value_parser = |s: &str| setting_value(Field::Concurrency, s))]
    pub concurrency: Option<u64>,
    /// The UTC hour (0-23) from which batches may start (a run window;
    /// set with --window-end-hour).
    #[arg(long, value_name = "HOUR", value_parser = |s: &str| setting_value(Field::WindowStartHour, s))]
    pub window_start_hour: Option<u64>,
    /// The UTC hour (0-23) from which batches may no longer start; before
    /// the start hour, the window wraps past midnight.
    #[arg(long, value_name = "HOUR", value_parser = |s: &str| setting_value(Field::WindowEndHour, s))]
    pub window_end_hour: Option<u64>,
    /// A latency budget: the percentile at most this percent of its
    /// baseline, measured while the backfill holds back (excludes
    /// --latency-max-us).
    #[arg(long, value_name = "PCT", value_parser = |s: &str| setting_value(Field::LatencyRatioPct, s))]
    pub latency_ratio_pct: Option<u64>,
    /// A latency budget: the percentile at most this many microseconds.
    #[arg(long, value_name = "US", value_parser = |s: &str| setting_value(Field::LatencyMaxUs, s))]
    pub latency_max_us: Option<u64>,
    /// The percentile a latency budget judges (default 99).
    #[arg(long, value_name = "P", value_parser = |s: &str| setting_value(Field::LatencyPercentile, s))]
    pub latency_percentile: Option<u64>,
    /// Clear a setting (e.g. `pause-ms`); repeatable.
    #[arg(long, value_name = "NAME")]
    pub clear: Vec<String>,
}

impl SetArgs {
    /// The change as the API takes it: a JSON merge patch.
    pub(super) fn change(&self) -> Result<serde_json::Map<String, Value>, CtlError> {
        let given = [
            (Field::BatchSize, self.batch_size),
            (Field::TargetBatchMs, self.target_batch_ms),
            (Field::MinBatchSize, self.min_batch_size),
            (Field::MaxBatchSize, self.max_batch_size),
            (Field::PauseMs, self.pause_ms),
            (Field::MaxLagBytes, self.max_lag_bytes),
            (Field::MaxLagMs, self.max_lag_ms),
            (Field::MaxWalBytesPerS, self.max_wal_bytes_per_s),
            (Field::MaxLockWaiters, self.max_lock_waiters),
            (Field::MaxXactAgeMs, self.max_xact_age_ms),
            (Field::Concurrency, self.concurrency),
            (Field::WindowStartHour, self.window_start_hour),
            (Field::WindowEndHour, self.window_end_hour),
            (Field::LatencyRatioPct, self.latency_ratio_pct),
            (Field::LatencyMaxUs, self.latency_max_us),
            (Field::LatencyPercentile, self.latency_percentile),
        ];
        let mut change: serde_json::Map<String, Value> = given
            .into_iter()
            .filter_map(|(field, value)| Some((field.name().to_string(), Value::from(value?))))
            .collect();
        for name in &self.clear {
            // The flag's spelling (`pause-ms`) or the API's (`pause_ms`).
            let field = Field::parse(&name.replace('-', "_")).ok_or_else(|| {
                let known: Vec<String> = Field::ALL.iter().map(|f| flag(*f)).collect();
                CtlError::Usage(format!(
                    "--clear {:?}: not a setting; one of {}",
                    one_line(name),
                    known.join(", ")
                ))
            })?;
            if change.insert(field.name().into(), Value::Null).is_some() {
                return Err(CtlError::Usage(format!(
                    "--{} is both set and cleared",
                    flag(field)
                )));
            }
        }
        if change.is_empty() {
            return Err(CtlError::Usage(
                "set changes nothing: give a setting (e.g. --batch-size 500) or --clear NAME"
                    .into(),
            ));
        }
        Ok(change)
    }
}

/// A setting as its flag names it.
pub(super) fn flag(field: Field) -> String {
    field.name().replace('_', "-")
}

/// A setting's value on the command line: a whole number within the
/// field's range, the one the server checks, so a word and a number out
/// of range are told the same bound in the same words.
fn setting_value(field: Field, text: &str) -> Result<u64, String> {
    let (lo, hi) = field.range();
    match text.parse::<u64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        _ => Err(format!("must be a whole number between {lo} and {hi}")),
    }
}

/// A server's message about settings, in the CLI's words: each setting
/// named by its flag, and `null` (the API's way to clear one) by `--clear`.
pub(super) fn in_flag_words(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        match Field::parse(word) {
            Some(field) => {
                out.push_str("--");
                out.push_str(&flag(field));
            }
            None => out.push_str(word),
        }
        word.clear();
    };
    for c in message.chars() {
        if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out.replace("clear one with null", "clear one with --clear NAME")
}

/// The ID as it goes into a path. Stable IDs are URL-safe by
/// construction; anything else is a typo.
pub(super) fn checked_id(id: &str) -> Result<String, CtlError> {
    backfill::repair::validate_id(id)
        .map(|()| id.to_string())
        .map_err(|_| CtlError::Usage(format!("{:?} is not a stable backfill ID", one_line(id))))
}
