"""What every training run shares: the run folder (resume, settings check, finished runs, damaged checkpoints),
the Trainer's settings, and small helpers. Classification (:mod:`finetune`) and span QA (:mod:`span_qa`) both use it.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import AutoConfig, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

from attnkit.analysis.explain import plot_curves
from attnkit.attention.spec import LEARNED
from attnkit.models.build import check_max_length, check_weights_file, resolve_model
from attnkit.models.pooling import layer_weight_parameters
from attnkit.runfiles import LOCK_FILE, folder_lock, write_json_atomic
from attnkit.training.config import METRICS_FILE, MODEL_DIR, TrainConfig, option_name

log = logging.getLogger("attnkit")


def subsample(ds, n: int | None, seed: int):
    """A random subset of ``n`` rows of ``ds`` (all of it if ``n`` is None or not smaller)."""
    if n is None or ds is None or len(ds) <= n:
        return ds
    return ds.shuffle(seed=seed).select(range(n))


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest ``checkpoint-N`` the Trainer finished writing (it writes trainer_state.json last).

    A run killed while saving leaves a checkpoint without trainer_state.json, and a disk fault
    may leave a garbled one; either is moved aside (``.incomplete-checkpoint-N``) with a message
    and the previous one is used.
    """
    out = Path(output_dir)
    if not out.is_dir():
        return None
    while True:
        last = get_last_checkpoint(str(out))
        if last is None:
            return None
        why = _checkpoint_damage(Path(last))
        if why is None:
            return last
        aside = out / f".incomplete-{Path(last).name}"
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(last, aside)
        log.warning("checkpoint %s is not usable (%s); moved aside to %s, resuming from the one before", last, why, aside)


def _checkpoint_damage(ckpt: Path) -> str | None:
    """Why a Trainer checkpoint folder cannot be resumed from, or None if it can."""
    state = ckpt / "trainer_state.json"
    if not state.is_file():
        return "no trainer_state.json: it was not finished"
    try:
        json.loads(state.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        return f"trainer_state.json is garbled: {e}"
    try:
        check_weights_file(ckpt)
    except OSError as e:
        return str(e)
    return None


#: settings that may differ when a run is resumed: they do not change what is trained, or only how
#: long (a run may be resumed to train for longer)
_RESUME_FREE = ("output_dir", "resume", "logging_steps", "eval_batch_size", "keep_checkpoints", "epochs", "max_steps")
#: settings that may differ from a finished run's for it to count as the same run (epochs and steps count here)
_FINISHED_FREE = ("output_dir", "resume", "logging_steps", "eval_batch_size", "keep_checkpoints")


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path} is not a readable JSON file ({e}): move the run folder aside or pick another --output-dir") from None


def is_run_folder(out: Path) -> bool:
    """Whether ``out`` holds something of an attnkit run (settings, metrics, model, checkpoints, set-aside runs)."""
    if not out.is_dir():
        return False
    names = ("run_config.json", METRICS_FILE, MODEL_DIR, "mini_init")
    return (any((out / n).exists() for n in names) or bool(_checkpoint_dirs(out))
            or any(p.name.startswith((".replaced-", ".incomplete-")) for p in out.iterdir()))


@contextmanager
def run_folder(out: Path, option: str = "--output-dir"):
    """Make (if missing) and lock the run folder ``out`` for one run (rank 0 of a multi-process run only).

    Refused at once: a file, a folder that is not empty and holds no attnkit run, a folder another process is writing.
    If the run fails and the folder was made here and holds nothing, it is removed again."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{option} {out} is a file, not a folder")
    if (out / "sweep.json").is_file():
        raise ValueError(f"{option} {out} holds an attnkit sweep, not a run: pick a new or empty folder")
    if out.is_dir() and any(p.name != LOCK_FILE for p in out.iterdir()) and not is_run_folder(out):
        raise ValueError(f"{option} {out} is not empty and holds no attnkit run (a run writes model/, metrics.json, "
                         "run_config.json, ... there): pick a new or empty folder")
    made = first_missing(out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with folder_lock(out) if int(os.environ.get("RANK", "0")) == 0 else contextlib.nullcontext():
            yield out
    except BaseException:
        if made is not None and all(p.name == LOCK_FILE for p in out.iterdir()):
            shutil.rmtree(made, ignore_errors=True)  # the folders made here, holding nothing but the lock file
        raise


def first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` (itself included) that does not exist yet (None if ``path`` exists)."""
    if path.exists():
        return None
    while not path.parent.exists():
        path = path.parent
    return path


