"""A folder is a run by attnkit's record of it, never by a model/ or checkpoint-* inside: damaged or unreadable runs are
refused and --no-resume moves them aside whole; a resumed run reports the whole run's train loss and resumes past a
corrupt RNG state; the user's files in a run are kept byte for byte."""

import json
import shutil

import pytest

from attnkit.cli import main
from attnkit.runfiles.names import RUN_RECORD
from attnkit.runfiles.ownership import written_by_attnkit
from helpers import copy_run, error_line, four_step_train_args, same_metrics, snapshot_without_lock, train_args

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reference(tiny_bert, data, tmp_path_factory) -> dict:
    """The metrics of the run the tests below break and rerun, trained once without a fault."""
    out = tmp_path_factory.mktemp("rel2_ref") / "run"
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    return json.loads((out / "metrics.json").read_text())


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


def kill_after_save(monkeypatch, step: int | None = None) -> None:
    """Ctrl-C right after a checkpoint is saved: the first one, or the one of ``step``."""
    from attnkit.training import trainer as runs

    real = runs.RunRecorder.on_save

    def killed(self, args_, state, control, **kw):
        real(self, args_, state, control, **kw)
        if step is None or state.global_step == step:
            raise KeyboardInterrupt

    monkeypatch.setattr(runs.RunRecorder, "on_save", killed)


def test_a_resumed_run_reports_the_whole_runs_train_loss(tiny_bert, data, tmp_path, capsys, monkeypatch, reference):
    kill_after_save(monkeypatch)
    out = tmp_path / "r"
    assert main(four_step_train_args(tiny_bert, data, out)) == 130
    assert (out / "checkpoint-2" / "trainer_state.json").is_file() and not (out / "metrics.json").exists()
    monkeypatch.undo()
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    m = json.loads((out / "metrics.json").read_text())
    same_metrics(m, reference)  # the mean over all 4 steps, not over the 2 resumed ones, in the log's last entry too
    # to the last bit: the loss is summed step by step in float64 from where the checkpoint left it (the Trainer's
    # float32 sum of steps 1-4, split at the checkpoint into 1-2 and 3-4, differed in the eighth digit)
    assert m["train"]["train_loss"] == reference["train"]["train_loss"]
    steps = [h for h in m["log_history"] if "train_loss" in h]
    assert len(steps) == 1 and steps[-1]["train_loss"] == m["train"]["train_loss"]


def test_a_run_resumed_mid_way_ends_with_the_uninterrupted_runs_train_loss_to_the_last_bit(tiny_bert, data, tmp_path, monkeypatch):
    # six steps, a checkpoint every 2: the Trainer's float32 sum of the steps between two log steps, split at the
    # checkpoint a resumed run starts from, ended 2e-8 away (0.69507734 against 0.69507736 here); attnkit sums each
    # step's loss in float64 from where the checkpoint left it, so both runs add the same numbers in the same order
    six = ("--max-steps", "6", "--eval-steps", "2")
    assert main(train_args(tiny_bert, data, tmp_path / "ref", *six)) == 0
    want = json.loads((tmp_path / "ref" / "metrics.json").read_text())
    for step in (2, 4):
        out = tmp_path / f"killed-{step}"
        with monkeypatch.context() as m:
            kill_after_save(m, step)
            assert main(train_args(tiny_bert, data, out, *six)) == 130
        assert main(train_args(tiny_bert, data, out, *six)) == 0
        got = json.loads((out / "metrics.json").read_text())
        assert got["train"]["train_loss"] == want["train"]["train_loss"]
        assert [h.get("train_loss") for h in got["log_history"]] == [h.get("train_loss") for h in want["log_history"]]
        # the closing entry's time and speeds are the whole run's, as its train record says (they were the resumed
        # process's alone: sweep s25)
        (closing,) = [h for h in got["log_history"] if "train_runtime" in h]
        for k in ("train_runtime", "train_steps_per_second", "train_samples_per_second"):
            assert closing[k] == got["train"][k], (k, closing, got["train"])


def test_a_run_killed_after_its_last_checkpoint_resumes_to_the_same_metrics(tiny_bert, data, tmp_path, monkeypatch, reference):
    kill_after_save(monkeypatch, step=4)
    out = tmp_path / "r"
    assert main(four_step_train_args(tiny_bert, data, out)) == 130
    assert (out / "checkpoint-4" / "trainer_state.json").is_file() and not (out / "metrics.json").exists()
    monkeypatch.undo()
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    m = json.loads((out / "metrics.json").read_text())
    same_metrics(m, reference)  # the closing log entry too, and no timing key the uninterrupted run lacks
    assert set(m["validation"]) == set(reference["validation"])


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


def stopped_after_first_save(monkeypatch, args: list[str]) -> None:
    """``attnkit args`` stopped by Ctrl-C right after its first checkpoint is saved (exit 130)."""
    with monkeypatch.context() as m:
        kill_after_save(m)
        assert main(args) == 130


