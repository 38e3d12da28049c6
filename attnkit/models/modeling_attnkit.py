"""attnkit's own Hugging Face config and model classes: a checkpoint that describes itself.

A model made by attnkit is saved with ``"model_type": "attnkit"``, a type no transformers release
knows, so no transformers version can load it as a softmax model or with a missing head:

- with attnkit imported, :func:`register` has added the type to the Auto classes, and
  ``AutoModelForSequenceClassification.from_pretrained(run/model)`` or ``pipeline(...)`` give
  attnkit's model;
- without attnkit, ``trust_remote_code=True`` loads the same model from the code saved beside the
  weights (this file, the attention modules and ``pooling.py``, :data:`CODE_FILES`: they import
  only torch and transformers, and each other relatively); without that flag transformers refuses.

The weights keep the names of the encoder's own classes (``bert.encoder...``): an
:class:`AttnkitConfig` holds the encoder's config (``base_model_type`` says which, e.g. "bert")
plus ``attnkit`` (the attention spec) and, for SesameBERT heads, ``attnkit_head``; each
``Attnkit*`` class below picks the encoder's class for the task (``BertForSequenceClassification``,
...) or the pooled SesameBERT head, and runs it with attnkit's attention. Re-saving with plain
``save_pretrained`` keeps all of it, code files included.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from transformers import PretrainedConfig, PreTrainedModel

try:  # transformers 5 records attentions and hidden states by the model's class (record_outputs)
    from transformers.utils.output_capturing import _CAN_RECORD_REGISTRY
except ImportError:
    _CAN_RECORD_REGISTRY = None

# relative imports: this file also runs as a checkpoint's remote code, where the code files sit side by side and
# ``from ..attention.spec`` is saved as ``from .spec`` (see :func:`code_file_text`)
from ..attention.blur import gaussian_blur as _gaussian_blur  # noqa: F401  every code file imported here, directly:
from ..attention.entmax import entmax15 as _entmax15  # noqa: F401     transformers 4 copies only a remote module's
from ..attention.flash import sparse_attention as _sparse_attention  # noqa: F401
from ..attention.flash_cpu import forward as _flash_cpu_forward  # noqa: F401
from ..attention.forward import register as register_attention  # direct ones
from ..attention.kernels import cpu_kernel as _cpu_kernel  # noqa: F401
from ..attention.learned import add_head_parameters, learned_values
from ..attention.maps import sparsemax as _sparsemax  # noqa: F401
from ..attention.names import NORMALISER_NAMES as _NORMALISER_NAMES  # noqa: F401
from ..attention.normalisers import LEARNED
from ..attention.own_code import OWN_CODE_TYPES, adopt
from ..attention.placement import number_layers
from ..attention.spec import ATTN_IMPLEMENTATION, CONFIG_KEY, spec_of
from ..errors import UserError
from .pooling import HEAD_KEY, PooledEncoderForSequenceClassification, head_of

MODEL_TYPE = "attnkit"
#: the files saved beside the weights so that trust_remote_code=True can load the model without attnkit
CODE_FILES = ("modeling_attnkit.py", "spec.py", "normalisers.py", "learned.py", "blur.py", "placement.py", "forward.py",
              "names.py", "maps.py", "entmax.py", "kernels.py", "kernel_build.py", "flash.py", "flash_cpu.py", "own_code.py", "pooling.py",
              "errors.py")
#: where each code file lives in the attnkit package (in a checkpoint they sit side by side)
_CODE_PACKAGES = {**{name: "attention" for name in CODE_FILES}, "modeling_attnkit.py": "models", "pooling.py": "models", "errors.py": ""}
_PACKAGE_IMPORT = re.compile(r"^(\s*)from \.\.(?:\w+\.)?(\w+) import ", re.M)
#: keys of an AttnkitConfig that are not the encoder's own
_OWN_KEYS = ("model_type", "auto_map", "architectures", "base_model_type", "transformers_version", CONFIG_KEY, HEAD_KEY,
             *(e.config_key for e in LEARNED.values()),
             "attn_implementation", "dtype", "torch_dtype")

AUTO_MAP = {
    "AutoConfig": "modeling_attnkit.AttnkitConfig",
    "AutoModel": "modeling_attnkit.AttnkitModel",
    "AutoModelForSequenceClassification": "modeling_attnkit.AttnkitForSequenceClassification",
    "AutoModelForQuestionAnswering": "modeling_attnkit.AttnkitForQuestionAnswering",
    "AutoModelForTokenClassification": "modeling_attnkit.AttnkitForTokenClassification",
    "AutoModelForMaskedLM": "modeling_attnkit.AttnkitForMaskedLM",
}


class AttnkitConfig(PretrainedConfig):
    """An encoder's config (every attribute of it) + attnkit's attention spec and head."""

    model_type = MODEL_TYPE

    def __init__(self, base_model_type: str = "bert", **kwargs):
        self.base_model_type = base_model_type
        kwargs.setdefault("auto_map", dict(AUTO_MAP))
        super().__init__(**kwargs)

    @classmethod
    def from_base(cls, base: PretrainedConfig, **overrides) -> "AttnkitConfig":
        """An AttnkitConfig holding ``base`` (a BertConfig, RobertaConfig, ...) and ``overrides``."""
        if isinstance(base, AttnkitConfig):
            d = base.to_dict()
            kind = base.base_model_type
        else:
            d = base.to_dict()
            kind = base.model_type
        for k in ("model_type", "architectures", "transformers_version", "auto_map", "base_model_type"):
            d.pop(k, None)
        d.update(overrides)
        return cls(base_model_type=kind, **d)

    def to_dict(self):
        return {k: v for k, v in super().to_dict().items() if not k.startswith("_attnkit")}

    def __getattr__(self, name):
        # only reached when normal lookup fails: what the encoder's config class derives (properties such as
        # ModernBERT's sliding_window, names mapped by its attribute_map such as DistilBERT's hidden_size)
        d = self.__dict__
        if name.startswith("__") or name in ("_attnkit_base", "base_model_type") or d.get("_attnkit_busy") or "base_model_type" not in d:
            raise AttributeError(name)  # not derivable (yet): during __init__, or while the base config is built
        base = d.get("_attnkit_base")
        if base is None:
            d["_attnkit_busy"] = True
            try:
                base = self.base_config()
            finally:
                del d["_attnkit_busy"]
            d["_attnkit_base"] = base
        try:
            return getattr(base, name)
        except AttributeError:
            raise AttributeError(f"{type(self).__name__} (of {self.base_model_type}) has no attribute {name!r}") from None

    def __setattr__(self, name, value):
        if name != "_attnkit_busy":
            self.__dict__.pop("_attnkit_base", None)  # derived values follow any change
        super().__setattr__(name, value)

    def base_config(self) -> PretrainedConfig:
        """The encoder's own config class filled with this config's values."""
        from transformers import CONFIG_MAPPING

        if self.base_model_type not in CONFIG_MAPPING:
            raise UserError(f"this attnkit model's encoder type {self.base_model_type!r} is not known to this transformers version")
        d = {k: v for k, v in self.to_dict().items() if k not in _OWN_KEYS and not k.startswith("_attnkit")}
        return CONFIG_MAPPING[self.base_model_type](**d)


class _AttnkitModelMixin:
    """What every concrete attnkit model adds to the encoder's class: the learned per-head parameters (lam, alpha)
    of a saved model that learns them, and a ``save_pretrained`` that keeps the config and the code self-describing."""

    config_class = AttnkitConfig

    def __init__(self, config, *args, **kwargs):
        super().__init__(config, *args, **kwargs)
        adopt(self, config)  # DeBERTa-v2, MPNet: attnkit's map inside their own attention modules
        number_layers(self)  # --sparse-layers: every attention module knows its layer (DistilBERT's carry no layer_idx)
        kind = spec_of(config).learned
        if kind is not None and getattr(config, LEARNED[kind].config_key, None) is not None:
            add_head_parameters(self, getattr(config, LEARNED[kind].config_key))

    def __setstate__(self, state):
        super().__setstate__(state)
        record_outputs(self)  # unpickled in a fresh process: no __init__ registered its classes with transformers

    def __reduce_ex__(self, protocol):
        """Pickling (``torch.save(model)``, multiprocessing, deepcopy) names the encoder's class and the kind, not
        this class: it is made at run time (:func:`concrete_class`), so pickle could not find it by its name. The hooks
        transformers 5 adds at the first forward that records hidden states or attentions are local functions, which
        no pickle holds: they are taken off first (the next forward adds them again)."""
        drop_capture_hooks(self)
        rv = super().__reduce_ex__(protocol)
        return (_unpickled, (self._attnkit_base, self._attnkit_kind), *rv[2:])

    def save_pretrained(self, save_directory, *args, **kwargs):
        folder = Path(save_directory).expanduser()
        blocking = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
        if blocking is not None:  # (transformers logs an error and saves nothing; the code files then failed on their name)
            raise UserError(f"save_pretrained: {save_directory} cannot be a folder: {blocking} is a file")
        for kind, entry in LEARNED.items():
            values = learned_values(self, kind)
            if values is not None:
                setattr(self.config, entry.config_key, values)
        self.config.auto_map = dict(AUTO_MAP)
        out = super().save_pretrained(save_directory, *args, **kwargs)
        for name in CODE_FILES:
            text = code_file_text(name)
            if text is not None:  # through a temporary file: a write cut short never leaves half a module
                tmp = folder / f".{name}.tmp-{os.getpid()}"
                tmp.write_text(text, encoding="utf-8")
                os.replace(tmp, folder / name)
        return out


def code_file_text(name: str) -> str | None:
    """A code file as saved beside the weights: its imports of the other code files made flat
    (``from ..attention.spec import`` -> ``from .spec import``). None if the file is not here."""
    here = Path(__file__).resolve().parent
    for path in (here / name, here.parent / _CODE_PACKAGES[name] / name):  # a checkpoint's folder, else the package
        if path.is_file():
            return _PACKAGE_IMPORT.sub(r"\1from .\2 import ", path.read_text(encoding="utf-8"))
    return None


def _base_class(config: AttnkitConfig, kind: str):
    from transformers.models.auto import modeling_auto as ma

    if kind == "sequence-classification" and not head_of(config).is_default:
        return PooledEncoderForSequenceClassification
    mapping = {
        "model": ma.MODEL_MAPPING,
        "sequence-classification": ma.MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING,
        "question-answering": ma.MODEL_FOR_QUESTION_ANSWERING_MAPPING,
        "token-classification": ma.MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING,
        "masked-lm": ma.MODEL_FOR_MASKED_LM_MAPPING,
    }[kind]
    base_cfg = type(config.base_config())
    if base_cfg not in mapping:
        raise UserError(f"{config.base_model_type} has no {kind} model in this transformers version")
    cls = mapping[base_cfg]
    if not getattr(cls, "_supports_attention_backend", False) and config.base_model_type not in OWN_CODE_TYPES:
        import transformers

        raise UserError(
            f"this attnkit model needs {cls.__name__} to run its attention through transformers' attention registry, "
            f"which transformers {transformers.__version__} does not do (it would run softmax): use transformers >= 5"
        )
    return cls


_CONCRETE: dict = {}
#: transformers' table of model class names per model type that its pipeline for each kind checks a model against
_PIPELINE_NAMES = {"sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
                   "question-answering": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
                   "token-classification": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
                   "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES"}


def accept_in_pipelines(model_type: str, kind: str, class_name: str) -> None:
    """Add ``class_name`` to the model names that transformers' pipeline for ``kind`` (text-classification for
    "sequence-classification", ...) accepts: it checks a model's class by name and logs "The model ... is not
    supported" with hundreds of names for any other. Only that table of names changes; the Auto classes stay as
    registered (its tables of names are read only for the model types transformers ships)."""
    from transformers.models.auto import modeling_auto

    names = getattr(modeling_auto, _PIPELINE_NAMES.get(kind, ""), None)
    if names is None:
        return
    have = names.get(model_type, ())
    have = have if isinstance(have, tuple) else (have,)
    if class_name not in have:
        names[model_type] = have + (class_name,)


def concrete_class(config: AttnkitConfig, kind: str):
    """The class that runs ``config``'s model for ``kind``: the encoder's own class with attnkit's mixin."""
    return _concrete(_base_class(config, kind), kind)


