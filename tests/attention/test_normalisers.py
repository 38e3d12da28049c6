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


@pytest.mark.parametrize("name, fn, needle", [
    ("my map", sparsemax_of_double_scores, "expected lower case letters and digits with '-' between words, starting with "
                                           "a letter, e.g. 'my-map'"),
    ("", sparsemax_of_double_scores, "a normaliser needs a name"),
    ("1", sparsemax_of_double_scores, "starting with a letter"),
    ("nofn", None, "normaliser nofn: fn is NoneType: expected a function fn(scores, setting)"),
])
def test_a_record_a_model_could_not_use_is_refused_when_registered(name, fn, needle):
    """A name with a space (the CLI could not name it), an empty one, and fn=None (which failed only at the first
    forward, as "'NoneType' object is not callable") were accepted (sweep 2026-11-27f)."""
    with pytest.raises(ValueError) as e:
        register_normaliser(Normaliser(name, fn))
    assert needle in str(e.value)
    assert name not in NORMALISERS


def _masked_scores() -> torch.Tensor:
    s = torch.randn(2, 3, 5, generator=torch.Generator().manual_seed(0))
    s[0, 0, 1] = float("-inf")  # a masked key
    return s


@pytest.mark.parametrize("fn, needle", [
    (lambda s, t: sparsemax(s, dim=-1)[..., :-1], "normaliser bad returned shape (2, 3, 4) for scores of shape (2, 3, 5)"),
    (lambda s, t: None, "normaliser bad returned NoneType for scores of shape (2, 3, 5)"),
    (lambda s, t: 0.5 * sparsemax(s, dim=-1), "hold a row summing to 0.5, not 1"),
    (lambda s, t: torch.full_like(s, float("nan")), "hold values that are not finite (NaN or inf)"),
    (lambda s, t: torch.softmax(s.nan_to_num(neginf=-1.0), -1), "hold weight on a masked (-inf) score"),
    (lambda s, t: torch.softmax(s, -1) * torch.tensor([1.0, 1, 1, 1, -1]), "hold a negative weight"),
])
def test_a_user_normaliser_whose_weights_are_not_attention_is_named_at_its_first_forward(fn, needle):
    """A custom map giving the wrong shape or None failed deep in torch (a bmm size error, dropout() of None); one giving
    half weights or NaN ran without a word (sweep 2026-11-27f). Now: one line naming the normaliser, and a map that
    failed is checked again at its next call (never waved through the second time)."""
    from attnkit.attention.spec import AttentionSpec

    register_normaliser(Normaliser("bad", fn))
    try:
        for _ in range(2):
            with pytest.raises(ValueError) as e:
                AttentionSpec("bad").normalise(_masked_scores())
            assert needle in str(e.value) and "normaliser bad" in str(e.value)
    finally:
        unregister_normaliser("bad")


def test_a_fully_masked_row_that_gives_nan_is_named_so_and_a_good_map_is_checked_once():
    from attnkit.attention.normalisers import _CHECKED
    from attnkit.attention.spec import AttentionSpec

    s = _masked_scores()
    s[1, 2, :] = float("-inf")  # a row with no key to attend to
    register_normaliser(Normaliser("plain-softmax", lambda z, t: torch.softmax(z, -1)))
    register_normaliser(Normaliser("zeroed-softmax", lambda z, t: torch.softmax(z, -1).nan_to_num()))
    try:
        with pytest.raises(ValueError, match=r"in a row whose scores are all -inf \(a fully masked row: give zeros there"):
            AttentionSpec("plain-softmax").normalise(s)
        w = AttentionSpec("zeroed-softmax").normalise(s)
        assert "zeroed-softmax" in _CHECKED and torch.equal(w[1, 2], torch.zeros(5))
    finally:
        unregister_normaliser("plain-softmax")
        unregister_normaliser("zeroed-softmax")
    assert "zeroed-softmax" not in _CHECKED  # a name registered again is checked again


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
