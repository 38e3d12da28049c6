"""SesameBERT's Table 2 at the paper's budget (issue 26, item 1): does Gaussian blur help, at every sigma?

Every cell is a real in-process ``attnkit train`` run of the bundled MiniLM at the paper's settings (METHODS.md §2:
batch 32, lr 3e-5, 3 epochs, max length 128, the whole train split), dev metric of each epoch and of the best one.
Variants: ``softmax`` (no blur) and blur on the values or on the context layer at each ``--sigmas`` (kernel width 3).
Each finished cell is appended at once to ``--json`` (a locked read-modify-write, so several workers may share it; a
cell already there is skipped; a cell whose run folder holds checkpoints resumes from them) and the markdown table is
re-rendered: every sigma with its kernel weights, mean ± std over seeds, and the paired difference to softmax.

    OMP_NUM_THREADS=1 python studies/sesamebert/sesame_paper.py --tasks rte --seeds 1 2 3 4 5 --data-dir ../shared/data
    python studies/sesamebert/sesame_paper.py --render-only

Sigmas whose float32 kernel is the identity to within 1e-20 (0.01: exactly [0, 1, 0]; 0.1: tails of 1.9e-22, lost
when added to anything of ordinary size) train the very same model as no blur, bit for bit
(``tests/test_sesame.py::test_paper_sigmas_below_a_third_train_the_very_same_model_as_no_blur``). They are run at full
budget at ``--identity-check-seeds`` (default: seed 1) first, and every record holds the SHA-256 of its weights; where
those runs' weights equal softmax's of the same seed, the other seeds' cells are softmax's (marked so in the table)
rather than hours of the same run again (where they do not, or no check seed was run, every seed is run).

Selection (issue 26, item 2): ``--holdout 0.1`` trains every variant without a seeded 10% of the training split (the same
10% for every variant of a seed; the epoch kept is chosen on it too) into ``sesame_paper_holdout.json``; the table then
sets the paper's protocol (the best of sigma {0.01, 0.1, 0.3, 0.5} by dev, reported on dev, on the whole-train runs)
beside the clean one (sigma chosen by the held-out 10%, that run reported on dev, minus the held-out softmax run of the
seed), and the same best-of-k applied to plain softmax's seeds (k: the distinct models the grid holds, 3 where the
identity sigmas are softmax's run): how much of a gain selection alone produces.

    OMP_NUM_THREADS=1 python studies/sesamebert/sesame_paper.py --tasks rte --seeds 1 2 3 4 5 --holdout 0.1 --data-dir ../shared/data

Table 3 (``--grid table3``: RTE, the seven extraction strategies x softmax / SE / blur on the context layer at
sigma S / SE + blur, 3 seeds, paired against the softmax cell of the same strategy), HANS (``--grid hans``: softmax,
SesameBERT = SE + weighted layers + blur on context, and SesameBERT with sparsegen-lin, trained on ``mnli-devsplit``,
3 seeds, HANS per heuristic x label and the paper's lexical-overlap claim with a verdict) and Figure 4 (``--grid figure4``:
the SE weight per layer on RTE dev from Table 3's SE runs, mean ± std over seeds) use the same budget and records;
S is the sigma the clean protocol chose at most seeds for blur on RTE's context layer (``--sigma`` overrides it).
``--train-subset N`` shrinks every run for a smoke test (never for the committed tables).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path

from attnkit.runfiles.atomic import write_text_atomic

ROOT = Path(__file__).resolve().parents[2]
for _d in (ROOT / "studies" / "ssaf", ROOT):
    sys.path.insert(0, str(_d))
import ssaf_table2  # noqa: E402  (machine(); the shared records, pairing and verdicts of studies.stats)

SIGMAS = (0.01, 0.1, 0.3, 0.5, 1.0)
#: the grid the paper chose sigma from (by dev accuracy)
PAPER_SIGMAS = (0.01, 0.1, 0.3, 0.5)
#: the GLUE dev metric each task is reported by in the paper's Table 2
METRIC = {"rte": "accuracy", "mrpc": "accuracy", "cola": "mcc", "sst2": "accuracy", "mnli-devsplit": "accuracy"}
KEY = ("task", "variant", "seed")
#: every dev metric a record keeps beside the one it is reported by
DEV_METRICS = ("accuracy", "macro_f1", "mcc", "f1", "acc_and_f1")


def variants(sigmas) -> list[tuple[str, str, float | None]]:
    """(name, blur place, sigma): softmax, then blur on values and on context at each sigma."""
    out = [("softmax", "none", None)]
    for place in ("value", "context"):
        out += [(f"blur-{place}-{s:g}", place, float(s)) for s in sigmas]
    return out


def kernel_weights(sigma: float, size: int = 3) -> list[float]:
    from attnkit.attention.spec import gaussian_kernel

    return [round(float(x), 4) for x in gaussian_kernel(size, sigma)]


def is_identity(sigma: float | None, size: int = 3) -> bool:
    """Whether the float32 blur kernel at ``sigma`` is the identity (``attnkit.attention.spec.blur_is_identity``)."""
    from attnkit.attention.spec import blur_is_identity

    return sigma is not None and blur_is_identity(size, sigma)


def weights_digest(model_dir: Path) -> str:
    """SHA-256 over a saved model's parameters (names and float bytes, sorted): equal digests, the same model."""
    return ssaf_table2.weights_sha256(model_dir)


