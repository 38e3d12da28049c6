"""MiniBERT (METHODS.md §3): a deliberately tiny BERT for small corpora, top to bottom.

    ids [B, L] ──> E = tok_emb(ids) + sinusoid(pos)                      [B, L, d]   (positions fixed, not learned)
               ──> L_layers x attention (no dropout, no residual by default) [B, L, d]
               ──> MLM head: 2-layer FC per token                           [B, L, V]
                or classification head: mean over real tokens, 2-layer FC    [B, n_labels]

One attention layer over its input X [B, L, d], in one of three kinds (``attention_kind``):

    sa  (MiniSA):  A = norm((X Wq)(X Wk)^T * s),  out = A (X Wv)     Wq, Wk, Wv: d x d, no bias
    ssa (MiniSSA): A = norm((X Wq) X^T * s),      out = A X          Wq only: a third of sa's parameters
    nta (MiniNTA): A = norm(X X^T * s),           out = A X          no attention parameters at all

``norm`` is one of attnkit's normalisers (softmax, taylor, sparsemax, sparsegen-lin), chosen
by the :class:`~attnkit.attention.AttentionSpec` stored in ``config.attnkit`` exactly as for
the BERT models (``apply_spec``/``spec_of``), so a checkpoint records its normaliser the same way.

What the paper fixes, and the options where it does not (each recorded in the checkpoint's config.json):

* scores: ``score_scale="none"`` is the paper's bare dot product softmax(QE·KEᵀ); ``"sqrt"`` multiplies by
  ``1/sqrt(d_head)`` as BERT and the authors' ``minibert`` package do. The default stays ``"sqrt"`` (what every
  earlier attnkit MiniBERT used); checkpoints written before the option (``scale_scores`` true/false) load as
  ``"sqrt"``/``"none"``;
* heads (the paper does not say how its 1 x 2 was built), ``head_mode``:

  - ``"split"`` (default, BERT's way): d is split into H contiguous slices of ``d_head = d / H``; head h uses
    slice h of the (projected, for sa/ssa) queries, keys and values; the head outputs are concatenated back to
    d, with no output projection (so 1 x 2 has exactly the parameters of 1 x 1, and SSA a third of SA's);
  - ``"full"``: every head sees the whole width (``d_head = d``, its own d x d Wq/Wk/Wv) and, when H > 1, the
    H·d concatenated outputs go through an output projection W_o (H·d x d, no bias) back to d. 1 x 1 is the
    same model in both modes (no W_o). nta heads have no parameters, so its H full heads are the same head;
* layers are stacked as the paper draws them: the output of one attention layer is the next one's input E,
  with **no dropout and no residual connection** (the paper: "We first removed dropout layers, as well as
  residual connections"), and no layer norm or feed-forward block; ``residual=True`` adds X to each layer's
  output and ``dropout > 0`` drops it, both off by default;
* padded keys get -inf before the normaliser, so they receive exactly 0 weight and the outputs of
  real tokens never depend on padding.

The models ignore ``config._attn_implementation`` ("attnkit" or any other): they always run this
file's attention, so ``attnkit.models.build_classifier``/``load_classifier`` work unchanged.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForSequenceClassification,
    PreTrainedModel,
)
from transformers import initialization as init
from transformers.modeling_outputs import (
    BaseModelOutput,
    MaskedLMOutput,
    SequenceClassifierOutput,
)

from attnkit.attention.forward import register as register_attention
from attnkit.attention.placement import sparse_layer_set
from attnkit.attention.spec import AttentionSpec, spec_of
from attnkit.models.mini_config import MODEL_TYPE, MiniBertConfig
from attnkit.models.modeling_attnkit import accept_in_pipelines
from attnkit.errors import UserError

def sinusoid(n_positions: int, dim: int) -> torch.Tensor:
    """Fixed positional embeddings (Vaswani et al.): [n_positions, dim], sin on even dims, cos on odd."""
    pos = torch.arange(n_positions, dtype=torch.float32)[:, None]  # [P, 1]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))  # [ceil(d/2)]
    table = torch.zeros(n_positions, dim)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : dim // 2]
    return table


class MiniBertEmbeddings(nn.Module):
    def __init__(self, config: MiniBertConfig):
        super().__init__()
        self.tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        # a buffer, not a parameter: never trained, not saved (rebuilt from the config)
        self.register_buffer("positions", sinusoid(config.max_position_embeddings, config.hidden_size), persistent=False)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        B, L = input_ids.shape
        if L > self.positions.shape[0]:
            raise UserError(f"sequence of {L} tokens is longer than max_position_embeddings={self.positions.shape[0]}")
        return self.tokens(input_ids) + self.positions[:L][None]  # [B, L, d]


class MiniBertAttention(nn.Module):
    """One attention layer of kind sa / ssa / nta (see the module docstring)."""

    def __init__(self, config: MiniBertConfig, layer_idx: int = 0):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx  # which layer (from 0): --sparse-layers may leave it softmax
        d, kind = config.hidden_size, config.attention_kind
        self.n_heads = H = config.num_attention_heads
        self.full = getattr(config, "head_mode", "split") == "full"
        self.d_head = d if self.full else d // H
        scale = getattr(config, "score_scale", None) or ("sqrt" if config.scale_scores else "none")
        self.scaling = self.d_head**-0.5 if scale == "sqrt" else 1.0
        width = H * self.d_head  # split: d; full: H * d
        self.query = nn.Linear(d, width, bias=False) if kind in ("sa", "ssa") else None
        self.key = nn.Linear(d, width, bias=False) if kind == "sa" else None
        self.value = nn.Linear(d, width, bias=False) if kind == "sa" else None
        self.output = nn.Linear(width, d, bias=False) if self.full and H > 1 else None  # W_o: full heads only

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # [B, L, H * d_head] (or [B, L, d] unprojected) -> [B, H, L, d_head]
        B, L, w = x.shape
        if w != self.n_heads * self.d_head:  # full heads over an unprojected X: every head sees all of it
            return x[:, None].expand(B, self.n_heads, L, w)
        return x.view(B, L, self.n_heads, self.d_head).transpose(1, 2)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, L, d], key_mask bool [B, L] (True = real token) -> (out [B, L, d], weights [B, H, L, L])."""
        q = self._heads(self.query(x) if self.query is not None else x)  # [B, H, L, dh]
        k = self._heads(self.key(x) if self.key is not None else x)  # [B, H, L, dh]
        v = self._heads(self.value(x) if self.value is not None else x)  # [B, H, L, dh]
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scaling  # [B, H, L, L]
        scores = scores.masked_fill(~key_mask[:, None, None, :], -math.inf)  # padded keys -> weight exactly 0
        spec = spec_of(self.config)
        if spec.sparse_layers is not None and self.layer_idx not in sparse_layer_set(spec.sparse_layers, self.config.num_hidden_layers):
            spec = AttentionSpec("softmax")  # a layer that keeps softmax (--sparse-layers)
        weights = spec.normalise(scores)  # [B, H, L, L], rows sum to 1
        out = torch.matmul(weights, v)  # [B, H, L, dh]
        B, H, L, dh = out.shape
        out = out.transpose(1, 2).reshape(B, L, H * dh)  # [B, L, H * d_head]
        return (self.output(out) if self.output is not None else out), weights  # [B, L, d]


