"""Flash sparse attention (issue 47) against SDPA and the materialised path: fwd+bwd time and peak memory.

CPU (always): attnkit's ``sparse_attention`` (sparsemax, 1.5-entmax), ``torch.nn.functional.scaled_dot_product_attention``
and today's materialised path (scores -> attnkit map -> @ v, autograd), float32, L = 128 ... 4096 (B 2, H 12, D 64
up to L = 1024; B 1, H 4 beyond). Time: median of the rounds, variants interleaved round by round (ratios are taken
side by side in one run: these machines are noisy). Memory: the extra peak resident memory of one fwd+bwd, each
(variant, length) in a fresh process (VmHWM reset through /proc/self/clear_refs after the inputs exist and the
kernels are loaded).

    python -m benchmarks.flash --out benchmarks/results/flash_cpu_2026-11-27.md          # CPU, 2 threads
    python -m benchmarks.flash --gpu --out benchmarks/results/flash_gpu_<gpu>_<date>.md  # CUDA only

GPU (``--gpu``; needs CUDA, runs unattended): the same sparse maps (the Triton backend) against SDPA and
FlashAttention-2 (the flash-attn package where importable, else SDPA's flash backend), bf16, L = 128 ... 16384, head
dims 32/64/128, B x L = 16384 tokens, H = 16; time by CUDA events (median), peak memory by
``torch.cuda.max_memory_allocated`` above the inputs. Each run writes its own markdown table, with the machine, the
versions, the command and the date.

The scores are ``q kᵀ / sqrt(D)`` with q ~ N(0, 4), k ~ N(0, 1): rows of spread 2, as ``benchmarks/speed.py``'s.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from attnkit.attention.entmax import entmax15
from attnkit.attention.flash import sparse_attention
from attnkit.attention.maps import sparsemax

ROOT = Path(__file__).resolve().parents[1]

CPU_LENGTHS = (128, 256, 512, 1024, 2048, 4096)
GPU_LENGTHS = (128, 256, 512, 1024, 2048, 4096, 8192, 16384)
CPU_VARIANTS = ("sdpa", "flash sparsemax", "flash entmax15", "materialised sparsemax", "materialised entmax15")
TARGET_TIME, TARGET_MEMORY = 1.2, 1.2  # the targets: at most 1.2x SDPA's time (L >= 512) and peak memory


def cpu_shape(L: int) -> tuple[int, int, int, int]:
    return (2, 12, L, 64) if L <= 1024 else (1, 4, L, 64)


def inputs(shape, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator(device=device).manual_seed(seed)
    q = (torch.randn(shape, generator=g, device=device) * 2).to(dtype).requires_grad_()
    k, v = (torch.randn(shape, generator=g, device=device).to(dtype).requires_grad_() for _ in range(2))
    do = torch.randn(shape, generator=g, device=device).to(dtype)
    return q, k, v, do


def materialised(q, k, v, fn):
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    return fn(s) @ v


def variant_fn(name: str, flash_attn_func=None):
    """fn(q, k, v) -> out for a variant name."""
    if name == "sdpa":
        return F.scaled_dot_product_attention
    if name.startswith("flash ") and name.split()[1] in ("sparsemax", "entmax15"):
        att = name.split()[1]
        return lambda q, k, v: sparse_attention(q, k, v, attention=att)
    if name == "materialised sparsemax":
        return lambda q, k, v: materialised(q, k, v, sparsemax)
    if name == "materialised entmax15":
        return lambda q, k, v: materialised(q, k, v, entmax15)
    if name == "flash-attn 2":
        return lambda q, k, v: flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2)
    if name == "sdpa flash backend":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def run(q, k, v):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v)
        return run
    raise ValueError(f"unknown variant {name!r}")


def time_rounds(runs: dict, rounds: int, warmup: int = 1, sync=lambda: None) -> dict[str, float]:
    """Median seconds per call of each variant; variants interleaved round by round."""
    for r in runs.values():
        for _ in range(warmup):
            r()
    sync()
    times = {k: [] for k in runs}
    for _ in range(rounds):
        for k, r in runs.items():
            sync()
            t = time.perf_counter()
            r()
            sync()
            times[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in times.items()}


def fwd_bwd(fn, q, k, v, do):
    def run():
        q.grad = k.grad = v.grad = None
        fn(q, k, v).backward(do)
    return run


# ----------------------------------------------------------------------------- CPU

_MEMORY_CODE = """
import sys
import torch
torch.set_num_threads({threads})
sys.argv = ['flash']
from benchmarks.flash import inputs, variant_fn, fwd_bwd

def status(key):
    with open('/proc/self/status') as fh:
        return next(int(l.split()[1]) * 1024 for l in fh if l.startswith(key + ':'))

fn = variant_fn({variant!r})
fwd_bwd(fn, *inputs(({B}, {H}, 64, {D})))()  # kernels loaded, first-call allocations done
args = inputs(({B}, {H}, {L}, {D}))
try:  # the high-water mark reset to the current RSS: inputs, imports and kernel loading do not count
    with open('/proc/self/clear_refs', 'w') as fh:
        fh.write('5')
