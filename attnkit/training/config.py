"""What a run depends on: :class:`TrainConfig` (fine-tuning), :class:`PretrainConfig` (MiniBERT's MLM), and the
SSAF paper's lam and epochs per task (:class:`~attnkit.training.adapt_config.AdaptConfig` is beside it).

This module is light on purpose: the command line reads its defaults to answer ``--help`` without torch. The
attention and head settings it builds (:meth:`TrainConfig.spec`, :meth:`TrainConfig.head`) live in torch-backed
modules, which it imports in those methods only: the one kind of import inside a function that attnkit allows
(``tests/layout/test_layers.py`` checks that it is only here and in the command line's dispatch, and that it points down).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnkit.attention.names import KINDS
from attnkit.runfiles.names import METRICS_FILE, MODEL_DIR  # noqa: F401  (re-exported: where a run keeps what)
from attnkit.tasks.lemmas import lemmatizer
from attnkit.errors import UserError

if TYPE_CHECKING:
    from attnkit.models.mini_config import MiniShape
    from attnkit.attention.spec import AttentionSpec
    from attnkit.models.pooling import HeadSpec

#: lam used by the SSAF paper for each dataset (METHODS.md §1); Rotten Tomatoes takes SST-2's.
PAPER_LAM = {
    "sst5": -3.0,
    "sst5-phrases": -3.0,
    "semeval2013": -3.0,
    "sst2": -4.0,
    "sst2-ptb": -4.0,
    "sentube-tablets": -4.0,
    "sentube-auto": -6.0,
    "rotten-tomatoes": -4.0,
    "squad": -7.0,
    "scitail": -6.0,
}
#: epochs used by the SSAF paper for each dataset
PAPER_EPOCHS = {"sst5": 4, "sst5-phrases": 4, "sst2": 4, "sst2-ptb": 4, "sentube-auto": 5, "sentube-tablets": 6, "semeval2013": 8, "squad": 2, "scitail": 3}

#: a run's arithmetic: float32, or mixed precision with matrix products in bfloat16 / float16 (``--bf16``, ``--fp16``)
PRECISIONS = ("fp32", "bf16", "fp16")


def check_seed(seed, option: str = "--seed") -> int:
    """A seed as numpy and torch take it: a whole number from 0 to 2**32 - 1."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise UserError(f"{option} {seed}: expected a whole number from 0 to {2**32 - 1}")
    return seed


def check_not_inside(option: str, value: str | None, output_dir: str, reads: str = "the model it reads") -> None:
    """What a run reads (``--model``, ``--teacher``; ``--data-dir``, ``--text-file`` with ``reads="the data it reads"``)
    may not be the run's own ``--output-dir`` or inside it: the run would write (or, with ``--no-resume``, move aside)
    what it reads, and its record would name a path that then holds the run itself, or nothing. A name that is no
    existing path (a hub model, ``minilm``) is inside only where it is the folder."""
    if value is None:
        return
    try:
        path, out = Path(value).expanduser().resolve(), Path(output_dir).expanduser().resolve()
    except (OSError, RuntimeError):  # a symlink loop: said where the path is read
        return
    if path == out or (out in path.parents and path.exists()):
        where = "is this run's --output-dir" if path == out else f"is inside this run's --output-dir {output_dir}"
        raise UserError(f"{option} {value} {where}: the run would write over {reads} (--no-resume moves the folder aside "
                        f"whole); give another --output-dir (or copy {value} elsewhere first)")


#: settings whose command-line option is not --<name with dashes>
_OPTIONS = {"precision": "--bf16/--fp16", "pooling": "--layer-pooling", "warmup_ratio": "--warmup", "resume": "--no-resume", "eval_batch_size": "eval batch size",
            "learned": "--learn-lam/--learn-alpha"}


