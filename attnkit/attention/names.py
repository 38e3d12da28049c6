"""Names the command line offers, kept free of torch so that ``attnkit --help`` answers at once."""

#: the normalisers of :data:`attnkit.attention.NORMALISERS` (a test keeps the two equal)
NORMALISER_NAMES = ("softmax", "taylor", "sparsemax", "sparsegen-lin")

#: MiniBERT's attention kinds (METHODS.md §3): MiniSA, MiniSSA, MiniNTA
KINDS = ("sa", "ssa", "nta")
