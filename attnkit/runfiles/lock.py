"""The lock a process holds on a run folder while it writes there (released by the operating system when it dies).
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

from attnkit.errors import UserError
from attnkit.runfiles.names import LOCK_FILE


@contextmanager
def folder_lock(folder: str | os.PathLike, what: str = "run folder", way_out: str = "pick another --output-dir"):
    """Hold an exclusive lock on ``folder`` (the file LOCK_FILE in it) for the duration: a second process that asks
    for it stops at once with one line. The OS releases the lock when the holder exits or is killed, so a killed run
    never leaves it stuck (the file stays; only the lock on it counts)."""
    folder = Path(folder)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"another attnkit process is writing the {what} {folder} (it holds {folder / LOCK_FILE}): "
                            f"wait for it to finish, or {way_out}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


@contextmanager
def folder_held(folder: str | os.PathLike):
    """A short exclusive hold on ``folder`` itself (a lock on its directory: no file is made in it), for a
    read-modify-write of a file there that two processes may do at once; a second process waits for the first."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
