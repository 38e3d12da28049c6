"""Metrics of every classification task, by kind: accuracy (+ macro-F1), mcc (CoLA), f1 (MRPC, QQP), regression (STS-B)."""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger("attnkit")

#: metric kind -> the metric that picks the best checkpoint
MAIN_METRIC = {"accuracy": "accuracy", "mcc": "mcc", "f1": "f1", "regression": "pearson"}


def task_metrics(kind: str, labels: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    """GLUE metrics by kind: ``accuracy`` (+ macro-F1), ``mcc`` (CoLA), ``f1`` (MRPC, QQP), ``regression`` (STS-B).

    ``predictions`` are class ids, or scores for ``regression``.
    """
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    labels = np.asarray(labels)
    predictions = np.asarray(predictions)
    if kind == "regression":
        from scipy.stats import pearsonr, spearmanr

        flat = [name for name, x in (("predictions", predictions), ("gold scores", labels)) if not np.std(x) > 0]
        if flat:  # a correlation with a constant is undefined: 0 (no linear relation), said, and marked in the metrics
            log.warning("all %d %s are one value: pearson and spearman are undefined and reported as 0",
                        len(labels), " and ".join(flat))
            return {"pearson": 0.0, "spearman": 0.0, "corr": 0.0, "undefined_correlation": 1.0}
        p, s = float(pearsonr(predictions, labels)[0]), float(spearmanr(predictions, labels)[0])
        return {"pearson": p, "spearman": s, "corr": (p + s) / 2}
    out = {"accuracy": float(accuracy_score(labels, predictions))}
    if kind == "mcc":
        out["mcc"] = float(matthews_corrcoef(labels, predictions))
    elif kind == "f1":
        out["f1"] = float(f1_score(labels, predictions, pos_label=1, average="binary"))
        out["acc_and_f1"] = (out["accuracy"] + out["f1"]) / 2
    else:
        out["macro_f1"] = float(f1_score(labels, predictions, average="macro"))
    return out


def predictions_of(kind: str, logits: np.ndarray) -> np.ndarray:
    """Class ids (argmax) or, for regression, the single output."""
    logits = np.asarray(logits)
    if kind == "regression":
        return logits.reshape(len(logits), -1)[:, 0]
    return logits.argmax(-1)