def cell_config(task: str, name: str, blur: str, sigma: float | None, seed: int, a, *, pooling: str = "last", se: bool = False,
                attention: str = "softmax", lam: float = 0.0, pooling_lr: float | None = None):
    """The ``attnkit train`` settings of one cell."""
    from attnkit.training.config import TrainConfig

    out = Path(a.work_dir) / f"{task}__{name.replace('|', '-')}__s{seed}"
    return TrainConfig(task=task, data_dir=a.data_dir, model=a.model, attention=attention, lam=lam, epochs=a.epochs, batch_size=a.batch_size,
                       lr=a.lr, max_length=a.max_length, seed=seed, output_dir=str(out), logging_steps=50,
                       max_train_samples=a.train_subset.get(task), holdout=a.holdout, blur=blur,
                       blur_sigma=sigma if sigma is not None else 0.3, pooling=pooling, se=se, pooling_lr=pooling_lr,
                       group_by_length=True,  # as Table 2: RTE's random batches pad to ~128 tokens, twice its mean length
                       precision=a.precision)


def run_cell(task: str, name: str, blur: str, sigma: float | None, seed: int, a, **kw) -> dict:
    from attnkit.training.finetune import train

    cfg = cell_config(task, name, blur, sigma, seed, a, **kw)
    out, pooling, se, attention = Path(cfg.output_dir), cfg.pooling, cfg.se, cfg.attention
    t0 = time.time()
    m = train(cfg)
    metric = METRIC[task]
    per_epoch = [h[f"eval_{metric}"] for h in m["log_history"] if f"eval_{metric}" in h]
    # Figure 4's numbers, kept in Table 3's records (run folders do not outlive a session)
    extra = {"se_weights": se_weights(out, task, a), "se_weights_init": initial_se_weights(cfg)} if se and a.grid == "table3" else {}
    return {
        "task": task, "variant": name, "blur": blur, "blur_sigma": sigma, "kernel": kernel_weights(sigma) if sigma is not None else None,
        "se": se, "layer_pooling": pooling, "pooling_lr": cfg.pooling_lr, "attention": attention, "seed": seed, "epochs": cfg.epochs, "lr": cfg.lr,
        "batch_size": cfg.batch_size, "max_length": cfg.max_length, "group_by_length": True, "train_size": m["train_size"], "metric": metric,
        "dev_metric": m["validation"][metric], ("heldout_per_epoch" if a.holdout else "dev_per_epoch"): per_epoch, "holdout": a.holdout,
        # the epoch kept is the best by the task's GLUE metric (MRPC: F1, reported here by accuracy as the paper does)
        "selected_by": m["main_metric"], "dev_metrics": {k: v for k, v in m["validation"].items() if k in DEV_METRICS},
        "test_metric": m["test"][metric] if isinstance(m.get("test"), dict) and metric in m["test"] else None,
        "heldout_metric": m["heldout"][metric] if "heldout" in m else None, "weights_sha256": weights_digest(out / "model"),
        "run": str(out), "train_seconds": round(m["train"].get("train_runtime", time.time() - t0), 1),
        "torch_threads": int(os.environ.get("OMP_NUM_THREADS", "0")) or None,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "machine": ssaf_table2.machine(),
        "precision": a.precision, "provenance": ssaf_table2.provenance(), **extra,
    }


