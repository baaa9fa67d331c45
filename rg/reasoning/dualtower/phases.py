"""Refine and predict modes: what the Hand writes for the Brain and how it uses the reply
(PrivGemo §4.3.1, Algorithm 4 phases 2–3).

- **Refine** (GenFollowUp): after failed verifications the Hand writes a follow-up question Q+ and
  a draft indicator for the evidence the rejected candidates lacked (:func:`lacked`, in anonymised
  words: a wrong answer type, branches that meet nowhere, a path that does not hold), and lists the
  relation paths the refinement asks for (the hinted paths no rejected candidate took). The Brain
  answers with the refined indicator I+; the Hand explores every length up to D_max, pruned and
  selected by I+, and keeps only candidates it has not rejected already.
- **Predict**: the Hand shows the Brain the paths explored so far (P̃_t ∪ P̃_r, with their nodes);
  the Brain names targets among those nodes (pseudonyms as shown, or type placeholders such as
  ``(person)``) and I_pred. :func:`place` puts each target on the shown walks, and the Hand explores
  from T_aug = T(Q) ∪ Ẽ_pred (:func:`rg.reasoning.dualtower.explore.explore_via`).

Everything here is built from the view (pseudonyms, shown relation labels, coarse types), and every
payload is sealed by the controller like the analysis and selection payloads.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from rg.privacy.structure import public_label
from rg.reasoning.dualtower.brain import Indicator
from rg.reasoning.dualtower.explore import Candidate, ViewWalk
from rg.reasoning.dualtower.payload import FollowUpPayload, PredictionPayload, TopicView, TriedView

FOLLOW_UP_FALLBACK = "explore_all_lengths"
"""What refine mode does without the Brain's follow-up: every length up to D_max, the node's own indicator."""
PREDICT_FALLBACK = "extend_hubs"
"""What predict mode does without the Brain's predictions: grow past the hubs of the last rejected candidates."""

_PLACEHOLDER = re.compile(r"^(?:\?\w*|MID_\?|ANSWER)?\s*\(?(?P<type>[^()]+?)\)?$")


@dataclass(frozen=True)
class Tried:
    """A candidate the Hand kept, verified and rejected, with what it lacked (anonymised words)."""

    candidate: Candidate
    missing: str


LACKED = {
    "answer_type": "ends at a {hub}; the indicator asks for a {wanted}",
    "topic_missing": "it reaches no answer besides the topic entities",
    "branches_apart": "its branches from the topic entities reach no common answer",
    "unnamed_end": "it ends only at nodes without a name of their own (such as CVTs), which are no answer",
    "not_grounded": "it does not hold on the graph behind the view",
}
"""What verification found missing, by reason, in the words the Hand writes for the Brain."""
FOLLOW_UP_QUESTION = ("The paths tried for the question did not verify ({summary}). Which relation path not tried yet "
                      "leads from {tags} to the answer?")
NOTHING_TRIED = "no candidate path was found"
DRAFT_INDICATOR = "{indicator} (missing: {summary})"
HAND_TEXTS = (*LACKED.values(), FOLLOW_UP_QUESTION, NOTHING_TRIED, DRAFT_INDICATOR)
"""Every fixed text the Hand writes into a payload (format fields in braces), part of the Brain protocol's words."""


def lacked(candidate: Candidate, reason: str, indicator: Indicator) -> str:
    """What verification found missing in ``candidate``, as the view can say it (types, no names)."""
    if reason == "answer_type":
        return LACKED["answer_type"].format(hub=public_label(candidate.hub), wanted=indicator.answer_type)
    if reason == "topic_missing":
        return LACKED["branches_apart" if len(candidate.branches) > 1 else "topic_missing"]
    return LACKED.get(reason, reason)


def tried_views(tried: Sequence[Tried]) -> tuple[TriedView, ...]:
    """The rejected candidates as the Brain may see them, numbered from 1."""
    return tuple(TriedView(id=i + 1, text=t.candidate.text(), branches=t.candidate.relation_paths,
                           nodes=tuple(b.nodes[1:] for b in t.candidate.branches), missing=t.missing)
                 for i, t in enumerate(tried))


def follow_up_payload(masked: str, indicator: Indicator, topics: Sequence[TopicView], tried: Sequence[Tried],
                      hints: Sequence[tuple[str, ...]], max_depth: int) -> FollowUpPayload:
    """The Hand's follow-up (Q+, draft I+) for the evidence the rejected candidates lacked."""
    summary = "; ".join(dict.fromkeys(t.missing for t in tried)) or NOTHING_TRIED
    tags = ", ".join(t.tag for t in topics)
    taken = {branch for t in tried for branch in t.candidate.relation_paths}
    question = FOLLOW_UP_QUESTION.format(summary=summary, tags=tags)
    return FollowUpPayload(question=masked, follow_up=question,
                           indicator=DRAFT_INDICATOR.format(indicator=indicator.text, summary=summary),
                           topics=tuple(topics), tried=tried_views(tried),
                           relation_paths=tuple(p for p in hints if p not in taken), max_depth=max_depth)


def prediction_payload(masked: str, indicator: Indicator, topics: Sequence[TopicView], tried: Sequence[Tried],
                       hints: Sequence[tuple[str, ...]], keep: int, max_depth: int) -> PredictionPayload:
    """The paths explored so far, for the Brain to name auxiliary targets on."""
    return PredictionPayload(question=masked, indicator=indicator.text, topics=tuple(topics),
                             paths=tried_views(tried), relation_paths=tuple(hints), keep=keep, max_depth=max_depth)


def _matches(target: str, node: str) -> bool:
    """Whether ``target`` names ``node``: the node as shown, its pseudonym alone, or a type placeholder
    (``(person)``, ``?x (person)``, ``person``) for a node the view shows with that type."""
    target = target.strip()
    if target == node:
        return True
    label = public_label(node)
    if label == node:  # shown as-is (plaintext names, literals): only the node itself names it
        return False
    if target == node.split(" ", 1)[0]:
        return True
    placeholder = _PLACEHOLDER.match(target)
    return placeholder is not None and placeholder["type"].strip().lower() == label.split(" ×")[0].strip().lower()


def place(targets: Sequence[str], tried: Sequence[Tried], tags: Sequence[str],
          anchors: Sequence[str]) -> tuple[list[list[ViewWalk]], list[str]]:
    """Each target on the shown walks: per topic tag, the walks from the topic to a node the target
    names (topics themselves excluded), and the nodes placed, in target order."""
    via: list[list[ViewWalk]] = [[] for _ in tags]
    placed: list[str] = []
    topics = set(anchors)
    for target in targets:
        for t in tried:
            for tag, branch in zip(t.candidate.tags, t.candidate.branches):
                for k, node in enumerate(branch.nodes[1:], start=1):
                    if node in topics or not _matches(target, node):
                        continue
                    walk = ViewWalk(branch.nodes[: k + 1], branch.labels[:k])
                    if walk not in via[tags.index(tag)]:
                        via[tags.index(tag)].append(walk)
                    if node not in placed:
                        placed.append(node)
    return via, placed
