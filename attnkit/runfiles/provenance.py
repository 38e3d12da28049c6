"""What made a result or record: the git commit, whether the tree was dirty, and the attnkit, torch and transformers
versions."""

from __future__ import annotations

import subprocess
from pathlib import Path

#: the checkout attnkit runs from (an editable install: the repository)
ROOT = Path(__file__).resolve().parents[2]


def git_output(args: list[str], cwd: Path) -> str | None:
    """``git ARGS``' output in ``cwd``, stripped; None where git fails or is missing."""
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


#: changed files of these kinds leave a run's code as committed (a study's own records and tables change as it runs)
DATA_SUFFIXES = (".json", ".md", ".png", ".svg", ".txt", ".csv")


def _is_code(path: str) -> bool:
    """Whether a changed path (``git status --porcelain``'s, a rename as ``old -> new``) can change what runs."""
    return not path.split(" -> ")[-1].strip().strip('"').endswith(DATA_SUFFIXES)


def provenance(repo: str | Path | None = None) -> dict:
    """The git commit and dirty state of ``repo`` (default: attnkit's checkout) and the attnkit, torch and
    transformers versions. ``git_dirty``: any tracked file changed; ``git_dirty_code``: a changed file that can change
    what runs (not records, tables or figures: :data:`DATA_SUFFIXES`), so that a study whose own records file is being
    written still says its code was the commit's."""
    root = Path(repo) if repo is not None else ROOT
    commit = git_output(["rev-parse", "HEAD"], root)
    status = git_output(["status", "--porcelain", "--untracked-files=no"], root)
    out = {"git_commit": commit, "git_dirty": None if status is None else bool(status),
           "git_dirty_code": None if status is None else any(_is_code(line[3:]) for line in status.splitlines())}
    for name in ("attnkit", "torch", "transformers"):
        try:
            mod = __import__(name)
            out[f"{name}_version"] = getattr(mod, "__version__", None)
        except ImportError:
            out[f"{name}_version"] = None
    if out["attnkit_version"] is None:
        try:
            from importlib.metadata import version

            out["attnkit_version"] = version("attnkit")
        except Exception:  # noqa: BLE001 — not installed: leave it unknown
            pass
    return out