def _dev_se_weights(model, tok, dev, max_length: int) -> list[float]:
    """The mean SE weight per layer of ``model`` on a dev split, ``attnkit layer-weights``'s numbers."""
    from attnkit.analysis.explain import layer_weights

    pairs = list(dev["text_pair"]) if "text_pair" in dev.column_names else None
    return [round(float(x), 6) for x in layer_weights(model, tok, list(dev["text"]), pairs, max_length=max_length)["se_mean"]]


def se_weights(run: Path, task: str, a) -> list[float]:
    """Figure 4: the mean SE weight per layer of a trained run on its task's dev split."""
    from attnkit.analysis.inference import load_for_inference
    from attnkit.tasks import load_task

    _, model, tok = load_for_inference(str(run))
    return _dev_se_weights(model, tok, load_task(task, a.data_dir).splits["validation"], a.max_length)


def initial_se_weights(cfg) -> list[float]:
    """Figure 4's reference: the same numbers for the model ``train(cfg)`` starts from, before its first step. train()
    seeds (``set_seed(cfg.seed)``) and then builds it with ``initial_classifier``, drawing nothing else from torch's
    generator in between; this does the same (``tests/test_sesame.py`` checks it against a run that cannot move its weights)."""
    from transformers import set_seed

    from attnkit.models.checkpoint import load_tokenizer
    from attnkit.tasks import load_task
    from attnkit.training.finetune import initial_classifier

    set_seed(cfg.seed)
    data = load_task(cfg.task, cfg.data_dir)  # once: its labels and its dev split
    model = initial_classifier(cfg, data)
    return _dev_se_weights(model.eval(), load_tokenizer(cfg.model), data.splits["validation"], cfg.max_length)


# ----------------------------------------------------------------------------- Table 3, HANS, Figure 4 (items 3-5)

#: Table 3's columns: (name, SE, blur on the context layer)
T3_VARIANTS = (("softmax", False, False), ("SE", True, False), ("blur", False, True), ("SE+blur", True, True))
#: the HANS models: name -> run settings (SesameBERT = SE + weighted layers + blur on the context layer)
HANS_MODELS = {"softmax": {}, "SesameBERT": dict(pooling="weighted", se=True, blur="context"),
               "SesameBERT+sparsegen-lin": dict(pooling="weighted", se=True, blur="context", attention="sparsegen-lin", lam=-4.0)}
HEURISTICS = ("lexical_overlap", "subsequence", "constituent")
#: Figure 4's series: the SE runs of Table 3 whose layers are pooled by learned weights or read at the last layer
FIGURE4_POOLING = ("weighted", "last")


def in_figure4(r: dict) -> bool:
    return bool(r.get("se")) and r.get("layer_pooling") in FIGURE4_POOLING


def strategies() -> tuple[str, ...]:
    from attnkit.models.pooling import STRATEGIES

    return STRATEGIES


def table3_cells(a):
    """(variant, blur, sigma, kwargs) of Table 3 on RTE: every extraction strategy x softmax / SE / blur / SE + blur; with
    ``--pooling-lr``, the SE columns only, their layer weights trained at that learning rate (variants "...|SE|plr<lr>")."""
    for pooling in a.strategies or strategies():
        for v, se, blur in T3_VARIANTS:
            if a.pooling_lr is None:
                yield f"{pooling}|{v}", "context" if blur else "none", a.sigma if blur else None, dict(pooling=pooling, se=se)
            elif se:
                yield (f"{pooling}|{v}|plr{a.pooling_lr:g}", "context" if blur else "none", a.sigma if blur else None,
                       dict(pooling=pooling, se=se, pooling_lr=a.pooling_lr))


def hans_record(rec: dict, a) -> dict:
    """The HANS report of a trained MNLI model (``attnkit evaluate --task hans``, written beside its run) added to its record."""
    from attnkit.cli import main as cli

    out = Path(rec["run"]) / "hans.json"
    if not out.is_file():
        args = ["evaluate", "--model", rec["run"], "--task", "hans", "--output", str(out), "--max-length", str(a.max_length)]
        if a.data_dir:
            args += ["--data-dir", a.data_dir]
        if a.hans_per_subcase:
            args += ["--hans-per-subcase", str(a.hans_per_subcase)]
        if cli(args) != 0:
            raise SystemExit(f"HANS evaluation of {rec['run']} failed")
    rep = json.loads(out.read_text())
    return {**rec, "hans_accuracy": rep["accuracy"], "hans_n": rep["n"], "hans": rep["heuristic"]}


