"""Encoders whose attention is their own code, not transformers' attention registry: DeBERTa-v2/v3 (content and
relative-position terms, disentangled) and MPNet (a relative position bias). Their attention modules become the
subclasses below, which run transformers' own steps with attnkit's map in place of the softmax: the relative-position
terms exactly as they are, the mask as -inf (a row with no key gives zeros), ``--sparse-layers``, the learned
per-head settings and the blur as in every other encoder. The scores are materialised ([B, H, L, L]: the per-pair
terms are such a matrix already), so these layers do not run flash attention.

    scores = q kᵀ / scale + relative terms    [B, H, Lq, Lk]   (transformers' code)
    p      = map(scores masked with -inf)      [B, H, Lq, Lk]   (attnkit: layer_map)
    out    = blur(dropout(p) v)                [B, H, Lq, D]
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers.models.deberta_v2.modeling_deberta_v2 import DisentangledSelfAttention, scaled_size_sqrt
from transformers.models.mpnet.modeling_mpnet import MPNetSelfAttention

from .forward import blurred, layer_map, mask_scores
from .spec import spec_of


class SparseDisentangledSelfAttention(DisentangledSelfAttention):
    """DeBERTa-v2's disentangled self-attention (transformers' steps) with attnkit's map instead of its softmax."""

    def forward(self, hidden_states, attention_mask, output_attentions=False, query_states=None, relative_pos=None,
                rel_embeddings=None):
        heads = self.num_attention_heads
        q = self.transpose_for_scores(self.query_proj(hidden_states if query_states is None else query_states), heads)
        k = self.transpose_for_scores(self.key_proj(hidden_states), heads)  # [B * H, L, D]
        v = self.transpose_for_scores(self.value_proj(hidden_states), heads)
        scale_factor = 1 + ("c2p" in self.pos_att_type) + ("p2c" in self.pos_att_type)
        scores = torch.bmm(q, k.transpose(-1, -2) / scaled_size_sqrt(q, scale_factor).to(dtype=q.dtype))
        if self.relative_attention:  # content-to-position and position-to-content terms
            rel_att = self.disentangled_attention_bias(q, k, relative_pos, self.pos_dropout(rel_embeddings), scale_factor)
            if rel_att is not None:
                scores = scores + rel_att
        scores = scores.view(-1, heads, scores.size(-2), scores.size(-1))  # [B, H, Lq, Lk]
        spec, mask = spec_of(self.config), None if attention_mask is None else attention_mask.bool()  # [B, 1, Lq, Lk]
        weights = layer_map(self, spec, mask_scores(scores, mask))
        out = blurred(spec, self.dropout(weights), v.view(-1, heads, v.size(-2), v.size(-1)), mask)  # [B, H, Lq, D]
        out = out.permute(0, 2, 1, 3).contiguous()
        return out.view(*out.shape[:-2], -1), (weights if output_attentions else None)


class SparseMPNetSelfAttention(MPNetSelfAttention):
    """MPNet's self-attention (transformers' steps) with attnkit's map instead of its softmax."""

    def forward(self, hidden_states, attention_mask=None, position_bias=None, output_attentions=False, **kwargs):
        shape = (*hidden_states.shape[:-1], -1, self.attention_head_size)
        q, k, v = (proj(hidden_states).view(shape).transpose(1, 2) for proj in (self.q, self.k, self.v))  # [B, H, L, D]
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.attention_head_size)
        if position_bias is not None:  # the relative position bias, computed once in MPNet's encoder
            scores = scores + position_bias
        spec = spec_of(self.config)
        weights = layer_map(self, spec, mask_scores(scores, attention_mask))
        out = blurred(spec, self.dropout(weights), v, attention_mask).permute(0, 2, 1, 3).contiguous()
        out = self.o(out.view(*hidden_states.shape[:-1], self.all_head_size))
        return (out, weights) if output_attentions else (out,)


#: transformers' attention module -> attnkit's subclass of it; the model types that hold them
OWN_CODE: dict[type, type] = {DisentangledSelfAttention: SparseDisentangledSelfAttention,
                              MPNetSelfAttention: SparseMPNetSelfAttention}
OWN_CODE_TYPES = ("deberta-v2", "mpnet")


def has_own_attention(model: nn.Module) -> bool:
    """Whether ``model`` computes its attention in one of the modules attnkit knows how to take over."""
    return any(type(m) in OWN_CODE or type(m) in OWN_CODE.values() for m in model.modules())


def adopt(model: nn.Module, config) -> int:
    """Turn every own-code attention module of ``model`` into attnkit's subclass (same parameters), holding
    ``config`` (where attnkit's spec lives); returns how many."""
    n = 0
    for m in model.modules():
        cls = OWN_CODE.get(type(m), type(m) if type(m) in OWN_CODE.values() else None)
        if cls is not None:
            m.__class__ = cls
            m.config = config
            n += 1
    return n
