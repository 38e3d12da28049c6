"""A sparse map's attention support as a hard rationale (ERASER's sense).

A sparse attention map gives most words exactly zero weight, so it chooses *how many* words matter, text by text:
the **rationale** of a text is the set of its words in the support of the last layer's [CLS] row (mean over heads;
a word counts when any of its pieces has a non-zero weight), and its length ``k`` is the model's own. ERASER measures
a hard rationale by

- **comprehensiveness** ``p(c | x) - p(c | x without the rationale)`` (higher: the model used those words),
- **sufficiency** ``p(c | x) - p(c | the rationale alone)`` (lower: they suffice),
- and, where people marked the words that carry the label (SST's word labels), **token F1** and **IOU** (intersection
  over union) of the rationale's words against the marked ones.

To say whether the support is a *good* rationale it is set beside other explanations' top ``k`` words at the same
length per text: gradient × input's, integrated gradients', a random ranking's — and, for a softmax model given a
sparse model's lengths (``lengths=``), softmax attention's top ``k``. Ties that fall across the cut are ordered at
random and averaged over draws, as the erasure measures at k% do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from attnkit.errors import UserError

#: the explanations measured at the rationale's length (a sparse model's ``attention`` at its own length is its support)
RATIONALE_EXPLANATIONS = ("attention", "grad_x_input", "integrated_gradients", "random")


def ranking(scores: Sequence[float], rng: np.random.Generator | None = None) -> list[int]:
    """Word indices from the highest score down. Tied words in a random order drawn from ``rng``; without one, the
    earlier word first (deterministic, and positional: use it only where there are no ties)."""
    if rng is None:
        return sorted(range(len(scores)), key=lambda i: (-scores[i], i))
    keys = rng.random(len(scores))
    return sorted(range(len(scores)), key=lambda i: (-scores[i], keys[i]))


def support_length(scores: Sequence[float]) -> int:
    """The words with a non-zero attention score: the length of a sparse map's rationale."""
    return int(np.count_nonzero(np.asarray(scores, dtype=float) > 0))


def erase(words: list[str], top: set[int]) -> tuple[list[str], list[str]]:
    """(the words without those at the positions ``top``, only those, in their order): a rationale removed and kept."""
    return [w for i, w in enumerate(words) if i not in top], [w for i, w in enumerate(words) if i in top]


def cut_is_tied(scores: Sequence[float], k: int) -> bool:
    """Whether the top ``k`` of ``scores`` is decided by a tie (the k-th and the (k+1)-th score are equal)."""
    s = np.sort(np.asarray(scores, dtype=float))[::-1]
    return 0 < k < len(s) and s[k - 1] == s[k]


def overlap(chosen: set[int], gold: Sequence[bool]) -> tuple[float, float] | None:
    """(token F1, IOU) of the chosen word positions against the marked ones; None where no word is marked."""
    marked = {i for i, g in enumerate(gold) if g}
    if not marked:
        return None
    both = len(chosen & marked)
    f1 = 2 * both / (len(chosen) + len(marked)) if chosen else 0.0
    return f1, both / len(chosen | marked)


def rationale_measures(predict: Callable[[list[list[str]]], np.ndarray], words: list[str], target: int,
                       explanations: dict[str, Sequence[float]], k: int, *, rng: np.random.Generator, tie_draws: int = 5,
                       gold: Sequence[bool] | None = None) -> dict[str, dict]:
    """Each explanation's top ``k`` words of one text as a hard rationale: comprehensiveness, sufficiency (and token
    F1 / IOU against ``gold``), averaged over ``tie_draws`` orders of tied words where a tie crosses the cut."""
    batch, spans, chosen = [words], {}, {}
    for name, scores in explanations.items():
        tied = cut_is_tied(scores, k)
        draws = max(1, tie_draws) if tied else 1
        spans[name] = (len(batch), draws, tied)
        chosen[name] = []
        for _ in range(draws):
            top = set(ranking(scores, rng)[:k])
            chosen[name].append(top)
            batch += erase(words, top)
    p = np.asarray(predict(batch))[:, target]
    out = {}
    for name, (s, draws, tied) in spans.items():
        block = (p[0] - p[s : s + 2 * draws]).reshape(draws, 2).mean(0)
        row = {"comprehensiveness": float(block[0]), "sufficiency": float(block[1]), "tied": tied}
        if gold is not None:
            scores = [overlap(top, gold) for top in chosen[name]]
            if scores[0] is not None:
                row["token_f1"] = float(np.mean([f for f, _ in scores]))
                row["iou"] = float(np.mean([u for _, u in scores]))
        out[name] = row
    return out


class RationaleTally:
    """The rationale measures of a report, text by text: the length each text's rationale takes and the means."""

    def __init__(self, lengths: Sequence[int | None] | None, own_support: bool, n_texts: int):
        if lengths is not None and len(lengths) != n_texts:
            raise UserError(f"rationale lengths for {len(lengths)} texts given for {n_texts} texts: they must come from "
                            "a report on the same texts")
        self.given, self.own = lengths, own_support
        self.lengths: list[int | None] = []
        self.rows: dict[str, list[dict]] = {e: [] for e in RATIONALE_EXPLANATIONS}
        self.shares: list[float] = []

    @property
    def active(self) -> bool:
        return self.given is not None or self.own

    def length(self, i: int, scores: dict[str, np.ndarray]) -> int | None:
        """Text ``i``'s rationale length: the given one, else its own support (None: nothing to measure)."""
        k = self.given[i] if self.given is not None else support_length(scores["attention"]) if self.own else None
        n = len(scores["attention"])
        if k and k > n:  # given lengths of other texts (attnkit faithfulness --rationale-lengths names its file)
            raise UserError(f"rationale length {k} for text {i + 1}, which has {n} words: the lengths are of other texts")
        return int(k) if k else None

    def add(self, i: int, predict, words, target, scores, *, rng, tie_draws, gold=None) -> None:
        k = self.length(i, scores) if self.active else None
        while len(self.lengths) < i:
            self.lengths.append(None)
        self.lengths.append(k)
        if k is None:
            return
        self.shares.append(k / len(words))
        m = rationale_measures(predict, words, target, {e: scores[e] for e in RATIONALE_EXPLANATIONS}, k, rng=rng,
                               tie_draws=tie_draws, gold=gold)
        for e in RATIONALE_EXPLANATIONS:
            self.rows[e].append(m[e])

    def report(self, n_texts: int) -> dict | None:
        if not self.active:
            return None
        lengths = self.lengths + [None] * (n_texts - len(self.lengths))
        used = [k for k in lengths if k is not None]
        out = {"lengths_from": "given" if self.given is not None else "own support", "texts": len(used),
               "mean_words": float(np.mean(used)) if used else None,
               "mean_share": float(np.mean(self.shares)) if self.shares else None, "lengths": lengths, "explanations": {}}
        for e, rows in self.rows.items():
            row = {"comprehensiveness": _mean(r["comprehensiveness"] for r in rows),
                   "sufficiency": _mean(r["sufficiency"] for r in rows),
                   "tie_share": _mean(float(r["tied"]) for r in rows)}
            gold = [r for r in rows if "token_f1" in r]
            if gold:
                row.update(token_f1=_mean(r["token_f1"] for r in gold), iou=_mean(r["iou"] for r in gold), gold_texts=len(gold))
            out["explanations"][e] = row
        return out


def _mean(xs) -> float | None:
    xs = list(xs)
    return float(np.mean(xs)) if xs else None
