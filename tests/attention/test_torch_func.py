"""The sparse maps work under torch.func's transforms: vmap equals a loop over the batch, jacrev/jacfwd/grad equal
autograd's, alpha's derivatives are right, and what the maps cannot take is refused in one line."""

import re

import pytest
import torch

import attnkit
from attnkit.attention.entmax import entmax15, entmax_bisect

MAPS = {"sparsemax": attnkit.sparsemax, "sparsegen-lin": lambda v: attnkit.sparsegen_lin(v, 0.3), "entmax15": entmax15,
        "entmax-bisect": lambda v: entmax_bisect(v, 1.3)}


def _scores(rows: int = 3, n: int = 6) -> torch.Tensor:
    z = torch.randn(rows, n, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * 2
    z[0, 1] = -torch.inf  # a masked key
    return z


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("name", list(MAPS))
def test_vmap_equals_a_loop_over_the_batch(name):
    f, z = MAPS[name], _scores()
    ref = torch.stack([f(r) for r in z])
    torch.testing.assert_close(torch.func.vmap(f)(z), ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.func.vmap(f, in_dims=1, out_dims=1)(z.T.contiguous()), ref.T, rtol=0, atol=1e-12)
    long = torch.randn(2, 40, dtype=torch.float64, generator=torch.Generator().manual_seed(2))  # rows longer than TOPK
    torch.testing.assert_close(torch.func.vmap(f)(long), f(long), rtol=0, atol=1e-12)


@pytest.mark.usefixtures("backend")
@pytest.mark.parametrize("name", list(MAPS))
def test_jacobians_and_grad_equal_autograds(name):
    f, z = MAPS[name], _scores()
    for row in z:
        want = torch.autograd.functional.jacobian(f, row)
        torch.testing.assert_close(torch.func.jacrev(f)(row), want, rtol=0, atol=1e-10)
    per_row = torch.stack([torch.autograd.functional.jacobian(f, r) for r in z])
    torch.testing.assert_close(torch.func.vmap(torch.func.jacrev(f))(z), per_row, rtol=0, atol=1e-10)
    w = torch.randn(z.shape[-1], dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    x = z[1].clone().requires_grad_()
    (f(x) * w).sum().backward()
    torch.testing.assert_close(torch.func.grad(lambda v: (f(v) * w).sum())(z[1]), x.grad, rtol=0, atol=1e-12)


def test_alpha_derivatives_under_torch_func():
    z = _scores()[1]
    a = torch.tensor([1.4], dtype=torch.float64)
    want = torch.autograd.functional.jacobian(lambda al: entmax_bisect(z, al), a)
    torch.testing.assert_close(torch.func.jacrev(lambda al: entmax_bisect(z, al))(a), want, rtol=0, atol=1e-10)
    alphas = torch.tensor([[1.2], [1.5], [1.9]], dtype=torch.float64)
    torch.testing.assert_close(torch.func.vmap(lambda al: entmax_bisect(z, al))(alphas),
                               torch.stack([entmax_bisect(z, al) for al in alphas]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", list(MAPS))
def test_what_the_maps_cannot_take_is_refused_in_one_line(name):
    f = {"sparsemax": attnkit.sparsemax, "sparsegen-lin": lambda v, dim=-1: attnkit.sparsegen_lin(v, 0.3, dim=dim),
         "entmax15": entmax15, "entmax-bisect": lambda v, dim=-1: entmax_bisect(v, torch.full((3, 1), 1.3), dim=dim)}[name]
    z = torch.randn(3, 5)
    with pytest.raises(TypeError, match=re.escape("dim must be one int (the dimension whose entries sum to 1), got (0, 1)")):
        f(z, dim=(0, 1))
    with pytest.raises(TypeError, match=re.escape("dim must be one int (the dimension whose entries sum to 1), got True")):
        f(z, dim=True)  # a bool was read as dim 1
    with pytest.raises(TypeError, match="scores is a sparse_coo tensor: the sparse maps take dense"):
        f(z.to_sparse())
    with pytest.raises(TypeError, match="scores is a nested tensor: the sparse maps take dense"):
        f(torch.nested.nested_tensor([torch.randn(2, 5), torch.randn(3, 5)]))
    meta = f(torch.empty(3, 5, device="meta"))
    assert meta.device.type == "meta" and meta.shape == (3, 5)


@pytest.mark.parametrize("topk", [None, 1.5, True, "4", -1])
def test_a_topk_that_is_not_a_count_is_refused_on_every_path(topk, monkeypatch):
    """topk (how many entries are sorted first) changes speed only: the compiled path ignored a wrong one, the torch
    path failed in torch's words; now both refuse it naming topk, and every count gives the same map."""
    from attnkit.attention import kernels
    from attnkit.errors import UserError

    z = torch.randn(3, 7, dtype=torch.float64)
    for mode in ("auto", "torch"):
        monkeypatch.setattr(kernels, "MODE", mode)
        for f in (attnkit.sparsemax, lambda v, topk: attnkit.sparsegen_lin(v, 0.3, topk=topk)):
            with pytest.raises(UserError, match=re.escape(f"topk must be a whole number >= 0 (how many entries are sorted first; 0: all), got {topk!r}")):
                f(z, topk=topk)
        assert all(torch.equal(attnkit.sparsemax(z, topk=k), attnkit.sparsemax(z)) for k in (0, 1, 3, 7, 100))
