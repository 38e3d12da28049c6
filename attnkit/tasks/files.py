"""Your own files as a task: ``--task csv|tsv|jsonl`` with a text (and optional pair) column and a label column."""

from __future__ import annotations

import json
import math
import os
import re
import unicodedata
from pathlib import Path
from typing import Callable, NamedTuple

from attnkit.errors import DataFormatError, UserError
from attnkit.tasks.controls import dropped_control
from attnkit.tasks.readers import NUL_HINT, is_blank, label_index, read_table, require_file, to_splits
from attnkit.tasks.registry import UNLABELLED, Example, TaskData, check_splits_differ, register_task

_INT_LABEL = re.compile(r"[+-]?\d+")


def _pick_file(folder: Path, given: str | None, stems: tuple[str, ...], fmt: str) -> Path | None:
    """``folder/given`` (must exist), else the first existing ``folder/<stem>.<fmt>``, else None."""
    if given:
        return require_file(folder / given, fmt)
    for stem in stems:
        if (folder / f"{stem}.{fmt}").exists():
            return require_file(folder / f"{stem}.{fmt}", fmt)  # a folder of that name is named as such
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
    for line, record in read_table(path, fmt, text_columns + ([label_column] if labelled else [])):
        texts = []
        for column in text_columns:
            value = record[column]
            if not isinstance(value, str):
                raise DataFormatError(path, line, f"expected a string in {column!r}, found {type(value).__name__}")
            if is_blank(value):
                raise DataFormatError(path, line, f"expected text in {column!r}, found an empty value")
            if not any(unicodedata.category(c)[0] in "LNPS" for c in value):  # a lone combining mark, controls only
                raise DataFormatError(path, line, f"expected text in {column!r}, found {value[:20]!r}: no letter, digit, "
                                      "punctuation or symbol (only combining marks or control characters), nothing a "
                                      "model can read")
            _refuse_control(path, line, column, value)
            texts.append(value.strip())
        value = record.get(label_column)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (str, int, float))):
            raise DataFormatError(path, line, f"expected a label in {label_column!r} (a name or a whole number), found "
                                  f"{type(value).__name__} {json.dumps(value)[:40]}")
        label = "" if value is None else str(value).strip()
        if labelled and not label:
            raise DataFormatError(path, line, f"expected a label in {label_column!r}, found an empty value")
        rows.append(_RawRow(path, line, texts[0], texts[1] if pair_column else None, label))
    if labelled and not rows:
        raise DataFormatError(path, None, "expected at least one labelled row, found none")
    return rows


def _refuse_control(path: Path, line: int, column: str, value: str) -> None:
    """A text holding a control character the tokenizer would drop, joining the words around it ("a<NUL>delight" read
    as "adelight"), is refused naming it; a NUL is the mark of a damaged file or a UTF-16 one. (Those at either end,
    which strip removes, are no matter.)"""
    text = value.strip()
    bad = dropped_control(text)
    if bad is None:
        return
    at, code = bad
    why = (NUL_HINT if code == "U+0000" else
           "the tokenizer would drop it and read the words on either side as one (write a space in its place)")
    raise DataFormatError(path, line, f"the text in {column!r} holds the control character {code} at character "
                          f"{at + len(value) - len(value.lstrip())} ({text[max(0, at - 11):at + 10]!r}): expected plain "
                          f"text (no control characters but tab and line breaks); {why}")


def _check_labels(rows: list[_RawRow]) -> None:
    """Refuse labels a model would silently split or garble: the same number written two ways ("1" and "1.0"; whole
    numbers such as "01" and "1" are one label already), labels that differ only in case ("Positive", "positive") or in
    their Unicode normal form (a composed "é" against "e" + a combining accent), and
    control characters (a stray tab or carriage return)."""
    first: dict[str, _RawRow] = {}
    numeric: dict[float, _RawRow] = {}
    words: list[_RawRow] = []
    for r in rows:
        if r.label in first:
            continue
        first[r.label] = r
        bad = next((c for c in r.label if unicodedata.category(c).startswith("C")), None)
        if bad is not None:
            raise DataFormatError(r.path, r.line, f"label {r.label!r} holds the control character {bad!r}: expected a plain label")
        try:
            value = float(r.label)
        except ValueError:
            words.append(r)
            continue
        if not math.isfinite(value) or value != int(value):
            raise DataFormatError(r.path, r.line, f"label {r.label!r} is {'not a finite number' if not math.isfinite(value) else 'a fraction'}: "
                                  "a class is a name or a whole number (scores are not classes)")
        if value in numeric and numeric[value].label != r.label and not (_INT_LABEL.fullmatch(r.label) and _INT_LABEL.fullmatch(numeric[value].label)):
            o = numeric[value]
            raise DataFormatError(r.path, r.line, f"label {r.label!r} is the number {value:g}, written {o.label!r} on line "
                                  f"{o.line} of {o.path.name}: write each label one way (they would be two classes)")
        numeric.setdefault(value, r)
    if numeric and words:
        n, w = next(iter(numeric.values())), words[0]
        raise DataFormatError(n.path, n.line, f"label {n.label!r} is a number, but {w.label!r} (line {w.line} of {w.path.name}) "
                              "is a name: the labels mix names and numbers; write every label one way")
    folded: dict[str, _RawRow] = {}
    for label, r in first.items():
        o = folded.setdefault(unicodedata.normalize("NFC", label).casefold(), r)
        if o.label != label:
            how = "in case" if unicodedata.normalize("NFC", label) != unicodedata.normalize("NFC", o.label) else \
                "in how its accents are encoded (Unicode NFC against NFD: they print the same)"
            raise DataFormatError(r.path, r.line, f"label {label!r} differs only {how} from {o.label!r} on line {o.line} of "
                                  f"{o.path.name}: write each label one way (they would be two classes)")


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
    _refuse_train_file_again(files)
    raw = {
        split: _read_generic_split(path, fmt, text_column, text_pair_column, label_column, labelled=split != "test")
        for split, path in files.items()
        if path is not None
    }
    _check_labels([r for rows in raw.values() for r in rows if r.label])
    names, norm = _label_names({r.label for r in raw["train"]})
    splits = {
        split: [
            Example(r.text, label_index(names, norm(r.label), r.path, r.line) if r.label else UNLABELLED, r.pair)
            for r in rows
        ]
        for split, rows in raw.items()
    }
    used = ", ".join(f"{split}={path.name}" for split, path in files.items() if path is not None)
    desc = f"{fmt} files in {folder} ({used}); text={text_column!r}, label={label_column!r}; labels sorted from train"
    split_data = to_splits(splits, with_pair=text_pair_column is not None)
    check_splits_differ(split_data, lambda split: str(files[split]))  # a copy of train.csv as dev.csv: named by its files
    return TaskData(fmt, split_data, names, desc)


def _refuse_train_file_again(files: dict[str, Path | None]) -> None:
    """The train file given again as the dev or test file (the same path, a link to it, a hard link) is refused, naming
    both: the scores on that split would be scores on the training examples."""
    train = files["train"]
    for split in ("validation", "test"):
        other = files[split]
        if other is not None and os.path.samefile(train, other):
            how = "a link to it" if other.is_symlink() or train.is_symlink() else "the same file"
            raise UserError(f"{other} ({split} split) is {train} (train split) again ({how}): its scores would be scores on "
                            "training examples; give the split a file of its own")


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
