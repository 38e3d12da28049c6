"""Sparse attention on a GPU, side by side with softmax: one command, results as JSON + markdown.

    python -m benchmarks.gpu --out benchmarks/results/gpu.json

1. the normaliser alone, forward + backward on scores [B, 12, L, L] (B x L^2 fixed near 8M entries), L in 128, 512,
   2048, 4096: softmax (eager), attnkit's pure-torch path, attnkit's Triton kernels, the ``entmax`` package where
   installed, AdaSplash (``adasplash``, alpha 2 and 1.5) where installed; peak CUDA memory of each;
2. a MiniLM-shaped and a BERT-base-shaped model (random weights) at L = 128 and 512: a training step (forward, backward,
   AdamW) and inference, for softmax eager, sdpa, and attnkit's sparsemax, sparsegen-lin and 1.5-entmax (Triton).

Times are CUDA-event medians over interleaved rounds; every ratio is to softmax eager measured in the same run. It
refuses to run without CUDA, in one line. ``--self-check`` runs the same code on the CPU at toy sizes (the Triton
kernels through triton's interpreter, wall-clock timing; nothing written): its numbers mean nothing, it shows that
every variant runs and gives a row. Where no GPU has been lent, the README says that the GPU path is exact (the
map tests run on the Triton kernels through triton's interpreter) and that its speed is unmeasured.
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

import torch

ROOT = Path(__file__).resolve().parent.parent
#: where the benchmark runs ("cpu" only for --self-check)
DEVICE = "cuda"


def cuda_time(fn, rounds: int) -> list[float]:
    """Milliseconds of ``fn()`` per round (CUDA events; wall clock on the CPU), after one warm-up call."""
    fn()
    if DEVICE == "cpu":
        out = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            fn()
            out.append(1e3 * (time.perf_counter() - t0))
        return out
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end))
    return out


def interleaved(fns: dict, rounds: int) -> dict[str, float]:
    """Median ms of each variant, the variants interleaved round by round (drifting clocks hit all alike)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            times[k] += cuda_time(f, 1)
    return {k: statistics.median(v) for k, v in times.items()}


def peak_mib(fn) -> float:
    if DEVICE == "cpu":
        return float("nan")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


def normaliser_variants() -> dict:
    from attnkit import entmax15, sparsegen_lin, sparsemax
    from attnkit.attention import kernels

    def forced(path: str, f):
        """``f`` on one path: "triton" (the Triton kernels) or "torch" (attnkit's pure-torch path)."""
        def run(z):
            old = kernels.MODE
            kernels.MODE = path
            try:
                return f(z)
            finally:
                kernels.MODE = old
        return run

    v = {"softmax (eager)": lambda z: torch.softmax(z, -1)}
    for path in ("torch", "triton"):
        v[f"attnkit sparsemax ({path})"] = forced(path, lambda z: sparsemax(z))
        v[f"attnkit sparsegen-lin lam=-4 ({path})"] = forced(path, lambda z: sparsegen_lin(z, -4.0))
        v[f"attnkit entmax15 ({path})"] = forced(path, lambda z: entmax15(z))
    try:
        import entmax

        v["entmax.sparsemax"] = lambda z: entmax.sparsemax(z, -1)
        v["entmax.entmax15"] = lambda z: entmax.entmax15(z, -1)
    except ImportError:
        pass
    try:
        from adasplash import triton_entmax

        v["adasplash alpha=2"] = lambda z: triton_entmax(z, alpha=2.0)
        v["adasplash alpha=1.5"] = lambda z: triton_entmax(z, alpha=1.5)
    except ImportError:
        pass
    return v