#: how each precision is described at the top of a table
PRECISION = {"fp32": "float32 throughout",
             "bf16": "bfloat16 mixed precision (`attnkit train --bf16`: matrix products in bf16 under autocast, weights, optimizer, "
                     "the attention normaliser and the blur in float32; a RTE run 2-4x faster here than in float32)"}


def _tag(precision: str) -> str:
    return "" if precision == "fp32" else f"_{precision}"


def _header(title: str, grid: str, precision: str, records: str, note: str = "") -> list[str]:
    """A table's title, arithmetic and the command and records that made it (``records``: names with ``{t}``, the
    precision's file suffix)."""
    t = _tag(precision)
    return [f"# {title}{', bf16' if precision != 'fp32' else ''})", "", f"Arithmetic: {PRECISION[precision]}.{note}", "",
            f"Made by `studies/sesamebert/sesame_paper.py{grid}{' --bf16' * (precision == 'bf16')}` (records: {records.format(t=t)})."]


def render_table3(recs: list[dict], precision: str = "fp32") -> str:
    by = by_cell(recs)
    lines = [*_header("SesameBERT Table 3 at the paper's budget (MiniLM, RTE", " --grid table3", precision, "`sesame_paper_table3{t}.json`"),
             "RTE dev accuracy (× 100),",
             "mean ± std over seeds, for each extraction strategy with plain softmax attention, SE over the layers, blur on the",
             "context layer (the sigma in each record) and both; paired: minus the softmax cell of the same strategy and seed",
             "(seeds won, t, p) and the verdict.",
             ssaf_table2.rule_text(family="every paired cell of the table (the seven strategies × SE, blur, SE + blur)"), "",
             "| strategy | " + " | ".join(v for v, _, _ in T3_VARIANTS) + " | " + " | ".join(f"{v} − softmax" for v, _, _ in T3_VARIANTS[1:]) + " |",
             "|---|" + "---|" * (2 * len(T3_VARIANTS) - 1)]
    fam = ssaf_table2.Family()
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
    fam = ssaf_table2.Family()
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
        lines += ["", ssaf_table2.rule_text(family="the models' claims (lexical-overlap non-entailment against softmax); "
                                            "the entailment and overall differences stand alone"), *claims]
    return "\n".join(fam.fill(lines)) + "\n"


def backfill_initial_se(path: Path, a) -> int:
    """Add to Figure 4's records that lack them (those run before they were kept) the SE weights of the model each run
    started from; returns how many were added."""
    n = 0
    for r in ssaf_table2.read_records(path):
        if in_figure4(r) and r.get("se_weights_init") is None and "same_as" not in r:
            cfg = cell_config("rte", r["variant"], r["blur"], r["blur_sigma"], r["seed"], a, pooling=r["layer_pooling"], se=True,
                              pooling_lr=r.get("pooling_lr"))
            ssaf_table2.add_record(path, {**r, "se_weights_init": initial_se_weights(cfg)}, KEY)
            n += 1
    return n


def figure4(recs: list[dict], a, path: Path) -> Path | None:
    """Figure 4: the mean SE weight per layer on RTE dev of the SE runs of Table 3's ``weighted`` strategy (and of the
    last-layer SE runs), mean ± std over seeds, as a bar chart (PNG and SVG) with its numbers in JSON."""
    import numpy as np

    from attnkit.analysis.explain import pyplot, save_figure

    series, init = {}, {}
    for r in recs:
        if not in_figure4(r):
            continue
        if r.get("se_weights") is None and Path(r["run"], "model").is_dir():  # a record from before se_weights were kept
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


def by_cell(recs: list[dict]) -> dict:
    """(task, variant) -> {seed: record}, with the cells of identity sigmas filled from softmax's record of the same seed
    (a copy marked ``"same_as": "softmax"``) where a measured seed showed that run to be softmax's, weight for weight,
    and none showed otherwise."""
    by: dict = {}
    for r in recs:
        by.setdefault((r["task"], r["variant"]), {})[r["seed"]] = r
    for (task, name), cell in list(by.items()):
        sigma = next(iter(cell.values()))["blur_sigma"]
        soft = by.get((task, "softmax"), {})
        if not is_identity(sigma):
            continue
        same = [cell[s].get("weights_sha256") == soft[s].get("weights_sha256") is not None for s in set(cell) & set(soft)]
        if same and all(same):
            place = next(iter(cell.values()))["blur"]
            for s in set(soft) - set(cell):
                cell[s] = as_identity_sigma(soft[s], place, sigma)
    return by


