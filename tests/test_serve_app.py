"""The question-answering endpoint (serve/app.py) on local Ray Serve: Ingress → Hand → BrainProxy.

Two apps on one loopback port, started once for the module: ``/ok`` with an LLM Brain at a
scripted 127.0.0.1 server (the real client, guard and proxy run), and ``/down`` whose Brain
endpoint is a closed port. The hand-made film graph is read from a TSV file by a memory store;
entity linking is exact-only (no model)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import urllib.error
import urllib.request
from dataclasses import dataclass
import pytest

from rg.config import ConfigError
from rg.run.ports import free_port
from tests.dualtower_world import TRIPLES, schema
from tests.scripted_server import Respond, Script, ScriptedServer
from tests.test_dualtower_wire import RAW_ENTITIES, leaks, payload_of

ZERO_CPU = {"num_cpus": 0, "min_replicas": 1, "max_replicas": 1}


WORDING = (("share a director", ("directed_by", "directed_by^-1")), ("directed", ("directed_by",)),
           ("wrote", ("written_by",)), ("starred", ("starred_actors",)), ("released", ("release_year",)))


def reading_brain(body: dict) -> str:
    """A scripted Brain that reads the anonymised payload: the question's wording gives the relation
    path of its indicator; selection keeps the candidates whose relations are that path."""
    shown = payload_of(body)
    if shown["kind"] == "analysis":
        relations = next((path for words, path in WORDING if words in shown["question"]), ("directed_by",))
        text = "TE_1 " + " ".join(f"-[{r}]->" for r in relations) + " ANSWER"
        return json.dumps({"sub_questions": [shown["question"]], "depth": len(relations),
                           "indicators": [{"text": text, "relations": list(relations), "depth": len(relations)}]})
    wanted = re.findall(r"\[([^\]]+)\]", shown["indicator"])
    ids = [c["id"] for c in shown["candidates"] if [list(b) for b in c["branches"]] == [wanted]]
    return json.dumps({"ids": (ids or [c["id"] for c in shown["candidates"]])[: shown["keep"]]})


def app_config(folder: Path, brain_url: str, **overrides) -> dict:
    kb = folder / "kg.tsv"
    kb.write_text("".join(f"{h}\t{r}\t{t}\n" for h, r, t in TRIPLES), encoding="utf-8")
    (folder / "schema").mkdir(exist_ok=True)
    schema().save(folder / "schema")
    return {
        "kg": {"store": {"kind": "memory", "kb": {"path": str(kb), "format": "tsv"}},
               "schema_dir": str(folder / "schema")},
        "linking": {"index_dir": str(folder / "linking-index"), "dense": "off"},
        "dualtower": {"privacy": {"mode": "utility"}, "similarity": "lexical",
                      "brain": {"kind": "llm", "reasks": 1,
                                "llm": {"base_url": brain_url, "model": "scripted", "side": "brain",
                                        "max_retries": 0, "backoff_s": 0.0, "max_backoff_s": 0.0,
                                        "timeout_s": 5.0}}},
        "max_body_bytes": 2048, "request_timeout_s": 30.0, "brain_timeout_s": 10.0, "auth": {"mode": "off"},
        "ingress": ZERO_CPU, "hand": ZERO_CPU, "brain": ZERO_CPU, **overrides,
    }


@pytest.fixture(scope="module")
def scripted_brain():
    with ScriptedServer(Script.always(Respond(reading_brain))) as server:
        yield server


@pytest.fixture(scope="module")
def ok_config(scripted_brain, tmp_path_factory) -> dict:
    return app_config(tmp_path_factory.mktemp("ok"), scripted_brain.base_url)


@pytest.fixture(scope="module")
def endpoint(ray_local, ok_config, tmp_path_factory):
    """Base URL of the Serve HTTP proxy with the ``/ok`` and ``/down`` apps running."""
    from ray import serve

    from serve.app import build_app

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    down = tmp_path_factory.mktemp("down")
    serve.run(build_app(ok_config), name="ok", route_prefix="/ok")
    serve.run(build_app(app_config(down, f"http://127.0.0.1:{free_port()}/v1")), name="down", route_prefix="/down")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        serve.shutdown()


@dataclass
class Reply:
    status_code: int
    headers: dict
    text: str

    def json(self):
        return json.loads(self.text)


@dataclass
class Http:
    """A stdlib HTTP client for the loopback endpoint (every status comes back as a :class:`Reply`)."""

    base: str

    def send(self, method: str, path: str, data: bytes | None = None, headers: dict | None = None) -> Reply:
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers or {})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return Reply(response.status, dict(response.headers), response.read().decode())
        except urllib.error.HTTPError as err:
            return Reply(err.code, dict(err.headers), err.read().decode())

    def get(self, path: str) -> Reply:
        return self.send("GET", path)

    def post(self, path: str, json: dict | None = None, content: bytes | None = None, headers: dict | None = None):
        data = content if content is not None else _dumps(json).encode()
        return self.send("POST", path, data, {"Content-Type": "application/json", **(headers or {})})


def _dumps(value) -> str:
    return json.dumps(value)


@pytest.fixture(scope="module")
def client(endpoint):
    return Http(endpoint)


def test_config_errors_name_the_field_before_anything_starts(tmp_path):
    from serve.app import build_app

    good = app_config(tmp_path, "http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match=r"hand: .*min_replicas \(3\) > max_replicas"):
        build_app({**good, "hand": {"min_replicas": 3, "max_replicas": 1}})
    with pytest.raises(ConfigError, match="brain_timeout_s"):
        build_app({**good, "brain_timeout_s": 40.0})
    with pytest.raises(ConfigError, match="kg"):
        build_app({**good, "kg": {}})


@pytest.mark.parametrize("name", ["serve_demo.yaml", "serve_demo_sparql.yaml", "serve_metaqa.yaml"])
def test_the_serve_configs_validate_and_say_how_to_make_a_missing_planner(name, tmp_path):
    import yaml

    from serve.app import build_app
    from serve.config import ServeConfig

    path = Path(__file__).resolve().parents[1] / "configs" / name
    assert path.read_text().startswith(f"# RAY_AUTH_MODE=disabled serve run configs/{name}")
    [app] = yaml.safe_load(path.read_text())["applications"]
    assert app["import_path"] == "serve.app:build_app"
    config = ServeConfig.model_validate(app["args"])
    assert config.dualtower.brain.kind == "local" and config.hand.max_replicas >= 2
    args = {**app["args"], "dualtower": {**app["args"]["dualtower"],
                                         "brain": {"kind": "local", "planner": str(tmp_path / "absent")}}}
    if name.startswith("serve_demo"):
        with pytest.raises(ConfigError, match=r"dualtower.brain.planner.*python -m jobs.pipeline --config "
                                              r"configs/demo.yaml"):
            build_app(args)
        # the demo's Hand answers as the main command's qa/dualtower stage does: with the verified walks' ends
        assert config.dualtower.hand.kind == "local"
        (tmp_path / "planner").mkdir()
        dualtower = {**app["args"]["dualtower"], "brain": {"kind": "local", "planner": str(tmp_path / "planner")},
                     "hand": {"kind": "tuned", "reader": str(tmp_path / "absent")}}
        with pytest.raises(ConfigError, match=r"dualtower.hand.reader .* Fix: .*python -m jobs.pipeline --config "
                                              r"configs/demo.yaml.*outputs/demo/read/reader"):
            build_app({**app["args"], "dualtower": dualtower})


def test_answer_with_evidence_what_the_brain_saw_and_usage_per_side(client, scripted_brain):
    before = len(scripted_brain.chat_requests)
    response = client.post("/ok/v1/answer", json={"question": "who directed Casino", "topics": ["Casino"]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["answers"] == ["Martin Scorsese"]
    assert body["brain"] == "ok" and body["faults"] == [] and body["brain_name"] == "proxy:llm"
    assert any("Casino" in line and "Martin Scorsese" in line for line in body["evidence"])
    # why the answer: the lines its reader read that end at it (raw names, Hand side only)
    assert body["support"] == {"Martin Scorsese": ["Casino → [directed_by] → Martin Scorsese"]}
    # what the Brain saw is exactly what reached the Brain's endpoint, with no raw entity name in it
    sent = [r.body for r in scripted_brain.chat_requests[before:]]
    assert len(body["brain_saw"]) == len(sent) == body["brain_calls"] == body["usage"]["brain"]["calls"] >= 1
    assert body["brain_saw"][0]["kind"] == "analysis"
    assert [leaks(json.dumps(p), RAW_ENTITIES) for p in body["brain_saw"]] == [[]] * len(body["brain_saw"])
    assert body["usage"]["brain"]["prompt_tokens"] > 0 and body["usage"]["hand"]["calls"] == 0
    assert body["exposure"]["brain_calls"] == body["brain_calls"]
    # the exposure totals are what the endpoint received: requests and characters, nothing refused
    texts = ["\n".join(m["content"] for m in r.body["messages"]) for r in scripted_brain.chat_requests[before:]]
    totals = body["exposure_totals"]
    assert (totals["brain"]["requests"], totals["brain"]["request_chars"]) == (len(texts), sum(map(len, texts)))
    assert totals["brain"]["refused"] == {} and totals["hand"]["calls"] == 0


def test_questions_without_topics_are_linked_and_two_hops_answered(client):
    body = client.post("/ok/v1/answer", json={"question": "which films share a director with Casino"}).json()
    assert body["topics"] == ["Casino"] and body["answers"] == ["The Irishman"]


def test_chat_completions_speaks_the_openai_shape(client):
    response = client.post("/ok/v1/chat/completions", json={
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "who wrote Casino"}]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "chat.completion" and body["model"] == "rg-dualtower"
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "Nicholas Pileggi"}
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"] > 0
    assert client.get("/ok/v1/models").json()["data"][0]["id"] == "rg-dualtower"
    wrong = client.post("/ok/v1/chat/completions", json={"model": "gpt-x", "messages": [{"role": "user",
                                                                                         "content": "hi"}]})
    assert wrong.status_code == 404 and wrong.json()["error"]["param"] == "model"


def error_fields(response: Reply) -> list[str]:
    return [".".join(str(p) for p in e["loc"]) for e in response.json()["detail"]]


def test_bad_input_is_a_4xx_naming_the_field(client):
    missing = client.post("/ok/v1/answer", json={"topics": ["Casino"]})
    assert missing.status_code == 422 and error_fields(missing) == ["body.question"]
    unknown = client.post("/ok/v1/answer", json={"question": "who wrote Casino", "options": {"beam": 3}})
    assert unknown.status_code == 422 and error_fields(unknown) == ["body.options.beam"]
    typed = client.post("/ok/v1/answer", json={"question": "who wrote Casino", "topics": "Casino"})
    assert typed.status_code == 422 and error_fields(typed) == ["body.topics"]
    malformed = client.post("/ok/v1/answer", content=b'{"question": "who wrote', headers={"Content-Type":
                                                                                           "application/json"})
    assert malformed.status_code == 422
    long = client.post("/ok/v1/answer", json={"question": "x" * 1500})
    assert long.status_code == 422 and error_fields(long) == ["body.question"]
    oversized = client.post("/ok/v1/answer", json={"question": "who wrote Casino", "topics": ["y" * 3000]})
    assert oversized.status_code == 413 and "max_body_bytes" in oversized.json()["detail"]
    chat = client.post("/ok/v1/chat/completions", json={"messages": []})
    assert chat.status_code == 422 and error_fields(chat) == ["body.messages"]
    # and the endpoint still answers
    assert client.post("/ok/v1/answer", json={"question": "who wrote Casino"}).json()["answers"] == ["Nicholas Pileggi"]


def test_a_brain_that_is_down_gives_hand_only_answers_marked_unavailable(client):
    started = time.perf_counter()
    response = client.post("/down/v1/answer", json={"question": "who directed Casino", "topics": ["Casino"]})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["brain"] == "unavailable" and body["answers"] == ["Martin Scorsese"]
    assert body["faults"][0] == {"stage": "analysis", "reason": "connection", "attempts": 1,
                                 "fallback": "hand_analysis"}
    assert time.perf_counter() - started < 20


def test_health_readiness_and_the_page(client):
    assert client.get("/ok/healthz").json() == {"status": "ok"}
    ready = client.get("/ok/readyz")
    assert ready.status_code == 200 and ready.json() == {"ready": True, "hand": "ok", "brain": "ok"}
    page = client.get("/ok/")
    assert page.status_code == 200 and 'id="brain-saw"' in page.text
    assert "/v1/answer" in client.get("/ok/openapi.json").json()["paths"]


def test_kg_edits_are_off_unless_configured(client):
    """Without `kg_edits` the KG is read-only: the edit route is a 404 naming the key; answers are on version 0."""
    edit = client.post("/ok/v1/kg/edits", json={"edits": [{"op": "add", "head": "Heat", "relation": "release_year",
                                                           "tail": "1996"}]})
    assert edit.status_code == 404 and "kg_edits" in edit.json()["detail"]
    assert client.get("/ok/v1/kg/version").json() == {"version": 0, "edits": "off"}
    answer = client.post("/ok/v1/answer", json={"question": "when was Heat released", "topics": ["Heat"]}).json()
    assert answer["answers"] == ["1995"] and answer["kg_version"] == 0 and answer["kg_sync"] == "static"


@pytest.mark.slow  # redeploys the /ok app's replicas (~40 s here)
def test_tunables_reach_the_running_hand_as_its_user_config(endpoint, client, ok_config):
    """serve.run from Python redeploys the replicas (Serve gives each run a new code version); with
    `serve deploy` and only `deployments[HandServer].user_config` changed, the same replicas are
    reconfigured in place (Serve's lightweight update) — both go through HandServer.reconfigure."""
    from ray import serve

    from serve.app import build_app

    hand = serve.get_deployment_handle("HandServer", app_name="ok")
    assert hand.settings.remote().result()["w_max"] == 3
    serve.run(build_app({**ok_config, "tunables": {"w_max": 1, "alpha": 0.25}}), name="ok", route_prefix="/ok")
    settings = hand.settings.remote().result()
    assert (settings["w_max"], settings["alpha"], settings["w1"]) == (1, 0.25, 80)
    assert client.post("/ok/v1/answer", json={"question": "who wrote Casino"}).json()["answers"] == ["Nicholas Pileggi"]


@pytest.mark.slow
def test_readyz_fails_while_a_dependency_is_gone_and_recovers(client):
    import ray

    # kill the /down app's BrainProxy replica: readiness names the missing dependency until Serve replaces it
    [replica] = [a for a in ray.util.list_named_actors(all_namespaces=True)
                 if "down#BrainProxy" in a["name"] or "down:BrainProxy" in a["name"]]
    ray.kill(ray.get_actor(replica["name"], namespace=replica["namespace"]), no_restart=True)
    gone = client.get("/down/readyz")
    assert gone.status_code == 503
    assert gone.json()["hand"] == "ok" and gone.json()["brain"].startswith("unavailable")
    deadline = time.monotonic() + 90
    while client.get("/down/readyz").status_code != 200:
        assert time.monotonic() < deadline, "the BrainProxy replica was not replaced within 90 s"
        time.sleep(1.0)


CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")


@pytest.mark.skipif(not (CHROMIUM.exists() and CHROMEDRIVER.exists()),
                    reason="the page test needs Debian's chromium and chromium-driver "
                           "(apt-get install -y chromium chromium-driver)")
def test_the_page_shows_the_answer_and_what_the_brain_saw(endpoint, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        driver.get(f"{endpoint}/ok/")
        driver.find_element(By.ID, "question").send_keys("who directed Casino")
        driver.find_element(By.ID, "topics").send_keys("Casino")
        driver.find_element(By.ID, "submit").click()
        WebDriverWait(driver, 60).until(expected_conditions.text_to_be_present_in_element((By.ID, "answer"),
                                                                                          "Martin Scorsese"))
        assert driver.find_element(By.ID, "answer").text == "Martin Scorsese"
        assert driver.find_element(By.ID, "brain").text.startswith("brain: ok")
        chains = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#evidence li")]
        assert any("Casino" in c and "Martin Scorsese" in c for c in chains)
        assert [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#support dt, #support dd")] == \
            ["Martin Scorsese", "Casino → [directed_by] → Martin Scorsese"]
        shown = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#brain-saw pre.payload")]
        assert shown and '"kind": "analysis"' in shown[0] and "TE_1" in shown[0]
        assert [leaks(text, RAW_ENTITIES) for text in shown] == [[]] * len(shown)  # the anonymised view
        assert driver.find_element(By.ID, "brain-usage").text.startswith("Brain: ")
        outputs = tmp_path / "outputs"
        outputs.mkdir()
        screenshot = outputs / "serve_page.png"
        assert driver.save_screenshot(str(screenshot))
        print(f"screenshot: {screenshot}")
    finally:
        driver.quit()


def test_a_chat_reply_without_an_answer_names_why():
    from serve.app import no_answer_text

    assert no_answer_text("no_topics") == "No answer found in the knowledge graph (no_topics)."
    assert no_answer_text(None) == "No answer found in the knowledge graph (the verified evidence names no answer)."


@pytest.mark.mission  # 46 s with its Virtuoso; test_privacy_stores keeps the SPARQL privacy property in the default run
def test_a_sparql_backed_app_answers_as_the_memory_one_and_sends_no_name(endpoint, client, scripted_brain, virtuoso,
                                                                         tmp_path):
    """The KG in Virtuoso (``m.0<hex>`` ids, names and an alias as literals) behind the same app: the question
    names its topic and another entity, by name and by alias; the Brain receives neither, and the answers
    are the in-memory app's."""
    from ray import serve

    from rg.graph import KnowledgeGraph
    from rg.stores.ntriples import entity_ids
    from serve.app import build_app
    from tests.stores_virtuoso import load_graph

    kg = KnowledgeGraph.from_triples(TRIPLES)
    ids = dict(zip(kg.entity_names.tolist(), entity_ids(kg).tolist()))
    store = load_graph(virtuoso, kg, "http://rg.test/serve-films", tmp_path, aliases={"Robert De Niro": ["Bobby D"]})
    (tmp_path / "schema").mkdir()
    schema().relabel(ids).save(tmp_path / "schema")
    config = app_config(tmp_path, scripted_brain.base_url)
    config["kg"] = {"store": store.config.model_dump(), "schema_dir": str(tmp_path / "schema")}
    serve.run(build_app(config), name="sparql", route_prefix="/sparql")
    try:
        for other in ("Robert De Niro", "Bobby D"):
            question = f"who directed Casino, starring {other}?"
            before = len(scripted_brain.chat_requests)
            sparql = client.post("/sparql/v1/answer", json={"question": question, "topics": [ids["Casino"]]}).json()
            sent = [r.raw.decode() for r in scripted_brain.chat_requests[before:]]
            memory = client.post("/ok/v1/answer", json={"question": question, "topics": ["Casino"]}).json()
            assert sparql["answers"] == memory["answers"] == ["Martin Scorsese"] and sparql["brain"] == "ok"
            assert sent and [leaks(b, [*RAW_ENTITIES, "Bobby D", *ids.values()]) for b in sent] == [[]] * len(sent)
            assert sparql["exposure_totals"]["brain"]["requests"] == len(sent)
        linked = client.post("/sparql/v1/answer", json={"question": "who directed Casino"}).json()
        assert linked["topics"] == [ids["Casino"]] and linked["answers"] == ["Martin Scorsese"]
    finally:
        serve.delete("sparql")