def bench_normaliser(lengths, rounds, heads=12, entries=8 * 2**20) -> list[dict]:
    rows = []
    for L in lengths:
        b = max(1, entries // (heads * L * L))
        z = torch.randn(b, heads, L, L, device=DEVICE) * 2
        g = torch.randn_like(z)
        fns = {}
        for name, f in normaliser_variants().items():
            def run(f=f):
                x = z.clone().requires_grad_(True)
                f(x).backward(g)
            fns[name] = run
        t = interleaved(fns, rounds)
        for k, ms in t.items():
            rows.append({"bench": "normaliser fwd+bwd", "shape": f"[{b},{heads},{L},{L}]", "variant": k, "ms": ms,
                         "ratio": ms / t["softmax (eager)"], "peak_mib": peak_mib(fns[k])})
    return rows


SHAPES = {"MiniLM": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536),
          "BERT-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072)}


def bench_models(lengths, rounds, batch: int = 16, shapes: dict | None = None) -> list[dict]:
    from transformers import BertConfig, BertForSequenceClassification

    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.sparsify import sparsify

    rows = []
    for shape, kw in (shapes or SHAPES).items():
        for L in lengths:
            ids = torch.randint(1000, 30000, (batch, L), device=DEVICE)
            mask = torch.ones_like(ids)
            labels = torch.randint(0, 2, (batch,), device=DEVICE)
            variants = {"softmax (eager)": ("eager", None), "sdpa": ("sdpa", None),
                        "attnkit sparsemax": ("attnkit", AttentionSpec("sparsemax")),
                        "attnkit sparsegen-lin lam=-4": ("attnkit", AttentionSpec("sparsegen-lin", -4.0)),
                        "attnkit entmax15": ("attnkit", AttentionSpec("entmax15"))}
            models = {}
            for name, (impl, spec) in variants.items():
                torch.manual_seed(0)
                m = BertForSequenceClassification(BertConfig(max_position_embeddings=max(512, L), **kw))
                if spec is None:
                    m.set_attn_implementation(impl)
                else:
                    sparsify(m, spec.attention, spec.lam)
                models[name] = m.to(DEVICE)
            opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-5) for k, m in models.items()}

            def step(k):
                def run():
                    opts[k].zero_grad(set_to_none=True)
                    models[k].train()(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
                    opts[k].step()
                return run

            def infer(k):
                def run():
                    with torch.inference_mode():
                        models[k].eval()(input_ids=ids, attention_mask=mask)
                return run

            for what, make in (("train step", step), ("inference", infer)):
                fns = {k: make(k) for k in models}
                t = interleaved(fns, rounds)
                for k, ms in t.items():
                    rows.append({"bench": f"{shape} {what}", "shape": f"b{batch} x L{L}", "variant": k, "ms": ms,
                                 "ratio": ms / t["softmax (eager)"], "peak_mib": peak_mib(fns[k])})
            del models, opts
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    return rows


def self_check() -> int:
    """Every variant of both benchmarks, on the CPU at toy sizes; the Triton kernels through triton's interpreter."""
    global DEVICE
    import os

    if os.environ.get("TRITON_INTERPRET") != "1":
        print("benchmarks/gpu.py --self-check: set TRITON_INTERPRET=1 (the Triton kernels run interpreted on the CPU)", file=sys.stderr)
        return 2
    from attnkit.attention import kernels

    if kernels.triton_kernels() is None:
        print(f"benchmarks/gpu.py --self-check: the Triton kernels are unavailable ({kernels.backend_reason()})", file=sys.stderr)
        return 2
    DEVICE = "cpu"
    tiny = {"tiny BERT": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)}
    rows = bench_normaliser([8, 16], rounds=1, heads=2, entries=2 * 2 * 16 * 16) + bench_models([8], rounds=1, batch=2, shapes=tiny)
    print(to_markdown(rows))
    want = len(normaliser_variants()) * 2 + 5 * 2
    if len(rows) != want or not all(r["ms"] > 0 for r in rows):
        print(f"benchmarks/gpu.py --self-check: {len(rows)} rows, expected {want}", file=sys.stderr)
        return 1
    print(f"self-check: {len(rows)} rows, every variant ran (CPU, toy sizes: the times mean nothing)")
    return 0


def to_markdown(rows) -> str:
    out = ["| bench | shape | variant | time (ms) | ratio to softmax | peak memory (MiB) |", "|---|---|---|---|---|---|"]
    out += [f"| {r['bench']} | {r['shape']} | {r['variant']} | {r['ms']:.2f} | {r['ratio']:.2f}x | {r['peak_mib']:.0f} |" for r in rows]
    return "\n".join(out) + "\n"


def environment() -> dict:
    """The date, GPU and versions a GPU result was measured with (triton None where it is not installed)."""
    import importlib.util

    import transformers

    triton = importlib.util.find_spec("triton") is not None
    return {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "gpu": torch.cuda.get_device_name(),
            "torch": torch.__version__, "cuda": torch.version.cuda, "transformers": transformers.__version__,
            "triton": __import__("triton").__version__ if triton else None, "python": platform.python_version()}


def save(out: str, title: str, env: dict, rows: list[dict], markdown: str) -> None:
    """``out`` (JSON: environment, the command that ran, rows) and the markdown table beside it, and the table printed."""
    result = {"environment": env, "command": f"python -m benchmarks.{Path(sys.argv[0]).stem} " + " ".join(sys.argv[1:]), "rows": rows}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(result, indent=2) + "\n")
    Path(out).with_suffix(".md").write_text(f"# {title}\n\n{json.dumps(env)}\n\n" + markdown)
    print(markdown)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/gpu.json"))
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--lengths", nargs="+", type=int, default=[128, 512, 2048, 4096])
    ap.add_argument("--model-lengths", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--self-check", action="store_true", help="run every variant on the CPU at toy sizes (Triton interpreted); write nothing")
    a = ap.parse_args()
    if a.self_check:
        return self_check()
    if not torch.cuda.is_available():
        print("benchmarks/gpu.py: no CUDA device here (torch.cuda.is_available() is False): run it on a GPU machine", file=sys.stderr)
        return 2
    from attnkit.attention import kernels

    if kernels.triton_kernels() is None:
        print(f"benchmarks/gpu.py: the Triton kernels are unavailable ({kernels.backend_reason()}): pip install -e '.[gpu]'", file=sys.stderr)
        return 2
    rows = bench_normaliser(a.lengths, a.rounds) + bench_models(a.model_lengths, max(5, a.rounds // 4))
    save(a.out, "attnkit on a GPU", environment(), rows, to_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
