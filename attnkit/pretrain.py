"""MiniBERT on a task's own text: tokenizer, masked-language-model pre-training, CLI glue.

``attnkit pretrain --task semeval2013 --kind ssa`` trains a lower-cased WordPiece tokenizer
on the task's **training** texts only (never dev/test), then pre-trains a MiniBERT with the
masked-language-model objective on those same texts (15% of tokens chosen; of those 80%
[MASK], 10% a random token, 10% kept: transformers' ``DataCollatorForLanguageModeling``),
and writes ``<output-dir>/model`` (model + tokenizer, atomically) and ``<output-dir>/metrics.json``.

``attnkit train --model <that folder>`` fine-tunes it; ``attnkit train --model mini --kind ssa``
trains a MiniBERT from scratch on the task (tokenizer from the training text, random weights,
no MLM). This module also holds the few options the train command gains for MiniBERT.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from typing import TYPE_CHECKING

from attnkit.names import NORMALISER_NAMES

if TYPE_CHECKING:  # torch is imported by the code that runs, not to read --help
    from attnkit.attention import AttentionSpec

log = logging.getLogger("attnkit")

MINI_ALIASES = ("mini", "minibert")
KINDS = ("sa", "ssa", "nta")
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
MAX_POSITIONS = 512
DEFAULT_MINI_LR = 1e-2  # a tiny model trained from (nearly) scratch: AdamW at 1e-2 (best of 1e-3, 3e-3, 1e-2 on SemEval-2013), not BERT's 2e-5
DEFAULT_VOCAB = 4000


def is_mini_alias(model) -> bool:
    return str(model).lower() in MINI_ALIASES


# ----------------------------------------------------------------------------- tokenizer


def train_tokenizer(texts, vocab_size: int = DEFAULT_VOCAB, max_length: int = MAX_POSITIONS):
    """A lower-cased WordPiece tokenizer trained on ``texts`` alone, as a transformers fast tokenizer.

    Characters that never occur in ``texts`` are not in the alphabet: they become [UNK].
    Reload it with ``AutoTokenizer.from_pretrained(dir)`` after ``save_pretrained(dir)``.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    if vocab_size < len(SPECIALS) + 1:
        raise ValueError(f"--vocab-size {vocab_size}: must be larger than the {len(SPECIALS)} special tokens")
    texts = [t for t in texts if t and t.strip()]
    if not texts:
        raise ValueError("no training text to build the tokenizer from")
    tk = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tk.normalizer = normalizers.BertNormalizer(lowercase=True, clean_text=True, handle_chinese_chars=True)
    tk.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tk.decoder = decoders.WordPiece()
    tk.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIALS, show_progress=False))
    cls, sep = tk.token_to_id("[CLS]"), tk.token_to_id("[SEP]")
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"], model_max_length=max_length,
    )


def new_mini(tokenizer, *, kind="sa", layers=1, heads=1, dim=32, spec: AttentionSpec | None = None, masked_lm=True):
    """A randomly initialised MiniBERT sized to ``tokenizer``'s vocabulary."""
    from attnkit.mini import MiniBertForMaskedLM, MiniBertModel, make_config

    cfg = make_config(len(tokenizer), kind=kind, layers=layers, heads=heads, dim=dim, spec=spec,
                      pad_token_id=tokenizer.pad_token_id, max_position_embeddings=MAX_POSITIONS)
    return MiniBertForMaskedLM(cfg) if masked_lm else MiniBertModel(cfg)


def init_mini_checkpoint(train_texts, out_dir, *, kind="sa", layers=1, heads=1, dim=32, vocab_size=DEFAULT_VOCAB,
                         spec: AttentionSpec | None = None, seed: int = 42, extra: dict | None = None) -> Path:
    """Tokenizer trained on ``train_texts`` + random MiniBERT encoder, saved at ``out_dir`` (training from scratch)."""
    from transformers import set_seed

    from attnkit.modeling import save_checkpoint

    set_seed(seed)
    tok = train_tokenizer(train_texts, vocab_size)
    model = new_mini(tok, kind=kind, layers=layers, heads=heads, dim=dim, spec=spec, masked_lm=False)
    return save_checkpoint(model, out_dir, tok, extra={"init": "random (no MLM)", **(extra or {})})


# ----------------------------------------------------------------------------- pre-training


