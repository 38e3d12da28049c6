"""Warm-ups of the attention's setting during fine-tuning: lam from 0 to its target (``--lam-warmup``) and the
entmax maps from softmax to their alpha (``--alpha-warmup``), as Trainer callbacks.
"""

from __future__ import annotations

from dataclasses import replace

from transformers import TrainerCallback

from attnkit.attention.spec import AttentionSpec, spec_of
from attnkit.models.checkpoint import set_attention
from attnkit.training.config import TrainConfig

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
