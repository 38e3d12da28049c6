"""Speed of sparse attention against softmax, measured side by side in one run.

Three measurements, each reported as a ratio to eager softmax taken in the same run:

1. the normaliser alone, forward + backward on scores [32, 12, L, L], L in 64, 128, 256;
2. a full MiniLM training step (forward, backward, AdamW) at batch 32 x length 128;
3. MiniLM inference throughput at batch 64 x length 128.

Variants: softmax (eager), sdpa (transformers' fused softmax attention; steps only),
``entmax.sparsemax``, ``entmax.entmax15`` and ``entmax.entmax_bisect`` (the references, ``pip install entmax``;
skipped if absent), and attnkit's sparsemax, sparsegen-lin, 1.5-entmax and alpha-entmax (alpha 1.3).

    python -m benchmarks.speed --out benchmarks/results/speed.json   [--quick]

Writes a JSON file and prints a markdown table; the machine, versions and date go with them.
Timings interleave the variants round by round and keep the median, because these machines are noisy.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from attnkit import entmax15, entmax_bisect, sparsegen_lin, sparsemax
from attnkit.attention.normalisers import NORMALISERS
from attnkit.attention.spec import AttentionSpec
from attnkit.runfiles.atomic import write_text_atomic

LAM = -4.0
#: alpha of the alpha-entmax rows: not 1.5, so that no code path can take 1.5-entmax's closed form
ALPHA = 1.3


def _entmax():
    try:
        import entmax

        return entmax
    except ImportError:
        return None


def normaliser_fns():
    fns = {
        "softmax": lambda z: torch.softmax(z, -1),
        "attnkit.sparsemax": lambda z: sparsemax(z, -1),
        "attnkit.sparsegen_lin": lambda z: sparsegen_lin(z, LAM, -1),
        "attnkit.entmax15": lambda z: entmax15(z, -1),
        f"attnkit.entmax_bisect(alpha={ALPHA:g})": lambda z: entmax_bisect(z, ALPHA, -1),
    }
    em = _entmax()
    if em is not None:
        fns["entmax.sparsemax"] = lambda z: em.sparsemax(z, -1)
        fns["entmax.entmax15"] = lambda z: em.entmax15(z, -1)
        fns[f"entmax.entmax_bisect(alpha={ALPHA:g})"] = lambda z: em.entmax_bisect(z, ALPHA, -1)
    return fns


def time_rounds(fns: dict, make_run, rounds: int, warmup: int = 1) -> dict[str, float]:
    """Median seconds per call of each variant; variants interleaved round by round."""
    runs = {k: make_run(f) for k, f in fns.items()}
    for r in runs.values():
        for _ in range(warmup):
            r()
    times = {k: [] for k in runs}
    for _ in range(rounds):
        for k, r in runs.items():
            t = time.perf_counter()
            r()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def bench_normaliser(lengths, rounds, batch=32, heads=12):
    rows = []
    gen = torch.Generator().manual_seed(0)
    for L in lengths:
        scores = torch.randn(batch, heads, L, L, generator=gen) * 2.0
        grad = torch.randn(batch, heads, L, L, generator=gen)

        def make(f):
            def run():
                z = scores.clone().requires_grad_(True)
                f(z).backward(grad)

            return run

        # warm-up 3: the first calls of each size fault in fresh pages (glibc hands 6-25 MB
        # blocks back to the OS and maps them again), which doubles a 1-2 ms call
        t = time_rounds(normaliser_fns(), make, rounds, warmup=3)
        for k, v in t.items():
            rows.append({"bench": "normaliser fwd+bwd", "shape": f"[{batch},{heads},{L},{L}]", "variant": k, "ms": v * 1e3, "ratio": v / t["softmax"]})
    return rows


_MEMORY_CODE = """
import resource, torch
from benchmarks.speed import normaliser_fns
L = {L}
f = normaliser_fns()[{variant!r}]
z = (torch.randn(32, 12, L, L) * 2).requires_grad_(True)
g = torch.randn(32, 12, L, L)
f(torch.randn(2, 2, L, L))  # load kernels before measuring
def status(key):
    with open('/proc/self/status') as fh:
        for line in fh:
            if line.startswith(key + ':'):
                return int(line.split()[1]) * 1024
