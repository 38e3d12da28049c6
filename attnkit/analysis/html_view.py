"""An interactive, self-contained HTML view of one input's attention (every layer and head).

Two views in one page, in the spirit of bertviz's head and model views, with no external script:

* **head view** — tokens in two columns; a line from each query token to every key it attends to, its
  opacity the weight; pick the layer and the head (or "all heads", one colour each); hover a token to see
  only its lines. A weight that is exactly 0 draws no line at all.
* **model view** — a grid of every layer x head as small heatmaps; exact zeros are white, so sparse maps
  look sparse; click a cell to open it in the head view.

The weights are embedded as JSON; the page works offline, in a browser or in a notebook (IPython.display.HTML).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from attnkit.analysis.explain import AttentionMaps
from attnkit.errors import UserError
from attnkit.runfiles.atomic import write_text_atomic

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body { font: 13px system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 16px; margin: 0 0 4px; } .meta { color: #666; margin-bottom: 10px; }
.bar { margin: 8px 0; } select, button { font: inherit; margin-right: 8px; }
#grid { display: grid; gap: 4px; margin-top: 8px; } #grid canvas { border: 1px solid #ddd; cursor: pointer; }
#grid .lab { font-size: 11px; color: #666; text-align: center; align-self: center; }
#status { color: #666; margin-top: 6px; }
</style></head><body>
<h1>__TITLE__</h1>
<div class="meta">__META__</div>
<div class="bar"><b>head view</b> layer <select id="layer"></select> head <select id="head"></select>
<span id="zeros"></span></div>
<svg id="headview" xmlns="http://www.w3.org/2000/svg"></svg>
<div class="bar"><b>model view</b>: every layer (rows) x head (columns); white = exactly 0; click a cell</div>
<div id="grid"></div>
<div id="status">loading</div>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const D = JSON.parse(document.getElementById("data").textContent);
const W = D.weights, T = D.tokens, NL = W.length, NH = W[0].length, L = T.length;
const COLORS = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#7f7f7f","#bcbd22","#17becf","#393b79","#637939"];
const layerSel = document.getElementById("layer"), headSel = document.getElementById("head");
const SP = D.sparse_layers;  // --sparse-layers: the layers with the sparse map (the others softmax); null: all
const layerName = l => String(l) + (SP ? (SP.includes(l) ? " (sparse)" : " (softmax)") : "");
for (let l = 0; l < NL; l++) layerSel.add(new Option(layerName(l), String(l)));
headSel.add(new Option("all", "all"));
for (let h = 0; h < NH; h++) headSel.add(new Option(String(h), String(h)));
layerSel.value = String(NL - 1); headSel.value = "0";
let focus = null;
function drawHead() {
  const svg = document.getElementById("headview"), rowH = 18, width = 520, x1 = 150, x2 = 370;
  svg.setAttribute("width", width); svg.setAttribute("height", rowH * L + 10);
  while (svg.firstChild) svg.removeChild(svg.firstChild);
  const ns = "http://www.w3.org/2000/svg", l = +layerSel.value;
  const heads = headSel.value === "all" ? [...Array(NH).keys()] : [+headSel.value];
  let lines = 0, zeros = 0, cells = 0;
  for (const h of heads) for (let i = 0; i < L; i++) for (let j = 0; j < L; j++) {
    const w = W[l][h][i][j]; cells++;
    if (w === 0) { zeros++; continue; }
    if (focus !== null && focus !== i) continue;
    const ln = document.createElementNS(ns, "line");
    ln.setAttribute("x1", x1); ln.setAttribute("y1", 14 + i * rowH); ln.setAttribute("x2", x2); ln.setAttribute("y2", 14 + j * rowH);
    ln.setAttribute("stroke", heads.length > 1 ? COLORS[h % COLORS.length] : "#1f5fa8");
    ln.setAttribute("stroke-opacity", Math.min(1, w)); ln.setAttribute("stroke-width", 2);
    svg.appendChild(ln); lines++;
  }
  for (const [x, anchor, side] of [[x1 - 6, "end", "q"], [x2 + 6, "start", "k"]]) T.forEach((t, i) => {
    const tx = document.createElementNS(ns, "text");
    tx.setAttribute("x", x); tx.setAttribute("y", 18 + i * rowH); tx.setAttribute("text-anchor", anchor);
    tx.textContent = t; tx.setAttribute("class", "tok-" + side);
    if (side === "q") { tx.style.cursor = "pointer";
      tx.addEventListener("mouseenter", () => { focus = i; drawHead(); });
      tx.addEventListener("mouseleave", () => { focus = null; drawHead(); }); }
    svg.appendChild(tx);
  });
  document.getElementById("zeros").textContent = `exactly 0: ${(100 * zeros / cells).toFixed(1)}% of ${cells} weights; ${lines} lines drawn`;
  svg.dataset.lines = String(lines);
}
function drawGrid() {
  const grid = document.getElementById("grid"), px = Math.max(2, Math.floor(96 / L));
  grid.style.gridTemplateColumns = `40px repeat(${NH}, ${px * L + 2}px)`;
  grid.appendChild(Object.assign(document.createElement("div"), {className: "lab"}));
  for (let h = 0; h < NH; h++) grid.appendChild(Object.assign(document.createElement("div"), {className: "lab", textContent: "h" + h}));
  for (let l = 0; l < NL; l++) {
    grid.appendChild(Object.assign(document.createElement("div"), {className: "lab", textContent: "L" + l}));
    for (let h = 0; h < NH; h++) {
      const c = document.createElement("canvas"); c.width = c.height = px * L;
      const g = c.getContext("2d");
      for (let i = 0; i < L; i++) for (let j = 0; j < L; j++) {
        const w = W[l][h][i][j];
        g.fillStyle = w === 0 ? "#ffffff" : `rgba(31, 95, 168, ${0.12 + 0.88 * Math.min(1, w)})`;
        g.fillRect(j * px, i * px, px, px);
      }
      c.title = `layer ${layerName(l)}, head ${h}`;
      c.addEventListener("click", () => { layerSel.value = String(l); headSel.value = String(h); drawHead(); });
      grid.appendChild(c);
    }
  }
}
layerSel.addEventListener("change", drawHead); headSel.addEventListener("change", drawHead);
drawHead(); drawGrid();
document.getElementById("status").textContent = `rendered ${NL} layers x ${NH} heads, ${L} tokens`;
document.title = "ready: " + document.title;
</script></body></html>
"""


