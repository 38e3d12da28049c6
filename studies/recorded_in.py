"""What made the records that carry no provenance, read from git's history.

A record written since ``studies.stats.provenance`` exists names the commit that made it (``provenance.git_commit``,
and whether the tree was dirty). Older records cannot: the run is gone. What git still knows is written into them as
``recorded_in``, and nothing more is claimed:

- ``first_commit``: the first commit whose copy of the records file holds this record as it now reads (the run was
  made before it: by that commit's code or older, perhaps with uncommitted changes);
- ``head_at_start``: where the record has a ``date`` (and ``train_seconds``), the last commit made before the run
  started, i.e. the code the run most likely imported (the history has one line and its commit times only grow;
  a dirty tree cannot be ruled out).

``python -m studies.recorded_in`` fills ``recorded_in`` where a record has neither; ``--check`` says which lack both;
``--pairs`` lists, per records file, the (task, seed) groups whose runs started on commits that differ in
``attnkit/attention/`` (the attention maps and their kernels): the paired cells a code change could have moved.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from functools import lru_cache
from pathlib import Path

from attnkit.runfiles.atomic import write_text_atomic
from studies.stats import git_output, locked, read_records

ROOT = Path(__file__).resolve().parent.parent

FIELD = "recorded_in"
ATTENTION_CODE = "attnkit/attention"


def git(*args: str) -> str:
    """studies.stats' git runner in this repository ("" where git fails: a commit without the file, no git)."""
    return git_output(list(args), ROOT) or ""


def record_files() -> list[Path]:
    """Every committed records file under studies/: a JSON list of records (dicts)."""
    out = []
    for line in git("ls-files", "studies").splitlines():
        if line.endswith(".json"):
            data = json.loads((ROOT / line).read_text())
            if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
                out.append(ROOT / line)
    return out


def has_origin(rec: dict) -> bool:
    return bool((rec.get("provenance") or {}).get("git_commit")) or bool((rec.get(FIELD) or {}).get("first_commit"))


def canonical(rec: dict) -> str:
    return json.dumps({k: v for k, v in rec.items() if k != FIELD}, sort_keys=True)


def history(path: Path) -> list[tuple[str, str]]:
    """(commit, the file's path at that commit), oldest first, following renames (benchmarks/results -> studies/)."""
    rel = path.relative_to(ROOT).as_posix()
    out, commit = [], None
    for line in git("log", "--follow", "--name-status", "--format=C %H", "--", rel).splitlines():
        if line.startswith("C "):
            commit = line[2:]
        elif line.strip() and commit:
            parts = line.split("\t")
            if not parts[0].startswith("D"):
                out.append((commit, parts[-1]))
            commit = None
    return out[::-1]


def first_commits(path: Path) -> dict[str, str]:
    """canonical record -> the first commit whose copy of ``path`` holds it."""
    seen: dict[str, str] = {}
    for commit, rel in history(path):
        try:
            data = json.loads(git("show", f"{commit}:{rel}"))
        except json.JSONDecodeError:
            continue
        for rec in data if isinstance(data, list) else []:
            if isinstance(rec, dict):
                seen.setdefault(canonical(rec), commit)
    return seen


@lru_cache(maxsize=1)
def commit_times() -> list[tuple[dt.datetime, str]]:
    """(commit time, commit), oldest first, along the first-parent line."""
    rows = [line.split() for line in git("log", "--first-parent", "--format=%cI %H").splitlines()]
    return [(dt.datetime.fromisoformat(t), c) for t, c in rows][::-1]


def started(rec: dict) -> dt.datetime | None:
    """When the run started: its ``date`` (when it was written, in UTC) less ``train_seconds``, where it has them."""
    raw = rec.get("date")
    if not isinstance(raw, str):
        return None
    for fmt in ("%Y-%m-%d %H:%M UTC", "%Y-%m-%dT%H:%M:%SZ"):
        try:
            when = dt.datetime.strptime(raw, fmt).replace(tzinfo=dt.timezone.utc)
            break
        except ValueError:
            continue
    else:
        return None
    return when - dt.timedelta(seconds=float(rec.get("train_seconds") or 0))


