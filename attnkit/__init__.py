"""attnkit: sparse, local and minimal self-attention for transformer encoders."""

from attnkit.maps import sparsegen_lin, sparsemax

__version__ = "0.1.0"

__all__ = ["sparsemax", "sparsegen_lin", "__version__"]
