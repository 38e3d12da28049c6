"""Moved to ``studies/minibert/minibert.py`` (issue 39). This stub keeps ``import minibert`` working for
``benchmarks/faithfulness.py``, which reuses that grid's runs and settings."""

import importlib.util as _util
from pathlib import Path as _Path

_spec = _util.spec_from_file_location("_studies_minibert", _Path(__file__).resolve().parents[1] / "studies" / "minibert" / "minibert.py")
_mod = _util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)
globals().update({k: v for k, v in vars(_mod).items() if not k.startswith("__")})
