"""The normalisers (what turns attention scores into weights), one :class:`Normaliser` record each, and their registry.

A normaliser is a record: its name, its function, whether it is dense, the one setting it takes (``lam`` or
``alpha``), how that setting is learned per layer and head, how a warm-up or ``attnkit adapt`` anneals it, and how it
describes itself. The built-ins are registered below; a new one is one call::

    register_normaliser(Normaliser("top2", lambda scores, _: my_map(scores)))

after which ``AttentionSpec("top2")``, ``attnkit train --attention top2`` and every model attnkit builds know it.
"""

from __future__ import annotations

import re

from dataclasses import dataclass
from typing import Any, Callable

import torch

from .entmax import entmax15, entmax_bisect
from .maps import sparsegen_lin, sparsemax
from .names import add_name, remove_name, value_name  # relative: this file also runs as a checkpoint's remote code
from ..errors import UserError

#: the settings a normaliser may take: the fields of :class:`~attnkit.attention.spec.AttentionSpec` it reads
SETTINGS = ("lam", "alpha")
#: how a map is annealed from (nearly) softmax: "alpha" (alpha-entmax, alpha from 1 to the map's), "lam"
#: (sparsegen-lin's temperature 1 - lam from a much larger one to the map's)
ANNEALS = ("alpha", "lam")
#: the map whose lam carries a "lam" anneal (sparsemax is sparsegen-lin at lam 0)
LAM_MAP = "sparsegen-lin"


@dataclass(frozen=True)
class LearnedPerHead:
    """A setting learned per layer and head: the module parameter that holds it (unconstrained) and the maps
    between the two."""

    param: str  # attribute of each attention module, a parameter [H]
    config_key: str  # config.json key of its values [layers][heads] (also in the weights)
    to_raw: Callable[[torch.Tensor], torch.Tensor]  # value -> parameter
    from_raw: Callable[[torch.Tensor], torch.Tensor]  # parameter -> value (differentiable)
    check: Callable[[float], str | None] = lambda start: None  # why a starting value cannot be learned, or None


@dataclass(frozen=True)
class Normaliser:
    """One normaliser. ``fn(scores, setting)`` gives the weights of masked scores ``[..., Lk]`` (``-inf``: masked)
    along the last dim, each row summing to 1 (or all 0 where fully masked). ``setting`` is the value of the map's
    setting: a float, or a tensor ``[H, 1, 1]`` (one per head) where it is learned or annealed per head; None for a
    map without one, except that a map of the alpha anneal gets its current alpha while a warm-up moves it."""

    name: str
    fn: Callable[[torch.Tensor, Any], torch.Tensor]
    dense: bool = False  # weights never exactly 0 on unmasked entries
    setting: str | None = None  # "lam" | "alpha": the one setting it takes (an AttentionSpec field)
    learned: LearnedPerHead | None = None  # how that setting is learned per layer and head (None: it is not)
    anneal: str | None = None  # how a warm-up and `attnkit adapt` move it from (nearly) softmax: "alpha", "lam", None
    alpha: float | None = None  # an alpha-anneal map's fixed alpha (entmax15: 1.5); None: its setting is alpha
    description: Callable[[Any], str] | None = None  # how it describes itself (default: its name)

    def describe(self, spec: Any) -> str:
        return self.description(spec) if self.description is not None else self.name

    def target_alpha(self, spec: Any):
        """The alpha an alpha anneal moves to: the map's own, else the spec's."""
        return self.alpha if self.alpha is not None else spec.alpha


def softmax(scores: torch.Tensor, setting=None) -> torch.Tensor:
    """Softmax along the last dim; a fully masked row (all -inf) gives zeros, like the sparse maps (not NaN)."""
    p = torch.softmax(scores, dim=-1, dtype=torch.float32)
    return torch.nan_to_num(p, nan=0.0).to(scores.dtype)


def taylor(scores: torch.Tensor, setting=None) -> torch.Tensor:
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


def _entmax15(scores: torch.Tensor, alpha=None) -> torch.Tensor:
    # alpha: a softmax-to-sparse warm-up's alpha between 1 and 1.5, by bisection
    return entmax15(scores, dim=-1) if alpha is None else entmax_bisect(scores, alpha, dim=-1)


