"""``attnkit adapt`` (continued masked-LM pre-training annealed to a sparse map), ``--sparse-layers`` (the sparse map
in some layers only) and ``--teacher`` (distillation from a fine-tuned softmax model) do what they say, on a tiny BERT
and a tiny csv task written by the tests."""

import json
import math
import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file

from attnkit.cli import main
from helpers import merged, one_line_error
from helpers import two_step_train_args

pytestmark = pytest.mark.slow

SENTS = ["a great movie and a really good story", "the plot was dull"]


def adapt_args(model, data, out, *extra):
    return merged(["adapt", "--task", "csv", "--data-dir", str(data), "--model", str(model), "--output-dir", str(out),
                   "--batch-size", "8", "--max-length", "16", "--logging-steps", "1", "--warmup", "0"], extra)


@pytest.fixture(scope="module")
def adapted(tiny_bert, data, tmp_path_factory):
    """1.5-entmax, 4 MLM steps: the first the MLM head's alone, alpha annealed over the first 2."""
    out = tmp_path_factory.mktemp("adapted") / "run"
    assert main(adapt_args(tiny_bert, data, out, "--attention", "entmax15", "--max-steps", "4", "--head-warmup", "1",
                           "--seed", "3")) == 0
    return out


def real_zeros(attentions, mask):
    """Per layer: how many weights between real tokens (query and key not padding) are exactly 0."""
    pair = (mask[:, None, :, None] & mask[:, None, None, :]).bool()
    return [int(((a == 0) & pair).sum()) for a in attentions]


# ----------------------------------------------------------------------------- attnkit adapt


def test_adapt_writes_an_encoder_that_train_fine_tunes(adapted, tiny_bert, data, tmp_path):
    out = adapted
    assert (out / "model" / "model.safetensors").is_file() and (out / "metrics.json").is_file()
    info = json.loads((out / "model" / "attnkit_run.json").read_text())
    rec = info["adapted"]
    assert rec["attention"]["attention"] == "entmax15"
    assert rec["schedule"] == {"alpha_start": 1.01, "alpha_end": 1.5}
    assert rec["anneal_steps"] == 2 and rec["head_warmup_steps"] == 1 and rec["steps"] == 4
    assert rec["seed"] == 3 and rec["texts"]["tasks"] == {"csv": 96} and rec["texts"]["texts"] >= 1
    assert rec["model"] == str(tiny_bert) and math.isfinite(rec["mlm_loss"])
    assert len(rec["zero_share"]) == 2 and len(rec["nonzeros_per_row"]) == 2
    assert json.loads((out / "model" / "config.json").read_text())["attnkit"]["attention"] == "entmax15"
    # the progress log gives the current alpha: 1.01 in the first step, half way in the second, the target after
    metrics = json.loads((out / "metrics.json").read_text())
    alphas = [h["alpha"] for h in metrics["log_history"] if "loss" in h]
    assert alphas == pytest.approx([1.01, 1.255, 1.5, 1.5])
    # the Auto classes take the adapted encoder
    from transformers import AutoModel

    assert type(AutoModel.from_pretrained(out / "model")).__name__.startswith("Attnkit")
    # attnkit train --model <the adapt run> fine-tunes it, with its map, and records how it was adapted
    run = tmp_path / "ft"
    assert main(two_step_train_args(out, data, run)) == 0
    m = json.loads((run / "metrics.json").read_text())
    assert m["attention"]["attention"] == "entmax15"
    assert m["adapted"] == rec
    assert (run / "model" / "model.safetensors").is_file()


def test_the_encoder_keeps_the_pooler_and_drops_the_mlm_head(adapted, tiny_bert):
    before = load_file(str(tiny_bert / "model.safetensors"))
    after = load_file(str(adapted / "model" / "model.safetensors"))
    assert not [k for k in after if k.startswith("cls.") or "predictions" in k]
    pooler = [k for k in before if "pooler" in k]
    assert pooler and all(torch.equal(before[k], after[k]) for k in pooler)  # BERT's pooler as it was
    words = [k for k in after if k.endswith("word_embeddings.weight")]
    assert words and not torch.equal(before[words[0]], after[words[0]])  # the encoder did train


def test_the_new_mlm_head_is_tied_to_the_input_embeddings(tiny_bert):
    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_masked_lm

    model, new = build_masked_lm(tiny_bert, AttentionSpec("entmax15"))
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert new and all(k.startswith("cls.") for k in new)  # the tiny BERT ships no MLM head: only the head is new
    assert "cls.predictions.transform.dense.weight" in new and not any(k.endswith("decoder.weight") for k in new)


