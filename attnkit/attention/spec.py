"""The attention composition and its registration inside Hugging Face models.

An attention layer here is a composition of

    scores     = (x W_q)(x W_k)^T * scaling (+ padding mask)      score projection (the model's own)
    weights    = normaliser(scores)                               softmax | sparsemax | sparsegen-lin
    output     = blur(weights @ blur(x W_v))                      optional Gaussian blur (locality step),
                                                                  on the values or on each head's output

Each paper is a configuration of those pieces, held in an :class:`AttentionSpec`. For a
Hugging Face encoder the spec is stored in the model config as ``config.attnkit`` (a plain
dict, so it is saved in ``config.json``) and the model runs with
``attn_implementation="attnkit"``, which :func:`register` adds to transformers'
``AttentionInterface`` *and* ``AttentionMaskInterface``. Without the mask registration
transformers builds no padding mask for an unknown implementation name and padding is
silently attended to.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable

import torch
from torch import nn

from .entmax import check_alpha, entmax15, entmax_bisect  # relative: this file also runs as a checkpoint's remote code
from .maps import check_lam, sparsegen_lin, sparsemax

ATTN_IMPLEMENTATION = "attnkit"
CONFIG_KEY = "attnkit"
#: name of the per-head parameter of a learned-lam attention module: rho [H], lam_h = 1 - exp(rho_h) < 1
LAM_PARAM = "attnkit_lam_rho"
#: name of the per-head parameter of a learned-alpha attention module: a [H], alpha_h = 1 + sigmoid(a_h) in (1, 2)
ALPHA_PARAM = "attnkit_alpha_logit"


@dataclass(frozen=True)
class LearnedPerHead:
    """A setting learned per layer and head: the module parameter that holds it (unconstrained) and the maps
    between the two. One entry per learnable setting in :data:`LEARNED`; a new one is one more entry."""

    param: str  # attribute of each attention module, a parameter [H]
    config_key: str  # config.json key of its values [layers][heads] (also in the weights)
    to_raw: Callable[[torch.Tensor], torch.Tensor]  # value -> parameter
    from_raw: Callable[[torch.Tensor], torch.Tensor]  # parameter -> value (differentiable)


#: learnable settings: lam (sparsegen-lin, lam_h = 1 - exp(rho_h) < 1) and alpha (entmax-alpha, 1 + sigmoid(a_h))
LEARNED: dict[str, LearnedPerHead] = {
    "lam": LearnedPerHead(LAM_PARAM, "attnkit_lam", lambda v: torch.log1p(-v), lambda r: 1.0 - torch.exp(r)),
    "alpha": LearnedPerHead(ALPHA_PARAM, "attnkit_alpha", lambda v: torch.logit(v - 1.0), lambda r: 1.0 + torch.sigmoid(r)),
}


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


def _entmax15(scores: torch.Tensor, spec: "AttentionSpec") -> torch.Tensor:
    if spec.alpha_mix != 1.0:  # softmax-to-sparse warm-up: alpha between 1 and 1.5, by bisection
        return entmax_bisect(scores, spec.effective_alpha(1.5), dim=-1)
    return entmax15(scores, dim=-1)


def _entmax_alpha(scores: torch.Tensor, spec: "AttentionSpec") -> torch.Tensor:
    return entmax_bisect(scores, spec.effective_alpha(spec.alpha), dim=-1)


#: name -> fn(scores [..., Lk], spec) -> weights [..., Lk]; each row sums to 1 (or is all 0 if fully masked)
NORMALISERS: dict[str, Callable[[torch.Tensor, "AttentionSpec"], torch.Tensor]] = {
    "softmax": _softmax,
    "taylor": _taylor,
    "sparsemax": _sparsemax,
    "sparsegen-lin": _sparsegen_lin,
    "entmax15": _entmax15,
    "entmax-alpha": _entmax_alpha,
}


#: normalisers whose weights are never exactly 0 on unmasked entries
DENSE_NORMALISERS = ("softmax", "taylor")


BLUR_PLACES = ("none", "context", "value")


def gaussian_kernel(size: int, sigma: float, dtype=torch.float64, device=None) -> torch.Tensor:
    """The fixed 1-D blur kernel ``g_j = exp(-(j - c)^2 / (2 sigma^2))``, ``c = (size-1)/2``, summing to 1.

    As ``sigma -> 0`` it tends to the identity ``[0, .., 1, .., 0]`` (exactly, once the tails underflow).
    """
    j = torch.arange(size, dtype=torch.float64)
    g = torch.exp(-((j - (size - 1) / 2) ** 2) / (2.0 * float(sigma) ** 2))
    return (g / g.sum()).to(dtype=dtype, device=device)


#: a float32 blur kernel whose off-centre weights are all below this is no blur: each tail is lost when added to
#: anything of ordinary size (sigma 0.1 at width 3: tails of 1.9e-22), so the model trains as with no blur, bit for bit
IDENTITY_TAIL = 1e-20


def blur_is_identity(size: int, sigma: float) -> bool:
    """Whether the float32 kernel of width ``size`` at ``sigma`` is the identity ``[0, .., 1, .., 0]`` to within
    :data:`IDENTITY_TAIL` (at width 3: sigma 0.01 exactly, 0.1 to 1.9e-22; 0.3 is already a faint blur)."""
    k = gaussian_kernel(size, sigma, dtype=torch.float32)
    c = size // 2
    return float(k[c]) == 1.0 and (size == 1 or float(torch.cat([k[:c], k[c + 1:]]).max()) < IDENTITY_TAIL)


def gaussian_blur(x: torch.Tensor, kernel: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Depthwise blur of ``x`` [B, H, L, D] along L with ``kernel`` [k] (odd k), zero "SAME" padding.

    ``valid`` [B, L] (True = real token) zeroes padded positions first, so padding never
    leaks into real tokens: a padded batch gives each sentence what it gets alone.
    ``out[:, :, i] = sum_j kernel[j] * x[:, :, i + j - c]`` (the kernel is symmetric).
    Half-precision inputs (fp16/bf16, as under autocast) are blurred in float32 and the result rounded once: in bf16
    arithmetic the side weights of a narrow kernel (0.004 at sigma 0.3) are lost to rounding at every step.
    """
    dtype = x.dtype
    x = x.to(torch.promote_types(dtype, torch.float32))
    if valid is not None:
        x = x.masked_fill(~valid[:, None, :, None], 0.0)
    k = kernel.numel()
    c = k // 2
    w = kernel.to(dtype=x.dtype, device=x.device)
    if k == 1:
        return (x * w[0]).to(dtype)
    L = x.size(-2)
    xp = nn.functional.pad(x, (0, 0, c, c))  # [B, H, L + 2c, D], zeros at both ends
    out = w[0] * xp[..., 0:L, :]
    for j in range(1, k):
        out = out + w[j] * xp[..., j : j + L, :]
    return out.to(dtype)


