"""Extractive (span) question answering: SQuAD v1.1 with any attention spec.

The SSAF paper fine-tunes sparsegen-lin BERT on SQuAD v1.1 (lam -7, 2 epochs, EM/F1).
Here: a SQuAD-format reader with errors that name the file and the question, the usual
sliding-window features (question + a window of the context, windows overlapping by
``doc_stride`` tokens, answer start/end token labels, [CLS] when the answer is not in
the window), the best-span decoding over all windows of a question, and the official v1.1
EM/F1. Training is :mod:`attnkit.training.span_qa`.

Data (``--task squad``): ``<data-dir>/squad_v1.1/`` (or ``<data-dir>`` itself) holding
``dev-v1.1.json`` (validation) and a train file: ``train-v1.1.json``, else the Du et al.
(2017) subset ``train-v1.1-subset-du2017test.json``. Without a data folder, the SQuAD
dataset is read from the Hugging Face hub (``rajpurkar/squad``; needs a connection).
"""

from __future__ import annotations

import logging
import os
import re
import string
from collections import Counter
from pathlib import Path
from typing import Sequence

from attnkit.errors import DataFormatError, UserError
from attnkit.runfiles.json_files import path_problem, read_json
from attnkit.runfiles.names import WRITTEN_BY
from attnkit.tasks.controls import joined_by_controls, say_control
from attnkit.tasks.registry import default_data_dir

log = logging.getLogger("attnkit")

QA_TASKS = {"squad": "SQuAD v1.1 (span QA; EM/F1)"}
SQUAD_FOLDER = "squad_v1.1"
SQUAD_DEV = "dev-v1.1.json"
SQUAD_TRAIN = ("train-v1.1.json", "train-v1.1-subset-du2017test.json")
HUB_NAME = "rajpurkar/squad"
MAX_ANSWER_TOKENS = 30
N_BEST = 20


def is_qa_task(task: str | None) -> bool:
    return task in QA_TASKS


# ----------------------------------------------------------------------------- reading


def _field(obj, key: str, kind, where: str):
    if not isinstance(obj, dict) or key not in obj:
        raise DataFormatError(where[0], None, f"{where[1]}: missing field {key!r}")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool):
        want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise DataFormatError(where[0], None, f"{where[1]}: field {key!r} should be {want}, found {type(value).__name__}")
    return value


