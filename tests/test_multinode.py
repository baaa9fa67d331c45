"""Multi-node faults on a local ``ray.cluster_utils.Cluster`` (issue 23).

A head node (CPUs for the drivers' Ray Data tasks, the Train controller) and two worker nodes
that offer a custom resource, so that the Ray Train workers or the refine job's selector actors
land on them and nowhere else. A worker node is removed (its processes killed, no graceful drain)
mid-run and a replacement node offering the same resource is added:

- a Ray Train retriever run (2 DDP workers, ``max_failures: 1``) restarts its worker group and
  continues from its last registered checkpoint: every epoch once, in order, and the export loads;
- a refine job (local similarity selector) loses a node hosting a selector actor after its first
  labels part: Ray Data restarts the actor on the replacement node and retries its batches, so the
  run itself ends with every question labelled once; resubmitted, it finds nothing left to do, and
  the labels equal an undisturbed run's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from rg.retrievers.registry import load_retriever
from rg.jobs.refine import RefineConfig, refine
from rg.data.labels import read_labels
from rg.jobs.harness import REPORT_FILE
from rg.run.ports import free_ports
from tests.conftest import start_local_ray
from tests.ray_cluster import registered_epoch, short_temp_dir
from tests.test_refine_job import samples_file  # noqa: F401 — fixture: 40 synthetic questions with subgraphs
from tests.test_training_ray import encoder_cache  # noqa: F401 — fixture

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.mission]  # node loss: CI's second step

PLACE = "rg_place"
"""The custom resource only the worker nodes offer (one unit each)."""


@pytest.fixture
def cluster(ray_free) -> Iterator:
    """A head with 2 CPUs and two worker nodes with 1 CPU and one ``PLACE`` each; this process connected."""
    import ray
    from ray.cluster_utils import Cluster

    temp = short_temp_dir("nodes")
    (gcs,) = free_ports(1)
    nodes = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "gcs_server_port": gcs, "temp_dir": str(temp), "include_dashboard": False})
    try:
        for _ in range(2):
            nodes.add_node(num_cpus=1, resources={PLACE: 1})
        nodes.wait_for_nodes()
        nodes.connect()
        assert ray.get_runtime_context().get_node_id() == nodes.head_node.node_id, "the driver is not on the head"
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def ray_free():
    """No Ray of an earlier test in this process during the test; the session's local Ray is back after it."""
    import ray

    was_running = ray.is_initialized()
    ray.shutdown()
    yield
    if was_running:  # later tests hold the session's ``ray_local``: give them a live local Ray again
        ray.shutdown()
        start_local_ray()


