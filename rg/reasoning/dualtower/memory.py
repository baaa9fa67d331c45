"""The experience-memory hook of the pruning score (PrivGemo §4.3.2, §4.4).

``s_prune = α·DRM(p, I) + (1−α)·max_{e ∈ E_mem} DRM(p, e)``: the second term needs anonymised
exemplars (verified path templates) retrieved for the question and indicator. The experience
memory is a separate piece of work; until it lands, :class:`NoMemory` returns no exemplar and the
term is 0. A memory implements :class:`ExperienceMemory` and is passed to the controller.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class ExperienceMemory(Protocol):
    """Anonymised exemplar paths for a question and indicator (never answers, never raw names)."""

    def exemplars(self, question: str, indicator: str) -> list[str]:
        """Exemplar path texts, as the anonymised view writes paths; empty when none is close."""
        ...


class NoMemory:
    """No experience yet: the memory term of the pruning score is 0."""

    def exemplars(self, question: str, indicator: str) -> list[str]:
        return []
