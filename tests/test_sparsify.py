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
}
REFUSED = {
    "deberta-v2": dict(SMALL),
    "mpnet": dict(SMALL, max_position_embeddings=66),
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
        alone = model(input_ids=ids[1:, :4], attention_mask=mask[1:, :4])
    w = torch.stack(out.attentions)  # [layers, B, H, L, L]
    real = w[:, 0]  # the unpadded sentence: zeros come from the sparse map itself
    assert (real == 0).any() and torch.allclose(real.sum(-1), torch.ones_like(real.sum(-1)), atol=1e-5)
    assert torch.allclose(out.logits[1], alone.logits[0], atol=1e-5)  # padding is masked
    model.save_pretrained(tmp_path / "m")
    again = AutoModelForSequenceClassification.from_pretrained(tmp_path / "m").eval()
    with torch.no_grad():
        assert torch.equal(again(input_ids=ids, attention_mask=mask).logits, out.logits)
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
    assert (out.attentions[0][0] == 0).any()
    model.save_pretrained(tmp_path / "m")
    again = getattr(transformers, auto).from_pretrained(tmp_path / "m").eval()
    with torch.no_grad():
        b = again(input_ids=ids, attention_mask=mask)
    first = next(v for v in out.values() if isinstance(v, torch.Tensor))
    assert torch.equal(next(v for v in b.values() if isinstance(v, torch.Tensor)), first)


def test_sparsify_refuses_other_heads_and_switches_an_attnkit_model():
    from transformers import BertConfig, BertForPreTraining

    with pytest.raises(ValueError, match="none of them"):
        attnkit.sparsify(BertForPreTraining(BertConfig(**SMALL)))
    model = attnkit.sparsify(tiny("bert", SMALL), "sparsemax")
    attnkit.sparsify(model, "softmax")
    assert spec_of(model.config).attention == "softmax"
    assert spec_of(model.bert.encoder.layer[0].attention.self.config).attention == "softmax"
