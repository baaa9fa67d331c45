"""The planner's post-training scores (:class:`PlannerEvalConfig`) computed by Ray Data actors: the driver never
holds the side's subgraphs (:func:`score_planner` scores on the driver for ``examples_on: driver``).

After training, :func:`rg.jobs.train_planner.train_planner` scores the exported planner on one
split side for every decoding mode × beam width (:mod:`rg.retrievers.planner.evaluate`). Planning
needs each question's subgraph (the constrained decoder's trie, the grounding of the paths), so
scoring on the driver used to mean reading the whole side with its subgraphs there. Here the side
is read with an id filter (:func:`rg.data.streaming.read_side`) by an actor pool; each actor loads
the exported planner (and the whole-KB search of ``weak.kb`` when set) once, derives each
question's reference paths (:func:`reference_paths`, labels joined per batch), plans every
question under every setting and returns one small outcome row per question and setting
(:class:`QuestionScore`). The driver sums those into the same :class:`PlannerScores` rows as
:func:`evaluate_planner` (``tests/test_planner_eval_stream.py``).

Timing differs in meaning only: ``seconds`` and ``cpu_seconds`` are summed over the actors'
planning calls (each question carries its share of its batch's time), so ``questions_per_s`` is
per planning process, not the wall time of the whole pass.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from rg.config import Config
from rg.run.paths import resolve_data_path
from rg.data.sample import Sample
from rg.data.streaming import batch_samples, read_side
from rg.retrievers.planner.config import DecodeConfig
from rg.retrievers.planner.evaluate import (
    MODES,
    GroupOutcome,
    QuestionScore,
    decode_settings,
    evaluate_planner,
    score_question,
    setting_rows,
)
from rg.retrievers.planner.model import PlannerModel, load_planner
from rg.retrievers.planner.plan import plan_questions
from rg.supervision.answer_paths import search_kb
from rg.data.labels import labels_by_id
from rg.supervision.labels import LabelConfig
from rg.evaluation.references import reference_paths
from rg.training.planner_view import load_view, view_references, view_sample

if TYPE_CHECKING:
    import pyarrow as pa


class PlannerEvalConfig(Config):
    """Scoring of the exported planner after training."""

    side: Literal["val", "test"] | None = Field(
        "val", description="Questions to score ('test' needs `split.file`); None skips the evaluation."
    )
    beam_widths: tuple[int, ...] = Field((1, 5), min_length=1, description="Beam widths k to score.")
    modes: tuple[Literal["constrained", "unconstrained"], ...] = Field(MODES, min_length=1, description="Decoding modes.")
    decode: DecodeConfig = Field(default_factory=DecodeConfig, description="Batch size and grounding cap.")
    by_hops: bool = Field(True, description="Also score each hop count separately when there are several.")


def score_planner(planner: PlannerModel, samples: Sequence[Sample], gold: dict, cfg: PlannerEvalConfig) -> dict[str, Any]:
    """Scores of ``samples`` for every mode × k, overall and (``by_hops``) per hop count."""
    group_of = (lambda s: f"{s.hops}hop" if s.hops is not None else "all") if cfg.by_hops else None
    rows = evaluate_planner(planner, samples, gold, cfg.beam_widths, cfg.modes, cfg.decode, group_of)
    return {"side": cfg.side, "questions": len(samples), "scores": [r.to_dict() for r in rows]}


def group_name(sample: Sample, by_hops: bool) -> str:
    """A question's scoring group: its hop count (``2hop``) with ``by_hops`` when known, else ``all``."""
    return f"{sample.hops}hop" if by_hops and sample.hops is not None else "all"


