"""The attnkit command line: every command's arguments (``attnkit <command> --help``).

Light on purpose: building the parser imports no torch, so ``--help`` answers at once."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import sys

from attnkit.attention.names import KINDS, NormaliserChoices
from attnkit.training.config import DEFAULT_MINI_LR, DEFAULT_VOCAB, HEAD_MODES, SCORE_SCALES, PretrainConfig, TrainConfig
from attnkit.training.adapt_config import AdaptConfig
from attnkit.cli.help_texts import ADAPT_DOC, DESCRIPTION, FAITHFULNESS_DOC, PRETRAIN_DOC, WORDS_DOC
from attnkit.training.recipes import RECIPES, recipe_options


class Parser(argparse.ArgumentParser):
    """argparse, reading negative numbers as a user writes them: ``--lam -1e-3``, ``--lam -inf``, ``--lams -8 -4``
    (argparse alone takes ``-1e-3`` and ``-inf`` for options). No attnkit option looks like a negative number."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*([eE][-+]?\d+)?|\.\d+([eE][-+]?\d+)?|inf(inity)?|nan)$", re.I)
        self.register("action", None, StoreOnce)  # an option with a value, given twice, is refused (StoreOnce)
        self.register("action", "store", StoreOnce)
        self.given: dict[str, tuple[str, object]] = {}

    def parse_args(self, args=None, namespace=None):
        a, rest = self.parse_known_args(args, namespace)
        if rest:  # (argparse's own words, with why where a command takes texts: they were split by an option)
            words = not any(r.startswith("-") for r in rest)
            hint = (" (the texts go together: an option between two texts ends them; give every text after the "
                    "options, or after --)" if words and isinstance(getattr(a, "texts", None), list) else
                    f" ({a.command} reads one text: put quotes around a text of several words)"
                    if words and isinstance(getattr(a, "text", None), str) else "")
            self.error(f"unrecognized arguments: {' '.join(rest)}{hint}")
        return a

    def parse_known_args(self, args=None, namespace=None):
        self.given = {}
        self._check_dashes(args)
        namespace, rest = super().parse_known_args(args, namespace)
        for dest in PATH_OPTIONS:  # an unset shell variable (--output "$OUT") would silently mean the default
            value = getattr(namespace, dest, None)
            if value == "" or (isinstance(value, list) and "" in value):
                self.error(f"argument --{dest.replace('_', '-')}: an empty path (an unset shell variable?): expected a "
                           "file or folder name")
            for v in value if isinstance(value, list) else [value]:
                bad = [c for c in v or "" if "\udc80" <= c <= "\udcff"]  # the bytes of a name that is not UTF-8
                if bad:  # (attnkit records its paths in JSON and its files' names: the run would fail at its end)
                    self.error(f"argument --{dest.replace('_', '-')}: {os.fsencode(v).decode('utf-8', 'backslashreplace')} "
                               f"is not valid UTF-8 (the byte {ord(bad[0]) - 0xdc00:#x}): expected a name in UTF-8; "
                               "rename it")
        return namespace, rest


    def _check_dashes(self, args) -> None:
        """An option typed with a typographic dash (``—max-length 16``: a word processor or web page turned ``--``
        into an em dash) is refused naming it: ``predict`` took it, and its value, for two more texts to label."""
        for arg in args if args is not None else sys.argv[1:]:
            if arg == "--":
                return
            if not isinstance(arg, str) or not arg or arg[0] not in TYPOGRAPHIC_DASHES:
                continue
            name = "--" + arg.lstrip(TYPOGRAPHIC_DASHES + "-").split("=", 1)[0]
            if name in _option_strings(self):
                self.error(f"{arg.split('=', 1)[0]} is the option {name} typed with a {arg[0]!r} (U+{ord(arg[0]):04X}, "
                           "a typographic dash, as a word processor or web page writes --): type it with two hyphens")


#: dashes a text editor or web page puts for a typed "-" or "--" (en and em dash, minus sign, ...)
TYPOGRAPHIC_DASHES = "\u2010\u2011\u2012\u2013\u2014\u2015\u2212\ufe58\ufe63\uff0d"


