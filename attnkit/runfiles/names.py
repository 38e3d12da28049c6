"""The names of the files and folders attnkit writes into a run folder.
"""

from __future__ import annotations

#: the folder of a run (`attnkit train` / `pretrain`) that holds its model
MODEL_DIR = "model"

#: every metric a run printed
METRICS_FILE = "metrics.json"

#: what training recorded beside a model (task, labels, max length, lemmatisation, ...)
RUN_INFO = "attnkit_run.json"

#: the lock a process holds on a run folder while it writes there (released by the OS when the process dies)
LOCK_FILE = ".attnkit.lock"

#: the files a training run writes for itself: never replaced by another command's output, attnkit's own or not
RUN_FILES = frozenset({METRICS_FILE, "run_config.json", RUN_INFO, "curves.png", "curves.svg", "attention.png", "attention_grid.png",
                       "lam_learned.png", "lam_learned.svg", "alpha_learned.png", "alpha_learned.svg"})

#: a sweep's record of its cells (``attnkit sweep``), in the sweep's folder
SWEEP_RECORD = "sweep.json"

#: the files a sweep writes for itself in its folder: never replaced by another command's output
SWEEP_FILES = frozenset({SWEEP_RECORD, "sweep.md", "sweep.png", "sweep.svg", "sweep_attention.png"})

#: the key by which a JSON file says attnkit wrote it (its value: "attnkit <command>")
WRITTEN_BY = "written_by"

#: what attnkit writes into the PNG (tEXt "Software") and SVG (dc:creator) figures it draws
FIGURE_CREATOR = "attnkit"

#: attnkit's record of a run, written into its run folder when the run starts: only a folder that holds one is a run
#: (never a folder that merely has a model/ or checkpoint-* inside); it lists the checkpoints the run wrote
RUN_RECORD = ".attnkit-run.json"

#: what :func:`attnkit.models.checkpoint.save_checkpoint` wrote into a model folder (every file, its size and time): the
#: folder is replaced only while it holds exactly that, else it is moved aside whole
FOLDER_MANIFEST = ".attnkit-files.json"

#: the outputs attnkit wrote into a folder in formats that cannot carry a mark of their own (TSV, JSON lines, HTML)
OUTPUT_LEDGER = ".attnkit-outputs.json"

#: the folder an earlier run (or a folder attnkit must replace but did not write) is moved into, never deleted
REPLACED_PREFIX = ".replaced-"
