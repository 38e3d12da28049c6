"""Looking at attention: one sentence's weights as heatmaps, with sparsity statistics; charts of layer weights,
learned lam and HANS results."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnkit.analysis.inference import encoded_batches, say_truncated
from attnkit.attention.placement import sparse_layer_set
from attnkit.attention.spec import spec_of
from attnkit.errors import UserError
from attnkit.models.pooling import head_of
from attnkit.runfiles.atomic import atomic_path
from attnkit.runfiles.names import FIGURE_CREATOR
from attnkit.runfiles.ownership import check_suffix

#: tokens that are words of their own, never pieces: [CLS], [SEP], <s>, </s>, <pad>
SPECIAL_TOKEN = re.compile(r"\[[A-Za-z_]+\]|<[^<>\s]+>")
#: the unknown-word token stands for a word of the text (an emoji, a word too long to split): not a special token
UNKNOWN_TOKENS = ("[UNK]", "<unk>")


def is_special(token: str) -> bool:
    """Whether a token is one the tokenizer adds ([CLS], [SEP], <s>, [PAD]...), not one that stands for the text's words."""
    return token not in UNKNOWN_TOKENS and bool(SPECIAL_TOKEN.fullmatch(token))


def word_pieces(tokens: list[str]) -> tuple[list[str], list[int]]:
    """The words of ``tokens`` and, per token, its word's index. A piece goes on the word before it where it starts
    with ``##`` (WordPiece) or, in a vocabulary that marks word starts (``▁`` SentencePiece, ``Ġ`` byte-level BPE),
    where it lacks the mark; special tokens ([CLS], <s>) are words of their own and never take a piece."""
    marked = any(t.startswith(("▁", "Ġ")) for t in tokens)
    words: list[str] = []
    word_of: list[int] = []
    prev_special = True
    for t in tokens:
        special = is_special(t)
        goes_on = not special and not prev_special and (not t.startswith(("▁", "Ġ")) if marked else t.startswith("##"))
        piece = t[2:] if t.startswith("##") else t.lstrip("▁Ġ") if marked else t
        if goes_on:
            words[-1] += piece
        else:
            words.append(piece if piece else t)
        word_of.append(len(words) - 1)
        prev_special = special
    return words, word_of


@dataclass
class AttentionMaps:
    """Attention of one sentence: ``weights[layer, head, query, key]`` over ``tokens``."""

    tokens: list[str]
    weights: np.ndarray  # [layers, heads, L, L]
    attention: str  # e.g. "sparsegen-lin (lam=-4)"
    sparse_layers: list[int] | None = None  # --sparse-layers: the layers that use the sparse map (the others softmax); None: all

    def layer_map(self, layer: int) -> str:
        """The mark after a layer's name where only some layers are sparse (--sparse-layers): " (sparse)" or
        " (softmax)"; "" where every layer uses the same map."""
        if self.sparse_layers is None:
            return ""
        return " (sparse)" if layer in self.sparse_layers else " (softmax)"

    def rationale(self, head: int | None = None) -> tuple[int, list[str], int] | None:
        """The hard rationale a sparse map chooses: (layer, the words the first token ([CLS]) attends to in the last
        layer where that row, averaged over the heads (or ``head``'s alone), has an exact zero among the text's words,
        how many words the text has); None where no layer's row has one (softmax). A word is in it when one of its
        pieces is."""
        words, word_of = word_pieces(self.tokens)
        text = [i for i, t in enumerate(self.tokens) if not is_special(t)]
        if not text:
            return None
        for layer in range(len(self.weights) - 1, -1, -1):
            rows = np.asarray(self.weights[layer])[:, 0, :]  # [CLS]'s row in each head
            row = rows.mean(0) if head is None else rows[head]
            if (row[text] == 0).any():
                chosen = sorted({word_of[i] for i in text if row[i] > 0})
                return layer, [words[w] for w in chosen], len({word_of[i] for i in text})
        return None

    def support_sizes(self) -> np.ndarray:
        """Non-zero entries per row, [layers, heads, L]."""
        return (self.weights > 0).sum(-1)

    def stats(self) -> dict:
        w = self.weights
        s = self.support_sizes()
        with np.errstate(divide="ignore", invalid="ignore"):
            ent = -np.where(w > 0, w * np.log(w), 0.0).sum(-1)
        return {
            "tokens": len(self.tokens),
            "zero_fraction": float((w == 0).mean()),
            "mean_support": float(s.mean()),
            "max_support": int(s.max()),
            "min_support": int(s.min()),
            "mean_entropy": float(ent.mean()),
            "support_per_layer": [float(x) for x in s.mean(axis=(1, 2))],
        } | ({} if self.sparse_layers is None else {"sparse_layers": list(self.sparse_layers)})


