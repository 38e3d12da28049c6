"""Nothing lost, round 2 (issue 36): attnkit deletes or replaces only what it can prove it wrote (a folder is a run by
attnkit's record of it, never by a model/ or checkpoint-* inside), damaged runs are refused, every write can fail
cleanly. Each test writes the user's files first and checks them byte for byte afterwards."""

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from attnkit.cli import main
from attnkit.runfiles.names import FOLDER_MANIFEST, RUN_RECORD
from attnkit.runfiles.lock import folder_lock
from attnkit.runfiles.ownership import written_by_attnkit
from helpers import the_error, write_tiny_rte
from helpers import error_line, four_step_train_args, snapshot_without_lock

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def untimed(d: dict) -> dict:
    return {k: v for k, v in d.items() if "runtime" not in k and "per_second" not in k and not k.endswith("_time")}


def leftovers(out: Path) -> list[str]:
    """Half-written or temporary entries attnkit might leave in a run folder."""
    return sorted(p.name for p in out.iterdir() if ".tmp" in p.name or ".old-" in p.name or p.name.startswith(".incomplete"))


@pytest.fixture(scope="module")
def reference(tiny_bert, data, tmp_path_factory) -> dict:
    """The metrics of the run the tests below break and rerun, trained once without a fault."""
    out = tmp_path_factory.mktemp("rel2_ref") / "run"
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    return json.loads((out / "metrics.json").read_text())


@pytest.fixture(scope="module")
def finished(tiny_bert, data, tmp_path_factory) -> Path:
    """A finished run (4 steps), to be copied by tests that damage it."""
    out = tmp_path_factory.mktemp("rel2_done") / "run"
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    return out


def copy_run(run: Path, where: Path) -> Path:
    shutil.copytree(run, where, symlinks=True)
    return where


def same_metrics(m: dict, reference: dict) -> None:
    assert untimed(m["validation"]) == untimed(reference["validation"])
    assert m["train"]["train_loss"] == pytest.approx(reference["train"]["train_loss"], rel=1e-6)
    assert m["best_step"] == reference["best_step"]


# ----------------------------------------------------------------------------- 1. a run is proven by attnkit's record


@pytest.mark.parametrize("mine", ["model/README.md", "checkpoint-mine/n", "checkpoint-3/notes.txt"])
def test_a_folder_with_a_model_or_checkpoint_folder_of_the_users_is_not_a_run(tiny_bert, data, tmp_path, capsys, mine):
    out = tmp_path / "mine"
    (out / mine).parent.mkdir(parents=True)
    (out / mine).write_text("notes of mine\n")
    before = snapshot_without_lock(out)
    assert main(four_step_train_args(tiny_bert, data, out)) == 2
    error_line(capsys, str(out), "holds no attnkit run", RUN_RECORD)
    assert snapshot_without_lock(out) == before and not (out / RUN_RECORD).exists()
    # --no-resume does not make it a run either: nothing is moved
    assert main(four_step_train_args(tiny_bert, data, out, "--no-resume")) == 2
    assert snapshot_without_lock(out) == before and not list(out.glob(".replaced-*"))