def option_name(field: str) -> str:
    """The command-line option of a TrainConfig/PretrainConfig setting (``max_steps`` -> ``--max-steps``), for messages."""
    return _OPTIONS.get(field, "--" + field.replace("_", "-"))


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
    holdout: float = 0.0  # a seeded random fraction of the training split kept out of training and scored at the end ("heldout")
    eval_steps: int | None = None  # None: evaluate once per epoch (or at the end of --max-steps)
    resume: bool = True
    logging_steps: int = 50
    group_by_length: bool = False  # batches of similar length (less padding; same examples per epoch)
    precision: str = "fp32"  # fp32 | bf16 | fp16: mixed precision under autocast (weights and optimizer stay float32)
    learned: str | None = None  # "lam" (sparsegen-lin) or "alpha" (entmax-alpha): learned per layer and head from its value
    lam_lr: float | None = None  # learned lam: the learning rate of the lam parameters (None: lr, like every weight)
    lemmatize: str | None = None  # language: texts replaced by their lemmas (simplemma), recorded with the model
    keep_checkpoints: bool = False  # keep the Trainer's checkpoint-N folders (with optimizer state) after a finished run
    lam_warmup: float = 0.0  # sparsegen-lin: lam moves from a denser start to lam over this fraction of the steps (or count); 0: off
    alpha: float = 1.5  # entmax-alpha: 1 is softmax, 1.5 1.5-entmax, 2 sparsemax
    alpha_lr: float | None = None  # learned alpha: the learning rate of the alpha parameters (None: lr)
    alpha_warmup: float = 0.0  # entmax maps: alpha moves from 1 (softmax) to its target over this fraction of the steps (or count); 0: off
    sparse_layers: str | None = None  # layers that use the sparse map ("last", "4-5", "0,5"); None: all; the others keep softmax
    teacher: str | None = None  # a fine-tuned model (or run folder) whose predictions the student also learns from
    distill_weight: float = 0.5  # with teacher: loss = (1 - w) * cross-entropy(labels) + w * T^2 * KL(teacher || student at T)
    distill_temperature: float = 2.0
    # SesameBERT: locality step and layer pooling
    blur: str = "none"  # none | context | value
    blur_size: int = 3
    blur_sigma: float = 0.3
    pooling: str = "last"  # first | second | second-to-last | last | sum-last-four | sum-all | weighted
    se: bool = False
    se_ratio: int = 3
    pooling_lr: float | None = None  # the learning rate of the layer weights (SE, the weighted mix); None: lr, like every weight
    freeze: str | None = None  # comma-separated parameter groups not trained (attnkit.models.freeze.GROUPS)
    # --model mini: a MiniBERT trained from scratch (tokenizer from the training text, random weights)
    # (None: the defaults sa, 1, 1, 32, 4000; unused for any other model)
    kind: str | None = None
    layers: int | None = None
    heads: int | None = None
    dim: int | None = None
    vocab_size: int | None = None
    score_scale: str | None = None  # none (the paper's bare dot product) | sqrt (1/sqrt(d_head), the default)
    head_mode: str | None = None  # split (d/H per head, BERT's; the default) | full (each head d wide, W_o back to d)

    def validate(self) -> None:
        """ValueError naming the first setting that cannot give a meaningful run."""
        if not isinstance(self.max_steps, int) or self.max_steps == 0 or self.max_steps < -1:
            raise UserError(f"--max-steps {self.max_steps}: expected a number of steps >= 1 (or no --max-steps: --epochs decides)")
        if not (isinstance(self.epochs, (int, float)) and math.isfinite(self.epochs) and self.epochs > 0):
            raise UserError(f"--epochs {self.epochs:g}: expected a number of epochs > 0")
        check_seed(self.seed)
        for name, v in (("--batch-size", self.batch_size), ("eval batch size", self.eval_batch_size)):
            if not isinstance(v, int) or v < 1:
                raise UserError(f"{name} {v}: expected a whole number >= 1")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise UserError(f"--lr {self.lr}: expected a learning rate > 0")
        if not (isinstance(self.warmup_ratio, (int, float)) and math.isfinite(self.warmup_ratio) and self.warmup_ratio >= 0):
            raise UserError(f"--warmup {self.warmup_ratio}: expected a fraction of the steps (< 1) or a step count, >= 0")
        if self.warmup_ratio >= 1 and self.warmup_ratio != int(self.warmup_ratio):
            raise UserError(f"--warmup {self.warmup_ratio}: expected a fraction of the steps (< 1) or a whole step count")
        if not (isinstance(self.weight_decay, (int, float)) and math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise UserError(f"--weight-decay {self.weight_decay}: expected a finite number >= 0")
        for name, v in (("--lam-warmup", self.lam_warmup), ("--alpha-warmup", self.alpha_warmup)):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0) or (v >= 1 and v != int(v)):
                raise UserError(f"{name} {v}: expected a fraction of the steps (< 1) or a whole step count, >= 0")
        if not isinstance(self.logging_steps, int) or self.logging_steps < 1:
            raise UserError(f"--logging-steps {self.logging_steps}: expected a whole number >= 1")
        if not isinstance(self.max_length, int) or self.max_length < 2:
            raise UserError(f"--max-length {self.max_length}: expected a whole number of tokens, enough for a model's own tokens and the text (at least 3: "
                            "[CLS], one token of text, [SEP])")
        for name, v in (("--max-train-samples", self.max_train_samples), ("--max-eval-samples", self.max_eval_samples), ("--eval-steps", self.eval_steps)):
            if v is not None and v < 1:
                raise UserError(f"{name} {v}: expected a whole number >= 1")
        if not (isinstance(self.holdout, (int, float)) and math.isfinite(self.holdout) and 0 <= self.holdout < 1):
            raise UserError(f"--holdout {self.holdout}: expected the fraction of the training split to hold out, >= 0 and < 1")
        if self.precision not in PRECISIONS:
            raise UserError(f"precision {self.precision!r}: expected one of {', '.join(PRECISIONS)} (--bf16, --fp16, or neither)")
        if self.lemmatize:
            lemmatizer(self.lemmatize)
        self.spec()
        self.head()
        check_mini_shape(self.score_scale, self.head_mode)
        check_not_inside("--model", self.model, self.output_dir)
        check_not_inside("--teacher", self.teacher, self.output_dir)
        check_not_inside("--data-dir", self.data_dir, self.output_dir, "the data it reads")
        if self.teacher is not None or self.distill_weight != 0.5 or self.distill_temperature != 2.0:
            if self.teacher is None:
                raise UserError("--distill-weight/--distill-temperature: need --teacher (the model whose predictions are distilled)")
            if not (isinstance(self.distill_weight, (int, float)) and 0 < self.distill_weight <= 1):
                raise UserError(f"--distill-weight {self.distill_weight}: expected a weight > 0 and <= 1 (1: the teacher alone)")
            if not (isinstance(self.distill_temperature, (int, float)) and math.isfinite(self.distill_temperature) and self.distill_temperature > 0):
                raise UserError(f"--distill-temperature {self.distill_temperature}: expected a temperature > 0")
        if self.pooling_lr is not None:
            if not (self.se or self.pooling == "weighted"):
                raise UserError(f"--pooling-lr {self.pooling_lr}: needs --se or --layer-pooling weighted (the layer weights it trains)")
            if not (isinstance(self.pooling_lr, (int, float)) and math.isfinite(self.pooling_lr) and self.pooling_lr > 0):
                raise UserError(f"--pooling-lr {self.pooling_lr}: expected a learning rate > 0")

    def spec(self) -> AttentionSpec:
        from attnkit.attention.normalisers import NORMALISERS, canonical, names_with  # torch: only when a run is set up, not for --help
        from attnkit.attention.spec import AttentionSpec

        lam = self.lam if self.lam is not None else PAPER_LAM.get(self.task, 0.0)
        norm = NORMALISERS.get(canonical(self.attention))
        setting, anneal = (norm.setting, norm.anneal) if norm is not None else (None, None)
        if self.learned not in (None, "lam", "alpha"):
            raise UserError(f"learned={self.learned!r}: expected 'lam' (--learn-lam), 'alpha' (--learn-alpha) or None")
        if self.lam_lr is not None and not (self.learned == "lam" and isinstance(self.lam_lr, (int, float)) and math.isfinite(self.lam_lr) and self.lam_lr > 0):
            raise UserError(f"--lam-lr {self.lam_lr}: needs --learn-lam and a learning rate > 0")
        if self.lam_warmup and (setting != "lam" or not self.lam_warmup > 0):
            raise UserError(f"--lam-warmup {self.lam_warmup}: needs --attention {' or '.join(names_with(setting='lam'))} and a fraction of the steps (< 1) or a step count > 0")
        if self.alpha_lr is not None and not (self.learned == "alpha" and isinstance(self.alpha_lr, (int, float)) and math.isfinite(self.alpha_lr) and self.alpha_lr > 0):
            raise UserError(f"--alpha-lr {self.alpha_lr}: needs --learn-alpha and a learning rate > 0")
        if self.alpha_warmup and (anneal != "alpha" or not (math.isfinite(self.alpha_warmup) and self.alpha_warmup > 0)):
            raise UserError(f"--alpha-warmup {self.alpha_warmup}: needs --attention {' or '.join(names_with(anneal='alpha'))} and a fraction of the steps (< 1) or a step count > 0")
        if (self.alpha != 1.5 or self.learned == "alpha") and setting != "alpha":
            raise UserError(f"--alpha/--learn-alpha: need --attention {' or '.join(names_with(setting='alpha'))}, not {self.attention}")
        try:
            shape = {"blur_size": self.blur_size, "blur_sigma": self.blur_sigma} if self.blur != "none" else {}  # (the CLI refuses a shape without a blur)
            return AttentionSpec(self.attention, lam if setting == "lam" else 0.0, blur=self.blur, **shape,
                                 learned=self.learned, alpha=self.alpha, sparse_layers=self.sparse_layers)
        except ValueError as e:
            msg = re.sub(r"^learned=(\w+)", r"--learn-\1", str(e))  # learned=lam needs ... -> --learn-lam needs ...
            msg = re.sub(r"^(\w+)=(.*?):", lambda m: f"{option_name(m.group(1))} {m.group(2).strip(chr(39))}:", msg)  # blur_size=4: -> --blur-size 4:
            msg = msg.replace("sparse_layers=", "--sparse-layers ").replace("a sparse attention", "a sparse --attention")
            raise UserError(f"--alpha {self.alpha}: {msg}" if "alpha" in msg and not msg.startswith(("--alpha", "--learn")) else msg) from None

    @property
    def head_lr(self) -> float | None:
        """The learning rate of the settings learned per head (--lam-lr, --alpha-lr); None: --lr, like every weight."""
        return self.lam_lr if self.learned == "lam" else self.alpha_lr

    def head(self) -> HeadSpec:
        from attnkit.models.pooling import HeadSpec  # torch: only when a run is set up, not for --help

        try:
            return HeadSpec(self.pooling, se=self.se, se_ratio=self.se_ratio)
        except ValueError as e:
            raise UserError(str(e).replace("se_ratio=", "--se-ratio ")) from None

    def mini_shape(self) -> MiniShape:
        """The shape of a MiniBERT trained from scratch (``--model mini``): the options given, else the defaults."""
        from attnkit.models.mini_config import MiniShape  # torch: only when a run is set up, not for --help

        given = {k: getattr(self, k) for k in ("kind", "layers", "heads", "dim", "vocab_size", "score_scale", "head_mode")}
        return MiniShape(**{k: v for k, v in given.items() if v is not None})


