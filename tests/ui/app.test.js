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

test("ct12 rates come from the server's clock across reads and restart after a pause", () => {
  const rates = app.createRates(15000);
  rates.observe(view({ observed_at: at(0) }));
  assert.strictEqual(rates.rate("x"), null);
  rates.observe(view({ observed_at: at(2), progress: { rows_done: 8, total_rows: 10, fraction: 0.8 } }));
  assert.strictEqual(rates.rate("x"), 2);
  rates.observe(view({ state: "paused", observed_at: at(3) }));
  assert.strictEqual(rates.rate("x"), null, "a pause forgets the rate");
  assert.strictEqual(app.rateFrom([{ done: 1, at: 5 }, { done: 9, at: 5 }]), null, "no time, no rate");
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
  assert.strictEqual(t.text, "throttled by replication_lag_bytes: 19,000,000 past 16,000,000 since 12 s ago");
  assert.match(app.markers(throttled, 0), /throttled: replication_lag_bytes/);
  assert.deepStrictEqual(app.settingsRows(throttled), [["batch size", "500"], ["pause ms", "default"], ["target batch ms", "200"]]);
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
