"""Tensors of question subgraphs for retrievers: one question, and many batched together.

Text embeddings are not stored per question. Every entity name, relation name and question
text is embedded once into an :class:`EmbeddingTables` row, and a :class:`QuestionGraph`
refers to rows by index. A :class:`GraphBatch` concatenates many questions so one forward
pass scores all their triples (SubgraphRAG's reference code scores one question at a time).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class EmbeddingTables:
    """Text embeddings shared by all questions of a dataset.

    Attributes:
        entities: ``(N_e, D)`` one row per distinct entity name.
        relations: ``(N_r, D)`` one row per distinct relation name.
        questions: ``(N_q, D)`` one row per question.
    """

    entities: torch.Tensor
    relations: torch.Tensor
    questions: torch.Tensor

    @property
    def dim(self) -> int:
        return int(self.entities.shape[1])

    @property
    def device(self) -> torch.device:
        return self.entities.device

    def to(self, device: torch.device | str) -> "EmbeddingTables":
        """The tables on ``device``."""
        return EmbeddingTables(self.entities.to(device), self.relations.to(device), self.questions.to(device))


@dataclass(frozen=True)
class QuestionGraph:
    """One question's subgraph in local entity ids.

    Attributes:
        id: The question id.
        question: Row of the question in ``EmbeddingTables.questions``.
        entity_text: ``(E,)`` row of each local entity in ``EmbeddingTables.entities``;
            ``-1`` for unnamed ``m.``/CVT nodes (they get a learned shared vector).
        topic: ``(E,)`` bool, True for topic entities.
        head, rel, tail: ``(T,)`` local head id, relation row, local tail id per triple
            (triple ``i`` is ``sample.triples[i]``).
        labels: ``(T,)`` float 0/1 positives for training, or None.
        answers: ``(A,)`` local ids of the answer entities found in the subgraph, or None.
            Only metrics read it (answer recall@K); no retriever's forward pass does, so gold
            answers never steer retrieval (DESIGN §5).
        num_answers: Distinct answers of the question, including those absent from the
            subgraph (the denominator of answer recall).
    """

    id: str
    question: int
    entity_text: torch.Tensor
    topic: torch.Tensor
    head: torch.Tensor
    rel: torch.Tensor
    tail: torch.Tensor
    labels: torch.Tensor | None = None
    answers: torch.Tensor | None = None
    num_answers: int = 0

    @property
    def num_entities(self) -> int:
        return int(self.entity_text.shape[0])

    @property
    def num_triples(self) -> int:
        return int(self.head.shape[0])

    @property
    def num_positives(self) -> int:
        """Positive triples (0 without labels)."""
        return 0 if self.labels is None else int(self.labels.sum().item())


@dataclass(frozen=True)
class GraphBatch:
    """Several questions as one disjoint graph.

    Attributes:
        ids: Question ids in batch order.
        question: ``(B,)`` question rows.
        entity_text, topic: ``(E_total,)`` concatenated per-question entity fields.
        entity_graph: ``(E_total,)`` batch position of each entity's question.
        head, rel, tail: ``(T_total,)`` triples with entity ids offset into the batch.
        triple_graph: ``(T_total,)`` batch position of each triple's question.
        triple_ptr: ``(B + 1,)`` triple offsets: question ``b`` owns ``triple_ptr[b]:triple_ptr[b+1]``.
        labels: ``(T_total,)`` or None when any question has no labels.
        answers: ``(A_total,)`` answer entity ids offset into the batch (metrics only), or
            None when any question has no answer field.
        answer_ptr: ``(B + 1,)`` answer offsets, or None with ``answers``.
        num_answers: ``(B,)`` distinct answers per question (present or not), or None.
    """

    ids: tuple[str, ...]
    question: torch.Tensor
    entity_text: torch.Tensor
    topic: torch.Tensor
    entity_graph: torch.Tensor
    head: torch.Tensor
    rel: torch.Tensor
    tail: torch.Tensor
    triple_graph: torch.Tensor
    triple_ptr: torch.Tensor
    labels: torch.Tensor | None
    answers: torch.Tensor | None = None
    answer_ptr: torch.Tensor | None = None
    num_answers: torch.Tensor | None = None

    @property
    def num_graphs(self) -> int:
        return len(self.ids)

    @property
    def num_entities(self) -> int:
        return int(self.entity_text.shape[0])

    @property
    def num_triples(self) -> int:
        return int(self.head.shape[0])

    def to(self, device: torch.device | str) -> "GraphBatch":
        """The batch with every tensor moved to ``device``."""
        moved = {
            k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in self.__dict__.items()
        }
        return GraphBatch(**moved)


def collate(graphs: list[QuestionGraph]) -> GraphBatch:
    """Concatenate questions into one :class:`GraphBatch` (entity ids offset per question)."""
    if not graphs:
        raise ValueError("collate needs at least one QuestionGraph")
    ent_off = torch.tensor([0] + [g.num_entities for g in graphs]).cumsum(0)
    tri_ptr = torch.tensor([0] + [g.num_triples for g in graphs]).cumsum(0)
    with_labels = all(g.labels is not None for g in graphs)
    with_answers = all(g.answers is not None for g in graphs)
    return GraphBatch(
        ids=tuple(g.id for g in graphs),
        question=torch.tensor([g.question for g in graphs], dtype=torch.long),
        entity_text=torch.cat([g.entity_text for g in graphs]),
        topic=torch.cat([g.topic for g in graphs]),
        entity_graph=torch.repeat_interleave(torch.arange(len(graphs)), torch.tensor([g.num_entities for g in graphs])),
        head=torch.cat([g.head + ent_off[i] for i, g in enumerate(graphs)]),
        rel=torch.cat([g.rel for g in graphs]),
        tail=torch.cat([g.tail + ent_off[i] for i, g in enumerate(graphs)]),
        triple_graph=torch.repeat_interleave(torch.arange(len(graphs)), torch.tensor([g.num_triples for g in graphs])),
        triple_ptr=tri_ptr,
        labels=torch.cat([g.labels for g in graphs]) if with_labels else None,  # type: ignore[misc]
        answers=(
            torch.cat([g.answers + ent_off[i] for i, g in enumerate(graphs)])  # type: ignore[operator]
            if with_answers
            else None
        ),
        answer_ptr=(
            torch.tensor([0] + [len(g.answers) for g in graphs]).cumsum(0)  # type: ignore[arg-type]
            if with_answers
            else None
        ),
        num_answers=torch.tensor([g.num_answers for g in graphs], dtype=torch.long) if with_answers else None,
    )
