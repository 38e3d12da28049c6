"""What attnkit wrote and may therefore replace: marks in its files, the ledger of outputs that carry none, folder
manifests, and earlier files moved aside (never deleted) when they are not provably attnkit's.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from pathlib import Path

from attnkit.errors import UserError
from attnkit.runfiles.atomic import (
    current_batch,
    special_file_problem,
    write_failure,
    write_json_atomic,
)
from attnkit.runfiles.json_files import read_json
from attnkit.runfiles.lock import folder_held
from attnkit.runfiles.names import (
    FIGURE_CREATOR,
    FOLDER_MANIFEST,
    LOCK_FILE,
    MODEL_DIR,
    OUTPUT_LEDGER,
    REPLACED_PREFIX,
    RUN_FILES,
    RUN_RECORD,
    SWEEP_FILES,
    SWEEP_RECORD,
    WRITTEN_BY,
)


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


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 of a file (as the ledger and a folder's manifest record it)."""
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
    return file_sha256(path) == entry.get("sha256")


def record_output(path: str | os.PathLike, by: str) -> None:
    """Note in the ledger of ``path``'s folder (OUTPUT_LEDGER) that attnkit (``by``: "attnkit predict") wrote the file
    at ``path`` as it is now, so that a later run of the same command may replace it (a file whose format cannot carry
    a mark: TSV, JSON lines). A ledger that cannot be written is no error: the output is written, only not marked, and
    one line says so (the next run will not replace it)."""
    path = Path(path)
    batch = current_batch()
    if batch is not None:  # the file is not in place yet: recorded once the batch is
        batch.after.append(lambda: record_output(path, by))
        return
    entry = {"size": path.stat().st_size, "sha256": file_sha256(path), "by": by}
    try:
        with folder_held(path.parent):  # two commands finishing in one folder: neither drops the other's entry
            files = _read_ledger(path.parent)
            files[path.name] = entry
            write_json_atomic(path.parent / OUTPUT_LEDGER, {WRITTEN_BY: "attnkit", "files": files})
    except (UserError, OSError) as e:  # (a full disk after the output itself was written, a garbled ledger)
        logging.getLogger("attnkit").warning(
            "%s is written, but could not be marked as attnkit's in %s (%s): a later run will keep it as a file of yours "
            "and refuse to replace it; delete it then to have it written again", path, path.parent / OUTPUT_LEDGER,
            write_failure(e) if isinstance(e, OSError) else str(e).splitlines()[0])


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


#: files up to this size get their SHA-256 in a folder's manifest (config, tokenizer: a same-size swap is seen; not
#: the weights, which their own shapes check)
HASHED_UP_TO = 8 << 20


def write_folder_manifest(folder: str | os.PathLike, by: str, complete: bool = True) -> None:
    """Record in ``folder`` (FOLDER_MANIFEST) every file attnkit wrote there (size and time; the SHA-256 of the small
    ones); ``complete=False``: a folder being written (a temporary one, which a later run may remove if it was left by
    a killed process)."""
    folder = Path(folder)
    files = folder_files(folder) if complete else {}
    hashes = {name: file_sha256(folder / name) for name, (size, _) in files.items() if size <= HASHED_UP_TO}
    record = {WRITTEN_BY: by, "complete": complete, "files": files, "sha256": hashes}
    if "config.json" in files:  # a model folder: its config as written with the weights (see models.checks)
        with contextlib.suppress(OSError, ValueError):
            record["config"] = read_json(folder / "config.json", "a model's config")
    write_json_atomic(folder / FOLDER_MANIFEST, record)


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


def folder_holds_only_written(folder: str | os.PathLike) -> bool:
    """Whether every file in ``folder`` is one attnkit wrote there, unchanged (its complete manifest lists it with its
    size and time), some perhaps gone: a folder as written, or one whose removal (:func:`remove_written`) was cut
    short. A file added or edited by hand makes it the user's."""
    m = read_folder_manifest(folder)
    listed = m.get("files") if m is not None and m.get("complete") is True else None
    return isinstance(listed, dict) and all(listed.get(k) == v for k, v in folder_files(folder).items())


