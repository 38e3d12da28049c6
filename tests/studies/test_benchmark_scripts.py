"""Every benchmark and study script starts as a module from the repository root (``python -m benchmarks.speed``):
its imports resolve and it parses ``--help``."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: speed and GPU benchmarks stay in benchmarks/; each study's runner lives in its folder of studies/
STUDIES = ("ssaf", "faithfulness", "sesamebert", "minibert", "adapt")
SCRIPTS = sorted([f"benchmarks.{p.stem}" for p in (ROOT / "benchmarks").glob("*.py") if "__main__" in p.read_text()]
                 + [f"studies.{s}.{p.stem}" for s in STUDIES for p in (ROOT / "studies" / s).glob("*.py")
                    if p.name != "__init__.py" and "__main__" in p.read_text()])  # scripts, not the modules they import


def test_the_benchmarks_are_found():
    assert {"studies.ssaf.ssaf_table2", "studies.ssaf.ssaf_diagnose", "studies.faithfulness.faithfulness",
            "studies.sesamebert.run", "benchmarks.speed", "benchmarks.accuracy"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_script_imports_and_shows_its_help(script):
    r = subprocess.run([sys.executable, "-m", script, "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage:" in r.stdout


def _exact_rows(out: str) -> int:
    """Rows of gpu_exact.py's table within tolerance."""
    return sum(ln.startswith("| ") and ln.endswith("| yes |") for ln in out.splitlines())


@pytest.mark.parametrize("script, env_extra, ran", [
    ("gpu", {}, lambda out: "every variant ran" in out and "attnkit entmax15 (triton)" in out),
    # two lengths x three maps x three input dtypes, every one within tolerance of float64
    ("gpu_exact", {"ATTNKIT_KERNEL": "triton"}, lambda out: _exact_rows(out) == 2 * 3 * 3),
])
def test_a_gpu_script_refuses_without_cuda_and_its_self_check_runs_every_case(script, env_extra, ran):
    import importlib.util
    import os

    import torch

    if not torch.cuda.is_available():
        r = subprocess.run([sys.executable, "-m", f"benchmarks.{script}"], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and "no CUDA device here" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed (pip install -e '.[gpu]'): the self-check runs the Triton kernels")
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1", **env_extra)
    r = subprocess.run([sys.executable, "-m", f"benchmarks.{script}", "--self-check"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert ran(r.stdout), r.stdout[-2000:]


def test_sesame_small_budget_tables_say_so_at_their_top_and_paper_budget_ones_do_not():
    import argparse

    from benchmarks import sesame as mod
    base = dict(model="minilm", batch_size=32, lr=3e-5, blur_size=3, blur_sigma=0.5, se_ratio=3, seeds=[1])
    paper = argparse.Namespace(epochs=3, max_train_samples=None, max_length=128, **base)
    small = argparse.Namespace(epochs=1, max_train_samples=400, max_length=96, **base)
    assert mod.SMALL_BUDGET in mod.header(small, "t")
    assert mod.SMALL_BUDGET in mod.header(argparse.Namespace(**{**vars(paper), "max_length": 64}), "t")
    assert mod.SMALL_BUDGET not in mod.header(paper, "t")
    assert mod.SMALL_BUDGET not in mod.header(small, "cost", trains=False)  # a speed table has no budget to speak of
