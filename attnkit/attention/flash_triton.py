"""Flash sparse attention in Triton (issue 47): exact alpha-entmax attention that never holds the L x L matrix.

Scores ``s = scale * q k^T + bias`` (bias: any additive float32 tensor broadcastable to (B, H, Lq, Lk), -inf =
masked, read through its strides, never materialised), ``z = (alpha - 1) s`` with one alpha per head, and

    p_ij = [z_ij - tau_i]_+ ^ (1 / (alpha - 1)),    sum_j p_ij = 1,

sparsemax at alpha = 2 exactly (the threshold then exact), alpha-entmax otherwise (alpha in (1, 2]). The structure
follows AdaSplash (Goncalves et al., ICML 2025; github.com/deep-spin/adasplash, ``adasplash_no_block_mask.py``): a
program per (query block, batch x head) keeps its query block in fast memory and loops over key blocks; the
backward recomputes the score blocks (a dK/dV kernel per key block, a dQ kernel per query block) from the stored
threshold and ``U_i = sum_j q_ij v_j / sum_j q_ij`` with ``q_ij = p_ij^(2 - alpha)`` (AdaSplash's ``out2``, the
analogue of FlashAttention's ``rowsum(dO o O)``).

Forward, one kernel (:func:`_fwd`), per query block, on each row shifted by its max (``x = z - max z``, so the
threshold ``t = tau - max z`` lies in ``[-1, -n^(1 - alpha)]``, n = the row's unmasked keys):

1. one pass over the key blocks: the row max, n, and the row's ``TOPK`` (16) largest entries (each tile's own merged
   in, ``tl.topk``). Newton's steps on them alone (in registers, no key block read) give the threshold of the map
   restricted to them: a lower bound of the row's (dropping entries only lowers f), and the row's own where the
   smallest of the 16 is not above it (no entry beyond them is then in the support). A query block whose rows all
   settle so skips step 2 (2 passes in all: peaked rows, MiniLM's every block under sparsemax); the others start
   step 2 from it;
2. for alpha != 2, ``NBISECT`` bisection passes on f(t) = sum_j [x_j - t]_+^r - 1 (r = 1 / (alpha - 1)) narrow the
   bracket; then Newton passes from its lower end. f is convex and decreasing for alpha <= 2, so Newton's steps from
   below rise to the root without passing it; they stop when the step falls to float32 noise (``TOL``), when
   f <= 0 (at the root to rounding) or after ``MAXIT`` passes. For alpha = 2 Newton's step from below *is*
   Michelot's ``t <- (sum_{x > t} x - 1) / #{x > t}`` (f is piecewise linear), run from t = -1 until the support
   stops shrinking: the threshold is then exact (that of the found support, to float32 rounding of the sum);
   Every threshold tried is >= -1, so a key block where no row of the query block has x > -1 never holds support:
   the first search pass flags the key blocks that may (a bitmask of 64 * NWORDS blocks kept in registers; blocks
   past it always run) and every later pass, the output's included, skips the others without loading K (exact:
   their terms are 0). This pays off for structured scores (windows, padding, peaked heads); on i.i.d. random
   scores nearly every 64 x 64 tile holds some x > -1;
3. one output pass: ``o_i = sum_j p_ij v_j / sum_j p_ij`` (the division makes the weights sum to 1 to float32
   precision whatever the threshold's last bit), and U_i; key blocks with no support in the query block
   (max_j x_ij <= t_i for every row) skip the p, q and the two products with V.

Backward (:func:`backward`): ``delta_i = dO_i . U_i`` (torch, O(L D)); with ``dp_ij = dO_i . v_j``,

    ds_ij = q_ij (dp_ij - delta_i),   dq = scale ds k,   dk = scale ds^T q,   dv = p^T dO,
    dalpha (per row) = (sum_j dp p - delta) / (alpha - 1)^2 - (sum_j dp p log p - delta sum_j p log p) / (alpha - 1)

(the closed forms of :mod:`attnkit.attention.entmax`, ``grad_scores`` and ``dp_dalpha``), the row terms of
dalpha accumulated in the dQ kernel and summed over batch and rows in torch. Tiles with no support skip all but
the score product.

Masked entries (bias -inf), keys past Lk and rows past Lq are masked by index; a fully masked row gets tau = +inf,
out = 0, U = 0 and zero gradients (never NaN). Inputs float32/bf16/fp16: float32 rows take IEEE float32 products
(no TF32); 16-bit rows take 16-bit operands with float32 accumulation (as FlashAttention: the products of q k^T are
exact in float32; p, q and ds are rounded to the input dtype for their products with V, dO, K, Q); thresholds, row
sums and all accumulation in float32. (Under the interpreter bf16 operands are upcast instead: its bf16 tl.dot is
wrong in triton 3.9.)

Runs on CUDA tensors, and on CPU tensors under ``TRITON_INTERPRET=1`` (set before triton is imported), which is how
it is tested without a GPU.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from .flash_triton_backward import bwd_kv, bwd_q
from .flash_triton_tiles import dot, flag_tile, pow_on, tile_bit, z_tile

__all__ = ["forward", "backward", "weights", "BLOCK_M", "BLOCK_N"]

#: default tile sizes: small under the interpreter (the tests' tiny shapes), FlashAttention-like on a GPU
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
BLOCK_M = 16 if _INTERPRET else 64
BLOCK_N = 16 if _INTERPRET else 64
#: bisection passes before Newton's (alpha != 2), Newton's pass limit, and Newton's stopping step (the shifted
#: threshold lies in [-1, 0): absolute, a few float32 ulps of 1)
NBISECT = 3
MAXIT = 40
TOL = 2.0**-21
#: the forward's bitmask of key blocks that may hold support: 64 * NWORDS blocks (longer rows: the rest always run)
NWORDS = 8
#: each row's TOPK largest scores, kept through pass 1 (a power of two, at most BLOCK_N; 0: none): the threshold of
#: the map restricted to them is found in registers, and is the row's own where the last of them is outside it (then
#: no entry beyond is in); a query block whose rows all are skips the search passes (2 passes instead of 6-7 on
#: MiniLM's peaked rows, benchmarks/flash_passes.py); elsewhere it is a lower bound the search starts from
TOPK = 16


@triton.jit
def _row_max_count(q, K, k_base, BIAS, bias_base, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn, skd, sbm, sbn, scale, am1, HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Pass 1: each row's max of z and its count of unmasked keys."""
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    n = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start_n in range(0, Lk, BLOCK_N):
        z, k, col_ok = z_tile(q, K, k_base, BIAS, bias_base, start_n, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn,
                               skd, sbm, sbn, scale, am1, HAS_BIAS, IEEE)
        m = tl.maximum(m, tl.max(z, 1))
        n += tl.sum((z > float("-inf")).to(tl.float32), 1)
    return m, n


