"""Equal work per DDP step: balanced batches (rg.training.balance) and balanced shards (rg.training.shards)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from rg.config import ConfigError, validate_config
from rg.retrievers.graphs import QuestionGraph
from rg.training import TrainConfig, make_batches
from rg.training.balance import balanced_groups, best_swap, swap_plan
from rg.training.shards import balance_shards
from rg.run.ports import free_port


def test_best_swap_picks_the_pair_that_evens_the_totals() -> None:
    # totals 14 and 3 (gap 11): swapping 10 for 2 (or 4 for 1) leaves a gap of 5; the first found is kept
    assert best_swap([10, 4], [1, 2], 11) == (0, 1, 5)
    assert best_swap([5], [1], 4) is None  # moving 4 would only flip the gap
    assert best_swap([3], [3], 1) is None  # equal items change nothing


def test_balanced_groups_reach_equal_totals_and_keep_counts() -> None:
    sizes = [9, 1, 1, 1, 5, 5, 4, 4]
    for seed in range(10):
        groups = balanced_groups(sizes, 2, torch.Generator().manual_seed(seed))
        assert sorted(i for g in groups for i in g) == list(range(8))
        assert [len(g) for g in groups] == [4, 4]
        assert [sum(sizes[i] for i in g) for g in groups] == [15, 15]
    sizes = [9, 1, 1, 1, 5, 5, 4, 4, 7, 3, 2, 2]  # 44 over 3 groups: 15, 15, 14 is the best split
    for seed in range(10):
        groups = balanced_groups(sizes, 3, torch.Generator().manual_seed(seed))
        assert sorted(sum(sizes[i] for i in g) for g in groups) == [14, 15, 15]


def test_balanced_groups_stay_random_and_even_out_skewed_sizes() -> None:
    noise = torch.randn(320, generator=torch.Generator().manual_seed(0))
    sizes = [int(s) for s in (5.0 + 1.2 * noise).exp().round().clamp(1, 2000)]  # skewed, capped
    # below a batch's mean total (as MetaQA's 5,000-triple cap is below 16 questions' 8,800)
    first = balanced_groups(sizes, 20, torch.Generator().manual_seed(1))
    again = balanced_groups(sizes, 20, torch.Generator().manual_seed(1))
    other = balanced_groups(sizes, 20, torch.Generator().manual_seed(2))
    assert first == again and {frozenset(g) for g in first} != {frozenset(g) for g in other}
    totals = [sum(sizes[i] for i in g) for g in first]
    shuffled = [sum(sizes[i] for i in range(j, 320, 20)) for j in range(20)]  # dealt without swaps
    mean = sum(sizes) / 20
    assert max(totals) / mean < 1.01 and max(shuffled) / mean > 1.5


def test_balanced_groups_reject_impossible_splits() -> None:
    with pytest.raises(ValueError, match="cannot split 2 items into 3 groups"):
        balanced_groups([1, 2], 3, torch.Generator())


def test_swap_plan_moves_each_item_at_most_once() -> None:
    # totals 17 and 6: swapping the 6 for the 1 leaves 12 against 11, and nothing narrows that further
    assert swap_plan([[10, 6, 1], [1, 2, 3]]) == [(0, 1, 1, 0)]
    assert swap_plan([[4, 4], [4, 4]]) == []
    assert swap_plan([[1, 2, 3]]) == []
    plan = swap_plan([[50, 40, 30, 1, 1, 1], [2, 2, 2, 2, 2, 2], [20, 20, 1, 1, 1, 1]])
    moved = [(w, i) for a, i, b, j in plan for w, i in ((a, i), (b, j))]
    assert len(moved) == len(set(moved)) and plan


def _sized(qid: str, triples: int) -> QuestionGraph:
    ids = torch.arange(triples)
    return QuestionGraph(qid, 0, torch.zeros(triples + 1, dtype=torch.long), torch.zeros(triples + 1, dtype=torch.bool),
                         ids, torch.zeros(triples, dtype=torch.long), ids + 1)


def test_make_batches_balanced_splits_triples_evenly() -> None:
    sizes = [90, 10, 10, 10, 50, 50, 40, 40]
    graphs = [_sized(f"q{i}", n) for i, n in enumerate(sizes)]
    batches = make_batches(graphs, 4, torch.Generator().manual_seed(3), "balanced")
    assert [int(b.num_triples) for b in batches] == [150, 150]
    assert sorted(q for b in batches for q in b.ids) == sorted(f"q{i}" for i in range(8))
    assert len(make_batches(graphs, 3, torch.Generator(), "balanced")) == 3  # ceil(8 / 3), as with shuffling
    assert make_batches([], 3, torch.Generator(), "balanced") == []
    with pytest.raises(ValueError, match="batching must be"):
        make_batches(graphs, 3, torch.Generator(), "sorted")  # type: ignore[arg-type]


def test_the_old_batch_by_size_key_names_its_replacement() -> None:
    with pytest.raises(ConfigError, match="batching: by_size"):
        validate_config({"batch_by_size": True}, TrainConfig, "train.yaml")
    assert TrainConfig(batching="balanced").batching == "balanced"


def _balance_worker(rank: int, port: int, shards: list[list[int]], out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=len(shards))
    try:
        items = [f"w{rank}-{i}:{size}" for i, size in enumerate(shards[rank])]
        balanced = balance_shards(items, shards[rank])
        Path(out, f"{rank}.json").write_text(json.dumps(balanced))
    finally:
        dist.destroy_process_group()


def test_balance_shards_swaps_items_between_two_processes(tmp_path: Path) -> None:
    shards = [[50, 40, 3, 2, 1], [5, 5, 4, 4, 4]]  # totals 96 and 22
    mp.spawn(_balance_worker, args=(free_port(), shards, str(tmp_path)), nprocs=2)
    after = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in range(2)]
    before = [f"w{r}-{i}:{s}" for r in range(2) for i, s in enumerate(shards[r])]
    assert sorted(after[0] + after[1]) == sorted(before)  # nothing lost or duplicated
    assert [len(a) for a in after] == [5, 5]
    totals = [sum(int(item.split(":")[1]) for item in a) for a in after]
    expected = [list(s) for s in shards]
    for heavy, i, light, j in swap_plan(shards):  # the same plan, applied by hand
        expected[heavy][i], expected[light][j] = expected[light][j], expected[heavy][i]
    assert totals == [sum(e) for e in expected] and abs(totals[0] - totals[1]) < 96 - 22


def test_balance_shards_outside_a_process_group_is_a_no_op() -> None:
    assert balance_shards(["a", "b"], [1, 2]) == ["a", "b"]
    with pytest.raises(ValueError, match="one size per item"):
        balance_shards(["a"], [1, 2])
