// roostd's dashboard: renders the snapshots roostd streams (server-sent
// events) into the page. Text goes in with textContent only.
"use strict";

const page = document.body.dataset.page;
const pageId = document.body.dataset.id;
const csrf = document.querySelector('meta[name="csrf"]').content;
const main = document.getElementById("main");
const statusLine = document.getElementById("status");

function el(tag, attrs, ...kids) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") node.textContent = v;
    else if (k === "onclick") node.addEventListener("click", v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids) if (kid !== null && kid !== undefined) node.append(kid);
  return node;
}

const badge = (state) => el("span", { class: "badge " + state, text: state });

function age(iso) {
  if (!iso) return "";
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return Math.floor(s) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m";
  if (s < 86400) return Math.floor(s / 3600) + "h";
  return Math.floor(s / 86400) + "d";
}

function live(url, render) {
  const source = new EventSource(url);
  source.onopen = () => { statusLine.textContent = "live"; };
  source.onerror = () => { statusLine.textContent = "reconnecting…"; };
  source.onmessage = (e) => {
    const data = JSON.parse(e.data);
    if (data.error) {
      main.replaceChildren(el("p", { class: "error", text: data.error }));
      return;
    }
    render(data);
    statusLine.textContent = "live · " + new Date().toLocaleTimeString();
  };
}

async function act(url, button) {
  button.disabled = true;
  try {
    const r = await fetch(url, { method: "POST", headers: { "X-CSRF-Token": csrf } });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) alert(body.error || ("failed: " + r.status));
  } finally {
    button.disabled = false;
  }
}

function table(headers, rows, id) {
  const head = el("tr", {}, ...headers.map((h) => el("th", { text: h })));
  const body = el("tbody", id ? { id } : {});
  body.append(...rows);
  return el("table", {}, el("thead", {}, head), body);
}

// Sessions ---------------------------------------------------------------
let firstRender = true;
function sessionRow(s) {
  return el("tr", { "data-session": s.id, "data-state": s.state },
    el("td", {}, el("a", { href: "/s/" + encodeURIComponent(s.id), text: s.name })),
    el("td", {}, badge(s.state)),
    el("td", { text: s.capsule + "@" + s.version }),
    el("td", { text: s.route }),
    el("td", { class: "num", text: age(s.started_at || s.created_at) }),
    el("td", { class: "num", text: String(s.restarts) }),
    el("td", { class: "num", text: s.tokens ? String(s.tokens) : "" }),
    el("td", { class: "muted", text: s.sandbox || "" }));
}

function renderSessions(data) {
  const t0 = performance.now();
  let body = document.getElementById("sessions");
  if (!body) {
    main.replaceChildren(
      el("h1", { text: "Sessions" }),
      el("p", { class: "muted", id: "summary" }),
      table(["Name", "State", "Capsule", "Route", "Age", "Restarts", "Tokens", "Sandbox"], [], "sessions"));
    body = document.getElementById("sessions");
  }
  const frag = document.createDocumentFragment();
  for (const s of data.sessions) frag.append(sessionRow(s));
  body.replaceChildren(frag);
  document.getElementById("summary").textContent =
    data.live + " live · " + data.sessions.length + " recorded";
  if (firstRender) {
    firstRender = false;
    // Read by the end-to-end test: when the first list was on screen.
    window.roostFirstRender = { at: performance.now(), renderMs: performance.now() - t0, rows: data.sessions.length };
  }
}

// A session ----------------------------------------------------------------
function details(pairs) {
  const dl = el("dl");
  for (const [k, v] of pairs) {
    if (v === undefined || v === null || v === "") continue;
    dl.append(el("dt", { text: k }), el("dd", {}, typeof v === "string" || typeof v === "number" ? String(v) : v));
  }
  return dl;
}