@triton.jit
def _row_max_count_top(q, K, k_base, BIAS, bias_base, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn, skd, sbm, sbn, scale, am1,
                       HAS_BIAS: tl.constexpr, IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       TOPK: tl.constexpr):
    """Pass 1 with each row's TOPK largest z (BLOCK_M, TOPK), sorted largest first (-inf where a row has fewer keys):
    each tile's own TOPK merged into the row's (a sort of 2 * TOPK)."""
    m = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    n = tl.zeros([BLOCK_M], dtype=tl.float32)
    top = tl.full([BLOCK_M, TOPK], float("-inf"), dtype=tl.float32)
    for start_n in range(0, Lk, BLOCK_N):
        z, k, col_ok = z_tile(q, K, k_base, BIAS, bias_base, start_n, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn,
                               skd, sbm, sbn, scale, am1, HAS_BIAS, IEEE)
        m = tl.maximum(m, tl.max(z, 1))
        n += tl.sum((z > float("-inf")).to(tl.float32), 1)
        top = tl.topk(tl.reshape(tl.join(top, tl.topk(z, TOPK)), [BLOCK_M, 2 * TOPK]), TOPK)
    return m, n, top


@triton.jit
def _top_threshold(xt, live, r, sm_rows, TOL, BLOCK_M: tl.constexpr, MAXIT: tl.constexpr, KR1: tl.constexpr):
    """(t, exact) from each row's TOPK largest x = z - max (xt, sorted, -inf pads), in registers: Newton from t = -1
    on f(t) = sum [x - t]_+^r - 1 over them alone (Michelot's steps for sparsemax, exact once the support stops
    shrinking). Dropping entries only lowers f, so t is a lower bound of the row's threshold; it *is* the row's where
    the search converged and the smallest of the TOPK is not above t (no entry beyond them is then in the support)."""
    t = tl.full([BLOCK_M], -1.0, dtype=tl.float32)
    done = ~live
    conv = tl.zeros([BLOCK_M], dtype=tl.int1)
    k_prev = tl.full([BLOCK_M], -1.0, dtype=tl.float32)
    it = 0
    active = tl.max((~done).to(tl.int32), 0)
    while active > 0:
        p1, on, dd = pow_on(xt, t, r - 1.0, KR1)
        f = tl.sum(p1 * dd, 1) - 1.0
        df = tl.sum(p1, 1)
        ks = tl.sum(on.to(tl.float32), 1)
        stop = done | (f <= 0.0) | (sm_rows & (ks == k_prev))
        step = tl.where(stop | (df <= 0.0), 0.0, f / (r * tl.where(df > 0.0, df, 1.0)))
        t = t + step
        fin = stop | ((step <= TOL) & ~sm_rows)
        conv = conv | (fin & ~done)
        done = fin
        k_prev = ks
        it += 1
        active = tl.where(it < MAXIT, tl.max((~done).to(tl.int32), 0), 0)
    exact = live & conv & (tl.min(xt, 1) <= t)
    return t, exact


