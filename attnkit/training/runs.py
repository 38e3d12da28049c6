"""What every training run shares: the run folder (attnkit's record of the run, resume, settings check, finished and
damaged runs, damaged checkpoints; attnkit deletes or replaces only what it can prove it wrote),
the Trainer's settings, and small helpers. Classification (:mod:`finetune`) and span QA (:mod:`span_qa`) both use it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import shutil
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import AutoConfig, Trainer, TrainerCallback, TrainingArguments
from transformers.trainer_utils import TrainOutput

from attnkit.analysis.explain import plot_curves
from attnkit.attention.normalisers import LEARNED, names_with
from attnkit.models.build import check_max_length, check_weights_file, resolve_model
from attnkit.models.pooling import layer_weight_parameters
from attnkit.errors import DataFormatError, UserError
from attnkit.runfiles import (
    LOCK_FILE, REPLACED_PREFIX, RUN_RECORD, WRITTEN_BY, folder_is_as_written, folder_lock, is_main_process,
    make_way, path_problem, read_folder_manifest, read_json, replaced_folder, set_aside, write_folder_manifest, write_json_atomic,
)
from attnkit.training.config import METRICS_FILE, MODEL_DIR, TrainConfig, option_name

log = logging.getLogger("attnkit")


def subsample(ds, n: int | None, seed: int):
    """A random subset of ``n`` rows of ``ds`` (all of it if ``n`` is None or not smaller)."""
    if n is None or ds is None or len(ds) <= n:
        return ds
    return ds.shuffle(seed=seed).select(range(n))


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest ``checkpoint-N`` this run wrote (its record lists it) and the Trainer finished writing (it writes
    trainer_state.json last). A folder of that name the record does not list is never resumed from.

    A checkpoint whose save was cut short (the record says it was being written, and it has no trainer_state.json)
    is removed: the run wrote it, and half of it is of no use. A damaged one (a disk fault: garbled state, weights,
    RNG state, optimizer) is moved aside (``.incomplete-checkpoint-N``) with a message; the one before is used.
    """
    out = Path(output_dir)
    rec = read_record(out)
    if rec is None:
        return None
    while True:
        ckpts = recorded_checkpoints(out, rec)
        if not ckpts:
            return None
        last = ckpts[-1]
        why = _checkpoint_damage(last)
        if why is None:
            return str(last)
        if rec.get("saving") == last.name and not (last / "trainer_state.json").is_file():
            shutil.rmtree(last, ignore_errors=True)
            log.warning("checkpoint %s was cut short while it was written (%s): removed, resuming from the one before", last, why)
        else:
            aside = out / f".incomplete-{last.name}"
            n = 1
            while aside.exists():
                n += 1
                aside = out / f".incomplete-{last.name}-{n}"
            os.replace(last, aside)
            log.warning("checkpoint %s is not usable (%s); moved aside to %s, resuming from the one before", last, why, aside)
        rec["checkpoints"] = [c for c in rec.get("checkpoints", []) if c != last.name]
        rec["saving"] = None
        write_record(out, rec)


def _checkpoint_damage(ckpt: Path) -> str | None:
    """Why a Trainer checkpoint folder cannot be resumed from, or None if it can."""
    state = ckpt / "trainer_state.json"
    if not state.is_file():
        return "no trainer_state.json: it was not finished"
    try:
        read_json(state, "the Trainer's state of a checkpoint")
    except DataFormatError as e:
        return f"trainer_state.json is garbled ({e})"
    try:
        check_weights_file(ckpt)
    except OSError as e:
        return str(e)
    rng = ckpt / "rng_state.pth"
    if rng.exists():  # small: load it as the Trainer will
        try:
            from transformers.trainer_pt_utils import safe_globals  # the numpy types the Trainer's RNG state holds

            with safe_globals():
                torch.load(rng, weights_only=True)
        except Exception as e:  # noqa: BLE001 - pickle, zip and short-read errors alike
            return f"{rng.name} is damaged ({type(e).__name__})"
    for name in ("optimizer.pt", "scheduler.pt", "scaler.pt"):  # large: check that the archive is whole, without loading it
        f = ckpt / name
        if f.exists():
            try:
                import zipfile

                with zipfile.ZipFile(f) as z:
                    z.infolist()
            except Exception as e:  # noqa: BLE001
                return f"{name} is damaged ({type(e).__name__})"
    return None


