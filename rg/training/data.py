"""From Samples and Labels to retriever tensors: embedding tables and question graphs.

Every distinct entity name, relation name and question is embedded once (through a
:class:`~rg.text.TextEncoder`, whose on-disk cache makes reruns cheap) into
:class:`EmbeddingTables`; a :class:`TextIndex` maps each string to its row. Each question then
becomes a :class:`QuestionGraph` of small integer tensors that refer to those rows, so a batch
carries no text and no duplicated vectors.

Conventions:

* Unnamed entities — bare Freebase MIDs such as ``m.0x1`` or ``g.11b6`` (CVT nodes) — are not
  embedded; their row is ``-1`` and retrievers give them one learned shared vector
  (SubgraphRAG). The whole name must look like an id: MetaQA's ``m. night shyamalan`` and
  ``g.w. bailey`` are names.
* Relation names are embedded as words (``people.person.place_of_birth`` →
  ``people person place of birth``, :func:`rg.supervision.verbalise_relation`).
* Local entity ids follow first appearance in ``sample.triples`` (head before tail).
* Triple ``i`` of a graph is ``sample.triples[i]``, so label indices and retrieved indices are
  indices into ``sample.triples``.

Labels come from one switch (:class:`LabelConfig`): ``weak`` computes the shortest-path labels
here; ``refined`` reads a labels parquet file or folder written by the refine job.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch
from pydantic import Field, model_validator

from rg.config import Config
from rg.data.entities import is_unnamed
from rg.data.sample import Sample
from rg.graph import KnowledgeGraph
from rg.retrievers.graphs import EmbeddingTables, QuestionGraph
from rg.supervision.answer_paths import DEFAULT_MAX_LEN, AnswerPathLabels, answer_f1_labels, path_labels, search_kb
from rg.supervision.labels import LabelSource, Labels, labels_by_id, weak_fallback
from rg.supervision.selectors import verbalise_relation
from rg.supervision.weak import WeakConfig, weak_labels
from rg.training.planner_data import TemplateConsensus, candidate_targets


WEAK_SELECTOR = "weak"
WEAK_REASON = "weak_requested"
ANSWER_F1_SELECTOR = "answer_f1"
VOTED_SELECTOR = "answer_f1_voted"
"""``selector`` and ``fallback_reason`` of labels computed with ``source: weak``."""


class Encoder(Protocol):
    """What :func:`build_tables` needs of an encoder (:class:`~rg.text.TextEncoder` has it)."""

    @property
    def model_id(self) -> str: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...




@dataclass(frozen=True)
class TextIndex:
    """Rows of every string in the :class:`EmbeddingTables` built with it.

    Attributes:
        entities: Entity name → row of ``tables.entities`` (unnamed entities are absent).
        relations: Relation name → row of ``tables.relations``.
        questions: Sample id → row of ``tables.questions``.
        encoder_model_id: ``model_id`` of the encoder that produced the tables.
    """

    entities: dict[str, int]
    relations: dict[str, int]
    questions: dict[str, int]
    encoder_model_id: str

    def entity_row(self, name: str) -> int:
        """The entity's row, -1 for an unnamed one.

        Raises:
            KeyError: for a named entity that was not embedded.
        """
        if is_unnamed(name):
            return -1
        if name not in self.entities:
            raise KeyError(f"entity {name!r} has no embedding; build the tables from samples that contain it")
        return self.entities[name]

    def relation_row(self, relation: str) -> int:
        """The relation's row.

        Raises:
            KeyError: for a relation that was not embedded.
        """
        if relation not in self.relations:
            raise KeyError(f"relation {relation!r} has no embedding; build the tables from samples that contain it")
        return self.relations[relation]


def _tensor(vectors: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32))


def sample_names(sample: Sample) -> tuple[list[str], list[str]]:
    """The named entities and the relations of ``sample.triples``, each once, in first-appearance order.

    Entities are taken head before tail; unnamed ones (:func:`rg.data.entities.is_unnamed`) are
    left out. Merging these lists over samples in order gives the rows :func:`build_tables` uses.
    """
    entities: dict[str, None] = {}
    relations: dict[str, None] = {}
    for head, relation, tail in sample.triples:
        for name in (head, tail):
            if not is_unnamed(name):
                entities.setdefault(name, None)
        relations.setdefault(relation, None)
    return list(entities), list(relations)


class Vocabulary:
    """The distinct strings of the tables, collected question by question in first-appearance order.

    :func:`build_tables` fills one from whole samples; the streamed training input
    (:mod:`rg.training.graph_stream`) fills one from each question's :func:`sample_names`, computed
    where the subgraph is, so the driver never holds a subgraph. Both give the same rows for the
    same questions in the same order.
    """

    def __init__(self) -> None:
        self.entities: dict[str, int] = {}
        self.relations: dict[str, int] = {}
        self.questions: dict[str, int] = {}
        self.question_texts: list[str] = []

    def add_question(self, sample_id: str, question: str) -> None:
        """Give the question the next row.

        Raises:
            ValueError: if ``sample_id`` already has one.
        """
        if sample_id in self.questions:
            raise ValueError(f"sample id {sample_id!r} occurs twice; ids must be unique within the tables")
        self.questions[sample_id] = len(self.question_texts)
        self.question_texts.append(question)

    def add_names(self, entities: Iterable[str], relations: Iterable[str]) -> None:
        """Give each entity name and relation not seen yet the next row of its table."""
        for name in entities:
            self.entities.setdefault(name, len(self.entities))
        for relation in relations:
            self.relations.setdefault(relation, len(self.relations))

    def embed(self, encoder: Encoder) -> tuple[EmbeddingTables, TextIndex]:
        """Encode every string once.

        Shapes:
            -> entities (N_e, D), relations (N_r, D), questions (N_q, D)
        """
        tables = EmbeddingTables(
            entities=_tensor(encoder.encode(list(self.entities))),
            relations=_tensor(encoder.encode([verbalise_relation(r) for r in self.relations])),
            questions=_tensor(encoder.encode(self.question_texts)),
        )
        return tables, TextIndex(dict(self.entities), dict(self.relations), dict(self.questions), encoder.model_id)


def build_tables(samples: Iterable[Sample], encoder: Encoder) -> tuple[EmbeddingTables, TextIndex]:
    """Embed every distinct entity name, relation and question of ``samples`` once.

    Rows follow first appearance over the samples (entities head before tail), so the same
    samples always give the same tables.

    Args:
        samples: The questions (e.g. train, validation and test together).
        encoder: A :class:`~rg.text.TextEncoder` (or anything with ``encode`` and ``model_id``).

    Returns:
        The tables and the index mapping strings to their rows.

    Raises:
        ValueError: if two samples share an id.

    Shapes:
        -> entities (N_e, D), relations (N_r, D), questions (N_q, D)
    """
    vocabulary = Vocabulary()
    for sample in samples:
        vocabulary.add_question(sample.id, sample.question)
        vocabulary.add_names(*sample_names(sample))
    return vocabulary.embed(encoder)


def answer_names(sample: Sample) -> tuple[str, ...]:
    """The answers as KG entities: ``sample.a_entities``, else ``sample.answers``; each once."""
    return tuple(dict.fromkeys(sample.a_entities or sample.answers))


def question_graph(sample: Sample, index: TextIndex, labels: Labels | None = None) -> QuestionGraph:
    """One question as tensors over the rows of ``index``.

    Args:
        sample: The question and its subgraph.
        index: Rows of the embedded strings (from :func:`build_tables` over samples including this one).
        labels: Its supervision; ``positive_triples`` index ``sample.triples``. None leaves the
            graph unlabelled.

    Returns:
        The graph with topic flags from ``sample.q_entities``, answers (metrics only) from
        :func:`answer_names` and 0/1 triple labels.

    Raises:
        ValueError: if the labels belong to another question or point past the subgraph.
        KeyError: if a string of the sample was not embedded.
    """
    local: dict[str, int] = {}
    heads, tails, rels = [], [], []
    for head, relation, tail in sample.triples:
        heads.append(local.setdefault(head, len(local)))
        tails.append(local.setdefault(tail, len(local)))
        rels.append(index.relation_row(relation))
    topics = set(sample.q_entities)
    answers = answer_names(sample)
    label_tensor = None
    if labels is not None:
        if labels.id != sample.id:
            raise ValueError(f"labels {labels.id!r} given for sample {sample.id!r}")
        bad = labels.stale_positives(sample.triples)
        if bad:
            raise ValueError(
                f"labels {labels.id!r}: positive triples {bad[:5]} are outside the subgraph of {len(sample.triples)} "
                "triples or off the labels' relation paths; the labels were made for another build of the "
                "subgraphs (run the refine job again on this build)"
            )
        label_tensor = torch.zeros(len(sample.triples), dtype=torch.float32)
        label_tensor[list(labels.positive_triples)] = 1.0
    if sample.id not in index.questions:
        raise KeyError(f"question {sample.id!r} has no embedding; build the tables from samples that contain it")
    return QuestionGraph(
        id=sample.id,
        question=index.questions[sample.id],
        entity_text=torch.tensor([index.entity_row(name) for name in local], dtype=torch.long),
        topic=torch.tensor([name in topics for name in local], dtype=torch.bool),
        head=torch.tensor(heads, dtype=torch.long),
        rel=torch.tensor(rels, dtype=torch.long),
        tail=torch.tensor(tails, dtype=torch.long),
        labels=label_tensor,
        answers=torch.tensor([local[a] for a in answers if a in local], dtype=torch.long),
        num_answers=len(answers),
    )


def question_graphs(
    samples: Iterable[Sample], index: TextIndex, labels: Mapping[str, Labels] | None = None
) -> list[QuestionGraph]:
    """:func:`question_graph` for each sample; with ``labels``, every sample must have a row.

    Raises:
        KeyError: naming how many samples lack labels and a few of their ids.
    """
    samples = list(samples)
    if labels is not None:
        require_labels([s.id for s in samples], labels)
    return [question_graph(s, index, None if labels is None else labels[s.id]) for s in samples]


def require_labels(ids: Iterable[str], labelled: Collection[str]) -> None:
    """Check that every id in ``ids`` has a labels row in ``labelled``.

    Raises:
        KeyError: naming how many ids lack labels, a few of them and the fix.
    """
    missing = [i for i in ids if i not in labelled]
    if missing:
        raise KeyError(
            f"{len(missing)} sample(s) have no labels, e.g. {missing[:5]}; label every question "
            "(the refine job writes a row per question) or train on `source: weak`"
        )


class LabelConfig(Config):
    """Which supervision the retriever trains on."""

    source: LabelSource = Field(
        "weak",
        description=(
            "'weak': weak paths computed here (`weak.rule`: shortest topic-answer paths, or answer_f1); 'refined': rows of a "
            "labels parquet written by the refine job (ReG stage S(I); rows that fell back keep source 'weak')."
        ),
    )
    path: str | None = Field(None, description="Labels parquet file or folder; required for source 'refined'.")
    weak: WeakConfig = Field(default_factory=WeakConfig, description="Search settings for source 'weak'.")
    template_vote: bool = Field(
        False,
        description=(
            "With weak.rule answer_f1: keep only each question's tied paths that its wording "
            "(topic masked) chose most often among the training questions "
            "(rg.training.planner_data.TemplateConsensus, counted on the training side only), and "
            "label the triples on their walks. Removes shortcut paths that reach the same answers."
        ),
    )

    @model_validator(mode="after")
    def _needs_path(self) -> "LabelConfig":
        if self.source == "refined" and not self.path:
            raise ValueError("source 'refined' reads labels from `path`; set path to the refine job's labels folder")
        if self.template_vote and (self.source != "weak" or self.weak.rule != "answer_f1"):
            raise ValueError(
                "labels.template_vote votes among answer_f1 paths; set labels.source: weak and "
                "labels.weak.rule: answer_f1, or template_vote: false"
            )
        return self


def answer_f1_row(sample: Sample, weak: WeakConfig, kb: KnowledgeGraph | None = None) -> Labels:
    """A weak labels row by the ``answer_f1`` rule (selector ``answer_f1``), like the refine job's rows.

    ``kb`` is the whole KG ``weak.kb`` names, when the paths are chosen there.
    """
    return _path_row(sample.id, answer_f1_labels(sample, weak, kb=kb), ANSWER_F1_SELECTOR)


def _path_row(sample_id: str, found: AnswerPathLabels, selector: str) -> Labels:
    return Labels(
        id=sample_id,
        positive_triples=found.positive_triples,
        paths=tuple(w.render() for w in found.walks),
        relation_paths=found.relation_paths,
        source="weak",
        selector=selector,
        fallback_reason=WEAK_REASON,
    )


def voted_rows(
    samples: Sequence[Sample], weak: WeakConfig, train_ids: Collection[str], kb: KnowledgeGraph | None = None
) -> dict[str, Labels]:
    """Weak labels rows by the ``answer_f1`` rule after a template vote (selector ``answer_f1_voted``).

    Each question's best answer-F1 paths (searched on ``kb`` when given) are voted by the counts
    of the training questions (``train_ids``) that share its wording; the triples on the walks
    of the paths that survive are its positives. A question without a path gets an empty row.
    """
    paths = voted_paths(samples, weak, train_ids, kb)
    return {s.id: _path_row(s.id, path_labels(s, paths.get(s.id, ())), VOTED_SELECTOR) for s in samples}


def voted_paths(
    samples: Sequence[Sample], weak: WeakConfig, train_ids: Collection[str], kb: KnowledgeGraph | None = None
) -> dict[str, tuple[tuple[str, ...], ...]]:
    """Each question's best answer-F1 relation paths after the template vote of ``train_ids``.

    Questions without any path are absent. The paths are searched on ``kb`` when given, else on
    each question's subgraph.
    """
    max_len = weak.max_path_len if weak.max_path_len is not None else DEFAULT_MAX_LEN
    targets, _ = candidate_targets(samples, None, weak, max_len, kb)
    consensus = TemplateConsensus.fit(t for t in targets if t.id in train_ids)
    return {t.id: consensus.vote(t).relation_paths for t in targets}


def load_labels(
    samples: Iterable[Sample], config: LabelConfig, train_ids: Collection[str] | None = None
) -> dict[str, Labels]:
    """Labels of ``samples`` by id, from the source ``config`` names.

    With ``source: refined`` the file may hold more questions than ``samples``; only theirs are
    returned, and a sample without a row is an error in :func:`question_graphs`.
    ``train_ids`` names the training questions, whose paths alone the template vote counts.

    Raises:
        FileNotFoundError: if the refined labels path does not exist.
        ValueError: if ``config.template_vote`` is set without ``train_ids``.
    """
    samples = list(samples)
    if config.template_vote:
        if train_ids is None:
            raise ValueError("labels.template_vote needs the training question ids (train_ids) to count the vote on")
        return voted_rows(samples, config.weak, train_ids, search_kb(config.weak))
    answer_f1 = config.source == "weak" and config.weak.rule == "answer_f1"
    return join_labels(samples, config, search_kb(config.weak) if answer_f1 else None)


def join_labels(
    samples: Sequence[Sample],
    config: LabelConfig,
    kb: KnowledgeGraph | None = None,
    voted: Mapping[str, tuple[tuple[str, ...], ...]] | None = None,
) -> dict[str, Labels]:
    """The labels of one batch of ``samples`` by id: what :func:`load_labels` gives for them.

    Everything that needs more than the batch comes in: the whole KB of ``weak.kb`` (``kb``,
    loaded once by the caller) and, for ``config.template_vote``, the paths that survived the
    vote of the training questions (``voted``, from :func:`voted_paths`). With ``source:
    refined`` only the batch's rows are read from the labels parquet.

    Raises:
        ValueError: if ``config.template_vote`` is set without ``voted``.
    """
    if config.template_vote:
        if voted is None:
            raise ValueError("labels.template_vote needs the voted paths of every question (rg.training.data.voted_paths)")
        return {s.id: _path_row(s.id, path_labels(s, voted.get(s.id, ())), VOTED_SELECTOR) for s in samples}
    if config.source == "weak" and config.weak.rule == "answer_f1":
        return {s.id: answer_f1_row(s, config.weak, kb) for s in samples}
    if config.source == "weak":
        return {
            s.id: weak_fallback(s.id, weak_labels(s, config.weak), None, reason=WEAK_REASON, selector=WEAK_SELECTOR)
            for s in samples
        }
    wanted = {s.id for s in samples}
    return labels_by_id(str(config.path), wanted)
