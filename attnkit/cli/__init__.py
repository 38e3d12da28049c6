"""The command line: :mod:`parser` (arguments, light), :mod:`main` (dispatch, one-line errors, the task listing),
:mod:`commands` (one function per command, loaded when a command runs)."""

from attnkit.cli.main import console_main, main
from attnkit.cli.parser import build_parser

__all__ = ["main", "console_main", "build_parser"]
