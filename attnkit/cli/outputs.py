"""Where a command may write: output paths checked against the user's inputs and other runs, default output names,
the run-folder locks a command holds while it writes.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
from pathlib import Path

from attnkit.analysis.inference import (
    model_dir,
)
from attnkit.errors import UserError
from attnkit.runfiles.names import RUN_RECORD
from attnkit.runfiles.ownership import check_output_file, check_side_file, record_output
from attnkit.runfiles.lock import folder_lock
from attnkit.runfiles.json_files import path_problem, read_json
from attnkit.runfiles.atomic import write_text_atomic
from attnkit.tasks import default_data_dir
from attnkit.training.config import MODEL_DIR

#: the locks this command holds on run folders it writes into (see output_locks)
_LOCKS: dict = {"stack": None, "held": set()}


def protected_paths(a) -> dict:
    """The folders whose files an output the user names must not replace: the model's run folder, the data read and
    the data the model was trained on (its run's run_config.json says which)."""
    d = model_dir(a.model)
    run = d.parent if d.name == MODEL_DIR else d
    try:  # the run's settings name the data it was trained on and the model it started from
        settings = read_json(run / "run_config.json", "the settings of a run") if (run / "run_config.json").is_file() else {}
    except ValueError:
        settings = {}
    trained_on, base = settings.get("data_dir"), settings.get("model")
    base = base if base and Path(str(base)).is_dir() else None
    return {"the model's run folder": run, "the data folder": getattr(a, "data_dir", None) or default_data_dir(),
            "the data the model was trained on": trained_on, "the model it was trained from": base}


def default_output(path: Path) -> Path:
    """An output at a path attnkit chose (no --output given): a file there that attnkit did not write is kept."""
    path = check_side_file(path, "the default output (give --output to write elsewhere)")
    lock_run_of(path)
    return path


def output_path(a, path, option: str) -> Path:
    """An output file the user named (``path``), checked before anything is written (see check_output_file)."""
    path = check_output_file(path, option, protected_paths(a))
    lock_run_of(path)
    return path


@contextlib.contextmanager
def output_locks():
    """While a command runs: every run folder it writes an output into is locked (the first time an output there is
    checked), so that no training run moves the run aside, or replaces its model, under the output; and it refuses at
    once if another attnkit process is writing that run folder. Released when the command ends."""
    outer = dict(_LOCKS)
    with contextlib.ExitStack() as stack:
        _LOCKS.update(stack=stack, held=set())
        try:
            yield
        finally:
            _LOCKS.update(outer)


def lock_run_of(path: str | os.PathLike) -> None:
    """Hold the lock of the run folder (a folder with attnkit's record of a run) that ``path`` lies in, if any."""
    stack = _LOCKS["stack"]
    if stack is None:
        return
    here = Path(path).expanduser().resolve().parent
    run = next((q for q in (here, *here.parents) if (q / RUN_RECORD).is_file()), None)
    if run is None or run in _LOCKS["held"]:
        return
    try:
        stack.enter_context(folder_lock(run, way_out=f"write {path} outside that folder"))  # no --output-dir here
    except OSError as e:  # a read-only run folder (its lock file cannot be made): say what cannot be written
        if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        raise UserError(f"cannot write {path}: the run folder {run} is read-only ({e.strerror}); name an output "
                        "outside that folder (--output)") from None
    _LOCKS["held"].add(run)


def input_file(path: str, option: str) -> Path:
    """An input file the user named: it exists and is a regular file (a folder, a named pipe or a device is named so)."""
    if str(path) == "-":
        raise UserError(f"{option} -: attnkit reads a file, not standard input; write the texts to a file and name it, or "
                        "give them as arguments")
    p = Path(path).expanduser()
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise UserError(f"{option} {p} {path_problem(p)}") from None
    except OSError as e:
        raise UserError(f"{option} {p} cannot be read: {e.strerror or e}") from None
    if stat.S_ISDIR(mode):
        raise UserError(f"{option} {p} is a folder, not a file")
    if not stat.S_ISREG(mode):
        kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
                else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "a special file")
        raise UserError(f"{option} {p} is {kind}, not a regular file: write the texts into a file and give its name")
    return p


#: characters other readers split lines on, which json.dumps(ensure_ascii=False) leaves raw inside strings
_ESCAPED_SEPARATORS = {0x85: "\\u0085", 0x2028: "\\u2028", 0x2029: "\\u2029"}


def write_jsonl(rows: list[dict], output: str | None, what: str) -> None:
    """JSON lines to ``output``, or to standard output: one row per line for every reader (the line separators that
    Python's ``splitlines`` and JavaScript also split on, U+0085, U+2028 and U+2029, are written escaped)."""
    lines = "".join(json.dumps(r, ensure_ascii=False).translate(_ESCAPED_SEPARATORS) + "\n" for r in rows)
    if output:
        write_text_atomic(output, lines)
        record_output(output, "attnkit predict")  # JSON lines carry no mark: the folder's ledger says attnkit wrote it
        print(f"[attnkit] {len(rows)} {what} written to {output}")
    else:
        sys.stdout.write(lines)