# ----------------------------------------------------------------------------- the record of a run


def read_record(out: Path) -> dict | None:
    """attnkit's record of the run in ``out`` (RUN_RECORD), or None if there is none. One that cannot be read is a
    ValueError naming it and the ways out."""
    f = Path(out) / RUN_RECORD
    if not f.exists():
        return None
    try:
        rec = read_json(f, "attnkit's record of a run")
        if not str(rec.get(WRITTEN_BY, "")).startswith("attnkit"):
            raise ValueError("not a record written by attnkit")
        ckpts, saving = rec.get("checkpoints", []), rec.get("saving")
        if not (isinstance(ckpts, list) and all(isinstance(c, str) for c in ckpts)) or not isinstance(saving, (str, type(None))):
            raise ValueError("its checkpoints are not a list of folder names")
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{f}, attnkit's record of the run in {out}, is unreadable ({_why(e)}): add --no-resume to move the run "
                         f"aside (into {out}/{REPLACED_PREFIX}<date>/) and train afresh there, or pick another --output-dir") from None
    rec.setdefault("checkpoints", [])
    return rec


#: the command that makes each kind of run (its record's "written_by"), by the type of its settings
_COMMANDS = {"TrainConfig": "attnkit train", "AdaptConfig": "attnkit adapt", "PretrainConfig": "attnkit pretrain"}
#: what each command's run folder holds, for messages
_KINDS = {"attnkit train": ("a train run", "a fine-tuned model"), "attnkit adapt": ("an adapt run", "an encoder adapted by masked-LM"),
          "attnkit pretrain": ("a pretrain run", "a MiniBERT pre-trained by masked-LM")}


def command_of(cfg) -> str:
    """The command whose run ``cfg`` configures ("attnkit train", "attnkit adapt", "attnkit pretrain")."""
    return _COMMANDS.get(type(cfg).__name__, "attnkit train")


def describe_run(out: Path) -> str:
    """What the run folder ``out`` holds, naming the command that made it: "an adapt run (an encoder adapted by
    masked-LM; made by `attnkit adapt`, finished)"; "an attnkit run" where its record names no command attnkit knows."""
    rec = read_record(out)
    made_by = str(rec.get(WRITTEN_BY)) if rec is not None else ""
    if made_by not in _KINDS:
        return "an attnkit run"
    state = "finished" if rec.get("finished") or (Path(out) / METRICS_FILE).is_file() else "not finished"
    kind, what = _KINDS[made_by]
    return f"{kind} ({what}; made by `{made_by}`, {state})"


def check_kind(cfg, out: Path) -> None:
    """Refuse a run folder whose record says another command made it (an adapt run given to ``attnkit train``): its
    settings are not this command's to compare, nor its metrics to return. Nothing is changed; with ``cfg.resume``
    off the earlier run is moved aside when training starts, as any earlier run is."""
    rec = read_record(out) if cfg.resume else None
    made_by, now = (str(rec.get(WRITTEN_BY)) if rec is not None else None), command_of(cfg)
    if made_by not in _KINDS or made_by == now:
        return
    raise ValueError(
        f"--output-dir {out} holds {describe_run(out)}, not a run of `{now}`: nothing was changed; pick another "
        f"--output-dir (to build on its model, name it with --model {out}), or add --no-resume to move that run aside "
        f"(into {out}/{REPLACED_PREFIX}<date>/) and start afresh there"
    )


def write_record(out: Path, rec: dict) -> None:
    """Write the run's record (rank 0 of a multi-process run only)."""
    if is_main_process():
        write_json_atomic(Path(out) / RUN_RECORD, rec)


def start_record(out: Path, command: str) -> dict:
    """A new record of a run of ``command`` ("attnkit train") in ``out``, written now, before the run writes anything."""
    rec = {WRITTEN_BY: command, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "checkpoints": [], "saving": None,
           "finished": False}
    write_record(out, rec)
    return rec


def _step(name: str) -> int:
    tail = name.rsplit("-", 1)[-1]
    return int(tail) if tail.isdigit() else -1


def recorded_checkpoints(out: Path, rec: dict | None = None) -> list[Path]:
    """The ``checkpoint-N`` folders the run in ``out`` wrote (its record lists them) that are there, oldest first."""
    rec = read_record(out) if rec is None else rec
    if rec is None:
        return []
    names = [n for n in rec.get("checkpoints", []) if isinstance(n, str) and _TRAINER_CHECKPOINT.fullmatch(n)]
    return sorted((out / n for n in names if (out / n).is_dir()), key=lambda p: _step(p.name))


