"""Refine one question's weak labels with a path selector (ReG stage S(I), per question).

This is the per-question step of ReG's refinement (Zou et al. 2025, "Weak-to-Strong
GraphRAG"): weak shortest-path labels → candidate pool ``P_sp ∪ P_q ∪ P_a`` with compression
→ selection → expansion of the selected chains to every answer → refined :class:`Labels`. Any
failure falls back to the weak labels with a reason, so every question yields exactly one row.

It comes in two halves so that a job can run the CPU part and the (async, LLM-bound) selection
in different stages: :func:`prepare_question` (weak labels and pool, a picklable
:class:`Prepared`) and :func:`finish_question` (validate a :class:`Selection` and build the
labels). :func:`refine_sample` runs both around ``await selector.select``.
"""

from __future__ import annotations

from dataclasses import dataclass

from rg.data.sample import Sample
from rg.graph import KnowledgeGraph
from rg.supervision.candidates import CandidateConfig, CandidatePool, build_pool, expanded_paths
from rg.data.labels import Labels
from rg.supervision.labels import weak_fallback
from rg.supervision.selectors import PathSelector, Selection
from rg.supervision.weak import WeakLabels, union_triples, weak_labels

INVALID_INDEX = "invalid_index"
"""Fallback reason: the selection named an index outside the pool."""
EMPTY_SELECTION = "empty_selection"
"""Fallback reason: the selector succeeded but chose nothing."""
EMPTY_EXPANSION = "empty_expansion"
"""Fallback reason: the selected candidates yield no positive triple."""


@dataclass(frozen=True)
class Prepared:
    """The selector-independent part of one question's refinement (picklable).

    Attributes:
        weak: The weak labels (kept as the fallback).
        pool: The compressed candidate pool the selector chooses from.
    """

    weak: WeakLabels
    pool: CandidatePool


def prepare_question(sample: Sample, config: CandidateConfig | None = None) -> Prepared:
    """Weak labels and candidate pool of one question.

    Args:
        sample: The question and its subgraph (``triples`` define the triple ids).
        config: Pool settings (including the weak-label search); defaults to
            :class:`CandidateConfig`.
    """
    config = config or CandidateConfig()
    kg = KnowledgeGraph.from_triples(sample.triples)
    weak = weak_labels(sample, config.weak, kg=kg)
    return Prepared(weak=weak, pool=build_pool(kg, sample, weak, config))


def finish_question(sample: Sample, prepared: Prepared, selection: Selection, selector_name: str) -> Labels:
    """Turn a selector's answer into labels, falling back to the weak labels on any failure.

    Args:
        sample: The question (the same one ``prepared`` was built from).
        prepared: Its weak labels and pool.
        selection: What the selector returned for ``prepared.pool``.
        selector_name: The selector's ``name``, stored in the labels.

    Returns:
        ``source="refined"`` labels from the expanded selection (selected ``sp`` chains
        re-grounded to every answer), or ``source="weak"`` labels whose ``fallback_reason`` is
        the selector's failure, ``invalid_index``, ``empty_selection`` or ``empty_expansion``.
        The selection's prompt id and token counts are kept either way.
    """
    weak, pool = prepared.weak, prepared.pool

    def fallback(reason: str) -> Labels:
        return weak_fallback(
            sample.id,
            weak,
            pool,
            reason,
            selector_name,
            prompt_id=selection.prompt_id,
            prompt_tokens=selection.prompt_tokens,
            completion_tokens=selection.completion_tokens,
        )

    if selection.failure is not None:
        return fallback(selection.failure)
    if any(not 0 <= i < len(pool) for i in selection.indices):
        return fallback(INVALID_INDEX)
    if not selection.indices:
        return fallback(EMPTY_SELECTION)
    chosen = [pool.candidates[i] for i in sorted(set(selection.indices))]
    paths = expanded_paths(KnowledgeGraph.from_triples(sample.triples), sample, chosen)
    positives = union_triples(paths)
    if not positives:
        return fallback(EMPTY_EXPANSION)
    return Labels(
        id=sample.id,
        positive_triples=positives,
        paths=tuple(p.render() for p in paths),
        relation_paths=tuple(dict.fromkeys(p.relation_path for p in paths)),
        source="refined",
        selector=selector_name,
        prompt_id=selection.prompt_id,
        fallback_reason=None,
        prompt_tokens=selection.prompt_tokens,
        completion_tokens=selection.completion_tokens,
        pool_before=pool.size_before,
        pool_after=pool.size_after,
    )


async def refine_sample(
    sample: Sample, selector: PathSelector, config: CandidateConfig | None = None
) -> Labels:
    """Prepare, select and finish one question (see the module docstring).

    Args:
        sample: The question and its subgraph.
        selector: Any :class:`PathSelector`.
        config: Pool settings; defaults to :class:`CandidateConfig`.

    Returns:
        Exactly one :class:`Labels` row, refined or weak with a reason.
    """
    prepared = prepare_question(sample, config)
    selection = await selector.select(sample, prepared.pool)
    return finish_question(sample, prepared, selection, selector.name)
