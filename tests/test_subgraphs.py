"""Per-question subgraph building and shard bookkeeping, on a tiny hand-made KG (no Ray)."""

from __future__ import annotations

import json

import pytest

from rg.data.records import BadRow
from rg.data.rog import read_rog
from rg.data.sample import Question
from rg.subgraphs import (
    ShardStats,
    ShardTask,
    SubgraphConfig,
    Unbuildable,
    build_sample,
    plan_shards,
    run_shard,
)
from rg.graph import KnowledgeGraph

# film F1 directed_by P1 and written_by P1 (parallel); F1 starred A1, A2; F2 starred A2
TRIPLES = [
    ("F1", "directed_by", "P1"),
    ("F1", "written_by", "P1"),
    ("F1", "starred_actors", "A1"),
    ("F1", "starred_actors", "A2"),
    ("F2", "starred_actors", "A2"),
    ("F2", "release_year", "1999"),
]


@pytest.fixture()
def kg() -> KnowledgeGraph:
    return KnowledgeGraph.from_triples(TRIPLES)


def q(qid: str, topic: str, answers: tuple[str, ...], hops: int | None = 1) -> Question:
    return Question(id=qid, question=f"about {topic}", answers=answers, q_entities=(topic,), hops=hops)


def test_build_sample_exact_subgraph_and_coverage(kg):
    built = build_sample(kg, q("a", "P1", ("F1",)), SubgraphConfig())
    assert built.sample.triples == (TRIPLES[0], TRIPLES[1])  # both parallel relations kept
    assert built.covered and built.covered_uncapped and not built.truncated
    assert built.sample.a_entities == ("F1",) and built.sample.hops == 1

    two = build_sample(kg, q("b", "A1", ("A2",), hops=2), SubgraphConfig())
    assert set(two.sample.triples) == {TRIPLES[0], TRIPLES[1], TRIPLES[2], TRIPLES[3]}
    assert two.covered
    three = build_sample(kg, q("c", "A1", ("1999",), hops=2), SubgraphConfig())
    assert not three.covered  # 1999 is 3 hops from A1


def test_cap_cost_is_measured(kg):
    cfg = SubgraphConfig(max_triples=3)
    built = build_sample(kg, q("d", "A1", ("A2",), hops=2), cfg)
    assert built.truncated and len(built.sample.triples) == 3
    assert built.covered_uncapped
    assert built.covered == ("A2" in {e for t in built.sample.triples for e in (t[0], t[2])})


def test_walk_cut_keeps_the_answers_behind_a_low_degree_entity():
    # topic S: a genre hub G with ten films, and its director D with two; the question asks for
    # the years of D's films, which the third round holds next to the ten years of G's films.
    triples = [("S", "has_genre", "G"), ("S", "directed_by", "D")]
    triples += [(f"g{i}", "has_genre", "G") for i in range(10)] + [(f"d{i}", "directed_by", "D") for i in range(2)]
    triples += [(f"g{i}", "release_year", f"19{i}0") for i in range(10)]
    triples += [("d0", "release_year", "2001"), ("d1", "release_year", "2002")]
    graph = KnowledgeGraph.from_triples(triples)
    question = q("w", "S", ("2001", "2002"), hops=3)
    walk = build_sample(graph, question, SubgraphConfig(max_triples=16))
    assert walk.truncated and walk.covered
    assert set(walk.sample.triples) == set(triples[:14]) | {triples[-2], triples[-1]}
    scramble = build_sample(graph, question, SubgraphConfig(max_triples=16, cut="scramble"))
    assert scramble.truncated and scramble.covered_uncapped
    assert set(scramble.sample.triples[:14]) == set(triples[:14])
    with pytest.raises(ValueError, match="cut"):
        SubgraphConfig.model_validate({"cut": "ppr"})


def test_unbuildable_reasons(kg):
    with pytest.raises(Unbuildable) as err:
        build_sample(kg, q("e", "Nobody", ("F1",)), SubgraphConfig())
    assert err.value.reason == "topic_not_in_kg"
    with pytest.raises(Unbuildable) as err:
        build_sample(kg, q("f", "P1", ("F1",), hops=None), SubgraphConfig())
    assert err.value.reason == "no_hops"
    fixed = build_sample(kg, q("g", "P1", ("F1",), hops=None), SubgraphConfig(hops=1))
    assert fixed.sample.hops == 1


def test_shards_write_stats_and_resume(kg, tmp_path):
    items = [
        q("q0", "P1", ("F1",)),
        BadRow("qs.txt", 1, "no_tab", "no tab"),
        q("q2", "Nobody", ("F1",)),
        q("q3", "F2", ("1999",)),
        q("q4", "F1", ("A1", "A2")),
    ]
    pending, done = plan_shards("hop1", items, 2, tmp_path)
    assert [t.index for t in pending] == [0, 1, 2] and done == []
    assert ShardTask.from_json(pending[0].to_json()) == pending[0]
    stats = [run_shard(kg, t, SubgraphConfig()) for t in pending[:2]]
    assert stats[0].built == 1 and stats[0].bad == {"no_tab": 1}
    assert stats[1].bad == {"topic_not_in_kg": 1} and stats[1].covered == 1

    pending2, done2 = plan_shards("hop1", items, 2, tmp_path)
    assert [t.index for t in pending2] == [2] and len(done2) == 2
    run_shard(kg, pending2[0], SubgraphConfig())
    total = ShardStats(source="hop1")
    for s in plan_shards("hop1", items, 2, tmp_path)[1]:
        total = total.merge(s)
    summary = total.summary()
    assert (summary["lines"], summary["built"], summary["covered"], summary["bad_total"]) == (5, 3, 3, 2)
    assert summary["bad"] == {"no_tab": 1, "topic_not_in_kg": 1}
    samples = list(read_rog(tmp_path / "hop1"))
    assert [s.id for s in samples] == ["q0", "q3", "q4"]
    assert json.loads((tmp_path / "hop1" / "shard-00000.stats.json").read_text())["lines"] == 2
