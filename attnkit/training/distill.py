"""Distillation from a teacher classifier (``--teacher``): its loading and checks, and the Trainer whose loss mixes
the labels with the teacher's softened predictions.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F

from attnkit.errors import UserError
from attnkit.models.checkpoint import load_model, load_tokenizer
from attnkit.models.resolve import checkpoint_dir, is_qa_model
from attnkit.runfiles.json_files import path_problem
from attnkit.training.config import TrainConfig
from attnkit.training.trainer import (
    AttnkitTrainer,
)


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
    try:
        teacher = load_model(path)
    except (OSError, ValueError) as e:  # (a folder of no model, a model of no head): named as --teacher's
        raise UserError(f"--teacher {cfg.teacher}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
    if is_qa_model(teacher.config):
        raise UserError(f"--teacher {cfg.teacher} is a question-answering model, not a classifier: distil from a model "
                        f"fine-tuned on task {cfg.task}")
    names = [teacher.config.id2label[i] for i in range(teacher.config.num_labels)] if teacher.config.id2label else []
    if data.metric == "regression" or list(map(str, names)) != list(map(str, data.label_names)):
        raise UserError(f"--teacher {cfg.teacher}: its labels {names} are not task {cfg.task}'s {data.label_names}: "
                         "distil from a model fine-tuned on the same task")
    t_vocab = load_tokenizer(path).get_vocab()
    if t_vocab != tokenizer.get_vocab():
        raise UserError(f"--teacher {cfg.teacher}: its tokenizer differs from the student's ({cfg.model}): the teacher must "
                         "read the same token ids (fine-tune both from the same encoder)")
    return teacher, path
