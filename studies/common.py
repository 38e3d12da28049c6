"""Code more than one study runs: Table 2's training runs, the machine a record names, and MiniLM's attention scores.

Table 2's cells (``studies/ssaf``) are the models ``studies/faithfulness`` explains: :func:`run_cell` trains one
(task, method, seed) at Table 2's settings (:data:`TABLE2_SETTINGS`, ``--model``/``--lr``/... of
``python -m studies.ssaf.ssaf_table2``) in ``<work_dir>/<task>__<method>__s<seed>`` and returns its record.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import time
from contextlib import contextmanager
from pathlib import Path

from attnkit.training.config import PAPER_EPOCHS, PAPER_LAM
from studies.stats import provenance, weights_sha256

ROOT = Path(__file__).resolve().parent.parent
#: Table 2's records and tables
TABLE2_RESULTS = ROOT / "studies" / "ssaf" / "results"

# ---------------------------------------------------------------------------------------------------------------------
# Table 2's runs

#: Table 2's sets in its order; each runs at the paper's lam and epochs (config.PAPER_LAM, PAPER_EPOCHS: METHODS.md §1).
#: sst2-ptb: GLUE's sst2 has no test labels, the same sentences from the SST trees have them
TASKS = ("sentube-auto", "sentube-tablets", "semeval2013", "sst2-ptb", "sst5-phrases", "sst5", "cola", "mrpc", "rte")
#: sets the recipe (entmax15-last) was not chosen on (issue 49): SenTube-T and SST-5's sentences at the SSAF paper's
#: budget, and three GLUE tasks at SesameBERT's (GLUE_BUDGET); GLUE's test labels are hidden, so a GLUE run keeps
#: GLUE_HOLDOUT of its training split out to choose the checkpoint and GLUE's dev set is its untouched test set
GLUE_SETS = ("cola", "mrpc", "rte")
GLUE_BUDGET = {"epochs": 3, "batch_size": 32, "lr": 3e-5}
GLUE_HOLDOUT = 0.1
#: the budgets a cell runs at: the papers' (the default), or ``attnkit train``'s defaults (what a user runs first: the
#: SSAF paper's epochs on its sets, else 1 epoch; batch 16, lr 2e-5, no length grouping, no held-out part: the dev set
#: of the last epoch's model is the test where a set has no labelled test split)
BUDGETS = ("paper", "defaults")
#: --lam-lr of SSAF+learned-lam-fast: at the weights' 2e-5 lam moved at most 0.016 from its start in 5 epochs
LAM_LR = 1e-3
#: the entmax methods and their normaliser; entmax15+alpha-warmup starts at softmax (alpha 1) and
#: reaches 1.5 after the first ALPHA_WARMUP of the steps; alpha-entmax-learned learns alpha per layer and head from 1.5;
#: entmax15-last is 1.5-entmax in the last layer only, the others softmax (``--sparse-layers last``);
#: entmax15-last+alpha-warmup is that recipe with alpha's warm-up (a remedy tried where the recipe costs accuracy)
ENTMAX_METHODS = {"entmax15": "entmax15", "entmax15+alpha-warmup": "entmax15", "alpha-entmax-learned": "entmax-alpha",
                  "entmax15-last": "entmax15", "entmax15-last+alpha-warmup": "entmax15"}
#: the layers each method makes sparse where not all (TrainConfig.sparse_layers)
SPARSE_LAYERS = {"entmax15-last": "last", "entmax15-last+alpha-warmup": "last"}
ALPHA_WARMUP = 0.1
#: --alpha-lr of alpha-entmax-learned: as lam at the weights' 2e-5 (LAM_LR above), alpha needs its own rate to move
ALPHA_LR = 1e-3
#: dev texts the mean non-zeros per attention row are measured on (as attnkit sweep does)
SUPPORT_TEXTS = 256
#: SST-1 trains on a random subset (drawn with the run's seed) of its 159k phrases that fits a 2-core machine at
#: 4 epochs; SST-2 (sst2-ptb: 6,920 sentences) takes the whole split
SUBSET = {"sst5-phrases": 5000}
#: the settings of a Table 2 run that :func:`run_cell` reads besides the cell (ssaf_table2's option defaults)
TABLE2_SETTINGS = {"model": "minilm", "data_dir": None, "lr": 2e-5, "np_lr": 1e-4, "np_epochs": 10, "np_warmup": 0.1,
                   "max_length": 128, "train_subset": None, "logging_steps": 50, "work_dir": "runs/ssaf_table2"}


def method_settings(method: str, task: str, a) -> dict:
    """TrainConfig fields of one method on one task."""
    lam, epochs = PAPER_LAM.get(task, 0.0), PAPER_EPOCHS.get(task, GLUE_BUDGET["epochs"])
    scratch = "Np" in method
    attention = "softmax" if method in ("softmax", "Np") else ENTMAX_METHODS.get(method, "sparsegen-lin")
    base = dict(attention=attention, lam=lam,
                from_scratch=scratch, epochs=a.np_epochs if scratch else epochs, lr=a.np_lr if scratch else a.lr,
                warmup_ratio=a.np_warmup if scratch else 0.0)
    if method == "SSAF+learned-lam":
        base["learned"] = "lam"
    elif method == "SSAF+learned-lam-fast":  # the lam parameters on their own learning rate (--lam-lr)
        base.update(learned="lam", lam_lr=LAM_LR)
    elif method == "SSAF+lam-warmup":
        base.update(lam_warmup=0.1)
    elif method.endswith("+alpha-warmup"):
        base.update(alpha_warmup=ALPHA_WARMUP)
    elif method == "alpha-entmax-learned":
        base.update(learned="alpha", alpha=1.5, alpha_lr=ALPHA_LR)
    elif method not in ("softmax", "SSAF", "Np", "SSAF(Np)", "entmax15", *SPARSE_LAYERS):
        raise SystemExit(f"unknown method {method!r}")
    if method in SPARSE_LAYERS:
        base.update(sparse_layers=SPARSE_LAYERS[method])
    return base


def test_split(task: str, splits=None) -> str:
    """The split a cell's test score comes from: the set's test split; GLUE's dev set (its test labels are hidden), and
    the dev set of a run whose scored ``splits`` (its metrics) have no test split."""
    return "validation" if task in GLUE_SETS or (splits is not None and "test" not in splits) else "test"


def budget_of(r: dict) -> str:
    """The budget a record ran at (records written before budgets existed ran at the papers')."""
    return r.get("budget", "paper")


def cell_dir(work_dir, task: str, method: str, seed: int, budget: str = "paper") -> Path:
    """The run folder of one cell (a budget other than the papers' adds its name)."""
    return Path(work_dir) / (f"{task}__{method}__s{seed}" + ("" if budget == "paper" else f"__{budget}"))


def budget_settings(task: str, budget: str, a) -> dict:
    """TrainConfig fields a budget sets: batch size, length grouping, held-out part (and GLUE's epochs and lr)."""
    if budget == "defaults":
        return {"batch_size": 16, "group_by_length": False, "holdout": 0.0, "epochs": PAPER_EPOCHS.get(task, 1), "lr": 2e-5}
    if task in GLUE_SETS:
        return {**GLUE_BUDGET, "group_by_length": True, "holdout": GLUE_HOLDOUT}
    return {"batch_size": 16, "group_by_length": True, "holdout": 0.0}


def run_cell(task: str, method: str, seed: int, a, budget: str = "paper") -> dict:
    from attnkit.training.config import TrainConfig
    from attnkit.training.finetune import train

    out = cell_dir(a.work_dir, task, method, seed, budget)
    s = method_settings(method, task, a)
    fields = {k: v for k, v in s.items() if k in TrainConfig.__dataclass_fields__}
    if "Np" not in method:
        fields.update(budget_settings(task, budget, a))
    subset = a.train_subset if a.train_subset is not None else SUBSET.get(task)
    cfg = TrainConfig(task=task, data_dir=a.data_dir, model=a.model, max_length=a.max_length, seed=seed,
                      output_dir=str(out), logging_steps=a.logging_steps, max_train_samples=subset, **fields)
    t0 = time.time()
    m = train(cfg)
    # the split that chose the checkpoint ("dev") and the one never looked at ("test")
    dev_split, test = "heldout" if cfg.holdout else "validation", test_split(task, m)
    rec = {
        "task": task, "method": method, "seed": seed, "lam": s["lam"] if method != "softmax" and method != "Np" else None,
        "epochs": cfg.epochs, "lr": cfg.lr, "batch_size": cfg.batch_size, "max_length": cfg.max_length,
        "train_size": m["train_size"], "dev_accuracy": m[dev_split]["accuracy"], "test_accuracy": m[test]["accuracy"],
        "test_macro_f1": m[test].get("macro_f1"),
        "train_seconds": round(m["train"].get("train_runtime", time.time() - t0), 1),
        "train_subset": subset, "warmup_ratio": cfg.warmup_ratio, "from_scratch": cfg.from_scratch, "group_by_length": cfg.group_by_length,
        "torch_threads": int(os.environ.get("OMP_NUM_THREADS", "0")) or None,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(), "precision": cfg.precision,
    }
    if budget != "paper":
        rec["budget"] = budget
    if cfg.holdout or test != "test":  # where the numbers come from, where it is not the set's own dev and test
        rec.update(holdout=cfg.holdout, dev_split=dev_split, test_split=test)
    main = m.get("main_metric")
    if main not in (None, "accuracy") and main in m[test]:
        rec[f"test_{main}"] = m[test][main]  # GLUE's own metric (CoLA's mcc, MRPC's f1), which chose the checkpoint
    if "lam_learned" in m:
        rec["lam_learned"] = m["lam_learned"]
    for key in ("alpha_learned",):
        if key in m:
            rec[key] = m[key]
    if cfg.attention != "sparsegen-lin" or cfg.alpha_warmup:
        rec["attention"] = cfg.attention
    if cfg.alpha_warmup:
        rec["alpha_warmup"] = cfg.alpha_warmup
    if cfg.sparse_layers is not None:
        rec["sparse_layers"] = cfg.sparse_layers
    rec.update(dev_support(out, task, a.data_dir, cfg.max_length))
    if cfg.lam_lr is not None:
        rec["lam_lr"] = cfg.lam_lr
    if cfg.alpha_lr is not None:
        rec["alpha_lr"] = cfg.alpha_lr
    rec.update(curves(out))
    rec["provenance"] = provenance()
    rec["weights_sha256"] = weights_sha256(out / "model")  # faithfulness reuses these models: checked, not inferred
    return rec


def dev_support(run_dir: Path, task: str, data_dir: str | None, max_length: int) -> dict:
    """Mean non-zeros per attention row (every layer and head, real tokens) of the run's saved model on the first
    SUPPORT_TEXTS dev texts: accuracy and sparsity side by side."""
    from attnkit.models.checkpoint import load_model, load_tokenizer
    from attnkit.tasks import load_task
    from attnkit.training.sweep import mean_support

    dev = load_task(task, data_dir).splits["validation"]
    n = min(SUPPORT_TEXTS, len(dev))
    texts = list(dev["text"][:n])
    pairs = list(dev["text_pair"][:n]) if "text_pair" in dev.column_names else None
    model_dir = run_dir / "model"
    sup = mean_support(load_model(model_dir), load_tokenizer(model_dir), texts, pairs, max_length=max_length)
    return {"dev_nonzeros_per_row": round(sup["mean"], 3), "dev_nonzeros_per_layer": [round(x, 3) for x in sup["per_layer"]],
            "dev_mean_length": round(sup["mean_length"], 2), "support_texts": n}


def curves(run_dir: Path) -> dict:
    """Dev accuracy per epoch and the logged training losses: from metrics.json's log_history, else (runs of an
    older attnkit) from the newest checkpoint's trainer_state.json."""
    metrics = run_dir / "metrics.json"
    hist = json.loads(metrics.read_text()).get("log_history") if metrics.is_file() else None
    if hist is None:
        states = sorted(run_dir.glob("checkpoint-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
        if not states:
            return {}
        hist = json.loads(states[-1].read_text())["log_history"]
    dev = [round(h["eval_accuracy"], 4) for h in hist if "eval_accuracy" in h]
    loss = [round(h["loss"], 4) for h in hist if "loss" in h]
    return {"dev_curve": dev, "train_loss_curve": loss}


def machine() -> str:
    """Where a record's run trained: the processor and its cores, and the GPU where the Trainer had one."""
    import torch

    gpu = f", {torch.cuda.get_device_name()}" if torch.cuda.is_available() else ""
    return f"{platform.machine()}, {os.cpu_count()} cores{gpu}"


# ---------------------------------------------------------------------------------------------------------------------
# MiniLM's attention scores


@contextmanager
def recorded_scores():
    """Registers the normaliser ``"record"`` (softmax that keeps a float32 copy of every call's masked scores
    [B, H, L, L], -inf on padded keys) and yields the list the copies go to, one per layer in order."""
    import torch

    from attnkit.attention.normalisers import NORMALISERS

    seen: list = []

    def recording_softmax(scores, spec):
        seen.append(scores.detach().float().clone())
        return torch.softmax(scores, -1)

    NORMALISERS["record"] = recording_softmax
    try:
        yield seen
    finally:
        del NORMALISERS["record"]
