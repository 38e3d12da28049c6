"""``attnkit sweep``: the SSAF paper's Fig. 2 and 3 as one command.

Every (lam, seed) cell is a sparsegen-lin fine-tuning run, and every seed also gets a softmax
baseline trained with the same options; ``--alphas`` sweeps alpha-entmax's alpha the same way
(cells ``<out>/alpha<alpha>_seed<seed>``, records with ``"param": "alpha"``). A cell's run folder is ``<out>/lam<lam>_seed<seed>``
(``<out>/softmax_seed<seed>``); a finished cell (its ``sweep_cell.json``) is reused when the sweep
is run again, an unfinished one resumes from its checkpoints; ``report_only`` (``--report-only``) trains nothing
and writes the files below from the cells finished so far (a sweep cut short, or run as several commands into the
same folder one after another, say one per seed: one process at a time writes a sweep folder, a second is refused
in one line while the first holds it). Written after every cell:

    <out>/sweep.json            a record per cell: lam (or "softmax"), seed, dev and test main metric,
                                mean non-zeros per attention row on dev (and per layer)
    <out>/sweep.png, .svg       main metric against lam (mean ± std over seeds), softmax dashed,
                                mean support size on a second axis
    <out>/sweep.md              the same as a table: per lam, dev and test (mean ± std over seeds), the paired
                                difference to softmax on the same seeds with t, p and its verdict (a paired
                                t-test, Holm across the swept values), and the mean support
    <out>/sweep_attention.png   one dev sentence's attention at one layer and head, for each lam and softmax
"""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from transformers import AutoConfig

from attnkit.analysis.explain import attention_maps, pyplot, save_figure, view_sentence
from attnkit.errors import DataFormatError, UserError
from attnkit.models.checkpoint import load_model, load_tokenizer
from attnkit.models.resolve import resolve_model
from attnkit.runfiles.names import LOCK_FILE, MODEL_DIR
from attnkit.runfiles.lock import folder_lock
from attnkit.runfiles.ownership import make_way, record_output, sweep_cells_of
from attnkit.runfiles.atomic import output_batch, write_json_atomic, write_text_atomic
from attnkit.runfiles.json_files import home_path, path_problem, read_json
from attnkit.tasks import is_qa_task, load_task
from attnkit.training.config import TrainConfig, check_seed, is_mini_alias, option_name
from attnkit.training.finetune import train
from attnkit.training.run_folder import (WORKING_DIR, changed_sources, first_missing, is_run_folder, run_sources, same_paths,
                                         with_defaults)
from attnkit.training.run_record import describe_run, read_record
from attnkit.training.sweep_record import SWEEP_RECORD_KEYS, SWEPT, not_a_number, read_sweep_records, swept, value_name  # noqa: F401  (SWEPT, read_sweep_records: the sweep's names)
from attnkit.training.sweep_report import plot_sweep, seeds_note, sweep_table  # noqa: F401  (seeds_note: the sweep's names)

SUPPORT_TEXTS = 256  # dev texts the mean support is measured on


#: what a sweep can sweep: the setting -> the normaliser it belongs to


@dataclass(frozen=True)
class Cell:
    value: float | None  # the swept setting's value; None: the softmax baseline
    seed: int
    param: str = "lam"  # which setting is swept (SWEPT)

    @property
    def name(self) -> str:
        return f"softmax_seed{self.seed}" if self.value is None else f"{self.param}{value_name(self.value)}_seed{self.seed}"

    def describe(self) -> str:
        return f"softmax, seed {self.seed}" if self.value is None else f"{self.param} {value_name(self.value)}, seed {self.seed}"


def sweep_cells(values: list[float], seeds: list[int], param: str = "lam") -> list[Cell]:
    """Seed-major: each seed's softmax baseline, then its values (a seed's comparison is complete early)."""
    return [c for s in seeds for c in [Cell(None, s, param)] + [Cell(float(v), s, param) for v in values]]


def cell_config(base: TrainConfig, cell: Cell, out: Path) -> TrainConfig:
    where = dict(seed=cell.seed, output_dir=str(out / cell.name))
    if cell.value is None:
        return replace(base, attention="softmax", lam=None, learned=None, lam_lr=None, lam_warmup=0.0, alpha=1.5,
                       alpha_lr=None, alpha_warmup=0.0, **where)
    return replace(base, attention=SWEPT[cell.param], **{cell.param: cell.value}, **where)


