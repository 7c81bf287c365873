// det WebUI charts, hand-written (line chart, parallel coordinates with brushing, scatter, heat
// map): SVG, and a canvas under the SVG axes for line charts with many points. No library: each
// chart is a few dozen lines (see docs/webui.md).
"use strict";

const PALETTE = 8; // colour classes s0..s7 in app.css

function extent(values) {
  let lo = Infinity, hi = -Infinity;
  for (const v of values) {
    if (!Number.isFinite(v)) continue;
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  if (lo === Infinity) return null;
  if (lo === hi) {
    const pad = Math.abs(lo || 1) * 0.1;
    return [lo - pad, hi + pad];
  }
  return [lo, hi];
}

const fmt = (v) => num(+(+v).toPrecision(4));

function axes(svg, { W, H, L, R, T, B, xr, yr, xLabel, yLabel, X, Y, xTicks }) {
  svg.appendChild(s("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }));
  svg.appendChild(s("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }));
  for (let i = 0; i <= 4; i++) {
    const yv = yr[0] + ((yr[1] - yr[0]) * i) / 4;
    svg.appendChild(s("text", { x: L - 6, y: Y(yv) + 4, class: "tick", "text-anchor": "end" }, fmt(yv)));
    svg.appendChild(s("line", { x1: L, y1: Y(yv), x2: W - R, y2: Y(yv), class: "grid" }));
  }
  const ticks = xTicks || [0, 1, 2, 3, 4].map((i) => [xr[0] + ((xr[1] - xr[0]) * i) / 4, null]);
  for (const [xv, text] of ticks) {
    svg.appendChild(s("text", { x: X(xv), y: H - B + 16, class: "tick", "text-anchor": "middle" }, text === null ? fmt(xv) : text));
  }
  svg.appendChild(s("text", { x: (L + W - R) / 2, y: H - 4, class: "label", "text-anchor": "middle" }, xLabel));
  if (yLabel) svg.appendChild(s("text", { x: 12, y: (T + H - B) / 2, class: "label", "text-anchor": "middle", transform: `rotate(-90 12 ${(T + H - B) / 2})` }, yLabel));
}

// Colours of the classes s0..s7 in app.css, for the canvas (which cannot read CSS classes).
const COLORS = ["#2456c8", "#d9480f", "#2b8a3e", "#862e9c", "#c2255c", "#0b7285", "#e67700", "#5c677d"];
// Charts with more points than this draw their lines on a canvas (one bitmap, no element per
// series: 100 trials x 500 points lay out and repaint in a few ms), with the axes in SVG above.
const CANVAS_POINTS = 5000;

// series: [{name, key?, points: [[x, y], ...]}]. Points get circles only when there are few of
// them (hover titles); larger charts are one polyline per series; large ones a canvas.
function lineChart(series, { xLabel, yLabel, cls = "", highlight = null }) {
  let n = 0, x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  for (const ser of series) {
    for (const [x, y] of ser.points) {
      if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
      n++;
      if (x < x0) x0 = x;
      if (x > x1) x1 = x;
      if (y < y0) y0 = y;
      if (y > y1) y1 = y;
    }
  }
  if (!n) return h("p", { class: "muted chart-empty" }, "No " + yLabel + " reported yet.");
  const W = 720, H = 260, L = 64, R = 20, T = 12, B = 36;
  const xr = extent([x0, x1]), yr = extent([y0, y1]);
  const X = (x) => L + ((x - xr[0]) / (xr[1] - xr[0])) * (W - L - R);
  const Y = (y) => H - B - ((y - yr[0]) / (yr[1] - yr[0])) * (H - T - B);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": `${yLabel} by ${xLabel}, ${series.length} series` });
  axes(svg, { W, H, L, R, T, B, xr, yr, xLabel, yLabel: "", X, Y });
  const dimmed = (ser) => highlight && !highlight.has(ser.key ?? ser.name);
  const shown = series.slice(0, 24);
  const legend = h("ul", { class: "legend" }, shown.map((ser, i) => h("li", {}, h("span", { class: "swatch s" + (i % PALETTE) }), ser.name)),
    series.length > shown.length ? h("li", { class: "muted" }, `and ${series.length - shown.length} more`) : null);
  if (n > CANVAS_POINTS) {
    const readout = h("span", { class: "readout", "aria-live": "polite" });
    const fig = h("figure", { class: cls + " canvas-chart" }, h("figcaption", {}, yLabel + " by " + xLabel, " ", readout),
      h("div", { class: "plot" }, canvasLines(series, svg, { W, H, L, R, T, B, X, Y, dimmed }), svg), legend);
    const drawn = series.map((ser) => ser.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y)).length);
    fig.setAttribute("data-series", String(drawn.filter(Boolean).length));
    fig.setAttribute("data-series-points", drawn.filter(Boolean).join(","));
    fig.setAttribute("data-x", `${x0},${x1}`);
    fig.setAttribute("data-dimmed", String(series.filter((ser, i) => drawn[i] && dimmed(ser)).length));
    hoverReadout(svg, series, { X, Y, dimmed }, readout);
    return fig;
  }
  const dots = n <= 600;
  series.forEach((ser, i) => {
    const good = ser.points.filter(([x, y]) => Number.isFinite(x) && Number.isFinite(y));
    if (!good.length) return;
    const c = "series s" + (i % PALETTE) + (dimmed(ser) ? " dim" : "");
    let pts = "";
    for (const [x, y] of good) pts += X(x).toFixed(1) + "," + Y(y).toFixed(1) + " ";
    const line = s("polyline", { points: pts.trim(), class: c, "data-series": ser.name });
    line.appendChild(s("title", {}, ser.name));
    svg.appendChild(line);
    if (dots) {
      for (const [x, y] of good) {
        svg.appendChild(s("circle", { cx: X(x), cy: Y(y), r: 2.5, class: c }, s("title", {}, `${ser.name}: ${num(y)} at ${num(x)}`)));
      }
    }
  });
  return h("figure", { class: cls }, h("figcaption", {}, yLabel + " by " + xLabel), svg, legend);
}

// The lines of a large chart on one canvas (sized for the chart's widest CSS size and the
// screen's pixel ratio; the SVG of the axes lies on top, its grid lines moved under the
// curves onto the canvas). Dimmed series first, in grey.
function canvasLines(series, svg, { W, H, L, R, T, B, X, Y, dimmed }) {
  const k = (900 / W) * Math.min(2, Math.max(1, window.devicePixelRatio || 1));
  const canvas = h("canvas", { width: Math.round(W * k), height: Math.round(H * k), "aria-hidden": "true" });
  const ctx = canvas.getContext("2d");
  ctx.scale(k, k);
  ctx.strokeStyle = "#eceef2";
  ctx.lineWidth = 1;
  for (const g of svg.querySelectorAll("line.grid")) {
    ctx.beginPath();
    ctx.moveTo(+g.getAttribute("x1"), +g.getAttribute("y1"));
    ctx.lineTo(+g.getAttribute("x2"), +g.getAttribute("y2"));
    ctx.stroke();
    g.remove();
  }
  ctx.beginPath();
  ctx.rect(L, T - 2, W - L - R, H - T - B + 4);
  ctx.clip();
  ctx.lineJoin = "round";
  const stroke = (ser, color, width, alpha) => {
    let first = true;
    ctx.beginPath();
    for (const [x, y] of ser.points) {
      if (!Number.isFinite(x) || !Number.isFinite(y)) continue;
      if (first) ctx.moveTo(X(x), Y(y));
      else ctx.lineTo(X(x), Y(y));
      first = false;
    }
    ctx.strokeStyle = color;
    ctx.lineWidth = width;
    ctx.globalAlpha = alpha;
    ctx.stroke();
  };
  series.forEach((ser) => { if (dimmed(ser)) stroke(ser, "#c9ced8", 1, 0.5); });
  series.forEach((ser, i) => { if (!dimmed(ser)) stroke(ser, COLORS[i % COLORS.length], 1.3, 0.85); });
  return canvas;
}

// A canvas has no per-line titles: the point nearest the pointer (within 10 units) is named
// in the caption instead.
function hoverReadout(svg, series, { X, Y, dimmed }, out) {
  svg.addEventListener("pointermove", (ev) => {
    const m = svg.getScreenCTM();
    if (!m) return;
    const px = (ev.clientX - m.e) / m.a, py = (ev.clientY - m.f) / m.d;
    let best = null, bd = 100;
    for (const ser of series) {
      if (dimmed(ser)) continue;
      for (const [x, y] of ser.points) {
        const dx = X(x) - px, dy = Y(y) - py, d = dx * dx + dy * dy;
        if (d < bd) { bd = d; best = [ser.name, x, y]; }
      }
    }
    out.textContent = best ? `${best[0]}: ${num(best[2])} at ${num(best[1])}` : "";
  });
  svg.addEventListener("pointerleave", () => { out.textContent = ""; });
}

// An axis of a hyperparameter view: numeric (linear) or categorical (evenly spaced values).
function scaleOf(values) {
  const nums = values.filter((v) => typeof v === "number" && Number.isFinite(v));
  if (nums.length && nums.length === values.filter((v) => v !== undefined && v !== null).length) {
    const [lo, hi] = extent(nums);
    return { kind: "num", lo, hi, pos: (v) => (typeof v === "number" ? (v - lo) / (hi - lo) : NaN), label: fmt };
  }
  const cats = [...new Set(values.filter((v) => v !== undefined && v !== null).map((v) => JSON.stringify(v)))].sort();
  const n = cats.length;
  return {
    kind: "cat",
    cats,
    pos: (v) => (v === undefined || v === null ? NaN : n === 1 ? 0.5 : cats.indexOf(JSON.stringify(v)) / (n - 1)),
    label: (c) => {
      const v = JSON.parse(c);
      return typeof v === "string" ? v : c;
    },
  };
}

// Parallel coordinates. dims: [{key, label, scale}]; rows: [{id, values: {key: v}}];
// brushes: {key: [lo, hi]} in axis position (0 bottom .. 1 top); onBrush(key, range|null, bound?)
// after a drag on an axis (a click without a drag clears that axis's brush) or a key on one of
// its bounds (bound: "lower" or "upper", to be focused again once redrawn).
function parallelCoords(dims, rows, brushes, onBrush, selected) {
  const W = 720, H = 300, L = 40, R = 72, T = 24, B = 30;
  const gap = dims.length > 1 ? (W - L - R) / (dims.length - 1) : 0;
  const X = (i) => L + i * gap;
  const Y = (p) => H - B - p * (H - T - B);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart pcoords", role: "img", "aria-label": "parallel coordinates" });
  const lines = s("g", { class: "lines" });
  svg.appendChild(lines);
  for (const r of rows) {
    let pts = "";
    dims.forEach((d, i) => {
      const p = d.scale.pos(r.values[d.key]);
      if (Number.isFinite(p)) pts += X(i).toFixed(1) + "," + Y(p).toFixed(1) + " ";
    });
    const on = selected.has(r.id);
    const line = s("polyline", { points: pts.trim(), class: "pline" + (on ? " on" : " off"), "data-trial": r.id });
    line.appendChild(s("title", {}, "trial " + r.id));
    lines.appendChild(line);
  }
  dims.forEach((d, i) => {
    const g = s("g", { class: "paxis", "data-axis": d.key });
    g.appendChild(s("line", { x1: X(i), y1: Y(0), x2: X(i), y2: Y(1), class: "axis" }));
    g.appendChild(s("text", { x: X(i), y: T - 10, class: "label", "text-anchor": "middle" }, d.label));
    const ticks = d.scale.kind === "num" ? [0, 0.5, 1].map((p) => [p, d.scale.label(d.scale.lo + p * (d.scale.hi - d.scale.lo))]) : d.scale.cats.map((c, j) => [d.scale.cats.length === 1 ? 0.5 : j / (d.scale.cats.length - 1), d.scale.label(c)]);
    for (const [p, text] of ticks) g.appendChild(s("text", { x: X(i) + 11, y: Y(p) + 4, class: "tick" }, String(text)));
    const b = brushes[d.key];
    if (b) g.appendChild(s("rect", { x: X(i) - 8, y: Y(b[1]), width: 16, height: Math.max(1, Y(b[0]) - Y(b[1])), class: "brush" }));
    // The hit area a drag starts on.
    const hit = s("rect", { x: X(i) - 14, y: Y(1), width: 28, height: Y(0) - Y(1), class: "brush-area", "data-axis": d.key });
    hit.addEventListener("pointerdown", (ev) => startBrush(ev, svg, d.key, Y(0), Y(1), X(i), onBrush));
    g.appendChild(hit);
    // The keyboard's way: each axis's range has two bounds, each a slider (Tab to it, arrows
    // move it). Drawn over the axis ends or the range's; the pointer goes through them.
    const range = b || [0, 1];
    ["lower", "upper"].forEach((bound, j) => {
      const p = range[j];
      const handle = s("rect", {
        x: X(i) - 7, y: Y(p) - 3, width: 14, height: 6, rx: 2, class: "handle" + (b ? " set" : ""), tabindex: 0, role: "slider",
        "aria-label": `${d.label} ${bound} bound`, "aria-orientation": "vertical", "aria-valuemin": 0, "aria-valuemax": 100,
        "aria-valuenow": Math.round(p * 100), "aria-valuetext": boundText(d, p), "data-axis": d.key, "data-bound": bound,
      });
      handle.addEventListener("keydown", (ev) => keyBrush(ev, d, j, range, onBrush));
      g.appendChild(handle);
    });
    svg.appendChild(g);
  });
  return svg;
}

// A bound's value in the axis's own terms: a number, or the category at or next inside it.
function boundText(d, p) {
  if (d.scale.kind === "num") return fmt(d.scale.lo + p * (d.scale.hi - d.scale.lo));
  const n = d.scale.cats.length;
  if (!n) return "";
  const at = n === 1 ? 0 : Math.min(n - 1, Math.max(0, Math.round(p * (n - 1))));
  return d.scale.label(d.scale.cats[at]);
}

// Keys on a bound (j: 0 lower, 1 upper) of the range [lo, hi] (axis positions 0..1): arrows a
// step (a twentieth of a numeric axis, one category), Page Up/Down four, Home/End the axis
// ends, Escape or Delete clear the axis. A range back to the whole axis is no range.
function keyBrush(ev, d, j, [lo, hi], onBrush) {
  const n = d.scale.kind === "cat" ? d.scale.cats.length : 0;
  const step = n > 1 ? 1 / (n - 1) : n === 1 ? 0.5 : 0.05; // one category sits at 0.5
  const moves = { ArrowUp: step, ArrowRight: step, ArrowDown: -step, ArrowLeft: -step, PageUp: 4 * step, PageDown: -4 * step };
  const bound = j === 0 ? "lower" : "upper";
  let p = j === 0 ? lo : hi;
  if (ev.key in moves) p += moves[ev.key];
  else if (ev.key === "Home") p = 0;
  else if (ev.key === "End") p = 1;
  else if (ev.key === "Escape" || ev.key === "Delete") {
    ev.preventDefault();
    onBrush(d.key, null, bound);
    return;
  } else return;
  ev.preventDefault();
  p = Math.round(Math.min(1, Math.max(0, p)) * 1e6) / 1e6;
  const next = j === 0 ? [Math.min(p, hi), hi] : [lo, Math.max(p, lo)];
  onBrush(d.key, next[0] <= 0 && next[1] >= 1 ? null : next, bound);
}

function svgY(svg, ev) {
  const m = svg.getScreenCTM();
  return m ? (ev.clientY - m.f) / m.d : ev.clientY;
}

function startBrush(ev, svg, key, y0, y1, x, onBrush) {
  ev.preventDefault();
  const from = svgY(svg, ev);
  const rect = s("rect", { x: x - 8, y: from, width: 16, height: 0, class: "brush live" });
  svg.appendChild(rect);
  const clamp = (y) => Math.min(y0, Math.max(y1, y));
  const move = (e) => {
    const a = clamp(from), b = clamp(svgY(svg, e));
    rect.setAttribute("y", Math.min(a, b));
    rect.setAttribute("height", Math.abs(a - b));
  };
  const up = (e) => {
    window.removeEventListener("pointermove", move);
    window.removeEventListener("pointerup", up);
    rect.remove();
    const a = clamp(from), b = clamp(svgY(svg, e));
    // A range that starts within a few pixels of an axis end reaches it (keeps the extremes).
    const p = (y) => {
      const v = (y0 - y) / (y0 - y1);
      return v > 0.98 ? 1 : v < 0.02 ? 0 : v;
    };
    onBrush(key, Math.abs(a - b) < 3 ? null : [Math.min(p(a), p(b)), Math.max(p(a), p(b))]);
  };
  window.addEventListener("pointermove", move);
  window.addEventListener("pointerup", up);
}

// points: [{id, x, y}] with x any value (scale), y a number.
function scatter(points, { xLabel, yLabel, scale, selected }) {
  const ys = points.map((p) => p.y).filter(Number.isFinite);
  if (!ys.length) return h("p", { class: "muted chart-empty" }, "No " + yLabel + " yet.");
  const W = 340, H = 220, L = 72, R = 12, T = 10, B = 36;
  const yr = extent(ys);
  const X = (p) => L + 8 + p * (W - L - R - 16);
  const Y = (y) => H - B - ((y - yr[0]) / (yr[1] - yr[0])) * (H - T - B);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart scatter", role: "img", "aria-label": yLabel + " by " + xLabel });
  const xTicks = scale.kind === "num" ? [0, 0.5, 1].map((p) => [p, fmt(scale.lo + p * (scale.hi - scale.lo))]) : scale.cats.map((c, j) => [scale.cats.length === 1 ? 0.5 : j / (scale.cats.length - 1), scale.label(c)]);
  axes(svg, { W, H, L, R, T, B, xr: [0, 1], yr, xLabel, yLabel, X, Y, xTicks });
  for (const p of points) {
    const x = scale.pos(p.x);
    if (!Number.isFinite(x) || !Number.isFinite(p.y)) continue;
    svg.appendChild(s("circle", { cx: X(x), cy: Y(p.y), r: 3.5, class: "dot" + (selected.has(p.id) ? " on" : " off"), "data-trial": p.id },
      s("title", {}, `trial ${p.id}: ${xLabel}=${num(p.x)}, ${yLabel}=${num(p.y)}`)));
  }
  return h("figure", { class: "small" }, svg);
}

// Bins of a scale: numeric ones in `n` equal ranges, categorical ones one per value.
function binsOf(scale, n = 6) {
  if (scale.kind === "cat") {
    const of = (v) => (v === undefined || v === null ? -1 : scale.cats.indexOf(JSON.stringify(v)));
    return scale.cats.map((c) => ({ label: scale.label(c), of }));
  }
  const w = (scale.hi - scale.lo) / n;
  return Array.from({ length: n }, (_, i) => ({
    label: fmt(scale.lo + i * w) + "–" + fmt(scale.lo + (i + 1) * w),
    of: (v) => (typeof v === "number" ? Math.min(n - 1, Math.max(0, Math.floor((v - scale.lo) / w))) : -1),
  }));
}

// Heat map of the mean metric per (x bin, y bin); darker is better.
function heatMap(rows, { xKey, yKey, xScale, yScale, metric, smallerIsBetter }) {
  const xb = binsOf(xScale), yb = binsOf(yScale);
  const cells = new Map();
  for (const r of rows) {
    if (!Number.isFinite(r.metric)) continue;
    const i = xb.length ? xb[0].of(r.values[xKey]) : -1, j = yb.length ? yb[0].of(r.values[yKey]) : -1;
    if (i < 0 || j < 0) continue;
    const c = cells.get(i + "," + j) || { sum: 0, n: 0 };
    c.sum += r.metric;
    c.n += 1;
    cells.set(i + "," + j, c);
  }
  if (!cells.size) return h("p", { class: "muted chart-empty" }, "No trial has both hyperparameters and " + metric + ".");
  const means = [...cells.values()].map((c) => c.sum / c.n);
  const [lo, hi] = extent(means);
  const W = 720, H = 300, L = 120, R = 12, T = 10, B = 46;
  const cw = (W - L - R) / xb.length, ch = (H - T - B) / yb.length;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart heatmap", role: "img", "aria-label": `${metric} by ${xKey} and ${yKey}` });
  for (const [k, c] of cells) {
    const [i, j] = k.split(",").map(Number);
    const mean = c.sum / c.n;
    let t = (mean - lo) / (hi - lo); // 0 smallest .. 1 largest
    if (smallerIsBetter) t = 1 - t; // 1 = best = darkest
    const shade = (a, b) => Math.round(a + (b - a) * t);
    const fill = `rgb(${shade(232, 20)},${shade(240, 70)},${shade(252, 180)})`;
    svg.appendChild(s("rect", { x: L + i * cw + 1, y: H - B - (j + 1) * ch + 1, width: cw - 2, height: ch - 2, fill, class: "cell", "data-cell": k },
      s("title", {}, `${xKey} ${xb[i].label}, ${yKey} ${yb[j].label}: mean ${metric} ${num(mean)} over ${c.n} trial(s)`)));
    svg.appendChild(s("text", { x: L + (i + 0.5) * cw, y: H - B - (j + 0.5) * ch + 4, class: "cell-text" + (t > 0.55 ? " light" : ""), "text-anchor": "middle" }, fmt(mean)));
  }
  xb.forEach((b, i) => svg.appendChild(s("text", { x: L + (i + 0.5) * cw, y: H - B + 16, class: "tick", "text-anchor": "middle" }, b.label)));
  yb.forEach((b, j) => svg.appendChild(s("text", { x: L - 6, y: H - B - (j + 0.5) * ch + 4, class: "tick", "text-anchor": "end" }, b.label)));
  svg.appendChild(s("text", { x: (L + W - R) / 2, y: H - 6, class: "label", "text-anchor": "middle" }, xKey));
  return h("figure", {}, h("figcaption", {}, `mean ${metric} by ${xKey} and ${yKey} (darker is better)`), svg);
}
