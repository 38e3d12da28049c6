"""Loading the compiled kernel never hangs or crashes a process: killed loads and builds, torch's stale lock file, a
damaged library, a wrong ATTNKIT_KERNEL and a first call under torch.compile, each in a fresh process with a timeout
and a build cache of its own."""

from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from attnkit.attention import kernels

#: one sparse map in a fresh process: its result against a sort-based sparsemax written here, and the path it ran on
CHECK = r"""
import json, torch, attnkit
from attnkit.attention import kernels
torch.manual_seed(0)
z = torch.randn(2, 3)
p = attnkit.sparsemax(z)
s = z.sort(-1, descending=True).values
c = s.cumsum(-1)
k = ((1 + torch.arange(1, 4) * s) > c).sum(-1, keepdim=True)
ref = ((z - (c.gather(-1, k - 1) - 1) / k)).clamp(min=0)
print(json.dumps({"backend": kernels.backend(), "close": torch.allclose(p, ref, atol=1e-6), "p": p.tolist()}))
"""
BUILDING = "attnkit: building the sparse-attention kernel"
#: a process that says when it starts loading the kernel (killed then, or a little later)
LOADER = r"""
import sys, torch, attnkit
from attnkit.attention import kernels
print("loading", flush=True)
kernels.cpu_kernel()
print("loaded", flush=True)
"""


