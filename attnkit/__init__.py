"""attnkit: sparse, local and minimal self-attention for transformer encoders.

``import attnkit`` is light (no torch): ``attnkit.sparsemax``, ``attnkit.sparsegen_lin``, ``attnkit.entmax15``,
``attnkit.entmax_bisect``, ``attnkit.sparse_attention``, ``attnkit.attention_weights`` (flash sparse attention) and
``attnkit.sparsify`` (and ``attnkit.AttentionSpec``, what its ``spec=`` takes) load their modules on first use.

Registration with transformers is explicit: :func:`register` (or ``import attnkit.models``) adds attnkit's model types
to the Auto classes and ``pipeline`` and its attention to ``AttentionInterface``. ``import attnkit`` registers at once
when transformers is already imported; every attnkit loader and command registers before it loads a model.
"""

from __future__ import annotations

import sys

__version__ = "0.1.0"

__all__ = ["sparsemax", "sparsegen_lin", "entmax15", "entmax_bisect", "sparse_attention", "attention_weights", "sparsify",
           "AttentionSpec", "register", "__version__"]


def __getattr__(name: str):
    if name in ("sparsemax", "sparsegen_lin"):
        from attnkit.attention import maps

        return getattr(maps, name)
    if name in ("entmax15", "entmax_bisect"):
        from attnkit.attention import entmax

        return getattr(entmax, name)
    if name in ("sparse_attention", "attention_weights"):
        from attnkit.attention import flash

        return getattr(flash, name)
    if name == "sparsify":
        from attnkit.models.sparsify import sparsify

        return sparsify
    if name == "AttentionSpec":  # what sparsify(spec=...) takes
        from attnkit.attention.spec import AttentionSpec

        return AttentionSpec
    raise AttributeError(f"module 'attnkit' has no attribute {name!r}")


def register() -> None:
    """Register attnkit with transformers: the ``attnkit`` and ``attnkit-mini`` model types in the Auto classes and
    ``pipeline``, attnkit's attention in ``AttentionInterface`` (idempotent)."""
    from attnkit import models

    models.register()


if "transformers" in sys.modules:
    register()
