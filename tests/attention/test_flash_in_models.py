"""Models run flash sparse attention by default and compute what the materialised path computes: outputs and gradients
to float tolerance, every map and blur, ``--sparse-layers`` (SDPA in the softmax layers), learned alpha; the weights
when asked for; ``ATTNKIT_ATTENTION=materialised`` and the cases flash cannot take use the materialised path."""

from __future__ import annotations

import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification

import attnkit
from attnkit.attention import flash
from attnkit.attention.spec import AttentionSpec


def tiny(spec: AttentionSpec, dropout: float = 0.0, seed: int = 0):
    torch.manual_seed(seed)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48, vocab_size=60,
                     attention_probs_dropout_prob=dropout, hidden_dropout_prob=0.0)
    model = attnkit.sparsify(BertForSequenceClassification(cfg), spec=spec)
    return model.double()


def batch():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 60, (3, 23), generator=g)
    mask = torch.ones_like(ids)
    mask[0, 17:] = 0  # right padding
    mask[1, :4] = 0  # left padding
    return ids, mask


def run(model, path: str, monkeypatch, train: bool = False):
    monkeypatch.setenv("ATTNKIT_ATTENTION", path)
    ids, mask = batch()
    model.train(train)
    model.zero_grad()
    out = model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 0]))
    out.loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.logits.detach(), grads


@pytest.fixture
def flash_calls(monkeypatch):
    calls = []
    real = flash.sparse_attention

    def counted(*a, **k):
        calls.append(k.get("attention"))
        return real(*a, **k)

    monkeypatch.setattr(flash, "sparse_attention", counted)
    return calls


SPECS = [
    AttentionSpec("sparsemax"), AttentionSpec("sparsegen-lin", -2.0), AttentionSpec("entmax15"),
    AttentionSpec("entmax-alpha", alpha=1.3), AttentionSpec("entmax15", blur="value"),
    AttentionSpec("sparsegen-lin", -1.0, blur="context"), AttentionSpec("entmax15", sparse_layers="last"),
    AttentionSpec("entmax-alpha", alpha=1.6, learned="alpha"), AttentionSpec("entmax15", alpha_mix=0.5),
]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_flash_in_a_model_equals_the_materialised_path(spec, monkeypatch, flash_calls):
    model = tiny(spec)
    want_logits, want_grads = run(model, "materialised", monkeypatch, train=True)
    assert flash_calls == []
    got_logits, got_grads = run(model, "auto", monkeypatch, train=True)
    assert len(flash_calls) == (1 if spec.sparse_layers == "last" else 2)  # one call per sparse layer
    torch.testing.assert_close(got_logits, want_logits, rtol=1e-10, atol=1e-10)
    assert want_grads.keys() == got_grads.keys()
    for name in want_grads:
        torch.testing.assert_close(got_grads[name], want_grads[name], rtol=1e-8, atol=1e-10, msg=name)


@pytest.mark.parametrize("spec", [AttentionSpec("entmax15"), AttentionSpec("sparsegen-lin", -1.0, blur="context"),
                                  AttentionSpec("entmax15", sparse_layers="last")], ids=lambda s: s.describe())