def _trainer_named(out: Path) -> list[Path]:
    """Folders named as the Trainer names its checkpoints (``checkpoint-<digits>``): it would write into them."""
    return sorted((p for p in out.iterdir() if p.is_dir() and _TRAINER_CHECKPOINT.fullmatch(p.name)), key=lambda p: _step(p.name))


_TRAINER_CHECKPOINT = re.compile(r"checkpoint-\d+")


class RunRecorder(TrainerCallback):
    """Keeps the run's record up to date: every checkpoint is listed before the Trainer writes it (so a save cut short
    is known as this run's), the loss summed so far is stored in it (a resumed run reports the whole run's mean
    training loss), and only checkpoints the record lists are rotated out (the newest two and the best are kept)."""

    def __init__(self, trainer, out: Path, prior_loss: float = 0.0, keep: int | None = 2):
        self.trainer, self.out, self.prior_loss, self.keep = trainer, Path(out), prior_loss, keep
        self.saving: str | None = None

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
        t = self.trainer
        pending = getattr(t, "_tr_loss", None)
        return self.prior_loss + float(getattr(t, "_total_loss_scalar", 0.0)) + (float(pending) if pending is not None else 0.0)

    def on_save(self, args, state, control, **kw):
        if not state.is_world_process_zero:
            return
        name = f"checkpoint-{state.global_step}"
        if (self.out / name).is_dir():
            write_json_atomic(self.out / name / LOSS_FILE, {WRITTEN_BY: "attnkit", "total_loss": self.loss_so_far(),
                                                            "global_step": state.global_step})
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


def remove_checkpoint(ckpt: Path) -> None:
    """Delete a checkpoint folder this run wrote, if it holds just what it wrote (its manifest says so); one with a
    file added or changed by hand is moved aside whole into ``.replaced-<date>/`` instead."""
    if folder_is_as_written(ckpt) or (read_folder_manifest(ckpt) is None and not any(ckpt.iterdir())):
        shutil.rmtree(ckpt, ignore_errors=True)
    else:
        aside = set_aside(ckpt)
        log.warning("%s held files this run did not write: moved aside whole to %s", ckpt, aside)


#: beside a checkpoint's trainer state: the training loss summed over its steps (the mean of a resumed run needs it)
LOSS_FILE = "attnkit_loss.json"


#: settings that may differ when a run is resumed: they do not change what is trained, or only how
#: long (a run may be resumed to train for longer)
_RESUME_FREE = ("output_dir", "resume", "logging_steps", "eval_batch_size", "keep_checkpoints", "epochs", "max_steps")
#: settings that may differ from a finished run's for it to count as the same run (epochs and steps count here)
_FINISHED_FREE = ("output_dir", "resume", "logging_steps", "eval_batch_size", "keep_checkpoints")


def _read_json(path: Path) -> dict:
    try:
        return read_json(path)
    except DataFormatError as e:
        raise ValueError(f"{e}: move the run folder aside or pick another --output-dir") from None


def is_run_folder(out: Path) -> bool:
    """Whether ``out`` holds an attnkit run: attnkit's record of it (RUN_RECORD, written when the run starts), or
    nothing but earlier runs attnkit moved aside (a run cut short right after ``--no-resume`` moved them). A ``model/``
    or a ``checkpoint-*`` folder alone proves nothing: anyone may make one."""
    if not out.is_dir():
        return False
    if (out / RUN_RECORD).exists():
        return True
    entries = [p for p in out.iterdir() if p.name != LOCK_FILE]
    return bool(entries) and all(p.is_dir() and p.name.startswith(REPLACED_PREFIX) and (p / RUN_RECORD).exists() for p in entries)


