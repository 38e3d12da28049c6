"""A run folder is attnkit's alone: a finished run with other settings is refused and kept, --no-resume moves it aside
and never deletes, a folder that is not a run is refused, failed runs leave no empty folder, a diverged run is
refused, runs and sweeps keep to their own folders. Each test writes the user's files first and checks them byte for
byte afterwards."""

import json
from pathlib import Path

import pytest

from attnkit.cli import main
from helpers import only_stderr_line, snapshot_without_lock, two_step_train_args

pytestmark = pytest.mark.slow


def test_a_finished_run_with_other_settings_is_refused_and_kept(tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "runs"
    assert main(two_step_train_args(tiny_bert, data, out, "--attention", "sparsegen-lin", "--lam", "-2")) == 0
    before = snapshot_without_lock(out)
    capsys.readouterr()
    assert main(two_step_train_args(tiny_bert, data, out, "--attention", "softmax")) == 2
    only_stderr_line(capsys, "finished run with other settings", "--attention: 'sparsegen-lin' there, 'softmax' now",
                   "--output-dir", "--no-resume")
    assert snapshot_without_lock(out) == before
    # the same settings: nothing changes
    assert main(two_step_train_args(tiny_bert, data, out, "--attention", "sparsegen-lin", "--lam", "-2")) == 0
    printed = capsys.readouterr().out
    assert "already complete" in printed and f"metrics in {out}" in printed and "metrics written" not in printed  # (sweep -28p L)
    assert snapshot_without_lock(out) == before


def test_no_resume_moves_the_finished_run_aside_never_deletes(tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "runs"
    assert main(two_step_train_args(tiny_bert, data, out, "--attention", "sparsegen-lin", "--lam", "-2")) == 0
    before = snapshot_without_lock(out)
    assert main(two_step_train_args(tiny_bert, data, out, "--attention", "softmax", "--no-resume")) == 0
    asides = list(out.glob(".replaced-*"))
    assert len(asides) == 1
    assert snapshot_without_lock(asides[0]) == before  # the whole earlier run, byte for byte
    assert json.loads((out / "metrics.json").read_text())["attention"]["attention"] == "softmax"


def test_a_run_killed_at_its_start_cannot_pass_for_the_old_one(tiny_bert, data, tmp_path, capsys, monkeypatch):
    """--no-resume with other settings, killed as training starts: the next run must not call the old model its own."""
    import attnkit.training.finetune as ft

    out = tmp_path / "runs"
    assert main(two_step_train_args(tiny_bert, data, out, "--attention", "sparsegen-lin", "--lam", "-2")) == 0
    before = snapshot_without_lock(out)

    def killed(trainer, cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(ft, "fit", killed)
    assert main(two_step_train_args(tiny_bert, data, out, "--attention", "softmax", "--no-resume")) == 130
    monkeypatch.undo()
    assert not (out / "metrics.json").exists() and not (out / "model").exists()  # the old run is aside, whole
    assert snapshot_without_lock(next(out.glob(".replaced-*"))) == before
    capsys.readouterr()
    assert main(two_step_train_args(tiny_bert, data, out, "--attention", "softmax")) == 0
    assert "already complete" not in capsys.readouterr().out
    assert json.loads((out / "metrics.json").read_text())["attention"]["attention"] == "softmax"


def test_a_folder_that_is_not_a_run_is_refused(tiny_bert, data, tmp_path, capsys):
    mine = tmp_path / "my_documents"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    before = snapshot_without_lock(mine)
    assert main(two_step_train_args(tiny_bert, data, mine)) == 2
    only_stderr_line(capsys, str(mine), "not empty and holds no attnkit run")
    assert snapshot_without_lock(mine) == before and sorted(p.name for p in mine.iterdir()) == ["thesis.tex"]
    # a file as --output-dir
    assert main(two_step_train_args(tiny_bert, data, mine / "thesis.tex")) == 2
    only_stderr_line(capsys, "is a file")
    # an empty folder is fine
    (tmp_path / "empty").mkdir()
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "empty")) == 0


def test_failed_runs_leave_no_empty_folder(tiny_bert, tmp_path, capsys):
    out = tmp_path / "a" / "new"
    assert main(two_step_train_args(tiny_bert, tmp_path / "no-such-data", out)) == 2
    assert not (tmp_path / "a").exists()


def test_metrics_name_no_removed_folder(run):
    m = json.loads((run / "metrics.json").read_text())
    assert "best_checkpoint" not in m and m["best_step"] == 2
    for v in m.values():
        if isinstance(v, str) and str(run) in v:
            assert Path(v).exists(), v


def test_kept_checkpoints_are_named(tiny_bert, data, tmp_path):
    out = tmp_path / "kept"
    assert main(two_step_train_args(tiny_bert, data, out, "--keep-checkpoints")) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert Path(m["best_checkpoint"]).is_dir() and m["best_checkpoint"].endswith(f"checkpoint-{m['best_step']}")


@pytest.fixture
def user_run(tiny_bert, data, tmp_path):
    """A finished run of the user's, copied where commands may aim outputs at its files."""
    out = tmp_path / "user_run"
    assert main(two_step_train_args(tiny_bert, data, out)) == 0
    return out


def test_a_diverged_run_is_refused_not_reported(tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "nan"
    assert main(two_step_train_args(tiny_bert, data, out, "--lr", "1e9", "--max-steps", "4", "--eval-steps", "4")) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the training's progress bars
    assert "training diverged" in last and "lower --lr (it was 1e+09) and add --no-resume" in last
    assert not (out / "model").exists() and not (out / "metrics.json").exists()
    # the same command again resumed from the diverged checkpoint and diverged again, saying "lower --lr" every time
    # (sweep 2026-11-27g): the checkpoint is named, and the way out
    ckpts = sorted(out.glob("checkpoint-*"))
    assert ckpts
    assert main(two_step_train_args(tiny_bert, data, out, "--lr", "1e9", "--max-steps", "4", "--eval-steps", "4")) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"{ckpts[-1]} holds NaN or inf weights (e.g. " in last and "rerun with --no-resume" in last, last
    assert main(two_step_train_args(tiny_bert, data, out, "--max-steps", "4", "--eval-steps", "4", "--no-resume")) == 0
    assert (out / "model").is_dir() and list(out.glob(".replaced-*"))


def test_sweeps_and_runs_keep_to_their_own_folders(tiny_bert, data, user_run, tmp_path, capsys):
    sweep = ["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--lams", "-2", "--seeds", "1",
             "--batch-size", "16", "--lr", "3e-3", "--max-length", "16", "--max-steps", "2", "--eval-steps", "2"]
    before = snapshot_without_lock(user_run)
    assert main(sweep + ["--output-dir", str(user_run)]) == 2
    only_stderr_line(capsys, "holds a train run", "made by `attnkit train`", "not a sweep")
    assert snapshot_without_lock(user_run) == before
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "sweep.json").write_text("[]")
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "s")) == 2
    only_stderr_line(capsys, "holds an attnkit sweep, not a run")
    (tmp_path / "f.txt").write_text("mine")
    assert main(sweep + ["--output-dir", str(tmp_path / "f.txt")]) == 2
    only_stderr_line(capsys, "is a file, not a folder")
    assert main([x for x in sweep if x not in ("--seeds", "1")] + ["--seeds", "-1", "--output-dir", str(tmp_path / "s2")]) == 2
    only_stderr_line(capsys, "--seeds -1")
    assert not (tmp_path / "s2").exists()


