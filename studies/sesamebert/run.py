"""SesameBERT at the paper's budget: does Gaussian blur help, at every sigma? (Table 2, Table 3, HANS, Figure 4)

Every cell is a real in-process training run (``attnkit.training.finetune.train``, as ``attnkit train``) of the bundled MiniLM at the paper's settings (METHODS.md §2:
batch 32, lr 3e-5, 3 epochs, max length 128, the whole train split), dev metric of each epoch and of the best one.
Variants: ``softmax`` (no blur) and blur on the values or on the context layer at each ``--sigmas`` (kernel width 3).
Each finished cell is appended at once to ``--json`` (a locked read-modify-write, so several workers may share it; a
cell already there is skipped; a cell whose run folder holds checkpoints resumes from them) and the markdown table is
re-rendered: every sigma with its kernel weights, mean ± std over seeds, and the paired difference to softmax.

    OMP_NUM_THREADS=1 python -m studies.sesamebert.run --tasks rte --seeds 1 2 3 4 5 --data-dir ../shared/data
    python -m studies.sesamebert.run --render-only

Sigmas whose float32 kernel is the identity to within 1e-20 (0.01: exactly [0, 1, 0]; 0.1: tails of 1.9e-22, lost
when added to anything of ordinary size) train the very same model as no blur, bit for bit
(``tests/models/test_sesame.py::test_paper_sigmas_below_a_third_train_the_very_same_model_as_no_blur``). They are run at full
budget at ``--identity-check-seeds`` (default: seed 1) first, and every record holds the SHA-256 of its weights; where
those runs' weights equal softmax's of the same seed, the other seeds' cells are softmax's (marked so in the table)
rather than hours of the same run again (where they do not, or no check seed was run, every seed is run).

Selection: ``--holdout 0.1`` trains every variant without a seeded 10% of the training split (the same
10% for every variant of a seed; the epoch kept is chosen on it too) into ``sesame_paper_holdout.json``; the table then
sets the paper's protocol (the best of sigma {0.01, 0.1, 0.3, 0.5} by dev, reported on dev, on the whole-train runs)
beside the clean one (sigma chosen by the held-out 10%, that run reported on dev, minus the held-out softmax run of the
seed), and the same best-of-k applied to plain softmax's seeds (k: the distinct models the grid holds, 3 where the
identity sigmas are softmax's run): how much of a gain selection alone produces.

    OMP_NUM_THREADS=1 python -m studies.sesamebert.run --tasks rte --seeds 1 2 3 4 5 --holdout 0.1 --data-dir ../shared/data

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
import sys
from pathlib import Path

from attnkit.runfiles.atomic import write_text_atomic
from studies import stats
from studies.sesamebert.cells import (
    HANS_MODELS, KEY, METRIC, SIGMAS, backfill_initial_se, hans_record, identity_checked, is_identity, run_cell, table2_twin,
    table3_cells, variants,
)
from studies.sesamebert.render import clean_sigma, figure4, precision_tag, render, render_hans, render_table3

RESULTS = Path(__file__).resolve().parent / "results"
#: each grid's suffix of its records, tables and run folders
SUFFIX = {"table3": "_table3", "hans": "_hans", "figure4": "_table3"}


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--grid", choices=["table2", "table3", "hans", "figure4"], default="table2",
                    help="table2: every sigma and the selection protocols; table3: RTE's extraction strategies x SE/blur at --sigma; "
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
    ap.add_argument("--results", default=str(RESULTS), help="folder of the records and tables")
    ap.add_argument("--bf16", action="store_true",
                    help="bfloat16 mixed precision (attnkit train --bf16): a RTE run 2-4x faster on a CPU with AVX512-BF16; records "
                         "and run folders get a _bf16 suffix (sesame_paper_bf16.json, ...), and the Table 2 of bf16 runs "
                         "sets them beside the float32 runs of the same cells")
    ap.add_argument("--render-only", action="store_true")
    return ap


def settings(ap: argparse.ArgumentParser, argv: list[str] | None = None) -> argparse.Namespace:
    """The options, with what they imply filled in: precision, training subsets, seeds, run folder."""
    a = ap.parse_args(argv)
    a.precision = "bf16" if a.bf16 else "fp32"
    a.train_subset = {t: a.train_subset for t in METRIC} if a.train_subset else {"sst2": a.sst2_subset} if a.sst2_subset else {}
    a.seeds = a.seeds or ([1, 2, 3, 4, 5] if a.grid == "table2" else [1, 2, 3])
    a.suffix = "_holdout" if a.grid == "table2" and a.holdout else SUFFIX.get(a.grid, "")
    a.work_dir = a.work_dir or f"runs/sesame_paper{a.suffix}{precision_tag(a.precision)}"
    return a


def check(ap: argparse.ArgumentParser, a: argparse.Namespace, res: Path) -> None:
    """Refuse option combinations that do not make sense; table3 and hans take the clean protocol's sigma by default."""
    if a.grid in ("table3", "hans") and a.sigma is None and not a.render_only:
        a.sigma, why = clean_sigma(stats.read_records(res / f"sesame_paper_holdout{precision_tag(a.precision)}.json"))
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


