"""What attnkit's map costs inside encoders whose attention is their own code (DeBERTa-v2/v3, MPNet).

Their relative-position terms are a [B, H, L, L] matrix already, so attnkit runs its map on the materialised scores
there (no flash attention). This measures a training step (forward, backward, AdamW) and inference of one
randomly initialised model per architecture, side by side in one run, variants interleaved: the model's own
eager softmax, attnkit with softmax (the same arithmetic by attnkit's code), sparsemax and 1.5-entmax.

    OMP_NUM_THREADS=1 python -m benchmarks.own_code --rounds 5 --out benchmarks/results/own_code_cpu_2026-11-27.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from attnkit.runfiles.atomic import write_text_atomic
from benchmarks.speed import environment, time_rounds

#: DeBERTa-v3-like and MPNet-like encoders, a quarter of base size (random weights)
SHAPE = dict(vocab_size=30000, hidden_size=384, num_hidden_layers=4, num_attention_heads=6, intermediate_size=1536)
ARCHITECTURES = {
    "deberta-v2": dict(SHAPE, relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=256,
                       max_relative_positions=512, share_att_key=True, norm_rel_ebd="layer_norm", max_position_embeddings=512),
    "mpnet": dict(SHAPE, max_position_embeddings=514),
}
VARIANTS = ("own softmax", "attnkit softmax", "attnkit sparsemax", "attnkit entmax15")


def build(model_type: str, variant: str):
    import attnkit
    from transformers import AutoConfig, AutoModelForSequenceClassification

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(model_type, **ARCHITECTURES[model_type], num_labels=2)
    model = AutoModelForSequenceClassification.from_config(cfg)
    if variant != "own softmax":
        attnkit.sparsify(model, variant.split()[1])
    return model


def bench(model_type: str, batch: int, length: int, rounds: int) -> list[dict]:
    ids = torch.randint(1000, 29000, (batch, length))
    mask = torch.ones_like(ids)
    mask[: batch // 2, length * 3 // 4:] = 0  # half the batch padded
    labels = torch.randint(0, 2, (batch,))
    models = {v: build(model_type, v) for v in VARIANTS}
    opts = {v: torch.optim.AdamW(m.parameters(), lr=1e-5) for v, m in models.items()}

    def step(v):
        def run():
            opts[v].zero_grad(set_to_none=True)
            models[v].train()(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
            opts[v].step()
        return run

    def infer(v):
        def run():
            with torch.inference_mode():
                models[v].eval()(input_ids=ids, attention_mask=mask)
        return run

    rows = []
    for what, make in (("train step", step), ("inference", infer)):
        t = time_rounds({v: make(v) for v in VARIANTS}, lambda run: run, rounds)  # seconds, interleaved, one warm-up
        rows += [{"model": model_type, "bench": what, "shape": f"b{batch} x L{length}", "variant": v, "ms": 1000 * t[v],
                  "ratio": t[v] / t["own softmax"]} for v in VARIANTS]
    return rows


def to_markdown(rows: list[dict], env: dict, command: str) -> str:
    lines = ["# attnkit's map inside DeBERTa-v2/v3 and MPNet (their own attention code): cost against their softmax", "",
             f"Command: `{command}`", "", f"Environment: `{json.dumps(env)}`", "",
             "Random weights (hidden 384, 4 layers, 6 heads), half the batch padded to 3/4 of its length; median of the "
             "rounds, variants interleaved. These layers run the materialised path (the relative-position terms are an "
             "L x L matrix already): no flash attention.", "",
             "| model | bench | shape | variant | ms | / own softmax |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['model']} | {r['bench']} | {r['shape']} | {r['variant']} | {r['ms']:.1f} | {r['ratio']:.2f}x |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--out", type=Path, default=Path("benchmarks/results/own_code_cpu.md"))
    a = ap.parse_args(argv)
    rows = [r for m in ARCHITECTURES for r in bench(m, a.batch, a.length, a.rounds)]
    env = environment()
    command = "python -m benchmarks.own_code " + " ".join(sys.argv[1:] if argv is None else argv)
    write_text_atomic(a.out, to_markdown(rows, env, command))
    write_text_atomic(a.out.with_suffix(".json"), json.dumps({"environment": env, "command": command, "rows": rows}, indent=2) + "\n")
    print(to_markdown(rows, env, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
