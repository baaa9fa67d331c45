"""The Ray Data refinement job end to end: local selector, LLM selector, resume after a kill."""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from rg.data.rog import read_rog
from rg.jobs.refine import EndpointWatch, RefineConfig, _SelectorActor, refine
from rg.data.labels import read_labels
from rg.supervision.refine import prepare_question
from tests.scripted_server import Reply, Respond, Script, ScriptedServer
from tests.synthetic_data import write_synthetic_parquet

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def samples_file(tmp_path_factory) -> Path:
    """40 synthetic questions with their subgraphs, as one RoG parquet file."""
    path = tmp_path_factory.mktemp("refine") / "samples.parquet"
    write_synthetic_parquet(path, questions=40, max_triples=400)
    return path


def by_id(folder: Path) -> dict:
    return {x.id: x for x in read_labels(folder)}


def test_similarity_job_labels_every_question_and_resumes(ray_local, samples_file, tmp_path, monkeypatch):
    cfg = RefineConfig(input=str(samples_file), output_dir=str(tmp_path), batch_size=8)
    report = refine(cfg, progress=False)
    assert report["questions"] == report["this_run"] == 40 and report["duplicate_ids"] == 0
    assert report["refined"] + report["weak_fallback"] == 40 and report["refined"] > 30
    assert report["selector"].startswith("similarity:") and report["prompt_ids"] == []
    assert report["mean_pool_before"] >= report["mean_pool_after"] > 0

    def no_pass(*args, **kwargs):
        raise AssertionError("a rerun with every question labelled started a Ray Data pass")

    import rg.jobs.refine as job

    monkeypatch.setattr(job, "_labelled", no_pass)
    again = refine(cfg, progress=False)
    assert (again["this_run"], again["resumed"], again["questions"], again["duplicate_ids"]) == (0, 40, 40, 0)


@pytest.mark.mission  # 35 s of Ray Data; the resume test above keeps the job in the default run
def test_split_limits_the_job_to_the_chosen_sides(ray_local, samples_file, tmp_path):
    ids = sorted(s.id for s in read_rog(samples_file))
    split_file = tmp_path / "split.json"
    split_file.write_text(json.dumps({"unit": "id", "splits": {"train": ids[:5], "val": ids[5:7], "test": ids[7:]}}))
    cfg = RefineConfig.model_validate({
        "input": str(samples_file), "output_dir": str(tmp_path / "out"), "batch_size": 4,
        "split": {"file": str(split_file), "max_questions": {"train": 3}}, "sides": ["train", "val"],
    })
    report = refine(cfg, progress=False)
    labelled = set(by_id(tmp_path / "out" / "labels"))
    assert report["questions"] == 5 and len(labelled) == 5
    assert labelled >= set(ids[5:7]) and len(labelled & set(ids[:5])) == 3


def test_llm_job_counts_calls_and_tokens(ray_local, samples_file, tmp_path):
    with ScriptedServer(Script.always(Reply("ans: Path 1"))) as srv:
        cfg = RefineConfig.model_validate({
            "input": str(samples_file), "output_dir": str(tmp_path), "selector": "llm",
            "llm": {"llm": {"base_url": srv.base_url, "model": "scripted", "max_concurrency": 4}},
            "num_actors": 2, "actor_cpus": 0.25, "batch_size": 8,
        })
        report = refine(cfg, progress=False)
        requests = len(srv.chat_requests)
    labels = by_id(tmp_path / "labels")
    assert len(labels) == 40 and report["duplicate_ids"] == 0
    assert report["prompt_ids"] == ["select_paths@v1"] and report["selector"] == "llm:scripted"
    calls = report["llm_usage_this_run"]["total"]["calls"]
    assert calls == requests == sum(1 for x in labels.values() if x.prompt_tokens > 0)
    assert report["prompt_tokens"] == report["llm_usage_this_run"]["total"]["prompt_tokens"] > 0
    assert report["refined"] == sum(1 for x in labels.values() if x.source == "refined") > 30


