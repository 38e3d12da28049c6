"""The package layout: import arrows only point down the layers, with no cycle and no private name crossing modules.

Layers, bottom to top (a module may import its own layer and the ones below):
    errors, runfiles  <  attention  <  models  <  tasks  <  analysis  <  training  <  cli
Every import counts: ``import`` statements at module level or inside a function, and imports by name
(``importlib.import_module("attnkit...")``, ``__import__``). The root package is read too: it may import any layer (it
is the public face), only inside functions, and nothing may import it back. Imports inside functions are only the few
by which a light module (read by ``attnkit --help`` and ``attnkit tasks``, no torch) loads a torch-backed one when used.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import attnkit

ROOT = Path(attnkit.__file__).resolve().parent
LAYERS = ["errors", "runfiles", "attention", "models", "tasks", "analysis", "training", "cli"]
RANK = {"errors": 0, "runfiles": 0, "attention": 1, "models": 2, "tasks": 3, "analysis": 4, "training": 5, "cli": 6,
        "__main__": 7}  # (``python -m attnkit``: the command line's entry, above it)


def modules(root: Path) -> dict[str, Path]:
    """Dotted name -> file of every module of the package at ``root``."""
    out = {}
    for path in root.rglob("*.py"):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = modules(ROOT)


def resolve(module: str, level: int, here: str, is_package: bool) -> str:
    if level == 0:
        return module
    base = here.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def imports(name: str, mods: dict[str, Path] = MODULES) -> list[tuple[str, str | None, int, bool]]:
    """(imported attnkit module, imported name or None, line, inside a function) for every import in ``name``."""
    path = mods[name]
    tree = ast.parse(path.read_text(), str(path))
    inside: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inside.update(id(n) for n in ast.walk(fn) if n is not fn)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _imports_by_name(node):
            target = node.args[0].value
            if target.split(".")[0] == "attnkit":
                found.append((target, None, node.lineno, id(node) in inside))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "attnkit":
                    found.append((a.name, None, node.lineno, id(node) in inside))
        elif isinstance(node, ast.ImportFrom):
            target = resolve(node.module or "", node.level, name, path.name == "__init__.py")
            if target.split(".")[0] != "attnkit":
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                if sub in mods:  # `from attnkit.attention import kernels`: the submodule
                    found.append((sub, None, node.lineno, id(node) in inside))
                else:
                    found.append((target, a.name, node.lineno, id(node) in inside))
    return found


def _imports_by_name(node: ast.Call) -> bool:
    """``importlib.import_module("x")``, ``import_module("x")`` or ``__import__("x")`` with a constant name."""
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    return (name in ("import_module", "__import__") and bool(node.args) and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str))


def graph(mods: dict[str, Path] = MODULES) -> dict[str, set[str]]:
    return {m: {t for t, _, _, _ in imports(m, mods) if t != m} for m in mods}


def layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_the_package_folders_are_the_layers():
    top = {p.name for p in ROOT.iterdir() if not p.name.startswith("__")}
    assert {p.removesuffix(".py") for p in top} == set(LAYERS), top
    for d in ("attention", "models", "tasks", "analysis", "training", "cli"):
        assert (ROOT / d / "__init__.py").is_file()


def test_every_import_points_down_or_sideways():
    wrong = []
    for m, targets in graph().items():
        if layer(m) is None:  # attnkit/__init__.py: the lazy public names
            continue
        for t in targets:
            if layer(t) is None or RANK[layer(t)] > RANK[layer(m)]:
                wrong.append(f"{m} -> {t}")
    assert not wrong, "imports pointing up a layer:\n" + "\n".join(sorted(wrong))


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``g`` (strongly connected components of more than one module, Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return found


def test_nothing_imports_the_root_package_back():
    back = [f"{m}:{line}" for m in MODULES if m != "attnkit" for t, _, line, _ in imports(m) if t == "attnkit"]
    assert not back, "modules importing the root package (it imports them):\n" + "\n".join(back)


def test_no_import_cycle():
    assert not cycles(graph()), f"import cycles: {cycles(graph())}"


#: the only imports inside functions: a light module (what `--help` and `attnkit tasks` read) loading a torch-backed
#: one when it is used (module -> what it may import inside a function)
LAZY = {
    "attnkit": {"attnkit.attention.maps", "attnkit.attention.entmax", "attnkit.attention.flash", "attnkit.models.sparsify", "attnkit.models",
                "attnkit.attention.spec"},
    "attnkit.cli.main": {"attnkit.cli.commands", "attnkit.cli.outputs", "attnkit.cli.settings"},
    "attnkit.training.config": {"attnkit.attention.spec", "attnkit.attention.normalisers", "attnkit.models.pooling", "attnkit.models.mini_config"},
    "attnkit.training.adapt_config": {"attnkit.attention.spec", "attnkit.attention.normalisers"},
}
#: modules that must import no torch, transformers or datasets (checked in a fresh interpreter)
LIGHT = ["attnkit", "attnkit.cli", "attnkit.cli.main", "attnkit.cli.parser", "attnkit.training.config", "attnkit.training.adapt_config", "attnkit.tasks",
         "attnkit.attention.names", "attnkit.errors", "attnkit.runfiles"]


def test_no_import_inside_a_function_but_the_light_modules_lazy_ones_and_no_private_name_across_modules():
    inside, private = [], []
    for m in MODULES:
        for target, name, line, in_function in imports(m):
            if in_function and target not in LAZY.get(m, ()):
                inside.append(f"{m}:{line} imports {target}")
            if name is not None and name.startswith("_"):
                private.append(f"{m}:{line} imports {target}.{name}")
    assert not inside, "attnkit imports inside functions:\n" + "\n".join(inside)
    assert not private, "private names imported from another module:\n" + "\n".join(private)
    for m, allowed in LAZY.items():  # each lazy import is still there (else the entry goes) and points down
        found = {t for t, _, _, f in imports(m) if f}
        assert found == allowed, (m, found)


def test_the_light_modules_import_no_torch():
    code = "import sys, importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in LIGHT) + \
        "print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[]"


def test_the_checker_finds_a_cycle_made_by_a_function_level_import(tmp_path):
    """The checks above read the source: a cycle closed by an import inside a function, a relative import and a
    private name are all found in a package written here."""
    pkg = tmp_path / "attnkit"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("from .b import _helper\n")
    (pkg / "low" / "b.py").write_text("def _helper():\n    from attnkit.low import a\n    return a\n")
    (pkg / "low" / "c.py").write_text("import importlib\nB = importlib.import_module('attnkit.low.b')\n")
    mods = modules(pkg)
    assert set(mods) == {"attnkit", "attnkit.low", "attnkit.low.a", "attnkit.low.b", "attnkit.low.c"}
    assert imports("attnkit.low.c", mods) == [("attnkit.low.b", None, 2, False)]
    assert imports("attnkit.low.a", mods) == [("attnkit.low.b", "_helper", 1, False)]
    assert imports("attnkit.low.b", mods) == [("attnkit.low.a", None, 2, True)]
    assert cycles(graph(mods)) == [["attnkit.low.a", "attnkit.low.b"]]
