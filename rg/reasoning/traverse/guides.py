"""Who steers the traversal: the triple scorer's scores (``local``) or a Hand-side LLM (``llm``).

A guide makes the three decisions of ReMindRAG's loop on the subgraph S
(:class:`~rg.reasoning.traverse.subgraph.Subgraph`):

* ``explore``: is S sufficient, and if not, which node of S is most answer-relevant;
* ``exploit``: which edge of that node to a node outside S to add;
* ``answer``: the answers in S, and the triples they rest on (what memorisation enhances).

:class:`LocalGuide` reads the scores of the question's triples (a retriever's logits or the
planner's end scores): a node's relevance is the best score of its edges leaving S, the chosen
node is the most relevant one, its best edge is added, and S is sufficient once no edge leaving
it scores above ``min_score``. It answers with the nodes of S whose path from a seed has the best
value (``walk_score``: the sum or the last of the path's scores; unnamed nodes and seeds are never
answers). :class:`LLMGuide` asks the model (:mod:`rg.reasoning.traverse.prompts`); a reply that is
not the expected JSON is re-asked at most ``reasks`` times, then that one decision is made by the
local rule and recorded as a fallback (``<stage>:malformed``), as is a call that failed after the
client's bounded retries (``<stage>:llm_<reason>``). Every call and its tokens are counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel

from rg.data.entities import is_unnamed
from rg.llm.client import Completion, LLMClient, LLMError
from rg.llm.prompts import PromptTemplate
from rg.llm.usage import Usage
from rg.metrics import normalize_answer
from rg.reasoning.dualtower.prompts import parse_json_reply
from rg.reasoning.traverse.config import TraverseConfig
from rg.reasoning.traverse.prompts import (
    ANSWER, EXPLOIT, EXPLORE, REASK, AnswerReply, ExploitReply, ExploreReply,
)
from rg.reasoning.traverse.subgraph import Candidate, Subgraph


@dataclass(frozen=True)
class Answered:
    """The answers (best first), each with its value (None from an LLM), and the triple ids used."""

    answers: tuple[str, ...]
    scores: tuple[float | None, ...]
    used: tuple[int, ...]


@dataclass
class Tally:
    """One question's LLM cost and fallbacks."""

    usage: Usage = field(default_factory=Usage)
    fallbacks: list[str] = field(default_factory=list)


class LocalGuide:
    """The score-driven guide (module docstring). ``scores`` has one value per triple of S's graph."""

    def __init__(self, config: TraverseConfig, scores: np.ndarray) -> None:
        self.config = config
        self.scores = np.asarray(scores, dtype=np.float64)

    def _best(self, candidates: list[Candidate]) -> Candidate | None:
        best = None
        for c in candidates:  # first of equal scores wins: S order, then triple order
            if best is None or self.scores[c.tid] > self.scores[best.tid]:
                best = c
        return best

    async def explore(self, question: str, s: Subgraph, tally: Tally) -> tuple[bool, str | None]:
        best = self._best(s.frontier())
        if best is None or self.scores[best.tid] <= self.config.min_score:
            return True, None
        return False, best.source

    async def exploit(self, question: str, s: Subgraph, node: str, tally: Tally) -> Candidate:
        best = self._best(s.candidates(node))
        if best is None:
            raise ValueError(f"{node!r} has no edge leaving the subgraph")
        return best

    def value(self, s: Subgraph, node: str) -> float:
        path = s.path_to(node)
        return float(self.scores[path[-1]]) if self.config.walk_score == "last" else float(self.scores[path].sum())

    async def answer(self, question: str, s: Subgraph, tally: Tally) -> Answered:
        seeds = set(s.seeds)
        values = {n: self.value(s, n) for n in s.nodes if n not in seeds and not is_unnamed(n)}
        if not values:
            return Answered((), (), ())
        ranked = sorted(values, key=lambda n: -values[n])  # stable: S order among ties
        top = values[ranked[0]]
        chosen = [n for n in ranked if values[n] >= top - self.config.max_gap]
        used = tuple(dict.fromkeys(t for n in chosen for t in s.path_to(n)))
        return Answered(tuple(chosen), tuple(values[n] for n in chosen), used)


def _cost(done: Completion) -> Usage:
    return Usage(prompt_tokens=done.prompt_tokens, completion_tokens=done.completion_tokens,
                 total_tokens=done.prompt_tokens + done.completion_tokens, calls=1, retries=done.retries,
                 latency_s=done.latency_s)


class Malformed(ValueError):
    """A reply that parsed but names something S does not hold."""


