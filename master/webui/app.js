// det WebUI: one page per route, all data from the REST API with the user's session token.
// The DOM is built from text nodes only (see h()); nothing from the API is parsed as HTML.
"use strict";

const TOKEN_KEY = "det.token";

// ---------------------------------------------------------------- helpers

function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

// Replaces an element's content; null/false children are skipped (unlike replaceChildren).
function render(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

const SVG_NS = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  append(el, children);
  return el;
}

const stateName = (st) => String(st || "").replace(/^STATE_/, "");
const badge = (st) => h("span", { class: "state state-" + stateName(st) }, stateName(st));
const when = (t) => (t ? new Date(t).toLocaleString() : "");
const link = (href, text) => h("a", { href }, text);

function num(v) {
  if (typeof v !== "number") return v === undefined || v === null ? "" : String(v);
  if (Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  return a !== 0 && (a < 1e-3 || a >= 1e6) ? v.toExponential(3) : String(+v.toPrecision(5));
}

function flat(obj, prefix = "") {
  const out = [];
  for (const [k, v] of Object.entries(obj || {})) {
    if (v && typeof v === "object" && !Array.isArray(v)) out.push(...flat(v, prefix + k + "."));
    else out.push([prefix + k, v]);
  }
  return out;
}

function table(headers, rows, empty = "Nothing here yet.") {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h(
    "table",
    {},
    h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((c) => h("td", {}, c))))),
  );
}

function facts(pairs) {
  return h(
    "dl",
    { class: "facts" },
    pairs.filter(([, v]) => v !== undefined && v !== null && v !== "").map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]),
  );
}

const TERMINAL = new Set(["COMPLETED", "CANCELED", "ERROR", "DELETED", "STOPPING_KILLED", "STOPPING_CANCELED", "STOPPING_COMPLETED", "STOPPING_ERROR"]);
const isTerminal = (st) => TERMINAL.has(stateName(st));

// The page's query string as an object, and a way to change it without a reload.
function query() {
  return Object.fromEntries(new URLSearchParams(location.search));
}
function setQuery(values) {
  const q = new URLSearchParams(location.search);
  for (const [k, v] of Object.entries(values)) {
    if (v === undefined || v === null || v === "") q.delete(k);
    else q.set(k, String(v));
  }
  const text = q.toString();
  history.replaceState(null, "", location.pathname + (text ? "?" + text : ""));
}

// A table whose headers sort it: columns [{label, key?, cell(row), value?(row)}];
// sort {key, desc}; onSort(key) is called with the clicked column's key.
function sortTable(columns, rows, sort, onSort, { empty = "Nothing here yet.", rowAttrs } = {}) {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  const head = columns.map((c) => {
    if (!c.key) return h("th", {}, c.label);
    const active = sort && sort.key === c.key;
    return h("th", { "aria-sort": active ? (sort.desc ? "descending" : "ascending") : "none", class: "sortable" },
      h("button", { class: "sort", "data-sort": c.key, onclick: () => onSort(c.key) }, c.label, active ? (sort.desc ? " ▼" : " ▲") : ""));
  });
  return h("table", { class: "sorted" },
    h("thead", {}, h("tr", {}, head)),
    h("tbody", {}, rows.map((r) => h("tr", rowAttrs ? rowAttrs(r) : {}, columns.map((c) => h("td", {}, c.cell(r)))))),
  );
}

// Sorts rows in place by value(row) (numbers before text, missing values last either way).
function sortRows(rows, value, desc) {
  const missing = (v) => v === undefined || v === null || v === "" || (typeof v === "number" && !Number.isFinite(v));
  rows.sort((a, b) => {
    const x = value(a), y = value(b);
    if (missing(x) || missing(y)) return missing(x) - missing(y);
    const c = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y), undefined, { numeric: true });
    return desc ? -c : c;
  });
  return rows;
}