class MiniBertLayer(nn.Module):
    def __init__(self, config: MiniBertConfig, layer_idx: int = 0):
        super().__init__()
        self.attention = MiniBertAttention(config, layer_idx)
        self.dropout = nn.Dropout(config.dropout) if config.dropout > 0 else nn.Identity()
        self.residual = config.residual

    def forward(self, x, key_mask):
        out, weights = self.attention(x, key_mask)
        out = self.dropout(out)
        return (x + out if self.residual else out), weights


class MiniBertPreTrainedModel(PreTrainedModel):
    config_class = MiniBertConfig
    config: MiniBertConfig
    base_model_prefix = "mini"
    main_input_name = "input_ids"
    _supports_attention_backend = True  # accepts attn_implementation="attnkit" (and ignores it)
    _no_split_modules = ["MiniBertLayer"]

    @torch.no_grad()
    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            init.kaiming_uniform_(module.weight, a=math.sqrt(5))  # PyTorch's default for nn.Linear
            if module.bias is not None:
                bound = 1 / math.sqrt(module.in_features)
                init.uniform_(module.bias, -bound, bound)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=self.config.initializer_range)
        elif isinstance(module, MiniBertEmbeddings):
            init.copy_(module.positions, sinusoid(*module.positions.shape))


class MiniBertModel(MiniBertPreTrainedModel):
    """Embeddings + attention layers; ``last_hidden_state`` is the last layer's output [B, L, d]."""

    def __init__(self, config: MiniBertConfig):
        super().__init__(config)
        self.embeddings = MiniBertEmbeddings(config)
        self.layers = nn.ModuleList(MiniBertLayer(config, i) for i in range(config.num_hidden_layers))
        self.post_init()

    def get_input_embeddings(self):
        return self.embeddings.tokens

    def set_input_embeddings(self, value):
        self.embeddings.tokens = value

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,  # accepted for tokenizers that return it; unused
        output_attentions: bool | None = None,
        output_hidden_states: bool | None = None,
        return_dict: bool | None = None,
        **kwargs,
    ):
        output_attentions = self.config.output_attentions if output_attentions is None else output_attentions
        output_hidden_states = self.config.output_hidden_states if output_hidden_states is None else output_hidden_states
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        key_mask = attention_mask.bool()  # [B, L]
        x = self.embeddings(input_ids)  # [B, L, d]
        hidden, attentions = [x], []
        for layer in self.layers:
            x, w = layer(x, key_mask)  # [B, L, d], [B, H, L, L]
            hidden.append(x)
            attentions.append(w)
        out = BaseModelOutput(
            last_hidden_state=x,
            hidden_states=tuple(hidden) if output_hidden_states else None,
            attentions=tuple(attentions) if output_attentions else None,
        )
        return out if return_dict is not False else out.to_tuple()


