// det WebUI: one page per route, all data from the REST API with the user's session token.
// The DOM is built from text nodes only (see h()); nothing from the API is parsed as HTML.
"use strict";

const TOKEN_KEY = "det.token";
const REFRESH_MS = 5000;

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

function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message || "";
  box.hidden = !message;
}

async function act(what, fn) {
  try {
    await fn();
    showError("");
    await refresh();
  } catch (e) {
    showError(what + ": " + e.message);
  }
}

// ---------------------------------------------------------------- chart

// series: [{name, points: [[x, y], ...]}]; an SVG line chart with labelled axes and a legend.
function lineChart(series, { xLabel, yLabel }) {
  const pts = series.flatMap((x) => x.points).filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
  if (!pts.length) return h("p", { class: "muted chart-empty" }, "No " + yLabel + " reported yet.");
  const W = 720, H = 260, L = 64, R = 12, T = 12, B = 36;
  let [x0, x1] = [Math.min(...pts.map((p) => p[0])), Math.max(...pts.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...pts.map((p) => p[1])), Math.max(...pts.map((p) => p[1]))];
  if (x0 === x1) [x0, x1] = [x0 - 1, x1 + 1];
  if (y0 === y1) [y0, y1] = [y0 - Math.abs(y0 || 1) * 0.1, y1 + Math.abs(y1 || 1) * 0.1];
  const X = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const Y = (y) => H - B - ((y - y0) / (y1 - y0)) * (H - T - B);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": yLabel + " by " + xLabel });
  svg.appendChild(s("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }));
  svg.appendChild(s("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }));
  for (let i = 0; i <= 4; i++) {
    const xv = x0 + ((x1 - x0) * i) / 4, yv = y0 + ((y1 - y0) * i) / 4;
    svg.appendChild(s("text", { x: X(xv), y: H - B + 16, class: "tick", "text-anchor": "middle" }, num(+xv.toPrecision(4))));
    svg.appendChild(s("text", { x: L - 6, y: Y(yv) + 4, class: "tick", "text-anchor": "end" }, num(yv)));
    svg.appendChild(s("line", { x1: L, y1: Y(yv), x2: W - R, y2: Y(yv), class: "grid" }));
  }
  svg.appendChild(s("text", { x: (L + W - R) / 2, y: H - 4, class: "label", "text-anchor": "middle" }, xLabel));
  series.forEach((ser, i) => {
    const good = ser.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
    if (!good.length) return;
    const cls = "series s" + (i % 8);
    const line = s("polyline", { points: good.map(([x, y]) => X(x) + "," + Y(y)).join(" "), class: cls, "data-series": ser.name });
    line.appendChild(s("title", {}, ser.name));
    svg.appendChild(line);
    for (const [x, y] of good) {
      svg.appendChild(s("circle", { cx: X(x), cy: Y(y), r: 2.5, class: cls }, s("title", {}, `${ser.name}: ${num(y)} at ${num(x)}`)));
    }
  });
  const legend = h("ul", { class: "legend" }, series.map((ser, i) => h("li", {}, h("span", { class: "swatch s" + (i % 8) }), ser.name)));
  return h("figure", {}, h("figcaption", {}, yLabel + " by " + xLabel), svg, legend);
}

function seriesOf(rows, metric) {
  return rows
    .map((r) => [r.totalBatches, ((r.metrics || {}).avg_metrics || {})[metric]])
    .filter(([, y]) => typeof y === "number");
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

function experimentActions(e) {
  const st = stateName(e.state);
  const post = (verb) => () => act(verb + " experiment " + e.id, () => api(`/api/v1/experiments/${e.id}/${verb}`, { method: "POST", body: {} }));
  const buttons = [];
  if (st === "ACTIVE") buttons.push(h("button", { onclick: post("pause") }, "Pause"));
  if (st === "PAUSED") buttons.push(h("button", { onclick: post("activate") }, "Activate"));
  if (st === "ACTIVE" || st === "PAUSED") {
    buttons.push(
      h("button", {
        class: "danger",
        onclick: () => {
          if (confirm(`Kill experiment ${e.id} (${e.name})? Running trials stop without a checkpoint.`)) post("kill")();
        },
      }, "Kill"),
    );
  }
  return h("span", { class: "actions" }, buttons);
}

async function experimentsPage(main) {
  const out = await api("/api/v1/experiments?limit=200&orderBy=ORDER_BY_DESC");
  const rows = out.experiments.map((e) => [
    link("/det/experiments/" + e.id, String(e.id)),
    link("/det/experiments/" + e.id, e.name),
    badge(e.state),
    e.searcherType,
    String(e.numTrials),
    e.progress === null || e.progress === undefined ? "" : Math.round(e.progress * 100) + "%",
    e.username,
    when(e.startTime),
    experimentActions(e),
  ]);
  render(main, 
    h("h1", {}, "Experiments"),
    table(["ID", "Name", "State", "Searcher", "Trials", "Progress", "User", "Started", ""], rows,
      "No experiments yet. Create one with: det experiment create CONFIG.yaml CONTEXT_DIR"),
  );
}

async function experimentPage(main, id) {
  const [{ experiment: e, config, jobSummary }, { trials }] = await Promise.all([
    api("/api/v1/experiments/" + id),
    api(`/api/v1/experiments/${id}/trials`),
  ]);
  const metric = e.searcherMetric;
  const shown = trials.slice(0, 50);
  const curves = await Promise.all(
    shown.map((t) => api(`/api/v1/trials/${t.id}/metrics?group=validation`).then((r) => ({ name: "trial " + t.id, points: seriesOf(r.metrics, metric) }))),
  );
  const smaller = ((config || {}).searcher || {}).smaller_is_better !== false;
  const configOpen = !!document.querySelector("details.config-box[open]");
  render(main, 
    h("h1", {}, `Experiment ${e.id}: `, e.name, " ", badge(e.state), " ", experimentActions(e)),
    e.description ? h("p", {}, e.description) : null,
    facts([
      ["Searcher", `${e.searcherType} on ${metric} (${smaller ? "smaller" : "larger"} is better)`],
      ["Trials", String(trials.length)],
      ["Best trial", e.bestTrialId ? h("span", {}, link("/det/trials/" + e.bestTrialId, "trial " + e.bestTrialId), ` (${metric} ${num(e.bestTrialSearcherMetric)})`) : ""],
      ["Queue", jobSummary && stateName(jobSummary.state) !== "UNSPECIFIED" ? `${stateName(jobSummary.state)}, ${jobSummary.jobsAhead} job(s) ahead` : ""],
      ["Progress", e.progress === null || e.progress === undefined ? "" : Math.round(e.progress * 100) + "%"],
      ["Labels", (e.labels || []).join(", ")],
      ["Owner", e.username],
      ["Started", when(e.startTime)],
      ["Ended", when(e.endTime)],
    ]),
    h("h2", {}, "Validation"),
    lineChart(curves, { xLabel: "batches", yLabel: metric }),
    h("h2", {}, "Trials"),
    table(
      ["ID", "State", "Batches", metric, "Restarts", "Hyperparameters"],
      trials.map((t) => [
        link("/det/trials/" + t.id, String(t.id)),
        badge(t.state),
        String(t.totalBatchesProcessed),
        num(t.searcherMetricValue),
        String(t.restarts),
        flat(t.hparams).map(([k, v]) => `${k}=${num(v)}`).join("  "),
      ]),
      "No trials yet.",
    ),
    h("details", { class: "config-box", open: configOpen }, h("summary", {}, "Configuration"), h("pre", { class: "config" }, JSON.stringify(config, null, 2))),
  );
}

const chosenMetric = {};

async function trialPage(main, id) {
  const [{ trial: t }, train, valid, ckpts, logs] = await Promise.all([
    api("/api/v1/trials/" + id),
    api(`/api/v1/trials/${id}/metrics?group=training`),
    api(`/api/v1/trials/${id}/metrics?group=validation`),
    api(`/api/v1/trials/${id}/checkpoints`),
    api(`/api/v1/trials/${id}/logs?limit=200`, { raw: true }),
  ]);
  const { experiment: exp } = await api("/api/v1/experiments/" + t.experimentId);
  const preferred = [exp.searcherMetric, "loss"];
  const charts = [];
  for (const [group, rows] of [["training", train.metrics], ["validation", valid.metrics]]) {
    const names = [...new Set(rows.flatMap((r) => Object.keys((r.metrics || {}).avg_metrics || {})))]
      .filter((n) => rows.some((r) => typeof r.metrics.avg_metrics[n] === "number"));
    if (!names.length) continue;
    const key = id + "/" + group;
    if (!names.includes(chosenMetric[key])) chosenMetric[key] = preferred.find((n) => names.includes(n)) || names[0];
    const select = h("select", { "aria-label": group + " metric", onchange: (ev) => { chosenMetric[key] = ev.target.value; refresh(); } },
      names.map((n) => h("option", { value: n, selected: n === chosenMetric[key] }, n)));
    charts.push(h("section", { class: "chart-box" }, h("h3", {}, group, " ", select), lineChart([{ name: group + " " + chosenMetric[key], points: seriesOf(rows, chosenMetric[key]) }], { xLabel: "batches", yLabel: chosenMetric[key] })));
  }
  const summaryRows = [];
  const groupName = { avg_metrics: "training", validation_metrics: "validation" };
  for (const [key, metrics] of Object.entries(t.summaryMetrics || {})) {
    const group = groupName[key] || key;
    for (const [name, m] of Object.entries(metrics || {})) {
      summaryRows.push([group, name, num(m.last), num(m.min), num(m.max), m.count === undefined ? "" : String(m.count)]);
    }
  }
  const lines = logs.split("\n").filter(Boolean).map((l) => {
    try {
      const r = JSON.parse(l).result;
      return (r.rankId !== null && r.rankId !== undefined ? `[rank=${r.rankId}] ` : "") + (r.log || "").replace(/\n$/, "");
    } catch (e) {
      return l;
    }
  });
  const active = !["COMPLETED", "CANCELED", "ERROR", "STOPPING_KILLED", "STOPPING_CANCELED", "STOPPING_COMPLETED", "STOPPING_ERROR"].includes(stateName(t.state));
  render(main, 
    h("h1", {}, `Trial ${t.id} `, badge(t.state), " ",
      active ? h("button", { class: "danger", onclick: () => { if (confirm(`Kill trial ${t.id}?`)) act("kill trial " + t.id, () => api(`/api/v1/trials/${t.id}/kill`, { method: "POST", body: {} })); } }, "Kill") : null),
    facts([
      ["Experiment", link("/det/experiments/" + t.experimentId, "experiment " + t.experimentId)],
      ["Batches", String(t.totalBatchesProcessed)],
      ["Searcher metric", num(t.searcherMetricValue)],
      ["Restarts", String(t.restarts)],
      ["Hyperparameters", flat(t.hparams).map(([k, v]) => `${k}=${num(v)}`).join("  ")],
      ["Started", when(t.startTime)],
      ["Ended", when(t.endTime)],
    ]),
    h("h2", {}, "Metrics"),
    ...(charts.length ? charts : [h("p", { class: "muted" }, "No metrics reported yet.")]),
    table(["Group", "Metric", "Last", "Min", "Max", "Count"], summaryRows, "No summary yet."),
    h("h2", {}, "Checkpoints"),
    table(["UUID", "Batches", "State", "Reported"], (ckpts.checkpoints || []).map((c) => [
      h("code", {}, c.uuid), String(((c.metadata || {}).steps_completed) ?? ""), stateName(c.state), when(c.reportTime),
    ]), "No checkpoints yet."),
    h("h2", {}, "Logs"),
    h("pre", { class: "logs" }, lines.length ? lines.join("\n") : "No log lines yet."),
  );
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
      ["#", "Job", "State", "Jobs ahead", "Priority", "Weight", "Slots", "Pool", "Waiting because", "User", ""],
      jobs.map((j, i) => [
        String(i + 1),
        link("/det/experiments/" + j.entityId, `experiment ${j.entityId}: ${j.name}`),
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
    h("h2", {}, "Agents"),
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

const ROUTES = [
  [/^\/det\/login\/?$/, loginPage, null],
  [/^\/det\/?$/, experimentsPage, "experiments"],
  [/^\/det\/experiments\/?$/, experimentsPage, "experiments"],
  [/^\/det\/experiments\/(\d+)(\/.*)?$/, experimentPage, "experiments"],
  [/^\/det\/trials\/(\d+)(\/.*)?$/, trialPage, "experiments"],
  [/^\/det\/jobs\/?$/, jobsPage, "jobs"],
  [/^\/det\/cluster(s)?\/?$/, clusterPage, "cluster"],
];

let current = null;

async function refresh() {
  if (!current) return;
  const main = document.getElementById("main");
  try {
    await current(main);
    showError("");
  } catch (e) {
    showError(e.message);
  }
}

async function start() {
  const path = location.pathname;
  const route = ROUTES.find(([re]) => re.test(path));
  const main = document.getElementById("main");
  if (!route) {
    render(main, h("h1", {}, "Page not found"), h("p", {}, link("/det/", "Back to the experiments")));
    return;
  }
  const [re, page, section] = route;
  if (page === loginPage) return loginPage(main);
  if (!token()) return toLogin();
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("current", a.dataset.section === section);
  const args = path.match(re).slice(1);
  current = (m) => page(m, ...args);
  api("/api/v1/me")
    .then(({ user }) => {
      document.getElementById("who").replaceChildren(
        user.username + " ",
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
  await refresh();
  setInterval(() => {
    if (!document.hidden) refresh();
  }, REFRESH_MS);
}

document.addEventListener("DOMContentLoaded", start);
