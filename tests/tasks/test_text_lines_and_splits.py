"""Texts and splits are read as written: a --file splits at line ends only (\\n, \\r\\n, a lone \\r) and gives one
prediction per line; a dev or test split that is the train split again (a link, a copy, shuffled) is refused."""

import json
import os
import random
import shutil
from pathlib import Path

import pytest

from attnkit.cli import main
from helpers import one_line_error, snapshot


def test_read_text_file_splits_at_line_ends_only(tmp_path):
    from attnkit.analysis.inference import read_text_file

    f = tmp_path / "texts.txt"
    f.write_bytes("\ufeffgood film\u2028bad plot\r\nthe actor\x85is\x0cgreat\nold\rmac\n\n".encode("utf-8"))
    # a lone \r ends a line, as in the csv reader (an old Mac file was two texts read as one: sweep 2026-11-28r, AA)
    assert read_text_file(f) == ["good film\u2028bad plot", "the actor\x85is\x0cgreat", "old", "mac"]
    mac = tmp_path / "mac.txt"
    mac.write_bytes(b"good film\rbad film\r")
    assert read_text_file(mac) == ["good film", "bad film"]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xef\xbb\xbfgood\nfine\n\xff\n")
    with pytest.raises(ValueError, match="line 3"):  # counted in the file, its BOM included
        read_text_file(bad)


