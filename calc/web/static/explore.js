// Explore: TTFT, TPOT and output tokens/s against batch or context for several models and GPUs,
// one /api/explore call (the vectorised estimator, the sweep's columns) per change, redrawn while the slider moves.
"use strict";

const form = document.getElementById("scenario");
const METRICS = [["ttft_s", "chart-ttft", "TTFT (s)"], ["tpot_s", "chart-tpot", "TPOT (s)"],
  ["output_tokens_per_s", "chart-throughput", "output tokens/s"]];

function axis(params) {
  // The x values as the CLI's range syntax start:stop:step, about `points` of them.
  const xMax = Math.max(2, Math.floor(Number(params["x-max"] ?? 200)) || 200);
  const n = Math.max(2, Math.min(2000, Math.floor(Number(params.points ?? 200)) || 200));
  const start = params.x === "context" ? Math.min(128, xMax - 1) : 1;
  const step = Math.max(1, Math.floor((xMax - start) / (n - 1)));
  return `${start}:${start + step * (n - 1)}:${step}`;
}

function query(params) {
  const q = {model: params.model ?? "", hardware: params.hardware ?? "", columns: METRICS.map((m) => m[0]).join(",")};
  for (const k of ["weight-dtype", "tp"]) if (params[k] !== undefined) q[k] = params[k];
  const fixed = params.fixed ?? "1024";
  if (params.x === "context") { q.context = axis(params); q.batch = fixed; } else { q.batch = axis(params); q["prompt-len"] = fixed; }
  return q;
}

async function draw(curves, params) {
  const xKey = params.x === "context" ? "prompt_len" : "batch";
  for (const [metric, id, title] of METRICS) {
    const traces = curves.map((c) => [`${c.model} on ${c.hardware}`, c]).map(([name, c]) => ({type: "scatter", mode: "lines",
      name: RL.esc(name), x: c[xKey], y: c[metric],
      hovertemplate: `${RL.esc(name)}<br>${xKey} %{x}<br>${title} %{y:.4g}<extra></extra>`}));
    await RL.draw(id, traces, RL.layout({title: {text: title}, showlegend: metric === "ttft_s",
      legend: {x: 0.01, y: 0.99, bgcolor: "rgba(255,255,255,0.7)"},
      xaxis: {title: {text: params.x === "context" ? "context (tokens)" : "batch (sequences)"}},
      yaxis: {type: metric === "output_tokens_per_s" ? "linear" : "log", title: {text: title}}}));
    document.getElementById(id).dataset.points = String(traces.reduce((n, t) => n + t.x.length, 0));
    document.getElementById(id).dataset.fixed = params.fixed ?? "1024";
  }
}

function label(params) {
  document.getElementById("fixed-label").textContent = params.x === "context" ? "batch" : "prompt tokens";
  document.getElementById("fixed-value").textContent = params.fixed ?? "1024";
}

const update = RL.coalesce(async () => {
  const params = RL.readForm(form);
  RL.saveState(params);
  label(params);
  const t0 = performance.now();
  try {
    const answer = await RL.api("/api/explore", query(params));
    RL.showError("");
    await draw(answer.curves, params);
    document.getElementById("summary").textContent =
      `${answer.scenarios} scenarios computed and drawn in ${(performance.now() - t0).toFixed(0)} ms`;
  } catch (e) { RL.showError(e.message); }
  document.body.dataset.ready = String(Number(document.body.dataset.ready || 0) + 1);
});

async function start() {
  try {
    const cat = await RL.loadCatalog();
    for (const [id, names] of [["model-names", cat.models], ["hardware-names", cat.hardware]]) {
      const list = document.getElementById(id);
      for (const n of names) { const o = document.createElement("option"); o.value = n.name; list.append(o); }
    }
  } catch (e) { RL.showError(e.message); }
  RL.loadForm(form, new URLSearchParams(location.search));
  const x = document.getElementById("x"), fixed = document.getElementById("fixed");
  const bounds = () => { fixed.max = x.value === "context" ? "512" : "32768"; };
  bounds();
  x.addEventListener("input", () => { bounds(); fixed.value = x.value === "context" ? "16" : "1024";
    document.getElementById("x-max").value = x.value === "context" ? "32768" : "200"; });
  form.addEventListener("input", () => update());
  form.addEventListener("submit", (ev) => ev.preventDefault());
  update();
}

start();
