"""Cost of one ``attnkit adapt`` training step: the MLM decoder at every token against at the masked tokens only.

A masked-LM step on MiniLM (hidden 384, vocabulary 30,522) spends about as much on the decoder (hidden -> vocabulary
logits at each position) as on the whole encoder. ``attnkit adapt`` computes those logits at the masked positions only
(``attnkit.training.adapt.MaskedPositions``: the same loss and gradients). This measures a full training step
(forward, backward, AdamW) both ways, side by side in one run (interleaved round by round, median kept), for softmax
and 1.5-entmax, at batch x length with 15% of the tokens masked.

    OMP_NUM_THREADS=1 python -m benchmarks.adapt_step --out benchmarks/results/adapt_step.json   [--batch 32 --length 128]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch
from transformers import TrainingArguments

from attnkit.attention.spec import AttentionSpec
from attnkit.models.build import build_masked_lm
from attnkit.runfiles.atomic import write_text_atomic
from attnkit.training.adapt import AdaptTrainer, MaskedPositions
from benchmarks.speed import environment, time_rounds

ROOT = Path(__file__).resolve().parents[1]


def make_step(attention: str, masked_only: bool, batch: int, length: int, tmp: str):
    torch.manual_seed(0)
    model, _ = build_masked_lm("minilm", AttentionSpec(attention))
    model.train()
    args = TrainingArguments(output_dir=tmp, use_cpu=True, report_to="none")
    trainer = AdaptTrainer(model=model, masked=MaskedPositions(model) if masked_only else None, args=args)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(1000, model.config.vocab_size, (batch, length), generator=gen)
    mask = torch.rand(batch, length, generator=gen) < 0.15
    labels = torch.where(mask, ids, torch.full_like(ids, -100))
    inputs = {"input_ids": ids.masked_fill(mask, 103), "attention_mask": torch.ones_like(ids), "labels": labels}

    def step():
        opt.zero_grad(set_to_none=True)
        trainer.compute_loss(model, inputs).backward()
        opt.step()

    return step


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--attention", nargs="+", default=["softmax", "entmax15"])
    ap.add_argument("--out", default=None, help="a JSON file for the rows and the environment")
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for att in a.attention:
            variants = {"every token": False, "masked tokens only": True}
            t = time_rounds(variants, lambda only: make_step(att, only, a.batch, a.length, tmp), a.rounds)
            base = t["every token"]
            rows += [{"attention": att, "decoder at": k, "shape": f"b{a.batch} x L{a.length}", "ms": v * 1e3, "ratio": v / base}
                     for k, v in t.items()]
    lines = ["| attention | decoder at | shape | step (ms) | ratio to every token |", "|---|---|---|---|---|"]
    lines += [f"| {r['attention']} | {r['decoder at']} | {r['shape']} | {r['ms']:.0f} | {r['ratio']:.2f}x |" for r in rows]
    print("\n".join(lines))
    if a.out:
        env = environment() | {"command": "python -m benchmarks.adapt_step " + " ".join(argv if argv is not None else sys.argv[1:])}
        write_text_atomic(a.out, json.dumps({"environment": env, "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
