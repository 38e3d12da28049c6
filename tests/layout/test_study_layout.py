"""The layout rules of ``studies/`` and ``benchmarks/``, read from their source.

* No ``sys.path`` edits, in code or in the code strings handed to subprocesses: they run from the repository root as
  modules (``python -m studies.ssaf.ssaf_table2``, ``python -m benchmarks.speed``).
* No ``attnkit.cli`` imported: the library's Python API is called, or the CLI run as a subprocess.
* A module in ``studies/<topic>/`` imports, of the repository's own code, only ``attnkit``, its own folder
  (``studies.<topic>``) and the shared modules at the top of ``studies/`` (``studies.stats``, ``studies.common``, ...);
  a top-level module of ``studies/`` imports only ``attnkit`` and ``studies``; ``benchmarks/`` imports only ``attnkit``
  and ``benchmarks``.
* No private (``_name``) name imported from another module.
* Every module imports without error.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted(p for top in ("studies", "benchmarks") for p in (ROOT / top).rglob("*.py"))
SYS_PATH_EDIT = re.compile(r"sys\.path\s*(\.\s*(insert|append|extend|remove|pop|clear)\b|\[[^\]]*\]\s*=|\+=|=(?!=))")


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def shared_study_modules() -> set[str]:
    return {f"studies.{p.stem}" for p in (ROOT / "studies").glob("*.py") if p.stem != "__init__"}


def imports(path: Path) -> list[tuple[str, list[str], int]]:
    """(module, names imported from it, line) for every import of the file, relative imports resolved, and every
    ``importlib.import_module("...")`` / ``__import__("...")`` with a literal name."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, [], node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                mod = ".".join(base + ([mod] if mod else []))
            out.append((mod, [a.name for a in node.names], node.lineno))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("import_module", "__import__"):
                out.append((node.args[0].value, [], node.lineno))
    return out


#: the bare names of the folders' own modules: imported as ``import ssaf_table2`` they were found through a sys.path edit
BARE = {p.stem for p in FILES} - {"__init__"}


def allowed(path: Path, mod: str, names: list[str]) -> bool:
    """Whether ``path`` may import ``mod`` (its names, for ``from studies import x``) under the folder rule."""
    if mod.split(".")[0] in BARE:
        return False
    targets = [f"{mod}.{n}" for n in names] if mod in ("studies", "benchmarks") and names else [mod]
    parts = path.relative_to(ROOT).parts
    for t in targets:
        top = t.split(".")[0]
        if top not in ("studies", "benchmarks"):
            continue  # attnkit, the standard library, third-party packages
        if parts[0] == "benchmarks":
            if top != "benchmarks":
                return False
        elif top != "studies":
            return False
        elif len(parts) > 2:  # a module of studies/<topic>/
            own = f"studies.{parts[1]}"
            if not (t == own or t.startswith(own + ".") or t in shared_study_modules()):
                return False
    return True


@pytest.mark.parametrize("path", FILES, ids=rel)
def test_no_sys_path_edit(path):
    hits = [f"{rel(path)}:{i}: {line.strip()}" for i, line in enumerate(path.read_text().splitlines(), 1)
            if SYS_PATH_EDIT.search(line)]
    assert not hits, "run as a module from the repository root (python -m ...) instead:\n" + "\n".join(hits)


@pytest.mark.parametrize("path", FILES, ids=rel)
def test_no_cli_imported_as_an_api(path):
    bad = [(m, n, line) for m, n, line in imports(path)
           if m == "attnkit.cli" or m.startswith("attnkit.cli.") or (m == "attnkit" and "cli" in n)]
    assert not bad, f"{rel(path)} imports the CLI (call the library, or run `python -m attnkit.cli` as a subprocess): {bad}"


@pytest.mark.parametrize("path", FILES, ids=rel)
def test_imports_follow_the_folder_rule(path):
    bad = [(m, n, line) for m, n, line in imports(path) if not allowed(path, m, n)]
    assert not bad, f"{rel(path)} imports outside its own folder and the shared modules: {bad}"


@pytest.mark.parametrize("path", FILES, ids=rel)
def test_no_private_name_imported_from_another_module(path):
    bad = [(m, n, line) for m, names, line in imports(path) for n in names
           if n.startswith("_") and not n.startswith("__")]
    tree = ast.parse(path.read_text())
    imported = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for a in node.names}
    bad += [(node.value.id, node.attr, node.lineno) for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in imported
            and node.attr.startswith("_") and not node.attr.startswith("__") and node.value.id not in ("sys", "os")]
    assert not bad, f"{rel(path)} reads private names of another module: {bad}"


def test_the_rule_is_checked_on_known_cases():
    study, bench, shared = ROOT / "studies/ssaf/x.py", ROOT / "benchmarks/x.py", ROOT / "studies/x.py"
    assert allowed(study, "studies.ssaf.ssaf_table2", []) and allowed(study, "studies.stats", [])
    assert allowed(study, "studies", ["figures"]) and allowed(study, "attnkit.training", [])
    assert not allowed(study, "studies.sesamebert.cells", []) and not allowed(study, "benchmarks.support", [])
    assert not allowed(study, "studies", ["sesamebert"]) and not allowed(study, "ssaf_table2", [])
    assert allowed(bench, "benchmarks.speed", []) and not allowed(bench, "studies.stats", [])
    assert allowed(shared, "studies.stats", []) and not allowed(shared, "benchmarks.speed", [])
    for line in ("sys.path.insert(0, str(ROOT))", "    sys.path[:0] = [x]", "sys.path.append(d)", "sys.path = []"):
        assert SYS_PATH_EDIT.search(line), line
    assert not SYS_PATH_EDIT.search("if str(ROOT) not in sys.path:") and not SYS_PATH_EDIT.search("sys.path == x")


def test_every_module_imports():
    mods = [module_name(p) for p in FILES]
    code = "import importlib, sys\nfor m in sys.argv[1:]:\n    importlib.import_module(m)\nprint('ok', len(sys.argv) - 1)"
    r = subprocess.run([sys.executable, "-c", code, *mods], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
