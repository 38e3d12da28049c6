"""Plain helpers the tests share (fixtures are in conftest.py): tiny checkpoints and tasks written on the fly, the
sparse-map paths, the error line a command prints, a byte-for-byte snapshot of a folder, and the argument lists of
the small training runs the tests start. Imported as ``from helpers import ...`` (pyproject puts tests/ on the path)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

SHARED_DATA = (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()


WORDS = (
    "good great fine superb lovely fun best wonderful bad awful poor boring worst dull terrible movie film plot "
    "actor story the a an is was and but not very really it this that of to"
).split()


def make_tiny_bert(path: Path, family: str = "bert", layers: int = 2, hidden: int = 32, heads: int = 4) -> Path:
    """A randomly initialised encoder (``family``: bert, roberta, deberta-v2, mpnet) + WordPiece tokenizer saved as a
    local checkpoint."""
    import torch
    from transformers import (
        BertConfig,
        BertModel,
        BertTokenizerFast,
        RobertaConfig,
        RobertaModel,
    )

    torch.manual_seed(0)
    path.mkdir(parents=True, exist_ok=True)
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS + [f"##{c}" for c in "abcdefghijklmnopqrstuvwxyz"] + list("abcdefghijklmnopqrstuvwxyz.,!?'")
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    kw = dict(vocab_size=len(vocab), hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
              intermediate_size=2 * hidden, max_position_embeddings=64)
    if family == "bert":
        model = BertModel(BertConfig(**kw))
    elif family == "roberta":
        model = RobertaModel(RobertaConfig(**kw, pad_token_id=0, bos_token_id=2, eos_token_id=3))
    elif family == "deberta-v2":  # DeBERTa-v3's relative-position settings
        from transformers import DebertaV2Config, DebertaV2Model

        model = DebertaV2Model(DebertaV2Config(**kw, relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=16,
                                               max_relative_positions=32, share_att_key=True, norm_rel_ebd="layer_norm",
                                               pad_token_id=0))
    else:
        from transformers import MPNetConfig, MPNetModel

        model = MPNetModel(MPNetConfig(**dict(kw, max_position_embeddings=66), pad_token_id=0))
    model.save_pretrained(path)
    tok = BertTokenizerFast(vocab={w: i for i, w in enumerate(vocab)}, do_lower_case=True)
    assert tok.convert_tokens_to_ids("good") == vocab.index("good")
    tok.save_pretrained(path)
    return path


def use_backend(name: str, monkeypatch) -> None:
    """Run the sparse maps on one path: "cpp" (the compiled CPU kernel), "torch" (pure torch), "triton" (Triton
    kernels, interpreted on the CPU); skips where that path is not available here."""
    import importlib.util

    from attnkit.attention import kernels

    if name == "torch":
        monkeypatch.setattr(kernels, "kernel_applies", lambda t: False)
    elif name == "triton":
        if importlib.util.find_spec("triton") is None:
            pytest.skip("triton is not installed (pip install -e '.[gpu]'): the Triton kernels are not tested here")
        monkeypatch.setattr(kernels, "MODE", "triton")
        if kernels.triton_kernels() is None:
            pytest.skip(f"Triton kernels unavailable: {kernels.backend_reason()}")
    elif kernels.backend() != "cpp":
        pytest.skip(f"compiled kernel not available here: {kernels.backend_reason()}")


def logits_of(model, tok, texts, **kw):
    """The model's outputs on ``texts`` (padded batch), in eval mode without gradients."""
    import torch

    model.eval()
    with torch.no_grad():
        return model(**tok(texts, padding=True, return_tensors="pt"), **kw)


def write_tiny_sentiment(dirpath: Path, n_train: int = 96, n_dev: int = 32, seed: int = 0) -> Path:
    """A learnable two-class csv task: positive words vs negative words."""
    import random

    rng = random.Random(seed)
    pos, neg = WORDS[:8], WORDS[8:15]
    filler = WORDS[15:]

    def rows(n):
        out = []
        for i in range(n):
            y = i % 2
            words = rng.sample(filler, 3) + [rng.choice(pos if y else neg)] + rng.sample(filler, 2)
            rng.shuffle(words)
            out.append((" ".join(words), "positive" if y else "negative"))
        return out

    dirpath.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.csv", n_train), ("dev.csv", n_dev)):
        with open(dirpath / name, "w", encoding="utf-8") as f:
            f.write("text,label\n")
            for t, y in rows(n):
                f.write(f"{t},{y}\n")
    return dirpath


