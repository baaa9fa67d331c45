"""Weak labels (rg.supervision.weak): directed shortest paths in both orientations, the mixed
fallback, parallel relations, and per-question labels, on tiny hand-made graphs."""

from __future__ import annotations

import pytest

from rg.config import ConfigError, validate_config
from rg.data.sample import Sample
from rg.graph import KnowledgeGraph
from rg.supervision.weak import (
    PairPaths,
    WeakConfig,
    answer_entities,
    topic_entities,
    weak_labels,
    weak_paths,
)


def _kg(*triples: tuple[str, str, str]) -> KnowledgeGraph:
    return KnowledgeGraph.from_triples(triples)


def _view(paths):
    """(relation path, triple ids, entities) per path: exact and readable in asserts."""
    return [(p.relation_path, p.triple_ids, p.entities) for p in paths]


class TestWeakPaths:
    def test_q_to_a_shorter_wins(self) -> None:
        kg = _kg(("T", "r1", "A"), ("A", "r2", "X"), ("X", "r3", "T"))
        paths, mode = weak_paths(kg, "T", "A")
        assert mode == "directed"
        assert _view(paths) == [(("r1",), (0,), ("T", "A"))]

    def test_a_to_q_shorter_wins_and_reads_from_the_topic(self) -> None:
        kg = _kg(("A", "r1", "T"), ("T", "r2", "X"), ("X", "r3", "A"))
        paths, mode = weak_paths(kg, "T", "A")
        assert mode == "directed"
        assert _view(paths) == [(("r1^-1",), (0,), ("T", "A"))]
        assert paths[0].render() == "T ← [r1] ← A"

    def test_two_step_a_to_q_is_reversed_step_by_step(self) -> None:
        kg = _kg(("A", "r1", "M"), ("M", "r2", "T"))
        paths, mode = weak_paths(kg, "T", "A")
        assert mode == "directed"
        assert _view(paths) == [(("r2^-1", "r1^-1"), (1, 0), ("T", "M", "A"))]

    def test_tie_keeps_both_orientations_q_to_a_first(self) -> None:
        kg = _kg(("A", "r2", "T"), ("T", "r1", "A"))
        paths, mode = weak_paths(kg, "T", "A")
        assert mode == "directed"
        assert _view(paths) == [(("r1",), (1,), ("T", "A")), (("r2^-1",), (0,), ("T", "A"))]

    def test_parallel_relations_give_distinct_paths(self) -> None:
        kg = _kg(("T", "r1", "A"), ("T", "r2", "A"), ("T", "r1", "A"))
        paths, mode = weak_paths(kg, "T", "A")
        assert mode == "directed"
        assert _view(paths) == [
            (("r1",), (0,), ("T", "A")),
            (("r2",), (1,), ("T", "A")),
            (("r1",), (2,), ("T", "A")),
        ]

    def test_mixed_fallback_finds_co_star_paths(self) -> None:
        kg = _kg(
            ("F1", "starred", "X"), ("F1", "starred", "Y"), ("F2", "starred", "X"), ("F2", "starred", "Y")
        )
        paths, mode = weak_paths(kg, "X", "Y")
        assert mode == "mixed"
        assert _view(paths) == [
            (("starred^-1", "starred"), (0, 1), ("X", "F1", "Y")),
            (("starred^-1", "starred"), (2, 3), ("X", "F2", "Y")),
        ]

    def test_mixed_fallback_only_when_no_directed_path(self) -> None:
        # X ← F → Y is a mixed path of length 2, but the directed a→q path of length 3 wins.
        kg = _kg(
            ("F", "starred", "X"), ("F", "starred", "Y"), ("Y", "a", "P"), ("P", "b", "Q"), ("Q", "c", "X")
        )
        paths, mode = weak_paths(kg, "X", "Y")
        assert mode == "directed"
        assert _view(paths) == [(("c^-1", "b^-1", "a^-1"), (4, 3, 2), ("X", "Q", "P", "Y"))]

    def test_mixed_fallback_can_be_disabled(self) -> None:
        kg = _kg(("F", "starred", "X"), ("F", "starred", "Y"))
        assert weak_paths(kg, "X", "Y", WeakConfig(mixed_fallback=False)) == ([], "none")

    def test_unconnected_and_same_entity(self) -> None:
        kg = _kg(("T", "r", "X"), ("A", "r", "Y"))
        assert weak_paths(kg, "T", "A") == ([], "none")
        assert weak_paths(kg, "T", "T") == ([], "none")

    def test_cap_per_pair(self) -> None:
        kg = _kg(("T", "r1", "A"), ("T", "r2", "A"), ("A", "r3", "T"))
        paths, mode = weak_paths(kg, "T", "A", WeakConfig(max_paths_per_pair=2))
        assert mode == "directed"
        assert [p.triple_ids for p in paths] == [(0,), (1,)]

    def test_max_path_len(self) -> None:
        kg = _kg(("T", "r1", "M"), ("M", "r2", "A"))
        assert weak_paths(kg, "T", "A", WeakConfig(max_path_len=1)) == ([], "none")
        assert len(weak_paths(kg, "T", "A", WeakConfig(max_path_len=2))[0]) == 1


