"""Fine-tuning, evaluation and prediction, on top of the Hugging Face Trainer.

The Trainer gives the loop, checkpoints, resumption and multi-process runs: launch
``attnkit train`` under ``torchrun``/``accelerate launch`` and it scales with no code of
ours. What is ours: building the model with its attention, the data, the metrics, and
writing ``metrics.json`` plus the best dev checkpoint (atomically) to ``<output>/model``.
"""

from __future__ import annotations
import logging
from pathlib import Path
import numpy as np
from transformers import DataCollatorWithPadding, set_seed
from attnkit.analysis.explain import plot_learned_lam
from attnkit.analysis.inference import refuse_labelled_in_part, text_lengths, truncation_line
from attnkit.attention import kernels
from attnkit.attention.learned import learned_values
from attnkit.attention.normalisers import LEARNED
from attnkit.errors import UserError
from attnkit.models.build import build_classifier
from attnkit.models.checkpoint import load_tokenizer, save_checkpoint
from attnkit.models.resolve import adapted_record
from attnkit.models.freeze import freeze_parameters
from attnkit.runfiles.names import RUN_INFO
from attnkit.runfiles.json_files import finite_record, read_json
from attnkit.runfiles.atomic import write_json_atomic
from attnkit.tasks import is_qa_task, load_task
from attnkit.tasks.squad import load_squad
from attnkit.tasks.lemmas import lemmatize_splits, lemmatizer
from attnkit.tasks.metrics import MAIN_METRIC, predictions_of, task_metrics
from attnkit.training.config import METRICS_FILE, MODEL_DIR, TrainConfig
from attnkit.training.pretrain import init_mini_checkpoint
from attnkit.training.run_folder import (
    changed_sources,
    check_resume,
    finished_metrics,
    prepare_output,
    run_folder,
    settings_record,
)
from attnkit.training.span_qa import train_qa
from attnkit.training.trainer import (
    AttnkitTrainer,
    best_checkpoint,
    check_finite,
    check_length,
    check_precision,
    check_warmups,
    finish_run,
    found_complete,
    fit,
    strip_prefix,
    subsample,
    training_arguments,
)
from attnkit.training.distill import DistillTrainer, load_teacher
from attnkit.training.schedules import schedule_callbacks


log = logging.getLogger("attnkit")


def metrics_fn(kind: str):
    """A Trainer ``compute_metrics`` for a task's metric kind (accuracy | mcc | f1 | regression)."""
    def compute(eval_pred) -> dict[str, float]:
        logits, labels = eval_pred.predictions, eval_pred.label_ids
        if isinstance(logits, tuple):
            logits = logits[0]
        return task_metrics(kind, labels, predictions_of(kind, logits))

    return compute


def tokenize_splits(splits, tokenizer, max_length: int):
    """Tokenise every split of a DatasetDict (text, optional text_pair) without padding. Returns the tokenised splits
    and, per split, ``(texts cut, longest)``: how many texts (pairs: both together) were longer than the tokens of text
    ``max_length`` leaves beside the special tokens, and the longest, in tokens of text."""
    has_pair = "text_pair" in next(iter(splits.values())).column_names
    extra = [c for c in ("idx",) if c in next(iter(splits.values())).column_names]
    special = tokenizer.num_special_tokens_to_add(has_pair)

    def enc(batch):
        sides = (batch["text"], batch["text_pair"]) if has_pair else (batch["text"],)
        out = tokenizer(*sides, truncation=True, max_length=max_length)
        return out | {"text_tokens": text_lengths(tokenizer, out["input_ids"], sides, max_length)}

    drop = (["text", "text_pair"] if has_pair else ["text"]) + extra
    done = splits.map(enc, batched=True, remove_columns=drop, desc="tokenising")
    cut = {}
    for name, ds in done.items():
        n = ds["text_tokens"]
        cut[name] = (sum(x > max_length - special for x in n), max(n, default=0))
    return done.remove_columns(["text_tokens"]), cut


