"""Per-question subgraphs: cut from the in-memory KG (``cut``) or through a KG store (``store``), written as
resumable, verified parquet shards (``shards``). The build job (:mod:`rg.jobs.build_subgraphs`) runs the
shards on Ray Data; tests and benchmarks call the cuts directly."""

from rg.subgraphs.cut import Built, SubgraphConfig, Unbuildable, build_sample
from rg.subgraphs.shards import (
    MAX_EXAMPLES,
    STORE_FAILURES_IN_A_ROW,
    ShardStats,
    ShardTask,
    buildable_samples,
    finished_shard,
    plan_shards,
    run_shard,
    shard_paths,
)
from rg.subgraphs.store import build_store_sample, store_ids

__all__ = ["MAX_EXAMPLES", "STORE_FAILURES_IN_A_ROW", "Built", "ShardStats", "ShardTask", "SubgraphConfig",
           "Unbuildable", "build_sample", "build_store_sample", "buildable_samples", "finished_shard",
           "plan_shards", "run_shard", "shard_paths", "store_ids"]
