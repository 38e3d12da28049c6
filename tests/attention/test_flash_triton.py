"""The Triton flash sparse-attention backend (attnkit.attention.flash_triton, issue 47) against a float64 reference.

The reference materialises ``scale * q k^T + bias`` in float64 and applies the exact map (sparsemax for alpha = 2,
1.5-entmax for 1.5, alpha-entmax by bisection for per-head alphas), then ``@ v``; gradients by autograd through it
(alpha's through ``entmax_bisect`` with alpha a tensor). Without a GPU the kernels run on CPU tensors through
triton's interpreter (TRITON_INTERPRET=1, set before triton is imported): it is slow, so the shapes are tiny but
chosen to cross block edges (blocks of 16: L not a multiple of 16, Lq != Lk, several key and query blocks).
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported (conftest sets it too)
triton = pytest.importorskip("triton", reason="triton is not installed (pip install -e '.[gpu]'): the Triton flash kernels are not tested here")

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
if not INTERPRET and not torch.cuda.is_available():
    pytest.skip("no CUDA device and TRITON_INTERPRET is not 1: the Triton flash kernels cannot run here", allow_module_level=True)
DEVICE = "cpu" if INTERPRET else "cuda"

from attnkit.attention import flash_triton as ft  # noqa: E402
from attnkit.attention.entmax import entmax15, entmax_bisect  # noqa: E402
from attnkit.attention.maps import sparsemax  # noqa: E402

NEG = float("-inf")


def _inputs(B, H, Lq, Lk, D, seed, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, L, D, generator=g) for L in (Lq, Lk, Lk))
    return [t.to(device=DEVICE, dtype=dtype) for t in (q, k, v)], torch.randn(B, H, Lq, D, generator=g).to(DEVICE)


def _key_padding(keep: torch.Tensor) -> torch.Tensor:
    """(B, Lk) bool keep-mask -> a (B, 1, 1, Lk) float32 bias (0 / -inf)."""
    return torch.zeros(keep.shape, dtype=torch.float32).masked_fill(~keep, NEG)[:, None, None, :].to(DEVICE)


def _reference(q, k, v, bias, alpha, scale, g, kind):
    """(p, out, dq, dk, dv, dalpha) in float64; kind "sparsemax", "entmax15" or "bisect" picks the map of p, out and
    dq/dk/dv; dalpha always through entmax_bisect with alpha a tensor (its closed form, float64)."""
    def run(map_kind):
        q64, k64, v64 = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
        a64 = alpha.detach().double().cpu().requires_grad_()
        s = scale * q64 @ k64.transpose(-1, -2)
        if bias is not None:
            s = s + bias.double().cpu()
        if map_kind == "sparsemax":
            p = sparsemax(s, dim=-1)
        elif map_kind == "entmax15":
            p = entmax15(s, dim=-1)
        else:
            p = entmax_bisect(s, alpha=a64.view(1, -1, 1, 1), dim=-1)
        out = p @ v64
        (out * g.double().cpu()).sum().backward()
        return p.detach(), out.detach(), q64.grad, k64.grad, v64.grad, a64.grad

    p, out, dq, dk, dv, _ = run(kind)
    da = run("bisect")[-1] if kind != "bisect" else run(kind)[-1]
    return p, out, dq, dk, dv, da


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |b| (b the float64 reference)."""
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()


