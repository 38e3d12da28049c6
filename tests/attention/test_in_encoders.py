"""Sparse attention inside Hugging Face encoders."""

import json
import math
import subprocess
import sys

import pytest
import torch

from attnkit.attention.forward import attnkit_attention_forward
from attnkit.attention.spec import AttentionSpec, spec_of
from attnkit.models.build import build_classifier
from attnkit.models.checkpoint import load_classifier, load_tokenizer, save_checkpoint

SENTS = ["a great movie and a really good story", "bad", "it was not fun but the actor was superb"]


def logits_of(model, tok, texts):
    model.eval()
    with torch.no_grad():
        return model(**tok(texts, padding=True, return_tensors="pt")).logits


@pytest.mark.parametrize("attention,lam", [("softmax", 0.0), ("sparsemax", 0.0), ("sparsegen-lin", -3.0)])
def test_padded_batch_equals_each_sentence_alone(tiny_bert, attention, lam):
    model = build_classifier(tiny_bert, 3, AttentionSpec(attention, lam))
    tok = load_tokenizer(tiny_bert)
    batch = logits_of(model, tok, SENTS)
    for i, s in enumerate(SENTS):
        alone = logits_of(model, tok, [s])
        assert torch.allclose(batch[i], alone[0], atol=1e-5), (attention, i)


def test_padding_is_masked_for_roberta(tiny_roberta):
    model = build_classifier(tiny_roberta, 2, AttentionSpec("sparsegen-lin", -2.0)).eval()
    ids = torch.tensor([[2, 10, 11, 12, 3], [2, 13, 3, 0, 0]])
    mask = (ids != 0).long()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
        alone = model(input_ids=ids[1:, :3], attention_mask=mask[1:, :3])
    assert torch.allclose(out.logits[1], alone.logits[0], atol=1e-5)
    # padded keys get exactly zero weight in every layer and head
    for a in out.attentions:
        assert torch.equal(a[1, :, :, 3:], torch.zeros_like(a[1, :, :, 3:]))


def test_sparse_weights_are_returned_with_exact_zeros(tiny_bert):
    model = build_classifier(tiny_bert, 2, AttentionSpec("sparsegen-lin", 0.95)).eval()
    tok = load_tokenizer(tiny_bert)
    with torch.no_grad():
        out = model(**tok(SENTS[:1], return_tensors="pt"), output_attentions=True)
    assert len(out.attentions) == 2
    w = torch.stack(out.attentions)
    assert (w == 0).any(), "sparse attention should have exact zeros"
    assert torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)), atol=1e-5)
    soft = build_classifier(tiny_bert, 2, AttentionSpec("softmax")).eval()
    with torch.no_grad():
        ws = torch.stack(soft(**tok(SENTS[:1], return_tensors="pt"), output_attentions=True).attentions)
    assert (ws > 0).all()


def test_attention_changes_the_computation(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    a = logits_of(build_classifier(tiny_bert, 2, AttentionSpec("softmax")), tok, SENTS)
    b = logits_of(build_classifier(tiny_bert, 2, AttentionSpec("sparsegen-lin", -1.0)), tok, SENTS)
    assert not torch.allclose(a, b, atol=1e-4)


def test_softmax_matches_transformers_eager(tiny_bert):
    from transformers import AutoModelForSequenceClassification

    tok = load_tokenizer(tiny_bert)
    ours = build_classifier(tiny_bert, 2, AttentionSpec("softmax"))
    torch.manual_seed(0)
    eager = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2, attn_implementation="eager")
    eager.load_state_dict(ours.state_dict())
    assert torch.allclose(logits_of(ours, tok, SENTS), logits_of(eager, tok, SENTS), atol=1e-5)


def test_checkpoint_round_trip(tiny_bert, tmp_path):
    spec = AttentionSpec("sparsegen-lin", -4.0)
    model = build_classifier(tiny_bert, 3, spec, label_names=["neg", "neu", "pos"])
    tok = load_tokenizer(tiny_bert)
    before = logits_of(model, tok, SENTS)
    out = save_checkpoint(model, tmp_path / "ck", tok)
    files = sorted(p.name for p in out.iterdir())
    assert "model.safetensors" in files
    assert not any(f.endswith((".bin", ".pt", ".pth")) for f in files)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["attn_implementation"] == "attnkit"
    assert cfg["attnkit"] == {"attention": "sparsegen-lin", "lam": -4.0, "blur": "none", "blur_size": 3, "blur_sigma": 0.3}
    again = load_classifier(out)
    assert spec_of(again.config) == spec
    assert again.config.id2label[2] == "pos"
    assert torch.equal(logits_of(again, load_tokenizer(out), SENTS), before)
    # no temporary folders are left behind
    assert [p.name for p in tmp_path.iterdir()] == ["ck"]


def test_saving_over_an_existing_checkpoint_is_atomic(tiny_bert, tmp_path):
    tok = load_tokenizer(tiny_bert)
    m1 = build_classifier(tiny_bert, 2, AttentionSpec("softmax"))
    m2 = build_classifier(tiny_bert, 2, AttentionSpec("sparsemax"))
    save_checkpoint(m1, tmp_path / "ck", tok)
    save_checkpoint(m2, tmp_path / "ck", tok)
    assert spec_of(load_classifier(tmp_path / "ck").config).attention == "sparsemax"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]


