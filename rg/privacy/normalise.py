"""Text normalisation shared by question masking and the egress guard.

Both must see ``Tom  Hanks``, ``ｔｏｍ hanks``, ``TÓM HANKS``, ``Tom\u200bHanks`` and
``James K. Polk`` / ``james k polk`` as one name. :func:`normalise` folds a text to NFKC,
case-folded, accent-free form with zero-width and bidirectional marks removed, punctuation
turned into spaces (letters, digits and ``_`` are kept) and whitespace runs collapsed to one
space. :func:`normalise_with_map` also returns, for every character of the result, the index of
the original character it came from, so a match found in the normalised text can be replaced in
the original one.
"""

from __future__ import annotations

import functools
import re
import unicodedata

INVISIBLE = frozenset(
    "\u00ad\u180e\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2060\u2061\u2062\u2063\u2064"
    "\u2066\u2067\u2068\u2069\ufeff"
)
"""Soft hyphen, zero-width characters, joiners and bidirectional marks: dropped."""


@functools.lru_cache(maxsize=1 << 16)
def _fold(char: str, punctuation: bool = False) -> str:
    """One character's normal form: NFKC, case-folded, accents removed (may be empty or several);
    punctuation becomes a space unless ``punctuation`` keeps it."""
    if char in INVISIBLE:
        return ""
    if char.isspace():
        return " "
    text = unicodedata.normalize("NFKC", char).casefold()
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c if punctuation or is_word_char(c) or c.isspace() else " " for c in decomposed
                   if not unicodedata.combining(c) and c not in INVISIBLE)


def normalise_with_map(text: str, punctuation: bool = False) -> tuple[str, list[int]]:
    """``text`` normalised, and the original index of each character of the result.

    Whitespace runs become one space and leading/trailing whitespace is dropped.
    """
    out: list[str] = []
    origin: list[int] = []
    for index, char in enumerate(text):
        for folded in _fold(char, punctuation):
            if folded == " " and (not out or out[-1] == " "):
                continue
            out.append(folded)
            origin.append(index)
    if out and out[-1] == " ":
        out.pop()
        origin.pop()
    return "".join(out), origin


_SPACES = re.compile(r"\s+")


TABLE_LIMIT = 1 << 16
"""Characters a fold table keeps (past that, a character is folded again each time it is met)."""


class _FoldTable(dict[int, str]):
    """Code point → :func:`_fold` of its character, for :meth:`str.translate`: ASCII filled in advance,
    any other character worked out when first met, then kept (as :func:`_fold`'s cache keeps it)."""

    def __init__(self, punctuation: bool) -> None:
        super().__init__({code: _fold(chr(code), punctuation) for code in range(128)})
        self.punctuation = punctuation

    def __missing__(self, code: int) -> str:
        folded = _fold(chr(code), self.punctuation)
        if len(self) < TABLE_LIMIT:  # as _fold's own cache, bounded: a text of odd characters cannot grow it on
            self[code] = folded
        return folded


def normalise(text: str, punctuation: bool = False) -> str:
    """``text`` in the form names are compared in (see the module docstring).

    Equal to ``normalise_with_map(text, punctuation)[0]`` (the same per-character fold, through one
    :meth:`str.translate` pass and a table of the characters met so far), without the index map: the
    guard runs it on every request body. ``punctuation`` keeps punctuation, for names that are nothing
    without it (``61*``, ``'71``, ``C++``).
    """
    return _SPACES.sub(" ", text.translate(_TABLES[punctuation])).strip()


def is_word_char(char: str) -> bool:
    """Whether ``char`` continues a token (letters, digits, underscore)."""
    return char.isalnum() or char == "_"


def whole_token(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is bounded by non-token characters (or the text's ends)."""
    before = start == 0 or not is_word_char(text[start - 1]) or not is_word_char(text[start])
    after = end == len(text) or not is_word_char(text[end]) or not is_word_char(text[end - 1])
    return before and after


_TABLES = {False: _FoldTable(False), True: _FoldTable(True)}
"""The two fold tables (punctuation dropped, kept), shared by every caller: a character folds one way."""