def test_the_tidy_up_and_a_longer_run_keep_what_the_user_put_in_a_run(tiny_bert, data, tmp_path, capsys, caplog):
    out = tmp_path / "r"
    base = ["--max-steps", "2", "--eval-steps", "2"]
    assert main(four_step_train_args(tiny_bert, data, out, *base, "--keep-checkpoints")) == 0
    # the user's things inside the run: a note in model/, a folder of their own, a copied checkpoint, and a folder
    # named as the Trainer names its checkpoints
    (out / "model" / "NOTE.md").write_text("which data I used\n")
    (out / "checkpoint-mine").mkdir()
    (out / "checkpoint-mine" / "n").write_text("x\n")
    shutil.copytree(out / "checkpoint-2", out / "checkpoint-2-backup")
    (out / "checkpoint-9").mkdir()
    (out / "checkpoint-9" / "mine.txt").write_text("a folder of mine\n")
    old_model = snapshot_without_lock(out / "model")
    (out / "checkpoint-2" / "MY-NOTES.txt").write_text("the run's checkpoint, with a note of mine in it\n")
    annotated = snapshot_without_lock(out / "checkpoint-2")
    (out / "curves.png").write_bytes(b"my own picture")  # put where the run draws its curves
    kept = {n: snapshot_without_lock(out / n) for n in ("checkpoint-mine", "checkpoint-2-backup", "checkpoint-9")}
    capsys.readouterr()
    # the same run, longer, without --keep-checkpoints: trained on from checkpoint-2 (saving at steps 4 and 6: the
    # oldest checkpoints are rotated out on the way), then tidied up
    assert main(four_step_train_args(tiny_bert, data, out, "--max-steps", "6", "--eval-steps", "2")) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert "does not list checkpoint-9), and the Trainer writes folders of that name: moved aside whole" in caplog.text
    assert "held files attnkit did not write: moved aside whole" in caplog.text
    for n in ("checkpoint-mine", "checkpoint-2-backup"):
        assert snapshot_without_lock(out / n) == kept[n]  # left where they are
    # the Trainer would have written into checkpoint-9's name: moved aside whole, not written into or deleted
    (nine,) = out.glob(".replaced-*/checkpoint-9")
    assert snapshot_without_lock(nine) == kept["checkpoint-9"]
    # the model folder held the user's note: the whole earlier model moved aside with it, the new one written
    (model,) = out.glob(".replaced-*/model")
    assert snapshot_without_lock(model) == old_model and (model / "NOTE.md").read_text() == "which data I used\n"
    assert not (out / "model" / "NOTE.md").exists() and (out / "model" / "model.safetensors").is_file()
    # the checkpoints this run wrote are gone, and its record lists none
    assert not [n for n in ("checkpoint-2", "checkpoint-4", "checkpoint-6") if (out / n).exists()]
    # ... deleted, but for the one the user wrote a note into: moved aside whole
    assert sorted(p.name for p in out.glob(".replaced-*/checkpoint-*")) == ["checkpoint-2", "checkpoint-9"]
    (two,) = out.glob(".replaced-*/checkpoint-2")
    assert snapshot_without_lock(two) == annotated
    assert [p.read_bytes() for p in out.glob(".replaced-*/curves.png")] == [b"my own picture"]
    assert written_by_attnkit(out / "curves.png")
    rec = json.loads((out / RUN_RECORD).read_text())
    assert rec["checkpoints"] == [] and rec["finished"] is True
    assert json.loads((out / "metrics.json").read_text())["train"]["epoch"] > 0


def test_a_model_folder_is_replaced_only_as_attnkit_wrote_it(tiny_bert, tmp_path):
    """save_checkpoint: an earlier model folder that holds exactly what its manifest lists is replaced; one with a file
    added or edited is moved aside whole; one without a manifest (not attnkit's) too."""
    from attnkit.models.checkpoint import load_tokenizer, save_checkpoint
    from transformers import AutoModel

    model, tok = AutoModel.from_pretrained(tiny_bert), load_tokenizer(str(tiny_bert))
    out = tmp_path / "m"
    save_checkpoint(model, out, tok)
    assert (out / FOLDER_MANIFEST).is_file()
    save_checkpoint(model, out, tok)  # unchanged since: replaced, nothing set aside
    assert not list(tmp_path.glob(".replaced-*")) and leftovers(tmp_path) == []
    (out / "config.json").write_text((out / "config.json").read_text() + " ")  # edited by hand
    edited = snapshot_without_lock(out)
    save_checkpoint(model, out, tok)
    (aside,) = tmp_path.glob(".replaced-*/m")
    assert snapshot_without_lock(aside) == edited
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "weights.bin").write_bytes(b"\0\1\2")
    save_checkpoint(model, theirs, tok)
    assert [p.read_bytes() for p in tmp_path.glob(".replaced-*/theirs/weights.bin")] == [b"\0\1\2"]
    assert leftovers(tmp_path) == []


# ----------------------------------------------------------------------------- 2. a damaged run is refused


