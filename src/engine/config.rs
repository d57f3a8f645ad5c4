//! The engine's configuration and the checks that keep it inside the
//! contract.

use super::error::EngineError;
use std::time::Duration;

/// Bounded retry with exponential backoff (RT-2).
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Consecutive failed attempts after which a backfill is `failed`.
    /// Default 5.
    pub max_attempts: i32,
    /// Backoff after the first failure, doubled per consecutive failure.
    /// Default 1 s.
    pub backoff_base: Duration,
    /// Cap of the backoff. Default 60 s.
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            backoff_base: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
        }
    }
}

/// Engine configuration. Defaults are production-sane; [`EngineConfig::validate`]
/// rejects values that would break the contract (e.g. a zero lease).
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// How long a claim lives without renewal (CLM-3). Default 30 s.
    pub lease_ttl: Duration,
    /// `statement_timeout` of each batch transaction (EX-5). Default 30 s.
    pub statement_timeout: Duration,
    /// `lock_timeout` of each batch transaction (EX-5). Default 5 s.
    pub lock_timeout: Duration,
    /// `statement_timeout` of validation and bound capture. Default 10 min.
    pub validation_timeout: Duration,
    /// Retry policy for execution errors.
    pub retry: RetryPolicy,
    /// Diagnostic build information recorded at registration (REG-2).
    pub build_info: String,
    /// How soon [`crate::Engine::wait_for`] reads the row again after
    /// progress of the backfill it waits for (a claim or a committed
    /// batch). Progress never changes the state, so while batches commit
    /// the waiter reads at most this often rather than once per batch; a
    /// state change, or a change another process announced, is read at
    /// once (EMB-3). Default 250 ms.
    pub wait_progress_interval: Duration,
    /// How long [`crate::Engine::wait_for`] goes without reading when no
    /// event arrives (a change made by a process whose announcement this
    /// one does not hear). Default 1 s.
    pub wait_poll_interval: Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            lease_ttl: Duration::from_secs(30),
            statement_timeout: Duration::from_secs(30),
            lock_timeout: Duration::from_secs(5),
            validation_timeout: Duration::from_secs(600),
            retry: RetryPolicy::default(),
            build_info: concat!("backfill ", env!("CARGO_PKG_VERSION")).to_string(),
            wait_progress_interval: Duration::from_millis(250),
            wait_poll_interval: Duration::from_secs(1),
        }
    }
}

impl EngineConfig {
    /// Reject configurations that cannot honour the contract.
    pub fn validate(&self) -> Result<(), EngineError> {
        let ms = |d: Duration| d.as_millis();
        if ms(self.lease_ttl) < 100 {
            return Err(EngineError::Config(
                "lease_ttl must be at least 100ms".into(),
            ));
        }
        if ms(self.statement_timeout) == 0 || ms(self.lock_timeout) == 0 {
            return Err(EngineError::Config(
                "statement and lock timeouts must be positive (0 disables them in PostgreSQL)"
                    .into(),
            ));
        }
        if ms(self.validation_timeout) == 0 {
            return Err(EngineError::Config(
                "validation_timeout must be positive".into(),
            ));
        }
        // PostgreSQL rejects larger values, and it would reject them inside
        // an open transaction, on every batch.
        let max = Duration::from_millis(i32::MAX as u64);
        if self.statement_timeout > max || self.lock_timeout > max || self.validation_timeout > max
        {
            return Err(EngineError::Config(
                "statement, lock and validation timeouts must be at most 2147483647ms \
                 (about 24.8 days, PostgreSQL's limit)"
                    .into(),
            ));
        }
        if self.retry.max_attempts < 1 {
            return Err(EngineError::Config(
                "retry.max_attempts must be at least 1".into(),
            ));
        }
        if self.wait_progress_interval.is_zero() || self.wait_poll_interval.is_zero() {
            return Err(EngineError::Config(
                "wait_progress_interval and wait_poll_interval must be positive".into(),
            ));
        }
        if self.retry.backoff_base > self.retry.backoff_max {
            return Err(EngineError::Config(
                "retry.backoff_base must not exceed retry.backoff_max".into(),
            ));
        }
        Ok(())
    }
}

