"""CPU backend of flash sparse attention (:mod:`attnkit.attention.flash`): blocked torch, exact, never the L x L matrix.

The query rows are taken a block at a time (together over batch and heads): the block's scores against every key
(``scale * q kᵀ + bias``, a few hundred thousand entries), the row map on them by attnkit's own kernels (the compiled
CPU kernel where it is built, else the pure-torch maps: exact thresholds either way), ``out = p v``, and the
threshold tau of each row, read back from the block (``tau = z_max - p_max^(alpha - 1)``: the largest score holds the
largest weight), kept as the pair (z_max, tau - z_max) so that its rounding never shows at a large z_max. Only tau
(B, H, Lq, 2) is kept for the backward, which recomputes each block's scores, rebuilds p from
tau and runs the closed-form gradient of the map on the block (the kernels again):

    dP = dO vᵀ,  dS = q~ * (dP - sum(dP q~) / sum(q~)),  q~ = p^(2 - alpha) on the support
    dq = scale dS k,  dk = scale dSᵀ q,  dv = pᵀ dO,  dalpha_h = sum over rows of the map's d/dalpha

(the formulas of :mod:`attnkit.attention.entmax`, the same as its autograd backward, alpha's included). Each block's
rows see every key, so the row sums need no extra pass and no ``aux`` tensor.

Memory: a block holds :data:`BLOCK_ENTRIES` score entries at most (a few buffers of it live at once) beside tensors
of O(B H L D); nothing of size B H Lq Lk is ever allocated. The code is device-agnostic torch except for the
compiled kernel's ops (taken for CPU float32/64 blocks only).

Backend contract (shared with :mod:`attnkit.attention.flash_triton`): ``forward``, ``backward``, ``weights``.
"""

from __future__ import annotations

import math

import torch

from . import kernels
from .entmax import dp_dalpha, entmax15_rows, entmax_bisect_rows, grad_scores, power_on_support
from .maps import sparsemax_rows, sparsemax_vjp

__all__ = ["forward", "backward", "weights", "BLOCK_ENTRIES"]

#: score entries of one block at most (all its batch x head slices together): 2^20 float32 entries are 4 MiB per
#: buffer. Blocks are larger where the problem's own tensors are (a quarter of q's entries), so that the per-block
#: Python overhead stays small; a block is always at least one row of one head.
BLOCK_ENTRIES = 1 << 20
MIN_BLOCK_ENTRIES = 1 << 16
#: query rows per block: the GEMMs of a block run per (batch, head) slice, and on fewer rows than this they lose
#: much of their speed (measured on 2 cores: 16 rows 5.3 GFLOP/s, 128 rows 9.1, 512 rows 10)
ROW_BLOCK = 128
#: split the work into one part per torch thread, each run single-threaded in a worker thread (see _run_parts)
WORKERS = True


def _compute_dtype(t: torch.Tensor) -> torch.dtype:
    return torch.float64 if t.dtype == torch.float64 else torch.float32


def _kinds(alpha: torch.Tensor, fixed_alpha: float | None = None) -> list[tuple[int, int, str]]:
    """Runs of consecutive heads with one map: (h0, h1, kind), kind "sparsemax" (alpha 2: its exact threshold),
    "entmax15" (alpha 1.5: the exact closed form) or "alpha" (bisection / Newton). ``fixed_alpha``: every head's
    alpha where the caller knows it (the tensor is then not read: no wait for a GPU)."""
    if fixed_alpha in (2.0, 1.5):
        return [(0, alpha.shape[0], "sparsemax" if fixed_alpha == 2.0 else "entmax15")]
    vals = alpha.detach().double().cpu().tolist()
    kinds = ["sparsemax" if a == 2.0 else "entmax15" if a == 1.5 else "alpha" for a in vals]
    runs, h0 = [], 0
    for h in range(1, len(kinds) + 1):
        if h == len(kinds) or kinds[h] != kinds[h0]:
            runs.append((h0, h, kinds[h0]))
            h0 = h
    return runs