def env_for(cache: Path, **extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "ATTNKIT_KERNEL"}
    env.update(TORCH_EXTENSIONS_DIR=str(cache), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", **extra)
    return env


def run(code: str, env: dict, timeout: float = 240) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter; a process still running after ``timeout`` seconds (a hang) fails the test."""
    try:
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"still running after {timeout} s (a hang); stderr so far: {(e.stderr or b'')[-2000:]!r}")


def check(env: dict, timeout: float = 240) -> tuple[dict, str]:
    """Run CHECK: (its result, its stderr); it must end well and compute sparsemax right."""
    r = run(CHECK, env, timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["close"], out
    return out, r.stderr


@pytest.fixture(scope="session")
def built_cache(tmp_path_factory) -> Path:
    """A build cache holding this machine's built kernel: a copy of the one this process loaded (built here first
    where there is none)."""
    ext = kernels.cpu_kernel()
    if ext is None or "one thread" in kernels.backend_reason():
        pytest.skip(f"the OpenMP build of the kernel is not available here: {kernels.backend_reason()}")
    built = Path(ext.__file__).parent
    cache = tmp_path_factory.mktemp("built-ext")
    shutil.copytree(built, cache / built.name, ignore=shutil.ignore_patterns("lock", "*.lock"))
    return cache


@pytest.fixture
def cache(built_cache, tmp_path) -> Path:
    """A copy of ``built_cache`` for one test."""
    shutil.copytree(built_cache, tmp_path / "ext")
    return tmp_path / "ext"


def build_folder(cache: Path) -> Path:
    """The OpenMP build's folder in ``cache`` (where a failed one is followed by the one-thread build's)."""
    (folder,) = [d for d in cache.iterdir() if d.is_dir() and "_omp_" in d.name]
    return folder


def library(cache: Path) -> Path:
    folder = build_folder(cache)
    return folder / f"{folder.name}.so"


def wait_for(stream, text: str, timeout: float) -> None:
    """Read ``stream`` (a pipe) until a line holding ``text``; fail after ``timeout`` seconds."""
    sel = selectors.DefaultSelector()
    sel.register(stream, selectors.EVENT_READ)
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if sel.select(timeout=max(0.0, end - time.monotonic())):
            line = stream.readline()
            if not line:
                pytest.fail(f"the process ended before saying {text!r}")
            if text in line:
                return
    pytest.fail(f"no {text!r} after {timeout} s")


def kill_group(proc: subprocess.Popen, sig: int) -> None:
    """Send ``sig`` to the process and what it started (a compiler), as `timeout` or a closed terminal does."""
    for s in (sig, signal.SIGKILL):  # then whatever outlived SIGTERM
        try:
            os.killpg(proc.pid, s)
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_a_load_killed_at_any_moment_leaves_nothing_that_blocks_the_next(cache, sig):
    env = env_for(cache)
    for delay in (0.0, 0.01, 0.05, 0.3):
        proc = subprocess.Popen([sys.executable, "-c", LOADER], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, env=env, start_new_session=True)
        try:
            wait_for(proc.stdout, "loading", 120)
            time.sleep(delay)
        finally:
            kill_group(proc, sig)
            proc.stdout.close()
    out, err = check(env, timeout=120)
    assert out["backend"] == "cpp" and BUILDING not in err, err


def test_a_stale_torch_lock_file_never_blocks(cache):
    # what torch's loader leaves when killed while holding its file baton: torch itself would wait on it for ever
    (build_folder(cache) / "lock").touch()
    out, err = check(env_for(cache), timeout=120)
    assert out["backend"] == "cpp" and BUILDING not in err, err


@pytest.mark.slow
def test_a_build_killed_midway_is_done_again_by_the_next_process(tmp_path):
    cache = tmp_path / "ext"
    env = env_for(cache)
    proc = subprocess.Popen([sys.executable, "-c", CHECK], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env, start_new_session=True)
    try:
        wait_for(proc.stderr, BUILDING, 240)
        time.sleep(3)  # the compiler is running
    finally:
        kill_group(proc, signal.SIGTERM)
        proc.stderr.close()
    folder = build_folder(cache)
    (folder / "lock").touch()  # the worst case: torch's baton left behind as well
    out, err = check(env, timeout=900)
    assert out["backend"] == "cpp", err
    assert "kernel built in" in err  # built again, in full, not loaded from what the killed build left
    out, err = check(env, timeout=120)
    assert out["backend"] == "cpp" and BUILDING not in err  # and recorded: the next process just loads it


def damage(lib: Path, how: str) -> None:
    data = lib.read_bytes()
    if how == "truncated":
        lib.write_bytes(data[: len(data) // 2])  # a full disk, a copy cut short
    else:
        mid = len(data) // 2
        lib.write_bytes(data[:mid] + bytes(b ^ 0xFF for b in data[mid: mid + 4096]) + data[mid + 4096:])


@pytest.mark.parametrize("how", ["truncated", "corrupt"])
def test_a_damaged_library_is_never_loaded_without_a_compiler_the_torch_path_runs(cache, how):
    lib = library(cache)
    damage(lib, how)
    # no ninja on PATH: the rebuild fails at once, and the pure-torch maps run
    out, err = check(env_for(cache, PATH=str(cache / "no-programs")))
    assert out["backend"] == "torch"
    lines = err.strip().splitlines()
    assert sum("is damaged" in l for l in lines) == 1 and str(lib) in err, err
    assert any("using the pure-torch sparse maps" in l for l in lines), err


@pytest.mark.slow
def test_a_truncated_library_is_rebuilt(cache):
    lib = library(cache)
    size = lib.stat().st_size
    damage(lib, "truncated")
    out, err = check(env_for(cache), timeout=900)
    assert out["backend"] == "cpp"
    assert sum("is damaged" in l for l in err.splitlines()) == 1 and "kernel built in" in err, err
    assert lib.stat().st_size == size


def test_a_wrong_attnkit_kernel_is_refused_in_one_line_naming_it(tmp_path):
    code = ("import torch, attnkit\n"  # importing works: the choice is checked when first consulted
            "from attnkit.errors import UserError\n"
            "try:\n    attnkit.sparsemax(torch.randn(2, 3))\nexcept UserError as e:\n    print('refused:', e)\n")
    r = run(code, env_for(tmp_path / "ext", ATTNKIT_KERNEL="toch"), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    (line,) = r.stdout.strip().splitlines()
    assert line == "refused: ATTNKIT_KERNEL='toch' is not a kernel choice: expected auto, torch or triton (any case)"
    assert not (tmp_path / "ext").exists()  # nothing was built or loaded


def test_every_use_of_the_kernel_choice_checks_it(monkeypatch):
    import torch

    import attnkit
    from attnkit.errors import UserError

    monkeypatch.setattr(kernels, "MODE", "cpp")
    z = torch.randn(2, 3)
    for use in (kernels.backend, kernels.backend_reason, lambda: kernels.kernel_applies(z), lambda: kernels.triton_applies(z),
                lambda: attnkit.sparsemax(z), lambda: attnkit.entmax15(z)):
        with pytest.raises(UserError, match="^ATTNKIT_KERNEL='cpp' is not a kernel choice"):
            use()


def test_attnkit_kernel_is_read_in_any_case(tmp_path):
    code = "import torch, attnkit\nfrom attnkit.attention import kernels\nattnkit.sparsemax(torch.randn(2, 3))\nprint(kernels.backend())\n"
    r = run(code, env_for(tmp_path / "ext", ATTNKIT_KERNEL="Torch"), timeout=120)
    assert r.returncode == 0 and r.stdout.split() == ["torch"], r.stderr[-2000:]


def test_attnkit_kernel_triton_without_triton_is_refused(tmp_path):
    code = ("import sys\nsys.modules['triton'] = None  # triton not importable\n"
            "import torch, attnkit\nfrom attnkit.errors import UserError\n"
            "try:\n    attnkit.sparsemax(torch.randn(2, 3))\nexcept UserError as e:\n    print('refused:', e)\n")
    r = run(code, env_for(tmp_path / "ext", ATTNKIT_KERNEL="triton"), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    (line,) = r.stdout.strip().splitlines()
    assert line.startswith("refused: ATTNKIT_KERNEL=triton") and "triton" in line.split(":", 2)[2], line


def test_attnkit_kernel_triton_without_a_gpu_or_the_interpreter_is_refused(tmp_path):
    """Triton's kernels run on a CUDA GPU or under TRITON_INTERPRET=1: without either it crashed inside Triton
    ("0 active drivers"); with the interpreter it runs (how the tests run it)."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: Triton runs")
    code = ("import torch, attnkit\nfrom attnkit.errors import UserError\n"
            "try:\n    print(attnkit.sparsemax(torch.tensor([[3.0, 1.0, 0.0]])).tolist())\nexcept UserError as e:\n    print('refused:', e)\n")
    env = env_for(tmp_path / "ext", ATTNKIT_KERNEL="triton")
    env.pop("TRITON_INTERPRET", None)
    r = run(code, env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == ("refused: ATTNKIT_KERNEL=triton, but this machine has no CUDA GPU: Triton's kernels run on "
                                "one, or on the CPU under TRITON_INTERPRET=1 (slow: for testing); set ATTNKIT_KERNEL=auto")
    r = run(code, env | {"TRITON_INTERPRET": "1"}, timeout=240)
    assert r.returncode == 0 and r.stdout.strip() == "[[1.0, 0.0, 0.0]]", r.stderr[-2000:]


@pytest.mark.slow
def test_the_cli_says_a_wrong_attnkit_kernel_in_one_line(tiny_bert, tiny_task, tmp_path):
    cmd = [sys.executable, "-c", "import sys; from attnkit.cli.main import main; sys.exit(main())", "train", "--model",
           str(tiny_bert), "--task", "csv", "--data-dir", str(tiny_task), "--attention", "sparsemax", "--max-steps", "1",
           "--max-length", "16", "--output-dir", str(tmp_path / "run")]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env_for(tmp_path / "ext", ATTNKIT_KERNEL="toch"), timeout=300)
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr and [l for l in r.stderr.splitlines() if "ATTNKIT_KERNEL" in l] == [
        "attnkit train: error: ATTNKIT_KERNEL='toch' is not a kernel choice: expected auto, torch or triton (any case)"], r.stderr[-3000:]


