// det WebUI: a trial's page (metrics, checkpoints with "register as model version", log viewer).
"use strict";

const LOG_PAGE = 1000; // lines loaded at a time (start or end)
const LEVELS = ["TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"];

function rowsSeries(rows, metric) {
  return rows.map((r) => [r.totalBatches, ((r.metrics || {}).avg_metrics || {})[metric]]).filter(([, y]) => typeof y === "number");
}

const chosenMetric = {};

function trialCharts(id, exp, train, valid, redraw) {
  const preferred = [exp.searcherMetric, "loss"];
  const charts = [];
  for (const [group, rows] of [["training", train.metrics], ["validation", valid.metrics]]) {
    const names = [...new Set(rows.flatMap((r) => Object.keys((r.metrics || {}).avg_metrics || {})))]
      .filter((n) => rows.some((r) => typeof r.metrics.avg_metrics[n] === "number"));
    if (!names.length) continue;
    const key = id + "/" + group;
    if (!names.includes(chosenMetric[key])) chosenMetric[key] = preferred.find((n) => names.includes(n)) || names[0];
    const select = h("select", { "aria-label": group + " metric", onchange: (ev) => { chosenMetric[key] = ev.target.value; redraw(); } },
      names.map((n) => h("option", { value: n, selected: n === chosenMetric[key] }, n)));
    charts.push(h("section", { class: "chart-box" }, h("h3", {}, group, " ", select),
      lineChart([{ name: group + " " + chosenMetric[key], points: rowsSeries(rows, chosenMetric[key]) }], { xLabel: "batches", yLabel: chosenMetric[key] })));
  }
  return charts;
}

// The form that registers a checkpoint as a version of a model (a new model or an existing one).
function registerForm(c, done) {
  const box = h("form", { class: "register", onsubmit: async (ev) => {
    ev.preventDefault();
    const f = new FormData(box);
    let model = String(f.get("model") || "");
    const newName = String(f.get("newModel") || "").trim();
    try {
      if (model === "" && !newName) throw new ApiError("name a new model or choose one");
      if (model === "") {
        await api("/api/v1/models", { method: "POST", body: { name: newName } });
        model = newName;
      }
      const body = { modelName: model, checkpointUuid: c.uuid };
      const name = String(f.get("name") || "").trim();
      const comment = String(f.get("comment") || "").trim();
      if (name) body.name = name;
      if (comment) body.comment = comment;
      const { modelVersion: v } = await api(`/api/v1/models/${encodeURIComponent(model)}/versions`, { method: "POST", body });
      showError("");
      done(h("p", { class: "registered" }, "Registered as ", link(`/det/models/${encodeURIComponent(model)}/versions/${v.version}`, `${model} version ${v.version}`), "."));
    } catch (e) {
      showError("register checkpoint: " + e.message);
    }
  } });
  const models = h("select", { name: "model", "aria-label": "model" }, h("option", { value: "" }, "a new model…"));
  api("/api/v1/models?limit=200&archived=false&sortBy=SORT_BY_NAME").then((r) => {
    for (const m of r.models) models.appendChild(h("option", { value: m.name }, m.name));
  }).catch(() => {});
  render(box,
    h("label", {}, "Model ", models),
    h("label", {}, "New model name ", h("input", { name: "newModel", placeholder: "used when 'a new model'" })),
    h("label", {}, "Version name ", h("input", { name: "name" })),
    h("label", {}, "Comment ", h("input", { name: "comment" })),
    h("button", { type: "submit" }, "Register"),
    h("button", { type: "button", onclick: () => done(null) }, "Cancel"),
  );
  return box;
}

// Deletes a checkpoint after one question: its experiment's checkpoint-GC task removes the
// files (the row says so until then); a refusal (not the owner, registered, a running
// experiment) shows the master's message.
async function deleteCheckpoint(c, cell) {
  if (!confirm(`Delete checkpoint ${c.uuid}? Its files are removed from storage; this cannot be undone.`)) return;
  try {
    await api("/api/v1/checkpoints", { method: "DELETE", body: { checkpointUuids: [c.uuid] } });
    showError("");
    render(cell, h("span", { class: "muted deleting" }, "Deletion queued (the checkpoint GC removes its files)"));
  } catch (e) {
    showError("delete checkpoint: " + e.message);
  }
}

