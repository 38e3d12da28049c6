"""MiniBERT on a task's own text: tokenizer, masked-language-model pre-training.

``attnkit pretrain --task semeval2013 --kind ssa`` trains a lower-cased WordPiece tokenizer
on the task's **training** texts only (never dev/test), then pre-trains a MiniBERT with the
masked-language-model objective on those same texts (15% of tokens chosen; of those 80%
[MASK], 10% a random token, 10% kept: transformers' ``DataCollatorForLanguageModeling``),
and writes ``<output-dir>/model`` (model + tokenizer, atomically) and ``<output-dir>/metrics.json``.

``attnkit train --model <that folder>`` fine-tunes it; ``attnkit train --model mini --kind ssa``
trains a MiniBERT from scratch on the task (tokenizer from the training text, random weights,
no MLM).
"""

from __future__ import annotations

import logging
import math
import shutil
import time
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)
from transformers import (
    DataCollatorForLanguageModeling,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
    set_seed,
)

from attnkit.analysis.inference import text_lengths, truncation_line
from attnkit.attention.spec import AttentionSpec
from attnkit.errors import UserError
from attnkit.models.checkpoint import save_checkpoint
from attnkit.models.mini import MiniBertForMaskedLM, MiniBertModel, attention_parameter_count
from attnkit.models.mini_config import MiniShape, make_config
from attnkit.runfiles.atomic import rendezvous, write_json_atomic
from attnkit.runfiles.json_files import finite_record
from attnkit.tasks import load_task
from attnkit.tasks.lemmas import lemmatizer
from attnkit.training.config import (
    DEFAULT_VOCAB,
    MAX_POSITIONS,
    SPECIALS,
    PretrainConfig,
)
from attnkit.training.run_folder import finished_metrics, prepare_output, run_folder, settings_record
from attnkit.training.trainer import check_finite

log = logging.getLogger("attnkit")

# ----------------------------------------------------------------------------- tokenizer


def wordpiece_vocab(word_counts: dict[str, int], vocab_size: int, specials=SPECIALS, prefix: str = "##") -> dict[str, int]:
    """A WordPiece vocabulary learned from ``word_counts`` (word -> count), the same for the same input in any process.

    The ``tokenizers`` WordPiece trainer breaks ties between equally frequent pairs by ids that follow a Rust hash
    map's iteration order, which is seeded per process: the same text gave two vocabularies (different ids, even
    different pieces) in two runs. Here the merges are the same BPE-style rule, done in Python with every tie broken
    by the pieces themselves:

    * ids: ``specials`` first, then the alphabet sorted (word-initial characters, then ``##`` + the characters seen
      inside words), then one piece per merge, in merge order;
    * each step merges the most frequent adjacent pair (count = sum over the words containing it of the word's
      count); ties go to the pair that sorts first; merging ``a`` and ``##b`` gives ``ab``;
    * it stops at ``vocab_size`` pieces or when no word has two pieces left.
    """
    import heapq

    words = sorted((w, c) for w, c in word_counts.items() if w)
    syms = [[w[0]] + [prefix + ch for ch in w[1:]] for w, _ in words]  # each word as its characters
    counts = [c for _, c in words]
    vocab: dict[str, int] = {}
    for t in list(specials) + sorted({s for w in syms for s in w if not s.startswith(prefix)}) + sorted(
            {s for w in syms for s in w if s.startswith(prefix)}):
        vocab.setdefault(t, len(vocab))
    pair_count: dict[tuple[str, str], int] = {}
    pair_words: dict[tuple[str, str], set[int]] = {}

    def add(i: int, sign: int) -> set:
        w, c, touched = syms[i], counts[i], set()
        for pair in zip(w, w[1:]):
            pair_count[pair] = pair_count.get(pair, 0) + sign * c
            (pair_words.setdefault(pair, set()).add if sign > 0 else pair_words.setdefault(pair, set()).discard)(i)
            touched.add(pair)
        return touched

    for i in range(len(syms)):
        add(i, +1)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    while len(vocab) < vocab_size and heap:
        neg, pair = heapq.heappop(heap)
        if pair_count.get(pair, 0) != -neg or -neg <= 0:
            continue  # a stale entry: the count changed since it was pushed
        a, b = pair
        merged = a + b[len(prefix):] if b.startswith(prefix) else a + b
        touched = set()
        for i in sorted(pair_words.get(pair, ())):
            touched |= add(i, -1)
            w, out, j = syms[i], [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == a and w[j + 1] == b:
                    out.append(merged)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            syms[i] = out
            touched |= add(i, +1)
        vocab.setdefault(merged, len(vocab))
        for p in touched:
            if pair_count.get(p, 0) > 0:
                heapq.heappush(heap, (-pair_count[p], p))
    return vocab


def train_tokenizer(texts, vocab_size: int = DEFAULT_VOCAB, max_length: int = MAX_POSITIONS):
    """A lower-cased WordPiece tokenizer trained on ``texts`` alone, as a transformers fast tokenizer.

    Characters that never occur in ``texts`` are not in the alphabet: they become [UNK]. The vocabulary is
    :func:`wordpiece_vocab`'s, so the same texts give the same ids in every process.
    Reload it with ``AutoTokenizer.from_pretrained(dir)`` after ``save_pretrained(dir)``.
    """
    if vocab_size < len(SPECIALS) + 1:
        raise UserError(f"--vocab-size {vocab_size}: must be larger than the {len(SPECIALS)} special tokens")
    texts = [t for t in texts if t and t.strip()]
    if not texts:
        raise UserError("no training text to build the tokenizer from")
    normalizer = normalizers.BertNormalizer(lowercase=True, clean_text=True, handle_chinese_chars=True)
    pre = pre_tokenizers.BertPreTokenizer()
    word_counts: dict[str, int] = {}
    for t in texts:
        for w, _ in pre.pre_tokenize_str(normalizer.normalize_str(t)):
            word_counts[w] = word_counts.get(w, 0) + 1
    vocab = wordpiece_vocab(word_counts, vocab_size)
    if len(vocab) > vocab_size:  # every character of the texts is kept: the alphabet alone is larger
        log.warning("note: --vocab-size %d is below what the texts' characters and the special tokens need: the vocabulary "
                    "has %d entries", vocab_size, len(vocab))
    tk = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tk.normalizer = normalizer
    tk.pre_tokenizer = pre
    tk.decoder = decoders.WordPiece()
    cls, sep = tk.token_to_id("[CLS]"), tk.token_to_id("[SEP]")
    tk.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tk, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"], model_max_length=max_length,
    )