def check_sparse_layers(text) -> str | None:
    """The canonical form of a ``--sparse-layers`` value: None for ``all`` (or None), else ``"last"``, a range
    ``"4-5"``, a list ``"0,5"`` or a mix (``"0,3-5"``); layers are counted from 0. ValueError naming what was expected."""
    if text is None:
        return None
    if isinstance(text, (list, tuple)):
        text = ",".join(str(int(i)) for i in text)
    s = str(text).strip().lower().replace(" ", "")
    if s in ("", "all"):
        if s == "":
            raise ValueError("sparse_layers='': expected 'all', 'last', a layer such as 5, a range such as 4-5 or a list such as 0,5")
        return None
    if s == "last":
        return s
    for part in s.split(","):
        bounds = part.split("-")
        if not (1 <= len(bounds) <= 2 and all(b.isdigit() for b in bounds)) or (len(bounds) == 2 and int(bounds[0]) > int(bounds[1])):
            raise ValueError(f"sparse_layers={text!r}: expected 'all', 'last', a layer such as 5, a range such as 4-5 "
                             "or a list such as 0,5 (layers counted from 0)")
    return s


@functools.lru_cache(maxsize=256)
def sparse_layer_set(text: str | None, num_layers: int) -> frozenset[int]:
    """The layers (0-based) of a model of ``num_layers`` layers that ``text`` (a :func:`check_sparse_layers` value)
    makes sparse; ValueError where it names a layer the model does not have."""
    if text is None:
        return frozenset(range(num_layers))
    if text == "last":
        return frozenset({num_layers - 1})
    out = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    if max(out) >= num_layers:
        raise ValueError(f"sparse layers {text}: the model has {num_layers} layers (0 to {num_layers - 1})")
    return frozenset(out)


