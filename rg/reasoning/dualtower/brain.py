"""The Brain protocol and its results (PrivGemo §4.2–4.3: question analysis, path selection, the
follow-up of refine mode and the predictions of predict mode).

The Brain is the untrusted tower: it receives only :class:`~rg.reasoning.dualtower.payload.SealedPayload`
objects (serialised, egress-guarded JSON) and returns typed results. Two implementations share the
protocol: :class:`~rg.reasoning.dualtower.llm_brain.LLMBrain` (any OpenAI-compatible endpoint) and
:class:`~rg.reasoning.dualtower.local_brain.LocalBrain` (the trained relation-path planner). A call
that cannot produce a valid result raises :class:`BrainError` with a reason; the controller then
takes the Hand-only path and records the fault, so no question is lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from rg.reasoning.dualtower.payload import SealedPayload


class Indicator(BaseModel):
    """A skyline indicator: topic entities and the answer placed on one chain.

    Attributes:
        text: The chain in words (what DRM compares candidate paths with).
        relations: Relation labels along the chain, when the Brain names them (the local Brain always does).
        depth: Hops from the farthest topic entity to the answer (D_predict of this indicator).
        answer_type: Coarse type the answer should have, as the view writes types; None when unknown.
    """

    model_config = ConfigDict(frozen=True)

    text: str = Field(min_length=1)
    relations: tuple[str, ...] = ()
    depth: int = Field(ge=1, le=10)
    answer_type: str | None = None


@dataclass(frozen=True)
class Analysis:
    """Question analysis: split questions, indicators (one reasoning-tree node each), D_predict."""

    sub_questions: tuple[str, ...]
    indicators: tuple[Indicator, ...]
    depth: int


@dataclass(frozen=True)
class Choice:
    """Path selection: candidate ids, best first (at most the payload's ``keep``)."""

    ids: tuple[int, ...]


@dataclass(frozen=True)
class FollowUp:
    """Refine mode: the Brain's answer to the Hand's follow-up question (GenFollowUp's I+).

    Attributes:
        missing: What the Brain says the rejected candidates lacked (anonymised words).
        indicator: The refined indicator I+ that guides the refinement's exploration and pruning.
    """

    missing: str
    indicator: Indicator


@dataclass(frozen=True)
class Prediction:
    """Predict mode: auxiliary targets the Brain saw on the shown paths, and I_pred.

    Attributes:
        targets: View nodes as shown (``ent_3f9a2c1d (person)``) or type-level placeholders
            (``(person)``), best first; the Hand keeps those it can place on the shown paths.
        indicator: The indicator of the prediction-driven exploration (None: the node's own).
    """

    targets: tuple[str, ...]
    indicator: Indicator | None = None


class BrainError(RuntimeError):
    """A Brain call gave no usable result.

    Attributes:
        reason: ``rate_limited``, ``server_error``, ``timeout``, ``connection``, ``malformed``,
            ``egress_refused``, ``no_paths`` (local Brain: nothing it can write), ``no_targets``
            (a prediction names nothing on the shown paths), ...
        attempts: Calls made (re-asks included).
    """

    def __init__(self, reason: str, message: str, attempts: int = 1) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.attempts = attempts


@runtime_checkable
class Brain(Protocol):
    """The untrusted tower: analysis and selection on sealed payloads only.

    Attributes:
        name: Implementation name recorded with every result (``planner:<id>``, ``llm:<model>``).
    """

    name: str

    async def analyse(self, payload: SealedPayload) -> Analysis:
        """Split questions, indicators and predicted depth; :class:`BrainError` on failure."""
        ...

    async def select(self, payload: SealedPayload) -> Choice:
        """The best candidates of a selection payload; :class:`BrainError` on failure."""
        ...


@runtime_checkable
class ExploringBrain(Brain, Protocol):
    """A Brain that also answers refine mode's follow-up and predict mode's prediction payloads.

    A Brain without these calls still works: the controller then takes the Hand's own refine/predict
    exploration and records the fault ``unsupported``. (``serve``'s remote Brain has both; its proxy
    replies ``unsupported`` for a Brain that lacks them.)
    """

    async def follow_up(self, payload: SealedPayload) -> FollowUp:
        """The refined indicator for a follow-up payload; :class:`BrainError` on failure."""
        ...

    async def predict(self, payload: SealedPayload) -> Prediction:
        """Auxiliary targets for a prediction payload; :class:`BrainError` on failure."""
        ...
