"""The attention composition and its registration inside Hugging Face models.

An attention layer here is a composition of

    scores     = (x W_q)(x W_k)^T * scaling (+ padding mask)      score projection (the model's own)
    weights    = normaliser(scores)                               softmax | sparsemax | sparsegen-lin
    output     = weights @ (x W_v)

Each paper is a configuration of those pieces, held in an :class:`AttentionSpec`. For a
Hugging Face encoder the spec is stored in the model config as ``config.attnkit`` (a plain
dict, so it is saved in ``config.json``) and the model runs with
``attn_implementation="attnkit"``, which :func:`register` adds to transformers'
``AttentionInterface`` *and* ``AttentionMaskInterface``. Without the mask registration
transformers builds no padding mask for an unknown implementation name and padding is
silently attended to.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable

import torch
from torch import nn

from attnkit.maps import check_lam, sparsegen_lin, sparsemax

ATTN_IMPLEMENTATION = "attnkit"
CONFIG_KEY = "attnkit"


def _softmax(scores: torch.Tensor, spec: "AttentionSpec") -> torch.Tensor:
    p = torch.softmax(scores, dim=-1, dtype=torch.float32)
    # a fully masked row (all -inf) gives NaN in softmax: make it zeros like the sparse maps
    p = torch.nan_to_num(p, nan=0.0)
    return p.to(scores.dtype)


def _taylor(scores: torch.Tensor, spec: "AttentionSpec") -> torch.Tensor:
    """Taylor-softmax (de Brébisson & Vincent 2015): (1 + z + z^2/2) normalised over the row.

    1 + z + z^2/2 >= 1/2 for every finite z, so every unmasked entry gets a positive weight;
    -inf (masked) entries get exactly 0 and a fully masked row gives zeros (never NaN).
    """
    dtype = torch.promote_types(scores.dtype, torch.float32)
    masked = torch.isneginf(scores)
    z = scores.to(dtype).masked_fill(masked, 0.0)
    num = (1.0 + z + 0.5 * z * z).masked_fill(masked, 0.0)
    den = num.sum(-1, keepdim=True).clamp_min(torch.finfo(dtype).tiny)  # only a fully masked row is clamped
    return (num / den).to(scores.dtype)


def _sparsemax(scores: torch.Tensor, spec: "AttentionSpec") -> torch.Tensor:
    return sparsemax(scores, dim=-1)


def _sparsegen_lin(scores: torch.Tensor, spec: "AttentionSpec") -> torch.Tensor:
    return sparsegen_lin(scores, spec.lam, dim=-1)


#: name -> fn(scores [..., Lk], spec) -> weights [..., Lk]; each row sums to 1 (or is all 0 if fully masked)
NORMALISERS: dict[str, Callable[[torch.Tensor, "AttentionSpec"], torch.Tensor]] = {
    "softmax": _softmax,
    "taylor": _taylor,
    "sparsemax": _sparsemax,
    "sparsegen-lin": _sparsegen_lin,
}


#: normalisers whose weights are never exactly 0 on unmasked entries
DENSE_NORMALISERS = ("softmax", "taylor")


@dataclass(frozen=True)
class AttentionSpec:
    """What replaces softmax: the normaliser and its parameter.

    ``attention`` is one of :data:`NORMALISERS`; ``lam`` (< 1) only matters for
    sparsegen-lin (SSAF uses the same ``lam`` in every layer and head).
    """

    attention: str = "softmax"
    lam: float = 0.0

    def __post_init__(self):
        name = str(self.attention).lower().replace("_", "-")
        if name == "sparsegen":
            name = "sparsegen-lin"
        if name not in NORMALISERS:
            raise ValueError(f"unknown attention {self.attention!r}: expected one of {', '.join(NORMALISERS)}")
        object.__setattr__(self, "attention", name)
        object.__setattr__(self, "lam", check_lam(self.lam))

    @property
    def is_sparse(self) -> bool:
        return self.attention not in DENSE_NORMALISERS

    def normalise(self, scores: torch.Tensor) -> torch.Tensor:
        """Attention weights from masked scores, along the last dim."""
        return NORMALISERS[self.attention](scores, self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AttentionSpec":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(
                f"unknown attention setting(s) {sorted(unknown)} in config '{CONFIG_KEY}': "
                f"this attnkit knows {sorted(known)}; was the checkpoint made by a newer attnkit?"
            )
        return cls(**d)

    def describe(self) -> str:
        return f"sparsegen-lin (lam={self.lam:g})" if self.attention == "sparsegen-lin" else self.attention


def spec_of(config) -> AttentionSpec:
    """The :class:`AttentionSpec` stored in a transformers config (softmax if none)."""
    d = getattr(config, CONFIG_KEY, None)
    if d is None:
        return AttentionSpec()
    if isinstance(d, AttentionSpec):
        return d
    return AttentionSpec.from_dict(dict(d))


def apply_spec(config, spec: AttentionSpec) -> None:
    """Store ``spec`` in ``config`` and make the model run through attnkit's attention.

    ``attn_implementation`` is also written as a plain attribute so that it is saved in
    ``config.json``: a checkpoint made here then never loads as a softmax model in a plain
    transformers install; it fails there with 'attn_implementation="attnkit" is not supported'.
    """
    setattr(config, CONFIG_KEY, spec.to_dict())
    config.attn_implementation = ATTN_IMPLEMENTATION
    config._attn_implementation = ATTN_IMPLEMENTATION


def _mask_scores(scores: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Apply a transformers attention mask as -inf on the masked keys."""
    if attention_mask is None:
        return scores
    if attention_mask.dtype == torch.bool:  # True = attend
        return scores.masked_fill(~attention_mask, -math.inf)
    # additive float mask (0 or a very negative number): make 'very negative' exactly -inf
    neg = attention_mask <= torch.finfo(attention_mask.dtype).min / 2
    return (scores + attention_mask).masked_fill(neg, -math.inf)


def attnkit_attention_forward(
    module: nn.Module,
    query: torch.Tensor,  # [B, H, Lq, D]
    key: torch.Tensor,  # [B, H, Lk, D]
    value: torch.Tensor,  # [B, H, Lk, D]
    attention_mask: torch.Tensor | None,  # bool [B, 1, Lq, Lk] (True = attend), or additive float, or None
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers attention function: returns (output [B, Lq, H, D], weights [B, H, Lq, Lk])."""
    spec = spec_of(module.config)
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling  # [B, H, Lq, Lk]
    scores = _mask_scores(scores, attention_mask)
    weights = spec.normalise(scores)
    dropped = nn.functional.dropout(weights, p=dropout, training=module.training)
    out = torch.matmul(dropped, value)  # [B, H, Lq, D]
    return out.transpose(1, 2).contiguous(), weights


_registered = False


def register() -> None:
    """Register ``attn_implementation="attnkit"`` for attention *and* masks (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(ATTN_IMPLEMENTATION, attnkit_attention_forward)
    # boolean masks (True = attend) that _mask_scores turns into -inf
    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, sdpa_mask)
    _registered = True
    import attnkit.mini  # noqa: F401  registers MiniBERT with the Auto classes
