"""Sparse probability maps: sparsemax and sparsegen-lin.

Both are Euclidean projections onto the simplex (METHODS.md §1):

    sparsemax(z)          = max(0, z - tau(z)),   sum_j = 1
    sparsegen_lin(z; lam) = sparsemax(z / (1 - lam)),   lam < 1

Forward is exact. On CPU a compiled kernel (:mod:`attnkit.attention.kernels`) finds each row's
threshold in cache; elsewhere, or where it cannot be built, ``tau`` is found from the
top ``k`` scores of each row (attention rows have small supports) and the few rows whose
support might be larger than ``k`` are finished with a full sort. Both paths are exact.

Backward is closed form (no autograd through a sort):

    grad_z = s * (g - mean_{j in S} g_j) / (1 - lam),   s = 1[p > 0]

Each row is shifted by its maximum before anything else (as entmax does), so the result is
shift-invariant and exact for scores of any magnitude. ``-inf`` entries (masked keys) get
exactly 0. A row that is entirely ``-inf`` gives all zeros and a zero gradient. A row with
``+inf`` entries gives them equal shares of the mass (the limit as those scores grow). A row holding a NaN comes out all NaN (never silently renormalised). Half-precision inputs are computed in float32 and
returned in their own dtype.
"""

from __future__ import annotations

import contextlib
import math
import operator

import torch

from .kernels import backend_for, kernel_ops  # relative: this file also runs as a checkpoint's remote code
from ..errors import UserError

__all__ = ["sparsemax", "sparsegen_lin", "sparsemax_threshold", "rowwise", "TOPK"]

# How many of the largest scores the fast path looks at before falling back to a
# full sort. Measured supports on MiniLM attention are a handful of entries.
TOPK = 16


