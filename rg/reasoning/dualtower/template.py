"""A question's topic mentions rewritten: ``TE_i`` (the memory's and the depth predictor's name-free
template) or ``TE_i (name)`` (plaintext mode's question for the Brain)."""

from __future__ import annotations

import re
from collections.abc import Sequence

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
    for form, i in _topic_forms(topics, names):
        question = re.sub(rf"(?<!\w){re.escape(form)}(?!\w)", f"TE_{i + 1} ({book.display(topics[i])})", question,
                          flags=re.IGNORECASE)
    return question


def topic_template(text: str, topics: Sequence[str], names: NameBook | None = None) -> str:
    """``text`` with each topic mention written ``TE_i`` (longer forms first; ``names`` gives each topic's
    name, aliases and linked mentions, by default its id): the session-independent, name-free form the
    experience memory keys and stores."""
    for form, i in _topic_forms(topics, names):
        text = re.sub(rf"(?<!\w){re.escape(form)}(?!\w)", f"TE_{i + 1}", text, flags=re.IGNORECASE)
    return text
