"""The attnkit commands: each turns its arguments into settings, calls the layers below, and prints what it did.

This module loads the whole stack (torch, transformers, datasets): :func:`attnkit.cli.main.main` imports it only
when a command runs."""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import sys
from pathlib import Path

from attnkit.analysis.explain import (
    attention_maps, check_layer_weights, figure_path, layer_weights, plot_attention, plot_hans, plot_layer_weights, view_sentence,
)
from attnkit.analysis.faithfulness import WordClassifier, faithfulness_report, plot_faithfulness
from attnkit.analysis.html_view import write_html
from attnkit.analysis.inference import (
    label_names_of, load_for_inference, model_dir, predict_logits, predict_texts, read_text_file, run_info, evaluate_split,
)
from attnkit.analysis.words import plot_words, rank_words, received_attention
from attnkit.attention import kernels
from attnkit.attention.normalisers import names_with, normaliser
from attnkit.attention.spec import spec_of
from attnkit.errors import DataFormatError, UserError
from attnkit.models.build import MINI_MODEL_TYPE, check_max_length, check_model_folder, check_se_ratio, check_text_room, checkpoint_dir, checkpoint_spec, is_qa_model, load_tokenizer, max_positions, resolve_model
from attnkit.models.freeze import parse_groups
from attnkit.models.pooling import head_of
from attnkit.runfiles import (
    RUN_RECORD, WRITTEN_BY, check_not_input, check_output_file, check_side_file, folder_lock, is_main_process, make_way,
    output_batch, path_problem, read_json, record_output,
    write_json_atomic, write_text_atomic,
)
from attnkit.tasks import default_data_dir, is_qa_task, load_task
from attnkit.tasks.glue import HANS_FILE, entailment_index, hans_report, hans_subset, read_hans, write_submission
from attnkit.tasks.metrics import predictions_of
from attnkit.tasks.lemmas import LemmatizingTokenizer
from attnkit.tasks.readers import is_blank, read_jsonl
from attnkit.tasks.sentiment import sst_rationales
from attnkit.tasks.squad import evaluate_qa, load_squad, predict_answers
from attnkit.training.adapt import adapt
from attnkit.training.config import DEFAULT_MINI_LR, METRICS_FILE, MODEL_DIR, PAPER_EPOCHS, AdaptConfig, PretrainConfig, TrainConfig, check_seed, is_mini_alias
from attnkit.training.finetune import train
from attnkit.training.pretrain import pretrain
from attnkit.training.recipes import apply_recipe, recipe_options
from attnkit.training.sweep import SWEPT, run_sweep


# ----------------------------------------------------------------------------- settings from arguments


def map_options_ignored(a, attention: str, lam: bool = True) -> list[str]:
    """--lam and --alpha given for a map that has no such setting (``train``, ``adapt``; ``sweep`` sweeps lam itself)."""
    ignored, setting = [], normaliser(attention).setting
    if lam and a.lam is not None and setting != "lam":
        ignored.append(f"--lam {a.lam:g} (only {' or '.join(names_with(setting='lam'))} has a lam; the attention is {attention})")
    if a.alpha is not None and setting != "alpha":
        ignored.append(f"--alpha {a.alpha:g} (only {' or '.join(names_with(setting='alpha'))} has an alpha to choose; the attention is {attention})")
    return ignored


def refuse_ignored(ignored: list[str]) -> None:
    if ignored:
        raise UserError(f"{'; '.join(ignored)}: an option that would be ignored is refused")


def train_config(a) -> TrainConfig:
    """The TrainConfig of ``attnkit train``'s (or ``sweep``'s) arguments."""
    apply_recipe(a)  # --recipe fills the options it names where they were left out
    cfg = _train_config(a)
    ignored = map_options_ignored(a, cfg.attention, lam=getattr(a, "command", "train") == "train")
    if cfg.blur == "none" and (a.blur_size is not None or a.blur_sigma is not None):
        ignored.append("--blur-size/--blur-sigma (they shape the blur: add --blur context or --blur value)")
    if not cfg.se and a.se_ratio is not None:
        ignored.append(f"--se-ratio {cfg.se_ratio} (add --se)")
    if cfg.doc_stride is not None and not is_qa_task(cfg.task):
        ignored.append(f"--doc-stride {cfg.doc_stride} (span QA only; task {cfg.task} is classification)")
    given = [o for o, v in (("--distill-weight", getattr(a, "distill_weight", None)),
                             ("--distill-temperature", getattr(a, "distill_temperature", None))) if v is not None]
    if given and cfg.teacher is None:  # the default value given without --teacher slipped past TrainConfig's check
        ignored.append(f"{'/'.join(given)} (they need --teacher, the model whose predictions are distilled)")
    refuse_ignored(ignored)
    return cfg