function traceView(trace) {
  const box = el("div", { id: "trace" });
  for (const e of trace) {
    const f = e;
    let line = null;
    switch (e.event) {
      case "session_start": line = el("div", { class: "turn" }, el("strong", { text: "session start" }), " · model " + (f.model || "") + " · driver " + (f.driver || "") + " · tools " + (f.tools || []).join(", ")); break;
      case "session_end": line = el("div", { class: "turn" }, el("strong", { text: "session end " }), badge(f.state || f.reason || "")); break;
      case "task_start": line = el("div", { class: "turn" }, el("strong", { text: "task " + (f.task_id || "") }), " from " + (f.source || "")); break;
      case "inference": line = el("div", { class: "turn" }, "turn " + f.turn + " · " + (f.model || "") + " · ",
        f.error ? el("span", { class: "error", text: f.error }) : (f.input_tokens + " in / " + f.output_tokens + " out tokens · " + f.latency_ms + " ms · " + (f.tool_calls || 0) + " tool calls")); break;
      case "tool_call": line = el("div", { class: "turn" }, "tool ", el("code", { text: f.name || "" }), " ", badge(f.status || ""), " " + (f.duration_ms || 0) + " ms", f.rule ? " · " + f.rule : ""); break;
      case "denied":
        line = el("div", { class: "turn" }, badge("denied"), " " + JSON.stringify(f)); break;
      case "task_end": line = el("div", { class: "turn" }, el("strong", { text: "end " }), badge(f.state || f.exit_status || ""), " " + (f.turns || 0) + " turns"); break;
      default: line = el("div", { class: "turn muted", text: e.event + " " + JSON.stringify(f) });
    }
    box.append(line);
  }
  if (!trace.length) box.append(el("p", { class: "muted", text: "no trace (not an agent, or nothing yet)" }));
  return box;
}

function renderSession(data) {
  const s = data.session;
  const ended = ["completed", "failed", "stopped", "interrupted"].includes(s.state);
  const stop = el("button", { class: "danger", id: "stop", disabled: ended, text: "Stop",
    onclick: (e) => act("/act/s/" + encodeURIComponent(s.id) + "/stop", e.target) });
  const restart = el("button", { id: "restart", text: "Restart",
    onclick: (e) => act("/act/s/" + encodeURIComponent(s.id) + "/restart", e.target) });
  const p = data.policy || {};
  const limits = p.limits || {};
  const a2aRows = data.a2a_tasks.map((t) => el("tr", { "data-task": t.id },
    el("td", {}, el("a", { href: "/t/" + encodeURIComponent(t.id), text: t.id })),
    el("td", {}, badge(t.state)),
    el("td", { text: age(t.created_at) }),
    el("td", { text: (t.text || "").slice(0, 120) })));
  const agentRows = data.agent_tasks.map((t) => el("tr", {},
    el("td", { text: t.id }), el("td", {}, badge(t.state)), el("td", { text: t.source }),
    el("td", { class: "num", text: String(t.turns) }),
    el("td", { class: "num", text: t.input_tokens + " / " + t.output_tokens }),
    el("td", { class: "error", text: t.error || "" })));
  const when = (x) => x.cron ? "cron " + x.cron + (x.tz ? " (" + x.tz + ")" : "") : x.every ? "every " + x.every : "at " + x.at;
  const scheduleRows = (data.schedules || []).map((x) => el("tr", { "data-schedule": x.id },
    el("td", { text: x.name }), el("td", { text: when(x) }),
    el("td", { text: x.paused ? "paused" : (x.next_tick || "done") }),
    el("td", { class: "num", text: String(x.fired) }), el("td", { class: "num", text: String(x.skipped) }),
    el("td", {}, x.last_task_id ? el("a", { href: "/t/" + encodeURIComponent(x.last_task_id), text: x.last_task_id }) : "-"),
    el("td", { class: "error", text: x.last_error || "" })));
  const versionRows = (data.versions || []).map((v) => el("tr", { "data-version": v.version },
    el("td", { text: v.version }), el("td", { text: v.capsule }), el("td", { text: v.why }),
    el("td", { text: age(v.since) }), el("td", { text: v.manifest })));
  main.replaceChildren(
    el("h1", {}, s.name, badge(s.state), stop, restart),
    el("div", { class: "grid" },
      el("div", { class: "card" }, el("h2", { text: "Session" }), details([
        ["id", s.id], ["capsule", s.capsule + "@" + s.version], ["route", data.route],
        ["age", age(s.created_at)], ["restarts", s.restart_count], ["restart policy", s.restart_policy],
        ["sandbox", s.sandbox], ["workdir", s.workdir], ["error", s.error],
        ["tokens", s.usage ? s.usage.input_tokens + " in / " + s.usage.output_tokens + " out, " + s.usage.turns + " turns" : ""]])),
      el("div", { class: "card" }, el("h2", { text: "Policy" }), details([
        ["tools", (p.tools || []).join(", ")], ["network", (p.network_allow || []).join(", ") || "none"],
        ["shell", (p.shell_allow || []).join(", ")], ["read-only", (p.read_only || []).join(", ")],
        ["read-write", (p.read_write || []).join(", ")],
        ["limits", limits.timeout_secs ? limits.timeout_secs + " s, " + limits.memory_mb + " MB" : ""],
        ["native tools", p.native_tools], ["refused", p.refused]]))),
    el("h2", { text: "Versions" }),
    table(["Version", "Capsule", "Why", "Since", "Manifest"], versionRows, "versions"),
    el("h2", { text: "Schedules" }),
    scheduleRows.length ? table(["Name", "When", "Next", "Fired", "Skipped", "Last task", "Note"], scheduleRows, "schedules") : el("p", { class: "muted", text: "none (roostctl schedule add)" }),
    el("h2", { text: "A2A tasks" }),
    a2aRows.length ? table(["Task", "State", "Age", "Message"], a2aRows, "a2a-tasks") : el("p", { class: "muted", text: "none" }),
    agentRows.length ? el("h2", { text: "Agent tasks" }) : null,
    agentRows.length ? table(["Task", "State", "Source", "Turns", "Tokens in / out", "Error"], agentRows) : null,
    el("h2", { text: "Trace" }), traceView(data.trace),
    el("h2", { text: "Logs (tail)" }), el("pre", { id: "logs", text: data.logs.join("\n") || "(empty)" }));
}

