"""File readers every task family shares: text with its line numbers, csv/tsv/jsonl records, rows to datasets.

Every reader raises :class:`attnkit.errors.DataFormatError` naming the file, the 1-based line and what was
expected, before any row reaches ``datasets``.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import unicodedata
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from attnkit.errors import DataFormatError, UserError
from attnkit.runfiles.json_files import looks_utf16, path_problem
from attnkit.tasks.registry import Example

if TYPE_CHECKING:
    import datasets

def require_dir(data_dir: Path | None, sub: str, task: str) -> Path:
    """``data_dir/sub``, or FileNotFoundError naming the path and the task."""
    if data_dir is None:
        raise FileNotFoundError(
            f"task {task} needs a data directory holding {sub}/: pass --data-dir or set $ATTNKIT_DATA "
            "(no ./shared/data or ../shared/data found)"
        )
    path = Path(data_dir) / sub
    if not path.is_dir():
        raise FileNotFoundError(f"task {task}: directory {path} {path_problem(path, 'folder')}")
    return path


def require_file(path: Path, task: str) -> Path:
    if path.is_dir():
        raise FileNotFoundError(f"task {task}: {path} is a folder, not a file")
    if not path.is_file():
        raise FileNotFoundError(f"task {task}: file {path} {path_problem(path) or 'is not a regular file'}")
    return path


#: the first bytes of compressed files (a data file given packed, under the text's name)
COMPRESSED = ((re.compile(rb"\x1f\x8b"), "a gzip-compressed file", "gunzip"),
              (re.compile(rb"BZh[1-9]1AY&SY"), "a bzip2-compressed file", "bunzip2"),
              (re.compile(rb"PK\x03\x04"), "a zip archive", "unzip"),
              (re.compile(rb"\xfd7zXZ\x00"), "an xz-compressed file", "unxz"),
              (re.compile(rb"\x28\xb5\x2f\xfd"), "a zstd-compressed file", "unzstd"))


def decode(path: Path, raw: bytes) -> str:
    """UTF-8 text with a leading BOM dropped; bad UTF-8 is reported with its line, and UTF-16 (with its byte-order mark,
    or without, where every other byte of its start is 0) as UTF-16."""
    packed = next(((kind, tool) for magic, kind, tool in COMPRESSED if magic.match(raw)), None)
    if packed is not None:
        raise DataFormatError(path, 1, f"expected UTF-8 text, found {packed[0]} (its first bytes): unpack it first, e.g. "
                                       f"with {packed[1]}, and give the text file")
    if looks_utf16(raw):
        raise DataFormatError(path, 1, "expected UTF-8 text, found UTF-16 (" + ("its byte-order mark" if raw[:2] in (
            b"\xff\xfe", b"\xfe\xff") else "every other byte 0") + "): convert it to UTF-8, e.g. with iconv -f UTF-16 -t UTF-8")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        at = e.start + (3 if raw.startswith(b"\xef\xbb\xbf") else 0)  # (utf-8-sig counts from after its BOM)
        line = raw[:at].count(b"\n") + 1
        found = raw[at : at + 1]
        raise DataFormatError(path, line, f"expected UTF-8 text, found byte {found!r} ({e.reason})") from None


#: where a line of a text file ends: \n, \r\n or a lone \r (old Mac files), as in the csv reader; never at U+2028,
#: NEL or a form feed, where str.splitlines would (they occur inside sentences)
LINE_END = re.compile(r"\r\n|\r|\n")


def split_lines(text: str) -> list[str]:
    """``text``'s lines, without their ends (:data:`LINE_END`)."""
    return LINE_END.split(text)


#: why a NUL in a text is refused
NUL_HINT = ("a NUL in a data file is the sign of a damaged file, or of a UTF-16 one (convert it to UTF-8, e.g. with "
            "iconv -f UTF-16 -t UTF-8)")


def check_no_nul(path: Path, line: int, text: str) -> None:
    """A line of a text file (one text per line) holding a NUL is refused naming it."""
    if "\x00" in text:
        raise DataFormatError(path, line, f"holds a NUL character ({text[:40]!r}): expected plain text; {NUL_HINT}")