def _train_config(a) -> TrainConfig:
    s = mini_train_settings(a, TrainConfig.attention, TrainConfig.lr)  # model, attention, lam, lr, freeze, MiniBERT shape
    alpha = s.pop("alpha", TrainConfig.alpha if a.alpha is None else a.alpha)  # a checkpoint's own, where --attention is not given
    sparse_layers = s.pop("sparse_layers", a.sparse_layers)
    return TrainConfig(
        task=a.task, data_dir=a.data_dir, from_scratch=a.from_scratch,
        epochs=a.epochs if a.epochs is not None else PAPER_EPOCHS.get(a.task, TrainConfig.epochs), max_steps=a.max_steps, batch_size=a.batch_size, warmup_ratio=a.warmup,
        weight_decay=a.weight_decay, max_length=a.max_length, doc_stride=a.doc_stride, seed=a.seed, output_dir=a.output_dir,
        resume=not a.no_resume, max_train_samples=a.max_train_samples, max_eval_samples=a.max_eval_samples,
        holdout=a.holdout, eval_steps=a.eval_steps, logging_steps=a.logging_steps, group_by_length=a.group_by_length, precision=a.precision,
        learn_lam=a.learn_lam, lam_lr=a.lam_lr, lam_warmup=a.lam_warmup, alpha=alpha,
        learn_alpha=a.learn_alpha,
        alpha_lr=a.alpha_lr, alpha_warmup=a.alpha_warmup, keep_checkpoints=a.keep_checkpoints, lemmatize=a.lemmatize,
        blur=a.blur, blur_size=TrainConfig.blur_size if a.blur_size is None else a.blur_size,
        blur_sigma=TrainConfig.blur_sigma if a.blur_sigma is None else a.blur_sigma, pooling=a.layer_pooling, se=a.se,
        se_ratio=TrainConfig.se_ratio if a.se_ratio is None else a.se_ratio, pooling_lr=a.pooling_lr,
        sparse_layers=sparse_layers, teacher=a.teacher,
        distill_weight=TrainConfig.distill_weight if a.distill_weight is None else a.distill_weight,
        distill_temperature=TrainConfig.distill_temperature if a.distill_temperature is None else a.distill_temperature,
        **s,
    )


def mini_train_settings(a, default_attention: str = "sparsegen-lin", default_lr: float = 2e-5) -> dict:
    """TrainConfig fields from the train command's arguments: model path, attention, lam, lr, MiniBERT shape, freeze; without
    --attention, a checkpoint's own attention, with its alpha (entmax-alpha) and sparse layers unless those are given."""
    shape = {k: getattr(a, k, None) for k in ("kind", "layers", "heads", "dim", "vocab_size", "score_scale", "head_mode")}
    mini = is_mini_alias(a.model)
    given = [f"--{k.replace('_', '-')}" for k, v in shape.items() if v is not None]
    if given and not mini:
        raise ValueError(f"{', '.join(given)} only apply to --model mini (a checkpoint's architecture is fixed by its config.json)")
    for k in ("layers", "heads", "dim", "vocab_size"):
        if shape[k] is not None and shape[k] < 1:
            raise ValueError(f"--{k.replace('_', '-')} must be a positive integer, got {shape[k]}")
    if shape["head_mode"] != "full" and (shape["dim"] or 32) % (shape["heads"] or 1):
        raise ValueError(f"--dim {shape['dim'] or 32} is not divisible by --heads {shape['heads']}")
    model = a.model
    ckpt = None if mini else checkpoint_dir(a.model)
    if ckpt is not None:
        model = str(ckpt)
    attention, lam = a.attention, a.lam
    inherited = {}
    if attention is None:
        stored = checkpoint_spec(model) if ckpt is not None else None
        if stored is not None:
            attention, lam = stored.attention, (lam if lam is not None else stored.lam)
            if stored.normaliser.setting == "alpha" and getattr(a, "alpha", None) is None:
                inherited["alpha"] = stored.alpha  # e.g. an encoder adapted to alpha 2 (attnkit adapt --alpha 2)
            if stored.sparse_layers is not None and getattr(a, "sparse_layers", None) is None:
                inherited["sparse_layers"] = stored.sparse_layers  # adapted with --sparse-layers: fine-tuned so too
        else:
            attention = "softmax" if mini else default_attention
    is_mini_ckpt = ckpt is not None and read_json(ckpt / "config.json", "a model's config").get("model_type") == MINI_MODEL_TYPE
    lr = a.lr if a.lr is not None else (DEFAULT_MINI_LR if (mini or is_mini_ckpt) else default_lr)
    out = {"model": model, "attention": attention, "lam": lam, "lr": lr, "freeze": ",".join(parse_groups(a.freeze)) or None}
    out.update({k: v for k, v in shape.items() if v is not None})
    return out | inherited


def prepare_model_length(a) -> None:
    """evaluate/predict/explain/layer-weights/words: --max-length defaults to the model's training length (else 128,
    at most what the model takes); a given length must fit the model's positions."""
    from transformers import AutoConfig

    d = model_dir(a.model)
    check_model_folder(d, weights=False)  # config.json readable, its attention block there: before anything reads it
    config = AutoConfig.from_pretrained(d)
    if a.max_length is None:
        a.max_length = int(run_info(d).get("max_length") or min(128, max_positions(config) or 128))
    check_max_length(a.max_length, config, str(d))


