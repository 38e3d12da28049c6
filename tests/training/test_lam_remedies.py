"""SSAF remedies: lam learned per layer and head, and a lam warm-up schedule."""

from dataclasses import asdict, replace
import json

import pytest
import torch
from helpers import logits_of

from attnkit.attention.learned import learned_values
from attnkit.attention.normalisers import LEARNED
from attnkit.attention.spec import AttentionSpec
from attnkit.attention.maps import sparsegen_lin
from attnkit.models.build import build_classifier
from attnkit.models.checkpoint import load_classifier, load_tokenizer, save_checkpoint
from attnkit.training.schedules import LAM_WARMUP_FACTOR
from attnkit.training.finetune import TrainConfig, train
from attnkit.training.schedules import warmup_lam

SENTS = ["a great movie and a really good story", "bad", "it was not fun but the actor was superb"]


def test_learned_lam_starts_at_the_spec_and_equals_fixed_lam(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    fixed = build_classifier(tiny_bert, 2, AttentionSpec("sparsegen-lin", -2.0))
    learn = build_classifier(tiny_bert, 2, AttentionSpec("sparsegen-lin", -2.0, learned="lam"))
    learn.load_state_dict(fixed.state_dict(), strict=False)
    lams = learned_values(learn, "lam")
    assert len(lams) == 2 and all(len(l) == 4 for l in lams)
    assert all(abs(x + 2.0) < 1e-6 for row in lams for x in row)
    a, b = logits_of(fixed, tok, SENTS), logits_of(learn, tok, SENTS)
    assert torch.allclose(a.logits, b.logits, atol=1e-5)
    assert learned_values(fixed, "lam") is None


def test_learned_lam_gets_gradients_and_stays_below_one(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    model = build_classifier(tiny_bert, 2, AttentionSpec("sparsegen-lin", 0.5, learned="lam")).train()
    rhos = [p for n, p in model.named_parameters() if n.endswith(LEARNED["lam"].param)]
    assert len(rhos) == 2
    out = model(**tok(SENTS, padding=True, return_tensors="pt"), labels=torch.tensor([1, 0, 1]))
    out.loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in rhos)
    with torch.no_grad():  # any value of the parameter is a valid lam < 1
        for p in rhos:
            p.fill_(-30.0)
    assert all(x < 1 for row in learned_values(model, "lam") for x in row)


def test_each_head_uses_its_own_lam(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    model = build_classifier(tiny_bert, 2, AttentionSpec("sparsegen-lin", 0.0, learned="lam"))
    lam = torch.tensor([-3.0, 0.0, 0.5, 0.9])
    for m in [m for m in model.modules() if hasattr(m, LEARNED["lam"].param)]:
        getattr(m, LEARNED["lam"].param).data.copy_(torch.log1p(-lam))
    # reference: the first layer's scores through sparsegen_lin with each head's lam
    sa = model.bert.encoder.layer[0].attention.self
    enc = tok(SENTS[:1], return_tensors="pt")
    w = logits_of(model, tok, SENTS[:1], output_attentions=True).attentions[0]  # [1, H, L, L]
    with torch.no_grad():
        x = model.bert.embeddings(input_ids=enc["input_ids"], token_type_ids=enc["token_type_ids"])
        B, L, _ = x.shape
        q = sa.query(x).view(B, L, 4, -1).transpose(1, 2)
        k = sa.key(x).view(B, L, 4, -1).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) * sa.scaling
    for h in range(4):
        ref = sparsegen_lin(scores[:, h], float(lam[h]))
        assert torch.allclose(w[:, h], ref, atol=1e-5), h
    assert (w[:, 3] == 0).sum() > (w[:, 0] == 0).sum()  # lam 0.9 is sparser than lam -3


def test_learned_lam_survives_save_and_reload(tiny_bert, tmp_path):
    tok = load_tokenizer(tiny_bert)
    model = build_classifier(tiny_bert, 2, AttentionSpec("sparsegen-lin", -1.0, learned="lam"))
    for i, m in enumerate(m for m in model.modules() if hasattr(m, LEARNED["lam"].param)):
        getattr(m, LEARNED["lam"].param).data.copy_(torch.log1p(-torch.tensor([0.3, -2.0, 0.7, -5.0])) + 0.01 * i)
    d = save_checkpoint(model, tmp_path / "m", tok)
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["attnkit"]["learned"] == "lam" and len(cfg["attnkit_lam"]) == 2
    back = load_classifier(d)
    assert learned_values(back, "lam") == learned_values(model, "lam")
    assert torch.equal(logits_of(back, tok, SENTS).logits, logits_of(model, tok, SENTS).logits)


def test_older_runs_learn_lam_reads_as_learned():
    """A run recorded before ``learned`` (``learn_lam`` / ``learn_alpha`` booleans) compares as the same settings."""
    from attnkit.training.run_folder import settings_differences

    fields = TrainConfig.__dataclass_fields__
    now = asdict(TrainConfig(attention="sparsegen-lin", learned="lam"))
    old = {k: v for k, v in now.items() if k != "learned"} | {"learn_lam": True, "learn_alpha": False}
    assert settings_differences(old, now, (), fields) == []
    assert settings_differences(old | {"learn_lam": False}, now, (), fields) == ["--learn-lam/--learn-alpha: None there, 'lam' now"]
    with pytest.raises(ValueError, match="more than one setting"):
        settings_differences(old | {"learn_alpha": True}, now, (), fields)
    with pytest.raises(ValueError, match="learned='beta'"):
        TrainConfig(learned="beta").spec()


def test_learn_lam_needs_sparsegen_lin():
    with pytest.raises(ValueError, match="sparsegen-lin"):
        AttentionSpec("softmax", learned="lam")


def test_warmup_lam_goes_from_denser_to_the_target():
    target = -6.0
    assert warmup_lam(target, 0, 100) == pytest.approx(1 - LAM_WARMUP_FACTOR * 7)
    lams = [warmup_lam(target, s, 100) for s in range(0, 130, 10)]
    assert all(a < b for a, b in zip(lams[:10], lams[1:11]))  # monotone towards sparser
    assert lams[10:] == [target] * 3
    assert warmup_lam(target, 5, 0) == target


def test_lam_warmup_and_learned_lam_train_end_to_end(tiny_bert, tiny_task, tmp_path):
    base = dict(task="csv", data_dir=str(tiny_task), model=str(tiny_bert), attention="sparsegen-lin", lam=-2.0, epochs=1, batch_size=16,
                max_length=32, logging_steps=1, seed=3)
    m = train(TrainConfig(**base, lam_warmup=0.5, output_dir=str(tmp_path / "w")))
    assert m["attention"]["lam"] == -2.0  # the target is what the model is saved with
    assert json.loads((tmp_path / "w/model/config.json").read_text())["attnkit"]["lam"] == -2.0
    m = train(TrainConfig(**base, learned="lam", lr=5e-2, output_dir=str(tmp_path / "l")))
    lams = m["lam_learned"]
    assert len(lams) == 2 and any(abs(x + 2.0) > 1e-4 for row in lams for x in row)  # it moved
    assert (tmp_path / "l/lam_learned.png").is_file() and (tmp_path / "l/lam_learned.svg").is_file()
    back = learned_values(load_classifier(tmp_path / "l/model"), "lam")
    assert [x for row in back for x in row] == pytest.approx([x for row in lams for x in row], abs=1e-6)
    with pytest.raises(ValueError, match="--lam-warmup"):
        TrainConfig(**{**base, "attention": "softmax"}, lam_warmup=0.5).spec()


def test_lam_warmup_callback_sets_lam_by_step(tiny_bert):
    from types import SimpleNamespace

    from attnkit.attention.spec import spec_of
    from attnkit.training.schedules import lam_warmup_callback

    model = build_classifier(tiny_bert, 2, AttentionSpec("sparsegen-lin", -6.0))
    cb = lam_warmup_callback(-6.0, 0.1)
    seen = []
    for step in (0, 50, 100, 500):
        cb.on_step_begin(None, SimpleNamespace(global_step=step, max_steps=1000), None, model=model)
        seen.append(spec_of(model.config).lam)
        # every layer's module sees the same lam (they share the config)
        assert spec_of(model.bert.encoder.layer[0].attention.self.config).lam == seen[-1]
    assert seen == [pytest.approx(warmup_lam(-6.0, s, 100)) for s in (0, 50, 100, 500)]
    assert seen[0] == pytest.approx(-27.0) and seen[-1] == -6.0


def test_lam_lr_moves_lam_on_its_own_learning_rate(tiny_bert, tiny_task, tmp_path):
    """--lam-lr: the lam parameters get their own learning rate. At lr 1e-7 the weights and lam stay put; with
    lam_lr 5e-2 lam moves while the other weights still barely do."""
    base = dict(task="csv", data_dir=str(tiny_task), model=str(tiny_bert), attention="sparsegen-lin", lam=-2.0, epochs=1,
                batch_size=16, max_length=32, logging_steps=1, seed=3, learned="lam", lr=1e-7)
    still = train(TrainConfig(**base, output_dir=str(tmp_path / "still")))
    moved = train(TrainConfig(**base, lam_lr=5e-2, output_dir=str(tmp_path / "moved")))
    drift = lambda m: max(abs(x + 2.0) for row in m["lam_learned"] for x in row)  # noqa: E731
    assert drift(still) < 1e-4 < 1e-2 < drift(moved)
    a, b = load_classifier(tmp_path / "still/model"), load_classifier(tmp_path / "moved/model")
    w = "bert.encoder.layer.0.attention.self.query.weight"
    assert torch.allclose(a.state_dict()[w], b.state_dict()[w], atol=1e-4)  # the others kept the tiny lr
    for bad in (dict(lam_lr=1e-3, learned=None), dict(lam_lr=0.0), dict(lam_lr=float("nan"))):
        with pytest.raises(ValueError, match="--lam-lr"):
            TrainConfig(**{**base, **bad}).spec()


def test_holdout_trains_without_a_seeded_fraction_and_scores_it(tiny_bert, tiny_task, tmp_path):
    """--holdout F: the same examples are held out for every run of one seed (whatever else differs), none of them is
    trained on, and the final model is scored on them as "heldout"."""
    from datasets import Dataset

    from attnkit.training.finetune import hold_out

    ds = Dataset.from_dict({"i": list(range(40))})
    rest, held = hold_out(ds, 0.25, 7)
    assert len(held) == 10 and len(rest) == 30 and set(rest["i"]) | set(held["i"]) == set(range(40))
    assert not set(rest["i"]) & set(held["i"])
    assert hold_out(ds, 0.25, 7)[1]["i"] == held["i"] and hold_out(ds, 0.25, 8)[1]["i"] != held["i"]
    with pytest.raises(ValueError, match="--holdout 0.01: 0 of the 40"):
        hold_out(ds, 0.01, 7)

    base = dict(task="csv", data_dir=str(tiny_task), model=str(tiny_bert), attention="softmax", epochs=1, batch_size=16,
                max_length=32, logging_steps=1, seed=3)
    m = train(TrainConfig(**base, holdout=0.25, output_dir=str(tmp_path / "h")))
    assert m["train_size"] == 72 and 0 <= m["heldout"]["accuracy"] <= 1 and "loss" in m["heldout"]
    assert "heldout" not in train(TrainConfig(**base, output_dir=str(tmp_path / "n")))
    # a finished run recorded before --holdout existed was trained on the whole split: asking for a held-out part there
    # is another run (refused, naming it), asking for none is that run
    rc = tmp_path / "n" / "run_config.json"
    rc.write_text(json.dumps({k: v for k, v in json.loads(rc.read_text()).items() if k != "holdout"}))
    with pytest.raises(ValueError, match="--holdout: 0.0 there, 0.25 now"):
        train(TrainConfig(**base, holdout=0.25, output_dir=str(tmp_path / "n")))
    assert train(TrainConfig(**base, output_dir=str(tmp_path / "n")))["already_complete"]


def test_a_sweep_cell_recorded_before_a_setting_existed_is_reused_only_at_its_default(tiny_bert, tiny_task):

    from attnkit.training.sweep import _check_same, sweep_settings

    base = TrainConfig(task="csv", data_dir=str(tiny_task), model=str(tiny_bert), attention="softmax")
    old = {"settings": {k: v for k, v in sweep_settings(base).items() if k not in ("holdout", "alpha_warmup", "learned")}}
    _check_same(old, base, "the cell")  # the settings it predates were at their defaults
    with pytest.raises(ValueError, match="--holdout: 0.0 there, 0.25 now"):
        _check_same(old, replace(base, holdout=0.25), "the cell")


@pytest.mark.parametrize("bad", ["1", "-0.1", "nan", "1.5"])
def test_bad_holdout_is_refused_in_one_line(tiny_bert, tiny_task, tmp_path, bad, capsys):
    from attnkit.cli import main

    rc = main(["train", "--task", "csv", "--data-dir", str(tiny_task), "--model", str(tiny_bert), "--holdout", bad,
               "--output-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert rc != 0 and "--holdout" in err and "expected the fraction of the training split" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_pooling_lr_trains_sesamebert_layer_weights_on_their_own_learning_rate(tiny_bert, tiny_task, tmp_path):
    """--pooling-lr: SE's parameters and the weighted strategy's mix get their own learning rate. At lr 1e-7 they stay
    at their initial values; at pooling lr 5e-2 they move while the encoder's weights still barely do."""
    from attnkit.models.pooling import layer_weight_parameters

    base = dict(task="csv", data_dir=str(tiny_task), model=str(tiny_bert), attention="softmax", epochs=1, batch_size=16,
                max_length=32, logging_steps=1, seed=3, lr=1e-7, se=True, pooling="weighted")
    train(TrainConfig(**base, output_dir=str(tmp_path / "still")))
    train(TrainConfig(**base, pooling_lr=5e-2, output_dir=str(tmp_path / "moved")))
    a, b = load_classifier(tmp_path / "still/model"), load_classifier(tmp_path / "moved/model")
    assert len(layer_weight_parameters(a)) == 5  # SE's two layers (weight, bias) and the mix
    assert a.layer_mix.abs().max() < 1e-5 < 1e-3 < b.layer_mix.abs().max()  # the mix starts at zeros
    assert (a.se.fc2.bias - 0.8).abs().max() < 1e-5 < 1e-3 < (b.se.fc2.bias - 0.8).abs().max()  # SE's biases start at 0.8
    w = "encoder.encoder.layer.0.attention.self.query.weight"
    assert torch.allclose(a.state_dict()[w], b.state_dict()[w], atol=1e-4)  # the others kept the tiny lr
    for bad in (dict(se=False, pooling="last", pooling_lr=1e-3), dict(pooling_lr=0.0), dict(pooling_lr=float("nan"))):
        with pytest.raises(ValueError, match="--pooling-lr"):
            TrainConfig(**{**base, **bad}).validate()


def test_a_holdout_that_takes_every_example_of_a_class_says_so(tiny_bert, tmp_path, caplog):
    """50 classes of one example each, --holdout 0.2: the classes held out whole are never trained on; it ran without a
    word (sweep s23b). Where every class keeps an example, nothing is said."""
    import logging

    data = tmp_path / "c50"
    data.mkdir()
    for split, word in (("train", "good"), ("dev", "fine")):
        (data / f"{split}.csv").write_text("text,label\n" + "".join(f"{word} {i},c{i}\n" for i in range(50)))
    base = dict(task="csv", data_dir=str(data), model=str(tiny_bert), attention="softmax", max_steps=1, batch_size=16,
                max_length=16, seed=3)
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        m = train(TrainConfig(**base, holdout=0.2, output_dir=str(tmp_path / "h")))
    said = [r.getMessage() for r in caplog.records if "never trained on them" in r.getMessage()]
    assert m["train_size"] == 40 and len(said) == 1, caplog.text
    assert "the 40 training examples left for training (--holdout) hold no example of 10 of the 50 classes" in said[0]
    caplog.clear()
    (data / "train.csv").write_text("text,label\n" + "".join(f"good {i},c{i % 2}\n" for i in range(50)))
    (data / "dev.csv").write_text("text,label\nfine,c0\nbad,c1\n")
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        train(TrainConfig(**base, holdout=0.2, output_dir=str(tmp_path / "two")))
    assert "never trained on them" not in caplog.text
