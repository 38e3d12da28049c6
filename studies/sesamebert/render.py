"""SesameBERT's tables and Figure 4, rendered from the records: Table 2 (every sigma, the selection protocols, bf16
against float32), Table 3, HANS.
"""

from __future__ import annotations

import collections
import itertools
import json
import statistics
from pathlib import Path

from attnkit.runfiles.atomic import write_text_atomic
from studies import stats
from studies.sesamebert.cells import (
    HANS_MODELS, HEURISTICS, KEY, METRIC, PAPER_SIGMAS, SIGMAS, T3_VARIANTS, as_identity_sigma, by_cell, in_figure4,
    is_identity, se_weights, strategies, variants,
)

#: how each precision is described at the top of a table
PRECISION = {"fp32": "float32 throughout",
             "bf16": "bfloat16 mixed precision (`attnkit train --bf16`: matrix products in bf16 under autocast, weights, optimizer, "
                     "the attention normaliser and the blur in float32; a RTE run 2-4x faster here than in float32)"}


def precision_tag(precision: str) -> str:
    return "" if precision == "fp32" else f"_{precision}"


def _header(title: str, grid: str, precision: str, records: str, note: str = "") -> list[str]:
    """A table's title, arithmetic and the command and records that made it (``records``: names with ``{t}``, the
    precision's file suffix)."""
    t = precision_tag(precision)
    return [f"# {title}{', bf16' if precision != 'fp32' else ''})", "", f"Arithmetic: {PRECISION[precision]}.{note}", "",
            f"Made by `studies/sesamebert/sesame_paper.py{grid}{' --bf16' * (precision == 'bf16')}` (records: {records.format(t=t)})."]


def render_table3(recs: list[dict], precision: str = "fp32") -> str:
    by = by_cell(recs)
    lines = [*_header("SesameBERT Table 3 at the paper's budget (MiniLM, RTE", " --grid table3", precision, "`sesame_paper_table3{t}.json`"),
             "RTE dev accuracy (× 100),",
             "mean ± std over seeds, for each extraction strategy with plain softmax attention, SE over the layers, blur on the",
             "context layer (the sigma in each record) and both; paired: minus the softmax cell of the same strategy and seed",
             "(seeds won, t, p) and the verdict.",
             stats.rule_text(family="every paired cell of the table (the seven strategies × SE, blur, SE + blur)"), "",
             "| strategy | " + " | ".join(v for v, _, _ in T3_VARIANTS) + " | " + " | ".join(f"{v} − softmax" for v, _, _ in T3_VARIANTS[1:]) + " |",
             "|---|" + "---|" * (2 * len(T3_VARIANTS) - 1)]
    fam = stats.Family()
    for pooling in strategies():
        soft = by.get(("rte", f"{pooling}|softmax"), {})
        if not any(("rte", f"{pooling}|{v}") in by for v, _, _ in T3_VARIANTS):
            continue
        cells, diffs = [], []
        for v, _, _ in T3_VARIANTS:
            cell = by.get(("rte", f"{pooling}|{v}"), {})
            cells.append(f"{_mean_sd([100 * r['dev_metric'] for r in cell.values()])} ({len(cell)})" if cell else "—")
            if v != "softmax":
                d = [100 * (cell[s]["dev_metric"] - soft[s]["dev_metric"]) for s in sorted(set(cell) & set(soft))]
                diffs.append(fam.add(d, "table3", ", ") if d else "—")
        lines.append(f"| {pooling} | " + " | ".join(cells) + " | " + " | ".join(diffs) + " |")
    sig = sorted({r["blur_sigma"] for r in recs if r.get("blur_sigma") is not None})
    lines += ["", f"Blur sigma: {', '.join(f'{x:g}' for x in sig) or '—'}; (n): seeds."]
    own = sorted((v for (_, v) in by if "|plr" in v), key=lambda v: (strategies().index(v.split("|")[0]), v.split("|")[1:]))
    if own:
        lines += ["", "## SE with a learning rate of its own (`--pooling-lr`)", "",
                  "At the paper's lr the SE layer and the weighted mix end where they started (Figure 4); these runs train them",
                  "(`--grid table3 --pooling-lr X`: SE's parameters and the mix at X, every other weight at 3e-5). Paired: minus",
                  "the softmax cell and minus the SE cell at the paper's lr, same strategy and seed; Holm's correction across",
                  "the rows of each column.", "",
                  "| strategy | variant | pooling lr | dev | − softmax | − the same at the paper's lr |", "|---|---|---|---|---|---|"]
        for name in own:
            pooling, v, _ = name.split("|")
            cell, soft, base = by[("rte", name)], by.get(("rte", f"{pooling}|softmax"), {}), by.get(("rte", f"{pooling}|{v}"), {})
            pair = lambda ref, key: fam.add([100 * (cell[s]["dev_metric"] - ref[s]["dev_metric"]) for s in sorted(set(cell) & set(ref))], key, ", ") \
                if set(cell) & set(ref) else "—"  # noqa: E731
            lines.append(f"| {pooling} | {v} | {next(iter(cell.values()))['pooling_lr']:g} | "
                         f"{_mean_sd([100 * r['dev_metric'] for r in cell.values()])} ({len(cell)}) | {pair(soft, 'plr − softmax')} "
                         f"| {pair(base, 'plr − paper lr')} |")
    for name, cell in sorted((v, c) for (_, v), c in by.items()):
        if any("same_as" in r for r in cell.values()):
            run, same = [",".join(str(s) for s in sorted(cell) if ("same_as" in cell[s]) == b) for b in (False, True)]
            lines.append(f"{name}, seeds {same}: {next(r['same_as'] for r in cell.values() if 'same_as' in r)}'s records, the same "
                         f"model (run at seeds {run}, its weights equal Table 2's, SHA-256).")
    return "\n".join(fam.fill(lines)) + "\n"


