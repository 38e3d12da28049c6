"""attnkit's sparse maps on a GPU against the float64 reference on the CPU: one command, results as JSON + markdown.

    python -m benchmarks.gpu_exact --out benchmarks/results/gpu_exact.json

For sparsemax, sparsegen-lin (lam -4) and 1.5-entmax, rows of each ``--lengths`` (about 2M scores each) with -inf
padding on a quarter of the rows, a fully masked row, a row of ties and a row shifted by 1e6, as float32, bfloat16
and float16 CUDA tensors (the Triton kernels where triton is importable): the output and the gradient against the
same map in float64 on the CPU (the pure-torch path: a full sort) of the input as the GPU saw it (rounded to its
dtype); the entries whose zero/non-zero differs (a support difference; with bf16/fp16 ties at the threshold it can
happen and moves the gradient), NaNs, the masked row's zeros and the row sums. The first call of each case includes
Triton's compile. It refuses to run without CUDA, in one line; ``--self-check`` runs the same on the CPU at toy sizes
(the Triton kernels through triton's interpreter; nothing written). The speed is ``benchmarks/gpu.py``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
#: the largest difference from the float64 reference a row of each input dtype may show (its rounding of p)
TOL = {torch.float32: 1e-5, torch.bfloat16: 2e-2, torch.float16: 2e-3}


def maps() -> dict:
    from attnkit.attention.entmax import entmax15
    from attnkit.attention.maps import sparsegen_lin, sparsemax

    return {"sparsemax": sparsemax, "sparsegen-lin (lam -4)": lambda z: sparsegen_lin(z, lam=-4.0), "1.5-entmax": entmax15}


def scores(rows: int, n: int) -> torch.Tensor:
    """float64 scores [rows, n]: padding on a quarter of the rows, row 1 fully masked, row 2 all ties, row 3 + 1e6."""
    z = torch.randn(rows, n, dtype=torch.float64) * 3
    z[: rows // 4, n // 2:] = float("-inf")
    z[1] = float("-inf")
    z[2] = 5.0
    z[3] += 1e6
    return z


@contextlib.contextmanager
def torch_path():
    """The maps' pure-torch path (exact: a full sort) while the reference is computed, whatever ATTNKIT_KERNEL says."""
    from attnkit.attention import kernels

    mode, kernels.MODE = kernels.MODE, "torch"
    try:
        yield
    finally:
        kernels.MODE = mode


def check(name: str, fn, z: torch.Tensor, dtype: torch.dtype, device: str) -> dict:
    g = torch.randn(z.shape, dtype=torch.float64)
    zd = z.to(device, dtype).requires_grad_(True)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    pd = fn(zd)
    (pd.float() * g.to(device, torch.float32)).sum().backward()
    sync()
    ms = 1e3 * (time.perf_counter() - t0)
    zq = zd.detach().double().cpu().requires_grad_(True)  # the input as the GPU saw it
    with torch_path():
        pq = fn(zq)
        (pq * g).sum().backward()
    p, gr = pd.detach().double().cpu(), zd.grad.double().cpu()
    err = (p - pq.detach()).abs().max().item()
    gerr = (gr - zq.grad).nan_to_num(0).abs().max().item()
    nan = bool(torch.isnan(p).any() or torch.isnan(gr).any())
    masked_zero = bool((p[1] == 0).all())
    sum_err = (p[2:].sum(-1) - 1).abs().max().item()
    ok = err <= TOL[dtype] and not nan and masked_zero and sum_err <= 10 * TOL[dtype]
    return {"map": name, "dtype": str(dtype).removeprefix("torch."), "rows": z.shape[0], "length": z.shape[1],
            "max_abs_diff": err, "max_abs_grad_diff": gerr, "support_differences": int(((p == 0) != (pq.detach() == 0)).sum()),
            "entries": p.numel(), "nan": nan, "masked_row_zero": masked_zero, "max_row_sum_error": sum_err,
            "first_call_ms": ms, "ok": ok}


def run(lengths: list[int], entries: int, device: str) -> list[dict]:
    torch.manual_seed(0)
    rows = []
    for n in lengths:
        z = scores(max(8, entries // n), n)
        for name, fn in maps().items():
            for dtype in TOL:
                r = check(name, fn, z, dtype, device)
                rows.append(r)
                print(f"L={n:5d} {name:22s} {r['dtype']:9s} |p-ref| {r['max_abs_diff']:.1e} |grad-ref| {r['max_abs_grad_diff']:.1e} "
                      f"support diffs {r['support_differences']}/{r['entries']} {'ok' if r['ok'] else 'FAIL'}", flush=True)
    return rows


def to_markdown(rows: list[dict]) -> str:
    out = ["| map | input | L | max abs diff | max abs grad diff | support differences | masked row zero | NaN | ok |",
           "|---|---|---|---|---|---|---|---|---|"]
    out += [f"| {r['map']} | {r['dtype']} | {r['length']} | {r['max_abs_diff']:.1e} | {r['max_abs_grad_diff']:.1e} | "
            f"{r['support_differences']} of {r['entries']:,} | {r['masked_row_zero']} | {r['nan']} | {'yes' if r['ok'] else '**no**'} |"
            for r in rows]
    return "\n".join(out) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/gpu_exact.json"))
    ap.add_argument("--lengths", nargs="+", type=int, default=[7, 128, 1000, 4096])
    ap.add_argument("--entries", type=int, default=2 ** 21, help="scores per length (rows = entries / length)")
    ap.add_argument("--self-check", action="store_true", help="the same on the CPU at toy sizes, Triton interpreted; write nothing")
    a = ap.parse_args()
    from attnkit.attention import kernels

    if a.self_check:
        if os.environ.get("TRITON_INTERPRET") != "1" or kernels.MODE != "triton":
            print("benchmarks/gpu_exact.py --self-check: set TRITON_INTERPRET=1 ATTNKIT_KERNEL=triton", file=sys.stderr)
            return 2
        rows = run([7, 33], 8 * 33, "cpu")
        print(to_markdown(rows))
        return 0 if all(r["ok"] for r in rows) else 1
    if not torch.cuda.is_available():
        print("benchmarks/gpu_exact.py: no CUDA device here (torch.cuda.is_available() is False): run it on a GPU machine", file=sys.stderr)
        return 2
    from benchmarks.gpu import environment, save  # the same record of where and with what

    rows = run(a.lengths, a.entries, "cuda")
    env = {**environment(), "path": "triton" if kernels.triton_kernels() is not None else "torch"}
    save(a.out, "attnkit's sparse maps on a GPU against float64", env, rows, to_markdown(rows))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
