"""Path selectors: choose the relevant candidates of a question's pool (ReG stage S(I)).

ReG (Zou et al. 2025, "Weak-to-Strong GraphRAG") refines weak labels by letting an LLM pick
the relevant paths from the candidate pool. Every selector implements :class:`PathSelector`;
the LLM selector (prompt template + parser over an ``LLMClient``) and the local
:class:`SimilarityPathSelector` share it, so the refinement job runs either unchanged.

:class:`SimilarityPathSelector` is a local relevance filter in the spirit of PrivGemo's local
relevance scoring: it embeds the question and each candidate's relation chain in words (by
default prefixed with the candidate's start entity) with a sentence encoder, and keeps the
candidates whose cosine similarity reaches a threshold λ, plus shortest paths that reach an
answer. It is not an LLM; its labels say ``similarity:<encoder model id>``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Protocol, Sequence, runtime_checkable

import numpy as np
from pydantic import Field

from rg.config import Config
from rg.data.sample import Sample
from rg.graph import split_relation
from rg.supervision.candidates import Candidate, CandidatePool
from rg.text.encoder import TextEncoder

EMPTY_POOL = "empty_pool"
"""Failure reason: the question's candidate pool is empty (nothing to select from)."""
BELOW_THRESHOLD = "below_threshold"
"""Failure reason of the similarity selector: no candidate reached the threshold and no
candidate was kept by the always-keep rule."""


@dataclass(frozen=True)
class Selection:
    """What a selector chose for one question, or why it could not choose.

    Attributes:
        indices: Selected ``Candidate.index`` values, ascending (empty on failure).
        prompt_id: Id of the prompt template used; None for a local selector.
        prompt_tokens: Prompt tokens spent (0 for a local selector).
        completion_tokens: Completion tokens spent.
        failure: None on success, else a short reason (e.g. ``empty_pool``, ``parse_error``,
            ``llm_error``) that is stored as the label's ``fallback_reason``.
    """

    indices: tuple[int, ...] = ()
    prompt_id: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failure: str | None = None

    def __post_init__(self) -> None:
        if self.failure is not None and self.indices:
            raise ValueError(f"a failed selection ({self.failure!r}) must not carry indices")
        if self.failure == "":
            raise ValueError("failure must be None or a non-empty reason")

    @property
    def ok(self) -> bool:
        """True when the selector succeeded."""
        return self.failure is None


@runtime_checkable
class PathSelector(Protocol):
    """Chooses relevant candidates from a question's pool.

    Attributes:
        name: Implementation name stored with every label (``similarity:<encoder>``,
            ``llm:<model>``).
    """

    name: str

    async def select(self, sample: Sample, pool: CandidatePool) -> Selection:
        """Return the selected candidate indices, or a Selection with ``failure`` set."""
        ...


def verbalise_relation(relation: str) -> str:
    """A relation label in words: dots and underscores become spaces.

    A backward step (``rel^-1``) gets the suffix ``(reverse)``, e.g.
    ``film.film.directed_by^-1`` → ``film film directed by (reverse)``; MetaQA's
    ``directed_by`` → ``directed by``.
    """
    name, forward = split_relation(relation)
    words = " ".join(w for w in re.split(r"[._\s]+", name) if w)
    return words if forward else f"{words} (reverse)"


def verbalise_relation_path(relation_path: Sequence[str]) -> str:
    """A relation chain in words, steps joined by ``, then ``.

    ``("people.person.nationality", "location.country.capital")`` →
    ``people person nationality, then location country capital``.
    """
    return ", then ".join(verbalise_relation(r) for r in relation_path)