# ----------------------------------------------------------------------------- MiniBERT pre-training

MINI_ALIASES = ("mini", "minibert")
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MAX_POSITIONS = 512
DEFAULT_MINI_LR = 1e-2  # a tiny model trained from (nearly) scratch: AdamW at 1e-2 (best of 1e-3, 3e-3, 1e-2 on SemEval-2013), not BERT's 2e-5
DEFAULT_VOCAB = 4000


SCORE_SCALES = ("none", "sqrt")  # as attnkit.models.mini_config (not imported here: no torch for --help)
HEAD_MODES = ("split", "full")


def check_mini_shape(score_scale, head_mode) -> None:
    """ValueError naming --score-scale or --head-mode when either is not one of its choices (None: the default)."""
    if score_scale is not None and score_scale not in SCORE_SCALES:
        raise UserError(f"--score-scale {score_scale!r}: expected one of {', '.join(SCORE_SCALES)} (none = the paper's bare dot product)")
    if head_mode is not None and head_mode not in HEAD_MODES:
        raise UserError(f"--head-mode {head_mode!r}: expected one of {', '.join(HEAD_MODES)}")


def is_mini_alias(model) -> bool:
    return str(model).lower() in MINI_ALIASES


@dataclass
class PretrainConfig:
    """Everything a pre-training run depends on; written to ``<output>/run_config.json``."""

    task: str = "semeval2013"
    data_dir: str | None = None
    kind: str = "sa"
    attention: str = "softmax"
    lam: float = 0.0
    layers: int = 1
    heads: int = 1
    dim: int = 32
    vocab_size: int = DEFAULT_VOCAB
    epochs: float = 10.0
    batch_size: int = 32
    lr: float = DEFAULT_MINI_LR
    max_length: int = 128
    mlm_probability: float = 0.15
    seed: int = 42
    output_dir: str = "runs/mini-pretrain"
    max_train_samples: int | None = None
    logging_steps: int = 50
    lemmatize: str | None = None  # language: the corpus is lemmatised (simplemma) before the tokenizer is trained
    score_scale: str = "sqrt"  # none: the paper's bare dot product; sqrt: scores / sqrt(d_head) (BERT, the authors' package)
    head_mode: str = "split"  # split: H heads of d/H (BERT); full: H heads of width d and an output projection back to d
    resume: bool = True  # False: an earlier run in output_dir is moved aside (.replaced-<date>/) and pre-training starts afresh

    def shape(self) -> MiniShape:
        from attnkit.models.mini_config import MiniShape  # torch: only when a run is set up, not for --help

        return MiniShape(self.kind, self.layers, self.heads, self.dim, self.vocab_size, self.score_scale, self.head_mode)

    def spec(self) -> AttentionSpec:
        from attnkit.attention.normalisers import NORMALISERS, canonical
        from attnkit.attention.spec import AttentionSpec

        norm = NORMALISERS.get(canonical(self.attention))
        return AttentionSpec(self.attention, self.lam if norm is None or norm.setting == "lam" else 0.0)

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise UserError(f"--kind {self.kind!r}: expected one of {', '.join(KINDS)} (MiniSA, MiniSSA, MiniNTA)")
        if self.lemmatize:
            lemmatizer(self.lemmatize)
        self.spec()
        for name in ("layers", "heads", "dim", "batch_size"):
            if getattr(self, name) < 1:
                raise UserError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(self, name)}")
        if not isinstance(self.max_length, int) or self.max_length < 3:  # 2 holds [CLS] and [SEP] alone: nothing to mask
            raise UserError(f"--max-length {self.max_length}: expected a whole number of tokens of at least 3 ([CLS], a "
                             "token to mask, [SEP])")
        check_seed(self.seed)
        check_mini_shape(self.score_scale, self.head_mode)
        check_not_inside("--data-dir", self.data_dir, self.output_dir, "the data it reads")
        if self.head_mode == "split" and self.dim % self.heads:
            raise UserError(f"--dim {self.dim} is not divisible by --heads {self.heads}")
        if not (isinstance(self.epochs, (int, float)) and math.isfinite(self.epochs) and self.epochs > 0):
            raise UserError(f"--epochs {self.epochs}: expected a number of epochs > 0")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise UserError(f"--lr {self.lr}: expected a learning rate > 0")
        if self.max_train_samples is not None and self.max_train_samples < 1:
            raise UserError(f"--max-train-samples {self.max_train_samples}: expected a whole number >= 1")
        if self.logging_steps < 1:
            raise UserError(f"--logging-steps {self.logging_steps}: expected a whole number >= 1")
        if self.max_length > MAX_POSITIONS:
            raise UserError(f"--max-length {self.max_length}: MiniBERT has {MAX_POSITIONS} positions at most")
        if not 0 < self.mlm_probability < 1:
            raise UserError(f"mlm_probability must be in (0, 1), got {self.mlm_probability}")