def sparse_layers_words(text: str) -> str:
    """``"the last layer"``, ``"layer 2"``, ``"layers 4-5"``: a :func:`check_sparse_layers` value in words."""
    if text == "last":
        return "the last layer"
    return f"layer {text}" if text.isdigit() else f"layers {text}"


def layer_index(module: nn.Module) -> int:
    """The 0-based layer of an attention module: transformers' ``layer_idx`` (BERT family), else the index attnkit
    gave it when it built or loaded the model (:func:`number_layers`)."""
    idx = getattr(module, "layer_idx", None)
    if idx is None:
        idx = getattr(module, "attnkit_layer", None)
    if idx is None:
        raise RuntimeError(f"{type(module).__name__} does not say which layer it is (no layer_idx): build or load the "
                           "model with attnkit, which numbers its attention modules")
    return int(idx)


_LAYER_IN_NAME = re.compile(r"(?:^|\.)layers?\.(\d+)(?:\.|$)")  # encoder.layer.3.attention, transformer.layer.3, layers.3


def number_layers(model: nn.Module) -> None:
    """Give every attention module of ``model`` its layer index (``attnkit_layer``), for models whose attention
    modules do not carry transformers' ``layer_idx``: its place among :func:`attention_modules`, or, where those do not
    find it (DistilBERT's attention has no ``num_attention_heads``), the N of the ``layer.N`` in its name."""
    for i, m in enumerate(attention_modules(model)):
        if getattr(m, "layer_idx", None) is None:
            m.attnkit_layer = i
    for name, m in model.named_modules():
        hit = _LAYER_IN_NAME.search(name)
        if hit and getattr(m, "layer_idx", None) is None and getattr(m, "attnkit_layer", None) is None:
            m.attnkit_layer = int(hit.group(1))


