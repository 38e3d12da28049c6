"""The page of ``attnkit explain --html``: its HTML, CSS and JavaScript, with fields that :mod:`html_view` fills in.

The program reads the maps as support lists (per row: the keys with a stored weight and those weights; ``rest``: the
mass a softmax row left out, drawn spread evenly over the pieces it stores nothing for) and derives every other view
from them: words (a word's pieces merged: the attention it receives summed over its pieces, the attention it gives
averaged, so a row still sums to 1) and means over heads or layers, each computed once when first shown. The head view
draws one query token's lines (every token's where the input is short); the model view paints each map into a canvas
of at most 96 x 96 pixels (a pixel: the largest weight of its block of tokens). Fields: ``__TITLE__``, ``__META__``,
``__RULES__`` (text already escaped) and ``__DATA__`` (JSON made safe for a script element).
"""

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body { font: 13px system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 16px; margin: 0 0 4px; } .meta { color: #666; margin-bottom: 6px; }
.rules { color: #555; font-size: 12px; max-width: 980px; margin: 4px 0 10px; }
.bar { margin: 8px 0; } select, button, label { font: inherit; margin-right: 8px; }
#row { color: #444; min-height: 1.2em; } #hv { max-height: 70vh; overflow: auto; border: 1px solid #eee; display: inline-block; }
#headview text { font-size: 12px; } #headview text.q { cursor: pointer; } #headview text.chosen { font-weight: bold; fill: #b3261e; }
#grid { display: grid; gap: 4px; margin-top: 8px; }
#grid canvas { border: 1px solid #ddd; cursor: pointer; image-rendering: pixelated; }
#grid .lab { font-size: 11px; color: #666; text-align: center; align-self: center; }
#status { color: #666; margin-top: 6px; }
</style></head><body>
<h1>__TITLE__</h1>
<div class="meta">__META__</div>
<p class="rules">__RULES__</p>
<div class="bar"><b>head view</b> units <select id="units"><option value="pieces">word pieces</option><option value="words">words</option></select>
layer <select id="layer"></select> head <select id="head"></select>
<label><input type="checkbox" id="every"> every token's lines</label> <span id="zeros"></span></div>
<div id="row"></div>
<div id="hv"><svg id="headview" xmlns="http://www.w3.org/2000/svg"><g id="lines"></g><g id="tokens"></g></svg></div>
<div class="bar"><b>model view</b>: every layer (rows) x head (columns) and their means; white = exactly 0;
colour: the square root of weight / the map's largest; click a cell to open it above. <span id="bins"></span></div>
<div id="grid"></div>
<div id="status">loading</div>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const T = D.tokens, NL = D.maps.length, NH = D.maps[0].length, SP = D.sparse_layers;
const UNITS = {pieces: T, words: D.words};
const PIECES = D.words.map(() => []); D.word_of.forEach((u, i) => PIECES[u].push(i));
const COLORS = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#7f7f7f","#bcbd22","#17becf","#393b79","#637939"];
const BINS = 96, EVERY_MAX = 256, ROW = 18, X1 = 170, X2 = 390, NS = "http://www.w3.org/2000/svg";
const $ = id => document.getElementById(id);
const sel = {units: $("units"), layer: $("layer"), head: $("head"), every: $("every")};
const BASE = D.maps.map(hs => hs.map(h => ({n: T.length, idx: h.idx, val: h.val, rest: h.rest || null, size: null,
  even: h.rest ? h.rest.map((r, i) => r / Math.max(1, T.length - h.idx[i].length)) : null})));
const ACC = new Float64Array(T.length), SEEN = new Uint8Array(T.length), CACHE = new Map();
const ids = (v, n) => v === "mean" ? [...Array(n).keys()].map(String) : [v];
const layerName = l => l === "mean" ? "mean of layers" : l + (SP ? (SP.includes(+l) ? " (sparse)" : " (softmax)") : "");
const headName = h => h === "mean" ? "mean of heads" : h === "all" ? "all (one colour each)" : h;

// One row of a derived map: the sum of f * (row i of piece map m), keys mapped by key (to words) or not. A row's
// left-out mass lies evenly on the pieces it stores nothing for (even: per piece), in every map, derived or not.
function mixRow(terms, key, size, out) {
  const keys = []; let even = 0;
  for (const [m, i, f] of terms) {
    const ix = m.idx[i], vx = m.val[i], e = m.even ? f * m.even[i] : 0;
    even += e;
    for (let k = 0; k < ix.length; k++) {
      const j = key ? key[ix[k]] : ix[k];
      if (!SEEN[j]) { SEEN[j] = 1; keys.push(j); }
      ACC[j] += f * vx[k] - e;  // the stored weight in place of the even share of it
    }
  }
  keys.sort((a, b) => a - b);
  let held = 0;
  out.idx.push(keys); out.val.push(keys.map(j => { const s = size ? size[j] : 1; held += s; return ACC[j] + even * s; }));
  out.even.push(even); out.rest.push(even * (T.length - held));
  for (const j of keys) { ACC[j] = 0; SEEN[j] = 0; }
}
function derived(n, rows, key, size) {  // size: the pieces of each key (words), or null
  const out = {n, idx: [], val: [], rest: [], even: [], size};
  rows.forEach(terms => mixRow(terms, key, size, out));
  if (!out.rest.some(r => r > 0)) out.rest = out.even = null;
  return out;
}
function mapOf(l, h, units) {  // l, h: an index or "mean"; units: pieces or words
  const key = units + "|" + l + "|" + h;
  if (CACHE.has(key)) return CACHE.get(key);
  let m;
  if (units === "words") {
    const p = mapOf(l, h, "pieces");
    m = derived(D.words.length, PIECES.map(rows => rows.map(i => [p, i, 1 / rows.length])), D.word_of, PIECES.map(r => r.length));
  } else {
    const ms = ids(l, NL).flatMap(a => ids(h, NH).map(b => BASE[a][b]));
    m = ms.length === 1 ? ms[0] : derived(T.length, T.map((_, i) => ms.map(x => [x, i, 1 / ms.length])), null, null);
  }
  CACHE.set(key, m);
  return m;
}

let chosen = 0, hover = null, qTexts = [];
const names = () => UNITS[sel.units.value];
function buildTokens() {
  const g = $("tokens"), N = names(), svg = $("headview"), frag = document.createDocumentFragment();
  svg.setAttribute("width", X2 + 200); svg.setAttribute("height", ROW * N.length + 10);
  qTexts = [];
  for (const [x, anchor, side] of [[X1 - 6, "end", "q"], [X2 + 6, "start", "k"]]) N.forEach((t, i) => {
    const tx = document.createElementNS(NS, "text");
    tx.setAttribute("x", x); tx.setAttribute("y", 18 + i * ROW); tx.setAttribute("text-anchor", anchor);
    tx.setAttribute("class", side === "q" ? "tok-q q" : "tok-k"); tx.textContent = t;
    if (side === "q") { tx.dataset.q = String(i); qTexts.push(tx); }
    frag.appendChild(tx);
  });
  g.replaceChildren(frag);
  qTexts[chosen].classList.add("chosen");
}
function rowText(m, i, N) {  // what is stored of row i of map m
  const k = m.idx[i].length, left = m.rest ? m.rest[i] : 0;
  const who = `row ${i} "${N[i]}": `;
  if (left > 0) return who + `${k} largest of ${m.n} weights stored, ${(100 * (1 - left)).toFixed(1)}% of the row's mass (the rest drawn spread evenly)`;
  return who + `${k} non-zero weight${k === 1 ? "" : "s"} of ${m.n}, every one stored` + (k < m.n ? `; ${m.n - k} exactly 0` : "");
}
function drawLines() {
  const units = sel.units.value, l = sel.layer.value, N = names(), n = N.length;
  const heads = sel.head.value === "all" ? ids("mean", NH) : [sel.head.value];
  const focus = hover !== null ? hover : (sel.every.checked ? null : chosen);
  const rows = focus === null ? [...Array(n).keys()] : [focus], frag = document.createDocumentFragment();
  let lines = 0, zeros = 0, sum = 0;
  for (const h of heads) {
    const m = mapOf(l, h, units);
    for (let i = 0; i < n; i++) if (!(m.rest && m.rest[i] > 0)) zeros += n - m.idx[i].length;
    for (const i of rows) {
      const ix = m.idx[i], vx = m.val[i], y1 = 14 + i * ROW;
      let top = 0; for (const v of vx) if (v > top) top = v;
      for (let k = 0; k < ix.length; k++) {
        const ln = document.createElementNS(NS, "line");
        ln.setAttribute("x1", X1); ln.setAttribute("y1", y1); ln.setAttribute("x2", X2); ln.setAttribute("y2", 14 + ix[k] * ROW);
        ln.setAttribute("stroke", heads.length > 1 ? COLORS[+h % COLORS.length] : "#1f5fa8");
        ln.setAttribute("stroke-opacity", Math.max(0.05, vx[k] / top).toFixed(3)); ln.setAttribute("stroke-width", 2);
        frag.appendChild(ln); lines++; sum += vx[k];
      }
      sum += m.rest ? m.rest[i] : 0;
    }
  }
  $("lines").replaceChildren(frag);
  const svg = $("headview"), cells = heads.length * n * n;
  Object.assign(svg.dataset, {lines: String(lines), token: focus === null ? "all" : String(focus), rowSum: (sum / heads.length / rows.length).toFixed(4)});
  $("zeros").textContent = `exactly 0: ${(100 * zeros / cells).toFixed(1)}% of ${cells} weights; ${lines} lines drawn`;
  $("row").textContent = focus === null ? "every token's lines (hover a token for its own; click one to keep it)"
    : heads.slice(0, 3).map(h => (heads.length > 1 ? `head ${h}: ` : "") + rowText(mapOf(l, h, units), focus, N)).join(" · ")
      + (heads.length > 3 ? " · …" : "");
}
function choose(i) {
  qTexts[chosen].classList.remove("chosen"); chosen = i; qTexts[chosen].classList.add("chosen");
  sel.every.checked = false; drawLines();
}

function paint(canvas, m, b) {  // the map into a b x b canvas: a pixel holds the largest weight of its block
  const n = m.n, cell = new Float64Array(b * b), wide = new Float64Array(b).fill(1);  // wide: a block's largest key
  if (m.size) m.size.forEach((s, j) => { const c = Math.floor(j * b / n); if (wide[c] < s) wide[c] = s; });
  for (let i = 0; i < n; i++) {
    const r = Math.floor(i * b / n) * b, ix = m.idx[i], vx = m.val[i], even = m.even ? m.even[i] : 0;
    if (even > 0) for (let c = 0; c < b; c++) if (cell[r + c] < even * wide[c]) cell[r + c] = even * wide[c];
    for (let k = 0; k < ix.length; k++) { const c = r + Math.floor(ix[k] * b / n); if (cell[c] < vx[k]) cell[c] = vx[k]; }
  }
  let top = 0; for (const v of cell) if (v > top) top = v;
  canvas.width = canvas.height = b;
  const g = canvas.getContext("2d"), img = g.createImageData(b, b), blue = [31, 95, 168];
  for (let p = 0; p < cell.length; p++) {
    const a = cell[p] === 0 ? 0 : 0.12 + 0.88 * Math.sqrt(cell[p] / top);
    for (let c = 0; c < 3; c++) img.data[4 * p + c] = Math.round(255 - a * (255 - blue[c]));
    img.data[4 * p + 3] = 255;
  }
  g.putImageData(img, 0, 0);
}
function drawGrid() {
  const grid = $("grid"), units = sel.units.value, n = names().length, b = Math.min(n, BINS);
  const side = b * Math.max(1, Math.floor(BINS / b)), frag = document.createDocumentFragment();
  const layers = NL > 1 ? [...ids("mean", NL), "mean"] : ["0"], heads = NH > 1 ? [...ids("mean", NH), "mean"] : ["0"];
  const lab = text => frag.appendChild(Object.assign(document.createElement("div"), {className: "lab", textContent: text}));
  grid.style.gridTemplateColumns = `48px repeat(${heads.length}, ${side + 2}px)`;
  lab(""); heads.forEach(h => lab(h === "mean" ? "mean" : "h" + h));
  for (const l of layers) {
    lab(l === "mean" ? "mean" : "L" + l);
    for (const h of heads) {
      const c = document.createElement("canvas");
      paint(c, mapOf(l, h, units), b);
      c.style.width = c.style.height = side + "px";
      c.title = `layer ${layerName(l)}, head ${headName(h)}`;
      c.addEventListener("click", () => { sel.layer.value = l; sel.head.value = h; drawLines(); });
      frag.appendChild(c);
    }
  }
  grid.replaceChildren(frag);
  $("bins").textContent = n > b ? `(${n} ${units === "words" ? "words" : "tokens"}: a pixel is a block of about ${(n / b).toFixed(1)} x ${(n / b).toFixed(1)})` : "";
}

function setUp() {
  for (const l of [...ids("mean", NL), "mean"]) sel.layer.add(new Option(layerName(l), l));
  for (const h of ["all", "mean", ...ids("mean", NH)]) sel.head.add(new Option(headName(h), h));
  const H = new URLSearchParams(location.hash.slice(1));  // e.g. #layer=5&head=mean&token=7&units=words
  sel.units.value = H.get("units") === "words" ? "words" : "pieces";
  sel.layer.value = String(NL - 1); sel.head.value = "0";
  if (H.has("layer")) sel.layer.value = H.get("layer");
  if (H.has("head")) sel.head.value = H.get("head");
  if (sel.layer.selectedIndex < 0) sel.layer.value = String(NL - 1);
  if (sel.head.selectedIndex < 0) sel.head.value = "0";
  const n = names().length, t = parseInt(H.get("token"), 10);
  chosen = t >= 0 && t < n ? t : 0;
  sel.every.checked = !H.has("token") && n <= 64;
  sel.every.disabled = n > EVERY_MAX;
  if (sel.every.disabled) sel.every.parentElement.title = `more than ${EVERY_MAX} tokens: one token's lines at a time`;
  const gt = $("tokens");
  gt.addEventListener("mouseover", e => { if (e.target.dataset && e.target.dataset.q) { hover = +e.target.dataset.q; drawLines(); } });
  gt.addEventListener("mouseout", e => { if (e.target.dataset && e.target.dataset.q) { hover = null; drawLines(); } });
  gt.addEventListener("click", e => { if (e.target.dataset && e.target.dataset.q) choose(+e.target.dataset.q); });
  sel.layer.addEventListener("change", drawLines); sel.head.addEventListener("change", drawLines);
  sel.every.addEventListener("change", drawLines);
  sel.units.addEventListener("change", () => {
    chosen = sel.units.value === "words" ? D.word_of[chosen] : PIECES[chosen][0]; hover = null;
    buildTokens(); drawLines(); drawGrid();
  });
}
setUp(); buildTokens(); drawLines(); drawGrid();
if (chosen > 0) $("hv").scrollTop = Math.max(0, chosen * ROW - 100);
const drawn = performance.now();
document.body.dataset.drawnMs = drawn.toFixed(0);
$("status").textContent = `rendered ${NL} layers x ${NH} heads, ${T.length} tokens (${D.words.length} words) in ${drawn.toFixed(0)} ms`;
requestAnimationFrame(() => setTimeout(() => { document.body.dataset.paintedMs = performance.now().toFixed(0); }));
document.title = "ready: " + document.title;
</script></body></html>
"""
