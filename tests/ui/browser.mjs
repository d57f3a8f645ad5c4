// Drives the admin web client in headless Chromium for tests/ui_browser.rs.
//
//   node tests/ui/browser.mjs <scenario>
//
// Environment: BACKFILL_UI_URL (the admin listener), BACKFILL_UI_TOKEN (an
// operator token), BACKFILL_UI_READER_TOKEN (a token that may read but not
// operate), BACKFILL_UI_EXPECT (JSON: what each row must show, read
// by the Rust test from PostgreSQL), BACKFILL_UI_SCREENSHOTS (a directory),
// BACKFILL_CHROMIUM (the browser; Debian's /usr/bin/chromium by default).
//
// Where the Rust side has to act (stop the server, look at PostgreSQL) the
// script prints `STEP <name> [payload]` and waits for a line on stdin. It
// prints `PASS <scenario>` and exits 0 when every check held; any failed
// check throws, and the script exits 1 with the reason on stderr.
import { chromium } from "playwright-core";
import { createInterface } from "node:readline";
import { join } from "node:path";

const scenario = process.argv[2];
const base = process.env.BACKFILL_UI_URL;
const token = process.env.BACKFILL_UI_TOKEN;
const readerToken = process.env.BACKFILL_UI_READER_TOKEN;
const expected = JSON.parse(process.env.BACKFILL_UI_EXPECT || "[]");
const shots = process.env.BACKFILL_UI_SCREENSHOTS;
const executablePath = process.env.BACKFILL_CHROMIUM || "/usr/bin/chromium";

const RUNNING = "items.counter";
const PENDING = "items.other";
const PAUSED = "orders.counter";
const BLOCKED = "tags.counter";
const COMPLETED = "users.counter";
const UNKNOWN = "events.compound-counter";
const THROTTLED = "items.fix.v1";

// What each state may offer (docs/CONTRACT.md section 3), written out here
// rather than imported from app.js, so a wrong projection cannot agree
// with itself.
const OFFERED = {
  pending: ["start"],
  running: ["pause", "validate"],
  validating: ["pause", "validate"],
  paused: ["resume", "validate"],
  blocked: ["retry", "validate"],
  failed: ["retry", "validate"],
  completed: ["validate"],
};

const stdin = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function step(name, payload) {
  console.log(`STEP ${name}${payload ? ` ${payload}` : ""}`);
  const line = await stdin.next();
  if (line.done) throw new Error(`stdin closed at step ${name}`);
}

function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
}