# ----------------------------------------------------------------------------- commands


def _blur_note(cfg: TrainConfig) -> None:
    """Say so on stderr (once, on the main process) when the blur asked for does not blur."""
    note = cfg.spec().blur_note()
    if note and is_main_process():
        print(f"[attnkit] note: {note}", file=sys.stderr)


def cmd_train(a) -> int:
    cfg = train_config(a)
    if a.recipe and is_main_process():
        print(f"[attnkit] recipe {a.recipe}: {recipe_options(a.recipe)}", file=sys.stderr)
    cfg.validate()  # settings, attention and lam before any heavy work
    if not is_mini_alias(cfg.model):  # the model folder it starts from, before the data is read
        check_model_folder(resolve_model(cfg.model), weights=not cfg.from_scratch, tokenizer=True)
    if cfg.max_length < 16 and not is_qa_task(cfg.task) and not is_mini_alias(cfg.model):  # [CLS]/[SEP] may fill it
        pairs = "text_pair" in load_task(cfg.task, cfg.data_dir).splits["train"].column_names
        check_text_room(cfg.max_length, load_tokenizer(cfg.model), pairs)
    if cfg.se and a.se_ratio is not None and not is_mini_alias(cfg.model):  # a given r, before the data is read
        check_se_ratio(cfg.head(), model=cfg.model)
    _blur_note(cfg)
    metrics = train(cfg)
    if not is_main_process():
        return 0
    out = Path(cfg.output_dir)
    if metrics.get("already_complete"):
        print(f"[attnkit] the run in {out} is already complete: nothing was changed (--no-resume trains it again)")
    v = metrics["validation"]
    qa = is_qa_task(cfg.task)
    reads = "span head (start/end per token)" if qa else f"classifier on the {cfg.head().describe()}"
    print(f"\n[attnkit] task {cfg.task}, attention {cfg.spec().describe()}, {reads}")
    if cfg.spec().is_sparse:
        print(f"[attnkit] sparse maps ran on the {kernels.backend()} path ({kernels.backend_reason()})")
    main_metric = metrics.get("main_metric", "accuracy")
    shown = ", ".join(f"{k} {x:.4f}" for k, x in v.items() if k in ("accuracy", "macro_f1", "f1", "exact_match", "mcc", "pearson", "spearman") and k != main_metric)
    print(f"[attnkit] dev {main_metric} {v[main_metric]:.4f}  ({shown}; {metrics['train_size']} training examples)")
    for name in metrics:
        if name.startswith(("test", "validation_")) and isinstance(metrics[name], dict):
            print(f"[attnkit] {name} {main_metric} {metrics[name][main_metric]:.4f}")
    print(f"[attnkit] model {'in' if metrics.get('already_complete') else 'written to'} {out / MODEL_DIR}")
    print(f"[attnkit] metrics written to {out / METRICS_FILE}")
    if (out / "curves.png").is_file():
        print(f"[attnkit] training curves (loss, dev metric per epoch) in {out / 'curves.png'}")
    if not a.no_heatmap and not qa:  # a QA window is ~max-length tokens: too long to read as a heatmap

        _, model, tok = load_for_inference(str(out))
        dev = load_task(cfg.task, cfg.data_dir).splits["validation"]
        texts = list(dev.select(range(min(200, len(dev))))["text"])
        i = view_sentence(texts)
        text = texts[i]
        pair = dev[i]["text_pair"] if "text_pair" in dev.column_names else None
        maps = attention_maps(model, tok, text, pair, cfg.max_length)
        layer = maps.weights.shape[0] - 1
        with output_batch():  # both heatmaps or neither
            png = plot_attention(maps, make_way(out / "attention.png"), layer=layer, head=0)
            grid = plot_attention(maps, make_way(out / "attention_grid.png"))
        print(f"[attnkit] attention heatmap of a dev sentence written to {png} (all layers/heads: {grid})")
    return 0


def cmd_sweep(a) -> int:
    param, values = ("lam", a.lams) if a.lams is not None else ("alpha", a.alphas)
    ignored = [f"--{name} {getattr(a, name)}" for name in ("attention", "lam") if getattr(a, name) is not None]
    if a.no_resume:
        raise UserError("--no-resume: a sweep reuses its finished cells; give another --output-dir to train afresh")
    if param == "lam" and (a.alpha is not None or a.learn_alpha or a.alpha_lr is not None or a.alpha_warmup):
        ignored.append("--alpha/--learn-alpha/--alpha-lr/--alpha-warmup")
    if param == "alpha" and (a.alpha is not None or a.learn_alpha or a.learn_lam or a.lam_lr is not None or a.lam_warmup):
        ignored.append("--alpha/--learn-alpha/--learn-lam/--lam-lr/--lam-warmup")
    if ignored:
        raise UserError(f"{', '.join(ignored)}: attnkit sweep trains {SWEPT[param]} at each --{param}s value and a "
                        f"softmax baseline per seed, so it takes no such option")
    a.attention = SWEPT[param]  # the base settings every cell shares are those of the swept normaliser
    base = train_config(a)
    base.validate()
    _blur_note(base)
    out = Path(a.output_dir)
    records = run_sweep(base, values, a.seeds, out, param=param, view_layer=a.view_layer, view_head=a.view_head, report_only=a.report_only)
    print(f"[attnkit] {len(records)} cells; records in {out / 'sweep.json'}; figures {out / 'sweep.png'}, {out / 'sweep.svg'}, "
          f"{out / 'sweep_attention.png'}")
    return 0