except OSError:
    pass
base = status('VmRSS')
fwd_bwd(fn, *args)()
print(max(0, max(status('VmHWM'), status('VmRSS')) - base))
"""


def cpu_memory(variant: str, L: int, threads: int) -> int:
    B, H, _, D = cpu_shape(L)
    code = _MEMORY_CODE.format(root=str(ROOT), threads=threads, variant=variant, B=B, H=H, L=L, D=D)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"memory run {variant} L={L} failed: {r.stderr[-2000:]}")
    return int(r.stdout.strip().splitlines()[-1])


def bench_cpu(lengths, rounds: int, threads: int, memory: bool = True) -> list[dict]:
    rows = []
    for L in lengths:
        shape = cpu_shape(L)
        q, k, v, do = inputs(shape)
        runs = {name: fwd_bwd(variant_fn(name), q, k, v, do) for name in CPU_VARIANTS}
        t = time_rounds(runs, rounds if L < 2048 else max(3, rounds // 2))
        mem = {name: cpu_memory(name, L, threads) for name in CPU_VARIANTS} if memory else {}
        for name in CPU_VARIANTS:
            rows.append({"L": L, "shape": list(shape), "variant": name, "ms": t[name] * 1e3, "time_ratio": t[name] / t["sdpa"],
                         "peak_mib": mem[name] / 2**20 if memory else None,
                         "memory_ratio": mem[name] / max(1, mem["sdpa"]) if memory else None})
        print(f"L={L}: " + ", ".join(f"{r['variant']} {r['ms']:.1f} ms ({r['time_ratio']:.2f}x)" for r in rows[-len(CPU_VARIANTS):]),
              flush=True)
        del q, k, v, do, runs
    return rows


def cpu_table(rows) -> str:
    out = ["| L | shape (B,H,L,D) | variant | fwd+bwd (ms) | time / SDPA | peak extra memory (MiB) | memory / SDPA |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        mem = f"{r['peak_mib']:.1f} | {r['memory_ratio']:.2f}x" if r["peak_mib"] is not None else "– | –"
        out.append(f"| {r['L']} | {tuple(r['shape'])} | {r['variant']} | {r['ms']:.1f} | {r['time_ratio']:.2f}x | {mem} |")
    return "\n".join(out) + "\n"


def cpu_verdict(rows) -> str:
    """Whether the issue's CPU targets are met, per map, at L >= 512, and by what margin."""
    lines = []
    for att in ("sparsemax", "entmax15"):
        sel = [r for r in rows if r["variant"] == f"flash {att}" and r["L"] >= 512]
        if not sel:
            continue
        worst_t = max(sel, key=lambda r: r["time_ratio"])
        ok_t = all(r["time_ratio"] <= TARGET_TIME for r in sel)
        per_l = ", ".join(f"{r['L']}: {r['time_ratio']:.2f}x" for r in sel)
        lines.append(f"- flash {att}, time at L >= 512 (target <= {TARGET_TIME}x SDPA): **{'met' if ok_t else 'not met'}** — "
                     f"worst {worst_t['time_ratio']:.2f}x at L = {worst_t['L']} (margin {TARGET_TIME - worst_t['time_ratio']:+.2f}); {per_l}")
        if sel[0]["memory_ratio"] is not None:
            worst_m = max(sel, key=lambda r: r["memory_ratio"])
            ok_m = all(r["memory_ratio"] <= TARGET_MEMORY for r in sel)
            per_l = ", ".join(f"{r['L']}: {r['memory_ratio']:.2f}x" for r in sel)
            lines.append(f"- flash {att}, peak memory at L >= 512 (target <= {TARGET_MEMORY}x SDPA): **{'met' if ok_m else 'not met'}** — "
                         f"worst {worst_m['memory_ratio']:.2f}x at L = {worst_m['L']} (margin {TARGET_MEMORY - worst_m['memory_ratio']:+.2f}); {per_l}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- GPU


def bench_gpu(lengths, head_dims, rounds: int, tokens: int = 16384, heads: int = 16) -> list[dict]:
    try:
        from flash_attn import flash_attn_func
        fa_name = "flash-attn 2"
    except ImportError:
        flash_attn_func, fa_name = None, "sdpa flash backend"
    names = ("sdpa", fa_name, "flash sparsemax", "flash entmax15")
    rows = []
    for D in head_dims:
        for L in lengths:
            B = max(1, tokens // L)
            shape = (B, heads, L, D)
            q, k, v, do = inputs(shape, torch.bfloat16, "cuda")
            res = {}
            for name in names:
                run = fwd_bwd(variant_fn(name, flash_attn_func), q, k, v, do)
                try:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    run()
                    torch.cuda.synchronize()
                    peak = torch.cuda.max_memory_allocated() - base
                    res[name] = (time_rounds({name: run}, rounds, sync=torch.cuda.synchronize)[name], peak)
                except (RuntimeError, torch.cuda.OutOfMemoryError) as e:  # e.g. a map's kernel refusing a shape
                    res[name] = (float("nan"), float("nan"))
                    print(f"{name} L={L} D={D}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", flush=True)
                    torch.cuda.empty_cache()
            for name in names:
                t, m = res[name]
                rows.append({"L": L, "D": D, "shape": list(shape), "variant": name, "ms": t * 1e3, "time_ratio": t / res["sdpa"][0],
                             "peak_mib": m / 2**20, "memory_ratio": m / max(1, res["sdpa"][1])})
            print(f"D={D} L={L}: " + ", ".join(f"{r['variant']} {r['ms']:.2f} ms" for r in rows[-len(names):]), flush=True)
            del q, k, v, do
            torch.cuda.empty_cache()
    return rows


def gpu_table(rows) -> str:
    out = ["| D | L | shape (B,H,L,D) | variant | fwd+bwd (ms) | time / SDPA | peak memory (MiB) | memory / SDPA |",
           "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['D']} | {r['L']} | {tuple(r['shape'])} | {r['variant']} | {r['ms']:.2f} | {r['time_ratio']:.2f}x | "
                   f"{r['peak_mib']:.0f} | {r['memory_ratio']:.2f}x |")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- report


def environment(gpu: bool) -> dict:
    from attnkit.attention import kernels

    try:
        import transformers
        transformers_version = transformers.__version__
    except ImportError:  # the GPU section needs only torch and triton
        transformers_version = None

    cpu = platform.processor() or platform.uname().processor
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
    except OSError:
        pass
    env = {"date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": platform.machine(), "cpu": cpu,
           "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
           "torch": torch.__version__, "transformers": transformers_version, "attnkit map kernel": kernels.backend_reason()}
    if gpu:
        env.update(gpu=torch.cuda.get_device_name(), cuda=torch.version.cuda)
        try:
            import triton
            env["triton"] = triton.__version__
        except ImportError:
            env["triton"] = None
        try:
            import flash_attn
            env["flash_attn"] = flash_attn.__version__
        except ImportError:
            env["flash_attn"] = None
    return env


def write_result(out: Path, body: str, record: dict) -> None:
    """A benchmark's markdown at ``out`` and its record (environment, command, rows) as JSON beside it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body)
    out.with_suffix(".json").write_text(json.dumps(record, indent=2) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", action="store_true", help="the GPU section (CUDA only) instead of the CPU one")
    ap.add_argument("--lengths", type=int, nargs="+", help="sequence lengths (default: 128 ... 4096 on CPU, ... 16384 on GPU)")
    ap.add_argument("--head-dims", type=int, nargs="+", default=[32, 64, 128], help="GPU head dims")
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per variant (halved, at least 3, at L >= 2048 on CPU)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads on CPU")
    ap.add_argument("--no-memory", action="store_true", help="skip the CPU memory runs (one process each)")
    ap.add_argument("--out", help="markdown file to write (default: benchmarks/results/flash_{cpu,gpu}_<date>.md)")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.flash " + " ".join(sys.argv[1:] if argv is None else argv)
    date = dt.date.today().isoformat()
    if args.gpu:
        if not torch.cuda.is_available():
            print("flash benchmark: --gpu needs CUDA, and torch sees no CUDA device here", file=sys.stderr)
            return 2
        env = environment(True)
        rows = bench_gpu(args.lengths or GPU_LENGTHS, args.head_dims, args.rounds)
        tag = torch.cuda.get_device_name().lower().replace(" ", "_")
        out = Path(args.out or ROOT / "benchmarks" / "results" / f"flash_gpu_{tag}_{date}.md")
        body = (f"# Flash sparse attention, GPU: fwd+bwd against SDPA and FlashAttention-2\n\nCommand: `{command}`\n\n"
                f"Environment: `{json.dumps(env)}`\n\nbf16, B x L = 16384 tokens, H = 16; median of {args.rounds} rounds "
                f"(CUDA-synchronised); peak memory above the inputs (torch.cuda.max_memory_allocated).\n\n" + gpu_table(rows))
    else:
        torch.set_num_threads(args.threads)
        env = environment(False)
        rows = bench_cpu(args.lengths or CPU_LENGTHS, args.rounds, args.threads, memory=not args.no_memory)
        out = Path(args.out or ROOT / "benchmarks" / "results" / f"flash_cpu_{date}.md")
        body = (f"# Flash sparse attention, CPU: fwd+bwd against SDPA and the materialised path\n\nCommand: `{command}`\n\n"
                f"Environment: `{json.dumps(env)}`\n\nfloat32, {args.threads} torch threads; median of {args.rounds} rounds "
                f"(at least 3, halved at L >= 2048), variants interleaved; peak extra resident memory of one fwd+bwd in a "
                f"fresh process per cell.\n\n## Targets\n\n" + cpu_verdict(rows) + "\n## Table\n\n" + cpu_table(rows))
    write_result(out, body, {"environment": env, "command": command, "rows": rows})
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
