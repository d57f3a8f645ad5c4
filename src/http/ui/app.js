// The admin web client: a projection of the admin API (ADM-1). It keeps no
// lifecycle of its own, never synthesises an outcome, shows unknown as
// unknown and a failed refresh as stale with its age, never as zero or
// healthy (ADM-3), and sends only the actions of docs/CONTRACT.md section 3
// (CT-12), live settings changes (THR-4), the undo of a journaled
// backfill (UNDO-2) and the dry run, which changes nothing (DRY-1). The
// server decides every
// transition and judges every setting; the buttons and the form shown are
// a convenience, not a rule.
//
// The file is both the page's script and a CommonJS module: the pure
// projections below are exported for tests/ui/app.test.js, and the part at
// the end runs only in a browser.
"use strict";

// The only actions this client can send (docs/CONTRACT.md section 3, ADM-6).
const ACTIONS = ["start", "pause", "resume", "retry", "validate"];

// Lifecycle states in the order the filter lists them.
const STATES = ["pending", "running", "validating", "paused", "blocked", "failed", "completed"];

// Which actions to offer for a state, per the contract's table: the
// transitions the state has, plus explicit validation wherever it runs
// (on `pending` it would only answer `current-state`, so it is not
// offered). A state this client does not know gets nothing (fail closed).
function actionsFor(state) {
  const byState = {
    pending: ["start"],
    running: ["pause", "validate"],
    validating: ["pause", "validate"],
    paused: ["resume", "validate"],
    blocked: ["retry", "validate"],
    failed: ["retry", "validate"],
    completed: ["validate"],
  };
  return (byState[state] || []).filter((a) => ACTIONS.includes(a));
}

// The states an undo starts from (UNDO-2): the original runs no batch in
// any of them.
const UNDOABLE = ["completed", "paused", "failed", "blocked"];

// Whether to offer `undo` for a view: a journaled backfill that is not
// itself an undo, has none yet, and is in a state an undo starts from. The
// server decides; this only spares a certain refusal.
function undoOffered(view) {
  return Boolean(view && view.journaled && !view.undo_of && !view.undo && UNDOABLE.includes(view.state));
}

// What each action does, in the confirm dialog's words.
const CONSEQUENCES = {
  undo: "Starts a reverse backfill (<id>.undo) over this backfill's journal. It restores the journaled columns of a row only where the row still holds exactly what the repair wrote; a row the application changed since is left alone and counted as a conflict. This backfill's own row does not change, and it will not run again.",
  start: "Captures the bound once and enters running; workers begin at their next claim.",
  pause: "Enters paused and fences the claim: the batch in flight commits or rolls back, and no new batch starts.",
  resume: "Enters running again (or validating at the bound); work continues strictly after the checkpoint.",
  retry: "Runs again from the checkpoint, keeping the bound; the attempt count starts over.",
  validate: "Runs the definition's validation read-only over the range up to the bound and records the outcome. A completed backfill stays completed.",
};

// The live settings the server accepts (src/throttle/settings.rs `Field`), in its
// order, with each one's inclusive range. tests/ui.rs compares this list
// with the server's, so a field or range changed on one side only fails
// there rather than in front of an operator.
const SETTINGS = [
  { name: "batch_size", label: "batch size", min: 1, max: 100000, group: "batch" },
  { name: "target_batch_ms", label: "target batch duration (ms)", min: 10, max: 600000, group: "batch" },
  { name: "min_batch_size", label: "min batch size", min: 1, max: 100000, group: "batch" },
  { name: "max_batch_size", label: "max batch size", min: 1, max: 100000, group: "batch" },
  { name: "pause_ms", label: "pause between batches (ms)", min: 0, max: 3600000, group: "batch" },
  { name: "max_lag_bytes", label: "max replication lag (bytes)", min: 0, max: 2 ** 50, group: "health" },
  { name: "max_lag_ms", label: "max replication lag (ms)", min: 0, max: 86400000, group: "health" },
  { name: "max_wal_bytes_per_s", label: "max WAL rate (bytes/s)", min: 0, max: 2 ** 50, group: "health" },
  { name: "max_lock_waiters", label: "max lock waiters", min: 0, max: 100000, group: "health" },
  { name: "max_xact_age_ms", label: "max transaction age (ms)", min: 1000, max: 86400000, group: "health" },
  { name: "concurrency", label: "partitions at once", min: 1, max: 64, group: "batch" },
  { name: "window_start_hour", label: "run window from hour (UTC)", min: 0, max: 23, group: "batch" },
  { name: "window_end_hour", label: "run window until hour (UTC)", min: 0, max: 23, group: "batch" },
  { name: "latency_ratio_pct", label: "latency budget (% of baseline)", min: 101, max: 10000, group: "latency" },
  { name: "latency_max_us", label: "latency budget (µs)", min: 100, max: 60000000, group: "latency" },
  { name: "latency_percentile", label: "latency budget percentile", min: 50, max: 99, group: "latency" },
];

// The states whose settings the server still changes: every state but
// `completed` (a 409 there). A state this client does not know gets no
// form (fail closed), as it gets no action buttons.
function settingsOffered(state) {
  return ["pending", "running", "validating", "paused", "blocked", "failed"].includes(state);
}

function escapeHtml(value) {
  return String(value)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}

function isNum(v) {
  return typeof v === "number" && Number.isFinite(v);
}

// 12345 -> "12,345" (the same in every locale, so tests can read it).
function fmtCount(n) {
  if (!isNum(n)) return "unknown";
  return Math.round(n).toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

// A duration in the largest two units that matter: "21 s", "3 min 5 s",
// "2 h 4 min", "3 d 2 h".
function fmtDuration(ms) {
  let s = Math.max(0, Math.round(ms / 1000));
  if (s < 90) return `${s} s`;
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d > 0) return h > 0 ? `${d} d ${h} h` : `${d} d`;
  if (h > 0) return m > 0 ? `${h} h ${m} min` : `${h} h`;
  return s > 0 ? `${m} min ${s} s` : `${m} min`;
}

// "in 21 s" for a time ahead, "3 s ago" for one behind, "now" within
// half a second either way.
function fmtRelative(deltaMs) {
  if (Math.abs(deltaMs) < 500) return "now";
  return deltaMs > 0 ? `in ${fmtDuration(deltaMs)}` : `${fmtDuration(-deltaMs)} ago`;
}

// PostgreSQL's clock now, estimated from the read (`observed_at`, the
// server's time when it answered) plus the time this page has waited since
// (`elapsedMs`, measured locally). Lease and retry times are judged by the
// server's clock, so a browser whose clock is off still shows them right.
function serverNow(observedAt, elapsedMs) {
  const at = Date.parse(observedAt);
  return Number.isFinite(at) ? at + Math.max(0, elapsedMs || 0) : NaN;
}

// Milliseconds from the server's clock now to a server timestamp (negative
// when it is past), or null when either side is missing.
function deltaTo(iso, observedAt, elapsedMs) {
  if (!iso) return null;
  const t = Date.parse(iso);
  const now = serverNow(observedAt, elapsedMs);
  if (!Number.isFinite(t) || !Number.isFinite(now)) return null;
  return t - now;
}

// A server timestamp relative to the server's clock now: "in 21 s",
// "3 s ago", or null when either side is missing.
function relativeTo(iso, observedAt, elapsedMs) {
  const d = deltaTo(iso, observedAt, elapsedMs);
  return d === null ? null : fmtRelative(d);
}

// "2026-12-01 10:15:03 UTC" from an RFC 3339 timestamp.
function fmtTime(iso) {
  if (!iso) return "—";
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) return String(iso);
  return t.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z").replace("Z", " UTC");
}

// A timestamp for a reader who knows the day: "10:15:03 UTC" on the day
// of `today` (an ISO time), the full date otherwise.
function fmtClock(iso, today) {
  const full = fmtTime(iso);
  const day = (t) => (t ? String(new Date(t).toISOString()).slice(0, 10) : "");
  try {
    return today && day(iso) === day(today) ? full.slice(11) : full;
  } catch (e) {
    return full;
  }
}

// Progress as numbers: a percentage, or null when the API says the total
// is unknown (ADM-3: never 0% for unknown).
function progressInfo(progress) {
  const p = progress || {};
  const done = isNum(p.rows_done) ? p.rows_done : null;
  const total = isNum(p.total_rows) ? p.total_rows : null;
  if (!isNum(p.fraction)) return { pct: null, done, total };
  return { pct: Math.max(0, Math.min(1, p.fraction)) * 100, done, total };
}

// Progress cell: a bar with a percentage, or "unknown" when the API says
// null.
function progressCell(progress, label) {
  const info = progressInfo(progress);
  const name = label ? ` aria-label="progress of ${escapeHtml(label)}"` : "";
  if (info.pct === null) {
    return `<span class="progress"><span class="bar unknown-bar" aria-hidden="true"></span>` +
      ` <span class="pct unknown">unknown</span></span>`;
  }
  const pct = info.pct.toFixed(1);
  return `<span class="progress"><span class="bar" role="progressbar" aria-valuemin="0" aria-valuemax="100" aria-valuenow="${pct}"${name}>` +
    `<span style="width:${pct}%"></span></span> <span class="pct">${pct}%</span></span>`;
}

// "1,200 of 5,000" or "1,200 of unknown".
function rowsText(progress) {
  const info = progressInfo(progress);
  const done = info.done === null ? "unknown" : fmtCount(info.done);
  return `${done} of ${info.total === null ? "unknown" : fmtCount(info.total)}`;
}

// The sample of keys that hold a blocked backfill back (RT-4), as one
// line; null when the server reported none.
function blockingKeysText(view) {
  const keys = view && Array.isArray(view.blocking_keys) ? view.blocking_keys : [];
  if (!keys.length) return null;
  return `${keys.map((k) => keyText(k, "?")).join(", ")} (a sample: fix these rows, then retry)`;
}

// The server's rows/s for a backfill (OBS-5): derived from the progress
// samples the claim holders record, so the list, the detail, `ctl` and
// the demo show one number; null while unknown or not running.
function serverRate(view) {
  const r = view && view.progress ? view.progress.rows_per_second : null;
  return isNum(r) ? r : null;
}

// Step lines through bucketed rates (`null` = unknown), `w` by `h`
// pixels, scaled to `top`: one path per run of known buckets, so an
// unknown bucket breaks the line instead of being drawn as zero.
function ratePaths(rates, w, h, top) {
  const n = Array.isArray(rates) ? rates.length : 0;
  const max = top > 0 ? top : 1;
  const paths = [];
  let d = "";
  for (let i = 0; i < n; i++) {
    const r = rates[i];
    if (!isNum(r)) {
      if (d) paths.push(d);
      d = "";
      continue;
    }
    const x0 = ((i * w) / n).toFixed(1);
    const x1 = (((i + 1) * w) / n).toFixed(1);
    const y = (h - (Math.max(0, r) / max) * h).toFixed(1);
    d += d ? ` V${y} H${x1}` : `M${x0} ${y} H${x1}`;
  }
  if (d) paths.push(d);
  return paths;
}

// The peak of bucketed rates, or null when none is known.
function ratePeak(rates) {
  const known = (Array.isArray(rates) ? rates : []).filter(isNum);
  return known.length ? Math.max(...known) : null;
}

// The last minute of a running backfill as a sparkline; a dash when no
// bucket has a rate.
function sparklineSvg(view) {
  const rates = view && view.progress ? view.progress.sparkline : null;
  const top = ratePeak(rates);
  if (view.state !== "running") return '<span class="muted" title="not running">—</span>';
  if (top === null) return '<span class="muted">measuring…</span>';
  const label = `rows/s over the last minute, peak ${rateText(top)}`;
  return `<svg class="spark" width="80" height="20" viewBox="0 -1 80 22" role="img" aria-label="${escapeHtml(label)}"><title>${escapeHtml(label)}</title>` +
    ratePaths(rates, 80, 20, top).map((d) => `<path d="${d}" fill="none" stroke="currentColor" stroke-width="1.5"/>`).join("") + "</svg>";
}

// One chart of bucketed `rates` over [start, end] (ms), with the run's
// throttled and paused `intervals` shaded, each naming why on hover.
function chartSvg(rates, start, end, intervals, top, size, label) {
  const [w, h] = size;
  const span = Math.max(1, end - start);
  const x = (t) => Math.min(w, Math.max(0, ((t - start) / span) * w));
  const shades = (intervals || []).map((iv) => {
    const from = Date.parse(iv.from);
    const to = iv.to ? Date.parse(iv.to) : end;
    if (!Number.isFinite(from) || to < start || from > end) return "";
    const why = `${iv.kind}${iv.part !== null && iv.part !== undefined ? ` (partition ${iv.part})` : ""}${iv.detail ? `: ${iv.detail}` : ""}` +
      ` from ${fmtTime(iv.from)}${iv.to ? ` to ${fmtTime(iv.to)}` : ", still"}`;
    const x0 = x(from);
    return `<rect class="shade shade-${escapeHtml(iv.kind)}" x="${x0.toFixed(1)}" y="0" width="${Math.max(1, x(to) - x0).toFixed(1)}" height="${h}"><title>${escapeHtml(why)}</title></rect>`;
  }).join("");
  const lines = ratePaths(rates, w, h - 2, top).map((d) => `<path class="rate-line" d="${d}" transform="translate(0 1)"/>`).join("");
  return `<svg class="chart" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" role="img" aria-label="${escapeHtml(label)}"><title>${escapeHtml(label)}</title>` +
    `<rect class="chart-bg" x="0" y="0" width="${w}" height="${h}"/>${shades}${lines}</svg>`;
}

// The run chart card (OBS-5): rows/s over the recorded run, throttled and
// paused spans shaded, and the partitions side by side on one scale. No
// chart while no rate was recorded: unknown is not drawn as zero.
function runChartHtml(chart) {
  const total = chart && Array.isArray(chart.total) ? chart.total : [];
  const top = ratePeak(total);
  const parts = chart && Array.isArray(chart.partitions) ? chart.partitions : [];
  const partTop = Math.max(0, ...parts.map((p) => ratePeak(p.rates) || 0));
  if (top === null) {
    return '<p class="muted" id="run-chart-empty">No rate recorded yet: a rate needs two progress samples of a live claim.</p>';
  }
  const start = Date.parse(chart.from);
  const end = start + total.length * chart.bucket_seconds * 1000;
  const intervals = chart.intervals || [];
  const whole = chartSvg(total, start, end, intervals, top, [560, 120],
    `rows/s from ${fmtTime(chart.from)}, peak ${rateText(top)}`);
  const legend = `<p class="chart-axis"><span>${escapeHtml(fmtClock(chart.from, chart.observed_at))}</span>` +
    `<span>peak ${escapeHtml(rateText(top))}</span><span>${escapeHtml(fmtClock(new Date(end).toISOString(), chart.observed_at))}</span></p>` +
    (intervals.length ? `<p class="muted chart-key"><span class="key key-throttled"></span> throttled <span class="key key-paused"></span> paused (hover for why)</p>` : "");
  const small = parts.map((p) => `<figure class="part-chart" data-part="${escapeHtml(p.part)}"><figcaption>partition ${escapeHtml(p.part)}</figcaption>` +
    chartSvg(p.rates, start, end, intervals.filter((iv) => iv.part === null || iv.part === undefined || iv.part === p.part), partTop, [170, 48],
      `partition ${p.part}: rows/s, peak ${rateText(ratePeak(p.rates))}`) + "</figure>").join("");
  return `<div id="run-chart">${whole}${legend}${small ? `<div class="part-charts">${small}</div>` : ""}</div>`;
}

