"""Open the memories a :class:`~rg.memory.config.MemoryConfig` describes (key read only when a file is used)."""

from __future__ import annotations

from dataclasses import dataclass

from rg.memory.config import MemoryConfig
from rg.memory.edges import EdgeMemory
from rg.memory.embed import Embedder, make_embedder
from rg.memory.experience import ExperiencePool
from rg.memory.keys import load_key
from rg.memory.sealed import SealedLog


@dataclass
class Memories:
    """The opened memories (either may be None) and their files."""

    pool: ExperiencePool | None
    edges: EdgeMemory | None

    def close(self) -> None:
        for part in (self.pool, self.edges):
            if part is not None and part.log is not None:
                part.log.close()

    def compact(self) -> dict[str, int]:
        return {"experience": self.pool.compact() if self.pool else 0, "edges": self.edges.compact() if self.edges else 0}


def open_memories(config: MemoryConfig, embedder: Embedder | None = None, encoder=None) -> Memories:
    """The pool and edge memory, loaded from their sealed files when paths are set.

    Args:
        config: The memory section.
        embedder: Reuse this embedder (else made from ``memory.experience``).
        encoder: An already loaded :class:`rg.text.encoder.TextEncoder` for the ``encoder`` embedder.

    Raises:
        rg.memory.keys.MemoryKeyError: a file is configured and the key is missing or wrong.
    """
    exp = config.experience
    if embedder is None:
        kind, dim = (exp.embedder, exp.hashing_dim) if exp is not None else ("encoder", 256)
        if config.embedder != "experience":  # no pool: chosen directly
            kind = config.embedder
        embedder = make_embedder(kind, dim, encoder)
    key = load_key(config.key) if config.persistent else None
    pool = edges = None
    if exp is not None:
        pool = ExperiencePool(exp, embedder, SealedLog(exp.path, key) if exp.path and key else None)
    if config.edges is not None:
        log = SealedLog(config.edges.path, key) if config.edges.path and key else None
        edges = EdgeMemory(config.edges, embedder, log)
    return Memories(pool, edges)
