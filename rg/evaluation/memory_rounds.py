"""What an experience or edge memory changes across the rounds of ``evaluate_qa`` (``memory.rounds``): one
round's figures (:func:`round_summary`) and the same round answered without the memory
(:func:`without_memory`, ``memory.baseline``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rg.evaluation.qa import Prediction
from rg.evaluation.qa_metrics import Gold, QuestionScore, score_prediction
from rg.evaluation.qa_report import round_predictions_path, write_predictions
from rg.llm.usage import Usage

LOST = "lost: the actor pool returned no prediction"
"""Failure recorded for a question whose prediction never came back (should not happen)."""


def round_summary(round_no: int, scores: Sequence[QuestionScore], side: str = "brain",
                  first: dict[str, float] | None = None) -> dict[str, Any]:
    """One memory round: Hits@1, LLM calls and tokens per question on ``side`` (the dual tower's LLM is
    the Brain, the traversal's the Hand), and where analyses came from; with ``first`` (round 1's
    Hits@1 by id) the questions wrong in round 1 and right now (``corrected``) and the reverse (``lost``)."""
    n = max(len(scores), 1)
    sources: dict[str, int] = {}
    for s in scores:
        source = s.prediction.evidence_walks.partition(":")[2] or "none"
        sources[source] = sources.get(source, 0) + 1
    used = [s.prediction.usage_by_side.get(side, Usage()) if s.prediction.usage_by_side else s.prediction.usage
            for s in scores]  # a reasoner that books sides (the dual tower with a Hand LLM) is split by side
    calls = sum(u.calls for u in used) / n
    out = {"round": round_no, "questions": len(scores),
           "hits1": sum(s.hits_at_1 for s in scores) / n,
           "brain_calls_per_question": calls if side == "brain" else 0.0,
           "tokens_per_question": {side: sum(u.prompt_tokens + u.completion_tokens for u in used) / n},
           "replay_hit_rate": sources.get("replay", 0) / n, "experience_hit_rate": sources.get("experience", 0) / n,
           "evidence_lines_per_question": sum(s.prediction.evidence_lines for s in scores) / n,
           "analysis_sources": sources}
    if side != "brain":
        out[f"{side}_calls_per_question"] = calls
        out["replay_used_rate"] = sum(v for k, v in sources.items() if k.startswith("replay")) / n
    if first is not None:
        out["corrected"] = sum(1 for s in scores if first.get(s.prediction.id) == 0 and s.hits_at_1 == 1)
        out["lost"] = sum(1 for s in scores if first.get(s.prediction.id) == 1 and s.hits_at_1 == 0)
    return out


def without_memory(scores: Sequence[QuestionScore], plain: dict[str, Prediction], gold: dict[str, Gold],
                   match: str, side: str = "brain", out_dir: str | None = None, round_no: int = 1) -> dict[str, Any]:
    """A round's figures with no memory (``memory.baseline``), beside the memory's ``scores``: Hits@1,
    calls and tokens per question on ``side``, and the questions the memory made right (``better``) or
    wrong (``worse``) against answering them without it, counted and by id. ``out_dir``: the baseline's
    scored predictions are also written there (``predictions.round<N>.without_memory.jsonl``)."""
    baseline = [score_prediction(plain.get(s.prediction.id) or Prediction(
        id=s.prediction.id, question=s.prediction.question, failure=LOST), gold[s.prediction.id], match)
        for s in scores]
    if out_dir is not None:
        write_predictions(baseline, round_predictions_path(out_dir, round_no, without_memory=True))
    summary = round_summary(0, baseline, side)
    plain_hit = {s.prediction.id: s.hits_at_1 for s in baseline}
    better = sorted(s.prediction.id for s in scores if s.hits_at_1 > plain_hit[s.prediction.id])
    worse = sorted(s.prediction.id for s in scores if s.hits_at_1 < plain_hit[s.prediction.id])
    calls = "brain_calls_per_question" if side == "brain" else f"{side}_calls_per_question"
    return {"hits1_without_memory": summary["hits1"],
            f"{calls}_without_memory": summary[calls],
            "tokens_per_question_without_memory": summary["tokens_per_question"],
            "better_than_without_memory": len(better), "worse_than_without_memory": len(worse),
            "better_ids": better, "worse_ids": worse}
