"""The Stanford Sentiment Treebank: SST-2 (GLUE's files), SST-5 from its PTB trees (sentences, or phrases and sentences),
SST-2 from the trees (``sst2-ptb``), and the trees' phrase labels as rationales. PTB escapes are undone.
"""

from __future__ import annotations
import re
from dataclasses import dataclass, field
from pathlib import Path
from attnkit.errors import DataFormatError, UserError
from attnkit.tasks.readers import (
    expect_header,
    read_delimited,
    read_lines,
    require_dir,
    require_file,
    to_splits,
)
from attnkit.tasks.registry import (
    SPLIT_STEMS,
    UNLABELLED,
    Example,
    TaskData,
    register_task,
)


SST5_LABELS = ["very negative", "negative", "neutral", "positive", "very positive"]
BINARY_SENTIMENT = ["negative", "positive"]


def _read_sst2_file(path: Path, labelled: bool) -> list[Example]:
    """A GLUE SST-2 tsv: header ``sentence\\tlabel`` (test: ``index\\tsentence``), no quoting."""
    header = ["sentence", "label"] if labelled else ["index", "sentence"]
    records = read_delimited(path, "\t")
    line, found = next(records, (1, []))
    expect_header(path, line, found, header)
    rows: list[Example] = []
    for line, fields in records:
        if len(fields) != 2:
            raise DataFormatError(path, line, f"expected 2 tab-separated fields ({', '.join(header)}), found {len(fields)}")
        text = fields[header.index("sentence")].strip()  # GLUE sentences end with a space
        if not text:
            raise DataFormatError(path, line, "expected a sentence, found an empty field")
        if not labelled:
            rows.append(Example(text, UNLABELLED))
            continue
        label = fields[1].strip()
        if label not in ("0", "1"):
            raise DataFormatError(path, line, f"expected label 0 or 1, found {fields[1]!r}")
        rows.append(Example(text, int(label)))
    return rows


@register_task("sst2", "glue/SST-2")
def load_sst2(data_dir: Path | None) -> TaskData:
    """GLUE SST-2 from ``glue/SST-2/{train,dev,test}.tsv``; test (unlabelled, label -1) only if present."""
    folder = require_dir(data_dir, "glue/SST-2", "sst2")
    splits = {}
    for split, stem in SPLIT_STEMS.items():
        path = folder / f"{stem}.tsv"
        if split == "test" and not path.is_file():
            continue
        splits[split] = _read_sst2_file(require_file(path, "sst2"), labelled=split != "test")
    desc = "GLUE SST-2 (dev.tsv as validation; test unlabelled)"
    return TaskData("sst2", to_splits(splits), list(BINARY_SENTIMENT), desc, submission={"test": "SST-2.tsv"})

PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}"}

_PTB_TOKEN = re.compile(r"\(|\)|[^ \t()]+")  # not \s: SST leaves may hold a no-break space ("2\xa01\/2")


def unescape_ptb(word: str) -> str:
    """``-LRB-`` -> ``(`` etc., and the backslash escapes ``\\/`` -> ``/``, ``\\*`` -> ``*``."""
    word = PTB_ESCAPES.get(word, word)
    return word.replace("\\/", "/").replace("\\*", "*")


@dataclass
class PTBNode:
    """A labelled tree node: a leaf has a ``word``; an inner node has ``children``."""

    label: int
    children: list[PTBNode] = field(default_factory=list)
    word: str | None = None

    def leaves(self) -> list[str]:
        """The (unescaped) words under this node, left to right."""
        if self.word is not None:
            return [self.word]
        return [w for child in self.children for w in child.leaves()]

    def text(self) -> str:
        return " ".join(self.leaves())

    def phrases(self) -> list[tuple[int, str]]:
        """``(label, text)`` of every node in pre-order: the whole sentence first, then its parts."""
        out: list[tuple[int, str] | None] = []

        def visit(node: PTBNode) -> list[str]:
            slot = len(out)
            out.append(None)  # reserve the slot, so a node comes before its children
            words = [node.word] if node.word is not None else [w for c in node.children for w in visit(c)]
            out[slot] = (node.label, " ".join(words))
            return words

        visit(self)
        return out  # type: ignore[return-value]


class _PTBParser:
    """Recursive descent over ``( LABEL WORD )`` / ``( LABEL TREE+ )`` tokens."""

    def __init__(self, s: str, max_label: int):
        self.tokens = [(m.group(), m.start() + 1) for m in _PTB_TOKEN.finditer(s)]
        self.pos = 0
        self.max_label = max_label
        self.end = len(s) + 1

    def _peek(self) -> tuple[str | None, int]:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else (None, self.end)

    @staticmethod
    def _found(tok: str | None) -> str:
        return "the end of the line" if tok is None else repr(tok)

    def _take(self, expected: str) -> None:
        tok, col = self._peek()
        if tok != expected:
            what = "unbalanced parentheses: " if expected == ")" and tok is None else ""
            raise UserError(f"{what}expected {expected!r} at column {col}, found {self._found(tok)}")
        self.pos += 1

    def parse(self) -> PTBNode:
        node = self._node()
        tok, col = self._peek()
        if tok is not None:
            raise UserError(f"expected the end of the tree at column {col}, found {tok!r}")
        return node

    def _node(self) -> PTBNode:
        self._take("(")
        tok, col = self._peek()
        if tok is None or not (tok.isascii() and tok.isdigit()) or int(tok) > self.max_label:
            raise UserError(f"expected a label 0-{self.max_label} at column {col}, found {self._found(tok)}")
        self.pos += 1
        node = PTBNode(int(tok))
        tok, col = self._peek()
        if tok == "(":
            while self._peek()[0] == "(":
                node.children.append(self._node())
        elif tok is not None and tok != ")":
            node.word = unescape_ptb(tok)
            self.pos += 1
        else:
            raise UserError(f"expected a word or '(' at column {col}, found {self._found(tok)}")
        self._take(")")
        return node


