"""Every committed study table and how it is rendered from its committed records (``tests/studies/test_study_tables.py``
re-renders each and compares it byte for byte with the committed file).

``python -m studies.tables`` re-renders them all in place (``--check``: only say which differ).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Callable

from attnkit.training.sweep import sweep_table  # a sweep's committed table is attnkit sweep's own

ROOT = Path(__file__).resolve().parent.parent


def script(name: str):
    """A study's module, by its dotted name (``studies.ssaf.ssaf_table2``)."""
    return importlib.import_module(name)


def _records(path: Path) -> list:
    return json.loads(path.read_text()) if path.is_file() else []


SSAF = "studies.ssaf.ssaf_table2"
FAITH = "studies.faithfulness.faithfulness"
SESAME = "studies.sesamebert.render"
SSAF_DIR = ROOT / "studies" / "ssaf" / "results"
FAITH_DIR = ROOT / "studies" / "faithfulness" / "results"
SESAME_DIR = ROOT / "studies" / "sesamebert" / "results"
MINI = "studies.minibert.render"
MINI_DIR = ROOT / "studies" / "minibert" / "results"
ADAPT = "studies.adapt.render"
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
                                                                    _records(FAITH_DIR / "faithfulness_positional.json"),
                                                                    _records(FAITH_DIR / "rationale.json")),
        SESAME_DIR / "sesame_paper.md": lambda: sp().render(_records(SESAME_DIR / "sesame_paper.json"),
                                                            _records(SESAME_DIR / "sesame_paper_holdout.json"), "fp32", None),
        SESAME_DIR / "sesame_paper_bf16.md": lambda: sp().render(_records(SESAME_DIR / "sesame_paper_bf16.json"),
                                                                 _records(SESAME_DIR / "sesame_paper_holdout_bf16.json"), "bf16",
                                                                 _records(SESAME_DIR / "sesame_paper.json")),
        SESAME_DIR / "sesame_paper_table3_bf16.md": lambda: sp().render_table3(_records(SESAME_DIR / "sesame_paper_table3_bf16.json"), "bf16"),
        SESAME_DIR / "sesame_paper_hans_bf16.md": lambda: sp().render_hans(_records(SESAME_DIR / "sesame_paper_hans_bf16.json"), "bf16"),
    }
    if (MINI_DIR / "minibert_study.md").is_file():  # MiniBERT's study, where its table is committed
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
