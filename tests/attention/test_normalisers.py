"""A normaliser is one record: registering a new one is one call, after which the command line trains with it."""

from __future__ import annotations

import json

import pytest
import torch

from attnkit.attention.maps import sparsemax
from attnkit.attention.normalisers import NORMALISERS, Normaliser, names_with, register_normaliser, unregister_normaliser
from attnkit.attention.spec import AttentionSpec
from attnkit.cli import main
from attnkit.models.checkpoint import load_model, load_tokenizer

CALLS: list[torch.Tensor] = []


def sparsemax_of_double_scores(scores: torch.Tensor, setting) -> torch.Tensor:
    """The toy: sparsemax of the scores times 2 (sparser than sparsemax), recording every call."""
    CALLS.append(scores.detach())
    return sparsemax(scores * 2, dim=-1)


@pytest.fixture
def toy():
    CALLS.clear()
    register_normaliser(Normaliser("toy", sparsemax_of_double_scores))
    yield NORMALISERS["toy"]
    unregister_normaliser("toy")


def test_the_records_say_what_the_literals_said():
    assert names_with(dense=True) == ["softmax", "taylor"]
    assert names_with(setting="lam") == ["sparsegen-lin"] and names_with(setting="alpha") == ["entmax-alpha"]
    assert names_with(anneal="alpha") == ["entmax15", "entmax-alpha"]


def test_a_name_is_registered_once_and_records_are_checked(toy):
    with pytest.raises(ValueError, match="already registered"):
        register_normaliser(Normaliser("toy", sparsemax_of_double_scores))
    with pytest.raises(ValueError, match="setting"):
        register_normaliser(Normaliser("toy-beta", sparsemax_of_double_scores, setting="beta"))
    with pytest.raises(ValueError, match="lower case"):
        register_normaliser(Normaliser("Toy_2", sparsemax_of_double_scores))
    with pytest.raises(ValueError, match="built-in"):
        unregister_normaliser("softmax")


def test_a_registered_normaliser_is_an_attention_spec(toy):
    spec = AttentionSpec("toy")
    assert spec.is_sparse and spec.describe() == "toy"
    z = torch.randn(3, 7, dtype=torch.float64)
    assert torch.equal(spec.normalise(z), sparsemax(2 * z))
    with pytest.raises(ValueError, match="only entmax-alpha has an alpha"):
        AttentionSpec("toy", alpha=1.2)


def test_the_command_line_trains_with_a_normaliser_registered_in_one_call(toy, tiny_bert, tiny_task, tmp_path, capsys):
    out = tmp_path / "toy"
    assert main(["train", "--task", "csv", "--data-dir", str(tiny_task), "--model", str(tiny_bert), "--output-dir", str(out),
                 "--attention", "toy", "--batch-size", "16", "--lr", "3e-3", "--max-length", "16", "--no-heatmap",
                 "--max-steps", "2", "--eval-steps", "2"]) == 0
    assert CALLS, "the toy normaliser was never called in training"
    m = json.loads((out / "metrics.json").read_text())
    assert m["attention"]["attention"] == "toy"
    model = load_model(out / "model").eval()
    CALLS.clear()
    tok = load_tokenizer(out / "model")
    with torch.no_grad():
        got = model(**tok(["a good film", "bad"], padding=True, return_tensors="pt"), output_attentions=True)
    assert len(CALLS) == len(got.attentions)  # every layer's weights came from the toy
    for scores, weights in zip(CALLS, got.attentions):
        assert torch.allclose(weights, sparsemax(2 * scores), atol=1e-6)
