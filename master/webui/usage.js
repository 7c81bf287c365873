// det WebUI: the Usage page (slot-hours and dollars over time, by user, label, pool, workspace
// or experiment) and the cost line of an experiment's page. Data: Determined's aggregated
// allocation report with det's cost fields (docs/usage.md).
"use strict";

const USAGE_BY = {
  experiment: ["byExperiment", "Experiment"],
  user: ["byUsername", "User"],
  label: ["byExperimentLabel", "Label"],
  pool: ["byResourcePool", "Pool"],
  workspace: ["byWorkspace", "Workspace"],
};

// "$1.25"; under a cent keeps two significant digits; "-" when not priced.
function usd(v) {
  if (v === undefined || v === null) return "-";
  const a = Math.abs(v);
  return "$" + (a === 0 || a >= 0.01 ? v.toFixed(2) : (+v.toPrecision(2)).toString());
}

const slotHours = (seconds) => (seconds / 3600).toFixed(3);

// The experiment page's "Cost" fact, from GET /api/v1/experiments/{id}/cost.
function costText(c) {
  const hours = `${c.slotHours.toFixed(3)} slot-hours`;
  if (c.usd === null || c.usd === undefined) return `${hours} (no prices for its pools)`;
  return `${usd(c.usd)} (spot ${usd(c.spotUsd)}, on-demand ${usd(c.onDemandUsd)}), ${hours}`;
}

const isoDay = (d) => d.toISOString().slice(0, 10);

// Bars of one value per period, labelled below; each bar's title gives its figures.
function barChart(bars, { yLabel }) {
  const W = 900, H = 260, L = 84, R = 16, T = 12, B = 40;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart usage-chart", role: "img", "aria-label": yLabel + " per period" });
  const top = Math.max(...bars.map((b) => b.value), 0) || 1;
  const Y = (v) => H - B - ((H - T - B) * v) / top;
  const slot = (W - L - R) / Math.max(bars.length, 1);
  const X = (i) => L + slot * i + slot / 2;
  axes(svg, { W, H, L, R, T, B, xr: [0, 1], yr: [0, top], xLabel: "", yLabel, X: () => 0, Y, xTicks: [] });
  const every = Math.ceil(bars.length / 12);
  bars.forEach((b, i) => {
    const bw = Math.max(slot * 0.7, 1);
    const rect = s("rect", { x: X(i) - bw / 2, y: Y(b.value), width: bw, height: Math.max(H - B - Y(b.value), 0), class: "bar", "data-period": b.label });
    rect.appendChild(s("title", {}, `${b.label}: ${b.title}`));
    svg.appendChild(rect);
    if (i % every === 0) svg.appendChild(s("text", { x: X(i), y: H - B + 16, class: "tick", "text-anchor": "middle" }, b.label));
  });
  return svg;
}

