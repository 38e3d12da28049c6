"""Properties of the sparse maps (sparsemax, sparsegen-lin)."""

import math

import pytest
import torch

from attnkit import sparsegen_lin, sparsemax


def reference_sparsemax(z: torch.Tensor) -> torch.Tensor:
    """Plain sort-based sparsemax along the last dim (Martins & Astudillo 2016), float64."""
    z = z.double()
    zs, _ = torch.sort(z, dim=-1, descending=True)
    cs = zs.cumsum(-1)
    r = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype)
    cond = 1 + r * zs > cs
    k = cond.sum(-1, keepdim=True)
    tau = (cs.gather(-1, k - 1) - 1) / k
    return (z - tau).clamp(min=0)


#: every property holds for the compiled kernel, the pure-torch path and the Triton kernels (interpreted)
pytestmark = pytest.mark.usefixtures("backend")


@pytest.mark.parametrize("n", [1, 2, 5, 16, 17, 64, 130])
@pytest.mark.parametrize("scale", [0.1, 1.0, 10.0])
def test_matches_sort_reference(n, scale, gen):
    z = torch.randn(8, 7, n, generator=gen) * scale
    p = sparsemax(z)
    ref = reference_sparsemax(z)
    assert torch.allclose(p.double(), ref, atol=1e-6)
    assert torch.allclose(p.sum(-1), torch.ones(8, 7), atol=1e-5)
    assert (p >= 0).all()


def test_topk_only_changes_speed(gen):
    # wide, flat rows have big supports: the fast path must fall back and stay exact
    z = torch.randn(50, 300, generator=gen) * 0.01
    z[:25] *= 1000
    for k in (0, 1, 4, 16, 299, 400):
        assert torch.allclose(sparsemax(z, topk=k).double(), reference_sparsemax(z), atol=1e-6)


def test_exact_zeros_and_dim(gen):
    z = torch.randn(4, 10, 3, generator=gen) * 5
    p = sparsemax(z, dim=1)
    assert (p == 0).any(), "sparsemax should give exact zeros on spread-out scores"
    assert torch.allclose(p.sum(1), torch.ones(4, 3), atol=1e-6)
    assert torch.allclose(p, reference_sparsemax(z.transpose(1, 2)).transpose(1, 2).float(), atol=1e-6)


def test_gradcheck_sparsemax(gen):
    z = torch.randn(3, 4, 9, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(sparsemax, (z,))


@pytest.mark.parametrize("lam", [-6.0, -1.0, 0.0, 0.5])
def test_gradcheck_sparsegen_lin(lam, gen, backend):
    if backend == "triton" and lam != 0.5:
        pytest.skip("one lam is enough on the interpreted Triton path (a gradcheck takes ~20 s there)")
    z = torch.randn(3, 5, 7, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: sparsegen_lin(x, lam), (z,))


def test_gradcheck_with_masked_entries(gen):
    z = torch.randn(4, 6, dtype=torch.float64, generator=gen)
    mask = torch.zeros(4, 6, dtype=torch.bool)
    mask[:, 4:] = True
    z = z.masked_fill(mask, -math.inf).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: sparsegen_lin(x, -2.0), (z,))


def test_backward_is_closed_form(gen):
    z = torch.randn(5, 12, dtype=torch.float64, generator=gen, requires_grad=True)
    lam = -3.0
    p = sparsegen_lin(z, lam)
    g = torch.randn_like(p)
    (grad,) = torch.autograd.grad(p, z, g)
    s = (p > 0).double()
    expected = s * (g - (g * s).sum(-1, keepdim=True) / s.sum(-1, keepdim=True)) / (1 - lam)
    assert torch.allclose(grad, expected, atol=1e-12)


@pytest.mark.parametrize("lam", [-8.0, -4.0, -0.5, 0.0, 0.3, 0.9])
def test_sparsegen_is_scaled_sparsemax(lam, gen):
    z = torch.randn(6, 20, generator=gen)
    assert torch.allclose(sparsegen_lin(z, lam), sparsemax(z / (1 - lam)), atol=1e-6)


