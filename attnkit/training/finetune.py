"""Fine-tuning, evaluation and prediction, on top of the Hugging Face Trainer.

The Trainer gives the loop, checkpoints, resumption and multi-process runs: launch
``attnkit train`` under ``torchrun``/``accelerate launch`` and it scales with no code of
ours. What is ours: building the model with its attention, the data, the metrics, and
writing ``metrics.json`` plus the best dev checkpoint (atomically) to ``<output>/model``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from transformers import DataCollatorWithPadding, TrainerCallback, set_seed

from attnkit.analysis.explain import plot_learned_lam
from attnkit.attention import kernels
from attnkit.attention.learned import learned_values
from attnkit.attention.normalisers import LEARNED
from attnkit.attention.spec import AttentionSpec, spec_of
from attnkit.errors import UserError
from attnkit.models.build import build_classifier
from attnkit.models.checkpoint import load_model, load_tokenizer, save_checkpoint, set_attention
from attnkit.models.freeze import freeze_parameters
from attnkit.models.resolve import checkpoint_dir
from attnkit.runfiles.names import RUN_INFO
from attnkit.runfiles.json_files import finite_record, path_problem, read_json
from attnkit.runfiles.atomic import write_json_atomic
from attnkit.tasks import is_qa_task, load_task
from attnkit.tasks.lemmas import lemmatize_splits, lemmatizer
from attnkit.tasks.metrics import MAIN_METRIC, predictions_of, task_metrics
from attnkit.training.config import METRICS_FILE, MODEL_DIR, TrainConfig
from attnkit.training.pretrain import init_mini_checkpoint
from attnkit.training.run_folder import (
    check_resume,
    finished_metrics,
    prepare_output,
    run_folder,
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
    fit,
    strip_prefix,
    subsample,
    training_arguments,
)

log = logging.getLogger("attnkit")


# ----------------------------------------------------------------------------- metrics


def metrics_fn(kind: str):
    """A Trainer ``compute_metrics`` for a task's metric kind (accuracy | mcc | f1 | regression)."""
    def compute(eval_pred) -> dict[str, float]:
        logits, labels = eval_pred.predictions, eval_pred.label_ids
        if isinstance(logits, tuple):
            logits = logits[0]
        return task_metrics(kind, labels, predictions_of(kind, logits))

    return compute


# ----------------------------------------------------------------------------- lam schedule

#: --lam-warmup starts at the lam whose scale 1 / (1 - lam) is this many times smaller (a denser map)
LAM_WARMUP_FACTOR = 4.0


def warmup_lam(target: float, step: int, warmup_steps: int) -> float:
    """lam at ``step`` of a warm-up that starts denser and reaches ``target`` at ``warmup_steps``.

    The temperature ``1 - lam`` falls linearly from ``LAM_WARMUP_FACTOR * (1 - target)`` to ``1 - target``.
    """
    if warmup_steps <= 0 or step >= warmup_steps:
        return target
    t0 = LAM_WARMUP_FACTOR * (1.0 - target)
    return 1.0 - (t0 + (1.0 - target - t0) * step / warmup_steps)


def lam_warmup_callback(target: float, warmup: float):
    """A TrainerCallback that sets the model's lam before every step (resumes at the right lam);
    ``warmup``: a fraction of the steps (< 1) or a step count, independent of the learning-rate warm-up."""
    class LamWarmup(TrainerCallback):
        def _set(self, args, state, model):
            steps = int(warmup * state.max_steps) if warmup < 1 else int(warmup)
            lam = warmup_lam(target, state.global_step, steps)
            d = spec_of(model.config).to_dict() | {"lam": lam}
            set_attention(model, AttentionSpec(**d))

        def on_step_begin(self, args, state, control, model=None, **kw):
            self._set(args, state, model)

        def on_train_end(self, args, state, control, model=None, **kw):
            self._set(args, state, model)  # the target lam, whatever step training stopped at

    return LamWarmup()


def schedule_callbacks(cfg: TrainConfig, spec: AttentionSpec) -> list | None:
    """The attention schedules a run asks for (lam warm-up, softmax-to-sparse alpha warm-up), as Trainer callbacks."""
    cbs = ([lam_warmup_callback(spec.lam, cfg.lam_warmup)] if cfg.lam_warmup else []) + ([alpha_warmup_callback(cfg.alpha_warmup)] if cfg.alpha_warmup else [])
    return cbs or None


