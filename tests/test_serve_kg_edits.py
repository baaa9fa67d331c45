"""Live KG edits on the served endpoint (serve/kg_edit_owner.py, issue 59), with bearer tokens.

One app on a loopback port: the hand-made film graph, an LLM Brain at a scripted 127.0.0.1 server,
both memories, two Hand replicas, the KGEditOwner with its edit log, and two tokens (ask; ask+edit).
A fact added is answered by every replica; a changed and then deleted fact is never answered again,
remembered or not; every answer is consistent with the KG version it reports while edits stream in;
bad batches are 422 naming the triple and change nothing; a killed owner replays its log; every data
route says 401 without a token and 403 with the wrong scope.
"""

from __future__ import annotations

import concurrent.futures
import json
import time

import pytest

from tests.scripted_server import Respond, Script, ScriptedServer
from rg.run.ports import free_port
from tests.test_serve_app import Http, app_config, reading_brain

pytestmark = pytest.mark.slow  # starts its own Serve app (five deployments: minutes on the shared 2-core machine)

APP = "kg"
ASK = "ask-token-0123456789abcdef"
BOTH = "ops-token-0123456789abcdef"
TWO_HANDS = {"num_cpus": 0, "min_replicas": 2, "max_replicas": 2, "max_ongoing_requests": 4, "max_queued_requests": 64}


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def brain():
    with ScriptedServer(Script.always(Respond(reading_brain))) as server:
        yield server


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("kg_edits")


@pytest.fixture(scope="module")
def client(ray_local, brain, folder):
    from ray import serve

    from serve.app import build_app

    auth = {"tokens": [{"name": "reader", "scopes": ["ask"], "value": ASK},
                       {"name": "ops", "scopes": ["ask", "edit"], "value": BOTH}]}
    config = app_config(folder, brain.base_url, auth=auth, hand=TWO_HANDS,
                        kg_edits={"log_path": str(folder / "kg_edits.log"), "max_batch": 8},
                        memory={"experience": {"embedder": "hashing"}, "edges": {}}, memory_owner={"num_cpus": 0},
                        kg_edit_owner={"num_cpus": 0})
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app(config), name=APP, route_prefix=f"/{APP}")
    try:
        yield Http(f"http://127.0.0.1:{port}")
    finally:
        serve.shutdown()


def ask(client: Http, question: str, topics: list[str]) -> dict:
    response = client.post(f"/{APP}/v1/answer", json={"question": question, "topics": topics}, headers=bearer(ASK))
    assert response.status_code == 200, response.text
    return response.json()


def edit(client: Http, *edits, token: str = BOTH):
    body = {"edits": [{"op": op, "head": h, "relation": r, "tail": t} for op, h, r, t in edits]}
    return client.post(f"/{APP}/v1/kg/edits", json=body, headers=bearer(token))


def test_every_data_route_needs_a_token_with_its_scope(client):
    routes = [("POST", "/v1/answer", {"question": "who directed Casino", "topics": ["Casino"]}, "ask"),
              ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "who directed Casino"}]}, "ask"),
              ("GET", "/v1/models", None, "ask"), ("GET", "/v1/kg/version", None, "ask"),
              ("POST", "/v1/kg/edits", {"edits": [{"op": "add", "head": "Casino", "relation": "release_year",
                                                   "tail": "1995"}]}, "edit")]
    for method, path, body, scope in routes:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        assert client.send(method, f"/{APP}{path}", data, headers).status_code == 401, path
        assert client.send(method, f"/{APP}{path}", data, {**headers, **bearer("wrong-0123456789abcdef")}).status_code == 401
        if scope == "edit":
            assert client.send(method, f"/{APP}{path}", data, {**headers, **bearer(ASK)}).status_code == 403
        assert client.send(method, f"/{APP}{path}", data, {**headers, **bearer(BOTH)}).status_code == 200, path
    assert client.get(f"/{APP}/healthz").status_code == 200 and client.get(f"/{APP}/").status_code == 200