def _protected(a) -> dict:
    """The folders whose files an output the user names must not replace: the model's run folder, the data read and
    the data the model was trained on (its run's run_config.json says which)."""
    d = model_dir(a.model)
    run = d.parent if d.name == MODEL_DIR else d
    try:  # the run's settings name the data it was trained on and the model it started from
        settings = read_json(run / "run_config.json", "the settings of a run") if (run / "run_config.json").is_file() else {}
    except ValueError:
        settings = {}
    trained_on, base = settings.get("data_dir"), settings.get("model")
    base = base if base and Path(str(base)).is_dir() else None
    return {"the model's run folder": run, "the data folder": getattr(a, "data_dir", None) or default_data_dir(),
            "the data the model was trained on": trained_on, "the model it was trained from": base}


def _default(path: Path) -> Path:
    """An output at a path attnkit chose (no --output given): a file there that attnkit did not write is kept."""
    path = check_side_file(path, "the default output (give --output to write elsewhere)")
    _lock_run_of(path)
    return path


def _output(a, path, option: str) -> Path:
    """An output file the user named (``path``), checked before anything is written (see check_output_file)."""
    path = check_output_file(path, option, _protected(a))
    _lock_run_of(path)
    return path


#: the locks this command holds on run folders it writes into (see output_locks)
_LOCKS: dict = {"stack": None, "held": set()}


@contextlib.contextmanager
def output_locks():
    """While a command runs: every run folder it writes an output into is locked (the first time an output there is
    checked), so that no training run moves the run aside, or replaces its model, under the output; and it refuses at
    once if another attnkit process is writing that run folder. Released when the command ends."""
    outer = dict(_LOCKS)
    with contextlib.ExitStack() as stack:
        _LOCKS.update(stack=stack, held=set())
        try:
            yield
        finally:
            _LOCKS.update(outer)


def _lock_run_of(path: str | os.PathLike) -> None:
    """Hold the lock of the run folder (a folder with attnkit's record of a run) that ``path`` lies in, if any."""
    stack = _LOCKS["stack"]
    if stack is None:
        return
    here = Path(path).expanduser().resolve().parent
    run = next((q for q in (here, *here.parents) if (q / RUN_RECORD).is_file()), None)
    if run is None or run in _LOCKS["held"]:
        return
    stack.enter_context(folder_lock(run, way_out=f"write {path} outside that folder"))  # no --output-dir here
    _LOCKS["held"].add(run)


def _input_file(path: str, option: str) -> Path:
    """An input file the user named: it exists and is a regular file (a folder, a named pipe or a device is named so)."""
    p = Path(path)
    try:
        mode = p.stat().st_mode
    except FileNotFoundError:
        raise UserError(f"{option} {p} {path_problem(p)}") from None
    except OSError as e:
        raise UserError(f"{option} {p} cannot be read: {e.strerror or e}") from None
    if stat.S_ISDIR(mode):
        raise UserError(f"{option} {p} is a folder, not a file")
    if not stat.S_ISREG(mode):
        kind = ("a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
                else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "a special file")
        raise UserError(f"{option} {p} is {kind}, not a regular file: write the texts into a file and give its name")
    return p


def _model_and_split(a, check=None):
    """The model named by --model and the --split of --task (default: the task it was trained on); ``check(model)``
    runs once the model is loaded, before any data is read (so that a model the command cannot use says so first)."""
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
        raise UserError(f"task {task} has no {a.split} split (it has {', '.join(data.splits)})")
    return d, model, tok, task, data, data.splits[a.split]


def cmd_evaluate(a) -> int:
    if a.plot:
        figure_path(a.plot, f"--plot {a.plot}: the HANS chart")  # before the model loads
    if a.output and Path(a.output).suffix.lower() != ".json":
        raise UserError(f"--output {a.output}: the metrics file must end in .json")
    d, model, tok = load_for_inference(a.model, qa_ok=True)
    task = a.task or run_info(d).get("task")
    if not task:
        raise UserError("--task is needed: the checkpoint does not record what it was trained on")
    ignored = [f"{o} {v}" for o, v in (("--hans-per-subcase", a.hans_per_subcase), ("--plot", a.plot)) if v is not None]
    if ignored and task != "hans":
        raise UserError(f"{', '.join(ignored)}: only with --task hans")
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
    out = _output(a, a.output, "--output") if a.output else _default(d / f"eval_{task}_{a.split}.json")
    metrics = evaluate_split(model, tok, data.splits[a.split], batch_size=a.batch_size, max_length=a.max_length, kind=data.metric)
    metrics = {"task": task, "split": a.split, "model": str(d), **metrics, WRITTEN_BY: "attnkit evaluate"}
    write_json_atomic(out, metrics)
    for k, v in metrics.items():
        print(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}")
    print(f"[attnkit] metrics written to {out}")
    return 0