@triton.jit
def _bisect(q, K, k_base, BIAS, bias_base, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn, skd, sbm, sbn, scale, am1, r, m0, live, lo, hi, bits, widx, npass, ntile,
            HAS_BIAS: tl.constexpr, IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
            NBISECT: tl.constexpr, KR: tl.constexpr):
    """Pass 2a (alpha != 2): NBISECT bisection steps of the shifted threshold in [lo, hi]. The first pass flags the key
    blocks where a live row has x > -1 (every threshold tried is >= -1: the others never hold support)."""
    for _ in range(NBISECT):
        mid = 0.5 * (lo + hi)
        f = tl.zeros([BLOCK_M], dtype=tl.float32)
        for start_n in range(0, Lk, BLOCK_N):
            j = start_n // BLOCK_N
            if (npass == 0) | tile_bit(bits, widx, j):
                z, k, col_ok = z_tile(q, K, k_base, BIAS, bias_base, start_n, rows, row_ok, offs_n, offs_d, d_ok,
                                       Lk, skn, skd, sbm, sbn, scale, am1, HAS_BIAS, IEEE)
                x = z - m0[:, None]
                if npass == 0:
                    bits = flag_tile(bits, widx, j, x, live, lo)
                pm, on, dd = pow_on(x, mid, r, KR)
                f += tl.sum(pm, 1)
                ntile += 1
        npass += 1
        above = f > 1.0  # the root lies above mid
        lo = tl.where(above, mid, lo)
        hi = tl.where(above, hi, mid)
    return lo, bits, npass, ntile


