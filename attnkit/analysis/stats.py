"""Paired comparisons over seeds and their verdicts: the one test every attnkit table uses.

A study compares a method with a baseline on the same seeds: the per-seed differences are the sample. Its verdict is
a two-sided paired t-test at level ``alpha`` (5% unless said): t = mean / (sd / sqrt(n)) with n − 1 degrees of
freedom, p from Student's t (scipy.stats). With n < 3 seeds there is no verdict ("too few seeds").

- **holds**: p < alpha and the mean difference is positive (the method is better);
- **reversed**: p < alpha and the mean difference is negative;
- **level**: neither, and the 95% confidence interval of the mean difference (mean ± t(0.975, n − 1) · se) lies
  inside ±``margin`` — a margin the table states (±1 point of accuracy in the studies); a comparison without a
  margin is never called level;
- **undecided**: otherwise (no difference shown, and none ruled out either: the interval says how large one may be).

Non-significance is not parity: a 3-seed test misses gaps of several points, so "level" asks for the interval.

Where a table reads a family of comparisons against one baseline (the values of a sweep, blurs, layer strategies,
methods on one set), :func:`family_verdicts` applies Holm's step-down correction across the family (:func:`holm`)
before a verdict is called, and the table's header says so (:func:`rule_text`). ``attnkit sweep``'s table and the
studies' tables (``studies/stats.py``) both call these.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, replace

VERDICTS = ("holds", "reversed", "level", "undecided", "too few seeds")
#: the confidence level of the interval every paired cell prints
CI_LEVEL = 0.95
#: the equivalence margin of "level", in the tables' unit: points (of accuracy, F1, or an ERASER measure × 100)
MARGIN = 1.0
MIN_SEEDS = 3


@dataclass(frozen=True)
class PairedTest:
    """A two-sided paired t-test on per-seed differences, and its verdict."""

    n: int
    mean: float
    sd: float
    se: float
    t: float
    df: int
    p: float
    verdict: str
    alpha: float = 0.05
    holm: bool = False  # whether the verdict was called under Holm's correction across a family
    won: int = 0  # how many differences are positive (seeds where the method is ahead)
    lo: float = float("nan")  # the 95% confidence interval of the mean difference (t with n − 1 degrees of freedom)
    hi: float = float("nan")
    margin: float | None = None  # the equivalence margin "level" is judged against (None: never level)

    def as_dict(self) -> dict:
        return asdict(self)


def _verdict(mean: float, p: float, alpha: float, lo: float = math.nan, hi: float = math.nan,
             margin: float | None = None) -> str:
    if p < alpha and mean != 0:
        return "holds" if mean > 0 else "reversed"
    return "level" if is_level(lo, hi, margin) else "undecided"


def is_level(lo: float, hi: float, margin: float | None) -> bool:
    """Whether the interval [lo, hi] lies inside ±margin (never with no margin or an undefined interval)."""
    return margin is not None and not (math.isnan(lo) or math.isnan(hi)) and -margin <= lo and hi <= margin


def interval(mean: float, se: float, df: int, level: float = CI_LEVEL) -> tuple[float, float]:
    """The two-sided ``level`` confidence interval of a mean from its standard error, Student's t with ``df``."""
    from scipy import stats as _st

    if df < 1 or math.isnan(se):
        return math.nan, math.nan
    half = float(_st.t.ppf(0.5 + level / 2, df)) * se
    return mean - half, mean + half


