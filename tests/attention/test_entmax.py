"""Properties of the entmax maps (1.5-entmax, alpha-entmax), checked against the ``entmax`` package in float64."""

import math

import pytest
import torch

import attnkit
from attnkit import entmax15, entmax_bisect, sparsemax

entmax = pytest.importorskip("entmax", reason="the entmax package (pip install -e '.[test]') is the reference")


#: every property holds for the compiled kernel, the pure-torch path and the Triton kernels (interpreted)
pytestmark = pytest.mark.usefixtures("backend")


def rows(gen, *shape, scale=3.0):
    return torch.randn(*shape, generator=gen, dtype=torch.float64) * scale


@pytest.mark.parametrize("n", [1, 2, 5, 17, 64, 130])
def test_entmax15_matches_the_entmax_package(n, gen):
    z = rows(gen, 6, 5, n)
    p = entmax15(z)
    assert torch.allclose(p, entmax.entmax15(z, dim=-1), atol=1e-12)
    assert torch.allclose(p.sum(-1), torch.ones(6, 5, dtype=torch.float64), atol=1e-12)


def test_entmax15_exact_on_ties_and_entries_at_the_threshold():
    # dyadic rows whose threshold is known in closed form: one entry exactly at it (p = 0 there), all tied, a
    # pair tied at the top with the rest far below; and flat or peaked long rows, where the search takes
    # the most passes, against the package
    z = torch.tensor([[0.0, -2.0, -2.0, -7.0], [3.0, 3.0, 3.0, 3.0], [1.0, 1.0, -9.0, -9.0]], dtype=torch.float64)
    want = torch.tensor([[1.0, 0, 0, 0], [0.25] * 4, [0.5, 0.5, 0, 0]], dtype=torch.float64)
    for dtype, tol in ((torch.float64, 1e-15), (torch.float32, 1e-6)):
        p = entmax15(z.to(dtype))
        assert torch.equal(p == 0, want == 0) and (p.double() - want).abs().max() < tol
    # rows whose first pass (at t = -1) sees entries outside the support, so Newton's steps must shrink it: four
    # tied maxima (tau = -1/2 on x = z / 2) over entries at -1.8 and -1 (just below the threshold: p = 0 there)
    z = torch.tensor([[0.0] * 4 + [-1.0] + [-1.8] * 10, [0.0, -0.5, -0.9] + [-1.9] * 12], dtype=torch.float64)
    assert torch.allclose(entmax15(z), entmax.entmax15(z, dim=-1), atol=1e-15)
    assert torch.equal(entmax15(z)[0, 4:], torch.zeros(11, dtype=torch.float64))
    g = torch.Generator().manual_seed(3)
    for scale in (0.05, 1.0, 30.0):
        long = torch.randn(8, 300, generator=g, dtype=torch.float64) * scale
        assert torch.allclose(entmax15(long), entmax.entmax15(long, dim=-1), atol=1e-12)


@pytest.mark.parametrize("alpha", [1.1, 1.25, 1.5, 1.75, 2.0])
def test_entmax_bisect_matches_the_entmax_package(alpha, gen):
    z = rows(gen, 40, 33)
    ref = entmax.entmax_bisect(z, alpha, dim=-1, n_iter=200)
    assert torch.allclose(entmax_bisect(z, alpha), ref, atol=1e-12)


def test_alpha_entmax_exact_with_an_entry_at_the_edge_of_the_support(gen):
    # an entry with p ~ 1e-12..1e-8 makes f's curvature unbounded near the root for 1.5 < alpha < 2, where a search
    # that stops on a small step (rather than when s stops moving) can end short of the root
    for alpha in (1.6, 1.8, 1.95):
        z = rows(gen, 20, 12)
        d = alpha - 1
        # move one entry of each row to where its probability is eps: [d (x - s)]^(1/d) with the row's own threshold
        ref = entmax.entmax_bisect(z, alpha, dim=-1, n_iter=200)
        tau_x = z.max(-1, keepdim=True).values - (ref.max(-1, keepdim=True).values ** d) / d  # z where p would be 0
        eps = torch.logspace(-12, -8, 20, dtype=torch.float64).unsqueeze(-1)
        z = torch.cat([z, tau_x + eps ** d / d], -1)
        ref = entmax.entmax_bisect(z, alpha, dim=-1, n_iter=200)
        assert (ref[:, -1] > 0).all()
        assert torch.allclose(entmax_bisect(z, alpha), ref, atol=1e-12)