def _support_from_sorted(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Given scores sorted descending along the last dim, return (k*, cumsum).

    k* = max{k : 1 + k v_k > sum_{j<=k} v_j}; the condition holds exactly for
    k = 1..k*, so counting the rows where it holds gives k*.  -inf entries never
    satisfy it (1 + k*(-inf) = -inf is not > -inf).
    """
    cs = v.cumsum(-1)
    r = torch.arange(1, v.shape[-1] + 1, device=v.device, dtype=v.dtype)
    k = (1 + r * v > cs).sum(-1, keepdim=True)
    return k, cs


def sparsemax_threshold(z: torch.Tensor, topk: int = TOPK) -> tuple[torch.Tensor, torch.Tensor]:
    """Threshold tau and support size of sparsemax along the last dim of ``z``.

    Returns ``(tau, k)`` with shapes ``z.shape[:-1] + (1,)``. Rows that are all
    ``-inf`` get ``k = 0`` and a ``tau`` of ``+inf``, so ``z - tau`` clamps to 0.
    """
    n = z.shape[-1]
    k0 = min(n, topk) if topk > 0 else n
    if z.device.type != "cpu" or torch.compiler.is_compiling():
        k0 = n  # a full sort: the top-k shortcut reads on the host whether a row needs it (a GPU sync, a graph break)
    if k0 < n:
        v = torch.topk(z, k0, dim=-1, sorted=True).values
    else:
        v = torch.sort(z, dim=-1, descending=True).values
    k, cs = _support_from_sorted(v)
    if k0 < n:
        # A row whose top-k all satisfy the condition may have a larger support:
        # finish those rows exactly with a full sort.
        unsure = (k == k0).squeeze(-1)
        if bool(unsure.any()):
            zr = z[unsure]
            vr = torch.sort(zr, dim=-1, descending=True).values
            kr, csr = _support_from_sorted(vr)
            taur = (csr.gather(-1, (kr - 1).clamp(min=0)) - 1) / kr.clamp(min=1).to(z.dtype)
            tau_small = (cs.gather(-1, (k - 1).clamp(min=0)) - 1) / k.clamp(min=1).to(z.dtype)
            tau = tau_small.clone()
            tau[unsure] = taur
            k = k.clone()
            k[unsure] = kr
            return _mask_empty(tau, k), k
    tau = (cs.gather(-1, (k - 1).clamp(min=0)) - 1) / k.clamp(min=1).to(z.dtype)
    return _mask_empty(tau, k), k


def _mask_empty(tau: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    # Fully masked rows: every entry is -inf, k = 0. Make z - tau = -inf - inf = -inf -> 0.
    return torch.where(k == 0, torch.full_like(tau, math.inf), tau)


def _torch_forward(z: torch.Tensor, scale: float, topk: int) -> torch.Tensor:
    """sparsemax(scale * z) on any device, as the kernel computes it: each row shifted by its max first."""
    row_max = z.amax(-1, keepdim=True)
    # fully masked rows keep -inf (max -inf), rows with +inf (max +inf) are finished below: shift those by 0
    m = torch.where(torch.isfinite(row_max), row_max, torch.zeros((), dtype=z.dtype, device=z.device))
    x = z - m
    if scale != 1.0:
        x = x * scale
    # no host reads of values (a GPU sync, a graph break under torch.compile): the rare rows are fixed unconditionally
    inf_rows = torch.isposinf(row_max)  # from the row maxima: no extra pass over the scores
    x = torch.where(inf_rows, torch.zeros((), dtype=z.dtype, device=z.device), x)
    tau, _ = sparsemax_threshold(x, topk)
    p = (x - tau).clamp_(min=0)
    pinf = torch.isposinf(z) & inf_rows  # the limit of scores growing without bound: +inf entries share the mass equally
    p = torch.where(inf_rows, pinf.to(z.dtype) / pinf.sum(-1, keepdim=True).clamp(min=1).to(z.dtype), p)
    return p.masked_fill(torch.isnan(z).any(-1, keepdim=True), math.nan)  # as the kernel: a NaN makes its row NaN


def sparsemax_vjp(p: torch.Tensor, g: torch.Tensor, scale: float) -> torch.Tensor:
    """scale * (g - mean of g on the support) on the support, 0 elsewhere: the Jacobian of sparsemax (symmetric) times ``g``."""
    s = p > 0
    gs = torch.where(s, g, torch.zeros((), dtype=g.dtype, device=g.device))
    size = s.sum(-1, keepdim=True).clamp(min=1).to(g.dtype)
    mean = gs.sum(-1, keepdim=True) / size
    grad = torch.where(s, g - mean, torch.zeros((), dtype=g.dtype, device=g.device))
    return grad * scale if scale != 1.0 else grad


def nan_rows_stay_nan(p: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``grad`` with NaN on the rows whose map is NaN (a NaN score makes its whole row NaN in the forward, as softmax's
    does): the backward reads ``p`` only through its support, which a NaN row lacks, and gave those rows a zero
    gradient, hiding the NaN from the parameters below. One element per row is read. The torch path's backwards call
    it (one more pass over the gradient); the C++ and Triton backwards do the same inside their row loop."""
    return grad.masked_fill(p[..., :1].isnan(), float("nan")) if p.is_floating_point() and p.shape[-1] else grad


def batch_first(info, in_dims, *tensors) -> list:
    """The tensors a ``vmap`` rule gets, each with vmap's batch dim first (one without it expanded to the batch), so
    that their last dim stays the rows' and they run as one larger batch of rows."""
    return [(t.movedim(d, 0) if d is not None else t.expand(info.batch_size, *t.shape)).contiguous()
            for t, d in zip(tensors, in_dims)]


class _SparsemaxFunction(torch.autograd.Function):
    """p = sparsemax(scale * z) along the last dim; closed-form backward; under ``torch.func.vmap`` the batch runs as
    more rows (no forward-mode ``jvp``: torch.compile cannot trace a Function that defines one)."""

    @staticmethod
    def forward(z: torch.Tensor, scale: float, topk: int):
        backend = backend_for(z)
        if backend == "torch":
            return _torch_forward(z, scale, topk)
        return kernel_ops(backend).sparsemax_forward(z, scale)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.scale = inputs[1]
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        (p,) = ctx.saved_tensors
        backend = backend_for(p, g, backward=True, differentiable=("cpp",))  # the C++ backward op has its own backward
        if backend == "torch":
            return nan_rows_stay_nan(p, sparsemax_vjp(p, g, ctx.scale)), None, None
        return kernel_ops(backend).sparsemax_backward(p, g, ctx.scale), None, None  # the kernels give NaN rows NaN

    @staticmethod
    def vmap(info, in_dims, z, scale, topk):
        (z,) = batch_first(info, in_dims[:1], z)
        return _SparsemaxFunction.apply(z, scale, topk), 0


def sparsemax_rows(z: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """sparsemax(scale * z) along the last dim, on the fastest backend, outside autograd (for kernels built on it)."""
    return _SparsemaxFunction.forward(z, scale, TOPK)


def check_dense(scores) -> None:
    """TypeError in one line for scores that are not a dense (strided) tensor: not a tensor, sparse, nested."""
    if not isinstance(scores, torch.Tensor):
        raise TypeError(f"scores must be a torch.Tensor, got {type(scores).__name__}")
    if scores.is_nested or scores.layout != torch.strided:
        kind = "a nested tensor" if scores.is_nested else f"a {str(scores.layout).removeprefix('torch.')} tensor"
        raise TypeError(f"scores is {kind}: the sparse maps take dense (strided) tensors; pad the rows with -inf "
                        "(their weight is then exactly 0) or call .to_dense() first")
    if scores.dtype in _FLOAT8:
        raise TypeError(f"scores are {str(scores.dtype).removeprefix('torch.')}: the sparse maps take float16, bfloat16, "
                        "float32 or float64 scores; call .float() first (float8 keeps too few bits for a threshold)")


_FLOAT8 = tuple(getattr(torch, n) for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz") if hasattr(torch, n))


def check_dim(dim) -> int:
    """``dim`` as an int: the maps normalise along one dimension (a tuple, a float or a bool is refused in one line)."""
    try:
        if isinstance(dim, bool):
            raise TypeError
        return operator.index(dim)
    except TypeError:
        raise TypeError(f"dim must be one int (the dimension whose entries sum to 1), got {dim!r}") from None


def check_topk(topk) -> int:
    """``topk`` as an int >= 0 (the entries sorted first; 0: all): it changes the speed only, never the result."""
    try:
        k = None if isinstance(topk, bool) else operator.index(topk)
    except TypeError:
        k = None
    if k is None or k < 0:
        raise UserError(f"topk must be a whole number >= 0 (how many entries are sorted first; 0: all), got {topk!r}")
    return k


def rowwise(fn, scores: torch.Tensor, dim: int, *, pass_dim: bool = False) -> torch.Tensor:
    """Run a row-wise map ``fn`` (on contiguous rows along the last dim) along ``dim`` of ``scores``.

    Checks the input (a floating-point tensor), computes fp16/bf16 in float32 with autocast off and returns the
    input's dtype; an empty tensor gives an empty tensor (as softmax). ``pass_dim``: ``fn(work, dim)`` also gets
    ``dim`` made non-negative (for per-row arguments shaped like ``scores``).
    """
    check_dense(scores)
    dim = check_dim(dim)
    if not scores.is_floating_point():
        raise TypeError(f"scores must be a floating-point tensor, got dtype {scores.dtype}")
    if scores.dim() == 0:
        raise UserError("scores must have at least one dimension")
    if not -scores.dim() <= dim < scores.dim():
        raise IndexError(f"dim {dim} is out of range for scores of {scores.dim()} dimensions")
    dim = dim % scores.dim()
    if scores.numel() == 0:
        return scores.clone()
    dtype = scores.dtype
    work = scores.float() if dtype in (torch.float16, torch.bfloat16) else scores
    moved = dim != scores.dim() - 1
    if moved:
        work = work.movedim(dim, -1)
    off = torch.autocast(device_type=work.device.type, enabled=False) if torch.amp.is_autocast_available(work.device.type) else contextlib.nullcontext()
    with off:  # (the meta device has no autocast)
        p = fn(work.contiguous(), dim) if pass_dim else fn(work.contiguous())
    if moved:
        p = p.movedim(-1, dim)
    return p.to(dtype) if p.dtype != dtype else p


def _apply(z: torch.Tensor, scale: float, dim: int, topk: int) -> torch.Tensor:
    topk = check_topk(topk)
    return rowwise(lambda work: _SparsemaxFunction.apply(work, scale, topk), z, dim)


def sparsemax(scores: torch.Tensor, dim: int = -1, *, topk: int = TOPK) -> torch.Tensor:
    """Sparsemax along ``dim``: the Euclidean projection of ``scores`` onto the simplex.

    Exact zeros outside the support; ``-inf`` entries get 0; an all ``-inf`` row gives 0s.
    ``topk`` only changes speed, never the result (0 means: always sort).
    """
    return _apply(scores, 1.0, dim, topk)


def check_lam(lam: float) -> float:
    """Validate sparsegen-lin's ``lam``: a finite number below 1 (not a string or a bool that float() would read)."""
    if isinstance(lam, (str, bytes, bool)):
        raise UserError(f"lam must be a real number below 1, got {lam!r}")
    try:
        lam_f = float(lam)
    except (TypeError, ValueError):
        raise UserError(f"lam must be a real number below 1, got {lam!r}") from None
    if not math.isfinite(lam_f) or lam_f >= 1.0:
        raise UserError(f"lam must be a finite number below 1 (sparsegen-lin divides by 1 - lam), got lam={lam!r}")
    return lam_f


def check_row_setting(name: str, value: torch.Tensor, scores: torch.Tensor, dim: int) -> None:
    """ValueError, naming both shapes, where a tensor setting (alpha, lam) does not broadcast to ``scores`` with ``dim``
    of size 1 (one value per row): torch's own message would name neither argument."""
    want = list(scores.shape)
    want[dim] = 1
    ok = value.dim() <= scores.dim() and all(a in (1, w) for a, w in zip(reversed(value.shape), reversed(want)))
    if not ok:
        raise UserError(f"{name} of shape {tuple(value.shape)}: expected a float or a tensor broadcastable to "
                         f"{tuple(want)} (the scores' shape {tuple(scores.shape)} with dim {dim} of size 1: one {name} per row)")


def sparsegen_lin(scores: torch.Tensor, lam=0.0, dim: int = -1, *, topk: int = TOPK) -> torch.Tensor:
    """Sparsegen-lin along ``dim``: ``sparsemax(scores / (1 - lam))``.

    ``lam < 1``; ``lam = 0`` is sparsemax, ``lam -> 1`` tends to argmax, very negative
    ``lam`` spreads the mass over more entries. Raises ``ValueError`` for ``lam >= 1``
    or a non-finite ``lam``. ``lam`` may be a tensor broadcastable to ``scores`` with ``dim`` of size 1 (one lam per
    row, e.g. per head); one that requires grad receives its gradient. Tensor values are not checked (that would read
    them on the host): keep them below 1, as ``1 - exp(rho)`` does.
    """
    if not isinstance(lam, torch.Tensor):
        return _apply(scores, 1.0 / (1.0 - check_lam(lam)), dim, topk)
    check_dense(scores)
    check_row_setting("lam", lam, scores, check_dim(dim))
    scale = (1.0 / (1.0 - lam)).to(scores.dtype)
    masked = torch.isneginf(scores)  # scaled as 0, then -inf again: 0 * -inf would be NaN in lam's gradient
    return sparsemax(torch.where(masked, scores, scores.masked_fill(masked, 0.0) * scale), dim, topk=topk)
