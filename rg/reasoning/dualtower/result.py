"""What one dual-tower question returns: answer, raw evidence, what the Brain saw, costs, faults."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rg.llm.usage import UsageLedger
from rg.privacy.exposure import side_totals


@dataclass(frozen=True)
class BrainFault:
    """One Brain call that gave no usable result, and what the Hand did instead.

    Attributes:
        stage: ``analysis`` or ``selection`` (``hand_read``: the Hand LLM, whose fallback is the local reader).
        reason: ``rate_limited``, ``server_error``, ``timeout``, ``malformed``, ``egress_refused``, ...
        attempts: Calls made to the Brain for it (re-asks included; HTTP retries are in the usage ledger).
        fallback: What was used instead: ``hand_analysis``, ``fuzzy_top`` or ``local_reader``.
    """

    stage: str
    reason: str
    attempts: int
    fallback: str

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "reason": self.reason, "attempts": self.attempts, "fallback": self.fallback}


@dataclass(frozen=True)
class DualTowerResult:
    """One question's outcome.

    Attributes:
        question: The raw question (the Hand's; never sent).
        answers: The selected answers (empty when nothing was verified).
        evidence: Raw evidence paths of the verified candidates, rendered ``h → [r] → t``.
        brain_payloads: Every sealed payload handed to the Brain, as the JSON it received.
        brain: The Brain implementation's name.
        brain_calls: Brain calls made (analysis and selection, re-asks included).
        usage: The question's usage ledger (``UsageLedger.to_dict()``; sides ``hand``/``brain``).
        exposure: The privacy session's exposure ledger (``ExposureLedger.to_dict()``).
        faults: Brain faults and the fallbacks taken.
        tree: The reasoning tree's nodes (anonymised indicators and candidates, modes, statuses).
        timings: Seconds per stage (link, subgraph, anonymise, explore, brain, verify, read).
        fallback: None when answered from verified evidence, else why not (``no_topics``,
            ``unverified``, ...).
        topics: The topic entities (raw; Hand side).
        memory: What the memories did (empty without memory): ``analysis`` (``brain``,
            ``experience`` or ``replay``; ``hand`` when the Brain was asked but refused or failed,
            and the Hand analysed alone), ``local_selections`` (Brain selections replaced by
            verified templates or replayed paths), ``replay_edges``, ``memory_fallback`` (the
            memory's path failed and the Brain was asked), ``remembered``, ``edges_enhanced`` and
            ``edges_penalised``.
        indicator_selections: Brain selections skipped because candidates walked the indicator's relation path
            (``selection: ambiguous``).
        support: Why each answer: the evidence lines its reader read that end at it (raw names; Hand side only,
            never sent), by answer; an answer no line ends at (an LLM reader's wording) maps to none.
    """

    question: str
    answers: tuple[str, ...]
    evidence: tuple[str, ...]
    brain_payloads: tuple[str, ...]
    brain: str
    brain_calls: int
    usage: dict[str, Any]
    exposure: dict[str, Any]
    faults: tuple[BrainFault, ...] = ()
    tree: tuple[dict[str, Any], ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    fallback: str | None = None
    topics: tuple[str, ...] = ()
    memory: dict[str, Any] = field(default_factory=dict)
    indicator_selections: int = 0
    support: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def exposure_totals(self) -> dict[str, Any]:
        """What left the machine, per side and category (:func:`rg.privacy.exposure.side_totals`)."""
        hand = UsageLedger.from_dict(self.usage).by_side().get("hand") if self.usage.get("stages") else None
        return side_totals(self.exposure.get("stages", {}), self.exposure.get("refused", {}),
                           hand.to_dict() if hand is not None else None)

    @property
    def hand_only(self) -> bool:
        """Whether a Brain fault sent any part of the question down the Hand-only path."""
        return bool(self.faults)

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question, "answers": list(self.answers), "evidence": list(self.evidence),
            "brain_payloads": list(self.brain_payloads), "brain": self.brain, "brain_calls": self.brain_calls,
            "usage": self.usage, "exposure": self.exposure, "faults": [f.to_dict() for f in self.faults],
            "tree": list(self.tree), "timings": self.timings, "fallback": self.fallback, "topics": list(self.topics),
            "memory": dict(self.memory), "indicator_selections": self.indicator_selections,
            "exposure_totals": self.exposure_totals, "support": {a: list(lines) for a, lines in self.support.items()},
        }
