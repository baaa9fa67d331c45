"""Tests for rg.evaluation.retrieval and rg.evaluation.references on hand-made samples.

Every expected recall is worked out by hand in the comments next to it.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import pytest

from rg.data.sample import Sample
from rg.evaluation import (
    HopDistanceScorer,
    RetrievalResult,
    answers_in_subgraph,
    evaluate_retrieval,
    labels_reference,
    rank_triples,
    weak_reference,
    webqsp_gpt4o_reference,
)
from rg.data.labels import Labels, write_labels


def _sample(
    sample_id: str,
    triples: Sequence[tuple[str, str, str]],
    a_entities: Sequence[str] = (),
    answers: Sequence[str] = (),
    q_entities: Sequence[str] = (),
) -> Sample:
    return Sample(
        id=sample_id,
        question=f"question {sample_id}",
        answers=tuple(answers or a_entities),
        q_entities=tuple(q_entities),
        a_entities=tuple(a_entities),
        triples=tuple(triples),
    )


class FixedScorer:
    """Returns hand-written scores per sample id and records the batch sizes it was called with."""

    def __init__(self, scores: dict[str, Sequence[float]]) -> None:
        self.name = "fixed"
        self.scores = scores
        self.calls: list[int] = []

    def score(self, samples: Sequence[Sample]) -> list[np.ndarray]:
        self.calls.append(len(samples))
        return [np.asarray(self.scores[s.id], dtype=np.float64) for s in samples]


# A: scores [.1, .9, .5, .9, 0] rank as [1, 3, 2, 0, 4] (the tie 1/3 keeps index order).
A = _sample("A", [("a", "r", "b"), ("b", "r", "c"), ("c", "r", "d"), ("a", "r", "x"), ("x", "r", "y")], ["d"])
# B: ranks [1, 0]; its answers come from `answers` (no a_entities) and "w" is not in the subgraph.
B = _sample("B", [("p", "s", "q"), ("q", "s", "z")], answers=["z", "w"])
# C: empty subgraph.
C = _sample("C", [], ["q"])
# D: ranks [2, 0, 1]; both answers are in the subgraph.
D = _sample("D", [("s", "r", "a1"), ("s", "r", "a2"), ("s", "r", "o")], ["a1", "a2"])
SCORES = {"A": [0.1, 0.9, 0.5, 0.9, 0.0], "B": [1.0, 2.0], "C": [], "D": [0.0, 0.0, 1.0]}
REFERENCES = {
    "gold": {"A": [2, 0], "B": [0], "C": []},  # D absent
    "other": {"A": [3, 3]},  # duplicates count once
}
KS = (1, 2, 3, 5)


@pytest.fixture()
def result() -> RetrievalResult:
    return evaluate_retrieval([A, B, C, D], FixedScorer(SCORES), REFERENCES, ks=(5, 3, 2, 1, 3))


class TestRanking:
    def test_descending_with_ties_in_index_order(self) -> None:
        assert rank_triples(np.array([0.0, 1.0, 1.0, 0.0, 1.0])).tolist() == [1, 2, 4, 0, 3]

    def test_all_equal_scores_keep_triple_order(self) -> None:
        assert rank_triples(np.zeros(4)).tolist() == [0, 1, 2, 3]

    def test_minus_infinity_ranks_last(self) -> None:
        assert rank_triples(np.array([-np.inf, 0.0, -np.inf, -3.0])).tolist() == [1, 3, 0, 2]

    def test_empty(self) -> None:
        assert rank_triples(np.zeros(0)).tolist() == []

    def test_nan_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="NaN"):
            rank_triples(np.array([0.0, np.nan]))


class TestTripleRecall:
    def test_exact_values(self, result: RetrievalResult) -> None:
        # gold, A: positives 2 and 0 sit at ranks 2 and 3 -> @1 0, @2 0, @3 .5, @5 1.
        # gold, B: positive 0 sits at rank 1 -> @1 0, @2 1, @3 1, @5 1.
        gold = result.triple_recall["gold"]
        assert gold.values == {1: 0.0, 2: 0.5, 3: 0.75, 5: 1.0}
        # other, A: positive 3 sits at rank 1 (after the tie with triple 1).
        assert result.triple_recall["other"].values == {1: 0.0, 2: 1.0, 3: 1.0, 5: 1.0}

    def test_skipped_questions_are_counted(self, result: RetrievalResult) -> None:
        assert result.questions == 4
        gold, other = result.triple_recall["gold"], result.triple_recall["other"]
        assert (gold.n, gold.skipped) == (2, 2)  # C has no positives, D is absent
        assert (other.n, other.skipped) == (1, 3)

    def test_ks_are_sorted_and_deduplicated(self, result: RetrievalResult) -> None:
        assert result.ks == KS
        assert result.method == "fixed"

    def test_k_beyond_the_subgraph_counts_every_triple(self) -> None:
        outcome = evaluate_retrieval([B], FixedScorer(SCORES), {"gold": {"B": [0, 1]}}, ks=(1, 1000))
        assert outcome.triple_recall["gold"].values == {1: 0.5, 1000: 1.0}

    def test_no_question_with_positives_gives_none(self) -> None:
        outcome = evaluate_retrieval([C], FixedScorer(SCORES), {"gold": {}}, ks=(1,))
        recall = outcome.triple_recall["gold"]
        assert (recall.values, recall.n, recall.skipped) == ({1: None}, 0, 1)


class TestAnswerRecall:
    def test_exact_values_over_answerable_questions(self, result: RetrievalResult) -> None:
        # A: answer d is the tail of triple 2, at rank 2 -> @1 0, @2 0, @3 1, @5 1.
        # D: a1 (triple 0) at rank 1, a2 (triple 1) at rank 2 -> @1 0, @2 .5, @3 1, @5 1.
        answers = result.answer_recall
        assert answers.values == {1: 0.0, 2: 0.25, 3: 1.0, 5: 1.0}
        # B misses "w" and C has no triples: both skipped.
        assert (answers.n, answers.skipped) == (2, 2)

    def test_answers_in_subgraph(self) -> None:
        assert answers_in_subgraph(A) and answers_in_subgraph(D)
        assert not answers_in_subgraph(B)  # "w" missing
        assert not answers_in_subgraph(C)  # empty graph
        assert not answers_in_subgraph(_sample("E", [("a", "r", "b")]))  # no answers at all

    def test_head_counts_as_well_as_tail(self) -> None:
        sample = _sample("H", [("x", "r", "y"), ("ans", "r", "x")], ["ans"])
        outcome = evaluate_retrieval([sample], FixedScorer({"H": [1.0, 0.0]}), {}, ks=(1, 2))
        assert outcome.answer_recall.values == {1: 0.0, 2: 1.0}
        assert outcome.triple_recall == {}


class TestBatchingAndValidation:
    def test_batches_of_the_requested_size(self) -> None:
        scorer = FixedScorer(SCORES)
        evaluate_retrieval(iter([A, B, C, D]), scorer, REFERENCES, ks=KS, batch_size=3)
        assert scorer.calls == [3, 1]

    def test_result_does_not_depend_on_batch_size(self, result: RetrievalResult) -> None:
        again = evaluate_retrieval([A, B, C, D], FixedScorer(SCORES), REFERENCES, ks=KS, batch_size=1)
        assert again == result

    def test_wrong_number_of_scores(self) -> None:
        with pytest.raises(ValueError, match="one score per triple"):
            evaluate_retrieval([A], FixedScorer({"A": [1.0, 2.0]}), {}, ks=(1,))

    def test_wrong_number_of_arrays(self) -> None:
        class Short(FixedScorer):
            def score(self, samples: Sequence[Sample]) -> list[np.ndarray]:
                return super().score(samples)[:-1]

        with pytest.raises(ValueError, match="2 samples"):
            evaluate_retrieval([A, B], Short(SCORES), {}, ks=(1,))

    def test_reference_index_outside_the_subgraph(self) -> None:
        with pytest.raises(ValueError, match="does not belong"):
            evaluate_retrieval([B], FixedScorer(SCORES), {"gold": {"B": [2]}}, ks=(1,))

    @pytest.mark.parametrize("ks", [(), (0,), (5, -1), (True,)])
    def test_bad_ks(self, ks: tuple[int, ...]) -> None:
        with pytest.raises(ValueError, match="k"):
            evaluate_retrieval([A], FixedScorer(SCORES), {}, ks=ks)


def test_to_dict_is_json_and_round_trips(result: RetrievalResult) -> None:
    data = json.loads(json.dumps(result.to_dict()))
    assert data["method"] == "fixed"
    assert data["ks"] == list(KS)
    assert data["triple_recall"]["gold"] == {
        "recall": {"1": 0.0, "2": 0.5, "3": 0.75, "5": 1.0},
        "n": 2,
        "skipped": 2,
    }
    assert data["answer_recall"]["n"] == 2
    assert RetrievalResult.from_dict(data) == result


class TestReferences:
    def test_weak_reference_is_the_shortest_path(self) -> None:
        sample = _sample(
            "W",
            [("t", "r", "m"), ("m", "r", "ans"), ("t", "r", "ans2"), ("t", "r", "n")],
            ["ans"],
            q_entities=["t"],
        )
        assert weak_reference([sample]) == {"W": (0, 1)}

    def test_weak_reference_with_hop_distance_end_to_end(self) -> None:
        sample = _sample(
            "W",
            [("n", "r", "o"), ("m", "r", "ans"), ("t", "r", "n"), ("t", "r", "m")],
            ["ans"],
            q_entities=["t"],
        )
        # Distances: triples 2, 3 touch t (0); 0 and 1 are one hop out -> ranking [2, 3, 0, 1].
        # Weak positives {1, 3} sit at ranks 3 and 1.
        outcome = evaluate_retrieval([sample], HopDistanceScorer(), {"weak": weak_reference([sample])}, ks=(2, 4))
        assert outcome.triple_recall["weak"].values == {2: 0.5, 4: 1.0}
        assert outcome.answer_recall.values == {2: 0.0, 4: 1.0}

    def test_labels_reference(self, tmp_path: Path) -> None:
        rows = [
            Labels(id="q1", positive_triples=(0, 4), paths=(), relation_paths=(), source="refined", selector="s"),
            Labels(
                id="q2",
                positive_triples=(1,),
                paths=(),
                relation_paths=(),
                source="weak",
                selector="s",
                fallback_reason="empty_pool",
            ),
        ]
        write_labels(rows, tmp_path / "labels" / "part-0.parquet")
        assert labels_reference(tmp_path / "labels") == {"q1": (0, 4), "q2": (1,)}
        assert labels_reference(tmp_path / "labels", source="refined") == {"q1": (0, 4)}

    def test_labels_reference_refuses_labels_of_another_build(self, tmp_path: Path) -> None:
        row = Labels(id="q1", positive_triples=(1,), paths=(), relation_paths=(("r",),), source="refined", selector="s")
        write_labels([row], tmp_path / "labels" / "part-0.parquet")
        fits = Sample(id="q1", question="?", answers=("b",), q_entities=("a",), a_entities=("b",),
                      triples=(("a", "s", "c"), ("a", "r", "b")))
        assert labels_reference(tmp_path / "labels", samples=[fits]) == {"q1": (1,)}
        rebuilt = Sample(id="q1", question="?", answers=("b",), q_entities=("a",), a_entities=("b",),
                         triples=(("a", "r", "b"), ("a", "s", "c")))
        with pytest.raises(ValueError, match=r"'q1' has positives \[1\] .*another build"):
            labels_reference(tmp_path / "labels", samples=[rebuilt])

    def test_webqsp_gpt4o_reference(self, tmp_path: Path) -> None:
        path = tmp_path / "labels.jsonl.gz"
        rows = [
            {"id": "WebQTest-0", "evidence_triple_idx": [3, 1], "answer_entity_in_graph": True,
             "inferential_chains": [["people.person.nationality"]]},
            {"id": "WebQTest-1", "evidence_triple_idx": [], "answer_entity_in_graph": False,
             "inferential_chains": []},
        ]
        with gzip.open(path, "wt") as handle:
            handle.write("\n".join(json.dumps(r) for r in rows) + "\n")
        assert webqsp_gpt4o_reference(path) == {"WebQTest-0": (3, 1), "WebQTest-1": ()}
