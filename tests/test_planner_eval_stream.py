"""The planner's post-training scores computed by Ray Data actors (rg.jobs.planner_eval) equal
the scores of the whole side on the driver (evaluate_planner), setting by setting and group by
group, for weak and labels references, and the driver never reads a subgraph to get them."""

from __future__ import annotations

from dataclasses import replace

import pytest

from rg.data.splits import SplitConfig, load_split_samples
from rg.retrievers.planner.config import PlannerConfig
from rg.retrievers.planner.evaluate import evaluate_planner
from rg.retrievers.planner.model import PlannerModel, load_planner
from rg.data.labels import labels_by_id, write_labels
from rg.evaluation.references import reference_paths
from rg.jobs.weak_labels import weak_rows
from rg.supervision.labels import LabelConfig
from rg.jobs.planner_eval import group_name, stream_planner_scores
from rg.jobs.planner_eval import PlannerEvalConfig
from tests.synthetic_data import write_synthetic_parquet

TIMING = ("questions_per_s", "seconds", "cpu_seconds")
SPLIT = SplitConfig(val_fraction=0.4, seed=5)


@pytest.fixture(scope="module")
def inputs_and_planner(tmp_path_factory):
    """40 synthetic questions (no gold paths) in two RoG files, and an untrained tiny planner exported to a folder."""
    folder = tmp_path_factory.mktemp("planner_eval_stream")
    first, second = folder / "a.parquet", folder / "b.parquet"
    # without gold paths, as MetaQA: the references are the labels' or the weak rule's paths
    samples = write_synthetic_parquet([first, second], questions=40, max_triples=120, gold_paths=False).samples
    config = PlannerConfig.model_validate(
        {"tiny": {"layers": 1, "hidden": 32, "heads": 4, "max_positions": 48}, "max_prompt_tokens": 32, "max_path_len": 3}
    )
    planner = PlannerModel.build(config, [s.question for s in samples], {r for s in samples for _, r, _ in s.triples})
    return [str(first), str(second)], planner.save(folder / "planner"), folder


def _without_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in rows]


@pytest.mark.parametrize("source", [pytest.param("weak", marks=pytest.mark.slow), "refined"])
def test_streamed_scores_equal_the_driver_scores(ray_local, inputs_and_planner, source, monkeypatch):
    inputs, planner_dir, folder = inputs_and_planner
    cfg = PlannerEvalConfig(side="val", beam_widths=(1, 3))
    whole = load_split_samples(inputs, SPLIT, ("val",))["val"]
    labels = LabelConfig()
    if source == "refined":  # answer-F1 paths: not the weak rule's shortest paths, so the rows must be read
        rows = weak_rows(whole, LabelConfig(weak={"rule": "answer_f1"})).values()
        write_labels(rows, folder / "labels" / "part-0.parquet")
        labels = LabelConfig(source="refined", path=str(folder / "labels"))
    stored = None if source == "weak" else labels_by_id(str(labels.path), {s.id for s in whole})
    gold = reference_paths(whole, stored, labels.weak, 3)
    if source == "refined":
        assert gold != reference_paths(whole, None, labels.weak, 3)
    before = evaluate_planner(load_planner(planner_dir), whole, gold, cfg.beam_widths, cfg.modes, cfg.decode,
                              lambda s: group_name(s, cfg.by_hops))
    assert len({row.group for row in before}) > 2  # 'all' and at least two hop groups

    from rg.data import splits

    reads = []
    real = splits.load_split_samples

    def questions_only(*args, **kwargs):
        reads.append(kwargs.get("graph", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(splits, "load_split_samples", questions_only)
    light = splits.load_split_samples(inputs, SPLIT, ("val",), graph=False)["val"]
    assert all(not s.triples for s in light)
    after = stream_planner_scores(inputs, light, planner_dir, labels, 3, cfg)

    assert reads == [False]
    assert after["side"] == "val" and after["questions"] == len(whole) and after["scored_on"] == "ray_data"
    assert _without_timing(after["scores"]) == _without_timing([row.to_dict() for row in before])
    assert all(row["seconds"] > 0 and row["questions_per_s"] > 0 for row in after["scores"])


def test_a_question_missing_from_the_inputs_is_named(ray_local, inputs_and_planner):
    inputs, planner_dir, _ = inputs_and_planner
    light = load_split_samples(inputs, SPLIT, ("val",), graph=False)["val"]
    stray = replace(light[0], id="not-in-the-files")
    with pytest.raises(ValueError, match=r"1 question\(s\) of side 'val' were not scored .*'not-in-the-files'"):
        stream_planner_scores(inputs, [*light[:3], stray], planner_dir, None, 3, PlannerEvalConfig(beam_widths=(1,)))
