"""Building and loading the compiled CPU kernel (``csrc/sparsemax_cpu.cpp``) without ever blocking another process.

A build whose record (the library's size and sha256, and what it was built from) matches is imported at once, with
no lock; otherwise the build runs under attnkit's own lock (flock: the OS releases it when its holder dies), after
clearing what an earlier, killed or damaged build left, and is recorded only once it succeeded.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import json
import os
import platform
import sys
from pathlib import Path

import torch

try:
    import fcntl
except ImportError:  # no flock (Windows, where this file can run as a checkpoint's remote code): builds take no lock
    fcntl = None

# Vectorise the reductions (reassociation) but keep inf/NaN semantics: -inf marks padding.
FLAGS = ["-O3", "-fno-math-errno", "-fno-trapping-math", "-fassociative-math", "-fno-signed-zeros", "-fopenmp-simd", "-march=native"]
# at::parallel_for is a header template: without -fopenmp its `omp parallel` is ignored and
# the kernel runs on one thread. The extension links libgomp.so.1, which resolves to the copy
# torch has already loaded, so both share one thread pool.
OPENMP = ["-fopenmp"]

#: in each build folder: attnkit's lock (flock, released by the OS when its holder dies) and the record of the
#: finished build (the library's size and sha256, and what it was built from), written after the build succeeded
_BUILD_LOCK = "attnkit-build.lock"
_BUILD_RECORD = "attnkit-build.json"



@functools.lru_cache(maxsize=None)
def _cpu_tag() -> str:
    flags = ""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((l for l in f if l.startswith(("flags", "Features"))), "")
    except OSError:
        pass
    return hashlib.md5((platform.machine() + flags).encode()).hexdigest()[:8]


def builds() -> tuple:
    """The builds tried in turn: (tag, extra compiler flags, extra linker flags)."""
    return ("omp", FLAGS + OPENMP, OPENMP), ("serial", FLAGS, [])


SOURCE = Path(__file__).with_name("csrc") / "sparsemax_cpu.cpp"


def build_name(tag: str) -> str:
    # -march=native: the build is only valid on this kind of CPU, so the cache name says which
    return f"attnkit_sparsemax_cpu_v21_{tag}_{_cpu_tag()}"


def _build_root() -> Path:
    """Where torch keeps extension builds: $TORCH_EXTENSIONS_DIR, else its per-user cache folder for this Python and
    accelerator (as ``torch.utils.cpp_extension`` names it)."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root:  # (set but empty: unset, as attnkit's own variables; it built into each working folder anew)
        path = os.path.expanduser(root)  # "~/ext" from a .env file: the home folder's, never a folder named ~
        if not path.startswith("~"):
            return Path(path)
        # "~name/ext" for a user this machine lacks: left as it is, it would build into ./~name of every working folder
        print(f"attnkit: TORCH_EXTENSIONS_DIR={root}: there is no user {path.split(os.sep)[0][1:]!r} on this machine; "
              "the sparse-attention kernel is kept in torch's own folder instead", file=sys.stderr, flush=True)
    from torch.utils.cpp_extension import get_default_build_root

    acc = (f"rocm{torch.version.hip.replace('.', '')}" if torch.version.hip else
           f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else "cpu")
    return Path(get_default_build_root()) / f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_{acc}"


def _build_key(src: Path, cflags: list[str], ldflags: list[str]) -> str:
    """What a build is made from (the source, the flags, torch and Python): a record with another key is stale."""
    h = hashlib.sha256(src.read_bytes())
    h.update(json.dumps([cflags, ldflags, torch.__version__, sys.implementation.cache_tag]).encode())
    return h.hexdigest()


def _build_state(folder: Path, name: str, key: str) -> str:
    """"ok" where the library in ``folder`` is, byte for byte, the one its build record describes; "stale" where
    there is no record (no build, an older attnkit's, or a build killed before its end) or one for other sources or
    flags; "damaged" where the record is for this build but the library differs (truncated, corrupt, missing)."""
    try:
        record = json.loads((folder / _BUILD_RECORD).read_text())
        if not isinstance(record, dict) or record.get("key") != key:
            return "stale"
    except (OSError, ValueError):
        return "stale"
    try:
        data = (folder / f"{name}.so").read_bytes()
    except OSError:
        return "damaged"
    ok = len(data) == record.get("size") and hashlib.sha256(data).hexdigest() == record.get("sha256")
    return "ok" if ok else "damaged"


def load_or_build(name: str, src: Path, cflags: list[str], ldflags: list[str]):
    """(the extension module, whether it was built now). A build whose record matches is imported at once, with no
    lock; else the build runs in its folder under attnkit's lock (a waiting process then finds it built), after
    clearing what an earlier build left (a stale ``lock`` of torch's, a damaged library), and is recorded."""
    folder = _build_root() / name
    key = _build_key(src, cflags, ldflags)
    if _build_state(folder, name, key) == "ok":
        return _import_built(name, folder / f"{name}.so"), False
    folder.mkdir(parents=True, exist_ok=True)
    with _build_lock(folder):
        state = _build_state(folder, name, key)
        if state == "ok":  # built by the process this one waited for
            return _import_built(name, folder / f"{name}.so"), False
        if state == "damaged":
            print(f"attnkit: the cached sparse-attention kernel {folder / (name + '.so')} is damaged (not the file its "
                  "build recorded); rebuilding it", file=sys.stderr, flush=True)
        _announce_build()
        for f in folder.iterdir():  # a fresh build: nothing an earlier (killed, damaged) one left is reused
            if f.name != _BUILD_LOCK and not f.is_dir():
                f.unlink(missing_ok=True)
        from torch.utils.cpp_extension import load

        ext = load(name=name, sources=[str(src)], extra_cflags=cflags, extra_ldflags=ldflags,
                   build_directory=str(folder), verbose=False)
        _write_record(folder, name, key)
        return ext, True


def _import_built(name: str, library: Path):
    """Import the extension module ``library`` (as torch's loader does once it has built it)."""
    spec = importlib.util.spec_from_file_location(name, library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def _build_lock(folder: Path):
    """Hold attnkit's lock on a build folder (flock: the OS releases it when its holder exits or is killed)."""
    if fcntl is None:
        yield
        return
    path = folder / _BUILD_LOCK
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"attnkit: waiting for another process that is building the sparse-attention kernel (it holds {path})...",
                  file=sys.stderr, flush=True)
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_record(folder: Path, name: str, key: str) -> None:
    """Record the library just built (size, sha256, key), on disk before the record, through a temporary file and
    a rename: a record names only a whole library."""
    with open(folder / f"{name}.so", "rb") as f:
        data = f.read()
        os.fsync(f.fileno())
    tmp = folder / f".{_BUILD_RECORD}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"key": key, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, folder / _BUILD_RECORD)


_announced = False


def _announce_build() -> None:
    """Say on stderr that the kernel is being compiled, once, where none of its builds is cached (a retried OpenMP
    build beside a cached one-thread build says nothing)."""
    global _announced
    if _announced:
        return
    try:
        built = any(_build_state(_build_root() / build_name(t), build_name(t), _build_key(SOURCE, c, l)) == "ok"
                    for t, c, l in builds())
    except OSError:
        built = False
    if not built:
        _announced = True
        print("attnkit: building the sparse-attention kernel (once per machine and torch version, about a minute)...",
              file=sys.stderr, flush=True)
