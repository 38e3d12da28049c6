"""Shared fixtures: tiny local checkpoints and tiny datasets, made on the fly (the plain functions behind them are in
helpers.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from attnkit.cli import main
from helpers import (four_step_train_args, make_tiny_bert, save_tiny_classifier, train_args, two_step_train_args, use_backend,
                     write_tiny_sentiment)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# the Triton kernels are tested on CPU tensors through triton's interpreter (read when they are first compiled)
os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(params=["cpp", "torch", "triton"])
def backend(request, monkeypatch):
    """The sparse maps on each of their paths in turn (modules that test every path use it for every test:
    ``pytestmark = pytest.mark.usefixtures("backend")``)."""
    use_backend(request.param, monkeypatch)
    return request.param


@pytest.fixture
def gen():
    import torch

    return torch.Generator().manual_seed(0)


@pytest.fixture(scope="session")
def tiny_bert(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_bert"))


@pytest.fixture(scope="session")
def tiny_roberta(tmp_path_factory) -> Path:
    return make_tiny_bert(tmp_path_factory.mktemp("tiny_roberta"), family="roberta")


@pytest.fixture
def tiny_task(tmp_path) -> Path:
    return write_tiny_sentiment(tmp_path / "data")


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    """A tiny two-class csv task (96 train, 32 dev rows), written once per module."""
    return write_tiny_sentiment(tmp_path_factory.mktemp("task") / "data")


# ----------------------------------------------------------------------------- runs and models, made once per module


@pytest.fixture(scope="module")
def run(tiny_bert, data, tmp_path_factory) -> Path:
    """A finished two-step sparsegen-lin run (lam -2) of the tiny task."""
    out = tmp_path_factory.mktemp("rel_run") / "run"
    assert main(two_step_train_args(tiny_bert, data, out, "--attention", "sparsegen-lin", "--lam", "-2")) == 0
    return out


@pytest.fixture(scope="module")
def trained_run(tiny_bert, data, tmp_path_factory) -> Path:
    """A finished four-step sparsegen-lin run (lam -2) evaluated every two steps."""
    out = tmp_path_factory.mktemp("trust_run") / "run"
    assert main(train_args(tiny_bert, data, out, "--max-steps", "4", "--eval-steps", "2", "--attention", "sparsegen-lin", "--lam", "-2")) == 0
    return out


@pytest.fixture(scope="module")
def finished(tiny_bert, data, tmp_path_factory) -> Path:
    """A finished run (4 steps), to be copied by tests that damage it."""
    out = tmp_path_factory.mktemp("rel2_done") / "run"
    assert main(four_step_train_args(tiny_bert, data, out)) == 0
    return out


@pytest.fixture(scope="module")
def saved_classifier(tiny_bert, tmp_path_factory) -> Path:
    """A classifier saved as `attnkit train` saves it (sparsegen-lin, labels negative/positive, trained at 16 tokens)."""
    from attnkit.attention.spec import AttentionSpec

    out = tmp_path_factory.mktemp("sweep_model") / "model"
    return save_tiny_classifier(tiny_bert, out, AttentionSpec("sparsegen-lin", -2.0), ["negative", "positive"])


@pytest.fixture(scope="module")
def sparsemax_classifier(tiny_bert, tmp_path_factory) -> Path:
    """A sparsemax classifier saved as `attnkit train` saves it (labels negative/positive, trained at 16 tokens)."""
    from attnkit.attention.spec import AttentionSpec

    out = tmp_path_factory.mktemp("nsr_model") / "model"
    return save_tiny_classifier(tiny_bert, out, AttentionSpec("sparsemax"), ["negative", "positive"])
