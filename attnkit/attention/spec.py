"""The attention composition: :class:`AttentionSpec` (score projection x normaliser x blur x layers), stored in a config.

An attention layer here is a composition of

    scores     = (x W_q)(x W_k)^T * scaling (+ padding mask)      score projection (the model's own)
    weights    = normaliser(scores)                               a registered :class:`Normaliser`
    output     = blur(weights @ blur(x W_v))                      optional Gaussian blur (locality step),
                                                                  on the values or on each head's output

Each paper is a configuration of those pieces, held in an :class:`AttentionSpec`. For a Hugging Face encoder the
spec is stored in the model config as ``config.attnkit`` (a plain dict, so it is saved in ``config.json``) and the
model runs with ``attn_implementation="attnkit"`` (:mod:`forward`).
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

import torch

from .blur import BLUR_PLACES, IDENTITY_TAIL, blur_is_identity, cached_kernel  # relative: this file also runs as a checkpoint's remote code
from .entmax import check_alpha
from .maps import check_lam
from .normalisers import BUILTIN_NAMES, LEARNED, Normaliser, check_weights, names_with, normaliser
from .placement import check_sparse_layers, sparse_layers_words
from ..errors import UserError

ATTN_IMPLEMENTATION = "attnkit"
CONFIG_KEY = "attnkit"
#: keys of configs written before ``learned``: each names the setting it learned
OLD_LEARNED_KEYS = {"learn_lam": "lam", "learn_alpha": "alpha"}


@dataclass(frozen=True)
class AttentionSpec:
    """What replaces softmax, and the optional locality step.

    ``attention`` names a registered :class:`Normaliser`; ``lam`` (< 1) and ``alpha`` ([1, 2]) are the settings of
    the maps that take them (sparsegen-lin, entmax-alpha). ``learned`` ("lam", "alpha" or None) makes the map's setting
    a parameter of every layer and head, started at the spec's value. ``alpha_mix`` is the way from softmax (0) to
    the map (1) of an alpha-anneal map, which a warm-up moves. ``blur`` ("none" | "context" | "value") puts a
    parameter-free Gaussian blur of odd width ``blur_size`` and scale ``blur_sigma`` on each head's output or on the
    values (SesameBERT); it combines with every normaliser. ``sparse_layers`` names the layers that use the map
    ("last", "4-5", "0,5"; None: all); the others keep softmax.
    """

    attention: str = "softmax"
    lam: float = 0.0
    blur: str = "none"
    blur_size: int = 3
    blur_sigma: float = 0.3
    learned: str | None = None
    alpha: float = 1.5
    alpha_mix: float = 1.0
    sparse_layers: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "attention", normaliser(self.attention).name)
        object.__setattr__(self, "lam", check_lam(self.lam))
        object.__setattr__(self, "alpha", check_alpha(self.alpha))  # [1, 2]
        self._check_blur()
        self._check_learned()
        mix = float(self.alpha_mix)
        if not 0 <= mix <= 1:
            raise UserError(f"alpha_mix={self.alpha_mix!r}: expected a number in [0, 1]")
        object.__setattr__(self, "alpha_mix", mix)
        object.__setattr__(self, "sparse_layers", check_sparse_layers(self.sparse_layers))
        self._refuse_ignored()

    def _check_blur(self) -> None:
        blur = "none" if self.blur in (None, False) else str(self.blur).lower()
        if blur not in BLUR_PLACES:
            raise UserError(f"unknown blur {self.blur!r}: expected one of {', '.join(BLUR_PLACES)}")
        object.__setattr__(self, "blur", blur)
        size = self.blur_size
        if isinstance(size, bool) or not isinstance(size, (int, float)) or int(size) != size or size < 1 or size % 2 == 0:
            raise UserError(f"blur_size={size!r}: expected an odd positive integer (the blur window, e.g. 3)")
        object.__setattr__(self, "blur_size", int(size))
        sigma = float(self.blur_sigma)
        if not math.isfinite(sigma) or sigma <= 0:
            raise UserError(f"blur_sigma={self.blur_sigma!r}: expected a finite number > 0")
        object.__setattr__(self, "blur_sigma", sigma)

    def _check_learned(self) -> None:
        kind = self.learned
        if kind is None:
            return
        if kind not in LEARNED:
            raise UserError(f"learned={kind!r}: expected None or a setting learned per layer and head ({', '.join(LEARNED)})")
        if self.normaliser.learned is None or self.normaliser.setting != kind:
            maps = [n for n in names_with(setting=kind) if normaliser(n).learned is not None]
            raise UserError(f"learned={kind} needs attention {' or '.join(maps)} ({kind} learned per layer and head), not {self.attention}")
        why = LEARNED[kind].check(getattr(self, kind))
        if why is not None:
            raise UserError(f"learned={kind}: {why}")

    def _refuse_ignored(self) -> None:
        """Settings the map would ignore are refused, as the command line refuses their options: layers named sparse
        under softmax, an alpha or a softmax-to-sparse mix for a map without them."""
        norm, name = self.normaliser, self.attention
        if self.lam != 0.0 and norm.setting != "lam":
            raise UserError(f"lam={self.lam:g}: only {' or '.join(names_with(setting='lam'))} has a lam (the attention is "
                            f"{name}, which would ignore it)")
        if self.sparse_layers is not None and name == "softmax":
            raise UserError(f"sparse_layers={self.sparse_layers}: needs a sparse attention (softmax is softmax in every layer)")
        if self.alpha != AttentionSpec.alpha and norm.setting != "alpha":
            raise UserError(f"alpha={self.alpha:g}: only {' or '.join(names_with(setting='alpha'))} has an alpha to choose (the attention is {name})")
        if self.alpha_mix != 1.0 and norm.anneal != "alpha":
            raise UserError(f"alpha_mix={self.alpha_mix:g}: only the entmax maps have a softmax-to-sparse mix (the attention is {name})")
        if self.blur == "none" and (self.blur_size, self.blur_sigma) != (AttentionSpec.blur_size, AttentionSpec.blur_sigma):
            given = [f"{k}={v:g}" for k, v in (("blur_size", self.blur_size), ("blur_sigma", self.blur_sigma))
                     if v != getattr(AttentionSpec, k)]  # the ones given (their defaults are no choice)
            raise UserError(f"{', '.join(given)}: {'they shape' if len(given) > 1 else 'it shapes'} a blur, and there is "
                            "none (add blur='context' or blur='value')")

    @property
    def normaliser(self) -> Normaliser:
        """The record of the spec's map."""
        return normaliser(self.attention)

    def kernel(self, dtype=torch.float32, device=None) -> torch.Tensor:
        return cached_kernel(self.blur_size, self.blur_sigma, dtype, None if device is None else torch.device(device))

    @property
    def is_sparse(self) -> bool:
        return not self.normaliser.dense

    def setting_value(self, learned_value=None):
        """The value the map's function gets: its setting (``learned_value`` [H] where it is learned per head, as
        ``[H, 1, 1]``), moved by an alpha warm-up (``alpha_mix``); None for a map without a setting."""
        norm = self.normaliser
        value = None
        if norm.setting is not None:
            value = getattr(self, norm.setting) if learned_value is None else learned_value[:, None, None]
        if self.alpha_mix != 1.0:
            value = self.effective_alpha(norm.alpha if norm.alpha is not None else value)
        return value

    def normalise(self, scores: torch.Tensor, learned_value=None) -> torch.Tensor:
        """Attention weights from masked scores, along the last dim (``learned_value``: see :meth:`setting_value`)."""
        norm = self.normaliser
        weights = norm.fn(scores, self.setting_value(learned_value))
        if norm.name not in BUILTIN_NAMES:  # a user's map: its output checked (the built-ins are tested)
            check_weights(norm.name, scores, weights)
        return weights

    def effective_alpha(self, target):
        """alpha at the current point of a softmax-to-sparse warm-up: ``1 + alpha_mix * (target - 1)``."""
        return 1 + self.alpha_mix * (target - 1)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        # written only when they matter: configs of earlier models stay as older attnkit wrote them
        for key, default in (("learned", None), ("alpha_mix", 1.0), ("sparse_layers", None)):
            if d[key] == default:
                del d[key]
        if self.normaliser.setting != "alpha":
            del d["alpha"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "AttentionSpec":
        d = spec_dict(d)
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise UserError(
                f"unknown attention setting(s) {sorted(unknown)} in config '{CONFIG_KEY}': "
                f"this attnkit knows {sorted(known)}; was the checkpoint made by a newer attnkit?"
            )
        return cls(**d)

    def describe(self) -> str:
        s = self.normaliser.describe(self)
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


def upgraded(d: dict[str, Any], where: str = f"config '{CONFIG_KEY}'") -> dict[str, Any]:
    """A spec's (or a run's settings') dict with an older attnkit's ``learn_lam`` / ``learn_alpha`` (true or false) as
    ``learned``."""
    if not any(k in d for k in OLD_LEARNED_KEYS):
        return d
    old = [v for k, v in OLD_LEARNED_KEYS.items() if d.get(k)]
    if len(old) > 1 or (old and d.get("learned", old[0]) != old[0]):
        raise UserError(f"{where} learns more than one setting per head ({', '.join(old)}): attnkit learns one")
    new = {k: v for k, v in d.items() if k not in OLD_LEARNED_KEYS}
    if old:
        new["learned"] = old[0]
    return new


def spec_dict(d: dict[str, Any]) -> dict[str, Any]:
    """A stored spec's dict as this attnkit reads it: :func:`upgraded`, and without the lam an older attnkit recorded
    for a map that has none (the task's paper lam beside 1.5-entmax: ignored then, refused now), or a blur's shape
    recorded without a blur."""
    d = upgraded(d)
    if d.get("lam") and isinstance(d.get("attention"), str) and _setting_of(d["attention"]) not in (None, "lam"):
        d = {k: v for k, v in d.items() if k != "lam"}
    if d.get("blur", "none") == "none":  # a blur's shape recorded without a blur (ignored then, refused now)
        d = {k: v for k, v in d.items() if k not in ("blur_size", "blur_sigma")}
    return d


def _setting_of(name: str) -> str | None:
    """The setting a map's name takes ("lam", "alpha", "" for none), or None for a name no map has."""
    try:
        return normaliser(name).setting or ""
    except (UserError, KeyError):
        return None


def spec_of(config) -> AttentionSpec:
    """The :class:`AttentionSpec` stored in a transformers config (softmax if none)."""
    d = getattr(config, CONFIG_KEY, None)
    if d is None:
        return AttentionSpec()
    if isinstance(d, AttentionSpec):
        return d
    if torch.compiler.is_compiling():  # traced by torch.compile: built from the config's (constant) settings
        return AttentionSpec(**spec_dict(d))
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
