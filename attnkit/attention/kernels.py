"""Optional compiled kernels for the sparse maps, with a correct fallback.

The CPU kernel (``csrc/sparsemax_cpu.cpp``) finds each row's exact threshold in cache:
the row max, then Michelot's fixed point from ``max - 1`` (vectorised masked passes,
four rows interleaved), then the output; the backward is the closed form. The entmax maps
are in it too: the entries above the threshold's lower bound are gathered in one pass (a handful on
attention rows); 1.5-entmax is then exact by the sort-based closed form on them, alpha-entmax (one
alpha per row) runs Newton's method from below on them to double precision on float64 rows, and on float32 rows Halley's
method in float SIMD lanes (vectorised exp and log; about 3 passes), whose last pass is extrapolated to the root. Rows run in
parallel on torch's OpenMP threads. It is compiled on first use with
``torch.utils.cpp_extension`` (needs a C++ compiler and ninja) and cached by torch; a
compiler without OpenMP gets a one-thread build, and :func:`backend_reason` says so.
Where it cannot be built, or with ``ATTNKIT_KERNEL=torch``, the pure-torch path in
:mod:`attnkit.attention.maps` runs instead: same results, slower. :func:`backend` says which one runs.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from pathlib import Path
from typing import Optional

import torch

log = logging.getLogger("attnkit")

# Vectorise the reductions (reassociation) but keep inf/NaN semantics: -inf marks padding.
_FLAGS = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros", "-fopenmp-simd", "-march=native"]
# at::parallel_for is a header template: without -fopenmp its `omp parallel` is ignored and
# the kernel runs on one thread. The extension links libgomp.so.1, which resolves to the copy
# torch has already loaded, so both share one thread pool.
_OPENMP = ["-fopenmp"]

_ext = None
_tried = False
_why = "not loaded yet"
#: ATTNKIT_KERNEL: "auto" (the compiled kernel for CPU tensors, Triton for CUDA tensors where triton is importable,
#: else pure torch), "torch" (pure torch everywhere), "triton" (Triton for every tensor: with TRITON_INTERPRET=1 it
#: runs on CPU tensors, which is how it is tested without a GPU)
MODE = os.environ.get("ATTNKIT_KERNEL", "auto").lower()
_triton = None
_triton_why = "not loaded yet"


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
    if MODE in ("torch", "triton"):
        _why = f"ATTNKIT_KERNEL={MODE}"
        return None
    errors = []
    # First with OpenMP (parallel over rows); a compiler without it gets the one-thread build.
    for tag, cflags, ldflags in (("omp", _FLAGS + _OPENMP, _OPENMP), ("serial", _FLAGS, [])):
        try:
            from torch.utils.cpp_extension import load

            src = Path(__file__).with_name("csrc") / "sparsemax_cpu.cpp"
            # -march=native: the build is only valid on this kind of CPU, so the cache name says which
            name = f"attnkit_sparsemax_cpu_v20_{tag}_{_cpu_tag()}"
            fresh = _announce_build([f"attnkit_sparsemax_cpu_v20_{t}_{_cpu_tag()}" for t in ("omp", "serial")])
            t0 = time.time()
            _ext = load(name=name, sources=[str(src)], extra_cflags=cflags, extra_ldflags=ldflags, verbose=False)
            if fresh:
                print(f"attnkit: sparse-attention kernel built in {time.time() - t0:.0f} s (cached for later runs)", file=sys.stderr, flush=True)
            _why = "compiled C++ kernel" + ("" if tag == "omp" else f", one thread (no OpenMP: {errors[-1]})")
            return _ext
        except Exception as e:  # no compiler, no ninja, build error: fall back, say why
            msg = str(e).strip()
            errors.append(f"{type(e).__name__}: {msg.splitlines()[-1] if msg else e}")
    _ext = None
    _why = f"C++ kernel unavailable ({errors[-1]})"
    log.warning("attnkit: %s; using the pure-torch sparse maps (exact, slower)", _why)
    return _ext


_announced = False


def _announce_build(names: list[str]) -> bool:
    """Say on stderr that the kernel is being compiled, where none of its builds is cached; True if so."""
    try:
        from torch.utils.cpp_extension import _get_build_directory

        built = any(any(Path(_get_build_directory(n, verbose=False)).glob(f"{n}*.so")) for n in names)
    except Exception:  # a private helper of torch: if it moves, just say nothing
        return False
    global _announced
    if not built and not _announced:
        _announced = True
        print("attnkit: building the sparse-attention kernel (once per machine and torch version, about a minute)...",
              file=sys.stderr, flush=True)
    return not built


def cpu_kernel():
    """The compiled CPU extension, or None."""
    return _ext if _tried else _load()


def kernel_applies(t) -> bool:
    """Whether the compiled CPU kernel runs for ``t``: a CPU float32/64 tensor with a non-empty last dim, and the
    kernel built. Its calls go through the custom ops below, which ``torch.compile`` traces."""
    if MODE == "triton" or t.device.type != "cpu" or t.dtype not in (torch.float32, torch.float64) or t.shape[-1] == 0:
        return False
    return cpu_kernel() is not None


def _define_ops() -> None:
    """The kernel's entry points as torch custom ops (``torch.ops.attnkit.*``), each with a fake (meta)
    implementation: ``torch.compile(fullgraph=True)`` traces them by their shapes instead of breaking the graph at an
    opaque extension call. Defined once per process (a checkpoint's remote copy of this file finds them defined)."""
    try:
        torch.ops.attnkit.sparsemax_forward  # noqa: B018  already defined (attnkit and a remote copy in one process)
        return
    except (AttributeError, RuntimeError):
        pass

    @torch.library.custom_op("attnkit::sparsemax_forward", mutates_args=())
    def sparsemax_forward(z: torch.Tensor, scale: float) -> torch.Tensor:
        return cpu_kernel().forward(z, scale)[0]

    @torch.library.custom_op("attnkit::sparsemax_backward", mutates_args=())
    def sparsemax_backward(p: torch.Tensor, g: torch.Tensor, scale: float) -> torch.Tensor:
        return cpu_kernel().backward(p, g, scale)

    @torch.library.custom_op("attnkit::entmax_forward", mutates_args=())
    def entmax_forward(z: torch.Tensor, alpha: Optional[torch.Tensor]) -> torch.Tensor:
        """1.5-entmax (alpha None) or alpha-entmax with one alpha per row."""
        return cpu_kernel().entmax_forward(z, alpha if alpha is not None else torch.empty(0, dtype=torch.float64))

    @torch.library.custom_op("attnkit::entmax_backward", mutates_args=())
    def entmax_backward(p: torch.Tensor, g: torch.Tensor, alpha: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(gradient of the scores, gradient of alpha per row shaped like ``alpha``; empty for 1.5-entmax)."""
        grad_z, grad_alpha = cpu_kernel().entmax_backward(p, g, alpha if alpha is not None else torch.empty(0, dtype=torch.float64))
        return grad_z, grad_alpha

    def _sparsemax_backward_setup(ctx, inputs, output):
        p, _, scale = inputs
        ctx.save_for_backward(p)
        ctx.scale = scale

    def _sparsemax_backward_vjp(ctx, grad):
        # the backward is scale * (g - mean of g on the support) on the support: linear and symmetric in g, and p
        # enters only through its support (locally constant), so a double backward is the same map of grad
        (p,) = ctx.saved_tensors
        return None, torch.ops.attnkit.sparsemax_backward(p, grad, ctx.scale), None

    sparsemax_backward.register_autograd(_sparsemax_backward_vjp, setup_context=_sparsemax_backward_setup)

    def like_first(x, *rest):
        return torch.empty_like(x.contiguous())

    for op in (sparsemax_forward, sparsemax_backward, entmax_forward):
        op.register_fake(like_first)

    @entmax_backward.register_fake
    def _(p, g, alpha):
        rows = torch.empty_like(alpha) if alpha is not None else p.new_empty(0, dtype=torch.float64)
        return torch.empty_like(p.contiguous()), rows


_define_ops()


def triton_kernels():
    """:mod:`attnkit.attention.triton_maps` if triton is importable (and ATTNKIT_KERNEL is not "torch"), else None."""
    global _triton, _triton_why
    if _triton is None and _triton_why == "not loaded yet":
        if MODE == "torch":
            _triton_why = "ATTNKIT_KERNEL=torch"
        else:
            try:
                _triton = importlib.import_module(f"{__package__}.triton_maps")
                _triton_why = "Triton kernels" + (" (TRITON_INTERPRET=1: interpreted on the CPU)" if os.environ.get("TRITON_INTERPRET") == "1" else "")
            except ImportError as e:  # no triton (pip install -e ".[gpu]"), or this file runs as a checkpoint's remote code
                _triton_why = f"triton unavailable ({e})"
    return _triton


def triton_applies(t) -> bool:
    """Whether the Triton kernels run for ``t``: a float32/64 tensor with rows of 1 to MAX_COLS entries, on CUDA (or
    any device with ATTNKIT_KERNEL=triton), and triton importable."""
    if MODE == "torch" or t.dtype not in (torch.float32, torch.float64) or not 0 < t.shape[-1] <= 8192:
        return False
    if MODE != "triton" and t.device.type != "cuda":
        return False
    return triton_kernels() is not None


def backend() -> str:
    """'triton' where ATTNKIT_KERNEL=triton and triton is importable, 'cpp' if the compiled CPU kernel runs, else
    'torch' (CUDA tensors take Triton whenever it is importable); see :func:`backend_reason`."""
    if MODE == "triton" and triton_kernels() is not None:
        return "triton"
    return "cpp" if cpu_kernel() is not None else "torch"


def backend_reason() -> str:
    if backend() == "triton":
        return _triton_why
    cpu_kernel()
    return _why
