//! Flood-proof rejections (API-3).
//!
//! A request without valid credentials is refused before anything else, but
//! auditing each one (AUD-1) would let an unauthenticated flood grow the
//! audit table without bound and hold database connections that operators
//! need. Here, rejections of one source (the peer address) and reason are
//! counted in memory and written as ONE audit row per window, whose count
//! grows as the window's requests arrive; past a rate per source, requests
//! are refused with 429 (and counted the same way, as `throttled`).
//!
//! Authorized requests never come here: authentication is checked first, in
//! memory, so they never wait on this module's mutex or its writer. The
//! mutex is held only for map updates, never across an await. At most one
//! writer task per process writes, on one pool connection at a time. The
//! per-source map is capped: when it is full and no entry can be dropped,
//! new sources share one overflow entry (source `other`), so memory stays
//! bounded however many addresses a flood uses.

use crate::repair::bounded;
use crate::store::{self, NewAudit, Pool};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Bounds of the rejection path.
#[derive(Debug, Clone)]
pub struct FloodLimits {
    /// One coalesced audit row per source and reason per window.
    pub window: Duration,
    /// Rejections a source may send at once before 429 ...
    pub burst: u32,
    /// ... and per second after that.
    pub per_second: u32,
    /// Sources tracked at once; further sources share one overflow entry.
    pub max_sources: usize,
    /// How long a rejected request waits for its count to be written, so a
    /// single rejection is in the audit when its answer arrives.
    pub audit_wait: Duration,
}

impl Default for FloodLimits {
    fn default() -> Self {
        Self {
            window: Duration::from_secs(60),
            burst: 60,
            per_second: 20,
            max_sources: 4096,
            audit_wait: Duration::from_secs(2),
        }
    }
}

/// Why a request was refused; also the `reason` label of
/// `backfill_admin_rejected_total` and the audit outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// No or unknown credentials (401).
    Unauthorized,
    /// Past the source's rate (429).
    Throttled,
}

impl Reason {
    /// Every reason, for metrics.
    pub const ALL: [Reason; 2] = [Reason::Unauthorized, Reason::Throttled];

    /// The bounded name.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Unauthorized => "unauthorized",
            Reason::Throttled => "throttled",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// What the gate decided about one rejected request.
#[derive(Debug)]
pub enum Verdict {
    /// 401: counted; wait for `ticket` to be written before answering.
    Unauthorized { ticket: u64 },
    /// 429: counted; retry after this many seconds.
    Throttled { retry_after: u64 },
}

/// The first request of a window, as its audit row describes it.
#[derive(Debug, Clone)]
pub struct FirstRequest {
    pub backfill_id: String,
    pub action: String,
    pub correlation: Option<String>,
    pub detail: String,
}

#[derive(Debug, Default)]
struct Window {
    /// The window's audit row, once written, and when it was opened.
    row: Option<(i64, Instant)>,
    /// The first request of a window not yet written.
    first: Option<FirstRequest>,
    /// Requests counted but not yet written.
    pending: i64,
}

#[derive(Debug)]
struct Source {
    tokens: f64,
    refilled: Instant,
    windows: [Window; 2],
}

#[derive(Debug, Default)]
struct State {
    /// `None` is the overflow entry of sources beyond the cap.
    sources: HashMap<Option<IpAddr>, Source>,
    /// Rejections counted so far: the ticket of the latest.
    enqueued: u64,
    writing: bool,
    last_sweep: Option<Instant>,
}

/// The rejection gate of one admin service.
#[derive(Debug)]
pub struct FloodGate {
    limits: FloodLimits,
    state: Mutex<State>,
    /// The latest ticket whose count was written (or given up on).
    flushed: watch::Sender<u64>,
    counted: [AtomicU64; 2],
}

impl FloodGate {
    /// A gate with `limits`.
    pub fn new(limits: FloodLimits) -> Self {
        Self {
            limits,
            state: Mutex::new(State::default()),
            flushed: watch::Sender::new(0),
            counted: Default::default(),
        }
    }

    /// Requests refused so far, per reason (for `/metrics`).
    pub fn counted(&self, reason: Reason) -> u64 {
        self.counted[reason.index()].load(Ordering::Relaxed)
    }

