"""Masked-LM training never logs a step that masked nothing: every batch masks a token, a corpus or a length too small
to mask is refused, only masking steps are counted and the records are strict JSON."""

import math

import pytest

from attnkit.cli import main
from helpers import one_line_error, snapshot, strict_json, write_csv_task


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
    one_line_error(capsys, "1 token(s) that can be masked", "at a masking share of 0.15", "give more text")  # (no --mlm-probability option: sweep -28q U)
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


def test_adapt_and_pretrain_say_the_texts_they_cut(tiny_bert, tmp_path, caplog):
    """Texts longer than --max-length are masked and learned from their first tokens only: adapt and pretrain say how
    many in one line, as train does, and record it (``texts_cut``)."""
    long_text = " ".join(["the plot was dull and the film was long"] * 4)
    f = tmp_path / "t.txt"
    f.write_text(f"{long_text}\na great film\n{long_text} again\n")
    out = tmp_path / "a"
    assert main(["adapt", "--text-file", str(f), "--model", str(tiny_bert), "--output-dir", str(out), "--max-steps", "1",
                 "--batch-size", "2", "--max-length", "12", "--attention", "sparsemax"]) == 0
    lines = [r.getMessage() for r in caplog.records if "longer than" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("2 of 3 texts to adapt on were longer than the 10 tokens of text "
                                                   "--max-length 12 leaves"), lines
    assert strict_json(out / "metrics.json")["adapted"]["texts"]["texts_cut"] == 2
    caplog.clear()
    rows = [(long_text, "pos"), ("bad", "neg"), ("a fine film", "pos"), ("awful plot", "neg")] * 3
    data = write_csv_task(tmp_path / "d", rows, rows[:4])
    out = tmp_path / "p"
    assert main(["pretrain", "--task", "csv", "--data-dir", str(data), "--output-dir", str(out), "--epochs", "1",
                 "--max-length", "12", "--vocab-size", "100"]) == 0
    lines = [r.getMessage() for r in caplog.records if "longer than" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("3 of 12 training texts were longer than the 10 tokens"), lines
    assert strict_json(out / "metrics.json")["texts_cut"] == 3
