"""A run folder of another command is named as such: train into an adapt run (even with matching settings), adapt,
pretrain and sweep into another command's run are refused, and --no-resume moves the other command's run aside."""

import json
import shutil
from dataclasses import asdict

import pytest

from attnkit.cli import main
from attnkit.runfiles.names import RUN_RECORD
from helpers import batch_8_args, merged, batch_8_train_args, one_line_error_without, snapshot_without_lock


def adapt_args(model, data, out, *extra):
    return merged(["adapt", *batch_8_args(model, data), "--output-dir", str(out), "--max-steps", "2", "--warmup", "0", "--attention", "sparsemax"], extra)


@pytest.fixture(scope="module")
def adapt_run(tiny_bert, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("clear_adapt") / "run"
    assert main(adapt_args(tiny_bert, data, out)) == 0
    return out


@pytest.fixture(scope="module")
def train_run(tiny_bert, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("clear_train") / "run"
    assert main(batch_8_train_args(tiny_bert, data, out)) == 0
    return out


@pytest.mark.slow
def test_train_into_an_adapt_run_names_the_command_that_made_it(adapt_run, tiny_bert, data, capsys):
    before = snapshot_without_lock(adapt_run)
    capsys.readouterr()
    assert main(batch_8_train_args(tiny_bert, data, adapt_run)) == 2
    one_line_error_without(capsys, "holds an adapt run", "made by `attnkit adapt`", "not a run of `attnkit train`", "--no-resume",
                   f"--model {adapt_run}", absent=("other settings", " there, "))
    assert snapshot_without_lock(adapt_run) == before


@pytest.mark.slow
def test_train_into_an_adapt_run_with_matching_settings_is_refused_not_a_key_error(adapt_run, tiny_bert, data, tmp_path, capsys):
    """Every setting the two commands share made equal: the adapt run's metrics must not pass for a train run's."""
    from attnkit.cli.settings import train_config
    from attnkit.cli.parser import build_parser

    out = tmp_path / "run"
    shutil.copytree(adapt_run, out)
    now = asdict(train_config(build_parser().parse_args(batch_8_train_args(tiny_bert, data, out))))
    saved = json.loads((out / "run_config.json").read_text())
    (out / "run_config.json").write_text(json.dumps(saved | now))
    capsys.readouterr()
    assert main(batch_8_train_args(tiny_bert, data, out)) == 2
    one_line_error_without(capsys, "holds an adapt run", "made by `attnkit adapt`")


@pytest.mark.slow
def test_adapt_pretrain_and_sweep_into_another_commands_run(adapt_run, train_run, tiny_bert, data, capsys):
    before = snapshot_without_lock(train_run)
    capsys.readouterr()
    assert main(adapt_args(tiny_bert, data, train_run)) == 2
    one_line_error_without(capsys, "holds a train run", "made by `attnkit train`", "not a run of `attnkit adapt`", absent=("other settings",))
    assert main(["pretrain", "--task", "csv", "--data-dir", str(data), "--output-dir", str(adapt_run), "--max-length", "16"]) == 2
    one_line_error_without(capsys, "holds an adapt run", "not a run of `attnkit pretrain`",
                           absent=("other settings", "--model"))  # pretrain takes no --model (sweep -28p N)
    assert main(["sweep", *batch_8_args(tiny_bert, data), "--output-dir", str(adapt_run), "--lams", "0", "--seeds", "0"]) == 2
    one_line_error_without(capsys, "holds an adapt run", "made by `attnkit adapt`", "not a sweep")
    assert snapshot_without_lock(train_run) == before


@pytest.mark.slow
def test_no_resume_moves_the_other_commands_run_aside(adapt_run, tiny_bert, data, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(adapt_run, out)
    weights = (out / "model" / "model.safetensors").read_bytes()
    assert main(batch_8_train_args(tiny_bert, data, out, "--no-resume")) == 0
    assert json.loads((out / RUN_RECORD).read_text())["written_by"] == "attnkit train"
    (aside,) = out.glob(".replaced-*")
    assert (aside / "model" / "model.safetensors").read_bytes() == weights
    assert json.loads((aside / RUN_RECORD).read_text())["written_by"] == "attnkit adapt"
