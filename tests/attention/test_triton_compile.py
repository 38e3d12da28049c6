"""Every Triton kernel compiles for a GPU (sm_90) with the installed triton, checked where there is no GPU, and no
kernel holds a float literal that float32 cannot hold.

Triton's interpreter (how the map tests run the kernels here) executes them with numpy and checks no types; the real
compiler does, and types such a literal (``1e-300``) float64, which would turn a float32 loop's carried value into
float64 and fail to compile. Here every kernel is compiled by the installed triton (its frontend, then ptxas: no GPU
needed; in a subprocess, since the tests' conftest turns the interpreter on), and the kernels' source is read for such
literals, whatever triton version runs."""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import math
import os
import subprocess
import sys

import pytest

if importlib.util.find_spec("triton") is None:
    pytest.skip("triton is not installed (pip install -e '.[gpu]'): the Triton kernels are not compiled here", allow_module_level=True)

#: each kernel's launch signature as triton_maps launches it (P: a pointer to the rows' dtype)
KERNELS = {
    "_sparsemax_fwd": {"Z": "P", "P": "P", "stride": "i32", "n": "i32", "scale": "fp32"},
    "_sparsemax_bwd": {"P": "P", "G": "P", "GZ": "P", "stride": "i32", "n": "i32", "scale": "fp32"},
    "_entmax_fwd": {"Z": "P", "A": "P", "P": "P", "stride": "i32", "n": "i32"},
    "_entmax_bwd": {"P": "P", "G": "P", "A": "P", "GZ": "P", "GA": "P", "stride": "i32", "n": "i32"},
}
#: (BLOCK, FIXED15): the shortest and the longest rows, each entmax kernel both ways
CONFIGS = ((128, True), (8192, False))