def paired_test(diffs, alpha: float = 0.05, margin: float | None = MARGIN) -> PairedTest:
    """Two-sided paired t-test of ``diffs`` (method − baseline, one per seed) against a mean of zero, with the 95%
    confidence interval of the mean difference and, where ``margin`` is given, the parity verdict "level".

    t and p agree with ``scipy.stats.ttest_rel(method, baseline)``. With fewer than 3 differences the statistics are
    still reported where defined (nan otherwise) but the verdict is "too few seeds". Differences that are all equal
    (sd 0) give t = ±inf and p = 0 when the mean is not zero, and t = nan, p = 1 when it is.
    """
    from scipy import stats as _st

    d = [float(x) for x in diffs]
    n = len(d)
    nan = float("nan")
    if n == 0:
        return PairedTest(0, nan, nan, nan, nan, 0, nan, "too few seeds", alpha, margin=margin)
    mean = statistics.fmean(d)
    won = sum(x > 0 for x in d)
    if n == 1:
        return PairedTest(1, mean, nan, nan, nan, 0, nan, "too few seeds", alpha, won=won, margin=margin)
    sd = statistics.stdev(d)
    se = sd / math.sqrt(n)
    df = n - 1
    if se == 0:
        t, p = (nan, 1.0) if mean == 0 else (math.copysign(math.inf, mean), 0.0)
    else:
        t = mean / se
        p = float(2 * _st.t.sf(abs(t), df))
    lo, hi = interval(mean, se, df)
    verdict = "too few seeds" if n < MIN_SEEDS else _verdict(mean, p, alpha, lo, hi, margin)
    return PairedTest(n, mean, sd, se, t, df, p, verdict, alpha, won=won, lo=lo, hi=hi, margin=margin)


def holm(pvalues, alpha: float = 0.05) -> list[bool]:
    """Holm–Bonferroni step-down: which of ``pvalues`` are rejected at family-wise level ``alpha``.

    Sorted ascending, the i-th smallest (0-based) is rejected while p_(i) <= alpha / (m − i); the first that is not
    stops the procedure. NaN p-values are never rejected (and count in m).
    """
    ps = [float(p) for p in pvalues]
    m = len(ps)
    order = sorted(range(m), key=lambda i: (math.isnan(ps[i]), ps[i]))
    reject = [False] * m
    for rank, i in enumerate(order):
        if math.isnan(ps[i]) or ps[i] > alpha / (m - rank):
            break
        reject[i] = True
    return reject


def family_verdicts(tests, alpha: float = 0.05) -> list[PairedTest]:
    """Verdicts across a family of paired tests against one baseline, under Holm's correction.

    ``tests`` are :class:`PairedTest` (or lists of differences, tested here). Only members with a verdict (n >= 3)
    enter the family; a member is "holds"/"reversed" when Holm rejects it, else "level" or "undecided" by its own
    (uncorrected) 95% interval. The returned tests keep their t, p and interval and carry ``holm=True``.
    """
    tests = [t if isinstance(t, PairedTest) else paired_test(t, alpha) for t in tests]
    members = [i for i, t in enumerate(tests) if t.verdict != "too few seeds"]
    rejected = holm([tests[i].p for i in members], alpha)
    out = list(tests)
    for i, rej in zip(members, rejected):
        t = tests[i]
        v = ("holds" if t.mean > 0 else "reversed") if rej and t.mean != 0 else \
            ("level" if is_level(t.lo, t.hi, t.margin) else "undecided")
        out[i] = replace(t, verdict=v, alpha=alpha, holm=True)
    return out


def verdicts_by_family(tests, families, alpha: float = 0.05) -> list[PairedTest]:
    """:func:`family_verdicts` within each group of ``tests`` that share a key in ``families`` (same length).

    A key of ``None`` leaves that test standing alone (its own verdict, no correction). Order is kept.
    """
    tests = [t if isinstance(t, PairedTest) else paired_test(t, alpha) for t in tests]
    out = list(tests)
    groups: dict = {}
    for i, key in enumerate(families):
        if key is not None:
            groups.setdefault(key, []).append(i)
    for idx in groups.values():
        for i, t in zip(idx, family_verdicts([tests[i] for i in idx], alpha)):
            out[i] = t
    return out


def _num(x: float, digits: int) -> str:
    if math.isnan(x):
        return "—"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    return f"{x:.{digits}f}"


def format_p(p: float) -> str:
    """p as the tables print it: two significant figures, "<0.001" below a thousandth."""
    if math.isnan(p):
        return "—"
    if p < 0.001:
        return "<0.001"
    if p < 0.01:
        return f"{p:.3f}"
    return f"{p:.2f}"


