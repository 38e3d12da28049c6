"""Freezing parameters by name group (the MiniBERT paper's "frozen embedding/attention" variant).

Groups, matched on dotted parameter names, so they mean the same for MiniBERT and BERT-family models:

* ``embeddings`` — any parameter under a module called ``embeddings`` (MiniBERT's token table;
  BERT's word/position/type embeddings and their LayerNorm);
* ``attention``  — any parameter under a module called ``attention`` (MiniBERT's Wq/Wk/Wv;
  BERT's self-attention and attention-output projections);
* ``encoder``    — the whole base model (everything except the task head).

A frozen parameter gets ``requires_grad=False``, so the Trainer's optimizer never sees it.
"""

from __future__ import annotations

from attnkit.errors import UserError

GROUPS = ("embeddings", "attention", "encoder")


def parse_groups(spec: str | list[str] | None) -> list[str]:
    """``"embeddings,attention"`` -> ``["embeddings", "attention"]``; raises on an unknown group."""
    if spec is None:
        return []
    if isinstance(spec, str) and not spec.strip():  # --freeze '' (an empty shell variable): not "freeze nothing" silently
        raise UserError(f"--freeze {spec!r} names no parameter group: expected a comma-separated list of "
                         f"{', '.join(GROUPS)} (leave --freeze out to train every parameter)")
    names = spec.split(",") if isinstance(spec, str) else list(spec)
    if not names:
        return []
    out = []
    for n in (x.strip().lower() for x in names):
        if not n:
            continue
        if n not in GROUPS:
            raise UserError(f"--freeze {n!r}: unknown parameter group; expected a comma-separated list of {', '.join(GROUPS)}")
        if n in out:  # as --sparse-layers 0,0: a group named twice is likely a slip for another (sweep s24b)
            raise UserError(f"--freeze {spec if isinstance(spec, str) else ','.join(spec)!r}: {n} is named twice; name each "
                            f"parameter group once ({', '.join(GROUPS)})")
        out.append(n)
    if not out:
        raise UserError(f"--freeze {spec!r} names no parameter group; expected a comma-separated list of {', '.join(GROUPS)}")
    return out


def in_group(model, name: str, group: str) -> bool:
    parts = name.split(".")
    if group == "encoder":
        prefix = getattr(model, "base_model_prefix", "")
        return bool(prefix) and parts[0] == prefix
    return group in parts[:-1]


def freeze_parameters(model, groups: str | list[str] | None) -> dict:
    """Freeze ``groups`` of ``model`` in place; returns what was frozen (names and counts)."""
    groups = parse_groups(groups)
    frozen = []
    for name, p in model.named_parameters():
        if any(in_group(model, name, g) for g in groups):
            p.requires_grad_(False)
            frozen.append(name)
    total = sum(p.numel() for p in model.parameters())
    n_frozen = sum(p.numel() for n, p in model.named_parameters() if n in set(frozen))
    return {"groups": groups, "names": frozen, "frozen_parameters": n_frozen, "trainable_parameters": total - n_frozen}