@pytest.mark.parametrize("damage,named", [
    ("rm model/config.json", "model/config.json is missing"),
    ("rm -r model", "model/ is missing"),
    ("rm metrics.json", "metrics.json are missing"),
    ("garble run_config.json", "run_config.json are unreadable"),
    ("truncate model/model.safetensors", "model.safetensors is damaged or truncated"),
])
@pytest.mark.parametrize("change", [[], ["--seed", "8"], ["--lr", "5e-5"]])
def test_a_damaged_run_is_refused_not_retrained(finished, data, tiny_bert, tmp_path, capsys, damage, named, change):
    out = copy_run(finished, tmp_path / "r")
    verb, what = damage.split(" ", 1) if not damage.startswith("rm -r") else ("rmtree", damage[6:])
    target = out / what
    if verb == "rm":
        target.unlink()
    elif verb == "rmtree":
        shutil.rmtree(target)
    elif verb == "garble":
        target.write_text("{ not json")
    else:
        target.write_bytes(target.read_bytes()[:500])
    before = snapshot_without_lock(out)
    assert main(four_step_train_args(tiny_bert, data, out, *change)) == 2
    line = error_line(capsys, "holds a damaged run", named, "--no-resume", "move it aside", str(out))
    if change and "run_config" not in damage:
        assert change[0] in line  # the settings that differ are named too, where they can be read
    assert snapshot_without_lock(out) == before


def test_no_resume_moves_a_damaged_run_aside_whole(finished, data, tiny_bert, tmp_path, capsys):
    out = copy_run(finished, tmp_path / "r")
    (out / "model" / "config.json").unlink()
    before = snapshot_without_lock(out)
    assert main(four_step_train_args(tiny_bert, data, out, "--seed", "8", "--no-resume")) == 0
    (aside,) = out.glob(".replaced-*")
    assert snapshot_without_lock(aside) == before
    assert json.loads((out / "run_config.json").read_text())["seed"] == 8


@pytest.mark.parametrize("record", ["{ garbled", '{"written_by": "attnkit train", "checkpoints": "checkpoint-2"}'])
def test_an_unreadable_record_is_named_and_no_resume_moves_the_run_aside(finished, data, tiny_bert, tmp_path, capsys, record):
    out = copy_run(finished, tmp_path / "r")
    (out / RUN_RECORD).write_text(record)
    before = snapshot_without_lock(out)
    assert main(four_step_train_args(tiny_bert, data, out)) == 2
    error_line(capsys, str(out / RUN_RECORD), "unreadable", "--no-resume")
    assert snapshot_without_lock(out) == before
    assert main(four_step_train_args(tiny_bert, data, out, "--no-resume")) == 0
    (aside,) = out.glob(".replaced-*")
    assert snapshot_without_lock(aside) == before


def test_a_run_is_known_by_its_record_only(tmp_path):
    from attnkit.training.run_folder import is_run_folder

    (tmp_path / "model").mkdir()
    (tmp_path / "checkpoint-2").mkdir()
    (tmp_path / "metrics.json").write_text("{}")
    (tmp_path / "run_config.json").write_text("{}")
    assert not is_run_folder(tmp_path)
    (tmp_path / RUN_RECORD).write_text(json.dumps({"written_by": "attnkit train", "checkpoints": []}))
    assert is_run_folder(tmp_path)


# ----------------------------------------------------------------------------- 3. outputs


@pytest.fixture(scope="module")
def rte_run(tiny_bert, tmp_path_factory):
    root = write_tiny_rte(tmp_path_factory.mktemp("rel2_rte"))
    out = root / "run"
    assert main(["train", "--task", "rte", "--data-dir", str(root), "--model", str(tiny_bert), "--output-dir", str(out),
                 "--batch-size", "8", "--max-length", "16", "--no-heatmap", "--max-steps", "1"]) == 0
    return root, out


