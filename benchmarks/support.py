"""Support sizes and exactness of sparsegen-lin on real MiniLM attention scores.

Records the pre-normaliser scores of every layer and head of the bundled MiniLM on real
sentences (Rotten Tomatoes dev snippets), then, for lam in [-8, 0], reports the support
size per row (mean, median, 95th percentile, max) and the largest difference between
attnkit's map (the compiled kernel where it runs) and a plain float64 sort-based reference.

    python -m benchmarks.support --out benchmarks/results/support.json
"""

from __future__ import annotations

import argparse
import json
from contextlib import contextmanager
from pathlib import Path

import torch

from attnkit.attention import kernels
from attnkit.attention.maps import sparsegen_lin
from attnkit.attention.normalisers import Normaliser, register_normaliser, unregister_normaliser
from attnkit.attention.spec import AttentionSpec
from attnkit.tasks import load_task
from attnkit.models.build import build_classifier
from attnkit.models.checkpoint import load_tokenizer


def reference_sparsegen(z: torch.Tensor, lam: float) -> torch.Tensor:
    z = z.double() / (1 - lam)
    zs, _ = torch.sort(z, dim=-1, descending=True)
    cs = zs.cumsum(-1)
    r = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    k = (1 + r * zs > cs).sum(-1, keepdim=True).clamp(min=1)
    tau = (cs.gather(-1, k - 1) - 1) / k
    return (z - tau).clamp(min=0)


@contextmanager
def recorded_scores():
    """Registers the normaliser ``"record"`` (softmax that keeps a float32 copy of every call's masked scores
    [B, H, L, L], -inf on padded keys) and yields the list the copies go to, one per layer in order."""
    seen: list[torch.Tensor] = []

    def recording_softmax(scores, spec):
        seen.append(scores.detach().float().clone())
        return torch.softmax(scores, -1)

    register_normaliser(Normaliser("record", recording_softmax, dense=True))
    try:
        yield seen
    finally:
        unregister_normaliser("record")


def record_scores(n_sentences: int, data_dir: str | None) -> list[torch.Tensor]:
    """Masked attention scores [B, H, L, L] of each layer of the pre-trained MiniLM on Rotten Tomatoes dev texts."""
    texts = list(load_task("rotten-tomatoes", data_dir).splits["validation"]["text"])[:n_sentences]
    with recorded_scores() as seen, torch.inference_mode():
        model = build_classifier("minilm", 2, AttentionSpec("record")).eval()
        tok = load_tokenizer("minilm")
        model(**tok(texts, padding=True, truncation=True, max_length=128, return_tensors="pt"))
    return seen


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=64)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--out", default="benchmarks/results/support.json")
    a = ap.parse_args()
    layers = record_scores(a.sentences, a.data_dir)
    rows = []
    for lam in (-8.0, -6.0, -4.0, -3.0, -2.0, -1.0, 0.0):
        sizes, err = [], 0.0
        for s in layers:
            p = sparsegen_lin(s, lam)
            ref = reference_sparsegen(s, lam)
            finite = torch.isfinite(s).any(-1)  # rows of real queries and padded ones alike have real keys
            err = max(err, (p.double() - ref).abs().max().item())
            sizes.append((p > 0).sum(-1)[finite].flatten())
        sz = torch.cat(sizes).float()
        rows.append({
            "lam": lam,
            "mean_support": sz.mean().item(),
            "median_support": sz.median().item(),
            "p95_support": sz.quantile(0.95).item(),
            "max_support": int(sz.max().item()),
            "max_abs_diff_vs_sort_reference": err,
        })
    lengths = [int(torch.isfinite(layers[0][b, 0, 0]).sum()) for b in range(layers[0].shape[0])]
    result = {
        "backend": kernels.backend(),
        "sentences": a.sentences,
        "mean_length": sum(lengths) / len(lengths),
        "max_length": max(lengths),
        "rows": rows,
        "command": "python -m benchmarks.support " + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in vars(a).items() if v is not None),
    }
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"backend {result['backend']}; {a.sentences} sentences, mean length {result['mean_length']:.1f} tokens")
    print("| lam | mean support | median | p95 | max | max abs diff vs sort reference |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['lam']:g} | {r['mean_support']:.2f} | {r['median_support']:.0f} | {r['p95_support']:.0f} | {r['max_support']} | {r['max_abs_diff_vs_sort_reference']:.1e} |")


if __name__ == "__main__":
    main()
