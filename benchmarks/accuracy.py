"""SSAF against softmax fine-tuning, several seeds, as a markdown table of mean ± std.

Each cell is a real `attnkit train` run (in-process), so the table is reproducible with the
command printed at its top. Runs already finished (their metrics.json exists) are reused,
so an interrupted benchmark resumes where it stopped.

    python -m benchmarks.accuracy --tasks sentube-auto sentube-tablets semeval2013 sst5 \
        --seeds 1 2 3 --out benchmarks/results/accuracy_ssaf.md

The paper's settings (METHODS.md §1): lam per task, Adam lr 2e-5, batch 16, epochs per task.
``--epochs``/``--max-train-samples`` shrink runs to fit a CPU; the table records what was used.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
from pathlib import Path

from attnkit.analysis.stats import format_paired, rule_text, verdicts_by_family
from attnkit.tasks.squad import is_qa_task
from attnkit.training.config import PAPER_EPOCHS, PAPER_LAM, TrainConfig
from attnkit.training.finetune import train


#: what each method is paired with, seed by seed
BASELINE = {"SSAF": "softmax", "SSAF(Np)": "Np"}


def run_cell(task, method, seed, a) -> dict:
    out = Path(a.work_dir) / f"{task}__{method}__s{seed}"
    if (out / "metrics.json").is_file():
        return json.loads((out / "metrics.json").read_text())
    from_scratch = method.endswith("(Np)") or method == "Np"
    attention = "softmax" if method in ("softmax", "Np") else "sparsegen-lin"
    cfg = TrainConfig(
        task=task,
        data_dir=a.data_dir,
        model=a.model,
        attention=attention,
        lam=PAPER_LAM.get(task, -4.0),
        from_scratch=from_scratch,
        epochs=a.epochs if a.epochs is not None else PAPER_EPOCHS.get(task, 3),
        batch_size=16,
        lr=a.lr_scratch if from_scratch else a.lr,
        max_length=a.max_length,
        seed=seed,
        output_dir=str(out),
        max_train_samples=a.max_train_samples,
        max_eval_samples=a.max_eval_samples,
        logging_steps=10**9,
    )
    return train(cfg)


def fmt(xs, scale=100.0):
    xs = [scale * x for x in xs]
    if not xs:
        return "—"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.1f} ± {sd:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["sentube-auto", "sentube-tablets", "semeval2013", "sst5"])
    ap.add_argument("--methods", nargs="+", default=["softmax", "SSAF"], help="softmax, SSAF, Np, SSAF(Np)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--epochs", type=float, default=None, help="default: the paper's epochs for the task")
    ap.add_argument("--lr", type=float, default=2e-5, help="learning rate of the pre-trained runs (the paper's 2e-5)")
    ap.add_argument("--lr-scratch", type=float, default=1e-4, help="learning rate of the random-init (Np) runs")
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--max-train-samples", type=int, default=None)
    ap.add_argument("--max-eval-samples", type=int, default=None, help="dev subset (span QA: questions)")
    ap.add_argument("--work-dir", default="runs/bench_accuracy")
    ap.add_argument("--out", default="benchmarks/results/accuracy_ssaf.md")
    a = ap.parse_args()

    import torch
    import transformers

    results = {}
    for task in a.tasks:
        for method in a.methods:
            for seed in a.seeds:
                m = run_cell(task, method, seed, a)
                results.setdefault((task, method), []).append(m)
                key = m.get("main_metric", "accuracy")
                print(f"[bench] {task} {method} seed {seed}: dev {key} {m['validation'][key]:.4f} test {m.get('test', {}).get(key, float('nan')):.4f}", flush=True)

    small = a.max_train_samples is not None or (a.epochs is not None and any(a.epochs < PAPER_EPOCHS.get(t, 0) for t in a.tasks))
    lines = [
        f"# SSAF vs softmax fine-tuning ({a.model})",
        "",
        *(["**A small budget, not the SSAF paper's** (fewer epochs or training examples than the paper's; the classification "
           "sets at the paper's budget: `studies/ssaf/ssaf_table2.py`, `studies/ssaf/results/ssaf_table2.md`).", ""] if small else []),
        f"Command: `python -m benchmarks.accuracy {' '.join(sys.argv[1:])}`  ",
        f"Date: {dt.date.today().isoformat()}; machine: {platform.machine()}, {torch.get_num_threads()} threads; "
        f"torch {torch.__version__}, transformers {transformers.__version__}.  ",
        f"Accuracy in %, mean ± std over seeds {a.seeds}; dev = best epoch's dev accuracy, test = that checkpoint on test "
        "(span QA: SQuAD v1.1 exact match / F1 on the dev questions, no test set). Paired: test accuracy minus the",
        "baseline's (SSAF − softmax, SSAF(Np) − Np) on the same seed, in points (seeds won, t, p, verdict).",
        rule_text(family="the methods compared with one baseline on one task"),
        "",
        "| task | lam | epochs | lr | train size | method | dev | test | paired − baseline (test) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    diffs, keys = [], []
    for (task, method), ms in results.items():
        base = results.get((task, BASELINE.get(method)))
        ok = base is not None and not is_qa_task(task) and all("test" in m for m in ms + base)
        diffs.append([100 * (m["test"]["accuracy"] - b["test"]["accuracy"]) for m, b in zip(ms, base)] if ok else [])
        keys.append((task, BASELINE.get(method)) if ok else None)
    tests = iter(verdicts_by_family(diffs, keys))
    for (task, method), ms in results.items():
        if is_qa_task(task):  # EM / F1, already in percent
            em, f1 = ([m["validation"][k] for m in ms] for k in ("exact_match", "f1"))
            dev, test = f"EM {fmt(em, 1.0)} / F1 {fmt(f1, 1.0)}", "—"
        else:
            dev = fmt([m["validation"]["accuracy"] for m in ms])
            test = fmt([m["test"]["accuracy"] for m in ms if "test" in m])
        lam = f"{PAPER_LAM.get(task, -4.0):g}" if "SSAF" in method else "—"
        ep = a.epochs if a.epochs is not None else PAPER_EPOCHS.get(task, 3)
        lr = a.lr_scratch if "Np" in method else a.lr
        t = next(tests)
        lines.append(f"| {task} | {lam} | {ep:g} | {lr:g} | {ms[0]['train_size']} | {method} | {dev} | {test} "
                     f"| {format_paired(t, won=True) if t.n else '—'} |")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