def remove_written(folder: str | os.PathLike) -> None:
    """Delete a folder attnkit wrote, its manifest last: a removal cut short (a kill, a second Ctrl-C) leaves the
    manifest beside what is left, so that the next run still knows the rest for attnkit's and removes it (never moves
    it aside as the user's). Errors are ignored, as ``shutil.rmtree(ignore_errors=True)`` does."""
    folder = Path(folder)
    with contextlib.suppress(OSError):
        for p in folder.iterdir():
            if p.name == FOLDER_MANIFEST:
                continue
            with contextlib.suppress(OSError):
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    with contextlib.suppress(OSError):
        (folder / FOLDER_MANIFEST).unlink()
    shutil.rmtree(folder, ignore_errors=True)


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


def check_suffix(path: str | os.PathLike, suffixes: tuple[str, ...], what: str) -> Path:
    """``path`` as a Path if its name ends in one of ``suffixes`` (lower case, with the dot); else one line, ``what``
    first (e.g. "--output m.png: the metrics", to which " file must end in .json" is added). A name that is only the suffix (``.json``: a hidden file with no
    suffix, to Python) is told that the name before the suffix is missing, not that the suffix is."""
    path = Path(path)
    if path.name.lower() in suffixes:
        raise UserError(f"{what} file has no name before {path.name!r}: name the file, e.g. {path.with_name('out' + path.name)}")
    if path.suffix.lower() not in suffixes:
        raise UserError(f"{what} file must end in {' or '.join(suffixes)}, got {path.name!r}")
    check_link_target_kind(path, suffixes, what)
    return path


def check_link_target_kind(path: Path, suffixes: tuple[str, ...], what: str) -> None:
    """An output named as a link to an existing file of another kind (``out.png -> data.csv``) is refused: writes go
    through a link (:func:`attnkit.runfiles.atomic.atomic_path`), and the data file was replaced by a chart or by JSON
    without a word (sweep s24). A link to a file of the output's own kind is written through as before."""
    if path.is_symlink() and path.is_file():
        target = Path(os.path.realpath(path))
        if target.suffix.lower() not in suffixes:
            raise UserError(f"{what} file {str(path)!r} is a link to {target}, whose name does not end in "
                            f"{' or '.join(suffixes)}: writing through the link would replace that file; name another file")


#: attnkit's bookkeeping files in a folder, by name: never a command's output, wherever it is aimed
BOOKKEEPING = {OUTPUT_LEDGER: "ledger of the outputs in a folder", RUN_RECORD: "record of a run",
               FOLDER_MANIFEST: "list of a model folder's files", LOCK_FILE: "lock on a run folder"}


def check_not_bookkeeping(path: Path, what: str) -> None:
    """Refuse ``what`` (an option and its path, or a side file's description) named as one of attnkit's bookkeeping
    files (:data:`BOOKKEEPING`): it would replace the folder's record, or be replaced by it without a word."""
    hit = next((n for n in BOOKKEEPING if n.lower() == path.name.lower()), None)
    if hit is not None:
        raise UserError(f"{what}: {path.name} is the name of attnkit's {BOOKKEEPING[hit]}; name another file")


def own_file_of(path: str | os.PathLike) -> tuple[str, Path] | None:
    """("run" or "sweep", its folder) where the existing file at ``path`` (links followed) is one of the files a run or
    a sweep keeps of itself (RUN_FILES and the run's record; SWEEP_FILES), which no command's output replaces; else None."""
    real = Path(path).resolve()
    if real.name in SWEEP_FILES and is_sweep_folder(real.parent):
        return "sweep", real.parent
    if (real.name in RUN_FILES or real.name == RUN_RECORD) and (real.parent / RUN_RECORD).is_file():
        return "run", real.parent
    return None


def _refuse_own_file(path: Path, what: str) -> None:
    """Refuse ``what`` (an option and its path, or a side file's description) where ``path`` is an existing own file of
    a run or sweep (:func:`own_file_of`, read once)."""
    owner = own_file_of(path) if path.exists() else None
    if owner is None:
        return
    kind, folder = owner
    real = path.resolve()
    via = f" (a link to {real})" if path.is_symlink() else ""
    raise UserError(f"{what}{via} is one of the files the {kind} {folder} keeps of itself ({real.name}): no command's "
                    "output replaces it; name another file")


