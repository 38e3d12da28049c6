"""SesameBERT at the paper's budget: blur and SE over layers (``python -m studies.sesamebert.run``)."""