def render_hans(recs: list[dict], precision: str = "fp32") -> str:
    by = by_cell(recs)
    lines = [*_header("HANS at the paper's budget (MiniLM trained on MNLI's dev-matched split", " --grid hans", precision, "`sesame_paper_hans{t}.json`"),
             "MNLI's training set is not",
             "here, so every model trains on `mnli-devsplit` (its train part, 3 epochs, batch 32, lr 3e-5); accuracy (× 100) on",
             "its validation part (which chose the epoch), on its test part (untouched by the choice) and on HANS per",
             "heuristic and gold label (neutral and contradiction count as non-entailment), mean ± std over seeds.", "",
             "| model | seeds | MNLI dev-split val | MNLI dev-split test | HANS | "
             + " | ".join(f"{h} ent | {h} non-ent" for h in HEURISTICS) + " |",
             "|---|---|---|---|---|" + "---|---|" * len(HEURISTICS)]
    for name in HANS_MODELS:
        cell = by.get(("mnli-devsplit", name))
        if not cell:
            continue
        rs = list(cell.values())
        tests = [100 * r["test_metric"] for r in rs if r.get("test_metric") is not None]
        cols = [_mean_sd([100 * r["dev_metric"] for r in rs]), _mean_sd(tests) if len(tests) == len(rs) else "—",
                _mean_sd([100 * r["hans_accuracy"] for r in rs])]
        cols += [_mean_sd([100 * r["hans"][h][g] for r in rs]) for h in HEURISTICS for g in ("entailment", "non-entailment")]
        lines.append(f"| {name} | {_seeds(cell)} | " + " | ".join(cols) + " |")
    soft = by.get(("mnli-devsplit", "softmax"), {})
    fam = stats.Family()
    claims = []
    for name in list(HANS_MODELS)[1:]:
        cell = by.get(("mnli-devsplit", name), {})
        both = sorted(set(cell) & set(soft))  # the seeds both ran
        lex = lambda g: lambda r: r["hans"]["lexical_overlap"][g]  # noqa: E731
        paired = lambda get: [100 * (get(cell[s]) - get(soft[s])) for s in both]  # noqa: E731
        d = paired(lex("non-entailment"))
        if d:
            own, ref = (statistics.mean(lex("non-entailment")(c[s]) for s in both) for c in (cell, soft))
            ratio = f"{own / ref:.1f}x softmax's accuracy" if ref > 0 else "softmax's accuracy is 0"
            ent, overall = paired(lex("entailment")), paired(lambda r: r["hans_accuracy"])
            # MNLI accuracy, the same pairs: on the validation part (it chose each run's epoch) and on the test part
            # (untouched by the choice; older records lack it: only the seeds both have)
            val = paired(lambda r: r["dev_metric"])
            held = [s for s in both if cell[s].get("test_metric") is not None and soft[s].get("test_metric") is not None]
            test = [100 * (cell[s]["test_metric"] - soft[s]["test_metric"]) for s in held]
            claims += ["", f"The paper's claim, lexical-overlap non-entailment, {name} − softmax (paired, seeds ahead, t, p): "
                           f"{fam.add(d, 'claim', ': **')}**; {ratio} (the paper: "
                           f"SesameBERT almost 3x BERT-base's). The same pairs on lexical-overlap entailment: {fam.add(ent, None, ', ')}; "
                           f"on all of HANS: {fam.add(overall, None, ', ')} (a model that says non-entailment more often gains on the one "
                           "and loses on the other without resisting the heuristic). "
                           f"MNLI accuracy, {name} − softmax, the same pairs: on the dev split's validation part (which chose the "
                           f"epoch) {fam.add(val, None, ', ')}; on its test part (untouched by the choice) "
                           f"{fam.add(test, None, ', ')}."]
    if claims:
        lines += ["", stats.rule_text(family="the models' claims (lexical-overlap non-entailment against softmax); "
                                            "the entailment and overall differences stand alone"), *claims]
    return "\n".join(fam.fill(lines)) + "\n"


