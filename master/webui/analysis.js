// det WebUI: an experiment's page (learning curves of all trials, hyperparameter views with
// brushing, the trials table, compare) and the trial comparison page.
"use strict";

// Points per trial and metric, sampled by the master (CompareTrials' maxDatapoints): up to
// CURVE_POINTS each, and CURVE_BUDGET over all the trials drawn (100 trials: 500 each, still
// finer than the chart's 720 units across); first and last points are always kept.
const CURVE_POINTS = 1000;
const CURVE_BUDGET = 50000;
const pointsPerTrial = (n) => Math.max(100, Math.min(CURVE_POINTS, Math.floor(CURVE_BUDGET / Math.max(1, n))));
const SERIES_CHUNK = 25; // trials per time-series request (short URLs; requests in parallel)

// The metric ids ("group.name") a trial has reported, from its summary.
function metricIdsOf(trials) {
  const ids = new Set();
  for (const t of trials) {
    for (const [key, metrics] of Object.entries(t.summaryMetrics || {})) {
      const group = key === "avg_metrics" ? "training" : key === "validation_metrics" ? "validation" : key;
      for (const [name, m] of Object.entries(metrics || {})) if (m && (typeof m.last === "number" || m.type === "number")) ids.add(group + "." + name);
    }
  }
  return [...ids].sort((a, b) => (a.startsWith("validation.") === b.startsWith("validation.") ? a.localeCompare(b) : a.startsWith("validation.") ? -1 : 1));
}

function lastOf(t, metricId) {
  const [group, ...rest] = metricId.split(".");
  const key = group === "training" ? "avg_metrics" : group === "validation" ? "validation_metrics" : group;
  const m = ((t.summaryMetrics || {})[key] || {})[rest.join(".")];
  return m ? m.last : undefined;
}

// {trialId: [[batches, value], ...]} of one metric, sampled by the master.
async function seriesOf(trialIds, metricId) {
  const name = metricId.slice(metricId.indexOf(".") + 1);
  const chunks = [];
  for (let i = 0; i < trialIds.length; i += SERIES_CHUNK) chunks.push(trialIds.slice(i, i + SERIES_CHUNK));
  const answers = await Promise.all(chunks.map((ids) => {
    const p = new URLSearchParams({ maxDatapoints: pointsPerTrial(trialIds.length) });
    for (const id of ids) p.append("trialIds", id);
    p.append("metricIds", metricId);
    return api("/api/v1/trials/time-series?" + p.toString());
  }));
  const out = {};
  for (const r of answers) {
    for (const t of r.trials) {
      const pts = [];
      for (const m of t.metrics || []) for (const dp of m.data || []) {
        const v = (dp.values || {})[name];
        if (typeof v === "number") pts.push([dp.batches, v]);
      }
      out[t.trial.id] = pts;
    }
  }
  return out;
}

function metricSelect(ids, chosen, label, onchange) {
  return h("select", { "aria-label": label, onchange: (ev) => onchange(ev.target.value) }, ids.map((id) => h("option", { value: id, selected: id === chosen }, id)));
}

// Draws the curves, then records when the browser has laid them out and painted them
// (data-ready-ms: ms since navigation; data-start-ms: when the drawing began; data-draw-ms:
// building the chart) for the benchmark in the WebUI test.
function curvesFigure(series, metricId, highlight) {
  const t0 = performance.now();
  const fig = lineChart(series, { xLabel: "batches", yLabel: metricId, cls: "curves", highlight });
  const drawn = performance.now() - t0;
  requestAnimationFrame(() => requestAnimationFrame(() => {
    fig.setAttribute("data-start-ms", t0.toFixed(1));
    fig.setAttribute("data-draw-ms", drawn.toFixed(1));
    fig.setAttribute("data-ready-ms", performance.now().toFixed(1));
  }));
  return fig;
}

// A brushed range in words: "lr 0.4776 to 0.9097", "optimizer in adam, sgd".
function rangeText(d, [lo, hi]) {
  if (!d) return "";
  if (d.scale.kind === "num") {
    const at = (p) => fmt(d.scale.lo + p * (d.scale.hi - d.scale.lo));
    return `${d.label} ${at(lo)} to ${at(hi)}`;
  }
  const inside = d.scale.cats.filter((c) => {
    const p = d.scale.pos(JSON.parse(c));
    return p >= lo - 1e-9 && p <= hi + 1e-9;
  });
  return `${d.label} in ${inside.map((c) => d.scale.label(c)).join(", ") || "nothing"}`;
}

