"""A saved model is what it says it is, and every bad setting gets one clear line (issue 15, items 4-7)."""

import json
import shutil
import time

import pytest

from attnkit.cli import main
from helpers import train_args

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tiny_bert, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("trust_run") / "run"
    assert main(train_args(tiny_bert, data, out, "--max-steps", "4", "--eval-steps", "2", "--attention", "sparsegen-lin", "--lam", "-2")) == 0
    return out


@pytest.mark.parametrize("command", [["predict", "a fine film"], ["explain", "a fine film", "--output", "x.png"]])
def test_a_bare_encoder_is_refused_not_run_with_a_random_head(tiny_bert, command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([command[0], "--model", str(tiny_bert), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert "no trained classification head" in err and "classifier.weight" in err and str(tiny_bert) in err
    assert len(err.strip().splitlines()) == 1


def test_resuming_with_other_settings_names_them_and_stops(tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "mixed"
    assert main(train_args(tiny_bert, data, out, "--max-steps", "2", "--eval-steps", "2", "--attention", "sparsegen-lin", "--lam", "-2",
                     "--keep-checkpoints")) == 0
    shutil.rmtree(out / "model")  # as if killed before the end
    capsys.readouterr()
    assert main(train_args(tiny_bert, data, out, "--max-steps", "4", "--eval-steps", "2", "--attention", "softmax")) == 2
    err = capsys.readouterr().err
    assert "attention: 'sparsegen-lin' there, 'softmax' now" in err and "--no-resume" in err
    assert not (out / "model").exists()
    # --no-resume starts afresh: the sparse checkpoints are moved aside, the model is trained softmax
    assert main(train_args(tiny_bert, data, out, "--max-steps", "2", "--eval-steps", "2", "--attention", "softmax", "--no-resume")) == 0
    assert [p.name for p in out.glob(".replaced-*/checkpoint-2")] == ["checkpoint-2"]
    assert json.loads((out / "metrics.json").read_text())["attention"]["attention"] == "softmax"
    cfg = json.loads((out / "model/config.json").read_text())
    assert cfg["attnkit"]["attention"] == "softmax"


def test_an_older_run_without_run_config_is_checked_by_its_attention(tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "old"
    assert main(train_args(tiny_bert, data, out, "--max-steps", "2", "--eval-steps", "2", "--attention", "sparsemax", "--keep-checkpoints")) == 0
    (out / "run_config.json").unlink()
    capsys.readouterr()
    assert main(train_args(tiny_bert, data, out, "--max-steps", "4", "--eval-steps", "2", "--attention", "softmax")) == 2
    assert "attention: 'sparsemax' there, 'softmax' now" in capsys.readouterr().err


@pytest.mark.parametrize("extra,needle", [
    (["--epochs", "0"], "--epochs 0"),
    (["--epochs", "-1"], "--epochs -1"),
    (["--max-length", "0"], "--max-length 0"),
    (["--max-length", "-5"], "--max-length -5"),
    (["--max-length", "100000"], "--max-length 100000 is longer than model"),
    (["--batch-size", "0"], "--batch-size 0"),
    (["--lr", "-1"], "--lr -1"),
])
def test_settings_that_would_do_nothing_or_crash(tiny_bert, data, tmp_path, capsys, extra, needle):
    assert main(train_args(tiny_bert, data, tmp_path / "o", *extra)) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "metrics.json").exists()


def test_inference_lengths(run, capsys):
    assert main(["predict", "--model", str(run), "--max-length", "100000", "x"]) == 2
    assert "(64 tokens, its position embeddings)" in capsys.readouterr().err
    # a text far longer than the model's 64 positions is truncated, not a crash
    assert main(["predict", "--model", str(run), " ".join(["good"] * 500)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["label"] in ("positive", "negative")


def test_missing_data_folder_is_named(tiny_bert, tmp_path, capsys):
    assert main(train_args(tiny_bert, tmp_path / "nonexistent", tmp_path / "o")) == 2
    assert f"data folder {tmp_path / 'nonexistent'} does not exist" in capsys.readouterr().err
    assert main(["train", "--task", "rotten-tomatoes", "--data-dir", str(tmp_path / "nonexistent"), "--output-dir", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_an_empty_split_is_named_not_a_sampler_error(tiny_bert, tmp_path, capsys):
    d = tmp_path / "sst5_ptb"
    d.mkdir()
    (d / "train.txt").write_text("(2 (2 a) (2 film))\n")  # neutral only: the SST-2 view keeps nothing
    for split in ("dev", "test"):
        (d / f"{split}.txt").write_text("(3 (2 a) (4 good))\n")
    (tmp_path / "o/checkpoint-5").mkdir(parents=True)  # an earlier run's checkpoint: --no-resume must not move it aside
    _record(tmp_path / "o", "checkpoint-5")
    assert main(["train", "--task", "sst2-ptb", "--data-dir", str(tmp_path), "--model", str(tiny_bert),
                 "--output-dir", str(tmp_path / "o"), "--no-resume"]) == 2
    assert f"task sst2-ptb: the train split has no examples in {tmp_path}" in capsys.readouterr().err
    assert (tmp_path / "o/checkpoint-5").is_dir() and not list((tmp_path / "o").glob(".replaced-*"))


def test_an_unknown_model_name_fails_at_once_naming_it(tmp_path, capsys, monkeypatch):
    t0 = time.time()
    assert main(["train", "--model", "not-a-model", "--output-dir", str(tmp_path / "o")]) == 2  # offline (conftest)
    err = capsys.readouterr().err
    assert "not-a-model" in err and time.time() - t0 < 30
    # online mode but the hub cannot be reached: no minute of retries
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    t0 = time.time()
    assert main(["train", "--model", "not-a-model", "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "'not-a-model'" in err and "cannot be reached" in err and time.time() - t0 < 30


@pytest.mark.parametrize("damage", ["truncate", "garble"])
def test_a_damaged_weights_file_is_named(run, tmp_path, capsys, damage):
    copy = tmp_path / "copy"
    shutil.copytree(run / "model", copy)
    f = copy / "model.safetensors"
    raw = f.read_bytes()
    f.write_bytes(raw[: len(raw) // 2] if damage == "truncate" else b"\x07" * 64 + raw[64:])
    assert main(["predict", "--model", str(copy), "a fine film"]) == 2
    err = capsys.readouterr().err
    assert f"{f} is damaged or truncated" in err and len(err.strip().splitlines()) == 1


def test_a_damaged_newest_checkpoint_is_moved_aside_and_the_run_resumes(tiny_bert, data, tmp_path, caplog):
    out = tmp_path / "dmg"
    base = ["--eval-steps", "2", "--attention", "sparsegen-lin", "--lam", "-2", "--keep-checkpoints"]
    assert main(train_args(tiny_bert, data, out, "--max-steps", "4", *base)) == 0
    w = out / "checkpoint-4" / "model.safetensors"
    w.write_bytes(w.read_bytes()[:1000])
    assert main(train_args(tiny_bert, data, out, "--max-steps", "6", *base)) == 0
    assert (out / ".incomplete-checkpoint-4").is_dir()
    assert "moved aside" in caplog.text
    state = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6


def test_ctrl_c_says_how_to_resume(tiny_bert, data, tmp_path, capsys, monkeypatch):
    import attnkit.cli.commands

    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(attnkit.cli.commands, "train", interrupted)
    assert main(train_args(tiny_bert, data, tmp_path / "o")) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "resume" in err and str(tmp_path / "o") in err and "Traceback" not in err


def test_a_finished_run_rerun_changes_nothing_and_cleans_up(tiny_bert, data, tmp_path, capsys):
    import os
    import stat

    out = tmp_path / "done"
    cmd = train_args(tiny_bert, data, out, "--max-steps", "2", "--eval-steps", "2")
    assert main(cmd) == 0
    assert not list(out.glob("checkpoint-*"))  # optimizer-bearing copies removed once the run is finished
    mask = os.umask(0)
    os.umask(mask)
    modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in (out / "model").iterdir()}
    assert set(modes.values()) == {0o666 & ~mask}, modes
    before = (out / "metrics.json").read_text()
    mtime = (out / "model" / "model.safetensors").stat().st_mtime
    capsys.readouterr()
    assert main(cmd) == 0
    assert "already complete" in capsys.readouterr().out
    assert (out / "metrics.json").read_text() == before
    assert (out / "model" / "model.safetensors").stat().st_mtime == mtime
    # --no-resume trains it again; other settings are not "complete"
    assert main(cmd + ["--no-resume"]) == 0
    assert "already complete" not in capsys.readouterr().out
    # other settings never replace the finished run: refused, naming the difference, the run untouched
    before = (out / "metrics.json").read_text()
    assert main(train_args(tiny_bert, data, out, "--max-steps", "2", "--eval-steps", "2", "--attention", "softmax")) == 2
    err = capsys.readouterr().err
    assert "finished run with other settings" in err and "attention: 'sparsegen-lin' there, 'softmax' now" in err and "--no-resume" in err
    assert (out / "metrics.json").read_text() == before


def test_threads_option(tiny_bert, data, tmp_path, capsys, monkeypatch):
    import torch

    seen = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: seen.append(n))
    assert main(train_args(tiny_bert, data, tmp_path / "o", "--max-steps", "1", "--threads", "1")) == 0
    assert seen == [1]
    with pytest.raises(SystemExit) as e:
        main(["predict", "--model", str(tmp_path / "o"), "--threads", "0", "x"])
    assert e.value.code == 2
    assert "argument --threads: expected a whole number >= 1, got '0'" in capsys.readouterr().err


def test_a_figure_that_cannot_be_drawn_does_not_fail_a_finished_run(tmp_path, monkeypatch, caplog):
    import attnkit.training.trainer as runs
    from attnkit.training.config import TrainConfig

    def broken(*a, **k):
        raise RuntimeError("no backend")

    monkeypatch.setattr(runs, "plot_curves", broken)
    (tmp_path / "checkpoint-4").mkdir()
    _record(tmp_path, "checkpoint-4")  # the run wrote it (its record says so)
    with caplog.at_level("WARNING", logger="attnkit"):
        runs.finish_run(TrainConfig(output_dir=str(tmp_path)), tmp_path, [], "accuracy", title="t")
    assert not (tmp_path / "checkpoint-4").exists()  # the checkpoints go all the same
    assert f"could not draw {tmp_path / 'curves.png'}: RuntimeError: no backend" in caplog.text


@pytest.mark.parametrize("cmd,flag", [(["explain", "a film"], "--output"), (["layer-weights"], "--output"),
                                      (["words"], "--output"), (["evaluate", "--task", "hans"], "--plot")])
def test_a_figure_output_that_is_not_png_or_svg_is_refused_before_the_model_loads(cmd, flag, tiny_bert, tmp_path, capsys):
    # a bare encoder, which these commands would refuse once loaded: the figure's suffix is checked first
    assert main([*cmd, "--model", str(tiny_bert), flag, str(tmp_path / "a.pdf")]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {tmp_path / 'a.pdf'}: the" in err and "file must end in .png or .svg" in err


def test_plot_hans_refuses_a_file_that_is_not_png_or_svg(tmp_path):
    from attnkit.analysis.explain import plot_hans

    report = {"n": 2, "accuracy": 0.5, "heuristic": {"lexical_overlap": {"entailment": 1.0, "non-entailment": 0.0}}}
    with pytest.raises(ValueError, match=r"HANS plot file must end in \.png or \.svg, got 'h\.pdf'"):
        plot_hans(report, tmp_path / "h.pdf")
    assert not (tmp_path / "h.pdf").exists()
    assert plot_hans(report, tmp_path / "h.svg").stat().st_size > 0


@pytest.mark.parametrize("attention", [["--attention", "softmax"], ["--attention", "sparsegen-lin", "--lam", "-2"]])
def test_the_same_seed_trains_the_same_model_bit_for_bit(attention, tiny_bert, data, tmp_path, capsys):
    from safetensors.torch import load_file

    from attnkit.attention import kernels

    runs = [tmp_path / "a", tmp_path / "b"]
    for out in runs:
        assert main(train_args(tiny_bert, data, out, "--max-steps", "6", "--eval-steps", "3", "--seed", "3", *attention)) == 0
    if "sparsegen-lin" in attention:  # the compiled kernel where this machine builds it, else the torch path
        assert f"sparse maps ran on the {kernels.backend()} path" in capsys.readouterr().out
    a, b = (load_file(str(out / "model/model.safetensors")) for out in runs)
    assert a.keys() == b.keys() and all(a[k].equal(b[k]) for k in a)
    ma, mb = (json.loads((out / "metrics.json").read_text()) for out in runs)
    untimed = lambda d: {k: v for k, v in d.items() if "runtime" not in k and "per_second" not in k}  # noqa: E731
    assert untimed(ma["validation"]) == untimed(mb["validation"])
    assert [untimed(h) for h in ma["log_history"]] == [untimed(h) for h in mb["log_history"]]


def test_no_resume_moves_checkpoints_aside_only_once_training_can_start(tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "o"
    (out / "checkpoint-5").mkdir(parents=True)  # an earlier run's checkpoint
    _record(out, "checkpoint-5")
    # --max-length beyond the model's positions fails after the data and resume checks, before training
    assert main(train_args(tiny_bert, data, out, "--max-steps", "2", "--no-resume", "--max-length", "100000")) == 2
    assert "100000" in capsys.readouterr().err
    assert (out / "checkpoint-5").is_dir() and not list(out.glob(".replaced-*"))


def _record(out, *checkpoints):
    """attnkit's record of a run in ``out`` that wrote ``checkpoints`` (as a run writes it when it starts)."""
    from attnkit.runfiles.names import RUN_RECORD

    (out / RUN_RECORD).write_text(json.dumps({"written_by": "attnkit train", "checkpoints": list(checkpoints)}))
