"""Every shipped config under configs/ validates against the config class its `kind:` names, so
a renamed or removed field cannot leave a config that fails only when someone runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rg.config import CONFIG_KINDS, config_class, load_config, read_yaml
from rg.jobs.sweep_qa import SweepQAConfig
from rg.jobs.sweep_train import SweepTrainConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


# the Serve application files (`applications:`) are checked by tests/test_serve_app.py
JOB_CONFIGS = [p for p in sorted(CONFIGS.glob("*.yaml")) if "applications" not in read_yaml(p)]


@pytest.mark.parametrize("path", JOB_CONFIGS, ids=lambda p: p.name)
def test_shipped_config_validates(path):
    kind = read_yaml(path).get("kind")
    assert kind in CONFIG_KINDS, f"{path.name}: unknown kind {kind!r}"
    config = load_config(path, config_class(kind))
    assert type(config) is config_class(kind)
    if isinstance(config, (SweepQAConfig, SweepTrainConfig)):
        config.load_base()  # the base config and every grid point validate too
    first_line = path.read_text().splitlines()[0]
    assert first_line.startswith("# python -m "), f"{path.name} should open with the command that runs it"


def test_the_metaqa_reader_reads_the_default_build_and_its_retriever():
    """The MetaQA reader's figures come from the default build: its config reads the shard folders
    configs/build_metaqa.yaml writes and the retriever configs/train_metaqa_mlp_walk.yaml exports on them."""
    build = load_config(CONFIGS / "build_metaqa.yaml", config_class("build_subgraphs"))
    mlp = load_config(CONFIGS / "train_metaqa_mlp_walk.yaml", config_class("train"))
    reader = load_config(CONFIGS / "train_reader_metaqa.yaml", config_class("train_reader"))
    shards = [f"{build.output_dir}/{source.name}" for source in build.questions]
    assert list(mlp.input) == shards
    assert list(reader.input) == shards
    assert reader.retriever.path == f"{mlp.output_dir}/retriever"
    assert build.subgraph.max_triples == 10_000
