"""Lemmatisation of small corpora (the MiniBERT paper lemmatises before pre-training and fine-tuning).

``--lemmatize LANG`` (train, pretrain) replaces every text by its lemmas with simplemma (a dictionary
lemmatiser, pure Python, ~50 languages: en, fr, de, es, it, ...), e.g. "The cats were running" ->
"the cat be run". The language is recorded with the model (``attnkit_run.json``), and
:class:`LemmatizingTokenizer` applies the same step wherever that model reads text (predict, evaluate,
explain, words, layer-weights), so training and prediction always see the same kind of input.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

from attnkit.errors import UserError


@functools.lru_cache(maxsize=8)
def lemmatizer(lang: str) -> Callable[[str], str]:
    """``text -> lemmas joined by spaces`` for ``lang``; ValueError naming the setting for an unknown language."""
    try:
        import simplemma
    except ImportError:  # pragma: no cover - a dependency of attnkit
        raise UserError("--lemmatize needs the package simplemma (pip install simplemma)") from None
    try:
        simplemma.text_lemmatizer("test", lang=lang)
    except ValueError:
        raise UserError(f"--lemmatize {lang!r}: not a language simplemma knows (e.g. en, fr, de, es, it, nl, pt)") from None

    def lemmatize(text: str) -> str:
        return " ".join(simplemma.text_lemmatizer(text, lang=lang))

    return lemmatize


def lemmatize_splits(splits, lang: str):
    """Every split of a DatasetDict with ``text`` (and ``text_pair``) replaced by their lemmas."""
    lem = lemmatizer(lang)
    cols = [c for c in ("text", "text_pair") if c in next(iter(splits.values())).column_names]

    def apply(batch):
        return {c: [lem(t) if t is not None else None for t in batch[c]] for c in cols}

    return splits.map(apply, batched=True, desc=f"lemmatising ({lang})")


class LemmatizingTokenizer:
    """A tokenizer that lemmatises its text inputs first; every other attribute is the tokenizer's own."""

    def __init__(self, tokenizer, lang: str):
        self._tok = tokenizer
        self.lemmatize_lang = lang
        self._lem = lemmatizer(lang)

    def _apply(self, x: Any) -> Any:
        if isinstance(x, str):
            return self._lem(x)
        if isinstance(x, (list, tuple)) and all(isinstance(t, str) for t in x):
            return [self._lem(t) for t in x]
        return x

    def __call__(self, text=None, text_pair=None, *args, **kwargs):
        return self._tok(self._apply(text), self._apply(text_pair), *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tok, name)
