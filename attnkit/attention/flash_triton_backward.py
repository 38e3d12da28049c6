"""The backward kernels of flash sparse attention in Triton: dK and dV per key block, dQ and alpha's row terms per
query block, each recomputing its score tiles from the stored thresholds (see :mod:`flash_triton`)."""

from __future__ import annotations

import triton
import triton.language as tl

from .flash_triton_tiles import dot, pow_on, z_tile


@triton.jit
def bwd_kv(Q, K, V, BIAS, ALPHA, TAU, DO, DELTA, DK, DV,
            sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdm, sdd, sbb, sbh, sbm, sbn,
            H, Lq, Lk, D, scale,
            HAS_BIAS: tl.constexpr, IEEE: tl.constexpr,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, KR: tl.constexpr, KQ: tl.constexpr):
    """dK, dV of one key block (dk, dv contiguous (B, H, Lk, D)), looping over the query blocks."""
    pid_n = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < Lk
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    kv_mask = col_ok[:, None] & d_ok[None, :]
    k = tl.load(K + b * skb + h * skh + cols[:, None] * skn + offs_d[None, :] * skd, mask=kv_mask, other=0.0)
    v = tl.load(V + b * svb + h * svh + cols[:, None] * svn + offs_d[None, :] * svd, mask=kv_mask, other=0.0)
    alpha = tl.load(ALPHA + h).to(tl.float32)
    am1 = alpha - 1.0
    r = 1.0 / am1
    c_q = (2.0 - alpha) * r
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    for start_m in range(0, Lq, BLOCK_M):
        rows = start_m + offs_m
        row_ok = rows < Lq
        qm = row_ok[:, None] & d_ok[None, :]
        q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqm + offs_d[None, :] * sqd, mask=qm, other=0.0)
        m = tl.load(TAU + (pid_bh * Lq + rows) * 2, mask=row_ok, other=0.0)  # the row's shift and threshold
        t = tl.load(TAU + (pid_bh * Lq + rows) * 2 + 1, mask=row_ok, other=float("inf"))
        qk = dot(q, tl.trans(k), IEEE)
        s = qk * scale
        if HAS_BIAS:
            bias = tl.load(BIAS + b * sbb + h * sbh + rows[:, None] * sbm + cols[None, :] * sbn,
                           mask=row_ok[:, None] & col_ok[None, :], other=0.0).to(tl.float32)
            s = s + bias
        z = tl.where(col_ok[None, :], s * am1, float("-inf")) - m[:, None]
        if tl.max(tl.max(z - t[:, None], 1), 0) > 0.0:
            do = tl.load(DO + b * sdb + h * sdh + rows[:, None] * sdm + offs_d[None, :] * sdd, mask=qm, other=0.0)
            delta = tl.load(DELTA + pid_bh * Lq + rows, mask=row_ok, other=0.0)
            p, on, dd = pow_on(z, t, r, KR)
            qq, on, dd = pow_on(z, t, c_q, KQ)
            dv += dot(tl.trans(p), do, IEEE)
            dp = dot(do, tl.trans(v), IEEE)
            ds = qq * (dp - delta[:, None])
            dk += dot(tl.trans(ds), q, IEEE)
    base = pid_bh * Lk * D
    ptrs = base + cols[:, None] * D + offs_d[None, :]
    tl.store(DK + ptrs, (dk * scale).to(DK.dtype.element_ty), mask=kv_mask)
    tl.store(DV + ptrs, dv.to(DV.dtype.element_ty), mask=kv_mask)


@triton.jit
def bwd_q(Q, K, V, BIAS, ALPHA, TAU, DO, DELTA, DQ, DA,
           sqb, sqh, sqm, sqd, skb, skh, skn, skd, svb, svh, svn, svd, sdb, sdh, sdm, sdd, sbb, sbh, sbm, sbn,
           H, Lq, Lk, D, scale,
           HAS_BIAS: tl.constexpr, NEED_DALPHA: tl.constexpr, IEEE: tl.constexpr,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr, KQ: tl.constexpr):
    """dQ of one query block (dq contiguous (B, H, Lq, D)), looping over the key blocks; and alpha's gradient per row
    (DA, (B, H, Lq))."""
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    b = pid_bh // H
    h = pid_bh % H
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < Lq
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < D
    qm = row_ok[:, None] & d_ok[None, :]
    q = tl.load(Q + b * sqb + h * sqh + rows[:, None] * sqm + offs_d[None, :] * sqd, mask=qm, other=0.0)
    do = tl.load(DO + b * sdb + h * sdh + rows[:, None] * sdm + offs_d[None, :] * sdd, mask=qm, other=0.0)
    m = tl.load(TAU + (pid_bh * Lq + rows) * 2, mask=row_ok, other=0.0)  # the row's shift and threshold
    t = tl.load(TAU + (pid_bh * Lq + rows) * 2 + 1, mask=row_ok, other=float("inf"))
    delta = tl.load(DELTA + pid_bh * Lq + rows, mask=row_ok, other=0.0)
    alpha = tl.load(ALPHA + h).to(tl.float32)
    am1 = alpha - 1.0
    r = 1.0 / am1
    c_q = (2.0 - alpha) * r
    k_base = b * skb + h * skh
    v_base = b * svb + h * svh
    bias_base = b * sbb + h * sbh
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    gp = tl.zeros([BLOCK_M], dtype=tl.float32)  # sum_j dp p
    gpl = tl.zeros([BLOCK_M], dtype=tl.float32)  # sum_j dp p log p
    ent = tl.zeros([BLOCK_M], dtype=tl.float32)  # sum_j p log p
    for start_n in range(0, Lk, BLOCK_N):
        z, k, col_ok = z_tile(q, K, k_base, BIAS, bias_base, start_n, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn,
                               skd, sbm, sbn, scale, am1, HAS_BIAS, IEEE)
        z = z - m[:, None]
        if tl.max(tl.max(z - t[:, None], 1), 0) > 0.0:
            v = tl.load(V + v_base + (start_n + offs_n)[:, None] * svn + offs_d[None, :] * svd,
                        mask=col_ok[:, None] & d_ok[None, :], other=0.0)
            qq, on, dd = pow_on(z, t, c_q, KQ)
            dp = dot(do, tl.trans(v), IEEE)
            ds = qq * (dp - delta[:, None])
            dq += dot(ds, k, IEEE)
            if NEED_DALPHA:
                lg = r * tl.log(dd)  # log p on the support, 0 off it
                p = tl.where(on, tl.exp(lg), 0.0)
                plogp = p * lg
                gp += tl.sum(dp * p, 1)
                gpl += tl.sum(dp * plogp, 1)
                ent += tl.sum(plogp, 1)
    tl.store(DQ + pid_bh * Lq * D + rows[:, None] * D + offs_d[None, :], (dq * scale).to(DQ.dtype.element_ty), mask=qm)
    if NEED_DALPHA:
        da = (gp - delta) / (am1 * am1) - (gpl - delta * ent) / am1
        tl.store(DA + pid_bh * Lq + rows, tl.where(t < float("inf"), da, 0.0), mask=row_ok)


# ----------------------------------------------------------------------------- host side
