//! Coalesced rejections (API-3, AUD-3).
//!
//! A refused request is audited, but auditing each one (AUD-1) would let a
//! flood of them grow the audit table without bound and hold database
//! connections that operators need. Here, rejections of one caller and
//! reason are counted in memory and written as ONE audit row per window,
//! whose count grows as the window's requests arrive; past a rate per
//! caller, requests are refused with 429 (and counted the same way, as
//! `throttled`); an authenticated principal is never throttled. A caller is
//! the authenticated principal when there is one, else the peer address, IPv6 addresses by their /64 (one host
//! usually holds a whole /64, so rotating addresses inside it must not buy
//! a fresh window or rate).
//!
//! What the caller chose is never stored verbatim (AUD-3): the row names
//! the backfill and action only while every request it counts named the
//! same ones (`*` once they differ), the ID is already a placeholder when
//! it failed validation, and no correlation is kept.
//!
//! Authorized requests never come here: they never wait on this module's
//! mutex or its writer. The mutex is held only for map updates, never
//! across an await. At most one writer task per process writes, on one
//! pool connection at a time. The caller map is capped: when it is full
//! and no entry can be dropped, new callers share one overflow entry
//! (source `other`), so memory stays bounded however many addresses a
//! flood uses.

use crate::repair::bounded;
use crate::store::{self, NewAudit, Pool};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Bounds of the rejection path.
#[derive(Debug, Clone)]
pub struct FloodLimits {
    /// One coalesced audit row per caller and reason per window.
    pub window: Duration,
    /// Rejections a caller may cause at once before 429 ...
    pub burst: u32,
    /// ... and per second after that.
    pub per_second: u32,
    /// Callers tracked at once; further ones share one overflow entry.
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
    /// The principal lacks the capability (403).
    Forbidden,
    /// Malformed input from an authorized caller (400).
    BadRequest,
    /// A state-changing request from another site (403, AUTH-3).
    CrossSite,
    /// A `Host` this server does not answer for (421, AUTH-3).
    Misdirected,
    /// Past the caller's rate (429).
    Throttled,
}

impl Reason {
    /// Every reason, for metrics.
    pub const ALL: [Reason; 6] = [
        Reason::Unauthorized,
        Reason::Forbidden,
        Reason::BadRequest,
        Reason::CrossSite,
        Reason::Misdirected,
        Reason::Throttled,
    ];

    /// The bounded name (the error code of the answer, `throttled` for 429).
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Unauthorized => "unauthorized",
            Reason::Forbidden => "forbidden",
            Reason::BadRequest => "bad_request",
            Reason::CrossSite => "cross_site",
            Reason::Misdirected => "misdirected_request",
            Reason::Throttled => "throttled",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Who a rejection is counted against.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Caller {
    /// An authenticated principal, by name.
    Principal(String),
    /// A caller without an individual name, by peer address (see
    /// [`Caller::source`]); `None` when the peer is not a socket.
    Source(Option<IpAddr>),
}

impl Caller {
    /// The caller for a peer address: IPv4 as is, IPv6 by its /64, and an
    /// IPv4-mapped IPv6 address as the IPv4 address it is.
    pub fn source(peer: Option<IpAddr>) -> Self {
        Caller::Source(peer.map(|ip| match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let bits = u128::from(v6) & !((1u128 << 64) - 1);
                    IpAddr::V6(Ipv6Addr::from(bits))
                }
            },
            v4 => v4,
        }))
    }

    /// The `source` column of the caller's rows.
    fn column(&self) -> Option<String> {
        match self {
            Caller::Principal(_) => None,
            Caller::Source(None) => Some("unknown".into()),
            Caller::Source(Some(IpAddr::V6(v6))) => Some(format!("{v6}/64")),
            Caller::Source(Some(ip)) => Some(ip.to_string()),
        }
    }
}

/// What the gate decided about one rejected request.
#[derive(Debug)]
pub enum Verdict {
    /// Refused for its own reason: counted; wait for `ticket` to be written
    /// before answering.
    Refused { ticket: u64 },
    /// 429: counted; retry after this many seconds.
    Throttled { retry_after: u64 },
}

/// One rejected request, as its window's audit row describes it.
#[derive(Debug, Clone)]
pub struct Rejected {
    /// The ID as the audit may hold it (a placeholder when it failed
    /// validation), or `*`.
    pub backfill_id: String,
    pub action: String,
    /// `none`, `token` or `trusted-network`.
    pub authority: &'static str,
    /// The server's own text for the refusal.
    pub detail: String,
}

