"""Every committed study record names a commit: its own provenance, or what git's history says of it
(studies/recorded_in.py), and that history is read right."""

import datetime as dt
import json
import subprocess
from pathlib import Path

import pytest

from studies import recorded_in as ri

STUDIES = Path(__file__).resolve().parents[2] / "studies"


def committed_record_files():
    out = []
    for path in sorted(STUDIES.rglob("*.json")):
        data = json.loads(path.read_text())
        if isinstance(data, list) and data and all(isinstance(r, dict) for r in data):
            out.append(path)
    return out


def test_every_committed_record_names_a_commit():
    files = committed_record_files()
    assert len(files) >= 10  # the studies' records files are found
    lacking = {f"{p.relative_to(STUDIES)}": sum(not ri.has_origin(r) for r in json.loads(p.read_text())) for p in files}
    assert {k: v for k, v in lacking.items() if v} == {}, "run `python -m studies.recorded_in` (or give the records a provenance)"
    for p in files:
        for r in json.loads(p.read_text()):
            sha = (r.get("provenance") or {}).get("git_commit") or r[ri.FIELD]["first_commit"]
            assert len(sha) == 40 and int(sha, 16) >= 0


def test_started_is_the_date_less_the_training_time():
    rec = {"date": "2026-11-23 19:27 UTC", "train_seconds": 120.0}
    assert ri.started(rec) == dt.datetime(2026, 11, 23, 19, 25, tzinfo=dt.timezone.utc)
    assert ri.started({"date": "2026-11-26T08:33:27Z"}) == dt.datetime(2026, 11, 26, 8, 33, 27, tzinfo=dt.timezone.utc)
    assert ri.started({"seed": 1}) is None and ri.started({"date": "yesterday"}) is None


def test_head_at_start_is_the_last_commit_before(monkeypatch):
    t = lambda h: dt.datetime(2026, 11, 23, h, tzinfo=dt.timezone.utc)  # noqa: E731
    monkeypatch.setattr(ri, "commit_times", lambda: [(t(10), "a"), (t(12), "b"), (t(14), "c")])
    assert ri.head_at(t(13)) == "b" and ri.head_at(t(14)) == "c" and ri.head_at(t(9)) is None


def git(repo, *args):
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path, monkeypatch):
    git(tmp_path, "init", "-q")
    monkeypatch.setattr(ri, "ROOT", tmp_path)
    ri.commit_times.cache_clear()
    yield tmp_path
    ri.commit_times.cache_clear()


def test_fill_names_the_first_commit_that_holds_each_record_and_follows_a_move(repo):
    old = repo / "benchmarks" / "r.json"
    old.parent.mkdir()
    a = {"task": "t", "method": "softmax", "seed": 1}
    b = {"task": "t", "method": "SSAF", "seed": 1}
    c = {"task": "t", "method": "SSAF", "seed": 2, "provenance": {"git_commit": "f" * 40}}
    old.write_text(json.dumps([a], indent=1) + "\n")
    git(repo, "add", "-A"), git(repo, "commit", "-qm", "one")
    first = git(repo, "rev-parse", "HEAD")
    old.write_text(json.dumps([a, b], indent=1) + "\n")
    git(repo, "commit", "-qam", "two")
    second = git(repo, "rev-parse", "HEAD")
    new = repo / "studies" / "r.json"
    new.parent.mkdir()
    git(repo, "mv", "benchmarks/r.json", "studies/r.json"), git(repo, "commit", "-qm", "moved")
    new.write_text(json.dumps([a, b, c], indent=1) + "\n")
    git(repo, "commit", "-qam", "three")
    assert ri.fill(new) == 2
    recs = json.loads(new.read_text())
    assert [r.get(ri.FIELD, {}).get("first_commit") for r in recs] == [first, second, None]  # c has its provenance
    assert ri.fill(new) == 0  # once only
    assert [{k: v for k, v in r.items() if k != ri.FIELD} for r in recs] == [a, b, c]  # nothing else touched


def test_fill_keeps_the_files_layout(repo):
    path = repo / "sweep.json"
    recs = [{"dev": 0.5, "lam": "softmax", "seed": 1}, {"dev": 0.6, "lam": -1.0, "seed": 1}]
    path.write_text(json.dumps(recs, indent=2, sort_keys=True) + "\n")  # as attnkit sweep writes it
    git(repo, "add", "-A"), git(repo, "commit", "-qm", "one")
    ri.fill(path)
    filled = json.loads(path.read_text())
    assert path.read_text() == json.dumps(filled, indent=2, sort_keys=True) + "\n"


def test_pairs_report_the_groups_whose_runs_started_on_different_attention_code(repo):
    code = repo / "attnkit" / "attention" / "maps.py"
    code.parent.mkdir(parents=True)
    code.write_text("v = 1\n")
    (repo / "README").write_text("a\n")
    git(repo, "add", "-A"), git(repo, "commit", "-qm", "one")
    one = git(repo, "rev-parse", "HEAD")
    (repo / "README").write_text("b\n")
    git(repo, "commit", "-qam", "docs only")
    docs = git(repo, "rev-parse", "HEAD")
    code.write_text("v = 2\n")
    git(repo, "commit", "-qam", "the map changes")
    two = git(repo, "rev-parse", "HEAD")
    recs = [{"task": "t", "seed": 1, "method": "softmax", "provenance": {"git_commit": one}},
            {"task": "t", "seed": 1, "method": "SSAF", "provenance": {"git_commit": docs}},  # same attention code
            {"task": "t", "seed": 2, "method": "softmax", "provenance": {"git_commit": one}},
            {"task": "t", "seed": 2, "method": "SSAF", "provenance": {"git_commit": two}}]
    path = repo / "r.json"
    path.write_text(json.dumps(recs))
    n, spans = ri.pair_report(path)
    assert n == 2 and len(spans) == 1 and spans[0].startswith("t seed 2:") and "SSAF" in spans[0]
