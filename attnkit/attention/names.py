"""Names the command line offers, kept free of torch so that ``attnkit --help`` answers at once."""

#: the normalisers of :data:`attnkit.attention.NORMALISERS` (a test keeps the two equal)
NORMALISER_NAMES = ("softmax", "taylor", "sparsemax", "sparsegen-lin", "entmax15", "entmax-alpha")

#: MiniBERT's attention kinds (METHODS.md §3): MiniSA, MiniSSA, MiniNTA
KINDS = ("sa", "ssa", "nta")

#: the entmax maps (alpha-entmax family): the ones --alpha-warmup moves from softmax to their alpha
ENTMAX_NAMES = ("entmax15", "entmax-alpha")