def new_mini(tokenizer, shape: MiniShape, spec: AttentionSpec | None = None, masked_lm=True):
    """A randomly initialised MiniBERT of ``shape``, sized to ``tokenizer``'s vocabulary."""
    cfg = make_config(len(tokenizer), kind=shape.kind, layers=shape.layers, heads=shape.heads, dim=shape.dim, spec=spec,
                      pad_token_id=tokenizer.pad_token_id, max_position_embeddings=MAX_POSITIONS,
                      score_scale=shape.score_scale, head_mode=shape.head_mode)
    return MiniBertForMaskedLM(cfg) if masked_lm else MiniBertModel(cfg)


def init_mini_checkpoint(train_texts, out_dir, shape: MiniShape, spec: AttentionSpec | None = None, *, seed: int = 42,
                         extra: dict | None = None) -> Path:
    """Tokenizer trained on ``train_texts`` + random MiniBERT encoder of ``shape``, saved at ``out_dir`` (training
    from scratch)."""
    set_seed(seed)
    tok = train_tokenizer(train_texts, shape.vocab_size)
    model = new_mini(tok, shape, spec, masked_lm=False)
    return save_checkpoint(model, out_dir, tok, extra={"init": "random (no MLM)", **(extra or {})})


# ----------------------------------------------------------------------------- pre-training


class EveryBatchMasks(DataCollatorForLanguageModeling):
    """transformers' MLM collator, whose every batch masks at least one token: a batch whose draw chose none is drawn
    again (from the same generator). Its loss would be 0 / 0: the Trainer logs such a step as loss 0 (or as the mean
    of the steps before it) and an evaluation over such a batch as NaN. A draw that masks something is kept as it is."""

    REDRAWS = 1000

    def torch_call(self, examples):
        for _ in range(self.REDRAWS):
            batch = super().torch_call(examples)
            if bool((batch["labels"] != -100).any()):
                return batch
        raise UserError(f"a batch of {len(examples)} texts holds no token that can be masked (only special tokens such "
                         "as [CLS], [SEP], [UNK]): nothing to learn from")


def mlm_collator(tokenizer, mlm_probability: float = 0.15, seed: int | None = None):
    """15% of the (non-special) tokens chosen; of those 80% -> [MASK], 10% -> random token, 10% kept; a batch that
    would mask nothing is drawn again (:class:`EveryBatchMasks`)."""
    return EveryBatchMasks(
        tokenizer, mlm=True, mlm_probability=mlm_probability, mask_replace_prob=0.8, random_replace_prob=0.1, seed=seed
    )


def say_texts_cut(ds, texts: list[str], tokenizer, max_length: int, what: str) -> int:
    """How many of ``texts`` (tokenised in ``ds``, cut at ``max_length``) are longer than the tokens of text it leaves
    beside the special ones: masked-LM reads only their first tokens. Said in one line where any is; returned for
    the run's record."""
    lengths = text_lengths(tokenizer, ds["input_ids"], (texts,), max_length)
    room = max_length - tokenizer.num_special_tokens_to_add(False)
    cut = sum(n > room for n in lengths)
    if cut:
        log.warning("%s", truncation_line(f"{cut} of {len(texts)} {what} {'were' if cut > 1 else 'was'}", cut > 1,
                                          max(lengths), max_length, room))
    return cut


