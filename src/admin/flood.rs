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
        self.reject_at(source, first, Instant::now())
    }

    /// [`FloodGate::reject`] at `now`, which unit tests pass explicitly so
    /// that refills, windows and sweeps happen at instants they choose.
    fn reject_at(
        &self,
        source: Option<IpAddr>,
        first: FirstRequest,
        now: Instant,
    ) -> (Verdict, bool) {
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

    fn request(action: &str) -> FirstRequest {
        FirstRequest {
            backfill_id: "*".into(),
            action: action.into(),
            correlation: None,
            detail: "no credentials".into(),
        }
    }

    fn ip(n: u32) -> Option<IpAddr> {
        Some(IpAddr::from(n.to_be_bytes()))
    }

    /// The status `reject_at` answers with, and its ticket (401) or
    /// Retry-After (429).
    fn answer(gate: &FloodGate, source: Option<IpAddr>, now: Instant) -> (u16, u64) {
        match gate.reject_at(source, request("list"), now).0 {
            Verdict::Unauthorized { ticket } => (401, ticket),
            Verdict::Throttled { retry_after } => (429, retry_after),
        }
    }

    /// The tracked sources, sorted, the overflow entry as `None`.
    fn keys(gate: &FloodGate) -> Vec<Option<IpAddr>> {
        let mut keys: Vec<_> = gate.lock().sources.keys().copied().collect();
        keys.sort();
        keys
    }

    /// Counts not yet written, over every source and reason.
    fn pending(gate: &FloodGate) -> i64 {
        let state = gate.lock();
        state
            .sources
            .values()
            .flat_map(|s| &s.windows)
            .map(|w| w.pending)
            .sum()
    }

    /// What `flush` leaves after writing the window of `source` and
    /// `reason`: nothing pending, the first request taken, and the row
    /// (`None` when the write failed before any row existed).
    fn after_flush(
        gate: &FloodGate,
        source: Option<IpAddr>,
        reason: Reason,
        row: Option<(i64, Instant)>,
    ) {
        let mut state = gate.lock();
        let window = &mut state.sources.get_mut(&source).expect("tracked").windows[reason.index()];
        window.pending = 0;
        window.first = None;
        window.row = row;
    }

    /// API-3: tokens refill at exactly `per_second` over the elapsed time,
    /// up to `burst`; a source holding exactly one token is answered 401.
    #[test]
    fn api3_tokens_refill_at_the_rate_up_to_the_burst() {
        let gate = FloodGate::new(FloodLimits {
            burst: 3,
            per_second: 2,
            ..FloodLimits::default()
        });
        let one = ip(1);
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let answers: Vec<_> = (0..4).map(|_| answer(&gate, one, t0)).collect();
        assert_eq!(answers, [(401, 1), (401, 2), (401, 3), (429, 1)]);
        // Half a second at two a second is exactly one token.
        assert_eq!(answer(&gate, one, at(500)), (401, 5));
        assert_eq!(answer(&gate, one, at(500)).0, 429);
        // A long pause refills the burst and no more.
        let answers: Vec<_> = (0..4).map(|_| answer(&gate, one, at(10_000)).0).collect();
        assert_eq!(answers, [401, 401, 401, 429]);
        assert_eq!(gate.counted(Reason::Unauthorized), 7);
        assert_eq!(gate.counted(Reason::Throttled), 3);
    }

    /// API-3: a `per_second` of 0 is taken as 1, so a throttled source is
    /// told to retry after one second and gets a token back by then.
    #[test]
    fn api3_a_rate_of_zero_is_one_per_second() {
        let gate = FloodGate::new(FloodLimits {
            burst: 1,
            per_second: 0,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        assert_eq!(answer(&gate, ip(1), t0).0, 401);
        assert_eq!(answer(&gate, ip(1), t0), (429, 1));
        assert_eq!(answer(&gate, ip(1), t0 + Duration::from_secs(1)).0, 401);
    }

    /// API-3: Retry-After is the time until the source's next token, in
    /// whole seconds and at least one: with a quarter token at one a
    /// second, and with no token at two a second, both are 1.
    #[test]
    fn api3_retry_after_is_the_wait_for_the_next_token() {
        let t0 = Instant::now();
        let slow = FloodGate::new(FloodLimits {
            burst: 1,
            per_second: 1,
            ..FloodLimits::default()
        });
        assert_eq!(answer(&slow, ip(1), t0).0, 401);
        assert_eq!(
            answer(&slow, ip(1), t0 + Duration::from_millis(250)),
            (429, 1)
        );
        let fast = FloodGate::new(FloodLimits {
            burst: 1,
            per_second: 2,
            ..FloodLimits::default()
        });
        assert_eq!(answer(&fast, ip(1), t0).0, 401);
        assert_eq!(answer(&fast, ip(1), t0), (429, 1));
    }

    /// API-3: a window's first request describes its audit row; a new
    /// window opens exactly when the previous row is `window` old, and an
    /// open window's first request is never replaced.
    #[test]
    fn api3_a_new_window_opens_exactly_when_its_row_is_a_window_old() {
        let gate = FloodGate::new(FloodLimits {
            window: Duration::from_secs(60),
            burst: 100,
            ..FloodLimits::default()
        });
        let one = ip(1);
        let first = |gate: &FloodGate| {
            let state = gate.lock();
            let window = &state.sources[&one].windows[Reason::Unauthorized.index()];
            window.first.as_ref().map(|f| f.action.clone())
        };
        let t0 = Instant::now();
        gate.reject_at(one, request("a"), t0);
        gate.reject_at(one, request("b"), t0);
        assert_eq!(first(&gate).as_deref(), Some("a"));
        after_flush(&gate, one, Reason::Unauthorized, Some((7, t0)));
        let end = t0 + Duration::from_secs(60);
        gate.reject_at(one, request("c"), end - Duration::from_nanos(1));
        assert_eq!(first(&gate), None, "the row's window is still open");
        gate.reject_at(one, request("d"), end);
        gate.reject_at(one, request("e"), end);
        assert_eq!(first(&gate).as_deref(), Some("d"));
    }

    /// API-3: a throttled window's row says why; an unauthorized one keeps
    /// the request's own detail. Both keep the request's action.
    #[test]
    fn api3_throttled_rows_say_why_and_unauthorized_rows_keep_the_detail() {
        let gate = FloodGate::new(FloodLimits {
            burst: 1,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        gate.reject_at(ip(1), request("list"), t0);
        gate.reject_at(ip(1), request("list"), t0);
        let state = gate.lock();
        let [unauthorized, throttled] = &state.sources[&ip(1)].windows;
        let unauthorized = unauthorized.first.as_ref().expect("first 401");
        let throttled = throttled.first.as_ref().expect("first 429");
        assert_eq!(unauthorized.detail, "no credentials");
        assert_eq!(
            throttled.detail,
            "too many rejected requests from this source"
        );
        assert_eq!(
            (&*unauthorized.action, &*throttled.action),
            ("list", "list")
        );
        assert_eq!(Reason::Unauthorized.as_str(), "unauthorized");
        assert_eq!(Reason::Throttled.as_str(), "throttled");
    }

    /// API-3: every rejection, 401 or 429, takes the next ticket, and only
    /// the first one after the writer stopped starts it again.
    #[test]
    fn api3_tickets_count_rejections_and_one_writer_is_started() {
        let gate = FloodGate::new(FloodLimits {
            burst: 2,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        let reject = || match gate.reject_at(ip(1), request("list"), t0) {
            (Verdict::Unauthorized { ticket }, start) => (Some(ticket), start),
            (Verdict::Throttled { .. }, start) => (None, start),
        };
        assert_eq!(reject(), (Some(1), true));
        assert_eq!(reject(), (Some(2), false));
        assert_eq!(reject(), (None, false));
        gate.lock().writing = false;
        let t1 = t0 + Duration::from_secs(1);
        let (verdict, start) = gate.reject_at(ip(1), request("list"), t1);
        assert!(
            matches!(verdict, Verdict::Unauthorized { ticket: 4 }),
            "{verdict:?}"
        );
        assert!(start, "the writer had stopped");
    }

    /// API-3: the map tracks up to `max_sources` sources; later ones share
    /// the overflow entry, while tracked ones keep their own entries.
    #[test]
    fn api3_sources_past_the_cap_share_the_overflow_entry() {
        let gate = FloodGate::new(FloodLimits {
            max_sources: 4,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        for n in 1..=6 {
            gate.reject_at(ip(n), request("list"), t0);
        }
        gate.reject_at(ip(1), request("list"), t0);
        assert_eq!(keys(&gate), [None, ip(1), ip(2), ip(3), ip(4)]);
        assert_eq!(gate.tracked_sources(), 5);
        let state = gate.lock();
        let pending = |key| state.sources[&key].windows[Reason::Unauthorized.index()].pending;
        assert_eq!((pending(ip(1)), pending(None)), (2, 2));
    }

    /// API-3: a full map drops the sources with nothing pending whose
    /// windows ended, and keeps those with counts to write or a row
    /// younger than the window, so no count is lost and an open window
    /// keeps its row.
    #[test]
    fn api3_a_full_map_sweeps_only_sources_with_nothing_left_to_write() {
        let window = Duration::from_secs(60);
        let gate = FloodGate::new(FloodLimits {
            window,
            max_sources: 4,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        for n in 1..=4 {
            gate.reject_at(ip(n), request("list"), t0);
        }
        // 1: its row's window ended; 2: its throttled row's window is open
        // for one more nanosecond; 3: its count is not written yet; 4: its
        // write failed.
        after_flush(&gate, ip(1), Reason::Unauthorized, Some((1, t0)));
        after_flush(&gate, ip(2), Reason::Unauthorized, None);
        let open = Some((2, t0 + Duration::from_nanos(1)));
        after_flush(&gate, ip(2), Reason::Throttled, open);
        after_flush(&gate, ip(4), Reason::Unauthorized, None);
        gate.reject_at(ip(5), request("list"), t0 + window);
        assert_eq!(keys(&gate), [ip(2), ip(3), ip(5)]);
        assert_eq!(pending(&gate), 2);
    }

    /// API-3: a full map is swept at most once a second, and the overflow
    /// entry is never swept, even with nothing pending.
    #[test]
    fn api3_the_map_is_swept_at_most_once_a_second_but_never_the_overflow() {
        let gate = FloodGate::new(FloodLimits {
            max_sources: 2,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        for n in 1..=3 {
            gate.reject_at(ip(n), request("list"), t0);
        }
        assert_eq!(
            keys(&gate),
            [None, ip(1), ip(2)],
            "swept at t0, nothing to drop"
        );
        for key in [ip(1), ip(2), None] {
            after_flush(&gate, key, Reason::Unauthorized, None);
        }
        gate.reject_at(ip(4), request("list"), t0 + Duration::from_millis(999));
        assert_eq!(keys(&gate), [None, ip(1), ip(2)], "too soon to sweep again");
        after_flush(&gate, None, Reason::Unauthorized, None);
        gate.reject_at(ip(5), request("list"), t0 + Duration::from_secs(1));
        assert_eq!(keys(&gate), [None, ip(5)]);
    }

    /// API-3: a flood from more addresses than the cap keeps the map at the
    /// cap plus the overflow entry, and every rejection stays counted.
    #[test]
    fn api3_a_flood_from_many_addresses_loses_no_count() {
        let gate = FloodGate::new(FloodLimits {
            max_sources: 4,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        for n in 0..1000 {
            gate.reject_at(
                ip(n),
                request("list"),
                t0 + Duration::from_millis(10 * u64::from(n)),
            );
        }
        assert_eq!(gate.tracked_sources(), 5);
        assert_eq!(pending(&gate), 1000);
        let counted = gate.counted(Reason::Unauthorized) + gate.counted(Reason::Throttled);
        assert_eq!(counted, 1000);
    }
}
