"""A sparse map's support as a hard rationale: its length, its ERASER measures and its overlap with marked words,
tested where the answer is known (a classifier that reads one word) and on saved sparse and softmax classifiers."""

import json

import numpy as np
import pytest

from attnkit.analysis.faithfulness import WordClassifier, faithfulness_report
from attnkit.analysis.rationale import cut_is_tied, overlap, rationale_measures, support_length
from attnkit.cli import main
from attnkit.errors import UserError
from attnkit.models.checkpoint import load_model, load_tokenizer
from helpers import save_tiny_classifier, snapshot, write_csv_task
from test_faithfulness import P_GOOD, one_word, reads_good  # noqa: F401  (the one-word model and its fixture)

WORDS = "the plot is good but the actor is very dull".split()


def test_support_length_ties_and_overlap():
    assert support_length([0.0, 0.3, 0.0, 0.7]) == 2 and support_length([0.0, 0.0]) == 0
    assert cut_is_tied([0.5, 0.2, 0.2, 0.0], 2) and not cut_is_tied([0.5, 0.2, 0.2, 0.0], 3)
    assert not cut_is_tied([0.5, 0.2], 2) and not cut_is_tied([0.5, 0.2], 0)
    # chosen {1, 2} against marked {2, 3}: one in common; F1 = 2 * 1 / (2 + 2), IOU = 1 / 3
    assert overlap({1, 2}, [False, False, True, True]) == pytest.approx((0.5, 1 / 3))
    assert overlap(set(), [True, False]) == (0.0, 0.0) and overlap({0}, [False, False]) is None


def test_rationale_measures_have_the_known_answer():
    right = [1.0 if w == "good" else 0.0 for w in WORDS]  # its support is "good" alone
    wrong = [0.0 if w == "good" else 1.0 + i for i, w in enumerate(WORDS)]
    gold = [w in ("good", "dull") for w in WORDS]
    m = rationale_measures(reads_good, WORDS, 1, {"right": right, "wrong": wrong}, 1, rng=np.random.default_rng(0), gold=gold)
    gap = P_GOOD - 0.5
    assert m["right"]["comprehensiveness"] == pytest.approx(gap) and m["right"]["sufficiency"] == pytest.approx(0.0)
    assert m["wrong"]["comprehensiveness"] == pytest.approx(0.0) and m["wrong"]["sufficiency"] == pytest.approx(gap)
    assert m["right"]["token_f1"] == pytest.approx(2 / 3) and m["right"]["iou"] == pytest.approx(0.5)
    assert m["wrong"]["token_f1"] == pytest.approx(2 / 3) and m["wrong"]["iou"] == pytest.approx(0.5)  # "dull" is last-scored: top
    assert not m["right"]["tied"]
    # at length 2 "right" takes "good" and one of nine tied zeros: the draws are averaged, and the tie is said
    m2 = rationale_measures(reads_good, WORDS, 1, {"right": right}, 2, rng=np.random.default_rng(0), tie_draws=7)
    assert m2["right"]["tied"] and m2["right"]["comprehensiveness"] == pytest.approx(gap)


def test_a_report_measures_given_lengths_text_by_text(one_word):  # noqa: F811
    texts = ["the plot is good but the actor is very dull", "", "a good film", "the story was fun"]
    gold = [[w == "good" for w in t.split()] for t in texts]
    rep = faithfulness_report(one_word, texts, rationales=gold, progress=False, rationale_lengths=[1, 4, 2, None])
    rat = rep["rationale"]
    # the empty text is skipped, the last has no length: two texts measured, their lengths kept by position
    assert rat["lengths_from"] == "given" and rat["texts"] == 2 and rat["lengths"] == [1, None, 2, None]
    assert rat["mean_words"] == pytest.approx(1.5) and rat["mean_share"] == pytest.approx((1 / 10 + 2 / 3) / 2)
    att = rat["explanations"]["attention"]
    # "good" leads the attention in both texts: removing it costs the whole gap, and it is all the model needs
    assert att["comprehensiveness"] == pytest.approx(P_GOOD - 0.5, abs=1e-6) and att["sufficiency"] == pytest.approx(0.0, abs=1e-6)
    assert att["token_f1"] == pytest.approx((1 + 2 / 3) / 2) and att["gold_texts"] == 2
    assert rep["texts_sha256"] and set(rat["explanations"]) == {"attention", "grad_x_input", "integrated_gradients", "random"}
    # a model without a sparse last layer and no lengths: no rationale
    assert "rationale" not in faithfulness_report(one_word, texts[:1], progress=False)
    with pytest.raises(UserError, match="lengths for 2 texts given for 4 texts"):
        faithfulness_report(one_word, texts, progress=False, rationale_lengths=[1, 2])
    # a length past its text's words (lengths of other texts): refused as the command refuses it, not cut short
    with pytest.raises(UserError, match="rationale length 5 for text 3, which has 3 words"):
        faithfulness_report(one_word, texts, progress=False, rationale_lengths=[1, 4, 5, None])


@pytest.fixture(scope="module")
def pair(tiny_bert, tmp_path_factory):
    """A sparsemax classifier and a softmax one on the same encoder; the sparse one's queries scaled 100 times, so that
    its random attention is peaked enough to leave words out of its support."""
    import torch

    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.checkpoint import save_checkpoint

    root = tmp_path_factory.mktemp("rationale")
    sparse = save_tiny_classifier(tiny_bert, root / "sparse" / "model", AttentionSpec("sparsemax"), ["negative", "positive"])
    net = load_model(sparse)
    with torch.no_grad():
        for name, p in net.named_parameters():
            if "query.weight" in name:
                p.mul_(100)
    save_checkpoint(net, sparse, tokenizer=load_tokenizer(sparse), extra={"task": "csv", "max_length": 16})
    return sparse, save_tiny_classifier(tiny_bert, root / "soft" / "model", AttentionSpec("softmax"), ["negative", "positive"])


