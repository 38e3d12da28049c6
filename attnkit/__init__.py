"""attnkit: sparse, local and minimal self-attention for transformer encoders.

``import attnkit`` is light (no torch): ``attnkit.sparsemax``, ``attnkit.sparsegen_lin``, ``attnkit.entmax15``,
``attnkit.entmax_bisect``, ``attnkit.sparse_attention``, ``attnkit.attention_weights`` (flash sparse attention) and
``attnkit.sparsify`` (and ``attnkit.AttentionSpec``, what its ``spec=`` takes) load their modules on first use.

:func:`register` (or ``import attnkit.models``) adds attnkit's model types to the Auto classes and ``pipeline`` and its
attention to ``AttentionInterface``. ``import attnkit`` registers at once when transformers is already imported, and
otherwise as soon as transformers is (in either order, ``AutoModel...from_pretrained`` reads a model attnkit saved);
every attnkit loader and command registers before it loads a model.
"""

from __future__ import annotations

import importlib.util
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


class _RegisterWithTransformers:
    """A finder on ``sys.meta_path`` that registers attnkit once transformers is imported, after ``import attnkit``
    (``import attnkit`` stays light: no torch, no transformers). It finds nothing itself: it wraps the module that the
    other finders find for ``transformers``, and removes itself the first time."""

    def find_spec(self, name, path=None, target=None):
        if name != "transformers":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run = loader.exec_module

        def exec_module(module):
            run(module)
            try:
                register()
            except Exception:  # noqa: BLE001  (transformers imports as ever; attnkit's loaders register again and say why)
                pass

        loader.exec_module = exec_module
        return spec


if "transformers" in sys.modules:
    register()
elif not any(isinstance(f, _RegisterWithTransformers) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterWithTransformers())