class SimilaritySelectorConfig(Config):
    """Settings of :class:`SimilarityPathSelector`.

    Defaults chosen on the first 300 WebQSP test questions of the shared evidence file (259
    with GPT-4o evidence labels) with the default :class:`CandidateConfig`, scoring the
    expanded positives against the GPT-4o evidence triples (precision / recall / F1, macro over
    questions; an empty selection counts as the weak fallback). Weak labels alone:
    0.84 / 0.69 / 0.72. ``text="anchored"``, ``keep_sp="all"``: λ 0.5 → F1 0.69, 0.6 → 0.75,
    **0.65 → 0.82 / 0.79 / 0.77**, 0.7 → 0.75, 0.75 → 0.74. ``keep_sp="best"`` peaks at F1
    0.72 (λ 0.6–0.65); ``text="relations"`` (chain only) peaks at 0.70 (``all``, λ 0.5) and
    0.62 (``best``). Held out (questions 300–599, 265 labelled): weak 0.84 / 0.71 / 0.74,
    defaults 0.83 / 0.79 / 0.78.
    """

    threshold: float = Field(
        0.65,
        ge=-1.0,
        le=1.0,
        description="λ: keep candidates whose cosine similarity to the question is at least this.",
    )
    top_k: int | None = Field(
        None,
        gt=0,
        description="Keep at most this many candidates by the threshold (highest first); None for no cap.",
    )
    keep_sp: Literal["best", "all"] = Field(
        "all",
        description=(
            "Shortest-path candidates that reach an answer kept regardless of the threshold: 'best' keeps "
            "the most similar one, 'all' keeps every one (the selector then only adds neighbourhood "
            "evidence to the weak paths and never drops one)."
        ),
    )
    text: Literal["anchored", "relations"] = Field(
        "anchored",
        description=(
            "What is embedded per candidate: 'anchored' = start entity name, ': ', then the chain in words; "
            "'relations' = the chain in words only (see verbalise_relation_path)."
        ),
    )


def candidate_text(candidate: Candidate, style: Literal["anchored", "relations"] = "anchored") -> str:
    """The text embedded for a candidate by :class:`SimilarityPathSelector`.

    ``anchored``: ``"Jamaica: location country languages spoken"``; ``relations``:
    ``"location country languages spoken"``.
    """
    words = verbalise_relation_path(candidate.relation_path)
    return f"{candidate.start}: {words}" if style == "anchored" else words


class SimilarityPathSelector:
    """Select candidates by cosine similarity between the question and each candidate's text.

    Each candidate is scored by ``cos(enc(question), enc(candidate_text(candidate)))``;
    candidates scoring at least ``config.threshold`` are kept (at most ``top_k``, best first).
    Shortest-path (``sp``) candidates that reach an answer are kept regardless: the most
    similar one (``keep_sp="best"``; it replaces the lowest kept candidate when ``top_k`` is
    full) or all of them (``keep_sp="all"``, on top of ``top_k``), so a refined label always
    holds at least one path to an answer when the pool has one. All texts of a question are
    encoded in one call (the encoder's on-disk cache, if configured, makes repeats free).

    The encoder runs inline in :meth:`select` (CPU-bound, nothing to await).

    Args:
        config: Threshold, cap and text style.
        encoder: The sentence encoder.

    Attributes:
        name: ``similarity:<encoder model id>``, stored with every label.
    """

    def __init__(self, config: SimilaritySelectorConfig, encoder: TextEncoder) -> None:
        self.config = config
        self.encoder = encoder
        self.name = f"similarity:{encoder.model_id}"

    def scores(self, question: str, pool: CandidatePool) -> np.ndarray:
        """Cosine similarity of each candidate's text to the question.

        Shapes:
            pool of C candidates -> (C,) float32, in pool order
        """
        if not pool.candidates:
            return np.zeros(0, dtype=np.float32)
        texts = [question] + [candidate_text(c, self.config.text) for c in pool.candidates]
        vectors = self.encoder.encode(texts)  # (1 + C, D)
        vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
        return (vectors[1:] @ vectors[0]).astype(np.float32)  # (C,)

    def choose(self, scores: np.ndarray, pool: CandidatePool) -> tuple[int, ...]:
        """The candidate indices kept for ``scores`` (see the class docstring), ascending.

        Shapes:
            scores: (C,) in pool order
        """
        top_k = self.config.top_k
        order = sorted(range(len(scores)), key=lambda i: (-float(scores[i]), i))
        kept = [i for i in order if scores[i] >= self.config.threshold][:top_k]
        reaching = [i for i in order if pool.candidates[i].kind == "sp" and pool.candidates[i].reaches_answer]
        if self.config.keep_sp == "all":
            kept = list(dict.fromkeys(kept + reaching))
        elif reaching and not set(kept) & set(reaching):
            if top_k is not None and len(kept) >= top_k:
                kept = kept[: top_k - 1]
            kept.append(reaching[0])
        return tuple(sorted(pool.candidates[i].index for i in kept))

    async def select(self, sample: Sample, pool: CandidatePool) -> Selection:
        """Select by similarity; fails with ``empty_pool`` or ``below_threshold``."""
        if not pool.candidates:
            return Selection(failure=EMPTY_POOL)
        indices = self.choose(self.scores(sample.question, pool), pool)
        if not indices:
            return Selection(failure=BELOW_THRESHOLD)
        return Selection(indices=indices)