def head_at(when: dt.datetime) -> str | None:
    before = [c for t, c in commit_times() if t <= when]
    return before[-1] if before else None


def fill(path: Path) -> int:
    """Write ``recorded_in`` into the records of ``path`` that have neither it nor a provenance; how many."""
    firsts = first_commits(path)
    with locked(path):
        recs = read_records(path)
        n = 0
        for rec in recs:
            if has_origin(rec):
                continue
            start = started(rec)
            rec[FIELD] = {"first_commit": firsts.get(canonical(rec)), "head_at_start": head_at(start) if start else None}
            n += rec[FIELD]["first_commit"] is not None
        if n:
            write_like(path, recs)
    return n


def write_like(path: Path, recs: list[dict]) -> None:
    """Write the records back in the file's own layout (its indent; keys sorted where they were, as attnkit sweep
    writes them), so that the change is the new field alone."""
    text = path.read_text()
    lines = text.splitlines()
    indent = len(lines[1]) - len(lines[1].lstrip()) if len(lines) > 1 else 1
    old = json.loads(text)
    keys = [k for k in old[0] if k != FIELD] if old else []
    write_text_atomic(path, json.dumps(recs, indent=indent, sort_keys=keys == sorted(keys)) + "\n")


def run_commit(rec: dict) -> str | None:
    """The commit a record's run most likely started on: its provenance, else ``recorded_in.head_at_start``."""
    return (rec.get("provenance") or {}).get("git_commit") or (rec.get(FIELD) or {}).get("head_at_start")


@lru_cache(maxsize=None)
def spans(a: str, b: str) -> bool:
    """Whether the attention code differs between two commits."""
    return a != b and bool(git("diff", "--name-only", a, b, "--", ATTENTION_CODE).strip())


def label(rec: dict) -> str:
    """A record's cell within its (task, seed) group: its method or variant, else MiniBERT's kind/mode/shape."""
    if rec.get("method") or rec.get("variant"):
        return str(rec.get("method") or rec.get("variant"))
    return "/".join(str(rec[k]) for k in ("kind", "mode", "layers", "heads", "head_mode", "attention") if k in rec) or "?"


def pair_report(path: Path) -> tuple[int, list[str]]:
    """How many (task, seed) groups the file has, and those whose runs started on commits that differ in the
    attention code (each with the methods/variants on each side)."""
    groups: dict[tuple, list[dict]] = {}
    for rec in read_records(path):
        if "task" in rec and "seed" in rec:
            groups.setdefault((rec["task"], rec.get("precision"), rec["seed"]), []).append(rec)
    bad = []
    for (task, _prec, seed), recs in sorted(groups.items(), key=str):
        commits = sorted({c for c in map(run_commit, recs) if c})
        if len(commits) > 1 and any(spans(commits[0], c) for c in commits[1:]):
            sides = {}
            for rec in recs:
                sides.setdefault((run_commit(rec) or "?")[:8], []).append(label(rec))
            bad.append(f"{task} seed {seed}: " + "; ".join(f"{c}: {', '.join(sorted(m))}" for c, m in sorted(sides.items())))
    return len(groups), bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="only list the records with neither provenance nor recorded_in")
    ap.add_argument("--pairs", action="store_true", help="list the (task, seed) groups whose runs span an attention-code change")
    a = ap.parse_args(argv)
    missing = 0
    for path in record_files():
        rel = path.relative_to(ROOT)
        if a.pairs:
            n, bad = pair_report(path)
            if n:
                print(f"{rel}: {len(bad)} of {n} (task, seed) groups span a change to {ATTENTION_CODE}/")
                for line in bad:
                    print(f"  {line}")
            continue
        if not a.check:
            print(f"{rel}: recorded_in written into {fill(path)} records")
        lacking = [r for r in read_records(path) if not has_origin(r)]
        missing += len(lacking)
        if lacking:
            print(f"{rel}: {len(lacking)} records name no commit")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