def _option_strings(parser: argparse.ArgumentParser) -> set[str]:
    """Every option string of ``parser`` and its commands' parsers."""
    found = set()
    for action in parser._actions:
        found.update(action.option_strings)
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _option_strings(sub)
    return found


class StoreOnce(argparse._StoreAction):
    """argparse's store action, refusing an option given twice: argparse keeps the last value without a word
    (``predict --file a.txt --file b.txt`` labelled b.txt alone). The repeatable options say so (action="append")."""

    def __call__(self, parser, namespace, values, option_string=None):
        _once(parser, self.dest, option_string, values, lambda earlier: (
            f"given twice ({earlier[0]} {_shown(earlier[1])}, then {option_string} {_shown(values)}): give it once"))
        super().__call__(parser, namespace, values, option_string)


class BooleanOnce(argparse.BooleanOptionalAction):
    """``--x`` / ``--no-x``, refusing both (or either twice): argparse keeps the last without a word (``--se --no-se``
    trained without SE)."""

    def __call__(self, parser, namespace, values, option_string=None):
        _once(parser, self.dest, option_string, None, lambda earlier: (
            f"given after {earlier[0]}: give one of {' / '.join(self.option_strings)} once"))
        super().__call__(parser, namespace, values, option_string)


def _once(parser, dest: str, option_string, values, refusal) -> None:
    """Record that ``dest`` was given (as ``option_string``, ``values``); where it was already, the parser's error
    with ``refusal(the earlier (option, values))``."""
    earlier = parser.given.get(dest)
    if earlier is not None:
        parser.error(f"argument {option_string}: {refusal(earlier)}")
    parser.given[dest] = (option_string, values)


def _shown(values) -> str:
    return " ".join(map(str, values)) if isinstance(values, list) else str(values)


#: the options that name a file or folder: an empty value is refused
PATH_OPTIONS = ("output", "output_dir", "stats", "html", "plot", "file", "data_dir", "model", "teacher", "text_file", "json")


#: what every --data-dir is, and where it is looked for when not given (tasks.registry.default_data_dir)
DATA_DIR_HELP = "the folder that holds the data sets (default: $ATTNKIT_DATA, else ./shared/data, else ../shared/data)"

def layers_text(text: str) -> str:
    """A --sparse-layers value as it is recorded in the run's settings: without spaces, in lower case (``' last'``
    and ``'Last'`` are ``'last'``, so a rerun with the same layers is the same run, not "other settings")."""
    return "".join(text.split()).lower()


