"""No host reads, no opaque calls: every map and the whole attention function compile with
torch.compile(fullgraph=True) and give the eager result, forward and backward, on the compiled CPU kernel (a torch
custom op) and on the pure-torch path; a tiny BERT with attnkit attention runs forward and backward on `meta`."""

import pytest
import torch

from attnkit import entmax15, entmax_bisect, sparsegen_lin, sparsemax
from attnkit.attention import kernels
from attnkit.attention.forward import attnkit_attention_forward
from attnkit.attention.normalisers import BUILTIN_NAMES
from attnkit.attention.spec import AttentionSpec
from attnkit.models.build import build_classifier

pytestmark = pytest.mark.slow

MAPS = {
    "sparsemax": lambda t: sparsemax(t),
    "sparsegen-lin": lambda t: sparsegen_lin(t, -2.0),
    "entmax15": lambda t: entmax15(t),
    "entmax_bisect": lambda t: entmax_bisect(t, 1.3),
    "entmax_bisect per head": lambda t: entmax_bisect(t, torch.tensor([1.2, 1.5, 1.9]).view(1, 3, 1, 1)),
}


@pytest.fixture(params=["cpp", "torch"])
def backend(request, monkeypatch):
    if request.param == "torch":
        monkeypatch.setattr(kernels, "kernel_applies", lambda t: False)
    elif kernels.backend() != "cpp":
        pytest.skip(f"compiled kernel not available here: {kernels.backend_reason()}")
    torch._dynamo.reset()
    yield request.param
    torch._dynamo.reset()


def scores():
    g = torch.Generator().manual_seed(0)
    z = torch.randn(2, 3, 6, 6, generator=g) * 3
    z[0, 0, 0, 4:] = float("-inf")  # masked keys
    z[1, 2, 3] = float("-inf")  # a fully masked row
    return z, torch.randn(2, 3, 6, 6, generator=g)


@pytest.mark.parametrize("name", list(MAPS))
def test_each_map_compiles_whole_and_matches_eager(backend, name):
    f = MAPS[name]
    z, g = scores()
    x1, x2 = z.clone().requires_grad_(), z.clone().requires_grad_()
    p1 = f(x1)
    p1.backward(g)
    p2 = torch.compile(f, fullgraph=True, backend="aot_eager")(x2)  # fullgraph: a host read or opaque call fails here
    p2.backward(g)
    assert torch.allclose(p1, p2, atol=1e-6) and torch.equal(p1 == 0, p2 == 0)
    assert torch.allclose(x1.grad, x2.grad, atol=1e-5)


SPECS = [AttentionSpec("softmax"), AttentionSpec("sparsemax", blur="value"), AttentionSpec("sparsegen-lin", -2.0, blur="context"),
         AttentionSpec("sparsegen-lin", -2.0, learned="lam"), AttentionSpec("entmax15"), AttentionSpec("entmax15", alpha_mix=0.5),
         AttentionSpec("entmax-alpha", alpha=1.3, learned="alpha"), AttentionSpec("taylor")]


def test_every_normaliser_is_covered():
    assert {s.attention for s in SPECS} == set(BUILTIN_NAMES)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_the_attention_function_compiles_whole(tiny_bert, backend, spec):
    module = build_classifier(tiny_bert, 2, spec).bert.encoder.layer[0].attention.self
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 4, 7, 8, generator=g) for _ in range(3))
    mask = torch.ones(2, 1, 7, 7, dtype=torch.bool)
    mask[1, :, :, 5:] = False  # padding

    def f(q):
        return attnkit_attention_forward(module, q, k, v, mask)[0]

    q1, q2 = q.clone().requires_grad_(), q.clone().requires_grad_()
    a = f(q1)
    gout = torch.randn(a.shape, generator=g)
    a.backward(gout)
    b = torch.compile(f, fullgraph=True, backend="aot_eager")(q2)
    b.backward(gout)
    assert torch.allclose(a, b, atol=1e-5) and torch.allclose(q1.grad, q2.grad, atol=1e-4)


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.describe())
def test_a_model_runs_forward_and_backward_on_meta(tiny_bert, spec):
    """Shapes and devices only: a tensor made on the wrong device, or a read of a value on the host, fails on meta."""
    model = build_classifier(tiny_bert, 2, spec).to("meta")
    ids = torch.randint(5, 40, (2, 7), device="meta")
    out = model(input_ids=ids, attention_mask=torch.ones(2, 7, dtype=torch.long, device="meta"),
                labels=torch.zeros(2, dtype=torch.long, device="meta"), output_attentions=True)
    out.loss.backward()
    assert out.logits.device.type == "meta" and out.logits.shape == (2, 2)
    assert all(a.shape == (2, 4, 7, 7) for a in out.attentions)
