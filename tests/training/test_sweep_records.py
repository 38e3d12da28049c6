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


@pytest.mark.parametrize("layout", ["notes", "file"])
def test_a_users_folder_named_as_a_cell_is_not_a_sweep(tiny_bert, data, tmp_path, capsys, layout):
    """A folder of the user's holding a folder merely named as a cell (`lam-2_seed1/` with notes in it) was taken for a
    sweep: the softmax cell trained into it and the reports were written beside the user's files, and the clash came
    after, naming an --output-dir the user never gave (sweep 2026-11-27j J5). Refused before anything is written; and
    in a real sweep's folder, a folder of the user's where a new cell goes is refused before any cell trains."""
    s = tmp_path / "s"
    s.mkdir()
    if layout == "notes":
        (s / "lam-2_seed1").mkdir()
        (s / "lam-2_seed1" / "notes.txt").write_text("mine")
    else:
        (s / "lam-2_seed1").write_text("mine")
    before = snapshot_without_lock(s)
    sweep = ["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--seeds", "1", "--batch-size",
             "16", "--max-length", "16", "--max-steps", "2", "--lams", "-2"]
    assert main([*sweep, "--output-dir", str(s)]) == 2
    error_line(capsys, f"--output-dir {s} is not empty and holds no attnkit sweep")
    assert snapshot_without_lock(s) == before and {p.name for p in s.iterdir()} == {"lam-2_seed1"}
    real = tmp_path / "real"
    assert main([*sweep, "--output-dir", str(real)]) == 0
    mine = real / "lam-3_seed1"
    if layout == "notes":
        mine.mkdir()
        (mine / "notes.txt").write_text("mine")
    else:
        mine.write_text("mine")
    before = snapshot_without_lock(real)
    assert main([*sweep, "-3", "--output-dir", str(real)]) == 2
    error_line(capsys, f"{mine}, where this sweep's cell lam -3, seed 1 goes, "
               + ("holds files and no attnkit run" if layout == "notes" else "is a file, not a folder"))
    assert snapshot_without_lock(real) == before


def test_a_sweep_on_data_edited_since_its_cells_trained_is_refused(tiny_bert, data, tmp_path, capsys, caplog):
    """A sweep run again after its training file was edited reused every finished cell, trained on the old data, with no
    word (and trained the new cells on the new data, in one report: sweep 2026-11-27j J1). A reused cell is compared
    with the data (and --model) named now: from its run's record, or, its folder gone, the data's fingerprint in its
    sweep record. A train into a finished run on edited data says so in one line and keeps the run."""
    import shutil

    mine = tmp_path / "d"
    shutil.copytree(data, mine)
    s = tmp_path / "s"
    sweep = ["sweep", "--task", "csv", "--data-dir", str(mine), "--model", str(tiny_bert), "--output-dir", str(s),
             "--lams", "-2", "--seeds", "1", "--batch-size", "16", "--max-length", "16", "--max-steps", "2"]
    assert main(sweep) == 0
    assert main(four_step_train_args(tiny_bert, mine, tmp_path / "t")) == 0
    train = mine / "train.csv"
    rows = train.read_text()
    first = rows.splitlines()[1]
    train.write_text(rows.replace(first, first.rsplit(",", 1)[0] + ("," + ("negative" if first.endswith("positive") else "positive")), 1))
    before = snapshot_without_lock(s)
    assert main(sweep) == 2
    error_line(capsys, f"sweep cell softmax_seed1 in {s} was trained on other inputs than those named now (the examples of "
               f"task csv in --data-dir {mine} are not those the run started from")
    assert snapshot_without_lock(s) == before
    caplog.clear()
    assert main(four_step_train_args(tiny_bert, mine, tmp_path / "t")) == 0
    assert f"the run in {tmp_path / 't'} was made from other inputs than those named now" in caplog.text
    aside = tmp_path / "aside"
    aside.mkdir()
    for cell in ("softmax_seed1", "lam-2_seed1"):
        (s / cell).rename(aside / cell)  # sweep.json is all there is of them now
    assert main(sweep) == 2
    error_line(capsys, f"sweep cell softmax_seed1 in {s} was trained on other inputs", "other examples of task csv")
    train.write_text(rows)  # restored
    assert main(sweep) == 0


def test_a_sweep_of_learned_lam_says_the_values_are_starts(tiny_bert, data, tmp_path, capsys):
    """`sweep --lams 0.5 --learn-lam`: each cell learns lam per layer and head, yet the report read as a sweep of fixed
    lams, without a word (sweep 2026-11-27m M2). It says so on the console and in sweep.md's title."""
    s = tmp_path / "s"
    assert main(["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(s),
                 "--lams", "0.5", "--learn-lam", "--seeds", "1", "--batch-size", "16", "--max-length", "16",
                 "--max-steps", "1"]) == 0
    assert "--learn-lam: each cell learns lam per layer and head; the swept values are where it starts" in capsys.readouterr().out
    assert "(its start: lam learned per layer and head)" in (s / "sweep.md").read_text()


def test_a_sweep_cell_is_the_sweeps_to_train_and_a_replaced_cell_is_refused(tiny_bert, data, tmp_path, capsys):
    """train refused a cell's folder only as 'a finished run with other settings', offering --no-resume; following it
    put another run under the cell's name, and the next sweep reused the cell's record and drew that run's attention
    as the cell's (sweep 2026-11-28r, AD). Now train refuses a sweep's cell, and a sweep whose cell folder holds a run
    without the cell's record refuses, naming it, with every file as it was."""
    s = tmp_path / "s"
    sweep = ["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(s), "--lams", "-2",
             "--seeds", "1", "--batch-size", "16", "--max-length", "16", "--max-steps", "2"]
    assert main(sweep) == 0
    capsys.readouterr()
    before = snapshot_without_lock(s)
    for extra in ([], ["--no-resume"]):
        assert main(four_step_train_args(tiny_bert, data, s / "softmax_seed1") + extra) == 2
        error_line(capsys, f"is a cell of the sweep in {s}", "attnkit sweep")
    assert snapshot_without_lock(s) == before
    # the cell's record gone (as a --no-resume that moved it aside left it): the sweep refuses, naming the folder
    (s / "softmax_seed1" / "sweep_cell.json").rename(tmp_path / "kept.json")
    before = snapshot_without_lock(s)
    assert main(sweep) == 2
    error_line(capsys, f"{s / 'softmax_seed1'} holds a run that is not the cell softmax_seed1")
    assert snapshot_without_lock(s) == before
