"""Layer placement: which layers use the sparse map (``--sparse-layers``), and which layer an attention module is."""

from __future__ import annotations

import functools
import re

from torch import nn
from ..errors import UserError


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
            raise UserError("sparse_layers='': expected 'all', 'last', a layer such as 5, a range such as 4-5 or a list such as 0,5")
        return None
    if s == "last":
        return s
    seen: set[int] = set()
    for part in s.split(","):
        bounds = part.split("-")
        if not (1 <= len(bounds) <= 2 and all(b.isdigit() for b in bounds)) or (len(bounds) == 2 and int(bounds[0]) > int(bounds[1])):
            raise UserError(f"sparse_layers={text!r}: expected 'all', 'last', a layer such as 5, a range such as 4-5 "
                             "or a list such as 0,5 (layers counted from 0)")
        layers = set(range(int(bounds[0]), int(bounds[-1]) + 1))
        if layers & seen:  # ('0,0' was taken and recorded as written: a run of layer 0 under another name)
            raise UserError(f"sparse_layers={text!r}: layer {min(layers & seen)} is named twice; name each layer once")
        seen |= layers
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
        raise UserError(f"sparse layers {text}: the model has {num_layers} layers (0 to {num_layers - 1})")
    return frozenset(out)


def check_layers_apart(model: nn.Module, text: str | None) -> None:
    """Refuse ``sparse_layers`` (``text``) for a model whose layers share their attention modules (ALBERT: one layer's
    weights run N times): one module cannot be sparse in some layers and not in others (it was all or none, silently)."""
    if text is None:
        return
    layers = getattr(model.config, "num_hidden_layers", None)
    mods = attention_modules(model)
    if isinstance(layers, int) and 0 < len(mods) < layers:
        raise UserError(f"sparse layers {text}: {type(model).__name__}'s {layers} layers share {len(mods)} attention "
                        f"module{'s' if len(mods) > 1 else ''} (one layer's weights run in several), so the attention "
                        "cannot be sparse in some layers only; leave the sparse layers out to make every layer sparse")


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



def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The modules that call the attention function, in order (one per layer): the innermost
    modules holding ``num_attention_heads`` and a ``config`` (BERT's ``*SelfAttention``, MiniBERT's attention)."""
    found = []
    for m in model.modules():
        if isinstance(getattr(m, "num_attention_heads", None), int) and hasattr(m, "config"):
            if not any(c is not m and isinstance(getattr(c, "num_attention_heads", None), int) for c in m.modules()):
                found.append(m)
    return found