COMPILED_FIRST = r"""
import json, torch, attnkit
from attnkit.attention import kernels
torch.manual_seed(0)
z = torch.randn(4, 7) * 3
p = torch.compile(attnkit.sparsemax, fullgraph=True)(z)  # the first use of the maps in this process
e = torch.compile(attnkit.entmax15, fullgraph=True)(z)
print(json.dumps({"backend": kernels.backend(), "sparsemax": torch.allclose(p, attnkit.sparsemax(z), atol=1e-6),
                  "entmax15": torch.allclose(e, attnkit.entmax15(z), atol=1e-6)}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["auto", "torch"])
def test_torch_compile_fullgraph_as_the_first_use_matches_eager(cache, mode):
    r = run(COMPILED_FIRST, env_for(cache, ATTNKIT_KERNEL=mode), timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out == {"backend": "cpp" if mode == "auto" else "torch", "sparsemax": True, "entmax15": True}, (out, r.stderr[-2000:])


def test_an_empty_torch_extensions_dir_is_unset(monkeypatch, tmp_path):
    """`TORCH_EXTENSIONS_DIR=` (set, empty) built the kernel into the working folder, and anew in every other one
    (sweep 2026-11-28t CE): empty is unset, as attnkit's own variables are; a folder named is used."""
    from attnkit.attention import kernel_build

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    default = kernel_build._build_root()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "")
    assert kernel_build._build_root() == default and default.is_absolute()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert kernel_build._build_root() == tmp_path
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "~/ext")  # (a .env line: no shell expanded it; a folder named ~: -28u DC)
    assert kernel_build._build_root() == Path.home() / "ext"
    # a user this machine lacks: torch's own folder, said (it built into ./~nouser of each working folder: -28v EA)