def _concrete(base, kind: str):
    key = (base, kind)
    if key not in _CONCRETE:
        _CONCRETE[key] = type(f"Attnkit{base.__name__}", (_AttnkitModelMixin, base),
                              {"_attnkit_kind": kind, "_attnkit_base": base, "__module__": __name__})
        accept_in_pipelines(MODEL_TYPE, kind, _CONCRETE[key].__name__)
    return _CONCRETE[key]


def record_outputs(model) -> None:
    """Register ``model``'s classes (its own and its sub-models') for transformers 5's recording of attentions and
    hidden states, which ``PreTrainedModel.__init__`` does: a model that did not pass through it (a class changed in
    place by sparsify, an unpickled one) would return None for them, and a layer-pooling head would fail."""
    if _CAN_RECORD_REGISTRY is None:  # transformers before 5 records them another way
        return
    for m in model.modules():
        if isinstance(m, PreTrainedModel):
            _CAN_RECORD_REGISTRY[m] = getattr(m, "_can_record_outputs", None)


def drop_capture_hooks(model) -> None:
    """Take transformers' output-capturing forward hooks off ``model``'s modules and mark them not installed, so that
    its next forward installs them again (they are local functions, which pickle cannot hold)."""
    for m in model.modules():
        for key, hook in list(m._forward_hooks.items()):
            if getattr(hook, "__module__", None) == "transformers.utils.output_capturing":
                for hooks in (m._forward_hooks, m._forward_hooks_with_kwargs, m._forward_hooks_always_called):
                    hooks.pop(key, None)
        if getattr(m, "_output_capturing_hooks_installed", False):
            m._output_capturing_hooks_installed = False


