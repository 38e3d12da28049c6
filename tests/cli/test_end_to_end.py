"""The command line end to end on a tiny model and a tiny csv task."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from attnkit.cli import main
from helpers import merged

pytestmark = pytest.mark.slow


def train_args(model, data, out, *extra):
    return merged([
        "train", "--task", "csv", "--data-dir", str(data), "--model", str(model), "--output-dir", str(out),
        "--batch-size", "16", "--lr", "3e-3", "--max-length", "16", "--logging-steps", "5"], extra)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_bert):
    from helpers import write_tiny_sentiment

    root = tmp_path_factory.mktemp("cli")
    data = write_tiny_sentiment(root / "data", n_train=160)
    out = root / "run"
    rc = main(train_args(tiny_bert, data, out, "--attention", "sparsegen-lin", "--lam", "-2", "--epochs", "12", "--seed", "3"))
    assert rc == 0
    return out, data


def test_train_writes_metrics_model_and_heatmap(trained, capsys):
    out, _ = trained
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["attention"] == {"attention": "sparsegen-lin", "lam": -2.0, "blur": "none", "blur_size": 3, "blur_sigma": 0.3}
    assert 0.0 <= metrics["validation"]["accuracy"] <= 1.0
    assert "train_loss" in metrics["train"]
    assert metrics["best_step"] > 0 and "best_checkpoint" not in metrics  # its folder is removed at the end
    # the training log survives the checkpoints (removed after the run): one dev evaluation per epoch, and losses
    evals = [h for h in metrics["log_history"] if "eval_accuracy" in h]
    assert [round(h["epoch"]) for h in evals] == list(range(1, 13))
    assert not list(out.glob("checkpoint-*"))
    assert (out / "curves.png").stat().st_size > 1000 and (out / "curves.svg").read_text().lstrip().startswith("<?xml")
    model = out / "model"
    assert (model / "model.safetensors").is_file()
    assert json.loads((model / "config.json").read_text())["attnkit"]["lam"] == -2.0
    assert (out / "attention.png").stat().st_size > 1000
    assert (out / "attention_grid.png").stat().st_size > 1000


def test_tiny_task_is_learned(trained):
    out, _ = trained
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["validation"]["accuracy"] >= 0.75, metrics["validation"]


def test_evaluate_prints_and_writes_json(trained, capsys, tmp_path):
    out, data = trained
    dest = tmp_path / "ev.json"
    assert main(["evaluate", "--model", str(out), "--task", "csv", "--data-dir", str(data), "--output", str(dest)]) == 0
    printed = capsys.readouterr().out
    ev = json.loads(dest.read_text())
    assert f"accuracy: {ev['accuracy']:.4f}" in printed
    best = json.loads((out / "metrics.json").read_text())["validation"]["accuracy"]
    assert ev["accuracy"] == pytest.approx(best, abs=1e-6)  # the saved model is the best dev checkpoint


def test_evaluate_records_its_data_and_says_when_it_replaces_another_sets_result(trained, capsys, tmp_path):
    """The default output (eval_<task>_<split>.json in the model) of one data folder was replaced by another folder's
    without a word, and did not say which data it measured."""
    import shutil

    out, data = trained
    model = shutil.copytree(out, tmp_path / "m")
    small = shutil.copytree(data, tmp_path / "small")
    dev = (small / "dev.csv").read_text().splitlines(keepends=True)
    (small / "dev.csv").write_text("".join(dev[:4]))
    assert main(["evaluate", "--model", str(model), "--data-dir", str(data)]) == 0
    capsys.readouterr()
    first = json.loads((model / "model" / "eval_csv_validation.json").read_text())
    assert first["data_dir"] == str(data.resolve()) and len(first["texts_sha256"]) == 64
    assert main(["evaluate", "--model", str(model), "--data-dir", str(data)]) == 0  # the same texts again: nothing to say
    assert "held the evaluation of other texts" not in capsys.readouterr().err
    assert main(["evaluate", "--model", str(model), "--data-dir", str(small)]) == 0
    err = capsys.readouterr().err
    assert f"held the evaluation of other texts (n {first['n']}, data {data.resolve()}): replaced by this one" in err
    second = json.loads((model / "model" / "eval_csv_validation.json").read_text())
    assert second["n"] == 3 and second["data_dir"] == str(small.resolve()) and second["texts_sha256"] != first["texts_sha256"]


def test_predict_arguments_and_file(trained, capsys, tmp_path):
    out, _ = trained
    f = tmp_path / "in.txt"
    f.write_text("\ufeffa great fun movie\nan awful boring film\n\n", encoding="utf-8")  # blank lines at the end are no texts
    assert main(["predict", "--model", str(out), "superb story", "--file", str(f)]) == 0
    rows = [json.loads(l) for l in capsys.readouterr().out.splitlines()]
    assert [r["text"] for r in rows] == ["superb story", "a great fun movie", "an awful boring film"]
    for r in rows:
        assert set(r["probabilities"]) == {"negative", "positive"}
        assert sum(r["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        assert r["label"] == max(r["probabilities"], key=r["probabilities"].get)
    assert "warning" not in capsys.readouterr().err
    # a task's data file given as --file: each line is still one text, and one line on stderr says what was read
    # (its header and labels were labelled as texts without a word: sweep 2026-11-28p M)
    d = tmp_path / "d"
    d.mkdir()
    (d / "dev.csv").write_text("text,label\na great fun movie,1\n")
    assert main(["predict", "--model", str(out), "--file", str(d / "dev.csv")]) == 0
    captured = capsys.readouterr()
    assert [json.loads(l)["text"] for l in captured.out.splitlines()] == ["text,label", "a great fun movie,1"]
    assert captured.err.count("\n") == 1 and "its first line 'text,label' is a data file's header" in captured.err
    assert f"--task csv --data-dir {d} --split validation" in captured.err
    (d / "texts.txt").write_text("text\tlabel\na great fun movie\t1\n")  # a tab-separated header: tsv (sweep -28q W)
    assert main(["predict", "--model", str(out), "--file", str(d / "texts.txt")]) == 0
    err = capsys.readouterr().err  # (a file a task would not read by its name: the way names the files it reads)
    assert "--task tsv --data-dir <that folder> --split test" in err and "copy it as test.tsv" in err
    (d / "test.tsv").write_text("index\tsentence\n0\ta great fun movie\n")  # GLUE's test layout (sweep -28r W)
    assert main(["predict", "--model", str(out), "--file", str(d / "test.tsv")]) == 0
    assert "--task <its GLUE task, e.g. sst2> --data-dir <the folder that holds glue/> --split test" in capsys.readouterr().err


@pytest.mark.parametrize("ext", ["png", "svg"])
def test_explain_single_head_and_grid(trained, capsys, tmp_path, ext):
    out, _ = trained
    single = tmp_path / f"one.{ext}"
    assert main(["explain", "--model", str(out), "a great movie", "--layer", "1", "--head", "0", "--output", str(single), "--stats", str(tmp_path / "s.json")]) == 0
    text = capsys.readouterr().out
    assert "support size per row:" in text and "[CLS]=" in text
    stats = json.loads((tmp_path / "s.json").read_text())
    assert stats["tokens"] == 5 and 1 <= stats["mean_support"] <= 5
    grid = tmp_path / f"grid.{ext}"
    assert main(["explain", "--model", str(out), "a great movie", "--output", str(grid)]) == 0
    head = grid.read_bytes()[:200]
    assert head.startswith(b"\x89PNG") if ext == "png" else b"<svg" in grid.read_bytes()[:2000]


def test_explain_bad_layer_is_a_clear_error(trained, capsys, tmp_path):
    out, _ = trained
    assert main(["explain", "--model", str(out), "a movie", "--layer", "7", "--output", str(tmp_path / "x.png")]) == 2
    assert "layer 7 out of range" in capsys.readouterr().err


def test_bad_inputs_give_one_line_errors(tiny_bert, tmp_path, capsys):
    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "d")
    assert main(train_args(tiny_bert, data, tmp_path / "o", "--lam", "1.5", "--attention", "sparsegen-lin")) == 2
    assert "lam=1.5" in capsys.readouterr().err
    assert main(["predict", "--model", str(tmp_path / "missing"), "x"]) == 2
    assert "no such folder" in capsys.readouterr().err
    with open(data / "train.csv", "a") as f:
        f.write("only-one-field\n")
    assert main(train_args(tiny_bert, data, tmp_path / "o2", "--max-steps", "1")) == 2
    err = capsys.readouterr().err
    assert "train.csv" in err and "line" in err


def test_resume_after_kill(tiny_bert, tmp_path):
    """A run killed after its first checkpoint resumes from it rather than starting over."""
    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data")
    out = tmp_path / "run"
    assert main(train_args(tiny_bert, data, out, "--max-steps", "4", "--eval-steps", "2", "--no-heatmap", "--keep-checkpoints")) == 0
    ck4 = out / "checkpoint-4" / "trainer_state.json"
    state = json.loads(ck4.read_text())
    assert state["global_step"] == 4
    # mark the saved state: a resumed run carries its log history forward, a fresh one would not
    state["log_history"].append({"step": 4, "resume_marker": 1})
    ck4.write_text(json.dumps(state))
    # simulate a kill: remove the final model and metrics, leave a half-written checkpoint
    shutil.rmtree(out / "model")
    (out / "metrics.json").unlink()
    (out / "checkpoint-6").mkdir()
    (out / "checkpoint-6" / "config.json").write_text("{")
    assert main(train_args(tiny_bert, data, out, "--max-steps", "6", "--eval-steps", "2", "--no-heatmap", "--keep-checkpoints")) == 0
    state = json.loads((out / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6
    assert any(h.get("resume_marker") == 1 for h in state["log_history"]), "training restarted instead of resuming"
    assert (out / "model" / "model.safetensors").is_file()
    assert json.loads((out / "metrics.json").read_text())["validation"]["accuracy"] >= 0


def test_torchrun_two_processes(tiny_bert, tmp_path):
    """The same training command runs under torchrun with 2 CPU processes (gloo)."""
    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data")
    out = tmp_path / "ddp"
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517",
        "-m", "attnkit.cli", *train_args(tiny_bert, data, out, "--max-steps", "3", "--no-heatmap", "--keep-checkpoints"),
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train"]["train_runtime"] > 0
    state = json.loads((out / "checkpoint-3" / "trainer_state.json").read_text())
    assert state["global_step"] == 3
    # 2 processes x batch 16 per step: 3 steps saw 96 examples
    assert state["train_batch_size"] == 16
    assert "dev accuracy" in r.stdout and r.stdout.count("dev accuracy") == 1
    # the loss is the mean over the batch, as in one process (not doubled by averaging across devices)
    one = tmp_path / "one"
    assert main(train_args(tiny_bert, data, one, "--max-steps", "3", "--no-heatmap", "--lr", "1e-9")) == 0
    single = json.loads((one / "metrics.json").read_text())["train"]["train_loss"]
    cmd[cmd.index("3e-3")] = "1e-9"
    cmd[cmd.index(str(out))] = str(tmp_path / "ddp2")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    double = json.loads((tmp_path / "ddp2" / "metrics.json").read_text())["train"]["train_loss"]
    assert abs(double - single) < 0.1, (double, single)


def test_fast_kernel_and_slow_path_train_the_same(tiny_bert, tmp_path, monkeypatch):
    """A short fine-tuning run with a fixed seed gives the same dev metrics on both paths."""
    from helpers import write_tiny_sentiment

    from attnkit.attention import kernels

    if kernels.backend() != "cpp":
        pytest.skip(kernels.backend_reason())
    data = write_tiny_sentiment(tmp_path / "data")
    results = {}
    for name in ("cpp", "torch"):
        if name == "torch":
            monkeypatch.setattr(kernels, "kernel_applies", lambda t: False)
        out = tmp_path / name
        assert main(train_args(tiny_bert, data, out, "--max-steps", "8", "--no-heatmap", "--seed", "7")) == 0
        results[name] = json.loads((out / "metrics.json").read_text())
    a, b = results["cpp"], results["torch"]
    assert a["validation"]["accuracy"] == b["validation"]["accuracy"]
    assert a["validation"]["loss"] == pytest.approx(b["validation"]["loss"], abs=1e-4)
    assert a["train"]["train_loss"] == pytest.approx(b["train"]["train_loss"], abs=1e-4)


def test_explain_writes_an_interactive_page(trained, tmp_path, capsys):
    out, _ = trained
    page = tmp_path / "view.html"
    assert main(["explain", "--model", str(out), "a great movie", "--output", str(tmp_path / "a.png"), "--html", str(page)]) == 0
    text = page.read_text()
    assert "interactive view written" in capsys.readouterr().out
    assert '"tokens":["[CLS]","a","great","movie","[SEP]"]' in text.replace(" ", "") and "model view" in text
    assert main(["explain", "--model", str(out), "x", "--html", str(tmp_path / "v.txt")]) == 2


def test_help_and_tasks_do_not_import_torch():
    """--help and the task listing answer at once: no torch, no transformers (checked by what is imported, not by time)."""
    code = (
        "import sys\n"
        "from attnkit.cli import main\n"
        "for argv in (['tasks'], ['train', '--help'], ['--help'], ['sweep', '--help']):\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = r.stdout.strip().splitlines()
    assert out[-1] == "[]"
    assert any(l.startswith("hans ") for l in out) and "``" not in r.stdout


def test_normaliser_names_match_the_registry():
    from attnkit.attention.names import ANNEALED_NAMES, NORMALISER_NAMES
    from attnkit.attention.normalisers import BUILTIN_NAMES, NORMALISERS

    assert BUILTIN_NAMES == NORMALISER_NAMES
    assert tuple(n for n in BUILTIN_NAMES if NORMALISERS[n].anneal is not None) == ANNEALED_NAMES


def test_tasks_says_which_datasets_are_found(tmp_path, capsys):
    (tmp_path / "sentube" / "auto").mkdir(parents=True)
    (tmp_path / "glue" / "RTE").mkdir(parents=True)
    assert main(["tasks", "--data-dir", str(tmp_path)]) == 0
    rows = {l.split()[0]: l for l in capsys.readouterr().out.splitlines()[1:]}
    assert "[found: sentube/auto/]" in rows["sentube-auto"] and "[found: glue/RTE/]" in rows["rte"]
    assert "[not found: semeval2013_taskB/]" in rows["semeval2013"] and "[not found: hans/]" in rows["hans"]
    assert "your own files" in rows["csv"] and {"hans", "squad", "scitail"} <= set(rows)


def test_batch_size_only_where_more_than_one_text_is_read(capsys):
    from attnkit.cli.parser import build_parser

    parser = build_parser()
    assert parser.parse_args(["layer-weights", "--model", "m", "--batch-size", "8"]).batch_size == 8
    with pytest.raises(SystemExit):  # explain draws one sentence: a batch size would be silently ignored
        parser.parse_args(["explain", "--model", "m", "a sentence", "--batch-size", "8"])
    assert "--batch-size" in capsys.readouterr().err


def test_a_kept_checkpoint_reads_its_runs_record(tiny_bert, tmp_path, capsys):
    """`predict --model run/checkpoint-N` read at length 128, not the run's --max-length, and `evaluate` asked for --task
    (the checkpoint holds no record of its own; its finished run's model/ does, sweep s23f)."""
    from attnkit.analysis.inference import run_info
    from helpers import write_tiny_sentiment

    data = write_tiny_sentiment(tmp_path / "data")
    out = tmp_path / "run"
    assert main(train_args(tiny_bert, data, out, "--max-steps", "2", "--eval-steps", "2", "--no-heatmap", "--keep-checkpoints")) == 0
    ck = next(out.glob("checkpoint-*"))
    assert run_info(ck) == run_info(out / "model") and run_info(ck)["max_length"] == 16
    capsys.readouterr()
    assert main(["evaluate", "--model", str(ck), "--data-dir", str(data)]) == 0
    assert "--task is needed" not in capsys.readouterr().err
