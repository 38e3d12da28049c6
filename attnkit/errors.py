"""The errors attnkit reports to a user as one line (the CLI prints them without a traceback; any other exception is
a bug and shows its traceback)."""

from __future__ import annotations

import os


class UserError(ValueError):
    """attnkit's refusal of the user's input or settings: printed as one line, no traceback. A ValueError, so that
    ``except ValueError`` in the user's code keeps catching attnkit's refusals."""


class DataFormatError(UserError):
    """Malformed input: the message names the file, the 1-based line and what was expected vs found."""

    def __init__(self, path: str | os.PathLike, line: int | None, problem: str):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{path}, line {line}" if line is not None else str(path)
        super().__init__(f"{where}: {problem}")

