"""attnkit: sparse, local and minimal self-attention for transformer encoders."""

from attnkit.maps import sparsegen_lin, sparsemax
from attnkit.modeling_attnkit import register as _register

_register()  # model_type "attnkit" in transformers' Auto classes, attnkit's attention in its registries
from attnkit.modeling import sparsify  # noqa: E402

__version__ = "0.1.0"

__all__ = ["sparsemax", "sparsegen_lin", "sparsify", "__version__"]
