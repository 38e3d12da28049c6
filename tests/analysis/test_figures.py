"""Figures never fail a finished run: one that cannot be drawn is skipped with a warning, and a figure output that is
not png or svg is refused before the model loads."""

import pytest

from attnkit.cli import main
from helpers import write_run_record

pytestmark = pytest.mark.slow


def test_a_figure_that_cannot_be_drawn_does_not_fail_a_finished_run(tmp_path, monkeypatch, caplog):
    import attnkit.training.trainer as runs
    from attnkit.training.config import TrainConfig

    def broken(*a, **k):
        raise RuntimeError("no backend")

    monkeypatch.setattr(runs, "plot_curves", broken)
    (tmp_path / "checkpoint-4").mkdir()
    write_run_record(tmp_path, "checkpoint-4")  # the run wrote it (its record says so)
    with caplog.at_level("WARNING", logger="attnkit"):
        runs.finish_run(TrainConfig(output_dir=str(tmp_path)), tmp_path, [], "accuracy", title="t")
    assert not (tmp_path / "checkpoint-4").exists()  # the checkpoints go all the same
    assert f"could not draw {tmp_path / 'curves.png'}: RuntimeError: no backend" in caplog.text


@pytest.mark.parametrize("cmd,flag", [(["explain", "a film"], "--output"), (["layer-weights"], "--output"),
                                      (["words"], "--output"), (["evaluate", "--task", "hans"], "--plot")])
def test_a_figure_output_that_is_not_png_or_svg_is_refused_before_the_model_loads(cmd, flag, tiny_bert, tmp_path, capsys):
    # a bare encoder, which these commands would refuse once loaded: the figure's suffix is checked first
    assert main([*cmd, "--model", str(tiny_bert), flag, str(tmp_path / "a.pdf")]) == 2
    err = capsys.readouterr().err
    assert f"{flag} {tmp_path / 'a.pdf'}: the" in err and "file must end in .png or .svg" in err


def test_plot_hans_refuses_a_file_that_is_not_png_or_svg(tmp_path):
    from attnkit.analysis.explain import plot_hans

    report = {"n": 2, "accuracy": 0.5, "heuristic": {"lexical_overlap": {"entailment": 1.0, "non-entailment": 0.0}}}
    with pytest.raises(ValueError, match=r"HANS plot file must end in \.png or \.svg, got 'h\.pdf'"):
        plot_hans(report, tmp_path / "h.pdf")
    assert not (tmp_path / "h.pdf").exists()
    assert plot_hans(report, tmp_path / "h.svg").stat().st_size > 0




def test_the_rationale_is_the_words_cls_attends_to_in_the_last_sparse_layer():
    import numpy as np

    from attnkit.analysis.explain import AttentionMaps

    tokens = ["[CLS]", "a", "gor", "##geous", "film", "[SEP]"]
    w = np.full((2, 2, 6, 6), 1 / 6)  # layer 0: softmax-like, no zero
    w[1, :, 0] = 0.0
    w[1, 0, 0, [0, 3]] = 0.5  # head 0: [CLS] and "##geous"
    w[1, 1, 0, [4, 5]] = 0.5  # head 1: "film" and [SEP]
    maps = AttentionMaps(tokens, w, "sparsemax")
    assert maps.rationale() == (1, ["gorgeous", "film"], 3)  # a word is in it when one of its pieces is
    # one head's own row where explain --head names it (its line said "mean over heads" then: sweep 2026-11-28u)
    assert maps.rationale(head=0) == (1, ["gorgeous"], 3) and maps.rationale(head=1) == (1, ["film"], 3)
    dense = AttentionMaps(tokens, np.full((2, 2, 6, 6), 1 / 6), "softmax")
    assert dense.rationale() is None


def test_explain_prints_a_sparse_models_rationale(tiny_bert, tmp_path, capsys):
    import torch

    from attnkit.attention.spec import AttentionSpec
    from attnkit.cli import main
    from attnkit.models.build import build_classifier
    from attnkit.models.checkpoint import load_tokenizer, save_checkpoint

    torch.manual_seed(0)
    net = build_classifier(str(tiny_bert), 2, AttentionSpec("sparsemax"), label_names=["negative", "positive"])
    with torch.no_grad():  # sharper scores than a random init gives: a sparse [CLS] row, as a trained model's
        for layer in net.bert.encoder.layer:
            layer.attention.self.query.weight.mul_(1000)
    model = save_checkpoint(net, tmp_path / "m", tokenizer=load_tokenizer(str(tiny_bert)), extra={"task": "csv", "max_length": 16})
    assert main(["explain", "--model", str(model or tmp_path / "m"), "--output", str(tmp_path / "a.png"), "a good and fun film"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("rationale"))
    words = line.split(": ", 1)[1].split()
    assert "of 5 words" in line and words and set(words) <= {"a", "good", "and", "fun", "film"}
    assert main(["explain", "--model", str(tmp_path / "m"), "--head", "0", "--output", str(tmp_path / "h.png"),
                 "a good and fun film"]) == 0
    line = next(l for l in capsys.readouterr().out.splitlines() if l.startswith("rationale"))
    assert ", head 0;" in line and "mean over heads" not in line
