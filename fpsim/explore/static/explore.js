// fpsim explore: the page. It computes nothing about numbers itself: every value, error,
// probability and count it shows is text from the server's JSON API (fpsim calls). JavaScript
// only lays the answers out and turns the stored floats into positions on a drawing.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
// body.dataset.pending counts the requests in flight or waiting (the browser tests wait for 0).
let pending = 0;

const state = {
  format: "fp16",  // the name the server knows the format by
  info: null,      // /api/format
  desc: null,      // /api/code (or the result of /api/round): the code shown in the bits panel
  round: null,     // the last /api/round answer, while the bits are those of its result
  values: null,    // /api/values for formats of at most 8 bits
  zoom: "all",
  seq: {},         // the latest request of each kind: older answers are dropped
};

// ---- helpers --------------------------------------------------------------------------------------
function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function svgEl(tag, attrs = {}, text) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

// A stored float as Python writes it ("0.1", "-0.0", "inf", "nan") -> a JS number, for drawing.
function num(s) {
  if (s === "inf") return Infinity;
  if (s === "-inf") return -Infinity;
  if (s === "nan") return NaN;
  return parseFloat(s);
}

class ApiError extends Error {}

// One request per kind at a time: an answer that is not the latest of its kind is dropped.
async function api(kind, endpoint, params) {
  const n = (state.seq[kind] = (state.seq[kind] || 0) + 1);
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) q.set(k, String(v));
  document.body.dataset.pending = String(++pending);
  try {
    const r = await fetch(`/api/${endpoint}?${q}`);
    const body = await r.json();
    if (n !== state.seq[kind]) return null;
    if (!r.ok) throw new ApiError(body.error || `HTTP ${r.status}`);
    return body;
  } finally {
    document.body.dataset.pending = String(--pending);
  }
}

function panelError(panel, message) {
  const p = $(`err-${panel}`);
  p.textContent = message || "";
  p.hidden = !message;
}

function roundingParams() {
  return {
    format: state.format,
    rounding: $("rounding-select").value,
    subnormals: $("opt-subnormals").checked,
    saturate: $("opt-saturate").checked,
    seed: $("opt-seed").value || "0",
  };
}

// A call that waits for a pause in typing; a waiting call counts as pending too.
function debounce(fn, ms) {
  let t = null;
  return (...args) => {
    if (t === null) document.body.dataset.pending = String(++pending);
    clearTimeout(t);
    t = setTimeout(() => {
      t = null;
      document.body.dataset.pending = String(--pending);
      fn(...args);
    }, ms);
  };
}

function bitsWithSpaces(desc) {
  return desc.fields.map((f) => f.bits).join(" ");
}

// ---- formats --------------------------------------------------------------------------------------
async function loadFormats() {
  const r = await api("formats", "formats", {});
  const sel = $("format-select");
  const group = el("optgroup", { label: "registered formats" });
  for (const f of r.formats) {
    group.append(el("option", { value: f.name, text: `${f.name}  (${f.bits} bits)` }));
  }
  sel.append(group);
  sel.append(el("optgroup", { label: "chosen by name or custom", id: "custom-group" }));
  for (const m of r.rounding_modes) {
    $("rounding-select").append(el("option", { value: m.mode, text: m.label }));
  }
  $("format-name").placeholder = r.examples.slice(0, 3).join(", ");
  $("version").textContent = r.version;
  sel.value = state.format;
}

async function useFormat(name) {
  let info;
  try {
    info = await api("format", "format", { format: name });
  } catch (e) {
    panelError("controls", e.message);
    return;
  }
  if (!info) return;
  panelError("controls", "");
  state.format = info.name;
  state.info = info;
  const sel = $("format-select");
  if (![...sel.options].some((o) => o.value === info.name)) {
    $("custom-group").append(el("option", { value: info.name, text: `${info.name}  (${info.bits} bits)` }));
  }
  sel.value = info.name;
  renderFacts(info);
  state.values = null;
  $("full").hidden = !info.small;
  if (info.small) {
    const v = await api("values", "values", { format: info.name });
    if (v) state.values = v;
  }
  await Promise.all([doRound(), doArith(), doLoss()]);
}

