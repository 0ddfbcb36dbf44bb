// Compare: uploaded benchmark result files, measured vs predicted, as `roofline compare --format json`.
"use strict";

const form = document.getElementById("options");

async function run() {
  const params = RL.readForm(form);
  RL.saveState(params);
  const input = document.getElementById("files");
  if (!input.files.length) return;
  const files = await Promise.all([...input.files].map(async (f) => ({name: f.name, text: await f.text()})));
  try {
    const rec = await RL.api("/api/compare", null, {files, options: params});
    RL.showError("");
    await show(rec);
  } catch (e) { RL.showError(e.message); }
  document.body.dataset.ready = String(Number(document.body.dataset.ready || 0) + 1);
}

async function show(rec) {
  const s = rec.summary;
  document.getElementById("summary").textContent = s.metrics
    ? `${s.runs} runs in ${s.files} files, ${s.metrics} metrics: median |error| ${(100 * s.median_abs_error).toFixed(1)}%, ` +
      `p90 ${(100 * s.p90_abs_error).toFixed(1)}%` + (s.failed_files ? `; ${s.failed_files} file(s) not read` : "")
    : `${s.runs} runs in ${s.files} files: no metric predicted` + (s.failed_files ? `; ${s.failed_files} file(s) not read` : "");
  const rows = rec.runs.flatMap((r) => r.metrics.map((m) => [r.run, r.model, r.hardware, m.metric, RL.num(m.measured),
    RL.num(m.predicted), m.error == null ? "-" : `${(100 * m.error).toFixed(1)}%`]));
  RL.table(document.getElementById("metrics"), ["run", "model", "hardware", "metric", "measured", "predicted", "error"], rows);
  document.getElementById("metrics").dataset.rows = String(rows.length);
  const fails = document.getElementById("failures");
  fails.replaceChildren(...rec.errors.map((e) => { const li = document.createElement("li"); li.textContent = e.error; return li; }));
  const pts = rec.runs.flatMap((r) => r.metrics.filter((m) => m.measured > 0 && m.predicted > 0).map((m) => ({r, m})));
  const all = pts.flatMap(({m}) => [m.measured, m.predicted]);
  const lo = Math.min(...all, 1) / 2, hi = Math.max(...all, 1) * 2;
  await RL.draw("compare-chart", [
    {type: "scatter", mode: "lines", name: "predicted = measured", x: [lo, hi], y: [lo, hi], line: {dash: "dot", color: "#888"}, hoverinfo: "skip"},
    {type: "scatter", mode: "markers", name: "metrics", x: pts.map((p) => p.m.measured), y: pts.map((p) => p.m.predicted),
      text: pts.map(({r, m}) => `${RL.esc(r.run)}<br>${RL.esc(m.metric)}: measured ${RL.num(m.measured)}, predicted ${RL.num(m.predicted)}`),
      hovertemplate: "%{text}<extra></extra>", marker: {size: 9}}],
  RL.layout({title: {text: "predicted vs measured (seconds, or tokens/s)"}, xaxis: {type: "log", title: {text: "measured"}},
    yaxis: {type: "log", title: {text: "predicted"}}}));
}

async function start() {
  try {
    const cat = await RL.loadCatalog();
    RL.fillSelect(document.getElementById("model"), cat.models.map((m) => m.name), "the file's");
    RL.fillSelect(document.getElementById("hardware"), cat.hardware.map((h) => h.name), "the file's");
    RL.fillSelect(document.getElementById("engine"), cat.engines.map((e) => e.name), "by format");
  } catch (e) { RL.showError(e.message); }
  RL.loadForm(form, new URLSearchParams(location.search));
  form.addEventListener("change", run);
  form.addEventListener("submit", (ev) => ev.preventDefault());
}

start();
