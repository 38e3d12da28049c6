"""The one shared module for the studies' records, pairing and verdicts.

The verdict rule itself (a two-sided paired t-test on the per-seed differences, Holm's correction across a family,
the table cells and :class:`Family`) is :mod:`attnkit.analysis.stats`, re-exported here; ``attnkit sweep`` uses it too.

:func:`provenance` is what every record written from now on carries: the git commit, whether the tree was dirty,
and the attnkit, torch and transformers versions; :func:`weights_sha256` the digest of a model a later step reuses.
Records are JSON lists, one per table, appended under a file lock (:func:`add_record`) so that several workers may
share one.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import statistics
from pathlib import Path

from attnkit.analysis.stats import (  # noqa: F401  (the verdict code lives in the package: attnkit sweep uses it too)
    MARGIN,
    MIN_SEEDS,
    VERDICTS,
    Family,
    PairedTest,
    family_verdicts,
    format_p,
    format_paired,
    holm,
    paired,
    paired_test,
    rule_text,
    verdicts_by_family,
)
from attnkit.runfiles.provenance import git_output, provenance  # noqa: F401  (studies record them through here)

# ---------------------------------------------------------------------------------------------------------------------
# Records: one JSON list per table, read and appended under a lock (several workers may share a file)

@contextlib.contextmanager
def locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_records(path: Path) -> list[dict]:
    """A records file's list (empty where there is none yet)."""
    return json.loads(path.read_text()) if path.is_file() else []


def write_records(path: Path, recs: list[dict]) -> None:
    """Replace the records file atomically (call with the lock held)."""
    from attnkit.runfiles.atomic import write_text_atomic

    write_text_atomic(path, json.dumps(recs, indent=1) + "\n")


def replace_record(path: Path, rec: dict, same, order, then=None, write=write_records) -> list[dict]:
    """Under the lock: drop the records ``same(old, rec)`` calls the same cell, add ``rec``, sort by ``order``, write;
    ``then(records)`` runs still holding the lock."""
    with locked(path):
        recs = sorted([r for r in read_records(path) if not same(r, rec)] + [rec], key=order)
        write(path, recs)
        if then is not None:
            then(recs)
        return recs


def add_record(path: Path, rec: dict, key: tuple[str, ...] = ("task", "method", "seed"), then=None) -> list[dict]:
    """Add (or replace) the record with ``rec``'s ``key`` under the lock; ``then(records)`` runs still holding it."""
    def k(r):  # a field a record lacks reads as "": a key may grow a field older records do not have
        return tuple(r.get(f, "") for f in key)

    return replace_record(path, rec, lambda old, new: k(old) == k(new), k, then)


# ---------------------------------------------------------------------------------------------------------------------
# Cells of paired comparisons in the tables

def mean_sd(xs: list[float]) -> str:
    """mean ± std as the tables print them (one decimal; std 0 for one value, "—" for none)."""
    if not xs:
        return "—"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.1f} ± {sd:.1f}"


def run_setting(r: dict) -> str:
    """One record's machine and arithmetic as a table header names them, from the record's own fields: ``machine``,
    ``precision`` (or an older ``bf16`` flag; fp32 where neither is recorded: attnkit's default, and the only arithmetic
    before ``--bf16`` existed) and ``torch_threads``."""
    precision = r.get("precision") or ("bf16" if r.get("bf16") else "fp32")
    parts = [r.get("machine") or "machine not recorded", precision]
    threads = r.get("torch_threads")
    if threads:
        parts.append(f"{threads} torch thread{'s' * (threads != 1)} per run")
    return ", ".join(parts)


def run_settings(recs: list[dict]) -> str:
    """Where and in what arithmetic ``recs`` ran, read from the records (never assumed): the one setting they share,
    or each setting with its count of records, the most frequent first."""
    counts: dict[str, int] = {}
    for r in recs:
        counts[run_setting(r)] = counts.get(run_setting(r), 0) + 1
    if not counts:
        return "no records"
    if len(counts) == 1:
        return next(iter(counts))
    return "; ".join(f"{k} ({n} record{'s' * (n != 1)})" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


#: The one Holm family rule of every study table: a family is the comparisons that answer one question against one
#: baseline on one set (and, where a table has several, for one ranking and measure). 1.5-entmax in the last layer only
#: (``entmax15-last``, ``attnkit train --recipe faithful``) answers another question than the methods beside it (is the
#: recipe as accurate as softmax, and more faithful?), so in every table it is a family of its own: each of its
#: comparisons is tested alone, and adding it to a table moves no other method's verdict. So is each remedy tried on the
#: recipe where it costs accuracy (``entmax15-last+alpha-warmup``: the recipe with alpha's warm-up from softmax).
RECIPE = "entmax15-last"
OWN_FAMILY = frozenset({RECIPE, f"{RECIPE}+alpha-warmup"})
#: the clause a table header adds to its Holm sentence
OWN_FAMILY_TEXT = ("entmax15-last, the recipe (1.5-entmax in the last layer only, `--recipe faithful`), is a family of its "
                   "own, as is each remedy tried on it")


def family_key(key, method: str):
    """The Holm family of ``method``'s comparison, given the key of the table's family for it: ``key`` itself, or, for
    a method of :data:`OWN_FAMILY`, ``key`` with the method added (a family of its own)."""
    if key is None:
        return None
    return (*key, method) if method in OWN_FAMILY else key


def verdict(diffs: list[float]) -> str:
    """The verdict of one paired comparison standing alone: a two-sided paired t-test at 5% (studies.stats)."""
    return paired_test(diffs).verdict


# ---------------------------------------------------------------------------------------------------------------------
# Provenance

def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a file (a model's weights), so "the same model to the bit" is checked, not inferred."""
    import hashlib

    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def weights_sha256(model_dir: str | Path) -> str:
    """SHA-256 over a saved model's parameters (names and float bytes, sorted by name): equal digests, the same model
    to the bit, whatever file format or shard layout saved it. For the records of models a later step reuses."""
    import hashlib

    from attnkit.models.checkpoint import load_model

    h = hashlib.sha256()
    for k, v in sorted(load_model(model_dir).state_dict().items()):
        h.update(k.encode() + v.detach().contiguous().cpu().numpy().tobytes())
    return h.hexdigest()
