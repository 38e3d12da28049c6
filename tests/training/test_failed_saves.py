"""A save that fails (a checkpoint that cannot be written, a full disk under ulimit, a final save that fails or is
killed half way) leaves nothing half written, says so in one line, and a rerun finishes with the metrics of an
unbroken run."""

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnkit.cli import main
from attnkit.runfiles.names import LOCK_FILE, RUN_RECORD
from helpers import error_line, four_step_train_args, leftovers, same_metrics, the_error

pytestmark = pytest.mark.slow


REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def reference(tiny_bert, data, tmp_path_factory) -> dict:
    """The metrics of the run the tests below break and rerun, trained once without a fault."""
    out = tmp_path_factory.mktemp("rel2_ref") / "run"
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    return json.loads((out / "metrics.json").read_text())


def test_a_checkpoint_that_cannot_be_written_leaves_nothing_half_written(tiny_bert, data, tmp_path, capsys, monkeypatch, reference):
    from transformers import Trainer

    def full(self, output_dir):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Trainer, "_save_rng_state", full)
    out = tmp_path / "r"
    assert main(four_step_train_args(tiny_bert, data, out)) == 2
    error_line(capsys, f"cannot write the checkpoint {out / 'checkpoint-2'}", "No space left on device")
    assert not list(out.glob("checkpoint-*")) and leftovers(out) == [] and not (out / "model").exists()
    assert json.loads((out / RUN_RECORD).read_text())["checkpoints"] == []
    monkeypatch.undo()
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    same_metrics(json.loads((out / "metrics.json").read_text()), reference)


def test_a_full_disk_under_ulimit_is_one_line_and_a_rerun_finishes(tiny_bert, data, tmp_path, reference):
    import resource

    out = tmp_path / "r"
    limit = 150 * 1024  # the tiny model's weights fit, its optimizer state does not

    def cap():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "attnkit.cli", *four_step_train_args(tiny_bert, data, out)], capture_output=True, text=True,
                       env=env, preexec_fn=cap, timeout=600)
    assert r.returncode == 2, r.stderr[-2000:]
    the_error(r.stderr, "cannot write the checkpoint", str(out / "checkpoint-"), "is the disk full")
    assert not list(out.glob("checkpoint-*")) and leftovers(out) == []
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    same_metrics(json.loads((out / "metrics.json").read_text()), reference)


@pytest.mark.parametrize("code,why", [(errno.EFBIG, "File too large"), (errno.EROFS, "Read-only file system")])
def test_a_final_save_that_fails_leaves_no_temporary_folder(tiny_bert, data, tmp_path, capsys, monkeypatch, reference, code, why):
    import attnkit.models.checkpoint as build

    real = build._write_checkpoint

    def half_then_fail(model, tmp, tokenizer=None, extra=None):  # (as root, a folder made read-only is still written)
        real(model, tmp, tokenizer, extra)
        raise OSError(code, why)

    monkeypatch.setattr(build, "_write_checkpoint", half_then_fail)
    out = tmp_path / "r"
    assert main(four_step_train_args(tiny_bert, data, out)) == 2
    error_line(capsys, f"cannot write the model {out / 'model'}", why)
    assert leftovers(out) == [] and not (out / "model").exists() and not (out / "metrics.json").exists()
    monkeypatch.undo()
    # the rerun resumes at the last step (its checkpoints are there) and reports the run's true metrics
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    same_metrics(metrics, reference)
    assert not list(out.glob("checkpoint-*"))
    # its time is the run's, up to that checkpoint (it was this process's, 0.0 s and 0.0 samples/s: sweep -28r AF)
    train = metrics["train"]
    assert train["resumed_from"] == "checkpoint-4" and train["train_runtime"] > 0, train
    assert train["train_samples_per_second"] == pytest.approx(4 * 16 / train["train_runtime"], rel=1e-2)
    assert train["train_steps_per_second"] == pytest.approx(4 / train["train_runtime"], rel=1e-2)


def killed_run(patch: str, args: list[str]) -> None:
    """``attnkit args`` in a fresh process after ``patch`` (Python run first, with os, signal and sys imported), which
    kills it (SIGKILL) at the moment to test."""
    code = f"import os, signal, sys\n{patch}from attnkit.cli import main\nsys.exit(main({args!r}))\n"
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == -9, r.stderr[-2000:]


