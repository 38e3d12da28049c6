"""Is sparse attention more interpretable? Faithfulness and plausibility of each attention map's explanations.

For each (task, method, seed) it takes the model of Table 2's run (``studies.common.run_cell``, same budget and run
folder as ``studies/ssaf``; a missing model is trained there again with the same settings — not always bit for bit the
same model, as the compiled kernel's rounding has changed between versions, so each record keeps the explained model's
test score beside the one Table 2 recorded), explains the first
``--max-examples`` test texts with ``attnkit.analysis.faithfulness`` (ERASER comprehensiveness / sufficiency AOPC of
the attention, rollout, received-attention, gradient and random rankings; Kendall's tau between attention and
gradients; on sst2-ptb the plausibility against SST's word labels) and appends one record per cell to ``--json`` at
once (a cell already there is skipped). The markdown table gives mean ± std over seeds and, paired by seed, each
sparse map minus softmax with a verdict.

    OMP_NUM_THREADS=1 python -m studies.faithfulness.faithfulness --tasks sst2-ptb --methods softmax SSAF entmax15 --data-dir ../shared/data
    OMP_NUM_THREADS=1 python -m studies.faithfulness.faithfulness --tasks semeval2013 --methods MiniSA MiniSSA MiniNTA --data-dir ../shared/data

MiniBERT's cells (``MiniSA``/``MiniSSA``/``MiniNTA``) take the models of :mod:`studies.faithfulness.minibert_models`
(MLM on the task's training text, then fine-tuned; 1 layer x 1 head, d = 32), trained there where missing; their paired
comparison is against MiniSA (the kind with every projection), since all three use softmax.

    python -m studies.faithfulness.faithfulness --render-only
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from attnkit.runfiles.atomic import write_text_atomic

from studies import figures
from studies import stats
from studies.common import ENTMAX_METHODS, TABLE2_RESULTS, TABLE2_SETTINGS, TASKS, run_cell, test_split
from studies.faithfulness import minibert_models, rationale

RESULTS = Path(__file__).resolve().parent / "results"
#: the records measured when tied words entered the top k by position (kept for the verdicts that moved)
POSITIONAL = RESULTS / "faithfulness_positional.json"
#: the rankings the table compares (random is the floor)
SHOWN = ("attention", "rollout", "received", "grad_x_input", "integrated_gradients", "random")
#: MiniBERT's attention kinds (``minibert_models``: MLM on the task's text, then fine-tuned; 1 layer x 1 head)
MINI = {"MiniSA": "sa", "MiniSSA": "ssa", "MiniNTA": "nta"}
#: what each method is compared with, paired by seed (MiniBERT's projections-free kinds against its full MiniSA)
BASELINE = {"MiniSSA": "MiniSA", "MiniNTA": "MiniSA"}


#: comparisons that answer another study's question, each its own Holm family (so that adding one does not change the
#: correction of the maps' family): 1.5-entmax in the last layer only is the recipe (studies/adapt); the one rule
#: of every study table (studies.stats.OWN_FAMILY)
OWN_FAMILY = stats.OWN_FAMILY


def family(task: str, base: str, ranking: str, measure: str, method: str) -> tuple:
    """The Holm family of one comparison: the maps compared with one baseline on one set, for each ranking and measure;
    a method of :data:`OWN_FAMILY` alone."""
    return stats.family_key((task, base, ranking, measure), method)


def baseline(method: str) -> str | None:
    if method in ("softmax", "MiniSA"):
        return None
    return BASELINE.get(method, "softmax")


def model_run(task: str, method: str, seed: int, a) -> Path:
    """The run folder of the cell's model; trained (Table 2's or MiniBERT's settings) where it has no model."""
    if method in MINI:
        mb = minibert_models.settings(data_dir=a.data_dir, work_dir=a.mini_work_dir)
        run = Path(mb.work_dir) / f"{task}__{MINI[method]}1x1__s{seed}__mlm"
        if not (run / "model" / "config.json").is_file():
            print(f"[faithfulness] {task} {method} seed {seed}: training MiniBERT in {run} (MiniBERT's first grid's settings)", flush=True)
            minibert_models.run_finetune(task, MINI[method], seed, "mlm", 1, 1, mb)
        return run
    run = Path(a.work_dir) / f"{task}__{method}__s{seed}"
    if not (run / "model" / "config.json").is_file():
        print(f"[faithfulness] {task} {method} seed {seed}: no model in {run}: training it (Table 2's settings)", flush=True)
        rec = run_cell(task, method, seed, a)
        if (task, method, seed) not in {(r["task"], r["method"], r["seed"]) for r in stats.read_records(Path(a.table2_json))}:
            stats.add_record(Path(a.table2_json), rec)
    return run


