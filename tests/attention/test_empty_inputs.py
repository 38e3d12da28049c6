"""The sparse maps take empty tensors and return empty tensors of the same shape."""

import pytest
import torch

from attnkit import sparsegen_lin, sparsemax

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("shape", [(0,), (0, 5), (3, 0), (2, 0, 4)])
def test_maps_on_empty_tensors_return_empty_tensors(shape):
    z = torch.empty(*shape)
    for fn in (sparsemax, lambda t: sparsegen_lin(t, -2.0), lambda t: torch.softmax(t, -1)):
        p = fn(z)
        assert p.shape == z.shape and p.dtype == z.dtype


@pytest.mark.parametrize("name", ["sparsemax", "sparsegen_lin", "entmax15", "entmax_bisect"])
def test_float8_scores_are_refused_in_one_line(name):
    import attnkit

    x = torch.randn(3, 4).to(torch.float8_e4m3fn)
    with pytest.raises(TypeError, match=r"^scores are float8_e4m3fn: the sparse maps take float16, bfloat16, float32 or float64"):
        getattr(attnkit, name)(x)
