"""The tiles the flash Triton kernels share: one key block's scores, [x - t]_+^e, products accumulated in float32, and
the bitmask of key blocks that may hold support."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def dot(a, b, IEEE: tl.constexpr):
    """a @ b accumulated in float32: IEEE float32 products of float32 operands, or (16-bit inputs) a rounded to b's
    dtype and 16-bit products, as FlashAttention."""
    if IEEE:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), input_precision="ieee")
    else:
        return tl.dot(a.to(b.dtype), b, out_dtype=tl.float32)


@triton.jit
def z_tile(q, K, k_base, BIAS, bias_base, start_n, rows, row_ok, offs_n, offs_d, d_ok, Lk, skn, skd, sbm, sbn,
            scale, am1, HAS_BIAS: tl.constexpr, IEEE: tl.constexpr):
    """One key block: (z, k, col_ok) with z = (alpha - 1) (scale q k^T + bias), -inf where masked or out of range."""
    cols = start_n + offs_n
    col_ok = cols < Lk
    k = tl.load(K + k_base + cols[:, None] * skn + offs_d[None, :] * skd, mask=col_ok[:, None] & d_ok[None, :], other=0.0)
    qk = dot(q, tl.trans(k), IEEE)
    s = qk * scale
    if HAS_BIAS:
        bm = row_ok[:, None] & col_ok[None, :]
        bias = tl.load(BIAS + bias_base + rows[:, None] * sbm + cols[None, :] * sbn, mask=bm, other=0.0).to(tl.float32)
        s = s + bias
    z = s * am1
    z = tl.where(col_ok[None, :], z, float("-inf"))
    return z, k, col_ok


@triton.jit
def tile_bit(bits, widx, j):
    """Whether key block j was flagged (blocks past the bitmask's 64 * NW always are)."""
    w = j // 64
    word = tl.sum(tl.where(widx == w, bits, 0), 0)
    return (((word >> (j % 64)) & 1) != 0) | (w >= widx.shape[0])


@triton.jit
def flag_tile(bits, widx, j, x, live, floor):
    """bits with key block j's flag set where some live row has x > its floor there (x = z - row max; floor: a lower
    bound of the row's threshold, below every threshold the search will try)."""
    hit = tl.max(tl.max(tl.where(live[:, None], x - floor[:, None], float("-inf")), 1), 0) > 0.0
    return bits | tl.where(widx == j // 64, hit.to(tl.int64) << (j % 64), 0)


@triton.jit
def pow_on(x, t, e, N: tl.constexpr):
    """([x - t]_+ ^ e, x > t, x - t where x > t else 1), with 0^0 = 0 (only where x > t). N: e known when the kernel
    is compiled as a whole number 0, 1 or 2 (sparsemax's and 1.5-entmax's powers: products, exact), or -1 (any e:
    through log2 / exp2, two special-function calls per entry, which bound a tile's time more than its product)."""
    on = x > t[:, None]
    d = tl.where(on, x - t[:, None], 1.0)
    if N == 0:
        p = tl.where(on, 1.0, 0.0)
    elif N == 1:
        p = tl.where(on, d, 0.0)
    elif N == 2:
        p = tl.where(on, d * d, 0.0)
    else:
        p = tl.where(on, tl.exp2(e * tl.log2(d)), 0.0)
    return p, on, d
