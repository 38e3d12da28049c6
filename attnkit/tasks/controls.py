"""Control characters a BERT-style (WordPiece) tokenizer drops while cleaning a text, joining the words on either side
("a<NUL>delight" read as "adelight"): how to find them, which texts a tokenizer really joins, and the one line that says
so. The user's own data files refuse them (:mod:`attnkit.tasks.files`); a published set's files and the texts given to
a model are read as they are, and said (no torch here: the tokenizer is passed in).
"""

from __future__ import annotations

import logging
import re

log = logging.getLogger("attnkit")

#: the control characters a BERT-style tokenizer drops while cleaning a text, joining the words on either side
#: ("a\x00delight" is read as "adelight"): Unicode category Cc (U+0000-U+001F, U+007F-U+009F) but tab, LF and CR
DROPPED_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def dropped_control(text: str) -> tuple[int, str] | None:
    """The first control character of ``text`` that a tokenizer drops (NUL, BEL, a vertical tab, a form feed, ...: see
    DROPPED_CONTROLS), as (its 1-based character number, its code such as "U+0000"), or None."""
    m = DROPPED_CONTROLS.search(text)
    return None if m is None else (m.start() + 1, f"U+{ord(m.group()):04X}")


def joined_by_controls(tokenizer, numbered: list[tuple[int, str]], ids: list[list[int]] | None = None,
                       what: str = "text") -> list[tuple[str, int, str]]:
    """Of ``numbered`` texts (``(number, text)``, with their token ids ``ids`` where known), those holding control
    characters this tokenizer drops, joining the words on either side (it reads the text as without them, and a space
    in their place would be read otherwise; a byte-level tokenizer keeps them as tokens), as ``(what, number, text)``
    for :func:`say_control`."""
    numbered = [(n, t) for n, t in numbered if dropped_control(t) is not None]
    if not numbered:
        return []
    texts = [t for _, t in numbered]
    own = ids if ids is not None else tokenizer(texts, add_special_tokens=False)["input_ids"]
    gone, spaced = (tokenizer([DROPPED_CONTROLS.sub(by, t) for t in texts], add_special_tokens=False)["input_ids"]
                    for by in ("", " "))
    return [(what, n, t) for (n, t), o, g, sp in zip(numbered, own, gone, spaced) if g == o != sp]


def say_control(found: list[tuple[str, int, str]], names=None, done: str = "labelled") -> None:
    """One line on stderr where texts hold control characters the tokenizer drops (``found``: ``(what, number, text)``
    from :func:`check_readable`): they are labelled as read, the words on either side of such a character joined into
    one. ``names(n)`` names text n (a file's line) in place of "text n"."""
    if not found:
        return
    what, n, text = found[0]
    where = names(n) if names is not None else f"{what} {n}"
    at, code = dropped_control(text)
    many = len(found) > 1
    log.warning("%d text%s hold%s control characters that the tokenizer drops, joining the words on either side (%s%s, "
                "%r: %s at character %d, read as %r): %s %s as read; write spaces in their place to keep the words "
                "apart", len(found), "s" if many else "", "" if many else "s", "the first: " if many else "", where,
                text[max(0, at - 21):at + 20], code, at, DROPPED_CONTROLS.sub("", text[max(0, at - 21):at + 20]),
                "they are" if many else "it is", done)


def say_controls(splits, task: str) -> None:
    """One line on stderr where texts of a task hold control characters a BERT tokenizer drops (CoLA's training file
    holds a backspace, RTE's some stray C1 codes of a mis-decoded quote): the files of a published data set are read as
    they are, and that is said. (The csv/tsv/jsonl tasks refuse such a text in the user's own files, naming the line.)"""
    counts, first = {}, None
    for split, ds in splits.items():
        cols = [c for c in ("text", "text_pair") if c in getattr(ds, "column_names", ())]
        hits = [t for c in cols for t in ds[c] if isinstance(t, str) and DROPPED_CONTROLS.search(t)]
        if hits:
            counts[split], first = len(hits), first or hits[0]
    if first is not None:
        at, code = dropped_control(first)
        n = sum(counts.values())
        log.warning("task %s: %d text%s (%s) hold%s control characters, which a WordPiece (BERT) tokenizer drops (the first: %r, %s at "
                    "character %d): read as without them", task, n, "s" if n > 1 else "",
                    ", ".join(f"{k} {v}" for k, v in counts.items()), "" if n > 1 else "s",
                    first[max(0, at - 21):at + 20], code, at)