def test_a_sparse_models_rationale_is_its_attentions_support(pair):
    sparse = pair[0]
    clf = WordClassifier(load_model(sparse), load_tokenizer(sparse), max_length=32, ig_steps=2)
    texts = ["the plot is good but the actor is very dull", "a good film with a dull end", "bad"]
    rep = faithfulness_report(clf, texts, progress=False)
    rat = rep["rationale"]
    assert rat["lengths_from"] == "own support" and rep["attention_layer"]["sparse"]
    for text, k in zip(texts, rat["lengths"]):
        _, scores = clf.explain(text.split(), np.random.default_rng(0))
        assert k == support_length(scores["attention"]) and 1 <= k <= len(text.split())
    # some text's support leaves words out (the map is sparse), and the support is never decided by a tie
    assert any(k < len(t.split()) for t, k in zip(texts, rat["lengths"]))
    assert rat["explanations"]["attention"]["tie_share"] == 0.0
    # the rationale alone (what the study measures) is the full report's rationale, number for number, without the rest
    alone = faithfulness_report(clf, texts, progress=False, rationale_only=True)
    assert alone["rationale"] == rat and "explanations" not in alone and "kendall_tau" not in alone
    soft = WordClassifier(load_model(pair[1]), load_tokenizer(pair[1]), max_length=32, ig_steps=2)
    full = faithfulness_report(soft, texts, progress=False, rationale_lengths=rat["lengths"])
    assert faithfulness_report(soft, texts, progress=False, rationale_lengths=rat["lengths"], rationale_only=True)["rationale"] == full["rationale"]
    assert "rationale" not in faithfulness_report(soft, texts, progress=False, rationale_only=True)


def test_the_command_prints_the_rationale_and_measures_softmax_at_the_sparse_lengths(pair, tmp_path, capsys):
    sparse, soft = pair
    data = write_csv_task(tmp_path / "d", [("good film", "positive"), ("bad plot", "negative")],
                          [("a good film with a dull end", "positive"), ("the plot is bad", "negative"),
                           ("good acting but a very bad script", "negative")])
    before = snapshot(data)
    base = ["faithfulness", "--task", "csv", "--data-dir", str(data), "--split", "validation", "--ig-steps", "2", "--threads", "1"]
    assert main([*base, "--model", str(sparse), "--output", str(tmp_path / "sparse.json")]) == 0
    out = capsys.readouterr().out
    assert "rationale: the top words at the length of its attention's support" in out
    lengths = json.loads((tmp_path / "sparse.json").read_text())["rationale"]["lengths"]
    assert main([*base, "--model", str(soft), "--output", str(tmp_path / "soft.json"),
                 "--rationale-lengths", str(tmp_path / "sparse.json")]) == 0
    assert "the length of the given report's rationales" in capsys.readouterr().out
    rat = json.loads((tmp_path / "soft.json").read_text())["rationale"]
    assert rat["lengths"] == lengths and rat["lengths_from"] == "given"
    # other texts (fewer of them): refused in one line, nothing written
    assert main([*base, "--model", str(soft), "--max-examples", "2", "--output", str(tmp_path / "x.json"),
                 "--rationale-lengths", str(tmp_path / "sparse.json")]) == 2
    assert "measured other texts than these 2" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
    # the report read named as the output (or its curves as the plot): refused before anything is written; it was
    # replaced by the new report, the sparse model's gone (sweep 2026-11-27f)
    given = tmp_path / "sparse.json"
    kept = given.read_bytes(), given.with_suffix(".png").read_bytes()
    assert main([*base, "--model", str(soft), "--rationale-lengths", str(given), "--output", str(given)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"--output {given} is also the input --rationale-lengths" in err and len(err.splitlines()) == 1, err
    assert (given.read_bytes(), given.with_suffix(".png").read_bytes()) == kept
    # a report without a rationale (a softmax model's own): refused
    plain = tmp_path / "plain.json"
    assert main([*base, "--model", str(soft), "--output", str(plain)]) == 0
    capsys.readouterr()
    assert main([*base, "--model", str(soft), "--output", str(tmp_path / "y.json"), "--rationale-lengths", str(plain)]) == 2
    assert "has no rationale lengths" in capsys.readouterr().err
    # a file that is not there: the option and what it takes named (it was "0.5: No such file or directory", s23e)
    assert main([*base, "--model", str(soft), "--output", str(tmp_path / "y.json"), "--rationale-lengths", "0.5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--rationale-lengths 0.5: No such file or directory: expected the JSON report of an earlier "
                        "attnkit faithfulness run (its --output)") and len(err.splitlines()) == 1, err
    # a hand-made report: a rationale that is not an object, too few lengths, a length past its text's words
    cases = (([1], "has no rationale lengths"), ({"lengths": [1, 1]}, "2 lengths for 3 texts"),
             ({"lengths": [99, 1, 1]}, "length 99 for text 1, which has 7 words"))
    for i, (rationale, needle) in enumerate(cases):
        bad = tmp_path / f"bad{i}.json"
        real = json.loads((tmp_path / "sparse.json").read_text())  # the same texts (their sha256), edited lengths
        bad.write_text(json.dumps(real | {"rationale": rationale}))
        assert main([*base, "--model", str(soft), "--output", str(tmp_path / "z.json"), "--rationale-lengths", str(bad)]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err and f"--rationale-lengths {bad}" in err and needle in err, err
    assert snapshot(data) == before
