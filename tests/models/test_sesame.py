"""SesameBERT: Gaussian blur as a locality step, SE over layers, extraction strategies, GLUE, HANS."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from attnkit.attention.blur import gaussian_blur, gaussian_kernel
from attnkit.attention.spec import AttentionSpec
from attnkit.models.pooling import STRATEGIES, HeadSpec, PooledEncoderForSequenceClassification

# ----------------------------------------------------------------------------- the blur kernel


@pytest.mark.parametrize("k,sigma", [(1, 0.3), (3, 0.3), (5, 1.0), (7, 2.5), (9, 0.01)])
def test_kernel_sums_to_one_and_is_symmetric(k, sigma):
    g = gaussian_kernel(k, sigma)
    assert g.shape == (k,)
    assert torch.isclose(g.sum(), torch.tensor(1.0, dtype=g.dtype), atol=1e-12)
    assert torch.equal(g, g.flip(0))
    assert int(g.argmax()) == k // 2


def test_kernel_matches_formula_and_authors_setting():
    g = gaussian_kernel(3, 0.3)
    e = math.exp(-1 / (2 * 0.09))
    assert torch.allclose(g, torch.tensor([e, 1, e], dtype=torch.float64) / (1 + 2 * e))
    assert abs(g[0].item() - 0.0038) < 5e-4  # METHODS.md: [0.004, 0.992, 0.004]


def test_kernel_tends_to_identity_as_sigma_shrinks():
    x = torch.randn(2, 3, 9, 4, dtype=torch.float64)
    prev = float("inf")
    for sigma in (1.0, 0.5, 0.3, 0.2, 0.1):
        d = (gaussian_blur(x, gaussian_kernel(5, sigma)) - x).abs().max().item()
        assert d < prev
        prev = d
    assert torch.equal(gaussian_blur(x, gaussian_kernel(5, 0.01)), x)
    # sigma so small its square underflows: the kernel was 0/0 = NaN at the centre (a "diverged" run, NaN logits
    # through the API: sweep 2026-11-27h); it is the identity, the limit
    for sigma in (1e-155, 1e-200, 1e-300, 5e-324):
        assert torch.equal(gaussian_kernel(5, sigma), torch.tensor([0.0, 0, 1, 0, 0], dtype=torch.float64))
        assert torch.equal(gaussian_blur(x, gaussian_kernel(5, sigma)), x)


def test_blur_equals_explicit_convolution():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 11, 5, dtype=torch.float64)
    for k, sigma in ((3, 0.5), (5, 1.3), (7, 0.8)):
        g = gaussian_kernel(k, sigma)
        ours = gaussian_blur(x, g)
        # depthwise conv1d along the sequence with zero SAME padding
        B, H, L, D = x.shape
        seq = x.permute(0, 1, 3, 2).reshape(B * H * D, 1, L)
        ref = torch.nn.functional.conv1d(seq, g.view(1, 1, k), padding=k // 2)
        ref = ref.reshape(B, H, D, L).permute(0, 1, 3, 2)
        assert torch.allclose(ours, ref, atol=1e-12)
        # and by hand at the first position: only the kernel's right half sees real tokens
        c = k // 2
        assert torch.allclose(ours[:, :, 0], sum(g[c + j] * x[:, :, j] for j in range(c + 1)), atol=1e-12)


def test_padding_never_leaks_into_real_tokens():
    torch.manual_seed(1)
    x = torch.randn(1, 2, 6, 4)
    g = gaussian_kernel(5, 1.0, dtype=torch.float32)
    alone = gaussian_blur(x, g)
    padded = torch.cat([x, 1e3 * torch.randn(1, 2, 3, 4)], dim=2)  # garbage in the padding
    valid = torch.tensor([[True] * 6 + [False] * 3])
    out = gaussian_blur(padded, g, valid)
    assert torch.allclose(out[:, :, :6], alone, atol=1e-6)


@pytest.mark.parametrize("bad", [{"blur": "keys"}, {"blur": "value", "blur_size": 4}, {"blur": "value", "blur_size": 0},
                                 {"blur": "context", "blur_sigma": 0.0}, {"blur": "context", "blur_sigma": float("nan")}])
def test_bad_blur_settings_name_the_field(bad):
    with pytest.raises(ValueError) as e:
        AttentionSpec("softmax", **bad)
    assert any(k in str(e.value) for k in ("blur", "blur_size", "blur_sigma"))


# ----------------------------------------------------------------------------- inside a model


def _classifier(tiny_bert, spec, head=None, seed=0):
    from attnkit.models.build import build_classifier

    torch.manual_seed(seed)
    m = build_classifier(str(tiny_bert), 3, spec, head=head)
    return m.eval()


def _padding_gap(model, tok):
    texts = ["a good movie", "the plot was really dull and the actor was terrible but fun"]
    enc = tok(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        batch = model(**enc).logits
        alone = torch.cat([model(**tok([t], return_tensors="pt")).logits for t in texts])
    return (batch - alone).abs().max().item()


@pytest.mark.parametrize("attention", ["softmax", "sparsemax", "sparsegen-lin"])
@pytest.mark.parametrize("blur", ["context", "value"])
def test_blur_with_every_normaliser_is_padding_invariant(tiny_bert, attention, blur):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert)
    spec = AttentionSpec(attention, -1.0 if attention == "sparsegen-lin" else 0.0, blur=blur, blur_size=5, blur_sigma=1.0)
    model = _classifier(tiny_bert, spec)
    assert _padding_gap(model, tok) < 1e-5
    # and the blur really changes the output (sigma 1 is far from the identity)
    plain = _classifier(tiny_bert, AttentionSpec(attention, spec.lam))
    enc = tok(["a good movie and a bad plot"], return_tensors="pt")
    with torch.no_grad():
        h1 = model(**enc, output_hidden_states=True).hidden_states[-1]
        h0 = plain(**enc, output_hidden_states=True).hidden_states[-1]
    assert (h1 - h0).abs().max() > 1e-3  # random tiny weights: attention moves the output a little, padding not at all


def test_tiny_sigma_blur_equals_no_blur(tiny_bert):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_bert)
    enc = tok(["a good movie and a bad plot"], return_tensors="pt")
    a = _classifier(tiny_bert, AttentionSpec("sparsemax", blur="context", blur_size=3, blur_sigma=0.01))
    b = _classifier(tiny_bert, AttentionSpec("sparsemax"))
    with torch.no_grad():
        assert torch.allclose(a(**enc).logits, b(**enc).logits, atol=1e-6)


def test_an_identity_blur_is_named_so_and_the_train_command_says_it_does_not_blur(tiny_bert, tmp_path, capsys, monkeypatch):
    from attnkit.attention.blur import blur_is_identity
    from attnkit.cli import main
    from attnkit.cli import train_commands as commands

    # width 3: sigma 0.01 is exactly [0, 1, 0], 0.1 has tails of 1.9e-22; 0.3 ([0.004, 0.992, 0.004]) already blurs
    assert blur_is_identity(3, 0.01) and blur_is_identity(3, 0.1) and blur_is_identity(7, 0.1)
    assert not blur_is_identity(3, 0.3) and not blur_is_identity(3, 0.5) and not blur_is_identity(5, 0.2)
    assert "no blur" in AttentionSpec("softmax", blur="value", blur_sigma=0.1).describe()
    assert AttentionSpec("softmax", blur="value", blur_sigma=0.3).blur_note() is None
    assert AttentionSpec("softmax").blur_note() is None  # no blur asked for: nothing to say

    class Stop(BaseException):  # not an Exception: the command line shows those as bugs and returns 1
        pass

    def stop(cfg):
        raise Stop

    monkeypatch.setattr(commands, "train", stop)  # the note comes before any training
    for sigma, said in (("0.1", True), ("0.5", False)):
        with pytest.raises(Stop):
            main(["train", "--task", "csv", "--data-dir", str(tmp_path), "--model", str(tiny_bert), "--output-dir",
                  str(tmp_path / f"run{sigma}"), "--blur", "context", "--blur-sigma", sigma])
        err = capsys.readouterr().err
        assert ("does not blur" in err) is said, err
        assert not said or "--blur-sigma 0.1 at --blur-size 3 does not blur" in err
    assert "--blur-size 1 does not blur at any sigma" in AttentionSpec("softmax", blur="context", blur_size=1, blur_sigma=2.0).blur_note()


@pytest.mark.parametrize("pooling", STRATEGIES)
@pytest.mark.parametrize("se", [False, True])
def test_every_strategy_with_and_without_se(tiny_bert, tmp_path, pooling, se):
    from transformers import AutoTokenizer

    from attnkit.models.checkpoint import load_classifier, save_checkpoint

    tok = AutoTokenizer.from_pretrained(tiny_bert)
    head = HeadSpec(pooling, se=se, se_ratio=2)
    model = _classifier(tiny_bert, AttentionSpec("sparsegen-lin", -1.0, blur="context"), head)
    assert _padding_gap(model, tok) < 1e-5  # the SE squeeze averages real tokens only
    enc = tok(["a good movie", "a dull plot"], padding=True, return_tensors="pt")
    labels = torch.tensor([0, 2])
    model.train()
    out = model(**enc, labels=labels)
    out.loss.backward()
    if se:
        assert model.se.fc1.weight.grad is not None and model.se.fc1.weight.grad.abs().sum() > 0
    model.eval()
    save_checkpoint(model, tmp_path / "m", tok)
    again = load_classifier(tmp_path / "m").eval()
    assert isinstance(again, PooledEncoderForSequenceClassification) or head.is_default
    with torch.no_grad():
        assert torch.equal(again(**enc).logits, model(**enc).logits)
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    if not head.is_default:
        assert cfg["attnkit_head"] == head.to_dict()
    assert cfg["attnkit"]["blur"] == "context"


def test_strategies_pick_the_right_layers():
    from attnkit.models.pooling import extract

    stack = torch.arange(6.0).view(6, 1, 1, 1).expand(6, 2, 3, 4)  # layer l holds the value l
    expect = {"first": 0, "second": 1, "second-to-last": 4, "last": 5, "sum-last-four": 2 + 3 + 4 + 5, "sum-all": 15, "weighted": 2.5}
    for p, v in expect.items():
        out = extract(stack, p, torch.zeros(6))
        assert torch.allclose(out, torch.full_like(out, float(v))), p


def test_se_weights_are_per_layer_and_readable(tiny_bert, tmp_path):
    from transformers import AutoTokenizer

    from attnkit.analysis.explain import layer_weights, plot_layer_weights

    tok = AutoTokenizer.from_pretrained(tiny_bert)
    model = _classifier(tiny_bert, AttentionSpec("softmax"), HeadSpec("weighted", se=True, se_ratio=1))
    w = layer_weights(model, tok, ["a good movie", "a dull plot", "fun"], batch_size=2)
    assert len(w["se_mean"]) == 2 and len(w["mix"]) == 2
    assert all(0 < s < 1 for s in w["se_mean"])
    assert abs(sum(w["mix"]) - 1) < 1e-6
    for ext in ("png", "svg"):
        p = plot_layer_weights(w, tmp_path / f"w.{ext}")
        assert p.stat().st_size > 1000
    plain = _classifier(tiny_bert, AttentionSpec("softmax"))
    with pytest.raises(ValueError, match="no learned layer weights"):
        layer_weights(plain, tok, ["x"])


def test_bad_head_settings():
    with pytest.raises(ValueError, match="layer pooling"):
        HeadSpec("middle")
    with pytest.raises(ValueError, match="se_ratio"):
        HeadSpec("last", se=True, se_ratio=0)


# ----------------------------------------------------------------------------- metrics


def test_glue_metrics_agree_with_scipy_and_sklearn():
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import f1_score, matthews_corrcoef

    from attnkit.tasks.metrics import task_metrics

    y = np.array([1, 1, 1, 0, 0, 0, 1, 0])
    p = np.array([1, 0, 1, 0, 1, 0, 1, 0])
    # hand-computed: TP=3 FN=1 FP=1 TN=3 -> MCC = (9-1)/sqrt(4*4*4*4) = 0.5, F1 = 6/8 = 0.75
    m = task_metrics("mcc", y, p)
    assert m["mcc"] == pytest.approx(0.5) == pytest.approx(matthews_corrcoef(y, p))
    f = task_metrics("f1", y, p)
    assert f["f1"] == pytest.approx(0.75) == pytest.approx(f1_score(y, p))
    assert f["accuracy"] == pytest.approx(0.75)
    s, t = np.array([0.0, 1.0, 2.5, 4.0, 5.0]), np.array([0.5, 1.0, 2.0, 5.0, 4.5])
    r = task_metrics("regression", t, s)
    assert r["pearson"] == pytest.approx(pearsonr(s, t)[0])
    assert r["spearman"] == pytest.approx(spearmanr(s, t)[0]) == pytest.approx(0.9)
    assert "undefined_correlation" not in r


def test_a_correlation_with_constant_scores_is_marked_undefined_not_nan(caplog):
    from attnkit.tasks.metrics import task_metrics

    for gold, pred in ((np.array([0.5, 1.0, 2.0]), np.full(3, 2.0)), (np.full(3, 3.0), np.array([0.5, 1.0, 2.0]))):
        r = task_metrics("regression", gold, pred)
        assert r == {"pearson": 0.0, "spearman": 0.0, "corr": 0.0, "undefined_correlation": 1.0}
    assert "are one value: pearson and spearman are undefined" in caplog.text


# ----------------------------------------------------------------------------- GLUE files


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_glue_loaders_read_pairs_labels_and_index(tmp_path):
    from attnkit.tasks import load_task

    _write(tmp_path / "glue/RTE/train.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA man sleeps.\tA person rests.\tentailment\n1\tX.\tY.\tnot_entailment\n")
    _write(tmp_path / "glue/RTE/dev.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tnot_entailment\n")
    _write(tmp_path / "glue/RTE/test.tsv", "index\tsentence1\tsentence2\n7\tA.\tB.\n")
    d = load_task("rte", tmp_path)
    assert d.splits["train"][0] == {"text": "A man sleeps.", "text_pair": "A person rests.", "label": 0, "idx": 0}
    assert d.splits["test"][0]["label"] == -1 and d.splits["test"][0]["idx"] == 7
    assert d.label_names == ["entailment", "not_entailment"] and d.metric == "accuracy"
    _write(tmp_path / "glue/CoLA/train.tsv", "gj04\t1\t\tThe sailors rode the breeze.\ngj04\t0\t*\tBill whistled the house.\n")
    _write(tmp_path / "glue/CoLA/dev.tsv", "gj04\t1\t\tOk.\n")
    c = load_task("cola", tmp_path)
    assert list(c.splits["train"]["label"]) == [1, 0] and c.metric == "mcc"
    _write(tmp_path / "glue/STS-B/train.tsv", "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n0\tg\tf\ty\t0\tn\tn\tA plane.\tAn air plane.\t4.750\n")
    s = load_task("stsb", tmp_path)
    assert s.metric == "regression" and s.splits["train"][0]["label"] == pytest.approx(4.75)


def test_a_published_sets_control_characters_are_read_and_said_in_one_line(tmp_path, caplog):
    """GLUE's own files hold a few control characters (CoLA's train a backspace, RTE's stray C1 codes): the published
    set is read as it is (not refused, as the user's own csv is), and one line per load says how many texts, where."""
    from attnkit.tasks import load_task

    _write(tmp_path / "glue/CoLA/train.tsv", "gj04\t1\t\tThe sailors \x08rode.\ngj04\t0\t*\tBill\x12s house.\ngj04\t1\t\tOk.\n")
    _write(tmp_path / "glue/CoLA/dev.tsv", "gj04\t1\t\tFine.\ngj04\t1\t\tA\x85b.\n")
    c = load_task("cola", tmp_path)
    assert list(c.splits["train"]["text"])[1] == "Bill\x12s house."  # read as it is
    said = [r.getMessage() for r in caplog.records if "control characters" in r.getMessage()]
    assert said == ["task cola: 3 texts (train 2, validation 1) hold control characters, which a WordPiece (BERT) "
                    "tokenizer drops (the first: 'The sailors \\x08rode.', U+0008 at character 13): read as without them"]
    caplog.clear()
    _write(tmp_path / "glue/CoLA/train.tsv", "gj04\t1\t\tThe sailors rode.\n")
    _write(tmp_path / "glue/CoLA/dev.tsv", "gj04\t1\t\tFine.\n")
    load_task("cola", tmp_path)
    assert not [r for r in caplog.records if "control characters" in r.getMessage()]


STSB_HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"


def _stsb_dev(score: str) -> str:
    return STSB_HEADER + f"0\tg\tf\ty\t0\tn\tn\tA.\tB.\t2.5\n1\tg\tf\ty\t0\tn\tn\tA.\tC.\t{score}\n"


#: (files written, task, the error it must raise): each file of a GLUE layout named with its line
GLUE_ERRORS = [
    ({"RTE/train.tsv": "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n1\tA.\tB.\tmaybe\n"}, "rte",
     r"train.tsv, line 3: unknown label 'maybe'"),
    ({"RTE/train.tsv": "index\tpremise\thypothesis\tlabel\n"}, "rte", r"line 1: expected a column 'sentence1'"),
    ({"STS-B/dev.tsv": _stsb_dev("five")}, "stsb", r"line 3: expected a finite number in column 'score', found 'five'"),
    # nan and inf were read as scores: pearson 0 "all gold scores are one value", or "training diverged: lower --lr"
    # (sweep 2026-11-27g); 1e400 overflows to inf; a score off STS-B's 0-5 scale was trained on (sweep s23c)
    *[({"STS-B/dev.tsv": _stsb_dev(bad)}, "stsb", rf"dev.tsv, line 3: expected a finite number in column 'score', found '{bad}'")
      for bad in ("nan", "inf", "-inf", "1e400")],
    *[({"STS-B/dev.tsv": _stsb_dev(bad)}, "stsb", rf"dev.tsv, line 3: expected a score from 0 to 5 in column 'score'.*'{bad}'")
      for bad in ("7.5", "-2.0")],
    # a tab inside a CoLA sentence cut it there; a header row added to CoLA's headerless train file was an "unknown
    # label 'label'" (sweep s23c)
    ({"CoLA/train.tsv": "gj04\t1\t\tFine.\ngj04\t1\t\tA sentence\twith a tab.\n", "CoLA/dev.tsv": "gj04\t1\t\tFine.\n"},
     "cola", r"train.tsv, line 2: expected 4 tab-separated fields .* found 5 \(a tab inside a text"),
    ({"CoLA/train.tsv": "source\tlabel\torig_label\tsentence\ngj04\t1\t\tFine.\n", "CoLA/dev.tsv": "gj04\t1\t\tFine.\n"},
     "cola", r"train.tsv, line 1: unknown label 'label' .*no header row: remove line 1"),
]


def test_glue_errors_name_file_and_line(tmp_path):
    from attnkit.tasks import DataFormatError, load_task

    for files, task, pattern in GLUE_ERRORS:
        for name, text in files.items():
            _write(tmp_path / "glue" / name, text)
        with pytest.raises(DataFormatError, match=pattern):
            load_task(task, tmp_path)
    # an empty text of a pair: train read it (the model saw [CLS] a [SEP] [SEP]), evaluate refused it naming no file
    for row, col in (("0\tA.\t \tentailment", "sentence2"), ("0\t\tB.\tentailment", "sentence1")):
        _write(tmp_path / "glue/RTE/train.tsv", f"index\tsentence1\tsentence2\tlabel\n1\tA.\tB.\tentailment\n{row}\n")
        with pytest.raises(DataFormatError, match=rf"train.tsv, line 3: expected a text in column '{col}', found an empty "
                                                  r"field \(a pair needs both texts\): fill it or remove the row"):
            load_task("rte", tmp_path)


def test_glue_submission_format(tmp_path):
    from attnkit.tasks import load_task
    from attnkit.tasks.glue import write_submission

    _write(tmp_path / "glue/RTE/dev.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n")
    d = load_task("rte", tmp_path)
    p = write_submission(d, "test", np.array([1, 0]), [0, 1], tmp_path / "sub")
    assert p.name == "RTE.tsv"
    assert p.read_text() == "index\tprediction\n0\tnot_entailment\n1\tentailment\n"
    _write(tmp_path / "glue/CoLA/dev.tsv", "gj04\t1\t\tOk.\n")
    p = write_submission(load_task("cola", tmp_path), "test", np.array([1, 0]), [0, 1], tmp_path / "sub")
    assert p.read_text() == "index\tprediction\n0\t1\n1\t0\n"


def test_real_glue_and_mnli_split_counts():
    from helpers import require_shared_data

    from attnkit.tasks import load_task

    root = require_shared_data()
    rte = load_task("rte", root)
    assert {k: len(v) for k, v in rte.splits.items()} == {"train": 2490, "validation": 277, "test": 3000}
    m = load_task("mnli-devsplit", root)
    n = {k: len(v) for k, v in m.splits.items()}
    assert sum(n.values()) == 9815 and 0.75 < n["train"] / 9815 < 0.85
    ids = [set(m.splits[s]["idx"]) for s in ("train", "validation", "test")]
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[2]) and not (ids[1] & ids[2])
    assert load_task("qnli", root).splits.keys() == {"validation", "test"}  # no QNLI train here


