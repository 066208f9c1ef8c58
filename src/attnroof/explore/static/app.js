// attnroof explore: the page draws the JSON of attnroof's own commands (model, devices, sweep,
// crossover, serve-sim), run by the server with --json for the inputs on the page. No number is
// computed here: every number shown is a field of that JSON (formatted by plotly's d3 formats),
// and the only arithmetic is where a mark sits on the roofline chart (an operator at its FLOPs
// over its time bound; the roof's left end at the chart's edge).
"use strict";

const DEFAULTS = {
  model: "llama-3.1-8b", device: "H100 SXM", dtype: "bf16", "weight-dtype": "", "kv-dtype": "",
  phase: "decode", batch: "1", context: "8192", unfused: false,
  tp: "1", pp: "1", ep: "1", dp: "1", cp: "1", etp: "", microbatches: "1", schedule: "1f1b",
  "virtual-stages": "", sp: false, overlap: false,
  zero: "0", recompute: "none", "weight-gather": "", "grad-reduce": "",
  search: false, devices: "8",
  serve: false, rate: "10", "input-len": "1024", "output-len": "128", "num-requests": "200",
};
const KEYS = Object.keys(DEFAULTS);
const PLAN = ["tp", "pp", "ep", "dp"];
const SWEEP_SEQ = "256..262144"; // sequence lengths of the attention chart (doubling)
const XMIN = 0.01, XMAX = 1e5;   // the roofline chart's intensity range (FLOP/byte)
const LIMITER_COLOR = { memory: "#1f5fbf", compute: "#c0392b", link: "#2e8b57" };
const MEMORY_PARTS = [
  ["weights_bytes", "weights"], ["gradient_bytes", "gradients"], ["optimizer_bytes", "optimizer state"],
  ["kv_cache_bytes", "KV cache"], ["activation_bytes", "activations"],
];
// No button that sends a chart anywhere: plotly 3 shows "Share chart…" (an upload to Plotly Cloud) unless told
const CONFIG = {
  displaylogo: false, responsive: true, showSendToCloud: false, showEditInChartStudio: false,
  modeBarButtonsToRemove: ["lasso2d", "select2d", "sendChartToCloud", "sendDataToCloud"],
};

const explorer = { redraws: 0, serves: 0, lastRedrawMs: null, last: {}, requests: 0 };
window.explorer = explorer;
const cache = new Map();
let generation = 0;
// this run's token, from the address attnroof explore printed (?token=...): the server answers
// no API request without it, so a page elsewhere cannot use the explorer
const TOKEN = new URLSearchParams(location.search).get("token") || "";

const $ = (id) => document.getElementById(id);

// ------------------------------------------------------------------ state <-> URL and controls

function stateFromHash() {
  const q = new URLSearchParams(location.hash.slice(1));
  const s = {};
  for (const k of KEYS) {
    const d = DEFAULTS[k];
    s[k] = q.has(k) ? (typeof d === "boolean" ? q.get(k) === "1" : q.get(k)) : d;
  }
  return s;
}

function stateFromControls() {
  const s = {};
  for (const k of KEYS) {
    const el = $(k);
    s[k] = el.type === "checkbox" ? el.checked : el.value;
  }
  return s;
}

function showState(s) {
  for (const k of KEYS) {
    const el = $(k);
    if (el.type === "checkbox") el.checked = s[k];
    else {
      if (el.tagName === "SELECT" && ![...el.options].some((o) => o.value === s[k])) addOption(el, s[k]);
      el.value = s[k];
    }
  }
}

function writeHash(s) {
  const q = new URLSearchParams();
  for (const k of KEYS) {
    if (s[k] === DEFAULTS[k]) continue;
    q.set(k, typeof s[k] === "boolean" ? (s[k] ? "1" : "0") : s[k]);
  }
  const hash = q.toString();
  history.replaceState(null, "", hash ? "#" + hash : location.pathname + location.search);
}

