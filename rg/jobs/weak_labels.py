"""The train jobs' weak-label step: with ``labels.source: weak`` the rows a trainer reads are computed once.

The refine job writes refined rows (ReG stage S(I)); a train job without them used to derive weak
labels inside its own data pipeline, on every batch it built. Here they are computed by Ray Data over
the input files, one pass over every question of the run, and written as a labels folder
(``<output_dir>/weak_labels``, one ``part-<side>.parquet`` per split side) that the trainers read exactly as they read the refine job's
folder (:mod:`rg.data.labels`). The rules are those of :mod:`rg.supervision.labels`:

* ``shortest`` and ``answer_f1`` (:func:`~rg.supervision.labels.weak_row`): one map pass; the
  ``answer_f1`` search runs on the whole KB of ``weak.kb`` when set, which each actor loads once;
* ``answer_f1`` with ``template_vote``: a scan pass gives every question's candidate paths, the driver
  fits the vote on the training questions' (:class:`~rg.training.planner_data.TemplateConsensus`),
  and a write pass labels the triples on the walks of each question's surviving paths.

The folder is reused while its manifest's fingerprint matches: the label settings, the input files
(path, size, modification time) and the question ids of each side in order. A run killed while writing
leaves no manifest (it is written last), so the next run writes the folder again.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import shutil
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rg.data.labels import LABELS_SCHEMA, Labels, write_labels
from rg.data.sample import Sample
from rg.data.streaming import Setup, batch_samples, input_files, read_side
from rg.graph import KnowledgeGraph
from rg.run.paths import resolve_data_path
from rg.supervision.answer_paths import search_kb
from rg.supervision.labels import VOTED_SELECTOR, LabelConfig, path_row, searched_to, weak_paths_of, weak_row
from rg.supervision.weak import WeakConfig
from rg.training.planner_data import PlanTarget, TemplateConsensus

if TYPE_CHECKING:
    import pyarrow as pa

WEAK_LABELS_DIR = "weak_labels"
MANIFEST = "manifest.json"


def planner_labels(labels: LabelConfig, max_len: int | None) -> LabelConfig:
    """``labels`` for a planner whose paths have at most ``max_len`` relations: the ``answer_f1``
    search goes that deep (None keeps ``weak.max_path_len``)."""
    return labels.model_copy(update={"weak": searched_to(labels.weak, max_len)})


def labels_path(
    labels: LabelConfig, inputs: str | Sequence[str], sides: Mapping[str, Sequence[str]], output_dir: str | Path,
    samples: Sequence[Sample] | None = None,
) -> str:
    """The labels a trainer reads, as an absolute path: ``labels.path`` for refined rows, else the weak rows
    of every question of ``sides`` (side name → ids in input order), written into
    ``<output_dir>/weak_labels`` unless a finished folder with the same fingerprint is there.

    The training side is the one named ``train``: the template vote counts its questions only. A caller that
    holds the questions with their subgraphs already (``samples``, every id of ``sides``) has the rows computed
    here by :func:`weak_rows`, the functions the Ray Data pass maps, without starting that pass.

    Raises:
        ValueError: if a question of ``sides`` is not in the inputs (or in ``samples``).
    """
    if labels.source == "refined":
        return str(resolve_data_path(str(labels.path)).resolve())
    sources = [inputs] if isinstance(inputs, str) else list(inputs)
    folder = (Path(output_dir) / WEAK_LABELS_DIR).resolve()
    fingerprint = _fingerprint(labels, sources, sides)
    manifest = folder / MANIFEST
    if manifest.is_file() and json.loads(manifest.read_text()).get("fingerprint") == fingerprint:
        print(f"weak labels: reusing {folder}", flush=True)
        return str(folder)
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    everyone = [i for ids in sides.values() for i in ids]
    train_ids = set(sides.get("train", ()))
    if samples is not None:
        held = {s.id: s for s in samples}
        by_id = weak_rows([held[i] for i in everyone if i in held], labels, train_ids)
    else:
        voted = _voted(sources, everyone, train_ids, labels.weak) if labels.template_vote else None
        ds = read_side(sources, everyone, _WeakRows, {"weak": labels.weak, "voted": voted},
                       setup=_WeakRows.setup(labels.weak, voted))
        by_id = {str(row["id"]): Labels.from_row(row) for row in ds.iter_rows()}
    missing = [i for i in everyone if i not in by_id]
    if missing:
        where = "the samples given" if samples is not None else str(sources)
        raise ValueError(f"{len(missing)} question(s) were not read back from {where} (first: {missing[0]!r}); "
                         "were the inputs changed during the job? Rerun it")
    counts = {side: write_labels((by_id[i] for i in ids if i in by_id), folder / f"part-{side}.parquet")
              for side, ids in sides.items()}
    manifest.write_text(json.dumps({"fingerprint": fingerprint, "rows": counts}, indent=1))
    rule = labels.weak.rule + (" + template vote" if labels.template_vote else "")
    print(f"weak labels ({rule}): {sum(counts.values())} rows → {folder}", flush=True)
    return str(folder)


def weak_rows(
    samples: Sequence[Sample], labels: LabelConfig, train_ids: Collection[str] | None = None,
    kb: KnowledgeGraph | None = None,
) -> dict[str, Labels]:
    """The rows :func:`labels_path` writes for ``samples``, computed in memory (small runs and tests).

    ``train_ids`` names the training questions, whose paths alone the template vote counts; ``kb`` is
    the whole KG of ``weak.kb`` (loaded here when None and needed).

    Raises:
        ValueError: if ``labels.template_vote`` is set without ``train_ids``, or the source is not weak.
    """
    if labels.source != "weak":
        raise ValueError("weak_rows computes labels.source 'weak'; refined rows are read from labels.path")
    kb = kb if kb is not None else search_kb(labels.weak) if labels.weak.rule == "answer_f1" else None
    if labels.template_vote:
        if train_ids is None:
            raise ValueError("labels.template_vote needs the training question ids (train_ids) to count the vote on")
        paths = voted_paths(samples, labels.weak, train_ids, kb)
        return {s.id: path_row(s, paths.get(s.id, ())) for s in samples}
    return {s.id: weak_row(s, labels.weak, kb) for s in samples}


def voted_paths(
    samples: Sequence[Sample], weak: WeakConfig, train_ids: Collection[str], kb: KnowledgeGraph | None = None
) -> dict[str, tuple[tuple[str, ...], ...]]:
    """Each question's best answer-F1 relation paths after the template vote of ``train_ids``.

    Questions without any path are absent. The paths are searched on ``kb`` when given, else on each
    question's subgraph.
    """
    return vote(candidates(samples, weak, kb), train_ids)


def candidates(samples: Sequence[Sample], weak: WeakConfig, kb: KnowledgeGraph | None) -> list[PlanTarget]:
    """The answer-F1 relation paths of each question that has any, before the vote."""
    targets = []
    for sample in samples:
        paths = weak_paths_of(sample, weak, kb)
        if paths:
            targets.append(PlanTarget(sample.id, sample.question, paths, VOTED_SELECTOR, sample.q_entities))
    return targets


def vote(targets: Sequence[PlanTarget], train_ids: Collection[str]) -> dict[str, tuple[tuple[str, ...], ...]]:
    """Each target's paths after the template vote counted on the targets of ``train_ids``."""
    consensus = TemplateConsensus.fit(t for t in targets if t.id in train_ids)
    return {t.id: consensus.vote(t).relation_paths for t in targets}


