"""Every output is written atomically: a command whose write fails (a file-size limit, a full disk, a quota, a
read-only folder) leaves every earlier output as it was, byte for byte, and says so in one line naming the user's file."""

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnkit.cli import main
from attnkit.errors import UserError
from attnkit.runfiles.atomic import atomic_path, output_batch, write_text_atomic
from helpers import snapshot, the_error, write_tiny_rte

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
LONG = " ".join(["the film was good but the plot was dull and the actor was not very fun"] * 4)  # ~60 tokens


def half_then_fail(monkeypatch, code: int) -> None:
    """Every temporary file attnkit writes gets half its text, then the write fails with ``code`` (a full disk...)."""
    real = Path.write_text

    def write_text(self, text, *a, **k):
        if ".tmp-" in self.name:
            real(self, text[: len(text) // 2], *a, **k)
            raise OSError(code, os.strerror(code))
        return real(self, text, *a, **k)

    monkeypatch.setattr(Path, "write_text", write_text)


@pytest.fixture(scope="module")
def run(tiny_bert, tmp_path_factory) -> tuple[Path, Path]:
    from helpers import write_tiny_sentiment

    root = tmp_path_factory.mktemp("atomic")
    data = write_tiny_sentiment(root / "data")
    out = root / "run"
    assert main(["train", "--task", "csv", "--data-dir", str(data), "--model", str(tiny_bert), "--output-dir", str(out),
                 "--attention", "softmax", "--batch-size", "16", "--max-length", "64", "--no-heatmap", "--max-steps", "2"]) == 0
    return out, data


def test_a_batch_that_fails_replaces_none_of_its_files(tmp_path):
    write_text_atomic(tmp_path / "a.json", "old a\n")
    write_text_atomic(tmp_path / "b.html", "old b\n")
    before = snapshot(tmp_path)
    with pytest.raises(UserError) as e, output_batch():
        write_text_atomic(tmp_path / "a.json", "new a\n")  # written in full, but not put in place
        assert (tmp_path / "a.json").read_text() == "old a\n"
        with atomic_path(tmp_path / "b.html") as tmp:
            tmp.write_text("half a pa")
            raise OSError(errno.ENOSPC, "No space left on device")
    assert str(e.value).startswith(f"cannot write {tmp_path / 'b.html'}: No space left on device")
    assert snapshot(tmp_path) == before  # no temporary left either
    with output_batch():
        write_text_atomic(tmp_path / "a.json", "new a\n")
        write_text_atomic(tmp_path / "b.html", "new b\n")
    assert snapshot(tmp_path) == {"a.json": b"new a\n", "b.html": b"new b\n"}


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_during_a_batchs_renames_lands_after_them(tmp_path, sig):
    """A kill between two renames left the new heatmap beside the old --stats: SIGTERM and Ctrl-C (SIGINT) are held
    while a batch renames its files, and land when every one is in place (only SIGKILL cannot be held)."""
    a, b = tmp_path / "a.png", tmp_path / "b.json"
    a.write_text("old a")
    b.write_text("old b")
    # Ctrl-C's handler set in the child: a shell starts a background job (and so this test's process) ignoring SIGINT
    code = (f"import os, signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
            f"from attnkit.runfiles.atomic import output_batch, write_text_atomic\nreal = os.replace\n"
            f"def replace(src, dst):\n    real(src, dst)\n    os.kill(os.getpid(), signal.{sig})  # after the first rename\n"
            f"os.replace = replace\nwith output_batch():\n    write_text_atomic({str(a)!r}, 'new a')\n"
            f"    write_text_atomic({str(b)!r}, 'new b')\nprint('not reached')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "not reached" not in r.stdout  # the signal did land, after the renames
    assert (a.read_text(), b.read_text()) == ("new a", "new b")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.png", "b.json"]


def test_explain_over_the_file_size_limit_keeps_the_earlier_page_and_heatmap(run, tmp_path):
    """The heatmap fits under ``ulimit -f``, the page does not: neither replaces the earlier one."""
    out, _ = run
    mine, measured = tmp_path / "mine", tmp_path / "measured"

    def explain(folder: Path, text: str) -> list[str]:
        return ["explain", "--model", str(out), text, "--layer", "1", "--head", "0", "--output", str(folder / "a.png"),
                "--stats", str(folder / "s.json"), "--html", str(folder / "view.html")]

    assert main(explain(mine, "a good film")) == 0  # the user's earlier outputs
    before = snapshot(mine)
    assert main(explain(measured, LONG)) == 0  # how big the failing command's files are
    png, stats, page = ((measured / n).stat().st_size for n in ("a.png", "s.json", "view.html"))
    assert max(png, stats) < page, (png, stats, page)
    limit = (max(png, stats) + page) // 2

    def cap():
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "attnkit.cli", *explain(mine, LONG)], capture_output=True, text=True, env=env,
                       preexec_fn=cap, timeout=600)
    assert r.returncode == 2, r.stderr[-2000:]
    the_error(r.stderr, f"cannot write {mine / 'view.html'}: File too large", "ulimit -f")
    assert snapshot(mine) == before  # the PNG and the stats were written in full, yet the earlier ones stay
    assert main(explain(mine, LONG)) == 0  # without the limit the same command replaces all three
    assert snapshot(mine) != before and (mine / "view.html").read_bytes() == (measured / "view.html").read_bytes()


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_evaluate_that_cannot_write_its_json_keeps_the_earlier_one(run, tmp_path, capsys, monkeypatch, code):
    out, data = run
    dest = tmp_path / "e" / "metrics.json"
    evaluate = ["evaluate", "--model", str(out), "--task", "csv", "--data-dir", str(data), "--split", "validation",
                "--max-length", "16", "--output", str(dest)]
    assert main(evaluate) == 0
    before = snapshot(dest.parent)
    half_then_fail(monkeypatch, code)
    assert main(evaluate) == 2
    the_error(capsys.readouterr().err, f"cannot write {dest}: {os.strerror(code)}", "free some space")
    assert snapshot(dest.parent) == before


def test_predict_that_cannot_write_its_json_lines_keeps_the_earlier_file(run, tmp_path, capsys, monkeypatch):
    out, _ = run
    dest = tmp_path / "p" / "predictions.jsonl"
    assert main(["predict", "--model", str(out), "a good film", "--output", str(dest)]) == 0
    before = snapshot(dest.parent)  # the file and the ledger that says attnkit wrote it
    half_then_fail(monkeypatch, errno.EFBIG)
    assert main(["predict", "--model", str(out), "a good film", "a dull plot", "--output", str(dest)]) == 2
    the_error(capsys.readouterr().err, f"cannot write {dest}: File too large")
    assert snapshot(dest.parent) == before
    monkeypatch.undo()
    assert main(["predict", "--model", str(out), "a good film", "a dull plot", "--output", str(dest)]) == 0  # still its own
    assert len(dest.read_text().splitlines()) == 2


def test_a_glue_submission_that_cannot_be_written_keeps_the_earlier_file(tiny_bert, tmp_path, capsys, monkeypatch):
    write_tiny_rte(tmp_path)
    run = tmp_path / "run"
    assert main(["train", "--task", "rte", "--data-dir", str(tmp_path), "--model", str(tiny_bert), "--output-dir", str(run),
                 "--batch-size", "8", "--max-length", "16", "--no-heatmap", "--max-steps", "1"]) == 0
    s = tmp_path / "s"
    predict = ["predict", "--model", str(run), "--task", "rte", "--data-dir", str(tmp_path), "--split", "test", "--output-dir", str(s)]
    assert main(predict) == 0
    before = snapshot(s)
    assert (s / "RTE.tsv").read_text().startswith("index\tprediction\n")
    half_then_fail(monkeypatch, errno.EROFS)
    assert main(predict) == 2
    the_error(capsys.readouterr().err, f"cannot write {s / 'RTE.tsv'}: Read-only file system", "writable folder")
    assert snapshot(s) == before


def test_a_write_removes_what_a_killed_write_of_the_same_file_left_and_nothing_else(tmp_path):
    """A process killed inside an atomic write leaves its temporary file; the next write of that file removes it
    (this host, process gone), never a live process's, another host's, or another file's."""
    import os
    import subprocess
    import sys

    from attnkit.runfiles import atomic
    from attnkit.runfiles.atomic import write_json_atomic

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    host = atomic._HOST
    left = tmp_path / f".out.json.tmp-{host}-{dead}-0"
    live = tmp_path / f".out.json.tmp-{host}-{os.getppid()}-3"
    other_host = tmp_path / f".out.json.tmp-elsewhere-{dead}-0"
    other_file = tmp_path / f".other.json.tmp-{host}-{dead}-0"
    for f in (left, live, other_host, other_file):
        f.write_text("half a file")
    write_json_atomic(tmp_path / "out.json", {"a": 1})
    assert not left.exists()
    assert live.exists() and other_host.exists() and other_file.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["out.json", live.name, other_host.name, other_file.name])


