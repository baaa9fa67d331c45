"""How good are the planner's paths: exact match, grounded answer recall, groundability, speed.

For each decoding mode (constrained by the graph trie, or unconstrained as in RoG) and beam
width k, :func:`evaluate_planner` plans every question and scores the plans against reference
relation paths and gold answers (read here only, never by the planner):

* ``path_exact_match``: the best path is one of the question's reference paths (questions with
  at least one reference path);
* ``path_hit``: any of the k paths is a reference path;
* ``answer_recall``: share of a question's answers that some grounded walk of the k paths ends
  at, averaged over questions with answers (answers missing from the graph count as missed);
  ``answer_hit``: at least one answer reached;
* ``groundable_fraction``: share of returned paths with at least one walk from a topic entity
  (1 by construction in constrained mode); ``malformed_fraction``: share that did not parse;
* ``questions_per_s``: questions planned per second of wall time, including graph, trie and
  grounding work; ``cpu_seconds`` is this process's CPU time over the same span (on a shared
  machine wall time also counts waiting for a core).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

from rg.data.sample import Sample
from rg.retrievers.planner.config import DecodeConfig
from rg.retrievers.planner.model import PlannerModel
from rg.retrievers.planner.plan import Plan, plan_questions

MODES = ("constrained", "unconstrained")


@dataclass(frozen=True)
class PlannerScores:
    """Scores of one decoding setting over a set of questions (see the module docstring)."""

    group: str
    mode: str
    beam_width: int
    questions: int
    path_exact_match: float
    path_hit: float
    answer_recall: float
    answer_hit: float
    paths_per_question: float
    groundable_fraction: float
    malformed_fraction: float
    questions_per_s: float
    seconds: float
    cpu_seconds: float

    def to_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


@dataclass(frozen=True)
class QuestionScore:
    """One question's share of :func:`score_plans`: its path and answer outcomes and path counts.

    ``exact``/``hit`` are None for a question without reference paths, ``recall``/``answer_hit``
    for one without answers; such questions are left out of those means.
    """

    exact: float | None
    hit: float | None
    recall: float | None
    answer_hit: float | None
    returned: int
    grounded: int
    malformed: int


def score_question(plan: Plan, sample: Sample, gold: Mapping[str, Sequence[Sequence[str]]]) -> QuestionScore:
    """The outcomes of one question's ``plan`` (see :func:`score_plans`)."""
    references = {tuple(p) for p in gold.get(sample.id, ())}
    decoded = plan.relation_paths
    answers = set(sample.a_entities or sample.answers)
    reached = answers & set(plan.answers)
    return QuestionScore(
        exact=float(bool(decoded) and decoded[0] in references) if references else None,
        hit=float(any(p in references for p in decoded)) if references else None,
        recall=len(reached) / len(answers) if answers else None,
        answer_hit=float(bool(reached)) if answers else None,
        returned=len(plan.paths),
        grounded=sum(p.grounded for p in plan.paths),
        malformed=sum(p.relation_path is None for p in plan.paths),
    )


def aggregate_scores(scores: Sequence[QuestionScore]) -> dict[str, float]:
    """The metrics of :func:`score_plans` from per-question outcomes (in any order)."""
    returned = sum(s.returned for s in scores)
    grounded = sum(s.grounded for s in scores)
    malformed = sum(s.malformed for s in scores)

    def mean(field: str) -> float:
        return _mean([v for v in (getattr(s, field) for s in scores) if v is not None])

    return {
        "path_exact_match": mean("exact"),
        "path_hit": mean("hit"),
        "answer_recall": mean("recall"),
        "answer_hit": mean("answer_hit"),
        "paths_per_question": returned / max(len(scores), 1),
        "groundable_fraction": grounded / returned if returned else float("nan"),
        "malformed_fraction": malformed / returned if returned else float("nan"),
    }


