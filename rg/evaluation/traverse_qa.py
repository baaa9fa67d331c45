"""ReMindRAG's traversal inside the QA evaluation (``reasoner: traverse`` of ``evaluate_qa``).

Each Ray Data actor builds one :class:`TraverseQA`: the triple scorer (when ``retriever`` is set;
``traverse.kind: local`` needs it, the LLM guide uses it to order the edges it shows) and one
:class:`~rg.reasoning.traverse.Traverser` whose edge memory is the evaluation's named memory actor
(:class:`rg.memory.actor.RemoteEdges`), so every worker replays and memorises into one sealed file
and ``memory.rounds`` sees the memory grow. A batch is scored in one scorer call, then its
questions are traversed concurrently (LLM calls overlap). Gold answers never reach it.

The prediction records the traversal in ``evidence_walks``: ``traverse:<source>`` with source
``replay`` (answered on replayed edges alone), ``replay+explore`` or ``explore``, and ``+fallback``
when the local rule made a decision for the LLM; ``evidence_lines`` is the size of S.
"""

from __future__ import annotations

import asyncio
import time

import numpy as np

from rg.data.sample import Sample
from rg.evaluation.qa import Prediction, _score, error_reason
from rg.evaluation.scorers import TripleScorer
from rg.llm.journal import UsageJournal
from rg.reasoning.traverse import TraverseConfig, TraverseResult, Traverser

SCORER_NONE = "none"


class TraverseQA:
    """Answers inference views by traversal.

    Args:
        config: The ``traverse:`` section.
        scorer: Scores each question's triples (None: every triple scores 0).
        memory: The ``memory:`` section (``rg.memory.MemoryConfig``); None: no edge memory.
        memory_actor: Name of the :class:`rg.memory.actor.PoolActor` (namespace ``rg``) the driver created.
        journal: A Hand LLM guide appends each completed call here (``rg.llm.journal``).
    """

    def __init__(self, config: TraverseConfig, scorer: TripleScorer | None = None, memory=None,
                 memory_actor: str | None = None, journal: UsageJournal | None = None) -> None:
        edges = None
        if memory is not None and memory.edges is not None:
            import ray

            from rg.memory.actor import RemoteEdges

            edges = RemoteEdges(ray.get_actor(memory_actor, namespace="rg"))
        self.scorer = scorer
        self.traverser = Traverser(config, edges=edges, journal=journal)

    async def answer(self, samples: list[Sample]) -> list[Prediction]:
        started = time.perf_counter()
        scored = _score(samples, self.scorer) if self.scorer is not None else [
            (np.zeros(len(s.triples)), None) for s in samples]
        share = (time.perf_counter() - started) / max(1, len(samples))
        return list(await asyncio.gather(*(self._one(s, item, share) for s, item in zip(samples, scored))))

    async def _one(self, sample: Sample, item, share: float) -> Prediction:
        scorer = self.scorer.name if self.scorer is not None else SCORER_NONE
        base = {"id": sample.id, "question": sample.question, "reader": f"traverse:{self.traverser.name}",
                "scorer": scorer, "triples": len(sample.triples)}
        if isinstance(item, str):
            return Prediction(**base, failure=item, seconds=share)
        started = time.perf_counter()
        try:
            result = await self.traverser.traverse(sample.question, sample.q_entities, sample.triples, item[0])
        except Exception as err:  # noqa: BLE001 — a failing question is recorded, never dropped
            return Prediction(**base, failure=error_reason("traverse", err), seconds=share)
        return prediction(base, result, share + time.perf_counter() - started)


def prediction(base: dict, result: TraverseResult, seconds: float) -> Prediction:
    """The evaluation's record of one traversal."""
    walks = f"traverse:{result.source}" + ("+fallback" if result.fallbacks else "")
    return Prediction(**base, answers=result.answers,
                      ranked=tuple({"text": a, "score": s} for a, s in zip(result.answers, result.scores)),
                      failure=None if result.answers else "no_candidates", usage=result.usage,
                      evidence_lines=len(result.edges), evidence_topics=len(result.seeds),
                      evidence_walks=walks, seconds=seconds)
