"""Issue 36, the fresh sweep of bad inputs: each case that the sweep found wrong, fixed, with the user's files
written first and checked byte for byte afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnkit.errors import DataFormatError
from attnkit.tasks import load_task


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_csv_header_naming_a_column_twice_is_refused(tmp_path):
    """`text,text,label`: the reader kept the second `text` column without a word."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("text,text,label\nfirst,good film,pos\nsecond,bad film,neg\n")
    (data / "dev.csv").write_text("text,text,label\nthird,good,pos\nfourth,bad,neg\n")
    before = _snapshot(data)
    with pytest.raises(DataFormatError, match=r"train\.csv, line 1: column 'text' is named 2 times"):
        load_task("csv", data_dir=data)
    assert _snapshot(data) == before


def test_jsonl_object_giving_a_key_twice_is_refused(tmp_path):
    """`{"text": "a", "text": "b"}`: json keeps the last value silently."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"text": "good film", "label": "pos"}\n{"text": "a", "text": "bad film", "label": "neg"}\n')
    (data / "dev.jsonl").write_text('{"text": "good", "label": "pos"}\n{"text": "bad", "label": "neg"}\n')
    before = _snapshot(data)
    with pytest.raises(DataFormatError, match=r"train\.jsonl, line 2: key 'text' appears twice"):
        load_task("jsonl", data_dir=data)
    assert _snapshot(data) == before
