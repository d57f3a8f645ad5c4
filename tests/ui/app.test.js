// CT-12: the web client's projection keeps unknown and failure states
// honest and offers only the actions of docs/CONTRACT.md section 3. Runs with
// node's built-in test runner: `node --test tests/ui/`. The same page in a
// real browser against a real server: tests/ui_browser.rs.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const app = require("../../src/http/ui/app.js");

const T0 = "2026-12-01T10:00:00Z";
const at = (secs) => new Date(Date.parse(T0) + secs * 1000).toISOString();

function view(extra) {
  return {
    id: "x", state: "running", attempts: 0, next_attempt_at: null, generation: 2,
    progress: { rows_done: 4, total_rows: 10, fraction: 0.4, batches_done: 1 },
    owner: { disposition: "held", worker: "w1", until: at(21) },
    last_error: null, validation: null, readiness: { required: false, gating: false },
    observed_at: T0,
    ...extra,
  };
}

test("ct12 unknown progress is shown as unknown, never as 0%", () => {
  const cell = app.progressCell({ rows_done: 0, total_rows: null, fraction: null, batches_done: 0 });
  assert.match(cell, /unknown/);
  assert.doesNotMatch(cell, /%/);
  assert.doesNotMatch(cell, /progressbar/);
  assert.match(app.progressCell({ rows_done: 5, total_rows: 10, fraction: 0.5 }), /50\.0%/);
  assert.strictEqual(app.rowsText({ rows_done: 1200, total_rows: null, fraction: null }), "1,200 of unknown");
  assert.strictEqual(app.rowsText(undefined), "unknown of unknown");
});

test("ct12 a failed refresh is stale with its age, never empty, zero or live", () => {
  const now = Date.parse(T0);
  const line = app.statusLine({ token: "t", lastOkAt: now - 14000, lastError: "network error" }, now);
  assert.strictEqual(line.cls, "stale");
  assert.strictEqual(`${line.label}: ${line.age}`, "Stale: last refreshed 14 s ago");
  assert.match(line.text, /network error/);
  assert.notStrictEqual(line.label, "Live");
  const never = app.statusLine({ token: "t", lastError: "HTTP 503" }, now);
  assert.strictEqual(never.cls, "error");
  assert.match(never.text, /nothing is shown/);
  const fresh = app.statusLine({ token: "t", lastOkAt: now - 1000 }, now);
  assert.strictEqual(fresh.label, "Live");
  assert.strictEqual(fresh.age, "last refreshed 1 s ago");
});

test("ct12 a 401 shows the token prompt's message and no data", () => {
  const line = app.statusLine({ token: "t", unauthorized: "HTTP 401 unauthorized", lastOkAt: 1 }, 2);
  assert.strictEqual(line.cls, "error");
  assert.match(line.text, /Nothing is shown/);
  assert.strictEqual(line.age, "");
  assert.strictEqual(app.statusLine({ token: "" }).label, "No token");
});

test("ct12 only the actions of the contract are offered, and only where the state allows", () => {
  assert.deepStrictEqual(app.ACTIONS, ["start", "pause", "resume", "retry", "validate"]);
  const expected = {
    pending: ["start"],
    running: ["pause", "validate"],
    validating: ["pause", "validate"],
    paused: ["resume", "validate"],
    blocked: ["retry", "validate"],
    failed: ["retry", "validate"],
    completed: ["validate"],
    mystery: [],
  };
  for (const [state, actions] of Object.entries(expected)) {
    assert.deepStrictEqual(app.actionsFor(state), actions, state);
  }
  for (const forbidden of ["reset", "rewind", "delete", "cancel", "complete", "release"]) {
    assert.ok(!app.ACTIONS.includes(forbidden));
  }
  for (const a of app.ACTIONS) assert.ok(app.CONSEQUENCES[a], `${a} is explained before it is confirmed`);
});

test("ct12 results are described from the server's answer, never synthesised", () => {
  assert.match(app.describeResult("pause", 409, { error: "conflict", current: { state: "completed" } }), /conflict.*completed/);
  assert.match(app.describeResult("validate", 200, { outcome: "current-state", state: "pending", reason: "not started" }), /current-state/);
  assert.match(app.describeResult("start", 502, null), /outcome is unknown/);
  assert.match(app.describeResult("pause", null, null), /no answer \(network error\); the outcome is unknown/);
  assert.strictEqual(app.describeResult("pause", 200, { outcome: "applied", prior_state: "running", backfill: { state: "paused" } }),
    "pause: applied (running → paused)");
  assert.strictEqual(app.resultOutcome(200, { outcome: "failure" }), "failure");
  assert.strictEqual(app.resultOutcome(null, null), "unknown");
  assert.strictEqual(app.resultOutcome(503, { error: "unavailable" }), "unknown");
});

test("adm4 one key per intended action, the same key when it is retried unanswered", () => {
  let n = 0;
  const mint = () => `k${++n}`;
  const first = app.keyFor(null, "pause", "x", mint);
  assert.strictEqual(first, "k1");
  const pending = { action: "pause", id: "x", key: first, unanswered: true };
  assert.strictEqual(app.keyFor(pending, "pause", "x", mint), "k1", "a retry reuses the key");
  assert.strictEqual(app.keyFor(pending, "resume", "x", mint), "k2", "another action is another request");
  assert.strictEqual(app.keyFor(pending, "pause", "y", mint), "k3", "another backfill is another request");
  assert.strictEqual(app.keyFor({ ...pending, unanswered: false }, "pause", "x", mint), "k4", "an answered action is done");
  assert.ok(!app.settles(null), "a network failure leaves the action open");
  assert.ok(!app.settles(503), "a 5xx leaves it open");
  assert.ok(app.settles(200) && app.settles(409) && app.settles(422));
  assert.match(app.newKey(), /^ui-[!-~]{1,196}$/);
  assert.notStrictEqual(app.newKey(), app.newKey());
});

test("ct12 rows/s and ETA only for running rows, stale or unknown said so", () => {
  assert.deepStrictEqual(app.rateEta(view({ state: "paused" }), 10, false), { rate: "—", eta: "—", applicable: false });
  assert.strictEqual(app.rateEta(view(), 2, true).rate, "stale");
  assert.strictEqual(app.rateEta(view(), null, false).eta, "measuring…");
  assert.deepStrictEqual(app.rateEta(view(), 2, false), { rate: "2.0 rows/s", eta: "3 s", applicable: true });
  const unknown = view({ progress: { rows_done: 4, total_rows: null, fraction: null } });
  assert.strictEqual(app.rateEta(unknown, 2, false).eta, "unknown (total unknown)");
  assert.strictEqual(app.rateEta(view(), 0, false).eta, "unknown (no progress)");
  assert.strictEqual(app.rateEta(view({ progress: { rows_done: 0, total_rows: 1e6, fraction: 0 } }), 250, false).rate, "250 rows/s");
});

