"""Evaluation libraries: triple scorers and recall@K against references (retrieval), answers and their metrics per
question (``qa``, ``dualtower_qa``, ``traverse_qa``, ``rounds``), and the reports. The jobs that run them on Ray
are :mod:`rg.jobs.evaluate` and :mod:`rg.jobs.evaluate_qa`."""

from rg.evaluation.references import labels_reference, webqsp_gpt4o_reference, weak_reference
from rg.evaluation.report import ReportFiles, markdown_table, plot_results, write_results
from rg.evaluation.retrieval import (
    DEFAULT_KS,
    Reference,
    RetrievalResult,
    answer_entities,
    answers_in_subgraph,
    evaluate_retrieval,
    rank_triples,
)
from rg.evaluation.scorers import (
    CosineScorer,
    HopDistanceScorer,
    TripleScorer,
    entity_text,
    is_unnamed,
    topic_distances,
    triple_text,
)

__all__ = [
    "DEFAULT_KS",
    "CosineScorer",
    "HopDistanceScorer",
    "Reference",
    "ReportFiles",
    "RetrievalResult",
    "TripleScorer",
    "answer_entities",
    "answers_in_subgraph",
    "entity_text",
    "evaluate_retrieval",
    "is_unnamed",
    "labels_reference",
    "markdown_table",
    "plot_results",
    "rank_triples",
    "topic_distances",
    "triple_text",
    "webqsp_gpt4o_reference",
    "weak_reference",
    "write_results",
]