impl Rejected {
    /// Fold `other` into this description of a batch of requests: what
    /// they do not share becomes `*`.
    fn merge(&mut self, other: &Rejected) {
        if self.backfill_id != other.backfill_id {
            self.backfill_id = "*".into();
        }
        if self.action != other.action {
            self.action = "*".into();
        }
    }
}

#[derive(Debug, Default)]
struct Window {
    /// The window's audit row, once written, and when it was opened.
    row: Option<(i64, Instant)>,
    /// The requests counted but not yet written, merged.
    batch: Option<Rejected>,
    /// How many they are.
    pending: i64,
}

#[derive(Debug)]
struct Entry {
    tokens: f64,
    refilled: Instant,
    windows: [Window; Reason::ALL.len()],
}

#[derive(Debug, Default)]
struct State {
    /// `None` is the overflow entry of callers beyond the cap.
    callers: HashMap<Option<Caller>, Entry>,
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
    counted: [AtomicU64; Reason::ALL.len()],
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

    /// Callers tracked now (bounded by `max_sources` + the overflow entry).
    pub fn tracked_sources(&self) -> usize {
        self.lock().callers.len()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves counts, never a broken
        // invariant that matters more than answering.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count one request of `caller` refused for `reason`, and decide
    /// between that refusal and 429. Returns whether the caller must start
    /// the writer ([`FloodGate::flush`]).
    pub fn reject(&self, caller: Caller, reason: Reason, request: Rejected) -> (Verdict, bool) {
        self.reject_at(caller, reason, request, Instant::now())
    }

    /// [`FloodGate::reject`] at `now`, which unit tests pass explicitly so
    /// that refills, windows and sweeps happen at instants they choose.
    fn reject_at(
        &self,
        caller: Caller,
        reason: Reason,
        request: Rejected,
        now: Instant,
    ) -> (Verdict, bool) {
        // A principal is accountable by name and its refusals are cheap
        // (counted in memory, written coalesced): it is never answered
        // 429, so an operator's mistyped requests keep their own answers.
        let rated = !matches!(caller, Caller::Principal(_));
        let mut state = self.lock();
        let key = self.slot(&mut state, caller, now);
        let limits = &self.limits;
        let entry = state.callers.entry(key).or_insert_with(|| Entry {
            tokens: f64::from(limits.burst),
            refilled: now,
            windows: Default::default(),
        });
        let rate = f64::from(limits.per_second.max(1));
        entry.tokens = (entry.tokens + now.duration_since(entry.refilled).as_secs_f64() * rate)
            .min(f64::from(limits.burst));
        entry.refilled = now;
        let (reason, verdict) = if !rated {
            (reason, None)
        } else if entry.tokens >= 1.0 {
            entry.tokens -= 1.0;
            (reason, None)
        } else {
            let wait = ((1.0 - entry.tokens) / rate).ceil().max(1.0) as u64;
            (Reason::Throttled, Some(wait))
        };
        let window = &mut entry.windows[reason.index()];
        window.pending += 1;
        let mut request = request;
        if reason == Reason::Throttled {
            request.detail = "too many rejected requests from this caller".into();
        }
        match &mut window.batch {
            Some(batch) => batch.merge(&request),
            None => window.batch = Some(request),
        }
        state.enqueued += 1;
        let ticket = state.enqueued;
        let start = !state.writing;
        state.writing = true;
        drop(state);
        self.counted[reason.index()].fetch_add(1, Ordering::Relaxed);
        let verdict = match verdict {
            None => Verdict::Refused { ticket },
            Some(retry_after) => Verdict::Throttled { retry_after },
        };
        (verdict, start)
    }

    /// The map key for `caller`: itself when tracked or when there is
    /// room, else the overflow entry. When full, drops callers with nothing
    /// pending whose windows ended (at most once a second, so a flood from
    /// many addresses does not sweep the map on every request).
    fn slot(&self, state: &mut State, caller: Caller, now: Instant) -> Option<Caller> {
        let caller = Some(caller);
        if state.callers.contains_key(&caller) || state.callers.len() < self.limits.max_sources {
            return caller;
        }
        if state
            .last_sweep
            .is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1))
        {
            state.last_sweep = Some(now);
            let window = self.limits.window;
            state.callers.retain(|key, s| {
                key.is_none()
                    || s.windows.iter().any(|w| {
                        w.pending > 0
                            || w.row.is_some_and(|(_, at)| now.duration_since(at) < window)
                    })
            });
        }
        if state.callers.len() < self.limits.max_sources {
            caller
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
                for (key, caller) in state.callers.iter_mut() {
                    for reason in Reason::ALL {
                        let w = &mut caller.windows[reason.index()];
                        if w.pending == 0 {
                            continue;
                        }
                        if w.row
                            .is_some_and(|(_, at)| now.duration_since(at) >= self.limits.window)
                        {
                            w.row = None;
                        }
                        work.push((
                            key.clone(),
                            reason,
                            w.row.map(|r| r.0),
                            w.batch.take(),
                            w.pending,
                        ));
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
            for (key, reason, row, batch, count) in work {
                let Some(conn) = conn.as_mut() else { break };
                let batch = batch.unwrap_or_else(|| Rejected {
                    backfill_id: "*".into(),
                    action: "*".into(),
                    authority: "none",
                    detail: String::new(),
                });
                let (actor, source) = match &key {
                    Some(Caller::Principal(name)) => (Some(name.as_str()), None),
                    Some(caller) => (None, caller.column()),
                    None => (None, Some("other".to_string())),
                };
                let audit = NewAudit {
                    backfill_id: &batch.backfill_id,
                    action: &batch.action,
                    actor,
                    authority: batch.authority,
                    correlation: None,
                    outcome: reason.as_str(),
                    detail: Some(&batch.detail),
                    ..Default::default()
                };
                match store::audit_coalesce(conn, row, &audit, source.as_deref(), count).await {
                    Ok(seq) => {
                        if row != Some(seq) {
                            let mut state = self.lock();
                            if let Some(s) = state.callers.get_mut(&key) {
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

    fn request(action: &str) -> Rejected {
        Rejected {
            backfill_id: "*".into(),
            action: action.into(),
            authority: "none",
            detail: "no credentials".into(),
        }
    }

    fn ip(n: u32) -> Option<Caller> {
        Some(Caller::source(Some(IpAddr::from(n.to_be_bytes()))))
    }

    /// `reject_at` of a 401 from `caller` (`ip` wraps it in `Some` so it
    /// compares with the map's keys, where `None` is the overflow entry).
    fn refuse(
        gate: &FloodGate,
        caller: Option<Caller>,
        r: Rejected,
        now: Instant,
    ) -> (Verdict, bool) {
        let caller = caller.expect("a caller, not the overflow entry");
        gate.reject_at(caller, Reason::Unauthorized, r, now)
    }

    /// The status `reject_at` answers with, and its ticket (401) or
    /// Retry-After (429).
    fn answer(gate: &FloodGate, source: Option<Caller>, now: Instant) -> (u16, u64) {
        match refuse(gate, source, request("list"), now).0 {
            Verdict::Refused { ticket } => (401, ticket),
            Verdict::Throttled { retry_after } => (429, retry_after),
        }
    }

    /// The tracked sources, sorted, the overflow entry as `None`.
    fn keys(gate: &FloodGate) -> Vec<Option<Caller>> {
        let mut keys: Vec<_> = gate.lock().callers.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Counts not yet written, over every source and reason.
    fn pending(gate: &FloodGate) -> i64 {
        let state = gate.lock();
        state
            .callers
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
        source: Option<Caller>,
        reason: Reason,
        row: Option<(i64, Instant)>,
    ) {
        let mut state = gate.lock();
        let window = &mut state.callers.get_mut(&source).expect("tracked").windows[reason.index()];
        window.pending = 0;
        window.batch = None;
        window.row = row;
    }

    /// API-3: tokens refill at exactly `per_second` over the elapsed time,
    /// up to `burst`; a source holding exactly one token is answered 401.
    #[test]
    fn api03_tokens_refill_at_the_rate_up_to_the_burst() {
        let gate = FloodGate::new(FloodLimits {
            burst: 3,
            per_second: 2,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let answers: Vec<_> = (0..4).map(|_| answer(&gate, ip(1), t0)).collect();
        assert_eq!(answers, [(401, 1), (401, 2), (401, 3), (429, 1)]);
        // Half a second at two a second is exactly one token.
        assert_eq!(answer(&gate, ip(1), at(500)), (401, 5));
        assert_eq!(answer(&gate, ip(1), at(500)).0, 429);
        // A long pause refills the burst and no more.
        let answers: Vec<_> = (0..4).map(|_| answer(&gate, ip(1), at(10_000)).0).collect();
        assert_eq!(answers, [401, 401, 401, 429]);
        assert_eq!(gate.counted(Reason::Unauthorized), 7);
        assert_eq!(gate.counted(Reason::Throttled), 3);
    }

    /// API-3: a `per_second` of 0 is taken as 1, so a throttled source is
    /// told to retry after one second and gets a token back by then.
    #[test]
    fn api03_a_rate_of_zero_is_one_per_second() {
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
    fn api03_retry_after_is_the_wait_for_the_next_token() {
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

    /// AUD-3: the requests of a batch are described by what they share:
    /// the same action stays, different actions or IDs become `*`, and a
    /// written batch starts the next one afresh.
    #[test]
    fn aud03_a_batch_names_only_what_its_requests_share() {
        let gate = FloodGate::new(FloodLimits {
            burst: 100,
            ..FloodLimits::default()
        });
        let batch = |gate: &FloodGate| {
            let state = gate.lock();
            let window = &state.callers[&ip(1)].windows[Reason::Unauthorized.index()];
            window
                .batch
                .as_ref()
                .map(|f| format!("{} {}", f.backfill_id, f.action))
        };
        let on = |id: &str, action: &str| Rejected {
            backfill_id: id.into(),
            ..request(action)
        };
        let t0 = Instant::now();
        refuse(&gate, ip(1), on("a.b", "pause"), t0);
        refuse(&gate, ip(1), on("a.b", "pause"), t0);
        assert_eq!(batch(&gate).as_deref(), Some("a.b pause"));
        refuse(&gate, ip(1), on("a.c", "pause"), t0);
        assert_eq!(batch(&gate).as_deref(), Some("* pause"));
        refuse(&gate, ip(1), on("a.c", "start"), t0);
        assert_eq!(batch(&gate).as_deref(), Some("* *"));
        after_flush(&gate, ip(1), Reason::Unauthorized, Some((7, t0)));
        refuse(&gate, ip(1), on("a.c", "start"), t0);
        assert_eq!(batch(&gate).as_deref(), Some("a.c start"));
    }

    /// AUD-3: a principal is a caller of its own wherever it connects
    /// from, whose refusals are counted but never answered 429, and IPv6
    /// peers are counted by their /64.
    #[test]
    fn aud03_principals_are_callers_and_ipv6_peers_count_by_64() {
        let v6 = |s: &str| Caller::source(Some(s.parse().expect("address")));
        assert_eq!(v6("2001:db8:1:2:aaaa::1"), v6("2001:db8:1:2:ffff::9"));
        assert_ne!(v6("2001:db8:1:2::1"), v6("2001:db8:1:3::1"));
        assert_eq!(v6("::ffff:10.0.0.1"), v6("10.0.0.1"));
        assert_eq!(
            v6("2001:db8:1:2:aaaa::1").column().as_deref(),
            Some("2001:db8:1:2::/64")
        );
        let gate = FloodGate::new(FloodLimits {
            burst: 1,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        for _ in 0..300 {
            let (verdict, _) = gate.reject_at(
                Caller::Principal("viewer".into()),
                Reason::Forbidden,
                request("pause"),
                t0,
            );
            assert!(matches!(verdict, Verdict::Refused { .. }), "never 429");
        }
        let state = gate.lock();
        let viewer = &state.callers[&Some(Caller::Principal("viewer".into()))];
        assert_eq!(viewer.windows[Reason::Forbidden.index()].pending, 300);
        assert_eq!(Caller::Principal("viewer".into()).column(), None);
    }

    /// API-3: a throttled window's row says why; an unauthorized one keeps
    /// the request's own detail. Both keep the request's action.
    #[test]
    fn api03_throttled_rows_say_why_and_unauthorized_rows_keep_the_detail() {
        let gate = FloodGate::new(FloodLimits {
            burst: 1,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        refuse(&gate, ip(1), request("list"), t0);
        refuse(&gate, ip(1), request("list"), t0);
        let state = gate.lock();
        let windows = &state.callers[&ip(1)].windows;
        let unauthorized = windows[Reason::Unauthorized.index()].batch.as_ref();
        let throttled = windows[Reason::Throttled.index()].batch.as_ref();
        let unauthorized = unauthorized.expect("first 401");
        let throttled = throttled.expect("first 429");
        assert_eq!(unauthorized.detail, "no credentials");
        assert_eq!(
            throttled.detail,
            "too many rejected requests from this caller"
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
    fn api03_tickets_count_rejections_and_one_writer_is_started() {
        let gate = FloodGate::new(FloodLimits {
            burst: 2,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        let reject = || match refuse(&gate, ip(1), request("list"), t0) {
            (Verdict::Refused { ticket }, start) => (Some(ticket), start),
            (Verdict::Throttled { .. }, start) => (None, start),
        };
        assert_eq!(reject(), (Some(1), true));
        assert_eq!(reject(), (Some(2), false));
        assert_eq!(reject(), (None, false));
        gate.lock().writing = false;
        let t1 = t0 + Duration::from_secs(1);
        let (verdict, start) = refuse(&gate, ip(1), request("list"), t1);
        assert!(
            matches!(verdict, Verdict::Refused { ticket: 4 }),
            "{verdict:?}"
        );
        assert!(start, "the writer had stopped");
    }

    /// API-3: the map tracks up to `max_sources` sources; later ones share
    /// the overflow entry, while tracked ones keep their own entries.
    #[test]
    fn api03_sources_past_the_cap_share_the_overflow_entry() {
        let gate = FloodGate::new(FloodLimits {
            max_sources: 4,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        for n in 1..=6 {
            refuse(&gate, ip(n), request("list"), t0);
        }
        refuse(&gate, ip(1), request("list"), t0);
        assert_eq!(keys(&gate), [None, ip(1), ip(2), ip(3), ip(4)]);
        assert_eq!(gate.tracked_sources(), 5);
        let state = gate.lock();
        let pending = |key| state.callers[&key].windows[Reason::Unauthorized.index()].pending;
        assert_eq!((pending(ip(1)), pending(None)), (2, 2));
    }

    /// API-3: a full map drops the sources with nothing pending whose
    /// windows ended, and keeps those with counts to write or a row
    /// younger than the window, so no count is lost and an open window
    /// keeps its row.
    #[test]
    fn api03_a_full_map_sweeps_only_sources_with_nothing_left_to_write() {
        let window = Duration::from_secs(60);
        let gate = FloodGate::new(FloodLimits {
            window,
            max_sources: 4,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        for n in 1..=4 {
            refuse(&gate, ip(n), request("list"), t0);
        }
        // 1: its row's window ended; 2: its throttled row's window is open
        // for one more nanosecond; 3: its count is not written yet; 4: its
        // write failed.
        after_flush(&gate, ip(1), Reason::Unauthorized, Some((1, t0)));
        after_flush(&gate, ip(2), Reason::Unauthorized, None);
        let open = Some((2, t0 + Duration::from_nanos(1)));
        after_flush(&gate, ip(2), Reason::Throttled, open);
        after_flush(&gate, ip(4), Reason::Unauthorized, None);
        refuse(&gate, ip(5), request("list"), t0 + window);
        assert_eq!(keys(&gate), [ip(2), ip(3), ip(5)]);
        assert_eq!(pending(&gate), 2);
    }

    /// API-3: a full map is swept at most once a second, and the overflow
    /// entry is never swept, even with nothing pending.
    #[test]
    fn api03_the_map_is_swept_at_most_once_a_second_but_never_the_overflow() {
        let gate = FloodGate::new(FloodLimits {
            max_sources: 2,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        for n in 1..=3 {
            refuse(&gate, ip(n), request("list"), t0);
        }
        assert_eq!(
            keys(&gate),
            [None, ip(1), ip(2)],
            "swept at t0, nothing to drop"
        );
        for key in [ip(1), ip(2), None] {
            after_flush(&gate, key, Reason::Unauthorized, None);
        }
        refuse(
            &gate,
            ip(4),
            request("list"),
            t0 + Duration::from_millis(999),
        );
        assert_eq!(keys(&gate), [None, ip(1), ip(2)], "too soon to sweep again");
        after_flush(&gate, None, Reason::Unauthorized, None);
        refuse(&gate, ip(5), request("list"), t0 + Duration::from_secs(1));
        assert_eq!(keys(&gate), [None, ip(5)]);
    }

    /// API-3: a flood from more addresses than the cap keeps the map at the
    /// cap plus the overflow entry, and every rejection stays counted.
    #[test]
    fn api03_a_flood_from_many_addresses_loses_no_count() {
        let gate = FloodGate::new(FloodLimits {
            max_sources: 4,
            ..FloodLimits::default()
        });
        let t0 = Instant::now();
        for n in 0..1000 {
            refuse(
                &gate,
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
