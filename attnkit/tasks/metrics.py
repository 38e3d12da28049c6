"""Metrics of every classification task, by kind: accuracy (+ macro-F1), mcc (CoLA), f1 (MRPC, QQP), regression (STS-B)."""

from __future__ import annotations

import numpy as np

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

        p = float(pearsonr(predictions, labels)[0]) if np.std(predictions) > 0 else 0.0
        s = float(spearmanr(predictions, labels)[0]) if np.std(predictions) > 0 else 0.0
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
