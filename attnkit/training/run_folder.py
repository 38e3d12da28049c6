"""A run folder's lifecycle: claiming and locking it, resuming or refusing a run with other settings, finished and
damaged runs, moving an earlier run aside.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from attnkit.attention.spec import spec_dict, upgraded
from attnkit.errors import DataFormatError, UserError
from attnkit.models.checks import TOKENIZER_SAVED, check_weights_file
from attnkit.models.resolve import checkpoint_dir
from attnkit.runfiles.names import FOLDER_MANIFEST, LOCK_FILE, REPLACED_PREFIX, RUN_INFO, RUN_RECORD
from attnkit.runfiles.lock import folder_lock
from attnkit.runfiles.atomic import is_main_process, signals_held, write_json_atomic
from attnkit.runfiles.json_files import path_problem, read_json
from attnkit.runfiles.ownership import HASHED_UP_TO, file_sha256, replaced_folder
from attnkit.training.checkpoints import (
    checkpoint_damage,
    recorded_checkpoints,
    tidy_killed_saves,
    trainer_named_checkpoints,
)
from attnkit.training.config import METRICS_FILE, MODEL_DIR, TrainConfig, option_name
from attnkit.training.run_record import (
    check_kind,
    command_of,
    read_record,
    start_record,
    why_unreadable,
    write_record,
)
from attnkit.training.sweep_record import read_sweep_records

log = logging.getLogger("attnkit")


#: settings that may differ when a run is resumed: they do not change what is trained, or only how
#: long (a run may be resumed to train for longer)
_RESUME_FREE = ("output_dir", "resume", "logging_steps", "eval_batch_size", "keep_checkpoints", "epochs", "max_steps")

#: settings that may differ from a finished run's for it to count as the same run (epochs and steps count here)
_FINISHED_FREE = ("output_dir", "resume", "logging_steps", "eval_batch_size", "keep_checkpoints")


def _read_json(path: Path) -> dict:
    try:
        return read_json(path)
    except DataFormatError as e:
        raise UserError(f"{e}: move the run folder aside or pick another --output-dir") from None


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
        raise UserError(f"{option} {out} {path_problem(out, 'folder')}")
    if out.is_dir() and any(p.name != LOCK_FILE for p in out.iterdir()) and not is_run_folder(out):
        if _holds_sweep(out):
            raise UserError(f"{option} {out} holds an attnkit sweep, not a run (made by `attnkit sweep`): nothing was changed; "
                             "pick a new or empty folder (`attnkit sweep` with that --output-dir adds to the sweep)")
        raise UserError(f"{option} {out} is not empty and holds no attnkit run (no {RUN_RECORD}, the record a run writes "
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


def _holds_sweep(out: Path) -> bool:
    """Whether ``out`` holds a sweep.json of attnkit's (a hand-written one does not make a folder a sweep)."""
    if not (out / "sweep.json").is_file():
        return False
    try:
        read_sweep_records(out / "sweep.json")
        return True
    except ValueError:
        return False


