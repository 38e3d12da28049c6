"""``sparsify``: attnkit's attention in a model already built, for any architecture whose attention goes through
transformers' attention interface, or a refusal naming what it cannot honour.
"""

from __future__ import annotations

import ast
import functools
import inspect
import logging
import textwrap

from transformers.models.auto import modeling_auto

from attnkit.attention.forward import attnkit_attention_forward, keyword_refusal
from attnkit.attention.learned import add_head_parameters, learned_values, remove_head_parameters
from attnkit.attention.normalisers import LEARNED, names_with
from attnkit.attention.own_code import adopt, has_own_attention
from attnkit.attention.placement import attention_modules, check_layers_apart, sparse_layer_set
from attnkit.attention.spec import AttentionSpec, spec_of
from attnkit.errors import UserError
from attnkit.models.build import attnkit_config, finish_model
from attnkit.models.checkpoint import set_attention
from attnkit.models.modeling_attnkit import (
    AttnkitConfig,
    concrete_class,
    record_outputs,
    register,
)

#: what sparsify takes: (kind, transformers' Auto mapping name)
_SPARSIFY_KINDS = (
    ("model", "MODEL_MAPPING"),
    ("sequence-classification", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING"),
    ("token-classification", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING"),
    ("question-answering", "MODEL_FOR_QUESTION_ANSWERING_MAPPING"),
    ("masked-lm", "MODEL_FOR_MASKED_LM_MAPPING"),
)


@functools.lru_cache(maxsize=None)
def _attention_call_keywords(cls) -> tuple[str, ...]:
    """The keywords (with a value other than None) that ``cls.forward`` passes to the attention function it takes from
    transformers' registry (``attention_interface(...)``), read from its code; () where there is no such call or no code."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    except (OSError, TypeError, SyntaxError):
        return ()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "attention_interface":
            found += [k.arg for k in node.keywords
                      if k.arg is not None and not (isinstance(k.value, ast.Constant) and k.value.value is None)]
    return tuple(dict.fromkeys(found))


def _refuse_attention_keywords(model) -> None:
    """ValueError naming the first keyword some attention layer of ``model`` passes to its attention function that
    attnkit's attention would refuse at the first forward (a relative position bias, a sparse-attention indexer, ...)."""
    own = set(inspect.signature(attnkit_attention_forward).parameters)
    for cls in dict.fromkeys(type(m) for m in model.modules()):
        for name in _attention_call_keywords(cls):
            why = None if name in own else keyword_refusal(name)
            if why is not None:
                raise UserError(f"{cls.__name__} passes its attention function {name} ({why}), which attnkit's "
                                 f"attention cannot honour: sparsify would not run {type(model).__name__} as the model would")


def _sparsify_settings(attention: str, lam: float | None, alpha: float | None) -> tuple[float, float]:
    """``(lam, alpha)`` for ``attention``: -4 and 1.5 where not given; a lam other than 0 with an attention that has
    none, or an alpha other than 1.5 with one that is not entmax-alpha, is refused (it would be ignored), as the CLI
    refuses --lam/--alpha there."""
    norm = AttentionSpec(attention).normaliser
    name, lam_maps, alpha_maps = norm.name, " or ".join(names_with(setting="lam")), " or ".join(names_with(setting="alpha"))
    if lam is not None and norm.setting != "lam" and lam != AttentionSpec.lam:
        raise UserError(f"sparsify(attention={attention!r}, lam={lam!r}): only {lam_maps} has a lam; "
                        f"leave lam out, or use attention='{lam_maps}'")
    if alpha is not None and norm.setting != "alpha" and alpha != AttentionSpec.alpha:
        raise UserError(f"sparsify(attention={attention!r}, alpha={alpha!r}): only {alpha_maps} has an alpha "
                        f"({name} has {'none' if norm.alpha is None else f'{norm.alpha:g}'}); leave alpha out, or use attention='{alpha_maps}'")
    lam = (-4.0 if lam is None else lam) if norm.setting == "lam" else AttentionSpec.lam  # a map without a lam holds 0
    return lam, (AttentionSpec.alpha if alpha is None else alpha)


def _spec_of_settings(spec: AttentionSpec | None, attention, lam, alpha, **rest) -> AttentionSpec:
    """``spec`` itself, or the :class:`AttentionSpec` of the settings given one by one (not both)."""
    if spec is None:
        lam, alpha = _sparsify_settings(attention or "sparsegen-lin", lam, alpha)
        return AttentionSpec(attention or "sparsegen-lin", lam, alpha=alpha, **rest)
    if not isinstance(spec, AttentionSpec):
        raise UserError(f"sparsify(spec=...) takes an AttentionSpec, got {type(spec).__name__}")
    defaults = inspect.signature(sparsify).parameters  # the settings' defaults, as sparsify declares them
    given = [k for k, v in (("attention", attention), ("lam", lam), ("alpha", alpha)) if v is not None]
    given += [k for k, v in rest.items() if v != defaults[k].default]
    if given:
        raise UserError(f"sparsify(spec=..., {', '.join(given)}=...): give the attention as spec or as settings, not both")
    return spec


def _settings_kept(old: AttentionSpec, attention: str, lam, alpha) -> tuple:
    """``(lam, alpha)`` for an attnkit model sparsified again: each left out (None) is the model's own where the new
    attention has that setting and the model's has it too (not sparsify's default: the per-head values learned from
    it would start again there)."""
    setting = AttentionSpec(attention).normaliser.setting
    if setting == old.normaliser.setting == "lam" and lam is None:
        lam = old.lam
    if setting == old.normaliser.setting == "alpha" and alpha is None:
        alpha = old.alpha
    return lam, alpha


def _settle_learned(model, old: AttentionSpec, new: AttentionSpec) -> None:
    """Before an attnkit model takes ``new``: the settings it learned per head under ``old`` are kept where ``new``
    learns the same setting from the same start; where ``new`` learns none, or starts elsewhere (``lam=`` given
    anew), they are taken out (they would be saved unused, or the new start ignored), and a warning says so."""
    for kind in LEARNED:
        values = learned_values(model, kind)
        if values is None or (new.learned == kind and getattr(new, kind) == getattr(old, kind)):
            continue
        remove_head_parameters(model, kind)
        fate = (f"start again at {kind}={getattr(new, kind):g}, as given" if new.learned == kind
                else "are dropped: the new attention learns none")
        logging.getLogger("attnkit").warning("sparsify: the %s learned per head (%d layers, %.4g to %.4g) %s", kind,
                                             len(values), min(map(min, values)), max(map(max, values)), fate)


def sparsify(model, attention: str | None = None, lam: float | None = None, *, blur: str = "none", blur_size: int = 3,
             blur_sigma: float = 0.3, learned: str | None = None, alpha: float | None = None,
             sparse_layers: str | None = None, spec: AttentionSpec | None = None):
    """Switch a loaded transformers model to attnkit's attention, in place, and return it.

    Works for a bare encoder and for its sequence classification, token classification, question answering and
    masked-LM models, for every architecture whose attention goes through transformers' attention registry
    (``AttentionInterface``). The model becomes attnkit's class for its kind (same weights, same parameter names)
    with an :class:`AttnkitConfig`, so ``save_pretrained`` writes a self-describing checkpoint that reloads
    with the same attention. DeBERTa-v2/v3 and MPNet, whose attention is their own code, get attnkit's map inside it
    (:mod:`attnkit.attention.own_code`; their relative-position terms kept). Raises ValueError for another
    architecture with its own attention code, or one whose attention layers pass their attention function something it cannot honour (a relative position bias, the
    keys a sparse-attention indexer picked: ``ATTENTION_KEYWORDS`` in ``attnkit.attention.forward``). Decoders run too:
    grouped-query attention, soft-capping (Gemma-2), sliding windows, attention sinks (gpt-oss).
    ``lam`` (default -4) is sparsegen-lin's and ``alpha`` (default 1.5) entmax-alpha's: given with another attention,
    they are refused, not ignored. ``spec``: an :class:`AttentionSpec` instead of the settings one by one (then none of
    them may be given). The default attention is sparsegen-lin. Sparsifying an attnkit model again: a lam or alpha left
    out is the model's own; the values it learned per head are kept where the new attention learns the same setting
    from the same start, and otherwise dropped or started again at the value given, with a warning.
    """
    register()
    if not hasattr(model, "config"):  # a torch module but not a transformers model: AttributeError 'config' before
        raise TypeError(f"sparsify takes a loaded transformers model (with a .config), got {type(model).__name__}")
    if spec is None and isinstance(model.config, AttnkitConfig):  # sparsified again: a setting left out is the model's
        lam, alpha = _settings_kept(spec_of(model.config), attention or "sparsegen-lin", lam, alpha)
    spec = _spec_of_settings(spec, attention, lam, alpha, blur=blur, blur_size=blur_size, blur_sigma=blur_sigma,
                             learned=learned, sparse_layers=sparse_layers)
    if spec.sparse_layers is not None and getattr(model.config, "num_hidden_layers", None):
        sparse_layer_set(spec.sparse_layers, model.config.num_hidden_layers)  # a layer it lacks: refused before any change
        check_layers_apart(model, spec.sparse_layers)
    name = type(model).__name__
    if isinstance(model.config, AttnkitConfig):  # already attnkit's: change the attention
        _settle_learned(model, spec_of(model.config), spec)
        set_attention(model, spec)
        return finish_model(model, spec)
    own = has_own_attention(model)  # DeBERTa-v2/v3, MPNet: attnkit's map inside their own attention code
    if not getattr(model, "_supports_attention_backend", False) and not own:
        raise UserError(
            f"{name} computes its attention in its own code, not through transformers' attention registry "
            "(AttentionInterface), so attnkit cannot replace its softmax"
        )
    _refuse_attention_keywords(model)
    if spec.learned and not own and not attention_modules(model):  # before the model is changed: a refusal leaves it
        raise UserError(f"learned={spec.learned!r}: {name}'s attention modules do not say their number of heads "
                        f"(num_attention_heads), so no {spec.learned} can be learned per head; leave learned out")
    base_cfg = type(model.config)
    kind = next((k for k, m in _SPARSIFY_KINDS if getattr(modeling_auto, m).get(base_cfg, None) is type(model)), None)
    if kind is None:
        raise UserError(f"sparsify takes a bare encoder or a sequence classification, token classification, question "
                         f"answering or masked-LM model; {name} is none of them")
    old = model.config
    config = attnkit_config(old, spec)
    for m in model.modules():  # every module that holds the model's config gets the new one
        if getattr(m, "config", None) is old:
            m.config = config
    model.__class__ = concrete_class(config, kind)
    adopt(model, config)
    record_outputs(model)  # transformers 5 records attentions/hidden states by the model's class, registered in __init__
    if spec.learned and not add_head_parameters(model):
        raise UserError(f"learned={spec.learned!r}: no attention modules with num_attention_heads found in {name}")
    return finish_model(model, spec)