def stream_planner_scores(
    inputs: str | Sequence[str],
    side: Sequence[Sample],
    planner_dir: str | Path,
    labels: LabelConfig | None,
    max_len: int | None,
    cfg: PlannerEvalConfig,
    view_schema_dir: str | None = None,
) -> dict[str, Any]:
    """Score the planner in ``planner_dir`` on the questions ``side`` with Ray Data actors (see the module doc).

    Args:
        inputs: The RoG inputs the questions come from.
        side: The side's questions in input order, read without subgraphs (``graph=False``).
        planner_dir: The exported planner (absolute, or resolved here: the actors read it).
        labels: Whose rows give reference paths (``source: refined``: a labels row's paths) and whose
            ``weak`` rule gives them otherwise; None on a side the labels must not speak for
            (``test``): its references are gold or weak paths only.
        max_len: The planner's longest path (bounds the weak search).
        cfg: Side name, modes, beam widths, decoding and grouping.
        view_schema_dir: The KG schema of a planner trained on the privacy view: references and subgraphs
            are written in its relation clusters before scoring (:mod:`rg.training.planner_view`).

    Returns:
        ``{"side", "questions", "scores", "scored_on"}`` with the rows of :func:`evaluate_planner`.

    Raises:
        ValueError: if a question is not scored exactly once per setting, or a row is not a valid RoG row.
    """
    sources = [inputs] if isinstance(inputs, str) else list(inputs)
    weak = LabelConfig().weak if labels is None else labels.weak
    if labels is not None and labels.path is not None:  # the actors read it: give them the driver's absolute path
        labels = labels.model_copy(update={"path": str(resolve_data_path(labels.path).resolve())})
    settings = decode_settings(cfg.modes, cfg.beam_widths, cfg.decode)
    kwargs = {
        "planner_dir": str(Path(planner_dir).resolve()),
        "labels": labels if labels is not None and labels.source != "weak" else None,
        "weak": weak,
        "max_len": max_len,
        "settings": settings,
        "by_hops": cfg.by_hops,
        "view_schema_dir": None if view_schema_dir is None else str(resolve_data_path(view_schema_dir).resolve()),
    }
    ids = [s.id for s in side]
    found: list[dict[str, tuple[list[QuestionScore], list[float], list[float]]]] = [{} for _ in settings]
    seen: list[set[str]] = [set() for _ in settings]
    for row in read_side(sources, ids, _PlanScores, kwargs).iter_rows():
        index, question = int(row["setting"]), str(row["id"])
        if question in seen[index]:
            raise ValueError(f"question {question!r} was scored twice; ids must be unique within the inputs")
        seen[index].add(question)
        scores, seconds, cpu_seconds = found[index].setdefault(str(row["group"]), ([], [], []))
        scores.append(pickle.loads(row["score"]))
        seconds.append(float(row["seconds"]))
        cpu_seconds.append(float(row["cpu_seconds"]))
    for index, config in enumerate(settings):
        missing = [i for i in ids if i not in seen[index]]
        if missing:
            raise ValueError(
                f"{len(missing)} question(s) of side {cfg.side!r} were not scored with {config.mode} k={config.beam_width} "
                f"(first: {missing[0]!r}); were the inputs changed during the job?"
            )
    rows = []
    for config, groups in zip(settings, found):
        timed = {name: GroupOutcome(scores, sum(wall), sum(cpu)) for name, (scores, wall, cpu) in groups.items()}
        rows.extend(setting_rows(config.mode, config.beam_width, timed))
    return {"side": cfg.side, "questions": len(side), "scores": [r.to_dict() for r in rows], "scored_on": "ray_data"}


class _PlanScores:
    """Ray Data actor: a batch of questions planned under every setting, one outcome row per question and setting."""

    def __init__(
        self,
        planner_dir: str,
        labels: LabelConfig | None,
        weak: Any,
        max_len: int | None,
        settings: Sequence[DecodeConfig],
        by_hops: bool,
        view_schema_dir: str | None,
    ) -> None:
        self.planner = load_planner(planner_dir)
        self.planner.eval()
        self.labels = labels
        self.weak = weak
        self.max_len = max_len
        self.settings = list(settings)
        self.by_hops = by_hops
        self.kb = search_kb(weak)
        self.view = load_view(view_schema_dir)

    def __call__(self, batch: "pa.Table") -> "pa.Table":
        import pyarrow as pa

        samples = batch_samples(batch)
        rows = None if self.labels is None else labels_by_id(str(self.labels.path), {s.id for s in samples})
        gold = view_references(reference_paths(samples, rows, self.weak, self.max_len, self.kb), self.view)
        samples = [view_sample(s, self.view) for s in samples]
        groups: dict[str, list[Sample]] = {}
        for sample in samples:
            groups.setdefault(group_name(sample, self.by_hops), []).append(sample)
        out: dict[str, list[Any]] = {k: [] for k in ("id", "setting", "group", "score", "seconds", "cpu_seconds")}
        for index, config in enumerate(self.settings):
            for name, members in sorted(groups.items()):
                wall, cpu = time.perf_counter(), time.process_time()
                plans = plan_questions(self.planner, members, config)
                seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
                for plan, sample in zip(plans, members):
                    score: QuestionScore = score_question(plan, sample, gold)
                    out["id"].append(sample.id)
                    out["setting"].append(index)
                    out["group"].append(name)
                    out["score"].append(pickle.dumps(score))
                    out["seconds"].append(seconds / len(members))
                    out["cpu_seconds"].append(cpu_seconds / len(members))
        return pa.table(
            {
                "id": pa.array(out["id"], pa.string()),
                "setting": pa.array(out["setting"], pa.int64()),
                "group": pa.array(out["group"], pa.string()),
                "score": pa.array(out["score"], pa.binary()),
                "seconds": pa.array(out["seconds"], pa.float64()),
                "cpu_seconds": pa.array(out["cpu_seconds"], pa.float64()),
            }
        )