def with_defaults(saved: dict, fields) -> dict:
    """A recorded run's settings with the ones it predates filled in with their defaults: a setting added to attnkit
    later defaults to what older runs did (e.g. ``holdout`` 0), so asking for another value is a difference."""
    import dataclasses

    out = dict(saved)
    for k, f in fields.items():
        if k not in out and f.default is not dataclasses.MISSING:
            out[k] = f.default
    return out


def settings_differences(saved: dict, now: dict, free: tuple, fields) -> list[str]:
    """``"name: old there, new now"`` for every setting (of ``fields``, but for ``free``) that differs (one the
    record predates counts as its default)."""
    saved = with_defaults(saved, fields)
    old = same_paths({k: v for k, v in saved.items() if k not in free and k in fields})
    new = same_paths({k: v for k, v in now.items() if k not in free and k in fields})
    return [f"{option_name(k)}: {old.get(k)!r} there, {new[k]!r} now" for k in sorted(new) if k in old and old[k] != new[k]]


def finished_metrics(cfg, out: Path | None = None, free: tuple = _FINISHED_FREE) -> dict | None:
    """The metrics of a finished run in ``out`` (default ``cfg.output_dir``) made with the same settings, or None if
    there is none (or ``cfg.resume`` is off: it is moved aside when training starts).

    A finished run has metrics.json and model/. One made with other settings (or whose settings are not recorded)
    is never replaced silently: ValueError naming the differences and the ways out. The one exception is asking for a
    longer run (more epochs or steps) of a run that kept its checkpoints: it is trained on from its last one."""
    out = Path(cfg.output_dir if out is None else out)
    saved, metrics = out / "run_config.json", out / METRICS_FILE
    if not cfg.resume or not (metrics.is_file() and (out / MODEL_DIR / "config.json").is_file()):
        return None
    fields = type(cfg).__dataclass_fields__
    old = _read_json(saved) if saved.is_file() else None
    if old is not None:
        diffs = settings_differences(old, asdict(cfg), free, fields)
    else:  # a run of an older attnkit: its model says which attention it has; the rest is unknown
        diffs = _spec_differences(cfg, out / MODEL_DIR / "config.json") or ["its settings are not recorded (no run_config.json)"]
    if diffs and _checkpoint_dirs(out) and old is not None and not settings_differences(old, asdict(cfg), _RESUME_FREE, fields):
        # only the length differs and the run kept its checkpoints (--keep-checkpoints): train it on from there
        log.warning("continuing the finished run in %s from its last checkpoint (%s)", out, "; ".join(diffs))
        return None
    if diffs:
        raise ValueError(
            f"{out} holds a finished run with other settings ({'; '.join(diffs)}): pick another --output-dir, or add "
            f"--no-resume to move that run aside (into {out}/.replaced-<date>/) and train afresh there"
        )
    return _read_json(metrics)


def finish_run(cfg: TrainConfig, out: Path, history: list[dict], metric: str, title: str) -> None:
    """After a finished run: draw ``curves.{png,svg}`` (training loss and dev ``metric`` from the Trainer's
    ``history``) and remove the checkpoint folders (optimizer state, a copy of model/) unless kept. The model and
    metrics are saved by then: a figure that cannot be drawn is a warning, not a failed run."""
    if not cfg.keep_checkpoints:
        for c in _checkpoint_dirs(out):
            shutil.rmtree(c, ignore_errors=True)
    for ext in ("png", "svg"):
        try:
            plot_curves(history, out / f"curves.{ext}", metric, title=title,
                        eval_name="held-out" if getattr(cfg, "holdout", 0) else "dev")
        except Exception as e:  # noqa: BLE001 - a plotting backend's error must not undo a finished run
            log.warning("could not draw %s: %s: %s (the model and metrics.json are saved)", out / f"curves.{ext}", type(e).__name__, e)


def same_paths(d: dict) -> dict:
    """``d`` with its data folder and model resolved: the same folder written two ways is the same setting."""
    d = dict(d)
    for k in ("data_dir", "model"):
        if d.get(k) and Path(str(d[k])).expanduser().exists():
            d[k] = str(Path(str(d[k])).expanduser().resolve())
    return d




def _checkpoint_dirs(out: Path) -> list[Path]:
    """The Trainer's ``checkpoint-N`` folders in a run folder."""
    return sorted(p for p in out.glob("checkpoint-*") if p.is_dir())


