// Estimate: one scenario, recomputed on every change: /api/estimate (the `estimate --format json`
// record), /api/ops for the prefill and the first decode step, /api/show for the roofs.
"use strict";

const BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];
const SCENARIO = ["model", "hardware", "engine", "weight-dtype", "kv-dtype", "tp", "ep"];
const form = document.getElementById("scenario");
const shows = {};

function bandEdges(b) {
  if (b == null) return null;
  const lo = Array.isArray(b) ? b[0] : (b.low ?? b.lo), hi = Array.isArray(b) ? b[1] : (b.high ?? b.hi);
  return lo == null || hi == null ? null : [lo, hi];
}

function bandText(rec, key) {
  // The prediction band (where 80% of held-out measurements fell): <name>_band_s as [low, high] or {low, high}.
  const e = bandEdges(rec[`${key}_band_s`]);
  return e ? `band ${RL.seconds(e[0])} – ${RL.seconds(e[1])}` : "";
}

function showBand(id, edges, text) {
  const el = document.getElementById(id);
  el.textContent = text;
  el.dataset.band = edges ? edges.join(",") : "";
}

function showNumbers(rec) {
  RL.setValue("ttft", rec.ttft_s, RL.seconds(rec.ttft_s));
  RL.setValue("tpot", rec.tpot_s, rec.tpot_s == null ? "- (one output token)" : RL.seconds(rec.tpot_s));
  RL.setValue("e2e", rec.e2e_s, RL.seconds(rec.e2e_s));
  RL.setValue("throughput", rec.output_tokens_per_s, RL.num(rec.output_tokens_per_s));
  RL.setValue("usd", rec.usd_per_million_output_tokens,
    rec.usd_per_million_output_tokens == null ? "- (no price)" : RL.usd(rec.usd_per_million_output_tokens));
  const m = rec.memory;
  RL.setValue("memory", m.total_bytes, `${RL.bytes(m.total_bytes)} of ${RL.bytes(m.capacity_bytes)}`);
  document.getElementById("fits").textContent = m.fits ? "fits" : `DOES NOT FIT: short by ${RL.bytes(m.shortfall_bytes)}`;
  for (const k of ["ttft", "tpot", "e2e"]) showBand(`${k}-band`, bandEdges(rec[`${k}_band_s`]), bandText(rec, k));
  const tb = bandEdges(rec.output_tokens_band_per_s);
  showBand("throughput-band", tb, tb ? `band ${RL.num(tb[0])} – ${RL.num(tb[1])}` : "");
  document.getElementById("summary").textContent =
    `${rec.model} on ${rec.hardware}: batch ${rec.batch}, prompt ${rec.prompt_len}, output ${rec.output_len}; ` +
    `weights ${rec.weight_dtype}, KV ${rec.kv_dtype}, compute ${rec.compute_dtype}, attention ${rec.attention}; ` +
    `TP ${rec.tp} x PP ${rec.pp}` + (rec.ep > 1 ? `, EP ${rec.ep}` : "") + ` = ${rec.gpus} GPU(s); ` +
    `prefill ${rec.prefill.bound}-bound, decode ${rec.decode.bound}-bound (ridge ${rec.ridge_point.toFixed(0)} FLOP/B)`;
}

function memoryChart(m) {
  const part = (name, v, color) => ({type: "bar", orientation: "h", name, x: [v / 1e9], y: ["memory"], marker: {color},
    hovertemplate: `${name}: %{x:.3g} GB<extra></extra>`});
  return RL.draw("memory-chart", [part("weights", m.weights_bytes, "#4878a8"), part("KV cache", m.kv_cache_bytes, "#e0923b"),
    part("activations", m.activation_bytes, "#6aa66a")], RL.layout({barmode: "stack", title: {text: "memory per GPU (GB) against capacity"},
    margin: {l: 70, r: 20, t: 30, b: 30}, xaxis: {range: [0, Math.max(m.capacity_bytes, m.total_bytes) / 1e9 * 1.05]},
    shapes: [{type: "line", x0: m.capacity_bytes / 1e9, x1: m.capacity_bytes / 1e9, y0: -0.5, y1: 0.5, line: {color: "#c00", width: 3}}],
    annotations: [{x: m.capacity_bytes / 1e9, y: 0.5, text: "capacity", showarrow: false, yanchor: "bottom", font: {color: "#c00"}}]}));
}