async function usagePage(main) {
  const q = query();
  const today = new Date();
  const st = {
    from: q.from || isoDay(new Date(today.getTime() - 29 * 86400e3)),
    to: q.to || isoDay(today),
    monthly: q.period === "monthly",
    by: USAGE_BY[q.by] ? q.by : "experiment",
  };
  const form = h("form", { class: "toolbar usage-form" });
  const chart = h("section", { class: "usage-chart-box" });
  const totals = h("div");
  const breakdown = h("section", { class: "usage-breakdown" });
  const downloads = h("p", { class: "usage-downloads" });
  render(main, h("h1", {}, "Usage"), form, downloads, totals, chart, breakdown);

  const field = (name, value, attrs = {}) => h("input", { name, value, ...attrs });
  const drawForm = () => {
    const from = field("from", st.monthly ? st.from.slice(0, 7) : st.from, { type: st.monthly ? "month" : "date", "aria-label": "from" });
    const to = field("to", st.monthly ? st.to.slice(0, 7) : st.to, { type: st.monthly ? "month" : "date", "aria-label": "to" });
    const period = h("select", { name: "period", "aria-label": "period" },
      h("option", { value: "daily", selected: !st.monthly }, "per day"),
      h("option", { value: "monthly", selected: st.monthly }, "per month"));
    const by = h("select", { name: "by", "aria-label": "group by" },
      Object.entries(USAGE_BY).map(([k, [, label]]) => h("option", { value: k, selected: k === st.by }, label)));
    render(form,
      h("label", {}, "From ", from), " ", h("label", {}, "to ", to), " ", period, " ", h("label", {}, "by ", by), " ",
      h("button", { type: "submit" }, "Show"));
    form.onsubmit = (ev) => {
      ev.preventDefault();
      st.monthly = period.value === "monthly";
      st.from = from.value.length === 7 ? from.value + "-01" : from.value;
      st.to = to.value.length === 7 ? to.value + "-01" : to.value;
      st.by = by.value;
      setQuery({ from: st.from, to: st.to, period: st.monthly ? "monthly" : null, by: st.by });
      load().catch((e) => showError(e.message));
    };
  };

  // The range's CSVs as Determined's `det resources` fetches them (with det's dollars): one row
  // per allocation, or the aggregated figures per period and key. Fetched with the session (a
  // plain link would carry no token) and saved from a blob.
  const download = async (which) => {
    const end = new Date(Date.parse(st.to + "T00:00:00Z") + (st.monthly ? 0 : 86400e3));
    if (st.monthly) end.setUTCMonth(end.getUTCMonth() + 1);
    const params = which === "allocations"
      ? new URLSearchParams({ timestamp_after: st.from + "T00:00:00Z", timestamp_before: end.toISOString().replace(/\.\d+Z$/, "Z") })
      : new URLSearchParams({
        start_date: st.monthly ? st.from.slice(0, 7) : st.from,
        end_date: st.monthly ? st.to.slice(0, 7) : st.to,
        period: st.monthly ? "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY" : "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY",
      });
    const path = which === "allocations" ? "/resources/allocation/allocations-csv?" : "/resources/allocation/aggregated?";
    const text = await api(path + params, { raw: true });
    const url = URL.createObjectURL(new Blob([text], { type: "text/csv" }));
    const a = h("a", { href: url, download: `${which}-${st.from}-${st.to}.csv` });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  };
  render(downloads, "CSV for this range: ",
    h("button", { type: "button", class: "csv-allocations", onclick: () => act("download CSV", () => download("allocations"), async () => {}) }, "Allocations"), " ",
    h("button", { type: "button", class: "csv-aggregated", onclick: () => act("download CSV", () => download("aggregated"), async () => {}) }, "Aggregated"));

  const load = async () => {
    drawForm();
    const params = new URLSearchParams({
      startDate: st.monthly ? st.from.slice(0, 7) : st.from,
      endDate: st.monthly ? st.to.slice(0, 7) : st.to,
      period: st.monthly ? "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_MONTHLY" : "RESOURCE_ALLOCATION_AGGREGATION_PERIOD_DAILY",
    });
    const { resourceEntries: entries } = await api("/api/v1/resources/allocation/aggregated?" + params);
    const priced = entries.some((e) => e.cost && (e.cost.usd > 0 || e.cost.idleUsd > 0));
    const sum = (f) => entries.reduce((a, e) => a + f(e), 0);
    const cost = (e) => e.cost || { usd: 0, spotUsd: 0, onDemandUsd: 0, idleUsd: 0 };
    render(totals, facts([
      ["Slot-hours", slotHours(sum((e) => e.seconds))],
      ["Cost (priced pools only)", priced ? usd(sum((e) => cost(e).usd)) : "no prices (set price or provider.cost.prices on a pool)"],
      ["Spot", priced ? usd(sum((e) => cost(e).spotUsd)) : ""],
      ["On-demand", priced ? usd(sum((e) => cost(e).onDemandUsd)) : ""],
      ["Idle machines", priced ? usd(sum((e) => cost(e).idleUsd)) : ""],
    ]));
    render(chart, entries.length
      ? barChart(entries.map((e) => ({
        label: e.periodStart,
        value: priced ? cost(e).usd : e.seconds / 3600,
        title: `${usd(priced ? cost(e).usd : null)}, ${slotHours(e.seconds)} slot-hours`,
      })), { yLabel: priced ? "USD" : "slot-hours" })
      : h("p", { class: "muted" }, "No allocations in this range."));
    // The range's figures per key of the chosen dimension, most expensive first.
    const [key, label] = USAGE_BY[st.by];
    const rows = new Map();
    for (const e of entries) {
      for (const [k, secs] of Object.entries(e[key] || {})) {
        const r = rows.get(k) || { key: k, seconds: 0, usd: null, spot: 0, od: 0 };
        r.seconds += secs;
        const d = ((e.cost || {})[key] || {})[k];
        if (d) {
          r.usd = (r.usd || 0) + d.usd;
          r.spot += d.spotUsd;
          r.od += d.onDemandUsd;
        }
        rows.set(k, r);
      }
    }
    const sorted = [...rows.values()].sort((a, b) => (b.usd || 0) - (a.usd || 0) || b.seconds - a.seconds);
    const name = (k) => (st.by === "experiment" ? link("/det/experiments/" + k, "experiment " + k) : k);
    render(breakdown, h("h2", {}, "By " + label.toLowerCase()), table(
      [label, "Slot-hours", "Cost", "Spot", "On-demand"],
      sorted.map((r) => [name(r.key), slotHours(r.seconds), usd(r.usd), r.usd === null ? "-" : usd(r.spot), r.usd === null ? "-" : usd(r.od)]),
      "No allocations in this range.",
    ));
  };
  await load();
  return { refresh: null };
}