try:  # reset the high-water mark, so imports and kernel loading do not count
    with open('/proc/self/clear_refs', 'w') as fh:
        fh.write('5')
except OSError:
    pass
base = status('VmRSS')
f(z).backward(g)
peak = max(status('VmHWM'), status('VmRSS'))
print(max(0, peak - base))
"""


def bench_memory(L=128):
    """Extra peak resident memory of one normaliser fwd+bwd, each variant in a fresh process."""
    import subprocess
    import sys

    root = str(Path(__file__).resolve().parents[1])
    rows = {}
    for variant in normaliser_fns():
        code = _MEMORY_CODE.format(L=L, variant=variant)  # run in the repository root: benchmarks is importable there
        r = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
        rows[variant] = int(r.stdout.strip().splitlines()[-1]) / 2**20
    base = rows["softmax"]
    return [{"bench": "normaliser fwd+bwd peak memory", "shape": f"[32,12,{L},{L}]", "variant": k, "ms": float("nan"), "mib": v, "ratio": v / base} for k, v in rows.items()]


def _model_variants():
    from attnkit.models.build import build_classifier

    em = _entmax()
    if em is not None and "entmax-sparsemax" not in NORMALISERS:
        NORMALISERS["entmax-sparsemax"] = lambda s, spec: em.sparsemax(s, -1)
    variants = {"softmax (eager)": ("eager", None), "sdpa": ("sdpa", None)}
    if em is not None:
        variants["entmax.sparsemax"] = ("attnkit", AttentionSpec("entmax-sparsemax"))
    variants["attnkit sparsemax"] = ("attnkit", AttentionSpec("sparsemax"))
    variants[f"attnkit sparsegen-lin (lam={LAM:g})"] = ("attnkit", AttentionSpec("sparsegen-lin", LAM))
    variants["attnkit entmax15"] = ("attnkit", AttentionSpec("entmax15"))
    variants[f"attnkit entmax-alpha (alpha={ALPHA:g})"] = ("attnkit", AttentionSpec("entmax-alpha", alpha=ALPHA))

    def build(impl, spec):
        torch.manual_seed(0)
        m = build_classifier("minilm", 2, spec or AttentionSpec("softmax"))
        if impl != "attnkit":
            m.set_attn_implementation(impl)
        return m

    return {k: (lambda impl=impl, spec=spec: build(impl, spec)) for k, (impl, spec) in variants.items()}


def _batch(b, L, vocab=30000):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, vocab, (b, L), generator=g)
    ids[:, 0] = 101
    ids[:, -1] = 102
    return {"input_ids": ids, "attention_mask": torch.ones(b, L, dtype=torch.long), "labels": torch.randint(0, 2, (b,), generator=g)}


def bench_train_step(rounds, b=32, L=128, bf16=False):
    """Each variant's training step; with ``bf16`` each also under bfloat16 autocast (``attnkit train --bf16``: the
    Trainer's autocast, float32 weights and AdamW), every ratio against float32 eager softmax of the same run."""
    batch = _batch(b, L)
    makers = _model_variants()
    if bf16:
        makers = {**makers, **{f"{k} bf16": mk for k, mk in makers.items()}}
    models = {k: mk() for k, mk in makers.items()}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-5) for k, m in models.items()}

    def make(k):
        m, opt = models[k], opts[k]
        m.train()

        def run():
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=k.endswith(" bf16")):
                loss = m(**batch).loss
            loss.backward()
            opt.step()

        return run

    t = time_rounds({k: k for k in models}, make, rounds)
    base = t["softmax (eager)"]
    return [{"bench": "MiniLM train step", "shape": f"b{b} x L{L}", "variant": k, "ms": v * 1e3, "ratio": v / base} for k, v in t.items()]


