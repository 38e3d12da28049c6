"""Labels that cannot mean what they say are refused in one line: one class only, one number written two ways, control
characters, labels that differ only in case; empty texts at prediction are refused too."""

import pytest

from attnkit.cli import main
from helpers import only_stderr_line, two_step_train_args, write_csv_task

pytestmark = pytest.mark.slow


def test_training_data_with_one_class_is_refused(tiny_bert, tmp_path, capsys):
    d = write_csv_task(tmp_path / "d", [("good film", "pos")] * 10, [("bad film", "pos")] * 4)
    assert main(two_step_train_args(tiny_bert, d, tmp_path / "o")) == 2
    only_stderr_line(capsys, "one class only", "'pos'")


def test_one_number_written_two_ways_is_refused(tiny_bert, tmp_path, capsys):
    d = write_csv_task(tmp_path / "d", [("good film", "1"), ("bad film", "0"), ("fine film", "1.0")], [("dull film", "0")])
    assert main(two_step_train_args(tiny_bert, d, tmp_path / "o")) == 2
    only_stderr_line(capsys, "train.csv, line 4", "'1.0'", "'1' on line 2")


def test_control_characters_in_labels_are_refused(tiny_bert, tmp_path, capsys):
    d = write_csv_task(tmp_path / "d", [("good film", "po\x0bs"), ("bad film", "neg")], [("dull film", "neg")])
    assert main(two_step_train_args(tiny_bert, d, tmp_path / "o")) == 2
    only_stderr_line(capsys, "train.csv, line 2", "control character")


def test_empty_texts_at_prediction_are_refused(run, tmp_path, capsys):
    assert main(["predict", "--model", str(run), "good", "   "]) == 2
    only_stderr_line(capsys, "text 2", "empty")
    f = tmp_path / "t.txt"
    f.write_text("good film\n\nbad film\n\n")
    assert main(["predict", "--model", str(run), "--file", str(f)]) == 2
    only_stderr_line(capsys, f"{f}, line 2", "empty line")
    f.write_text("good film\nbad film\n\n\n")  # blank lines at the end are not texts
    assert main(["predict", "--model", str(run), "--file", str(f)]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2


def test_labels_that_differ_only_in_case_are_refused(tiny_bert, tmp_path, capsys):
    d = write_csv_task(tmp_path / "d", [("good film", "Positive"), ("bad film", "negative"), ("fine film", "positive")], [("dull", "negative")])
    assert main(two_step_train_args(tiny_bert, d, tmp_path / "o")) == 2
    only_stderr_line(capsys, "train.csv, line 4", "differs only in case")


@pytest.mark.parametrize("labels,needle", [
    (["0.0", "0.5", "1.0"], "label '0.5' is a fraction"),
    (["neg", "pos", "1"], "the labels mix names and numbers"),
    (["neg", "pos", "nan"], "label 'nan' is not a finite number"),
])
def test_scores_and_mixed_labels_are_not_made_classes(tiny_bert, tmp_path, capsys, labels, needle):
    rows = [(f"text number {i}", labels[i % len(labels)]) for i in range(12)]
    d = write_csv_task(tmp_path / "d", rows, rows[:4])
    assert main(two_step_train_args(tiny_bert, d, tmp_path / "o")) == 2
    only_stderr_line(capsys, needle, "train.csv")


@pytest.mark.parametrize("value,needle", [("[0]", "found list [0]"), ("true", "found bool true"), ("{\"a\": 1}", "found dict")])
def test_a_jsonl_label_that_is_not_a_name_or_number_is_refused(tiny_bert, tmp_path, capsys, value, needle):
    import json

    d = tmp_path / "d"
    d.mkdir()
    good = [json.dumps({"text": f"text {i}", "label": ["neg", "pos"][i % 2]}) for i in range(12)]
    (d / "train.jsonl").write_text("\n".join(good[:5] + ['{"text": "odd one", "label": ' + value + "}"] + good[5:]) + "\n")
    (d / "dev.jsonl").write_text("\n".join(good[:4]) + "\n")
    args = [a if a != "csv" else "jsonl" for a in two_step_train_args(tiny_bert, d, tmp_path / "o")]
    assert main(args) == 2
    only_stderr_line(capsys, "train.jsonl", "line 6", needle)


def test_labels_that_differ_only_in_their_unicode_form_are_refused(tiny_bert, tmp_path, capsys):
    import unicodedata

    nfc, nfd = unicodedata.normalize("NFC", "café"), unicodedata.normalize("NFD", "café")
    d = write_csv_task(tmp_path / "d", [("good film", nfc), ("bad film", "thé"), ("fine film", nfd)], [("dull", "thé")])
    assert main(two_step_train_args(tiny_bert, d, tmp_path / "o")) == 2
    only_stderr_line(capsys, "train.csv, line 4", "differs only in how its accents are encoded")


def test_a_text_a_model_cannot_read_is_refused_where_it_is_read(tiny_bert, tmp_path, capsys):
    """A lone combining mark (nothing a tokenizer keeps): trained on as [CLS][SEP] before; now refused with its line."""
    d = write_csv_task(tmp_path / "d", [("good film", "pos"), ("\u0301", "neg"), ("bad film", "neg")], [("dull", "neg")])
    assert main(two_step_train_args(tiny_bert, d, tmp_path / "o")) == 2
    only_stderr_line(capsys, "train.csv, line 3", "no letter, digit, punctuation or symbol")


def test_a_lone_surrogate_in_jsonl_is_refused_with_its_file_and_line(tiny_bert, tmp_path, capsys):
    import json

    d = tmp_path / "js"
    d.mkdir()
    (d / "train.jsonl").write_text("".join(json.dumps({"text": f"film {i}" + ("\ud800" if i == 3 else ""), "label": i % 2}) + "\n"
                                           for i in range(10)))
    (d / "dev.jsonl").write_text("".join(json.dumps({"text": f"d {i}", "label": i % 2}) + "\n" for i in range(4)))
    args = two_step_train_args(tiny_bert, d, tmp_path / "o")
    args[args.index("csv")] = "jsonl"
    assert main(args) == 2
    only_stderr_line(capsys, "train.jsonl, line 4", "lone surrogate")


def test_a_command_line_text_that_is_not_utf8_is_refused_in_one_line(run, tmp_path, capsys):
    bad = b"caf\xe9 film".decode("utf-8", "surrogateescape")  # what Python makes of a latin-1 argument
    assert main(["predict", "--model", str(run), "good", bad]) == 2
    only_stderr_line(capsys, "text 2 of the command line is not valid UTF-8", "byte 0xe9 at character 4")
    assert main(["explain", "--model", str(run), bad, "--output", str(tmp_path / "x.png")]) == 2
    only_stderr_line(capsys, "the text to explain is not valid UTF-8")
    assert not (tmp_path / "x.png").exists()
