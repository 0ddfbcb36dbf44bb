// Catalog: every model and accelerator the calculator knows, with the sources its YAML cites.
"use strict";

const form = document.getElementById("filter");

function sources(obj) {
  const ul = document.createElement("ul");
  for (const [key, text] of Object.entries(obj || {})) {
    const li = document.createElement("li");
    const url = String(text).match(/https?:\/\/[^\s)"']+/);
    li.append(`${key}: `);
    if (url) {
      const a = document.createElement("a");
      a.href = url[0]; a.textContent = String(text); a.rel = "noreferrer"; a.target = "_blank";
      li.append(a);
    } else li.append(String(text));
    ul.append(li);
  }
  return ul;
}

const count = (n) => n == null ? "-" : n >= 1e9 ? `${(n / 1e9).toPrecision(3)} B` : `${(n / 1e6).toPrecision(3)} M`;

function draw(cat) {
  const params = RL.readForm(form);
  RL.saveState(params);
  const q = (params.q || "").toLowerCase();
  const hit = (r) => !q || `${r.name} ${r.description}`.toLowerCase().includes(q);
  const models = cat.models.filter(hit), hardware = cat.hardware.filter(hit);
  document.getElementById("model-count").textContent = `${models.length} of ${cat.models.length}`;
  document.getElementById("hardware-count").textContent = `${hardware.length} of ${cat.hardware.length}`;
  RL.table(document.getElementById("models"), ["model", "description", "params", "active", "layers", "attention", "KV/token", "max context", "dtype", "sources"],
    models.map((m) => [m.name, m.description, count(m.params_total), count(m.params_active), m.num_layers, m.attention,
      RL.bytes(m.kv_bytes_per_token), m.max_context, m.dtype, sources(m.sources)]));
  RL.table(document.getElementById("hardware"), ["hardware", "description", "kind", "memory GB", "TB/s", "bf16 TFLOP/s", "fp8 TFLOP/s", "$/hour", "sources"],
    hardware.map((h) => [h.name, h.description, h.kind, h.memory_gb, h.memory_bandwidth_tb_s, h.peak_tflops.bf16 ?? "-",
      h.peak_tflops.fp8 ?? "-", h.usd_per_hour == null ? "-" : h.usd_per_hour.toFixed(2), sources(h.sources)]));
  document.body.dataset.ready = "1";
}

async function start() {
  RL.loadForm(form, new URLSearchParams(location.search));
  try {
    const cat = await RL.loadCatalog();
    draw(cat);
    form.addEventListener("input", () => draw(cat));
  } catch (e) { RL.showError(e.message); }
  form.addEventListener("submit", (ev) => ev.preventDefault());
}

start();
