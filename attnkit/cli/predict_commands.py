"""The commands that run a trained model: ``evaluate`` (classification, HANS, span QA) and ``predict``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from attnkit.analysis.explain import (
    figure_path,
    plot_hans,
)
from attnkit.analysis.inference import (
    evaluate_split,
    label_names_of,
    load_for_inference,
    predict_logits,
    predict_texts,
    read_text_file,
    run_info,
)
from attnkit.cli.outputs import (
    default_output,
    input_file,
    lock_run_of,
    output_path,
    write_jsonl,
)
from attnkit.errors import DataFormatError, UserError
from attnkit.models.resolve import is_qa_model
from attnkit.runfiles.names import WRITTEN_BY
from attnkit.runfiles.ownership import check_link_target_kind, check_not_input, check_side_file, check_suffix, record_output
from attnkit.runfiles.atomic import output_batch, write_json_atomic, write_text_atomic
from attnkit.runfiles.json_files import path_problem, read_json
from attnkit.tasks import default_data_dir, is_qa_task, load_task
from attnkit.tasks.glue import (
    GLUE,
    HANS_FILE,
    entailment_index,
    hans_report,
    hans_subset,
    read_hans,
    write_submission,
)
from attnkit.tasks.metrics import predictions_of
from attnkit.tasks.readers import check_argument_text, is_blank, read_jsonl, texts_sha256
from attnkit.tasks.squad import evaluate_qa, load_squad, predict_answers


def model_and_split(a, check=None, *, say_other_labels: bool = False):
    """The model named by --model and the --split of --task (default: the task it was trained on); ``check(model)``
    runs once the model is loaded, before any data is read (so that a model the command cannot use says so first).
    ``say_other_labels``: a task whose labels are not the model's is said in one line (the commands that read its texts
    only, by the model's predicted classes: words, layer-weights, faithfulness)."""
    d, model, tok = load_for_inference(a.model)
    if check is not None:
        check(model)
    task = a.task or run_info(d).get("task")
    if not task:
        raise UserError("--task is needed: the checkpoint does not record what it was trained on")
    data = load_task(task, a.data_dir)
    if a.split is None:  # faithfulness: the test split where the task has one, else the dev split (said so)
        a.split = "test" if "test" in data.splits else "validation"
        if a.split != "test":
            print(f"task {task} has no test split: explaining its {a.split} split")
    if a.split not in data.splits:
        raise UserError(f"task {task} has no split {a.split!r} (it has {', '.join(data.splits)})")
    if say_other_labels and task != "hans" and list(data.label_names) != label_names_of(model):
        print(f"attnkit: warning: task {task} has labels {list(data.label_names)} but {d} predicts {label_names_of(model)}: "
              f"its texts are read by a model of another task, by that model's predicted classes (its own task: --task "
              f"{run_info(d).get('task') or '...'})", file=sys.stderr)
    return d, model, tok, task, data, data.splits[a.split]


#: the tasks (beyond GLUE's pair tasks) whose examples are pairs of texts
PAIR_TASKS = ("mnli-devsplit", "scitail", "hans")


def say_single_texts(d: Path, done: str) -> None:
    """One line on stderr where a model trained on pairs of texts (an NLI or paraphrase task: its run records it) is
    given single texts: each is read as a pair with nothing after its [SEP], which the model never saw in training."""
    task = run_info(d).get("task")
    if isinstance(task, str) and ((task in GLUE and GLUE[task].pair is not None) or task in PAIR_TASKS):
        print(f"attnkit: warning: {d} was trained on pairs of texts (task {task}): a single text is {done} as a pair with "
              f"an empty second text, which it never saw; its own pairs: --task {task} --split validation",
              file=sys.stderr)


#: a task file's first line, as attnkit's csv/tsv tasks and GLUE's files write it (tabs read as commas)
DATA_HEADERS = ("text,label", "label,text", "sentence,label", "sentence1,sentence2,label", "index,sentence,label",
                "index,sentence", "index,sentence1,sentence2")