def figure4(recs: list[dict], a, path: Path) -> Path | None:
    """Figure 4: the mean SE weight per layer on RTE dev of the SE runs of Table 3's ``weighted`` strategy (and of the
    last-layer SE runs), mean ± std over seeds, as a bar chart (PNG and SVG) with its numbers in JSON."""
    import numpy as np

    from attnkit.analysis.explain import pyplot, save_figure

    series, init = {}, {}
    for r in recs:
        if not in_figure4(r):
            continue
        if r.get("se_weights") is None and Path(r["run"], "model").is_dir():  # a record without se_weights: measured from its model
            r = {**r, "se_weights": se_weights(Path(r["run"]), "rte", a)}
        if r.get("se_weights") is not None:
            series.setdefault(r["variant"], []).append(r["se_weights"])
            init.setdefault(r["variant"], []).append(r.get("se_weights_init"))
    if not series:
        return None
    plt = pyplot()
    names = sorted(series)
    out = {n: {"mean": np.mean(v, 0).tolist(), "std": np.std(v, 0, ddof=1 if len(v) > 1 else 0).tolist(), "seeds": len(v)} for n, v in series.items()}
    for n in names:  # the same seeds' models before their first step, where every one is known
        if None not in init[n]:
            out[n]["initial_mean"] = np.mean(init[n], 0).tolist()
            out[n]["largest_change"] = float(np.abs(np.asarray(series[n]) - np.asarray(init[n])).max())  # any seed, any layer

    def draw():
        fig, ax = plt.subplots(figsize=(7, 3.2))
        width = 0.8 / len(names)
        for i, n in enumerate(names):
            m, sd = np.asarray(out[n]["mean"]), np.asarray(out[n]["std"])
            ax.bar(np.arange(len(m)) + i * width, m, width, yerr=sd, capsize=2, label=f"{n} ({out[n]['seeds']} seeds)")
            if "initial_mean" in out[n]:
                ax.scatter(np.arange(len(m)) + i * width, out[n]["initial_mean"], marker="_", s=60, color="black", zorder=3,
                           label="before training (the same seeds)" if i == min(j for j, k in enumerate(names) if "initial_mean" in out[k]) else None)
        ax.set_xticks(np.arange(len(m)) + 0.4 - width / 2, [f"L{i + 1}" for i in range(len(m))])
        ax.set_ylabel("mean SE weight on RTE dev")
        ax.legend(fontsize=6)
        moved = {own: [out[n]["largest_change"] for n in names if "largest_change" in out[n] and ("|plr" in n) == own] for own in (False, True)}
        note = "; ".join(f"{what} ≤ {max(moved[own]):.4f}" for own, what in ((False, "paper's lr"), (True, "--pooling-lr"))
                         if moved[own])
        ax.set_title("SesameBERT Figure 4 on MiniLM: SE weight per layer (mean ± std over seeds)"
                     + (f"\nlargest change from the initial SE weights: {note}" if note else ""), fontsize=9)
        return fig

    for ext in (".png", ".svg"):
        save_figure(draw(), path.with_suffix(ext))
    write_text_atomic(path.with_suffix(".json"), json.dumps(out, indent=1) + "\n")
    return path.with_suffix(".png")


