"""attnkit's JSON files are strict: write_json refuses NaN and keeps the earlier file, and a NaN read from an older
record is not written back."""

import os
import shutil

import pytest

from attnkit.cli import main
from helpers import strict_json


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
