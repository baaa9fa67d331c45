"""Evidence from a planner's decoded paths (rg.evidence.planned, walks: planned): exact walks and
chains on a hand-made graph, the reader's ranking from them, the BFS fallback and the config check."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from rg.config import ConfigError, validate_config
from rg.data.sample import Sample
from rg.evaluation.qa import answer_questions
from rg.jobs.evaluate_qa import QAEvaluateConfig
from rg.jobs.train_reader import ReaderTrainConfig, reader_items
from rg.evidence import EvidenceConfig
from rg.evidence.planned import planned_evidence
from rg.graph import KnowledgeGraph
from rg.graph.search import path_end_walks, path_step_triples
from rg.reasoning import RetrieverReader, RetrieverReaderConfig

# X's director D also directed F2 and F3; X's own writer W0 wrote nothing else, W2 wrote F2 and F3
TRIPLES = (
    ("X", "directed_by", "D"),  # 0
    ("F2", "directed_by", "D"),  # 1
    ("F3", "directed_by", "D"),  # 2
    ("X", "written_by", "W0"),  # 3
    ("F2", "written_by", "W2"),  # 4
    ("F3", "written_by", "W3"),  # 5
    ("F3", "written_by", "W2"),  # 6
)
THREE_HOP = ("directed_by", "directed_by^-1", "written_by")
QUESTION = "the movies that share directors with X are written by who"


def test_one_walk_per_end_and_none_back_through_the_topic():
    kg = KnowledgeGraph.from_triples(TRIPLES)
    walks = kg.path_end_walks("X", THREE_HOP)
    # W2 through F2 (its lowest-id last triple), W3 through F3; X → D ← X → W0 is not a walk here
    assert [(w.end, w.triple_ids) for w in walks] == [("W2", (0, 1, 4)), ("W3", (0, 2, 5))]
    assert all(w.relation_path == THREE_HOP and w.start == "X" for w in walks)
    assert walks[0].render() == "X → [directed_by] → D ← [directed_by] ← F2 → [written_by] → W2"
    x = kg.entity_id("X")
    through = path_end_walks(kg, x, THREE_HOP, through_starts=True)
    assert [w.end for w in through] == ["W0", "W2", "W3"] and through[0].triple_ids == (0, 0, 3)
    assert kg.path_end_walks("X", ("directed_by", "directed_by^-1")) == path_end_walks(kg, x, THREE_HOP[:2])
    assert [w.end for w in kg.path_end_walks("X", THREE_HOP[:2])] == ["F2", "F3"]  # not X itself
    assert kg.path_end_walks("Nobody", THREE_HOP) == [] and kg.path_end_walks("X", ("has_genre",)) == []


def test_walk_ends_match_the_set_wise_steps_on_random_graphs():
    rng = np.random.default_rng(3)
    for _ in range(30):
        triples = {(f"e{h}", f"r{r}", f"e{t}") for h, r, t in rng.integers(0, [12, 2, 12], size=(40, 3))}
        kg = KnowledgeGraph.from_triples(sorted(triples))
        path = tuple(f"r{r}" + ("^-1" if b else "") for r, b in rng.integers(0, 2, size=(3, 2)))
        start = kg.entity_id("e0") if kg.has_entity("e0") else 0
        steps = path_step_triples(kg, np.array([start]), path, through_starts=False)
        walks = path_end_walks(kg, start, path)
        last_far = kg.tail[steps[-1]] if not path[-1].endswith("^-1") else kg.head[steps[-1]]
        assert sorted(kg.entity_id(w.end) for w in walks) == sorted(set(last_far.tolist()) - {start})
        for walk in walks:  # every walk follows the path over real triples and never revisits the start
            assert walk.relation_path == path and walk.entities[0] == kg.entity_names[start]
            assert kg.entity_names[start] not in walk.entities[1:-1]
            for i, tid in enumerate(walk.triple_ids):
                head, _, tail = kg.triple(tid)
                assert {head, tail} == {walk.entities[i], walk.entities[i + 1]}


def test_planned_chains_read_as_the_decoded_paths_and_rank_by_path_share():
    evidence = planned_evidence(TRIPLES, None, ["X"], [(THREE_HOP, 0.6), (("written_by",), 0.3), (("has_genre",), 0.1)])
    assert evidence.stats.walk_source == "planned" and evidence.stats.walks == 3
    assert evidence.lines() == (
        "X → [directed_by] → D ← [directed_by] ← {F2 | F3} → [written_by] → {W2 | W3}",
        "X → [written_by] → W0",
    )
    assert {tuple(t) for t in evidence.triples} == {TRIPLES[i] for i in (0, 1, 2, 3, 4, 5)}
    ranked = RetrieverReader(RetrieverReaderConfig(walk_score="last", aggregate="max")).rank(evidence)
    assert [(a.text, round(a.score, 6)) for a in ranked] == [
        ("W2", round(math.log(0.6), 6)), ("W3", round(math.log(0.6), 6)), ("W0", round(math.log(0.3), 6))]
    # a path longer than max_length, or without a share, adds nothing
    assert planned_evidence(TRIPLES, None, ["X"], [(THREE_HOP, 1.0)], EvidenceConfig(max_length=2)).stats.walks == 0
    assert planned_evidence(TRIPLES, None, ["X"], [(THREE_HOP, 0.0)]).stats.walks == 0


class DecodedPaths:
    """A planner stand-in: fixed decoded paths per question, every triple scored 0."""

    name = "planner:fixed"

    def __init__(self, paths):
        self.paths = paths

    def score(self, samples):
        return [np.zeros(len(s.triples)) for s in samples]

    def decoded_paths(self, question_id):
        return self.paths


def test_qa_reads_planned_walks_and_falls_back_to_bfs_when_they_end_only_at_the_topic():
    sample = Sample("q", QUESTION, (), ("X",), (), TRIPLES)
    reader = RetrieverReader(RetrieverReaderConfig(walk_score="last", aggregate="max"))
    planned = EvidenceConfig(walks="planned")
    [p] = asyncio.run(answer_questions([sample], DecodedPaths([(THREE_HOP, 0.9)]), reader, evidence=planned))
    assert p.failure is None and p.evidence_walks == "planned" and p.answers == ("W2", "W3")
    alone = Sample("q", QUESTION, (), ("X",), (), TRIPLES[:1] + TRIPLES[3:4])  # no other film of D
    [p] = asyncio.run(answer_questions([alone], DecodedPaths([(THREE_HOP[:2], 1.0)]), reader, evidence=planned))
    assert p.evidence_walks == "bfs_fallback" and p.failure is None and set(p.answers) == {"D", "W0"}
    [p] = asyncio.run(answer_questions([sample], DecodedPaths([(THREE_HOP, 0.9)]), reader, evidence=EvidenceConfig()))
    assert p.evidence_walks == "bfs"


class ScoresOnly:
    name = "scores:only"

    def score(self, samples):
        return [np.zeros(len(s.triples)) for s in samples]


def test_planned_walks_refuse_a_scorer_without_decoded_paths():
    sample = Sample("q", QUESTION, (), ("X",), (), TRIPLES)
    with pytest.raises(ValueError, match="needs a scorer that decodes paths; scores:only does not"):
        asyncio.run(answer_questions([sample], ScoresOnly(), RetrieverReader(), evidence=EvidenceConfig(walks="planned")))


def test_planned_walks_need_a_planner_retriever():
    base = {"input": "x", "output_dir": "o", "evidence": {"walks": "planned"}}
    with pytest.raises(ConfigError, match="evidence.walks 'planned' grounds a planner's decoded paths"):
        validate_config({**base, "retriever": {"kind": "hop_distance"}}, QAEvaluateConfig)
    cfg = validate_config({**base, "retriever": {"kind": "planner", "path": "p"}}, QAEvaluateConfig)
    assert cfg.evidence.walks == "planned"


READ = {"input": "x", "output_dir": "o", "run_name": "read", "top_k": None}


def test_the_reader_stage_learns_from_the_planned_walks_as_qa_reads_them():
    sample = Sample("q", QUESTION, ("W2",), ("X",), (), TRIPLES)
    planner = {"kind": "planner", "path": "p"}
    cfg = validate_config({**READ, "evidence": {"walks": "planned"}, "retriever": planner}, ReaderTrainConfig)
    [item] = reader_items(cfg, [sample], DecodedPaths([(THREE_HOP, 0.6), (("written_by",), 0.3)]))
    assert item.answers == ("W2",) and item.evidence.stats.walk_source == "planned"
    assert item.evidence.lines() == (
        "X → [directed_by] → D ← [directed_by] ← {F2 | F3} → [written_by] → {W2 | W3}",
        "X → [written_by] → W0",
    )
    bfs = validate_config({**READ, "retriever": planner}, ReaderTrainConfig)
    [item] = reader_items(bfs, [sample], DecodedPaths([(THREE_HOP, 0.6)]))
    assert item.evidence.stats.walk_source == "bfs"


def test_the_reader_stage_refuses_planned_walks_without_a_planner():
    with pytest.raises(ConfigError, match="evidence.walks 'planned' grounds a planner's decoded paths, but "
                                          "retriever.kind is 'hop_distance'. Fix: set `retriever: \\{kind: planner"):
        validate_config({**READ, "evidence": {"walks": "planned"}, "retriever": {"kind": "hop_distance"}},
                        ReaderTrainConfig)
