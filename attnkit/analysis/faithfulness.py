"""Is an explanation faithful to the model? ERASER's measures for a classifier's word rankings.

For each example the classifier predicts a class ``c`` with probability ``p(c | x)``. Each explanation scores the
example's **words** (whitespace-separated; a word's score is the sum over its word pieces, grouped by the fast
tokenizer's ``word_ids``), and for each k in :data:`PERCENTS` its top ``ceil(k% * n)`` words (at least one) are

- **removed** (the words are deleted from the text, not masked, as ERASER does): comprehensiveness
  ``p(c | x) - p(c | x without them)`` — high when the explanation found what the model used;
- **kept alone** (in their order): sufficiency ``p(c | x) - p(c | only them)`` — low when they suffice.

AOPC is the mean over the k's (DeYoung et al. 2020). Explanations:

- ``attention``: the [CLS] row of the last layer's attention, averaged over heads (with ``--sparse-layers`` the last
  layer may keep softmax: the report's ``attention_layer`` says which layer and which map the explanation is);
- ``rollout``: attention rollout (Abnar & Zuidema 2020): per layer ``0.5 A + 0.5 I`` (A averaged over heads), rows
  renormalised, multiplied through the layers; the [CLS] row;
- ``received``: the attention a word receives (the column sum over real queries, averaged over layers and heads: the
  definition of ``attnkit words``);
- ``grad_x_input`` and ``integrated_gradients``: gradient × input and integrated gradients of ``p(c | x)`` with
  respect to the word embeddings (``captum``'s layer attributions, summed over the embedding dimension; the
  integrated-gradients baseline keeps [CLS]/[SEP] and puts [PAD] everywhere else);
- ``random``: a random ranking (seeded), the floor.

**Ties.** Sparse maps give many words exactly the same score (zero attention). Ranking them by position would make
part of a sparse map's "explanation" word order, not attention, so tied words are ordered at random: every
erasure measure is averaged over ``tie_draws`` seeded draws of the tie order (default 5; an explanation whose top-k
cuts never fall inside a group of tied words needs one), and each explanation reports ``tie_share``, the share of
its top-k slots (over every k and example) that a tie decided: slots taken by words tied with words left out.
Plausibility (average precision) and Kendall's tau-b treat ties as ties already.

Also reported: Kendall's tau between each attention explanation's word scores and each gradient method's, averaged
over examples (Jain & Wallace 2019); and, where the words that carry the label are known (SST's word-level labels:
:func:`attnkit.tasks.sst.sst_rationales`), **plausibility**: the average precision (area under the
precision-recall curve) of each explanation's ranking against them.

``ferret-xai`` implements these measures for Hugging Face classifiers, but pins ``transformers<5``, ``datasets<3``,
``numpy<2`` and ``captum<0.8`` (version 0.4.2), so the measures are written here on top of captum.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import torch
from captum.attr import LayerGradientXActivation, LayerIntegratedGradients
from scipy.stats import kendalltau
from sklearn.metrics import average_precision_score
from tqdm.auto import tqdm

from attnkit.analysis.explain import figure_path, pyplot, save_figure
from attnkit.analysis.rationale import RationaleTally, erase, ranking
from attnkit.attention.placement import attention_modules, sparse_layer_set
from attnkit.attention.spec import spec_of
from attnkit.errors import UserError
from attnkit.tasks.readers import texts_sha256

#: the k of "top k% of the words" at which the erasure measures are taken
PERCENTS = (1, 5, 10, 20, 50)
#: integrated gradients' steps run in batches of at most this many tokens (a 512-token text: 8 steps at once, not
#: all 20), so that a long text fits a small machine's memory; the attributions are the same
IG_TOKENS = 4096
ATTENTION_EXPLANATIONS = ("attention", "rollout", "received")
GRADIENT_EXPLANATIONS = ("grad_x_input", "integrated_gradients")
EXPLANATIONS = (*ATTENTION_EXPLANATIONS, *GRADIENT_EXPLANATIONS, "random")


def top_count(n_words: int, percent: float) -> int:
    """How many words "the top ``percent``%" of ``n_words`` is: ``ceil``, at least one, at most all."""
    return min(n_words, max(1, math.ceil(n_words * percent / 100)))


#: seeded draws of the order of tied words that the erasure measures are averaged over
TIE_DRAWS = 5


def tied_slots(scores: Sequence[float], percents=PERCENTS) -> tuple[int, int]:
    """(top-k slots that a tie decides, all top-k slots), summed over the k's: a slot is decided by a tie when its
    word's score equals the k-th highest score and some word with that score is left out of the top k."""
    s = np.asarray(scores, dtype=float)
    desc = np.sort(s)[::-1]
    tied = total = 0
    for pct in percents:
        k = top_count(len(s), pct)
        edge = desc[k - 1]
        inside, every = int(np.sum(desc[:k] == edge)), int(np.sum(s == edge))
        tied += inside if every > inside else 0
        total += k
    return tied, total


