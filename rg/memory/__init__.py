"""Memory on the Hand's side: the encrypted experience pool (PrivGemo §4.4) and edge memory (ReMindRAG §3.2).

- :mod:`rg.memory.sealed`: the AES-GCM append-only record file both persist to;
- :mod:`rg.memory.experience`: :class:`ExperiencePool` and its controller adapter :class:`PoolMemory`;
- :mod:`rg.memory.edges`: :class:`EdgeMemory` (enhance, penalise, replay);
- :mod:`rg.memory.actor`: one named Ray actor owning a pool for many workers.
"""

from rg.memory.config import MemoryConfig
from rg.memory.edges import EdgeMemory, EdgeMemoryConfig
from rg.memory.experience import ColdStartExemplar, ExperienceConfig, ExperiencePool, PoolMemory
from rg.memory.keys import KeyConfig, MemoryKeyError
from rg.memory.sealed import SealedLog

__all__ = ["ColdStartExemplar", "EdgeMemory", "EdgeMemoryConfig", "ExperienceConfig", "ExperiencePool", "KeyConfig",
           "MemoryConfig", "MemoryKeyError", "PoolMemory", "SealedLog"]
