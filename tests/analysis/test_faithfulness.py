"""Faithfulness and plausibility of explanations, tested where the answer is known: a classifier that reads
one word."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from attnkit.analysis.faithfulness import (
    EXPLANATIONS, PERCENTS, WordClassifier, average_precision, erasure_measures, erasure_texts, faithfulness_report,
    kendall_tau, tied_slots, top_count,
)
from attnkit.analysis.rationale import ranking
from attnkit.cli import main
from attnkit.models.checkpoint import load_tokenizer

P_GOOD = float(torch.softmax(torch.tensor([0.0, 3.0]), -1)[1])  # p(positive) of a text holding "good"


def reads_good(batch):
    """p(negative), p(positive) of word lists, for a model that reads the word "good" and nothing else."""
    return np.array([[1 - P_GOOD, P_GOOD] if "good" in ws else [0.5, 0.5] for ws in batch])


def test_top_counts_and_erasure_texts():
    assert [top_count(10, k) for k in PERCENTS] == [1, 1, 1, 2, 5]
    assert top_count(1, 50) == 1 and top_count(3, 100) == 3
    removed, kept = erasure_texts(["a", "b", "c", "d"], [0.1, 0.9, 0.5, 0.0], (25, 50))
    assert removed == [["a", "c", "d"], ["a", "d"]] and kept == [["b"], ["b", "c"]]  # kept in the text's order


def test_erasure_measures_have_the_known_answer():
    words = "the plot is good but the actor is very dull".split()
    right = [1.0 if w == "good" else 0.0 for w in words]  # "good" first
    wrong = [0.0 if w == "good" else 1.0 + i for i, w in enumerate(words)]  # "good" last
    m = erasure_measures(reads_good, words, 1, {"right": right, "wrong": wrong})
    gap = P_GOOD - 0.5
    assert m["right"]["comprehensiveness"] == pytest.approx([gap] * 5)  # removing "good" removes what the model reads
    assert m["right"]["sufficiency"] == pytest.approx([0.0] * 5)  # "good" alone suffices
    assert m["wrong"]["comprehensiveness"] == pytest.approx([0.0] * 5)  # top 50% of 10 words never reaches "good"
    assert m["wrong"]["sufficiency"] == pytest.approx([gap] * 5)


def test_tied_words_are_ordered_at_random_not_by_position():
    # no ties: the ranking is the scores' order whatever the draw
    assert ranking([0.1, 0.9, 0.5], np.random.default_rng(3)) == [1, 2, 0]
    # four tied words: every order is drawn, and each word leads about a quarter of the time
    rng = np.random.default_rng(0)
    firsts = [ranking([0.0, 0.0, 0.0, 0.0], rng)[0] for _ in range(4000)]
    assert sorted(set(firsts)) == [0, 1, 2, 3]
    assert all(abs(firsts.count(i) / 4000 - 0.25) < 0.03 for i in range(4))
    # the tied group stays below the higher score
    assert all(ranking([0.0, 2.0, 0.0, 0.0], rng)[0] == 1 for _ in range(50))


def test_tied_slots_count_the_top_k_slots_a_tie_decided():
    # k = 1 (25%): the one high word, no tie; k = 2 (50%): one of three tied zeros fills the second slot
    assert tied_slots([1.0, 0.0, 0.0, 0.0], (25, 50)) == (1, 3)
    # a tie wholly inside the top k decides nothing: (1, 1) both in the top 2, and 0 wholly outside
    assert tied_slots([1.0, 1.0, 0.0, 0.0], (50,)) == (0, 2)
    # all tied (a uniform map): every slot of every k is the tie's
    assert tied_slots([0.5] * 10, PERCENTS) == (1 + 1 + 1 + 2 + 5, 10)
    assert tied_slots(list(range(10)), PERCENTS) == (0, 10)


def test_erasure_with_tied_scores_has_the_known_answer():
    """A map that ties "good" with three other words: the top 50% (2 of 4 words) holds "good" with probability 1/2,
    so comprehensiveness is half the gap and sufficiency half the gap. Ranked by position (the old rule) the first two
    words were taken and "good", last, never was: comprehensiveness 0, a property of word order, not of the map."""
    words = ["the", "film", "was", "good"]
    tied = [0.0, 0.0, 0.0, 0.0]
    gap = P_GOOD - 0.5
    positional = erasure_texts(words, tied, (50,))
    assert positional == ([["was", "good"]], [["the", "film"]])  # what ranking by position gave
    m = erasure_measures(reads_good, words, 1, {"tied": tied}, (50,), rng=np.random.default_rng(0), tie_draws=4000)
    assert m["tied"]["draws"] == 4000 and m["tied"]["tied"] == 2 and m["tied"]["slots"] == 2
    assert m["tied"]["comprehensiveness"][0] == pytest.approx(gap / 2, abs=0.05 * gap)
    assert m["tied"]["sufficiency"][0] == pytest.approx(gap / 2, abs=0.05 * gap)
    # an explanation without a tie at any cut is measured once, and exactly
    m = erasure_measures(reads_good, words, 1, {"sharp": [0.0, 0.1, 0.2, 1.0]}, (25, 50), tie_draws=5)
    assert m["sharp"]["draws"] == 1 and m["sharp"]["tied"] == 0
    assert m["sharp"]["comprehensiveness"] == pytest.approx([gap, gap]) and m["sharp"]["sufficiency"] == pytest.approx([0.0, 0.0])
    # the same seed draws the same tie orders
    a, b = (erasure_measures(reads_good, words, 1, {"tied": tied}, (50,), rng=np.random.default_rng(7), tie_draws=5)
            for _ in range(2))
    assert a == b


def test_rank_agreement_and_plausibility():
    assert kendall_tau([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert kendall_tau([1, 1, 1], [1, 2, 3]) is None and kendall_tau([1], [1]) is None
    assert average_precision([0.9, 0.1, 0.2], [True, False, False]) == pytest.approx(1.0)
    assert average_precision([0.1, 0.9, 0.2], [True, False, False]) == pytest.approx(1 / 3)
    assert average_precision([0.1, 0.9], [False, False]) is None


class OneWordModel(nn.Module):
    """A classifier that reads one token: logits = [0, 3] if "good" is in the text, else [0, 0]; its attention puts all
    of [CLS]'s mass on "good" (uniform where there is none)."""

    def __init__(self, vocab: int, good: int):
        super().__init__()
        self.good = good
        self.emb = nn.Embedding(vocab, 2)
        with torch.no_grad():
            self.emb.weight.zero_()
            self.emb.weight[good] = torch.tensor([0.0, 3.0])

    def get_input_embeddings(self):
        return self.emb

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, output_attentions=False):
        mask = torch.ones_like(input_ids) if attention_mask is None else attention_mask
        logits = (self.emb(input_ids) * mask[..., None]).sum(1)
        hit = (input_ids == self.good).float() * mask
        row = torch.where(hit.sum(-1, keepdim=True) > 0, hit, mask.float()) / torch.where(hit.sum(-1, keepdim=True) > 0, hit, mask.float()).sum(-1, keepdim=True)
        att = row[:, None, None, :].expand(-1, 1, input_ids.shape[1], -1)  # [B, 1 head, L, L]
        return SimpleNamespace(logits=logits, attentions=(att, att) if output_attentions else None)