def _seeds(cell: dict) -> str:
    run = [s for s in sorted(cell) if "same_as" not in cell[s]]
    same = [s for s in sorted(cell) if "same_as" in cell[s]]
    return ",".join(map(str, run)) + (f" (+{','.join(map(str, same))} = softmax's)" if same else "")


def _mean_sd(xs: list[float]) -> str:
    return stats.mean_sd(xs)


def _paired(d: list[float], sep: str = " | ") -> str:
    """Paired differences as the tables print them (Table 2's ``paired``: the paired t-test standing alone)."""
    return stats.paired(d, sep)


def kernel_text(rec: dict) -> str:
    """The 3-wide blur kernel of a record, from its sigma in float32 and rounded once (not from the record's
    ``kernel``, which is already rounded to 4 digits)."""
    if rec.get("blur_sigma") is None:
        return "—"
    from attnkit.attention.blur import gaussian_kernel

    return ", ".join(f"{float(x):.3f}" for x in gaussian_kernel(3, rec["blur_sigma"]))


def distinct_runs(by: dict, task: str) -> int | None:
    """How many different models the paper's protocol chooses among at one seed: softmax's run and the sigma grid's,
    counted by weights (the identity sigmas train softmax's own model), most common over seeds. Selection alone
    is then the best of that many softmax seeds against their mean (an upper bound: seeds differ more than sigmas)."""
    soft = by.get((task, "softmax"), {})
    counts = []
    for place in ("value", "context"):
        names = [f"blur-{place}-{x:g}" for x in PAPER_SIGMAS]
        for s in sorted(set(soft).intersection(*[set(by.get((task, n), {})) for n in names])):
            digests = {soft[s].get("weights_sha256")} | {by[(task, n)][s].get("weights_sha256") for n in names}
            counts.append(len(digests) if None not in digests else len(names) + 1)
    return max(set(counts), key=counts.count) if counts else None


def clean_picks(held: dict, task: str, place: str) -> dict[int, dict]:
    """Per seed (of those with every sigma of the paper's grid held out), the record the clean protocol picks: the best
    score on the held-out part of train (ties: the smaller sigma)."""
    names = [f"blur-{place}-{x:g}" for x in PAPER_SIGMAS]
    seeds = sorted(set(held.get((task, "softmax"), {})).intersection(*[set(held.get((task, n), {})) for n in names]))
    return {s: held[(task, max(names, key=lambda n: held[(task, n)][s]["heldout_metric"]))][s] for s in seeds}


