"""The Hugging Face Trainer as attnkit runs it: its arguments, precision and warm-ups, the fit with resume, and
finishing a run (best checkpoint, curves, finite weights).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from pathlib import Path

import torch
from transformers import AutoConfig, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import TrainOutput

from attnkit.analysis.explain import plot_curves
from attnkit.attention.normalisers import LEARNED
from attnkit.errors import UserError
from attnkit.models.checkpoint import umask_modes
from attnkit.models.pooling import layer_weight_parameters
from attnkit.models.resolve import check_max_length, resolve_model
from attnkit.runfiles.atomic import (
    disk_hint,
    is_disk_failure,
    is_main_process,
    launch_ranks,
    rendezvous,
    write_failure,
    write_json_atomic,
)
from attnkit.runfiles.names import WRITTEN_BY
from attnkit.runfiles.ownership import make_way, write_folder_manifest
from attnkit.training.checkpoints import (
    last_complete_checkpoint,
    loss_of,
    non_finite_weight,
    recorded_checkpoints,
    remove_checkpoint,
    seconds_of,
    trainer_state_of,
)
from attnkit.training.config import TrainConfig
from attnkit.training.run_record import (
    LOSS_FILE,
    read_record,
    start_record,
    write_record,
)

log = logging.getLogger("attnkit")


class RunRecorder(TrainerCallback):
    """Keeps the run's record up to date: every checkpoint is listed before the Trainer writes it (so a save cut short
    is known as this run's), the loss summed so far is stored in it (a resumed run reports the whole run's mean
    training loss), and only checkpoints the record lists are rotated out (the newest two and the best are kept).

    The loss is summed here, step by step in float64 from where the resumed checkpoint left it (:meth:`count`), not
    taken from the Trainer's float32 sums between log steps: a sum split at a checkpoint would end a resumed run's
    ``train_loss`` a few units in the eighth digit away from the uninterrupted run's."""

    def __init__(self, trainer, out: Path, prior_loss: float = 0.0, keep: int | None = 2, prior_steps: int = 0,
                 prior_seconds: float | None = 0.0):
        self.trainer, self.out, self.total, self.keep = trainer, Path(out), prior_loss, keep
        self.calls = prior_steps * trainer.args.gradient_accumulation_steps  # the training_step calls summed so far
        self.saving: str | None = None
        self.prior_seconds, self.started = prior_seconds, time.monotonic()  # (None: the earlier processes' unknown)

    def on_train_begin(self, args, state, control, **kw):
        self.started = time.monotonic()

    def seconds_so_far(self) -> float | None:
        """The seconds of training of the run's steps so far: the earlier processes' (to their last checkpoint) and
        this one's."""
        return None if self.prior_seconds is None else self.prior_seconds + time.monotonic() - self.started

    def count(self, loss) -> None:
        """Adds one training step's loss (what ``training_step`` returns) to the run's sum; a loss that is not finite
        counts as the mean so far, as the Trainer counts it (``logging_nan_inf_filter``)."""
        value = float(loss)
        if not math.isfinite(value):
            value = self.total / self.calls if self.calls else 0.0
        self.total += value
        self.calls += 1

    def _note(self, args, state, control, **kw):
        if control.should_save and state.is_world_process_zero:
            name = f"checkpoint-{state.global_step}"
            rec = read_record(self.out) or start_record(self.out, "attnkit train")
            if name not in rec["checkpoints"]:
                rec["checkpoints"].append(name)
            rec["saving"] = self.saving = name
            write_record(self.out, rec)

    on_step_end = on_epoch_end = _note

    def loss_so_far(self) -> float:
        """The loss summed over the run's steps so far (the mean over the processes of a several-process run: every
        process must call it)."""
        args = self.trainer.args
        if args.world_size <= 1:
            return self.total
        t = torch.tensor([self.total], dtype=torch.float32 if args.device.type == "mps" else torch.float64, device=args.device)
        return float(self.trainer.accelerator.gather(t).mean())

    def on_save(self, args, state, control, **kw):
        total = self.loss_so_far()
        if not state.is_world_process_zero:
            return
        name = f"checkpoint-{state.global_step}"
        if (self.out / name).is_dir():
            write_json_atomic(self.out / name / LOSS_FILE, {WRITTEN_BY: "attnkit", "total_loss": total,
                                                            "global_step": state.global_step,
                                                            "train_seconds": self.seconds_so_far()})
            umask_modes(self.out / name)  # the Trainer's safetensors file is 0600
            write_folder_manifest(self.out / name, "attnkit train")  # what it holds, so that only that is ever deleted
        rec = read_record(self.out) or start_record(self.out, "attnkit train")
        rec["saving"] = self.saving = None
        best = Path(state.best_model_checkpoint).name if state.best_model_checkpoint else None
        ckpts = recorded_checkpoints(self.out, rec)
        keep = {p.name for p in ckpts[-1:]} | ({best} if best else set())  # the newest and the best, as the Trainer keeps
        for c in reversed(ckpts):
            if self.keep is not None and len(keep) >= self.keep:
                break
            keep.add(c.name)
        for c in ckpts:
            if c.name not in keep:
                remove_checkpoint(c)
        rec["checkpoints"] = [n for n in rec["checkpoints"] if n in keep or not (self.out / n).exists()]
        rec["checkpoints"] = [n for n in rec["checkpoints"] if (self.out / n).exists()]
        write_record(self.out, rec)