def read_text(path: Path) -> str:
    return decode(path, path.read_bytes())


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` pairs, without line endings.

    Splits at ``\\n``, ``\\r\\n`` and a lone ``\\r`` only (:data:`LINE_END`): ``str.splitlines`` would also split on
    U+2028, U+0085, form feeds etc., which can occur inside a sentence and would shift every later line number.
    """
    lines = split_lines(read_text(path))
    if lines[-1] == "":  # the end of the last line, or an empty file
        lines.pop()
    yield from enumerate(lines, start=1)


def iter_records(path: Path, text: str, delimiter: str, quoting: int) -> Iterator[tuple[int, list[str]]]:
    """``(first line number, fields)`` for each csv record of ``text`` (read from ``path``).

    Blank lines are skipped. The line number is the one the record starts on, which is
    where a stray quote would be.
    """
    # a field may be as long as the file (csv's default limit, 131072 characters, refused a long text as "malformed"
    # where jsonl took it; texts are cut to --max-length anyway)
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
    # strict: a quote inside a quoted field that is not doubled, or a quoted field never closed, is refused (the
    # lenient reader dropped the quote, or ran the field on over the following lines, merging records)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, quoting=quoting, strict=True)
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            hint = ("; a field that starts with a quote runs to its closing quote, which must end the field: write a quote "
                    'inside a quoted field twice ("")' if quoting != csv.QUOTE_NONE and ('"' in str(e) or "end of data" in str(e))
                    else "")
            raise DataFormatError(path, start, f"expected a {delimiter!r}-separated record, found a malformed one ({e})"
                                  f"{hint}") from None
        if any(f.strip() for f in row):
            yield start, row


def read_delimited(path: Path, delimiter: str, quoting: int = csv.QUOTE_NONE) -> Iterator[tuple[int, list[str]]]:
    """Records of a csv/tsv file with their line numbers. With ``QUOTE_NONE`` (the GLUE and
    SemEval convention) quote characters are plain text: tweets contain unbalanced quotes."""
    return iter_records(path, read_text(path), delimiter, quoting)


def expect_header(path: Path, line: int, found: list[str], expected: list[str]) -> None:
    if [f.strip() for f in found] != expected:
        raise DataFormatError(path, line, f"expected the header {expected}, found {found}")


def label_index(names: list[str], value: str, path: Path, line: int) -> int:
    try:
        return names.index(value)
    except ValueError:
        raise DataFormatError(path, line, f"unknown label {value!r}, expected one of {names}") from None


# ----------------------------------------------------------------------------- helpers: datasets


def to_dataset(examples: list[Example], with_pair: bool) -> datasets.Dataset:
    import datasets

    features = {"text": datasets.Value("string")}
    columns: dict[str, list] = {"text": [e.text for e in examples]}
    if with_pair:
        features["text_pair"] = datasets.Value("string")
        columns["text_pair"] = [e.text_pair for e in examples]
    features["label"] = datasets.Value("int64")
    columns["label"] = [e.label for e in examples]
    return datasets.Dataset.from_dict(columns, features=datasets.Features(features))


def to_splits(splits: dict[str, list[Example]], with_pair: bool = False) -> datasets.DatasetDict:
    import datasets

    return datasets.DatasetDict({name: to_dataset(rows, with_pair) for name, rows in splits.items()})


# ----------------------------------------------------------------------------- helpers: tables

def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate: JSON's ``\\ud800`` escape, or a byte that was not UTF-8 in a
    command-line argument (Python keeps it as a surrogate): no tokenizer can read it."""
    return any("\ud800" <= c <= "\udfff" for c in text)


def check_argument_text(text: str, what: str) -> None:
    """Refuse a command-line text that is not valid UTF-8 (its bad byte named), in one line."""
    bad = next((i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff"), None)
    if bad is not None:
        c = ord(text[bad])
        byte = f"byte 0x{c - 0xDC00:02x}" if 0xDC80 <= c <= 0xDCFF else f"surrogate U+{c:04X}"
        raise UserError(f"{what} is not valid UTF-8 text ({byte} at character {bad + 1}): give the text in UTF-8 "
                        "(a terminal or file in another encoding: convert it, e.g. with iconv)")


def is_blank(text: str) -> bool:
    """Whether ``text`` holds nothing a tokenizer would keep: whitespace and invisible format characters only (a
    zero-width space, a joiner, a BOM: ``str.strip`` keeps them, and the model would label an empty text)."""
    return all(c.isspace() or unicodedata.category(c) == "Cf" for c in text)


def read_table(path: Path, fmt: str, required: list[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line, record)`` for each row of a csv (standard quoting), tsv (no quoting) or jsonl file.

    The ``required`` columns are checked against the header (csv/tsv, line 1) or each object (jsonl).
    """
    if fmt == "jsonl":
        for line, record in read_jsonl(path):
            check_columns(path, line, list(record), required)
            yield line, record
        return
    delimiter, quoting = (",", csv.QUOTE_MINIMAL) if fmt == "csv" else ("\t", csv.QUOTE_NONE)
    header: list[str] | None = None
    for line, fields in read_delimited(path, delimiter, quoting):
        if header is None:
            header = [h.strip() for h in fields]
            check_columns(path, line, header, required, fmt)
            continue
        if len(fields) != len(header):
            raise DataFormatError(path, line, f"expected {len(header)} fields ({', '.join(header)}), found {len(fields)}")
        if [f.strip() for f in fields] == header:  # files joined with cat: the second file's header is not an example
            raise DataFormatError(path, line, f"a second header row ({', '.join(header)}): expected one at line 1 only "
                                  "(files joined with cat? drop the later header lines)")
        yield line, dict(zip(header, fields))
    if header is None:
        raise DataFormatError(path, 1, "expected a header row naming the columns, found an empty file")


#: a one-column header that is another format's: (format read, separator seen, what to say)
_OTHER_SEPARATOR = (("csv", "\t", "the header is tab-separated: --task tsv reads it"),
                    ("csv", ";", "the header is ';'-separated: expected ',' between columns"),
                    ("tsv", ",", "the header is comma-separated: --task csv reads it"))


def check_columns(path: Path, line: int, found: list[str], required: list[str], fmt: str | None = None) -> None:
    """The columns ``required`` named once each in the header ``found`` (of a ``fmt`` file), else DataFormatError; a
    header of one column holding another separator is said to be of another format."""
    for column in required:
        if column not in found:
            hint = [say for f, sep, say in _OTHER_SEPARATOR if f == fmt and len(found) == 1 and sep in found[0]]
            raise DataFormatError(path, line, f"expected column {column!r}, found columns {found}"
                                  + (f" ({hint[0]})" if hint else ""))
        if found.count(column) > 1:  # a header naming it twice: which one is meant cannot be told
            raise DataFormatError(path, line, f"column {column!r} is named {found.count(column)} times in {found}: "
                                  "expected each column once")


#: where a parsed JSON object records a key given twice: no string (a key of the file's own never collides with it)
_DUPLICATE_KEY = object()


def _pairs_with_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict; a key given twice is recorded under ``_DUPLICATE_KEY`` (json keeps the last silently)."""
    record: dict[str, Any] = {}
    for key, value in pairs:
        if key in record and _DUPLICATE_KEY not in record:
            record[_DUPLICATE_KEY] = key
        record[key] = value
    return record


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for line, s in read_lines(path):
        if not s.strip():
            continue
        try:
            record = json.loads(s, object_pairs_hook=_pairs_with_keys)
        except json.JSONDecodeError as e:
            raise DataFormatError(path, line, f"invalid JSON: {e.msg.removesuffix(' at')} at column {e.colno}") from None
        except RecursionError:
            raise DataFormatError(path, line, "JSON nested too deeply to read: expected one flat JSON object of text "
                                  "fields per line") from None
        if not isinstance(record, dict):
            raise DataFormatError(path, line, f"expected a JSON object, found {type(record).__name__}")
        twice = record.pop(_DUPLICATE_KEY, None)
        lone = next((k for k, v in record.items() if isinstance(v, str) and has_surrogate(v)), None)
        if lone is not None:
            raise DataFormatError(path, line, f"the value of {lone!r} holds a lone surrogate escape (such as \\ud800): "
                                  "half of a character, not text; expected valid Unicode text")
        if twice is not None:
            raise DataFormatError(path, line, f"key {twice!r} appears twice in one object: expected each "
                                  "key once (which value is meant cannot be told)")
        yield line, record


def texts_sha256(texts) -> str:
    """The texts' fingerprint, in their order (a report's rationale lengths, an evaluation: which texts they measured)."""
    return hashlib.sha256("\n".join(texts).encode()).hexdigest()
