"""Dropout on the weights inside flash sparse attention: the same as ``nn.functional.dropout`` on the materialised map
with the same mask (values and float64 gradients), the mask drawn from torch's generator (seeded runs repeat, the
backward redraws the forward's mask however rows are blocked), and what models run in training on the CPU."""

from __future__ import annotations

import pytest
import torch

from attnkit.attention import flash, flash_cpu
from attnkit.attention.entmax import entmax15
from attnkit.attention.maps import sparsemax

MAPS = {"sparsemax": sparsemax, "entmax15": entmax15}


def full_mask(p: float, seed: int, B: int, H: int, Lq: int, Lk: int) -> torch.Tensor:
    """The kept entries of the whole (B, H, Lq, Lk) map, drawn as one block."""
    blk = (0, B, 0, H, None, 0, Lq)
    return flash_cpu._drop_scale((p, seed), blk, H, Lq, Lk, torch.device("cpu")).view(B, H, Lq, Lk) > 0


def drawn_seed(manual: int) -> int:
    torch.manual_seed(manual)
    return flash._check_dropout(0.3)[1]


def qkv(B=2, H=3, L=37, D=8, dtype=torch.float64):
    g = torch.Generator().manual_seed(1)
    return [torch.randn(B, H, L, D, generator=g, dtype=dtype, requires_grad=True) for _ in range(3)]


@pytest.mark.parametrize("attention", sorted(MAPS))
def test_dropout_equals_the_materialised_map_dropped_by_the_same_mask(attention):
    q, k, v = qkv()
    mask = torch.ones(2, 37, dtype=torch.bool)
    mask[1, 30:] = False  # padding
    p = 0.3
    seed = drawn_seed(5)
    torch.manual_seed(5)
    out = flash.sparse_attention(q, k, v, mask, attention=attention, dropout=p)
    go = torch.randn_like(out)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), go)

    scores = (q @ k.transpose(-1, -2)) / 8 ** 0.5
    scores = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    kept = full_mask(p, seed, 2, 3, 37, 37)
    ref = ((MAPS[attention](scores, dim=-1) * kept) / (1 - p)) @ v
    rq, rk, rv = torch.autograd.grad(ref, (q, k, v), go)
    assert torch.allclose(out, ref, atol=1e-10)
    for a, b in ((dq, rq), (dk, rk), (dv, rv)):
        assert torch.allclose(a, b, atol=1e-9)
    assert 0.6 < kept.double().mean() < 0.8  # about 1 - p kept


def test_the_backward_redraws_the_forwards_mask_however_rows_are_blocked(monkeypatch):
    q, k, v = qkv(L=300)
    torch.manual_seed(3)
    out = flash.sparse_attention(q, k, v, attention="sparsemax", dropout=0.5)
    go = torch.randn_like(out)
    grads = torch.autograd.grad(out, (q, k, v), go)
    monkeypatch.setattr(flash_cpu, "ROW_BLOCK", 7)  # other blocks, other thread splits: the same masks
    monkeypatch.setattr(flash_cpu, "WORKERS", False)
    torch.manual_seed(3)
    out2 = flash.sparse_attention(q, k, v, attention="sparsemax", dropout=0.5)
    grads2 = torch.autograd.grad(out2, (q, k, v), go)
    assert torch.allclose(out, out2, atol=1e-12)
    assert all(torch.allclose(a, b, atol=1e-10) for a, b in zip(grads, grads2))


def test_seeded_calls_repeat_and_other_seeds_differ():
    q, k, v = (t.detach() for t in qkv())
    runs = []
    for s in (0, 0, 1):
        torch.manual_seed(s)
        runs.append(flash.sparse_attention(q, k, v, attention="entmax15", dropout=0.2))
    assert torch.equal(runs[0], runs[1]) and not torch.equal(runs[0], runs[2])
    plain = flash.sparse_attention(q, k, v, attention="entmax15")
    assert torch.equal(flash.sparse_attention(q, k, v, attention="entmax15", dropout=0.0), plain)


@pytest.mark.parametrize("bad", [-0.1, 1.0, float("nan"), "0.1", True])
def test_a_wrong_dropout_is_refused_in_one_line(bad):
    q, k, v = (t.detach() for t in qkv())
    with pytest.raises(ValueError, match="dropout must be a probability in \\[0, 1\\)"):
        flash.sparse_attention(q, k, v, dropout=bad)


def test_training_on_the_cpu_runs_flash_with_dropout_and_evaluation_without(tiny_bert, monkeypatch):
    """With ATTNKIT_ATTENTION=flash, a model in training with attention dropout takes the flash path (no L x L matrix)
    on the CPU with the config's dropout; in evaluation, none."""
    import attnkit
    from transformers import AutoModelForSequenceClassification

    model = attnkit.sparsify(AutoModelForSequenceClassification.from_pretrained(str(tiny_bert), num_labels=2), "sparsemax")
    assert model.config.attention_probs_dropout_prob > 0
    calls = []
    real = flash.sparse_attention
    monkeypatch.setattr(flash, "sparse_attention", lambda *a, **kw: calls.append(kw["dropout"]) or real(*a, **kw))
    monkeypatch.setenv("ATTNKIT_ATTENTION", "flash")
    ids = torch.randint(5, 90, (2, 9))
    model.train()
    loss = model(input_ids=ids, labels=torch.tensor([0, 1])).loss
    loss.backward()
    assert calls and all(d == model.config.attention_probs_dropout_prob for d in calls)
    calls.clear()
    model.eval()
    with torch.no_grad():
        model(input_ids=ids)
    assert calls and all(d == 0.0 for d in calls)


def test_flash_attention_is_offered_at_the_top_level():
    import attnkit

    assert attnkit.sparse_attention is flash.sparse_attention and attnkit.attention_weights is flash.attention_weights
    assert {"sparse_attention", "attention_weights"} <= set(attnkit.__all__)
