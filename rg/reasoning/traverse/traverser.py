"""The traversal loop: replay, then explore / exploit until S suffices, answer, memorise.

Per question (ReMindRAG Algorithm 1 with §3.2 replay; Appendix B)::

    S ← the seed entities (the question's topic entities present in its subgraph), no edges
    S ← S ∪ the edge memory's replay from the seeds       (rg.memory.edges.EdgeMemory.replay)
    loop:  no edge leaves S                 → stop (exhausted)
           steps = max_steps                → stop (budget)
           guide.explore(S): sufficient?    → stop (sufficient); else node a ∈ S
           guide.exploit(a): edge (a, p), p ∉ S;  S ← S ∪ {p, (a, p)}
    answers, used ← guide.answer(S)
    memorise: enhance the used triples, penalise the other triples of S (EdgeMemory.memorise)

The edge memory is optional; with one, the replayed edges enter S before any step, so a question
the memory already knows needs no expansion step (``source`` is then ``replay``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np

from rg.llm.client import LLMClient
from rg.llm.journal import UsageJournal
from rg.llm.usage import Usage
from rg.reasoning.traverse.config import TraverseConfig
from rg.reasoning.traverse.guides import LLMGuide, LocalGuide, Tally
from rg.reasoning.traverse.subgraph import Subgraph, Triple

Stop = Literal["sufficient", "budget", "exhausted"]


class EdgeStore(Protocol):
    """What the traversal needs of an edge memory (``rg.memory.EdgeMemory`` or ``RemoteEdges``)."""

    def query(self, text: str) -> Any: ...

    def replay(self, triples, seeds, q) -> Any: ...

    def memorise(self, q, effective, traversed) -> tuple[int, int]: ...


@dataclass(frozen=True)
class TraverseResult:
    """One traversed question.

    Attributes:
        answers: Chosen answers, best first (empty: nothing to answer with).
        scores: Their values (local) or None (LLM).
        guide: ``local`` or ``llm:<model>``.
        stop: Why the loop ended.
        steps: Expansion steps taken.
        source: ``replay`` (answered on replayed edges alone), ``replay+explore`` or ``explore``.
        edges: Triple ids of S in the order added; ``replayed`` of them came from replay.
        used: Triple ids the answer rests on (enhanced when memorised).
        usage: LLM calls and tokens of the question (zero for the local guide).
        fallbacks: Decisions the local rule made for the LLM (``<stage>:malformed`` / ``<stage>:llm_<reason>``).
        memorised: (enhanced, penalised) edge counts; None when nothing was memorised.
        seeds: The seed entities found in the subgraph.
    """

    answers: tuple[str, ...]
    scores: tuple[float | None, ...]
    guide: str
    stop: Stop
    steps: int
    source: str
    edges: tuple[int, ...]
    replayed: int
    used: tuple[int, ...]
    usage: Usage = field(default_factory=Usage)
    fallbacks: tuple[str, ...] = ()
    memorised: tuple[int, int] | None = None
    seeds: tuple[str, ...] = ()


class Traverser:
    """Runs the loop of the module docstring.

    Args:
        config: Settings.
        edges: Edge memory for replay and memorisation (None: neither).
        client: The Hand-side LLM client (required for ``kind: llm``; built from ``config.llm`` when None).
        journal: A client built here appends each completed call to this usage journal (``rg.llm.journal``).
    """

    def __init__(self, config: TraverseConfig, edges: EdgeStore | None = None, client: LLMClient | None = None,
                 journal: UsageJournal | None = None) -> None:
        self.config = config
        self.edges = edges
        if config.kind == "llm" and client is None:
            from rg.llm.client import OpenAICompatibleClient

            assert config.llm is not None  # checked by the config
            client = OpenAICompatibleClient(config.llm, journal=journal)
        self.client = client
        self.name = f"llm:{config.llm.model}" if config.kind == "llm" and config.llm is not None else "local"

    async def traverse(self, question: str, seeds: Sequence[str], triples: Sequence[Triple],
                       scores: np.ndarray | None = None) -> TraverseResult:
        """Traverse one question's subgraph. ``scores``: one per triple (None: all zero, triple order decides)."""
        scores = np.zeros(len(triples)) if scores is None else np.asarray(scores, dtype=np.float64)
        if scores.shape != (len(triples),):
            raise ValueError(f"{scores.shape} scores for {len(triples)} triples")
        local = LocalGuide(self.config, scores)
        guide = local if self.config.kind == "local" else LLMGuide(self.config, self.client, local)
        s = Subgraph(triples, seeds)
        tally = Tally()
        qvec = self.edges.query(question) if self.edges is not None else None
        replayed = self._replay(s, qvec) if qvec is not None else 0
        steps, stop = 0, None
        while stop is None:
            if not s.frontier():
                stop = "exhausted"
            elif steps >= self.config.max_steps:
                stop = "budget"
            else:
                sufficient, node = await guide.explore(question, s, tally)
                if sufficient or node is None:
                    stop = "sufficient"
                else:
                    chosen = await guide.exploit(question, s, node, tally)
                    s.add(chosen.tid, chosen.source, "step")
                    steps += 1
        answered = await guide.answer(question, s, tally)
        memorised = None
        if qvec is not None and answered.answers:
            effective = {s.triples[t] for t in answered.used}
            memorised = self.edges.memorise(qvec, effective, {s.triples[t] for t in s.edges})
        source = ("replay" if steps == 0 else "replay+explore") if replayed else "explore"
        return TraverseResult(answers=answered.answers, scores=answered.scores, guide=self.name, stop=stop,
                              steps=steps, source=source, edges=tuple(s.edges), replayed=replayed,
                              used=answered.used, usage=tally.usage, fallbacks=tuple(tally.fallbacks),
                              memorised=tuple(memorised) if memorised is not None else None, seeds=s.seeds)

    def _replay(self, s: Subgraph, qvec) -> int:
        """Add the replayed paths to S (each from its seed); returns the replayed triples added."""
        index: dict[Triple, int] = {}
        for i, t in enumerate(s.triples):
            index.setdefault(t, i)
        replay = self.edges.replay(s.triples, list(s.seeds), qvec)
        before = len(s.edges)
        for path in replay.paths:
            at = path[0].edge[0] if path[0].forward else path[0].edge[2]
            for step in path:
                tid = index[tuple(step.edge)]
                s.add(tid, at, "replay")
                at = step.edge[2] if step.forward else step.edge[0]
        return len(s.edges) - before
