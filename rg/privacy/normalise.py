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
_ASCII_PUNCTUATION = re.compile(r"[^0-9a-z_\s]")
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def normalise(text: str, punctuation: bool = False) -> str:
    """``text`` in the form names are compared in (see the module docstring).

    Equal to ``normalise_with_map(text, punctuation)[0]`` (the same per-character fold, cached per
    character), without the index map: the guard runs it on every request body. ``punctuation``
    keeps punctuation, for names that are nothing without it (``61*``, ``'71``, ``C++``).
    """
    if text.isascii():
        text = _fold_ascii(text, punctuation)
    else:  # ASCII runs the fast way, the rest character by character (a request is mostly ASCII)
        parts, done = [], 0
        for run in _NON_ASCII.finditer(text):
            parts.append(_fold_ascii(text[done:run.start()], punctuation))
            parts.extend(_fold(c, punctuation) for c in run.group())
            done = run.end()
        parts.append(_fold_ascii(text[done:], punctuation))
        text = "".join(parts)
    return _SPACES.sub(" ", text).strip()


def _fold_ascii(text: str, punctuation: bool) -> str:
    """:func:`_fold` of every character of an ASCII text, whitespace left to collapse."""
    return text.casefold() if punctuation else _ASCII_PUNCTUATION.sub(" ", text.casefold())


def is_word_char(char: str) -> bool:
    """Whether ``char`` continues a token (letters, digits, underscore)."""
    return char.isalnum() or char == "_"


def whole_token(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is bounded by non-token characters (or the text's ends)."""
    before = start == 0 or not is_word_char(text[start - 1]) or not is_word_char(text[start])
    after = end == len(text) or not is_word_char(text[end]) or not is_word_char(text[end - 1])
    return before and after
