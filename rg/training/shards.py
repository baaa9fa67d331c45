"""Per-worker data of a Ray Train run: a worker's pickled rows, and equal step counts under DDP."""

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
