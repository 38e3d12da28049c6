"""Reading JSON files with errors that name them, and records kept finite (no NaN written).
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from pathlib import Path

from attnkit.errors import DataFormatError, UserError

_JSON_KINDS = {dict: "a JSON object", list: "a JSON array"}


def looks_utf16(raw: bytes) -> bool:
    """Whether ``raw`` is UTF-16: its byte-order mark, or (none) the even or the odd bytes of its first 512 all 0 but
    a few and the others not (ASCII text in UTF-16LE/BE); UTF-8 text holds no 0 bytes but a stray NUL."""
    if raw[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return True
    head = raw[:512]
    if len(head) < 8:
        return False
    even, odd = head[0::2], head[1::2]  # one half nearly all 0, the other nearly none (a file of zeros is no text)
    return any(a.count(0) >= 0.9 * len(a) and b.count(0) <= 0.1 * len(b) for a, b in ((even, odd), (odd, even)))


def read_json(path: str | os.PathLike, what: str = "JSON", expect: type | None = dict):
    """The JSON value in the file at ``path`` (UTF-8, a BOM allowed). Text that is not JSON, not UTF-8, or not of the
    ``expect``-ed type is a DataFormatError naming the file, the line (from json's error) and ``what`` the file should
    hold ("attnkit's record of a run"); an OS error (a missing file) is raised as it is."""
    path = Path(path)
    raw = path.read_bytes()
    if looks_utf16(raw):
        raise DataFormatError(path, 1, f"expected {what} in UTF-8, found UTF-16 text: convert it to UTF-8, e.g. with "
                              "iconv -f UTF-16 -t UTF-8")
    try:
        value = json.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as e:
        raise DataFormatError(path, raw[: e.start].count(b"\n") + 1, f"not UTF-8 text (byte {raw[e.start:e.start + 1]!r}): "
                              f"expected {what}") from None
    except json.JSONDecodeError as e:
        raise DataFormatError(path, e.lineno, f"not valid JSON ({e.msg}, column {e.colno}): expected {what}") from None
    except RecursionError:
        raise DataFormatError(path, None, f"JSON nested too deeply to read: expected {what}") from None
    if expect is not None and not isinstance(value, expect):
        found = next((k for t, k in _JSON_KINDS.items() if isinstance(value, t)), f"a JSON {type(value).__name__}")
        raise DataFormatError(path, None, f"expected {what} ({_JSON_KINDS.get(expect, expect.__name__)}), found {found}")
    return value


def home_path(path: str | os.PathLike, what: str = "the path") -> Path:
    """``path`` with a leading ``~`` or ``~user`` read as that home folder; a user this machine does not know is
    refused in one line naming ``what`` (pathlib's RuntimeError "Could not determine home directory" was a traceback)."""
    text = os.fspath(path)
    if not text.startswith("~"):
        return Path(text)
    expanded = os.path.expanduser(text)
    if expanded.startswith("~"):
        user = text[1:].split("/", 1)[0].split(os.sep, 1)[0]
        raise UserError(f"{what} {text}: {'no home folder is known for this user' if not user else f'there is no user {user!r} on this machine'} "
                        "(a path starting with ~ or ~name means that user's home folder); write the folder out")
    return Path(expanded)


def path_problem(path: str | os.PathLike, want: str = "file") -> str:
    """What is wrong with ``path`` as a ``want`` ("file", "folder", or "any") to read, in words that follow the path
    ("does not exist", "is a symlink loop", "is a file, not a folder", ...); "" where nothing is."""
    p = home_path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        if p.is_symlink():
            return f"is a broken symlink (it points to {os.readlink(p)}, which does not exist)"
        return "does not exist"
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "leads into a symlink loop (links that lead back to themselves), so it cannot be read"
        if e.errno == errno.ENOTDIR:
            parent = next((q for q in reversed(p.parents) if q.is_file()), None)
            return f"cannot exist: {parent} is a file, not a folder" if parent else "cannot exist (a folder on its way is a file)"
        return f"cannot be read ({e.strerror or e})"
    if want == "folder" and not stat.S_ISDIR(mode):
        return "is a file, not a folder"
    if want == "file" and stat.S_ISDIR(mode):
        return "is a folder, not a file"
    return ""

#: the key under which :func:`finite_record` says which numbers it replaced by null, and what they were
NON_FINITE_KEY = "non_finite"


def non_finite_places(obj, where: str = "") -> list[str]:
    """Where ``obj`` (JSON-like: dicts, lists, numbers) holds NaN or an infinity, and what: ``["log_history[3].grad_norm:
    inf"]``."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return [f"{where or 'the value'}: {obj}"]
    if isinstance(obj, dict):
        return [p for k, v in obj.items() for p in non_finite_places(v, f"{where}.{k}" if where else str(k))]
    if isinstance(obj, (list, tuple)):
        return [p for i, v in enumerate(obj) for p in non_finite_places(v, f"{where}[{i}]")]
    return []


def _nulled(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nulled(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_nulled(v) for v in obj]
    return obj


def finite_record(record: dict) -> dict:
    """``record`` with each NaN or infinite number in it replaced by null, and under :data:`NON_FINITE_KEY` where each
    was and what it was (``"log_history[3].grad_norm: inf"``), so that it can be written as strict JSON and still say
    what was not a number. ``record`` itself where it holds none."""
    places = non_finite_places(record)
    if not places:
        return record
    return _nulled(record) | {NON_FINITE_KEY: list(record.get(NON_FINITE_KEY) or []) + places}
