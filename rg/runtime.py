"""Starting or joining Ray from a job: one typed config, one function."""

from __future__ import annotations

import logging
import os
from typing import Literal

from pydantic import Field

from rg.config import Config


TRAIN_POLL_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"
"""Ray Train's controller reads its poll interval from this variable (the driver's value is passed on)."""

FOOTER_ACTORS_ENV = "RAY_DATA_PARQUET_FOOTER_NUM_ACTORS"
"""Ray Data's parquet reader reads this when the driver plans a read (``FooterFileIndexer``)."""

PREEMPTION_WATCHER_ENV = "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER"
"""Ray Train's controller reads this when it starts a run (the driver's value is passed on)."""


class RayConfig(Config):
    """Where the job's Ray runs.

    Under ``ray job submit`` (``RAY_ADDRESS`` set) the job joins that cluster and the local
    resource fields are ignored; otherwise a local Ray starts with ``num_cpus``.
    """

    address: str | None = Field(None, description="Cluster address; None joins $RAY_ADDRESS or starts locally.")
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a local Ray (None: all cores).")
    progress_bars: bool = Field(False, description="Show Ray Data's own operator progress bars.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("WARNING", description="Level of Ray's driver-side logging (INFO shows plans).")
    train_poll_s: float = Field(
        0.2, gt=0, le=60,
        description="How often Ray Train's controller collects the workers' reports "
        f"(${TRAIN_POLL_ENV}, Ray's default 2 s). A worker's report waits until the previous one is collected, so "
        "with Ray's default every epoch shorter than 2 s lasts 2 s. An explicitly set environment variable wins.",
    )
    parquet_footer_actors: int = Field(
        1, ge=1, le=64,
        description=f"Actors Ray Data starts at every parquet read to read the files' footers (${FOOTER_ACTORS_ENV}, "
        "Ray's default 32). rg's inputs are a few shards per job, and each of those actors is a new process: on a "
        "2-core node 32 of them cost 5-10 s per read while other work starts. Raise it for inputs of thousands of "
        "files. An explicitly set environment variable wins.",
    )
    train_preemption_watcher: bool | None = Field(
        None,
        description=f"Ray Train's preemption watcher (${PREEMPTION_WATCHER_ENV}): one more actor per training run, "
        "polling whether a node is being drained (spot instances). None: off on a local Ray, whose one node is never "
        "drained (the actor's start costs a run ~2 s on 2 cores), Ray's default (on) on a cluster. An explicitly set "
        "environment variable wins.",
    )


def init_ray(config: RayConfig) -> None:
    """Initialise Ray once for this process according to ``config``."""
    import ray

    os.environ.setdefault(TRAIN_POLL_ENV, str(config.train_poll_s))  # read when a trainer starts its controller
    os.environ.setdefault(FOOTER_ACTORS_ENV, str(config.parquet_footer_actors))  # read on the driver at each read
    address = config.address or os.environ.get("RAY_ADDRESS")
    watcher = config.train_preemption_watcher if config.train_preemption_watcher is not None else (
        None if address else False)
    if watcher is not None:
        os.environ.setdefault(PREEMPTION_WATCHER_ENV, "1" if watcher else "0")
    if ray.is_initialized():
        return
    if address:
        ray.init(address=address, log_to_driver=True, logging_level=config.log_level)
    else:
        ray.init(
            address="local",
            num_cpus=config.num_cpus,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=config.log_level,
        )
    logging.getLogger("ray.data").setLevel(config.log_level)
    ray.data.DataContext.get_current().enable_progress_bars = config.progress_bars
