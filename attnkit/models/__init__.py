"""Models: encoders with attnkit's attention, their heads, MiniBERT, and checkpoints that describe themselves.

- :mod:`resolve`: which model a name means (the bundled MiniLM, a folder, a hub name), the lengths it takes
- :mod:`checks`: a local model folder checked before it loads
- :mod:`build`: classifiers, span-QA models and masked LMs with an :class:`~attnkit.attention.spec.AttentionSpec`
- :mod:`checkpoint`: loading and saving models and tokenizers
- :mod:`sparsify`: attnkit's attention in a model already built
- :mod:`modeling_attnkit`: the ``attnkit`` model type (config + Auto classes) saved with every model
- :mod:`pooling`: SesameBERT's layer pooling and Squeeze-and-Excitation head
- :mod:`mini`: MiniBERT (one head, d = 32) with SA / SSA / NTA attention
- :mod:`freeze`: parameter groups left untrained

Importing this package registers attnkit with transformers (:func:`register`): the model types ``attnkit`` and
``attnkit-mini`` in the Auto classes and ``pipeline``, attnkit's attention in ``AttentionInterface``, and the folder
check the Auto classes run before a local model loads.
"""

from attnkit.models import checks, mini, modeling_attnkit


def register() -> None:
    """Register attnkit's model types, attention and folder check with transformers (idempotent)."""
    modeling_attnkit.register()
    mini.register()
    modeling_attnkit.set_folder_check(checks.check_model_folder)


register()