# ----------------------------------------------------------------------------- HANS


HANS_ROWS = [
    ("non-entailment", "The doctor saw the actor .", "The actor saw the doctor .", "lexical_overlap", "ln_subject/object_swap"),
    ("entailment", "The doctor saw the actor .", "The doctor saw the actor .", "lexical_overlap", "le_relative_clause"),
    ("entailment", "The actor slept .", "The actor slept .", "subsequence", "se_PP_on_obj"),
    ("non-entailment", "The actor who slept ran .", "The actor ran .", "subsequence", "sn_NP/S"),
    ("non-entailment", "If the actor slept , the doctor ran .", "The doctor ran .", "constituent", "cn_embedded_under_if"),
]


def _hans_file(path: Path, rows=HANS_ROWS) -> Path:
    lines = ["gold_label\tsentence1\tsentence2\tpairID\theuristic\tsubcase"]
    lines += [f"{g}\t{a}\t{b}\tex{i}\t{h}\t{s}" for i, (g, a, b, h, s) in enumerate(rows)]
    return _write(path, "\n".join(lines) + "\n")


def test_hans_report_counts_neutral_and_contradiction_as_non_entailment(tmp_path):
    from attnkit.tasks.glue import entailment_index, hans_report, read_hans

    rows = read_hans(_hans_file(tmp_path / "h.tsv"))
    names = ["entailment", "neutral", "contradiction"]
    ent = entailment_index(names)
    predicted_class = np.array([2, 0, 0, 1, 0])  # contradiction, entail, entail, neutral, entail
    r = hans_report(rows, predicted_class == ent)
    assert r["accuracy"] == pytest.approx(4 / 5)
    assert r["heuristic"]["lexical_overlap"] == {"entailment": 1.0, "non-entailment": 1.0}
    assert r["heuristic"]["constituent"] == {"non-entailment": 0.0}
    assert r["subcase"]["sn_NP/S"]["accuracy"] == 1.0
    with pytest.raises(ValueError, match="entailment"):
        entailment_index(["negative", "positive"])