def view_sentence(texts: list[str]) -> int:
    """Index of the shortest text of 6 to 14 words (readable as a heatmap), else 0."""
    return min((j for j, t in enumerate(texts) if 6 <= len(t.split()) <= 14), key=lambda j: len(texts[j]), default=0)


def attention_maps(model, tokenizer, text: str, text_pair: str | None = None, max_length: int = 128) -> AttentionMaps:
    """Run ``model`` on one sentence and collect every layer's attention weights."""
    model.eval()
    enc = tokenizer(text, text_pair, truncation=True, max_length=max_length, return_tensors="pt")
    whole = tokenizer(text, text_pair, add_special_tokens=True)["input_ids"]
    if len(whole) > max_length:
        special = tokenizer.num_special_tokens_to_add(text_pair is not None)
        say_truncated(1, 1, len(whole) - special, max_length, max_length - special, pairs=text_pair is not None)
    with torch.inference_mode():
        out = model(**enc, output_attentions=True)
    if not out.attentions:
        raise RuntimeError("the model returned no attention weights (does it support output_attentions?)")
    w = torch.stack([a[0].float() for a in out.attentions]).cpu().numpy()  # [layers, heads, L, L]
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    spec = spec_of(model.config)
    sparse = None if spec.sparse_layers is None else sorted(sparse_layer_set(spec.sparse_layers, w.shape[0]))
    return AttentionMaps(tokens=list(tokens), weights=w, attention=spec.describe(), sparse_layers=sparse)


def plot_attention(maps: AttentionMaps, path: str | Path, layer: int | None = None, head: int | None = None) -> Path:
    """Heatmap(s) to ``path`` (PNG or SVG by extension).

    ``layer`` and ``head`` given: one map, tokens on both axes, each row's support size
    on the right. ``layer`` only: all heads of that layer. Neither: a grid of every
    layer x head. Exact zeros are drawn white.
    """
    plt = pyplot()
    path = figure_path(path, "heatmap")
    n_layers, n_heads, L, _ = maps.weights.shape
    for name, v, n in (("layer", layer, n_layers), ("head", head, n_heads)):
        if v is not None and not 0 <= v < n:
            raise UserError(f"{name} {v} out of range: the model has {n} {name}s (0..{n - 1})")
    cells = [(l, h) for l in ([layer] if layer is not None else range(n_layers)) for h in ([head] if head is not None else range(n_heads))]
    cmap = plt.get_cmap("viridis").with_extremes(under="white")
    sizes = maps.support_sizes()

    if len(cells) == 1:
        l, h = cells[0]
        ticks = tick_positions(L)
        names = maps.tokens if len(ticks) == L else [f"{i} {t}" for i, t in enumerate(maps.tokens)]  # thinned: with its place
        side = max(4.0, 0.35 * len(ticks) + 2)
        fig, ax = plt.subplots(figsize=(side + 1.5, side))
        w = maps.weights[l, h]
        im = ax.imshow(np.where(w > 0, w, -1), cmap=cmap, vmin=1e-9, vmax=max(w.max(), 1e-6))
        ax.set_xticks(ticks, [names[i] for i in ticks], rotation=90)
        ax.set_yticks(ticks, [names[i] for i in ticks])
        sec = ax.secondary_yaxis("right")
        sec.set_yticks(ticks, [f"|S|={int(sizes[l, h, i])}" for i in ticks])
        ax.set_xlabel("attended token (key)")
        ax.set_ylabel("attending token (query)")
        ax.set_title(f"{maps.attention}: layer {l}{maps.layer_map(l)}, head {h}")
        fig.colorbar(im, ax=ax, fraction=0.046, pad=0.12)
    else:
        rows = len({c[0] for c in cells})
        cols = len(cells) // rows
        fig, axes = plt.subplots(rows, cols, figsize=(1.6 * cols + 1, 1.6 * rows + 1), squeeze=False)
        for ax, (l, h) in zip(axes.flat, cells):
            w = maps.weights[l, h]
            ax.imshow(np.where(w > 0, w, -1), cmap=cmap, vmin=1e-9, vmax=max(w.max(), 1e-6))
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"L{l} H{h} |S|={sizes[l, h].mean():.1f}{maps.layer_map(l)}", fontsize=7)
        fig.suptitle(f"{maps.attention}: {' '.join(maps.tokens)[:120]}\n|S| = mean support size per row; white = exact zero", fontsize=9)
    return save_figure(fig, path)