@dataclass
class PretrainConfig:
    """Everything a pre-training run depends on; written to ``<output>/run_config.json``."""

    task: str = "semeval2013"
    data_dir: str | None = None
    kind: str = "sa"
    attention: str = "softmax"
    lam: float = 0.0
    layers: int = 1
    heads: int = 1
    dim: int = 32
    vocab_size: int = DEFAULT_VOCAB
    epochs: float = 10.0
    batch_size: int = 32
    lr: float = DEFAULT_MINI_LR
    max_length: int = 128
    mlm_probability: float = 0.15
    seed: int = 42
    output_dir: str = "runs/mini-pretrain"
    max_train_samples: int | None = None
    logging_steps: int = 50
    lemmatize: str | None = None  # language: the corpus is lemmatised (simplemma) before the tokenizer is trained

    def spec(self) -> AttentionSpec:
        from attnkit.attention import AttentionSpec

        return AttentionSpec(self.attention, self.lam)

    def validate(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"--kind {self.kind!r}: expected one of {', '.join(KINDS)} (MiniSA, MiniSSA, MiniNTA)")
        if self.lemmatize:
            from attnkit.lemmas import lemmatizer

            lemmatizer(self.lemmatize)
        self.spec()
        for name in ("layers", "heads", "dim", "batch_size", "max_length"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(self, name)}")
        if self.dim % self.heads:
            raise ValueError(f"--dim {self.dim} is not divisible by --heads {self.heads}")
        if self.max_length > MAX_POSITIONS:
            raise ValueError(f"--max-length {self.max_length}: MiniBERT has {MAX_POSITIONS} positions at most")
        if not 0 < self.mlm_probability < 1:
            raise ValueError(f"mlm_probability must be in (0, 1), got {self.mlm_probability}")


def mlm_collator(tokenizer, mlm_probability: float = 0.15, seed: int | None = None):
    """15% of the (non-special) tokens chosen; of those 80% -> [MASK], 10% -> random token, 10% kept."""
    from transformers import DataCollatorForLanguageModeling

    return DataCollatorForLanguageModeling(
        tokenizer, mlm=True, mlm_probability=mlm_probability, mask_replace_prob=0.8, random_replace_prob=0.1, seed=seed
    )


def pretrain(cfg: PretrainConfig) -> dict:
    """Tokenizer + MLM pre-training on the task's training text; returns the metrics dict."""
    import torch
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments, set_seed

    from attnkit.data import load_task
    from attnkit.mini import attention_parameter_count
    from attnkit.modeling import save_checkpoint
    from attnkit.train import write_json_atomic

    cfg.validate()
    set_seed(cfg.seed)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    data = load_task(cfg.task, cfg.data_dir)
    if "train" not in data.splits:
        raise ValueError(f"task {cfg.task} has no train split (it has {', '.join(data.splits)})")
    train = data.splits["train"]  # the ONLY text used here: dev/test are never read below
    if cfg.max_train_samples is not None and len(train) > cfg.max_train_samples:
        train = train.shuffle(seed=cfg.seed).select(range(cfg.max_train_samples))
    texts = list(train["text"])
    if "text_pair" in train.column_names:
        texts += list(train["text_pair"])
    if cfg.lemmatize:
        from attnkit.lemmas import lemmatizer

        lem = lemmatizer(cfg.lemmatize)
        texts = [lem(t) for t in texts]
    t0 = time.time()
    tok = train_tokenizer(texts, cfg.vocab_size)
    model = new_mini(tok, kind=cfg.kind, layers=cfg.layers, heads=cfg.heads, dim=cfg.dim, spec=cfg.spec())
    ds = Dataset.from_dict({"text": texts}).map(
        lambda b: tok(b["text"], truncation=True, max_length=cfg.max_length), batched=True, remove_columns=["text"],
        desc="tokenising",
    )
    args = TrainingArguments(
        output_dir=str(out / "trainer"),
        num_train_epochs=cfg.epochs,
        per_device_train_batch_size=cfg.batch_size,
        per_device_eval_batch_size=max(64, cfg.batch_size),
        learning_rate=cfg.lr,
        seed=cfg.seed,
        data_seed=cfg.seed,
        eval_strategy="no",
        save_strategy="no",
        logging_steps=cfg.logging_steps,
        report_to="none",
        disable_tqdm=False,
        dataloader_num_workers=0,
        prediction_loss_only=True,  # the MLM evaluation needs the loss, never V-sized logits
        use_cpu=not torch.cuda.is_available(),
    )
    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=mlm_collator(tok, cfg.mlm_probability),
                      processing_class=tok)
    result = trainer.train()
    # MLM loss on the training text, re-masked with a fixed seed (no dev/test text is ever used)
    trainer.data_collator = mlm_collator(tok, cfg.mlm_probability, seed=cfg.seed)
    final = trainer.evaluate(ds, metric_key_prefix="mlm")
    seconds = time.time() - t0
    n_params = sum(p.numel() for p in model.parameters())
    metrics = {
        "task": cfg.task,
        "kind": cfg.kind,
        "attention": cfg.spec().to_dict(),
        "shape": {"layers": cfg.layers, "heads": cfg.heads, "dim": cfg.dim},
        "vocab_size": len(tok),
        "train_texts": len(texts),
        "mlm_loss": float(final["mlm_loss"]),
        "train_loss": float(result.metrics.get("train_loss", float("nan"))),
        "loss_history": [
            {"epoch": h["epoch"], "loss": h["loss"]} for h in trainer.state.log_history if "loss" in h
        ],
        "parameters": n_params,
        "attention_parameters": attention_parameter_count(model),
        "seconds": seconds,
        "torch_threads": torch.get_num_threads(),
    }
    model_dir = save_checkpoint(model, out / "model", tok, extra={"task": cfg.task, "pretrained": "mlm", "kind": cfg.kind,
                                                                     "lemmatize": cfg.lemmatize})
    metrics["model_dir"] = str(model_dir)
    shutil.rmtree(out / "trainer", ignore_errors=True)  # nothing kept there (save_strategy="no")
    write_json_atomic(out / "run_config.json", asdict(cfg))
    write_json_atomic(out / "metrics.json", metrics)
    return metrics