test("obs05 the rate is the server's; the sparkline and the chart break where it is unknown", () => {
  assert.strictEqual(app.serverRate(view()), null, "none reported: measuring");
  assert.strictEqual(app.serverRate(view({ progress: { rows_done: 4, rows_per_second: 2.5 } })), 2.5);
  assert.deepStrictEqual(app.ratePaths([1, 2, null, 2], 40, 10, 2), ["M0.0 5.0 H10.0 V0.0 H20.0", "M30.0 0.0 H40.0"]);
  assert.deepStrictEqual(app.ratePaths([null, null], 40, 10, 0), [], "no line where nothing is known");
  assert.strictEqual(app.ratePeak([null, 3, 1]), 3);
  assert.strictEqual(app.ratePeak([null]), null);
  const running = view({ progress: { rows_done: 4, sparkline: [null, 4, 8] } });
  assert.match(app.sparklineSvg(running), /<svg class="spark"[^>]*aria-label="rows\/s over the last minute, peak 8.0 rows\/s"/);
  assert.match(app.sparklineSvg(view({ progress: { rows_done: 4, sparkline: [null] } })), /measuring/);
  assert.match(app.sparklineSvg(view({ state: "paused" })), /not running/);
  const chart = {
    backfill_id: "x", from: T0, bucket_seconds: 2, observed_at: at(8),
    total: [10, null, 20, 0], partitions: [{ part: 0, rates: [10, null, 20, 0] }],
    intervals: [{ kind: "throttled", part: 0, from: at(6), to: null, detail: "lock_waiters 3 past 0" }],
  };
  const html = app.runChartHtml(chart);
  assert.match(html, /id="run-chart"/);
  assert.strictEqual((html.match(/class="rate-line"/g) || []).length, 4, "two runs, in the whole and the partition");
  assert.match(html, /<rect class="shade shade-throttled"[^>]*><title>throttled \(partition 0\): lock_waiters 3 past 0 from [^<]*, still<\/title>/);
  assert.match(html, /data-part="0"/);
  assert.match(app.runChartHtml({ ...chart, total: [null, null], partitions: [] }), /id="run-chart-empty"/);
  assert.match(app.runChartHtml({ backfill_id: "x", from: null, bucket_seconds: 0, total: [], partitions: [], intervals: [] }), /No rate recorded yet/);
});

test("ct12 owner, lease and next try in relative time by the server's clock", () => {
  const v = view();
  assert.strictEqual(app.ownerText(v.owner, v.observed_at, 0), "held by w1, lease expires in 21 s");
  assert.strictEqual(app.ownerText(v.owner, v.observed_at, 5000), "held by w1, lease expires in 16 s");
  assert.strictEqual(app.ownerText({ disposition: "expired", worker: "w1", until: at(-3) }, T0, 0),
    "w1's lease expired 3 s ago; another worker may take over");
  assert.strictEqual(app.ownerText({ disposition: "none" }, T0, 0), "unclaimed");
  assert.strictEqual(app.ownerText(undefined, T0, 0), "unknown");
  assert.match(app.ownerCell(v.owner, v.observed_at, 0), /w1<div class="sub">lease expires in 21 s/);
  assert.strictEqual(app.retryText(view({ attempts: 2, next_attempt_at: at(5) }), 0), "2 failed attempts, next try in 5 s");
  assert.strictEqual(app.retryText(view({ attempts: 1, next_attempt_at: at(-1) }), 0), "1 failed attempt, next try due now");
  assert.strictEqual(app.fmtDuration(200000), "3 min 20 s");
  assert.strictEqual(app.fmtDuration(3 * 3600e3 + 60e3), "3 h 1 min");
  assert.strictEqual(app.fmtRelative(100), "now");
  assert.strictEqual(app.fmtClock("2026-12-01T09:58:50.5Z", T0), "09:58:50 UTC");
  assert.strictEqual(app.fmtClock("2026-11-30T09:58:50Z", T0), "2026-11-30 09:58:50 UTC");
});

test("thr2 a throttle and live settings render when present and are absent without failing", () => {
  const plain = view();
  assert.strictEqual(app.throttleInfo(plain, 0), null);
  assert.deepStrictEqual(app.settingsRows(plain), []);
  assert.doesNotMatch(app.row(plain, {}), /throttled/);
  const throttled = view({
    throttle: { signal: "replication_lag_bytes", value: 19000000, threshold: 16000000, since: at(-12) },
    batch_size: 500,
    settings: { batch_size: 500, pause_ms: null, target_batch_ms: 200 },
  });
  const t = app.throttleInfo(throttled, 0);
  assert.strictEqual(t.text, "throttled by replication_lag_bytes: 19,000,000 B past 16,000,000 B since 12 s ago");
  assert.match(app.markers(throttled, 0), /throttled: replication_lag_bytes 19,000,000 B past 16,000,000 B/);
  assert.deepStrictEqual(app.settingsRows(throttled), [
    ["batch size in force", "500"], ["batch size", "500"], ["target batch duration (ms)", "200"], ["pause between batches (ms)", "default"],
  ]);
  assert.match(app.row(throttled, {}), /batch 500/);
  const unreadable = app.throttleInfo(view({ throttle: { signal: "wal_rate", value: null, threshold: 5 } }), 0);
  assert.strictEqual(unreadable.value, "unknown", "an unreadable signal is unknown, never zero");
  assert.strictEqual(unreadable.since, null);
});

test("ct12 rows escape server text and mark gating and blocked diagnostics", () => {
  const html = app.row(view({
    state: "blocked", owner: { disposition: "none" },
    progress: { rows_done: 1, total_rows: null, fraction: null },
    last_error: { kind: "blocked", message: "<script>alert(1)</script>" },
    readiness: { required: true, gating: true },
  }), {});
  assert.doesNotMatch(html, /<script>/);
  assert.match(html, /&lt;script&gt;/);
  assert.match(html, /gating/);
  assert.match(html, /data-action="retry"/);
  assert.doesNotMatch(html, /data-action="pause"/);
  assert.match(app.validationCell(view()), /none yet/);
  assert.match(app.validationCell(view({ validation: { outcome: "failure", detail: "3 rows" } })), /failure.*3 rows/);
});

test("emb08 a pending row shows why its automatic start failed, escaped", () => {
  const failed = view({
    state: "pending", owner: { disposition: "none" },
    progress: { rows_done: 0, total_rows: null, fraction: null, batches_done: 0 },
    start_failed: { kind: "blocked", message: "missing <b>table</b>; the automatic start tries again within 30 s", at: T0 },
  });
  const html = app.row(failed, {});
  assert.match(html, /start failed \(blocked\): missing &lt;b&gt;table&lt;\/b&gt;; the automatic start tries again within 30 s/);
  assert.doesNotMatch(html, /<b>/);
  assert.strictEqual(app.startFailedCell(view({ state: "pending", owner: { disposition: "none" } })), "");
  assert.strictEqual(app.startFailedCell({ ...failed, state: "running" }), "");
});