def test_a_final_save_killed_half_way_is_tidied_by_the_rerun(tiny_bert, data, tmp_path, reference):
    out = tmp_path / "r"
    killed_run(
        "import attnkit.models.checkpoint as build\n"
        "real = build._write_checkpoint\n"
        "def killed(model, tmp, *a, **k):\n"
        "    real(model, tmp, *a, **k)\n"
        "    if tmp.name.startswith('.model.tmp-'):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "build._write_checkpoint = killed\n", four_step_train_args(tiny_bert, data, out))
    assert [p.name.split("-")[0] for p in out.glob(".model.tmp-*")] == [".model.tmp"]  # what a kill leaves
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    assert leftovers(out) == [] and (out / "model" / "model.safetensors").is_file()
    same_metrics(json.loads((out / "metrics.json").read_text()), reference)


def test_a_checkpoint_removal_killed_half_way_is_finished_by_the_rerun(tiny_bert, data, tmp_path, reference):
    """A kill (a second Ctrl-C, kill -9) while a checkpoint was being removed left half of it under its own name,
    without the manifest that proved it the run's: the rerun moved it aside whole as "files this run did not write"
    and kept it (87 MB for the default model) where nothing removes it (sweep 2026-11-27i H3). A checkpoint is renamed
    before it is removed and loses its manifest last: the rerun removes what is left, and finishes as an unbroken run."""
    out = tmp_path / "r"
    killed_run(
        "real = os.unlink\n"
        "def unlink(path, *a, **k):\n"
        "    real(path, *a, **k)\n"
        "    if os.path.basename(os.fsdecode(path)) == 'model.safetensors':\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "os.unlink = unlink\n", four_step_train_args(tiny_bert, data, out))
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    assert leftovers(out) == [] and not list(out.glob(".replaced-*")) and not list(out.glob("checkpoint-*"))
    same_metrics(json.loads((out / "metrics.json").read_text()), reference)


def test_tidy_removes_what_a_cut_removal_left_and_keeps_a_users_file(tmp_path):
    """The rule behind the rerun above: a ``.checkpoint-N.del-<id>`` folder holding only files its manifest lists (some
    gone) is removed; one holding a file attnkit did not write (or one edited since) is moved aside whole, never
    deleted; a folder of that name without attnkit's manifest is left alone."""
    from attnkit.runfiles.ownership import write_folder_manifest
    from attnkit.training.checkpoints import tidy_killed_saves

    def cut(name: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        for f in ("a.bin", "b.json"):
            (d / f).write_text(f)
        write_folder_manifest(d, "attnkit train")
        (d / "a.bin").unlink()  # the removal got this far
        return d

    ours = cut(".checkpoint-2.del-0123abcd")
    mine = cut(".checkpoint-4.del-89abcdef")
    (mine / "notes.txt").write_text("mine")
    stranger = tmp_path / ".checkpoint-6.del-00000000"
    stranger.mkdir()
    (stranger / "x").write_text("x")
    tidy_killed_saves(tmp_path)
    assert not ours.exists() and not mine.exists() and stranger.is_dir()
    kept = list(tmp_path.glob(".replaced-*/.checkpoint-4.del-89abcdef/notes.txt"))
    assert len(kept) == 1 and kept[0].read_text() == "mine"


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_sigterm_and_sighup_stop_a_run_as_ctrl_c_does(tiny_bert, data, tmp_path, reference, sig):
    """What timeout, systemd, Docker and batch schedulers send (SIGTERM) and a closed terminal (SIGHUP) ended a run with
    no word at all (sweep 2026-11-27j J6): now the same one line as Ctrl-C, naming the signal and the way on, exit
    128 + its number; the run resumes to the metrics of an unbroken one."""
    import signal
    import time

    out = tmp_path / "r"
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    p = subprocess.Popen([sys.executable, "-m", "attnkit.cli", *four_step_train_args(tiny_bert, data, out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                         preexec_fn=lambda: signal.signal(getattr(signal, sig), signal.SIG_DFL))  # (the suite under nohup)
    deadline = time.time() + 300
    while not (out / "checkpoint-2" / "trainer_state.json").is_file() and p.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    p.send_signal(getattr(signal, sig))
    _, err = p.communicate(timeout=300)
    assert p.returncode == 128 + getattr(signal, sig), err[-2000:]
    lines = [l for l in err.splitlines() if l.startswith("attnkit train:")]
    assert lines == [f"attnkit train: stopped ({sig}). Run the same command again to resume from the newest complete "
                     f"checkpoint in {out} (add --no-resume to start afresh)."], err[-2000:]
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    same_metrics(metrics, reference)
    # resumed (where the signal came after checkpoint-2 was complete; before, the rerun starts afresh): the run's time,
    # the killed process's to checkpoint-2 and this one's (not this one's alone)
    train = metrics["train"]
    assert train.get("resumed_from", "checkpoint-2") == "checkpoint-2", train
    assert train["train_steps_per_second"] == pytest.approx(4 / train["train_runtime"], rel=1e-2)


def test_a_no_resume_move_killed_half_way_leaves_a_run_a_rerun_can_move(tiny_bert, data, tmp_path, capsys, reference):
    """`train --no-resume` killed while it moved the earlier run aside, entry by entry, left its record moved and its
    other files in place: a folder "not empty and holding no attnkit run", refused by every rerun (sweep 2026-11-27k
    K1). The record moves last (signals held): a kill part-way leaves a run folder, which a rerun with --no-resume
    moves aside too; nothing of the earlier run is lost."""
    from helpers import snapshot

    out = tmp_path / "r"
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    earlier = {k: v for k, v in snapshot(out).items() if k != LOCK_FILE}
    killed_run(
        "real = os.replace\n"
        "def replace(src, dst, *a, **k):\n"
        "    real(src, dst, *a, **k)\n"
        "    if '.replaced-' in os.fsdecode(dst) and os.path.basename(os.fsdecode(src)) == 'metrics.json':\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "os.replace = replace\n", four_step_train_args(tiny_bert, data, out, "--no-resume"))
    assert (out / RUN_RECORD).is_file()  # still a run folder
    assert main(four_step_train_args(tiny_bert, data, out)) == 2  # its metrics moved: a damaged run, with the way out
    assert "--no-resume" in error_line(capsys, str(out))
    assert main(four_step_train_args(tiny_bert, data, out, "--no-resume")) == 0
    same_metrics(json.loads((out / "metrics.json").read_text()), reference)
    moved = {}
    for aside in sorted(out.glob(".replaced-*")):
        moved.update({k: v for k, v in snapshot(aside).items()})
    assert all(moved.get(k) == v for k, v in earlier.items() if not k.startswith(".replaced-")), \
        sorted(k for k, v in earlier.items() if moved.get(k) != v)
