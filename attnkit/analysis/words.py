"""Reading the attention over a dataset: the most-attended words per predicted class.

**Attention received by a word** in one sentence (the definition used throughout):

    received(j) = mean over layers l and heads h of  sum over real query tokens i of  A[l, h, i, j]

i.e. the column sum of the attention matrix over the real (non-padding) query rows, averaged over
layers and heads (so a 1x1 and a 2x1 model are on the same scale), then **summed over the word
pieces of a word** (pieces are grouped with the fast tokenizer's ``word_ids``; [CLS]/[SEP] are
left out of the ranking but do take part in the attention). Every row of A sums to 1, so the
received values of a sentence's n tokens sum to n: a word that gets its fair share under uniform
attention has received = 1 per piece, and received > 1 means it is attended more than uniform.

Over a split: each sentence is classified, and each word occurrence adds its ``received`` to its
lower-cased surface form under the **predicted** class. Words are ranked per class by the mean
received attention per occurrence, among words seen at least ``--min-count`` times in that class
(the total and the count are reported too). This is the paper's reading ("the model attends to
'puer' to call the tweet negative"), made systematic.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from attnkit.analysis.explain import figure_path, pyplot, save_figure
from attnkit.analysis.inference import encoded_batches
from attnkit.errors import UserError


def received_attention(model, tokenizer, texts, *, batch_size: int = 64, max_length: int = 128, progress: bool = True):
    """For each text: (words, received attention per word, predicted class id)."""
    import torch

    if not getattr(tokenizer, "is_fast", False):
        raise UserError("word ranking needs a fast tokenizer (word_ids and offsets)")
    out = []
    for s, inputs in encoded_batches(model, tokenizer, texts, batch_size=batch_size, max_length=max_length,
                                     progress=progress, desc="reading attention", return_offsets_mapping=True):
        batch = list(texts[s : s + batch_size])
        offsets = inputs.pop("offset_mapping").tolist()
        with torch.inference_mode():
            res = model(**inputs, output_attentions=True)
        if not res.attentions:
            raise RuntimeError("the model returned no attention weights (does it support output_attentions?)")
        A = torch.stack([a.float() for a in res.attentions])  # [nl, B, H, Lq, Lk]
        qmask = inputs["attention_mask"].to(A.dtype)[None, :, None, :, None]  # real query rows
        rec = (A * qmask).sum(3).mean(dim=(0, 2)).cpu().numpy()  # [B, Lk]: column sums, mean over layers & heads
        preds = res.logits.argmax(-1).tolist()
        for b, text in enumerate(batch):
            spans: dict[int, list] = {}
            for j, w in enumerate(inputs.word_ids(b)):
                if w is None:
                    continue
                st, en = offsets[b][j]
                cur = spans.setdefault(w, [st, en, 0.0])
                cur[0], cur[1] = min(cur[0], st), max(cur[1], en)
                cur[2] += float(rec[b, j])
            words = [text[st:en].lower() for st, en, _ in spans.values()]
            out.append((words, [r for _, _, r in spans.values()], preds[b]))
    return out


def rank_words(readings, label_names, *, top: int = 20, min_count: int = 3) -> dict:
    """Per predicted class: the ``top`` words by mean received attention (seen >= ``min_count`` times)."""
    acc = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
    n_pred = defaultdict(int)
    for words, rec, pred in readings:
        n_pred[pred] += 1
        for w, r in zip(words, rec):
            if w.strip():
                cell = acc[pred][w]
                cell[0] += r
                cell[1] += 1
    classes = {}
    for c, name in enumerate(label_names):
        rows = [{"word": w, "mean": t / n, "total": t, "count": n} for w, (t, n) in acc[c].items() if n >= min_count]
        rows.sort(key=lambda r: (-r["mean"], -r["count"], r["word"]))
        classes[name] = {"predicted_sentences": n_pred[c], "words": rows[:top]}
    if not any(r["words"] for r in classes.values()):  # a chart and a ranking of nothing would pass for a result
        most = max((n for per_class in acc.values() for _, n in per_class.values()), default=0)
        raise UserError(f"--min-count {min_count} leaves no word to rank: the most frequent word occurs {most} "
                         f"time{'s' if most != 1 else ''} under one predicted class; give a --min-count of at most "
                         f"{max(most, 1)} or more texts")
    return classes


def plot_words(ranking: dict, path, title: str = "") -> Path:
    """One horizontal bar chart per class (PNG or SVG by extension)."""
    plt = pyplot()
    path = figure_path(path)
    names = list(ranking)
    k = max([len(ranking[n]["words"]) for n in names] + [1])
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names) + 0.5, 0.28 * k + 1.6), squeeze=False)
    for ax, name in zip(axes[0], names):
        rows = ranking[name]["words"]
        ax.barh(range(len(rows)), [r["mean"] for r in rows], color="tab:blue")
        ax.set_yticks(range(len(rows)), [f"{r['word']} ({r['count']})" for r in rows], fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel("mean attention received", fontsize=8)
        ax.set_title(f"predicted {name} (n={ranking[name]['predicted_sentences']})", fontsize=9)
    fig.suptitle(title or "most-attended words per predicted class (occurrences in brackets)", fontsize=9)
    return save_figure(fig, path)
