"""A run resumes as what it was: other settings are named and stop the run, an older run is checked by its attention, a
damaged newest checkpoint is moved aside, Ctrl-C says how to resume, a finished run rerun changes nothing, the same
seed trains the same model bit for bit."""

import json
import shutil

import pytest

from attnkit.cli import main
from helpers import train_args, write_run_record

pytestmark = pytest.mark.slow


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
    import attnkit.cli.train_commands

    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(attnkit.cli.train_commands, "train", interrupted)
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
    write_run_record(out, "checkpoint-5")
    # --max-length beyond the model's positions fails after the data and resume checks, before training
    assert main(train_args(tiny_bert, data, out, "--max-steps", "2", "--no-resume", "--max-length", "100000")) == 2
    assert "100000" in capsys.readouterr().err
    assert (out / "checkpoint-5").is_dir() and not list(out.glob(".replaced-*"))




def test_a_kept_checkpoints_files_have_the_umasks_mode(tiny_bert, data, tmp_path):
    """The Trainer's checkpoint weights were written 0600 (safetensors' mode) beside 0644 files: the one file of a
    kept checkpoint others could not read (sweep s25)."""
    import os
    import stat

    out = tmp_path / "kept"
    assert main(train_args(tiny_bert, data, out, "--max-steps", "2", "--eval-steps", "2", "--keep-checkpoints")) == 0
    mask = os.umask(0)
    os.umask(mask)
    (ckpt,) = out.glob("checkpoint-*")
    modes = {f.name: stat.S_IMODE(f.stat().st_mode) for f in ckpt.iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o666 & ~mask}, modes


def test_resuming_a_run_cut_short_with_another_length_says_so(tiny_bert, data, tmp_path, caplog):
    """A run cut short and rerun with another --max-steps (or --epochs) resumed with no word: its model is neither
    length's from the start, as its learning rate followed the first length up to the checkpoint (sweep s25)."""
    out = tmp_path / "cut"
    base = ["--eval-steps", "2", "--keep-checkpoints"]
    assert main(train_args(tiny_bert, data, out, "--max-steps", "4", *base)) == 0
    for p in ("model", "metrics.json", "checkpoint-4"):  # as if killed after checkpoint-2
        shutil.rmtree(out / p) if (out / p).is_dir() else (out / p).unlink()
    write_run_record(out, "checkpoint-2")
    caplog.clear()
    assert main(train_args(tiny_bert, data, out, "--max-steps", "4", *base)) == 0  # the same length: no word
    assert "another length" not in caplog.text
    for p in ("model", "metrics.json", "checkpoint-4"):
        shutil.rmtree(out / p) if (out / p).is_dir() else (out / p).unlink()
    write_run_record(out, "checkpoint-2")
    assert main(train_args(tiny_bert, data, out, "--max-steps", "6", *base)) == 0
    assert "resuming the run in" in caplog.text and "another length (--max-steps: 4 there, 6 now)" in caplog.text, caplog.text
    assert json.loads((out / "metrics.json").read_text())["train"]["resumed_from"] == "checkpoint-2"
