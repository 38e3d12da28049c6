"""The ``attnkit`` command: train, evaluate, predict, explain.

``attnkit train`` with no arguments fine-tunes the bundled MiniLM with sparsegen-lin
attention on the Rotten Tomatoes snippets, offline.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from attnkit.attention import NORMALISERS
from attnkit.pretrain import add_mini_train_options, add_pretrain_parser, cmd_pretrain, mini_train_settings
from attnkit.train import METRICS_FILE, MODEL_DIR, TrainConfig
from attnkit.words import add_words_parser, cmd_words

log = logging.getLogger("attnkit")


class UserError(Exception):
    """An error in the user's input: printed as one line, no traceback."""


def _add_model_io(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, help="a checkpoint written by `attnkit train` (its model/ folder or the run folder)")
    p.add_argument("--max-length", type=int, default=128, help="truncate inputs to this many tokens (default 128)")
    p.add_argument("--batch-size", type=int, default=64, help="inference batch size (default 64)")


def build_parser() -> argparse.ArgumentParser:
    d = TrainConfig()
    parser = argparse.ArgumentParser(prog="attnkit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="show library logs and warnings")
    sub = parser.add_subparsers(dest="command", metavar="{train,pretrain,evaluate,predict,explain,words}")

    t = sub.add_parser("train", help="fine-tune an encoder with softmax or sparse attention")
    t.add_argument("--task", default=d.task, help=f"dataset (default {d.task}); see `attnkit tasks`")
    t.add_argument("--data-dir", default=None, help="folder holding the datasets (default: $ATTNKIT_DATA or ../shared/data)")
    t.add_argument("--model", default=d.model, help="'minilm' (bundled), a local checkpoint folder, or a hub name")
    t.add_argument("--attention", default=None, choices=list(NORMALISERS), help=f"normaliser (default: a checkpoint's own, else {d.attention}; see MiniBERT below)")
    t.add_argument("--lam", type=float, default=None, help="sparsegen-lin lam < 1 (default: the SSAF paper's value for the task, else 0)")
    t.add_argument("--from-scratch", action="store_true", help="random weights, same architecture (the paper's Np / SSAF(Np))")
    t.add_argument("--epochs", type=float, default=d.epochs, help=f"training epochs (default {d.epochs:g})")
    t.add_argument("--max-steps", type=int, default=d.max_steps, help="stop after this many steps (overrides --epochs)")
    t.add_argument("--batch-size", type=int, default=d.batch_size, help=f"per-process batch size (default {d.batch_size})")
    t.add_argument("--lr", type=float, default=None, help=f"learning rate (default {d.lr:g}; MiniBERT: see below)")
    t.add_argument("--warmup", type=float, default=d.warmup_ratio, help="warm-up: a fraction of the steps if < 1, else a step count")
    t.add_argument("--weight-decay", type=float, default=d.weight_decay)
    t.add_argument("--max-length", type=int, default=d.max_length, help=f"truncate inputs to this many tokens (default {d.max_length})")
    t.add_argument("--seed", type=int, default=d.seed, help=f"random seed (default {d.seed})")
    t.add_argument("--output-dir", default=d.output_dir, help=f"run folder (default {d.output_dir}); an unfinished run there is resumed")
    t.add_argument("--no-resume", action="store_true", help="start afresh even if the output folder holds checkpoints")
    t.add_argument("--max-train-samples", type=int, default=None, help="train on a random subset of this size")
    t.add_argument("--max-eval-samples", type=int, default=None, help="evaluate on a random subset of this size")
    t.add_argument("--eval-steps", type=int, default=None, help="evaluate and checkpoint every N steps (default: every epoch)")
    t.add_argument("--logging-steps", type=int, default=d.logging_steps)
    t.add_argument("--no-heatmap", action="store_true", help="do not draw an attention heatmap at the end")
    add_mini_train_options(t)
    add_pretrain_parser(sub)

    e = sub.add_parser("evaluate", help="metrics of a trained model on a split, printed and written as JSON")
    _add_model_io(e)
    e.add_argument("--task", default=None, help="dataset (default: the one the model was trained on)")
    e.add_argument("--data-dir", default=None)
    e.add_argument("--split", default="validation", choices=["train", "validation", "test"])
    e.add_argument("--output", default=None, help="JSON file (default: <model>/eval_<task>_<split>.json)")

    p = sub.add_parser("predict", help="label and probabilities for texts given as arguments or in a file")
    _add_model_io(p)
    p.add_argument("texts", nargs="*", help="texts to classify")
    p.add_argument("--file", default=None, help="a text file, one text per line")
    p.add_argument("--output", default=None, help="write JSON lines here instead of standard output")

    x = sub.add_parser("explain", help="draw one sentence's attention as a heatmap (PNG or SVG)")
    _add_model_io(x)
    x.add_argument("text", help="the sentence")
    x.add_argument("--output", default="attention.png", help="heatmap file, .png or .svg (default attention.png)")
    x.add_argument("--layer", type=int, default=None, help="layer (0-based); omit for every layer")
    x.add_argument("--head", type=int, default=None, help="head (0-based); omit for every head")
    x.add_argument("--stats", default=None, help="also write the sparsity statistics to this JSON file")

    add_words_parser(sub)
    sub.add_parser("tasks", help="list the datasets attnkit can load")
    return parser


def _model_dir(path: str) -> Path:
    p = Path(path)
    if (p / MODEL_DIR / "config.json").is_file():
        return p / MODEL_DIR
    if not p.exists():
        raise UserError(f"--model {path}: no such folder")
    if not (p / "config.json").is_file():
        raise UserError(f"--model {path}: no config.json there (expected a folder written by `attnkit train`)")
    return p


def _load(path: str):
    from attnkit.modeling import load_classifier, load_tokenizer

    d = _model_dir(path)
    return d, load_classifier(d), load_tokenizer(d)


def cmd_train(a) -> int:
    cfg = TrainConfig(
        task=a.task, data_dir=a.data_dir, from_scratch=a.from_scratch,
        epochs=a.epochs, max_steps=a.max_steps, batch_size=a.batch_size, warmup_ratio=a.warmup,
        weight_decay=a.weight_decay, max_length=a.max_length, seed=a.seed, output_dir=a.output_dir,
        resume=not a.no_resume, max_train_samples=a.max_train_samples, max_eval_samples=a.max_eval_samples,
        eval_steps=a.eval_steps, logging_steps=a.logging_steps,
        **mini_train_settings(a, TrainConfig.attention, TrainConfig.lr),  # model, attention, lam, lr, freeze, MiniBERT shape
    )
    cfg.spec()  # validate attention/lam before any heavy work
    from attnkit.train import train

    metrics = train(cfg)
    if int(os.environ.get("RANK", "0")) != 0:
        return 0
    out = Path(cfg.output_dir)
    v = metrics["validation"]
    print(f"\n[attnkit] task {cfg.task}, attention {cfg.spec().describe()}")
    if cfg.spec().is_sparse:
        from attnkit import kernels

        print(f"[attnkit] sparse maps ran on the {kernels.backend()} path ({kernels.backend_reason()})")
    print(f"[attnkit] dev accuracy {v['accuracy']:.4f}  (macro-F1 {v['macro_f1']:.4f}, {metrics['train_size']} training examples)")
    if "test" in metrics:
        print(f"[attnkit] test accuracy {metrics['test']['accuracy']:.4f}")
    print(f"[attnkit] model written to {metrics['model_dir']}")
    print(f"[attnkit] metrics written to {out / METRICS_FILE}")
    if not a.no_heatmap:
        from attnkit.data import load_task
        from attnkit.explain import attention_maps, plot_attention

        _, model, tok = _load(str(out))
        dev = load_task(cfg.task, cfg.data_dir).splits["validation"]
        texts = list(dev.select(range(min(200, len(dev))))["text"])
        text = min((t for t in texts if 6 <= len(t.split()) <= 14), key=len, default=texts[0])
        pair = dev[0]["text_pair"] if "text_pair" in dev.column_names else None
        maps = attention_maps(model, tok, text, pair, cfg.max_length)
        layer = maps.weights.shape[0] - 1
        png = plot_attention(maps, out / "attention.png", layer=layer, head=0)
        grid = plot_attention(maps, out / "attention_grid.png")
        print(f"[attnkit] attention heatmap of a dev sentence written to {png} (all layers/heads: {grid})")
    return 0


def cmd_evaluate(a) -> int:
    from attnkit.data import load_task
    from attnkit.inference import evaluate_split
    from attnkit.train import write_json_atomic

    d, model, tok = _load(a.model)
    run = d / "attnkit_run.json"
    task = a.task or (json.loads(run.read_text()).get("task") if run.is_file() else None)
    if not task:
        raise UserError("--task is needed: the checkpoint does not record what it was trained on")
    data = load_task(task, a.data_dir)
    if a.split not in data.splits:
        raise UserError(f"task {task} has no {a.split} split (it has {', '.join(data.splits)})")
    if list(data.label_names) != [model.config.id2label[i] for i in range(model.config.num_labels)]:
        raise UserError(f"task {task} has labels {data.label_names} but the model predicts {list(model.config.id2label.values())}")
    metrics = evaluate_split(model, tok, data.splits[a.split], batch_size=a.batch_size, max_length=a.max_length)
    metrics = {"task": task, "split": a.split, "model": str(d), **metrics}
    out = Path(a.output) if a.output else d / f"eval_{task}_{a.split}.json"
    write_json_atomic(out, metrics)
    for k, v in metrics.items():
        print(f"{k}: {v:.4f}" if isinstance(v, float) else f"{k}: {v}")
    print(f"[attnkit] metrics written to {out}")
    return 0


def cmd_predict(a) -> int:
    from attnkit.inference import predict_texts, read_text_file

    texts = list(a.texts)
    if a.file:
        texts += read_text_file(a.file)
    if not texts:
        raise UserError("nothing to predict: give texts as arguments or --file with one text per line")
    _, model, tok = _load(a.model)
    rows = predict_texts(model, tok, texts, batch_size=a.batch_size, max_length=a.max_length)
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    if a.output:
        Path(a.output).write_text(lines, encoding="utf-8")
        print(f"[attnkit] {len(rows)} predictions written to {a.output}")
    else:
        sys.stdout.write(lines)
    return 0


def cmd_explain(a) -> int:
    from attnkit.explain import attention_maps, plot_attention
    from attnkit.train import write_json_atomic

    if Path(a.output).suffix.lower() not in (".png", ".svg"):
        raise UserError(f"--output {a.output}: the heatmap file must end in .png or .svg")
    _, model, tok = _load(a.model)
    maps = attention_maps(model, tok, a.text, max_length=a.max_length)
    try:
        path = plot_attention(maps, a.output, layer=a.layer, head=a.head)
    except ValueError as e:
        raise UserError(str(e)) from None
    st = maps.stats()
    print(f"attention: {maps.attention}")
    print(f"tokens: {' '.join(maps.tokens)}")
    print(f"exact zeros: {st['zero_fraction']:.1%}; support per row: mean {st['mean_support']:.2f}, max {st['max_support']}")
    if a.layer is not None and a.head is not None:
        sizes = maps.support_sizes()[a.layer, a.head]
        print("support size per row: " + ", ".join(f"{t}={int(s)}" for t, s in zip(maps.tokens, sizes)))
    if a.stats:
        write_json_atomic(a.stats, st)
    print(f"[attnkit] heatmap written to {path}")
    return 0


def cmd_tasks(a) -> int:
    from attnkit.data import list_tasks

    for t in list_tasks():
        print(t)
    return 0


COMMANDS = {"train": cmd_train, "evaluate": cmd_evaluate, "predict": cmd_predict, "explain": cmd_explain, "tasks": cmd_tasks}
COMMANDS.update(pretrain=cmd_pretrain, words=cmd_words)


def _quiet_libraries() -> None:
    import warnings

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except ImportError:
        pass


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    a = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if a.verbose else logging.WARNING, format="[%(name)s] %(message)s")
    if a.command is None:
        parser.print_help()
        return 0
    if not a.verbose:
        _quiet_libraries()
    from attnkit.data import DataFormatError

    try:
        return COMMANDS[a.command](a)
    except (UserError, DataFormatError, OSError) as e:
        print(f"attnkit {a.command}: error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:
        # our own validation (attention, lam, labels) raises ValueError with a full sentence
        if a.verbose:
            raise
        print(f"attnkit {a.command}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