def test_lam_to_one_tends_to_argmax(gen):
    z = torch.randn(10, 15, generator=gen)
    p = sparsegen_lin(z, 1 - 1e-6)
    onehot = torch.nn.functional.one_hot(z.argmax(-1), 15).float()
    assert torch.equal(p, onehot)


def test_support_shrinks_as_lam_grows(gen):
    z = torch.randn(32, 40, generator=gen)
    sizes = [(sparsegen_lin(z, lam) > 0).sum(-1) for lam in (-8.0, -4.0, -2.0, 0.0, 0.5, 0.9)]
    for a, b in zip(sizes, sizes[1:]):
        assert (b <= a).all()
    assert sizes[0].float().mean() > sizes[-1].float().mean()


def test_lam_validation():
    z = torch.randn(2, 3)
    for bad in (1.0, 1.5, math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError, match="lam"):
            sparsegen_lin(z, bad)
    with pytest.raises(ValueError, match=r"2\.0"):
        sparsegen_lin(z, 2.0)


@pytest.mark.parametrize("fn", [sparsemax, lambda z: sparsegen_lin(z, -3.0)])
def test_padding_with_neg_inf_changes_nothing(fn, gen):
    z = torch.randn(5, 8, generator=gen)
    padded = torch.cat([z, torch.full((5, 6), -math.inf)], dim=-1)
    p, pp = fn(z), fn(padded)
    assert torch.equal(pp[:, 8:], torch.zeros(5, 6))
    assert torch.allclose(pp[:, :8], p, atol=1e-7)
    # gradients of the real entries are unchanged too, padded entries get exactly 0
    zr = z.clone().requires_grad_(True)
    pr = padded.clone().requires_grad_(True)
    g = torch.randn(5, 8, generator=gen)
    fn(zr).mul(g).sum().backward()
    fn(pr)[:, :8].mul(g).sum().backward()
    assert torch.allclose(pr.grad[:, :8], zr.grad, atol=1e-6)
    assert torch.equal(pr.grad[:, 8:], torch.zeros(5, 6))


@pytest.mark.parametrize("fn", [sparsemax, lambda z: sparsegen_lin(z, -3.0)])
def test_fully_masked_row_gives_zeros_not_nan(fn):
    z = torch.randn(3, 5, dtype=torch.float64)
    z[1] = -math.inf
    z.requires_grad_(True)
    p = fn(z)
    assert torch.equal(p[1], torch.zeros(5, dtype=torch.float64))
    assert not torch.isnan(p).any()
    p.sum().backward()
    assert torch.equal(z.grad[1], torch.zeros(5, dtype=torch.float64))
    assert not torch.isnan(z.grad).any()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_is_computed_in_fp32(dtype, gen):
    z = torch.randn(4, 33, generator=gen) * 3
    p = sparsegen_lin(z.to(dtype), -2.0)
    assert p.dtype == dtype
    ref = sparsegen_lin(z.to(dtype).float(), -2.0)
    assert torch.allclose(p.float(), ref, atol=1e-2)
    zh = z.to(dtype).requires_grad_(True)
    sparsemax(zh).sum().backward()
    assert zh.grad.dtype == dtype


