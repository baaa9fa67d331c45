"""The reasoning tree T_Q (PrivGemo §4.2, Algorithms 2–3): one node per indicator.

A node's state is ``(d_v, m_v, P̃_v, E_v, status)``: depth budget, exploration mode
(``topic`` / ``refine`` / ``predict``), the anonymised candidates kept, the verified evidence and
``active`` / ``verified`` / ``pruned``. :func:`init_policy` starts a node in ``topic`` mode at
``min(D_predict, D_max)``; after a failed verification :func:`next_step` moves on, in order: deeper
topic exploration up to ``D_max``, shallower down to 1, ``refine`` (the Brain answers the Hand's
follow-up for the missing evidence with a refined indicator; every length up to ``D_max``), then
``predict`` (the Brain's predicted targets on the paths explored so far become auxiliary anchors;
:mod:`rg.reasoning.dualtower.phases`). A node is pruned after
``max_failures`` failed verifications or when the schedule is spent. Without a memory the policy
has no experience to consult; the experience hooks of the paper's InitPolicy/NextStep land with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rg.reasoning.dualtower.brain import Indicator

Mode = Literal["topic", "refine", "predict"]
Status = Literal["active", "verified", "pruned"]
Action = tuple[Mode, int]


def init_policy(d_predict: int, d_max: int) -> Action:
    """(Topic, min(D_predict, D_max))."""
    return "topic", max(1, min(d_predict, d_max))


def schedule(d_predict: int, d_max: int) -> list[Action]:
    """Every action a node may take, in order (see the module docstring)."""
    mode, d0 = init_policy(d_predict, d_max)
    actions: list[Action] = [(mode, d0)]
    actions += [("topic", d) for d in range(d0 + 1, d_max + 1)]
    actions += [("topic", d) for d in range(d0 - 1, 0, -1)]
    return actions + [("refine", d_max), ("predict", d_max)]


@dataclass
class TreeNode:
    """One indicator's state."""

    indicator: Indicator
    depth: int
    mode: Mode
    candidates: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    status: Status = "active"
    failures: int = 0
    tried: list[Action] = field(default_factory=list)
    follow_up: str | None = None
    predicted: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """What the node did (anonymised candidates, the refined indicator I+ of refine mode and the view
        nodes predict mode explored from; evidence as raw lines stays with the Hand's result)."""
        return {"indicator": self.indicator.text, "depth": self.depth, "mode": self.mode, "status": self.status,
                "failures": self.failures, "tried": [list(a) for a in self.tried],
                "candidates": list(self.candidates), "follow_up": self.follow_up, "predicted": list(self.predicted)}


def next_step(node: TreeNode, d_predict: int, d_max: int, max_failures: int,
              avoid: Sequence[Action] = ()) -> Action | None:
    """The next untried action, or None when the node must be pruned.

    ``avoid``: actions experience warns about (they failed on matching questions); they are tried
    after every other action of the schedule.
    """
    if node.failures >= max_failures:
        return None
    actions = schedule(d_predict, d_max)
    warned = set(avoid)
    for action in [a for a in actions if a not in warned] + [a for a in actions if a in warned]:
        if action not in node.tried:
            return action
    return None


@dataclass
class ReasoningTree:
    """T_Q: nodes traversed top-down in indicator order."""

    nodes: list[TreeNode]

    @classmethod
    def build(cls, indicators: tuple[Indicator, ...], d_max: int) -> "ReasoningTree":
        nodes = []
        for indicator in indicators:
            mode, depth = init_policy(indicator.depth, d_max)
            nodes.append(TreeNode(indicator, depth, mode))
        return cls(nodes)

    @property
    def verified(self) -> list[TreeNode]:
        return [n for n in self.nodes if n.status == "verified"]

    def to_dict(self) -> list[dict[str, Any]]:
        return [n.to_dict() for n in self.nodes]
