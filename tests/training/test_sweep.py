"""attnkit sweep: every (lam, seed) cell plus a softmax baseline per seed, records and figures, reuse on rerun."""

import json
import shutil
from pathlib import Path

import pytest

from attnkit.cli import main
from attnkit.training.sweep import Cell, seeds_note, sweep_cells, sweep_table

pytestmark = pytest.mark.slow


def test_cells_are_seed_major_with_a_softmax_baseline_per_seed():
    cells = sweep_cells([-2.0, 0.0], [1, 2])
    assert cells == [Cell(None, 1), Cell(-2.0, 1), Cell(0.0, 1), Cell(None, 2), Cell(-2.0, 2), Cell(0.0, 2)]
    assert [c.name for c in cells[:3]] == ["softmax_seed1", "lam-2_seed1", "lam0_seed1"]
    assert [c.name for c in sweep_cells([1.5], [3], "alpha")] == ["softmax_seed3", "alpha1.5_seed3"]
    assert [c.describe() for c in sweep_cells([0.9999999, -1.0000001], [1])][1:] == ["lam 0.9999999, seed 1", "lam -1.0000001, seed 1"]
    assert [c.name for c in sweep_cells([-0.0], [1])] == ["softmax_seed1", "lam0_seed1"]


def test_a_runs_attention_is_described_as_the_sweep_names_its_values():
    """A run's attention said "sparsegen-lin (lam=1)" of lam 0.9999999, a lam attnkit refuses (sweep -28n C): its
    description names lam and alpha by the sweep's 12 digits."""
    from attnkit.attention.spec import AttentionSpec

    assert AttentionSpec("sparsegen-lin", 0.9999999).describe() == "sparsegen-lin (lam=0.9999999)"
    assert AttentionSpec("entmax-alpha", alpha=1.0000001).describe() == "alpha-entmax (alpha=1.0000001)"


@pytest.mark.parametrize("values,needle", [
    (["--lams", "-1", "-1.0000000000001"], "--lams: -1.0000000000001 and -1.0 would be one cell (lam -1: a cell is named by 12 significant digits)"),
    (["--alphas", "1.5", "1.50000000000001"], "--alphas: 1.5 and 1.50000000000001 would be one cell (alpha 1.5"),
    (["--lams", "-1", "-1"], "--lams: -1 given more than once"),
    (["--lams", "0", "-0"], "--lams: 0 given more than once"),  # one value (sweep -28n B: cells lam0 and lam-0)
])
def test_values_one_cell_would_hold_are_refused(tiny_bert, data, tmp_path, capsys, values, needle):
    """`--lams -1 -1.0000001` trained one cell (its folder was named by 6 significant digits) and reported it twice, the
    second value never trained, its mean and test counting one run twice (sweep 2026-11-27l L1). A cell is named by 12
    digits now (0.9999999 showed as "lam 1": sweep -27m M1), and values one cell would still hold are refused before
    anything is made, naming both; an exact repeat is refused as before."""
    from helpers import error_line

    out = tmp_path / "s"
    assert main(["sweep", *values, "--seeds", "1", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert),
                 "--output-dir", str(out)]) == 2
    error_line(capsys, needle)
    assert not out.exists()


