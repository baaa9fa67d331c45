"""A question's topic mentions rewritten: ``TE_i`` (the memory's and the depth predictor's name-free
template) or ``TE_i (name)`` (plaintext mode's question for the Brain)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from rg.privacy.names import NameBook


def _topic_forms(topics: Sequence[str], names: NameBook | None) -> list[tuple[str, int]]:
    """Every way the question may write each topic (its name, aliases, linked mentions), with its index,
    longer forms first."""
    book = names if names is not None else NameBook()
    forms = {(form, i) for i, t in enumerate(topics) for form in book.surface(t) if form.strip()}
    return sorted(forms, key=lambda f: (-len(f[0]), f[1], f[0]))


def tag_topics(question: str, topics: Sequence[str], names: NameBook | None = None) -> str:
    """Plaintext mode: topic mentions written ``TE_i (name)``, as the anonymising modes write
    ``TE_i (type)``, so both Brains read the same question shape (longer forms first; ``names`` gives
    each topic's name and other forms, by default its id)."""
    book = names if names is not None else NameBook()
    return _each_mention(question, topics, names, lambda i: f"TE_{i + 1} ({book.display(topics[i])})")


def topic_template(text: str, topics: Sequence[str], names: NameBook | None = None) -> str:
    """``text`` with each topic mention written ``TE_i`` (longer forms first; ``names`` gives each topic's
    name, aliases and linked mentions, by default its id): the session-independent, name-free form the
    experience memory keys and stores."""
    return _each_mention(text, topics, names, lambda i: f"TE_{i + 1}")


def _each_mention(text: str, topics: Sequence[str], names: NameBook | None, write: Callable[[int], str]) -> str:
    """``text`` with every mention of a topic (any of its forms, in any case, as whole words) replaced by
    ``write(topic index)`` in one pass, so no replacement is matched again by a later form (``Casino`` and a
    linked ``casino`` would otherwise tag the tag)."""
    forms = _topic_forms(topics, names)
    if not forms:
        return text
    index = {form.lower(): i for form, i in reversed(forms)}  # the longest form's topic wins a tie
    pattern = "|".join(re.escape(form) for form, _ in forms)
    return re.sub(rf"(?<!\w)(?:{pattern})(?!\w)", lambda m: write(index[m.group(0).lower()]), text, flags=re.IGNORECASE)


def reader_question(text: str, topics: Sequence[str], names: NameBook | None = None) -> str:
    """The question as the Hand's tuned reader reads it: each topic mention written as the KG names the topic
    (one pass, longer forms first), the first letter upper-case, and a question mark when it ends without a
    stop. The reader learnt on questions written that way; a question typed in lower case without its mark
    asks the same thing (the question as asked is what the Brain's side and the memory see)."""
    book = names if names is not None else NameBook()
    text = _each_mention(text, topics, names, lambda i: book.display(topics[i])).strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".?!" else text + "?"