// Rows/s and ETA for one backfill. Only a running backfill moves: in any
// other state both are "not applicable" (neither zero nor unknown). Stale
// data has no current rate. Returns `{rate, eta}` texts.
function rateEta(view, rate, stale) {
  if (!view || view.state !== "running") return { rate: "—", eta: "—", applicable: false };
  if (stale) return { rate: "stale", eta: "stale", applicable: true };
  if (!isNum(rate)) return { rate: "measuring…", eta: "measuring…", applicable: true };
  const text = rateText(rate);
  const info = progressInfo(view.progress);
  if (info.total === null) return { rate: text, eta: "unknown (total unknown)", applicable: true };
  if (rate <= 0) return { rate: text, eta: "unknown (no progress)", applicable: true };
  const left = Math.max(0, info.total - (info.done || 0));
  return { rate: text, eta: fmtDuration((left / rate) * 1000), applicable: true };
}

// The lease in words, judged by the server's clock: "lease expires in
// 21 s", "lease expired 3 s ago".
function leaseText(owner, observedAt, elapsedMs) {
  const d = deltaTo(owner && owner.until, observedAt, elapsedMs);
  if (d === null) return "lease expiry unknown";
  return d > 0 ? `lease expires ${fmtRelative(d)}` : `lease expired ${fmtRelative(d)}`;
}

// The claim in words: "held by w1, lease expires in 21 s".
function ownerText(owner, observedAt, elapsedMs) {
  if (!owner || !owner.disposition) return "unknown";
  if (owner.disposition === "none") return "unclaimed";
  const worker = owner.worker || "unknown worker";
  const lease = leaseText(owner, observedAt, elapsedMs);
  if (owner.disposition === "held") return `held by ${worker}, ${lease}`;
  if (owner.disposition === "expired") return `${worker}'s ${lease}; another worker may take over`;
  return `${owner.disposition}: ${worker}`;
}

// Compact owner for the list: the worker, and its lease below.
function ownerCell(owner, observedAt, elapsedMs) {
  if (!owner || !owner.disposition) return '<span class="unknown">unknown</span>';
  if (owner.disposition === "none") return '<span class="muted">—</span>';
  const worker = owner.worker || "unknown worker";
  const lease = owner.disposition === "held" || owner.disposition === "expired" ?
    leaseText(owner, observedAt, elapsedMs) : owner.disposition;
  return `${escapeHtml(worker)}<div class="sub">${escapeHtml(lease)}</div>`;
}

// Attempts and the next try: "1 failed attempt, next try in 5 s".
function retryText(view, elapsedMs) {
  const attempts = isNum(view.attempts) ? view.attempts : null;
  const parts = [attempts === null ? "attempts unknown" : `${attempts} failed attempt${attempts === 1 ? "" : "s"}`];
  if (view.next_attempt_at) {
    const d = deltaTo(view.next_attempt_at, view.observed_at, elapsedMs);
    parts.push(d !== null && d > 0 ? `next try ${fmtRelative(d)}` : "next try due now");
  }
  return parts.join(", ");
}

// The unit of a health signal's value (the server's `Signal::unit`):
// lock waiters are a plain count, the application's check has no value.
const SIGNAL_UNITS = { replication_lag_bytes: "B", replication_lag: "s", wal_rate: "B/s", transaction_age: "s" };

// A signal's value or threshold with its unit. Seconds keep a decimal, so
// that "1.1 s past 1.0 s" never reads as "1 past 1".
function signalAmount(signal, v) {
  if (v === null || v === undefined) return "unknown";
  if (typeof v !== "number") return String(v);
  const unit = SIGNAL_UNITS[signal];
  // A latency budget guards readings around a millisecond (THR-6).
  if (signal === "latency") return `${(v * 1000).toFixed(2)} ms`;
  if (unit === "s") return `${v < 100 ? v.toFixed(1) : fmtCount(Math.round(v))} s`;
  return unit ? `${fmtCount(v)} ${unit}` : fmtCount(v);
}

// The throttle the runner reports (THR-2), or null when the view carries
// none. An unreadable signal value is unknown, never zero.
function throttleInfo(view, elapsedMs) {
  const t = view && view.throttle;
  if (!t || typeof t !== "object") return null;
  const show = (v) => signalAmount(t.signal, v);
  const signal = t.signal ? String(t.signal) : "unknown signal";
  const since = t.since ? relativeTo(t.since, view.observed_at, elapsedMs) : null;
  // Neither a value nor a threshold: a signal with no number (the
  // application's check), not one that could not be read.
  const numeric = !(t.value == null && t.threshold == null);
  const value = numeric ? show(t.value) : "not applicable";
  const threshold = numeric ? show(t.threshold) : "not applicable";
  const sinceText = since ? ` since ${since}` : "";
  return {
    signal,
    value,
    threshold,
    since,
    // The server's own words, which carry what numbers cannot (the
    // application check's reason, the tables waited on).
    condition: t.text ? String(t.text) : null,
    // The marker: signal, value and threshold at a glance. A signal with
    // neither (the application's check) is named alone.
    short: numeric ? `${signal} ${value} past ${threshold}` : signal,
    text: numeric ? `throttled by ${signal}: ${value} past ${threshold}${sinceText}` : `throttled by ${signal}${sinceText}`,
  };
}

// Live settings as label/value pairs: the batch size in force (`batch_size`
// on the view, unknown until a batch recorded one), then each setting an
// operator set, in the server's order; a name this client does not know is
// shown too, never dropped. Settings not set are not listed: their
// defaults apply, which one row says.
function settingsRows(view) {
  const rows = [];
  if (!view) return rows;
  const show = (v) => {
    if (v === null || v === undefined) return "default";
    if (typeof v === "number") return fmtCount(v);
    if (typeof v === "object") return JSON.stringify(v);
    return String(v);
  };
  if (view.batch_size !== undefined) {
    rows.push(["batch size in force", view.batch_size === null ? "unknown (no batch yet)" : show(view.batch_size)]);
  }
  const set = view.settings;
  if (set && typeof set === "object") {
    const known = SETTINGS.filter((f) => f.name in set).map((f) => [f.label, show(set[f.name])]);
    const other = Object.keys(set).filter((k) => !SETTINGS.some((f) => f.name === k))
      .map((k) => [k.replace(/_/g, " "), show(set[k])]);
    rows.push(...known, ...other);
    if (!known.length && !other.length) rows.push(["set by an operator", "none: the defaults apply"]);
  }
  return rows;
}

// A setting's accepted range in words: "1 to 100,000".
function rangeText(field) {
  return `${fmtCount(field.min)} to ${fmtCount(field.max)}`;
}

// The hint beside a setting's input: its range and its value now (set, or
// "default").
function settingHint(field, view) {
  const set = view && view.settings && typeof view.settings === "object" ? view.settings[field.name] : undefined;
  const now = set === undefined || set === null ? "default" : isNum(set) ? fmtCount(set) : String(set);
  return `${rangeText(field)}; now ${now}`;
}

// The settings form's fields, built once: a labelled text input per
// setting (text, not number, so that what the operator typed reaches the
// server, which names what is wrong with it, instead of an input that
// quietly reads as empty) and a checkbox that resets it to its default.
// `prefix` keeps the element IDs of two forms on one page apart (the
// backfill page's has none, the fleet page's `fleet-`).
function settingsFormHtml(prefix = "") {
  const p = escapeHtml(prefix);
  const groups = [["batch", "Batch size and pace"], ["health", "Health limits for this backfill"], ["latency", "Latency budget of the application beside it"]];
  return groups.map(([group, legend]) => `<fieldset class="settings-group"><legend>${legend}</legend>` +
    SETTINGS.filter((f) => f.group === group).map((f) =>
      `<div class="setting"><label for="${p}set-${f.name}">${escapeHtml(f.label)}</label>` +
      `<input id="${p}set-${f.name}" name="${f.name}" type="text" inputmode="numeric" autocomplete="off" spellcheck="false" size="14" aria-describedby="${p}hint-${f.name}">` +
      `<label class="reset"><input type="checkbox" id="${p}clear-${f.name}" name="clear-${f.name}" aria-label="reset ${escapeHtml(f.label)} to its default"> reset</label>` +
      `<span class="hint" id="${p}hint-${f.name}">${escapeHtml(rangeText(f))}</span></div>`).join("") +
    "</fieldset>").join("");
}

// The change a filled form asks for, as the JSON merge patch the server
// takes: an empty field is left out (unchanged), a ticked reset is `null`
// (the default applies again), and a whole number is sent as a number.
// Anything that is not a whole number of 0 or more is not a setting's
// value at all: it is listed in `invalid` (by name) and not sent, so the
// form can say so before asking to confirm. Ranges and rules between
// settings stay the server's to judge. `entries`: [{name, text, clear}].
function settingsChange(entries) {
  const change = {};
  const invalid = [];
  for (const e of entries || []) {
    if (e.clear) {
      change[e.name] = null;
      continue;
    }
    const text = String(e.text == null ? "" : e.text).trim();
    if (text === "") continue;
    // "100,000" and "100_000" are how people write large numbers; a
    // separator anywhere else makes it not a number.
    const digits = /^\d{1,3}([,_]\d{3})+$/.test(text) ? text.replace(/[,_]/g, "") : text;
    if (/^\d+$/.test(digits) && Number.isSafeInteger(Number(digits))) change[e.name] = Number(digits);
    else invalid.push(e.name);
  }
  return { change, count: Object.keys(change).length, invalid };
}

// Why a filled settings form is not sent, in words with the field to
// point at, or null when it may be: a value that is not a whole number,
// or nothing to change. `checked`: what `settingsChange` answered.
function settingsFormRefusal(checked) {
  if (checked.invalid.length) {
    const name = checked.invalid[0];
    return { field: name, text: `settings: ${settingLabel(name)} must be a whole number, 0 or more. Nothing was sent.` };
  }
  if (!checked.count) return { field: null, text: "Nothing to change: type a value or tick reset. Nothing was sent." };
  return null;
}