@triton.jit
def _newton(q, K, k_base, BIAS, bias_base, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn, skd, sbm, sbn, scale, am1, r, m0, live, t, sm_rows, bits, widx, npass, ntile, TOL,
            HAS_BIAS: tl.constexpr, IEEE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
            MAXIT: tl.constexpr, KR1: tl.constexpr):
    """Pass 2b: Newton steps from below on f(t) = sum [x - t]_+^r - 1 until the step is float32 noise, or (sparsemax)
    the support stops shrinking (Michelot: then t is exact)."""
    done = ~live
    k_prev = tl.full([BLOCK_M], -1.0, dtype=tl.float32)
    it = npass * 0
    active = tl.max((~done).to(tl.int32), 0)
    while active > 0:
        f = tl.zeros([BLOCK_M], dtype=tl.float32)
        df = tl.zeros([BLOCK_M], dtype=tl.float32)
        ks = tl.zeros([BLOCK_M], dtype=tl.float32)
        for start_n in range(0, Lk, BLOCK_N):
            j = start_n // BLOCK_N
            if (npass == 0) | tile_bit(bits, widx, j):
                z, k, col_ok = z_tile(q, K, k_base, BIAS, bias_base, start_n, rows, row_ok, offs_n, offs_d, d_ok, Lk,
                                       skn, skd, sbm, sbn, scale, am1, HAS_BIAS, IEEE)
                x = z - m0[:, None]
                if npass == 0:
                    bits = flag_tile(bits, widx, j, x, live, t)
                p1, on, dd = pow_on(x, t, r - 1.0, KR1)  # [x - t]_+^(r - 1); its sum is -f'(t) / r
                f += tl.sum(p1 * dd, 1)
                df += tl.sum(p1, 1)
                ks += tl.sum(on.to(tl.float32), 1)
                ntile += 1
        npass += 1
        f = f - 1.0
        stop = done | (f <= 0.0) | (sm_rows & (ks == k_prev))
        step = tl.where(stop | (df <= 0.0), 0.0, f / (r * tl.where(df > 0.0, df, 1.0)))
        t = t + step
        done = stop | ((step <= TOL) & ~sm_rows)  # alpha != 2: Newton's next step would be far smaller still
        k_prev = ks
        it += 1
        active = tl.where(it < MAXIT, tl.max((~done).to(tl.int32), 0), 0)
    return t, bits, npass, ntile