function renderFacts(info) {
  const parts = [
    `${info.name} = ${info.call}`,
    `${info.bits} bits`,
    `bias ${info.bias}`,
    `max ${info.max.short}`,
    `min normal ${info.min_normal.pow2 || info.min_normal.decimal}`,
  ];
  if (info.smallest_subnormal) parts.push(`smallest subnormal ${info.smallest_subnormal.pow2 || info.smallest_subnormal.decimal}`);
  parts.push(`eps ${info.eps.pow2 || info.eps.decimal}`);
  parts.push(info.specials);
  if (info.dtype) parts.push(`numpy/ml_dtypes: ${info.dtype}`);
  $("format-facts").textContent = parts.join(" · ");
}

function customFormatText() {
  const e = $("custom-e").value.trim();
  const m = $("custom-m").value.trim();
  const bias = $("custom-bias").value.trim();
  let t = `Format(${e}, ${m}`;
  if (bias !== "") t += `, bias=${bias}`;
  t += `, style='${$("custom-style").value}'`;
  if (!$("custom-signed").checked) t += ", signed=False";
  if (!$("custom-subnormals").checked) t += ", has_subnormals=False";
  return t + ")";
}

// ---- the bits panel ---------------------------------------------------------------------------------
function renderBits(desc) {
  const box = $("bit-fields");
  box.replaceChildren();
  const narrow = desc.bits.length > 20;
  let pos = 0;
  for (const f of desc.fields) {
    const div = el("div", { class: `field ${f.name}` });
    let title = `${f.name}`;
    const n = f.bits.length;
    if (f.name !== "sign") title += ` (${n} bit${n === 1 ? "" : "s"})`;
    div.append(el("span", { class: "field-name", text: title }));
    const bits = el("div", { class: "field-bits" });
    for (const c of f.bits) {
      const b = el("button", {
        type: "button",
        class: `bit${c === "1" ? " one" : ""}${narrow ? " narrow" : ""}`,
        "data-pos": String(pos),
        "data-field": f.name,
        "aria-label": `${f.name} bit, ${c}: click to flip`,
        text: c,
      });
      b.addEventListener("click", () => flipBit(Number(b.dataset.pos)));
      bits.append(b);
      pos += 1;
    }
    div.append(bits);
    let caption = "";
    if (f.name === "sign") caption = f.bits === "1" ? "negative" : "positive";
    if (f.name === "exponent") caption = `field ${f.biased}, bias ${state.info ? state.info.bias : ""}`;
    if (f.name === "mantissa") caption = `fraction .${f.bits}₂`;
    div.append(el("span", { class: "field-value", text: caption }));
    box.append(div);
  }
}

function setNeighbour(id, n) {
  const b = $(id);
  if (n.none) {
    b.textContent = `none (${n.none})`;
    b.disabled = true;
    delete b.dataset.code;
  } else {
    b.textContent = n.decimal;
    b.disabled = false;
    b.dataset.code = n.code;
  }
}

function showDesc(desc, error) {
  state.desc = desc;
  renderBits(desc);
  $("value-decimal").textContent = desc.decimal;
  $("value-int").textContent = desc.integer_form ? desc.integer_form.text : "—";
  $("value-form").textContent = desc.form;
  const cls = $("value-class");
  cls.replaceChildren(el("span", { class: "cls", text: desc.cls }));
  $("value-hex").textContent = `${desc.hex} = ${desc.code}`;
  $("value-ulp").textContent = desc.ulp ? `${desc.ulp.pow2} = ${desc.ulp.decimal}` : "—";
  setNeighbour("next-down", desc.next_down);
  setNeighbour("next-up", desc.next_up);
  if (error === undefined) {
    $("typed-error").textContent = "— (bits set by hand: no typed number)";
  } else if (error === null) {
    $("typed-error").textContent = "— (not a finite number)";
  } else {
    $("typed-error").textContent = `${error.exact} (≈ ${error.approx}, ${error.ulps} ulp)`;
  }
  $("value-explain").textContent = desc.explain;
  drawNear();
  drawFull();
  markTable();
}

