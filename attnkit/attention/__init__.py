"""Attention: the maps, their kernels, the normaliser registry and the composition that runs inside Hugging Face models.

- :mod:`maps`, :mod:`entmax`: sparsemax / sparsegen-lin and the entmax family (exact, custom autograd)
- :mod:`kernels`: the C++ kernel (``csrc/``), compiled on first use, and :func:`kernels.backend_for`, which picks the
  C++, Triton (:mod:`triton_maps`) or torch path for a tensor
- :mod:`normalisers`: one :class:`normalisers.Normaliser` record per normaliser, and ``register_normaliser``
- :mod:`names`: the built-in normaliser names and the command line's choices (no torch)
- :mod:`spec`: :class:`spec.AttentionSpec` (normaliser x blur x layers), stored in a model's config
- :mod:`learned`: the per-head parameters of a learned setting (lam, alpha)
- :mod:`blur`: the Gaussian blur; :mod:`placement`: which layers use the map, and which layer a module is
- :mod:`forward`: the attention forward, registered with transformers' ``AttentionInterface`` and
  ``AttentionMaskInterface``

These modules (not ``triton_maps``) import each other relatively: they are also saved beside a checkpoint's weights
and run as its remote code (``attnkit.models.modeling_attnkit.CODE_FILES``).

The modules are imported by their full names (``from attnkit.attention.X import ...``): this package imports nothing, so
that a light module of it does not load the others.
"""
