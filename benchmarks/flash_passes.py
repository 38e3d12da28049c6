"""How much work the flash forward's threshold search does, counted rather than timed: per query block, the passes
over the key blocks (the row max, the search, the output) and the key tiles computed (each a q kᵀ tile). The counts
are the kernel's own (its ``counts`` output), the same on any device: the Triton kernels run here through triton's
interpreter (TRITON_INTERPRET=1, set before triton is imported), with the GPU's tiles of 64 x 64.

    python -m benchmarks.flash_passes --out benchmarks/results/flash_passes.md

Rows: random scores as ``benchmarks/flash.py``'s (q ~ N(0, 4), k ~ N(0, 1), D 64; flat rows with tens of keys in
the support) at L = 512 and 2048, and the bundled MiniLM's own scores on Rotten Tomatoes dev texts (every layer and
head; peaked rows), fed to the kernel as q = the scores, k = the identity (so q kᵀ is exactly the scores; padding as
a -inf bias).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402

from attnkit.attention import flash_triton as ft  # noqa: E402
from attnkit.runfiles.provenance import provenance  # noqa: E402
from benchmarks.flash import write_result  # noqa: E402
from benchmarks.support import record_scores  # noqa: E402

MAPS = {"sparsemax": 2.0, "1.5-entmax": 1.5}
BLOCK = 64


def counts(q, k, bias, alpha: float, scale: float) -> torch.Tensor:
    """(passes, key tiles) of each query block of one forward, (blocks, 2)."""
    B, H, Lq, _ = q.shape
    c = torch.zeros(B * H, -(-Lq // BLOCK), 2, dtype=torch.int32)
    ft.forward(q, k, k, bias, torch.full((H,), alpha), scale, need_aux=False, fixed_alpha=alpha, block_m=BLOCK,
               block_n=BLOCK, counts=c)
    return c.reshape(-1, 2).double()


def random_inputs(L: int, heads: int = 2, D: int = 64):
    g = torch.Generator().manual_seed(0)
    return torch.randn(1, heads, L, D, generator=g) * 2, torch.randn(1, heads, L, D, generator=g), None, D**-0.5


def minilm_inputs(n_sentences: int, data_dir: str | None):
    """Each layer's scores [B, H, L, L] as (q, k, bias, scale): q kᵀ = the scores exactly (k the identity)."""
    for s in record_scores(n_sentences, data_dir):
        B, H, L, _ = s.shape
        masked = torch.isinf(s)
        yield (s.masked_fill(masked, 0.0), torch.eye(L).expand(B, H, L, L).contiguous(),
               torch.zeros(B, H, L, L).masked_fill(masked, float("-inf")), 1.0)


def bench(lengths, n_sentences: int, data_dir: str | None) -> list[dict]:
    rows = []
    cases = [(f"random, L {L}", [random_inputs(L)]) for L in lengths]
    cases.append((f"MiniLM, {n_sentences} Rotten Tomatoes dev texts, 6 layers x 12 heads", list(minilm_inputs(n_sentences, data_dir))))
    for name, batches in cases:
        for map_name, alpha in MAPS.items():
            c = torch.cat([counts(*b, alpha) for b in batches])
            rows.append({"rows": name, "map": map_name, "query blocks": len(c), "passes mean": c[:, 0].mean().item(),
                         "passes max": c[:, 0].max().item(), "tiles mean": c[:, 1].mean().item()})
            print(rows[-1], flush=True)
    return rows


def table(rows) -> str:
    out = ["| rows | map | query blocks | passes per query block (mean, max) | key tiles per query block |",
           "|---|---|---|---|---|"]
    out += [f"| {r['rows']} | {r['map']} | {r['query blocks']} | {r['passes mean']:.2f}, {r['passes max']:.0f} | "
            f"{r['tiles mean']:.1f} |" for r in rows]
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--sentences", type=int, default=64)
    ap.add_argument("--data-dir", default=None, help="where rotten-tomatoes is (default: attnkit's)")
    ap.add_argument("--out", required=True, help="markdown file to write (a .json beside it)")
    args = ap.parse_args(argv)
    command = "python -m benchmarks.flash_passes " + " ".join(sys.argv[1:] if argv is None else argv)
    rows = bench(args.lengths, args.sentences, args.data_dir)
    env = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), "torch": torch.__version__,
           "triton": __import__("triton").__version__, **provenance()}
    body = (f"# Flash forward: passes and tiles of the threshold search\n\nCommand: `{command}`\n\nEnvironment: "
            f"`{json.dumps(env)}`\n\nCounts from the kernel itself (Triton's interpreter, tiles {BLOCK} x {BLOCK}): the "
            "same on a GPU. A pass reads every key block still flagged; the output pass is counted.\n\n" + table(rows))
    write_result(Path(args.out), body, {"environment": env, "command": command, "rows": rows})
    print(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
