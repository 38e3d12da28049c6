"""alpha-entmax by bisection gives a distribution at scores of any magnitude (1e8 apart)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("alpha", [1.2, 1.5, 2.0])
def test_entmax_bisect_at_scores_of_large_magnitude_is_a_distribution(backend, alpha):
    """Scores 1e8 apart: the compiled kernel's candidate cut (max - 1/d, rounded to float) equalled the max, so no
    entry was kept and every probability was 0 (entmax_bisect at alpha != 1, without a word)."""
    import torch

    from attnkit import entmax15, entmax_bisect

    for dtype, scales in ((torch.float32, (1e8, 1e20, 1e37)), (torch.float64, (1e17, 1e100, 1e300))):
        for s in scales:
            x = torch.tensor([[s, 0.0, 2 * s], [2 * s, 2 * s, -s]], dtype=dtype)
            want = torch.tensor([[0.0, 0.0, 1.0], [0.5, 0.5, 0.0]], dtype=dtype)
            torch.testing.assert_close(entmax_bisect(x, alpha=alpha), want)
            torch.testing.assert_close(entmax15(x), want)