def erasure_texts(words: list[str], scores: Sequence[float], percents=PERCENTS,
                  rng: np.random.Generator | None = None) -> tuple[list[list[str]], list[list[str]]]:
    """For each k: (the words without their top k%, only the top k% in their order); ties ordered by ``rng``."""
    order = ranking(scores, rng)
    removed, kept = zip(*(erase(words, set(order[: top_count(len(words), pct)])) for pct in percents))
    return list(removed), list(kept)


def erasure_measures(predict: Callable[[list[list[str]]], np.ndarray], words: list[str], target: int,
                     explanations: dict[str, Sequence[float]], percents=PERCENTS, *,
                     rng: np.random.Generator | None = None, tie_draws: int = TIE_DRAWS) -> dict[str, dict[str, list[float]]]:
    """Comprehensiveness and sufficiency at each k of every explanation of one example.

    ``predict(list of word lists) -> probabilities [n, classes]``; ``target``: the predicted class of ``words``.
    Where a top-k cut falls inside a group of tied words, the measures are the mean over ``tie_draws`` random orders
    of the tied words drawn from ``rng`` (a fresh ``default_rng(0)`` if none); ``tied``/``slots`` per explanation
    count the top-k slots a tie decided (:func:`tied_slots`)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    batch: list[list[str]] = [words]
    spans = {}
    for name, scores in explanations.items():
        tied, slots = tied_slots(scores, percents)
        draws = max(1, tie_draws) if tied else 1
        spans[name] = (len(batch), draws, tied, slots)
        for _ in range(draws):
            removed, kept = erasure_texts(words, scores, percents, rng)
            batch += removed + kept
    p = np.asarray(predict(batch))[:, target]
    full, k = p[0], len(percents)
    out = {}
    for name, (s, draws, tied, slots) in spans.items():
        block = (full - p[s : s + 2 * k * draws]).reshape(draws, 2 * k).mean(0)
        out[name] = {"comprehensiveness": [float(x) for x in block[:k]], "sufficiency": [float(x) for x in block[k:]],
                     "tied": tied, "slots": slots, "draws": draws}
    return out


def kendall_tau(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Kendall's tau-b of two score lists (None when either is constant or has fewer than two words)."""
    if len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return None
    t = kendalltau(a, b).statistic
    return None if t is None or not math.isfinite(t) else float(t)


def average_precision(scores: Sequence[float], relevant: Sequence[bool]) -> float | None:
    """Average precision of a word ranking against the words marked relevant (None if none or all are)."""
    rel = np.asarray(relevant, dtype=bool)
    if rel.all() or not rel.any():
        return None
    return float(average_precision_score(rel, np.asarray(scores, dtype=float)))


# ----------------------------------------------------------------------------- a classifier's explanations


def attention_layer(model) -> dict:
    """Which layer's attention the ``attention`` explanation is (the last) and its map: the model's, or softmax where
    ``--sparse-layers`` leaves the last layer softmax. ``{"layer": 5, "map": "1.5-entmax", "sparse": True}``; None for a
    model without a transformers config."""
    if getattr(model, "config", None) is None:
        return None
    spec = spec_of(model.config)
    n = getattr(model.config, "num_hidden_layers", None) or len(attention_modules(model))
    sparse = spec.is_sparse and (spec.sparse_layers is None or n - 1 in sparse_layer_set(spec.sparse_layers, n))
    return {"layer": n - 1, "map": replace(spec, sparse_layers=None).describe() if sparse or not spec.is_sparse else "softmax",
            "sparse": bool(sparse)}