def check_side_file(path: str | os.PathLike, made_by: str) -> Path:
    """A file a command writes beside the one the user named (``made_by`` says which, e.g. "the JSON beside --output
    x.png"): refused if it exists and attnkit did not write it, so that no file of the user's is replaced, and if it is
    one of the files a run or a sweep keeps of itself (its metrics, settings, figures: :func:`own_file_of`)."""
    path = Path(path)
    check_not_bookkeeping(path, f"{made_by} would be {path}")
    _refuse_own_file(path, f"{made_by} would replace {path}, which")
    if not path.exists():
        return path
    own = written_by_attnkit(path)
    run = next((q for q in path.resolve().parents if (q / RUN_RECORD).is_file()), None)
    listed = path.name in ((read_folder_manifest(path.resolve().parent) or {}).get("files") or {})
    if run is not None and (path.name in RUN_FILES or path.name == RUN_RECORD or listed):
        # a model's weights, config or tokenizer (its folder's manifest lists them), a run's own files: attnkit wrote
        # them, but never as an output
        raise UserError(f"{made_by} would replace {path}, a file of the attnkit run {run} that attnkit did not write "
                        "as an output; name other files")
    if not own:
        raise UserError(f"{path} exists and was not written by attnkit: {made_by} would replace it; move it, or name "
                        "other files")
    return path


def check_output_file(path: str | os.PathLike, option: str, protect: dict[str, str | os.PathLike | None] | None = None) -> Path:
    """An output file the user named, checked before anything is written: not a folder, its folder (made if missing)
    not a file, and not an existing file inside one of the ``protect`` folders (``{what: folder}``: the model's run
    folder, the data being read or trained on) unless attnkit wrote it as a command's output: a model's weights,
    config or tokenizer, a run's own files (RUN_FILES: metrics, settings, curves, heatmaps) and the data are never
    replaced by a command's output."""
    if str(path) == "-":
        raise UserError(f"{option} -: attnkit writes a file, not standard output; leave {option} out to print, or name a file")
    if str(path).endswith(("/", os.sep)) and str(path).strip("/" + os.sep):  # "pdir/": a folder (Path drops the slash)
        raise UserError(f"{option} {path} names a folder (it ends in '/'): expected a file name, e.g. in that folder")
    path = Path(path)
    if path.is_dir() or str(path) in ("", "."):
        raise UserError(f"{option} {path} is a folder: expected a file name")
    broken = next((q for q in path.parents if q.is_symlink() and not q.exists()), None)
    if broken is not None:
        raise UserError(f"{option} {path}: {broken} is a broken symlink (it points to {os.readlink(broken)}, which does not "
                        "exist); make the folder it points to, or name another place")
    if path.exists() and not path.is_file():
        raise UserError(f"{option} {special_file_problem(path)}")
    parent = next((p for p in path.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        raise UserError(f"{option} {path}: {parent} is a file, not a folder")
    check_not_bookkeeping(path, f"{option} {path}")
    _refuse_own_file(path, f"{option} {path}")  # a run's or a sweep's own file, links followed
    if path.exists() and (path.name in RUN_FILES or path.name == RUN_RECORD or not written_by_attnkit(path)):
        real = path.resolve()
        run = next((q for q in real.parents if (q / RUN_RECORD).is_file()), None)  # any attnkit run, not only the model's
        places = {**(protect or {}), "the attnkit run": run}
        for what, folder in places.items():
            if folder is not None and Path(folder).exists() and real.is_relative_to(Path(folder).resolve()):
                raise UserError(f"{option} {path} is a file of {what} {folder} that attnkit did not write as an output: "
                                "it would be replaced; name another file")
    return path


def sweep_cells_of(folder: str | os.PathLike) -> list[dict] | None:
    """The cell records of the attnkit sweep ``folder`` holds (its sweep.json: a list of records, each naming its run
    folder and seed; :func:`attnkit.training.sweep_record.read_sweep_records` checks them in full), else None."""
    try:
        recs = read_json(Path(folder) / SWEEP_RECORD, expect=None)
    except (OSError, ValueError):
        return None
    ok = isinstance(recs, list) and bool(recs) and all(isinstance(r, dict) and "run_dir" in r and "seed" in r for r in recs)
    return recs if ok else None


def is_sweep_folder(folder: str | os.PathLike) -> bool:
    """Whether ``folder`` holds an attnkit sweep (:func:`sweep_cells_of`)."""
    return sweep_cells_of(folder) is not None


def check_not_input(output: str | os.PathLike, option: str, inputs: dict[str, str | os.PathLike | None]) -> None:
    """Refuse an output file that is also one of the command's inputs (``{option: path}``): it would be overwritten
    while, or instead of, being read."""
    out = Path(output).expanduser().resolve()
    for name, p in inputs.items():
        if p is not None and Path(p).expanduser().resolve() == out:
            raise UserError(f"{option} {output} is also the input {name} {p}: name another output file")


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