def model_scores(run: Path, task: str, method: str, seed: int, a) -> dict:
    """The explained model's test metric (its run's metrics.json) and, for Table 2's models, the one Table 2 recorded
    for that cell: they differ where the model was trained again on another kernel version."""
    m = json.loads((run / "metrics.json").read_text()) if (run / "metrics.json").is_file() else {}
    key = m.get("main_metric", "accuracy")
    out = {"model_test_metric": (m.get(test_split(task, m)) or {}).get(key)}
    if method not in MINI:
        rec = next((r for r in stats.read_records(Path(a.table2_json)) if (r["task"], r["method"], r["seed"]) == (task, method, seed)), None)
        out["table2_test_metric"] = rec.get("test_accuracy") if rec else None  # Table 2 scores accuracy
    return out


def faithfulness_cell(task: str, method: str, seed: int, a) -> dict:
    from attnkit.analysis.faithfulness import WordClassifier, faithfulness_report
    from attnkit.analysis.inference import load_for_inference
    from attnkit.tasks import load_task
    from attnkit.tasks.sst import sst_rationales

    run = model_run(task, method, seed, a)
    _, model, tok = load_for_inference(str(run))
    max_length = json.loads((run / "run_config.json").read_text())["max_length"]
    texts = list(load_task(task, a.data_dir).splits[test_split(task)]["text"])[: a.max_examples]
    rationales = [r for _, r in sst_rationales(a.data_dir, "test")][: a.max_examples] if task == "sst2-ptb" else None
    t0 = time.time()
    rep = faithfulness_report(WordClassifier(model, tok, max_length=max_length, ig_steps=a.ig_steps), texts, rationales=rationales, seed=seed,
                              tie_draws=a.tie_draws)
    return {"task": task, "method": method, "seed": seed, "run": str(run), "ig_steps": a.ig_steps, "max_length": max_length,
            **model_scores(run, task, method, seed, a), **rep,
            "seconds": round(time.time() - t0, 1), "torch_threads": int(os.environ.get("OMP_NUM_THREADS", "0")) or None,
            "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "provenance": stats.provenance(), "weights_sha256": stats.weights_sha256(run / "model")}


def top_words(scores: list[float], k: int, seed: int) -> list[int]:
    """The example's top-k words of one explanation: tied scores (a sparse map's zeros) in a seeded random order, as
    the faithfulness measures order them, not by position."""
    import numpy as np

    from attnkit.analysis.rationale import ranking

    return ranking(scores, np.random.default_rng(seed))[:k]


#: what the example figure draws (random is left out: it explains nothing)
EXAMPLE_ROWS = ("attention", "rollout", "received", "grad_x_input", "integrated_gradients")


def example(task: str, methods: list[str], seed: int, a, min_words: int = 8, max_words: int = 16) -> tuple[dict, str]:
    """One test sentence explained by each method's model (seed ``seed``), side by side: a figure (PNG + SVG) and a
    markdown table of the words each explanation ranks in its top 20%. The sentence is the first test sentence of
    ``min_words``..``max_words`` words that every model classifies correctly and that has at least one sentiment word
    (SST's word labels), so that plausibility shows."""
    import numpy as np

    from attnkit.analysis.explain import pyplot, save_figure
    from attnkit.analysis.faithfulness import WordClassifier, top_count
    from attnkit.analysis.inference import load_for_inference
    from attnkit.tasks import load_task
    from attnkit.tasks.sst import sst_rationales

    data = load_task(task, a.data_dir)
    test = data.splits["test"]
    rats = [r for _, r in sst_rationales(a.data_dir, "test")] if task == "sst2-ptb" else [None] * len(test)
    clfs = {}
    for m in methods:
        run = model_run(task, m, seed, a)
        _, model, tok = load_for_inference(str(run))
        clfs[m] = WordClassifier(model, tok, max_length=json.loads((run / "run_config.json").read_text())["max_length"],
                                 ig_steps=a.ig_steps)
    for i, (text, label) in enumerate(zip(test["text"], test["label"])):
        words = text.split()
        if not (min_words <= len(words) <= max_words) or (rats[i] is not None and not any(rats[i])):
            continue
        if all(int(c.probs([words])[0].argmax()) == label for c in clfs.values()):
            break
    else:
        raise SystemExit(f"no test sentence of {min_words}-{max_words} words that every model gets right")
    out = {"task": task, "seed": seed, "index": i, "text": text, "label": int(label), "sentiment_words": rats[i], "methods": {}}
    for m, c in clfs.items():
        _, scores = c.explain(words, np.random.default_rng(seed))
        out["methods"][m] = {e: [round(float(x), 5) for x in scores[e]] for e in EXAMPLE_ROWS}
    k = top_count(len(words), 20)

    def draw():
        plt = pyplot()
        fig, axes = plt.subplots(len(methods), 1, figsize=(max(7.0, 0.62 * len(words)), 0.4 + 1.9 * len(methods)), squeeze=False)
        for ax, m in zip(axes[:, 0], methods):
            grid = np.array([np.asarray(out["methods"][m][e]) for e in EXAMPLE_ROWS])
            grid = grid / np.maximum(np.abs(grid).max(1, keepdims=True), 1e-12)  # each row on its own scale
            ax.imshow(grid, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto")
            for r, e in enumerate(EXAMPLE_ROWS):
                for j in top_words(out["methods"][m][e], k, seed):
                    ax.add_patch(plt.Rectangle((j - 0.5, r - 0.5), 1, 1, fill=False, lw=1.6, ec="black"))
            ax.set_yticks(range(len(EXAMPLE_ROWS)), EXAMPLE_ROWS, fontsize=7)
            ax.set_xticks(range(len(words)), [w + (" *" if rats[i] and rats[i][j] else "") for j, w in enumerate(words)],
                          rotation=45, ha="right", fontsize=8)
            ax.set_title(f"{m} (seed {seed})", fontsize=9)
        fig.suptitle(f"{task} test sentence {i}\nboxes: each explanation's top 20% of the words (each row on its own scale)"
                     + ("; * SST's sentiment words" if rats[i] is not None else ""), fontsize=8)
        return fig

    stem = Path(a.example_out)
    for ext in (".png", ".svg"):
        save_figure(draw(), stem.with_suffix(ext))
    rows = ["| model | " + " | ".join(EXAMPLE_ROWS) + " |", "|---|" + "---|" * len(EXAMPLE_ROWS)]
    for m in methods:
        tops = [", ".join(words[j] for j in sorted(top_words(out["methods"][m][e], k, seed))) for e in EXAMPLE_ROWS]
        rows.append(f"| {m} | " + " | ".join(tops) + " |")
    sw = [w for w, r in zip(words, rats[i] or []) if r]
    md = (f"Test sentence {i} of {task} (label: {data.label_names[label]}): *{text}*  \n"
          + (f"SST's sentiment words: {', '.join(sw) or '—'}. " if rats[i] is not None else "")
          + f"Each explanation's top 20% ({k} words), seed {seed}:\n\n" + "\n".join(rows) + "\n")
    return out, md


def _ms(xs: list[float], scale: float = 100.0, digits: int = 1) -> str:
    xs = [scale * x for x in xs if x is not None]
    if not xs:
        return "—"
    return f"{statistics.mean(xs):.{digits}f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.{digits}f}"


def tie_note(recs: list[dict]) -> list[str]:
    """How the records ordered tied words: at random over seeded draws (``tie_draws`` in the record) or by position."""
    old = sum("tie_draws" not in r for r in recs)
    if not old:
        return [f"Tied words ordered at random, every erasure measure the mean over {sorted({r['tie_draws'] for r in recs})} "
                "seeded draws of the tie order (attnkit.analysis.faithfulness)."]
    return [f"**Ties broken by position**: {old} of {len(recs)} records were measured before issue 38, when words with equal",
            "scores (a sparse map's zeros) entered the top k leftmost first, so at larger k part of a sparse map's ranking is",
            "word order. Their models are not kept (runs/ is not committed): measured again, the tie-free measures and the",
            "share of top-k slots that ties decided replace these."]


def tie_section(by: dict) -> list[str]:
    """The share of top-k slots that ties decided, per model and ranking (records with ``tie_draws``)."""
    rows = []
    for (task, method), cell in sorted(by.items()):
        rs = [cell[s] for s in sorted(cell) if "tie_draws" in cell[s]]
        if rs:
            rows.append(f"| {task} | {method} | {','.join(str(r['seed']) for r in rs)} | "
                        + " | ".join(_ms([r["explanations"][e].get("tie_share") for r in rs]) for e in SHOWN) + " |")
    if not rows:
        return []
    return ["", "## Top-k slots decided by ties", "",
            "Share (%) of each ranking's top-k slots, over every k and text, taken by a word tied with a word left out",
            "(ordered at random, the measures averaged over the draws), mean ± std over seeds.", "",
            "| task | method | seeds | " + " | ".join(SHOWN) + " |", "|---|---|---|" + "---|" * len(SHOWN), *rows]


def by_cell(recs: list[dict]) -> dict:
    by: dict = {}
    for r in recs:
        by.setdefault((r["task"], r["method"]), {})[r["seed"]] = r
    return by


def paired_cells(by: dict) -> list[dict]:
    """Each method against its baseline (:func:`baseline`), same task and seeds, for the attention, rollout and
    received rankings: the per-seed differences in points, better positive (sufficiency: baseline − method)."""
    out = []
    for (task, method), cell in sorted(by.items()):
        base = baseline(method)
        soft = by.get((task, base), {})
        seeds = sorted(set(cell) & set(soft))
        if base is None or not seeds:
            continue
        for e in ("attention", "rollout", "received"):
            a = [cell[s]["explanations"][e] for s in seeds]
            b = [soft[s]["explanations"][e] for s in seeds]
            out.append({
                "task": task, "method": method, "base": base, "ranking": e, "seeds": seeds,
                "comp": [100 * (x["aopc_comprehensiveness"] - y["aopc_comprehensiveness"]) for x, y in zip(a, b)],
                "suff": [100 * (y["aopc_sufficiency"] - x["aopc_sufficiency"]) for x, y in zip(a, b)],
                "plaus": [100 * (x["plausibility_auprc"] - y["plausibility_auprc"]) for x, y in zip(a, b)
                          if x.get("plausibility_auprc") is not None and y.get("plausibility_auprc") is not None],
                "positional": any("tie_draws" not in c[s] for c in (cell, soft) for s in seeds),
            })
    return out


MEASURES = ("comp", "suff", "plaus")


def verdicts(by: dict) -> dict:
    """(task, method, ranking, measure) -> the paired test as the table calls it (Holm across the methods compared with
    one baseline on one set, for each ranking and measure)."""
    cells = [(c, m) for c in paired_cells(by) for m in MEASURES if c[m]]
    tests = stats.verdicts_by_family([c[m] for c, m in cells], [family(c["task"], c["base"], c["ranking"], m, c["method"]) for c, m in cells])
    return {(c["task"], c["method"], c["ranking"], m): (t, c["seeds"], c["positional"]) for (c, m), t in zip(cells, tests)}


def moved_section(by: dict, before: dict) -> list[str]:
    """The verdicts measured with positional ties (``faithfulness_positional.json``) beside the tie-free ones, for
    the comparisons whose records (method and baseline, every seed) are now all tie-free."""
    now, then = verdicts(by), verdicts(before)
    names = {"comp": "comprehensiveness", "suff": "sufficiency", "plaus": "plausibility"}

    def same_models(task: str, method: str, seeds: list[int]) -> str:
        """Whether the records explain the same models: their test metrics agree (positional records keep no weights hash)."""
        pairs = [(by[(task, m)][s].get("model_test_metric"), before.get((task, m), {}).get(s, {}).get("model_test_metric"))
                 for m in (method, baseline(method)) for s in seeds]
        return "same" if all(a is not None and b is not None and abs(a - b) < 1e-9 for a, b in pairs) else "trained again"

    rows = []
    for key, (t, seeds, positional) in now.items():  # paired_cells' order: task, method, ranking, measure
        if positional or key not in then:
            continue
        t0 = then[key][0]
        cell = lambda x: f"{x.mean:+.1f} (t={x.t:.1f}) {x.verdict}"  # noqa: E731
        rows.append(f"| {key[0]} | {key[1]} | {key[2]} | {names[key[3]]} | {same_models(key[0], key[1], seeds)} | {cell(t0)} | {cell(t)} "
                    f"| {'**moved**' if t0.verdict != t.verdict else 'same'} |")
    if not rows:
        return []
    return ["", "## Did a verdict move without positional ties?", "",
            "The same comparison (method − baseline, paired by seed, Holm as above) from the records measured when tied",
            "words entered the top k by position (`faithfulness_positional.json`, before issue 38) and from the tie-free",
            "records that replaced them; mean difference in points, t, verdict. Only comparisons whose records are now all",
            "tie-free are listed (each family's Holm correction counts the members measured so far). Models: \"same\" where",
            "every model of the pair has the test metric it had (the same model); \"trained again\" where one differs (the",
            "models were not kept and were trained again by a later attnkit), so a move there is not the ties' alone.", "",
            "| task | method | ranking | measure | models | ties by position | ties at random | verdict |",
            "|---|---|---|---|---|---|---|---|", *rows]


def render(recs: list[dict], before: list[dict] | None = None, rationale_recs: list[dict] | None = None) -> str:
    """The markdown table of ``recs``; ``before`` (the records measured with positional ties) adds the verdicts that
    moved once ties were broken at random; ``rationale_recs`` the attention support as a rationale
    (:mod:`studies.faithfulness.rationale`)."""
    by = by_cell(recs)
    before = by_cell(before) if before else {}
    lines = ["# Is sparse attention more faithful, or more plausible? (MiniLM, Table 2's runs)", "",
             "Made by `studies/faithfulness/faithfulness.py` (records: `faithfulness.json`). Per run: the first test texts (count in the",
             "table), words removed (ERASER), k = 1, 5, 10, 20, 50% of the words. Comprehensiveness AOPC (higher: the ranking",
             "found what the model uses) and sufficiency AOPC (lower: those words alone keep the prediction), in points of",
             "probability (× 100), mean ± std over seeds; plausibility: average precision (× 100) against SST's word labels.",
             f"Measured on (from the records): {stats.run_settings(recs)}.",
             *tie_note(recs),
             "", "| task | method | seeds | texts | ranking | comprehensiveness AOPC | sufficiency AOPC | plausibility AP |",
             "|---|---|---|---|---|---|---|---|"]
    order = ["softmax", "SSAF", *ENTMAX_METHODS, *MINI]
    for (task, method), cell in sorted(by.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1]) if kv[0][1] in order else len(order))):
        rs = [cell[s] for s in sorted(cell)]
        for e in SHOWN:
            rows = [r["explanations"][e] for r in rs]
            lines.append(f"| {task} | {method} | {','.join(map(str, sorted(cell)))} | {rs[0]['examples']} | {e} "
                         f"| {_ms([x['aopc_comprehensiveness'] for x in rows])} | {_ms([x['aopc_sufficiency'] for x in rows])} "
                         f"| {_ms([x.get('plausibility_auprc') for x in rows])} |")
    lines += ["", "## Sparse attention against softmax's, paired by seed", "",
              "The attention ranking of a sparse map minus softmax's attention ranking (MiniBERT: MiniSSA and MiniNTA minus",
              "MiniSA), same task and seed, in points: mean ± std of the differences [95% CI] (seeds better, t, p) and the verdict. Better",
              "is higher comprehensiveness, lower sufficiency, higher plausibility.",
              stats.rule_text(family="the methods compared with one baseline on one set, for each ranking and measure "
                                             f"({stats.OWN_FAMILY_TEXT})"),
              "MiniBERT's classifier averages the attention",
              "outputs over the tokens rather than reading [CLS], so its `received` ranking is the one its prediction uses.", "",
              "| task | method − baseline | ranking | comprehensiveness | verdict | sufficiency (baseline − method) | verdict | plausibility | verdict |",
              "|---|---|---|---|---|---|---|---|---|"]
    fam = stats.Family()
    positional = False
    for c in paired_cells(by):
        mark = " †" if c["positional"] else ""
        positional |= bool(mark)
        key = (c["task"], c["base"], c["ranking"])
        lines.append(f"| {c['task']} | {c['method']} − {c['base']} ({','.join(map(str, c['seeds']))}){mark} | {c['ranking']} | "
                     + " | ".join(fam.add(c[m], family(*key, m, c["method"])) for m in MEASURES) + " |")
    if positional:
        lines += ["", "† at least one of the pair's records ranks tied words by position (measured before issue 38)."]
    if before:
        lines += moved_section(by, before)
    lines += tie_section(by)
    taus = [(k, r["kendall_tau"]) for k, cell in sorted(by.items()) for r in cell.values()]
    if taus:
        lines += ["", "Kendall's tau between the rankings (mean over texts, then over seeds):", "",
                  "| task | method | " + " | ".join(next(iter(taus))[1]) + " |", "|---|---|" + "---|" * len(next(iter(taus))[1])]
        for (task, method), cell in sorted(by.items()):
            vals = {p: [r["kendall_tau"][p] for r in cell.values() if r["kendall_tau"][p] is not None] for p in next(iter(taus))[1]}
            lines.append(f"| {task} | {method} | " + " | ".join(_ms(v, 1, 2) if v else "—" for v in vals.values()) + " |")
    moved = [r for cell in by.values() for r in cell.values()
             if r.get("model_test_metric") is not None and r.get("table2_test_metric") is not None
             and abs(r["model_test_metric"] - r["table2_test_metric"]) > 1e-9]
    if moved:
        lines += ["", "Models trained again for this table that are not Table 2's model to the bit (the compiled kernel's",
                  "rounding changed in between): test metric (× 100) of the explained model and of Table 2's record.", "",
                  "| task | method | seed | explained model | Table 2 |", "|---|---|---|---|---|"]
        for r in sorted(moved, key=lambda r: (r["task"], r["method"], r["seed"])):
            lines.append(f"| {r['task']} | {r['method']} | {r['seed']} | {100 * r['model_test_metric']:.1f} | {100 * r['table2_test_metric']:.1f} |")
    return "\n".join(fam.fill(lines) + rationale.section(rationale_recs or [])) + "\n"