def require_shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared datasets not found at {SHARED_DATA}: these tests read ../shared/data next to the repo")
    return SHARED_DATA


def one_line_error(capsys, *needles) -> str:
    """The command's error: one line (progress bars of the steps before it aside) holding every needle."""
    err = capsys.readouterr().err
    lines = [l for l in err.replace("\r", "\n").splitlines() if l.startswith("attnkit ")]
    assert len(lines) == 1 and " error: " in lines[0], err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones and temporaries included) with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def the_error(err: str, *needles) -> str:
    """The one error line on stderr (progress bars around it aside), holding every needle; no traceback anywhere, and
    no temporary file named in it."""
    import re

    assert "Traceback" not in err, err
    lines = [m.group(0) for m in re.finditer(r"attnkit [\w-]+: error: [^\r\n]*", err)]
    assert len(lines) == 1, err[-3000:]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    assert ".tmp-" not in lines[0], lines[0]
    return lines[0]


def write_tiny_rte(folder: Path) -> Path:
    """A tiny GLUE RTE folder under ``folder`` (16 train, 4 dev, 3 unlabelled test pairs); returns ``folder``."""
    d = folder / "glue" / "RTE"
    d.mkdir(parents=True)
    rows = [("a good film", "the film is good", "entailment"), ("a bad film", "the film is good", "not_entailment")]
    for name, n in (("train.tsv", 16), ("dev.tsv", 4)):
        (d / name).write_text("index\tsentence1\tsentence2\tlabel\n" + "".join(
            f"{i}\t{rows[i % 2][0]}\t{rows[i % 2][1]}\t{rows[i % 2][2]}\n" for i in range(n)))
    (d / "test.tsv").write_text("index\tsentence1\tsentence2\n" + "".join(f"{i}\t{rows[i % 2][0]}\t{rows[i % 2][1]}\n" for i in range(3)))
    return folder