def _evaluate_hans(a, d: Path, model, tok) -> int:
    """HANS: entailment vs non-entailment (an NLI model's neutral and contradiction both count as non-entailment)."""
    root = Path(a.data_dir) if a.data_dir else default_data_dir()
    if root is None:
        raise UserError(f"HANS: no data folder; pass --data-dir holding {HANS_FILE}")
    path = root if root.is_file() else root / HANS_FILE  # --data-dir may name the HANS file itself
    ent = entailment_index(label_names_of(model))
    out = _output(a, a.output, "--output") if a.output else _default(d / "eval_hans.json")
    plot_path = _output(a, a.plot, "--plot") if a.plot else check_side_file(out.with_suffix(".png"), f"the HANS chart beside --output {out}")
    rows = hans_subset(read_hans(path), a.hans_per_subcase)
    logits = predict_logits(model, tok, rows["text"], rows["text_pair"], batch_size=a.batch_size, max_length=a.max_length)
    report = hans_report(rows, logits.argmax(-1) == ent)
    info = run_info(d)
    report = {"task": "hans", "file": str(path), "model": str(d), "model_trained_on": info.get("trained_on", info.get("task", "unknown")),
              "model_labels": label_names_of(model), **report, WRITTEN_BY: "attnkit evaluate"}
    with output_batch():  # the results and the chart, or neither
        write_json_atomic(out, report)
        plot = plot_hans(report, plot_path, title=f"HANS: {d.name} (trained on {report['model_trained_on']})"[:100])
    print(f"HANS accuracy {report['accuracy']:.4f} on {report['n']} pairs (model trained on {report['model_trained_on']})")
    for h, by in report["heuristic"].items():
        print(f"  {h:<16} " + "  ".join(f"{g} {v:.3f}" for g, v in by.items()))
    print(f"[attnkit] per-subcase results written to {out}; chart {plot}")
    return 0


def _qa_model(model) -> bool:
    return is_qa_model(model.config)


def _qa_stride(d: Path, max_length: int) -> int | None:
    """The window overlap the QA model was trained with, if ``max_length`` is its training length (else the default)."""
    info = run_info(d)
    return info.get("doc_stride") if info.get("max_length") == max_length else None


def _evaluate_qa(a, d: Path, model, tok, task: str) -> int:
    """Span QA: EM/F1 (SQuAD v1.1) on a split, plus every prediction."""
    if not _qa_model(model):
        raise UserError(f"task {task} is span QA but {d} is a classifier")
    splits = load_squad(a.data_dir)
    if a.split not in splits:
        raise UserError(f"task {task} has no {a.split} split (it has {', '.join(splits)})")
    out = _output(a, a.output, "--output") if a.output else _default(d / f"eval_{task}_{a.split}.json")
    answers = check_side_file(out.with_name(out.stem + "_predictions.json"), f"the answers beside --output {out}")
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
        if not isinstance(row.get("question"), str) or not isinstance(row.get("context"), str):
            raise DataFormatError(p, line, 'expected {"question": "...", "context": "..."} for a question-answering model')
        qs.append(row["question"])
        cs.append(row["context"])
    return qs, cs


def _write_jsonl(rows: list[dict], output: str | None, what: str) -> None:
    """JSON lines to ``output``, or to standard output."""
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if output:
        write_text_atomic(output, lines)
        record_output(output, "attnkit predict")  # JSON lines carry no mark: the folder's ledger says attnkit wrote it
        print(f"[attnkit] {len(rows)} {what} written to {output}")
    else:
        sys.stdout.write(lines)


