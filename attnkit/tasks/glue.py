"""GLUE tasks, MNLI, HANS and SciTail: loaders, the HANS report and the GLUE submission format.

Files are read from ``<data_dir>/glue/<TASK>/{train,dev,test}.tsv`` as written by the GLUE
download script (MNLI: ``dev_matched.tsv``/``dev_mismatched.tsv``/``test_matched.tsv``...).
A task whose train file is missing still loads its other splits (QNLI here has dev/test only),
so a trained model can be evaluated on it; ``attnkit train`` then says which file is missing.

Sentence pairs are kept as ``text`` + ``text_pair`` and encoded as pairs. Every split keeps
the file's ``idx`` so that ``attnkit predict --split test`` can write GLUE submission files.

MNLI train is not available in this project's data, only dev-matched (``mnli/dev_matched_mccoy.tsv``).
The task ``mnli-devsplit`` splits it, by a hash of each row's index, into train (80%),
validation (10%) and test (10%); results trained on it are labelled so. ``mnli`` reads the
full GLUE layout when it is there.
"""

from __future__ import annotations

import csv
import hashlib
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from attnkit.errors import DataFormatError, UserError
from attnkit.runfiles.json_files import path_problem
from attnkit.runfiles.atomic import write_text_atomic
from attnkit.tasks.readers import (
    check_columns,
    label_index,
    read_delimited,
    read_jsonl,
    require_dir,
    to_splits,
)
from attnkit.tasks.registry import SPLIT_STEMS, Example, TaskData, register_task

NLI3 = ["entailment", "neutral", "contradiction"]
NLI2 = ["entailment", "not_entailment"]


# ----------------------------------------------------------------------------- GLUE tables