def snapshot_without_lock(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` (hidden ones included) with its bytes, the run folder's lock file aside."""
    from attnkit.runfiles.names import LOCK_FILE

    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and p.name != LOCK_FILE}


def only_stderr_line(capsys, *needles) -> str:
    """stderr holds one line (no traceback), with every needle."""
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err
    for n in needles:
        assert n in err, (n, err)
    return err


def error_line(capsys, *needles) -> str:
    """The one error line on stderr, as ``the_error`` reads it."""
    return the_error(capsys.readouterr().err, *needles)


def write_csv_task(folder: Path, train_rows, dev_rows) -> Path:
    """A csv task in ``folder``: train.csv and dev.csv with the given (text, label) rows."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train.csv", train_rows), ("dev.csv", dev_rows)):
        (folder / name).write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows))
    return folder


def strict_json(path: Path):
    """The file's JSON, refusing NaN and infinities (which Python's json would read without a word)."""
    def refuse(name):
        raise AssertionError(f"{path} holds {name}: not strict JSON")
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=refuse)


def merged(*parts) -> list[str]:
    """The arguments of ``parts`` in turn (a command, then ``--option value...`` groups), a later option replacing an
    earlier one with its values: attnkit refuses an option given twice, and the tests' extras override the defaults."""
    head, groups = [], {}
    for t in (str(x) for part in parts for x in part):
        if t.startswith("--"):
            last = (t, len(groups)) if head[:1] == ["adapt"] and t in ("--task", "--text-file") else t  # (repeatable)
            groups.pop(last, None)  # (re-inserted at the end: the later value, in the later place)
            groups[last] = [t]
        elif groups:
            groups[last].append(t)
        else:
            head.append(t)
    return head + [t for g in groups.values() for t in g]


def train_args(model, data, out, *extra) -> list[str]:
    """``attnkit train`` on a csv task with a tiny model: batch 16, lr 3e-3, 16 tokens, no heatmap."""
    return merged(["train", "--task", "csv", "--data-dir", str(data), "--model", str(model), "--output-dir", str(out),
                   "--batch-size", "16", "--lr", "3e-3", "--max-length", "16", "--no-heatmap"], extra)


def two_step_train_args(model, data, out, *extra) -> list[str]:
    """``train_args`` for a run of 2 steps, evaluated at step 2."""
    return train_args(model, data, out, "--max-steps", "2", "--eval-steps", "2", *extra)


def four_step_train_args(model, data, out, *extra) -> list[str]:
    """``train_args`` for a run of 4 steps, evaluated every 2."""
    return train_args(model, data, out, "--max-steps", "4", "--eval-steps", "2", *extra)


def leftovers(out: Path) -> list[str]:
    """Half-written or temporary entries attnkit might leave in a run folder."""
    return sorted(p.name for p in out.iterdir() if ".tmp" in p.name or ".old-" in p.name or ".del-" in p.name
                  or p.name.startswith(".incomplete"))


def copy_run(run: Path, where: Path) -> Path:
    """A copy of the run folder ``run`` at ``where`` (links kept as links)."""
    shutil.copytree(run, where, symlinks=True)
    return where


def untimed(d: dict) -> dict:
    """The metrics in ``d`` that do not depend on the clock."""
    return {k: v for k, v in d.items() if "runtime" not in k and "per_second" not in k and not k.endswith("_time")}


def same_metrics(m: dict, reference: dict) -> None:
    """The metrics ``m`` are those of ``reference`` (clock-dependent ones aside)."""
    assert untimed(m["validation"]) == untimed(reference["validation"])
    assert m["train"]["train_loss"] == pytest.approx(reference["train"]["train_loss"], rel=1e-6)
    history, want = [untimed(h) for h in m["log_history"]], [untimed(h) for h in reference["log_history"]]
    assert len(history) == len(want) and all(h == pytest.approx(w, rel=1e-6) for h, w in zip(history, want)), (history, want)
    assert m["best_step"] == reference["best_step"]


def write_run_record(out, *checkpoints):
    """attnkit's record of a run in ``out`` that wrote ``checkpoints`` (as a run writes it when it starts)."""
    from attnkit.runfiles.names import RUN_RECORD

    (out / RUN_RECORD).write_text(json.dumps({"written_by": "attnkit train", "checkpoints": list(checkpoints)}))


def one_line_error_without(capsys, *needles, absent=()) -> str:
    """The command's error: one line (progress bars aside) holding every needle and none of ``absent``."""
    err = capsys.readouterr().err
    lines = [l for l in err.replace("\r", "\n").splitlines() if l.startswith("attnkit ")]
    assert len(lines) == 1 and " error: " in lines[0] and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], (n, lines[0])
    for n in absent:
        assert n not in lines[0], (n, lines[0])
    return lines[0]


def batch_8_args(model, data) -> list[str]:
    """The task and model options of a tiny csv run at batch 8 and 16 tokens."""
    return ["--task", "csv", "--data-dir", str(data), "--model", str(model), "--max-length", "16", "--batch-size", "8"]


def batch_8_train_args(model, data, out, *extra) -> list[str]:
    """``attnkit train`` for 2 steps at batch 8, evaluated at step 2."""
    return merged(["train", *batch_8_args(model, data), "--output-dir", str(out), "--max-steps", "2", "--eval-steps", "2", "--no-heatmap"], extra)


def save_tiny_classifier(encoder, out: Path, spec, labels: list[str], task: str = "csv", max_length: int = 16) -> Path:
    """A classifier on ``encoder`` with attention ``spec`` (seed 0), saved to ``out`` as `attnkit train` saves it."""
    import torch

    from attnkit.models.build import build_classifier
    from attnkit.models.checkpoint import load_tokenizer, save_checkpoint

    torch.manual_seed(0)
    net = build_classifier(str(encoder), len(labels), spec, label_names=labels)
    save_checkpoint(net, out, tokenizer=load_tokenizer(str(encoder)), extra={"task": task, "max_length": max_length})
    return out