def say_cut(cut: dict, splits, max_length: int, room: int, pairs: bool) -> dict:
    """One line where texts of the run's splits were cut to ``--max-length`` (the model reads only their first tokens),
    naming each split's count; returns ``{split: texts cut}`` for metrics.json."""
    named = {"train": "training", "validation": "dev"}
    parts = [(name, n, longest) for name, (n, longest) in cut.items() if n]
    if parts:
        counts = " and ".join(f"{n} of {len(splits[name])} {named.get(name, name)}" for name, n, _ in parts)
        counts += f" {'pairs of texts' if pairs else 'texts'} were"
        many = sum(n for _, n, _ in parts) > 1
        log.warning("%s", truncation_line(counts, many, max(l for *_, l in parts), max_length, room, pairs))
    return {name: n for name, (n, _) in cut.items()}


def hold_out(ds, fraction: float, seed: int):
    """(the rest, a seeded random ``fraction`` of ``ds``): the same examples for every run of the same seed and data,
    whatever its other settings, so that runs compared on the held-out part were all trained without it."""
    n = len(ds)
    k = round(n * fraction)
    if k < 1 or k >= n:
        raise UserError(f"--holdout {fraction:g}: {k} of the {n} training examples would be held out; "
                         "expected at least one held out and one left to train on")
    order = np.random.default_rng(seed).permutation(n)
    return ds.select(sorted(order[k:].tolist())), ds.select(sorted(order[:k].tolist()))


def _check_classes(cfg: TrainConfig, data, labels, what: str, before=None) -> None:
    """A classifier trained on one class learns nothing and reports a meaningless accuracy: refuse it. Classes of the
    whole training split (``before``) that none of ``labels`` has are said in one line: the model never learns them."""
    seen = sorted(set(labels))
    lost = sorted(set(before) - set(seen)) if before is not None else []
    if lost and len(seen) >= 2:
        names = [repr(data.label_names[i]) if 0 <= i < len(data.label_names) else str(i) for i in lost]
        log.warning("the %s hold no example of %d of the %d classes (%s%s): the model is never trained on them (a "
                    "larger share left for training, or more examples of those classes, keeps them)", what, len(lost), len(lost) + len(seen),
                    ", ".join(names[:5]), ", ..." if len(names) > 5 else "")
    if len(seen) < 2:
        names = [data.label_names[i] for i in seen if 0 <= i < len(data.label_names)]
        raise UserError(f"task {cfg.task}: the {what} holds one class only ({', '.join(map(repr, names)) or 'none'}"
                         f"{' in ' + str(cfg.data_dir) if cfg.data_dir else ''}): a classifier needs examples of at least two classes")


def _labelled(ds) -> bool:
    return ds is not None and len(ds) > 0 and min(list(ds["label"])) >= 0


def train(cfg: TrainConfig) -> dict:
    """Fine-tune, keep the best dev checkpoint, evaluate it; returns the metrics dict.

    The run folder is locked for the run; a finished run there with the same settings is returned as it is, one with
    other settings is refused (``--no-resume`` moves it aside once training starts), see :mod:`attnkit.training.run_folder`."""
    qa = is_qa_task(cfg.task)
    if qa:
        if cfg.lemmatize:
            raise UserError(f"task {cfg.task} (span QA) answers with spans of the original text: --lemmatize does not apply")
        if cfg.holdout:
            raise UserError(f"task {cfg.task} (span QA): --holdout applies to classification tasks")
        if not cfg.head().is_default or str(cfg.model).lower() in ("mini", "minibert") or cfg.freeze:
            raise UserError(f"task {cfg.task} (span QA) takes the model's own span head: no --layer-pooling/--se, --model mini or --freeze")
        if cfg.teacher is not None:
            raise UserError(f"task {cfg.task} (span QA): --teacher distils a classifier's predictions; span QA has no distillation")
    cfg.validate()
    check_precision(cfg)
    with run_folder(Path(cfg.output_dir)) as out:
        done = finished_metrics(cfg, out)
        if done is not None:
            _say_changed_inputs(cfg, out)
            return found_complete(cfg, out, done, done.get("main_metric", "f1" if qa else "accuracy"),
                                  title=f"{cfg.task}: {cfg.spec().describe()}")
        return train_qa(cfg, out, schedule_callbacks(cfg, cfg.spec())) if qa else _train_classifier(cfg, out)


