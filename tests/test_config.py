"""Config loading: every file in configs/ validates; bad keys fail naming the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from rg.config import ConfigError, apply_overrides, load_any_config, load_config, read_yaml
from rg.jobs.build_subgraphs import BuildSubgraphsConfig

# job configs; the Serve application files (`applications:`) are checked by tests/test_serve_app.py
CONFIGS = [p for p in sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
           if "applications" not in read_yaml(p)]


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_every_config_file_loads_and_names_its_command(path):
    load_any_config(path)
    first = path.read_text().splitlines()[0]
    assert first.startswith("# python -m "), f"{path.name} must open with the command that runs it"


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return path


BASE = "kind: build_subgraphs\noutput_dir: out\nsynthetic: {}\n"


def test_unknown_key_suggests_the_right_one(tmp_path):
    with pytest.raises(ConfigError, match=r"subgraph\.max_tripels: unknown key.*did you mean 'max_triples'"):
        load_config(write(tmp_path, BASE + "subgraph: {max_tripels: 5}\n"), BuildSubgraphsConfig)


def test_wrong_type_and_value_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match=r"shard_size: .*greater than or equal to 1.*got 0.*set `shard_size`"):
        load_config(write(tmp_path, BASE + "shard_size: 0\n"), BuildSubgraphsConfig)
    with pytest.raises(ConfigError, match=r"subgraph\.direction: .*'out', 'in' or 'both'"):
        load_config(write(tmp_path, BASE + "subgraph: {direction: sideways}\n"), BuildSubgraphsConfig)


def test_cross_field_rule_and_missing_key(tmp_path):
    with pytest.raises(ConfigError, match=r"exactly one of `synthetic`, `kb` and `kg`, got \[.synthetic., .kb.\]"):
        load_config(write(tmp_path, BASE + "kb: {path: x, format: tsv}\n"), BuildSubgraphsConfig)
    with pytest.raises(ConfigError, match=r"output_dir: required key is missing"):
        load_config(write(tmp_path, "kind: build_subgraphs\nsynthetic: {}\n"), BuildSubgraphsConfig)
    with pytest.raises(ConfigError, match=r"format metaqa needs `hops`"):
        load_config(
            write(tmp_path, "output_dir: o\nkb: {path: k, format: metaqa}\n"
                  "questions: [{name: a, path: q, format: metaqa}]\n"),
            BuildSubgraphsConfig,
        )


def test_kind_mismatch_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="expects 'build_subgraphs'"):
        load_config(write(tmp_path, "kind: synthetic\n"), BuildSubgraphsConfig)
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml", BuildSubgraphsConfig)
    with pytest.raises(ConfigError, match="unknown config kind 'bogus'"):
        load_any_config(write(tmp_path, "kind: bogus\n"))


def test_overrides():
    data = {"subgraph": {"max_triples": 5}}
    apply_overrides(data, ["subgraph.max_triples=null", "ray.num_cpus=4", "output_dir=x"])
    assert data == {"subgraph": {"max_triples": None}, "ray": {"num_cpus": 4}, "output_dir": "x"}
    with pytest.raises(ConfigError, match="not key=value"):
        apply_overrides({}, ["oops"])
    with pytest.raises(ConfigError, match="not a section"):
        apply_overrides({"a": 1}, ["a.b=2"])