def first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` (itself included) that does not exist yet (None if ``path`` exists)."""
    if path.exists():
        return None
    while not path.parent.exists():
        path = path.parent
    return path


def with_defaults(saved: dict, fields) -> dict:
    """A recorded run's settings with the ones it predates filled in with their defaults: a setting added to attnkit
    later defaults to what older runs did (e.g. ``holdout`` 0), so asking for another value is a difference; the
    ``learn_lam`` / ``learn_alpha`` of older runs are read as ``learned``."""
    import dataclasses

    out = dict(upgraded(saved, "a run's settings"))
    for k, f in fields.items():
        if k not in out and f.default is not dataclasses.MISSING:
            out[k] = f.default
    return out


def settings_differences(saved: dict, now: dict, free: tuple, fields) -> list[str]:
    """``"name: old there, new now"`` for every setting (of ``fields``, but for ``free``) that differs (one the
    record predates counts as its default)."""
    saved = with_defaults(saved, fields)
    old = same_paths({k: v for k, v in saved.items() if k not in free and k in fields}, saved.get(WORKING_DIR))
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
    kept = [c for c in recorded_checkpoints(out, rec) if checkpoint_damage(c) is None]
    if missing:
        if kept:
            log.warning("the run in %s is damaged (%s): resuming it from its last checkpoint", out, "; ".join(missing))
            return None
        diffs = _differences(cfg, out, free)
        raise UserError(
            f"{out} holds a damaged run ({'; '.join(missing)}{'; other settings: ' + '; '.join(diffs) if diffs else ''}): "
            f"nothing was changed; add --no-resume to move it aside (into {out}/{REPLACED_PREFIX}<date>/) and train afresh "
            "there, or pick another --output-dir"
        )
    old = _read_json(out / "run_config.json")
    diffs = settings_differences(old, asdict(cfg), free, fields)
    if diffs and kept and not settings_differences(old, asdict(cfg), _RESUME_FREE, fields):
        # only the length differs and the run kept its checkpoints (--keep-checkpoints): train it on from there (the
        # line saying so is check_resume's, as for a run cut short)
        return None
    if diffs:
        raise UserError(
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
            bad.append(f"{what} {f} are unreadable ({why_unreadable(e)})")
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
            bad.append(f"its model's {cfg} is unreadable ({why_unreadable(e)})")
    try:
        check_weights_file(model)
    except OSError as e:
        bad.append(str(e).split(";")[0])
    return bad


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


def same_paths(d: dict, working_dir: str | None = None) -> dict:
    """``d`` with its data folder, model, teacher and text files resolved (relative ones against ``working_dir``, where
    the run that wrote them ran, else the current one), a run folder given as a model being its model/: the same path
    written two ways, or from two folders, is the same setting."""
    d = dict(d)

    def resolved(value):
        p = Path(str(value)).expanduser()
        p = Path(working_dir) / p if working_dir and not p.is_absolute() else p
        return str(p.resolve()) if p.exists() else value

    for k in ("data_dir", "model", "teacher"):
        if d.get(k):
            d[k] = resolved(d[k])
            folder = checkpoint_dir(d[k]) if k != "data_dir" else None  # a run folder is its model/: one model
            d[k] = str(folder.resolve()) if folder is not None and Path(d[k]).is_absolute() else d[k]
    if isinstance(d.get("text_files"), (list, tuple)):  # adapt's --text-file, as typed
        d["text_files"] = [resolved(f) if f else f for f in d["text_files"]]
    return d


#: where a run's settings record the folder it ran from (its relative --data-dir and --model are relative to it)
WORKING_DIR = "working_dir"


def settings_record(cfg, **extra) -> dict:
    """What run_config.json holds: ``cfg``'s settings as typed, the folder they were typed in, and ``extra``."""
    return asdict(cfg) | {WORKING_DIR: os.getcwd()} | extra


#: the files a model folder consists of (what `evaluate` writes there beside them, eval_*.json, is not the model)
_MODEL_FILES = ("config.json", RUN_INFO, FOLDER_MANIFEST, *TOKENIZER_SAVED)


def base_fingerprint(model) -> dict | None:
    """What identifies the local model folder a run starts from (``--model``): the SHA-256 of its small files (config,
    tokenizer, attnkit's record of how it was made: an adapt's seed and loss) and the size of its weights; None for a
    name that is no local folder (the bundled model, a hub name). Recorded when a run starts, compared when it resumes:
    a model replaced between a kill and the resume (re-adapted with --no-resume) is not the one the checkpoints grew
    from."""
    d = checkpoint_dir(str(model)) if model else None
    if d is None:
        return None
    out = {}
    for p in sorted(d.iterdir()):
        if p.is_file() and (p.name in _MODEL_FILES or p.suffix in (".safetensors", ".bin")):
            size = p.stat().st_size
            out[p.name] = file_sha256(p) if size <= HASHED_UP_TO else size
    return out


def data_fingerprint(splits) -> str:
    """The SHA-256 of what a run reads: ``splits`` maps a name to a dataset (every row, all columns, in order) or to a
    list (adapt's pooled texts). Recorded when a run starts and compared when it resumes: data edited between a kill
    and the resume are not the data its checkpoints grew on."""
    h = hashlib.sha256()
    for name in sorted(splits):
        rows = splits[name].to_dict() if hasattr(splits[name], "to_dict") else splits[name]
        h.update(json.dumps([name, rows], ensure_ascii=False, sort_keys=True, default=str).encode())
    return h.hexdigest()


def run_sources(cfg, splits=None) -> dict:
    """What identifies what a run reads: ``base`` (the ``--model`` folder), ``teacher`` (the ``--teacher`` folder),
    ``data`` (the task's examples, from ``splits``); each only where there is one to fingerprint."""
    found = {"base": base_fingerprint(getattr(cfg, "model", None)),
             "teacher": base_fingerprint(getattr(cfg, "teacher", None)),
             "data": data_fingerprint(splits) if splits is not None else None}
    return {k: v for k, v in found.items() if v is not None}


def _changed_source(cfg, kind: str, was, now) -> str:
    """The message for one source of a run that differs at its resume from what the run started from."""
    if kind == "data":
        tasks = getattr(cfg, "tasks", None) or [getattr(cfg, "task", None)]
        named = [f"task {t}" for t in tasks if t] + [f"--text-file {f}" for f in getattr(cfg, "text_files", ())]
        where = f" in --data-dir {cfg.data_dir}" if getattr(cfg, "data_dir", None) else ""
        return f"the examples of {' and '.join(named)}{where} are not those the run started from (edited since)"
    changed = sorted(k for k in set(was) | set(now) if was.get(k) != now.get(k)) if isinstance(was, dict) and isinstance(now, dict) else []
    option, value = ("--model", cfg.model) if kind == "base" else ("--teacher", cfg.teacher)
    return (f"{option} {value} is not the model the run started from ({', '.join(changed[:4]) or 'its files'} differ: "
            "replaced since, e.g. adapted or trained again)")


def changed_sources(cfg, out: Path, splits=None, now: dict | None = None) -> list[str]:
    """What ``out``'s run read when it started that differs from what ``cfg`` names now (its ``--model``, ``--teacher``,
    and data: ``splits``, as :func:`data_fingerprint` takes them), one phrase each; runs recorded before a source was
    are not compared on it. ``now``: :func:`run_sources` of those, where the caller has it (a sweep's cells share it)."""
    rec = read_record(out)
    rec = rec if isinstance(rec, dict) else {}
    recorded = [k for k in ("base", "teacher", "data") if k in rec and (k != "data" or splits is not None)]
    now = now if now is not None else run_sources(cfg, splits) if recorded else {}
    return [_changed_source(cfg, k, rec[k], now.get(k)) for k in recorded if now.get(k) != rec[k]]


def check_sources(cfg, out: Path, splits=None) -> None:
    """Stop before any work if ``out``'s checkpoints grew from another ``--model``, ``--teacher`` or data than those
    named now hold (:func:`changed_sources`). Changes nothing."""
    changed = changed_sources(cfg, out, splits)
    if changed:
        raise UserError(
            f"{out} holds checkpoints of a run that read other inputs: {'; '.join(changed)}; its checkpoints grew from "
            "the earlier ones: add --no-resume to train afresh (the run is moved aside, not deleted), or restore them"
        )


def check_resume(cfg: TrainConfig, out: Path, splits=None) -> None:
    """Stop before any work if ``out`` holds checkpoints of a run with other settings (unless ``cfg.resume`` is off),
    or checkpoints whose settings are not recorded (run_config.json missing), or of a run that started from another
    model, teacher or data (``splits``: the task's examples) than those named now hold: the message names the
    differences and the ways out. Changes nothing in ``out``."""
    if not cfg.resume:
        return
    ckpts = recorded_checkpoints(out)
    if not ckpts:
        return
    saved = out / "run_config.json"
    if saved.is_file():
        old, now, fields = _read_json(saved), asdict(cfg), TrainConfig.__dataclass_fields__
        diffs = settings_differences(old, now, _RESUME_FREE, fields)
    else:
        diffs = _spec_differences(cfg, ckpts[-1] / "config.json")
        raise UserError(
            f"{out} holds checkpoints of a run whose settings are missing ({saved} is gone"
            f"{'; its attention differs: ' + '; '.join(diffs) if diffs else ''}): nothing was changed; add --no-resume to "
            f"move it aside (into {out}/{REPLACED_PREFIX}<date>/) and train afresh there, or pick another --output-dir"
        )
    if diffs:
        raise UserError(
            f"{out} holds checkpoints of a run with other settings ({'; '.join(diffs)}): rerun with the same "
            "settings to resume it, add --no-resume to start afresh there, or pick another --output-dir"
        )
    check_sources(cfg, out, splits)
    longer = settings_differences(old, now, _FINISHED_FREE, fields)
    if longer:  # free on resume (a run cut short may be lengthened or shortened), but said: it was without a word (sweep s25)
        rec = read_record(out) or {}
        finished = bool(rec.get("finished")) or (out / METRICS_FILE).is_file()
        log.warning("resuming the %srun in %s from its last checkpoint with another length (%s): its learning rate "
                    "follows the new length from there on, so the model is not the one either length trained from the "
                    "start gives (add --no-resume for that)", "finished " if finished else "", out, "; ".join(longer))


def move_aside(out: Path, keep: tuple = ()) -> Path | None:
    """Move everything of an earlier run in ``out`` (all but hidden entries and ``keep``; its record and attnkit's
    ledger of outputs too) into a new hidden folder ``.replaced-<date>/`` beside it, and return that folder (None if
    there was nothing to move). Nothing is deleted."""
    own_hidden = (RUN_RECORD, ".attnkit-outputs.json")
    entries = [p for p in out.iterdir() if (not p.name.startswith(".") or p.name in own_hidden) and p.name not in keep]
    if not [p for p in entries if p.name != ".attnkit-outputs.json"]:
        return None
    aside = replaced_folder(out)
    # the record last, with Ctrl-C and SIGTERM held: a move cut short (kill -9) leaves a run folder still, whose rest a
    # rerun with --no-resume moves aside too; never files of a run without the record that makes them attnkit's
    with signals_held():
        for p in sorted(entries, key=lambda p: p.name == RUN_RECORD):
            os.replace(p, aside / p.name)
    return aside


def _spec_differences(cfg, config_file: Path) -> list[str]:
    """How the attention stored in a model's ``config.json`` differs from ``cfg``'s (for runs without run_config.json)."""
    stored = _read_json(config_file).get("attnkit") if config_file.is_file() else None
    stored = spec_dict(stored) if isinstance(stored, dict) else stored  # (an older lam beside a map without one: gone)
    now = cfg.spec().to_dict()
    return [] if stored is None else [f"{option_name(k)}: {stored.get(k)!r} there, {now[k]!r} now" for k in now if stored.get(k, now[k]) != now[k]]


def prepare_output(cfg, out: Path, keep: tuple = ("mini_init",), splits=None) -> None:
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
        if rec is None:
            rec = start_record(out, command_of(cfg))
            rec |= run_sources(cfg, splits)  # the model, teacher and data it starts from, compared when it resumes
        else:
            rec = rec | {"finished": False}
        strangers = [p for p in trainer_named_checkpoints(out) if p.name not in rec["checkpoints"]]
        if strangers:
            aside = replaced_folder(out)
            for p in strangers:
                os.replace(p, aside / p.name)
            log.warning("%s: not written by this run (its record does not list %s), and the Trainer writes folders of that "
                        "name: moved aside whole to %s", out, ", ".join(p.name for p in strangers), aside)
        write_record(out, rec)
        extra = {"attention_spec": cfg.spec().to_dict()} | ({"head_spec": cfg.head().to_dict()} if hasattr(cfg, "head") else {})
        write_json_atomic(out / "run_config.json", asdict(cfg) | extra)
