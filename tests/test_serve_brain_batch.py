"""The BrainProxy deployment (serve/brain_proxy.py) and the Hand's RemoteBrain in front of it.

The tiny planner of tests/dualtower_world.py, saved to a folder, is the BrainProxy's local Brain.
Batching (``-m slow``, its own Serve start): five sealed analysis payloads sent at once through the
deployment's handle come back exactly as the planner analyses each alone, decoded in batches.

Refine and predict modes: the proxy class is called in this process through a stand-in for the
``DeploymentHandle`` (``handle.call.remote(kind, text)``, as tests/test_serve_memory.py does for the
memory owner). A follow-up and a prediction payload reach the local Brain and come back typed, booked
in the Hand's ledger; a Brain without those calls gives ``unsupported`` and a reply of the wrong type
``malformed``; and whole controller runs through RemoteBrain, with the LLM Brain at a scripted 127.0.0.1
server, equal the in-process ones (``-m slow``: once more through the deployed proxy's real handle).
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
import torch

from rg.llm.config import LLMConfig
from rg.llm.usage import UsageLedger
from rg.privacy import PrivacyConfig, PrivacySession
from rg.reasoning.dualtower.brain import BrainError, FollowUp, Indicator, Prediction
from rg.reasoning.dualtower.brains import LLMBrainFactory, LocalBrainFactory
from rg.reasoning.dualtower.local_brain import LocalBrain
from rg.reasoning.dualtower.payload import FollowUpPayload, PredictionPayload, seal
from rg.retrievers.planner import PlannerConfig, PlannerModel
from serve.brain_proxy import BrainProxy, RemoteBrainFactory
from tests.dualtower_world import schema, shared_planner, training_rows
from tests.scripted_server import Respond, Script, ScriptedServer
from tests.test_dualtower import analysis_payloads
from tests.test_dualtower_modes import (
    DIRECTED,
    PREDICTING,
    REFINING,
    RELEASED,
    SHARED,
    SMALL,
    TOPIC,
    OldBrains,
    ScriptedBrain,
    controller,
    kinds,
)
from rg.run.ports import free_port


@pytest.fixture(scope="module")
def planner_dir(tmp_path_factory):
    planner = shared_planner()
    folder = tmp_path_factory.mktemp("planner")
    planner.save(folder)
    return folder, planner


@pytest.mark.slow  # its own Serve start (~25 s); tests/test_dualtower.py pins the batch's equality by default
def test_concurrent_analyses_are_decoded_together_and_unchanged(ray_local, planner_dir):
    from ray import serve

    folder, planner = planner_dir
    config = {"brain": {"kind": "local", "planner": str(folder), "beams": 3, "indicators": 2},
              "privacy": {"mode": "utility"}}
    with PrivacySession(PrivacyConfig(mode="utility"), schema()) as session:
        payloads = analysis_payloads(session)
    alone = [asyncio.run(LocalBrain(planner, 3, 2).analyse(p)) for p in payloads]
    serve.start(http_options={"host": "127.0.0.1", "port": free_port()})  # this module's own Serve, shut down after
    handle = serve.run(BrainProxy.options(ray_actor_options={"num_cpus": 0}).bind(config, None, 8, 0.5),
                       name="brain-batch", route_prefix=None)
    try:
        replies = [r.result(timeout_s=120) for r in [handle.call.remote("analysis", p.text) for p in payloads]]
        sizes = handle.batch_sizes.remote().result(timeout_s=30)
    finally:
        serve.shutdown()
    assert [r.reason for r in replies] == [None] * len(payloads)
    assert [r.result.indicators for r in replies] == [a.indicators for a in alone]
    assert sum(sizes) == len(payloads) and max(sizes) > 1
    assert all(r.usage["stages"]["brain_analyse"]["brain"]["calls"] == 1 for r in replies)


# ------------------------------------------------------------------ refine and predict through the proxy
class _Method:
    """``handle.<method>.remote(...)``: the proxy's coroutine as a task (awaitable and cancellable, like a
    ``DeploymentResponse``), run on the caller's event loop."""

    def __init__(self, method) -> None:
        self.method = method

    def remote(self, *args):
        return asyncio.ensure_future(self.method(*args))


