"""The experience-memory hooks of the controller (PrivGemo §4.3.2, §4.4).

``s_prune = α·DRM(p, I) + (1−α)·max_{e ∈ E_mem} DRM(p, e)``: the second term needs anonymised
exemplars (verified path templates) retrieved for the question and indicator. An :class:`Exemplar`
carries the depth and relations of the analysis it verified under, and the controller counts it only
when they agree with the node's indicator (:func:`rg.reasoning.dualtower.prune.agreeing`): a template
of another depth or relation path pulls the wrong candidates up. A memory that only
implements :class:`ExperienceMemory` feeds that term; :class:`NoMemory` returns no exemplar and the
term is 0. A memory that also implements :class:`GatingMemory` (``rg.memory.ExperiencePool`` via
``rg.memory.PoolMemory``) gates the Brain: :meth:`GatingMemory.hints` says whether a confident
verified trace exists (skip the Brain's analysis and reuse its indicator and depth prior), where
to start (InitPolicy), which actions failed before (warnings, tried last) and which verified
relation paths the Hand may select locally; :meth:`GatingMemory.remember` stores the question's
anonymised trace afterwards. Everything crossing this interface is anonymised: topic mentions are
``TE_i``, paths are relations and coarse types, no answer and no raw name.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

Action = tuple[str, int]


@dataclass(frozen=True)
class Exemplar:
    """A verified path template and the shape of the analysis it verified under.

    Attributes:
        pattern: The template as the anonymised view writes candidate patterns (relations, coarse types).
        depth: The stored analysis' D_predict.
        relations: The stored indicator's relations (empty when it named none).
        score: The record's dual-key retrieval score.
    """

    pattern: str
    depth: int
    relations: tuple[str, ...] = ()
    score: float = 0.0


@runtime_checkable
class ExperienceMemory(Protocol):
    """Anonymised exemplar paths for a question and indicator (never answers, never raw names)."""

    def exemplars(self, question: str, indicator: str) -> Sequence[str | Exemplar]:
        """Exemplars, close ones only: :class:`Exemplar` (checked against the node's indicator) or a
        bare pattern text (a memory that knows no shape; always counted)."""
        ...


class NoMemory:
    """No experience yet: the memory term of the pruning score is 0."""

    def exemplars(self, question: str, indicator: str) -> list[str | Exemplar]:
        return []


@dataclass(frozen=True)
class RecalledAnalysis:
    """A stored question analysis: the anonymised indicator and its depth prior."""

    indicator: str
    relations: tuple[str, ...]
    depth: int
    answer_type: str | None = None


@dataclass(frozen=True)
class MemoryHints:
    """Control hints from retrieved experience (PrivGemo Algorithm 6, GetExp).

    Attributes:
        skip_brain: A confident verified trace exists: reuse ``analysis`` instead of asking the Brain.
        analysis: The best trace's analysis (None when nothing was retrieved).
        init: InitPolicy: the (mode, depth) that verified last time.
        warnings: Actions that failed in matching traces (tried last by NextStep).
        exemplars: Verified path templates (patterns) for the pruning score.
        relation_paths: Verified relation paths per branch; the Hand selects candidates with these
            locally instead of asking the Brain.
        score: The best dual-key score.
        needs_replay: ``skip_brain`` holds only if the edge memory replays a chain of this question that walks
            ``analysis``'s relations (a reworded question; ``ExperienceConfig.reworded_skip``).
    """

    skip_brain: bool = False
    analysis: RecalledAnalysis | None = None
    init: Action | None = None
    warnings: tuple[Action, ...] = ()
    exemplars: tuple[str, ...] = ()
    relation_paths: frozenset[tuple[tuple[str, ...], ...]] = frozenset()
    score: float = 0.0
    needs_replay: bool = False


@dataclass(frozen=True)
class Trace:
    """One question's anonymised decision trace, as the controller hands it to memory.

    Attributes:
        question: The question with topic mentions as ``TE_i`` (no other text is stored from it).
        analysis: The indicator used and D_predict.
        trajectory: (mode, depth) actions tried, in order.
        templates: Verified candidates: (pattern, relation paths per branch).
        sufficient: Whether verified evidence was found.
        warnings: Actions that failed (with the reason), kept even when the question failed.
        privacy: The privacy tag (mode, ratio, grouping) the trace was made under.
        brain_calls: Brain calls the question took.
    """

    question: str
    analysis: RecalledAnalysis
    trajectory: tuple[Action, ...]
    templates: tuple[tuple[str, tuple[tuple[str, ...], ...]], ...]
    sufficient: bool
    warnings: tuple[Action, ...]
    privacy: str
    brain_calls: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)


@runtime_checkable
class GatingMemory(Protocol):
    """An experience memory that also gates Brain calls and steers the tree (module docstring)."""

    def exemplars(self, question: str, indicator: str) -> Sequence[str | Exemplar]: ...

    def hints(self, question: str, indicator: str | None, privacy: str) -> MemoryHints:
        """Hints for a question (``indicator`` None: before analysis, question key only)."""
        ...

    def remember(self, trace: Trace) -> None:
        """Store a finished question's trace (failures as warnings)."""
        ...


class MemoryUnavailable(RuntimeError):
    """The memory's owner could not be reached (e.g. a Serve deployment that is gone or late).

    The controller then answers the question without memory and records ``memory_unavailable``
    in the result's memory notes: a memory outage costs Brain calls, never the question.
    """


async def settle(value: Any) -> Any:
    """``value``, awaited when it is awaitable: a memory's hooks may be plain methods (in-process,
    or blocking calls to a Ray actor) or return awaitables (calls to a Serve deployment, which must
    not block the replica's event loop)."""
    return await value if inspect.isawaitable(value) else value