@pytest.mark.parametrize("attention", ["softmax", "entmax15"])
def test_the_mlm_loss_at_masked_positions_only_is_the_full_loss(tiny_bert, tmp_path, attention):
    """AdaptTrainer runs the decoder at the masked positions only: the same loss and the same gradients as the
    model's own loss over every position's logits (labels -100 where not masked), and nothing changes outside it."""
    from transformers import TrainingArguments

    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_masked_lm
    from attnkit.training.adapt import AdaptTrainer, MaskedPositions

    torch.manual_seed(0)
    model, _ = build_masked_lm(tiny_bert, AttentionSpec(attention))
    model.eval()  # no dropout: the two passes see the same network
    ids = torch.randint(5, model.config.vocab_size, (3, 9))
    attn = torch.ones_like(ids)
    attn[2, 6:] = 0  # a padded row
    labels = torch.full_like(ids, -100)
    labels[0, 1], labels[0, 4], labels[1, 2], labels[2, 3] = 7, 11, 13, 17
    full = model(input_ids=ids, attention_mask=attn, labels=labels)
    full.loss.backward()
    want = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    masked = MaskedPositions(model)
    trainer = AdaptTrainer(model=model, masked=masked, args=TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none"))
    loss, out = trainer.compute_loss(model, {"input_ids": ids, "attention_mask": attn, "labels": labels}, return_outputs=True)
    assert out.logits.shape == (1, 4, model.config.vocab_size)  # four masked tokens' logits, not 3 x 9 of them
    assert torch.allclose(loss, full.loss, atol=1e-6), (loss, full.loss)
    loss.backward()
    for n, p in model.named_parameters():
        if n in want:
            assert torch.allclose(p.grad, want[n], atol=1e-6), n
    assert masked.mask is None  # set for one forward only
    again = model(input_ids=ids, attention_mask=attn)  # outside compute_loss: every position's logits, as before
    assert again.logits.shape == (3, 9, model.config.vocab_size)
    assert torch.allclose(again.logits, full.logits, atol=1e-6)


def test_a_head_that_does_not_call_its_decoder_keeps_the_full_loss(tmp_path):
    """MobileBERT's head multiplies by the decoder's weight without calling the module: the probe finds the hook never
    fires, removes it, and the loss is the model's own at every token (it crashed on mismatched shapes)."""
    from transformers import MobileBertConfig, MobileBertForMaskedLM, TrainingArguments

    from attnkit.training.adapt import AdaptTrainer, MaskedPositions

    torch.manual_seed(0)
    cfg = MobileBertConfig(vocab_size=50, hidden_size=32, embedding_size=16, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=37, intra_bottleneck_size=16, true_hidden_size=16, num_feedforward_networks=1)
    model = MobileBertForMaskedLM(cfg).eval()
    masked = MaskedPositions(model)
    assert masked.handle is None and masked.mask is None
    ids = torch.randint(5, 50, (2, 6))
    labels = torch.full_like(ids, -100)
    labels[0, 2], labels[1, 4] = 7, 9
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    want = model(**inputs).loss
    trainer = AdaptTrainer(model=model, masked=masked, args=TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to="none"))
    assert torch.allclose(trainer.compute_loss(model, inputs), want)


@pytest.mark.parametrize("attention,extra,values", [
    # (map, its settings, (value at step 0, at step 2 (half the anneal), at step 4 (its end)))
    ("entmax15", {}, ("alpha", 1.01, 1.255, 1.5)),
    ("entmax-alpha", {"alpha": 2.0}, ("alpha", 1.01, 1.505, 2.0)),
    ("sparsegen-lin", {"lam": -4.0}, ("lam", -39.0, -21.5, -4.0)),  # temperature 1 - lam from 8 x 5 down to 5
    ("sparsemax", {}, ("lam", -7.0, -3.5, None)),  # sparsegen-lin from 1 - lam = 8 down to sparsemax itself
    ("softmax", {}, (None, None, None, None)),
])
def test_the_anneal_schedule(attention, extra, values):
    from attnkit.training.adapt import schedule_value, spec_at
    from attnkit.training.adapt_config import AdaptConfig

    cfg = AdaptConfig(attention=attention, max_steps=8, anneal=0.5, **extra)
    cfg.validate()
    assert cfg.anneal_steps() == 4
    key, *want = values
    target = cfg.spec()
    for step, v in zip((0, 2, 4), want):
        spec = spec_at(cfg, step)
        if v is None:
            assert spec == target, step
        else:
            assert schedule_value(spec) == {key: pytest.approx(v)}, step
            assert spec.attention == ("sparsegen-lin" if attention == "sparsemax" else attention)
    assert spec_at(cfg, 4) == spec_at(cfg, 8) == target  # reached at the end of the anneal, kept after it
    if attention != "softmax":
        assert spec_at(cfg, 0) != target and spec_at(cfg, 3) != target
    # --anneal 0: the target from the first step; --anneal 3: a step count
    assert spec_at(AdaptConfig(attention=attention, max_steps=8, anneal=0, **extra), 0) == target
    c3 = AdaptConfig(attention=attention, max_steps=8, anneal=3, **extra)
    assert c3.anneal_steps() == 3 and spec_at(c3, 3) == target


def test_the_head_warmup_freezes_the_encoder_not_the_head(tiny_bert, data, tmp_path, monkeypatch):
    """For --head-warmup 2 steps only the MLM head (and the word embeddings, which are its decoder) trains."""
    from attnkit.training import adapt as adapt_mod

    snaps = []

    def snap(model):
        return {n: p.detach().clone() for n, p in model.named_parameters()}

    class Watch(adapt_mod.HeadWarmupCallback):
        def on_train_begin(self, args, state, control, model=None, **kw):
            snaps.append(snap(model))

        def on_step_end(self, args, state, control, model=None, **kw):
            snaps.append(snap(model))

    monkeypatch.setattr(adapt_mod, "HeadWarmupCallback", Watch)
    assert main(adapt_args(tiny_bert, data, tmp_path / "run", "--attention", "sparsemax", "--max-steps", "3",
                           "--head-warmup", "2", "--lr", "1e-2")) == 0
    assert len(snaps) == 4  # before the first step, after each of 3
    start = snaps[0]
    head = [n for n in start if n.startswith("cls.")]
    tied = [n for n in start if n.endswith("word_embeddings.weight")]
    encoder = [n for n in start if n not in head and n not in tied]
    assert head and tied and len(encoder) > 10
    for step in (1, 2):
        assert all(torch.equal(snaps[step][n], start[n]) for n in encoder), f"the encoder moved in warm-up step {step}"
        assert any(not torch.equal(snaps[step][n], snaps[step - 1][n]) for n in head), f"the head did not train in step {step}"
    moved = [n for n in encoder if not torch.equal(snaps[3][n], start[n])]
    assert len(moved) > len(encoder) // 2, "after the warm-up the encoder trains"


