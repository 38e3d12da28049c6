"""Atomic writes: a file appears whole or not at all, a command's several outputs together (:func:`output_batch`),
and a failed write names the file with the way out.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import json
import os
import re
import signal
import socket
import sys
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from attnkit.errors import UserError
from attnkit.runfiles.json_files import non_finite_places


def launch_ranks() -> tuple[int, int]:
    """(this process's rank, the number of processes) that ``torchrun``/``accelerate launch`` set in ``RANK`` and
    ``WORLD_SIZE`` ((0, 1) alone); a value that is not a whole number, or a rank without its world, is refused
    naming the variable (the run would not know which process writes)."""
    def read(name: str) -> int | None:
        raw = os.environ.get(name)
        raw = None if raw is None else raw.strip()
        if not raw:
            return None
        if not (raw.isascii() and raw.isdigit()):  # (str.isdigit alone takes "²", which int() refuses)
            raise UserError(f"environment variable {name}={raw!r}: expected a whole number >= 0 (torchrun and accelerate "
                            f"launch set it; unset it to run alone)")
        return int(raw)

    rank, world, local = read("RANK"), read("WORLD_SIZE"), read("LOCAL_RANK")
    if (rank is None) != (world is None):
        given, missing = ("RANK", "WORLD_SIZE") if world is None else ("WORLD_SIZE", "RANK")
        raise UserError(f"environment variable {given} is set but {missing} is not: torchrun and accelerate launch set "
                        f"both; unset {given} to run alone")
    if world is not None and (world < 1 or rank >= world):
        raise UserError(f"environment variables RANK={rank} and WORLD_SIZE={world}: expected 0 <= RANK < WORLD_SIZE")
    if local is not None and world is not None and local >= world:
        raise UserError(f"environment variable LOCAL_RANK={local}: expected less than WORLD_SIZE={world}")
    if world is not None and world > 1:  # the processes meet at rank 0's address: without it accelerate raised a traceback
        for name in ("MASTER_ADDR", "MASTER_PORT"):
            if not os.environ.get(name, "").strip():
                raise UserError(f"environment variables WORLD_SIZE={world} and RANK={rank} are set but {name} is not: "
                                "torchrun and accelerate launch set it (where the processes meet); unset WORLD_SIZE and "
                                "RANK to run alone")
        port = os.environ["MASTER_PORT"].strip()
        if not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
            raise UserError(f"environment variable MASTER_PORT={port!r}: expected a port number from 1 to 65535")
    return (rank or 0), (world or 1)


@contextmanager
def rendezvous():
    """Around the first step that makes the processes of a ``torchrun`` run meet (transformers' TrainingArguments):
    one line naming where they meet, and Ctrl-C / SIGTERM left to the system, which ends the process at once (torch's
    wait for a missing process runs in C++ for up to 30 minutes, where no Python handler runs: the command hung, deaf to
    both). Alone: nothing."""
    rank, world = launch_ranks()
    if world == 1 or threading.current_thread() is not threading.main_thread():
        yield
        return
    print(f"[attnkit] process {rank} of {world}: meeting the others at {os.environ['MASTER_ADDR']}:"
          f"{os.environ['MASTER_PORT']} (a missing process makes the others wait; Ctrl-C stops)", file=sys.stderr, flush=True)
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    kept = {s: h for s, h in before.items() if h is not signal.SIG_IGN}  # (an ignored signal stays ignored)
    for s in kept:
        signal.signal(s, signal.SIG_DFL)
    try:
        yield
    except Exception as e:  # torch's DistNetworkError / DistStoreError: a port in use, an address that does not answer
        if not type(e).__name__.startswith("Dist"):
            raise
        lines = [l.strip() for l in str(e).splitlines() if l.strip()]
        raise UserError(f"the processes could not meet at {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} "
                        f"(MASTER_ADDR, MASTER_PORT): {lines[-1] if lines else type(e).__name__}; another run on that port? "
                        "pick another MASTER_PORT") from None
    finally:
        for s, h in kept.items():
            signal.signal(s, h)


def is_main_process() -> bool:
    """Whether this process writes and prints for the run: always alone, rank 0 under ``torchrun``/``accelerate launch``."""
    return launch_ranks()[0] == 0


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """``text`` at ``path`` (UTF-8; its folder made if missing), through a temporary file and ``os.replace``.
    An error names ``path``, never the temporary file."""
    path = Path(path)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")

#: the ways out of a write that failed for want of room or rights, by errno
_WAY_OUT = {
    errno.ENOSPC: "(a full disk): free some space, or name a folder on another disk",
    errno.EDQUOT: "(over the disk quota): free some space, or name a folder on another disk",
    errno.EFBIG: "(over the file-size limit, ulimit -f, or the file system's): raise the limit, or name a folder on another disk",
    errno.EROFS: "(a read-only folder): name a writable folder",
    errno.EACCES: "(no write permission there): name a writable folder",
}

#: the batch of outputs the running command is writing (see :func:`output_batch`); None outside one
_BATCH: ContextVar[OutputBatch | None] = ContextVar("attnkit_output_batch", default=None)

_TMP_SERIAL = itertools.count()


def current_batch() -> "OutputBatch | None":
    """The :func:`output_batch` this write belongs to, or None."""
    return _BATCH.get()


def write_error(path: str | os.PathLike, e: OSError) -> UserError:
    """The one line for an OS error while writing ``path``, the file the user named or attnkit chose (never the
    temporary file beside it): its reason and, for a full disk, a quota, a size limit or a read-only folder, the way out."""
    why = e.strerror or str(e)
    hint = _WAY_OUT.get(e.errno)
    return UserError(f"cannot write {path}: {why}" + (f" {hint}" if hint else ""))


class OutputBatch:
    """The outputs of one command (see :func:`output_batch`): each written to a temporary file beside its target,
    all renamed into place at the end, or all removed if any write fails."""

    def __init__(self):
        self.staged: dict[Path, Path] = {}  # target -> its written temporary file
        self.after: list = []  # calls to make once every file is in place (the ledger's records)

    def stage(self, tmp: Path, path: Path) -> None:
        old = self.staged.pop(path, None)
        if old is not None and old != tmp:
            old.unlink(missing_ok=True)
        self.staged[path] = tmp

    def commit(self) -> None:
        for path in self.staged:  # a folder put at a target meanwhile: refused before any file is replaced
            if path.is_dir():
                raise write_error(path, IsADirectoryError(errno.EISDIR, "Is a directory"))
        with signals_held():  # Ctrl-C or a SIGTERM lands after the renames, never between two of them
            while self.staged:
                path, tmp = next(iter(self.staged.items()))
                try:
                    os.replace(tmp, path)
                except OSError as e:
                    raise write_error(path, e) from None
                del self.staged[path]

    def discard(self) -> None:
        for tmp in self.staged.values():
            tmp.unlink(missing_ok=True)
        self.staged.clear()


@contextmanager
def signals_held():
    """SIGINT, SIGTERM and SIGHUP held back (delivered when the block ends) where the process can hold them (the main
    thread on POSIX); elsewhere nothing is held. Only SIGKILL can then stop a batch between two of its renames."""
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP} if hasattr(signal, "pthread_sigmask") else set()
    if not held or threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


@contextmanager
def output_batch():
    """Write a command's outputs together: inside the block every file written through :func:`atomic_path` (and so
    :func:`write_text_atomic`, :func:`write_json_atomic` and the figures) goes to a temporary file beside its target,
    and all of them are renamed into place when the block ends; if anything in the block fails, every temporary file
    is removed and every earlier output is left as it was. :func:`record_output` waits for the renames. A batch
    inside a batch is the outer one."""
    if _BATCH.get() is not None:
        yield _BATCH.get()
        return
    batch = OutputBatch()
    token = _BATCH.set(batch)
    try:
        yield batch
        _BATCH.reset(token)
        token = None
        batch.commit()
    finally:
        if token is not None:
            _BATCH.reset(token)
        batch.discard()
    for call in batch.after:
        call()


@contextmanager
def atomic_path(path: str | os.PathLike):
    """Yield a temporary path beside ``path`` to write to; on success it replaces ``path`` in one step (inside an
    :func:`output_batch`: when the batch ends), on failure it is removed and ``path`` is left as it was. Missing
    folders are made; an OS error names ``path``. A symlink is written through: its target is replaced (a link to a
    device, pipe or socket is refused as they are), never the link itself (``--output /dev/stdout`` with standard
    output redirected to a file replaced the system's link)."""
    named = path = Path(path)
    if path.is_symlink():
        if path.exists() and not path.is_file():  # what the link points to (a pipe's /proc name resolves to nothing)
            raise UserError(special_file_problem(named))
        path = Path(os.path.realpath(path))
    tmp = path.with_name(f".{_tmp_stem(path.name)}.tmp-{_HOST}-{os.getpid()}-{next(_TMP_SERIAL)}")
    _remove_stale_temporaries(path)
    batch, staged = _BATCH.get(), False
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "Is a directory")
        if path.exists() and not path.is_file():
            raise UserError(special_file_problem(named))
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        if batch is None:
            os.replace(tmp, path)
        else:
            batch.stage(tmp, path)
            staged = True
    except OSError as e:
        raise write_error(named, e) from None
    finally:
        if not staged and tmp.exists():
            tmp.unlink()


_HOST = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname()) or "host"