@pytest.fixture
def one_word(tiny_bert):
    tok = load_tokenizer(tiny_bert)
    return WordClassifier(OneWordModel(len(tok), tok.convert_tokens_to_ids("good")), tok, max_length=32, ig_steps=8)


def test_every_explanation_of_a_one_word_model(one_word):
    words = "the plot is good but the actor is very dull".split()
    target, scores = one_word.explain(words, np.random.default_rng(0))
    assert target == 1 and set(scores) == set(EXPLANATIONS)
    g = words.index("good")
    for name in ("attention", "rollout", "received", "grad_x_input", "integrated_gradients"):
        assert int(np.argmax(scores[name])) == g, name
    # the gradients of a model that reads one word are zero everywhere else
    assert np.count_nonzero(scores["grad_x_input"]) == 1 and np.count_nonzero(scores["integrated_gradients"]) == 1
    assert sorted(scores["random"]) == list(range(len(words)))


def test_report_on_a_one_word_model(one_word):
    texts = ["the plot is good but the actor is very dull", "a good film", "good", "the story was fun and very good indeed"]
    rationales = [[w == "good" for w in t.split()] for t in texts]
    rep = faithfulness_report(one_word, texts, rationales=rationales, progress=False)
    gap = P_GOOD - 0.5
    for name in ("attention", "grad_x_input", "integrated_gradients"):
        row = rep["explanations"][name]
        assert row["aopc_comprehensiveness"] == pytest.approx(gap, abs=1e-6)
        assert row["aopc_sufficiency"] == pytest.approx(0.0, abs=1e-6)
    # "good" alone: every explanation finds it; AP is undefined there, so 3 texts count for plausibility
    assert rep["explanations"]["attention"]["plausibility_auprc"] == pytest.approx(1.0)
    assert rep["explanations"]["attention"]["plausibility_examples"] == 3
    rnd = rep["explanations"]["random"]
    assert rnd["aopc_comprehensiveness"] < gap - 0.05 and rnd["aopc_sufficiency"] > 0.05
    assert rep["kendall_tau"]["attention vs grad_x_input"] is not None
    # "good" alone has no rank correlation: the mean is over the other 3 texts, and the report says so (sweep s23a)
    assert rep["kendall_tau_texts"]["attention vs grad_x_input"] == 3
    # the share of top-k slots that ties decided, per explanation: the random ranking has no ties; the attention of a
    # model that reads one word is zero on every other word, so past "good" its top-k slots are the tie's
    assert rep["tie_draws"] == 5 and rnd["tie_share"] == 0.0
    att = rep["explanations"]["attention"]["tie_share"]
    # (per text: "good" takes the first slot, and every later slot goes to one of the tied zeros)
    want = [tied_slots([float(w == "good") for w in t.split()]) for t in texts]
    assert att == pytest.approx(sum(w[0] for w in want) / sum(w[1] for w in want)) and att > 0.1


