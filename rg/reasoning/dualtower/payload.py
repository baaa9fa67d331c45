"""What the Brain may receive: typed payloads, serialised and passed through the egress guard.

PrivGemo §4.2: the Brain operates only on privacy-preserving inputs — the anonymised question,
the topic entities' pseudonyms with limited schema hints (question analysis), a small set of
anonymised candidate paths (path selection), and the rejected candidates with what they lacked
(refine mode's follow-up, predict mode's prediction). Every payload is a pydantic model; :func:`seal`
serialises it to JSON and runs the session's :class:`rg.privacy.EgressGuard` over that text
before anything else sees it. A Brain implementation receives only the resulting
:class:`SealedPayload` and parses the JSON back (:meth:`SealedPayload.open`), so the local Brain's
inputs are provably what a remote Brain would see, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field

from rg.privacy.guard import EgressGuard


class _Payload(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TopicView(_Payload):
    """A topic entity as the Brain sees it."""

    tag: str = Field(description="The question's tag, e.g. 'TE_1'.")
    node: str = Field(description="Its view node: pseudonym and coarse type, e.g. 'ent_3f9a2c1d (film)'.")


class AnalysisPayload(_Payload):
    """Question analysis input: anonymised question, topics and limited schema hints."""

    kind: Literal["analysis"] = "analysis"
    question: str
    topics: tuple[TopicView, ...]
    relation_paths: tuple[tuple[str, ...], ...] = Field(
        (), description="Schema hints: relation paths (as shown) that start at a topic entity; no entities.")
    max_depth: int


class CandidateView(_Payload):
    """One anonymised candidate: one branch per topic entity, all ending at the same node."""

    id: int
    text: str = Field(description="The rendered path(s) over view nodes.")
    branches: tuple[tuple[str, ...], ...] = Field(description="Per topic branch, its relation labels from the topic.")


class SelectionPayload(_Payload):
    """Path selection input: anonymised question, the node's indicator and ≤ W1 candidates."""

    kind: Literal["selection"] = "selection"
    question: str
    indicator: str
    candidates: tuple[CandidateView, ...]
    keep: int


class TriedView(_Payload):
    """A candidate the Hand verified and rejected, as the Brain may see it (refine and predict modes)."""

    id: int
    text: str = Field(description="The rendered path(s) over view nodes.")
    branches: tuple[tuple[str, ...], ...] = Field(description="Per topic branch, its relation labels from the topic.")
    nodes: tuple[tuple[str, ...], ...] = Field(description="Per topic branch, the view nodes after the topic.")
    missing: str = Field(description="What the Hand's verification found missing, in anonymised words.")


class FollowUpPayload(_Payload):
    """Refine mode (PrivGemo GenFollowUp): the Hand's follow-up question and draft indicator for the
    evidence the rejected candidates lacked, and the relation paths the refinement asks for."""

    kind: Literal["follow_up"] = "follow_up"
    question: str
    follow_up: str = Field(description="The Hand's follow-up question Q+ for the missing evidence.")
    indicator: str = Field(description="The Hand's draft indicator I+ (the node's indicator and what was missing).")
    topics: tuple[TopicView, ...]
    tried: tuple[TriedView, ...]
    relation_paths: tuple[tuple[str, ...], ...] = Field(
        (), description="The paths the refinement asks for: hinted relation paths no rejected candidate took.")
    max_depth: int


class PredictionPayload(_Payload):
    """Predict mode (PrivGemo Predict): the paths explored so far; the Brain names auxiliary targets on them."""

    kind: Literal["prediction"] = "prediction"
    question: str
    indicator: str
    topics: tuple[TopicView, ...]
    paths: tuple[TriedView, ...]
    relation_paths: tuple[tuple[str, ...], ...] = Field(
        (), description="Schema hints (as in the analysis payload): relation paths from the topic entities.")
    keep: int = Field(description="Most targets to name.")
    max_depth: int


Payload = Union[AnalysisPayload, SelectionPayload, FollowUpPayload, PredictionPayload]
PAYLOAD_MODELS = (TopicView, AnalysisPayload, CandidateView, SelectionPayload, TriedView, FollowUpPayload,
                  PredictionPayload)
"""Every model a payload's JSON is made of (their keys are the protocol's words)."""
P = TypeVar("P", AnalysisPayload, SelectionPayload, FollowUpPayload, PredictionPayload)


@dataclass(frozen=True)
class SealedPayload:
    """A payload's JSON text after the egress guard passed it; the only thing a Brain receives.

    Attributes:
        kind: ``analysis``, ``selection``, ``follow_up`` or ``prediction``.
        text: The JSON the guard checked.
    """

    kind: str
    text: str

    def open(self, model: type[P]) -> P:
        """The payload back from its JSON (what a Brain works on)."""
        return model.model_validate_json(self.text)


def seal(payload: Payload, guard: EgressGuard) -> SealedPayload:
    """Serialise ``payload`` and check it with ``guard``.

    Raises:
        rg.privacy.EgressRefused: when the JSON holds a raw string of the session (nothing is
            handed to the Brain; the refusal names only the category).
    """
    text = payload.model_dump_json()
    guard.check(text)
    return SealedPayload(payload.kind, text)