def _say_changed_inputs(cfg: TrainConfig, out: Path) -> None:
    """One line where a finished run was made from other inputs (--model, --teacher, data) than those named now: it is
    kept as it is (a record of those), and the line says so and the way to train on these. Data that can no longer be
    read are not compared (the finished run is still returned)."""
    try:
        splits = load_squad(cfg.data_dir) if is_qa_task(cfg.task) else load_task(cfg.task, cfg.data_dir).splits
    except (OSError, ValueError):  # (UserError is a ValueError)
        splits = None
    changed = changed_sources(cfg, out, splits)
    if changed:
        log.warning("the run in %s was made from other inputs than those named now (%s): it is kept as it is, its results "
                    "those of the earlier inputs; --no-resume trains it afresh on these", out, "; ".join(changed))


def _train_classifier(cfg: TrainConfig, out: Path) -> dict:
    set_seed(cfg.seed)
    spec = cfg.spec()
    data, splits, lang = _classification_data(cfg, out)
    model_path = _starting_model(cfg, splits, out)
    tokenizer = load_tokenizer(model_path)
    check_length(cfg, model_path)
    tokenised, cut = tokenize_splits(splits, tokenizer, cfg.max_length)
    pairs = "text_pair" in splits["train"].column_names
    texts_cut = say_cut(cut, splits, cfg.max_length, cfg.max_length - tokenizer.num_special_tokens_to_add(pairs), pairs)
    train_ds, dev_ds, heldout, others = _datasets(cfg, data, tokenised)
    model = initial_classifier(cfg, data, model_path)
    frozen = freeze_parameters(model, cfg.freeze) if cfg.freeze else None
    trainer, teacher_path = _classification_trainer(cfg, data, out, model, tokenizer, train_ds, heldout if heldout is not None else dev_ds)
    if spec.is_sparse:  # a first run compiles the CPU kernel here (and says so), not inside the first step's ETA
        kernels.cpu_kernel()
    prepare_output(cfg, out, splits=data.splits)  # everything before training worked: only now --no-resume moves checkpoints aside
    train_result = fit(trainer, cfg)
    history = list(trainer.state.log_history)  # every logged loss and per-epoch dev metric (checkpoints go at the end)
    check_finite(trainer.model, cfg, history)
    metrics = {"train": dict(train_result.metrics)}
    metrics["validation"] = strip_prefix(trainer.evaluate(dev_ds, metric_key_prefix="eval"), "eval_")
    for name, ds in others.items():
        metrics[name] = strip_prefix(trainer.evaluate(ds, metric_key_prefix="test"), "test_")
    for split in ("validation", *others):  # timing of the Trainer's first evaluation of a model it did not train
        metrics[split].pop("model_preparation_time", None)
    metrics.update(best_checkpoint(trainer, cfg))
    metrics.update(_run_description(cfg, data, model, len(train_ds)))
    metrics["texts_cut"] = texts_cut  # per split: texts longer than --max-length reads, read in part
    learned = {kind: v for kind in LEARNED if (v := learned_values(trainer.model, kind)) is not None}  # [layers][heads]
    metrics.update({f"{kind}_learned": values for kind, values in learned.items()})
    if frozen is not None:
        metrics["frozen"] = {k: v for k, v in frozen.items() if k != "names"}
    if teacher_path is not None:
        metrics["teacher"] = {"model": teacher_path, "weight": cfg.distill_weight, "temperature": cfg.distill_temperature}
    adapted = adapted_record(model_path)
    if adapted is not None:
        metrics["adapted"] = adapted  # how the encoder this run started from was adapted (attnkit adapt)
    metrics["log_history"] = history
    if trainer.is_world_process_zero():
        _save_classifier(cfg, data, out, trainer, tokenizer, lang, metrics, learned)
    return metrics