/// A duration in whole milliseconds, as `set_config` and the store's
/// interval arithmetic take it (saturating, never wrapping).
pub(crate) fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ex05_config_rejects_timeouts_postgresql_cannot_take() {
        assert!(EngineConfig::default().validate().is_ok());
        let day = Duration::from_secs(86_400);
        for config in [
            EngineConfig {
                statement_timeout: 30 * day,
                ..EngineConfig::default()
            },
            EngineConfig {
                lock_timeout: 30 * day,
                ..EngineConfig::default()
            },
            EngineConfig {
                validation_timeout: 30 * day,
                ..EngineConfig::default()
            },
            EngineConfig {
                statement_timeout: Duration::ZERO,
                ..EngineConfig::default()
            },
        ] {
            assert!(matches!(config.validate(), Err(EngineError::Config(_))));
        }
        let edge = EngineConfig {
            statement_timeout: Duration::from_millis(i32::MAX as u64),
            ..EngineConfig::default()
        };
        assert!(edge.validate().is_ok());
    }

    /// Every limit of `validate` at its edge: the last accepted value and
    /// the first refused one, each alone on an otherwise valid config, so
    /// each comparison is pinned to its operator.
    #[test]
    fn emb06_config_limits_hold_exactly_at_their_edges() {
        let ms = Duration::from_millis;
        let max = ms(i32::MAX as u64);
        let over = max + ms(1);
        type Edit = fn(&mut EngineConfig, Duration);
        let lease: Edit = |c, d| c.lease_ttl = d;
        let statement: Edit = |c, d| c.statement_timeout = d;
        let lock: Edit = |c, d| c.lock_timeout = d;
        let validation: Edit = |c, d| c.validation_timeout = d;
        let base: Edit = |c, d| c.retry.backoff_base = d;
        let progress: Edit = |c, d| c.wait_progress_interval = d;
        let poll: Edit = |c, d| c.wait_poll_interval = d;
        let cases = [
            ("lease", lease, ms(100), true),
            ("lease", lease, ms(99), false),
            ("statement", statement, ms(1), true),
            ("statement", statement, ms(0), false),
            ("statement", statement, max, true),
            ("statement", statement, over, false),
            ("lock", lock, ms(1), true),
            ("lock", lock, ms(0), false),
            ("lock", lock, max, true),
            ("lock", lock, over, false),
            ("validation", validation, ms(1), true),
            ("validation", validation, ms(0), false),
            ("validation", validation, max, true),
            ("validation", validation, over, false),
            // The default cap is 60 s.
            ("backoff_base", base, Duration::from_secs(60), true),
            ("backoff_base", base, Duration::from_secs(60) + ms(1), false),
            (
                "wait_progress_interval",
                progress,
                Duration::from_nanos(1),
                true,
            ),
            ("wait_progress_interval", progress, Duration::ZERO, false),
            ("wait_poll_interval", poll, Duration::from_nanos(1), true),
            ("wait_poll_interval", poll, Duration::ZERO, false),
        ];
        for (name, edit, value, accepted) in cases {
            let mut config = EngineConfig::default();
            edit(&mut config, value);
            assert_eq!(
                config.validate().is_ok(),
                accepted,
                "{name} = {value:?}: {:?}",
                config.validate()
            );
        }
        for (attempts, accepted) in [(1, true), (0, false)] {
            let mut config = EngineConfig::default();
            config.retry.max_attempts = attempts;
            assert_eq!(
                config.validate().is_ok(),
                accepted,
                "max_attempts {attempts}"
            );
        }
    }

    #[test]
    fn ex05_millis_is_whole_milliseconds_and_saturates() {
        assert_eq!(millis(Duration::from_micros(2_999)), 2);
        assert_eq!(millis(Duration::from_secs(3)), 3_000);
        assert_eq!(millis(Duration::MAX), i64::MAX);
    }
}
