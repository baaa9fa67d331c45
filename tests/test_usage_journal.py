"""The usage journal (rg.llm.journal) of every LLM stage after refine: the QA evaluation's LLM
reader, the dual tower's LLM Brain (per side) and the Serve BrainProxy, against scripted
OpenAI-compatible servers on 127.0.0.1; a QA run SIGKILLed mid-way and run again books both runs'
answered calls, exactly what the server answered."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from rg.config import validate_config
from rg.data.rog import write_rog_parquet
from rg.data.sample import Sample
from rg.evaluation.qa_job import QAEvaluateConfig, evaluate_qa, format_qa
from rg.llm.client import LLMError, OpenAICompatibleClient
from rg.llm.config import LLMConfig
from rg.llm.journal import JOURNAL_FILE, UsageJournal, read_journal, usage_by_side
from rg.llm.usage import Usage
from rg.privacy import brain_client
from rg.privacy.config import PrivacyConfig
from rg.privacy.session import PrivacySession
from rg.reasoning.dualtower.payload import AnalysisPayload, TopicView
from tests.dualtower_world import QUESTIONS, schema, write_qa_input
from tests.scripted_server import Reply, Respond, Script, ScriptedServer, Status
from tests.synthetic_data import write_synthetic_parquet
from tests.test_dualtower_wire import brain as scripted_brain

ROOT = Path(__file__).resolve().parents[1]
ZERO = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "calls": 0, "retries": 0, "failures": 0,
        "latency_s": 0.0}


def entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_side_books_its_own_entries_and_sums_per_side(tmp_path):
    """A Hand client and a guarded Brain client write one journal; each line names its side."""
    journal = UsageJournal(tmp_path / JOURNAL_FILE, run="r1")
    hand_steps = [Reply("h1", prompt_tokens=10, completion_tokens=1), Reply("h2", prompt_tokens=20, completion_tokens=2)]
    brain_steps = [Reply("b1", prompt_tokens=100, completion_tokens=5), Status(400, message="bad request")]
    with ScriptedServer(hand_steps) as hand_srv, ScriptedServer(brain_steps) as brain_srv:
        hand = OpenAICompatibleClient(LLMConfig(base_url=hand_srv.base_url, model="h", max_retries=0), journal=journal)
        with PrivacySession(PrivacyConfig(mode="plaintext"), schema()) as session:
            brain = brain_client(LLMConfig(base_url=brain_srv.base_url, model="b", side="brain", max_retries=0),
                                 session, journal=journal)

            async def calls() -> None:
                message = [{"role": "user", "content": "q"}]
                await hand.complete(message, stage="read", prompt_id="p@v1")
                await brain.complete(message, stage="brain_analyse", prompt_id="a@v1")
                await hand.complete(message, stage="read", prompt_id="p@v1")
                with pytest.raises(LLMError, match="client_error"):
                    await brain.complete(message, stage="brain_select", prompt_id="s@v1")

            asyncio.run(calls())
    lines = entries(tmp_path / JOURNAL_FILE)
    assert [(e["run"], e["stage"], e["side"]) for e in lines] == [
        ("r1", "read", "hand"), ("r1", "brain_analyse", "brain"), ("r1", "read", "hand"), ("r1", "brain_select", "brain")]
    assert [(e["usage"]["prompt_tokens"], e["usage"]["calls"], e["usage"]["failures"]) for e in lines] == [
        (10, 1, 0), (100, 1, 0), (20, 1, 0), (0, 1, 1)]
    sides = usage_by_side(read_journal(tmp_path / JOURNAL_FILE))
    assert (sides["hand"]["calls"], sides["hand"]["prompt_tokens"], sides["hand"]["completion_tokens"]) == (2, 30, 3)
    assert (sides["brain"]["calls"], sides["brain"]["failures"], sides["brain"]["prompt_tokens"]) == (2, 1, 100)
    assert usage_by_side(read_journal(tmp_path / "absent.jsonl")) == {"hand": ZERO, "brain": ZERO}


# ------------------------------------------------------------------------------ the QA evaluation's LLM reader
READER_SAMPLES = [
    Sample(id="a", question="Who directed Film1?", answers=("Ann",), q_entities=("Film1",), a_entities=("Ann",),
           triples=(("Film1", "directed_by", "Ann"), ("Film1", "starring", "Bob")), hops=1),
    Sample(id="b", question="Where was Bob born?", answers=("Paris",), q_entities=("Bob",), a_entities=("Paris",),
           triples=(("Bob", "born_in", "Paris"),), hops=1),
]


def read_reply(body: dict) -> Reply:
    last = body["messages"][-1]["content"]
    if "Film1" in last:
        return Reply("ans: Ann", prompt_tokens=100, completion_tokens=2)
    if "Bob born" in last:
        return Reply("Bob was born in Paris.", prompt_tokens=90, completion_tokens=5)  # no ans: line
    return Reply("ans: Paris", prompt_tokens=150, completion_tokens=2)  # the follow-up


def test_qa_llm_reader_journals_every_call_and_sums_all_runs(ray_local, tmp_path):
    write_rog_parquet(READER_SAMPLES, tmp_path / "samples.parquet")
    out = tmp_path / "out"
    with ScriptedServer(Script.always(Respond(read_reply))) as srv:
        cfg = validate_config({
            "input": str(tmp_path / "samples.parquet"), "output_dir": str(out), "side": "all",
            "retriever": {"kind": "hop_distance"}, "evidence": {"max_length": 1}, "num_actors": 1,
            "actor_cpus": 0.5, "batch_size": 2,
            "reader": {"kind": "llm", "llm": {"base_url": srv.base_url, "model": "scripted", "max_retries": 0}},
        }, QAEvaluateConfig)
        first = evaluate_qa(cfg, progress=False)
        assert len(srv.chat_requests) == 3  # a: 1, b: 2 (follow-up)
        second = evaluate_qa(cfg, progress=False)
        requests = len(srv.chat_requests)
    lines = entries(out / JOURNAL_FILE)
    assert requests == 6 and len(lines) == 6
    runs = [first.run["run_id"], second.run["run_id"]]
    assert runs[0] != runs[1] and sorted(e["run"] for e in lines) == sorted(runs * 3)
    assert {(e["stage"], e["side"]) for e in lines} == {("read", "hand")}
    assert sorted(e["usage"]["prompt_tokens"] for e in lines if e["run"] == runs[0]) == [90, 100, 150]
    assert all(e["usage"]["calls"] == 1 and e["usage"]["failures"] == 0 for e in lines)
    run = second.run
    assert run["llm_usage_this_run"]["stages"]["read"]["hand"]["calls"] == 3
    assert run["llm_usage_this_run"]["total"]["prompt_tokens"] == 340 == second.summary.usage.prompt_tokens
    assert run["llm_usage_all_runs"]["total"]["calls"] == 6 and run["llm_usage_all_runs"]["total"]["prompt_tokens"] == 680
    assert run["llm_usage_all_runs_by_side"] == {"hand": run["llm_usage_all_runs"]["total"], "brain": ZERO}
    saved = json.loads(second.files.json.read_text())["run"]
    assert saved["llm_usage_all_runs"] == run["llm_usage_all_runs"] and saved["llm_journal"] == str(out / JOURNAL_FILE)
    assert "LLM calls this run 3 (failures 0, tokens 340+9); all runs into this folder: hand 6 calls 680+18 tokens" \
        in format_qa(second)


# ------------------------------------------------------------------------------ a SIGKILLed QA run, then the rerun
def kill_config(samples: Path, out: Path, base_url: str) -> dict:
    return {
        "kind": "evaluate_qa", "input": str(samples), "output_dir": str(out), "side": "all",
        "retriever": {"kind": "hop_distance"}, "evidence": {"max_length": 1},
        "reader": {"kind": "llm", "follow_up": False,
                   "llm": {"base_url": base_url, "model": "scripted", "max_retries": 0, "max_concurrency": 1,
                           "timeout_s": 120.0}},
        "num_actors": 1, "actor_cpus": 0.25, "batch_size": 2, "ray": {"num_cpus": 2},
    }


def start_job(config: Path) -> subprocess.Popen:
    """``python -m jobs.evaluate`` in its own process group (so a kill takes its Ray with it)."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    return subprocess.Popen([sys.executable, "-m", "jobs.evaluate", "--config", str(config), "--no-progress"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)


