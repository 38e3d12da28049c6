"""A/B timing of two builds of the compiled sparse-map kernel, interleaved in one process.

Builds the kernel source of an older revision (``--base``, read with ``git show``) beside the current
one, then times forward + backward of both on the same tensors, alternating A and B every round, and
prints the median time of each and the ratio B / A. Interleaving makes the ratio robust to a machine
whose load changes during the run (other processes slow A and B alike).

    python -m benchmarks.kernel_ab --base f502a18 --threads 1 --out benchmarks/results/kernel_ab_v12_v13.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
SOURCE = "attnkit/attention/csrc/sparsemax_cpu.cpp"


def build(src_text: str, name: str):
    from torch.utils.cpp_extension import load

    from attnkit.attention.kernel_build import FLAGS, OPENMP

    d = Path(tempfile.mkdtemp(prefix=name))
    (d / "k.cpp").write_text(src_text)
    return load(name=name, sources=[str(d / "k.cpp")], extra_cflags=FLAGS + OPENMP, extra_ldflags=OPENMP, verbose=False)


def fwd_bwd(ext, z, g, scale):
    p = ext.forward(z, scale)[0]
    return ext.backward(p, g, scale)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="git revision whose kernel source is A")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=41)
    ap.add_argument("--shapes", nargs="+", default=["32,12,64,64", "8,12,128,128", "4,12,256,256"])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    for where in (SOURCE, "attnkit/csrc/sparsemax_cpu.cpp"):  # the kernel's place now, and before the package layers
        shown = subprocess.run(["git", "show", f"{a.base}:{where}"], cwd=ROOT, capture_output=True, text=True)
        if shown.returncode == 0:
            old_src = shown.stdout
            break
    else:
        raise SystemExit(f"{a.base} has no {SOURCE} (nor attnkit/csrc/sparsemax_cpu.cpp)")
    new_src = (ROOT / SOURCE).read_text()
    A = build(old_src, f"attnkit_ab_a_{a.base[:7]}")
    B = build(new_src, "attnkit_ab_b_current")
    rows = []
    for shape in a.shapes:
        dims = [int(x) for x in shape.split(",")]
        gen = torch.Generator().manual_seed(0)
        z = torch.randn(*dims, generator=gen) * 3
        z[..., -dims[-1] // 4 :] = -float("inf")  # a padded quarter, as in a batch
        g = torch.randn(*dims, generator=gen)
        for lam in (0.0, -4.0):
            scale = 1.0 / (1.0 - lam)
            assert torch.allclose(A.forward(z, scale)[0], B.forward(z, scale)[0], atol=1e-6)
            ta, tb = [], []
            for _ in range(3):
                fwd_bwd(A, z, g, scale), fwd_bwd(B, z, g, scale)
            for r in range(a.rounds):
                for ext, ts in ((A, ta), (B, tb)) if r % 2 == 0 else ((B, tb), (A, ta)):
                    t0 = time.perf_counter()
                    fwd_bwd(ext, z, g, scale)
                    ts.append(time.perf_counter() - t0)
            ma, mb = statistics.median(ta), statistics.median(tb)
            rows.append({"shape": shape, "lam": lam, "a_ms": round(1e3 * ma, 4), "b_ms": round(1e3 * mb, 4), "b_over_a": round(mb / ma, 3)})
            print(f"{shape:>14} lam {lam:>4g}: A {1e3 * ma:.3f} ms  B {1e3 * mb:.3f} ms  B/A {mb / ma:.3f}", flush=True)
    res = {
        "command": "python -m benchmarks.kernel_ab " + " ".join(f"--{k.replace('_', '-')} {v if not isinstance(v, list) else ' '.join(v)}" for k, v in vars(a).items() if v is not None),
        "a": f"{a.base} {where}", "b": "working tree", "what": "forward + backward, float32, median of rounds",
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": f"{platform.machine()}, {torch.get_num_threads()} torch threads",
        "torch": torch.__version__, "rows": rows,
    }
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1) + "\n")


if __name__ == "__main__":
    main()
