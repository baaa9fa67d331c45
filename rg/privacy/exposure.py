"""The exposure ledger: per question and stage, what left the machine for the Brain.

The usage ledger (:mod:`rg.llm.usage`) counts what calls cost; this one counts what they
revealed. Every Brain-bound request is booked by the egress guard it passes
(:meth:`rg.privacy.EgressGuard.record`), so nothing sent escapes the count: requests, characters
and tokens, the distinct pseudonyms and relation labels the request bodies held, and refusals by
category (never the refused string). Stages that build structured payloads add what they know
of the structure (:meth:`ExposureLedger.record_structure`: paths, nodes and edges shown, and the
view's uniqueness from :mod:`rg.privacy.structure`).

A job folds its questions' ledgers with :class:`ExposureTotals` and writes ``totals.to_dict()``
beside the usage ledger in its report; :func:`side_totals` is the short form a reply or a stage
line carries: per side, what was sent and, by category, what was refused.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rg.privacy.structure import Uniqueness

PSEUDONYM_IN_TEXT = re.compile(r"\b(?:ent|lit)_[0-9a-f]{4,64}\b|\bent_group_\d+\b")
"""Pseudonyms and supernode names as they appear in a request."""


@dataclass
class StageExposure:
    """What one stage of one question sent to the Brain.

    Attributes:
        brain_calls: Logical calls that left the machine (refused ones excluded).
        requests: HTTP requests sent (retries included).
        unsent: Calls none of whose attempts reached the endpoint (connection refused).
        refused: Calls the egress guard stopped, by category of the raw string matched.
        request_chars: Characters of the message contents sent, once per call.
        prompt_tokens: Prompt tokens the Brain reported.
        completion_tokens: Completion tokens the Brain reported.
        pseudonyms: Distinct pseudonyms (and supernodes) the requests held.
        relations: Distinct relation labels (or cluster labels) the requests held.
        paths: Paths shown, as declared by the stage.
        nodes: Nodes of the largest view shown, as declared by the stage.
        edges: Edges of that view.
        uniqueness: Its structural uniqueness, when the stage measured it.
    """

    brain_calls: int = 0
    requests: int = 0
    unsent: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    request_chars: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    pseudonyms: set[str] = field(default_factory=set)
    relations: set[str] = field(default_factory=set)
    paths: int = 0
    nodes: int = 0
    edges: int = 0
    uniqueness: Uniqueness | None = None

    def to_dict(self) -> dict[str, Any]:
        """Counts only: no pseudonym, relation or raw string is written to a report."""
        out: dict[str, Any] = {
            "brain_calls": self.brain_calls, "requests": self.requests, "unsent": self.unsent,
            "refused": dict(self.refused),
            "request_chars": self.request_chars, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "pseudonyms": len(self.pseudonyms),
            "relations": len(self.relations), "paths": self.paths, "nodes": self.nodes, "edges": self.edges,
        }
        if self.uniqueness is not None:
            out["uniqueness_share"] = self.uniqueness.share
            out["k"] = self.uniqueness.k
        return out


class ExposureLedger:
    """One question's exposure, per stage.

    Args:
        relation_views: The relation labels the session has shown (filled by the session as it
            anonymises); the ledger counts those found in each request.
    """

    def __init__(self, relation_views: set[str] | None = None) -> None:
        self.stages: dict[str, StageExposure] = {}
        self._relation_views = relation_views if relation_views is not None else set()

    def stage(self, name: str) -> StageExposure:
        return self.stages.setdefault(name, StageExposure())

    def record_sent(self, stage: str, messages: Sequence[Mapping[str, str]], *, attempts: int,
                    prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        """Book one call that left the machine (``attempts`` HTTP requests that reached the
        endpoint, successful or not); a call none of whose attempts got out is booked as
        ``unsent`` and exposes nothing."""
        entry = self.stage(stage)
        if attempts == 0:
            entry.unsent += 1
            return
        text = "\n".join(str(m.get("content", "")) for m in messages)
        entry.brain_calls += 1
        entry.requests += attempts
        entry.request_chars += len(text)
        entry.prompt_tokens += prompt_tokens
        entry.completion_tokens += completion_tokens
        entry.pseudonyms.update(PSEUDONYM_IN_TEXT.findall(text))
        entry.relations.update(r for r in self._relation_views
                               if re.search(rf"(?<![\w.]){re.escape(r)}(?![\w.])", text))

    def record_refused(self, stage: str, category: str) -> None:
        """Book one call the guard refused (nothing was sent)."""
        self.stage(stage).refused[category] += 1

    def record_structure(self, stage: str, *, paths: int = 0, nodes: int = 0, edges: int = 0,
                         uniqueness: Uniqueness | None = None) -> None:
        """Book the structure a stage showed: paths add up; the largest view's size and uniqueness are kept."""
        entry = self.stage(stage)
        entry.paths += paths
        if nodes >= entry.nodes:
            entry.nodes, entry.edges = nodes, edges
            entry.uniqueness = uniqueness if uniqueness is not None else entry.uniqueness

    @property
    def brain_calls(self) -> int:
        return sum(s.brain_calls for s in self.stages.values())

    def to_dict(self) -> dict[str, Any]:
        """Per stage, and for the question as a whole (distinct pseudonyms over all stages)."""
        pseudonyms = set().union(*(s.pseudonyms for s in self.stages.values())) if self.stages else set()
        relations = set().union(*(s.relations for s in self.stages.values())) if self.stages else set()
        refused: Counter[str] = Counter()
        for s in self.stages.values():
            refused.update(s.refused)
        return {
            "stages": {name: s.to_dict() for name, s in sorted(self.stages.items())},
            "brain_calls": self.brain_calls,
            "refused": dict(refused),
            "pseudonyms": len(pseudonyms),
            "relations": len(relations),
        }


