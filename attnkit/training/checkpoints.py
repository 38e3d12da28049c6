"""A run's Trainer checkpoints: the ones attnkit wrote, whether each is whole, the newest to resume from, and what a
killed save left behind.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from pathlib import Path

import torch

from attnkit.errors import DataFormatError
from attnkit.models.checks import check_weights_file
from attnkit.runfiles.ownership import folder_holds_only_written, read_folder_manifest, remove_written, set_aside
from attnkit.runfiles.json_files import read_json
from attnkit.training.run_record import LOSS_FILE, read_record, write_record

log = logging.getLogger("attnkit")


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
        why = checkpoint_damage(last)
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


def non_finite_weight(ckpt: str | os.PathLike) -> str | None:
    """The name of the first weight of a checkpoint that holds NaN or inf (a run that diverged before it was saved:
    resuming would train on from those weights and diverge again), or None. Reads the weights once, at a resume only."""
    import torch
    from safetensors import safe_open

    f = Path(ckpt) / "model.safetensors"
    if not f.is_file():
        return None
    with safe_open(str(f), framework="pt") as st:
        for name in st.keys():
            t = st.get_tensor(name)
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                return name
    return None


def checkpoint_damage(ckpt: Path) -> str | None:
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
            from transformers.trainer_pt_utils import (
                safe_globals,  # the numpy types the Trainer's RNG state holds
            )

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


def trainer_named_checkpoints(out: Path) -> list[Path]:
    """Folders named as the Trainer names its checkpoints (``checkpoint-<digits>``): it would write into them."""
    return sorted((p for p in out.iterdir() if p.is_dir() and _TRAINER_CHECKPOINT.fullmatch(p.name)), key=lambda p: _step(p.name))

_TRAINER_CHECKPOINT = re.compile(r"checkpoint-\d+")


def remove_checkpoint(ckpt: Path) -> None:
    """Delete a checkpoint folder this run wrote, if it holds just what it wrote (its manifest says so); one with a
    file added or changed by hand is moved aside whole into ``.replaced-<date>/`` instead. It is first renamed
    (``.checkpoint-N.del-<id>``), in one step, then removed manifest last: a kill part-way leaves no half checkpoint
    under its name, and what is left is removed at the next start (:func:`tidy_killed_saves`)."""
    if folder_holds_only_written(ckpt) or (read_folder_manifest(ckpt) is None and not any(ckpt.iterdir())):
        doomed = ckpt.with_name(f".{ckpt.name}.del-{uuid.uuid4().hex[:8]}")
        os.replace(ckpt, doomed)
        remove_written(doomed)
    else:
        aside = set_aside(ckpt)
        log.warning("%s held files this run did not write: moved aside whole to %s", ckpt, aside)

_KILLED_SAVE = re.compile(r"\.(.+)\.(tmp|old|del)-[0-9a-f]{8}")


def tidy_killed_saves(out: Path) -> None:
    """What a save or a removal killed half-way left in ``out`` (see :func:`save_checkpoint`,
    :func:`remove_checkpoint`), where attnkit's manifest inside proves it wrote it: a temporary folder is removed (the
    save is redone); the earlier model, renamed on its way out, is put back if the new one never arrived, else removed;
    a checkpoint renamed on its way out is removed. Anything else is left as it is; a folder holding files attnkit did
    not write is moved aside whole."""
    for p in list(out.iterdir()):
        m = _KILLED_SAVE.fullmatch(p.name)
        if m is None or not p.is_dir() or (read_folder_manifest(p) is None and any(p.iterdir())):
            continue
        name, kind = m.groups()
        if kind == "tmp":
            remove_written(p)
            log.warning("removed %s, left by a save that was cut short", p)
        elif kind == "old" and not (out / name).exists():
            os.replace(p, out / name)
            log.warning("put %s back (a save that was cut short had set it aside)", out / name)
        elif folder_holds_only_written(p) or not any(p.iterdir()):
            remove_written(p)
        else:
            set_aside(p)


def trainer_state_of(ckpt: Path) -> dict:
    try:
        return read_json(ckpt / "trainer_state.json", "the Trainer's state of a checkpoint")
    except (OSError, ValueError):
        return {}


def loss_of(ckpt: Path) -> float | None:
    """The training loss summed over the steps up to checkpoint ``ckpt`` (LOSS_FILE), or None if it does not say."""
    return _of(ckpt, "total_loss")


def seconds_of(ckpt: Path) -> float | None:
    """The seconds of training up to checkpoint ``ckpt``, over every process that trained its steps (LOSS_FILE), or
    None if it does not say (a checkpoint of an earlier attnkit)."""
    return _of(ckpt, "train_seconds")


def _of(ckpt: Path, key: str) -> float | None:
    try:
        return float(read_json(ckpt / LOSS_FILE, "the training loss of a checkpoint")[key])
    except (OSError, ValueError, KeyError, TypeError):
        return None
