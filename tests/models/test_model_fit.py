"""A model folder whose parts do not fit together (integer weights, a config that does not match the weights, a
tokenizer bigger than the embeddings) is refused in one line naming the file; sparsify names a module that is not a
transformers model."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import snapshot


def _int_weights(folder: Path) -> None:
    import torch
    from safetensors.torch import load_file, save_file

    w = load_file(folder / "model.safetensors")
    save_file({k: (v * 100).to(torch.int32) for k, v in w.items()}, folder / "model.safetensors", metadata={"format": "pt"})


def _edit_config(**changes):
    def damage(folder: Path) -> None:
        import json

        cfg = json.loads((folder / "config.json").read_text())
        cfg.update(changes)
        (folder / "config.json").write_text(json.dumps(cfg))
    return damage


def _bigger_tokenizer(folder: Path) -> None:
    import json

    tj = json.loads((folder / "tokenizer.json").read_text())
    vocab = tj["model"]["vocab"]
    n = len(vocab)
    for i in range(200):
        vocab[f"zzword{i}"] = n + i
    (folder / "tokenizer.json").write_text(json.dumps(tj))


@pytest.mark.parametrize("damage, needles", [
    # integer weights were cast to floats and gave probabilities of 1.0 without a word
    (_int_weights, ("model.safetensors holds", "as I32 (whole numbers), not floating point")),
    # a config with more positions than the weights: transformers' size-mismatch traceback
    (_edit_config(max_position_embeddings=512), ("config.json says max_position_embeddings 512 but model.safetensors holds 64",)),
    # two classes with one name: predict's probabilities dict kept one of them
    (_edit_config(id2label={"0": "positive", "1": "positive"}, label2id={"positive": 1}), ("config.json names label 'positive' twice",)),
    # a tokenizer giving ids past the embeddings: IndexError traceback on a text using them
    (_bigger_tokenizer, ("tokenizer.json gives token ids up to", "holds embeddings of")),
], ids=["int-weights", "positions", "duplicate-label", "tokenizer-too-big"])
def test_a_model_folder_that_does_not_fit_together_is_refused(saved_classifier, tmp_path, capsys, damage, needles):
    import shutil

    from attnkit.cli import main

    folder = tmp_path / "model"
    shutil.copytree(saved_classifier, folder)
    damage(folder)
    before = snapshot(folder)
    out = tmp_path / "p.jsonl"
    assert main(["predict", "--model", str(folder), "--threads", "1", "good film", "zzword5", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for n in needles:
        assert n in err, (n, err)
    assert str(folder) in err
    assert not out.exists()
    assert snapshot(folder) == before


def test_sparsify_names_a_module_that_is_not_a_transformers_model():
    """`sparsify(torch.nn.Linear(2, 2))` was `AttributeError: 'Linear' object has no attribute 'config'`."""
    import torch

    from attnkit import sparsify

    with pytest.raises(TypeError, match="sparsify takes a loaded transformers model .*got Linear"):
        sparsify(torch.nn.Linear(2, 2), "sparsemax")
