"""The local Brain: the trained relation-path planner acting on the anonymised payload only.

The planner (RoG-style, :mod:`rg.retrievers.planner`) already reads questions with the topic
entities masked; here it reads the sealed payload's anonymised question, with the session's topic
tags (``TE_1 (film)``) put back to the planner's mask ``<e>``. It sees nothing else:

- **analysis**: beam search constrained to the payload's relation-path hints (a trie of the
  anonymised relation paths from the topic entities). Each decoded path is an indicator
  (``TE -[r1]-> ?x -[r2]-> ANSWER``), its depth the path length; D_predict is the best path's;
- **selection**: the planner's log-likelihood of each candidate's relation sequence (summed over
  a multi-topic candidate's branches), best first;
- **follow-up** (refine mode): the planner cannot read the Hand's free-text follow-up, so it answers
  it by decoding the question again, constrained to the relation paths the refinement asks for
  (the hinted paths no rejected candidate took); the best path is the refined indicator I+;
- **prediction** (predict mode): beam search constrained to the hints as in the analysis; each
  decoded path is followed along the shown paths' branches as far as their relations agree, and
  the node reached there is a target (a bridge from which the rest of the decoded path goes on, or
  the answer it reaches); I_pred is the rest of the best target's path.

In ``privacy`` mode the view's relation labels are schema clusters, so the planner must have been
trained on that view (:func:`view_relation_path` maps training paths; the clustering is per KG,
not per session, so it can be learned). Labels it has no token for cannot be written or scored.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable, Sequence

from rg.graph.path import split_relation
from rg.llm.usage import Usage, UsageLedger
from rg.privacy.schema import KGSchema
from rg.reasoning.dualtower.brain import Analysis, BrainError, Choice, FollowUp, Indicator, Prediction
from rg.reasoning.dualtower.payload import (
    AnalysisPayload,
    FollowUpPayload,
    PredictionPayload,
    SealedPayload,
    SelectionPayload,
)
from rg.retrievers.planner.decode import beam_search
from rg.retrievers.planner.likelihood import path_log_likelihood
from rg.retrievers.planner.model import PlannerModel
from rg.retrievers.planner.config import PlannerConfig
from rg.retrievers.planner.prompt import brain_wording
from rg.reasoning.dualtower.prompts import protocol_words
from rg.retrievers.planner.trie import RelationTrie, token_trie

logger = logging.getLogger(__name__)
CLUSTER_TYPES = re.compile(r"\((?P<head>[^()→]+)→(?P<tail>[^()→]+)\)$")
STAGE_ANALYSE = "brain_analyse"
STAGE_SELECT = "brain_select"
STAGE_FOLLOW_UP = "brain_follow_up"
STAGE_PREDICT = "brain_predict"


def planner_question(masked: str, config: PlannerConfig) -> str:
    """The payload's anonymised question as ``config``'s prompt takes it (:func:`brain_wording`): topic tags
    become ``<e>`` when the planner was trained with masked topics, pseudonyms ``<n>`` when it was trained
    on questions masked as a session masks them (``mask_names``), and the appended list of topics the
    question does not name is dropped."""
    return brain_wording(masked, config.mask_topics, config.mask_names is not None)


def protocol_drift(config: PlannerConfig) -> frozenset[str]:
    """The Brain protocol's words that differ between what a ``mask_names`` planner was trained with and what
    the prompts write now (empty when they agree or without ``mask_names``): a changed word is masked
    differently in training and in the session, so the planner should be retrained."""
    if config.mask_names is None:
        return frozenset()
    return frozenset(config.mask_names.protocol).symmetric_difference(protocol_words())


def hint_trie(paths: Iterable[Sequence[str]]) -> RelationTrie:
    """The prefix-closed trie of the hinted relation paths."""
    root = RelationTrie({})
    for path in paths:
        node = root
        for label in path:
            node = node.children.setdefault(label, RelationTrie({}))
    return root


def answer_type(relations: Sequence[str]) -> str | None:
    """The answer's type when the last relation is a cluster label ``rel_03 (film→person)``."""
    if not relations:
        return None
    label, forward = split_relation(relations[-1])
    match = CLUSTER_TYPES.search(label)
    if match is None:
        return None
    return (match["tail"] if forward else match["head"]).strip()


def indicator_text(relations: Sequence[str], start: str = "TE") -> str:
    """``TE -[r1]-> ?x1 -[r2]-> ANSWER`` (``start``: where the chain begins)."""
    steps = [f"-[{r}]-> {'ANSWER' if i == len(relations) - 1 else f'?x{i + 1}'}" for i, r in enumerate(relations)]
    return f"{start} " + " ".join(steps)


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    """How many leading labels ``a`` and ``b`` share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def view_relation_path(path: Sequence[str], schema: KGSchema, mode: str) -> tuple[str, ...]:
    """A raw relation path as the Brain's view writes it (clusters in ``privacy`` mode), for
    training the local Brain's planner on the view it will read."""
    return schema.view_path(path) if mode == "privacy" else tuple(path)


