// The admin web client: a projection of the admin API (ADM-1). It keeps no
// lifecycle of its own, never synthesises an outcome, shows unknown as
// unknown and a failed refresh as stale, never as zero (ADM-3), and sends
// only the actions of docs/CONTRACT.md section 3 (CT-12). The server decides every
// transition; the buttons shown are a convenience, not a rule.
"use strict";

// The only actions this client can send (docs/CONTRACT.md section 3, ADM-6).
const ACTIONS = ["start", "pause", "resume", "retry", "validate"];

// Which actions to offer for a state, per the contract's table. `validate`
// is always offered (it is read-only and answers `current-state` when it
// cannot run).
function actionsFor(state) {
  const byState = {
    pending: ["start"],
    running: ["pause"],
    validating: ["pause"],
    paused: ["resume"],
    blocked: ["retry"],
    failed: ["retry"],
    completed: [],
  };
  const offered = byState[state] || [];
  return offered.concat(["validate"]).filter((a) => ACTIONS.includes(a));
}

function escapeHtml(value) {
  return String(value)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;").replace(/'/g, "&#39;");
}

// Progress cell: a bar with a percentage, or "unknown" when the API says
// null. Never 0% for unknown.
function progressCell(progress) {
  if (!progress || progress.fraction === null || progress.fraction === undefined) {
    const done = progress && Number.isFinite(progress.rows_done) ? `${progress.rows_done} rows done, ` : "";
    return `<span class="unknown">${done}total unknown</span>`;
  }
  const pct = Math.max(0, Math.min(1, progress.fraction)) * 100;
  const total = progress.total_rows === null || progress.total_rows === undefined ? "unknown" : progress.total_rows;
  return `<span class="bar"><span style="width:${pct.toFixed(1)}%"></span></span> ${pct.toFixed(1)}% (${progress.rows_done}/${escapeHtml(total)})`;
}

function ownerCell(owner) {
  if (!owner) return '<span class="unknown">unknown</span>';
  if (owner.disposition === "none") return "none";
  const until = owner.until ? ` until ${escapeHtml(owner.until)}` : "";
  return `${escapeHtml(owner.disposition)}: ${escapeHtml(owner.worker || "unknown")}${until}`;
}

function diagnosticCell(view) {
  if (!view.last_error) return "";
  return `<span class="diag">${escapeHtml(view.last_error.kind || "error")}: ${escapeHtml(view.last_error.message)}</span>`;
}

function validationCell(view) {
  if (!view.validation) return '<span class="unknown">none yet</span>';
  const detail = view.validation.detail ? ` — ${escapeHtml(view.validation.detail)}` : "";
  return `${escapeHtml(view.validation.outcome)}${detail}`;
}

function readinessCell(view) {
  if (!view.readiness) return '<span class="unknown">unknown</span>';
  if (view.readiness.gating) return "gating";
  return view.readiness.required ? "required, satisfied" : "not required";
}

function row(view) {
  const buttons = actionsFor(view.state)
    .map((a) => `<button data-action="${a}" data-id="${escapeHtml(view.id)}">${a}</button>`)
    .join("");
  const retry = view.next_attempt_at ? `attempts ${view.attempts}, next ${escapeHtml(view.next_attempt_at)}` : `attempts ${view.attempts}`;
  return `<tr><td>${escapeHtml(view.id)}</td><td class="state-${escapeHtml(view.state)}">${escapeHtml(view.state)}</td>` +
    `<td>${progressCell(view.progress)}</td><td>${ownerCell(view.owner)}</td><td>${retry}</td>` +
    `<td>${diagnosticCell(view)}</td><td>${validationCell(view)}</td><td>${readinessCell(view)}</td><td>${buttons}</td></tr>`;
}

