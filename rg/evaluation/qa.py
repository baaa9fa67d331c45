"""Question answering from retrieved evidence: retrieve top-K → evidence → reader (ReG S(II)).

The inference half of the QA evaluation, free of Ray and of gold answers, so that the Ray Data
actors of :mod:`rg.jobs.evaluate_qa`, a serving path and the tests run one implementation::

    view = inference_view(sample)                     # answers and answer entities removed
    [prediction] = await answer_questions([view], scorer, reader, top_k=100, chains=True)
    prediction.answers, prediction.failure, prediction.usage.prompt_tokens

Per question: a :class:`~rg.evaluation.scorers.TripleScorer` scores every triple of its
subgraph, the ``top_k`` best are kept, reorganised into evidence chains
(:func:`rg.evidence.build_evidence`) or, for the ``chains: false`` ablation, left as one line
per triple in rank order (:func:`rg.evidence.triple_evidence`), and a
:class:`~rg.reasoning.Reader` answers from them. Every question gives a :class:`Prediction`:
a failure at any step (a scorer, evidence or reader exception, or a reader's own fallback) is
recorded with its reason, never dropped and never raised.

Gold answers never reach this module's callers' readers: :func:`inference_view` strips them
from a sample before it is scored or read, and metrics are computed on the evaluation side
(:mod:`rg.evaluation.qa_metrics`).
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal, Mapping, Sequence

import numpy as np
from pydantic import Field

from rg.data.sample import Sample
from rg.evaluation.scorers import PathScorer, TripleScorer
from rg.evidence import Evidence, EvidenceConfig, build_evidence, top_k_triples, triple_evidence
from rg.evidence.planned import PlannedPaths, planned_evidence
from rg.llm.journal import UsageJournal
from rg.llm.usage import Usage
from rg.reasoning import LLMReader, LLMReaderConfig, Reader, Reading, RetrieverReader, RetrieverReaderConfig
from rg.reasoning.tuned_reader import TunedReader, TunedReaderConfig

RANKED_KEPT = 10
"""Ranked answers written per prediction (the selected ones are always written in full)."""
BFS_FALLBACK = "bfs_fallback"
"""``walk_source`` of planned evidence that fell back to BFS walks (the decoded paths end only at topics)."""


class RetrieverReaderChoice(RetrieverReaderConfig):
    """``reader: {kind: retriever, ...}``: the local retriever-score reader (no LLM)."""

    kind: Literal["retriever"] = "retriever"


class LLMReaderChoice(LLMReaderConfig):
    """``reader: {kind: llm, llm: {base_url, model, ...}, ...}``: an OpenAI-compatible LLM reader."""

    kind: Literal["llm"]


class TunedReaderChoice(TunedReaderConfig):
    """``reader: {kind: tuned, checkpoint: <reader folder>}``: the LoRA-tuned local reader."""

    kind: Literal["tuned"]


ReaderChoice = Annotated[RetrieverReaderChoice | LLMReaderChoice | TunedReaderChoice, Field(discriminator="kind")]
"""The ``reader`` section of a QA config, picked by its ``kind``."""


def build_reader(choice: RetrieverReaderChoice | LLMReaderChoice | TunedReaderChoice,
                 journal: UsageJournal | None = None) -> Reader:
    """The reader a config section names (an LLM reader creates its client on first use and
    appends each completed call to ``journal``, when given)."""
    if isinstance(choice, LLMReaderChoice):
        return LLMReader(choice, journal=journal)
    if isinstance(choice, TunedReaderChoice):
        return TunedReader.from_config(choice)
    return RetrieverReader(choice)


def inference_view(sample: Sample) -> Sample:
    """``sample`` without what only evaluation may see: answers, answer entities, gold paths."""
    return replace(sample, answers=(), a_entities=(), choices=(), relation_paths=())


@dataclass(frozen=True)
class Prediction:
    """What the inference side produced for one question (no gold answers, no metrics).

    Attributes:
        id: Question id.
        question: Question text.
        answers: The reader's selected answers, best first (empty on failure).
        ranked: Up to :data:`RANKED_KEPT` ranked answers as ``{"text", "score"}``.
        reader: The reader implementation (``retriever_scores``, ``llm:<model>``).
        scorer: The triple scorer (e.g. ``mlp:refined``, ``hop_distance``).
        chains: Whether the evidence was chains (False: one line per retrieved triple).
        failure: None on success; else the reason: a reader fallback (``no_candidates``,
            ``no_answer_line``, ``llm_timeout``, ...), a dual-tower end (``unverified``,
            ``no_topics``; ``reader_found_nothing``: verified evidence without an answer) or
            ``<step>_error: <Type>: <message>`` with step ``retrieve``, ``evidence`` or ``read``.
        usage: LLM usage of the question (zero for a local reader).
        usage_by_side: The same split by side (``hand`` / ``brain``) where a reasoner books sides
            (the dual tower); empty otherwise.
        triples: Retrieved triples given to evidence construction.
        evidence_lines: Evidence lines built (what an LLM reader's prompt holds, up to its cap).
        evidence_topics: Topic entities found among the retrieved triples.
        evidence_walks: Where the chains' walks came from (``EvidenceStats.walk_source``;
            empty when no evidence was built).
        prompt_id: Prompt template of an LLM reader.
        seconds: Wall time of the question's evidence and reading (scoring is per batch and
            shared evenly among its questions).
        trace: How a reasoner reached its answer, for auditing one question (the dual tower: where
            its analysis came from, the experience score, replay agreement, the tree's indicators);
            empty for the retriever readers.
        exposure: What the question sent to a remote Brain (the dual tower's
            ``ExposureLedger.to_dict()``: per stage calls, requests, characters, pseudonyms, refusals by
            category); empty for readers that send nothing.
    """

    id: str
    question: str
    answers: tuple[str, ...] = ()
    ranked: tuple[Mapping[str, Any], ...] = ()
    reader: str = ""
    scorer: str = ""
    chains: bool = True
    failure: str | None = None
    usage: Usage = field(default_factory=Usage)
    usage_by_side: Mapping[str, Usage] = field(default_factory=dict)
    triples: int = 0
    evidence_lines: int = 0
    evidence_topics: int = 0
    evidence_walks: str = ""
    prompt_id: str | None = None
    seconds: float = 0.0
    trace: Mapping[str, Any] = field(default_factory=dict)
    exposure: Mapping[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.failure is None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form; :meth:`from_dict` inverts it."""
        return {
            "id": self.id,
            "question": self.question,
            "answers": list(self.answers),
            "ranked": [dict(r) for r in self.ranked],
            "reader": self.reader,
            "scorer": self.scorer,
            "chains": self.chains,
            "failure": self.failure,
            "usage": self.usage.to_dict(),
            "usage_by_side": {side: u.to_dict() for side, u in self.usage_by_side.items()},
            "triples": self.triples,
            "evidence_lines": self.evidence_lines,
            "evidence_topics": self.evidence_topics,
            "evidence_walks": self.evidence_walks,
            "prompt_id": self.prompt_id,
            "seconds": self.seconds,
            "trace": dict(self.trace),
            "exposure": dict(self.exposure),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Prediction":
        return cls(
            id=str(data["id"]),
            question=str(data["question"]),
            answers=tuple(str(a) for a in data["answers"]),
            ranked=tuple(dict(r) for r in data["ranked"]),
            reader=str(data["reader"]),
            scorer=str(data["scorer"]),
            chains=bool(data["chains"]),
            failure=data["failure"],
            usage=Usage.from_dict(data["usage"]),
            usage_by_side={side: Usage.from_dict(u) for side, u in data.get("usage_by_side", {}).items()},
            triples=int(data["triples"]),
            evidence_lines=int(data["evidence_lines"]),
            evidence_topics=int(data["evidence_topics"]),
            evidence_walks=str(data.get("evidence_walks", "")),  # absent in records of older rg versions
            prompt_id=data["prompt_id"],
            seconds=float(data["seconds"]),
            trace=dict(data.get("trace", {})),  # absent in records of older rg versions
            exposure=dict(data.get("exposure", {})),
        )


def error_reason(step: str, err: Exception) -> str:
    """``<step>_error: <Type>: <message>`` (message cut to 200 characters)."""
    return f"{step}_error: {type(err).__name__}: {str(err)[:200]}"


Scored = tuple[np.ndarray, PlannedPaths | None]
"""One question's triple scores, and the decoded paths when the evidence is built from them."""


def _score(samples: Sequence[Sample], scorer: TripleScorer, planned: bool = False) -> list[Scored | str]:
    """Per sample, its triple scores (and with ``planned`` the planner's decoded paths), or the
    reason scoring failed.

    The batch is scored in one call; if that raises, each sample is scored alone so that one
    bad question fails only itself.
    """
    if planned and not isinstance(scorer, PathScorer):
        raise ValueError(f"evidence.walks 'planned' needs a scorer that decodes paths; {scorer.name} does not")
    decoder = scorer if planned and isinstance(scorer, PathScorer) else None

    def check(sample: Sample, scores: np.ndarray) -> Scored:
        scores = np.asarray(scores, dtype=np.float64)
        if scores.shape != (len(sample.triples),):
            raise ValueError(f"scorer gave {scores.shape} scores for {len(sample.triples)} triples")
        return scores, (decoder.decoded_paths(sample.id) if decoder is not None else None)

    try:
        batch = scorer.score(samples)
        if len(batch) != len(samples):
            raise ValueError(f"scorer returned {len(batch)} score arrays for {len(samples)} questions")
        return [check(s, x) for s, x in zip(samples, batch)]
    except Exception:  # noqa: BLE001 — retried one question at a time below, to isolate the failure
        pass
    out: list[Scored | str] = []
    for sample in samples:
        try:
            out.append(check(sample, scorer.score([sample])[0]))
        except Exception as err:  # noqa: BLE001 — recorded per question, never dropped
            out.append(error_reason("retrieve", err))
    return out


def question_evidence(
    sample: Sample,
    scores: np.ndarray,
    top_k: int | None,
    chains: bool,
    config: EvidenceConfig,
    min_score: float | None = None,
    paths: PlannedPaths | None = None,
) -> Evidence:
    """The evidence of one question: its ``top_k`` triples (scoring at least ``min_score``) as
    chains, or as raw lines; with ``config.walks == "planned"`` the chains are the groundings of
    the decoded ``paths`` instead (:func:`rg.evidence.planned.planned_evidence`), or BFS chains
    over the top triples when those paths end at no entity but the topics (``walk_source``
    ``bfs_fallback`` in the stats and the prediction)."""
    if chains and config.walks == "planned":
        if paths is None:
            raise ValueError("evidence.walks 'planned' needs the planner's decoded paths; use retriever kind 'planner'")
        planned = planned_evidence(sample.triples, scores, sample.q_entities, paths, config)
        if planned.stats.walks:
            return planned
    triples, top = top_k_triples(sample.triples, scores, top_k, min_score)
    if chains and config.walks == "planned":  # the decoded paths reach no entity but the topics
        evidence = build_evidence(triples, top, sample.q_entities, config)
        return replace(evidence, stats=replace(evidence.stats, walk_source=BFS_FALLBACK))
    if chains:
        return build_evidence(triples, top, sample.q_entities, config)
    return triple_evidence(triples, top, sample.q_entities)


def _prediction(sample: Sample, reader: Reader, scorer: TripleScorer, chains: bool, **fields: Any) -> Prediction:
    return Prediction(id=sample.id, question=sample.question, reader=reader.name, scorer=scorer.name, chains=chains, **fields)


def _finite(score: float | None) -> float | None:
    """A score for JSON: None for a missing or infinite one (e.g. ``-inf`` of an unreachable triple)."""
    return score if score is not None and math.isfinite(score) else None


def _from_reading(base: dict[str, Any], reading: Reading) -> dict[str, Any]:
    ranked = tuple({"text": a.text, "score": _finite(a.score)} for a in reading.ranked[:RANKED_KEPT])
    return {
        **base,
        "answers": reading.answers,
        "ranked": ranked,
        "failure": reading.fallback,
        "usage": reading.usage,
        "prompt_id": reading.prompt_id,
    }


async def answer_questions(
    samples: Sequence[Sample],
    scorer: TripleScorer,
    reader: Reader,
    *,
    top_k: int | None = 100,
    chains: bool = True,
    evidence: EvidenceConfig | None = None,
    min_score: float | None = None,
) -> list[Prediction]:
    """Retrieve, build evidence and read for a batch of questions; one prediction each, in order.

    The batch is scored in one scorer call and read concurrently (an LLM reader's client bounds
    the requests in flight). Pass samples through :func:`inference_view` first: nothing here
    needs the answers.

    Args:
        samples: Questions with their subgraphs.
        scorer: Scores every triple of a question.
        reader: Answers from the evidence.
        top_k: Triples kept per question (None: all, ranked).
        min_score: Also drop retrieved triples scoring below this (None: no floor).
        chains: Evidence chains (ReG S(II)) when True; one line per triple when False.
        evidence: Chain length and merging switches (defaults when None).

    Returns:
        One :class:`Prediction` per sample, failures included.
    """
    config = evidence if evidence is not None else EvidenceConfig()
    started = time.perf_counter()
    scored = _score(samples, scorer, planned=chains and config.walks == "planned")
    share = (time.perf_counter() - started) / max(1, len(samples))
    built: list[Evidence | str] = []
    for sample, item in zip(samples, scored):
        if isinstance(item, str):
            built.append(item)
            continue
        scores, paths = item
        try:
            built.append(question_evidence(sample, scores, top_k, chains, config, min_score, paths))
        except Exception as err:  # noqa: BLE001 — recorded per question, never dropped
            built.append(error_reason("evidence", err))

    async def read(sample: Sample, item: Evidence | str) -> Prediction:
        if isinstance(item, str):
            return _prediction(sample, reader, scorer, chains, failure=item, seconds=share)
        start = time.perf_counter()
        base = {
            "triples": item.stats.triples_in,
            "evidence_lines": item.stats.chains_out,
            "evidence_topics": item.stats.topics,
            "evidence_walks": item.stats.walk_source,
        }
        try:
            reading = await reader.read(sample.question, item)
        except Exception as err:  # noqa: BLE001 — a failing reader fails one question, recorded
            fields = {**base, "failure": error_reason("read", err)}
        else:
            fields = _from_reading(base, reading)
        return _prediction(sample, reader, scorer, chains, seconds=share + time.perf_counter() - start, **fields)

    return list(await asyncio.gather(*(read(s, e) for s, e in zip(samples, built))))
