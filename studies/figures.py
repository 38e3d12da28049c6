"""Figures more than one study draws."""

from __future__ import annotations

import statistics
from pathlib import Path


def frontier(panels: dict[str, list[dict]], stem: Path, title: str) -> list[Path]:
    """Accuracy against attention comprehensiveness, the choice a user has: one panel per set (``panels``: its title ->
    its points), one point per method, mean ± sd over seeds. A point is ``{"label", "acc", "com"}`` (per-seed values in
    points) with ``"softmax": True`` for the baseline (black, a dotted line at its accuracy, and its model's integrated
    gradients ``"ig"`` dashed) and ``"hollow": True`` to mark it apart. Writes ``stem``.png and .svg."""
    from attnkit.analysis.explain import pyplot, save_figure

    if not panels:
        return []
    sd = lambda xs: statistics.stdev(xs) if len(xs) > 1 else 0.0  # noqa: E731
    out = []
    for ext in ("png", "svg"):
        plt = pyplot()
        fig, axes = plt.subplots(1, len(panels), figsize=(5.6 * len(panels), 4.4 + 0.17 * max(len(p) + 1 for p in panels.values())), squeeze=False)
        for ax, (name, points) in zip(axes[0], panels.items()):
            for pt in points:
                soft = pt.get("softmax", False)
                ax.errorbar(statistics.fmean(pt["com"]), statistics.fmean(pt["acc"]), xerr=sd(pt["com"]), yerr=sd(pt["acc"]),
                            fmt="o", capsize=3, ms=7 if soft else 5, color="black" if soft else None,
                            mfc="white" if pt.get("hollow") else None, label=pt["label"])
                if soft:
                    ax.axhline(statistics.fmean(pt["acc"]), color="black", lw=0.6, ls=":")
                    ax.axvline(statistics.fmean(pt["ig"]), color="grey", lw=0.8, ls="--", label="integrated gradients (softmax model)")
            ax.set_xlabel("attention comprehensiveness (AOPC, points) →")
            ax.set_ylabel("test accuracy (%)")
            ax.set_title(name, fontsize=10)
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14))  # below the axes: never over a point
        fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        out.append(save_figure(fig, stem.with_suffix(f".{ext}")))
    return out