def positive_int(text: str) -> int:
    """argparse type of counts (batch sizes, samples, words): a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


def add_model_io(p: argparse.ArgumentParser, *, batched: bool = True) -> None:
    """--model, --max-length, --threads, and --batch-size where the command reads more than one text."""
    p.add_argument("--model", required=True, help="a checkpoint written by `attnkit train` (its model/ folder or the run folder)")
    p.add_argument("--max-length", type=int, default=None, help="truncate inputs to this many tokens (default: the length the model was trained with, else 128)")
    if batched:
        p.add_argument("--batch-size", type=positive_int, default=64, help="inference batch size (default 64)")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: what torch picks, one per core)")


def add_attention_options(t: argparse.ArgumentParser, d: TrainConfig) -> None:
    """The settings of the map: lam and alpha, learned or warmed up, and the layers that use it."""
    t.add_argument("--learn-lam", action="store_true", help="sparsegen-lin: learn lam per layer and head, started at --lam (lam < 1 by construction)")
    t.add_argument("--lam-lr", type=float, default=None, help="with --learn-lam: learning rate of the lam parameters (default: --lr; at 2e-5 lam barely moves)")
    t.add_argument("--lam-warmup", type=float, default=0.0, help="sparsegen-lin: start 4x denser and reach --lam after this fraction of the steps (< 1) or step count (default 0: off)")
    t.add_argument("--alpha", type=float, default=None, help=f"entmax-alpha: alpha in [1, 2] (1 softmax, 1.5 1.5-entmax, 2 sparsemax; default {d.alpha:g})")
    t.add_argument("--learn-alpha", action="store_true", help="entmax-alpha: learn alpha per layer and head (1 + sigmoid(a)), started at --alpha")
    t.add_argument("--alpha-lr", type=float, default=None, help="with --learn-alpha: learning rate of the alpha parameters (default: --lr)")
    t.add_argument("--alpha-warmup", type=float, default=0.0, help="entmax15/entmax-alpha: alpha starts at 1 (softmax) and reaches its target after this fraction of the steps (< 1) or step count (default 0: off)")
    t.add_argument("--sparse-layers", default=None, metavar="LAYERS", type=layers_text,
                   help="layers that use the sparse map, counted from 0: all (default), last, a range 4-5 or a list 0,5; the others keep softmax")


def add_teacher_and_precision_options(t: argparse.ArgumentParser, d: TrainConfig) -> None:
    """Distillation from a teacher, and mixed precision."""
    t.add_argument("--teacher", default=None, metavar="RUN_OR_MODEL",
                   help="distil from this fine-tuned model (e.g. the softmax run): the loss mixes the labels' cross-entropy and "
                        "the KL divergence to the teacher's predictions (the teacher's logits computed per batch, no gradient)")
    t.add_argument("--distill-weight", type=float, default=None, help=f"with --teacher: the teacher's share w of the loss, 0 < w <= 1 (default {d.distill_weight:g})")
    t.add_argument("--distill-temperature", type=float, default=None, help=f"with --teacher: the softmax temperature T of both predictions (default {d.distill_temperature:g})")
    prec = t.add_mutually_exclusive_group()
    prec.add_argument("--bf16", dest="precision", action="store_const", const="bf16", default=d.precision,
                      help="mixed precision: matrix products in bfloat16 under autocast, weights and optimizer in float32 "
                           "(GPUs with bf16, and CPUs with AVX512-BF16 or AMX, where a step is several times faster); default float32")
    prec.add_argument("--fp16", dest="precision", action="store_const", const="fp16",
                      help="mixed precision in float16 with loss scaling (CUDA GPUs only)")


def add_train_options(t: argparse.ArgumentParser, sweep: bool = False) -> None:
    """Every option of ``attnkit train`` (also taken by ``attnkit sweep``, whose cells take their seeds from --seeds:
    its --seed is refused)."""
    d = TrainConfig()
    t.add_argument("--task", default=d.task, help=f"dataset (default {d.task}); see `attnkit tasks`")
    t.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    t.add_argument("--model", default=d.model, help="'minilm' (bundled), a local checkpoint folder, or a hub name")
    t.add_argument("--attention", default=None, choices=NormaliserChoices(), help=f"normaliser (default: a checkpoint's own, else {d.attention}; see MiniBERT below)")
    t.add_argument("--lam", type=float, default=None, help="sparsegen-lin lam < 1 (default: the SSAF paper's value for the task, else 0)")
    t.add_argument("--from-scratch", action="store_true", help="random weights, same architecture (the paper's Np / SSAF(Np))")
    t.add_argument("--epochs", type=float, default=None, help=f"training epochs (default: the SSAF paper's for its tasks, e.g. SciTail 3, SenTube-A 5; else {d.epochs:g})")
    t.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (overrides --epochs)")
    t.add_argument("--batch-size", type=int, default=d.batch_size, help=f"per-process batch size (default {d.batch_size})")
    t.add_argument("--lr", type=float, default=None, help=f"learning rate (default {d.lr:g}; MiniBERT: see below)")
    t.add_argument("--warmup", type=float, default=d.warmup_ratio, help="warm-up: a fraction of the steps if < 1, else a step count")
    t.add_argument("--weight-decay", type=float, default=d.weight_decay, help="AdamW weight decay")
    t.add_argument("--max-length", type=int, default=d.max_length, help=f"truncate inputs to this many tokens (default {d.max_length})")
    t.add_argument("--doc-stride", type=int, default=None, help="span QA (--task squad): overlap of context windows in tokens (default max-length // 3)")
    t.add_argument("--seed", type=int, default=None if sweep else d.seed,
                   help="not taken: each cell's seed is one of --seeds" if sweep else f"random seed (default {d.seed})")
    t.add_argument("--output-dir", default=d.output_dir, help=f"run folder (default {d.output_dir}); an unfinished run there is resumed, a finished one with the same settings kept as it is, one with other settings refused")
    t.add_argument("--no-resume", action="store_true", help="start afresh even if the output folder holds checkpoints or a finished run (moved aside to <output-dir>/.replaced-<date>/, not deleted)")
    t.add_argument("--keep-checkpoints", action="store_true", help="keep the checkpoint-N folders (optimizer state) after the run finishes")
    t.add_argument("--max-train-samples", type=int, default=None, help="train on a random subset of this size")
    t.add_argument("--max-eval-samples", type=int, default=None, help="evaluate on a random subset of this size")
    t.add_argument("--holdout", type=float, default=0.0, metavar="F",
                   help="keep a random fraction F of the training split (drawn with --seed) out of training; the checkpoint "
                        "kept is the best on it and it is scored at the end (\"heldout\" in metrics.json), so that the dev "
                        "split, scored once at the end, chose nothing: choose settings on \"heldout\" and report dev clean "
                        "(a MiniBERT from scratch still builds its vocabulary from the whole training split)")
    t.add_argument("--eval-steps", type=int, default=None, help="evaluate and checkpoint every N steps (default: every epoch)")
    t.add_argument("--logging-steps", type=int, default=d.logging_steps, help="log the training loss every this many steps")
    add_attention_options(t, d)
    add_teacher_and_precision_options(t, d)
    t.add_argument("--threads", type=int, default=None, help="torch threads (default: what torch picks, one per core); 1 leaves a core free")
    t.add_argument("--lemmatize", default=None, metavar="LANG", help="replace texts by their lemmas (simplemma: en, fr, de, ...); recorded with the model, applied at prediction too")
    t.add_argument("--group-by-length", action="store_true", help="batch texts of similar length together (less padding, faster on CPU)")
    t.add_argument("--no-heatmap", action="store_true", help="do not draw an attention heatmap at the end")
    s = t.add_argument_group("SesameBERT: Gaussian blur and layer pooling")
    s.add_argument("--blur", default="none", choices=["none", "context", "value"], help="Gaussian blur on each head's output (context) or on the values (default none)")
    s.add_argument("--blur-size", type=int, default=None, help=f"odd blur window k (default {d.blur_size})")
    s.add_argument("--blur-sigma", type=float, default=None, help=f"blur sigma > 0 (default {d.blur_sigma:g})")
    s.add_argument("--layer-pooling", default=d.pooling, choices=["first", "second", "second-to-last", "last", "sum-last-four", "sum-all", "weighted"],
                   help="which layers the classifier reads (SesameBERT Table 3; default last)")
    s.add_argument("--se", action=BooleanOnce, default=False, help="Squeeze-and-Excitation over the layer outputs (default off)")
    s.add_argument("--se-ratio", type=int, default=None, help=f"SE reduction ratio r (default {d.se_ratio})")
    s.add_argument("--pooling-lr", type=float, default=None,
                   help="with --se or --layer-pooling weighted: learning rate of those layer weights (default: --lr; at 3e-5 for "
                        "3 epochs they stay at their initial values)")
    add_mini_train_options(t)


# ----------------------------------------------------------------------------- MiniBERT options of train

TRAIN_HELP = (
    "MiniBERT: --model mini trains a MiniBERT from scratch on the task (WordPiece tokenizer from the training "
    "text, random weights, no MLM); --kind/--layers/--heads/--dim/--vocab-size shape it. --model <folder written "
    "by `attnkit pretrain`> fine-tunes a pre-trained one. Without --attention a checkpoint keeps its own "
    "normaliser (and lam), --model mini uses softmax (the paper's), other models sparsegen-lin. Without --lr, "
    f"MiniBERT uses {DEFAULT_MINI_LR:g}, other models 2e-5."
)


def add_mini_train_options(t: argparse.ArgumentParser) -> None:
    """The options `attnkit train` gains for MiniBERT and for freezing."""
    g = t.add_argument_group("MiniBERT", TRAIN_HELP)
    g.add_argument("--kind", default=None, choices=KINDS, help="with --model mini: sa (MiniSA), ssa (MiniSSA) or nta (MiniNTA); default sa")
    g.add_argument("--layers", type=int, default=None, help="with --model mini: attention layers (default 1)")
    g.add_argument("--heads", type=int, default=None, help="with --model mini: heads per layer (default 1)")
    g.add_argument("--dim", type=int, default=None, help="with --model mini: embedding size (default 32)")
    g.add_argument("--vocab-size", type=int, default=None, help=f"with --model mini: WordPiece vocabulary size (default {DEFAULT_VOCAB})")
    g.add_argument("--score-scale", default=None, choices=SCORE_SCALES,
                   help="with --model mini: none = the paper's bare dot product, sqrt = scores / sqrt(d_head) (default sqrt)")
    g.add_argument("--head-mode", default=None, choices=HEAD_MODES,
                   help="with --model mini: split = H heads of d/H (BERT's; default), full = H heads of width d + an output projection")
    t.add_argument("--freeze", default=None, metavar="GROUPS",
                   help="comma-separated parameter groups not to train: embeddings, attention, encoder "
                        "(e.g. embeddings,attention = the MiniBERT paper's frozen variant; works for BERT models too)")


# ----------------------------------------------------------------------------- pretrain and words


def add_pretrain_parser(sub) -> argparse.ArgumentParser:
    d = PretrainConfig()
    p = sub.add_parser(
        "pretrain",
        help="train a tokenizer and pre-train a MiniBERT (masked LM) on a task's training text",
        description=PRETRAIN_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--task", default=d.task, help=f"dataset whose TRAINING text is used (default {d.task})")
    p.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    p.add_argument("--kind", default=d.kind, choices=KINDS, help="sa = MiniSA (Q,K,V), ssa = MiniSSA (Q only), nta = MiniNTA (none)")
    p.add_argument("--attention", default=d.attention, choices=NormaliserChoices(), help=f"normaliser (default {d.attention})")
    p.add_argument("--lam", type=float, default=d.lam, help="sparsegen-lin lam < 1 (default 0)")
    p.add_argument("--layers", type=int, default=d.layers, help=f"attention layers L (default {d.layers})")
    p.add_argument("--heads", type=int, default=d.heads, help=f"heads per layer H, splitting --dim (default {d.heads})")
    p.add_argument("--dim", type=int, default=d.dim, help=f"embedding size d (default {d.dim})")
    p.add_argument("--vocab-size", type=int, default=d.vocab_size, help=f"WordPiece vocabulary size (default {d.vocab_size})")
    p.add_argument("--score-scale", default=d.score_scale, choices=SCORE_SCALES,
                   help=f"none = the paper's bare dot product softmax(QE·KEᵀ), sqrt = scores / sqrt(d_head) (default {d.score_scale})")
    p.add_argument("--head-mode", default=d.head_mode, choices=HEAD_MODES,
                   help=f"split = H heads of d/H (BERT's), full = H heads of width d and an output projection back to d (default {d.head_mode})")
    p.add_argument("--epochs", type=float, default=d.epochs, help=f"MLM epochs (default {d.epochs:g})")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"batch size (default {d.batch_size})")
    p.add_argument("--lr", type=float, default=d.lr, help=f"learning rate (default {d.lr:g})")
    p.add_argument("--max-length", type=int, default=d.max_length, help=f"truncate texts to this many tokens (default {d.max_length})")
    p.add_argument("--max-train-samples", type=int, default=None, help="use a random subset of the training texts")
    p.add_argument("--seed", type=int, default=d.seed, help=f"random seed (default {d.seed})")
    p.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: what torch picks, one per core); 1 leaves a core free")
    p.add_argument("--output-dir", default=d.output_dir, help=f"run folder (default {d.output_dir}); the checkpoint goes to <it>/model; a finished run there with the same settings is kept as it is")
    p.add_argument("--no-resume", action="store_true", help="pre-train afresh even if the output folder holds a finished run (moved aside to <output-dir>/.replaced-<date>/, not deleted)")
    p.add_argument("--logging-steps", type=int, default=d.logging_steps, help="log the training loss every this many steps")
    p.add_argument("--lemmatize", default=None, metavar="LANG", help="lemmatise the corpus first (simplemma: en, fr, de, ...); recorded with the model")
    return p


def add_adapt_parser(sub) -> argparse.ArgumentParser:
    d = AdaptConfig()
    p = sub.add_parser("adapt", help="adapt an encoder to a sparse attention map by masked-LM on training texts, before fine-tuning",
                       description=ADAPT_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", action="append", default=None, help=f"a task whose TRAINING texts are read; repeat for several (default {d.tasks[0]} unless --text-file)")
    p.add_argument("--text-file", action="append", default=None, help="a file of your own texts, one per line (UTF-8); repeatable")
    p.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    p.add_argument("--model", default=d.model, help="'minilm' (bundled), a local checkpoint or run folder, or a hub name")
    p.add_argument("--attention", default=d.attention, choices=NormaliserChoices(adapt_only=True), help=f"the map to adapt to (default {d.attention}); softmax: the control")
    p.add_argument("--lam", type=float, default=None, help=f"sparsegen-lin: the target lam < 1 (default {d.lam:g})")
    p.add_argument("--alpha", type=float, default=None, help=f"entmax-alpha: the target alpha in (1.01, 2] (default {d.alpha:g})")
    p.add_argument("--anneal", type=float, default=d.anneal, help=f"fraction of the steps (< 1) or step count over which the map goes from dense to the target (default {d.anneal:g})")
    p.add_argument("--head-warmup", type=float, default=AdaptConfig.head_warmup, help=f"fraction of the steps (< 1) or step count in which only the MLM head trains, the encoder frozen (default {AdaptConfig.head_warmup:g})")
    p.add_argument("--sparse-layers", default=None, metavar="LAYERS", type=layers_text, help="layers that use the map: all (default), last, 4-5, 0,5; the others keep softmax")
    p.add_argument("--max-steps", type=int, default=d.max_steps, help=f"MLM steps (default {d.max_steps})")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"per-process batch size (default {d.batch_size})")
    p.add_argument("--lr", type=float, default=d.lr, help=f"learning rate (default {d.lr:g})")
    p.add_argument("--warmup", type=float, default=d.warmup_ratio, help=f"learning-rate warm-up, a fraction of the steps (default {d.warmup_ratio:g})")
    p.add_argument("--weight-decay", type=float, default=d.weight_decay, help=f"(default {d.weight_decay:g})")
    p.add_argument("--max-length", type=int, default=d.max_length, help=f"truncate texts to this many tokens (default {d.max_length})")
    p.add_argument("--max-train-samples", type=int, default=None, help="use a random subset of the pooled texts")
    p.add_argument("--seed", type=int, default=d.seed, help=f"random seed (default {d.seed})")
    p.add_argument("--output-dir", default=d.output_dir, help=f"run folder (default {d.output_dir}); the encoder goes to <it>/model")
    p.add_argument("--no-resume", action="store_true", help="start afresh even if the folder holds a run (moved aside to <output-dir>/.replaced-<date>/, not deleted)")
    p.add_argument("--keep-checkpoints", action="store_true", help="keep the checkpoint-N folders after the run finishes")
    p.add_argument("--save-steps", type=int, default=d.save_steps, help=f"checkpoint every N steps, to resume from (default {d.save_steps})")
    p.add_argument("--logging-steps", type=int, default=d.logging_steps, help="log the training loss every this many steps")
    prec = p.add_mutually_exclusive_group()
    prec.add_argument("--bf16", dest="precision", action="store_const", const="bf16", default=d.precision, help="bfloat16 mixed precision")
    prec.add_argument("--fp16", dest="precision", action="store_const", const="fp16", help="float16 mixed precision (CUDA GPUs only)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: what torch picks, one per core)")
    return p


def add_words_parser(sub) -> argparse.ArgumentParser:
    w = sub.add_parser(
        "words",
        help="rank the most-attended words per predicted class over a dataset split (JSON + bar chart)",
        description=WORDS_DOC,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    w.add_argument("--model", required=True, help="a checkpoint written by `attnkit train` (its model/ folder or the run folder)")
    w.add_argument("--task", default=None, help="dataset (default: the one the model was trained on)")
    w.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    w.add_argument("--split", default="validation", choices=["train", "validation", "test"], help="the split whose texts are read (default: validation)")
    w.add_argument("--top", type=positive_int, default=20, help="words per class (default 20)")
    w.add_argument("--min-count", type=positive_int, default=3, help="rank only words seen at least this often in the class (default 3)")
    w.add_argument("--max-samples", type=positive_int, default=None, help="read only the first N sentences of the split")
    w.add_argument("--output", default=None, help="bar chart, .png or .svg (default words.png; an existing one attnkit did not write is kept)")
    w.add_argument("--json", default=None, help="ranking as JSON (default: the chart's path with .json, e.g. words.json; an existing "
                                                "file there that attnkit did not write is never replaced)")
    w.add_argument("--max-length", type=int, default=None, help="truncate inputs to this many tokens (default: the length the model was trained with, else 128)")
    w.add_argument("--batch-size", type=positive_int, default=64, help="texts per forward pass")
    w.add_argument("--threads", type=positive_int, default=None, help="torch threads (default: what torch picks, one per core)")
    return w


# ----------------------------------------------------------------------------- the parser


def add_train_parser(sub) -> None:
    """``attnkit train``."""
    t = sub.add_parser("train", help="fine-tune an encoder with softmax or sparse attention")
    add_train_options(t)
    t.add_argument("--recipe", default=None, choices=list(RECIPES),
                   help="; ".join(f"{n}: {recipe_options(n)} ({what})" for n, (_, what) in RECIPES.items())
                   + "; fills only the options you leave out, refuses one you give with another value")


def add_sweep_parser(sub) -> None:
    """``attnkit sweep``."""
    w = sub.add_parser("sweep", help="train every (lam, seed) cell (or (alpha, seed)) and a softmax baseline per seed; plot metric and support against lam")
    swept = w.add_mutually_exclusive_group(required=True)
    swept.add_argument("--lams", nargs="+", type=float, help="sparsegen-lin lam values (< 1, each once), e.g. -8 -6 -4 -2 0")
    swept.add_argument("--alphas", nargs="+", type=float, help="or alpha-entmax alpha values (in [1, 2], each once), e.g. 1.25 1.5 1.75 2")
    w.add_argument("--seeds", nargs="+", type=int, default=[1, 2], help="seeds, each once (default 1 2)")
    w.add_argument("--view-layer", type=int, default=None, help="layer (0-based) of the side-by-side attention figure (default the last)")
    w.add_argument("--view-head", type=int, default=0, help="head (0-based) of the side-by-side attention figure (default 0)")
    w.add_argument("--report-only", action="store_true",
                   help="train nothing: write sweep.json/.md and the figures from the cells finished so far in --output-dir")
    add_train_options(w, sweep=True)
    w.set_defaults(output_dir="runs/sweep")


def add_evaluate_parser(sub) -> None:
    """``attnkit evaluate``."""
    e = sub.add_parser("evaluate", help="metrics of a trained model on a split, printed and written as JSON")
    add_model_io(e)
    e.add_argument("--task", default=None, help="dataset (default: the one the model was trained on)")
    e.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    e.add_argument("--split", default="validation", help="split to evaluate (default validation; MNLI also has validation_mismatched)")
    e.add_argument("--output", default=None, help="JSON file (default: <model>/eval_<task>_<split>.json); span QA also writes the "
                                                   "answers beside it (<output>_predictions.json)")
    e.add_argument("--hans-per-subcase", type=positive_int, default=None, help="HANS only: evaluate the first N pairs of each of the 30 subcases (default all 1000)")
    e.add_argument("--plot", default=None, help="HANS only: bar chart file, .png or .svg (default: beside the JSON, with .png)")


def add_predict_parser(sub) -> None:
    """``attnkit predict``."""
    p = sub.add_parser("predict", help="label and probabilities for texts given as arguments or in a file")
    add_model_io(p)
    p.add_argument("texts", nargs="*", help="texts to classify")
    p.add_argument("--file", default=None, help="a text file, one text per line (QA models: JSON lines with question and context)")
    p.add_argument("--question", default=None, help="QA models: the question")
    p.add_argument("--context", default=None, help="QA models: the passage to find the answer in")
    p.add_argument("--output", default=None, help="write JSON lines here instead of standard output")
    p.add_argument("--task", default=None, help="with --split: predict a whole split of this task")
    p.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    p.add_argument("--split", default=None, help="predict every row of this split; for GLUE test splits, writes the submission file (e.g. RTE.tsv)")
    p.add_argument("--output-dir", default=None, help="with --split: folder for the GLUE submission file (default <model>/glue_submission)")


def add_explain_parser(sub) -> None:
    """``attnkit explain``."""
    x = sub.add_parser("explain", help="draw one sentence's attention as a heatmap (PNG or SVG)")
    add_model_io(x, batched=False)
    x.add_argument("text", help="the sentence")
    x.add_argument("--output", default=None, help="heatmap file, .png or .svg (default attention.png; an existing one attnkit did not write is kept)")
    x.add_argument("--layer", type=int, default=None, help="layer (0-based); omit for every layer")
    x.add_argument("--head", type=int, default=None, help="head (0-based); omit for every head")
    x.add_argument("--stats", default=None, help="also write the sparsity statistics to this JSON file")
    x.add_argument("--html", default=None, help="also write an interactive page (head view + model view of every layer and head) to this .html file")


def add_layer_weights_parser(sub) -> None:
    """``attnkit layer-weights``."""
    w = sub.add_parser("layer-weights", help="bar chart of a layer-pooling model's learned layer weights (SE, weighted average)")
    add_model_io(w)
    w.add_argument("--task", default=None, help="dataset whose texts are averaged over (default: the one the model was trained on)")
    w.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    w.add_argument("--split", default="validation", help="the split whose texts are read (default: validation)")
    w.add_argument("--max-samples", type=positive_int, default=500, help="average over at most this many texts (default 500)")
    w.add_argument("--output", default=None, help="chart file, .png or .svg (default layer_weights.png); the values "
                                                                 "go beside it as JSON (layer_weights.json)")


def add_faithfulness_parser(sub) -> None:
    """``attnkit faithfulness``."""
    f = sub.add_parser("faithfulness", help="how faithful (ERASER comprehensiveness/sufficiency) and plausible each explanation of a classifier is: attention, rollout, gradients, random",
                       description=FAITHFULNESS_DOC, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_io(f)
    f.add_argument("--task", default=None, help="dataset (default: the one the model was trained on); single texts only")
    f.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)
    f.add_argument("--split", default=None, help="split to explain (default: test, or validation where the task has no test split)")
    f.add_argument("--max-examples", type=positive_int, default=None, help="the first N texts of the split (default all)")
    f.add_argument("--ig-steps", type=positive_int, default=20, help="integrated gradients: steps of the path integral, at most 1000 (default 20)")
    f.add_argument("--seed", type=int, default=0, help="seed of the random ranking (default 0)")
    f.add_argument("--output", default=None, help="JSON file (default: <model>/faithfulness_<task>_<split>.json); the curves are drawn "
                                                   "beside it (.png), or to --plot")
    f.add_argument("--plot", default=None, help="curves file, .png or .svg")
    f.add_argument("--rationale-lengths", default=None, metavar="REPORT",
                   help="another model's faithfulness report (JSON) on the same texts: measure this model's explanations "
                        "at that model's rationale lengths (a softmax model at a sparse model's support, text by text)")


def add_tasks_parser(sub) -> None:
    """``attnkit tasks``."""
    k = sub.add_parser("tasks", help="list the datasets attnkit can load, and which are found under the data folder")
    k.add_argument("--data-dir", default=None, help=DATA_DIR_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="attnkit", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="show library logs and warnings")
    parser.add_argument("--version", action="version", version=f"attnkit {importlib.metadata.version('attnkit')}")
    sub = parser.add_subparsers(dest="command", metavar="{train,sweep,adapt,pretrain,evaluate,predict,explain,words,layer-weights,faithfulness,tasks}")
    for add in (add_train_parser, add_sweep_parser, add_pretrain_parser, add_adapt_parser, add_evaluate_parser, add_predict_parser,
                add_explain_parser, add_layer_weights_parser, add_words_parser, add_faithfulness_parser, add_tasks_parser):
        add(sub)
    return parser
