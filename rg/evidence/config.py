"""Configuration of evidence-chain construction (ReG stage S(II))."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rg.config import Config


class EvidenceConfig(Config):
    """How one question's retrieved triples become evidence chains.

    See :func:`rg.evidence.build_evidence` for the algorithm each switch controls.
    """

    max_length: int = Field(
        3,
        ge=1,
        le=8,
        description=(
            "Longest chain, in triples, grown by BFS from a topic entity (ReG uses short chains; "
            "MetaQA needs up to 3). Each extra step multiplies the walks searched by the branching "
            "factor, so values above 4 are rarely useful."
        ),
    )
    walks: Literal["bfs", "planned"] = Field(
        "bfs",
        description=(
            "'bfs': walks grown over the retrieved triples from the topic entities (any retriever). "
            "'planned': the groundings of a path planner's decoded relation paths (retriever kind "
            "'planner' only; rg.evidence.planned), scored by each path's share of the planner's belief."
        ),
    )
    through_topics: Literal["drop", "keep"] = Field(
        "drop",
        description=(
            "With two or more topic entities, what to do with a BFS walk that passes through another "
            "topic on its way ('A … B → … X'). 'drop': that topic's own walk carries the same steps, and "
            "the walk ending at it keeps the A–B link, so the detour only repeats evidence and, with "
            "merge_entities, makes spurious groups on its ends. 'keep': the walks as BFS finds them."
        ),
    )
    keep_unanchored: bool = Field(
        True,
        description=(
            "Keep retrieved triples that no chain uses (not reachable from a topic within "
            "max_length, a parallel relation, or a cross edge between entities already reached) as "
            "one-step unanchored chains, so nothing retrieved is silently dropped. False drops them "
            "and counts them in EvidenceStats.dropped."
        ),
    )
    order: Literal["strength", "expected_relevant"] = Field(
        "strength",
        description=(
            "Line order in a prompt. 'strength': best weakest-step score first (a chain's first hop "
            "is never weaker than the chain, so multi-hop answers come after their prefixes). "
            "'expected_relevant': most expected relevant steps first (sum of sigmoid(score), scores "
            "read as logits), so a chain precedes its prefixes; use it when a reader sees only the "
            "first lines (reader.max_lines)."
        ),
    )
    merge_answers: bool = Field(
        True,
        description=(
            "Multi-answer merging: walks with the same source and relation path (directions "
            "included) but different ends become one chain with several ends, rendered {a | b}."
        ),
    )
    merge_entities: bool = Field(
        True,
        description=(
            "Multi-entity merging: chains from different topic entities whose ends overlap are "
            "placed together on one line, restricted to the shared ends."
        ),
    )