def test_alpha_one_is_softmax_and_two_is_sparsemax(gen):
    for dtype, tol in ((torch.float64, 1e-14), (torch.float32, 1e-6)):
        z = rows(gen, 30, 21).to(dtype)
        assert (entmax_bisect(z, 1.0) - torch.softmax(z, -1)).abs().max() < tol
        assert (entmax_bisect(z, 2.0) - sparsemax(z)).abs().max() < tol


def test_entmax_bisect_at_one_point_five_is_entmax15(gen):
    z = rows(gen, 30, 50)
    assert torch.allclose(entmax_bisect(z, 1.5), entmax15(z), atol=1e-12)


def test_exact_zeros_and_sparser_as_alpha_grows(gen):
    z = rows(gen, 200, 40)
    nnz = [(entmax_bisect(z, a) > 0).sum().item() for a in (1.0, 1.25, 1.5, 1.75, 2.0)]
    assert nnz[0] == z.numel()  # softmax: dense
    assert all(a >= b for a, b in zip(nnz, nnz[1:])) and nnz[-1] < nnz[1] < nnz[0]
    assert (entmax15(z) == 0).any()


def test_gradcheck_entmax15(gen):
    z = rows(gen, 4, 9).requires_grad_()
    assert torch.autograd.gradcheck(entmax15, (z,))


@pytest.mark.parametrize("alpha", [1.0, 1.3, 1.5, 1.9])
def test_gradcheck_entmax_bisect_scores(alpha, gen, backend):
    if backend == "triton" and alpha != 1.3:
        pytest.skip("one alpha is enough on the interpreted Triton path (a gradcheck takes ~20 s there)")
    z = rows(gen, 4, 9).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: entmax_bisect(t, alpha), (z,))


def test_gradcheck_entmax_bisect_alpha_per_row(gen):
    z = rows(gen, 5, 8).requires_grad_()
    a = (1 + torch.rand(5, 1, generator=gen, dtype=torch.float64) * 0.8 + 0.1).requires_grad_()
    assert torch.autograd.gradcheck(lambda t, al: entmax_bisect(t, al), (z, a))


def test_alpha_gradient_matches_the_entmax_package(gen):
    z = rows(gen, 6, 10)
    a = torch.full((6, 1), 1.4, dtype=torch.float64, requires_grad=True)
    a_ref = a.detach().clone().requires_grad_()
    w = torch.randn(6, 10, generator=gen, dtype=torch.float64)
    (entmax_bisect(z, a) * w).sum().backward()
    (entmax.entmax_bisect(z, a_ref, dim=-1, n_iter=200) * w).sum().backward()
    assert torch.allclose(a.grad, a_ref.grad, atol=1e-8)


def test_alpha_per_head_broadcasts_over_rows(gen):
    z = rows(gen, 2, 3, 4, 7)  # [batch, heads, queries, keys]
    alpha = torch.tensor([1.2, 1.5, 1.9], dtype=torch.float64).view(1, 3, 1, 1)
    p = entmax_bisect(z, alpha)
    for h, a in enumerate((1.2, 1.5, 1.9)):
        assert torch.allclose(p[:, h], entmax_bisect(z[:, h], a), atol=1e-13)


@pytest.mark.parametrize("fn", [entmax15, lambda t, dim=-1: entmax_bisect(t, 1.3, dim=dim)])
def test_other_dims(fn, gen):
    z = rows(gen, 4, 9, 3)
    assert torch.allclose(fn(z, dim=1), fn(z.transpose(1, 2)).transpose(1, 2), atol=1e-13)


