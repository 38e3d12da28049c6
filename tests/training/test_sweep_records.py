"""A sweep's record files are attnkit's: a hand-written sweep.json is refused and kept, a hand-written cell record is
named."""

import pytest

from attnkit.cli import main
from helpers import error_line, four_step_train_args, snapshot_without_lock

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("text", ['{"mine": 1}', '[{"lam": -2}]', "not json at all", '[1, 2]',
                                  '[{"lam": -2, "seed": 1, "metric": "accuracy", "dev": "0.5", "test": null, '
                                  '"mean_support": 1.0, "run_dir": "x"}]'])
def test_a_hand_written_sweep_json_is_refused_and_kept(tiny_bert, data, tmp_path, capsys, text):
    s = tmp_path / "s"
    s.mkdir()
    (s / "sweep.json").write_text(text)
    before = snapshot_without_lock(s)
    sweep = ["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(s), "--lams", "-2",
             "--seeds", "1", "--batch-size", "16", "--max-length", "16", "--max-steps", "2"]
    assert main(sweep) == 2
    error_line(capsys, str(s / "sweep.json"))
    assert main(sweep + ["--report-only"]) == 2
    error_line(capsys, str(s / "sweep.json"))
    # nor is it taken for a sweep by train: a folder of the user's
    assert main(four_step_train_args(tiny_bert, data, s)) == 2
    error_line(capsys, "holds no attnkit run")
    assert snapshot_without_lock(s) == before


@pytest.mark.parametrize("text", ["{}", "not json", '{"seed": 1, "metric": "accuracy", "dev": "0.5", "test": null, '
                                  '"mean_support": 1.0, "run_dir": "x"}'])
def test_a_hand_written_sweep_cell_record_is_named(tiny_bert, data, tmp_path, capsys, text):
    cell = tmp_path / "s" / "softmax_seed1"
    cell.mkdir(parents=True)
    (cell / "sweep_cell.json").write_text(text)
    before = snapshot_without_lock(tmp_path / "s")
    assert main(["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(tmp_path / "s"),
                 "--lams", "-2", "--seeds", "1", "--batch-size", "16", "--max-length", "16", "--max-steps", "2"]) == 2
    error_line(capsys, str(cell / "sweep_cell.json"), "not")
    assert snapshot_without_lock(tmp_path / "s") == before