def test_hans_original_format_and_errors(tmp_path):
    from attnkit.tasks import DataFormatError
    from attnkit.tasks.glue import read_hans

    head = "gold_label\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2\tpairID\theuristic\tsubcase\ttemplate"
    row = "entailment\t( a )\t( b )\t(ROOT a)\t(ROOT b)\tThe actor slept .\tThe actor slept .\tex0\tsubsequence\tse_PP_on_obj\ttemp1"
    rows = read_hans(_write(tmp_path / "orig.txt", head + "\n" + row + "\n"))
    assert rows["text"] == ["The actor slept ."] and rows["label"] == [0]
    _write(tmp_path / "bad.tsv", "gold_label\tsentence1\tsentence2\tpairID\theuristic\tsubcase\nmaybe\ta\tb\tex0\th\ts\n")
    with pytest.raises(DataFormatError, match=r"bad.tsv, line 2: unknown gold_label 'maybe'"):
        read_hans(tmp_path / "bad.tsv")
    # an empty sentence (refused at evaluate naming no file), a header alone (numpy warnings, then "accuracy: nan"),
    # a row with more fields than the header (a tab inside a sentence: read shifted, without a word): sweep 2026-11-27h
    head = "gold_label\tsentence1\tsentence2\tpairID\theuristic\tsubcase"
    for body, needle in (("entailment\ta\tb\tex0\th\ts\nentailment\ta\t \tex1\th\ts\n",
                          r"line 3: expected a text in column 'sentence2', found an empty field"),
                         ("", r"bad.tsv: expected at least one HANS row under the header, found none"),
                         ("entailment\ta\tb\tex0\th\ts\textra\n", r"line 2: expected 6 tab-separated fields, found 7"),
                         # an empty heuristic or subcase, a subcase under both gold labels (the report listed it under
                         # its first row's): sweep 2026-11-28x GB
                         ("entailment\ta\tb\tex0\t \ts\n", r"line 2: expected a HANS heuristic in column 'heuristic'"),
                         ("entailment\ta\tb\tex0\th\t\n", r"line 2: expected a HANS subcase in column 'subcase'"),
                         ("entailment\ta\tb\tex0\th\ts\nnon-entailment\ta\tc\tex1\th\ts\n",
                          r"line 3: subcase 's' has gold_label 'non-entailment' here and 'entailment' on line 2")):
        _write(tmp_path / "bad.tsv", head + "\n" + body)
        with pytest.raises(DataFormatError, match=needle):
            read_hans(tmp_path / "bad.tsv")
    _write(tmp_path / "bad.tsv", head + "\tgold_label\nentailment\ta\tb\tex0\th\ts\tentailment\n")
    with pytest.raises(DataFormatError, match=r"line 1: column 'gold_label' is named 2 times"):
        read_hans(tmp_path / "bad.tsv")