def subsample(ds, n: int | None, seed: int):
    """A random subset of ``n`` rows of ``ds`` (all of it if ``n`` is None or not smaller)."""
    if n is None or ds is None or len(ds) <= n:
        return ds
    return ds.shuffle(seed=seed).select(range(n))


def found_complete(cfg, out: Path, done: dict, metric: str, title: str, what: str = "run", again: str = "trains it again") -> dict:
    """A run found complete when its command is run again: what a kill between its metrics.json and its tidy-up left
    undone is done now (:func:`finish_run`, ``missing_only``) and said; the rest is left byte for byte. Returns
    ``done`` marked ``already_complete``, and ``tidied``: whether anything was left to do (else the command says that
    nothing was changed)."""
    tidied = finish_run(cfg, out, done.get("log_history", []), metric, title=title, missing_only=True)
    if tidied:
        log.warning("the %s in %s was stopped after its metrics.json and before its tidy-up: its checkpoints were removed "
                    "(unless kept) and its curves drawn now; it is complete (--no-resume %s)", what, out, again)
    return done | {"already_complete": True, "tidied": tidied}


def finish_run(cfg: TrainConfig, out: Path, history: list[dict], metric: str, title: str, *, missing_only: bool = False) -> bool:
    """After a finished run (its model and metrics saved): mark it finished in its record, draw ``curves.{png,svg}``
    (training loss and dev ``metric`` from the Trainer's ``history``) and remove the checkpoint folders this run wrote
    (its record lists them: optimizer state, a copy of model/) unless kept; a ``checkpoint-*`` folder it did not write
    is left alone. A figure that cannot be drawn is a warning, not a failed run. ``missing_only``: a run found complete
    when it is run again: only what a kill between its metrics and its tidy-up left undone (checkpoints to remove,
    curves not drawn), so that a finished run run again is otherwise left byte for byte. Returns whether anything was
    done."""
    rec = read_record(out)
    left = recorded_checkpoints(out, rec) if rec is not None and not cfg.keep_checkpoints else []
    curves = [ext for ext in ("png", "svg") if not missing_only or not (out / f"curves.{ext}").exists()]
    if missing_only and not left and not curves:
        return False
    if rec is not None:
        rec["finished"] = True
        write_record(out, rec)
        if left:
            for c in left:
                remove_checkpoint(c)
            rec["checkpoints"] = [n for n in rec["checkpoints"] if (out / n).exists()]
            write_record(out, rec)
    for ext in curves:
        try:
            plot_curves(history, make_way(out / f"curves.{ext}"), metric, title=title,
                        eval_name="held-out" if getattr(cfg, "holdout", 0) else "dev")
        except Exception as e:  # noqa: BLE001 - a plotting backend's error must not undo a finished run
            log.warning("could not draw %s: %s: %s (the model and metrics.json are saved)", out / f"curves.{ext}", type(e).__name__, e)
    return True


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
        raise UserError(f"ACCELERATE_MIXED_PRECISION={env} (set by `accelerate launch --mixed_precision {env}` or by hand) "
                         f"but the run asks {cfg.precision}: give {_PRECISION_OPTION.get(env, 'the matching option')}, "
                         "or launch without it")
    if cfg.precision == "fp16" and not torch.cuda.is_available():
        raise UserError("--fp16: float16 mixed precision needs a CUDA GPU (none here); on a CPU use --bf16 (fast where the CPU has "
                         "AVX512-BF16 or AMX) or neither")
    if cfg.precision == "bf16" and torch.cuda.is_available() and not torch.cuda.is_bf16_supported():
        raise UserError(f"--bf16: this GPU ({torch.cuda.get_device_name()}) has no bfloat16; use --fp16 or neither")
    if cfg.precision == "bf16" and not torch.cuda.is_available():
        native = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)() or getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
        if not native:
            log.warning("--bf16: this CPU has no native bfloat16 (AVX512-BF16 or AMX): the run is emulated and may be slower than float32")