@dataclass(frozen=True)
class AttentionSpec:
    """What replaces softmax, and the optional locality step.

    ``attention`` is one of :data:`NORMALISERS`; ``lam`` (< 1) only matters for
    sparsegen-lin (SSAF uses the same ``lam`` in every layer and head). ``learn_lam=True``
    (sparsegen-lin only) makes lam a parameter of every layer and head, started at ``lam``:
    ``lam_h = 1 - exp(rho_h)``, so lam < 1 by construction (:func:`add_lam_parameters`).
    ``blur`` ("none" | "context" | "value") puts a parameter-free Gaussian blur of odd
    width ``blur_size`` and scale ``blur_sigma`` on each head's output or on the values
    (SesameBERT); it combines with every normaliser.
    """

    attention: str = "softmax"
    lam: float = 0.0
    blur: str = "none"
    blur_size: int = 3
    blur_sigma: float = 0.3
    learn_lam: bool = False
    alpha: float = 1.5  # entmax-alpha: 1 is softmax, 2 sparsemax
    learn_alpha: bool = False  # entmax-alpha: alpha_h = 1 + sigmoid(a_h) per layer and head, started at alpha
    alpha_mix: float = 1.0  # entmax maps: the way from softmax (0) to the target alpha (1); a warm-up moves it
    sparse_layers: str | None = None  # which layers use the normaliser ("last", "4-5", "0,5"); None: all; the others softmax

    def __post_init__(self):
        name = str(self.attention).lower().replace("_", "-")
        if name == "sparsegen":
            name = "sparsegen-lin"
        if name not in NORMALISERS:
            raise ValueError(f"unknown attention {self.attention!r}: expected one of {', '.join(NORMALISERS)}")
        object.__setattr__(self, "attention", name)
        object.__setattr__(self, "lam", check_lam(self.lam))
        blur = "none" if self.blur in (None, False) else str(self.blur).lower()
        if blur not in BLUR_PLACES:
            raise ValueError(f"unknown blur {self.blur!r}: expected one of {', '.join(BLUR_PLACES)}")
        object.__setattr__(self, "blur", blur)
        size = self.blur_size
        if isinstance(size, bool) or not isinstance(size, (int, float)) or int(size) != size or size < 1 or size % 2 == 0:
            raise ValueError(f"blur_size={size!r}: expected an odd positive integer (the blur window, e.g. 3)")
        object.__setattr__(self, "blur_size", int(size))
        sigma = float(self.blur_sigma)
        if not math.isfinite(sigma) or sigma <= 0:
            raise ValueError(f"blur_sigma={self.blur_sigma!r}: expected a finite number > 0")
        object.__setattr__(self, "blur_sigma", sigma)
        if not isinstance(self.learn_lam, bool):
            raise ValueError(f"learn_lam={self.learn_lam!r}: expected true or false")
        if self.learn_lam and name != "sparsegen-lin":
            raise ValueError(f"learn_lam needs attention sparsegen-lin (lam learned per layer and head), not {name}")
        alpha = check_alpha(self.alpha)  # [1, 2]
        object.__setattr__(self, "alpha", alpha)
        if not isinstance(self.learn_alpha, bool):
            raise ValueError(f"learn_alpha={self.learn_alpha!r}: expected true or false")
        if self.learn_alpha and name != "entmax-alpha":
            raise ValueError(f"learn_alpha needs attention entmax-alpha (alpha learned per layer and head), not {name}")
        if self.learn_alpha and not 1 < alpha < 2:
            raise ValueError(f"learn_alpha: alpha={alpha:g} must lie strictly between 1 and 2 (alpha_h = 1 + sigmoid(a_h))")
        mix = float(self.alpha_mix)
        if not 0 <= mix <= 1:
            raise ValueError(f"alpha_mix={self.alpha_mix!r}: expected a number in [0, 1]")
        object.__setattr__(self, "alpha_mix", mix)
        object.__setattr__(self, "sparse_layers", check_sparse_layers(self.sparse_layers))
        self._refuse_ignored()

    def _refuse_ignored(self) -> None:
        """Settings the map would ignore are refused, as the command line refuses their options: layers named sparse
        under softmax, an alpha or a softmax-to-sparse mix for a map without them."""
        name = self.attention
        if self.sparse_layers is not None and name == "softmax":
            raise ValueError(f"sparse_layers={self.sparse_layers}: needs a sparse attention (softmax is softmax in every layer)")
        if self.alpha != AttentionSpec.alpha and name != "entmax-alpha":
            raise ValueError(f"alpha={self.alpha:g}: only entmax-alpha has an alpha to choose (the attention is {name})")
        if self.alpha_mix != 1.0 and name not in ("entmax15", "entmax-alpha"):
            raise ValueError(f"alpha_mix={self.alpha_mix:g}: only the entmax maps have a softmax-to-sparse mix (the attention is {name})")
        # (a blur's shape without a blur stays allowed: saved configs hold one, e.g. benchmarks/sesame.py's blur_sigma 0.5)

    def kernel(self, dtype=torch.float32, device=None) -> torch.Tensor:
        return _cached_kernel(self.blur_size, self.blur_sigma, dtype, None if device is None else torch.device(device))

    @property
    def is_sparse(self) -> bool:
        return self.attention not in DENSE_NORMALISERS

    def normalise(self, scores: torch.Tensor) -> torch.Tensor:
        """Attention weights from masked scores, along the last dim."""
        return NORMALISERS[self.attention](scores, self)

    def effective_alpha(self, target):
        """alpha at the current point of a softmax-to-sparse warm-up: ``1 + alpha_mix * (target - 1)``."""
        return 1 + self.alpha_mix * (target - 1)

    @property
    def learned(self) -> str | None:
        """Which setting is learned per layer and head ("lam", "alpha"), or None."""
        return "lam" if self.learn_lam else "alpha" if self.learn_alpha else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        # written only when they matter: configs of earlier models stay as older attnkit wrote them
        for key, default in (("learn_lam", False), ("learn_alpha", False), ("alpha_mix", 1.0), ("sparse_layers", None)):
            if d[key] == default:
                del d[key]
        if self.attention != "entmax-alpha":
            del d["alpha"]
        return d

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
        s = f"sparsegen-lin (lam={self.lam:g})" if self.attention == "sparsegen-lin" else self.attention
        if self.learn_lam:
            s = f"sparsegen-lin (lam learned per layer and head, from {self.lam:g})"
        if self.attention == "entmax-alpha":
            s = f"alpha-entmax ({'learned per layer and head, from ' if self.learn_alpha else ''}alpha={self.alpha:g})"
        elif self.attention == "entmax15":
            s = "1.5-entmax"
        if self.sparse_layers is not None:
            s += f" in {sparse_layers_words(self.sparse_layers)} (softmax in the others)"
        if self.blur != "none":
            s += f" + Gaussian blur on {'values' if self.blur == 'value' else 'context'} (k={self.blur_size}, sigma={self.blur_sigma:g})"
            if blur_is_identity(self.blur_size, self.blur_sigma):
                s += " [the identity kernel: no blur]"
        return s

    def blur_note(self) -> str | None:
        """One line for a user whose blur does nothing (its float32 kernel is the identity), else None."""
        if self.blur == "none" or not blur_is_identity(self.blur_size, self.blur_sigma):
            return None
        if self.blur_size == 1:
            return "--blur-size 1 does not blur at any sigma (a window of one token); a blur needs --blur-size 3 or more"
        return (f"--blur-sigma {self.blur_sigma:g} at --blur-size {self.blur_size} does not blur: the float32 kernel is the identity "
                f"(off-centre weights below {IDENTITY_TAIL:g}, lost in every sum), so this run trains the very model of no blur; "
                f"a blur needs a sigma above about 0.1 (width 3: 0.3 gives [0.004, 0.992, 0.004], 0.5 [0.107, 0.787, 0.107])")