#: the frontier figure's panels and their titles (Table 2's models; MiniBERT's are not on one accuracy scale with them)
FRONTIER_TASKS = {"sst2-ptb": "SST-2 (sst2-ptb)", "sentube-auto": "SenTube-A"}


def frontier(recs: list[dict], stem: Path) -> list[Path]:
    """Test accuracy of the explained model against its attention's comprehensiveness, one point per (method, set),
    mean ± sd over seeds (studies/figures.py); hollow points: records measured with positional ties."""
    panels: dict[str, list[dict]] = {}
    for (task, method), cell in sorted(by_cell(recs).items()):
        rs = [r for r in cell.values() if r.get("model_test_metric") is not None]
        if task not in FRONTIER_TASKS or method in MINI or not rs:
            continue
        old = sum("tie_draws" not in r for r in rs)
        ex = [r["explanations"] for r in rs]
        panels.setdefault(FRONTIER_TASKS[task], []).append({
            "label": f"{method} ({len(rs)} seed{'s' * (len(rs) > 1)}{f', {old} with ties by position' if old else ''})",
            "softmax": method == "softmax", "hollow": bool(old), "acc": [100 * r["model_test_metric"] for r in rs],
            "com": [100 * e["attention"]["aopc_comprehensiveness"] for e in ex],
            "ig": [100 * e["integrated_gradients"]["aopc_comprehensiveness"] for e in ex]})
    panels = {FRONTIER_TASKS[t]: panels[FRONTIER_TASKS[t]] for t in FRONTIER_TASKS if FRONTIER_TASKS[t] in panels}
    return figures.frontier(panels, stem, "Accuracy against the faithfulness of the [CLS] attention (Table 2's models, mean ± sd over seeds)")