class WordClassifier:
    """A saved attnkit classifier read word by word: probabilities of word lists, and every explanation of one."""

    def __init__(self, model, tokenizer, *, max_length: int = 128, batch_size: int = 32, ig_steps: int = 20):
        if not getattr(tokenizer, "is_fast", False):
            raise UserError("explanations per word need a fast tokenizer (its word_ids group the word pieces)")
        self.model, self.tok = model.eval(), tokenizer
        self.max_length, self.batch_size, self.ig_steps = max_length, batch_size, ig_steps
        self.device = next(model.parameters()).device

    def encode(self, word_lists: list[list[str]]):
        return self.tok(word_lists, is_split_into_words=True, truncation=True, max_length=self.max_length,
                        padding=True, return_tensors="pt").to(self.device)

    def is_cut(self, words: list[str]) -> bool:
        """Whether ``words`` take more than ``max_length`` tokens ([CLS] and [SEP] included): :meth:`encode` cuts the
        rest off, so the model reads the text in part and the words past the cut score 0 in every explanation."""
        return len(self.tok(words, is_split_into_words=True, truncation=False, verbose=False)["input_ids"]) > self.max_length

    def probs(self, word_lists: list[list[str]]) -> np.ndarray:
        out = []
        for i in range(0, len(word_lists), self.batch_size):
            enc = self.encode(word_lists[i : i + self.batch_size])
            with torch.inference_mode():
                out.append(torch.softmax(self.model(**enc).logits.float(), -1).cpu().numpy())
        return np.concatenate(out)

    def _per_word(self, enc, token_scores: torch.Tensor, n_words: int) -> np.ndarray:
        """Token scores [L] summed over each word's pieces -> [n_words] (a word cut off by truncation scores 0)."""
        scores = np.zeros(n_words)
        for j, w in enumerate(enc.word_ids(0)):
            if w is not None:
                scores[w] += float(token_scores[j])
        return scores

    def explain(self, words: list[str], rng: np.random.Generator) -> tuple[int, dict[str, np.ndarray]]:
        """(predicted class, {explanation: a score per word}) of one example."""
        enc = self.encode([words])
        with torch.inference_mode():
            res = self.model(**enc, output_attentions=True)
        if not res.attentions:
            raise RuntimeError("the model returned no attention weights (does it support output_attentions?)")
        target = int(res.logits[0].argmax())
        att = torch.stack([a[0].float().mean(0) for a in res.attentions])  # [layers, L, L], averaged over heads
        L = att.shape[-1]
        eye = torch.eye(L, device=att.device)
        roll = eye
        for a in att:  # Abnar & Zuidema: residual as identity, rows renormalised, product through the layers
            a = 0.5 * a + 0.5 * eye
            roll = (a / a.sum(-1, keepdim=True)) @ roll
        received = torch.stack([a[0].float() for a in res.attentions]).sum(-2).mean(dim=(0, 1))  # [L]
        n = len(words)
        scores = {"attention": self._per_word(enc, att[-1, 0], n), "rollout": self._per_word(enc, roll[0], n),
                  "received": self._per_word(enc, received, n)}

        inputs = {k: v for k, v in enc.items() if k != "input_ids"}
        names = list(inputs)

        def prob(input_ids, *extra):
            out = self.model(input_ids=input_ids, **dict(zip(names, extra))).logits
            return torch.softmax(out.float(), -1)

        layer = self.model.get_input_embeddings()
        extra = tuple(inputs[k] for k in names)
        gxi = LayerGradientXActivation(prob, layer).attribute(enc["input_ids"], target=target, additional_forward_args=extra)
        special = torch.tensor(self.tok.get_special_tokens_mask(enc["input_ids"][0].tolist(), already_has_special_tokens=True),
                               dtype=torch.bool, device=self.device)
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        baseline = torch.where(special, enc["input_ids"][0], torch.full_like(enc["input_ids"][0], pad))[None]
        steps_at_once = max(1, min(self.ig_steps, IG_TOKENS // enc["input_ids"].shape[1]))  # long texts: fewer at once
        ig = LayerIntegratedGradients(prob, layer).attribute(enc["input_ids"], baselines=baseline, target=target,
                                                             additional_forward_args=extra, n_steps=self.ig_steps,
                                                             internal_batch_size=steps_at_once)
        scores["grad_x_input"] = self._per_word(enc, gxi[0].sum(-1).detach(), n)
        scores["integrated_gradients"] = self._per_word(enc, ig[0].sum(-1).detach(), n)
        scores["random"] = rng.permutation(n).astype(float)
        return target, scores


def faithfulness_report(clf: WordClassifier, texts: Sequence[str], *, rationales: Sequence[Sequence[bool]] | None = None,
                        seed: int = 0, progress: bool = True, percents=PERCENTS, tie_draws: int = TIE_DRAWS,
                        rationale_lengths: Sequence[int | None] | None = None, rationale_only: bool = False) -> dict:
    """Every measure of every explanation over ``texts`` (``rationales``: per text, per word, whether it carries the
    label; gives plausibility). Means over the examples; per-example values are not kept. Tied words are ordered at
    random, the erasure measures averaged over ``tie_draws`` seeded draws; ``tie_share`` per explanation: the share of
    its top-k slots that ties decided. ``max_length``: the tokens the model read of each text; ``texts_cut``: how many
    texts were longer and read in part (:meth:`WordClassifier.is_cut`). ``rationale``
    (:mod:`attnkit.analysis.rationale`): where the last layer's map is sparse, or ``rationale_lengths`` (a length per
    text, e.g. a sparse model's report's ``rationale.lengths``) are given, each explanation's top words at the
    rationale's length as a hard rationale; ``texts_sha256`` names the texts, so that lengths meet their texts.
    ``rationale_only``: that rationale alone (no measures at k%, no Kendall's tau, no plausibility; the same
    rationale numbers as the full report's, at a fraction of its forward passes)."""
    texts = list(texts)
    rng = np.random.default_rng(seed)
    lay = attention_layer(clf.model)
    tally = RationaleTally(rationale_lengths, bool(lay and lay["sparse"]), len(texts))
    rationale_rng = np.random.default_rng([seed, 39])  # its own stream: the other measures stay what they were
    tie_rng = np.random.default_rng([seed, 38])  # its own stream: the random ranking stays what it was
    tied = {e: [0, 0] for e in EXPLANATIONS}
    comp = {e: [] for e in EXPLANATIONS}
    suff = {e: [] for e in EXPLANATIONS}
    taus = {(a, g): [] for a in ATTENTION_EXPLANATIONS for g in GRADIENT_EXPLANATIONS}
    ap = {e: [] for e in EXPLANATIONS}
    used = cut = 0
    for i, text in enumerate(tqdm(texts, desc="explaining", unit="text", disable=not progress)):
        words = text.split()
        if not words:
            continue
        used += 1
        cut += clf.is_cut(words)
        target, scores = clf.explain(words, rng)
        tally.add(i, clf.probs, words, target, scores, rng=rationale_rng, tie_draws=tie_draws,
                  gold=rationales[i] if rationales is not None else None)
        if rationale_only:
            continue
        m = erasure_measures(clf.probs, words, target, scores, percents, rng=tie_rng, tie_draws=tie_draws)
        for e in EXPLANATIONS:
            comp[e].append(m[e]["comprehensiveness"])
            suff[e].append(m[e]["sufficiency"])
            tied[e][0] += m[e]["tied"]
            tied[e][1] += m[e]["slots"]
        for (a, g), ts in taus.items():
            t = kendall_tau(scores[a], scores[g])
            if t is not None:
                ts.append(t)
        if rationales is not None:
            for e in EXPLANATIONS:
                v = average_precision(scores[e], rationales[i])
                if v is not None:
                    ap[e].append(v)
    if not used:
        raise UserError("no example with words to explain")
    report = {"examples": used, "percents": list(percents), "tie_draws": tie_draws, "attention_layer": lay,
              "max_length": clf.max_length, "texts_cut": cut, "texts_sha256": texts_sha256(texts)}
    if rationale_only:
        return report | ({"rationale": tally.report(len(texts))} if tally.active else {})
    report["explanations"] = {}
    for e in EXPLANATIONS:
        c, s = np.asarray(comp[e]), np.asarray(suff[e])
        row = {"comprehensiveness": c.mean(0).tolist(), "sufficiency": s.mean(0).tolist(),
               "aopc_comprehensiveness": float(c.mean()), "aopc_sufficiency": float(s.mean()),
               "tie_share": tied[e][0] / tied[e][1] if tied[e][1] else 0.0}
        if rationales is not None:
            row["plausibility_auprc"] = float(np.mean(ap[e])) if ap[e] else None
            row["plausibility_examples"] = len(ap[e])
        report["explanations"][e] = row
    report["kendall_tau"] = {f"{a} vs {g}": (float(np.mean(ts)) if ts else None) for (a, g), ts in taus.items()}
    # the texts each mean is over: a text of one word, or one an explanation scores flat, has no rank correlation
    report["kendall_tau_texts"] = {f"{a} vs {g}": len(ts) for (a, g), ts in taus.items()}
    if tally.active:
        report["rationale"] = tally.report(len(texts))
    return report


def plot_faithfulness(report: dict, path, title: str = ""):
    """Comprehensiveness and sufficiency against k, one line per explanation (PNG or SVG)."""
    plt = pyplot()
    path = figure_path(path, "plot")
    ks = report["percents"]
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for name, row in report["explanations"].items():
        style = ":" if name == "random" else "-"
        axes[0].plot(ks, row["comprehensiveness"], style, marker="o", label=f"{name} (AOPC {row['aopc_comprehensiveness']:.3f})")
        axes[1].plot(ks, row["sufficiency"], style, marker="o", label=f"{name} (AOPC {row['aopc_sufficiency']:.3f})")
    for ax, what in zip(axes, ("comprehensiveness (higher: more faithful)", "sufficiency (lower: more faithful)")):
        ax.set_xscale("log")
        ax.set_xticks(ks, [f"{k}%" for k in ks])
        ax.set_xlabel("top k% of the words")
        ax.set_ylabel(what, fontsize=8)
        ax.axhline(0, color="#999", lw=0.5)
        ax.legend(fontsize=6)
    fig.suptitle(title or f"faithfulness over {report['examples']} examples", fontsize=9)
    return save_figure(fig, path)
