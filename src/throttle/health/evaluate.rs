//! Judging a snapshot against limits: pure, so a runner can call it before
//! every batch at no cost.

use super::{
    Reading, Signal, Snapshot, Thresholds, Throttle, UnknownPolicy, Verdict, WAL_RATE_FIRST,
};
use crate::failure::bounded;
use std::time::{Duration, Instant};

/// One checked signal as judged.
enum Judged {
    /// Within its limit (or nothing to limit: no standby).
    Within,
    /// Past it.
    Past(Throttle),
    /// Unreadable, with the reason.
    Unknown(String),
}

impl Snapshot {
    /// Whether the next batch may start under `thresholds`, looking at
    /// lock waiters on `tables` only (the repair's tables, each as given
    /// to the monitor).
    ///
    /// Only checked signals count: a limit that is `None` is never past
    /// and never unknown, and the application check counts when the
    /// monitor has one. A snapshot taken more than `stale_after` before
    /// `now` counts as every checked signal unknown: the monitor stopped
    /// reading, and an old "healthy" says nothing about now. A signal past
    /// its limit throttles whatever the policy; unknown signals throttle
    /// only under [`UnknownPolicy::Throttle`].
    pub fn evaluate(
        &self,
        thresholds: &Thresholds,
        tables: &[String],
        policy: UnknownPolicy,
        now: Instant,
        stale_after: Duration,
    ) -> Verdict {
        let age = now.saturating_duration_since(self.taken);
        let stale = (age > stale_after).then(|| {
            format!(
                "the last health reading is {} old",
                seconds_text(age.as_secs_f64())
            )
        });
        let mut unknown: Vec<(Signal, String)> = Vec::new();
        for signal in Signal::ALL {
            if !thresholds.checks(signal)
                || (signal == Signal::Application && self.application.is_none())
            {
                continue;
            }
            let judged = match &stale {
                Some(reason) => Judged::Unknown(reason.clone()),
                None => self.judge(signal, thresholds, tables),
            };
            match judged {
                Judged::Within => {}
                Judged::Past(throttle) => return Verdict::Throttle(throttle),
                Judged::Unknown(reason) => unknown.push((signal, reason)),
            }
        }
        match (policy, unknown.first()) {
            (UnknownPolicy::Throttle, Some((signal, reason))) => Verdict::Throttle(Throttle {
                signal: *signal,
                value: None,
                threshold: threshold(*signal, thresholds),
                text: bounded(format!("{signal} unknown: {reason}")),
            }),
            _ => Verdict::Go {
                unknown: unknown.into_iter().map(|(signal, _)| signal).collect(),
            },
        }
    }

