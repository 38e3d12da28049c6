"""The MiniBERT models the faithfulness table explains: MLM on the task's training text, then fine-tuned.

One model per (task, kind, seed), 1 layer x 1 head, d = 32, trained in ``<work_dir>/<task>__<kind>1x1__s<seed>__mlm``
(its MLM model in ``...__pre``) at :data:`SETTINGS`; a run folder whose ``metrics.json`` exists is reused.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

#: the settings of MiniBERT's first grid, which trained the models in runs/bench_minibert
SETTINGS = dict(data_dir=None, attention="softmax", dim=32, vocab_size=4000, pretrain_epochs=5, pretrain_lr=1e-2, epochs=4,
                lr=1e-2, batch_size=32, max_length=64, work_dir="runs/bench_minibert")


def settings(**given) -> SimpleNamespace:
    """:data:`SETTINGS`, with the given ones replaced (``data_dir``, ``work_dir``)."""
    return SimpleNamespace(**{**SETTINGS, **given})


def timed(fn):
    t = time.time()
    out = fn()
    return out, time.time() - t


def run_pretrain(task, kind, seed, layers, heads, a) -> dict:
    """The MLM pre-training run a fine-tuned model starts from; its metrics."""
    from attnkit.training.pretrain import PretrainConfig, pretrain

    out = Path(a.work_dir) / f"{task}__{kind}{layers}x{heads}__s{seed}__pre"
    if (out / "metrics.json").is_file():
        return json.loads((out / "metrics.json").read_text())
    cfg = PretrainConfig(task=task, data_dir=a.data_dir, kind=kind, attention=a.attention, layers=layers, heads=heads,
                         dim=a.dim, vocab_size=a.vocab_size, epochs=a.pretrain_epochs, batch_size=a.batch_size,
                         lr=a.pretrain_lr, max_length=a.max_length, seed=seed, output_dir=str(out), logging_steps=10**9)
    m, secs = timed(lambda: pretrain(cfg))
    m["wall_seconds"] = secs
    (out / "metrics.json").write_text(json.dumps(m, indent=2) + "\n")
    return m


def run_finetune(task, kind, seed, mode, layers, heads, a) -> dict:
    """A fine-tuning run: ``mlm`` (from the MLM model), ``frozen`` (the same, embeddings and attention frozen) or
    ``scratch`` (random weights); its metrics."""
    from attnkit.training.config import TrainConfig
    from attnkit.training.finetune import train

    out = Path(a.work_dir) / f"{task}__{kind}{layers}x{heads}__s{seed}__{mode}"
    if (out / "metrics.json").is_file():
        return json.loads((out / "metrics.json").read_text())
    common = dict(task=task, data_dir=a.data_dir, attention=a.attention, lam=0.0, epochs=a.epochs, batch_size=a.batch_size,
                  lr=a.lr, max_length=a.max_length, seed=seed, output_dir=str(out), logging_steps=10**9)
    if mode == "scratch":
        cfg = TrainConfig(model="mini", kind=kind, layers=layers, heads=heads, dim=a.dim, vocab_size=a.vocab_size, **common)
    else:
        pre = Path(run_pretrain(task, kind, seed, layers, heads, a)["model_dir"])
        cfg = TrainConfig(model=str(pre), freeze="embeddings,attention" if mode == "frozen" else None, **common)
    m, secs = timed(lambda: train(cfg))
    m["wall_seconds"] = secs
    Path(out / "metrics.json").write_text(json.dumps(m, indent=2, default=str) + "\n")
    return m
