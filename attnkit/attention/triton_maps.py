"""Triton kernels for the sparse maps: sparsemax / sparsegen-lin, 1.5-entmax and alpha-entmax, forward and backward.

One program per row (rows up to :data:`MAX_COLS` long, padded to a power of two in registers), the row in the
working precision (float32, or float64 for float64 rows). Used automatically for CUDA tensors when ``triton`` is
importable, and forced with ``ATTNKIT_KERNEL=triton`` (then ``attnkit.attention.kernels.backend()`` says "triton"),
which under ``TRITON_INTERPRET=1`` runs them on CPU tensors: that is how they are tested where no GPU is.

Each forward shifts the row by its max (shift-invariant at any magnitude), then finds the threshold without a sort
and without reading anything on the host, by steps that start below it and rise to it (each program stops when its
row is done):

- sparsemax(scale * z): Michelot's steps ``tau <- (sum_{x > tau} x - 1) / #{x > tau}`` from -1, which end at the exact
  threshold once the support stops shrinking;
- 1.5-entmax and alpha-entmax (one alpha per row; 1.5-entmax is alpha = 1.5): Newton's steps on the scores' own scale
  as the torch path (``p = [1 + d (x - s)]_+^(1/d)``, d = alpha - 1; the softmax limit kept accurate near alpha = 1)
  from s = 0 until they stop moving at the dtype's precision, then the output divided by its sum.

Backward in closed form: sparsemax ``scale * s * (g - mean_S g)``; entmax ``q (g - sum(g q) / sum(q))`` with
``q = p^(2 - alpha)``, and alpha's gradient per row (the entmax package's formula) from the same row sums.
-inf entries get 0, fully masked rows zeros, +inf entries share the mass, a NaN makes its row NaN.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: the longest row a program holds (longer rows use the other paths)
MAX_COLS = 8192


@triton.jit
def _prologue(Z, row, stride, n, scale, BLOCK: tl.constexpr, ACC: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    valid = offs < n
    z = tl.load(Z + row * stride + offs, mask=valid, other=float("-inf")).to(ACC)
    m = tl.max(z, 0)
    finite = (m > float("-inf")) & (m < float("inf"))
    x = (z - tl.where(finite, m, 0.0)) * scale
    x = tl.where(x == x, x, float("-inf"))  # +inf rows are finished at the end; keep the search finite
    x = tl.where(x < float("inf"), x, 0.0)
    return offs, valid, z, x


@triton.jit
def _epilogue(P, row, stride, offs, valid, z, p):
    n_nan = tl.sum((z != z).to(tl.float32), 0)
    pinf = z == float("inf")
    n_pinf = tl.sum(pinf.to(tl.float32), 0)
    p = tl.where(n_pinf > 0, pinf.to(p.dtype) / tl.maximum(n_pinf, 1.0), p)
    p = tl.where(n_nan > 0, float("nan"), p)
    tl.store(P + row * stride + offs, p, mask=valid)


@triton.jit
def _sparsemax_fwd(Z, P, stride, n, scale, BLOCK: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0)
    offs, valid, z, x = _prologue(Z, row, stride, n, scale, BLOCK, ACC)
    # Michelot's steps tau <- (sum_{x > tau} x - 1) / #{x > tau} from the lower bound -1 (the row max is 0) rise to
    # the exact threshold; they stop when the support stops shrinking (a handful of steps on attention rows)
    tau = tl.sum(tl.zeros([BLOCK], dtype=ACC), 0) - 1.0
    k = tl.sum((x > tau).to(ACC), 0)
    k_old = k + 1.0
    while (k < k_old) & (k > 0):
        tau = (tl.sum(tl.where(x > tau, x, 0.0), 0) - 1.0) / k
        k_old = k
        k = tl.sum((x > tau).to(ACC), 0)
    p = tl.maximum(x - tau, 0.0)
    _epilogue(P, row, stride, offs, valid, z, p)


@triton.jit
def _sparsemax_bwd(P, G, GZ, stride, n, scale, BLOCK: tl.constexpr, ACC: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    valid = offs < n
    p = tl.load(P + row * stride + offs, mask=valid, other=0.0).to(ACC)
    g = tl.load(G + row * stride + offs, mask=valid, other=0.0).to(ACC)
    sup = p > 0
    k = tl.sum(sup.to(ACC), 0)
    mean = tl.sum(tl.where(sup, g, 0.0), 0) / tl.maximum(k, 1.0)
    # a NaN row of the forward (all NaN) has no support: its gradient is NaN, not 0 (which would hide the NaN)
    tl.store(GZ + row * stride + offs, tl.where(p != p, p, tl.where(sup, (g - mean) * scale, 0.0)), mask=valid)


@triton.jit
def _entmax_mass(t, d):
    """[1 + d t]_+^(1/d), exp(t) at d = 0. log1p(u) as log(w) u / (w - 1), w = 1 + u (Goldberg): accurate for small
    u, so alpha near 1 loses no precision."""
    u = tl.maximum(d * t, -1.0)
    w = 1.0 + u
    log1p = tl.where(w == 1.0, u, tl.log(tl.where(w > 0, w, 1.0)) * u / tl.where(w == 1.0, 1.0, w - 1.0))
    lp = tl.where(d > 0, log1p / tl.where(d > 0, d, 1.0), t)
    return tl.where(u > -1.0, tl.exp(lp), 0.0)


@triton.jit
def _entmax_fwd(Z, A, P, stride, n, BLOCK: tl.constexpr, ACC: tl.constexpr, EPS: tl.constexpr, FIXED15: tl.constexpr):
    row = tl.program_id(0)
    offs, valid, z, x = _prologue(Z, row, stride, n, 1.0, BLOCK, ACC)
    if FIXED15:
        d = tl.sum(tl.zeros([BLOCK], dtype=ACC), 0) + 0.5
    else:
        d = tl.load(A + row).to(ACC) - 1.0
    # Newton's steps on f(s) = sum p(s) - 1, convex and decreasing, from the lower bound s = 0 (the row max has
    # p <= 1): they rise to the root without passing it; f'(s) = -sum p^(1 - d) = -sum p / (1 + d (x - s))
    s = tl.sum(tl.zeros([BLOCK], dtype=ACC), 0)
    step = s + 1.0
    it = 0
    while (step > EPS * (1.0 + s)) & (it < 200):
        pm = _entmax_mass(x - s, d)
        u = 1.0 + d * (x - s)
        dq = tl.sum(tl.where(pm > 0, pm / tl.where(pm > 0, u, 1.0), 0.0), 0)
        step = tl.where(dq > 0, (tl.sum(pm, 0) - 1.0) / tl.where(dq > 0, dq, 1.0), 0.0)  # no 1e-300: fp64 in Triton, which types the loop
        step = tl.maximum(step, 0.0)
        s = s + step
        it += 1
    p = _entmax_mass(x - s, d)
    total = tl.sum(p, 0)
    p = tl.where(total > 0, p / tl.maximum(total, 1e-30), p)
    _epilogue(P, row, stride, offs, valid, z, p)


@triton.jit
def _entmax_bwd(P, G, A, GZ, GA, stride, n, BLOCK: tl.constexpr, ACC: tl.constexpr, FIXED15: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    valid = offs < n
    p = tl.load(P + row * stride + offs, mask=valid, other=0.0).to(ACC)
    g = tl.load(G + row * stride + offs, mask=valid, other=0.0).to(ACC)
    if FIXED15:
        alpha = tl.sum(tl.zeros([BLOCK], dtype=ACC), 0) + 1.5
    else:
        alpha = tl.load(A + row).to(ACC)
    sup = p > 0
    lp = tl.log(tl.where(sup, p, 1.0))
    q = tl.where(sup, tl.exp((2.0 - alpha) * lp), 0.0)
    sq = tl.sum(q, 0)
    mean = tl.where(sq > 0, tl.sum(g * q, 0) / tl.maximum(sq, 1e-30), 0.0)
    tl.store(GZ + row * stride + offs, tl.where(p != p, p, q * (g - mean)), mask=valid)  # a NaN row: NaN, not 0
    if not FIXED15:
        d = alpha - 1.0
        h = tl.sum(p * lp, 0)
        ga = (tl.sum(g * p, 0) - mean) / tl.where(d > 0, d * d, 1.0) - (tl.sum(g * p * lp, 0) - h * mean) / tl.where(d > 0, d, 1.0)
        nan = tl.sum(tl.where(p != p, p, 0.0), 0)  # NaN on a NaN row, else 0
        tl.store(GA + row, tl.where((d > 0) & (sq > 0), ga, 0.0) + nan)


def _rows(t: torch.Tensor) -> tuple[torch.Tensor, int, int]:
    t = t.contiguous()
    n = t.shape[-1]
    return t, t.numel() // n, n


def _meta(t: torch.Tensor) -> dict:
    f64 = t.dtype == torch.float64
    return {"BLOCK": triton.next_power_of_2(t.shape[-1]), "ACC": tl.float64 if f64 else tl.float32}


def sparsemax_forward(z: torch.Tensor, scale: float) -> torch.Tensor:
    z, rows, n = _rows(z)
    p = torch.empty_like(z)
    _sparsemax_fwd[(rows,)](z, p, n, n, scale, **_meta(z))
    return p


def sparsemax_backward(p: torch.Tensor, g: torch.Tensor, scale: float) -> torch.Tensor:
    p, rows, n = _rows(p)
    gz = torch.empty_like(p)
    _sparsemax_bwd[(rows,)](p, g.contiguous().to(p.dtype), gz, n, n, scale, **_meta(p))
    return gz


def entmax_forward(z: torch.Tensor, alpha: torch.Tensor | None) -> torch.Tensor:
    """1.5-entmax (``alpha`` None) or alpha-entmax with one alpha per row (``alpha`` shaped ``z.shape[:-1] + (1,)``)."""
    z, rows, n = _rows(z)
    p = torch.empty_like(z)
    a = z if alpha is None else alpha.contiguous().to(z.dtype)
    _entmax_fwd[(rows,)](z, a, p, n, n, EPS=1e-15 if z.dtype == torch.float64 else 1e-7, FIXED15=alpha is None, **_meta(z))
    return p


def entmax_backward(p: torch.Tensor, g: torch.Tensor, alpha: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(gradient of the scores, gradient of alpha per row shaped like ``alpha``, None for 1.5-entmax)."""
    p, rows, n = _rows(p)
    gz = torch.empty_like(p)
    a = p if alpha is None else alpha.contiguous().to(p.dtype)
    ga = torch.empty(rows, dtype=p.dtype, device=p.device)
    _entmax_bwd[(rows,)](p, g.contiguous().to(p.dtype), a, gz, ga, n, n, FIXED15=alpha is None, **_meta(p))
    return gz, (None if alpha is None else ga.view(alpha.shape).to(alpha.dtype))
