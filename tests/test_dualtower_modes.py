"""Refine mode's follow-up and predict mode's predictions (PrivGemo §4.3.1) on the hand-made film graph.

With the LLM Brain at a scripted 127.0.0.1 server: a question only the Brain's answer to the Hand's
follow-up answers (*when was Casino released* after a wrong first indicator), and one only a predicted
auxiliary anchor answers (*which films share a director with Casino* with D_max = 1: the director the
Brain names on the rejected paths is explored from); neither is answered when those calls fail, and
each fault (500, malformed JSON, a Brain without the calls) falls back to the Hand's own refine/predict
exploration with the reason recorded. No request body of these runs holds a raw name or id. The local
Brain answers the same payloads with the planner: the follow-up by decoding again constrained to the
paths asked for, the prediction by following its decoded path along the shown paths.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from rg.graph import KnowledgeGraph
from rg.llm.config import LLMConfig
from rg.privacy import KGSchema, PrivacyConfig, PrivacySession
from rg.reasoning.dualtower import DualTowerConfig, build_controller
from rg.reasoning.dualtower.brain import BrainError, Indicator
from rg.reasoning.dualtower.brains import LLMBrainFactory
from rg.reasoning.dualtower.explore import Candidate, ViewWalk, explore_via
from rg.reasoning.dualtower.local_brain import LocalBrain
from rg.reasoning.dualtower.payload import FollowUpPayload, PredictionPayload, TopicView, TriedView, seal
from rg.reasoning.dualtower.phases import Tried, follow_up_payload, place
from rg.stores.memory import MemoryStore
from tests.dualtower_world import TRIPLES, TYPES, schema, shared_planner
from tests.scripted_server import Reply, Respond, Script, ScriptedServer, Status
from tests.test_dualtower_wire import RAW_ENTITIES, leaks, payload_of, relation_leaks

RELEASED = ("when was Casino released", ["Casino"])
SHARED = ("which films share a director with Casino", ["Casino"])
LABELS = re.compile(r"-\[([^\]]+)\]->")
CLUSTER = {"directed_by": "(film→person)", "written_by": "(film→person)", "starred_actors": "(film→person)",
           "release_year": "(film→year)"}
"""The privacy view's cluster of each relation (by its types), as the scripted Brain finds it in a payload."""


def first_label(paths, word: str):
    return next((p for p in paths if word in p[-1]), None)


class ScriptedBrain:
    """A Brain that reads each payload like a careful model would, with one wrong first guess.

    analysis: the indicator ``first`` (relation, answer type); selection: the candidates whose last
    relation is the indicator's last label, then the others as shown; follow-up: the path asked for
    whose label names the type the rejected candidates lacked (or ``follow`` when given); prediction:
    the node reached by the rejected path whose relation is ``bridge``, and from there ``onward``.
    """

    def __init__(self, first: tuple[str, str], follow: tuple[str, str] | None = None, bridge: str = "",
                 onward: tuple[str, str] = ("", ""), broken: dict | None = None) -> None:
        self.first, self.follow, self.bridge, self.onward = first, follow, bridge, onward
        self.broken = broken or {}

    def label(self, shown: dict, raw: str) -> str:
        """A raw relation as the payload shows it: itself, or in privacy mode the shown cluster of its types."""
        base, inverse = raw.removesuffix("^-1"), raw.endswith("^-1")
        paths = [tuple(p) for p in shown.get("relation_paths", [])]
        for tried in shown.get("tried", []) + shown.get("paths", []):
            paths += [tuple(b) for b in tried["branches"]]
        labels = [p[0] for p in paths if p]
        shown_as = next((x for x in labels if x == base), None) or next(x for x in labels if CLUSTER[base] in x)
        return shown_as + ("^-1" if inverse else "")

    def indicator(self, relation: str, answer_type: str, start: str = "TE_1") -> dict:
        return {"text": f"{start} -[{relation}]-> ANSWER", "relations": [relation], "depth": 1,
                "answer_type": answer_type}

    def __call__(self, body: dict):
        shown = payload_of(body)
        if shown["kind"] in self.broken:
            return self.broken[shown["kind"]]
        if shown["kind"] == "analysis":
            relation, answer_type = self.first
            return json.dumps({"sub_questions": [shown["question"]], "depth": 1,
                               "indicators": [self.indicator(self.label(shown, relation), answer_type)]})
        if shown["kind"] == "selection":
            last = LABELS.findall(shown["indicator"])[-1]
            ids = [c["id"] for c in shown["candidates"] if c["branches"][0][-1] == last]
            ids += [c["id"] for c in shown["candidates"] if c["id"] not in ids]
            return json.dumps({"ids": ids[: shown["keep"]]})
        if shown["kind"] == "follow_up":
            if self.follow is not None:
                relation, answer_type = self.label(shown, self.follow[0]), self.follow[1]
            else:
                answer_type = re.search(r"asks for a (\w+)", shown["tried"][0]["missing"])[1]
                relation = first_label(shown["relation_paths"], answer_type)[0]
            return json.dumps({"missing": f"a relation to a {answer_type}",
                               "indicator": self.indicator(relation, answer_type)})
        bridge = self.label(shown, self.bridge)
        tried = next(t for t in shown["paths"] if t["branches"][0] == [bridge])
        target = tried["nodes"][0][-1]
        relation, answer_type = self.onward
        return json.dumps({"predictions": [{"target": target, "path_pattern": [bridge, relation], "reason": "bridge"}],
                           "indicator": self.indicator(relation, answer_type, start=target)})