def test_sweep_trains_every_cell_writes_records_and_figures_and_reuses(tiny_bert, tmp_path, capsys):
    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data", n_train=64, n_dev=24)
    shutil.copy(data / "dev.csv", data / "test.csv")
    out = tmp_path / "sweep"
    args = ["sweep", "--lams", "-2", "0.9", "--seeds", "1", "2", "--task", "csv", "--data-dir", str(data),
            "--model", str(tiny_bert), "--epochs", "1", "--batch-size", "16", "--lr", "3e-3", "--max-length", "16",
            "--output-dir", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "cell 1/6 (softmax, seed 1)" in text and "cell 6/6 (lam 0.9, seed 2)" in text
    recs = json.loads((out / "sweep.json").read_text())
    assert [(r["lam"], r["seed"]) for r in recs] == [("softmax", 1), (-2.0, 1), (0.9, 1), ("softmax", 2), (-2.0, 2), (0.9, 2)]
    for r in recs:
        assert 0 <= r["dev"] <= 1 and 0 <= r["test"] <= 1
    soft = [r for r in recs if r["lam"] == "softmax"]
    # softmax attends to every real token: its support is the mean real length of a row's keys
    assert all(r["mean_support"] > 1 for r in soft)
    sparse = [r for r in recs if r["lam"] == 0.9]
    assert all(s["mean_support"] < f["mean_support"] for s, f in zip(sparse, soft))  # sparser than softmax
    for f in ("sweep.png", "sweep.svg", "sweep_attention.png"):
        assert (out / f).stat().st_size > 1000, f
    table = (out / "sweep.md").read_text().splitlines()
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in table if line.startswith("| ") and "---" not in line}
    assert list(rows) == ["lam", "softmax", "-2", "0.9"]
    assert rows["-2"][1] == "1, 2"
    soft_by_seed = {s["seed"]: s for s in soft}
    d = [100 * (r["test"] - soft_by_seed[r["seed"]]["test"]) for r in recs if r["lam"] == 0.9]
    mean, sd = (float(x) for x in rows["0.9"][4].split(" [")[0].split(" (")[0].split(" ± "))  # paired by seed, printed to 0.1
    assert rows["0.9"][5] == "too few seeds"  # two seeds: t and p printed, no verdict
    assert mean == pytest.approx(sum(d) / 2, abs=0.051) and sd == pytest.approx(abs(d[0] - d[1]) / 2 ** 0.5, abs=0.051)
    assert json.loads((out / "softmax_seed1/metrics.json").read_text())["attention"]["attention"] == "softmax"
    assert json.loads((out / "lam-2_seed2/metrics.json").read_text())["attention"]["lam"] == -2.0
    # rerun: every cell reused, nothing retrained
    mtime = (out / "lam-2_seed1/metrics.json").stat().st_mtime
    assert main(args) == 0
    assert capsys.readouterr().out.count("finished before, reused") == 6
    assert (out / "lam-2_seed1/metrics.json").stat().st_mtime == mtime
    # the same report redrawn is the same bytes (the SVG's date and random ids made every redraw differ)
    svg = (out / "sweep.svg").read_bytes()
    assert main(args + ["--report-only"]) == 0
    capsys.readouterr()
    assert (out / "sweep.svg").read_bytes() == svg
    # --report-only with a lam never trained: reports the finished cells, trains nothing
    (out / "sweep.json").unlink()  # as if another process's partial sweep.json had overwritten it: the cells' files count
    assert main(args[:2] + ["-4"] + args[2:] + ["--report-only"]) == 0
    text = capsys.readouterr().out
    assert text.count("not finished, left out (--report-only)") == 2 and text.count("finished before, reused") == 6
    assert not (out / "lam-4_seed1").exists()
    assert [(r["lam"], r["seed"]) for r in json.loads((out / "sweep.json").read_text())] == [
        ("softmax", 1), (-2.0, 1), (0.9, 1), ("softmax", 2), (-2.0, 2), (0.9, 2)]
    assert "| -4 |" not in (out / "sweep.md").read_text()


def test_sweep_report_only_with_no_finished_cell_says_so(tiny_bert, tmp_path, capsys):
    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data")
    rc = main(["sweep", "--lams", "-2", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert),
               "--output-dir", str(tmp_path / "s"), "--report-only"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--report-only: no cell of this sweep has finished in" in err and str(tmp_path / "s") in err
    assert not (tmp_path / "s/softmax_seed1").exists()


def test_sweep_refuses_a_bad_lam_before_training(tiny_bert, tmp_path, capsys):
    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data")
    rc = main(["sweep", "--lams", "-2", "1.5", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert),
               "--output-dir", str(tmp_path / "s")])
    assert rc == 2
    assert "lam" in capsys.readouterr().err
    assert not (tmp_path / "s/softmax_seed1").exists()


def test_sweep_refuses_to_mix_cells_trained_with_other_settings(tiny_bert, tmp_path, capsys):
    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data", n_train=32, n_dev=16)
    base = ["sweep", "--lams", "0", "--seeds", "1", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert),
            "--batch-size", "16", "--max-length", "16", "--output-dir", str(tmp_path / "s")]
    assert main(base + ["--epochs", "1"]) == 0
    # the run folders are gone (a committed sweep.json from another machine): records are still reused
    for d in (tmp_path / "s").glob("*_seed1"):
        shutil.rmtree(d)
    capsys.readouterr()
    assert main(base + ["--epochs", "1"]) == 0
    assert capsys.readouterr().out.count("reused") == 2
    assert main(base + ["--epochs", "2"]) == 2
    err = capsys.readouterr().err
    assert "epochs: 1.0 there, 2.0 now" in err and "--output-dir" in err