def test_an_unknown_users_torch_extensions_dir_is_torchs_own_folder(monkeypatch, capsys):
    """`TORCH_EXTENSIONS_DIR=~nouser/ext` (no such user) stayed a relative path: every working folder got a ./~nouser
    tree and a rebuild (sweep 2026-11-28v EA). torch's own folder is used, and a line says why."""
    from attnkit.attention import kernel_build

    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    default = kernel_build._build_root()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", "~attnkit-no-such-user/ext")
    assert kernel_build._build_root() == default
    assert "TORCH_EXTENSIONS_DIR=~attnkit-no-such-user/ext: there is no user 'attnkit-no-such-user'" in capsys.readouterr().err


#: a saved attnkit model loaded through its own code (trust_remote_code) before attnkit is imported, then attnkit's maps
REMOTE_FIRST = r"""
import json, sys, torch
from transformers import AutoModelForSequenceClassification
m = AutoModelForSequenceClassification.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
assert "attnkit" not in sys.modules
import attnkit
from attnkit.attention import kernels
torch.manual_seed(0)
z = torch.randn(2, 3)
p, q = attnkit.sparsemax(z), attnkit.entmax15(z.double())
s = z.sort(-1, descending=True).values
c = s.cumsum(-1)
k = ((1 + torch.arange(1, 4) * s) > c).sum(-1, keepdim=True)
ref = ((z - (c.gather(-1, k - 1) - 1) / k)).clamp(min=0)
with torch.no_grad():
    logits = m(input_ids=torch.tensor([[2, 5, 6, 7, 3]])).logits
print(json.dumps({"backend": kernels.backend(), "close": torch.allclose(p, ref, atol=1e-6),
                  "sums": torch.allclose(q.sum(-1), torch.ones(2, dtype=torch.float64)), "logits": logits.tolist()}))
"""


def test_attnkit_imported_after_a_checkpoints_own_code_runs_its_kernel(cache, tmp_path):
    """A checkpoint loaded with trust_remote_code before `import attnkit` defined the kernel's custom ops with its own
    copy of kernels.py, which has no kernel: every attnkit map in that process then failed ('NoneType' object has no
    attribute 'forward'; sweep 2026-11-28v EC). The ops find attnkit's kernel whichever copy defined them."""
    import attnkit
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     max_position_embeddings=16, num_labels=2)
    model = attnkit.sparsify(BertForSequenceClassification(cfg).eval(), "sparsemax")
    model.save_pretrained(tmp_path / "m")
    with torch.no_grad():
        want = model(input_ids=torch.tensor([[2, 5, 6, 7, 3]])).logits
    r = subprocess.run([sys.executable, "-c", REMOTE_FIRST, str(tmp_path / "m")], capture_output=True, text=True,
                       env=env_for(cache, HF_HOME=str(tmp_path / "hf")), timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["backend"] == "cpp" and out["close"] and out["sums"], out
    torch.testing.assert_close(torch.tensor(out["logits"]), want, rtol=1e-5, atol=1e-6)
