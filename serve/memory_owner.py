"""The one owner of the endpoint's memories: a single-replica deployment every Hand replica calls.

The experience pool (PrivGemo) and the edge memory (ReMindRAG) are sealed files with exactly one
writer (:class:`rg.memory.sealed.SealedLog` holds an OS lock). :class:`MemoryOwner` opens them once
(:func:`rg.memory.build.open_memories`, the AES-GCM key read in its own process), serialises every
lookup and write-back under one lock, and appends each write durably, so however many Hand replicas
autoscale, the files have one writer and every replica learns from every other. Losing the replica
loses nothing written: Serve starts a new one, which reloads the files. ``check_health`` fails when
a memory file has disappeared from under it, so Serve replaces the replica.

On the Hand's side, :class:`ServeMemory` and :class:`ServeEdges` are the controller's memory hooks
over the deployment's handle. They return awaitables (a Serve replica must not block its event
loop), and turn an owner that is gone, full or late into
:class:`~rg.reasoning.dualtower.memory.MemoryUnavailable`: the controller then answers without
memory and says so in the answer's ``memory`` notes. Only anonymised traces and edge vectors cross
this boundary (the memory stores decision traces, never answers or raw names).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from ray import serve
from ray.exceptions import RayActorError, RayTaskError
from ray.serve.exceptions import BackPressureError, DeploymentUnavailableError, RayServeException
from ray.serve.handle import DeploymentHandle

from rg.memory.build import open_memories
from rg.memory.config import MemoryConfig
from rg.reasoning.dualtower.memory import Exemplar, MemoryHints, MemoryUnavailable, Trace

UNREACHABLE = (BackPressureError, DeploymentUnavailableError, RayActorError, RayTaskError, RayServeException)


@serve.deployment
class MemoryOwner:
    """The memories' single writer (module docstring).

    Args:
        config: The ``memory`` section (:class:`MemoryConfig`) as a dict.
    """

    def __init__(self, config: dict[str, Any]) -> None:
        import faiss

        faiss.omp_set_num_threads(1)  # lookups are small; threads would only contend with the Hand
        self.config = MemoryConfig.model_validate(config)
        self.memories = open_memories(self.config)
        self.lock = threading.Lock()  # Serve runs sync methods in a thread pool: one call at a time

    def hints(self, question: str, indicator: str | None, privacy: str) -> MemoryHints:
        with self.lock:
            return self.memories.pool.hints(question, indicator, privacy)

    def exemplars(self, question: str, indicator: str, privacy: str) -> list[Exemplar]:
        with self.lock:
            return self.memories.pool.exemplars(question, indicator, privacy)

    def remember(self, trace: Trace) -> None:
        with self.lock:
            self.memories.pool.remember(trace)

    def query(self, text: str):
        with self.lock:
            return self.memories.edges.query(text)

    def replay(self, triples: list[tuple[str, str, str]], seeds: list[str], q):
        with self.lock:
            return self.memories.edges.replay(triples, seeds, q)

    def memorise(self, q, effective: list, traversed: list) -> tuple[int, int]:
        with self.lock:
            return self.memories.edges.memorise(q, set(effective), set(traversed))

    def forget(self, triples: list[tuple[str, str, str]]) -> int:
        """Drop the edge vectors of facts deleted from the KG (KG edits); returns how many were held."""
        with self.lock:
            edges = self.memories.edges
            return edges.forget(triples) if edges is not None else 0

    def stats(self) -> dict[str, Any]:
        """Records, buffer and edges held (the readiness check shows them)."""
        pool, edges = self.memories.pool, self.memories.edges
        out: dict[str, Any] = {}
        with self.lock:
            if pool is not None:
                out.update(records=len(pool), buffer=len(pool.buffer), refused_on_load=pool.refused)
            if edges is not None:
                out.update(edges=len(edges.vectors), edges_refused_on_load=edges.refused)
        return out

    def compact(self) -> dict[str, int]:
        with self.lock:
            return self.memories.compact()

    def check_health(self) -> None:
        """Fails when a configured memory file is gone (the replica is then replaced and reloads)."""
        for part in (self.config.experience, self.config.edges):
            if part is not None and part.path is not None and not Path(part.path).exists():
                raise RuntimeError(f"memory file {part.path} has disappeared")

    def __del__(self) -> None:
        memories = getattr(self, "memories", None)
        if memories is not None:
            memories.close()


async def _call(response: Any, timeout_s: float) -> Any:
    """The owner's reply, or :class:`MemoryUnavailable` when it is gone, overloaded or late."""
    async def wait() -> Any:
        return await response

    try:
        return await asyncio.wait_for(wait(), timeout_s)
    except asyncio.TimeoutError:
        response.cancel()
        raise MemoryUnavailable(f"the memory owner gave no reply within {timeout_s} s") from None
    except UNREACHABLE as err:
        raise MemoryUnavailable(f"the memory owner is not reachable ({type(err).__name__})") from None


class ServeMemory:
    """The controller's :class:`~rg.reasoning.dualtower.memory.GatingMemory` over the owner's handle."""

    def __init__(self, handle: DeploymentHandle, privacy: str, timeout_s: float) -> None:
        self.handle, self.privacy, self.timeout_s = handle, privacy, timeout_s

    def exemplars(self, question: str, indicator: str):
        return _call(self.handle.exemplars.remote(question, indicator, self.privacy), self.timeout_s)

    def hints(self, question: str, indicator: str | None, privacy: str):
        return _call(self.handle.hints.remote(question, indicator, privacy), self.timeout_s)

    def remember(self, trace: Trace):
        return _call(self.handle.remember.remote(trace), self.timeout_s)


class ServeEdges:
    """The controller's edge memory (query, replay, memorise) over the owner's handle."""

    def __init__(self, handle: DeploymentHandle, timeout_s: float) -> None:
        self.handle, self.timeout_s = handle, timeout_s

    def query(self, text: str):
        return _call(self.handle.query.remote(text), self.timeout_s)

    def replay(self, triples, seeds, q):
        return _call(self.handle.replay.remote([tuple(t) for t in triples], list(seeds), q), self.timeout_s)

    def memorise(self, q, effective, traversed):
        return _call(self.handle.memorise.remote(q, list(effective), list(traversed)), self.timeout_s)