def clean_sigma(held_recs: list[dict], task: str = "rte", place: str = "context") -> tuple[float | None, str]:
    """The sigma Table 3 and HANS blur at: the one the clean protocol chose at most seeds (blur on ``place`` of
    ``task``), and a sentence saying how it was chosen; None where there are no such runs or the seeds tie."""
    picks = {s: r["blur_sigma"] for s, r in clean_picks(by_cell(held_recs), task, place).items()}
    if not picks:
        return None, f"no held-out runs of {task} with blur on {place} at every sigma of the paper's grid"
    counts = collections.Counter(picks.values()).most_common()
    chosen = ", ".join(f"{s}: {x:g}" for s, x in sorted(picks.items()))
    if len(counts) > 1 and counts[0][1] == counts[1][1]:
        return None, f"the clean protocol's choices tie over {len(picks)} seeds ({chosen}): give --sigma"
    return counts[0][0], (f"sigma {counts[0][0]:g}: the clean protocol's choice (blur on {place}, {task}) at {counts[0][1]} of "
                          f"{len(picks)} seeds ({chosen})")


def paper_grid(by: dict, task: str) -> tuple[dict, bool]:
    """``by`` with softmax's records standing in for the identity sigmas of the paper's grid (0.01, 0.1) where ``task``
    ran none of them (SST-2, whose runs take 18 minutes here: their float32 kernel is the identity, and they trained
    softmax's model bit for bit on every task where they were run); and whether any stood in."""
    soft = by.get((task, "softmax"), {})
    ident = [(place, x) for place in ("value", "context") for x in PAPER_SIGMAS if is_identity(x)]
    if not soft or any((task, f"blur-{place}-{x:g}") in by for place, x in ident):
        return by, False
    grid = dict(by)
    for place, x in ident:
        grid[(task, f"blur-{place}-{x:g}")] = {s: as_identity_sigma(r, place, x) for s, r in soft.items()}
    return grid, True


def selection(by: dict, held: dict, task: str) -> list[str]:
    """The paper's protocol beside the clean one, and best-of-4 over plain softmax's seeds."""
    lines = []
    by, stand_in = paper_grid(by, task)
    paper = "paper: best sigma by dev, on dev" + (" (0.01 and 0.1 not run: softmax's runs stand in)" if stand_in else "")
    soft = by.get((task, "softmax"), {})
    for place in ("value", "context"):
        names = [f"blur-{place}-{x:g}" for x in PAPER_SIGMAS]
        seeds = sorted(set(soft).intersection(*[set(by.get((task, n), {})) for n in names]))
        if seeds:
            best = {s: max(names, key=lambda n: by[(task, n)][s]["dev_metric"]) for s in seeds}
            gain = [100 * (by[(task, best[s])][s]["dev_metric"] - soft[s]["dev_metric"]) for s in seeds]
            picks = ", ".join(f"{s}: {by[(task, best[s])][s]['blur_sigma']:g}" for s in seeds)
            lines.append(f"| {task} | {place} | {paper} | {','.join(map(str, seeds))} | {picks} "
                         f"| {_mean_sd([100 * by[(task, best[s])][s]['dev_metric'] for s in seeds])} | {_paired(gain)} |")
        hsoft, pick = held.get((task, "softmax"), {}), clean_picks(held, task, place)
        if pick:
            gain = [100 * (pick[s]["dev_metric"] - hsoft[s]["dev_metric"]) for s in pick]
            picks = ", ".join(f"{s}: {pick[s]['blur_sigma']:g}" for s in pick)
            frac = next(iter(hsoft.values())).get("holdout") or 0
            lines.append(f"| {task} | {place} | clean: sigma (and epoch) by a held-out {100 * frac:g}% of train, on dev | {','.join(map(str, pick))} | {picks} "
                         f"| {_mean_sd([100 * pick[s]['dev_metric'] for s in pick])} | {_paired(gain)} |")
    k = distinct_runs(by, task)
    if k and len(soft) >= k:
        devs = {s: 100 * soft[s]["dev_metric"] for s in soft}
        gains = [max(devs[s] for s in sub) - statistics.mean(devs[s] for s in sub) for sub in itertools.combinations(sorted(devs), k)]
        lines.append(f"| {task} | none | selection alone: best of {k} softmax seeds, minus their mean | {','.join(map(str, sorted(devs)))} "
                     f"| every {k} of the {len(devs)} seeds | — | {statistics.mean(gains):.1f} (over {len(gains)} choice{'s' * (len(gains) > 1)} of {k}) | — |")
    return lines