function addOption(select, value, label) {
  const o = document.createElement("option");
  o.value = value;
  o.textContent = label || value;
  select.appendChild(o);
}

const texts = () => ({
  config: $("config").value.trim() ? $("config").value : null,
  device_file: $("device_file").value.trim() ? $("device_file").value : null,
});

// ------------------------------------------------------------------ the server's commands

async function api(command, params, body) {
  const payload = JSON.stringify({ params, config: body.config, device_file: body.device_file });
  const key = command + payload;
  if (cache.has(key)) return cache.get(key);
  explorer.requests++;
  let r, data;
  try {
    r = await fetch("/api/" + command, {
      method: "POST", headers: { "Content-Type": "application/json", "X-Attnroof-Token": TOKEN }, body: payload,
    });
    data = await r.json();
  } catch (e) {  // the server stopped, or answered something else than JSON: said, not cached
    return { ok: false, error: `attnroof explore: the server did not answer (${e.message}); is it still running?` };
  }
  const out = r.ok ? { ok: true, data } : { ok: false, error: data.error || r.statusText };
  if (cache.size > 500) cache.clear();
  cache.set(key, out);
  return out;
}

function modelParams(s, t) {
  const p = { phase: s.phase, batch: s.batch, context: s.context, dtype: s.dtype };
  if (!t.config) p.model = s.model;
  if (!t.device_file) p.device = s.device;
  if (s["weight-dtype"]) p["weight-dtype"] = s["weight-dtype"];
  if (s["kv-dtype"]) p["kv-dtype"] = s["kv-dtype"];
  if (s.unfused) p.unfused = true;
  for (const k of [...PLAN, "cp", "microbatches"]) if (s[k] !== "1") p[k] = s[k];
  if (s.schedule !== "1f1b") p.schedule = s.schedule;
  for (const k of ["virtual-stages", "etp"]) if (s[k]) p[k] = s[k];
  if (s.sp) p.sp = true;
  if (s.overlap) p.overlap = true;
  if (s.phase === "train") {  // the training step's own flags: refused for prefill and decode
    if (s.zero !== "0") p.zero = s.zero;
    if (s.recompute !== "none") p.recompute = s.recompute;
    for (const k of ["weight-gather", "grad-reduce"]) if (s[k]) p[k] = s[k];
  }
  return p;
}

// A front plan's JSON as the page's controls: every field the plan has, so that "show" draws that
// plan and no other (its degrees, micro-batches, schedule, sharding policy and recomputation).
function planControls(row) {
  const q = row.parallel, sh = q.sharding || {};
  const c = { cp: q.cp, microbatches: q.microbatches, schedule: q.schedule,
    "virtual-stages": q.virtual_stages > 1 ? q.virtual_stages : "", sp: q.sequence_parallel, overlap: q.overlap,
    etp: q.ep > 1 ? q.etp : "", zero: q.zero ?? 0, recompute: row.recompute || "none",
    "weight-gather": sh.weight_gather && sh.weight_gather !== "pass" ? sh.weight_gather : "",
    "grad-reduce": sh.grad_reduce && sh.grad_reduce !== "microbatch" && (q.zero ?? 0) >= 2 ? sh.grad_reduce : "" };
  for (const k of PLAN) c[k] = q[k];
  return c;
}

function serveParams(s, t) {
  const p = { dtype: s.dtype, rate: s.rate, "input-len": s["input-len"], "output-len": s["output-len"],
    "num-requests": s["num-requests"] };
  if (!t.config) p.model = s.model;
  if (!t.device_file) p.device = s.device;
  if (s["weight-dtype"]) p["weight-dtype"] = s["weight-dtype"];
  if (s["kv-dtype"]) p["kv-dtype"] = s["kv-dtype"];
  for (const k of ["tp", "pp", "ep"]) if (s[k] !== "1") p[k] = s[k];
  return p;
}