def alpha_warmup_callback(warmup: float):
    """A TrainerCallback for the softmax-to-sparse schedule: before every step the entmax maps' ``alpha_mix`` is
    ``step / warm-up steps`` (alpha = 1, softmax, at step 0; the target alpha from the end of the warm-up on);
    ``warmup``: a fraction of the steps (< 1) or a step count."""
    class AlphaWarmup(TrainerCallback):
        def _set(self, state, model, end: bool = False):
            steps = int(warmup * state.max_steps) if warmup < 1 else int(warmup)
            mix = 1.0 if end or steps <= 0 else min(1.0, state.global_step / steps)
            if spec_of(model.config).alpha_mix != mix:
                set_attention(model, replace(spec_of(model.config), alpha_mix=mix))

        def on_step_begin(self, args, state, control, model=None, **kw):
            self._set(state, model)

        def on_train_end(self, args, state, control, model=None, **kw):
            self._set(state, model, end=True)  # the target alpha, whatever step training stopped at

    return AlphaWarmup()


# ----------------------------------------------------------------------------- distillation


class DistillTrainer(AttnkitTrainer):
    """:class:`AttnkitTrainer` whose loss also pulls the student towards a fine-tuned teacher's predictions:
    ``(1 - w) * CE(labels) + w * T^2 * KL(softmax(teacher / T) || softmax(student / T))`` (Hinton et al. 2015); the
    teacher's logits are computed for each batch, in eval mode and without gradient."""

    def __init__(self, *args, teacher=None, distill_weight: float = 0.5, distill_temperature: float = 2.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.teacher, self.distill_weight, self.distill_temperature = teacher, distill_weight, distill_temperature
        for p in teacher.parameters():
            p.requires_grad_(False)
        teacher.eval()

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        ce = outputs["loss"]
        dev = next(model.parameters()).device
        if next(self.teacher.parameters()).device != dev:
            self.teacher.to(dev)
        with torch.no_grad():
            t_logits = self.teacher(**{k: v for k, v in inputs.items() if k != "labels"}).logits
        T, w = self.distill_temperature, self.distill_weight
        s_logits = outputs["logits"]
        kl = F.kl_div(F.log_softmax(s_logits.float() / T, dim=-1), F.log_softmax(t_logits.float() / T, dim=-1),
                      log_target=True, reduction="batchmean") * (T * T)
        loss = (1.0 - w) * ce + w * kl
        return (loss, outputs) if return_outputs else loss


def load_teacher(cfg: TrainConfig, data, tokenizer):
    """The ``--teacher`` model, checked to be a classifier of the task's labels that reads the same tokens."""
    path = str(checkpoint_dir(cfg.teacher) or cfg.teacher)
    if not Path(path).expanduser().exists():
        raise FileNotFoundError(f"--teacher {cfg.teacher} {path_problem(path, 'folder')} (expected a run folder or model folder of a fine-tuned classifier)")
    teacher = load_model(path)
    names = [teacher.config.id2label[i] for i in range(teacher.config.num_labels)] if teacher.config.id2label else []
    if data.metric == "regression" or list(map(str, names)) != list(map(str, data.label_names)):
        raise UserError(f"--teacher {cfg.teacher}: its labels {names} are not task {cfg.task}'s {data.label_names}: "
                         "distil from a model fine-tuned on the same task")
    t_vocab = load_tokenizer(path).get_vocab()
    if t_vocab != tokenizer.get_vocab():
        raise UserError(f"--teacher {cfg.teacher}: its tokenizer differs from the student's ({cfg.model}): the teacher must "
                         "read the same token ids (fine-tune both from the same encoder)")
    return teacher, path


# ----------------------------------------------------------------------------- data


def tokenize_splits(splits, tokenizer, max_length: int):
    """Tokenise every split of a DatasetDict (text, optional text_pair) without padding."""
    has_pair = "text_pair" in next(iter(splits.values())).column_names
    extra = [c for c in ("idx",) if c in next(iter(splits.values())).column_names]

    def enc(batch):
        if has_pair:
            return tokenizer(batch["text"], batch["text_pair"], truncation=True, max_length=max_length)
        return tokenizer(batch["text"], truncation=True, max_length=max_length)

    drop = (["text", "text_pair"] if has_pair else ["text"]) + extra
    return splits.map(enc, batched=True, remove_columns=drop, desc="tokenising")


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


def _check_classes(cfg: TrainConfig, data, labels, what: str) -> None:
    """A classifier trained on one class learns nothing and reports a meaningless accuracy: refuse it."""
    seen = sorted(set(labels))
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
            log.warning("the run in %s is complete (metrics.json, model/): nothing to do; --no-resume trains it again", out)
            return done | {"already_complete": True}
        return train_qa(cfg, out, schedule_callbacks(cfg, cfg.spec())) if qa else _train_classifier(cfg, out)


def _train_classifier(cfg: TrainConfig, out: Path) -> dict:
    set_seed(cfg.seed)
    spec = cfg.spec()
    head = cfg.head()
    data = load_task(cfg.task, cfg.data_dir)
    splits = data.splits
    if "train" not in splits or "validation" not in splits:
        raise FileNotFoundError(
            f"task {cfg.task} needs a train and a validation split; only {', '.join(splits)} found"
            f"{' in ' + str(cfg.data_dir) if cfg.data_dir else ''} (is its train file missing?)"
        )
    empty = [name for name in ("train", "validation") if len(splits[name]) == 0]
    if empty:  # e.g. a file of headers or blank lines only, or SST-2 from trees whose sentences are all neutral
        raise UserError(f"task {cfg.task}: the {' and '.join(empty)} split{'s' * (len(empty) > 1)} "
                         f"{'have' if len(empty) > 1 else 'has'} no examples{' in ' + str(cfg.data_dir) if cfg.data_dir else ''}")
    if data.metric != "regression":
        _check_classes(cfg, data, splits["train"]["label"], "training split")
    check_resume(cfg, out)  # checkpoints of other settings stop the run now; the folder changes only when training starts
    model_path = cfg.model
    lang = model_lemmatize(cfg)
    if lang:
        splits = lemmatize_splits(splits, lang)
    if str(cfg.model).lower() in ("mini", "minibert"):  # MiniBERT from scratch: tokenizer + random init on train text only
        texts = list(splits["train"]["text"]) + (list(splits["train"]["text_pair"]) if "text_pair" in splits["train"].column_names else [])
        model_path = str(init_mini_checkpoint(
            texts, out / "mini_init", kind=cfg.kind or "sa", layers=cfg.layers or 1, heads=cfg.heads or 1,
            dim=cfg.dim or 32, vocab_size=cfg.vocab_size or 4000, spec=spec, seed=cfg.seed, extra={"task": cfg.task},
            score_scale=cfg.score_scale or "sqrt", head_mode=cfg.head_mode or "split",
        ))
    tokenizer = load_tokenizer(model_path)
    check_length(cfg, model_path)
    enc = tokenize_splits(splits, tokenizer, cfg.max_length)
    train_ds = subsample(enc["train"], cfg.max_train_samples, cfg.seed)
    heldout = None
    if cfg.holdout:
        train_ds, heldout = hold_out(train_ds, cfg.holdout, cfg.seed)
    dev_ds = subsample(enc["validation"], cfg.max_eval_samples, cfg.seed)
    check_warmups(cfg, len(train_ds))
    if data.metric != "regression" and (cfg.max_train_samples is not None or cfg.holdout):
        what = "--max-train-samples" if not cfg.holdout else "--holdout" if cfg.max_train_samples is None else "--max-train-samples, --holdout"
        _check_classes(cfg, data, train_ds["label"], f"{len(train_ds)} training examples left for training ({what})")
    # every other labelled split is evaluated at the end (test, MNLI's validation_mismatched, ...)
    others = {k: subsample(v, cfg.max_eval_samples, cfg.seed) for k, v in enc.items() if k not in ("train", "validation") and _labelled(v)}
    if heldout is not None:
        if "heldout" in enc:
            raise UserError(f"task {cfg.task} has a split named 'heldout' already: --holdout would hide it")
        others["heldout"] = heldout

    model = initial_classifier(cfg, data, model_path)
    frozen = None
    if cfg.freeze:
        frozen = freeze_parameters(model, cfg.freeze)
    args = training_arguments(cfg, out, MAIN_METRIC[data.metric])
    collator = DataCollatorWithPadding(tokenizer)
    distill = {}
    if cfg.teacher is not None:
        teacher, teacher_path = load_teacher(cfg, data, tokenizer)
        distill = {"teacher": teacher, "distill_weight": cfg.distill_weight, "distill_temperature": cfg.distill_temperature}
    trainer = (DistillTrainer if distill else AttnkitTrainer)(
        **distill,
        model=model,
        args=args,
        head_lr=cfg.head_lr,
        pooling_lr=cfg.pooling_lr,
        train_dataset=train_ds,
        # with --holdout the checkpoint kept (and the per-epoch curve) is chosen on the held-out part: dev is scored
        # once, at the end, by a model that never saw it chosen on it
        eval_dataset=heldout if heldout is not None else dev_ds,
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=metrics_fn(data.metric),
        callbacks=schedule_callbacks(cfg, spec),
    )
    if spec.is_sparse:  # a first run compiles the CPU kernel here (and says so), not inside the first step's ETA
        kernels.cpu_kernel()
    prepare_output(cfg, out)  # everything before training worked: only now --no-resume moves checkpoints aside
    train_result = fit(trainer, cfg)
    history = list(trainer.state.log_history)  # every logged loss and per-epoch dev metric (checkpoints go at the end)
    check_finite(trainer.model, cfg, history)

    metrics: dict = {"train": dict(train_result.metrics)}
    metrics["validation"] = strip_prefix(trainer.evaluate(dev_ds, metric_key_prefix="eval"), "eval_")
    for name, ds in others.items():
        metrics[name] = strip_prefix(trainer.evaluate(ds, metric_key_prefix="test"), "test_")
    metrics.update(best_checkpoint(trainer, cfg))
    metrics["attention"] = spec.to_dict()
    metrics["head"] = head.to_dict()
    metrics["main_metric"] = MAIN_METRIC[data.metric]
    metrics["task"] = cfg.task
    metrics["precision"] = cfg.precision  # the dev/test scores above were taken in it too (bf16: under autocast)
    metrics["train_size"] = len(train_ds)
    metrics["parameters"] = sum(p.numel() for p in model.parameters())
    learned = {kind: learned_values(trainer.model, kind) for kind in LEARNED}
    learned = {kind: v for kind, v in learned.items() if v is not None}  # [layers][heads] of lam or alpha
    for kind, values in learned.items():
        metrics[f"{kind}_learned"] = values
    if frozen is not None:
        metrics["frozen"] = {k: v for k, v in frozen.items() if k != "names"}
    if distill:
        metrics["teacher"] = {"model": teacher_path, "weight": cfg.distill_weight, "temperature": cfg.distill_temperature}
    adapted = _adapted_record(model_path)
    if adapted is not None:
        metrics["adapted"] = adapted  # how the encoder this run started from was adapted (attnkit adapt)
    metrics["log_history"] = history

    if trainer.is_world_process_zero():
        model_dir = save_checkpoint(
            trainer.model, out / MODEL_DIR, tokenizer,
            extra={"task": cfg.task, "label_names": data.label_names, "trained_on": data.description, "metric": data.metric,
                   "max_length": cfg.max_length, "lemmatize": lang, "precision": cfg.precision},
        )
        metrics["model_dir"] = str(model_dir)
        write_json_atomic(out / "run_config.json", asdict(cfg) | {"attention_spec": spec.to_dict(), "head_spec": head.to_dict()})
        write_json_atomic(out / METRICS_FILE, finite_record(metrics))  # a NaN (grad_norm, a copied record): null, and where
        finish_run(cfg, out, history, MAIN_METRIC[data.metric], title=f"{cfg.task}: {spec.describe()}")
        for kind, values in learned.items():
            for ext in ("png", "svg"):
                plot_learned_lam(values, out / f"{kind}_learned.{ext}", start=getattr(spec, kind), title=f"{cfg.task}: learned {kind}", name=kind)
    return metrics


def _adapted_record(model_path) -> dict | None:
    """The ``adapted`` record of an encoder written by ``attnkit adapt`` (None for any other model)."""
    f = Path(str(model_path)).expanduser() / RUN_INFO
    try:
        return read_json(f, "what training recorded beside a model").get("adapted") if f.is_file() else None
    except (OSError, ValueError):
        return None


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