class InProcessHandle:
    """The part of the BrainProxy's ``DeploymentHandle`` RemoteBrain uses, over a proxy in this process."""

    def __init__(self, proxy) -> None:
        self.call = _Method(proxy.call)


@pytest.fixture(scope="module")
def untrained(tmp_path_factory):
    """A tiny planner as tests/dualtower_world.py builds it, untrained (seed 0: the same weights every run),
    saved to a folder: the proxy's local Brain without the minute of training its answers need not be right."""
    rows = training_rows()
    config = PlannerConfig(tiny={"layers": 1, "hidden": 32, "heads": 2, "max_positions": 48},
                           lora={"dropout": 0.0}, max_prompt_tokens=32, mask_topics=True)
    torch.manual_seed(0)
    planner = PlannerModel.build(config, [q for _, q, _ in rows],
                                 {label.removesuffix("^-1") for _, _, p in rows for label in p}).eval()
    folder = tmp_path_factory.mktemp("untrained")
    planner.save(folder)
    return folder, planner


def local_proxy(folder):
    """A BrainProxy over the saved planner; ``max_batch_size`` 1: no ``@serve.batch`` outside Serve."""
    config = {"brain": {"kind": "local", "planner": str(folder), "beams": 3}, "privacy": {"mode": "utility"}}
    return BrainProxy.func_or_class(config, None, 1)


def remote_brain(proxy, session: PrivacySession, ledger: UsageLedger, kind: str = "local"):
    return RemoteBrainFactory(InProcessHandle(proxy), kind, timeout_s=30.0)(session, ledger)


FOLLOW = FollowUpPayload(question="which films share a director with TE_1 (film)", follow_up="which other path?",
                         indicator="TE -[directed_by]-> ANSWER", topics=TOPIC, tried=(DIRECTED,),
                         relation_paths=(("release_year",), ("starred_actors",), ("written_by",),
                                         ("directed_by", "directed_by^-1")), max_depth=3)
PREDICT = PredictionPayload(question="which films share a director with TE_1 (film)",
                            indicator="TE -[directed_by]-> ANSWER", topics=TOPIC, paths=(DIRECTED,),
                            relation_paths=(("directed_by",), ("starred_actors",), ("directed_by", "directed_by^-1")),
                            keep=3, max_depth=3)


def test_follow_up_and_prediction_reach_the_local_brain_and_come_back_typed(untrained):
    folder, planner = untrained
    proxy = local_proxy(folder)
    ledger = UsageLedger()
    with PrivacySession(PrivacyConfig(mode="utility"), schema()) as session:
        follow, predict = seal(FOLLOW, session.guard), seal(PREDICT, session.guard)
        brain = remote_brain(proxy, session, ledger)

        async def both():
            return await brain.follow_up(follow), await brain.predict(predict)

        answer, prediction = asyncio.run(both())
        exposure = session.exposure.to_dict()
    alone = LocalBrain(planner, beams=3)
    assert isinstance(answer, FollowUp) and isinstance(prediction, Prediction)
    assert answer == asyncio.run(alone.follow_up(follow)) and prediction == asyncio.run(alone.predict(predict))
    assert answer.indicator.relations in FOLLOW.relation_paths  # decoded within the paths asked for
    assert prediction.targets == ("ent_5e6f7a8b (person)",)  # the one node of the one shown path
    # the Brain side's usage is booked in the Hand's ledger, one call per stage; the planner sends nothing
    assert {s: {side: u["calls"] for side, u in sides.items()} for s, sides in ledger.to_dict()["stages"].items()} \
        == {"brain_follow_up": {"brain": 1}, "brain_predict": {"brain": 1}}
    assert exposure["brain_calls"] == 0 and exposure["refused"] == {}
    assert brain.name == "proxy:local"