@triton.jit
def _output(q, K, k_base, BIAS, bias_base, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn, skd, sbm, sbn, scale, am1, V, v_base, svn, svd, r, c_q, m0, t_live, bits, widx, npass, ntile,
            HAS_BIAS: tl.constexpr, NEED_AUX: tl.constexpr, IEEE: tl.constexpr, BLOCK_M: tl.constexpr,
            BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, KR: tl.constexpr, KQ: tl.constexpr):
    """Pass 3: sum p v / sum p over the key blocks that hold support (and U = sum q v / sum q, q = p^(2 - alpha))."""
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    acc_u = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    l = tl.zeros([BLOCK_M], dtype=tl.float32)
    lq = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start_n in range(0, Lk, BLOCK_N):
        if (npass == 0) | tile_bit(bits, widx, start_n // BLOCK_N):
            z, k, col_ok = z_tile(q, K, k_base, BIAS, bias_base, start_n, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn,
                                   skd, sbm, sbn, scale, am1, HAS_BIAS, IEEE)
            x = z - m0[:, None]
            ntile += 1
            if tl.max(tl.max(x - t_live[:, None], 1), 0) > 0.0:
                v = tl.load(V + v_base + (start_n + offs_n)[:, None] * svn + offs_d[None, :] * svd,
                            mask=col_ok[:, None] & d_ok[None, :], other=0.0)
                p, on, dd = pow_on(x, t_live, r, KR)
                l += tl.sum(p, 1)
                acc += dot(p, v, IEEE)
                if NEED_AUX:
                    qq, on, dd = pow_on(x, t_live, c_q, KQ)
                    lq += tl.sum(qq, 1)
                    acc_u += dot(qq, v, IEEE)
    return acc / tl.where(l > 0.0, l, 1.0)[:, None], acc_u / tl.where(lq > 0.0, lq, 1.0)[:, None], ntile


@triton.jit
def _fwd(Q, K, V, BIAS, ALPHA, OUT, TAU, AUX, COUNTS,
         sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
         sob, soh, som, sod, sbb, sbh, sbm, sbn, sab, sah, sam, sad,
         H, Lq, Lk, D, scale, TOL,
         HAS_BIAS: tl.constexpr, NEED_AUX: tl.constexpr, IEEE: tl.constexpr,
         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
         NBISECT: tl.constexpr, MAXIT: tl.constexpr, NWORDS: tl.constexpr,
         KR: tl.constexpr, KR1: tl.constexpr, KQ: tl.constexpr, COUNT: tl.constexpr, TOPK: tl.constexpr):
    """One query block of one (batch, head): the row max, the threshold t = tau - max in [-1, -n^(1 - alpha)], the
    output over the key blocks that hold support. A bitmask of 64 * NWORDS key blocks (in registers) skips the blocks
    that never hold support after the first search pass."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < Lq
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqm + offs_d[None, :] * sqd,
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    k_base = b * skb + h * skh
    bias_base = b * sbb + h * sbh
    alpha = tl.load(ALPHA + h).to(tl.float32)
    am1 = alpha - 1.0
    r = 1.0 / am1
    sm_rows = (tl.zeros([BLOCK_M], dtype=tl.float32) + alpha) == 2.0  # sparsemax, row-wise
    lo = tl.full([BLOCK_M], -1.0, dtype=tl.float32)
    if TOPK > 0:
        m, n, top = _row_max_count_top(q, K, k_base, BIAS, bias_base, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn, skd, sbm, sbn, scale, am1, HAS_BIAS, IEEE, BLOCK_M, BLOCK_N, TOPK)
        live = row_ok & (m > float("-inf"))
        m0 = tl.where(live, m, 0.0)
        lo, exact = _top_threshold(top - m0[:, None], live, r, sm_rows, TOL, BLOCK_M, MAXIT, KR1)
        lo = tl.where(live, lo, -1.0)
        t_top = lo
        search = tl.max((live & ~exact).to(tl.int32), 0) > 0  # some row's threshold lies past its TOPK largest
    else:
        m, n = _row_max_count(q, K, k_base, BIAS, bias_base, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn, skd, sbm, sbn, scale, am1, HAS_BIAS, IEEE, BLOCK_M, BLOCK_N)
        live = row_ok & (m > float("-inf"))
        m0 = tl.where(live, m, 0.0)
        exact = live & ~live
        t_top = lo
        search = Lk > 0
    hi = -tl.exp2((1.0 - alpha) * tl.log2(tl.maximum(n, 1.0)))
    widx = tl.arange(0, NWORDS)
    bits = tl.zeros([NWORDS], dtype=tl.int64)
    npass = pid_m * 0
    ntile = pid_m * 0 + tl.cdiv(Lk, BLOCK_N)  # pass 1's
    t = lo
    if search:
        if alpha != 2.0:
            lo, bits, npass, ntile = _bisect(q, K, k_base, BIAS, bias_base, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn, skd, sbm, sbn, scale, am1, r, m0, live, lo, hi, bits, widx, npass, ntile, HAS_BIAS, IEEE, BLOCK_M, BLOCK_N, NBISECT, KR)
        t, bits, npass, ntile = _newton(q, K, k_base, BIAS, bias_base, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn, skd, sbm, sbn, scale, am1, r, m0, live, lo, sm_rows, bits, widx, npass, ntile, TOL, HAS_BIAS, IEEE, BLOCK_M, BLOCK_N, MAXIT, KR1)
        t = tl.where(exact, t_top, t)  # (rows found exact from their TOPK keep that threshold)
    t_live = tl.where(live, t, float("inf"))
    out, u, ntile = _output(q, K, k_base, BIAS, bias_base, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn, skd, sbm, sbn, scale, am1, V, b * svb + h * svh, svn, svd, r, (2.0 - alpha) * r, m0, t_live, bits, widx, npass, ntile,
                     HAS_BIAS, NEED_AUX, IEEE, BLOCK_M, BLOCK_N, BLOCK_D, KR, KQ)
    o_mask = row_ok[:, None] & d_ok[None, :]
    tl.store(OUT + b * sob + h * soh + rows[:, None] * som + offs_d[None, :] * sod, out.to(OUT.dtype.element_ty),
             mask=o_mask)
    tl.store(TAU + (pid_bh * Lq + rows) * 2, m0, mask=row_ok)  # the row's shift (its max; 0 where fully masked)
    tl.store(TAU + (pid_bh * Lq + rows) * 2 + 1, t_live, mask=row_ok)  # the threshold past it (+inf: fully masked)
    if COUNT:  # (passes over the key blocks, key tiles computed) of this program: pass 1, the search, the output
        tl.store(COUNTS + (pid_bh * tl.num_programs(0) + pid_m) * 2, npass + 2)
        tl.store(COUNTS + (pid_bh * tl.num_programs(0) + pid_m) * 2 + 1, ntile)
    if NEED_AUX:
        tl.store(AUX + b * sab + h * sah + rows[:, None] * sam + offs_d[None, :] * sad, u, mask=o_mask)


def _check(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, alpha: torch.Tensor) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.shape != k.shape or q.shape[:2] != k.shape[:2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q (B,H,Lq,D), k and v (B,H,Lk,D) expected, got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if not (q.dtype == k.dtype == v.dtype) or q.dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"q, k, v must share one dtype among float32/bfloat16/float16, got {q.dtype}, {k.dtype}, {v.dtype}")
    if alpha.shape != (q.shape[1],):
        raise ValueError(f"alpha must have shape (H,) = ({q.shape[1]},), got {tuple(alpha.shape)}")


def _bias_args(bias: torch.Tensor | None, q: torch.Tensor, Lk: int):
    """(the bias tensor or a dummy, its 4 strides broadcast to (B, H, Lq, Lk) with zero strides, has_bias)."""
    if bias is None:
        return q, (0, 0, 0, 0), False
    B, H, Lq = q.shape[:3]
    if bias.dtype != torch.float32:
        bias = bias.float()
    eb = bias.expand(B, H, Lq, Lk)  # a view: zero strides where broadcast, nothing materialised
    return eb, tuple(eb.stride()), True


def _ieee(dtype: torch.dtype) -> bool:
    """float32 products: for float32 inputs, and for bf16 under the interpreter (triton 3.9's interpreter multiplies
    bf16 operands of tl.dot as raw integers: wrong results), where they are upcast (exact products, as on a GPU)."""
    return dtype == torch.float32 or (dtype == torch.bfloat16 and _INTERPRET)


def _blocks(D: int, block_m: int | None, block_n: int | None):
    return (block_m or BLOCK_M, block_n or BLOCK_N, max(16, triton.next_power_of_2(D)))


def powers(fixed_alpha: float | None) -> dict[str, int]:
    """The kernels' compile-time exponents: KR = 1 / (alpha - 1) (p), KR1 = KR - 1 (Newton's slope), KQ = (2 - alpha)
    / (alpha - 1) (q = p^(2 - alpha)), as whole numbers where every head has one alpha known on the host (2:
    sparsemax, 1.5: 1.5-entmax; products, no special functions), else -1 (any alpha, read per head at run time)."""
    if fixed_alpha == 2.0:
        return {"KR": 1, "KR1": 0, "KQ": 0}
    if fixed_alpha == 1.5:
        return {"KR": 2, "KR1": 1, "KQ": 1}
    return {"KR": -1, "KR1": -1, "KQ": -1}


def _topk(block_n: int, topk: int | None) -> int:
    """The rows' kept largest scores: ``topk`` (default TOPK), at most a key block's width; 0 turns it off."""
    k = TOPK if topk is None else topk
    if k < 0 or k & (k - 1):
        raise ValueError(f"topk must be 0 or a power of two, got {k}")
    return min(k, block_n)


def _launch(num_warps: int | None, num_stages: int | None) -> dict[str, int]:
    """Triton's launch options where given (else its defaults)."""
    return {k: v for k, v in (("num_warps", num_warps), ("num_stages", num_stages)) if v is not None}


def forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None, alpha: torch.Tensor,
            scale: float, *, need_aux: bool = True, fixed_alpha: float | None = None, block_m: int | None = None,
            block_n: int | None = None, num_warps: int | None = None, num_stages: int | None = None,
            counts: torch.Tensor | None = None, topk: int | None = None):
    """(out, tau, aux): out (B, H, Lq, D) in q's dtype, tau (B, H, Lq, 2) float32 (each row's threshold as the pair
    (shift, t): tau = shift + t, the shift its max of z and t in [-1, 0); kept apart, so that no rounding of their sum
    at a large shift (sparsegen-lin's lam near 1 scales z by 1 / (1 - lam)) reaches the weights; (0, +inf) on fully
    masked rows), aux U (B, H, Lq, D) float32 (None when ``need_aux`` is False). ``fixed_alpha``: every entry of ``alpha``, where the
    caller knows it without reading the tensor (2.0 or 1.5 compile the powers as products: see :func:`powers`).
    ``counts``: an int32 tensor (B * H, number of query blocks, 2) that receives each program's passes over the key
    blocks and key tiles computed (the search's cost, for benchmarks/flash_passes.py). ``topk``: each row's largest
    scores kept in pass 1 (default :data:`TOPK`; 0: none, the search from -1)."""
    _check(q, k, v, alpha)
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    BM, BN, BD = _blocks(D, block_m, block_n)
    alpha = alpha.detach().to(device=q.device, dtype=torch.float32).contiguous()
    out = torch.empty_like(q)
    tau = torch.empty((B, H, Lq, 2), device=q.device, dtype=torch.float32)
    aux = torch.empty((B, H, Lq, D), device=q.device, dtype=torch.float32) if need_aux else None
    bt, bs, has_bias = _bias_args(bias, q, Lk)
    a = aux if need_aux else out
    grid = (triton.cdiv(Lq, BM), B * H)
    if Lq == 0 or B * H == 0:
        return out, tau, aux
    if Lk == 0:
        out.zero_()
        tau[..., 0], tau[..., 1] = 0.0, float("inf")
        if aux is not None:
            aux.zero_()
        return out, tau, aux
    if counts is not None and (counts.dtype != torch.int32 or counts.shape != (B * H, grid[0], 2) or not counts.is_contiguous()):
        raise ValueError(f"counts must be a contiguous int32 tensor of shape {(B * H, grid[0], 2)}")
    _fwd[grid](q, k, v, bt, alpha, out, tau, a, tau if counts is None else counts,
               *q.stride(), *k.stride(), *v.stride(), *out.stride(), *bs, *a.stride(),
               H, Lq, Lk, D, float(scale), TOL,
               HAS_BIAS=has_bias, NEED_AUX=need_aux, IEEE=_ieee(q.dtype),
               BLOCK_M=BM, BLOCK_N=BN, BLOCK_D=BD, NBISECT=NBISECT, MAXIT=MAXIT, NWORDS=NWORDS,
               **powers(fixed_alpha), COUNT=counts is not None, TOPK=_topk(BN, topk), **_launch(num_warps, num_stages))
    return out, tau, aux