@dataclass(frozen=True)
class GlueTask:
    name: str  # attnkit task name
    folder: str  # under <data_dir>/glue/
    text: str  # header name of the first text column
    pair: str | None  # header name of the second, or None
    label: str | None  # header name of the label column
    labels: list[str] | None  # label names in file spelling (None: regression)
    metric: str
    submission: dict[str, str]  # split -> GLUE submission file name
    files: dict[str, str] = field(default_factory=lambda: {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"})
    label_names: list[str] | None = None  # names shown to users, if not the file's
    score_range: tuple[float, float] | None = None  # a regression task's scale (STS-B: 0 to 5)


GLUE: dict[str, GlueTask] = {
    t.name: t
    for t in [
        GlueTask("cola", "CoLA", "sentence", None, "label", ["0", "1"], "mcc", {"test": "CoLA.tsv"}, label_names=["unacceptable", "acceptable"]),
        GlueTask("mrpc", "MRPC", "#1 String", "#2 String", "Quality", ["0", "1"], "f1", {"test": "MRPC.tsv"}, label_names=["not_equivalent", "equivalent"]),
        GlueTask("stsb", "STS-B", "sentence1", "sentence2", "score", None, "regression", {"test": "STS-B.tsv"}, score_range=(0.0, 5.0)),
        GlueTask("qnli", "QNLI", "question", "sentence", "label", NLI2, "accuracy", {"test": "QNLI.tsv"}),
        GlueTask("rte", "RTE", "sentence1", "sentence2", "label", NLI2, "accuracy", {"test": "RTE.tsv"}),
        GlueTask("wnli", "WNLI", "sentence1", "sentence2", "label", ["0", "1"], "accuracy", {"test": "WNLI.tsv"}, label_names=["not_entailment", "entailment"]),
        GlueTask("qqp", "QQP", "question1", "question2", "is_duplicate", ["0", "1"], "f1", {"test": "QQP.tsv"}, label_names=["not_duplicate", "duplicate"]),
        GlueTask(
            "mnli", "MNLI", "sentence1", "sentence2", "gold_label", NLI3, "accuracy",
            {"test": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"},
            files={"train": "train.tsv", "validation": "dev_matched.tsv", "validation_mismatched": "dev_mismatched.tsv",
                   "test": "test_matched.tsv", "test_mismatched": "test_mismatched.tsv"},
        ),
    ]
}
#: CoLA's train/dev files have no header: source, label, original label, sentence
_COLA_COLUMNS = ["source", "label", "orig_label", "sentence"]


def _rows(path: Path, task: GlueTask) -> dict[str, list]:
    records = read_delimited(path, "\t", csv.QUOTE_NONE)
    first = next(records, None)
    if first is None:
        raise DataFormatError(path, None, "expected a GLUE tsv file, found an empty file")
    line, fields = first
    if task.name == "cola" and [f.strip() for f in fields][:2] != ["index", "sentence"]:
        header = _COLA_COLUMNS
        records = iter([(line, fields), *records])
    else:
        header = [f.strip().lstrip("\ufeff") for f in fields]
    need = [task.text] + ([task.pair] if task.pair else [])
    for col in need:
        if col not in header:
            raise DataFormatError(path, line, f"expected a column {col!r} for {task.name}, found the header {header}")
    labelled = task.label is not None and task.label in header
    idx_col = "index" if "index" in header else ("id" if "id" in header else None)
    out: dict[str, list] = {"text": [], "label": [], "idx": []}
    if task.pair:
        out["text_pair"] = []
    ti, pi = header.index(task.text), header.index(task.pair) if task.pair else None
    li = header.index(task.label) if labelled else None
    for n, (line, fields) in enumerate(records):
        if len(fields) != len(header):  # more: a tab inside a text, which would be cut there without a word
            raise DataFormatError(path, line, f"expected {len(header)} tab-separated fields ({', '.join(header)}), found "
                                  f"{len(fields)}" + (" (a tab inside a text? GLUE's files have none: replace it by a space)"
                                                      if len(fields) > len(header) else ""))
        for col, i in ((task.text, ti), (task.pair, pi)):
            if i is not None and not fields[i].strip():  # a model would read [CLS] [SEP] (a pair: one side alone)
                raise DataFormatError(path, line, f"expected a text in column {col!r}, found an empty field"
                                      + (" (a pair needs both texts)" if task.pair else "") + ": fill it or remove the row")
        out["text"].append(fields[ti].strip())
        if pi is not None:
            out["text_pair"].append(fields[pi].strip())
        if li is None:
            out["label"].append(-1.0 if task.labels is None else -1)
        elif task.labels is None:
            try:
                score = float(fields[li])
            except ValueError:
                score = None
            if score is None or not math.isfinite(score):  # nan, inf, 1e400: no score a correlation or a loss can use
                raise DataFormatError(path, line, f"expected a finite number in column {task.label!r}, found {fields[li]!r}")
            if task.score_range and not task.score_range[0] <= score <= task.score_range[1]:
                raise DataFormatError(path, line, f"expected a score from {task.score_range[0]:g} to {task.score_range[1]:g} "
                                      f"in column {task.label!r} ({task.name}'s similarity scale), found {fields[li]!r}")
            out["label"].append(score)
        else:
            value = fields[li].strip()
            if value not in task.labels:
                hint = (f" (CoLA's train and dev files have no header row: remove line {line})"
                        if task.name == "cola" and header is _COLA_COLUMNS and n == 0 and value == "label" else "")
                raise DataFormatError(path, line, f"unknown label {value!r} in column {task.label!r}, expected one of "
                                      f"{task.labels}{hint}")
            out["label"].append(task.labels.index(value))
        idx = fields[header.index(idx_col)].strip() if idx_col else str(n)
        out["idx"].append(int(idx) if idx.isdigit() else n)
    return out


def _dataset(columns: dict[str, list], regression: bool):
    import datasets

    feats = {"text": datasets.Value("string")}
    if "text_pair" in columns:
        feats["text_pair"] = datasets.Value("string")
    feats["label"] = datasets.Value("float32" if regression else "int64")
    feats["idx"] = datasets.Value("int64")
    return datasets.Dataset.from_dict({k: columns[k] for k in feats}, features=datasets.Features(feats))


def load_glue(task_name: str, data_dir: Path | None) -> TaskData:
    import datasets

    task = GLUE[task_name]
    folder = require_dir(data_dir, f"glue/{task.folder}", task_name)
    splits = {}
    for split, fname in task.files.items():
        path = folder / fname
        if path.is_file():
            splits[split] = _dataset(_rows(path, task), task.labels is None)
    if not splits:
        raise FileNotFoundError(f"task {task_name}: none of {', '.join(task.files.values())} is in {folder}")
    names = task.label_names or task.labels or ["score"]
    return TaskData(task_name, datasets.DatasetDict(splits), list(names), f"GLUE {task.folder} ({', '.join(splits)})",
                    metric=task.metric, submission=dict(task.submission))


def _make_loader(name: str):
    def loader(data_dir: Path | None) -> TaskData:
        return load_glue(name, data_dir)

    loader.__name__ = f"load_{name}"
    loader.__doc__ = f"GLUE {GLUE[name].folder} from glue/{GLUE[name].folder}/ ({GLUE[name].metric})"
    return loader


for _name in GLUE:
    register_task(_name, f"glue/{GLUE[_name].folder}")(_make_loader(_name))


# ----------------------------------------------------------------------------- MNLI dev-matched split


def mnli_devsplit_of(index: str) -> str:
    """train (80%) / validation (10%) / test (10%) by the md5 of the row's GLUE index."""
    h = int(hashlib.md5(index.encode()).hexdigest(), 16) % 10
    return "test" if h == 0 else "validation" if h == 1 else "train"


@register_task("mnli-devsplit", "mnli")
def load_mnli_devsplit(data_dir: Path | None) -> TaskData:
    """MNLI dev-matched (mnli/dev_matched_mccoy.tsv) split 80/10/10 by md5(index): MNLI train is not available here."""
    import datasets

    folder = require_dir(data_dir, "mnli", "mnli-devsplit")
    path = folder / "dev_matched_mccoy.tsv"
    if not path.is_file():
        raise FileNotFoundError(f"task mnli-devsplit needs {path}")
    records = read_delimited(path, "\t", csv.QUOTE_NONE)
    line, header = next(records, (1, []))
    header = [h.strip() for h in header]
    for col in ("index", "premise", "hypothesis", "gold_label"):
        if col not in header:
            raise DataFormatError(path, line, f"expected a column {col!r}, found the header {header}")
    cols = {s: {"text": [], "text_pair": [], "label": [], "idx": []} for s in ("train", "validation", "test")}
    for line, f in records:
        if len(f) < 4:
            raise DataFormatError(path, line, f"expected {len(header)} tab-separated fields, found {len(f)}")
        gold = f[header.index("gold_label")].strip()
        if gold not in NLI3:
            raise DataFormatError(path, line, f"unknown gold_label {gold!r}, expected one of {NLI3}")
        index = f[header.index("index")].strip()
        c = cols[mnli_devsplit_of(index)]
        c["text"].append(f[header.index("premise")].strip())
        c["text_pair"].append(f[header.index("hypothesis")].strip())
        c["label"].append(NLI3.index(gold))
        c["idx"].append(int(index) if index.isdigit() else len(c["idx"]))
    splits = datasets.DatasetDict({s: _dataset(c, False) for s, c in cols.items()})
    return TaskData("mnli-devsplit", splits, list(NLI3), "MNLI dev-matched split 80/10/10 by md5(index) (MNLI train is not available)")


# ----------------------------------------------------------------------------- GLUE submission files


def write_submission(task: TaskData, split: str, predictions: np.ndarray, idx: list[int], out_dir: str | Path) -> Path:
    """``<out_dir>/<TASK>.tsv`` with ``index<TAB>prediction`` rows, in the GLUE server's format (written atomically:
    a failed write leaves an earlier file as it was and names the file)."""
    fname = (getattr(task, "submission", None) or {}).get(split)
    if fname is None:
        raise UserError(f"task {task.name} has no GLUE submission file for split {split!r}")
    path = Path(out_dir) / fname
    gt = GLUE.get(task.name)
    lines = ["index\tprediction"]
    for i, p in zip(idx, predictions):
        if task.metric == "regression":
            value = f"{min(5.0, max(0.0, float(p))):.3f}"
        elif gt is not None and gt.labels is not None and gt.label_names is None:
            value = gt.labels[int(p)]  # NLI tasks: label names
        else:
            value = str(int(p))  # CoLA, SST-2, MRPC, QQP, WNLI: 0/1
        lines.append(f"{i}\t{value}")
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path


# ----------------------------------------------------------------------------- HANS

HANS_FILE = "hans/heuristics_evaluation_set_noparse.tsv"
HANS_LABELS = ["entailment", "non-entailment"]


def read_hans(path: str | Path) -> dict[str, list]:
    """HANS rows (noparse or the original format with parse columns): text, text_pair, label, heuristic, subcase."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"HANS file {path} {path_problem(path) or 'is not a regular file'} (expected {HANS_FILE} under the data folder)")
    records = read_delimited(path, "\t", csv.QUOTE_NONE)
    line, header = next(records, (1, []))
    header = [h.strip() for h in header]
    for col in ("gold_label", "sentence1", "sentence2", "heuristic", "subcase"):
        if col not in header:
            raise DataFormatError(path, line, f"expected a HANS column {col!r}, found the header {header}")
    check_columns(path, line, header, ["gold_label", "sentence1", "sentence2", "heuristic", "subcase"])
    ix = {c: header.index(c) for c in ("gold_label", "sentence1", "sentence2", "heuristic", "subcase")}
    out: dict[str, list] = {"text": [], "text_pair": [], "label": [], "heuristic": [], "subcase": []}
    gold_of: dict[str, tuple[str, int]] = {}  # subcase -> (its gold label, the line that first gave it)
    for line, f in records:
        if len(f) != len(header):  # more: a tab inside a sentence, the columns after it shifted
            raise DataFormatError(path, line, f"expected {len(header)} tab-separated fields, found {len(f)}")
        for col in ("sentence1", "sentence2"):
            if not f[ix[col]].strip():
                raise DataFormatError(path, line, f"expected a text in column {col!r}, found an empty field (a pair "
                                      "needs both texts): fill it or remove the row")
        for col in ("heuristic", "subcase"):  # the report's rows: an empty one would be a group of its own
            if not f[ix[col]].strip():
                raise DataFormatError(path, line, f"expected a HANS {col} in column {col!r}, found an empty field")
        gold = f[ix["gold_label"]].strip()
        if gold not in HANS_LABELS:
            raise DataFormatError(path, line, f"unknown gold_label {gold!r}, expected one of {HANS_LABELS}")
        first = gold_of.setdefault(f[ix["subcase"]].strip(), (gold, line))
        if first[0] != gold:  # each HANS subcase has one gold label, under which the report lists it
            raise DataFormatError(path, line, f"subcase {f[ix['subcase']].strip()!r} has gold_label {gold!r} here and "
                                  f"{first[0]!r} on line {first[1]}: expected one gold label per subcase")
        out["text"].append(f[ix["sentence1"]].strip())
        out["text_pair"].append(f[ix["sentence2"]].strip())
        out["label"].append(HANS_LABELS.index(gold))
        out["heuristic"].append(f[ix["heuristic"]].strip())
        out["subcase"].append(f[ix["subcase"]].strip())
    if not out["label"]:
        raise DataFormatError(path, None, "expected at least one HANS row under the header, found none")
    return out


def hans_subset(rows: dict[str, list], per_subcase: int | None) -> dict[str, list]:
    """The first ``per_subcase`` rows of every subcase (all rows if None)."""
    if not per_subcase:
        return rows
    seen: dict[str, int] = {}
    keep = []
    for i, s in enumerate(rows["subcase"]):
        if seen.get(s, 0) < per_subcase:
            keep.append(i)
            seen[s] = seen.get(s, 0) + 1
    return {k: [v[i] for i in keep] for k, v in rows.items()}


def entailment_index(label_names: list[str]) -> int:
    """Which output of an NLI model means entailment; every other output is non-entailment."""
    names = [str(n).lower() for n in label_names]
    if "entailment" not in names:
        raise UserError(f"HANS needs an NLI model with an 'entailment' label; this model predicts {label_names}")
    return names.index("entailment")


def hans_report(rows: dict[str, list], predicted_entailment: np.ndarray) -> dict[str, Any]:
    """Accuracy overall, per heuristic x gold label, and per subcase (non-entailment = neutral or contradiction)."""
    gold = np.asarray(rows["label"]) == 0  # True = entailment
    pred = np.asarray(predicted_entailment, dtype=bool)
    correct = gold == pred
    heur = np.asarray(rows["heuristic"])
    sub = np.asarray(rows["subcase"])
    report: dict[str, Any] = {"n": int(len(gold)), "accuracy": float(correct.mean()), "heuristic": {}, "subcase": {}}
    for h in sorted(set(heur)):
        report["heuristic"][h] = {}
        for g, name in ((True, "entailment"), (False, "non-entailment")):
            m = (heur == h) & (gold == g)
            if m.any():
                report["heuristic"][h][name] = float(correct[m].mean())
    for s in sorted(set(sub)):
        m = sub == s
        report["subcase"][s] = {"accuracy": float(correct[m].mean()), "gold": "entailment" if gold[m][0] else "non-entailment",
                                "heuristic": str(heur[m][0]), "n": int(m.sum())}
    report["predicted_entailment_rate"] = float(pred.mean())
    return report


# ----------------------------------------------------------------------------- SciTail (the SSAF paper's NLI set)

SCITAIL_LABELS = ["entails", "neutral"]
_SCITAIL_JSON_LABELS = {"entailment": "entails", "entails": "entails", "neutral": "neutral"}


def _read_scitail_tsv(path: Path) -> list[Example]:
    """``tsv_format/scitail_1.0_<split>.tsv``: premise, hypothesis, label (entails | neutral); no header."""
    rows: list[Example] = []
    for line, fields in read_delimited(path, "\t"):
        if len(fields) != 3:
            raise DataFormatError(path, line, f"expected 3 tab-separated fields (premise, hypothesis, label), found {len(fields)}")
        premise, hypothesis, label = (f.strip() for f in fields)
        if not premise or not hypothesis:
            raise DataFormatError(path, line, "expected a premise and a hypothesis, found an empty field")
        rows.append(Example(premise, label_index(SCITAIL_LABELS, label, path, line), hypothesis))
    return rows


def _read_scitail_jsonl(path: Path) -> list[Example]:
    """``snli_format/scitail_1.0_<split>.txt``: JSON lines with sentence1, sentence2 and gold_label."""
    rows: list[Example] = []
    for line, rec in read_jsonl(path):
        missing = [k for k in ("sentence1", "sentence2", "gold_label") if not isinstance(rec.get(k), str) or not rec[k].strip()]
        if missing:
            raise DataFormatError(path, line, f"expected the text fields sentence1, sentence2 and gold_label; missing or empty: {', '.join(missing)}")
        label = _SCITAIL_JSON_LABELS.get(rec["gold_label"].strip())
        if label is None:
            raise DataFormatError(path, line, f"unknown gold_label {rec['gold_label']!r}, expected entailment or neutral")
        rows.append(Example(rec["sentence1"].strip(), SCITAIL_LABELS.index(label), rec["sentence2"].strip()))
    return rows


@register_task("scitail", "SciTailV1.1")
def load_scitail(data_dir: Path | None) -> TaskData:
    """SciTail v1.1 as its zip unpacks (``SciTailV1.1/``): the tsv_format files, else the snli_format JSON lines."""
    folder = require_dir(data_dir, "SciTailV1.1", "scitail")
    tsv, snli = folder / "tsv_format", folder / "snli_format"
    splits, used = {}, set()
    for split, stem in SPLIT_STEMS.items():
        if (tsv / f"scitail_1.0_{stem}.tsv").is_file():
            splits[split] = _read_scitail_tsv(tsv / f"scitail_1.0_{stem}.tsv")
            used.add("tsv_format")
        elif (snli / f"scitail_1.0_{stem}.txt").is_file():
            splits[split] = _read_scitail_jsonl(snli / f"scitail_1.0_{stem}.txt")
            used.add("snli_format")
    if not splits:
        raise FileNotFoundError(f"task scitail: no tsv_format/scitail_1.0_{{train,dev,test}}.tsv nor snli_format/scitail_1.0_*.txt in {folder}")
    return TaskData("scitail", to_splits(splits, with_pair=True), list(SCITAIL_LABELS),
                    f"SciTail v1.1 ({', '.join(sorted(used))}: {', '.join(splits)}), premise/hypothesis pairs, entails vs neutral")
