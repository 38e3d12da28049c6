"""attnkit.sparsify on transformers models: the compatibility table of the README, one tiny random model each."""

import pytest
import torch

import attnkit
from attnkit.attention.spec import spec_of

pytestmark = pytest.mark.slow

SMALL = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=64)
#: model_type -> config kwargs of a tiny model
WORKS = {
    "bert": SMALL,
    "roberta": dict(SMALL, pad_token_id=1),
    "xlm-roberta": dict(SMALL, pad_token_id=1),
    "electra": dict(SMALL, embedding_size=16),
    "albert": dict(SMALL, embedding_size=16),
    "distilbert": dict(vocab_size=120, dim=32, n_layers=2, n_heads=4, hidden_dim=64, max_position_embeddings=64),
    "modernbert": dict(SMALL, global_attn_every_n_layers=2, local_attention=8, pad_token_id=0),
    # decoders (causal), with grouped-query attention: fewer key/value heads than query heads
    "llama": dict(SMALL, num_key_value_heads=2, pad_token_id=0),
    "qwen2": dict(SMALL, num_key_value_heads=2, pad_token_id=0),
    # + logit soft-capping, and a sliding window of 3 in its even layers
    "gemma2": dict(SMALL, num_key_value_heads=2, head_dim=8, sliding_window=3, attn_logit_softcapping=1.0, pad_token_id=0),
    "mistral": dict(SMALL, num_key_value_heads=1, sliding_window=3, pad_token_id=0),
    # attention in their own code: attnkit's map inside it, their relative-position terms kept (DeBERTa-v3's settings)
    "deberta-v2": dict(SMALL, relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=16,
                       max_relative_positions=32, share_att_key=True, norm_rel_ebd="layer_norm"),
    "mpnet": dict(SMALL, max_position_embeddings=66),
}
#: models sparsify runs whose attention rows do not sum to 1 (gpt-oss: the sinks take a share of every row)
WORKS_SINKS = {
    "gpt_oss": dict(SMALL, num_key_value_heads=2, head_dim=8, sliding_window=3, num_local_experts=4, num_experts_per_tok=2,
                    pad_token_id=0),
}
REFUSED = {
    "deberta": dict(SMALL),
    "roformer": dict(SMALL),
}


def tiny(model_type: str, kw: dict, auto="AutoModelForSequenceClassification"):
    import transformers
    from transformers import AutoConfig

    torch.manual_seed(0)
    cfg = AutoConfig.for_model(model_type, **kw)
    cfg.num_labels = 2
    return getattr(transformers, auto).from_config(cfg, attn_implementation="eager").eval()


def batch():
    ids = torch.tensor([[2, 10, 11, 12, 13, 14, 3], [2, 15, 16, 3, 0, 0, 0]])
    return ids, (torch.arange(7)[None] < torch.tensor([[7], [4]])).long()


@pytest.mark.parametrize("model_type", list(WORKS))
def test_sparsify_works(model_type, tmp_path):
    from transformers import AutoModelForSequenceClassification

    model = attnkit.sparsify(tiny(model_type, WORKS[model_type]), "sparsegen-lin", lam=0.98)
    assert spec_of(model.config).attention == "sparsegen-lin" and model.config.model_type == "attnkit"
    ids, mask = batch()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
        plain = model(input_ids=ids, attention_mask=mask).logits  # no weights asked for: the flash path
        alone = model(input_ids=ids[1:, :4], attention_mask=mask[1:, :4])
    w = torch.stack(out.attentions)  # [layers, B, H, L, L]
    real = w[:, 0]  # the unpadded sentence: zeros come from the sparse map itself
    assert (real == 0).any() and torch.allclose(real.sum(-1), torch.ones_like(real.sum(-1)), atol=1e-5)
    assert torch.allclose(out.logits[1], alone.logits[0], atol=1e-5)  # padding is masked
    model.save_pretrained(tmp_path / "m")
    again = AutoModelForSequenceClassification.from_pretrained(tmp_path / "m").eval()
    with torch.no_grad():
        assert torch.equal(again(input_ids=ids, attention_mask=mask).logits, plain)
    torch.testing.assert_close(plain, out.logits, rtol=1e-5, atol=1e-6)  # the flash and the materialised path
    assert spec_of(again.config) == spec_of(model.config)


@pytest.mark.parametrize("model_type", list(REFUSED))
def test_sparsify_refuses_architectures_with_their_own_attention(model_type):
    model = tiny(model_type, REFUSED[model_type])
    with pytest.raises(ValueError, match="attention registry"):
        attnkit.sparsify(model)


