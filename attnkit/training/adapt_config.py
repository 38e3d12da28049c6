"""What ``attnkit adapt`` depends on: :class:`AdaptConfig` (continued masked-LM pre-training of an encoder for a
sparse map), light like :mod:`attnkit.training.config` (the command line reads its defaults without torch)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from attnkit.attention.names import NormaliserChoices
from attnkit.errors import UserError
from attnkit.training.config import PRECISIONS, check_not_inside, check_seed

if TYPE_CHECKING:
    from attnkit.attention.spec import AttentionSpec

#: the alpha an entmax anneal starts from (AdaSplash's 1.01: all but softmax, every weight still positive)
ADAPT_ALPHA_START = 1.01
#: sparsegen-lin's anneal starts at the lam whose temperature 1 - lam is this many times larger (a much denser map)
ADAPT_LAM_FACTOR = 8.0


@dataclass
class AdaptConfig:
    """Continued masked-LM pre-training of an encoder for a sparse map (``attnkit adapt``); written to
    ``<output>/run_config.json``. The sparsity is annealed from (nearly) softmax to the target over ``anneal``."""

    tasks: list = field(default_factory=lambda: ["rotten-tomatoes"])  # tasks whose TRAINING texts are read
    text_files: list = field(default_factory=list)  # the user's own texts, one per line
    data_dir: str | None = None
    model: str = "minilm"
    attention: str = "entmax15"
    lam: float = -4.0  # sparsegen-lin's target lam
    alpha: float = 1.5  # entmax-alpha's target alpha (entmax15: 1.5)
    anneal: float = 0.5  # fraction of the steps (< 1) or a step count over which the map goes from dense to the target
    head_warmup: float = 0.05  # fraction of the steps (< 1) or a step count in which only the MLM head trains (the encoder frozen)
    sparse_layers: str | None = None
    max_steps: int = 2000
    batch_size: int = 32
    lr: float = 5e-5
    warmup_ratio: float = 0.06
    weight_decay: float = 0.01
    max_length: int = 128
    max_train_samples: int | None = None
    mlm_probability: float = 0.15
    seed: int = 42
    output_dir: str = "runs/adapt"
    resume: bool = True
    logging_steps: int = 50
    save_steps: int = 500
    precision: str = "fp32"
    keep_checkpoints: bool = False

    def spec(self) -> AttentionSpec:
        from attnkit.attention.normalisers import normaliser  # torch: only when a run is set up, not for --help
        from attnkit.attention.spec import AttentionSpec

        try:
            setting = normaliser(self.attention).setting
            return AttentionSpec(self.attention, self.lam if setting == "lam" else 0.0,
                                 alpha=self.alpha if setting == "alpha" else 1.5, sparse_layers=self.sparse_layers)
        except ValueError as e:
            raise UserError(str(e).replace("sparse_layers=", "--sparse-layers ").replace("a sparse attention", "a sparse --attention")) from None

    def validate(self) -> None:
        if self.attention not in NormaliserChoices(adapt_only=True):
            raise UserError(f"--attention {self.attention}: attnkit adapt takes {', '.join(NormaliserChoices(adapt_only=True))}")
        if not self.tasks and not self.text_files:
            raise UserError("no text to adapt on: give --task (its training split) or --text-file")
        check_not_inside("--model", self.model, self.output_dir)
        check_not_inside("--data-dir", self.data_dir, self.output_dir, "the data it reads")
        for f in self.text_files:
            check_not_inside("--text-file", f, self.output_dir, "the data it reads")
        if self.spec().normaliser.setting == "alpha" and self.alpha <= ADAPT_ALPHA_START:
            raise UserError(f"--alpha {self.alpha:g}: the anneal starts at alpha {ADAPT_ALPHA_START:g}; give a target above it "
                            "(1.5: 1.5-entmax)")
        if len(set(self.tasks)) != len(self.tasks) or len(set(self.text_files)) != len(self.text_files):
            raise UserError("a --task or --text-file given twice: each is read once")
        for t in self.tasks:
            if ":" in t:
                name, _, split = t.partition(":")
                raise UserError(f"--task {t}: attnkit adapt reads training texts only (never {split} texts, which would "
                                 f"leak into the evaluation): give --task {name}")
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise UserError(f"--max-steps {self.max_steps}: expected a number of steps >= 1")
        if not (isinstance(self.anneal, (int, float)) and math.isfinite(self.anneal) and self.anneal >= 0) or (self.anneal >= 1 and self.anneal != int(self.anneal)):
            raise UserError(f"--anneal {self.anneal}: expected a fraction of the steps (< 1) or a whole step count, >= 0")
        if not (isinstance(self.head_warmup, (int, float)) and math.isfinite(self.head_warmup) and self.head_warmup >= 0) or (self.head_warmup >= 1 and self.head_warmup != int(self.head_warmup)):
            raise UserError(f"--head-warmup {self.head_warmup}: expected a fraction of the steps (< 1) or a whole step count, >= 0")
        if self.head_warmup >= 1 and self.head_warmup >= self.max_steps:
            raise UserError(f"--head-warmup {self.head_warmup:g}: the run has {self.max_steps} steps, so the encoder would never train")
        if self.anneal >= 1 and self.anneal > self.max_steps:
            raise UserError(f"--anneal {self.anneal:g}: the run has {self.max_steps} steps, so the anneal would never reach its "
                             "target; give a fraction of the steps (< 1) or fewer steps")
        for name, v in (("--batch-size", self.batch_size), ("--logging-steps", self.logging_steps), ("--save-steps", self.save_steps)):
            if not isinstance(v, int) or v < 1:
                raise UserError(f"{name} {v}: expected a whole number >= 1")
        if not (isinstance(self.lr, (int, float)) and math.isfinite(self.lr) and self.lr > 0):
            raise UserError(f"--lr {self.lr}: expected a learning rate > 0")
        if not (isinstance(self.warmup_ratio, (int, float)) and math.isfinite(self.warmup_ratio) and 0 <= self.warmup_ratio < 1):
            raise UserError(f"--warmup {self.warmup_ratio}: expected a fraction of the steps, >= 0 and < 1")
        if not (isinstance(self.weight_decay, (int, float)) and math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise UserError(f"--weight-decay {self.weight_decay}: expected a finite number >= 0")
        if not isinstance(self.max_length, int) or self.max_length < 3:
            raise UserError(f"--max-length {self.max_length}: expected a whole number of tokens of at least 3 ([CLS], a token, [SEP])")
        if self.max_train_samples is not None and (not isinstance(self.max_train_samples, int) or self.max_train_samples < 1):
            raise UserError(f"--max-train-samples {self.max_train_samples}: expected a whole number >= 1")
        if not 0 < self.mlm_probability < 1:
            raise UserError(f"--mlm-probability {self.mlm_probability}: expected a fraction in (0, 1)")
        if self.precision not in PRECISIONS:
            raise UserError(f"precision {self.precision!r}: expected one of {', '.join(PRECISIONS)} (--bf16, --fp16, or neither)")
        check_seed(self.seed)

    def head_warmup_steps(self) -> int:
        """The first steps, in which the encoder is frozen and only the MLM head trains."""
        return int(self.head_warmup * self.max_steps) if self.head_warmup < 1 else int(self.head_warmup)

    def anneal_steps(self) -> int:
        """The number of steps over which the map goes from dense to its target (0: none, the target from step 0)."""
        return int(self.anneal * self.max_steps) if self.anneal < 1 else int(self.anneal)
