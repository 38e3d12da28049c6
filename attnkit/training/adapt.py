"""``attnkit adapt``: continued masked-LM pre-training of an encoder for a sparse attention map.

A pre-trained encoder's heads were trained under softmax; swapping in a sparse map at fine-tuning time costs
accuracy on short texts. AdaSplash (Gonçalves et al., ICML 2025) adapts the encoder first: masked-language modelling
on unlabelled text with alpha annealed linearly from 1.01 to the target over the first part of the steps, then
fine-tuning. This module does that for any attnkit encoder:

    texts   = the *training* texts of one or more tasks (+ the user's own text files); never dev or test texts
    model   = the encoder + an MLM head (the checkpoint's own, or a new one: transform + decoder tied to the
              input embeddings; all-MiniLM-L6-v2 ships none), attention = the target map
    anneal  = entmax maps: alpha 1.01 -> target; sparsegen-lin: temperature 1 - lam from 8x to 1x; sparsemax as
              sparsegen-lin with target lam 0; softmax: nothing (the control, same data, steps and schedule)
    head    = for the first --head-warmup steps only the MLM head trains (a new head is random: its first gradients
              would be noise in the encoder)
    result  = <output-dir>/model: the bare encoder (the MLM head dropped, BERT's pooler as it was), with the target
              map in its config and how it was adapted in run_info.json ("adapted"), which ``attnkit train --model``,
              ``sparsify`` and the Auto classes take.

The run folder works as ``attnkit train``'s: locked, resumable from its checkpoints, a finished run with the same
settings returned as it is, one with other settings refused.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import torch
from datasets import Dataset
from transformers import Trainer, TrainerCallback, TrainingArguments, set_seed

from attnkit.attention import kernels
from attnkit.attention.normalisers import LAM_MAP
from attnkit.attention.placement import attention_modules
from attnkit.attention.spec import AttentionSpec, spec_of
from attnkit.errors import DataFormatError, UserError
from attnkit.models.build import build_masked_lm, encoder_of
from attnkit.models.resolve import checkpoint_dir
from attnkit.models.checkpoint import load_tokenizer, save_checkpoint, set_attention
from attnkit.runfiles.names import METRICS_FILE, MODEL_DIR
from attnkit.runfiles.json_files import finite_record, path_problem, read_json
from attnkit.runfiles.atomic import rendezvous, write_json_atomic
from attnkit.tasks import load_task
from attnkit.tasks.registry import default_data_dir
from attnkit.tasks.readers import check_no_nul, decode, split_lines
from attnkit.training.adapt_config import ADAPT_ALPHA_START, ADAPT_LAM_FACTOR, AdaptConfig
from attnkit.training.masking import BatchSeededMasking, MaskingState
from attnkit.training.pretrain import check_maskable, mlm_collator, say_texts_cut
from attnkit.training.trainer import check_finite, check_precision, finish_run, fit, found_complete, shared_arguments
from attnkit.training.run_folder import (changed_sources, check_sources, finished_metrics, prepare_output, run_folder, settings_differences,
                                         settings_record)
from attnkit.training.checkpoints import recorded_checkpoints

log = logging.getLogger("attnkit")

#: settings that do not change what an adapt run computes
_FREE = ("output_dir", "resume", "logging_steps", "keep_checkpoints", "save_steps")


# ----------------------------------------------------------------------------- texts


def read_text_file(path: str | Path) -> list[str]:
    """One text per line (UTF-8, a BOM allowed; lines end as :func:`attnkit.tasks.readers.split_lines` says); blank
    lines skipped; a NUL refused (a damaged or UTF-16 file). DataFormatError naming file and line."""
    p = Path(path).expanduser()
    if not p.exists():
        raise FileNotFoundError(f"--text-file {path} {path_problem(p)}")
    if not p.is_file():
        raise UserError(f"--text-file {path} is not a regular file (a folder, FIFO or device): give a text file, one text per line")
    out = []
    for i, line in enumerate(split_lines(decode(p, p.read_bytes())), 1):
        line = line.replace("\ufeff", "").strip()
        check_no_nul(p, i, line)
        if line:
            out.append(line)
    if not out:
        raise UserError(f"--text-file {path} holds no text (only blank lines)")
    return out


def adapt_texts(cfg: AdaptConfig) -> tuple[list[str], dict]:
    """The pooled texts (exact duplicates dropped, first kept) and where they came from: per task the number of
    training texts, per file its number of lines. Only training splits are read."""
    data_root = Path(cfg.data_dir).expanduser().resolve() if cfg.data_dir else default_data_dir()
    texts: list[str] = []
    sources: dict = {"tasks": {}, "files": {}}
    for task in cfg.tasks:
        data = load_task(task, cfg.data_dir)
        if "train" not in data.splits:
            raise UserError(f"task {task} has no training split (it has {', '.join(data.splits)}): attnkit adapt reads training texts only")
        train = data.splits["train"]  # the ONLY split read: dev/test texts never reach the encoder
        got = list(train["text"]) + (list(train["text_pair"]) if "text_pair" in train.column_names else [])
        sources["tasks"][task] = len(got)
        texts += got
    for f in cfg.text_files:
        if path_problem(f):
            read_text_file(f)  # names what is wrong with it (a symlink loop cannot be resolved below)
        p = Path(f).expanduser().resolve()
        if data_root is not None and Path(data_root).resolve() in p.parents:
            raise UserError(f"--text-file {f} lies in the data folder {data_root}: its dev or test texts must not be read; "
                             "give the task with --task (attnkit adapt then reads its training split only)")
        got = read_text_file(f)
        sources["files"][str(p)] = len(got)
        texts += got
    texts = [t for t in texts if isinstance(t, str) and t.strip()]
    pooled = list(dict.fromkeys(texts))
    sources["texts"] = len(pooled)
    sources["duplicates_dropped"] = len(texts) - len(pooled)
    if cfg.max_train_samples is not None and len(pooled) > cfg.max_train_samples:
        keep = np.random.default_rng(cfg.seed).permutation(len(pooled))[: cfg.max_train_samples]
        pooled = [pooled[i] for i in sorted(keep.tolist())]
        sources["texts_used"] = len(pooled)
    if not pooled:
        raise UserError("no text to adapt on: the tasks and files given hold no text")
    return pooled, sources


# ----------------------------------------------------------------------------- the anneal


def spec_at(cfg: AdaptConfig, step: int) -> AttentionSpec:
    """The attention at ``step``: dense at step 0, moving linearly to the target, which it reaches at
    :meth:`AdaptConfig.anneal_steps` (and keeps)."""
    target = cfg.spec()
    n = cfg.anneal_steps()
    norm = target.normaliser
    if norm.anneal is None or n <= 0 or step >= n:
        return target
    f = step / n
    if norm.anneal == "alpha":  # alpha from ADAPT_ALPHA_START to the map's
        mix0 = (ADAPT_ALPHA_START - 1.0) / (norm.target_alpha(target) - 1.0)
        return replace(target, alpha_mix=mix0 + (1.0 - mix0) * f)
    # "lam": sparsegen-lin's temperature 1 - lam from ADAPT_LAM_FACTOR x to 1 x (a map without a lam: lam 0, sparsemax)
    t1 = 1.0 - (target.lam if norm.setting == "lam" else 0.0)
    t = ADAPT_LAM_FACTOR * t1 + (t1 - ADAPT_LAM_FACTOR * t1) * f
    return replace(target, attention=LAM_MAP, lam=1.0 - t)


def schedule_value(spec: AttentionSpec) -> dict:
    """What the progress bar shows of the current map: alpha (entmax maps) or lam (sparsegen-lin)."""
    norm = spec.normaliser
    if norm.anneal == "alpha":
        return {"alpha": round(spec.effective_alpha(norm.target_alpha(spec)), 4)}
    if norm.setting == "lam":
        return {"lam": round(spec.lam, 4)}
    return {}


def schedule_record(cfg: AdaptConfig) -> dict:
    """Where the anneal starts and ends, for the run's record."""
    target = cfg.spec()
    norm = target.normaliser
    if norm.anneal == "alpha":
        return {"alpha_start": ADAPT_ALPHA_START, "alpha_end": norm.target_alpha(target)}
    if norm.anneal == "lam":
        return {"lam_start": spec_at(cfg, 0).lam, "lam_end": target.lam if norm.setting == "lam" else 0.0}
    return {}