@pytest.mark.parametrize("auto", ["AutoModel", "AutoModelForTokenClassification", "AutoModelForQuestionAnswering", "AutoModelForMaskedLM"])
def test_sparsify_every_head(auto, tmp_path):
    import transformers

    model = attnkit.sparsify(tiny("bert", SMALL, auto), "sparsegen-lin", lam=0.98)
    ids, mask = batch()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
        plain = model(input_ids=ids, attention_mask=mask)  # no weights asked for: the flash path
    assert (out.attentions[0][0] == 0).any()
    model.save_pretrained(tmp_path / "m")
    again = getattr(transformers, auto).from_pretrained(tmp_path / "m").eval()
    with torch.no_grad():
        b = again(input_ids=ids, attention_mask=mask)
    first = next(v for v in plain.values() if isinstance(v, torch.Tensor))
    assert torch.equal(next(v for v in b.values() if isinstance(v, torch.Tensor)), first)
    torch.testing.assert_close(first, next(v for v in out.values() if isinstance(v, torch.Tensor)), rtol=1e-5, atol=1e-6)


def test_sparsify_refuses_other_heads_and_switches_an_attnkit_model():
    from transformers import BertConfig, BertForPreTraining

    with pytest.raises(ValueError, match="none of them"):
        attnkit.sparsify(BertForPreTraining(BertConfig(**SMALL)))
    model = attnkit.sparsify(tiny("bert", SMALL), "sparsemax")
    attnkit.sparsify(model, "softmax")
    assert spec_of(model.config).attention == "softmax"
    assert spec_of(model.bert.encoder.layer[0].attention.self.config).attention == "softmax"


#: every model sparsify runs, with weights large enough (initializer_range 0.5) that a soft-cap, a sink or a key/value
#: head dropped or mixed up shows in the outputs; ModernBERT with a window (local_attention 4) narrower than the batch
AS_EAGER = {**WORKS, **WORKS_SINKS, "modernbert": dict(WORKS["modernbert"], local_attention=4)}
CAUSAL = ("llama", "qwen2", "gemma2", "mistral", "gpt_oss")


@pytest.mark.parametrize("model_type", list(AS_EAGER))
def test_sparsify_softmax_runs_as_the_model_does(model_type):
    kw = dict(AS_EAGER[model_type], initializer_range=0.5)
    ids, mask = batch()
    eager, ours = [model(input_ids=ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
                   for model in (tiny(model_type, kw), attnkit.sparsify(tiny(model_type, kw), "softmax"))]
    real = mask.bool()  # padded positions aside (a padded query's row may be wholly masked: the model's own is arbitrary)
    assert torch.allclose(ours.logits, eager.logits, atol=1e-5, rtol=0)
    for a, b in zip(eager.hidden_states, ours.hidden_states, strict=True):
        assert torch.allclose(b[real], a[real], atol=1e-5, rtol=0)
    for a, b in zip(eager.attentions, ours.attentions, strict=True):
        a, b = a.transpose(1, 2)[real], b.transpose(1, 2)[real]  # the real queries' rows [n, H, Lk]
        assert torch.allclose(b, a, atol=1e-5, rtol=0) and torch.equal(b == 0, a == 0)  # zeros where the model's are
    if model_type in CAUSAL:  # the future gets exactly nothing
        assert all((w[..., torch.ones(7, 7, dtype=torch.bool).triu(1)] == 0).all() for w in ours.attentions)
    if model_type == "mistral":  # and, every layer windowed (3), neither does the far past
        assert all((w[..., torch.ones(7, 7, dtype=torch.bool).tril(-3)] == 0).all() for w in ours.attentions)


def test_sparsemax_on_grouped_query_attention():
    model = attnkit.sparsify(tiny("llama", dict(WORKS["llama"], initializer_range=0.5)), "sparsemax")
    ids, mask = batch()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
        plain = model(input_ids=ids, attention_mask=mask).logits  # no weights asked for: the flash path
        alone = model(input_ids=ids[1:, :4], attention_mask=mask[1:, :4])
    allowed = torch.ones(7, 7, dtype=torch.bool).tril() & mask.bool()[:, None, None, :]  # [B, 1, Lq, Lk]
    for w in out.attentions:  # [B, H, L, L]
        assert (w[~allowed.expand_as(w)] == 0).all()  # the future and the padding
        assert ((w == 0) & allowed).any()  # and zeros the map gives among the keys it may see
        assert torch.allclose(w.sum(-1), torch.ones_like(w.sum(-1)), atol=1e-5)
    assert torch.allclose(out.logits[1], alone.logits[0], atol=1e-5)
    assert torch.allclose(plain, out.logits, atol=1e-5)  # the flash path gives what the materialised maps give


def test_attention_keywords_are_honoured_or_refused():
    from attnkit.attention.forward import attnkit_attention_forward

    module = attnkit.sparsify(tiny("llama", WORKS["llama"]), "softmax").model.layers[0].self_attn
    q, k, v = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    for bad in (dict(position_bias=torch.zeros(1, 4, 5, 5)), dict(no_such_thing=1)):
        with pytest.raises(ValueError, match=f"LlamaAttention passes its attention {next(iter(bad))}=") as e:
            attnkit_attention_forward(module, q, k, v, None, **bad)
        assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="sliding window of 2 but passes no mask"):
        attnkit_attention_forward(module, q, k, v, None, sliding_window=2)
    # harmless ones, and an unknown one given no value
    _, w = attnkit_attention_forward(module, q, k, v, None, position_ids=torch.arange(5)[None], use_cache=True, no_such_thing=None)
    assert (w[..., torch.ones(5, 5, dtype=torch.bool).triu(1)] == 0).all()  # Llama's layers are causal: no mask, no future
    _, w = attnkit_attention_forward(module, q, k, v, None, is_causal=False)
    assert (w > 0).all()
    _, w = attnkit_attention_forward(module, q, k, v, None, softcap=0.5)  # capped scores, each kv head serving 2 query heads
    scores = 0.5 * torch.tanh(q @ k.repeat_interleave(2, dim=1).transpose(-1, -2) * 8**-0.5 / 0.5)
    assert torch.allclose(w, scores.masked_fill(torch.ones(5, 5, dtype=torch.bool).triu(1), -torch.inf).softmax(-1), atol=1e-6)