def read_squad(path: str | os.PathLike) -> list[dict]:
    """Questions of a SQuAD v1.1 JSON file: id, title, context, question, answers{text, answer_start}.

    Raises :class:`DataFormatError` naming the file and the article/paragraph/question
    when the structure is wrong or an answer is not where ``answer_start`` says.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"SQuAD file {path} {path_problem(path) or 'is not a regular file'}")
    raw = read_json(path, "a SQuAD file", expect=None)
    if not isinstance(raw, dict) or not isinstance(raw.get("data"), list):
        raise DataFormatError(path, None, "expected a SQuAD file: a JSON object with a 'data' list of articles")
    rows: list[dict] = []
    seen: dict[str, str] = {}  # question id -> where it was first given
    for ai, art in enumerate(raw["data"]):
        paragraphs = _field(art, "paragraphs", list, (path, f"data[{ai}]"))
        title = art.get("title", "") if isinstance(art, dict) else ""
        for pi, par in enumerate(paragraphs):
            where = (path, f"data[{ai}].paragraphs[{pi}]")
            context = _field(par, "context", str, where)
            for qi, qa in enumerate(_field(par, "qas", list, where)):
                qwhere = (path, f"{where[1]}.qas[{qi}]")
                qid = str(_field(qa, "id", (str, int), qwhere))
                if qid in seen:  # the answers are keyed by id: one question would be scored with another's answer
                    raise DataFormatError(path, None, f"{qwhere[1]}: question id {qid!r} is also the id of {seen[qid]}: "
                                          "expected each question's own id")
                if qid == WRITTEN_BY:
                    raise DataFormatError(path, None, f"{qwhere[1]}: question id {qid!r} is the key attnkit marks its "
                                          "answers files with: give the question another id")
                seen[qid] = qwhere[1]
                qwhere = (path, f"{qwhere[1]} (id {qid})")
                question = _field(qa, "question", str, qwhere)
                if not question.strip():
                    raise DataFormatError(path, None, f"{qwhere[1]}: expected a question, found "
                                          f"{'an empty one' if not question else 'only spaces'}")
                texts, starts = [], []
                for k, ans in enumerate(_field(qa, "answers", list, qwhere)):
                    awhere = (path, f"{qwhere[1]} answer {k}")
                    text = _field(ans, "text", str, awhere)
                    if not text.strip():  # (it scores every prediction 0 F1, or an empty one 100)
                        raise DataFormatError(path, None, f"{awhere[1]}: expected an answer's text, found "
                                              f"{'an empty one' if not text else 'only spaces'}")
                    start = _field(ans, "answer_start", int, awhere)
                    if start < 0 or context[start : start + len(text)] != text:
                        found = context[max(start, 0) : max(start, 0) + len(text)]
                        raise DataFormatError(path, None, f"{awhere[1]}: answer {text!r} is not at answer_start {start} of its context (found {found!r})")
                    texts.append(text)
                    starts.append(start)
                rows.append({"id": qid, "title": str(title), "context": context, "question": question,
                             "answers": {"text": texts, "answer_start": starts}})
    if not rows:
        raise DataFormatError(path, None, "no questions found")
    return rows


def squad_files(data_dir: str | os.PathLike | None) -> dict[str, Path]:
    """split -> file for ``--task squad`` under ``data_dir`` (its squad_v1.1/ folder or itself)."""
    root = Path(data_dir)
    folder = root / SQUAD_FOLDER if (root / SQUAD_FOLDER).is_dir() else root
    files = {}
    train = next((folder / n for n in SQUAD_TRAIN if (folder / n).is_file()), None)
    if train is not None:
        files["train"] = train
    if (folder / SQUAD_DEV).is_file():
        files["validation"] = folder / SQUAD_DEV
    if not files:
        raise FileNotFoundError(f"task squad: no {SQUAD_DEV} or {' / '.join(SQUAD_TRAIN)} in {folder}")
    return files


def load_squad(data_dir: str | os.PathLike | None = None):
    """SQuAD v1.1 as a ``datasets.DatasetDict`` (train, validation) from local files or the hub."""
    import datasets

    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    if directory is None:  # no local data: the hub (online users)
        log.warning("task squad: no data folder; loading %s from the Hugging Face hub", HUB_NAME)
        ds = datasets.load_dataset(HUB_NAME)
        return datasets.DatasetDict({k: ds[k].select_columns(["id", "title", "context", "question", "answers"]) for k in ds})
    return datasets.DatasetDict({split: datasets.Dataset.from_list(read_squad(f)) for split, f in squad_files(directory).items()})


# ----------------------------------------------------------------------------- metrics (official v1.1 script)


def normalize_answer(s: str) -> str:
    """Lower case, drop punctuation, the articles a/an/the, and extra white space."""
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    s = re.sub(r"\b(a|an|the)\b", " ", s)
    return " ".join(s.split())


def token_f1(prediction: str, truth: str) -> float:
    pred, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    same = sum((Counter(pred) & Counter(gold)).values())
    if same == 0:
        return 0.0
    p, r = same / len(pred), same / len(gold)
    return 2 * p * r / (p + r)


def squad_metrics(predictions: dict[str, str], rows: Sequence[dict]) -> dict[str, float]:
    """exact_match and f1 in percent, each the max over a question's gold answers, as SQuAD v1.1 scores them."""
    em = f1 = 0.0
    for row in rows:
        golds = row["answers"]["text"]
        pred = predictions.get(row["id"], "")
        if not golds:
            continue
        em += max(float(normalize_answer(pred) == normalize_answer(g)) for g in golds)
        f1 += max(token_f1(pred, g) for g in golds)
    n = sum(1 for r in rows if r["answers"]["text"])
    return {"exact_match": 100.0 * em / max(n, 1), "f1": 100.0 * f1 / max(n, 1), "n": n}


# ----------------------------------------------------------------------------- features


def _check_window(tokenizer, max_length: int, doc_stride: int) -> None:
    if max_length < 32:
        raise UserError(f"--max-length {max_length} is too short for question answering (need at least 32 tokens)")
    if not 0 <= doc_stride < max_length // 2:
        raise UserError(f"doc_stride {doc_stride} must be in [0, {max_length // 2}) for --max-length {max_length}")
    if not getattr(tokenizer, "is_fast", False):
        raise UserError("question answering needs a fast tokenizer (offset mappings); this checkpoint's tokenizer is not one")


def question_room(max_length: int) -> int:
    """The tokens a window gives its question (a quarter of it): longer questions are cut there, so that a window always
    has room for context."""
    return max_length // 4