def check_warmups(cfg: TrainConfig, n_train: int) -> None:
    """ValueError where a warm-up given as a step count (``--warmup``, ``--lam-warmup``, ``--alpha-warmup``) outlasts
    the run (``--max-steps``, else ``n_train`` examples for ``--epochs`` at ``--batch-size`` per process and device:
    under ``torchrun`` each step takes a batch on every process, on one process the Trainer's DataParallel one on
    every GPU): its schedule would never reach its target."""
    devices = launch_ranks()[1] if "WORLD_SIZE" in os.environ else max(1, torch.cuda.device_count())
    steps = cfg.max_steps if cfg.max_steps > 0 else math.ceil(n_train / (cfg.batch_size * devices) * cfg.epochs)
    for name, w in (("--warmup", cfg.warmup_ratio), ("--lam-warmup", cfg.lam_warmup), ("--alpha-warmup", cfg.alpha_warmup)):
        if w >= 1 and w >= steps:
            raise UserError(f"{name} {w:g}: the run has {steps} steps, so the warm-up would never end; give a fraction "
                             "of the steps (< 1) or fewer steps")


def shared_arguments(cfg, out: Path) -> dict:
    """The TrainingArguments every attnkit Trainer shares (fine-tuning, ``adapt``): batch size, optimiser, seeds, logging,
    device and precision. ``cfg`` is a TrainConfig or an AdaptConfig (the fields of the same names)."""
    return dict(
        output_dir=str(out),
        per_device_train_batch_size=cfg.batch_size,
        learning_rate=cfg.lr,
        weight_decay=cfg.weight_decay,
        warmup_steps=cfg.warmup_ratio,
        seed=cfg.seed,
        data_seed=cfg.seed,
        logging_steps=cfg.logging_steps,
        report_to="none",
        disable_tqdm=False,
        dataloader_num_workers=0,
        use_cpu=not torch.cuda.is_available(),
        bf16=cfg.precision == "bf16",
        fp16=cfg.precision == "fp16",
        # our losses are already means over the batch: averaging "tokens" across processes on top of that
        # doubles the logged loss and the gradients before clipping under torchrun with 2 processes
        average_tokens_across_devices=False,
    )