async function loadCode(params) {
  try {
    const d = await api("code", "code", { format: state.format, ...params });
    if (!d) return;
    panelError("bits", "");
    state.round = null;
    markModes(null);
    showDesc(d);
  } catch (e) {
    panelError("bits", e.message);
  }
}

function flipBit(pos) {
  const bits = state.desc.bits;
  const flipped = bits.slice(0, pos) + (bits[pos] === "1" ? "0" : "1") + bits.slice(pos + 1);
  loadCode({ bits: flipped });
}

// ---- the typed number ---------------------------------------------------------------------------------
async function doRound() {
  const x = $("number-input").value.trim() || "1";
  let r;
  try {
    r = await api("round", "round", { ...roundingParams(), x });
  } catch (e) {
    panelError("input", e.message);
    return;
  }
  if (!r) return;
  panelError("input", "");
  state.round = r;
  const inp = r.input;
  let text = `exactly ${inp.exact}`;
  if (inp.approx && inp.approx !== inp.exact) text += ` (≈ ${inp.approx})`;
  if (inp.float64_is_exact) text += " · a float64 itself";
  else text += ` · not a float64 (the nearest float64 is ${inp.float64_decimal}): fpsim rounds the exact value`;
  $("input-exact").textContent = text;
  renderModes(r);
  renderStochastic(r);
  const notes = $("round-notes");
  notes.replaceChildren(...r.notes.map((n) => el("li", { text: n })));
  if (r.result.no_code) {
    panelError("bits", r.result.no_code);
  } else {
    panelError("bits", "");
    showDesc(r.result, r.result.error);
  }
}

function renderModes(r) {
  const body = $("modes").querySelector("tbody");
  body.replaceChildren();
  for (const m of r.modes) {
    const tr = el("tr", { "data-mode": m.mode });
    tr.append(el("td", { text: m.label }));
    if (m.no_code) {
      tr.append(el("td", { colspan: "4", text: m.no_code }));
    } else {
      tr.append(el("td", { class: "bits", text: bitsWithSpaces(m) }));
      tr.append(el("td", { class: "val", text: m.decimal }));
      tr.append(el("td", { class: "err", text: m.error ? m.error.approx : "—" }));
      tr.append(el("td", { class: "ulps", text: m.error ? m.error.ulps : "—" }));
    }
    body.append(tr);
  }
  markModes(r.rounding);
}

function markModes(mode) {
  for (const tr of $("modes").querySelectorAll("tbody tr")) {
    tr.classList.toggle("chosen", tr.dataset.mode === mode);
  }
}

function renderStochastic(r) {
  const box = $("stochastic");
  box.replaceChildren();
  const s = r.stochastic;
  if (!s) {
    box.append(el("p", { class: "facts", text: "Stochastic rounding: the number is a value of the format (or not finite): no randomness." }));
    return;
  }
  box.append(el("p", { class: "facts", text: `Stochastic rounding: ${s.note}` }));
  const ul = el("ul", { id: "stochastic-outcomes" });
  for (const o of s.outcomes) {
    const li = el("li", { "data-value": o.decimal });
    li.append(el("span", { class: "mono", text: `${o.decimal}${o.hex ? ` (${o.hex})` : ""}` }));
    li.append(" with probability ");
    li.append(el("span", { class: "p", text: o.p }));
    li.append(` ≈ ${o.p_approx}`);
    li.append(el("span", { class: "hint", text: `  (fpsim: ${o.p_fpsim_bits})` }));
    ul.append(li);
  }
  box.append(ul);
  if (r.rounding === "stochastic" && !r.result.no_code) {
    box.append(el("p", { class: "facts", text: `This draw (seed ${r.seed}): ${r.result.decimal}` }));
  }
}

// ---- number lines ---------------------------------------------------------------------------------------
function lineAxis(svg, y) {
  svg.append(svgEl("line", { x1: 30, x2: 970, y1: y, y2: y, stroke: "#111", "stroke-width": 2 }));
}

function shortText(s, n = 18) {
  return s.length > n ? `${s.slice(0, n - 1)}…` : s;
}