test("ct12 the audit trail names who did what, from which state to which", () => {
  const entries = [
    { seq: 3, at: T0, action: "validate", actor: "ops", authority: "token", prior_state: "completed", resulting_state: "completed", outcome: "failure", detail: "1 row", correlation: "k3", request_count: 1 },
    { seq: 2, at: T0, action: "pause", actor: null, authority: "trusted-network", prior_state: "running", resulting_state: "paused", outcome: "applied", generation: 4, correlation: "k2", request_count: 1 },
    { seq: 1, at: T0, action: "list", actor: null, authority: "none", outcome: "unauthorized", request_count: 40 },
  ];
  const c = app.auditCells(entries[1]);
  assert.strictEqual(c.who, "(trusted-network)");
  assert.strictEqual(c.change, "running → paused");
  assert.strictEqual(c.generation, "4");
  assert.strictEqual(app.auditCells(entries[2]).outcome, "unauthorized ×40");
  assert.strictEqual(app.auditCells(entries[2]).change, "—");
  assert.deepStrictEqual(app.validationHistory(entries).map((e) => e.seq), [3]);
});

test("aud03 audit text shows control and bidirectional characters escaped", () => {
  const entry = { seq: 4, at: T0, action: "start", actor: "a\u202eb", authority: "token",
    outcome: "bad_request", detail: "x\u001b[31m\r\ny", correlation: "k\u0000", request_count: 1 };
  const c = app.auditCells(entry);
  assert.strictEqual(c.who, "a\\u{202e}b");
  assert.strictEqual(c.detail, "x\\u{001b}[31m\\u{000d}\\u{000a}y");
  assert.strictEqual(c.correlation, "k\\u{0000}");
  assert.strictEqual(app.auditText("café → ok"), "café → ok");
});

test("obs04 timeline entries as cells: transition, partition, outcome and detail, escaped", () => {
  const blocked = { source: "runtime", at: T0, kind: "state", partition: null, from_state: "running",
    state: "blocked", actor: null, generation: 2, outcome: null, detail: "blocked: run the migration" };
  assert.deepStrictEqual(app.timelineCells(blocked),
    { at: T0, by: "runtime", what: "state", state: "running → blocked", who: "—", detail: "blocked: run the migration" });
  const claim = { source: "runtime", at: T0, kind: "claimed", partition: 3, from_state: null, state: "running",
    actor: "w\u001b1", generation: 5, outcome: null, detail: null };
  const c = app.timelineCells(claim);
  assert.strictEqual(c.what, "claimed p3");
  assert.strictEqual(c.state, "running");
  assert.strictEqual(c.who, "w\\u{001b}1");
  assert.strictEqual(c.detail, "");
  const action = { source: "operator", at: T0, kind: "pause", partition: null, from_state: "running",
    state: "paused", actor: "ops", generation: 6, outcome: "applied", detail: "quiet hours" };
  assert.strictEqual(app.timelineCells(action).detail, "applied: quiet hours");
  assert.strictEqual(app.timelineCells({ ...action, from_state: null, state: null }).state, "—");
});

test("obs04 a reason travels percent-encoded and shows in the audit and the timeline", () => {
  assert.deepStrictEqual(app.reasonHeaders(""), {});
  assert.deepStrictEqual(app.reasonHeaders("  "), {});
  assert.deepStrictEqual(app.reasonHeaders(" quiet café "), { "Backfill-Reason": "quiet%20caf%C3%A9" });
  const entry = { seq: 9, at: T0, action: "pause", actor: "ops", authority: "token", outcome: "applied",
    detail: null, reason: "quiet\u202ehours", request_count: 1 };
  assert.strictEqual(app.auditCells(entry).detail, "reason: quiet\\u{202e}hours");
  assert.strictEqual(app.auditCells({ ...entry, detail: "x", reason: null }).detail, "x");
  const action = { source: "operator", at: T0, kind: "pause", partition: null, from_state: "running",
    state: "paused", actor: "ops", generation: 6, outcome: "applied", detail: null, reason: "quiet hours" };
  assert.strictEqual(app.timelineCells(action).detail, "applied; reason: quiet hours");
});

test("ct12 routes: the list with its filter, one backfill's page", () => {
  assert.deepStrictEqual(app.parseRoute(""), { page: "list", state: "all" });
  assert.deepStrictEqual(app.parseRoute("#/?state=blocked"), { page: "list", state: "blocked" });
  assert.deepStrictEqual(app.parseRoute("#/?state=bogus"), { page: "list", state: "all" });
  assert.deepStrictEqual(app.parseRoute("#/backfills/items.email-norm.v1"), { page: "detail", id: "items.email-norm.v1" });
  assert.deepStrictEqual(app.parseRoute("#/backfills/a%2Fb"), { page: "detail", id: "a/b" });
  const counts = app.stateCounts([{ state: "running" }, { state: "running" }, { state: "blocked" }]);
  assert.strictEqual(counts.all, 3);
  assert.strictEqual(counts.running, 2);
  assert.strictEqual(counts.completed, 0);
  assert.deepStrictEqual(app.filterViews([{ state: "running" }, { state: "blocked" }], "blocked"), [{ state: "blocked" }]);
  // Markers filter too: a throttled runner, a backfill that gates readiness.
  assert.deepStrictEqual(app.parseRoute("#/?state=throttled"), { page: "list", state: "throttled" });
  const marked = [
    { id: "a", state: "running", throttle: { text: "lag" }, readiness: { gating: false } },
    { id: "b", state: "running", throttle: null, readiness: { gating: true } },
  ];
  assert.deepStrictEqual(app.filterViews(marked, "throttled").map((v) => v.id), ["a"]);
  assert.deepStrictEqual(app.filterViews(marked, "gating").map((v) => v.id), ["b"]);
  assert.strictEqual(app.stateCounts(marked).throttled, 1);
  assert.strictEqual(app.keyText(null, "none"), "none");
  assert.strictEqual(app.keyText(["2026-01-01T00:00:00Z", 5], "none"), '["2026-01-01T00:00:00Z",5]');
});

test("adm2 the list follows next_after to the last page, and shows nothing partial on an error", async () => {
  const pages = {
    "/admin/backfills?limit=500": { items: [{ id: "a" }, { id: "b" }], next_after: "b" },
    "/admin/backfills?limit=500&after=b": { items: [{ id: "c" }], next_after: "c" },
    "/admin/backfills?limit=500&after=c": { items: [{ id: "d" }], next_after: null },
  };
  const seen = [];
  const get = async (path) => {
    seen.push(path);
    return { ok: true, status: 200, json: async () => pages[path] };
  };
  const got = await app.fetchAll(get);
  assert.deepStrictEqual(got.items.map((b) => b.id), ["a", "b", "c", "d"]);
  assert.strictEqual(seen.length, 3);
  let calls = 0;
  const failing = async (path) => {
    calls += 1;
    return calls === 1 ? { ok: true, status: 200, json: async () => pages[path] } : { ok: false, status: 503 };
  };
  assert.deepStrictEqual(await app.fetchAll(failing), { status: 503 });
});