def test_seeds_note_names_points_with_fewer_seeds():
    rec = lambda lam, seed: {"lam": lam, "seed": seed}  # noqa: E731
    full = [rec(lam, s) for s in (1, 2) for lam in ("softmax", -6.0, 0.0)]
    assert seeds_note(full) == "mean ± std over seeds 1, 2"
    part = full[:3] + [rec("softmax", 2), rec(-6.0, 2)]  # seed 2 has not reached lam 0 yet
    assert seeds_note(part) == "mean ± std over seeds 1, 2 (lam 0: seed 1 only)"
    three = part + [rec("softmax", 3)]
    assert seeds_note(three) == "mean ± std over seeds 1, 2, 3 (lam -6: seeds 1, 2 only; lam 0: seed 1 only)"


def test_sweep_table_pairs_by_seed_and_marks_missing_softmax():
    rec = lambda lam, seed, test: {"lam": lam, "seed": seed, "dev": 0.5, "test": test, "metric": "accuracy", "mean_support": 3.0}  # noqa: E731
    recs = [rec("softmax", 1, 0.70), rec(-6.0, 1, 0.72), rec("softmax", 2, 0.60), rec(-6.0, 2, 0.59), rec(-6.0, 3, 0.9)]
    rows = [line.split(" | ") for line in sweep_table(recs).splitlines() if line.startswith("| -6")]
    # seed 3 has no softmax baseline: it counts in the mean test, not in the paired difference
    assert rows == [["| -6", "1, 2, 3", "50.0 ± 0.0", "73.7 ± 15.6", "+0.5 ± 2.1 [-18.6, +19.6] (1/2, t=0.3, p=0.80)", "too few seeds", "3.0 |"]]
    # no softmax cell at all (a sweep cut short, reported with --report-only): lam rows only, no paired column
    table = sweep_table([rec(-6.0, 1, 0.72)]).splitlines()
    assert not any(line.startswith("| softmax") for line in table)
    assert [line.split(" | ") for line in table if line.startswith("| -6")] == [["| -6", "1", "50.0 ± 0.0", "72.0 ± 0.0", "—", "—", "3.0 |"]]


def test_sweep_table_verdicts_by_paired_t_test_with_holm_across_the_values():
    """Each lam's paired cell prints t and p and a verdict of the paired t-test (n − 1 df), Holm across the lams."""
    rec = lambda lam, seed, test: {"lam": lam, "seed": seed, "dev": 0.5, "test": test, "metric": "accuracy", "mean_support": 3.0}  # noqa: E731
    soft = [rec("softmax", s, 0.70 + 0.01 * s) for s in (1, 2, 3)]
    ahead = [rec(-6.0, s, 0.72 + 0.01 * s + 0.001 * s * s) for s in (1, 2, 3)]  # +2.1, +2.4, +2.9: t = 10.6, p = 0.009
    noisy = [rec(0.0, s, 0.70 + 0.01 * s + 0.001 * (s % 2)) for s in (1, 2, 3)]  # +0.1, 0, +0.1: p = 0.18
    behind = [rec(-2.0, s, 0.69 + 0.01 * s - 0.001 * s) for s in (1, 2, 3)]  # −1.1, −1.2, −1.3: p = 0.003
    table = sweep_table(soft + ahead + noisy + behind)
    rows = {line.split(" | ")[0]: line.split(" | ") for line in table.splitlines() if line.startswith("| -") or line.startswith("| 0")}
    assert rows["| -6"][4] == "+2.5 ± 0.4 [+1.5, +3.5] (3/3, t=10.6, p=0.009)" and rows["| -6"][5] == "holds"
    assert rows["| -2"][4].startswith("−") or rows["| -2"][4].startswith("-")
    assert rows["| -2"][5] == "reversed"
    # not significant, and its 95% interval [-0.1, +0.2] lies inside the ±1 point margin: level
    assert "[-0.1, +0.2]" in rows["| 0"][4] and rows["| 0"][5] == "level"
    assert "Holm's correction across the swept lam values" in table
    # p = 0.035 alone would hold; ranked second of three its Holm threshold is 0.05 / 2 = 0.025: not
    # significant, and its interval [+0.3, +2.7] reaches past the margin: undecided
    weak = [rec(-6.0, s, 0.70 + 0.01 * s + {1: 0.010, 2: 0.020, 3: 0.015}[s]) for s in (1, 2, 3)]  # +1.0, +2.0, +1.5
    rows = [line.split(" | ") for line in sweep_table(soft + weak + noisy + behind).splitlines() if line.startswith("| -6")]
    assert "[+0.3, +2.7] (3/3, t=5.2, p=0.04)" in rows[0][4] and rows[0][5] == "undecided"
    alone = [line.split(" | ") for line in sweep_table(soft + weak).splitlines() if line.startswith("| -6")]
    assert alone[0][5] == "holds"