def check_resume(cfg: TrainConfig, out: Path) -> None:
    """Stop before any work if ``out`` holds checkpoints of a run with other settings (unless ``cfg.resume`` is off):
    the message names the differences. Changes nothing in ``out``."""
    ckpts = _checkpoint_dirs(out)
    if not ckpts or not cfg.resume:
        return
    saved = out / "run_config.json"
    if saved.is_file():
        diffs = settings_differences(_read_json(saved), asdict(cfg), _RESUME_FREE, TrainConfig.__dataclass_fields__)
    else:  # a run of an older attnkit: compare the attention its checkpoints were trained with
        diffs = _spec_differences(cfg, Path(get_last_checkpoint(str(out)) or ckpts[-1]) / "config.json")
    if diffs:
        raise ValueError(
            f"{out} holds checkpoints of a run with other settings ({'; '.join(diffs)}): rerun with the same "
            "settings to resume it, add --no-resume to start afresh there, or pick another --output-dir"
        )


def move_aside(out: Path, keep: tuple = ()) -> Path | None:
    """Move everything of an earlier run in ``out`` (all but hidden entries and ``keep``) into a new hidden folder
    ``.replaced-<date>/`` beside it, and return that folder (None if there was nothing to move). Nothing is deleted."""
    entries = [p for p in out.iterdir() if not p.name.startswith(".") and p.name not in keep]
    if not entries:
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = out / f".replaced-{stamp}"
    n = 1
    while aside.exists():
        n += 1
        aside = out / f".replaced-{stamp}-{n}"
    aside.mkdir()
    for p in entries:
        os.replace(p, aside / p.name)
    return aside


def _spec_differences(cfg, config_file: Path) -> list[str]:
    """How the attention stored in a model's ``config.json`` differs from ``cfg``'s (for runs without run_config.json)."""
    stored = _read_json(config_file).get("attnkit") if config_file.is_file() else None
    now = cfg.spec().to_dict()
    return [] if stored is None else [f"{option_name(k)}: {stored.get(k)!r} there, {now[k]!r} now" for k in now if stored.get(k, now[k]) != now[k]]


def prepare_output(cfg, out: Path, keep: tuple = ("mini_init",)) -> None:
    """Make a run folder ready once everything before training has worked (its settings were checked first):
    ``cfg.resume = False`` moves the earlier run there (finished or not: model, metrics, checkpoints, figures) aside
    into ``.replaced-<date>/`` and starts afresh; then writes ``run_config.json``: only now is the folder committed
    to the new run, so a run killed before this point leaves the earlier one as it was."""
    if not cfg.resume:
        aside = move_aside(out, keep)
        if aside is not None:
            log.warning("--no-resume: the earlier run in %s was moved aside to %s", out, aside)
    if int(os.environ.get("RANK", "0")) == 0:
        extra = {"attention_spec": cfg.spec().to_dict()} | ({"head_spec": cfg.head().to_dict()} if hasattr(cfg, "head") else {})
        write_json_atomic(out / "run_config.json", asdict(cfg) | extra)


def best_checkpoint(trainer, cfg) -> dict:
    """Which step's weights model/ holds (``best_step``), and the checkpoint folder only if it is kept
    (``--keep-checkpoints``): metrics.json never names a folder that the end of the run removes."""
    best = trainer.state.best_model_checkpoint
    out = {"best_step": int(Path(best).name.rsplit("-", 1)[-1]) if best else None}
    if best and cfg.keep_checkpoints:
        out["best_checkpoint"] = best
    return out


#: accelerate's name of each precision (``accelerate launch --mixed_precision``, the ACCELERATE_MIXED_PRECISION variable)
_ACCELERATE_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}
#: the options that ask for each of accelerate's precisions
_PRECISION_OPTION = {"no": "neither --bf16 nor --fp16", "bf16": "--bf16", "fp16": "--fp16"}


def check_precision(cfg: TrainConfig) -> None:
    """ValueError where the run's arithmetic cannot run here, or would not be the one recorded; a warning where bf16
    runs but slowly (a CPU without native bf16)."""
    env = os.environ.get("ACCELERATE_MIXED_PRECISION")
    if env and env != _ACCELERATE_PRECISION[cfg.precision]:
        # the Trainer would take the variable over a float32 run and train it in mixed precision, unrecorded
        raise ValueError(f"ACCELERATE_MIXED_PRECISION={env} (set by `accelerate launch --mixed_precision {env}` or by hand) "
                         f"but the run asks {cfg.precision}: give {_PRECISION_OPTION.get(env, 'the matching option')}, "
                         "or launch without it")
    if cfg.precision == "fp16" and not torch.cuda.is_available():
        raise ValueError("--fp16: float16 mixed precision needs a CUDA GPU (none here); on a CPU use --bf16 (fast where the CPU has "
                         "AVX512-BF16 or AMX) or neither")
    if cfg.precision == "bf16" and torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
        raise ValueError(f"--bf16: this GPU ({torch.cuda.get_device_name()}) has no bfloat16; use --fp16 or neither")
    if cfg.precision == "bf16" and not torch.cuda.is_available():
        native = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)() or getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
        if not native:
            log.warning("--bf16: this CPU has no native bfloat16 (AVX512-BF16 or AMX): the run is emulated and may be slower than float32")


