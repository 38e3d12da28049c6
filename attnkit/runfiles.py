"""What a run folder holds, and how its files are written: atomically, so a killed run never leaves half a file, a
command's several outputs together (:func:`output_batch`), and never over a file of the user's (side files are
checked, see :func:`check_side_file`).

    <output-dir>/model/               the trained model (MODEL_DIR), with RUN_INFO beside its config.json
    <output-dir>/metrics.json         every metric the run printed (METRICS_FILE)
    <output-dir>/run_config.json      the settings, to resume or to compare
    <output-dir>/.attnkit-run.json    attnkit's record of the run (RUN_RECORD), written when it starts: what makes the
                                      folder a run, and the checkpoints it wrote (the only ones it resumes or deletes)
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import json
import math
import os
import stat
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from attnkit.errors import DataFormatError, UserError

#: the folder of a run (`attnkit train` / `pretrain`) that holds its model
MODEL_DIR = "model"
#: every metric a run printed
METRICS_FILE = "metrics.json"
#: what training recorded beside a model (task, labels, max length, lemmatisation, ...)
RUN_INFO = "attnkit_run.json"
#: the lock a process holds on a run folder while it writes there (released by the OS when the process dies)
LOCK_FILE = ".attnkit.lock"
#: the files a training run writes for itself: never replaced by another command's output, attnkit's own or not
RUN_FILES = frozenset({METRICS_FILE, "run_config.json", RUN_INFO, "curves.png", "curves.svg", "attention.png", "attention_grid.png",
                       "lam_learned.png", "lam_learned.svg", "alpha_learned.png", "alpha_learned.svg"})
#: the key by which a JSON file says attnkit wrote it (its value: "attnkit <command>")
WRITTEN_BY = "written_by"
#: what attnkit writes into the PNG (tEXt "Software") and SVG (dc:creator) figures it draws
FIGURE_CREATOR = "attnkit"
#: attnkit's record of a run, written into its run folder when the run starts: only a folder that holds one is a run
#: (never a folder that merely has a model/ or checkpoint-* inside); it lists the checkpoints the run wrote
RUN_RECORD = ".attnkit-run.json"
#: what :func:`attnkit.models.checkpoint.save_checkpoint` wrote into a model folder (every file, its size and time): the
#: folder is replaced only while it holds exactly that, else it is moved aside whole
FOLDER_MANIFEST = ".attnkit-files.json"
#: the outputs attnkit wrote into a folder in formats that cannot carry a mark of their own (TSV, JSON lines, HTML)
OUTPUT_LEDGER = ".attnkit-outputs.json"
#: the folder an earlier run (or a folder attnkit must replace but did not write) is moved into, never deleted
REPLACED_PREFIX = ".replaced-"


_JSON_KINDS = {dict: "a JSON object", list: "a JSON array"}


def read_json(path: str | os.PathLike, what: str = "JSON", expect: type | None = dict):
    """The JSON value in the file at ``path`` (UTF-8, a BOM allowed). Text that is not JSON, not UTF-8, or not of the
    ``expect``-ed type is a DataFormatError naming the file, the line (from json's error) and ``what`` the file should
    hold ("attnkit's record of a run"); an OS error (a missing file) is raised as it is."""
    path = Path(path)
    raw = path.read_bytes()
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


def path_problem(path: str | os.PathLike, want: str = "file") -> str:
    """What is wrong with ``path`` as a ``want`` ("file", "folder", or "any") to read, in words that follow the path
    ("does not exist", "is a symlink loop", "is a file, not a folder", ...); "" where nothing is."""
    p = Path(path).expanduser()
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


def is_main_process() -> bool:
    """Whether this process writes and prints for the run: always alone, rank 0 under ``torchrun``/``accelerate launch``."""
    return int(os.environ.get("RANK", "0")) == 0


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
    folders are made; an OS error names ``path``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{next(_TMP_SERIAL)}")
    batch, staged = _BATCH.get(), False
    try:
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "Is a directory")
        if path.exists() and not path.is_file():
            raise UserError(_special_file(path))
        path.parent.mkdir(parents=True, exist_ok=True)
        yield tmp
        if batch is None:
            os.replace(tmp, path)
        else:
            batch.stage(tmp, path)
            staged = True
    except OSError as e:
        raise write_error(path, e) from None
    finally:
        if not staged and tmp.exists():
            tmp.unlink()


def _special_file(path: Path) -> str:
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


def written_by_attnkit(path: str | os.PathLike) -> bool:
    """Whether the file at ``path`` says attnkit wrote it: a JSON object with ``"written_by": "attnkit ..."``, a PNG
    with the tEXt chunk ``Software: attnkit``, an SVG whose metadata names attnkit as its creator; or a file of any
    format that the ledger of its folder (OUTPUT_LEDGER, see :func:`record_output`) lists with these very bytes."""
    path = Path(path)
    try:
        suffix = path.suffix.lower()
        if suffix == ".json":
            d = read_json(path, expect=None)
            if isinstance(d, dict) and str(d.get(WRITTEN_BY, "")).startswith("attnkit"):
                return True
        elif suffix == ".png":
            if _png_software(path) == FIGURE_CREATOR:
                return True
        elif suffix == ".svg":
            head = path.read_text(encoding="utf-8", errors="replace")[:4000]
            if f"<dc:title>{FIGURE_CREATOR}</dc:title>" in head:
                return True
        return _ledger_lists(path)
    except (OSError, ValueError):
        return False


def _sha256(path: Path) -> str:
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _read_ledger(folder: Path) -> dict:
    try:
        d = read_json(folder / OUTPUT_LEDGER, "attnkit's ledger of outputs", expect=None)
    except (OSError, ValueError):
        return {}
    files = d.get("files") if isinstance(d, dict) and str(d.get(WRITTEN_BY, "")).startswith("attnkit") else None
    return files if isinstance(files, dict) else {}


def _ledger_lists(path: Path) -> bool:
    """Whether the ledger beside ``path`` lists it with its present size and SHA-256 (an edited file is not attnkit's)."""
    entry = _read_ledger(path.parent).get(path.name)
    if not isinstance(entry, dict) or not path.is_file() or path.stat().st_size != entry.get("size"):
        return False
    return _sha256(path) == entry.get("sha256")


def record_output(path: str | os.PathLike, by: str) -> None:
    """Note in the ledger of ``path``'s folder (OUTPUT_LEDGER) that attnkit (``by``: "attnkit predict") wrote the file
    at ``path`` as it is now, so that a later run of the same command may replace it (a file whose format cannot carry
    a mark: TSV, JSON lines). A ledger that cannot be written is no error: the output is written, only not marked."""
    path = Path(path)
    batch = _BATCH.get()
    if batch is not None:  # the file is not in place yet: recorded once the batch is
        batch.after.append(lambda: record_output(path, by))
        return
    files = _read_ledger(path.parent)
    files[path.name] = {"size": path.stat().st_size, "sha256": _sha256(path), "by": by}
    try:
        write_json_atomic(path.parent / OUTPUT_LEDGER, {WRITTEN_BY: "attnkit", "files": files})
    except UserError:
        pass


def replaced_folder(parent: str | os.PathLike) -> Path:
    """A new, empty ``<parent>/.replaced-<date>[-n]/`` to move what attnkit must not delete into."""
    import time

    parent = Path(parent)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = parent / f"{REPLACED_PREFIX}{stamp}"
    n = 1
    while True:
        try:
            aside.mkdir()
            return aside
        except FileExistsError:
            n += 1
            aside = parent / f"{REPLACED_PREFIX}{stamp}-{n}"


def set_aside(path: str | os.PathLike) -> Path:
    """Move the file or folder ``path`` whole into a new ``.replaced-<date>/`` beside it; return where it went."""
    path = Path(path)
    target = replaced_folder(path.parent) / path.name
    os.replace(path, target)
    return target


def make_way(path: str | os.PathLike) -> Path:
    """Before attnkit writes one of its own files at ``path`` (a run's curves, a sweep's figures): a file there that
    attnkit did not write is moved aside whole into ``.replaced-<date>/`` (with a warning), never overwritten."""
    path = Path(path)
    if path.exists() and not written_by_attnkit(path):
        aside = set_aside(path)
        import logging

        logging.getLogger("attnkit").warning("%s was not written by attnkit: moved aside to %s", path, aside)
    return path


def folder_files(folder: str | os.PathLike) -> dict[str, list[int]]:
    """``{relative path: [size, mtime in ns]}`` of every file under ``folder`` (its manifest and temporary files aside)."""
    folder = Path(folder)
    out = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.name.startswith(FOLDER_MANIFEST):
            st = p.stat()
            out[p.relative_to(folder).as_posix()] = [st.st_size, st.st_mtime_ns]
    return out


def write_folder_manifest(folder: str | os.PathLike, by: str, complete: bool = True) -> None:
    """Record in ``folder`` (FOLDER_MANIFEST) every file attnkit wrote there; ``complete=False``: a folder being
    written (a temporary one, which a later run may remove if it was left by a killed process)."""
    folder = Path(folder)
    files = folder_files(folder) if complete else {}
    write_json_atomic(folder / FOLDER_MANIFEST, {WRITTEN_BY: by, "complete": complete, "files": files})


def read_folder_manifest(folder: str | os.PathLike) -> dict | None:
    """The manifest attnkit wrote into ``folder``, or None if there is none (or it is not attnkit's)."""
    try:
        d = read_json(Path(folder) / FOLDER_MANIFEST, "attnkit's manifest of a model folder", expect=None)
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and str(d.get(WRITTEN_BY, "")).startswith("attnkit") else None


def folder_is_as_written(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds exactly the files attnkit wrote there, unchanged (its manifest says which): only then
    may it be deleted or replaced; a file added or edited by hand makes it the user's."""
    m = read_folder_manifest(folder)
    return m is not None and m.get("complete") is True and m.get("files") == folder_files(folder)


def _png_software(path: Path) -> str | None:
    """The ``Software`` tEXt chunk of a PNG file (None if it has none or is not a PNG)."""
    with open(path, "rb") as f:
        if f.read(8) != b"\x89PNG\r\n\x1a\n":
            return None
        while True:
            head = f.read(8)
            if len(head) < 8:
                return None
            size, kind = int.from_bytes(head[:4], "big"), head[4:]
            if kind == b"IDAT" or kind == b"IEND":  # matplotlib writes its text chunks before the image data
                return None
            data = f.read(size)
            f.read(4)  # crc
            if kind == b"tEXt" and b"\0" in data:
                key, value = data.split(b"\0", 1)
                if key == b"Software":
                    return value.decode("latin-1")


def check_side_file(path: str | os.PathLike, made_by: str) -> Path:
    """A file a command writes beside the one the user named (``made_by`` says which, e.g. "the JSON beside --output
    x.png"): refused if it exists and attnkit did not write it, so that no file of the user's is replaced."""
    path = Path(path)
    if path.exists() and not written_by_attnkit(path):
        raise UserError(f"{path} exists and was not written by attnkit: {made_by} would replace it; move it, or name "
                        "other files")
    return path


def check_output_file(path: str | os.PathLike, option: str, protect: dict[str, str | os.PathLike | None] | None = None) -> Path:
    """An output file the user named, checked before anything is written: not a folder, its folder (made if missing)
    not a file, and not an existing file inside one of the ``protect`` folders (``{what: folder}``: the model's run
    folder, the data being read or trained on) unless attnkit wrote it as a command's output: a model's weights,
    config or tokenizer, a run's own files (RUN_FILES: metrics, settings, curves, heatmaps) and the data are never
    replaced by a command's output."""
    path = Path(path)
    if path.is_dir() or str(path) in ("", "."):
        raise UserError(f"{option} {path} is a folder: expected a file name")
    if path.exists() and not path.is_file():
        raise UserError(f"{option} {_special_file(path)}")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise UserError(f"{option} {path}: {parent} is a file, not a folder")
    if path.exists() and (path.name in RUN_FILES or not written_by_attnkit(path)):
        real = path.resolve()
        for what, folder in (protect or {}).items():
            if folder is not None and Path(folder).exists() and real.is_relative_to(Path(folder).resolve()):
                raise UserError(f"{option} {path} is a file of {what} {folder} that attnkit did not write as an output: "
                                "it would be replaced; name another file")
    return path


def check_not_input(output: str | os.PathLike, option: str, inputs: dict[str, str | os.PathLike | None]) -> None:
    """Refuse an output file that is also one of the command's inputs (``{option: path}``): it would be overwritten
    while, or instead of, being read."""
    out = Path(output).expanduser().resolve()
    for name, p in inputs.items():
        if p is not None and Path(p).expanduser().resolve() == out:
            raise UserError(f"{option} {output} is also the input {name} {p}: name another output file")


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


def unfinished_run(path: str | os.PathLike) -> str | None:
    """Where ``path`` is an attnkit run folder with no model yet (a run still training, or killed before its end): the
    sentence that says so, for a command that was given it as a model; else None."""
    p = Path(path).expanduser()
    if (p / MODEL_DIR / "config.json").is_file() or not (p / RUN_RECORD).is_file():
        return None
    if (p / "metrics.json").is_file():
        return f"{p} is an attnkit run that finished, but its {MODEL_DIR}/ is gone: train it again (--no-resume) or name another model"
    ckpts = sorted((c.name for c in p.glob("checkpoint-*") if c.is_dir()), key=lambda n: int(n.split("-")[1]) if n.split("-")[1].isdigit() else -1)
    where = f" (its latest checkpoint: {p / ckpts[-1]})" if ckpts else ""
    return (f"{p} is an attnkit run that has not finished: it has no {MODEL_DIR}/ yet{where}; run the same command "
            f"again to resume and finish it, or wait for it to end")

