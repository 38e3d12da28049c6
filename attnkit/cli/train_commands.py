"""The commands that train: ``train``, ``sweep``, ``pretrain``, ``adapt``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

from attnkit.analysis.explain import (
    attention_maps,
    plot_attention,
    view_sentence,
)
from attnkit.analysis.inference import (
    load_for_inference,
)
from attnkit.attention import kernels
from attnkit.cli.settings import (
    map_options_ignored,
    print_blur_note,
    refuse_ignored,
    train_config,
)
from attnkit.attention.normalisers import names_with, normaliser
from attnkit.errors import UserError
from attnkit.models.build import check_se_ratio
from attnkit.models.checkpoint import load_tokenizer
from attnkit.models.checks import check_model_folder
from attnkit.models.resolve import check_text_room, resolve_model
from attnkit.runfiles.atomic import is_main_process, output_batch
from attnkit.runfiles.ownership import make_way
from attnkit.tasks import is_qa_task, load_task
from attnkit.training.adapt import adapt
from attnkit.training.adapt_config import AdaptConfig
from attnkit.training.config import METRICS_FILE, MODEL_DIR, PretrainConfig, TrainConfig, is_mini_alias
from attnkit.training.finetune import train
from attnkit.training.pretrain import pretrain
from attnkit.training.recipes import recipe_options
from attnkit.training.sweep import SWEPT, run_sweep, sweep_of_cell


def cmd_train(a) -> int:
    cfg = train_config(a)
    if a.recipe and is_main_process():
        print(f"[attnkit] recipe {a.recipe}: {recipe_options(a.recipe)}", file=sys.stderr)
    cfg.validate()  # settings, attention and lam before any heavy work
    sweep = sweep_of_cell(cfg.output_dir)
    if sweep is not None:  # (train --no-resume there put another run under the cell's name: its figure drew that one)
        raise UserError(f"--output-dir {cfg.output_dir} is a cell of the sweep in {sweep}: `attnkit sweep --output-dir "
                        f"{sweep}` trains its cells; pick another --output-dir")
    if not is_mini_alias(cfg.model):  # the model folder it starts from, before the data is read
        check_model_folder(resolve_model(cfg.model), weights=not cfg.from_scratch, tokenizer=True)
    if cfg.max_length < 16 and not is_qa_task(cfg.task) and not is_mini_alias(cfg.model):  # [CLS]/[SEP] may fill it
        pairs = "text_pair" in load_task(cfg.task, cfg.data_dir).splits["train"].column_names
        check_text_room(cfg.max_length, load_tokenizer(cfg.model), pairs)
    if cfg.se and a.se_ratio is not None and not is_mini_alias(cfg.model):  # a given r, before the data is read
        check_se_ratio(cfg.head(), model=cfg.model)
    print_blur_note(cfg)
    metrics = train(cfg)
    if not is_main_process():
        return 0
    out = Path(cfg.output_dir)
    if metrics.get("already_complete") and not metrics.get("tidied"):
        print(f"[attnkit] the run in {out} is already complete: nothing was changed (--no-resume trains it again)")
    v = metrics["validation"]
    qa = is_qa_task(cfg.task)
    reads = "span head (start/end per token)" if qa else f"classifier on the {cfg.head().describe()}"
    print(f"\n[attnkit] task {cfg.task}, attention {cfg.spec().describe()}, {reads}")
    if cfg.spec().is_sparse:
        print(f"[attnkit] sparse maps ran on the {kernels.backend()} path ({kernels.backend_reason()})")
    main_metric = metrics.get("main_metric", "accuracy")
    shown = ", ".join(f"{k} {x:.4f}" for k, x in v.items() if k in ("accuracy", "macro_f1", "f1", "exact_match", "mcc", "pearson", "spearman") and k != main_metric)
    print(f"[attnkit] dev {main_metric} {v[main_metric]:.4f}  ({shown}; {metrics['train_size']} training examples)")
    for name in metrics:
        if name.startswith(("test", "validation_")) and isinstance(metrics[name], dict):
            print(f"[attnkit] {name} {main_metric} {metrics[name][main_metric]:.4f}")
    print(f"[attnkit] model {'in' if metrics.get('already_complete') else 'written to'} {out / MODEL_DIR}")
    print(f"[attnkit] metrics {'in' if metrics.get('already_complete') else 'written to'} {out / METRICS_FILE}")
    if (out / "curves.png").is_file():
        print(f"[attnkit] training curves (loss, dev metric per epoch) in {out / 'curves.png'}")
    if not a.no_heatmap and not qa:  # a QA window is ~max-length tokens: too long to read as a heatmap

        _, model, tok = load_for_inference(str(out))
        dev = load_task(cfg.task, cfg.data_dir).splits["validation"]
        texts = list(dev.select(range(min(200, len(dev))))["text"])
        i = view_sentence(texts)
        text = texts[i]
        pair = dev[i]["text_pair"] if "text_pair" in dev.column_names else None
        maps = attention_maps(model, tok, text, pair, cfg.max_length)
        layer = maps.weights.shape[0] - 1
        with output_batch():  # both heatmaps or neither
            png = plot_attention(maps, make_way(out / "attention.png"), layer=layer, head=0)
            grid = plot_attention(maps, make_way(out / "attention_grid.png"))
        print(f"[attnkit] attention heatmap of a dev sentence written to {png} (all layers/heads: {grid})")
    return 0


def cmd_sweep(a) -> int:
    param, values = ("lam", a.lams) if a.lams is not None else ("alpha", a.alphas)
    ignored = [f"--{name} {getattr(a, name)}" for name in ("attention", "lam") if getattr(a, name) is not None]
    if a.no_resume:
        raise UserError("--no-resume: a sweep reuses its finished cells; give another --output-dir to train afresh")
    if a.seed is not None:  # it was ignored without a word: the cells trained seeds 1 and 2 (sweep s24)
        raise UserError(f"--seed {a.seed}: attnkit sweep trains one cell per seed of --seeds (default 1 2); give --seeds "
                        f"{a.seed} for that seed")
    a.seed = TrainConfig.seed  # (each cell's own seed replaces it)
    if param == "lam" and (a.alpha is not None or a.learn_alpha or a.alpha_lr is not None or a.alpha_warmup):
        ignored.append("--alpha/--learn-alpha/--alpha-lr/--alpha-warmup")
    if param == "alpha" and (a.alpha is not None or a.learn_alpha or a.learn_lam or a.lam_lr is not None or a.lam_warmup):
        ignored.append("--alpha/--learn-alpha/--learn-lam/--lam-lr/--lam-warmup")
    if ignored:
        raise UserError(f"{', '.join(ignored)}: attnkit sweep trains {SWEPT[param]} at each --{param}s value and a "
                        f"softmax baseline per seed, so it takes no such option")
    a.attention = SWEPT[param]  # the base settings every cell shares are those of the swept normaliser
    a.swept = f"--{param}s"  # (so that a note on the model's own attention names the sweep, not an --attention)
    base = train_config(a)
    base.validate()
    print_blur_note(base)
    out = Path(a.output_dir)
    records = run_sweep(base, values, a.seeds, out, param=param, view_layer=a.view_layer, view_head=a.view_head, report_only=a.report_only)
    figures = [out / "sweep.png", out / "sweep.svg"] + [p for p in [out / "sweep_attention.png"] if p.is_file()]
    print(f"[attnkit] {len(records)} cells; records in {out / 'sweep.json'}; figures {', '.join(map(str, figures))}")
    return 0


def cmd_pretrain(a) -> int:
    if a.lam != PretrainConfig.lam and normaliser(a.attention).setting != "lam":
        raise UserError(f"--lam {a.lam:g}: only {' or '.join(names_with(setting='lam'))} has a lam; the attention is {a.attention}")
    cfg = PretrainConfig(
        task=a.task, data_dir=a.data_dir, kind=a.kind, attention=a.attention, lam=a.lam, layers=a.layers, heads=a.heads,
        dim=a.dim, vocab_size=a.vocab_size, epochs=a.epochs, batch_size=a.batch_size, lr=a.lr, max_length=a.max_length,
        seed=a.seed, output_dir=a.output_dir, max_train_samples=a.max_train_samples, logging_steps=a.logging_steps,
        lemmatize=a.lemmatize, resume=not a.no_resume, score_scale=a.score_scale, head_mode=a.head_mode,
    )
    cfg.validate()
    m = pretrain(cfg)
    if m.get("already_complete"):
        print(f"[attnkit] the pre-training run in {cfg.output_dir} is already complete: nothing was changed (--no-resume runs it again)")
    print(f"\n[attnkit] MiniBERT {cfg.kind} {cfg.layers}x{cfg.heads}, d={cfg.dim}, {cfg.spec().describe()}; "
          f"{m['parameters']:,} parameters ({m['attention_parameters']:,} in attention), vocabulary {m['vocab_size']}")
    print(f"[attnkit] MLM loss on the training text {m['mlm_loss']:.4f} ({m['train_texts']} texts, {m['seconds']:.1f}s)")
    wrote = "in" if m.get("already_complete") else "written to"  # a finished run run again changes nothing (sweep -28q L2)
    print(f"[attnkit] model + tokenizer {wrote} {m['model_dir']}")
    print(f"[attnkit] metrics {wrote} {Path(cfg.output_dir) / 'metrics.json'}")
    print(f"[attnkit] fine-tune with: attnkit train --task {cfg.task} --model {m['model_dir']}")
    return 0


def cmd_adapt(a) -> int:
    refuse_ignored(map_options_ignored(a, a.attention))
    d = AdaptConfig()
    tasks = a.task if a.task is not None else ([] if a.text_file else list(d.tasks))
    cfg = AdaptConfig(
        tasks=tasks, text_files=list(a.text_file or []), data_dir=a.data_dir, model=a.model, attention=a.attention,
        lam=d.lam if a.lam is None else a.lam, alpha=d.alpha if a.alpha is None else a.alpha, anneal=a.anneal, head_warmup=a.head_warmup,
        sparse_layers=a.sparse_layers, max_steps=a.max_steps, batch_size=a.batch_size, lr=a.lr, warmup_ratio=a.warmup,
        weight_decay=a.weight_decay, max_length=a.max_length, max_train_samples=a.max_train_samples, seed=a.seed,
        output_dir=a.output_dir, resume=not a.no_resume, logging_steps=a.logging_steps, save_steps=a.save_steps,
        precision=a.precision, keep_checkpoints=a.keep_checkpoints,
    )
    cfg.validate()
    m = adapt(cfg)
    if not is_main_process():
        return 0
    out = Path(cfg.output_dir)
    if m.get("already_complete") and not m.get("tidied"):
        print(f"[attnkit] the adapt run in {out} is already complete: nothing was changed (--no-resume runs it again)")
    r = m["adapted"]
    zs = r.get("zero_share") or []
    loss = r.get("mlm_loss")  # null in metrics.json where it was not a number (its non_finite says so)
    loss = f"{loss:.4f}" if isinstance(loss, (int, float)) and math.isfinite(loss) else "not a number (see metrics.json)"
    print(f"\n[attnkit] adapted {cfg.model} to {cfg.spec().describe()}: {r['steps']} MLM steps on {r['texts']['texts']:,} texts "
          f"({r['seconds']:.0f}s); MLM loss {loss}"
          + (f"; {r['texts']['texts_used']:,} of them used (--max-train-samples)" if "texts_used" in r["texts"] else ""))
    if zs:
        print("[attnkit] attention weights exactly 0, per layer: " + " ".join(f"L{i}={z:.0%}" for i, z in enumerate(zs)))
    print(f"[attnkit] encoder {'in' if m.get('already_complete') else 'written to'} {out / MODEL_DIR}")
    print(f"[attnkit] fine-tune with: attnkit train --model {out} --task ...")
    print(f"[attnkit] leave out --attention there: the encoder brings the attention it was adapted to, {cfg.spec().describe()}")
    return 0