def _check(B, H, Lq, Lk, D, alpha, bias, kind, scale=None, seed=0, dtype=torch.float32, out_tol=1e-5, grad_tol=1e-4,
           fixed=None):
    """The kernels against the float64 reference; ``fixed``: the powers compiled for that one alpha (ft.powers)."""
    (q, k, v), g = _inputs(B, H, Lq, Lk, D, seed, dtype)
    alpha = torch.tensor(alpha, dtype=torch.float32, device=DEVICE)
    scale = D**-0.5 if scale is None else scale
    out, tau, aux = ft.forward(q, k, v, bias, alpha, scale, fixed_alpha=fixed)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert tau.shape == (B, H, Lq, 2) and tau.dtype == torch.float32
    assert aux is None or aux.shape[:3] == (B, H, Lq) and aux.numel() <= q.numel()
    dq, dk, dv, da = ft.backward(q, k, v, bias, alpha, scale, out, tau, aux, g.to(dtype), True, fixed_alpha=fixed)
    assert (dq.shape, dk.shape, dv.shape, da.shape) == (q.shape, k.shape, v.shape, (H,))
    for t in (out, tau.nan_to_num(posinf=0.0), dq, dk, dv, da):
        assert not torch.isnan(t).any()
    p_ref, out_ref, dq_ref, dk_ref, dv_ref, da_ref = _reference(q, k, v, bias, alpha, scale, g.to(dtype).float(), kind)
    err = (out.double().cpu() - out_ref).abs().max().item()
    assert err <= out_tol, f"out: max abs error {err:.2e} > {out_tol:.0e}"
    w = ft.weights(q, k, bias, alpha, scale, tau).cpu()
    if dtype == torch.float32:
        assert torch.equal(w == 0, p_ref == 0), f"zeros differ at {(w == 0).ne(p_ref == 0).sum().item()} entries"
        assert (w.double() - p_ref).abs().max().item() <= out_tol
    for name, got, want in (("dq", dq, dq_ref), ("dk", dk, dk_ref), ("dv", dv, dv_ref), ("dalpha", da, da_ref)):
        r = _rel(got, want)
        assert r <= grad_tol, f"{name}: relative error {r:.2e} > {grad_tol:.0e}"
    return out, tau, (dq, dk, dv, da), p_ref


@pytest.mark.parametrize("fixed", [None, 2.0], ids=["powers at run time", "powers compiled"])
def test_sparsemax_right_padding_exact_threshold(fixed):
    """alpha = 2 (sparsemax), keys padded on the right as a (B, 1, 1, Lk) bias expanded with zero strides; the
    threshold is the exact one of the support, (sum_S z - 1) / |S|; the same with sparsemax's powers compiled in."""
    B, H, L, D = 2, 2, 19, 16
    keep = torch.arange(L)[None, :] < torch.tensor([[L], [12]])
    bias = _key_padding(keep).expand(B, H, L, L)
    out, tau, _, p_ref = _check(B, H, L, L, D, [2.0, 2.0], bias, "sparsemax", fixed=fixed)
    (q, k, v), _ = _inputs(B, H, L, L, D, 0)
    z = (D**-0.5 * q.double().cpu() @ k.double().cpu().transpose(-1, -2)) + bias.double().cpu()
    sup = p_ref > 0
    tau_exact = (torch.where(sup, z, 0.0).sum(-1) - 1) / sup.sum(-1)
    assert (tau.double().cpu().sum(-1) - tau_exact).abs().max().item() <= 2e-6
    alpha = torch.tensor([2.0, 2.0], device=DEVICE)
    assert (out[1].abs().sum() > 0) and torch.equal(ft.weights(q, k, bias, alpha, D**-0.5, tau)[1, ..., 12:].cpu(), torch.zeros(H, L, L - 12))


@pytest.mark.parametrize("fixed", [None, 1.5], ids=["powers at run time", "powers compiled"])
def test_entmax15_left_padding_lq_ne_lk_d32(fixed):
    B, H, Lq, Lk, D = 2, 2, 13, 29, 32
    keep = torch.arange(Lk)[None, :] >= torch.tensor([[0], [9]])  # the second sequence padded on the left
    _check(B, H, Lq, Lk, D, [1.5, 1.5], _key_padding(keep), "entmax15", fixed=fixed)


@pytest.mark.parametrize("fixed", [2.0, 1.5])
def test_compiled_powers_give_the_run_time_powers_results(fixed):
    """sparsemax's and 1.5-entmax's powers compiled as products (ft.powers) against the same kernels reading alpha at
    run time (log2 / exp2): one map, to float32 rounding; the powers table itself."""
    B, H, Lq, Lk, D = 1, 2, 20, 35, 16
    (q, k, v), g = _inputs(B, H, Lq, Lk, D, 9)
    alpha = torch.full((H,), fixed, device=DEVICE)
    runs = []
    for hint in (None, fixed):
        out, tau, aux = ft.forward(q, k, v, None, alpha, 0.4, fixed_alpha=hint)
        runs.append((out, tau, aux) + ft.backward(q, k, v, None, alpha, 0.4, out, tau, aux, g, False, fixed_alpha=hint)[:3])
    for a, b in zip(*runs):
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-6)
    assert ft.powers(2.0) == {"KR": 1, "KR1": 0, "KQ": 0} and ft.powers(1.5) == {"KR": 2, "KR1": 1, "KQ": 1}
    assert ft.powers(None) == ft.powers(1.7) == {"KR": -1, "KR1": -1, "KQ": -1}


