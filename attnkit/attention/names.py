"""The normaliser names the command line offers, kept free of torch so that ``attnkit --help`` answers at once."""

from __future__ import annotations

#: the built-in normalisers of :data:`attnkit.attention.normalisers.NORMALISERS` (a test keeps the two equal)
NORMALISER_NAMES = ("softmax", "taylor", "sparsemax", "sparsegen-lin", "entmax15", "entmax-alpha")

#: the built-in normalisers ``attnkit adapt`` anneals to (their records' ``anneal``; a test keeps the two equal)
ANNEALED_NAMES = ("sparsemax", "sparsegen-lin", "entmax15", "entmax-alpha")

#: MiniBERT's attention kinds (METHODS.md §3): MiniSA, MiniSSA, MiniNTA
KINDS = ("sa", "ssa", "nta")

def value_name(value: float) -> str:
    """A lam or alpha as attnkit names it (a sweep's cells, tables and figures, a run's attention): up to 12
    significant digits (``-2``, ``0.9999999``), so that two values named alike are the same value (6 digits named
    0.9999999 "1", a lam attnkit refuses), and -0 named 0 (the same value)."""
    return f"{float(value) + 0.0:.12g}"


_names: dict[str, bool] = {n: n in ANNEALED_NAMES for n in NORMALISER_NAMES}  # name -> whether adapt anneals to it


def add_name(name: str, annealed: bool) -> None:
    """Offer ``name`` on the command line (``register_normaliser`` calls this)."""
    _names[name] = bool(annealed)


def remove_name(name: str) -> None:
    _names.pop(name, None)


class NormaliserChoices:
    """The ``--attention`` choices, read when the command line is parsed: the built-ins and every normaliser
    registered since (``adapt_only``: those ``attnkit adapt`` anneals to, and softmax, its control)."""

    def __init__(self, adapt_only: bool = False):
        self.adapt_only = adapt_only

    def names(self) -> list[str]:
        return [n for n, annealed in _names.items() if not self.adapt_only or annealed or n == "softmax"]

    def __iter__(self):
        return iter(self.names())

    def __contains__(self, name) -> bool:
        return name in self.names()

    def __len__(self) -> int:
        return len(self.names())