def run_figure4(a: argparse.Namespace, res: Path) -> None:
    """Figure 4 from Table 3's SE runs (no training): their initial SE weights first, where records lack them."""
    tag = precision_tag(a.precision)
    t3 = res / f"sesame_paper_table3{tag}.json"
    print(f"[sesame] initial SE weights added to {backfill_initial_se(t3, a)} records of {t3.name}", flush=True)
    png = figure4(stats.read_records(t3), a, res / f"sesame_paper_figure4{tag}")
    print(f"written {png}" if png else "no SE runs of table3 with their models yet")


def table2_plan(ap: argparse.ArgumentParser, a: argparse.Namespace, res: Path):
    """Table 2's records file, table, re-renderer and cells (task, seed, name, blur, sigma, run settings)."""
    tag = precision_tag(a.precision)
    full, held, md = res / f"sesame_paper{tag}.json", res / f"sesame_paper_holdout{tag}.json", res / f"sesame_paper{tag}.md"
    path = held if a.holdout else full

    def rerender():
        fp32 = stats.read_records(res / "sesame_paper.json") if a.bf16 else None
        write_text_atomic(md, render(stats.read_records(full), stats.read_records(held), a.precision, fp32))

    if a.holdout and any(r.get("holdout") != a.holdout for r in stats.read_records(held)):
        ap.error(f"--holdout {a.holdout:g}: {held} holds runs of another held-out fraction; give another --results folder")
    cells = [(task, seed, name, blur, sigma, {}) for task in a.tasks for seed in a.seeds for name, blur, sigma in variants(a.sigmas)
             if blur in a.places]
    return path, md, rerender, cells


def grid_plan(a: argparse.Namespace, res: Path):
    """Table 3's or HANS's records file, table, re-renderer and cells."""
    tag = precision_tag(a.precision)
    path, md = res / f"sesame_paper{a.suffix}{tag}.json", res / f"sesame_paper{a.suffix}{tag}.md"
    renderer = render_table3 if a.grid == "table3" else render_hans

    def rerender():
        write_text_atomic(md, renderer(stats.read_records(path), a.precision))

    if a.grid == "table3":
        cells = [("rte", seed, name, blur, sigma, kw) for seed in a.seeds for name, blur, sigma, kw in table3_cells(a)]
    else:
        cells = [("mnli-devsplit", seed, name, kw.get("blur", "none"), a.sigma if kw.get("blur") else None,
                  {k: v for k, v in kw.items() if k != "blur"}) for seed in a.seeds for name, kw in HANS_MODELS.items()]
    return path, md, rerender, cells


def run_cells(a: argparse.Namespace, res: Path, path: Path, rerender, cells) -> None:
    """Every cell not recorded yet, seed-major (paired comparisons are ready after each seed); each record added under
    the records' lock and the table re-rendered with it."""
    tag = precision_tag(a.precision)
    for task, seed, name, blur, sigma, kw in cells:
        recs = stats.read_records(path)
        if (task, name, seed) in {tuple(r[k] for k in KEY) for r in recs}:
            continue
        if is_identity(sigma) and seed not in a.identity_check_seeds and identity_checked(recs, task, name):
            continue  # softmax's run, bit for bit (its weights matched softmax's at every check seed run)
        twin = table2_twin(recs, stats.read_records(res / f"sesame_paper{tag}.json"), name, sigma, seed) \
            if a.grid == "table3" and seed not in a.identity_check_seeds else None
        if twin:  # Table 2's run of this very model (checked weight for weight at the check seeds)
            stats.add_record(path, twin, KEY, then=lambda _recs: rerender())
            print(f"[sesame] {task} {name} seed {seed}: {twin['same_as']}'s record (the same model)", flush=True)
            continue
        print(f"[sesame] {task} {name} seed {seed}: training", flush=True)
        rec = run_cell(task, name, blur, sigma, seed, a, **kw)
        if a.grid == "hans":
            rec = hans_record(rec, a)
        stats.add_record(path, rec, KEY, then=lambda _recs: rerender())  # under the records' lock
        print(f"[sesame] {task} {name} seed {seed}: dev {rec['metric']} {rec['dev_metric']:.4f} ({rec['train_seconds'] / 60:.1f} min)", flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = parser()
    a = settings(ap, argv)
    res = Path(a.results)
    if a.grid == "figure4":
        run_figure4(a, res)
        return
    check(ap, a, res)
    path, md, rerender, cells = table2_plan(ap, a, res) if a.grid == "table2" else grid_plan(a, res)
    if not a.render_only:
        run_cells(a, res, path, rerender, cells)
    rerender()
    print(md.read_text())


if __name__ == "__main__":
    sys.exit(main())
