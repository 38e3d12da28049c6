"""Tweet and comment sentiment: SemEval-2013 task 2B and SenTube (auto, tablets).

File formats and pitfalls follow ``../shared/data/SOURCES.md``: a UTF-8 BOM at the start of a file, U+FEFF inside
every SenTube line, SemEval's quoted labels (and quotes inside tweets, so no csv quoting), SemEval's 5 -> 3 labels.
"""

from __future__ import annotations
from pathlib import Path
from attnkit.errors import DataFormatError
from attnkit.tasks.readers import (
    read_delimited,
    read_lines,
    require_dir,
    require_file,
    to_splits,
)
from attnkit.tasks.registry import (
    SPLIT_STEMS,
    Example,
    TaskData,
    register_task,
)
from attnkit.tasks.sst import BINARY_SENTIMENT

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
