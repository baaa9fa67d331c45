"""Free loopback ports for servers a test or benchmark starts beside Ray.

A port the kernel hands out for ``bind(0)`` comes from the ephemeral range (32768–60999 on Linux),
which holds Ray's fixed dashboard-agent port 52365. Handing that port to a Ray node's GCS, or to a
scripted server started before a local Ray, makes Ray refuse to start ("trying to use a port number
52365 that is used by other components"). :func:`free_ports` never returns one of Ray's fixed
default ports.
"""

from __future__ import annotations

import socket

RAY_FIXED_PORTS = frozenset({
    6379,   # ray_constants.DEFAULT_PORT (GCS)
    8000,   # Serve's default HTTP port
    8265,   # ray_constants.DEFAULT_DASHBOARD_PORT
    9000,   # Serve's default gRPC port
    10001,  # the Ray Client server's default port
    52365,  # ray_constants.DEFAULT_DASHBOARD_AGENT_LISTEN_PORT
})
"""Ports a Ray node or Serve claims by default when its config does not name one."""

_MAX_DRAWS = 64


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct TCP ports on ``host`` that nothing listens on now and Ray does not claim by default.

    All draws stay bound until ``n`` are found, so the ports are distinct; they are released on return
    (a server started right after binds them).
    """
    if n < 1:
        raise ValueError(f"free_ports needs n >= 1, got {n}")
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        for _ in range(n + _MAX_DRAWS):
            sock = socket.socket()
            held.append(sock)
            sock.bind((host, 0))
            port = sock.getsockname()[1]
            if port not in RAY_FIXED_PORTS:
                ports.append(port)
                if len(ports) == n:
                    return ports
    finally:
        for sock in held:
            sock.close()
    raise OSError(f"found {len(ports)} of {n} free ports on {host} in {n + _MAX_DRAWS} draws")


def free_port(host: str = "127.0.0.1") -> int:
    """One port of :func:`free_ports`."""
    return free_ports(1, host)[0]
