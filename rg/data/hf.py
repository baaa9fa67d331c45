"""Load the RoG datasets from the Hugging Face hub, failing fast when the hub is unusable.

Before anything is downloaded, ``load_hf_rog`` checks that ``datasets`` is installed, that no
offline flag is set and that the hub endpoint accepts a TCP connection (``check_hub_reachable``,
``probe_endpoint``), so that without a network it fails within seconds with advice to read local
files with ``rg.data.rog.read_rog`` instead.
"""

from __future__ import annotations

import importlib.util
import os
import queue
import socket
import threading
import time
import urllib.parse
import urllib.request
from typing import Any, Iterable, Iterator, Literal, Mapping, get_args

from rg.data.records import BadRow, BadRowError
from rg.data.rog import sample_from_row
from rg.data.sample import Sample

HFRoGName = Literal["rmanluo/RoG-webqsp", "rmanluo/RoG-cwq"]
"""The RoG datasets on the Hugging Face hub that ``load_hf_rog`` knows."""

_TRUE_VALUES = frozenset({"1", "ON", "YES", "TRUE"})
_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
_LOCAL_FILES_HINT = (
    "pass local RoG parquet/jsonl files instead, e.g. rg.data.rog.read_rog('path/to/test.parquet') "
    "(a folder of parquet shards works too)"
)


class HubUnavailableError(RuntimeError):
    """The Hugging Face hub cannot be used (offline flag set, or the endpoint is unreachable)."""


def load_hf_rog(name: HFRoGName, split: str, probe_timeout: float = 3.0) -> Iterator[Sample]:
    """Load a RoG dataset from the Hugging Face hub with ``datasets`` and yield its Samples.

    All checks run before anything is downloaded, so without a network this fails within about
    ``probe_timeout`` seconds instead of waiting on ``load_dataset``'s retries: ``datasets``
    must be importable, ``HF_HUB_OFFLINE`` / ``HF_DATASETS_OFFLINE`` must not be set, and the
    hub endpoint configured in ``huggingface_hub`` (``HF_ENDPOINT``) must accept a connection.
    An offline flag is honoured by not touching the network at all; read cached or downloaded
    files with ``read_rog`` instead.

    Args:
        name: ``"rmanluo/RoG-webqsp"`` or ``"rmanluo/RoG-cwq"``.
        split: ``"train"``, ``"validation"`` or ``"test"``.
        probe_timeout: Seconds allowed for resolving and connecting to the hub endpoint.

    Raises:
        ValueError: for an unknown dataset name.
        ImportError: if ``datasets`` is not installed (``pip install 'rg[hf]'``).
        HubUnavailableError: if an offline flag is set or the hub cannot be reached.
    """
    known = get_args(HFRoGName)
    if name not in known:
        raise ValueError(f"unknown RoG dataset {name!r}; choose one of {list(known)}")
    if importlib.util.find_spec("datasets") is None:
        raise ImportError(
            "load_hf_rog needs the optional 'datasets' package: pip install 'rg[hf]'; or "
            + _LOCAL_FILES_HINT
        )
    check_hub_reachable(timeout=probe_timeout)
    import datasets

    return _samples_from_hf(datasets.load_dataset(name, split=split), f"{name}[{split}]")


def check_hub_reachable(endpoint: str | None = None, timeout: float = 3.0) -> str:
    """Return the hub endpoint if it can be used now, else raise HubUnavailableError quickly.

    Args:
        endpoint: URL to probe; defaults to ``huggingface_hub``'s configured endpoint.
        timeout: Seconds allowed in total for the DNS lookup and the TCP connection.

    Raises:
        HubUnavailableError: if ``HF_HUB_OFFLINE`` or ``HF_DATASETS_OFFLINE`` is set, or the
            endpoint (or the proxy configured for it) does not accept a connection in time.
        ImportError: if ``endpoint`` is None and ``huggingface_hub`` is not installed.
    """
    for variable in _OFFLINE_VARIABLES:
        if os.environ.get(variable, "").strip().upper() in _TRUE_VALUES:
            raise HubUnavailableError(
                f"{variable} is set, so the Hugging Face hub is not contacted; " + _LOCAL_FILES_HINT
            )
    if endpoint is None:
        try:
            from huggingface_hub import constants
        except ImportError as err:
            raise ImportError(
                "finding the hub endpoint needs 'huggingface_hub': pip install 'rg[hf]'"
            ) from err
        endpoint = constants.ENDPOINT
    problem = probe_endpoint(endpoint, timeout)
    if problem is not None:
        raise HubUnavailableError(
            f"the Hugging Face hub at {endpoint} is unreachable ({problem}); " + _LOCAL_FILES_HINT
        )
    return endpoint


def probe_endpoint(url: str, timeout: float) -> str | None:
    """Try a TCP connection to an http(s) URL's host (or its proxy); return None or the problem.

    The DNS lookup runs in a daemon thread so that a resolver which hangs cannot exceed
    ``timeout`` either.

    Args:
        url: An ``http://`` or ``https://`` URL.
        timeout: Seconds allowed in total.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http(s) URL"
    host, port = parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        proxy_parts = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if proxy_parts.hostname:
            host, port = proxy_parts.hostname, proxy_parts.port or 80
    deadline = time.monotonic() + timeout
    try:
        addresses = _resolve(host, port, timeout)
    except OSError as err:
        return f"cannot resolve {host}: {err}"
    last_error: OSError | None = None
    for family, kind, proto, _, address in addresses:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            with socket.socket(family, kind, proto) as connection:
                connection.settimeout(remaining)
                connection.connect(address)
                return None
        except OSError as err:
            last_error = err
    return f"cannot connect to {host}:{port}: {last_error or 'timed out'}"


def _resolve(host: str, port: int, timeout: float) -> list[tuple[Any, ...]]:
    answers: queue.Queue[list[tuple[Any, ...]] | OSError] = queue.Queue(maxsize=1)

    def lookup() -> None:
        try:
            answers.put(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError as err:
            answers.put(err)

    threading.Thread(target=lookup, name="rg-hub-dns", daemon=True).start()
    try:
        answer = answers.get(timeout=timeout)
    except queue.Empty as err:
        raise TimeoutError(f"DNS lookup took more than {timeout} s") from err
    if isinstance(answer, OSError):
        raise answer
    return answer


def _samples_from_hf(dataset: Iterable[Mapping[str, Any]], source: str) -> Iterator[Sample]:
    for index, row in enumerate(dataset):
        item = sample_from_row(row, source, index)
        if isinstance(item, BadRow):
            raise BadRowError(item)
        yield item