def test_a_symlinked_output_is_written_through_to_its_target_and_the_link_kept(tmp_path):
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    real.write_text("old\n")
    link.symlink_to(real)
    write_text_atomic(link, "new\n")
    assert link.is_symlink() and os.readlink(link) == str(real) and real.read_text() == "new\n"
    with output_batch():  # inside a batch too
        write_text_atomic(link, "newer\n")
    assert link.is_symlink() and real.read_text() == "newer\n"
    # a dangling link: the file is made where it points
    gone = tmp_path / "sub" / "made.txt"
    (tmp_path / "dangling").symlink_to(gone)
    write_text_atomic(tmp_path / "dangling", "x")
    assert (tmp_path / "dangling").is_symlink() and gone.read_text() == "x"


def test_a_link_to_standard_output_is_written_through_or_refused_never_replaced(tmp_path):
    """``--output /dev/stdout``: with standard output a file, the file gets the text; with a pipe, a one-line refusal;
    the link (as /dev/stdout is) stays a link either way."""
    link = tmp_path / "stdout"
    link.symlink_to("/proc/self/fd/1")
    code = ("import sys; from attnkit.runfiles.atomic import write_text_atomic\n"
            "try:\n write_text_atomic(sys.argv[1], 'hello\\n')\nexcept Exception as e:\n print('REFUSED', e, file=sys.stderr)\n")
    out = tmp_path / "out.txt"
    with open(out, "w") as f:
        subprocess.run([sys.executable, "-c", code, str(link)], stdout=f, check=True, cwd=REPO)
    assert out.read_text() == "hello\n" and link.is_symlink()
    piped = subprocess.run([sys.executable, "-c", code, str(link)], capture_output=True, text=True, check=True, cwd=REPO)
    assert "REFUSED" in piped.stderr and "device, pipe or socket" in piped.stderr and link.is_symlink()


