"""Settings that would do nothing or crash, inference lengths, a missing data folder, an empty split and --threads each
get one clear line before any work."""

import json

import pytest

from attnkit.cli import main
from helpers import train_args, write_run_record

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("extra,needle", [
    (["--epochs", "0"], "--epochs 0"),
    (["--epochs", "-1"], "--epochs -1"),
    (["--max-length", "0"], "--max-length 0"),
    (["--max-length", "-5"], "--max-length -5"),
    (["--max-length", "100000"], "--max-length 100000 is longer than model"),
    (["--batch-size", "0"], "--batch-size 0"),
    (["--lr", "-1"], "--lr -1"),
])
def test_settings_that_would_do_nothing_or_crash(tiny_bert, data, tmp_path, capsys, extra, needle):
    assert main(train_args(tiny_bert, data, tmp_path / "o", *extra)) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o" / "metrics.json").exists()


def test_inference_lengths(trained_run, capsys):
    assert main(["predict", "--model", str(trained_run), "--max-length", "100000", "x"]) == 2
    assert "(64 tokens, its position embeddings)" in capsys.readouterr().err
    # a text far longer than the model's 64 positions is truncated, not a crash
    assert main(["predict", "--model", str(trained_run), " ".join(["good"] * 500)]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["label"] in ("positive", "negative")


def test_missing_data_folder_is_named(tiny_bert, tmp_path, capsys):
    assert main(train_args(tiny_bert, tmp_path / "nonexistent", tmp_path / "o")) == 2
    assert f"data folder {tmp_path / 'nonexistent'} does not exist" in capsys.readouterr().err
    assert main(["train", "--task", "rotten-tomatoes", "--data-dir", str(tmp_path / "nonexistent"), "--output-dir", str(tmp_path / "o")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_an_empty_split_is_named_not_a_sampler_error(tiny_bert, tmp_path, capsys):
    d = tmp_path / "sst5_ptb"
    d.mkdir()
    (d / "train.txt").write_text("(2 (2 a) (2 film))\n")  # neutral only: the SST-2 view keeps nothing
    for split in ("dev", "test"):
        (d / f"{split}.txt").write_text("(3 (2 a) (4 good))\n")
    (tmp_path / "o/checkpoint-5").mkdir(parents=True)  # an earlier run's checkpoint: --no-resume must not move it aside
    write_run_record(tmp_path / "o", "checkpoint-5")
    assert main(["train", "--task", "sst2-ptb", "--data-dir", str(tmp_path), "--model", str(tiny_bert),
                 "--output-dir", str(tmp_path / "o"), "--no-resume"]) == 2
    assert f"{d / 'train.txt'}: holds 1 tree, all neutral (root label 2), which the binary task" in capsys.readouterr().err
    assert (tmp_path / "o/checkpoint-5").is_dir() and not list((tmp_path / "o").glob(".replaced-*"))


def test_threads_option(tiny_bert, data, tmp_path, capsys, monkeypatch):
    import torch

    seen = []
    monkeypatch.setattr(torch, "set_num_threads", lambda n: seen.append(n))
    assert main(train_args(tiny_bert, data, tmp_path / "o", "--max-steps", "1", "--threads", "1")) == 0
    # the command's own call first (flash attention's CPU workers then set one thread each where torch had more when
    # this test began, which depends on the tests before it)
    assert seen[0] == 1 and set(seen[1:]) <= {1, torch.get_num_threads()}, seen
    seen.clear()
    with pytest.raises(SystemExit) as e:
        main(["predict", "--model", str(tmp_path / "o"), "--threads", "0", "x"])
    assert e.value.code == 2
    assert "argument --threads: expected a whole number >= 1, got '0'" in capsys.readouterr().err
    # far above the cores torch's pool crashes (an overflow, a segfault): refused before torch is asked
    assert main(["predict", "--model", str(tmp_path / "o"), "--threads", "99999999999", "x"]) == 2
    assert "--threads 99999999999: expected at most" in capsys.readouterr().err and seen == []  # refused before torch




def test_training_says_the_texts_it_cuts(tiny_bert, data, tmp_path, caplog):
    """A run whose texts are longer than --max-length reads only their first tokens: it says so in one line naming
    each split's count, as predict does, and metrics.json records them (it said nothing: sweep 2026-11-27i H1)."""
    assert main(train_args(tiny_bert, data, tmp_path / "cut", "--max-steps", "1", "--max-length", "4")) == 0
    lines = [r.getMessage() for r in caplog.records if "longer than" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("96 of 96 training and 32 of 32 dev texts were longer than the 2 tokens "
                                                   "of text --max-length 4 leaves"), lines
    assert json.loads((tmp_path / "cut" / "metrics.json").read_text())["texts_cut"] == {"train": 96, "validation": 32}
    caplog.clear()
    assert main(train_args(tiny_bert, data, tmp_path / "whole", "--max-steps", "1", "--max-length", "64")) == 0
    assert "longer than" not in caplog.text
    assert json.loads((tmp_path / "whole" / "metrics.json").read_text())["texts_cut"] == {"train": 0, "validation": 0}


def test_texts_longer_than_the_window_are_cut_with_a_notice(saved_classifier, capsys, caplog):
    long = " ".join(["good"] * 30)
    assert main(["predict", "--model", str(saved_classifier), "--max-length", "8", long, "bad", long]) == 0
    # counted in tokens of text throughout: --max-length 8 leaves 6 beside [CLS] and [SEP], the cut keeps those 6
    assert "2 of 3 texts were longer than the 6 tokens of text --max-length 8 leaves beside the model's special tokens " \
        "(the longest: 30): each was cut to its first 6;" in caplog.text
    caplog.clear()
    assert main(["predict", "--model", str(saved_classifier), "--max-length", "64", long]) == 0
    assert "longer than" not in caplog.text
    assert main(["explain", "--model", str(saved_classifier), "--max-length", "8", "--output",
                 str(saved_classifier.parent / "cut.png"), long]) == 0
    assert "1 of 1 text was longer than the 6 tokens of text --max-length 8 leaves" in caplog.text and "it was cut" in caplog.text