def say_if_data_file(path: str, first_line: str) -> None:
    """One line on stderr where ``predict --file`` (one text per line, whole) is given what looks like a task's data
    file (a .csv/.tsv/.jsonl name, or a header line): its header and its labels are read as texts. The way to label
    it as a split: a task reads its folder's train/dev/test files, so a file of another name is named as one first."""
    head = first_line.strip().lower().replace("\t", ",")
    p = Path(path)
    suffix = p.suffix.lower()
    if head not in DATA_HEADERS and suffix not in (".csv", ".tsv", ".jsonl"):
        return
    why = f"its first line {first_line.strip()!r} is a data file's header" if head in DATA_HEADERS else f"it is a {suffix} file"
    if head.startswith("index,"):  # GLUE's own layout (glue/<TASK>/test.tsv): its task reads it
        way = f"to label a GLUE split, --task <its GLUE task, e.g. sst2> --data-dir <the folder that holds glue/> --split {_split_of(p) or 'test'}"
    else:
        fmt = suffix[1:] if suffix in (".csv", ".tsv", ".jsonl") else "tsv" if "\t" in first_line else "csv"
        split = _split_of(p)
        way = (f"to label it as a split: --task {fmt} --data-dir {p.parent} --split {split}" if split else
               f"a task reads a folder's train/dev/test files: to label it as a split, copy it as test.{fmt} into a folder "
               f"of its own beside a train.{fmt} and give --task {fmt} --data-dir <that folder> --split test")
    print(f"attnkit: warning: --file {path} is read one text per line, each line whole, and {why}: a header or a "
          f"label column is labelled as text; {way}", file=sys.stderr)


def _split_of(p: Path) -> str | None:
    """The split a csv/tsv/jsonl task reads from a file of this name (train, dev/validation, test), else None."""
    return {"train": "train", "dev": "validation", "validation": "validation", "test": "test"}.get(p.stem.lower())


def cmd_evaluate(a) -> int:
    if a.plot:
        figure_path(a.plot, f"--plot {a.plot}: the HANS chart")  # before the model loads
    if a.output:
        check_suffix(a.output, (".json",), f"--output {a.output}: the metrics")
    d, model, tok = load_for_inference(a.model, qa_ok=True)
    task = a.task or run_info(d).get("task")
    if not task:
        raise UserError("--task is needed: the checkpoint does not record what it was trained on")
    ignored = [f"{o} {v}" for o, v in (("--hans-per-subcase", a.hans_per_subcase), ("--plot", a.plot)) if v is not None]
    if ignored and task != "hans":
        raise UserError(f"{', '.join(ignored)}: only with --task hans")
    if is_qa_task(task):
        return _evaluate_qa(a, d, model, tok, task)
    if is_qa_model_folder(model):
        raise UserError(f"{d} is a span question-answering model; task {task} needs a classifier")
    if task == "hans":
        return _evaluate_hans(a, d, model, tok)
    data = load_task(task, a.data_dir)
    if a.split not in data.splits:
        raise UserError(f"task {task} has no split {a.split!r} (it has {', '.join(data.splits)})")
    if list(data.label_names) != [model.config.id2label[i] for i in range(model.config.num_labels)]:
        raise UserError(f"task {task} has labels {data.label_names} but the model predicts {list(model.config.id2label.values())}")
    out = output_path(a, a.output, "--output") if a.output else default_output(d / f"eval_{task}_{a.split}.json")
    where = f" in {a.data_dir}" if a.data_dir else ""
    split = data.splits[a.split]
    metrics = evaluate_split(model, tok, split, batch_size=a.batch_size, max_length=a.max_length, kind=data.metric,
                             what=f"the {a.split} split of task {task}{where}")
    texts = split["text"] if "text_pair" not in split.column_names else [f"{t}\t{p}" for t, p in zip(split["text"], split["text_pair"])]
    data_dir = a.data_dir or default_data_dir()
    metrics = {"task": task, "split": a.split, "model": str(d), **metrics,
               "data_dir": str(Path(data_dir).resolve()) if data_dir else None, "texts_sha256": texts_sha256(texts),
               WRITTEN_BY: "attnkit evaluate"}
    if not a.output:
        _say_other_data(out, metrics)
    write_json_atomic(out, metrics)
    for k, v in metrics.items():
        print(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}")
    print(f"[attnkit] metrics written to {out}")
    return 0