def test_a_run_killed_between_its_metrics_and_its_tidy_up_is_tidied_when_run_again(tiny_bert, tiny_task, tmp_path, monkeypatch,
                                                                                   caplog, capsys):
    """Killed after metrics.json and before the tidy-up (as if finish_run never ran): the rerun finds the run complete,
    removes the checkpoints it wrote and draws its curves, and says so once (not also that nothing was changed:
    sweep 2026-11-27j J4); a third run changes nothing, and says so."""
    from attnkit.training import finetune
    from helpers import snapshot_without_lock, two_step_train_args

    out = tmp_path / "run"
    args = two_step_train_args(tiny_bert, tiny_task, out, "--eval-steps", "1")
    with monkeypatch.context() as m:
        m.setattr(finetune, "finish_run", lambda *a, **k: False)  # the kill: nothing after metrics.json
        assert main(args) == 0
    assert (out / "metrics.json").is_file() and list(out.glob("checkpoint-*")) and not (out / "curves.png").exists()
    caplog.clear()
    capsys.readouterr()
    assert main(args) == 0
    assert caplog.text.count("stopped after its metrics.json and before its tidy-up") == 1
    assert "nothing" not in caplog.text + capsys.readouterr().out
    assert not list(out.glob("checkpoint-*")) and (out / "curves.png").is_file() and (out / "curves.svg").is_file()
    before = snapshot_without_lock(out)
    caplog.clear()
    assert main(args) == 0
    assert "before its tidy-up" not in caplog.text and snapshot_without_lock(out) == before
    assert capsys.readouterr().out.count("already complete: nothing was changed") == 1


