"""Loading and saving attnkit models and tokenizers (safetensors only; a save is atomic and proves what it wrote).
"""

from __future__ import annotations

import json
import logging
import os
import uuid
from pathlib import Path

from transformers import (
    AutoConfig,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoTokenizer,
)

from attnkit.attention.learned import learned_values
from attnkit.attention.normalisers import LEARNED
from attnkit.attention.spec import (
    ATTN_IMPLEMENTATION,
    CONFIG_KEY,
    AttentionSpec,
    apply_spec,
    spec_of,
)
from attnkit.errors import DataFormatError, UserError
from attnkit.models.build import finish_model
from attnkit.models.checks import (
    ModelFolderError,
    UntrainedHeadError,
    check_model_folder,
    check_tokenizer_as_saved,
    check_weights_file,
)
from attnkit.models.modeling_attnkit import (
    AttnkitConfig,
    AttnkitForQuestionAnswering,
    AttnkitForSequenceClassification,
    register,
)
from attnkit.models.pooling import PooledEncoderForSequenceClassification, head_of
from attnkit.models.resolve import is_qa_model, resolve_model
from attnkit.runfiles.atomic import disk_hint, write_failure
from attnkit.runfiles.json_files import finite_record, read_json
from attnkit.runfiles.names import RUN_INFO
from attnkit.runfiles.ownership import (
    folder_is_as_written,
    remove_written,
    set_aside,
    write_folder_manifest,
)


def unbuildable(path, e: ValueError) -> ModelFolderError:
    """The one-line refusal of a model folder whose config.json transformers cannot build a model from."""
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)
    where = Path(str(path)) / "config.json" if Path(str(path)).is_dir() else path
    return ModelFolderError(f"{where} does not describe a model transformers can build ({first}): restore the config.json "
                            "written with the weights")


def _garbled_tokenizer_file(path) -> str | None:
    """A one-line reason naming the tokenizer's JSON file of a model folder that is not readable JSON, else None."""
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        f = Path(str(path)) / name
        if f.is_file():
            try:
                read_json(f, "a tokenizer file", expect=None)
            except DataFormatError as e:
                return f"{e}: restore the tokenizer files written with the model"
    return None


def load_tokenizer(name_or_path: str | os.PathLike | None):
    register()  # also registers MiniBERT's config type, which AutoTokenizer reads from config.json
    path = resolve_model(name_or_path)
    check_model_folder(path, weights=False, tokenizer=True)
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except OSError as e:  # hub name offline / unknown: transformers' message does not always name the model
        raise OSError(f"could not load the tokenizer of model {path!r}: {str(e).splitlines()[0]}") from None
    except Exception as e:  # noqa: BLE001  a tokenizer that cannot be built
        first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), type(e).__name__)  # (sentencepiece missing,
        garbled = _garbled_tokenizer_file(path)  # a damaged file: named with its line)
        raise ModelFolderError(garbled or f"could not build the tokenizer of model {path!r} ({type(e).__name__}: {first})") from None
    if Path(path).is_dir() and len(tok) <= len(set(tok.all_special_tokens)):
        raise ModelFolderError(f"the tokenizer in {path} has no vocabulary besides its special tokens ({len(tok)} tokens): "
                               "every word would be unknown; copy the tokenizer files of the model it was trained from")
    if Path(path).is_dir() and (tok.pad_token is None or tok.num_special_tokens_to_add(pair=False) == 0):
        raise ModelFolderError(f"the tokenizer in {path} has no {'padding token' if tok.pad_token is None else '[CLS]/[SEP] tokens'} "
                               f"(is {Path(path) / 'tokenizer_config.json'} missing?): the model would not read its "
                               "inputs as it was trained to; copy the tokenizer files of the model it was trained from")
    if Path(path).is_dir():  # (after the checks above: a garbled or missing file is named as such)
        check_tokenizer_as_saved(path)
    return tok


def _from_pretrained(cls, path: str, *, head: str, **kwargs):
    """``cls.from_pretrained`` that refuses a checkpoint whose ``head`` weights are missing (random)."""
    if Path(path).is_dir():
        check_weights_file(path)
    try:
        net, info = cls.from_pretrained(path, attn_implementation=ATTN_IMPLEMENTATION, use_safetensors=True,
                                        output_loading_info=True, **kwargs)
    except UserError:
        raise
    except ValueError as e:  # transformers' own check of the config (heads that do not divide the width, ...)
        raise unbuildable(path, e) from None
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
    try:
        config = AutoConfig.from_pretrained(path)
    except UserError:
        raise
    except ValueError as e:
        raise unbuildable(path, e) from None
    spec = spec_of(config)
    qa = is_qa_model(config)
    head = "span (question answering) head" if qa else "classification head"
    if isinstance(config, AttnkitConfig):
        cls = AttnkitForQuestionAnswering if qa else AttnkitForSequenceClassification
        return finish_model(_from_pretrained(cls, path, head=head, config=config), spec)
    apply_spec(config, spec)  # an older attnkit checkpoint (or any HF classifier): the encoder's own classes
    if qa:
        cls = AutoModelForQuestionAnswering
    elif not head_of(config).is_default:
        cls = PooledEncoderForSequenceClassification
    else:
        cls = AutoModelForSequenceClassification
    return finish_model(_from_pretrained(cls, path, head=head, config=config), spec)


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
        remove_written(tmp)
        if isinstance(e, (KeyboardInterrupt, SystemExit, UserError)):
            raise
        raise UserError(f"cannot write the model {out}: {write_failure(e)}{disk_hint(e)}; nothing "
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
        remove_written(old)  # manifest last: a kill part-way leaves what the next run removes
    return out


def umask_modes(folder: Path) -> None:
    """Give every file in ``folder`` the mode the umask gives a new file: safetensors writes its file 0600, so a saved
    model's (or a Trainer checkpoint's) weights were the one file others could not read."""
    mask = os.umask(0)
    os.umask(mask)
    for f in Path(folder).iterdir():
        if f.is_file() and not f.is_symlink():
            os.chmod(f, 0o666 & ~mask)


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
    umask_modes(tmp)
    if any(tmp.glob("*.bin")):
        raise RuntimeError(f"non-safetensors weights were written to {tmp}")