function planParams(s, t) {
  const p = { devices: s.devices, phase: s.phase, context: s.context, batch: s.batch, dtype: s.dtype };
  if (!t.config) p.model = s.model;
  if (!t.device_file) p.device = s.device;
  if (s.unfused) p.unfused = true;
  return p;
}

// A word as a POSIX shell reads it back: as it is when it holds nothing a shell treats specially,
// else in single quotes (a quote inside closed, escaped and reopened), so that the line pastes.
function shellWord(word) {
  return /^[A-Za-z0-9_@%+=:,.\/-]+$/.test(word) ? word : "'" + word.replaceAll("'", "'\\''") + "'";
}

function commandLine(command, params, t) {
  const words = ["attnroof", command];
  for (const [k, v] of Object.entries(params)) words.push(v === true ? `--${k}` : `--${k}=${v}`);
  if (t.config) words.push("--model=config.json");
  if (t.device_file) words.push("--device=device.toml");
  return [...words, "--json"].map(shellWord).join(" ");
}

// ------------------------------------------------------------------ drawing

function showError(line) {
  $("error").textContent = line;
  $("error").hidden = false;
  $("view").classList.add("stale");
}

function clearError() {
  $("error").hidden = true;
  $("error").textContent = "";
  $("view").classList.remove("stale");
}

const PREFIX = { "-15": "f", "-12": "p", "-9": "n", "-6": "µ", "-3": "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E" };

function eng(value, unit) {
  // Display only: 4 significant digits with an SI prefix, the digits moved by the exponent's text.
  if (value === null || value === undefined) return "—";
  if (typeof value !== "number") return String(value);
  if (unit === "%") return `${Number((100 * value).toPrecision(3))}%`;  // a share, as the CLI prints it
  if (Number.isInteger(value) && Math.abs(value) < 1e6) return value.toLocaleString("en") + (unit ? " " + unit : "");
  if (!unit) return value.toPrecision(4);
  const [mantissa, exponent] = value.toExponential(3).split("e");
  const e = Number(exponent), shift = ((e % 3) + 3) % 3;
  const prefix = PREFIX[e - shift];
  if (prefix === undefined) return `${value.toPrecision(4)} ${unit}`;
  return `${Number(mantissa + "e" + shift).toPrecision(4)} ${prefix}${unit}`;
}

function summary(m) {
  const t = m.totals, mem = m.memory.per_device || m.memory;
  const at = m.memory.per_device ? "memory.per_device" : "memory";
  const rows = [
    ["step time bound", "totals.time_s", t.time_s, "s"],
    ["estimate (with communication)", "totals.estimate_time_s", t.estimate_time_s, "s"],
    ["tokens per second", "totals.tokens_per_s", t.tokens_per_s, "tok/s"],
    ["FLOPs", "totals.flops", t.flops ?? t.hardware_flops, "FLOP"],
    ["bytes", "totals.bytes", t.bytes, "B"],
    ["intensity", "totals.intensity", t.intensity, "FLOP/B"],
    ["ridge", "ridge", m.ridge, "FLOP/B"],
    ["limiter", "totals.limiter", t.limiter, ""],
    ["attention's share of the time", "totals.attention_share", t.attention_share, "%"],
    ["MFU bound", "totals.mfu", t.mfu, "%"],
    ["memory a device holds", `${at}.total_bytes`, mem.total_bytes, "B"],
    ["capacity", `${at}.capacity_bytes`, mem.capacity_bytes, "B"],
    ["fits", `${at}.fits`, mem.fits, ""],
    ["largest batch that fits", `${at}.max_batch`, mem.max_batch, ""],
  ].filter((r) => r[2] !== undefined && r[2] !== null);
  const body = $("summary").tBodies[0];
  body.replaceChildren(...rows.map(([label, field, value, unit]) => {
    const tr = document.createElement("tr");
    tr.dataset.field = field;
    tr.title = `the JSON field ${field}`;
    tr.dataset.value = JSON.stringify(value);
    tr.innerHTML = "<td></td><td></td>";
    tr.cells[0].textContent = label;
    tr.cells[1].textContent = eng(value, unit);
    return tr;
  }));
}

