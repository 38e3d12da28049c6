"""A short check of the flash Triton kernels on a lent GPU against a float64 materialised reference (sparsemax,
1.5-entmax, entmax-alpha 1.3, sparsegen-lin at lam 0.9999999), forward and backward, bf16 and float32; CUDA only.

    python -m benchmarks.flash_gpu_check
"""

from __future__ import annotations

import argparse
import sys

import torch

from attnkit.attention.entmax import entmax15, entmax_bisect
from attnkit.attention.flash import attention_weights, sparse_attention
from attnkit.attention.maps import sparsegen_lin, sparsemax

CASES = {"sparsemax": ({}, lambda s: sparsemax(s, dim=-1)), "entmax15": ({}, lambda s: entmax15(s, dim=-1)),
         "entmax-alpha": ({"alpha": 1.3}, lambda s: entmax_bisect(s, alpha=1.3, dim=-1, n_iter=100)),
         "sparsegen-lin": ({"lam": 0.9999999}, lambda s: sparsegen_lin(s, lam=0.9999999))}


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                            formatter_class=argparse.RawDescriptionHelpFormatter).parse_args(argv)
    if not torch.cuda.is_available():
        print("flash_gpu_check: needs CUDA", file=sys.stderr)
        return 2
    g = torch.Generator().manual_seed(0)
    worst = 0.0
    for dtype, tol in ((torch.float32, 1e-4), (torch.bfloat16, 5e-2)):
        for name, (kw, ref_map) in CASES.items():
            if name == "sparsegen-lin" and dtype != torch.float32:
                continue  # (at lam 0.9999999 bf16's rounded scores may tie differently from float64's)
            q, k, v, do = (torch.randn(2, 4, 300, 64, generator=g) for _ in range(4))
            q = q * 2
            qc, kc, vc = (t.to("cuda", dtype).requires_grad_() for t in (q, k, v))
            out = sparse_attention(qc, kc, vc, attention=name, **kw)
            out.backward(do.to("cuda", dtype))
            q64, k64, v64 = (t.to(dtype).double().requires_grad_() for t in (q, k, v))
            p = ref_map((q64 @ k64.transpose(-1, -2)) * 64**-0.5)
            ref = p @ v64
            ref.backward(do.to(dtype).double())
            w = attention_weights(qc.detach(), kc.detach(), vc.detach(), attention=name, **kw).double().cpu()
            errs = {"out": (out.double().cpu() - ref).abs().max().item(), "rows": (w.sum(-1) - 1).abs().max().item()}
            for n, a, b in (("dq", qc, q64), ("dk", kc, k64), ("dv", vc, v64)):
                errs[n] = ((a.grad.double().cpu() - b.grad).abs().max() / b.grad.abs().max()).item()
            worst = max(worst, max(errs.values()) / tol)
            print(f"{str(dtype):15} {name:14} " + " ".join(f"{n} {e:.1e}" for n, e in errs.items()), flush=True)
    print(f"worst error / tolerance: {worst:.2f} ({'ok' if worst <= 1 else 'FAILED'})")
    return 0 if worst <= 1 else 1


if __name__ == "__main__":
    sys.exit(main())
