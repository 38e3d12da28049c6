"""The attention forward attnkit registers with transformers (``attn_implementation="attnkit"``), and the keywords
it honours, ignores or refuses.

:func:`register` adds the forward to transformers' ``AttentionInterface`` *and* ``AttentionMaskInterface``: without the
mask registration transformers builds no padding mask for an unknown implementation name and padding is silently
attended to.
"""

from __future__ import annotations

import math
import os

import torch
from torch import nn

try:  # the collector transformers records output_attentions through (read in every layer's call: imported once)
    from transformers.utils.output_capturing import _active_collector
except ImportError:  # another transformers: the weights are assumed asked for
    _active_collector = None

from ..errors import UserError
from . import flash
from .blur import (  # relative: this file also runs as a checkpoint's remote code
    gaussian_blur,
    valid_keys,
)
from .learned import head_value
from .normalisers import softmax
from .placement import layer_index, sparse_layer_set
from .spec import ATTN_IMPLEMENTATION, AttentionSpec, spec_of


def mask_scores(scores: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
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
    softcap: float | None = None,
    s_aux: torch.Tensor | None = None,
    sliding_window: int | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers attention function: returns (output [B, Lq, H, D], weights [B, H, Lq, Lk]).

    Every keyword is honoured or refused (:data:`ATTENTION_KEYWORDS`): grouped key/value heads are repeated, Gemma-2's
    ``softcap`` caps the scores, gpt-oss's sinks ``s_aux`` take part in the normaliser and are dropped after it."""
    for name, given in kwargs.items():
        why = keyword_refusal(name)
        if why is not None and given is not None:
            raise UserError(f"{type(module).__name__} passes its attention {name}={_short(given)} ({why}): attnkit's "
                             "attention cannot honour it, so it would not run this model as the model would")
    spec = spec_of(module.config)
    attention_mask = _structural_mask(module, query, key, attention_mask, sliding_window, is_causal)
    key, value = _repeat_kv(key, query.size(1)), _repeat_kv(value, query.size(1))
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    fast = _fast_call(spec, module, query, attention_mask, dropout, softcap, s_aux)
    if fast is not None:  # flash sparse attention (its exact map only where asked for), or SDPA in a softmax layer
        out, weights = fast(query, key, value, attention_mask, scaling)
        return out.transpose(1, 2).contiguous(), weights
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling  # [B, H, Lq, Lk]
    if softcap is not None:  # Gemma-2's logit soft-capping, before the mask as in its eager attention
        scores = softcap * torch.tanh(scores / softcap)
    valid_mask = attention_mask
    if s_aux is not None:  # one more key per head that every query sees: the sink's logit
        scores, attention_mask = _with_sink(scores, attention_mask, s_aux)
    weights = layer_map(module, spec, mask_scores(scores, attention_mask))
    if s_aux is not None:
        weights = weights[..., :-1]  # the sink's share goes nowhere: rows sum to less than 1
    dropped = nn.functional.dropout(weights, p=dropout, training=module.training)
    return blurred(spec, dropped, value, valid_mask).transpose(1, 2).contiguous(), weights


def layer_map(module: nn.Module, spec: AttentionSpec, scores: torch.Tensor) -> torch.Tensor:
    """The weights of one attention layer from its masked scores [B, H, Lq, Lk]: the spec's map (with the layer's
    learned per-head setting), or softmax in a layer that keeps it (``--sparse-layers``)."""
    if keeps_softmax(module, spec):
        return softmax(scores)
    return spec.normalise(scores, head_value(module, spec))


def keeps_softmax(module: nn.Module, spec: AttentionSpec) -> bool:
    """Whether ``module``'s layer keeps softmax (``--sparse-layers`` names the others)."""
    return spec.sparse_layers is not None and layer_index(module) not in sparse_layer_set(spec.sparse_layers, module.config.num_hidden_layers)


#: ATTNKIT_ATTENTION: "auto" (the default) runs flash sparse attention wherever it computes what the materialised
#: path would at no more time: everywhere but training with attention dropout (drawing the mask again in the backward
#: costs about 1.2x the materialised step at L = 128 on the CPU) and float32 on a GPU (the flash kernels' float32
#: products are IEEE ones, without tensor cores, in every pass: a BERT-base forward at L = 512 took 17x softmax's on
#: the H200 of 2026-11-28, against 1.2x on the materialised path; bf16/fp16 take flash); "flash" also there (dropout
#: on the CPU only: the memory of long inputs); "materialised" always writes the [B, H, Lq, Lk] matrix (the path of
#: earlier attnkit versions)
ATTENTION_PATHS = ("auto", "flash", "materialised")


def attention_path() -> str:
    """``ATTNKIT_ATTENTION``, checked: a property of the run, never of the checkpoint."""
    value = os.environ.get("ATTNKIT_ATTENTION", "auto").strip().lower() or "auto"
    if value not in ATTENTION_PATHS:
        raise UserError(f"ATTNKIT_ATTENTION={value!r}: expected auto, flash or materialised")
    return value


def flash_pays(path: str, device_type: str, dtype: torch.dtype) -> bool:
    """Whether ``ATTNKIT_ATTENTION=path`` takes flash attention for inputs of this device and dtype (see
    :data:`ATTENTION_PATHS`; dropout and what the model asks for are :func:`_fast_call`'s)."""
    if path == "materialised":
        return False
    return path == "flash" or not (device_type == "cuda" and dtype == torch.float32)


def _weights_requested() -> bool:
    """Whether the model's caller asked for the attention weights (``output_attentions``): transformers records them
    from this function's second output. Unknown (another transformers): assumed asked for."""
    if _active_collector is None:
        return True
    collected = _active_collector.get()
    return collected is None or "attentions" in collected or "cross_attentions" in collected


def _fast_call(spec: AttentionSpec, module, query, attention_mask, dropout, softcap, s_aux):
    """The attention by flash sparse attention, as a function of (q, k, v, mask, scaling) giving ([B, H, Lq, D], the
    weights or None): no [B, H, Lq, Lk] matrix unless the weights are asked for (then the exact map from the flash
    thresholds, under no_grad only). None where only the materialised path computes what the model asks: weights
    asked for with gradients on (they may be differentiated) or in a softmax layer, dropout on the weights in training
    (unless ``ATTNKIT_ATTENTION=flash`` on the CPU, which draws it; Triton's kernels take none), soft-capping, sinks,
    a learned lam, a map flash attention does not know, an alpha warm-up at softmax, ``torch.compile`` tracing, meta
    tensors, or ``ATTNKIT_ATTENTION=materialised``."""
    if softcap is not None or s_aux is not None or query.device.type == "meta" or torch.compiler.is_compiling():
        return None
    path = attention_path()
    if not flash_pays(path, query.device.type, query.dtype):
        return None
    dropout = dropout if module.training else 0.0
    want = _weights_requested()  # (after the tracing check: dynamo cannot trace the collector's ContextVar)
    if (dropout > 0 and (path != "flash" or query.device.type != "cpu" or want)) or (want and torch.is_grad_enabled()):
        return None
    if keeps_softmax(module, spec):
        return None if want else _sdpa_call(spec, dropout)  # a layer that keeps softmax (--sparse-layers)
    name, options = spec.attention, {}
    if name not in flash.ATTENTIONS or spec.learned == "lam":
        return None
    if name == "sparsegen-lin":
        options["lam"] = spec.lam
    value = spec.setting_value(head_value(module, spec))
    if name == "entmax-alpha" or spec.alpha_mix != 1.0:
        if spec.alpha_mix != 1.0 and spec.alpha_mix <= 0:
            return None  # a warm-up at its start: softmax
        name, options = "entmax-alpha", {"alpha": value.reshape(-1) if isinstance(value, torch.Tensor) else float(value)}
        if _near_softmax_alpha(options["alpha"]):  # flash's float32 thresholds cannot hold alpha so near 1 (1.001)
            return None  # (a warm-up's first steps): the materialised map, normalised by its row sums
        if _softmax_alpha(options["alpha"]):  # alpha 1 is softmax (a sweep's or a warm-up's end point): not flash's
            # map. One alpha: torch's SDPA; a head at 1 among per-head alphas: the materialised map (each head its own)
            per_head = isinstance(options["alpha"], torch.Tensor)
            return None if per_head or want else _sdpa_call(spec, dropout)

    def call(q, k, v, mask, scaling):
        v = _value_blur(spec, v, mask)
        if want:  # the map asked for: the output and the exact map from one pass of the flash thresholds
            out, p = flash.output_and_weights(q, k, v, mask, attention=name, scale=scaling, **options)
            return _context_blur(spec, out, v, mask), p
        out = flash.sparse_attention(q, k, v, mask, attention=name, scale=scaling, dropout=dropout, **options)
        return _context_blur(spec, out, v, mask), None

    return call


def _near_softmax_alpha(alpha) -> bool:
    """Whether some head's alpha lies in (1, flash.ALPHA_MIN) (a tensor is read on the CPU only)."""
    if isinstance(alpha, torch.Tensor):
        a = alpha.detach()
        return alpha.device.type == "cpu" and bool(((a > 1) & (a < flash.ALPHA_MIN)).any())
    return 1 < alpha < flash.ALPHA_MIN


def _softmax_alpha(alpha) -> bool:
    """Whether alpha-entmax at ``alpha`` is softmax (alpha <= 1; a tensor is read on the CPU only, where it is cheap)."""
    if isinstance(alpha, torch.Tensor):
        return alpha.device.type == "cpu" and bool((alpha.detach() <= 1).any())
    return alpha <= 1


def _sdpa_call(spec: AttentionSpec, dropout: float = 0.0):
    """Softmax attention by torch's ``scaled_dot_product_attention`` (its memory-efficient kernels), with the blur
    (and ``dropout`` on the weights: training)."""
    def call(q, k, v, mask, scaling):
        v = _value_blur(spec, v, mask)
        bias = mask
        if mask is not None and mask.dtype != torch.bool:  # 'very negative' made exactly -inf, as mask_scores does
            bias = mask.masked_fill(mask <= torch.finfo(mask.dtype).min / 2, -math.inf).to(q.dtype)
        out = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=scaling, dropout_p=dropout)
        if mask is not None:  # a row with no key to attend to: zeros, as the materialised softmax gives (not NaN)
            out = torch.nan_to_num(out, nan=0.0)
        return _context_blur(spec, out, v, mask), None

    return call