class AnnealCallback(TrainerCallback):
    """Sets the model's attention to :func:`spec_at` before every step (a resumed run resumes at the right alpha),
    and to the target when training ends, whatever step it stopped at."""

    def __init__(self, cfg: AdaptConfig):
        self.cfg = cfg

    def on_step_begin(self, args, state, control, model=None, **kw):
        spec = spec_at(self.cfg, state.global_step)
        if spec_of(model.config) != spec:
            set_attention(model, spec)

    def on_train_end(self, args, state, control, model=None, **kw):
        set_attention(model, self.cfg.spec())


class HeadWarmupCallback(TrainerCallback):
    """For the first :meth:`AdaptConfig.head_warmup_steps` steps only the MLM head trains: the encoder's weights get no
    gradient (AdamW leaves a parameter without one as it is), so a new, random head does not send noise into them."""

    def __init__(self, cfg: AdaptConfig):
        self.cfg = cfg

    def on_step_begin(self, args, state, control, model=None, **kw):
        frozen = state.global_step < self.cfg.head_warmup_steps()
        inner = getattr(model, model.base_model_prefix)
        tied = {id(p) for p in model.get_output_embeddings().parameters()} if model.get_output_embeddings() is not None else set()
        for p in inner.parameters():
            if id(p) not in tied:  # the word embeddings are the decoder's weights too: they train with the head
                p.requires_grad_(not frozen)


