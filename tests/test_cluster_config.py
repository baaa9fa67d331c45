"""cluster.yaml against Ray's own cluster-config schema, and the KubeRay example's entry point."""

from __future__ import annotations

import copy
import shlex
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cluster() -> dict:
    return yaml.safe_load((ROOT / "cluster.yaml").read_text())


def check(config: dict) -> None:
    """What `ray up` does before it touches the cloud: fill Ray's defaults, then validate."""
    validate_config(prepare_config(copy.deepcopy(config)))


def test_cluster_yaml_passes_rays_schema(cluster):
    check(cluster)


def test_schema_check_can_fail(cluster):
    """The same validator refuses a misspelt key and a fractional GPU count."""
    misspelt = copy.deepcopy(cluster)
    misspelt["docker"]["run_option"] = misspelt["docker"].pop("run_options")
    with pytest.raises(jsonschema.ValidationError, match="run_option"):
        check(misspelt)
    fractional = copy.deepcopy(cluster)
    fractional["available_node_types"]["gpu_small"]["resources"]["GPU"] = 0.5
    with pytest.raises(jsonschema.ValidationError):
        check(fractional)


def test_cluster_layout(cluster):
    """A CPU head with the Tune driver resource, GPU worker types, shm and shared storage."""
    types = cluster["available_node_types"]
    head = types[cluster["head_node_type"]]
    assert head["resources"].get("GPU", 0) == 0
    assert head["resources"]["tune_driver"] >= 1
    assert '"tune_driver"' in " ".join(cluster["head_start_ray_commands"])
    gpu_types = [name for name, spec in types.items() if spec["resources"].get("GPU", 0) >= 1]
    assert len(gpu_types) >= 1
    assert all(types[name]["max_workers"] >= 1 for name in gpu_types)
    options = " ".join(cluster["docker"]["run_options"])
    assert "--shm-size=" in options
    assert "RG_STORAGE_ROOT=/mnt/rg" in options
    assert "-v /mnt/rg:/mnt/rg" in options
    excludes = cluster["rsync_exclude"]
    assert any("outputs" in pattern for pattern in excludes)
    assert any(".venv" in pattern for pattern in excludes)


def test_kuberay_rayjob_runs_a_shipped_config():
    job = yaml.safe_load((ROOT / "deploy" / "kuberay" / "rayjob.yaml").read_text())
    assert job["kind"] == "RayJob"
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:3] == ["python", "-m", "jobs.train"]
    config = argv[argv.index("--config") + 1]
    assert (ROOT / config).is_file(), f"{config} named by the RayJob is not in the repository"
    env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert env["env_vars"]["RG_STORAGE_ROOT"] == "/mnt/rg"
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert {"name": "rg-storage", "mountPath": "/mnt/rg"} in head["volumeMounts"]
    worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "1"
