"""The candidate pool P_sp ∪ P_q ∪ P_a (rg.supervision.candidates): exact order, merging,
sizes, the representative answer, neighbourhood caps and expansion of a selection."""

from __future__ import annotations

import pytest

from rg.data.sample import Sample
from rg.graph import KnowledgeGraph
from rg.supervision.candidates import (
    CandidateConfig,
    build_pool,
    expand_selection,
    expanded_paths,
    one_hop_paths,
    representative_answer,
)
from rg.supervision.weak import PairPaths, WeakLabels, weak_labels

SP_ONLY = CandidateConfig(include_q_neighbourhood=False, include_a_neighbourhood=False)

FILM_TRIPLES = (
    ("Film A", "directed_by", "Ann"),  # 0
    ("Film A", "directed_by", "Bob"),  # 1
    ("Film A", "release_year", "1999"),  # 2
    ("Film A", "written_by", "Ann"),  # 3
    ("Ann", "born_in", "Paris"),  # 4
)


def _sample(triples=FILM_TRIPLES, q=("Film A",), a=("Ann", "Bob"), question="who directed Film A") -> Sample:
    return Sample(id="q1", question=question, answers=a, q_entities=q, a_entities=a, triples=tuple(triples))


def _pool(sample: Sample, config: CandidateConfig | None = None):
    kg = KnowledgeGraph.from_triples(sample.triples)
    return kg, build_pool(kg, sample, weak_labels(sample, kg=kg), config)


def _rows(pool):
    return [
        (c.index, c.kind, c.start, c.relation_path, c.triple_ids, len(c.groundings), c.reaches_answer)
        for c in pool.candidates
    ]


class TestPool:
    def test_exact_candidates_and_order(self) -> None:
        _, pool = _pool(_sample())
        assert pool.representative_answer == "Ann"  # two chains (directed_by, written_by) vs one
        assert _rows(pool) == [
            (0, "sp", "Film A", ("directed_by",), (0,), 1, True),
            (1, "sp", "Film A", ("written_by",), (3,), 1, True),
            (2, "q", "Film A", ("directed_by",), (0, 1), 2, True),
            (3, "q", "Film A", ("release_year",), (2,), 1, False),
            (4, "q", "Film A", ("written_by",), (3,), 1, True),
            (5, "a", "Ann", ("born_in",), (4,), 1, False),
            (6, "a", "Ann", ("directed_by^-1",), (0,), 1, False),
            (7, "a", "Bob", ("directed_by^-1",), (1,), 1, False),
            (8, "a", "Ann", ("written_by^-1",), (3,), 1, False),
        ]

    def test_sizes_count_every_raw_path(self) -> None:
        _, pool = _pool(_sample())
        # weak paths over all answers: Ann 2 + Bob 1; P_q: 4 triples of Film A; P_a: Ann 3 + Bob 1.
        assert pool.size_before == 3 + 4 + 4
        assert pool.size_after == len(pool) == 9

    def test_text_renders_first_grounding_and_merge_count(self) -> None:
        _, pool = _pool(_sample())
        assert pool.candidates[0].text() == "Film A → [directed_by] → Ann"
        assert pool.candidates[2].text() == "Film A → [directed_by] → Ann (+1 more)"
        assert pool.candidates[6].text() == "Ann ← [directed_by] ← Film A"

    def test_neighbourhoods_can_be_left_out(self) -> None:
        _, pool = _pool(_sample(), SP_ONLY)
        assert [(c.kind, c.relation_path) for c in pool.candidates] == [
            ("sp", ("directed_by",)),
            ("sp", ("written_by",)),
        ]
        assert (pool.size_before, pool.size_after) == (3, 2)
        _, pool = _pool(_sample(), CandidateConfig(include_a_neighbourhood=False))
        assert [c.kind for c in pool.candidates] == ["sp", "sp", "q", "q", "q"]
        assert pool.of_kind("q")[0].index == 2

    def test_sp_paths_through_different_nodes_merge(self) -> None:
        triples = (
            ("P", "positions", "m1"),  # 0
            ("m1", "title", "Governor"),  # 1
            ("P", "positions", "m2"),  # 2
            ("m2", "title", "Governor"),  # 3
            ("P", "positions", "m3"),  # 4
            ("m3", "title", "Speaker"),  # 5
        )
        sample = _sample(triples, q=("P",), a=("Governor", "Speaker"))
        _, pool = _pool(sample, SP_ONLY)
        # Governor: 1 topic, 1 chain, 2 paths; Speaker: 1 topic, 1 chain, 1 path → name order.
        assert pool.representative_answer == "Governor"
        assert _rows(pool) == [(0, "sp", "P", ("positions", "title"), (0, 1, 2, 3), 2, True)]
        assert pool.size_before == 3  # all answers' paths, before compression
        assert pool.candidates[0].text() == "P → [positions] → m1 → [title] → Governor (+1 more)"

    def test_empty_graph_gives_empty_pool(self) -> None:
        _, pool = _pool(_sample(triples=()))
        assert pool.candidates == () and pool.size_before == 0 and pool.representative_answer is None

    def test_topic_missing_from_graph_keeps_answer_neighbourhood(self) -> None:
        _, pool = _pool(_sample(q=("Nobody",)))
        assert pool.representative_answer is None
        assert {c.kind for c in pool.candidates} == {"a"}