function logAxis(title, extra) {
  return Object.assign({ type: "log", title: { text: title }, exponentformat: "SI", gridcolor: "#eee" }, extra || {});
}

function layout(extra) {
  return Object.assign({ margin: { l: 64, r: 16, t: 28, b: 48 }, hovermode: "closest", font: { size: 12 },
    legend: { orientation: "h", y: 1.12 } }, extra);
}

function drawRoofline(m, dev) {
  const P = dev.peak_flops_per_s[m.dtype], B = dev.bandwidth_bytes_per_s;
  const roof = {
    name: `${dev.name} ${m.dtype} roof`, x: [XMIN, m.ridge, XMAX], y: [XMIN * B, P, P],
    mode: "lines", line: { color: "#333", width: 2 }, hoverinfo: "skip",
  };
  const ops = m.ops;
  const label = (o) => (o.pass ? `${o.pass}: ` : "") + o.name;
  const points = {
    name: "operators", mode: "markers", type: "scatter",
    x: ops.map((o) => (o.intensity > 0 ? o.intensity : XMIN)),
    y: ops.map((o) => (o.flops > 0 ? o.flops / o.time_s : XMIN * B)),
    text: ops.map(label),
    customdata: ops.map((o) => [o.flops, o.bytes, o.intensity, o.time_s, o.limiter, o.count, o.total_time_s]),
    marker: { size: 10, color: ops.map((o) => LIMITER_COLOR[o.limiter] || "#777"),
      symbol: ops.map((o) => (o.flops > 0 ? "circle" : "triangle-left")), line: { width: 1, color: "#fff" } },
    hovertemplate: "<b>%{text}</b><br>FLOPs %{customdata[0]:.4s}<br>bytes %{customdata[1]:.4s}B"
      + "<br>intensity %{customdata[2]:.4g} FLOP/B<br>time %{customdata[3]:.4s}s × %{customdata[5]}"
      + " = %{customdata[6]:.4s}s<br>limiter: %{customdata[4]}<extra></extra>",
  };
  const ridge = { name: "ridge", x: [m.ridge], y: [P], mode: "markers", marker: { symbol: "diamond", size: 9, color: "#333" },
    hovertemplate: `ridge %{x:.4g} FLOP/B<br>peak %{y:.4s}FLOP/s<extra></extra>` };
  return Plotly.react("roofline", [roof, ridge, points], layout({
    xaxis: logAxis("arithmetic intensity (FLOP/byte)"), yaxis: logAxis("attainable (FLOP/s)"),
  }), CONFIG);
}

function drawSplit(m) {
  return Plotly.react("split", [{
    type: "pie", hole: 0.45, sort: true, labels: m.ops.map((o) => o.operator), values: m.ops.map((o) => o.total_time_s),
    textinfo: "label+percent", textposition: "inside", insidetextorientation: "horizontal",
    hovertemplate: "%{label}<br>%{value:.4s}s (%{percent})<extra></extra>",
  }], layout({ showlegend: false, margin: { l: 16, r: 16, t: 16, b: 16 } }), CONFIG);
}

function drawMemory(m) {
  const mem = m.memory.per_device || m.memory;
  const traces = MEMORY_PARTS.filter(([k]) => typeof mem[k] === "number").map(([k, label]) => ({
    type: "bar", orientation: "h", name: label, x: [mem[k]], y: ["a device"],
    hovertemplate: `${label} %{x:.4s}B<extra></extra>`,
  }));
  return Plotly.react("memory", traces, layout({
    barmode: "stack", xaxis: { title: { text: "bytes" }, exponentformat: "SI", rangemode: "tozero" },
    legend: { orientation: "h", y: -0.3 },
    yaxis: { showticklabels: false },
    shapes: [{ type: "line", x0: mem.capacity_bytes, x1: mem.capacity_bytes, y0: 0, y1: 1, yref: "paper",
      line: { color: "#b3261e", width: 2, dash: "dash" } }],
    annotations: [{ x: mem.capacity_bytes, y: 0.97, yref: "paper", text: `capacity ${eng(mem.capacity_bytes, "B")} `,
      showarrow: false, xanchor: "right", yanchor: "top", font: { color: "#b3261e" } }],
  }), CONFIG);
}