def mean_support(model, tokenizer, texts: list[str], pairs: list[str] | None = None, *, max_length: int = 128, batch_size: int = 32) -> dict:
    """Mean number of non-zero weights per attention row over real (unpadded) query tokens:
    ``{"mean": float, "per_layer": [float, ...], "mean_length": float}``."""
    model.eval()
    nz = None
    rows = 0
    lengths = []
    for i in range(0, len(texts), batch_size):
        enc = tokenizer(texts[i : i + batch_size], None if pairs is None else pairs[i : i + batch_size], truncation=True,
                        max_length=max_length, padding=True, return_tensors="pt")
        with torch.inference_mode():
            att = model(**enc, output_attentions=True).attentions  # layers x [B, H, L, L]
        real = enc["attention_mask"].bool()  # [B, L]
        counts = torch.stack([(a > 0).sum(-1).float() for a in att])  # [layers, B, H, L]
        counts = counts * real[None, :, None, :]
        s = counts.sum(dim=(1, 2, 3))  # [layers]
        nz = s if nz is None else nz + s
        rows += int(real.sum()) * att[0].shape[1]
        lengths += real.sum(-1).tolist()
    per_layer = (nz / rows).tolist()
    return {"mean": float(np.mean(per_layer)), "per_layer": per_layer, "mean_length": float(np.mean(lengths))}


def _dev_texts(cfg: TrainConfig):
    dev = load_task(cfg.task, cfg.data_dir).splits["validation"]
    dev = dev.select(range(min(SUPPORT_TEXTS, len(dev))))
    pairs = list(dev["text_pair"]) if "text_pair" in dev.column_names else None
    return list(dev["text"]), pairs


#: settings that differ between the cells of one sweep (or do not change what is trained)
_CELL_FIELDS = ("attention", "lam", "seed", "output_dir", "resume", "logging_steps", "lam_lr", "lam_warmup", "alpha")


def sweep_settings(base: TrainConfig) -> dict:
    """The train settings every cell of a sweep shares (recorded in each cell, compared when cells are reused)."""
    return {k: v for k, v in asdict(base).items() if k not in _CELL_FIELDS}