def test_sweep_over_alpha(tiny_bert, tmp_path, capsys):
    """--alphas sweeps alpha-entmax's alpha as --lams sweeps lam: cells, records, table and figures name alpha."""
    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data", n_train=48, n_dev=16)
    out = tmp_path / "sweep"
    args = ["sweep", "--alphas", "1.25", "2", "--seeds", "1", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert),
            "--max-steps", "3", "--eval-steps", "3", "--batch-size", "16", "--lr", "3e-3", "--max-length", "16", "--output-dir", str(out)]
    assert main(args) == 0
    assert "cell 3/3 (alpha 2, seed 1)" in capsys.readouterr().out
    recs = json.loads((out / "sweep.json").read_text())
    assert [(r["param"], r["alpha"]) for r in recs] == [("alpha", "softmax"), ("alpha", 1.25), ("alpha", 2.0)]
    m = json.loads((out / "alpha1.25_seed1/metrics.json").read_text())["attention"]
    assert m["attention"] == "entmax-alpha" and m["alpha"] == 1.25
    # no denser as alpha grows (a tiny random model's near-uniform rows stay dense even under sparsemax)
    assert recs[2]["mean_support"] <= recs[1]["mean_support"] <= recs[0]["mean_support"]
    assert (out / "sweep.md").read_text().count("| alpha | seeds |") == 1
    assert (out / "sweep.png").is_file() and (out / "sweep_attention.png").is_file()
    # a lam sweep into the alpha sweep's folder is refused, naming both
    assert main(["sweep", "--lams", "-2"] + args[4:]) == 2
    assert "holds a sweep over alpha, not lam" in capsys.readouterr().err


def test_a_sweep_that_stops_keeps_every_earlier_record_and_one_over_a_smaller_grid_keeps_the_rest(tiny_bert, tmp_path, capsys, monkeypatch):
    """A rerun that stopped early (a damaged cell record refused, a Ctrl-C while a new first cell trained) rewrote
    sweep.json (.md, .png, .svg) with the cells reached so far: the records kept only there (their run folders gone)
    were lost (sweep 2026-11-27g). Now every report holds the earlier records not reached yet; a smaller grid keeps
    the cells outside it (said), which must have been trained as this grid is."""
    import attnkit.training.sweep as sweep_module
    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data", n_train=32, n_dev=16)
    out = tmp_path / "s"
    common = ["--seeds", "1", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--max-steps", "2",
              "--eval-steps", "2", "--batch-size", "16", "--max-length", "16", "--output-dir", str(out), "--no-heatmap"]
    assert main(["sweep", "--lams", "-1", "-3", *common]) == 0
    lams = lambda: [r["lam"] for r in json.loads((out / "sweep.json").read_text())]  # noqa: E731
    full = json.loads((out / "sweep.json").read_text())
    assert lams() == ["softmax", -1.0, -3.0]
    shutil.rmtree(out / "lam-3_seed1")  # its record is only in sweep.json now
    cell = out / "lam-1_seed1" / "sweep_cell.json"
    good = cell.read_bytes()
    cell.write_bytes(good[:100])  # damaged: refused, naming it
    capsys.readouterr()
    assert main(["sweep", "--lams", "-1", "-3", *common]) == 2
    assert str(cell) in capsys.readouterr().err
    assert json.loads((out / "sweep.json").read_text()) == full
    # another cell's record in its folder (edited by hand, or copied): it was reused as this cell, then counted twice
    # under its own lam (seeds "1, 1", t = inf) and this cell's row was gone (sweep s23d)
    cell.write_text(json.dumps({**json.loads(good), "lam": -3.0}))
    capsys.readouterr()
    assert main(["sweep", "--lams", "-1", "-3", *common]) == 2
    err = capsys.readouterr().err
    assert f"{cell} records the cell lam -3, seed 1, not the cell of its folder (lam -1, seed 1)" in err, err
    assert json.loads((out / "sweep.json").read_text()) == full
    cell.write_bytes(good)
    # Ctrl-C while a new first cell trains: softmax reached (reused), -1 and -3 not yet: all three kept
    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(sweep_module, "run_cell", interrupted)
    assert main(["sweep", "--lams", "-0.5", "-1", "-3", *common]) == 130
    assert json.loads((out / "sweep.json").read_text()) == full
    monkeypatch.undo()
    # a smaller grid: -1 and softmax reused, -3 (outside the grid, folder gone) kept and said
    capsys.readouterr()
    assert main(["sweep", "--lams", "-1", *common]) == 0
    assert "keeps 1 cell(s) of an earlier sweep outside this grid: lam -3, seed 1" in capsys.readouterr().out
    assert lams() == ["softmax", -1.0, -3.0] and "| -3 |" in (out / "sweep.md").read_text()
    # other settings over a grid that shares no cell with it (another seed): refused, naming the earlier cell
    assert main(["sweep", "--lams", "-1", "--seeds", "2", "--data-dir", str(data), "--model", str(tiny_bert),
                 "--max-steps", "3", "--eval-steps", "3", "--batch-size", "16", "--max-length", "16", "--output-dir",
                 str(out), "--no-heatmap", "--task", "csv"]) == 2
    err = capsys.readouterr().err
    assert "the earlier cell" in err and "was trained with other settings" in err and "--max-steps: 2 there, 3 now" in err, err
    assert json.loads((out / "sweep.json").read_text()) == full


