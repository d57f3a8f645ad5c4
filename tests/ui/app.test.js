// CT-12: the web client's projection keeps unknown and failure states
// honest and offers only the actions of docs/CONTRACT.md section 3. Runs with
// node's built-in test runner: `node --test tests/ui/`.
"use strict";
const test = require("node:test");
const assert = require("node:assert");
const app = require("../../src/http/ui/app.js");

test("ct12 unknown progress is shown as unknown, never as 0%", () => {
  const cell = app.progressCell({ rows_done: 0, total_rows: null, fraction: null, batches_done: 0 });
  assert.match(cell, /unknown/);
  assert.doesNotMatch(cell, /0\.0%/);
  assert.match(app.progressCell({ rows_done: 5, total_rows: 10, fraction: 0.5 }), /50\.0%/);
});

test("ct12 a failed refresh is shown as stale with the last good read, never as empty or zero", () => {
  const line = app.statusLine({ lastOk: "2026-11-29T00:00:00Z", lastError: "HTTP 503" });
  assert.strictEqual(line.cls, "stale");
  assert.match(line.text, /STALE/);
  assert.match(line.text, /2026-11-29T00:00:00Z/);
  assert.strictEqual(app.statusLine({ lastError: "network error" }).cls, "error");
  assert.match(app.statusLine({ unauthorized: "HTTP 401" }).text, /Nothing is shown/);
});

test("ct12 only the actions of the contract are ever offered", () => {
  assert.deepStrictEqual(app.ACTIONS, ["start", "pause", "resume", "retry", "validate"]);
  const states = ["pending", "running", "paused", "blocked", "failed", "validating", "completed", "mystery"];
  for (const s of states) {
    for (const a of app.actionsFor(s)) assert.ok(app.ACTIONS.includes(a), `${s}: ${a}`);
  }
  assert.deepStrictEqual(app.actionsFor("completed"), ["validate"]);
  assert.deepStrictEqual(app.actionsFor("pending"), ["start", "validate"]);
  for (const forbidden of ["reset", "rewind", "delete", "cancel", "complete", "release"]) {
    assert.ok(!app.ACTIONS.includes(forbidden));
  }
});

test("ct12 results are described from the server's answer, never synthesised", () => {
  assert.match(app.describeResult("pause", 409, { error: "conflict", current: { state: "completed" } }), /conflict.*completed/);
  assert.match(app.describeResult("validate", 200, { outcome: "current-state", state: "pending", reason: "not started" }), /current-state/);
  assert.match(app.describeResult("start", 502, null), /outcome is unknown/);
});

test("ct12 rows escape server text", () => {
  const html = app.row({
    id: "x", state: "blocked", attempts: 1, next_attempt_at: null,
    progress: { rows_done: 1, total_rows: null, fraction: null },
    owner: { disposition: "none" },
    last_error: { kind: "blocked", message: "<script>alert(1)</script>" },
    validation: null, readiness: { required: true, gating: true },
  });
  assert.doesNotMatch(html, /<script>/);
  assert.match(html, /gating/);
  assert.match(html, /none yet/);
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