// Checkpoints with "register as model version" and delete; withTrial adds the trial (an
// experiment's list).
function checkpointsTable(ckpts, withTrial = false) {
  if (!ckpts.length) return h("p", { class: "muted" }, "No checkpoints yet.");
  const heads = [...(withTrial ? ["Trial"] : []), "UUID", "Batches", "State", "Reported", "Validation", ""];
  return h("table", { class: "checkpoints" },
    h("thead", {}, h("tr", {}, heads.map((x) => h("th", {}, x)))),
    h("tbody", {}, ckpts.map((c) => {
      const slot = h("td", { colspan: heads.length });
      const extra = h("tr", { class: "register-row", hidden: true }, slot);
      const done = (node) => {
        if (node) render(slot, node);
        else extra.hidden = true;
      };
      const vmetrics = ((c.training || {}).validationMetrics || {}).avgMetrics || {};
      const state = stateName(c.state);
      const actions = h("span", { class: "actions" },
        state === "COMPLETED" ? h("button", { onclick: () => { extra.hidden = false; render(slot, registerForm(c, done)); } }, "Register as model version…") : null,
        state === "COMPLETED" || state === "PARTIALLY_DELETED" ? h("button", { class: "danger", onclick: () => deleteCheckpoint(c, actions) }, "Delete…") : null);
      return [
        h("tr", { "data-uuid": c.uuid },
          withTrial ? h("td", {}, link("/det/trials/" + (c.training || {}).trialId, "trial " + (c.training || {}).trialId)) : null,
          h("td", {}, h("code", {}, c.uuid)),
          h("td", {}, String(((c.metadata || {}).steps_completed) ?? "")),
          h("td", {}, stateName(c.state)),
          h("td", {}, when(c.reportTime)),
          h("td", {}, Object.entries(vmetrics).map(([k, v]) => `${k}=${num(v)}`).join(" ")),
          h("td", {}, actions),
        ),
        extra,
      ];
    })),
  );
}

