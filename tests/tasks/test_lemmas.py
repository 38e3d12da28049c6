"""--lemmatize: the same lemmas at training and at prediction, recorded with the model."""

import json

import pytest

from attnkit.cli import main
from attnkit.tasks.lemmas import LemmatizingTokenizer, lemmatizer


def test_lemmatizer_english_and_french():
    assert lemmatizer("en")("The cats were running") == "the cat be run"
    assert lemmatizer("fr")("Les chats étaient mignons") == "le chat être mignon"


def test_unknown_language_names_the_setting():
    with pytest.raises(ValueError, match="--lemmatize 'xx'"):
        lemmatizer("xx")


def test_lemmatizing_tokenizer_lemmatises_strings_lists_and_pairs(tiny_bert):
    from attnkit.models.checkpoint import load_tokenizer

    tok = load_tokenizer(tiny_bert)
    lt = LemmatizingTokenizer(tok, "en")
    assert lt("the movies were good")["input_ids"] == tok("the movie be good")["input_ids"]
    assert lt(["movies were", "x"], ["actors were", "y"])["input_ids"] == tok(["movie be", "x"], ["actor be", "y"])["input_ids"]
    assert lt.pad_token_id == tok.pad_token_id  # everything else is the tokenizer's


@pytest.mark.slow
def test_train_with_lemmas_predicts_and_explains_with_lemmas(tiny_bert, tmp_path, capsys):
    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data")
    out = tmp_path / "run"
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--max-steps", "3",
                 "--batch-size", "16", "--max-length", "16", "--no-heatmap", "--lemmatize", "en", "--output-dir", str(out)]) == 0
    assert json.loads((out / "model" / "attnkit_run.json").read_text())["lemmatize"] == "en"
    capsys.readouterr()
    assert main(["predict", "--model", str(out), "the movies were boring", "the movie be boring"]) == 0
    a, b = (json.loads(l) for l in capsys.readouterr().out.strip().splitlines())
    assert a["text"] == "the movies were boring"  # the user's text is reported as given
    assert a["probabilities"] == b["probabilities"]  # the model saw the same lemmas
    assert main(["explain", "--model", str(out), "the actors were good", "--output", str(tmp_path / "x.png")]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("tokens:"))
    assert " actor " in line and "actors" not in line and "were" not in line  # the model read lemmas
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--lemmatize", "xx",
                 "--output-dir", str(tmp_path / "bad")]) == 2
    assert "--lemmatize 'xx'" in capsys.readouterr().err


@pytest.mark.slow
def test_minibert_pretrained_on_lemmas_passes_them_on(tmp_path, capsys):
    from transformers import AutoTokenizer

    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data")
    with open(data / "train.csv", "a") as f:
        f.write("the movies were running,positive\n" * 20)
    pre = tmp_path / "pre"
    assert main(["pretrain", "--task", "csv", "--data-dir", str(data), "--epochs", "1", "--vocab-size", "400",
                 "--lemmatize", "en", "--output-dir", str(pre)]) == 0
    vocab = AutoTokenizer.from_pretrained(pre / "model").get_vocab()
    assert "run" in vocab and "running" not in vocab and "were" not in vocab  # built on lemmas
    ft = tmp_path / "ft"
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", str(pre), "--max-steps", "2",
                 "--no-heatmap", "--output-dir", str(ft)]) == 0  # no --lemmatize: inherited from the checkpoint
    assert json.loads((ft / "model" / "attnkit_run.json").read_text())["lemmatize"] == "en"
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", str(pre), "--lemmatize", "fr",
                 "--output-dir", str(tmp_path / "ft2")]) == 2
    assert "trained on en lemmas" in capsys.readouterr().err