def test_per_head_alpha_scattered_padding_large_scores():
    """alpha (H,) = [1.2, 1.7, 2.0] with gradient, keys masked at scattered places, scores of magnitude ~10 (the
    kernel shifts each row by its max)."""
    B, H, Lq, Lk, D = 1, 3, 21, 37, 16
    keep = torch.rand(1, Lk, generator=torch.Generator().manual_seed(3)) > 0.3
    _check(B, H, Lq, Lk, D, [1.2, 1.7, 2.0], _key_padding(keep), "bisect", scale=1.5, seed=1)


def test_sliding_window_bias_and_fully_masked_row():
    """A dense 4-D bias (sliding window of half-width 5 plus a small additive bias) with one query row masked
    entirely: that row gives out = 0, tau = +inf, and zero gradients (never NaN)."""
    B, H, L, D = 1, 3, 33, 16
    i = torch.arange(L)
    window = (i[:, None] - i[None, :]).abs() <= 5
    extra = 0.5 * torch.randn(B, H, L, L, generator=torch.Generator().manual_seed(5))
    bias = extra.masked_fill(~window, NEG)
    bias[:, :, 7, :] = NEG
    bias = bias.to(DEVICE)
    out, tau, (dq, dk, dv, da), p_ref = _check(B, H, L, L, D, [1.2, 1.7, 2.0], bias, "bisect", seed=2)
    assert torch.equal(out[:, :, 7].cpu(), torch.zeros(B, H, D))
    assert torch.isinf(tau[:, :, 7, 1]).all() and torch.equal(tau[:, :, 7, 0].cpu(), torch.zeros(B, H))
    assert torch.isfinite(tau[:, :, [i for i in range(L) if i != 7]]).all()
    assert torch.equal(dq[:, :, 7].cpu(), torch.zeros(B, H, D))


def test_all_keys_masked_in_one_sequence():
    """Every key of the second sequence masked: its outputs and all its gradients are 0, the first is unaffected."""
    B, H, Lq, Lk, D = 2, 1, 9, 11, 16
    keep = torch.ones(B, Lk, dtype=torch.bool)
    keep[1] = False
    bias = _key_padding(keep)
    out, tau, (dq, dk, dv, da), _ = _check(B, H, Lq, Lk, D, [1.5], bias, "bisect", seed=4)
    for t in (out, dq, dk, dv):
        assert torch.equal(t[1].cpu(), torch.zeros_like(t[1].cpu()))
    assert torch.isinf(tau[1, ..., 1]).all()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision(dtype):
    """16-bit q, k, v: computed in float32 (thresholds, sums, accumulation), returned in their dtype; loose
    tolerances (the reference sees the same rounded inputs; the kernels round p and ds for their products)."""
    B, H, Lq, Lk, D = 1, 2, 18, 23, 16
    keep = torch.arange(Lk)[None, :] < 20
    tol = 2e-2 if dtype == torch.bfloat16 else 3e-3
    _check(B, H, Lq, Lk, D, [1.5, 2.0], _key_padding(keep), "bisect", dtype=dtype, out_tol=tol, grad_tol=tol)