def _value_blur(spec: AttentionSpec, value: torch.Tensor, mask) -> torch.Tensor:
    """The values blurred along the keys (``blur="value"``), padded keys zeroed first; else as they are."""
    if spec.blur != "value":
        return value
    kernel = spec.kernel(dtype=torch.promote_types(value.dtype, torch.float32), device=value.device)  # in float32
    return gaussian_blur(value, kernel, valid_keys(mask, value.size(0), value.size(-2)))


def _context_blur(spec: AttentionSpec, out: torch.Tensor, value: torch.Tensor, mask) -> torch.Tensor:
    """Each head's output blurred along the queries (``blur="context"``; self-attention, Lq == Lk); else as it is."""
    if spec.blur != "context":
        return out
    kernel = spec.kernel(dtype=torch.promote_types(value.dtype, torch.float32), device=value.device)
    valid = valid_keys(mask, value.size(0), value.size(-2))
    return gaussian_blur(out, kernel, valid if out.size(-2) == value.size(-2) else None)


def blurred(spec: AttentionSpec, weights: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``weights @ value`` [B, H, Lq, D] with the spec's blur on the values or on each head's output (along the query
    positions; self-attention: Lq == Lk), padded keys (``mask``) zeroed first."""
    return _context_blur(spec, torch.matmul(weights, _value_blur(spec, value, mask)), value, mask)


#: The keywords transformers' attention layers pass to the attention function, and what
#: :func:`attnkit_attention_forward` does with each. Honoured: used as the layer's own eager attention uses it
#: (``sliding_window`` and ``is_causal`` through the mask transformers builds, which holds the window and the causal
#: future; without a mask a window is refused and ``is_causal`` masks the future itself). Ignored: harmless, for the
#: reason given. Refused (at the forward, and by ``sparsify``, which reads the layer's code): what the layer asks of its
#: attention that attnkit cannot do. A keyword in none of them, with a value, is refused too.
ATTENTION_KEYWORDS: dict[str, tuple[str, str]] = {
    "scaling": ("honoured", "the factor of the scores"),
    "dropout": ("honoured", "dropout on the weights, in training"),
    "softcap": ("honoured", "Gemma-2's logit soft-capping: softcap * tanh(scores / softcap), before the mask"),
    "s_aux": ("honoured", "gpt-oss's attention sinks: a logit per head in every row, dropped after the normaliser"),
    "sliding_window": ("honoured", "the local window, held by the mask transformers builds for the layer"),
    "is_causal": ("honoured", "causal attention, held by the mask transformers builds"),
    "position_ids": ("ignored", "rotary positions are already in the query and key; packing is in the mask"),
    "use_cache": ("ignored", "the key/value cache is updated before the call"),
    "output_attentions": ("ignored", "the weights are always returned"),
    "output_hidden_states": ("ignored", "read by the model, not by its attention"),
    "output_router_logits": ("ignored", "read by the model, not by its attention"),
    "num_items_in_batch": ("ignored", "read by the loss, not by the attention"),
    "encoder_hidden_states": ("ignored", "cross-attention's keys and values arrive projected from them"),
    "deterministic": ("ignored", "a switch of flash-attention's kernels"),
    **{k: ("ignored", "flash-attention's packed-sequence bookkeeping: the mask holds the packing, as for eager attention")
       for k in ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "seq_idx")},
    "position_bias": ("refused", "a relative position bias added to the scores"),
    "sinks": ("refused", "attention sinks of a form attnkit does not know"),
    "indices": ("refused", "keys picked by a sparse-attention indexer"),
    "block_indices": ("refused", "key blocks picked by a block-sparse attention"),
}


def keyword_refusal(name: str) -> str | None:
    """None where :func:`attnkit_attention_forward` honours or harmlessly ignores the keyword ``name``; else what the
    keyword is, in a few words (refused, or unknown)."""
    what, why = ATTENTION_KEYWORDS.get(name, ("refused", "a keyword attnkit's attention does not know"))
    return why if what == "refused" else None


def _short(value) -> str:
    return f"<tensor {tuple(value.shape)}>" if isinstance(value, torch.Tensor) else repr(value)[:60]


def _repeat_kv(x: torch.Tensor, heads: int) -> torch.Tensor:
    """Grouped-query attention's key/value heads [B, Hkv, L, D] repeated to ``heads`` [B, H, L, D], each kv head
    serving ``heads / Hkv`` consecutive query heads (transformers' ``repeat_kv``)."""
    b, kv, length, d = x.shape
    if kv == heads:
        return x
    if heads % kv:
        raise UserError(f"{heads} query heads cannot share {kv} key/value heads (grouped-query attention needs a divisor)")
    return x[:, :, None].expand(b, kv, heads // kv, length, d).reshape(b, heads, length, d)


def _structural_mask(module, query, key, attention_mask, sliding_window, is_causal):
    """The mask of the call, the causal future masked where no mask came and the layer is causal; a sliding window
    without a mask is refused (the window's bounds differ between models: only their masks know them)."""
    if attention_mask is not None:
        return attention_mask
    if sliding_window is not None:
        raise UserError(f"{type(module).__name__} asks for a sliding window of {sliding_window} but passes no mask that "
                         "holds it: attnkit's attention cannot apply the window")
    causal = getattr(module, "is_causal", False) if is_causal is None else is_causal
    if not causal or query.size(-2) == 1:
        return None
    return torch.ones(query.size(-2), key.size(-2), dtype=torch.bool, device=query.device).tril()  # as torch's SDPA


def _with_sink(scores: torch.Tensor, attention_mask: torch.Tensor | None, sinks: torch.Tensor):
    """``scores`` [B, H, Lq, Lk] with each head's sink logit as one more key [B, H, Lq, Lk + 1], never masked."""
    b, h, lq, _ = scores.shape
    col = sinks.to(scores.dtype).reshape(1, h, 1, 1).expand(b, h, lq, 1)
    if attention_mask is not None:
        attention_mask = nn.functional.pad(attention_mask, (0, 1), value=True if attention_mask.dtype == torch.bool else 0.0)
    return torch.cat([scores, col], dim=-1), attention_mask


_registered = False


def register() -> None:
    """Register ``attn_implementation="attnkit"`` for attention *and* masks (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(ATTN_IMPLEMENTATION, attnkit_attention_forward)

    def attnkit_mask(*args, **kwargs):
        # boolean masks (True = attend) that mask_scores turns into -inf; never skipped: deciding to skip reads the
        # padding mask's values on the host (a GPU sync, a graph break under torch.compile, an error on `meta`)
        kwargs["allow_is_bidirectional_skip"] = False
        kwargs["allow_is_causal_skip"] = False
        return sdpa_mask(*args, **kwargs)

    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, attnkit_mask)
    _registered = True