# ----------------------------------------------------------------------------- CLI end to end


def _tiny_rte(root: Path, n_train=48, n_dev=16, n_test=6) -> Path:
    import random

    from helpers import WORDS

    rng = random.Random(0)
    head = "index\tsentence1\tsentence2\tlabel\n"

    def rows(n, labelled=True):
        out = []
        for i in range(n):
            a = rng.sample(WORDS, 6)
            y = i % 2
            b = a[:3] if y == 0 else rng.sample(WORDS, 3)
            lab = ["entailment", "not_entailment"][y]
            out.append(f"{i}\t{' '.join(a)}\t{' '.join(b)}" + (f"\t{lab}" if labelled else ""))
        return "\n".join(out) + "\n"

    _write(root / "glue/RTE/train.tsv", head + rows(n_train))
    _write(root / "glue/RTE/dev.tsv", head + rows(n_dev))
    _write(root / "glue/RTE/test.tsv", "index\tsentence1\tsentence2\n" + rows(n_test, labelled=False))
    return root


@pytest.mark.slow
def test_cli_sesame_train_explain_layer_weights_submission_hans(tiny_bert, tmp_path, capsys):
    from attnkit.cli import main

    data = _tiny_rte(tmp_path / "data")
    out = tmp_path / "run"
    rc = main(["train", "--task", "rte", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(out),
               "--epochs", "1", "--batch-size", "8", "--max-length", "24", "--attention", "sparsegen-lin", "--lam", "-1",
               "--blur", "value", "--blur-size", "5", "--blur-sigma", "0.5", "--layer-pooling", "weighted", "--se", "--se-ratio", "2"])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "Gaussian blur on values (k=5, sigma=0.5)" in printed and "SE + weighted layer" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["head"] == {"pooling": "weighted", "se": True, "se_ratio": 2}
    assert metrics["attention"]["blur"] == "value" and metrics["main_metric"] == "accuracy"
    cfg = json.loads((out / "model" / "config.json").read_text())
    assert cfg["attnkit_head"]["se"] is True and cfg["attnkit"]["blur_size"] == 5

    assert main(["explain", "--model", str(out), "good movie", "--output", str(tmp_path / "a.svg")]) == 0
    shown = capsys.readouterr().out
    assert "blur on values" in shown and "SE + weighted layer (r=2)" in shown

    chart = tmp_path / "lw.png"
    assert main(["layer-weights", "--model", str(out), "--data-dir", str(data), "--output", str(chart)]) == 0
    w = json.loads(chart.with_suffix(".json").read_text())
    assert len(w["se_mean"]) == 2 and len(w["mix"]) == 2 and chart.stat().st_size > 1000

    assert main(["predict", "--model", str(out), "--split", "test", "--data-dir", str(data), "--output-dir", str(tmp_path / "sub")]) == 0
    lines = (tmp_path / "sub" / "RTE.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 7
    assert all(l.split("\t")[1] in ("entailment", "not_entailment") for l in lines[1:])

    hans = _hans_file(tmp_path / "hans.tsv")
    assert main(["evaluate", "--model", str(out), "--task", "hans", "--data-dir", str(hans), "--output", str(tmp_path / "h.json")]) == 0
    rep = json.loads((tmp_path / "h.json").read_text())
    assert rep["n"] == 5 and set(rep["heuristic"]) == {"lexical_overlap", "subsequence", "constituent"}
    assert rep["model_trained_on"].startswith("GLUE RTE") and (tmp_path / "h.png").stat().st_size > 1000
    assert "HANS accuracy" in capsys.readouterr().out

    # a plain last-layer model has no layer weights: a clear one-line error
    plain = tmp_path / "plain"
    assert main(["train", "--task", "rte", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(plain),
                 "--max-steps", "2", "--batch-size", "8", "--max-length", "24", "--no-heatmap"]) == 0
    capsys.readouterr()
    assert main(["layer-weights", "--model", str(plain), "--data-dir", str(data), "--output", str(tmp_path / "x.png")]) == 2
    assert "no learned layer weights" in capsys.readouterr().err


def test_cli_rejects_bad_blur_size(tmp_path, capsys):
    from attnkit.cli import main

    assert main(["train", "--blur", "context", "--blur-size", "4", "--output-dir", str(tmp_path / "r")]) == 2
    assert "--blur-size 4: expected an odd positive integer" in capsys.readouterr().err


@pytest.mark.slow
def test_cli_regression_task_trains_and_submits(tiny_bert, tmp_path, capsys):
    """STS-B is a regression: one output, MSE loss, Pearson picks the best checkpoint, scores in the submission."""
    import random

    from helpers import WORDS

    from attnkit.cli import main

    rng = random.Random(0)
    head = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"

    def rows(n, labelled=True):
        out = []
        for i in range(n):
            a = rng.sample(WORDS, 5)
            shared = rng.randint(0, 5)
            b = a[:shared] + rng.sample(WORDS, 5 - shared)
            out.append(f"{i}\tg\tf\ty\t{i}\tn\tn\t{' '.join(a)}\t{' '.join(b)}" + (f"\t{shared:.3f}" if labelled else ""))
        return "\n".join(out) + "\n"

    data = tmp_path / "data"
    _write(data / "glue/STS-B/train.tsv", head + rows(48))
    _write(data / "glue/STS-B/dev.tsv", head + rows(16))
    _write(data / "glue/STS-B/test.tsv", head.rsplit("\t", 1)[0] + "\n" + rows(4, labelled=False))
    out = tmp_path / "run"
    assert main(["train", "--task", "stsb", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(out),
                 "--epochs", "2", "--batch-size", "8", "--max-length", "24", "--attention", "sparsemax", "--no-heatmap"]) == 0
    assert "dev pearson" in capsys.readouterr().out
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["main_metric"] == "pearson" and -1 <= metrics["validation"]["pearson"] <= 1
    cfg = json.loads((out / "model" / "config.json").read_text())
    assert cfg["num_labels"] == 1 if "num_labels" in cfg else len(cfg["id2label"]) == 1
    assert cfg["problem_type"] == "regression"
    assert main(["predict", "--model", str(out), "--split", "test", "--data-dir", str(data)]) == 0
    lines = (out / "model" / "glue_submission" / "STS-B.tsv").read_text().splitlines()
    assert len(lines) == 5 and all(0.0 <= float(l.split("\t")[1]) <= 5.0 for l in lines[1:])
    assert main(["evaluate", "--model", str(out), "--data-dir", str(data)]) == 0
    assert "spearman" in capsys.readouterr().out


def test_roberta_family_with_se_and_blur(tiny_roberta):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_roberta)
    model = _classifier(tiny_roberta, AttentionSpec("sparsegen-lin", -1.0, blur="value", blur_size=5, blur_sigma=1.0),
                        HeadSpec("sum-last-four", se=True, se_ratio=1))
    from transformers import RobertaModel

    assert isinstance(model.encoder, RobertaModel)
    assert _padding_gap(model, tok) < 1e-5