def _classification_data(cfg: TrainConfig, out: Path):
    """The task's data (train and validation present and non-empty, every class trained on), lemmatised if the run
    reads lemmas; the folder's checkpoints checked against the settings. Returns (data, splits, lemma language)."""
    data = load_task(cfg.task, cfg.data_dir)
    splits = data.splits
    where = f" in {cfg.data_dir}" if cfg.data_dir else ""
    if "train" not in splits or "validation" not in splits:
        raise FileNotFoundError(f"task {cfg.task} needs a train and a validation split; only {', '.join(splits)} found"
                                f"{where} (is its train file missing?)")
    empty = [name for name in ("train", "validation") if len(splits[name]) == 0]
    if empty:  # e.g. a file of headers or blank lines only, or SST-2 from trees whose sentences are all neutral
        raise UserError(f"task {cfg.task}: the {' and '.join(empty)} split{'s' * (len(empty) > 1)} "
                        f"{'have' if len(empty) > 1 else 'has'} no examples{where}")
    if data.metric != "regression":
        _check_classes(cfg, data, splits["train"]["label"], "training split")
    check_resume(cfg, out, splits)  # checkpoints of other settings or inputs stop the run now; the folder changes only when training starts
    lang = model_lemmatize(cfg)
    return data, (lemmatize_splits(splits, lang) if lang else splits), lang


def _starting_model(cfg: TrainConfig, splits, out: Path) -> str:
    """The checkpoint the run starts from: ``cfg.model``, or for ``--model mini`` a MiniBERT (tokenizer + random
    weights) made from the training text only."""
    if str(cfg.model).lower() not in ("mini", "minibert"):
        return cfg.model
    if not cfg.head().is_default:  # refused before mini_init is written: it replaced a finished run's (sweep s24b)
        raise UserError("--layer-pooling/--se take a BERT-family encoder, not MiniBERT")
    train = splits["train"]
    texts = list(train["text"]) + (list(train["text_pair"]) if "text_pair" in train.column_names else [])
    return str(init_mini_checkpoint(texts, out / "mini_init", cfg.mini_shape(), cfg.spec(), seed=cfg.seed, extra={"task": cfg.task}))


def _datasets(cfg: TrainConfig, data, enc):
    """(train, dev, held-out part of train or None, every other labelled split) of the tokenised splits ``enc``."""
    train_ds = subsample(enc["train"], cfg.max_train_samples, cfg.seed)
    heldout = None
    if cfg.holdout:
        train_ds, heldout = hold_out(train_ds, cfg.holdout, cfg.seed)
    dev_ds = subsample(enc["validation"], cfg.max_eval_samples, cfg.seed)
    check_warmups(cfg, len(train_ds))
    if data.metric != "regression" and (cfg.max_train_samples is not None or cfg.holdout):
        what = "--max-train-samples" if not cfg.holdout else "--holdout" if cfg.max_train_samples is None else "--max-train-samples, --holdout"
        _check_classes(cfg, data, train_ds["label"], f"{len(train_ds)} training examples left for training ({what})",
                       before=enc["train"]["label"])
    # every other labelled split is evaluated at the end (test, MNLI's validation_mismatched, ...); one without labels is
    # said (it was skipped without a word), one labelled in part refused now, not found out after training
    others = {}
    for k, v in enc.items():
        if k in ("train", "validation") or v is None or len(v) == 0:
            continue
        if _labelled(v):
            others[k] = subsample(v, cfg.max_eval_samples, cfg.seed)
            continue
        refuse_labelled_in_part(v["label"], f"the {k} split of task {cfg.task}", "score it at the end of the run")
        log.warning("the %s split of task %s has no labels: it is not scored (`attnkit predict --model <run> --split %s` "
                    "labels its texts)", k, cfg.task, k)
    if heldout is not None:
        if "heldout" in enc:
            raise UserError(f"task {cfg.task} has a split named 'heldout' already: --holdout would hide it")
        others["heldout"] = heldout
    return train_ds, dev_ds, heldout, others