test("thr2 the throttle marker names signal, value and threshold, and the server's words", () => {
  const lock = app.throttleInfo(view({ throttle: { signal: "lock_waiters", value: 1, threshold: 0, text: "lock waiters 1 > 0 on items" } }), 0);
  assert.strictEqual(lock.short, "lock_waiters 1 past 0");
  assert.strictEqual(lock.condition, "lock waiters 1 > 0 on items");
  const marker = app.markers(view({ throttle: { signal: "lock_waiters", value: 1, threshold: 0, text: "lock waiters 1 > 0 on items" } }), 0);
  assert.match(marker, />throttled: lock_waiters 1 past 0</);
  assert.match(marker, /title="throttled by lock_waiters: 1 past 0 \(lock waiters 1 &gt; 0 on items\)"/);
  // The application's check has a reason, not numbers: named alone, its
  // reason in the server's words.
  const appCheck = app.throttleInfo(view({ throttle: { signal: "application", value: null, threshold: null, text: "application check: maintenance" } }), 0);
  assert.strictEqual(appCheck.short, "application");
  assert.strictEqual(appCheck.value, "not applicable", "no number is not an unknown number");
  assert.strictEqual(appCheck.text, "throttled by application");
  assert.strictEqual(appCheck.condition, "application check: maintenance");
  assert.strictEqual(app.throttleInfo(view({ throttle: { signal: "wal_rate", value: null, threshold: 5 } }), 0).short, "wal_rate unknown past 5 B/s");
  // Seconds keep a decimal: 1.1 s past 1.0 s never reads as 1 past 1.
  assert.strictEqual(app.throttleInfo(view({ throttle: { signal: "transaction_age", value: 1.08, threshold: 1 } }), 0).short, "transaction_age 1.1 s past 1.0 s");
  assert.strictEqual(app.signalAmount("replication_lag", 250.4), "250 s");
  assert.strictEqual(app.signalAmount("latency", 0.00555), "5.55 ms", "THR-6: a latency reading in ms");
});

test("thr4 live settings list the size in force and what an operator set, unknown names kept", () => {
  assert.deepStrictEqual(app.settingsRows(view({ batch_size: null, settings: {} })), [
    ["batch size in force", "unknown (no batch yet)"], ["set by an operator", "none: the defaults apply"],
  ]);
  assert.deepStrictEqual(app.settingsRows(view({ batch_size: 4, settings: { max_lock_waiters: 0, later_setting: 3 } })), [
    ["batch size in force", "4"], ["max lock waiters", "0"], ["later setting", "3"],
  ]);
});

test("thr4 the form offers every setting the server takes, where the state still takes a change", () => {
  assert.deepStrictEqual(app.SETTINGS.map((f) => f.name), [
    "batch_size", "target_batch_ms", "min_batch_size", "max_batch_size", "pause_ms",
    "max_lag_bytes", "max_lag_ms", "max_wal_bytes_per_s", "max_lock_waiters", "max_xact_age_ms",
    "concurrency", "window_start_hour", "window_end_hour",
    "latency_ratio_pct", "latency_max_us", "latency_percentile",
  ]);
  for (const s of ["pending", "running", "validating", "paused", "blocked", "failed"]) assert.ok(app.settingsOffered(s), s);
  for (const s of ["completed", "bogus", undefined]) assert.ok(!app.settingsOffered(s), `no form for ${s}`);
  const html = app.settingsFormHtml();
  for (const f of app.SETTINGS) {
    assert.match(html, new RegExp(`<label for="set-${f.name}">${f.label.replace(/[()]/g, "\\$&")}</label>`), `${f.name} is labelled`);
    assert.match(html, new RegExp(`id="set-${f.name}" name="${f.name}" type="text" inputmode="numeric"`));
    assert.match(html, new RegExp(`id="clear-${f.name}"[^>]*aria-label="reset ${f.label.replace(/[()]/g, "\\$&")} to its default"`));
  }
  const ids = [...html.matchAll(/ id="([^"]+)"/g)].map((m) => m[1]);
  assert.strictEqual(new Set(ids).size, ids.length, "ids are unique");
  assert.strictEqual(app.settingHint(app.SETTINGS[0], view({ settings: { batch_size: 2500 } })), "1 to 100,000; now 2,500");
  assert.strictEqual(app.settingHint(app.SETTINGS[4], view({ settings: {} })), "0 to 3,600,000; now default");
  assert.strictEqual(app.settingHint(app.SETTINGS[5], null), "0 to 1,125,899,906,842,624; now default");
});

test("thr4 an empty field is unchanged, reset is null, and what is not a whole number is not sent", () => {
  const entries = [
    { name: "batch_size", text: " 2,500 ", clear: false },
    { name: "target_batch_ms", text: "", clear: true },
    { name: "pause_ms", text: "", clear: false },
    { name: "max_lag_ms", text: "  ", clear: false },
    { name: "min_batch_size", text: "0", clear: false },
    { name: "max_batch_size", text: "1 2", clear: false },
    { name: "max_lock_waiters", text: "7", clear: true },
    { name: "max_xact_age_ms", text: "-5", clear: false },
  ];
  const { change, count, invalid } = app.settingsChange(entries);
  assert.deepStrictEqual(change, {
    batch_size: 2500, target_batch_ms: null, min_batch_size: 0, max_lock_waiters: null,
  });
  assert.strictEqual(count, 4);
  assert.deepStrictEqual(invalid, ["max_batch_size", "max_xact_age_ms"]);
  assert.deepStrictEqual(app.settingsChange([{ name: "batch_size", text: "" }]), { change: {}, count: 0, invalid: [] });
  for (const text of ["1.5", "1,00", "fast", "-1", "1e3", "99999999999999999999"]) {
    assert.deepStrictEqual(app.settingsChange([{ name: "pause_ms", text }]), { change: {}, count: 0, invalid: ["pause_ms"] }, text);
  }
});

test("adm4 a settings change keeps its key while unanswered, and only for the same change", () => {
  let n = 0;
  const mint = () => `k${++n}`;
  const a = app.canonicalJson({ pause_ms: 5, batch_size: null });
  assert.strictEqual(a, '{"batch_size":null,"pause_ms":5}');
  assert.strictEqual(app.canonicalJson({ batch_size: null, pause_ms: 5 }), a, "field order does not make another request");
  const key = app.keyFor(null, "settings", "x", mint, a);
  const pending = { action: "settings", id: "x", key, request: a, unanswered: true };
  assert.strictEqual(app.keyFor(pending, "settings", "x", mint, a), key, "the same change retried reuses the key");
  assert.notStrictEqual(app.keyFor(pending, "settings", "x", mint, '{"pause_ms":6}'), key, "another change is another request");
  assert.notStrictEqual(app.keyFor(pending, "settings", "y", mint, a), key, "another backfill is another request");
  assert.notStrictEqual(app.keyFor({ ...pending, unanswered: false }, "settings", "x", mint, a), key, "an answered change is done");
});

test("thr4 the confirm dialog says what changes, from what to what", () => {
  assert.strictEqual(app.describeSettingsChange({ pause_ms: null, batch_size: 7 }, { pause_ms: 250 }),
    "batch size: default → 7; pause between batches (ms): 250 → default");
  assert.strictEqual(app.describeSettingsChange({ min_batch_size: 50, max_batch_size: 5 }, {}),
    "min batch size: default → 50; max batch size: default → 5");
  assert.strictEqual(app.describeSettingsChange({ batch_size: "x" }, null), 'batch size: default → "x"');
});

