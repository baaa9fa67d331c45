"""init_ray's process settings: Ray Train's report poll interval."""

from __future__ import annotations

import os

import pytest
import ray

from rg.config import ConfigError, validate_config
from rg.runtime import TRAIN_POLL_ENV, RayConfig, init_ray


@pytest.fixture
def ray_running(monkeypatch):
    """init_ray as if Ray were already up: only its process settings run."""
    monkeypatch.setattr(ray, "is_initialized", lambda: True)
    monkeypatch.delenv(TRAIN_POLL_ENV, raising=False)


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
