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
