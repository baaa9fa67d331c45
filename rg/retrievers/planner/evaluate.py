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
    exact, hit, recall, answer_hit = [], [], [], []
    returned = grounded = malformed = 0
    for plan, sample in zip(plans, samples):
        references = {tuple(p) for p in gold.get(sample.id, ())}
        decoded = plan.relation_paths
        if references:
            exact.append(float(bool(decoded) and decoded[0] in references))
            hit.append(float(any(p in references for p in decoded)))
        answers = set(sample.a_entities or sample.answers)
        if answers:
            reached = answers & set(plan.answers)
            recall.append(len(reached) / len(answers))
            answer_hit.append(float(bool(reached)))
        returned += len(plan.paths)
        grounded += sum(p.grounded for p in plan.paths)
        malformed += sum(p.relation_path is None for p in plan.paths)
    return {
        "path_exact_match": _mean(exact),
        "path_hit": _mean(hit),
        "answer_recall": _mean(recall),
        "answer_hit": _mean(answer_hit),
        "paths_per_question": returned / max(len(plans), 1),
        "groundable_fraction": grounded / returned if returned else float("nan"),
        "malformed_fraction": malformed / returned if returned else float("nan"),
    }


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
    unknown = [m for m in modes if m not in MODES]
    if unknown:
        raise ValueError(f"unknown decoding mode(s) {unknown}; use {list(MODES)}")
    base = decode or DecodeConfig()
    groups: dict[str, list[Sample]] = {}
    for sample in samples:
        groups.setdefault(group_of(sample) if group_of is not None else "all", []).append(sample)
    planner.eval()
    rows = []
    for mode in modes:
        for k in beam_widths:
            config = DecodeConfig.model_validate({**base.model_dump(), "mode": mode, "beam_width": int(k)})
            timed = {}
            for name, members in sorted(groups.items()):
                wall, cpu = time.perf_counter(), time.process_time()
                plans = plan_questions(planner, members, config)
                timed[name] = (members, plans, time.perf_counter() - wall, time.process_time() - cpu)
            every = [s for members, *_ in timed.values() for s in members]
            plans = [p for _, group_plans, *_ in timed.values() for p in group_plans]
            seconds = sum(t[2] for t in timed.values()), sum(t[3] for t in timed.values())
            rows.append(_scores("all", mode, int(k), every, plans, gold, *seconds))
            if len(timed) > 1:
                rows.extend(_scores(name, mode, int(k), m, p, gold, w, c) for name, (m, p, w, c) in timed.items())
    return rows


def _scores(group: str, mode: str, k: int, samples: Sequence[Sample], plans: Sequence[Plan],
            gold: Mapping[str, Sequence[Sequence[str]]], seconds: float, cpu_seconds: float) -> PlannerScores:
    return PlannerScores(
        group=group, mode=mode, beam_width=k, questions=len(samples), **score_plans(plans, samples, gold),
        questions_per_s=len(samples) / seconds if seconds > 0 else float("inf"), seconds=seconds,
        cpu_seconds=cpu_seconds,
    )
