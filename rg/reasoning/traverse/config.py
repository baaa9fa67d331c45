"""The ``traverse:`` section: ReMindRAG's LLM-guided traversal as a reasoner (``reasoner: traverse``)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from rg.config import Config
from rg.llm.config import LLMConfig


class TraverseConfig(Config):
    """Settings of :class:`rg.reasoning.traverse.Traverser` (see the package docstring for the loop).

    Example::

        traverse:
          kind: llm                 # or local (retriever / planner scores, no LLM)
          llm: {base_url: http://127.0.0.1:8000/v1, model: HuggingFaceTB/SmolLM2-135M-Instruct}
          max_steps: 8
    """

    kind: Literal["local", "llm"] = Field(
        "local", description="'local': the triple scorer's scores choose nodes and edges and a score floor "
        "judges sufficiency; 'llm': a Hand-side OpenAI-compatible model does (with local fallbacks).")
    max_steps: int = Field(8, ge=0, le=100, description="Expansion steps (exploration + exploitation) per question.")
    max_candidates: int = Field(
        30, ge=1, le=1000, description="Neighbour edges of the chosen node shown to the LLM (best scored first).")
    max_lines: int = Field(60, ge=1, le=2000, description="Subgraph triples shown to the LLM (in the order added).")
    min_score: float = Field(
        0.0, description="local: S is sufficient when no frontier edge scores above this (planner: about -9 "
        "separates decoded-path triples from the rest; retriever logits: 0).")
    walk_score: Literal["sum", "last"] = Field(
        "sum", description="local answer: a node's value from the scores along its path in S (sum for logits, "
        "last for the planner's end scores).")
    max_gap: float = Field(0.0, ge=0.0, description="local answer: also choose nodes within this of the best value.")
    llm: Optional[LLMConfig] = Field(None, description="kind llm: the Hand-side endpoint (never side: brain).")
    reasks: int = Field(1, ge=0, le=3, description="kind llm: re-asks after a malformed reply, then the local rule.")

    @model_validator(mode="after")
    def _llm_needs_endpoint(self) -> "TraverseConfig":
        if self.kind == "llm" and self.llm is None:
            raise ValueError("traverse.kind is 'llm' but traverse.llm is not set. Fix: give `traverse.llm: "
                             "{base_url: http://127.0.0.1:8000/v1, model: ...}` or set traverse.kind: local")
        if self.llm is not None and self.llm.side == "brain":
            raise ValueError("traverse.llm.side is 'brain', but the traversal sends raw names and triples. Fix: "
                             "set traverse.llm.side: hand and point it at a local model")
        return self
