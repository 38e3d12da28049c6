"""Attention: the maps, their compiled CPU kernel and the composition that runs inside Hugging Face models.

- :mod:`maps`: sparsemax and sparsegen-lin (exact, custom autograd), on the kernel or in torch
- :mod:`kernels`: the C++ kernel (``csrc/``), compiled on first use
- :mod:`spec`: :class:`AttentionSpec` (score projection x normaliser x blur), the attention forward and its
  registration with transformers' ``AttentionInterface`` and ``AttentionMaskInterface``
- :mod:`names`: the normaliser names (no torch)

``maps``, ``kernels`` and ``spec`` import each other relatively: they are also saved beside a checkpoint's
weights and run as its remote code.

The modules are imported by their full names (``from attnkit.attention.X import ...``): this package imports nothing, so
that a light module of it does not load the others.
"""
