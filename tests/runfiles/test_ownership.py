"""attnkit replaces only what it can prove it wrote: a user's side file in a run folder is refused, a model folder is
replaced only as its manifest lists it, a user's sweep.md is moved aside, a second process on one run folder stops at
once, and errors name the user's path, never a temporary file."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from attnkit.cli import main
from attnkit.errors import UserError
from attnkit.runfiles.atomic import write_text_atomic
from attnkit.runfiles.lock import folder_lock
from attnkit.runfiles.names import FOLDER_MANIFEST, LOCK_FILE
from attnkit.runfiles.ownership import check_side_file, written_by_attnkit
from helpers import (
    copy_run,
    error_line,
    four_step_train_args,
    leftovers,
    only_stderr_line,
    snapshot_without_lock,
    two_step_train_args,
)

pytestmark = pytest.mark.slow


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


def test_errors_name_the_users_path_not_a_temporary_file(tmp_path):
    (tmp_path / "f").write_text("a file where a folder should be")
    with pytest.raises(UserError) as e:
        write_text_atomic(tmp_path / "f" / "x.json", "{}")
    assert str(tmp_path / "f" / "x.json") in str(e.value) and ".tmp-" not in str(e.value)
    with pytest.raises(UserError, match="cannot write"):
        write_text_atomic(tmp_path, "{}")  # a folder
    assert not list(tmp_path.glob(".*tmp*"))


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


def test_a_runs_or_sweeps_own_file_is_never_replaced_through_a_link_or_beside_another_output(tmp_path):
    """A symlink to a sweep's sweep.json named as an output replaced the sweep's record (sweep 2026-11-28o E);
    faithfulness's curves beside --output swe/sweep_attention.json or r1/curves.json replaced the sweep's or run's
    figure (G); a side file that is a run's own metrics.json was called "not written by attnkit" (F). Every such
    path is refused, naming the run or sweep it belongs to."""
    from attnkit.runfiles.names import RUN_RECORD
    from attnkit.runfiles.ownership import check_output_file, check_side_file, own_file_of

    run, sweep = tmp_path / "r1", tmp_path / "sw"
    run.mkdir()
    (run / RUN_RECORD).write_text(json.dumps({"written_by": "attnkit train"}))
    (run / "metrics.json").write_text(json.dumps({"written_by": "attnkit train", "accuracy": 0.5}))
    (run / "curves.png").write_bytes(b"png")
    sweep.mkdir()
    (sweep / "sweep.json").write_text(json.dumps([{"seed": 1, "run_dir": str(run), "lam": 0.5}]))
    (sweep / "sweep_attention.png").write_bytes(b"png")
    link = tmp_path / "lg.json"
    link.symlink_to(sweep / "sweep.json")
    assert own_file_of(link) == ("sweep", sweep.resolve()) and own_file_of(run / "curves.png") == ("run", run.resolve())
    assert own_file_of(tmp_path / "lg.json") is not None and own_file_of(run / RUN_RECORD) == ("run", run.resolve())
    with pytest.raises(UserError, match=rf"^--output {link} \(a link to {sweep.resolve() / 'sweep.json'}\) is one of the "
                                        rf"files the sweep {sweep.resolve()} keeps of itself \(sweep.json\)"):
        check_output_file(link, "--output")
    for side, owner in ((sweep / "sweep_attention.png", f"sweep {sweep.resolve()}"), (run / "curves.png", f"run {run.resolve()}"),
                        (run / "metrics.json", f"run {run.resolve()}")):
        with pytest.raises(UserError, match=rf"^the curves beside --output x would replace {side}, which is one of the "
                                            rf"files the {owner} keeps of itself \({side.name}\): no command's output"):
            check_side_file(side, "the curves beside --output x")
    assert (sweep / "sweep.json").read_text().startswith("[") and (run / "curves.png").read_bytes() == b"png"
    # a model's file inside the run (its tokenizer, its record): the run's, not "not written by attnkit" (sweep -28s BA)
    from attnkit.runfiles.ownership import write_folder_manifest

    (run / "model").mkdir()
    for name in ("tokenizer.json", "attnkit_run.json"):
        (run / "model" / name).write_text(json.dumps({"written_by": "attnkit train"}) if name.startswith("attnkit") else "{}")
    write_folder_manifest(run / "model", "attnkit train")  # (the model folder's list of the files attnkit wrote)
    (run / "model" / "notes.json").write_text("{}")  # the user's, put there since: called so
    with pytest.raises(UserError, match=rf"^{run / 'model' / 'notes.json'} exists and was not written by attnkit"):
        check_side_file(run / "model" / "notes.json", "the JSON beside --output x")
    for name in ("tokenizer.json", "attnkit_run.json"):
        with pytest.raises(UserError, match=rf"^the JSON beside --output x would replace {run / 'model' / name}, a file of "
                                            rf"the attnkit run {run.resolve()} that attnkit did not write as an output"):
            check_side_file(run / "model" / name, "the JSON beside --output x")
    # a file of the same name elsewhere, or attnkit's own earlier output, is still an output's to replace
    (tmp_path / "curves.png").write_bytes(b"x")
    assert own_file_of(tmp_path / "curves.png") is None


#: one process recording its own outputs in a shared folder's ledger, many times over
_RECORDER = r"""
import sys
from pathlib import Path
from attnkit.runfiles.ownership import record_output
folder, me = Path(sys.argv[1]), sys.argv[2]
for i in range(40):
    f = folder / f"{me}-{i}.tsv"
    f.write_text(f"{me} {i}\n")
    record_output(f, "attnkit predict")
"""


def test_commands_recording_outputs_in_one_folder_at_once_keep_every_entry(tmp_path):
    """record_output read, changed and rewrote the folder's ledger with no lock: two commands finishing together could
    drop each other's entry, and a later run then refused its own file as not attnkit's (sweep 2026-11-28v, code
    reading). Four processes recording 40 files each: every file listed."""
    import json
    import subprocess
    import sys

    from attnkit.runfiles.names import OUTPUT_LEDGER

    procs = [subprocess.Popen([sys.executable, "-c", _RECORDER, str(tmp_path), f"p{n}"]) for n in range(4)]
    assert all(p.wait(timeout=300) == 0 for p in procs)
    files = json.loads((tmp_path / OUTPUT_LEDGER).read_text())["files"]
    assert sorted(files) == sorted(f"p{n}-{i}.tsv" for n in range(4) for i in range(40))


def test_an_output_that_cannot_be_marked_as_attnkits_is_said(tmp_path, monkeypatch, caplog):
    """A full disk after a submission file was written left it unmarked without a word; the next run then refused it
    as "not written by attnkit" (sweep s23c). Now one line says so when it happens."""
    import errno
    import logging

    from attnkit.runfiles import ownership
    from attnkit.runfiles.names import OUTPUT_LEDGER

    f = tmp_path / "RTE.tsv"
    f.write_text("index\tprediction\n0\tentailment\n")

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ownership, "write_json_atomic", full)
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        ownership.record_output(f, "attnkit predict")
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and f"{f} is written, but could not be marked as attnkit's in {tmp_path / OUTPUT_LEDGER} " \
                               "(No space left on device)" in said[0], said
    assert f.read_text() == "index\tprediction\n0\tentailment\n" and not (tmp_path / OUTPUT_LEDGER).exists()
