"""No silent reinterpretation of data and results: lines of a --file, MLM losses of tiny corpora, NaN in JSON, a dev
split that is the train split, texts cut by faithfulness, and the attention settings the API takes."""

import json
import math
import os
import random
import shutil
from pathlib import Path

import pytest

from attnkit.cli import main
from helpers import one_line_error, snapshot
from helpers import write_csv_task


def strict_json(path: Path):
    """The file's JSON, refusing NaN and infinities (which Python's json would read without a word)."""
    def refuse(name):
        raise AssertionError(f"{path} holds {name}: not strict JSON")
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


@pytest.fixture(scope="module")
def saved_classifier(tiny_bert, tmp_path_factory) -> Path:
    """A classifier saved as `attnkit train` saves it (labels negative/positive, trained at 16 tokens)."""
    import torch

    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_classifier
    from attnkit.models.checkpoint import load_tokenizer, save_checkpoint

    out = tmp_path_factory.mktemp("nsr_model") / "model"
    torch.manual_seed(0)
    net = build_classifier(str(tiny_bert), 2, AttentionSpec("sparsemax"), label_names=["negative", "positive"])
    save_checkpoint(net, out, tokenizer=load_tokenizer(str(tiny_bert)), extra={"task": "csv", "max_length": 16})
    return out


# ----------------------------------------------------------------------------- predict --file: lines end at \n


def test_read_text_file_splits_on_newlines_only(tmp_path):
    from attnkit.analysis.inference import read_text_file

    f = tmp_path / "texts.txt"
    f.write_bytes("\ufeffgood film\u2028bad plot\r\nthe actor\x85is\x0cgreat\nold\rmac\n\n".encode("utf-8"))
    assert read_text_file(f) == ["good film\u2028bad plot", "the actor\x85is\x0cgreat", "old\rmac"]
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xef\xbb\xbfgood\nfine\n\xff\n")
    with pytest.raises(ValueError, match="line 3"):  # counted in the file, its BOM included
        read_text_file(bad)


def test_predict_file_gives_one_prediction_per_line(saved_classifier, tmp_path):
    texts = tmp_path / "texts.txt"
    texts.write_bytes("good film\u2028bad plot\r\nthe actor\x85is\x0cgreat\n".encode("utf-8"))
    before = texts.read_bytes()
    out = tmp_path / "pred.jsonl"
    assert main(["predict", "--model", str(saved_classifier), "--file", str(texts), "--output", str(out), "--threads", "1"]) == 0
    rows = [json.loads(line) for line in out.read_bytes().decode("utf-8").split("\n") if line]  # JSON lines end at \n
    assert [r["text"] for r in rows] == ["good film\u2028bad plot", "the actor\x85is\x0cgreat"]
    assert texts.read_bytes() == before


# ----------------------------------------------------------------------------- MLM: every batch masks, tiny corpora refused


def test_every_batch_masks_a_token(tiny_bert):
    from attnkit.models.checkpoint import load_tokenizer
    from attnkit.training.pretrain import mlm_collator

    tok = load_tokenizer(str(tiny_bert))
    features = [dict(tok("good", return_special_tokens_mask=True))]  # [CLS] good [SEP]: one token to mask
    collate = mlm_collator(tok, 0.05, seed=0)  # a draw masks it 1 time in 20
    labels = [collate(features)["labels"] for _ in range(30)]
    assert all(int((l != -100).sum()) == 1 for l in labels)
    with pytest.raises(ValueError, match="no token that can be masked"):
        collate([dict(tok("", return_special_tokens_mask=True))])  # [CLS] [SEP] alone


def test_adapt_refuses_a_corpus_too_small_to_mask(tiny_bert, tmp_path, capsys):
    f = tmp_path / "one.txt"
    f.write_bytes(b"good\n")
    out = tmp_path / "run"
    assert main(["adapt", "--text-file", str(f), "--model", str(tiny_bert), "--output-dir", str(out), "--max-steps", "3",
                 "--batch-size", "2", "--max-length", "16", "--attention", "softmax"]) == 2
    one_line_error(capsys, "1 token(s) that can be masked", "--mlm-probability 0.15", "give more text")
    assert not out.exists() and f.read_bytes() == b"good\n"


