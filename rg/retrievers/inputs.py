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
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from rg.data.entities import is_unnamed
from rg.data.sample import Sample
from rg.retrievers.graphs import EmbeddingTables, QuestionGraph
from rg.data.labels import Labels
from rg.supervision.selectors import verbalise_relation


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
