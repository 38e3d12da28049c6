"""An interactive, self-contained HTML view of one input's attention (every layer and head), kept small at any length.

Two views in one page, in the spirit of bertviz's head and model views, with no external script (the page itself is
in :mod:`html_page`):

* **head view** — tokens (or words) in two columns; a line from the chosen query token to every key it attends to,
  its opacity the weight over the row's largest; pick the layer and the head, "all heads" (one colour each) or the
  mean of the heads or of the layers; hover a token to see its lines, click it to keep it. A weight that is exactly 0
  draws no line at all. Inputs of at most 64 tokens show every token's lines at first.
* **model view** — a grid of every layer x head (and their means) as small heatmaps painted into canvases; exact zeros
  are white, so sparse maps look sparse; a long input is downsampled (a pixel: the largest weight of its block).

The weights are embedded as JSON support lists, per row the keys with a stored weight and those weights:

* a row with an exact zero (a sparse map's) keeps every non-zero weight, to 6 significant digits (off by under 1e-6);
* a row without one (softmax) keeps every weight too, to 6 significant digits, while all such rows fit in
  :data:`BUDGET` stored weights (the sparse rows' counted first); past that each keeps its largest weights that carry
  :data:`MASS` of its mass, at most ``K = (BUDGET - the sparse rows' weights) // rows`` (at least 8), to 4 significant
  digits, and ``rest`` (the mass left out) is drawn spread evenly over the keys it stores nothing for. The page states
  which rule applied, with its numbers.

Words merge the word pieces (``##`` or a missing ``▁``/``Ġ`` marks a piece that goes on a word; special tokens are
words of their own): the attention a word receives is the sum over its pieces, the attention it gives the mean over
its pieces, so a row still sums to 1. The page works offline, in a browser or in a notebook (IPython.display.HTML).
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import numpy as np

from attnkit.analysis.explain import AttentionMaps, word_pieces
from attnkit.analysis.html_page import PAGE
from attnkit.errors import UserError
from attnkit.runfiles.atomic import write_text_atomic
from attnkit.runfiles.ownership import check_suffix

#: the most weights stored in one page (the sparse rows' first) before each softmax row is cut to its largest
BUDGET = 500_000
#: the share of a softmax row's mass that its stored largest weights carry, once rows are cut
MASS = 0.99
#: the fewest weights a cut row keeps, whatever the budget
MIN_KEEP = 8
#: significant digits of a row stored whole (exact to under 1e-6) and of a cut row's weights and left-out mass
WHOLE_DIGITS, CUT_DIGITS = 6, 4

def write_html(maps: AttentionMaps, path: str | Path, title: str = "attnkit attention") -> Path:
    """Write the interactive page for ``maps`` to ``path`` (self-contained: no network needed)."""
    path = check_suffix(path, (".html", ".htm"), f"--html {path}: the page")
    data, summary = page_data(maps)
    fields = {"__TITLE__": html.escape(title), "__META__": _meta(maps, summary), "__RULES__": _rules(summary),
              "__DATA__": script_json(data)}
    page = re.sub("__(?:TITLE|META|RULES|DATA)__", lambda m: fields[m.group(0)], PAGE)  # one pass: a field's text is never read as a field
    write_text_atomic(path, page)
    return path


def page_data(maps: AttentionMaps) -> tuple[dict, dict]:
    """The page's JSON (tokens, words, every head's support lists) and a summary of how it was stored: the
    softmax rows (``dense_rows``), the most each kept (``keep``; None: every weight), the mean mass left out
    (``left_out``), and the share of exact zeros and the mean support (as :meth:`AttentionMaps.stats`)."""
    w = np.asarray(maps.weights)
    if w.ndim != 4 or w.shape[2] != w.shape[3] or w.shape[2] != len(maps.tokens) or 0 in w.shape:
        raise UserError(f"attention weights of shape {list(w.shape)} for {len(maps.tokens)} tokens: expected "
                        f"[layers, heads, {len(maps.tokens)}, {len(maps.tokens)}]")
    n_layers, n_heads, L, _ = w.shape
    zeros = np.stack([[(w[l, h] == 0).sum(-1) for h in range(n_heads)] for l in range(n_layers)])  # per row
    has_zero = zeros > 0
    dense_rows, whole = int((~has_zero).sum()), int((L - zeros)[has_zero].sum())  # the sparse rows' weights come first
    keep = None if not dense_rows or whole + dense_rows * L <= BUDGET else max(MIN_KEEP, (BUDGET - whole) // dense_rows)
    heads, left = [], 0.0
    for l in range(n_layers):
        heads.append([])
        for h in range(n_heads):
            rows, lost = head_rows(np.asarray(w[l, h], dtype=np.float64), ~has_zero[l, h], keep)
            heads[-1].append(rows)
            left += lost
    words, word_of = word_pieces(maps.tokens)
    data = {"tokens": list(maps.tokens), "words": words, "word_of": word_of, "maps": heads,
            "sparse_layers": maps.sparse_layers,
            "storage": {"whole_digits": WHOLE_DIGITS, "cut_digits": CUT_DIGITS, "mass": MASS, "keep": keep}}
    cells = n_layers * n_heads * L
    summary = {"dense_rows": dense_rows, "keep": keep, "left_out": left / max(dense_rows, 1),
               "zero_fraction": float(zeros.sum()) / (cells * L), "mean_support": float(L - zeros.mean())}
    return data, summary


def head_rows(a: np.ndarray, cut: np.ndarray, keep: int | None) -> tuple[dict, float]:
    """One head's map ``a`` [L, L] as support lists ``{"idx": [[key, ...] per row], "val": [[weight, ...] per row]}``
    and, where rows are ``cut`` (a mask), ``"rest"``: each row's mass left out (0 for a row stored whole); with the
    total mass left out. A cut row keeps its largest weights up to :data:`MASS` of its mass, at most ``keep``."""
    L = a.shape[0]
    cut = np.zeros(L, bool) if keep is None or keep >= L else cut
    idx: list = [None] * L
    val: list = [None] * L
    whole = np.flatnonzero(~cut)
    if whole.size:
        r, c = np.nonzero(a[whole])
        _split(idx, val, whole, np.bincount(r, minlength=whole.size), c, significant(a[whole][r, c], WHOLE_DIGITS))
    rest = np.zeros(L)
    if cut.any():
        rows = a[cut]
        top = np.argpartition(-rows, keep - 1, axis=-1)[:, :keep]
        v = np.take_along_axis(rows, top, -1)
        order = np.argsort(-v, axis=-1, kind="stable")
        top, v = np.take_along_axis(top, order, -1), np.take_along_axis(v, order, -1)
        total = rows.sum(-1)
        n = np.minimum((np.cumsum(v, -1) < MASS * total[:, None]).sum(-1) + 1, keep)
        mask = np.arange(keep) < n[:, None]
        rest[cut] = total - np.where(mask, v, 0).sum(-1)
        by_key = np.argsort(np.where(mask, top, L), axis=-1, kind="stable")  # the kept keys in order, then the rest
        top, v = np.take_along_axis(top, by_key, -1), np.take_along_axis(v, by_key, -1)
        kept = mask.ravel()
        _split(idx, val, np.flatnonzero(cut), n, top.ravel()[kept], significant(v.ravel()[kept], CUT_DIGITS))
    out = {"idx": idx, "val": val}
    if cut.any():
        out["rest"] = significant(np.maximum(rest, 0), CUT_DIGITS).tolist()
    return out, float(rest.sum())


def _split(idx: list, val: list, rows: np.ndarray, counts: np.ndarray, keys: np.ndarray, weights: np.ndarray) -> None:
    """Fill ``idx[i]``, ``val[i]`` for each of ``rows`` from the flat ``keys``/``weights``, ``counts[k]`` for row k."""
    keys, weights = keys.tolist(), weights.tolist()
    start = 0
    for i, n in zip(rows.tolist(), counts.tolist()):
        idx[i], val[i] = keys[start:start + n], weights[start:start + n]
        start += n


def significant(x: np.ndarray, digits: int) -> np.ndarray:
    """``x`` rounded to ``digits`` significant digits (a non-zero stays non-zero; JSON then writes it short)."""
    x = np.asarray(x, dtype=np.float64)
    out = np.zeros_like(x)
    nz = x != 0
    q = 10.0 ** (digits - 1 - np.floor(np.log10(np.abs(x[nz]))))
    out[nz] = np.round(x[nz] * q) / q
    return out


def _meta(maps: AttentionMaps, summary: dict) -> str:
    """The line under the title: the map, the length, the exact zeros, the support, which layers are sparse."""
    meta = (f"{html.escape(maps.attention)} · {len(maps.tokens)} tokens · exactly 0: {summary['zero_fraction']:.1%} · "
            f"mean support {summary['mean_support']:.2f} per row")
    if maps.sparse_layers is not None:
        dense = [l for l in range(len(maps.weights)) if l not in maps.sparse_layers]
        meta += (f" · sparse map in layer{'s' * (len(maps.sparse_layers) > 1)} {', '.join(map(str, maps.sparse_layers))}; "
                 f"softmax in {', '.join(map(str, dense)) or 'none'}")
    return meta


def _rules(summary: dict) -> str:
    """The page's statement of how its weights are stored and how words and means are made (plain text, no markup)."""
    s = (f"Stored weights: a row with an exact zero (a sparse map's) keeps every non-zero weight, to {WHOLE_DIGITS} "
         "significant digits: its support list is exact. ")
    if summary["keep"] is None:
        s += f"A row without one (softmax) keeps every weight too, to {WHOLE_DIGITS} significant digits. "
    else:
        s += (f"A row without one (softmax; {summary['dense_rows']:,} here) keeps its largest weights that carry "
              f"{MASS:.0%} of the row's mass, at most {summary['keep']} per row (a budget of {BUDGET:,} stored weights for "
              f"the page, the sparse rows' counted first), to {CUT_DIGITS} significant digits; the mass left out "
              f"({summary['left_out']:.1%} of a row on average) is drawn spread evenly over the keys the row stores "
              "nothing for. ")
    return s + ("Words: a word's pieces merged; the attention a word receives is the sum over its pieces, the attention "
                "it gives the mean over its pieces, so each row still sums to 1. Means: the mean of the heads' (or the "
                "layers') maps, row by row.")


def script_json(data) -> str:
    """``data`` as compact JSON to embed in a ``<script>`` element: ``<``, ``>`` and ``&`` (which JSON has only inside
    its strings) written as ``\\u003c``, ``\\u003e``, ``\\u0026``, so that no token (``</script>``, ``<!--``) can end
    the element or change how the browser reads it; ``JSON.parse`` gives the text back unchanged."""
    text = json.dumps(data, separators=(",", ":"))
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
