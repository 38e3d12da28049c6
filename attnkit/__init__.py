"""attnkit: sparse, local and minimal self-attention for transformer encoders.

``import attnkit`` is light (no torch): ``attnkit.sparsemax``, ``attnkit.sparsegen_lin``, ``attnkit.entmax15``,
``attnkit.entmax_bisect`` and ``attnkit.sparsify``
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

__all__ = ["sparsemax", "sparsegen_lin", "entmax15", "entmax_bisect", "sparsify", "__version__"]

_LAZY = {"sparsemax": "attnkit.attention.maps", "sparsegen_lin": "attnkit.attention.maps", "entmax15": "attnkit.attention.entmax",
         "entmax_bisect": "attnkit.attention.entmax", "sparsify": "attnkit.models.build"}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'attnkit' has no attribute {name!r}")


# ----------------------------------------------------------------------------- registration with transformers
# ``attnkit.models.build`` registers the model types when it is imported. It is imported (here) as soon as transformers
# is and no attnkit module is half imported: an attnkit module that imports transformers first would otherwise see
# attnkit.models.build import it back. So the check runs after transformers finishes importing and after each attnkit
# module does, until it succeeds.

_registered = False


def _register_when_ready() -> None:
    global _registered
    if _registered or "transformers" not in sys.modules:
        return
    if any(n.startswith("attnkit.") and getattr(getattr(m, "__spec__", None), "_initializing", False) for n, m in list(sys.modules.items())):
        return
    _registered = True
    for f in [f for f in sys.meta_path if isinstance(f, _RegisterWithTransformers)]:
        sys.meta_path.remove(f)
    importlib.import_module("attnkit.models.build")  # registers both model types (attnkit, attnkit-mini)


class _RegisterWithTransformers(importlib.abc.MetaPathFinder):
    """Runs :func:`_register_when_ready` right after ``transformers`` or an ``attnkit.*`` module is imported."""

    def find_spec(self, fullname, path, target=None):
        if fullname != "transformers" and not fullname.startswith("attnkit."):
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module

        def exec_then_register(module):
            exec_module(module)
            _register_when_ready()

        loader.exec_module = exec_then_register
        return spec


if "transformers" in sys.modules:
    _register_when_ready()
if not _registered and not any(isinstance(f, _RegisterWithTransformers) for f in sys.meta_path):
    sys.meta_path.insert(0, _RegisterWithTransformers())