def test_a_glue_submission_file_of_the_users_is_refused(rte_run, tmp_path, capsys):
    root, run = rte_run
    s = tmp_path / "s"
    s.mkdir()
    (s / "RTE.tsv").write_text("index\tprediction\n0\tentailment\n")  # the user's own submission
    before = snapshot_without_lock(s)
    predict = ["predict", "--model", str(run), "--task", "rte", "--data-dir", str(root), "--split", "test"]
    assert main(predict + ["--output-dir", str(s)]) == 2
    error_line(capsys, str(s / "RTE.tsv"), "was not written by attnkit")
    assert snapshot_without_lock(s) == before
    # into a new folder: written; the same command again replaces attnkit's own file
    assert main(predict + ["--output-dir", str(tmp_path / "t")]) == 0
    first = (tmp_path / "t" / "RTE.tsv").read_bytes()
    assert first.startswith(b"index\tprediction\n") and len(first.splitlines()) == 4
    assert main(predict + ["--output-dir", str(tmp_path / "t")]) == 0
    assert (tmp_path / "t" / "RTE.tsv").read_bytes() == first
    # once the user edits it, it is theirs
    with open(tmp_path / "t" / "RTE.tsv", "a") as f:
        f.write("# checked by hand\n")
    edited = (tmp_path / "t" / "RTE.tsv").read_bytes()
    assert main(predict + ["--output-dir", str(tmp_path / "t")]) == 2
    assert (tmp_path / "t" / "RTE.tsv").read_bytes() == edited


def test_the_same_predict_split_twice_replaces_its_own_output(rte_run, capsys):
    root, run = rte_run
    predict = ["predict", "--model", str(run), "--data-dir", str(root), "--split", "validation"]
    assert main(predict) == 0
    out = run / "model" / "predictions_rte_validation.jsonl"
    first = out.read_bytes()
    assert main(predict) == 0  # attnkit's own earlier output: replaced, not refused
    assert out.read_bytes() == first and len(first.splitlines()) == 4
    out.write_text('{"idx": 0, "prediction": "mine"}\n')
    assert main(predict) == 2
    error_line(capsys, str(out), "was not written by attnkit")
    assert out.read_text() == '{"idx": 0, "prediction": "mine"}\n'


def test_a_command_writing_into_a_run_folder_holds_its_lock_or_refuses(finished, data, tiny_bert, tmp_path, capsys):
    out = copy_run(finished, tmp_path / "r")
    before = snapshot_without_lock(out)
    with folder_lock(out):  # as a training run (say, --no-resume moving the run aside) holds it
        assert main(["evaluate", "--model", str(out), "--data-dir", str(data)]) == 2
        error_line(capsys, "another attnkit process is writing", str(out))
    assert snapshot_without_lock(out) == before
    # and while a command writes there, a training run on the folder is refused: the command holds the lock
    from attnkit.cli import predict_commands as commands

    seen = []
    real = commands.write_json_atomic

    def write_and_try_training(path, obj):
        seen.append(main(four_step_train_args(tiny_bert, data, out, "--no-resume")))
        real(path, obj)

    commands.write_json_atomic, saved = write_and_try_training, commands.write_json_atomic
    try:
        assert main(["evaluate", "--model", str(out), "--data-dir", str(data)]) == 0
    finally:
        commands.write_json_atomic = saved
    assert seen == [2] and "another attnkit process is writing" in capsys.readouterr().err
    assert (out / "model" / "eval_csv_validation.json").is_file() and not list(out.glob(".replaced-*"))


# ----------------------------------------------------------------------------- 5. every write can fail cleanly


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
    same_metrics(json.loads((out / "metrics.json").read_text()), reference)
    assert not list(out.glob("checkpoint-*"))


