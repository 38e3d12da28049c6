"""Faithfulness records and says which texts it cut to the model's length."""

from pathlib import Path

import pytest

from attnkit.cli import main
from helpers import snapshot, strict_json, write_csv_task


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
