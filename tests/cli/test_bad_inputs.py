"""Outputs and options that would misbehave are refused in one line naming the way out: an output that is a device or
pipe, an output in a busy run folder, --sparse-layers spelt with spaces or capitals, distillation options without a
teacher, a read-only or full disk. The user's files are checked byte for byte afterwards."""

from __future__ import annotations


import pytest

from helpers import snapshot


def test_an_output_that_is_a_device_or_pipe_is_refused_not_replaced(tmp_path):
    """`predict --output /dev/full` renamed a file over the device node (and left a ledger in /dev); a FIFO stands in
    for the device here."""
    import os
    import stat

    from attnkit.errors import UserError
    from attnkit.runfiles.ownership import check_output_file
    from attnkit.runfiles.atomic import write_json_atomic, write_text_atomic

    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match=r"--output cannot write .*out\.jsonl: it is a device, pipe or socket"):
        check_output_file(fifo, "--output")
    for write in (lambda: write_text_atomic(fifo, "x\n"), lambda: write_json_atomic(fifo, {"a": 1})):
        with pytest.raises(UserError, match=r"out\.jsonl: it is a device, pipe or socket"):
            write()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]  # no temporary file, no ledger


@pytest.mark.parametrize("command", ["predict", "explain", "evaluate"])
def test_an_output_under_a_broken_symlink_or_ending_in_a_slash_is_refused_in_one_line(saved_classifier, tiny_task, tmp_path,
                                                                                     capsys, command):
    """`--output ln/p.jsonl` where `ln` points to a folder since removed failed as "File exists"; `--output pdir/` wrote
    a file named `pdir` (sweep 2026-11-27j J2, J3). Both are refused naming the path, and nothing is made."""
    import os

    from attnkit.cli import main
    from helpers import one_line_error

    os.symlink(tmp_path / "gone", tmp_path / "ln")
    suffix = {"predict": ".jsonl", "explain": ".png", "evaluate": ".json"}[command]
    args = {"predict": ["x"], "explain": ["x"], "evaluate": ["--data-dir", str(tiny_task)]}[command]
    before = sorted(p.name for p in tmp_path.iterdir())
    out = tmp_path / "ln" / "sub" / f"p{suffix}"
    assert main([command, "--model", str(saved_classifier), "--output", str(out), *args]) == 2
    one_line_error(capsys, f"{tmp_path / 'ln'} is a broken symlink (it points to {tmp_path / 'gone'}, which does not exist)")
    if command == "predict":
        assert main([command, "--model", str(saved_classifier), "--output", f"{tmp_path / 'pdir'}/", *args]) == 2
        one_line_error(capsys, f"--output {tmp_path / 'pdir'}/ names a folder (it ends in '/'): expected a file name")
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not (tmp_path / "gone").exists()


