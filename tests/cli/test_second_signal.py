"""A process stopping on Ctrl-C or SIGTERM stays deaf to more of them while it says so and exits: a second SIGINT
(a second Ctrl-C, or the one `timeout` passes on) reached tqdm's exit handler and printed a traceback after
"attnkit faithfulness: interrupted." (sweep s25)."""

import importlib
import io
import signal
import sys

cli_main = importlib.import_module("attnkit.cli.main")  # (attnkit.cli.main, the attribute, is the function)


def test_the_command_stopped_by_a_signal_ignores_more_of_them_as_it_exits(monkeypatch):
    before = signal.getsignal(signal.SIGINT)
    try:
        monkeypatch.setattr(cli_main, "main", lambda argv=None: 130)
        assert cli_main.console_main() == 130
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN and signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    monkeypatch.setattr(cli_main, "main", lambda argv=None: 0)
    assert cli_main.console_main() == 0
    assert signal.getsignal(signal.SIGINT) is before  # a command that ended of itself leaves the handlers alone


def test_the_interrupted_line_is_said_with_signals_held_and_they_are_put_back(monkeypatch):
    """While the one line is printed Ctrl-C is ignored; main, called from Python, puts the handler back after."""
    before = signal.getsignal(signal.SIGINT)
    seen = []

    def interrupted(a, restore):
        raise KeyboardInterrupt

    class Recording(io.StringIO):
        def write(self, s):
            seen.append(signal.getsignal(signal.SIGINT))
            return super().write(s)

    monkeypatch.setattr(cli_main, "_run_command", interrupted)
    monkeypatch.setattr(sys, "stderr", Recording())
    assert cli_main.main(["predict", "--model", "nothing", "a text"]) == 130
    assert "attnkit predict: interrupted." in sys.stderr.getvalue()
    assert seen and all(h is signal.SIG_IGN for h in seen), seen
    assert signal.getsignal(signal.SIGINT) is before
