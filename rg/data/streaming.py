"""RoG inputs streamed with Ray Data: files verified first, only the wanted ids, nothing on the driver.

Jobs that process many questions (refine, training, QA evaluation) read their inputs with
``ray.data.read_parquet`` (or ``read_json``) and an id filter instead of loading samples on the
driver and handing them to ``from_items``: the subgraphs (``graph`` column), which dominate the
size of a 3-hop input, go straight from the files to the workers. Parquet files are checked first
(:mod:`rg.run.integrity`), so a damaged or empty input fails with one line naming it.

The training jobs (:mod:`rg.training.graph_stream`, :mod:`rg.training.planner_stream`,
:mod:`rg.jobs.train_reader`) share three helpers: :func:`read_side` maps the rows of one split
side through an actor pool in input order, :func:`in_order` puts rows that arrive out of order
back in question order (and refuses a duplicate or a lost id), and :func:`batch_samples` turns a
batch of RoG rows back into :class:`Sample` records.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from rg.run.integrity import EmptyInputError, require_parquet
from rg.run.paths import resolve_data_path
from rg.data.rog import iter_rog_rows, rog_files, sample_from_row
from rg.data.sample import Sample

if TYPE_CHECKING:
    import pyarrow as pa
    import ray
    import ray.data

READ_CPUS = 0.25
"""CPUs reserved per read task; an actor pool must leave at least this much free."""

INPUT_CPUS = 1.0
"""CPUs an actor pool leaves free for the tasks that feed it (file listing, reading, the id filter)."""

BATCH_ROWS = 32
"""Questions per Ray Data batch of :func:`read_side` (a 3-hop MetaQA row holds up to 5,000 triples)."""

MAX_ACTORS = 8
"""Upper bound of the actor pool (or of the concurrent tasks) of :func:`read_side` and :func:`map_in_order`."""

AUTO_DRIVER_MB = 8.0
"""``examples_on: auto`` builds a training job's examples on the driver when its input files are local and
total at most this many MB (the demo's 200 questions take 0.6 MB); larger or remote inputs stream through
Ray Data. Whole samples of 8 MB of parquet take a few hundred MB of driver memory."""

ExamplesOn = Literal["auto", "ray_data", "driver"]
"""Where a training job builds its examples (a config setting; :func:`examples_on` resolves ``auto``)."""

Setup = Literal["per_actor", "per_batch"]
"""Where a map's callable class is built: once per actor of a pool, or in a task for every batch.

``per_actor`` suits a class that loads a model. ``per_batch`` suits a cheap one (labels, a name
index): the tasks run in Ray's shared worker processes, which outlive the pass and have the
modules imported already, while every actor pool starts new processes that import torch and rg
again (6-8 s per pass on a 2-core node, and a training job makes four such passes)."""


def read_input(source: str, limit: int | None, ids: frozenset[str] | None = None) -> "ray.data.Dataset":
    """One input as a streaming Ray Dataset (parquet files or shards, or jsonl/jsonl.gz).

    Parquet files are checked first (footer readable, rows present); a damaged or empty input
    raises a one-line error naming the file.

    Args:
        source: A RoG file or folder.
        limit: Keep the first N questions in input order (after the id filter), so that the
            same command always covers the same questions.
        ids: Keep only these question ids.
    """
    import ray
    from ray.data.expressions import col

    files = input_files(source)
    if limit is not None:
        ids = first_ids(files, limit, ids)
    if all(f.endswith(".parquet") for f in files):
        ds = ray.data.read_parquet(files, num_cpus=READ_CPUS)
    else:
        ds = ray.data.read_json(files, lines=True, num_cpus=READ_CPUS)
    if ids is not None:
        ds = ds.filter(expr=col("id").is_in(sorted(ids)))
    return ds


def input_files(source: str) -> list[str]:
    """The files of one input, each parquet file verified; raises a one-line error for a bad input."""
    path = resolve_data_path(source)
    if not path.exists():
        raise FileNotFoundError(f"input {path} (from `input: {source}`) does not exist. Fix: set `input` to the "
                                "build job's output folder or a RoG file")
    files = [str(f) for f in rog_files(path)]
    fix = "rebuild it (rerun jobs.build_subgraphs with the same config; it rebuilds damaged shards)"
    rows = sum(require_parquet(f, fix) for f in files if f.endswith(".parquet"))
    if rows == 0 and all(f.endswith(".parquet") for f in files):
        raise EmptyInputError(f"input {path} (from `input: {source}`) holds no rows. Fix: point `input` at a build "
                         "with questions (check the build report's bad rows)")
    return files


def examples_on(setting: ExamplesOn, inputs: str | Sequence[str]) -> Literal["ray_data", "driver"]:
    """``setting``, with ``auto`` resolved: ``driver`` for local inputs totalling at most :data:`AUTO_DRIVER_MB`
    (a Ray Data pass starts actors that import torch and rg: seconds a small input does not repay), else
    ``ray_data``. Both paths build the same examples in the same order; with several Ray Train workers their
    blocks differ, so the workers' shards and the trained model can too (docs/integrity.md)."""
    if setting != "auto":
        return setting
    sources = [inputs] if isinstance(inputs, str) else list(inputs)
    if any("://" in source for source in sources):
        return "ray_data"
    size = sum(os.path.getsize(f) for source in sources for f in input_files(source))
    return "driver" if size <= AUTO_DRIVER_MB * 2**20 else "ray_data"


def count_input(source: str, limit: int | None, ids: frozenset[str] | None = None) -> int | None:
    """How many questions :func:`read_input` gives, from the parquet files' ``id`` columns on the driver.

    No Ray job runs (``Dataset.count`` on a filtered read reads every file in tasks). Returns None
    for a jsonl input, which only a full parse could count.
    """
    found = input_ids(source, limit, ids)
    return None if found is None else len(found)


def input_ids(source: str, limit: int | None, ids: frozenset[str] | None = None) -> list[str] | None:
    """The ids of the questions :func:`read_input` gives (a repeated id as often as it occurs), read from the
    parquet files' ``id`` columns on the driver; None for a jsonl input."""
    files = input_files(source)
    if not all(f.endswith(".parquet") for f in files):
        return None
    if limit is not None:
        return sorted(first_ids(files, limit, ids))
    return [i for f in files for i in _parquet_ids(f) if ids is None or i in ids]


def _parquet_ids(file: str) -> list[str]:
    import pyarrow.parquet as pq

    return pq.read_table(file, columns=["id"]).column("id").to_pylist()


def first_ids(files: list[str], limit: int, ids: frozenset[str] | None) -> frozenset[str]:
    """The ids of the first ``limit`` questions of ``files`` in order (among ``ids`` when given)."""
    out: list[str] = []
    for file in files:
        if file.endswith(".parquet"):
            column = _parquet_ids(file)
        else:
            column = [item.id for _, item in iter_rog_rows(file) if isinstance(item, Sample)]
        out += [i for i in column if ids is None or i in ids]
        if len(out) >= limit:
            break
    return frozenset(out[:limit])


def read_side(
    sources: Sequence[str], ids: Collection[str], udf: type, kwargs: Mapping[str, Any], batch_rows: int = BATCH_ROWS,
    setup: Setup = "per_actor",
) -> "ray.data.Dataset":
    """The rows of the questions ``ids`` from every input, mapped by ``udf``, in input order.

    Args:
        sources: RoG files or folders, read in this order.
        ids: The questions to keep (e.g. one split side).
        udf: A Ray Data callable class taking a ``pyarrow.Table`` batch of RoG rows.
        kwargs: Its constructor's keyword arguments.
        batch_rows: Rows per batch.
        setup: Build ``udf`` once per actor or for every batch (:data:`Setup`).
    """
    ids = frozenset(ids)
    parts = [read_input(source, None, ids) for source in sources]
    ds = parts[0].union(*parts[1:]) if len(parts) > 1 else parts[0]
    return map_in_order(ds, len(ids), udf, kwargs, batch_rows, setup)


def map_in_order(
    ds: "ray.data.Dataset", rows: int, udf: type, kwargs: Mapping[str, Any], batch_rows: int = BATCH_ROWS,
    setup: Setup = "per_actor",
) -> "ray.data.Dataset":
    """``ds`` (about ``rows`` rows) mapped in ``pyarrow`` batches by ``udf(**kwargs)``, blocks kept in order.

    ``setup`` says whether an actor pool builds ``udf`` once per actor or tasks build it per batch
    (:data:`Setup`). The pool (or the number of concurrent tasks) grows only into CPUs that are
    free, and leaves :data:`INPUT_CPUS` to the tasks that feed it: if the map held every CPU, those
    tasks could never run.
    """
    import ray

    cpus = ray.cluster_resources().get("CPU", 1.0)
    size = max(1, min(MAX_ACTORS, math.ceil(max(rows, 1) / batch_rows), int(cpus)))
    shared = {"batch_size": batch_rows, "batch_format": "pyarrow", "num_cpus": max(0.01, min(1.0, (cpus - INPUT_CPUS) / size))}
    if setup == "per_batch":
        ds = ds.map_batches(_built_per_batch, fn_kwargs={"udf": udf, "udf_kwargs": dict(kwargs)},
                            compute=ray.data.TaskPoolStrategy(size=size), **shared)
    else:
        ds = ds.map_batches(udf, fn_constructor_kwargs=dict(kwargs),
                            compute=ray.data.ActorPoolStrategy(min_size=1, max_size=size), **shared)
    ds.context.execution_options.preserve_order = True  # blocks in input order: same shards for the same input
    return ds


def _built_per_batch(batch: "pa.Table", udf: type, udf_kwargs: Mapping[str, Any]) -> "pa.Table":
    """The task function of a ``per_batch`` map: build ``udf`` and apply it to one batch."""
    return udf(**udf_kwargs)(batch)


def in_order(rows: Iterable[Mapping[str, Any]], order: Sequence[str]) -> Iterator[Mapping[str, Any]]:
    """``rows`` in the order of their ``id`` in ``order``, holding back only rows that arrive early.

    Raises:
        ValueError: if an id of ``order`` never arrives, or one arrives twice.
    """
    pending: dict[str, Mapping[str, Any]] = {}
    seen: set[str] = set()
    position = 0
    for row in rows:
        if row["id"] in seen:
            raise ValueError(f"sample id {row['id']!r} occurs twice; ids must be unique within the tables")
        seen.add(row["id"])
        pending[row["id"]] = row
        while position < len(order) and order[position] in pending:
            yield pending.pop(order[position])
            position += 1
    if position < len(order):
        raise ValueError(f"question {order[position]!r} was not read back from the inputs; were they changed during the job?")


def batch_samples(batch: "pa.Table") -> list[Sample]:
    """The :class:`Sample` of every RoG row of a Ray Data batch.

    Raises:
        ValueError: for a row that is not a valid RoG row (naming why).
    """
    samples = []
    for row in batch.to_pylist():
        item = sample_from_row(row, "input", -1)
        if not isinstance(item, Sample):
            raise ValueError(f"bad input row: {item.detail}; rebuild or fix the input")
        samples.append(item)
    return samples