def test_faithfulness_command(tiny_bert, tiny_task, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--task", "csv", "--data-dir", str(tiny_task), "--model", str(tiny_bert), "--output-dir", str(run),
                 "--max-steps", "4", "--eval-steps", "4", "--batch-size", "16", "--lr", "3e-3", "--max-length", "16", "--no-heatmap",
                 "--attention", "entmax15"]) == 0
    out = tmp_path / "f" / "faith.json"
    assert main(["faithfulness", "--model", str(run), "--data-dir", str(tiny_task), "--split", "validation", "--max-examples", "5",
                 "--ig-steps", "4", "--output", str(out)]) == 0
    text = capsys.readouterr().out
    assert "AOPC comp." in text and "integrated_gradients" in text
    rep = json.loads(out.read_text())
    assert rep["examples"] == 5 and rep["written_by"] == "attnkit faithfulness" and rep["attention"] == "1.5-entmax"
    assert set(rep["explanations"]) == set(EXPLANATIONS) and len(rep["explanations"]["attention"]["comprehensiveness"]) == 5
    assert (tmp_path / "f" / "faith.png").stat().st_size > 1000
    # a file of the user's where the curves would go is kept
    (tmp_path / "f" / "mine.png").write_bytes(b"not attnkit's")
    assert main(["faithfulness", "--model", str(run), "--data-dir", str(tiny_task), "--split", "validation", "--max-examples", "2",
                 "--output", str(tmp_path / "f" / "mine.json")]) == 2
    assert "mine.png exists and was not written by attnkit" in capsys.readouterr().err
    assert (tmp_path / "f" / "mine.png").read_bytes() == b"not attnkit's" and not (tmp_path / "f" / "mine.json").exists()
    # no --split: a task without a test split is explained on its dev split, and says so
    assert main(["faithfulness", "--model", str(run), "--data-dir", str(tiny_task), "--max-examples", "2", "--ig-steps", "2"]) == 0
    assert "has no test split: explaining its validation split" in capsys.readouterr().out
    assert json.loads((run / "model" / "faithfulness_csv_validation.json").read_text())["split"] == "validation"
    # texts of one word have no rank correlation: said, not a bare "—" (sweep s23a)
    one = tmp_path / "one"
    one.mkdir()
    (one / "train.csv").write_text("text,label\nnice,positive\nawful,negative\n")
    (one / "dev.csv").write_text("text,label\ngood,positive\nbad,negative\nfine,positive\n")
    assert main(["faithfulness", "--model", str(run), "--data-dir", str(one), "--split", "validation", "--ig-steps", "1",
                 "--output", str(tmp_path / "one.json")]) == 0
    text = capsys.readouterr().out
    assert "kendall tau attention vs grad_x_input: — (no text of two or more words" in text, text
    assert json.loads((tmp_path / "one.json").read_text())["kendall_tau_texts"]["attention vs grad_x_input"] == 0


def test_integrated_gradients_in_batches_of_steps_give_the_same_attributions(sparsemax_classifier, monkeypatch):
    """Long texts run integrated gradients' steps a few at a time (IG_TOKENS): the attributions do not change."""
    from captum.attr import LayerIntegratedGradients

    from attnkit.analysis import faithfulness
    from attnkit.models.checkpoint import load_model

    clf = WordClassifier(load_model(sparsemax_classifier), load_tokenizer(sparsemax_classifier), max_length=32, ig_steps=8)
    words = "the plot is good but the actor is very dull".split()
    sizes, real = [], LayerIntegratedGradients.attribute
    monkeypatch.setattr(LayerIntegratedGradients, "attribute",
                        lambda self, *a, **k: sizes.append(k["internal_batch_size"]) or real(self, *a, **k))
    _, whole = clf.explain(words, np.random.default_rng(0))
    monkeypatch.setattr(faithfulness, "IG_TOKENS", 13)  # 12 tokens: one step at a time
    _, parts = clf.explain(words, np.random.default_rng(0))
    assert sizes == [8, 1]
    np.testing.assert_allclose(parts["integrated_gradients"], whole["integrated_gradients"], rtol=1e-4, atol=1e-6)
