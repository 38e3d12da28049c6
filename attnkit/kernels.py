"""Optional compiled kernels for the sparse maps, with a correct fallback.

The CPU kernel (``csrc/sparsemax_cpu.cpp``) finds each row's exact threshold in cache:
max, the candidates within 1 of it, Michelot's fixed point on those, then the output;
the backward is the closed form. It is compiled on first use with
``torch.utils.cpp_extension`` (needs a C++ compiler and ninja) and cached by torch.
Where it cannot be built, or with ``ATTNKIT_KERNEL=torch``, the pure-torch path in
:mod:`attnkit.maps` runs instead: same results, slower. :func:`backend` says which one runs.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

log = logging.getLogger("attnkit")

# Vectorise the reductions (reassociation) but keep inf/NaN semantics: -inf marks padding.
_FLAGS = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros", "-fopenmp-simd", "-march=native"]

_ext = None
_tried = False
_why = "not loaded yet"


def _cpu_tag() -> str:
    import hashlib
    import platform

    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l for l in f if l.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return hashlib.md5((platform.machine() + flags).encode()).hexdigest()[:8]


def _load():
    global _ext, _tried, _why
    if _tried:
        return _ext
    _tried = True
    if os.environ.get("ATTNKIT_KERNEL", "auto").lower() == "torch":
        _why = "ATTNKIT_KERNEL=torch"
        return None
    try:
        from torch.utils.cpp_extension import load

        src = Path(__file__).with_name("csrc") / "sparsemax_cpu.cpp"
        # -march=native: the build is only valid on this kind of CPU, so the cache name says which
        _ext = load(name=f"attnkit_sparsemax_cpu_v10_{_cpu_tag()}", sources=[str(src)], extra_cflags=_FLAGS, verbose=False)
        _why = "compiled C++ kernel"
    except Exception as e:  # no compiler, no ninja, build error: fall back, say why
        _ext = None
        _why = f"C++ kernel unavailable ({type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else e})"
        log.warning("attnkit: %s; using the pure-torch sparse maps (exact, slower)", _why)
    return _ext


def cpu_kernel():
    """The compiled CPU extension, or None."""
    return _ext if _tried else _load()


def backend() -> str:
    """'cpp' if the compiled CPU kernel runs, else 'torch'; see :func:`backend_reason`."""
    return "cpp" if cpu_kernel() is not None else "torch"


def backend_reason() -> str:
    cpu_kernel()
    return _why