SMALL = {"d_max": 1, "subgraph_hops": 2, "w_max": 1}
"""D_max 1 and W_max 1: the schedule is topic 1, refine, predict, and each step keeps one candidate."""
ALWAYS = {**SMALL, "selection": "always"}
"""SMALL, and the Brain selects even among candidates that walk its indicator (the payloads are checked)."""


def controller(url: str, mode: str = "utility", brains=None, triples=TRIPLES, kg_schema=None, limits=SMALL, **llm):
    config = DualTowerConfig(
        privacy={"mode": mode}, similarity="lexical", **limits,
        brain={"kind": "llm", "reasks": 1,
               "llm": {"base_url": url, "model": "scripted", "side": "brain", "max_retries": 0, "backoff_s": 0.0,
                       "max_backoff_s": 0.0, "timeout_s": 5.0, **llm}})
    return build_controller(config, kg_schema or schema(), store=MemoryStore(KnowledgeGraph.from_triples(triples)),
                            brains=brains)


def kinds(server: ScriptedServer) -> list[str]:
    return [payload_of(r.body)["kind"] for r in server.chat_requests]


# ------------------------------------------------------------------------------------------ refine
REFINING = dict(first=("directed_by", "year"))


def test_only_the_brains_answer_to_the_follow_up_answers():
    with ScriptedServer(Script.always(Respond(ScriptedBrain(**REFINING)))) as server:
        result = controller(server.base_url, limits=ALWAYS).answer(*RELEASED)
        sent = kinds(server)
    assert result.answers == ("1995",) and result.fallback is None and not result.faults
    assert sent == ["analysis", "selection", "follow_up", "selection"]
    node = result.tree[0]
    assert node["tried"] == [["topic", 1], ["refine", 1]] and node["status"] == "verified"
    assert node["follow_up"] == "TE_1 -[release_year]-> ANSWER"
    follow = json.loads(result.brain_payloads[2])
    assert follow["kind"] == "follow_up"
    assert [t["missing"] for t in follow["tried"]] == ["ends at a person; the indicator asks for a year"]
    assert [t["branches"] for t in follow["tried"]] == [[["directed_by"]]]
    # the paths the refinement asks for: every hinted path but the rejected one
    assert follow["relation_paths"] == [["release_year"], ["starred_actors"], ["written_by"]]
    assert "missing: ends at a person" in follow["indicator"]
    # the refined pool holds only new candidates, selected by I+
    select = json.loads(result.brain_payloads[3])
    assert select["indicator"] == "TE_1 -[release_year]-> ANSWER"
    assert sorted(c["branches"][0][0] for c in select["candidates"]) == ["release_year", "starred_actors",
                                                                         "written_by"]
    stages = result.usage["stages"]
    assert stages["brain_follow_up"]["brain"]["calls"] == 1 and stages["brain_follow_up"]["brain"]["prompt_tokens"] > 0
    assert result.brain_calls == 4 and result.exposure["brain_calls"] == 4