def _weights_digest(model_dir: Path) -> str:
    from studies.sesamebert import cells

    return cells.weights_digest(model_dir)  # the digest the benchmark records


def test_paper_sigmas_below_a_third_train_the_very_same_model_as_no_blur(tiny_bert, tiny_task, tmp_path):
    """SesameBERT's sigma grid {0.01, 0.1, 0.3, 0.5}: at 0.01 the float32 kernel is [0, 1, 0] and at 0.1 its tails
    (1.9e-22) vanish when added to anything of ordinary size, so a run with that blur is bit for bit the run without
    it (weights and dev metric); at 0.5 it is not."""
    from attnkit.training.config import TrainConfig
    from attnkit.training.finetune import train

    base = dict(task="csv", data_dir=str(tiny_task), model=str(tiny_bert), attention="softmax", epochs=2, batch_size=16,
                max_length=32, logging_steps=1, seed=5, lr=1e-3)
    runs = {}
    for name, blur, sigma in (("none", "none", 0.3), ("c001", "context", 0.01), ("v01", "value", 0.1), ("c01", "context", 0.1),
                              ("c05", "context", 0.5)):
        m = train(TrainConfig(**base, blur=blur, blur_sigma=sigma, output_dir=str(tmp_path / name)))
        runs[name] = (_weights_digest(tmp_path / name / "model"), m["validation"]["loss"])
    assert runs["c001"] == runs["none"] and runs["v01"] == runs["none"] and runs["c01"] == runs["none"]
    assert runs["c05"][0] != runs["none"][0] and runs["c05"][1] != runs["none"][1]