async function drawNear() {
  const svg = $("near-line");
  const desc = state.desc;
  let r;
  try {
    r = await api("near", "neighbours", { format: state.format, code: desc.code, count: 8 });
  } catch (e) {
    panelError("line", e.message);
    return;
  }
  if (!r) return;
  panelError("line", "");
  svg.replaceChildren();
  lineAxis(svg, 80);
  const pts = r.values.map((v, i) => ({ ...v, x: num(v.stored), i })).filter((p) => Number.isFinite(p.x));
  if (pts.length === 0) {
    svg.append(svgEl("text", { x: 500, y: 50, "text-anchor": "middle", "font-size": 22 }, "NaN is not on the number line"));
    return;
  }
  const lo = pts[0].x;
  const hi = pts[pts.length - 1].x;
  const X = (v) => (hi === lo ? 500 : 40 + ((v - lo) / (hi - lo)) * 920);
  for (const p of pts) {
    const current = p.i === r.index;
    const t = svgEl("line", {
      x1: X(p.x), x2: X(p.x), y1: current ? 52 : 66, y2: current ? 108 : 94,
      stroke: current ? "#0072b2" : "#111", "stroke-width": current ? 6 : 3,
      class: current ? "tick current" : "tick",
    });
    t.append(svgEl("title", {}, `${p.decimal} (${p.hex})`));
    svg.append(t);
  }
  const cur = r.values[r.index];
  if (cur && Number.isFinite(num(cur.stored))) {
    svg.append(svgEl("text", { x: X(num(cur.stored)), y: 40, "text-anchor": "middle", "font-size": 24, "font-weight": "bold", fill: "#0072b2" }, shortText(cur.decimal, 26)));
  }
  svg.append(svgEl("text", { x: 40, y: 142, "text-anchor": "start", "font-size": 18 }, shortText(pts[0].decimal, 22)));
  svg.append(svgEl("text", { x: 960, y: 142, "text-anchor": "end", "font-size": 18 }, shortText(pts[pts.length - 1].decimal, 22)));
  for (const v of r.values) {
    if (v.stored === "inf") svg.append(svgEl("text", { x: 990, y: 86, "text-anchor": "end", "font-size": 20 }, "→ inf"));
    if (v.stored === "-inf") svg.append(svgEl("text", { x: 10, y: 86, "font-size": 20 }, "-inf ←"));
  }
  // the typed number, where it lies between the values
  if (state.round && state.round.input) {
    const x = num(state.round.input.float64);
    if (Number.isFinite(x) && x >= lo && x <= hi && hi > lo) {
      const px = X(x);
      svg.append(svgEl("path", { d: `M ${px} 98 L ${px - 11} 120 L ${px + 11} 120 Z`, fill: "#d55e00", class: "input-marker" }));
      // beside the triangle, on the side with room (the end labels sit lower)
      const right = px < 800;
      svg.append(svgEl("text", { x: right ? px + 16 : px - 16, y: 118, "text-anchor": right ? "start" : "end", "font-size": 18, fill: "#a04000" }, `x = ${shortText(state.round.input.text, 14)}`));
    }
  }
}

function drawFull() {
  const svg = $("full-line");
  if (!state.values || !state.info) return;
  svg.replaceChildren();
  lineAxis(svg, 80);
  const info = state.info;
  const top = state.zoom === "all" ? num(info.max.stored) : 4 * num(info.min_normal.stored);
  const X = (v) => 40 + (v / top) * 920;
  const colour = { zero: "#111", subnormal: "#d55e00", normal: "#0072b2" };
  const cur = state.desc ? Math.abs(num(state.desc.stored)) : NaN;
  for (const row of state.values.values) {
    const v = num(row.stored);
    if (!Number.isFinite(v) || v < 0 || row.decimal === "-0" || v > top) continue;
    const current = v === cur;
    const g = svgEl("g", { class: "tick", "data-code": row.code });
    g.append(svgEl("rect", { x: X(v) - 4, y: 50, width: 8, height: 60, fill: "transparent" }));
    g.append(svgEl("line", {
      x1: X(v), x2: X(v), y1: current ? 46 : 62, y2: current ? 114 : 98,
      stroke: current ? "#000" : colour[row.cls] || "#111", "stroke-width": current ? 5 : 2,
    }));
    g.append(svgEl("title", {}, `${row.decimal} (${row.hex}, ${row.cls})`));
    g.addEventListener("click", () => loadCode({ code: row.code }));
    svg.append(g);
  }
  svg.append(svgEl("text", { x: 40, y: 140, "font-size": 18, "text-anchor": "middle" }, "0"));
  const right = state.zoom === "all" ? `max = ${info.max.short}` : `4 × min normal (min normal = ${info.min_normal.pow2 || info.min_normal.short})`;
  svg.append(svgEl("text", { x: 960, y: 140, "font-size": 18, "text-anchor": "end" }, right));
  const mn = num(info.min_normal.stored);
  if (mn <= top) {
    const anchor = X(mn) < 120 ? "start" : "middle";
    svg.append(svgEl("line", { x1: X(mn), x2: X(mn), y1: 36, y2: 46, stroke: "#0072b2", "stroke-width": 2 }));
    svg.append(svgEl("text", { x: X(mn), y: 30, "font-size": 16, "text-anchor": anchor, fill: "#0072b2" }, "min normal"));
  }
}

