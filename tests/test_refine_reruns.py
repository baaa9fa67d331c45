"""Refine reruns (issue 28): transient fallbacks asked again, an endpoint that never answers stops
the job, the API key is checked on the driver, `limit` means the first N questions, damaged label
parts are redone, and every LLM call lands in the usage journal."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from jobs import refine as refine_job
from rg.cli import run_job
from rg.data.rog import read_rog, write_rog_parquet
from rg.llm.journal import read_journal
from rg.jobs import refine as refine_module
from rg.jobs.refine import JOURNAL_FILE, RefineConfig, refine
from rg.data.labels import read_labels
from rg.run.ports import free_port
from tests.scripted_server import Reply, Respond, Script, ScriptedServer, Status
from tests.synthetic_data import write_synthetic_parquet


@pytest.fixture(scope="module")
def samples_file(tmp_path_factory) -> Path:
    """24 synthetic questions with their subgraphs, as one RoG parquet file."""
    path = tmp_path_factory.mktemp("reruns") / "samples.parquet"
    write_synthetic_parquet(path, questions=24, max_triples=300)
    return path


def llm_config(samples_file: Path, out: Path, base_url: str, **extra) -> RefineConfig:
    return RefineConfig.model_validate({
        "input": str(samples_file), "output_dir": str(out), "selector": "llm",
        "llm": {"llm": {"base_url": base_url, "model": "scripted", "max_concurrency": 4, "max_retries": 0}},
        "num_actors": 1, "actor_cpus": 0.25, "batch_size": 4, **extra,
    })


def write_yaml(path: Path, cfg: RefineConfig) -> Path:
    path.write_text(json.dumps({"kind": "refine", **cfg.model_dump(mode="json")}))  # JSON is YAML
    return path


@pytest.mark.mission  # 64 s; the LLM-fallback accounting
def test_transient_fallbacks_are_asked_again_and_counted(ray_local, samples_file, tmp_path):
    state = {"n": 0, "flaky": True}

    def answer(body: dict):
        state["n"] += 1
        if state["flaky"] and state["n"] % 3 == 0:
            return Status(503)
        return "ans: Path 1"

    with ScriptedServer(Script.always(Respond(answer))) as srv:
        cfg = llm_config(samples_file, tmp_path, srv.base_url)
        first = refine(cfg, progress=False)
        failed = {x.id for x in read_labels(tmp_path / "labels") if x.fallback_reason == "llm_server_error"}
        assert len(failed) == first["fallback_reasons"]["llm_server_error"] > 0
        before = len(srv.chat_requests)
        untouched = refine(cfg, progress=False, retry_fallbacks="none")
        assert len(srv.chat_requests) == before and untouched["retried"] == 0
        state["flaky"] = False
        second = refine(cfg, progress=False)
        assert len(srv.chat_requests) - before == len(failed)  # exactly the failed ones were asked again
    labels = {x.id: x for x in read_labels(tmp_path / "labels")}
    assert len(labels) == len(read_labels(tmp_path / "labels")) == second["questions"] == 24
    assert second["retried"] == len(failed)
    assert second["retried_now_refined"] == sum(labels[i].source == "refined" for i in failed) > 0
    assert "llm_server_error" not in second["fallback_reasons"]
    assert second["llm_usage_all_runs"]["total"]["calls"] == len(srv.chat_requests)
    assert second["llm_calls_not_written"] == 0


def test_endpoint_that_never_answers_stops_before_any_batch(ray_local, samples_file, tmp_path, capsys, job_line):
    url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    config = write_yaml(tmp_path / "job.yaml", llm_config(samples_file, tmp_path / "out", url))
    assert run_job("jobs.refine", refine_job.main, ["--config", str(config), "--no-progress"]) == 2
    err = job_line(capsys.readouterr().err, "jobs.refine")
    assert url in err and "did not answer the preflight probe" in err and "(connection: " in err
    assert not list((tmp_path / "out" / "labels").glob("part-*.parquet"))
    assert read_journal(tmp_path / "out" / JOURNAL_FILE).total().calls == 0  # the probe is no chat call


@pytest.mark.mission  # 26 s; an endpoint down for the whole run
def test_503_everywhere_then_recovery(ray_local, samples_file, tmp_path):
    """The probe passes (GET /v1/models answers), every chat call fails: the per-batch watch stops the run."""
    state = {"down": True}
    with ScriptedServer(Script.always(Respond(lambda body: Status(503) if state["down"] else "ans: Path 1"))) as srv:
        cfg = llm_config(samples_file, tmp_path, srv.base_url)
        with pytest.raises(refine_module.EndpointDownError, match="'llm_server_error'"):
            refine(cfg, progress=False)
        assert len(srv.chat_requests) <= 4
        state["down"] = False
        report = refine(cfg, progress=False)
    assert report["questions"] == 24 and report["refined"] > 15
    assert report["llm_usage_all_runs"]["total"]["calls"] == len(srv.chat_requests)
    assert report["llm_calls_not_written"] == report["llm_usage_all_runs"]["total"]["failures"] > 0


def test_api_key_is_checked_on_the_driver_before_ray(samples_file, tmp_path, capsys, monkeypatch, job_line):
    monkeypatch.delenv("RG_TEST_NO_SUCH_KEY", raising=False)

    def no_ray(*args, **kwargs):
        raise AssertionError("Ray must not start before the key is checked")

    monkeypatch.setattr(refine_module, "init_ray", no_ray)
    cfg = RefineConfig.model_validate({
        "input": str(samples_file), "output_dir": str(tmp_path), "selector": "llm",
        "llm": {"llm": {"base_url": "https://llm.example.com/v1", "model": "m", "api_key_env": "RG_TEST_NO_SUCH_KEY"}},
    })
    config = write_yaml(tmp_path / "job.yaml", cfg)
    assert run_job("jobs.refine", refine_job.main, ["--config", str(config), "--no-progress"]) == 2
    err = job_line(capsys.readouterr().err, "jobs.refine")
    assert "RG_TEST_NO_SUCH_KEY" in err


@pytest.mark.slow  # two job runs (26 s) for one rule
def test_limit_means_the_first_questions_of_the_input(ray_local, samples_file, tmp_path):
    ids = [s.id for s in read_rog(samples_file)]
    with ScriptedServer(Script.always(Reply("ans: Path 1"))) as srv:
        refine(llm_config(samples_file, tmp_path, srv.base_url, limit=5), progress=False)
        assert {x.id for x in read_labels(tmp_path / "labels")} == set(ids[:5])
        more = refine(llm_config(samples_file, tmp_path, srv.base_url, limit=9), progress=False)
    assert more["resumed"] == 5 and {x.id for x in read_labels(tmp_path / "labels")} == set(ids[:9])


@pytest.mark.mission  # 32 s; integrity of the labels parts
def test_damaged_label_part_is_dropped_and_redone(ray_local, samples_file, tmp_path):
    with ScriptedServer(Script.always(Reply("ans: Path 1"))) as srv:
        cfg = llm_config(samples_file, tmp_path, srv.base_url)
        refine(cfg, progress=False)
        part = sorted((tmp_path / "labels").glob("part-*.parquet"))[0]
        lost = {x.id for x in read_labels(part)}
        reference = {x.id: x for x in read_labels(tmp_path / "labels")}
        os.truncate(part, part.stat().st_size - 20)
        before = len(srv.chat_requests)
        report = refine(cfg, progress=False)
        assert len(srv.chat_requests) - before == sum(reference[i].prompt_tokens > 0 for i in lost)
    assert [d["part"] for d in report["damaged_parts"]] == [str(part)]
    assert report["this_run"] == len(lost) and report["questions"] == 24
    assert {x.id: x for x in read_labels(tmp_path / "labels")} == reference
    assert (tmp_path / "labels" / f".damaged-{part.name}").exists()


def test_repeated_question_ids_are_counted_and_labelled_once(ray_local, samples_file, tmp_path):
    samples = list(read_rog(samples_file))[:6]
    doubled = tmp_path / "doubled.parquet"
    write_rog_parquet([*samples, samples[2], samples[4]], doubled)
    with ScriptedServer(Script.always(Reply("ans: Path 1"))) as srv:
        report = refine(llm_config(doubled, tmp_path / "out", srv.base_url), progress=False)
    rows = read_labels(tmp_path / "out" / "labels")
    assert sorted(x.id for x in rows) == sorted(s.id for s in samples)
    assert report["bad_input_rows"] == {"duplicate_id": 2} and report["duplicate_ids"] == 0


def test_parts_without_stats_are_adopted_when_their_footer_reads(tmp_path):
    from rg.supervision.label_store import scan_parts, stats_path
    from rg.data.labels import Labels, write_labels

    row = Labels(id="q", positive_triples=(0,), paths=("p",), relation_paths=(("r",),), source="refined", selector="s")
    write_labels([row], tmp_path / "part-old.parquet")  # as written before parts had stats
    write_labels([row], tmp_path / "part-cut.parquet")
    os.truncate(tmp_path / "part-cut.parquet", 40)
    parts, damaged = scan_parts(tmp_path)
    assert [(p.path.name, p.rows, p.llm_calls) for p in parts] == [("part-old.parquet", 1, 0)]
    assert stats_path(tmp_path / "part-old.parquet").is_file()
    assert [Path(d["part"]).name for d in damaged] == ["part-cut.parquet"]
    assert "not a readable parquet file" in damaged[0]["reason"]