function drawAttention(sw, cr) {
  const s = sw.rows.map((r) => r.s);
  const line = (form, color) => ({
    name: form, x: s, y: sw.rows.map((r) => r[form].intensity), mode: "lines+markers", line: { color },
    customdata: sw.rows.map((r) => [r[form].verdict, r[form].time_s]),
    hovertemplate: `${form}: s = %{x}<br>intensity %{y:.4g} FLOP/B<br>time %{customdata[1]:.4s}s<br>%{customdata[0]}<extra></extra>`,
  });
  const shapes = [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: sw.ridge, y1: sw.ridge, line: { color: "#333", dash: "dash" } }];
  const notes = [{ xref: "paper", x: 0, y: Math.log10(sw.ridge), text: `ridge ${sw.ridge.toPrecision(4)}`, showarrow: false, yanchor: "bottom", xanchor: "left" }];
  for (const form of ["unfused", "fused"]) {
    const c = cr[form];
    if (c.never) notes.push({ xref: "paper", x: 1, y: Math.log10(c.limit_intensity), xanchor: "right", yanchor: "top", showarrow: false,
      text: `${form} never crosses (tends to ${c.limit_intensity.toPrecision(4)})` });
    else if (c.s_min) {
      shapes.push({ type: "line", yref: "paper", x0: c.s_min, x1: c.s_min, y0: 0, y1: 1, line: { color: "#c0392b", dash: "dot" } });
      notes.push({ x: Math.log10(c.s_min), y: 0.98, yref: "paper", text: ` ${form} crosses at s = ${c.s_min}`, showarrow: false,
        xanchor: "left", yanchor: "top", font: { color: "#c0392b" } });
    }
  }
  return Plotly.react("attention", [line("unfused", "#1f5fbf"), line("fused", "#c0392b")], layout({
    xaxis: logAxis("sequence length s", { dtick: Math.log10(4) }), yaxis: logAxis("intensity (FLOP/byte)"),
    shapes, annotations: notes, legend: { x: 0.98, xanchor: "right", y: 0.3, bgcolor: "rgba(255,255,255,0.8)" },
  }), CONFIG);
}

function drawServing(sv) {
  const L = sv.summary.latency_s;
  const rows = [["requests a second", "summary.request_throughput_per_s", sv.summary.request_throughput_per_s, "/s"],
    ["output tokens a second", "summary.output_tokens_per_s", sv.summary.output_tokens_per_s, "tok/s"]];
  for (const k of ["ttft", "tpot", "e2e"]) for (const p of ["p50", "p90", "p99"]) {
    rows.push([`${k.toUpperCase()} ${p}`, `summary.latency_s.${k}.${p}`, L[k][p], "s"]);
  }
  rows.push(["preemptions", "summary.preemptions", sv.summary.preemptions, ""]);
  $("serving").querySelector("tbody").replaceChildren(...rows.map(([label, field, value, unit]) => {
    const tr = document.createElement("tr");
    tr.dataset.field = field;
    tr.title = `the JSON field ${field}`;
    tr.dataset.value = JSON.stringify(value);
    tr.innerHTML = "<td></td><td></td>";
    tr.cells[0].textContent = label;
    tr.cells[1].textContent = eng(value, unit);
    return tr;
  }));
  $("serving").hidden = false;
}

function planCell(tr, value, field) {
  const td = tr.insertCell();
  td.textContent = typeof value === "number" && field ? eng(value, field) : String(value);
  return td;
}

