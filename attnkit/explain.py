"""Looking at attention: one sentence's weights as heatmaps, with sparsity statistics."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class AttentionMaps:
    """Attention of one sentence: ``weights[layer, head, query, key]`` over ``tokens``."""

    tokens: list[str]
    weights: np.ndarray  # [layers, heads, L, L]
    attention: str  # e.g. "sparsegen-lin (lam=-4)"

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
        }


def attention_maps(model, tokenizer, text: str, text_pair: str | None = None, max_length: int = 128) -> AttentionMaps:
    """Run ``model`` on one sentence and collect every layer's attention weights."""
    import torch

    from attnkit.attention import spec_of

    model.eval()
    enc = tokenizer(text, text_pair, truncation=True, max_length=max_length, return_tensors="pt")
    with torch.inference_mode():
        out = model(**enc, output_attentions=True)
    if not out.attentions:
        raise RuntimeError("the model returned no attention weights (does it support output_attentions?)")
    w = torch.stack([a[0].float() for a in out.attentions]).cpu().numpy()  # [layers, heads, L, L]
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    return AttentionMaps(tokens=list(tokens), weights=w, attention=spec_of(model.config).describe())


def plot_attention(maps: AttentionMaps, path: str | Path, layer: int | None = None, head: int | None = None) -> Path:
    """Heatmap(s) to ``path`` (PNG or SVG by extension).

    ``layer`` and ``head`` given: one map, tokens on both axes, each row's support size
    on the right. ``layer`` only: all heads of that layer. Neither: a grid of every
    layer x head. Exact zeros are drawn white.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg"):
        raise ValueError(f"heatmap file must end in .png or .svg, got {path.name!r}")
    n_layers, n_heads, L, _ = maps.weights.shape
    for name, v, n in (("layer", layer, n_layers), ("head", head, n_heads)):
        if v is not None and not 0 <= v < n:
            raise ValueError(f"{name} {v} out of range: the model has {n} {name}s (0..{n - 1})")
    cells = [(l, h) for l in ([layer] if layer is not None else range(n_layers)) for h in ([head] if head is not None else range(n_heads))]
    cmap = plt.get_cmap("viridis").with_extremes(under="white")
    sizes = maps.support_sizes()

    if len(cells) == 1:
        l, h = cells[0]
        side = max(4.0, 0.35 * L + 2)
        fig, ax = plt.subplots(figsize=(side + 1.5, side))
        w = maps.weights[l, h]
        im = ax.imshow(np.where(w > 0, w, -1), cmap=cmap, vmin=1e-9, vmax=max(w.max(), 1e-6))
        ax.set_xticks(range(L), maps.tokens, rotation=90)
        ax.set_yticks(range(L), maps.tokens)
        sec = ax.secondary_yaxis("right")
        sec.set_yticks(range(L), [f"|S|={int(s)}" for s in sizes[l, h]])
        ax.set_xlabel("attended token (key)")
        ax.set_ylabel("attending token (query)")
        ax.set_title(f"{maps.attention}: layer {l}, head {h}")
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
            ax.set_title(f"L{l} H{h} |S|={sizes[l, h].mean():.1f}", fontsize=7)
        fig.suptitle(f"{maps.attention}: {' '.join(maps.tokens)[:120]}\n|S| = mean support size per row; white = exact zero", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
