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
