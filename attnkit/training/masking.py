"""Masked-LM masking that a resumed run repeats exactly: each batch masked by a generator of its own, its place kept in every checkpoint."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from transformers import DataCollatorForLanguageModeling, TrainerCallback
from transformers.trainer_callback import ExportableState

log = logging.getLogger("attnkit")

#: how the masks are drawn; a checkpoint whose state names another scheme (or none) cannot be resumed exactly
SCHEME = "one generator per batch, seeded by (seed, process, batch)"


class BatchSeededMasking:
    """The MLM collator of a training run: the k-th batch this process collates is masked by a torch generator seeded
    from (``seed``, ``process``, k), never by torch's global RNG.

    Masks drawn from the global RNG share one stream with dropout, and a resumed run cannot repeat that stream: the
    dataloader collates a batch ahead of the step that uses it, and the Trainer sets its saved RNG state back only after
    the first resumed batch was collated, so masks and dropout both differ from the first resumed step on. Seeded per
    batch, a batch's masks depend on its place in the run alone (:attr:`batches`, which :class:`MaskingState` keeps in
    each checkpoint and sets back on resume); dropout keeps the global RNG, which the Trainer restores before the
    first resumed step."""

    def __init__(self, collator: DataCollatorForLanguageModeling, seed: int, process: int = 0):
        self.collator, self.seed, self.process = collator, int(seed), int(process)
        self.batches = 0  # batches collated so far in this process

    def __call__(self, features):
        self.collator.seed = int(np.random.SeedSequence([self.seed, self.process, self.batches]).generate_state(1)[0])
        self.collator.generator = None  # the collator makes its generator afresh from .seed
        self.batches += 1
        return self.collator(features)


class MaskingState(TrainerCallback, ExportableState):
    """Keeps :class:`BatchSeededMasking`'s place (the batches the steps so far took) in every checkpoint, in
    trainer_state.json's ``stateful_callbacks``, which the Trainer writes with the checkpoint, and sets it back when
    training resumes from one. A checkpoint without it (an earlier attnkit's, whose masks came from the global RNG)
    is resumed with one warning that the run will not equal an uninterrupted one."""

    def __init__(self, masking: BatchSeededMasking):
        self.masking = masking
        self.batches = 0
        self.note: str | None = None  # set when a resume cannot be exact, for the run's metrics

    def state(self) -> dict:
        return {"args": {}, "attributes": {"scheme": SCHEME, "seed": self.masking.seed, "batches": self.batches}}

    def on_step_end(self, args, state, control, **kw):
        self.batches = state.global_step * args.gradient_accumulation_steps

    def on_train_begin(self, args, state, control, **kw):
        name = type(self).__name__
        saved = (state.stateful_callbacks or {}).get(name)
        saved = saved.get("attributes") if isinstance(saved, dict) else None
        batches = state.global_step * args.gradient_accumulation_steps
        if state.global_step > 0:
            if isinstance(saved, dict) and saved.get("scheme") == SCHEME and isinstance(saved.get("batches"), int):
                batches = saved["batches"]
            else:
                ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
                self.note = (f"resumed from {ckpt}, which does not record the state of its masking (an earlier attnkit "
                             f"wrote it): the masks from step {state.global_step + 1} on, and so the model, are not those "
                             "of an uninterrupted run")
                log.warning("%s; add --no-resume to train afresh for an exact run", self.note)
        self.batches = self.masking.batches = batches
        if state.stateful_callbacks is not None:
            state.stateful_callbacks[name] = self.state()  # the Trainer updates only the entries its state holds