def _describe_lam(spec: Any) -> str:
    if spec.learned == "lam":
        return f"sparsegen-lin (lam learned per layer and head, from {value_name(spec.lam)})"
    return f"sparsegen-lin (lam={value_name(spec.lam)})"


def _describe_alpha(spec: Any) -> str:
    return f"alpha-entmax ({'learned per layer and head, from ' if spec.learned == 'alpha' else ''}alpha={value_name(spec.alpha)})"


def _alpha_start(alpha: float) -> str | None:
    return None if 1 < alpha < 2 else f"alpha={alpha:g} must lie strictly between 1 and 2 (alpha_h = 1 + sigmoid(a_h))"


#: lam learned per head: rho [H], lam_h = 1 - exp(rho_h) < 1 by construction
LEARNED_LAM = LearnedPerHead("attnkit_lam_rho", "attnkit_lam", lambda v: torch.log1p(-v), lambda r: 1.0 - torch.exp(r))
#: alpha learned per head: a [H], alpha_h = 1 + sigmoid(a_h) in (1, 2)
LEARNED_ALPHA = LearnedPerHead("attnkit_alpha_logit", "attnkit_alpha", lambda v: torch.logit(v - 1.0),
                               lambda r: 1.0 + torch.sigmoid(r), _alpha_start)

#: name -> record, in the order registered (the built-ins first)
NORMALISERS: dict[str, Normaliser] = {}
#: setting -> how it is learned per layer and head, for every registered normaliser that learns one
LEARNED: dict[str, LearnedPerHead] = {}


def register_normaliser(normaliser: Normaliser) -> Normaliser:
    """Make ``normaliser`` known to :class:`~attnkit.attention.spec.AttentionSpec`, the models and the command line.
    ValueError for a name already taken or a record whose fields do not fit together. Returns the record."""
    n = normaliser
    if not isinstance(n, Normaliser):
        raise TypeError(f"register_normaliser takes a Normaliser, got {type(n).__name__}")
    if not isinstance(n.name, str) or not n.name.strip():
        raise UserError(f"normaliser name {n.name!r}: a normaliser needs a name (lower case, '-' between words, e.g. 'my-map')")
    if not _NAME.fullmatch(n.name):
        hint = re.sub(r"[^a-z0-9]+", "-", canonical(n.name)).strip("-")
        raise UserError(f"normaliser name {n.name!r}: expected lower case letters and digits with '-' between words, "
                        f"starting with a letter" + (f", e.g. {hint!r}" if _NAME.fullmatch(hint) else ""))
    if not callable(n.fn):
        raise UserError(f"normaliser {n.name}: fn is {type(n.fn).__name__}: expected a function fn(scores, setting) that "
                        "gives the weights")
    if n.name in NORMALISERS:
        raise UserError(f"a normaliser named {n.name!r} is already registered")
    if n.setting is not None and n.setting not in SETTINGS:
        raise UserError(f"normaliser {n.name}: setting {n.setting!r}: expected one of {', '.join(SETTINGS)} or None")
    if n.learned is not None and (n.setting is None or LEARNED.get(n.setting, n.learned) != n.learned):
        raise UserError(f"normaliser {n.name}: a learned setting needs its setting, learned one way ({n.setting!r})")
    if n.anneal is not None and (n.anneal not in ANNEALS or (n.anneal == "alpha" and n.alpha is None and n.setting != "alpha")):
        raise UserError(f"normaliser {n.name}: anneal {n.anneal!r}: expected one of {', '.join(ANNEALS)} or None "
                         "(an alpha anneal needs the map's alpha, or alpha as its setting)")
    NORMALISERS[n.name] = n
    if n.learned is not None:
        LEARNED[n.setting] = n.learned
    add_name(n.name, n.anneal is not None)
    return n


def unregister_normaliser(name: str) -> None:
    """Forget a normaliser registered at run time (the built-ins stay)."""
    if name in BUILTIN_NAMES:
        raise UserError(f"{name} is a built-in normaliser: it cannot be unregistered")
    NORMALISERS.pop(name, None)
    _CHECKED.discard(name)
    remove_name(name)


#: a registered name: lower-case letters and digits, '-' between words, a letter first ("sparsegen-lin", "entmax15")
_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")

