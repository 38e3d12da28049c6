"""The reports of ``attnkit sweep``: its table (paired differences to softmax, verdicts) and its plot."""

from __future__ import annotations

import statistics
from pathlib import Path

from attnkit.analysis.explain import figure_path, pyplot, save_figure
from attnkit.analysis.stats import Family, rule_text
from attnkit.training.sweep_record import SWEPT, swept, value_name


def _by_lam(records: list[dict], field: str) -> tuple[list[float], list[float], list[float]]:
    lams = sorted({swept(r)[1] for r in records if swept(r)[1] != "softmax"})
    mean, sd = [], []
    for lam in lams:
        xs = [r[field] for r in records if swept(r)[1] == lam and r[field] is not None]
        mean.append(statistics.mean(xs) if xs else float("nan"))
        sd.append(statistics.stdev(xs) if len(xs) > 1 else 0.0)
    return lams, mean, sd


def _ms(xs: list[float]) -> str:
    if not xs:
        return "—"
    return f"{statistics.mean(xs):.1f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.1f}"


def sweep_table(records: list[dict], title: str = "") -> str:
    """Markdown: one row per lam (softmax first) with its seeds, dev and test metric in % (mean ± std), the test
    difference to softmax paired by seed (mean ± std, seeds ahead, t, p) with its verdict — a paired t-test, Holm's
    correction across the swept values (attnkit.analysis.stats) — and the mean non-zeros per attention row on dev."""
    metric = records[0]["metric"] if records else "accuracy"
    param = swept(records[0])[0] if records else "lam"
    soft = {r["seed"]: r for r in records if swept(r)[1] == "softmax"}
    fam = Family()
    lines = [f"# {title}" if title else "# attnkit sweep", "",
             f"{metric} in % (mean ± std over seeds); paired: test minus softmax's on the same seed, in points (mean ± std of",
             f"the differences [95% CI], seeds above softmax of all, t, p). {rule_text(family=f'the swept {param} values')}", "",
             f"| {param} | seeds | dev | test | paired test − softmax | verdict | mean support |",
             "|---|---|---|---|---|---|---|"]
    for lam in ["softmax"] + sorted({swept(r)[1] for r in records if swept(r)[1] != "softmax"}):
        rs = sorted((r for r in records if swept(r)[1] == lam), key=lambda r: r["seed"])
        if not rs:  # no softmax cell finished yet (--report-only on a sweep cut short)
            continue
        tests = [100 * r["test"] for r in rs if r["test"] is not None]
        paired = [100 * (r["test"] - soft[r["seed"]]["test"]) for r in rs
                  if lam != "softmax" and r["seed"] in soft and r["test"] is not None and soft[r["seed"]]["test"] is not None]
        name = lam if lam == "softmax" else value_name(lam)
        lines.append(f"| {name} | {', '.join(str(r['seed']) for r in rs)} | {_ms([100 * r['dev'] for r in rs])} | {_ms(tests)} "
                     f"| {fam.add(paired, param)} | {statistics.mean(r['mean_support'] for r in rs):.1f} |")
    return "\n".join(fam.fill(lines)) + "\n"


def seeds_note(records: list[dict]) -> str:
    """"mean ± std over seeds 1, 2", naming the points that have fewer seeds (a sweep still running, or cut short)."""
    seeds = sorted({r["seed"] for r in records})
    short: dict[str, list[str]] = {}
    param = swept(records[0])[0] if records else "lam"
    for lam in ["softmax"] + sorted({swept(r)[1] for r in records if swept(r)[1] != "softmax"}):
        have = sorted(r["seed"] for r in records if swept(r)[1] == lam)
        if have and len(have) < len(seeds):
            short.setdefault(", ".join(map(str, have)), []).append(lam if lam == "softmax" else f"{param} {value_name(lam)}")
    fewer = "; ".join(f"{', '.join(names)}: seed{'s' * (',' in k)} {k} only" for k, names in short.items())
    return f"mean ± std over seeds {', '.join(map(str, seeds))}" + (f" ({fewer})" if fewer else "")


def plot_sweep(records: list[dict], path: str | Path, title: str = "") -> Path:
    """Main metric against lam, error bars over seeds, softmax dashed; mean support on a second axis."""
    plt = pyplot()
    path = figure_path(path)
    field = "test" if all(r["test"] is not None for r in records) else "dev"
    metric = records[0]["metric"] if records else "accuracy"
    param = swept(records[0])[0] if records else "lam"
    fig, ax = plt.subplots(figsize=(6, 3.8))
    lams, mean, sd = _by_lam(records, field)
    if lams:
        ax.errorbar(lams, [100 * m for m in mean], yerr=[100 * s for s in sd], marker="o", capsize=3, color="#4c72b0",
                    label=f"{SWEPT[param]} ({field})")
    soft = [r[field] for r in records if swept(r)[1] == "softmax" and r[field] is not None]
    if soft:
        m = 100 * statistics.mean(soft)
        ax.axhline(m, ls="--", color="#c44e52", label=f"softmax ({field}) {m:.1f}")
        if len(soft) > 1:
            s = 100 * statistics.stdev(soft)
            ax.axhspan(m - s, m + s, color="#c44e52", alpha=0.08)
    ax.set_xlabel(f"{param} ({SWEPT[param]})")
    ax.set_ylabel(f"{field} {metric} (%)")
    ax.set_title((title + "\n" if title else "") + seeds_note(records), fontsize=9)
    if lams:
        ax2 = ax.twinx()
        _, sup, _ = _by_lam(records, "mean_support")
        ax2.plot(lams, sup, marker="s", ls=":", color="#7f7f7f", label="mean support (non-zeros per row)")
        ax2.set_ylabel("mean non-zeros per attention row (dev)", color="#7f7f7f")
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = ax2.get_legend_handles_labels()
        ax.legend(h1 + h2, l1 + l2, fontsize=7, loc="lower left")
    return save_figure(fig, path)
