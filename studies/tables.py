"""Every committed study table and how it is rendered from its committed records (``tests/test_studies_render.py``
re-renders each and compares it byte for byte with the committed file).

``python -m studies.tables`` re-renders them all in place (``--check``: only say which differ).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from functools import lru_cache
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from attnkit.training.sweep import sweep_table  # noqa: E402  (a sweep's committed table is attnkit sweep's own)


@lru_cache(maxsize=None)
def script(path: str):
    """A study's runner, loaded as a module from its file (relative to the repository root)."""
    file = ROOT / path
    if str(file.parent) not in sys.path:
        sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(f"_study_{file.stem}", file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _records(path: Path) -> list:
    return json.loads(path.read_text()) if path.is_file() else []


SSAF = "studies/ssaf/ssaf_table2.py"
FAITH = "studies/faithfulness/faithfulness.py"
SESAME = "studies/sesamebert/sesame_paper.py"
SSAF_DIR = ROOT / "studies" / "ssaf" / "results"
FAITH_DIR = ROOT / "studies" / "faithfulness" / "results"
SESAME_DIR = ROOT / "studies" / "sesamebert" / "results"
MINI = "studies/minibert/render.py"
MINI_DIR = ROOT / "studies" / "minibert" / "results"
ADAPT = "studies/adapt/render.py"
ADAPT_DIR = ROOT / "studies" / "adapt"


def tables() -> dict[Path, Callable[[], str]]:
    """Committed table -> the function that renders it from its committed records."""
    t2 = lambda: script(SSAF)  # noqa: E731
    sp = lambda: script(SESAME)  # noqa: E731
    out = {
        SSAF_DIR / "ssaf_table2.md": lambda: t2().render(_records(SSAF_DIR / "ssaf_table2.json"),
                                                          _records(SSAF_DIR / "ssaf_table2_truncation.json") or {}),
        SSAF_DIR / "sweep_sentube_auto_paper" / "sweep.md": lambda: sweep_table(  # attnkit sweep's own table
            _records(SSAF_DIR / "sweep_sentube_auto_paper" / "sweep.json"), "sentube-auto: sparsegen-lin against lam"),
        FAITH_DIR / "faithfulness.md": lambda: script(FAITH).render(_records(FAITH_DIR / "faithfulness.json"),
                                                                    _records(FAITH_DIR / "faithfulness_positional.json")),
        SESAME_DIR / "sesame_paper.md": lambda: sp().render(_records(SESAME_DIR / "sesame_paper.json"),
                                                            _records(SESAME_DIR / "sesame_paper_holdout.json"), "fp32", None),
        SESAME_DIR / "sesame_paper_bf16.md": lambda: sp().render(_records(SESAME_DIR / "sesame_paper_bf16.json"),
                                                                 _records(SESAME_DIR / "sesame_paper_holdout_bf16.json"), "bf16",
                                                                 _records(SESAME_DIR / "sesame_paper.json")),
        SESAME_DIR / "sesame_paper_table3_bf16.md": lambda: sp().render_table3(_records(SESAME_DIR / "sesame_paper_table3_bf16.json"), "bf16"),
        SESAME_DIR / "sesame_paper_hans_bf16.md": lambda: sp().render_hans(_records(SESAME_DIR / "sesame_paper_hans_bf16.json"), "bf16"),
    }
    if (MINI_DIR / "minibert_study.md").is_file():  # MiniBERT's study (issue 39), once its first table is committed
        out[MINI_DIR / "minibert_study.md"] = lambda: script(MINI).render(_records(MINI_DIR / "records.json"))
    out[ADAPT_DIR / "results.md"] = lambda: script(ADAPT).render(ADAPT_DIR / "records.json")
    return out


def main(argv: list[str] | None = None) -> int:
    check = "--check" in (argv if argv is not None else sys.argv[1:])
    differ = []
    for path, render in tables().items():
        text = render()
        if path.read_text() != text:
            differ.append(path)
            if not check:
                path.write_text(text)
        print(f"{'differs' if path in differ else 'same'}: {path.relative_to(ROOT)}")
    return 1 if check and differ else 0


if __name__ == "__main__":
    sys.exit(main())