def keep_positional(path: Path, task: str, method: str, seed: int) -> None:
    """Before a cell measured with positional ties is measured again (``--remeasure``), its record goes into
    ``faithfulness_positional.json`` (where it is not there yet), so the before/after table keeps it."""
    old = [r for r in stats.read_records(path) if (r["task"], r["method"], r["seed"]) == (task, method, seed) and "tie_draws" not in r]
    if old and (task, method, seed) not in {(r["task"], r["method"], r["seed"]) for r in stats.read_records(POSITIONAL)}:
        stats.add_record(POSITIONAL, old[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["sst2-ptb", "sentube-auto"], choices=TASKS)
    ap.add_argument("--methods", nargs="+", default=["softmax", "SSAF", "entmax15"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--max-examples", type=int, default=300, help="first N test texts per run (default 300)")
    ap.add_argument("--ig-steps", type=int, default=20)
    ap.add_argument("--tie-draws", type=int, default=5, help="seeded draws of the order of tied words the erasure measures average over")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--work-dir", default="runs/ssaf_table2", help="Table 2's run folders (models are kept there)")
    ap.add_argument("--mini-work-dir", default="runs/bench_minibert", help="MiniBERT's run folders (studies/faithfulness/minibert_models.py)")
    ap.add_argument("--json", default=str(RESULTS / "faithfulness.json"))
    ap.add_argument("--md", default=str(RESULTS / "faithfulness.md"))
    ap.add_argument("--table2-json", default=str(TABLE2_RESULTS / "ssaf_table2.json"),
                    help="where a model trained again records its Table 2 cell, if it lacks one")
    ap.add_argument("--render-only", action="store_true")
    ap.add_argument("--remeasure", action="store_true",
                    help="measure again the cells recorded with ties ranked by position ( no tie_draws in the "
                         "record), training their model again where it is gone; the new record replaces the old")
    ap.add_argument("--rationale", action="store_true",
                    help="instead of the table's cells: the sparse methods' attention support as a rationale, beside softmax's "
                         "attention at the same lengths (records: rationale.json; studies/faithfulness/rationale.py)")
    ap.add_argument("--example", nargs="+", metavar="METHOD", default=None,
                    help="instead of the table: one test sentence explained by these methods' models side by side "
                         "(--seeds' first seed), a figure and a markdown table of the top words (e.g. --example softmax SSAF)")
    ap.add_argument("--example-out", default=str(RESULTS / "faithfulness_example"),
                    help="writes <this>.png, .svg, .json and .md")
    a = ap.parse_args()
    for k, v in TABLE2_SETTINGS.items():  # the Table 2 settings run_cell reads (lr, model, ...)
        if not hasattr(a, k):
            setattr(a, k, v)
    if a.example:
        rec, text = example(a.tasks[0], a.example, a.seeds[0], a)
        rec["provenance"] = stats.provenance()
        stem = Path(a.example_out)
        write_text_atomic(stem.with_suffix(".json"), json.dumps(rec, indent=1) + "\n")
        write_text_atomic(stem.with_suffix(".md"), text)
        print(text)
        return
    path, md = Path(a.json), Path(a.md)
    rat_path = path.with_name(rationale.RECORDS.name)

    def write_md():
        write_text_atomic(md, render(stats.read_records(path), stats.read_records(POSITIONAL), stats.read_records(rat_path)))

    if a.rationale and not a.render_only:
        for task in a.tasks:
            for seed in a.seeds:
                for method in [m for m in a.methods if baseline(m) == "softmax"]:
                    if (task, method, seed) in {(r["task"], r["method"], r["seed"]) for r in stats.read_records(rat_path)}:
                        continue
                    print(f"[faithfulness] rationale: {task} {method} seed {seed}", flush=True)
                    stats.add_record(rat_path, rationale.cell(task, method, seed, a, model_run))
                    write_md()
    elif not a.render_only:
        for task in a.tasks:
            for seed in a.seeds:
                for method in a.methods:
                    done = {(r["task"], r["method"], r["seed"]) for r in stats.read_records(path)
                            if not (a.remeasure and "tie_draws" not in r)}
                    if (task, method, seed) in done:
                        continue
                    print(f"[faithfulness] {task} {method} seed {seed}", flush=True)
                    keep_positional(path, task, method, seed)
                    stats.add_record(path, faithfulness_cell(task, method, seed, a))
                    write_md()
    write_md()
    frontier(stats.read_records(path), md.with_name("frontier"))
    print(md.read_text())


if __name__ == "__main__":
    sys.exit(main())