@pytest.mark.parametrize("case", ["split", "data-dir", "utf8", "fifo", "lam", "layer-9", "softmax-layers", "alpha"])
def test_adapt_refusals_are_one_line(case, tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "run"
    args, needles = [], []
    if case == "split":
        args, needles = ["--task", "csv:dev"], ["--task csv:dev", "training texts only"]
    elif case == "data-dir":
        (data / "mine.txt").write_text("a text of mine\n")
        try:
            assert main(adapt_args(tiny_bert, data, out, "--text-file", str(data / "mine.txt"))) == 2
        finally:
            (data / "mine.txt").unlink()
        one_line_error(capsys, "mine.txt", "data folder")
        assert not (out / "model").exists()
        return
    elif case == "utf8":
        f = tmp_path / "bad.txt"
        f.write_bytes(b"a fine text\nthen \xff\xfe bad bytes\n")
        args, needles = ["--text-file", str(f)], [str(f), "line 2", "UTF-8"]
    elif case == "fifo":
        f = tmp_path / "pipe"
        os.mkfifo(f)
        args, needles = ["--text-file", str(f)], [str(f), "not a regular file"]
    elif case == "lam":
        args, needles = ["--attention", "entmax15", "--lam", "-2"], ["--lam -2", "only sparsegen-lin"]
    elif case == "layer-9":
        args, needles = ["--attention", "entmax15", "--sparse-layers", "9"], ["9", "2 layers"]
    elif case == "softmax-layers":
        args, needles = ["--attention", "softmax", "--sparse-layers", "1"], ["--sparse-layers 1", "softmax"]
    elif case == "alpha":
        args, needles = ["--attention", "entmax15", "--alpha", "2"], ["--alpha 2", "entmax-alpha"]
    assert main(adapt_args(tiny_bert, data, out, "--max-steps", "2", *args)) == 2
    one_line_error(capsys, *needles)
    assert not (out / "model").exists() and not (out / "metrics.json").exists()


def test_adapt_settings_refused_before_any_work():
    from attnkit.training.adapt_config import AdaptConfig

    for kw, needle in ((dict(attention="entmax-alpha", alpha=1.005), "--alpha 1.005"),  # below the anneal's start
                       (dict(tasks=["csv:test"]), "training texts only"),
                       (dict(tasks=[], text_files=[]), "no text to adapt on"),
                       (dict(tasks=["csv", "csv"]), "given twice"),
                       (dict(max_steps=10, anneal=20), "--anneal 20"),
                       (dict(max_steps=10, head_warmup=10), "--head-warmup 10"),
                       (dict(attention="taylor"), "--attention taylor"),
                       (dict(attention="softmax", sparse_layers="last"), "--sparse-layers last"),
                       (dict(attention="sparsemax", sparse_layers="5-4"), "--sparse-layers")):
        with pytest.raises(ValueError, match=needle.replace("-", "\\-")):
            AdaptConfig(**kw).validate()


class caplog_at_warning:
    """The attnkit logger's records while inside (warnings and above)."""

    def __enter__(self):
        import logging

        self.records, self.log = [], logging.getLogger("attnkit")
        self.handler = logging.Handler(logging.WARNING)
        self.handler.emit = self.records.append
        self.log.addHandler(self.handler)
        return self.records

    def __exit__(self, *exc):
        self.log.removeHandler(self.handler)


def test_text_files_are_read_and_recorded(tiny_bert, tmp_path, capsys):
    from attnkit.training.adapt import read_text_file

    f = tmp_path / "mine.txt"
    f.write_bytes("\ufeffa great film\n\n  the plot was dull  \na great film\n".encode())
    assert read_text_file(f) == ["a great film", "the plot was dull", "a great film"]
    out = tmp_path / "run"
    assert main(["adapt", "--text-file", str(f), "--model", str(tiny_bert), "--output-dir", str(out), "--max-steps", "1",
                 "--batch-size", "2", "--max-length", "16", "--attention", "sparsemax"]) == 0
    texts = json.loads((out / "model" / "attnkit_run.json").read_text())["adapted"]["texts"]
    assert texts["tasks"] == {} and texts["files"] == {str(f.resolve()): 3}
    assert texts["texts"] == 2 and texts["duplicates_dropped"] == 1
    # the same command on the file edited since: the finished run is kept, and one line says it was made from other
    # texts (it said "nothing was changed" alone: sweep 2026-11-28u DB)
    f.write_text("a dull film\nthe plot was great\n")
    capsys.readouterr()
    with caplog_at_warning() as records:
        assert main(["adapt", "--text-file", str(f), "--model", str(tiny_bert), "--output-dir", str(out), "--max-steps", "1",
                     "--batch-size", "2", "--max-length", "16", "--attention", "sparsemax"]) == 0
    assert "already complete" in capsys.readouterr().out
    assert any("was made from other inputs than those named now" in r.getMessage() for r in records)


def test_a_finished_run_is_kept_or_refused(adapted, tiny_bert, data, capsys):
    weights = adapted / "model" / "model.safetensors"
    before = (weights.read_bytes(), weights.stat().st_mtime_ns, (adapted / "metrics.json").read_text())
    capsys.readouterr()
    assert main(adapt_args(tiny_bert, data, adapted, "--attention", "entmax15", "--max-steps", "4", "--head-warmup", "1",
                           "--seed", "3")) == 0
    printed = capsys.readouterr().out
    assert "already complete" in printed and f"encoder in {adapted}" in printed and "written to" not in printed
    assert (weights.read_bytes(), weights.stat().st_mtime_ns, (adapted / "metrics.json").read_text()) == before
    assert main(adapt_args(tiny_bert, data, adapted, "--attention", "softmax", "--max-steps", "4", "--head-warmup", "1",
                           "--seed", "3")) == 2
    one_line_error(capsys, "other settings", "attention", "--no-resume")
    assert (weights.read_bytes(), weights.stat().st_mtime_ns) == before[:2]


def test_a_killed_run_resumes_and_refuses_other_settings(tiny_bert, data, tmp_path, capsys):
    out = tmp_path / "run"
    common = ("--max-steps", "2", "--save-steps", "1", "--head-warmup", "0", "--keep-checkpoints")
    assert main(adapt_args(tiny_bert, data, out, "--attention", "sparsemax", *common)) == 0
    ck = out / "checkpoint-2" / "trainer_state.json"
    state = json.loads(ck.read_text())
    state["log_history"].append({"step": 2, "resume_marker": 1})  # a resumed run carries it forward, a fresh one not
    ck.write_text(json.dumps(state))
    shutil.rmtree(out / "model")  # killed before the end
    (out / "metrics.json").unlink()
    capsys.readouterr()
    # its checkpoints are of sparsemax: a softmax run is not trained on from them
    assert main(adapt_args(tiny_bert, data, out, "--attention", "softmax", *common)) == 2
    one_line_error(capsys, "sparsemax", "softmax")
    assert not (out / "model").exists() and ck.is_file()
    assert main(adapt_args(tiny_bert, data, out, "--attention", "sparsemax", *common)) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert any(h.get("resume_marker") == 1 for h in m["log_history"]), "the run started over instead of resuming"
    assert (out / "model" / "model.safetensors").is_file()


def test_a_killed_run_on_texts_edited_since_is_refused(tiny_bert, tmp_path, capsys):
    """An adapt run on --text-file killed, the file edited, the run rerun: its checkpoints grew on the earlier texts
    (and the record would name the new ones). Refused in one line naming the file and the way out; the same texts
    written anew resume."""
    f = tmp_path / "mine.txt"
    texts = "a great film\nthe plot was dull\na fine story\nboring and long\n"
    f.write_text(texts)
    out = tmp_path / "run"
    args = ["adapt", "--text-file", str(f), "--model", str(tiny_bert), "--output-dir", str(out), "--max-steps", "2",
            "--save-steps", "1", "--keep-checkpoints", "--batch-size", "2", "--max-length", "16", "--attention", "sparsemax"]
    assert main(args) == 0
    assert json.loads((out / ".attnkit-run.json").read_text())["data"]
    shutil.rmtree(out / "model")  # killed before the end
    (out / "metrics.json").unlink()
    f.write_text(texts.replace("boring", "dull"))
    capsys.readouterr()
    assert main(args) == 2
    one_line_error(capsys, f"the examples of --text-file {f} are not those the run started from", "--no-resume")
    assert not (out / "model").exists()
    f.write_text(texts)
    assert main(args) == 0 and (out / "model" / "model.safetensors").is_file()


def test_adapt_under_torchrun(tiny_bert, data, tmp_path):
    """Two CPU processes (gloo), the head warm-up included: one encoder written, once."""
    out = tmp_path / "ddp"
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29537", "-m", "attnkit.cli",
           *adapt_args(tiny_bert, data, out, "--attention", "entmax15", "--max-steps", "3", "--head-warmup", "1")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("encoder written to") == 1
    rec = json.loads((out / "model" / "attnkit_run.json").read_text())["adapted"]
    assert rec["steps"] == 3 and rec["head_warmup_steps"] == 1 and rec["anneal_steps"] == 1


# ----------------------------------------------------------------------------- --sparse-layers


@pytest.mark.parametrize("text,canonical,layers", [
    ("all", None, {0, 1, 2, 3, 4, 5}),
    (None, None, {0, 1, 2, 3, 4, 5}),
    ("last", "last", {5}),
    ("LAST", "last", {5}),
    ("4-5", "4-5", {4, 5}),
    ("0,5", "0,5", {0, 5}),
    ("0, 3-5", "0,3-5", {0, 3, 4, 5}),
    ("2", "2", {2}),
    ([1, 3], "1,3", {1, 3}),
])
def test_sparse_layers_parse(text, canonical, layers):
    from attnkit.attention.placement import check_sparse_layers, sparse_layer_set

    assert check_sparse_layers(text) == canonical
    assert sparse_layer_set(canonical, 6) == frozenset(layers)


@pytest.mark.parametrize("bad,twice", [("0,0", 0), ("0-3,2", 2), ("4, 4-5", 4)])
def test_a_layer_named_twice_is_refused(bad, twice, tiny_bert, data, tmp_path, capsys):
    """`--sparse-layers 0,0` was taken and recorded as written (sweep s24): layer 0 under another name."""
    from attnkit.attention.placement import check_sparse_layers

    with pytest.raises(ValueError, match=f"layer {twice} is named twice"):
        check_sparse_layers(bad)
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", "--attention", "sparsemax", "--sparse-layers", bad)) == 2
    one_line_error(capsys, f"layer {twice} is named twice")
    assert check_sparse_layers("0,2-3,5") == "0,2-3,5"


@pytest.mark.parametrize("bad", ["", "5-4", "a", "1-2-3", "-1", "1,,2", "first", "1.5"])
def test_bad_sparse_layers_are_refused(bad, tiny_bert, data, tmp_path, capsys):
    from attnkit.attention.placement import check_sparse_layers
    from attnkit.attention.spec import AttentionSpec

    with pytest.raises(ValueError, match="expected 'all', 'last'"):
        check_sparse_layers(bad)
    with pytest.raises(ValueError):
        AttentionSpec("sparsemax", sparse_layers=bad)
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", "--attention", "sparsemax", "--sparse-layers", bad)) == 2
    one_line_error(capsys, "--sparse-layers")
    assert not (tmp_path / "o" / "model").exists()


def test_sparse_layers_beyond_the_model_or_with_softmax_are_refused(tiny_bert, data, tmp_path, capsys):
    from attnkit.attention.placement import sparse_layer_set

    with pytest.raises(ValueError, match="has 2 layers"):
        sparse_layer_set("1-2", 2)
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", "--attention", "sparsemax", "--sparse-layers", "0,9")) == 2
    one_line_error(capsys, "0,9", "2 layers")
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", "--attention", "softmax", "--sparse-layers", "last")) == 2
    one_line_error(capsys, "--sparse-layers last", "softmax")
    assert not (tmp_path / "o" / "model").exists()


def test_describe_names_the_sparse_layers():
    from attnkit.attention.spec import AttentionSpec

    assert AttentionSpec("entmax15", sparse_layers="4-5").describe() == "1.5-entmax in layers 4-5 (softmax in the others)"
    assert AttentionSpec("sparsemax", sparse_layers="0,5").describe() == "sparsemax in layers 0,5 (softmax in the others)"
    assert AttentionSpec("sparsemax", sparse_layers="2").describe() == "sparsemax in layer 2 (softmax in the others)"
    assert AttentionSpec("entmax15", sparse_layers="last").describe() == "1.5-entmax in the last layer (softmax in the others)"
    assert AttentionSpec("entmax15", sparse_layers="all").describe() == "1.5-entmax"
    assert AttentionSpec("entmax15", sparse_layers="all") == AttentionSpec("entmax15")


def _sharp_classifier(tiny_bert, spec):
    """A tiny classifier whose scores are large enough for sparse maps to give zeros between real tokens."""
    from attnkit.models.build import build_classifier

    torch.manual_seed(0)
    model = build_classifier(tiny_bert, 2, spec, label_names=["negative", "positive"])
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith(("query.weight", "key.weight")):
                p.mul_(30)
        model.classifier.weight.normal_(0, 1.0)
    return model.eval()


def _outputs(model, tok, texts=SENTS):
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        out = model(**enc, output_attentions=True)
    return out, enc["attention_mask"]


@pytest.mark.parametrize("layers,sparse", [("1", {1}), ("last", {1}), ("0", {0}), ("all", {0, 1})])
def test_only_the_named_layers_are_sparse(tiny_bert, layers, sparse):
    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.checkpoint import load_tokenizer

    tok = load_tokenizer(tiny_bert)
    model = _sharp_classifier(tiny_bert, AttentionSpec("sparsemax", sparse_layers=layers))
    out, mask = _outputs(model, tok)
    zeros = real_zeros(out.attentions, mask)
    for layer in range(2):
        if layer in sparse:
            assert zeros[layer] > 0, (layer, zeros)
        else:  # softmax: every weight between real tokens positive, the same weights as a softmax model's
            assert zeros[layer] == 0, (layer, zeros)
    soft, _ = _outputs(_sharp_classifier(tiny_bert, AttentionSpec("softmax")), tok)
    for layer in set(range(2)) - sparse:
        if layer == 0:  # the first layer's input is the same in both models
            assert torch.allclose(out.attentions[0], soft.attentions[0], atol=1e-6)


def test_sparse_layers_saved_and_reloaded(tiny_bert, tmp_path):
    from transformers import AutoModelForSequenceClassification

    from attnkit.attention.spec import AttentionSpec, spec_of
    from attnkit.models.checkpoint import load_model, load_tokenizer, save_checkpoint

    tok = load_tokenizer(tiny_bert)
    model = _sharp_classifier(tiny_bert, AttentionSpec("entmax15", sparse_layers="last"))
    d = save_checkpoint(model, tmp_path / "m", tok)
    assert json.loads((d / "config.json").read_text())["attnkit"]["sparse_layers"] == "last"
    want, mask = _outputs(model, tok)
    for again in (load_model(d), AutoModelForSequenceClassification.from_pretrained(d)):
        assert spec_of(again.config).sparse_layers == "last"
        got, _ = _outputs(again.eval(), tok)
        assert torch.equal(got.logits, want.logits)
        assert all(torch.equal(a, b) for a, b in zip(got.attentions, want.attentions))
    # remote code, attnkit not importable
    logits, zeros = _remote_outputs(d, SENTS, tmp_path)
    assert torch.allclose(logits, want.logits, atol=1e-5)
    assert zeros[0] == 0 and zeros[1] > 0 and zeros == real_zeros(want.attentions, mask)


def _remote_outputs(d, texts, tmp_path):
    """Logits and per-layer zeros between real tokens of the checkpoint ``d`` loaded with trust_remote_code in a
    process where attnkit cannot be imported."""
    code = (
        "import sys\nsys.modules['attnkit'] = None\n"
        "import json, torch\n"
        "from transformers import AutoModelForSequenceClassification, AutoTokenizer\n"
        "m = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], trust_remote_code=True).eval()\n"
        "tok = AutoTokenizer.from_pretrained(sys.argv[1])\n"
        "enc = tok(json.loads(sys.argv[2]), padding=True, return_tensors='pt')\n"
        "enc.pop('token_type_ids', None)  # all zeros for single texts; DistilBERT takes none\n"
        "with torch.no_grad():\n"
        "    out = m(**enc, output_attentions=True)\n"
        "k = enc['attention_mask'].bool()\n"
        "pair = k[:, None, :, None] & k[:, None, None, :]\n"
        "print(json.dumps({'logits': out.logits.tolist(), 'zeros': [int(((a == 0) & pair).sum()) for a in out.attentions],\n"
        "                  'impl': m.config._attn_implementation, 'attnkit': sys.modules.get('attnkit') is None}))\n"
    )
    r = subprocess.run([sys.executable, "-c", code, str(d), json.dumps(texts)], capture_output=True, text=True,
                       stdin=subprocess.DEVNULL, env={"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "PATH": "/usr/bin:/bin",
                                                      "HOME": "/tmp", "OMP_NUM_THREADS": "1", "HF_HOME": str(tmp_path / "hf")})
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["impl"] == "attnkit" and got["attnkit"]
    return torch.tensor(got["logits"]), got["zeros"]


@pytest.mark.parametrize("family", ["bert", "distilbert"])
def test_sparsify_takes_sparse_layers(tiny_bert, family, tmp_path):
    """sparsify(..., sparse_layers=) on a plain transformers classifier; DistilBERT's attention modules carry no
    layer_idx (attnkit numbers them), also when the saved model is loaded by the Auto classes or as remote code."""
    from transformers import AutoModelForSequenceClassification, DistilBertConfig, DistilBertForSequenceClassification

    from attnkit.attention.spec import spec_of
    from attnkit.models.checkpoint import load_tokenizer, save_checkpoint
    from attnkit.models.sparsify import sparsify

    tok = load_tokenizer(tiny_bert)
    torch.manual_seed(0)
    if family == "bert":
        plain = AutoModelForSequenceClassification.from_pretrained(tiny_bert, num_labels=2)
    else:
        plain = DistilBertForSequenceClassification(DistilBertConfig(vocab_size=max(tok.get_vocab().values()) + 1, dim=32, n_layers=2, n_heads=4,
                                                                     hidden_dim=64, max_position_embeddings=64))
    with torch.no_grad():
        for n, p in plain.named_parameters():
            if n.endswith(("query.weight", "key.weight", "q_lin.weight", "k_lin.weight")):
                p.mul_(30)
    model = sparsify(plain, "sparsemax", sparse_layers="last").eval()
    assert spec_of(model.config).sparse_layers == "last"
    texts = SENTS if family == "bert" else ["a great movie and a really good story"]  # DistilBERT: no token_type_ids
    enc = tok(texts, padding=True, return_tensors="pt")
    enc = {k: v for k, v in enc.items() if family == "bert" or k != "token_type_ids"}
    with torch.no_grad():
        want = model(**enc, output_attentions=True)
    zeros = real_zeros(want.attentions, enc["attention_mask"])
    assert zeros[0] == 0 and zeros[1] > 0
    with pytest.raises(ValueError, match="2 layers"):
        sparsify(model, "sparsemax", sparse_layers="5")
    if family == "distilbert":
        d = save_checkpoint(model, tmp_path / "m", tok)
        again = AutoModelForSequenceClassification.from_pretrained(d).eval()
        with torch.no_grad():
            got = again(**enc, output_attentions=True)
        assert torch.equal(got.logits, want.logits) and real_zeros(got.attentions, enc["attention_mask"]) == zeros
        logits, remote = _remote_outputs(d, texts, tmp_path)
        assert torch.allclose(logits, want.logits, atol=1e-5) and remote == zeros


@pytest.fixture(scope="module")
def sparse_run(tiny_bert, data, tmp_path_factory):
    """An encoder adapted to sparsemax in its last layer only, then fine-tuned so."""
    root = tmp_path_factory.mktemp("sparse_layers")
    assert main(adapt_args(tiny_bert, data, root / "a", "--attention", "sparsemax", "--sparse-layers", "last", "--max-steps", "2")) == 0
    assert main(two_step_train_args(root / "a", data, root / "t", "--attention", "sparsemax", "--sparse-layers", "last")) == 0
    return root / "a", root / "t"


def test_train_and_adapt_with_sparse_layers(sparse_run):
    a, t = sparse_run
    rec = json.loads((a / "model" / "attnkit_run.json").read_text())["adapted"]
    assert rec["attention"]["sparse_layers"] == "last"
    m = json.loads((t / "metrics.json").read_text())
    assert m["attention"]["sparse_layers"] == "last" and m["adapted"] == rec
    assert json.loads((t / "model" / "config.json").read_text())["attnkit"]["sparse_layers"] == "last"


def test_train_takes_the_adapted_map_where_attention_is_not_given(sparse_run, tiny_bert, data, tmp_path):
    """``attnkit train --model <adapt run>`` without --attention fine-tunes with the map the encoder was adapted to:
    its sparse layers and its alpha too, not only the map's name."""
    a, _ = sparse_run
    assert main(two_step_train_args(a, data, tmp_path / "t")) == 0
    assert json.loads((tmp_path / "t" / "metrics.json").read_text())["attention"]["sparse_layers"] == "last"
    assert main(two_step_train_args(a, data, tmp_path / "t2", "--sparse-layers", "0")) == 0  # given: it is what counts
    assert json.loads((tmp_path / "t2" / "metrics.json").read_text())["attention"]["sparse_layers"] == "0"
    a2 = tmp_path / "a2"
    assert main(adapt_args(tiny_bert, data, a2, "--attention", "entmax-alpha", "--alpha", "2", "--max-steps", "1")) == 0
    assert main(two_step_train_args(a2, data, tmp_path / "t3")) == 0
    att = json.loads((tmp_path / "t3" / "metrics.json").read_text())["attention"]
    assert att["attention"] == "entmax-alpha" and att["alpha"] == 2.0


def test_attention_given_without_sparse_layers_on_an_encoder_adapted_in_some_layers_is_said(sparse_run, data, tmp_path,
                                                                                          caplog):
    """adapt's hint said `--attention sparsemax`, which puts the map in every layer of an encoder adapted in its last
    layer only, without a word (sweep s23d). The hint leaves --attention out; given anyway, one line says so."""
    import logging

    a, _ = sparse_run
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        assert main(two_step_train_args(a, data, tmp_path / "t", "--attention", "sparsemax")) == 0
    said = [r.getMessage() for r in caplog.records if "without --sparse-layers puts its map in every layer" in r.getMessage()]
    assert len(said) == 1 and "in layers last only" in said[0], caplog.text
    assert json.loads((tmp_path / "t" / "metrics.json").read_text())["attention"].get("sparse_layers") is None


def test_another_map_given_for_an_adapted_encoder_is_said(tiny_bert, data, tmp_path, caplog):
    """`train --model <encoder adapted to 1.5-entmax> --attention sparsemax` fine-tuned with another map than the one
    it was adapted to without a word (sweep s24): one line says so; the same map, or none given, says nothing."""
    import logging

    a = tmp_path / "a"
    assert main(adapt_args(tiny_bert, data, a, "--attention", "entmax15", "--max-steps", "1")) == 0
    for i, (extra, expected) in enumerate(((["--attention", "sparsemax"], 1), (["--attention", "entmax15"], 0), ([], 0))):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="attnkit"):
            assert main(two_step_train_args(a, data, tmp_path / f"t{i}", *extra)) == 0
        said = [r.getMessage() for r in caplog.records if "was adapted to" in r.getMessage()]
        assert len(said) == expected, (extra, caplog.text)
        if expected:
            assert said[0] == (f"{a / 'model'} was adapted to 1.5-entmax (attnkit adapt); --attention sparsemax fine-tunes "
                               "it with another map: leave out --attention to fine-tune with the map it was adapted to")
    caplog.clear()  # a sweep sets the map itself: the line names the sweep, and no --attention to leave out
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        assert main(["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(a), "--output-dir", str(tmp_path / "s"),
                     "--lams", "-2", "--seeds", "1", "--max-steps", "1", "--max-length", "16", "--no-heatmap"]) == 0
    said = [r.getMessage() for r in caplog.records if "was adapted to" in r.getMessage()]
    assert said == [f"{a / 'model'} was adapted to 1.5-entmax (attnkit adapt); the sweep's sparsegen-lin (at each --lams "
                    "value) fine-tunes it with another map"], caplog.text


