"""Tests for rg.metrics on tiny hand-made inputs; expected values are worked out by hand."""

from __future__ import annotations

import pytest

from rg.metrics import (
    PRF,
    MatchCounts,
    answer_recall_at_k,
    evaluate_answers,
    hit,
    hits_at_1,
    match_counts,
    mean_answer_recall_at_ks,
    mean_triple_recall_at_ks,
    normalize_answer,
    precision_recall_f1,
    prf_from_counts,
    triple_recall_at_k,
)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("The Beatles", "beatles"),
        ("  A   tale of Two  Cities! ", "tale of two cities"),
        ("an apple, the pear", "apple pear"),
        ("U.S.A.", "usa"),
        ("theatre", "theatre"),  # articles only as whole words
        ("Anna", "anna"),
        ("the", ""),
        ("", ""),
    ],
)
def test_normalize_answer(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


class TestHit:
    def test_exact_match_after_normalisation(self) -> None:
        assert hit(["the Beatles"], ["Beatles"]) == 1
        assert hit(["Rolling Stones", "beatles."], ["The Beatles", "Wings"]) == 1

    def test_no_match(self) -> None:
        assert hit(["Wings"], ["The Beatles"]) == 0

    def test_containment_only_with_contains_mode(self) -> None:
        pred = ["The answer is Paris, France"]
        assert hit(pred, ["Paris"]) == 0
        assert hit(pred, ["Paris"], match="contains") == 1
        # Containment is gold-in-prediction, not the reverse.
        assert hit(["Paris"], ["Paris, France"], match="contains") == 0

    def test_lone_string_is_one_prediction(self) -> None:
        assert hit("Paris", ["paris"]) == 1
        assert hit("Paris", "paris") == 1
        # Not a sequence of characters: "p" must not match.
        assert hit("Paris", ["p"], match="contains") == 1
        assert hit("Paris", ["p"]) == 0

    def test_empty_sides_and_empty_normalised_strings(self) -> None:
        assert hit([], ["a"]) == 0
        assert hit(["x"], []) == 0
        # "the" normalises to "", which would be contained in everything: never a match.
        assert hit(["Paris"], ["the"], match="contains") == 0

    def test_unknown_mode(self) -> None:
        with pytest.raises(ValueError, match="match mode"):
            hit(["x"], ["x"], match="fuzzy")  # type: ignore[arg-type]


def test_hits_at_1() -> None:
    assert hits_at_1(["Paris", "Lyon"], ["paris"]) == 1
    assert hits_at_1(["Lyon", "Paris"], ["paris"]) == 0
    assert hits_at_1([], ["paris"]) == 0
    assert hits_at_1(["capital is Paris", "Lyon"], ["paris"], match="contains") == 1


class TestPrecisionRecallF1:
    def test_partial_overlap(self) -> None:
        # pred {a, b, c}, gold {a, b, d, e}: tp 2, fp 1, fn 2.
        prf = precision_recall_f1(["a1", "b1", "c1"], ["a1", "b1", "d1", "e1"])
        assert match_counts(["a1", "b1", "c1"], ["a1", "b1", "d1", "e1"]) == MatchCounts(tp=2, fp=1, fn=2)
        assert prf.precision == pytest.approx(2 / 3)
        assert prf.recall == pytest.approx(2 / 4)
        assert prf.f1 == pytest.approx(2 * (2 / 3) * (1 / 2) / (2 / 3 + 1 / 2))

    def test_duplicates_after_normalisation_count_once(self) -> None:
        assert match_counts(["Paris", "paris.", "the Paris"], ["PARIS"]) == MatchCounts(tp=1, fp=0, fn=0)
        assert precision_recall_f1(["Paris", "paris."], ["Paris"]) == PRF(1.0, 1.0, 1.0)

    def test_empty_conventions(self) -> None:
        assert precision_recall_f1([], []) == PRF(1.0, 1.0, 1.0)
        assert precision_recall_f1([], ["x"]) == PRF(0.0, 0.0, 0.0)
        assert precision_recall_f1(["x"], []) == PRF(0.0, 0.0, 0.0)
        assert prf_from_counts(MatchCounts(0, 0, 0)) == PRF(1.0, 1.0, 1.0)

    def test_no_overlap(self) -> None:
        assert precision_recall_f1(["x"], ["y"]) == PRF(0.0, 0.0, 0.0)

    def test_is_frozen(self) -> None:
        prf = precision_recall_f1(["x"], ["x"])
        with pytest.raises(AttributeError):
            prf.f1 = 0.0  # type: ignore[misc]


class TestEvaluateAnswers:
    def test_macro_and_micro_differ(self) -> None:
        # q1: pred {a}, gold {a}           -> tp 1, fp 0, fn 0; P 1, R 1, F1 1.
        # q2: pred {b, c, d}, gold {b, e}  -> tp 1, fp 2, fn 1; P 1/3, R 1/2, F1 2/5.
        # macro F1 = (1 + 2/5) / 2 = 0.7; micro: tp 2, fp 2, fn 1 -> F1 = 4 / (4 + 3) = 4/7.
        m = evaluate_answers([["a1"], ["c1", "b1", "d1"]], [["a1"], ["b1", "e1"]])
        assert m.n == 2
        assert m.macro_f1 == pytest.approx(0.7)
        assert m.micro_f1 == pytest.approx(4 / 7)
        assert m.macro_precision == pytest.approx((1 + 1 / 3) / 2)
        assert m.macro_recall == pytest.approx((1 + 1 / 2) / 2)
        assert m.hit == pytest.approx(1.0)
        # q2's top prediction "c1" is wrong.
        assert m.hits_at_1 == pytest.approx(0.5)

    def test_match_mode_affects_hit_only(self) -> None:
        preds, golds = [["it is Rome"]], [["Rome"]]
        exact = evaluate_answers(preds, golds)
        contains = evaluate_answers(preds, golds, match="contains")
        assert (exact.hit, exact.hits_at_1) == (0.0, 0.0)
        assert (contains.hit, contains.hits_at_1) == (1.0, 1.0)
        assert exact.macro_f1 == contains.macro_f1 == 0.0

    def test_rejects_misaligned_or_empty(self) -> None:
        with pytest.raises(ValueError, match="one list per question"):
            evaluate_answers([["a"]], [["a"], ["b"]])
        with pytest.raises(ValueError, match="no questions"):
            evaluate_answers([], [])


class TestTripleRecall:
    def test_share_of_positives_in_top_k(self) -> None:
        ranked = [7, 3, 9, 1, 4]
        positives = {3, 4, 8}
        assert triple_recall_at_k(ranked, positives, 1) == 0.0
        assert triple_recall_at_k(ranked, positives, 2) == pytest.approx(1 / 3)
        assert triple_recall_at_k(ranked, positives, 5) == pytest.approx(2 / 3)
        assert triple_recall_at_k(ranked, positives, 100) == pytest.approx(2 / 3)

    def test_no_positives_is_none(self) -> None:
        assert triple_recall_at_k([1, 2], [], 1) is None

    def test_bad_k(self) -> None:
        with pytest.raises(ValueError, match="positive integer"):
            triple_recall_at_k([1], [1], 0)

    def test_mean_over_questions_skips_questions_without_positives(self) -> None:
        # q1: positives {1, 2}, ranked [1, 5, 2] -> @1 1/2, @3 1.
        # q2: positives {9},    ranked [4, 9]    -> @1 0,   @3 1.
        # q3: no positives -> skipped.
        result = mean_triple_recall_at_ks([[1, 5, 2], [4, 9], [3]], [[1, 2], [9], []], ks=[1, 3])
        assert result.n == 2
        assert result.skipped == 1
        assert result[1] == pytest.approx(0.25)
        assert result[3] == pytest.approx(1.0)
        assert result.values == {1: pytest.approx(0.25), 3: pytest.approx(1.0)}

    def test_mean_when_all_skipped(self) -> None:
        result = mean_triple_recall_at_ks([[1]], [[]], ks=[5])
        assert (result.values, result.n, result.skipped) == ({5: None}, 0, 1)

    def test_mean_rejects_empty_ks_and_misaligned(self) -> None:
        with pytest.raises(ValueError, match="ks is empty"):
            mean_triple_recall_at_ks([[1]], [[1]], ks=[])
        with pytest.raises(ValueError, match="one per question"):
            mean_triple_recall_at_ks([[1]], [[1], [2]], ks=[1])


class TestAnswerRecall:
    triples = [
        ("Paris", "capital_of", "France"),
        ("Lyon", "located_in", "France"),
        ("the Louvre", "located_in", "Paris"),
        ("Berlin", "capital_of", "Germany"),
    ]

    def test_head_or_tail_in_top_k(self) -> None:
        answers = ["France", "Lyon", "Germany"]
        assert answer_recall_at_k(self.triples, answers, 1) == pytest.approx(1 / 3)  # France
        assert answer_recall_at_k(self.triples, answers, 2) == pytest.approx(2 / 3)  # + Lyon (head)
        assert answer_recall_at_k(self.triples, answers, 4) == pytest.approx(1.0)  # + Germany (tail)

    def test_relation_does_not_count(self) -> None:
        assert answer_recall_at_k(self.triples, ["capital_of"], 4) == 0.0

    def test_normalisation_is_optional(self) -> None:
        assert answer_recall_at_k(self.triples, ["louvre"], 3) == 0.0
        assert answer_recall_at_k(self.triples, ["louvre"], 3, normalize=True) == 1.0
        assert answer_recall_at_k(self.triples, ["Louvre"], 2, normalize=True) == 0.0

    def test_duplicate_answers_count_once(self) -> None:
        assert answer_recall_at_k(self.triples, ["France", "France", "Spain"], 1) == pytest.approx(1 / 2)

    def test_no_answers_is_none(self) -> None:
        assert answer_recall_at_k(self.triples, [], 3) is None

    def test_mean_over_questions(self) -> None:
        # q1: answers {France, Germany}: @1 1/2, @4 1.  q2: answers {Rome}: @1 0, @4 0.  q3: skipped.
        result = mean_answer_recall_at_ks(
            [self.triples, self.triples, self.triples], [["France", "Germany"], ["Rome"], []], ks=[1, 4]
        )
        assert (result.n, result.skipped) == (2, 1)
        assert result[1] == pytest.approx(0.25)
        assert result[4] == pytest.approx(0.5)


def test_metrics_module_imports_nothing_from_rg() -> None:
    import ast
    import inspect

    import rg.metrics

    tree = ast.parse(inspect.getsource(rg.metrics))
    imported = [
        node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
    ] + [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    assert not [name for name in imported if name == "rg" or name.startswith("rg.")]