def _say_other_data(out: Path, metrics: dict) -> None:
    """One line where the default output about to be replaced measured other texts (another data folder): the
    earlier result is not silently swapped for another data set's."""
    try:
        old = read_json(out, "an earlier evaluation")
    except (OSError, ValueError):  # none, or not one (it is replaced, as ever)
        return
    if old.get("texts_sha256") not in (None, metrics["texts_sha256"]):
        print(f"[attnkit] {out} held the evaluation of other texts (n {old.get('n')}, data {old.get('data_dir')}): replaced "
              "by this one; give --output to keep both", file=sys.stderr)


def _evaluate_hans(a, d: Path, model, tok) -> int:
    """HANS: entailment vs non-entailment (an NLI model's neutral and contradiction both count as non-entailment)."""
    root = Path(a.data_dir) if a.data_dir else default_data_dir()
    if root is None:
        raise UserError(f"HANS: no data folder; pass --data-dir holding {HANS_FILE}")
    path = root if root.is_file() else root / HANS_FILE  # --data-dir may name the HANS file itself
    ent = entailment_index(label_names_of(model))
    out = output_path(a, a.output, "--output") if a.output else default_output(d / "eval_hans.json")
    plot_path = output_path(a, a.plot, "--plot") if a.plot else check_side_file(out.with_suffix(".png"), f"the HANS chart beside --output {out}")
    rows = hans_subset(read_hans(path), a.hans_per_subcase)
    logits = predict_logits(model, tok, rows["text"], rows["text_pair"], batch_size=a.batch_size, max_length=a.max_length)
    report = hans_report(rows, logits.argmax(-1) == ent)
    info = run_info(d)
    report = {"task": "hans", "file": str(path), "model": str(d), "model_trained_on": info.get("trained_on", info.get("task", "unknown")),
              "model_labels": label_names_of(model), **report, WRITTEN_BY: "attnkit evaluate"}
    with output_batch():  # the results and the chart, or neither
        write_json_atomic(out, report)
        plot = plot_hans(report, plot_path, title=f"HANS: {d.name} (its task: {report['model_trained_on']})"[:100])
    print(f"HANS accuracy {report['accuracy']:.4f} on {report['n']} pairs (the model's task: {report['model_trained_on']})")
    for h, by in report["heuristic"].items():
        print(f"  {h:<16} " + "  ".join(f"{g} {v:.3f}" for g, v in by.items()))
    print(f"[attnkit] per-subcase results written to {out}; chart {plot}")
    return 0


def is_qa_model_folder(model) -> bool:
    return is_qa_model(model.config)


def _qa_stride(d: Path, max_length: int) -> int | None:
    """The window overlap the QA model was trained with, if ``max_length`` is its training length (else the default)."""
    info = run_info(d)
    return info.get("doc_stride") if info.get("max_length") == max_length else None


def _evaluate_qa(a, d: Path, model, tok, task: str) -> int:
    """Span QA: EM/F1 (SQuAD v1.1) on a split, plus every prediction."""
    if not is_qa_model_folder(model):
        raise UserError(f"task {task} is span QA but {d} is a classifier")
    splits = load_squad(a.data_dir)
    if a.split not in splits:
        raise UserError(f"task {task} has no split {a.split!r} (it has {', '.join(splits)})")
    out = output_path(a, a.output, "--output") if a.output else default_output(d / f"eval_{task}_{a.split}.json")
    answers = check_side_file(out.with_name(out.stem + "_predictions.json"), f"the answers beside --output {out}")
    if not any(ans["text"] for ans in splits[a.split]["answers"]):  # EM 0 and F1 0 "(0 questions)" were reported (sweep -28q R)
        raise UserError(f"the {a.split} split of task {task} in {a.data_dir or default_data_dir()} has no gold answers to "
                        f"score against: use attnkit predict for its answers")
    metrics, preds = evaluate_qa(model, tok, splits[a.split], max_length=a.max_length, doc_stride=_qa_stride(d, a.max_length),
                                 batch_size=a.batch_size)
    metrics = {"task": task, "split": a.split, "model": str(d), "max_length": a.max_length, **metrics, WRITTEN_BY: "attnkit evaluate"}
    with output_batch():  # the metrics and the answers, or neither
        write_json_atomic(out, metrics)
        # SQuAD's answer file {id: text}; the marker is one more key, which SQuAD's evaluation script never looks up
        write_json_atomic(answers, {**preds, WRITTEN_BY: "attnkit evaluate"})
    print(f"exact_match {metrics['exact_match']:.2f}  f1 {metrics['f1']:.2f}  ({metrics['n']} questions)")
    print(f"[attnkit] metrics written to {out}; answers to {out.with_name(out.stem + '_predictions.json')}")
    return 0