def test_half_precision_is_blurred_in_float32_and_rounded_once():
    # under bf16 autocast the values and the context are bf16: a narrow kernel's side weights (0.004 at sigma 0.3) would
    # be lost to bf16 rounding at every step; the blur runs in float32 and rounds its result once
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 4).to(torch.bfloat16)
    for sigma in (0.3, 0.5):
        g = gaussian_kernel(3, sigma, dtype=torch.float32)
        out = gaussian_blur(x, g)
        assert out.dtype == torch.bfloat16
        exact = gaussian_blur(x.double(), gaussian_kernel(3, sigma))
        assert torch.equal(out, exact.float().to(torch.bfloat16))  # the float32 result, rounded once
        # the blur's own change (out - x) is much closer to the exact one than bf16 arithmetic gets it
        naive = g.to(torch.bfloat16)[0] * torch.nn.functional.pad(x, (0, 0, 1, 1))[..., 0:9, :] + g.to(torch.bfloat16)[1] * x \
            + g.to(torch.bfloat16)[2] * torch.nn.functional.pad(x, (0, 0, 1, 1))[..., 2:11, :]
        err = lambda y: ((y.double() - x.double()) - (exact - x.double())).abs().mean() / (exact - x.double()).abs().mean()
        assert err(out) < err(naive)
    # the identity kernel stays the identity in half precision: no blur, bit for bit
    assert torch.equal(gaussian_blur(x, gaussian_kernel(3, 0.1, dtype=torch.float32)), x)