def backward(q, k, v, bias, alpha, scale, out, tau, aux, grad_out, need_alpha_grad: bool, *,
             fixed_alpha: float | None = None, block_m: int | None = None, block_n: int | None = None,
             num_warps: int | None = None, num_stages: int | None = None):
    """(dq, dk, dv, dalpha or None): dq, dk, dv in the inputs' dtype, dalpha (H,) float32 summed over batch and rows.
    ``aux`` is the forward's U (recomputed by a forward when None); ``fixed_alpha`` as :func:`forward`'s."""
    _check(q, k, v, alpha)
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    BM, BN, BD = _blocks(D, block_m, block_n)
    if aux is None:
        _, tau, aux = forward(q, k, v, bias, alpha, scale, need_aux=True, fixed_alpha=fixed_alpha, block_m=block_m,
                              block_n=block_n, num_warps=num_warps, num_stages=num_stages)
    alpha = alpha.detach().to(device=q.device, dtype=torch.float32).contiguous()
    do = grad_out.to(q.dtype).contiguous()
    delta = (grad_out.float() * aux.float()).sum(-1).contiguous()  # dO_i . U_i
    tau = tau.float().contiguous()
    dq = torch.zeros_like(q, memory_format=torch.contiguous_format)
    dk = torch.zeros_like(k, memory_format=torch.contiguous_format)
    dv = torch.zeros_like(v, memory_format=torch.contiguous_format)
    da_rows = torch.zeros((B, H, Lq), device=q.device, dtype=torch.float32) if need_alpha_grad else delta
    if Lq == 0 or Lk == 0 or B * H == 0:
        return dq, dk, dv, (torch.zeros(H, device=q.device, dtype=torch.float32) if need_alpha_grad else None)
    bt, bs, has_bias = _bias_args(bias, q, Lk)
    strides = (*q.stride(), *k.stride(), *v.stride(), *do.stride(), *bs)
    ieee = _ieee(q.dtype)
    pw, launch = powers(fixed_alpha), _launch(num_warps, num_stages)
    bwd_kv[(triton.cdiv(Lk, BN), B * H)](q, k, v, bt, alpha, tau, do, delta, dk, dv, *strides, H, Lq, Lk, D,
                                          float(scale), HAS_BIAS=has_bias, IEEE=ieee,
                                          BLOCK_M=BM, BLOCK_N=BN, BLOCK_D=BD, KR=pw["KR"], KQ=pw["KQ"], **launch)
    bwd_q[(triton.cdiv(Lq, BM), B * H)](q, k, v, bt, alpha, tau, do, delta, dq, da_rows, *strides, H, Lq, Lk, D,
                                         float(scale), HAS_BIAS=has_bias, NEED_DALPHA=need_alpha_grad, IEEE=ieee,
                                         BLOCK_M=BM, BLOCK_N=BN, BLOCK_D=BD, KQ=pw["KQ"], **launch)
    dalpha = da_rows.sum((0, 2)) if need_alpha_grad else None
    return dq, dk, dv, dalpha


def weights(q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None, alpha: torch.Tensor, scale: float,
            tau: torch.Tensor) -> torch.Tensor:
    """The attention map (B, H, Lq, Lk) float32 from the stored thresholds (torch; materialises L x L): the forward's
    weights, each row divided by its sum as the forward's output is."""
    s = scale * torch.matmul(q.float(), k.float().transpose(-1, -2))
    if bias is not None:
        s = s + bias.float()
    am1 = (alpha.float().to(q.device) - 1).view(1, -1, 1, 1)
    z = am1 * s
    # each row shifted by its max as recomputed here (the kernel's own z may differ in its last bits, which at a large
    # z, a lam near 1, are whole units); the stored shift only where every key is masked
    m = z.amax(-1, keepdim=True)
    x = (z - torch.where(torch.isfinite(m), m, tau[..., :1].float())) - tau[..., 1:].float()
    on = x > 0
    p = torch.where(on, torch.where(on, x, torch.ones_like(x)) ** (1 / am1), torch.zeros_like(x))
    tot = p.sum(-1, keepdim=True)
    return torch.where(tot > 0, p / torch.where(tot > 0, tot, torch.ones_like(tot)), p)