@pytest.mark.parametrize(
    ("reply", "reason", "attempts", "calls"),
    [(Status(500), "server_error", 1, 1), (Reply("the missing piece is a year"), "malformed", 2, 2)],
)
def test_a_failed_follow_up_falls_back_to_the_hands_refinement(reply, reason, attempts, calls):
    script = ScriptedBrain(**REFINING, broken={"follow_up": reply, "prediction": reply})
    with ScriptedServer(Script.always(Respond(script))) as server:
        result = controller(server.base_url).answer(*RELEASED)
        sent = kinds(server)
    assert [(f.stage, f.reason, f.attempts, f.fallback) for f in result.faults] == [
        ("follow_up", reason, attempts, "explore_all_lengths"), ("prediction", reason, attempts, "extend_hubs")]
    assert sent.count("follow_up") == calls and sent.count("prediction") == calls
    # today's refine (the same indicator over every length) and predict (past the director) find no year
    assert result.answers == () and result.fallback == "unverified"
    assert result.tree[0]["tried"] == [["topic", 1], ["refine", 1], ["predict", 1]]
    assert result.tree[0]["status"] == "pruned" and result.tree[0]["follow_up"] is None


class AnalyseAndSelectOnly:
    """A Brain with only the two original calls (analysis and selection)."""

    def __init__(self, inner) -> None:
        self.inner, self.name = inner, inner.name

    async def analyse(self, payload):
        return await self.inner.analyse(payload)

    async def select(self, payload):
        return await self.inner.select(payload)


class OldBrains:
    def __init__(self, factory: LLMBrainFactory) -> None:
        self.factory, self.name = factory, factory.name

    def __call__(self, session, ledger):
        return AnalyseAndSelectOnly(self.factory(session, ledger))


def test_a_brain_without_the_calls_is_recorded_and_the_hand_goes_on():
    with ScriptedServer(Script.always(Respond(ScriptedBrain(**REFINING)))) as server:
        factory = LLMBrainFactory(LLMConfig(base_url=server.base_url, model="scripted", side="brain", max_retries=0))
        result = controller(server.base_url, brains=OldBrains(factory)).answer(*RELEASED)
        sent = kinds(server)
    assert sent == ["analysis"]
    assert [(f.stage, f.reason, f.attempts, f.fallback) for f in result.faults] == [
        ("follow_up", "unsupported", 0, "explore_all_lengths"), ("prediction", "unsupported", 0, "extend_hubs")]
    assert result.answers == ()


# ----------------------------------------------------------------------------------------- predict
PREDICTING = dict(first=("directed_by", "film"), follow=("written_by", "film"), bridge="directed_by",
                  onward=("directed_by^-1", "film"))


def test_only_the_predicted_anchor_answers():
    with ScriptedServer(Script.always(Respond(ScriptedBrain(**PREDICTING)))) as server:
        result = controller(server.base_url, limits=ALWAYS).answer(*SHARED)
        sent = kinds(server)
    assert result.answers == ("The Irishman",) and result.fallback is None and not result.faults
    assert sent == ["analysis", "selection", "follow_up", "selection", "prediction"]
    node = result.tree[0]
    assert node["tried"] == [["topic", 1], ["refine", 1], ["predict", 1]]
    predicted = json.loads(result.brain_payloads[4])
    assert predicted["kind"] == "prediction" and predicted["keep"] == 3
    # the Brain saw both rejected paths (topic and refine), with their nodes
    assert [t["branches"] for t in predicted["paths"]] == [[["directed_by"]], [["written_by"]]]
    director = predicted["paths"][0]["nodes"][0][0]
    assert node["predicted"] == [director] and director.endswith("(person)")
    [kept] = node["candidates"]
    shape = rf"TE_1 → \[directed_by\] → {re.escape(director)} ← \[directed_by\] ← ent_[0-9a-f]+ \(film\)"
    assert re.fullmatch(shape, kept)
    assert result.evidence == ("Casino → [directed_by] → Martin Scorsese ← [directed_by] ← The Irishman",)
    assert result.usage["stages"]["brain_predict"]["brain"]["calls"] == 1


@pytest.mark.parametrize(
    ("reply", "reason", "attempts"),
    [(Status(500), "server_error", 1), (Reply('{"predictions": "the director"}'), "malformed", 2),
     (Reply('{"predictions": [{"target": "ent_00000000 (person)"}]}'), "no_targets", 1)],
)
def test_a_failed_prediction_falls_back_to_growing_past_the_rejected_hubs(reply, reason, attempts):
    with ScriptedServer(Script.always(Respond(ScriptedBrain(**PREDICTING, broken={"prediction": reply})))) as server:
        result = controller(server.base_url).answer(*SHARED)
    assert [(f.stage, f.reason, f.attempts, f.fallback) for f in result.faults] == [
        ("prediction", reason, attempts, "extend_hubs")]
    # past the refine step's rejected writer there is nothing but Casino itself
    assert result.answers == () and result.fallback == "unverified" and result.tree[0]["predicted"] == []