test("thr4 the server's answer to a change in words, with the setting a 422 names", () => {
  const applied = app.describeSettingsResult(200, { id: "x", settings: { batch_size: 7, max_lock_waiters: 0 } }, { batch_size: 4, pause_ms: 9, max_lock_waiters: 0 });
  assert.deepStrictEqual(applied, {
    outcome: "applied", field: null, text: "settings: applied (batch size: 4 → 7; pause between batches (ms): 9 → default)",
  });
  assert.strictEqual(app.describeSettingsResult(200, { settings: { pause_ms: 1 } }, { pause_ms: 1 }).text, "settings: applied (no change)");
  const invalid = app.describeSettingsResult(422, { error: "invalid_settings", message: "batch_size must be between 1 and 100000, got 0", field: "batch_size" }, {});
  assert.deepStrictEqual(invalid, {
    outcome: "rejected", field: "batch_size", text: "settings: HTTP 422 invalid_settings: batch_size must be between 1 and 100000, got 0",
  });
  assert.strictEqual(app.describeSettingsResult(422, { error: "invalid_settings", message: "min_batch_size must not exceed max_batch_size" }, {}).field, null);
  const conflict = app.describeSettingsResult(409, { error: "conflict", message: "settings cannot change: the backfill is completed", current: { state: "completed" } }, {});
  assert.strictEqual(conflict.outcome, "conflict");
  assert.strictEqual(conflict.text, "settings: conflict — settings cannot change: the backfill is completed (state completed)");
  assert.strictEqual(app.describeSettingsResult(403, { error: "forbidden", message: "the principal lacks the backfill:operate capability" }, {}).outcome, "rejected");
  const lost = app.describeSettingsResult(null, null, {});
  assert.strictEqual(lost.outcome, "unknown");
  assert.match(lost.text, /no answer \(network error\); the outcome is unknown.*same key/);
  assert.strictEqual(app.describeSettingsResult(503, { error: "unavailable", message: "down" }, {}).outcome, "unknown");
  assert.strictEqual(app.describeSettingsResult(200, null, {}).outcome, "unknown", "a 200 without a view is not an invented success");
});

test("par5 each partition shows its range, checkpoint, owner and progress; unknown stays unknown", () => {
  const v = {
    observed_at: T0,
    partitions: [
      { part: 0, lower: null, upper: 100, checkpoint: 30, ended: false, rows_done: 30, batches_done: 3,
        owner: { disposition: "held", worker: "w1", until: at(20) }, last_error: null },
      { part: 1, lower: 100, upper: 200, checkpoint: 200, ended: true, rows_done: 100, batches_done: 10,
        owner: { disposition: "none", worker: null, until: null }, last_error: null },
      { part: 2, lower: 200, upper: 300, checkpoint: 200, ended: false, owner: {}, last_error: "timeout" },
    ],
  };
  const rows = app.partitionRows(v, 0);
  assert.deepStrictEqual(rows.map((r) => [r.part, r.range, r.checkpoint, r.rows, r.batches]), [
    ["0", "(start, 100]", "30", "30", "3"],
    ["1", "(100, 200]", "ended", "100", "10"],
    ["2", "(200, 300]", "200", "unknown", "unknown"],
  ]);
  assert.match(rows[0].owner, /^held by w1/);
  assert.strictEqual(rows[1].owner, "unclaimed");
  assert.strictEqual(rows[2].owner, "unknown");
  assert.strictEqual(rows[2].diagnostic, "timeout");
  assert.deepStrictEqual(app.partitionRows({ partitions: [] }, 0), []);
  assert.deepStrictEqual(app.partitionRows({}, 0), []);
});

test("par5 each running partition shows the server's rate; an ended one or a stopped backfill has none", () => {
  const view = (rate, state = "running") => ({
    id: "b", state, observed_at: at(2),
    partitions: [
      { part: 0, lower: null, upper: 100, checkpoint: 50, ended: false, rows_done: 50, batches_done: 1, owner: {}, rows_per_second: rate },
      { part: 1, lower: 100, upper: 200, checkpoint: 200, ended: true, rows_done: 100, batches_done: 1, owner: {}, rows_per_second: null },
    ],
  });
  assert.deepStrictEqual(app.partitionRows(view(null), 0, false).map((r) => r.rate), ["measuring…", "—"]);
  assert.deepStrictEqual(app.partitionRows(view(20), 0, false).map((r) => r.rate), ["20.0 rows/s", "—"]);
  assert.deepStrictEqual(app.partitionRows(view(20), 0, true).map((r) => r.rate), ["stale", "—"]);
  assert.deepStrictEqual(app.partitionRows(view(20, "paused"), 0, false).map((r) => r.rate), ["—", "—"]);
  const throttled = view(20);
  throttled.partitions[0].throttle = { signal: "lock_waiters", text: "lock waiters 3 > 0" };
  assert.strictEqual(app.partitionRows(throttled, 0, false)[0].throttle, "lock waiters 3 > 0");
});

test("undo2 undo is offered only on a journaled backfill's page, before it has an undo, and explained", () => {
  const view = { id: "a.v1", state: "completed", journaled: true, undo: null, undo_of: null };
  assert.ok(app.undoOffered(view));
  assert.match(app.actionButtons(view, false, true), /data-action="undo"/);
  assert.doesNotMatch(app.actionButtons(view, false, false), /data-action="undo"/, "lists do not know the undo");
  assert.ok(!app.undoOffered({ ...view, journaled: false }));
  assert.ok(!app.undoOffered({ ...view, undo: { id: "a.v1.undo", state: "running" } }));
  assert.ok(!app.undoOffered({ ...view, undo_of: "x.v1" }));
  for (const state of ["pending", "running", "validating"]) assert.ok(!app.undoOffered({ ...view, state }), state);
  for (const state of app.UNDOABLE) assert.ok(app.undoOffered({ ...view, state }), state);
  assert.match(app.CONSEQUENCES.undo, /still holds exactly what the repair wrote/);
  assert.match(app.CONSEQUENCES.undo, /conflict/);
});

test("undo2 the original's page shows its undo's progress and conflicts from the journal", () => {
  const rows = app.journalRows({
    id: "a.v1", journaled: true, undo_of: null, undo: { id: "a.v1.undo", state: "running" },
    journal: { rows: 200, bytes: 30000, restored: 90, conflicts: 10, conflict_keys: [{ id: 7 }] },
  });
  const get = (k) => (rows.find(([name]) => name === k) || [])[1];
  assert.deepStrictEqual(get("undo"), { href: "#/backfills/a.v1.undo", text: "a.v1.undo (running)" });
  assert.strictEqual(get("undone"), "100 of 200 (50%)");
  assert.strictEqual(get("conflicts"), "10");
  assert.strictEqual(get("conflict keys"), '{"id":7}');
  assert.deepStrictEqual(app.journalRows({ id: "p.v1", journaled: false }), []);
  assert.match(app.describeResult("undo", 200, { outcome: "applied", prior_state: "completed", backfill: { id: "a.v1.undo", state: "running" } }), /a\.v1\.undo is running/);
  assert.match(app.describeResult("undo", 409, { error: "not_journaled", message: "keeps no journal", current: { state: "completed" } }), /not_journaled/);
});

