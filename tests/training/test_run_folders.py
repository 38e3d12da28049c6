"""Nothing lost, nothing silent (issue 23): a user's runs and files are never replaced, every bad value is refused in
one line. Each test writes the user's files first and checks that they are unchanged afterwards."""

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnkit import sparsegen_lin, sparsemax
from attnkit.cli import main
from attnkit.cli.parser import build_parser
from attnkit.runfiles.names import LOCK_FILE
from attnkit.runfiles.ownership import check_side_file, written_by_attnkit
from attnkit.runfiles.lock import folder_lock
from attnkit.runfiles.atomic import write_text_atomic
from attnkit.errors import UserError
from helpers import only_stderr_line, snapshot_without_lock, two_step_train_args, write_csv_task

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tiny_bert, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("rel_run") / "run"
    assert main(two_step_train_args(tiny_bert, data, out, "--attention", "sparsegen-lin", "--lam", "-2")) == 0
    return out


# ----------------------------------------------------------------------------- 1. a finished run is never replaced


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
    assert "already complete" in capsys.readouterr().out
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


def test_a_second_process_on_one_run_folder_stops_at_once(tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "runs"
    out.mkdir()
    with folder_lock(out):  # as another attnkit process would hold it
        t0 = time.time()
        assert main(two_step_train_args(tiny_bert, data, out)) == 2
        only_stderr_line(capsys, "another attnkit process is writing", str(out))
        assert time.time() - t0 < 30
    assert not (out / "metrics.json").exists()
    # a killed holder does not leave the lock stuck: the OS releases it with the process
    code = f"import os, sys; sys.path.insert(0, {str(Path(__file__).parents[2])!r})\n" \
           f"from attnkit.runfiles.lock import folder_lock\nwith folder_lock({str(out)!r}):\n    os.kill(os.getpid(), 9)\n"
    assert subprocess.run([sys.executable, "-c", code]).returncode == -9
    assert (out / LOCK_FILE).exists()
    assert main(two_step_train_args(tiny_bert, data, out)) == 0


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


# ----------------------------------------------------------------------------- 2. a file the user did not name is never overwritten


def test_a_side_file_of_the_user_is_refused(run, data, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("words.json").write_text("my own notes\n")
    words = ["words", "--model", str(run), "--data-dir", str(data), "--max-samples", "8", "--min-count", "1"]
    assert main(words + ["--output", "words.png"]) == 2
    only_stderr_line(capsys, "words.json exists and was not written by attnkit")
    assert Path("words.json").read_text() == "my own notes\n" and not Path("words.png").exists()
    # elsewhere it is written, marked as attnkit's; a rerun may then replace attnkit's own side file
    assert main(words + ["--output", "w.png"]) == 0
    assert written_by_attnkit("w.json") and written_by_attnkit("w.png")
    assert main(words + ["--output", "w.png"]) == 0
    assert Path("words.json").read_text() == "my own notes\n"


def test_side_file_check_reads_attnkit_marks(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"written_by": "attnkit words"}))
    (tmp_path / "b.json").write_text(json.dumps({"written_by": "someone"}))
    (tmp_path / "c.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 30)
    (tmp_path / "d.svg").write_text("<svg></svg>")
    assert written_by_attnkit(tmp_path / "a.json")
    for name in ("b.json", "c.png", "d.svg"):
        assert not written_by_attnkit(tmp_path / name)
        with pytest.raises(UserError, match="not written by attnkit"):
            check_side_file(tmp_path / name, "x")
    check_side_file(tmp_path / "missing.json", "x")


def test_output_that_is_also_the_input_is_refused(run, tmp_path, capsys):
    f = tmp_path / "a.txt"
    f.write_text("a fine film\na dull film\n")
    assert main(["predict", "--model", str(run), "--file", str(f), "--output", str(f)]) == 2
    only_stderr_line(capsys, "--output", "is also the input --file")
    assert f.read_text() == "a fine film\na dull film\n"


def test_a_failing_command_writes_nothing(run, tmp_path, capsys):
    heat = tmp_path / "heat.png"
    assert main(["explain", "--model", str(run), "good film", "--output", str(heat), "--stats", str(tmp_path)]) == 2
    only_stderr_line(capsys, "--stats", "is a folder")
    assert not heat.exists()
    # a missing folder is made for every output alike
    assert main(["explain", "--model", str(run), "good film", "--output", str(heat), "--stats", str(tmp_path / "new" / "s.json")]) == 0
    assert heat.is_file() and json.loads((tmp_path / "new" / "s.json").read_text())["written_by"] == "attnkit explain"


def test_sweep_report_only_with_a_bad_view_layer_rewrites_nothing(tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "sweep"
    base = ["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(out), "--lams", "-2",
            "--seeds", "1", "--batch-size", "16", "--lr", "3e-3", "--max-length", "16", "--max-steps", "2", "--eval-steps", "2"]
    assert main(base) == 0
    before = snapshot_without_lock(out)
    capsys.readouterr()
    assert main(base + ["--report-only", "--view-layer", "7"]) == 2
    only_stderr_line(capsys, "--view-layer 7", "layers 0 to 1")
    assert snapshot_without_lock(out) == before


def test_errors_name_the_users_path_not_a_temporary_file(tmp_path):
    (tmp_path / "f").write_text("a file where a folder should be")
    with pytest.raises(UserError) as e:
        write_text_atomic(tmp_path / "f" / "x.json", "{}")
    assert str(tmp_path / "f" / "x.json") in str(e.value) and ".tmp-" not in str(e.value)
    with pytest.raises(UserError, match="cannot write"):
        write_text_atomic(tmp_path, "{}")  # a folder
    assert not list(tmp_path.glob(".*tmp*"))


# ----------------------------------------------------------------------------- 3. no silent wrong results


@pytest.mark.parametrize("extra,needle", [
    (["--weight-decay", "nan"], "--weight-decay nan"),
    (["--weight-decay", "inf"], "--weight-decay inf"),
    (["--warmup", "nan"], "--warmup nan"),
    (["--warmup", "inf"], "--warmup inf"),
    (["--attention", "sparsegen-lin", "--lam-warmup", "inf"], "--lam-warmup inf"),
    (["--attention", "sparsegen-lin", "--lam-warmup", "nan"], "--lam-warmup nan"),
    (["--max-train-samples", "0"], "--max-train-samples 0"),
    (["--max-eval-samples", "-3"], "--max-eval-samples -3"),
    (["--logging-steps", "0"], "--logging-steps 0"),
])
def test_non_finite_or_empty_settings_are_refused(tiny_bert, data, tmp_path, capsys, extra, needle):
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", *extra)) == 2
    only_stderr_line(capsys, needle)
    assert not (tmp_path / "o").exists()


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


@pytest.mark.parametrize("argv,needle", [
    (["predict", "--batch-size", "0", "x"], "--batch-size"),
    (["evaluate", "--batch-size", "-1"], "--batch-size"),
    (["words", "--max-samples", "0"], "--max-samples"),
    (["words", "--top", "0"], "--top"),
    (["layer-weights", "--max-samples", "-5"], "--max-samples"),
    (["evaluate", "--hans-per-subcase", "0"], "--hans-per-subcase"),
])
def test_counts_below_one_are_refused_everywhere(run, capsys, argv, needle):
    with pytest.raises(SystemExit) as e:
        main([argv[0], "--model", str(run), *argv[1:]])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("extra,needle", [(["--epochs", "0"], "--epochs 0"), (["--lr", "0"], "--lr 0"), (["--epochs", "nan"], "--epochs nan")])
def test_pretrain_that_would_do_nothing_is_refused(data, tmp_path, capsys, extra, needle):
    assert main(["pretrain", "--task", "csv", "--data-dir", str(data), "--output-dir", str(tmp_path / "p"), *extra]) == 2
    only_stderr_line(capsys, needle)
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("extra,needle", [
    (["--lams", "-2", "-2.0"], "--lams: -2 given more than once"),
    (["--lams", "-2", "--seeds", "1", "1"], "--seeds: 1 given more than once"),
    (["--lams", "-2", "--attention", "softmax"], "--attention softmax"),
    (["--lams", "-2", "--lam", "-4"], "--lam -4"),
])
def test_sweep_refuses_duplicates_and_options_it_would_ignore(tiny_bert, data, tmp_path, capsys, extra, needle):
    assert main(["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(tmp_path / "s"), *extra]) == 2
    only_stderr_line(capsys, needle)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("extra,needle", [
    (["--attention", "softmax", "--lam", "-2"], "--lam -2 (only sparsegen-lin has a lam"),
    (["--blur-sigma", "0.5"], "--blur-size/--blur-sigma"),
    (["--se-ratio", "4"], "--se-ratio 4"),
    (["--doc-stride", "8"], "--doc-stride 8"),
])
def test_train_refuses_options_it_would_ignore(tiny_bert, data, tmp_path, capsys, extra, needle):
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", *extra)) == 2
    only_stderr_line(capsys, needle)
    assert not (tmp_path / "o").exists()


def test_threads_above_the_cores_warn(run, capsys):
    cores = len(os.sched_getaffinity(0))
    assert main(["predict", "--model", str(run), "--threads", str(cores + 3), "a fine film"]) == 0
    assert f"--threads {cores + 3} is more than the {cores} cores" in capsys.readouterr().err
    torch.set_num_threads(cores)


# ----------------------------------------------------------------------------- 4. negative numbers as a user writes them


@pytest.mark.parametrize("text,value", [("-1e-3", -1e-3), ("-inf", -math.inf), ("-4", -4.0), ("-.5", -0.5), ("-2E+1", -20.0)])
def test_negative_numbers_are_values(text, value):
    a = build_parser().parse_args(["train", "--lam", text, "--seed", "-1"])
    assert a.lam == value and a.seed == -1
    s = build_parser().parse_args(["sweep", "--lams", "-8", text, "0", "--seeds", "1", "-2"])
    assert s.lams == [-8.0, value, 0.0] and s.seeds == [1, -2]


def test_a_non_number_is_still_an_unknown_option(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--lam", "-x"])
    assert "--lam" in capsys.readouterr().err


# ----------------------------------------------------------------------------- 5. edge values of the maps


@pytest.mark.parametrize("shape", [(0,), (0, 5), (3, 0), (2, 0, 4)])
def test_maps_on_empty_tensors_return_empty_tensors(shape):
    z = torch.empty(*shape)
    for fn in (sparsemax, lambda t: sparsegen_lin(t, -2.0), lambda t: torch.softmax(t, -1)):
        p = fn(z)
        assert p.shape == z.shape and p.dtype == z.dtype


# ----------------------------------------------------------------------------- found by a sweep of bad inputs


@pytest.fixture
def user_run(tiny_bert, data, tmp_path):
    """A finished run of the user's, copied where commands may aim outputs at its files."""
    out = tmp_path / "user_run"
    assert main(two_step_train_args(tiny_bert, data, out)) == 0
    return out


@pytest.mark.parametrize("argv,target", [
    (["evaluate", "--output", "{run}/model/config.json"], "model/config.json"),
    (["evaluate", "--output", "{run}/metrics.json"], "metrics.json"),
    (["explain", "good film", "--output", "{tmp}/g.png", "--stats", "{run}/model/config.json"], "model/config.json"),
    (["words", "--output", "{tmp}/w.png", "--json", "{run}/run_config.json", "--min-count", "1"], "run_config.json"),
    (["predict", "good film", "--output", "{run}/model/tokenizer.json"], "model/tokenizer.json"),
    (["predict", "--split", "validation", "--task", "csv", "--output", "{data}/dev.csv"], "DATA/dev.csv"),
])
def test_an_output_never_replaces_the_models_or_the_datas_files(user_run, data, tmp_path, capsys, argv, target):
    fill = {"run": str(user_run), "tmp": str(tmp_path), "data": str(data)}
    argv = [x.format(**fill) for x in argv]
    path = data / target[5:] if target.startswith("DATA/") else user_run / target
    before, run_before = path.read_bytes(), snapshot_without_lock(user_run)
    extra = [] if argv[0] == "explain" or (argv[0] == "predict" and "--split" not in argv) else ["--data-dir", str(data)]
    assert main([argv[0], "--model", str(user_run), *extra] + argv[1:]) == 2
    only_stderr_line(capsys, "that attnkit did not write as an output")
    assert path.read_bytes() == before and snapshot_without_lock(user_run) == run_before


def test_a_diverged_run_is_refused_not_reported(tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "nan"
    assert main(two_step_train_args(tiny_bert, data, out, "--lr", "1e9", "--max-steps", "4", "--eval-steps", "4")) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the training's progress bars
    assert "training diverged" in last and "lower --lr (it was 1e+09)" in last
    assert not (out / "model").exists() and not (out / "metrics.json").exists()


@pytest.mark.parametrize("extra,needle", [
    (["--max-steps", "0"], "--max-steps 0"), (["--max-steps", "-5"], "--max-steps -5"), (["--epochs", "nan"], "--epochs nan"),
    (["--freeze", ","], "--freeze ','"), (["--seed", "-1"], "--seed -1"), (["--seed", "99999999999"], "--seed 99999999999"),
])
def test_more_settings_that_were_silently_odd(tiny_bert, data, tmp_path, capsys, extra, needle):
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", *extra)) == 2
    only_stderr_line(capsys, needle)


def test_labels_that_differ_only_in_case_are_refused(tiny_bert, tmp_path, capsys):
    d = write_csv_task(tmp_path / "d", [("good film", "Positive"), ("bad film", "negative"), ("fine film", "positive")], [("dull", "negative")])
    assert main(two_step_train_args(tiny_bert, d, tmp_path / "o")) == 2
    only_stderr_line(capsys, "train.csv, line 4", "differs only in case")


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


@pytest.mark.parametrize("argv,needle", [
    (["predict", "good", "--task", "csv"], "--task csv: only with --split"),
    (["predict", "good", "--output-dir", "x"], "--output-dir x: only with --split"),
    (["evaluate", "--plot", "h.png"], "--plot h.png: only with --task hans"),
    (["evaluate", "--hans-per-subcase", "5"], "--hans-per-subcase 5: only with --task hans"),
    (["evaluate", "--output", "m.png"], "must end in .json"),
    (["predict", "--file", "."], "is a folder"),
])
def test_inference_options_that_would_be_ignored_or_misread(user_run, data, tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert main([argv[0], "--model", str(user_run)] + (["--data-dir", str(data)] if argv[0] == "evaluate" else []) + argv[1:]) == 2
    only_stderr_line(capsys, needle)


def test_a_folder_where_a_file_belongs_and_a_missing_data_folder_are_named(tiny_bert, tmp_path, capsys):
    d = tmp_path / "d"
    (d / "train.csv").mkdir(parents=True)
    (d / "dev.csv").write_text("text,label\na,x\n")
    assert main(two_step_train_args(tiny_bert, d, tmp_path / "o")) == 2
    only_stderr_line(capsys, "train.csv is a folder, not a file")
    assert main(["tasks", "--data-dir", str(tmp_path / "nowhere")]) == 2
    only_stderr_line(capsys, "does not exist")
    assert main(["pretrain", "--task", "csv", "--data-dir", str(d), "--max-length", "1", "--output-dir", str(tmp_path / "p")]) == 2
    only_stderr_line(capsys, "--max-length 1")


def test_a_runs_own_files_and_its_training_data_are_never_an_output(user_run, data, tmp_path, capsys):
    before, run_before = (data / "dev.csv").read_bytes(), snapshot_without_lock(user_run)
    # the data the model was trained on, though this command reads none of it
    assert main(["predict", "--model", str(user_run), "good film", "--output", str(data / "dev.csv")]) == 2
    only_stderr_line(capsys, "the data the model was trained on")
    # the run's own figures, though attnkit drew them
    assert main(["explain", "--model", str(user_run), "good film", "--output", str(user_run / "curves.png")]) == 2
    only_stderr_line(capsys, "curves.png")
    assert (data / "dev.csv").read_bytes() == before and snapshot_without_lock(user_run) == run_before
    # a command's own earlier output there may be replaced (evaluate's default file, then named)
    assert main(["evaluate", "--model", str(user_run), "--data-dir", str(data)]) == 0
    out = next((user_run / "model").glob("eval_*.json"))
    assert main(["evaluate", "--model", str(user_run), "--data-dir", str(data), "--output", str(out)]) == 0


def test_default_outputs_keep_a_users_file(user_run, data, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("attention.png").write_bytes(b"my picture")
    assert main(["explain", "--model", str(user_run), "good film"]) == 2
    only_stderr_line(capsys, "attention.png exists and was not written by attnkit")
    assert Path("attention.png").read_bytes() == b"my picture"
    mine = user_run / "model" / "eval_csv_validation.json"
    mine.write_text("my notes")
    assert main(["evaluate", "--model", str(user_run), "--data-dir", str(data)]) == 2
    only_stderr_line(capsys, "was not written by attnkit", "--output")
    assert mine.read_text() == "my notes"
    mine.unlink()


@pytest.mark.parametrize("argv,needle", [
    (["train", "--attention", "softmax", "--alpha", "1.5"], "--alpha 1.5 (only entmax-alpha"),
    (["train", "--blur-sigma", "0.3"], "--blur-size/--blur-sigma"),
    (["train", "--se-ratio", "3"], "--se-ratio 3"),
    (["sweep", "--lams", "-2", "--no-resume"], "--no-resume: a sweep reuses"),
    (["sweep", "--alphas", "2.5"], "--alphas 2.5"),
])
def test_explicit_defaults_and_sweep_options_are_not_ignored(tiny_bert, data, tmp_path, capsys, argv, needle):
    base = ["--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(tmp_path / "o"), "--max-steps", "2"]
    assert main(argv[:1] + base + argv[1:]) == 2
    only_stderr_line(capsys, needle)


@pytest.mark.parametrize("argv,needle", [
    (["faithfulness", "--seed", "-5"], "--seed -5"), (["faithfulness", "--seed", "4294967296"], "--seed 4294967296"),
    (["faithfulness", "--ig-steps", "100000000"], "--ig-steps 100000000"),
    (["predict", "--split", "validation", "--task", "csv", "--output-dir", "x"], "--output-dir x: only for a GLUE test split"),
])
def test_inference_values_out_of_range(user_run, data, capsys, argv, needle):
    assert main([argv[0], "--model", str(user_run), "--data-dir", str(data)] + argv[1:]) == 2
    only_stderr_line(capsys, needle)


def test_a_data_dir_that_is_a_file_is_named_so(tiny_bert, data, tmp_path, capsys):
    assert main(two_step_train_args(tiny_bert, data / "train.csv", tmp_path / "o")) == 2
    only_stderr_line(capsys, "is a file, not a folder")


def test_a_warmup_that_outlasts_the_run_is_refused(tiny_bert, data, tmp_path, capsys):
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", "--attention", "entmax15", "--alpha-warmup", "1e9")) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the tokenising progress bars
    assert "--alpha-warmup 1e+09: the run has 2 steps" in last and "Traceback" not in last
    assert not (tmp_path / "o" / "run_config.json").exists()


def test_a_sweep_md_of_the_users_is_moved_aside_not_overwritten(tiny_bert, data, tmp_path, capsys):
    """sweep.md is attnkit's where its folder's ledger lists it as written; the user's own notes in that name (or
    attnkit's table edited by the user) are moved aside whole before the table is written again."""
    out = tmp_path / "sweep"
    base = ["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(out), "--lams", "-2",
            "--seeds", "1", "--batch-size", "16", "--lr", "3e-3", "--max-length", "16", "--max-steps", "2", "--eval-steps", "2"]
    assert main(base) == 0
    table = (out / "sweep.md").read_text()
    assert main(base + ["--report-only"]) == 0  # attnkit's own table: replaced in place, nothing moved aside
    assert (out / "sweep.md").read_text() == table and not list(out.glob(".replaced-*"))
    (out / "sweep.md").write_text(table + "\nmy notes on this sweep\n")  # the user edits it: now it is theirs
    assert main(base + ["--report-only"]) == 0
    (aside,) = out.glob(".replaced-*/sweep.md")
    assert aside.read_text().endswith("my notes on this sweep\n")
    assert (out / "sweep.md").read_text() == table


def test_a_warmup_counts_the_steps_of_every_process(monkeypatch):
    """Under torchrun each step takes a batch on every process: 100 texts at batch 10 are 10 steps alone, 3 on 4
    processes, so a 5-step warm-up fits the first run and outlasts the second."""
    from attnkit.training.config import TrainConfig
    from attnkit.training.trainer import check_warmups

    cfg = TrainConfig(batch_size=10, epochs=1, warmup_ratio=5)
    monkeypatch.setenv("WORLD_SIZE", "1")
    check_warmups(cfg, 100)
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ValueError, match="--warmup 5: the run has 3 steps"):
        check_warmups(cfg, 100)