def _predict_qa(a, d: Path, model, tok) -> int:
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
    d, model, tok, task, data, ds = _model_and_split(a)
    if a.output_dir and not (data.submission or {}).get(a.split):
        raise UserError(f"--output-dir {a.output_dir}: only for a GLUE test split's submission file; task {task} {a.split} "
                        "writes JSON lines (--output)")
    if task != "hans" and list(data.label_names) != label_names_of(model):  # as evaluate: else its labels pass for the task's
        raise UserError(f"task {task} has labels {list(data.label_names)} but {d} predicts {label_names_of(model)}: "
                        "give the --task it was trained on")
    submission = (data.submission or {}).get(a.split)
    if submission:  # the GLUE file: a file of that name attnkit did not write is the user's, never replaced
        folder = Path(a.output_dir) if a.output_dir else d / "glue_submission"
        if folder.exists() and not folder.is_dir():
            raise UserError(f"--output-dir {folder} is a file, not a folder")
        out = check_side_file(folder / submission, "the GLUE submission file (give another --output-dir)")
        _lock_run_of(out)
    else:
        out = _output(a, a.output, "--output") if a.output else _default(d / f"predictions_{task}_{a.split}.jsonl")
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
        return _predict_split(a)
    if not (a.texts or a.file or a.question or a.context):  # before loading the model: nothing to do
        raise UserError("nothing to predict: give texts as arguments, --file with one text per line, or --question and --context")
    ignored = [f"{o} {v}" for o, v in (("--task", a.task), ("--output-dir", a.output_dir), ("--data-dir", a.data_dir)) if v is not None]
    if ignored:
        raise UserError(f"{', '.join(ignored)}: only with --split (predicting a whole split of a task)")
    if a.file:
        _input_file(a.file, "--file")
    if a.output:
        _output(a, a.output, "--output")
        check_not_input(a.output, "--output", {"--file": a.file})
    for i, t in enumerate(a.texts, 1):
        if is_blank(t):
            raise UserError(f"text {i} of the command line is empty: a model cannot label an empty text")
    d, model, tok = load_for_inference(a.model, qa_ok=True)
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
    if a.output is None:
        a.output = str(_default(Path("attention.png")))
    figure_path(a.output, f"--output {a.output}: the heatmap")
    if a.html and Path(a.html).suffix.lower() not in (".html", ".htm"):
        raise UserError(f"--html {a.html}: the page file must end in .html")
    outputs = {"--output": a.output, "--stats": a.stats, "--html": a.html}
    for option, path in outputs.items():  # every output checked before the first is written: a failure writes nothing
        if path:
            _output(a, path, option)
    given = {k: str(Path(v).expanduser().resolve()) for k, v in outputs.items() if v}
    if len(set(given.values())) < len(given):
        raise UserError(f"{', '.join(f'{k} {outputs[k]}' for k in given)}: each output needs a file of its own")
    if is_blank(a.text):
        raise UserError("the text to explain is empty")
    _, model, tok = load_for_inference(a.model, qa_ok=True)
    maps = attention_maps(model, tok, a.text, max_length=a.max_length)
    st = maps.stats()
    with output_batch():  # the heatmap, --stats and --html together: if one cannot be written, none replaces its earlier file
        try:
            path = plot_attention(maps, a.output, layer=a.layer, head=a.head)
        except ValueError as e:
            raise UserError(str(e)) from None
        if a.stats:
            write_json_atomic(a.stats, {**st, WRITTEN_BY: "attnkit explain"})
        page = write_html(maps, a.html, title=f'attnkit: {a.text[:60]}') if a.html else None
        if page is not None:
            record_output(page, "attnkit explain")  # made once the page is in place

    print(f"attention: {maps.attention}")
    print("span head: start/end logits per token" if _qa_model(model) else f"classifier reads: the {head_of(model.config).describe()}")
    print(f"tokens: {' '.join(maps.tokens)}")
    print(f"exact zeros: {st['zero_fraction']:.1%}; support per row: mean {st['mean_support']:.2f}, max {st['max_support']}")
    if a.layer is not None and a.head is not None:
        sizes = maps.support_sizes()[a.layer, a.head]
        print("support size per row: " + ", ".join(f"{t}={int(s)}" for t, s in zip(maps.tokens, sizes)))
    print(f"[attnkit] heatmap written to {path}")
    if page is not None:
        print(f"[attnkit] interactive view written to {page}")
    return 0


def cmd_layer_weights(a) -> int:
    if a.output is None:
        a.output = str(_default(Path("layer_weights.png")))
    figure_path(a.output, f"--output {a.output}: the chart")
    _output(a, a.output, "--output")
    js = check_side_file(Path(a.output).with_suffix(".json"), f"the layer weights beside --output {a.output}")
    d, model, tok, task, data, ds = _model_and_split(a, check=check_layer_weights)
    ds = ds.select(range(min(a.max_samples, len(ds))))
    pairs = list(ds["text_pair"]) if "text_pair" in ds.column_names else None
    w = layer_weights(model, tok, list(ds["text"]), pairs, batch_size=a.batch_size, max_length=a.max_length)
    name = d.parent.name if d.name == MODEL_DIR else d.name
    with output_batch():  # the chart and its values, or neither
        path = plot_layer_weights(w, a.output, title=f"{name}: {task} {a.split} ({len(ds)} texts)")
        write_json_atomic(js, {**w, WRITTEN_BY: "attnkit layer-weights"})
    for k in ("se_mean", "mix"):
        if k in w:
            print(f"{k}: " + " ".join(f"L{i + 1}={x:.3f}" for i, x in enumerate(w[k])))
    print(f"[attnkit] layer weights drawn to {path} (values in {js})")
    return 0


