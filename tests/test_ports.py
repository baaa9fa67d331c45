"""Free loopback ports: distinct, bindable, and never one of Ray's or Serve's fixed defaults."""

from __future__ import annotations

import socket

import pytest

from rg.run import ports
from rg.run.ports import RAY_FIXED_PORTS, free_port, free_ports


def test_the_fixed_ports_are_rays_own_defaults() -> None:
    from ray._private import ray_constants
    from ray.serve._private import constants as serve_constants

    expected = {ray_constants.DEFAULT_PORT, ray_constants.DEFAULT_DASHBOARD_PORT,
                ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT, serve_constants.DEFAULT_HTTP_PORT,
                serve_constants.DEFAULT_GRPC_PORT, 10001}
    assert expected == set(RAY_FIXED_PORTS)


def test_free_ports_are_distinct_and_bindable() -> None:
    found = free_ports(12)
    assert len(set(found)) == 12
    assert not set(found) & RAY_FIXED_PORTS
    for port in found:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


class _ScriptedSocket:
    """A socket whose ``bind(0)`` gets the next port of a script (the kernel's choice, made up)."""

    def __init__(self, script: list[int], closed: list[int]) -> None:
        self._script, self._closed, self.port = script, closed, None

    def bind(self, address: tuple[str, int]) -> None:
        self.port = self._script.pop(0)

    def getsockname(self) -> tuple[str, int]:
        return "127.0.0.1", self.port

    def close(self) -> None:
        self._closed.append(self.port)


def test_rays_dashboard_agent_port_is_skipped_and_every_draw_released(monkeypatch: pytest.MonkeyPatch) -> None:
    script, closed = [52365, 40001, 8265, 40002], []
    monkeypatch.setattr(ports.socket, "socket", lambda: _ScriptedSocket(script, closed))
    assert free_ports(2) == [40001, 40002]
    assert sorted(closed) == [8265, 40001, 40002, 52365]


def test_a_host_with_only_fixed_ports_left_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    script = [52365] * 100
    monkeypatch.setattr(ports.socket, "socket", lambda: _ScriptedSocket(script, []))
    with pytest.raises(OSError, match="found 0 of 1 free ports on 127.0.0.1"):
        free_port()
    with pytest.raises(ValueError, match="n >= 1"):
        free_ports(0)