def test_sparsify_refuses_a_layer_that_asks_what_attnkit_cannot_do():
    from transformers.models.llama.modeling_llama import LlamaAttention

    class BiasedAttention(LlamaAttention):  # adds a relative position bias to its scores, as T5's attention does
        def forward(self, hidden_states, attention_mask=None, attention_interface=None, **kwargs):
            return attention_interface(self, hidden_states, hidden_states, hidden_states, attention_mask, position_bias=self.bias)

    model = tiny("llama", WORKS["llama"])
    model.model.layers[1].self_attn.__class__ = BiasedAttention
    with pytest.raises(ValueError, match="BiasedAttention passes its attention function position_bias") as e:
        attnkit.sparsify(model)
    assert "\n" not in str(e.value) and model.config.model_type == "llama"  # refused before any change


def test_sparsify_takes_a_spec_or_the_settings_but_not_both():
    from transformers import BertConfig, BertModel

    from attnkit.attention.spec import AttentionSpec

    def tiny():
        torch.manual_seed(0)
        return BertModel(BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100))

    spec = AttentionSpec("sparsegen-lin", -2.0, blur="value", sparse_layers="last")
    by_spec = attnkit.sparsify(tiny(), spec=spec)
    by_settings = attnkit.sparsify(tiny(), "sparsegen-lin", -2.0, blur="value", sparse_layers="last")
    assert by_spec.config.attnkit == by_settings.config.attnkit == spec.to_dict()
    ids = torch.tensor([[1, 5, 7, 2]])
    with torch.no_grad():
        assert torch.equal(by_spec.eval()(ids).last_hidden_state, by_settings.eval()(ids).last_hidden_state)
    with pytest.raises(ValueError, match=r"sparsify\(spec=\.\.\., alpha=\.\.\.\): give the attention as spec or as settings"):
        attnkit.sparsify(tiny(), alpha=1.2, spec=spec)
    with pytest.raises(ValueError, match="takes an AttentionSpec, got str"):
        attnkit.sparsify(tiny(), spec="entmax15")