// JSON with object keys sorted: one change is one request however its
// fields were ordered, so its retry carries the same key.
function canonicalJson(value) {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value && typeof value === "object") {
    return `{${Object.keys(value).sort().map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

// A setting's name in words, for a name this client does not know too.
function settingLabel(name) {
  const f = SETTINGS.find((s) => s.name === name);
  return f ? f.label : String(name).replace(/_/g, " ");
}

// What a change does, for the confirm dialog: "batch size: default → 7;
// pause between batches (ms): 250 → default". `settings`: the view's now.
function describeSettingsChange(change, settings) {
  const now = settings && typeof settings === "object" ? settings : {};
  const show = (v) => (v === null || v === undefined ? "default" : isNum(v) ? fmtCount(v) : JSON.stringify(v));
  const names = Object.keys(change || {});
  const order = (n) => { const i = SETTINGS.findIndex((f) => f.name === n); return i < 0 ? SETTINGS.length : i; };
  names.sort((a, b) => order(a) - order(b));
  return names.map((n) => `${settingLabel(n)}: ${show(now[n])} → ${show(change[n])}`).join("; ");
}

// What a change sets, without the values it replaces (each database of a
// fleet has its own): "batch size to 7; pause between batches (ms) to
// its default".
function describeSettingsTarget(change) {
  const names = Object.keys(change || {});
  const order = (n) => { const i = SETTINGS.findIndex((f) => f.name === n); return i < 0 ? SETTINGS.length : i; };
  names.sort((a, b) => order(a) - order(b));
  const show = (v) => (v === null || v === undefined ? "its default" : isNum(v) ? fmtCount(v) : JSON.stringify(v));
  return names.map((n) => `${settingLabel(n)} to ${show(change[n])}`).join("; ");
}

// The server's answer to a settings change, in words, with the setting it
// names (422 `field`) so the form can point at it. Never an invented
// outcome: no answer is `unknown`, to be retried with the same key.
// `prior`: the settings the page showed before the change.
function describeSettingsResult(status, body, prior) {
  if (status === 200 && body && body.settings && typeof body.settings === "object") {
    const before = prior && typeof prior === "object" ? prior : {};
    const names = [...new Set([...Object.keys(before), ...Object.keys(body.settings)])];
    const changed = names.filter((n) => before[n] !== body.settings[n]);
    const change = Object.fromEntries(changed.map((n) => [n, body.settings[n] === undefined ? null : body.settings[n]]));
    return { outcome: "applied", field: null, text: `settings: applied (${changed.length ? describeSettingsChange(change, before) : "no change"})` };
  }
  if (status === 409 && body && body.current) {
    return { outcome: "conflict", field: null, text: `settings: conflict — ${body.message || "refused"} (state ${body.current.state})` };
  }
  if (status === null || status === undefined) {
    return { outcome: "unknown", field: null, text: "settings: no answer (network error); the outcome is unknown until a refresh shows the server's settings. Send the same change again to retry it with the same key." };
  }
  if (isNum(status) && status < 500 && body && body.error) {
    return { outcome: "rejected", field: body.field || null, text: `settings: HTTP ${status} ${body.error}: ${body.message || ""}` };
  }
  return { outcome: "unknown", field: null, text: `settings: HTTP ${status}, no readable answer (the outcome is unknown; refresh to see the server's settings)` };
}

// Markers beside the state: gating readiness, the repairs it waits for
// (FLT-4), throttled, failed attempts.
function markers(view, elapsedMs) {
  const out = [];
  if (view.readiness && view.readiness.gating) {
    out.push('<span class="marker gating" title="Required for readiness: /readyz stays closed until it completes">gating</span>');
  }
  if (Array.isArray(view.waiting_for) && view.waiting_for.length) {
    const ids = view.waiting_for.join(", ");
    out.push(`<span class="marker throttled" title="${escapeHtml(`Starts only after ${ids} completed (FLT-4): no process claims it until then`)}">waiting for: ${escapeHtml(ids)}</span>`);
  }
  const t = throttleInfo(view, elapsedMs);
  if (t) out.push(`<span class="marker throttled" title="${escapeHtml(t.condition ? `${t.text} (${t.condition})` : t.text)}">throttled: ${escapeHtml(t.short)}</span>`);
  if (isNum(view.attempts) && view.attempts > 0 && ["running", "blocked", "failed"].includes(view.state)) {
    out.push(`<span class="marker attempts" title="${escapeHtml(retryText(view, elapsedMs))}">${escapeHtml(retryText(view, elapsedMs))}</span>`);
  }
  return out.join(" ");
}

// Whether the recorded diagnostic still describes the backfill: it is
// blocked or failed, or it is retrying after a failed attempt. Otherwise
// an operator's retry (or the retries themselves) got past it, and it is
// history: shown as resolved, never as the current state.
function diagnosticCurrent(view) {
  if (!view || !view.last_error) return false;
  if (["blocked", "failed"].includes(view.state)) return true;
  return isNum(view.attempts) ? view.attempts > 0 : Boolean(view.next_attempt_at);
}

// The last execution diagnostic, bounded and redacted by the server.
function diagnosticCell(view) {
  if (!view.last_error) return "";
  return `<span class="diag">${escapeHtml(view.last_error.kind || "error")}: ${escapeHtml(view.last_error.message)}</span>`;
}

// Why the automatic start of a pending backfill failed (EMB-8): the row
// stays pending, and the server's diagnostic ends with what to do.
function startFailedCell(view) {
  if (view.state !== "pending" || !view.start_failed) return "";
  return `<span class="diag">start failed (${escapeHtml(view.start_failed.kind || "error")}): ${escapeHtml(view.start_failed.message)}</span>`;
}

function validationCell(view) {
  if (!view.validation) return '<span class="unknown">none yet</span>';
  const detail = view.validation.detail ? ` — ${escapeHtml(view.validation.detail)}` : "";
  return `<span class="outcome outcome-${escapeHtml(view.validation.outcome)}">${escapeHtml(view.validation.outcome)}</span>${detail}`;
}

function readinessCell(view) {
  if (!view.readiness) return '<span class="unknown">unknown</span>';
  if (view.readiness.gating) return "gating";
  return view.readiness.required ? "required, satisfied" : "not required";
}

function stateBadge(state) {
  return `<span class="badge state-${escapeHtml(state)}">${escapeHtml(state)}</span>`;
}

// The buttons of a view's actions; `detail`: the detail page, whose view
// names the backfill's undo, so only there is undo offered.
function actionButtons(view, busy, detail) {
  return actionsFor(view.state).concat(detail && undoOffered(view) ? ["undo"] : [])
    .map((a) => `<button type="button" class="act act-${a}" data-action="${a}" data-id="${escapeHtml(view.id)}"` +
      ` data-key="act:${a}:${escapeHtml(view.id)}" aria-label="${a} ${escapeHtml(view.id)}"${busy ? " disabled" : ""}>${a}</button>`)
    .join("");
}

// The journal and undo of a view (UNDO-2, UNDO-4) as definition rows, or
// none for a backfill without a journal. The undo's progress is what its
// batches worked through of the journal: restored plus conflicts.
function journalRows(view) {
  const rows = [];
  if (view.undo_of) rows.push(["undo of", { href: detailHref(view.undo_of), text: view.undo_of }]);
  if (view.undo) rows.push(["undo", { href: detailHref(view.undo.id), text: `${view.undo.id} (${view.undo.state})` }]);
  else if (view.journaled && !view.undo_of) rows.push(["undo", "none started"]);
  const j = view.journal;
  if (j) {
    rows.push(["journal", `${fmtCount(j.rows)} rows, ${fmtCount(j.bytes)} bytes`]);
    if (view.undo || view.undo_of) {
      const done = j.restored + j.conflicts;
      const pct = j.rows > 0 ? ` (${Math.floor((done / j.rows) * 100)}%)` : "";
      rows.push(["undone", `${fmtCount(done)} of ${fmtCount(j.rows)}${pct}`]);
      rows.push(["restored", fmtCount(j.restored)]);
      rows.push(["conflicts", fmtCount(j.conflicts)]);
      if (j.conflict_keys && j.conflict_keys.length) {
        rows.push(["conflict keys", j.conflict_keys.map((k) => JSON.stringify(k)).join(" ")]);
      }
    }
  }
  return rows;
}

// The states a dry run runs in (DRY-1): the batches it runs are the
// ones the real run would run next, and nothing else runs them meanwhile.
const DRY_RUNNABLE = ["pending", "paused"];
// The most batches one dry run runs (the server's limit, DRY-1).
const DRY_RUN_MAX_BATCHES = 20;

// A value of a dry run's report, or "unknown" when the server could not
// measure it (null): unknowns stay unknown, never 0.
function dryKnown(value, fmt) {
  return value === null || value === undefined ? "unknown" : (fmt ? fmt(value) : String(value));
}

// A dry run's report (DRY-1..3) as HTML: each batch, the error of a batch
// that failed, the forecast for the remaining range and the sample of
// changed rows or why there is none. Every value is escaped.
function dryRunReportHtml(r) {
  const key = (v) => (v === null || v === undefined ? "—" : escapeHtml(JSON.stringify(v)));
  const from = r.from === null || r.from === undefined ? "the start" : key(r.from);
  const bound = `${key(r.bound)}${r.bound_captured ? " (as start would capture it now)" : ""}`;
  const head = `<p>Dry run of <strong>${escapeHtml(r.backfill_id)}</strong> (${escapeHtml(r.state)}): ` +
    `${r.batches.length} of ${r.batches_asked} batches ran from ${from} to ${bound}, then everything was <strong>rolled back</strong>.</p>`;
  const rows = r.batches.map((b) => `<tr><td>${b.batch}</td><td>${b.partition === null || b.partition === undefined ? "—" : b.partition}</td><td>${fmtCount(b.batch_size)}</td>` +
    `<td>${fmtCount(b.keys)}</td><td>${dryKnown(b.rows_changed, fmtCount)}</td><td>${b.duration_ms.toFixed(1)} ms</td>` +
    `<td>${dryKnown(b.wal_bytes, fmtCount)}</td><td>${dryKnown(b.lock_wait_ms)}</td><td>${key(b.to)}</td></tr>`).join("");
  const table = `<table class="dry-batches"><thead><tr><th>batch</th><th>partition</th><th>size</th><th>keys</th>` +
    `<th>rows changed</th><th>time</th><th>WAL bytes</th><th>lock wait</th><th>checkpoint</th></tr></thead><tbody>${rows}</tbody></table>`;
  const error = r.error ? `<p class="notice">Batch ${r.error.batch} failed (${escapeHtml(r.error.kind)}): ${escapeHtml(r.error.message)}. Nothing was changed.</p>` : "";
  const f = r.forecast;
  const forecast = `<p>Forecast for the remaining range: ${f.rows === null ? "unknown rows" : `${fmtCount(f.rows)} rows (${escapeHtml(f.rows_basis)})`}, ` +
    `${dryKnown(f.batches, fmtCount)} batches, ${dryKnown(f.duration_ms, fmtDuration)}, ${dryKnown(f.wal_bytes, fmtCount)} bytes of WAL.</p>`;
  let sample = "";
  if (r.sample) {
    sample = `<table class="dry-sample"><caption>Changed rows (sample)</caption><thead><tr><th>key</th><th>before</th><th>after</th></tr></thead><tbody>` +
      r.sample.map((row) => `<tr><td>${key(row.key)}</td><td>${key(row.before)}</td><td>${key(row.after)}</td></tr>`).join("") + "</tbody></table>";
  } else if (r.sample_note) {
    sample = `<p class="muted">Sample: ${escapeHtml(r.sample_note)}</p>`;
  }
  return head + table + error + forecast + sample;
}

function detailHref(id) {
  return `#/backfills/${encodeURIComponent(id)}`;
}

// The link to one backfill's detail page in one database of a fleet: the
// same page, read through that database's own admin API on the fleet's
// listener.
function fleetDetailHref(database, id) {
  return `#/databases/${encodeURIComponent(database)}/backfills/${encodeURIComponent(id)}`;
}

// Where the admin API of the page's backfill is: on a fleet's listener a
// database's own API is under `/databases/NAME` (FLT-6); elsewhere, the
// root.
function apiBase(route, listener) {
  return listener === "fleet" && route && route.page === "detail" && route.database ? `/databases/${encodeURIComponent(route.database)}` : "";
}

// One row of the list. `ctx`: {stale, elapsedMs, busy, cannotOperate}.
function row(view, ctx) {
  const c = ctx || {};
  const re = rateEta(view, serverRate(view), c.stale);
  const diag = ["blocked", "failed"].includes(view.state) ? diagnosticCell(view) : startFailedCell(view);
  const na = (text) => (text === "—" ? '<span class="muted" title="not running">—</span>' : escapeHtml(text));
  const batch = view.batch_size !== undefined && view.batch_size !== null ? `<div class="sub">batch ${escapeHtml(fmtCount(view.batch_size))}</div>` : "";
  return `<tr data-id="${escapeHtml(view.id)}" class="row-${escapeHtml(view.state)}">` +
    `<th scope="row"><a href="${detailHref(view.id)}" data-key="link:${escapeHtml(view.id)}">${escapeHtml(view.id)}</a>` +
    (view.description ? `<div class="sub">${escapeHtml(view.description)}</div>` : "") + `</th>` +
    `<td class="col-state">${stateBadge(view.state)}${diag ? `<div>${diag}</div>` : ""}</td>` +
    `<td class="col-progress">${progressCell(view.progress, view.id)}${batch}</td>` +
    `<td class="col-rows num">${escapeHtml(rowsText(view.progress))}</td>` +
    `<td class="col-rate num">${na(re.rate)}</td>` +
    `<td class="col-trend">${c.stale ? '<span class="muted">stale</span>' : sparklineSvg(view)}</td>` +
    `<td class="col-eta num">${na(re.eta)}</td>` +
    `<td class="col-markers">${markers(view, c.elapsedMs)}</td>` +
    `<td class="col-owner">${ownerCell(view.owner, view.observed_at, c.elapsedMs)}</td>` +
    `<td class="col-actions">${c.cannotOperate ? "" : actionButtons(view, c.busy)}</td></tr>`;
}

// The markers the filter offers besides the states: a throttled runner,
// a backfill that gates readiness.
const MARKERS = {
  throttled: (v) => Boolean(v.throttle),
  gating: (v) => Boolean(v.readiness && v.readiness.gating),
};

// Counts per state and marker for the filter.
function stateCounts(views) {
  const counts = { all: 0 };
  for (const s of STATES) counts[s] = 0;
  for (const m of Object.keys(MARKERS)) counts[m] = 0;
  for (const v of views || []) {
    counts.all += 1;
    counts[v.state] = (counts[v.state] || 0) + 1;
    for (const [m, has] of Object.entries(MARKERS)) if (has(v)) counts[m] += 1;
  }
  return counts;
}

// The views a filter value (`all`, a state or a marker) and a search text
// leave.
function filterViews(views, state, text) {
  const all = views || [];
  const byState = !state || state === "all" ? all :
    MARKERS[state] ? all.filter(MARKERS[state]) : all.filter((v) => v.state === state);
  // IDs are lower case: a search typed in any case finds them.
  const needle = String(text || "").trim().toLowerCase();
  if (!needle) return byState;
  return byState.filter((v) => String(v.id).includes(needle) ||
    (typeof v.description === "string" && v.description.toLowerCase().includes(needle)));
}

// The bulk actions: pause and resume every backfill the list shows (a
// filter or a search narrowed it) that the action applies to, one
// audited request each.
const BULK_ACTIONS = ["pause", "resume"];

// The IDs among `views` that `action` applies to in their state.
function bulkTargets(views, action) {
  return (views || []).filter((v) => actionsFor(v.state).includes(action)).map((v) => v.id);
}

// A bulk action's outcome in one line: how many were applied, changed
// nothing, were refused (409 and the rest, by ID) or have no answer yet.
// `results`: [{id, outcome}] with `resultOutcome`'s words.
function bulkSummary(action, results) {
  const by = (o) => results.filter((r) => r.outcome === o).map((r) => r.id);
  const parts = [`${by("applied").length} applied`];
  const unchanged = by("converged");
  if (unchanged.length) parts.push(`${unchanged.length} unchanged`);
  const refused = results.filter((r) => !["applied", "converged", "unknown"].includes(r.outcome)).map((r) => r.id);
  if (refused.length) parts.push(`${refused.length} refused (${refused.join(", ")})`);
  const unknown = by("unknown");
  if (unknown.length) parts.push(`${unknown.length} without an answer (${unknown.join(", ")}): refresh to see their state`);
  return `${action} ${results.length} backfill${results.length === 1 ? "" : "s"}: ${parts.join(", ")}`;
}

// The status banner: `cls` for its colour, `label` and `text` (announced
// when they change) and `age` (updated every second, not announced).
// Stale data keeps its age; nothing is shown as current when a read failed.
function statusLine(s, nowMs) {
  const now = isNum(nowMs) ? nowMs : Date.now();
  const age = (at) => `last refreshed ${fmtDuration(now - at)} ago`;
  if (s.unauthorized) {
    return { cls: "error", label: "Not authorized", age: "", text: `${s.unauthorized}: enter a valid operator token. Nothing is shown.` };
  }
  if (!s.token) return { cls: "idle", label: "No token", age: "", text: "Enter an operator token to read the backfills." };
  if (s.lastError && isNum(s.lastOkAt)) {
    return { cls: "stale", label: "Stale", age: age(s.lastOkAt), text: `Refresh failed (${s.lastError}); showing the last data read, not the current state.` };
  }
  if (s.lastError) return { cls: "error", label: "No data", age: "", text: `Refresh failed (${s.lastError}); nothing is shown until a read succeeds.` };
  if (isNum(s.lastOkAt)) {
    if (s.paused) return { cls: "idle", label: "Not refreshing", age: age(s.lastOkAt), text: "Automatic refresh is off." };
    return { cls: "fresh", label: "Live", age: age(s.lastOkAt), text: "Read from PostgreSQL through the admin API." };
  }
  return { cls: "idle", label: "Loading", age: "", text: "Reading from the admin API…" };
}

// A fresh idempotency key for one intended action.
function newKey() {
  if (typeof crypto !== "undefined" && crypto.randomUUID) return `ui-${crypto.randomUUID()}`;
  return `ui-${Date.now()}-${Math.random().toString(16).slice(2)}`;
}

// The key for an intended action: the unanswered one's key again when the
// operator retries the same action on the same backfill after a network
// failure or a 5xx, so a lost response never duplicates a transition
// (ADM-4); a fresh one otherwise. `request` tells apart requests of one
// action with different bodies (a settings change, as `canonicalJson`):
// the server refuses a key reused for another body.
function keyFor(pending, action, id, mint, request) {
  if (pending && pending.unanswered && pending.action === action && pending.id === id &&
    pending.request === request) return pending.key;
  return (mint || newKey)();
}

// Whether an answer settles the action: a readable 2xx or 4xx is the
// server's verdict; a network failure (status null) or a 5xx leaves it
// open, to be retried with the same key.
function settles(status) {
  return isNum(status) && status < 500;
}

// The server's answer in words, never an invented outcome.
function describeResult(action, status, body) {
  if (action === "undo" && status === 200 && body && body.outcome && body.backfill) {
    return `undo: ${body.outcome} — ${body.backfill.id} is ${body.backfill.state}`;
  }
  if (status === 409 && body && body.current && body.error && body.error !== "conflict") {
    return `${action}: ${body.error} — ${body.message || ""}`;
  }
  if (status === 200 && body && body.outcome && body.backfill) {
    return `${action}: ${body.outcome} (${body.prior_state} → ${body.backfill.state})`;
  }
  if (status === 200 && body && body.outcome) {
    const why = body.detail || body.reason || "";
    return `${action}: ${body.outcome}${why ? ` — ${why}` : ""} (state ${body.state})`;
  }
  if (status === 409 && body && body.current) {
    return `${action}: conflict — current state is ${body.current.state}`;
  }
  if (status === null || status === undefined) {
    return `${action}: no answer (network error); the outcome is unknown until a refresh shows the server state`;
  }
  if (body && body.error) return `${action}: HTTP ${status} ${body.error}: ${body.message || ""}`;
  return `${action}: HTTP ${status}, no readable answer (the outcome is unknown; refresh to see the server state)`;
}

// The typed outcome of an answer, for its badge: `applied`, `converged`,
// `success`, `failure`, `current-state`, `conflict`, or `unknown`.
function resultOutcome(status, body) {
  if (status === 200 && body && body.outcome) return String(body.outcome);
  if (status === 409) return "conflict";
  if (isNum(status) && status < 500 && body && body.error) return "rejected";
  return "unknown";
}

// Audit text as it may be shown: control characters and invisible or
// bidirectional formatting characters written as \u{XXXX}, so a stored
// line break, escape or override cannot forge or reorder what the
// operator reads. The server escapes them too; this holds for any server.
const UNSAFE_TEXT = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]/g;
function auditText(value) {
  return String(value).replace(UNSAFE_TEXT,
    (c) => `\\u{${c.charCodeAt(0).toString(16).padStart(4, "0")}}`);
}