def render(recs: list[dict], held_recs: list[dict] | None = None, precision: str = "fp32", fp32_recs: list[dict] | None = None) -> str:
    by, held = by_cell(recs), by_cell(held_recs or [])
    onward = (" The table goes on in bf16 (`--bf16`, 2-4x faster here): `sesame_paper_bf16.md`, where these float32 cells"
              " stand beside their bf16 twins.") if precision == "fp32" else ""
    lines = [*_header("SesameBERT Table 2 at the paper's budget (MiniLM", "", precision,
                      "`sesame_paper{t}.json`; held-out runs: `sesame_paper_holdout{t}.json`", onward),
             "Every run: the bundled all-MiniLM-L6-v2, the whole train split, batch 32 (of similar lengths), lr 3e-5, 3 epochs, max length 128,",
             "softmax attention, classifier on the last layer; dev metric (× 100) of the best epoch, mean ± std over seeds",
             "(the epoch is chosen by the task's GLUE metric: MRPC's by F1, reported by accuracy as the paper does; each record",
             "keeps every dev metric);",
             "paired: minus softmax on the same seed, in points: mean ± std [95% CI] (seeds won, t, p) and the verdict.",
             stats.rule_text(family="the blurs of one task (both places, every sigma whose kernel is not the identity); "
                                   "the identity sigmas, softmax's own model, stand alone"),
             "Kernel: the 3-wide blur weights in float32. At",
             "sigma 0.01 and 0.1 the kernel is the identity (tails 0 and 1.9e-22) and the run is softmax's bit for bit (weights'",
             "SHA-256 equal at the seeds run); seeds marked \"= softmax's\" take softmax's record for that reason.", "",
             "| task | variant | kernel | seeds | dev | paired − softmax | verdict |", "|---|---|---|---|---|---|---|"]
    tasks = sorted({t for t, _ in by}, key=lambda t: list(METRIC).index(t) if t in METRIC else 99)
    fam = stats.Family()
    for t in tasks:
        soft = by.get((t, "softmax"), {})
        names = [n for n, _, _ in variants(SIGMAS)] + sorted({v for tt, v in by if tt == t} - {n for n, _, _ in variants(SIGMAS)})
        for name in names:
            cell = by.get((t, name))
            if not cell:
                continue
            rs = [cell[s] for s in sorted(cell)]
            d = [100 * (cell[s]["dev_metric"] - soft[s]["dev_metric"]) for s in sorted(set(cell) & set(soft))] if name != "softmax" else []
            sigma = rs[0].get("blur_sigma")
            key = None if sigma is None or is_identity(sigma) else ("blur", t)
            lines.append(f"| {t} ({rs[0]['metric']}) | {name} | {kernel_text(rs[0])} "
                         f"| {_seeds(cell)} | {_mean_sd([100 * r['dev_metric'] for r in rs])} "
                         f"| {fam.add(d, key) if d else '— | —'} |")
    lines += where_run(recs)
    sel = [line for t in tasks for line in selection(by, held, t)]
    if sel:
        lines += ["", "## Choosing sigma: the paper's protocol, a clean one, and selection alone", "",
                  "Per seed, sigma is chosen from the paper's grid {0.01, 0.1, 0.3, 0.5}. The paper's protocol picks the best dev",
                  "score and reports it (on the whole-train runs above); the clean one trains without a held-out part of the",
                  "training split (the same part for every variant of a seed), keeps the epoch and picks sigma by it, and",
                  "reports that run's dev score (dev chose nothing), minus the held-out softmax run of the seed. The last row is",
                  "what picking the best of as many runs as the paper's grid holds (the identity sigmas are softmax's own run)",
                  "does to plain softmax: over every choice of that many of its seeds, the best dev score minus their mean.",
                  "Each protocol's gain is a paired t-test standing alone.", "",
                  "| task | blur | protocol | seeds | sigma chosen (seed: sigma) | dev | gain over softmax (seeds won) | verdict |",
                  "|---|---|---|---|---|---|---|---|", *sel]
        sigma, why = clean_sigma(held_recs or [])
        if sigma is not None:
            lines += ["", f"Table 3 and HANS blur on the context layer at {why}."]
    if fp32_recs:
        lines += precision_check(recs, fp32_recs, precision)
    return "\n".join(fam.fill(lines)) + "\n"