def test_a_base_model_replaced_between_a_kill_and_the_resume_is_refused(tiny_bert, data, tmp_path, capsys, monkeypatch):
    """`train --model ad_x` killed, `ad_x` adapted again (--no-resume), the train rerun: it resumed from checkpoints
    grown from the old model and recorded the new one's adapt record (sweep 2026-11-27h). The run records what its
    local --model folder held when it started; a resume from another is refused, naming it and the way out. A copy of
    the same model (new times, the same files) and an evaluate output written into it resume as before."""
    import shutil

    base = tmp_path / "base"
    shutil.copytree(tiny_bert, base)
    out = tmp_path / "r"
    stopped_after_first_save(monkeypatch, four_step_train_args(base, data, out))
    assert json.loads((out / ".attnkit-run.json").read_text())["base"]["config.json"]
    (base / "eval_csv_validation.json").write_text("{}")  # what evaluate writes into a model folder: not the model
    moved = tmp_path / "moved"
    shutil.copytree(base, moved, copy_function=shutil.copy)  # every mtime new, the same files
    shutil.rmtree(base)
    moved.rename(base)
    before = snapshot_without_lock(out)
    cfg = json.loads((base / "config.json").read_text())
    (base / "config.json").write_text(json.dumps(cfg | {"attention_probs_dropout_prob": 0.2}))  # another model now
    capsys.readouterr()
    assert main(four_step_train_args(base, data, out)) == 2
    err = capsys.readouterr().err.strip()
    assert f"{out} holds checkpoints of a run that read other inputs: --model {base} is not the model the run started " \
        "from (config.json differ" in err and \
        "add --no-resume" in err and len(err.splitlines()) == 1, err
    assert snapshot_without_lock(out) == before
    (base / "config.json").write_text(json.dumps(cfg))  # restored (its bytes may differ from the saved file's)
    shutil.copy(tiny_bert / "config.json", base / "config.json")
    assert main(four_step_train_args(base, data, out)) == 0


def test_data_edited_between_a_kill_and_the_resume_is_refused(tiny_bert, data, tmp_path, capsys, monkeypatch):
    """The train file edited (one label flipped) after a kill: the resume would have trained the rest of the run on other
    examples than its checkpoints grew on, and recorded neither. The run records a fingerprint of the task's examples
    when it starts; a resume on other ones is refused, naming the data folder and the way out, and changes nothing.
    The same examples written anew (new mtime, the same rows) resume as before."""
    import shutil

    mine = tmp_path / "data"
    shutil.copytree(data, mine)
    out = tmp_path / "r"
    stopped_after_first_save(monkeypatch, four_step_train_args(tiny_bert, mine, out))
    assert len(json.loads((out / ".attnkit-run.json").read_text())["data"]) == 64
    train = mine / "train.csv"
    rows = train.read_text(encoding="utf-8")
    first = rows.splitlines()[1]
    flipped = first.replace("positive", "negative") if first.endswith("positive") else first.replace("negative", "positive")
    train.write_text(rows.replace(first, flipped, 1), encoding="utf-8")
    before = snapshot_without_lock(out)
    capsys.readouterr()
    assert main(four_step_train_args(tiny_bert, mine, out)) == 2
    err = capsys.readouterr().err.strip()
    assert f"the examples of task csv in --data-dir {mine} are not those the run started from" in err and \
        "add --no-resume" in err and len(err.splitlines()) == 1, err
    assert snapshot_without_lock(out) == before
    train.write_text(rows, encoding="utf-8")  # restored: the same examples, a new file
    assert main(four_step_train_args(tiny_bert, mine, out)) == 0
    assert json.loads((out / "metrics.json").read_text())["train"]


def test_a_teacher_trained_again_between_a_kill_and_the_resume_is_refused(tiny_bert, data, tmp_path, capsys, monkeypatch):
    """`train --teacher T` killed, T trained again (--no-resume, another seed), the student rerun: its checkpoints were
    distilled from the earlier teacher. Refused, naming --teacher, as a replaced --model is."""
    teacher = tmp_path / "teacher"
    assert main(train_args(tiny_bert, data, teacher, "--max-steps", "2")) == 0
    out = tmp_path / "r"
    student = four_step_train_args(tiny_bert, data, out, "--attention", "sparsemax", "--teacher", str(teacher))
    stopped_after_first_save(monkeypatch, student)
    assert json.loads((out / ".attnkit-run.json").read_text())["teacher"]
    assert main(train_args(tiny_bert, data, teacher, "--max-steps", "2", "--seed", "5", "--no-resume")) == 0
    before = snapshot_without_lock(out)
    capsys.readouterr()
    assert main(student) == 2
    err = capsys.readouterr().err.strip()
    assert f"--teacher {teacher} is not the model the run started from" in err and "add --no-resume" in err and \
        len(err.splitlines()) == 1, err
    assert snapshot_without_lock(out) == before