BRAIN_COUNTS = ("brain_calls", "requests", "unsent", "request_chars", "prompt_tokens", "completion_tokens")
HAND_SEES = "raw KG (trusted, local)"
"""What a Hand-side LLM sees: it runs where the raw KG is, so nothing it reads is counted as exposed."""


def side_totals(stages: Mapping[str, Mapping[str, Any]], refused: Mapping[str, int],
                hand_usage: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Exposure per side from a ledger's or a totals' ``stages`` and ``refused`` (:meth:`ExposureLedger.to_dict`,
    :meth:`ExposureTotals.to_dict`): for the Brain, calls, HTTP requests, characters and tokens sent, what was
    shown by category (pseudonyms, relation labels, paths; distinct per stage, summed) and refusals by
    category of the raw string; for the Hand, its LLM calls and tokens (``hand_usage``: a usage dict), which
    saw the raw KG on the trusted side.
    """
    brain = {key: sum(int(s.get(key, 0)) for s in stages.values()) for key in BRAIN_COUNTS}
    brain["shown"] = {key: sum(int(s.get(key, 0)) for s in stages.values()) for key in ("pseudonyms", "relations",
                                                                                       "paths")}
    brain["refused"] = dict(sorted(refused.items()))
    usage = hand_usage or {}
    hand = {"calls": int(usage.get("calls", 0)), "prompt_tokens": int(usage.get("prompt_tokens", 0)),
            "completion_tokens": int(usage.get("completion_tokens", 0)), "sees": HAND_SEES}
    return {"brain": brain, "hand": hand}


class ExposureTotals:
    """Exposure of many questions, folded from :meth:`ExposureLedger.to_dict` records."""

    COUNTS = ("brain_calls", "requests", "unsent", "request_chars", "prompt_tokens", "completion_tokens",
              "pseudonyms", "relations", "paths", "nodes", "edges")

    def __init__(self) -> None:
        self.questions = 0
        self.stages: dict[str, Counter[str]] = {}
        self.refused: Counter[str] = Counter()
        self.questions_refused = 0

    def add(self, record: Mapping[str, Any]) -> None:
        """Fold one question's ledger (``ExposureLedger.to_dict()``)."""
        self.questions += 1
        self.refused.update(record.get("refused", {}))
        self.questions_refused += bool(record.get("refused"))
        for name, stage in record.get("stages", {}).items():
            totals = self.stages.setdefault(name, Counter())
            totals["questions"] += 1
            totals.update({k: stage[k] for k in self.COUNTS if k in stage})
            if "uniqueness_share" in stage:  # measured views: their shares add up, the smallest k is kept
                totals["k_min"] = min(totals["k_min"], stage["k"]) if totals["measured"] else stage["k"]
                totals["measured"] += 1
                totals["uniqueness_share_sum"] += stage["uniqueness_share"]

    def merge(self, other: "ExposureTotals") -> None:
        self.questions += other.questions
        self.questions_refused += other.questions_refused
        self.refused.update(other.refused)
        for name, counts in other.stages.items():
            mine = self.stages.setdefault(name, Counter())
            k_min = min((c["k_min"] for c in (mine, counts) if c["measured"]), default=None)
            mine.update(counts)
            if k_min is not None:
                mine["k_min"] = k_min

    def to_dict(self) -> dict[str, Any]:
        """Sums per stage and means per question (over all questions folded)."""
        per = max(self.questions, 1)
        return {
            "questions": self.questions,
            "questions_with_refusals": self.questions_refused,
            "refused": dict(self.refused),
            "stages": {
                name: {**{k: counts[k] for k in ("questions", *self.COUNTS)},
                       "per_question": {k: counts[k] / per for k in self.COUNTS},
                       **({"uniqueness_share_mean": counts["uniqueness_share_sum"] / counts["measured"],
                           "k_min": counts["k_min"]} if counts["measured"] else {})}
                for name, counts in sorted(self.stages.items())
            },
        }
