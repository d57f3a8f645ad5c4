//! Pacing between batches (THR-1, THR-3, THR-4): whether a claim's next
//! batch may start, and with what size.
//!
//! [`Engine::gate`] runs before every batch of the runtime. It reads the
//! backfill's live settings again when another process announced a change
//! (the wake-up NOTIFY) or at the latest after [`SETTINGS_REFRESH`], so a
//! change reaches every process at its next batch without a query per
//! batch; it applies the operator's pause between batches; and it holds the
//! batch back while the health monitor's cached signals are past their
//! thresholds, after giving back the claim's open batch transaction, so a
//! throttled claim holds no snapshot, lock or idle transaction while it
//! waits (EX-5). What it keeps per claim (`Pacing`: the settings as read,
//! the sizing, the last commit) the claim carries, in `claim.rs`.

use super::claim::{rollback_to_pool, Claim, Open};
use super::error::EngineError;
use super::latency::LatencyGate;
use super::Engine;
use crate::repair::DynRepair;
use crate::store::{self, StoreError};
use crate::throttle::health::{Signal, Throttle, Verdict};
use crate::throttle::settings::Settings;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The longest a claim goes without reading its settings again when no
/// change was announced (a lost NOTIFY, a process without a listener).
pub const SETTINGS_REFRESH: Duration = Duration::from_secs(1);

/// What [`Engine::gate`] decided.
#[doc(hidden)]
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// Run the batch now.
    Go,
    /// Wait this long (the pause between batches), then ask again.
    Pause(Duration),
    /// A health signal is past its threshold (or unknown under a policy
    /// that throttles on unknown): ask again after `recheck`, the
    /// monitor's interval.
    Throttled {
        throttle: Throttle,
        recheck: Duration,
    },
}

impl Engine {
    /// Whether `claim`'s next batch may start now (THR-1), reading its
    /// settings again when they may have changed (THR-4).
    #[doc(hidden)]
    pub async fn gate(&self, claim: &mut Claim) -> Result<Gate, EngineError> {
        let def = self
            .registry
            .get(&claim.id)
            .ok_or_else(|| EngineError::NoDefinition(claim.id.clone()))?;
        // A refresh that loses its session (the server died or failed
        // over, CLM-6) keeps the settings in force and is tried again at
        // the next batch: the batch then meets the lost server itself and
        // its failure is recorded (RT-1), where an error here would end the
        // runner with nothing recorded and its claim left to expire. A pool
        // that cannot connect at all has waited its connection timeout
        // already, and the batch would only wait as long again.
        match self.refresh_pacing(claim).await {
            Err(EngineError::Store(e @ StoreError::Database(_))) if store::is_transient(&e) => {}
            refreshed => refreshed?,
        }
        let mut held = match outside_window(claim, &**def, chrono::Utc::now()) {
            Some(held) => Some(held),
            None => self.throttle_for(claim, &**def).await,
        };
        let mut paced = None;
        if held.is_none() {
            let pacing = &mut claim.pacing;
            match self.latency_for(&mut pacing.latency, &pacing.settings, &**def) {
                LatencyGate::Free => {}
                LatencyGate::Hold(throttle, recheck) => held = Some((throttle, recheck)),
                LatencyGate::Paced(throttle) => paced = Some(throttle),
            }
        }
        if let Some((throttle, recheck)) = held {
            park(claim).await;
            self.record_throttle(claim, &throttle, recheck).await?;
            return Ok(Gate::Throttled { throttle, recheck });
        }
        match paced {
            // The budget slows the claim without holding it: the
            // condition is on the row while the pace is below full, and
            // its reading is refreshed at most once per reading window.
            Some(throttle) => {
                let window = self
                    .latency
                    .get()
                    .map_or(Duration::from_secs(1), |m| m.config().window);
                self.record_throttle(claim, &throttle, window).await?;
            }
            None if claim.pacing.throttled.is_some() => {
                self.set_throttle(claim, None).await?;
                claim.pacing.throttled = None;
            }
            None => {}
        }
        let pause = claim.pacing.pause();
        if let Some(at) = claim.pacing.last_commit {
            let since = at.elapsed();
            if since < pause {
                return Ok(Gate::Pause(pause - since));
            }
        }
        Ok(Gate::Go)
    }

