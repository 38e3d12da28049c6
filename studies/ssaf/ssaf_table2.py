"""SSAF Table 2 at the paper's budget: softmax against sparsegen-lin fine-tuning of MiniLM, over seeds.

Every cell is a real training run (``attnkit.training.finetune.train``, in-process) on the whole train split with the
paper's settings (METHODS.md §1: Adam lr 2e-5, batch 16, 5 / 6 / 8 epochs on SenTube-A / SenTube-T /
SemEval-2013, the paper's lam per task), the test accuracy taken from the best-dev checkpoint. Each finished
cell is appended to ``--json`` at once (a locked read-modify-write, so several workers may share it) and the
markdown table with paired differences and verdicts is re-rendered, so an interrupted table resumes where it
stopped: a cell already in the json is skipped, a cell whose run folder holds checkpoints resumes from them.

    # one worker per task, one torch thread each (2 cores: two workers at most)
    OMP_NUM_THREADS=1 python -m studies.ssaf.ssaf_table2 --tasks sentube-auto --data-dir ../shared/data
    python -m studies.ssaf.ssaf_table2 --render-only       # the table from the json alone

Methods: ``softmax``, ``SSAF`` (sparsegen-lin at the paper's lam), ``Np`` / ``SSAF(Np)`` (the same from random
weights, at ``--np-epochs``/``--np-lr`` with warm-up), and the remedies (``SSAF+learned-lam``: lam
learned per layer and head; ``SSAF+lam-warmup``: lam starts 4x denser and reaches the target after the first
10% of the steps; the learning rate has no warm-up, as in the softmax and SSAF rows; ``SSAF+learned-lam-fast``: lam
learned per layer and head on its own learning rate, ``--lam-lr 1e-3``), and the entmax maps
(``entmax15``: 1.5-entmax; ``entmax15+alpha-warmup``: alpha starts at 1, softmax, and reaches 1.5 after the first
10% of the steps; ``alpha-entmax-learned``: alpha learned per layer and head from 1.5 on its own learning rate,
``--alpha-lr 1e-3``). Every record also holds the mean non-zeros per attention row of the trained model on the
first 256 dev texts, so that accuracy and sparsity stand side by side.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from attnkit.runfiles.atomic import write_text_atomic
from studies.common import (  # noqa: F401  (Table 2's runs, shared with studies/faithfulness)
    ALPHA_LR,
    ALPHA_WARMUP,
    BUDGETS,
    ENTMAX_METHODS,
    GLUE_BUDGET,
    GLUE_HOLDOUT,
    GLUE_SETS,
    LAM_LR,
    SPARSE_LAYERS,
    SUBSET,
    SUPPORT_TEXTS,
    TABLE2_RESULTS,
    TABLE2_SETTINGS,
    TASKS,
    budget_of,
    curves,
    dev_support,
    machine,
    method_settings,
    run_cell,
)
from studies.stats import (  # noqa: F401  (the shared record, pairing and verdict code)
    OWN_FAMILY,
    OWN_FAMILY_TEXT,
    Family,
    add_record,
    family_key,
    format_paired,
    locked,
    mean_sd,
    paired,
    paired_test,
    provenance,
    read_records,
    rule_text,
    run_settings,
    verdict,
    verdicts_by_family,
    weights_sha256,
    write_records,
)

RESULTS = TABLE2_RESULTS
#: the SSAF paper's reported accuracy (BERT-base), softmax -> SSAF, as restated in ../shared/METHODS.md §1
PAPER_TABLE = {"sentube-auto": (70.3, 72.4), "sentube-tablets": (73.3, 75.0), "semeval2013": (76.2, 77.3),
               "sst2-ptb": (93.5, 94.7), "sst5-phrases": (55.2, 56.2)}
#: the same for Np -> SSAF(Np) (random init)
PAPER_NP = {"sentube-auto": (66.8, 68.1), "sst2-ptb": (85.2, 86.4)}


def truncated_share(task: str, data_dir: str | None, max_length: int) -> float:
    from attnkit.models.checkpoint import load_tokenizer
    from attnkit.tasks import load_task

    texts = list(load_task(task, data_dir).splits["train"]["text"])
    ids = load_tokenizer("minilm")(texts, truncation=False)["input_ids"]
    return sum(len(x) > max_length for x in ids) / len(ids)


def fill_from_runs(path: Path, work_dir: Path) -> list[str]:
    """Add what older records lack (test macro-F1, curves) from their run folders where those are still there."""
    filled = []
    with locked(path):
        recs = read_records(path)
        for r in recs:
            run = work_dir / f"{r['task']}__{r['method']}__s{r['seed']}"
            metrics = run / "metrics.json"
            if not metrics.is_file():
                continue
            m = json.loads(metrics.read_text())
            if abs(m["test"]["accuracy"] - r["test_accuracy"]) > 1e-9:  # another run in that folder now
                continue
            before = dict(r)
            if r.get("test_macro_f1") is None and "macro_f1" in m["test"]:
                r["test_macro_f1"] = m["test"]["macro_f1"]
            if not r.get("dev_curve"):
                r.update(curves(run))
            if r != before:
                filled.append(run.name)
        if filled:
            write_records(path, recs)
    return filled


# ----------------------------------------------------------------------------- rendering


#: the header line of every table here that reads a family of comparisons
FAMILY_RULE = rule_text(family="the methods compared with one baseline on one set within a section (the pooled rows "
                        f"and SSAF(Np) − Np stand alone; {OWN_FAMILY_TEXT})")


def sparse_nonzeros(r: dict) -> float:
    """Mean non-zeros per attention row on dev over the layers the record's map made sparse (all, where it says none;
    the sparse layers' mean, where ``sparse_layers`` names some: the softmax layers' rows are dense)."""
    layers = r.get("dev_nonzeros_per_layer")
    if not r.get("sparse_layers") or not layers:
        return r["dev_nonzeros_per_row"]
    from attnkit.attention.placement import sparse_layer_set

    return statistics.mean(layers[i] for i in sorted(sparse_layer_set(r["sparse_layers"], len(layers))))


def entmax_section(by: dict, tasks: list[str], fam: Family) -> list[str]:
    """Markdown lines: each sparse map against softmax and against SSAF, paired by seed, with its sparsity on dev."""
    rows = []
    pooled = {meth: ([], [], set()) for meth in ENTMAX_METHODS}  # meth -> (− softmax pairs, − SSAF pairs, sets)
    for t in tasks:
        soft, ssaf = by.get((t, "softmax"), {}), by.get((t, "SSAF"), {})
        for meth in ENTMAX_METHODS:
            cell = by.get((t, meth), {})
            if not cell:
                continue
            rs = [cell[s] for s in sorted(cell)]
            nz = [sparse_nonzeros(r) for r in rs if "dev_nonzeros_per_row" in r]
            length = [r["dev_mean_length"] for r in rs if "dev_mean_length" in r]
            sl = rs[0].get("sparse_layers")
            where = "" if not sl else " (last layer only)" if sl == "last" else f" (layer{'s' * any(c in sl for c in ',-')} {sl} only)"
            vs_soft = [100 * (cell[s]["test_accuracy"] - soft[s]["test_accuracy"]) for s in sorted(set(cell) & set(soft))]
            vs_ssaf = [100 * (cell[s]["test_accuracy"] - ssaf[s]["test_accuracy"]) for s in sorted(set(cell) & set(ssaf))]
            if t in TASKS:  # the papers' budget only: a set at attnkit train's defaults answers another question
                pooled[meth][0].extend(vs_soft)
                pooled[meth][1].extend(vs_ssaf)
                pooled[meth][2].add(t)
            alpha = ""
            if "alpha_learned" in rs[0]:
                flat = [a for r in rs for row in r["alpha_learned"] for a in row]
                alpha = f" (learned alpha {min(flat):.2f}–{max(flat):.2f})"
            rows.append(
                f"| {t} | {meth}{alpha} | {','.join(map(str, sorted(cell)))} | {mean_sd([100 * r['test_accuracy'] for r in rs])} "
                f"| {statistics.mean(nz):.2f} of {statistics.mean(length):.1f}{where} |" if nz else f"| {t} | {meth}{alpha} | {','.join(map(str, sorted(cell)))} | {mean_sd([100 * r['test_accuracy'] for r in rs])} | — |"
            )
            rows[-1] += (f" {fam.add(vs_soft, family_key(('entmax − softmax', t), meth))} "
                         f"| {fam.add(vs_ssaf, family_key(('entmax − SSAF', t), meth))} |")
    if not rows:
        return []
    for meth, (vs_soft, vs_ssaf, sets) in pooled.items():  # every (set, seed) pair as one sample, as SSAF's pooled row
        if len(sets) > 1:
            rows.append(f"| all {len(sets)} sets pooled | {meth} | {len(vs_soft)} pairs | — | — | {fam.add(vs_soft)} | {fam.add(vs_ssaf)} |")
    return ["", "## The entmax family against softmax and SSAF (issue 24)", "",
            "Test accuracy in % (mean ± std over seeds); the mean non-zero weights per attention row of the trained model on",
            "the first 256 dev texts (every layer, head and real query token) against the mean tokens per text (softmax's",
            "rows are dense: every real token); paired differences on the same seeds in points: mean ± std [95% CI] (seeds won,",
            "t, p), with the verdict of the paired test above, Holm's correction across the entmax methods on one set against",
            f"one baseline ({OWN_FAMILY_TEXT}; the pooled rows stand alone and pool the sets at the papers' budgets only).", "",
            "| task | method | seeds | test | non-zeros per row (dev) | − softmax | verdict | − SSAF | verdict |",
            "|---|---|---|---|---|---|---|---|---|", *rows]


#: GLUE's own metric of a set, as a record keeps it (``test_<metric>``) and as the table names it
GLUE_METRIC = {"test_mcc": "MCC", "test_f1": "F1"}


def task_metric(rs: list[dict]) -> str:
    """The test macro-F1 cell: mean ± std where every seed's record has it; for a GLUE set its own metric, named
    (CoLA's MCC: 0 is a model that answers one class); "—" where a record lacks it."""
    for key, name in GLUE_METRIC.items():
        vals = [r.get(key) for r in rs]
        if any(v is not None for v in vals):
            return f"{name} {mean_sd([100 * v for v in vals])}" if None not in vals else "—"
    f1s = [r.get("test_macro_f1") for r in rs]
    return mean_sd([100 * x for x in f1s]) if None not in f1s else "—"  # records without test_macro_f1 show —


def set_label(r: dict) -> str:
    """The row label of a record's set: the task, with the budget where it is not the papers'."""
    return r["task"] if budget_of(r) == "paper" else f"{r['task']} ({budget_of(r)})"


def render(recs: list[dict], trunc: dict[str, float]) -> str:
    by = {}
    for r in recs:
        by.setdefault((set_label(r), r["method"]), {})[r["seed"]] = r
    labels = [t if b == "paper" else f"{t} ({b})" for t in TASKS for b in BUDGETS]
    tasks = [t for t in labels if any(k[0] == t for k in by)]
    methods_order = ["softmax", "SSAF", "SSAF+learned-lam", "SSAF+learned-lam-fast", "SSAF+lam-warmup", "Np", "SSAF(Np)", *ENTMAX_METHODS]
    sparse = [m for m in methods_order if m.startswith("SSAF") and "Np" not in m]
    fam = Family()
    lines = [
        "# SSAF Table 2 at the paper's budget (MiniLM)",
        "",
        "Made by `studies/ssaf/ssaf_table2.py` (records: `ssaf_table2.json`, one per task × method × seed). Every run: the",
        "bundled all-MiniLM-L6-v2 (6 layers, hidden 384, 12 heads of size 32), the whole train split (SST-1: a random",
        "subset of its phrases drawn with the run's seed, size in the table; SST-2: `sst2-ptb`, the binary sentences of",
        "the SST trees, whose test set is labelled unlike GLUE's), Adam (AdamW, weight",
        "decay 0) lr 2e-5, batch 16, the paper's epochs, max length 128, length-grouped batches, test accuracy of the",
        f"best-dev checkpoint. Trained on (from the records): {run_settings(recs)}. Accuracy in %, mean ± std over seeds.",
        "Remedies: SSAF+learned-lam (lam per layer and head, learned at the weights' lr), SSAF+learned-lam-fast (the same,",
        f"lam on its own lr {LAM_LR:g}), SSAF+lam-warmup (lam 4x denser at first, the target after 10% of the steps).",
        "Np / SSAF(Np): the same architecture from random weights, at the epochs and lr in the table with 10% warm-up.",
        "Test macro-F1 where every seed's record has it (always answering the majority class scores 36.0 on SenTube-A's test set);",
        "on a GLUE set its own metric instead, named (CoLA's MCC is 0 for a model that answers one class, MRPC's F1 is the positive class's).",
        "Sets the recipe (entmax15-last) was not chosen on: SenTube-T and SST-5's sentences (`sst5`) as above; the GLUE tasks",
        f"{', '.join(GLUE_SETS)} at SesameBERT's budget ({GLUE_BUDGET['epochs']} epochs, batch {GLUE_BUDGET['batch_size']}, lr {GLUE_BUDGET['lr']:.0e}, length-grouped batches), the",
        f"checkpoint chosen on a seeded {100 * GLUE_HOLDOUT:g}% of the training split held out (\"dev\"), GLUE's dev set untouched",
        "until the end (\"test\": GLUE's test labels are hidden). A set marked (defaults) ran at `attnkit train`'s defaults:",
        "the SSAF paper's epochs on its sets, else 1 epoch; batch 16, lr 2e-5, no length grouping, nothing held out, so",
        "on GLUE the dev set scores the last epoch's model and is dev and test at once.",
        "",
        "| task | method | lam | epochs | lr | train size | seeds | dev | test | test macro-F1 (GLUE: its metric) | train min/run |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in tasks:
        for meth in methods_order:
            cell = by.get((t, meth))
            if not cell:
                continue
            rs = [cell[s] for s in sorted(cell)]
            r0 = rs[0]
            lam = f"{r0['lam']:g}" if r0["lam"] is not None and r0.get("attention", "sparsegen-lin") == "sparsegen-lin" else "—"
            f1 = task_metric(rs)
            lines.append(
                f"| {t} | {meth} | {lam} | {r0['epochs']:g} | {r0['lr']:g} | {r0['train_size']} | {','.join(map(str, sorted(cell)))} "
                f"| {mean_sd([100 * r['dev_accuracy'] for r in rs])} | {mean_sd([100 * r['test_accuracy'] for r in rs])} "
                f"| {f1} | {statistics.mean(r['train_seconds'] for r in rs) / 60:.1f} |"
            )
    lines += [
        "",
        "## Paired differences and verdicts",
        "",
        "Test accuracy of a method minus softmax's on the same seed (same data order and head initialisation), in points,",
        "against the paper's claim that SSAF beats softmax: mean ± std of the differences [95% CI] (seeds won, t, p) and the verdict.",
        FAMILY_RULE,
        "The pooled row is a simple pool: every (set, seed) pair of the sets above as one sample, each pair weighing the same.",
        "",
        "| task | method | paper (BERT-base, METHODS.md): softmax → SSAF | paired diff (test): mean ± std [95% CI] (seeds won, t, p) | verdict |",
        "|---|---|---|---|---|",
    ]
    for t in tasks:
        soft = by.get((t, "softmax"), {})
        for meth in sparse:
            cell = by.get((t, meth), {})
            seeds = sorted(set(soft) & set(cell))
            if not seeds:
                continue
            d = [100 * (cell[s]["test_accuracy"] - soft[s]["test_accuracy"]) for s in seeds]
            p = PAPER_TABLE.get(t)
            ptxt = f"{p[0]} → {p[1]} ({p[1] - p[0]:+.1f})" if p else "—"
            lines.append(f"| {t} | {meth} − softmax | {ptxt} | {fam.add(d, ('− softmax', t))} |")
    pooled, pooled_tasks = [], []  # SSAF − softmax over every (set, seed) pair: the toolkit's one-line answer
    for t in tasks:
        soft, cell = by.get((t, "softmax"), {}), by.get((t, "SSAF"), {})
        seeds = sorted(set(soft) & set(cell))
        if seeds:
            pooled += [100 * (cell[s]["test_accuracy"] - soft[s]["test_accuracy"]) for s in seeds]
            pooled_tasks.append(t)
    if len(pooled_tasks) > 1:
        gains = [PAPER_TABLE[t][1] - PAPER_TABLE[t][0] for t in pooled_tasks]
        lines.append(f"| all {len(pooled_tasks)} sets pooled ({len(pooled)} pairs) | SSAF − softmax | mean {statistics.mean(gains):+.1f} "
                     f"| {fam.add(pooled)} |")
    remedy_rows = []
    for t in tasks:
        base = by.get((t, "SSAF"), {})
        for meth in sparse[1:]:
            cell = by.get((t, meth), {})
            seeds = sorted(set(base) & set(cell))
            if seeds:
                d = [100 * (cell[s]["test_accuracy"] - base[s]["test_accuracy"]) for s in seeds]
                remedy_rows.append(f"| {t} | {meth} − SSAF | {fam.add(d, ('remedy − SSAF', t))} | {','.join(map(str, seeds))} |")
    np_soft, np_ssaf = by.get(("sentube-auto", "Np"), {}), by.get(("sentube-auto", "SSAF(Np)"), {})
    seeds = sorted(set(np_soft) & set(np_ssaf))
    if seeds:
        d = [100 * (np_ssaf[s]["test_accuracy"] - np_soft[s]["test_accuracy"]) for s in seeds]
        p = PAPER_NP["sentube-auto"]
        lines.append(f"| sentube-auto | SSAF(Np) − Np | {p[0]} → {p[1]} ({p[1] - p[0]:+.1f}) | {fam.add(d)} |")
    if remedy_rows:
        lines += ["", "## Remedies against plain SSAF", "",
                  "Does a remedy close the gap? Test accuracy of the remedy minus plain SSAF's on the same seed, in points;",
                  "Holm's correction across the remedies on one set.", "",
                  "| task | remedy | paired diff (test): mean ± std [95% CI] (seeds better, t, p) | verdict | seeds |", "|---|---|---|---|---|", *remedy_rows]
    lines += entmax_section(by, tasks, fam)
    if trunc:
        lines += ["", "Share of training texts longer than 128 tokens (truncated): "
                  + ", ".join(f"{t} {100 * v:.1f}%" for t, v in trunc.items() if t in tasks) + "."]
    return "\n".join(fam.fill(lines)) + "\n"


def defaults() -> argparse.Namespace:
    """The settings of a run with no options (what ``run_cell`` reads: lr, model, max length, ...)."""
    return parser().parse_args([])


def parser() -> argparse.ArgumentParser:
    S = TABLE2_SETTINGS
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["sentube-auto", "sentube-tablets", "semeval2013"], choices=TASKS)
    ap.add_argument("--methods", nargs="+", default=["softmax", "SSAF"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--budget", choices=BUDGETS, default="paper",
                    help="paper: the SSAF paper's (SesameBERT's on GLUE); defaults: attnkit train's defaults (records say so)")
    ap.add_argument("--model", default=S["model"])
    ap.add_argument("--data-dir", default=S["data_dir"])
    ap.add_argument("--lr", type=float, default=S["lr"])
    ap.add_argument("--np-lr", type=float, default=S["np_lr"], help="learning rate of the random-init runs")
    ap.add_argument("--np-epochs", type=float, default=S["np_epochs"])
    ap.add_argument("--np-warmup", type=float, default=S["np_warmup"])
    ap.add_argument("--max-length", type=int, default=S["max_length"])
    ap.add_argument("--train-subset", type=int, default=S["train_subset"],
                    help="train on a random subset of this size (drawn with the seed); default: the whole split, "
                         + ", ".join(f"{n} on {t}" for t, n in SUBSET.items()))
    ap.add_argument("--logging-steps", type=int, default=S["logging_steps"])
    ap.add_argument("--work-dir", default=S["work_dir"])
    ap.add_argument("--json", default=str(RESULTS / "ssaf_table2.json"))
    ap.add_argument("--md", default=str(RESULTS / "ssaf_table2.md"))
    ap.add_argument("--render-only", action="store_true")
    ap.add_argument("--fill-from-runs", action="store_true",
                    help="add test macro-F1 and curves that records lack from their run folders in --work-dir, then render")
    return ap


def main():
    a = parser().parse_args()
    path, md = Path(a.json), Path(a.md)
    trunc_path = path.with_name("ssaf_table2_truncation.json")
    trunc = json.loads(trunc_path.read_text()) if trunc_path.is_file() else {}
    if a.fill_from_runs:
        print("filled:", ", ".join(fill_from_runs(path, Path(a.work_dir))) or "nothing")
    if a.render_only or a.fill_from_runs:
        write_text_atomic(md, render(read_records(path), trunc))
        print(md.read_text())
        return
    for task in a.tasks:
        if task not in trunc and a.data_dir:
            with locked(trunc_path):
                cur = json.loads(trunc_path.read_text()) if trunc_path.is_file() else {}
                cur[task] = round(truncated_share(task, a.data_dir, a.max_length), 4)
                write_text_atomic(trunc_path, json.dumps(cur, indent=1) + "\n")
                trunc = cur
        for seed in a.seeds:  # seed-major: a paired comparison is ready after each seed
            for method in a.methods:
                done = {(r["task"], r["method"], r["seed"], budget_of(r)) for r in read_records(path)}
                if (task, method, seed, a.budget) in done:
                    continue
                print(f"[table2] {task} {method} seed {seed} ({a.budget} budget): training", flush=True)
                rec = run_cell(task, method, seed, a, a.budget)
                add_record(path, rec, key=("task", "method", "seed", "budget"))
                with locked(path):
                    write_text_atomic(md, render(read_records(path), trunc))
                print(f"[table2] {task} {method} seed {seed}: dev {rec['dev_accuracy']:.4f} test {rec['test_accuracy']:.4f} "
                      f"({rec['train_seconds'] / 60:.1f} min)", flush=True)
    print(md.read_text() if md.is_file() else "")


if __name__ == "__main__":
    sys.exit(main())
