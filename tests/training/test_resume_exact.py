"""A run killed and run again ends as the uninterrupted run does, bit for bit: ``attnkit adapt`` resumed after each of
its checkpoints (Ctrl-C and kill -9), ``attnkit pretrain`` (which keeps no checkpoints) run again after a kill."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from attnkit.cli import main
from helpers import merged

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def adapt_args(model, data, out, *extra):
    # 20 texts in batches of 8: 3 steps an epoch, so the checkpoints at 2, 4, 6 fall inside an epoch and at its end;
    # entmax15 annealed over the first steps, the head alone at step 1, dropout on: every random draw is exercised
    return merged(["adapt", "--task", "csv", "--data-dir", str(data), "--model", str(model), "--output-dir", str(out),
            "--attention", "entmax15", "--max-train-samples", "20", "--batch-size", "8", "--max-length", "16",
            "--max-steps", "8", "--save-steps", "2", "--head-warmup", "1", "--logging-steps", "1", "--warmup", "0",
            "--seed", "5"], extra)


def pretrain_args(data, out):
    return ["pretrain", "--task", "csv", "--data-dir", str(data), "--output-dir", str(out), "--epochs", "3", "--vocab-size", "100",
            "--batch-size", "16", "--max-length", "16", "--logging-steps", "1", "--seed", "5"]


def steps_logged(metrics: dict) -> list[dict]:
    """Every per-step entry of the log (loss, grad norm, learning rate, alpha), timings left out."""
    return [h for h in metrics["log_history"] if "loss" in h]


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = load_file(a / "model" / "model.safetensors"), load_file(b / "model" / "model.safetensors")
    assert wa.keys() == wb.keys()
    differ = [k for k in wa if not torch.equal(wa[k], wb[k])]
    assert not differ, f"{len(differ)} of {len(wa)} tensors differ, e.g. {differ[:3]}"


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from helpers import write_tiny_sentiment

    return write_tiny_sentiment(tmp_path_factory.mktemp("exact") / "data", n_train=48, n_dev=8)


@pytest.fixture(scope="module")
def adapted(tiny_bert, data, tmp_path_factory):
    """The uninterrupted adapt run."""
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    assert main(adapt_args(tiny_bert, data, out)) == 0
    return out


def stop_after_checkpoint(monkeypatch, step: int, how) -> None:
    """``how()`` (Ctrl-C, a kill) once checkpoint-``step`` is written and recorded."""
    from attnkit.training import trainer as runs

    real = runs.RunRecorder.on_save

    def on_save(self, args_, state, control, **kw):
        real(self, args_, state, control, **kw)
        if state.global_step == step:
            how()

    monkeypatch.setattr(runs.RunRecorder, "on_save", on_save)


def ctrl_c():
    raise KeyboardInterrupt


def test_adapt_resumed_after_each_checkpoint_equals_the_uninterrupted_run(adapted, tiny_bert, data, tmp_path, monkeypatch, caplog):
    out = tmp_path / "run"
    for step in (2, 4, 6):  # Ctrl-C after checkpoint 2; the same command again, stopped after 4; again after 6
        with monkeypatch.context() as m:
            stop_after_checkpoint(m, step, ctrl_c)
            assert main(adapt_args(tiny_bert, data, out)) == 130
        ckpts = sorted(p.name for p in out.glob("checkpoint-*"))
        assert ckpts == [f"checkpoint-{step}"] and not (out / "metrics.json").exists()
    caplog.clear()
    assert main(adapt_args(tiny_bert, data, out)) == 0
    assert f"resuming from {out / 'checkpoint-6'}" in caplog.text and "masking" not in caplog.text
    assert_same_weights(adapted, out)
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (adapted, out))
    assert len(steps_logged(a)) == 8 and steps_logged(b) == steps_logged(a)
    assert b["adapted"]["mlm_loss"] == a["adapted"]["mlm_loss"]
    assert b["adapted"]["zero_share"] == a["adapted"]["zero_share"]
    assert b["train"]["train_loss"] == a["train"]["train_loss"] and "masking_note" not in b["train"]
    # the time of the whole run's training, over its four processes (it was the last one's: sweep 2026-11-28s BC)
    assert b["train"]["resumed_from"] == "checkpoint-6"
    assert b["adapted"]["seconds"] == round(b["train"]["train_runtime"], 1) > 0


def _adapt_in_subprocess(tiny_bert, data, out, kill_at: int | None = None) -> subprocess.CompletedProcess:
    """`attnkit adapt` in a fresh process (one torch thread, whatever the test process has set), SIGKILLed right after
    checkpoint ``kill_at`` is saved where given."""
    code = ("import os, signal, sys\n"
            "from attnkit.training import trainer as runs\n"
            "real = runs.RunRecorder.on_save\n"
            "def on_save(self, args, state, control, **kw):\n"
            "    real(self, args, state, control, **kw)\n"
            f"    if state.global_step == {kill_at!r}:\n"
            "        os.kill(os.getpid(), signal.SIGKILL)\n"
            "runs.RunRecorder.on_save = on_save\n"
            "from attnkit.cli import main\n"
            f"sys.exit(main({adapt_args(tiny_bert, data, out)!r}))\n")
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)


def test_adapt_killed_with_sigkill_resumes_exactly(tiny_bert, data, tmp_path):
    # every run in a fresh process of its own: the reference is not made under another test's thread count
    ref, out = tmp_path / "uninterrupted", tmp_path / "run"
    r = _adapt_in_subprocess(tiny_bert, data, ref)
    assert r.returncode == 0, r.stderr[-2000:]
    r = _adapt_in_subprocess(tiny_bert, data, out, kill_at=4)
    assert r.returncode == -9, r.stderr[-2000:]
    assert (out / "checkpoint-4" / "trainer_state.json").is_file() and not (out / "model").exists()
    r = _adapt_in_subprocess(tiny_bert, data, out)
    assert r.returncode == 0 and "resum" in r.stderr.lower(), r.stderr[-2000:]
    assert_same_weights(ref, out)
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (ref, out))
    assert steps_logged(b) == steps_logged(a) and b["adapted"]["mlm_loss"] == a["adapted"]["mlm_loss"]


def test_a_checkpoint_without_masking_state_is_resumed_with_one_warning(tiny_bert, data, tmp_path, monkeypatch, caplog):
    out = tmp_path / "run"
    with monkeypatch.context() as m:
        stop_after_checkpoint(m, 2, ctrl_c)
        assert main(adapt_args(tiny_bert, data, out)) == 130
    state_file = out / "checkpoint-2" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    assert state["stateful_callbacks"]["MaskingState"]["attributes"]["batches"] == 2
    del state["stateful_callbacks"]["MaskingState"]  # as an attnkit whose masks came from the global RNG wrote it
    state_file.write_text(json.dumps(state))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        assert main(adapt_args(tiny_bert, data, out)) == 0
    warned = [r.getMessage() for r in caplog.records if "masking" in r.getMessage()]
    assert len(warned) == 1 and "\n" not in warned[0], warned
    assert str(out / "checkpoint-2") in warned[0] and "step 3" in warned[0] and "--no-resume" in warned[0]
    assert str(out / "checkpoint-2") in json.loads((out / "metrics.json").read_text())["train"]["masking_note"]


def test_pretrain_killed_and_run_again_equals_the_uninterrupted_run(data, tmp_path, monkeypatch):
    import attnkit.training.pretrain as pretrain

    ref = tmp_path / "ref"
    assert main(pretrain_args(data, ref)) == 0

    class Killed(pretrain.Trainer):  # Ctrl-C after the 4th of the 9 steps (pretrain keeps no checkpoints)
        def training_step(self, *a, **k):
            if self.state.global_step == 4:
                raise KeyboardInterrupt
            return super().training_step(*a, **k)

    out = tmp_path / "run"
    with monkeypatch.context() as m:
        m.setattr(pretrain, "Trainer", Killed)
        assert main(pretrain_args(data, out)) == 130
    assert not (out / "model").exists()
    assert main(pretrain_args(data, out)) == 0
    assert_same_weights(ref, out)
    a, b = (json.loads((d / "metrics.json").read_text()) for d in (ref, out))
    assert len(a["loss_history"]) == 9 and b["loss_history"] == a["loss_history"]
    assert (b["mlm_loss"], b["train_loss"]) == (a["mlm_loss"], a["train_loss"])


def test_adapt_killed_between_its_metrics_and_its_tidy_up_is_tidied_when_run_again(adapted, tiny_bert, data, tmp_path,
                                                                                   monkeypatch, caplog, capsys):
    """As ``train``: killed after metrics.json (here, in the tidy-up, after one checkpoint's weights were deleted), the
    rerun removes the checkpoints the run wrote and draws its curves, says so, and keeps the model; a third run changes
    nothing."""
    from attnkit.training import adapt
    from helpers import snapshot_without_lock

    out = tmp_path / "run"
    with monkeypatch.context() as m:
        m.setattr(adapt, "finish_run", lambda *a, **k: False)  # the kill: nothing after metrics.json
        assert main(adapt_args(tiny_bert, data, out)) == 0
    ckpts = sorted(out.glob("checkpoint-*"))
    assert (out / "metrics.json").is_file() and ckpts and not (out / "curves.png").exists()
    (ckpts[-1] / "model.safetensors").unlink()  # the tidy-up had begun on it
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        assert main(adapt_args(tiny_bert, data, out)) == 0
    assert "adapt run" in caplog.text and "stopped after its metrics.json and before its tidy-up" in caplog.text
    assert not list(out.glob("checkpoint-*")) and (out / "curves.png").is_file() and (out / "curves.svg").is_file()
    assert_same_weights(adapted, out)
    before = snapshot_without_lock(out)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        assert main(adapt_args(tiny_bert, data, out)) == 0
    assert "before its tidy-up" not in caplog.text and snapshot_without_lock(out) == before
    assert "already complete: nothing was changed" in capsys.readouterr().out