def where_run(recs: list[dict]) -> list[str]:
    """Where more than one machine trained the records: each machine with the seeds it ran per task, and whether every
    paired difference (a seed's variants against its softmax run) stayed on one machine."""
    on = collections.defaultdict(lambda: collections.defaultdict(set))  # machine -> task -> seeds
    per_seed = collections.defaultdict(set)  # (task, seed) -> machines
    for r in recs:
        m = r.get("machine", "unrecorded")
        on[m][r["task"]].add(r["seed"])
        per_seed[(r["task"], r["seed"])].add(m)
    if len(on) < 2:
        return []
    mixed = sorted(k for k, ms in per_seed.items() if len(ms) > 1)
    where = "; ".join(f"{m}: " + ", ".join(f"{t} seeds {','.join(map(str, sorted(ss)))}" for t, ss in sorted(ts.items()))
                      for m, ts in sorted(on.items()))
    same = ("every seed's cells on one machine, so each paired difference compares runs of one machine" if not mixed else
            "seeds whose cells span machines (their paired differences mix machines): "
            + ", ".join(f"{t} {s}" for t, s in mixed))
    return ["", f"Trained on: {where} ({same})."]


def precision_check(recs: list[dict], fp32_recs: list[dict], precision: str) -> list[str]:
    """The cells run in both float32 and ``precision`` (same task, variant, seed), side by side: does the arithmetic
    change the result? Paired differences per variant and pooled over every cell."""
    budget = ("train_size", "epochs", "lr", "batch_size", "max_length", "blur_sigma", "holdout")
    ours = {tuple(r[k] for k in KEY): r for r in recs}
    theirs = {tuple(r[k] for k in KEY): r for r in fp32_recs}
    common = set(ours) & set(theirs)
    both = sorted(k for k in common if all(ours[k].get(b) == theirs[k].get(b) for b in budget))
    if not both:
        return []
    unlike = len(common) - len(both)
    out = ["", f"## {precision} against float32 on the same cells", "",
           f"The cells run in float32 (`sesame_paper.json`) and again in {precision}: same data order, seed and settings.", "",
           f"| task | variant | seeds | float32 dev | {precision} dev | {precision} − float32 (paired) | same dev score, epoch by epoch |",
           "|---|---|---|---|---|---|---|"]
    groups: dict = {}
    for k in both:
        groups.setdefault(k[:2], []).append(k)
    every = []
    for (task, variant), ks in groups.items():
        d = [100 * (ours[k]["dev_metric"] - theirs[k]["dev_metric"]) for k in ks]
        every += d
        same = sum(ours[k].get("dev_per_epoch") == theirs[k].get("dev_per_epoch") for k in ks)
        out.append(f"| {task} | {variant} | {','.join(str(k[2]) for k in ks)} | {_mean_sd([100 * theirs[k]['dev_metric'] for k in ks])} "
                   f"| {_mean_sd([100 * ours[k]['dev_metric'] for k in ks])} | {_paired(d, ', ')} | {same}/{len(ks)} |")
    if unlike:
        out.append(f"| ({unlike} cell{'s' * (unlike > 1)} left out: run at another budget in the two files) | | | | | | |")
    out.append(f"| all | {len(groups)} variant{'s' * (len(groups) > 1)} | {len(every)} cell{'s' * (len(every) > 1)} | | | {_paired(every, ', ')} "
               f"(higher on {sum(x > 0 for x in every)}, lower on {sum(x < 0 for x in every)}) | |")
    return out
