"""Fine-tuning, evaluation and prediction, on top of the Hugging Face Trainer.

The Trainer gives the loop, checkpoints, resumption and multi-process runs: launch
``attnkit train`` under ``torchrun``/``accelerate launch`` and it scales with no code of
ours. What is ours: building the model with its attention, the data, the metrics, and
writing ``metrics.json`` plus the best dev checkpoint (atomically) to ``<output>/model``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path


from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch and transformers are imported by the code that runs, not to read --help
    from attnkit.attention import AttentionSpec
    from attnkit.pooling import HeadSpec

log = logging.getLogger("attnkit")

#: lam used by the SSAF paper for each dataset (METHODS.md §1); Rotten Tomatoes takes SST-2's.
PAPER_LAM = {
    "sst5": -3.0,
    "sst5-phrases": -3.0,
    "semeval2013": -3.0,
    "sst2": -4.0,
    "sentube-tablets": -4.0,
    "sentube-auto": -6.0,
    "rotten-tomatoes": -4.0,
    "squad": -7.0,
    "scitail": -6.0,
}
#: epochs used by the SSAF paper for each dataset
PAPER_EPOCHS = {"sst5": 4, "sst5-phrases": 4, "sst2": 4, "sentube-auto": 5, "sentube-tablets": 6, "semeval2013": 8, "squad": 2, "scitail": 3}

MODEL_DIR = "model"
METRICS_FILE = "metrics.json"


@dataclass
class TrainConfig:
    """Everything a training run depends on; written to ``<output>/run_config.json``."""

    task: str = "rotten-tomatoes"
    data_dir: str | None = None
    model: str = "minilm"
    attention: str = "sparsegen-lin"
    lam: float | None = None  # None: the paper's lam for the task (PAPER_LAM), else 0
    from_scratch: bool = False
    epochs: float = 1.0
    max_steps: int = -1
    batch_size: int = 16
    eval_batch_size: int = 64
    lr: float = 2e-5
    weight_decay: float = 0.0
    warmup_ratio: float = 0.0
    max_length: int = 128
    doc_stride: int | None = None  # span QA: overlap of context windows in tokens (None: max_length // 3)
    seed: int = 42
    output_dir: str = "runs/attnkit"
    max_train_samples: int | None = None
    max_eval_samples: int | None = None
    eval_steps: int | None = None  # None: evaluate once per epoch (or at the end of --max-steps)
    resume: bool = True
    logging_steps: int = 50
    group_by_length: bool = False  # batches of similar length (less padding; same examples per epoch)
    learn_lam: bool = False  # sparsegen-lin: lam learned per layer and head, started at lam
    lemmatize: str | None = None  # language: texts replaced by their lemmas (simplemma), recorded with the model
    keep_checkpoints: bool = False  # keep the Trainer's checkpoint-N folders (with optimizer state) after a finished run
    lam_warmup: float = 0.0  # sparsegen-lin: lam moves from a denser start to lam over this fraction of the steps (or count); 0: off
    # SesameBERT: locality step and layer pooling
    blur: str = "none"  # none | context | value
    blur_size: int = 3
    blur_sigma: float = 0.3
    pooling: str = "last"  # first | second | second-to-last | last | sum-last-four | sum-all | weighted
    se: bool = False
    se_ratio: int = 3
    freeze: str | None = None  # comma-separated parameter groups not trained (attnkit.freeze.GROUPS)
    # --model mini: a MiniBERT trained from scratch (tokenizer from the training text, random weights)
    # (None: the defaults sa, 1, 1, 32, 4000; unused for any other model)
    kind: str | None = None
    layers: int | None = None
    heads: int | None = None
    dim: int | None = None
    vocab_size: int | None = None

    def validate(self) -> None:
        """ValueError naming the first setting that cannot give a meaningful run."""
        import math

        if self.max_steps <= 0 and not (isinstance(self.epochs, (int, float)) and math.isfinite(self.epochs) and self.epochs > 0):
            raise ValueError(f"--epochs {self.epochs:g}: expected a number of epochs > 0 (or --max-steps > 0)")
        for name, v in (("--batch-size", self.batch_size), ("eval batch size", self.eval_batch_size)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} {v}: expected a whole number >= 1")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"--lr {self.lr}: expected a learning rate > 0")
        if not (isinstance(self.warmup_ratio, (int, float)) and self.warmup_ratio >= 0):
            raise ValueError(f"--warmup {self.warmup_ratio}: expected a fraction of the steps (< 1) or a step count, >= 0")
        if not isinstance(self.max_length, int) or self.max_length < 2:
            raise ValueError(f"--max-length {self.max_length}: expected a whole number of tokens of at least 2 (with [CLS] and [SEP])")
        for name, v in (("--max-train-samples", self.max_train_samples), ("--max-eval-samples", self.max_eval_samples), ("--eval-steps", self.eval_steps)):
            if v is not None and v < 1:
                raise ValueError(f"{name} {v}: expected a whole number >= 1")
        if self.lemmatize:
            from attnkit.lemmas import lemmatizer

            lemmatizer(self.lemmatize)
        self.spec()
        self.head()

    def spec(self) -> AttentionSpec:
        from attnkit.attention import AttentionSpec

        lam = self.lam if self.lam is not None else PAPER_LAM.get(self.task, 0.0)
        if self.lam_warmup and (self.attention != "sparsegen-lin" or not self.lam_warmup > 0):
            raise ValueError(f"--lam-warmup {self.lam_warmup}: needs --attention sparsegen-lin and a fraction of the steps (< 1) or a step count > 0")
        return AttentionSpec(self.attention, lam, blur=self.blur, blur_size=self.blur_size, blur_sigma=self.blur_sigma,
                             learn_lam=self.learn_lam)

    def head(self) -> HeadSpec:
        from attnkit.pooling import HeadSpec

        return HeadSpec(self.pooling, se=self.se, se_ratio=self.se_ratio)


# ----------------------------------------------------------------------------- metrics


def metrics_fn(kind: str):
    """A Trainer ``compute_metrics`` for a task's metric kind (accuracy | mcc | f1 | regression)."""
    from attnkit.glue import predictions_of, task_metrics

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
    from transformers import TrainerCallback

    from attnkit.attention import spec_of
    from attnkit.modeling import set_attention

    class LamWarmup(TrainerCallback):
        def _set(self, args, state, model):
            steps = int(warmup * state.max_steps) if warmup < 1 else int(warmup)
            lam = warmup_lam(target, state.global_step, steps)
            d = spec_of(model.config).to_dict() | {"lam": lam}
            from attnkit.attention import AttentionSpec

            set_attention(model, AttentionSpec(**d))

        def on_step_begin(self, args, state, control, model=None, **kw):
            self._set(args, state, model)

        def on_train_end(self, args, state, control, model=None, **kw):
            self._set(args, state, model)  # the target lam, whatever step training stopped at

    return LamWarmup()


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


