"""LLMConfig: defaults, validation messages that name the key and the fix, API key resolution."""

from __future__ import annotations

import pytest

from rg.config import ConfigError, validate_config
from rg.llm.config import LOOPBACK_PLACEHOLDER_KEY, LLMConfig, MissingAPIKeyError

BASE = {"base_url": "http://127.0.0.1:8000/v1", "model": "tiny"}


def test_defaults_and_trailing_slash():
    cfg = validate_config({**BASE, "base_url": "http://127.0.0.1:8000/v1/"}, LLMConfig)
    assert cfg.base_url == "http://127.0.0.1:8000/v1"
    assert (cfg.api_key_env, cfg.timeout_s, cfg.max_retries, cfg.max_concurrency) == ("OPENAI_API_KEY", 60, 3, 8)
    assert (cfg.temperature, cfg.max_tokens, cfg.side) == (0.0, 512, "hand")


@pytest.mark.parametrize(
    ("override", "pattern"),
    [
        ({"base_url": "127.0.0.1:8000"}, r"base_url: .*http\(s\) URL.*Fix: set `base_url`"),
        ({"api_key_env": "sk-abc123"}, r"api_key_env: .*name\* of an environment variable"),
        ({"timeout_s": 0}, r"timeout_s: .*greater than 0.*got 0"),
        ({"max_retries": 11}, r"max_retries: .*less than or equal to 10"),
        ({"max_concurrency": 0}, r"max_concurrency: .*greater than or equal to 1"),
        ({"side": "cloud"}, r"side: .*'hand' or 'brain'"),
        ({"max_tokens": 0}, r"max_tokens: .*greater than 0"),
        ({"backoff_s": 5, "max_backoff_s": 1}, r"max_backoff_s \(1.0\) is smaller than backoff_s \(5.0\)"),
        ({"retries": 2}, r"retries: unknown key.*did you mean 'max_retries'"),
    ],
)
def test_bad_values_name_the_key(override, pattern):
    with pytest.raises(ConfigError, match=pattern):
        validate_config({**BASE, **override}, LLMConfig, source="llm.yaml")


def test_missing_required_keys():
    with pytest.raises(ConfigError, match=r"(?s)base_url: required key is missing.*model: required key is missing"):
        validate_config({}, LLMConfig)


def test_secret_key_never_prints():
    cfg = LLMConfig(**BASE, api_key="sk-very-secret")
    assert "sk-very-secret" not in repr(cfg)
    assert "sk-very-secret" not in cfg.model_dump_json()
    assert cfg.resolve_api_key({}) == "sk-very-secret"


def test_key_from_named_env_var():
    cfg = LLMConfig(base_url="https://llm.example.org/v1", model="m", api_key_env="RG_TEST_KEY")
    assert cfg.resolve_api_key({"RG_TEST_KEY": "sk-env"}) == "sk-env"


@pytest.mark.parametrize("url", ["http://localhost:9/v1", "http://127.0.0.5:9/v1", "http://[::1]:9/v1"])
def test_loopback_gets_placeholder(url):
    cfg = LLMConfig(base_url=url, model="m")
    assert cfg.is_loopback
    assert cfg.resolve_api_key({}) == LOOPBACK_PLACEHOLDER_KEY


def test_remote_without_key_names_the_env_var():
    cfg = LLMConfig(base_url="https://llm.example.org/v1", model="m", api_key_env="RG_TEST_KEY")
    assert not cfg.is_loopback
    with pytest.raises(MissingAPIKeyError, match=r"RG_TEST_KEY is unset.*export RG_TEST_KEY=<key>"):
        cfg.resolve_api_key({"OPENAI_API_KEY": "other"})