#: the normalisers registered at run time whose first weights were checked (a distribution per row), once a process
_CHECKED: set[str] = set()


def check_weights(name: str, scores: torch.Tensor, weights) -> None:
    """A registered (not built-in) normaliser's output, checked: a tensor of the scores' shape at every call (no cost),
    and, until one call has passed in this process, a distribution per row (finite, >= 0, summing to 1 where a row has a score
    that is not -inf, 0 where a score is -inf: one host sync, once). UserError naming the normaliser, never a shape error
    deep inside torch's matmul or weights that are not attention, used without a word."""
    if not isinstance(weights, torch.Tensor) or weights.shape != scores.shape:
        got = f"shape {tuple(weights.shape)}" if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise UserError(f"normaliser {name} returned {got} for scores of shape {tuple(scores.shape)}: expected weights "
                        "of the scores' shape (one row per query, over the keys along the last dim)")
    if (name in _CHECKED or weights.device.type == "meta" or torch.compiler.is_compiling()
            or torch._C._are_functorch_transforms_active()):  # no values to look at: traced, vmapped, meta
        return
    with torch.no_grad():
        w, masked = weights.detach().float(), scores.detach() == float("-inf")
        live = ~masked.all(-1)
        tol = 1e-2 if weights.dtype in (torch.float16, torch.bfloat16) else 1e-4
        sums = w.sum(-1)[live]
        finite = torch.isfinite(w).all(-1)
        problem = ("values that are not finite (NaN) in a row whose scores are all -inf (a fully masked row: give zeros "
                   "there, e.g. with torch.nan_to_num)" if bool(finite[live].all()) and not bool(finite.all()) else
                   "values that are not finite (NaN or inf)" if not bool(finite.all()) else
                   f"a negative weight ({w.min().item():.3g})" if (w < -tol).any() else
                   f"a row summing to {sums[(sums - 1).abs().argmax()].item():.4g}, not 1" if sums.numel() and
                   ((sums - 1).abs() > tol).any() else
                   "weight on a masked (-inf) score" if (w[masked] != 0).any() else None)
    if problem is None:
        _CHECKED.add(name)
        return
    raise UserError(f"normaliser {name}: its weights on the first scores it was given hold {problem}: expected a "
                    "distribution per row (weights >= 0 summing to 1, 0 where the score is -inf)")


def canonical(name) -> str:
    """A normaliser name as registered: lower case, '-' for '_' ("sparsegen" is sparsegen-lin)."""
    s = str(name).lower().replace("_", "-")
    return "sparsegen-lin" if s == "sparsegen" else s


def normaliser(name) -> Normaliser:
    """The record of ``name`` (any case, '_' or '-'); ValueError naming the registered ones."""
    found = NORMALISERS.get(canonical(name))
    if found is None:
        raise UserError(f"unknown attention {name!r}: expected one of {', '.join(NORMALISERS)}")
    return found


def names_with(**fields) -> list[str]:
    """The registered names whose records have these field values, e.g. ``names_with(setting="lam")``."""
    return [k for k, n in NORMALISERS.items() if all(getattr(n, f) == v for f, v in fields.items())]


for _builtin in (
    Normaliser("softmax", softmax, dense=True),
    Normaliser("taylor", taylor, dense=True),
    Normaliser("sparsemax", lambda scores, _: sparsemax(scores, dim=-1), anneal="lam"),
    Normaliser("sparsegen-lin", lambda scores, lam: sparsegen_lin(scores, lam, dim=-1), setting="lam",
               learned=LEARNED_LAM, anneal="lam", description=_describe_lam),
    Normaliser("entmax15", _entmax15, anneal="alpha", alpha=1.5, description=lambda spec: "1.5-entmax"),
    Normaliser("entmax-alpha", lambda scores, alpha: entmax_bisect(scores, alpha, dim=-1), setting="alpha",
               learned=LEARNED_ALPHA, anneal="alpha", description=_describe_alpha),
):
    register_normaliser(_builtin)

#: the built-in normalisers (:data:`attnkit.attention.names.NORMALISER_NAMES` holds the same, without torch)
BUILTIN_NAMES = tuple(NORMALISERS)
