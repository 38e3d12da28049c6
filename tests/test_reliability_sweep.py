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


def test_an_output_that_is_a_device_or_pipe_is_refused_not_replaced(tmp_path):
    """`predict --output /dev/full` renamed a file over the device node (and left a ledger in /dev); a FIFO stands in
    for the device here."""
    import os
    import stat

    from attnkit.errors import UserError
    from attnkit.runfiles import check_output_file, write_json_atomic, write_text_atomic

    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match=r"--output cannot write .*out\.jsonl: it is a device, pipe or socket"):
        check_output_file(fifo, "--output")
    for write in (lambda: write_text_atomic(fifo, "x\n"), lambda: write_json_atomic(fifo, {"a": 1})):
        with pytest.raises(UserError, match=r"out\.jsonl: it is a device, pipe or socket"):
            write()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]  # no temporary file, no ledger