def _tmp_stem(name: str) -> str:
    """What a temporary file beside ``name`` is named after: the name itself, or, for a name too long to take the
    temporary suffix within the file system's 255 bytes, a short hash of it (a legal name never fails as too long)."""
    if len(os.fsencode(f".{name}.tmp-{_HOST}-")) + 24 <= 255:  # (room for the pid and the serial)
        return name
    return "attnkit-" + hashlib.sha256(os.fsencode(name)).hexdigest()[:16]


def _remove_stale_temporaries(path: Path) -> None:
    """Remove the temporary files of writes to ``path`` that a killed process left (``.name.tmp-<host>-<pid>-<n>``
    of this host whose process is gone). A live process's, another host's, or one of another shape are left alone."""
    prefix = f".{_tmp_stem(path.name)}.tmp-{_HOST}-"
    try:
        leftovers = [p for p in path.parent.iterdir() if p.name.startswith(prefix)] if path.parent.is_dir() else []
    except OSError:
        return
    for p in leftovers:
        pid = p.name[len(prefix):].split("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)) and p.is_file():
            with contextlib.suppress(OSError):
                p.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: someone else's live process
        return True
    return True


def special_file_problem(path: Path) -> str:
    """The one line refusing to replace ``path``, an existing device, pipe or socket (a rename would put a file in
    its place: ``--output /dev/full`` replaced the device)."""
    return (f"cannot write {path}: it is a device, pipe or socket, not a file (attnkit writes a new file and renames "
            "it into place, which would replace it); name a file, or leave the output option out to print")


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    """``obj`` as indented JSON at ``path``, through a temporary file and ``os.replace``. Strict JSON: a NaN or infinite
    number is refused (ValueError naming where it is), never written; :func:`finite_record` turns them into nulls."""
    try:
        text = json.dumps(obj, indent=2, sort_keys=True, default=str, allow_nan=False)
    except ValueError:
        where = ", ".join(non_finite_places(obj)[:3])
        raise UserError(f"{path}: not written, it would hold a number that is not finite ({where}); JSON has no NaN "
                         "or infinity") from None
    write_text_atomic(path, text + "\n")


#: how torch's stream writer says a write failed (in C++ terms, as a RuntimeError)
TORCH_WRITE_FAILED = ("inline_container", "PytorchStreamWriter", "file write failed")


def is_disk_failure(e: BaseException) -> bool:
    """Whether a failed write is the system's (a full disk, a read-only folder: a rerun may succeed), not one the
    rerun would meet again (a name that is not UTF-8, a value that cannot be written)."""
    return isinstance(e, OSError) or any(s in str(e) for s in TORCH_WRITE_FAILED)


def write_failure(e: BaseException) -> str:
    """What went wrong in a failed write, in a few words (torch's stream writer says it in C++ terms)."""
    why = getattr(e, "strerror", None) or (str(e).strip().splitlines() or [type(e).__name__])[-1]
    if any(s in why for s in TORCH_WRITE_FAILED):
        return "a file could not be written in full"
    return why


def disk_hint(e: BaseException) -> str:
    """What to look at after a failed write: the disk for the system's errors, else the error's kind."""
    return " (is the disk full, or the folder read-only?)" if is_disk_failure(e) else f" ({type(e).__name__})"