def _read_qa_file(path: str) -> tuple[list[str], list[str]]:
    """JSON lines with "question" and "context" fields."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"input file {p} {path_problem(p) or 'is not a regular file'}")
    qs, cs = [], []
    for line, row in read_jsonl(p):
        if line != len(qs) + 1:  # a skipped blank line would shift every later answer against the file's lines
            raise DataFormatError(p, len(qs) + 1, "expected one question per line, found an empty line")
        if not isinstance(row.get("question"), str) or not isinstance(row.get("context"), str):
            raise DataFormatError(p, line, 'expected {"question": "...", "context": "..."} for a question-answering model')
        if is_blank(row["question"]):  # (an empty --question is refused; from a file it was answered, sweep s23f)
            raise DataFormatError(p, line, "expected a question, found an empty one: a question-answering model needs a "
                                  "question and a context to read")
        qs.append(row["question"])
        cs.append(row["context"])
    return qs, cs


def _predict_qa(a, d: Path, model, tok) -> int:
    qs, cs = _read_qa_file(a.file) if a.file else ([], [])
    if a.question is not None or a.context is not None:
        if a.question is None or a.context is None:
            raise UserError("a question-answering model needs both --question and --context")
        for option, value in (("--question", a.question), ("--context", a.context)):
            if not value.strip():
                raise UserError(f"{option} is empty: a question-answering model needs a question and a context to read")
        check_argument_text(a.question, "--question")
        check_argument_text(a.context, "--context")
        qs.append(a.question)
        cs.append(a.context)
    if a.texts:
        raise UserError("this is a question-answering model: give --question and --context (or --file with JSON lines), not texts")
    if not qs:
        raise UserError("nothing to answer: give --question and --context, or --file with JSON lines {\"question\", \"context\"}")
    from_file = len(qs) - (1 if a.context else 0)
    for n, own in enumerate(tok(cs, add_special_tokens=False)["input_ids"]):  # "" was the answer, without a word
        if not own:
            where = "--context" if n >= from_file else f"{a.file}, entry {n + 1}: its context"
            raise UserError(f"{where} ({cs[n][:40]!r}) holds no token the model can read (only spaces, control characters "
                            "or combining marks): there is no answer to find in it")
    rows = predict_answers(model, tok, qs, cs, max_length=a.max_length, doc_stride=_qa_stride(d, a.max_length), batch_size=a.batch_size)
    write_jsonl(rows, a.output, "answers")
    return 0


#: the names of JSON lines files: predict replaces an existing file under --output only when it has one of them
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")


def check_not_other_kind(output: str) -> None:
    """An existing file under another kind's name (a copy of a data file, `--output data.csv`) is not replaced by JSON
    lines: it was, without a word (sweep s23f)."""
    p = Path(output).expanduser()
    if p.is_file() and p.suffix.lower() not in JSONL_SUFFIXES:
        raise UserError(f"--output {output} exists and is not a JSON lines file (its name ends in {p.suffix or 'no suffix'}, "
                        f"not {', '.join(JSONL_SUFFIXES)}): predict writes JSON lines and would replace it; name another "
                        "file, e.g. predictions.jsonl")
    check_link_target_kind(p, JSONL_SUFFIXES, f"--output {output}: the predictions")


def _predict_split(a) -> int:
    d, model, tok, task, data, ds = model_and_split(a)
    if a.output_dir and not (data.submission or {}).get(a.split):
        raise UserError(f"--output-dir {a.output_dir}: only for a GLUE test split's submission file; task {task} {a.split} "
                        "writes JSON lines (--output)")
    if task != "hans" and list(data.label_names) != label_names_of(model):  # as evaluate: else its labels pass for the task's
        raise UserError(f"task {task} has labels {list(data.label_names)} but {d} predicts {label_names_of(model)}: "
                        "give the --task it was trained on")
    submission = (data.submission or {}).get(a.split)
    if submission and a.output:  # it was dropped without a word (sweep 2026-11-28q Q)
        raise UserError(f"--output {a.output}: task {task} {a.split} writes GLUE's submission file {submission} (into "
                        f"{d / 'glue_submission'}, or the folder --output-dir names), not JSON lines; drop --output")
    if submission:  # the GLUE file: a file of that name attnkit did not write is the user's, never replaced
        folder = Path(a.output_dir) if a.output_dir else d / "glue_submission"
        if folder.exists() and not folder.is_dir():
            raise UserError(f"--output-dir {folder} is a file, not a folder")
        out = check_side_file(folder / submission, "the GLUE submission file (give another --output-dir)")
        lock_run_of(out)
    else:
        out = output_path(a, a.output, "--output") if a.output else default_output(d / f"predictions_{task}_{a.split}.jsonl")
    pairs = list(ds["text_pair"]) if "text_pair" in ds.column_names else None
    logits = predict_logits(model, tok, list(ds["text"]), pairs, batch_size=a.batch_size, max_length=a.max_length)
    preds = predictions_of(data.metric, logits)
    idx = list(ds["idx"]) if "idx" in ds.column_names else list(range(len(ds)))
    if submission:
        path = write_submission(data, a.split, preds, idx, out.parent)
        record_output(path, "attnkit predict")
        print(f"[attnkit] {len(preds)} predictions written to {path} (GLUE submission format)")
        return 0
    names = label_names_of(model)
    lines = "".join(
        json.dumps({"idx": int(i), "prediction": float(p) if data.metric == "regression" else names[int(p)]}) + "\n" for i, p in zip(idx, preds)
    )
    write_text_atomic(out, lines)
    record_output(out, "attnkit predict")
    print(f"[attnkit] {len(preds)} predictions written to {out}")
    return 0


def cmd_predict(a) -> int:
    if a.split:
        given = [o for o, v in (("texts", a.texts), ("--file", a.file), ("--question", a.question), ("--context", a.context)) if v]
        if given:  # they were dropped without a word
            raise UserError(f"{', '.join(given)} cannot be given with --split {a.split} (which predicts every row of the split): "
                            "give one or the other")
        return _predict_split(a)
    if not (a.texts or a.file or a.question or a.context):  # before loading the model: nothing to do
        raise UserError("nothing to predict: give texts as arguments, --file with one text per line, or --question and --context")
    ignored = [f"{o} {v}" for o, v in (("--task", a.task), ("--output-dir", a.output_dir), ("--data-dir", a.data_dir)) if v is not None]
    if ignored:
        raise UserError(f"{', '.join(ignored)}: only with --split (predicting a whole split of a task)")
    if a.file:
        input_file(a.file, "--file")
    if a.output:
        output_path(a, a.output, "--output")
        check_not_input(a.output, "--output", {"--file": a.file})
        check_not_other_kind(a.output)
    for i, t in enumerate(a.texts, 1):
        check_argument_text(t, f"text {i} of the command line")
        if is_blank(t):
            raise UserError(f"text {i} of the command line is empty: a model cannot label an empty text")
    d, model, tok = load_for_inference(a.model, qa_ok=True)
    if is_qa_model_folder(model):
        return _predict_qa(a, d, model, tok)
    if a.question or a.context:
        raise UserError("--question/--context are for question-answering models; this one is a classifier")
    texts = list(a.texts)
    if a.file:
        lines = read_text_file(a.file)
        say_if_data_file(a.file, lines[0] if lines else "")
        texts += lines
    if not texts:
        raise UserError(f"nothing to predict: --file {a.file} holds no text (it is empty, or only blank lines); give it one "
                        "text per line" if a.file else "nothing to predict: give texts as arguments or --file with one text per line")
    given = len(a.texts)  # a warning names a text by where it was given: the command line, or the file's line
    names = lambda n: f"text {n} of the command line" if n <= given else f"{a.file}, line {n - given}"  # noqa: E731
    write_jsonl(predict_texts(model, tok, texts, batch_size=a.batch_size, max_length=a.max_length, text_names=names),
                a.output, "predictions")
    say_single_texts(d, "labelled")  # once labelled (a refusal before it says what stopped the command, alone)
    return 0
