"""Tests for the Hugging Face hub loader: offline flags and unreachable endpoints fail fast."""

from __future__ import annotations

import socket
import time

import pytest

from rg.data.hf import HubUnavailableError, check_hub_reachable, load_hf_rog, probe_endpoint
from rg.run.ports import free_port


@pytest.fixture
def hub_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for variable in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "http_proxy", "HTTP_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    return monkeypatch


@pytest.mark.parametrize("variable", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"])
def test_load_hf_rog_offline_fails_fast_with_advice(hub_env, variable: str) -> None:
    hub_env.setenv(variable, "1")
    start = time.monotonic()
    with pytest.raises((ImportError, HubUnavailableError), match="read_rog"):
        load_hf_rog("rmanluo/RoG-webqsp", "test")
    assert time.monotonic() - start < 30  # no network wait (minutes); generous for loaded machines
    with pytest.raises(HubUnavailableError, match=variable):
        check_hub_reachable(endpoint="http://127.0.0.1:1")


def test_load_hf_rog_rejects_unknown_name() -> None:
    with pytest.raises(ValueError, match="RoG-cwq"):
        load_hf_rog("rmanluo/RoG-other", "test")  # type: ignore[arg-type]


def test_check_hub_reachable_uses_configured_endpoint(hub_env) -> None:
    constants = pytest.importorskip("huggingface_hub.constants")
    endpoint = f"http://127.0.0.1:{free_port()}"
    hub_env.setattr(constants, "ENDPOINT", endpoint)
    start = time.monotonic()
    with pytest.raises(HubUnavailableError, match=f"{endpoint}.*read_rog"):
        check_hub_reachable(timeout=1.0)
    assert time.monotonic() - start < 30  # bounded by the probe timeout, not a TCP default


def test_probe_endpoint_local_server(hub_env) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        assert probe_endpoint(f"http://127.0.0.1:{port}", timeout=1.0) is None
        assert check_hub_reachable(f"http://127.0.0.1:{port}", timeout=1.0).endswith(str(port))
    assert "cannot connect" in probe_endpoint(f"http://127.0.0.1:{free_port()}", 1.0)
    assert "not an http(s) URL" in probe_endpoint("ftp://example", 1.0)