// Fork (a new experiment from this one's code, with a config edited first) and Continue (a
// finished single-trial experiment trains further from its latest checkpoint). Their forms go
// in their own box, which the page's periodic redraw leaves alone.
function lineageActions(e, box) {
  const fork = () => {
    const area = h("textarea", { name: "fork-config", rows: 18, "aria-label": "fork config" });
    area.value = e.originalConfig || JSON.stringify(e.config, null, 2);
    render(box, h("form", { class: "fork", onsubmit: (ev) => {
      ev.preventDefault();
      act("fork experiment " + e.id, async () => {
        const made = await api("/api/v1/experiments", { method: "POST", body: { config: area.value, parentId: e.id, projectId: e.projectId, activate: true } });
        location.assign("/det/experiments/" + made.experiment.id);
      }, async () => {});
    } }, h("h2", {}, `Fork experiment ${e.id}`), h("p", { class: "muted" }, "The fork trains this experiment's code with the config below. Secrets show as ******** and must be typed again."),
      area, h("div", {}, h("button", { type: "submit" }, "Create fork"), " ", h("button", { type: "button", onclick: () => render(box) }, "Cancel"))));
  };
  const cont = () => {
    const length = ((e.config || {}).searcher || {}).max_length;
    const unit = length && typeof length === "object" ? Object.keys(length)[0] : null;
    const now = unit ? length[unit] : length;
    const more = h("input", { name: "max-length", type: "number", min: 1, value: now || "", "aria-label": "new max length" });
    render(box, h("form", { class: "continue", onsubmit: (ev) => {
      ev.preventDefault();
      const value = Number(more.value);
      const overrideConfig = JSON.stringify({ searcher: { max_length: unit ? { [unit]: value } : value } });
      act("continue experiment " + e.id, async () => {
        await api("/api/v1/experiments/continue", { method: "POST", body: { id: e.id, overrideConfig } });
        render(box);
      });
    } }, h("h2", {}, `Continue experiment ${e.id}`), h("label", {}, `Train its trial to ${unit || "length"} `, more), " ",
      h("button", { type: "submit" }, "Continue"), " ", h("button", { type: "button", onclick: () => render(box) }, "Cancel")));
  };
  const buttons = [h("button", { title: "Create a new experiment from this one's code and an edited config", onclick: fork }, "Fork")];
  if (isTerminal(e.state) && e.numTrials === 1) buttons.push(h("button", { title: "Train the trial further from its latest checkpoint", onclick: cont }, "Continue"));
  return h("span", { class: "actions" }, buttons);
}