def _two_layer_head(d_in: int, d_hidden: int, d_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_in, d_hidden), nn.GELU(), nn.Linear(d_hidden, d_out))


class MiniBertForMaskedLM(MiniBertPreTrainedModel):
    """MLM pre-training: a 2-layer FC net on each token's output predicts the token ([B, L, V]).

    With ``labels`` the head runs only on the chosen positions (labels != -100), which gives the
    same loss for about 15% of the cost of the d x V projection; ``logits`` is then None unless
    ``return_logits=True`` asks for all of them.
    """

    def __init__(self, config: MiniBertConfig):
        super().__init__(config)
        self.mini = MiniBertModel(config)
        self.mlm_head = _two_layer_head(config.hidden_size, config.head_hidden_size, config.vocab_size)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, labels=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, return_logits=False, **kwargs):
        enc = self.mini(input_ids, attention_mask, output_attentions=output_attentions,
                        output_hidden_states=output_hidden_states, return_dict=True)
        h = enc.last_hidden_state  # [B, L, d]
        logits = self.mlm_head(h) if labels is None or return_logits else None  # [B, L, V]
        loss = None
        if labels is not None:  # -100 = not a chosen token
            chosen = labels != -100  # [B, L]
            picked = logits[chosen] if logits is not None else self.mlm_head(h[chosen])  # [n_chosen, V]
            loss = nn.functional.cross_entropy(picked, labels[chosen], reduction="sum") / chosen.sum().clamp_min(1)
        out = MaskedLMOutput(loss=loss, logits=logits, hidden_states=enc.hidden_states, attentions=enc.attentions)
        return out if return_dict is not False else out.to_tuple()


class MiniBertForSequenceClassification(MiniBertPreTrainedModel):
    """Classification: mean of the last layer's outputs over the real tokens ([CLS] and [SEP]
    included, padding excluded) -> 2-layer FC net -> logits [B, num_labels]."""

    def __init__(self, config: MiniBertConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.mini = MiniBertModel(config)
        self.classifier = _two_layer_head(config.hidden_size, config.head_hidden_size, config.num_labels)
        self.post_init()

    def forward(self, input_ids, attention_mask=None, labels=None, output_attentions=None,
                output_hidden_states=None, return_dict=None, **kwargs):
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        enc = self.mini(input_ids, attention_mask, output_attentions=output_attentions,
                        output_hidden_states=output_hidden_states, return_dict=True)
        m = attention_mask.to(enc.last_hidden_state.dtype)[..., None]  # [B, L, 1]
        pooled = (enc.last_hidden_state * m).sum(1) / m.sum(1).clamp_min(1.0)  # [B, d]
        logits = self.classifier(pooled)  # [B, num_labels]
        loss = None
        if labels is not None:
            loss = self._loss(logits, labels)
        out = SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=enc.hidden_states, attentions=enc.attentions)
        return out if return_dict is not False else out.to_tuple()

    def _loss(self, logits, labels):
        pt = self.config.problem_type
        if pt is None:
            pt = "regression" if self.num_labels == 1 else "single_label_classification"
        if pt == "regression":
            return nn.functional.mse_loss(logits.squeeze(-1), labels.to(logits.dtype).view(-1))
        if pt == "multi_label_classification":
            return nn.functional.binary_cross_entropy_with_logits(logits, labels.to(logits.dtype))
        return nn.functional.cross_entropy(logits.view(-1, self.num_labels), labels.view(-1))


def attention_parameter_count(model: nn.Module) -> int:
    """Parameters of the attention layers only (Wq, Wk, Wv, and W_o of full heads)."""
    return sum(p.numel() for m in model.modules() if isinstance(m, MiniBertAttention) for p in m.parameters())


def register() -> None:
    """Register MiniBERT with AutoConfig / AutoModel / AutoModelForMaskedLM / AutoModelForSequenceClassification
    (and attnkit's attention implementation name, which configs made here carry)."""
    register_attention()
    try:
        AutoConfig.register(MODEL_TYPE, MiniBertConfig)
    except ValueError:  # already registered
        return
    AutoModel.register(MiniBertConfig, MiniBertModel)
    AutoModelForMaskedLM.register(MiniBertConfig, MiniBertForMaskedLM)
    AutoModelForSequenceClassification.register(MiniBertConfig, MiniBertForSequenceClassification)
    accept_in_pipelines(MODEL_TYPE, "masked-lm", MiniBertForMaskedLM.__name__)
    accept_in_pipelines(MODEL_TYPE, "sequence-classification", MiniBertForSequenceClassification.__name__)


register()
