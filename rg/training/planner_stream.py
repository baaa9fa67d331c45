"""Planner training examples built by Ray Data from the input files: the driver never holds a subgraph.

The planner job (:mod:`rg.jobs.train_planner`) used to read every Sample with its subgraph on
the driver, derive the target relation paths there (:mod:`rg.training.planner_data`), tokenise
them and hand the examples to ``ray.data.from_items``. Here the same work runs in two passes of
Ray Data, as the retriever's input does (:mod:`rg.training.graph_stream`, whose reasons for
materialising before ``TorchTrainer.fit`` apply unchanged):

1. **Scan** (train side, then validation side; each read with an id filter,
   :func:`rg.data.streaming.read_side`): every batch of rows gets its labels rows joined (the
   batch's ids only, from the refine job's folder or the one the train job's weak-label step
   wrote, :mod:`rg.jobs.weak_labels`) and every question its candidate targets
   (:func:`candidate_targets`: the row's relation paths) and the relations of its subgraph. The scan is **materialised in the object store**;
   the driver reads it back in question order and keeps only what must be global: the
   relation names (the tokenizer's path tokens), the training questions' prompt texts (the
   tokenizer's corpus), the counts of :class:`TargetStats`, and with ``target_consensus`` the
   :class:`TemplateConsensus` fitted on the training targets (paths counted per wording).
2. **Examples**: the driver builds the planner from those (tokenizer, base model, untrained
   adapter, exactly as from whole samples) and Ray Data tasks map the materialised scan: each
   batch's targets are voted and capped (:func:`select_targets`) and tokenised by the planner's
   :class:`~rg.retrievers.planner.model.PlanEncoder`; the examples are materialised in scan
   order. The driver counts the outvoted and capped paths by reading the targets once more.

The result is what the driver-side path gives for the same questions: the same targets, counts,
tokenizer and examples in the same order (``tests/test_planner_stream.py``).
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rg.data.labels import label_ids, labels_by_id
from rg.data.sample import Sample
from rg.data.streaming import Setup, batch_samples, in_order, map_in_order, read_side
from rg.retrievers.inputs import require_labels
from rg.retrievers.planner.model import PlanEncoder
from rg.run.paths import resolve_data_path
from rg.training.planner_data import (
    PlanTarget,
    TargetStats,
    TemplateConsensus,
    candidate_targets,
    select_targets,
    target_rows,
)
from rg.training.planner_view import load_view, view_relations, view_target

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data


@dataclass(frozen=True)
class TargetScan:
    """The candidate targets of one run's questions, in the object store, and what the driver keeps of them.

    Attributes:
        train: Materialised scan of the training questions (``id``, ``target``: a pickled
            :class:`PlanTarget` or empty, ``relations``, ``too_long``), in input order.
        val: Likewise for the validation questions.
        train_stats: Target counts of the training side (the vote and cap counts are added by
            :func:`stream_planner_examples`).
        val_stats: Likewise for the validation side.
        relations: Every relation of the training and validation subgraphs.
        questions: The prompt text of each training question with a target, in question order
            (the tokenizer's corpus).
        consensus: The template vote of the training targets (``target_consensus``), else None.
    """

    train: "ray.data.MaterializedDataset"
    val: "ray.data.MaterializedDataset"
    train_stats: TargetStats
    val_stats: TargetStats
    relations: frozenset[str]
    questions: list[str]
    consensus: TemplateConsensus | None


@dataclass(frozen=True)
class PlannerExamples:
    """The tokenised examples as the trainer takes them; the examples themselves are in the object store.

    Attributes:
        train: Materialised dataset of the training examples, one ``example`` column (a pickled
            :class:`~rg.retrievers.planner.model.Example`), in question order.
        val: Likewise for the validation examples.
        train_examples: Rows of ``train``.
        val_examples: Rows of ``val``.
    """

    train: "ray.data.MaterializedDataset"
    val: "ray.data.MaterializedDataset"
    train_examples: int
    val_examples: int


def scan_targets(
    inputs: str | Sequence[str],
    train: Sequence[Sample],
    val: Sequence[Sample],
    labels: str,
    max_len: int | None,
    consensus: bool,
    prompt_text: Callable[[str, Sequence[str]], str],
    view_schema_dir: str | None = None,
    augment: Callable[[Sequence[PlanTarget]], list[PlanTarget]] | None = None,
) -> TargetScan:
    """Pass 1 (see the module doc): every question's candidate targets, counted on the driver in question order.

    Args:
        inputs: The RoG inputs the questions come from.
        train: The training questions in input order, read without subgraphs (``graph=False``).
        val: The validation questions, likewise.
        labels: The labels folder or file (an absolute path: actors read it); a row's relation paths are
            its question's candidate targets.
        max_len: The planner's longest path (longer paths are left out).
        consensus: Fit the template vote on the training targets (``target_consensus``).
        prompt_text: ``prompt_text(question, topics)`` gives a question's prompt text
            (:func:`rg.retrievers.planner.model.prompt_question` with the planner config).
        view_schema_dir: The KG schema whose relation clusters the targets and relations are written in
            (:mod:`rg.training.planner_view`); None keeps raw relations.
        augment: Adds other wordings to training targets (``paraphrases``); their prompts join the tokenizer's
            corpus after their question's.

    Raises:
        KeyError: if the labels lack a question (before any pass).
        ValueError: if an id occurs twice, a question is not read back, or a row is not a valid RoG row.
    """
    sources = [inputs] if isinstance(inputs, str) else list(inputs)
    require_labels([s.id for s in (*train, *val)], label_ids(labels))
    if view_schema_dir is not None:  # the actors read it: give them the driver's absolute path
        view_schema_dir = str(resolve_data_path(view_schema_dir).resolve())
    kwargs = {"labels": labels, "max_len": max_len, "view_schema_dir": view_schema_dir}
    setup = _TargetScan.setup(view_schema_dir)
    train_ds = read_side(sources, [s.id for s in train], _TargetScan, kwargs, setup=setup).materialize()
    val_ds = read_side(sources, [s.id for s in val], _TargetScan, kwargs, setup=setup).materialize()
    relations: set[str] = set()
    questions: list[str] = []
    stats = []
    for is_train, ds, side in ((True, train_ds, train), (False, val_ds, val)):
        side_stats = TargetStats()
        for row in in_order(ds.iter_rows(), [s.id for s in side]):
            relations.update(map(str, row["relations"]))
            side_stats.too_long += int(row["too_long"])
            target = _target(row)
            if target is None:
                side_stats.no_path += 1
                continue
            side_stats.by_source[target.source] += 1
            if is_train:
                questions += [prompt_text(t.question, t.topics) for t in (augment or list)([target])]
        stats.append(side_stats)
    # the vote counts training questions only; validation targets are voted by the same counts
    vote = TemplateConsensus.fit(iter_targets(train_ds, train)) if consensus else None
    return TargetScan(train_ds, val_ds, stats[0], stats[1], frozenset(relations), questions, vote)


def stream_planner_examples(
    scan: TargetScan, train: Sequence[Sample], val: Sequence[Sample], encoder: PlanEncoder, max_paths: int | None,
    augment: Callable[[Sequence[PlanTarget]], list[PlanTarget]] | None = None,
) -> PlannerExamples:
    """Pass 2 (see the module doc): vote, cap and tokenise the scanned targets in Ray Data tasks; ``augment`` adds
    other wordings to the training side's.

    ``scan.train_stats`` and ``scan.val_stats`` gain the outvoted and capped counts, as
    :func:`select_targets` adds them on the driver.
    """
    import ray

    for ds, side, stats in ((scan.train, train, scan.train_stats), (scan.val, val, scan.val_stats)):
        for target in iter_targets(ds, side):
            select_targets([target], stats, max_paths, scan.consensus)
    kwargs = {"encoder": ray.put(encoder), "consensus": ray.put(scan.consensus), "max_paths": max_paths}
    train_ds = map_in_order(scan.train, len(train), _Examples, {**kwargs, "augment": augment},
                            setup="per_batch").materialize()
    val_ds = map_in_order(scan.val, len(val), _Examples, kwargs, setup="per_batch").materialize()
    return PlannerExamples(train_ds, val_ds, train_ds.count(), val_ds.count())


def iter_targets(ds: "ray.data.Dataset", side: Sequence[Sample]) -> Iterator[PlanTarget]:
    """The targets of a :class:`TargetScan` dataset in question order, one at a time."""
    for row in in_order(ds.iter_rows(), [s.id for s in side]):
        target = _target(row)
        if target is not None:
            yield target


def _target(row: Any) -> PlanTarget | None:
    return pickle.loads(row["target"]) if row["target"] else None


class _TargetScan:
    """Ray Data map of the scan pass: each question's candidate targets (labels joined per batch) and relations."""

    def __init__(self, labels: str, max_len: int | None, view_schema_dir: str | None) -> None:
        self.labels = labels
        self.max_len = max_len
        self.view = load_view(view_schema_dir)

    @staticmethod
    def setup(view_schema_dir: str | None) -> Setup:
        """Once per actor when it opens a schema, else per batch (:data:`Setup`)."""
        return "per_actor" if view_schema_dir is not None else "per_batch"

    def __call__(self, batch: "pa.Table") -> "pa.Table":
        import pyarrow as pa

        samples = batch_samples(batch)
        rows = labels_by_id(self.labels, {s.id for s in samples})
        targets, too_long = [], []
        for sample in samples:
            found, stats = candidate_targets([sample], rows, self.max_len)
            targets.append(pickle.dumps(view_target(found[0], self.view)) if found else b"")
            too_long.append(stats.too_long)
        return pa.table(
            {
                "id": pa.array([s.id for s in samples], pa.string()),
                "target": pa.array(targets, pa.binary()),
                "relations": pa.array([sorted(view_relations((r for _, r, _ in s.triples), self.view)) for s in samples],
                                      pa.list_(pa.string())),
                "too_long": pa.array(too_long, pa.int64()),
            }
        )


class _Examples:
    """Ray Data map of the examples pass (built per batch): a batch of scanned targets voted, capped and tokenised."""

    def __init__(self, encoder: Any, consensus: Any, max_paths: int | None,
                 augment: Callable[[Sequence[PlanTarget]], list[PlanTarget]] | None = None) -> None:
        import ray

        self.encoder: PlanEncoder = ray.get(encoder)
        self.consensus: TemplateConsensus | None = ray.get(consensus)
        self.max_paths = max_paths
        self.augment = augment

    def __call__(self, batch: "pa.Table") -> "pa.Table":
        import pyarrow as pa

        targets = [pickle.loads(b) for b in batch.column("target").to_pylist() if b]
        chosen = select_targets(targets, TargetStats(), self.max_paths, self.consensus)
        chosen = self.augment(chosen) if self.augment is not None else chosen
        examples = self.encoder.examples(target_rows(chosen, self.encoder.prompt_question))
        return pa.table({"example": pa.array([pickle.dumps(e) for e in examples], pa.binary())})