def bench_inference(rounds, b=64, L=128):
    batch = {k: v for k, v in _batch(b, L).items() if k != "labels"}
    models = {k: mk().eval() for k, mk in _model_variants().items()}

    def make(k):
        m = models[k]

        def run():
            with torch.inference_mode():
                m(**batch)

        return run

    t = time_rounds({k: k for k in models}, make, rounds)
    base = t["softmax (eager)"]
    return [
        {"bench": "MiniLM inference", "shape": f"b{b} x L{L}", "variant": k, "ms": v * 1e3, "sentences_per_s": b / v, "ratio": base / v}
        for k, v in t.items()
    ]


def environment() -> dict:
    import transformers

    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.uname().processor,
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "entmax": getattr(_entmax(), "__version__", None) if _entmax() else None,
    }


def to_markdown(rows) -> str:
    out = ["| bench | shape | variant | time (ms) | ratio to softmax |", "|---|---|---|---|---|"]
    for r in rows:
        if "mib" in r:
            out.append(f"| {r['bench']} | {r['shape']} | {r['variant']} | {r['mib']:.0f} MiB | {r['ratio']:.2f}x memory |")
            continue
        extra = f" ({r['sentences_per_s']:.1f} sent/s)" if "sentences_per_s" in r else ""
        ratio = f"{r['ratio']:.2f}x" + (" throughput" if "sentences_per_s" in r else " time")
        out.append(f"| {r['bench']} | {r['shape']} | {r['variant']} | {r['ms']:.1f}{extra} | {ratio} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=None, help="the JSON file written (default benchmarks/results/speed.json; required with --bf16 or --length)")
    ap.add_argument("--rounds", type=int, default=7, help="rounds of the MiniLM step and inference timings")
    ap.add_argument("--normaliser-rounds", type=int, default=25, help="rounds of the (fast, noisier) normaliser timings")
    ap.add_argument("--quick", action="store_true", help="normaliser at L=64 only, 2 rounds (a smoke test)")
    ap.add_argument("--only", choices=["normaliser", "memory", "step", "inference"], default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    ap.add_argument("--bf16", action="store_true", help="training steps: each variant also under bfloat16 autocast (attnkit train --bf16)")
    ap.add_argument("--length", type=int, default=128, help="sequence length of the MiniLM step and inference timings (default 128)")
    a = ap.parse_args()
    if a.bf16 and (a.quick or a.only not in (None, "step")):
        ap.error("--bf16 times the training steps only: give it without --quick, with --only step or no --only")
    if not 2 <= a.length <= 512:
        ap.error(f"--length {a.length}: expected 2 to 512 tokens (MiniLM's positions)")
    if a.out is None and (a.bf16 or a.length != 128):
        ap.error("--bf16/--length: give --out, so that the committed speed.json (float32, length 128) is not replaced")
    a.out = a.out or "benchmarks/results/speed.json"
    if a.threads:
        torch.set_num_threads(a.threads)
    rounds = 2 if a.quick else a.rounds
    rows = []
    if a.only in (None, "normaliser"):
        rows += bench_normaliser([64] if a.quick else [64, 128, 256], 2 if a.quick else a.normaliser_rounds)
    if not a.quick and a.only in (None, "memory"):
        rows += bench_memory()
    if not a.quick and a.only in (None, "step"):
        rows += bench_train_step(rounds, L=a.length, bf16=a.bf16)
    if not a.quick and a.only in (None, "inference"):
        rows += bench_inference(rounds, L=a.length)
    env = environment()
    from attnkit.attention import kernels

    env["attnkit_backend"] = f"{kernels.backend()} ({kernels.backend_reason()})"
    result = {"environment": env, "command": "python -m benchmarks.speed " + " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in vars(a).items() if v not in (None, False)), "rows": rows}
    write_text_atomic(Path(a.out), json.dumps(result, indent=2) + "\n")  # a run stopped early keeps the last results
    print(json.dumps(env))
    print(to_markdown(rows))


if __name__ == "__main__":
    main()
