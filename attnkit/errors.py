"""The errors attnkit reports to a user as one line (the CLI prints them without a traceback)."""

from __future__ import annotations

import os


class UserError(Exception):
    """An error in the user's input: printed as one line, no traceback."""


class DataFormatError(ValueError):
    """Malformed input: the message names the file, the 1-based line and what was expected vs found."""

    def __init__(self, path: str | os.PathLike, line: int | None, problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")

