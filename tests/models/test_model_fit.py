"""A model folder whose parts do not fit together (integer weights, a config that does not match the weights, a
tokenizer bigger than the embeddings, another model's tokenizer copied in) is refused in one line naming the file;
sparsify names a module that is not a transformers model."""

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


def _other_models_smaller_tokenizer(folder: Path) -> None:
    """Another model's tokenizer copied over the saved one (`cp other/tokenizer.json other/tokenizer_config.json
    model/`): a smaller WordPiece vocabulary, every id inside the embeddings, so only the ids' meaning is wrong."""
    import shutil
    import tempfile

    from transformers import BertTokenizerFast

    from helpers import WORDS

    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + sorted(WORDS, reverse=True) + list("abcdefghijklmnopqrstuvwxyz")
    with tempfile.TemporaryDirectory() as other:
        BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True).save_pretrained(other)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(Path(other) / name, folder / name)


def _two_tokens_swapped(folder: Path) -> None:
    """"good" and "poor" trade ids in the token list (the file's size unchanged): every "good" read as "poor"."""
    for name in ("tokenizer.json", "vocab.txt"):
        f = folder / name
        if f.is_file():
            text = f.read_text(encoding="utf-8")
            q = '"' if name.endswith(".json") else "\n"
            assert text.count(f"{q}good{q}") == text.count(f"{q}poor{q}") == 1, name
            text = text.replace(f"{q}good{q}", "\0").replace(f"{q}poor{q}", f"{q}good{q}").replace("\0", f"{q}poor{q}")
            size = f.stat().st_size
            f.write_text(text, encoding="utf-8")
            assert f.stat().st_size == size


@pytest.mark.parametrize("damage, needles", [
    # integer weights were cast to floats and gave probabilities of 1.0 without a word
    (_int_weights, ("model.safetensors holds", "as I32 (whole numbers), not floating point")),
    # a config with more positions than the weights: transformers' size-mismatch traceback
    (_edit_config(max_position_embeddings=512), ("config.json says max_position_embeddings 512 but model.safetensors holds 64",)),
    # two classes with one name: predict's probabilities dict kept one of them
    (_edit_config(id2label={"0": "positive", "1": "positive"}, label2id={"positive": 1}), ("config.json names label 'positive' twice",)),
    # a tokenizer giving ids past the embeddings: IndexError traceback on a text using them
    (_bigger_tokenizer, ("tokenizer.json gives token ids up to", "holds embeddings of")),
    # another model's smaller tokenizer: every prediction garbage, without a word (sweep 2026-11-27d, finding 2)
    (_other_models_smaller_tokenizer, ("tokenizer.json is not the tokenizer file saved with these weights (",
                                       ".attnkit-files.json records", "restore the tokenizer files written with them")),
    # two tokens of one length swapped in the token list: the size as recorded, the content not (left alone, 11-27d)
    (_two_tokens_swapped, ("tokenizer.json is not the tokenizer file saved with these weights (its size is as recorded, "
                           "its content is not",)),
], ids=["int-weights", "positions", "duplicate-label", "tokenizer-too-big", "tokenizer-of-another-model", "tokens-swapped"])
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


