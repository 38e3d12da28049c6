"""The adapt study's tables and figure, from its records (``studies/adapt/records.json``) alone.

    python -m studies.adapt.render            # writes results.md, frontier.png/.svg beside the records

Accuracy: per set, each method's test accuracy (mean ± sd over seeds) and, paired by seed, its difference to plain
softmax (Holm across the methods of one set) and, for the adapted 1.5-entmax rows, to adapted softmax. Faithfulness
(SST-2, SenTube-A): the [CLS] attention's comprehensiveness and sufficiency AOPC and SST-2's plausibility (AUPRC
against SST's word labels), paired against softmax. The figure: test accuracy against attention comprehensiveness,
one point per method and set (mean over seeds, sd as error bars), softmax and integrated gradients marked.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from studies import figures
from studies.stats import OWN_FAMILY_TEXT, family_key, format_paired, paired_test, rule_text, verdicts_by_family

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

TASK_NAMES = {"sst2-ptb": "SST-2", "sentube-auto": "SenTube-A", "sst5-phrases": "SST-1", "semeval2013": "SemEval-2013"}
ORDER = ("softmax", "entmax15", "entmax15-last", "adapted-softmax", "adapted-entmax15", "adapted-entmax15+distill")
#: the second baseline of a method (besides plain softmax): adapted 1.5-entmax is also read against adapted softmax
SECOND = {"adapted-entmax15": "adapted-softmax", "adapted-entmax15+distill": "adapted-softmax"}
FAITH = (("aopc_comprehensiveness", "comprehensiveness ↑", 1), ("aopc_sufficiency", "sufficiency ↓", -1),
         ("plausibility_auprc", "plausibility ↑", 1))


def read(path: Path) -> list[dict]:
    recs = json.loads(Path(path).read_text()) if Path(path).is_file() else []
    return [r for r in recs if not r.get("smoke")]


def _ms(xs, scale=100.0, digits=1) -> str:
    xs = [scale * x for x in xs if x is not None]
    if not xs:
        return "—"
    return f"{statistics.fmean(xs):.{digits}f} ± {statistics.stdev(xs) if len(xs) > 1 else 0.0:.{digits}f}"


def by_cell(recs: list[dict]) -> dict:
    """(task, method) -> {seed: record} of the fine-tuning records."""
    out: dict = {}
    for r in recs:
        if r["kind"] == "train":
            out.setdefault((r["task"], r["method"]), {})[r["seed"]] = r
    return out


def paired(cells: dict, task: str, method: str, base: str, value) -> list[float]:
    a, b = cells.get((task, method), {}), cells.get((task, base), {})
    out = []
    for s in sorted(set(a) & set(b)):
        va, vb = value(a[s]), value(b[s])
        if va is not None and vb is not None:
            out.append(va - vb)
    return out


def crosses(cells: dict, task: str, method: str, base: str) -> bool:
    """Whether some seed pairs two runs trained on different machines (GPUs lent on different days)."""
    a, b = cells.get((task, method), {}), cells.get((task, base), {})
    return any(a[s].get("machine") != b[s].get("machine") for s in set(a) & set(b))


def cell(test, cells: dict, task: str, method: str, base: str) -> str:
    """A paired cell against ``base``, marked ‡ where its pairs span two machines."""
    return format_paired(test) + (" ‡" if crosses(cells, task, method, base) else "")


def mean_nonzeros(r: dict) -> float | None:
    nz = r.get("nonzeros_per_row")
    return statistics.fmean(nz) if nz else None


def sparse_zero_share(r: dict) -> float | None:
    """The share of exact zeros in the layers that are sparse (all layers, or the last one for -last methods)."""
    z = r.get("zero_share")
    if not z:
        return None
    return z[-1] if r.get("sparse_layers") == "last" else statistics.fmean(z)


def accuracy_table(recs: list[dict]) -> str:
    cells = by_cell(recs)
    tasks = [t for t in TASK_NAMES if any(k[0] == t for k in cells)]
    lines = ["## Accuracy (test, best-dev checkpoint), Table 2's budget", "",
             rule_text(family=f"the methods of one set against plain softmax ({OWN_FAMILY_TEXT})"), "",
             "| set | method | seeds | test accuracy | − softmax | − adapted softmax | non-zeros / row | zeros in sparse layers |",
             "|---|---|---|---|---|---|---|---|"]
    for task in tasks:
        methods = [m for m in ORDER if (task, m) in cells]
        diffs = [paired(cells, task, m, "softmax", lambda r: r["test_accuracy"]) for m in methods]
        scaled = [[100 * d for d in ds] for ds in diffs]
        tests = verdicts_by_family([paired_test(d) for d in scaled],
                                   [None if m == "softmax" else family_key((task,), m) for m in methods])
        for m, t in zip(methods, tests):
            rs = cells[(task, m)]
            second = ""
            if m in SECOND and (task, SECOND[m]) in cells:
                second = cell(paired_test([100 * d for d in paired(cells, task, m, SECOND[m], lambda r: r["test_accuracy"])]),
                              cells, task, m, SECOND[m])
            nz = [mean_nonzeros(r) for r in rs.values()]
            zs = [sparse_zero_share(r) for r in rs.values()]
            lines.append(f"| {TASK_NAMES[task]} | {m} | {len(rs)} | {_ms([r['test_accuracy'] for r in rs.values()])} | "
                         f"{'' if m == 'softmax' else cell(t, cells, task, m, 'softmax')} | {second} | {_ms(nz, 1.0, 1)} | {_ms(zs)}% |")
    return "\n".join(lines) + "\n"


def faithfulness_table(recs: list[dict]) -> str:
    cells = by_cell(recs)
    lines = ["## Faithfulness and plausibility of the [CLS] attention (test texts)", "",
             "ERASER AOPC over 1, 5, 10, 20, 50% of the words, ties at random (5 draws); plausibility: AUPRC of the attention "
             "against SST's sentiment words (SST-2 only). Differences in points, paired by seed against plain softmax (and, for "
             "the adapted 1.5-entmax rows, against adapted softmax: the same continued pre-training); sufficiency "
             "is a loss (lower is better), so its difference is softmax minus the method (positive = better).",
             rule_text(family=f"the methods of one set and measure ({OWN_FAMILY_TEXT})"), "",
             "| set | method | seeds | " + " | ".join(f"{name} | − softmax | − adapted softmax" for _, name, _ in FAITH) + " | IG comprehensiveness |",
             "|---|---|---|" + "---|---|---|" * len(FAITH) + "---|"]
    for task in ("sst2-ptb", "sentube-auto"):
        methods = [m for m in ORDER if any("faithfulness" in r for r in cells.get((task, m), {}).values())]
        if not methods:
            continue
        cols = []
        for key, _, sign in FAITH:
            def val(r, key=key):
                f = r.get("faithfulness")
                v = f["explanations"]["attention"].get(key) if f else None
                return v
            ds = [[100 * sign * d for d in paired(cells, task, m, "softmax", val)] for m in methods]
            second = [paired_test([100 * sign * d for d in paired(cells, task, m, SECOND[m], val)]) if m in SECOND else None
                      for m in methods]
            cols.append((val, verdicts_by_family([paired_test(d) for d in ds],
                                                 [None if m == "softmax" else family_key((task, key), m) for m in methods]),
                         second))
        for i, m in enumerate(methods):
            rs = [r for r in cells[(task, m)].values() if "faithfulness" in r]
            row = f"| {TASK_NAMES[task]} | {m} | {len(rs)} |"
            for val, tests, second in cols:
                first = '' if m == 'softmax' else cell(tests[i], cells, task, m, 'softmax')
                other = '' if second[i] is None else cell(second[i], cells, task, m, SECOND[m])
                row += f" {_ms([val(r) for r in rs])} | {first} | {other} |"
            ig = [r["faithfulness"]["explanations"]["integrated_gradients"]["aopc_comprehensiveness"] for r in rs
                  if "integrated_gradients" in r["faithfulness"]["explanations"]]
            lines.append(row + f" {_ms(ig)} |")
    return "\n".join(lines) + "\n"


def adapt_table(recs: list[dict]) -> str:
    ad = [r for r in recs if r["kind"] == "adapt"]
    if not ad:
        return ""
    lines = ["## The adapted encoders", "", "| map | seed | MLM steps | anneal steps | texts | MLM loss at the end | zeros / layer | minutes | machine |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in sorted(ad, key=lambda r: (r["attention"], r["seed"])):
        zs = " ".join(f"{100 * z:.0f}%" for z in r.get("zero_share", []))
        lines.append(f"| {r['attention']} | {r['seed']} | {r['steps']} | {r.get('anneal_steps')} | {r['texts']['texts']:,} | "
                     f"{r['mlm_loss']:.3f} | {zs} | {r['seconds'] / 60:.1f} | {r['machine']} |")
    return "\n".join(lines) + "\n"


def frontier(recs: list[dict], stem: Path) -> list[Path]:
    """Accuracy against attention comprehensiveness, one point per (method, set), mean ± sd over seeds."""
    panels: dict[str, list[dict]] = {}
    for (task, m), rs in sorted(by_cell(recs).items(), key=lambda kv: list(TASK_NAMES).index(kv[0][0])):
        rs = [r for r in rs.values() if "faithfulness" in r]
        if not rs:
            continue
        ex = [r["faithfulness"]["explanations"] for r in rs]
        panels.setdefault(TASK_NAMES[task], []).append({
            "label": m, "softmax": m == "softmax", "acc": [100 * r["test_accuracy"] for r in rs],
            "com": [100 * e["attention"]["aopc_comprehensiveness"] for e in ex],
            "ig": [100 * e["integrated_gradients"]["aopc_comprehensiveness"] for e in ex]})
    return figures.frontier(panels, stem, "The frontier: accuracy against the faithfulness\nof the [CLS] attention (mean ± sd over seeds)")


def render(path: Path) -> str:
    recs = read(path)
    machines = sorted({r["machine"] for r in recs})
    cells = by_cell(recs)
    mixed = any(crosses(cells, t, m, b) for (t, m) in cells for b in {"softmax", SECOND.get(m, "softmax")} if b != m)
    same = ("Every pair compared was trained on the same machine and precision." if not mixed else
            "Runs are paired by seed, all in bf16 with the same commands; a difference marked ‡ pairs, at one seed or more, "
            "runs trained on two different GPUs (each lent for one session), so the machines' differences add to the "
            "noise its test sees.")
    head = ["# Adapting the encoder to 1.5-entmax before fine-tuning: the records, rendered", "",
            f"Rendered by `python studies/adapt/render.py` from `{Path(path).name}` ({len(recs)} records; "
            f"trained on: {'; '.join(machines) or '—'}). {same}", ""]
    return "\n".join(head) + "\n" + accuracy_table(recs) + "\n" + faithfulness_table(recs) + "\n" + adapt_table(recs)


def render_all(path: Path = HERE / "records.json") -> None:
    from attnkit.runfiles.atomic import write_text_atomic

    path = Path(path)
    write_text_atomic(path.with_name("results.md"), render(path))
    frontier(read(path), path.with_name("frontier"))


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("records", nargs="?", default=str(HERE / "records.json"), help="the records (default: records.json beside this file)")
    render_all(Path(ap.parse_args().records))
