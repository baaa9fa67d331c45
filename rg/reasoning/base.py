"""The reader protocol and its result records (ReG stage S(II): answer from evidence).

A :class:`Reader` turns a question and its :class:`rg.evidence.Evidence` into a
:class:`Reading`: a ranked list of :class:`Answer` objects, the set it chose, each answer with
the evidence chains that support it, the LLM usage spent, the implementation that produced it
and, when it could not answer, why. Two implementations share the protocol:
:class:`rg.reasoning.LLMReader` (``llm:<model>``) and :class:`rg.reasoning.RetrieverReader`
(``retriever_scores``), so an evaluation or serving pipeline runs either unchanged.

A reader is given the question *text*, never the :class:`rg.data.Sample`: gold answers cannot
reach reasoning at inference time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence, runtime_checkable

from rg.evidence import Evidence, EvidenceChain
from rg.llm.usage import Usage
from rg.metrics import normalize_answer


@dataclass(frozen=True)
class Answer:
    """One answer and the chains that support it.

    Attributes:
        text: The answer as produced (the LLM's wording, or the entity name).
        entity: The chain end it names (equal after :func:`rg.metrics.normalize_answer`);
            None when it names none.
        score: Aggregated retriever score (local reader); None for an LLM answer.
        chains: Evidence chains ending at ``entity``, each restricted to the walks that end
            there (empty when ``entity`` is None).
    """

    text: str
    entity: str | None = None
    score: float | None = None
    chains: tuple[EvidenceChain, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; chains as rendered lines."""
        return {"text": self.text, "entity": self.entity, "score": self.score, "chains": [c.render() for c in self.chains]}


@dataclass(frozen=True)
class Reading:
    """What a reader answered for one question.

    Attributes:
        reader: The implementation: ``llm:<model>`` or ``retriever_scores``.
        ranked: All answers, best first.
        selected: The answers the reader chose (a non-empty subset of ``ranked`` in rank
            order whenever ``ranked`` is non-empty); what answer metrics score.
        usage: LLM cost of the question (calls, tokens, retries, failures, latency); zero for
            a local reader.
        prompt_id: ``full_id`` of the prompt template used; None for a local reader.
        fallback: None on success, else why there are no answers (e.g. ``no_answer_line``,
            ``llm_timeout``, ``no_candidates``).
    """

    reader: str
    ranked: tuple[Answer, ...] = ()
    selected: tuple[Answer, ...] = ()
    usage: Usage = field(default_factory=Usage)
    prompt_id: str | None = None
    fallback: str | None = None

    def __post_init__(self) -> None:
        if self.fallback == "":
            raise ValueError("fallback must be None or a non-empty reason")
        if self.fallback is not None and self.ranked:
            raise ValueError(f"a reading with fallback {self.fallback!r} must carry no answers")
        if any(a not in self.ranked for a in self.selected):
            raise ValueError("selected answers must come from the ranked list")
        if self.ranked and not self.selected:
            raise ValueError("a reading with answers must select at least one")

    @property
    def ok(self) -> bool:
        return self.fallback is None

    @property
    def answers(self) -> tuple[str, ...]:
        """Texts of the selected answers."""
        return tuple(a.text for a in self.selected)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "reader": self.reader,
            "answers": list(self.answers),
            "ranked": [a.to_dict() for a in self.ranked],
            "selected": [a.text for a in self.selected],
            "usage": self.usage.to_dict(),
            "prompt_id": self.prompt_id,
            "fallback": self.fallback,
        }


@runtime_checkable
class Reader(Protocol):
    """Answers a question from its evidence.

    Attributes:
        name: Implementation name written into every :class:`Reading`.
    """

    name: str

    async def read(self, question: str, evidence: Evidence) -> Reading:
        """Answer ``question`` from ``evidence``; a failure is a Reading with ``fallback`` set,
        never an exception."""
        ...


def link_answers(texts: Sequence[str], evidence: Evidence) -> tuple[Answer, ...]:
    """Answers for ``texts``, each mapped to the chain ends it names.

    An answer matches every end whose :func:`rg.metrics.normalize_answer` form equals its own
    (a text that normalises to ``""`` matches nothing); ``entity`` is the first such end in
    evidence order and ``chains`` holds the supporting chains of all of them.
    """
    by_form: dict[str, list[str]] = {}
    for end in evidence.ends():
        form = normalize_answer(end)
        if form:
            by_form.setdefault(form, []).append(end)
    answers = []
    for text in texts:
        ends = by_form.get(normalize_answer(text), [])
        chains = tuple(c for end in ends for c in evidence.supporting(end))
        answers.append(Answer(text=text, entity=ends[0] if ends else None, chains=chains))
    return tuple(answers)