async function experimentPage(main, id) {
  const st = { metric: null, brushes: {}, sort: { key: "metric", desc: false }, picked: new Set(), heat: [null, null], series: {}, seriesMetric: null, seriesIds: "", seriesVersion: 0, selected: null, drawn: "" };
  const boxes = {
    head: h("div"),
    curves: h("section", { class: "curves-box" }),
    hp: h("section", { class: "hp-box" }),
    trials: h("section", { class: "trials-box" }),
    ckpts: h("section", { class: "checkpoints-box" }),
    config: h("div"),
    lineage: h("div"),
  };
  const curveTools = h("div", { class: "toolbar" });
  const curveChart = h("div", { class: "curve-chart" }, h("p", { class: "muted" }, "Loading curves…"));
  render(boxes.curves, curveTools, curveChart);
  render(main, boxes.head, boxes.lineage, h("h2", {}, "Learning curves"), boxes.curves, h("h2", {}, "Hyperparameters"), boxes.hp, h("h2", {}, "Trials"), boxes.trials,
    h("h2", {}, "Checkpoints"), boxes.ckpts, boxes.config);
  let data = null; // {e, config, jobSummary, smaller, trials (null until listed), metricIds}
  let loads = 0; // only the newest load draws

  const setSeries = (series, metric, ids) => {
    st.series = series;
    st.seriesMetric = metric;
    st.seriesIds = ids.join(",");
    st.seriesVersion++;
  };

  // The kept checkpoints, best first by the searcher metric (not redrawn under an open form).
  const loadCheckpoints = async (smaller) => {
    if (boxes.ckpts.querySelector("form.register")) return;
    const q = `states=STATE_COMPLETED&limit=100&sortByAttr=SORT_BY_SEARCHER_METRIC&orderBy=${smaller ? "ORDER_BY_ASC" : "ORDER_BY_DESC"}`;
    const { checkpoints } = await api(`/api/v1/experiments/${id}/checkpoints?${q}`);
    if (!boxes.ckpts.querySelector("form.register")) render(boxes.ckpts, checkpointsTable(checkpoints, true));
  };

  // The page draws its curves as soon as their series are in: they need only the experiment
  // (its trial ids and searcher metric), so they are asked for at once, in parallel with the
  // trial list (which the hyperparameter views and the table wait for) and the checkpoints.
  const load = async () => {
    const gen = ++loads;
    const { experiment: e, config, jobSummary } = await api("/api/v1/experiments/" + id);
    if (gen !== loads) return;
    const smaller = ((config || {}).searcher || {}).smaller_is_better !== false;
    data = { e, config, jobSummary, smaller, trials: data ? data.trials : null, metricIds: data ? data.metricIds : [], cost: data ? data.cost : null };
    drawHead();
    const ids = e.trialIds || [];
    const guess = st.metric || (e.searcherMetric ? "validation." + e.searcherMetric : null);
    if (!st.metric) st.metric = guess;
    if (!data.trials) drawCurveTools();
    // Both run on while the list is read; each settles to its error (or null), thrown below.
    const settled = (p) => p.then(() => null, (err) => err);
    const early = settled(guess && ids.length
      ? seriesOf(ids, guess).then((series) => {
        if (gen !== loads || st.metric !== guess) return; // a newer load, or another metric chosen
        setSeries(series, guess, ids);
        drawCurves();
      })
      : Promise.resolve());
    const ckpts = settled(loadCheckpoints(smaller));
    const cost = api(`/api/v1/experiments/${id}/cost`).catch(() => null);
    const { trials } = await api(`/api/v1/experiments/${id}/trials`);
    data.cost = await cost;
    if (gen !== loads) return;
    const metricIds = metricIdsOf(trials);
    if (!st.metric || !metricIds.includes(st.metric)) st.metric = metricIds.includes("validation." + e.searcherMetric) ? "validation." + e.searcherMetric : metricIds[0] || null;
    data.trials = trials;
    data.metricIds = metricIds;
    drawHead();
    draw();
    const failed = await early;
    if (failed) throw failed;
    // The list may hold trials the experiment did not (created meanwhile), or the metric
    // guessed may not be one the trials report: then the series are asked again.
    const listed = trials.map((t) => t.id);
    if (gen === loads && st.metric && (st.seriesMetric !== st.metric || st.seriesIds !== listed.join(","))) {
      const want = st.metric;
      const series = await seriesOf(listed, want);
      if (gen !== loads || st.metric !== want) return;
      setSeries(series, want, listed);
      drawCurves();
    }
    const refused = await ckpts;
    if (refused) throw refused;
  };

  const drawHead = () => {
    const { e, config, jobSummary, trials, smaller } = data;
    const metric = e.searcherMetric;
    const configOpen = !!boxes.config.querySelector("details[open]");
    render(boxes.head,
      h("h1", {}, `Experiment ${e.id}: `, e.name, " ", badge(e.state), unmanagedMark(e), " ", experimentActions(e), " ", e.unmanaged ? null : lineageActions(e, boxes.lineage)),
      e.description ? h("p", {}, e.description) : null,
      facts([
        ["Searcher", `${e.searcherType} on ${metric} (${smaller ? "smaller" : "larger"} is better)`],
        ["Trials", String(trials ? trials.length : e.numTrials)],
        ["Best trial", e.bestTrialId ? h("span", {}, link("/det/trials/" + e.bestTrialId, "trial " + e.bestTrialId), ` (${metric} ${num(e.bestTrialSearcherMetric)})`) : ""],
        ["Queue", jobSummary && !isTerminal(e.state) && stateName(jobSummary.state) !== "UNSPECIFIED" ? `${stateName(jobSummary.state)}, ${jobSummary.jobsAhead} job(s) ahead` : ""],
        ["Cost", data.cost ? h("span", { class: "experiment-cost" }, costText(data.cost)) : ""],
        ["Progress", e.progress === null || e.progress === undefined ? "" : Math.round(e.progress * 100) + "%"],
        ["Labels", (e.labels || []).join(", ")],
        ["Unmanaged", e.unmanaged ? "yes: a script run outside the cluster reports here" + (e.externalExperimentId ? ` (external id ${e.externalExperimentId})` : "") : ""],
        ["Forked from", e.forkedFrom ? link("/det/experiments/" + e.forkedFrom, "experiment " + e.forkedFrom) : ""],
        ["Owner", e.username],
        ["Started", when(e.startTime)],
        ["Ended", when(e.endTime)],
      ]),
    );
    render(boxes.config, h("details", { class: "config-box", open: configOpen }, h("summary", {}, "Configuration"), h("pre", { class: "config" }, JSON.stringify(config, null, 2))));
  };

  // The metric chooser (before the trial list is in: the metric asked for only).
  const drawCurveTools = () => {
    const ids = data && data.trials ? data.metricIds : st.metric ? [st.metric] : [];
    render(curveTools, h("label", {}, "Metric", metricSelect(ids, st.metric, "curve metric", async (v) => {
      st.metric = v;
      drawCurves();
      const trialIds = data.trials ? data.trials.map((t) => t.id) : data.e.trialIds || [];
      const series = await seriesOf(trialIds, v);
      if (st.metric !== v) return; // another metric was chosen meanwhile
      setSeries(series, v, trialIds);
      drawCurves();
    })));
  };

  // The curves of the series in hand, dimmed outside the brushed ranges; not redrawn when
  // nothing they show has changed (a sort, a pick, the trial list arriving).
  const drawCurves = () => {
    if (!st.metric) {
      st.drawn = "";
      render(curveChart, h("p", { class: "muted" }, "No metrics reported yet."));
      return;
    }
    if (st.seriesMetric !== st.metric) {
      st.drawn = "";
      render(curveChart, h("p", { class: "muted" }, "Loading curves…"));
      return;
    }
    const sel = st.selected;
    const key = `${st.seriesVersion}|${sel ? [...sel].join(",") : "*"}`;
    if (key === st.drawn) return;
    st.drawn = key;
    const ids = st.seriesIds ? st.seriesIds.split(",").map(Number) : [];
    const series = ids.filter((t) => st.series[t] && st.series[t].length).map((t) => ({ name: "trial " + t, key: t, points: st.series[t] }));
    render(curveChart, curvesFigure(series, st.metric, sel));
  };

  // Rows of the hyperparameter views: flattened hparams and the searcher metric.
  const hpRows = () => data.trials.map((t) => ({ id: t.id, trial: t, values: Object.fromEntries(flat(t.hparams)), metric: typeof t.searcherMetricValue === "number" ? t.searcherMetricValue : NaN }));

  const draw = () => {
    if (!data || !data.trials) return;
    const { e, trials, metricIds, smaller } = data;
    const rows = hpRows();
    const keys = [...new Set(rows.flatMap((r) => Object.keys(r.values)))].sort();
    const dims = keys.map((k) => ({ key: k, label: k, scale: scaleOf(rows.map((r) => r.values[k])) }));
    const metricDim = { key: "__metric__", label: e.searcherMetric, scale: scaleOf(rows.map((r) => r.metric).filter(Number.isFinite)) };
    const allDims = [...dims, metricDim];
    const valueOf = (r, k) => (k === metricDim.key ? r.metric : r.values[k]);
    const selected = new Set(rows.filter((r) => Object.entries(st.brushes).every(([k, [lo, hi]]) => {
      const d = allDims.find((x) => x.key === k);
      const p = d ? d.scale.pos(valueOf(r, k)) : NaN;
      return !d || (Number.isFinite(p) && p >= lo - 1e-9 && p <= hi + 1e-9);
    })).map((r) => r.id));
    const brushed = Object.keys(st.brushes).length > 0;

    // Learning curves.
    st.selected = brushed ? selected : null;
    drawCurveTools();
    drawCurves();

    // Hyperparameter views.
    const pdata = rows.map((r) => ({ id: r.id, values: { ...r.values, [metricDim.key]: r.metric } }));
    const onBrush = (key, range, bound) => {
      if (range) st.brushes[key] = range;
      else delete st.brushes[key];
      draw();
      // A key moved a bound: the redrawn bound keeps the focus (and is read out again).
      if (bound) {
        const again = [...boxes.hp.querySelectorAll("svg.pcoords .handle")].find((x) => x.dataset.axis === key && x.dataset.bound === bound);
        if (again) again.focus();
      }
    };
    if (!dims.length) {
      render(boxes.hp, h("p", { class: "muted" }, "This experiment has no hyperparameters to compare."));
    } else {
      if (!keys.includes(st.heat[0])) st.heat[0] = keys[0];
      if (!keys.includes(st.heat[1])) st.heat[1] = keys[1] || keys[0];
      const heatSelect = (i, label) => h("select", { "aria-label": label, onchange: (ev) => { st.heat[i] = ev.target.value; draw(); } }, keys.map((k) => h("option", { value: k, selected: k === st.heat[i] }, k)));
      render(boxes.hp,
        h("h3", {}, "Parallel coordinates"),
        h("p", { class: "muted hint" }, "Drag along an axis to keep only the trials inside the range; click an axis to clear its range. With the keyboard: Tab to an axis's lower or upper bound and move it with the arrow keys (Page Up/Down: bigger steps, Home/End: the axis ends, Escape: clear the axis)."),
        h("figure", { class: "pcoords-box" }, parallelCoords(allDims, pdata, st.brushes, onBrush, selected),
          h("figcaption", { class: "brush-state", "aria-live": "polite" }, `${selected.size} of ${rows.length} trials selected`,
            brushed ? h("span", { class: "ranges" }, ": ", Object.entries(st.brushes).map(([k, r]) => rangeText(allDims.find((d) => d.key === k), r)).join("; ")) : null, " ",
            brushed ? h("button", { onclick: () => { st.brushes = {}; draw(); } }, "Clear ranges") : null)),
        h("h3", {}, `Each hyperparameter against ${e.searcherMetric}`),
        h("div", { class: "scatters" }, dims.map((d) => h("div", { class: "scatter-box", "data-hp": d.key },
          h("h4", {}, d.key),
          scatter(rows.map((r) => ({ id: r.id, x: r.values[d.key], y: r.metric })), { xLabel: d.key, yLabel: e.searcherMetric, scale: d.scale, selected })))),
        h("h3", {}, "Heat map ", heatSelect(0, "heat map x"), " by ", heatSelect(1, "heat map y")),
        heatMap(rows.filter((r) => selected.has(r.id)), { xKey: st.heat[0], yKey: st.heat[1], xScale: dims.find((d) => d.key === st.heat[0]).scale, yScale: dims.find((d) => d.key === st.heat[1]).scale, metric: e.searcherMetric, smallerIsBetter: smaller }),
      );
    }

    // Trials table: the brushed set, sortable by any column; pick trials to compare.
    const shown = sortRows(trials.filter((t) => selected.has(t.id)), (t) => {
      const k = st.sort.key;
      if (k === "metric") return t.searcherMetricValue;
      if (k.startsWith("hp:")) return Object.fromEntries(flat(t.hparams))[k.slice(3)];
      if (k.startsWith("m:")) return lastOf(t, k.slice(2));
      return { id: t.id, state: stateName(t.state), batches: t.totalBatchesProcessed, restarts: t.restarts }[k];
    }, st.sort.desc);
    const onSort = (key) => {
      st.sort = { key, desc: st.sort.key === key ? !st.sort.desc : false };
      draw();
    };
    const columns = [
      { label: "", cell: (t) => h("input", { type: "checkbox", class: "pick", "aria-label": "compare trial " + t.id, checked: st.picked.has(t.id), onchange: (ev) => { ev.target.checked ? st.picked.add(t.id) : st.picked.delete(t.id); drawCompare(); } }) },
      { label: "ID", key: "id", cell: (t) => link("/det/trials/" + t.id, String(t.id)) },
      { label: "State", key: "state", cell: (t) => badge(t.state) },
      { label: "Batches", key: "batches", cell: (t) => String(t.totalBatchesProcessed) },
      { label: e.searcherMetric + " (searcher)", key: "metric", cell: (t) => num(t.searcherMetricValue) },
      ...metricIds.filter((m) => m !== "validation." + e.searcherMetric).map((m) => ({ label: m, key: "m:" + m, cell: (t) => num(lastOf(t, m)) })),
      ...keys.map((k) => ({ label: k, key: "hp:" + k, cell: (t) => num(Object.fromEntries(flat(t.hparams))[k]) })),
      { label: "Restarts", key: "restarts", cell: (t) => String(t.restarts) },
    ];
    const compareBox = h("span", { class: "compare" });
    const drawCompare = () => {
      const ids = [...st.picked];
      render(compareBox, ids.length >= 2 ? link("/det/compare?trials=" + ids.join(","), `Compare ${ids.length} trials`) : h("span", { class: "muted" }, "Pick two or more trials to compare them."));
    };
    drawCompare();
    render(boxes.trials,
      h("p", { class: "toolbar" }, h("span", { class: "trial-count" }, brushed ? `${shown.length} of ${trials.length} trials (in the selected ranges)` : `${trials.length} trials`), " ", compareBox),
      sortTable(columns, shown, st.sort, onSort, { empty: brushed ? "No trial is inside the selected ranges." : "No trials yet.", rowAttrs: (t) => ({ "data-trial": t.id }) }),
    );
  };

  await load();
  // A finished experiment does not change: no refresh that could disturb a brush or a choice.
  return { refresh: () => (data && isTerminal(data.e.state) ? null : load()) };
}