async function trialPage(main, id) {
  const top = h("div");
  const logs = h("section", { class: "logs-box" });
  render(main, top, h("h2", {}, "Logs"), logs);
  let t = null;
  const load = async () => {
    const [{ trial }, train, valid, ckpts] = await Promise.all([
      api("/api/v1/trials/" + id),
      api(`/api/v1/trials/${id}/metrics?group=training`),
      api(`/api/v1/trials/${id}/metrics?group=validation`),
      api(`/api/v1/trials/${id}/checkpoints`),
    ]);
    t = trial;
    const { experiment: exp } = await api("/api/v1/experiments/" + t.experimentId);
    const summaryRows = [];
    const groupName = { avg_metrics: "training", validation_metrics: "validation" };
    for (const [key, metrics] of Object.entries(t.summaryMetrics || {})) {
      for (const [name, m] of Object.entries(metrics || {})) {
        summaryRows.push([groupName[key] || key, name, num(m.last), num(m.min), num(m.max), m.count === undefined ? "" : String(m.count)]);
      }
    }
    const charts = trialCharts(id, exp, train, valid, load);
    render(top,
      h("h1", {}, `Trial ${t.id} `, badge(t.state), " ",
        !isTerminal(t.state) ? h("button", { class: "danger", onclick: () => { if (confirm(`Kill trial ${t.id}?`)) act("kill trial " + t.id, () => api(`/api/v1/trials/${t.id}/kill`, { method: "POST", body: {} })); } }, "Kill") : null),
      facts([
        ["Experiment", link("/det/experiments/" + t.experimentId, `experiment ${t.experimentId}: ${exp.name}`)],
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
      checkpointsTable(ckpts.checkpoints || []),
    );
  };
  await load();
  logViewer(logs, `/api/v1/trials/${id}/logs`, `trial-${id}`, !isTerminal(t.state));
  // The summary refreshes while the trial runs, unless a registration form is open.
  return { refresh: () => (t && isTerminal(t.state)) || top.querySelector("form.register") ? null : load() };
}

// ---------------------------------------------------------------- log viewer

function logLine(r) {
  const level = String(r.level || "LOG_LEVEL_INFO").replace(/^LOG_LEVEL_/, "");
  return {
    level,
    text: (r.timestamp ? r.timestamp.replace("T", " ").replace(/\.\d+Z?$/, "").replace(/Z$/, "") + " " : "") +
      (r.agentId ? `[${r.agentId}] ` : "") +
      (r.rankId !== null && r.rankId !== undefined ? `[rank=${r.rankId}] ` : "") + level.padEnd(8) + " " + String(r.log || "").replace(/\n$/, ""),
  };
}

// A log viewer over a TrialLogs or TaskLogs path (NDJSON); name: the download's file name.
function logViewer(box, path, name, live) {
  const st = { levels: new Set(LEVELS.slice(1)), rank: "", agent: "", text: "", regex: false, follow: live, from: "end" };
  const out = h("pre", { class: "logs", tabindex: 0, "aria-label": "log lines" });
  const status = h("span", { class: "muted log-status" });
  let controller = null;
  let count = 0;

  const params = (extra) => {
    const p = new URLSearchParams(extra);
    if (st.levels.size < LEVELS.length) for (const l of st.levels) p.append("levels", "LOG_LEVEL_" + l);
    for (const r of st.rank.split(",").map((x) => x.trim()).filter(Boolean)) p.append("rankIds", r);
    for (const a of st.agent.split(",").map((x) => x.trim()).filter(Boolean)) p.append("agentIds", a);
    if (st.text) {
      p.set("searchText", st.text);
      if (st.regex) p.set("enableRegex", "true");
    }
    return p;
  };
  let lastId = -1; // lines come in id order; a followed stream may repeat the newest ones
  const add = (lines) => {
    const frag = document.createDocumentFragment();
    for (const r of lines) {
      const lid = Number(r.id);
      if (Number.isFinite(lid)) {
        if (lid <= lastId) continue;
        lastId = lid;
      }
      const l = logLine(r);
      frag.appendChild(h("span", { class: "log-line lvl-" + l.level }, l.text + "\n"));
    }
    const atEnd = out.scrollTop + out.clientHeight >= out.scrollHeight - 4;
    out.appendChild(frag);
    count += lines.length;
    if (atEnd || st.from === "end") out.scrollTop = out.scrollHeight;
  };
  const parse = (text) => text.split("\n").filter(Boolean).map((l) => JSON.parse(l).result);
  // When retention deleted the task's logs (the master's X-Det-Logs-Deleted header, an RFC 3339
  // time) as "YYYY-MM-DD HH:MM UTC"; null when it did not.
  const deletedAt = async () => {
    const r = await fetch(`${path}?limit=1`, { headers: { Authorization: "Bearer " + token() } });
    const when = r.ok ? r.headers.get("X-Det-Logs-Deleted") : null;
    if (r.body) await r.body.cancel();
    return when ? when.replace("T", " ").replace(/:\d\d(\.\d+)?Z$/, " UTC") : null;
  };

  // Streams the response body line by line (NDJSON) until it ends or is aborted.
  const stream = async (path, signal) => {
    const r = await fetch(path, { headers: { Authorization: "Bearer " + token() }, signal });
    if (!r.ok) throw new ApiError(((await r.json().catch(() => ({}))).message) || r.status + " " + r.statusText);
    const reader = r.body.getReader();
    const dec = new TextDecoder();
    let rest = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      rest += dec.decode(value, { stream: true });
      const cut = rest.lastIndexOf("\n");
      if (cut < 0) continue;
      add(parse(rest.slice(0, cut)));
      rest = rest.slice(cut + 1);
    }
    if (rest.trim()) add(parse(rest));
  };

  const reload = async () => {
    if (controller) controller.abort();
    controller = new AbortController();
    const signal = controller.signal;
    out.replaceChildren();
    count = 0;
    lastId = -1;
    showError("", "logs");
    try {
      status.textContent = "loading…";
      let lines;
      if (st.from === "end") {
        lines = parse(await api(`${path}?` + params({ limit: LOG_PAGE, orderBy: "ORDER_BY_DESC" }), { raw: true })).reverse();
      } else {
        lines = parse(await api(`${path}?` + params({ limit: LOG_PAGE }), { raw: true }));
      }
      if (signal.aborted) return;
      add(lines);
      if (st.from === "start") out.scrollTop = 0;
      const gone = lines.length ? null : await deletedAt();
      if (signal.aborted) return;
      if (gone) out.appendChild(h("span", { class: "muted empty logs-deleted" }, `Logs deleted by the retention policy on ${gone}.\n`));
      else if (!lines.length) out.appendChild(h("span", { class: "muted empty" }, "No log lines" + (st.levels.size < LEVELS.length || st.rank || st.agent || st.text ? " match the filters." : " yet.") + "\n"));
      if (st.follow && st.from === "end") {
        status.textContent = "following…";
        // From just before the newest line shown (timestampAfter is strict; the repeats are
        // dropped by id), or from the start when there is none.
        const newest = lines.length ? Date.parse(lines[lines.length - 1].timestamp) : NaN;
        const p = params({ follow: "true" });
        if (Number.isFinite(newest)) p.set("timestampAfter", new Date(newest - 1).toISOString());
        await stream(`${path}?` + p, signal);
        if (!signal.aborted) status.textContent = `${count} lines; the trial has ended`;
      } else {
        status.textContent = `${count} lines` + (lines.length >= LOG_PAGE ? ` (the ${st.from === "end" ? "last" : "first"} ${LOG_PAGE})` : "");
      }
    } catch (e) {
      if (e.name !== "AbortError") showError("logs: " + e.message, "logs");
    }
  };

  const download = async () => {
    try {
      const text = parse(await api(`${path}?` + params({}), { raw: true })).map((r) => logLine(r).text).join("\n") + "\n";
      const url = URL.createObjectURL(new Blob([text], { type: "text/plain" }));
      const a = h("a", { href: url, download: `${name}-logs.txt` });
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      showError("download logs: " + e.message, "logs");
    }
  };

  // A pause in typing applies that filter (one timer per field).
  const debounced = (fn) => {
    let timer;
    return (ev) => {
      clearTimeout(timer);
      timer = setTimeout(() => fn(ev), 300);
    };
  };
  const follow = h("input", { type: "checkbox", name: "follow", checked: st.follow, onchange: (ev) => { st.follow = ev.target.checked; if (st.follow) st.from = "end"; reload(); } });
  render(box,
    h("form", { class: "toolbar log-tools", onsubmit: (ev) => ev.preventDefault() },
      h("fieldset", { class: "levels" }, h("legend", {}, "Levels"), LEVELS.map((l) => h("label", {}, h("input", { type: "checkbox", name: "level", value: l, checked: st.levels.has(l), onchange: (ev) => {
        ev.target.checked ? st.levels.add(l) : st.levels.delete(l);
        reload();
      } }), l))),
      h("label", {}, "Ranks ", h("input", { name: "rank", size: 6, placeholder: "0,1", oninput: debounced((ev) => { st.rank = ev.target.value; reload(); }) })),
      h("label", {}, "Agents ", h("input", { name: "agent", size: 10, placeholder: "agent ids", oninput: debounced((ev) => { st.agent = ev.target.value; reload(); }) })),
      h("label", {}, "Text ", h("input", { name: "search", placeholder: "contains…", oninput: debounced((ev) => { st.text = ev.target.value; reload(); }) })),
      h("label", {}, h("input", { type: "checkbox", name: "regex", onchange: (ev) => { st.regex = ev.target.checked; if (st.text) reload(); } }), "regex"),
      h("label", {}, follow, "follow"),
      h("button", { type: "button", onclick: () => { st.from = "start"; st.follow = false; follow.checked = false; reload(); } }, "Start"),
      h("button", { type: "button", onclick: () => { st.from = "end"; reload(); } }, "End"),
      h("button", { type: "button", onclick: download }, "Download"),
      status,
    ),
    out,
  );
  reload();
}
