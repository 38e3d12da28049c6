"""SesameBERT's cells: the grids (Table 2's sigmas, Table 3's strategies, the HANS models), the training run of one
cell and its record, and which records stand for which (identity sigmas, Table 2's twins of Table 3's cells).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from studies import stats
from studies.common import machine

SIGMAS = (0.01, 0.1, 0.3, 0.5, 1.0)
#: the grid the paper chose sigma from (by dev accuracy)
PAPER_SIGMAS = (0.01, 0.1, 0.3, 0.5)
#: the GLUE dev metric each task is reported by in the paper's Table 2
METRIC = {"rte": "accuracy", "mrpc": "accuracy", "cola": "mcc", "sst2": "accuracy", "mnli-devsplit": "accuracy"}
KEY = ("task", "variant", "seed")
#: every dev metric a record keeps beside the one it is reported by
DEV_METRICS = ("accuracy", "macro_f1", "mcc", "f1", "acc_and_f1")
#: Table 3's columns: (name, SE, blur on the context layer)
T3_VARIANTS = (("softmax", False, False), ("SE", True, False), ("blur", False, True), ("SE+blur", True, True))
#: the HANS models: name -> run settings (SesameBERT = SE + weighted layers + blur on the context layer)
HANS_MODELS = {"softmax": {}, "SesameBERT": dict(pooling="weighted", se=True, blur="context"),
               "SesameBERT+sparsegen-lin": dict(pooling="weighted", se=True, blur="context", attention="sparsegen-lin", lam=-4.0)}
HEURISTICS = ("lexical_overlap", "subsequence", "constituent")
#: Figure 4's series: the SE runs of Table 3 whose layers are pooled by learned weights or read at the last layer
FIGURE4_POOLING = ("weighted", "last")


def variants(sigmas) -> list[tuple[str, str, float | None]]:
    """(name, blur place, sigma): softmax, then blur on values and on context at each sigma."""
    out = [("softmax", "none", None)]
    for place in ("value", "context"):
        out += [(f"blur-{place}-{s:g}", place, float(s)) for s in sigmas]
    return out


def kernel_weights(sigma: float, size: int = 3) -> list[float]:
    from attnkit.attention.blur import gaussian_kernel

    return [round(float(x), 4) for x in gaussian_kernel(size, sigma)]


def is_identity(sigma: float | None, size: int = 3) -> bool:
    """Whether the float32 blur kernel at ``sigma`` is the identity (``attnkit.attention.spec.blur_is_identity``)."""
    from attnkit.attention.blur import blur_is_identity

    return sigma is not None and blur_is_identity(size, sigma)


def weights_digest(model_dir: Path) -> str:
    """SHA-256 over a saved model's parameters (names and float bytes, sorted): equal digests, the same model."""
    return stats.weights_sha256(model_dir)


def cell_config(task: str, name: str, blur: str, sigma: float | None, seed: int, a, *, pooling: str = "last", se: bool = False,
                attention: str = "softmax", lam: float = 0.0, pooling_lr: float | None = None):
    """The ``attnkit train`` settings of one cell."""
    from attnkit.training.config import TrainConfig

    out = Path(a.work_dir) / f"{task}__{name.replace('|', '-')}__s{seed}"
    return TrainConfig(task=task, data_dir=a.data_dir, model=a.model, attention=attention, lam=lam, epochs=a.epochs, batch_size=a.batch_size,
                       lr=a.lr, max_length=a.max_length, seed=seed, output_dir=str(out), logging_steps=50,
                       max_train_samples=a.train_subset.get(task), holdout=a.holdout, blur=blur,
                       blur_sigma=sigma if sigma is not None else 0.3, pooling=pooling, se=se, pooling_lr=pooling_lr,
                       group_by_length=True,  # as Table 2: RTE's random batches pad to ~128 tokens, twice its mean length
                       precision=a.precision)


