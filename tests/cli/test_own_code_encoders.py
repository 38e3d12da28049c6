"""DeBERTa-v2/v3 and MPNet end to end: trained with a sparse map from a local checkpoint, then predict, explain (with
its HTML view), words and faithfulness on the trained model, as for BERT."""

from __future__ import annotations

import json

import pytest

from attnkit.cli import main
from helpers import make_tiny_bert, two_step_train_args

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("family", ["deberta-v2", "mpnet"])
def test_train_and_look_at_a_sparse_own_code_encoder(family, data, tmp_path_factory, capsys):
    root = tmp_path_factory.mktemp(family)
    encoder = make_tiny_bert(root / "encoder", family=family)
    out = root / "run"
    assert main(two_step_train_args(encoder, data, out, "--attention", "sparsemax")) == 0
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["base_model_type"] == family and config["attnkit"]["attention"] == "sparsemax"
    model = str(out / "model")
    capsys.readouterr()
    assert main(["predict", "--model", model, "a good film", "a bad film"]) == 0
    assert len(capsys.readouterr().out.strip().splitlines()) == 2
    page = root / "view.html"
    assert main(["explain", "--model", model, "--html", str(page), "--output", str(root / "map.png"), "a good and fun film"]) == 0
    assert page.stat().st_size > 0 and (root / "map.png").stat().st_size > 0
    assert main(["words", "--model", model, "--task", "csv", "--data-dir", str(data), "--split", "validation",
                 "--max-samples", "16", "--output", str(root / "words.png")]) == 0
    assert (root / "words.png").stat().st_size > 0
    assert main(["faithfulness", "--model", model, "--task", "csv", "--data-dir", str(data), "--split", "validation",
                 "--max-examples", "4", "--output", str(root / "faith.json")]) == 0
    assert json.loads((root / "faith.json").read_text())