def training_arguments(cfg: TrainConfig, out: Path, best_metric: str, **extra):
    """The Trainer settings every attnkit run shares; the best dev ``best_metric`` (higher is better) is kept.
    (``train`` has already refused a precision that cannot run here: :func:`check_precision`.)"""
    per_steps = cfg.max_steps > 0 or cfg.eval_steps is not None
    every = cfg.eval_steps or (cfg.max_steps if cfg.max_steps > 0 else None)
    return TrainingArguments(
        output_dir=str(out),
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=cfg.eval_batch_size,
        learning_rate=cfg.lr,
        weight_decay=cfg.weight_decay,
        warmup_steps=cfg.warmup_ratio,
        seed=cfg.seed,
        data_seed=cfg.seed,
        eval_strategy="steps" if per_steps else "epoch",
        save_strategy="steps" if per_steps else "epoch",
        eval_steps=every,
        save_steps=every,
        save_total_limit=2,
        load_best_model_at_end=True,
        metric_for_best_model=best_metric,
        greater_is_better=True,
        logging_steps=cfg.logging_steps,
        report_to="none",
        disable_tqdm=False,
        dataloader_num_workers=0,
        train_sampling_strategy="group_by_length" if cfg.group_by_length else "random",
        use_cpu=not torch.cuda.is_available(),
        bf16=cfg.precision == "bf16",
        fp16=cfg.precision == "fp16",
        # our losses are already means over the batch: averaging "tokens" across processes on top of that
        # doubles the logged loss and the gradients before clipping under torchrun with 2 processes
        average_tokens_across_devices=False,
        **extra,
    )


class AttnkitTrainer(Trainer):
    """The Trainer, with some parameters in optimizer groups of their own, under the same schedule as the others and
    without weight decay: a setting learned per head (lam, alpha: :data:`LEARNED`) at ``head_lr``, and SesameBERT's
    layer weights (SE, the weighted mix: :func:`layer_weight_parameters`) at ``pooling_lr``. Neither: the Trainer as it is."""

    def __init__(self, *args, head_lr: float | None = None, pooling_lr: float | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.head_lr, self.pooling_lr = head_lr, pooling_lr

    def create_optimizer(self, model=None):
        if self.optimizer is not None or (self.head_lr is None and self.pooling_lr is None):
            return super().create_optimizer(model)
        opt = super().create_optimizer(model)
        model = model or self.model
        names = tuple(e.param for e in LEARNED.values())
        groups = [([p for n, p in model.named_parameters() if n.endswith(names)], self.head_lr),
                  (layer_weight_parameters(model), self.pooling_lr)]
        for params, lr in groups:
            params = [p for p in params if p.requires_grad]
            if lr is None or not params:
                continue
            ids = {id(p) for p in params}
            for group in opt.param_groups:
                group["params"] = [p for p in group["params"] if id(p) not in ids]
            opt.add_param_group({"params": params, "lr": lr, "weight_decay": 0.0})
        return opt


def fit(trainer, cfg: TrainConfig):
    """``trainer.train()``, resumed from the run folder's newest complete checkpoint unless ``cfg.resume`` is off."""
    resume = last_complete_checkpoint(cfg.output_dir) if cfg.resume else None
    if resume:
        log.warning("resuming from %s", resume)
    return trainer.train(resume_from_checkpoint=resume)


def check_finite(model, cfg, history: list[dict]) -> None:
    """After training: weights that hold NaN or inf (a diverged run) are refused before anything is evaluated or
    saved as the model, naming the first logged non-finite loss; a diverged model would otherwise report the
    accuracy of a constant prediction and write NaN probabilities."""
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        first = next((h.get("step") for h in history if "loss" in h and not math.isfinite(float(h["loss"]))), None)
        raise ValueError(f"training diverged: {len(bad)} weight tensor(s) hold NaN or inf (e.g. {bad[0]})"
                         f"{f', the loss was NaN by step {first}' if first is not None else ''}; nothing was saved as the "
                         f"model: lower --lr (it was {cfg.lr:g})")


def check_length(cfg: TrainConfig, model_path: str) -> None:
    """--max-length must fit the model's position embeddings (longer inputs would crash inside the model)."""
    path = resolve_model(model_path)
    check_max_length(cfg.max_length, AutoConfig.from_pretrained(path), f"model {cfg.model}")


def strip_prefix(d: dict, prefix: str) -> dict:
    """``d`` with ``prefix`` removed from its keys (the Trainer's ``eval_accuracy`` -> ``accuracy``)."""
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in d.items()}