class Crossed:
    """A Brain whose follow-up and prediction answer with each other's type."""

    name = "crossed"

    async def analyse(self, payload):
        raise AssertionError("no analysis is asked in this test")

    async def select(self, payload):
        raise AssertionError("no selection is asked in this test")

    async def follow_up(self, payload):
        return Prediction(("ent_5e6f7a8b (person)",))

    async def predict(self, payload):
        return FollowUp("a year", Indicator(text="TE -[release_year]-> ANSWER", relations=("release_year",), depth=1))


class Brains:
    """A Brain factory over a fixed Brain class (the proxy's ``brains``)."""

    def __init__(self, name: str, make) -> None:
        self.name, self.make = name, make

    def __call__(self, session, ledger):
        return self.make()


def test_a_brain_without_the_calls_is_unsupported_and_a_wrong_type_is_malformed(untrained):
    proxy = local_proxy(untrained[0])
    proxy.brains = OldBrains(LocalBrainFactory(untrained[1], 3))  # analyse and select only
    ledger = UsageLedger()
    with PrivacySession(PrivacyConfig(mode="utility"), schema()) as session:
        follow, predict = seal(FOLLOW, session.guard), seal(PREDICT, session.guard)
        reply = asyncio.run(proxy.call("follow_up", follow.text))
        assert (reply.result, reply.reason, reply.attempts, reply.usage) == (None, "unsupported", 0, {})
        assert reply.message == f"{proxy.brains.name} answers no follow-up"
        brain = remote_brain(proxy, session, ledger)
        for call, payload, says in ((brain.follow_up, follow, "answers no follow-up"),
                                    (brain.predict, predict, "makes no prediction")):
            with pytest.raises(BrainError, match=f"^unsupported: planner:.* {says}$") as err:
                asyncio.run(call(payload))
            assert err.value.reason == "unsupported" and err.value.attempts == 0
        assert ledger.to_dict()["stages"] == {}  # the Brain was never called
        wrong = asyncio.run(proxy.call("verdict", follow.text))
        assert (wrong.reason, wrong.message) == ("malformed", "no Brain call answers a 'verdict' payload")

        proxy.brains = Brains("crossed", Crossed)
        with pytest.raises(BrainError, match="^malformed: a follow-up payload got a Prediction$"):
            asyncio.run(brain.follow_up(follow))
        with pytest.raises(BrainError, match="^malformed: a prediction payload got a FollowUp$"):
            asyncio.run(brain.predict(predict))


PSEUDONYM = re.compile(r"ent_[0-9a-f]{8}")


def renamed(texts) -> list[str]:
    """``texts`` with each session pseudonym replaced by its order of first appearance (``ent#1``, ...):
    two sessions draw different pseudonyms for the same entities."""
    seen: dict[str, str] = {}
    return [PSEUDONYM.sub(lambda m: seen.setdefault(m[0], f"ent#{len(seen) + 1}"), t) for t in texts]


def without_latency(usage: dict) -> dict:
    """A usage ledger's dict with every ``latency_s`` dropped (the only field two equal runs differ in)."""
    if isinstance(usage, dict):
        return {k: without_latency(v) for k, v in usage.items() if k != "latency_s"}
    return usage


def llm_brain(url: str) -> dict:
    """The dual-tower settings of a BrainProxy whose LLM Brain is tests/test_dualtower_modes.py's controller's."""
    return {"privacy": {"mode": "utility"}, "brain": {"kind": "llm", "reasks": 1, "llm": {
        "base_url": url, "model": "scripted", "side": "brain", "max_retries": 0, "backoff_s": 0.0,
        "max_backoff_s": 0.0, "timeout_s": 5.0}}}


def llm_proxy(url: str):
    return BrainProxy.func_or_class(llm_brain(url))


