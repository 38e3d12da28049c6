"""Mixed precision: ``attnkit train --bf16`` trains under bfloat16 autocast (weights and optimizer stay float32), is
recorded with the run, and a finished float32 run is never silently taken for a bf16 one; ``--fp16`` needs CUDA."""

import json

import pytest
import torch

from attnkit.attention.spec import AttentionSpec
from attnkit.cli import main
from helpers import merged

pytestmark = pytest.mark.slow


def args(model, data, out, *extra):
    return merged(["train", "--task", "csv", "--data-dir", str(data), "--model", str(model), "--output-dir", str(out), "--seed", "3",
            "--batch-size", "16", "--lr", "3e-3", "--max-length", "16", "--no-heatmap", "--max-steps", "4", "--eval-steps", "4", "--logging-steps", "1"], extra)


@pytest.mark.parametrize("attention", ["softmax", "entmax15"])
def test_bf16_trains_under_autocast_keeps_float32_weights_and_is_recorded(tiny_bert, data, tmp_path, attention):
    from attnkit.models.checkpoint import load_model

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
    assert not (tmp_path / "run").exists()  # refused before the run folder was made


def test_bf16_and_fp16_are_one_choice(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--bf16", "--fp16"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_sparse_maps_under_bf16_autocast_are_their_float32_maps_rounded_once():
    # the normaliser sees bf16 scores under autocast and computes in float32: the float32 map of the same scores,
    # rounded to bf16 once; rows sum to 1 (to bf16's rounding), real zeros, a fully masked row all zeros, no NaN
    torch.manual_seed(0)
    scores = (3 * torch.randn(2, 3, 5, 7)).to(torch.bfloat16)
    scores[0, 0, 0] = float("-inf")  # a fully masked row
    for name in ("sparsemax", "entmax15", "softmax"):
        spec = AttentionSpec(name)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            w = spec.normalise(scores)
        assert torch.equal(w, spec.normalise(scores.float()).to(w.dtype)), name
        assert not torch.isnan(w).any() and (w[0, 0, 0] == 0).all()
        sums = w.float().sum(-1).flatten()[1:]  # every row but the fully masked one
        assert torch.allclose(sums, torch.ones_like(sums), atol=2e-2), name
        if name != "softmax":
            assert (w.flatten(0, 2)[1:] == 0).any(dim=-1).all(), name  # every real row of a sparse map has real zeros


def test_a_launcher_precision_that_differs_from_the_runs_is_refused(tiny_bert, data, tmp_path, capsys, monkeypatch):
    # `accelerate launch --mixed_precision bf16` sets this variable; the Trainer would train a float32 run in bf16, unrecorded
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    assert main(args(tiny_bert, data, tmp_path / "run", "--attention", "softmax")) == 2
    err = capsys.readouterr().err
    assert "ACCELERATE_MIXED_PRECISION=bf16" in err and "give --bf16" in err
    assert not (tmp_path / "run").exists()
