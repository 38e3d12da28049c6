"""Second derivatives of the sparse maps: a double backward (gradient penalties, Hessian-vector
products) is right on every path, checked in float64 against finite differences (torch.autograd.gradgradcheck) at
points where the maps are sparse; and the Python API refuses settings the CLI refuses."""

import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import attnkit
from attnkit import entmax15, entmax_bisect, sparsegen_lin, sparsemax

#: the gradient tests run on the compiled kernel, the pure-torch path and the Triton kernels (interpreted on the CPU)
on_every_path = pytest.mark.usefixtures("backend")


def scores(gen, *shape):
    return (torch.randn(*shape, generator=gen, dtype=torch.float64) * 2).requires_grad_()


def sparse_but_not_one_hot(p):
    """The check is only worth something where some entries are 0 and some rows have several > 0."""
    zeros = (p == 0).sum().item()
    assert zeros > 0 and ((p > 0).sum(-1) > 1).any(), p


@pytest.mark.parametrize("name, fn", [
    ("entmax15", entmax15),
    ("entmax_bisect alpha 1.3", lambda z: entmax_bisect(z, 1.3)),
    ("entmax_bisect alpha 1.75", lambda z: entmax_bisect(z, 1.75)),
    ("sparsemax", sparsemax),
    ("sparsegen_lin lam -2", lambda z: sparsegen_lin(z, -2.0)),
])
@on_every_path
def test_second_derivatives_of_the_scores(name, fn, gen):
    z = scores(gen, 4, 7)
    sparse_but_not_one_hot(fn(z).detach())
    assert gradcheck(fn, (z,))
    assert gradgradcheck(fn, (z,)), name


@on_every_path
def test_second_derivatives_along_another_dim_and_with_masked_entries(gen):
    z = scores(gen, 3, 6, 2)
    mask = torch.zeros(3, 6, 2, dtype=torch.bool)
    mask[:, 4:, :] = True  # padding: -inf scores, as attention masks give

    def f(x):
        return entmax15(x.masked_fill(mask, float("-inf")), dim=1)

    assert gradgradcheck(f, (z,))
    assert gradgradcheck(lambda x: entmax_bisect(x.masked_fill(mask, float("-inf")), 1.4, dim=1), (z,))


@on_every_path
def test_second_derivatives_through_a_learned_alpha(gen):
    z = scores(gen, 3, 6)
    alpha = torch.tensor([[1.2], [1.5], [1.85]], dtype=torch.float64, requires_grad=True)

    def f(x, a):
        return entmax_bisect(x, a)

    sparse_but_not_one_hot(f(z, alpha).detach())
    assert gradcheck(f, (z, alpha))
    assert gradgradcheck(f, (z, alpha))


@on_every_path
def test_a_gradient_penalty_matches_finite_differences(gen):
    """What a user runs: the gradient's norm as a loss, differentiated again (create_graph=True)."""
    z = scores(gen, 2, 6)
    w = torch.randn(2, 6, generator=gen, dtype=torch.float64)

    def penalty(x):
        (g,) = torch.autograd.grad((entmax15(x) * w).sum(), x, create_graph=True)
        return (g**2).sum()

    (analytic,) = torch.autograd.grad(penalty(z), z)
    eps = 1e-6
    numeric = torch.zeros_like(z)
    for i in range(z.shape[0]):
        for j in range(z.shape[1]):
            up, down = z.detach().clone(), z.detach().clone()
            up[i, j] += eps
            down[i, j] -= eps
            numeric[i, j] = (penalty(up.requires_grad_()) - penalty(down.requires_grad_())).detach() / (2 * eps)
    assert analytic.abs().max() > 0
    assert torch.allclose(analytic, numeric, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(attention="softmax", lam=-8), "lam"),
    (dict(attention="sparsemax", lam=-2), "lam"),
    (dict(attention="entmax15", lam=0.5), "lam"),
    (dict(attention="sparsemax", alpha=1.2), "alpha"),
    (dict(attention="softmax", alpha=1.8), "alpha"),
])
def test_sparsify_refuses_a_setting_its_attention_has_not(kwargs, needle):
    from transformers import BertConfig, BertModel

    model = BertModel(BertConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=32))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError) as e:
        attnkit.sparsify(model, **kwargs)
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and needle in msg and kwargs["attention"] in msg, msg
    assert type(model).__name__ == "BertModel"  # left as it was
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_sparsify_still_takes_each_attentions_own_settings():
    from transformers import BertConfig, BertModel

    cfg = dict(vocab_size=40, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
               max_position_embeddings=32)
    assert attnkit.sparsify(BertModel(BertConfig(**cfg)), "sparsegen-lin", lam=-8).config.attnkit["lam"] == -8
    assert attnkit.sparsify(BertModel(BertConfig(**cfg))).config.attnkit["lam"] == -4  # the default lam
    assert attnkit.sparsify(BertModel(BertConfig(**cfg)), "entmax-alpha", alpha=1.2).config.attnkit["alpha"] == 1.2
    assert attnkit.sparsify(BertModel(BertConfig(**cfg)), "softmax").config.attnkit["attention"] == "softmax"