def parse_ptb(s: str, max_label: int = 4) -> PTBNode:
    """Parse one labelled PTB tree such as ``(3 (2 It) (4 (2 's) (4 great)))``.

    Raises ValueError (with the 1-based column) on a malformed tree: unbalanced
    parentheses, a missing or out-of-range label, an empty node, text after the tree.
    """
    try:
        return _PTBParser(s, max_label).parse()
    except RecursionError:
        raise UserError("tree nested too deeply") from None


def _binary(label: int) -> int | None:
    """SST-5 label -> SST-2 label: 0/1 negative, 3/4 positive, neutral (2) dropped."""
    return None if label == 2 else int(label > 2)


def _read_trees(path: Path):
    """The PTB trees of a file, one a line (blank lines skipped); a bad tree names its file and line."""
    for line, s in read_lines(path):
        if not s.strip():
            continue
        try:
            yield parse_ptb(s.strip())
        except ValueError as e:
            raise DataFormatError(path, line, f"bad PTB tree: {e}") from None


def _read_ptb_file(path: Path, phrases: bool, binary: bool = False) -> list[Example]:
    """One tree a line -> sentences (root label), or every labelled node deduplicated by text.

    ``binary``: the SST-2 view (labels through ``_binary``, neutral sentences and phrases left out).
    """
    rows: list[Example] = []
    seen: set[str] = set()
    trees = 0
    for tree in _read_trees(path):
        trees += 1
        nodes = tree.phrases() if phrases else [(tree.label, tree.text())]
        for label, text in nodes:
            if binary and (label := _binary(label)) is None:
                continue
            if phrases and text in seen:
                continue
            seen.add(text)
            rows.append(Example(text, label))
    if binary and trees and not rows:  # (else "the validation split has no examples", naming neither file nor why)
        raise DataFormatError(path, None, f"holds {trees} tree{'s' * (trees > 1)}, all neutral (root label 2), which the "
                              "binary task (SST-2) leaves out: no sentence is left; sst5 reads them all")
    return rows


def _load_sst5(data_dir: Path | None, task: str, phrase_train: bool) -> TaskData:
    folder = require_dir(data_dir, "sst5_ptb", task)
    splits = {
        split: _read_ptb_file(require_file(folder / f"{stem}.txt", task), phrases=phrase_train and split == "train")
        for split, stem in SPLIT_STEMS.items()
    }
    if phrase_train:
        how = (
            "train = every labelled phrase node (sub-phrases and sentences, deduplicated by text, first kept); "
            "dev/test = sentences"
        )
    else:
        how = "sentences with their root labels"
    return TaskData(task, to_splits(splits), list(SST5_LABELS), f"SST-5 from the PTB trees in sst5_ptb/: {how}")


@register_task("sst5", "sst5_ptb")
def load_sst5(data_dir: Path | None) -> TaskData:
    """SST-5 sentence level: root label and leaves of each tree in ``sst5_ptb/{train,dev,test}.txt``."""
    return _load_sst5(data_dir, "sst5", phrase_train=False)


@register_task("sst5-phrases", "sst5_ptb")
def load_sst5_phrases(data_dir: Path | None) -> TaskData:
    """SST-5 with phrase-level training (as Cui et al.): train holds every labelled node, dev/test sentences."""
    return _load_sst5(data_dir, "sst5-phrases", phrase_train=True)


@register_task("sst2-ptb", "sst5_ptb")
def load_sst2_ptb(data_dir: Path | None) -> TaskData:
    """SST-2 from the PTB trees: the binary sentence-level view with labelled dev *and test* (GLUE's test has none).

    Root labels 0/1 are negative, 3/4 positive, neutral sentences are left out: 6,920 / 872 / 1,821 sentences, the
    standard SST-2 sizes (GLUE's dev and test are the same sentences; GLUE's train adds 67k phrases, not used here).
    """
    folder = require_dir(data_dir, "sst5_ptb", "sst2-ptb")
    splits = {split: _read_ptb_file(require_file(folder / f"{stem}.txt", "sst2-ptb"), phrases=False, binary=True)
              for split, stem in SPLIT_STEMS.items()}
    desc = "SST-2 from the PTB trees in sst5_ptb/: sentences, root 0/1 negative, 3/4 positive, neutral left out"
    return TaskData("sst2-ptb", to_splits(splits), list(BINARY_SENTIMENT), desc)


def sst_rationales(data_dir: Path | None, split: str = "test") -> list[tuple[str, list[bool]]]:
    """The ``sst2-ptb`` sentences of ``split`` (the same, in the same order) with, per word, whether it carries the
    sentence's sentiment: a leaf whose own label is polar (not 2) and on the sentence's side (SST labels every word
    of its trees). For plausibility of explanations (:mod:`attnkit.analysis.faithfulness`)."""
    folder = require_dir(data_dir, "sst5_ptb", "sst2-ptb")
    if split not in SPLIT_STEMS:
        raise UserError(f"sst2-ptb has no split {split!r} (it has {', '.join(SPLIT_STEMS)})")
    path = require_file(folder / f"{SPLIT_STEMS[split]}.txt", "sst2-ptb")
    out = []
    for tree in _read_trees(path):
        label = _binary(tree.label)
        if label is None:
            continue
        leaves = _leaf_nodes(tree)
        out.append((tree.text(), [_binary(n.label) == label for n in leaves]))
    return out


def _leaf_nodes(node: PTBNode) -> list[PTBNode]:
    return [node] if node.word is not None else [leaf for c in node.children for leaf in _leaf_nodes(c)]