class MaskedPositions:
    """The MLM decoder (hidden -> vocabulary logits: as costly as the whole encoder for a 30k vocabulary at hidden 384)
    computed at the masked positions only, instead of at every token: a pre-hook on the decoder keeps the hidden
    states where :attr:`mask` is set, and :meth:`AdaptTrainer.compute_loss` gives the model those positions' labels
    alone (shape [1, n_masked]), which the model's own loss (``CrossEntropyLoss`` over ``view(-1)``) takes as it
    took the full [batch, length] labels with -100 elsewhere: the same mean over the masked tokens, the same
    gradients, without the [batch, length, vocabulary] logits. Outside compute_loss (mask None) nothing changes."""

    def __init__(self, model):
        self.mask: torch.Tensor | None = None  # [batch, length] bool, set for one forward by compute_loss
        self.fired = False
        decoder = model.get_output_embeddings()
        self.handle = decoder.register_forward_pre_hook(self.select) if decoder is not None else None
        if self.handle is not None and not self.probe(model):
            self.handle.remove()  # a head that does not call its decoder module (MobileBERT's): logits at every token
            self.handle = None

    def select(self, module, args):
        if self.mask is None:
            return None
        self.fired = True
        hidden = args[0]  # [batch, length, hidden] -> [1, n_masked, hidden]
        return (hidden[self.mask].unsqueeze(0), *args[1:])

    def probe(self, model) -> bool:
        """Whether this model's head calls its decoder module on the hidden states, so that the hook selects them: one
        forward of a 1 x 4 input with two positions masked must give logits for those two alone."""
        was_training = model.training
        ids = torch.tensor([[1, 2, 3, 4]], device=next(model.parameters()).device) % model.config.vocab_size
        self.mask, self.fired = torch.tensor([[False, True, False, True]], device=ids.device), False
        try:
            with torch.no_grad():
                logits = model.eval()(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
            return self.fired and tuple(logits.shape[:2]) == (1, 2)
        except Exception:  # noqa: BLE001 — any failure: keep the model's own loss at every token
            return False
        finally:
            self.mask = None
            model.train(was_training)


class AdaptTrainer(Trainer):
    """The Trainer, whose logs (progress bar, log_history) also give the current alpha or lam, and whose MLM loss
    runs the decoder at the masked positions only (:class:`MaskedPositions`)."""

    def __init__(self, *args, masked: MaskedPositions | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.masked = masked

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.get("labels")
        # nn.DataParallel (several GPUs, no torchrun) splits every input along dim 0: the [1, n] labels cannot follow
        if self.masked is None or self.masked.handle is None or labels is None or self.args.n_gpu > 1:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self.masked.mask = labels != -100
        try:
            return super().compute_loss(model, {**inputs, "labels": labels[self.masked.mask].unsqueeze(0)}, return_outputs,
                                        num_items_in_batch)
        finally:
            self.masked.mask = None

    def log(self, logs, *args, **kwargs):
        logs = dict(logs) | schedule_value(spec_of(self.model.config))
        return super().log(logs, *args, **kwargs)


# ----------------------------------------------------------------------------- the run


def adapt(cfg: AdaptConfig) -> dict:
    """Adapt ``cfg.model`` to ``cfg.attention`` by masked-LM on the texts; returns the metrics dict.

    As ``attnkit train``: the run folder is locked; a finished run there with the same settings is returned as it is,
    one with other settings refused (``cfg.resume`` off moves it aside when training starts)."""
    cfg.validate()
    check_precision(cfg)
    with run_folder(Path(cfg.output_dir)) as out:
        done = finished_metrics(cfg, out, free=_FREE)
        if done is not None:
            _say_changed_texts(cfg, out)
            return found_complete(cfg, out, done, "loss", title=_curves_title(cfg), what="adapt run", again="runs it again")
        check_checkpoints(cfg, out)
        return _adapt(cfg, out)


def _say_changed_texts(cfg: AdaptConfig, out: Path) -> None:
    """One line where a finished adapt run was made from other texts (a --text-file edited or another of that name,
    a task's data) or another --model than those named now: it is kept as it is, and the line says so (it said
    "nothing was changed" alone: sweep 2026-11-28u DB). Texts that can no longer be read are not compared."""
    try:
        texts, _ = adapt_texts(cfg)
    except (OSError, ValueError):  # (UserError is a ValueError)
        return
    changed = changed_sources(cfg, out, {"texts": texts})
    if changed:
        log.warning("the adapt run in %s was made from other inputs than those named now (%s): it is kept as it is, "
                    "its encoder that of the earlier inputs; --no-resume adapts afresh on these", out, "; ".join(changed))


def _curves_title(cfg: AdaptConfig) -> str:
    return f"adapt to {cfg.spec().describe()}: MLM loss"


def check_checkpoints(cfg: AdaptConfig, out: Path) -> None:
    """Stop before any work if ``out`` holds checkpoints (of a killed or damaged adapt run) made with other settings,
    or whose settings are not recorded: they would be trained on as if they were this run's. Changes nothing."""
    ckpts = recorded_checkpoints(out) if cfg.resume else []
    if not ckpts:
        return
    saved = out / "run_config.json"
    try:
        old = read_json(saved, "the settings of an adapt run")
    except (OSError, ValueError) as e:
        raise UserError(f"{out} holds checkpoints of a run whose settings are missing or unreadable ({e}): nothing was "
                         "changed; add --no-resume to move it aside and start afresh there, or pick another --output-dir") from None
    diffs = settings_differences(old, asdict(cfg), _FREE, AdaptConfig.__dataclass_fields__)
    if diffs:
        raise UserError(f"{out} holds checkpoints of an adapt run with other settings ({'; '.join(diffs)}): rerun with the "
                         "same settings to resume it, add --no-resume to start afresh there, or pick another --output-dir")


def attention_zeros(model, tokenizer, texts: list[str], max_length: int, batch_size: int = 32) -> dict:
    """Per layer: the share of attention weights between real tokens that are exactly 0, and the mean number of
    non-zero weights per row (real query rows only), over ``texts``."""
    model.eval()
    device = next(model.parameters()).device
    n_layers = len(attention_modules(model))
    zeros, total, nnz, rows = [0.0] * n_layers, [0.0] * n_layers, [0.0] * n_layers, [0.0] * n_layers
    with torch.no_grad():
        for i in range(0, len(texts), batch_size):
            enc = tokenizer(texts[i:i + batch_size], truncation=True, max_length=max_length, padding=True, return_tensors="pt").to(device)
            out = model(**enc, output_attentions=True)
            m = enc["attention_mask"].bool()  # [B, L]
            pair = (m[:, None, :, None] & m[:, None, None, :]).float()  # [B, 1, L, L] real query x real key
            for j, a in enumerate(out.attentions):  # [B, H, L, L]
                a = a.float()
                real = pair.expand_as(a)
                zeros[j] += float(((a == 0).float() * real).sum())
                total[j] += float(real.sum())
                nnz[j] += float(((a != 0).float() * real).sum())
                rows[j] += float(m[:, None, :].expand(a.shape[0], a.shape[1], a.shape[2]).sum())  # real query rows x heads
    return {"zero_share": [z / max(t, 1.0) for z, t in zip(zeros, total)],
            "nonzeros_per_row": [n / max(r, 1.0) for n, r in zip(nnz, rows)]}


def _adapt(cfg: AdaptConfig, out: Path) -> dict:
    set_seed(cfg.seed)
    texts, sources = adapt_texts(cfg)
    if cfg.resume and recorded_checkpoints(out):
        check_sources(cfg, out, {"texts": texts})  # a base model or texts changed since the checkpoints were written
    model_path = str(checkpoint_dir(cfg.model) or cfg.model)
    tokenizer = load_tokenizer(model_path)
    start = spec_at(cfg, 0)
    model, new_weights = build_masked_lm(model_path, start)
    ds = Dataset.from_dict({"text": texts}).map(
        lambda b: tokenizer(b["text"], truncation=True, max_length=cfg.max_length, return_special_tokens_mask=True),
        batched=True, remove_columns=["text"], desc="tokenising",
    )
    check_maskable(ds, tokenizer, cfg.mlm_probability, f"the texts to adapt on ({len(texts)}, duplicates dropped)")
    sources["texts_cut"] = say_texts_cut(ds, texts, tokenizer, cfg.max_length, "texts to adapt on")
    with rendezvous():  # torchrun's processes meet here
        args = TrainingArguments(**shared_arguments(cfg, out), max_steps=cfg.max_steps, eval_strategy="no",
                                 save_strategy="steps", save_steps=cfg.save_steps, save_total_limit=1,
                                 prediction_loss_only=True)
    # masks drawn per batch, their place kept in each checkpoint: a resumed run masks as the uninterrupted one did
    masking = BatchSeededMasking(mlm_collator(tokenizer, cfg.mlm_probability), cfg.seed, args.process_index)
    masking_state = MaskingState(masking)
    trainer = AdaptTrainer(model=model, masked=MaskedPositions(model), args=args, train_dataset=ds, data_collator=masking,
                           processing_class=tokenizer, callbacks=[AnnealCallback(cfg), HeadWarmupCallback(cfg), masking_state])
    if start.is_sparse or cfg.spec().is_sparse:
        kernels.cpu_kernel()  # a first run compiles the CPU kernel here (and says so), not inside the first step's ETA
    prepare_output(cfg, out, keep=(), splits={"texts": texts})  # everything before training worked: only now is an earlier run moved aside
    t0 = time.time()
    result = fit(trainer, cfg)
    # the whole run's training time (a resumed run's counts its earlier processes' too), else this process's
    seconds = result.metrics.get("train_runtime") or time.time() - t0
    if masking_state.note:  # resumed from a checkpoint that could not be resumed exactly: the metrics say so
        result.metrics["masking_note"] = masking_state.note
    history = list(trainer.state.log_history)
    check_finite(trainer.model, cfg, history)
    set_attention(trainer.model, cfg.spec())
    # the MLM loss at the end, on (at most) 1,000 of the training texts masked with a fixed seed
    probe = ds.select(range(min(1000, len(ds))))
    trainer.data_collator = mlm_collator(tokenizer, cfg.mlm_probability, seed=cfg.seed)  # as pretrain.py scores its MLM
    mlm_loss = float(trainer.evaluate(probe, metric_key_prefix="mlm")["mlm_loss"])
    sample = texts[: min(256, len(texts))]
    zeros = attention_zeros(trainer.model, tokenizer, sample, cfg.max_length)
    record = {
        "attention": cfg.spec().to_dict(),
        "schedule": schedule_record(cfg),
        "anneal_steps": cfg.anneal_steps() if cfg.spec().normaliser.anneal is not None else 0, "head_warmup_steps": cfg.head_warmup_steps(),
        "steps": int(trainer.state.global_step), "batch_size": cfg.batch_size, "lr": cfg.lr, "max_length": cfg.max_length,
        "mlm_probability": cfg.mlm_probability, "seed": cfg.seed, "precision": cfg.precision,
        "texts": sources, "model": str(cfg.model), "new_weights": new_weights, "seconds": round(seconds, 1),
        "mlm_loss": mlm_loss, **zeros,
    }
    metrics = finite_record({"adapted": record, "train": dict(result.metrics), "log_history": history,
                             "parameters": sum(p.numel() for p in trainer.model.parameters())})  # strict JSON: null, and where
    record = metrics["adapted"]  # as written into metrics.json, and into the model's run_info.json, which train copies
    if trainer.is_world_process_zero():
        encoder = encoder_of(trainer.model, model_path)
        model_dir = save_checkpoint(encoder, out / MODEL_DIR, tokenizer, extra={"adapted": record, "max_length": cfg.max_length})
        metrics["model_dir"] = str(model_dir)
        write_json_atomic(out / "run_config.json", settings_record(cfg, attention_spec=cfg.spec().to_dict()))
        write_json_atomic(out / METRICS_FILE, metrics)
        finish_run(cfg, out, history, "loss", title=_curves_title(cfg))
    return metrics