    /// Record `throttle` on the claim's row when [`record_due`] says so;
    /// a latency condition carries the baseline it was judged against.
    async fn record_throttle(
        &self,
        claim: &mut Claim,
        throttle: &Throttle,
        interval: Duration,
    ) -> Result<(), EngineError> {
        let mut record = throttle_json(throttle);
        if throttle.signal == Signal::Latency {
            record["baseline"] = claim.pacing.latency.baseline_secs().into();
        }
        if record_due(claim.pacing.throttled.as_ref(), &record, interval) {
            self.set_throttle(claim, Some(&record)).await?;
            claim.pacing.throttled = Some((record, Instant::now()));
        }
        Ok(())
    }

    /// Count an announced change of some backfill (the wake-up NOTIFY):
    /// every claim reads its settings again before its next batch.
    pub(crate) fn note_changed(&self) {
        self.changes.fetch_add(1, Ordering::Relaxed);
    }

    /// Read the claim's settings and size in force again when a change
    /// was announced since, or when they are older than
    /// [`SETTINGS_REFRESH`].
    async fn refresh_pacing(&self, claim: &mut Claim) -> Result<(), EngineError> {
        let changes = self.changes.load(Ordering::Relaxed);
        let pacing = &mut claim.pacing;
        let fresh = pacing
            .read_at
            .is_some_and(|at| at.elapsed() < SETTINGS_REFRESH);
        if fresh && pacing.seen_changes == changes {
            return Ok(());
        }
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        if let Some(read) = store::backfill_pacing_read(&mut conn, &claim.id).await? {
            pacing.settings = Settings::from_stored(&read.settings);
            if pacing.read_at.is_none() {
                pacing.stored_size = read.batch_size.and_then(|s| u32::try_from(s).ok());
            }
        }
        pacing.read_at = Some(Instant::now());
        pacing.seen_changes = changes;
        Ok(())
    }

    /// The signal holding `claim` back, if any, and when to ask again:
    /// the monitor's snapshot for a batch (read afresh when the monitor
    /// rested) against the process's thresholds with the backfill's
    /// overrides. No monitor (an engine driven without a host) holds
    /// nothing back.
    async fn throttle_for(
        &self,
        claim: &mut Claim,
        def: &dyn DynRepair,
    ) -> Option<(Throttle, Duration)> {
        let monitor = self.health.get()?;
        let snapshot = monitor.for_batch().await;
        let config = monitor.config();
        let thresholds = config.thresholds.overlay(&claim.pacing.settings);
        match snapshot.evaluate(
            &thresholds,
            &def.tables(),
            config.unknown,
            Instant::now(),
            config.stale_after(),
        ) {
            Verdict::Go { unknown } => {
                // The stated policy for unreadable signals (go ahead on
                // the others) is said once per change, never silently.
                let unknown: Vec<&'static str> = unknown.iter().map(|s| s.as_str()).collect();
                if unknown != claim.pacing.unknown {
                    if !unknown.is_empty() {
                        tracing::warn!(
                            event = "health_unknown",
                            backfill = %claim.id,
                            signals = %crate::logging::Json(&unknown),
                            "proceeding without these health signals, which cannot be read"
                        );
                    }
                    claim.pacing.unknown = unknown;
                }
                None
            }
            Verdict::Throttle(throttle) => Some((throttle, config.interval)),
        }
    }

