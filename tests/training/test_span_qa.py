"""Span question answering (SQuAD v1.1): reader, windows, decoding, metrics, CLI."""

import json
import random

import numpy as np
import pytest

from attnkit.tasks import DataFormatError
from attnkit.tasks.squad import answer_positions, best_spans, encode_windows, normalize_answer, read_squad, squad_metrics, token_f1
from helpers import SHARED_DATA, WORDS


def squad_json(n: int, prefix: str, seed: int = 0, lo: int = 20, hi: int = 60) -> dict:
    """Paragraphs of filler words with one sentiment word; the question asks for it."""
    rng = random.Random(seed)
    pars = []
    for p in range(n):
        words = [rng.choice(WORDS[15:]) for _ in range(rng.randint(lo, hi))]
        k = rng.randrange(len(words))
        words[k] = rng.choice(WORDS[:15])
        start = len(" ".join(words[:k])) + (1 if k else 0)
        pars.append({"context": " ".join(words), "qas": [{"id": f"{prefix}{p}", "question": "which word was it ?",
                                                          "answers": [{"text": words[k], "answer_start": start}]}]})
    return {"data": [{"title": "tiny", "paragraphs": pars}], "version": "1.1"}


@pytest.fixture
def tiny_squad(tmp_path):
    d = tmp_path / "data" / "squad_v1.1"
    d.mkdir(parents=True)
    (d / "train-v1.1.json").write_text(json.dumps(squad_json(48, "tr", 0)))
    (d / "dev-v1.1.json").write_text(json.dumps(squad_json(12, "dv", 1)))
    return tmp_path / "data"


# ----------------------------------------------------------------------------- metrics


def test_official_normalisation_and_scores():
    assert normalize_answer("The  Denver Broncos!") == "denver broncos"
    assert normalize_answer("an apple, a pear") == "apple pear"
    assert token_f1("Denver Broncos", "the Denver Broncos") == 1.0
    # pred {broncos, won}, gold {denver, broncos}: p = r = 1/2
    assert token_f1("Broncos won", "Denver Broncos") == pytest.approx(0.5)
    assert token_f1("", "x") == 0.0
    rows = [{"id": "a", "answers": {"text": ["Denver Broncos", "Broncos"]}}, {"id": "b", "answers": {"text": ["1999"]}}]
    m = squad_metrics({"a": "broncos", "b": "in 1999"}, rows)
    # a: exact with the second gold; b: F1 = 2 * (1/2 * 1) / (1/2 + 1) = 2/3, not exact
    assert m["exact_match"] == pytest.approx(50.0)
    assert m["f1"] == pytest.approx(100 * (1 + 2 / 3) / 2)
    assert squad_metrics({}, rows)["f1"] == 0.0


# ----------------------------------------------------------------------------- reader


def test_reader_reads_and_checks(tmp_path):
    p = tmp_path / "s.json"
    p.write_text(json.dumps(squad_json(3, "q")))
    rows = read_squad(p)
    assert [r["id"] for r in rows] == ["q0", "q1", "q2"]
    for r in rows:
        s, t = r["answers"]["answer_start"][0], r["answers"]["text"][0]
        assert r["context"][s : s + len(t)] == t

    bad = squad_json(2, "q")
    bad["data"][0]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] += 1
    p.write_text(json.dumps(bad))
    with pytest.raises(DataFormatError, match=r"s\.json.*paragraphs\[1\]\.qas\[0\] \(id q1\) answer 0.*not at answer_start"):
        read_squad(p)

    bad = squad_json(2, "q")
    del bad["data"][0]["paragraphs"][0]["qas"][0]["question"]
    p.write_text(json.dumps(bad))
    with pytest.raises(DataFormatError, match=r"id q0\): missing field 'question'"):
        read_squad(p)

    # an id given twice (or 5 beside "5"), the answers file's own key as an id, a question or an answer of no text:
    # read and scored wrong without a word (sweep 2026-11-28x GC, GF)
    def edited(change):
        d = squad_json(2, "q")
        change(d["data"][0]["paragraphs"])
        p.write_text(json.dumps(d))
        return p

    def same_id(pars):
        pars[1]["qas"][0]["id"] = "q0"

    def int_id(pars):
        pars[0]["qas"][0]["id"], pars[1]["qas"][0]["id"] = 5, "5"

    def marker_id(pars):
        pars[1]["qas"][0]["id"] = "written_by"

    def blank_question(pars):
        pars[1]["qas"][0]["question"] = "   "

    def empty_answer(pars):
        pars[1]["qas"][0]["answers"][0].update(text="", answer_start=0)

    for change, needle in ((same_id, r"paragraphs\[1\]\.qas\[0\]: question id 'q0' is also the id of data\[0\]\.paragraphs\[0\]\.qas\[0\]"),
                           (int_id, r"question id '5' is also the id of"),
                           (marker_id, r"question id 'written_by' is the key attnkit marks its answers files with"),
                           (blank_question, r"\(id q1\): expected a question, found only spaces"),
                           (empty_answer, r"\(id q1\) answer 0: expected an answer's text, found an empty one")):
        with pytest.raises(DataFormatError, match=needle):
            read_squad(edited(change))

    p.write_text('{"data": [\n{"paragraphs": [}]}')
    with pytest.raises(DataFormatError, match=r"s\.json, line 2: not valid JSON"):
        read_squad(p)
    p.write_text(json.dumps({"version": "1.1"}))
    with pytest.raises(DataFormatError, match="'data' list of articles"):
        read_squad(p)


