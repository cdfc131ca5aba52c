// The run explorer's script (report/explorer.py inlines it into explorer.html, after plotly.js and the page data).
// Every value comes from the page data (`DATA`, see explorer.py) and reaches the page as text, never as markup:
// `el` sets textContent, and labels passed to plotly (which reads a few tags) go through `plotText`. What the page
// knows it reads from the data: a method's display name (`DATA.titles`, the registry's `Method.title`), the metric
// columns (`DATA.metrics`, the tables' order), whether a figure has an interval (its bounds are null where it has
// none), which question × method quality control excluded, and why a figure is absent.
"use strict";
/* global Plotly */
/* exported explorerPaths */

const DATA = JSON.parse(document.getElementById("explorer-data").textContent);
const PLOT_CONFIG = {displayModeBar: false};
const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                "#bcbd22", "#17becf"];
const DAGGER = "†";
const loadedPaths = {};

/** An element with text content (never markup) and attributes. */
function el(tag, text, attrs) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  return node;
}

/** Text for plotly, which reads a few HTML tags in labels: its markup characters as entities. */
function plotText(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

/** `value` with `digits` decimals as the tables write it (`report.text.fixed`): rounded once from the exact binary
 *  value, an exact tie to the even neighbour (toFixed takes the one away from zero), and never `-0`. The page data
 *  hold full precision, so a cell here equals the same cell of tables.md. */
function fixed(value, digits) {
  let text = value.toFixed(digits);
  const exact = Math.abs(value).toFixed(100);  // every digit of a double of this size
  const end = exact.indexOf(".") + 1 + digits;
  if (/^50*$/.test(exact.slice(end))) {  // a tie: keep the truncation where its last digit is even
    const kept = exact.slice(0, digits ? end : end - 1);
    if (Number(kept[kept.length - 1]) % 2 === 0) text = (value < 0 ? "-" : "") + kept;
  }
  return text.startsWith("-") && Number(text) === 0 ? text.slice(1) : text;
}

function fmt(value, digits) {
  if (value === null || value === undefined) return "–";
  if (typeof value === "number") return fixed(value, digits === undefined ? 4 : digits);
  if (typeof value === "boolean") return value ? "yes" : "no";
  return String(value);
}

/** A method's display name everywhere on the page: the registry's title ("PPR + SEED_5"), the name where unknown. */
function title(name) {
  return (DATA.titles && DATA.titles[name]) || name;
}

/** An alternative estimate's name as the tables write it, e.g. "PPR + NoSEED (RB)". */
function estimateTitle(name, estimator) {
  return `${title(name)} (${(DATA.estimators || {})[estimator] || estimator})`;
}

/** Quality control's rule, with the settings of this page (`QualityControl.describe`): why it excluded a question
 *  from a method's metrics. */
function exclusionRule() {
  return (DATA.qc || {}).rule || "";
}

/** A table sorted by clicking a header; `columns`: [{label, value(row), text(row), cls, title(row)}];
 *  `rowClass(row)` adds a class to a row; `onPick(row, tr)` on click; at most `limit` rows drawn. */
function sortableTable(columns, rows, options) {
  const {onPick, limit, rowClass, id} = options || {};
  const wrap = el("div");
  let order = {index: -1, sign: 1};
  function draw() {
    wrap.replaceChildren();
    const table = el("table", null, id ? {id} : {});
    const head = el("tr");
    columns.forEach((column, index) => {
      const th = el("th", column.label, {class: "sortable"});
      if (index === order.index) th.classList.add(order.sign > 0 ? "sorted-asc" : "sorted-desc");
      th.addEventListener("click", () => {
        order = {index, sign: order.index === index ? -order.sign : 1};
        draw();
      });
      head.appendChild(th);
    });
    table.appendChild(head);
    const sorted = rows.slice();
    if (order.index >= 0) {
      const value = columns[order.index].value;
      sorted.sort((a, b) => {
        const x = value(a), y = value(b);
        if (x === y) return 0;
        if (x === null || x === undefined) return 1;
        if (y === null || y === undefined) return -1;
        return (x < y ? -1 : 1) * order.sign;
      });
    }
    for (const row of limit ? sorted.slice(0, limit) : sorted) {
      const tr = el("tr");
      for (const column of columns) {
        const attrs = column.cls ? {class: column.cls} : {};
        const hint = column.title && column.title(row);
        if (hint) attrs.title = hint;
        tr.appendChild(el("td", (column.text || column.value)(row), attrs));
      }
      const extra = rowClass && rowClass(row);
      if (extra) tr.classList.add(extra);
      if (onPick) {
        tr.classList.add("pick");
        tr.addEventListener("click", () => onPick(row, tr));
      }
      table.appendChild(tr);
    }
    wrap.appendChild(table);
    if (limit && sorted.length > limit) {
      wrap.appendChild(el("p", `showing the first ${limit} of ${sorted.length} rows: narrow the filter`,
                          {class: "note"}));
    }
  }
  draw();
  return wrap;
}

function plotDiv(parent, cls) {
  return parent.appendChild(el("div", null, {class: cls ? `plot ${cls}` : "plot"}));
}

/** Plots wait here until their grid holds all of them (`drawQueued`): plotly lays a plot out at its box's width
 *  when it draws it, and a grid's columns narrow as plots join it. */
const queued = [];
/** A plot whose box changes after it is drawn (the window, a grid that grows) is laid out again. */
const refit = new ResizeObserver(entries => {
  for (const {target} of entries) {
    if (!target.isConnected) {
      refit.unobserve(target);  // a question's plots, replaced by the next question's
    } else if (target.clientWidth > 0 && Math.abs(target._fullLayout.width - target.clientWidth) > 1) {
      Plotly.Plots.resize(target);
    }
  }
});

function plot(div, traces, plotLayout) {
  queued.push([div, traces, plotLayout]);
}

function drawQueued() {
  for (const [div, traces, plotLayout] of queued.splice(0)) {
    Plotly.newPlot(div, traces, plotLayout, PLOT_CONFIG);
    refit.observe(div);
  }
}

function layout(text, xTitle, yTitle, extra) {
  return Object.assign({title: {text: plotText(text), font: {size: 13}}, margin: {l: 55, r: 10, t: 40, b: 45},
                        xaxis: {title: {text: xTitle}}, yaxis: {title: {text: yTitle}},
                        legend: {font: {size: 10}}}, extra || {});
}

/** An axis of counts (answers n, burn-in b, optimiser steps, pairs) over the values lo … hi: ticks on whole numbers
 *  only (1, 2 or 5 × 10^k apart, at most about eight), and a single value centred rather than on a −1 … 1 axis. */
function countAxis(text, lo, hi) {
  const span = Math.max(hi - lo, 1);
  let step = 1;
  for (let k = 1; span / step > 8; k++) step = [1, 2, 5][k % 3] * 10 ** Math.floor(k / 3);
  const pad = hi > lo ? Math.max(0.02 * (hi - lo), 0.1) : 0.5;  // room for a marker at either end
  return {title: {text}, tickmode: "linear", tick0: 0, dtick: step, range: [lo - pad, hi + pad], zeroline: false};
}

/** The count axis of `curves` (each {x} or {y} against 0 … len − 1). */
function curvesAxis(text, curves) {
  const xs = curves.flatMap(c => (c.x || c.y.map((_, n) => n)).filter(v => v !== null));
  return countAxis(text, xs.length ? Math.min(...xs) : 0, xs.length ? Math.max(...xs) : 0);
}

function note(parent, text, attrs) {
  return parent.appendChild(el("p", text, Object.assign({class: "note"}, attrs || {})));
}

// ------------------------------------------------------------------------------------------------ runs

/** Where a run's time comes from, as its cell's hover says it. */
const TIMED = {
  wall: () => "wall time, as the paper pipeline recorded it",
  stored: r => (r.seconds === null ? `a ${r.command} run stores no time`
                                   : "compute time: the sum of the per-question (train: per-update) times the run stored"),
};

function renderRuns() {
  const body = document.getElementById("runs-body");
  body.appendChild(sortableTable([
    {label: "run", value: r => r.name}, {label: "command", value: r => r.command},
    {label: "directory", value: r => r.directory},
    {label: "time (s)", value: r => r.seconds, text: r => fmt(r.seconds, 1), title: r => TIMED[r.timed](r)},
    {label: "fingerprint (sha256)", value: r => (r.settings || {}).sha256 || "–"},
  ], DATA.runs));
  for (const run of DATA.runs) {
    const details = body.appendChild(el("details"));
    details.appendChild(el("summary", `settings of ${run.name} (${run.command})`));
    details.appendChild(el("pre", JSON.stringify(run.settings || {}, null, 1)));
  }
  const env = DATA.environment || {};
  if (Object.keys(env).length) {
    const details = body.appendChild(el("details"));
    details.appendChild(el("summary", "environment: versions and machine"));
    details.appendChild(el("pre", JSON.stringify(env, null, 1)));
  }
}

// ------------------------------------------------------------------------------------------------ methods

/** Whether a [point, low, high, …] figure carries an interval: the data leave its bounds null where none is valid. */
function hasInterval(cell) {
  return cell[1] !== null && cell[2] !== null;
}

/** `point [low, high]`, `point †` (no valid interval), `n/a` (undefined on these questions), `–` (not scored), as
 *  the tables write them; ` (k clipped)` after an NLL with `clipped` probabilities counted as ε (tables.md's mark). */
function intervalText(cell, metric, clipped) {
  if (!cell) return "–";
  const scale = metric.percent ? 100 : 1, digits = metric.percent ? 1 : 4;
  if (cell[0] === null) return "n/a";
  const [point, low, high] = cell.map(v => (v === null ? null : v * scale));
  const mark = metric.name === "NLL" && clipped ? ` (${clipped} clipped)` : "";
  return (hasInterval(cell) ? `${fmt(point, digits)} [${fmt(low, digits)}, ${fmt(high, digits)}]`
                            : `${fmt(point, digits)} ${DAGGER}`) + mark;
}

function methodTable(run) {
  const unscored = r => (r.n === 0 ? `no question scored: quality control excluded all ${r.excluded}, where ` +
                                      exclusionRule() : null);
  return sortableTable([
    {label: "method", value: r => r.method}, {label: "n", value: r => r.n}, {label: "excluded", value: r => r.excluded, title: unscored},
    ...DATA.metrics.map(m => ({label: m.percent ? `${m.name} (%)` : m.name, value: r => (r[m.name] ? r[m.name][0] : null),
                               text: r => intervalText(r[m.name], m, r.nll_clipped), title: unscored})),
  ], run.table, {id: `methods-${run.name}`});
}

/** One forest plot: Δ = method − baseline of `metric` per pair, a whisker where the pair's Δ has a valid interval,
 *  an open diamond (†) where it has none. */
function forestPlot(grid, metric, pairs) {
  const scale = metric.percent ? 100 : 1;  // points of %, as in the tables
  const labels = pairs.map(p => `${plotText(title(p.method))}<br>vs ${plotText(title(p.baseline))}`);
  const cells = pairs.map(p => p.deltas[metric.name].map((v, i) => (i < 3 && v !== null ? v * scale : v)));
  const hover = cells.map((d, i) => (hasInterval(d) ? `Δ ${fmt(d[0])} [${fmt(d[1])}, ${fmt(d[2])}], p = ${fmt(d[3], 3)}`
                                                    : `Δ ${fmt(d[0])} ${DAGGER} (no valid interval or p at this n)`)
                                    + `, n = ${pairs[i].n}`);
  const pick = want => cells.map((d, i) => i).filter(i => hasInterval(cells[i]) === want);
  const withInterval = pick(true), without = pick(false);
  const traces = [{type: "scatter", mode: "markers", name: "Δ [95% interval]", x: withInterval.map(i => cells[i][0]),
                   y: withInterval.map(i => labels[i]), text: withInterval.map(i => hover[i]), hoverinfo: "text",
                   marker: {size: 9, color: "#234"}, meta: {kind: "interval"},
                   error_x: {type: "data", symmetric: false, array: withInterval.map(i => cells[i][2] - cells[i][0]),
                             arrayminus: withInterval.map(i => cells[i][0] - cells[i][1])}}];
  if (without.length) {
    traces.push({type: "scatter", mode: "markers", name: `Δ ${DAGGER} (no valid interval)`,
                 x: without.map(i => cells[i][0]), y: without.map(i => labels[i]), text: without.map(i => hover[i]),
                 hoverinfo: "text", marker: {size: 10, color: "#234", symbol: "diamond-open"}, meta: {kind: "none"}});
  }
  const height = 150 + 50 * pairs.length;
  const div = plotDiv(grid, "forest");
  div.dataset.metric = metric.name;
  div.style.height = `${height}px`;
  plot(div, traces, layout(`Δ ${metric.name}${metric.percent ? " (points of %)" : ""}`, `Δ ${metric.name}`, "", {
    shapes: [{type: "line", x0: 0, x1: 0, yref: "paper", y0: 0, y1: 1, line: {dash: "dot", color: "#888"}}],
    yaxis: {automargin: true, type: "category", categoryorder: "array", categoryarray: labels.slice().reverse()},
    margin: {l: 10, r: 10, t: 40, b: 45}, height, showlegend: without.length > 0,
    legend: {orientation: "h", y: -0.25, font: {size: 10}}}));
}

/** Why a pair has no Δ in `metric` (or in any metric), as a sentence; null when it has one. */
function pairGap(pair, metric, table) {
  const counted = name => {
    const row = table.find(r => r.name === name && r.own);
    return row ? `${title(name)} keeps ${row.n} of ${row.n + row.excluded}` : `${title(name)} was not run`;
  };
  const names = `${title(pair.method)} vs ${title(pair.baseline)}`;
  if (pair.n === 0) {
    return `${names}: no Δ in any metric, quality control kept no question for both (${counted(pair.method)}, ` +
           `${counted(pair.baseline)}).`;
  }
  const cell = pair.deltas[metric.name];
  if (cell && cell[0] === null) {
    return `${names}: Δ ${metric.name} is undefined on its ${pair.n} shared questions (n/a in the tables: ` +
           "the metric is undefined for one of the methods there).";
  }
  return null;
}

function renderPaired(body, run) {
  if (!run.paired.length) {
    note(body, "No paired comparisons: PPR + NoSEED, the baseline of every pair, is not among this run's methods.");
    return;
  }
  body.appendChild(el("h4", "Paired comparisons (Δ = method − baseline, 95% paired bootstrap interval)"));
  const grid = body.appendChild(el("div", null, {class: "grid"}));
  const gaps = new Set();
  for (const metric of DATA.metrics) {
    const pairs = run.paired.filter(p => p.deltas[metric.name] && p.deltas[metric.name][0] !== null);
    run.paired.forEach(p => { const gap = pairGap(p, metric, run.table); if (gap) gaps.add(gap); });
    if (pairs.length) forestPlot(grid, metric, pairs);
  }
  if (gaps.size) {
    const list = body.appendChild(el("ul", null, {class: "note gaps", id: `paired-gaps-${run.name}`}));
    for (const gap of gaps) list.appendChild(el("li", gap));
  }
}

/** A reliability diagram: accuracy per confidence bin against the diagonal, and below it the questions per bin. */
function reliabilityPlot(grid, diagram) {
  const centers = diagram.edges.slice(0, -1).map((e, i) => (e + diagram.edges[i + 1]) / 2);
  const width = diagram.edges[1] - diagram.edges[0];
  const hover = diagram.count.map((c, i) => `${c} question${c === 1 ? "" : "s"}, mean confidence ` +
                                            fmt(diagram.confidence[i], 3));
  const div = plotDiv(grid, "reliability");
  div.dataset.method = diagram.name;
  plot(div, [
    {type: "bar", x: centers, y: diagram.accuracy, width, name: "accuracy", marker: {color: "#4a7ab5"},
     hovertext: hover, hoverinfo: "text+y", meta: {kind: "accuracy"}},
    {type: "scatter", mode: "lines", x: [0, 1], y: [0, 1], name: "calibrated", line: {dash: "dash", color: "#000"}},
    {type: "bar", x: centers, y: diagram.count, width, yaxis: "y2", name: "questions per bin",
     marker: {color: "#999"}, text: diagram.count.map(c => (c ? String(c) : "")), textposition: "outside",
     cliponaxis: false, hovertext: hover, hoverinfo: "text", meta: {kind: "count"}},
  ], layout(`${diagram.method} (n = ${diagram.n})`, "confidence (max probability)", "accuracy", {
    height: 420, margin: {l: 55, r: 10, t: 40, b: 85},
    xaxis: {range: [0, 1], title: {text: "confidence (max probability)"}, anchor: "y2"},
    yaxis: {range: [0, 1], title: {text: "accuracy"}, domain: [0.36, 1]},
    yaxis2: {title: {text: "questions"}, domain: [0, 0.24], rangemode: "tozero", anchor: "x",
             range: [0, 1.35 * Math.max(1, ...diagram.count)]},
    legend: {orientation: "h", x: 0, y: -0.2, yanchor: "top", font: {size: 10}}}));
}

function renderMethods() {
  const body = document.getElementById("methods-body");
  const runs = DATA.runs.filter(r => r.table);
  if (!runs.length) note(body, "No evaluate run in this set.");
  for (const run of runs) {
    body.appendChild(el("h3", `${run.name}: ${(run.settings || {}).dataset || ""}`));
    body.appendChild(el("div", null, {class: "scroll"})).appendChild(methodTable(run));
    const unscored = run.table.filter(r => r.n === 0 && r.own);
    if (unscored.length) {
      note(body, `–: no question scored. Quality control excluded all questions of ` +
                 `${unscored.map(r => `${r.method} (${r.excluded})`).join(", ")}: ${exclusionRule()}.`,
           {class: "note unscored"});
    }
    renderPaired(body, run);
    body.appendChild(el("h4", "Reliability diagrams"));
    const grid = body.appendChild(el("div", null, {class: "grid"}));
    for (const diagram of run.reliability) reliabilityPlot(grid, diagram);
    if (unscored.length) note(body, `No diagram for ${unscored.map(r => r.method).join(", ")}: no question scored.`);
  }
}

// ------------------------------------------------------------------------------------------------ questions

/** Every question of every run, keyed by dataset and id: its text (the first run that holds it) and each run's own
 *  entry ({run, target, paths, methods: the evaluate numbers, drift or EMD records}); runs never merge. */
function collectQuestions() {
  const byKey = new Map();
  for (const run of DATA.runs) {
    for (const q of run.questions || []) {
      const key = `${q.dataset}\u0000${q.id}`;
      if (!byKey.has(key)) byKey.set(key, {dataset: q.dataset, id: q.id, stem: q.stem, options: q.options,
                                           labels: q.labels, answer: q.answer, runs: []});
      const entry = byKey.get(key);
      if (!entry.stem && q.stem) Object.assign(entry, {stem: q.stem, options: q.options, labels: q.labels,
                                                       answer: q.answer});
      if (entry.target === undefined && q.target !== undefined) entry.target = q.target;
      entry.runs.push({run: run.name, target: q.target, paths: q.paths, methods: q.methods});
    }
  }
  return [...byKey.values()];
}

const QUESTIONS = collectQuestions();
/** One row per run × question × method. */
const ROWS = QUESTIONS.flatMap(q => q.runs.flatMap(r => Object.entries(r.methods).map(([method, m]) => ({
  question: q, run: r.run, method, predicted: m.predicted === undefined ? null : optionLabel(q, m.predicted),
  correct: m.correct === undefined ? null : m.correct, confidence: m.confidence ?? null, spread: m.spread ?? null,
  emd: m.emd_bar_l1 ?? null, shift: m.marginal_shift ? m.marginal_shift[m.marginal_shift.length - 1] : null,
  excluded: m.excluded === undefined ? null : m.excluded, mass: m.mass ?? null, values: m,
}))));
/** Whether the page holds more than one run with questions: then every method is named with its run. */
const SEVERAL_RUNS = new Set(ROWS.map(r => r.run)).size > 1;

/** A method as a question's detail names it: with its run where the page holds several. */
function runTitle(run, method) {
  return SEVERAL_RUNS ? `${run}: ${title(method)}` : title(method);
}

function drift(row) {
  return row.emd !== null ? row.emd : row.spread;
}

function filteredRows() {
  const search = document.getElementById("f-search").value.trim().toLowerCase();
  const run = document.getElementById("f-run").value;
  const dataset = document.getElementById("f-dataset").value;
  const method = document.getElementById("f-method").value;
  const correct = document.getElementById("f-correct").value;
  const qc = document.getElementById("f-qc").value;
  const least = parseFloat(document.getElementById("f-drift").value);
  return ROWS.filter(r => (!search || r.question.id.toLowerCase().includes(search)
                           || (r.question.stem || "").toLowerCase().includes(search))
    && (!run || r.run === run) && (!dataset || r.question.dataset === dataset) && (!method || r.method === method)
    && (!correct || r.correct === (correct === "yes"))
    && (!qc || r.excluded === (qc === "excluded"))
    && (isNaN(least) || (drift(r) !== null && drift(r) >= least)));
}

/** A select's options: `first` ("all" unless given), then each value (shown as `label(value)`), sorted by what is
 *  shown unless `keepOrder`. */
function fillSelect(id, values, label, first, keepOrder) {
  const select = document.getElementById(id);
  if (first !== null) select.appendChild(el("option", first || "all", {value: ""}));
  const shown = v => (label ? label(v) : v);
  const unique = [...new Set(values)];
  if (!keepOrder) unique.sort((a, b) => shown(a).localeCompare(shown(b)));
  for (const value of unique) select.appendChild(el("option", shown(value), {value}));
}

function qcText(row) {
  if (row.excluded === null) return "–";
  return row.excluded ? "excluded" : "kept";
}

/** The answer key's label ("B"), from the question's text, else from the stored target. */
function keyLabel(question) {
  if (question.answer !== undefined) return question.answer;
  return question.target === undefined ? null : optionLabel(question, question.target);
}

function renderQuestionTable() {
  const rows = filteredRows();
  document.getElementById("f-count").textContent = `${rows.length} of ${ROWS.length} run × question × method rows`;
  const table = sortableTable([
    {label: "run", value: r => r.run, cls: "run", title: r => r.run}, {label: "dataset", value: r => r.question.dataset},
    {label: "question", value: r => r.question.id}, {label: "stem", value: r => r.question.stem, cls: "stem"},
    {label: "method", value: r => title(r.method)},
    {label: "quality control", value: qcText, title: r => (r.excluded ? `excluded: ${exclusionRule()}` : null)},
    {label: "label mass", value: r => r.mass, text: r => fmt(r.mass, 3)},
    {label: "key", value: r => keyLabel(r.question)},
    {label: "predicted", value: r => r.predicted}, {label: "correct", value: r => r.correct, text: r => fmt(r.correct)},
    {label: "confidence", value: r => r.confidence, text: r => fmt(r.confidence, 3)},
    {label: "spread of θ_N", value: r => r.spread, text: r => fmt(r.spread, 3)},
    {label: "EMD‾ (L1)", value: r => r.emd, text: r => fmt(r.emd, 3)},
    {label: "‖E[θ_N] − E[θ_0]‖₁", value: r => r.shift, text: r => fmt(r.shift, 3)},
  ], rows, {limit: 500, rowClass: r => (r.excluded ? "excluded" : null), onPick: (row, tr) => {
    document.querySelectorAll("#question-table tr.chosen").forEach(t => t.classList.remove("chosen"));
    tr.classList.add("chosen");
    showQuestion(row.question);
  }});
  document.getElementById("question-table").replaceChildren(table);
  renderSelectedDrift(rows);
}

/** Called by each sidecar script: one question's paths {method: {shape, theta (base64 uint16), answers, seeds}}. */
function explorerPaths(file, methods) {
  loadedPaths[file] = methods;
  document.dispatchEvent(new CustomEvent("explorer-paths", {detail: file}));
}

function loadPaths(file) {
  if (loadedPaths[file]) return Promise.resolve(loadedPaths[file]);
  return new Promise((resolve, reject) => {
    const listener = event => {
      if (event.detail !== file) return;
      document.removeEventListener("explorer-paths", listener);
      resolve(loadedPaths[file]);
    };
    document.addEventListener("explorer-paths", listener);
    const script = el("script", null, {src: file});
    script.onerror = () => reject(new Error(`cannot read ${file} (keep explorer-data/ beside the page)`));
    document.head.appendChild(script);
  });
}

/** θ [J][N+1][K] from the sidecar's base64 little-endian uint16 levels. */
function decodeTheta(entry) {
  const bytes = Uint8Array.from(atob(entry.theta), c => c.charCodeAt(0));
  const view = new DataView(bytes.buffer);
  const [J, steps, K] = entry.shape;
  const out = [];
  for (let j = 0; j < J; j++) {
    const path = [];
    for (let n = 0; n < steps; n++) {
      const row = [];
      for (let k = 0; k < K; k++) row.push(view.getUint16(2 * ((j * steps + n) * K + k), true) / DATA.quant);
      path.push(row);
    }
    out.push(path);
  }
  return out;
}

function optionLabel(question, k) {
  return (question.labels && question.labels[k]) || String.fromCharCode(65 + k);
}

/** One row per run × estimate (each method's own, then its alternatives), one column per option (the key's marked
 *  ✓): every run's numbers beside the others. */
function estimateTable(question) {
  const rows = [];
  for (const entry of question.runs) {
    for (const [method, m] of Object.entries(entry.methods).filter(([, values]) => values.probs)) {
      rows.push({run: entry.run, estimate: title(method), probs: m.probs});
      for (const [estimator, probs] of Object.entries(m.alternatives || {})) {
        rows.push({run: entry.run, estimate: estimateTitle(method, estimator), probs});
      }
    }
  }
  const K = Math.max(0, ...rows.map(r => r.probs.length));
  const columns = [...(SEVERAL_RUNS ? [{label: "run", value: r => r.run}] : []), {label: "estimate", value: r => r.estimate},
                   ...[...Array(K).keys()].map(k => ({label: optionLabel(question, k) + (k === question.target ? " ✓" : ""),
                                                      value: r => r.probs[k], text: r => fmt(r.probs[k], 3)}))];
  return sortableTable(columns, rows, {id: "estimate-table"});
}

/** Hover text of every point of every path (shared by the options): the path, its seeds, its answers so far. */
function pathHovers(question, entry, J, steps) {
  const text = [];
  for (let j = 0; j < J; j++) {
    const seeds = entry.seeds && entry.seeds[j].length
      ? plotText(entry.seeds[j].map(a => optionLabel(question, a)).join(" ")) : "none";
    let answers = "";
    for (let n = 0; n < steps; n++) {
      if (n > 0 && entry.answers) answers += (n > 1 ? " " : "") + plotText(optionLabel(question, entry.answers[j][n - 1]));
      text.push(`path ${j}, n = ${n}<br>seeds: ${seeds}<br>answers: ${answers || "–"}`);
    }
    text.push("");
  }
  return text;
}

/** θ_n of every option against n for every path of one run's method (thin) and their mean (thick, dashed); a
 *  method with one θ per path (AM-PPR's θ̂_1: no answers drawn) as markers, one per path and a larger one for the
 *  mean. `values`: the run's numbers of the method on this question. */
function pathsPlot(parent, question, run, method, entry, values) {
  const theta = decodeTheta(entry);
  const J = theta.length, steps = theta[0].length, K = theta[0][0].length;
  const single = steps === 1;
  const text = pathHovers(question, entry, J, steps);
  const x = [];
  for (let j = 0; j < J; j++) x.push(...Array(steps).keys(), null);
  const traces = [];
  for (let k = 0; k < K; k++) {
    const y = [];
    for (let j = 0; j < J; j++) {
      for (let n = 0; n < steps; n++) y.push(theta[j][n][k]);
      y.push(null);
    }
    const color = COLORS[k % COLORS.length], label = plotText(optionLabel(question, k));
    traces.push({type: "scatter", mode: single ? "markers" : "lines", x, y, text,
                 hovertemplate: `${label}: θ = %{y:.3f}<br>%{text}<extra></extra>`, name: `${label} paths`,
                 legendgroup: label, showlegend: false, line: {color, width: 1}, marker: {color, size: 6},
                 opacity: 0.45, meta: {option: k, kind: "paths"}});
    const mean = [...Array(steps).keys()].map(n => theta.reduce((s, path) => s + path[n][k], 0) / J);
    traces.push({type: "scatter", mode: single ? "markers" : "lines", x: [...Array(steps).keys()], y: mean,
                 name: label, legendgroup: label, line: {color, width: 3, dash: "dash"},
                 marker: {color, size: 14, symbol: "line-ew-open", line: {width: 3, color}},
                 meta: {option: k, kind: "mean"}});
  }
  const div = plotDiv(parent, "paths-plot");
  div.dataset.method = `${run}: ${method}`;
  const heading = `${run}: ${title(method)}` + ((values || {}).excluded ? " (excluded by quality control)" : "");
  const xTitle = single ? "n (θ̂_1: one θ per path, no answers drawn)" : "n (answers generated)";
  plot(div, traces, layout(heading, xTitle, "θ_n", {
    xaxis: countAxis(xTitle, 0, steps - 1), yaxis: {range: [0, 1], title: {text: "θ_n"}}}));
}

function curvePlot(parent, text, xTitle, yTitle, curves, cls) {
  const div = plotDiv(parent, cls);
  plot(div, curves.map((c, i) => ({type: "scatter", mode: "lines+markers", name: plotText(c.name),
    x: c.x || c.y.map((_, n) => n), y: c.y, line: {color: COLORS[i % COLORS.length]},
    error_y: c.std ? {type: "data", array: c.std, arrayminus: c.y.map((v, n) => Math.min(c.std[n], v)), visible: true,
                      thickness: 1} : undefined})),
  layout(text, xTitle, yTitle, {showlegend: curves.length > 1 || curves[0].name !== text,
                                 xaxis: curvesAxis(xTitle, curves)}));
  return div;
}

/** The (run, method, its numbers) of a question, over every run that holds it. */
function questionMethods(question) {
  return question.runs.flatMap(entry => Object.entries(entry.methods).map(([method, m]) => [entry, method, m]));
}

function showQuestion(question) {
  const detail = document.getElementById("question-detail");
  detail.hidden = false;
  detail.replaceChildren(el("h3", `${question.dataset} · ${question.id}`));
  detail.appendChild(el("p", question.stem || "(question text not available: the run kept no questions.jsonl and " +
                                             "its data set could not be loaded)",
                        {class: "stem-text", id: "question-stem"}));
  const list = detail.appendChild(el("ul", null, {class: "options", id: "question-options"}));
  (question.options || []).forEach((option, k) => {
    const item = list.appendChild(el("li", `${optionLabel(question, k)}. ${option}`));
    if (k === question.target || optionLabel(question, k) === question.answer) item.classList.add("key");
  });
  const methods = questionMethods(question);
  const excluded = methods.filter(([, , m]) => m.excluded).map(([entry, name]) => runTitle(entry.run, name));
  if (excluded.length) {
    note(detail, `Quality control: ${excluded.join(", ")} ${excluded.length > 1 ? "exclude" : "excludes"} this ` +
                 `question from ${excluded.length > 1 ? "their" : "its"} metrics: ${exclusionRule()}.`,
         {id: "question-qc"});
  }
  detail.appendChild(el("h4", "Estimates of each option (✓: the answer key), each method's own, then its alternatives"));
  detail.appendChild(el("div", null, {class: "scroll"})).appendChild(estimateTable(question));
  const grid = detail.appendChild(el("div", null, {class: "grid", id: "paths-grid"}));
  const absent = note(detail, "", {id: "paths-absent"});
  absent.hidden = true;
  const drawn = new Set();
  Promise.all(question.runs.filter(entry => entry.paths).map(entry => loadPaths(entry.paths).then(paths => {
    for (const [method, path] of Object.entries(paths)) {
      pathsPlot(grid, question, entry.run, method, path, entry.methods[method]);
      drawn.add(`${entry.run}\u0000${method}`);
    }
    drawQueued();
  }).catch(err => grid.appendChild(el("p", err.message, {class: "note"}))))).then(() => {
    const without = methods.filter(([entry, name, m]) => m.probs && !drawn.has(`${entry.run}\u0000${name}`));
    if (without.length) {
      absent.textContent = `No paths for ${without.map(([entry, name]) => runTitle(entry.run, name)).join(", ")}: ` +
                           "it asks once and resamples no answer.";
      absent.hidden = false;
    }
  });
  const drifts = methods.filter(([, , m]) => m.marginal_mean);
  if (drifts.length) {
    detail.appendChild(el("h4", "Marginal drift E[θ_n] of this question (drift run)"));
    const driftGrid = detail.appendChild(el("div", null, {class: "grid"}));
    for (const [entry, method, m] of drifts) {
      const K = m.marginal_mean[0].length;
      curvePlot(driftGrid, `${entry.run}: ${title(method)}`, "n (answers generated)", "E[θ_n]",
                [...Array(K).keys()].map(k => ({name: optionLabel(question, k), y: m.marginal_mean.map(step => step[k])})));
    }
  }
  const emdRuns = question.runs.filter(entry => Object.values(entry.methods).some(m => m.emd_k_b_l1));
  if (emdRuns.length) {
    detail.appendChild(el("h4", "EMD_k(b) of this question (emd run, L1)"));
    const emdGrid = detail.appendChild(el("div", null, {class: "grid"}));
    for (const entry of emdRuns) {
      const k = lookahead(entry.run);
      curvePlot(emdGrid, `${entry.run}: EMD_${k}(b)`, "burn-in b", `EMD_${k}(b) (L1)`,
                Object.entries(entry.methods).filter(([, m]) => m.emd_k_b_l1)
                  .map(([method, m]) => ({name: title(method), y: m.emd_k_b_l1})));
    }
  }
  drawQueued();
}

/** The k of an emd run's EMD_k(b) (its -k/--lookahead setting). */
function lookahead(name) {
  const run = DATA.runs.find(r => r.name === name) || {};
  return (run.settings || {}).lookahead ?? "k";
}

// ------------------------------------------------------------------------------------------------ compare

/** The stored comparison of runs `a` and `b` as Δ = b − a: stored as (first, second) in page order, and flipped
 *  (Δ and its interval negated, p as it is) where `a` is the second; undefined where the two share no question. */
function comparison(a, b) {
  const stored = (DATA.compare || []).find(c => (c.first === a && c.second === b) || (c.first === b && c.second === a));
  if (!stored || stored.first === a) return stored;
  const negate = v => (v === null ? null : -v);
  const flip = d => [negate(d[0]), negate(d[2]), negate(d[1]), d[3]];
  return {first: a, second: b, methods: stored.methods.map(m => ({name: m.name, n: m.n, deltas: Object.fromEntries(
    Object.entries(m.deltas).map(([metric, d]) => [metric, flip(d)]))}))};
}

/** Δ = b − a of every metric per method (the units of the tables; p beside each Δ) on the questions both runs keep. */
function compareTable(pair) {
  const columns = [{label: "method", value: m => title(m.name)}, {label: "n", value: m => m.n}];
  for (const metric of DATA.metrics.filter(mt => pair.methods.some(m => m.deltas[mt.name]))) {  // CE2 has no Δ
    const cell = m => m.deltas[metric.name];
    columns.push({label: `Δ ${metric.name}${metric.percent ? " (points of %)" : ""}`,
                  value: m => (cell(m) ? cell(m)[0] : null), text: m => intervalText(cell(m), metric)});
    columns.push({label: "p", value: m => (cell(m) ? cell(m)[3] : null), text: m => fmt(cell(m) ? cell(m)[3] : null, 3)});
  }
  return sortableTable(columns, pair.methods, {id: "compare-table"});
}

/** q* of the answer key under run `a` (x) against run `b` (y), one point per question both stored for `method`;
 *  hollow where quality control excludes the question in either run. */
function comparePlot(grid, a, b, method) {
  const points = {kept: [], excluded: []};
  for (const q of QUESTIONS) {
    const [ea, eb] = [a, b].map(run => q.runs.find(entry => entry.run === run));
    const [ma, mb] = [ea, eb].map(entry => entry && entry.methods[method]);
    if (!ma || !mb || !ma.probs || !mb.probs || ea.target !== eb.target || ea.target === undefined) continue;
    const [x, y] = [ma.probs[ea.target], mb.probs[eb.target]];
    points[ma.excluded || mb.excluded ? "excluded" : "kept"].push(
      {x, y, text: `${plotText(q.id)}<br>${plotText(a)}: ${fmt(x, 3)}<br>${plotText(b)}: ${fmt(y, 3)}`});
  }
  const trace = (kind, name, marker) => ({type: "scatter", mode: "markers", name, meta: {kind},
    x: points[kind].map(p => p.x), y: points[kind].map(p => p.y), text: points[kind].map(p => p.text),
    hoverinfo: "text", marker});
  const traces = [trace("kept", "question", {size: 7, color: "#234", opacity: 0.7})];
  if (points.excluded.length) {
    traces.push(trace("excluded", "excluded by quality control in either run",
                      {size: 7, color: "#999", symbol: "circle-open"}));
  }
  const div = plotDiv(grid, "compare-plot");
  div.dataset.method = method;
  plot(div, traces, layout(`${title(method)}: q* of the key`, `q*(key), ${a}`, `q*(key), ${b}`, {
    xaxis: {range: [-0.02, 1.02], title: {text: plotText(`q*(key), ${a}`)}},
    yaxis: {range: [-0.02, 1.02], title: {text: plotText(`q*(key), ${b}`)}},
    shapes: [{type: "line", x0: 0, y0: 0, x1: 1, y1: 1, line: {dash: "dot", color: "#888"}}],
    showlegend: points.excluded.length > 0, legend: {orientation: "h", y: -0.25, font: {size: 10}}}));
}

function renderComparison() {
  const body = document.getElementById("compare-body");
  body.replaceChildren();
  const a = document.getElementById("compare-a").value, b = document.getElementById("compare-b").value;
  if (a === b) {
    note(body, "Choose two different runs.");
    return;
  }
  const pair = comparison(a, b);
  if (!pair) {
    note(body, `${a} and ${b} share no question: nothing to compare.`);
    return;
  }
  body.appendChild(el("h3", `${b} − ${a}`));
  body.appendChild(el("div", null, {class: "scroll"})).appendChild(compareTable(pair));
  const empty = pair.methods.filter(m => m.n === 0).map(m => title(m.name));
  if (empty.length) {
    note(body, `–: no question that quality control keeps in both runs for ${empty.join(", ")}.`, {id: "compare-empty"});
  }
  const grid = body.appendChild(el("div", null, {class: "grid", id: "compare-grid"}));
  for (const m of pair.methods) comparePlot(grid, a, b, m.name);
  drawQueued();
}

function renderCompare() {
  const runs = [...new Set((DATA.compare || []).flatMap(c => [c.first, c.second]))];
  if (!runs.length) {
    document.getElementById("compare-controls").hidden = true;
    note(document.getElementById("compare-body"), "No two evaluate runs here share a question: nothing to compare.");
    return;
  }
  const order = DATA.runs.map(r => r.name).filter(name => runs.includes(name));
  fillSelect("compare-a", order, null, null, true);
  fillSelect("compare-b", order, null, null, true);
  document.getElementById("compare-a").value = DATA.compare[0].first;
  document.getElementById("compare-b").value = DATA.compare[0].second;
  for (const id of ["compare-a", "compare-b"]) document.getElementById(id).addEventListener("input", renderComparison);
  renderComparison();
}

// ------------------------------------------------------------------------------------------------ drift

/** The drift test of a figure as summary.md prints it: Û ×10³ ± s.e. (p), * where it drifts; exact: no p. */
function driftText(test) {
  if (!test) return "—";
  const estimate = fmt(1e3 * test.estimate, 3);
  if (test.exact) return `exact ${estimate}`;
  if (test.p === null) return `${estimate} (no p: the records hold no betting increments)`;
  return `${estimate} ± ${fmt(1e3 * (test.se || 0), 3)} (${fmt(test.p, 3)})${test.p < DATA.drift_level ? " *" : ""}`;
}

/** Why a method's EMD row has no urn floor. */
function floorAbsence(entry) {
  return entry.kstep_exact ? "its k-step predictives were enumerated exactly, so its EMD carries no estimator noise"
                           : "the run computed none (emd --noise-floor-replicates 0)";
}

function renderEmdRun(body, run) {
  body.appendChild(el("h3", `${run.name}: ${(run.settings || {}).dataset || ""}`));
  const methods = Object.keys(run.summary);
  const distances = (run.settings || {}).distance || ["l1"];
  body.appendChild(el("h4", "Drift test"));
  body.appendChild(el("div", null, {class: "scroll"})).appendChild(sortableTable([
    {label: "method", value: m => title(m)},
    {label: "questions", value: m => run.summary[m][distances[0]].questions},
    {label: "drift Û ×10³, EMD‾ (p)", value: m => driftText(run.summary[m][distances[0]].drift)},
    ...distances.map(d => ({label: `EMD‾ (${d.toUpperCase()})`, value: m => run.summary[m][d].emd_bar,
                            text: m => `${fmt(run.summary[m][d].emd_bar)} ± ${fmt(run.summary[m][d].emd_bar_std)}`})),
  ], methods.filter(m => run.summary[m][distances[0]]), {id: `drift-test-${run.name}`}));
  const floored = methods.filter(m => run.summary[m][distances[0]] && run.summary[m][distances[0]].floor_replicates);
  const missing = methods.filter(m => !floored.includes(m));
  const lines = [`Û: the mean over questions of the unbiased ‖p^(k) − p^(1)‖₂², zero in expectation for every ` +
                 `martingale; p: the betting test over the rollouts, min(1, 1/E) of its e-value, * where p < ` +
                 `${DATA.drift_level}. This is the ` +
                 "test of drift."];
  if (floored.length) {
    lines.push(`Red: the Pólya-urn floor of ${floored.map(title).join(", ")} ` +
               `(${run.summary[floored[0]][distances[0]].floor_replicates} replicates; a band on EMD_k(b)), a ` +
               "reference only: what urn martingales matched to each question show through the same estimator; it " +
               "does not test a model that is not an urn.");
  }
  for (const m of missing) lines.push(`No urn floor for ${title(m)}: ${floorAbsence(run.summary[m])}.`);
  const caption = body.appendChild(el("div", null, {class: "note caption", id: `emd-caption-${run.name}`}));
  for (const line of lines) caption.appendChild(el("p", line));
  const grid = body.appendChild(el("div", null, {class: "grid"}));
  for (const distance of distances) {
    const rows = methods.filter(m => run.summary[m][distance]).map(m => Object.assign({name: m}, run.summary[m][distance]));
    const names = rows.map(r => plotText(title(r.name)));
    const bars = [{type: "bar", x: names, y: rows.map(r => r.emd_bar), name: "EMD‾ (± std over questions)",
                   error_y: {type: "data", array: rows.map(r => r.emd_bar_std),
                             arrayminus: rows.map(r => Math.min(r.emd_bar_std, r.emd_bar))},  // distances: ≥ 0
                   hovertext: rows.map(r => `drift Û ×10³ ${driftText(r.drift)}`), marker: {color: "#4a7ab5"}}];
    const withFloor = rows.filter(r => r.floor_replicates);
    if (withFloor.length) {
      bars.push({type: "scatter", mode: "markers", x: withFloor.map(r => plotText(title(r.name))),
                 y: withFloor.map(r => r.floor), name: "urn floor (reference)", meta: {kind: "floor"},
                 marker: {symbol: "line-ew-open", size: 30, color: "#c00", line: {width: 2, color: "#c00"}}});
    }
    plot(plotDiv(grid), bars, layout(`EMD‾ (${distance})`, "", `EMD‾ (${distance})`,
                                              {legend: {orientation: "h", y: -0.2, font: {size: 10}}}));
    const traces = [];
    rows.forEach((r, i) => {
      const b = r.burn_in.map((_, n) => n), color = COLORS[i % COLORS.length];
      if (r.floor_replicates) {
        traces.push({type: "scatter", mode: "lines", x: [...b, ...b.slice().reverse()],
                     y: [...r.burn_in_floor_high, ...r.burn_in_floor_low.slice().reverse()], fill: "toself",
                     fillcolor: "#c00", opacity: 0.15, line: {width: 0}, hoverinfo: "skip",
                     name: plotText(`${title(r.name)}: urn floor`), meta: {kind: "floor"}});
      }
      traces.push({type: "scatter", mode: "lines+markers", x: b, y: r.burn_in, name: plotText(title(r.name)),
                   line: {color}, error_y: {type: "data", array: r.burn_in_std, visible: true, thickness: 1,
                                            arrayminus: r.burn_in.map((v, n) => Math.min(r.burn_in_std[n], v))},
                   hovertext: (r.burn_in_drift || []).map(t => `drift Û ×10³ ${driftText(t)}`)});
    });
    const last = Math.max(...rows.map(r => r.burn_in.length - 1));
    const k = lookahead(run.name);
    plot(plotDiv(grid), traces, layout(`EMD_${k}(b) (${distance})`, "burn-in b", `EMD_${k}(b) (${distance})`,
                                       {xaxis: countAxis("burn-in b", 0, last)}));
  }
}

function renderDrift() {
  const body = document.getElementById("drift-body");
  const emdRuns = DATA.runs.filter(r => r.command === "emd" && r.summary && Object.keys(r.summary).length);
  for (const run of emdRuns) renderEmdRun(body, run);
  if (!emdRuns.length) note(body, "No emd run in this set: no EMD figures.");
  body.appendChild(el("h3", "Marginal drift of the selected questions"));
  body.appendChild(el("div", null, {class: "grid", id: "selected-drift"}));
  if (!DATA.runs.some(r => r.command === "drift")) note(body, "No drift run in this set.");
}

function renderSelectedDrift(rows) {
  const target = document.getElementById("selected-drift");
  if (!target) return;
  target.replaceChildren();
  const byMethod = new Map();  // run × method → its questions' shifts
  for (const r of rows.filter(row => row.values.marginal_shift)) {
    const key = runTitle(r.run, r.method);
    if (!byMethod.has(key)) byMethod.set(key, []);
    byMethod.get(key).push(r.values.marginal_shift);
  }
  const curves = [...byMethod].map(([name, shifts]) => ({
    name: `${name} (${shifts.length} question${shifts.length === 1 ? "" : "s"})`,
    y: shifts[0].map((_, n) => shifts.reduce((s, v) => s + v[n], 0) / shifts.length)}));
  if (curves.length) {
    curvePlot(target, "mean ‖E[θ_n] − E[θ_0]‖₁ over the selected questions", "n (answers generated)", "L1 shift",
              curves);
  }
  drawQueued();
}

// ------------------------------------------------------------------------------------------------ training, reasoning

function renderTraining() {
  const body = document.getElementById("training-body");
  const runs = DATA.runs.filter(r => r.command === "train");
  if (!runs.length) note(body, "No train run in this set.");
  const skip = new Set(["step", "epoch", "group", "k1", "k2", "seconds"]);
  for (const run of runs) {
    body.appendChild(el("h3", run.name));
    const grid = body.appendChild(el("div", null, {class: "grid"}));
    for (const [column, values] of Object.entries(run.log)) {
      if (skip.has(column) || values.every(v => v === null)) continue;
      curvePlot(grid, column, "optimiser step", column, [{name: column, x: run.log.step, y: values}], "training");
    }
  }
}

function renderReasoning() {
  const body = document.getElementById("reasoning-body");
  const runs = DATA.runs.filter(r => r.command === "reasoning");
  if (!runs.length) note(body, "No reasoning run in this set.");
  const grid = body.appendChild(el("div", null, {class: "grid"}));
  for (const run of runs) {
    const conditions = Object.values(run.conditions);
    const traces = conditions.map((c, i) => ({type: "scatter", mode: "lines+markers",
      name: plotText(c.title), x: c.curve_mean.map((_, n) => n + 1), y: c.curve_mean,
      line: {color: COLORS[i % COLORS.length]}, error_y: {type: "data", array: c.curve_std || [], visible: true}}));
    const last = Math.max(1, ...conditions.map(c => c.curve_mean.length));
    const tau = run.settings.tau ?? (run.settings.config || {}).tau;
    plot(plotDiv(grid), traces, layout(`${run.name}: CoT drift`, "pair n", `c_n = cos(h̄_n, h̄_n+${tau ?? "τ"})`,
                                       {xaxis: countAxis("pair n", 1, last)}));
    reasoningCounts(body, run);
  }
}

/** A reasoning run's answers per condition, as its summary table counts them: pairs generated, answers that parse
 *  (of those pairs), pairs off the format, and the majority accuracy; ‡ where too few answers parse for c_n and the
 *  majority accuracy to mean much. */
function reasoningCounts(body, run) {
  const conditions = Object.values(run.conditions).filter(c => c.pairs !== undefined);
  if (!conditions.length) return;
  const accuracy = c => ((c.majority_accuracy || {}).overall ?? null);
  const marked = c => (c.few_parsed ? " ‡" : "");
  body.appendChild(el("div", null, {class: "scroll"})).appendChild(sortableTable([
    {label: "condition", value: c => c.title}, {label: "pairs", value: c => c.pairs},
    {label: "answers parsed", value: c => c.valid_answers, text: c => `${c.valid_answers} of ${c.pairs}${marked(c)}`},
    {label: "malformed pairs", value: c => c.malformed},
    {label: "majority acc.", value: accuracy, text: c => fmt(accuracy(c), 2) + marked(c)},
  ], conditions, {id: `reasoning-counts-${run.name}`}));
  const few = conditions.filter(c => c.few_parsed);
  if (few.length) {
    note(body, `‡: fewer than ${fmt(100 * run.settings.min_parsed, 0)}% of the pairs' answers parse for ` +
               `${few.map(c => c.title).join(", ")}: its c_n and majority accuracy rest on the few that do.`);
  }
}

renderRuns();
renderMethods();
renderCompare();
renderDrift();
renderTraining();
renderReasoning();
drawQueued();
fillSelect("f-run", ROWS.map(r => r.run));
fillSelect("f-dataset", QUESTIONS.map(q => q.dataset));
fillSelect("f-method", ROWS.map(r => r.method), title);
for (const id of ["f-search", "f-run", "f-dataset", "f-method", "f-correct", "f-qc", "f-drift"]) {
  document.getElementById(id).addEventListener("input", renderQuestionTable);
}
renderQuestionTable();