def _voted(sources: Sequence[str], ids: Sequence[str], train_ids: Collection[str], weak: WeakConfig) -> Any:
    """The scan pass and the vote of a template vote: the voted paths of every question, in the object store."""
    import ray

    ds = read_side(sources, ids, _Candidates, {"weak": weak}, setup="per_actor")
    return ray.put(vote([pickle.loads(row["target"]) for row in ds.iter_rows() if row["target"]], train_ids))


def _fingerprint(labels: LabelConfig, sources: Sequence[str], sides: Mapping[str, Sequence[str]]) -> str:
    files = [(f, Path(f).stat().st_size, Path(f).stat().st_mtime_ns) for s in sources for f in input_files(s)]
    ids = {side: hashlib.sha256("\n".join(ids).encode()).hexdigest() for side, ids in sides.items()}
    settings = labels.model_dump(mode="json", exclude={"path"})
    return hashlib.sha256(json.dumps([settings, files, ids], sort_keys=True).encode()).hexdigest()


class _Candidates:
    """Ray Data map of the vote's scan pass: each question's pickled :class:`PlanTarget` (empty without a path)."""

    def __init__(self, weak: WeakConfig) -> None:
        self.weak = weak
        self.kb = search_kb(weak)

    def __call__(self, batch: "pa.Table") -> "pa.Table":
        import pyarrow as pa

        samples = batch_samples(batch)
        found = {t.id: pickle.dumps(t) for t in candidates(samples, self.weak, self.kb)}
        return pa.table({"id": pa.array([s.id for s in samples], pa.string()),
                         "target": pa.array([found.get(s.id, b"") for s in samples], pa.binary())})


class _WeakRows:
    """Ray Data map of the write pass: one labels row per question (voted paths' walks, or ``weak.rule``)."""

    def __init__(self, weak: WeakConfig, voted: Any) -> None:
        import ray

        self.weak = weak
        self.voted = None if voted is None else ray.get(voted)
        self.kb = search_kb(weak) if self._opens_kg(weak, voted) else None

    @staticmethod
    def _opens_kg(weak: WeakConfig, voted: Any) -> bool:
        return voted is None and weak.rule == "answer_f1" and weak.kb is not None

    @classmethod
    def setup(cls, weak: WeakConfig, voted: Any) -> Setup:
        """Once per actor when it opens the KG (answer-F1 paths on ``weak.kb``), else per batch (:data:`Setup`)."""
        return "per_actor" if cls._opens_kg(weak, voted) else "per_batch"

    def __call__(self, batch: "pa.Table") -> "pa.Table":
        import pyarrow as pa

        samples = batch_samples(batch)
        if self.voted is not None:
            rows = [path_row(s, self.voted.get(s.id, ())) for s in samples]
        else:
            rows = [weak_row(s, self.weak, self.kb) for s in samples]
        return pa.Table.from_pylist([r.to_row() for r in rows], schema=LABELS_SCHEMA)