// A task ---------------------------------------------------------------
function eventLine(e) {
  const k = e.kind;
  let what;
  switch (k.type) {
    case "status": what = el("span", {}, badge(k.state), k.message ? " " + k.message : ""); break;
    case "artifact": what = el("span", {}, "artifact " + k.artifact_id + ": ", el("code", { text: k.text || (k.part ? JSON.stringify(k.part) : "") })); break;
    case "reply": what = el("span", {}, "reply: ", el("code", { text: k.text })); break;
    case "input": what = el("span", {}, "input: ", el("code", { text: k.text })); break;
    default: what = el("span", { text: JSON.stringify(k) });
  }
  return el("li", {}, el("span", { class: "muted", text: "#" + e.seq + " " + e.at + " " }), what);
}

function renderTask(data) {
  const t = data.task;
  const ended = ["completed", "failed", "canceled", "rejected"].includes(t.state);
  const cancel = el("button", { class: "danger", id: "cancel", disabled: ended, text: "Cancel",
    onclick: (e) => act("/act/t/" + encodeURIComponent(t.id) + "/cancel", e.target) });
  main.replaceChildren(
    el("h1", {}, "Task", el("code", { text: t.id }), badge(t.state), cancel),
    el("div", { class: "grid" },
      el("div", { class: "card" }, details([
        ["session", el("a", { href: "/s/" + encodeURIComponent(t.session_id), text: t.route })],
        ["context", t.context_id], ["created", t.created_at], ["updated", t.updated_at],
        ["status", t.status_message]])),
      el("div", { class: "card" }, el("h2", { text: "Message" }), el("pre", { text: t.text }),
        el("h2", { text: "Answer" }), el("pre", { id: "answer", text: t.answer || "(none yet)" }))),
    el("h2", { text: "Timeline" }),
    el("ol", { class: "timeline", id: "timeline" }, ...data.events.map(eventLine)));
}

// Login ----------------------------------------------------------------
function renderLogin() {
  statusLine.textContent = "";
  const input = el("input", { type: "password", id: "token", autocomplete: "current-password", placeholder: "token from ui.token_file" });
  const message = el("p", { class: "error", id: "login-error" });
  const form = el("form", { class: "card login", id: "login" },
    el("h1", { text: "Log in" }), input, el("button", { type: "submit", text: "Log in" }), message);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const r = await fetch("/login", { method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ token: input.value }) });
    if (r.ok) location.href = "/";
    else message.textContent = (await r.json().catch(() => ({}))).error || "refused";
  });
  main.replaceChildren(form);
  input.focus();
}

if (page !== "login") {
  const out = document.getElementById("logout");
  out.hidden = false;
  out.addEventListener("click", async () => {
    await fetch("/logout", { method: "POST", headers: { "X-CSRF-Token": csrf } });
    location.href = "/login";
  });
}

switch (page) {
  case "login": renderLogin(); break;
  case "sessions": live("/live/sessions", renderSessions); break;
  case "session": live("/live/s/" + encodeURIComponent(pageId), renderSession); break;
  case "task": live("/live/t/" + encodeURIComponent(pageId), renderTask); break;
}
