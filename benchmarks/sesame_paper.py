"""SesameBERT's Table 2 at the paper's budget (issue 26, item 1): does Gaussian blur help, at every sigma?

Every cell is a real in-process ``attnkit train`` run of the bundled MiniLM at the paper's settings (METHODS.md §2:
batch 32, lr 3e-5, 3 epochs, max length 128, the whole train split), dev metric of each epoch and of the best one.
Variants: ``softmax`` (no blur) and blur on the values or on the context layer at each ``--sigmas`` (kernel width 3).
Each finished cell is appended at once to ``--json`` (a locked read-modify-write, so several workers may share it; a
cell already there is skipped; a cell whose run folder holds checkpoints resumes from them) and the markdown table is
re-rendered: every sigma with its kernel weights, mean ± std over seeds, and the paired difference to softmax.

    OMP_NUM_THREADS=1 python benchmarks/sesame_paper.py --tasks rte --seeds 1 2 3 4 5 --data-dir ../shared/data
    python benchmarks/sesame_paper.py --render-only

The paper's selection protocols (best sigma by dev; sigma chosen on held-out training data), Table 3, HANS and
Figure 4 (the rest of issue 26) are not in this script yet.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sys
import time
from pathlib import Path

from attnkit.runfiles import write_text_atomic

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ssaf_table2  # noqa: E402  (locked records: read_records, add_record, locked; the verdict rule)

ROOT = Path(__file__).resolve().parent.parent
SIGMAS = (0.01, 0.1, 0.3, 0.5, 1.0)
#: the GLUE dev metric each task is reported by in the paper's Table 2
METRIC = {"rte": "accuracy", "mrpc": "accuracy", "cola": "mcc", "sst2": "accuracy"}
KEY = ("task", "variant", "seed")


def variants(sigmas) -> list[tuple[str, str, float | None]]:
    """(name, blur place, sigma): softmax, then blur on values and on context at each sigma."""
    out = [("softmax", "none", None)]
    for place in ("value", "context"):
        out += [(f"blur-{place}-{s:g}", place, float(s)) for s in sigmas]
    return out


def kernel_weights(sigma: float, size: int = 3) -> list[float]:
    from attnkit.attention.spec import gaussian_kernel

    return [round(float(x), 4) for x in gaussian_kernel(size, sigma)]


def run_cell(task: str, name: str, blur: str, sigma: float | None, seed: int, a) -> dict:
    from attnkit.training.config import TrainConfig
    from attnkit.training.finetune import train

    out = Path(a.work_dir) / f"{task}__{name}__s{seed}"
    cfg = TrainConfig(task=task, data_dir=a.data_dir, model=a.model, attention="softmax", epochs=a.epochs, batch_size=a.batch_size,
                      lr=a.lr, max_length=a.max_length, seed=seed, output_dir=str(out), logging_steps=50,
                      max_train_samples=a.train_subset.get(task), blur=blur, blur_sigma=sigma if sigma is not None else 0.3)
    t0 = time.time()
    m = train(cfg)
    metric = METRIC[task]
    per_epoch = [h[f"eval_{metric}"] for h in m["log_history"] if f"eval_{metric}" in h]
    return {
        "task": task, "variant": name, "blur": blur, "blur_sigma": sigma, "kernel": kernel_weights(sigma) if sigma is not None else None,
        "se": False, "layer_pooling": "last", "seed": seed, "epochs": cfg.epochs, "lr": cfg.lr, "batch_size": cfg.batch_size,
        "max_length": cfg.max_length, "train_size": m["train_size"], "metric": metric, "dev_metric": m["validation"][metric],
        "dev_per_epoch": per_epoch, "train_seconds": round(m["train"].get("train_runtime", time.time() - t0), 1),
        "torch_threads": int(os.environ.get("OMP_NUM_THREADS", "0")) or None,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
    }


def render(recs: list[dict]) -> str:
    by: dict = {}
    for r in recs:
        by.setdefault((r["task"], r["variant"]), {})[r["seed"]] = r
    lines = ["# SesameBERT Table 2 at the paper's budget (MiniLM)", "",
             "Made by `benchmarks/sesame_paper.py` (records: `sesame_paper.json`). Every run: the bundled all-MiniLM-L6-v2,",
             "the whole train split, batch 32, lr 3e-5, 3 epochs, max length 128, softmax attention, classifier on the last",
             "layer; dev metric (× 100) of the best epoch, mean ± std over seeds; paired: minus softmax on the same seed, in points",
             "(seeds won), with Table 2's verdict rule (**holds** / **within noise** / **reversed**: the sign against two",
             "standard errors). Kernel: the 3-wide blur weights in float32 (sigma 0.01 and 0.1 are the identity there).", "",
             "| task | variant | kernel | seeds | dev | paired − softmax | verdict |", "|---|---|---|---|---|---|---|"]
    tasks = sorted({t for t, _ in by}, key=lambda t: list(METRIC).index(t) if t in METRIC else 99)
    for t in tasks:
        soft = by.get((t, "softmax"), {})
        names = [n for n, _, _ in variants(SIGMAS)] + sorted({v for tt, v in by if tt == t} - {n for n, _, _ in variants(SIGMAS)})
        for name in names:
            cell = by.get((t, name))
            if not cell:
                continue
            rs = [cell[s] for s in sorted(cell)]
            d = [100 * (cell[s]["dev_metric"] - soft[s]["dev_metric"]) for s in sorted(set(cell) & set(soft))] if name != "softmax" else []
            k = rs[0]["kernel"]
            lines.append(f"| {t} ({rs[0]['metric']}) | {name} | {'—' if k is None else ', '.join(f'{x:.3f}' for x in k)} "
                         f"| {','.join(map(str, sorted(cell)))} | {ssaf_table2._ms([100 * r['dev_metric'] for r in rs])} "
                         f"| {ssaf_table2._ms(d) + f' ({sum(x > 0 for x in d)}/{len(d)})' if d else '—'} | {ssaf_table2.verdict(d) if d else '—'} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["rte"], choices=list(METRIC))
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3, 4, 5])
    ap.add_argument("--sigmas", nargs="+", type=float, default=list(SIGMAS))
    ap.add_argument("--places", nargs="+", default=["none", "value", "context"], choices=["none", "value", "context"],
                    help="which variants: none (softmax), blur on values, blur on the context layer")
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--sst2-subset", type=int, default=None, help="SST-2: train on a random subset of this size (drawn with the seed)")
    ap.add_argument("--work-dir", default="runs/sesame_paper")
    ap.add_argument("--json", default=str(ROOT / "benchmarks/results/sesame_paper.json"))
    ap.add_argument("--md", default=str(ROOT / "benchmarks/results/sesame_paper.md"))
    ap.add_argument("--render-only", action="store_true")
    a = ap.parse_args()
    a.train_subset = {"sst2": a.sst2_subset} if a.sst2_subset else {}
    path, md = Path(a.json), Path(a.md)
    if not a.render_only:
        for task in a.tasks:
            for seed in a.seeds:  # seed-major: paired comparisons are ready after each seed
                for name, blur, sigma in variants(a.sigmas):
                    if blur not in a.places:
                        continue
                    done = {tuple(r[k] for k in KEY) for r in ssaf_table2.read_records(path)}
                    if (task, name, seed) in done:
                        continue
                    print(f"[sesame] {task} {name} seed {seed}: training", flush=True)
                    rec = run_cell(task, name, blur, sigma, seed, a)
                    ssaf_table2.add_record(path, rec, KEY, then=lambda recs: write_text_atomic(md, render(recs)))
                    print(f"[sesame] {task} {name} seed {seed}: dev {rec['metric']} {rec['dev_metric']:.4f} ({rec['train_seconds'] / 60:.1f} min)", flush=True)
    write_text_atomic(md, render(ssaf_table2.read_records(path)))
    print(md.read_text())


if __name__ == "__main__":
    sys.exit(main())