def _labelled(ds) -> bool:
    return ds is not None and len(ds) > 0 and min(list(ds["label"])) >= 0


def _subsample(ds, n: int | None, seed: int):
    if n is None or ds is None or len(ds) <= n:
        return ds
    return ds.shuffle(seed=seed).select(range(n))


# ----------------------------------------------------------------------------- checkpoints


def last_complete_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest ``checkpoint-N`` the Trainer finished writing (it writes trainer_state.json last).

    A run killed while saving leaves a checkpoint without trainer_state.json, and a disk fault
    may leave a garbled one; either is moved aside (``.incomplete-checkpoint-N``) with a message
    and the previous one is used.
    """
    from transformers.trainer_utils import get_last_checkpoint

    out = Path(output_dir)
    if not out.is_dir():
        return None
    while True:
        last = get_last_checkpoint(str(out))
        if last is None:
            return None
        why = _checkpoint_damage(Path(last))
        if why is None:
            return last
        aside = out / f".incomplete-{Path(last).name}"
        shutil.rmtree(aside, ignore_errors=True)
        os.replace(last, aside)
        log.warning("checkpoint %s is not usable (%s); moved aside to %s, resuming from the one before", last, why, aside)


def _checkpoint_damage(ckpt: Path) -> str | None:
    """Why a Trainer checkpoint folder cannot be resumed from, or None if it can."""
    from attnkit.modeling import check_weights_file

    state = ckpt / "trainer_state.json"
    if not state.is_file():
        return "no trainer_state.json: it was not finished"
    try:
        json.loads(state.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        return f"trainer_state.json is garbled: {e}"
    try:
        check_weights_file(ckpt)
    except OSError as e:
        return str(e)
    return None


#: settings that may differ when a run is resumed: they do not change what is trained, or only how
#: long (a run may be resumed to train for longer)
_RESUME_FREE = ("output_dir", "resume", "logging_steps", "eval_batch_size", "keep_checkpoints", "epochs", "max_steps")


def finished_metrics(cfg: TrainConfig) -> dict | None:
    """The metrics of a finished run in ``cfg.output_dir`` made with the same settings (None if there is none).

    A finished run has metrics.json, model/ and a run_config.json equal to ``cfg`` (but for where it is written
    and what it logs); rerunning it changes nothing, unless ``cfg.resume`` is off.
    """
    out = Path(cfg.output_dir)
    saved, metrics = out / "run_config.json", out / METRICS_FILE
    if not cfg.resume or not (saved.is_file() and metrics.is_file() and (out / MODEL_DIR / "config.json").is_file()):
        return None
    free = ("output_dir", "resume", "logging_steps", "eval_batch_size", "keep_checkpoints")  # epochs and steps count here
    old, new = _comparable(json.loads(saved.read_text()), free), _comparable(asdict(cfg), free)
    if any(old.get(k) != v for k, v in new.items()):
        return None
    return json.loads(metrics.read_text())


def finish_run(cfg: TrainConfig, out: Path) -> None:
    """After a finished run: remove the checkpoint folders (optimizer state, a copy of model/) unless kept."""
    if cfg.keep_checkpoints:
        return
    for c in out.glob("checkpoint-*"):
        if c.is_dir():
            shutil.rmtree(c, ignore_errors=True)


def same_paths(d: dict) -> dict:
    """``d`` with its data folder and model resolved: the same folder written two ways is the same setting."""
    d = dict(d)
    for k in ("data_dir", "model"):
        if d.get(k) and Path(str(d[k])).expanduser().exists():
            d[k] = str(Path(str(d[k])).expanduser().resolve())
    return d


def _comparable(cfg_dict: dict, free: tuple = _RESUME_FREE) -> dict:
    return same_paths({k: v for k, v in cfg_dict.items() if k not in free and k in TrainConfig.__dataclass_fields__})


def prepare_output(cfg: TrainConfig, out: Path) -> None:
    """Check a run folder before training: resume only a run made with the same settings.

    Checkpoints of a run with other settings stop the run with a message naming the differences;
    ``cfg.resume = False`` moves earlier checkpoints aside (``.replaced-checkpoint-N``) and starts afresh.
    """
    ckpts = sorted(p for p in out.glob("checkpoint-*") if p.is_dir())
    if ckpts and not cfg.resume:
        for c in ckpts:
            aside = out / f".replaced-{c.name}"
            shutil.rmtree(aside, ignore_errors=True)
            os.replace(c, aside)
        log.warning("--no-resume: %d earlier checkpoint(s) in %s moved aside (.replaced-checkpoint-N)", len(ckpts), out)
    elif ckpts:
        saved = out / "run_config.json"
        if saved.is_file():
            old, new = _comparable(json.loads(saved.read_text())), _comparable(asdict(cfg))
            diffs = [f"{k}: {old[k]!r} there, {new[k]!r} now" for k in sorted(new) if k in old and old[k] != new[k]]
        else:  # a run of an older attnkit: compare the attention its checkpoints were trained with
            from transformers.trainer_utils import get_last_checkpoint

            cfg_file = Path(get_last_checkpoint(str(out)) or ckpts[-1]) / "config.json"
            stored = json.loads(cfg_file.read_text()).get("attnkit") if cfg_file.is_file() else None
            now = cfg.spec().to_dict()
            diffs = [] if stored is None else [f"{k}: {stored.get(k)!r} there, {now[k]!r} now" for k in now if stored.get(k, now[k]) != now[k]]
        if diffs:
            raise ValueError(
                f"{out} holds checkpoints of a run with other settings ({'; '.join(diffs)}): rerun with the same "
                "settings to resume it, add --no-resume to start afresh there, or pick another --output-dir"
            )
    if int(os.environ.get("RANK", "0")) == 0:
        write_json_atomic(out / "run_config.json", asdict(cfg) | {"attention_spec": cfg.spec().to_dict(), "head_spec": cfg.head().to_dict()})


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)


# ----------------------------------------------------------------------------- train


def training_arguments(cfg: TrainConfig, out: Path, best_metric: str, **extra):
    """The Trainer settings every attnkit run shares; the best dev ``best_metric`` (higher is better) is kept."""
    import torch
    from transformers import TrainingArguments

    per_steps = cfg.max_steps > 0 or cfg.eval_steps is not None
    every = cfg.eval_steps or (cfg.max_steps if cfg.max_steps > 0 else None)
    return TrainingArguments(
        output_dir=str(out),
        num_train_epochs=cfg.epochs,
        max_steps=cfg.max_steps,
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=cfg.eval_batch_size,
        learning_rate=cfg.lr,
        weight_decay=cfg.weight_decay,
        warmup_steps=cfg.warmup_ratio,
        seed=cfg.seed,
        data_seed=cfg.seed,
        eval_strategy="steps" if per_steps else "epoch",
        save_strategy="steps" if per_steps else "epoch",
        eval_steps=every,
        save_steps=every,
        save_total_limit=2,
        load_best_model_at_end=True,
        metric_for_best_model=best_metric,
        greater_is_better=True,
        logging_steps=cfg.logging_steps,
        report_to="none",
        disable_tqdm=False,
        dataloader_num_workers=0,
        train_sampling_strategy="group_by_length" if cfg.group_by_length else "random",
        use_cpu=not torch.cuda.is_available(),
        # our losses are already means over the batch: averaging "tokens" across processes on top of that
        # doubles the logged loss and the gradients before clipping under torchrun with 2 processes
        average_tokens_across_devices=False,
        **extra,
    )


def fit(trainer, cfg: TrainConfig):
    """``trainer.train()``, resumed from the run folder's newest complete checkpoint unless ``cfg.resume`` is off."""
    resume = last_complete_checkpoint(cfg.output_dir) if cfg.resume else None
    if resume:
        log.warning("resuming from %s", resume)
    return trainer.train(resume_from_checkpoint=resume)