@pytest.mark.slow
def test_adapt_counts_only_steps_that_mask_and_writes_strict_json(tiny_bert, tmp_path, capsys):
    """Four two-word texts, one a step: a draw masks nothing 72% of the time (it was logged as loss 0, and the final
    MLM loss was NaN in metrics.json)."""
    f = tmp_path / "four.txt"
    f.write_text("good film\nbad plot\nthe actor\ngreat story\n")
    out = tmp_path / "run"
    assert main(["adapt", "--text-file", str(f), "--model", str(tiny_bert), "--output-dir", str(out), "--max-steps", "8",
                 "--batch-size", "1", "--max-length", "16", "--attention", "softmax", "--logging-steps", "1", "--seed", "1"]) == 0
    assert "MLM loss nan" not in capsys.readouterr().out
    m = strict_json(out / "metrics.json")
    losses = [h["loss"] for h in m["log_history"] if "loss" in h]
    assert len(losses) == 8 and all(loss > 1.0 for loss in losses)  # a random head's loss is ~ln(vocabulary), never 0
    assert math.isfinite(m["adapted"]["mlm_loss"]) and m["adapted"]["mlm_loss"] > 1.0
    assert m["train"]["train_loss"] == pytest.approx(sum(losses) / 8, rel=1e-3)
    assert strict_json(out / "model" / "attnkit_run.json")["adapted"]["mlm_loss"] == m["adapted"]["mlm_loss"]


def test_pretrain_refuses_lengths_and_corpora_that_leave_nothing_to_mask(tmp_path, capsys):
    data = write_csv_task(tmp_path / "d", [("good", "pos"), ("bad", "neg")], [("fine", "pos"), ("awful", "neg")])
    before = snapshot(data)
    out = tmp_path / "run"
    base = ["pretrain", "--task", "csv", "--data-dir", str(data), "--output-dir", str(out), "--epochs", "1"]
    assert main([*base, "--max-length", "2"]) == 2
    one_line_error(capsys, "--max-length 2", "at least 3")
    assert main([*base, "--max-length", "8"]) == 2  # two one-word texts: 0.3 masked tokens a pass
    one_line_error(capsys, "the training texts of task csv", "2 token(s) that can be masked")
    assert not out.exists() and snapshot(data) == before


def test_adapt_refuses_max_length_2(tiny_bert, tmp_path, capsys):
    f = tmp_path / "t.txt"
    f.write_text("good film\n")
    assert main(["adapt", "--text-file", str(f), "--model", str(tiny_bert), "--output-dir", str(tmp_path / "run"),
                 "--max-length", "2"]) == 2
    one_line_error(capsys, "--max-length 2", "at least 3")


# ----------------------------------------------------------------------------- no NaN in any JSON attnkit writes


def test_write_json_refuses_nan_and_keeps_the_file(tmp_path):
    from attnkit.runfiles.json_files import finite_record
    from attnkit.runfiles.atomic import write_json_atomic

    f = tmp_path / "m.json"
    f.write_bytes(b'{"mine": 1}\n')
    for bad in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ValueError, match=r"m\.json: not written.*log_history\[1\]\.grad_norm"):
            write_json_atomic(f, {"log_history": [{"loss": 1.0}, {"grad_norm": bad}]})
        assert f.read_bytes() == b'{"mine": 1}\n' and os.listdir(tmp_path) == ["m.json"]
    rec = finite_record({"a": 1.0, "log_history": [{"grad_norm": float("inf")}], "x": {"y": float("nan")}})
    assert rec == {"a": 1.0, "log_history": [{"grad_norm": None}], "x": {"y": None},
                   "non_finite": ["log_history[0].grad_norm: inf", "x.y: nan"]}
    write_json_atomic(f, rec)
    assert strict_json(f) == rec
    same = {"a": 1.0}
    assert finite_record(same) is same


