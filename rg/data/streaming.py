"""RoG inputs streamed with Ray Data: files verified first, only the wanted ids, nothing on the driver.

Jobs that process many questions (refine, QA evaluation) read their inputs with
``ray.data.read_parquet`` (or ``read_json``) and an id filter instead of loading samples on the
driver and handing them to ``from_items``: the subgraphs (``graph`` column), which dominate the
size of a 3-hop input, go straight from the files to the workers. Parquet files are checked first
(:mod:`rg.data.integrity`), so a damaged or empty input fails with one line naming it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rg.data.integrity import EmptyInputError, require_parquet
from rg.data.paths import resolve_data_path
from rg.data.rog import iter_rog_rows, rog_files
from rg.data.sample import Sample

if TYPE_CHECKING:
    import ray

READ_CPUS = 0.25
"""CPUs reserved per read task; an actor pool must leave at least this much free."""

INPUT_CPUS = 1.0
"""CPUs an actor pool leaves free for the tasks that feed it (file listing, reading, the id filter)."""


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


def first_ids(files: list[str], limit: int, ids: frozenset[str] | None) -> frozenset[str]:
    """The ids of the first ``limit`` questions of ``files`` in order (among ``ids`` when given)."""
    import pyarrow.parquet as pq

    out: list[str] = []
    for file in files:
        if file.endswith(".parquet"):
            column = pq.read_table(file, columns=["id"]).column("id").to_pylist()
        else:
            column = [item.id for _, item in iter_rog_rows(file) if isinstance(item, Sample)]
        out += [i for i in column if ids is None or i in ids]
        if len(out) >= limit:
            break
    return frozenset(out[:limit])
