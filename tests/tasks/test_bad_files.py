"""Data files that would be read wrongly are refused or counted: a csv header naming a column twice, a JSON line giving
a key twice, a split labelled in part, a text of invisible characters only (an empty text), a control character
inside a text."""

from __future__ import annotations

import logging

import pytest

from attnkit.errors import DataFormatError
from attnkit.tasks import load_task
from helpers import snapshot


def test_csv_header_naming_a_column_twice_is_refused(tmp_path):
    """`text,text,label`: the reader kept the second `text` column without a word."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("text,text,label\nfirst,good film,pos\nsecond,bad film,neg\n")
    (data / "dev.csv").write_text("text,text,label\nthird,good,pos\nfourth,bad,neg\n")
    before = snapshot(data)
    with pytest.raises(DataFormatError, match=r"train\.csv, line 1: column 'text' is named 2 times"):
        load_task("csv", data_dir=data)
    assert snapshot(data) == before


@pytest.mark.parametrize("fmt,sep", [("csv", ","), ("tsv", "\t")])
def test_a_second_header_row_is_refused(tmp_path, fmt, sep):
    """Two files joined with cat: the second header became an example of class 'label' (a third class)."""
    data = tmp_path / "data"
    data.mkdir()
    part = f"text{sep}label\ngood film{sep}pos\nbad film{sep}neg\n"
    (data / f"train.{fmt}").write_text(part + part.replace("text", " text"))  # (spaces around a name are no different)
    (data / f"dev.{fmt}").write_text(part)
    before = snapshot(data)
    with pytest.raises(DataFormatError, match=rf"train\.{fmt}, line 4: a second header row \(text, label\): expected one at line 1 only"):
        load_task(fmt, data_dir=data)
    assert snapshot(data) == before


def test_jsonl_object_giving_a_key_twice_is_refused(tmp_path):
    """`{"text": "a", "text": "b"}`: json keeps the last value silently."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"text": "good film", "label": "pos"}\n{"text": "a", "text": "bad film", "label": "neg"}\n')
    (data / "dev.jsonl").write_text('{"text": "good", "label": "pos"}\n{"text": "bad", "label": "neg"}\n')
    before = snapshot(data)
    with pytest.raises(DataFormatError, match=r"train\.jsonl, line 2: key 'text' appears twice"):
        load_task("jsonl", data_dir=data)
    assert snapshot(data) == before