// One audit record as table cells: who, what, state change, outcome.
function auditCells(entry) {
  const who = auditText(entry.actor ? entry.actor : `(${entry.authority || "unknown authority"})`);
  const change = entry.prior_state || entry.resulting_state ?
    `${entry.prior_state || "?"} → ${entry.resulting_state || "?"}` : "—";
  const count = isNum(entry.request_count) && entry.request_count > 1 ? ` ×${entry.request_count}` : "";
  return {
    at: entry.at,
    who,
    action: auditText(entry.action),
    change,
    outcome: `${auditText(entry.outcome)}${count}`,
    detail: [entry.detail, entry.reason ? `reason: ${entry.reason}` : null].filter((t) => t).map(auditText).join("; "),
    correlation: auditText(entry.correlation || ""),
    generation: isNum(entry.generation) ? String(entry.generation) : "",
  };
}

// The Backfill-Reason header of an action, when the operator gave a
// reason: percent-encoded, since a header carries ASCII only.
function reasonHeaders(reason) {
  const text = (reason || "").trim();
  return text ? { "Backfill-Reason": encodeURIComponent(text) } : {};
}

// One timeline entry (OBS-4) as table cells: who recorded it (the
// runtime with the change, or an operator's action), what happened, the
// state it moved or was in, the worker or operator, and the detail.
function timelineCells(entry) {
  const what = auditText(entry.kind) + (isNum(entry.partition) ? ` p${entry.partition}` : "");
  const state = entry.from_state && entry.state ? `${entry.from_state} → ${entry.state}` : (entry.state || "—");
  const detail = [entry.outcome, entry.detail].filter((t) => t).map(auditText).join(": ") +
    (entry.reason ? `; reason: ${auditText(entry.reason)}` : "");
  return { at: entry.at, by: auditText(entry.source), what, state, who: entry.actor ? auditText(entry.actor) : "—", detail };
}

// What the Validation card says when the audit trail holds no explicit
// validation: the latest outcome above it is then the run's own, checked
// when its last batch reached the bound, and the card says so rather
// than seem to contradict itself.
function noExplicitValidation(view) {
  return view && view.validation && view.validation.outcome
    ? "No explicit validation: the latest outcome is the run's own, checked when it reached its bound."
    : "No explicit validation in the audit trail.";
}

// Explicit validations from the audit trail, newest first.
function validationHistory(entries) {
  return (entries || []).filter((e) => e.action === "validate");
}

// Key values (bound, checkpoint) in their JSON types.
function keyText(value, absent) {
  if (value === null || value === undefined) return absent;
  return typeof value === "string" ? value : JSON.stringify(value);
}

// The partitions of a partitioned backfill (PAR-5), one row each, as the
// server reports them: range `(lower, upper]`, checkpoint, owner and
// progress. Empty for a backfill without partitions; a value the server
// did not send shows as unknown, never as zero.
function partitionRows(view, elapsedMs, stale) {
  const parts = view && Array.isArray(view.partitions) ? view.partitions : [];
  return parts.map((p) => {
    // A partition moves only while its backfill runs and it has not ended;
    // otherwise its rate is not applicable (neither zero nor unknown).
    const moving = view.state === "running" && !p.ended;
    const rate = !moving ? "—" : stale ? "stale" : rateText(isNum(p.rows_per_second) ? p.rows_per_second : null);
    return {
      part: isNum(p.part) ? String(p.part) : "unknown",
      range: `(${keyText(p.lower, "start")}, ${keyText(p.upper, "unknown")}]`,
      checkpoint: p.ended ? "ended" : keyText(p.checkpoint, "none: at its start"),
      owner: ownerText(p.owner, view.observed_at, elapsedMs),
      rows: fmtCount(p.rows_done),
      batches: fmtCount(p.batches_done),
      rate,
      throttle: p.throttle && p.throttle.text ? p.throttle.text : "",
      diagnostic: p.last_error || "",
    };
  });
}

// "1,234 rows/s", or "measuring…" until the server has a rate.
function rateText(rate) {
  if (!isNum(rate)) return "measuring…";
  return `${rate >= 100 ? fmtCount(rate) : rate.toFixed(1)} rows/s`;
}