@pytest.mark.parametrize("fn", [entmax15, lambda t: entmax_bisect(t, 1.5), lambda t: entmax_bisect(t, 1.2)])
def test_padding_with_neg_inf_changes_nothing_and_masked_rows_are_zero(fn, gen):
    z = rows(gen, 5, 8)
    padded = torch.cat([z, torch.full((5, 4), -math.inf, dtype=z.dtype)], -1)
    p = fn(padded)
    assert torch.equal(p[:, 8:], torch.zeros(5, 4, dtype=z.dtype))
    assert torch.allclose(p[:, :8], fn(z), atol=1e-13)
    masked = torch.full((3, 6), -math.inf, dtype=torch.float64, requires_grad=True)
    out = fn(masked)
    assert torch.equal(out, torch.zeros(3, 6, dtype=torch.float64))
    out.sum().backward()
    assert torch.equal(masked.grad, torch.zeros(3, 6, dtype=torch.float64))


@pytest.mark.parametrize("fn", [entmax15, lambda t: entmax_bisect(t, 1.5)])
@pytest.mark.parametrize("shift", [1e3, 1e6, -1e6])
def test_shift_invariant_at_any_magnitude(fn, shift, gen):
    z = (torch.round(rows(gen, 20, 16) * 8) / 8).float()  # multiples of 1/8: z + shift is exact in float32
    assert torch.equal(z + shift - shift, z)
    assert torch.allclose(fn(z + shift), fn(z), atol=1e-6)


@pytest.mark.parametrize("fn", [entmax15, lambda t: entmax_bisect(t, 1.5)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_computed_in_fp32(fn, dtype, gen):
    z = rows(gen, 10, 12).to(dtype)
    p = fn(z)
    assert p.dtype == dtype
    assert torch.allclose(p.float(), fn(z.float()).to(dtype).float())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        q = fn(z.float())
    assert q.dtype == torch.float32 and torch.allclose(q.sum(-1), torch.ones(10), atol=1e-5)


@pytest.mark.parametrize("fn", [entmax15, lambda t: entmax_bisect(t, 1.5)])
def test_empty_and_special_rows(fn):
    assert fn(torch.empty(0, 5)).shape == (0, 5)
    assert fn(torch.empty(3, 0)).shape == (3, 0)
    z = torch.tensor([[0.0, math.inf, math.inf, 1.0], [0.0, math.nan, 1.0, 2.0]])
    p = fn(z)
    assert torch.equal(p[0], torch.tensor([0.0, 0.5, 0.5, 0.0]))
    assert torch.isnan(p[1]).all()


def test_bad_alpha_is_refused():
    z = torch.zeros(2, 3)
    for bad in (0.5, 2.5, math.nan, math.inf, "x"):
        with pytest.raises(ValueError, match="alpha"):
            entmax_bisect(z, bad)


def test_exported_from_the_package():
    assert attnkit.entmax15 is entmax15 and attnkit.entmax_bisect is entmax_bisect


def test_a_wrong_shaped_alpha_tensor_is_refused_naming_both_shapes():
    """One alpha per row: a tensor that does not broadcast to the scores with ``dim`` of size 1 gets a message naming
    both shapes (it was torch's expand error); every shape that does broadcast still runs."""
    z = torch.randn(2, 3, 5)
    for good in (torch.full((2, 3, 1), 1.5), torch.full((3, 1), 1.3), torch.tensor(1.7)):
        assert entmax_bisect(z, good).shape == z.shape
    assert entmax_bisect(z, torch.full((2, 1, 5), 1.5), dim=1).shape == z.shape
    for bad in (torch.full((2, 3, 5), 1.5), torch.full((4, 1), 1.5), torch.full((1, 2, 3, 1), 1.5)):
        with pytest.raises(ValueError, match=r"alpha of shape .* broadcastable to \(2, 3, 1\) \(the scores' shape \(2, 3, 5\)"):
            entmax_bisect(z, bad)


@pytest.mark.parametrize("n_iter", [0, -5, 2.5, True, "10"])
def test_a_wrong_n_iter_is_refused_in_one_line(n_iter):
    with pytest.raises(ValueError, match="n_iter must be a whole number of bisection steps >= 1"):
        entmax_bisect(torch.randn(2, 5), 1.3, n_iter=n_iter)