def run_cell(task: str, name: str, blur: str, sigma: float | None, seed: int, a, **kw) -> dict:
    from attnkit.training.finetune import train

    cfg = cell_config(task, name, blur, sigma, seed, a, **kw)
    out, pooling, se, attention = Path(cfg.output_dir), cfg.pooling, cfg.se, cfg.attention
    t0 = time.time()
    m = train(cfg)
    metric = METRIC[task]
    per_epoch = [h[f"eval_{metric}"] for h in m["log_history"] if f"eval_{metric}" in h]
    # Figure 4's numbers, kept in Table 3's records (run folders do not outlive a session)
    extra = {"se_weights": se_weights(out, task, a), "se_weights_init": initial_se_weights(cfg)} if se and a.grid == "table3" else {}
    return {
        "task": task, "variant": name, "blur": blur, "blur_sigma": sigma, "kernel": kernel_weights(sigma) if sigma is not None else None,
        "se": se, "layer_pooling": pooling, "pooling_lr": cfg.pooling_lr, "attention": attention, "seed": seed, "epochs": cfg.epochs, "lr": cfg.lr,
        "batch_size": cfg.batch_size, "max_length": cfg.max_length, "group_by_length": True, "train_size": m["train_size"], "metric": metric,
        "dev_metric": m["validation"][metric], ("heldout_per_epoch" if a.holdout else "dev_per_epoch"): per_epoch, "holdout": a.holdout,
        # the epoch kept is the best by the task's GLUE metric (MRPC: F1, reported here by accuracy as the paper does)
        "selected_by": m["main_metric"], "dev_metrics": {k: v for k, v in m["validation"].items() if k in DEV_METRICS},
        "test_metric": m["test"][metric] if isinstance(m.get("test"), dict) and metric in m["test"] else None,
        "heldout_metric": m["heldout"][metric] if "heldout" in m else None, "weights_sha256": weights_digest(out / "model"),
        "run": str(out), "train_seconds": round(m["train"].get("train_runtime", time.time() - t0), 1),
        "torch_threads": int(os.environ.get("OMP_NUM_THREADS", "0")) or None,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": machine(),
        "precision": a.precision, "provenance": stats.provenance(), **extra,
    }


def _dev_se_weights(model, tok, dev, max_length: int) -> list[float]:
    """The mean SE weight per layer of ``model`` on a dev split, ``attnkit layer-weights``'s numbers."""
    from attnkit.analysis.explain import layer_weights

    pairs = list(dev["text_pair"]) if "text_pair" in dev.column_names else None
    return [round(float(x), 6) for x in layer_weights(model, tok, list(dev["text"]), pairs, max_length=max_length)["se_mean"]]


def se_weights(run: Path, task: str, a) -> list[float]:
    """Figure 4: the mean SE weight per layer of a trained run on its task's dev split."""
    from attnkit.analysis.inference import load_for_inference
    from attnkit.tasks import load_task

    _, model, tok = load_for_inference(str(run))
    return _dev_se_weights(model, tok, load_task(task, a.data_dir).splits["validation"], a.max_length)


def initial_se_weights(cfg) -> list[float]:
    """Figure 4's reference: the same numbers for the model ``train(cfg)`` starts from, before its first step. train()
    seeds (``set_seed(cfg.seed)``) and then builds it with ``initial_classifier``, drawing nothing else from torch's
    generator in between; this does the same (``tests/models/test_sesame.py`` checks it against a run that cannot move its weights)."""
    from transformers import set_seed

    from attnkit.models.checkpoint import load_tokenizer
    from attnkit.tasks import load_task
    from attnkit.training.finetune import initial_classifier

    set_seed(cfg.seed)
    data = load_task(cfg.task, cfg.data_dir)  # once: its labels and its dev split
    model = initial_classifier(cfg, data)
    return _dev_se_weights(model.eval(), load_tokenizer(cfg.model), data.splits["validation"], cfg.max_length)


def in_figure4(r: dict) -> bool:
    return bool(r.get("se")) and r.get("layer_pooling") in FIGURE4_POOLING


def strategies() -> tuple[str, ...]:
    from attnkit.models.pooling import STRATEGIES

    return STRATEGIES


def table3_cells(a):
    """(variant, blur, sigma, kwargs) of Table 3 on RTE: every extraction strategy x softmax / SE / blur / SE + blur; with
    ``--pooling-lr``, the SE columns only, their layer weights trained at that learning rate (variants "...|SE|plr<lr>")."""
    for pooling in a.strategies or strategies():
        for v, se, blur in T3_VARIANTS:
            if a.pooling_lr is None:
                yield f"{pooling}|{v}", "context" if blur else "none", a.sigma if blur else None, dict(pooling=pooling, se=se)
            elif se:
                yield (f"{pooling}|{v}|plr{a.pooling_lr:g}", "context" if blur else "none", a.sigma if blur else None,
                       dict(pooling=pooling, se=se, pooling_lr=a.pooling_lr))