def test_backward_options_and_block_sizes():
    """aux None (the backward recomputes U), need_alpha_grad False (no dalpha), no bias, other block sizes: the same
    results as the default path."""
    B, H, Lq, Lk, D = 1, 2, 17, 20, 16
    (q, k, v), g = _inputs(B, H, Lq, Lk, D, 6)
    alpha = torch.tensor([1.5, 2.0], device=DEVICE)
    out, tau, aux = ft.forward(q, k, v, None, alpha, 0.3)
    full = ft.backward(q, k, v, None, alpha, 0.3, out, tau, aux, g, True)
    no_aux = ft.backward(q, k, v, None, alpha, 0.3, out, tau, None, g, False)
    assert no_aux[3] is None
    for a, b in zip(full[:3], no_aux[:3]):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    out2, tau2, aux2 = ft.forward(q, k, v, None, alpha, 0.3, need_aux=False, block_m=32, block_n=16)
    assert aux2 is None
    torch.testing.assert_close(out2, out, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(tau2, tau, rtol=1e-6, atol=1e-6)


def test_rejects_bad_arguments():
    (q, k, v), _ = _inputs(1, 2, 4, 4, 16, 0)
    with pytest.raises(ValueError, match="alpha must have shape"):
        ft.forward(q, k, v, None, torch.tensor([1.5]), 1.0)
    with pytest.raises(ValueError, match="share one dtype"):
        ft.forward(q, k.double(), v, None, torch.tensor([1.5, 1.5]), 1.0)


def test_the_kernel_counts_its_passes_and_skips_key_blocks_without_support():
    """The forward's own counts (passes over the key blocks, key tiles computed; benchmarks/flash_passes.py): keys past
    the 16th masked, so after the first search pass every pass reads one key block of four, not four; the output is
    the reference's."""
    B, H, L, D = 1, 2, 64, 16
    (q, k, v), g = _inputs(B, H, L, L, D, 12)
    keep = torch.arange(L)[None, :] < 16
    bias = _key_padding(keep)
    c = torch.zeros(B * H, 4, 2, dtype=torch.int32, device=DEVICE)
    alpha = torch.full((H,), 2.0, device=DEVICE)
    out, tau, _ = ft.forward(q, k, v, bias, alpha, D**-0.5, fixed_alpha=2.0, block_m=16, block_n=16, counts=c, topk=0)
    passes, tiles = c[..., 0].cpu(), c[..., 1].cpu()
    assert (passes >= 3).all()  # the row max, at least one search pass, the output
    assert torch.equal(tiles, 4 + 4 + (passes - 2) * 1), (passes, tiles)  # pass 1 and the flagging pass read all four
    _, out_ref, *_ = _reference(q, k, v, bias, alpha, D**-0.5, g, "sparsemax")
    assert (out.double().cpu() - out_ref).abs().max().item() < 1e-5
    # each row's 16 largest scores kept (the default): a row of 16 keys has its threshold from them, no search pass
    out, tau, _ = ft.forward(q, k, v, bias, alpha, D**-0.5, fixed_alpha=2.0, block_m=16, block_n=16, counts=c)
    assert torch.equal(c[..., 0].cpu(), torch.full((B * H, 4), 2, dtype=torch.int32))
    assert torch.equal(c[..., 1].cpu(), torch.full((B * H, 4), 8, dtype=torch.int32))  # pass 1 and the output: 4 + 4
    assert (out.double().cpu() - out_ref).abs().max().item() < 1e-5
    with pytest.raises(ValueError, match="counts must be a contiguous int32 tensor of shape"):
        ft.forward(q, k, v, None, alpha, 1.0, counts=torch.zeros(2, 2, dtype=torch.int32, device=DEVICE))


@pytest.mark.parametrize("alpha, kind", [(2.0, "sparsemax"), (1.5, "entmax15"), (1.3, "bisect")])
def test_the_kept_largest_scores_settle_peaked_rows_and_start_the_search_on_flat_ones(alpha, kind):
    """Each row's TOPK largest scores kept through pass 1 (ft.TOPK): on peaked rows (support under 16, every block)
    the threshold comes from them and the search passes are skipped (2 passes); on flat rows (supports of dozens) it is
    a lower bound the search starts from. Both: the float64 reference's output and zeros, and the thresholds of the
    kernel without them (topk=0) to float32 rounding."""
    B, H, Lq, Lk, D = 1, 2, 32, 80, 16
    (q, k, v), g = _inputs(B, H, Lq, Lk, D, 21)
    a = torch.full((H,), alpha, device=DEVICE)
    for q_scale, peaked in ((8.0, True), (0.05, False)):
        qs = q * q_scale
        c = torch.zeros(B * H, 2, 2, dtype=torch.int32, device=DEVICE)
        out, tau, _ = ft.forward(qs, k, v, None, a, D**-0.5, need_aux=False, counts=c)
        out0, tau0, _ = ft.forward(qs, k, v, None, a, D**-0.5, need_aux=False, topk=0)
        p_ref, out_ref, *_ = _reference(qs, k, v, None, a, D**-0.5, g, kind)
        support = (p_ref > 0).sum(-1)
        assert bool((support < 16).all()) == peaked, support.max()
        assert (out.double().cpu() - out_ref).abs().max().item() < 1e-5
        w = ft.weights(qs, k, None, a, D**-0.5, tau).cpu()
        assert torch.equal(w == 0, p_ref == 0)
        assert (tau.sum(-1) - tau0.sum(-1)).abs().max().item() < 1e-5
        passes = c[..., 0].cpu()
        assert bool((passes == 2).all()) if peaked else bool((passes > 2).all()), passes
    with pytest.raises(ValueError, match="topk must be 0 or a power of two"):
        ft.forward(q, k, v, None, a, 1.0, topk=12)