def slow_llm_config(samples_file: Path, out: Path, base_url: str) -> dict:
    return {
        "input": str(samples_file), "output_dir": str(out), "selector": "llm",
        "llm": {"llm": {"base_url": base_url, "model": "scripted", "max_concurrency": 2}},
        "num_actors": 1, "actor_cpus": 0.25, "batch_size": 4, "ray": {"num_cpus": 2},
    }


def run_job(config: Path) -> subprocess.Popen:
    """``python -m jobs.refine`` in its own process group (so a kill takes its Ray with it)."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    return subprocess.Popen([sys.executable, "-m", "jobs.refine", "--config", str(config), "--no-progress"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


@pytest.mark.mission  # SIGKILL and resume of the refine job
@pytest.mark.slow  # a SIGKILLed job midway (85 s); the similarity job's resume test stays in the default run
def test_killed_job_resumes_to_the_same_labels(ray_local, samples_file, tmp_path):
    def answer(body: dict) -> Reply:  # deterministic per prompt, slow enough to be killed midway
        n = body["messages"][-1]["content"].split("Task:", 1)[1].count("\nPath ")
        return Reply(f"ans: Path {1 + len(body['messages'][-1]['content']) % max(n, 1)}", delay_s=0.15)

    with ScriptedServer(Script.always(Respond(answer))) as srv:
        reference = tmp_path / "reference"
        refine(RefineConfig.model_validate(slow_llm_config(samples_file, reference, srv.base_url)), progress=False)
        reference_requests = len(srv.chat_requests)

        out = tmp_path / "killed"
        config = tmp_path / "job.yaml"
        config.write_text(yaml.safe_dump({"kind": "refine", **slow_llm_config(samples_file, out, srv.base_url)}))
        proc = run_job(config)
        deadline = time.monotonic() + 600  # a loaded machine can take minutes to start Ray and the actors
        while not list((out / "labels").glob("part-*.parquet")) and time.monotonic() < deadline:
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        assert list((out / "labels").glob("part-*.parquet")), "the job wrote no label part within 600 s"
        partial = by_id(out / "labels")
        assert 0 < len(partial) < 40, "the job should have been killed halfway"

        finish = run_job(config)
        output = finish.communicate(timeout=240)[0].decode()
        assert finish.returncode == 0, output
        requests = len(srv.chat_requests) - reference_requests  # both runs into `out`, the killed one included
    report = json.loads((out / "refine_report.json").read_text())
    all_runs = report["llm_usage_all_runs"]["total"]["calls"]
    assert all_runs == requests > report["llm_usage_this_run"]["total"]["calls"]
    answered_and_kept = sum(1 for x in read_labels(out / "labels") if x.prompt_tokens > 0)
    assert report["llm_calls_not_written"] == all_runs - answered_and_kept
    assert f"resumed {len(partial)}" in output
    final, expected = by_id(out / "labels"), by_id(reference / "labels")
    assert len(read_labels(out / "labels")) == 40  # no duplicates across part files
    assert final == expected


def test_selector_crash_falls_back_to_weak_labels(samples_file):
    """A selector that raises (not an LLM error) still yields a weak label with the reason."""

    class Exploding:
        name = "exploding"

        async def select(self, sample, pool):
            raise RuntimeError("boom")

    actor = _SelectorActor.__new__(_SelectorActor)
    actor.selector = Exploding()
    actor.endpoint = EndpointWatch()
    sample = next(iter(read_rog(samples_file)))
    batch = {"kind": np.array(["sample"], dtype=object),
             "payload": np.array([pickle.dumps((sample, prepare_question(sample)))], dtype=object)}
    out = asyncio.run(actor(batch))
    label = pickle.loads(out["payload"][0])
    assert label.source == "weak" and label.fallback_reason == "selector_error:RuntimeError"