# ----------------------------------------------------------------------------- CLI: pretrain


def add_pretrain_parser(sub) -> argparse.ArgumentParser:
    d = PretrainConfig()
    p = sub.add_parser(
        "pretrain",
        help="train a tokenizer and pre-train a MiniBERT (masked LM) on a task's training text",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--task", default=d.task, help=f"dataset whose TRAINING text is used (default {d.task})")
    p.add_argument("--data-dir", default=None, help="folder holding the datasets (default: $ATTNKIT_DATA or ../shared/data)")
    p.add_argument("--kind", default=d.kind, choices=KINDS, help="sa = MiniSA (Q,K,V), ssa = MiniSSA (Q only), nta = MiniNTA (none)")
    p.add_argument("--attention", default=d.attention, choices=list(NORMALISER_NAMES), help=f"normaliser (default {d.attention})")
    p.add_argument("--lam", type=float, default=d.lam, help="sparsegen-lin lam < 1 (default 0)")
    p.add_argument("--layers", type=int, default=d.layers, help=f"attention layers L (default {d.layers})")
    p.add_argument("--heads", type=int, default=d.heads, help=f"heads per layer H, splitting --dim (default {d.heads})")
    p.add_argument("--dim", type=int, default=d.dim, help=f"embedding size d (default {d.dim})")
    p.add_argument("--vocab-size", type=int, default=d.vocab_size, help=f"WordPiece vocabulary size (default {d.vocab_size})")
    p.add_argument("--epochs", type=float, default=d.epochs, help=f"MLM epochs (default {d.epochs:g})")
    p.add_argument("--batch-size", type=int, default=d.batch_size, help=f"batch size (default {d.batch_size})")
    p.add_argument("--lr", type=float, default=d.lr, help=f"learning rate (default {d.lr:g})")
    p.add_argument("--max-length", type=int, default=d.max_length, help=f"truncate texts to this many tokens (default {d.max_length})")
    p.add_argument("--max-train-samples", type=int, default=None, help="use a random subset of the training texts")
    p.add_argument("--seed", type=int, default=d.seed, help=f"random seed (default {d.seed})")
    p.add_argument("--output-dir", default=d.output_dir, help=f"run folder (default {d.output_dir}); the checkpoint goes to <it>/model")
    p.add_argument("--logging-steps", type=int, default=d.logging_steps)
    p.add_argument("--lemmatize", default=None, metavar="LANG", help="lemmatise the corpus first (simplemma: en, fr, de, ...); recorded with the model")
    return p


def cmd_pretrain(a) -> int:
    cfg = PretrainConfig(
        task=a.task, data_dir=a.data_dir, kind=a.kind, attention=a.attention, lam=a.lam, layers=a.layers, heads=a.heads,
        dim=a.dim, vocab_size=a.vocab_size, epochs=a.epochs, batch_size=a.batch_size, lr=a.lr, max_length=a.max_length,
        seed=a.seed, output_dir=a.output_dir, max_train_samples=a.max_train_samples, logging_steps=a.logging_steps,
        lemmatize=a.lemmatize,
    )
    cfg.validate()
    m = pretrain(cfg)
    print(f"\n[attnkit] MiniBERT {cfg.kind} {cfg.layers}x{cfg.heads}, d={cfg.dim}, {cfg.spec().describe()}; "
          f"{m['parameters']:,} parameters ({m['attention_parameters']:,} in attention), vocabulary {m['vocab_size']}")
    print(f"[attnkit] MLM loss on the training text {m['mlm_loss']:.4f} ({m['train_texts']} texts, {m['seconds']:.1f}s)")
    print(f"[attnkit] model + tokenizer written to {m['model_dir']}")
    print(f"[attnkit] metrics written to {Path(cfg.output_dir) / 'metrics.json'}")
    print(f"[attnkit] fine-tune with: attnkit train --task {cfg.task} --model {m['model_dir']}")
    return 0


# ----------------------------------------------------------------------------- CLI: train options for MiniBERT

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
    t.add_argument("--freeze", default=None, metavar="GROUPS",
                   help="comma-separated parameter groups not to train: embeddings, attention, encoder "
                        "(e.g. embeddings,attention = the MiniBERT paper's frozen variant; works for BERT models too)")


def _checkpoint_dir(model: str) -> Path | None:
    p = Path(str(model)).expanduser()
    if (p / "model" / "config.json").is_file():  # a run folder written by `attnkit pretrain`/`train`
        return p / "model"
    if (p / "config.json").is_file():
        return p
    return None


def checkpoint_spec(model: str) -> AttentionSpec | None:
    """The normaliser stored in a local checkpoint's config.json, if it has one."""
    d = _checkpoint_dir(model)
    if d is None:
        return None
    cfg = json.loads((d / "config.json").read_text())
    stored = cfg.get("attnkit")
    from attnkit.attention import AttentionSpec

    return AttentionSpec.from_dict(stored) if stored else None


def mini_train_settings(a, default_attention: str = "sparsegen-lin", default_lr: float = 2e-5) -> dict:
    """TrainConfig fields from the train command's arguments: model path, attention, lam, lr, MiniBERT shape, freeze."""
    from attnkit.freeze import parse_groups

    shape = {k: getattr(a, k, None) for k in ("kind", "layers", "heads", "dim", "vocab_size")}
    mini = is_mini_alias(a.model)
    given = [f"--{k.replace('_', '-')}" for k, v in shape.items() if v is not None]
    if given and not mini:
        raise ValueError(f"{', '.join(given)} only apply to --model mini (a checkpoint's architecture is fixed by its config.json)")
    for k in ("layers", "heads", "dim", "vocab_size"):
        if shape[k] is not None and shape[k] < 1:
            raise ValueError(f"--{k.replace('_', '-')} must be a positive integer, got {shape[k]}")
    if (shape["dim"] or 32) % (shape["heads"] or 1):
        raise ValueError(f"--dim {shape['dim'] or 32} is not divisible by --heads {shape['heads']}")
    model = a.model
    ckpt = None if mini else _checkpoint_dir(a.model)
    if ckpt is not None:
        model = str(ckpt)
    attention, lam = a.attention, a.lam
    if attention is None:
        stored = checkpoint_spec(model) if ckpt is not None else None
        if stored is not None:
            attention, lam = stored.attention, (lam if lam is not None else stored.lam)
        else:
            attention = "softmax" if mini else default_attention
    is_mini_ckpt = ckpt is not None and json.loads((ckpt / "config.json").read_text()).get("model_type") == "attnkit-mini"
    lr = a.lr if a.lr is not None else (DEFAULT_MINI_LR if (mini or is_mini_ckpt) else default_lr)
    out = {"model": model, "attention": attention, "lam": lam, "lr": lr, "freeze": ",".join(parse_groups(a.freeze)) or None}
    out.update({k: v for k, v in shape.items() if v is not None})
    return out
