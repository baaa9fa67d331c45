"""The preflight probe (issue 28): an LLM endpoint that never answers costs the probe's bounded
requests and no chat completion, before any Ray work; one that recovers runs. Against the
scripted server on 127.0.0.1."""

from __future__ import annotations

import random

import pytest

from jobs import refine as refine_job
from rg.cli import run_job
from rg.config import validate_config
from rg.jobs import evaluate_qa as qa_job
from rg.llm.config import LLMConfig
from rg.llm.probe import EndpointDownError, probe_endpoint
from rg.jobs import refine as refine_module
from rg.data.labels import read_labels
from tests.scripted_server import Reply, Script, ScriptedServer, Status
from rg.run.ports import free_port
from tests.test_refine_reruns import llm_config, samples_file, write_yaml  # noqa: F401 — fixture

DOWN = Script.always(Reply("ans: Path 1"), models=Status(503, message="upstream down"))
UP = Script.always(Reply("ans: Path 1"))


def endpoint(url: str, **extra) -> LLMConfig:
    return LLMConfig(base_url=url, model="scripted", max_retries=2, backoff_s=0.001, timeout_s=5.0, **extra)


def gets(srv: ScriptedServer) -> list[str]:
    return [f"{r.method} {r.path}" for r in srv.requests]


@pytest.fixture
def no_ray(monkeypatch):
    """Ray must not start while the probe fails (refine and QA evaluation)."""

    def refuse(*args, **kwargs):
        raise AssertionError("Ray started before the endpoint was probed")

    monkeypatch.setattr(refine_module, "init_ray", refuse)
    monkeypatch.setattr(qa_job, "init_ray", refuse)


def test_probe_retries_boundedly_and_names_the_endpoint():
    with ScriptedServer(DOWN) as srv:
        with pytest.raises(EndpointDownError) as err:
            probe_endpoint(endpoint(srv.base_url), key="llm.llm", rng=random.Random(0))
        assert gets(srv) == ["GET /v1/models"] * 3 and srv.chat_requests == []  # 1 + max_retries, no chat
        message = str(err.value)
        assert f"{srv.base_url}/models in 3 attempts (server_error: HTTP 503" in message
        assert "`llm.llm.base_url`" in message and "\n" not in message
        srv.reset(UP)
        assert probe_endpoint(endpoint(srv.base_url), key="llm.llm") == 1
        assert gets(srv) == ["GET /v1/models"]


def test_probe_refuses_a_rejected_key_at_once_and_accepts_any_other_answer(monkeypatch):
    with ScriptedServer(Script.always(Reply("x"), models=Status(401))) as srv:
        monkeypatch.setenv("RG_PROBE_KEY", "wrong")
        with pytest.raises(EndpointDownError, match=r"refused the API key .*HTTP 401.*\$RG_PROBE_KEY"):
            probe_endpoint(endpoint(srv.base_url, api_key_env="RG_PROBE_KEY"), key="reader.llm")
        assert len(srv.requests) == 1
        srv.reset(Script.always(Reply("x"), models=Status(404)))  # a server that lists no models is up
        assert probe_endpoint(endpoint(srv.base_url), key="reader.llm") == 1
    with pytest.raises(EndpointDownError, match=r"in 3 attempts \(connection: "):
        probe_endpoint(endpoint(f"http://127.0.0.1:{free_port()}/v1"), key="llm.llm")  # nothing listens


def test_refine_with_a_dead_endpoint_exits_2_before_ray_then_runs_when_it_recovers(
    ray_local, samples_file, tmp_path, capsys, job_line, monkeypatch, no_ray  # noqa: F811
):
    with ScriptedServer(DOWN) as srv:
        cfg = llm_config(samples_file, tmp_path / "out", srv.base_url)
        cfg = cfg.model_copy(update={"llm": cfg.llm.model_copy(update={"llm": endpoint(srv.base_url)})})
        config = write_yaml(tmp_path / "job.yaml", cfg)
        assert run_job("jobs.refine", refine_job.main, ["--config", str(config), "--no-progress"]) == 2
        line = job_line(capsys.readouterr().err, "jobs.refine")
        assert f"LLM endpoint {srv.base_url} (model scripted) did not answer the preflight probe" in line
        assert gets(srv) == ["GET /v1/models"] * 3 and srv.chat_requests == []
        assert not list((tmp_path / "out" / "labels").glob("part-*.parquet"))
        monkeypatch.undo()  # Ray may start now
        srv.reset(UP)
        assert run_job("jobs.refine", refine_job.main, ["--config", str(config), "--no-progress"]) == 0
        assert gets(srv)[0] == "GET /v1/models" and len(srv.chat_requests) == 24
    assert len(read_labels(tmp_path / "out" / "labels")) == 24


def test_qa_evaluation_probes_the_llm_reader_and_the_llm_brain_before_ray(tmp_path, no_ray):
    from rg.data.rog import write_rog_parquet
    from tests.test_qa_eval import SAMPLES

    write_rog_parquet(list(SAMPLES), tmp_path / "samples.parquet")
    base = {"input": str(tmp_path / "samples.parquet"), "output_dir": str(tmp_path / "out"), "side": "all"}
    with ScriptedServer(DOWN) as srv:
        llm = endpoint(srv.base_url).model_dump(mode="json")
        reader = validate_config({**base, "retriever": {"kind": "hop_distance"},
                                  "reader": {"kind": "llm", "llm": llm}}, qa_job.QAEvaluateConfig)
        with pytest.raises(EndpointDownError, match=r"did not answer the preflight probe.*`reader\.llm\.base_url`"):
            qa_job.evaluate_qa(reader, progress=False)
        brain = validate_config({**base, "reasoner": "dualtower", "dualtower": {
            "brain": {"kind": "llm", "llm": {**llm, "side": "brain"}}}}, qa_job.QAEvaluateConfig)
        with pytest.raises(EndpointDownError, match=r"`dualtower\.brain\.llm\.base_url`"):
            qa_job.evaluate_qa(brain, progress=False)
        assert gets(srv) == ["GET /v1/models"] * 6 and srv.chat_requests == []