def _check_same(rec: dict, base: TrainConfig, where: str) -> None:
    old, new = rec.get("settings"), sweep_settings(base)
    if old is None:
        return
    old = {k: v for k, v in with_defaults(old, TrainConfig.__dataclass_fields__).items() if k in new}  # settings it predates: defaults
    old, new = same_paths(old, rec.get(WORKING_DIR)), same_paths(new)
    diff = [f"{option_name(k)}: {old.get(k)!r} there, {new.get(k)!r} now" for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    if diff:
        raise UserError(f"{where} was trained with other settings ({'; '.join(diff)}): rerun with the same options, "
                         "or give a new --output-dir")


def run_cell(base: TrainConfig, cell: Cell, out: Path) -> dict:
    cfg = cell_config(base, cell, out)
    m = train(cfg)
    key = m.get("main_metric", "accuracy")
    texts, pairs = _dev_texts(cfg)
    model_dir = Path(cfg.output_dir) / MODEL_DIR
    support = mean_support(load_model(model_dir), load_tokenizer(model_dir), texts, pairs, max_length=cfg.max_length)
    test = next((m[k] for k in m if k.startswith("test") and isinstance(m[k], dict)), None)
    return {
        "param": cell.param,
        cell.param: "softmax" if cell.value is None else cell.value,
        "seed": cell.seed,
        "metric": key,
        "dev": m["validation"][key],
        "test": None if test is None else test[key],
        "mean_support": support["mean"],
        "support_per_layer": support["per_layer"],
        "mean_dev_length": support["mean_length"],
        "train_seconds": m["train"].get("train_runtime"),
        "run_dir": cfg.output_dir,
        WORKING_DIR: os.getcwd(),  # (run_dir, --data-dir and --model as typed are relative to it)
        "settings": sweep_settings(base),
        "data": (read_record(Path(cfg.output_dir)) or {}).get("data"),  # the examples' SHA-256: compared when reused
    }


def _check_inputs(rec: dict, base: TrainConfig, cell: Cell, out: Path, splits, now: dict) -> None:
    """A reused cell must have been trained on what the sweep names now (``now``: :func:`run_sources` of the sweep's
    --model, --teacher and data ``splits``, the same for every cell): its run's record where its folder is there, else
    the data's fingerprint in its sweep record; else it is not compared."""
    where = out / cell.name
    if is_run_folder(where):
        changed = changed_sources(cell_config(base, cell, out), where, splits, now)
    else:
        changed = [] if rec.get("data") in (None, now.get("data")) else [f"other examples of task {base.task}"]
    if changed:
        raise UserError(f"sweep cell {cell.name} in {out} was trained on other inputs than those named now ({'; '.join(changed)}): "
                        "its results are not of these; pick another --output-dir to sweep them as they are now, or restore them")


def run_sweep(base: TrainConfig, values: list[float], seeds: list[int], out_dir: str | Path, *, param: str = "lam",
              view_layer: int | None = None, view_head: int = 0, report_only: bool = False,
              log: Callable[[str], None] = print) -> list[dict]:
    """Train (or reuse) every cell, writing sweep.json and the figures after each; returns the records.
    ``param``: the setting swept over ``values`` ("lam": sparsegen-lin, "alpha": alpha-entmax), each against a
    softmax baseline per seed. ``report_only``: train nothing, report the finished cells (an error if there are none)."""
    if is_qa_task(base.task):
        raise UserError(f"attnkit sweep takes a classification task; {base.task} is span QA")
    if param not in SWEPT:
        raise UserError(f"a sweep sweeps one of {', '.join(SWEPT)}, not {param!r}")
    if not values or not seeds:
        raise UserError(f"attnkit sweep needs at least one --{param}s value and one --seeds value")
    if base.learned == param:
        log(f"[sweep] --learn-{param}: each cell learns {param} per layer and head; the swept values are where it starts "
            f"(each cell's {param}_learned.png shows where it ended)")
    for seed in seeds:
        check_seed(seed, "--seeds")
    for name, vs, named in ((f"--{param}s", [float(x) for x in values], value_name), ("--seeds", list(seeds), str)):
        keys = [named(v) for v in vs]  # as a cell's folder names it (Cell.name): 12 significant digits of a value
        near = {k: sorted({v for v in vs if named(v) == k}) for k in keys if keys.count(k) > 1}
        near = {k: group for k, group in near.items() if len(group) > 1}
        if near:
            k, group = next(iter(near.items()))
            raise UserError(f"{name}: {' and '.join(repr(v) for v in group)} would be one cell ({name[2:-1]} {k}: a cell is "
                            "named by 12 significant digits): give values that differ within them")
        twice = sorted({k for k in keys if keys.count(k) > 1})
        if twice:
            raise UserError(f"{name}: {', '.join(twice)} given more than once (each cell is trained once)")
    out = Path(out_dir)
    cells = sweep_cells(values, seeds, param)
    for c in cells:  # a bad lam or alpha fails now, not after hours of training
        try:
            cell_config(base, c, out).spec()
        except ValueError as e:
            raise UserError(f"--{param}s {value_name(c.value)}: {e}") from None
    check_view(base, view_layer, view_head)  # and a bad figure setting before anything is written
    if path_problem(out, "folder") not in ("", "does not exist"):
        raise UserError(f"--output-dir {out} {path_problem(out, 'folder')}")
    if is_run_folder(out):
        raise UserError(f"--output-dir {out} holds {describe_run(out)}, not a sweep of `attnkit sweep`: nothing was "
                         "changed; pick a new or empty folder (a sweep trains its cells in folders of its own)")
    if out.is_dir() and any(p.name != LOCK_FILE for p in out.iterdir()) and not _is_sweep_folder(out):
        raise UserError(f"--output-dir {out} is not empty and holds no attnkit sweep (sweep.json or cell folders such as "
                         f"{cells[0].name}/): pick a new or empty folder")
    for c in cells:  # a folder of the user's where a cell goes: refused now, not after the cells before it trained
        where = out / c.name
        if where.exists() and not _is_cell_folder(where) and (not where.is_dir() or any(p.name != LOCK_FILE for p in where.iterdir())):
            what = "holds files and no attnkit run" if where.is_dir() else path_problem(where, "folder")
            raise UserError(f"{where}, where this sweep's cell {c.describe()} goes, {what}: nothing was changed; move it, "
                            "or pick another --output-dir")
    made = first_missing(out)
    out.mkdir(parents=True, exist_ok=True)
    try:
        with folder_lock(out, "sweep folder"):
            return _sweep(base, cells, out, view_layer, view_head, report_only, log)
    except BaseException:
        if made is not None and all(p.name == LOCK_FILE for p in out.iterdir()):
            shutil.rmtree(made, ignore_errors=True)
        raise


def _is_sweep_folder(out: Path) -> bool:
    """Whether ``out`` holds a sweep of attnkit's: its sweep.json, or a cell's folder holding attnkit's record of it (a
    folder merely named as a cell is not proof)."""
    if (out / "sweep.json").is_file():
        read_sweep_records(out / "sweep.json")  # a sweep.json attnkit did not write is refused, naming it
        return True
    return any(re.fullmatch(r"(softmax|lam-?[\d.e+-]+|alpha[\d.e+-]+)_seed-?\d+", p.name) and _is_cell_folder(p)
               for p in out.iterdir())


def _is_cell_folder(path: Path) -> bool:
    """Whether ``path`` is a folder holding a sweep cell's run as attnkit wrote it (its record, or its sweep_cell.json)."""
    return path.is_dir() and (is_run_folder(path) or (path / "sweep_cell.json").is_file())


def sweep_of_cell(path: str | Path) -> Path | None:
    """The sweep folder whose cell ``path`` is (it holds the cell's sweep_cell.json, or the folder above is a sweep
    whose sweep.json names it), else None: a cell is the sweep's to train, not ``attnkit train``'s."""
    path = home_path(path, "--output-dir").resolve()
    if (path / "sweep_cell.json").is_file():
        return path.parent
    recs = sweep_cells_of(path.parent)
    return path.parent if recs and any(Path(str(r["run_dir"])).name == path.name for r in recs) else None


#: what every record of a sweep cell holds (sweep.json is a list of them)


def _read_cell(path: Path) -> dict:
    """A finished cell's record (its sweep_cell.json); ValueError naming the file for one attnkit did not write."""
    try:
        rec = read_json(path, "the record of a finished sweep cell", expect=None)
    except (OSError, ValueError) as e:
        raise UserError(f"{e if isinstance(e, DataFormatError) else f'{path} cannot be read ({e})'}: move it out of the "
                         "cell's folder to train the cell again") from None
    if not (isinstance(rec, dict) and all(k in rec for k in SWEEP_RECORD_KEYS)):
        raise UserError(f"{path} is not the record of a finished sweep cell (it lacks {', '.join(SWEEP_RECORD_KEYS)}): move it "
                         "out of the cell's folder to train the cell again")
    field = not_a_number(rec)
    if field is not None:
        raise UserError(f"{path}: its {field} is {rec[field]!r}, expected a number: it is not a record attnkit wrote; move "
                        "it out of the cell's folder to train the cell again")
    return rec


def check_view(base: TrainConfig, layer: int | None, head: int) -> None:
    """--view-layer / --view-head must name a layer and head of the model the sweep trains."""
    if is_mini_alias(base.model):
        layers, heads = base.layers or 1, base.heads or 1
    else:
        config = AutoConfig.from_pretrained(resolve_model(base.model))
        layers, heads = config.num_hidden_layers, config.num_attention_heads
    if layer is not None and not 0 <= layer < layers:
        raise UserError(f"--view-layer {layer}: the model has layers 0 to {layers - 1}")
    if not 0 <= head < heads:
        raise UserError(f"--view-head {head}: the model has heads 0 to {heads - 1}")


def _sweep(base: TrainConfig, cells: list[Cell], out: Path, view_layer: int | None, view_head: int, report_only: bool,
           log: Callable[[str], None]) -> list[dict]:
    # records of an earlier sweep into this folder (also when its run folders are gone, e.g. a committed sweep.json)
    earlier = {(*swept(r), r["seed"]): r for r in (read_sweep_records(out / "sweep.json") if (out / "sweep.json").is_file() else [])}
    other = {p for p, _, _ in earlier} - {cells[0].param}
    if other:
        raise UserError(f"--output-dir {out} holds a sweep over {', '.join(sorted(other))}, not {cells[0].param}: pick another folder")
    keys = [(c.param, "softmax" if c.value is None else c.value, c.seed) for c in cells]
    # earlier records outside this grid stay in sweep.json (their run folders may be gone: sweep.json may be all there
    # is of them), so they must have been trained as this grid is; said once
    grid = set(keys)
    outside = {Cell(None if k[1] == "softmax" else k[1], k[2], k[0]): r for k, r in earlier.items() if k not in grid}
    for cell, r in outside.items():
        _check_same(r, base, f"the earlier cell {cell.name} of {out / 'sweep.json'}")
    if outside:
        log(f"[sweep] {out / 'sweep.json'} keeps {len(outside)} cell(s) of an earlier sweep outside this grid: "
            + ", ".join(cell.describe() for cell in outside))
    reached: dict = {}  # key -> record of each cell of this grid reached so far, in the grid's order
    splits = inputs = None  # the task's examples and what the sweep reads (run_sources), once a cell is reused

    def known() -> list[dict]:
        """What the reports hold: every cell reached so far, the earlier records of the cells not reached yet (a sweep
        that stops, killed or refused, leaves every earlier result in place), and the earlier ones outside this grid."""
        return ([reached[k] if k in reached else earlier[k] for k in keys if k in reached or k in earlier]
                + list(outside.values()))

    for i, (cell, key) in enumerate(zip(cells, keys), 1):
        done = out / cell.name / "sweep_cell.json"
        if not done.is_file() and key in earlier and _is_cell_folder(out / cell.name):
            raise UserError(f"{out / cell.name} holds a run that is not the cell {cell.name} {out / 'sweep.json'} records "
                            "(its sweep_cell.json is gone: another run was trained there): move that folder out of "
                            f"{out} to keep the recorded cell (its figure is then left out), or pick another --output-dir")
        if done.is_file() or key in earlier:
            rec = _read_cell(done) if done.is_file() else earlier[key]
            if done.is_file() and (*swept(rec), rec["seed"]) != key:  # (it was reused as this cell, and counted twice)
                param, value = swept(rec)
                raise UserError(f"{done} records the cell {param} {value_name(value) if value != 'softmax' else value}, "
                                f"seed {rec['seed']}, not the cell of its folder ({cell.describe()}): it is another cell's "
                                f"record (copied or edited); move it out of {out / cell.name} to train the cell again")
            _check_same(rec, base, f"sweep cell {cell.name} in {out}")
            if inputs is None:  # read and fingerprinted once, for every reused cell
                splits = load_task(base.task, base.data_dir).splits
                inputs = run_sources(base, splits)
            _check_inputs(rec, base, cell, out, splits, inputs)
            log(f"[sweep] cell {i}/{len(cells)} ({cell.describe()}): finished before, reused")
        elif report_only:
            log(f"[sweep] cell {i}/{len(cells)} ({cell.describe()}): not finished, left out (--report-only)")
            continue
        else:
            log(f"[sweep] cell {i}/{len(cells)} ({cell.describe()}): training in {out / cell.name}")
            rec = run_cell(base, cell, out)
            write_json_atomic(done, rec)
        reached[key] = rec
        if not report_only:
            _write_reports(base, known(), out)
        summary = f"dev {rec['metric']} {rec['dev']:.4f}" + ("" if rec["test"] is None else f", test {rec['test']:.4f}")
        log(f"[sweep] cell {i}/{len(cells)} ({cell.describe()}): {summary}, mean support {rec['mean_support']:.2f}")
    if not reached:
        raise UserError(f"--report-only: no cell of this sweep has finished in {out} (a finished cell has its "
                         "sweep_cell.json, or a record in sweep.json)")
    if report_only:  # (every earlier record of the grid was reused: known() holds the reached cells and those outside)
        _write_reports(base, known(), out)
    records = list(reached.values())
    figure = make_way(out / "sweep_attention.png")  # a file of the user's there is moved aside; attnkit's is redrawn
    if plot_sweep_attention(base, records, figure, layer=view_layer, head=view_head) is None:
        # no cell kept its model: an earlier figure would stand for models that are gone, and be named as written
        figure.unlink(missing_ok=True)
        log(f"[sweep] no cell of seed {records[0]['seed']} has a saved model: no attention figure")
    return records


def _write_reports(base: TrainConfig, records: list[dict], out: Path) -> None:
    """sweep.json, sweep.md and sweep.{png,svg} of the records so far: all four replaced together, or none."""
    param = swept(records[0])[0]
    title = f"{base.task}: {SWEPT[param]} against {param}"
    if base.learned == param:  # --learn-lam/--learn-alpha: each cell learns it per layer and head from the swept value
        title += f" (its start: {param} learned per layer and head)"
    with output_batch():
        write_json_atomic(out / "sweep.json", records)
        write_text_atomic(make_way(out / "sweep.md"), sweep_table(records, title=title))  # a sweep.md of the user's: moved aside
        record_output(out / "sweep.md", "attnkit sweep")  # markdown carries no mark: the folder's ledger says it is attnkit's
        for ext in ("png", "svg"):
            plot_sweep(records, make_way(out / f"sweep.{ext}"), title=title)


def _run_dir(rec: dict, out: Path) -> Path:
    """A cell's run folder: the folder of its name inside the sweep folder ``out`` being reported (not the folder the
    record names, which is where the sweep first ran: a copied sweep's figure showed the original's models, sweep s24b)."""
    return out / Path(str(rec["run_dir"])).name


def _cell_label(rec: dict) -> str:
    """A cell as the attention figure names it: "softmax", "lam -2", "alpha 1.5"."""
    param, value = swept(rec)
    return "softmax" if value == "softmax" else f"{param} {value_name(value)}"


def plot_sweep_attention(base: TrainConfig, records: list[dict], path: str | Path, *, layer: int | None = None, head: int = 0) -> Path | None:
    """One dev sentence's attention at ``layer``/``head`` for softmax and each lam (first seed), side by side."""
    plt = pyplot()

    if not records:
        return None
    seed = records[0]["seed"]
    chosen = [r for r in records if r["seed"] == seed]
    chosen.sort(key=lambda r: (swept(r)[1] != "softmax", swept(r)[1] if swept(r)[1] != "softmax" else 0))
    texts, pairs = _dev_texts(base)
    i = view_sentence(texts)
    maps = []
    out = Path(path).parent
    missing = [r for r in chosen if not (_run_dir(r, out) / MODEL_DIR / "config.json").is_file()]
    chosen = [r for r in chosen if r not in missing]
    if not chosen:
        return None
    for r in chosen:
        model_dir = _run_dir(r, out) / MODEL_DIR
        m = attention_maps(load_model(model_dir), load_tokenizer(model_dir), texts[i], None if pairs is None else pairs[i], base.max_length)
        L = m.weights.shape[0]
        ly = L - 1 if layer is None else layer
        if not 0 <= ly < L or not 0 <= head < m.weights.shape[1]:
            raise UserError(f"--view-layer {ly} / --view-head {head}: the model has {L} layers and {m.weights.shape[1]} heads")
        maps.append((r, m, ly))
    n = len(maps)
    toks = maps[0][1].tokens
    size = max(2.6, 0.22 * len(toks) + 1.2)
    fig, axes = plt.subplots(1, n, figsize=(size * n, size + 0.6), squeeze=False)
    for ax, (r, m, ly) in zip(axes.flat, maps):
        w = m.weights[ly, head]
        ax.imshow(np.where(w > 0, w, np.nan), cmap="viridis", vmin=0, vmax=1)
        ax.set_facecolor("white")
        ax.set_title(f"{_cell_label(r)}\n{(w > 0).sum(-1).mean():.1f} non-zeros/row", fontsize=8)
        ax.set_xticks(range(len(m.tokens)), m.tokens, rotation=90, fontsize=6)
        ax.set_yticks(range(len(m.tokens)), m.tokens, fontsize=6)
    title = f"{base.task}, seed {seed}: layer {maps[0][2]}, head {head} (white = exactly 0)"
    if missing:  # named, on lines of their own: one long line ran past a one-panel figure's edge (sweep s25)
        title += f"\nleft out, no saved model: {', '.join(map(_cell_label, missing))}"
    width = max(24, int(size * n * 11))  # characters of a 9-point title across the figure
    fig.suptitle("\n".join(textwrap.fill(line, width) for line in title.split("\n")), fontsize=9)
    return save_figure(fig, path)