def as_identity_sigma(soft_rec: dict, place: str, sigma: float) -> dict:
    """Softmax's record standing in for the identity sigma ``sigma`` blurring ``place`` (the same model, bit for bit)."""
    return {**soft_rec, "variant": f"blur-{place}-{sigma:g}", "blur": place, "blur_sigma": sigma, "kernel": kernel_weights(sigma),
            "same_as": "softmax"}


def _seeds(cell: dict) -> str:
    run = [s for s in sorted(cell) if "same_as" not in cell[s]]
    same = [s for s in sorted(cell) if "same_as" in cell[s]]
    return ",".join(map(str, run)) + (f" (+{','.join(map(str, same))} = softmax's)" if same else "")


def _mean_sd(xs: list[float]) -> str:
    return ssaf_table2._ms(xs)


def _paired(d: list[float], sep: str = " | ") -> str:
    """Paired differences as the tables print them (Table 2's ``paired``: the paired t-test standing alone)."""
    return ssaf_table2.paired(d, sep)


def kernel_text(rec: dict) -> str:
    """The 3-wide blur kernel of a record, from its sigma in float32 and rounded once (the record's ``kernel`` is
    already rounded to 4 digits: rounding it again printed 0.1065 as 0.106)."""
    if rec.get("blur_sigma") is None:
        return "—"
    from attnkit.attention.spec import gaussian_kernel

    return ", ".join(f"{float(x):.3f}" for x in gaussian_kernel(3, rec["blur_sigma"]))


def _digests(recs: list[dict], task: str, name: str) -> dict[int, str | None]:
    """seed -> weights' SHA-256 of the runs (not borrowed records) of ``name`` on ``task``."""
    return {r["seed"]: r.get("weights_sha256") for r in recs if (r["task"], r["variant"]) == (task, name) and "same_as" not in r}


def _same_model(own: dict, ref: dict) -> bool:
    """Whether ``own``'s runs were run at some seed and trained ``ref``'s model, weight for weight, at every seed both ran."""
    both = set(own) & set(ref)
    return bool(both) and all(own[s] is not None and own[s] == ref[s] for s in both)


def identity_checked(recs: list[dict], task: str, name: str) -> bool:
    """Whether the identity-sigma variant ``name`` was run at some seed and trained softmax's model there, weight for
    weight, at every seed where both were run (then its other seeds are softmax's records)."""
    return _same_model(_digests(recs, task, name), _digests(recs, task, "softmax"))


