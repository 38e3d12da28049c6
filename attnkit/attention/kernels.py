"""Optional compiled kernels for the sparse maps, with a correct fallback.

The CPU kernel (``csrc/sparsemax_cpu.cpp``) finds each row's exact threshold in cache:
the row max, then Michelot's fixed point from ``max - 1`` (vectorised masked passes,
four rows interleaved), then the output; the backward is the closed form. The entmax maps
are in it too: the entries above the threshold's lower bound are gathered in one pass (a handful on
attention rows); 1.5-entmax is then exact by the sort-based closed form on them, alpha-entmax (one
alpha per row) runs Newton's method from below on them to double precision on float64 rows, and on float32 rows Halley's
method in float SIMD lanes (vectorised exp and log; about 3 passes), whose last pass is extrapolated to the root. Rows run in
parallel on torch's OpenMP threads. It is compiled on first use with
``torch.utils.cpp_extension`` (needs a C++ compiler and ninja) into torch's extensions folder, under attnkit's
own lock (which the OS releases when its holder dies), and recorded there (:mod:`.kernel_build`); later runs import a
build that matches its record directly, with no lock, and rebuild one that does not (a truncated or corrupt library
is never loaded). A compiler without OpenMP gets a one-thread build, and :func:`backend_reason` says so.
Where it cannot be built, or with ``ATTNKIT_KERNEL=torch``, the pure-torch path in
:mod:`attnkit.attention.maps` runs instead: same results, slower. :func:`backend` says which one runs.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import sys
import time
from typing import Optional

import torch
from ..errors import UserError
from .kernel_build import SOURCE, build_name, builds, load_or_build

log = logging.getLogger("attnkit")


_ext = None
_tried = False
_why = "not loaded yet"
#: ATTNKIT_KERNEL: "auto" (the compiled kernel for CPU tensors, Triton for CUDA tensors where triton is importable,
#: else pure torch), "torch" (pure torch everywhere), "triton" (Triton for every tensor: with TRITON_INTERPRET=1 it
#: runs on CPU tensors, which is how it is tested without a GPU); checked when the choice is first consulted
MODE = (os.environ.get("ATTNKIT_KERNEL", "").strip() or "auto").lower()
MODES = ("auto", "torch", "triton")
_triton = None
_triton_why = "not loaded yet"


def _load():
    global _ext, _tried, _why
    if _tried:
        return _ext
    mode = kernel_choice()  # a wrong ATTNKIT_KERNEL is refused here, at every call
    _tried = True
    if mode in ("torch", "triton"):
        _why = f"ATTNKIT_KERNEL={mode}"
        return None
    errors = []
    # First with OpenMP (parallel over rows); a compiler without it gets the one-thread build.
    for tag, cflags, ldflags in builds():
        try:
            t0 = time.time()
            _ext, built = load_or_build(build_name(tag), SOURCE, cflags, ldflags)
            if built:
                print(f"attnkit: sparse-attention kernel built in {time.time() - t0:.0f} s (cached for later runs)", file=sys.stderr, flush=True)
            _why = "compiled C++ kernel" + ("" if tag == "omp" else f", one thread (no OpenMP: {errors[-1]})")
            return _ext
        except Exception as e:  # no compiler, no ninja, build error, unwritable cache: fall back, say why
            msg = str(e).strip()
            errors.append(f"{type(e).__name__}: {msg.splitlines()[-1] if msg else e}")
    _ext = None
    _why = f"C++ kernel unavailable ({errors[-1]})"
    log.warning("attnkit: %s; using the pure-torch sparse maps (exact, slower)", _why)
    return _ext


def cpu_kernel():
    """The compiled CPU extension, or None."""
    return _ext if _tried else _load()


def kernel_applies(t) -> bool:
    """Whether the compiled CPU kernel runs for ``t``: a CPU float32/64 tensor with a non-empty last dim, and the
    kernel built. Its calls go through the custom ops below, which ``torch.compile`` traces."""
    if t.device.type != "cpu" or t.dtype not in (torch.float32, torch.float64) or t.shape[-1] == 0:
        return False
    return _kernel_ready()


# The answers below read files, import modules and may build the kernel: torch.compile takes each as a constant
# of the graph, computed by calling the function (not tracing it), so a first call under tracing works.
@torch.compiler.assume_constant_result
def kernel_choice() -> str:
    """ATTNKIT_KERNEL, checked: another value than auto/torch/triton, or triton where triton is not importable, is
    refused in one line (when the choice is consulted: importing attnkit never fails on it)."""
    if MODE not in MODES:
        raise UserError(f"ATTNKIT_KERNEL={MODE!r} is not a kernel choice: expected auto, torch or triton (any case)")
    if MODE == "triton" and triton_kernels() is None:
        raise UserError(f"ATTNKIT_KERNEL=triton, but the Triton kernels are unavailable ({_triton_why}): install "
                         "triton (pip install -e '.[gpu]') or set ATTNKIT_KERNEL=auto")
    if MODE == "triton" and os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        raise UserError("ATTNKIT_KERNEL=triton, but this machine has no CUDA GPU: Triton's kernels run on one, or on the "
                        "CPU under TRITON_INTERPRET=1 (slow: for testing); set ATTNKIT_KERNEL=auto")
    return MODE


@torch.compiler.assume_constant_result
def _kernel_ready() -> bool:
    """Whether the compiled CPU kernel runs (ATTNKIT_KERNEL allows it, and it loaded or was built now)."""
    return kernel_choice() == "auto" and cpu_kernel() is not None


@torch.compiler.assume_constant_result
def _triton_ready() -> bool:
    return triton_kernels() is not None


def _op_kernel():
    """The extension the custom ops run: attnkit's own where attnkit is imported (whichever copy of this file defined
    the ops: a checkpoint's remote copy, loaded first, has no kernel of its own), else this copy's."""
    main = sys.modules.get("attnkit.attention.kernels")
    ext = main.cpu_kernel() if main is not None else None
    return ext if ext is not None else cpu_kernel()


def _define_ops() -> None:
    """The kernel's entry points as torch custom ops (``torch.ops.attnkit.*``), each with a fake (meta)
    implementation: ``torch.compile(fullgraph=True)`` traces them by their shapes instead of breaking the graph at an
    opaque extension call. Defined once per process, by whichever copy of this file comes first (attnkit's, or a
    checkpoint's remote copy): their bodies find the kernel through :func:`_op_kernel`, so either order runs."""
    try:
        torch.ops.attnkit.sparsemax_forward  # noqa: B018  already defined (attnkit and a remote copy in one process)
        return
    except (AttributeError, RuntimeError):
        pass

    @torch.library.custom_op("attnkit::sparsemax_forward", mutates_args=())
    def sparsemax_forward(z: torch.Tensor, scale: float) -> torch.Tensor:
        return _op_kernel().forward(z, scale)[0]

    @torch.library.custom_op("attnkit::sparsemax_backward", mutates_args=())
    def sparsemax_backward(p: torch.Tensor, g: torch.Tensor, scale: float) -> torch.Tensor:
        return _op_kernel().backward(p, g, scale)

    @torch.library.custom_op("attnkit::entmax_forward", mutates_args=())
    def entmax_forward(z: torch.Tensor, alpha: Optional[torch.Tensor]) -> torch.Tensor:
        """1.5-entmax (alpha None) or alpha-entmax with one alpha per row."""
        return _op_kernel().entmax_forward(z, alpha if alpha is not None else torch.empty(0, dtype=torch.float64))

    @torch.library.custom_op("attnkit::entmax_backward", mutates_args=())
    def entmax_backward(p: torch.Tensor, g: torch.Tensor, alpha: Optional[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(gradient of the scores, gradient of alpha per row shaped like ``alpha``; empty for 1.5-entmax)."""
        grad_z, grad_alpha = _op_kernel().entmax_backward(p, g, alpha if alpha is not None else torch.empty(0, dtype=torch.float64))
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
    mode = kernel_choice()
    if mode == "torch" or t.dtype not in (torch.float32, torch.float64) or not 0 < t.shape[-1] <= 8192:
        return False
    if mode != "triton" and t.device.type != "cuda":
        return False
    return _triton_ready()


def plain(t: torch.Tensor) -> bool:
    """Whether ``t`` is an ordinary tensor, not one of a ``torch.func`` transform (vmap's batched tensor, grad's
    tracking one): those go to torch's own ops, which every transform knows, not to the kernels. (torch.compile
    traces plain tensors: the question is not asked there.)"""
    if torch.compiler.is_compiling():
        return True
    functorch = torch._C._functorch
    return not (functorch.is_batchedtensor(t) or functorch.is_gradtrackingtensor(t))


def backend_for(t: torch.Tensor, *inputs: torch.Tensor, backward: bool = False, differentiable: tuple = ()) -> str:
    """Which backend runs a map on ``t``: "cpp" (the compiled CPU kernel), "triton" or "torch".

    ``inputs``: the call's other tensors (alpha; in a backward the output's gradient), which must be plain tensors
    (:func:`plain`) for Triton, and in a backward for any kernel. ``backward``: the kernels give first derivatives
    only, so a backward run with grad mode on (a double backward) takes torch's form, except on the backends named in
    ``differentiable`` (whose backward op is itself differentiable)."""
    if backward and not all(plain(x) for x in inputs):
        return "torch"
    allowed = differentiable if backward and torch.is_grad_enabled() else ("cpp", "triton")
    if "cpp" in allowed and kernel_applies(t):
        return "cpp"
    if "triton" in allowed and triton_applies(t) and plain(t) and all(plain(x) for x in inputs):
        return "triton"
    return "torch"


def kernel_ops(backend_name: str):
    """The ops of a kernel backend ("cpp" or "triton"): ``sparsemax_forward(z, scale)``,
    ``sparsemax_backward(p, g, scale)``, ``entmax_forward(z, alpha)``, ``entmax_backward(p, g, alpha)``."""
    return torch.ops.attnkit if backend_name == "cpp" else triton_kernels()


def backend() -> str:
    """'triton' where ATTNKIT_KERNEL=triton and triton is importable, 'cpp' if the compiled CPU kernel runs, else
    'torch' (CUDA tensors take Triton whenever it is importable); see :func:`backend_reason`."""
    if kernel_choice() == "triton":  # (refused where triton is not importable)
        return "triton"
    return "cpp" if cpu_kernel() is not None else "torch"


def backend_reason() -> str:
    if backend() == "triton":
        return _triton_why
    cpu_kernel()
    return _why
