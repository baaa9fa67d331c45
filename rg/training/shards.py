"""Per-worker data of a Ray Train run: a worker's pickled rows, equal step counts and equal work under DDP."""

from __future__ import annotations

import pickle
from typing import Any

import torch


def shard_rows(name: str, column: str) -> list[Any]:
    """Unpickle ``column`` of every row of this worker's shard of dataset ``name``."""
    import ray.train

    shard = ray.train.get_dataset_shard(name)
    return [pickle.loads(row[column]) for row in shard.iter_rows()]


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
