"""A model is what it says it is: a bare encoder is refused rather than run with a random head, an unknown model name
fails at once naming it, a damaged weights file is named."""

import shutil
import time

import pytest

from attnkit.cli import main

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("command", [["predict", "a fine film"], ["explain", "a fine film", "--output", "x.png"]])
def test_a_bare_encoder_is_refused_not_run_with_a_random_head(tiny_bert, command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main([command[0], "--model", str(tiny_bert), *command[1:]]) == 2
    err = capsys.readouterr().err
    assert "no trained classification head" in err and "classifier.weight" in err and str(tiny_bert) in err
    assert len(err.strip().splitlines()) == 1


def test_an_unknown_model_name_fails_at_once_naming_it(tmp_path, capsys, monkeypatch):
    t0 = time.time()
    assert main(["train", "--model", "not-a-model", "--output-dir", str(tmp_path / "o")]) == 2  # offline (conftest)
    err = capsys.readouterr().err
    assert "not-a-model" in err and time.time() - t0 < 30
    # online mode but the hub cannot be reached: no minute of retries
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    t0 = time.time()
    assert main(["train", "--model", "not-a-model", "--output-dir", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "'not-a-model'" in err and "cannot be reached" in err and time.time() - t0 < 30


@pytest.mark.parametrize("damage", ["truncate", "garble"])
def test_a_damaged_weights_file_is_named(trained_run, tmp_path, capsys, damage):
    copy = tmp_path / "copy"
    shutil.copytree(trained_run / "model", copy)
    f = copy / "model.safetensors"
    raw = f.read_bytes()
    f.write_bytes(raw[: len(raw) // 2] if damage == "truncate" else b"\x07" * 64 + raw[64:])
    assert main(["predict", "--model", str(copy), "a fine film"]) == 2
    err = capsys.readouterr().err
    assert f"{f} is damaged or truncated" in err and len(err.strip().splitlines()) == 1


def test_a_classifier_of_another_label_count_gives_its_encoder_a_new_head_said_in_one_line(tiny_bert, tmp_path, caplog):
    """Fine-tuning a 2-label classifier on a 3-label task: its encoder is reused, its head is new (said), never a
    traceback; the encoder's weights are the checkpoint's."""
    import torch

    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_classifier
    from attnkit.models.checkpoint import load_tokenizer, save_checkpoint

    two = build_classifier(tiny_bert, 2, AttentionSpec("sparsemax"), label_names=["neg", "pos"])
    saved = save_checkpoint(two, tmp_path / "two", load_tokenizer(tiny_bert))
    with caplog.at_level("WARNING", logger="attnkit"):
        three = build_classifier(saved, 3, AttentionSpec("sparsemax"), label_names=["a", "b", "c"])
    assert "is a classifier with another number of labels than the task's 3" in caplog.text
    assert three.config.num_labels == 3 and three.classifier.out_features == 3
    enc2, enc3 = dict(two.base_model.named_parameters()), dict(three.base_model.named_parameters())
    assert enc2.keys() == enc3.keys() and all(torch.equal(enc2[k], enc3[k]) for k in enc2)