function drawPlans(pl) {
  const point = (p) => [p.parallel.devices, p.parallel.tp, p.parallel.pp, p.parallel.ep, p.parallel.dp, p.parallel.cp,
    p.parallel.zero, p.recompute];
  const hover = "%{customdata[0]} devices: TP %{customdata[1]}, PP %{customdata[2]}, EP %{customdata[3]}, DP %{customdata[4]},"
    + " CP %{customdata[5]}, ZeRO %{customdata[6]}, recompute %{customdata[7]}<br>step ≥ %{y:.4s}s<br>%{x:.4s}B a device<extra></extra>";
  const trace = (plans, name, color, size) => ({
    name, type: "scatter", mode: "markers", x: plans.map((p) => p.memory_per_device_bytes), y: plans.map((p) => p.time_s),
    customdata: plans.map(point), hovertemplate: hover, marker: { color, size },
  });
  const refused = pl.considered - pl.tried;
  $("plans-note").textContent = `${pl.considered.toLocaleString("en-US")} plans considered on up to ${pl.devices} `
    + `${pl.device}` + (refused ? ` (${refused.toLocaleString("en-US")} refused by the rules before they were tried)` : "")
    + `, ${pl.tried.toLocaleString("en-US")} tried, ${pl.fit.toLocaleString("en-US")} fit; `
    + `the Pareto front holds ${pl.front.length}.`;
  const body = $("plans").querySelector("tbody");
  body.replaceChildren(...pl.front.map((p) => {
    const tr = document.createElement("tr");
    tr.dataset.value = JSON.stringify(p);
    for (const k of ["devices", "tp", "pp", "ep", "dp", "cp"]) planCell(tr, p.parallel[k]);
    planCell(tr, p.time_s, "s");
    planCell(tr, p.memory_per_device_bytes, "B");
    planCell(tr, p.limiter || "—");
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = "show";
    const q = p.parallel;  // a screen reader names the plan, not just "show"
    button.setAttribute("aria-label", `show the plan TP ${q.tp} × PP ${q.pp} × EP ${q.ep} × DP ${q.dp} × CP ${q.cp}`
      + ` on ${q.devices} devices`);
    button.addEventListener("click", () => {
      for (const [k, v] of Object.entries(planControls(p))) {
        const el = $(k);
        if (el.type === "checkbox") el.checked = Boolean(v);
        else el.value = String(v);
      }
      redraw();
    });
    tr.insertCell().appendChild(button);
    return tr;
  }));
  $("plans").hidden = false;
  return Plotly.react("front", [trace(pl.plans, "every plan", "#b8bec7", 6), trace(pl.front, "Pareto front", "#c0392b", 10)],
    layout({ xaxis: { title: { text: "memory a device holds (bytes)" }, exponentformat: "SI", gridcolor: "#eee" },
      yaxis: logAxis("step time bound (s)") }), CONFIG);
}

async function search(s, t, mine) {
  $("plans-command").textContent = commandLine("plan", planParams(s, t), t);
  const pl = await api("plan", planParams(s, t), t);
  if (mine !== generation) return;
  if (!pl.ok) showError(pl.error);
  else {
    await drawPlans(pl.data);
    explorer.last.plan = pl.data;
  }
  explorer.searches = (explorer.searches || 0) + 1;
  document.body.dataset.searches = String(explorer.searches);
}

function dtypeChoices(dev) {
  const select = $("dtype"), keep = select.value;
  select.replaceChildren();
  for (const name of Object.keys(dev.peak_flops_per_s)) addOption(select, name);
  if (![...select.options].some((o) => o.value === keep)) addOption(select, keep);
  select.value = keep;
}

// ------------------------------------------------------------------ one redraw