def test_initial_se_weights_are_those_of_the_model_a_run_starts_from(tiny_bert, tiny_task, tmp_path):
    """Figure 4 sets the SE weights of each trained run beside those of the model it started from: rebuilt the way
    train() seeds and builds it, its SE weights are those of a run whose steps are below float32's resolution (lr 1e-30)."""
    import types

    from attnkit.training.finetune import train
    from studies.sesamebert import cells as mod
    a = types.SimpleNamespace(work_dir=str(tmp_path), data_dir=str(tiny_task), model=str(tiny_bert), epochs=1, batch_size=16, lr=1e-30,
                              max_length=32, train_subset={}, holdout=0.0, precision="fp32")
    cfg = mod.cell_config("csv", "weighted|SE+blur", "context", 0.5, 7, a, pooling="weighted", se=True)
    train(cfg)
    frozen = mod.se_weights(Path(cfg.output_dir), "csv", a)
    assert mod.initial_se_weights(cfg) == frozen
    moved = mod.cell_config("csv", "weighted|SE+blur", "context", 0.5, 8, a, pooling="weighted", se=True)
    assert mod.initial_se_weights(moved) != frozen  # another seed, another initial SE layer: the check can fail


def test_a_huge_blur_sigma_is_the_uniform_blur_not_an_overflow():
    """`--blur-sigma 1e300` passed the finite > 0 check, then overflowed squaring it (an internal error: sweep
    2026-11-28t CD): the kernel is the uniform limit, and a model with it runs."""
    from attnkit.attention.spec import AttentionSpec

    assert torch.equal(gaussian_kernel(3, 1e300), torch.full((3,), 1 / 3, dtype=torch.float64))
    assert torch.allclose(gaussian_kernel(5, 1e6), torch.full((5,), 0.2, dtype=torch.float64))
    k = AttentionSpec("sparsemax", blur="context", blur_sigma=1e300).kernel(torch.float32)
    assert torch.allclose(k.flatten(), torch.full((3,), 1 / 3))
