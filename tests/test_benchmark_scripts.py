"""Every benchmark script starts: its imports resolve and it parses ``--help`` (a renamed constant once broke one)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted(p.name for p in (ROOT / "benchmarks").glob("*.py") if p.name != "__init__.py")


def test_the_benchmarks_are_found():
    assert {"ssaf_table2.py", "ssaf_diagnose.py", "speed.py", "accuracy.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_benchmark_script_imports_and_shows_its_help(script):
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "usage:" in r.stdout


def test_the_gpu_benchmark_refuses_without_cuda_and_its_self_check_runs_every_variant():
    import importlib.util
    import os

    import torch

    if not torch.cuda.is_available():
        r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py")], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and "no CUDA device here" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed (pip install -e '.[gpu]'): the self-check runs the Triton kernels")
    env = dict(os.environ, TRITON_INTERPRET="1", OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--self-check"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "every variant ran" in r.stdout and "attnkit entmax15 (triton)" in r.stdout
