"""The task registry: every dataset is a ``datasets.DatasetDict`` made by a loader registered here by name.

Every task gives splits among ``train``/``validation``/``test`` with the columns ``text``
(str), optionally ``text_pair`` (str), and ``label`` (int ``0..n-1``; ``-1`` for an
unlabelled test row). Use :func:`load_task` with a name from :func:`list_tasks`.

The loaders parse their files themselves (csv / json / a small PTB tree parser) so that a
malformed file raises :class:`DataFormatError` naming the file, the 1-based line and what
was expected; only then are the rows handed to ``datasets.Dataset.from_dict``.
The families live in their own modules (:mod:`attnkit.tasks.sst`, ``sentiment``, ``rotten_tomatoes``, ``files``, ``glue``, ``squad``);
importing :mod:`attnkit.tasks` registers them all.
"""

from __future__ import annotations

import inspect
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Sequence

from attnkit.errors import UserError
from attnkit.runfiles.json_files import home_path, path_problem
from attnkit.tasks.controls import say_controls

if TYPE_CHECKING:  # importing datasets takes a second; the CLI's `tasks` command does not need it
    import datasets

SPLIT_STEMS = {"train": "train", "validation": "dev", "test": "test"}  # split name -> file stem on disk
UNLABELLED = -1


@dataclass
class TaskData:
    """A loaded task: its splits, the label names (index -> name) and a one-line description."""

    name: str
    splits: datasets.DatasetDict
    label_names: list[str]
    description: str = ""
    metric: str = "accuracy"  # kind of metrics: accuracy | mcc | f1 | regression (see attnkit.tasks.metrics.task_metrics)
    submission: dict[str, str] | None = None  # split -> GLUE submission file name


class Example(NamedTuple):
    """One row before it goes into a ``datasets.Dataset``."""

    text: str
    label: int
    text_pair: str | None = None


TASKS: dict[str, Callable[..., TaskData]] = {}


#: task -> the folder under the data directory that holds its files (what `attnkit tasks` looks for)
TASK_FOLDERS: dict[str, str] = {}


def register_task(name: str, folder: str | None = None) -> Callable[[Callable[..., TaskData]], Callable[..., TaskData]]:
    """Decorator: add a loader ``fn(data_dir, **options) -> TaskData`` to :data:`TASKS` (its files under ``folder``)."""

    def deco(fn: Callable[..., TaskData]) -> Callable[..., TaskData]:
        TASKS[name] = fn
        if folder:
            TASK_FOLDERS[name] = folder
        return fn

    return deco


def list_tasks() -> list[str]:
    """The registered task names, sorted."""
    return sorted(TASKS)


def default_data_dir() -> Path | None:
    """``$ATTNKIT_DATA`` if set, else the first existing of ``./shared/data`` and ``../shared/data``."""
    env = os.environ.get("ATTNKIT_DATA")
    if env:
        return home_path(env, "$ATTNKIT_DATA")  # "~/data" from a .env file or a unit's Environment=: the home folder
    for candidate in (Path("shared/data"), Path("../shared/data")):
        if candidate.is_dir():
            return candidate.resolve()
    return None


def load_task(task: str, data_dir: str | os.PathLike | None = None, **options: Any) -> TaskData:
    """Load a registered task from ``data_dir`` (default: :func:`default_data_dir`).

    ``options`` go to the task's loader (e.g. ``text_column=`` for the generic csv/tsv/jsonl
    tasks); an option the loader does not take raises TypeError naming the ones it does.
    """
    if task not in TASKS:
        raise UserError(f"unknown task {task!r}; known tasks: {', '.join(list_tasks())}, and squad (span question "
                        "answering) and hans (attnkit evaluate only), read by their own loaders; attnkit tasks lists all")
    loader = TASKS[task]
    data_dir = home_path(data_dir, "--data-dir") if data_dir is not None else None  # "~/data": the home folder's
    if data_dir is not None and not Path(data_dir).is_dir():
        raise FileNotFoundError(f"data folder {data_dir} {path_problem(data_dir, 'folder')} (given as --data-dir for task {task})")
    directory = Path(data_dir) if data_dir is not None else default_data_dir()
    if data_dir is None and directory is not None and path_problem(directory, "folder") not in ("", "does not exist"):
        raise FileNotFoundError(f"$ATTNKIT_DATA {directory} {path_problem(directory, 'folder')}: set it to the folder that "
                                "holds the data sets, or pass --data-dir")
    try:
        inspect.signature(loader).bind(directory, **options)
    except TypeError:
        accepted = [p for p in inspect.signature(loader).parameters if p != "data_dir"]
        raise TypeError(
            f"task {task} does not take option(s) {sorted(options)}; it takes {accepted or 'no options'}"
        ) from None
    data = loader(directory, **options)
    if isinstance(data, TaskData):
        check_splits_differ(data.splits, lambda split: f"the {split} split of task {task}", f" (data folder {directory})")
        say_controls(data.splits, task)
    return data


def same_examples(a: Sequence, b: Sequence) -> bool:
    """Whether two splits' examples (hashable: ``(text, pair)``) are the same, as many times each, in any order."""
    return len(a) == len(b) and Counter(a) == Counter(b)


def check_splits_differ(splits, name: Callable[[str], str], where: str = "") -> None:
    """UserError where an evaluation split (validation, test, ...) holds the very examples of the train split (the same
    texts and pairs, as many times each, in any order: a copy, a link, the same file named twice): its scores would be
    scores on training examples. ``splits``: split -> a dataset with ``text`` (and ``text_pair``); ``name(split)``
    names a split in the message (its file, where there is one), ``where`` is said after the two."""
    if "train" not in splits:
        return
    train = splits["train"]

    def examples(ds) -> list:
        pairs = ds["text_pair"] if "text_pair" in ds.column_names else [None] * len(ds)
        return list(zip(ds["text"], pairs))

    train_examples = None
    for split, ds in splits.items():
        if split == "train" or len(ds) != len(train) or "text" not in ds.column_names:
            continue  # splits of other sizes differ: only a split as long as train is compared
        train_examples = train_examples if train_examples is not None else examples(train)
        if same_examples(examples(ds), train_examples):
            raise UserError(f"{name(split)} holds the same {len(ds)} examples as {name('train')}{where}: its scores would be "
                            "scores on training examples; give it examples of its own")


# ----------------------------------------------------------------------------- helpers: files