def say_long_questions(tokenizer, questions: Sequence[str], max_length: int, done: str) -> None:
    """One line where questions are longer than the quarter of ``max_length`` a window gives them (they are cut there,
    :func:`encode_windows`): how many, and the longest (it was silent: two questions differing past the cut got one
    answer)."""
    ids = tokenizer([q.strip() for q in questions], add_special_tokens=False)["input_ids"]
    _say_cut([len(i) for i in ids], max_length, done)


def _say_cut(lengths: Sequence[int], max_length: int, done: str) -> None:
    q_max = question_room(max_length)
    cut = [n for n in lengths if n > q_max]
    if cut:
        logging.getLogger("attnkit").warning(
            "%d of the %d questions are longer than %d tokens (a quarter of --max-length %d, the room a window gives a "
            "question) and were %s from their first %d tokens only (the longest has %d): a larger --max-length reads "
            "more of them", len(cut), len(lengths), q_max, max_length, done, q_max, max(cut))


def encode_windows(tokenizer, questions: Sequence[str], contexts: Sequence[str], max_length: int, doc_stride: int,
                   say: str | None = None):
    """Tokenise (question, context) pairs into overlapping windows of the context.

    Long questions are cut to a quarter of ``max_length`` first, so a window always has room
    for context (``say``: the line of :func:`say_long_questions`, ending "were <say> from their first N tokens", from
    the same tokenisation). Returns the tokenizer's encoding with ``overflow_to_sample_mapping`` and
    ``offset_mapping`` (character spans in the context; ``None`` outside it).
    """
    q_max = question_room(max_length)
    qs = [q.strip() for q in questions]
    lengths = tokenizer(qs, add_special_tokens=False)["input_ids"]
    if say is not None:
        _say_cut([len(ids) for ids in lengths], max_length, say)
    qs = [tokenizer.decode(ids[:q_max]) if len(ids) > q_max else q for q, ids in zip(qs, lengths)]
    enc = tokenizer(qs, list(contexts), truncation="only_second", max_length=max_length, stride=doc_stride,
                    return_overflowing_tokens=True, return_offsets_mapping=True)
    for i in range(len(enc["input_ids"])):
        seq = enc.sequence_ids(i)
        enc["offset_mapping"][i] = [tuple(o) if seq[k] == 1 else None for k, o in enumerate(enc["offset_mapping"][i])]
    return enc


def answer_positions(offsets: list, answer_start: int, answer_end: int, cls_index: int = 0) -> tuple[int, int]:
    """Token start/end of the character span [answer_start, answer_end) in one window; ``cls_index`` if it is not inside."""
    ctx = [k for k, o in enumerate(offsets) if o is not None]
    if not ctx or offsets[ctx[0]][0] > answer_start or offsets[ctx[-1]][1] < answer_end:
        return cls_index, cls_index
    start = next(k for k in reversed(ctx) if offsets[k][0] <= answer_start)
    end = next(k for k in ctx if offsets[k][1] >= answer_end)
    return start, end


def train_features(batch: dict, tokenizer, max_length: int, doc_stride: int) -> dict:
    """``datasets.map`` function: windows with start/end labels (the first gold answer)."""
    enc = encode_windows(tokenizer, batch["question"], batch["context"], max_length, doc_stride)
    starts, ends = [], []
    for i, offsets in enumerate(enc["offset_mapping"]):
        ans = batch["answers"][enc["overflow_to_sample_mapping"][i]]
        if not ans["text"]:
            starts.append(0), ends.append(0)
            continue
        a0 = ans["answer_start"][0]
        s, e = answer_positions(offsets, a0, a0 + len(ans["text"][0]), cls_index=0)
        starts.append(s), ends.append(e)
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
            **({"token_type_ids": enc["token_type_ids"]} if "token_type_ids" in enc else {}),
            "start_positions": starts, "end_positions": ends,
            "example_index": [batch["_row"][j] for j in enc["overflow_to_sample_mapping"]],
            "offset_mapping": [[list(o) if o is not None else [-1, -1] for o in offs] for offs in enc["offset_mapping"]]}


def featurize(rows, tokenizer, max_length: int, doc_stride: int):
    """A ``datasets.Dataset`` of windows for ``rows`` (a Dataset with id/context/question/answers)."""
    _check_window(tokenizer, max_length, doc_stride)
    say_long_questions(tokenizer, rows["question"], max_length, "read")
    rows = rows.add_column("_row", list(range(len(rows))))
    return rows.map(train_features, batched=True, remove_columns=rows.column_names, desc="windows",
                    fn_kwargs={"tokenizer": tokenizer, "max_length": max_length, "doc_stride": doc_stride})