function renderTable() {
  const t = $("values-table");
  t.replaceChildren();
  if (!state.values || !state.info) return;
  const info = state.info;
  const cols = 2 ** info.man_bits;
  const head = el("tr", {}, el("th", { text: "E \\ f" }));
  for (let f = 0; f < cols; f++) {
    head.append(el("th", { text: info.man_bits ? f.toString(2).padStart(info.man_bits, "0") : "—" }));
  }
  t.append(el("thead", {}, head));
  const body = el("tbody");
  const positive = state.values.values.slice(0, 2 ** (info.exp_bits + info.man_bits));
  for (let E = 0; E < 2 ** info.exp_bits; E++) {
    const tr = el("tr", {}, el("th", { text: E.toString(2).padStart(info.exp_bits, "0") }));
    for (let f = 0; f < cols; f++) {
      const row = positive[E * cols + f];
      const td = el("td", { class: `v c-${row.cls}`, "data-code": row.code, text: row.short });
      td.title = `${row.decimal} = ${row.hex}: ${row.bits} (${row.cls})`;
      td.addEventListener("click", () => loadCode({ code: row.code }));
      tr.append(td);
    }
    body.append(tr);
  }
  t.append(body);
  $("table-note").textContent = info.signed ? "The codes with the sign bit clear; with it set, the same values negated." : "";
}

function markTable() {
  const t = $("values-table");
  if (!state.values || !state.desc) return;
  if (!t.dataset.format || t.dataset.format !== state.format) {
    renderTable();
    t.dataset.format = state.format;
  }
  const info = state.info;
  const mag = BigInt(state.desc.code) & ((1n << BigInt(info.exp_bits + info.man_bits)) - 1n);
  for (const td of t.querySelectorAll("td.current")) td.classList.remove("current");
  const td = t.querySelector(`td[data-code="${mag.toString()}"]`);
  if (td) td.classList.add("current");
}

// ---- arithmetic -----------------------------------------------------------------------------------------
async function doArith() {
  const op = $("arith-op").value;
  $("arith-b").hidden = op === "sqrt";
  $("arith-c").hidden = op !== "fma";
  const params = { ...roundingParams(), a: $("arith-a").value, op };
  if (op !== "sqrt") params.b = $("arith-b").value;
  if (op === "fma") params.c = $("arith-c").value;
  let r;
  try {
    r = await api("arith", "arith", params);
  } catch (e) {
    panelError("arith", e.message);
    $("arith-result").textContent = "";
    $("arith-exact").textContent = "";
    $("arith-explain").textContent = "";
    $("arith-notes").replaceChildren();
    return;
  }
  if (!r) return;
  panelError("arith", "");
  const res = r.result;
  $("arith-result").textContent = res.no_code ? `${res.decimal} (${res.no_code})` : `${res.decimal} (${res.hex})`;
  let exact = `exact result: ${r.exact}`;
  if (res.error) exact += ` · error ${res.error.exact} (${res.error.ulps} ulp)`;
  $("arith-exact").textContent = exact;
  $("arith-notes").replaceChildren(...r.notes.map((n) => el("li", { text: n })));
  $("arith-explain").textContent = r.explain;
}