def assert_same_run(served, local, answers) -> None:
    """A controller run through the proxy equals the in-process one (up to pseudonyms and latencies)."""
    assert served.answers == local.answers == answers and served.fallback is local.fallback is None
    assert served.brain_calls == local.brain_calls and served.faults == local.faults == ()
    # the same payloads and tree, up to the pseudonyms each question's session draws
    seen = renamed([*served.brain_payloads, json.dumps(served.tree, sort_keys=True)])
    assert seen == renamed([*local.brain_payloads, json.dumps(local.tree, sort_keys=True)])
    assert served.evidence == local.evidence
    assert without_latency(served.usage) == without_latency(local.usage)
    assert served.exposure == local.exposure
    assert served.brain == "proxy:llm" and local.brain == "llm:scripted"


@pytest.mark.parametrize(("script", "question", "answers"), [(PREDICTING, SHARED, ("The Irishman",)),
                                                              (REFINING, RELEASED, ("1995",))],
                         ids=["predict", "refine"])
def test_a_controller_through_the_proxy_answers_as_in_process(script, question, answers):
    with ScriptedServer(Script.always(Respond(ScriptedBrain(**script)))) as server:
        local = controller(server.base_url).answer(*question)
        in_process = kinds(server)
        brains = RemoteBrainFactory(InProcessHandle(llm_proxy(server.base_url)), "llm", timeout_s=30.0)
        served = controller(server.base_url, brains=brains).answer(*question)
        through = kinds(server)[len(in_process):]
    assert through == in_process and "follow_up" in through
    assert_same_run(served, local, answers)


@pytest.mark.slow  # its own Serve start (~25 s)
def test_the_deployed_proxy_answers_predict_mode_as_in_process(ray_local):
    """The same through Serve: the BrainProxy deployed, RemoteBrain on its real DeploymentHandle."""
    from ray import serve

    with ScriptedServer(Script.always(Respond(ScriptedBrain(**PREDICTING)))) as server:
        local = controller(server.base_url).answer(*SHARED)
        in_process = kinds(server)
        serve.start(http_options={"host": "127.0.0.1", "port": free_port()})  # this test's own Serve
        try:
            handle = serve.run(BrainProxy.options(ray_actor_options={"num_cpus": 0}).bind(llm_brain(server.base_url)),
                               name="brain-modes", route_prefix=None)
            served = controller(server.base_url, brains=RemoteBrainFactory(handle, "llm", 60.0)).answer(*SHARED)
        finally:
            serve.shutdown()
        through = kinds(server)[len(in_process):]
    assert through == in_process == ["analysis", "follow_up", "prediction"]
    assert_same_run(served, local, ("The Irishman",))


def test_a_proxy_brain_without_the_calls_records_the_same_faults_as_in_process():
    with ScriptedServer(Script.always(Respond(ScriptedBrain(**REFINING)))) as server:
        factory = LLMBrainFactory(LLMConfig(base_url=server.base_url, model="scripted", side="brain", max_retries=0))
        always = {**SMALL, "selection": "always"}  # every selection goes through the proxy too
        local = controller(server.base_url, brains=OldBrains(factory), limits=always).answer(*RELEASED)
        in_process = kinds(server)
        proxy = llm_proxy(server.base_url)
        proxy.brains = OldBrains(proxy.brains)
        served = controller(server.base_url, brains=RemoteBrainFactory(InProcessHandle(proxy), "llm", 30.0),
                            limits=always).answer(*RELEASED)
        through = kinds(server)[len(in_process):]
    assert through == in_process == ["analysis", "selection", "selection"]
    assert [(f.stage, f.reason, f.attempts, f.fallback) for f in served.faults] == [
        ("follow_up", "unsupported", 0, "explore_all_lengths"), ("prediction", "unsupported", 0, "extend_hubs")]
    assert served.faults == local.faults and served.answers == local.answers == ()
    assert served.brain_calls == local.brain_calls == 3
    # the Hand sealed the two payloads before the proxy said unsupported: the Brain saw them, nothing was asked
    assert [json.loads(p)["kind"] for p in served.brain_payloads] == [
        "analysis", "selection", "follow_up", "selection", "prediction"]
    assert [json.loads(p)["kind"] for p in local.brain_payloads] == ["analysis", "selection", "selection"]