# ----------------------------------------------------------------------------- windows and decoding


def test_windows_label_the_answer_tokens(tiny_bert):
    from attnkit.models.checkpoint import load_tokenizer

    tok = load_tokenizer(tiny_bert)
    data = squad_json(20, "w", seed=3, lo=40, hi=80)
    rows = [qa | {"context": par["context"]} for par in data["data"][0]["paragraphs"] for qa in par["qas"]]
    enc = encode_windows(tok, [r["question"] for r in rows], [r["context"] for r in rows], max_length=48, doc_stride=12)
    seen = set()
    for i, offsets in enumerate(enc["offset_mapping"]):
        r = rows[enc["overflow_to_sample_mapping"][i]]
        a0, text = r["answers"][0]["answer_start"], r["answers"][0]["text"]
        s, e = answer_positions(offsets, a0, a0 + len(text))
        if s == 0:  # not in this window: the answer lies (at least partly) outside its context tokens
            ctx = [o for o in offsets if o is not None]
            assert ctx[0][0] > a0 or ctx[-1][1] < a0 + len(text)
            continue
        seen.add(enc["overflow_to_sample_mapping"][i])
        assert r["context"][offsets[s][0] : offsets[e][1]] == text
    assert len(seen) == len(rows)  # every answer lies whole in at least one window
    assert len(enc["input_ids"]) > len(rows)  # long contexts were split into several windows


def test_best_span_decoding_rules():
    ctx = ["alpha beta gamma delta"]
    offs = [[None, (0, 5), (6, 10), (11, 16), (17, 22), None]]
    start = np.array([[9.0, 1.0, 5.0, 0.0, 0.0, 9.0]])
    end = np.array([[9.0, 8.0, 0.0, 0.0, 4.0, 9.0]])
    # best legal span: start "beta" (5) .. end "delta" (4) = 9, since end "alpha" (8) lies before start "beta"
    # and start "alpha" (1) + end "alpha" (8) = 9 ties; [CLS]/[SEP] (None) are never chosen
    text, score, start_char = best_spans(ctx, [0], offs, start, end)[0]
    assert score == 9.0 and text in ("beta gamma delta", "alpha")
    start[0, 1] = 0.5
    assert best_spans(ctx, [0], offs, start, end)[0][:2] == ("beta gamma delta", 9.0)
    assert best_spans(ctx, [0], offs, start, end, max_answer_tokens=2)[0][0] == "alpha"
    # two windows of one example: the better one wins
    offs2 = offs + [[None, (11, 16), (17, 22)]]
    s2 = np.vstack([start, np.pad([[0.0, 20.0, 0.0]], ((0, 0), (0, 3)), constant_values=-100)])
    e2 = np.vstack([end, np.pad([[0.0, 0.0, 20.0]], ((0, 0), (0, 3)), constant_values=-100)])
    assert best_spans(ctx, [0, 0], offs2, s2, e2)[0] == ("gamma delta", 40.0, 11)


# ----------------------------------------------------------------------------- end to end