def test_a_copied_sweeps_attention_figure_is_drawn_from_its_own_cells(tiny_bert, data, tmp_path, monkeypatch):
    """`sweep --report-only` on a copy of a sweep folder drew its attention figure from the models of the folder the
    sweep first ran in (each record's run_dir), not the copy's, without a word (sweep s24b)."""
    from attnkit.training import sweep as sweep_module

    a, b = tmp_path / "a", tmp_path / "b"
    args = ["--lams", "-2", "--seeds", "1", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert),
            "--max-steps", "1", "--batch-size", "16", "--max-length", "16"]
    assert main(["sweep", *args, "--output-dir", str(a)]) == 0
    shutil.copytree(a, b)
    loaded = []
    real = sweep_module.load_model
    monkeypatch.setattr(sweep_module, "load_model", lambda d, *k, **kw: loaded.append(Path(d)) or real(d, *k, **kw))
    assert main(["sweep", *args, "--output-dir", str(b), "--report-only"]) == 0
    assert len(loaded) == 2 and all(b in p.parents for p in loaded), loaded


def test_a_cell_without_its_model_is_named_on_the_attention_figure(tiny_bert, data, tmp_path, monkeypatch):
    """A cell whose model is gone is left out of the attention figure and named in its title, wrapped to the figure's
    width: one long line ran past a one-panel figure's edge and was cut at 'without a s' (sweep s25)."""
    from attnkit.training import sweep as sweep_module

    out = tmp_path / "s"
    args = ["--lams", "-2", "--seeds", "1", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert),
            "--max-steps", "1", "--batch-size", "16", "--max-length", "16", "--output-dir", str(out)]
    assert main(["sweep", *args]) == 0
    shutil.rmtree(out / "lam-2_seed1" / "model")
    titles = []
    real = sweep_module.save_figure
    monkeypatch.setattr(sweep_module, "save_figure", lambda fig, p: titles.append((fig._suptitle.get_text(), fig.get_figwidth())) or real(fig, p))
    assert main(["sweep", *args, "--report-only"]) == 0
    text, width = next(t for t in titles if "white = exactly 0" in t[0])
    assert "left out, no saved model: lam -2" in text.replace("\n", " "), text
    assert max(len(line) for line in text.split("\n")) <= width * 11, text


def test_a_sweep_whose_cells_kept_no_model_has_no_attention_figure(tiny_bert, data, tmp_path, capsys):
    """With every model of the figure's seed gone, --report-only left the earlier sweep_attention.png in place and named
    it among the figures written (sweep s25): it is removed, and the line says why."""
    out = tmp_path / "s"
    args = ["--lams", "-2", "--seeds", "1", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert),
            "--max-steps", "1", "--batch-size", "16", "--max-length", "16", "--output-dir", str(out)]
    assert main(["sweep", *args]) == 0
    assert (out / "sweep_attention.png").is_file()
    for cell in ("lam-2_seed1", "softmax_seed1"):
        shutil.rmtree(out / cell / "model")
    capsys.readouterr()
    assert main(["sweep", *args, "--report-only"]) == 0
    text = capsys.readouterr().out
    assert not (out / "sweep_attention.png").exists()
    assert "no cell of seed 1 has a saved model: no attention figure" in text and "sweep_attention.png" not in text, text