function dryReport(extra) {
  return {
    backfill_id: "items.fix", state: "pending", generation: 1, batches_asked: 2, from: null, bound: 99,
    bound_captured: true, statement_timeout_ms: 10000, lock_timeout_ms: 300,
    batches: [
      { batch: 1, partition: null, batch_size: 10, keys: 10, rows_changed: null, duration_ms: 1.25, wal_bytes: 6328, lock_wait_ms: null, to: 11 },
    ],
    error: null, reached_bound: false,
    forecast: { rows: 90, rows_basis: "exact", batches: 9, duration_ms: null, wal_bytes: null },
    sample: null, sample_note: "counts only: a sample of changed rows needs the backfill:inspect capability",
    rolled_back: true,
    ...extra,
  };
}

test("dry2 a dry run's unknowns are shown as unknown, never 0", () => {
  const html = app.dryRunReportHtml(dryReport());
  assert.match(html, /rolled back/);
  assert.match(html, /90 rows \(exact\), 9 batches, unknown, unknown bytes of WAL/);
  assert.match(html, /<td>unknown<\/td>/, "rows changed and lock wait unknown");
  assert.match(html, /backfill:inspect/);
  assert.strictEqual(app.dryKnown(0), "0");
  assert.strictEqual(app.dryKnown(null), "unknown");
  const none = app.dryRunReportHtml(dryReport({ forecast: { rows: null, rows_basis: "unknown", batches: null, duration_ms: null, wal_bytes: null } }));
  assert.match(none, /unknown rows, unknown batches/);
});

test("dry3 a dry run's sample and error are shown escaped", () => {
  const html = app.dryRunReportHtml(dryReport({
    sample: [{ key: { id: 1 }, before: { note: "<b>x</b>" }, after: { note: "y" } }],
    sample_note: null,
    error: { batch: 2, kind: "retryable", message: "lock timeout <now>" },
  }));
  assert.match(html, /Changed rows/);
  assert.doesNotMatch(html, /<b>x<\/b>/);
  assert.match(html, /&lt;b&gt;x&lt;\/b&gt;/);
  assert.match(html, /Batch 2 failed \(retryable\): lock timeout &lt;now&gt;/);
  assert.deepStrictEqual(app.DRY_RUNNABLE, ["pending", "paused"]);
});

test("adm02 a diagnostic is current only while blocked, failed or retrying", () => {
  const error = { kind: "blocked", message: "5 events lack an author", at: "2026-12-04T10:00:00Z" };
  assert.strictEqual(app.diagnosticCurrent({ state: "blocked", last_error: error, attempts: 0 }), true);
  assert.strictEqual(app.diagnosticCurrent({ state: "failed", last_error: error, attempts: 0 }), true);
  assert.strictEqual(app.diagnosticCurrent({ state: "running", last_error: error, attempts: 2 }), true);
  assert.strictEqual(app.diagnosticCurrent({ state: "completed", last_error: error, attempts: 0 }), false);
  assert.strictEqual(app.diagnosticCurrent({ state: "running", last_error: error, attempts: 0 }), false);
  assert.strictEqual(app.diagnosticCurrent({ state: "paused", last_error: error }), false);
  assert.strictEqual(app.diagnosticCurrent({ state: "blocked", last_error: null }), false);
});


