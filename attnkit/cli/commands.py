"""The table of attnkit's commands (name -> function). It loads the whole stack (torch, transformers, datasets):
:func:`attnkit.cli.main.main` imports it only when a command runs.
"""

from __future__ import annotations

from attnkit.cli.explain_commands import (
    cmd_explain,
    cmd_faithfulness,
    cmd_layer_weights,
    cmd_words,
)
from attnkit.cli.predict_commands import cmd_evaluate, cmd_predict
from attnkit.cli.train_commands import cmd_adapt, cmd_pretrain, cmd_sweep, cmd_train

COMMANDS = {
    "train": cmd_train, "sweep": cmd_sweep, "pretrain": cmd_pretrain, "adapt": cmd_adapt, "evaluate": cmd_evaluate, "predict": cmd_predict,
    "explain": cmd_explain, "words": cmd_words, "layer-weights": cmd_layer_weights, "faithfulness": cmd_faithfulness,
}