@pytest.mark.parametrize("model_type", ["deberta-v2", "mpnet"])
def test_own_code_attention_everything_else_works_too(model_type, tmp_path):
    """DeBERTa-v2 and MPNet: learned alpha per head, --sparse-layers, the blur, and the saved model loaded by
    transformers alone (trust_remote_code, attnkit not importable) with the same outputs."""
    import json
    import subprocess
    import sys

    from attnkit.attention.learned import learned_values

    ids, mask = batch()
    model = attnkit.sparsify(tiny(model_type, dict(WORKS[model_type], initializer_range=0.5)), "entmax-alpha", alpha=1.5, learned="alpha",
                             sparse_layers="last", blur="value")
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True)
    first, last = out.attentions[0][0], out.attentions[-1][0]  # the unpadded text
    assert not (first == 0).any() and (last == 0).any()  # softmax kept in layer 0, the sparse map in the last
    alphas = learned_values(model, "alpha")
    assert len(alphas) == 2 and all(a == pytest.approx(1.5) for row in alphas for a in row)
    model.train()
    model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1])).loss.backward()
    grads = [p.grad for n, p in model.named_parameters() if "alpha" in n]
    assert len(grads) == 2 and grads[-1] is not None and grads[-1].abs().sum() > 0  # alpha learns in the sparse layer
    model.eval()
    model.save_pretrained(tmp_path / "m")
    code = ("import sys, json, torch\nsys.modules['attnkit'] = None\n"
            "from transformers import AutoModelForSequenceClassification\n"
            "m = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], trust_remote_code=True).eval()\n"
            "ids, mask = torch.tensor(json.loads(sys.argv[2])), torch.tensor(json.loads(sys.argv[3]))\n"
            "with torch.no_grad():\n    print(json.dumps(m(input_ids=ids, attention_mask=mask).logits.tolist()))\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m"), json.dumps(ids.tolist()), json.dumps(mask.tolist())],
                       capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "HOME": "/tmp",
                                                            "OMP_NUM_THREADS": "1", "HF_HOME": str(tmp_path / "hf")})
    assert r.returncode == 0, r.stderr[-3000:]
    torch.testing.assert_close(torch.tensor(json.loads(r.stdout.strip().splitlines()[-1])), out.logits, rtol=1e-5, atol=1e-6)



@pytest.mark.parametrize("model_type", ["distilbert", "llama"])
def test_a_refused_learned_setting_leaves_the_model_as_it_was(model_type):
    """sparsify(model, learned=...) on a model whose attention modules do not say their heads was refused after it had
    turned the model into attnkit's class: every later forward failed (sweep 2026-11-28t CA). Refused before any
    change now, naming the argument."""
    model = tiny(model_type, WORKS[model_type])
    cls, cfg = type(model), model.config
    ids = torch.tensor([[5, 6, 7, 8]])
    before = model(input_ids=ids).logits
    with pytest.raises(ValueError, match=r"^learned='lam': .* leave learned out"):
        attnkit.sparsify(model, "sparsegen-lin", lam=0.5, learned="lam")
    assert type(model) is cls and model.config is cfg
    assert torch.equal(model(input_ids=ids).logits, before)


def test_sparse_layers_on_shared_layers_are_refused():
    """ALBERT's layers share one attention module: sparse_layers made every layer sparse or none, silently (sweep
    2026-11-28t CB). Refused before any change; every layer sparse still works."""
    model = tiny("albert", WORKS["albert"])
    cls = type(model)
    for layers in ("last", "0", "0-1"):
        with pytest.raises(ValueError, match=r"share 1 attention module .* cannot be sparse in some layers only"):
            attnkit.sparsify(model, "sparsemax", sparse_layers=layers)
        assert type(model) is cls
    attnkit.sparsify(model, "sparsemax")