def test_an_output_into_a_busy_run_folder_names_the_way_out_of_the_command_used(saved_classifier, tmp_path, capsys):
    """`predict --output run/preds.jsonl` while a training run holds `run/`: the refusal said "pick another
    --output-dir", an option predict does not have."""
    from attnkit.cli import main
    from attnkit.runfiles.names import RUN_RECORD
    from attnkit.runfiles.lock import folder_lock

    run = tmp_path / "run"
    run.mkdir()
    (run / RUN_RECORD).write_text("{}\n")
    (run / "notes.txt").write_text("mine\n")
    before = snapshot(run)
    out = run / "preds.jsonl"
    with folder_lock(run):
        assert main(["predict", "--model", str(saved_classifier), "--threads", "1", "good film", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "another attnkit process is writing" in err, err
    assert f"write {out} outside that folder" in err and "--output-dir" not in err, err
    snap = snapshot(run)
    snap.pop(".attnkit.lock", None)
    assert snap == before


@pytest.mark.parametrize("command", ["train", "adapt"])
def test_sparse_layers_are_recorded_without_spaces_or_case(command):
    """`adapt --sparse-layers ' last'` was recorded as ' last', so the same command with 'last' was refused as a run
    with other settings."""
    from attnkit.cli.parser import build_parser

    parser = build_parser()
    for given in (" last", "Last", "last ", "0, 1", " 0-1 "):
        got = parser.parse_args([command, "--sparse-layers", given]).sparse_layers
        assert got == given.replace(" ", "").lower()
    assert parser.parse_args([command, "--sparse-layers", ""]).sparse_layers == ""  # still refused later, as before


@pytest.mark.parametrize("given", [["--distill-weight", "0.5"], ["--distill-temperature", "2"]])
def test_distillation_options_at_their_default_without_a_teacher_are_refused(tiny_bert, tiny_task, tmp_path, capsys, given):
    """`train --distill-weight 0.5` without --teacher: 0.5 is the default, so the check (value != default) let it
    pass and the run trained without distillation, exit 0."""
    from attnkit.cli import main

    before = snapshot(tiny_task)
    out = tmp_path / "run"
    assert main(["train", "--task", "csv", "--data-dir", str(tiny_task), "--model", str(tiny_bert), "--max-steps", "1",
                 "--threads", "1", "--max-length", "16", "--output-dir", str(out), *given]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and given[0] in err and "need --teacher" in err, err
    assert not out.exists()
    assert snapshot(tiny_task) == before


def test_a_read_only_or_full_disk_is_named_in_one_line_with_the_way_out():
    """`train --output-dir` on a read-only mount printed `[Errno 30] Read-only file system: 'romnt/new'` (the
    system's words, no way out); other system errors read `path: reason`; attnkit's own lines are unchanged."""
    import errno

    from attnkit.cli.main import _os_error_line
    from attnkit.errors import UserError

    line = _os_error_line(OSError(errno.EROFS, "Read-only file system", "romnt/r1/.attnkit.lock"))
    assert line.startswith("cannot write romnt/r1/.attnkit.lock: Read-only file system") and "writable folder" in line
    assert "cannot write out/x: No space left on device" in _os_error_line(OSError(errno.ENOSPC, "No space left on device", "out/x"))
    assert _os_error_line(PermissionError(errno.EACCES, "Permission denied", "a/b")) == "a/b: Permission denied"
    assert _os_error_line(FileNotFoundError("task csv: file d/train.csv does not exist")) == "task csv: file d/train.csv does not exist"
    assert _os_error_line(UserError("cannot write x: y")) == "cannot write x: y"


def test_a_model_or_teacher_that_is_the_runs_own_output_dir_is_refused(tiny_bert, tiny_task, tmp_path, capsys):
    """`train --teacher X --output-dir X --no-resume` trained from X, moved X's run aside, and recorded X (now the
    student itself) as its teacher; `--model X/model` the same; `--teacher X --output-dir X` with no X said "model
    folder X has no config.json". Each is refused in one line, and X is left byte for byte."""
    from attnkit.cli import main

    def train(out, *extra):
        return main(["train", "--task", "csv", "--data-dir", str(tiny_task), "--model", str(tiny_bert), "--max-steps", "1",
                     "--threads", "1", "--max-length", "16", "--no-heatmap", "--output-dir", str(out), *extra])

    run = tmp_path / "run"
    assert train(run) == 0
    capsys.readouterr()
    before = snapshot(run)
    for extra, needle in ((["--teacher", str(run), "--no-resume"], f"--teacher {run} is this run's --output-dir"),
                          (["--teacher", str(run / "model")], f"--teacher {run / 'model'} is inside this run's --output-dir"),
                          (["--model", str(run / "model"), "--no-resume"], f"--model {run / 'model'} is inside")):
        cmd = ["train", "--task", "csv", "--data-dir", str(tiny_task), "--max-steps", "1", "--threads", "1",
               "--max-length", "16", "--output-dir", str(run), "--attention", "sparsemax"]
        if "--model" not in extra:
            cmd += ["--model", str(tiny_bert)]
        assert main(cmd + extra) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err and "give another --output-dir" in err, err
        assert snapshot(run) == before
    new = tmp_path / "new"
    assert train(new, "--teacher", str(new)) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"--teacher {new} is this run's --output-dir" in err, err
    assert not new.exists()
    assert main(["adapt", "--task", "csv", "--data-dir", str(tiny_task), "--model", str(run / "model"), "--max-steps", "2",
                 "--threads", "1", "--max-length", "16", "--output-dir", str(run)]) == 2
    assert f"--model {run / 'model'} is inside this run's --output-dir" in capsys.readouterr().err
    assert snapshot(run) == before


def test_data_inside_the_runs_output_dir_is_refused(tiny_task, tiny_bert, tmp_path, capsys):
    """`train --data-dir out/data --output-dir out --no-resume` moved the data into out/.replaced-<date>/ with the old
    run, and recorded a data folder that no longer held it (sweep 2026-11-27f, by the session): refused in one line, as
    a model inside the output folder is; so are adapt's --data-dir and --text-file there."""
    import shutil

    from attnkit.cli import main

    run = tmp_path / "run"
    shutil.copytree(tiny_task, run / "data")
    before = snapshot(run)
    common = ["--model", str(tiny_bert), "--max-steps", "1", "--threads", "1", "--max-length", "16", "--output-dir", str(run)]
    for argv, needle in (
            (["train", "--task", "csv", "--data-dir", str(run / "data"), "--no-resume", "--no-heatmap"], "--data-dir"),
            (["adapt", "--task", "csv", "--data-dir", str(run / "data")], "--data-dir"),
            (["adapt", "--text-file", str(run / "data" / "train.csv")], "--text-file")):
        assert main(argv + common) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"{needle} {run / 'data'}" in err and \
            f"is inside this run's --output-dir {run}: the run would write over the data it reads" in err, err
        assert snapshot(run) == before


def test_a_quoted_tilde_is_the_home_folder_in_every_path_option(saved_classifier, tmp_path, capsys, monkeypatch):
    """`--file "~/in.txt"` said "error: --file ~/in.txt" with no reason; `--output "~/x.jsonl"` made a folder named
    ~ in the working folder and said "written to ~/x.jsonl"; `predict --model "~/m"` said no such folder while train
    read it (sweep 2026-11-27f): a leading ~ is the home folder in every path option, input or output."""
    import json
    import shutil

    from attnkit.cli import main

    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir(), work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    shutil.copytree(saved_classifier, home / "m")
    (home / "in.txt").write_text("good film\nbad plot\n")
    assert main(["predict", "--model", "~/m", "--threads", "1", "--file", "~/in.txt", "--output", "~/out/p.jsonl"]) == 0
    assert [json.loads(x)["text"] for x in (home / "out" / "p.jsonl").read_text().splitlines()] == ["good film", "bad plot"]
    assert not (work / "~").exists() and list(work.iterdir()) == []
    assert main(["predict", "--model", "~/m", "--threads", "1", "--file", "~/none.txt"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(f"--file {home / 'none.txt'} does not exist"), err


def test_an_output_in_a_read_only_run_folder_names_the_output_and_the_way_out(tmp_path, monkeypatch):
    """`evaluate` of a run on a read-only mount, default output: the line named the run's lock file and said "name a
    writable folder"; it names the output that cannot be written and the way out (--output elsewhere)."""
    import errno

    from attnkit.cli import outputs
    from attnkit.errors import UserError
    from attnkit.runfiles.names import RUN_RECORD

    run = tmp_path / "run"
    run.mkdir()
    (run / RUN_RECORD).write_text("{}")

    def read_only(folder, **kw):
        raise OSError(errno.EROFS, "Read-only file system", str(folder / ".attnkit.lock"))

    monkeypatch.setattr(outputs, "folder_lock", read_only)
    with outputs.output_locks(), pytest.raises(UserError) as e:
        outputs.lock_run_of(run / "eval_validation.json")
    assert str(e.value) == (f"cannot write {run / 'eval_validation.json'}: the run folder {run} is read-only (Read-only "
                            "file system); name an output outside that folder (--output)")