def best_spans(contexts: Sequence[str], example_index: Sequence[int], offsets: Sequence, start_logits, end_logits,
               max_answer_tokens: int = MAX_ANSWER_TOKENS, n_best: int = N_BEST) -> list[tuple[str, float]]:
    """The best answer (text, score) of each context over all of its windows.

    A span is kept when both ends are context tokens, end >= start and it has at most
    ``max_answer_tokens`` tokens; its score is start_logit + end_logit. The ``n_best`` ends are chosen among the
    context tokens only: question and special tokens with high logits never crowd a valid span out.
    """
    import numpy as np

    best: list[tuple[str, float, int]] = [("", -float("inf"), -1)] * len(contexts)
    for f, ex in enumerate(example_index):
        offs = offsets[f]
        n = len(offs)
        context = np.array([o is not None and o[0] >= 0 for o in offs], dtype=bool)
        if not context.any():
            continue
        sl, el = np.asarray(start_logits[f][:n]), np.asarray(end_logits[f][:n])
        starts = [s for s in np.argsort(np.where(context, sl, -np.inf), kind="stable")[::-1] if context[s]][:n_best]
        ends = [e for e in np.argsort(np.where(context, el, -np.inf), kind="stable")[::-1] if context[e]][:n_best]
        for s in starts:
            for e in ends:
                if e < s or e - s + 1 > max_answer_tokens:
                    continue
                score = float(sl[s] + el[e])
                if score > best[ex][1]:
                    best[ex] = (contexts[ex][offs[s][0] : offs[e][1]], score, int(offs[s][0]))
    return best


# ----------------------------------------------------------------------------- model glue


def predict_answers(model, tokenizer, questions: Sequence[str], contexts: Sequence[str], *, max_length: int = 384,
                    doc_stride: int | None = None, batch_size: int = 32) -> list[dict]:
    """Answer each (question, context): ``{"question", "answer", "start", "score"}``."""
    import torch

    if len(questions) != len(contexts):
        raise UserError(f"{len(questions)} questions but {len(contexts)} contexts")
    stride = max_length // 3 if doc_stride is None else doc_stride
    _check_window(tokenizer, max_length, stride)
    say_control(joined_by_controls(tokenizer, list(enumerate(questions, 1)), what="question")
                + joined_by_controls(tokenizer, list(enumerate(contexts, 1)), what="context"), done="answered")
    enc = encode_windows(tokenizer, questions, contexts, max_length, stride, say="answered")
    model.eval()
    dev = next(model.parameters()).device
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids") if k in enc]
    from tqdm.auto import tqdm

    starts, ends = [], []
    n = len(enc["input_ids"])
    for b in tqdm(range(0, n, batch_size), desc="answering", unit="batch", disable=n <= batch_size):
        feats = [{k: enc[k][i] for k in keys} for i in range(b, min(b + batch_size, len(enc["input_ids"])))]
        batch = tokenizer.pad(feats, return_tensors="pt")
        with torch.inference_mode():
            out = model(**{k: v.to(dev) for k, v in batch.items()})
        starts += list(out.start_logits.float().cpu().numpy())
        ends += list(out.end_logits.float().cpu().numpy())
    spans = best_spans(contexts, enc["overflow_to_sample_mapping"], enc["offset_mapping"], starts, ends)
    # no legal span (an empty context): answer "" with score None, never -inf (not valid JSON)
    return [{"question": q, "answer": text, "start": start, "score": score if start >= 0 else None}
            for q, (text, score, start) in zip(questions, spans)]


def evaluate_qa(model, tokenizer, rows, *, max_length: int = 384, doc_stride: int | None = None, batch_size: int = 32) -> tuple[dict, dict]:
    """EM/F1 of ``model`` on SQuAD ``rows``; returns (metrics, {id: predicted answer})."""
    rows = [dict(r) for r in rows]
    answers = predict_answers(model, tokenizer, [r["question"] for r in rows], [r["context"] for r in rows],
                              max_length=max_length, doc_stride=doc_stride, batch_size=batch_size)
    preds = {r["id"]: a["answer"] for r, a in zip(rows, answers)}
    return squad_metrics(preds, rows), preds