def table2_twin(t3_recs: list[dict], t2_recs: list[dict], name: str, sigma: float | None, seed: int) -> dict | None:
    """Table 2's record for a Table 3 cell that trains Table 2's very model (classifier on the last layer, no SE: Table 2's
    softmax and its blur on context at the same sigma), marked ``same_as``, where that cell was run at some seed and
    its weights equalled Table 2's at every seed both ran; None otherwise (the cell is then run)."""
    twin = {"last|softmax": "softmax", "last|blur": None if sigma is None else f"blur-context-{sigma:g}"}.get(name)
    ref = [r for r in t2_recs if (r["task"], r["variant"], r["seed"]) == ("rte", twin, seed) and "same_as" not in r]
    if twin is None or not ref or not _same_model(_digests(t3_recs, "rte", name), _digests(t2_recs, "rte", twin)):
        return None
    return {**ref[0], "variant": name, "same_as": f"Table 2's {twin}"}


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
             ssaf_table2.rule_text(family="the blurs of one task (both places, every sigma whose kernel is not the identity); "
                                   "the identity sigmas, softmax's own model, stand alone"),
             "Kernel: the 3-wide blur weights in float32. At",
             "sigma 0.01 and 0.1 the kernel is the identity (tails 0 and 1.9e-22) and the run is softmax's bit for bit (weights'",
             "SHA-256 equal at the seeds run); seeds marked \"= softmax's\" take softmax's record for that reason.", "",
             "| task | variant | kernel | seeds | dev | paired − softmax | verdict |", "|---|---|---|---|---|---|---|"]
    tasks = sorted({t for t, _ in by}, key=lambda t: list(METRIC).index(t) if t in METRIC else 99)
    fam = ssaf_table2.Family()
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


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", choices=["table2", "table3", "hans", "figure4"], default="table2",
                    help="table2: every sigma (items 1-2); table3: RTE's extraction strategies x SE/blur at --sigma; "
                         "hans: MNLI models on HANS; figure4: SE weights per layer from table3's runs (no training)")
    ap.add_argument("--tasks", nargs="+", default=["rte"], choices=[t for t in METRIC if t != "mnli-devsplit"])
    ap.add_argument("--seeds", nargs="+", type=int, default=None, help="default: 1-5 for table2, 1-3 otherwise")
    ap.add_argument("--sigmas", nargs="+", type=float, default=list(SIGMAS))
    ap.add_argument("--sigma", type=float, default=None, help="table3 and hans: the blur sigma (default: the one table2's clean protocol chose at most seeds, blur on context)")
    ap.add_argument("--strategies", nargs="+", default=None, help="table3: these extraction strategies only (default all seven)")
    ap.add_argument("--pooling-lr", type=float, default=None,
                    help="table3: run the SE columns only, SE's parameters and the weighted mix trained at this learning rate "
                         "(attnkit train --pooling-lr); at the paper's lr they end where they started")
    ap.add_argument("--places", nargs="+", default=["none", "value", "context"], choices=["none", "value", "context"],
                    help="which variants: none (softmax), blur on values, blur on the context layer")
    ap.add_argument("--identity-check-seeds", nargs="+", type=int, default=[1],
                    help="seeds at which the identity sigmas (0.01, 0.1) are run to check they train softmax's model; "
                         "the other seeds take softmax's record where they did; table3: the seeds at which its cells that are "
                         "Table 2's models (last layer, no SE: softmax, blur on context) are run to check it (default: 1)")
    ap.add_argument("--holdout", type=float, default=0.0,
                    help="train without this seeded fraction of the training split and score it (the clean selection "
                         "protocol); records go to sesame_paper_holdout.json, runs to runs/sesame_paper_holdout")
    ap.add_argument("--hans-per-subcase", type=int, default=None, help="hans: score this many pairs per HANS subcase (default all 1,000)")
    ap.add_argument("--model", default="minilm")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--epochs", type=float, default=3)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--sst2-subset", type=int, default=None, help="SST-2: train on a random subset of this size (drawn with the seed)")
    ap.add_argument("--train-subset", type=int, default=None, help="a smoke test: every task trains on this many examples")
    ap.add_argument("--work-dir", default=None, help="run folders (default runs/sesame_paper[_holdout|_table3|_hans][_bf16])")
    ap.add_argument("--results", default=str(Path(__file__).resolve().parent / "results"), help="folder of the records and tables")
    ap.add_argument("--bf16", action="store_true",
                    help="bfloat16 mixed precision (attnkit train --bf16): a RTE run 2-4x faster on a CPU with AVX512-BF16; records "
                         "and run folders get a _bf16 suffix (sesame_paper_bf16.json, ...), and the Table 2 of bf16 runs "
                         "sets them beside the float32 runs of the same cells")
    ap.add_argument("--render-only", action="store_true")
    a = ap.parse_args()
    a.precision = "bf16" if a.bf16 else "fp32"
    tag = _tag(a.precision)
    a.train_subset = {t: a.train_subset for t in METRIC} if a.train_subset else {"sst2": a.sst2_subset} if a.sst2_subset else {}
    a.seeds = a.seeds or ([1, 2, 3, 4, 5] if a.grid == "table2" else [1, 2, 3])
    suffix = {"table2": "_holdout" if a.holdout else "", "table3": "_table3", "hans": "_hans", "figure4": "_table3"}[a.grid]
    a.work_dir = a.work_dir or f"runs/sesame_paper{suffix}{tag}"
    res = Path(a.results)
    if a.grid == "figure4":
        t3 = res / f"sesame_paper_table3{tag}.json"
        print(f"[sesame] initial SE weights added to {backfill_initial_se(t3, a)} records of {t3.name}", flush=True)
        png = figure4(ssaf_table2.read_records(t3), a, res / f"sesame_paper_figure4{tag}")
        print(f"written {png}" if png else "no SE runs of table3 with their models yet")
        return
    if a.grid in ("table3", "hans") and a.sigma is None and not a.render_only:
        a.sigma, why = clean_sigma(ssaf_table2.read_records(res / f"sesame_paper_holdout{tag}.json"))
        if a.sigma is None:
            ap.error(f"--grid {a.grid}: {why}; give --sigma (the blur sigma chosen cleanly: table2's held-out protocol)")
        print(f"[sesame] blur at {why}", flush=True)
    if a.pooling_lr is not None and a.grid != "table3":
        ap.error("--pooling-lr: only with --grid table3")
    if a.grid != "table2" and a.holdout:
        ap.error("--holdout: only with --grid table2 (the selection protocol)")
    if a.sigma is not None and is_identity(a.sigma):
        ap.error(f"--sigma {a.sigma:g}: the kernel is the identity there (no blur: the runs would be softmax's); "
                 "if the clean protocol chose it, blur does not help and the blur columns would only repeat softmax")
    if a.grid == "table2":
        full, held, md = res / f"sesame_paper{tag}.json", res / f"sesame_paper_holdout{tag}.json", res / f"sesame_paper{tag}.md"
        path = held if a.holdout else full

        def rerender():
            fp32 = ssaf_table2.read_records(res / "sesame_paper.json") if a.bf16 else None
            write_text_atomic(md, render(ssaf_table2.read_records(full), ssaf_table2.read_records(held), a.precision, fp32))

        if a.holdout and any(r.get("holdout") != a.holdout for r in ssaf_table2.read_records(held)):
            ap.error(f"--holdout {a.holdout:g}: {held} holds runs of another held-out fraction; give another --results folder")
        cells = [(task, seed, name, blur, sigma, {}) for task in a.tasks for seed in a.seeds for name, blur, sigma in variants(a.sigmas)
                 if blur in a.places]
    else:
        path, md = res / f"sesame_paper{suffix}{tag}.json", res / f"sesame_paper{suffix}{tag}.md"
        renderer = render_table3 if a.grid == "table3" else render_hans

        def rerender():
            write_text_atomic(md, renderer(ssaf_table2.read_records(path), a.precision))

        if a.grid == "table3":
            cells = [("rte", seed, name, blur, sigma, kw) for seed in a.seeds for name, blur, sigma, kw in table3_cells(a)]
        else:
            cells = [("mnli-devsplit", seed, name, kw.get("blur", "none"), a.sigma if kw.get("blur") else None,
                      {k: v for k, v in kw.items() if k != "blur"}) for seed in a.seeds for name, kw in HANS_MODELS.items()]
    if not a.render_only:
        for task, seed, name, blur, sigma, kw in cells:  # seed-major: paired comparisons are ready after each seed
            recs = ssaf_table2.read_records(path)
            if (task, name, seed) in {tuple(r[k] for k in KEY) for r in recs}:
                continue
            if is_identity(sigma) and seed not in a.identity_check_seeds and identity_checked(recs, task, name):
                continue  # softmax's run, bit for bit (its weights matched softmax's at every check seed run)
            twin = table2_twin(recs, ssaf_table2.read_records(res / f"sesame_paper{tag}.json"), name, sigma, seed) \
                if a.grid == "table3" and seed not in a.identity_check_seeds else None
            if twin:  # Table 2's run of this very model (checked weight for weight at the check seeds)
                ssaf_table2.add_record(path, twin, KEY, then=lambda _recs: rerender())
                print(f"[sesame] {task} {name} seed {seed}: {twin['same_as']}'s record (the same model)", flush=True)
                continue
            print(f"[sesame] {task} {name} seed {seed}: training", flush=True)
            rec = run_cell(task, name, blur, sigma, seed, a, **kw)
            if a.grid == "hans":
                rec = hans_record(rec, a)
            ssaf_table2.add_record(path, rec, KEY, then=lambda _recs: rerender())  # under the records' lock
            print(f"[sesame] {task} {name} seed {seed}: dev {rec['metric']} {rec['dev_metric']:.4f} ({rec['train_seconds'] / 60:.1f} min)", flush=True)
    rerender()
    print(md.read_text())


if __name__ == "__main__":
    sys.exit(main())