def test_a_dash_is_refused_as_an_output_and_as_an_input(run, capsys, tmp_path, monkeypatch):
    out, _ = run
    monkeypatch.chdir(tmp_path)
    assert main(["predict", "--model", str(out), "good film", "--output", "-"]) == 2
    assert "--output -: attnkit writes a file, not standard output" in the_error(capsys.readouterr().err)
    assert not (tmp_path / "-").exists()
    (tmp_path / "-").write_text("a text in a file named -\n")
    assert main(["predict", "--model", str(out), "--file", "-"]) == 2
    assert "--file -: attnkit reads a file, not standard input" in the_error(capsys.readouterr().err)


def test_a_legal_name_too_long_for_the_temporary_suffix_is_written(tmp_path):
    """`--output o/<249 b's>.jsonl` (a legal 255-byte name) failed as "File name too long" naming attnkit's hidden
    temporary file (sweep 2026-11-27l L2): the temporary file of such a name is named after a short hash of it."""
    from attnkit.runfiles.atomic import write_json_atomic, write_text_atomic

    names = ["b" * n + ".jsonl" for n in (200, 240, 255 - len(".jsonl"))]
    for name in names:
        write_text_atomic(tmp_path / name, "x\n")
        assert (tmp_path / name).read_text() == "x\n"
        write_json_atomic(tmp_path / name, {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)  # no temporary file left



def test_a_failed_write_blames_the_disk_only_for_the_systems_errors():
    """A save that failed on a name that is not UTF-8 said "is the disk full, or the folder read-only?" and to run
    again, which failed the same way (sweep 2026-11-28x GE): the disk is named for the system's errors (and torch's
    stream writer's), the error's kind otherwise."""
    import errno

    from attnkit.runfiles.atomic import disk_hint, is_disk_failure

    assert is_disk_failure(OSError(errno.ENOSPC, "No space left on device"))
    assert is_disk_failure(RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0"))
    assert "disk full" in disk_hint(OSError(errno.EROFS, "Read-only file system"))
    bad = UnicodeEncodeError("utf-8", "run\udcff", 3, 4, "surrogates not allowed")
    assert not is_disk_failure(bad) and disk_hint(bad) == " (UnicodeEncodeError)"