@pytest.mark.slow
def test_train_from_an_adapted_encoder_with_a_nan_record_writes_strict_json(tiny_bert, tiny_task, tmp_path):
    """An encoder adapted by an earlier attnkit, whose record says "mlm_loss": NaN: train copies the record."""
    enc = tmp_path / "adapted"
    shutil.copytree(tiny_bert, enc)
    (enc / "attnkit_run.json").write_text('{"adapted": {"mlm_loss": NaN, "steps": 3}}\n')
    out = tmp_path / "run"
    assert main(["train", "--task", "csv", "--data-dir", str(tiny_task), "--model", str(enc), "--output-dir", str(out),
                 "--max-steps", "1", "--batch-size", "16", "--max-length", "16", "--no-heatmap", "--threads", "1"]) == 0
    m = strict_json(out / "metrics.json")
    assert m["adapted"] == {"mlm_loss": None, "steps": 3} and m["non_finite"] == ["adapted.mlm_loss: nan"]
    strict_json(out / "model" / "attnkit_run.json")


# ----------------------------------------------------------------------------- train/dev/test: not the same examples


def _link(d: Path) -> None:
    (d / "dev.csv").unlink()
    (d / "dev.csv").symlink_to("train.csv")


def _hard_link(d: Path) -> None:
    (d / "dev.csv").unlink()
    os.link(d / "train.csv", d / "dev.csv")


def _copy(d: Path) -> None:
    shutil.copy(d / "train.csv", d / "dev.csv")


def _shuffled(d: Path) -> None:
    head, *rows = (d / "train.csv").read_text().splitlines(keepends=True)
    random.Random(0).shuffle(rows)
    (d / "dev.csv").write_text(head + "".join(rows))


def _test_copy(d: Path) -> None:
    shutil.copy(d / "train.csv", d / "test.csv")


@pytest.mark.parametrize("make,needles", [
    (_link, ["dev.csv (validation split) is", "train.csv (train split) again (a link to it)"]),
    (_hard_link, ["dev.csv (validation split) is", "train.csv (train split) again (the same file)"]),
    (_copy, ["dev.csv holds the same 96 examples as", "train.csv"]),
    (_shuffled, ["dev.csv holds the same 96 examples as", "train.csv"]),
    (_test_copy, ["test.csv holds the same 96 examples as", "train.csv"]),
])
def test_a_split_that_is_train_again_is_refused(make, needles, tiny_bert, tiny_task, tmp_path, capsys):
    make(tiny_task)
    before = snapshot(tiny_task)
    out = tmp_path / "run"
    assert main(["train", "--task", "csv", "--data-dir", str(tiny_task), "--model", str(tiny_bert), "--output-dir", str(out),
                 "--max-steps", "1"]) == 2
    line = one_line_error(capsys, *needles, "scores on training examples")
    assert str(tiny_task) in line  # both files named with their folder
    assert not out.exists() and snapshot(tiny_task) == before


def test_the_train_file_named_as_the_dev_file_is_refused(tiny_task):
    from attnkit.errors import UserError
    from attnkit.tasks import load_task

    with pytest.raises(UserError, match=r"train\.csv \(validation split\) is .*train\.csv \(train split\) again \(the same file\)"):
        load_task("csv", tiny_task, validation_file="train.csv")
    assert len(load_task("csv", tiny_task).splits["validation"]) == 32


def test_a_task_whose_splits_are_identical_is_refused(tiny_bert, tmp_path, capsys):
    from attnkit.errors import UserError
    from attnkit.tasks import load_task

    for split in ("train", "dev", "test"):
        d = tmp_path / "sentube" / "auto" / split
        d.mkdir(parents=True)
        (d / "pos.txt").write_text("a good car\nnice engine\n")
        (d / "neg.txt").write_text("a bad car\n" if split != "test" else "a dull car\n")
    before = snapshot(tmp_path)
    with pytest.raises(UserError, match="the validation split of task sentube-auto holds the same 3 examples as the train split"):
        load_task("sentube-auto", tmp_path)
    out = tmp_path / "run"
    assert main(["train", "--task", "sentube-auto", "--data-dir", str(tmp_path), "--model", str(tiny_bert), "--output-dir",
                 str(out), "--max-steps", "1"]) == 2
    one_line_error(capsys, "validation split of task sentube-auto", "scores on training examples", str(tmp_path))
    assert not out.exists() and snapshot(tmp_path) == before
    (tmp_path / "sentube" / "auto" / "dev" / "neg.txt").write_text("an awful car\n")  # its own examples: read
    assert len(load_task("sentube-auto", tmp_path).splits["validation"]) == 3