def test_adapts_hint_leaves_the_attention_to_the_encoder(sparse_run, tiny_bert, data, capsys):
    a, _ = sparse_run
    capsys.readouterr()
    assert main(adapt_args(tiny_bert, data, a, "--attention", "sparsemax", "--sparse-layers", "last", "--max-steps", "2")) == 0
    out = capsys.readouterr().out.splitlines()
    hint = out[next(i for i, line in enumerate(out) if "fine-tune with:" in line):]
    assert hint == [f"[attnkit] fine-tune with: attnkit train --model {a} --task ...",
                    "[attnkit] leave out --attention there: the encoder brings the attention it was adapted to, sparsemax "
                    "in the last layer (softmax in the others)"], hint


def test_explain_and_the_html_view_say_which_layers_are_sparse(sparse_run, tmp_path, capsys, monkeypatch):
    import re

    from attnkit.analysis import explain

    _, t = sparse_run
    assert main(["explain", "--model", str(t), "a great movie", "--output", str(tmp_path / "g.png"),
                 "--html", str(tmp_path / "v.html"), "--stats", str(tmp_path / "s.json")]) == 0
    assert "attention: sparsemax in the last layer (softmax in the others)" in capsys.readouterr().out
    assert json.loads((tmp_path / "s.json").read_text())["sparse_layers"] == [1]
    page = (tmp_path / "v.html").read_text()
    assert "sparsemax in the last layer (softmax in the others)" in page and "sparse map in layer 1; softmax in 0" in page
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page, re.S).group(1))
    assert data["sparse_layers"] == [1]
    # the figures' titles: which layer is sparse, which softmax
    titles = []
    monkeypatch.setattr(explain, "save_figure", lambda fig, path: titles.append(
        [ax.get_title() for ax in fig.axes] + [fig._suptitle.get_text() if fig._suptitle else ""]) or path)
    from attnkit.models.checkpoint import load_model, load_tokenizer

    maps = explain.attention_maps(load_model(t / "model"), load_tokenizer(t / "model"), "a great movie")
    assert maps.sparse_layers == [1] and maps.layer_map(0) == " (softmax)" and maps.layer_map(1) == " (sparse)"
    explain.plot_attention(maps, tmp_path / "one.png", layer=0, head=1)
    explain.plot_attention(maps, tmp_path / "grid.png")
    assert titles[0][0] == "sparsemax in the last layer (softmax in the others): layer 0 (softmax), head 1"
    assert "L0 H0 |S|=" in titles[1][0] and titles[1][0].endswith("(softmax)") and titles[1][-2].endswith("(sparse)")
    whole = explain.AttentionMaps(tokens=maps.tokens, weights=maps.weights, attention="sparsemax")
    assert whole.layer_map(0) == "" and "sparse_layers" not in whole.stats()