function opPoints(ops, phase, symbol) {
  const pts = ops.filter((o) => o.flops > 0 && o.time_s > 0 && o.intensity > 0);
  return {type: "scatter", mode: "markers", name: phase, marker: {size: 9, symbol},
    x: pts.map((o) => o.intensity), y: pts.map((o) => o.flops / o.time_s),
    text: pts.map((o) => `${RL.esc(o.op)} (${phase})<br>FLOPs ${RL.si(o.flops, "FLOP")}<br>bytes ${RL.bytes(o.bytes)}` +
      `<br>intensity ${RL.num(o.intensity, 3)} FLOP/B<br>${RL.esc(o.bound)}-bound, ${RL.seconds(o.time_s)} per layer`),
    hovertemplate: "%{text}<extra></extra>"};
}

function rooflineChart(rec, hw, prefill, decode) {
  const traces = [opPoints(prefill.ops, "prefill", "circle"), opPoints(decode.ops, "decode", "diamond")];
  const peak = (hw.peak_tflops[rec.compute_dtype] ?? hw.peak_tflops.bf16) * 1e12, bw = hw.memory_bandwidth_tb_s * 1e12;
  const xs = [0.1, peak / bw, 1e5];
  traces.unshift({type: "scatter", mode: "lines", name: `roof (${RL.esc(rec.compute_dtype)})`, line: {color: "#333"},
    x: xs, y: xs.map((i) => Math.min(peak, bw * i)), hoverinfo: "skip"});
  return RL.draw("roofline-chart", traces, RL.layout({title: {text: `roofline: ${RL.esc(rec.model)} on ${RL.esc(rec.hardware)}`},
    xaxis: {type: "log", title: {text: "arithmetic intensity (FLOP/byte)"}},
    yaxis: {type: "log", title: {text: "attained FLOP/s"}}, legend: {x: 0.02, y: 0.98}}));
}

function opsTable(id, ops) {
  RL.table(document.getElementById(id), ["operator", "kind", "layers", "FLOPs", "bytes", "FLOP/B", "time (all layers)", "share", "bound"],
    ops.map((o) => [o.op, o.kind, o.layers, RL.si(o.flops, "FLOP"), RL.bytes(o.bytes), RL.num(o.intensity, 3),
      RL.seconds(o.total_time_s), `${(o.share * 100).toFixed(1)}%`, o.bound]));
}

async function hardwareShow(name) {
  if (!shows[name]) shows[name] = RL.api("/api/show", {ref: name});
  return shows[name];
}

const update = RL.coalesce(async () => {
  const params = RL.readForm(form);
  RL.saveState(params);
  const scenario = Object.fromEntries(Object.entries(params).filter(([k]) => SCENARIO.includes(k)));
  const opsOf = (phase) => RL.api("/api/ops", {...scenario, phase, batch: params.batch ?? "1", "seq-len": params["prompt-len"] ?? "512"});
  try {
    const rec = await RL.api("/api/estimate", params);
    const [prefill, decode, hw] = await Promise.all([opsOf("prefill"), opsOf("decode"), hardwareShow(rec.hardware)]);
    RL.showError("");
    showNumbers(rec);
    document.getElementById("ops-prefill-len").textContent = prefill.seq_len;
    document.getElementById("ops-decode-len").textContent = decode.seq_len;
    opsTable("ops-prefill", prefill.ops);
    opsTable("ops-decode", decode.ops);
    document.body.dataset.numbers = "1";
    await Promise.all([memoryChart(rec.memory), rooflineChart(rec, hw, prefill, decode)]);
    document.body.dataset.ready = String(Number(document.body.dataset.ready || 0) + 1);
  } catch (e) {
    RL.showError(e.message);
    document.body.dataset.ready = String(Number(document.body.dataset.ready || 0) + 1);
  }
});

async function start() {
  try {
    const cat = await RL.loadCatalog();
    RL.fillSelect(document.getElementById("model"), cat.models.map((m) => m.name));
    RL.fillSelect(document.getElementById("hardware"), cat.hardware.map((h) => h.name));
    RL.fillSelect(document.getElementById("engine"), cat.engines.map((e) => e.name), "profile's");
    document.getElementById("model").value = "llama-3.1-8b";
    document.getElementById("hardware").value = "h100-sxm";
  } catch (e) { RL.showError(e.message); }
  RL.loadForm(form, new URLSearchParams(location.search));
  const slider = document.getElementById("batch-slider"), batch = document.getElementById("batch");
  const at = BATCHES.indexOf(Number(batch.value));
  slider.value = at >= 0 ? at : 0;
  slider.addEventListener("input", () => { batch.value = BATCHES[slider.value]; update(); });
  form.addEventListener("input", (ev) => { if (ev.target !== slider) update(); });
  form.addEventListener("submit", (ev) => ev.preventDefault());
  update();
}

start();