def _classification_trainer(cfg: TrainConfig, data, out: Path, model, tokenizer, train_ds, eval_ds):
    """The Trainer of a classification run (a distilling one with ``--teacher``) and the teacher's path (or None).
    ``eval_ds`` chooses the checkpoint kept: dev, or with --holdout the held-out part of train (dev is then scored
    once, at the end, by a model never chosen on it)."""
    distill, teacher_path = {}, None
    if cfg.teacher is not None:
        teacher, teacher_path = load_teacher(cfg, data, tokenizer)
        distill = {"teacher": teacher, "distill_weight": cfg.distill_weight, "distill_temperature": cfg.distill_temperature}
    trainer = (DistillTrainer if distill else AttnkitTrainer)(
        **distill, model=model, args=training_arguments(cfg, out, MAIN_METRIC[data.metric]), head_lr=cfg.head_lr,
        pooling_lr=cfg.pooling_lr, train_dataset=train_ds, eval_dataset=eval_ds, data_collator=DataCollatorWithPadding(tokenizer),
        processing_class=tokenizer, compute_metrics=metrics_fn(data.metric), callbacks=schedule_callbacks(cfg, cfg.spec()),
    )
    return trainer, teacher_path


def _run_description(cfg: TrainConfig, data, model, train_size: int) -> dict:
    """What metrics.json says of the run besides its scores: attention, head, task, precision, sizes."""
    return {"attention": cfg.spec().to_dict(), "head": cfg.head().to_dict(), "main_metric": MAIN_METRIC[data.metric],
           "task": cfg.task, "precision": cfg.precision,  # the dev/test scores were taken in it too (bf16: under autocast)
           "train_size": train_size, "parameters": sum(p.numel() for p in model.parameters())}


def _save_classifier(cfg: TrainConfig, data, out: Path, trainer, tokenizer, lang, metrics: dict, learned: dict) -> None:
    """The trained model, its settings, metrics.json, curves and the learned settings' charts (rank 0 only)."""
    spec, head = cfg.spec(), cfg.head()
    model_dir = save_checkpoint(
        trainer.model, out / MODEL_DIR, tokenizer,
        extra={"task": cfg.task, "label_names": data.label_names, "trained_on": data.description, "metric": data.metric,
               "max_length": cfg.max_length, "lemmatize": lang, "precision": cfg.precision},
    )
    metrics["model_dir"] = str(model_dir)
    write_json_atomic(out / "run_config.json", settings_record(cfg, attention_spec=spec.to_dict(), head_spec=head.to_dict()))
    write_json_atomic(out / METRICS_FILE, finite_record(metrics))  # a NaN (grad_norm, a copied record): null, and where
    finish_run(cfg, out, metrics["log_history"], MAIN_METRIC[data.metric], title=f"{cfg.task}: {spec.describe()}")
    for kind, values in learned.items():
        for ext in ("png", "svg"):
            plot_learned_lam(values, out / f"{kind}_learned.{ext}", start=getattr(spec, kind), title=f"{cfg.task}: learned {kind}", name=kind)


def initial_classifier(cfg: TrainConfig, data, model_path: str | None = None):
    """The classifier a run of ``cfg`` on ``data`` (a loaded task) starts from: ``cfg``'s attention and head on
    ``model_path`` (default ``cfg.model``), before its first step. It draws the new weights (the head; every weight with
    ``--from-scratch``) from torch's generator as it stands: train() seeds it with ``cfg.seed`` first, and so must a
    caller who wants the same model (Figure 4 of ``benchmarks/sesame_paper.py`` does)."""
    regression = data.metric == "regression"
    return build_classifier(
        model_path or cfg.model, 1 if regression else len(data.label_names), cfg.spec(), label_names=data.label_names,
        from_scratch=cfg.from_scratch, head=cfg.head(), problem_type="regression" if regression else None,
    )


def model_lemmatize(cfg: TrainConfig) -> str | None:
    """The lemmatisation language of a run: ``cfg.lemmatize``, else that of the checkpoint it starts from
    (a MiniBERT pre-trained on lemmas reads lemmas); a conflict between the two is an error."""
    stored = None
    run = Path(str(cfg.model)).expanduser()
    for f in (run / RUN_INFO, run / MODEL_DIR / RUN_INFO):
        if f.is_file():
            stored = read_json(f, "what training recorded beside a model").get("lemmatize")
            break
    if cfg.lemmatize and stored and cfg.lemmatize != stored:
        raise UserError(f"--lemmatize {cfg.lemmatize}: the model {cfg.model} was trained on {stored} lemmas")
    lang = cfg.lemmatize or stored
    if lang:
        lemmatizer(lang)  # an unknown language fails here, naming the setting
    return lang