    /// Sources tracked now (bounded by `max_sources` + the overflow entry).
    pub fn tracked_sources(&self) -> usize {
        self.lock().sources.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves counts, never a broken
        // invariant that matters more than answering.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count one request refused for lack of credentials from `source`,
    /// and decide between 401 and 429. Returns whether the caller must
    /// start the writer ([`FloodGate::flush`]).
    pub fn reject(&self, source: Option<IpAddr>, first: FirstRequest) -> (Verdict, bool) {
        let now = Instant::now();
        let mut state = self.lock();
        let key = self.slot(&mut state, source, now);
        let limits = &self.limits;
        let entry = state.sources.entry(key).or_insert_with(|| Source {
            tokens: f64::from(limits.burst),
            refilled: now,
            windows: Default::default(),
        });
        let rate = f64::from(limits.per_second.max(1));
        entry.tokens = (entry.tokens + now.duration_since(entry.refilled).as_secs_f64() * rate)
            .min(f64::from(limits.burst));
        entry.refilled = now;
        let (reason, verdict) = if entry.tokens >= 1.0 {
            entry.tokens -= 1.0;
            (Reason::Unauthorized, None)
        } else {
            let wait = ((1.0 - entry.tokens) / rate).ceil().max(1.0) as u64;
            (Reason::Throttled, Some(wait))
        };
        let window_len = limits.window;
        let window = &mut entry.windows[reason.index()];
        window.pending += 1;
        let opens = window
            .row
            .is_none_or(|(_, at)| now.duration_since(at) >= window_len);
        if opens && window.first.is_none() {
            let mut first = first;
            if reason == Reason::Throttled {
                first.detail = "too many rejected requests from this source".into();
            }
            window.first = Some(first);
        }
        state.enqueued += 1;
        let ticket = state.enqueued;
        let start = !state.writing;
        state.writing = true;
        drop(state);
        self.counted[reason.index()].fetch_add(1, Ordering::Relaxed);
        let verdict = match verdict {
            None => Verdict::Unauthorized { ticket },
            Some(retry_after) => Verdict::Throttled { retry_after },
        };
        (verdict, start)
    }

    /// The map key for `source`: itself when tracked or when there is
    /// room, else the overflow entry. When full, drops sources with nothing
    /// pending whose windows ended (at most once a second, so a flood from
    /// many addresses does not sweep the map on every request).
    fn slot(&self, state: &mut State, source: Option<IpAddr>, now: Instant) -> Option<IpAddr> {
        if state.sources.contains_key(&source) || state.sources.len() < self.limits.max_sources {
            return source;
        }
        if state
            .last_sweep
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
        {
            state.last_sweep = Some(now);
            let window = self.limits.window;
            state.sources.retain(|key, s| {
                key.is_none()
                    || s.windows.iter().any(|w| {
                        w.pending > 0
                            || w.row.is_some_and(|(_, at)| now.duration_since(at) < window)
                    })
            });
        }
        if state.sources.len() < self.limits.max_sources {
            source
        } else {
            None
        }
    }

    /// Wait until `ticket` is written (or the wait bound passes).
    pub async fn written(&self, ticket: u64) {
        let mut rx = self.flushed.subscribe();
        let _ = tokio::time::timeout(self.limits.audit_wait, rx.wait_for(|f| *f >= ticket)).await;
    }

    /// The writer: write every pending count, round after round, until
    /// none is left. One at a time per gate (`reject` says who starts it).
    pub async fn flush(self: Arc<Self>, pool: Pool) {
        loop {
            let (work, upto) = {
                let mut state = self.lock();
                let now = Instant::now();
                let mut work = Vec::new();
                for (key, source) in state.sources.iter_mut() {
                    for reason in Reason::ALL {
                        let w = &mut source.windows[reason.index()];
                        if w.pending == 0 {
                            continue;
                        }
                        if w.row
                            .is_some_and(|(_, at)| now.duration_since(at) >= self.limits.window)
                        {
                            w.row = None;
                        }
                        work.push((*key, reason, w.row.map(|r| r.0), w.first.take(), w.pending));
                        w.pending = 0;
                    }
                }
                if work.is_empty() {
                    state.writing = false;
                    let upto = state.enqueued;
                    drop(state);
                    self.flushed.send_replace(upto);
                    return;
                }
                (work, state.enqueued)
            };
            let mut conn = match pool.get().await {
                Ok(conn) => Some(conn),
                Err(e) => {
                    tracing::warn!(event = "rejections_unaudited", error = %bounded(e.to_string()), "could not audit rejected admin requests");
                    None
                }
            };
            for (key, reason, row, first, count) in work {
                let Some(conn) = conn.as_mut() else { break };
                let first = first.unwrap_or_else(|| FirstRequest {
                    backfill_id: "*".into(),
                    action: "unknown".into(),
                    correlation: None,
                    detail: String::new(),
                });
                let source = key.map_or_else(|| "other".to_string(), |ip| ip.to_string());
                let audit = NewAudit {
                    backfill_id: &first.backfill_id,
                    action: &first.action,
                    actor: None,
                    authority: "none",
                    correlation: first.correlation.as_deref(),
                    outcome: reason.as_str(),
                    detail: Some(&first.detail),
                    ..Default::default()
                };
                match store::audit_coalesce(conn, row, &audit, &source, count).await {
                    Ok(seq) => {
                        if row != Some(seq) {
                            let mut state = self.lock();
                            if let Some(s) = state.sources.get_mut(&key) {
                                s.windows[reason.index()].row = Some((seq, Instant::now()));
                            }
                        }
                    }
                    Err(e) => {
                        tracing::warn!(event = "rejections_unaudited", reason = reason.as_str(), count, error = %e, "could not audit rejected admin requests");
                    }
                }
            }
            self.flushed.send_replace(upto);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first() -> FirstRequest {
        FirstRequest {
            backfill_id: "*".into(),
            action: "list".into(),
            correlation: None,
            detail: String::new(),
        }
    }

    /// API-3: a flood from more sources than the cap keeps the map at the
    /// cap plus the overflow entry, and past the burst a source gets 429.
    #[test]
    fn sources_are_capped_and_a_source_past_its_rate_is_throttled() {
        let gate = FloodGate::new(FloodLimits {
            max_sources: 4,
            burst: 3,
            per_second: 1,
            ..FloodLimits::default()
        });
        for i in 0..1000u32 {
            gate.reject(Some(IpAddr::from(i.to_be_bytes())), first());
        }
        assert!(gate.tracked_sources() <= 5, "{}", gate.tracked_sources());
        let one = Some(IpAddr::from([10, 0, 0, 1]));
        let gate = FloodGate::new(FloodLimits {
            burst: 3,
            per_second: 1,
            ..FloodLimits::default()
        });
        let verdicts: Vec<Verdict> = (0..5).map(|_| gate.reject(one, first()).0).collect();
        assert!(matches!(verdicts[2], Verdict::Unauthorized { .. }));
        assert!(matches!(verdicts[3], Verdict::Throttled { retry_after: 1 }));
        assert_eq!(gate.counted(Reason::Throttled), 2);
    }
}
