"""Settings learned per layer and head (lam, alpha): the parameters that hold them in a model, and their values."""

from __future__ import annotations

import torch
from torch import nn

from .normalisers import LEARNED  # relative: this file also runs as a checkpoint's remote code
from .placement import attention_modules
from .spec import AttentionSpec, spec_of
from ..errors import UserError


def add_head_parameters(model: nn.Module, values: list[list[float]] | None = None) -> list[nn.Parameter]:
    """Give every attention module of a model whose spec learns a setting per head (``learned``) its parameter [H]
    (idempotent), started at the spec's value in every head or at ``values`` [layers][heads] (a saved model's).
    Returns the parameters ([] if the spec learns nothing)."""
    spec = spec_of(model.config)
    kind = spec.learned
    if kind is None:
        return []
    entry, start = LEARNED[kind], getattr(spec, kind)
    params = []
    mods = attention_modules(model)
    if values is not None and (len(values) != len(mods) or any(len(v) != m.num_attention_heads for v, m in zip(values, mods))):
        raise UserError(f"learned {kind} of shape {[len(v) for v in values]} does not fit the model's {[m.num_attention_heads for m in mods]} heads")
    for i, m in enumerate(mods):
        p = getattr(m, entry.param, None)
        if p is None:
            v = torch.full((m.num_attention_heads,), start, dtype=torch.float64) if values is None else torch.tensor(values[i], dtype=torch.float64)
            ref = next(m.parameters(), None)
            p = nn.Parameter(entry.to_raw(v).to(torch.float32 if ref is None else ref.dtype).to(None if ref is None else ref.device))
            m.register_parameter(entry.param, p)
        params.append(p)
    return params


def remove_head_parameters(model: nn.Module, kind: str) -> None:
    """Take the parameters that hold ``kind`` ("lam", "alpha") per head out of every attention module of ``model``."""
    name = LEARNED[kind].param
    for m in attention_modules(model):
        m._parameters.pop(name, None)


def learned_values(model: nn.Module, kind: str) -> list[list[float]] | None:
    """The learned ``kind`` ("lam", "alpha") of every layer and head [layers][heads] (None if the model has none)."""
    entry = LEARNED[kind]
    ps = [getattr(m, entry.param) for m in attention_modules(model) if hasattr(m, entry.param)]
    if not ps:
        return None
    return [entry.from_raw(p.detach().double()).tolist() for p in ps]


def head_value(module: nn.Module, spec: AttentionSpec) -> torch.Tensor | None:
    """The value [H] of the setting ``module`` learns per head (differentiable in its parameter); None where the
    spec learns none."""
    if spec.learned is None:
        return None
    entry = LEARNED[spec.learned]
    p = getattr(module, entry.param, None)
    if p is None:
        raise RuntimeError(
            f"{type(module).__name__} has no learned per-head parameter {entry.param}: build or load the model with attnkit "
            "(attnkit.models.build_classifier / load_model), which adds it"
        )
    return entry.from_raw(p)
