"""One memory for many Ray workers and Serve replicas: a named, detached-capable Ray actor.

The sealed pool file has exactly one writer (:class:`~rg.memory.sealed.SealedLog` takes an OS lock).
Workers therefore do not open it themselves: :func:`pool_actor` gets or creates the actor named
``name`` in ``namespace`` (``get_if_exists``), which opens the pool once, serialises every lookup
and write-back (a Ray actor runs one method at a time), appends each write durably, and compacts
on :meth:`PoolActor.compact`. :class:`RemotePool` is the controller-side adapter: it implements
:class:`~rg.reasoning.dualtower.memory.GatingMemory` by calling the actor, so a controller built in
any worker uses the shared pool. Losing the actor loses nothing written: a new actor reloads the file.
The in-process :class:`~rg.memory.experience.ExperiencePool` stays usable alone (tests, one process).

The actor owns the edge memory too (when configured): :class:`RemoteEdges` sends a question's
subgraph triples and seeds for replay and the used / traversed edges for memorising, so the
edge file also has one writer however many workers answer questions.
"""

from __future__ import annotations

from typing import Any

import ray

from rg.memory.config import MemoryConfig
from rg.reasoning.dualtower.memory import Exemplar, MemoryHints, Trace

DEFAULT_NAME = "rg-experience-pool"


class PoolActor:
    """The owner of one sealed experience pool (module docstring).

    Args:
        config: The memory section (its ``experience`` part; the key is read in the actor's process).
        faiss_threads: OpenMP threads of FAISS inside the actor (1: lookups do not contend).
    """

    def __init__(self, config: MemoryConfig, faiss_threads: int = 1) -> None:
        import faiss

        from rg.memory.build import open_memories

        faiss.omp_set_num_threads(faiss_threads)
        self.memories = open_memories(config)
        self.pool = self.memories.pool
        self.edges = self.memories.edges

    def hints(self, question: str, indicator: str | None, privacy: str) -> MemoryHints:
        return self.pool.hints(question, indicator, privacy)

    def exemplars(self, question: str, indicator: str, privacy: str) -> list[Exemplar]:
        return self.pool.exemplars(question, indicator, privacy)

    def remember(self, trace: Trace) -> None:
        self.pool.remember(trace)

    def query(self, text: str):
        return self.edges.query(text)

    def replay(self, triples, seeds, q):
        return self.edges.replay(triples, seeds, q)

    def memorise(self, q, effective, traversed) -> tuple[int, int]:
        return self.edges.memorise(q, effective, traversed)

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.pool is not None:
            out.update(records=len(self.pool), refused_on_load=self.pool.refused, buffer=len(self.pool.buffer),
                       tags=sorted(self.pool.indexes))
        if self.edges is not None:
            out.update(edges=len(self.edges.vectors), edges_refused_on_load=self.edges.refused)
        return out

    def compact(self) -> dict[str, int]:
        return self.memories.compact()

    def close(self) -> None:
        self.memories.close()


def memory_actor(config: MemoryConfig, name: str = DEFAULT_NAME, namespace: str = "rg", detached: bool = False,
               num_cpus: float = 0.0):
    """The named memory actor, created on first use or fetched by name (``ray.init`` must have run)."""
    options: dict[str, Any] = {"name": name, "namespace": namespace, "get_if_exists": True, "num_cpus": num_cpus,
                               "max_concurrency": 1}
    if detached:
        options["lifetime"] = "detached"
    return ray.remote(PoolActor).options(**options).remote(config)


class RemotePool:
    """The controller's :class:`GatingMemory` over a :class:`PoolActor` handle (blocking calls)."""

    def __init__(self, actor, privacy: str) -> None:
        self.actor = actor
        self.privacy = privacy

    def exemplars(self, question: str, indicator: str) -> list[Exemplar]:
        return ray.get(self.actor.exemplars.remote(question, indicator, self.privacy))

    def hints(self, question: str, indicator: str | None, privacy: str) -> MemoryHints:
        return ray.get(self.actor.hints.remote(question, indicator, privacy))

    def remember(self, trace: Trace) -> None:
        ray.get(self.actor.remember.remote(trace))


class RemoteEdges:
    """The controller's edge memory over a :class:`PoolActor` handle (blocking calls)."""

    def __init__(self, actor) -> None:
        self.actor = actor

    def query(self, text: str):
        return ray.get(self.actor.query.remote(text))

    def replay(self, triples, seeds, q):
        return ray.get(self.actor.replay.remote([tuple(t) for t in triples], list(seeds), q))

    def memorise(self, q, effective, traversed) -> tuple[int, int]:
        return ray.get(self.actor.memorise.remote(q, list(effective), list(traversed)))


def pool_actor(config: MemoryConfig, name: str = DEFAULT_NAME, namespace: str = "rg", detached: bool = False,
               num_cpus: float = 0.0):
    """:func:`memory_actor` (the name the pool-only callers use)."""
    return memory_actor(config, name, namespace, detached, num_cpus)
