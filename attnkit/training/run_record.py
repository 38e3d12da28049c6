"""attnkit's record of a run: which command made it, the checkpoints it wrote, whether it finished, and the kind of
run a folder holds (for messages)."""

from __future__ import annotations

import time
from pathlib import Path

from attnkit.errors import DataFormatError, UserError
from attnkit.runfiles.names import REPLACED_PREFIX, RUN_RECORD, WRITTEN_BY
from attnkit.runfiles.atomic import is_main_process, write_json_atomic
from attnkit.runfiles.json_files import read_json
from attnkit.training.config import METRICS_FILE


def read_record(out: Path) -> dict | None:
    """attnkit's record of the run in ``out`` (RUN_RECORD), or None if there is none. One that cannot be read is a
    ValueError naming it and the ways out."""
    f = Path(out) / RUN_RECORD
    if not f.exists():
        return None
    try:
        rec = read_json(f, "attnkit's record of a run")
        if not str(rec.get(WRITTEN_BY, "")).startswith("attnkit"):
            raise UserError("not a record written by attnkit")
        ckpts, saving = rec.get("checkpoints", []), rec.get("saving")
        if not (isinstance(ckpts, list) and all(isinstance(c, str) for c in ckpts)) or not isinstance(saving, (str, type(None))):
            raise UserError("its checkpoints are not a list of folder names")
    except (OSError, ValueError, UnicodeDecodeError) as e:
        raise UserError(f"{f}, attnkit's record of the run in {out}, is unreadable ({why_unreadable(e)}): add --no-resume to move the run "
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
    build_on = "" if now == "attnkit pretrain" else f" (to build on its model, name it with --model {out})"  # pretrain has no --model
    raise UserError(
        f"--output-dir {out} holds {describe_run(out)}, not a run of `{now}`: nothing was changed; pick another "
        f"--output-dir{build_on}, or add --no-resume to move that run aside "
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

#: beside a checkpoint's trainer state: the training loss summed over its steps (the mean of a resumed run needs it)
LOSS_FILE = "attnkit_loss.json"


def why_unreadable(e: Exception) -> str:
    """What is wrong with a file that could not be read, without its name (the message names it already)."""
    if isinstance(e, DataFormatError):
        return f"line {e.line}: {e.problem}" if e.line else e.problem
    return (e.strerror if isinstance(e, OSError) else None) or str(e) or type(e).__name__