class TestWeakLabels:
    def _sample(self, **overrides) -> Sample:
        fields = dict(
            id="q1",
            question="?",
            answers=("A", "B"),
            q_entities=("T", "U", "Missing"),
            a_entities=("A", "B", "Gone"),
            triples=(
                ("T", "r1", "A"),  # 0
                ("T", "r2", "M"),  # 1
                ("M", "r3", "B"),  # 2
                ("U", "r4", "A"),  # 3
                ("B", "r5", "U"),  # 4
                ("T", "r6", "A"),  # 5 parallel to 0
                ("X", "r7", "Y"),  # 6 unrelated
            ),
        )
        fields.update(overrides)
        return Sample(**fields)

    def test_pairs_positives_and_modes(self) -> None:
        labels = weak_labels(self._sample())
        assert [(p.topic, p.answer, p.mode, [x.triple_ids for x in p.paths]) for p in labels.pairs] == [
            ("T", "A", "directed", [(0,), (5,)]),
            ("T", "B", "directed", [(1, 2)]),
            ("U", "A", "directed", [(3,)]),
            ("U", "B", "directed", [(4,)]),
        ]
        assert labels.positive_triples == (0, 1, 2, 3, 4, 5)
        assert labels.mode_counts == {"directed": 4, "mixed": 0, "none": 0}
        assert [p.triple_ids for p in labels.paths] == [(0,), (5,), (1, 2), (3,), (4,)]
        assert labels.pairs[3].paths[0].relation_path == ("r5^-1",)

    def test_mode_counts_include_mixed_and_none(self) -> None:
        sample = self._sample(
            q_entities=("X",),
            a_entities=("Z", "W"),
            triples=(("F", "starred", "X"), ("F", "starred", "Z"), ("W", "r", "V")),
        )
        labels = weak_labels(sample)
        assert labels.mode_counts == {"directed": 0, "mixed": 1, "none": 1}
        assert labels.positive_triples == (0, 1)

    def test_cap_applies_per_pair(self) -> None:
        labels = weak_labels(self._sample(), WeakConfig(max_paths_per_pair=1))
        assert [p.triple_ids for p in labels.paths] == [(0,), (1, 2), (3,), (4,)]
        assert labels.positive_triples == (0, 1, 2, 3, 4)

    def test_uses_a_given_graph(self) -> None:
        sample = self._sample()
        kg = KnowledgeGraph.from_triples(sample.triples)
        assert weak_labels(sample, kg=kg) == weak_labels(sample)

    def test_empty_graph(self) -> None:
        labels = weak_labels(self._sample(triples=()))
        assert labels.pairs == () and labels.positive_triples == () and labels.paths == ()

    def test_entities_filtered_and_answers_fallback(self) -> None:
        sample = self._sample(q_entities=("T", "T", "Missing"), a_entities=())
        kg = KnowledgeGraph.from_triples(sample.triples)
        assert topic_entities(sample, kg) == ("T",)
        assert answer_entities(sample, kg) == ("A", "B")  # from answers when a_entities is empty

    def test_records_are_frozen(self) -> None:
        pair = PairPaths(topic="T", answer="A", paths=(), mode="none")
        with pytest.raises(AttributeError):
            pair.mode = "mixed"  # type: ignore[misc]


def test_config_validation_names_the_key() -> None:
    with pytest.raises(ConfigError, match="max_paths_per_pair"):
        validate_config({"max_paths_per_pair": 0}, WeakConfig)
    with pytest.raises(ConfigError, match="did you mean 'mixed_fallback'"):
        validate_config({"mixed_fallbak": True}, WeakConfig)