def run_job(module: str, settings: dict, folder: Path, address: str, *args: str) -> subprocess.Popen:
    """``python -m <module>`` with a config file of ``settings``, joining the cluster at ``address``."""
    config = folder / f"{module.rsplit('.', 1)[1]}.yaml"
    config.write_text(yaml.safe_dump(settings))
    env = {**os.environ, "RAY_ADDRESS": address, "RAY_AUTH_MODE": "disabled"}
    return subprocess.Popen([sys.executable, "-m", module, "--config", str(config), *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def lose_a_worker_node(cluster, job: subprocess.Popen, ready: Callable[[], bool], timeout: float = 600.0) -> None:
    """Once ``ready()`` holds, kill a worker node's processes (no graceful drain) and add a replacement like it.

    Runs in the test's main thread (starting a node installs signal handlers).
    """
    deadline = time.monotonic() + timeout
    while not ready():
        assert job.poll() is None, f"the job ended before the node loss:\n{job.communicate()[0][-3000:]}"
        assert time.monotonic() < deadline, f"the job did not reach the point of the node loss within {timeout:.0f} s"
        time.sleep(0.1)
    victim = sorted(cluster.worker_nodes, key=lambda n: n.node_id)[0]
    cluster.remove_node(victim, allow_graceful=False)
    cluster.add_node(num_cpus=1, resources={PLACE: 1})


def finish(job: subprocess.Popen, timeout: float = 900.0) -> str:
    output = job.communicate(timeout=timeout)[0]
    assert job.returncode == 0, output[-4000:]
    return output


def test_train_run_survives_the_loss_of_a_worker_node(cluster, synthetic_parquet, encoder_cache, tmp_path):  # noqa: F811
    storage = tmp_path / "ray_results"
    epochs = 30
    settings = {
        "kind": "train",
        "input": str(synthetic_parquet),
        "retriever": {"kind": "mlp", "hidden": 16},
        "encoder": {"cache_dir": str(encoder_cache)},
        "train": {"epochs": epochs, "questions_per_batch": 1, "eval_ks": [10, 100]},
        "num_workers": 2,
        "resources_per_worker": {"CPU": 0, PLACE: 1},  # one worker on each worker node
        "max_failures": 1,
        "keep_checkpoints": epochs,  # every registered checkpoint stays listed in the run's snapshot
        "run_name": "node_loss",
        "storage_path": str(storage),
        "output_dir": str(tmp_path / "out"),
    }
    job = run_job("jobs.train", settings, tmp_path, cluster.address)
    seen: list[int] = []

    def a_checkpoint_registered() -> bool:
        epoch = registered_epoch(storage / "node_loss")
        seen.extend([] if epoch is None else [epoch])
        return epoch is not None

    lose_a_worker_node(cluster, job, a_checkpoint_registered)
    finish(job)
    report = json.loads((tmp_path / "out" / REPORT_FILE).read_text())

    history = [int(row["epoch"]) for row in report["history"]]
    assert history == list(range(epochs)), f"epochs not each once and in order: {history}"
    assert report["resumed"] is True, "the worker group was not restarted from a checkpoint"
    start = report["start_epoch"]
    assert seen[-1] < start < epochs, (seen[-1], start)
    assert report["epochs_run"] == list(range(start, epochs))
    assert {row["start_epoch"] for row in report["history"][:start]} == {0.0}
    assert {row["start_epoch"] for row in report["history"][start:]} == {float(start)}
    snapshot = json.loads((storage / "node_loss" / "checkpoint_manager_snapshot.json").read_text())
    first_attempt = [int(r["metrics"]["epoch"]) for r in snapshot["checkpoint_results"]
                     if r["metrics"]["start_epoch"] == 0]
    assert max(first_attempt) == start - 1, "the run did not resume from the last checkpoint before the loss"
    assert all(row["world_size"] == 2 for row in report["history"])
    assert load_retriever(report["retriever_dir"]).meta.extra["run_name"] == "node_loss"


def test_refine_job_rerun_after_a_node_loss_labels_every_question_once(cluster, samples_file, tmp_path):  # noqa: F811
    def settings(out: Path) -> dict:
        return {"input": str(samples_file), "output_dir": str(out), "batch_size": 2,
                "num_actors": 2, "actor_cpus": 0.5, "actor_resources": {PLACE: 1}}  # one actor on each worker node

    reference = refine(RefineConfig.model_validate(settings(tmp_path / "reference")), progress=False)
    assert reference["questions"] == 40 and reference["duplicate_ids"] == 0

    out = tmp_path / "lost"
    labelled_at_loss: list[int] = []

    def some_labels_written() -> bool:
        if list((out / "labels").glob("part-*.parquet")):
            labelled_at_loss.append(len(read_labels(out / "labels")))
        return bool(labelled_at_loss)

    first = run_job("jobs.refine", {"kind": "refine", **settings(out)}, tmp_path, cluster.address, "--no-progress")
    lose_a_worker_node(cluster, first, some_labels_written)
    assert labelled_at_loss[0] < 40, "the job had labelled every question before the node was lost"
    # Ray Data restarts the lost selector actor on the replacement node and retries its batches
    finish(first)
    assert len(read_labels(out / "labels")) == 40, "the run that lost a node lost or repeated questions"

    again = run_job("jobs.refine", {"kind": "refine", **settings(out)}, tmp_path, cluster.address, "--no-progress")  # resubmitted
    finish(again)
    report = json.loads((out / "refine_report.json").read_text())
    labels = read_labels(out / "labels")
    ids = [x.id for x in labels]
    assert len(ids) == len(set(ids)) == 40, "questions lost or labelled twice"
    assert report["questions"] == 40 and report["duplicate_ids"] == 0
    assert (report["resumed"], report["this_run"]) == (40, 0), "the resubmission found questions left to label"
    assert {x.id: x for x in labels} == {x.id: x for x in read_labels(tmp_path / "reference" / "labels")}