def train(cfg: TrainConfig) -> dict:
    """Fine-tune, keep the best dev checkpoint, evaluate it; returns the metrics dict."""
    from transformers import DataCollatorWithPadding, Trainer, set_seed

    from attnkit.data import load_task
    from attnkit.glue import MAIN_METRIC
    from attnkit.modeling import build_classifier, load_tokenizer, save_checkpoint

    from attnkit.qa import is_qa_task, train_qa

    done = finished_metrics(cfg)
    if done is not None:
        log.warning("the run in %s is complete (metrics.json, model/): nothing to do; --no-resume trains it again", cfg.output_dir)
        return done | {"already_complete": True}
    if is_qa_task(cfg.task):
        if cfg.lemmatize:
            raise ValueError(f"task {cfg.task} (span QA) answers with spans of the original text: --lemmatize does not apply")
        if not cfg.head().is_default or str(cfg.model).lower() in ("mini", "minibert") or cfg.freeze:
            raise ValueError(f"task {cfg.task} (span QA) takes the model's own span head: no --layer-pooling/--se, --model mini or --freeze")
        return train_qa(cfg)
    cfg.validate()
    set_seed(cfg.seed)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    spec = cfg.spec()
    head = cfg.head()
    data = load_task(cfg.task, cfg.data_dir)
    prepare_output(cfg, out)  # after the data: a missing file is the first thing to hear about
    splits = data.splits
    if "train" not in splits or "validation" not in splits:
        raise FileNotFoundError(
            f"task {cfg.task} needs a train and a validation split; only {', '.join(splits)} found"
            f"{' in ' + str(cfg.data_dir) if cfg.data_dir else ''} (is its train file missing?)"
        )
    model_path = cfg.model
    lang = model_lemmatize(cfg)
    if lang:
        from attnkit.lemmas import lemmatize_splits

        splits = lemmatize_splits(splits, lang)
    if str(cfg.model).lower() in ("mini", "minibert"):  # MiniBERT from scratch: tokenizer + random init on train text only
        from attnkit.pretrain import init_mini_checkpoint

        texts = list(splits["train"]["text"]) + (list(splits["train"]["text_pair"]) if "text_pair" in splits["train"].column_names else [])
        model_path = str(init_mini_checkpoint(
            texts, out / "mini_init", kind=cfg.kind or "sa", layers=cfg.layers or 1, heads=cfg.heads or 1,
            dim=cfg.dim or 32, vocab_size=cfg.vocab_size or 4000, spec=spec, seed=cfg.seed, extra={"task": cfg.task},
        ))
    tokenizer = load_tokenizer(model_path)
    check_length(cfg, model_path)
    enc = tokenize_splits(splits, tokenizer, cfg.max_length)
    train_ds = _subsample(enc["train"], cfg.max_train_samples, cfg.seed)
    dev_ds = _subsample(enc["validation"], cfg.max_eval_samples, cfg.seed)
    # every other labelled split is evaluated at the end (test, MNLI's validation_mismatched, ...)
    others = {k: _subsample(v, cfg.max_eval_samples, cfg.seed) for k, v in enc.items() if k not in ("train", "validation") and _labelled(v)}
    regression = data.metric == "regression"

    model = build_classifier(
        model_path, 1 if regression else len(data.label_names), spec, label_names=data.label_names,
        from_scratch=cfg.from_scratch, head=head, problem_type="regression" if regression else None,
    )
    frozen = None
    if cfg.freeze:
        from attnkit.freeze import freeze_parameters

        frozen = freeze_parameters(model, cfg.freeze)
    args = training_arguments(cfg, out, MAIN_METRIC[data.metric])
    collator = DataCollatorWithPadding(tokenizer)
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=dev_ds,
        data_collator=collator,
        processing_class=tokenizer,
        compute_metrics=metrics_fn(data.metric),
        callbacks=[lam_warmup_callback(spec.lam, cfg.lam_warmup)] if cfg.lam_warmup else None,
    )
    if spec.is_sparse:  # a first run compiles the CPU kernel here (and says so), not inside the first step's ETA
        from attnkit import kernels

        kernels.cpu_kernel()
    train_result = fit(trainer, cfg)

    metrics: dict = {"train": dict(train_result.metrics)}
    metrics["validation"] = _strip(trainer.evaluate(dev_ds, metric_key_prefix="eval"), "eval_")
    for name, ds in others.items():
        metrics[name] = _strip(trainer.evaluate(ds, metric_key_prefix="test"), "test_")
    metrics["best_checkpoint"] = trainer.state.best_model_checkpoint
    metrics["attention"] = spec.to_dict()
    metrics["head"] = head.to_dict()
    metrics["main_metric"] = MAIN_METRIC[data.metric]
    metrics["task"] = cfg.task
    metrics["train_size"] = len(train_ds)
    metrics["parameters"] = sum(p.numel() for p in model.parameters())
    from attnkit.attention import learned_lam

    lams = learned_lam(trainer.model)
    if lams is not None:
        metrics["lam_learned"] = lams
    if frozen is not None:
        metrics["frozen"] = {k: v for k, v in frozen.items() if k != "names"}

    if trainer.is_world_process_zero():
        model_dir = save_checkpoint(
            trainer.model, out / MODEL_DIR, tokenizer,
            extra={"task": cfg.task, "label_names": data.label_names, "trained_on": data.description, "metric": data.metric,
                   "max_length": cfg.max_length, "lemmatize": lang},
        )
        metrics["model_dir"] = str(model_dir)
        write_json_atomic(out / "run_config.json", asdict(cfg) | {"attention_spec": spec.to_dict(), "head_spec": head.to_dict()})
        write_json_atomic(out / METRICS_FILE, metrics)
        finish_run(cfg, out)
        if lams is not None:
            from attnkit.explain import plot_learned_lam

            for ext in ("png", "svg"):
                plot_learned_lam(lams, out / f"lam_learned.{ext}", start=spec.lam, title=f"{cfg.task}: learned lam")
    return metrics