def test_sparsify_again_keeps_drops_or_restarts_learned_settings(tmp_path, caplog):
    """An attnkit model that learned lam per head, sparsified again (sweep 2026-11-28u remarks): the same start keeps
    the learned values; a new lam= restarts them there (it was ignored without a word); an attention that learns none
    drops them, with a warning each time (they stayed, were saved, and the reload listed them as unexpected keys)."""
    from transformers import AutoModelForSequenceClassification

    from attnkit.attention.learned import LEARNED, learned_values

    model = attnkit.sparsify(tiny("bert", WORKS["bert"]), "sparsegen-lin", lam=0.5, learned="lam")
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, LEARNED["lam"].param):
                getattr(m, LEARNED["lam"].param).fill_(0.123)  # standing in for training
    trained = learned_values(model, "lam")
    with caplog.at_level("WARNING", logger="attnkit"):
        attnkit.sparsify(model, "sparsegen-lin", lam=0.5, learned="lam")
        assert learned_values(model, "lam") == trained and not caplog.records
        # lam left out is the model's own, not sparsify's default -4 (which restarted them, "as given": -28v ED)
        attnkit.sparsify(model, "sparsegen-lin", learned="lam")
        assert learned_values(model, "lam") == trained and not caplog.records and spec_of(model.config).lam == 0.5
        attnkit.sparsify(model, "sparsegen-lin", lam=-1.0, learned="lam")
        assert all(abs(v + 1.0) < 1e-6 for row in learned_values(model, "lam") for v in row)
        assert "lam learned per head" in caplog.text and "start again at lam=-1, as given" in caplog.text
        caplog.clear()
        attnkit.sparsify(model, "sparsemax")
        assert learned_values(model, "lam") is None and "are dropped: the new attention learns none" in caplog.text
    model.save_pretrained(tmp_path / "m")
    _, info = AutoModelForSequenceClassification.from_pretrained(tmp_path / "m", trust_remote_code=True,
                                                                 output_loading_info=True)
    assert not info["unexpected_keys"] and not info["missing_keys"], info


def test_attention_spec_is_at_the_top_level():
    """sparsify's docstring names AttentionSpec for spec=: it is attnkit.AttentionSpec (sweep 2026-11-28u remark)."""
    from attnkit.attention.spec import AttentionSpec

    assert attnkit.AttentionSpec is AttentionSpec and "AttentionSpec" in attnkit.__all__
    model = attnkit.sparsify(tiny("bert", WORKS["bert"]), spec=attnkit.AttentionSpec("sparsemax", blur="value"))
    assert spec_of(model.config).attention == "sparsemax" and spec_of(model.config).blur == "value"



def test_a_sparsified_model_pickles(tmp_path, tiny_bert):
    """torch.save(model) of a sparsified (or attnkit-loaded) model failed: its class is made at run time and pickle
    looked it up by name (PicklingError; sweep 2026-11-28v EB). It pickles, and loads in a fresh process to the same
    logits, attentions and hidden states (unregistered with transformers there, it returned None for them, and a
    layer-pooling model failed: -28w FA); deepcopy too."""
    import copy
    import json
    import subprocess
    import sys

    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_classifier
    from attnkit.models.pooling import HeadSpec

    model = attnkit.sparsify(tiny("bert", WORKS["bert"]), "sparsegen-lin", lam=0.5, learned="lam")
    pooled = build_classifier(str(tiny_bert), 2, AttentionSpec("sparsemax"), head=HeadSpec(pooling="weighted", se=True)).eval()
    ids, mask = batch()
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
        want = [out.logits.tolist(), out.attentions[-1].tolist(), out.hidden_states[-1].tolist(),
                pooled(input_ids=ids, attention_mask=mask).logits.tolist()]
        again = copy.deepcopy(model)
        assert type(again) is type(model) and torch.equal(again(input_ids=ids, attention_mask=mask).logits, out.logits)
    torch.save(model, tmp_path / "m.pt")  # after forwards that recorded hidden states: transformers' hooks set aside
    torch.save(pooled, tmp_path / "p.pt")
    with torch.no_grad():  # and put back by the next forward
        o = model(input_ids=ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
        assert torch.equal(o.attentions[-1], out.attentions[-1]) and len(o.hidden_states) == len(out.hidden_states)
        assert pooled(input_ids=ids, attention_mask=mask).logits.tolist() == want[3]
    code = ("import sys, json, torch\nm = torch.load(sys.argv[1], weights_only=False).eval()\n"
            "p = torch.load(sys.argv[2], weights_only=False).eval()\n"
            "ids, mask = torch.tensor(json.loads(sys.argv[3])), torch.tensor(json.loads(sys.argv[4]))\n"
            "with torch.no_grad():\n"
            "    o = m(input_ids=ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)\n"
            "    got = [o.logits.tolist(), o.attentions[-1].tolist(), o.hidden_states[-1].tolist(),\n"
            "           p(input_ids=ids, attention_mask=mask).logits.tolist()]\n"
            "print(json.dumps([type(m).__name__, got]))\n")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m.pt"), str(tmp_path / "p.pt"), json.dumps(ids.tolist()),
                        json.dumps(mask.tolist())], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    name, got = json.loads(r.stdout.strip().splitlines()[-1])
    assert name == type(model).__name__
    for g, w in zip(got, want):
        torch.testing.assert_close(torch.tensor(g), torch.tensor(w), rtol=1e-5, atol=1e-6)