def cmd_pretrain(a) -> int:
    if a.lam != PretrainConfig.lam and normaliser(a.attention).setting != "lam":
        raise UserError(f"--lam {a.lam:g}: only {' or '.join(names_with(setting='lam'))} has a lam; the attention is {a.attention}")
    cfg = PretrainConfig(
        task=a.task, data_dir=a.data_dir, kind=a.kind, attention=a.attention, lam=a.lam, layers=a.layers, heads=a.heads,
        dim=a.dim, vocab_size=a.vocab_size, epochs=a.epochs, batch_size=a.batch_size, lr=a.lr, max_length=a.max_length,
        seed=a.seed, output_dir=a.output_dir, max_train_samples=a.max_train_samples, logging_steps=a.logging_steps,
        lemmatize=a.lemmatize, resume=not a.no_resume, score_scale=a.score_scale, head_mode=a.head_mode,
    )
    cfg.validate()
    m = pretrain(cfg)
    if m.get("already_complete"):
        print(f"[attnkit] the pre-training run in {cfg.output_dir} is already complete: nothing was changed (--no-resume runs it again)")
    print(f"\n[attnkit] MiniBERT {cfg.kind} {cfg.layers}x{cfg.heads}, d={cfg.dim}, {cfg.spec().describe()}; "
          f"{m['parameters']:,} parameters ({m['attention_parameters']:,} in attention), vocabulary {m['vocab_size']}")
    print(f"[attnkit] MLM loss on the training text {m['mlm_loss']:.4f} ({m['train_texts']} texts, {m['seconds']:.1f}s)")
    print(f"[attnkit] model + tokenizer written to {m['model_dir']}")
    print(f"[attnkit] metrics written to {Path(cfg.output_dir) / 'metrics.json'}")
    print(f"[attnkit] fine-tune with: attnkit train --task {cfg.task} --model {m['model_dir']}")
    return 0


def cmd_adapt(a) -> int:
    refuse_ignored(map_options_ignored(a, a.attention))
    d = AdaptConfig()
    tasks = a.task if a.task is not None else ([] if a.text_file else list(d.tasks))
    cfg = AdaptConfig(
        tasks=tasks, text_files=list(a.text_file or []), data_dir=a.data_dir, model=a.model, attention=a.attention,
        lam=d.lam if a.lam is None else a.lam, alpha=d.alpha if a.alpha is None else a.alpha, anneal=a.anneal, head_warmup=a.head_warmup,
        sparse_layers=a.sparse_layers, max_steps=a.max_steps, batch_size=a.batch_size, lr=a.lr, warmup_ratio=a.warmup,
        weight_decay=a.weight_decay, max_length=a.max_length, max_train_samples=a.max_train_samples, seed=a.seed,
        output_dir=a.output_dir, resume=not a.no_resume, logging_steps=a.logging_steps, save_steps=a.save_steps,
        precision=a.precision, keep_checkpoints=a.keep_checkpoints,
    )
    cfg.validate()
    if cfg.spec().normaliser.setting == "alpha" and cfg.alpha <= 1.01:
        raise UserError(f"--alpha {cfg.alpha:g}: the anneal starts at alpha 1.01; give a target above it (1.5: 1.5-entmax)")
    m = adapt(cfg)
    if not is_main_process():
        return 0
    out = Path(cfg.output_dir)
    if m.get("already_complete"):
        print(f"[attnkit] the adapt run in {out} is already complete: nothing was changed (--no-resume runs it again)")
    r = m["adapted"]
    zs = r.get("zero_share") or []
    loss = r.get("mlm_loss")  # null in metrics.json where it was not a number (its non_finite says so)
    loss = f"{loss:.4f}" if isinstance(loss, (int, float)) and math.isfinite(loss) else "not a number (see metrics.json)"
    print(f"\n[attnkit] adapted {cfg.model} to {cfg.spec().describe()}: {r['steps']} MLM steps on {r['texts']['texts']:,} texts "
          f"({r['seconds']:.0f}s); MLM loss {loss}"
          + (f"; {r['texts']['texts_used']:,} of them used (--max-train-samples)" if "texts_used" in r["texts"] else ""))
    if zs:
        print("[attnkit] attention weights exactly 0, per layer: " + " ".join(f"L{i}={z:.0%}" for i, z in enumerate(zs)))
    print(f"[attnkit] encoder written to {out / MODEL_DIR}")
    print(f"[attnkit] fine-tune with: attnkit train --model {out} --attention {cfg.attention} --task ...")
    return 0