def model_lemmatize(cfg: TrainConfig) -> str | None:
    """The lemmatisation language of a run: ``cfg.lemmatize``, else that of the checkpoint it starts from
    (a MiniBERT pre-trained on lemmas reads lemmas); a conflict between the two is an error."""
    stored = None
    run = Path(str(cfg.model)).expanduser()
    for f in (run / "attnkit_run.json", run / MODEL_DIR / "attnkit_run.json"):
        if f.is_file():
            stored = json.loads(f.read_text()).get("lemmatize")
            break
    if cfg.lemmatize and stored and cfg.lemmatize != stored:
        raise ValueError(f"--lemmatize {cfg.lemmatize}: the model {cfg.model} was trained on {stored} lemmas")
    lang = cfg.lemmatize or stored
    if lang:
        from attnkit.lemmas import lemmatizer

        lemmatizer(lang)  # an unknown language fails here, naming the setting
    return lang


def check_length(cfg: TrainConfig, model_path: str) -> None:
    """--max-length must fit the model's position embeddings (longer inputs would crash inside the model)."""
    from transformers import AutoConfig

    from attnkit.modeling import check_max_length, resolve_model

    path = resolve_model(model_path)
    check_max_length(cfg.max_length, AutoConfig.from_pretrained(path), f"model {cfg.model}")


def _strip(d: dict, prefix: str) -> dict:
    return {(k[len(prefix):] if k.startswith(prefix) else k): v for k, v in d.items()}