def test_predict_file_gives_one_prediction_per_line(sparsemax_classifier, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_bytes("good film\u2028bad plot\r\nthe actor\x85is\x0cgreat\n".encode("utf-8"))
    before = texts.read_bytes()
    out = tmp_path / "pred.jsonl"
    assert main(["predict", "--model", str(sparsemax_classifier), "--file", str(texts), "--output", str(out), "--threads", "1"]) == 0
    rows = [json.loads(line) for line in out.read_bytes().decode("utf-8").split("\n") if line]  # JSON lines end at \n
    assert [r["text"] for r in rows] == ["good film\u2028bad plot", "the actor\x85is\x0cgreat"]
    assert texts.read_bytes() == before


def test_predict_file_names_the_files_line_and_refuses_utf16_and_nul(sparsemax_classifier, tmp_path, capsys):
    """A line of --file the model cannot read is named by the file's line, not by its place among all texts; UTF-16
    (with or without its byte-order mark) and a NUL are refused naming the file, with the way out (sweep 2026-11-28r,
    AB)."""
    run = ["predict", "--model", str(sparsemax_classifier), "--threads", "1"]
    ctl = tmp_path / "ctl.txt"
    ctl.write_bytes(b"good film\n\x01\x02\n")
    assert main(run + ["--file", str(ctl), "nice one"]) == 2
    assert one_line_error(capsys).startswith(f"attnkit predict: error: {ctl}, line 2 ('\\x01\\x02') holds no token")
    for name, data, said in (("le.txt", "good film\nbad film\n".encode("utf-16-le"), "every other byte 0"),
                             ("bom.txt", "good film\nbad film\n".encode("utf-16"), "its byte-order mark"),
                             ("nul.txt", b"good film\nbad\x00 film\n", "line 2: holds a NUL character")):
        f = tmp_path / name
        f.write_bytes(data)
        out = tmp_path / f"{name}.jsonl"
        assert main(run + ["--file", str(f), "--output", str(out)]) == 2, name
        line = one_line_error(capsys)
        assert str(f) in line and said in line and "iconv -f UTF-16 -t UTF-8" in line, line
        assert not out.exists() and f.read_bytes() == data


def test_data_files_in_utf16_are_named_as_such(tmp_path):
    """A csv task's file in UTF-16 without a byte-order mark is refused as UTF-16 (its header was reported as columns
    't\\x00e\\x00x\\x00t\\x00'); so is an adapt --text-file, whose lone \\r also ends a line."""
    from attnkit.errors import DataFormatError
    from attnkit.tasks import load_task
    from attnkit.training.adapt import read_text_file as adapt_lines

    d = tmp_path / "d"
    d.mkdir()
    (d / "train.csv").write_bytes("text,label\ngood film,1\nbad film,0\n".encode("utf-16-le"))
    (d / "dev.csv").write_text("text,label\nfine film,1\n")
    with pytest.raises(DataFormatError, match=r"train\.csv, line 1: expected UTF-8 text, found UTF-16 \(every other byte 0\)"):
        load_task("csv", d)
    t = tmp_path / "t.txt"
    t.write_bytes(b"good film\rbad film\r\rthe end\n")
    assert adapt_lines(t) == ["good film", "bad film", "the end"]
    t.write_bytes(b"good film\nbad\x00film\n")
    with pytest.raises(DataFormatError, match=r"t\.txt, line 2: holds a NUL character"):
        adapt_lines(t)


def _link(d: Path) -> None:
    (d / "dev.csv").unlink()
    (d / "dev.csv").symlink_to("train.csv")


def _hard_link(d: Path) -> None:
    (d / "dev.csv").unlink()
    os.link(d / "train.csv", d / "dev.csv")


def _copy(d: Path) -> None:
    shutil.copy(d / "train.csv", d / "dev.csv")


def _shuffled(d: Path) -> None:
    head, *rows = (d / "train.csv").read_text().splitlines(keepends=True)
    random.Random(0).shuffle(rows)
    (d / "dev.csv").write_text(head + "".join(rows))


def _test_copy(d: Path) -> None:
    shutil.copy(d / "train.csv", d / "test.csv")


@pytest.mark.parametrize("make,needles", [
    (_link, ["dev.csv (validation split) is", "train.csv (train split) again (a link to it)"]),
    (_hard_link, ["dev.csv (validation split) is", "train.csv (train split) again (the same file)"]),
    (_copy, ["dev.csv holds the same 96 examples as", "train.csv"]),
    (_shuffled, ["dev.csv holds the same 96 examples as", "train.csv"]),
    (_test_copy, ["test.csv holds the same 96 examples as", "train.csv"]),
])
def test_a_split_that_is_train_again_is_refused(make, needles, tiny_bert, tiny_task, tmp_path, capsys):
    make(tiny_task)
    before = snapshot(tiny_task)
    out = tmp_path / "run"
    assert main(["train", "--task", "csv", "--data-dir", str(tiny_task), "--model", str(tiny_bert), "--output-dir", str(out),
                 "--max-steps", "1"]) == 2
    line = one_line_error(capsys, *needles, "scores on training examples")
    assert str(tiny_task) in line  # both files named with their folder
    assert not out.exists() and snapshot(tiny_task) == before


def test_the_train_file_named_as_the_dev_file_is_refused(tiny_task):
    from attnkit.errors import UserError
    from attnkit.tasks import load_task

    with pytest.raises(UserError, match=r"train\.csv \(validation split\) is .*train\.csv \(train split\) again \(the same file\)"):
        load_task("csv", tiny_task, validation_file="train.csv")
    assert len(load_task("csv", tiny_task).splits["validation"]) == 32


def test_a_task_whose_splits_are_identical_is_refused(tiny_bert, tmp_path, capsys):
    from attnkit.errors import UserError
    from attnkit.tasks import load_task

    for split in ("train", "dev", "test"):
        d = tmp_path / "sentube" / "auto" / split
        d.mkdir(parents=True)
        (d / "pos.txt").write_text("a good car\nnice engine\n")
        (d / "neg.txt").write_text("a bad car\n" if split != "test" else "a dull car\n")
    before = snapshot(tmp_path)
    with pytest.raises(UserError, match="the validation split of task sentube-auto holds the same 3 examples as the train split"):
        load_task("sentube-auto", tmp_path)
    out = tmp_path / "run"
    assert main(["train", "--task", "sentube-auto", "--data-dir", str(tmp_path), "--model", str(tiny_bert), "--output-dir",
                 str(out), "--max-steps", "1"]) == 2
    one_line_error(capsys, "validation split of task sentube-auto", "scores on training examples", str(tmp_path))
    assert not out.exists() and snapshot(tmp_path) == before
    (tmp_path / "sentube" / "auto" / "dev" / "neg.txt").write_text("an awful car\n")  # its own examples: read
    assert len(load_task("sentube-auto", tmp_path).splits["validation"]) == 3


def test_a_csv_or_tsv_text_longer_than_csvs_default_field_limit_is_read(tmp_path):
    """A text of 200,000 characters in a csv or tsv file is read as the same text in jsonl is (csv's default field
    limit, 131072, refused it as 'a malformed record': sweep 2026-11-28r, AC)."""
    from attnkit.tasks import load_task

    long = "word " * 40_000
    for fmt, sep in (("csv", ","), ("tsv", "\t")):
        d = tmp_path / fmt
        d.mkdir()
        (d / f"train.{fmt}").write_text(f"text{sep}label\ngood film{sep}1\n{long.strip()}{sep}0\n")
        (d / f"dev.{fmt}").write_text(f"text{sep}label\nfine film{sep}1\n")
        train = load_task(fmt, d).splits["train"]
        assert list(train["text"]) == ["good film", long.strip()]


def test_deeply_nested_jsonl_utf16_json_and_odd_keys_are_read_or_named(tmp_path):
    """A jsonl line nested thousands deep ended in 'internal error (RecursionError)' (sweep 2026-11-28s BB); a JSON
    file in UTF-16 was 'not valid JSON' (BD): each is one line naming the file. A key of the file's own that spells the
    reader's old duplicate marker is an ordinary key."""
    from attnkit.errors import DataFormatError
    from attnkit.runfiles.json_files import read_json
    from attnkit.tasks.readers import read_jsonl

    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"text": "good film", "label": 1}\n{"text": ' + "[" * 100_000 + "]" * 100_000 + ', "label": 0}\n')
    with pytest.raises(DataFormatError, match=r"deep\.jsonl, line 2: JSON nested too deeply to read: expected one flat JSON object"):
        list(read_jsonl(deep))
    for encoding in ("utf-16", "utf-16-le"):
        f = tmp_path / f"{encoding}.json"
        f.write_bytes(json.dumps({"data": [], "version": "1.1"}).encode(encoding))
        with pytest.raises(DataFormatError, match=rf"{encoding}\.json, line 1: expected .* in UTF-8, found UTF-16 text: "
                                                  "convert it to UTF-8, e.g. with iconv"):
            read_json(f, "a SQuAD file")
    zeros = tmp_path / "zeros.json"
    zeros.write_bytes(b"\0" * 64)  # a damaged file of zeros is no UTF-16 text
    with pytest.raises(DataFormatError, match="not valid JSON"):
        read_json(zeros)
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"text": "good film", "label": 1, "\\u0000duplicate-key": "x"}\n')
    assert [r for _, r in read_jsonl(odd)] == [{"text": "good film", "label": 1, "\0duplicate-key": "x"}]