def check_maskable(ds, tokenizer, mlm_probability: float, what: str) -> None:
    """Refuse (ValueError, one line) texts too small to mask: fewer tokens that can be masked (not [CLS], [SEP], ...)
    than one masked token per pass over them at ``mlm_probability``. ``ds``: the tokenised texts (``input_ids``)."""
    special, need, n = set(tokenizer.all_special_ids), math.ceil(1 / mlm_probability), 0
    for batch in ds.iter(batch_size=256):  # read as far as needed: a real corpus is done within its first texts
        for ids in batch["input_ids"]:
            n += sum(1 for i in ids if i not in special)
            if n >= need:
                return
    raise UserError(f"{what} hold only {n} token(s) that can be masked: at a masking share of "
                     f"{mlm_probability:g} a pass over them masks {n * mlm_probability:.2g} on average, less than one, so "
                     f"there is nothing to learn or to measure the MLM loss on: give more text (at least {need} tokens)")


def pretrain(cfg: PretrainConfig) -> dict:
    """Tokenizer + MLM pre-training on the task's training text; returns the metrics dict.

    As ``attnkit train``: the run folder is locked; a finished run there with the same settings is returned as it is,
    one with other settings refused (``cfg.resume`` off moves it aside when training starts)."""
    cfg.validate()
    with run_folder(Path(cfg.output_dir)) as out:
        done = finished_metrics(cfg, out, free=("output_dir", "resume", "logging_steps"))
        if done is not None:
            return done | {"already_complete": True}
        return _pretrain(cfg, out)


def _training_texts(cfg: PretrainConfig) -> list[str]:
    """The task's training texts (both sides of a pair), subsampled and lemmatised as asked. The ONLY text pre-training
    reads: dev and test are never read."""
    data = load_task(cfg.task, cfg.data_dir)
    if "train" not in data.splits:
        raise UserError(f"task {cfg.task} has no train split (it has {', '.join(data.splits)})")
    train = data.splits["train"]
    if cfg.max_train_samples is not None and len(train) > cfg.max_train_samples:
        train = train.shuffle(seed=cfg.seed).select(range(cfg.max_train_samples))
    texts = list(train["text"])
    if "text_pair" in train.column_names:
        texts += list(train["text_pair"])
    if cfg.lemmatize:
        lem = lemmatizer(cfg.lemmatize)
        texts = [lem(t) for t in texts]
    return texts


def _pretraining_arguments(cfg: PretrainConfig, out: Path) -> TrainingArguments:
    with rendezvous():  # torchrun's processes meet here
        return TrainingArguments(
            output_dir=str(out / "trainer"), num_train_epochs=cfg.epochs, per_device_train_batch_size=cfg.batch_size,
            per_device_eval_batch_size=max(64, cfg.batch_size), learning_rate=cfg.lr, seed=cfg.seed, data_seed=cfg.seed,
            eval_strategy="no", save_strategy="no", logging_steps=cfg.logging_steps, report_to="none", disable_tqdm=False,
            dataloader_num_workers=0,
            prediction_loss_only=True,  # the MLM evaluation needs the loss, never V-sized logits
            use_cpu=not torch.cuda.is_available(),
        )


def _pretrain(cfg: PretrainConfig, out: Path) -> dict:
    set_seed(cfg.seed)
    texts = _training_texts(cfg)
    t0 = time.time()
    tok = train_tokenizer(texts, cfg.vocab_size)
    model = new_mini(tok, cfg.shape(), cfg.spec())
    ds = Dataset.from_dict({"text": texts}).map(
        lambda b: tok(b["text"], truncation=True, max_length=cfg.max_length), batched=True, remove_columns=["text"],
        desc="tokenising",
    )
    check_maskable(ds, tok, cfg.mlm_probability, f"the training texts of task {cfg.task} ({len(texts)})")
    cut = say_texts_cut(ds, texts, tok, cfg.max_length, "training texts")
    args = _pretraining_arguments(cfg, out)
    trainer = Trainer(model=model, args=args, train_dataset=ds, data_collator=mlm_collator(tok, cfg.mlm_probability),
                      processing_class=tok)
    prepare_output(cfg, out, keep=())  # everything before training worked: only now is an earlier run moved aside
    result = trainer.train()
    check_finite(model, cfg, list(trainer.state.log_history))
    # MLM loss on the training text, re-masked with a fixed seed (no dev/test text is ever used)
    trainer.data_collator = mlm_collator(tok, cfg.mlm_probability, seed=cfg.seed)
    final = trainer.evaluate(ds, metric_key_prefix="mlm")
    seconds = time.time() - t0
    n_params = sum(p.numel() for p in model.parameters())
    metrics = {
        "task": cfg.task,
        "kind": cfg.kind,
        "attention": cfg.spec().to_dict(),
        "shape": {"layers": cfg.layers, "heads": cfg.heads, "dim": cfg.dim, "head_mode": cfg.head_mode,
                  "score_scale": cfg.score_scale},
        "vocab_size": len(tok),
        "train_texts": len(texts),
        "texts_cut": cut,  # longer than --max-length reads: masked-LM read their first tokens only
        "mlm_loss": float(final["mlm_loss"]),
        "train_loss": result.metrics.get("train_loss"),  # None, not NaN, where the Trainer did not give it
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
    write_json_atomic(out / "run_config.json", settings_record(cfg))
    write_json_atomic(out / "metrics.json", finite_record(metrics))
    return metrics
