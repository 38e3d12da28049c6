"""A sparse map's attention support as a hard rationale (issue 49, item 4): the study's records and table section.

For each (task, sparse method, seed) it explains the first ``--max-examples`` test texts with the method's model
(Table 2's run) and measures its **rationale** — the words of the last layer's [CLS] support, as many as the model
chose for each text (:mod:`attnkit.analysis.rationale`) — by ERASER's comprehensiveness and sufficiency and, on
sst2-ptb, token F1 and IOU against SST's marked words; beside it, at the same length per text, the same model's
gradient × input, integrated gradients and random top words, and **softmax's attention** top words (the softmax model
of the same seed, given the sparse model's lengths). One record per cell in ``rationale.json`` (with both models'
weight digests: a model trained again is a new model); the section is rendered into ``faithfulness.md``.

    OMP_NUM_THREADS=1 python -m studies.faithfulness.faithfulness --rationale --tasks sentube-auto --methods entmax15-last --seeds 5 --data-dir ../shared/data
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import time
from pathlib import Path

from studies import stats
from studies.common import test_split

RESULTS = Path(__file__).resolve().parent / "results"
RECORDS = RESULTS / "rationale.json"
#: the rankings the rationale is set beside, at its length per text: (record part, explanation, label)
OTHERS = (("softmax_rationale", "attention", "softmax attention"), ("rationale", "grad_x_input", "gradient × input"),
          ("rationale", "integrated_gradients", "integrated gradients"), ("rationale", "random", "random"))


def test_metric(run: Path, task: str) -> dict:
    """The run's model's test metric (its metrics.json) and the length it was trained at."""
    m = json.loads((run / "metrics.json").read_text()) if (run / "metrics.json").is_file() else {}
    return {"model_test_metric": (m.get(test_split(task, m)) or {}).get(m.get("main_metric", "accuracy")),
            "max_length": json.loads((run / "run_config.json").read_text())["max_length"]}


def measure(run: Path, soft_run: Path, task: str, seed: int, a) -> dict:
    """The rationale of ``run``'s model on the task's first test texts, and ``soft_run``'s at its lengths."""
    from attnkit.analysis.faithfulness import WordClassifier, faithfulness_report
    from attnkit.analysis.inference import load_for_inference
    from attnkit.tasks import load_task
    from attnkit.tasks.sst import sst_rationales

    texts = list(load_task(task, a.data_dir).splits[test_split(task)]["text"])[: a.max_examples]
    gold = [r for _, r in sst_rationales(a.data_dir, "test")][: a.max_examples] if task == "sst2-ptb" else None
    out = {}
    lengths = None
    for part, folder in (("rationale", run), ("softmax_rationale", soft_run)):
        _, model, tok = load_for_inference(str(folder))
        info = test_metric(folder, task)
        clf = WordClassifier(model, tok, max_length=info["max_length"], ig_steps=a.ig_steps)
        rep = faithfulness_report(clf, texts, rationales=gold, seed=seed, tie_draws=a.tie_draws,
                                  rationale_lengths=lengths, progress=False, rationale_only=True)
        if "rationale" not in rep:
            raise SystemExit(f"{folder}: its last layer's attention is not sparse: it has no support to measure")
        out[part] = rep["rationale"]
        out[f"{part}_model"] = {"run": str(folder), "weights_sha256": stats.weights_sha256(folder / "model"), **info}
        lengths = rep["rationale"]["lengths"]
        out["examples"], out["texts_sha256"] = rep["examples"], rep["texts_sha256"]
    return out