// Poll `probe` until `ok(value)` holds; fail with the last value after
// `ms`. Every wait in this script is one of these: no fixed sleeps.
async function until(what, probe, ok, ms = 45000) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    try {
      last = await probe();
      if (ok(last)) return last;
    } catch (e) {
      last = `error: ${e.message}`;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last: ${JSON.stringify(last)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const browser = await chromium.launch({ executablePath });
const page = await browser.newPage({ viewport: { width: 1440, height: 900 } });
page.setDefaultTimeout(45000);
const consoleErrors = [];
page.on("pageerror", (e) => consoleErrors.push(String(e)));
// AUTH-4: the client runs under the admin listener's Content-Security-
// Policy with no violation. Chromium reports each one on the console and
// as a `securitypolicyviolation` event in the page; both are collected,
// over every document the scenario loads.
const cspViolations = [];
const cspPolicies = new Set();
page.on("console", (m) => {
  if (/Content Security Policy/i.test(m.text())) cspViolations.push(m.text());
});
page.on("response", (r) => {
  if (r.url().startsWith(`${base}/ui`)) cspPolicies.add(r.headers()["content-security-policy"] || "none");
});
await page.exposeFunction("reportCspViolation", (v) => cspViolations.push(v));
await page.addInitScript(() => {
  document.addEventListener("securitypolicyviolation", (e) => {
    window.reportCspViolation(`${e.violatedDirective} blocked ${e.blockedURI} at ${e.sourceFile}:${e.lineNumber}`);
  });
});

const text = (sel) => page.locator(sel).first().innerText();
const rowOf = (id) => page.locator(`#rows tr[data-id="${id}"]`);
const cell = (id, col) => rowOf(id).locator(`.col-${col}`).innerText();
const banner = () => text("#banner");
const bannerLabel = () => text("#status-label");
const buttonsIn = (sel) => page.locator(`${sel} button[data-action]`).evaluateAll((bs) => bs.map((b) => b.dataset.action));
const shot = (name) => page.screenshot({ path: join(shots, `${scenario}-${name}.png`), fullPage: true });

async function signIn(tok) {
  await page.locator("#token").fill(tok);
  await page.locator("#token").press("Enter");
}

async function openList() {
  await page.goto(`${base}/ui`);
  await until("the token prompt", () => page.locator("#auth").isVisible(), (v) => v === true);
  await signIn(token);
  await until("a live list", bannerLabel, (t) => t === "Live");
  await until("every row", () => page.locator("#rows tr").count(), (n) => n === expected.filter((e) => e.id).length);
}

function expectRow(id) {
  const e = expected.find((r) => r.id === id);
  check(e, `an expectation for ${id}`);
  return e;
}

// Each row as PostgreSQL has it.
async function checkRows() {
  for (const e of expected.filter((r) => r.id)) {
    const row = rowOf(e.id);
    check((await row.count()) === 1, `one row for ${e.id}`);
    check((await row.locator(".col-state .badge").innerText()) === e.state, `${e.id} state ${e.state}`);
    check((await row.locator(".col-progress .pct").innerText()) === e.pct, `${e.id} progress ${e.pct}, got ${await row.locator(".col-progress .pct").innerText()}`);
    check((await cell(e.id, "rows")) === e.rows, `${e.id} rows ${e.rows}, got ${await cell(e.id, "rows")}`);
    const markers = await cell(e.id, "markers");
    check(markers.includes("gating") === e.gating, `${e.id} gating marker ${e.gating}: ${markers}`);
    const offered = await buttonsIn(`#rows tr[data-id="${e.id}"]`);
    check(JSON.stringify(offered) === JSON.stringify(OFFERED[e.state]), `${e.id} offers ${OFFERED[e.state]}, got ${offered}`);
    if (e.state !== "running") {
      check((await cell(e.id, "rate")) === "—", `${e.id} has no rate`);
      check((await cell(e.id, "eta")) === "—", `${e.id} has no ETA`);
    }
  }
}

async function openDetail(id) {
  await rowOf(id).locator("a").click();
  await until(`the detail page of ${id}`, () => text("#detail-title-id"), (t) => t === id);
  await until(`${id}'s data`, () => page.locator("#detail-state .badge").count(), (n) => n === 1);
  await until(`${id}'s audit trail`, () => page.locator('#detail-body .audit-section[data-read="true"]').count(), (n) => n === 1);
}

// The settings form of the detail page, opened by keyboard: focus its
// summary and press Enter.
async function openSettings() {
  await until("the settings form offered", () => page.locator("#settings-panel").isVisible(), (v) => v);
  await page.locator("#settings-panel summary").focus();
  await page.keyboard.press("Enter");
  await until("the settings form open", () => page.locator("#set-batch_size").isVisible(), (v) => v);
}

// The "Live settings" card of the detail page, as its rows read.
const liveSettings = () => page.locator("#card-Live-settings + dl").innerText();

// Submit the form with Enter from `field`, then confirm in the dialog with
// Tab and Enter. Returns the dialog's text.
async function submitSettings(field) {
  await page.locator(field).focus();
  await page.keyboard.press("Enter");
  await until("the confirm dialog", () => page.locator("#confirm").isVisible(), (v) => v);
  const said = await text("#confirm-text");
  await page.keyboard.press("Tab");
  check((await page.evaluate(() => document.activeElement.id)) === "confirm-ok", "Tab moves to confirm");
  await page.keyboard.press("Enter");
  return said;
}

const settingsMessage = () => text("#settings-message");

const JOURNALED = "people.email-norm.v1";

const scenarios = {
  // Undo of a journaled backfill from its page: the confirmation names the
  // conflict rule, the answer names the undo, and the original's page
  // shows the undo's progress from the journal until it completed.
  async undo() {
    await page.goto(`${base}/ui#/backfills/${JOURNALED}`);
    await until("the token prompt", () => page.locator("#auth").isVisible(), (v) => v === true);
    await signIn(token);
    await until(`${JOURNALED}'s data`, () => page.locator("#detail-state .badge").count(), (n) => n === 1);
    check((await text("#detail-state")) === "completed", "the original is completed");
    const offered = await buttonsIn("#detail-actions");
    check(JSON.stringify(offered) === '["validate","undo"]', `a completed journaled backfill offers validate and undo: ${offered}`);
    await until("the journal card", () => page.locator("#detail-body").innerText(), (t) => /journal\s+10 rows/.test(t) && /undo\s+none started/.test(t));
    await page.locator('#detail-actions button[data-action="undo"]').click();
    await until("the confirm dialog", () => page.locator("#confirm").isVisible(), (v) => v);
    const said = await text("#confirm-text");
    check(/only where the row still holds exactly what the repair wrote/.test(said) && /conflict/.test(said), `the conflict rule is named: ${said}`);
    await shot("confirm");
    await page.locator("#confirm-ok").click();
    await until("the undo in words", () => text("#result-text"), (t) => t === `${JOURNALED}: undo: applied — ${JOURNALED}.undo is running`);
    await until("the undo named on the original's page", () => page.locator("#detail-body").innerText(), (t) => t.includes(`${JOURNALED}.undo (running)`));
    check(JSON.stringify(await buttonsIn("#detail-actions")) === '["validate"]', "undo is no longer offered");
    await step("undo-started");
    await until("the undo's progress and conflicts", () => page.locator("#detail-body").innerText(),
      (t) => t.includes(`${JOURNALED}.undo (completed)`) && /undone\s+10 of 10 \(100%\)/.test(t) && /conflicts\s+2/.test(t));
    await shot("undone");
  },

  // The list as PostgreSQL has it; rates only for running rows; the filter
  // and the search.
  async list() {
    await openList();
    await checkRows();
    check((await cell(BLOCKED, "state")).includes("blocked:"), "the blocked row's diagnostic");
    check(/^worker-1\nlease expires in \d+ s$/.test(await cell(RUNNING, "owner")), `owner in relative time: ${await cell(RUNNING, "owner")}`);
    // OBS-5: one progress sample of the claim: the server has no rate yet,
    // and the page does not make one up from its own reads.
    check((await cell(RUNNING, "rate")) === "measuring…", `no rate from one sample: ${await cell(RUNNING, "rate")}`);
    await step("loaded");
    // The Rust side committed a batch and sampled the claim again: the
    // running row now has the server's rate, an ETA and a sparkline; the
    // others still have none.
    await until("a positive rate for the running row", () => cell(RUNNING, "rate"), (t) => /^[\d.,]+ rows\/s$/.test(t) && parseFloat(t) > 0);
    await until("an ETA for the running row", () => cell(RUNNING, "eta"), (t) => /^\d+ (s|min)/.test(t));
    await until("4 more rows", () => cell(RUNNING, "rows"), (t) => t === "8 of 10");
    await until("a sparkline for the running row", () => rowOf(RUNNING).locator(".col-trend svg.spark path").count(), (n) => n >= 1);
    for (const id of [PENDING, PAUSED, BLOCKED, COMPLETED]) {
      check((await cell(id, "rate")) === "—" && (await cell(id, "eta")) === "—", `${id}: no rate or ETA`);
      check((await cell(id, "trend")) === "—", `${id}: no sparkline`);
    }
    await shot("list");
    // The state filter, by keyboard.
    await page.locator("#filter").selectOption("blocked");
    await until("only the blocked row", () => page.locator("#rows tr").evaluateAll((rs) => rs.map((r) => r.dataset.id)), (ids) => ids.length === 1 && ids[0] === BLOCKED);
    check((await page.evaluate(() => location.hash)) === "#/?state=blocked", "the filter is in the address");
    check((await page.locator("#filter option:checked").innerText()) === "blocked (1)", "the filter counts");
    // A marker filters too: the one backfill that gates readiness.
    await page.locator("#filter").selectOption("gating");
    await until("only the gating row", () => page.locator("#rows tr").evaluateAll((rs) => rs.map((r) => r.dataset.id)), (ids) => ids.length === 1 && ids[0] === RUNNING);
    check((await page.evaluate(() => location.hash)) === "#/?state=gating", "the marker filter is in the address");
    await page.locator("#filter").selectOption("all");
    await until("all rows again", () => page.locator("#rows tr").count(), (n) => n === 6);
    // The search, in any case, over what the filter shows.
    await page.locator("#search").fill(BLOCKED.toUpperCase());
    await until("only the row searched for", () => page.locator("#rows tr").evaluateAll((rs) => rs.map((r) => r.dataset.id)), (ids) => ids.length === 1 && ids[0] === BLOCKED);
    check((await text("#summary")).includes("1 shown"), "the summary counts what is shown");
    await page.locator("#search").fill("no-such-backfill");
    await until("nothing matches", () => text("#list-empty"), (t) => t === 'No backfill matches "no-such-backfill".');
    await page.locator("#search").fill("");
    await until("all rows again", () => page.locator("#rows tr").count(), (n) => n === 6);
    await openDetail(RUNNING);
    const owner = await until("the owner", () => page.locator("#detail-body").innerText(), (t) => /held by worker-1, lease expires in \d+ s/.test(t));
    check(/bound\s+10/.test(owner) && /checkpoint\s+8/.test(owner), "bound and checkpoint");
    check(/gating/.test(owner), "readiness participation");
    // OBS-5: the run chart, drawn from the server's buckets.
    await until("the run chart", () => page.locator('#detail-body .run-section[data-read="true"] #run-chart svg.chart path.rate-line').count(), (n) => n >= 1);
    check((await page.locator("#run-chart-empty").count()) === 0, "no empty-chart notice beside a chart");
    await shot("detail-running");
  },

  // Unknown totals are unknown, never 0%.
  async unknown() {
    await openList();
    const e = expectRow(UNKNOWN);
    check(e.pct === "unknown" && e.rows.endsWith("of unknown"), "the fixture's total is unknown");
    check((await cell(UNKNOWN, "progress")).includes("unknown"), "progress unknown");
    check((await rowOf(UNKNOWN).locator('[role="progressbar"]').count()) === 0, "no progress bar for an unknown total");
    check(!(await cell(UNKNOWN, "progress")).includes("%"), "no percentage for an unknown total");
    check((await cell(RUNNING, "progress")).includes("40.0%"), "a known total has its percentage");
    await step("loaded");
    await until("a rate for the unknown-total row", () => cell(UNKNOWN, "rate"), (t) => /^[\d.,]+ rows\/s$/.test(t));
    await until("an honest ETA", () => cell(UNKNOWN, "eta"), (t) => t === "unknown (total unknown)");
    await openDetail(UNKNOWN);
    const body = await page.locator("#detail-body").innerText();
    check(/rows\s+6 of unknown/.test(body), `rows of unknown: ${body}`);
    check(!/\d%/.test(await page.locator("#detail-body .card").first().innerText()), "no percentage on the detail page");
    await shot("detail-unknown");
  },

  // A failed refresh keeps the last data, marked stale with its age.
  async stale() {
    await openList();
    await checkRows();
    // What a row says about the server's state (rates and lease times move
    // with the clock and are checked on their own).
    const facts = () => page.locator("#rows tr").evaluateAll((rs) => rs.map((r) =>
      ["state", "progress", "rows"].map((c) => r.querySelector(`.col-${c}`).innerText).join(" | ")));
    const before = await facts();
    await step("loaded");
    // The server is gone now.
    const line = await until("the stale marker", banner, (t) => /^Stale: last refreshed \d+ s ago\./.test(t));
    check(!/Live/.test(line), "never live while stale");
    await until("the age to grow", banner, (t) => Number((t.match(/last refreshed (\d+) s ago/) || [])[1]) >= 3);
    await checkRows();
    check((await cell(RUNNING, "rate")) === "stale" && (await cell(RUNNING, "eta")) === "stale", "no current rate from stale data");
    check(JSON.stringify(await facts()) === JSON.stringify(before), "the rows are the last ones read");
    check((await bannerLabel()) === "Stale", "the banner says stale");
    await shot("list-stale");
    // The detail page opened now shows what the list read, stale too.
    await rowOf(RUNNING).locator("a").click();
    await until("the detail page", () => text("#detail-title-id"), (t) => t === RUNNING);
    await until("stale detail", banner, (t) => /^Stale: last refreshed \d+ s ago\./.test(t));
    check((await text("#detail-state")) === "running", "the last state read");
    await shot("detail-stale");
  },

  // Blocked: the diagnostic, and only retry and validate.
  async blocked() {
    const message = expected.find((e) => e.message).message;
    await openList();
    check((await cell(BLOCKED, "state")).includes(message), "the diagnostic in the list");
    check(JSON.stringify(await buttonsIn(`#rows tr[data-id="${BLOCKED}"]`)) === '["retry","validate"]', "the list offers retry and validate");
    await openDetail(BLOCKED);
    check((await text("#diagnostic")) === `blocked: ${message}`, "the diagnostic on the detail page");
    check((await text("#blocking-keys")) === "2, 7 (a sample: fix these rows, then retry)", `the blocking keys: ${await text("#blocking-keys")}`);
    check(JSON.stringify(await buttonsIn("#detail-actions")) === '["retry","validate"]', "the page offers retry and validate only");
    const audit = await page.locator("#detail-body table.audit tbody tr").evaluateAll((rs) => rs.map((r) => [...r.cells].map((c) => c.innerText)));
    check(audit.some((c) => c[1] === "ops" && c[2] === "start" && c[3] === "pending → running" && c[4] === "applied"), `the audit names the start: ${JSON.stringify(audit)}`);
    check(/attempts\s+\d+ failed attempts?/.test(await page.locator("#detail-body").innerText()), "the attempt count");
    // OBS-5: no rate was ever recorded: no chart, said so, never a flat line.
    await until("the run chart read", () => page.locator('#detail-body .run-section[data-read="true"]').count(), (n) => n === 1);
    check((await page.locator("#run-chart-empty").count()) === 1 && (await page.locator("#detail-body svg.chart").count()) === 0, "no chart without a rate");
    // OBS-4: the timeline, oldest first as `ctl history` prints it: the
    // block with its diagnostic last, the claim by its worker, the
    // operator's start.
    const timeline = await page.locator("#detail-body table.timeline tbody tr").evaluateAll((rs) => rs.map((r) => [...r.cells].slice(1).map((c) => c.innerText)));
    const rows = JSON.stringify(timeline);
    check(JSON.stringify(timeline[timeline.length - 1]) === JSON.stringify(["runtime", "state", "running → blocked", "—", `blocked: ${message}`]), `the block ends the timeline: ${rows}`);
    check(timeline.some((c) => c[0] === "runtime" && c[1] === "claimed" && c[3] === "worker-1"), `the claim by its worker: ${rows}`);
    check(timeline.some((c) => c[0] === "operator" && c[1] === "start" && c[2] === "pending → running" && c[3] === "ops" && c[4] === "applied"), `the operator's start: ${rows}`);
    await shot("detail-blocked");
  },

  // Pause (a lost response retried with its key), then resume by keyboard.
  // Bulk pause over the running rows: offered only on a narrowed list, one
  // confirmation, one audited request per backfill, the outcome counted.
  async bulk() {
    await openList();
    await until("rows", () => page.locator("#rows tr").count(), (n) => n === 6);
    check(!(await page.locator("#bulk-pause").isVisible()), "no bulk action over the whole list");
    await page.locator("#filter").selectOption("running");
    await until("the bulk pause offered", () => text("#bulk-pause"), (t) => t === "Pause shown (2)…");
    check(!(await page.locator("#bulk-resume").isVisible()), "no resume for running rows");
    await page.locator("#bulk-pause").click();
    await until("the confirm dialog", () => page.locator("#confirm").isVisible(), (v) => v);
    check((await text("#confirm-title")) === "Pause 2 backfills?", "the dialog counts them");
    const said = await text("#confirm-text");
    check(said.includes(RUNNING) && said.includes(UNKNOWN), `the dialog names them: ${said}`);
    await page.locator("#confirm-ok").click();
    await until("the bulk result", () => text("#result-text"), (t) => t === "pause 2 backfills: 2 applied");
    await shot("bulk-paused");
    await step("paused");
  },

  async "pause-resume"() {
    await openList();
    await openDetail(RUNNING);
    check(JSON.stringify(await buttonsIn("#detail-actions")) === '["pause","validate"]', "a running backfill offers pause and validate");
    const pause = page.locator('#detail-actions button[data-action="pause"]');
    const dialog = page.locator("#confirm");
    await pause.click();
    await until("the confirm dialog", () => dialog.isVisible(), (v) => v);
    check((await text("#confirm-title")) === `Pause ${RUNNING}?`, "the dialog names action and backfill");
    check((await page.evaluate(() => document.activeElement.id)) === "confirm-cancel", "focus starts on Cancel");
    await page.keyboard.press("Escape");
    await until("the dialog to close", () => dialog.isVisible(), (v) => !v);
    await until("focus back on the button", () => page.evaluate(() => document.activeElement.dataset.key), (k) => k === `act:pause:${RUNNING}`);
    await step("cancelled");

    // The first pause reaches the server and commits; its response is lost.
    const keys = [];
    const reasons = [];
    let lost = false;
    await page.route(`**/admin/backfills/${RUNNING}/pause`, async (route) => {
      keys.push(route.request().headers()["idempotency-key"]);
      reasons.push(route.request().headers()["backfill-reason"]);
      if (!lost) {
        lost = true;
        await route.fetch();
        await route.abort("connectionreset");
      } else {
        await route.continue();
      }
    });
    await pause.click();
    await until("the confirm dialog", () => dialog.isVisible(), (v) => v);
    // OBS-4: a reason typed in the dialog goes with the request.
    await page.locator("#confirm-reason").fill("quiet hours — café");
    await shot("confirm");
    await page.locator("#confirm-ok").click();
    await until("an unknown outcome", () => text("#result"), (t) => /no answer \(network error\); the outcome is unknown/.test(t));
    check((await text("#result-outcome")) === "unknown", "the outcome badge says unknown");
    check((await page.evaluate(() => document.activeElement.id)) === "result-retry", "focus on the retry");
    await step("lost");

    await page.keyboard.press("Enter");
    await until("the replayed answer", () => text("#result-text"), (t) => t === `${RUNNING}: pause: applied (running → paused)`);
    await until("paused", () => text("#detail-state"), (t) => t === "paused");
    check(keys.length === 2 && keys[0] === keys[1], `one key for the action and its retry: ${keys}`);
    const sent = encodeURIComponent("quiet hours — café");
    check(reasons.length === 2 && reasons.every((r) => r === sent), `the reason with the action and its retry: ${reasons}`);
    await until("the reason in the audit trail", () => page.locator("#detail-body table.audit tbody").innerText(), (t) => /ops\s+pause\s+running → paused\s+applied.*reason: quiet hours — café/.test(t));
    await page.unroute(`**/admin/backfills/${RUNNING}/pause`);
    check(JSON.stringify(await buttonsIn("#detail-actions")) === '["resume","validate"]', "a paused backfill offers resume and validate");
    await step("paused", keys[0]);

    // Resume with the keyboard alone: Tab to the button, Enter, Tab to the
    // dialog's confirm, Enter.
    await page.locator("#detail-title").focus();
    let reached = false;
    for (let i = 0; i < 40 && !reached; i++) {
      await page.keyboard.press("Tab");
      reached = await page.evaluate((k) => document.activeElement && document.activeElement.dataset.key === k, `act:resume:${RUNNING}`);
    }
    check(reached, "Tab reaches the resume button");
    await page.keyboard.press("Enter");
    await until("the confirm dialog", () => dialog.isVisible(), (v) => v);
    await page.keyboard.press("Tab");
    check((await page.evaluate(() => document.activeElement.id)) === "confirm-ok", "Tab moves to confirm");
    await page.keyboard.press("Enter");
    await until("running again", () => text("#detail-state"), (t) => t === "running");
    await until("the resume in words", () => text("#result-text"), (t) => t === `${RUNNING}: resume: applied (paused → running)`);
    await until("the resume in the audit trail", () => page.locator("#detail-body table.audit tbody tr").first().innerText(), (t) => /ops\s+resume\s+paused → running\s+applied/.test(t));
    await shot("detail-resumed");
    await step("resumed");
  },

  // Validation of a completed backfill: success, then failure; completed stays.
  async validate() {
    await openList();
    await openDetail(COMPLETED);
    check(JSON.stringify(await buttonsIn("#detail-actions")) === '["validate"]', "a completed backfill offers validate only");
    const validate = async () => {
      await page.locator('#detail-actions button[data-action="validate"]').click();
      await until("the confirm dialog", () => page.locator("#confirm").isVisible(), (v) => v);
      await page.locator("#confirm-ok").click();
    };
    await validate();
    await until("success", () => text("#result-outcome"), (t) => t === "success");
    check((await text("#result-text")) === `${COMPLETED}: validate: success (state completed)`, "the typed outcome in words");
    await until("one explicit validation", () => page.locator("#detail-body table.mini tbody tr").count(), (n) => n === 1);
    await step("validated");
    await validate();
    await until("failure", () => text("#result-outcome"), (t) => t === "failure");
    check(/validate: failure — 1 items up to the bound do not have n = 1 \(state completed\)/.test(await text("#result-text")), "the diagnostic of the failure");
    await until("two explicit validations", () => page.locator("#detail-body table.mini tbody tr").count(), (n) => n === 2);
    const history = await page.locator("#detail-body table.mini tbody tr").evaluateAll((rs) => rs.map((r) => r.cells[1].innerText));
    check(JSON.stringify(history) === '["failure","success"]', `newest first: ${history}`);
    check((await text("#detail-state")) === "completed", "completed stays completed");
    await until("the latest outcome", () => page.locator("#detail-body").innerText(), (t) => /latest outcome\s+failure — 1 items up to the bound do not have n = 1/.test(t));
    await shot("detail-validated");
    await step("failed");
  },

  // A settings change from the page: confirmed (Escape sends nothing), its
  // lost answer retried with the same key, then a new change with a new
  // key; PostgreSQL is read by the Rust side at each step.
  async settings() {
    await openList();
    await openDetail(RUNNING);
    await openSettings();
    check((await page.locator("#settings-form").getByLabel("batch size", { exact: true }).getAttribute("id")) === "set-batch_size", "the batch size input is labelled");
    check((await text("#hint-batch_size")) === "1 to 100,000; now default", `the hint: ${await text("#hint-batch_size")}`);
    check(/batch size in force\s+4/.test(await liveSettings()), `the size in force: ${await liveSettings()}`);
    const keys = [];
    let lose = false;
    await page.route(`**/admin/backfills/${RUNNING}/settings`, async (route) => {
      const req = route.request();
      keys.push({ key: req.headers()["idempotency-key"], method: req.method(), body: req.postData(), type: req.headers()["content-type"] });
      if (lose) {
        lose = false;
        await route.fetch();
        await route.abort("connectionreset");
      } else {
        await route.continue();
      }
    });

    // Escape in the dialog sends nothing.
    await page.locator("#set-batch_size").fill("7");
    await page.locator("#set-batch_size").press("Enter");
    await until("the confirm dialog", () => page.locator("#confirm").isVisible(), (v) => v);
    check((await text("#confirm-title")) === `Change the settings of ${RUNNING}?`, "the dialog names the backfill");
    check((await text("#confirm-text")).startsWith("batch size: default → 7."), `the dialog names the change: ${await text("#confirm-text")}`);
    check((await page.evaluate(() => document.activeElement.id)) === "confirm-cancel", "focus starts on Cancel");
    await shot("settings-confirm");
    await page.keyboard.press("Escape");
    await until("the dialog to close", () => page.locator("#confirm").isVisible(), (v) => !v);
    // The dialog's close event, which hands focus back, is dispatched
    // after the dialog is hidden: wait for it rather than race it.
    await until("focus back on the form's button", () => page.evaluate(() => document.activeElement.id), (id) => id === "settings-submit");
    check(keys.length === 0, "a cancelled change sends nothing");

    // The first request commits; its answer is lost.
    lose = true;
    await submitSettings("#set-batch_size");
    await until("an unknown outcome", settingsMessage, (t) => /no answer \(network error\); the outcome is unknown/.test(t));
    check((await text("#settings-outcome")) === "unknown", "the outcome beside the form is unknown");
    check((await page.locator("#set-batch_size").inputValue()) === "7", "what was typed stays for the retry");
    await step("lost");

    // The same change again: the same key, answered by the stored response.
    await submitSettings("#set-batch_size");
    await until("the replayed answer", settingsMessage, (t) => /^applied settings: applied \(/.test(t));
    check(keys.length === 2 && keys[0].key === keys[1].key && keys[0].key.startsWith("ui-"), `one key for a change and its retry: ${JSON.stringify(keys)}`);
    check(keys.every((k) => k.method === "PATCH" && k.type === "application/merge-patch+json" && k.body === '{"batch_size":7}'), `the request: ${JSON.stringify(keys)}`);
    await until("the view shows the setting", liveSettings, (t) => /(^|\n)batch size\s+7(\n|$)/.test(t));
    await until("the hint shows the setting", () => text("#hint-batch_size"), (t) => t === "1 to 100,000; now 7");
    check((await page.locator("#set-batch_size").inputValue()) === "", "an applied change empties the form");
    await step("applied", keys[0].key);

    // A new change: reset the batch size (Space on its checkbox), set a
    // pause. It gets a key of its own.
    await page.locator("#clear-batch_size").focus();
    await page.keyboard.press("Space");
    check(await page.locator("#set-batch_size").isDisabled(), "a reset field is not also a value");
    await page.locator("#set-pause_ms").fill("250");
    const said = await submitSettings("#set-pause_ms");
    check(said.startsWith("batch size: 7 → default; pause between batches (ms): default → 250."), `the dialog: ${said}`);
    await until("applied", settingsMessage, (t) => t === "applied settings: applied (batch size: 7 → default; pause between batches (ms): default → 250)");
    check(keys.length === 3 && keys[2].key !== keys[0].key, `a new change, a new key: ${JSON.stringify(keys)}`);
    check(keys[2].body === '{"batch_size":null,"pause_ms":250}', `reset is null: ${keys[2].body}`);
    await until("the view shows the change", liveSettings, (t) => /pause between batches \(ms\)\s+250/.test(t) && !/(^|\n)batch size\s+\d/.test(t));
    check((await text("#result-text")) === `${RUNNING}: settings: applied (batch size: 7 → default; pause between batches (ms): default → 250)`, "the last action says so too");
    await until("the change in the audit trail", () => page.locator("#detail-body table.audit tbody tr").first().innerText(),
      (t) => /ops\s+settings\s+running → running\s+applied\s+\d+\s+batch_size: 7 -> unset; pause_ms: unset -> 250/.test(t));
    await page.unroute(`**/admin/backfills/${RUNNING}/settings`);
    await shot("settings-applied");
    await step("changed", keys[2].key);
  },

  // Refused changes: the server's 422 beside the form, the view and
  // PostgreSQL unchanged; a token that may not operate is refused (403)
  // and the form withdrawn.
  async "settings-invalid"() {
    await openList();
    await openDetail(PAUSED);
    await openSettings();
    const before = await liveSettings();
    check(/set by an operator\s+none: the defaults apply/.test(before), `no settings yet: ${before}`);
    await page.locator("#set-batch_size").fill("0");
    await submitSettings("#set-batch_size");
    await until("the 422", settingsMessage, (t) => t === "rejected settings: HTTP 422 invalid_settings: batch_size must be between 1 and 100000, got 0");
    check((await page.locator("#set-batch_size").getAttribute("aria-invalid")) === "true", "the field named is marked invalid");
    check((await page.evaluate(() => document.activeElement.id)) === "set-batch_size", "focus on the field named");
    check((await page.locator("#set-batch_size").getAttribute("aria-describedby")).includes("settings-message"), "the field is described by the error");
    check((await page.locator("#set-batch_size").inputValue()) === "0", "what was typed stays, to be corrected");
    await shot("settings-422");

    // A value that is not a number is refused by the form itself: no
    // dialog, nothing sent, the field named and focused.
    await page.locator("#set-batch_size").fill("");
    await page.locator("#set-pause_ms").fill("fast");
    await page.locator("#set-pause_ms").press("Enter");
    await until("the form's refusal", settingsMessage, (t) => t === "rejected settings: pause between batches (ms) must be a whole number, 0 or more. Nothing was sent.");
    check(!(await page.locator("#confirm").isVisible()), "no confirm dialog for a value that is not a number");
    check((await page.locator("#set-pause_ms").getAttribute("aria-invalid")) === "true", "the field is marked invalid");
    check((await page.evaluate(() => document.activeElement.id)) === "set-pause_ms", "focus on the field");
    await page.locator("#set-pause_ms").fill("");

    // Two settings that contradict each other.
    await page.locator("#set-batch_size").fill("");
    await page.locator("#set-min_batch_size").fill("50");
    await page.locator("#set-max_batch_size").fill("5");
    await submitSettings("#set-max_batch_size");
    await until("the conflict's 422", settingsMessage, (t) => t === "rejected settings: HTTP 422 invalid_settings: min_batch_size must not exceed max_batch_size");
    check((await page.locator('#settings-fields input[aria-invalid="true"]').count()) === 0, "no single field is blamed");
    // Refreshes go on and the view stays what the server has.
    const readAt = () => page.locator("#card-Timestamps + dl time").last().getAttribute("datetime");
    const at = await readAt();
    await until("a refresh after the refusal", readAt, (t) => t !== at);
    check((await liveSettings()) === before, `the view is unchanged: ${await liveSettings()}`);
    check((await text("#hint-min_batch_size")) === "1 to 100,000; now default", "the hints are unchanged");
    await step("refused");

    // A token that may read but not operate: /admin/me says so, and the
    // page offers neither the form nor an action button.
    await page.locator("#change-token").click();
    await signIn(readerToken);
    await until("a live page for the reader", bannerLabel, (t) => t === "Live");
    await until("the form withdrawn for the reader", () => page.locator("#settings-refused").isVisible(), (v) => v);
    check(!(await page.locator("#settings-fields").isVisible()), "no form for the reader");
    check((await page.locator("#detail-actions button").count()) === 0, "no action button for the reader");
    check((await liveSettings()) === before, "the reader still reads the view");
    await shot("settings-403");
    await step("forbidden");
  },

  // A runner held back by a health signal: the marker and the throttle
  // card name signal, value and threshold, and go when it recovers.
  async throttled() {
    await page.goto(`${base}/ui`);
    await signIn(token);
    await until("a live list", bannerLabel, (t) => t === "Live");
    const marker = () => cell(THROTTLED, "markers");
    await until("the application's throttle", marker, (t) => t === "throttled: application");
    check((await rowOf(THROTTLED).locator(".marker.throttled").getAttribute("title")).includes("application check: maintenance window"), "the reason in the marker's title");
    check((await text("#summary")).includes("1 throttled"), "the list counts it");
    await step("application");

    // Sessions now wait for a lock on the repair's table (limit 0).
    await until("the lock waiters' throttle", marker, (t) => t === "throttled: lock_waiters 1 past 0");
    const title = await rowOf(THROTTLED).locator(".marker.throttled").getAttribute("title");
    check(/^throttled by lock_waiters: 1 past 0 since .+ \(lock waiters 1 > 0 on items, held by pid \d+\)$/.test(title), `the marker's title: ${title}`);
    check((await cell(THROTTLED, "state")).includes("running"), "throttled is no state: still running");
    await shot("list-throttled");
    await openDetail(THROTTLED);
    check((await text("#detail-markers")) === "throttled: lock_waiters 1 past 0", "the marker beside the state");
    check((await text("#detail-state")) === "running", "the state is running");
    const card = await page.locator("#card-Throttle + dl").innerText();
    check(/signal\s+lock_waiters\s+value\s+1\s+threshold\s+0\s+since\s+.+ago\s+condition\s+lock waiters 1 > 0 on items/.test(card), `the throttle card: ${card}`);
    await shot("detail-throttled");
    await step("lock");

    // The lock is gone: the backfill ran to completion, no longer throttled.
    await until("completed", () => text("#detail-state"), (t) => t === "completed");
    await until("no marker", () => text("#detail-markers"), (t) => t === "");
    check((await page.locator("#card-Throttle").count()) === 0, "no throttle card");
  },

  // FLT-6: the fleet page on a fleet's listener. BACKFILL_UI_EXPECT is
  // {repair, databases: [{name, availability, counts, reason?}]}, the
  // databases as the fleet reports them.
  async fleet() {
    const want = expected;
    const R = want.repair;
    const dbRow = (name) => page.locator(`#fleet-db-rows tr[data-database="${name}"]`);
    const fleetRow = (name) => page.locator(`#fleet-rows tr[data-database="${name}"][data-backfill="${R}"]`);
    const stateIn = (name) => fleetRow(name).locator(".col-state .badge").innerText();
    const total = (key) => text(`#fleet-totals [data-total="${key}"]`);
    const answers = () => page.locator("#fleet-answer-rows tr").evaluateAll((rows) => rows.map((r) => [
      r.dataset.database, r.querySelector(".col-status").innerText, r.querySelector(".col-outcome").innerText, r.querySelector(".col-text").innerText,
    ]));
    await page.goto(`${base}/ui`);
    // The page knows it talks to a fleet before any token is entered.
    await until("the fleet page", () => page.locator("#fleet-page").isVisible(), (v) => v);
    check(!(await page.locator("#list-page").isVisible()), "no single-database list on a fleet's listener");
    await until("the token prompt", () => page.locator("#auth").isVisible(), (v) => v);
    // A token that may read but not operate reads the fleet and is
    // offered no action (GET /admin/fleet/me names its capabilities).
    await signIn(readerToken);
    await until("a live fleet page for the reader", bannerLabel, (t) => t === "Live");
    await until("the reader's rows", () => page.locator("#fleet-rows tr[data-backfill]").count(), (n) => n === 2);
    check((await page.locator("#fleet-page button[data-fleet-action]").count()) === 0, "no fleet action for the reader");
    check(await page.locator("#fleet-all-actions").isHidden(), "no action on every database for the reader");
    await page.locator("#change-token").click();
    await signIn(token);
    await until("a live fleet page", bannerLabel, (t) => t === "Live");
    await until("every database", () => page.locator("#fleet-db-rows tr").count(), (n) => n === want.databases.length);
    for (const d of want.databases) {
      const row = dbRow(d.name);
      check((await row.locator(".col-availability .badge").innerText()) === d.availability, `${d.name} is ${d.availability}`);
      check((await row.locator(".col-counts").innerText()) === d.counts, `${d.name} counts ${d.counts}, got ${await row.locator(".col-counts").innerText()}`);
      if (d.reason) {
        check((await row.locator(".col-reason").innerText()) === d.reason, `${d.name}'s reason: ${await row.locator(".col-reason").innerText()}`);
        check(!(await row.innerText()).includes("postgres://"), `${d.name} shows no URL`);
        check((await row.locator(".col-rate").innerText()) === "unknown", `${d.name}'s rate is unknown, not 0`);
      }
    }
    check((await total("databases")) === "3: 2 available, 1 unavailable", `the totals count databases: ${await total("databases")}`);
    check((await total("running")) === "2 databases (1 database unknown)", `the totals count running databases: ${await total("running")}`);
    const listed = await page.locator("#fleet-rows tr[data-backfill]").evaluateAll((rows) => rows.map((r) => `${r.dataset.database}/${r.dataset.backfill}`));
    check(JSON.stringify(listed) === JSON.stringify([`d0/${R}`, `d1/${R}`]), `the backfills of every database: ${listed}`);
    const unlisted = page.locator('#fleet-rows tr.row-unavailable[data-database="down"]');
    check((await unlisted.count()) === 1, "the down database is reported among the backfills");
    check((await unlisted.innerText()).includes(want.databases[2].reason), "with its reason");
    for (const name of ["d0", "d1"]) {
      const offered = await fleetRow(name).locator("button[data-fleet-action]").evaluateAll((bs) => bs.map((b) => b.dataset.fleetAction));
      check(JSON.stringify(offered) === JSON.stringify(OFFERED.running), `${name}'s row offers ${OFFERED.running}: ${offered}`);
    }
    // The filter narrows both tables to one database.
    await page.locator("#fleet-database").selectOption("d1");
    await until("d1 alone", () => page.locator("#fleet-rows tr").evaluateAll((rows) => rows.map((r) => r.dataset.database)), (ds) => JSON.stringify(ds) === '["d1"]');
    check((await page.locator("#fleet-db-rows tr").count()) === 1, "one database row");
    // The filter is in the address: a reload shows the same database.
    check((await page.evaluate(() => location.hash)) === "#/?database=d1", `the filter in the address: ${await page.evaluate(() => location.hash)}`);
    await page.reload();
    await until("d1 alone after a reload", () => page.locator("#fleet-rows tr").evaluateAll((rows) => rows.map((r) => r.dataset.database)), (ds) => JSON.stringify(ds) === '["d1"]');
    check((await page.locator("#fleet-database").inputValue()) === "d1", "the filter shows d1 after a reload");
    await page.locator("#fleet-database").selectOption("down");
    await until("down alone", () => page.locator("#fleet-rows tr").evaluateAll((rows) => rows.map((r) => r.className)), (cs) => JSON.stringify(cs) === '["row-unavailable"]');
    await page.locator("#fleet-database").selectOption("all");
    await until("every row again", () => page.locator("#fleet-rows tr").count(), (n) => n === 3);
    await shot("fleet");

    // Pause on every database; the first answer is lost after the commit.
    const keys = [];
    const reasons = [];
    const urls = [];
    let lost = false;
    const pattern = `**/admin/fleet/backfills/${R}/pause*`;
    await page.route(pattern, async (route) => {
      keys.push(route.request().headers()["idempotency-key"]);
      reasons.push(route.request().headers()["backfill-reason"]);
      urls.push(new URL(route.request().url()).search);
      if (!lost) {
        lost = true;
        await route.fetch();
        await route.abort("connectionreset");
      } else {
        await route.continue();
      }
    });
    const all = page.locator(`#fleet-id-actions button[data-fleet-action="pause"][data-id="${R}"]`);
    check((await all.count()) === 1, "a pause on every database is offered");
    await all.click();
    await until("the confirm dialog", () => page.locator("#confirm").isVisible(), (v) => v);
    check((await text("#confirm-title")) === `Pause ${R} in every database?`, `the dialog says where: ${await text("#confirm-title")}`);
    const said = await text("#confirm-text");
    check(["d0", "d1", "down", "503"].every((w) => said.includes(w)), `the dialog names every database: ${said}`);
    await page.locator("#confirm-reason").fill("fleet quiet hours");
    await page.locator("#confirm-ok").click();
    await until("an unknown outcome", () => text("#result"), (t) => /no answer \(network error\); the outcome is unknown/.test(t));
    check((await text("#result-outcome")) === "unknown", "the outcome badge says unknown");
    await step("lost");

    await page.locator("#result-retry").click();
    await until("every database's answer", answers, (a) => a.length === 3);
    const got = await answers();
    check(JSON.stringify(got.map((a) => a.slice(0, 3))) === JSON.stringify([["d0", "200", "applied"], ["d1", "200", "applied"], ["down", "503", "unavailable"]]),
      `each database answered: ${JSON.stringify(got)}`);
    check(got[2][3].includes("HTTP 503 unavailable"), `the down database's refusal is shown: ${got[2][3]}`);
    check((await text("#result-text")) === `pause ${R} in every database: 2 applied (d0, d1), 1 unavailable (down)`, `the summary: ${await text("#result-text")}`);
    check(await page.locator("#result-retry").isVisible(), "the retry that would reach the down database stays offered");
    check(keys.length === 2 && keys[0] === keys[1] && /^ui-/.test(keys[0]), `one key for the action and its retry: ${keys}`);
    check(reasons.every((r) => r === encodeURIComponent("fleet quiet hours")), `the reason with each request: ${reasons}`);
    check(urls.every((u) => u === ""), `the action went to every database, not one: ${urls}`);
    await until("both paused", async () => [await stateIn("d0"), await stateIn("d1")], (s) => s.join() === "paused,paused");
    await shot("fleet-paused");
    await page.unroute(pattern);
    await step("paused", keys[0]);

    // Resume on d0 alone, from its row.
    await fleetRow("d0").locator('button[data-fleet-action="resume"]').click();
    await until("the confirm dialog", () => page.locator("#confirm").isVisible(), (v) => v);
    check((await text("#confirm-title")) === `Resume ${R} in d0?`, `the dialog names the database: ${await text("#confirm-title")}`);
    await page.locator("#confirm-ok").click();
    await until("d0's answer alone", answers, (a) => a.length === 1 && a[0][0] === "d0" && a[0][2] === "applied");
    await until("d0 running, d1 paused", async () => [await stateIn("d0"), await stateIn("d1")], (s) => s.join() === "running,paused");
    check(!(await page.locator("#result-retry").isVisible()), "a settled action offers no retry");
    await step("resumed");

    // d1's backfill on its own page, read and resumed through d1's own
    // admin API under its name on the fleet's listener.
    const through = [];
    await page.route("**/databases/**", async (route) => {
      through.push(`${route.request().method()} ${new URL(route.request().url()).pathname}`);
      await route.continue();
    });
    await fleetRow("d1").locator(".col-id a").click();
    await until("d1's backfill page", () => text("#detail-title-id"), (t) => t === `${R} in d1`);
    check(!(await page.locator("#fleet-page").isVisible()), "the fleet page gives way to the backfill's");
    check((await text('[data-key="crumb"]')) === "← Fleet", "the breadcrumb leads back to the fleet");
    await until("d1's audit, with the fleet pause's reason", () => text("#detail-body"), (t) => t.includes("fleet quiet hours"));
    check(JSON.stringify(await buttonsIn("#detail-actions")) === '["resume","validate"]', "a paused backfill offers resume and validate");
    await page.locator('#detail-actions button[data-action="resume"]').click();
    await until("the confirm dialog", () => page.locator("#confirm").isVisible(), (v) => v);
    await page.locator("#confirm-ok").click();
    await until("d1 running on its page", () => page.locator("#detail-state .badge").innerText(), (t) => t === "running");
    check(through.includes(`POST /databases/d1/admin/backfills/${R}/resume`), `the resume went to d1's own API: ${through}`);
    check(through.every((t) => t.includes("/databases/d1/")), `only d1 was asked: ${through}`);
    await page.unroute("**/databases/**");
    await page.locator('[data-key="crumb"]').click();
    await until("the fleet page again", () => page.locator("#fleet-page").isVisible(), (v) => v);
    await step("detail-resumed");

    // Live settings of every database from the fleet page's form: what is
    // not a number is refused in the page, then one request goes to the
    // fleet, which sends it to each database.
    const patches = [];
    const settingsPattern = `**/admin/fleet/backfills/${R}/settings*`;
    await page.route(settingsPattern, async (route) => {
      const request = route.request();
      patches.push({ search: new URL(request.url()).search, body: request.postData(), key: request.headers()["idempotency-key"], reason: request.headers()["backfill-reason"] });
      await route.continue();
    });
    await page.locator("#fleet-settings-panel summary").click();
    check((await page.locator("#fleet-settings-id").inputValue()) === R, "the form changes the fleet's backfill");
    check((await text("#fleet-settings-where")).startsWith("in all 3 databases"), `the form says where: ${await text("#fleet-settings-where")}`);
    await page.locator("#fleet-set-batch_size").fill("many");
    await page.locator("#fleet-settings-submit").click();
    await until("the form's refusal", () => text("#fleet-settings-message"), (t) => /batch size must be a whole number.*Nothing was sent/.test(t));
    check((await page.evaluate(() => document.activeElement.id)) === "fleet-set-batch_size", "focus on the field to correct");
    check(patches.length === 0, "nothing was sent");
    await page.locator("#fleet-set-batch_size").fill("7");
    await page.locator("#fleet-settings-submit").click();
    await until("the confirm dialog", () => page.locator("#confirm").isVisible(), (v) => v);
    check((await text("#confirm-title")) === `Change the settings of ${R} in every database?`, `the dialog says where: ${await text("#confirm-title")}`);
    const asked = await text("#confirm-text");
    check(["batch size to 7", "d0", "d1", "down", "503"].every((w) => asked.includes(w)), `the dialog names the change and every database: ${asked}`);
    await page.locator("#confirm-reason").fill("smaller batches fleet-wide");
    await page.locator("#confirm-ok").click();
    await until("every database's answer to the settings", answers, (a) => a.length === 3 && a[0][3].startsWith("settings"));
    const set = await answers();
    check(JSON.stringify(set.map((a) => a.slice(0, 3))) === JSON.stringify([["d0", "200", "applied"], ["d1", "200", "applied"], ["down", "503", "unavailable"]]),
      `each database answered the settings: ${JSON.stringify(set)}`);
    check(set[0][3] === "settings: applied (batch size now 7)", `d0's answer names the value now: ${set[0][3]}`);
    check((await text("#result-text")) === `settings ${R} in every database: 2 applied (d0, d1), 1 unavailable (down)`, `the summary: ${await text("#result-text")}`);
    check(patches.length === 1 && patches[0].search === "" && JSON.stringify(JSON.parse(patches[0].body)) === '{"batch_size":7}',
      `one merge patch to every database: ${JSON.stringify(patches)}`);
    check(patches[0].reason === encodeURIComponent("smaller batches fleet-wide"), `the reason goes with it: ${patches[0].reason}`);
    await page.unroute(settingsPattern);
    await shot("fleet-settings");
    await step("fleet-settings", patches[0].key);
  },

  // 401: the prompt, focused, and nothing else.
  async unauthorized() {
    const noData = async (where) => {
      await until(`the prompt (${where})`, bannerLabel, (t) => t === "Not authorized");
      check(await page.locator("#auth").isVisible(), `the token prompt is shown (${where})`);
      check((await page.evaluate(() => document.activeElement.id)) === "token", `the prompt has focus (${where})`);
      check((await page.locator("#rows tr").count()) === 0, `no rows (${where})`);
      check((await page.locator("#detail-body").innerText()) === "", `no detail (${where})`);
      const data = await page.locator(".data").evaluateAll((es) => es.map((e) => e.innerText).join(" "));
      for (const word of ["running", "paused", "40.0%", "worker-1", PENDING]) {
        check(!data.includes(word), `no ${word} shown (${where})`);
      }
    };
    await page.goto(`${base}/ui`);
    await signIn("not-a-known-token-0123456789");
    await noData("list");
    await shot("unauthorized");
    await page.goto(`${base}/ui#/backfills/${RUNNING}`);
    await until("the prompt", () => page.locator("#auth").isVisible(), (v) => v);
    await signIn("not-a-known-token-0123456789");
    await noData("detail");
    await page.goto(`${base}/ui#/`);
    await signIn(token);
    await until("a live list", bannerLabel, (t) => t === "Live");
    await until("rows", () => page.locator("#rows tr").count(), (n) => n === 6);
    await page.locator("#change-token").click();
    check((await page.evaluate(() => document.activeElement.id)) === "token", "the prompt has focus");
    await signIn("another-unknown-token-0123456789");
    await noData("after a valid token");
    // A token that may read but not operate: it reads every row and is
    // offered no action (GET /admin/me names its capabilities).
    await signIn(readerToken);
    await until("a live list for the reader", bannerLabel, (t) => t === "Live");
    await until("rows", () => page.locator("#rows tr").count(), (n) => n === 6);
    check((await page.locator("#rows button[data-action]").count()) === 0, "no action button for the reader");
    check((await page.locator("#rows tr").count()) === 6 && (await bannerLabel()) !== "Not authorized", "the reader keeps what it may read");
    check(!(await page.locator("#auth").isVisible()), "no token prompt for a refusal to operate");
  },
};

let code = 0;
try {
  const run = scenarios[scenario];
  if (!run) throw new Error(`unknown scenario ${scenario}`);
  await run();
  if (consoleErrors.length) throw new Error(`page errors: ${consoleErrors.join("; ")}`);
  check(cspPolicies.size > 0 && [...cspPolicies].every((p) => p.startsWith("default-src 'none'")),
    `the client was served under its CSP: ${[...cspPolicies].join(" | ")}`);
  if (cspViolations.length) throw new Error(`CSP violations: ${cspViolations.join("; ")}`);
  console.log(`PASS ${scenario}`);
} catch (e) {
  code = 1;
  console.error(e && e.stack ? e.stack : String(e));
  try {
    await shot("failure");
  } catch (e2) {
    // The screenshot is a help for the reader; the failure above is the result.
  }
} finally {
  await browser.close();
}
process.exit(code);