@pytest.mark.parametrize("command", ["evaluate", "explain", "train"])
def test_another_models_tokenizer_is_refused_by_every_command(saved_classifier, tmp_path, capsys, command):
    """evaluate, explain and train --model refuse the swapped tokenizer as predict does, writing nothing."""
    import shutil

    from attnkit.cli import main
    from helpers import write_tiny_sentiment

    folder = tmp_path / "model"
    shutil.copytree(saved_classifier, folder)
    _other_models_smaller_tokenizer(folder)
    before = snapshot(folder)
    data = write_tiny_sentiment(tmp_path / "data", n_train=8, n_dev=4)
    out = tmp_path / "out"
    task = ["--task", "csv", "--data-dir", str(data)]
    argv = {
        "evaluate": ["evaluate", "--model", str(folder), *task, "--output", str(out / "ev.json")],
        "explain": ["explain", "--model", str(folder), "good film", "--output", str(out / "a.png")],
        "train": ["train", "--model", str(folder), *task, "--output-dir", str(out / "run"), "--max-steps", "1",
                  "--batch-size", "4", "--max-length", "16", "--no-heatmap"],
    }[command]
    capsys.readouterr()
    assert main([*argv, "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"{folder / 'tokenizer.json'} is not the tokenizer file saved with these weights" in err, err
    assert snapshot(folder) == before
    assert not [p for p in out.rglob("*") if p.is_file()]


def test_folders_whose_tokenizer_is_their_own_still_load(saved_classifier, tiny_bert, tmp_path, capsys):
    """The size check refuses only a tokenizer file that differs from the one the manifest records: a copy of a saved
    folder (new mtimes), its tokenizer saved again over itself, a folder written by save_pretrained (no manifest) and
    the bundled model (no manifest) load as before."""
    import shutil

    from attnkit.cli import main
    from attnkit.models.checkpoint import load_model, load_tokenizer
    from attnkit.models.resolve import DEFAULT_MODEL, resolve_model
    from attnkit.runfiles.names import FOLDER_MANIFEST

    copied = tmp_path / "copied"
    shutil.copytree(saved_classifier, copied, copy_function=shutil.copy)  # (cp -r: every mtime new)
    load_tokenizer(copied).save_pretrained(copied)  # the same tokenizer written again: the same files
    assert (copied / FOLDER_MANIFEST).is_file()
    pretrained = tmp_path / "pretrained"
    load_model(saved_classifier).save_pretrained(pretrained)
    load_tokenizer(tiny_bert).save_pretrained(pretrained)
    assert not (pretrained / FOLDER_MANIFEST).exists()
    for folder in (copied, pretrained):
        capsys.readouterr()
        assert main(["predict", "--model", str(folder), "--threads", "1", "good film"]) == 0, capsys.readouterr().err
        assert '"label"' in capsys.readouterr().out
    bundled = resolve_model(DEFAULT_MODEL)
    assert not (Path(bundled) / FOLDER_MANIFEST).exists()
    assert len(load_tokenizer(bundled)) > 1000


def test_sparsify_names_a_module_that_is_not_a_transformers_model():
    """`sparsify(torch.nn.Linear(2, 2))` was `AttributeError: 'Linear' object has no attribute 'config'`."""
    import torch

    from attnkit import sparsify

    with pytest.raises(TypeError, match="sparsify takes a loaded transformers model .*got Linear"):
        sparsify(torch.nn.Linear(2, 2), "sparsemax")


def test_the_api_names_a_wrong_argument_in_one_line(tiny_bert):
    """`build_classifier(num_labels=0)` built a classifier of no outputs without a word; `num_labels='2'`, `spec='sparsemax'`
    and `load_classifier(5)` failed deep in transformers or attnkit, or as a hub name offline (sweep 2026-11-27k K3,
    K4). Each is refused naming the argument and what it takes; a numpy integer is a whole number."""
    import numpy as np

    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_classifier
    from attnkit.models.checkpoint import load_classifier
    from attnkit.errors import UserError

    for bad in (0, -1, 2.5, "2", True):
        with pytest.raises(UserError, match=rf"num_labels {bad!r}: expected a whole number of at least 1"):
            build_classifier(str(tiny_bert), num_labels=bad)
    with pytest.raises(TypeError, match=r"spec takes an AttentionSpec .*got str 'sparsemax' \(for a map by name: "
                                        r"AttentionSpec\('sparsemax'\)\)"):
        build_classifier(str(tiny_bert), spec="sparsemax")
    with pytest.raises(TypeError, match="a model is named by a folder .*got int 5"):
        load_classifier(5)
    model = build_classifier(str(tiny_bert), num_labels=np.int64(3), spec=AttentionSpec("sparsemax"))
    assert model.config.num_labels == 3 and model.classifier.out_features == 3


def test_label_names_problem_type_and_model_names_the_api_cannot_use(tiny_bert, tmp_path, monkeypatch):
    """`build_classifier(label_names=["pos", "pos"])` kept {'pos': 1} and `problem_type="foo"` gave a loss of None
    without a word; `load_classifier("")` read the current folder; a missing name offline showed transformers'
    two-line hub text (sweep 2026-11-28o I, J): each refused in one line naming what it takes."""
    from huggingface_hub import constants

    from attnkit.errors import UserError
    from attnkit.models.build import build_classifier
    from attnkit.models.checkpoint import load_classifier

    for bad, got in (([1, "1"], r"1 \(int\)"), ({"a", "b"}, "a set")):  # (sweep -28p O: a bare TypeError)
        with pytest.raises(UserError, match=rf"^label_names must be a list of strings, one per class in class order; got {got}$"):
            build_classifier(str(tiny_bert), num_labels=2, label_names=bad)
    with pytest.raises(UserError, match=r"^label_names holds 'pos' twice: each class needs its own name$"):
        build_classifier(str(tiny_bert), num_labels=2, label_names=["pos", "pos"])
    with pytest.raises(UserError, match=r"^problem_type 'foo': expected one of regression, single_label_classification, "
                                        r"multi_label_classification$"):
        build_classifier(str(tiny_bert), num_labels=2, problem_type="foo")
    model = build_classifier(str(tiny_bert), num_labels=2, label_names=["neg", "pos"], problem_type="single_label_classification")
    assert model.config.label2id == {"neg": 0, "pos": 1}
    with pytest.raises(FileNotFoundError, match="^an empty model name"):
        load_classifier("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(FileNotFoundError, match=r"^model 'nosuchdir' is not a local folder and is not in the Hugging Face "
                                                r"cache, and HF_HUB_OFFLINE is set"):
        build_classifier("nosuchdir", num_labels=2)


def test_a_run_folder_loads_as_its_model(tiny_bert, tmp_path):
    """`load_classifier('run')` and `load_tokenizer('run')` on a finished run folder said it had no config.json, while
    every command reads it (sweep 2026-11-27k K2): the run's model/ is loaded, as the command line does."""
    from attnkit.models.checkpoint import load_classifier
    from attnkit.cli import main
    from attnkit.models.checkpoint import load_tokenizer
    from helpers import train_args, write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "d", n_train=16, n_dev=8)
    run = tmp_path / "run"
    assert main(train_args(tiny_bert, data, run, "--max-steps", "1")) == 0
    assert load_classifier(run).config.num_labels == 2 and len(load_tokenizer(run)) == len(load_tokenizer(run / "model"))