// ---- loss scaling ---------------------------------------------------------------------------------------
const ZONE_NAMES = { underflow: "underflow (→ 0)", subnormal: "subnormal", normal: "normal", overflow: "overflow" };

async function doLoss() {
  const k = $("loss-k").value;
  const params = {
    format: state.format,
    log2_scale: k,
    center: $("loss-center").value,
    spread: $("loss-spread").value,
    subnormals: $("opt-subnormals").checked,
  };
  let r;
  try {
    r = await api("loss", "lossscale", params);
  } catch (e) {
    panelError("loss", e.message);
    $("loss-plot").replaceChildren();
    $("loss-zones").querySelector("tbody").replaceChildren();
    $("loss-suggest").textContent = "";
    return;
  }
  if (!r) return;
  panelError("loss", "");
  $("loss-k-out").textContent = String(r.log2_scale);
  $("loss-center-out").textContent = $("loss-center").value;
  $("loss-spread-out").textContent = $("loss-spread").value;
  $("loss-scaled-head").textContent = `scaled by ${r.scale}`;
  const body = $("loss-zones").querySelector("tbody");
  body.replaceChildren();
  for (const z of ["underflow", "subnormal", "normal", "overflow"]) {
    const tr = el("tr", { "data-zone": z });
    const name = el("td");
    name.append(el("span", { class: `swatch z-${z}` }), z === "overflow" ? `overflow (→ ${r.boundaries.overflow_to})` : ZONE_NAMES[z]);
    tr.append(name);
    tr.append(el("td", { class: "unscaled", text: `${r.unscaled[z].percent} (${r.unscaled[z].count})` }));
    tr.append(el("td", { class: "scaled", text: `${r.zones[z].percent} (${r.zones[z].count})` }));
    body.append(tr);
  }
  const s = r.suggested;
  $("loss-suggest").textContent = s.none ? s.none
    : `Scales 2^${s.lo} … 2^${s.hi} keep every value below overflow and lose the fewest: ${s.underflow_percent} underflow. ` +
      `Underflow below ${r.boundaries.underflow_below}; normal from ${r.boundaries.normal_from}; max ${r.boundaries.max}.`;
  drawLoss(r);
}

function drawLoss(r) {
  const svg = $("loss-plot");
  svg.replaceChildren();
  const info = r.format_info;
  const k = r.log2_scale;
  const bins = r.bins.map((b) => ({ e: b.log2 + k, c: b.count }));
  if (!bins.length) return;
  const under = $("opt-subnormals").checked ? info.log2_smallest - 1 : info.log2_min_normal;
  const x0 = Math.min(under - 8, r.bins[0].log2 - 2);
  const x1 = Math.max(info.log2_max + 6, r.bins[r.bins.length - 1].log2 + 2);
  const L = 50, R = 980, T = 20, B = 250;
  const X = (e) => L + ((Math.min(Math.max(e, x0), x1) - x0) / (x1 - x0)) * (R - L);
  const zones = [
    ["underflow", x0, under],
    ["subnormal", under, info.log2_min_normal],
    ["normal", info.log2_min_normal, info.log2_max],
    ["overflow", info.log2_max, x1],
  ];
  const fills = { underflow: "#f6c7a6", subnormal: "#f9f3a8", normal: "#b3e3d3", overflow: "#ecc6dc" };
  for (const [z, a, b] of zones) {
    if (b <= a) continue;
    svg.append(svgEl("rect", { x: X(a), y: T, width: Math.max(X(b) - X(a), 0), height: B - T, fill: fills[z], class: `zone zone-${z}` }));
  }
  // the zone names, after the bands so that none is hidden; a narrow band's name goes lower
  let low = false;
  for (const [z, a, b] of zones) {
    if (b <= a) continue;
    const narrowBand = X(b) - X(a) < 11 * z.length;
    const mid = Math.min(Math.max((X(a) + X(b)) / 2, L + 50), R - 50);
    svg.append(svgEl("text", { x: mid, y: T + (narrowBand && low ? 46 : 22), "text-anchor": "middle", "font-size": 18, "font-weight": "bold" }, z));
    low = narrowBand && !low;
  }
  const maxc = Math.max(...bins.map((b) => b.c));
  let beyond = 0;
  for (const b of bins) {
    if (b.c === 0) continue;
    if (b.e < x0 || b.e + 1 > x1) { beyond += b.c; continue; }
    const h = (b.c / maxc) * (B - T - 40);
    svg.append(svgEl("rect", { x: X(b.e), y: B - h, width: Math.max(X(b.e + 1) - X(b.e) - 1, 1), height: h, fill: "#333", class: "bar" }));
  }
  svg.append(svgEl("line", { x1: L, x2: R, y1: B, y2: B, stroke: "#111", "stroke-width": 2 }));
  const step = Math.max(1, Math.ceil((x1 - x0) / 12 / 4) * 4);
  for (let e = Math.ceil(x0 / step) * step; e <= x1; e += step) {
    svg.append(svgEl("line", { x1: X(e), x2: X(e), y1: B, y2: B + 8, stroke: "#111", "stroke-width": 2 }));
    svg.append(svgEl("text", { x: X(e), y: B + 30, "text-anchor": "middle", "font-size": 18 }, `2^${e}`));
  }
  if (beyond) svg.append(svgEl("text", { x: R, y: T + 50, "text-anchor": "end", "font-size": 16 }, "some values lie outside the drawing"));
}