def _unpickled(base, kind: str):
    """An empty model of attnkit's class for (``base``, ``kind``), which unpickling then fills (see __reduce_ex__)."""
    register()  # a fresh process: attnkit's attention in transformers' registries before the model runs
    cls = _concrete(base, kind)
    return cls.__new__(cls)


#: attnkit's check of a local model folder before it loads (config against weights, the attention block, finite
#: weights), set by :mod:`attnkit.models.checks`. A checkpoint's remote copy of this file (trust_remote_code, no attnkit
#: needed) has none and loads as transformers does.
_folder_check = None


def set_folder_check(check) -> None:
    """Have the Auto classes run ``check(folder)`` on a local model folder before it loads."""
    global _folder_check
    _folder_check = check


def _check_folder(path, subfolder=None) -> None:
    folder = Path(str(path)) / subfolder if subfolder else Path(str(path))
    if _folder_check is not None and folder.is_dir():
        _folder_check(folder)


def _dispatcher(name: str, kind: str):
    """An Auto-registrable class whose from_pretrained/_from_config build the concrete class for ``kind``."""

    def from_pretrained(cls, pretrained_model_name_or_path, *args, config=None, **kwargs):
        _check_folder(pretrained_model_name_or_path, kwargs.get("subfolder"))
        if config is None:
            hub = {k: kwargs[k] for k in ("cache_dir", "revision", "token", "local_files_only", "subfolder") if k in kwargs}
            config = AttnkitConfig.from_pretrained(pretrained_model_name_or_path, **hub)
        kwargs["attn_implementation"] = ATTN_IMPLEMENTATION  # never sdpa/eager: that would be softmax
        return concrete_class(config, kind).from_pretrained(pretrained_model_name_or_path, *args, config=config, **kwargs)

    def _from_config(cls, config, **kwargs):
        kwargs["attn_implementation"] = ATTN_IMPLEMENTATION
        return concrete_class(config, kind)._from_config(config, **kwargs)

    return type(name, (PreTrainedModel,), {
        "config_class": AttnkitConfig, "__module__": __name__, "_attnkit_kind": kind,
        "from_pretrained": classmethod(from_pretrained), "_from_config": classmethod(_from_config),
        "__doc__": f"attnkit's {kind} model: ``from_pretrained`` / ``from_config`` give the encoder's own class with attnkit attention.",
    })


