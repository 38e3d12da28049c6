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
own lock (which the OS releases when its holder dies), and recorded there (the library's size and sha256); later
runs import a build that matches its record directly, with no lock, and rebuild one that does not (a truncated or
corrupt library is never loaded). A compiler without OpenMP gets a one-thread build, and :func:`backend_reason` says so.
Where it cannot be built, or with ``ATTNKIT_KERNEL=torch``, the pure-torch path in
:mod:`attnkit.attention.maps` runs instead: same results, slower. :func:`backend` says which one runs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import platform
import sys
import time
from pathlib import Path
from typing import Optional

import torch
from ..errors import UserError

log = logging.getLogger("attnkit")

try:
    import fcntl
except ImportError:  # no flock (Windows, where this file can run as a checkpoint's remote code): builds take no lock
    fcntl = None

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
#: runs on CPU tensors, which is how it is tested without a GPU); checked when the choice is first consulted
MODE = (os.environ.get("ATTNKIT_KERNEL", "").strip() or "auto").lower()
MODES = ("auto", "torch", "triton")
_triton = None
_triton_why = "not loaded yet"
#: in each build folder: attnkit's lock (flock, released by the OS when its holder dies) and the record of the
#: finished build (the library's size and sha256, and what it was built from), written after the build succeeded
_BUILD_LOCK = "attnkit-build.lock"
_BUILD_RECORD = "attnkit-build.json"


@functools.lru_cache(maxsize=None)
def _cpu_tag() -> str:
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
    mode = _kernel_choice()  # a wrong ATTNKIT_KERNEL is refused here, at every call
    _tried = True
    if mode in ("torch", "triton"):
        _why = f"ATTNKIT_KERNEL={mode}"
        return None
    errors = []
    # First with OpenMP (parallel over rows); a compiler without it gets the one-thread build.
    for tag, cflags, ldflags in _builds():
        try:
            t0 = time.time()
            _ext, built = _load_or_build(_build_name(tag), _SOURCE, cflags, ldflags)
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


def _builds() -> tuple:
    """The builds tried in turn: (tag, extra compiler flags, extra linker flags)."""
    return ("omp", _FLAGS + _OPENMP, _OPENMP), ("serial", _FLAGS, [])


_SOURCE = Path(__file__).with_name("csrc") / "sparsemax_cpu.cpp"


def _build_name(tag: str) -> str:
    # -march=native: the build is only valid on this kind of CPU, so the cache name says which
    return f"attnkit_sparsemax_cpu_v21_{tag}_{_cpu_tag()}"


def _build_root() -> Path:
    """Where torch keeps extension builds: $TORCH_EXTENSIONS_DIR, else its per-user cache folder for this Python and
    accelerator (as ``torch.utils.cpp_extension`` names it)."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root is not None:
        return Path(root)
    from torch.utils.cpp_extension import get_default_build_root

    acc = (f"rocm{torch.version.hip.replace('.', '')}" if torch.version.hip else
           f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu")
    return Path(get_default_build_root()) / f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_{acc}"


def _build_key(src: Path, cflags: list[str], ldflags: list[str]) -> str:
    """What a build is made from (the source, the flags, torch and Python): a record with another key is stale."""
    h = hashlib.sha256(src.read_bytes())
    h.update(json.dumps([cflags, ldflags, torch.__version__, sys.implementation.cache_tag]).encode())
    return h.hexdigest()


def _build_state(folder: Path, name: str, key: str) -> str:
    """"ok" where the library in ``folder`` is, byte for byte, the one its build record describes; "stale" where
    there is no record (no build, an older attnkit's, or a build killed before its end) or one for other sources or
    flags; "damaged" where the record is for this build but the library differs (truncated, corrupt, missing)."""
    try:
        record = json.loads((folder / _BUILD_RECORD).read_text())
        if not isinstance(record, dict) or record.get("key") != key:
            return "stale"
    except (OSError, ValueError):
        return "stale"
    try:
        data = (folder / f"{name}.so").read_bytes()
    except OSError:
        return "damaged"
    ok = len(data) == record.get("size") and hashlib.sha256(data).hexdigest() == record.get("sha256")
    return "ok" if ok else "damaged"


def _load_or_build(name: str, src: Path, cflags: list[str], ldflags: list[str]):
    """(the extension module, whether it was built now). A build whose record matches is imported at once, with no
    lock; else the build runs in its folder under attnkit's lock (a waiting process then finds it built), after
    clearing what an earlier build left (a stale ``lock`` of torch's, a damaged library), and is recorded."""
    folder = _build_root() / name
    key = _build_key(src, cflags, ldflags)
    if _build_state(folder, name, key) == "ok":
        return _import_built(name, folder / f"{name}.so"), False
    folder.mkdir(parents=True, exist_ok=True)
    with _build_lock(folder):
        state = _build_state(folder, name, key)
        if state == "ok":  # built by the process this one waited for
            return _import_built(name, folder / f"{name}.so"), False
        if state == "damaged":
            print(f"attnkit: the cached sparse-attention kernel {folder / (name + '.so')} is damaged (not the file its "
                  "build recorded); rebuilding it", file=sys.stderr, flush=True)
        _announce_build()
        for f in folder.iterdir():  # a fresh build: nothing an earlier (killed, damaged) one left is reused
            if f.name != _BUILD_LOCK and not f.is_dir():
                f.unlink(missing_ok=True)
        from torch.utils.cpp_extension import load

        ext = load(name=name, sources=[str(src)], extra_cflags=cflags, extra_ldflags=ldflags,
                   build_directory=str(folder), verbose=False)
        _write_record(folder, name, key)
        return ext, True


def _import_built(name: str, library: Path):
    """Import the extension module ``library`` (as torch's loader does once it has built it)."""
    spec = importlib.util.spec_from_file_location(name, library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _build_lock(folder: Path):
    """Hold attnkit's lock on a build folder (flock: the OS releases it when its holder exits or is killed)."""
    if fcntl is None:
        yield
        return
    path = folder / _BUILD_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"attnkit: waiting for another process that is building the sparse-attention kernel (it holds {path})...",
                  file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_record(folder: Path, name: str, key: str) -> None:
    """Record the library just built (size, sha256, key), on disk before the record, through a temporary file and
    a rename: a record names only a whole library."""
    with open(folder / f"{name}.so", "rb") as f:
        data = f.read()
        os.fsync(f.fileno())
    tmp = folder / f".{_BUILD_RECORD}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"key": key, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / _BUILD_RECORD)


_announced = False


def _announce_build() -> None:
    """Say on stderr that the kernel is being compiled, once, where none of its builds is cached (a retried OpenMP
    build beside a cached one-thread build says nothing)."""
    global _announced
    if _announced:
        return
    try:
        built = any(_build_state(_build_root() / _build_name(t), _build_name(t), _build_key(_SOURCE, c, l)) == "ok"
                    for t, c, l in _builds())
    except OSError:
        built = False
    if not built:
        _announced = True
        print("attnkit: building the sparse-attention kernel (once per machine and torch version, about a minute)...",
              file=sys.stderr, flush=True)


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
def _kernel_choice() -> str:
    """ATTNKIT_KERNEL, checked: another value than auto/torch/triton, or triton where triton is not importable, is
    refused in one line (when the choice is consulted: importing attnkit never fails on it)."""
    if MODE not in MODES:
        raise UserError(f"ATTNKIT_KERNEL={MODE!r} is not a kernel choice: expected auto, torch or triton (any case)")
    if MODE == "triton" and triton_kernels() is None:
        raise UserError(f"ATTNKIT_KERNEL=triton, but the Triton kernels are unavailable ({_triton_why}): install "
                         "triton (pip install -e '.[gpu]') or set ATTNKIT_KERNEL=auto")
    return MODE


@torch.compiler.assume_constant_result
def _kernel_ready() -> bool:
    """Whether the compiled CPU kernel runs (ATTNKIT_KERNEL allows it, and it loaded or was built now)."""
    return _kernel_choice() == "auto" and cpu_kernel() is not None


@torch.compiler.assume_constant_result
def _triton_ready() -> bool:
    return triton_kernels() is not None


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
    mode = _kernel_choice()
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
    if _kernel_choice() == "triton":  # (refused where triton is not importable)
        return "triton"
    return "cpp" if cpu_kernel() is not None else "torch"


def backend_reason() -> str:
    if backend() == "triton":
        return _triton_why
    cpu_kernel()
    return _why
