// Plan: the form writes a workload (JSON, which is YAML), or a workload file is loaded; the plan
// runs on the server in the background (progress, cancel) and its report.html is shown here.
"use strict";

const form = document.getElementById("workload");
const yaml = document.getElementById("yaml");
let job = null, timer = null, edited = false;

const list = (s) => String(s).split(",").map((x) => x.trim()).filter(Boolean);
const number = (s) => (s.trim() !== "" && Number.isFinite(Number(s)) ? Number(s) : s);

function workloadOf(p) {
  // Values the form does not understand stay as typed, so the planner's own check names them.
  return {
    name: p.name ?? "my-plan", model: p.model ?? "", hardware: list(p.hardware ?? ""),
    arrival: {rate_per_s: number(p.rate ?? ""), process: "poisson"},
    prompt_len: {dist: "lognormal", median: number(p.prompt ?? ""), sigma: 0.8, min: 16, max: 8192},
    output_len: {dist: "lognormal", median: number(p.output ?? ""), sigma: 0.6, min: 8, max: 2048},
    slo: {ttft_p99_s: number(p.ttft ?? ""), tpot_p99_s: number(p.tpot ?? "")},
    max_gpus: number(p["max-gpus"] ?? "8"), tp: list(p.tps ?? "1").map(number), requests: number(p.requests ?? "300"),
  };
}

function fromForm() {
  const params = RL.readForm(form);
  if (job) params.job = job;
  RL.saveState(params);
  if (!edited) yaml.value = JSON.stringify(workloadOf(params), null, 2);
}

function show(st) {
  const bar = document.getElementById("progress");
  bar.max = Math.max(1, st.total); bar.value = st.done;
  document.getElementById("status").textContent =
    `${st.state}: ${st.done}/${st.total} configurations ${st.label ? "(" + st.label + ")" : ""}, ${st.elapsed_s.toFixed(1)} s`;
  document.getElementById("cancel").disabled = st.state !== "running";
  document.getElementById("run").disabled = st.state === "running";
  if (st.error) RL.showError(st.error);
  if (st.state === "done") {
    const c = st.plan.chosen;
    document.getElementById("answer").textContent = c
      ? `cheapest meeting the SLOs: ${c.config} (${c.gpus} GPUs, ${RL.usd(c.usd_per_hour)}/hour, ${RL.usd(c.usd_per_million_output_tokens)} per million output tokens)`
      : "no configuration meets the SLOs: the report says which comes closest and why";
    const link = document.getElementById("report-link"), frame = document.getElementById("report");
    link.href = st.report; link.hidden = false;
    frame.src = st.report; frame.hidden = false;
  }
  if (st.state !== "running") { clearInterval(timer); timer = null; }
  document.body.dataset.plan = st.state;
}

async function poll() {
  try { show(await RL.api(`/api/plan/${encodeURIComponent(job)}`)); } catch (e) {
    RL.showError(e.message); clearInterval(timer); timer = null; document.body.dataset.plan = "gone";
  }
}

async function files(input) {
  return Promise.all([...input.files].map(async (f) => ({name: f.name, text: await f.text()})));
}

async function run() {
  RL.showError("");
  document.getElementById("answer").textContent = "";
  document.getElementById("report").hidden = true;
  document.getElementById("report-link").hidden = true;
  try {
    const st = await RL.api("/api/plan", null, {yaml: yaml.value, files: await files(document.getElementById("trace-files"))});
    job = st.job;
    fromForm();
    show(st);
    timer = setInterval(poll, 300);
  } catch (e) { RL.showError(e.message); document.body.dataset.plan = "refused"; }
}

async function start() {
  try {
    const cat = await RL.loadCatalog();
    RL.fillSelect(document.getElementById("model"), cat.models.map((m) => m.name));
    document.getElementById("model").value = "llama-3.1-8b";
  } catch (e) { RL.showError(e.message); }
  const params = new URLSearchParams(location.search);
  RL.loadForm(form, params);
  fromForm();
  form.addEventListener("input", () => { edited = false; fromForm(); });
  yaml.addEventListener("input", () => { edited = true; });
  document.getElementById("yaml-file").addEventListener("change", async (ev) => {
    const [f] = await files(ev.target);
    if (f) { yaml.value = f.text; edited = true; }
  });
  document.getElementById("run").addEventListener("click", run);
  document.getElementById("cancel").addEventListener("click", async () => {
    try { show(await RL.api(`/api/plan/${encodeURIComponent(job)}/cancel`, null, {})); } catch (e) { RL.showError(e.message); }
  });
  if (params.has("job")) { job = params.get("job"); poll(); timer = setInterval(poll, 300); }
}

start();
