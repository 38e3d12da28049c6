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


def _register() -> None:
    mod = sys.modules.get("attnkit.modeling_attnkit")
    if mod is not None and not hasattr(mod, "register"):
        return  # it is being imported right now (it imported transformers): it registers itself when done
    from attnkit.modeling_attnkit import register

    register()


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
