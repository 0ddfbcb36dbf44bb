// Shared by every page: the API call, the one-line error, state in the URL, number formats.
// Text from the server or the user reaches the page through textContent (never innerHTML),
// and through esc() where plotly reads it as markup (hover text, legends).
"use strict";

const RL = {};

RL.esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));

RL.api = async function (path, params, body) {
  const url = params ? `${path}?${new URLSearchParams(params)}` : path;
  const init = body === undefined ? {} : {method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  const r = await fetch(url, init);
  let data;
  try { data = await r.json(); } catch (e) { data = {error: `roofline: error: ${path}: HTTP ${r.status}`}; }
  if (!r.ok) throw new Error(data.error || `roofline: error: ${path}: HTTP ${r.status}`);
  return data;
};

RL.showError = function (message) {
  const box = document.getElementById("error");
  box.textContent = message || "";
  box.hidden = !message;
};

// Form state <-> URL: every named input of the form is a query parameter (empty ones left out).
RL.readForm = function (form) {
  const out = {};
  for (const el of form.querySelectorAll("[name]")) {
    if (el.type === "checkbox") { if (el.checked) out[el.name] = "true"; continue; }
    const v = String(el.value).trim();
    if (v !== "") out[el.name] = v;
  }
  return out;
};

RL.loadForm = function (form, params) {
  for (const el of form.querySelectorAll("[name]")) {
    if (!params.has(el.name)) continue;
    const v = params.get(el.name);
    if (el.type === "checkbox") el.checked = ["1", "true", "on", "yes"].includes(v.toLowerCase());
    else if (el.tagName === "SELECT" && ![...el.options].some((o) => o.value === v)) el.add(new Option(v, v));
    if (el.type !== "checkbox") el.value = v;
  }
};

RL.saveState = function (params) {
  const q = new URLSearchParams(params).toString();
  history.replaceState(null, "", q ? `${location.pathname}?${q}` : location.pathname);
};

// One request at a time per view: a change while one is in flight runs once it returns, with
// the newest inputs (a slider dragged fast sends no backlog).
RL.coalesce = function (fn) {
  let running = false, again = false;
  const go = async () => {
    if (running) { again = true; return; }
    running = true;
    try { await fn(); } finally {
      running = false;
      if (again) { again = false; go(); }
    }
  };
  return go;
};

RL.catalog = null;
RL.loadCatalog = async function () {
  if (!RL.catalog) RL.catalog = await RL.api("/api/catalog");
  return RL.catalog;
};

RL.fillSelect = function (select, names, blank) {
  const keep = select.value;
  select.replaceChildren();
  if (blank !== undefined) select.add(new Option(blank, ""));
  for (const n of names) select.add(new Option(n, n));
  if (keep && names.includes(keep)) select.value = keep;
};

// Numbers as people read them (the server's values are SI: seconds, bytes, FLOPs).
RL.seconds = (s) => s == null ? "-" : s >= 1 ? `${s.toPrecision(3)} s` : s >= 1e-3 ? `${(s * 1e3).toPrecision(3)} ms` : `${(s * 1e6).toPrecision(3)} µs`;
RL.bytes = (b) => b == null ? "-" : b >= 1e12 ? `${(b / 1e12).toPrecision(3)} TB` : b >= 1e9 ? `${(b / 1e9).toPrecision(3)} GB` : b >= 1e6 ? `${(b / 1e6).toPrecision(3)} MB` : b >= 1e3 ? `${(b / 1e3).toPrecision(3)} kB` : `${b.toFixed(0)} B`;
RL.si = function (x, unit) {
  if (x == null) return "-";
  const p = [[1e18, "E"], [1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]].find(([f]) => Math.abs(x) >= f);
  return p ? `${(x / p[0]).toPrecision(3)} ${p[1]}${unit}` : `${Number(x).toPrecision(3)} ${unit}`;
};
RL.num = (x, digits = 4) => x == null ? "-" : Number(x).toPrecision(digits);
RL.usd = (x) => x == null ? "-" : `$${x >= 100 ? x.toFixed(0) : x.toPrecision(3)}`;

// A shown value keeps its raw number (data-value) beside its text, so a test can read both.
RL.setValue = function (id, value, text) {
  const el = document.getElementById(id);
  el.textContent = text;
  el.dataset.value = value == null ? "" : String(value);
};

RL.table = function (table, headers, rows) {
  const thead = document.createElement("thead"), tbody = document.createElement("tbody");
  const tr = document.createElement("tr");
  for (const h of headers) { const th = document.createElement("th"); th.textContent = h; tr.append(th); }
  thead.append(tr);
  for (const r of rows) {
    const row = document.createElement("tr");
    for (const c of r) {
      const td = document.createElement("td");
      if (c instanceof Node) td.append(c); else td.textContent = c == null ? "-" : String(c);
      row.append(td);
    }
    tbody.append(row);
  }
  table.replaceChildren(thead, tbody);
};

// plotly.js (4.8 MB to parse) is fetched early (a preload) but run only when the first chart is
// drawn, after the page's numbers are shown.
RL.plotly = null;
RL.loadPlotly = function () {
  if (!RL.plotly) RL.plotly = new Promise((resolve, reject) => {
    if (window.Plotly) { resolve(window.Plotly); return; }
    const tag = document.createElement("script");
    tag.src = "/assets/plotly.min.js";
    tag.onload = () => resolve(window.Plotly);
    tag.onerror = () => reject(new Error("roofline: error: /assets/plotly.min.js: could not load the charts"));
    document.head.append(tag);
  });
  return RL.plotly;
};
RL.draw = (id, traces, layout) => RL.loadPlotly().then((P) => P.react(id, traces, layout, RL.plotConfig));

RL.plotConfig = {displaylogo: false, responsive: true, displayModeBar: false};
RL.layout = (extra) => Object.assign({margin: {l: 60, r: 20, t: 36, b: 48}, font: {size: 12}, paper_bgcolor: "#fff", plot_bgcolor: "#fafafa"}, extra);

window.RL = RL;