class LocalBrain:
    """The planner as a Brain (see the module docstring).

    Args:
        planner: A trained planner in eval mode.
        beams: Paths decoded per analysis.
        indicators: Most indicators returned.
        ledger: Usage ledger its calls are booked in (``side: brain``, no tokens).
    """

    def __init__(self, planner: PlannerModel, beams: int = 3, indicators: int = 1,
                 ledger: UsageLedger | None = None) -> None:
        self.planner = planner
        self.beams = beams
        self.indicators = indicators
        self.ledger = ledger if ledger is not None else UsageLedger()
        drift = protocol_drift(planner.config)
        if drift:
            logger.warning("the local Brain's planner was trained on questions masked with other protocol words "
                           "(%d differ, e.g. %s): questions may reach it masked differently. Fix: retrain it with "
                           "`python -m jobs.train` on its config", len(drift), ", ".join(sorted(drift)[:5]))
        self.name = f"planner:{planner.prompt.full_id}"

    def _prompt(self, question: str) -> list[int]:
        return self.planner.prompt_ids([planner_question(question, self.planner.config)])[0]

    def _book(self, stage: str, started: float) -> None:
        self.ledger.add(stage, "brain", Usage(calls=1, latency_s=time.perf_counter() - started))

    def analyse_batch(self, payloads: Sequence[SealedPayload]) -> list[Analysis | BrainError]:
        """The analyses of several payloads in one constrained beam search (each with its own hint
        trie); a payload the planner cannot analyse gets its :class:`BrainError` in its place. Calls
        are not booked here (:meth:`analyse` books one; a Serve batch books one per question)."""
        shown = [p.open(AnalysisPayload) for p in payloads]
        limit = self.planner.config.max_path_len
        tries = [token_trie(hint_trie(p[:limit] for p in s.relation_paths), self.planner.vocab)[0] for s in shown]
        out: list[Analysis | BrainError] = [
            BrainError("no_paths", "no hinted relation path has a planner token") for _ in shown]
        live = [i for i, trie in enumerate(tries) if trie]
        if live:
            decoded = beam_search(self.planner, [self._prompt(shown[i].question) for i in live], self.beams,
                                  [tries[i] for i in live])
            for i, beams in zip(live, decoded):
                out[i] = self._analysis([b.relation_path for b in beams if b.relation_path], shown[i].max_depth)
        return out

    def _analysis(self, paths: list[tuple[str, ...]], max_depth: int) -> Analysis | BrainError:
        if not paths:
            return BrainError("no_paths", "the planner wrote no relation path")
        indicators = tuple(
            Indicator(text=indicator_text(p), relations=p, depth=min(len(p), max_depth), answer_type=answer_type(p))
            for p in paths[: self.indicators])
        return Analysis((), indicators, indicators[0].depth)

    async def analyse(self, payload: SealedPayload) -> Analysis:
        started = time.perf_counter()
        [result] = self.analyse_batch([payload])
        self._book(STAGE_ANALYSE, started)
        if isinstance(result, BrainError):
            raise result
        return result

    async def select(self, payload: SealedPayload) -> Choice:
        started = time.perf_counter()
        shown = payload.open(SelectionPayload)
        prompt = self._prompt(shown.question)
        branches = [b for c in shown.candidates for b in c.branches]
        scores = dict(zip(map(tuple, branches), path_log_likelihood(self.planner, prompt, branches)))
        total = {c.id: sum(scores[tuple(b)] for b in c.branches) for c in shown.candidates}
        self._book(STAGE_SELECT, started)
        ranked = sorted((i for i in total if total[i] > float("-inf")), key=lambda i: (-total[i], i))
        if not ranked:
            raise BrainError("no_paths", "the planner can score no candidate's relations")
        return Choice(tuple(ranked[: shown.keep]))

    def _decode(self, question: str, paths: Iterable[Sequence[str]]) -> list[tuple[str, ...]]:
        """The planner's beams for ``question`` constrained to ``paths``; BrainError when it can write none."""
        limit = self.planner.config.max_path_len
        trie = token_trie(hint_trie(p[:limit] for p in paths), self.planner.vocab)[0]
        if not trie:
            raise BrainError("no_paths", "no relation path asked for has a planner token")
        beams = beam_search(self.planner, [self._prompt(question)], self.beams, [trie])[0]
        decoded = [b.relation_path for b in beams if b.relation_path]
        if not decoded:
            raise BrainError("no_paths", "the planner wrote no relation path")
        return decoded

    async def follow_up(self, payload: SealedPayload) -> FollowUp:
        started = time.perf_counter()
        shown = payload.open(FollowUpPayload)
        try:
            best = self._decode(shown.question, shown.relation_paths)[0]
        finally:
            self._book(STAGE_FOLLOW_UP, started)
        indicator = Indicator(text=indicator_text(best), relations=best, depth=min(len(best), shown.max_depth),
                              answer_type=answer_type(best))
        return FollowUp("a relation path not tried yet", indicator)

    async def predict(self, payload: SealedPayload) -> Prediction:
        started = time.perf_counter()
        shown = payload.open(PredictionPayload)
        try:
            decoded = self._decode(shown.question, shown.relation_paths)
        finally:
            self._book(STAGE_PREDICT, started)
        targets: dict[str, tuple[str, ...]] = {}  # target node -> the rest of its decoded path
        for path in decoded:
            for tried in shown.paths:
                for labels, nodes in zip(tried.branches, tried.nodes):
                    k = common_prefix(path, labels)
                    rest = path[k:]
                    if k == 0 or (not rest and k == len(labels)):  # off the path, or the rejected candidate itself
                        continue
                    targets.setdefault(nodes[k - 1], rest)
        if not targets:
            raise BrainError("no_targets", "no decoded path follows a shown path")
        best = list(targets)[: shown.keep]
        rest = targets[best[0]]
        indicator = None
        if rest:
            indicator = Indicator(text=indicator_text(rest, best[0]), relations=rest,
                                  depth=min(len(rest), shown.max_depth), answer_type=answer_type(rest))
        return Prediction(tuple(best), indicator)