def cmd_words(a) -> int:
    if a.output is None:
        a.output = str(_default(Path("words.png")))
    figure_path(a.output, f"--output {a.output}: the chart")
    _output(a, a.output, "--output")
    if a.json:
        js = _output(a, a.json, "--json")
        if Path(a.json).expanduser().resolve() == Path(a.output).expanduser().resolve():
            raise UserError(f"--json {a.json} is also --output: name another file")
    else:
        js = check_side_file(Path(a.output).with_suffix(".json"), f"the ranking beside --output {a.output} (name it with --json)")
    d, model, tok, task, data, ds = _model_and_split(a)
    texts = list(ds["text"])[: a.max_samples] if a.max_samples else list(ds["text"])
    names = label_names_of(model)
    readings = received_attention(model, tok, texts, batch_size=a.batch_size, max_length=a.max_length)
    ranking = rank_words(readings, names, top=a.top, min_count=a.min_count)
    result = {
        "model": str(d), "task": task, "split": a.split, "sentences": len(texts),
        "attention": spec_of(model.config).describe(), "min_count": a.min_count,
        "definition": "received(word) = sum over its word pieces of the column sum of the attention matrix over real "
                      "query tokens, averaged over layers and heads; ranked per predicted class by the mean over occurrences",
        "classes": ranking, WRITTEN_BY: "attnkit words",
    }
    with output_batch():  # the ranking and its chart, or neither
        write_json_atomic(js, result)
        png = plot_words(ranking, a.output, title=f"{task} {a.split}: most-attended words per predicted class ({result['attention']})")
    for name, r in ranking.items():
        top = ", ".join(f"{w['word']} {w['mean']:.2f}" for w in r["words"][:10])
        print(f"{name} ({r['predicted_sentences']} predicted): {top}")
    print(f"[attnkit] ranking written to {js}; chart written to {png}")
    return 0


def cmd_faithfulness(a) -> int:
    check_seed(a.seed)
    if a.ig_steps > 1000:
        raise UserError(f"--ig-steps {a.ig_steps}: expected at most 1000 (the steps of one text run as one batch)")
    if a.plot:
        figure_path(a.plot, f"--plot {a.plot}: the curves")
    d, model, tok, task, data, ds = _model_and_split(a)
    if "text_pair" in ds.column_names:
        raise UserError(f"task {task} pairs two texts: faithfulness explains single texts (removing words of a pair is not defined here)")
    if isinstance(tok, LemmatizingTokenizer):
        raise UserError(f"{d} reads lemmas: removing the user's words would not remove what it reads; faithfulness needs a model of plain words")
    out = _output(a, a.output, "--output") if a.output else _default(d / f"faithfulness_{task}_{a.split}.json")
    plot = _output(a, a.plot, "--plot") if a.plot else check_side_file(out.with_suffix(".png"), f"the curves beside --output {out}")
    texts, rationales = list(ds["text"]), None
    if task == "sst2-ptb":
        pairs = sst_rationales(a.data_dir or default_data_dir(), a.split)
        if [t for t, _ in pairs] != texts:
            raise UserError(f"the sst2-ptb {a.split} trees do not match the {a.split} split: cannot mark the sentiment words")
        rationales = [r for _, r in pairs]
    if a.max_examples:
        texts = texts[: a.max_examples]
        rationales = rationales[: a.max_examples] if rationales is not None else None
    clf = WordClassifier(model, tok, max_length=a.max_length, batch_size=a.batch_size, ig_steps=a.ig_steps)
    report = faithfulness_report(clf, texts, rationales=rationales, seed=a.seed)
    report = {"model": str(d), "task": task, "split": a.split, "attention": spec_of(model.config).describe(),
              "ig_steps": a.ig_steps, "seed": a.seed, **report, WRITTEN_BY: "attnkit faithfulness"}
    with output_batch():  # the measures and their curves, or neither
        write_json_atomic(out, report)
        plot_faithfulness(report, plot, title=f"{task} {a.split}, {report['attention']}: {report['examples']} texts")
    print(f"{report['examples']} texts of {task} {a.split}; attention: {report['attention']}")
    if report["texts_cut"]:
        print(f"[attnkit] notice: {report['texts_cut']} of the {report['examples']} texts are longer than --max-length "
              f"{report['max_length']} tokens and were cut there: the model read them in part, and their words past the cut "
              "score 0 in every explanation (a larger --max-length reads them whole; texts_cut in the output says how many)")
    lay = report.get("attention_layer")
    if lay:
        print(f"the attention explanation: the [CLS] row of layer {lay['layer']} ({lay['map']}), averaged over heads")
    print(f"{'explanation':<22} {'AOPC comp.':>10} {'AOPC suff.':>10}" + ("  plausibility AP" if rationales is not None else ""))
    for name, row in report["explanations"].items():
        ap = row.get("plausibility_auprc")
        print(f"{name:<22} {row['aopc_comprehensiveness']:>10.4f} {row['aopc_sufficiency']:>10.4f}"
              + (f"  {ap:.4f}" if ap is not None else ("  —" if rationales is not None else "")))
    for pair, tau in report["kendall_tau"].items():
        print(f"kendall tau {pair}: {'—' if tau is None else f'{tau:.3f}'}")
    print(f"[attnkit] measures written to {out}; curves drawn to {plot}")
    return 0


COMMANDS = {
    "train": cmd_train, "sweep": cmd_sweep, "pretrain": cmd_pretrain, "adapt": cmd_adapt, "evaluate": cmd_evaluate, "predict": cmd_predict,
    "explain": cmd_explain, "words": cmd_words, "layer-weights": cmd_layer_weights, "faithfulness": cmd_faithfulness,
}