def test_add_change_delete_then_ask_never_gives_a_stale_answer(client):
    first = ask(client, "who wrote Casino", ["Casino"])
    assert first["answers"] == ["Nicholas Pileggi"] and first["answer_touches_edits"] is False
    assert ask(client, "who wrote Casino", ["Casino"])["memory"]["analysis"] in {"experience", "replay"}
    changed = edit(client, ("delete", "Casino", "written_by", "Nicholas Pileggi"),
                   ("add", "Casino", "written_by", "Ann Newwriter"))
    assert changed.status_code == 200, changed.text
    reply = changed.json()
    assert reply["added"] == 1 and reply["deleted"] == 1 and list(reply["new_entities"].values()) == ["Ann Newwriter"]
    assert reply["memory_forgotten"] == 1  # the old fact's edge vector
    for _ in range(6):  # both Hand replicas, remembered or not
        after = ask(client, "who wrote Casino", ["Casino"])
        assert after["kg_version"] >= reply["version"] and after["answers"] == ["Ann Newwriter"], after
        assert after["answer_touches_edits"] is True  # drift: an answer resting on an added fact
    gone = edit(client, ("delete", "Casino", "written_by", "Ann Newwriter")).json()
    for _ in range(6):
        last = ask(client, "who wrote Casino", ["Casino"])
        assert last["kg_version"] >= gone["version"]
        assert not {"Nicholas Pileggi", "Ann Newwriter"} & set(last["answers"]), last
    # a new entity's name is linked from then on (the linking index learnt it), and by id too
    new = edit(client, ("add", "Quillfire", "directed_by", "Zara Quill")).json()
    film_id = next(i for i, n in new["new_entities"].items() if n == "Quillfire")
    chat = client.post(f"/{APP}/v1/chat/completions", json={"messages": [{"role": "user", "content": "who directed Quillfire"}]},
                       headers=bearer(ASK))
    assert chat.status_code == 200 and chat.json()["rg"]["answers"] == ["Zara Quill"], chat.text
    assert ask(client, "who directed Quillfire", [film_id])["answers"] == ["Zara Quill"]


def test_bad_batches_are_422_naming_the_triple_and_change_nothing(client):
    before = client.send("GET", f"/{APP}/v1/kg/version", None, bearer(ASK)).json()["version"]
    bad = edit(client, ("add", "Heat", "release_year", "1996"), ("add", "Heat", "directed_byy", "Michael Mann"))
    assert bad.status_code == 422
    (problem,) = bad.json()["detail"]
    assert problem["loc"] == ["body", "edits", 1] and problem["type"] == "unknown_relation"
    assert problem["triple"] == "add (Heat, directed_byy, Michael Mann)"
    assert edit(client, *[("add", "Heat", "release_year", str(2000 + i)) for i in range(9)]).status_code == 422
    malformed = client.post(f"/{APP}/v1/kg/edits", json={"edits": [{"op": "add", "head": "Heat"}]}, headers=bearer(BOTH))
    assert malformed.status_code == 422 and malformed.json()["detail"][0]["loc"][:3] == ["body", "edits", 0]
    assert client.send("GET", f"/{APP}/v1/kg/version", None, bearer(ASK)).json()["version"] == before
    assert ask(client, "when was Heat released", ["Heat"])["answers"] == ["1995"]


def test_concurrent_edits_and_questions_each_answer_one_version(client):
    writer_at: dict[int, str] = {}

    def writer() -> None:
        previous = None
        for i in range(8):
            name = f"Writer {i}"
            edits = [("add", "Collateral", "written_by", name)]
            if previous:
                edits.insert(0, ("delete", "Collateral", "written_by", previous))
            reply = edit(client, *edits)
            assert reply.status_code == 200, reply.text
            writer_at[reply.json()["version"]] = name
            previous = name
            time.sleep(0.2)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        done = pool.submit(writer)
        answers = []
        while not done.done():
            answers += list(pool.map(lambda _: ask(client, "who wrote Collateral", ["Collateral"]), range(3)))
        done.result()
    first = min(writer_at)
    checked = 0
    for a in answers:
        v = a["kg_version"]
        expected = {writer_at[max(k for k in writer_at if k <= v)]} if v >= first else set()
        assert set(a["answers"]) == expected, (v, a["answers"])
        checked += 1
    assert checked >= 4


def test_a_killed_owner_replays_its_log(client):
    import ray

    version = client.send("GET", f"/{APP}/v1/kg/version", None, bearer(ASK)).json()["version"]
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if "#KGEditOwner#" in a["name"]]
    ray.kill(ray.get_actor(names[0], namespace="serve"), no_restart=True)
    deadline = time.monotonic() + 120
    status = client.send("GET", f"/{APP}/v1/kg/version", None, bearer(ASK))
    while status.status_code != 200 and time.monotonic() < deadline:
        time.sleep(1.0)
        status = client.send("GET", f"/{APP}/v1/kg/version", None, bearer(ASK))
    assert status.status_code == 200 and status.json()["version"] == version and status.json()["replayed"] == version
    assert edit(client, ("add", "Heat", "written_by", "Late Writer")).json()["version"] == version + 1
    assert ask(client, "who wrote Heat", ["Heat"])["answers"][:2] and \
        "Late Writer" in ask(client, "who wrote Heat", ["Heat"])["answers"]