_COMPILE_ALL = r"""
import inspect, json, sys
import triton, triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from attnkit.attention import triton_maps

kernels, configs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {"triton": triton.__version__, "results": {}}
for name, launch in kernels.items():
    fn = getattr(triton_maps, name)
    if not isinstance(fn, triton.runtime.jit.JITFunction):
        out["results"][name] = {"*": f"not a JITFunction: {type(fn).__name__}"}
        continue
    params = list(inspect.signature(fn.fn).parameters)
    for dtype in ("fp32", "fp64"):
        for block, fixed15 in configs:
            values = {"BLOCK": block, "ACC": tl.float64 if dtype == "fp64" else tl.float32,
                      "EPS": 1e-15 if dtype == "fp64" else 1e-7, "FIXED15": fixed15}
            sig = {p: (f"*{dtype}" if t == "P" else t) for p, t in launch.items()}
            sig.update({p: "constexpr" for p in params if p not in sig})
            constexprs = {(params.index(p),): values[p] for p in params if sig[p] == "constexpr"}
            try:
                k = triton.compile(ASTSource(fn, sig, constexprs), target=GPUTarget("cuda", 90, 32))
                res = "ok" if k.asm.get("ptx") else "no PTX"
            except Exception as e:  # noqa: BLE001 - reported, the test decides
                lines = [l for l in str(e).splitlines() if l.strip()]
                res = f"{type(e).__name__}: {lines[-1] if lines else ''}"
            out["results"].setdefault(name, {})[f"{dtype}, BLOCK {block}, FIXED15 {fixed15}"] = res
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def compiled():
    """Every kernel compiled for sm_90 by the installed triton, outside the interpreter: name -> config -> "ok" or the error."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    cfg = json.dumps([list(c) for c in CONFIGS])
    run = subprocess.run([sys.executable, "-c", _COMPILE_ALL, json.dumps(KERNELS), cfg], capture_output=True, text=True,
                         env=env, timeout=600)
    if run.returncode != 0:
        if "backends.nvidia" in run.stderr or "No module named 'triton.backends" in run.stderr:
            pytest.skip(f"triton's CUDA backend is not available here: {run.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"the compile script failed:\n{run.stderr[-3000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_every_launched_kernel_is_listed():
    from attnkit.attention import triton_maps

    src = inspect.getsource(triton_maps)
    launched = {n for n in vars(triton_maps) if f"{n}[(rows,)]" in src}
    assert launched == set(KERNELS)


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_each_kernel_compiles_for_hopper(compiled, name):
    res = compiled["results"][name]
    assert len(res) == 2 * len(CONFIGS), res
    bad = {cfg: r for cfg, r in res.items() if r != "ok"}
    if bad and all("ptxas" in r.lower() for r in bad.values()):
        pytest.skip(f"ptxas is not available here (the frontend compiled {name}): {bad}")
    assert not bad, f"{name} does not compile for sm_90 with triton {compiled['triton']}: {bad}"


def test_no_float_literal_in_a_kernel_that_float32_cannot_hold():
    """Triton types such a literal float64, which promotes whatever float32 value meets it (and a loop-carried one
    then fails to compile)."""
    from attnkit.attention import triton_maps

    tree = ast.parse(inspect.getsource(triton_maps))
    jitted = [f for f in tree.body if isinstance(f, ast.FunctionDef) and any("jit" in ast.unparse(d) for d in f.decorator_list)]
    assert len(jitted) >= len(KERNELS)
    bad = [(f.name, node.lineno, node.value) for f in jitted for node in ast.walk(f)
           if isinstance(node, ast.Constant) and isinstance(node.value, float) and math.isfinite(node.value)
           and node.value != 0 and not 1.2e-38 <= abs(node.value) <= 3.4e38]
    assert not bad, f"float literals outside float32's normal range in Triton kernels (name, line, value): {bad}"


_COMPILE_FLASH = r"""
import inspect, json, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from attnkit.attention import flash_triton as ft, flash_triton_backward as fb

# pointers in the inputs' dtype, float32 pointers, float32 scalars; every other argument an int32 (strides, sizes)
INPUT, F32P, F32 = {"Q", "K", "V", "OUT", "DO", "DQ", "DK", "DV"}, {"BIAS", "ALPHA", "TAU", "AUX", "DELTA", "DA"}, {"scale", "TOL"}
out = {"triton": triton.__version__, "results": {}}
for fixed, topk in json.loads(sys.argv[1]):
    pw = ft.powers(fixed)
    base = dict(HAS_BIAS=True, IEEE=False, BLOCK_M=64, BLOCK_N=64, BLOCK_D=64)
    for fn, consts in ((ft._fwd, dict(base, NEED_AUX=True, NBISECT=ft.NBISECT, MAXIT=ft.MAXIT, NWORDS=ft.NWORDS, **pw,
                                      COUNT=fixed == 2.0, TOPK=topk)),
                       (fb.bwd_kv, dict(base, KR=pw["KR"], KQ=pw["KQ"])),
                       (fb.bwd_q, dict(base, NEED_DALPHA=True, KQ=pw["KQ"]))):
        params = list(inspect.signature(fn.fn).parameters)
        # a constexpr left out would be compiled as an int32 argument, and fail for a reason that is the script's
        unset = sorted(p.name for p in fn.params if p.is_constexpr and p.name not in consts)
        if unset:
            sys.exit(f"{fn.fn.__name__}: the compile script gives no value to its constexpr {unset}")
        key = f"{fn.fn.__name__}, alpha {fixed}" + (f", TOPK {topk}" if fn is ft._fwd else "")
        if key in out["results"]:
            continue
        sig = {p: "constexpr" if p in consts else "*bf16" if p in INPUT else "*fp32" if p in F32P else "fp32" if p in F32
               else "*i32" if p == "COUNTS" else "i32" for p in params}
        try:
            k = triton.compile(ASTSource(fn, sig, {(params.index(p),): v for p, v in consts.items()}),
                               target=GPUTarget("cuda", 90, 32))
            res = "ok" if k.asm.get("ptx") else "no PTX"
        except Exception as e:  # noqa: BLE001 - reported, the test decides
            lines = [l for l in str(e).splitlines() if l.strip()]
            res = f"{type(e).__name__}: {lines[-1] if lines else ''}"
        out["results"][key] = res
print(json.dumps(out))
"""


@pytest.mark.slow
def test_flash_kernels_compile_for_hopper_with_every_power_mode():
    """The flash kernels (forward, dK/dV, dQ) compile for sm_90 in bf16 with the powers read at run time and with
    sparsemax's and 1.5-entmax's compiled in (flash_triton.powers), the forward with its kept largest scores and without
    (flash_triton.TOPK): the interpreter checks no types, ptxas does."""
    from attnkit.attention import flash_triton as ft

    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    modes = [[None, ft.TOPK], [2.0, ft.TOPK], [1.5, ft.TOPK], [None, 0]]
    run = subprocess.run([sys.executable, "-c", _COMPILE_FLASH, json.dumps(modes)], capture_output=True,
                         text=True, env=env, timeout=900)
    if run.returncode != 0:
        if "backends.nvidia" in run.stderr or "No module named 'triton.backends" in run.stderr:
            pytest.skip(f"triton's CUDA backend is not available here: {run.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"the compile script failed:\n{run.stderr[-3000:]}")
    res = json.loads(run.stdout.strip().splitlines()[-1])["results"]
    assert len(res) == 10, res
    bad = {cfg: r for cfg, r in res.items() if r != "ok"}
    if bad and all("ptxas" in r.lower() for r in bad.values()):
        pytest.skip(f"ptxas is not available here: {bad}")
    assert not bad, f"flash kernels that do not compile for sm_90: {bad}"