def test_a_run_and_a_sweep_are_found_again_from_another_working_folder(tiny_bert, data, tmp_path, capsys, monkeypatch):
    """Relative --data-dir, --model and --output-dir typed in one folder and the same folders written from another:
    the finished run and the sweep's cells are found complete (they were refused as 'other settings (--data-dir: 'd'
    there, '/…/d' now)', offering a --no-resume that would have trained them again: sweep 2026-11-28r, AE)."""
    import shutil

    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    shutil.copytree(data, work / "d")
    shutil.copytree(tiny_bert, work / "m")
    monkeypatch.chdir(work)
    assert main(two_step_train_args("m", "d", "r")) == 0
    sweep = ["sweep", "--task", "csv", "--data-dir", "d", "--model", "m", "--output-dir", "s", "--lams", "-2", "--seeds", "1",
             "--batch-size", "16", "--max-length", "16", "--max-steps", "2"]
    assert main(sweep) == 0
    before = snapshot_without_lock(work / "r"), snapshot_without_lock(work / "s")
    capsys.readouterr()
    monkeypatch.chdir(work / "sub")
    assert main(two_step_train_args("../m", "../d", "../r")) == 0
    assert "already complete" in capsys.readouterr().out
    assert main(["sweep", "--task", "csv", "--data-dir", "../d", "--model", "../m", "--output-dir", "../s", "--lams", "-2",
                 "--seeds", "1", "--batch-size", "16", "--max-length", "16", "--max-steps", "2", "--report-only"]) == 0
    assert snapshot_without_lock(work / "r") == before[0]
    assert json.loads((work / "s" / "sweep.json").read_text()) == json.loads(before[1]["sweep.json"])


def test_a_teacher_and_text_files_written_two_ways_are_one_setting(tmp_path, monkeypatch):
    """--teacher and adapt's --text-file written relative in one run and absolute in the next were 'other settings'
    (sweep 2026-11-28u DA): resolved against where each ran, as --data-dir and --model are."""
    from attnkit.training.run_folder import same_paths

    (tmp_path / "r1").mkdir()
    (tmp_path / "t.txt").write_text("a text\n")
    monkeypatch.chdir(tmp_path)
    typed = same_paths({"teacher": "r1", "text_files": ["t.txt"]}, str(tmp_path))
    assert typed == same_paths({"teacher": str(tmp_path / "r1"), "text_files": [str(tmp_path / "t.txt")]})
    assert typed != same_paths({"teacher": "r2", "text_files": ["t.txt"]}, str(tmp_path))


def test_a_run_folder_and_its_model_folder_are_one_teacher_or_model(tmp_path, monkeypatch):
    """--teacher r1 and --teacher r1/model name one model (every command takes either), but a finished run was
    refused as made with 'other settings' (sweep 2026-11-28v remark): a run folder given as a model is its model/."""
    from attnkit.training.run_folder import same_paths

    (tmp_path / "r1" / "model").mkdir(parents=True)
    (tmp_path / "r1" / "model" / "config.json").write_text("{}")
    (tmp_path / "r2").mkdir()
    monkeypatch.chdir(tmp_path)
    for k in ("teacher", "model"):
        assert same_paths({k: "r1"}, str(tmp_path)) == same_paths({k: str(tmp_path / "r1" / "model")})
        assert same_paths({k: "r1"}, str(tmp_path)) != same_paths({k: "r2"}, str(tmp_path))
    assert same_paths({"data_dir": "r1"}, str(tmp_path)) != same_paths({"data_dir": "r1/model"}, str(tmp_path))