def test_runs_under_autocast(gen):
    z = torch.randn(2, 3, 16, generator=gen, requires_grad=True)
    w = torch.randn(16, 16, generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = z @ w  # bf16 under autocast
        p = sparsegen_lin(scores, -1.0)
    assert p.dtype == torch.bfloat16
    assert torch.allclose(p.float().sum(-1), torch.ones(2, 3), atol=1e-2)
    p.float().sum().backward()
    assert z.grad is not None and torch.isfinite(z.grad).all()


def test_bad_input_types():
    with pytest.raises(TypeError, match="floating-point"):
        sparsemax(torch.arange(5))
    with pytest.raises(TypeError, match="torch.Tensor"):
        sparsemax([1.0, 2.0])


def test_kernel_and_torch_paths_agree(gen):
    from attnkit.attention import kernels

    if kernels.backend() != "cpp":
        pytest.skip(kernels.backend_reason())
    z = torch.randn(64, 12, 50, generator=gen) * 4
    z[:, :, 40:] = -math.inf
    z[0, 0] = -math.inf
    g = torch.randn_like(z)
    out = {}
    for name, kf in (("cpp", kernels.kernel_applies), ("torch", lambda t: False)):
        old = kernels.kernel_applies
        kernels.kernel_applies = kf
        try:
            x = z.clone().requires_grad_(True)
            p = sparsegen_lin(x, -1.5)
            p.backward(g)
            out[name] = (p.detach(), x.grad)
        finally:
            kernels.kernel_applies = old
    assert torch.equal(out["cpp"][0] > 0, out["torch"][0] > 0)
    assert torch.allclose(out["cpp"][0], out["torch"][0], atol=1e-6)
    assert torch.allclose(out["cpp"][1], out["torch"][1], atol=1e-6)


def test_fallback_when_kernel_is_disabled():
    import subprocess
    import sys

    code = (
        "import torch, attnkit\n"
        "from attnkit.attention import kernels\n"
        "p = attnkit.sparsemax(torch.tensor([[1.0, 0.5, -3.0]]))\n"
        "assert kernels.backend() == 'torch', kernels.backend()\n"
        "print(kernels.backend_reason(), p.tolist())\n"
    )
    env = dict(__import__("os").environ, ATTNKIT_KERNEL="torch")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "ATTNKIT_KERNEL=torch" in r.stdout and "[[0.75, 0.25, 0.0]]" in r.stdout


@pytest.mark.parametrize("rows", [1, 3, 5, 130, 259])
def test_row_blocks_and_tails_with_masked_rows(rows, gen):
    # the kernel takes rows four at a time, with the leftovers one by one, and a fully
    # masked row may sit anywhere in a block: every row must still be exact
    z = torch.randn(rows, 37, generator=gen) * 3
    z[torch.rand(rows, 37, generator=gen) < 0.3] = -math.inf
    dead = torch.rand(rows, generator=gen) < 0.2
    z[dead] = -math.inf
    for lam in (0.0, -4.0, 0.5):
        p = sparsegen_lin(z, lam)
        ref = reference_sparsemax(z[~dead] / (1 - lam))
        assert torch.allclose(p[~dead].double(), ref, atol=1e-6)
        assert (p[dead] == 0).all() and not torch.isnan(p).any()



def test_nan_rows_come_out_nan(gen):
    # a NaN score anywhere in a row poisons that row (both paths), other rows are untouched
    z = torch.randn(6, 9, generator=gen)
    z[1, 3] = math.nan
    z[4] = math.nan
    z[5, :4] = -math.inf
    z[5, 7] = math.nan
    p = sparsegen_lin(z, -1.0)
    bad = torch.tensor([False, True, False, False, True, True])
    assert torch.isnan(p[bad]).all()
    assert torch.allclose(p[~bad].double(), reference_sparsemax(z[~bad] / 2.0), atol=1e-6)


@pytest.mark.parametrize("name", ["sparsemax", "sparsegen_lin", "entmax15", "entmax_bisect", "learned_alpha"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_nan_rows_get_a_nan_gradient_and_other_rows_theirs(name, dtype, gen):
    """A NaN row's gradient was 0 in sparsemax, sparsegen-lin and alpha-entmax (its support is empty), hiding the NaN
    from what lies below (sweep s23c; 1.5-entmax's torch path too, which the test's old ``ATTNKIT_KERNEL=torch``,
    read at import, never reached). The kernels' backwards now write the NaN
    themselves (no extra pass over the gradient), alpha's gradient too; every path (the ``backend`` fixture). Other
    rows keep their exact gradient."""
    import attnkit

    alpha = torch.tensor([[1.3], [1.6], [1.8], [1.2]], dtype=dtype)
    z = torch.randn(4, 7, generator=gen, dtype=dtype)
    w = torch.randn(4, 7, generator=gen, dtype=dtype)
    z[1, 2] = math.nan
    ok = torch.tensor([True, False, True, True])

    def grads(z, w, alpha):
        z = z.clone().requires_grad_()
        a = alpha.clone().requires_grad_()
        p = attnkit.entmax_bisect(z, a) if name == "learned_alpha" else getattr(attnkit, name)(z)
        (p * w).sum().backward()
        return z.grad, a.grad

    gz, ga = grads(z, w, alpha)
    clean_gz, clean_ga = grads(z[ok], w[ok], alpha[ok])
    assert torch.isnan(gz[1]).all()
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert torch.allclose(gz[ok], clean_gz, atol=tol)
    if name == "learned_alpha":
        assert torch.isnan(ga[1]).all()
        assert torch.allclose(ga[ok], clean_ga, atol=tol * 10)


# ----------------------------------------------------------------------------- large magnitudes


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shift", [0.0, 100.0, 1e4, 1e6])
@pytest.mark.parametrize("lam", [0.0, -4.0, 0.5, 1 - 1e-6])
def test_matches_entmax_at_large_shifts(dtype, shift, lam, gen):
    entmax = pytest.importorskip("entmax")
    z = (torch.randn(200, 64, generator=gen, dtype=torch.float64) * 3).to(dtype) + shift
    p = sparsegen_lin(z, lam)
    ref = entmax.sparsemax(z.double() / (1 - lam), dim=-1)  # entmax subtracts each row's max first
    assert torch.allclose(p.double(), ref, atol=1e-5 if dtype == torch.float32 else 1e-9), (p.double() - ref).abs().max()
    assert torch.allclose(p.double().sum(-1), torch.ones(200, dtype=torch.float64), atol=1e-5)


@pytest.mark.parametrize("shift", [100.0, 1e4, 1e6])
def test_shift_invariant_in_float64(shift, gen):
    z = torch.randn(300, 64, generator=gen, dtype=torch.float64)
    for lam in (0.0, -4.0):
        assert torch.allclose(sparsegen_lin(z + shift, lam), sparsegen_lin(z, lam), atol=1e-9)


def test_scores_of_any_magnitude():
    assert torch.equal(sparsemax(torch.tensor([1e30, 0.0])), torch.tensor([1.0, 0.0]))
    assert torch.equal(sparsemax(torch.tensor([0.0, -3e38])), torch.tensor([1.0, 0.0]))
    assert torch.equal(sparsemax(torch.tensor([1e16, 0.0], dtype=torch.float64)), torch.tensor([1.0, 0.0], dtype=torch.float64))
    assert torch.allclose(sparsemax(torch.tensor([[1e7, 1e7, 1e7]])), torch.full((1, 3), 1 / 3))
    p = sparsegen_lin(torch.tensor([0.3, 0.2, -0.1]), lam=1 - 1e-8)
    assert torch.equal(p, torch.tensor([1.0, 0.0, 0.0]))


def test_plus_inf_entries_share_the_mass():
    z = torch.tensor([[math.inf, 0.0, math.inf, -math.inf], [math.inf, 5.0, 1.0, 2.0], [1.0, 0.0, -math.inf, -math.inf]])
    p = sparsemax(z)
    assert torch.equal(p[0], torch.tensor([0.5, 0.0, 0.5, 0.0]))
    assert torch.equal(p[1], torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert torch.allclose(p[2], torch.tensor([1.0, 0.0, 0.0, 0.0]))
    assert not torch.isnan(sparsegen_lin(z, -4.0)).any()
