"""Shared fixtures: tiny local checkpoints and tiny datasets, made on the fly (the plain functions behind them are in
helpers.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import make_tiny_bert, use_backend, write_tiny_sentiment

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