@functools.lru_cache(maxsize=32)
def _cached_kernel(size: int, sigma: float, dtype, device) -> torch.Tensor:
    # built once per (size, sigma, dtype, device), not in every layer of every forward
    return gaussian_kernel(size, sigma, dtype=dtype, device=device)


def spec_of(config) -> AttentionSpec:
    """The :class:`AttentionSpec` stored in a transformers config (softmax if none)."""
    d = getattr(config, CONFIG_KEY, None)
    if d is None:
        return AttentionSpec()
    if isinstance(d, AttentionSpec):
        return d
    if torch.compiler.is_compiling():  # traced by torch.compile: built from the config's (constant) settings
        return AttentionSpec(**d)
    try:
        return _spec_from_items(tuple(sorted(d.items())))
    except TypeError:  # unhashable values: let from_dict report them
        return AttentionSpec.from_dict(dict(d))


@functools.lru_cache(maxsize=64)
def _spec_from_items(items: tuple) -> AttentionSpec:
    # the attention function asks for the spec in every layer of every forward: validate it once
    return AttentionSpec.from_dict(dict(items))


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
            raise ValueError(f"{type(module).__name__} passes its attention {name}={_short(given)} ({why}): attnkit's "
                             "attention cannot honour it, so it would not run this model as the model would")
    spec = spec_of(module.config)
    attention_mask = _structural_mask(module, query, key, attention_mask, sliding_window, is_causal)
    key, value = _repeat_kv(key, query.size(1)), _repeat_kv(value, query.size(1))
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(-1, -2)) * scaling  # [B, H, Lq, Lk]
    if softcap is not None:  # Gemma-2's logit soft-capping, before the mask as in its eager attention
        scores = softcap * torch.tanh(scores / softcap)
    valid_mask = attention_mask
    if s_aux is not None:  # one more key per head that every query sees: the sink's logit
        scores, attention_mask = _with_sink(scores, attention_mask, s_aux)
    if spec.sparse_layers is not None and layer_index(module) not in sparse_layer_set(spec.sparse_layers, module.config.num_hidden_layers):
        weights = _softmax(_mask_scores(scores, attention_mask), spec)  # a layer that keeps softmax (--sparse-layers)
    elif spec.learn_lam:  # sparsegen-lin with each head's own lam: sparsemax(z / (1 - lam_h)), 1 - lam_h = exp(rho_h)
        rho = _head_parameter(module, LAM_PARAM)
        # scaled before masking: a masked (-inf) score would give 0 * -inf = NaN in rho's gradient
        scores = scores * torch.exp(-rho).to(scores.dtype)[:, None, None]  # rho [H] -> [H, 1, 1]
        weights = sparsemax(_mask_scores(scores, attention_mask), dim=-1)
    elif spec.learn_alpha:  # alpha-entmax with each head's own alpha_h = 1 + sigmoid(a_h), moved by a warm-up
        alpha = spec.effective_alpha(LEARNED["alpha"].from_raw(_head_parameter(module, ALPHA_PARAM)))  # [H]
        weights = entmax_bisect(_mask_scores(scores, attention_mask), alpha.to(scores.dtype)[:, None, None], dim=-1)
    else:
        weights = spec.normalise(_mask_scores(scores, attention_mask))
    if s_aux is not None:
        weights = weights[..., :-1]  # the sink's share goes nowhere: rows sum to less than 1
    dropped = nn.functional.dropout(weights, p=dropout, training=module.training)
    if spec.blur == "none":
        out = torch.matmul(dropped, value)  # [B, H, Lq, D]
        return out.transpose(1, 2).contiguous(), weights
    kernel = spec.kernel(dtype=torch.promote_types(value.dtype, torch.float32), device=value.device)  # blurred in float32
    valid = _valid_keys(valid_mask, value.size(0), value.size(-2))  # [B, Lk] or None
    if spec.blur == "value":
        out = torch.matmul(dropped, gaussian_blur(value, kernel, valid))
    else:  # context: blur each head's output along the query positions (self-attention: Lq == Lk)
        out = torch.matmul(dropped, value)
        out = gaussian_blur(out, kernel, valid if out.size(-2) == value.size(-2) else None)
    return out.transpose(1, 2).contiguous(), weights


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
        raise ValueError(f"{heads} query heads cannot share {kv} key/value heads (grouped-query attention needs a divisor)")
    return x[:, :, None].expand(b, kv, heads // kv, length, d).reshape(b, heads, length, d)


def _structural_mask(module, query, key, attention_mask, sliding_window, is_causal):
    """The mask of the call, the causal future masked where no mask came and the layer is causal; a sliding window
    without a mask is refused (the window's bounds differ between models: only their masks know them)."""
    if attention_mask is not None:
        return attention_mask
    if sliding_window is not None:
        raise ValueError(f"{type(module).__name__} asks for a sliding window of {sliding_window} but passes no mask that "
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


def _head_parameter(module: nn.Module, name: str) -> torch.Tensor:
    p = getattr(module, name, None)
    if p is None:
        raise RuntimeError(
            f"{type(module).__name__} has no learned per-head parameter {name}: build or load the model with attnkit "
            "(attnkit.models.build_classifier / load_model), which adds it"
        )
    return p


def _valid_keys(attention_mask: torch.Tensor | None, batch: int, length: int) -> torch.Tensor | None:
    """[B, Lk] bool, True for keys some query may attend to (real tokens); None if nothing is masked."""
    if attention_mask is None:
        return None
    m = attention_mask
    keep = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
    if keep.dim() == 4:
        keep = keep.any(dim=1).any(dim=1)  # over heads and queries -> [B, Lk]
    elif keep.dim() == 3:
        keep = keep.any(dim=1)
    return keep.expand(batch, length)


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The modules that call the attention function, in order (one per layer): the innermost
    modules holding ``num_attention_heads`` and a ``config`` (BERT's ``*SelfAttention``, MiniBERT's attention)."""
    found = []
    for m in model.modules():
        if isinstance(getattr(m, "num_attention_heads", None), int) and hasattr(m, "config"):
            if not any(c is not m and isinstance(getattr(c, "num_attention_heads", None), int) for c in m.modules()):
                found.append(m)
    return found


def add_head_parameters(model: nn.Module, values: list[list[float]] | None = None) -> list[nn.Parameter]:
    """Give every attention module of a model whose spec learns a setting per head (``learn_lam``, ``learn_alpha``)
    its parameter [H] (idempotent), started at the spec's value in every head or at ``values`` [layers][heads] (a
    saved model's). Returns the parameters ([] if the spec learns nothing)."""
    spec = spec_of(model.config)
    kind = spec.learned
    if kind is None:
        return []
    entry, start = LEARNED[kind], getattr(spec, kind)
    params = []
    mods = attention_modules(model)
    if values is not None and (len(values) != len(mods) or any(len(v) != m.num_attention_heads for v, m in zip(values, mods))):
        raise ValueError(f"learned {kind} of shape {[len(v) for v in values]} does not fit the model's {[m.num_attention_heads for m in mods]} heads")
    for i, m in enumerate(mods):
        p = getattr(m, entry.param, None)
        if p is None:
            v = torch.full((m.num_attention_heads,), start, dtype=torch.float64) if values is None else torch.tensor(values[i], dtype=torch.float64)
            ref = next(m.parameters(), None)
            p = nn.Parameter(entry.to_raw(v).to(torch.float32 if ref is None else ref.dtype).to(None if ref is None else ref.device))
            m.register_parameter(entry.param, p)
        params.append(p)
    return params


def learned_values(model: nn.Module, kind: str) -> list[list[float]] | None:
    """The learned ``kind`` ("lam", "alpha") of every layer and head [layers][heads] (None if the model has none)."""
    entry = LEARNED[kind]
    ps = [getattr(m, entry.param) for m in attention_modules(model) if hasattr(m, entry.param)]
    if not ps:
        return None
    return [entry.from_raw(p.detach().double()).tolist() for p in ps]


def add_lam_parameters(model: nn.Module, values: list[list[float]] | None = None) -> list[nn.Parameter]:
    """:func:`add_head_parameters` of a ``learn_lam`` model (lam_h = 1 - exp(rho_h) < 1 by construction)."""
    return add_head_parameters(model, values)


def learned_lam(model: nn.Module) -> list[list[float]] | None:
    """lam of every layer and head [layers][heads] of a learn_lam model (None if it has none)."""
    return learned_values(model, "lam")


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
        # boolean masks (True = attend) that _mask_scores turns into -inf; never skipped: deciding to skip reads the
        # padding mask's values on the host (a GPU sync, a graph break under torch.compile, an error on `meta`)
        kwargs["allow_is_bidirectional_skip"] = False
        kwargs["allow_is_causal_skip"] = False
        return sdpa_mask(*args, **kwargs)

    AttentionMaskInterface.register(ATTN_IMPLEMENTATION, attnkit_mask)
    _registered = True
