"""The flash Triton kernels' launch settings on a GPU: forward and backward apart, per tile size and warp count, with
the powers read at run time (log2 / exp2 per entry) and compiled in (sparsemax, 1.5-entmax: products), against
SDPA's forward and forward+backward on the same inputs. CUDA only.

    python -m benchmarks.flash_configs --out benchmarks/results/flash_configs_<gpu>_<date>.md

bf16, H = 16, D = 64, B x L = 16384 tokens (as ``benchmarks/flash.py``'s GPU section, same inputs); each time the
median of ``--rounds`` CUDA-event timings after one warm-up (which compiles), settings interleaved round by round.
The default settings of :mod:`attnkit.attention.flash_triton` are the row marked "default".
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.flash import environment, inputs, write_result

#: (block_m, block_n, num_warps, num_stages); None: flash_triton's default
FWD_CONFIGS = ((None, None, None, None), (64, 64, 8, None), (128, 64, 4, None), (128, 64, 8, None), (64, 32, 4, None),
               (32, 64, 4, None))
BWD_CONFIGS = ((None, None, None, None), (64, 64, 8, None), (128, 64, 8, None), (32, 64, 4, None))
MAPS = {"sparsemax": 2.0, "entmax15": 1.5}
#: where it runs ("cpu" only in the layout test's smoke run, through triton's interpreter)
DEVICE = "cuda"


def cuda_ms(fns: dict, rounds: int) -> dict[str, float]:
    """Median ms per call of each fn (CUDA events), one warm-up each, interleaved round by round."""
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, f in fns.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            f()
            b.record()
            torch.cuda.synchronize()
            times[k].append(a.elapsed_time(b))
    return {k: statistics.median(v) for k, v in times.items()}


def label(cfg) -> str:
    bm, bn, w, s = cfg
    if cfg == (None, None, None, None):
        return "default"
    return f"BM {bm} BN {bn} warps {w}" + (f" stages {s}" if s else "")


def bench(L: int, rounds: int, D: int = 64, heads: int = 16, tokens: int = 16384) -> list[dict]:
    from attnkit.attention import flash_triton as ft

    B = max(1, tokens // L)
    q, k, v, do = inputs((B, heads, L, D), torch.bfloat16, DEVICE)
    q, k, v = (t.detach() for t in (q, k, v))
    scale = D**-0.5
    rows = []

    def sdpa_fb():
        qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
        F.scaled_dot_product_attention(qq, kk, vv).backward(do)

    base = cuda_ms({"sdpa fwd": lambda: F.scaled_dot_product_attention(q, k, v), "sdpa fwd+bwd": sdpa_fb}, rounds)
    for name, a in MAPS.items():
        alpha = torch.full((heads,), a, device=DEVICE)
        fwd = {}
        for cfg in FWD_CONFIGS:
            bm, bn, w, s = cfg
            for hint in (None, a):
                if hint is None and cfg != FWD_CONFIGS[0]:
                    continue  # the run-time powers at the default settings only: the kernel before compiled powers
                kw = dict(fixed_alpha=hint, block_m=bm, block_n=bn, num_warps=w, num_stages=s)
                fwd[(label(cfg), hint)] = lambda kw=kw: ft.forward(q, k, v, None, alpha, scale, **kw)
        # the default without each row's largest scores kept in pass 1 (ft.TOPK): the search from -1 every time
        fwd[(f"default, topk 0 (not {ft.TOPK})", a)] = lambda: ft.forward(q, k, v, None, alpha, scale, fixed_alpha=a, topk=0)
        for (cfg, hint), ms in cuda_ms(fwd, rounds).items():
            rows.append({"L": L, "map": name, "pass": "forward", "settings": cfg,
                         "powers": "compiled" if hint else "run time", "ms": ms, "ratio": ms / base["sdpa fwd"]})
        out, tau, aux = ft.forward(q, k, v, None, alpha, scale, fixed_alpha=a)
        bwd = {}
        for cfg in BWD_CONFIGS:
            bm, bn, w, s = cfg
            for hint in (None, a):
                if hint is None and cfg != BWD_CONFIGS[0]:
                    continue
                kw = dict(fixed_alpha=hint, block_m=bm, block_n=bn, num_warps=w, num_stages=s)
                bwd[(label(cfg), hint)] = lambda kw=kw: ft.backward(q, k, v, None, alpha, scale, out, tau, aux, do, False, **kw)
        for (cfg, hint), ms in cuda_ms(bwd, rounds).items():
            rows.append({"L": L, "map": name, "pass": "backward", "settings": cfg,
                         "powers": "compiled" if hint else "run time", "ms": ms,
                         "ratio": ms / (base["sdpa fwd+bwd"] - base["sdpa fwd"])})
        print(f"L={L} {name}: " + ", ".join(f"{r['pass'][:3]} {r['settings']} {r['powers']} {r['ms']:.2f}" for r in rows if r["map"] == name and r["L"] == L), flush=True)
    rows.append({"L": L, "map": "sdpa", "pass": "forward", "settings": "", "powers": "", "ms": base["sdpa fwd"], "ratio": 1.0})
    rows.append({"L": L, "map": "sdpa", "pass": "backward", "settings": "", "powers": "",
                 "ms": base["sdpa fwd+bwd"] - base["sdpa fwd"], "ratio": 1.0})
    return rows


def table(rows) -> str:
    out = ["| L | map | pass | settings | powers | ms | / SDPA's same pass |", "|---|---|---|---|---|---|---|"]
    out += [f"| {r['L']} | {r['map']} | {r['pass']} | {r['settings']} | {r['powers']} | {r['ms']:.2f} | {r['ratio']:.2f}x |" for r in rows]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[2048, 8192])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", required=True, help="markdown file to write (a .json beside it)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("benchmarks/flash_configs.py: needs CUDA, and torch sees no CUDA device here", file=sys.stderr)
        return 2
    command = "python -m benchmarks.flash_configs " + " ".join(sys.argv[1:] if argv is None else argv)
    env = environment(True)
    out = Path(args.out)
    rows = []
    for L in args.lengths:  # the files rewritten after each length: a run cut short keeps what it measured
        rows += bench(L, args.rounds)
        body = (f"# Flash Triton kernels: launch settings and compiled powers\n\nCommand: `{command}`\n\nEnvironment: "
                f"`{json.dumps(env)}`\n\nbf16, H 16, D 64, B x L = 16384 tokens; median of {args.rounds} CUDA-event "
                f"rounds. SDPA's backward is its fwd+bwd minus its forward.\n\n" + table(rows))
        date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        write_result(out, body, {"environment": env, "command": command, "date": date, "rows": rows})
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
