"""The entmax maps in models: --attention entmax15 / entmax-alpha, alpha learned per layer and head, the
softmax-to-sparse warm-up."""

import json

import pytest
import torch
from helpers import logits_of, merged

from attnkit.attention.entmax import entmax_bisect
from attnkit.attention.learned import learned_values
from attnkit.attention.normalisers import LEARNED
from attnkit.attention.spec import AttentionSpec, spec_of
from attnkit.cli import main
from attnkit.models.build import build_classifier
from attnkit.models.checkpoint import load_model, load_tokenizer, set_attention

pytestmark = pytest.mark.slow

SENTS = ["a great movie and a really good story", "bad", "it was not fun but the actor was superb"]


def test_learned_alpha_starts_at_the_spec_and_equals_fixed_alpha(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    fixed = build_classifier(tiny_bert, 2, AttentionSpec("entmax-alpha", alpha=1.3))
    learn = build_classifier(tiny_bert, 2, AttentionSpec("entmax-alpha", alpha=1.3, learned="alpha"))
    learn.load_state_dict(fixed.state_dict(), strict=False)
    alphas = learned_values(learn, "alpha")
    assert len(alphas) == 2 and all(len(a) == 4 for a in alphas)
    assert all(abs(x - 1.3) < 1e-6 for row in alphas for x in row)
    assert torch.allclose(logits_of(fixed, tok, SENTS).logits, logits_of(learn, tok, SENTS).logits, atol=1e-5)
    assert learned_values(fixed, "alpha") is None


def test_learned_alpha_gets_gradients_and_stays_between_one_and_two(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    model = build_classifier(tiny_bert, 2, AttentionSpec("entmax-alpha", alpha=1.5, learned="alpha")).train()
    ps = [p for n, p in model.named_parameters() if n.endswith(LEARNED["alpha"].param)]
    assert len(ps) == 2
    model(**tok(SENTS, padding=True, return_tensors="pt"), labels=torch.tensor([1, 0, 1])).loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in ps)
    with torch.no_grad():
        for p, v in zip(ps, (-40.0, 40.0)):
            p.fill_(v)
    vals = [x for row in learned_values(model, "alpha") for x in row]
    assert all(1 <= x <= 2 for x in vals)


def test_each_head_uses_its_own_alpha(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    model = build_classifier(tiny_bert, 2, AttentionSpec("entmax-alpha", alpha=1.5, learned="alpha"))
    alpha = torch.tensor([1.05, 1.3, 1.6, 1.95])
    for m in [m for m in model.modules() if hasattr(m, LEARNED["alpha"].param)]:
        getattr(m, LEARNED["alpha"].param).data.copy_(torch.logit(alpha - 1))
    enc = tok(SENTS[:1], return_tensors="pt")
    w = logits_of(model, tok, SENTS[:1], output_attentions=True).attentions[0]  # [1, H, L, L]
    sa = model.bert.encoder.layer[0].attention.self
    with torch.no_grad():  # reference: the first layer's scores through entmax_bisect with each head's alpha
        x = model.bert.embeddings(input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"])
        B, L, _ = x.shape
        q = sa.query(x).view(B, L, 4, -1).transpose(1, 2)
        k = sa.key(x).view(B, L, 4, -1).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) * sa.scaling
    for h in range(4):
        assert torch.allclose(w[:, h], entmax_bisect(scores[:, h], float(alpha[h])), atol=1e-5), h


def test_entmax_maps_under_autocast_in_a_model(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    for spec in (AttentionSpec("entmax15"), AttentionSpec("entmax-alpha", alpha=1.25)):
        model = build_classifier(tiny_bert, 2, spec).eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            att = model(**tok(SENTS, padding=True, return_tensors="pt"), output_attentions=True).attentions
        assert all(torch.isfinite(a).all() for a in att) and any((a == 0).any() for a in att)


def args(model, data, out, *extra):
    return merged(["train", "--task", "csv", "--data-dir", str(data), "--model", str(model), "--output-dir", str(out),
            "--batch-size", "16", "--lr", "3e-3", "--max-length", "16", "--no-heatmap", "--max-steps", "6", "--eval-steps", "3"], extra)


def test_train_entmax15_from_the_command_line(tiny_bert, tiny_task, tmp_path, capsys):
    out = tmp_path / "e15"
    assert main(args(tiny_bert, tiny_task, out, "--attention", "entmax15")) == 0
    assert "1.5-entmax" in capsys.readouterr().out
    m = json.loads((out / "metrics.json").read_text())
    assert m["attention"]["attention"] == "entmax15"
    model = load_model(out / "model")
    assert spec_of(model.config).attention == "entmax15"
    att = logits_of(model, load_tokenizer(out / "model"), SENTS, output_attentions=True).attentions
    assert any((a == 0).any() for a in att)


def test_learned_alpha_with_warmup_trains_saves_and_reloads(tiny_bert, tiny_task, tmp_path):
    out = tmp_path / "la"
    assert main(args(tiny_bert, tiny_task, out, "--attention", "entmax-alpha", "--learn-alpha", "--alpha-warmup", "0.5",
                     "--alpha-lr", "0.1")) == 0
    m = json.loads((out / "metrics.json").read_text())
    alphas = m["alpha_learned"]
    assert len(alphas) == 2 and any(abs(x - 1.5) > 1e-4 for row in alphas for x in row)  # its own lr moved them
    assert (out / "alpha_learned.png").is_file() and (out / "alpha_learned.svg").is_file()
    model = load_model(out / "model")
    assert torch.allclose(torch.tensor(learned_values(model, "alpha")), torch.tensor(alphas), atol=1e-6)
    spec = spec_of(model.config)
    assert spec.learned == "alpha" and spec.alpha_mix == 1.0  # the warm-up ended: the saved model runs at its learned alpha


def test_the_recipe_with_alpha_warmup_ends_sparse_in_the_last_layer_only(tiny_bert, tiny_task, tmp_path):
    """--recipe faithful's layers with alpha's warm-up (a remedy the SSAF study tries): the warm-up runs the last
    layer from softmax to 1.5-entmax, and the saved model is the recipe (the other layers softmax throughout)."""
    out = tmp_path / "rw"
    assert main(args(tiny_bert, tiny_task, out, "--attention", "entmax15", "--sparse-layers", "last", "--alpha-warmup", "0.5")) == 0
    model = load_model(out / "model")
    spec = spec_of(model.config)
    assert spec.sparse_layers == "last" and spec.alpha_mix == 1.0 and spec.attention == "entmax15"
    tok = load_tokenizer(out / "model")
    att = logits_of(model, tok, SENTS, output_attentions=True).attentions
    set_attention(model, AttentionSpec("softmax"))  # the same weights, every layer softmax
    soft = logits_of(model, tok, SENTS, output_attentions=True).attentions
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(att[:-1], soft[:-1]))  # the first layers: softmax
    assert (att[-1] - soft[-1]).abs().max() > 1e-3  # the last: 1.5-entmax


def test_alpha_warmup_starts_at_softmax(tiny_bert):
    """alpha_mix 0 is softmax exactly: the pre-trained heads lose no mass at the start of the schedule."""
    tok = load_tokenizer(tiny_bert)
    soft = build_classifier(tiny_bert, 2, AttentionSpec("softmax"))
    for spec in (AttentionSpec("entmax15", alpha_mix=0.0), AttentionSpec("entmax-alpha", alpha=1.8, alpha_mix=0.0)):
        warm = build_classifier(tiny_bert, 2, spec)
        warm.load_state_dict(soft.state_dict())
        assert torch.allclose(logits_of(soft, tok, SENTS).logits, logits_of(warm, tok, SENTS).logits, atol=1e-5)
    half = AttentionSpec("entmax15", alpha_mix=0.5)
    assert half.effective_alpha(1.5) == 1.25
    z = torch.randn(3, 7, dtype=torch.float64)
    assert torch.allclose(half.normalise(z), entmax_bisect(z, 1.25), atol=1e-12)


@pytest.mark.parametrize("extra,needle", [
    (["--attention", "entmax15", "--alpha", "1.7"], "--alpha"),
    (["--attention", "entmax-alpha", "--alpha", "2.5"], "--alpha 2.5"),
    (["--attention", "entmax-alpha", "--alpha", "0.5"], "--alpha 0.5"),
    (["--attention", "entmax-alpha", "--learn-alpha", "--alpha", "1"], "strictly between 1 and 2"),
    (["--attention", "softmax", "--alpha-warmup", "0.1"], "--alpha-warmup 0.1"),
    (["--attention", "entmax-alpha", "--alpha-lr", "0.1"], "--alpha-lr 0.1"),
])
def test_bad_entmax_settings_are_one_line(tiny_bert, tiny_task, tmp_path, capsys, extra, needle):
    assert main(args(tiny_bert, tiny_task, tmp_path / "o", *extra)) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_alpha_one_is_softmax_on_every_path_and_trains_to_the_end(tiny_bert, tiny_task, tmp_path):
    """--alpha 1 (the help's "1 softmax"): the flash path took only (1, 2] and failed at the first checkpoint, blamed on
    the disk; now alpha 1 runs softmax (torch's SDPA) wherever flash attention would run."""
    torch.manual_seed(0)
    one = build_classifier(str(tiny_bert), 2, AttentionSpec("entmax-alpha", alpha=1.0)).eval()
    soft = build_classifier(str(tiny_bert), 2, AttentionSpec("softmax")).eval()
    soft.load_state_dict(one.state_dict())
    x = {"input_ids": torch.tensor([[1, 20, 21, 22, 2, 0]]), "attention_mask": torch.tensor([[1, 1, 1, 1, 1, 0]])}
    with torch.inference_mode():
        assert torch.allclose(one(**x).logits, soft(**x).logits, atol=1e-6)
        w1, w2 = one(**x, output_attentions=True).attentions, soft(**x, output_attentions=True).attentions
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(w1, w2))
    out = tmp_path / "run"
    assert main(["train", "--task", "csv", "--data-dir", str(tiny_task), "--model", str(tiny_bert), "--output-dir", str(out),
                 "--max-steps", "2", "--eval-steps", "1", "--batch-size", "8", "--max-length", "16", "--no-heatmap",
                 "--attention", "entmax-alpha", "--alpha", "1"]) == 0
    assert json.loads((out / "metrics.json").read_text())["attention"]["alpha"] == 1.0