// The status line: fresh, stale (a refresh failed; the table shows the
// last good read and its time) or error (nothing trustworthy to show).
function statusLine(state) {
  if (state.unauthorized) return { cls: "error", text: `Not authorized: ${state.unauthorized}. Nothing is shown.` };
  if (state.lastError && state.lastOk) {
    return { cls: "stale", text: `STALE: refresh failed (${state.lastError}); showing the read from ${state.lastOk}.` };
  }
  if (state.lastError) return { cls: "error", text: `No data: ${state.lastError}.` };
  if (state.lastOk) return { cls: "", text: `Read from PostgreSQL at ${state.lastOk}.` };
  return { cls: "", text: "Enter an operator token." };
}

// A fresh idempotency key per click; re-sent unchanged on a network retry
// so a lost response never duplicates a transition (ADM-4).
function newKey() {
  if (typeof crypto !== "undefined" && crypto.randomUUID) return crypto.randomUUID();
  return `ui-${Date.now()}-${Math.random().toString(16).slice(2)}`;
}

function describeResult(action, status, body) {
  if (status === 200 && body && body.outcome && body.backfill) {
    return `${action}: ${body.outcome} (${body.prior_state} -> ${body.backfill.state})`;
  }
  if (status === 200 && body && body.outcome) {
    const why = body.detail || body.reason || "";
    return `${action}: ${body.outcome}${why ? ` — ${why}` : ""} (state ${body.state})`;
  }
  if (status === 409 && body && body.current) {
    return `${action}: conflict — current state is ${body.current.state}`;
  }
  if (body && body.error) return `${action}: HTTP ${status} ${body.error}: ${body.message || ""}`;
  return `${action}: HTTP ${status}, no readable answer (the outcome is unknown; refresh to see the server state)`;
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

if (typeof module !== "undefined") {
  module.exports = { ACTIONS, actionsFor, progressCell, ownerCell, statusLine, describeResult, row, escapeHtml, fetchAll };
}

if (typeof document !== "undefined") {
  const state = { token: sessionStorage.getItem("backfill-token") || "", lastOk: null, lastError: null, unauthorized: null, views: [] };

  const render = () => {
    const line = statusLine(state);
    const el = document.getElementById("status");
    el.className = line.cls;
    el.textContent = line.text;
    document.getElementById("rows").innerHTML = state.unauthorized ? "" : state.views.map(row).join("");
  };

  const refresh = async () => {
    if (!state.token) return render();
    try {
      const got = await fetchAll((path) => fetch(path, { headers: { Authorization: `Bearer ${state.token}` } }));
      if (got.status === 401 || got.status === 403) {
        state.unauthorized = `HTTP ${got.status}`;
        state.views = [];
      } else if (got.status !== undefined) {
        state.lastError = `HTTP ${got.status}`;
      } else {
        state.views = got.items;
        state.unauthorized = null;
        state.lastError = null;
        state.lastOk = new Date().toISOString();
      }
    } catch (e) {
      state.lastError = "network error";
    }
    render();
  };

  const act = async (action, id) => {
    const key = newKey();
    const send = () => fetch(`/admin/backfills/${encodeURIComponent(id)}/${action}`, {
      method: "POST",
      headers: { Authorization: `Bearer ${state.token}`, "Idempotency-Key": key },
    });
    let res;
    try {
      res = await send();
    } catch (e) {
      try { res = await send(); } catch (e2) { res = null; }
    }
    const out = document.getElementById("result");
    if (!res) {
      out.textContent = `${action}: network error; the outcome is unknown until the next refresh`;
    } else {
      let body = null;
      try { body = await res.json(); } catch (e) { body = null; }
      out.textContent = describeResult(action, res.status, body);
    }
    refresh();
  };

  document.getElementById("token").value = state.token;
  document.getElementById("auth").addEventListener("submit", (e) => {
    e.preventDefault();
    state.token = document.getElementById("token").value.trim();
    sessionStorage.setItem("backfill-token", state.token);
    refresh();
  });
  document.getElementById("rows").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-action]");
    if (b) act(b.dataset.action, b.dataset.id);
  });
  refresh();
  setInterval(refresh, 2000);
}