@contextmanager
def run_folder(out: Path, option: str = "--output-dir"):
    """Make (if missing) and lock the run folder ``out`` for one run (rank 0 of a multi-process run only).

    Refused at once: a file, a folder that is not empty and holds no attnkit run (no record of one), a folder another
    process is writing. Leftovers of a save that was killed are tidied (see :func:`tidy_killed_saves`). If the run fails
    and the folder was made here and holds nothing, it is removed again. A run that ends without an error is marked
    finished in its record."""
    out = Path(out)
    if path_problem(out, "folder") not in ("", "does not exist"):
        raise ValueError(f"{option} {out} {path_problem(out, 'folder')}")
    if out.is_dir() and any(p.name != LOCK_FILE for p in out.iterdir()) and not is_run_folder(out):
        if _holds_sweep(out):
            raise ValueError(f"{option} {out} holds an attnkit sweep, not a run (made by `attnkit sweep`): nothing was changed; "
                             "pick a new or empty folder (`attnkit sweep` with that --output-dir adds to the sweep)")
        raise ValueError(f"{option} {out} is not empty and holds no attnkit run (no {RUN_RECORD}, the record a run writes "
                         "there when it starts; a model/ or checkpoint-* folder is no proof): pick a new or empty folder")
    made = first_missing(out)
    out.mkdir(parents=True, exist_ok=True)
    rank0 = is_main_process()
    try:
        with folder_lock(out) if rank0 else contextlib.nullcontext():
            if rank0:
                tidy_killed_saves(out)
            yield out
            rec = read_record(out)
            if rank0 and rec is not None and not rec.get("finished") and (out / METRICS_FILE).is_file():
                write_record(out, rec | {"finished": True})
    except BaseException:
        if made is not None and all(p.name == LOCK_FILE for p in out.iterdir()):
            shutil.rmtree(made, ignore_errors=True)  # the folders made here, holding nothing but the lock file
        raise


#: what attnkit sweep varies, and the normaliser each value belongs to
SWEPT = {setting: names_with(setting=setting)[0] for setting in ("lam", "alpha")}
#: the keys every cell record of a sweep.json holds
SWEEP_RECORD_KEYS = ("seed", "metric", "dev", "test", "mean_support", "run_dir")


def read_sweep_records(path: Path) -> list[dict]:
    """The cell records of a sweep.json attnkit wrote; ValueError naming the file for one it did not write (or that
    was damaged): it is neither read as records nor replaced."""
    way_out = "move it out of the folder, or pick another --output-dir"
    try:
        recs = read_json(path, "an attnkit sweep's record", expect=None)
    except (OSError, ValueError) as e:
        raise ValueError(f"{e if isinstance(e, DataFormatError) else f'{path} cannot be read ({e})'}: it is not an attnkit "
                         f"sweep's record; {way_out}") from None
    def is_record(r) -> bool:
        return (isinstance(r, dict) and all(k in r for k in SWEEP_RECORD_KEYS) and r.get("param", "lam") in SWEPT
                and isinstance(r.get(r.get("param", "lam")), (int, float, str)) and isinstance(r["seed"], int))
    if not isinstance(recs, list) or not all(is_record(r) for r in recs):
        raise ValueError(f"{path} does not hold attnkit sweep records (a list of cells, each with its {', '.join(SWEEP_RECORD_KEYS)}): "
                         f"attnkit did not write it; {way_out}")
    return recs


def _holds_sweep(out: Path) -> bool:
    """Whether ``out`` holds a sweep.json of attnkit's (a hand-written one does not make a folder a sweep)."""
    if not (out / "sweep.json").is_file():
        return False
    try:
        read_sweep_records(out / "sweep.json")
        return True
    except ValueError:
        return False


_KILLED_SAVE = re.compile(r"\.(.+)\.(tmp|old)-[0-9a-f]{8}")


