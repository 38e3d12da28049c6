"""Reading a classifier off the whole stack of layers: extraction strategies and Squeeze-and-Excitation.

SesameBERT (METHODS.md §2) rescales each encoder layer's output ``H_l`` [B, T, D] by an
input-dependent weight from Squeeze-and-Excitation over the layer axis,

    z_l = mean over real tokens and hidden units of H_l          squeeze      [B, L]
    s   = sigmoid(W_2 relu(W_1 z))                               excitation   [B, L]
    H^_l = s_l * H_l

then reads one of the seven *extraction strategies* of its Table 3 off the (rescaled)
stack. The classifier sees the first token of the result, through the encoder's pooler
(dense + tanh; the pre-trained one when the checkpoint has it), like BERT.

The squeeze averages over real tokens only (the authors' code also averaged padding; we
mask it out so that a padded batch gives each sentence what it gets alone).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

import torch
from torch import nn
from transformers import AutoModel, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput

from ..errors import UserError

HEAD_KEY = "attnkit_head"

#: strategy -> which layers (1-based over the L encoder layers) it combines, and how
STRATEGIES = ("first", "second", "second-to-last", "last", "sum-last-four", "sum-all", "weighted")


@dataclass(frozen=True)
class HeadSpec:
    """How the classifier reads the layer stack: an extraction strategy, with or without SE."""

    pooling: str = "last"
    se: bool = False
    se_ratio: int = 3

    def __post_init__(self):
        p = str(self.pooling).lower().replace("_", "-")
        p = {"weighted-average": "weighted", "second-last": "second-to-last", "sum-last-4": "sum-last-four"}.get(p, p)
        if p not in STRATEGIES:
            raise UserError(f"unknown layer pooling {self.pooling!r}: expected one of {', '.join(STRATEGIES)}")
        object.__setattr__(self, "pooling", p)
        r = self.se_ratio
        if isinstance(r, bool) or not isinstance(r, (int, float)) or int(r) != r or r < 1:
            raise UserError(f"se_ratio={r!r}: expected an integer >= 1 (the SE reduction ratio)")
        object.__setattr__(self, "se_ratio", int(r))
        object.__setattr__(self, "se", bool(self.se))

    @property
    def is_default(self) -> bool:
        """Plain BERT: the last layer, no SE (the model's own classification head is used)."""
        return self.pooling == "last" and not self.se

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "HeadSpec":
        d = dict(d or {})
        unknown = set(d) - {f.name for f in fields(cls)}
        if unknown:
            raise UserError(f"unknown head setting(s) {sorted(unknown)} in config '{HEAD_KEY}'")
        return cls(**d)

    def describe(self) -> str:
        return f"{'SE + ' if self.se else ''}{self.pooling} layer" + (f" (r={self.se_ratio})" if self.se else "")


def head_of(config) -> HeadSpec:
    return HeadSpec.from_dict(getattr(config, HEAD_KEY, None))


class LayerSE(nn.Module):
    """Squeeze-and-Excitation over L layers: one weight in (0, 1) per layer and input."""

    def __init__(self, num_layers: int, ratio: int = 3, bias_init: float = 0.8):
        super().__init__()
        hidden = max(1, num_layers // ratio)
        self.fc1 = nn.Linear(num_layers, hidden)  # W_1: (L/r) x L
        self.fc2 = nn.Linear(hidden, num_layers)  # W_2: L x (L/r)
        self.bias_init = bias_init

    def reset_parameters(self) -> None:
        for fc in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(fc.weight)
            nn.init.constant_(fc.bias, self.bias_init)  # as in the authors' code

    def forward(self, stack: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """stack [L, B, T, D], mask [B, T] (1 = real) -> s [B, L]."""
        per_token = stack.float().mean(-1)  # [L, B, T]
        if mask is None:
            z = per_token.mean(-1)
        else:
            m = mask.to(per_token.dtype)
            z = (per_token * m).sum(-1) / m.sum(-1).clamp_min(1.0)  # mean over real tokens only
        z = z.transpose(0, 1)  # [B, L]
        return torch.sigmoid(self.fc2(torch.relu(self.fc1(z))))


def extract(stack: torch.Tensor, pooling: str, mix: torch.Tensor | None = None) -> torch.Tensor:
    """One extraction strategy over the layer stack [L, B, T, D] -> [B, T, D]."""
    L = stack.size(0)
    if pooling == "first":
        return stack[0]
    if pooling == "second":
        return stack[min(1, L - 1)]
    if pooling == "second-to-last":
        return stack[max(L - 2, 0)]
    if pooling == "last":
        return stack[-1]
    if pooling == "sum-last-four":
        return stack[-4:].sum(0)
    if pooling == "sum-all":
        return stack.sum(0)
    if pooling == "weighted":
        w = torch.softmax(mix, dim=0).to(stack.dtype)  # [L], learned
        return torch.einsum("l,lbtd->btd", w, stack)
    raise UserError(f"unknown layer pooling {pooling!r}")


def layer_weight_parameters(model: nn.Module) -> list[nn.Parameter]:
    """SesameBERT's layer weights in ``model`` (wrapped or not): its SE layer's parameters and the weighted strategy's
    mix; none for a model that reads the last layer without SE."""
    out: list[nn.Parameter] = []
    for m in model.modules():
        if isinstance(m, PooledEncoderForSequenceClassification):
            out += list(m.se.parameters()) if m.se is not None else []
            out += [m.layer_mix] if m.layer_mix is not None else []
    return out


class PooledEncoderForSequenceClassification(PreTrainedModel):
    """Any transformers encoder + (SE over layers) + an extraction strategy + BERT-style classifier.

    Saved and loaded with ``save_pretrained``/``from_pretrained`` (safetensors); the head
    settings live in ``config.attnkit_head``. Its config is the encoder's own (BertConfig,
    RobertaConfig, ...), so any BERT-family checkpoint works.
    """

    config_class = PretrainedConfig
    base_model_prefix = "encoder"
    _supports_attention_backend = True
    _supports_sdpa = True

    def __init__(self, config, encoder: nn.Module | None = None):
        super().__init__(config)
        self.head_spec = head_of(config)
        self.encoder = encoder if encoder is not None else AutoModel.from_config(config)
        L = config.num_hidden_layers
        self.se = LayerSE(L, self.head_spec.se_ratio) if self.head_spec.se else None
        self.layer_mix = nn.Parameter(torch.zeros(L)) if self.head_spec.pooling == "weighted" else None
        hidden = config.hidden_size
        has_pooler = getattr(self.encoder, "pooler", None) is not None
        self.pool_dense = None if has_pooler else nn.Linear(hidden, hidden)
        p = getattr(config, "classifier_dropout", None)
        self.dropout = nn.Dropout(p if p is not None else getattr(config, "hidden_dropout_prob", 0.1))
        self.classifier = nn.Linear(hidden, config.num_labels)
        self.last_layer_weights: dict[str, torch.Tensor] = {}
        self.post_init()
        if self.se is not None:
            self.se.reset_parameters()

    def _init_weights(self, module):
        std = getattr(self.config, "initializer_range", 0.02)
        if isinstance(module, nn.Linear):
            module.weight.data.normal_(0.0, std)
            if module.bias is not None:
                module.bias.data.zero_()
        elif isinstance(module, nn.Embedding):
            module.weight.data.normal_(0.0, std)
        elif isinstance(module, nn.LayerNorm):
            module.weight.data.fill_(1.0)
            module.bias.data.zero_()

    def layer_weights(self) -> dict[str, torch.Tensor]:
        """The learned layer weights of the last forward pass: SE ``s`` [B, L] and/or mix softmax [L]."""
        return self.last_layer_weights

    def forward(
        self,
        input_ids=None,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        inputs_embeds=None,
        labels=None,
        output_attentions=None,
        output_hidden_states=None,
        return_dict=None,
        **kwargs,
    ):
        enc_kwargs = {"attention_mask": attention_mask, "output_hidden_states": True, "output_attentions": output_attentions}
        if token_type_ids is not None:
            enc_kwargs["token_type_ids"] = token_type_ids
        if position_ids is not None:
            enc_kwargs["position_ids"] = position_ids
        out = self.encoder(input_ids=input_ids, inputs_embeds=inputs_embeds, **enc_kwargs)
        stack = torch.stack(out.hidden_states[1:])  # [L, B, T, D], the outputs of layers 1..L
        weights = {}
        if self.se is not None:
            s = self.se(stack, attention_mask)  # [B, L]
            stack = stack * s.transpose(0, 1)[:, :, None, None].to(stack.dtype)
            weights["se"] = s.detach()
        if self.layer_mix is not None:
            weights["mix"] = torch.softmax(self.layer_mix.detach(), 0)
        self.last_layer_weights = weights
        seq = extract(stack, self.head_spec.pooling, self.layer_mix)  # [B, T, D]
        if self.pool_dense is None:
            pooled = self.encoder.pooler(seq)
        else:
            pooled = torch.tanh(self.pool_dense(seq[:, 0]))
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            loss = _classification_loss(self.config, logits, labels)
        return SequenceClassifierOutput(
            loss=loss,
            logits=logits,
            hidden_states=out.hidden_states if output_hidden_states else None,
            attentions=out.attentions,
        )


def _classification_loss(config, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """The loss transformers' sequence classifiers use, by ``config.problem_type``."""
    if config.num_labels == 1 or config.problem_type == "regression":
        return nn.functional.mse_loss(logits.squeeze(-1).float(), labels.float())
    if config.problem_type == "multi_label_classification":
        return nn.functional.binary_cross_entropy_with_logits(logits.float(), labels.float())
    return nn.functional.cross_entropy(logits.float().view(-1, config.num_labels), labels.view(-1))
