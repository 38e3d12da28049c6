"""The entmax family: 1.5-entmax (exact, sort-based) and alpha-entmax (bisection, then Newton on the support).

On CPU tensors (float32/64) both run in the compiled kernel (:mod:`attnkit.attention.kernels`: Newton's method from
below, 1.5-entmax finished exactly in closed form on the found support); elsewhere, or without the kernel, in the
pure-torch code below (same results to float precision; no host reads, so it suits any device).

alpha-entmax (Peters et al. 2019; Correia et al. 2019) is, along the last dim,

    p_i = [(alpha - 1) z_i - tau]_+ ^ (1 / (alpha - 1)),    sum_i p_i = 1,

softmax at alpha = 1 (the limit), sparsemax at alpha = 2, and sparse for every alpha > 1. With d = alpha - 1 and
the threshold written on the scores' own scale, ``tau = d s - 1``, this reads

    p_i = [1 + d (z_i - s)]_+ ^ (1 / d) = exp(log1p(d (z_i - s)) / d),

which tends to ``exp(z_i - s)`` (softmax, ``s = logsumexp z``) as d -> 0 with no loss of precision, so one formula
covers alpha = 1 exactly and alpha just above 1 accurately. ``s`` lies in ``[max z, max z + (1 - n^-d) / d]``
(p_max <= 1 and p_max >= 1/n); the sum is decreasing in ``s``, so a fixed number of bisection steps (enough for the
dtype: no host reads, the same work on any device) finds it to float precision, and two Newton steps on the found
support finish it; p is then divided by its sum.

1.5-entmax has a closed form on a sorted row (Peters et al. 2019, Algorithm 2): with x = z/2 sorted descending,
``tau_k = mean_k - sqrt(max(0, (1 - k var_k) / k))``, the support is the ``k`` with ``tau_k <= x_k``, and
``p = [x - tau]_+^2``.

Backward, closed form (the entmax package's formulas), with ``g`` the output gradient and ``q_i = p_i^(2 - alpha)``
on the support:

    grad_z     = q * (g - sum(g q) / sum(q))
    grad_alpha = sum_i g_i [ (p_i - q~_i) / (alpha - 1)^2 - (p_i log p_i - q~_i H) / (alpha - 1) ],
                 q~ = q / sum(q),  H = sum_j p_j log p_j

(grad_alpha computed in float64; 0 where alpha = 1.) A double backward (``create_graph=True``, e.g. a gradient
penalty or Hessian-vector products) differentiates these formulas, written in torch, on every path: the kernels
compute first derivatives only, so with grad mode on in the backward the torch form runs. As the sparsemax maps: each row is shifted by its max, so
the result is shift-invariant at any magnitude; ``-inf`` entries get exactly 0, a fully masked row gives zeros and
a zero gradient, ``+inf`` entries share the mass equally, a NaN makes its row NaN, fp16/bf16 are computed in
float32.
"""

from __future__ import annotations

import math

import torch

from .kernels import backend_for, kernel_ops  # relative: this file also runs as a checkpoint's remote code
from .maps import batch_first, check_dense, check_dim, check_row_setting, nan_rows_stay_nan, rowwise
from ..errors import UserError

__all__ = ["entmax15", "entmax_bisect", "check_alpha", "bisect_steps"]


def bisect_steps(dtype: torch.dtype) -> int:
    """Bisection steps that bring the threshold's bracket (at most log n <= 25 wide) below the dtype's precision."""
    return 64 if dtype == torch.float64 else 32


def _shift(z: torch.Tensor):
    """Rows shifted by their max; rows holding +inf become 0 (finished by :func:`_finish`). Returns (x, pinf, inf_rows)."""
    zero = torch.zeros((), dtype=z.dtype, device=z.device)
    row_max = z.amax(-1, keepdim=True)
    x = z - torch.where(torch.isfinite(row_max), row_max, zero)
    pinf = torch.isposinf(z)
    inf_rows = pinf.any(-1, keepdim=True)
    return torch.where(inf_rows, zero, x), pinf, inf_rows