def training_arguments(cfg: TrainConfig, out: Path, best_metric: str, **extra):
    """The Trainer settings of a fine-tuning run (:func:`shared_arguments` and its evaluation and checkpoints); the best
    dev ``best_metric`` (higher is better) is kept. (``train`` has already refused a precision that cannot run here:
    :func:`check_precision`.)"""
    per_steps = cfg.max_steps > 0 or cfg.eval_steps is not None
    every = cfg.eval_steps or (cfg.max_steps if cfg.max_steps > 0 else None)
    with rendezvous():  # torchrun's processes meet here
        return TrainingArguments(
            **shared_arguments(cfg, out),
            num_train_epochs=cfg.epochs,
            max_steps=cfg.max_steps,
            per_device_eval_batch_size=cfg.eval_batch_size,
            eval_strategy="steps" if per_steps else "epoch",
            save_strategy="steps" if per_steps else "epoch",
            eval_steps=every,
            save_steps=every,
            save_total_limit=2,  # kept by fit()'s RunRecorder among this run's checkpoints (the Trainer's rotation is turned off)
            load_best_model_at_end=True,
            metric_for_best_model=best_metric,
            greater_is_better=True,
            train_sampling_strategy="group_by_length" if cfg.group_by_length else "random",
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
    """``trainer.train()``, resumed from the run folder's newest complete checkpoint unless ``cfg.resume`` is off.

    Every checkpoint is listed in the run's record before it is written (:class:`RunRecorder`). A checkpoint that
    cannot be written (a full disk, a read-only folder) is removed and reported as a UserError naming it. A resumed
    run's ``train_loss`` is the mean over all of the run's steps, not over the resumed ones only."""
    out = Path(cfg.output_dir)
    resume = last_complete_checkpoint(out) if cfg.resume else None
    prior = 0.0
    if resume:
        bad = non_finite_weight(resume)
        if bad is not None:
            raise UserError(f"{resume} holds NaN or inf weights (e.g. {bad}): the run diverged before it was saved, and "
                            "resuming would go on from them; rerun with --no-resume (the run is moved aside, not deleted), "
                            f"with a lower --lr (it was {cfg.lr:g})")
        log.warning("resuming from %s", resume)
        prior = loss_of(Path(resume))
    saved = trainer_state_of(Path(resume)) if resume else {}
    if resume and _schedule_done(trainer, saved):
        # the run had trained all its steps (its final save was cut short): the Trainer, resumed there, would train a
        # step beyond its schedule; take the checkpoint's state and best weights as they are
        return _finish_from(trainer, Path(resume), prior)
    # the Trainer's own rotation deletes every folder named checkpoint-* (a checkpoint-mine/ of the user's too): the
    # recorder rotates instead, among the checkpoints this run wrote, keeping as many as the Trainer would
    limit = trainer.args.save_total_limit
    trainer.args.save_total_limit = None
    done = saved.get("global_step", 0)
    recorder = RunRecorder(trainer, out, prior or 0.0, keep=limit if limit and limit > 0 else None,
                           prior_steps=done if isinstance(done, int) else 0,
                           prior_seconds=seconds_of(Path(resume)) if resume else 0.0)
    trainer.add_callback(recorder)
    step = trainer.training_step

    def counted_step(*args, **kwargs):
        loss = step(*args, **kwargs)
        recorder.count(loss)
        return loss

    trainer.training_step = counted_step
    try:
        result = trainer.train(resume_from_checkpoint=resume)
    except BaseException as e:
        pending = recorder.saving
        if pending is None or not is_main_process():
            raise
        shutil.rmtree(out / pending, ignore_errors=True)  # listed as this run's before it was written: half of it is no use
        rec = read_record(out)
        if rec is not None:
            write_record(out, rec | {"saving": None, "checkpoints": [n for n in rec["checkpoints"] if n != pending]})
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        if isinstance(e, UserError) and not isinstance(e, OSError):  # a refusal from the model (what it computes while
            raise  # saving), not the disk's: said as it is, and a rerun would meet it again
        why = write_failure(e)
        raise UserError(f"cannot write the checkpoint {out / pending}: {why}{disk_hint(e)}; the half-written checkpoint "
                        "was removed" + (": run the same command again to resume from the last complete one"
                                         if is_disk_failure(e) else "")) from None
    finally:
        trainer.remove_callback(recorder)
        del trainer.training_step  # the class's own again
    steps = trainer.state.global_step
    metrics, here = dict(result.metrics), steps - (done if isinstance(done, int) else 0)
    sps, runtime = metrics.get("train_samples_per_second"), metrics.get("train_runtime")
    samples = sps * runtime * steps / here if here > 0 and isinstance(sps, (int, float)) and runtime else None
    metrics = whole_run_speed(metrics, recorder.seconds_so_far() if resume else None, resume, samples, steps)
    if prior is None:  # a checkpoint of an earlier attnkit: the loss of the steps before it was not kept
        metrics.pop("train_loss", None)
        metrics["train_loss_note"] = (f"resumed from {resume}, which does not record the loss of its steps: the mean "
                                      "training loss of the whole run is not known")
        _set_summary(trainer, metrics)
        return TrainOutput(result.global_step, float("nan"), metrics)
    loss = recorder.loss_so_far() / max(steps, 1)  # the whole run's mean, summed as a run never resumed sums it
    metrics["train_loss"] = loss
    _set_summary(trainer, metrics)
    return TrainOutput(result.global_step, loss, metrics)


def whole_run_speed(metrics: dict, seconds: float | None, resume, samples: float | None, steps: int) -> dict:
    """A resumed run's ``train_runtime`` and speeds over the whole run's training, ``samples`` and ``steps`` in
    ``seconds`` (the Trainer's are this process's steps in its own time: 0.0 s when it resumed at the end), and where it
    resumed from; the speeds dropped where the earlier processes' time is not known (a checkpoint of an earlier
    attnkit)."""
    if not resume:
        return metrics
    out = metrics | {"resumed_from": Path(resume).name}
    if seconds is None or seconds <= 0:
        for k in ("train_runtime", "train_samples_per_second", "train_steps_per_second"):
            out.pop(k, None)
        out["train_runtime_note"] = f"resumed from {resume}, which does not record the time of its steps"
        return out
    out["train_runtime"] = round(seconds, 4)
    out["train_steps_per_second"] = round(steps / seconds, 3)
    if samples is None:
        out.pop("train_samples_per_second", None)
    else:
        out["train_samples_per_second"] = round(samples / seconds, 3)
    return out


#: what the Trainer's closing log entry says of the whole run
SUMMARY_KEYS = ("train_loss", "train_runtime", "train_samples_per_second", "train_steps_per_second")


def _set_summary(trainer, metrics: dict) -> None:
    """The Trainer's closing log entry of a resumed run says what ``metrics`` (the run's ``train`` record) says of the
    whole run: its mean loss, time and speeds, not the resumed process's alone (its time was the resumed part's, sweep
    s25); one that ``metrics`` leaves out (not known) is left out there too."""
    for entry in reversed(trainer.state.log_history):
        if any(k in entry for k in SUMMARY_KEYS):
            for k in SUMMARY_KEYS:
                if k in metrics:
                    entry[k] = metrics[k]
                else:
                    entry.pop(k, None)
            return


def _schedule_done(trainer, saved: dict) -> bool:
    """Whether a checkpoint's trainer state (``saved``) is at the end of the schedule ``trainer`` would train."""
    step, epoch = saved.get("global_step"), saved.get("epoch")
    if not isinstance(step, int) or not isinstance(epoch, (int, float)):
        return False
    if trainer.args.max_steps > 0:
        return step >= trainer.args.max_steps
    return epoch >= trainer.args.num_train_epochs - 1e-9


def _finish_from(trainer, ckpt: Path, prior: float | None):
    """The end of a run whose last checkpoint ``ckpt`` finished its schedule: the Trainer's state and best weights
    (else the checkpoint's own) are loaded, the callbacks told training ended; the TrainOutput of the whole run."""
    from transformers.trainer_callback import TrainerState

    trainer.state = TrainerState.load_from_json(str(ckpt / "trainer_state.json"))
    best = trainer.state.best_model_checkpoint
    if trainer.args.load_best_model_at_end and best and Path(best).is_dir():
        trainer._load_best_model()
    else:
        trainer._load_from_checkpoint(str(ckpt))
    h = trainer.callback_handler
    for cb in h.callbacks:  # the run's own schedules end where training ends (the Trainer's progress bar never started)
        if not type(cb).__module__.startswith("transformers."):
            cb.on_train_end(trainer.args, trainer.state, trainer.control, model=trainer.model, processing_class=h.processing_class,
                            optimizer=None, lr_scheduler=None, train_dataloader=None, eval_dataloader=None)
    steps = trainer.state.global_step
    args = trainer.args
    samples = steps * args.train_batch_size * args.gradient_accumulation_steps * args.world_size  # (as the Trainer counts)
    metrics = whole_run_speed({"epoch": trainer.state.epoch, "total_flos": trainer.state.total_flos}, seconds_of(ckpt),
                              ckpt, samples, steps)
    if prior is None:
        metrics["train_loss_note"] = (f"resumed from {ckpt}, which does not record the loss of its steps: the mean "
                                      "training loss of the whole run is not known")
        return TrainOutput(steps, float("nan"), metrics)
    metrics["train_loss"] = prior / max(steps, 1)
    if not any("train_loss" in e for e in trainer.state.log_history):  # the closing entry the Trainer logs at its end
        trainer.state.log_history.append({"epoch": trainer.state.epoch, "step": steps, **{k: v for k, v in metrics.items()
                                          if k not in ("epoch", "resumed_from", "train_runtime_note")}})
    return TrainOutput(steps, metrics["train_loss"], metrics)


def check_finite(model, cfg, history: list[dict]) -> None:
    """After training: weights that hold NaN or inf (a diverged run) are refused before anything is evaluated or
    saved as the model, naming the first logged non-finite loss; a diverged model would otherwise report the
    accuracy of a constant prediction and write NaN probabilities."""
    bad = [n for n, p in model.named_parameters() if not torch.isfinite(p).all()]
    if bad:
        first = next((h.get("step") for h in history if "loss" in h and not math.isfinite(float(h["loss"]))), None)
        raise UserError(f"training diverged: {len(bad)} weight tensor(s) hold NaN or inf (e.g. {bad[0]})"
                         f"{f', the loss was NaN by step {first}' if first is not None else ''}; nothing was saved as the "
                         f"model: lower --lr (it was {cfg.lr:g}) and add --no-resume (a checkpoint in {cfg.output_dir} may "
                         "hold the diverged weights; the run is moved aside, not deleted)")


def check_length(cfg: TrainConfig, model_path: str) -> None:
    """--max-length must fit the model's position embeddings (longer inputs would crash inside the model)."""
    path = resolve_model(model_path)
    check_max_length(cfg.max_length, AutoConfig.from_pretrained(path), f"model {cfg.model}")


def strip_prefix(d: dict, prefix: str) -> dict:
    """``d`` with ``prefix`` removed from its keys (the Trainer's ``eval_accuracy`` -> ``accuracy``)."""
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in d.items()}
