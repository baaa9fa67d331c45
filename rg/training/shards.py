"""Per-worker data of a Ray Train run: a worker's pickled rows, equal step counts and equal work under DDP."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    import ray

HELD_ROWS_KEY = "held_rows"
"""Key of a worker loop's config under which :func:`rg.jobs.harness.fit_run` passes the :class:`HeldRows` sides."""


@dataclass(frozen=True)
class HeldRows:
    """Rows a job built on its driver (``examples_on: driver``), handed to the workers through Ray's object
    store instead of a Ray Data dataset.

    A Ray Data side costs every run a split coordinator actor and a streaming execution per worker (4.2–4.6 s
    of the demo's retriever and planner runs in a Ray timeline under AVX2 caps; less when earlier stages have
    warmed Ray Data) for rows that already sit in one process. A worker takes
    from held rows what ``get_dataset_shard`` gives it of a one-block dataset under Ray Train's
    ``streaming_split(n, equal=True)``: rank ``r`` of ``n`` the rows ``[r*q, (r+1)*q)``, ``q = len // n``
    (the last ``len % n`` rows go to no worker); a side that is not split, every row
    (tests/test_training_stream.py compares both in one Ray Train run).

    Attributes:
        ref: ObjectRef of the list of rows (dicts of pickled columns, as the dataset's).
    """

    ref: "ray.ObjectRef"

    @classmethod
    def put(cls, rows: Sequence[dict[str, Any]]) -> "HeldRows":
        import ray

        return cls(ray.put(list(rows)))

    def all_rows(self) -> list[dict[str, Any]]:
        import ray

        return ray.get(self.ref)


def side_rows(side: "ray.data.Dataset | HeldRows") -> Iterator[dict[str, Any]]:
    """The rows of a training side on the driver, either kind (a dataset's one block at a time)."""
    return iter(side.all_rows()) if isinstance(side, HeldRows) else side.iter_rows()


def worker_share(rows: Sequence[Any], rank: int, world: int) -> list[Any]:
    """Rank ``rank``'s rows of ``world`` equal contiguous shares (a one-block ``streaming_split(equal=True)``)."""
    share = len(rows) // world
    return list(rows[rank * share:(rank + 1) * share])


def shard_rows(config: Mapping[str, Any], name: str, column: str) -> list[Any]:
    """Unpickle ``column`` of every row of this worker's shard of side ``name``: of its :class:`HeldRows` in
    ``config`` (split across the workers as :class:`HeldRows` says) or of the Ray Data dataset ``name``."""
    import ray.train

    held = config.get(HELD_ROWS_KEY, {}).get(name)
    if held is None:
        shard = ray.train.get_dataset_shard(name)
        return [pickle.loads(row[column]) for row in shard.iter_rows()]
    rows, split = held["rows"].all_rows(), held["split"]
    if split:
        context = ray.train.get_context()
        rows = worker_share(rows, context.get_world_rank(), context.get_world_size())
    return [pickle.loads(row[column]) for row in rows]


def equal_steps(items: list[Any]) -> list[Any]:
    """Cut every worker's list to the shortest one, so all ranks take the same number of DDP steps."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return items
    count = torch.tensor([len(items)], dtype=torch.long)
    dist.all_reduce(count, op=dist.ReduceOp.MIN)
    return items[: int(count.item())]


def balance_shards(items: list[Any], sizes: list[int]) -> list[Any]:
    """Swap a few items between the DDP workers so that their shards' ``sizes`` sum to about the same.

    Every worker gathers all workers' sizes (integers), computes the same
    :func:`rg.training.balance.swap_plan`, and sends only the items it gives away; each keeps
    its item count. A no-op outside a process group.

    Args:
        items: This worker's shard.
        sizes: The cost of each item (a retriever's: its triple count).

    Returns:
        This worker's new shard: its own items, with the given-away ones replaced in place.
    """
    import torch.distributed as dist

    from rg.training.balance import swap_plan

    if len(items) != len(sizes):
        raise ValueError(f"balance_shards needs one size per item, got {len(items)} items and {len(sizes)} sizes")
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return items
    rank, world = dist.get_rank(), dist.get_world_size()
    all_sizes: list[list[int] | None] = [None] * world
    dist.all_gather_object(all_sizes, [int(s) for s in sizes])
    plan = swap_plan([list(s or []) for s in all_sizes])
    outgoing = {}
    for heavy, i, light, j in plan:
        if heavy == rank:
            outgoing[(rank, i)] = items[i]
        if light == rank:
            outgoing[(rank, j)] = items[j]
    gathered: list[dict | None] = [None] * world
    dist.all_gather_object(gathered, outgoing)
    sent = {key: item for part in gathered for key, item in (part or {}).items()}
    shard = list(items)
    for heavy, i, light, j in plan:
        if heavy == rank:
            shard[i] = sent[(light, j)]
        if light == rank:
            shard[j] = sent[(heavy, i)]
    return shard


WORKER_GROUP_KEY = "placement_group"
"""Report key naming the reporting worker's placement group (see :func:`with_worker_group`)."""


def with_worker_group(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` plus the hex id of the reporting worker's placement group, for ``ray.train.report``.

    A Tune sweep whose scheduler stops a trial kills the trial's driver, but on Ray 2.60 the Ray
    Train run's placement group can outlive it (ray-project/ray#54305; the cleaner that should
    remove it needs the state API, which is absent without a dashboard). The sweep's Tune
    callback (:class:`tune.train.ReleaseStoppedRuns`) removes the group named here once its
    trial has ended, so later trials can start.
    """
    import ray.util

    group = ray.util.get_current_placement_group()
    return {**row, WORKER_GROUP_KEY: group.id.hex()} if group is not None else dict(row)
