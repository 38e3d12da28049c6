"""SesameBERT benchmarks on MiniLM: Table-3 grid, Table-2 blur placement, HANS, and the cost of SE and blur.

Each cell is a real in-process `attnkit train` run; finished runs (their metrics.json) are
reused, so an interrupted benchmark resumes. Results: a markdown table (mean ± std over
seeds) and a JSON file with every run's metrics.

    python -m benchmarks.sesame table3 --seeds 1 2 3 --out OUT.md     # small-budget grids (paper budget: studies/sesamebert)
    python -m benchmarks.sesame table2 --seeds 1 2 3 --out OUT.md
    python -m benchmarks.sesame hans   --seeds 1 2 3 --out OUT.md
    python -m benchmarks.sesame cost   --out benchmarks/results/sesame_cost.md

The paper trains BERT-base for 3 epochs at batch 32, lr 3e-5. On 2 CPU cores that does
not fit; ``--epochs``, ``--max-train-samples`` and ``--max-length`` shrink the runs and the
table records what was used.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
import time
from pathlib import Path

from attnkit.analysis.stats import format_paired, rule_text, verdicts_by_family
from attnkit.runfiles.provenance import provenance

VARIANTS = {  # name -> (se, blur placement)
    "plain": (False, "none"),
    "SE": (True, "none"),
    "blur": (False, "context"),
    "SE+blur": (True, "context"),
}


def run(a, task, name, seed, *, pooling="last", se=False, blur="none", attention="softmax", lam=0.0, max_train=None):
    from attnkit.training.config import TrainConfig
    from attnkit.training.finetune import train

    out = Path(a.work_dir) / f"{task}__{name}__s{seed}"
    if (out / "metrics.json").is_file():
        return {**json.loads((out / "metrics.json").read_text()), "seed": seed}
    if a.report_only:
        return None
    cfg = TrainConfig(
        task=task, data_dir=a.data_dir, model=a.model, attention=attention, lam=lam, epochs=a.epochs,
        batch_size=a.batch_size, lr=a.lr, max_length=a.max_length, seed=seed, output_dir=str(out),
        max_train_samples=max_train if max_train is not None else a.max_train_samples, logging_steps=10**9,
        blur=blur, blur_size=a.blur_size, blur_sigma=a.blur_sigma, pooling=pooling, se=se, se_ratio=a.se_ratio,
    )
    t = time.perf_counter()
    m = train(cfg)
    m["wall_s"] = time.perf_counter() - t
    (out / "metrics.json").write_text(json.dumps(m, indent=2, default=str) + "\n")
    return {**m, "seed": seed}


def paired_cells(pairs: list[tuple[list, list]], families: list, key: str = "accuracy") -> list[str]:
    """Each (runs, baseline runs) pair as a paired cell: dev ``key`` minus the baseline's on the same seed, in points,
    mean ± std (seeds won, t, p, verdict); Holm within each of ``families`` (studies.stats)."""
    diffs = []
    for runs, base in pairs:
        b = {m["seed"]: m["validation"][key] for m in base or []}
        diffs.append([100 * (m["validation"][key] - b[m["seed"]]) for m in runs or [] if m["seed"] in b])
    return [format_paired(t, won=True) if t.n else "—" for t in verdicts_by_family(diffs, [f if d else None for d, f in zip(diffs, families)])]


def fmt(xs, scale=100.0):
    xs = [scale * x for x in xs]
    if not xs:
        return "—"
    return f"{statistics.mean(xs):.1f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.1f}"


def _n(runs, a) -> str:
    """A marker for cells with fewer finished seeds than asked for."""
    k = len(runs or [])
    return "" if k == len(a.seeds) else f" (n={k})"


SMALL_BUDGET = ("**A small budget, not the SesameBERT paper's** (fewer epochs, training examples or tokens than its 3 epochs, "
                "whole train split, max length 128): every variant sits near chance or the majority class, so these numbers say "
                "nothing about the paper's claims. The paper-budget tables: `python -m studies.sesamebert.run`, "
                "`studies/sesamebert/results/sesame_paper_bf16.md` (Table 2), `sesame_paper_table3_bf16.md`, `sesame_paper_hans_bf16.md`, "
                "`sesame_paper_figure4_bf16.png`.")


def header(a, title, trains=True):
    import torch
    import transformers

    small = trains and (a.epochs < 3 or a.max_train_samples is not None or a.max_length < 128)
    return [
        f"# {title}",
        "",
        *([SMALL_BUDGET, ""] if small else []),
        f"Command: `python -m benchmarks.sesame {' '.join(x for x in sys.argv[1:] if x != '--report-only')}`  ",
        f"Date: {dt.date.today().isoformat()}; machine: {platform.machine()}, {torch.get_num_threads()} torch threads (2-core VM, shared); "
        f"torch {torch.__version__}, transformers {transformers.__version__}.  ",
        f"Model {a.model}; {a.epochs:g} epoch(s), batch {a.batch_size}, lr {a.lr:g}, max length {a.max_length}, "
        f"train subset {a.max_train_samples or 'all'}; blur k={a.blur_size}, sigma={a.blur_sigma:g}; SE r={a.se_ratio}. "
        f"Mean ± std over seeds {a.seeds}; dev metric of the best epoch.",
        "",
    ]


def table3(a):
    poolings = a.poolings
    res = {}
    for s in a.seeds:  # seed-major: a benchmark stopped early still covers every cell
        for pooling in poolings:
            for v, (se, blur) in VARIANTS.items():
                m = run(a, "rte", f"{pooling}-{v}", s, pooling=pooling, se=se, blur=blur)
                if m is None:
                    continue
                res.setdefault((pooling, v), []).append(m)
                print(f"[bench] rte {pooling} {v} seed {s}: dev acc {m['validation']['accuracy']:.4f}", flush=True)
    lines = header(a, "SesameBERT Table-3-style grid on RTE (dev accuracy %)")
    others = [v for v in VARIANTS if v != "plain"]
    lines += [rule_text(family="every paired cell (each variant minus plain, same extraction and seed)"), "",
              "| extraction | " + " | ".join(VARIANTS) + " | " + " | ".join(f"{v} − plain" for v in others) + " |",
              "|---|" + "---|" * (len(VARIANTS) + len(others))]
    cells = iter(paired_cells([(res.get((p, v)), res.get((p, "plain"))) for p in poolings for v in others], ["t3"] * len(poolings) * len(others)))
    for p in poolings:
        lines.append(f"| {p} | " + " | ".join(fmt([m["validation"]["accuracy"] for m in res.get((p, v), [])]) + _n(res.get((p, v)), a) for v in VARIANTS)
                     + " | " + " | ".join(next(cells) for _ in others) + " |")
    lines += ["", "plain = MiniLM; SE = Squeeze-and-Excitation over layers; blur = Gaussian blur on each head's output (context); "
              "SE+blur = SesameBERT. RTE dev has 277 pairs: one pair is 0.36 points."]
    return lines, res


def table2(a):
    tasks = a.tasks or ["mrpc", "rte", "sst2"]
    res = {}
    places = {"none": "MiniLM", "value": "blur on values", "context": "blur on context"}
    names = {"none": "last-plain", "value": "last-blur-value", "context": "last-blur"}  # shares runs with table3
    for s in a.seeds:
        for task in tasks:
            for blur in places:
                m = run(a, task, names[blur], s, blur=blur)
                if m is None:
                    continue
                res.setdefault((task, blur), []).append(m)
                print(f"[bench] {task} blur={blur} seed {s}: dev acc {m['validation']['accuracy']:.4f}", flush=True)
    lines = header(a, "Blur on values vs blur on context (Table-2 style), dev accuracy % (MRPC: accuracy / F1)")
    lines += [rule_text(family="the two blurs of one task"), "",
              "| task | train size | " + " | ".join(places.values()) + " | value − none | context − none |", "|---|---|" + "---|" * (len(places) + 2)]
    for task in tasks:
        cells = []
        for blur in places:
            ms = res.get((task, blur), [])
            c = fmt([m["validation"]["accuracy"] for m in ms])
            if ms and "f1" in ms[0]["validation"]:
                c += " / " + fmt([m["validation"]["f1"] for m in ms])
            cells.append(c + _n(ms, a))
        size = next((ms[0]["train_size"] for (t, _), ms in res.items() if t == task and ms), "—")
        pc = paired_cells([(res.get((task, b)), res.get((task, "none"))) for b in ("value", "context")], [task, task])
        lines.append(f"| {task} | {size} | " + " | ".join(cells + pc) + " |")
    return lines, res


def hans(a):
    import subprocess

    models = {  # name -> run kwargs
        "softmax (MiniLM)": dict(),
        "SesameBERT (SE + weighted + blur on context)": dict(pooling="weighted", se=True, blur="context"),
        "SesameBERT + sparsegen-lin (lam -4)": dict(pooling="weighted", se=True, blur="context", attention="sparsegen-lin", lam=-4.0),
    }
    res = {}
    for s in a.seeds:
        for name, kw in models.items():
            short = name.split(" (")[0].replace(" ", "").replace("+", "-")
            m = run(a, "mnli-devsplit", short, s, **kw)
            if m is None:
                continue
            rep_path = Path(a.work_dir) / f"mnli-devsplit__{short}__s{s}" / "hans.json"
            if not rep_path.is_file() and a.report_only:
                continue
            if not rep_path.is_file():
                args = ["evaluate", "--model", str(rep_path.parent), "--task", "hans", "--output", str(rep_path),
                        "--max-length", str(a.max_length)]
                if a.data_dir:
                    args += ["--data-dir", a.data_dir]
                if a.hans_per_subcase:
                    args += ["--hans-per-subcase", str(a.hans_per_subcase)]
                assert subprocess.run([sys.executable, "-m", "attnkit.cli", *args]).returncode == 0  # the CLI, as a subprocess
            rep = json.loads(rep_path.read_text())
            res.setdefault(name, []).append((m, rep))
            print(f"[bench] {name} seed {s}: MNLI dev-split acc {m['validation']['accuracy']:.4f}, HANS {rep['accuracy']:.4f}", flush=True)
    heur = ["lexical_overlap", "subsequence", "constituent"]
    lines = header(a, "HANS per heuristic (accuracy %), models trained on the MNLI dev-matched split")
    if not res:
        return lines + ["(no finished runs)"], {}
    n = next(iter(res.values()))[0][1]["n"]
    lines += [
        f"Trained on `mnli-devsplit` (80% of MNLI dev-matched, {next(iter(res.values()))[0][0]['train_size']} pairs; MNLI train is not "
        f"available here). HANS: {n} pairs ({a.hans_per_subcase or 1000} per subcase). Neutral and contradiction count as non-entailment.",
        "",
        "| model | MNLI split dev | HANS all | " + " | ".join(f"{h} ent | {h} non-ent" for h in heur) + " |",
        "|---|---|---|" + "---|---|" * len(heur),
    ]
    for name, runs in res.items():
        cells = [fmt([m["validation"]["accuracy"] for m, _ in runs]), fmt([r["accuracy"] for _, r in runs])]
        for h in heur:
            for g in ("entailment", "non-entailment"):
                cells.append(fmt([r["heuristic"][h][g] for _, r in runs]))
        lines.append(f"| {name}{_n(runs, a)} | " + " | ".join(cells) + " |")
    return lines, {k: [{"train": m, "hans": r} for m, r in v] for k, v in res.items()}


def cost(a):
    """Extra time per MiniLM training step (b32 x L128) of SE and of blur, as ratios, interleaved rounds."""
    import torch

    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_classifier
    from attnkit.models.pooling import HeadSpec

    variants = {
        "plain": (AttentionSpec("softmax"), HeadSpec()),
        "SE (last)": (AttentionSpec("softmax"), HeadSpec("last", se=True)),
        "SE + weighted": (AttentionSpec("softmax"), HeadSpec("weighted", se=True)),
        "blur context": (AttentionSpec("softmax", blur="context"), HeadSpec()),
        "blur value": (AttentionSpec("softmax", blur="value"), HeadSpec()),
        "SesameBERT (SE + weighted + blur context)": (AttentionSpec("softmax", blur="context"), HeadSpec("weighted", se=True)),
    }
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, 30000, (32, 128), generator=g)
    batch = {"input_ids": ids, "attention_mask": torch.ones(32, 128, dtype=torch.long), "labels": torch.randint(0, 2, (32,), generator=g)}
    models, opts = {}, {}
    for k, (spec, head) in variants.items():
        torch.manual_seed(0)
        models[k] = build_classifier(a.model, 2, spec, head=head).train()
        opts[k] = torch.optim.AdamW(models[k].parameters(), lr=1e-5)
    times = {k: [] for k in variants}
    for r in range(a.rounds + 1):
        for k in variants:
            t = time.perf_counter()
            opts[k].zero_grad(set_to_none=True)
            models[k](**batch).loss.backward()
            opts[k].step()
            if r:  # round 0 is warm-up
                times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    lines = header(a, "Extra cost per training step of SE and blur (MiniLM, b32 x L128, fwd + bwd + AdamW)", trains=False)
    lines += [f"Median of {a.rounds} interleaved rounds.", "", "| variant | ms / step | ratio to plain |", "|---|---|---|"]
    for k, v in med.items():
        lines.append(f"| {k} | {v * 1e3:.0f} | {v / med['plain']:.3f}x |")
    return lines, {k: {"ms": v * 1e3, "ratio": v / med["plain"]} for k, v in med.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("grid", choices=["table3", "table2", "hans", "cost"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--tasks", nargs="+", default=None, help="table2: tasks (default mrpc rte sst2)")
    ap.add_argument("--poolings", nargs="+", default=["last", "second-to-last", "sum-last-four", "weighted"])
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--max-train-samples", type=int, default=None)
    ap.add_argument("--blur-size", type=int, default=3)
    ap.add_argument("--blur-sigma", type=float, default=0.5)
    ap.add_argument("--se-ratio", type=int, default=3)
    ap.add_argument("--hans-per-subcase", type=int, default=None)
    ap.add_argument("--rounds", type=int, default=5, help="cost: timing rounds")
    ap.add_argument("--work-dir", default="runs/bench_sesame")
    ap.add_argument("--report-only", action="store_true", help="write the tables from the finished runs, train nothing")
    ap.add_argument("--out", required=True, help="markdown file; the JSON goes next to it")
    a = ap.parse_args()
    lines, res = {"table3": table3, "table2": table2, "hans": hans, "cost": cost}[a.grid](a)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    out.with_suffix(".json").write_text(json.dumps({"command": " ".join(sys.argv), "provenance": provenance(), "results": {str(k): v for k, v in res.items()}}, indent=1, default=str) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