def _parts(B: int, H: int, workers: int) -> list[tuple[int, int, int, int]]:
    """The (batch, head) slices split into at most ``workers`` parts (b0, b1, h0, h1): whole batch entries where
    there are enough of them, else head ranges of each batch entry. Parts never share a slice, so their blocks never
    write the same rows of out, tau, dq, dk or dv."""
    if workers <= 1 or B * H == 1:
        return [(0, B, 0, H)]
    if B >= workers:
        step = -(-B // workers)
        return [(b, min(B, b + step), 0, H) for b in range(0, B, step)]
    per_b = -(-workers // B)
    step = -(-H // per_b)
    return [(b, b + 1, h, min(H, h + step)) for b in range(B) for h in range(0, H, step)]


def _chunks(part, H: int, Lq: int, Lk: int, budget: int, runs):
    """Blocks (b0, b1, h0, h1, kind, i0, i1) of one part within ``budget`` score entries: :data:`ROW_BLOCK` query
    rows (fewer where one head's rows would exceed the budget), as many (batch, head) slices as the budget holds:
    whole batch entries where the head run covers every head, else heads of one batch entry."""
    pb0, pb1, ph0, ph1 = part
    rows = max(1, min(Lq, ROW_BLOCK, budget // Lk))
    slices = max(1, budget // (rows * Lk))  # (batch, head) slices per block
    for r0, r1, kind in runs:
        h0, h1 = max(r0, ph0), min(r1, ph1)
        if h0 >= h1:
            continue
        nh = h1 - h0
        nb, hs = (min(pb1 - pb0, slices // H), H) if nh == H and slices >= H else (1, min(nh, slices))
        for b0 in range(pb0, pb1, nb):
            b1 = min(pb1, b0 + nb)
            for hh0 in range(h0, h1, hs):
                hh1 = min(h1, hh0 + hs)
                for i0 in range(0, Lq, rows):
                    yield b0, b1, hh0, hh1, kind, i0, min(Lq, i0 + rows)


_pool = None


def _run_parts(B: int, H: int, Lq: int, Lk: int, D: int, alpha: torch.Tensor, device, work,
               fixed_alpha: float | None = None) -> None:
    """Run ``work(block)`` over every block. On the CPU with more than one torch thread the (batch, head) slices
    are split into one part per thread, each run in a worker thread with one torch thread (its GEMMs and row
    kernels inline): one parallel region per call instead of one per op (a per-op OpenMP barrier costs a scheduler
    slice whenever another process holds a core: measured 10x slower on a shared 2-core machine). Elsewhere, one
    part, each op parallel on its own."""
    budget = max(MIN_BLOCK_ENTRIES, min(BLOCK_ENTRIES, B * H * Lq * D // 4))
    runs = _kinds(alpha, fixed_alpha)
    threads = torch.get_num_threads() if device.type == "cpu" else 1
    parts = _parts(B, H, threads if WORKERS else 1)
    if len(parts) == 1:
        for blk in _chunks(parts[0], H, Lq, Lk, budget, runs):
            work(blk)
        return
    global _pool
    from concurrent.futures import ThreadPoolExecutor

    if _pool is None or _pool._max_workers < len(parts):
        _pool = ThreadPoolExecutor(max_workers=len(parts), thread_name_prefix="attnkit-flash")
    per = max(1, budget // len(parts))
    grad_mode, inference = torch.is_grad_enabled(), torch.is_inference_mode_enabled()

    def run(part):  # grad and inference mode are per thread: the caller's, carried over
        torch.set_num_threads(1)
        with torch.inference_mode(inference), torch.set_grad_enabled(grad_mode):
            for blk in _chunks(part, H, Lq, Lk, per, runs):
                work(blk)

    try:
        for f in [_pool.submit(run, part) for part in parts]:
            f.result()
    finally:
        torch.set_num_threads(threads)  # (MKL's thread count is process-wide: restored for the caller)


def _bh(t3: torch.Tensor, H: int, b0, b1, h0, h1) -> torch.Tensor:
    """Rows of a (B*H, L, D) tensor for batch entries [b0, b1) and heads [h0, h1) (contiguous in its first dim)."""
    return t3[b0 * H + h0:(b1 - 1) * H + h1]


def _scores(q3, k3, bias, H, blk, scale, dtype) -> torch.Tensor:
    """scale * q kᵀ + bias of one block, shaped (nb * nh, rows, Lk)."""
    b0, b1, h0, h1, _, i0, i1 = blk
    qb = _bh(q3, H, b0, b1, h0, h1)[:, i0:i1]
    kb = _bh(k3, H, b0, b1, h0, h1)
    s = torch.empty(qb.shape[0], i1 - i0, kb.shape[1], dtype=dtype, device=q3.device)
    s.baddbmm_(qb, kb.transpose(1, 2), beta=0, alpha=scale)  # beta 0: s is not read
    if bias is not None:
        s.view(b1 - b0, h1 - h0, i1 - i0, kb.shape[1]).add_(bias[b0:b1, h0:h1, i0:i1])
    return s


def _alpha_rows(alpha: torch.Tensor, blk, shape, dtype) -> torch.Tensor:
    b0, b1, h0, h1, _, i0, i1 = blk
    a = alpha[h0:h1].to(dtype).view(1, h1 - h0, 1, 1).expand(b1 - b0, h1 - h0, i1 - i0, 1)
    return a.reshape(shape[0], shape[1], 1)


def _row_map(s: torch.Tensor, kind: str, a_rows: torch.Tensor | None) -> torch.Tensor:
    """p of the block's rows by attnkit's maps (compiled kernel, else torch; Triton only under ATTNKIT_KERNEL=triton)."""
    if kind == "sparsemax":
        return sparsemax_rows(s)
    if kind == "entmax15":
        return entmax15_rows(s)
    return entmax_bisect_rows(s, a_rows)


def _tau_from(s: torch.Tensor, p: torch.Tensor, kind: str, a_rows) -> torch.Tensor:
    """The threshold of each row on the scale z = (alpha - 1) s, as the pair (shift, t) (last dim): tau = shift + t
    with shift = z_max and t = -p_max^(alpha - 1), kept apart so that no rounding of their sum at a large z_max (a lam
    near 1) reaches the weights rebuilt from them; (0, +inf) where every key is masked."""
    m = s.amax(-1)
    pm = p.amax(-1)
    if kind == "sparsemax":
        shift, t = m, -pm
    elif kind == "entmax15":
        shift, t = 0.5 * m, -pm.sqrt()
    else:
        d = a_rows.squeeze(-1) - 1
        shift, t = d * m, -pm.pow(d)
    masked = m == -math.inf
    return torch.stack((shift.masked_fill(masked, 0.0), t.masked_fill(masked, math.inf)), -1)


def _p_from_tau(s: torch.Tensor, tau: torch.Tensor, kind: str, a_rows) -> torch.Tensor:
    """p = [(z - shift) - t]_+^(1 / (alpha - 1)), z = (alpha - 1) s, tau = (shift, t), in place on ``s``."""
    shift, t = tau[..., :1], tau[..., 1:]
    if kind == "sparsemax":
        return s.sub_(shift).sub_(t).clamp_(min=0)
    if kind == "entmax15":
        return s.mul_(0.5).sub_(shift).sub_(t).clamp_(min=0).square_()
    d = a_rows - 1
    return s.mul_(d).sub_(shift).sub_(t).clamp_(min=0).pow_(1 / d)


def _normalised(p: torch.Tensor) -> torch.Tensor:
    """p with each row divided by its sum, in place (rows of zeros, fully masked ones, stay zeros)."""
    tot = p.sum(-1, keepdim=True)
    return p.div_(torch.where(tot > 0, tot, torch.ones_like(tot)))


def _map_backward(p: torch.Tensor, g: torch.Tensor, kind: str, a_rows, need_alpha: bool):
    """(dS, dalpha per row or None) of the block: the closed-form backward of the map (kernels where built)."""
    if need_alpha:
        if kernels.kernel_applies(p):
            ds, ga = torch.ops.attnkit.entmax_backward(p, g, a_rows.to(torch.float64))
            return ds, ga
        qq = power_on_support(p, 2 - a_rows)
        ga = (g.double() * dp_dalpha(p, qq, a_rows)).sum(-1, keepdim=True)
        return grad_scores(p, g, qq), ga
    if kernels.kernel_applies(p):
        if kind == "sparsemax":
            return torch.ops.attnkit.sparsemax_backward(p, g, 1.0), None
        if kind == "entmax15":
            return torch.ops.attnkit.entmax_backward(p, g, None)[0], None
        return torch.ops.attnkit.entmax_backward(p, g, a_rows.to(torch.float64))[0], None
    if kind == "sparsemax":
        return sparsemax_vjp(p, g, 1.0), None
    if kind == "entmax15":
        return grad_scores(p, g, power_on_support(p, 0.5)), None
    return grad_scores(p, g, power_on_support(p, 2 - a_rows)), None


# ----------------------------------------------------------------------------- dropout on the weights

#: dropout's mask is drawn per (batch, head) slice and tile of this many query rows, each from its own generator
#: seeded by (seed, slice, tile): the same mask however the rows are blocked or split over threads
DROP_TILE = 64


def _tile_seed(seed: int, bh: int, tile: int) -> int:
    return ((seed * 1_000_003 + bh) * 1_000_003 + tile) % (1 << 63)


def _drop_scale(dropout: tuple[float, int] | None, blk, H: int, Lq: int, Lk: int, device) -> torch.Tensor | None:
    """Dropout's factor for the block's weights, float32 (nb * nh, rows, Lk): 0 where dropped, 1 / (1 - p) where kept;
    None without dropout. Each (slice, tile of DROP_TILE rows) is drawn whole from its own seeded generator, so the
    forward and the backward draw the same mask however the rows are blocked or split over threads, and none is
    stored."""
    if dropout is None:
        return None
    p, seed = dropout
    b0, b1, h0, h1, _, i0, i1 = blk
    u = torch.empty((b1 - b0) * (h1 - h0), i1 - i0, Lk, dtype=torch.float32, device=device)
    g = torch.Generator(device=device)
    slices = (b * H + h for b in range(b0, b1) for h in range(h0, h1))
    for n, bh in enumerate(slices):
        for t in range(i0 // DROP_TILE, (i1 - 1) // DROP_TILE + 1):
            g.manual_seed(_tile_seed(seed, bh, t))
            r0, r1 = max(i0, t * DROP_TILE), min(i1, (t + 1) * DROP_TILE)
            if r1 - r0 == DROP_TILE:  # a whole tile: drawn straight into the block
                torch.rand(DROP_TILE, Lk, generator=g, device=device, out=u[n, r0 - i0:r1 - i0])
            else:  # part of a tile: the whole tile drawn, the same draws whatever rows are used
                u[n, r0 - i0:r1 - i0] = torch.rand(DROP_TILE, Lk, generator=g, device=device)[r0 - t * DROP_TILE:r1 - t * DROP_TILE]
    return u.ge_(p).mul_(1.0 / (1.0 - p))  # uniform draws at or above p: kept, with probability 1 - p


def _dropped(w: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """``w`` (weights, or their gradient) times dropout's factor; itself without dropout."""
    return w if scale is None else w * scale.to(w.dtype)


def _flat(t: torch.Tensor, dtype) -> torch.Tensor:
    B, H, L, D = t.shape
    return t.to(dtype).contiguous().view(B * H, L, D)


def _bias4(bias, B, H, Lq, Lk, dtype):
    return None if bias is None else bias.to(dtype).expand(B, H, Lq, Lk)


@torch.no_grad()
def forward(q, k, v, bias, alpha, scale, dropout=None, *, fixed_alpha=None):
    """(out (B, H, Lq, D) in q's dtype, tau (B, H, Lq, 2) float32/64 (each row's (shift, t): see _tau_from), aux None). See the module's docstring.
    ``dropout``: None, or (p, seed): the weights dropped with probability p (the kept ones scaled by 1 / (1 - p))
    before they meet v; tau is the map's, before dropout. ``fixed_alpha``: every head's alpha, where the caller
    knows it (2.0 or 1.5; else None: read from ``alpha``)."""
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    dtype = _compute_dtype(q)
    q3, k3, v3 = _flat(q, dtype), _flat(k, dtype), _flat(v, dtype)
    bias = _bias4(bias, B, H, Lq, Lk, dtype)
    out = torch.empty(B * H, Lq, v.shape[-1], dtype=dtype, device=q.device)
    tau = torch.empty(B * H, Lq, 2, dtype=dtype, device=q.device)

    def work(blk):
        b0, b1, h0, h1, kind, i0, i1 = blk
        s = _scores(q3, k3, bias, H, blk, scale, dtype)
        a_rows = _alpha_rows(alpha, blk, s.shape, dtype) if kind == "alpha" else None
        p = _row_map(s, kind, a_rows)
        _bh(tau, H, b0, b1, h0, h1)[:, i0:i1] = _tau_from(s, p, kind, a_rows)
        drop = _drop_scale(dropout, blk, H, Lq, Lk, q.device)
        torch.bmm(_dropped(p, drop), _bh(v3, H, b0, b1, h0, h1), out=_bh(out, H, b0, b1, h0, h1)[:, i0:i1])

    _run_parts(B, H, Lq, Lk, D, alpha, q.device, work, fixed_alpha)
    return out.view(B, H, Lq, -1).to(q.dtype), tau.view(B, H, Lq, 2), None


@torch.no_grad()
def backward(q, k, v, bias, alpha, scale, out, tau, aux, grad_out, need_alpha_grad, dropout=None, *, fixed_alpha=None):
    """(dq, dk, dv in their inputs' dtypes, dalpha (H,) float32/64 or None); ``dropout`` and ``fixed_alpha`` as the
    forward's."""
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    dtype = _compute_dtype(q)
    q3, k3, v3, do3 = _flat(q, dtype), _flat(k, dtype), _flat(v, dtype), _flat(grad_out, dtype)
    tau3 = tau.to(dtype).reshape(B * H, Lq, 2)
    bias = _bias4(bias, B, H, Lq, Lk, dtype)
    dq = torch.empty_like(q3)
    dk = torch.zeros_like(k3)
    dv = torch.zeros_like(v3)
    dalpha = torch.zeros(B, H, dtype=torch.float64, device=q.device) if need_alpha_grad else None

    def work(blk):
        b0, b1, h0, h1, kind, i0, i1 = blk
        s = _scores(q3, k3, bias, H, blk, scale, dtype)
        a_rows = _alpha_rows(alpha, blk, s.shape, dtype) if (kind == "alpha" or need_alpha_grad) else None
        p = _p_from_tau(s, _bh(tau3, H, b0, b1, h0, h1)[:, i0:i1], kind, a_rows)
        if kind == "alpha":  # the forward's p (by bisection, normalised); rebuilt from tau its sum drifts near alpha 1
            p = _normalised(p)
        kb, vb = _bh(k3, H, b0, b1, h0, h1), _bh(v3, H, b0, b1, h0, h1)
        qb, dob = _bh(q3, H, b0, b1, h0, h1)[:, i0:i1], _bh(do3, H, b0, b1, h0, h1)[:, i0:i1]
        drop = _drop_scale(dropout, blk, H, Lq, Lk, q.device)  # the forward's mask, drawn again
        _bh(dv, H, b0, b1, h0, h1).baddbmm_(_dropped(p, drop).transpose(1, 2), dob)
        dp = _dropped(torch.bmm(dob, vb.transpose(1, 2)), drop)
        ds, ga = _map_backward(p, dp, kind, a_rows, need_alpha_grad)
        del p, dp, s
        torch.bmm(ds, kb, out=_bh(dq, H, b0, b1, h0, h1)[:, i0:i1])
        _bh(dk, H, b0, b1, h0, h1).baddbmm_(ds.transpose(1, 2), qb, alpha=scale)
        if ga is not None:  # per batch entry: parts never share a (batch, head) slice
            dalpha[b0:b1, h0:h1] += ga.view(b1 - b0, h1 - h0, i1 - i0).sum(2).to(torch.float64)

    _run_parts(B, H, Lq, Lk, D, alpha, q.device, work, fixed_alpha)
    dq.mul_(scale)
    shape = lambda t, x: t.view(x.shape).to(x.dtype)  # noqa: E731
    return shape(dq, q), shape(dk, k), shape(dv, v), (dalpha.sum(0).to(alpha.dtype) if dalpha is not None else None)


@torch.no_grad()
def weights(q, k, bias, alpha, scale, tau):
    """The map p (B, H, Lq, Lk) from tau, materialised, in q's dtype (for :func:`attnkit.attention.flash.attention_weights`)."""
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    dtype = _compute_dtype(q)
    q3, k3 = _flat(q, dtype), _flat(k, dtype)
    tau3 = tau.to(dtype).reshape(B * H, Lq, 2)
    bias = _bias4(bias, B, H, Lq, Lk, dtype)
    p_all = torch.empty(B * H, Lq, Lk, dtype=dtype, device=q.device)

    def work(blk):
        b0, b1, h0, h1, kind, i0, i1 = blk
        s = _scores(q3, k3, bias, H, blk, scale, dtype)
        a_rows = _alpha_rows(alpha, blk, s.shape, dtype) if kind == "alpha" else None
        p = _p_from_tau(s, _bh(tau3, H, b0, b1, h0, h1)[:, i0:i1], kind, a_rows)
        _bh(p_all, H, b0, b1, h0, h1)[:, i0:i1] = _normalised(p)  # each row sums to 1, as the forward's output's

    _run_parts(B, H, Lq, Lk, D, alpha, q.device, work)
    return p_all.view(B, H, Lq, Lk).to(q.dtype)