def test_cli_train_evaluate_predict_squad(tiny_bert, tiny_squad, tmp_path, capsys):
    from attnkit.cli import main
    from attnkit.attention.spec import spec_of
    from attnkit.models.checkpoint import load_model

    out = tmp_path / "run"
    rc = main(["train", "--task", "squad", "--data-dir", str(tiny_squad), "--model", str(tiny_bert), "--max-steps", "4",
               "--batch-size", "8", "--max-length", "40", "--lr", "1e-3", "--output-dir", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "sparsegen-lin (lam=-7)" in printed and "dev f1" in printed and "exact_match" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"] == "squad" and metrics["main_metric"] == "f1"
    assert metrics["train_size"] == 48 and metrics["validation_size"] == 12 and metrics["train_windows"] > 48
    dev = metrics["validation"]
    assert 0 <= dev["exact_match"] <= dev["f1"] <= 100
    assert isinstance(metrics["log_history"], list) and (out / "curves.png").stat().st_size > 1000

    model = load_model(out / "model")
    assert type(model).__name__.endswith("ForQuestionAnswering")
    assert spec_of(model.config).attention == "sparsegen-lin" and spec_of(model.config).lam == -7.0

    # evaluate decodes with predict_answers, the Trainer with its own windows: they must agree
    # (no --max-length: it defaults to the length the model was trained with)
    assert main(["evaluate", "--model", str(out), "--data-dir", str(tiny_squad)]) == 0
    ev = json.loads((out / "model" / "eval_squad_validation.json").read_text())
    assert ev["n"] == 12 and ev["max_length"] == 40
    assert ev["f1"] == pytest.approx(dev["f1"]) and ev["exact_match"] == pytest.approx(dev["exact_match"])
    preds = json.loads((out / "model" / "eval_squad_validation_predictions.json").read_text())
    assert preds.pop("written_by") == "attnkit evaluate"  # the marker that lets a rerun replace attnkit's own file
    assert set(preds) == {f"dv{i}" for i in range(12)}
    # a dev split with no gold answer: refused, not scored 0.00 over "0 questions" (sweep 2026-11-28q R)
    bare = tmp_path / "bare" / "squad_v1.1"
    bare.mkdir(parents=True)
    dev_json = json.loads((tiny_squad / "squad_v1.1" / "dev-v1.1.json").read_text())
    for art in dev_json["data"]:
        for para in art["paragraphs"]:
            for qa in para["qas"]:
                qa["answers"] = []
    (bare / "dev-v1.1.json").write_text(json.dumps(dev_json))
    (bare / "train-v1.1.json").write_text((tiny_squad / "squad_v1.1" / "train-v1.1.json").read_text())
    capsys.readouterr()
    assert main(["evaluate", "--model", str(out), "--data-dir", str(bare.parent), "--output", str(tmp_path / "b.json")]) == 2
    assert "has no gold answers to score against: use attnkit predict" in capsys.readouterr().err
    assert not (tmp_path / "b.json").exists()
    # a span-QA model as a classifier's --teacher: named as such (its span head's LABEL_0/1 were called labels: q V)
    from helpers import write_tiny_sentiment

    sent = write_tiny_sentiment(tmp_path / "sent")
    assert main(["train", "--task", "csv", "--data-dir", str(sent), "--model", str(tiny_bert), "--teacher", str(out),
                 "--max-steps", "1", "--max-length", "32", "--output-dir", str(tmp_path / "student")]) == 2
    assert f"--teacher {out} is a question-answering model, not a classifier" in capsys.readouterr().err
    assert main(["train", "--task", "csv", "--data-dir", str(sent), "--model", str(tiny_bert), "--teacher", str(sent),
                 "--max-steps", "1", "--max-length", "32", "--output-dir", str(tmp_path / "student")]) == 2
    assert f"--teacher {sent}: " in capsys.readouterr().err

    capsys.readouterr()
    ctx = "the movie was good and the actor was bad"
    assert main(["predict", "--model", str(out), "--question", "which word ?", "--context", ctx, "--max-length", "40"]) == 0
    row = json.loads(capsys.readouterr().out.strip())
    assert row["answer"] and ctx[row["start"] : row["start"] + len(row["answer"])] == row["answer"]

    # a control character the tokenizer drops, joining two words of the context: answered, and said in one line
    import logging
    caplog = logging.getLogger("attnkit")
    seen: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: seen.append(r.getMessage())
    caplog.addHandler(handler)
    try:
        assert main(["predict", "--model", str(out), "--question", "which word ?", "--context", "the movie\x07was good",
                     "--max-length", "40"]) == 0
    finally:
        caplog.removeHandler(handler)
    assert "answer" in json.loads(capsys.readouterr().out.strip())
    said = [m for m in seen if "control characters" in m]
    assert len(said) == 1 and "(context 1, 'the movie\\x07was good': U+0007 at character 10, read as 'the moviewas good'): " \
        "it is answered as read" in said[0], said

    # explain draws a QA model's attention like a classifier's
    assert main(["explain", "--model", str(out), "which word ?", "--output", str(tmp_path / "qa.svg"), "--max-length", "40"]) == 0
    assert (tmp_path / "qa.svg").stat().st_size > 0 and "span head" in capsys.readouterr().out

    # a context of no token: the command refuses it (it answered "" as if the model had: sweep 2026-11-28q T); the
    # library's answer for it is "" with a null score (valid JSON), not -Infinity
    assert main(["predict", "--model", str(out), "--question", "what ?", "--context", "\u0301\u0301"]) == 2
    assert "--context ('\u0301\u0301') holds no token the model can read" in capsys.readouterr().err
    for blank in ("", "   "):  # not "needs both" (sweep -28q S)
        assert main(["predict", "--model", str(out), "--question", "what ?", "--context", blank]) == 2
        assert "--context is empty" in capsys.readouterr().err
    from attnkit.analysis.inference import load_for_inference
    from attnkit.tasks.squad import predict_answers

    _, qa_model, qa_tok = load_for_inference(str(out), qa_ok=True)
    row = predict_answers(qa_model, qa_tok, ["what ?"], ["   "], max_length=40, doc_stride=8)[0]
    assert row["answer"] == "" and row["score"] is None and row["start"] == -1

    # classifier-only commands refuse a QA model with a clear message, not a traceback
    for argv in (["predict", "--model", str(out), "--split", "validation", "--task", "squad"],
                 ["evaluate", "--model", str(out), "--task", "csv", "--data-dir", str(tiny_squad)],
                 ["words", "--model", str(out), "--task", "csv", "--data-dir", str(tiny_squad)]):
        assert main(argv) == 2, argv
        assert "question-answering model" in capsys.readouterr().err

    # a QA model refuses plain texts
    assert main(["predict", "--model", str(out), "some text"]) == 2
    assert "question-answering model" in capsys.readouterr().err


def test_qa_file_errors_name_the_line(tiny_bert, tiny_squad, tmp_path, capsys):
    from attnkit.cli import main

    out = tmp_path / "run"
    assert main(["train", "--task", "squad", "--data-dir", str(tiny_squad), "--model", str(tiny_bert), "--max-steps", "1",
                 "--batch-size", "8", "--max-length", "40", "--attention", "softmax", "--output-dir", str(out)]) == 0
    f = tmp_path / "q.jsonl"
    f.write_text('{"question": "q", "context": "the movie"}\n{"question": "q"}\n')
    capsys.readouterr()
    assert main(["predict", "--model", str(out), "--file", str(f)]) == 2
    err = capsys.readouterr().err
    assert "q.jsonl, line 2" in err and "context" in err
    f.write_text('{"question": "q", "context": "the movie"}\n{"question": "  ", "context": "the film"}\n')
    assert main(["predict", "--model", str(out), "--file", str(f)]) == 2  # it was answered (sweep s23f)
    assert "q.jsonl, line 2: expected a question, found an empty one" in capsys.readouterr().err
    assert main(["train", "--task", "squad", "--data-dir", str(tmp_path / "nowhere"), "--model", str(tiny_bert), "--output-dir", str(tmp_path / "o2")]) == 2
    assert "no dev-v1.1.json" in capsys.readouterr().err


def test_real_squad_dev_file():
    path = SHARED_DATA / "squad_v1.1" / "dev-v1.1.json"
    if not path.is_file():
        pytest.skip(f"real data not found at {path} (../shared/data is not beside this checkout)")
    rows = read_squad(path)
    assert len(rows) == 10570
    assert len({r["title"] for r in rows}) == 48
    assert sum(len(r["answers"]["text"]) for r in rows) == 34726
    # a perfect system scores 100 / 100 with the official metric
    m = squad_metrics({r["id"]: r["answers"]["text"][0] for r in rows}, rows)
    assert m["exact_match"] == 100.0 and m["f1"] == 100.0


def test_long_questions_are_cut_so_windows_keep_context(tiny_bert):
    from attnkit.models.checkpoint import load_tokenizer

    tok = load_tokenizer(tiny_bert)
    question = "x y z " * 40  # 120 one-letter tokens: longer than a whole window
    enc = encode_windows(tok, [question], ["the movie was good"], max_length=40, doc_stride=8)
    seq = enc.sequence_ids(0)
    assert seq.count(0) == 40 // 4 and seq.count(1) == 4


def test_questions_cut_to_their_window_share_are_said(tiny_bert, caplog):
    """A question past a quarter of --max-length was answered from its first tokens without a word: two questions
    differing after the cut got one answer (sweep s23e). One line says how many and the longest."""
    import logging

    from attnkit.models.build import build_qa_model
    from attnkit.models.checkpoint import load_tokenizer
    from attnkit.tasks.squad import predict_answers

    tok = load_tokenizer(tiny_bert)
    model = build_qa_model(str(tiny_bert))
    qs = ["short one?", "x y z " * 10 + "river?"]  # past 40 // 4 tokens
    n = len(tok(qs[1], add_special_tokens=False)["input_ids"])
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        predict_answers(model, tok, qs, ["the river flows", "the city sleeps"], max_length=40)
    said = [r.getMessage() for r in caplog.records if "longer than 10 tokens" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("1 of the 2 questions") and f"the longest has {n})" in said[0], caplog.text
    assert n > 10 >= len(tok(qs[0], add_special_tokens=False)["input_ids"])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        predict_answers(model, tok, qs[:1], ["the river flows"], max_length=40)
    assert "longer than" not in caplog.text


def test_span_qa_runs_the_attention_warmups_and_checks_their_length(tiny_bert, tiny_squad, tmp_path, capsys, monkeypatch):
    """--alpha-warmup (and --lam-warmup) shape a span-QA run as they shape a classifier's: the map starts dense and
    ends at its target (it was silently ignored); a --warmup step count longer than the run, and --teacher, are refused."""
    import attnkit.training.schedules as schedules
    from attnkit.attention.spec import spec_of
    from attnkit.cli import main
    from attnkit.models.checkpoint import load_model

    mixes = []
    real = schedules.set_attention
    monkeypatch.setattr(schedules, "set_attention", lambda model, spec: (mixes.append(spec.alpha_mix), real(model, spec))[1])
    base = ["train", "--task", "squad", "--data-dir", str(tiny_squad), "--model", str(tiny_bert), "--max-steps", "4",
            "--batch-size", "8", "--max-length", "40", "--lr", "1e-3", "--no-heatmap"]
    out = tmp_path / "warm"
    assert main(base + ["--attention", "entmax-alpha", "--alpha", "1.5", "--alpha-warmup", "0.5", "--logging-steps", "1",
                        "--output-dir", str(out)]) == 0
    assert mixes[:2] == [0.0, 0.5] and mixes[-1] == 1.0  # softmax at step 0, half-way at step 1 (of 2), the target at the end
    spec = spec_of(load_model(out / "model").config)
    assert spec.alpha == 1.5 and spec.alpha_mix == 1.0
    capsys.readouterr()
    assert main(base + ["--warmup", "50", "--output-dir", str(tmp_path / "long")]) == 2
    err = capsys.readouterr().err
    assert "--warmup 50: the run has 4 steps" in err and "Traceback" not in err
    assert main(base + ["--teacher", str(out), "--output-dir", str(tmp_path / "t")]) == 2
    assert "span QA has no distillation" in capsys.readouterr().err


def test_question_tokens_with_high_logits_never_crowd_out_the_answer():
    """The best span is sought among the context tokens only: a long question whose tokens carry the highest start and
    end logits still leaves the context's best span as the answer (not an empty one)."""
    import numpy as np

    from attnkit.tasks.squad import best_spans

    offsets = [[None] * 22 + [(0, 3), (4, 11), (12, 16)]]
    starts = [np.r_[np.full(22, 5.0), [1.0, 0.0, 0.0]]]
    ends = [np.r_[np.full(22, 5.0), [0.0, 0.0, 1.0]]]
    assert best_spans(["The Broncos won."], [0], offsets, starts, ends) == [("The Broncos won.", 2.0, 0)]
    # a window with no context token gives no answer from it
    assert best_spans(["x"], [0], [[None, None]], [np.zeros(2)], [np.zeros(2)]) == [("", -float("inf"), -1)]


def test_a_question_file_with_an_empty_line_is_refused_as_a_text_file_is(tmp_path):
    """One answer per line of the file: an empty line inside it is named (skipping it would shift every later answer
    against the file's lines); empty lines at the end are nothing."""
    from attnkit.cli.predict_commands import _read_qa_file
    from attnkit.errors import DataFormatError

    f = tmp_path / "q.jsonl"
    f.write_text('{"question": "Who won?", "context": "The Broncos won."}\n\n{"question": "Who?", "context": "x y"}\n')
    with pytest.raises(DataFormatError, match=r"q\.jsonl, line 2: expected one question per line, found an empty line"):
        _read_qa_file(str(f))
    f.write_text('{"question": "Who won?", "context": "The Broncos won."}\n{"question": "Who?", "context": "x y"}\n\n\n')
    assert _read_qa_file(str(f)) == (["Who won?", "Who?"], ["The Broncos won.", "x y"])
