"""Mixed precision: ``attnkit train --bf16`` trains under bfloat16 autocast (weights and optimizer stay float32), is
recorded with the run, and a finished float32 run is never silently taken for a bf16 one; ``--fp16`` needs CUDA."""

import json

import pytest
import torch

from attnkit.attention.spec import AttentionSpec
from attnkit.cli import main

pytestmark = pytest.mark.slow


def args(model, data, out, *extra):
    return ["train", "--task", "csv", "--data-dir", str(data), "--model", str(model), "--output-dir", str(out), "--seed", "3",
            "--batch-size", "16", "--lr", "3e-3", "--max-length", "16", "--no-heatmap", "--max-steps", "4", "--eval-steps", "4", "--logging-steps", "1", *extra]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    from conftest import write_tiny_sentiment

    return write_tiny_sentiment(tmp_path_factory.mktemp("prec") / "data")


@pytest.mark.parametrize("attention", ["softmax", "entmax15"])
def test_bf16_trains_under_autocast_keeps_float32_weights_and_is_recorded(tiny_bert, data, tmp_path, attention):
    from attnkit.models.build import load_model

    runs = {}
    for prec in ("fp32", "bf16"):
        out = tmp_path / prec
        assert main(args(tiny_bert, data, out, "--attention", attention, *(["--bf16"] if prec == "bf16" else []))) == 0
        assert json.loads((out / "run_config.json").read_text())["precision"] == prec
        runs[prec] = json.loads((out / "metrics.json").read_text())
        model = load_model(out / "model")
        assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights, saved as float32
        assert all(torch.isfinite(p).all() for p in model.parameters())
    loss = {p: [h["loss"] for h in m["log_history"] if "loss" in h] for p, m in runs.items()}
    # the same seed, data and steps: bf16 rounds the matrix products, so the losses are close but not equal
    assert loss["fp32"] and len(loss["fp32"]) == len(loss["bf16"])
    assert loss["fp32"] != loss["bf16"]
    assert all(abs(a - b) < 0.05 for a, b in zip(loss["fp32"], loss["bf16"]))


def test_a_finished_float32_run_is_not_taken_for_a_bf16_one(tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(args(tiny_bert, data, out, "--attention", "softmax")) == 0
    capsys.readouterr()
    assert main(args(tiny_bert, data, out, "--attention", "softmax", "--bf16")) == 2
    err = capsys.readouterr().err
    assert "finished run with other settings" in err and "--bf16/--fp16: 'fp32' there, 'bf16' now" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="fp16 runs where CUDA is")
def test_fp16_without_cuda_is_refused_in_one_line(tiny_bert, data, tmp_path, capsys):
    assert main(args(tiny_bert, data, tmp_path / "run", "--attention", "softmax", "--fp16")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--fp16" in err and "CUDA" in err and "--bf16" in err
    assert not (tmp_path / "run" / "run_config.json").exists()


def test_bf16_and_fp16_are_one_choice(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--bf16", "--fp16"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_sparse_maps_under_bf16_autocast_are_exact_in_float32():
    # the normaliser sees bf16 scores under autocast and computes in float32: rows sum to 1, real zeros, no NaN
    spec = AttentionSpec("entmax15")
    scores = torch.randn(2, 3, 5, 7, dtype=torch.bfloat16)
    scores[0, 0, 0] = float("-inf")  # a fully masked row
    with torch.autocast("cpu", dtype=torch.bfloat16):
        w = spec.normalise(scores)
    assert not torch.isnan(w).any() and (w[0, 0, 0] == 0).all()
    sums = w.float().sum(-1)
    sums[0, 0, 0] = 1.0
    assert torch.allclose(sums, torch.ones_like(sums), atol=1e-2) and (w == 0).any()
