"""Batched inference, evaluation and prediction for a saved classifier, and loading a saved model to run it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np

from attnkit.errors import DataFormatError, UserError
from attnkit.models.checkpoint import load_model, load_tokenizer
from attnkit.models.resolve import check_text_room, is_qa_model
from attnkit.runfiles.json_files import path_problem, read_json
from attnkit.runfiles.names import MODEL_DIR, RUN_INFO
from attnkit.runfiles.ownership import unfinished_run
from attnkit.tasks.lemmas import LemmatizingTokenizer
from attnkit.tasks.metrics import predictions_of, task_metrics
from attnkit.tasks.controls import dropped_control, joined_by_controls, say_control
from attnkit.tasks.readers import check_no_nul, decode, is_blank, split_lines

log = logging.getLogger("attnkit")


def encoded_batches(
    model,
    tokenizer,
    texts: Sequence[str],
    pairs: Sequence[str] | None = None,
    *,
    batch_size: int = 64,
    max_length: int = 128,
    progress: bool = True,
    desc: str = "predicting",
    names=None,
    **tokenizer_kwargs,
):
    """Yield ``(start, encoded batch)`` for ``texts`` (and ``pairs``): padded, truncated, on the model's device.

    Puts ``model`` in eval mode. Extra ``tokenizer_kwargs`` (e.g. ``return_offsets_mapping=True``) go to
    the tokenizer; tensors that are not model inputs must be popped by the caller. ``names(n)``: what a warning
    calls the text numbered n from 1 (default "text n"; e.g. a file's line), texts without ``pairs``.
    """
    from tqdm.auto import tqdm

    if len(texts) and hasattr(tokenizer, "num_special_tokens_to_add"):
        check_text_room(max_length, tokenizer, pairs is not None)  # else the model would read [CLS][SEP][SEP] alone
    model.eval()
    device = next(model.parameters()).device
    starts = range(0, len(texts), batch_size)
    longer, longest, room, unknown, control = 0, 0, max_length, [], []
    for i in tqdm(starts, desc=desc, unit="batch", disable=not progress or len(starts) < 2):
        a = list(texts[i : i + batch_size])
        b = list(pairs[i : i + batch_size]) if pairs is not None else None
        n = check_readable(tokenizer, a, i, unknown=unknown if b is None else [], control=control,
                           names=names if b is None else None)  # (a pair: its other text may be read)
        if b is not None:
            n = [x + y for x, y in zip(n, check_readable(tokenizer, b, i, "the second text of pair", unknown=[], control=control))]
        room = max_length - (tokenizer.num_special_tokens_to_add(b is not None) if hasattr(tokenizer, "num_special_tokens_to_add") else 0)
        longer, longest = longer + sum(x > room for x in n), max([longest, *n])
        enc = tokenizer(a, b, truncation=True, max_length=max_length, padding=True, return_tensors="pt", **tokenizer_kwargs)
        yield i, enc.to(device)  # a BatchEncoding: word_ids() stays available
    if longer:
        say_truncated(longer, len(texts), longest, max_length, room, pairs=pairs is not None)
    say_unknown(unknown, tokenizer)
    say_control(control, names if pairs is None else None)


def text_lengths(tokenizer, ids: list[list[int]], sides: tuple[list[str], ...], max_length: int) -> list[int]:
    """Each text's length in tokens of text (a pair: both together), from its encoding ``ids`` cut at ``max_length``:
    only those that reached it are tokenised again, whole (``sides``: the texts, and the second texts of pairs)."""
    special = tokenizer.num_special_tokens_to_add(len(sides) > 1)
    lengths = [len(x) - special for x in ids]
    full = [i for i, x in enumerate(ids) if len(x) >= max_length]  # only these may have been cut
    if full:
        whole = tokenizer(*[[side[i] for i in full] for side in sides], add_special_tokens=False)["input_ids"]
        for i, x in zip(full, whole):
            lengths[i] = len(x)
    return lengths


def truncation_line(counts: str, many: bool, longest: int, max_length: int, room: int, pairs: bool = False) -> str:
    """The line saying texts were cut: ``counts`` says how many of which (e.g. "2 of 3 texts were"), ``many`` whether
    more than one; they were longer than the ``room`` tokens of text ``--max-length`` leaves beside the model's special
    tokens, counted in tokens of text throughout (``longest`` too); ``pairs``: two texts read together, cut together."""
    return (f"{counts} longer than the {room} tokens of text --max-length {max_length} leaves beside the model's special "
            f"tokens (the longest: {longest}): {'each was' if many else 'it was'} cut to {'its first ' if not pairs else ''}"
            f"{room}{' together' if pairs else ''}; a larger --max-length reads more (up to the model's window)")


def say_truncated(longer: int, total: int, longest: int, max_length: int, room: int, pairs: bool = False) -> None:
    """One line on stderr: how many texts were longer than the model reads and were cut (:func:`truncation_line`)."""
    whats = f"{'pair' if pairs else 'text'}{'s' if total > 1 else ''}{' of texts' if pairs else ''}"
    counts = f"{longer} of {total} {whats} {'were' if longer > 1 else 'was'}"
    log.warning("%s", truncation_line(counts, longer > 1, longest, max_length, room, pairs))


def check_readable(tokenizer, texts: Sequence[str], first: int = 0, what: str = "text", unknown: list | None = None,
                   control: list | None = None, names=None) -> list[int]:
    """Refuse a text that gives the tokenizer no token of its own (control characters, lone combining marks, U+FFFD):
    the model would label [CLS][SEP] as if it had read it. A text of unknown words only ([UNK]: emoji, very long
    words) is labelled, and said: added to ``unknown`` (``(number, text)``), or in one line now without it. So is a
    text holding control characters the tokenizer drops (joining the words around them): added to ``control``
    (``(what, number, text)``), or said now without it. ``first``: the 0-based number of ``texts[0]``. Returns each
    text's number of tokens (without the special ones; 0s for a tokenizer without special tokens). ``names(n)``: what a
    refusal calls text n (e.g. a file's line; default ``what n``)."""
    if not hasattr(tokenizer, "num_special_tokens_to_add"):
        return [0] * len(texts)
    ids = tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    unk = getattr(tokenizer, "unk_token_id", None)
    found, dropped = [], []
    for n, (text, own) in enumerate(zip(texts, ids), first + 1):
        if not own:
            name = names(n) if names is not None else f"{what} {n}"
            raise UserError(f"{name} is empty: a model cannot label it" if not text.strip() else
                            f"{name} ({text[:40]!r}) holds no token the model can read (only control characters, "
                            "combining marks or replacement characters?): a model cannot label it")
        if unk is not None and all(t == unk for t in own):
            found.append((n, text))
        if dropped_control(text) is not None:
            dropped.append((n, text))
    dropped = joined_by_controls(tokenizer, dropped, [ids[n - first - 1] for n, _ in dropped], what)
    if unknown is None:
        say_unknown(found, tokenizer, what)
    else:
        unknown += found
    if control is None:
        say_control(dropped)
    else:
        control += dropped
    return [len(own) for own in ids]


def say_unknown(found: list[tuple[int, str]], tokenizer, what: str = "text") -> None:
    """One line on stderr where texts read as unknown words only ([UNK]): they are labelled, but from [UNK] alone."""
    if not found:
        return
    n, text = found[0]
    many = len(found) > 1
    log.warning("%d %s%s read as unknown words only (%s; the first: %s %d, %r): %s label%s say%s nothing about %s words",
                len(found), what, "s" if many else "", tokenizer.unk_token, what, n, text[:40], "their" if many else "its",
                "s" if many else "", "" if many else "s", "their" if many else "its")


def predict_logits(
    model,
    tokenizer,
    texts: Sequence[str],
    pairs: Sequence[str] | None = None,
    *,
    batch_size: int = 64,
    max_length: int = 128,
    progress: bool = True,
    names=None,
) -> np.ndarray:
    """Logits [N, num_labels] for ``texts`` (and optional second segments ``pairs``); ``names`` as in
    :func:`encoded_batches`."""
    import torch

    out = []
    for _, enc in encoded_batches(model, tokenizer, texts, pairs, batch_size=batch_size, max_length=max_length, progress=progress,
                                  names=names):
        with torch.inference_mode():
            out.append(model(**enc).logits.float().cpu().numpy())
    if not out:
        return np.zeros((0, model.config.num_labels), dtype=np.float32)
    return np.concatenate(out, axis=0)


def softmax_np(logits: np.ndarray) -> np.ndarray:
    z = logits - logits.max(-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(-1, keepdims=True)


def label_names_of(model) -> list[str]:
    id2label = getattr(model.config, "id2label", None) or {}
    return [str(id2label.get(i, id2label.get(str(i), i))) for i in range(model.config.num_labels)]


def refuse_labelled_in_part(labels, what: str, to: str) -> None:
    """Refuse a split some of whose examples have a gold label and some not (an empty label field in a test file):
    it can neither be scored nor be taken for an unlabelled one. ``to``: what the labels are needed for."""
    labels = np.asarray(list(labels))
    missing = int((labels < 0).sum())
    if 0 < missing < len(labels):  # "no gold labels" was not what it held, nor was skipping it
        first = int(np.flatnonzero(labels < 0)[0]) + 1
        raise UserError(f"{missing} of the {len(labels)} examples of {what} {'has' if missing == 1 else 'have'} no "
                        f"gold label (an empty label field; the first is example {first} of the split, in file "
                        f"order): give every row its label to {to}, or use `attnkit predict`")


def evaluate_split(model, tokenizer, dataset, *, batch_size: int = 64, max_length: int = 128, kind: str = "accuracy",
                   what: str = "this split") -> dict:
    """Metrics of ``model`` on a tokenisable dataset (text, [text_pair], label); ``kind`` as in
    :func:`attnkit.tasks.metrics.task_metrics`; ``what`` names the split in a refusal."""
    labels = np.asarray(list(dataset["label"]))
    if len(labels) == 0 or labels.min() < 0:
        refuse_labelled_in_part(labels, what, "evaluate it")
        raise UserError(f"{what} has no gold labels; use `attnkit predict` instead")
    pairs = list(dataset["text_pair"]) if "text_pair" in dataset.column_names else None
    logits = predict_logits(model, tokenizer, list(dataset["text"]), pairs, batch_size=batch_size, max_length=max_length)
    metrics = task_metrics(kind, labels, predictions_of(kind, logits))
    metrics["n"] = int(len(labels))
    return metrics


def read_text_file(path: str | Path) -> list[str]:
    """One text per line (UTF-8, BOM and U+FEFF removed, blank lines at the end ignored); an empty line before the
    end is refused, naming it, and so is a NUL (a damaged file, or a UTF-16 one). Lines end at ``\\n``, ``\\r\\n``
    or a lone ``\\r`` (old Mac files), as the csv reader's do; U+2028, NEL and form feeds inside a line stay in its
    text, so the predictions line up with the file's lines as an editor shows them."""
    p = Path(path)
    if p.is_dir():
        raise FileNotFoundError(f"input file {p} is a folder, not a file")
    if not p.is_file():
        raise FileNotFoundError(f"input file {p} {path_problem(p) or 'is not a regular file'}")
    raw = decode(p, p.read_bytes())  # not read_text: its universal newlines would also split at U+2028 and the like
    lines = [ln.replace("\ufeff", "").strip() for ln in split_lines(raw)]
    while lines and not lines[-1]:  # blank lines at the end of the file
        lines.pop()
    for i, ln in enumerate(lines, 1):
        if is_blank(ln):  # skipping it would shift every later prediction against the file's lines
            raise DataFormatError(p, i, "expected one text per line, found an empty line (a model cannot label an empty text)")
        check_no_nul(p, i, ln)
    return lines


def predict_texts(model, tokenizer, texts: Sequence[str], *, batch_size: int = 64, max_length: int = 128,
                  text_names=None) -> list[dict]:
    """Label and class probabilities for each text; ``text_names`` as ``names`` in :func:`encoded_batches`."""
    names = label_names_of(model)
    probs = softmax_np(predict_logits(model, tokenizer, texts, batch_size=batch_size, max_length=max_length, names=text_names))
    return [
        {"text": t, "label": names[int(p.argmax())], "probabilities": {n: float(x) for n, x in zip(names, p)}}
        for t, p in zip(texts, probs)
    ]


# ----------------------------------------------------------------------------- a saved model, ready to run


def model_dir(path: str | Path) -> Path:
    """The model folder of ``path``: a run folder (its ``model/``) or a model folder; UserError if it is neither."""
    p = Path(path)
    if (p / MODEL_DIR / "config.json").is_file():
        return p / MODEL_DIR
    if not p.exists():
        raise UserError(f"--model {path}: no such folder")
    if not p.is_dir():
        raise UserError(f"--model {path} is a file, not a folder: give the folder that holds the model's config.json "
                        f"({p.parent if p.name == 'config.json' else 'a run folder or its model/'})")
    if not (p / "config.json").is_file():
        raise UserError(f"--model {path}: " + (unfinished_run(p) or "no config.json there (expected a folder written by `attnkit train`)"))
    return p


def run_info(d: Path) -> dict:
    """What ``attnkit train`` recorded beside a model (task, labels, max length, lemmatisation, ...)."""
    run = d / RUN_INFO
    if not run.is_file() and d.name.startswith("checkpoint-") and (d.parent / MODEL_DIR / RUN_INFO).is_file():
        run = d.parent / MODEL_DIR / RUN_INFO  # a kept checkpoint of a finished run: that run's record (its --max-length,
        # task, labels; it read at 128 and asked for --task, sweep s23f)
    return read_json(run, "what training recorded beside a model") if run.is_file() else {}


def load_for_inference(path: str | Path, qa_ok: bool = False):
    """(model folder, model, tokenizer) of a saved model; a span-QA model only where ``qa_ok`` (else UserError).
    A model trained on lemmas gets a tokenizer that lemmatises its input."""
    d = model_dir(path)
    model = load_model(d)
    if not qa_ok and is_qa_model(model.config):
        raise UserError(f"{d} is a span question-answering model: use `attnkit evaluate` (its SQuAD task), "
                        "`attnkit predict --question ... --context ...` or `attnkit explain` with it")
    tok = load_tokenizer(d)
    lang = run_info(d).get("lemmatize")
    if lang:  # the model was trained on lemmas: it reads lemmas here too
        tok = LemmatizingTokenizer(tok, lang)
    return d, model, tok