#: the most tick labels on an axis of a heatmap: a longer input labels every k-th token (k = ceil(L / 64))
MAX_TICK_LABELS = 64


def tick_positions(n: int, most: int = MAX_TICK_LABELS) -> range:
    """The tokens labelled on a heatmap axis of ``n`` tokens: every one up to ``most``, else every k-th from the first,
    k = ceil(n / most), so that 512 tokens still give legible labels (64 of them) on a figure of a sane size."""
    return range(0, n, -(-n // most))


# ----------------------------------------------------------------------------- layer weights (SesameBERT)


def check_layer_weights(model) -> None:
    """ValueError for a model with no learned layer weights (neither SE nor the ``weighted`` layer pooling)."""
    head = head_of(model.config)
    if not (head.se or head.pooling == "weighted"):
        raise UserError(
            f"this model has no learned layer weights (layer pooling {head.pooling!r}, no SE); "
            "train with --se or --layer-pooling weighted"
        )


def layer_weights(model, tokenizer, texts, pairs=None, *, batch_size: int = 32, max_length: int = 128) -> dict:
    """The learned layer weights of a layer-pooling classifier, averaged over ``texts``.

    ``se``: the mean Squeeze-and-Excitation weight ``s_l`` per layer (input-dependent);
    ``mix``: the softmax weights of the ``weighted`` strategy (fixed after training).
    Raises ValueError for a model with neither (plain last-layer BERT).
    """
    check_layer_weights(model)
    head = head_of(model.config)
    se_sum, n, mix = None, 0, None
    for _, enc in encoded_batches(model, tokenizer, texts, pairs, batch_size=batch_size, max_length=max_length, desc="layer weights"):
        with torch.inference_mode():
            model(**enc)
        w = model.layer_weights()
        if "se" in w:
            s = w["se"].float().sum(0)
            se_sum = s if se_sum is None else se_sum + s
            n += w["se"].shape[0]
        if "mix" in w:
            mix = w["mix"].float()
    out = {"pooling": head.pooling, "se": head.se, "layers": int(model.config.num_hidden_layers), "n_texts": len(texts)}
    if se_sum is not None:
        out["se_mean"] = (se_sum / max(n, 1)).tolist()
    if mix is not None:
        out["mix"] = mix.tolist()
    return out


def plot_layer_weights(weights: dict, path: str | Path, title: str = "") -> Path:
    """Bar chart of the layer weights per layer (PNG or SVG), like SesameBERT's Figure 4."""
    plt = pyplot()
    path = figure_path(path, "plot")
    series = [(k, weights[k]) for k in ("se_mean", "mix") if k in weights]
    L = weights["layers"]
    x = np.arange(1, L + 1)
    fig, axes = plt.subplots(1, len(series), figsize=(4 * len(series), 3), squeeze=False)
    for ax, (k, v) in zip(axes.flat, series):
        bars = ax.bar(x, v, color="#4c72b0" if k == "se_mean" else "#55a868")
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
        ax.set_xticks(x)
        ax.set_xlabel("encoder layer")
        ax.set_ylabel("SE weight s_l (mean)" if k == "se_mean" else "mix weight (softmax)")
        ax.set_title(("Squeeze-and-Excitation" if k == "se_mean" else "weighted average") + f" ({weights['pooling']})", fontsize=9)
    if title:
        fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def plot_learned_lam(lams: list[list[float]], path: str | Path, start: float | None = None, title: str = "", name: str = "lam") -> Path:
    """Layer x head chart of a setting learned per head (``name``: lam, alpha; PNG or SVG), each cell labelled with its value."""
    plt = pyplot()
    path = figure_path(path, "plot")
    a = np.asarray(lams, dtype=float)  # [layers, heads]
    fig, ax = plt.subplots(figsize=(0.55 * a.shape[1] + 2.2, 0.45 * a.shape[0] + 1.4))
    im = ax.imshow(a, cmap="viridis", aspect="auto")
    for (i, j), v in np.ndenumerate(a):
        ax.text(j, i, f"{v:.1f}" if name == "lam" else f"{v:.2f}", ha="center", va="center", fontsize=6, color="white" if v < a.mean() else "black")
    ax.set_xticks(range(a.shape[1]), [str(h) for h in range(a.shape[1])])
    ax.set_yticks(range(a.shape[0]), [str(l) for l in range(a.shape[0])])
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    fig.colorbar(im, ax=ax, label=name + (f" (started at {start:g})" if start is not None else ""))
    if title:
        ax.set_title(title, fontsize=9)
    return save_figure(fig, path)


def plot_curves(history: list[dict], path: str | Path, metric: str = "accuracy", title: str = "", eval_name: str = "dev") -> Path:
    """A run's training loss (each logging step) and dev ``metric`` (each evaluation; ``eval_name``: what was
    evaluated) against the epoch, from the Trainer's ``log_history`` (kept in metrics.json), as PNG or SVG."""
    plt = pyplot()
    path = figure_path(path, "plot")
    loss = [(h["epoch"], h["loss"]) for h in history if "loss" in h and "epoch" in h]
    dev = [(h["epoch"], h[f"eval_{metric}"]) for h in history if f"eval_{metric}" in h and "epoch" in h]
    fig, ax = plt.subplots(figsize=(6.4, 3.8))
    if loss:
        ax.plot(*zip(*loss), color="C0", lw=1)
    ax.set_xlabel("epoch")
    ax.set_ylabel("training loss", color="C0")
    if dev:
        ax2 = ax.twinx()
        ax2.plot(*zip(*dev), "o--", color="C1")
        ax2.set_ylabel(f"{eval_name} {metric}", color="C1")
    if title:
        ax.set_title(title, fontsize=9)
    return save_figure(fig, path)


FIGURE_SUFFIXES = (".png", ".svg")


def figure_path(path: str | Path, what: str = "plot") -> Path:
    """``path`` as a Path, if it names a PNG or SVG file (checked before any drawing)."""
    return check_suffix(path, FIGURE_SUFFIXES, what)


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend: figures are written to files, no display is needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | Path) -> Path:
    """Lay out, write (PNG or SVG, by the suffix; folders made; atomically, marked as attnkit's so that a later run
    may replace it as a side file) and close a matplotlib figure."""
    import matplotlib.pyplot as plt

    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    key = "Software" if fmt == "png" else "Creator"
    metadata = {key: FIGURE_CREATOR}
    if fmt == "svg":  # no date, and ids from a fixed salt: the same figure is the same bytes (a report redrawn from
        metadata["Date"] = None  # its records, as `sweep --report-only`, leaves an unchanged SVG unchanged)
    try:
        fig.tight_layout()
        with atomic_path(path) as tmp, plt.rc_context({"svg.hashsalt": FIGURE_CREATOR}):
            fig.savefig(tmp, dpi=110, format=fmt, metadata=metadata)
    finally:
        plt.close(fig)
    return path


def plot_hans(report: dict[str, Any], path: str | Path, title: str = "") -> Path:
    """Grouped bars like SesameBERT's Figure 3: accuracy per heuristic, entailment vs non-entailment."""
    plt = pyplot()
    path = figure_path(path, "HANS plot")
    heur = list(report["heuristic"])
    x = np.arange(len(heur))
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for k, (name, color) in enumerate((("entailment", "#4c72b0"), ("non-entailment", "#dd8452"))):
        vals = [report["heuristic"][h].get(name, np.nan) * 100 for h in heur]
        bars = ax.bar(x + (k - 0.5) * 0.38, vals, 0.38, label=name, color=color)
        ax.bar_label(bars, fmt="%.0f", fontsize=8)
    ax.set_xticks(x, [h.replace("_", " ") for h in heur])
    ax.set_ylim(0, 105)
    ax.set_ylabel("accuracy (%)")
    ax.set_title(title or f"HANS (n={report['n']}, accuracy {report['accuracy'] * 100:.1f}%)", fontsize=9)
    ax.legend(fontsize=8, loc="upper right")
    return save_figure(fig, path)
