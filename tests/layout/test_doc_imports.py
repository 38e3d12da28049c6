"""Every import in the Python examples of the README and docs/ works: an example that fails at its first line (a
name moved to another module) is caught here, without running the examples' models."""

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def attnkit_imports(code: str) -> list[tuple[str, str | None]]:
    """(module, name or None) of every attnkit import in ``code`` (a block that does not parse as a whole is read line
    by line: examples may hold elisions)."""
    try:
        trees = [ast.parse(code)]
    except SyntaxError:
        trees = []
        for line in code.splitlines():
            try:
                trees.append(ast.parse(line.strip()))
            except SyntaxError:
                continue
    out = []
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "attnkit":
                out += [(node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                out += [(a.name, None) for a in node.names if a.name.split(".")[0] == "attnkit"]
    return out


def test_the_check_finds_a_moved_name():
    assert attnkit_imports("from attnkit.models.build import load_tokenizer\nimport attnkit.models\n") == [
        ("attnkit.models.build", "load_tokenizer"), ("attnkit.models", None)]
    assert not hasattr(importlib.import_module("attnkit.models.build"), "no_such_name")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_attnkit_import_of_a_documented_example_works(doc):
    bad = []
    for block in python_blocks(doc.read_text()):
        for module, name in attnkit_imports(block):
            try:
                mod = importlib.import_module(module)
            except ImportError as e:
                bad.append(f"import {module}: {e}")
                continue
            if name is not None and not hasattr(mod, name):
                try:
                    importlib.import_module(f"{module}.{name}")  # a submodule
                except ImportError:
                    bad.append(f"from {module} import {name}")
    assert not bad, f"{doc.name}: {bad}"