def _finish(p: torch.Tensor, z: torch.Tensor, pinf: torch.Tensor, inf_rows: torch.Tensor) -> torch.Tensor:
    """+inf entries share their row's mass equally (the limit of growing scores); a NaN makes its row NaN."""
    share = pinf.to(p.dtype) / pinf.sum(-1, keepdim=True).clamp(min=1).to(p.dtype)
    p = torch.where(inf_rows, share, p)
    return p.masked_fill(torch.isnan(z).any(-1, keepdim=True), math.nan)


def power_on_support(p: torch.Tensor, e) -> torch.Tensor:
    """p^e where p > 0, else 0, with a finite derivative everywhere: outside the support p is locally constant 0, and
    differentiating p^e there (e < 1) would give inf * 0 = NaN in a double backward."""
    on = p > 0
    safe = torch.where(on, p, torch.ones((), dtype=p.dtype, device=p.device))
    return torch.where(on, safe**e, torch.zeros((), dtype=p.dtype, device=p.device))


def grad_scores(p: torch.Tensor, g: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """q * (g - sum(g q) / sum(q)): the Jacobian-vector product of every entmax map, q = p^(2 - alpha) on the support."""
    gq = g * q
    return gq - q * (gq.sum(-1, keepdim=True) / q.sum(-1, keepdim=True).clamp(min=torch.finfo(q.dtype).tiny))


# ----------------------------------------------------------------------------- 1.5-entmax, exact


def _entmax15_forward(z: torch.Tensor) -> torch.Tensor:
    x, pinf, inf_rows = _shift(z)
    x = x / 2
    xs = torch.sort(x, dim=-1, descending=True).values
    finite = torch.isfinite(xs)  # -inf (masked) entries sort last and never enter the support
    xf = torch.where(finite, xs, torch.zeros((), dtype=xs.dtype, device=xs.device))
    k = torch.arange(1, x.shape[-1] + 1, device=x.device, dtype=x.dtype)
    mean = xf.cumsum(-1) / k
    var = (xf * xf).cumsum(-1) / k - mean * mean
    tau = mean - torch.sqrt(((1 - k * var) / k).clamp(min=0))
    support = ((tau <= xs) & finite).sum(-1, keepdim=True)  # [..., 1]: 0 for a fully masked row
    tau_star = tau.gather(-1, (support - 1).clamp(min=0))
    p = (x - tau_star).clamp(min=0) ** 2
    p = torch.where(support > 0, p, torch.zeros((), dtype=p.dtype, device=p.device))
    return _finish(p, z, pinf, inf_rows)


class _Entmax15Function(torch.autograd.Function):
    """1.5-entmax along the last dim; closed-form backward; under ``torch.func.vmap`` the batch runs as more rows."""

    @staticmethod
    def forward(z: torch.Tensor):
        backend = backend_for(z)
        if backend == "torch":
            return _entmax15_forward(z)
        return kernel_ops(backend).entmax_forward(z, None)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        (p,) = ctx.saved_tensors
        backend = backend_for(p, g, backward=True)  # a double backward, and torch.func's transforms: the torch form
        if backend == "torch":
            return nan_rows_stay_nan(p, grad_scores(p, g, power_on_support(p, 0.5)))
        return kernel_ops(backend).entmax_backward(p, g, None)[0]  # the kernels give NaN rows NaN

    @staticmethod
    def vmap(info, in_dims, z):
        (z,) = batch_first(info, in_dims, z)
        return _Entmax15Function.apply(z), 0


def entmax15(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """1.5-entmax along ``dim`` (exact): sparse, smoother than sparsemax; ``-inf`` entries get 0, an all ``-inf`` row 0s."""
    return rowwise(_Entmax15Function.apply, scores, dim)


# ----------------------------------------------------------------------------- alpha-entmax, bisection


def _mass(x: torch.Tensor, d: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """[1 + d (x - s)]_+^(1/d), and exp(x - s) where d = 0; x = -inf gives 0."""
    t = x - s
    # clamp at -1: log1p(-1) = -inf -> exp -> exactly 0 outside the support (and for -inf entries)
    sparse = torch.log1p((d * t).clamp(min=-1)) / torch.where(d > 0, d, torch.ones((), dtype=d.dtype, device=d.device))
    return torch.exp(torch.where(d > 0, sparse, t))


def _entmax_bisect_forward(z: torch.Tensor, alpha: torch.Tensor, n_iter: int) -> torch.Tensor:
    x, pinf, inf_rows = _shift(z)  # row max 0 (finite rows)
    d = alpha - 1  # [..., 1]
    n = torch.isfinite(x).sum(-1, keepdim=True).clamp(min=1).to(x.dtype)
    log_n = torch.log(n)
    lo = torch.zeros_like(log_n)
    hi = torch.where(d > 0, -torch.expm1(-d * log_n) / torch.where(d > 0, d, torch.ones_like(d)), log_n)
    for _ in range(n_iter):  # sum(mass) is decreasing in s: > 1 means s is still too small
        mid = (lo + hi) / 2
        above = _mass(x, d, mid).sum(-1, keepdim=True) > 1
        lo = torch.where(above, mid, lo)
        hi = torch.where(above, hi, mid)
    s = (lo + hi) / 2
    for _ in range(2):  # Newton on the found support: f(s) = sum p - 1, f'(s) = -sum p^(1 - d)
        p = _mass(x, d, s)
        q = torch.where(p > 0, p ** (1 - d), torch.zeros((), dtype=p.dtype, device=p.device))
        step = (p.sum(-1, keepdim=True) - 1) / q.sum(-1, keepdim=True).clamp(min=torch.finfo(p.dtype).tiny)
        s = (s + step).clamp(min=lo, max=hi)
    p = _mass(x, d, s)
    total = p.sum(-1, keepdim=True)
    p = torch.where(total > 0, p / total.clamp(min=torch.finfo(p.dtype).tiny), p)  # a fully masked row stays 0
    return _finish(p, z, pinf, inf_rows)


def dp_dalpha(p: torch.Tensor, q: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """dp_i / dalpha of alpha-entmax, in float64: ``(p - q~) / (alpha - 1)^2 - (p log p - q~ H) / (alpha - 1)``, 0 where
    alpha = 1 (q~ = q / sum(q), H = sum p log p)."""
    p64, q64, a64 = p.double(), q.double(), alpha.double()
    d = a64 - 1
    safe_d = torch.where(d > 0, d, torch.ones_like(d))
    on = p64 > 0
    safe_p = torch.where(on, p64, torch.ones((), dtype=torch.float64, device=p.device))  # log 1 = 0: no inf * 0
    plogp = torch.where(on, safe_p * torch.log(safe_p), torch.zeros((), dtype=torch.float64, device=p.device))
    ent = plogp.sum(-1, keepdim=True)
    qn = q64 / q64.sum(-1, keepdim=True).clamp(min=torch.finfo(torch.float64).tiny)
    v = (p64 - qn) / safe_d**2 - (plogp - qn * ent) / safe_d
    return torch.where(d > 0, v, torch.zeros((), dtype=torch.float64, device=p.device))


class _EntmaxBisectFunction(torch.autograd.Function):
    """alpha-entmax along the last dim (one alpha per row); closed-form backward, in the scores and in alpha; under
    ``torch.func.vmap`` the batch runs as more rows."""

    @staticmethod
    def forward(z: torch.Tensor, alpha: torch.Tensor, n_iter: int):
        backend = backend_for(z, alpha)
        if backend == "torch":
            return _entmax_bisect_forward(z, alpha, n_iter)
        return kernel_ops(backend).entmax_forward(z, alpha)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output, inputs[1])

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        p, alpha = ctx.saved_tensors
        backend = backend_for(p, g, backward=True)  # a double backward, and torch.func's transforms: the torch form
        if backend != "torch":  # the kernels give alpha's gradient per row from the same pass
            grad_z, grad_alpha = kernel_ops(backend).entmax_backward(p, g, alpha)
            return grad_z, (grad_alpha if ctx.needs_input_grad[1] else None), None  # NaN rows: NaN in both
        q = power_on_support(p, 2 - alpha)
        grad_z = nan_rows_stay_nan(p, grad_scores(p, g, q))
        grad_alpha = None
        if ctx.needs_input_grad[1]:
            grad_alpha = nan_rows_stay_nan(p, (g.double() * dp_dalpha(p, q, alpha)).sum(-1, keepdim=True).to(alpha.dtype))
        return grad_z, grad_alpha, None

    @staticmethod
    def vmap(info, in_dims, z, alpha, n_iter):
        z, alpha = batch_first(info, in_dims[:2], z, alpha)
        return _EntmaxBisectFunction.apply(z, alpha, n_iter), 0


def entmax15_rows(z: torch.Tensor) -> torch.Tensor:
    """1.5-entmax along the last dim, on the fastest backend, outside autograd (for kernels built on it)."""
    return _Entmax15Function.forward(z)


def entmax_bisect_rows(z: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """alpha-entmax along the last dim (``alpha`` broadcastable per row), outside autograd."""
    return _EntmaxBisectFunction.forward(z, alpha, bisect_steps(z.dtype))


def check_alpha(alpha) -> float:
    """Validate a fixed alpha: a number in [1, 2] (1 is softmax, 2 sparsemax; above 2 the threshold's function is no
    longer convex and Newton's method, which the kernels use, can stop short of the root)."""
    if isinstance(alpha, (bool, str, bytes)):  # True would read as 1.0, softmax; '1.3' as a number
        raise UserError(f"alpha must be a real number in [1, 2], got {alpha!r}")
    try:
        a = float(alpha)
    except (TypeError, ValueError):
        raise UserError(f"alpha must be a real number in [1, 2], got {alpha!r}") from None
    if not math.isfinite(a) or not 1 <= a <= 2:
        raise UserError(f"alpha must be a number in [1, 2] (1: softmax, 1.5: 1.5-entmax, 2: sparsemax), got alpha={alpha!r}")
    return a


def entmax_bisect(scores: torch.Tensor, alpha=1.5, dim: int = -1, n_iter: int | None = None) -> torch.Tensor:
    """alpha-entmax along ``dim``: softmax at alpha = 1, sparsemax at 2, sparse for alpha > 1.

    ``alpha`` is a float in [1, 2] or a tensor broadcastable to ``scores`` with ``dim`` of size 1 (one alpha per row,
    e.g. per head); a tensor that requires grad receives its gradient. Tensor values are not checked (that would
    read them on the host): keep them in [1, 2], as ``1 + sigmoid(a)`` does. ``n_iter``: the pure-torch path's
    bisection steps (default: enough for the dtype), followed by two Newton steps on the found support; the compiled
    and Triton kernels find the threshold to the dtype's precision by their own method and do not read it.
    """
    check_dense(scores)
    dim = check_dim(dim)
    if n_iter is not None and (isinstance(n_iter, bool) or not isinstance(n_iter, int) or n_iter < 1):
        raise UserError(f"n_iter must be a whole number of bisection steps >= 1 (or None: enough for the dtype), got {n_iter!r}")
    if not isinstance(alpha, torch.Tensor):
        check_alpha(alpha)
    else:
        check_row_setting("alpha", alpha, scores, dim)

    def fn(work: torch.Tensor, moved_dim: int) -> torch.Tensor:
        a = alpha if isinstance(alpha, torch.Tensor) else torch.tensor(float(alpha), dtype=torch.float64)
        a = a.to(dtype=work.dtype, device=work.device)
        shape = list(scores.shape)
        shape[moved_dim] = 1
        a = a.expand(*shape)
        if moved_dim not in (-1, scores.dim() - 1):
            a = a.movedim(moved_dim, -1)
        return _EntmaxBisectFunction.apply(work, a.contiguous(), n_iter if n_iter is not None else bisect_steps(work.dtype))

    return rowwise(fn, scores, dim, pass_dim=True)