    /// One checked signal against its limit.
    fn judge(&self, signal: Signal, thresholds: &Thresholds, tables: &[String]) -> Judged {
        match signal {
            Signal::ReplicationLagBytes => match (&self.lag_bytes, thresholds.max_lag_bytes) {
                (Reading::Known(Some(lag)), Some(max)) => {
                    past(signal, *lag as f64, max as f64, bytes_unit)
                }
                (Reading::Known(None), _) | (_, None) => Judged::Within,
                (Reading::Unknown(reason), _) => Judged::Unknown(reason.clone()),
            },
            Signal::ReplicationLag => match (&self.lag, thresholds.max_lag) {
                (Reading::Known(Some(lag)), Some(max)) => {
                    past(signal, lag.as_secs_f64(), max.as_secs_f64(), seconds_unit)
                }
                (Reading::Known(None), _) | (_, None) => Judged::Within,
                (Reading::Unknown(reason), _) => Judged::Unknown(reason.clone()),
            },
            Signal::WalRate => match (&self.wal_bytes_per_s, thresholds.max_wal_bytes_per_s) {
                (_, None) => Judged::Within,
                (Reading::Known(Some(rate)), Some(max)) => {
                    past(signal, *rate as f64, max as f64, rate_unit)
                }
                (Reading::Known(None), _) => Judged::Unknown(WAL_RATE_FIRST.into()),
                (Reading::Unknown(reason), _) => Judged::Unknown(reason.clone()),
            },
            Signal::LockWaiters => match (&self.lock_waiters, thresholds.max_lock_waiters) {
                (_, None) => Judged::Within,
                (Reading::Unknown(reason), _) => Judged::Unknown(reason.clone()),
                (Reading::Known(per_table), Some(max)) => {
                    let mut total = 0u64;
                    let mut waited_on = Vec::new();
                    for table in tables {
                        match per_table.get(table) {
                            Some(&n) => {
                                total = total.saturating_add(n);
                                if n > 0 {
                                    waited_on.push(table.as_str());
                                }
                            }
                            None => {
                                return Judged::Unknown(format!(
                                    "the monitor does not watch table {:?}",
                                    crate::failure::cut(table, 64)
                                ))
                            }
                        }
                    }
                    match past(signal, total as f64, max as f64, count_unit) {
                        Judged::Past(mut throttle) => {
                            throttle.text =
                                bounded(format!("{} on {}", throttle.text, waited_on.join(", ")));
                            // Name a session they wait for, so the
                            // operator can find it.
                            let held = waited_on.iter().find_map(|t| self.lock_holders.get(*t));
                            if let Some(holder) = held {
                                throttle.text =
                                    bounded(format!("{}, held by {holder}", throttle.text));
                            }
                            Judged::Past(throttle)
                        }
                        within => within,
                    }
                }
            },
            Signal::TransactionAge => match (&self.xact_age, thresholds.max_xact_age) {
                (_, None) => Judged::Within,
                (Reading::Known(age), Some(max)) => {
                    match past(signal, age.as_secs_f64(), max.as_secs_f64(), seconds_unit) {
                        // Name the session, so the operator can find it.
                        Judged::Past(mut throttle) if self.xact_holder.is_some() => {
                            let holder = self.xact_holder.as_deref().unwrap_or_default();
                            throttle.text = bounded(format!("{}, held by {holder}", throttle.text));
                            Judged::Past(throttle)
                        }
                        judged => judged,
                    }
                }
                (Reading::Unknown(reason), _) => Judged::Unknown(reason.clone()),
            },
            Signal::Application => match &self.application {
                None | Some(Reading::Known(Ok(()))) => Judged::Within,
                Some(Reading::Known(Err(reason))) => Judged::Past(Throttle {
                    signal,
                    value: None,
                    threshold: None,
                    text: bounded(format!("{signal}: {reason}")),
                }),
                Some(Reading::Unknown(reason)) => Judged::Unknown(reason.clone()),
            },
            // The gate judges the run window itself; the monitor has no
            // reading of it.
            Signal::OutsideWindow | Signal::Latency => Judged::Within,
        }
    }
}

/// Within or past, with the text "<signal> <value> > <limit>", both in
/// the unit `unit` picks for the limit ([`comparison_text`]).
fn past(signal: Signal, value: f64, threshold: f64, unit: fn(f64) -> Unit) -> Judged {
    if value > threshold {
        Judged::Past(Throttle {
            signal,
            value: Some(value),
            threshold: Some(threshold),
            text: bounded(format!(
                "{signal} {}",
                comparison_text(value, threshold, unit(threshold))
            )),
        })
    } else {
        Judged::Within
    }
}

/// How a value and its limit are shown together: divided by `scale`,
/// with at least `decimals` decimals, followed by `suffix`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Unit {
    scale: f64,
    decimals: usize,
    suffix: &'static str,
}

/// The most decimals a comparison shows: a microsecond in seconds.
const MAX_DECIMALS: usize = 6;

/// "<value> > <limit>" for a value past its limit, both in `unit`, with
/// as many decimals as it takes for the value shown to be greater than
/// the limit shown: rounded to one unit, 1.04 s past a limit of 1.0 s
/// would read "1.0 s > 1.0 s", which reads as false. Rounding keeps
/// order, so a value shown greater than the limit shown is greater than
/// the limit itself. A value closer to its limit than [`MAX_DECIMALS`]
/// show is "≥", which still reads true.
fn comparison_text(value: f64, limit: f64, unit: Unit) -> String {
    let shown = |x: f64, decimals: usize| format!("{:.*}", decimals, x / unit.scale);
    let suffix = unit.suffix;
    for decimals in unit.decimals..=MAX_DECIMALS.max(unit.decimals) {
        let (v, l) = (shown(value, decimals), shown(limit, decimals));
        if v.parse::<f64>().ok() > l.parse::<f64>().ok() {
            return format!("{v}{suffix} > {l}{suffix}");
        }
    }
    let decimals = MAX_DECIMALS.max(unit.decimals);
    format!(
        "{}{suffix} \u{2265} {}{suffix}",
        shown(value, decimals),
        shown(limit, decimals)
    )
}

