"""Faithfulness records and says which texts it cut to the model's length."""


import pytest

from attnkit.cli import main
from helpers import merged, snapshot, strict_json, write_csv_task


@pytest.mark.slow
def test_faithfulness_records_and_says_what_it_cut(sparsemax_classifier, tmp_path, capsys):
    long = " ".join(["good film"] * 12)  # 24 words: past 16 tokens
    data = write_csv_task(tmp_path / "d", [("good film", "positive"), ("bad plot", "negative")],
                [(long, "positive"), ("a dull plot", "negative"), (long + " bad", "negative")])
    before = snapshot(data)
    base = ["faithfulness", "--model", str(sparsemax_classifier), "--task", "csv", "--data-dir", str(data), "--split",
            "validation", "--ig-steps", "2", "--max-length", "16", "--threads", "1"]
    out = tmp_path / "f.json"
    assert main([*base, "--output", str(out)]) == 0
    notices = [l for l in capsys.readouterr().out.splitlines() if "notice" in l]
    assert len(notices) == 1 and "2 of the 3 texts are longer than --max-length 16 tokens" in notices[0], notices
    rep = strict_json(out)
    assert rep["max_length"] == 16 and rep["texts_cut"] == 2 and rep["examples"] == 3
    assert main(merged(base, ["--max-length", "64", "--output", str(tmp_path / "g.json")])) == 0
    assert "notice" not in capsys.readouterr().out
    rep = strict_json(tmp_path / "g.json")
    assert rep["max_length"] == 64 and rep["texts_cut"] == 0
    assert snapshot(data) == before