// ---- wiring ---------------------------------------------------------------------------------------------
function addPanelErrors() {
  for (const [panel, section] of [["controls", "controls"], ["bits", "bits-panel"], ["input", "input-panel"],
    ["line", "line-panel"], ["arith", "arith-panel"], ["loss", "loss-panel"]]) {
    let p = $(`err-${panel}`);
    if (!p) {
      p = el("p", { id: `err-${panel}`, class: "error", role: "alert" });
      p.hidden = true;
      const sec = $(section);
      const h = sec.querySelector("h2");
      if (h) h.after(p); else sec.append(p);
    }
  }
}

async function main() {
  addPanelErrors();
  try {
    await loadFormats();
  } catch (e) {
    panelError("controls", `cannot reach the server: ${e.message}`);
    return;
  }
  $("format-select").addEventListener("change", (e) => useFormat(e.target.value));
  $("format-name-go").addEventListener("click", () => useFormat($("format-name").value.trim()));
  $("format-name").addEventListener("keydown", (e) => { if (e.key === "Enter") useFormat($("format-name").value.trim()); });
  $("custom-go").addEventListener("click", () => useFormat(customFormatText()));
  const again = () => Promise.all([doRound(), doArith(), doLoss()]);
  for (const id of ["rounding-select", "opt-subnormals", "opt-saturate", "opt-seed"]) {
    $(id).addEventListener("change", again);
  }
  const roundSoon = debounce(doRound, 250);
  $("number-input").addEventListener("input", roundSoon);
  $("number-input").addEventListener("keydown", (e) => { if (e.key === "Enter") doRound(); });
  $("next-down").addEventListener("click", (e) => { if (e.currentTarget.dataset.code) loadCode({ code: e.currentTarget.dataset.code }); });
  $("next-up").addEventListener("click", (e) => { if (e.currentTarget.dataset.code) loadCode({ code: e.currentTarget.dataset.code }); });
  const arithSoon = debounce(doArith, 250);
  for (const id of ["arith-a", "arith-b", "arith-c"]) $(id).addEventListener("input", arithSoon);
  $("arith-op").addEventListener("change", doArith);
  $("arith-go").addEventListener("click", doArith);
  const lossSoon = debounce(doLoss, 60);
  for (const id of ["loss-k", "loss-center", "loss-spread"]) $(id).addEventListener("input", lossSoon);
  $("zoom-all").addEventListener("click", () => { state.zoom = "all"; $("zoom-all").classList.add("on"); $("zoom-zero").classList.remove("on"); drawFull(); });
  $("zoom-zero").addEventListener("click", () => { state.zoom = "zero"; $("zoom-zero").classList.add("on"); $("zoom-all").classList.remove("on"); drawFull(); });
  await useFormat(state.format);
  document.body.dataset.ready = "1";  // for the browser tests: the first answers are shown
}

document.addEventListener("DOMContentLoaded", main);