class TestRepresentativeAnswer:
    def _weak(self, *pairs: tuple[str, str, int, int]) -> WeakLabels:
        """pairs of (topic, answer, number of distinct chains, paths per chain)."""
        kg = KnowledgeGraph.from_triples(
            [(t, f"r{c}", a) for t, a, chains, per in pairs for c in range(chains) for _ in range(per)]
        )
        built = []
        for t, a, chains, per in pairs:
            paths = kg.shortest_paths(t, a, "out") if chains else []
            mode = "directed" if paths else "none"
            built.append(PairPaths(topic=t, answer=a, paths=tuple(paths), mode=mode))
        return WeakLabels(positive_triples=(), pairs=tuple(built))

    def test_more_topics_connected_wins(self) -> None:
        weak = self._weak(("T", "A", 3, 1), ("T", "B", 1, 1), ("U", "B", 1, 1), ("U", "A", 0, 0))
        assert representative_answer(weak) == "B"

    def test_more_distinct_chains_wins_over_more_paths(self) -> None:
        weak = self._weak(("T", "A", 1, 4), ("T", "B", 2, 1))
        assert representative_answer(weak) == "B"

    def test_name_breaks_ties_and_none_without_paths(self) -> None:
        assert representative_answer(self._weak(("T", "B", 1, 1), ("T", "A", 1, 1))) == "A"
        assert representative_answer(self._weak(("T", "A", 0, 0))) is None


class TestOneHop:
    def test_direction_aware_paths(self) -> None:
        kg = KnowledgeGraph.from_triples([("T", "r", "X"), ("Y", "s", "T"), ("T", "loop", "T")])
        assert [(p.relation_path, p.entities, p.triple_ids) for p in one_hop_paths(kg, "T")] == [
            (("loop",), ("T", "T"), (2,)),
            (("r",), ("T", "X"), (0,)),
            (("s^-1",), ("T", "Y"), (1,)),
        ]

    def test_cap_is_round_robin_over_relations(self) -> None:
        kg = KnowledgeGraph.from_triples(
            [("T", "b", "X1"), ("T", "b", "X2"), ("T", "b", "X3"), ("T", "a", "Y1"), ("Z", "c", "T")]
        )
        capped = one_hop_paths(kg, "T", max_paths=4)
        assert [(p.relation_path, p.triple_ids) for p in capped] == [
            (("a",), (3,)),
            (("b",), (0,)),
            (("b",), (1,)),
            (("c^-1",), (4,)),
        ]
        assert [p.triple_ids for p in one_hop_paths(kg, "T", max_paths=2)] == [(3,), (0,)]

    def test_cap_in_the_pool_is_per_entity(self) -> None:
        _, pool = _pool(_sample(), CandidateConfig(max_neighbourhood=1))
        assert [(c.kind, c.start, c.relation_path) for c in pool.candidates] == [
            ("sp", "Film A", ("directed_by",)),
            ("sp", "Film A", ("written_by",)),
            ("q", "Film A", ("directed_by",)),
            ("a", "Ann", ("born_in",)),
            ("a", "Bob", ("directed_by^-1",)),
        ]
        assert pool.size_before == 3 + 1 + 2


class TestExpandSelection:
    def test_sp_is_regrounded_to_every_answer(self) -> None:
        sample = _sample()
        kg, pool = _pool(sample)
        chosen = pool.candidates[0]  # sp directed_by, found towards Ann only
        assert chosen.triple_ids == (0,)
        assert expand_selection(kg, sample, [chosen]) == (0, 1)
        assert [p.render() for p in expanded_paths(kg, sample, [chosen])] == [
            "Film A → [directed_by] → Ann",
            "Film A → [directed_by] → Bob",
        ]

    def test_q_and_a_candidates_keep_their_own_triples(self) -> None:
        sample = _sample()
        kg, pool = _pool(sample)
        assert expand_selection(kg, sample, [pool.candidates[3]]) == (2,)
        assert expand_selection(kg, sample, [pool.candidates[5], pool.candidates[3]]) == (2, 4)
        assert expand_selection(kg, sample, []) == ()

    def test_mixed_chain_regrounds_to_all_answers_only(self) -> None:
        triples = (
            ("F1", "starred", "X"),  # 0
            ("F1", "starred", "Y"),  # 1
            ("F2", "starred", "X"),  # 2
            ("F2", "starred", "Z"),  # 3
            ("F3", "starred", "W"),  # 4 not connected
        )
        sample = _sample(triples, q=("X",), a=("Y", "Z"))
        kg, pool = _pool(sample, SP_ONLY)
        assert pool.representative_answer == "Y"
        assert _rows(pool) == [(0, "sp", "X", ("starred^-1", "starred"), (0, 1), 1, True)]
        # Re-grounding also walks X ← F1 → X and X ← F2 → X; those end at no answer and are dropped.
        assert expand_selection(kg, sample, pool.candidates) == (0, 1, 2, 3)
        assert [p.end for p in expanded_paths(kg, sample, pool.candidates)] == ["Y", "Z"]


def test_records_are_frozen() -> None:
    _, pool = _pool(_sample())
    with pytest.raises(AttributeError):
        pool.size_before = 0  # type: ignore[misc]
    with pytest.raises(AttributeError):
        pool.candidates[0].kind = "q"  # type: ignore[misc]
