"""Training on the Hugging Face Trainer: fine-tuning (classification and span QA share one run folder, resume and
settings check), MiniBERT's masked-LM pre-training, and the lam sweep.

- :mod:`config`: :class:`TrainConfig`, the SSAF paper's lam and epochs per task
- :mod:`runs`: what every run shares (run folder, resume, Trainer settings)
- :mod:`finetune`: :func:`train` (classification; dispatches span QA to :mod:`span_qa`)
- :mod:`pretrain`: MiniBERT tokenizer + MLM pre-training
- :mod:`sweep`: every (lam, seed) cell and a softmax baseline, with figures

The modules are imported by their full names (``from attnkit.training.X import ...``): this package imports nothing, so
that a light module of it does not load the others.
"""