def cell(task: str, method: str, seed: int, a, model_run) -> dict:
    """One record: the sparse method's rationale and softmax's attention at its lengths (same seed); ``model_run``
    gives a cell's run folder (training Table 2's model where it is gone)."""
    t0 = time.time()
    rec = measure(model_run(task, method, seed, a), model_run(task, "softmax", seed, a), task, seed, a)
    return {"task": task, "method": method, "seed": seed, "ig_steps": a.ig_steps, "tie_draws": a.tie_draws, **rec, "seconds": round(time.time() - t0, 1),
            "torch_threads": int(os.environ.get("OMP_NUM_THREADS", "0")) or None,
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores", "provenance": stats.provenance()}


def _ms(xs: list, scale: float = 100.0) -> str:
    xs = [scale * x for x in xs if x is not None]
    return stats.mean_sd(xs) if xs else "—"


def section(recs: list[dict]) -> list[str]:
    """The markdown lines of the rationale section (none without records)."""
    if not recs:
        return []
    by: dict = {}
    for r in recs:
        by.setdefault((r["task"], r["method"]), {})[r["seed"]] = r
    lines = ["", "## Attention support as a rationale (issue 49)", "",
             "A sparse last layer chooses how many words matter: the words its [CLS] row (mean over heads) gives a non-zero",
             "weight, as many per text as the model chose. Taken as a hard rationale (ERASER): comprehensiveness (higher: the",
             "model used those words) and sufficiency (lower: they suffice) in points of probability, and on sst2-ptb token F1 and",
             "IOU (× 100) against SST's marked words; beside it, at the same length per text, the same model's gradient × input,",
             "integrated gradients and random top words, and the softmax model's (same seed) attention top words.",
             f"Measured on (from the records): {stats.run_settings(recs)}.", "",
             "| task | method | seeds | texts | words per text (share) | ranking at that length | comprehensiveness | sufficiency | token F1 | IOU |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    fam = stats.Family()
    paired_rows = []
    for (task, method), cell_ in sorted(by.items()):
        rs = [cell_[s] for s in sorted(cell_)]
        seeds = ",".join(map(str, sorted(cell_)))
        words = f"{stats.mean_sd([r['rationale']['mean_words'] for r in rs])} ({_ms([r['rationale']['mean_share'] for r in rs])}%)"
        for part, e, label in (("rationale", "attention", f"{method} support"), *OTHERS):
            rows = [r[part]["explanations"][e] for r in rs]
            lines.append(f"| {task} | {method} | {seeds} | {rs[0]['examples']} | {words} | {label} "
                         f"| {_ms([x['comprehensiveness'] for x in rows])} | {_ms([x['sufficiency'] for x in rows])} "
                         f"| {_ms([x.get('token_f1') for x in rows])} | {_ms([x.get('iou') for x in rows])} |")
        own = [r["rationale"]["explanations"]["attention"] for r in rs]
        for part, e, label in OTHERS[:3]:
            other = [r[part]["explanations"][e] for r in rs]
            comp = [100 * (x["comprehensiveness"] - y["comprehensiveness"]) for x, y in zip(own, other)]
            suff = [100 * (y["sufficiency"] - x["sufficiency"]) for x, y in zip(own, other)]
            f1 = [100 * (x["token_f1"] - y["token_f1"]) for x, y in zip(own, other) if "token_f1" in x and "token_f1" in y]
            key = stats.family_key(("rationale", task), method)
            paired_rows.append(f"| {task} | {method} support − {label} ({seeds}) | {fam.add(comp, (*key, 'comp'))} "
                               f"| {fam.add(suff, (*key, 'suff'))} | {fam.add(f1, (*key, 'f1'))} |")
    lines += ["", "The support minus each other ranking at the same length, paired by seed, in points: mean ± std [95% CI]",
              "(seeds better, t, p) and the verdict; better is higher comprehensiveness, lower sufficiency (shown as other −",
              "support), higher token F1. " + stats.rule_text(family="the three rankings compared with one method's support on one set, "
                                                                   "for each measure"), "",
              "| task | comparison (seeds) | comprehensiveness | verdict | sufficiency (other − support) | verdict | token F1 | verdict |",
              "|---|---|---|---|---|---|---|---|", *paired_rows]
    return fam.fill(lines)
