"""Checks of a local model folder before it loads: config.json and its attention block, weights whole, finite and
agreeing with the config, the tokenizer present (and, where the folder's manifest records it, the one saved with
the weights).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from safetensors import safe_open

from attnkit.attention.normalisers import LEARNED
from attnkit.attention.spec import CONFIG_KEY, AttentionSpec
from attnkit.errors import DataFormatError, UserError
from attnkit.models.mini import MODEL_TYPE as MINI_MODEL_TYPE
from attnkit.models.modeling_attnkit import MODEL_TYPE, set_folder_check
from attnkit.models.pooling import HEAD_KEY, HeadSpec
from attnkit.runfiles.json_files import read_json
from attnkit.runfiles.names import FOLDER_MANIFEST
from attnkit.runfiles.ownership import file_sha256, read_folder_manifest


class UntrainedHeadError(UserError):
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
            raise UserError(f"{size} bytes on disk, {8 + n + end} expected from its header")
    except Exception as e:  # SafetensorError, JSON, short reads
        raise OSError(f"{f} is damaged or truncated ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else e}); "
                      "retrain, or restore the file from a copy") from None


class ModelFolderError(UserError):
    """A model folder whose files do not fit together (config and weights, tokenizer, attention block, weights'
    values): one line naming the file, raised before the model runs."""

#: files a tokenizer is built from: its own tokenizer.json, or the vocabulary its class reads
_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "vocab.json", "spiece.model", "sentencepiece.bpe.model", "tokenizer.model",
                    "sentencepiece.model")

#: every file a tokenizer is read from: where the folder's manifest records one, it must be the file saved there
TOKENIZER_SAVED = _TOKENIZER_FILES + ("merges.txt", "added_tokens.json", "tokenizer_config.json", "special_tokens_map.json")

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
        _check_config_as_saved(folder, cfg_file, raw)
    if tokenizer and not any((folder / f).is_file() for f in _TOKENIZER_FILES):
        raise ModelFolderError(
            f"{folder} has no tokenizer (tokenizer.json, or a vocabulary such as vocab.txt): without it every word would "
            "be unknown; copy the tokenizer files of the model it was trained from into the folder")
    if key is not None:
        _checked[key] = True


def check_tokenizer_as_saved(path: str | os.PathLike) -> None:
    """Where attnkit's manifest of a model folder (FOLDER_MANIFEST, written with the weights) records a tokenizer file,
    that file still has the size recorded: another model's tokenizer copied in (a smaller vocabulary, which the
    embeddings' check cannot see) would read every text as other token ids, and the model would label garbage. One
    stat per file, and where the manifest records its SHA-256 (a small file) one read: a same-size swap or edit of the
    token list is seen too; a folder without a manifest (the bundled model, one saved by ``save_pretrained``) is not looked at,
    nor a recorded file that is gone (the tokenizer's own checks say what is missing)."""
    folder = Path(path)
    manifest = read_folder_manifest(folder) if folder.is_dir() else None
    files = manifest.get("files") if manifest else None
    if not isinstance(files, dict):
        return
    hashes = manifest.get("sha256")
    for name in TOKENIZER_SAVED:
        entry = files.get(name)
        if entry is None and manifest.get("complete") is True and (folder / name).is_file():
            raise ModelFolderError(
                f"{folder / name} was not saved with these weights ({FOLDER_MANIFEST} lists the tokenizer files written "
                "with them, and not this one): added since, it changes how every text is read (its special tokens, "
                "vocabulary or settings); remove it, or restore the folder as it was written")
        if not isinstance(entry, list) or not entry or not isinstance(entry[0], int):
            continue
        try:
            size = (folder / name).stat().st_size
        except OSError:
            continue
        if size != entry[0]:
            raise ModelFolderError(
                f"{folder / name} is not the tokenizer file saved with these weights ({size} bytes, {FOLDER_MANIFEST} "
                f"records {entry[0]}): the tokenizer does not belong to these weights (another model's? every text would be "
                "read as other token ids); restore the tokenizer files written with them")
        recorded = hashes.get(name) if isinstance(hashes, dict) else None
        if isinstance(recorded, str) and file_sha256(folder / name) != recorded:
            raise ModelFolderError(
                f"{folder / name} is not the tokenizer file saved with these weights (its size is as recorded, its content "
                f"is not: {FOLDER_MANIFEST} records another SHA-256): a token list edited or swapped would read texts as "
                "other token ids; restore the tokenizer files written with them")


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


_MISMATCH = "the config does not belong to these weights; restore the config.json written with them"


def _check_weights_agree(folder: Path, cfg_file: Path, raw: dict) -> None:
    """The weights in ``folder`` agree with ``raw`` (its config.json) and its tokenizer, and are finite."""
    shapes, layers, bad = _scan_weights(folder)
    n_layers = _config_value(raw, "num_hidden_layers", "n_layers", "num_layers")
    if layers and n_layers is not None and n_layers != max(layers) + 1:
        wf = next(iter(shapes.values()))[1]
        raise ModelFolderError(f"{cfg_file} says num_hidden_layers {n_layers} but {wf.name} holds the weights of "
                               f"{max(layers) + 1} layers: {_MISMATCH}")
    _check_embeddings(folder, cfg_file, raw, shapes)
    pos = next((k for k in sorted(shapes) if k.endswith("position_embeddings.weight")), None)
    n_pos = _config_value(raw, "max_position_embeddings")
    if pos is not None and len(shapes[pos][0]) == 2 and n_pos is not None and n_pos != shapes[pos][0][0]:
        raise ModelFolderError(f"{cfg_file} says max_position_embeddings {n_pos} but {shapes[pos][1].name} holds "
                               f"{shapes[pos][0][0]} positions ({pos}): {_MISMATCH}")
    _check_labels(cfg_file, raw, shapes)
    _check_learned(cfg_file, raw, shapes)
    _check_head(cfg_file, raw, shapes)
    if bad is not None:
        wf, k, n, total = bad
        raise ModelFolderError(
            f"{wf} holds {n} NaN or infinite values (of {total}) in {k}: the model would give NaN outputs (a diverged "
            "run?); retrain, or restore the file from a copy")


def _check_learned(cfg_file: Path, raw: dict, shapes: dict) -> None:
    """The setting the attention learns per head (the attnkit block's ``learned``) is the one the weights hold: else the
    model would run values started afresh, or drop the learned ones, without a word."""
    block = raw.get(CONFIG_KEY)
    if not isinstance(block, dict):
        return
    learned = block.get("learned")
    for kind, entry in LEARNED.items():
        held = next((k for k in sorted(shapes) if k == entry.param or k.endswith("." + entry.param)), None)
        if learned == kind and held is None:
            raise ModelFolderError(f"{cfg_file} says the attention learns {kind} per head ({CONFIG_KEY}.learned), but "
                                   f"the weights hold no learned {kind} ({entry.param}): {_MISMATCH}")
        if held is not None and learned != kind:
            raise ModelFolderError(f"{cfg_file} says the attention learns {learned or 'nothing'} per head "
                                   f"({CONFIG_KEY}.learned), but the weights hold {kind} learned per head ({held}): {_MISMATCH}")


#: config.json's entries that may differ from the ones saved with the weights: the labels' names, the attention (the
#: attnkit block: checked on its own, and changed on purpose to compare maps on one checkpoint), bookkeeping, and what
#: changes only training (dropout) or what a forward returns. Any other (the heads' split, an activation, a norm's eps,
#: a position scheme, ...) changes what the same weights compute.
_FREE_CONFIG_KEYS = {"id2label", "label2id", CONFIG_KEY, "_name_or_path", "transformers_version", "architectures",
                     "torch_dtype", "dtype", "output_attentions", "output_hidden_states", "return_dict", "use_cache",
                     "problem_type", "finetuning_task", "chunk_size_feed_forward"}


def _check_config_as_saved(folder: Path, cfg_file: Path, raw: dict) -> None:
    """Where attnkit's manifest records the config written with these weights (and the weights are unchanged since),
    config.json computes as it did: a hand edit of a value no weight's shape shows (``num_attention_heads`` 12 -> 4,
    ``hidden_act``, ``layer_norm_eps``) would run the weights as another model, without a word."""
    manifest = read_folder_manifest(folder)
    saved = manifest.get("config") if manifest else None
    files = manifest.get("files") if manifest else None
    if not isinstance(saved, dict) or not isinstance(files, dict):
        return
    for wf in _weights_files(folder):  # other weights saved since (save_pretrained over the folder): the record is old
        entry = files.get(wf.name)  # (by size: a copy of the folder, `cp -r`, has new times)
        if not isinstance(entry, list) or not entry or entry[0] != wf.stat().st_size:
            return
    changed = [k for k in sorted(set(saved) | set(raw)) if k not in _FREE_CONFIG_KEYS and "dropout" not in k
               and saved.get(k) != raw.get(k)]
    if changed:
        said = "; ".join(f"{k} {json.dumps(raw[k]) if k in raw else '(none)'} ({json.dumps(saved[k]) if k in saved else 'none'} "
                         "when saved)" for k in changed[:3]) + (f"; and {len(changed) - 3} more" if len(changed) > 3 else "")
        raise ModelFolderError(f"{cfg_file} is not the config written with these weights ({FOLDER_MANIFEST} records it): "
                               f"it says {said}; the model would compute other outputs from the same weights. Restore the "
                               "config.json written with them (or, if you saved other weights there yourself, delete "
                               f"{FOLDER_MANIFEST}: it describes the folder attnkit wrote)")


def _check_head(cfg_file: Path, raw: dict, shapes: dict) -> None:
    """The classifier's layer pooling (config.json's ``attnkit_head``) is a valid one, and the one the weights were
    trained with: SE's weights (``se.*``) and the weighted average's (``layer_mix``) are there exactly when it says so.
    Else the head would be refused as untrained, or its layer weights dropped or started afresh, without the cause."""
    block = raw.get(HEAD_KEY)
    if block is not None:
        if not isinstance(block, dict):
            raise ModelFolderError(f"{cfg_file}: its {HEAD_KEY!r} is {json.dumps(block)}, not a block of settings such as "
                                   '{"pooling": "last", "se": false}: restore the config.json written with the weights')
        try:
            head = HeadSpec.from_dict(block)
        except (TypeError, ValueError) as e:
            raise ModelFolderError(f"{cfg_file}: its {HEAD_KEY!r} block is not a valid layer pooling "
                                   f"({str(e).splitlines()[0]}): restore the config.json written with the weights") from None
    else:
        head = HeadSpec()
    se = next((k for k in sorted(shapes) if k.startswith("se.")), None)
    mix = "layer_mix" if "layer_mix" in shapes else None
    said = f"{HEAD_KEY}: {json.dumps(block)}" if block is not None else f"it has no {HEAD_KEY!r} block"
    if (se is not None) != head.se or (mix is not None) != (head.pooling == "weighted"):
        held = " and ".join(w for w in (se and "SE over layers (" + se + ")", mix and "a weighted average of the layers "
                                        "(layer_mix)") if w) or "neither SE nor a weighted average of the layers"
        raise ModelFolderError(f"{cfg_file} says the classifier reads the {head.describe()} ({said}), but the "
                               f"weights hold {held}: {_MISMATCH}")


def _scan_weights(folder: Path):
    """Every tensor's (shape, file), the layer numbers the weights hold, and the first tensor with a NaN or infinite
    value (file, name, how many, of how many) or None. Whole-number weights are refused."""
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
    return shapes, layers, bad


def _check_embeddings(folder: Path, cfg_file: Path, raw: dict, shapes: dict) -> None:
    """The word embeddings' width and rows agree with the config's hidden and vocabulary sizes and the tokenizer."""
    emb = next((k for k in sorted(shapes) if k.endswith(_EMBEDDING_KEYS)), None)
    if emb is None or len(shapes[emb][0]) != 2:
        return
    (rows, width), wf = shapes[emb]
    hidden = _config_value(raw, "embedding_size") or _config_value(raw, "hidden_size", "dim", "d_model")
    if hidden is not None and hidden != width:
        raise ModelFolderError(f"{cfg_file} says hidden size {hidden} but {wf.name} holds {width}-wide embeddings ({emb}): "
                               f"{_MISMATCH}")
    vocab = _config_value(raw, "vocab_size")
    if vocab is not None and vocab != rows:
        raise ModelFolderError(f"{cfg_file} says vocab_size {vocab} but {wf.name} holds embeddings of {rows} tokens ({emb}): "
                               f"{_MISMATCH}")
    tok_file, top = _tokenizer_top_id(folder)
    if top is not None and top >= rows:
        raise ModelFolderError(
            f"{tok_file} gives token ids up to {top} but {wf.name} holds embeddings of {rows} tokens ({emb}): the "
            "tokenizer does not belong to these weights (a text with those tokens would fail); restore the "
            "tokenizer files written with them")


def _check_labels(cfg_file: Path, raw: dict, shapes: dict) -> None:
    """id2label names each class once, and as many classes as the classifier has outputs."""
    id2label = raw.get("id2label")
    if isinstance(id2label, dict) and len({str(v) for v in id2label.values()}) != len(id2label):
        seen = [str(v) for v in id2label.values()]
        twice = next(v for v in seen if seen.count(v) > 1)
        raise ModelFolderError(
            f"{cfg_file} names label {twice!r} twice in id2label: its classes could not be told apart in the outputs; "
            "restore the config.json written with the weights")
    head = [k for k in shapes if k.split(".")[0] == "classifier" and k.endswith("weight") and len(shapes[k][0]) == 2]
    if not head:
        return
    out = next((k for k in head if "out_proj" in k), max(head, key=lambda k: [int(p) if p.isdigit() else -1 for p in k.split(".")]))
    (n_out, _), wf = shapes[out]
    n_labels = len(id2label) if isinstance(id2label, dict) and id2label else _config_value(raw, "num_labels")
    if n_labels is not None and n_labels != n_out:
        names = ", ".join(str(v) for v in id2label.values()) if isinstance(id2label, dict) else ""
        raise ModelFolderError(f"{cfg_file} says {n_labels} labels{f' ({names})' if names else ''} but the classifier in "
                               f"{wf.name} ({out}) has {n_out} outputs: {_MISMATCH}")


set_folder_check(check_model_folder)  # the Auto classes check a folder as attnkit's loaders do