def format_interval(test: PairedTest, digits: int = 1) -> str:
    """The 95% confidence interval as the cells print it: "[-0.3, +2.7]" ("" where it is undefined)."""
    if math.isnan(test.lo) or math.isnan(test.hi):
        return ""
    return f"[{test.lo:+.{digits}f}, {test.hi:+.{digits}f}]"


def format_paired(test: PairedTest, digits: int = 1, verdict: bool = True, won: bool = False) -> str:
    """A paired cell: "+1.2 ± 0.4 [+0.2, +2.2] (t=3.0, p=0.09, undecided)"; mean ± sd of the differences, then the
    95% confidence interval of the mean difference.

    ``verdict=False`` leaves the verdict out (for tables that print it in a column of its own); ``won=True`` says
    first how many differences are positive, as seeds ahead of all ("+1.2 ± 0.4 [...] (3/3, t=3.0, ...)"). A verdict
    called under Holm's correction is marked "(Holm)" only in the table header, not in each cell.
    """
    if test.n == 0:
        return "—"
    mean = "—" if math.isnan(test.mean) else f"{test.mean:+.{digits}f}"
    sd = "—" if math.isnan(test.sd) else f"{test.sd:.{digits}f}"
    ci = format_interval(test, digits)
    parts = [f"t={_num(test.t, 1)}", f"p={format_p(test.p)}"]
    if won:
        parts.insert(0, f"{test.won}/{test.n}")
    if verdict:
        parts.append(test.verdict)
    return f"{mean} ± {sd}{' ' + ci if ci else ''} ({', '.join(parts)})"


def rule_text(alpha: float = 0.05, family: str | None = None, margin: float | None = MARGIN, unit: str = "point") -> str:
    """The sentence a table header uses to say which test gave its verdicts (the Holm family and margin, if any)."""
    s = (f"Verdicts: two-sided paired t-test on the per-seed differences at {alpha:.0%} (t with n − 1 degrees of "
         f"freedom; at least {MIN_SEEDS} seeds): **holds** if significant and positive, **reversed** if significant "
         f"and negative")
    if margin is not None:
        s += (f"; else **level** if the {CI_LEVEL:.0%} confidence interval of the mean difference lies inside "
              f"±{margin:g} {unit}{'s' * (margin != 1)} (the stated margin), else **undecided**")
    else:
        s += "; else **undecided** (no margin is stated here, so no comparison is called level)"
    s += (f"; each cell prints mean ± sd of the differences, the {CI_LEVEL:.0%} confidence interval of the mean "
          f"difference in brackets, t and p.")
    if family:
        s += (f" Holm's correction across {family}: holds/reversed only where Holm's step-down rejects at {alpha:.0%}; "
              f"the interval is each comparison's own.")
    return s


def paired(d: list[float], sep: str = " | ", test=None, margin: float | None = MARGIN) -> str:
    """Paired differences as the tables print them: mean ± std [95% CI] (seeds won of all, t, p), then the verdict after
    ``sep``; ``test`` is the comparison's :class:`PairedTest` where a family's Holm correction called it."""
    if not d:
        return f"—{sep}—"
    test = test or paired_test(d, margin=margin)
    return f"{format_paired(test, verdict=False, won=True)}{sep}{test.verdict}"


class Family:
    """Paired comparisons collected while a table is built, given their verdicts at once (Holm within each family),
    then written into the lines where their placeholders stand."""

    def __init__(self, margin: float | None = MARGIN):
        self.diffs, self.keys, self.margin = [], [], margin

    def add(self, d: list[float], family=None, sep: str = " | ") -> str:
        self.diffs.append((d, sep))
        self.keys.append(family if d else None)
        return f"\x00{len(self.diffs) - 1}\x00"

    def fill(self, lines: list[str]) -> list[str]:
        tests = verdicts_by_family([paired_test(d, margin=self.margin) for d, _ in self.diffs], self.keys)
        cells = [paired(d, sep, t) for (d, sep), t in zip(self.diffs, tests)]
        out = []
        for line in lines:
            parts = line.split("\x00")
            out.append("".join(cells[int(x)] if k % 2 else x for k, x in enumerate(parts)))
        return out
