"""SciTail (the SSAF paper's NLI set) read from files written here in the official layouts."""

import json

import pytest

from attnkit.tasks import DataFormatError, load_task
from attnkit.training.config import PAPER_EPOCHS, PAPER_LAM, TrainConfig

ROWS = [("The sun is a star.", "The sun is a star that gives light.", "entails"),
        ("Plants need water.", "Rocks are made of minerals.", "neutral")]


def _in(split: str) -> str:
    return "" if split == "train" else f" ({split})"


def write_tsv(root, rows=ROWS, splits=("train", "dev", "test")):
    d = root / "SciTailV1.1" / "tsv_format"
    d.mkdir(parents=True, exist_ok=True)
    for s in splits:  # dev and test premises end in their split's name: the very examples of train would be refused
        (d / f"scitail_1.0_{s}.tsv").write_text("".join(f"{p}{_in(s)}\t{h}\t{y}\n" for p, h, y in rows), encoding="utf-8")
    return root


def write_snli(root, rows=ROWS):
    d = root / "SciTailV1.1" / "snli_format"
    d.mkdir(parents=True, exist_ok=True)
    for s in ("train", "dev", "test"):
        lines = [json.dumps({"sentence1": p + _in(s), "sentence2": h, "gold_label": "entailment" if y == "entails" else y,
                             "sentence2_structure": "x"}) for p, h, y in rows]
        (d / f"scitail_1.0_{s}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


@pytest.mark.parametrize("writer", [write_tsv, write_snli])
def test_scitail_reads_both_formats_as_pairs(tmp_path, writer):
    data = load_task("scitail", writer(tmp_path))
    assert data.label_names == ["entails", "neutral"]
    assert set(data.splits) == {"train", "validation", "test"}
    tr = data.splits["train"]
    assert tr["text"] == [r[0] for r in ROWS] and tr["text_pair"] == [r[1] for r in ROWS] and tr["label"] == [0, 1]


def test_tsv_is_preferred_and_the_paper_settings_are_defaults(tmp_path):
    write_snli(tmp_path, rows=ROWS[:1])
    write_tsv(tmp_path)
    assert "tsv_format" in load_task("scitail", tmp_path).description
    assert len(load_task("scitail", tmp_path).splits["train"]) == 2
    assert PAPER_LAM["scitail"] == -6.0 and PAPER_EPOCHS["scitail"] == 3
    assert TrainConfig(task="scitail").spec().lam == -6.0
    from attnkit.cli.settings import train_config as _train_config
    from attnkit.cli.parser import build_parser

    assert _train_config(build_parser().parse_args(["train", "--task", "scitail"])).epochs == 3


@pytest.mark.parametrize("bad,needle", [
    ("a\tb\n", "expected 3 tab-separated fields"),
    ("a\tb\tcontradiction\n", "unknown label 'contradiction'"),
    ("\tb\tneutral\n", "empty field"),
])
def test_bad_tsv_rows_name_file_and_line(tmp_path, bad, needle):
    write_tsv(tmp_path)
    f = tmp_path / "SciTailV1.1/tsv_format/scitail_1.0_dev.tsv"
    f.write_text(f.read_text() + bad)
    with pytest.raises(DataFormatError, match=needle) as e:
        load_task("scitail", tmp_path)
    assert e.value.path == str(f) and e.value.line == 3


def test_bad_json_lines_name_file_and_line(tmp_path):
    write_snli(tmp_path)
    f = tmp_path / "SciTailV1.1/snli_format/scitail_1.0_train.txt"
    f.write_text(f.read_text() + json.dumps({"sentence1": "a", "gold_label": "neutral"}) + "\n")
    with pytest.raises(DataFormatError, match="sentence2") as e:
        load_task("scitail", tmp_path)
    assert e.value.line == 3
    f.write_text(json.dumps({"sentence1": "a", "sentence2": "b", "gold_label": "maybe"}) + "\n")
    with pytest.raises(DataFormatError, match="unknown gold_label 'maybe'"):
        load_task("scitail", tmp_path)


def test_missing_folder_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="SciTailV1.1"):
        load_task("scitail", tmp_path)


@pytest.mark.slow
def test_scitail_trains_and_predicts_through_the_cli(tiny_bert, tmp_path):
    from attnkit.cli import main

    write_tsv(tmp_path / "d", rows=ROWS * 8)
    out = tmp_path / "run"
    assert main(["train", "--task", "scitail", "--data-dir", str(tmp_path / "d"), "--model", str(tiny_bert), "--max-steps", "2",
                 "--batch-size", "8", "--max-length", "32", "--no-heatmap", "--output-dir", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    assert m["attention"]["lam"] == -6.0 and "test" in m and m["task"] == "scitail"