# -------------------------------------------------------------------------------------------- wire
@pytest.mark.parametrize("mode", ["utility", "privacy"])
def test_no_raw_name_or_id_in_follow_up_and_prediction_requests(mode):
    with ScriptedServer(Script.always(Respond(ScriptedBrain(**PREDICTING)))) as server:
        run = controller(server.base_url, mode)
        results = [run.answer(*RELEASED), run.answer(*SHARED)]
        bodies = [r.raw.decode("utf-8") for r in server.chat_requests]
        sent = kinds(server)
    assert {"follow_up", "prediction"} <= set(sent)
    assert [leaks(body, RAW_ENTITIES) for body in bodies] == [[]] * len(bodies)
    if mode == "privacy":
        assert [relation_leaks(body) for body in bodies] == [[]] * len(bodies)
    wire = [json.dumps(payload_of(json.loads(b)), sort_keys=True) for b in bodies]
    saw = [json.dumps(json.loads(p), sort_keys=True) for r in results for p in r.brain_payloads]
    assert wire == saw
    assert sum(r.exposure["brain_calls"] for r in results) == len(bodies)


# ---------------------------------------------------------------------------------------- literals
def test_a_literal_answer_has_the_literal_type_its_coarse_view_does_not_show():
    """A literal is shown coarse (``number 1e7-1e8``), without the type a cluster label or the Brain names."""
    triples = TRIPLES + (("Casino", "budget", "52000000"),)
    kg_schema = KGSchema.build(triples, {**TYPES, "52000000": "literal"})
    with ScriptedServer(Script.always(Respond(ScriptedBrain(first=("budget", "literal"))))) as server:
        result = controller(server.base_url, triples=triples, kg_schema=kg_schema).answer(
            "what was the budget of Casino", ["Casino"])
    assert result.answers == ("52000000",) and not result.faults
    assert result.tree[0]["tried"] == [["topic", 1]] and result.tree[0]["candidates"] == [
        "TE_1 → [budget] → number 1e7-1e8"]


RONIN = (("Ronin", "starring", "m.0r1"), ("m.0r1", "actor", "Jean Reno"), ("Jean Reno", "nationality", "France"),
         ("Ronin", "starring", "m.0r2"), ("m.0r2", "actor", "Robert De Niro"), ("Robert De Niro", "nationality", "USA"))


def test_ends_the_reader_cannot_answer_do_not_verify_a_candidate():
    """A CVT (an unnamed ``m.`` node) is no answer for the reader, so a path ending only at CVTs is not
    sufficient: the tree goes on to the actors behind them instead of answering nothing."""
    kg_schema = KGSchema.build(RONIN, {"Ronin": "film", "Jean Reno": "person", "Robert De Niro": "person",
                                       "France": "country", "USA": "country", "m.0r1": "cvt", "m.0r2": "cvt"})
    with ScriptedServer(Script.always(Respond(ScriptedBrain(first=("starring", None))))) as server:
        run = controller(server.base_url, triples=RONIN, kg_schema=kg_schema, limits={})
        result = run.answer("who starred in Ronin", ["Ronin"])
    assert sorted(result.answers) == ["Jean Reno", "Robert De Niro"] and result.fallback is None
    assert result.tree[0]["tried"] == [["topic", 1], ["topic", 2]]
    assert result.evidence == ("Ronin → [starring] → {m.0r1 | m.0r2} → [actor] → {Jean Reno | Robert De Niro}",)


# -------------------------------------------------------------------------------- exploration, local
def test_exploring_from_predicted_anchors():
    view = (("A", "r", "B"), ("B", "s", "C"), ("C", "t", "D"), ("X", "u", "B"), ("X", "v", "C"))
    via = [[ViewWalk(("A", "B"), ("r",))]]
    found = explore_via(view, ["A"], ["TE_1"], via, 1, 10, lambda texts: [0.0] * len(texts), per_hub=4)
    assert [c.text() for c in found] == ["TE_1 → [r] → B", "TE_1 → [r] → B → [s] → C",
                                         "TE_1 → [r] → B ← [u] ← X"]
    two = explore_via(view, ["A", "X"], ["TE_1", "TE_2"], [[ViewWalk(("A", "B"), ("r",))], []], 1, 10,
                      lambda texts: [0.0] * len(texts), per_hub=4)
    # the second topic's own walks meet the predicted branch at its hub
    assert [c.text() for c in two] == ["TE_1 → [r] → B & TE_2 → [u] → B",
                                       "TE_1 → [r] → B → [s] → C & TE_2 → [v] → C"]