    /// Record (or clear) the throttle condition on the claim's row (the
    /// partition's, for a partition claim), fenced by the claim. A claim
    /// that no longer matches finds out at its next batch's fence, so a
    /// miss here is not an error.
    async fn set_throttle(
        &self,
        claim: &Claim,
        throttle: Option<&serde_json::Value>,
    ) -> Result<(), EngineError> {
        let mut conn = self.pool.get().await.map_err(StoreError::from)?;
        match claim.partition {
            Some(part) => {
                store::partition_throttle_set(
                    &mut conn,
                    &claim.id,
                    part,
                    &claim.worker,
                    claim.generation,
                    throttle,
                )
                .await?
            }
            None => {
                store::backfill_throttle_set(
                    &mut conn,
                    &claim.id,
                    &claim.worker,
                    claim.generation,
                    throttle,
                )
                .await?
            }
        };
        Ok(())
    }
}

/// How often a claim held back by its run window asks again: often
/// enough that an operator's new window applies within about a second,
/// and a settings read at most once per [`SETTINGS_REFRESH`] anyway.
const WINDOW_RECHECK: Duration = Duration::from_secs(1);

/// The run window holding `claim` back at `now` (FLT-3), if it is closed:
/// the operator's window from the live settings, else the definition's.
/// The condition names the window and its next opening.
fn outside_window(
    claim: &Claim,
    def: &dyn DynRepair,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<(Throttle, Duration)> {
    let window = claim
        .pacing
        .settings
        .window()
        .or_else(|| def.run_window())?;
    if window.contains(now) {
        return None;
    }
    let opens = window.next_opening(now);
    let throttle = Throttle {
        signal: Signal::OutsideWindow,
        value: None,
        threshold: None,
        text: format!(
            "outside the run window {window}; opens at {} UTC",
            opens.format("%Y-%m-%d %H:%M")
        ),
    };
    let until = (opens - now).to_std().unwrap_or_default();
    Some((
        throttle,
        until.clamp(Duration::from_millis(10), WINDOW_RECHECK),
    ))
}

/// The row's record of a throttle: signal, value, threshold and text.
fn throttle_json(throttle: &Throttle) -> serde_json::Value {
    serde_json::json!({
        "signal": throttle.signal.as_str(),
        "value": throttle.value,
        "threshold": throttle.threshold,
        "text": throttle.text,
    })
}

/// Whether the throttle condition `record` is to be written to the row,
/// given what was last written there (`recorded`, and when): at once when
/// the claim was not throttled or another signal holds it back; when only
/// the reading changed, at most once per `interval` (the monitor's, whose
/// snapshot the reading comes from), so the row shows the current reading
/// within about one interval without a write per recheck of an unchanged
/// one.
fn record_due(
    recorded: Option<&(serde_json::Value, Instant)>,
    record: &serde_json::Value,
    interval: Duration,
) -> bool {
    match recorded {
        None => true,
        Some((last, _)) if last["signal"] != record["signal"] => true,
        Some((last, at)) => last != record && at.elapsed() >= interval,
    }
}

/// Give back the claim's open batch transaction (and a spare), rolled
/// back: the batch sent ahead is redone after the wait, and meanwhile the
/// claim holds no snapshot, row lock or idle transaction.
async fn park(claim: &Claim) {
    if let Some(Open { conn, spare, .. }) = claim.open.take() {
        rollback_to_pool(conn).await;
        if let Some(spare) = spare {
            rollback_to_pool(spare).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{record_due, throttle_json, Gate, SETTINGS_REFRESH};
    use crate::engine::claim::Claim;
    use crate::engine::error::EngineError;
    use crate::engine::tests::{one_definition, unconnected_engine};
    use crate::store::StoreError;
    use crate::throttle::health::{Signal, Throttle};
    use crate::throttle::settings::Settings;
    use std::time::{Duration, Instant};

    const HOUR: Duration = Duration::from_secs(3_600);

    /// A claim of `t.v1` that read its settings (a pause of an hour)
    /// `read_ago`, with no announced change since, and committed its last
    /// batch just now.
    fn claim_read(read_ago: Option<Duration>) -> Claim {
        let now = Instant::now();
        let mut claim = crate::engine::claim::tests::idle_claim();
        let pause = serde_json::json!({ "pause_ms": HOUR.as_millis() as u64 });
        claim.pacing.settings = Settings::from_stored(&pause);
        claim.pacing.read_at =
            read_ago.map(|ago| now.checked_sub(ago).expect("the clock is past it"));
        claim.pacing.last_commit = Some(now);
        claim
    }

    /// Whether `gate` went to the pool, which never connects, to read the
    /// settings again.
    fn read_again(gate: &Result<Gate, EngineError>) -> bool {
        matches!(gate, Err(EngineError::Store(StoreError::Pool(_))))
    }

    /// THR-4: settings read less than `SETTINGS_REFRESH` ago, with no change
    /// announced since, are not read again, and the pause counts from the
    /// last commit: what is left of it, never more.
    #[tokio::test]
    async fn thr04_fresh_settings_are_kept_and_the_pause_counts_from_the_commit() {
        let engine = unconnected_engine(one_definition(10), 4);
        let mut claim = claim_read(Some(Duration::ZERO));
        let gate = engine.gate(&mut claim).await;
        assert!(
            matches!(gate, Ok(Gate::Pause(left)) if left <= HOUR && left > HOUR - SETTINGS_REFRESH),
            "{gate:?}"
        );
        claim.pacing.last_commit = None;
        assert_eq!(engine.gate(&mut claim).await.ok(), Some(Gate::Go));
    }

    /// THR-4: an announced change, settings older than `SETTINGS_REFRESH`
    /// and settings never read are each read again before the batch.
    #[tokio::test]
    async fn thr04_changed_stale_or_unread_settings_are_read_again() {
        let engine = unconnected_engine(one_definition(10), 4);
        engine.note_changed();
        let gate = engine.gate(&mut claim_read(Some(Duration::ZERO))).await;
        assert!(read_again(&gate), "after a change: {gate:?}");
        let engine = unconnected_engine(one_definition(10), 4);
        for read_ago in [Some(SETTINGS_REFRESH * 2), None] {
            let gate = engine.gate(&mut claim_read(read_ago)).await;
            assert!(read_again(&gate), "read {read_ago:?} ago: {gate:?}");
        }
    }

    /// THR-2: the row's record of a throttle names the signal, its value,
    /// its threshold and the text.
    #[test]
    fn thr02_a_throttle_is_recorded_with_signal_value_threshold_and_text() {
        let throttle = Throttle {
            signal: Signal::ReplicationLagBytes,
            value: Some(48.0),
            threshold: Some(16.0),
            text: "replication lag 48 B > 16 B".into(),
        };
        assert_eq!(
            throttle_json(&throttle),
            serde_json::json!({
                "signal": "replication_lag_bytes",
                "value": 48.0,
                "threshold": 16.0,
                "text": "replication lag 48 B > 16 B",
            })
        );
    }

    /// THR-5: a throttle is recorded when it begins and when another
    /// signal holds the claim back; a changed reading of the same signal
    /// at most once per interval, an unchanged one never again.
    #[test]
    fn thr05_a_changed_reading_is_recorded_at_most_once_per_interval() {
        let reading = |signal: &str, value: f64| serde_json::json!({"signal": signal, "value": value, "threshold": 1.0, "text": ""});
        let second = Duration::from_secs(1);
        let now = Instant::now();
        let long_ago = now.checked_sub(second * 2).expect("the clock is past it");
        let lag = reading("replication_lag", 2.0);
        assert!(record_due(None, &lag, second));
        assert!(!record_due(Some(&(lag.clone(), long_ago)), &lag, second));
        let grown = reading("replication_lag", 3.0);
        assert!(record_due(Some(&(lag.clone(), long_ago)), &grown, second));
        assert!(!record_due(Some(&(lag.clone(), now)), &grown, second));
        let other = reading("transaction_age", 2.0);
        assert!(record_due(Some(&(lag, now)), &other, second));
    }
}
