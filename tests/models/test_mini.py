"""MiniBERT: the model, Taylor-softmax, tokenizer, MLM masking, pretrain -> train -> predict/explain/words, freezing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnkit.attention.normalisers import NORMALISERS
from attnkit.attention.spec import AttentionSpec, spec_of
from attnkit.cli import main
from attnkit.models.freeze import freeze_parameters, parse_groups
from attnkit.models.mini import (
    MiniBertForMaskedLM,
    MiniBertForSequenceClassification,
    MiniBertModel,
    attention_parameter_count,
)
from attnkit.models.mini_config import make_config
from attnkit.models.build import build_classifier
from attnkit.models.checkpoint import load_classifier, load_tokenizer, save_checkpoint
from attnkit.training.config import DEFAULT_MINI_LR
from attnkit.training.pretrain import mlm_collator, train_tokenizer

SPECS = [AttentionSpec("softmax"), AttentionSpec("taylor"), AttentionSpec("sparsemax"), AttentionSpec("sparsegen-lin", -2.0)]
SENTS = ["a great movie and a really good story", "bad", "it was not fun but the actor was superb"]
TRAIN_TEXTS = [s for s in SENTS for _ in range(3)] + ["the plot was dull and boring", "superb fun film"]


# ----------------------------------------------------------------------------- Taylor-softmax


def test_taylor_is_registered_and_normalises():
    assert "taylor" in NORMALISERS and not AttentionSpec("taylor").is_sparse
    z = torch.tensor([[0.3, -1.0, 2.0, -math_inf(), 0.0], [-math_inf()] * 5, [1.0, 1.0, 1.0, 1.0, 1.0]])
    w = AttentionSpec("taylor").normalise(z)
    assert torch.isfinite(w).all()
    assert torch.allclose(w[0].sum(), torch.tensor(1.0)) and torch.allclose(w[2].sum(), torch.tensor(1.0))
    assert w[0, 3] == 0.0  # masked -> exactly 0
    assert torch.equal(w[1], torch.zeros(5))  # fully masked row -> zeros, not NaN
    f = 1 + z[0, :3] + z[0, :3] ** 2 / 2
    expected = torch.cat([f, torch.tensor([0.0]), torch.tensor([1.0])])
    expected = expected / expected.sum()
    assert torch.allclose(w[0], expected, atol=1e-6)
    assert torch.allclose(w[2], torch.full((5,), 0.2))
    assert (w[0, [0, 1, 2, 4]] > 0).all()  # dense: every unmasked entry > 0 (1 + z + z^2/2 >= 1/2)


def math_inf():
    return float("inf")


def test_taylor_gradcheck_float64_with_masks():
    z = torch.randn(3, 6, dtype=torch.float64)
    mask = torch.zeros(3, 6, dtype=torch.bool)
    mask[0, 2] = mask[1, 4:] = True

    def fn(x):
        return AttentionSpec("taylor").normalise(x.masked_fill(mask, -float("inf")))

    assert torch.autograd.gradcheck(fn, (z.requires_grad_(),))
    assert AttentionSpec("taylor").normalise(torch.randn(2, 4, dtype=torch.float64)).dtype == torch.float64


# ----------------------------------------------------------------------------- the model


@pytest.mark.parametrize("layers,heads", [(1, 1), (1, 2), (2, 1), (2, 4)])
def test_ssa_has_a_third_of_sa_attention_parameters_and_nta_none(layers, heads):
    counts = {k: attention_parameter_count(MiniBertModel(make_config(50, kind=k, layers=layers, heads=heads, dim=32)))
              for k in ("sa", "ssa", "nta")}
    assert counts["sa"] == 3 * layers * 32 * 32
    assert counts["ssa"] * 3 == counts["sa"]
    assert counts["nta"] == 0
    # the only difference between the kinds is the attention: embeddings and heads are the same size
    totals = {k: sum(p.numel() for p in MiniBertForSequenceClassification(make_config(50, kind=k, layers=layers, heads=heads)).parameters())
              for k in ("sa", "ssa", "nta")}
    assert totals["sa"] - totals["nta"] == counts["sa"] and totals["ssa"] - totals["nta"] == counts["ssa"]


def test_positions_are_a_fixed_buffer_not_a_parameter():
    m = MiniBertModel(make_config(40))
    names = [n for n, _ in m.named_parameters()]
    assert not any("position" in n for n in names)
    assert "embeddings.positions" not in m.state_dict()  # rebuilt from the config, never saved or trained
    pos = m.embeddings.positions
    assert torch.allclose(pos[0, 0::2], torch.zeros(16)) and torch.allclose(pos[0, 1::2], torch.ones(16))
    assert torch.allclose(pos[3, 0], torch.sin(torch.tensor(3.0)))


def test_no_dropout_no_residual_by_default_and_flags_add_them():
    cfg = make_config(40)
    assert cfg.dropout == 0.0 and cfg.residual is False
    m = MiniBertModel(cfg)
    assert not any(isinstance(x, torch.nn.Dropout) for x in m.modules())
    m2 = MiniBertModel(make_config(40, residual=True, dropout=0.1))
    assert any(isinstance(x, torch.nn.Dropout) for x in m2.modules()) and m2.layers[0].residual
    with pytest.raises(ValueError, match="attention_kind 'xyz'"):
        make_config(40, kind="xyz")
    with pytest.raises(ValueError, match="not divisible"):
        make_config(40, dim=32, heads=3)


def _tok():
    return train_tokenizer(TRAIN_TEXTS, vocab_size=120)


@pytest.mark.parametrize("kind", ["sa", "ssa", "nta"])
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.attention)
def test_padded_batch_equals_each_sentence_alone(kind, spec):
    torch.manual_seed(0)
    tok = _tok()
    for extra in ({}, {"layers": 2, "heads": 2, "residual": True}):
        model = MiniBertForSequenceClassification(make_config(len(tok), kind=kind, spec=spec, **extra, num_labels=3)).eval()
        with torch.no_grad():
            batch = tok(SENTS, padding=True, return_tensors="pt")
            out = model(**batch, output_attentions=True)
            for i, s in enumerate(SENTS):
                alone = model(**tok([s], return_tensors="pt"))
                assert torch.allclose(out.logits[i], alone.logits[0], atol=1e-5), (kind, spec, extra, i)
        n = int(batch["attention_mask"][1].sum())
        for a in out.attentions:  # [B, H, L, L], padded keys exactly 0, real rows sum to 1
            assert a.shape == (3, extra.get("heads", 1), batch["input_ids"].shape[1], batch["input_ids"].shape[1])
            assert torch.equal(a[1, :, :, n:], torch.zeros_like(a[1, :, :, n:]))
            assert torch.allclose(a[1, :, :n].sum(-1), torch.ones_like(a[1, :, :n].sum(-1)), atol=1e-5)
        if spec.is_sparse:
            assert (torch.stack(out.attentions)[0, 0, :, :, :] == 0).any() or kind == "nta"


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.attention)
def test_every_normaliser_trains_with_finite_gradients(spec):
    torch.manual_seed(0)
    tok = _tok()
    model = MiniBertForSequenceClassification(make_config(len(tok), kind="sa", spec=spec, num_labels=3))
    enc = tok(SENTS, padding=True, return_tensors="pt")
    model(**enc, labels=torch.tensor([0, 1, 2])).loss.backward()
    grads = {n: p.grad for n, p in model.named_parameters()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    assert grads["mini.layers.0.attention.query.weight"].abs().sum() > 0


def test_nta_attention_is_the_bare_embedding_dot_product():
    torch.manual_seed(0)
    cfg = make_config(30, kind="nta", spec=AttentionSpec("softmax"))
    m = MiniBertModel(cfg).eval()
    ids = torch.tensor([[2, 7, 9, 3]])
    with torch.no_grad():
        out = m(ids, output_attentions=True)
        E = m.embeddings(ids)[0]
        A = torch.softmax(E @ E.T / 32**0.5, -1)
    assert torch.allclose(out.attentions[0][0, 0], A, atol=1e-6)
    assert torch.allclose(out.last_hidden_state[0], A @ E, atol=1e-5)


def test_ssa_attention_uses_only_the_query_projection():
    torch.manual_seed(0)
    m = MiniBertModel(make_config(30, kind="ssa")).eval()
    ids = torch.tensor([[2, 7, 9, 11, 3]])
    with torch.no_grad():
        out = m(ids, output_attentions=True)
        E = m.embeddings(ids)[0]
        A = torch.softmax((E @ m.layers[0].attention.query.weight.T) @ E.T / 32**0.5, -1)
    assert torch.allclose(out.attentions[0][0, 0], A, atol=1e-6)
    assert torch.allclose(out.last_hidden_state[0], A @ E, atol=1e-5)


# ----------------------------------------------------------------------------- the paper's options


@pytest.mark.parametrize("scale,div", [("none", 1.0), ("sqrt", 32**0.5)])
def test_score_scale_none_is_the_papers_bare_dot_product(scale, div):
    torch.manual_seed(0)
    m = MiniBertModel(make_config(30, kind="sa", score_scale=scale)).eval()
    att = m.layers[0].attention
    ids = torch.tensor([[2, 7, 9, 11, 3]])
    with torch.no_grad():
        out = m(ids, output_attentions=True)
        E = m.embeddings(ids)[0]
        A = torch.softmax((E @ att.query.weight.T) @ (E @ att.key.weight.T).T / div, -1)
    assert torch.allclose(out.attentions[0][0, 0], A, atol=1e-6)
    assert torch.allclose(out.last_hidden_state[0], A @ (E @ att.value.weight.T), atol=1e-5)
    assert m.config.score_scale == scale and m.config.scale_scores == (scale == "sqrt")
    with pytest.raises(ValueError, match="score_scale 'cube'"):
        make_config(30, score_scale="cube")


def test_full_heads_each_see_the_whole_width_and_project_back(tmp_path):
    torch.manual_seed(0)
    d = 32
    split = MiniBertModel(make_config(30, kind="ssa", heads=2, dim=d))
    full = MiniBertModel(make_config(30, kind="ssa", heads=2, dim=d, head_mode="full", score_scale="none")).eval()
    one = MiniBertModel(make_config(30, kind="ssa", heads=1, dim=d))
    # split 1 x 2 is a reshaping of 1 x 1 (same parameters); full 1 x 2 has two d x d queries and W_o (2d x d)
    assert attention_parameter_count(split) == attention_parameter_count(one) == d * d
    assert attention_parameter_count(full) == 2 * d * d + 2 * d * d
    assert attention_parameter_count(MiniBertModel(make_config(30, kind="sa", heads=2, head_mode="full"))) == 3 * 2 * d * d + 2 * d * d
    assert attention_parameter_count(MiniBertModel(make_config(30, kind="nta", heads=2, head_mode="full"))) == 2 * d * d
    # 1 x 1 is the same model either way (no W_o)
    assert {k: v.shape for k, v in MiniBertModel(make_config(30, kind="sa", head_mode="full")).state_dict().items()} == \
        {k: v.shape for k, v in MiniBertModel(make_config(30, kind="sa")).state_dict().items()}
    att = full.layers[0].attention
    ids = torch.tensor([[2, 7, 9, 11, 3]])
    with torch.no_grad():
        out = full(ids, output_attentions=True)
        E = full.embeddings(ids)[0]
        Wq = att.query.weight  # [2d, d]: rows h*d..(h+1)*d are head h's query
        heads = [torch.softmax((E @ Wq[h * d:(h + 1) * d].T) @ E.T, -1) for h in range(2)]
        expect = torch.cat([A @ E for A in heads], -1) @ att.output.weight.T
    for h in range(2):
        assert torch.allclose(out.attentions[0][0, h], heads[h], atol=1e-6)
    assert not torch.allclose(heads[0], heads[1])  # two different heads, each over all 32 dimensions
    assert torch.allclose(out.last_hidden_state[0], expect, atol=1e-5)
    # --heads need not divide --dim in full mode; the choice travels in config.json and reloads
    odd = MiniBertForSequenceClassification(make_config(30, kind="sa", heads=3, head_mode="full", num_labels=2))
    odd.save_pretrained(tmp_path / "odd")
    back = MiniBertForSequenceClassification.from_pretrained(tmp_path / "odd")
    assert back.config.head_mode == "full" and back.config.num_attention_heads == 3
    with pytest.raises(ValueError, match="head_mode 'wide'"):
        make_config(30, head_mode="wide")


def test_checkpoints_written_before_the_options_load_as_they_ran(tmp_path):
    """config.json without score_scale/head_mode (scale_scores only): sqrt (or none) and split, identical outputs."""
    torch.manual_seed(0)
    for old_flag, scale in ((True, "sqrt"), (False, "none")):
        m = MiniBertForSequenceClassification(make_config(30, kind="sa", heads=2, score_scale=scale, num_labels=2)).eval()
        m.save_pretrained(tmp_path / scale)
        cfg_path = tmp_path / scale / "config.json"
        cfg = json.loads(cfg_path.read_text())
        for k in ("score_scale", "head_mode"):
            del cfg[k]
        cfg["scale_scores"] = old_flag
        cfg_path.write_text(json.dumps(cfg))
        old = MiniBertForSequenceClassification.from_pretrained(tmp_path / scale).eval()
        assert old.config.score_scale == scale and old.config.head_mode == "split"
        ids = torch.tensor([[2, 7, 9, 11, 3]])
        with torch.no_grad():
            assert torch.equal(old(ids).logits, m(ids).logits)


def test_paper_options_on_the_command_line(tmp_path, capsys):
    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data", n_train=48, n_dev=16)
    pre = tmp_path / "pre"
    assert main(["pretrain", "--task", "csv", "--data-dir", str(data), "--heads", "3", "--head-mode", "full",
                 "--score-scale", "none", "--epochs", "1", "--vocab-size", "100", "--output-dir", str(pre)]) == 0
    cfg = json.loads((pre / "model" / "config.json").read_text())
    assert (cfg["score_scale"], cfg["head_mode"], cfg["num_attention_heads"]) == ("none", "full", 3)
    assert json.loads((pre / "metrics.json").read_text())["shape"]["score_scale"] == "none"
    out = tmp_path / "scratch"
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", "mini", "--heads", "2", "--head-mode", "full",
                 "--score-scale", "none", "--vocab-size", "100", "--max-steps", "2", "--no-heatmap", "--output-dir", str(out)]) == 0
    cfg = json.loads((out / "model" / "config.json").read_text())
    assert (cfg["score_scale"], cfg["head_mode"]) == ("none", "full")
    capsys.readouterr()
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", str(out), "--score-scale", "none"]) == 2
    assert "--score-scale only applies to --model mini" in capsys.readouterr().err
    from attnkit.training.config import PretrainConfig

    with pytest.raises(ValueError, match="^--head-mode 'wide': expected one of split, full$"):
        PretrainConfig(head_mode="wide").validate()


def test_classifier_loss_and_masked_lm_loss():
    tok = _tok()
    enc = tok(SENTS, padding=True, return_tensors="pt")
    cls = MiniBertForSequenceClassification(make_config(len(tok), num_labels=3))
    out = cls(**enc, labels=torch.tensor([0, 1, 2]))
    assert out.logits.shape == (3, 3) and out.loss.ndim == 0 and out.loss.requires_grad
    mlm = MiniBertForMaskedLM(make_config(len(tok)))
    labels = enc["input_ids"].masked_fill(enc["attention_mask"] == 0, -100)
    labels[:, ::2] = -100
    full = mlm(**enc, labels=labels, return_logits=True)
    assert full.logits.shape == (*enc["input_ids"].shape, len(tok))
    ref = torch.nn.functional.cross_entropy(full.logits.view(-1, len(tok)), labels.view(-1), ignore_index=-100)
    assert full.loss.item() == pytest.approx(ref.item(), rel=1e-5)
    fast = mlm(**enc, labels=labels)  # the head runs on the chosen positions only: same loss, no logits
    assert fast.logits is None and fast.loss.item() == pytest.approx(ref.item(), rel=1e-5)
    assert mlm(**enc).logits.shape == full.logits.shape
    assert ref.item() == pytest.approx(torch.log(torch.tensor(float(len(tok)))).item(), rel=0.3)


# ----------------------------------------------------------------------------- save / load / Auto classes


def test_build_and_load_classifier_round_trip_identical_logits(tmp_path):
    from transformers import AutoConfig, AutoModel, AutoModelForMaskedLM, AutoTokenizer

    torch.manual_seed(1)
    tok = _tok()
    pre = MiniBertForMaskedLM(make_config(len(tok), kind="ssa", spec=AttentionSpec("taylor")))
    save_checkpoint(pre, tmp_path / "pre", tok)
    assert (tmp_path / "pre" / "model.safetensors").is_file() and not list((tmp_path / "pre").glob("*.bin"))
    assert type(AutoConfig.from_pretrained(tmp_path / "pre")).__name__ == "MiniBertConfig"
    assert isinstance(AutoModelForMaskedLM.from_pretrained(tmp_path / "pre"), MiniBertForMaskedLM)
    assert isinstance(AutoModel.from_pretrained(tmp_path / "pre"), MiniBertModel)
    tok2 = AutoTokenizer.from_pretrained(tmp_path / "pre")
    assert tok2(SENTS)["input_ids"] == tok(SENTS)["input_ids"] and tok2.mask_token == "[MASK]"

    # build_classifier keeps the pretrained encoder, swaps the normaliser; attn_implementation="attnkit" is harmless
    net = build_classifier(tmp_path / "pre", 2, AttentionSpec("sparsegen-lin", -1.0), label_names=["neg", "pos"])
    assert isinstance(net, MiniBertForSequenceClassification)
    assert net.config._attn_implementation == "attnkit" and spec_of(net.config).attention == "sparsegen-lin"
    assert torch.equal(net.mini.embeddings.tokens.weight, pre.mini.embeddings.tokens.weight)
    assert torch.equal(net.mini.layers[0].attention.query.weight, pre.mini.layers[0].attention.query.weight)
    save_checkpoint(net, tmp_path / "cls", tok)
    back = load_classifier(tmp_path / "cls")
    assert spec_of(back.config) == AttentionSpec("sparsegen-lin", -1.0) and back.config.attention_kind == "ssa"
    enc = load_tokenizer(tmp_path / "cls")(SENTS, padding=True, return_tensors="pt")
    net.eval(), back.eval()
    with torch.no_grad():
        assert torch.equal(net(**enc).logits, back(**enc).logits)
        assert torch.equal(back.mini.embeddings.positions, net.mini.embeddings.positions)


def test_tokenizer_reloads_with_plain_transformers(tmp_path):
    tok = _tok()
    tok.save_pretrained(tmp_path)
    code = ("from transformers import AutoTokenizer; t = AutoTokenizer.from_pretrained(%r); "
            "print(t('Bad movie')['input_ids'])" % str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == tok("Bad movie")["input_ids"]


# ----------------------------------------------------------------------------- tokenizer and masking


def test_tokenizer_is_lower_cased_and_knows_only_its_training_text():
    tok = train_tokenizer(["the cat sat", "The CAT ran fast"] * 5, vocab_size=60)
    assert tok.convert_ids_to_tokens(tok("The Cat")["input_ids"]) == ["[CLS]", "the", "cat", "[SEP]"]
    ids = tok("zebra ж")["input_ids"]
    assert "zebra" not in tok.get_vocab() and tok.unk_token_id in ids  # unseen characters -> [UNK]
    with pytest.raises(ValueError, match="vocab-size"):
        train_tokenizer(["x"], vocab_size=3)


def test_masking_proportions_are_15_80_10_10():
    tok = train_tokenizer([" ".join(f"w{i}" for i in range(j, j + 30)) for j in range(0, 300, 3)], vocab_size=400)
    rows = [tok(" ".join(f"w{(7 * r + k) % 300}" for k in range(40)))["input_ids"] for r in range(300)]
    coll = mlm_collator(tok, 0.15, seed=0)
    batch = coll([{"input_ids": r} for r in rows])
    orig = torch.tensor(rows)
    chosen = batch["labels"] != -100
    special = (orig == tok.cls_token_id) | (orig == tok.sep_token_id)
    assert not chosen[special].any()  # [CLS]/[SEP] are never chosen
    assert torch.equal(batch["labels"][chosen], orig[chosen])  # labels are the original tokens
    n = int(chosen.sum())
    assert n / int((~special).sum()) == pytest.approx(0.15, abs=0.01)  # ~12,000 tokens: sd 0.003
    masked = (batch["input_ids"] == tok.mask_token_id) & chosen
    kept = (batch["input_ids"] == orig) & chosen
    random = chosen & ~masked & ~kept
    assert masked.sum().item() / n == pytest.approx(0.8, abs=0.03)  # sd ~0.01
    assert random.sum().item() / n == pytest.approx(0.1, abs=0.025)
    assert kept.sum().item() / n == pytest.approx(0.1, abs=0.025)
    assert torch.equal(batch["input_ids"][~chosen], orig[~chosen])  # nothing else changes


# ----------------------------------------------------------------------------- freezing


def test_freeze_groups_on_bert_and_mini(tiny_bert):
    net = build_classifier(tiny_bert, 2, AttentionSpec("softmax"))
    info = freeze_parameters(net, "embeddings,attention")
    for n, p in net.named_parameters():
        expect_frozen = n.startswith("bert.embeddings.") or ".attention." in n
        assert p.requires_grad != expect_frozen, n
    assert info["frozen_parameters"] == sum(p.numel() for p in net.parameters() if not p.requires_grad)
    mini = MiniBertForSequenceClassification(make_config(50, kind="sa", num_labels=2))
    freeze_parameters(mini, ["encoder"])
    assert {n for n, p in mini.named_parameters() if p.requires_grad} == {
        "classifier.0.weight", "classifier.0.bias", "classifier.2.weight", "classifier.2.bias"}
    with pytest.raises(ValueError, match="--freeze 'heads'"):
        parse_groups("embeddings,heads")


# ----------------------------------------------------------------------------- the command line end to end


def _write(dirpath: Path, rows_train, rows_dev):
    dirpath.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train.csv", rows_train), ("dev.csv", rows_dev)):
        (dirpath / name).write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows), encoding="utf-8")
    return dirpath


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    """pretrain (MiniSSA, taylor) -> train (fine-tune, no --attention) on a tiny task whose dev set has unseen words."""
    from helpers import write_tiny_sentiment

    root = tmp_path_factory.mktemp("mini")
    data = write_tiny_sentiment(root / "data", n_train=192)
    with open(data / "dev.csv", "a", encoding="utf-8") as f:  # words and characters only in dev
        f.write("quixotically zyzzyva movie ж,positive\n")
    pre = root / "pre"
    assert main(["pretrain", "--task", "csv", "--data-dir", str(data), "--kind", "ssa", "--attention", "taylor",
                 "--epochs", "3", "--vocab-size", "200", "--batch-size", "32", "--output-dir", str(pre), "--seed", "1"]) == 0
    ft = root / "ft"
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", str(pre), "--epochs", "15",
                 "--batch-size", "16", "--lr", "5e-3", "--max-length", "32", "--output-dir", str(ft), "--seed", "1", "--logging-steps", "50"]) == 0
    return root, data, pre, ft


def test_pretrain_writes_checkpoint_metrics_and_sees_only_training_text(pipeline):
    from transformers import AutoTokenizer

    root, data, pre, _ = pipeline
    m = json.loads((pre / "metrics.json").read_text())
    assert m["kind"] == "ssa" and m["attention"]["attention"] == "taylor"
    assert m["train_texts"] == 192 and 0 < m["mlm_loss"] < 20
    assert m["attention_parameters"] == 32 * 32
    model_dir = pre / "model"
    for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (model_dir / f).is_file(), f
    cfg = json.loads((model_dir / "config.json").read_text())
    assert cfg["model_type"] == "attnkit-mini" and {k: cfg["attnkit"][k] for k in ("attention", "lam")} == {"attention": "taylor", "lam": 0.0}
    tok = AutoTokenizer.from_pretrained(model_dir)
    vocab = tok.get_vocab()
    assert "movie" in vocab and "superb" in vocab  # training words
    assert "quixotically" not in vocab and "zyzzyva" not in vocab and "ж" not in vocab  # dev-only words and characters
    assert tok.unk_token_id in tok("ж")["input_ids"]
    assert not (pre / "trainer").exists()


def test_train_from_pretrained_keeps_its_normaliser_and_learns(pipeline):
    _, _, pre, ft = pipeline
    m = json.loads((ft / "metrics.json").read_text())
    assert {k: m["attention"][k] for k in ("attention", "lam")} == {"attention": "taylor", "lam": 0.0}  # no --attention: the checkpoint's own
    assert m["validation"]["accuracy"] >= 0.75, m["validation"]
    assert (ft / "attention.png").stat().st_size > 1000
    net = load_classifier(ft / "model")
    assert isinstance(net, MiniBertForSequenceClassification) and net.config.attention_kind == "ssa"


def test_predict_evaluate_explain_on_a_mini_checkpoint(pipeline, capsys, tmp_path):
    _, data, _, ft = pipeline
    assert main(["predict", "--model", str(ft), "a superb lovely film", "an awful boring plot"]) == 0
    rows = [json.loads(l) for l in capsys.readouterr().out.splitlines() if l.startswith("{")]
    assert [r["label"] for r in rows] == ["positive", "negative"]
    assert main(["evaluate", "--model", str(ft), "--data-dir", str(data), "--output", str(tmp_path / "ev.json")]) == 0
    ev = json.loads((tmp_path / "ev.json").read_text())
    assert ev["accuracy"] == pytest.approx(json.loads((ft / "metrics.json").read_text())["validation"]["accuracy"])
    png = tmp_path / "x.png"
    assert main(["explain", "--model", str(ft), "a superb story", "--output", str(png), "--layer", "0", "--head", "0",
                 "--stats", str(tmp_path / "st.json")]) == 0
    out = capsys.readouterr().out
    assert "tokens: [CLS]" in out and "taylor" in out and png.stat().st_size > 1000
    assert json.loads((tmp_path / "st.json").read_text())["zero_fraction"] == 0.0  # taylor is dense


def test_words_ranks_the_sentiment_words(pipeline, capsys, tmp_path):
    _, data, _, ft = pipeline
    out = tmp_path / "w.svg"
    assert main(["words", "--model", str(ft), "--data-dir", str(data), "--top", "5", "--min-count", "2",
                 "--output", str(out)]) == 0
    res = json.loads(out.with_suffix(".json").read_text())
    assert res["task"] == "csv" and res["split"] == "validation" and res["sentences"] == 33
    assert set(res["classes"]) == {"negative", "positive"}
    assert sum(c["predicted_sentences"] for c in res["classes"].values()) == 33
    for c in res["classes"].values():
        means = [w["mean"] for w in c["words"]]
        assert means == sorted(means, reverse=True) and all(w["count"] >= 2 for w in c["words"])
        assert all(w["total"] == pytest.approx(w["mean"] * w["count"]) for w in c["words"])
    assert out.read_text().startswith("<?xml")
    assert main(["words", "--model", str(ft), "--data-dir", str(data), "--output", str(tmp_path / "w.txt")]) == 2


def test_received_attention_is_the_column_sum_over_real_queries(pipeline):
    from attnkit.analysis.words import received_attention

    _, _, _, ft = pipeline
    net, tok = load_classifier(ft / "model"), load_tokenizer(ft / "model")
    texts = ["superb story", "an awful boring plot that was dull"]
    got = received_attention(net, tok, texts, progress=False)
    for text, (words, rec, pred) in zip(texts, got):
        assert words == text.split()
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            out = net(**enc, output_attentions=True)
        col = out.attentions[0][0, 0].sum(0)  # [L]: column sums over the (all real) query rows
        wid = tok(text).word_ids()
        expect = [float(sum(col[j] for j, w in enumerate(wid) if w == k)) for k in range(len(words))]
        assert rec == pytest.approx(expect, abs=1e-5)
        assert pred == int(out.logits.argmax())
        assert sum(rec) + float(col[0] + col[-1]) == pytest.approx(enc["input_ids"].shape[1], abs=1e-4)


def test_freeze_really_freezes_in_training(pipeline, tmp_path):
    from safetensors.torch import load_file

    _, data, pre, _ = pipeline
    before = load_file(str(pre / "model" / "model.safetensors"))
    emb, q = "mini.embeddings.tokens.weight", "mini.layers.0.attention.query.weight"
    runs = {}
    for groups in ("embeddings,attention", "embeddings"):
        out = tmp_path / groups.replace(",", "_")
        assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", str(pre), "--freeze", groups,
                     "--epochs", "2", "--batch-size", "16", "--output-dir", str(out), "--no-heatmap"]) == 0
        runs[groups] = (load_file(str(out / "model" / "model.safetensors")), json.loads((out / "metrics.json").read_text()))
    after, m = runs["embeddings,attention"]
    assert torch.equal(before[emb], after[emb]) and torch.equal(before[q], after[q])
    assert m["frozen"]["groups"] == ["embeddings", "attention"]
    assert m["frozen"]["frozen_parameters"] == before[emb].numel() + 32 * 32
    assert m["frozen"]["trainable_parameters"] + m["frozen"]["frozen_parameters"] == m["parameters"]
    only_emb, _ = runs["embeddings"]
    assert torch.equal(before[emb], only_emb[emb])
    assert not torch.equal(before[q], only_emb[q])  # the same training does move an unfrozen group


def test_train_mini_from_scratch_and_option_errors(tmp_path, capsys):
    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data", n_train=64, n_dev=16)
    with open(data / "dev.csv", "a", encoding="utf-8") as f:
        f.write("zyzzyva,positive\n")
    out = tmp_path / "scratch"
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", "mini", "--kind", "nta", "--heads", "2",
                 "--vocab-size", "150", "--epochs", "1", "--output-dir", str(out), "--no-heatmap"]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["attention"]["attention"] == "softmax"  # --model mini without --attention: the paper's softmax
    assert json.loads((out / "run_config.json").read_text())["lr"] == pytest.approx(DEFAULT_MINI_LR)  # no --lr
    cfg = json.loads((out / "model" / "config.json").read_text())
    assert cfg["attention_kind"] == "nta" and cfg["num_attention_heads"] == 2
    vocab = json.loads((out / "model" / "tokenizer.json").read_text())["model"]["vocab"]
    assert "movie" in vocab and "zyzzyva" not in vocab  # tokenizer from the training split only
    capsys.readouterr()
    # MiniBERT shape options with a checkpoint, an unknown kind, an unknown freeze group: one-line errors
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", str(out), "--kind", "ssa"]) == 2
    assert "--kind only applies to --model mini" in capsys.readouterr().err
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", "mini", "--freeze", "heads"]) == 2
    assert "--freeze 'heads'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["pretrain", "--kind", "xyz"])
    assert "invalid choice: 'xyz'" in capsys.readouterr().err
    assert main(["pretrain", "--task", "csv", "--data-dir", str(data), "--dim", "30", "--heads", "4",
                 "--output-dir", str(tmp_path / "p")]) == 2
    assert "--dim 30 is not divisible by --heads 4" in capsys.readouterr().err
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", "mini", "--heads", "3"]) == 2
    assert "--dim 32 is not divisible by --heads 3" in capsys.readouterr().err


def test_real_task_tokenizer_never_sees_dev_or_test():
    from helpers import require_shared_data

    from attnkit.tasks import load_task

    require_shared_data()
    d = load_task("semeval2013", None)
    train = list(d.splits["train"]["text"])
    tok = train_tokenizer(train, vocab_size=8000)
    bt = tok.backend_tokenizer

    def words(texts):
        return {w for t in texts for w, _ in bt.pre_tokenizer.pre_tokenize_str(bt.normalizer.normalize_str(t))}

    seen = words(train)
    blob = "\n" + "\n".join(sorted(seen)) + "\n"
    vocab = [v for v in tok.get_vocab() if v not in tok.all_special_tokens]
    # every vocabulary entry comes from the training text: a word-initial piece starts a training word,
    # a ##piece occurs inside one
    stray = [v for v in vocab if (v[2:] not in blob if v.startswith("##") else "\n" + v not in blob)]
    assert not stray, stray[:10]
    # dev/test words that start no training word are not in the vocabulary
    unseen = {w for w in words(list(d.splits["validation"]["text"]) + list(d.splits["test"]["text"]))
              if w.isalpha() and "\n" + w not in blob}
    assert len(unseen) > 100
    assert not unseen & set(vocab)
    assert len(vocab) > 5000


def test_minibert_through_auto_classes_and_pipeline_matches_predict(pipeline, capsys):
    """MiniBERT has a model type of its own ("attnkit-mini"): with attnkit imported, the Auto classes and
    pipeline give the model `attnkit predict` runs; plain transformers does not know the type."""
    import torch
    from transformers import AutoModelForSequenceClassification
    from transformers import pipeline as hf_pipeline

    _, _, _, ft = pipeline
    texts = ["a great movie", "bad boring plot"]
    assert main(["predict", "--model", str(ft), *texts]) == 0
    ours = [json.loads(l) for l in capsys.readouterr().out.strip().splitlines()]
    auto = AutoModelForSequenceClassification.from_pretrained(ft / "model").eval()
    from attnkit.models.checkpoint import load_tokenizer

    tok = load_tokenizer(ft / "model")
    with torch.no_grad():
        probs = torch.softmax(auto(**tok(texts, padding=True, return_tensors="pt")).logits, -1)
    pipe = hf_pipeline("text-classification", model=str(ft / "model"), top_k=None)
    for i, rows in enumerate(pipe(texts)):
        got = {r["label"]: r["score"] for r in rows}
        for label, p in ours[i]["probabilities"].items():
            assert got[label] == pytest.approx(p, abs=1e-5)
            assert float(probs[i, auto.config.label2id[label]]) == pytest.approx(p, abs=1e-5)


# ----------------------------------------------------------------------------- determinism


def test_wordpiece_vocab_breaks_ties_by_the_pieces_not_the_input_order():
    from attnkit.training.pretrain import wordpiece_vocab

    counts = {"ef": 3, "cd": 3, "ab": 3, "abcd": 1, "efab": 1}  # (a,##b) and (e,##f) tie at 4, (c,##d) has 3
    first = wordpiece_vocab(counts, 40, specials=["[PAD]", "[UNK]"])
    again = wordpiece_vocab(dict(reversed(list(counts.items()))), 40, specials=["[PAD]", "[UNK]"])
    assert first == again
    order = [t for t, _ in sorted(first.items(), key=lambda kv: kv[1])]
    assert order[:5] == ["[PAD]", "[UNK]", "a", "c", "e"]  # specials, then word-initial characters sorted
    merges = order[order.index("##f") + 1:]
    assert merges == ["ab", "ef", "cd", "##ab", "##cd", "abcd", "efab"]  # by count, ties in the pieces' order
    assert wordpiece_vocab(counts, 12, specials=["[PAD]", "[UNK]"]) == {t: i for i, t in enumerate(order[:12])}


def test_two_identical_runs_write_identical_files(tmp_path):
    """The same command in two processes (each its own hash seed) writes the same tokenizer, weights and config."""
    import os

    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data", n_train=64, n_dev=16)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    outs = []
    for name, hashseed in (("a", "1"), ("b", "2")):
        out = tmp_path / name
        cmd = [sys.executable, "-m", "attnkit.cli", "train", "--task", "csv", "--data-dir", str(data), "--model", "mini",
               "--vocab-size", "120", "--max-steps", "4", "--threads", "1", "--no-heatmap", "--output-dir", str(out)]
        subprocess.run(cmd, env={**env, "PYTHONHASHSEED": hashseed}, check=True, capture_output=True, text=True)
        outs.append(out)
    # every file but the hidden bookkeeping (.attnkit-files.json records the files' mtimes)
    files = sorted(p.relative_to(outs[0]) for d in ("mini_init", "model") for p in (outs[0] / d).rglob("*")
                   if p.is_file() and not p.name.startswith("."))
    assert {"model/tokenizer.json", "model/model.safetensors", "mini_init/tokenizer.json"} <= {str(f) for f in files}
    for f in files:
        assert (outs[0] / f).read_bytes() == (outs[1] / f).read_bytes(), f
    ma, mb = (json.loads((o / "metrics.json").read_text()) for o in outs)
    assert {k: ma["validation"][k] for k in ("accuracy", "loss")} == {k: mb["validation"][k] for k in ("accuracy", "loss")}


def test_a_vocabulary_smaller_than_the_alphabet_is_said(caplog):
    from attnkit.training.pretrain import train_tokenizer

    with caplog.at_level("WARNING", logger="attnkit"):
        tok = train_tokenizer(["great film", "awful film"], 6)
    assert len(tok) > 6
    assert f"note: --vocab-size 6 is below what the texts' characters and the special tokens need: the vocabulary has {len(tok)} entries" in caplog.text


def test_a_refused_minibert_rerun_leaves_the_finished_run_as_it_was(tmp_path, capsys):
    """`train --model mini --se --no-resume` into a finished MiniBERT run was refused (SE takes a BERT-family
    encoder) only after it had written a new mini_init/ over the run's (sweep s24b): the refusal comes first now."""
    from helpers import snapshot, write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data", n_train=32, n_dev=8)
    out = tmp_path / "m"
    base = ["train", "--task", "csv", "--data-dir", str(data), "--model", "mini", "--vocab-size", "120", "--max-steps", "2",
            "--threads", "1", "--no-heatmap", "--output-dir", str(out)]
    assert main(base + ["--seed", "1"]) == 0
    before = snapshot(out)
    capsys.readouterr()
    assert main(base + ["--seed", "2", "--layers", "3", "--se", "--no-resume"]) == 2
    assert "--layer-pooling/--se take a BERT-family encoder, not MiniBERT" in capsys.readouterr().err
    assert snapshot(out) == before