def test_targets_are_placed_on_the_shown_walks():
    walk = ViewWalk(("ent_0a0a (film)", "ent_0b0b (person)", "ent_0c0c (film)"), ("r", "r^-1"))
    tried = [Tried(Candidate((walk,), ("TE_1",)), "ends at a film")]
    for target in ("ent_0b0b (person)", "ent_0b0b", "(person)", "?x (person)", "person"):
        via, placed = place([target], tried, ["TE_1"], ["ent_0a0a (film)"])
        assert placed == ["ent_0b0b (person)"] and via == [[ViewWalk(walk.nodes[:2], ("r",))]], target
    assert place(["(film)"], tried, ["TE_1"], ["ent_0a0a (film)"])[1] == ["ent_0c0c (film)"]  # never the topic
    assert place(["ent_0d0d (person)", "(year)", "ent"], tried, ["TE_1"], ["ent_0a0a (film)"]) == ([[]], [])
    # plaintext nodes are shown as-is: only the node itself names one
    plain = [Tried(Candidate((ViewWalk(("Casino", "Martin Scorsese"), ("directed_by",)),), ("TE_1",)), "")]
    assert place(["Martin", "(person)"], plain, ["TE_1"], ["Casino"])[1] == []
    assert place(["Martin Scorsese"], plain, ["TE_1"], ["Casino"])[1] == ["Martin Scorsese"]
    payload = follow_up_payload("q", Indicator(text="TE -[r]-> ANSWER", depth=1), [TopicView(tag="TE_1", node="x")],
                                tried, [("r",), ("r", "r^-1"), ("s",)], 3)
    assert payload.relation_paths == (("r",), ("s",))  # the rejected candidate's path is not asked for again


@pytest.fixture(scope="module")
def local():
    return LocalBrain(shared_planner(), beams=3)


def sealed(payload):
    with PrivacySession(PrivacyConfig(mode="utility"), schema()) as session:
        return seal(payload, session.guard)


TOPIC = (TopicView(tag="TE_1", node="ent_0a1b2c3d (film)"),)
DIRECTED = TriedView(id=1, text="TE_1 → [directed_by] → ent_5e6f7a8b (person)", branches=(("directed_by",),),
                     nodes=(("ent_5e6f7a8b (person)",),), missing="ends at a person; the indicator asks for a film")


def test_the_local_brain_answers_the_follow_up_within_the_paths_asked_for(local):
    asked = (("release_year",), ("starred_actors",), ("written_by",), ("directed_by", "directed_by^-1"))
    payload = FollowUpPayload(question="which films share a director with TE_1 (film)", follow_up="which other path?",
                              indicator="TE -[directed_by]-> ANSWER", topics=TOPIC, tried=(DIRECTED,),
                              relation_paths=asked, max_depth=3)
    answer = asyncio.run(local.follow_up(sealed(payload)))
    assert answer.indicator.relations == ("directed_by", "directed_by^-1") and answer.indicator.depth == 2
    none = payload.model_copy(update={"relation_paths": (("no_such",),)})
    with pytest.raises(BrainError, match="no_paths"):
        asyncio.run(local.follow_up(sealed(none)))
    assert local.ledger.get("brain_follow_up", "brain").calls == 2  # booked on the Brain side, failures too


def test_the_local_brain_predicts_the_node_its_decoded_path_goes_on_from(local):
    hints = (("directed_by",), ("starred_actors",), ("directed_by", "directed_by^-1"))
    payload = PredictionPayload(question="which films share a director with TE_1 (film)",
                                indicator="TE -[directed_by]-> ANSWER", topics=TOPIC, paths=(DIRECTED,),
                                relation_paths=hints, keep=3, max_depth=3)
    prediction = asyncio.run(local.predict(sealed(payload)))
    assert prediction.targets == ("ent_5e6f7a8b (person)",)
    assert prediction.indicator is not None and prediction.indicator.relations == ("directed_by^-1",)
    assert prediction.indicator.text == "ent_5e6f7a8b (person) -[directed_by^-1]-> ANSWER"
    off = payload.model_copy(update={"paths": (DIRECTED.model_copy(update={"branches": (("written_by",),)}),)})
    with pytest.raises(BrainError, match="no_targets"):
        asyncio.run(local.predict(sealed(off)))