@pytest.mark.parametrize("layers,want", [
    ("last", {"layer": 1, "map": "sparsemax", "sparse": True}),
    ("0", {"layer": 1, "map": "softmax", "sparse": False}),
    ("all", {"layer": 1, "map": "sparsemax", "sparse": True}),
    (None, {"layer": 1, "map": "softmax", "sparse": False}),  # a softmax model
])
def test_faithfulness_names_the_layer_its_attention_explanation_reads(tiny_bert, layers, want):
    from attnkit.analysis.faithfulness import attention_layer
    from attnkit.attention.spec import AttentionSpec

    spec = AttentionSpec("softmax") if layers is None else AttentionSpec("sparsemax", sparse_layers=layers)
    assert attention_layer(_sharp_classifier(tiny_bert, spec)) == want


def test_faithfulness_command_reports_the_layer(sparse_run, data, tmp_path, capsys):
    _, t = sparse_run
    out = tmp_path / "f.json"
    assert main(["faithfulness", "--model", str(t), "--task", "csv", "--data-dir", str(data), "--split", "validation",
                 "--max-examples", "2", "--ig-steps", "2", "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "the attention explanation: the [CLS] row of layer 1 (sparsemax)" in printed
    rep = json.loads(out.read_text())
    assert rep["attention_layer"] == {"layer": 1, "map": "sparsemax", "sparse": True}
    assert rep["attention"] == "sparsemax in the last layer (softmax in the others)"


# ----------------------------------------------------------------------------- --teacher


@pytest.fixture(scope="module")
def teacher(tiny_bert, data, tmp_path_factory):
    out = tmp_path_factory.mktemp("teacher") / "run"
    assert main(two_step_train_args(tiny_bert, data, out, "--attention", "softmax")) == 0
    return out


def test_distillation_records_the_teacher(teacher, tiny_bert, data, tmp_path):
    out = tmp_path / "student"
    assert main(two_step_train_args(tiny_bert, data, out, "--attention", "sparsemax", "--teacher", str(teacher),
                           "--distill-weight", "0.7", "--distill-temperature", "3")) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["teacher"] == {"model": str(teacher / "model"), "weight": 0.7, "temperature": 3.0}
    assert all(math.isfinite(h["loss"]) for h in m["log_history"] if "loss" in h)


@pytest.mark.parametrize("change,needle", [("labels", "its labels"), ("tokenizer", "tokenizer differs")])
def test_a_teacher_of_other_labels_or_tokens_is_refused(teacher, tiny_bert, data, tmp_path, capsys, change, needle):
    other = tmp_path / "other"
    shutil.copytree(teacher / "model", other)
    if change == "labels":
        cfg = json.loads((other / "config.json").read_text())
        cfg["id2label"] = {"0": "bad", "1": "good"}
        cfg["label2id"] = {"bad": 0, "good": 1}
        (other / "config.json").write_text(json.dumps(cfg))
    else:
        tj = json.loads((other / "tokenizer.json").read_text())
        vocab = tj["model"]["vocab"]
        vocab["movies"] = vocab.pop("movie")
        (other / "tokenizer.json").write_text(json.dumps(tj))
        (other / ".attnkit-files.json").unlink()  # a teacher with a tokenizer of its own (else: not the one it was saved with)
    out = tmp_path / "student"
    assert main(two_step_train_args(tiny_bert, data, out, "--attention", "sparsemax", "--teacher", str(other))) == 2
    one_line_error(capsys, "--teacher", needle)
    assert not (out / "model").exists() and not (out / "metrics.json").exists()


@pytest.mark.parametrize("extra,needle", [
    (["--distill-weight", "0.3"], "need --teacher"),
    (["--distill-temperature", "4"], "need --teacher"),
    (["--teacher", "T", "--distill-weight", "0"], "--distill-weight 0"),
    (["--teacher", "T", "--distill-weight", "1.5"], "--distill-weight 1.5"),
    (["--teacher", "T", "--distill-temperature", "0"], "--distill-temperature 0"),
    (["--teacher", "MISSING"], "does not exist"),
])
def test_distill_options_without_a_teacher_or_out_of_range(extra, needle, teacher, tiny_bert, data, tmp_path, capsys):
    extra = [str(teacher) if x == "T" else str(tmp_path / "nothing") if x == "MISSING" else x for x in extra]
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", "--attention", "sparsemax", *extra)) == 2
    one_line_error(capsys, needle)


def test_the_distillation_loss_by_hand():
    """(1 - w) CE(labels) + w T^2 KL(softmax(teacher / T) || softmax(student / T)), batch mean, on two examples."""
    from transformers.modeling_outputs import SequenceClassifierOutput

    from attnkit.training.distill import DistillTrainer

    s_logits = [[2.0, 0.0, -1.0], [0.5, 1.5, 0.0]]
    t_logits = [[1.0, 0.5, -2.0], [0.0, 3.0, 1.0]]
    labels = [0, 2]

    class Fixed(torch.nn.Module):
        def __init__(self, logits):
            super().__init__()
            self.logits = torch.nn.Parameter(torch.tensor(logits))
            self.seen = None

        def forward(self, input_ids=None, attention_mask=None, labels=None):
            self.seen = labels
            logits = self.logits * 1.0  # computed, as a model's are (under no_grad: without a graph)
            loss = None if labels is None else torch.nn.functional.cross_entropy(logits, labels)
            return SequenceClassifierOutput(loss=loss, logits=logits)

    def softmax(z, T):
        e = [math.exp(x / T) for x in z]
        return [x / sum(e) for x in e]

    for w, T in ((0.5, 2.0), (0.3, 1.0), (1.0, 4.0)):
        student, teach = Fixed(s_logits), Fixed(t_logits)
        trainer = SimpleNamespace(teacher=teach, distill_weight=w, distill_temperature=T)
        inputs = {"input_ids": torch.zeros(2, 3, dtype=torch.long), "attention_mask": torch.ones(2, 3, dtype=torch.long),
                  "labels": torch.tensor(labels)}
        loss = DistillTrainer.compute_loss(trainer, student, inputs)
        ce = sum(-math.log(softmax(s, 1.0)[y]) for s, y in zip(s_logits, labels)) / 2
        kl = sum(sum(p * math.log(p / q) for p, q in zip(softmax(t, T), softmax(s, T))) for s, t in zip(s_logits, t_logits)) / 2
        assert loss.item() == pytest.approx((1 - w) * ce + w * T * T * kl, rel=1e-5)
        assert teach.seen is None  # the teacher is not shown the labels
        loss.backward()
        assert student.logits.grad is not None and teach.logits.grad is None  # no gradient into the teacher


def test_minibert_keeps_softmax_outside_the_sparse_layers():
    """MiniBERT's own attention (not transformers' attention function) honours --sparse-layers too."""
    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.mini import MiniBertModel
    from attnkit.models.mini_config import make_config

    torch.manual_seed(0)
    for layers, sparse in (("0", {0}), ("last", {1}), ("all", {0, 1})):
        model = MiniBertModel(make_config(40, layers=2, heads=2, dim=16, spec=AttentionSpec("sparsemax", sparse_layers=layers))).eval()
        with torch.no_grad():
            for n, p in model.named_parameters():
                if n.endswith(("query.weight", "key.weight")):
                    p.mul_(2)
            ids = torch.randint(1, 40, (2, 9))
            out = model(ids, attention_mask=torch.ones_like(ids), output_attentions=True)
        zeros = real_zeros(out.attentions, torch.ones_like(ids))
        assert {l for l in range(2) if zeros[l] > 0} == sparse, (layers, zeros)


# ----------------------------------------------------------------------------- --recipe


def test_recipe_faithful_trains_1_5_entmax_in_the_last_layer_and_says_so(tiny_bert, data, tmp_path, capsys):
    from attnkit.analysis.inference import load_for_inference
    from attnkit.attention.spec import spec_of

    out = tmp_path / "r"
    assert main(two_step_train_args(tiny_bert, data, out, "--recipe", "faithful")) == 0
    assert "recipe faithful: --attention entmax15 --sparse-layers last" in capsys.readouterr().err
    cfg = json.loads((out / "run_config.json").read_text())
    assert (cfg["attention"], cfg["sparse_layers"]) == ("entmax15", "last")
    _, model, _ = load_for_inference(str(out))
    assert (spec_of(model.config).attention, spec_of(model.config).sparse_layers) == ("entmax15", "last")
    # the same options given with the recipe agree with it: the finished run is the same run, kept as it is
    assert main(two_step_train_args(tiny_bert, data, out, "--recipe", "faithful", "--attention", "entmax15")) == 0


@pytest.mark.parametrize("extra, needles", [(["--attention", "sparsemax"], ["--attention sparsemax", "recipe faithful"]),
                                            (["--sparse-layers", "0"], ["--sparse-layers 0", "contradicts"])])
def test_recipe_refuses_an_option_that_contradicts_it(extra, needles, tiny_bert, data, tmp_path, capsys):
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", "--recipe", "faithful", *extra)) == 2
    one_line_error(capsys, *needles)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("alpha", [1.0, 1.01])
def test_the_api_refuses_an_alpha_the_anneal_cannot_reach_as_the_cli_does(alpha, capsys):
    from attnkit.training.adapt_config import AdaptConfig

    with pytest.raises(ValueError, match=rf"--alpha {alpha:g}: the anneal starts at alpha 1.01; give a target above it"):
        AdaptConfig(attention="entmax-alpha", alpha=alpha, tasks=["sst2"]).validate()
    assert main(["adapt", "--attention", "entmax-alpha", "--alpha", str(alpha), "--task", "sst2"]) == 2
    assert "the anneal starts at alpha 1.01" in capsys.readouterr().err
