"""Every shipped config under configs/ validates against the config class its `kind:` names, so
a renamed or removed field cannot leave a config that fails only when someone runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rg.config import load_config, read_yaml
from rg.data.builder import BuildSubgraphsConfig
from rg.data.synthetic.config import SyntheticConfig
from rg.evaluation.job import EvaluateConfig
from rg.evaluation.qa_job import QAEvaluateConfig
from rg.pipeline import PipelineConfig
from rg.supervision.job import RefineConfig
from rg.training.planner_ray import PlannerTrainConfig
from rg.training.ray_train import TrainJobConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
BY_KIND = {cls.KIND: cls for cls in (BuildSubgraphsConfig, SyntheticConfig, EvaluateConfig, QAEvaluateConfig,
                                     PipelineConfig, RefineConfig, PlannerTrainConfig, TrainJobConfig)}


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_config_validates(path):
    kind = read_yaml(path).get("kind")
    assert kind in BY_KIND, f"{path.name}: unknown kind {kind!r}"
    config = load_config(path, BY_KIND[kind])
    assert type(config) is BY_KIND[kind]
    first_line = path.read_text().splitlines()[0]
    assert first_line.startswith("# python -m "), f"{path.name} should open with the command that runs it"