AttnkitModel = _dispatcher("AttnkitModel", "model")
AttnkitForSequenceClassification = _dispatcher("AttnkitForSequenceClassification", "sequence-classification")
AttnkitForQuestionAnswering = _dispatcher("AttnkitForQuestionAnswering", "question-answering")
AttnkitForTokenClassification = _dispatcher("AttnkitForTokenClassification", "token-classification")
AttnkitForMaskedLM = _dispatcher("AttnkitForMaskedLM", "masked-lm")

_registered = False


def register() -> None:
    """Add model_type "attnkit" to transformers' Auto classes and attnkit's attention to its registries (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers import (
        AutoConfig,
        AutoModel,
        AutoModelForMaskedLM,
        AutoModelForQuestionAnswering,
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
    )

    register_attention()
    try:
        AutoConfig.register(MODEL_TYPE, AttnkitConfig)
    except ValueError:  # registered by another copy (attnkit and a checkpoint's remote code in one process)
        pass
    for auto, cls in ((AutoModel, AttnkitModel), (AutoModelForSequenceClassification, AttnkitForSequenceClassification),
                      (AutoModelForQuestionAnswering, AttnkitForQuestionAnswering),
                      (AutoModelForTokenClassification, AttnkitForTokenClassification), (AutoModelForMaskedLM, AttnkitForMaskedLM)):
        try:
            auto.register(AttnkitConfig, cls, exist_ok=True)
        except ValueError:
            pass
    _registered = True


register()