def test_weights_asked_for_are_the_flash_thresholds_exact_maps(spec, monkeypatch, flash_calls):
    """Without gradients, the maps asked for come from flash attention's thresholds (output_and_weights: one pass) in its
    layers, equal to the materialised path's maps; with gradients on (they may be differentiated), the materialised
    path gives them."""
    model = tiny(spec).eval()
    ids, mask = batch()
    weights_calls = []
    real = flash.output_and_weights
    monkeypatch.setattr(flash, "output_and_weights", lambda *a, **k: weights_calls.append(1) or real(*a, **k))
    sparse = 1 if spec.sparse_layers == "last" else 2
    monkeypatch.setenv("ATTNKIT_ATTENTION", "auto")
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask).logits
        assert len(flash_calls) == sparse
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    assert len(flash_calls) == sparse and len(weights_calls) == sparse and len(out.attentions) == 2
    torch.testing.assert_close(out.logits, plain, rtol=1e-10, atol=1e-10)
    p = out.attentions[-1]
    assert p.shape == (3, 4, 23, 23) and bool((p[0, :, :, 17:] == 0).all())
    torch.testing.assert_close(p.sum(-1), torch.ones_like(p.sum(-1)))
    monkeypatch.setenv("ATTNKIT_ATTENTION", "materialised")
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    for got, ref in zip(out.attentions, want.attentions):
        torch.testing.assert_close(got, ref, rtol=1e-10, atol=1e-12)
        assert torch.equal(got == 0, ref == 0)  # the same exact zeros
    monkeypatch.setenv("ATTNKIT_ATTENTION", "auto")
    model(input_ids=ids, attention_mask=mask, output_attentions=True)  # gradients on: materialised
    assert len(weights_calls) == sparse


def test_dropout_on_the_weights_in_training_runs_in_flash_when_asked(monkeypatch, flash_calls):
    """By default training with attention dropout takes the materialised path (no slower); ATTNKIT_ATTENTION=flash
    runs it in flash attention on the CPU, its masks drawn from torch's seed."""
    model = tiny(AttentionSpec("sparsemax"), dropout=0.1)
    run(model, "auto", monkeypatch, train=True)
    assert flash_calls == []
    torch.manual_seed(4)
    logits, grads = run(model, "flash", monkeypatch, train=True)
    assert len(flash_calls) == 2
    torch.manual_seed(4)
    again, grads_again = run(model, "flash", monkeypatch, train=True)  # the masks follow torch's seed
    assert torch.equal(logits, again) and all(torch.equal(grads[n], grads_again[n]) for n in grads)
    run(model, "auto", monkeypatch, train=False)  # evaluation: no dropout, flash
    assert len(flash_calls) == 6


def test_a_wrong_attention_path_is_refused_in_one_line(monkeypatch):
    model = tiny(AttentionSpec("sparsemax"))
    monkeypatch.setenv("ATTNKIT_ATTENTION", "fast")
    ids, mask = batch()
    with pytest.raises(ValueError, match=r"^ATTNKIT_ATTENTION='fast': expected auto, flash or materialised$"):
        model(input_ids=ids, attention_mask=mask)


def test_auto_leaves_float32_on_a_gpu_to_the_materialised_path():
    """The flash kernels' float32 products are IEEE ones in every pass: a float32 BERT-base forward at L = 512 took 17x
    softmax's on a GPU (H200, 2026-11-28) against 1.2x materialised. auto takes flash for float32 on the CPU and for
    16-bit inputs on a GPU; flash and materialised are taken as asked."""
    from attnkit.attention.forward import flash_pays

    assert flash_pays("auto", "cpu", torch.float32) and flash_pays("auto", "cuda", torch.bfloat16)
    assert flash_pays("auto", "cuda", torch.float16) and not flash_pays("auto", "cuda", torch.float32)
    assert flash_pays("flash", "cuda", torch.float32)
    assert not any(flash_pays("materialised", d, t) for d in ("cpu", "cuda") for t in (torch.float32, torch.bfloat16))


def test_alpha_near_one_takes_the_materialised_map(flash_calls, monkeypatch):
    """alpha in (1, 1.001) (a warm-up's first steps, or --alpha 1.0005) is past what flash's float32 thresholds hold:
    the model takes the materialised map (entmax by bisection, rows summing to 1), never a refusal mid-training."""
    model = tiny(AttentionSpec("entmax-alpha", alpha=1.0005))
    logits, _ = run(model, "auto", monkeypatch)
    assert flash_calls == [] and torch.isfinite(logits).all()
    ids, mask = batch()
    with torch.no_grad():
        att = model(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    assert all((a.sum(-1)[mask.bool()[:, None, :].expand(-1, a.shape[1], -1)] - 1).abs().max() < 1e-6 for a in att)
