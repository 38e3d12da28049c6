"""MiniBERT's configuration (:class:`MiniBertConfig`), its shape as one value (:class:`MiniShape`) and
:func:`make_config`; the model itself is :mod:`attnkit.models.mini`."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PretrainedConfig

from attnkit.attention.names import KINDS
from attnkit.attention.spec import AttentionSpec, apply_spec
from attnkit.errors import UserError

MODEL_TYPE = "attnkit-mini"
SCORE_SCALES = ("none", "sqrt")
HEAD_MODES = ("split", "full")


class MiniBertConfig(PretrainedConfig):
    """Configuration of a MiniBERT model (defaults: the paper's 1 layer x 1 head, d = 32, MiniSA).

    ``initializer_range`` is the std of the token embeddings at init (1.0: the scale of the
    sinusoidal positions); linear layers use PyTorch's default (Kaiming-uniform) init.
    """

    model_type = MODEL_TYPE

    def __init__(
        self,
        vocab_size: int = 2000,
        hidden_size: int = 32,
        num_hidden_layers: int = 1,
        num_attention_heads: int = 1,
        attention_kind: str = "sa",
        max_position_embeddings: int = 512,
        head_hidden_size: int | None = None,
        score_scale: str | None = None,
        head_mode: str = "split",
        scale_scores: bool | None = None,
        residual: bool = False,
        dropout: float = 0.0,
        initializer_range: float = 1.0,
        pad_token_id: int = 0,
        **kwargs,
    ):
        kind = str(attention_kind).lower()
        if kind not in KINDS:
            raise UserError(f"attention_kind {attention_kind!r}: expected one of {', '.join(KINDS)} (MiniSA, MiniSSA, MiniNTA)")
        for name, v in (("hidden_size", hidden_size), ("num_hidden_layers", num_hidden_layers),
                        ("num_attention_heads", num_attention_heads), ("vocab_size", vocab_size)):
            if int(v) < 1:
                raise UserError(f"{name} must be a positive integer, got {v}")
        if score_scale is None:  # checkpoints written before score_scale carry scale_scores (default True)
            score_scale = "none" if scale_scores is False else "sqrt"
        if score_scale not in SCORE_SCALES:
            raise UserError(f"score_scale {score_scale!r}: expected one of {', '.join(SCORE_SCALES)} (none = the paper's bare dot product)")
        if scale_scores is not None and bool(scale_scores) != (score_scale == "sqrt"):
            raise UserError(f"score_scale {score_scale!r} contradicts scale_scores={scale_scores}")
        if head_mode not in HEAD_MODES:
            raise UserError(f"head_mode {head_mode!r}: expected one of {', '.join(HEAD_MODES)}")
        if head_mode == "split" and hidden_size % num_attention_heads:
            raise UserError(f"hidden_size {hidden_size} is not divisible by num_attention_heads {num_attention_heads}")
        if not 0.0 <= dropout < 1.0:
            raise UserError(f"dropout must be in [0, 1), got {dropout}")
        self.vocab_size = int(vocab_size)
        self.hidden_size = int(hidden_size)
        self.num_hidden_layers = int(num_hidden_layers)
        self.num_attention_heads = int(num_attention_heads)
        self.attention_kind = kind
        self.max_position_embeddings = int(max_position_embeddings)
        self.head_hidden_size = int(head_hidden_size or hidden_size)
        self.score_scale = score_scale
        self.scale_scores = score_scale == "sqrt"  # kept beside score_scale: what older attnkit reads
        self.head_mode = head_mode
        self.residual = bool(residual)
        self.dropout = float(dropout)
        self.initializer_range = float(initializer_range)
        super().__init__(pad_token_id=pad_token_id, **kwargs)


@dataclass(frozen=True)
class MiniShape:
    """A MiniBERT's shape: attention kind (sa | ssa | nta), layers, heads, width, vocabulary size, how scores are
    scaled (sqrt: 1/sqrt(d_head); none: the paper's bare dot product) and how heads split the width (split | full)."""

    kind: str = "sa"
    layers: int = 1
    heads: int = 1
    dim: int = 32
    vocab_size: int = 4000
    score_scale: str = "sqrt"
    head_mode: str = "split"


def make_config(
    vocab_size: int,
    *,
    kind: str = "sa",
    layers: int = 1,
    heads: int = 1,
    dim: int = 32,
    spec: AttentionSpec | None = None,
    pad_token_id: int = 0,
    max_position_embeddings: int = 512,
    **kwargs,
) -> MiniBertConfig:
    """A :class:`MiniBertConfig` with ``spec``'s normaliser stored the attnkit way (default softmax)."""
    cfg = MiniBertConfig(
        vocab_size=vocab_size, hidden_size=dim, num_hidden_layers=layers, num_attention_heads=heads,
        attention_kind=kind, pad_token_id=pad_token_id, max_position_embeddings=max_position_embeddings, **kwargs,
    )
    apply_spec(cfg, spec or AttentionSpec("softmax"))
    return cfg
