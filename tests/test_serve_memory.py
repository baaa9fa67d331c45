"""The endpoint's memory owner (serve/memory_owner.py): one replica owns the sealed memories for every Hand.

One app on a loopback port: the hand-made film graph, an LLM Brain at a scripted 127.0.0.1 server,
and both memories (experience pool with the hashing embedder, edge memory) sealed in files under a
key file. Asking a question a second time is answered from memory without the Brain; the files hold
no readable name; a killed owner is replaced by one that reloads the files, and the Hand answers
throughout.
"""

from __future__ import annotations

import time

import pytest

from rg.config import ConfigError
from rg.memory.keys import new_key_hex
from rg.reasoning.dualtower.memory import MemoryUnavailable, settle
from tests.scripted_server import Respond, Script, ScriptedServer
from rg.run.ports import free_port
from tests.test_serve_app import Http, app_config, reading_brain

APP = "mem"


def memory_section(folder) -> dict:
    key = folder / "memory.key"
    key.write_text(new_key_hex(), encoding="utf-8")
    return {"key": {"env": None, "file": str(key)},
            "experience": {"embedder": "hashing", "path": str(folder / "pool.sealed")},
            "edges": {"path": str(folder / "edges.sealed")}}


@pytest.fixture(scope="module")
def brain_server():
    with ScriptedServer(Script.always(Respond(reading_brain))) as server:
        yield server


@pytest.fixture(scope="module")
def memory_folder(tmp_path_factory):
    return tmp_path_factory.mktemp("memory")


@pytest.fixture(scope="module")
def client(ray_local, brain_server, memory_folder):
    from ray import serve

    from serve.app import build_app

    config = app_config(memory_folder, brain_server.base_url, memory=memory_section(memory_folder),
                        memory_owner={"num_cpus": 0})
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(config), name=APP, route_prefix=f"/{APP}")
    try:
        yield Http(f"http://127.0.0.1:{port}")
    finally:
        serve.shutdown()


def ask(client: Http, question: str, topics: list[str]) -> dict:
    response = client.post(f"/{APP}/v1/answer", json={"question": question, "topics": topics})
    assert response.status_code == 200, response.text
    return response.json()


def test_a_repeated_question_is_answered_from_memory_without_the_brain(client, brain_server, memory_folder):
    first = ask(client, "who directed Casino", ["Casino"])
    assert first["answers"] == ["Martin Scorsese"] and first["brain_calls"] == 1  # analysis; its path needs no selection
    assert first["memory"]["analysis"] == "brain" and first["memory"]["remembered"] is True
    assert first["memory"]["edges_enhanced"] >= 1
    sent = len(brain_server.requests)
    second = ask(client, "who directed Casino", ["Casino"])
    assert second["answers"] == ["Martin Scorsese"]
    assert second["memory"]["analysis"] in {"replay", "experience"} and second["brain_calls"] == 0
    assert len(brain_server.requests) == sent  # nothing reached the Brain the second time
    ready = client.get(f"/{APP}/readyz")
    assert ready.status_code == 200 and ready.json()["memory"] == "ok"
    assert ready.json()["memory_stats"]["records"] >= 1 and ready.json()["memory_stats"]["edges"] >= 1
    for name in ("pool.sealed", "edges.sealed"):  # sealed at rest: no name, relation or template is readable
        data = (memory_folder / name).read_bytes()
        assert data and not any(word in data for word in (b"Casino", b"Scorsese", b"directed_by", b"TE_1"))


def test_a_killed_owner_is_replaced_and_reloads_what_was_written(client):
    import ray

    before = client.get(f"/{APP}/readyz").json()["memory_stats"]
    assert before["records"] >= 1
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if "#MemoryOwner#" in a["name"]]
    assert len(names) == 1
    ray.kill(ray.get_actor(names[0], namespace="serve"), no_restart=True)
    # the Hand answers throughout: with memory, or without it and saying so
    during = ask(client, "who wrote Casino", ["Casino"])
    assert during["answers"] == ["Nicholas Pileggi"]
    assert "memory_unavailable" in during["memory"] or "analysis" in during["memory"]
    deadline = time.monotonic() + 90
    ready = client.get(f"/{APP}/readyz")
    while ready.status_code != 200 and time.monotonic() < deadline:
        time.sleep(1.0)
        ready = client.get(f"/{APP}/readyz")
    assert ready.status_code == 200, ready.text
    after = ready.json()["memory_stats"]
    assert after["refused_on_load"] == 0 and after["edges_refused_on_load"] == 0
    assert after["records"] >= before["records"] and after["edges"] >= before["edges"]  # reloaded from the files


def test_memory_settings_are_checked_before_anything_starts(tmp_path, monkeypatch):
    from serve.app import build_app

    base = app_config(tmp_path, "http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="memory_owner.min_replicas and memory_owner.max_replicas to 1"):
        build_app({**base, "memory": memory_section(tmp_path), "memory_owner": {"max_replicas": 2}})
    monkeypatch.delenv("RG_MEMORY_KEY", raising=False)
    env_key = {"experience": {"embedder": "hashing", "path": str(tmp_path / "pool.sealed")}, "edges": None}
    with pytest.raises(ConfigError, match="RG_MEMORY_KEY is not set.*MemoryOwner replica reads the key"):
        build_app({**base, "memory": env_key})
    with pytest.raises(ConfigError, match="memory.rounds is an evaluate_qa setting"):
        build_app({**base, "memory": {**memory_section(tmp_path), "rounds": 2}})
    with pytest.raises(ConfigError, match="memory.baseline is an evaluate_qa setting"):
        build_app({**base, "memory": {**memory_section(tmp_path), "baseline": True}})


class _Gone:
    """A deployment response whose replica died."""

    def __await__(self):
        from ray.exceptions import RayActorError

        raise RayActorError()
        yield  # pragma: no cover

    def cancel(self) -> None:
        pass


class _Late:
    """A deployment response that never comes."""

    cancelled = False

    def __await__(self):
        import asyncio

        return asyncio.sleep(3600).__await__()

    def cancel(self) -> None:
        self.cancelled = True


class _Method:
    def __init__(self, response) -> None:
        self.response = response

    def remote(self, *args):
        return self.response


class _Handle:
    def __init__(self, response) -> None:
        self.hints = self.exemplars = self.remember = _Method(response)


def test_an_unreachable_or_late_owner_becomes_memory_unavailable():
    import asyncio

    from serve.memory_owner import ServeMemory

    with pytest.raises(MemoryUnavailable, match="not reachable \\(RayActorError\\)"):
        asyncio.run(settle(ServeMemory(_Handle(_Gone()), "utility", 1.0).hints("q", None, "utility")))
    late = _Late()
    with pytest.raises(MemoryUnavailable, match="no reply within 0.05 s"):
        asyncio.run(settle(ServeMemory(_Handle(late), "utility", 0.05).remember(None)))
    assert late.cancelled