def test_sparse_checkpoint_does_not_load_as_softmax_in_plain_transformers(tiny_bert, tmp_path):
    model = build_classifier(tiny_bert, 2, AttentionSpec("sparsegen-lin", -2.0))
    save_checkpoint(model, tmp_path / "ck", load_tokenizer(tiny_bert))
    code = (
        "import sys\n"
        "from transformers import AutoModelForSequenceClassification as A, BertForSequenceClassification as B, pipeline\n"
        "for load, word in ((lambda p: A.from_pretrained(p, trust_remote_code=False), 'trust_remote_code'),\n"
        "                   (lambda p: pipeline('text-classification', model=p, trust_remote_code=False), 'trust_remote_code'),\n"
        "                   (B.from_pretrained, 'attnkit')):\n"
        "    try:\n"
        "        load(sys.argv[1])\n"
        "    except ValueError as e:\n"
        "        assert word in str(e), e\n"
        "    else:\n"
        "        raise SystemExit('loaded silently')\n"
        "assert 'attnkit' not in sys.modules\n"
        "print('refused')\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "ck")], capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:] + r.stdout[-2000:]
    assert "refused" in r.stdout


def test_from_scratch_is_same_architecture_random_weights(tiny_bert):
    pre = build_classifier(tiny_bert, 2, AttentionSpec("softmax"))
    np_ = build_classifier(tiny_bert, 2, AttentionSpec("softmax"), from_scratch=True)
    ssaf_np = build_classifier(tiny_bert, 2, AttentionSpec("sparsegen-lin", -6.0), from_scratch=True)
    assert [k for k, _ in pre.named_parameters()] == [k for k, _ in np_.named_parameters()]
    for a, b in zip(pre.parameters(), np_.parameters()):
        assert a.shape == b.shape
    w = "bert.encoder.layer.0.attention.self.query.weight"
    assert not torch.equal(dict(pre.named_parameters())[w], dict(np_.named_parameters())[w])
    assert spec_of(ssaf_np.config) == AttentionSpec("sparsegen-lin", -6.0)


def test_bad_attention_settings_are_named():
    with pytest.raises(ValueError, match="entmax99"):
        AttentionSpec("entmax99")
    with pytest.raises(ValueError, match="lam=1.5"):
        AttentionSpec("sparsegen-lin", 1.5)


def test_missing_local_model_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_classifier(str(tmp_path / "nope"), 2)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        build_classifier(str(tmp_path / "empty"), 2)


def test_attention_function_handles_fully_masked_rows():
    class M(torch.nn.Module):
        training = False

        class config:
            attnkit = {"attention": "sparsegen-lin", "lam": -1.0}

    q = torch.randn(1, 2, 3, 4)
    k = torch.randn(1, 2, 3, 4)
    v = torch.randn(1, 2, 3, 4)
    mask = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    mask[..., 1, :] = False  # query 1 may attend to nothing
    out, w = attnkit_attention_forward(M(), q, k, v, mask)
    assert not torch.isnan(out).any() and not torch.isnan(w).any()
    assert torch.equal(w[0, :, 1], torch.zeros(2, 3))
    # an additive float mask (transformers' eager style) is treated the same way
    add = torch.zeros(1, 1, 3, 3).masked_fill(~mask, torch.finfo(torch.float32).min)
    out2, w2 = attnkit_attention_forward(M(), q, k, v, add)
    assert torch.equal(w2, w)


@pytest.mark.slow
def test_bundled_minilm_with_sparse_attention():
    model = build_classifier("minilm", 2, AttentionSpec("sparsegen-lin", -4.0)).eval()
    tok = load_tokenizer("minilm")
    assert model.config.num_hidden_layers == 6 and model.config.num_attention_heads == 12
    with torch.no_grad():
        out = model(**tok(SENTS, padding=True, return_tensors="pt"), output_attentions=True)
    w = torch.stack(out.attentions)  # [layers, B, H, L, L]
    assert w.shape[:3] == (6, 3, 12)
    assert (w == 0).float().mean() > 0.3
    assert not math.isnan(out.logits.sum().item())


@pytest.mark.slow
@pytest.mark.parametrize("lam", [-8.0, -4.0, 0.0])
def test_exact_on_real_minilm_scores(lam):
    """On MiniLM's real attention scores the maps match a float64 sort reference within 1e-6."""
    from attnkit import sparsegen_lin
    from attnkit.attention.normalisers import Normaliser, register_normaliser, unregister_normaliser

    seen = []

    def record(scores, setting):
        seen.append(scores.detach().clone())
        return torch.softmax(scores, -1)

    register_normaliser(Normaliser("test-record", record, dense=True))
    try:
        model = build_classifier("minilm", 2, AttentionSpec("test-record")).eval()
        tok = load_tokenizer("minilm")
        with torch.no_grad():
            model(**tok(SENTS * 4, padding=True, return_tensors="pt"))
    finally:
        unregister_normaliser("test-record")
    assert len(seen) == 6
    for s in seen:
        z = s.double() / (1 - lam)
        zs = torch.sort(z, -1, descending=True).values
        cs = zs.cumsum(-1)
        k = (1 + torch.arange(1, z.shape[-1] + 1, dtype=z.dtype) * zs > cs).sum(-1, keepdim=True)
        ref = (z - (cs.gather(-1, k - 1) - 1) / k).clamp(min=0)
        p = sparsegen_lin(s, lam)
        assert (p.double() - ref).abs().max() < 1e-6
        assert torch.equal(p > 0, ref > 0)


def test_hub_names_go_to_transformers(monkeypatch):
    """A hub name is passed to transformers untouched; offline, one not in the cache fails at once, naming it."""
    import socket

    from huggingface_hub import constants

    from attnkit.models.resolve import resolve_model

    class Reachable:  # the hub answers (this machine has no network)
        def close(self):
            pass

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: Reachable())
    assert resolve_model("bert-base-uncased") == "bert-base-uncased"
    assert resolve_model("FacebookAI/roberta-base") == "FacebookAI/roberta-base"
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError, match="attnkit-test/does-not-exist"):
        build_classifier("attnkit-test/does-not-exist", 2)
