"""Every setting is checked before work starts: non-finite, empty, below one, out of range, duplicated or ignored values
are refused in one line; negative numbers are values; threads above the cores warn; a warm-up longer than the run is
refused and counts the steps of every process."""

import math
import os

import pytest
import torch

from attnkit.cli import main
from attnkit.cli.parser import build_parser
from helpers import error_line, four_step_train_args, only_stderr_line, two_step_train_args

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("extra,needle", [
    (["--weight-decay", "nan"], "--weight-decay nan"),
    (["--weight-decay", "inf"], "--weight-decay inf"),
    (["--warmup", "nan"], "--warmup nan"),
    (["--warmup", "inf"], "--warmup inf"),
    (["--attention", "sparsegen-lin", "--lam-warmup", "inf"], "--lam-warmup inf"),
    (["--attention", "sparsegen-lin", "--lam-warmup", "nan"], "--lam-warmup nan"),
    (["--max-train-samples", "0"], "--max-train-samples 0"),
    (["--max-eval-samples", "-3"], "--max-eval-samples -3"),
    (["--logging-steps", "0"], "--logging-steps 0"),
])
def test_non_finite_or_empty_settings_are_refused(tiny_bert, data, tmp_path, capsys, extra, needle):
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", *extra)) == 2
    only_stderr_line(capsys, needle)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("argv,needle", [
    (["predict", "--batch-size", "0", "x"], "--batch-size"),
    (["evaluate", "--batch-size", "-1"], "--batch-size"),
    (["words", "--max-samples", "0"], "--max-samples"),
    (["words", "--top", "0"], "--top"),
    (["layer-weights", "--max-samples", "-5"], "--max-samples"),
    (["evaluate", "--hans-per-subcase", "0"], "--hans-per-subcase"),
])
def test_counts_below_one_are_refused_everywhere(run, capsys, argv, needle):
    with pytest.raises(SystemExit) as e:
        main([argv[0], "--model", str(run), *argv[1:]])
    assert e.value.code == 2
    assert needle in capsys.readouterr().err


@pytest.mark.parametrize("extra,needle", [(["--epochs", "0"], "--epochs 0"), (["--lr", "0"], "--lr 0"), (["--epochs", "nan"], "--epochs nan")])
def test_pretrain_that_would_do_nothing_is_refused(data, tmp_path, capsys, extra, needle):
    assert main(["pretrain", "--task", "csv", "--data-dir", str(data), "--output-dir", str(tmp_path / "p"), *extra]) == 2
    only_stderr_line(capsys, needle)
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("extra,needle", [
    (["--lams", "-2", "-2.0"], "--lams: -2 given more than once"),
    (["--lams", "-2", "--seeds", "1", "1"], "--seeds: 1 given more than once"),
    (["--lams", "-2", "--attention", "softmax"], "--attention softmax"),
    (["--lams", "-2", "--lam", "-4"], "--lam -4"),
])
def test_sweep_refuses_duplicates_and_options_it_would_ignore(tiny_bert, data, tmp_path, capsys, extra, needle):
    assert main(["sweep", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(tmp_path / "s"), *extra]) == 2
    only_stderr_line(capsys, needle)
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("extra,needle", [
    (["--attention", "softmax", "--lam", "-2"], "--lam -2 (only sparsegen-lin has a lam"),
    (["--blur-sigma", "0.5"], "--blur-sigma (it shapes the blur"),  # only what was given (sweep -28q P2)
    (["--blur-size", "5", "--blur-sigma", "0.5"], "--blur-size/--blur-sigma (they shape the blur"),
    (["--se-ratio", "4"], "--se-ratio 4"),
    (["--doc-stride", "8"], "--doc-stride 8"),
])
def test_train_refuses_options_it_would_ignore(tiny_bert, data, tmp_path, capsys, extra, needle):
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", *extra)) == 2
    only_stderr_line(capsys, needle)
    assert not (tmp_path / "o").exists()


def test_threads_above_the_cores_warn(run, capsys):
    cores = len(os.sched_getaffinity(0))
    assert main(["predict", "--model", str(run), "--threads", str(cores + 3), "a fine film"]) == 0
    assert f"--threads {cores + 3} is more than the {cores} cores" in capsys.readouterr().err
    torch.set_num_threads(cores)


@pytest.mark.parametrize("text,value", [("-1e-3", -1e-3), ("-inf", -math.inf), ("-4", -4.0), ("-.5", -0.5), ("-2E+1", -20.0)])
def test_negative_numbers_are_values(text, value):
    a = build_parser().parse_args(["train", "--lam", text, "--seed", "-1"])
    assert a.lam == value and a.seed == -1
    s = build_parser().parse_args(["sweep", "--lams", "-8", text, "0", "--seeds", "1", "-2"])
    assert s.lams == [-8.0, value, 0.0] and s.seeds == [1, -2]


def test_a_non_number_is_still_an_unknown_option(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["train", "--lam", "-x"])
    assert "--lam" in capsys.readouterr().err


