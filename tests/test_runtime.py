"""init_ray's process settings: Ray Train's report poll interval and preemption watcher, Ray Data's parquet footer
actors."""

from __future__ import annotations

import os

import pytest
import ray

from rg.config import ConfigError, validate_config
from rg.runtime import FOOTER_ACTORS_ENV, PREEMPTION_WATCHER_ENV, TRAIN_POLL_ENV, RayConfig, init_ray


@pytest.fixture
def ray_running(monkeypatch):
    """init_ray as if Ray were already up: only its process settings run."""
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.delenv(TRAIN_POLL_ENV, raising=False)
    monkeypatch.delenv(FOOTER_ACTORS_ENV, raising=False)
    monkeypatch.delenv(PREEMPTION_WATCHER_ENV, raising=False)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)


def test_the_train_poll_interval_is_set_from_the_config(ray_running):
    init_ray(RayConfig(train_poll_s=0.5))
    assert os.environ[TRAIN_POLL_ENV] == "0.5"


def test_a_poll_interval_set_by_the_user_wins(ray_running, monkeypatch):
    monkeypatch.setenv(TRAIN_POLL_ENV, "3")
    init_ray(RayConfig())
    assert os.environ[TRAIN_POLL_ENV] == "3"


def test_a_non_positive_poll_interval_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="train_poll_s"):
        validate_config({"train_poll_s": 0}, RayConfig)


def test_parquet_reads_start_the_configured_number_of_footer_actors(ray_running):
    from ray.data._internal.datasource_v2.formats.parquet.footer_file_indexer import FooterFileIndexer

    init_ray(RayConfig())
    assert FooterFileIndexer(ignore_missing_paths=False)._num_actors == 1  # Ray's own default is 32
    os.environ.pop(FOOTER_ACTORS_ENV)
    init_ray(RayConfig(parquet_footer_actors=4))
    assert FooterFileIndexer(ignore_missing_paths=False)._num_actors == 4


def test_a_footer_actor_count_set_by_the_user_wins(ray_running, monkeypatch):
    monkeypatch.setenv(FOOTER_ACTORS_ENV, "8")
    init_ray(RayConfig(parquet_footer_actors=2))
    assert os.environ[FOOTER_ACTORS_ENV] == "8"


def test_the_preemption_watcher_is_off_on_a_local_ray_and_ray_decides_on_a_cluster(ray_running, monkeypatch):
    from ray.train.v2._internal import constants

    assert constants.ENABLE_PREEMPTION_WATCHER_ENV_VAR == PREEMPTION_WATCHER_ENV  # the variable Ray Train reads
    init_ray(RayConfig())
    assert os.environ[PREEMPTION_WATCHER_ENV] == "0"
    os.environ.pop(PREEMPTION_WATCHER_ENV)
    init_ray(RayConfig(address="ray://head:10001"))
    assert PREEMPTION_WATCHER_ENV not in os.environ  # Ray's default on a cluster
    init_ray(RayConfig(address="ray://head:10001", train_preemption_watcher=False))
    assert os.environ[PREEMPTION_WATCHER_ENV] == "0"
    os.environ.pop(PREEMPTION_WATCHER_ENV)
    monkeypatch.setenv(PREEMPTION_WATCHER_ENV, "1")  # set by the user: kept
    init_ray(RayConfig())
    assert os.environ[PREEMPTION_WATCHER_ENV] == "1"