// The route from `location.hash`: the list (optionally filtered by state)
// or one backfill's detail page.
function parseRoute(hash) {
  const h = String(hash || "").replace(/^#/, "");
  const dec = (part) => {
    try { return decodeURIComponent(part); } catch (e) { return part; }
  };
  const f = h.match(/^\/databases\/([^/?]+)\/backfills\/([^?]+)/);
  if (f) return { page: "detail", id: dec(f[2]), database: dec(f[1]) };
  const m = h.match(/^\/backfills\/([^?]+)/);
  if (m) {
    let id;
    try { id = decodeURIComponent(m[1]); } catch (e) { id = m[1]; }
    return { page: "detail", id };
  }
  const q = h.match(/[?&]state=([a-z-]+)/);
  const state = q && (STATES.includes(q[1]) || q[1] in MARKERS || q[1] === "all") ? q[1] : "all";
  // The fleet page's database filter, kept in the address so a reload or
  // a shared link shows the same database.
  const d = h.match(/[?&]database=([^&]+)/);
  return d ? { page: "list", state, only: dec(d[1]) } : { page: "list", state };
}

// The address of the fleet page filtered to `database` ("all": none).
function fleetFilterHref(database) {
  return database === "all" ? "#/" : `#/?database=${encodeURIComponent(database)}`;
}

// Every backfill, following `next_after` page by page (ADM-2): a long list
// is never cut at one page. `get(path)` returns a fetch Response. Resolves
// to { items } or, on the first page that fails, { status } (401/403 and
// other HTTP errors) with nothing partial: a half list is not shown.
async function fetchAll(get) {
  const items = [];
  let after = null;
  for (;;) {
    const path = "/admin/backfills?limit=500" + (after === null ? "" : "&after=" + encodeURIComponent(after));
    const res = await get(path);
    if (!res.ok) return { status: res.status };
    const page = await res.json();
    items.push(...page.items);
    // A cursor that repeats would loop. (Whether it moves forward is the
    // server's collation's to say, not this string comparison's.)
    if (page.next_after == null || page.next_after === after) return { items };
    after = page.next_after;
  }
}

// The fleet page (FLT-6): the same client on a fleet's listener shows
// every database of the fleet, the fleet's totals and the backfills of
// all databases, and acts on one database or on all of them through the
// fleet's routes, which send one audited request to each database.

// Which listener the page was served by, from the status of an
// unauthenticated `GET /admin/fleet`: only a fleet's listener has that
// route (it answers 401 without a token, or 200 where the databases trust
// their network), and a single database's admin listener answers 404 for
// every path under /admin it does not serve. Any other answer (none, a
// 5xx, a 429) decides nothing, and the page asks again at its next
// refresh.
function listenerKind(status) {
  if (status === 404) return "single";
  if (status === 200 || status === 401 || status === 403) return "fleet";
  return null;
}

// Whether a database's backfills were read: it is available and its list
// answered. Otherwise the server's counts are zeros that count nothing,
// and every figure of the database is unknown.
function fleetKnown(db) {
  return Boolean(db) && db.availability === "available" && !db.error;
}

// Whether any backfill of a database moves (running or validating), so
// that a rate and an ETA apply to it.
function fleetMoving(db) {
  const c = (db && db.backfills) || {};
  return (isNum(c.running) ? c.running : 0) + (isNum(c.validating) ? c.validating : 0) > 0;
}

// A database's backfills by state in words, in the filter's order:
// "1 running, 2 paused"; "unknown" when they could not be read.
function fleetCountsText(db) {
  if (!fleetKnown(db)) return "unknown";
  const c = db.backfills || {};
  const parts = STATES.filter((s) => isNum(c[s]) && c[s] > 0).map((s) => `${fmtCount(c[s])} ${s}`);
  return parts.length ? parts.join(", ") : "no backfills";
}

// A database's rows/s and the ETA of its slowest moving backfill, as
// texts: unknown when its backfills could not be read, "—" (not
// applicable) when none moves, stale when the last refresh failed, and
// the server's null as "measuring…" (rate) or "unknown" (ETA), never 0.
function fleetRateEta(db, stale) {
  if (!fleetKnown(db)) return { rate: "unknown", eta: "unknown" };
  if (!fleetMoving(db)) return { rate: "—", eta: "—" };
  if (stale) return { rate: "stale", eta: "stale" };
  return {
    rate: rateText(isNum(db.rows_per_second) ? db.rows_per_second : null),
    eta: isNum(db.eta_seconds) ? fmtDuration(db.eta_seconds * 1000) : "unknown",
  };
}

// A database's availability in words: its state, the server's bounded
// reason when it is unavailable (never its URL: the server leaves that
// out), why its backfills could not be read when it answered the probe
// but not the read, and its readiness.
function fleetAvailability(db) {
  const d = db || {};
  const state = d.availability === "available" || d.availability === "unavailable" ? d.availability : "unknown";
  const reason = state === "unavailable" ? (d.reason ? String(d.reason) : "no reason given") :
    d.error ? `its backfills could not be read: ${d.error}` : null;
  const ready = d.ready === true ? "ready" : d.ready === false ? "not ready" : "unknown";
  return { state, reason, ready };
}

// One row of the databases table. `ctx`: {stale}.
function fleetDatabaseRow(db, ctx) {
  const c = ctx || {};
  const name = String(db.name);
  const a = fleetAvailability(db);
  const re = fleetRateEta(db, c.stale);
  const show = (t) => (t === "—" ? '<span class="muted" title="no backfill moves">—</span>' :
    t === "unknown" ? '<span class="unknown">unknown</span>' : escapeHtml(t));
  const counts = fleetCountsText(db);
  return `<tr data-id="db:${escapeHtml(name)}" data-database="${escapeHtml(name)}" class="db-${a.state}">` +
    `<th scope="row" class="col-name">${escapeHtml(name)}</th>` +
    `<td class="col-availability"><span class="badge avail-${a.state}">${a.state}</span>` +
    (a.reason ? `<div class="diag col-reason">${escapeHtml(a.reason)}</div>` : "") +
    (db.since ? `<div class="sub">since ${escapeHtml(fmtTime(db.since))}</div>` : "") + "</td>" +
    `<td class="col-ready">${a.ready === "unknown" ? '<span class="unknown">unknown</span>' : a.ready}</td>` +
    `<td class="col-counts">${counts === "unknown" ? '<span class="unknown">unknown</span>' : escapeHtml(counts)}</td>` +
    `<td class="col-rate num">${show(re.rate)}</td>` +
    `<td class="col-eta num">${show(re.eta)}</td></tr>`;
}

// The fleet's totals as label/text pairs, each with a key for the page.
// Databases whose backfills could not be read are counted apart, so a
// total over the others never reads as the whole fleet's.
function fleetTotalsRows(overview, stale) {
  const t = (overview && overview.totals) || {};
  const dbs = (overview && Array.isArray(overview.databases)) ? overview.databases : [];
  const unknown = dbs.filter((d) => !fleetKnown(d)).length;
  const count = (n) => (isNum(n) ? fmtCount(n) : "unknown");
  const without = unknown ? ` (${unknown} database${unknown === 1 ? "" : "s"} unknown)` : "";
  const moving = dbs.some((d) => fleetKnown(d) && fleetMoving(d));
  let rate;
  let eta;
  if (stale) {
    rate = "stale";
    eta = "stale";
  } else if (!moving) {
    rate = unknown ? "unknown" : "—";
    eta = unknown ? "unknown" : "—";
  } else {
    rate = isNum(t.rows_per_second) && t.rows_per_second > 0 ? rateText(t.rows_per_second) : "measuring…";
    eta = isNum(t.eta_seconds) ? fmtDuration(t.eta_seconds * 1000) : "unknown";
  }
  return [
    ["databases", "Databases", `${count(t.databases)}: ${count(t.available)} available, ${count(t.unavailable)} unavailable`],
    ["completed", "Completed", `${count(t.completed)} database${t.completed === 1 ? "" : "s"}${without}`],
    ["running", "Running", `${count(t.running)} database${t.running === 1 ? "" : "s"}${without}`],
    ["blocked", "Blocked or failed", `${count(t.blocked)} database${t.blocked === 1 ? "" : "s"}${without}`],
    ["rate", "Rows/s", `${rate}${moving && !stale ? without : ""}`],
    ["eta", "ETA of the slowest", `${eta}${moving && !stale ? without : ""}`],
  ];
}

// The database names the filter offers: the overview's, then any other
// the list names, each once.
function fleetDatabaseNames(overview, list) {
  const names = [];
  const add = (n) => { if (typeof n === "string" && !names.includes(n)) names.push(n); };
  for (const d of (overview && overview.databases) || []) add(d.name);
  for (const i of (list && list.items) || []) add(i.database);
  for (const u of (list && list.unavailable) || []) add(u.name);
  return names;
}

// The backfills and the unread databases one database filter leaves
// (`all` or a database's name).
function fleetFilter(list, database) {
  const items = (list && Array.isArray(list.items)) ? list.items : [];
  const unavailable = (list && Array.isArray(list.unavailable)) ? list.unavailable : [];
  if (!database || database === "all") return { items, unavailable };
  return {
    items: items.filter((i) => i.database === database),
    unavailable: unavailable.filter((u) => u.name === database),
  };
}

// The buttons of a fleet action: on `database` alone, or on every
// database when it is null.
function fleetActionButtons(actions, id, database, busy) {
  const where = database ? `in ${database}` : "in every database";
  const scope = database || "*";
  return actions.map((a) => `<button type="button" class="act act-${a}" data-fleet-action="${a}" data-id="${escapeHtml(id)}"` +
    ` data-database="${escapeHtml(database || "")}" data-key="fleet:${a}:${escapeHtml(scope)}:${escapeHtml(id)}"` +
    ` aria-label="${a} ${escapeHtml(id)} ${escapeHtml(where)}"${busy ? " disabled" : ""}>${a}</button>`).join("");
}

// One backfill of one database. `ctx`: {stale, elapsedMs, busy, cannotOperate}.
function fleetRow(item, ctx) {
  const c = ctx || {};
  const db = String(item.database);
  const re = rateEta(item, serverRate(item), c.stale);
  const diag = ["blocked", "failed"].includes(item.state) ? diagnosticCell(item) : startFailedCell(item);
  const na = (text) => (text === "—" ? '<span class="muted" title="not running">—</span>' : escapeHtml(text));
  return `<tr data-id="${escapeHtml(db)}/${escapeHtml(item.id)}" data-database="${escapeHtml(db)}" data-backfill="${escapeHtml(item.id)}" class="row-${escapeHtml(item.state)}">` +
    `<td class="col-database">${escapeHtml(db)}</td>` +
    `<th scope="row" class="col-id"><a href="${fleetDetailHref(db, item.id)}" data-key="link:${escapeHtml(db)}/${escapeHtml(item.id)}">${escapeHtml(item.id)}</a>` +
    (item.description ? `<div class="sub">${escapeHtml(item.description)}</div>` : "") + "</th>" +
    `<td class="col-state">${stateBadge(item.state)}${diag ? `<div>${diag}</div>` : ""}</td>` +
    `<td class="col-progress">${progressCell(item.progress, `${item.id} in ${db}`)}</td>` +
    `<td class="col-rows num">${escapeHtml(rowsText(item.progress))}</td>` +
    `<td class="col-rate num">${na(re.rate)}</td>` +
    `<td class="col-eta num">${na(re.eta)}</td>` +
    `<td class="col-markers">${markers(item, c.elapsedMs)}</td>` +
    `<td class="col-actions">${c.cannotOperate ? "" : fleetActionButtons(actionsFor(item.state), item.id, db, c.busy)}</td></tr>`;
}

// A database whose backfills are not listed, in the backfills table: it
// is reported with why, never left out.
function fleetUnavailableRow(status) {
  const name = String(status.name);
  const reason = status.reason ? String(status.reason) : "no reason given";
  return `<tr data-id="${escapeHtml(name)}/" data-database="${escapeHtml(name)}" class="row-unavailable">` +
    `<td class="col-database">${escapeHtml(name)}</td>` +
    `<td colspan="8" class="col-unavailable"><span class="badge avail-unavailable">unavailable</span> ` +
    `<span class="diag">${escapeHtml(reason)}</span> <span class="muted">Its backfills could not be listed.</span></td></tr>`;
}

// The actions offered on every database at once, per backfill ID: those
// its state allows in at least one database that lists it. The request
// still goes to every database: one where the state does not allow it
// answers for itself (a 409), and one that is down answers 503; the page
// shows each answer.
function fleetIdActions(items) {
  const byId = new Map();
  for (const i of items || []) {
    const entry = byId.get(i.id) || { id: i.id, actions: new Set(), databases: [] };
    for (const a of actionsFor(i.state)) entry.actions.add(a);
    if (!entry.databases.includes(i.database)) entry.databases.push(i.database);
    byId.set(i.id, entry);
  }
  return [...byId.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
    .map((e) => ({ id: e.id, actions: ACTIONS.filter((a) => e.actions.has(a)), databases: e.databases }));
}

// Each database's answer to a fleet action, in words, in the server's
// order: every database acted on has one, and a database that is down is
// `unavailable` (its 503), never missing.
function fleetAnswers(action, body) {
  const results = body && Array.isArray(body.results) ? body.results : [];
  return results.map((r) => {
    const status = isNum(r.status) ? r.status : null;
    const b = r.body && typeof r.body === "object" ? r.body : null;
    const outcome = status === 503 && b && b.error === "unavailable" ? "unavailable" : resultOutcome(status, b);
    return { database: String(r.database), status, outcome, text: describeResult(action, status, b) };
  });
}

// Each database's answer to a fleet settings change (THR-4 through
// FLT-6), in words, in the server's order: an applied change names the
// values now in force in that database for the settings it changed, a
// refusal the database's own reason, and a database that is down is
// `unavailable` (its 503), never missing. `change`: the merge patch sent.
function fleetSettingsAnswers(change, body) {
  const results = body && Array.isArray(body.results) ? body.results : [];
  const names = Object.keys(change || {});
  return results.map((r) => {
    const status = isNum(r.status) ? r.status : null;
    const b = r.body && typeof r.body === "object" ? r.body : null;
    if (status === 503 && b && b.error === "unavailable") {
      return { database: String(r.database), status, outcome: "unavailable", text: `settings: HTTP 503 unavailable: ${b.message || ""}` };
    }
    if (status === 200 && b && b.settings && typeof b.settings === "object") {
      const now = Object.fromEntries(names.map((n) => [n, b.settings[n] === undefined ? null : b.settings[n]]));
      const show = (v) => (v === null ? "default" : isNum(v) ? fmtCount(v) : JSON.stringify(v));
      const said = names.map((n) => `${settingLabel(n)} now ${show(now[n])}`).join("; ");
      return { database: String(r.database), status, outcome: "applied", text: `settings: applied (${said || "no change"})` };
    }
    const d = describeSettingsResult(status, b, null);
    return { database: String(r.database), status, outcome: d.outcome, text: d.text };
  });
}

// One database's answer as a table row.
function fleetAnswerRow(a) {
  return `<tr data-id="answer:${escapeHtml(a.database)}" data-database="${escapeHtml(a.database)}">` +
    `<th scope="row" class="col-database">${escapeHtml(a.database)}</th>` +
    `<td class="col-status num">${a.status === null ? "no answer" : escapeHtml(String(a.status))}</td>` +
    `<td class="col-outcome"><span class="outcome outcome-${escapeHtml(a.outcome)}">${escapeHtml(a.outcome)}</span></td>` +
    `<td class="col-text">${escapeHtml(a.text)}</td></tr>`;
}

// Names for a sentence: the first ten, then how many more.
function listNames(names) {
  const ns = names || [];
  return ns.length > 10 ? `${ns.slice(0, 10).join(", ")} and ${ns.length - 10} more` : ns.join(", ");
}

// A fleet action's answers in one line: how many databases gave each
// outcome, naming them, e.g. "pause events.fix in every database: 2
// applied (d0, d1), 1 unavailable (down)".
function fleetSummary(action, id, where, answers) {
  const groups = [];
  for (const a of answers || []) {
    let g = groups.find((x) => x.outcome === a.outcome);
    if (!g) groups.push((g = { outcome: a.outcome, names: [] }));
    g.names.push(a.database);
  }
  const word = (o) => (o === "converged" ? "unchanged" : o);
  const parts = groups.map((g) => `${g.names.length} ${word(g.outcome)} (${listNames(g.names)})`);
  return `${action} ${id} ${where}: ${parts.length ? parts.join(", ") : "no database answered"}`;
}

// The badge of a fleet action: `applied` when every database applied it
// or already was there, the one outcome when all agree, `partial`
// otherwise.
function fleetOutcome(answers) {
  const all = answers || [];
  if (!all.length) return "unknown";
  if (all.every((a) => a.outcome === "applied" || a.outcome === "converged")) return "applied";
  return all.every((a) => a.outcome === all[0].outcome) ? all[0].outcome : "partial";
}

// Whether a fleet action is settled: the fleet answered it (`settles`)
// and no database's answer leaves its outcome open (a 5xx, such as a
// database that is down). While one does, the page offers the same
// request again with the same key: each database that answered replays
// its answer (ADM-4), and one that is back gets the request.
function fleetSettles(status, body) {
  if (!settles(status)) return false;
  if (status !== 200) return true;
  const results = body && Array.isArray(body.results) ? body.results : null;
  return Boolean(results) && results.every((r) => settles(r.status));
}

if (typeof module !== "undefined") {
  module.exports = {
    ACTIONS, STATES, CONSEQUENCES, SETTINGS, actionsFor, settingsOffered, escapeHtml, fmtCount, fmtDuration, fmtRelative, deltaTo, relativeTo,
    fmtTime, fmtClock, progressInfo, progressCell, rowsText, blockingKeysText, serverRate, ratePaths, ratePeak, sparklineSvg, runChartHtml, rateEta, leaseText, ownerText, ownerCell,
    retryText, signalAmount, throttleInfo, settingsRows, rangeText, settingHint, settingsFormHtml, settingsChange, settingsFormRefusal, canonicalJson,
    settingLabel, describeSettingsChange, describeSettingsTarget, describeSettingsResult, markers, diagnosticCurrent, diagnosticCell, startFailedCell, validationCell, readinessCell, row,
    stateCounts, filterViews, BULK_ACTIONS, bulkTargets, bulkSummary, statusLine, newKey, keyFor, settles, describeResult, resultOutcome, UNDOABLE, undoOffered,
    journalRows, actionButtons, DRY_RUNNABLE, DRY_RUN_MAX_BATCHES, dryKnown, dryRunReportHtml,
    auditCells, auditText, timelineCells, reasonHeaders, noExplicitValidation, validationHistory, keyText, partitionRows, parseRoute, fetchAll,
    listenerKind, apiBase, fleetDetailHref, fleetFilterHref, fleetKnown, fleetMoving, fleetCountsText, fleetRateEta, fleetAvailability, fleetDatabaseRow, fleetTotalsRows, fleetDatabaseNames,
    fleetFilter, fleetActionButtons, fleetRow, fleetUnavailableRow, fleetIdActions, fleetAnswers, fleetSettingsAnswers, fleetAnswerRow, listNames, fleetSummary, fleetOutcome, fleetSettles,
  };
}

if (typeof document !== "undefined") {
  const $ = (id) => document.getElementById(id);
  const ui = {
    token: sessionStorage.getItem("backfill-token") || "",
    route: parseRoute(location.hash),
    views: null, // the list's last good read
    detail: null, // the detail page's last good read
    audit: null, // its audit records
    timeline: null, // its timeline entries as the API answers them, newest first
    chart: null, // its run chart (OBS-5)
    detailMissing: null, // the ID a 404 named
    lastOkAt: null, // local ms of the last good read of what the page shows
    viewsAt: null, // local ms when `views` was read
    detailAt: null, // local ms when `detail` was read
    lastError: null,
    unauthorized: null,
    paused: false,
    changingToken: false,
    focusAfterRead: false, // move focus to the page's heading after a sign-in
    interval: 2000,
    busy: false,
    pending: null, // {action, id, key, unanswered, request?, change?}
    result: null, // {text, outcome, retry}
    // This token may read but not operate: `GET /admin/me` says so, or
    // the server answered 403 to an operate request (a token whose
    // capabilities changed meanwhile). Action buttons and the settings
    // and dry-run forms are withdrawn until another token is entered.
    cannotOperate: false,
    search: "", // the list's search text: IDs and descriptions containing it
    capsFor: null, // the token whose capabilities were last read
    settingsFor: null, // the ID the settings form was last filled for
    settingsMsg: null, // {id, outcome, text, field}: the last answer beside the form
    dryRun: null, // {id, sending, stamp, html}: the last dry run's report on the detail page
    // The listener the page was served by (`listenerKind`): null until
    // `GET /admin/fleet` answered, then "single" or "fleet" for the page's
    // life (a listener does not change its kind).
    listener: null,
    fleet: null, // the fleet page's last good read: {overview, list}
    fleetAt: null, // local ms when `fleet` was read
    fleetDatabase: parseRoute(location.hash).only || "all", // the fleet page's database filter
    fleetAnswers: null, // {what, answers}: each database's answer to the last fleet action
    fleetSettingsId: null, // the backfill the fleet's settings form changes
    fleetSettingsMsg: null, // {outcome, text}: the form's own word (nothing sent, or sending)
  };
  let timer = null;
  let seq = 0;

  const authHeaders = () => ({ Authorization: `Bearer ${ui.token}` });
  // Time since a read, to carry the server's clock forward from it.
  const since = (at) => (at === null ? 0 : Date.now() - at);
  const stale = () => Boolean(ui.lastError) && ui.lastOkAt !== null;

  // Re-rendering replaces elements; keep the keyboard focus on the element
  // with the same `data-key`, so a refresh never throws focus away.
  const keepFocus = (fn) => {
    const key = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.key : null;
    fn();
    if (key) {
      const again = document.querySelector(`[data-key="${CSS.escape(key)}"]`);
      if (again && again !== document.activeElement) again.focus();
    }
  };

  const setText = (el, text) => {
    if (el.textContent !== text) el.textContent = text;
  };

  // Bring `from` (live) to look like `to` (fresh) in place: text and
  // attributes change, elements stay. A refresh every second (relative
  // times) then never detaches the button under the pointer or the
  // keyboard focus. An element with another `data-id` or `data-key` is a
  // different thing and is replaced.
  const morph = (from, to) => {
    const differs = from.nodeType !== to.nodeType || from.nodeName !== to.nodeName ||
      (from.nodeType === 1 && (from.dataset.id !== to.dataset.id || from.dataset.key !== to.dataset.key));
    if (differs) {
      from.replaceWith(to);
      return;
    }
    if (from.nodeType !== 1) {
      if (from.nodeValue !== to.nodeValue) from.nodeValue = to.nodeValue;
      return;
    }
    for (const a of [...from.attributes]) if (!to.hasAttribute(a.name)) from.removeAttribute(a.name);
    for (const a of [...to.attributes]) if (from.getAttribute(a.name) !== a.value) from.setAttribute(a.name, a.value);
    if (from.nodeName === "BUTTON") from.disabled = to.disabled;
    morphChildren(from, to);
  };
  const morphChildren = (from, to) => {
    const have = [...from.childNodes];
    const want = [...to.childNodes];
    want.forEach((node, i) => (i < have.length ? morph(have[i], node) : from.appendChild(node)));
    for (let i = want.length; i < have.length; i++) have[i].remove();
  };
  const setHtml = (el, html) => {
    const t = document.createElement(el.nodeName === "TBODY" ? "tbody" : "div");
    t.innerHTML = html;
    keepFocus(() => morphChildren(el, t));
  };

  const renderStatus = () => {
    const line = statusLine(ui, Date.now());
    const banner = $("banner");
    banner.className = `banner ${line.cls}`;
    setText($("status-label"), line.label);
    setText($("status-age"), line.age ? `${line.age}. ` : "");
    setText($("status-text"), line.text);
    document.body.classList.toggle("is-stale", stale());
    const showAuth = !ui.token || Boolean(ui.unauthorized) || ui.changingToken;
    $("auth").hidden = !showAuth;
    $("session").hidden = showAuth;
  };

  const renderList = () => {
    const views = ui.views;
    $("list-page").hidden = ui.route.page !== "list" || ui.listener === "fleet";
    if ($("list-page").hidden) return;
    const counts = stateCounts(views || []);
    const filter = $("filter");
    const opts = ["all", ...STATES].map((s) =>
      `<option value="${s}">${s}${views ? ` (${counts[s] || 0})` : ""}</option>`).join("") +
      Object.keys(MARKERS).map((m) =>
        `<option value="${m}">marker: ${m}${views ? ` (${counts[m] || 0})` : ""}</option>`).join("");
    setHtml(filter, opts);
    if (filter.value !== ui.route.state) filter.value = ui.route.state;
    const tbody = $("rows");
    const empty = $("list-empty");
    if (!views) {
      setHtml(tbody, "");
      empty.hidden = true;
      setText($("summary"), "");
      return;
    }
    const shown = filterViews(views, ui.route.state, ui.search);
    const searching = ui.search.trim() !== "";
    const gating = views.filter((v) => v.readiness && v.readiness.gating).length;
    const throttled = views.filter((v) => v.throttle).length;
    setText($("summary"), `${views.length} backfill${views.length === 1 ? "" : "s"}` +
      `${searching ? `, ${shown.length} shown` : ui.route.state === "all" ? "" : `, ${shown.length} ${ui.route.state}`}` +
      `${gating ? `, ${gating} gating readiness` : ""}${throttled ? `, ${throttled} throttled` : ""}`);
    setHtml(tbody, shown.map((v) => row(v, { stale: stale(), elapsedMs: since(ui.viewsAt), busy: ui.busy, cannotOperate: ui.cannotOperate })).join(""));
    // Bulk actions only over a list narrowed on purpose, never over all.
    const narrowed = searching || ui.route.state !== "all";
    for (const action of BULK_ACTIONS) {
      const button = $(`bulk-${action}`);
      const n = bulkTargets(shown, action).length;
      button.hidden = !narrowed || ui.cannotOperate || n === 0;
      button.disabled = ui.busy;
      setText(button, `${action[0].toUpperCase()}${action.slice(1)} shown (${n})…`);
    }
    empty.hidden = shown.length > 0;
    setText(empty, views.length === 0 ? "No backfills are registered." :
      searching ? `No ${ui.route.state === "all" ? "" : `${ui.route.state} `}backfill matches "${ui.search.trim()}".` :
      `No backfill is ${ui.route.state}.`);
  };

  const dl = (pairs) => `<dl>${pairs.map(([k, v]) => `<dt>${escapeHtml(k)}</dt><dd>${v}</dd>`).join("")}</dl>`;

  // The settings form of the detail page. Its inputs are built once and
  // never re-rendered (what the operator types stays while the page
  // refreshes); each render only updates hints, what is offered and the
  // last answer. Offered where the state still takes a change and the
  // token has not been refused operate; a message about this backfill
  // stays visible even when the form itself is withdrawn.
  // The dry-run panel of the detail page (DRY-1): offered on a pending or
  // paused backfill; its last report stays shown for the backfill it was
  // taken of, until another is taken or the page shows another backfill.
  const renderDryRun = () => {
    const id = ui.route.page === "detail" ? ui.route.id : null;
    const v = ui.detail && ui.detail.id === id ? ui.detail : null;
    const shown = ui.dryRun && ui.dryRun.id === id ? ui.dryRun : null;
    const offered = Boolean(v) && DRY_RUNNABLE.includes(v.state) && !ui.cannotOperate;
    $("dry-run-panel").hidden = !offered && !shown;
    $("dry-run-form").hidden = !offered;
    $("dry-run-submit").disabled = ui.busy || Boolean(shown && shown.sending);
    const out = $("dry-run-report");
    out.hidden = !shown;
    if (shown && out.dataset.for !== shown.stamp) {
      out.dataset.for = shown.stamp;
      out.innerHTML = shown.html;
    }
  };

  // POST the dry run; it changes nothing, so it is sent once, without an
  // idempotency key and without a confirm dialog.
  const sendDryRun = async (id, batches) => {
    ui.dryRun = { id, sending: true, stamp: `sending-${Date.now()}`, html: `<p role="status">Dry run of ${escapeHtml(id)}: running ${batches} batches…</p>` };
    render();
    let html;
    try {
      const res = await fetch(api(`/admin/backfills/${encodeURIComponent(id)}/dry-run?batches=${batches}`), {
        method: "POST",
        headers: authHeaders(),
      });
      let body = null;
      try { body = await res.json(); } catch (e) { body = null; }
      if (res.status === 200 && body) html = dryRunReportHtml(body);
      else {
        if (res.status === 403) ui.cannotOperate = true;
        const why = body && body.message ? body.message : `HTTP ${res.status}`;
        html = `<p class="notice">Dry run refused: ${escapeHtml(why)}</p>`;
      }
    } catch (e) {
      html = `<p class="notice">Dry run: no answer from the server (nothing was changed by it in any case).</p>`;
    }
    ui.dryRun = { id, sending: false, stamp: `done-${Date.now()}`, html };
    render();
  };

  const renderSettings = () => {
    const panel = $("settings-panel");
    const id = ui.route.page === "detail" ? ui.route.id : null;
    const v = ui.detail && ui.detail.id === id ? ui.detail : null;
    if (ui.settingsFor !== id) {
      ui.settingsFor = id;
      $("settings-form").reset();
      for (const f of SETTINGS) $(`set-${f.name}`).disabled = false;
      if (ui.settingsMsg && ui.settingsMsg.id !== id) ui.settingsMsg = null;
    }
    const msg = ui.settingsMsg && ui.settingsMsg.id === id ? ui.settingsMsg : null;
    const offered = Boolean(v) && settingsOffered(v.state) && !ui.cannotOperate;
    panel.hidden = !v || (!offered && !msg && !ui.cannotOperate);
    $("settings-fieldsets").hidden = !offered;
    $("settings-submit").hidden = !offered;
    $("settings-submit").disabled = ui.busy;
    $("settings-refused").hidden = !ui.cannotOperate;
    const box = $("settings-message");
    box.hidden = !msg;
    box.className = msg ? `settings-message outcome-box-${msg.outcome}` : "settings-message";
    $("settings-outcome").className = msg ? `outcome outcome-${msg.outcome}` : "outcome";
    setText($("settings-outcome"), msg ? msg.outcome : "");
    setText($("settings-text"), msg ? msg.text : "");
    for (const f of SETTINGS) {
      setText($(`hint-${f.name}`), settingHint(f, v));
      const input = $(`set-${f.name}`);
      const invalid = Boolean(msg && msg.field === f.name);
      if (invalid) {
        input.setAttribute("aria-invalid", "true");
        input.setAttribute("aria-describedby", `hint-${f.name} settings-message`);
      } else if (input.hasAttribute("aria-invalid")) {
        input.removeAttribute("aria-invalid");
        input.setAttribute("aria-describedby", `hint-${f.name}`);
      }
    }
  };

  const renderDetail = () => {
    const page = $("detail-page");
    page.hidden = ui.route.page !== "detail" || onFleetPage();
    if (page.hidden) return;
    const id = ui.route.id;
    // On a fleet's listener the page is one database's backfill: the
    // title names the database, and the breadcrumb leads back to the fleet.
    const where = apiBase(ui.route, ui.listener) ? ` in ${ui.route.database}` : "";
    setText($("detail-title-id"), id + where);
    setText(document.querySelector('[data-key="crumb"]'), where ? "← Fleet" : "← All backfills");
    document.title = `${id}${where} — backfill admin`;
    const body = $("detail-body");
    const v = ui.detail;
    renderSettings();
    if (ui.detailMissing === id) {
      setHtml($("detail-state"), "");
      setHtml($("detail-markers"), "");
      setHtml($("detail-actions"), "");
      setHtml(body, `<p class="notice">No backfill has the ID ${escapeHtml(id)}.</p>`);
      return;
    }
    if (!v || v.id !== id) {
      setHtml($("detail-state"), "");
      setHtml($("detail-markers"), "");
      setHtml($("detail-actions"), "");
      setHtml(body, "");
      return;
    }
    const ms = since(ui.detailAt);
    const re = rateEta(v, serverRate(v), stale());
    setHtml($("detail-state"), stateBadge(v.state));
    setHtml($("detail-markers"), markers(v, ms));
    setHtml($("detail-actions"), ui.cannotOperate ? "" : actionButtons(v, ui.busy, true));
    const when = (iso) => {
      if (!iso) return '<span class="muted">—</span>';
      const rel = relativeTo(iso, v.observed_at, ms) || "";
      return `<time datetime="${escapeHtml(iso)}" title="${escapeHtml(fmtTime(iso))}">${escapeHtml(rel)}</time>` +
        ` <span class="muted">${escapeHtml(fmtClock(iso, v.observed_at))}</span>`;
    };
    const cards = [];
    cards.push(["Progress", `<div class="big">${progressCell(v.progress, v.id)}</div>` + dl([
      ["rows", escapeHtml(rowsText(v.progress))],
      ["batches", escapeHtml(fmtCount(v.progress && v.progress.batches_done))],
      ["rows/s", escapeHtml(re.rate)],
      ["ETA", escapeHtml(re.eta)],
    ])]);
    cards.push(["Range", dl([
      ["key type", escapeHtml(v.key_type || "unknown")],
      ["bound", escapeHtml(v.empty_source ? "empty source: nothing to repair" : keyText(v.bound, v.state === "pending" ? "not captured yet" : "unknown"))],
      ["checkpoint", escapeHtml(keyText(v.checkpoint, "none: before every key"))],
      ["generation", escapeHtml(isNum(v.generation) ? String(v.generation) : "unknown")],
    ])]);
    cards.push(["Claim and retry", dl([
      ["owner", escapeHtml(ownerText(v.owner, v.observed_at, ms))],
      ["lease until", when(v.owner && v.owner.until)],
      ["attempts", escapeHtml(retryText(v, ms))],
      ["next try", v.next_attempt_at ? when(v.next_attempt_at) : '<span class="muted">—</span>'],
    ])]);
    cards.push(["Diagnostics", startFailedCell(v) ?
      `<p class="diag diag-block" id="diagnostic">${startFailedCell(v)}</p>` + dl([["recorded", when(v.start_failed.at)]]) :
      diagnosticCurrent(v) ?
      `<p class="diag diag-block" id="diagnostic">${escapeHtml(v.last_error.kind || "error")}: ${escapeHtml(v.last_error.message)}</p>` + dl([["recorded", when(v.last_error.at)],
        ...(blockingKeysText(v) ? [["blocking keys", `<span class="mono" id="blocking-keys">${escapeHtml(blockingKeysText(v))}</span>`]] : [])]) :
      v.last_error ?
      `<p class="muted" id="diagnostic">Resolved, now ${escapeHtml(v.state)}. Last recorded: ${escapeHtml(v.last_error.kind || "error")}: ${escapeHtml(v.last_error.message)}</p>` + dl([["recorded", when(v.last_error.at)]]) :
      '<p class="muted" id="diagnostic">No diagnostic recorded.</p>']);
    // Until the audit trail is read, its absence is unknown, not "none".
    const auditRead = Array.isArray(ui.audit);
    const notRead = ui.lastError ? "The audit trail could not be read (the refresh failed)." : "Reading the audit trail…";
    const history = validationHistory(ui.audit || []);
    cards.push(["Validation", dl([
      ["latest outcome", validationCell(v)],
      ["at", when(v.validation && v.validation.at)],
    ]) + (history.length ? `<table class="mini"><caption>Explicit validations</caption><thead><tr><th scope="col">when</th><th scope="col">outcome</th><th scope="col">detail</th><th scope="col">by</th></tr></thead><tbody>` +
      history.map((e) => { const c = auditCells(e); return `<tr><td>${when(c.at)}</td><td><span class="outcome outcome-${escapeHtml(e.outcome)}">${escapeHtml(c.outcome)}</span></td><td>${escapeHtml(c.detail)}</td><td>${escapeHtml(c.who)}</td></tr>`; }).join("") +
      "</tbody></table>" : `<p class="muted">${auditRead ? noExplicitValidation(v) : notRead}</p>`)]);
    const t = throttleInfo(v, ms);
    if (t) {
      cards.push(["Throttle", dl([
        ["signal", escapeHtml(t.signal)],
        ["value", escapeHtml(t.value)],
        ["threshold", escapeHtml(t.threshold)],
        ["since", escapeHtml(t.since || "unknown")],
        ...(t.condition ? [["condition", escapeHtml(t.condition)]] : []),
      ])]);
    }
    const parts = partitionRows(v, ms, stale());
    if (parts.length) {
      cards.push([`Partitions (${parts.length})`, `<table class="mini partitions"><caption class="sr-only">Partitions, by part</caption><thead><tr>` +
        `<th scope="col">part</th><th scope="col">range</th><th scope="col">checkpoint</th><th scope="col">owner</th><th scope="col">rows</th><th scope="col">batches</th><th scope="col">rows/s</th><th scope="col">diagnostic</th></tr></thead><tbody>` +
        parts.map((p) => `<tr><td class="num">${escapeHtml(p.part)}</td><td class="mono">${escapeHtml(p.range)}</td><td class="mono">${escapeHtml(p.checkpoint)}</td>` +
          `<td>${escapeHtml(p.owner)}</td><td class="num">${escapeHtml(p.rows)}</td><td class="num">${escapeHtml(p.batches)}</td><td class="num">${escapeHtml(p.rate)}</td>` +
          `<td>${escapeHtml([p.throttle && `throttled: ${p.throttle}`, p.diagnostic].filter(Boolean).join("; "))}</td></tr>`).join("") +
        "</tbody></table>"]);
    }
    const journal = journalRows(v);
    if (journal.length) {
      cards.push(["Journal and undo", dl(journal.map(([k, val]) => [k, typeof val === "object" ?
        `<a href="${escapeHtml(val.href)}">${escapeHtml(val.text)}</a>` : escapeHtml(val)]))]);
    }
    const settings = settingsRows(v);
    if (settings.length) cards.push(["Live settings", dl(settings.map(([k, val]) => [k, escapeHtml(val)]))]);
    cards.push(["Readiness", dl([["participation", readinessCell(v)]])]);
    cards.push(["Timestamps", dl([
      ["registered", when(v.registered_at)],
      ["started", when(v.started_at)],
      ["completed", when(v.completed_at)],
      ["updated", when(v.updated_at)],
      ["read at (server)", when(v.observed_at)],
    ])]);
    const audit = ui.audit || [];
    const auditHtml = audit.length ? `<table class="audit"><caption class="sr-only">Audit trail, newest first</caption><thead><tr>` +
      `<th scope="col">when</th><th scope="col">who</th><th scope="col">action</th><th scope="col">state</th><th scope="col">outcome</th><th scope="col">generation</th><th scope="col">detail</th><th scope="col">correlation</th></tr></thead><tbody>` +
      audit.map((e) => {
        const c = auditCells(e);
        return `<tr class="audit-row"><td>${when(c.at)}</td><td>${escapeHtml(c.who)}</td><td>${escapeHtml(c.action)}</td><td>${escapeHtml(c.change)}</td>` +
          `<td><span class="outcome outcome-${escapeHtml(e.outcome)}">${escapeHtml(c.outcome)}</span></td><td class="num">${escapeHtml(c.generation)}</td><td>${escapeHtml(c.detail)}</td><td class="mono">${escapeHtml(c.correlation)}</td></tr>`;
      }).join("") + "</tbody></table>" : `<p class="muted">${auditRead ? "No audit records for this backfill." : notRead}</p>`;
    // Oldest first, as `backfill ctl history` prints it: one order on
    // every surface. The API answers newest first (its newest 100).
    const timeline = [...(ui.timeline || [])].reverse();
    const timelineHtml = timeline.length ? `<table class="timeline"><caption class="sr-only">Timeline, oldest first</caption><thead><tr>` +
      `<th scope="col">when</th><th scope="col">by</th><th scope="col">what</th><th scope="col">state</th><th scope="col">who</th><th scope="col">detail</th></tr></thead><tbody>` +
      timeline.map((e) => {
        const c = timelineCells(e);
        return `<tr class="timeline-row"><td>${when(c.at)}</td><td>${escapeHtml(c.by)}</td><td>${escapeHtml(c.what)}</td><td>${escapeHtml(c.state)}</td><td>${escapeHtml(c.who)}</td><td>${escapeHtml(c.detail)}</td></tr>`;
      }).join("") + "</tbody></table>" : `<p class="muted">${Array.isArray(ui.timeline) ? "Nothing recorded yet." : notRead.replace("audit trail", "timeline")}</p>`;
    // The run chart as the server derived it (OBS-5); until it is read,
    // its absence is unknown, not "no rate".
    const chartRead = ui.chart && ui.chart.backfill_id === v.id;
    const chartHtml = chartRead ? runChartHtml(ui.chart) :
      `<p class="muted">${ui.lastError ? "The run chart could not be read (the refresh failed)." : "Reading the run chart…"}</p>`;
    setHtml(body, (v.description ? `<p class="description">${escapeHtml(v.description)}</p>` : "") +
      `<div class="cards">${cards.map(([title, html]) => `<section class="card" aria-labelledby="card-${title.replace(/\W+/g, "-")}"><h3 id="card-${title.replace(/\W+/g, "-")}">${escapeHtml(title)}</h3>${html}</section>`).join("")}</div>` +
      `<section class="run-section" aria-labelledby="run-title" data-read="${Boolean(chartRead)}"><h3 id="run-title">Rows/s over the run</h3>${chartHtml}</section>` +
      `<section class="timeline-section" aria-labelledby="timeline-title" data-read="${Array.isArray(ui.timeline)}"><h3 id="timeline-title">Timeline</h3>${timelineHtml}</section>` +
      `<section class="audit-section" aria-labelledby="audit-title" data-read="${auditRead}"><h3 id="audit-title">Audit trail</h3>${auditHtml}</section>`);
  };

  // The fleet page: totals, one row per database, the actions on every
  // database per backfill ID, each database's answer to the last action,
  // and the backfills of the databases the filter leaves, with the
  // databases that could not be listed.
  const renderFleet = () => {
    const page = $("fleet-page");
    page.hidden = !onFleetPage();
    if (page.hidden) return;
    document.title = "fleet — backfill admin";
    const f = ui.fleet;
    const names = f ? fleetDatabaseNames(f.overview, f.list) : [];
    if (ui.fleetDatabase !== "all" && f && !names.includes(ui.fleetDatabase)) ui.fleetDatabase = "all";
    const select = $("fleet-database");
    setHtml(select, `<option value="all">all databases${f ? ` (${names.length})` : ""}</option>` +
      names.map((n) => `<option value="${escapeHtml(n)}">${escapeHtml(n)}</option>`).join(""));
    if (select.value !== ui.fleetDatabase) select.value = ui.fleetDatabase;
    const answers = ui.fleetAnswers;
    $("fleet-answers").hidden = !answers;
    setText($("fleet-answers-what"), answers ? answers.what : "");
    setHtml($("fleet-answer-rows"), answers ? answers.answers.map(fleetAnswerRow).join("") : "");
    if (!f) {
      setHtml($("fleet-totals"), "");
      setHtml($("fleet-db-rows"), "");
      setHtml($("fleet-rows"), "");
      setHtml($("fleet-id-actions"), "");
      $("fleet-all-actions").hidden = true;
      $("fleet-empty").hidden = true;
      setText($("fleet-summary"), "");
      return;
    }
    const isStale = stale();
    setHtml($("fleet-totals"), fleetTotalsRows(f.overview, isStale).map(([key, label, value]) =>
      `<div data-key="total:${key}"><dt>${escapeHtml(label)}</dt><dd data-total="${key}">${escapeHtml(value)}</dd></div>`).join(""));
    const dbs = (f.overview.databases || []).filter((d) => ui.fleetDatabase === "all" || d.name === ui.fleetDatabase);
    setHtml($("fleet-db-rows"), dbs.map((d) => fleetDatabaseRow(d, { stale: isStale })).join(""));
    const shown = fleetFilter(f.list, ui.fleetDatabase);
    const ctx = { stale: isStale, elapsedMs: since(ui.fleetAt), busy: ui.busy, cannotOperate: ui.cannotOperate };
    setHtml($("fleet-rows"), shown.items.map((i) => fleetRow(i, ctx)).join("") + shown.unavailable.map(fleetUnavailableRow).join(""));
    const all = fleetIdActions(f.list.items);
    $("fleet-all-actions").hidden = ui.cannotOperate || all.length === 0;
    setHtml($("fleet-id-actions"), ui.cannotOperate ? "" : all.map((e) =>
      `<li data-id="all:${escapeHtml(e.id)}"><span class="fleet-id">${escapeHtml(e.id)}</span>` +
      `<span class="muted">in all ${names.length} databases:</span> ${fleetActionButtons(e.actions, e.id, null, ui.busy)}</li>`).join(""));
    const ids = all.map((e) => e.id);
    if (!ids.includes(ui.fleetSettingsId)) ui.fleetSettingsId = ids.length ? ids[0] : null;
    const pick = $("fleet-settings-id");
    setHtml(pick, ids.map((id) => `<option value="${escapeHtml(id)}">${escapeHtml(id)}</option>`).join(""));
    if (ui.fleetSettingsId !== null && pick.value !== ui.fleetSettingsId) pick.value = ui.fleetSettingsId;
    setText($("fleet-settings-where"), ui.fleetDatabase === "all" ?
      `in all ${names.length} databases, one audited request to each (the filter picks one)` : `in ${ui.fleetDatabase} only (the filter picks it)`);
    const said = ui.fleetSettingsMsg;
    const box = $("fleet-settings-message");
    box.hidden = !said;
    box.className = said ? `settings-message outcome-box-${said.outcome}` : "settings-message";
    setText(box, said ? said.text : "");
    $("fleet-settings-submit").disabled = ui.busy;
    const unread = (f.list.unavailable || []).length;
    setText($("fleet-summary"), `${f.list.items.length} backfill${f.list.items.length === 1 ? "" : "s"} in ${names.length} database${names.length === 1 ? "" : "s"}` +
      `${unread ? `, ${unread} not listed` : ""}${ui.fleetDatabase === "all" ? "" : `; showing ${ui.fleetDatabase}`}`);
    const empty = $("fleet-empty");
    empty.hidden = shown.items.length + shown.unavailable.length > 0;
    setText(empty, ui.fleetDatabase === "all" ? "No database lists a backfill." : `${ui.fleetDatabase} lists no backfill.`);
  };

  const renderResult = () => {
    const box = $("result");
    const r = ui.result;
    if (!r) {
      box.hidden = true;
      return;
    }
    box.hidden = false;
    $("result-outcome").className = `outcome outcome-${r.outcome}`;
    setText($("result-outcome"), r.outcome);
    setText($("result-text"), r.text);
    $("result-retry").hidden = !r.retry;
    if (r.retry) setText($("result-retry"), `Retry ${r.retry.action} (same request)`);
  };

  // Without an accepted token nothing the server said may stay on the page,
  // not even in a hidden section.
  const dropData = () => {
    ui.views = null;
    ui.detail = null;
    ui.audit = null;
    ui.timeline = null;
    ui.detailMissing = null;
    ui.lastOkAt = null;
    ui.viewsAt = null;
    ui.detailAt = null;
    ui.lastError = null;
    ui.chart = null;
    ui.settingsMsg = null;
    ui.settingsFor = null;
    $("settings-panel").hidden = true;
    ui.dryRun = null;
    $("dry-run-panel").hidden = true;
    ui.fleet = null;
    ui.fleetAt = null;
    ui.fleetAnswers = null;
    ui.fleetSettingsMsg = null;
    for (const id of ["fleet-totals", "fleet-db-rows", "fleet-rows", "fleet-id-actions", "fleet-answer-rows"]) setHtml($(id), "");
    setText($("fleet-summary"), "");
    for (const id of ["rows", "detail-state", "detail-markers", "detail-actions", "detail-body"]) setHtml($(id), "");
    setText($("summary"), "");
  };

  const render = () => {
    renderStatus();
    renderList();
    renderDetail();
    renderDryRun();
    renderFleet();
    renderResult();
  };

  // Which listener served the page, asked without the token, so that the
  // token prompt already stands on the right page: a single database's
  // admin listener answers 404, a fleet's 401 (`listenerKind`). Resolves
  // to whether the kind is known; a failed probe is retried at the next
  // refresh.
  let probing = null;
  const probe = () => {
    if (ui.listener !== null) return Promise.resolve(true);
    if (!probing) {
      probing = fetch("/admin/fleet", { cache: "no-store" })
        .then((res) => listenerKind(res.status), () => null)
        .then((kind) => {
          probing = null;
          if (kind !== null && ui.listener === null) ui.listener = kind;
          return ui.listener !== null;
        });
    }
    return probing;
  };

  // One refresh of what the current route shows. A read that fails keeps
  // the last good data and marks it stale; a 401/403 drops all data.
  const refresh = async () => {
    // A rejected token is not sent again until the operator enters one: a
    // poll with it would only add rejections to the audit.
    if (!ui.token || ui.unauthorized) return render();
    // Until the listener's kind is known nothing is read: the two kinds
    // serve different routes.
    if (ui.listener === null && !(await probe())) {
      ui.lastError = "network error";
      return render();
    }
    const my = ++seq;
    const route = ui.route;
    // What this token may do, read once per token: buttons are offered
    // for it, not learnt from a refusal. A failed read offers them as
    // before; the server still decides.
    if (ui.capsFor !== ui.token) {
      const token = ui.token;
      try {
        const me = await fetch(onFleetPage() ? "/admin/fleet/me" : api("/admin/me"), { headers: authHeaders(), cache: "no-store" });
        if (me.ok && token === ui.token) {
          const caps = (await me.json()).capabilities;
          ui.capsFor = token;
          if (Array.isArray(caps)) ui.cannotOperate = !caps.includes("backfill:operate");
        }
      } catch (e) {
        // Unknown: the refusal of an action still withdraws them.
      }
    }
    let got;
    try {
      if (onFleetPage()) {
        const [o, l] = await Promise.all([
          fetch("/admin/fleet", { headers: authHeaders(), cache: "no-store" }),
          fetch("/admin/fleet/backfills", { headers: authHeaders(), cache: "no-store" }),
        ]);
        if (!o.ok) got = { status: o.status };
        else if (!l.ok) got = { status: l.status };
        else got = { fleet: { overview: await o.json(), list: await l.json() } };
      } else if (route.page === "list") {
        got = await fetchAll((path) => fetch(path, { headers: authHeaders(), cache: "no-store" }));
      } else {
        const id = encodeURIComponent(route.id);
        const [d, a, t, c] = await Promise.all([
          fetch(api(`/admin/backfills/${id}`), { headers: authHeaders(), cache: "no-store" }),
          fetch(api(`/admin/audit?backfill=${id}&limit=200`), { headers: authHeaders(), cache: "no-store" }),
          fetch(api(`/admin/backfills/${id}/timeline?limit=100`), { headers: authHeaders(), cache: "no-store" }),
          fetch(api(`/admin/backfills/${id}/progress`), { headers: authHeaders(), cache: "no-store" }),
        ]);
        if (d.status === 404) got = { missing: true };
        else if (!d.ok) got = { status: d.status };
        else if (!a.ok) got = { status: a.status };
        else if (!t.ok && t.status !== 404) got = { status: t.status };
        else {
          got = { detail: await d.json(), audit: (await a.json()).items, timeline: t.ok ? (await t.json()).items : [] };
          // A chart that could not be read is left out, never drawn empty.
          got.chart = c.ok ? await c.json() : null;
        }
      }
    } catch (e) {
      got = { error: "network error" };
    }
    if (my !== seq || route !== ui.route) return; // a newer refresh or route owns the page
    if (got.status === 401 || got.status === 403) {
      ui.unauthorized = got.status === 401 ? "HTTP 401 unauthorized" : "HTTP 403 forbidden";
      ui.focusAfterRead = false;
      dropData();
      render();
      $("token").focus();
      return;
    }
    if (got.status !== undefined) ui.lastError = `HTTP ${got.status}`;
    else if (got.error) ui.lastError = got.error;
    else {
      ui.unauthorized = null;
      ui.lastError = null;
      ui.lastOkAt = Date.now();
      if (got.fleet) {
        ui.fleet = got.fleet;
        ui.fleetAt = ui.lastOkAt;
      } else if (got.missing) {
        ui.detailMissing = route.id;
        ui.detail = null;
        ui.audit = null;
        ui.timeline = null;
      } else if (got.detail) {
        ui.detailMissing = null;
        ui.detail = got.detail;
        ui.detailAt = ui.lastOkAt;
        ui.audit = got.audit;
        ui.timeline = got.timeline;
        ui.chart = got.chart;
      } else {
        ui.views = got.items;
        ui.viewsAt = ui.lastOkAt;
      }
    }
    render();
    if (ui.focusAfterRead && !ui.lastError) {
      // The prompt that had the focus is gone: hand it to the page.
      ui.focusAfterRead = false;
      (onFleetPage() ? $("fleet-title") : route.page === "detail" ? $("detail-title") : $("list-title")).focus();
    }
  };

  // A path of the admin API of the page's backfill (see `apiBase`).
  const api = (path) => apiBase(ui.route, ui.listener) + path;
  // The fleet page shows unless the route is one database's backfill.
  const onFleetPage = () => ui.listener === "fleet" && !apiBase(ui.route, ui.listener);

  const schedule = () => {
    if (timer) clearInterval(timer);
    timer = ui.interval > 0 ? setInterval(refresh, ui.interval) : null;
    ui.paused = ui.interval <= 0;
  };

  // POST an action with its key and reason: the status (null when no
  // answer arrived) and the JSON body (null when there is none).
  const post = async (url, key, reason) => {
    try {
      const res = await fetch(url, {
        method: "POST",
        headers: { ...authHeaders(), "Idempotency-Key": key, ...reasonHeaders(reason) },
      });
      let body = null;
      try { body = await res.json(); } catch (e) { body = null; }
      return { status: res.status, body };
    } catch (e) {
      return { status: null, body: null };
    }
  };

  // PATCH one settings change as a JSON merge patch: the status (null
  // without an answer) and the JSON body, if any.
  const patch = async (url, key, change, reason) => {
    try {
      const res = await fetch(url, {
        method: "PATCH",
        headers: { ...authHeaders(), "Idempotency-Key": key, "Content-Type": "application/merge-patch+json", ...reasonHeaders(reason) },
        body: JSON.stringify(change),
      });
      let body = null;
      try { body = await res.json(); } catch (e) { body = null; }
      return { status: res.status, body };
    } catch (e) {
      return { status: null, body: null };
    }
  };

  // The token was refused (401): drop the pending action and everything
  // it read, and ask for a token again.
  const signedOut = () => {
    ui.pending = null;
    ui.result = null;
    ui.unauthorized = "HTTP 401 unauthorized";
    dropData();
    render();
    $("token").focus();
  };

  // Show the answer of a request and read again; an open outcome puts
  // the focus on its retry.
  const settle = (open) => {
    render();
    if (open) $("result-retry").focus();
    refresh();
  };

  // Send one intended action. The key is kept until the server answers, so
  // the "Retry" of an unanswered request sends the same key (ADM-4).
  const send = async (action, id, reason) => {
    const key = keyFor(ui.pending, action, id);
    ui.pending = { action, id, key, reason, unanswered: true };
    ui.busy = true;
    ui.result = { text: `${action} ${id}: sending…`, outcome: "sending", retry: null };
    render();
    const { status, body } = await post(api(`/admin/backfills/${encodeURIComponent(id)}/${action}`), key, reason);
    ui.busy = false;
    // A 401 means the token is not accepted at all: nothing it read may
    // stay. A 403 only says this token may not operate; it can still read,
    // so the refusal is shown as the action's result below.
    if (status === 401) return signedOut();
    if (status === 403) ui.cannotOperate = true;
    const open = !settles(status);
    if (!open) ui.pending = null;
    ui.result = {
      text: `${id}: ${describeResult(action, status, body)}`,
      outcome: resultOutcome(status, body),
      retry: open ? { action, id } : null,
    };
    settle(open);
  };

  // Send one request of the fleet (FLT-6) to `database` alone, or to
  // every database when it is null: the fleet sends each database the
  // same Idempotency-Key, and each authorizes, audits and answers it. The
  // key is kept while the outcome is open (no answer, or a database that
  // answered 5xx), for the same request, backfill and databases, so the
  // retry replays what was answered and reaches what was not (ADM-4).
  // `request` names what is sent (with `extra`, kept in the pending
  // request for the retry), `call(scope)` sends it, `answersOf(body)`
  // reads each database's answer, `what(where)` heads the table of
  // answers and `alone(status, body)` describes an answer that has none.
  const sendToFleet = async ({ action, id, database, reason, request, extra, call, answersOf, what, alone }) => {
    const key = keyFor(ui.pending, action, id, undefined, request);
    ui.pending = { action, id, key, reason, request, database, ...extra, fleet: true, unanswered: true };
    const where = database ? `in ${database}` : "in every database";
    ui.busy = true;
    ui.result = { text: `${action} ${id} ${where}: sending…`, outcome: "sending", retry: null };
    render();
    const scope = database ? `?database=${encodeURIComponent(database)}` : "";
    const { status, body } = await call(scope, key);
    ui.busy = false;
    if (status === 401) {
      signedOut();
      return null;
    }
    if (status === 403) ui.cannotOperate = true;
    const open = !fleetSettles(status, body);
    if (!open) ui.pending = null;
    const answers = status === 200 && body && Array.isArray(body.results) ? answersOf(body) : null;
    // The table shows the answers of this request only: an earlier
    // request's would read as this one's.
    ui.fleetAnswers = answers ? { what: what(where), answers } : null;
    const single = answers ? null : alone(status, body);
    ui.result = {
      text: answers ? fleetSummary(action, id, where, answers) : `${id} ${where}: ${single.text}`,
      outcome: answers ? fleetOutcome(answers) : single.outcome,
      retry: open ? { action, id } : null,
    };
    return { answers, open };
  };

  // Send one fleet action (FLT-6): pause, resume and the others.
  const sendFleet = async (action, id, database, reason) => {
    const sent = await sendToFleet({
      action,
      id,
      database,
      reason,
      request: `fleet:${database || "*"}`,
      call: (scope, key) => post(`/admin/fleet/backfills/${encodeURIComponent(id)}/${action}${scope}`, key, reason),
      answersOf: (body) => fleetAnswers(action, body),
      what: (where) => `${action} ${id} ${where}`,
      alone: (status, body) => ({ text: describeResult(action, status, body), outcome: resultOutcome(status, body) }),
    });
    if (sent) settle(sent.open);
  };

  // Send one settings change (THR-4) of backfill `id` to the fleet
  // (FLT-6): each database applies, audits or refuses the same merge
  // patch on its own terms.
  const sendFleetSettings = async (id, database, change, reason) => {
    ui.fleetSettingsMsg = { outcome: "sending", text: "settings: sending…" };
    const sent = await sendToFleet({
      action: "settings",
      id,
      database,
      reason,
      request: `fleet:${database || "*"}:${canonicalJson(change)}`,
      extra: { change },
      call: (scope, key) => patch(`/admin/fleet/backfills/${encodeURIComponent(id)}/settings${scope}`, key, change, reason),
      answersOf: (body) => fleetSettingsAnswers(change, body),
      what: (where) => `settings ${id} ${where}: ${describeSettingsTarget(change)}`,
      alone: (status, body) => describeSettingsResult(status, body, null),
    });
    ui.fleetSettingsMsg = null;
    if (!sent) return;
    // Every database applied it: the form is cleared. Otherwise the
    // fields stay as typed, to be corrected or sent again.
    if (sent.answers && sent.answers.every((a) => a.outcome === "applied")) {
      $("fleet-settings-form").reset();
      for (const f of SETTINGS) $(`fleet-set-${f.name}`).disabled = false;
    }
    settle(sent.open);
  };

  // Send one settings change (THR-4) as a JSON merge patch. Its key is
  // kept until the server answers, for the same change on the same
  // backfill: resubmitting it after a lost answer (or "Retry") replays
  // rather than repeats it, and any other change gets a new key (ADM-4).
  const sendSettings = async (id, change, reason) => {
    const request = canonicalJson(change);
    const key = keyFor(ui.pending, "settings", id, undefined, request);
    ui.pending = { action: "settings", id, key, request, change, reason, unanswered: true };
    const prior = ui.detail && ui.detail.id === id ? ui.detail.settings : null;
    ui.busy = true;
    ui.settingsMsg = { id, outcome: "sending", text: "settings: sending…", field: null };
    ui.result = { text: `${id}: settings: sending…`, outcome: "sending", retry: null };
    render();
    const { status, body } = await patch(api(`/admin/backfills/${encodeURIComponent(id)}/settings`), key, change, reason);
    ui.busy = false;
    if (status === 401) {
      signedOut();
      return;
    }
    if (status === 403) ui.cannotOperate = true;
    const open = !settles(status);
    if (!open) ui.pending = null;
    const r = describeSettingsResult(status, body, prior);
    ui.settingsMsg = { id, outcome: r.outcome, text: r.text, field: r.field };
    ui.result = { text: `${id}: ${r.text}`, outcome: r.outcome, retry: open ? { action: "settings", id } : null };
    // An applied change is what the view shows after the refresh below;
    // a refused one leaves the fields as typed, to be corrected.
    if (status === 200 && ui.settingsFor === id) {
      $("settings-form").reset();
      for (const f of SETTINGS) $(`set-${f.name}`).disabled = false;
    }
    render();
    const invalid = r.field && SETTINGS.some((f) => f.name === r.field) ? $(`set-${r.field}`) : null;
    if (invalid && !invalid.disabled) invalid.focus();
    else if (r.outcome !== "applied" && !$("settings-panel").hidden) $("settings-message").focus();
    refresh();
  };

  // The confirm dialog: every change is confirmed in the page; Escape or
  // Cancel sends nothing. Focus goes back to the control that opened it.
  const confirmDialog = ({ title, text, ok, openerKey, onOk }) => {
    const dialog = $("confirm");
    setText($("confirm-title"), title);
    setText($("confirm-text"), text);
    setText($("confirm-ok"), ok);
    $("confirm-reason").value = "";
    dialog.returnValue = "";
    dialog.onclose = () => {
      const confirmed = dialog.returnValue === "ok";
      const reason = $("confirm-reason").value;
      const back = openerKey && document.querySelector(`[data-key="${CSS.escape(openerKey)}"]`);
      if (back) back.focus();
      if (confirmed) onOk(reason);
    };
    dialog.showModal();
    $("confirm-cancel").focus();
  };

  // A bulk action: one request per backfill, in order, each with its own
  // Idempotency-Key and audit row; the result line counts the outcomes.
  const sendBulk = async (action, ids, reason) => {
    ui.busy = true;
    ui.result = { text: `${action} ${ids.length} backfills: sending…`, outcome: "sending", retry: null };
    render();
    const results = [];
    for (const id of ids) {
      let status = null;
      let body = null;
      try {
        const res = await fetch(api(`/admin/backfills/${encodeURIComponent(id)}/${action}`), {
          method: "POST",
          headers: { ...authHeaders(), "Idempotency-Key": newKey(), ...reasonHeaders(reason) },
        });
        status = res.status;
        try { body = await res.json(); } catch (e) { body = null; }
      } catch (e) {
        status = null;
      }
      if (status === 401 || status === 403) {
        if (status === 403) ui.cannotOperate = true;
        results.push({ id, outcome: "rejected" });
        break;
      }
      results.push({ id, outcome: resultOutcome(status, body) });
    }
    ui.busy = false;
    const all = results.every((r) => r.outcome === "applied" || r.outcome === "converged");
    ui.result = { text: bulkSummary(action, results), outcome: all ? "applied" : "rejected", retry: null };
    render();
    refresh();
  };

  const confirmAction = (action, id, opener) => {
    const name = `${action[0].toUpperCase()}${action.slice(1)}`;
    confirmDialog({
      title: `${name} ${id}?`,
      text: CONSEQUENCES[action] || "",
      ok: name,
      openerKey: opener && opener.dataset ? opener.dataset.key : null,
      onOk: (reason) => send(action, id, reason),
    });
  };

  // Confirm a fleet action in the page's dialog, naming where it goes.
  const confirmFleet = (action, id, database, opener) => {
    const name = `${action[0].toUpperCase()}${action.slice(1)}`;
    const names = ui.fleet ? fleetDatabaseNames(ui.fleet.overview, ui.fleet.list) : [];
    const listed = listNames(names);
    confirmDialog({
      title: database ? `${name} ${id} in ${database}?` : `${name} ${id} in every database?`,
      text: database ? `In ${database} only. ${CONSEQUENCES[action] || ""}` :
        `One audited request to each of the ${names.length} databases (${listed}). Each: ${CONSEQUENCES[action] || ""} ` +
        "A database that is down answers 503, and its answer is shown with the others.",
      ok: database ? name : `${name} in all ${names.length}`,
      openerKey: opener && opener.dataset ? opener.dataset.key : null,
      onOk: (reason) => sendFleet(action, id, database, reason),
    });
  };

  // A new route shows what is already known for it, with the age of that
  // read (and still stale if the last refresh failed) until its own read
  // answers.
  const onRoute = () => {
    const was = ui.route;
    ui.route = parseRoute(location.hash);
    // The fleet page's one route is its filter; a database's backfill is
    // read afresh.
    if (onFleetPage()) {
      ui.fleetDatabase = ui.route.only || "all";
      return render();
    }
    if (ui.route.page === "detail" && (!ui.detail || ui.detail.id !== ui.route.id || was.database !== ui.route.database)) {
      const known = (ui.views || []).find((v) => v.id === ui.route.id);
      ui.detail = known || null;
      ui.detailAt = known ? ui.viewsAt : null;
      ui.audit = null;
      ui.timeline = null;
    }
    ui.lastOkAt = ui.route.page === "list" ? (ui.views ? ui.viewsAt : null) : (ui.detail ? ui.detailAt : null);
    if (ui.lastOkAt === null) ui.lastError = null;
    if (ui.route.page === "list") document.title = "backfill admin";
    render();
    const heading = ui.route.page === "detail" ? $("detail-title") : $("list-title");
    if (document.activeElement && document.activeElement !== document.body && !document.activeElement.closest("#filter")) heading.focus();
    refresh();
  };

  $("token").value = ui.token;
  $("auth").addEventListener("submit", (e) => {
    e.preventDefault();
    ui.token = $("token").value.trim();
    sessionStorage.setItem("backfill-token", ui.token);
    ui.unauthorized = null;
    ui.cannotOperate = false;
    ui.changingToken = false;
    ui.focusAfterRead = true;
    refresh();
  });
  $("change-token").addEventListener("click", () => {
    ui.changingToken = true;
    render();
    $("token").select();
    $("token").focus();
  });
  $("forget").addEventListener("click", () => {
    ui.token = "";
    sessionStorage.removeItem("backfill-token");
    ui.changingToken = false;
    ui.cannotOperate = false;
    dropData();
    render();
    $("token").value = "";
    $("token").focus();
  });
  for (const action of BULK_ACTIONS) {
    $(`bulk-${action}`).addEventListener("click", () => {
      if (ui.busy || !ui.views) return;
      const ids = bulkTargets(filterViews(ui.views, ui.route.state, ui.search), action);
      if (!ids.length) return;
      const name = `${action[0].toUpperCase()}${action.slice(1)}`;
      const listed = listNames(ids);
      confirmDialog({
        title: `${name} ${ids.length} backfill${ids.length === 1 ? "" : "s"}?`,
        text: `${listed}. Each: ${CONSEQUENCES[action]} One audited request per backfill.`,
        ok: `${name} ${ids.length}`,
        openerKey: `bulk-${action}`,
        onOk: (reason) => sendBulk(action, ids, reason),
      });
    });
  }
  $("search").addEventListener("input", (e) => {
    ui.search = e.target.value;
    render();
  });
  $("filter").addEventListener("change", (e) => {
    location.hash = e.target.value === "all" ? "#/" : `#/?state=${e.target.value}`;
  });
  for (const [button, select] of [["refresh-now", "interval"], ["fleet-refresh-now", "fleet-interval"]]) {
    $(button).addEventListener("click", () => refresh());
    $(select).addEventListener("change", (e) => {
      ui.interval = Number(e.target.value);
      // One interval for both pages: the other page's control says it too.
      $("interval").value = e.target.value;
      $("fleet-interval").value = e.target.value;
      schedule();
      render();
    });
  }
  $("fleet-database").addEventListener("change", (e) => {
    ui.fleetDatabase = e.target.value;
    history.replaceState(null, "", fleetFilterHref(ui.fleetDatabase));
    ui.route = parseRoute(location.hash);
    render();
  });
  document.addEventListener("click", (e) => {
    const b = e.target.closest("button[data-action]");
    if (b && !b.disabled) confirmAction(b.dataset.action, b.dataset.id, b);
    const f = e.target.closest("button[data-fleet-action]");
    if (f && !f.disabled) confirmFleet(f.dataset.fleetAction, f.dataset.id, f.dataset.database || null, f);
  });
  // Enter in the reason field would submit the dialog with its first
  // button, Cancel: it does nothing instead, so only a click confirms.
  $("confirm-reason").addEventListener("keydown", (e) => {
    if (e.key === "Enter") e.preventDefault();
  });
  $("result-retry").addEventListener("click", () => {
    const p = ui.pending;
    if (p && p.unanswered && p.fleet && p.action === "settings") sendFleetSettings(p.id, p.database, p.change, p.reason);
    else if (p && p.unanswered && p.fleet) sendFleet(p.action, p.id, p.database, p.reason);
    else if (p && p.unanswered && p.action === "settings") sendSettings(p.id, p.change, p.reason);
    else if (p && p.unanswered) send(p.action, p.id, p.reason);
  });
  // A settings form's fields (IDs with `prefix`), built once. A ticked
  // reset sends null whatever the field holds: the field is disabled
  // meanwhile so the form shows what will be sent.
  const buildSettingsForm = (prefix) => {
    const fields = $(`${prefix}settings-fields`);
    fields.innerHTML = settingsFormHtml(prefix);
    fields.addEventListener("change", (e) => {
      const m = e.target.id && e.target.id.startsWith(`${prefix}clear-`) ? e.target.id.slice(`${prefix}clear-`.length) : null;
      if (m) $(`${prefix}set-${m}`).disabled = e.target.checked;
    });
  };
  // What a settings form asks for, checked as `settingsChange` does.
  const readSettingsForm = (prefix) => settingsChange(SETTINGS.map((f) =>
    ({ name: f.name, text: $(`${prefix}set-${f.name}`).value, clear: $(`${prefix}clear-${f.name}`).checked })));
  buildSettingsForm("");
  $("settings-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const v = ui.detail;
    if (ui.busy || !v || ui.route.page !== "detail" || v.id !== ui.route.id) return;
    const checked = readSettingsForm("");
    const refused = settingsFormRefusal(checked);
    if (refused) {
      ui.settingsMsg = { id: v.id, outcome: "rejected", text: refused.text, field: refused.field };
      render();
      $(refused.field ? `set-${refused.field}` : "settings-message").focus();
      return;
    }
    const change = checked.change;
    const id = v.id;
    confirmDialog({
      title: `Change the settings of ${id}?`,
      text: `${describeSettingsChange(change, v.settings)}. Stored in PostgreSQL and audited; every worker applies it at its next batch, without a restart.`,
      ok: "Apply",
      openerKey: "settings-submit",
      onOk: (reason) => sendSettings(id, change, reason),
    });
  });
  buildSettingsForm("fleet-");
  $("fleet-settings-id").addEventListener("change", (e) => {
    ui.fleetSettingsId = e.target.value;
  });
  // The fleet's settings form: checked here as the backfill page's is,
  // confirmed naming every database it goes to, then one request.
  $("fleet-settings-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const id = ui.fleetSettingsId;
    if (ui.busy || !ui.fleet || !onFleetPage() || !id) return;
    const checked = readSettingsForm("fleet-");
    const refused = settingsFormRefusal(checked);
    if (refused) {
      ui.fleetSettingsMsg = { outcome: "rejected", text: refused.text };
      render();
      $(refused.field ? `fleet-set-${refused.field}` : "fleet-settings-message").focus();
      return;
    }
    const change = checked.change;
    ui.fleetSettingsMsg = null;
    const database = ui.fleetDatabase === "all" ? null : ui.fleetDatabase;
    const names = fleetDatabaseNames(ui.fleet.overview, ui.fleet.list);
    const listed = listNames(names);
    confirmDialog({
      title: database ? `Change the settings of ${id} in ${database}?` : `Change the settings of ${id} in every database?`,
      text: `Set ${describeSettingsTarget(change)}. ` +
        (database ? `In ${database} only. ` : `One audited request to each of the ${names.length} databases (${listed}); a database that is down answers 503, and its answer is shown with the others. `) +
        "Each database stores and audits it, and its workers apply it at their next batch, without a restart.",
      ok: database ? "Apply" : `Apply in all ${names.length}`,
      openerKey: "fleet-settings-submit",
      onOk: (reason) => sendFleetSettings(id, database, change, reason),
    });
  });
  $("dry-run-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const v = ui.detail;
    if (ui.busy || !v || ui.route.page !== "detail" || v.id !== ui.route.id) return;
    const batches = Number($("dry-run-batches").value);
    if (!Number.isInteger(batches) || batches < 1 || batches > DRY_RUN_MAX_BATCHES) {
      ui.dryRun = { id: v.id, sending: false, stamp: `bad-${Date.now()}`, html: `<p class="notice">Batches must be a whole number from 1 to ${DRY_RUN_MAX_BATCHES}. Nothing was sent.</p>` };
      render();
      return;
    }
    sendDryRun(v.id, batches);
  });
  window.addEventListener("hashchange", onRoute);
  // Relative times ("expires in 21 s", "last refreshed 14 s ago") move with
  // the clock between reads.
  setInterval(render, 1000);
  schedule();
  render();
  probe().then(render);
  refresh();
}
