"""The ``memory:`` section: which memories the dual-tower controller uses, their key and files."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from rg.config import Config
from rg.data.paraphrase import ParaphraseConfig
from rg.memory.edges import EdgeMemoryConfig
from rg.memory.experience import ExperienceConfig
from rg.memory.keys import KeyConfig


class MemoryConfig(Config):
    """Experience pool (PrivGemo) and edge memory (ReMindRAG) of the dual-tower controller.

    Example::

        memory:
          key: {env: RG_MEMORY_KEY}
          experience: {embedder: encoder, path: /secure/rg/pool.sealed}
          edges: {path: /secure/rg/edges.sealed}
          rounds: 3
    """

    key: KeyConfig = Field(default_factory=KeyConfig, description="Where the AES-256-GCM key comes from.")
    experience: Optional[ExperienceConfig] = Field(
        default_factory=ExperienceConfig, description="The experience pool; null: no pool.")
    edges: Optional[EdgeMemoryConfig] = Field(
        default_factory=EdgeMemoryConfig, description="The edge memory; null: no edge memory.")
    embedder: Literal["experience", "encoder", "hashing"] = Field(
        "experience", description="The edge memory's embedder: 'experience' uses the pool's settings "
        "(memory.experience.embedder; the encoder when there is no pool); 'encoder' or 'hashing' choose it directly "
        "(e.g. for reasoner traverse, which has no pool).")
    rounds: int = Field(1, ge=1, le=20, description="evaluate_qa: passes over the same questions, memory kept between.")
    round_kind: Literal["same", "paraphrase", "same_template"] = Field(
        "same", description="evaluate_qa rounds 2..: the same questions, seeded paraphrases of them, or questions "
        "of the same template about other topic entities (rg.evaluation.rounds).")
    baseline: bool = Field(
        False, description="evaluate_qa: also answer every round's questions with no memory at all (a second pass, "
        "so twice the work) and report beside each round what the memory changed: hits1_without_memory, "
        "brain_calls_per_question_without_memory (traversal: hand_calls_...), better / worse by question.")
    paraphrase: ParaphraseConfig = Field(
        default_factory=ParaphraseConfig, description="round_kind paraphrase / same_template: the template families.")

    @model_validator(mode="after")
    def _something(self) -> "MemoryConfig":
        if self.experience is None and self.edges is None:
            raise ValueError("memory has neither experience nor edges. Fix: drop the memory section or enable one")
        if self.embedder != "experience" and self.experience is not None:
            raise ValueError("memory.embedder is set beside an experience pool, whose embedder the edge memory "
                             "shares. Fix: set memory.experience.embedder instead and leave memory.embedder out")
        return self

    @property
    def persistent(self) -> bool:
        return any(part is not None and part.path is not None for part in (self.experience, self.edges))