test("val01 the validation card does not contradict itself without explicit validations", () => {
  assert.match(app.noExplicitValidation({ validation: { outcome: "success", at: "2026-12-04T10:00:00Z" } }), /the run's own/);
  assert.strictEqual(app.noExplicitValidation({ validation: null }), "No explicit validation in the audit trail.");
});

test("adm02 the list's search finds IDs and descriptions in any case, within the state filter", () => {
  const views = [
    { id: "events.author-norm.v1", state: "running", description: "Normalize authors" },
    { id: "events.tag-count.v1", state: "blocked", description: "Count tags" },
    { id: "items.email-norm.v1", state: "running" },
  ];
  const ids = (vs) => vs.map((v) => v.id);
  assert.deepStrictEqual(ids(app.filterViews(views, "all", "NORM")), ["events.author-norm.v1", "items.email-norm.v1"]);
  assert.deepStrictEqual(ids(app.filterViews(views, "running", "events")), ["events.author-norm.v1"]);
  assert.deepStrictEqual(ids(app.filterViews(views, "all", "count tags")), ["events.tag-count.v1"]);
  assert.deepStrictEqual(ids(app.filterViews(views, "all", "  ")), ids(views));
  assert.deepStrictEqual(app.filterViews(views, "blocked", "items"), []);
});


test("adm04 a bulk action targets only the rows it applies to and counts every outcome", () => {
  const views = [
    { id: "a.v1", state: "running" }, { id: "b.v1", state: "paused" },
    { id: "c.v1", state: "validating" }, { id: "d.v1", state: "completed" },
  ];
  assert.deepStrictEqual(app.bulkTargets(views, "pause"), ["a.v1", "c.v1"]);
  assert.deepStrictEqual(app.bulkTargets(views, "resume"), ["b.v1"]);
  assert.deepStrictEqual(app.bulkTargets([], "pause"), []);
  assert.strictEqual(
    app.bulkSummary("pause", [
      { id: "a.v1", outcome: "applied" }, { id: "c.v1", outcome: "converged" },
      { id: "e.v1", outcome: "conflict" }, { id: "f.v1", outcome: "unknown" },
    ]),
    "pause 4 backfills: 1 applied, 1 unchanged, 1 refused (e.v1), 1 without an answer (f.v1): refresh to see their state",
  );
  assert.strictEqual(app.bulkSummary("resume", [{ id: "b.v1", outcome: "applied" }]), "resume 1 backfill: 1 applied");
});

// FLT-6: the fleet page's projections.
const fleetDb = (extra) => ({
  name: "d0", availability: "available", reason: null, since: T0, ready: true,
  backfills: { pending: 0, running: 1, paused: 2, blocked: 0, failed: 0, validating: 0, completed: 0 },
  rows_per_second: 125, eta_seconds: 80, error: null,
  ...extra,
});
const zero = { pending: 0, running: 0, paused: 0, blocked: 0, failed: 0, validating: 0, completed: 0 };
const down = fleetDb({
  name: "down", availability: "unavailable", reason: 'database "bft_absent" does not exist', ready: null,
  backfills: zero, rows_per_second: null, eta_seconds: null,
});

test("flt06 the listener's kind comes from GET /admin/fleet: 404 single, 200/401/403 fleet, else unknown", () => {
  assert.strictEqual(app.listenerKind(404), "single");
  for (const s of [200, 401, 403]) assert.strictEqual(app.listenerKind(s), "fleet");
  for (const s of [null, undefined, 429, 500, 503]) assert.strictEqual(app.listenerKind(s), null);
});

test("flt06 a database that is down shows its reason and unknown figures, never zeros", () => {
  const a = app.fleetAvailability(down);
  assert.deepStrictEqual(a, { state: "unavailable", reason: 'database "bft_absent" does not exist', ready: "unknown" });
  assert.strictEqual(app.fleetCountsText(down), "unknown");
  assert.deepStrictEqual(app.fleetRateEta(down), { rate: "unknown", eta: "unknown" });
  const row = app.fleetDatabaseRow(down);
  assert.match(row, /data-database="down"/);
  assert.match(row, /badge avail-unavailable">unavailable</);
  assert.match(row, /database &quot;bft_absent&quot; does not exist/);
  assert.doesNotMatch(row, /no backfills|0 running|0 rows/);
  // Available but unread: the counts are unknown and the row says why.
  const unread = fleetDb({ backfills: zero, error: "statement timeout" });
  assert.strictEqual(app.fleetCountsText(unread), "unknown");
  assert.match(app.fleetDatabaseRow(unread), /its backfills could not be read: statement timeout/);
  assert.strictEqual(app.fleetAvailability(unread).state, "available");
  // Escaped, like every server text.
  assert.match(app.fleetDatabaseRow(fleetDb({ name: "<b>" })), /&lt;b&gt;/);
});

test("flt06 a database's counts, rate and ETA: unknown stays unknown, not running is not applicable", () => {
  const d = fleetDb();
  assert.strictEqual(app.fleetCountsText(d), "1 running, 2 paused");
  assert.deepStrictEqual(app.fleetRateEta(d), { rate: "125 rows/s", eta: "80 s" });
  assert.deepStrictEqual(app.fleetRateEta(d, true), { rate: "stale", eta: "stale" });
  assert.deepStrictEqual(app.fleetRateEta(fleetDb({ rows_per_second: null, eta_seconds: null })), { rate: "measuring…", eta: "unknown" });
  const idle = fleetDb({ backfills: { ...zero, completed: 3 }, rows_per_second: null, eta_seconds: null });
  assert.deepStrictEqual(app.fleetRateEta(idle), { rate: "—", eta: "—" });
  assert.strictEqual(app.fleetCountsText(idle), "3 completed");
  assert.strictEqual(app.fleetCountsText(fleetDb({ backfills: zero })), "no backfills");
  assert.strictEqual(app.fleetAvailability(fleetDb({ ready: false })).ready, "not ready");
});

test("flt06 the fleet totals count the databases that could not be read apart", () => {
  const overview = {
    databases: [fleetDb(), fleetDb({ name: "d1" }), down],
    totals: { databases: 3, available: 2, unavailable: 1, completed: 0, running: 2, blocked: 0, rows_per_second: 250, eta_seconds: 80 },
  };
  const rows = Object.fromEntries(app.fleetTotalsRows(overview).map(([k, , v]) => [k, v]));
  assert.deepStrictEqual(rows, {
    databases: "3: 2 available, 1 unavailable",
    completed: "0 databases (1 database unknown)",
    running: "2 databases (1 database unknown)",
    blocked: "0 databases (1 database unknown)",
    rate: "250 rows/s (1 database unknown)",
    eta: "80 s (1 database unknown)",
  });
  const stale = Object.fromEntries(app.fleetTotalsRows(overview, true).map(([k, , v]) => [k, v]));
  assert.strictEqual(stale.rate, "stale");
  assert.strictEqual(stale.eta, "stale");
  // Nothing moves and one database is unknown: the fleet's rate is unknown, not 0.
  const still = {
    databases: [fleetDb({ backfills: { ...zero, completed: 1 }, rows_per_second: null, eta_seconds: null }), down],
    totals: { databases: 2, available: 1, unavailable: 1, completed: 1, running: 0, blocked: 0, rows_per_second: 0, eta_seconds: null },
  };
  const s = Object.fromEntries(app.fleetTotalsRows(still).map(([k, , v]) => [k, v]));
  assert.strictEqual(s.rate, "unknown");
  assert.strictEqual(s.eta, "unknown");
  assert.strictEqual(s.completed, "1 database (1 database unknown)");
  const allKnown = Object.fromEntries(app.fleetTotalsRows({ databases: [still.databases[0]], totals: { ...still.totals, databases: 1, unavailable: 0 } }).map(([k, , v]) => [k, v]));
  assert.strictEqual(allKnown.rate, "—");
  // Missing totals are unknown, never 0.
  assert.match(app.fleetTotalsRows({ databases: [], totals: {} })[0][2], /^unknown: unknown available/);
});

test("flt06 the filter narrows backfills and unlisted databases to one database; names listed once", () => {
  const list = {
    items: [view({ id: "e.fix", database: "d0" }), view({ id: "e.fix", database: "d1", state: "paused" })],
    unavailable: [{ name: "down", availability: "unavailable", reason: "gone" }],
  };
  assert.strictEqual(app.fleetFilter(list, "all").items.length, 2);
  assert.deepStrictEqual(app.fleetFilter(list, "d1").items.map((i) => i.database), ["d1"]);
  assert.deepStrictEqual(app.fleetFilter(list, "d1").unavailable, []);
  assert.deepStrictEqual(app.fleetFilter(list, "down"), { items: [], unavailable: list.unavailable });
  assert.deepStrictEqual(app.fleetDatabaseNames({ databases: [fleetDb(), down] }, list), ["d0", "down", "d1"]);
  const row = app.fleetUnavailableRow(list.unavailable[0]);
  assert.match(row, /data-database="down"/);
  assert.match(row, /unavailable/);
  assert.match(row, /gone/);
});

test("flt06 one database's backfill: its route, and its API under the database's name", () => {
  assert.deepStrictEqual(app.parseRoute("#/databases/d1/backfills/e.fix"), { page: "detail", id: "e.fix", database: "d1" });
  assert.deepStrictEqual(app.parseRoute(app.fleetDetailHref("a b/c", "e.fix")), { page: "detail", id: "e.fix", database: "a b/c" });
  const route = app.parseRoute("#/databases/a%20b/backfills/e.fix");
  assert.strictEqual(app.apiBase(route, "fleet"), "/databases/a%20b");
  // Only a fleet's listener has the prefix; a database's own listener
  // and the fleet's own pages read the root.
  assert.strictEqual(app.apiBase(route, "single"), "");
  assert.strictEqual(app.apiBase(app.parseRoute("#/backfills/e.fix"), "fleet"), "");
  // The fleet page's filter lives in the address, and reads no database's API.
  assert.strictEqual(app.fleetFilterHref("a b"), "#/?database=a%20b");
  assert.strictEqual(app.fleetFilterHref("all"), "#/");
  assert.deepStrictEqual(app.parseRoute(app.fleetFilterHref("a b")), { page: "list", state: "all", only: "a b" });
  assert.strictEqual(app.apiBase(app.parseRoute("#/?database=d1"), "fleet"), "");
});

test("flt06 each backfill row names its database and acts on it alone; every database per ID", () => {
  const row = app.fleetRow(view({ id: "e.fix", database: "d1" }), {});
  assert.match(row, /<td class="col-database">d1<\/td>/);
  assert.match(row, /data-fleet-action="pause" data-id="e.fix" data-database="d1"/);
  assert.match(row, /aria-label="pause e.fix in d1"/);
  assert.doesNotMatch(row, /data-action=/);
  assert.match(row, /<a href="#\/databases\/d1\/backfills\/e.fix"/);
  assert.doesNotMatch(app.fleetRow(view({ id: "e.fix", database: "d1" }), { cannotOperate: true }), /<button/);
  const ids = app.fleetIdActions([
    view({ id: "e.fix", database: "d0" }), view({ id: "e.fix", database: "d1", state: "paused" }),
    view({ id: "a.fix", database: "d0", state: "completed" }),
  ]);
  assert.deepStrictEqual(ids, [
    { id: "a.fix", actions: ["validate"], databases: ["d0"] },
    { id: "e.fix", actions: ["pause", "resume", "validate"], databases: ["d0", "d1"] },
  ]);
  const all = app.fleetActionButtons(["pause"], "e.fix", null, false);
  assert.match(all, /data-database=""/);
  assert.match(all, /aria-label="pause e.fix in every database"/);
  assert.match(app.fleetActionButtons(["pause"], "e.fix", null, true), /disabled/);
});

test("flt06 every database's answer is shown, a down one's 503 as unavailable, never skipped", () => {
  const body = {
    results: [
      { database: "d0", status: 200, body: { outcome: "applied", prior_state: "running", backfill: { state: "paused" } } },
      { database: "d1", status: 409, body: { error: "conflict", message: "no", current: { state: "completed" } } },
      { database: "down", status: 503, body: { error: "unavailable", message: "database \"x\" does not exist" } },
    ],
  };
  const answers = app.fleetAnswers("pause", body);
  assert.deepStrictEqual(answers.map((a) => [a.database, a.status, a.outcome]), [
    ["d0", 200, "applied"], ["d1", 409, "conflict"], ["down", 503, "unavailable"],
  ]);
  assert.strictEqual(answers[0].text, "pause: applied (running → paused)");
  assert.match(answers[2].text, /HTTP 503 unavailable: database "x" does not exist/);
  assert.strictEqual(app.fleetSummary("pause", "e.fix", "in every database", answers),
    "pause e.fix in every database: 1 applied (d0), 1 conflict (d1), 1 unavailable (down)");
  assert.strictEqual(app.fleetOutcome(answers), "partial");
  assert.strictEqual(app.fleetOutcome(answers.slice(0, 1)), "applied");
  assert.strictEqual(app.fleetOutcome([]), "unknown");
  assert.match(app.fleetAnswerRow(answers[2]), /data-database="down"[\s\S]*503[\s\S]*outcome-unavailable/);
  assert.match(app.fleetAnswerRow({ database: "d9", status: null, outcome: "unknown", text: "x" }), /no answer/);
});

test("flt06 a settings change on every database: each database's answer names its values now, a refusal its reason, a down one 503", () => {
  const change = { batch_size: 7, pause_ms: null };
  assert.strictEqual(app.describeSettingsTarget(change), "batch size to 7; pause between batches (ms) to its default");
  const body = {
    results: [
      { database: "d0", status: 200, body: { id: "e.fix", settings: { batch_size: 7, max_lag_ms: 500 } } },
      { database: "d1", status: 422, body: { error: "invalid_setting", field: "batch_size", message: "batch_size above max_batch_size" } },
      { database: "down", status: 503, body: { error: "unavailable", message: "database \"x\" does not exist" } },
    ],
  };
  const answers = app.fleetSettingsAnswers(change, body);
  assert.deepStrictEqual(answers.map((a) => [a.database, a.status, a.outcome]), [
    ["d0", 200, "applied"], ["d1", 422, "rejected"], ["down", 503, "unavailable"],
  ]);
  assert.strictEqual(answers[0].text, "settings: applied (batch size now 7; pause between batches (ms) now default)");
  assert.strictEqual(answers[1].text, "settings: HTTP 422 invalid_setting: batch_size above max_batch_size");
  assert.match(answers[2].text, /HTTP 503 unavailable: database "x" does not exist/);
  assert.strictEqual(app.fleetSummary("settings", "e.fix", "in every database", answers),
    "settings e.fix in every database: 1 applied (d0), 1 rejected (d1), 1 unavailable (down)");
  assert.deepStrictEqual(app.fleetSettingsAnswers(change, null), []);
  // The fleet page's form and the backfill page's do not share an ID.
  const fleet = app.settingsFormHtml("fleet-");
  const own = app.settingsFormHtml();
  const idsOf = (html) => [...html.matchAll(/ id="([^"]+)"/g)].map((m) => m[1]);
  assert.ok(idsOf(fleet).every((id) => id.startsWith("fleet-")), "every fleet form ID is prefixed");
  assert.ok(idsOf(fleet).every((id) => !idsOf(own).includes(id)), "no ID of both forms");
  assert.match(fleet, /<label for="fleet-set-batch_size">batch size<\/label>/);
});

test("thr4 a settings form is refused before sending: not a whole number names the field, nothing to change says so", () => {
  const bad = app.settingsChange([{ name: "batch_size", text: "many" }, { name: "pause_ms", text: "5" }]);
  assert.deepStrictEqual(app.settingsFormRefusal(bad), { field: "batch_size", text: "settings: batch size must be a whole number, 0 or more. Nothing was sent." });
  assert.deepStrictEqual(app.settingsFormRefusal(app.settingsChange([{ name: "batch_size", text: " " }])),
    { field: null, text: "Nothing to change: type a value or tick reset. Nothing was sent." });
  assert.strictEqual(app.settingsFormRefusal(app.settingsChange([{ name: "batch_size", text: "7" }])), null);
  assert.strictEqual(app.settingsFormRefusal(app.settingsChange([{ name: "batch_size", clear: true }])), null);
});

test("flt06 names in a sentence: ten, then how many more", () => {
  assert.strictEqual(app.listNames(["d0", "d1"]), "d0, d1");
  const many = Array.from({ length: 12 }, (_, i) => `d${i}`);
  assert.strictEqual(app.listNames(many), "d0, d1, d2, d3, d4, d5, d6, d7, d8, d9 and 2 more");
  assert.strictEqual(app.listNames([]), "");
});

test("flt06 a fleet action stays open, with its key, while a database's answer is a 5xx or none came", () => {
  const ok = { results: [{ database: "d0", status: 200 }, { database: "d1", status: 409 }] };
  const withDown = { results: [{ database: "d0", status: 200 }, { database: "down", status: 503 }] };
  assert.strictEqual(app.fleetSettles(200, ok), true);
  assert.strictEqual(app.fleetSettles(200, withDown), false);
  assert.strictEqual(app.fleetSettles(null, null), false);
  assert.strictEqual(app.fleetSettles(200, null), false);
  assert.strictEqual(app.fleetSettles(403, { error: "forbidden" }), true);
  // The same request keeps its key; another scope is another request.
  let n = 0;
  const mint = () => `k${++n}`;
  const pending = { action: "pause", id: "e.fix", key: "k0", request: "fleet:*", unanswered: true };
  assert.strictEqual(app.keyFor(pending, "pause", "e.fix", mint, "fleet:*"), "k0");
  assert.strictEqual(app.keyFor(pending, "pause", "e.fix", mint, "fleet:d0"), "k1");
  assert.strictEqual(app.keyFor(pending, "pause", "e.fix", mint, undefined), "k2");
});