def test_evaluating_a_split_labelled_in_part_says_how_many_lack_a_label(saved_classifier, tmp_path, capsys):
    """A test.csv with half its label fields empty: evaluate says how many rows lack a label, naming the split."""
    from attnkit.cli import main

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("text,label\ngood film,positive\nbad film,negative\n")
    (data / "dev.csv").write_text("text,label\ngood,positive\nbad,negative\n")
    (data / "test.csv").write_text("text,label\ngreat film,positive\ndull film,\nfine plot,\nawful,negative\n")
    before = snapshot(data)
    out = tmp_path / "ev.json"
    assert main(["evaluate", "--model", str(saved_classifier), "--task", "csv", "--data-dir", str(data), "--split", "test",
                 "--threads", "1", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"2 of the 4 examples of the test split of task csv in {data} have no gold label" in err, err
    assert "the first is example 2 of the split" in err  # (dull film: sweep 2026-11-28v remark)
    assert not out.exists() and snapshot(data) == before


@pytest.mark.parametrize("labels", ["in part", "none"])
def test_training_with_a_test_split_without_labels_says_so(tiny_bert, tmp_path, capsys, caplog, labels):
    """`train` skipped a test split that is not wholly labelled without a word (one empty label field in test.csv: no
    test accuracy, exit 0; sweep s24). A split labelled in part is refused before training, naming how many rows
    lack a label and the first; a wholly unlabelled one is said in one line, and the run goes on."""
    from attnkit.cli import main
    from helpers import two_step_train_args, write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data", n_train=32, n_dev=8)
    test = "text,label\ngreat film,positive\ndull film,\nfine plot,negative\n" if labels == "in part" else \
        "text\ngreat film\ndull film\n"
    (data / "test.csv").write_text(test)
    before = snapshot(data)
    out = tmp_path / "run"
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        code = main(two_step_train_args(tiny_bert, data, out, "--threads", "1"))
    err = capsys.readouterr().err
    if labels == "in part":
        assert code == 2 and not out.exists(), err
        line = [ln for ln in err.splitlines() if "error" in ln]
        assert len(line) == 1 and "1 of the 3 examples of the test split of task csv has no gold label" in line[0], err
        assert "the first is example 2 of the split" in line[0]
    else:
        assert code == 0, err
        said = [r.getMessage() for r in caplog.records if "has no labels" in r.getMessage()]
        assert said == ["the test split of task csv has no labels: it is not scored (`attnkit predict --model <run> "
                        "--split test` labels its texts)"], caplog.text
        assert "test" not in __import__("json").loads((out / "metrics.json").read_text())
    assert snapshot(data) == before


def test_a_text_of_invisible_characters_only_is_empty(saved_classifier, tmp_path, capsys):
    """A --file line holding only a zero-width space was predicted (as an empty text, exit 0): `str.strip` keeps
    U+200B. The command line, explain and training files treat it as empty too."""
    from attnkit.cli import main

    texts = tmp_path / "texts.txt"
    texts.write_text("good film\n\u200b\u2060\nbad film\n", encoding="utf-8")
    before = texts.read_bytes()
    out = tmp_path / "p.jsonl"
    assert main(["predict", "--model", str(saved_classifier), "--threads", "1", "--file", str(texts), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "texts.txt, line 2: expected one text per line, found an empty line" in err, err
    assert main(["predict", "--model", str(saved_classifier), "--threads", "1", "\u200b"]) == 2
    assert "text 1 of the command line is empty" in capsys.readouterr().err
    assert not out.exists() and texts.read_bytes() == before
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("text,label\ngood film,positive\n\ufeff\u200b,negative\n", encoding="utf-8")
    (data / "dev.csv").write_text("text,label\ngood,positive\nbad,negative\n")
    with pytest.raises(DataFormatError, match=r"train\.csv, line 3: expected text in 'text', found an empty value"):
        load_task("csv", data_dir=data)


@pytest.mark.parametrize("fmt, write, where, needles", [
    ("csv", lambda d: (d / "train.csv").write_text("text,label\ngood film,pos\na\x00delight,neg\n"),
     r"train\.csv, line 3: the text in 'text' holds the control character U\+0000 at character 2 \('a\\x00delight'\)",
     ["a NUL in a data file is the sign of a damaged file, or of a UTF-16 one"]),
    ("tsv", lambda d: (d / "dev.tsv").write_text("text\tlabel\ngood\tpos\n  bad\x0cfilm\tneg\n"),
     r"dev\.tsv, line 3: the text in 'text' holds the control character U\+000C at character 6",
     ["the tokenizer would drop it and read the words on either side as one"]),
    ("jsonl", lambda d: (d / "train.jsonl").write_text('{"text": "good", "pair": "fine", "label": "pos"}\n'
                                                      '{"text": "bad", "pair": "dull\\u0007film", "label": "neg"}\n'),
     r"train\.jsonl, line 2: the text in 'pair' holds the control character U\+0007 at character 5",
     ["expected plain text (no control characters but tab and line breaks)"]),
], ids=["nul-csv", "form-feed-tsv", "bel-jsonl-pair"])
def test_a_control_character_inside_a_text_is_refused(tmp_path, fmt, write, where, needles):
    """A NUL or other control character inside a text was dropped by the tokenizer without a word, joining the words
    around it ("a<NUL>delight" trained on as "adelight"): refused naming file, line, field and character. Tabs inside a
    text and controls at its ends (stripped) are no matter."""
    data = tmp_path / "data"
    data.mkdir()
    rows = {"csv": "text,label\ngood\tfilm,pos\nbad film\x0b,neg\n", "tsv": "text\tlabel\ngood film\x0c\tpos\nbad\tneg\n",
            "jsonl": '{"text": "good", "pair": "fine\\tfilm", "label": "pos"}\n{"text": "bad", "pair": "dull", "label": "neg"}\n'}[fmt]
    (data / f"train.{fmt}").write_text(rows)
    (data / f"dev.{fmt}").write_text(rows.replace("good", "great"))
    options = {"text_pair_column": "pair"} if fmt == "jsonl" else {}
    assert load_task(fmt, data_dir=data, **options).splits["train"].num_rows == 2  # clean files load
    write(data)
    before = snapshot(data)
    with pytest.raises(DataFormatError, match=where) as e:
        load_task(fmt, data_dir=data, **options)
    assert len(str(e.value).splitlines()) == 1 and all(n in str(e.value) for n in needles), e.value
    assert snapshot(data) == before


def test_training_on_a_file_with_a_nul_in_a_text_is_refused_in_one_line(tiny_bert, tmp_path, capsys):
    """The sweep's case: `attnkit train` on a train.csv row "a<NUL>delight 5,pos" trained (exit 0) on "adelight"."""
    from attnkit.cli import main
    from helpers import only_stderr_line, two_step_train_args, write_csv_task

    d = write_csv_task(tmp_path / "d", [("good film", "pos"), ("a\x00delight 5", "pos"), ("bad film", "neg")],
                       [("dull film", "neg"), ("fine", "pos")])
    assert main(two_step_train_args(tiny_bert, d, tmp_path / "o")) == 2
    only_stderr_line(capsys, f"{d / 'train.csv'}, line 3: the text in 'text' holds the control character U+0000",
                     "damaged file, or of a UTF-16 one")
    assert not (tmp_path / "o" / "model").exists()


def test_a_truncated_json_line_is_named_in_plain_words(tmp_path):
    """json's "Unterminated string starting at" was printed as "... starting at at column 21"."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"text": "good film", "label": "pos"}\n{"text": "bad fi')
    (data / "dev.jsonl").write_text('{"text": "good", "label": "pos"}\n')
    with pytest.raises(DataFormatError, match=r"train\.jsonl, line 2: invalid JSON: Unterminated string starting at column 10$"):
        load_task("jsonl", data_dir=data)
