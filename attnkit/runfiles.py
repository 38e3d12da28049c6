"""What a run folder holds, and how its files are written: atomically, so a killed run never leaves half a file.

    <output-dir>/model/               the trained model (MODEL_DIR), with RUN_INFO beside its config.json
    <output-dir>/metrics.json         every metric the run printed (METRICS_FILE)
    <output-dir>/run_config.json      the settings, to resume or to compare
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: the folder of a run (`attnkit train` / `pretrain`) that holds its model
MODEL_DIR = "model"
#: every metric a run printed
METRICS_FILE = "metrics.json"
#: what training recorded beside a model (task, labels, max length, lemmatisation, ...)
RUN_INFO = "attnkit_run.json"


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """``text`` at ``path``, through a temporary file and ``os.replace``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json_atomic(path: str | os.PathLike, obj) -> None:
    """``obj`` as indented JSON at ``path``, through a temporary file and ``os.replace``."""
    write_text_atomic(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")
