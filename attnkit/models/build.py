"""Building encoders whose attention is an :class:`AttentionSpec`: classifiers, span-QA models and masked LMs from any
BERT-family checkpoint (a local folder, a hub name online, or ``"minilm"``, the bundled all-MiniLM-L6-v2).
"""

from __future__ import annotations

import logging
import numbers
import os

from transformers import AutoConfig, AutoModelForSequenceClassification

from attnkit.attention.learned import add_head_parameters
from attnkit.attention.normalisers import LEARNED
from attnkit.attention.placement import check_layers_apart, number_layers, sparse_layer_set
from attnkit.attention.spec import (
    ATTN_IMPLEMENTATION,
    AttentionSpec,
    apply_spec,
    spec_of,
)
from attnkit.errors import UserError
from attnkit.models.checks import check_model_folder
from attnkit.models.mini import (
    MODEL_TYPE as MINI_MODEL_TYPE,  # importing it registers MiniBERT with the Auto classes
)
from attnkit.models.modeling_attnkit import (
    AttnkitConfig,
    AttnkitForMaskedLM,
    AttnkitForQuestionAnswering,
    AttnkitForSequenceClassification,
    AttnkitModel,
    concrete_class,
    register,
)
from attnkit.models.pooling import HEAD_KEY, HeadSpec
from attnkit.models.resolve import DEFAULT_MODEL, resolve_model

log = logging.getLogger("attnkit")


def check_spec_type(spec) -> None:
    """TypeError where ``spec`` is neither an AttentionSpec nor None (a map's name alone: ``AttentionSpec(name)``)."""
    if spec is not None and not isinstance(spec, AttentionSpec):
        hint = f" (for a map by name: AttentionSpec({spec!r}))" if isinstance(spec, str) else ""
        raise TypeError(f"spec takes an AttentionSpec (or None for softmax), got {type(spec).__name__} {spec!r}{hint}")


#: the problem types transformers' sequence classifiers compute a loss for
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


def build_classifier(
    model: str | os.PathLike | None = DEFAULT_MODEL,
    num_labels: int = 2,
    spec: AttentionSpec | None = None,
    *,
    label_names: list[str] | None = None,
    from_scratch: bool = False,
    problem_type: str | None = None,
    head: HeadSpec | None = None,
):
    """A sequence classifier on ``model``'s encoder with ``spec``'s attention (an attnkit model class).

    ``from_scratch=True`` keeps the architecture but draws random weights: the paper's
    Np baseline (softmax) and SSAF(Np) (sparse). ``head`` picks how the classifier reads
    the layer stack (SesameBERT's SE and extraction strategies); the default (last layer,
    no SE) is the model's own classification head.
    """
    register()
    if isinstance(num_labels, bool) or not isinstance(num_labels, numbers.Integral) or num_labels < 1:
        raise UserError(f"num_labels {num_labels!r}: expected a whole number of at least 1 (the classes to predict; 1: a "
                        "regression's one score)")
    check_spec_type(spec)
    if head is not None and not isinstance(head, HeadSpec):
        raise TypeError(f"head takes a HeadSpec (or None for the model's own head), got {type(head).__name__} {head!r}")
    spec = spec or AttentionSpec()
    head = head or HeadSpec()
    path = resolve_model(model)
    check_model_folder(path, weights=not from_scratch)
    kwargs = {"num_labels": int(num_labels)}
    if label_names is not None and (not isinstance(label_names, (list, tuple))
                                    or not all(isinstance(n, str) for n in label_names)):
        got = (f"a {type(label_names).__name__}" if not isinstance(label_names, (list, tuple))
               else ", ".join(f"{n!r} ({type(n).__name__})" for n in label_names if not isinstance(n, str)))
        raise UserError(f"label_names must be a list of strings, one per class in class order; got {got}")
    if label_names:
        if len(label_names) != num_labels:
            raise UserError(f"{len(label_names)} label names given for {num_labels} labels")
        twice = next((n for i, n in enumerate(label_names) if n in label_names[:i]), None)
        if twice is not None:
            raise UserError(f"label_names holds {twice!r} twice: each class needs its own name")
        kwargs["id2label"] = dict(enumerate(label_names))
        kwargs["label2id"] = {n: i for i, n in enumerate(label_names)}
    if problem_type:
        if problem_type not in PROBLEM_TYPES:
            raise UserError(f"problem_type {problem_type!r}: expected one of {', '.join(PROBLEM_TYPES)}")
        kwargs["problem_type"] = problem_type
    base = _base_config(path, **kwargs)
    if base.model_type == MINI_MODEL_TYPE:  # MiniBERT: a model type of its own already (unknown to plain transformers)
        apply_spec(base, spec)
        if not head.is_default:
            raise UserError("--layer-pooling/--se take a BERT-family encoder, not MiniBERT")
        if from_scratch:
            net = AutoModelForSequenceClassification.from_config(base, attn_implementation=ATTN_IMPLEMENTATION)
        else:
            net = _with_new_head(AutoModelForSequenceClassification, path, num_labels, config=base, attn_implementation=ATTN_IMPLEMENTATION)
        return finish_model(net, spec)
    config = attnkit_config(base, spec, head)
    if not head.is_default:
        net = concrete_class(config, "sequence-classification")(config)
        if not from_scratch:
            encoder = AttnkitModel.from_pretrained(path, config=config, use_safetensors=True)
            net.encoder.load_state_dict(encoder.state_dict(), strict=True)
    elif from_scratch:
        net = AttnkitForSequenceClassification._from_config(config)
    else:
        net = _with_new_head(AttnkitForSequenceClassification, path, num_labels, config=config)
    return finish_model(net, spec)


