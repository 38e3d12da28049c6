"""Command-line arguments turned into settings: the configs of train/sweep, MiniBERT's shape and the options a
command would ignore (refused), the model's length.
"""

from __future__ import annotations

import logging
import sys

from attnkit.analysis.inference import (
    model_dir,
    run_info,
)
from attnkit.attention.forward import attention_path
from attnkit.attention.kernels import kernel_choice
from attnkit.attention.normalisers import names_with, normaliser
from attnkit.errors import UserError
from attnkit.models.checkpoint import unbuildable
from attnkit.models.checks import check_model_folder
from attnkit.models.freeze import parse_groups
from attnkit.models.mini import MODEL_TYPE as MINI_MODEL_TYPE
from attnkit.models.resolve import (
    adapted_record,
    check_max_length,
    checkpoint_dir,
    checkpoint_spec,
    max_positions,
)
from attnkit.runfiles.atomic import is_main_process
from attnkit.runfiles.json_files import read_json
from attnkit.tasks import is_qa_task
from attnkit.training.config import (
    DEFAULT_MINI_LR,
    PAPER_EPOCHS,
    TrainConfig,
    is_mini_alias,
)
from attnkit.training.recipes import apply_recipe



def check_environment() -> None:
    """attnkit's run-time variables (ATTNKIT_KERNEL, ATTNKIT_ATTENTION) checked before any work: a wrong value was
    refused only where a sparse map ran, and a softmax model's run ignored it without a word."""
    kernel_choice()
    attention_path()

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
        given = "/".join(o for o, v in (("--blur-size", a.blur_size), ("--blur-sigma", a.blur_sigma)) if v is not None)
        ignored.append(f"{given} ({'they shape' if '/' in given else 'it shapes'} the blur: add --blur context or --blur value)")
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
        epochs=a.epochs if a.epochs is not None else PAPER_EPOCHS.get(a.task, TrainConfig.epochs), max_steps=_max_steps(a.max_steps), batch_size=a.batch_size, warmup_ratio=a.warmup,
        weight_decay=a.weight_decay, max_length=a.max_length, doc_stride=a.doc_stride, seed=a.seed, output_dir=a.output_dir,
        resume=not a.no_resume, max_train_samples=a.max_train_samples, max_eval_samples=a.max_eval_samples,
        holdout=a.holdout, eval_steps=a.eval_steps, logging_steps=a.logging_steps, group_by_length=a.group_by_length, precision=a.precision,
        learned="lam" if a.learn_lam else "alpha" if a.learn_alpha else None, lam_lr=a.lam_lr, lam_warmup=a.lam_warmup, alpha=alpha,
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
        raise UserError(f"{', '.join(given)} only appl{'ies' if len(given) == 1 else 'y'} to --model mini (a checkpoint's architecture is fixed by its config.json)")
    for k in ("layers", "heads", "dim", "vocab_size"):
        if shape[k] is not None and shape[k] < 1:
            raise UserError(f"--{k.replace('_', '-')} must be a positive integer, got {shape[k]}")
    if shape["head_mode"] != "full" and (shape["dim"] or 32) % (shape["heads"] or 1):
        raise UserError(f"--dim {shape['dim'] or 32} is not divisible by --heads {shape['heads']}")
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
    elif ckpt is not None and is_main_process() and (stored := checkpoint_spec(model)) is not None:
        # `attnkit sweep` sets the attention itself (a.swept: the option it sweeps), so it is not the user's --attention
        swept = getattr(a, "swept", None)
        given, way_out = ((f"the sweep's {attention} (at each {swept} value)", "") if swept else
                          (f"--attention {attention}", ": leave out --attention to fine-tune as it was adapted"))
        if stored.sparse_layers is not None and getattr(a, "sparse_layers", None) is None:  # (adapted with --sparse-layers)
            logging.getLogger("attnkit").warning(
                "%s holds %s in layers %s only; %s without --sparse-layers puts its map in every layer%s (or give "
                "--sparse-layers)", ckpt, stored.attention, stored.sparse_layers, given, way_out)
        elif attention != stored.attention and adapted_record(ckpt) is not None:  # it ran without a word (sweep s24)
            logging.getLogger("attnkit").warning(
                "%s was adapted to %s (attnkit adapt); %s fine-tunes it with another map%s", ckpt, stored.describe(),
                given, way_out.replace("as it was adapted", "with the map it was adapted to"))
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
    try:
        config = AutoConfig.from_pretrained(d)
    except UserError:
        raise
    except ValueError as e:
        raise unbuildable(d, e) from None
    if a.max_length is None:
        a.max_length = int(run_info(d).get("max_length") or min(128, max_positions(config) or 128))
    check_max_length(a.max_length, config, str(d))


def print_blur_note(cfg: TrainConfig) -> None:
    """Say so on stderr (once, on the main process) when the blur asked for does not blur."""
    note = cfg.spec().blur_note()
    if note and is_main_process():
        print(f"[attnkit] note: {note}", file=sys.stderr)


def _max_steps(given: int | None) -> int:
    """--max-steps as TrainConfig takes it: a number of steps >= 1, or none given (-1: --epochs decides)."""
    if given is None:
        return TrainConfig.max_steps
    if given < 1:
        raise UserError(f"--max-steps {given}: expected a number of steps >= 1 (or no --max-steps: --epochs decides)")
    return given