async function redraw() {
  const start = performance.now();
  const mine = ++generation;
  const s = stateFromControls(), t = texts();
  writeHash(s);
  $("model").disabled = Boolean(t.config);  // a pasted config.json stands in for the built-in
  $("device").disabled = Boolean(t.device_file);
  const mp = modelParams(s, t);
  $("command").textContent = commandLine("model", mp, t);
  $("attention-caption").textContent = "";
  const devP = t.device_file ? {} : { name: s.device };
  const [m, dev] = await Promise.all([api("model", mp, t), api("devices", devP, { device_file: t.device_file })]);
  if (mine !== generation) return;
  if (!dev.ok || !m.ok) {
    showError((dev.ok ? m : dev).error);
    finish(start, null);
    return;
  }
  const d = dev.data.devices[0];
  dtypeChoices(d);
  const ap = { "head-dim": String(m.data.config.head_dim), dtype: s.dtype };
  if (!t.device_file) ap.device = s.device;
  const at = { device_file: t.device_file };
  const [sw, cr] = await Promise.all([api("sweep", { ...ap, seq: SWEEP_SEQ }, at), api("crossover", ap, at)]);
  if (mine !== generation) return;
  clearError();
  summary(m.data);
  const drawn = [drawRoofline(m.data, d), drawSplit(m.data), drawMemory(m.data)];
  if (sw.ok && cr.ok) {
    drawn.push(drawAttention(sw.data, cr.data));
    $("attention-caption").textContent = `d = ${sw.data.d}, ${sw.data.device}, ${sw.data.dtype}: `;
  }
  else showError((sw.ok ? cr : sw).error);
  await Promise.all(drawn);
  explorer.last = { model: m.data, device: dev.data, sweep: sw.data, crossover: cr.data };
  finish(start, mine);
  if (s.serve) serve(s, t, mine);
  else $("serving").hidden = true;
  if (s.search) search(s, t, mine);
  else $("plans").hidden = true;
}

function finish(start, mine) {
  explorer.lastRedrawMs = performance.now() - start;
  explorer.redraws++;
  document.body.dataset.redraws = String(explorer.redraws);
  document.body.dataset.ok = mine === null ? "0" : "1";
}

async function serve(s, t, mine) {
  $("serving-command").textContent = commandLine("serve-sim", serveParams(s, t), t);
  const sv = await api("serve-sim", serveParams(s, t), t);
  if (mine !== generation) return;
  if (!sv.ok) showError(sv.error);
  else {
    drawServing(sv.data);
    explorer.last.serve = sv.data;
  }
  explorer.serves++;
  document.body.dataset.serves = String(explorer.serves);
}

// ------------------------------------------------------------------ start

function dropInto(area) {
  area.addEventListener("dragover", (e) => { e.preventDefault(); area.classList.add("dropping"); });
  area.addEventListener("dragleave", () => area.classList.remove("dropping"));
  area.addEventListener("drop", async (e) => {
    e.preventDefault();
    area.classList.remove("dropping");
    const file = e.dataTransfer.files[0];
    if (file) { area.value = await file.text(); redraw(); }
  });
}

async function start() {
  const body = { config: null, device_file: null };
  const [models, devices] = await Promise.all([api("model", { list: true }, body), api("devices", {}, body)]);
  for (const m of models.data.models) addOption($("model"), m.name);
  for (const d of devices.data.devices) addOption($("device"), d.name);
  showState(stateFromHash());
  let typing = null;
  $("controls").addEventListener("change", () => redraw());
  $("controls").addEventListener("input", (e) => {
    if (e.target.tagName !== "TEXTAREA") return;
    clearTimeout(typing);
    typing = setTimeout(redraw, 400);
  });
  $("config-clear").addEventListener("click", () => { $("config").value = ""; redraw(); });
  $("device-clear").addEventListener("click", () => { $("device_file").value = ""; redraw(); });
  dropInto($("config"));
  dropInto($("device_file"));
  window.addEventListener("hashchange", () => { showState(stateFromHash()); redraw(); });
  await redraw();
}

start();
