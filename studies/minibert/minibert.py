"""MiniBERT (METHODS.md §3), the first grid (2026-11-21; superseded by study.py, kept with its results): Tables 2-4, several seeds.

For each task, attention kind (MiniSA / MiniSSA / MiniNTA) and seed:

* ``mlm``     — `attnkit pretrain` (MLM on the task's training text) then fine-tune (`attnkit train --model <pre>`);
* ``frozen``  — the same pre-trained model fine-tuned with ``--freeze embeddings,attention`` (Table 3, bottom);
* ``scratch`` — `attnkit train --model mini --kind K`: no MLM, tokenizer + random weights (Table 3, top).

The pre-trained model of a seed is shared by ``mlm`` and ``frozen``. Table 4 (L x H shapes of
MiniSA, with and without MLM) runs on ``--shapes-task`` only. Every cell is a real run of the same
code the CLI uses (in-process), resumable: runs whose metrics.json exists are reused.

    OMP_NUM_THREADS=1 python studies/minibert/minibert.py --data-dir ../shared/data --out studies/minibert/results/minibert

Metric: micro-F1, which for single-label classification is accuracy. dev = the best epoch's dev
accuracy (the kept checkpoint), test = that checkpoint on the test split.
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

TASKS = ["sentube-auto", "sentube-tablets", "semeval2013", "rotten-tomatoes"]
KIND_NAMES = {"sa": "MiniSA", "ssa": "MiniSSA", "nta": "MiniNTA"}
MODES = ["mlm", "scratch", "frozen"]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def timed(fn):
    t = time.time()
    out = fn()
    return out, time.time() - t


def run_pretrain(task, kind, seed, layers, heads, a) -> dict:
    from attnkit.training.pretrain import PretrainConfig, pretrain

    out = Path(a.work_dir) / f"{task}__{kind}{layers}x{heads}__s{seed}__pre"
    if (out / "metrics.json").is_file():
        return json.loads((out / "metrics.json").read_text())
    cfg = PretrainConfig(task=task, data_dir=a.data_dir, kind=kind, attention=a.attention, layers=layers, heads=heads,
                         dim=a.dim, vocab_size=a.vocab_size, epochs=a.pretrain_epochs, batch_size=a.batch_size,
                         lr=a.pretrain_lr, max_length=a.max_length, seed=seed, output_dir=str(out), logging_steps=10**9)
    m, secs = timed(lambda: pretrain(cfg))
    m["wall_seconds"] = secs
    (out / "metrics.json").write_text(json.dumps(m, indent=2) + "\n")
    return m


def run_finetune(task, kind, seed, mode, layers, heads, a) -> dict:
    from attnkit.training.config import TrainConfig
    from attnkit.training.finetune import train

    out = Path(a.work_dir) / f"{task}__{kind}{layers}x{heads}__s{seed}__{mode}"
    if (out / "metrics.json").is_file():
        return json.loads((out / "metrics.json").read_text())
    common = dict(task=task, data_dir=a.data_dir, attention=a.attention, lam=0.0, epochs=a.epochs, batch_size=a.batch_size,
                  lr=a.lr, max_length=a.max_length, seed=seed, output_dir=str(out), logging_steps=10**9)
    if mode == "scratch":
        cfg = TrainConfig(model="mini", kind=kind, layers=layers, heads=heads, dim=a.dim, vocab_size=a.vocab_size, **common)
    else:
        pre = Path(run_pretrain(task, kind, seed, layers, heads, a)["model_dir"])
        cfg = TrainConfig(model=str(pre), freeze="embeddings,attention" if mode == "frozen" else None, **common)
    m, secs = timed(lambda: train(cfg))
    m["wall_seconds"] = secs
    Path(out / "metrics.json").write_text(json.dumps(m, indent=2, default=str) + "\n")
    return m


def ms(xs, scale=100.0, nd=1):
    xs = [scale * x for x in xs]
    if not xs:
        return "—"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.{nd}f} ± {sd:.{nd}f}"


def cell(rows):
    return {
        "dev": [r["validation"]["accuracy"] for r in rows],
        "test": [r["test"]["accuracy"] for r in rows if "test" in r],
        "parameters": rows[0]["parameters"] if rows else None,
        "trainable": rows[0].get("frozen", {}).get("trainable_parameters", rows[0]["parameters"]) if rows else None,
        "seconds": [r["wall_seconds"] for r in rows],
    }


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=TASKS)
    ap.add_argument("--kinds", nargs="+", default=list(KIND_NAMES), choices=list(KIND_NAMES))
    ap.add_argument("--modes", nargs="+", default=MODES, choices=MODES)
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--shapes-task", default="semeval2013", help="task for Table 4 (MiniSA 1x2 and 2x1); '' to skip")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--attention", default="softmax")
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--vocab-size", type=int, default=4000)
    ap.add_argument("--pretrain-epochs", type=float, default=5)
    ap.add_argument("--pretrain-lr", type=float, default=1e-2)
    ap.add_argument("--epochs", type=float, default=4)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-length", type=int, default=64)
    ap.add_argument("--work-dir", default="runs/bench_minibert")
    ap.add_argument("--out", default="studies/minibert/results/minibert", help="writes <out>.json and <out>.md")
    ap.add_argument("--render-only", action="store_true", help="re-write <out>.md from <out>.json, running nothing")
    return ap


def defaults() -> argparse.Namespace:
    """The settings of a run with no options (what ``run_finetune`` reads)."""
    return parser().parse_args([])


def main():
    a = parser().parse_args()
    if a.render_only:
        out = Path(a.out)
        results = json.loads(out.with_suffix(".json").read_text())
        out.with_suffix(".md").write_text(render(results, a) + "\n")
        print(f"written {out.with_suffix('.md')}")
        return

    import torch
    import transformers

    torch.set_num_threads(1)
    t_start = time.time()
    results = {"table": {}, "shapes": {}, "pretrain": {}}
    for task in a.tasks:
        for kind in a.kinds:
            for mode in a.modes:
                rows = [run_finetune(task, kind, s, mode, 1, 1, a) for s in a.seeds]
                results["table"][f"{task}|{kind}|{mode}"] = cell(rows)
                print(f"{task} {KIND_NAMES[kind]} {mode}: dev {ms(results['table'][f'{task}|{kind}|{mode}']['dev'])}", flush=True)
            if "mlm" in a.modes or "frozen" in a.modes:
                pres = [run_pretrain(task, kind, s, 1, 1, a) for s in a.seeds]
                results["pretrain"][f"{task}|{kind}|1x1"] = {"mlm_loss": [p["mlm_loss"] for p in pres],
                                                             "seconds": [p["wall_seconds"] for p in pres]}
    if a.shapes_task:
        for layers, heads in ((1, 1), (1, 2), (2, 1)):
            for mode in ("mlm", "scratch"):
                rows = [run_finetune(a.shapes_task, "sa", s, mode, layers, heads, a) for s in a.seeds]
                results["shapes"][f"{layers}x{heads}|{mode}"] = cell(rows)
                print(f"shapes {layers}x{heads} {mode}: dev {ms(results['shapes'][f'{layers}x{heads}|{mode}']['dev'])}", flush=True)
            pres = [run_pretrain(a.shapes_task, "sa", s, layers, heads, a) for s in a.seeds]
            results["pretrain"][f"{a.shapes_task}|sa|{layers}x{heads}"] = {
                "mlm_loss": [p["mlm_loss"] for p in pres], "seconds": [p["wall_seconds"] for p in pres]}

    results["meta"] = {
        "command": "python " + " ".join(sys.argv),
        "date": dt.date.today().isoformat(),
        "cpu": cpu_model(),
        "cores": __import__("os").cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "settings": {k: v for k, v in vars(a).items() if k not in ("out", "work_dir")},
        "benchmark_wall_seconds": time.time() - t_start,
        "note": "wall seconds include runs reused from an earlier invocation only as recorded when they ran",
    }
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(results, indent=2) + "\n")
    out.with_suffix(".md").write_text(render(results, a) + "\n")
    print(f"written {out.with_suffix('.md')} and {out.with_suffix('.json')}")


SSAF_MD = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "accuracy_ssaf.md"
#: measured by the main job (not in accuracy_ssaf.md): MiniLM, sparsegen-lin lam -4, 1 epoch, full train set, dev only
RT_SSAF_DEV = 0.8033


def minilm_reference(tasks) -> list[tuple[str, str, str, str, str]]:
    """(task, method, dev, test, note) rows of MiniLM fine-tuning, read from accuracy_ssaf.md (never re-typed)."""
    rows = []
    table = {}
    if SSAF_MD.is_file():
        for line in SSAF_MD.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 8 and cells[0] in tasks:
                task, lam, ep, lr, n, method, dev, test = cells
                table[(task, method)] = (dev, test, f"{ep} epoch, lr {lr}, {n} training examples" + (f", lam {lam}" if lam != "—" else ""))
    for task in tasks:
        for method in ("softmax", "SSAF"):
            if (task, method) in table:
                dev, test, note = table[(task, method)]
                rows.append((task, f"MiniLM + {method}", dev, test, note))
        if task == "rotten-tomatoes":
            rows.append((task, "MiniLM + SSAF", f"{100 * RT_SSAF_DEV:.1f} (1 seed)", "not measured",
                         "main job: 1 epoch, full train set, lam -4"))
    return rows


def render(r, a) -> str:
    m = r["meta"]
    s = m["settings"]
    total = sum(sum(c["seconds"]) for c in list(r["table"].values()) + list(r["shapes"].values()))
    total += sum(sum(p["seconds"]) for p in r["pretrain"].values())
    lines = [
        "# MiniBERT on small sentiment corpora (paper 004, Tables 2-4)",
        "",
        f"Command: `{m['command']}`  ",
        f"Date: {m['date']}; machine: {m['cpu']}, {m['cores']} cores, **{m['torch_threads']} torch thread per run** "
        f"(the machine's other core was shared with another job); Python {m['python']}, torch {m['torch']}, transformers {m['transformers']}.  ",
        f"Settings: d = {s['dim']}, {s['attention']} attention, WordPiece vocabulary {s['vocab_size']} trained on each task's "
        f"training text only, max length {s['max_length']}, batch {s['batch_size']}; MLM {s['pretrain_epochs']:g} epochs at "
        f"lr {s['pretrain_lr']:g}; fine-tuning / from scratch / frozen {s['epochs']:g} epochs at lr {s['lr']:g} "
        f"(AdamW, linear decay, best dev epoch kept). Seeds {s['seeds']}.  ",
        f"Total wall-clock time of the runs: {total / 60:.1f} min, one after another, one thread each.",
        "",
        "Micro-F1 (= accuracy, single-label) in %, mean ± std over seeds. dev = best epoch's dev accuracy; "
        "test = that checkpoint on test. `mlm` = MLM pre-training then fine-tuning; `scratch` = trained on the "
        "task directly (no MLM); `frozen` = the pre-trained model fine-tuned with embeddings and attention frozen "
        "(`--freeze embeddings,attention`). The mlm and frozen rows of a seed share one pre-trained model; their "
        "'seconds per run' is the fine-tuning alone (pre-training times are in the last table).",
        "",
        "## Tables 2-3: MiniSA / MiniSSA / MiniNTA, 1 layer x 1 head",
        "",
        "| task | model | mode | dev | test | parameters (trainable) | seconds per run |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, c in r["table"].items():
        task, kind, mode = key.split("|")
        tp = f"{c['parameters']:,}" + (f" ({c['trainable']:,})" if c["trainable"] != c["parameters"] else "")
        lines.append(f"| {task} | {KIND_NAMES[kind]} | {mode} | {ms(c['dev'])} | {ms(c['test'])} | {tp} | "
                     f"{statistics.mean(c['seconds']):.0f} |")
    ref = minilm_reference(list(dict.fromkeys(k.split("|")[0] for k in r["table"])))
    if ref:
        lines += [
            "",
            "For comparison, MiniLM (all-MiniLM-L6-v2, about 22.7 M parameters, pre-trained on external data) fine-tuned "
            "with softmax and with SSAF (sparsegen-lin), read from `benchmarks/results/accuracy_ssaf.md` — a **reduced "
            "budget** (1 epoch, at most 2000 training examples, max length 64, seeds 1-3); Rotten Tomatoes is the main "
            "job's single run (dev only):",
            "",
            "| task | model | dev | test | budget |",
            "|---|---|---|---|---|",
        ]
        lines += [f"| {t} | {m} | {d} | {te} | {n} |" for t, m, d, te, n in ref]
    if r["shapes"]:
        lines += [
            "",
            f"## Table 4: MiniSA with L layers x H heads ({s['shapes_task']} only)",
            "",
            "| L x H | MLM? | dev | test | parameters | seconds per run |",
            "|---|---|---|---|---|---|",
        ]
        for key, c in r["shapes"].items():
            shape, mode = key.split("|")
            lines.append(f"| {shape} | {'yes' if mode == 'mlm' else 'no'} | {ms(c['dev'])} | {ms(c['test'])} | "
                         f"{c['parameters']:,} | {statistics.mean(c['seconds']):.0f} |")
    t = r.get("cli_timing")
    if t:
        lines += ["", "## Pre-training + fine-tuning on SemEval-2013 with the CLI (target: under 5 minutes on 2 cores)", "",
                  f"Measured with `time` on {t['date']}, {t['threads']} ({t['note']}):", "", "```"]
        lines += [f"$ {c['command']}\n{c['time']}" for c in t["commands"]]
        lines += ["```", "", f"Total: **{t['total_seconds']:.0f} s wall-clock** (pre-training + fine-tuning; dev accuracy "
                  f"{t['dev_accuracy']:.4f}, test {t['test_accuracy']:.4f})."]
    if r.get("notes"):
        lines += ["", "## Reading the numbers", ""] + [f"- {n}" for n in r["notes"]]
    lines += ["", "## MLM pre-training", "", "| task | model | shape | MLM loss (training text, re-masked) | seconds per run |",
              "|---|---|---|---|---|"]
    for key, p in r["pretrain"].items():
        task, kind, shape = key.split("|")
        lines.append(f"| {task} | {KIND_NAMES[kind]} | {shape} | {ms(p['mlm_loss'], 1.0, 3)} | {statistics.mean(p['seconds']):.0f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