def _with_new_head(cls, path: str, num_labels: int, **kwargs):
    """``cls.from_pretrained(path)``; a checkpoint whose classifier has another number of outputs (a classifier of
    another task) keeps its encoder and gets a new head, said in one line."""
    try:
        return cls.from_pretrained(path, use_safetensors=True, **kwargs)
    except RuntimeError as e:
        if "ignore_mismatched_sizes" not in str(e):
            raise
    log.warning("note: %s is a classifier with another number of labels than the task's %d: its encoder is fine-tuned "
                "with a new classification head (the old head's weights are not used)", path, num_labels)
    return cls.from_pretrained(path, use_safetensors=True, ignore_mismatched_sizes=True, **kwargs)


def check_se_ratio(head: HeadSpec, config=None, model: str | os.PathLike | None = DEFAULT_MODEL) -> None:
    """ValueError where ``head``'s SE ratio r is above the layers of ``model`` (``config``: its config, else read): the
    SE block squeezes the L layer outputs to L // r units, and r > L would leave none (the block then keeps one unit:
    what the default r = 3 gives a model of one or two layers, and what checkpoints trained so still load with; the CLI
    refuses an --se-ratio given above L)."""
    if not head.se:
        return
    if config is None:
        config = _base_config(resolve_model(model))
    layers = getattr(config, "num_hidden_layers", None)
    if isinstance(layers, int) and head.se_ratio > layers:
        raise UserError(f"--se-ratio {head.se_ratio}: the SE block squeezes the {layers} layer outputs of {model} to "
                         f"{layers} // r units, none at r above {layers}; expected an r from 1 to {layers}")


def _base_config(path: str, **kwargs):
    try:
        return AutoConfig.from_pretrained(path, **kwargs)
    except OSError as e:  # hub name offline / unknown: transformers' message does not name the model
        raise OSError(f"could not load model {path!r}: {e}") from None


def attnkit_config(base, spec: AttentionSpec, head: HeadSpec | None = None) -> AttnkitConfig:
    """An :class:`AttnkitConfig` of ``base``'s encoder with ``spec`` and ``head`` (earlier ones dropped)."""
    config = AttnkitConfig.from_base(base)
    for k in (HEAD_KEY, *(e.config_key for e in LEARNED.values())):
        if hasattr(config, k):
            delattr(config, k)
    apply_spec(config, spec)
    if head is not None and not head.is_default:
        setattr(config, HEAD_KEY, head.to_dict())
    return config


def finish_model(net, spec: AttentionSpec):
    """Store the spec in the built model's config; give a new model that learns lam or alpha per head its parameters;
    number its attention modules and check that ``--sparse-layers`` names layers it has."""
    apply_spec(net.config, spec)
    number_layers(net)
    if spec.sparse_layers is not None:
        sparse_layer_set(spec.sparse_layers, net.config.num_hidden_layers)
        check_layers_apart(net, spec.sparse_layers)
    if spec.learned:
        add_head_parameters(net)  # idempotent: a reloaded model has them already, with its learned values
    return net


def build_masked_lm(model: str | os.PathLike | None = DEFAULT_MODEL, spec: AttentionSpec | None = None):
    """A masked-LM model on ``model``'s encoder with ``spec``'s attention, for continued pre-training (``attnkit
    adapt``); returns ``(model, names of the weights drawn new)``. A checkpoint without an MLM head (all-MiniLM-L6-v2
    ships none) gets a new one: transform + decoder tied to the input embeddings (``tie_word_embeddings``)."""
    register()
    check_spec_type(spec)
    spec = spec or AttentionSpec()
    path = resolve_model(model)
    base = _base_config(path)
    if base.model_type == MINI_MODEL_TYPE:
        raise UserError(f"{path} is a MiniBERT: continue its pre-training with `attnkit pretrain`, not `attnkit adapt`")
    config = attnkit_config(base, spec)
    config.tie_word_embeddings = True
    check_model_folder(path)
    net, info = AttnkitForMaskedLM.from_pretrained(path, config=config, use_safetensors=True, output_loading_info=True)
    net.tie_weights()
    return finish_model(net, spec), sorted(info.get("missing_keys", ()))


def encoder_of(masked_lm, model: str | os.PathLike | None = DEFAULT_MODEL):
    """The bare encoder (``AttnkitModel``) of a masked-LM model built by :func:`build_masked_lm` on ``model``: its
    weights, and those that a masked-LM model has not (BERT's pooler) taken from ``model`` as they were."""
    path = resolve_model(model)
    config = AttnkitConfig.from_base(masked_lm.config)
    encoder = AttnkitModel.from_pretrained(path, config=config, use_safetensors=True)
    inner = getattr(masked_lm, masked_lm.base_model_prefix)
    missing, unexpected = encoder.load_state_dict(inner.state_dict(), strict=False)
    left = [k for k in missing if not k.startswith("pooler.")]
    if left or unexpected:
        raise RuntimeError(f"the masked-LM encoder does not fit {path}'s encoder (missing {left[:3]}, unexpected {unexpected[:3]})")
    return finish_model(encoder, spec_of(masked_lm.config))


def build_qa_model(model: str | os.PathLike | None = DEFAULT_MODEL, spec: AttentionSpec | None = None, *, from_scratch: bool = False):
    """An extractive QA model (start/end logits per token) on ``model``'s encoder with ``spec``'s attention."""
    register()
    check_spec_type(spec)
    spec = spec or AttentionSpec()
    path = resolve_model(model)
    check_model_folder(path, weights=not from_scratch)
    config = attnkit_config(_base_config(path), spec)
    if from_scratch:
        net = AttnkitForQuestionAnswering._from_config(config)
    else:
        net = AttnkitForQuestionAnswering.from_pretrained(path, config=config, use_safetensors=True)
    return finish_model(net, spec)