@pytest.fixture
def user_run(tiny_bert, data, tmp_path):
    """A finished run of the user's, copied where commands may aim outputs at its files."""
    out = tmp_path / "user_run"
    assert main(two_step_train_args(tiny_bert, data, out)) == 0
    return out


@pytest.mark.parametrize("extra,needle", [
    (["--max-steps", "0"], "--max-steps 0"), (["--max-steps", "-5"], "--max-steps -5"), (["--max-steps", "-1"], "--max-steps -1"), (["--epochs", "nan"], "--epochs nan"),
    (["--freeze", ","], "--freeze ','"), (["--seed", "-1"], "--seed -1"), (["--seed", "99999999999"], "--seed 99999999999"),
])
def test_more_settings_that_were_silently_odd(tiny_bert, data, tmp_path, capsys, extra, needle):
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", *extra)) == 2
    only_stderr_line(capsys, needle)


@pytest.mark.parametrize("argv,needle", [
    (["predict", "good", "--task", "csv"], "--task csv: only with --split"),
    (["predict", "good", "--output-dir", "x"], "--output-dir x: only with --split"),
    (["evaluate", "--plot", "h.png"], "--plot h.png: only with --task hans"),
    (["evaluate", "--hans-per-subcase", "5"], "--hans-per-subcase 5: only with --task hans"),
    (["evaluate", "--output", "m.png"], "must end in .json, got 'm.png'"),
    # a name that is only the suffix: the name is what is missing, not the suffix
    (["evaluate", "--output", ".json"], "--output .json: the metrics file has no name before '.json': name the file, e.g. out.json"),
    (["explain", "good", "--output", "figs/.PNG"], "the heatmap file has no name before '.PNG': name the file, e.g. figs/out.PNG"),
    (["explain", "good", "--output", "a.png", "--html", ".html"], "--html .html: the page file has no name before '.html'"),
    (["predict", "--file", "."], "is a folder"),
    # a split's predictions dropped the texts and the file given beside it
    (["predict", "--split", "validation", "--task", "csv", "good film"], "texts cannot be given with --split validation"),
    (["predict", "--split", "validation", "--task", "csv", "--file", "t.txt"], "--file cannot be given with --split validation"),
])
def test_inference_options_that_would_be_ignored_or_misread(user_run, data, tmp_path, capsys, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert main([argv[0], "--model", str(user_run)] + (["--data-dir", str(data)] if argv[0] == "evaluate" else []) + argv[1:]) == 2
    only_stderr_line(capsys, needle)


@pytest.mark.parametrize("argv,needle", [
    (["train", "--attention", "softmax", "--alpha", "1.5"], "--alpha 1.5 (only entmax-alpha"),
    (["train", "--blur-sigma", "0.3"], "--blur-sigma (it shapes the blur"),
    (["train", "--se-ratio", "3"], "--se-ratio 3"),
    (["sweep", "--lams", "-2", "--no-resume"], "--no-resume: a sweep reuses"),
    (["sweep", "--alphas", "2.5"], "--alphas 2.5"),
    # the cells trained seeds 1 and 2 and --seed 5 went unread (sweep s24)
    (["sweep", "--lams", "-2", "--seed", "5"], "--seed 5: attnkit sweep trains one cell per seed of --seeds (default 1 2)"),
])
def test_explicit_defaults_and_sweep_options_are_not_ignored(tiny_bert, data, tmp_path, capsys, argv, needle):
    base = ["--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(tmp_path / "o"), "--max-steps", "2"]
    assert main(argv[:1] + base + argv[1:]) == 2
    only_stderr_line(capsys, needle)


@pytest.mark.parametrize("argv,needle", [
    (["faithfulness", "--seed", "-5"], "--seed -5"), (["faithfulness", "--seed", "4294967296"], "--seed 4294967296"),
    (["faithfulness", "--ig-steps", "100000000"], "--ig-steps 100000000"),
    (["predict", "--split", "validation", "--task", "csv", "--output-dir", "x"], "--output-dir x: only for a GLUE test split"),
])
def test_inference_values_out_of_range(user_run, data, capsys, argv, needle):
    assert main([argv[0], "--model", str(user_run), "--data-dir", str(data)] + argv[1:]) == 2
    only_stderr_line(capsys, needle)


def test_a_warmup_that_outlasts_the_run_is_refused(tiny_bert, data, tmp_path, capsys):
    assert main(two_step_train_args(tiny_bert, data, tmp_path / "o", "--attention", "entmax15", "--alpha-warmup", "1e9")) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]  # after the tokenising progress bars
    assert "--alpha-warmup 1e+09: the run has 2 steps" in last and "Traceback" not in last
    assert not (tmp_path / "o" / "run_config.json").exists()


def test_a_warmup_counts_the_steps_of_every_process(monkeypatch):
    """Under torchrun each step takes a batch on every process: 100 texts at batch 10 are 10 steps alone, 3 on 4
    processes, so a 5-step warm-up fits the first run and outlasts the second."""
    from attnkit.training.config import TrainConfig
    from attnkit.training.trainer import check_warmups

    cfg = TrainConfig(batch_size=10, epochs=1, warmup_ratio=5)
    monkeypatch.setenv("RANK", "0")  # torchrun sets both, and where the processes meet
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", "29500")
    check_warmups(cfg, 100)
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(ValueError, match="--warmup 5: the run has 3 steps"):
        check_warmups(cfg, 100)


@pytest.mark.parametrize("env,needle", [
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "environment variable RANK='abc': expected a whole number"),
    ({"WORLD_SIZE": "abc"}, "environment variable WORLD_SIZE='abc': expected a whole number"),
    ({"RANK": "²", "WORLD_SIZE": "2"}, "environment variable RANK='²': expected a whole number"),  # a digit int() refuses
    ({"RANK": "1"}, "RANK is set but WORLD_SIZE is not"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 and WORLD_SIZE=2: expected 0 <= RANK < WORLD_SIZE"),
    # accelerate's traceback, called a bug in attnkit (sweep 2026-11-28q X)
    ({"RANK": "0", "WORLD_SIZE": "2"}, "WORLD_SIZE=2 and RANK=0 are set but MASTER_ADDR is not"),
    ({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "99999"},
     "MASTER_PORT='99999': expected a port number from 1 to 65535"),
])
def test_torchruns_variables_are_checked_before_anything_is_made(tiny_bert, data, tmp_path, capsys, monkeypatch, env, needle):
    """A rank that is not a number crashed in int(); a rank alone (no world) trained silently, wrote nothing of the
    run's record and kept its checkpoint (every non-zero rank leaves the writing to rank 0)."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(four_step_train_args(tiny_bert, data, tmp_path / "o")) == 2
    error_line(capsys, needle)
    assert not (tmp_path / "o").exists()


def test_a_warmup_longer_than_the_run_is_refused(tiny_bert, data, tmp_path, capsys):
    assert main(four_step_train_args(tiny_bert, data, tmp_path / "o", "--warmup", "100")) == 2
    error_line(capsys, "--warmup 100: the run has 4 steps")
    assert not (tmp_path / "o" / "run_config.json").exists()


@pytest.mark.slow
def test_a_process_waiting_for_the_others_says_so_and_stops_on_ctrl_c(tiny_bert, data, tmp_path):
    """torchrun's variables without the other process: train waited silently in torch's rendezvous, deaf to Ctrl-C and
    SIGTERM (sweep 2026-11-28q Y). It says where it waits, and Ctrl-C ends it at once."""
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as sk:  # a free port
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    env = dict(os.environ, RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
               OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    # (SIGINT as at a terminal: a shell's background job, as a test run may be, starts with it ignored, and an ignored
    # signal stays ignored)
    proc = subprocess.Popen([sys.executable, "-m", "attnkit.cli", *four_step_train_args(tiny_bert, data, tmp_path / "o")],
                            env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        seen = ""
        deadline = time.time() + 240
        while "meeting the others" not in seen and time.time() < deadline and proc.poll() is None:
            seen += proc.stderr.readline()
        assert f"[attnkit] process 0 of 2: meeting the others at 127.0.0.1:{port}" in seen, seen[-2000:]
        time.sleep(2)  # inside the wait
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
        assert proc.returncode != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
def test_a_port_in_use_where_the_processes_meet_is_one_line(tiny_bert, data, tmp_path):
    """MASTER_PORT taken by another program: torch's 40-line DistNetworkError was called a bug in attnkit (sweep
    2026-11-28q X); one line names the address and the reason."""
    import socket
    import subprocess
    import sys

    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        sk.listen()
        port = sk.getsockname()[1]
        env = dict(os.environ, RANK="0", WORLD_SIZE="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
        r = subprocess.run([sys.executable, "-m", "attnkit.cli", *four_step_train_args(tiny_bert, data, tmp_path / "o")],
                           env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr[-2000:]
    errors = [l for l in r.stderr.splitlines() if "error" in l]
    assert len(errors) == 1 and f"the processes could not meet at 127.0.0.1:{port}" in errors[0], r.stderr[-2000:]
    assert "Traceback" not in r.stderr and "EADDRINUSE" in errors[0]


def test_every_option_of_every_command_says_what_it_is():
    """14 options had no help text (--data-dir of five commands, --split of two: sweep 2026-11-28t CG); --data-dir's
    default folders are said in the order they are tried."""
    import argparse

    from attnkit.cli.parser import build_parser

    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bare = [f"{name} {'/'.join(a.option_strings) or a.dest}" for name, sub in subs.choices.items() for a in sub._actions
            if not isinstance(a, argparse._HelpAction) and not (a.help or "").strip()]
    assert bare == []
    for name, sub in subs.choices.items():
        for a in sub._actions:
            if "--data-dir" in a.option_strings:
                assert "$ATTNKIT_DATA, else ./shared/data, else ../shared/data" in a.help, name
