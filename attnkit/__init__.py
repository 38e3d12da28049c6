"""attnkit: sparse, local and minimal self-attention for transformer encoders.

``import attnkit`` is light (no torch): ``attnkit.sparsemax``, ``attnkit.sparsegen_lin`` and ``attnkit.sparsify``
load their modules on first use, and attnkit's model type and attention are registered with transformers as soon as
transformers itself is imported (at once if it already is), so the Auto classes and ``pipeline`` know attnkit's
checkpoints with no further call.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

__version__ = "0.1.0"

__all__ = ["sparsemax", "sparsegen_lin", "sparsify", "__version__"]

_LAZY = {"sparsemax": "attnkit.maps", "sparsegen_lin": "attnkit.maps", "sparsify": "attnkit.modeling"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnkit' has no attribute {name!r}")


_pending = False


def _register(done: str | None = None) -> None:
    """Register with transformers, unless an attnkit module is half imported (it imported transformers first):
    then the registration waits for :func:`_register_if_pending` at the end of that module."""
    global _pending
    busy = [n for n, m in list(sys.modules.items()) if n.startswith("attnkit.") and n != done
            and getattr(getattr(m, "__spec__", None), "_initializing", False)]
    if busy:
        _pending = True
        return
    _pending = False
    from attnkit.modeling_attnkit import register

    register()


def _register_if_pending(done: str) -> None:
    """Called at the end of the attnkit modules that import transformers (``done``: the caller's name)."""
    if _pending:
        _register(done)


class _RegisterWithTransformers(importlib.abc.MetaPathFinder):
    """Runs :func:`_register` right after ``transformers`` is imported (one time)."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "transformers":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _register()

        spec.loader.exec_module = exec_then_register
        return spec


if "transformers" in sys.modules:
    _register()
elif not any(isinstance(f, _RegisterWithTransformers) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterWithTransformers())
