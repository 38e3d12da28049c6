"""transformers' pipelines take attnkit models without a 'not supported' log."""

import logging

import pytest
import torch


@pytest.mark.slow
def test_the_pipeline_takes_an_attnkit_model_without_a_not_supported_log(tiny_bert, tmp_path):
    import transformers
    from transformers import pipeline

    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.build import build_classifier
    from attnkit.models.checkpoint import load_tokenizer, save_checkpoint

    model = build_classifier(tiny_bert, 2, AttentionSpec("sparsemax"), label_names=["negative", "positive"]).eval()
    tok = load_tokenizer(str(tiny_bert))
    d = save_checkpoint(model, tmp_path / "m", tok)
    records = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append
    hf_logger = logging.getLogger("transformers")
    level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_warning()
    hf_logger.addHandler(handler)
    try:
        clf = pipeline("text-classification", model=str(d), tokenizer=str(d))
        got = clf("a good film")[0]
    finally:
        hf_logger.removeHandler(handler)
        transformers.logging.set_verbosity(level)
    said = [r.getMessage() for r in records]
    assert not [m for m in said if "not supported" in m], said
    with torch.no_grad():
        probs = model(**tok("a good film", return_tensors="pt")).logits.softmax(-1)[0]
    assert got["label"] == ["negative", "positive"][int(probs.argmax())]
    assert got["score"] == pytest.approx(float(probs.max()), abs=1e-5)