// Runs fn over items one by one after one confirmation; failures are listed in the error box.
async function batch(verb, items, label, fn) {
  if (!items.length) return false;
  if (!confirm(`${verb} ${items.length} ${label}${items.length === 1 ? "" : "s"}?`)) return false;
  const failed = [];
  for (const it of items) {
    try {
      await fn(it);
    } catch (e) {
      failed.push(`${it}: ${e.message}`);
    }
  }
  showError(failed.length ? `${verb}: ${failed.length} of ${items.length} failed: ${failed.join("; ")}` : "");
  return true;
}

let meCache = null;
async function me() {
  if (!meCache) meCache = api("/api/v1/me").then((r) => r.user);
  return meCache;
}

// ---------------------------------------------------------------- API

class ApiError extends Error {}

function token() {
  return localStorage.getItem(TOKEN_KEY);
}

function toLogin() {
  const next = location.pathname + location.search;
  location.assign("/det/login?next=" + encodeURIComponent(next.startsWith("/det/login") ? "/det/" : next));
}

async function api(path, { method = "GET", body, raw = false } = {}) {
  const headers = { Authorization: "Bearer " + token() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (r.status === 401) {
    localStorage.removeItem(TOKEN_KEY);
    toLogin();
    throw new ApiError("Your session has ended; log in again.");
  }
  if (!r.ok) {
    let message = r.status + " " + r.statusText;
    try {
      message = (await r.json()).message || message;
    } catch (e) {
      /* not JSON */
    }
    throw new ApiError(message);
  }
  return raw ? r.text() : r.json();
}

// The error box. Each part of a page clears only what it showed itself: the periodic refresh
// must not hide the message of an action or a log filter the master refused.
let errorFrom = null;
function showError(message, from = "page") {
  const box = document.getElementById("error");
  if (message) {
    box.textContent = message;
    box.hidden = false;
    errorFrom = from;
  } else if (errorFrom === from) {
    box.textContent = "";
    box.hidden = true;
    errorFrom = null;
  }
}

async function act(what, fn, after = refresh) {
  try {
    await fn();
    showError("");
    await after();
  } catch (e) {
    showError(what + ": " + e.message);
  }
}

// ---------------------------------------------------------------- pages

async function loginPage(main) {
  document.getElementById("top").classList.add("bare");
  const error = h("p", { class: "form-error", role: "alert" });
  const user = h("input", { name: "username", autocomplete: "username", required: true, value: "admin" });
  const pass = h("input", { name: "password", type: "password", autocomplete: "current-password" });
  const form = h(
    "form",
    {
      class: "login",
      onsubmit: async (ev) => {
        ev.preventDefault();
        error.textContent = "";
        try {
          const r = await fetch("/api/v1/auth/login", {
            method: "POST",
            headers: { "Content-Type": "application/json" },
            body: JSON.stringify({ username: user.value, password: pass.value }),
          });
          const out = await r.json().catch(() => ({}));
          if (!r.ok) throw new ApiError(out.message || "login failed (" + r.status + ")");
          localStorage.setItem(TOKEN_KEY, out.token);
          const next = new URLSearchParams(location.search).get("next") || "/det/";
          location.assign(next.startsWith("/det/") ? next : "/det/");
        } catch (e) {
          error.textContent = e.message;
        }
      },
    },
    h("h1", {}, "Log in to det"),
    h("label", {}, "Username", user),
    h("label", {}, "Password", pass),
    h("button", { type: "submit" }, "Log in"),
    error,
  );
  render(main, form);
  return null;
}

// A job's kind (Determined's job type) and the page of what it runs: an experiment's page, an
// interactive task's own page, the experiment a checkpoint GC task collects.
const JOB_KINDS = {
  TYPE_EXPERIMENT: ["experiment", (id) => "/det/experiments/" + encodeURIComponent(id)],
  TYPE_NOTEBOOK: ["notebook", (id) => "/det/tasks/" + encodeURIComponent(id)],
  TYPE_SHELL: ["shell", (id) => "/det/tasks/" + encodeURIComponent(id)],
  TYPE_COMMAND: ["command", (id) => "/det/tasks/" + encodeURIComponent(id)],
  TYPE_TENSORBOARD: ["TensorBoard", (id) => "/det/tasks/" + encodeURIComponent(id)],
  TYPE_CHECKPOINT_GC: ["checkpoint GC", (id) => "/det/experiments/" + encodeURIComponent(id)],
};

function jobLink(j) {
  const [kind, href] = JOB_KINDS[j.type] || [String(j.type || "job").replace(/^TYPE_/, "").toLowerCase(), null];
  const short = /^\d+$/.test(j.entityId) ? j.entityId : String(j.entityId).slice(0, 8);
  const text = j.type === "TYPE_CHECKPOINT_GC" ? `checkpoint GC of experiment ${short}` : `${kind} ${short}${j.name ? ": " + j.name : ""}`;
  return [kind, href ? h("a", { href: href(j.entityId), "data-kind": kind, title: j.entityId }, text) : text];
}

async function jobsPage(main) {
  const { jobs } = await api("/api/v1/job-queues");
  const setPriority = (j) => () => {
    const value = prompt(`Priority for ${j.name} (1-99, lower runs first):`, String(j.priority));
    if (value === null) return;
    act("set priority", () => api("/api/v1/job-queues", { method: "POST", body: { updates: [{ jobId: j.jobId, priority: Number(value) }] } }));
  };
  render(main, 
    h("h1", {}, "Job queue"),
    table(
      ["#", "Kind", "Job", "State", "Jobs ahead", "Priority", "Weight", "Slots", "Pool", "Waiting because", "User", ""],
      jobs.map((j, i) => [
        String(i + 1),
        ...jobLink(j),
        badge(j.summary.state),
        String(j.summary.jobsAhead),
        String(j.priority),
        num(j.weight),
        `${j.allocatedSlots}/${j.requestedSlots}`,
        j.resourcePool,
        j.pendingReason || "",
        j.username,
        h("button", { onclick: setPriority(j) }, "Priority…"),
      ]),
      "The queue is empty.",
    ),
  );
}

async function clusterPage(main) {
  const [{ resourcePools }, { agents }] = await Promise.all([api("/api/v1/resource-pools"), api("/api/v1/agents")]);
  // Pools with prices (provider.cost.prices) report their spend; others answer 404.
  const costs = await Promise.all(
    resourcePools.map((p) => (p.type === "RESOURCE_POOL_TYPE_STATIC" ? null : api(`/api/v1/resource-pools/${encodeURIComponent(p.name)}/cost`).catch(() => null))),
  );
  const events = await Promise.all(
    resourcePools.map((p) => api(`/api/v1/resource-pools/${encodeURIComponent(p.name)}/events?limit=10`).then((r) => r.events).catch(() => [])),
  );
  const usd = (v) => "$" + Number(v).toFixed(2);
  render(main, 
    h("h1", {}, "Cluster"),
    h("h2", {}, "Resource pools"),
    table(
      ["Pool", "Type", "Agents", "Slots used", "Slot type", "Instances (min–max)", "Instance type", "Cost now", "This month"],
      resourcePools.map((p, i) => [
        p.name,
        String(p.type || "").replace(/^RESOURCE_POOL_TYPE_/, ""),
        String(p.numAgents),
        `${p.slotsUsed}/${p.slotsAvailable}`,
        String(p.slotType || "").replace(/^TYPE_/, ""),
        p.maxAgents ? `${p.minAgents}–${p.maxAgents}` : "",
        p.instanceType || "",
        costs[i] ? usd(costs[i].hourlyRate) + "/h" + (costs[i].maxHourlyCost ? ` (cap ${usd(costs[i].maxHourlyCost)}/h)` : "") : "",
        costs[i] ? usd(costs[i].spentThisMonth) + (costs[i].monthlyBudget ? ` of ${usd(costs[i].monthlyBudget)}` : "") : "",
      ]),
    ),
    h("h2", {}, "Recent pool events"),
    resourcePools.some((p, i) => events[i].length)
      ? resourcePools.filter((p, i) => events[i].length).map((p) => h("section", { class: "pool-events", "data-pool": p.name },
        h("h3", {}, p.name),
        table(["Time", "Kind", "Message"], events[resourcePools.indexOf(p)].slice().reverse().map((ev) => [when(ev.time), ev.kind, ev.message]))))
      : h("p", { class: "muted" }, "No pool has recorded an event yet (launches, terminations, waits)."),
    h("h2", {}, "Agents ", link("/det/agents", "enable, disable, drain")),
    table(
      ["Agent", "Pool", "Slots in use", "Devices", "Status", "Last heartbeat", "Address"],
      agents.map((a) => {
        const slots = Object.values(a.slots || {});
        const used = slots.filter((x) => x.container).length;
        const devices = [...new Set(slots.map((x) => ((x.device || {}).brand || (x.device || {}).type || "").toString()))].filter(Boolean).join(", ");
        const status = !a.connected ? "disconnected" : !a.enabled ? (a.draining ? "draining" : "disabled") : a.preemptionNotice ? "preemption notice" : "ready";
        return [a.id, (a.resourcePools || []).join(", "), `${used}/${slots.length}`, devices, status, when(a.lastHeartbeat), (a.addresses || []).join(", ")];
      }),
      "No agents connected.",
    ),
  );
}

// ---------------------------------------------------------------- routing

// A page is page(main, ...routeArgs). It returns nothing (the router calls it again at each
// poll, poll.js) or {refresh} (a function the router calls instead, or null: the page keeps itself
// up to date, e.g. an interactive view that a redraw would disturb).
function routes() {
  return [
    [/^\/det\/login\/?$/, loginPage, null],
    [/^\/det\/?$/, (main) => experimentsPage(main), "experiments"],
    [/^\/det\/experiments\/?$/, (main) => experimentsPage(main), "experiments"],
    [/^\/det\/experiments\/(\d+)\/?$/, experimentPage, "experiments"],
    [/^\/det\/compare\/?$/, comparePage, "experiments"],
    [/^\/det\/trials\/(\d+)(?:\/.*)?$/, trialPage, "experiments"],
    [/^\/det\/workspaces\/?$/, workspacesPage, "workspaces"],
    [/^\/det\/workspaces\/(\d+)\/?$/, workspacePage, "workspaces"],
    [/^\/det\/projects\/(\d+)\/?$/, projectPage, "workspaces"],
    [/^\/det\/models\/?$/, modelsPage, "models"],
    [/^\/det\/models\/([^/]+)\/?$/, modelPage, "models"],
    [/^\/det\/models\/([^/]+)\/versions\/(\d+)\/?$/, modelVersionPage, "models"],
    [/^\/det\/tasks\/?$/, tasksPage, "tasks"],
    [/^\/det\/tasks\/new\/?$/, launchPage, "tasks"],
    [/^\/det\/tasks\/([^/]+)\/logs\/?$/, taskLogsPage, "tasks"],
    [/^\/det\/tasks\/([^/]+)\/?$/, taskPage, "tasks"],
    [/^\/det\/open\/([^/]+)\/?$/, openTaskPage, "tasks"],
    // The links Determined's CLI prints and opens (`det notebook start|open`, `det tensorboard
    // start|open`): /det/interactive/<id>/<kind>/<description>/<pool>/<wait page>, and the wait
    // page itself, /det/wait/<kind>/<id>: both open the task as above.
    [/^\/det\/interactive\/([^/]+)(?:\/.*)?$/, openTaskPage, "tasks"],
    [/^\/det\/wait\/[^/]+\/([^/]+)\/?$/, openTaskPage, "tasks"],
    [/^\/det\/jobs\/?$/, jobsPage, "jobs"],
    [/^\/det\/usage\/?$/, usagePage, "usage"],
    [/^\/det\/cluster(s)?\/?$/, clusterPage, "cluster"],
    [/^\/det\/admin\/users\/?$/, usersPage, "users"],
    [/^\/det\/agents\/?$/, agentsPage, "agents"],
    [/^\/det\/webhooks\/?$/, webhooksPage, "webhooks"],
    [/^\/det\/master-logs\/?$/, masterLogsPage, "master-logs"],
    [/^\/det\/policy\/?$/, policyPage, "policy"],
    [/^\/det\/settings\/?$/, settingsPage, "settings"],
  ];
}

let current = null;

async function refresh() {
  if (!current) return;
  try {
    await current(document.getElementById("main"));
    showError("", "refresh");
  } catch (e) {
    showError(e.message, "refresh");
  }
}

// The cluster message an admin set (GetMaster answers it without a login, so the login page
// shows it too), as text: never markup.
async function showClusterMessage() {
  const banner = document.getElementById("cluster-message");
  try {
    const r = await fetch("/api/v1/master");
    const m = r.ok ? (await r.json()).clusterMessage : null;
    banner.textContent = m ? m.message : "";
    banner.hidden = !m;
  } catch (e) {
    /* the master blinked: keep what is shown */
  }
}

// What the page shows, to tell whether a refresh changed anything (poll.js backs off when not).
function shown() {
  return document.getElementById("main").textContent + "\u0000" + document.getElementById("cluster-message").textContent;
}

// One poller for the page and the cluster message (poll.js): quiet while hidden or idle.
function startPolling() {
  const paused = document.getElementById("paused");
  const poller = createPoller({
    tick: async () => {
      const before = shown();
      await Promise.all([showClusterMessage(), refresh()]);
      return shown() !== before;
    },
    now: () => Date.now(),
    setTimer: (fn, ms) => setTimeout(fn, ms),
    clearTimer: (t) => clearTimeout(t),
    hidden: () => document.visibilityState === "hidden",
    onPause: (p) => {
      paused.hidden = !p;
    },
  });
  document.addEventListener("visibilitychange", () => poller.visibility());
  for (const kind of ["pointerdown", "pointermove", "keydown", "wheel", "focus"]) {
    window.addEventListener(kind, () => poller.activity(), { passive: true });
  }
  poller.start();
  return poller;
}

async function start() {
  showClusterMessage();
  const path = location.pathname;
  const route = routes().find(([re]) => re.test(path));
  const main = document.getElementById("main");
  if (!route) {
    render(main, h("h1", {}, "Page not found"), h("p", {}, link("/det/", "Back to the experiments")));
    return;
  }
  const [re, page, section] = route;
  if (page === loginPage) {
    // The login page has nothing to refresh but the cluster message (GetMaster caches it a few
    // seconds, so the first read may predate a new one): the same poller, backing off and
    // stopping when nobody is there.
    loginPage(main);
    startPolling();
    return;
  }
  if (!token()) return toLogin();
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("current", a.dataset.section === section);
  const args = path.match(re).slice(1).map((x) => (x === undefined ? x : decodeURIComponent(x)));
  me()
    .then((user) => {
      for (const a of document.querySelectorAll("#nav .admin-only")) a.hidden = !user.admin;
      document.getElementById("who").replaceChildren(
        h("a", { href: "/det/settings", title: "Your settings: password, default workspace, access tokens", "data-section": "settings", class: section === "settings" ? "current" : "" }, user.username),
        " ",
        h("button", {
          class: "link",
          onclick: async () => {
            await api("/api/v1/auth/logout", { method: "POST", body: {} }).catch(() => {});
            localStorage.removeItem(TOKEN_KEY);
            location.assign("/det/login");
          },
        }, "Log out"),
      );
    })
    .catch(() => {});
  let out;
  try {
    out = await page(main, ...args);
    showError("", "refresh");
  } catch (e) {
    showError(e.message, "refresh");
  }
  current = out && typeof out === "object" ? out.refresh : (m) => page(m, ...args);
  startPolling();
}

document.addEventListener("DOMContentLoaded", start);