def session_alive(sid: int) -> bool:
    """Whether a live (not zombie) process of session ``sid`` remains: the job's Ray workers are in
    its session but in process groups of their own, so a kill of the job's group leaves them to die
    when they lose their raylet."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if state[0] != "Z" and int(state[3]) == sid:  # fields after the command: state, ppid, pgrp, session
            return True
    return False


def wait_for(condition, what: str, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s  # a loaded machine can take minutes to start Ray and the actors
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.slow  # two job processes, each starting its own Ray (150 s at load 20 on 2 CPUs)
def test_killed_qa_run_and_its_rerun_book_exactly_what_the_server_answered(tmp_path):
    samples = write_synthetic_parquet(tmp_path / "samples.parquet", questions=10, max_triples=200).samples
    out, journal = tmp_path / "out", tmp_path / "out" / JOURNAL_FILE
    held, release = 4, threading.Event()
    seen: list[int] = []
    lock = threading.Lock()

    def answer(body: dict) -> Reply:  # the 4th call is held until the job is dead: it is never answered
        with lock:
            seen.append(1)
            n = len(seen)
        if n == held:
            release.wait(timeout=600)
        return Reply("ans: nobody", prompt_tokens=50, completion_tokens=2)

    with ScriptedServer(Script.always(Respond(answer))) as srv:
        config = tmp_path / "job.yaml"
        config.write_text(yaml.safe_dump(kill_config(tmp_path / "samples.parquet", out, srv.base_url)))
        proc = start_job(config)
        try:
            wait_for(lambda: len(srv.chat_requests) >= held and journal.is_file()
                     and len(entries(journal)) == held - 1, "the held call")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            try:  # the actor waiting on the held call dies with its raylet; only then is the reply sent
                wait_for(lambda: not session_alive(proc.pid), "the killed job's Ray workers to exit", 120.0)
            finally:
                release.set()
        time.sleep(1.0)  # the held reply went to a dead client: nothing more may be booked
        killed = entries(journal)
        assert len(killed) == held - 1 and len({e["run"] for e in killed}) == 1

        rerun = start_job(config)
        output = rerun.communicate(timeout=300)[0].decode()
        assert rerun.returncode == 0, output
        received = len(srv.chat_requests)
    answered = received - 1  # all but the held one
    assert received == held + len(samples)
    run = json.loads((out / "qa.json").read_text())["run"]
    assert run["llm_usage_this_run"]["total"]["calls"] == len(samples)
    assert run["llm_usage_all_runs"]["total"]["calls"] == answered == held - 1 + len(samples)
    assert run["llm_usage_all_runs"]["total"]["prompt_tokens"] == 50 * answered
    assert run["llm_usage_all_runs_by_side"]["hand"]["calls"] == answered and run["llm_usage_all_runs_by_side"]["brain"] == ZERO
    by_run = {}
    for e in entries(journal):
        by_run[e["run"]] = by_run.get(e["run"], 0) + 1
    assert by_run == {killed[0]["run"]: held - 1, run["run_id"]: len(samples)}
    assert f"all runs into this folder: hand {answered} calls" in output


# ------------------------------------------------------------------------------ the dual tower's LLM Brain
def test_dualtower_llm_brain_books_brain_side_entries_and_sums_every_run_per_side(ray_local, tmp_path):
    write_qa_input(tmp_path, QUESTIONS[:4])
    out = tmp_path / "out"
    earlier = UsageJournal(out / JOURNAL_FILE, run="earlier")  # what a killed earlier run left
    earlier.append("brain_analyse", "brain", Usage(prompt_tokens=7, completion_tokens=1, total_tokens=8, calls=1))
    earlier.append("read", "hand", Usage(prompt_tokens=11, completion_tokens=2, total_tokens=13, calls=2))
    with ScriptedServer(Script.always(Respond(scripted_brain))) as srv:
        cfg = validate_config({
            "input": str(tmp_path / "samples.parquet"), "output_dir": str(out), "side": "all",
            "reasoner": "dualtower", "schema_dir": str(tmp_path), "num_actors": 1, "actor_cpus": 0.5, "batch_size": 4,
            "dualtower": {"privacy": {"mode": "utility"}, "similarity": "lexical",
                          "brain": {"kind": "llm", "reasks": 1,
                                    "llm": {"base_url": srv.base_url, "model": "scripted", "side": "brain",
                                            "max_retries": 0, "timeout_s": 10.0}}},
        }, QAEvaluateConfig)
        result = evaluate_qa(cfg, progress=False)
        requests = len(srv.chat_requests)
    lines = [e for e in entries(out / JOURNAL_FILE) if e["run"] == result.run["run_id"]]
    assert len(lines) == requests >= len(QUESTIONS[:4]) and len(entries(out / JOURNAL_FILE)) == requests + 2
    assert {e["side"] for e in lines} == {"brain"}
    assert "brain_analyse" in {e["stage"] for e in lines} and {e["stage"] for e in lines} <= {"brain_analyse",
                                                                                                "brain_select"}
    per_question = sum(json.loads(r)["usage"]["calls"] for r in result.files.predictions.read_text().splitlines())
    run = result.run
    assert run["llm_usage_this_run"]["total"]["calls"] == per_question == requests
    assert set(run["llm_usage_this_run"]["stages"]["brain_analyse"]) == {"brain"}
    sides = run["llm_usage_all_runs_by_side"]
    brain_tokens = sum(e["usage"]["prompt_tokens"] for e in lines)
    assert (sides["brain"]["calls"], sides["brain"]["prompt_tokens"]) == (requests + 1, brain_tokens + 7)
    assert (sides["hand"]["calls"], sides["hand"]["prompt_tokens"], sides["hand"]["completion_tokens"]) == (2, 11, 2)
    assert run["llm_usage_all_runs"]["total"]["calls"] == requests + 3
    assert f"all runs into this folder: hand 2 calls 11+2 tokens; brain {requests + 1} calls" in format_qa(result)


# ------------------------------------------------------------------------------ the Serve BrainProxy
def test_brain_proxy_books_each_brain_call_in_the_serve_journal(tmp_path, monkeypatch):
    from serve.brain_proxy import BrainProxy
    from serve.config import ServeConfig

    monkeypatch.chdir(tmp_path)
    cfg = validate_config({"kg": {"synthetic": {}}, "auth": {"mode": "off"}, "usage_journal": "usage/brain.jsonl"}, ServeConfig)
    assert cfg.usage_journal == str(tmp_path / "usage" / "brain.jsonl")  # absolute where the app is built
    payload = AnalysisPayload(question="who directed TE_1", topics=(TopicView(tag="TE_1", node="ent_1 (film)"),),
                              max_depth=2)
    with ScriptedServer(Script.always(Respond(scripted_brain))) as srv:
        dualtower = {"privacy": {"mode": "utility"}, "brain": {"kind": "llm", "llm": {
            "base_url": srv.base_url, "model": "scripted", "side": "brain", "max_retries": 0}}}
        proxy = BrainProxy.func_or_class(dualtower, cfg.usage_journal)
        replies = [asyncio.run(proxy.call("analysis", payload.model_dump_json())) for _ in range(2)]
        requests = len(srv.chat_requests)
    assert [r.reason for r in replies] == [None, None] and requests == 2
    lines = entries(Path(cfg.usage_journal))
    assert [(e["stage"], e["side"], e["usage"]["calls"]) for e in lines] == [("brain_analyse", "brain", 1)] * 2
    assert len({e["run"] for e in lines}) == 1  # one run id per replica
    assert [e["usage"]["prompt_tokens"] for e in lines] == [r.usage["total"]["prompt_tokens"] for r in replies]
    quiet = BrainProxy.func_or_class(dualtower)  # no journal configured: nothing written anywhere new
    assert quiet.brains.journal is None