/// Seconds (one decimal) for a limit of a second or more, milliseconds
/// below.
fn seconds_unit(limit: f64) -> Unit {
    if limit < 1.0 {
        Unit {
            scale: 1e-3,
            decimals: 0,
            suffix: " ms",
        }
    } else {
        Unit {
            scale: 1.0,
            decimals: 1,
            suffix: " s",
        }
    }
}

/// The largest binary unit that keeps the limit at least 1 (one
/// decimal), bytes below 1 KiB.
fn bytes_unit(limit: f64) -> Unit {
    const UNITS: [&str; 5] = [" KiB", " MiB", " GiB", " TiB", " PiB"];
    if limit < 1024.0 {
        return Unit {
            scale: 1.0,
            decimals: 0,
            suffix: " B",
        };
    }
    let mut scale = 1024.0;
    let mut unit = 0;
    while limit / scale >= 1024.0 && unit + 1 < UNITS.len() {
        scale *= 1024.0;
        unit += 1;
    }
    Unit {
        scale,
        decimals: 1,
        suffix: UNITS[unit],
    }
}

fn rate_unit(limit: f64) -> Unit {
    const RATES: [(&str, &str); 6] = [
        (" B", " B/s"),
        (" KiB", " KiB/s"),
        (" MiB", " MiB/s"),
        (" GiB", " GiB/s"),
        (" TiB", " TiB/s"),
        (" PiB", " PiB/s"),
    ];
    let bytes = bytes_unit(limit);
    let suffix = RATES
        .iter()
        .find(|(b, _)| *b == bytes.suffix)
        .map_or(" B/s", |(_, r)| *r);
    Unit { suffix, ..bytes }
}

fn count_unit(_limit: f64) -> Unit {
    Unit {
        scale: 1.0,
        decimals: 0,
        suffix: "",
    }
}

/// The limit of `signal`, in its unit.
fn threshold(signal: Signal, thresholds: &Thresholds) -> Option<f64> {
    match signal {
        Signal::ReplicationLagBytes => thresholds.max_lag_bytes.map(|v| v as f64),
        Signal::ReplicationLag => thresholds.max_lag.map(|d| d.as_secs_f64()),
        Signal::WalRate => thresholds.max_wal_bytes_per_s.map(|v| v as f64),
        Signal::LockWaiters => thresholds.max_lock_waiters.map(|v| v as f64),
        Signal::TransactionAge => thresholds.max_xact_age.map(|d| d.as_secs_f64()),
        Signal::Application | Signal::OutsideWindow | Signal::Latency => None,
    }
}