def test_a_final_save_killed_half_way_is_tidied_by_the_rerun(tiny_bert, data, tmp_path, reference):
    out = tmp_path / "r"
    code = (
        "import os, signal, sys\n"
        "import attnkit.models.checkpoint as build\n"
        "real = build._write_checkpoint\n"
        "def killed(model, tmp, *a, **k):\n"
        "    real(model, tmp, *a, **k)\n"
        "    if tmp.name.startswith('.model.tmp-'):\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "build._write_checkpoint = killed\n"
        "from attnkit.cli import main\n"
        f"sys.exit(main({four_step_train_args(tiny_bert, data, out)!r}))\n"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == -9, r.stderr[-2000:]
    assert [p.name.split("-")[0] for p in out.glob(".model.tmp-*")] == [".model.tmp"]  # what a kill leaves
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    assert leftovers(out) == [] and (out / "model" / "model.safetensors").is_file()
    same_metrics(json.loads((out / "metrics.json").read_text()), reference)


def test_the_cli_error_handling_covers_quieting_the_libraries(finished, capsys, monkeypatch):
    cli_main = sys.modules["attnkit.cli.main"]  # (attnkit.cli.main is also the name of the function)

    def broken():
        raise OSError(errno.EACCES, "Permission denied", "/somewhere/hf-cache")

    monkeypatch.setattr(cli_main, "_quiet_libraries", broken)
    assert main(["predict", "--model", str(finished), "a fine film"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and "/somewhere/hf-cache" in err


# ----------------------------------------------------------------------------- 6. no silent reinterpretation


def test_a_resumed_run_reports_the_whole_runs_train_loss(tiny_bert, data, tmp_path, capsys, monkeypatch, reference):
    from attnkit.training import trainer as runs

    real = runs.RunRecorder.on_save

    def killed_after_first_save(self, args_, state, control, **kw):
        real(self, args_, state, control, **kw)
        raise KeyboardInterrupt

    monkeypatch.setattr(runs.RunRecorder, "on_save", killed_after_first_save)
    out = tmp_path / "r"
    assert main(four_step_train_args(tiny_bert, data, out)) == 130
    assert (out / "checkpoint-2" / "trainer_state.json").is_file() and not (out / "metrics.json").exists()
    monkeypatch.undo()
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    m = json.loads((out / "metrics.json").read_text())
    same_metrics(m, reference)  # the mean over all 4 steps, not over the 2 resumed ones
    steps = [h for h in m["log_history"] if "train_loss" in h]
    assert steps and steps[-1]["train_loss"] != pytest.approx(m["train"]["train_loss"], rel=1e-6)


def test_a_corrupt_rng_state_is_named_and_the_run_resumes_from_the_one_before(tiny_bert, data, tmp_path, capsys, caplog):
    out = tmp_path / "r"
    assert main(four_step_train_args(tiny_bert, data, out, "--keep-checkpoints")) == 0
    rng = out / "checkpoint-4" / "rng_state.pth"
    rng.write_bytes(b"garbage, not a torch file")
    damaged = snapshot_without_lock(out / "checkpoint-4")
    capsys.readouterr()
    assert main(four_step_train_args(tiny_bert, data, out, "--keep-checkpoints", "--max-steps", "6")) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert "rng_state.pth is damaged" in caplog.text and "moved aside" in caplog.text
    assert snapshot_without_lock(out / ".incomplete-checkpoint-4") == damaged
    assert json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())["global_step"] == 6


@pytest.mark.parametrize("text", ['{"mine": 1}', '[{"lam": -2}]', "not json at all", '[1, 2]'])
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


@pytest.mark.parametrize("text", ["{}", "not json"])
def test_a_hand_written_sweep_cell_record_is_named(tiny_bert, data, tmp_path, capsys, text):
    cell = tmp_path / "s" / "softmax_seed1"
    cell.mkdir(parents=True)
    (cell / "sweep_cell.json").write_text(text)
    before = snapshot_without_lock(tmp_path / "s")
    assert main(["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(tmp_path / "s"),
                 "--lams", "-2", "--seeds", "1", "--batch-size", "16", "--max-length", "16", "--max-steps", "2"]) == 2
    error_line(capsys, str(cell / "sweep_cell.json"), "not")
    assert snapshot_without_lock(tmp_path / "s") == before


def test_a_warmup_longer_than_the_run_is_refused(tiny_bert, data, tmp_path, capsys):
    assert main(four_step_train_args(tiny_bert, data, tmp_path / "o", "--warmup", "100")) == 2
    error_line(capsys, "--warmup 100: the run has 4 steps")
    assert not (tmp_path / "o" / "run_config.json").exists()


# ----------------------------------------------------------------------------- 8. clear messages


def test_a_fifo_or_a_device_as_file_is_named_so(finished, tmp_path, capsys):
    fifo = tmp_path / "texts"
    os.mkfifo(fifo)
    assert main(["predict", "--model", str(finished), "--file", str(fifo)]) == 2
    line = error_line(capsys, f"--file {fifo} is a named pipe (FIFO), not a regular file")
    assert "does not exist" not in line
    assert main(["predict", "--model", str(finished), "--file", "/dev/null"]) == 2
    error_line(capsys, "--file /dev/null is a character device, not a regular file")
    assert main(["predict", "--model", str(finished), "--file", str(tmp_path / "nothing.txt")]) == 2
    error_line(capsys, "does not exist")
