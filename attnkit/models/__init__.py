"""Models: encoders with attnkit's attention, their heads, MiniBERT, and checkpoints that describe themselves.

- :mod:`build`: build / save / load classifiers and span-QA models from any BERT-family checkpoint, :func:`sparsify`
- :mod:`modeling_attnkit`: the ``attnkit`` model type (config + Auto classes) saved with every model
- :mod:`pooling`: SesameBERT's layer pooling and Squeeze-and-Excitation head
- :mod:`mini`: MiniBERT (one head, d = 32) with SA / SSA / NTA attention
- :mod:`freeze`: parameter groups left untrained

Importing :mod:`build` registers the ``attnkit`` and ``attnkit-mini`` model types with transformers' Auto classes.

The modules are imported by their full names (``from attnkit.models.X import ...``): this package imports nothing, so
that a light module of it does not load the others.
"""