class LLMGuide:
    """The LLM-driven guide with the local rule as its fallback (module docstring).

    Args:
        config: Settings (``max_candidates``, ``max_lines``, ``reasks``).
        client: A Hand-side client (its ledger books the calls by stage too).
        local: The fallback guide, over the same scores (they also order the candidate edges shown).
    """

    def __init__(self, config: TraverseConfig, client: LLMClient, local: LocalGuide) -> None:
        self.config = config
        self.client = client
        self.local = local

    async def _ask(self, template: PromptTemplate, fields: dict[str, str], reply: type[BaseModel], check,
                   tally: Tally):
        """The checked reply, or None after a failed call or ``reasks`` malformed replies (fallback recorded)."""
        messages = template.render(**fields)
        for _ in range(self.config.reasks + 1):
            try:
                done = await self.client.complete(messages, stage=template.id, prompt_id=template.full_id)
            except LLMError as err:
                tally.usage += Usage(calls=1, retries=err.attempts - 1, failures=1)
                tally.fallbacks.append(f"{template.id}:llm_{err.reason}")
                return None
            tally.usage += _cost(done)
            try:
                return check(parse_json_reply(done.text, reply))
            except ValueError as err:  # Malformed included
                messages = [*messages, {"role": "assistant", "content": done.text},
                            {"role": "user", "content": REASK.format(problem=err)}]
        tally.fallbacks.append(f"{template.id}:malformed")
        return None

    def _nodes(self, s: Subgraph) -> list[str]:
        return s.nodes[: self.config.max_lines]

    def _lines(self, s: Subgraph) -> list[int]:
        return s.edges[: self.config.max_lines]

    async def explore(self, question: str, s: Subgraph, tally: Tally) -> tuple[bool, str | None]:
        nodes = self._nodes(s)
        lines = self._lines(s)

        def check(r: ExploreReply) -> tuple[bool, str | None]:
            if r.sufficient:
                return True, None
            if r.node is None or not 0 <= r.node < len(nodes):
                raise Malformed(f"node must be one of 0..{len(nodes) - 1} when sufficient is false")
            if not s.candidates(nodes[r.node]):
                raise Malformed(f"node {r.node} has no unexplored neighbour; choose another")
            return False, nodes[r.node]

        fields = {"question": question, "nodes": "\n".join(f"[{i}] {n}" for i, n in enumerate(nodes)),
                  "triples": "\n".join(s.render(t) for t in lines) or "(none yet)"}
        got = await self._ask(EXPLORE, fields, ExploreReply, check, tally)
        return got if got is not None else await self.local.explore(question, s, tally)

    async def exploit(self, question: str, s: Subgraph, node: str, tally: Tally) -> Candidate:
        scores = self.local.scores
        shown = sorted(s.candidates(node), key=lambda c: -scores[c.tid])[: self.config.max_candidates]

        def check(r: ExploitReply) -> Candidate:
            if not 0 <= r.edge < len(shown):
                raise Malformed(f"edge must be one of 0..{len(shown) - 1}")
            return shown[r.edge]

        fields = {"question": question, "node": node,
                  "edges": "\n".join(f"[{i}] {s.render(c.tid)}" for i, c in enumerate(shown))}
        got = await self._ask(EXPLOIT, fields, ExploitReply, check, tally)
        return got if got is not None else await self.local.exploit(question, s, node, tally)

    async def answer(self, question: str, s: Subgraph, tally: Tally) -> Answered:
        lines = self._lines(s)
        by_form: dict[str, str] = {}
        for n in s.nodes:
            if form := normalize_answer(n):
                by_form.setdefault(form, n)

        def check(r: AnswerReply) -> Answered:
            bad = [u for u in r.used if not 0 <= u < len(lines)]
            if bad:
                raise Malformed(f"used triple numbers {bad} are not among 0..{len(lines) - 1}")
            texts = tuple(dict.fromkeys(a.strip() for a in r.answers if a.strip()))
            if not texts:
                raise Malformed("answers is empty")
            paths = [t for a in texts if (n := by_form.get(normalize_answer(a))) is not None for t in s.path_to(n)]
            used = tuple(dict.fromkeys([lines[u] for u in r.used] + paths))
            return Answered(texts, (None,) * len(texts), used)

        fields = {"question": question,
                  "triples": "\n".join(f"[{i}] {s.render(t)}" for i, t in enumerate(lines)) or "(none)"}
        got = await self._ask(ANSWER, fields, AnswerReply, check, tally)
        return got if got is not None else await self.local.answer(question, s, tally)
