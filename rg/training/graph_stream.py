"""Training graphs built by Ray Data from the input files: the driver never holds a subgraph.

Retriever training (:mod:`rg.jobs.train_retriever`) used to read every Sample with its subgraph
on the driver, build each :class:`QuestionGraph` there and hand the list to
``ray.data.from_items``. :func:`stream_training_graphs` does the same work in two passes of Ray
Data over the input files, each read with an id filter for one split side
(:func:`rg.data.streaming.read_input`):

1. **Scan** (train side, then validation side): every row gives the named entities and
   relations of its subgraph in first-appearance order (:func:`rg.retrievers.inputs.sample_names`).
   The driver merges them in question order (training questions in input order, then validation questions), so the
   :class:`Vocabulary` and the embedding tables are row for row those of
   :func:`rg.retrievers.inputs.build_tables` over the same samples.
2. **Graphs**: every batch of rows gets its labels rows joined (the batch's ids only, read from
   the labels folder: the refine job's, or the one the train job's weak-label step wrote,
   :mod:`rg.jobs.weak_labels`) and becomes pickled :class:`QuestionGraph` rows; training questions :func:`fit` would skip are
   dropped. Each side is **materialised in the object store** in input order; the driver keeps
   block references and row counts.

Why materialise before ``TorchTrainer.fit`` rather than hand the lazy pipeline to ``datasets=``:
Ray Data inside a training run gets only the CPUs the workers do not reserve, and on a node the
workers fill (2 workers on 2 CPUs) the graph-building tasks would never be scheduled. Built
beforehand, the pipeline uses the whole cluster, the driver learns the usable count (and PNA its
degree histogram) before any worker starts, and the trainer splits the materialised training
blocks over the workers with ``get_dataset_shard`` as it split ``from_items`` blocks before
(``DataConfig(datasets_to_split=["train"])``; every worker reads the whole validation set).
Reading per-worker id lists in the workers instead would repeat the label work in every
worker and leave the driver without the counts it checks before training.

What stays on the driver is small: the questions without their subgraphs (id, text, answers,
topics; read with ``graph=False``), the vocabularies and the tables. No supervision is computed
here: a question's labels are what its row says.

For inputs small enough to hold (``examples_on: driver``, or ``auto`` under a few MB: the demo's 0.6 MB),
:func:`held_training_graphs` builds the same tables and graphs from whole samples in the driver and hands them
to the workers through the object store: four Ray Data passes (two scans, two graph passes) cost more there than the work.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rg.data.labels import label_ids, labels_by_id
from rg.data.sample import Sample
from rg.data.streaming import batch_samples, in_order, read_side
from rg.retrievers.graphs import EmbeddingTables, QuestionGraph
from rg.retrievers.inputs import (
    Encoder,
    TextIndex,
    Vocabulary,
    build_tables,
    question_graph,
    question_graphs,
    require_labels,
    sample_names,
)
from rg.training.shards import HeldRows, side_rows

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data

@dataclass(frozen=True)
class TrainingGraphs:
    """The training input as the trainer takes it; the graphs themselves are in the object store.

    Attributes:
        train: The usable training questions, one ``graph`` column (a pickled :class:`QuestionGraph`), in input
            order: a materialised dataset when streamed, :class:`~rg.training.shards.HeldRows` when built here.
        val: Every validation question, likewise.
        train_usable: Rows of ``train``.
        tables: The embedding tables of every string of both sides.
        index: Rows of those strings.
    """

    train: "ray.data.MaterializedDataset | HeldRows"
    val: "ray.data.MaterializedDataset | HeldRows"
    train_usable: int
    tables: EmbeddingTables
    index: TextIndex


def trainable(graph: QuestionGraph, skip_unlabelled: bool) -> bool:
    """Whether :func:`rg.training.loop.fit` trains on ``graph``: labelled, with triples, with a positive if required."""
    return (
        graph.labels is not None
        and graph.head.numel() > 0
        and (graph.num_positives > 0 or not skip_unlabelled)
    )


def stream_training_graphs(
    inputs: str | Sequence[str],
    train: Sequence[Sample],
    val: Sequence[Sample],
    labels: str,
    encoder: Encoder,
    skip_unlabelled: bool,
) -> TrainingGraphs:
    """Embed the strings and build the graphs of ``train`` and ``val`` with Ray Data (see the module doc).

    Args:
        inputs: The RoG inputs the questions come from.
        train: The training questions in input order, read without subgraphs (``graph=False``).
        val: The validation questions, likewise.
        labels: The labels folder or file (an absolute path: actors read it), which must hold a row for
            every question (checked here).
        encoder: Encodes the strings on the driver (its cache makes reruns cheap).
        skip_unlabelled: Drop training questions without a positive triple (``TrainConfig``).

    Raises:
        ValueError: if an id occurs twice, or a row is not a valid RoG row.
        KeyError: if the labels lack a question (before any graph is built).
    """
    import ray

    sources = [inputs] if isinstance(inputs, str) else list(inputs)
    vocabulary = Vocabulary()
    for sample in (*train, *val):
        vocabulary.add_question(sample.id, sample.question)
    require_labels([s.id for s in (*train, *val)], label_ids(labels))
    for side in (train, val):
        scan = read_side(sources, [s.id for s in side], _Scan, {}, setup="per_batch")
        for row in in_order(scan.iter_rows(), [s.id for s in side]):
            vocabulary.add_names(map(str, row["entities"]), map(str, row["relations"]))
    tables, index = vocabulary.embed(encoder)
    shared = {"index": ray.put(index), "labels": labels}
    train_ds = read_side(sources, [s.id for s in train], _GraphRows, {**shared, "skip_unlabelled": skip_unlabelled},
                         setup="per_batch")
    val_ds = read_side(sources, [s.id for s in val], _GraphRows, {**shared, "skip_unlabelled": None},
                       setup="per_batch")
    train_ds, val_ds = train_ds.materialize(), val_ds.materialize()
    return TrainingGraphs(train=train_ds, val=val_ds, train_usable=train_ds.count(), tables=tables, index=index)


def held_training_graphs(
    train: Sequence[Sample],
    val: Sequence[Sample],
    labels: str,
    encoder: Encoder,
    skip_unlabelled: bool,
) -> TrainingGraphs:
    """What :func:`stream_training_graphs` returns, built in this process from samples that hold their subgraphs.

    For small local inputs (``examples_on: driver``): the tables of :func:`rg.retrievers.inputs.build_tables`
    over the same questions in the same order, the graphs of :func:`rg.retrievers.inputs.question_graphs`, and
    the training side filtered by :func:`trainable`, put in the object store as
    :class:`~rg.training.shards.HeldRows` without a Ray Data pass. A worker takes the rows that
    ``get_dataset_shard`` gives it of a one-block dataset, the layout the stream gives an input read by one
    task, such as the demo's: so training takes the same steps both ways (with many blocks the workers'
    shards, and so the DDP steps, would differ).

    Raises:
        KeyError: if the labels lack a question (before any graph is built).
    """
    samples = [*train, *val]
    rows = labels_by_id(labels, {s.id for s in samples})
    require_labels([s.id for s in samples], rows)
    tables, index = build_tables(samples, encoder)
    usable = [pickle.dumps(g) for g in question_graphs(train, index, rows) if trainable(g, skip_unlabelled)]
    val_rows = [{"graph": pickle.dumps(g)} for g in question_graphs(val, index, rows)]
    return TrainingGraphs(train=HeldRows.put([{"graph": g} for g in usable]), val=HeldRows.put(val_rows),
                          train_usable=len(usable), tables=tables, index=index)


def iter_graphs(side: "ray.data.Dataset | HeldRows") -> Iterator[QuestionGraph]:
    """The graphs of a :class:`TrainingGraphs` side, a dataset's one block at a time (e.g. for PNA's degree
    histogram)."""
    for row in side_rows(side):
        yield pickle.loads(row["graph"])


class _Scan:
    """Ray Data map of the scan pass: the named entities and relations of each question's subgraph."""

    def __call__(self, batch: "pa.Table") -> "pa.Table":
        import pyarrow as pa

        samples = batch_samples(batch)
        names = [sample_names(s) for s in samples]
        return pa.table(
            {
                "id": pa.array([s.id for s in samples], pa.string()),
                "entities": pa.array([n[0] for n in names], pa.list_(pa.string())),
                "relations": pa.array([n[1] for n in names], pa.list_(pa.string())),
            }
        )


class _GraphRows:
    """Ray Data map of the graph pass: labels rows joined per batch, one pickled :class:`QuestionGraph` per row.

    ``skip_unlabelled`` None keeps every row (validation); a bool drops the rows :func:`trainable` refuses.
    """

    def __init__(self, index: Any, labels: str, skip_unlabelled: bool | None) -> None:
        import ray

        self.index: TextIndex = ray.get(index)
        self.labels = labels
        self.skip_unlabelled = skip_unlabelled

    def __call__(self, batch: "pa.Table") -> "pa.Table":
        import pyarrow as pa

        samples = batch_samples(batch)
        rows = labels_by_id(self.labels, {s.id for s in samples})
        require_labels([s.id for s in samples], rows)
        graphs = [question_graph(s, self.index, rows[s.id]) for s in samples]
        if self.skip_unlabelled is not None:
            graphs = [g for g in graphs if trainable(g, self.skip_unlabelled)]
        return pa.table({"graph": pa.array([pickle.dumps(g) for g in graphs], pa.binary())})
