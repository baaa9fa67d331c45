"""Equal work per step under DDP: groups of questions with equal triple totals.

A DDP step lasts as long as its slowest worker, and a retriever's step costs about as much as
its batch has triples. MetaQA's subgraph sizes are skewed (2-hop: mean 552 triples, sd 1,310,
capped at 5,000), so shuffled batches of 16 questions leave the slower of two workers with
about 1.34x the mean work at each step. Two steps remove most of that:

* :func:`swap_plan` (used by :func:`rg.training.shards.balance_shards`) swaps a few questions
  between the workers' shards once, so that every shard holds about the same number of triples.
* :func:`balanced_groups` cuts one shard into batches of about equal triple totals each epoch:
  the shuffled questions are dealt out like cards, then single questions are swapped between
  the heaviest and a lighter batch while that narrows the gap. The batches stay random draws
  apart from those swaps.

Simulated on MetaQA sizes (two workers, batches of 16, 20 random shard splits), the slower
worker's triples per step over the mean: 313 2-hop questions, 1.34 with shuffled batches, 1.10
with sorted batches (``batching: by_size``), 1.09 with balanced batches alone and 1.02 with both
steps; 2,100 questions of all hops, 1.19 shuffled and 1.006 with both. Both functions are pure
and deterministic for a given generator.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import torch


def best_swap(heavy: Sequence[int], light: Sequence[int], gap: int) -> tuple[int, int, int] | None:
    """The swap of ``heavy[i]`` and ``light[j]`` that leaves the two totals closest, if it narrows ``gap``.

    Args:
        heavy, light: Item sizes of the heavier and the lighter group.
        gap: ``sum(heavy) - sum(light)`` (> 0).

    Returns:
        ``(i, j, new_gap)`` with ``new_gap = |gap - 2 (heavy[i] - light[j])| < gap``, or None.
    """
    order = sorted(range(len(light)), key=light.__getitem__)
    values = [light[j] for j in order]
    best: tuple[int, int, int] | None = None
    for i, x in enumerate(heavy):
        at = bisect.bisect_left(values, x - gap / 2)  # moving x - y = gap / 2 would even them out
        for k in (at - 1, at):
            if 0 <= k < len(values) and values[k] < x:
                left = abs(gap - 2 * (x - values[k]))
                if left < gap and (best is None or left < best[2]):
                    best = (i, order[k], left)
    return best


def balanced_groups(sizes: Sequence[int], groups: int, generator: torch.Generator) -> list[list[int]]:
    """Split item indices ``0 .. len(sizes) - 1`` into ``groups`` random groups of about equal size sums.

    The shuffled items are dealt round-robin (group sizes differ by at most one item), then the
    heaviest group swaps one item with the lightest group it can even out with, until no swap
    narrows a gap (at most ``8 * groups`` swaps). Swaps keep every group's item count.

    Returns:
        The groups, each a list of indices, in random order.

    Raises:
        ValueError: if ``groups`` is not in ``[1, len(sizes)]``.
    """
    if not 1 <= groups <= max(1, len(sizes)):
        raise ValueError(f"cannot split {len(sizes)} items into {groups} groups")
    order = torch.randperm(len(sizes), generator=generator).tolist()
    members = [order[g::groups] for g in range(groups)]
    totals = [sum(sizes[i] for i in group) for group in members]
    for _ in range(8 * groups):
        heavy = max(range(groups), key=totals.__getitem__)
        swapped = False
        for light in sorted(range(groups), key=totals.__getitem__):  # the lightest first
            gap = totals[heavy] - totals[light]
            if gap <= 0:
                break
            swap = best_swap([sizes[i] for i in members[heavy]], [sizes[i] for i in members[light]], gap)
            if swap is not None:
                i, j, _ = swap
                a, b = members[heavy][i], members[light][j]
                members[heavy][i], members[light][j] = b, a
                totals[heavy] += sizes[b] - sizes[a]
                totals[light] += sizes[a] - sizes[b]
                swapped = True
                break
        if not swapped:  # the heaviest group cannot even out with any lighter one
            break
    return [members[g] for g in torch.randperm(groups, generator=generator).tolist()]


def swap_plan(sizes: Sequence[Sequence[int]], max_swaps: int | None = None) -> list[tuple[int, int, int, int]]:
    """One-for-one swaps between workers' shards that bring their size totals together.

    Greedy: the heaviest and the lightest shard swap the pair of items that leaves their totals
    closest, while that narrows their gap; an item moves at most once.

    Args:
        sizes: ``sizes[w][i]``: the size of item ``i`` of worker ``w``'s shard.
        max_swaps: Bound on the swaps (default: a quarter of all items).

    Returns:
        ``(heavy_worker, heavy_index, light_worker, light_index)`` for each swap, in order.
    """
    workers = len(sizes)
    free = [dict(enumerate(shard)) for shard in sizes]  # items not moved yet
    totals = [sum(shard) for shard in sizes]
    limit = sum(len(shard) for shard in sizes) // 4 if max_swaps is None else max_swaps
    plan: list[tuple[int, int, int, int]] = []
    while len(plan) < limit and workers > 1:
        heavy = max(range(workers), key=totals.__getitem__)
        light = min(range(workers), key=totals.__getitem__)
        gap = totals[heavy] - totals[light]
        heavy_ids, light_ids = list(free[heavy]), list(free[light])
        swap = best_swap([free[heavy][i] for i in heavy_ids], [free[light][j] for j in light_ids], gap) if gap else None
        if swap is None:
            break
        i, j = heavy_ids[swap[0]], light_ids[swap[1]]
        moved = free[heavy].pop(i) - free[light].pop(j)
        totals[heavy] -= moved
        totals[light] += moved
        plan.append((heavy, i, light, j))
    return plan