def write_html(maps: AttentionMaps, path: str | Path, title: str = "attnkit attention") -> Path:
    """Write the interactive page for ``maps`` to ``path`` (self-contained: no network needed)."""
    path = Path(path)
    if path.suffix.lower() not in (".html", ".htm"):
        raise UserError(f"--html {path.name}: the page file must end in .html")
    st = maps.stats()
    data = {"tokens": maps.tokens, "weights": [[[[round(float(w), 6) for w in row] for row in head] for head in layer] for layer in maps.weights],
            "sparse_layers": maps.sparse_layers}
    meta = (f"{html.escape(maps.attention)} · {len(maps.tokens)} tokens · exactly 0: {st['zero_fraction']:.1%} · "
            f"mean support {st['mean_support']:.2f} per row")
    if maps.sparse_layers is not None:
        dense = [l for l in range(len(maps.weights)) if l not in maps.sparse_layers]
        meta += (f" · sparse map in layer{'s' * (len(maps.sparse_layers) > 1)} {', '.join(map(str, maps.sparse_layers))}; "
                 f"softmax in {', '.join(map(str, dense)) or 'none'}")
    fields = {"__TITLE__": html.escape(title), "__META__": meta, "__DATA__": script_json(data)}
    page = re.sub("__(?:TITLE|META|DATA)__", lambda m: fields[m.group(0)], _PAGE)  # one pass: a field's text is never read as a field
    write_text_atomic(path, page)
    return path


def script_json(data) -> str:
    """``data`` as JSON to embed in a ``<script>`` element: ``<``, ``>`` and ``&`` (which JSON has only inside its
    strings) written as ``\\u003c``, ``\\u003e``, ``\\u0026``, so that no token (``</script>``, ``<!--``) can end
    the element or change how the browser reads it; ``JSON.parse`` gives the text back unchanged."""
    return json.dumps(data).replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
