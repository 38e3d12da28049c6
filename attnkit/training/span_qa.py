"""Fine-tuning a span-QA model (SQuAD v1.1) on the Trainer: the same run folder, resume and settings as
classification (:mod:`attnkit.training.run_folder`, :mod:`attnkit.training.trainer`), with SQuAD's features and EM/F1 (:mod:`attnkit.tasks.squad`)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np
from transformers import DataCollatorWithPadding, set_seed

from attnkit.models.build import build_qa_model
from attnkit.models.checkpoint import load_tokenizer, save_checkpoint
from attnkit.runfiles.json_files import finite_record
from attnkit.runfiles.atomic import write_json_atomic
from attnkit.tasks.squad import QA_TASKS, best_spans, featurize, load_squad, squad_metrics
from attnkit.training.config import METRICS_FILE, MODEL_DIR, TrainConfig
from attnkit.training.trainer import AttnkitTrainer, best_checkpoint, check_finite, check_length, check_warmups, finish_run, fit, strip_prefix, subsample, training_arguments
from attnkit.training.run_folder import check_resume, prepare_output


def train_qa(cfg: TrainConfig, out: Path, callbacks: list | None = None) -> dict:
    """Fine-tune a span-QA model in the run folder ``out`` (made and locked by the caller); returns the metrics dict.
    ``callbacks``: the attention schedules the run asks for (``--lam-warmup``, ``--alpha-warmup``), as ``train`` makes them."""
    set_seed(cfg.seed)
    spec = cfg.spec()
    stride = cfg.max_length // 3 if cfg.doc_stride is None else cfg.doc_stride
    splits = load_squad(cfg.data_dir)
    if "train" not in splits or "validation" not in splits:
        raise FileNotFoundError(f"task {cfg.task} needs a train and a validation file; found {', '.join(splits)}")
    check_resume(cfg, out, splits)  # checkpoints of other settings stop the run now; the folder changes only when training starts
    tokenizer = load_tokenizer(cfg.model)
    check_length(cfg, cfg.model)
    tokenizer.padding_side = "right"  # labels are token positions counted from the left
    train_rows = subsample(splits["train"], cfg.max_train_samples, cfg.seed)
    dev_rows = subsample(splits["validation"], cfg.max_eval_samples, cfg.seed)
    train_ds = featurize(train_rows, tokenizer, cfg.max_length, stride).remove_columns(["example_index", "offset_mapping"])
    dev_feats = featurize(dev_rows, tokenizer, cfg.max_length, stride)
    dev_index = list(dev_feats["example_index"])
    dev_offsets = list(dev_feats["offset_mapping"])  # [-1, -1] outside the context: best_spans skips those
    dev_ds = dev_feats.remove_columns(["example_index", "offset_mapping"])
    check_warmups(cfg, len(train_ds))
    dev_list = [dict(r) for r in dev_rows]
    contexts = [r["context"] for r in dev_list]

    def compute(eval_pred) -> dict[str, float]:
        start, end = eval_pred.predictions[:2]
        spans = best_spans(contexts, dev_index, dev_offsets, np.asarray(start), np.asarray(end))
        preds = {row["id"]: span[0] for row, span in zip(dev_list, spans)}
        return {k: v for k, v in squad_metrics(preds, dev_list).items() if k != "n"}

    model = build_qa_model(cfg.model, spec, from_scratch=cfg.from_scratch)
    args = training_arguments(cfg, out, "f1", label_names=["start_positions", "end_positions"])
    trainer = AttnkitTrainer(model=model, args=args, head_lr=cfg.head_lr, train_dataset=train_ds, eval_dataset=dev_ds,
                      data_collator=DataCollatorWithPadding(tokenizer), processing_class=tokenizer, compute_metrics=compute,
                      callbacks=callbacks)
    prepare_output(cfg, out, splits=splits)  # everything before training worked: only now --no-resume moves checkpoints aside
    result = fit(trainer, cfg)
    history = list(trainer.state.log_history)  # every logged loss and per-epoch dev metric
    check_finite(trainer.model, cfg, history)
    dev = trainer.evaluate(dev_ds, metric_key_prefix="eval")
    metrics: dict = {
        "train": dict(result.metrics),
        "validation": strip_prefix(dev, "eval_"),
        **best_checkpoint(trainer, cfg),
        "attention": spec.to_dict(), "main_metric": "f1", "task": cfg.task, "precision": cfg.precision,
        "train_size": len(train_rows), "train_windows": len(train_ds), "validation_size": len(dev_rows),
        "max_length": cfg.max_length, "doc_stride": stride,
        "parameters": sum(p.numel() for p in model.parameters()),
        "log_history": history,
    }
    if trainer.is_world_process_zero():
        model_dir = save_checkpoint(trainer.model, out / MODEL_DIR, tokenizer,
                                    extra={"task": cfg.task, "trained_on": QA_TASKS.get(cfg.task, cfg.task), "metric": "squad",
                                           "max_length": cfg.max_length, "doc_stride": stride, "precision": cfg.precision})
        metrics["model_dir"] = str(model_dir)
        write_json_atomic(out / "run_config.json", asdict(cfg) | {"attention_spec": spec.to_dict()})
        write_json_atomic(out / METRICS_FILE, finite_record(metrics))
        finish_run(cfg, out, history, "f1", title=f"{cfg.task}: {spec.describe()}")
    return metrics