// Compares trials (?trials=1,2) or experiments (?experiments=3,4: each by its best trial).
async function comparePage(main) {
  const list = (key) => (query()[key] || "").split(",").map((x) => parseInt(x, 10)).filter(Number.isFinite);
  let ids = list("trials");
  const expIds = list("experiments");
  const noBest = [];
  if (expIds.length) {
    const exps = (await Promise.all(expIds.map((e) => api("/api/v1/experiments/" + e)))).map((r) => r.experiment);
    ids = exps.filter((e) => e.bestTrialId).map((e) => e.bestTrialId);
    noBest.push(...exps.filter((e) => !e.bestTrialId).map((e) => `experiment ${e.id} (${e.name})`));
  }
  if (!ids.length) {
    render(main, h("h1", {}, "Compare trials"), h("p", { class: "muted" }, noBest.length ? `No validated trial yet in ${noBest.join(", ")}.` : "Pick trials on an experiment's page, or experiments in the list, to compare them."));
    return { refresh: null };
  }
  const trials = (await Promise.all(ids.map((t) => api("/api/v1/trials/" + t)))).map((r) => r.trial);
  const metricIds = metricIdsOf(trials);
  // The curves open on the experiments' searcher metric (not whichever validation metric sorts
  // first: Determined's trials report "batches" too).
  const searcherMetrics = await Promise.all([...new Set(trials.map((t) => t.experimentId))].map((e) =>
    api("/api/v1/experiments/" + e).then((r) => r.experiment.searcherMetric, () => null)));
  let metric = searcherMetrics.map((m) => "validation." + m).find((m) => metricIds.includes(m)) || metricIds[0];
  const curves = h("section");
  const drawCurves = async () => {
    const asked = metric;
    const series = metric ? await seriesOf(ids, metric) : {};
    if (asked !== metric) return; // another metric was chosen meanwhile
    render(curves,
      h("div", { class: "toolbar" }, h("label", {}, "Metric", metricSelect(metricIds, metric, "compare metric", (v) => { metric = v; drawCurves(); }))),
      metric ? curvesFigure(trials.map((t) => ({ name: "trial " + t.id, points: series[t.id] || [] })), metric, null) : h("p", { class: "muted" }, "No metrics."),
    );
  };
  const hps = trials.map((t) => Object.fromEntries(flat(t.hparams)));
  const hpKeys = [...new Set(hps.flatMap((x) => Object.keys(x)))].sort();
  const head = () => ["", ...trials.map((t) => link("/det/trials/" + t.id, `trial ${t.id} (experiment ${t.experimentId})`))];
  const differs = (values) => new Set(values.map((v) => JSON.stringify(v))).size > 1;
  const rowOf = (label, values) => h("tr", { class: differs(values) ? "differs" : "" }, h("th", {}, label), values.map((v) => h("td", {}, num(v))));
  const sideBySide = (cls, rows) => h("table", { class: "side " + cls }, h("thead", {}, h("tr", {}, head().map((x) => h("th", {}, x)))), h("tbody", {}, rows));
  render(main,
    h("h1", {}, expIds.length ? `Compare ${trials.length} experiments (their best trials)` : `Compare ${trials.length} trials`),
    noBest.length ? h("p", { class: "muted" }, `Left out, no validated trial yet: ${noBest.join(", ")}.`) : null,
    h("h2", {}, "Curves"), curves,
    h("h2", {}, "Hyperparameters"),
    sideBySide("hparams", hpKeys.map((k) => rowOf(k, hps.map((x) => x[k])))),
    h("h2", {}, "Metrics (latest)"),
    sideBySide("metrics", [
      rowOf("state", trials.map((t) => stateName(t.state))),
      rowOf("batches", trials.map((t) => t.totalBatchesProcessed)),
      rowOf("searcher metric", trials.map((t) => t.searcherMetricValue)),
      ...metricIds.map((m) => rowOf(m, trials.map((t) => lastOf(t, m)))),
    ]),
  );
  await drawCurves();
  return { refresh: null };
}
