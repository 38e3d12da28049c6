"""Issue 36, the fresh sweep of bad inputs: each case that the sweep found wrong, fixed, with the user's files
written first and checked byte for byte afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest

from attnkit.errors import DataFormatError
from attnkit.tasks import load_task
from helpers import snapshot



def test_csv_header_naming_a_column_twice_is_refused(tmp_path):
    """`text,text,label`: the reader kept the second `text` column without a word."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("text,text,label\nfirst,good film,pos\nsecond,bad film,neg\n")
    (data / "dev.csv").write_text("text,text,label\nthird,good,pos\nfourth,bad,neg\n")
    before = snapshot(data)
    with pytest.raises(DataFormatError, match=r"train\.csv, line 1: column 'text' is named 2 times"):
        load_task("csv", data_dir=data)
    assert snapshot(data) == before


def test_jsonl_object_giving_a_key_twice_is_refused(tmp_path):
    """`{"text": "a", "text": "b"}`: json keeps the last value silently."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.jsonl").write_text('{"text": "good film", "label": "pos"}\n{"text": "a", "text": "bad film", "label": "neg"}\n')
    (data / "dev.jsonl").write_text('{"text": "good", "label": "pos"}\n{"text": "bad", "label": "neg"}\n')
    before = snapshot(data)
    with pytest.raises(DataFormatError, match=r"train\.jsonl, line 2: key 'text' appears twice"):
        load_task("jsonl", data_dir=data)
    assert snapshot(data) == before


def test_an_output_that_is_a_device_or_pipe_is_refused_not_replaced(tmp_path):
    """`predict --output /dev/full` renamed a file over the device node (and left a ledger in /dev); a FIFO stands in
    for the device here."""
    import os
    import stat

    from attnkit.errors import UserError
    from attnkit.runfiles.ownership import check_output_file
    from attnkit.runfiles.atomic import write_json_atomic, write_text_atomic

    fifo = tmp_path / "out.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match=r"--output cannot write .*out\.jsonl: it is a device, pipe or socket"):
        check_output_file(fifo, "--output")
    for write in (lambda: write_text_atomic(fifo, "x\n"), lambda: write_json_atomic(fifo, {"a": 1})):
        with pytest.raises(UserError, match=r"out\.jsonl: it is a device, pipe or socket"):
            write()
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.jsonl"]  # no temporary file, no ledger


@pytest.fixture(scope="module")
def saved_classifier(tiny_bert, tmp_path_factory) -> Path:
    """A classifier saved as `attnkit train` saves it (two layers, 32 wide, labels negative/positive)."""
    import torch

    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_classifier
    from attnkit.models.checkpoint import load_tokenizer, save_checkpoint

    out = tmp_path_factory.mktemp("sweep_model") / "model"
    torch.manual_seed(0)
    net = build_classifier(str(tiny_bert), 2, AttentionSpec("sparsegen-lin", -2.0), label_names=["negative", "positive"])
    save_checkpoint(net, out, tokenizer=load_tokenizer(str(tiny_bert)), extra={"task": "csv", "max_length": 16})
    return out


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


@pytest.mark.parametrize("alpha", [1.2, 1.5, 2.0])
def test_entmax_bisect_at_scores_of_large_magnitude_is_a_distribution(backend, alpha):
    """Scores 1e8 apart: the compiled kernel's candidate cut (max - 1/d, rounded to float) equalled the max, so no
    entry was kept and every probability was 0 (entmax_bisect at alpha != 1, without a word)."""
    import torch

    from attnkit import entmax15, entmax_bisect

    for dtype, scales in ((torch.float32, (1e8, 1e20, 1e37)), (torch.float64, (1e17, 1e100, 1e300))):
        for s in scales:
            x = torch.tensor([[s, 0.0, 2 * s], [2 * s, 2 * s, -s]], dtype=dtype)
            want = torch.tensor([[0.0, 0.0, 1.0], [0.5, 0.5, 0.0]], dtype=dtype)
            torch.testing.assert_close(entmax_bisect(x, alpha=alpha), want)
            torch.testing.assert_close(entmax15(x), want)


def test_sparsify_names_a_module_that_is_not_a_transformers_model():
    """`sparsify(torch.nn.Linear(2, 2))` was `AttributeError: 'Linear' object has no attribute 'config'`."""
    import torch

    from attnkit import sparsify

    with pytest.raises(TypeError, match="sparsify takes a loaded transformers model .*got Linear"):
        sparsify(torch.nn.Linear(2, 2), "sparsemax")


def test_an_output_into_a_busy_run_folder_names_the_way_out_of_the_command_used(saved_classifier, tmp_path, capsys):
    """`predict --output run/preds.jsonl` while a training run holds `run/`: the refusal said "pick another
    --output-dir", an option predict does not have."""
    from attnkit.cli import main
    from attnkit.runfiles.names import RUN_RECORD
    from attnkit.runfiles.lock import folder_lock

    run = tmp_path / "run"
    run.mkdir()
    (run / RUN_RECORD).write_text("{}\n")
    (run / "notes.txt").write_text("mine\n")
    before = snapshot(run)
    out = run / "preds.jsonl"
    with folder_lock(run):
        assert main(["predict", "--model", str(saved_classifier), "--threads", "1", "good film", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "another attnkit process is writing" in err, err
    assert f"write {out} outside that folder" in err and "--output-dir" not in err, err
    snap = snapshot(run)
    snap.pop(".attnkit.lock", None)
    assert snap == before


@pytest.mark.parametrize("command", ["train", "adapt"])
def test_sparse_layers_are_recorded_without_spaces_or_case(command):
    """`adapt --sparse-layers ' last'` was recorded as ' last', so the same command with 'last' was refused as a run
    with other settings."""
    from attnkit.cli.parser import build_parser

    parser = build_parser()
    for given in (" last", "Last", "last ", "0, 1", " 0-1 "):
        got = parser.parse_args([command, "--sparse-layers", given]).sparse_layers
        assert got == given.replace(" ", "").lower()
    assert parser.parse_args([command, "--sparse-layers", ""]).sparse_layers == ""  # still refused later, as before


@pytest.mark.parametrize("given", [["--distill-weight", "0.5"], ["--distill-temperature", "2"]])
def test_distillation_options_at_their_default_without_a_teacher_are_refused(tiny_bert, tiny_task, tmp_path, capsys, given):
    """`train --distill-weight 0.5` without --teacher: 0.5 is the default, so the check (value != default) let it
    pass and the run trained without distillation, exit 0."""
    from attnkit.cli import main

    before = snapshot(tiny_task)
    out = tmp_path / "run"
    assert main(["train", "--task", "csv", "--data-dir", str(tiny_task), "--model", str(tiny_bert), "--max-steps", "1",
                 "--threads", "1", "--max-length", "16", "--output-dir", str(out), *given]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and given[0] in err and "need --teacher" in err, err
    assert not out.exists()
    assert snapshot(tiny_task) == before


def test_a_read_only_or_full_disk_is_named_in_one_line_with_the_way_out():
    """`train --output-dir` on a read-only mount printed `[Errno 30] Read-only file system: 'romnt/new'` (the
    system's words, no way out); other system errors read `path: reason`; attnkit's own lines are unchanged."""
    import errno

    from attnkit.cli.main import _os_error_line
    from attnkit.errors import UserError

    line = _os_error_line(OSError(errno.EROFS, "Read-only file system", "romnt/r1/.attnkit.lock"))
    assert line.startswith("cannot write romnt/r1/.attnkit.lock: Read-only file system") and "writable folder" in line
    assert "cannot write out/x: No space left on device" in _os_error_line(OSError(errno.ENOSPC, "No space left on device", "out/x"))
    assert _os_error_line(PermissionError(errno.EACCES, "Permission denied", "a/b")) == "a/b: Permission denied"
    assert _os_error_line(FileNotFoundError("task csv: file d/train.csv does not exist")) == "task csv: file d/train.csv does not exist"
    assert _os_error_line(UserError("cannot write x: y")) == "cannot write x: y"


def test_evaluating_a_split_labelled_in_part_says_how_many_lack_a_label(saved_classifier, tmp_path, capsys):
    """A test.csv with half its label fields empty: evaluate said "this split has no gold labels"."""
    from attnkit.cli import main

    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("text,label\ngood film,positive\nbad film,negative\n")
    (data / "dev.csv").write_text("text,label\ngood,positive\nbad,negative\n")
    (data / "test.csv").write_text("text,label\ngreat film,positive\ndull film,\nfine plot,\nawful,negative\n")
    before = snapshot(data)
    out = tmp_path / "ev.json"
    assert main(["evaluate", "--model", str(saved_classifier), "--task", "csv", "--data-dir", str(data), "--split", "test",
                 "--threads", "1", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "2 of the 4 examples of this split have no gold label" in err, err
    assert not out.exists() and snapshot(data) == before


def test_a_text_of_invisible_characters_only_is_empty(saved_classifier, tmp_path, capsys):
    """A --file line holding only a zero-width space was predicted (as an empty text, exit 0): `str.strip` keeps
    U+200B. The command line, explain and training files treat it as empty too."""
    from attnkit.cli import main

    texts = tmp_path / "texts.txt"
    texts.write_text("good film\n\u200b\u2060\nbad film\n", encoding="utf-8")
    before = texts.read_bytes()
    out = tmp_path / "p.jsonl"
    assert main(["predict", "--model", str(saved_classifier), "--threads", "1", "--file", str(texts), "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "texts.txt, line 2: expected one text per line, found an empty line" in err, err
    assert main(["predict", "--model", str(saved_classifier), "--threads", "1", "\u200b"]) == 2
    assert "text 1 of the command line is empty" in capsys.readouterr().err
    assert not out.exists() and texts.read_bytes() == before
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.csv").write_text("text,label\ngood film,positive\n\ufeff\u200b,negative\n", encoding="utf-8")
    (data / "dev.csv").write_text("text,label\ngood,positive\nbad,negative\n")
    with pytest.raises(DataFormatError, match=r"train\.csv, line 3: expected text in 'text', found an empty value"):
        load_task("csv", data_dir=data)
