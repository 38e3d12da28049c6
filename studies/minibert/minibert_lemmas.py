"""MiniBERT on SemEval-2013 with and without lemmatisation (``--lemmatize en``), several seeds.

Each cell: `attnkit pretrain` (MLM on the training text, lemmatised or not) then `attnkit train --model <pre>`, run as
subprocesses
(which inherits the lemmatisation), the budget of the MiniBERT benchmark's CLI timing (5 MLM epochs, 4 fine-tuning
epochs, batch 32, max length 64). Cells whose metrics.json exists are reused.

    OMP_NUM_THREADS=1 python -m studies.minibert.minibert_lemmas --data-dir ../shared/data --out studies/minibert/results/minibert_lemmas
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import subprocess
import sys
from pathlib import Path


def cli(args: list[str]) -> int:
    """The command line (``attnkit ARGS``) run as a subprocess; its exit status."""
    return subprocess.run([sys.executable, "-m", "attnkit.cli", *args]).returncode


def run(seed: int, lemmatize: str | None, a) -> dict:
    tag = f"{'lemmas' if lemmatize else 'words'}_s{seed}"
    pre, ft = Path(a.work_dir) / f"pre_{tag}", Path(a.work_dir) / f"ft_{tag}"
    extra = ["--lemmatize", lemmatize] if lemmatize else []
    if not (pre / "metrics.json").is_file():
        assert cli(["pretrain", "--task", "semeval2013", "--data-dir", a.data_dir, "--kind", a.kind, "--epochs", "5",
                    "--max-length", "64", "--seed", str(seed), "--output-dir", str(pre), *extra]) == 0
    if not (ft / "metrics.json").is_file():
        assert cli(["train", "--task", "semeval2013", "--data-dir", a.data_dir, "--model", str(pre), "--epochs", "4",
                    "--batch-size", "32", "--max-length", "64", "--seed", str(seed), "--no-heatmap", "--output-dir", str(ft)]) == 0
    p, m = (json.loads((d / "metrics.json").read_text()) for d in (pre, ft))
    return {"seed": seed, "lemmatize": lemmatize, "vocab_size": p["vocab_size"], "mlm_loss": p["mlm_loss"],
            "dev_accuracy": m["validation"]["accuracy"], "test_accuracy": m["test"]["accuracy"]}


def ms(xs):
    return f"{100 * statistics.mean(xs):.1f} ± {100 * (statistics.stdev(xs) if len(xs) > 1 else 0):.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    ap.add_argument("--kind", default="sa")
    ap.add_argument("--work-dir", default="runs/bench_minibert_lemmas")
    ap.add_argument("--out", default="studies/minibert/results/minibert_lemmas")
    a = ap.parse_args()
    recs = [run(s, lem, a) for s in a.seeds for lem in (None, "en")]
    Path(a.out + ".json").write_text(json.dumps(recs, indent=1) + "\n")
    lines = [
        "# MiniBERT on SemEval-2013, with and without lemmatisation",
        "",
        f"`python -m studies.minibert.minibert_lemmas --data-dir ../shared/data --kind {a.kind} --seeds {' '.join(map(str, a.seeds))}`; "
        f"{dt.date.today().isoformat()}, {platform.machine()}, one torch thread. Mini{a.kind.upper()}, 1 layer x 1 head, d = 32, "
        "MLM pre-training (5 epochs) then fine-tuning (4 epochs, batch 32, length 64); accuracy in %, mean ± std over seeds.",
        "",
        "| input | vocabulary | MLM loss | dev | test |",
        "|---|---|---|---|---|",
    ]
    for lem in (None, "en"):
        rs = [r for r in recs if r["lemmatize"] == lem]
        lines.append(f"| {'lemmas (simplemma, en)' if lem else 'words'} | {statistics.mean(r['vocab_size'] for r in rs):.0f} | "
                     f"{statistics.mean(r['mlm_loss'] for r in rs):.2f} | {ms([r['dev_accuracy'] for r in rs])} | "
                     f"{ms([r['test_accuracy'] for r in rs])} |")
    d = [100 * (b["test_accuracy"] - a_["test_accuracy"]) for a_, b in zip(recs[0::2], recs[1::2])]
    lines += ["", f"Paired test difference, lemmas − words: {statistics.mean(d):+.1f} ± {statistics.stdev(d) if len(d) > 1 else 0:.1f} "
              f"points (lemmas ahead on {sum(x > 0 for x in d)} of {len(d)} seeds)."]
    Path(a.out + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