/// Seconds with one decimal, milliseconds below one second.
pub(crate) fn seconds_text(seconds: f64) -> String {
    if seconds < 1.0 {
        format!("{:.0} ms", seconds * 1000.0)
    } else {
        format!("{seconds:.1} s")
    }
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;
    use crate::throttle::settings::Settings;
    use serde_json::json;
    use std::collections::BTreeMap;

    const MIB: u64 = 1 << 20;

    /// A fresh snapshot with every signal read and quiet: one standby,
    /// caught up.
    fn quiet() -> Snapshot {
        Snapshot {
            taken: Instant::now(),
            at: chrono::Utc::now(),
            lag_bytes: Reading::Known(Some(0)),
            lag: Reading::Known(Some(Duration::ZERO)),
            standbys: Reading::Known(1),
            wal_bytes_per_s: Reading::Known(Some(0)),
            xact_age: Reading::Known(Duration::ZERO),
            xact_holder: None,
            lock_holders: BTreeMap::new(),
            lock_waiters: Reading::Known(BTreeMap::from([
                ("items".to_string(), 0),
                ("other".to_string(), 0),
            ])),
            application: None,
        }
    }

    fn every_limit() -> Thresholds {
        Thresholds {
            max_lag_bytes: Some(16 * MIB),
            max_lag: Some(Duration::from_secs(5)),
            max_wal_bytes_per_s: Some(8 * MIB),
            max_lock_waiters: Some(0),
            max_xact_age: Some(Duration::from_secs(60)),
        }
    }

    fn tables() -> Vec<String> {
        vec!["items".to_string()]
    }

    fn judge(snapshot: &Snapshot, thresholds: &Thresholds, policy: UnknownPolicy) -> Verdict {
        snapshot.evaluate(
            thresholds,
            &tables(),
            policy,
            snapshot.taken,
            Duration::from_secs(10),
        )
    }

    fn throttle(verdict: Verdict) -> Throttle {
        match verdict {
            Verdict::Throttle(t) => t,
            go => panic!("expected a throttle, got {go:?}"),
        }
    }

    #[test]
    fn thr01_quiet_signals_go_and_each_signal_past_its_limit_throttles() {
        let limits = every_limit();
        assert_eq!(
            judge(&quiet(), &limits, UnknownPolicy::Throttle),
            Verdict::Go { unknown: vec![] }
        );

        let mut s = quiet();
        s.lag_bytes = Reading::Known(Some(48 * MIB));
        let t = throttle(judge(&s, &limits, UnknownPolicy::Proceed));
        assert_eq!(t.signal, Signal::ReplicationLagBytes);
        assert_eq!(t.value, Some((48 * MIB) as f64));
        assert_eq!(t.threshold, Some((16 * MIB) as f64));
        assert_eq!(t.text, "replication lag 48.0 MiB > 16.0 MiB");

        let mut s = quiet();
        s.lag = Reading::Known(Some(Duration::from_millis(7_500)));
        let t = throttle(judge(&s, &limits, UnknownPolicy::Proceed));
        assert_eq!(
            (t.signal, t.value, t.threshold),
            (Signal::ReplicationLag, Some(7.5), Some(5.0))
        );
        assert_eq!(t.text, "replication time lag 7.5 s > 5.0 s");

        let mut s = quiet();
        s.wal_bytes_per_s = Reading::Known(Some(12 * MIB));
        let t = throttle(judge(&s, &limits, UnknownPolicy::Proceed));
        assert_eq!(t.signal, Signal::WalRate);
        assert_eq!(t.text, "WAL rate 12.0 MiB/s > 8.0 MiB/s");

        let mut s = quiet();
        s.xact_age = Reading::Known(Duration::from_secs(95));
        let t = throttle(judge(&s, &limits, UnknownPolicy::Proceed));
        assert_eq!((t.signal, t.value), (Signal::TransactionAge, Some(95.0)));
        assert_eq!(t.text, "oldest transaction 95.0 s > 60.0 s");

        let mut s = quiet();
        s.application = Some(Reading::Known(Err("queue too deep".into())));
        let t = throttle(judge(&s, &limits, UnknownPolicy::Proceed));
        assert_eq!(
            (t.signal, t.value, t.threshold),
            (Signal::Application, None, None)
        );
        assert_eq!(t.text, "application check: queue too deep");

        // Exactly at a limit is within it.
        let mut s = quiet();
        s.lag_bytes = Reading::Known(Some(16 * MIB));
        assert_eq!(
            judge(&s, &limits, UnknownPolicy::Proceed),
            Verdict::Go { unknown: vec![] }
        );
    }

    #[test]
    fn thr01_the_first_signal_past_its_limit_is_named_and_unchecked_ones_are_ignored() {
        let mut s = quiet();
        s.lag_bytes = Reading::Known(Some(48 * MIB));
        s.xact_age = Reading::Known(Duration::from_secs(95));
        s.wal_bytes_per_s = Reading::Unknown("no".into());
        // A real excess wins over an unknown signal under either policy.
        let t = throttle(judge(&s, &every_limit(), UnknownPolicy::Throttle));
        assert_eq!(t.signal, Signal::ReplicationLagBytes);
        // Without limits nothing is judged, however bad or unknown.
        assert_eq!(
            judge(&s, &Thresholds::none(), UnknownPolicy::Throttle),
            Verdict::Go { unknown: vec![] }
        );
        let only_age = Thresholds {
            max_xact_age: Some(Duration::from_secs(60)),
            ..Thresholds::none()
        };
        let t = throttle(judge(&s, &only_age, UnknownPolicy::Proceed));
        assert_eq!(t.signal, Signal::TransactionAge);
    }

    #[test]
    fn thr01_no_standby_is_no_lag() {
        let mut s = quiet();
        s.lag_bytes = Reading::Known(None);
        s.lag = Reading::Known(None);
        s.standbys = Reading::Known(0);
        assert_eq!(
            judge(&s, &every_limit(), UnknownPolicy::Throttle),
            Verdict::Go { unknown: vec![] }
        );
    }

    #[test]
    fn thr01_lock_waiters_count_only_the_repairs_tables() {
        let mut s = quiet();
        s.lock_waiters = Reading::Known(BTreeMap::from([
            ("items".to_string(), 0),
            ("other".to_string(), 3),
        ]));
        let limits = every_limit();
        assert_eq!(
            judge(&s, &limits, UnknownPolicy::Throttle),
            Verdict::Go { unknown: vec![] }
        );
        let both = vec!["items".to_string(), "other".to_string()];
        let t = throttle(s.evaluate(
            &limits,
            &both,
            UnknownPolicy::Proceed,
            s.taken,
            Duration::from_secs(1),
        ));
        assert_eq!(
            (t.signal, t.value, t.threshold),
            (Signal::LockWaiters, Some(3.0), Some(0.0))
        );
        assert_eq!(t.text, "lock waiters 3 > 0 on other");
        // A table the monitor does not watch cannot be judged.
        let unwatched = vec!["elsewhere".to_string()];
        assert_eq!(
            s.evaluate(
                &limits,
                &unwatched,
                UnknownPolicy::Proceed,
                s.taken,
                Duration::from_secs(1)
            ),
            Verdict::Go {
                unknown: vec![Signal::LockWaiters]
            }
        );
    }

    #[test]
    fn thr02_unknown_signals_are_listed_under_proceed_and_throttle_under_throttle() {
        let mut s = quiet();
        s.lag_bytes = Reading::Unknown("no privilege".into());
        s.wal_bytes_per_s = Reading::Known(None);
        s.application = Some(Reading::Unknown("the application check timed out".into()));
        let limits = every_limit();
        assert_eq!(
            judge(&s, &limits, UnknownPolicy::Proceed),
            Verdict::Go {
                unknown: vec![
                    Signal::ReplicationLagBytes,
                    Signal::WalRate,
                    Signal::Application
                ]
            }
        );
        let t = throttle(judge(&s, &limits, UnknownPolicy::Throttle));
        assert_eq!(
            (t.signal, t.value, t.threshold),
            (Signal::ReplicationLagBytes, None, Some((16 * MIB) as f64))
        );
        assert_eq!(t.text, "replication lag unknown: no privilege");
        assert_eq!(s.reason(Signal::WalRate), Some(WAL_RATE_FIRST));
        assert_eq!(s.reason(Signal::TransactionAge), None);
        // An unknown signal that is not checked does not count.
        let only_age = Thresholds {
            max_xact_age: Some(Duration::from_secs(60)),
            ..Thresholds::none()
        };
        let mut s = quiet();
        s.lag_bytes = Reading::Unknown("no privilege".into());
        assert_eq!(
            judge(&s, &only_age, UnknownPolicy::Throttle),
            Verdict::Go { unknown: vec![] }
        );
    }

    #[test]
    fn thr02_a_stale_snapshot_is_every_checked_signal_unknown() {
        let mut s = quiet();
        s.application = Some(Reading::Known(Ok(())));
        let limits = Thresholds {
            max_lock_waiters: Some(0),
            ..Thresholds::default()
        };
        let later = s.taken + Duration::from_secs(11);
        assert_eq!(
            s.evaluate(
                &limits,
                &tables(),
                UnknownPolicy::Proceed,
                later,
                Duration::from_secs(10)
            ),
            Verdict::Go {
                unknown: vec![
                    Signal::ReplicationLagBytes,
                    Signal::LockWaiters,
                    Signal::Application
                ]
            }
        );
        let t = throttle(s.evaluate(
            &limits,
            &tables(),
            UnknownPolicy::Throttle,
            later,
            Duration::from_secs(10),
        ));
        assert_eq!(t.signal, Signal::ReplicationLagBytes);
        assert_eq!(
            t.text,
            "replication lag unknown: the last health reading is 11.0 s old"
        );
        // Exactly at the bound it is still fresh.
        let edge = s.taken + Duration::from_secs(10);
        assert_eq!(
            s.evaluate(
                &limits,
                &tables(),
                UnknownPolicy::Throttle,
                edge,
                Duration::from_secs(10)
            ),
            Verdict::Go { unknown: vec![] }
        );
    }

    #[test]
    fn thr02_texts_are_bounded() {
        let mut s = quiet();
        s.application = Some(Reading::Known(Err("x".repeat(5000))));
        let t = throttle(judge(&s, &Thresholds::none(), UnknownPolicy::Proceed));
        assert!(
            t.text.len() <= crate::failure::MAX_DIAGNOSTIC_BYTES,
            "{}",
            t.text.len()
        );
        assert_eq!(
            serde_json::to_value(&t).unwrap()["signal"],
            json!("application")
        );
        assert_eq!(seconds_text(0.25), "250 ms");
        assert_eq!(
            comparison_text(512.0, 100.0, bytes_unit(100.0)),
            "512 B > 100 B"
        );
        assert_eq!(
            comparison_text(1536.0, 1024.0, bytes_unit(1024.0)),
            "1.5 KiB > 1.0 KiB"
        );
        assert_eq!(
            comparison_text(
                (16 * MIB + 1) as f64,
                (16 * MIB) as f64,
                bytes_unit((16 * MIB) as f64)
            ),
            "16.000001 MiB > 16.000000 MiB"
        );
        assert_eq!(
            comparison_text(2.5 * 1024.0, 2048.0, rate_unit(2048.0)),
            "2.5 KiB/s > 2.0 KiB/s"
        );
        for signal in Signal::ALL {
            assert_eq!(
                serde_json::to_value(signal).unwrap(),
                json!(signal.as_str())
            );
        }
    }

    #[test]
    fn thr04_settings_overlay_the_process_limits() {
        let process = Thresholds {
            max_xact_age: Some(Duration::from_secs(60)),
            ..Thresholds::default()
        };
        assert_eq!(process.overlay(&Settings::default()), process);
        let settings = Settings::default()
            .apply(&json!({
                "max_lag_bytes": 1024,
                "max_lag_ms": 1500,
                "max_wal_bytes_per_s": 4096,
                "max_lock_waiters": 2,
                "pause_ms": 10
            }))
            .unwrap();
        assert_eq!(
            process.overlay(&settings),
            Thresholds {
                max_lag_bytes: Some(1024),
                max_lag: Some(Duration::from_millis(1500)),
                max_wal_bytes_per_s: Some(4096),
                max_lock_waiters: Some(2),
                // Unset in the settings: the process's limit stays.
                max_xact_age: Some(Duration::from_secs(60)),
            }
        );
        let age = Settings::default()
            .apply(&json!({"max_xact_age_ms": 2000}))
            .unwrap();
        assert_eq!(
            Thresholds::none().overlay(&age).max_xact_age,
            Some(Duration::from_secs(2))
        );
    }

    #[test]
    fn thr01_config_defaults_are_valid_and_out_of_range_values_are_refused() {
        let config = HealthConfig::default();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.interval, Duration::from_secs(1));
        assert_eq!(config.unknown, UnknownPolicy::Proceed);
        assert_eq!(config.thresholds.max_lag_bytes, Some(64 * MIB));
        assert_eq!(
            Thresholds {
                max_lag_bytes: None,
                ..Thresholds::default()
            },
            Thresholds::none()
        );
        for interval in [
            Duration::ZERO,
            Duration::from_millis(9),
            Duration::from_secs(61),
        ] {
            let bad = HealthConfig {
                interval,
                ..HealthConfig::default()
            };
            assert!(matches!(
                bad.validate(),
                Err(HealthError::Duration {
                    what: "interval",
                    ..
                })
            ));
        }
        let bad = HealthConfig {
            timeout: Duration::ZERO,
            ..HealthConfig::default()
        };
        assert!(matches!(
            bad.validate(),
            Err(HealthError::Duration {
                what: "timeout",
                ..
            })
        ));
        let bad = HealthConfig {
            thresholds: Thresholds {
                max_xact_age: Some(Duration::from_millis(10)),
                ..Thresholds::default()
            },
            ..HealthConfig::default()
        };
        assert_eq!(
            bad.validate(),
            Err(HealthError::Threshold {
                field: "max_xact_age_ms",
                min: 1_000,
                max: 86_400_000,
                got: 10
            })
        );
    }
}