# ----------------------------------------------------------------------------- faithfulness says what it cut


@pytest.mark.slow
def test_faithfulness_records_and_says_what_it_cut(saved_classifier, tmp_path, capsys):
    long = " ".join(["good film"] * 12)  # 24 words: past 16 tokens
    data = write_csv_task(tmp_path / "d", [("good film", "positive"), ("bad plot", "negative")],
                [(long, "positive"), ("a dull plot", "negative"), (long + " bad", "negative")])
    before = snapshot(data)
    base = ["faithfulness", "--model", str(saved_classifier), "--task", "csv", "--data-dir", str(data), "--split",
            "validation", "--ig-steps", "2", "--max-length", "16", "--threads", "1"]
    out = tmp_path / "f.json"
    assert main([*base, "--output", str(out)]) == 0
    notices = [l for l in capsys.readouterr().out.splitlines() if "notice" in l]
    assert len(notices) == 1 and "2 of the 3 texts are longer than --max-length 16 tokens" in notices[0], notices
    rep = strict_json(out)
    assert rep["max_length"] == 16 and rep["texts_cut"] == 2 and rep["examples"] == 3
    assert main([*base, "--max-length", "64", "--output", str(tmp_path / "g.json")]) == 0
    assert "notice" not in capsys.readouterr().out
    rep = strict_json(tmp_path / "g.json")
    assert rep["max_length"] == 64 and rep["texts_cut"] == 0
    assert snapshot(data) == before


# ----------------------------------------------------------------------------- AttentionSpec refuses what the CLI refuses


@pytest.mark.parametrize("kw,needle", [
    (dict(attention="softmax", sparse_layers="last"), "sparse_layers=last: needs a sparse attention"),
    (dict(attention="sparsemax", alpha=1.2), "alpha=1.2: only entmax-alpha has an alpha"),
    (dict(attention="sparsegen-lin", alpha_mix=0.5), "alpha_mix=0.5: only the entmax maps"),
])
def test_attention_spec_refuses_settings_it_would_ignore(kw, needle):
    from attnkit.attention.spec import AttentionSpec

    with pytest.raises(ValueError, match=needle.replace("(", r"\(").replace("[", r"\[")):
        AttentionSpec(**kw)


def test_attention_spec_keeps_what_it_uses():
    from dataclasses import replace

    from attnkit.attention.spec import AttentionSpec

    assert AttentionSpec("sparsemax", sparse_layers="last").sparse_layers == "last"
    assert AttentionSpec("softmax", sparse_layers="all").sparse_layers is None  # softmax everywhere: nothing ignored
    assert AttentionSpec("entmax-alpha", alpha=1.2).alpha == 1.2
    assert AttentionSpec("entmax15", alpha_mix=0.5).alpha_mix == 0.5
    assert AttentionSpec("softmax", blur="value", blur_size=5).blur_size == 5
    assert AttentionSpec("softmax", blur_sigma=0.5).blur == "none"  # saved configs hold a shape without a blur: they load
    with pytest.raises(ValueError, match="needs a sparse attention"):
        replace(AttentionSpec("sparsemax", sparse_layers="last"), attention="softmax")


@pytest.mark.parametrize("command", ["train", "adapt"])
def test_the_cli_refusal_of_sparse_layers_with_softmax_reads_as_before(command, tiny_bert, tiny_task, tmp_path, capsys):
    out = tmp_path / "run"
    assert main([command, "--task", "csv", "--data-dir", str(tiny_task), "--model", str(tiny_bert), "--output-dir", str(out),
                 "--attention", "softmax", "--sparse-layers", "last"]) == 2
    line = one_line_error(capsys)
    assert line == f"attnkit {command}: error: --sparse-layers last: needs a sparse --attention (softmax is softmax in every layer)"
    assert not out.exists()