def score_plans(
    plans: Sequence[Plan], samples: Sequence[Sample], gold: Mapping[str, Sequence[Sequence[str]]]
) -> dict[str, float]:
    """Path and answer metrics of ``plans`` (aligned with ``samples``).

    Args:
        plans: From :func:`plan_questions`, one per sample.
        samples: The questions (their answers: ``a_entities``, else ``answers``).
        gold: Reference relation paths by question id; questions without any are left out of
            the path metrics.
    """
    if len(plans) != len(samples):
        raise ValueError(f"{len(plans)} plans for {len(samples)} samples")
    return aggregate_scores([score_question(plan, sample, gold) for plan, sample in zip(plans, samples)])


def evaluate_planner(
    planner: PlannerModel,
    samples: Sequence[Sample],
    gold: Mapping[str, Sequence[Sequence[str]]],
    beam_widths: Sequence[int] = (1, 5, 10),
    modes: Sequence[str] = MODES,
    decode: DecodeConfig | None = None,
    group_of: Callable[[Sample], str] | None = None,
) -> list[PlannerScores]:
    """Plan and score ``samples`` for every mode × beam width (each question planned once per setting).

    Args:
        planner: The planner, in eval mode.
        samples: Questions with their subgraphs.
        gold: Reference relation paths per question id (e.g. the synthetic gold paths, or
            :func:`rg.training.planner_data.reference_paths`).
        beam_widths: The k values.
        modes: ``constrained`` and/or ``unconstrained``.
        decode: Other decoding settings (batch size, grounding cap); its mode and width are replaced.
        group_of: Names each question's group (e.g. its hop count); with more than one group,
            every setting also gets one row per group, timed separately.

    Returns:
        One :class:`PlannerScores` per (mode, k) with group ``all``, each followed by its group
        rows; modes outer.
    """
    groups: dict[str, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(group_of(sample) if group_of is not None else "all", []).append(sample)
    planner.eval()
    rows = []
    for config in decode_settings(modes, beam_widths, decode):
        timed = {}
        for name, members in sorted(groups.items()):
            wall, cpu = time.perf_counter(), time.process_time()
            plans = plan_questions(planner, members, config)
            seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
            scores = [score_question(plan, sample, gold) for plan, sample in zip(plans, members)]
            timed[name] = GroupOutcome(scores, seconds, cpu_seconds)
        rows.extend(setting_rows(config.mode, config.beam_width, timed))
    return rows


def decode_settings(
    modes: Sequence[str], beam_widths: Sequence[int], decode: DecodeConfig | None = None
) -> list[DecodeConfig]:
    """The decoding settings scored, modes outer, each ``decode`` with its mode and width replaced.

    Raises:
        ValueError: for a mode not in :data:`MODES`.
    """
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown decoding mode(s) {unknown}; use {list(MODES)}")
    base = decode or DecodeConfig()
    return [
        DecodeConfig.model_validate({**base.model_dump(), "mode": mode, "beam_width": int(k)})
        for mode in modes
        for k in beam_widths
    ]


@dataclass(frozen=True)
class GroupOutcome:
    """One group's per-question outcomes under one decoding setting, and the time spent planning them."""

    scores: list[QuestionScore]
    seconds: float
    cpu_seconds: float


def setting_rows(mode: str, k: int, timed: Mapping[str, GroupOutcome]) -> list[PlannerScores]:
    """The rows of one setting: group ``all``, then each group by name when there are several."""
    every = [score for outcome in timed.values() for score in outcome.scores]
    seconds = sum(o.seconds for o in timed.values())
    rows = [_scores("all", mode, int(k), every, seconds, sum(o.cpu_seconds for o in timed.values()))]
    if len(timed) > 1:
        rows.extend(_scores(name, mode, int(k), o.scores, o.seconds, o.cpu_seconds) for name, o in sorted(timed.items()))
    return rows


def _scores(group: str, mode: str, k: int, scores: Sequence[QuestionScore], seconds: float,
            cpu_seconds: float) -> PlannerScores:
    return PlannerScores(
        group=group, mode=mode, beam_width=k, questions=len(scores), **aggregate_scores(scores),
        questions_per_s=len(scores) / seconds if seconds > 0 else float("inf"), seconds=seconds,
        cpu_seconds=cpu_seconds,
    )