def hans_record(rec: dict, a) -> dict:
    """The HANS report of a trained MNLI model (``attnkit evaluate --task hans``, run as a subprocess and written beside
    its run) added to its record."""
    out = Path(rec["run"]) / "hans.json"
    if not out.is_file():
        args = ["evaluate", "--model", rec["run"], "--task", "hans", "--output", str(out), "--max-length", str(a.max_length)]
        if a.data_dir:
            args += ["--data-dir", a.data_dir]
        if a.hans_per_subcase:
            args += ["--hans-per-subcase", str(a.hans_per_subcase)]
        if subprocess.run([sys.executable, "-m", "attnkit.cli", *args]).returncode != 0:
            raise SystemExit(f"HANS evaluation of {rec['run']} failed")
    rep = json.loads(out.read_text())
    return {**rec, "hans_accuracy": rep["accuracy"], "hans_n": rep["n"], "hans": rep["heuristic"]}


def backfill_initial_se(path: Path, a) -> int:
    """Add to Figure 4's records that lack them (those run before they were kept) the SE weights of the model each run
    started from; returns how many were added."""
    n = 0
    for r in stats.read_records(path):
        if in_figure4(r) and r.get("se_weights_init") is None and "same_as" not in r:
            cfg = cell_config("rte", r["variant"], r["blur"], r["blur_sigma"], r["seed"], a, pooling=r["layer_pooling"], se=True,
                              pooling_lr=r.get("pooling_lr"))
            stats.add_record(path, {**r, "se_weights_init": initial_se_weights(cfg)}, KEY)
            n += 1
    return n


def by_cell(recs: list[dict]) -> dict:
    """(task, variant) -> {seed: record}, with the cells of identity sigmas filled from softmax's record of the same seed
    (a copy marked ``"same_as": "softmax"``) where a measured seed showed that run to be softmax's, weight for weight,
    and none showed otherwise."""
    by: dict = {}
    for r in recs:
        by.setdefault((r["task"], r["variant"]), {})[r["seed"]] = r
    for (task, name), cell in list(by.items()):
        sigma = next(iter(cell.values()))["blur_sigma"]
        soft = by.get((task, "softmax"), {})
        if not is_identity(sigma):
            continue
        same = [cell[s].get("weights_sha256") == soft[s].get("weights_sha256") is not None for s in set(cell) & set(soft)]
        if same and all(same):
            place = next(iter(cell.values()))["blur"]
            for s in set(soft) - set(cell):
                cell[s] = as_identity_sigma(soft[s], place, sigma)
    return by


def as_identity_sigma(soft_rec: dict, place: str, sigma: float) -> dict:
    """Softmax's record standing in for the identity sigma ``sigma`` blurring ``place`` (the same model, bit for bit)."""
    return {**soft_rec, "variant": f"blur-{place}-{sigma:g}", "blur": place, "blur_sigma": sigma, "kernel": kernel_weights(sigma),
            "same_as": "softmax"}


def _digests(recs: list[dict], task: str, name: str) -> dict[int, str | None]:
    """seed -> weights' SHA-256 of the runs (not borrowed records) of ``name`` on ``task``."""
    return {r["seed"]: r.get("weights_sha256") for r in recs if (r["task"], r["variant"]) == (task, name) and "same_as" not in r}


def _same_model(own: dict, ref: dict) -> bool:
    """Whether ``own``'s runs were run at some seed and trained ``ref``'s model, weight for weight, at every seed both ran."""
    both = set(own) & set(ref)
    return bool(both) and all(own[s] is not None and own[s] == ref[s] for s in both)


def identity_checked(recs: list[dict], task: str, name: str) -> bool:
    """Whether the identity-sigma variant ``name`` was run at some seed and trained softmax's model there, weight for
    weight, at every seed where both were run (then its other seeds are softmax's records)."""
    return _same_model(_digests(recs, task, name), _digests(recs, task, "softmax"))


def table2_twin(t3_recs: list[dict], t2_recs: list[dict], name: str, sigma: float | None, seed: int) -> dict | None:
    """Table 2's record for a Table 3 cell that trains Table 2's very model (classifier on the last layer, no SE: Table 2's
    softmax and its blur on context at the same sigma), marked ``same_as``, where that cell was run at some seed and
    its weights equalled Table 2's at every seed both ran; None otherwise (the cell is then run)."""
    twin = {"last|softmax": "softmax", "last|blur": None if sigma is None else f"blur-context-{sigma:g}"}.get(name)
    ref = [r for r in t2_recs if (r["task"], r["variant"], r["seed"]) == ("rte", twin, seed) and "same_as" not in r]
    if twin is None or not ref or not _same_model(_digests(t3_recs, "rte", name), _digests(t2_recs, "rte", twin)):
        return None
    return {**ref[0], "variant": name, "same_as": f"Table 2's {twin}"}