def tidy_killed_saves(out: Path) -> None:
    """What a model save killed half-way left in ``out`` (see :func:`save_checkpoint`), where attnkit's manifest
    inside proves it wrote it: a temporary folder is removed (the save is redone); the earlier model, renamed on its
    way out, is put back if the new one never arrived, else removed. Anything else is left as it is."""
    for p in list(out.iterdir()):
        m = _KILLED_SAVE.fullmatch(p.name)
        if m is None or not p.is_dir() or read_folder_manifest(p) is None:
            continue
        name, kind = m.groups()
        if kind == "tmp":
            shutil.rmtree(p, ignore_errors=True)
            log.warning("removed %s, left by a save that was cut short", p)
        elif not (out / name).exists():
            os.replace(p, out / name)
            log.warning("put %s back (a save that was cut short had set it aside)", out / name)
        elif folder_is_as_written(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            set_aside(p)


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

    A run is attnkit's by its record (RUN_RECORD); it is finished when its record says so or its metrics.json is
    written. One made with other settings is never replaced silently: ValueError naming the differences and the ways
    out. Nor is a damaged one (settings, metrics or model missing or unreadable), unless it kept checkpoints to
    resume from (then the run is resumed, its settings checked by :func:`check_resume`). The one exception is asking
    for a longer run (more epochs or steps) of a run that kept its checkpoints: it is trained on from its last one."""
    out = Path(cfg.output_dir if out is None else out)
    if not cfg.resume:
        return None
    check_kind(cfg, out)
    rec = read_record(out)
    if rec is None or not (rec.get("finished") or (out / METRICS_FILE).is_file()):
        return None
    fields = type(cfg).__dataclass_fields__
    missing = damaged_parts(out)
    kept = [c for c in recorded_checkpoints(out, rec) if _checkpoint_damage(c) is None]
    if missing:
        if kept:
            log.warning("the run in %s is damaged (%s): resuming it from its last checkpoint", out, "; ".join(missing))
            return None
        diffs = _differences(cfg, out, free)
        raise ValueError(
            f"{out} holds a damaged run ({'; '.join(missing)}{'; other settings: ' + '; '.join(diffs) if diffs else ''}): "
            f"nothing was changed; add --no-resume to move it aside (into {out}/{REPLACED_PREFIX}<date>/) and train afresh "
            "there, or pick another --output-dir"
        )
    old = _read_json(out / "run_config.json")
    diffs = settings_differences(old, asdict(cfg), free, fields)
    if diffs and kept and not settings_differences(old, asdict(cfg), _RESUME_FREE, fields):
        # only the length differs and the run kept its checkpoints (--keep-checkpoints): train it on from there
        log.warning("continuing the finished run in %s from its last checkpoint (%s)", out, "; ".join(diffs))
        return None
    if diffs:
        raise ValueError(
            f"{out} holds a finished run with other settings ({'; '.join(diffs)}): pick another --output-dir, or add "
            f"--no-resume to move that run aside (into {out}/{REPLACED_PREFIX}<date>/) and train afresh there"
        )
    return _read_json(out / METRICS_FILE)


def damaged_parts(out: Path) -> list[str]:
    """What of a finished run in ``out`` is missing or unreadable: its settings, metrics, model config or weights."""
    bad = []
    for name, what in (("run_config.json", "its settings"), (METRICS_FILE, "its metrics")):
        f = out / name
        if not f.is_file():
            bad.append(f"{what} {f} {'is not a file' if f.exists() else 'are missing'}")
            continue
        try:
            read_json(f, what.replace("its ", "a run's "))
        except (OSError, ValueError) as e:
            bad.append(f"{what} {f} are unreadable ({_why(e)})")
    model = out / MODEL_DIR
    if not model.is_dir():
        bad.append(f"its model {model}/ is missing")
        return bad
    cfg = model / "config.json"
    if not cfg.is_file():
        bad.append(f"its model's {cfg} is missing")
    else:
        try:
            read_json(cfg, "a model's config")
        except (OSError, ValueError) as e:
            bad.append(f"its model's {cfg} is unreadable ({_why(e)})")
    try:
        check_weights_file(model)
    except OSError as e:
        bad.append(str(e).split(";")[0])
    return bad


def _why(e: Exception) -> str:
    """What is wrong with a file that could not be read, without its name (the message names it already)."""
    if isinstance(e, DataFormatError):
        return f"line {e.line}: {e.problem}" if e.line else e.problem
    return (e.strerror if isinstance(e, OSError) else None) or str(e) or type(e).__name__


def _differences(cfg, out: Path, free: tuple) -> list[str]:
    """How ``cfg`` differs from the settings of the run in ``out`` as far as they can be read (its run_config.json,
    else the attention stored in its model or last checkpoint); [] where nothing can be read."""
    try:
        if (out / "run_config.json").is_file():
            return settings_differences(_read_json(out / "run_config.json"), asdict(cfg), free, type(cfg).__dataclass_fields__)
        ckpts = recorded_checkpoints(out)
        for f in [out / MODEL_DIR / "config.json"] + [c / "config.json" for c in reversed(ckpts)]:
            if f.is_file():
                return _spec_differences(cfg, f)
    except (ValueError, AttributeError):
        pass
    return []


def finish_run(cfg: TrainConfig, out: Path, history: list[dict], metric: str, title: str) -> None:
    """After a finished run (its model and metrics saved): mark it finished in its record, draw ``curves.{png,svg}``
    (training loss and dev ``metric`` from the Trainer's ``history``) and remove the checkpoint folders this run wrote
    (its record lists them: optimizer state, a copy of model/) unless kept; a ``checkpoint-*`` folder it did not write
    is left alone. A figure that cannot be drawn is a warning, not a failed run."""
    rec = read_record(out)
    if rec is not None:
        rec["finished"] = True
        write_record(out, rec)
        if not cfg.keep_checkpoints:
            for c in recorded_checkpoints(out, rec):
                remove_checkpoint(c)
            rec["checkpoints"] = [n for n in rec["checkpoints"] if (out / n).exists()]
            write_record(out, rec)
    for ext in ("png", "svg"):
        try:
            plot_curves(history, make_way(out / f"curves.{ext}"), metric, title=title,
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
    """The ``checkpoint-N`` folders the run in a run folder wrote (its record lists them)."""
    return recorded_checkpoints(out)


def check_resume(cfg: TrainConfig, out: Path) -> None:
    """Stop before any work if ``out`` holds checkpoints of a run with other settings (unless ``cfg.resume`` is off),
    or checkpoints whose settings are not recorded (run_config.json missing): the message names the differences and
    the ways out. Changes nothing in ``out``."""
    if not cfg.resume:
        return
    ckpts = _checkpoint_dirs(out)
    if not ckpts:
        return
    saved = out / "run_config.json"
    if saved.is_file():
        diffs = settings_differences(_read_json(saved), asdict(cfg), _RESUME_FREE, TrainConfig.__dataclass_fields__)
    else:
        diffs = _spec_differences(cfg, ckpts[-1] / "config.json")
        raise ValueError(
            f"{out} holds checkpoints of a run whose settings are missing ({saved} is gone"
            f"{'; its attention differs: ' + '; '.join(diffs) if diffs else ''}): nothing was changed; add --no-resume to "
            f"move it aside (into {out}/{REPLACED_PREFIX}<date>/) and train afresh there, or pick another --output-dir"
        )
    if diffs:
        raise ValueError(
            f"{out} holds checkpoints of a run with other settings ({'; '.join(diffs)}): rerun with the same "
            "settings to resume it, add --no-resume to start afresh there, or pick another --output-dir"
        )


def move_aside(out: Path, keep: tuple = ()) -> Path | None:
    """Move everything of an earlier run in ``out`` (all but hidden entries and ``keep``; its record and attnkit's
    ledger of outputs too) into a new hidden folder ``.replaced-<date>/`` beside it, and return that folder (None if
    there was nothing to move). Nothing is deleted."""
    own_hidden = (RUN_RECORD, ".attnkit-outputs.json")
    entries = [p for p in out.iterdir() if (not p.name.startswith(".") or p.name in own_hidden) and p.name not in keep]
    if not [p for p in entries if p.name != ".attnkit-outputs.json"]:
        return None
    aside = replaced_folder(out)
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
    ``cfg.resume = False`` moves the earlier run there (finished or not: model, metrics, checkpoints, figures, its
    record) aside into ``.replaced-<date>/`` and starts afresh; then writes the run's record (RUN_RECORD: a new one,
    or the resumed run's, marked unfinished again) and ``run_config.json``: only now is the folder committed to the
    new run, so a run killed before this point leaves the earlier one as it was. A ``checkpoint-N`` folder the record
    does not list (the Trainer would write into it, or resume from it) is moved aside whole."""
    if not cfg.resume:
        aside = move_aside(out, keep)
        if aside is not None:
            log.warning("--no-resume: the earlier run in %s was moved aside to %s", out, aside)
    if is_main_process():
        rec = read_record(out) if cfg.resume else None
        rec = start_record(out, command_of(cfg)) if rec is None else rec | {"finished": False}
        strangers = [p for p in _trainer_named(out) if p.name not in rec["checkpoints"]]
        if strangers:
            aside = replaced_folder(out)
            for p in strangers:
                os.replace(p, aside / p.name)
            log.warning("%s: not written by this run (its record does not list %s), and the Trainer writes folders of that "
                        "name: moved aside whole to %s", out, ", ".join(p.name for p in strangers), aside)
        write_record(out, rec)
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


def check_warmups(cfg: TrainConfig, n_train: int) -> None:
    """ValueError where a warm-up given as a step count (``--warmup``, ``--lam-warmup``, ``--alpha-warmup``) outlasts
    the run (``--max-steps``, else ``n_train`` examples for ``--epochs`` at ``--batch-size`` per process and device:
    under ``torchrun`` each step takes a batch on every process, on one process the Trainer's DataParallel one on
    every GPU): its schedule would never reach its target."""
    devices = int(os.environ.get("WORLD_SIZE", "0")) or max(1, torch.cuda.device_count())
    steps = cfg.max_steps if cfg.max_steps > 0 else math.ceil(n_train / (cfg.batch_size * devices) * cfg.epochs)
    for name, w in (("--warmup", cfg.warmup_ratio), ("--lam-warmup", cfg.lam_warmup), ("--alpha-warmup", cfg.alpha_warmup)):
        if w >= 1 and w >= steps:
            raise ValueError(f"{name} {w:g}: the run has {steps} steps, so the warm-up would never end; give a fraction "
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
        log.warning("resuming from %s", resume)
        prior = _loss_of(Path(resume))
    if resume and _schedule_done(trainer, _state_of(Path(resume))):
        # the run had trained all its steps (its final save was cut short): the Trainer, resumed there, would train a
        # step beyond its schedule; take the checkpoint's state and best weights as they are
        return _finish_from(trainer, Path(resume), prior)
    # the Trainer's own rotation deletes every folder named checkpoint-* (a checkpoint-mine/ of the user's too): the
    # recorder rotates instead, among the checkpoints this run wrote, keeping as many as the Trainer would
    limit = trainer.args.save_total_limit
    trainer.args.save_total_limit = None
    recorder = RunRecorder(trainer, out, prior or 0.0, keep=limit if limit and limit > 0 else None)
    trainer.add_callback(recorder)
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
        why = write_failure(e)
        raise UserError(f"cannot write the checkpoint {out / pending}: {why} (is the disk full, or the folder read-only?); "
                        "the half-written checkpoint was removed: run the same command again to resume from the last "
                        "complete one") from None
    finally:
        trainer.remove_callback(recorder)
    if not resume:
        return result
    metrics = dict(result.metrics)
    steps = trainer.state.global_step
    if prior is None:  # a checkpoint of an earlier attnkit: the loss of the steps before it was not kept
        metrics.pop("train_loss", None)
        metrics["train_loss_note"] = (f"resumed from {resume}, which does not record the loss of its steps: the mean "
                                      "training loss of the whole run is not known")
        return TrainOutput(result.global_step, float("nan"), metrics)
    loss = (prior + float(getattr(trainer, "_total_loss_scalar", 0.0))) / max(steps, 1)
    metrics["train_loss"] = loss
    return TrainOutput(result.global_step, loss, metrics)


def write_failure(e: BaseException) -> str:
    """What went wrong in a failed write, in a few words (torch's stream writer says it in C++ terms)."""
    why = getattr(e, "strerror", None) or (str(e).strip().splitlines() or [type(e).__name__])[-1]
    if "inline_container" in why or "PytorchStreamWriter" in why or "file write failed" in why:
        return "a file could not be written in full"
    return why


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
    metrics = {"epoch": trainer.state.epoch, "total_flos": trainer.state.total_flos, "train_runtime": 0.0,
               "train_samples_per_second": 0.0, "train_steps_per_second": 0.0}
    if prior is None:
        metrics["train_loss_note"] = (f"resumed from {ckpt}, which does not record the loss of its steps: the mean "
                                      "training loss of the whole run is not known")
        return TrainOutput(steps, float("nan"), metrics)
    metrics["train_loss"] = prior / max(steps, 1)
    return TrainOutput(steps, metrics["train_loss"], metrics)


def _state_of(ckpt: Path) -> dict:
    try:
        return read_json(ckpt / "trainer_state.json", "the Trainer's state of a checkpoint")
    except (OSError, ValueError):
        return {}


def _loss_of(ckpt: Path) -> float | None:
    """The training loss summed over the steps up to checkpoint ``ckpt`` (LOSS_FILE), or None if it does not say."""
    try:
        d = read_json(ckpt / LOSS_FILE, "the training loss of a checkpoint")
        return float(d["total_loss"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


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
