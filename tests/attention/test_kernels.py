"""How the compiled CPU kernel is built and run (its numerics are in test_maps.py)."""

import os
import subprocess
import sys

import pytest
import torch

from attnkit.attention import kernels


def test_kernel_runs_rows_on_all_threads():
    # at::parallel_for is a header template: built without OpenMP it silently runs on one
    # thread. The kernel must use every thread torch is allowed (when the OpenMP build runs).
    if kernels.backend() != "cpp" or "one thread" in kernels.backend_reason():
        pytest.skip(kernels.backend_reason())
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU here")
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert kernels.cpu_kernel().parallel_threads(64 * 1000) == 2
    finally:
        torch.set_num_threads(old)


def test_build_without_openmp_falls_back_to_one_thread(tmp_path):
    # A compiler that rejects the OpenMP flag still gets the compiled kernel, on one thread,
    # and says so; results are unchanged.
    if kernels.backend() != "cpp":
        pytest.skip(kernels.backend_reason())
    code = (
        "import torch\n"
        "from attnkit.attention import kernel_build, kernels\n"
        "kernel_build.OPENMP = ['-fno-such-openmp-flag']\n"
        "import attnkit\n"
        "p = attnkit.sparsemax(torch.tensor([[1.0, 0.5, -3.0]]))\n"
        "print(kernels.backend(), '|', kernels.backend_reason(), '|', p.tolist())\n"
        "print(kernels.cpu_kernel().parallel_threads(64 * 1000))\n"
    )
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(tmp_path))  # a fresh build cache
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    first, second = r.stdout.strip().splitlines()[-2:]
    backend, reason, p = (s.strip() for s in first.split("|"))
    assert backend == "cpp"
    assert "one thread" in reason and "no OpenMP" in reason
    assert p == "[[0.75, 0.25, 0.0]]"
    assert second == "1"
    # a fresh cache: the build announces itself, once, and says how long it took
    assert r.stderr.count("building the sparse-attention kernel") == 1 and "kernel built in" in r.stderr
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0 and "building the sparse-attention kernel" not in r.stderr  # cached now
