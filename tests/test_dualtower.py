"""The dual-tower controller (rg.reasoning.dualtower) with the local Brain: exact exploration,
pruning and tree policies on tiny hand-made views, the planner's path likelihood against beam
search, and whole questions (1-, 2-, 3-hop and two-topic) answered on a hand-made film graph
in plaintext and utility modes, and in privacy mode with a planner trained on the cluster view."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rg.config import ConfigError, validate_config
from rg.graph import KnowledgeGraph
from rg.privacy import PrivacyConfig, PrivacySession
from rg.reasoning.dualtower import (
    DualTowerConfig,
    Indicator,
    LexicalSimilarity,
    build_controller,
)
from rg.privacy import KGSchema
from rg.reasoning.dualtower.explore import Candidate, ViewWalk, Walking, band, explore, explore_each, extend
from rg.reasoning.dualtower.hand import Hand, refine_order, with_twins
from rg.reasoning.dualtower.brain import BrainError
from rg.reasoning.dualtower.local_brain import planner_question
from rg.reasoning.dualtower.payload import AnalysisPayload, TopicView, seal
from rg.reasoning.dualtower.prune import PruneScorer, fuzzy_top
from rg.reasoning.dualtower.tree import ReasoningTree, TreeNode, next_step, schedule
from rg.retrievers.planner.decode import beam_search
from rg.retrievers.planner.likelihood import path_log_likelihood
from rg.retrievers.planner.trie import relation_trie, token_trie
from rg.stores.memory import MemoryStore
from tests.dualtower_world import (
    ANSWER_SETS,
    QUESTIONS,
    TRIPLES,
    TYPES,
    passive_cluster_planner,
    schema,
    shared_cluster_planner,
    shared_planner,
    trained_planner,
)

VIEW = (
    ("A", "r", "B"), ("B", "s", "C"), ("A", "t", "D"), ("E", "r", "B"), ("E", "u", "F"), ("C", "s", "G"),
)


def flat(texts):
    return np.zeros(len(texts))


# ------------------------------------------------------------------------------ exploration
def test_one_topic_walks_have_exactly_depth_hops_and_never_revisit():
    one = explore(VIEW, ["A"], ["TE_1"], 1, band(1, 1), 80, flat, 16)
    assert [c.text() for c in one] == ["TE_1 → [r] → B", "TE_1 → [t] → D"]
    two = explore(VIEW, ["A"], ["TE_1"], 2, band(1, 2), 80, flat, 16)
    assert sorted(c.text() for c in two) == ["TE_1 → [r] → B ← [r] ← E", "TE_1 → [r] → B → [s] → C"]
    assert [c.relation_paths for c in two if c.hub == "E"] == [(("r", "r^-1"),)]


def test_a_walk_may_pass_a_supernode_twice_and_grounding_keeps_raw_walks_without_repeats():
    """Sanitised, a lone film and its lone genre pool into one ``entity ×2`` supernode, so has_genre is a loop
    on it: the 2-hop walk passes it twice, and grounds to the one raw walk (film, then genre). A plain node is
    still never revisited."""
    triples = (("Dead Tone", "directed_by", "Deon Taylor"), ("Dead Tone", "has_genre", "Horror"))
    kg_schema = KGSchema.build(triples, {"Dead Tone": "film", "Deon Taylor": "person", "Horror": "genre"})
    config = DualTowerConfig(sanitiser={"group": True})
    with PrivacySession(PrivacyConfig(mode="utility"), kg_schema) as session:
        view = session.expose(triples, ["Deon Taylor"], config.sanitiser)
        group = next(iter(view.groups))
        members = {session.entity("Dead Tone"), session.entity("Horror")}
        assert group.endswith("(entity ×2)") and set(view.groups[group]) == members
        hand = Hand(config)
        anchor = hand.anchors(session, view, ["Deon Taylor"])[0]
        found = explore(view.triples, [anchor], ["TE_1"], 2, band(1, 2), 80, flat, 1)
        # the loop is walked both ways; only the forward way has a raw walk
        assert [c.relation_paths for c in found] == [(("directed_by^-1", "has_genre"),),
                                                     (("directed_by^-1", "has_genre^-1"),)]
        assert all(c.branches[0].nodes == (anchor, group, group) for c in found)
        indicator = Indicator(text="TE -[directed_by^-1]-> ?x1 -[has_genre]-> ANSWER", depth=2)
        grounded = hand.ground(session, view, KnowledgeGraph.from_triples(triples), {"TE_1": "Deon Taylor"},
                               found, indicator)
        assert [(g.reason, g.ends) for g in grounded] == [(None, ("Horror",)), ("not_grounded", ())]
    plain = explore((("A", "r", "B"), ("B", "s", "B")), ["A"], ["TE_1"], 2, band(1, 2), 80, flat, 1)
    assert plain == []  # B is no supernode: B → s → B is not a walk


def test_two_topics_meet_at_a_hub_within_the_band():
    # A and E both reach B in one hop: total 2 in (0, 2]; at depth 2 both reach C (total 4 in (2, 4])
    [hub1] = explore(VIEW, ["A", "E"], ["TE_1", "TE_2"], 1, band(2, 1), 80, flat, 16)
    assert hub1.text() == "TE_1 → [r] → B & TE_2 → [r] → B" and hub1.hub == "B"
    deeper = explore(VIEW, ["A", "E"], ["TE_1", "TE_2"], 2, band(2, 2), 80, flat, 16)
    assert [c.text() for c in deeper] == ["TE_1 → [r] → B → [s] → C & TE_2 → [r] → B → [s] → C"]
    assert band(3, 2) == (3, 6)


def test_the_separate_baseline_pools_single_topic_walks_tagged_by_their_own_topic():
    pooled = explore_each(VIEW, ["A", "E"], ["TE_1", "TE_2"], 1, band(1, 1), 80, flat)
    assert [(c.text(), c.tags) for c in pooled] == [("TE_1 → [r] → B", ("TE_1",)), ("TE_1 → [t] → D", ("TE_1",)),
                                                    ("TE_2 → [r] → B", ("TE_2",)), ("TE_2 → [u] → F", ("TE_2",))]


def test_each_round_keeps_the_width_best_walks():
    def prefer_t(texts):
        return np.array([1.0 if "[t]" in t else 0.0 for t in texts])

    kept = explore(VIEW, ["A"], ["TE_1"], 1, band(1, 1), 1, prefer_t, 16)
    assert [c.text() for c in kept] == ["TE_1 → [t] → D"]


def test_the_walks_of_the_followed_path_survive_every_cut_whatever_their_score():
    """The memory term can rank every walk of the indicator's path below others: with ``follow`` the cut of
    each round keeps the walks beginning the path first (round 1: r; round 2: r, s), then the best others."""
    def prefer_t_and_r_back(texts):
        return np.array([1.0 if ("[t]" in t or "← [r] ←" in t) else 0.0 for t in texts])

    plain = explore(VIEW, ["A"], ["TE_1"], 2, band(1, 2), 1, prefer_t_and_r_back, 16)
    assert plain == []  # round 1 keeps A → t → D, a dead end
    followed = explore(VIEW, ["A"], ["TE_1"], 2, band(1, 2), 1, prefer_t_and_r_back, 16,
                       walking=Walking(follow=("r", "s")))
    assert [c.text() for c in followed] == ["TE_1 → [r] → B → [s] → C"]
    # two topics: no branch follows one topic's path, the cut is by score alone (A keeps its dead end t;
    # were ("r",) followed, A and E would both keep r and meet at B)
    joint = explore(VIEW, ["A", "E"], ["TE_1", "TE_2"], 1, band(2, 1), 1, prefer_t_and_r_back, 16,
                    walking=Walking(follow=("r",)))
    assert joint == []
    # the last cut (W1) keeps the candidates walking the path exactly before any other
    cands = explore(VIEW, ["A"], ["TE_1"], 1, band(1, 1), 80, flat, 16)
    remembered = PruneScorer(LexicalSimilarity(), "TE -[r]-> ANSWER", ["t d"], alpha=0.2)
    assert [c.text() for c, _ in fuzzy_top(cands, remembered, 1)] == ["TE_1 → [t] → D"]
    [(best, score)] = fuzzy_top(cands, remembered, 1, follow=("r",))
    assert best.text() == "TE_1 → [r] → B" and score == pytest.approx(0.2 * 2 / 3)


def test_trails_pass_an_entity_again_by_another_triple_never_by_the_same_one():
    """*The directors of the films written by the writer of Fire and Ice*: its writer Bakshi wrote Wizards
    and directed it, so the answer is a node the walk passed already. A simple walk cannot reach it; a trail
    can, and grounds to the raw walk. No trail takes a triple twice (B → r⁻¹ → A → r → B is not one)."""
    triples = (("Fire and Ice", "written_by", "Ralph Bakshi"), ("Wizards", "written_by", "Ralph Bakshi"),
               ("Wizards", "directed_by", "Ralph Bakshi"), ("Fire and Ice", "release_year", "1983"))
    path = ("written_by", "written_by^-1", "directed_by")
    for trails, expected in ((False, []), (True, [(path,)])):
        found = explore(triples, ["Fire and Ice"], ["TE_1"], 3, band(1, 3), 80, flat, 16,
                        walking=Walking(trails=trails))
        assert [c.relation_paths for c in found if c.relation_paths == (path,)] == expected
    trails = explore(triples, ["Fire and Ice"], ["TE_1"], 3, band(1, 3), 80, flat, 16, walking=Walking(trails=True))
    for c in trails:
        w = c.branches[0]
        steps = [tuple(sorted((a, b))) + (r.removesuffix("^-1"),) for a, r, b in zip(w.nodes, w.labels, w.nodes[1:])]
        assert len(steps) == len(set(steps))
    # grounding follows the same rule on the raw graph
    kg_schema = KGSchema.build(triples, {"Fire and Ice": "film", "Wizards": "film", "Ralph Bakshi": "person",
                                         "1983": "year"})
    indicator = Indicator(text="TE -[written_by]-> ?x1 -[written_by^-1]-> ?x2 -[directed_by]-> ANSWER", depth=3)
    for walks, reason in (("simple", "not_grounded"), ("trails", None)):
        config = DualTowerConfig(privacy={"mode": "plaintext"}, walks=walks)
        with PrivacySession(PrivacyConfig(mode="plaintext"), kg_schema) as session:
            view = session.expose(triples, ["Fire and Ice"], config.sanitiser)
            hand = Hand(config)
            anchor = hand.anchors(session, view, ["Fire and Ice"])[0]
            [walk] = [c for c in explore(view.triples, [anchor], ["TE_1"], 3, band(1, 3), 80, flat, 1,
                                         walking=Walking(trails=True)) if c.relation_paths == (path,)]
            [g] = hand.ground(session, view, KnowledgeGraph.from_triples(triples), {"TE_1": "Fire and Ice"},
                              [walk], indicator)
            assert g.reason == reason and g.ends == (("Ralph Bakshi",) if reason is None else ())
    seed = explore(VIEW, ["A"], ["TE_1"], 1, band(1, 1), 80, flat, 16)
    assert [c.text() for c in extend(VIEW, seed, ["A"], 1, 80, flat, walking=Walking(trails=True))
            if c.hub == "E"] == ["TE_1 → [r] → B ← [r] ← E"]
    # an edge at a supernode stands for several raw triples: a trail may take it again, a plain node's not
    group = "ent_group_1 (film ×3)"
    looped = explore((("A", "r", group), (group, "s", group)), ["A"], ["TE_1"], 3, band(1, 3), 80, flat, 16,
                     walking=Walking(trails=True))
    assert [c.relation_paths for c in looped] == [(("r", "s", "s"),), (("r", "s", "s^-1"),),
                                                  (("r", "s^-1", "s"),), (("r", "s^-1", "s^-1"),)]


# --------------------------------------------------------------------------------- pruning
class Exemplars:
    def __init__(self, texts):
        self.texts = texts

    def exemplars(self, question, indicator):
        return self.texts


def test_prune_score_is_alpha_drm_plus_the_memory_term():
    cands = explore(VIEW, ["A"], ["TE_1"], 1, band(1, 1), 80, flat, 16)
    sim = LexicalSimilarity()
    none = PruneScorer(sim, "TE -[r]-> ANSWER", [], alpha=0.6)
    assert [c.text() for c, _ in fuzzy_top(cands, none, 2)] == ["TE_1 → [r] → B", "TE_1 → [t] → D"]
    # words: pattern "TE_1 → [r] → (B)" → {r, b}; indicator {r}: Dice 2·1/3
    assert fuzzy_top(cands, none, 1)[0][1] == pytest.approx(0.6 * 2 / 3)
    remembered = PruneScorer(sim, "TE -[r]-> ANSWER", Exemplars(["t d"]).exemplars("", ""), alpha=0.2)
    best, score = fuzzy_top(cands, remembered, 1)[0]
    assert best.text() == "TE_1 → [t] → D" and score == pytest.approx(0.8 * 1.0)


# ------------------------------------------------------------------------------------ tree
def test_schedule_and_pruning_after_repeated_failures():
    assert schedule(2, 3) == [("topic", 2), ("topic", 3), ("topic", 1), ("refine", 3), ("predict", 3)]
    assert schedule(5, 3)[0] == ("topic", 3)
    node = TreeNode(Indicator(text="x", depth=2), 2, "topic")
    node.tried.append(("topic", 2))
    node.failures = 1
    assert next_step(node, 2, 3, max_failures=4) == ("topic", 3)
    node.failures = 4
    assert next_step(node, 2, 3, max_failures=4) is None
    tree = ReasoningTree.build((Indicator(text="a", depth=9), Indicator(text="b", depth=1)), d_max=3)
    assert [(n.mode, n.depth, n.status) for n in tree.nodes] == [("topic", 3, "active"), ("topic", 1, "active")]


def test_config_errors_name_the_field_and_the_fix():
    with pytest.raises(ConfigError, match="w_max .* > w1 .*Fix: lower w_max or raise w1"):
        validate_config({"w_max": 5, "w1": 4}, DualTowerConfig)
    with pytest.raises(ConfigError, match="brain.llm is not set. Fix"):
        validate_config({"brain": {"kind": "llm"}}, DualTowerConfig)
    with pytest.raises(ConfigError, match="Fix: set brain.llm.side: brain"):
        validate_config({"brain": {"kind": "llm", "llm": {"base_url": "http://127.0.0.1:1/v1", "model": "m"}}},
                        DualTowerConfig)
    cfg = DualTowerConfig()
    assert (cfg.w_max, cfg.d_max, cfg.w1, cfg.alpha) == (3, 3, 80, 0.6)
    with pytest.raises(ValueError, match="brain.planner is not set"):
        build_controller(cfg, schema())


def test_the_local_brain_is_hinted_every_path_an_llm_brain_the_shortest_200():
    """A hub with 150 relations: the 3-hop path ranks after their 1- and 2-hop paths (shortest first). The
    local Brain's default cap (its decoding trie) keeps it; an LLM Brain's (prompt tokens) stops at 200."""
    hub = [("Hub", f"r{i:03d}", f"x{i}") for i in range(150)]
    chain = [("Hub", "a", "m1"), ("m1", "b", "m2"), ("m2", "c", "end")]
    with PrivacySession(PrivacyConfig(mode="utility"), KGSchema.build(hub + chain)) as session:
        local = DualTowerConfig()
        view = session.expose(hub + chain, ["Hub"], local.sanitiser)
        llm = DualTowerConfig(brain={"kind": "llm", "llm": {"base_url": "http://127.0.0.1:1/v1", "model": "m",
                                                              "side": "brain"}})
        anchors = Hand(local).anchors(session, view, ["Hub"])
        local_hints = Hand(local).hints(view, anchors)
        llm_hints = Hand(llm).hints(view, anchors)
        every = Hand(DualTowerConfig(brain={"max_hint_paths": 5000})).hints(view, anchors)
        assert (local.brain.hint_limit, llm.brain.hint_limit) == (5000, 200)
        assert local_hints == every and 200 < every.index(("a", "b", "c")) < 5000
        assert llm_hints == every[:200] and ("a", "b", "c") not in llm_hints
        fixed = DualTowerConfig(brain={"max_hint_paths": 10})
        assert len(Hand(fixed).hints(view, anchors)) == 10


# --------------------------------------------------------------------------- local Brain
@pytest.fixture(scope="module")
def planner():
    return shared_planner()


def test_planner_likelihood_equals_the_beam_score(planner):
    kg = KnowledgeGraph.from_triples(TRIPLES)
    trie, _ = token_trie(relation_trie(kg, ["Casino"], 2), planner.vocab)
    prompt = planner.prompt_ids([planner_question("which films share a director with TE_1 (film)", planner.config)])[0]
    beams = beam_search(planner, [prompt], 3, [trie])[0]
    scores = path_log_likelihood(planner, prompt, [b.relation_path for b in beams] + [("no_such",)])
    assert scores[:-1] == pytest.approx([b.score for b in beams], abs=1e-4)
    assert scores[-1] == float("-inf")
    assert beams[0].relation_path == ("directed_by", "directed_by^-1")


def test_the_local_brain_reads_only_the_sealed_payload(planner):
    with PrivacySession(PrivacyConfig(mode="utility"), schema()) as session:
        session.expose(TRIPLES, ["Casino"], DualTowerConfig().sanitiser)
        payload = AnalysisPayload(question="who directed Casino", topics=(TopicView(tag="TE_1", node="x"),),
                                  relation_paths=(("directed_by",),), max_depth=3)
        with pytest.raises(Exception, match="egress refused: the request holds a raw entity_name"):
            seal(payload, session.guard)


@pytest.fixture(scope="module")
def store():
    return MemoryStore(KnowledgeGraph.from_triples(TRIPLES))


def right(question, answers, expected):
    return bool(answers) and answers[0] in ANSWER_SETS.get(question, {expected})


def test_a_name_the_question_mentions_besides_its_topic_is_masked_not_refused(planner, store):
    """Found on WebQSP ("what is los angeles california time zone"): a subgraph name in the question that
    is not a topic made the guard refuse every Brain payload, and the Hand answered alone."""
    controller = build_controller(DualTowerConfig(privacy={"mode": "utility"}, similarity="lexical"), schema(),
                                  store=store, planner=planner)
    result = controller.answer("who directed Casino, the film with Robert De Niro", ["Casino"])
    assert not result.faults and result.brain_calls >= 1 and result.answers  # the Brain was asked, not refused
    assert result.brain_payloads and not any("De Niro" in p or "Casino" in p for p in result.brain_payloads)
    assert any("who directed TE_1 (film), the film with ent_" in p for p in result.brain_payloads)


@pytest.mark.parametrize("mode", ["plaintext", "utility"])
def test_local_brain_answers_hand_made_questions(planner, store, mode):
    controller = build_controller(DualTowerConfig(privacy={"mode": mode}, similarity="lexical"), schema(),
                                  store=store, planner=planner)
    results = {}
    for question, topics, expected in QUESTIONS:
        result = results[question] = controller.answer(question, topics)
        assert right(question, result.answers, expected), (question, result.answers, result.tree)
        assert result.fallback is None and not result.faults
        assert 1 <= result.brain_calls <= 2
        assert result.usage["stages"]["brain_analyse"]["brain"]["calls"] == 1
    casino = results["who wrote Casino"]
    assert casino.answers == ("Nicholas Pileggi",)
    # the W_max = 3 kept paths are all verified evidence; the Brain's best comes first
    assert casino.evidence[0] == "Casino → [written_by] → Nicholas Pileggi" and len(casino.evidence) == 3
    heat = results["which films starred Al Pacino and were directed by Michael Mann"]
    assert heat.answers == ("Heat",)
    assert {"Al Pacino ← [starred_actors] ← Heat", "Michael Mann ← [directed_by] ← Heat"} <= set(heat.evidence)
    if mode == "utility":
        for payload in casino.brain_payloads + heat.brain_payloads:
            assert not any(name in payload for name in ("Casino", "Pileggi", "Pacino", "Mann", "Heat"))
        assert casino.exposure["stages"]["anonymise"]["nodes"] > 0


def test_privacy_mode_with_a_planner_trained_on_the_cluster_view(store):
    planner = shared_cluster_planner()
    controller = build_controller(DualTowerConfig(privacy={"mode": "privacy"}, similarity="lexical"), schema(),
                                  store=store, planner=planner)
    result = controller.answer("when was Top Gun released", ["Top Gun"])
    assert result.answers == ("1986",) and not result.faults
    payloads = "".join(result.brain_payloads)
    assert "release_year" not in payloads and "rel_" in payloads
    # directed_by, written_by and starred_actors share one cluster (film→person): the view cannot tell them
    # apart, but a two-topic question still meets at the one film both topics touch
    heat = controller.answer("which films starred Al Pacino and were directed by Michael Mann",
                             ["Al Pacino", "Michael Mann"])
    assert heat.answers == ("Heat",)


@pytest.mark.parametrize("resolve, expected", [
    ("question", ("Nicholas Pileggi",)),
    ("all", ("Martin Scorsese",)),
])
def test_in_privacy_mode_the_hand_tells_a_clusters_relations_apart_by_the_raw_question(store, resolve, expected):
    """The view shows directed_by, written_by and starred_actors as one cluster, so the Brain's path grounds to
    all three; the Hand holds the raw question and keeps the relation it is closest to (``question``), or
    keeps all three (``all``) and answers with the director, whom the walks' order puts first."""
    config = DualTowerConfig(privacy={"mode": "privacy"}, similarity="lexical", hand={"resolve_clusters": resolve})
    controller = build_controller(config, schema(), store=store, planner=passive_cluster_planner())
    result = controller.answer("who was Casino written by", ["Casino"])
    assert result.answers == expected and not result.faults
    assert "written_by" not in "".join(result.brain_payloads)
    if resolve == "question":
        assert result.evidence[0] == "Casino → [written_by] → Nicholas Pileggi"


def test_the_hand_checks_a_literal_answers_type_by_its_schema_type_not_its_coarse_view():
    """A date is shown to the Brain as ``year 1995``; the cluster label names its type ``literal``."""
    triples = (("Heat", "release_date", "1995-12-15"), ("Heat", "directed_by", "Michael Mann"))
    kg_schema = KGSchema.build(triples, {"Heat": "film", "1995-12-15": "literal", "Michael Mann": "person"})
    with PrivacySession(PrivacyConfig(mode="privacy"), kg_schema) as session:
        assert session.entity("1995-12-15") == "year 1995"
        node_of = session.entity
        assert Hand._typed(session, node_of, ["1995-12-15"], "literal")
        assert not Hand._typed(session, node_of, ["Michael Mann"], "literal")
        assert Hand._typed(session, node_of, ["Michael Mann", "1995-12-15"], "Literal ")


def test_a_pattern_shows_types_in_every_mode_never_a_name_or_a_group_size():
    """DRM patterns are the Hand's: a plaintext name shows as the type utility mode shows for it, a supernode
    as its label without its size, a pseudonym as before; so the modes' patterns read alike."""
    kg_schema = schema()
    patterns = {}
    for mode in ("plaintext", "utility"):
        with PrivacySession(PrivacyConfig(mode=mode), kg_schema) as session:
            view = session.expose(TRIPLES, ["Casino"], DualTowerConfig().sanitiser)
            anchor = session.entity("Casino", topic=True)
            found = explore(view.triples, [anchor], ["TE_1"], 2, band(1, 2), 80, flat, 1, session.pattern_label)
            patterns[mode] = sorted(c.pattern(session.pattern_label) for c in found)
            if mode == "utility":  # a pseudonym's label is its public label, as it always was
                assert patterns[mode] == sorted(c.pattern() for c in found)
                assert session.pattern_label("ent_group_2 (person ×12)") == "person"
            else:
                assert found[0].pattern() != found[0].pattern(session.pattern_label)  # the name, unlabelled
    assert patterns["plaintext"] == patterns["utility"]
    assert "TE_1 → [directed_by] → (person) ← [directed_by] ← (film)" in patterns["plaintext"]
    names = [e for h, _, t in TRIPLES for e in (h, t) if TYPES.get(e) != "year"]
    assert not any(name in p for p in patterns["plaintext"] for name in names)


class RecordingSimilarity(LexicalSimilarity):
    """Word overlap that keeps every text it scored."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def score(self, texts, reference):
        self.seen += list(texts)
        return super().score(texts, reference)


def test_a_plaintext_question_gives_its_drm_no_raw_name(planner, store):
    controller = build_controller(DualTowerConfig(privacy={"mode": "plaintext"}, similarity="lexical"), schema(),
                                  store=store, planner=planner)
    controller.similarity = recording = RecordingSimilarity()
    question, topics, expected = QUESTIONS[0]
    assert right(question, controller.answer(question, topics).answers, expected)
    assert recording.seen and not any(name in text for text in recording.seen for name in (*topics, expected))


@pytest.mark.parametrize("resolve", ["question", "all"])
def test_with_one_kept_path_the_hand_still_finds_the_writer_among_the_brains_equals(store, resolve):
    """W_max = 1: the Brain keeps one of Casino's three film→person candidates, which are equal in its view.
    With ``question`` the Hand grounds their twins too and answers with the writer."""
    config = DualTowerConfig(privacy={"mode": "privacy"}, similarity="lexical", w_max=1,
                             hand={"resolve_clusters": resolve})
    controller = build_controller(config, schema(), store=store, planner=passive_cluster_planner())
    result = controller.answer("who was Casino written by", ["Casino"])
    assert not result.faults
    if resolve == "question":
        assert result.answers == ("Nicholas Pileggi",)
        assert result.evidence[0] == "Casino → [written_by] → Nicholas Pileggi"
    else:
        assert result.answers != ("Nicholas Pileggi",) and len(result.evidence) == 1


def test_twins_are_the_ranked_candidates_with_a_kept_ones_view_paths():
    def candidate(node, *labels):
        return Candidate(branches=(ViewWalk(nodes=("a",) * len(labels) + (node,), labels=labels),), tags=("TE_1",))

    kept = [candidate("x", "rel_01")]
    ranked = [kept[0], candidate("y", "rel_02"), candidate("z", "rel_01"), candidate("w", "rel_01")]
    assert with_twins(kept, ranked, limit=10) == [kept[0], ranked[2], ranked[3]]
    assert with_twins(kept, ranked, limit=2) == [kept[0], ranked[2]]


def test_the_hands_refinement_reorders_only_candidates_the_brain_could_not_tell_apart():
    def candidate(*labels):
        return Candidate(branches=(ViewWalk(nodes=("a",) * (len(labels) + 1), labels=labels),), tags=("TE_1",))

    same_a, other, same_b = candidate("rel_01"), candidate("rel_02"), candidate("rel_01")
    assert refine_order([same_a, other, same_b], [0.1, 0.9, 0.5]) == [2, 1, 0]
    assert refine_order([same_a, other, same_b], [0.5, 0.9, 0.5]) == [0, 1, 2]  # ties keep the Brain's order


def test_exploring_each_topic_separately_answers_films_only_one_topic_touches(planner, store):
    """The joint search's candidates cover both topics, so only the film both touch is an answer; the
    separate baseline grounds each topic's walks alone and also answers films of one topic only."""
    question, topics = "which films starred Al Pacino and were directed by Michael Mann", ["Al Pacino", "Michael Mann"]
    results = {}
    for multi_topic in ("joint", "separate"):
        config = DualTowerConfig(privacy={"mode": "utility"}, similarity="lexical", multi_topic=multi_topic)
        results[multi_topic] = build_controller(config, schema(), store=store, planner=planner).answer(question, topics)
    joint, separate = results["joint"], results["separate"]
    assert joint.answers == ("Heat",)
    assert all(" & " in c for node in joint.tree for c in node["candidates"])
    assert separate.fallback is None and "Heat" in separate.answers and "The Irishman" in separate.answers
    shown = [c for node in separate.tree for c in node["candidates"]]
    assert shown and all(" & " not in c for c in shown)
    assert {c.split(" ")[0] for c in shown} == {"TE_1", "TE_2"}  # grounded from each candidate's own topic
    assert "Al Pacino ← [starred_actors] ← The Irishman" in separate.evidence
    with pytest.raises(ConfigError, match="multi_topic"):
        validate_config({"multi_topic": "both"}, DualTowerConfig, source="test")


BATCH_QUESTIONS = ("who directed TE_1 (film)", "who wrote TE_1 (film)", "which films share a director with TE_1 (film)",
                   "who starred in TE_1 (film)", "when was TE_1 (film) released")
CASINO_PATHS = (("directed_by",), ("starred_actors",), ("written_by",), ("release_year",),
                ("directed_by", "directed_by^-1"), ("starred_actors", "starred_actors^-1"))


def analysis_payloads(session) -> list:
    return [seal(AnalysisPayload(question=q, topics=(TopicView(tag="TE_1", node="film"),), relation_paths=CASINO_PATHS,
                                 max_depth=3), session.guard) for q in BATCH_QUESTIONS]


def test_a_batch_of_analyses_equals_each_analysed_alone(planner):
    import asyncio

    from rg.reasoning.dualtower.local_brain import LocalBrain

    brain = LocalBrain(planner, beams=3, indicators=2)
    with PrivacySession(PrivacyConfig(mode="utility"), schema()) as session:
        payloads = analysis_payloads(session)
        alone = [asyncio.run(brain.analyse(p)) for p in payloads]
        together = brain.analyse_batch(payloads)
        empty = seal(AnalysisPayload(question="who directed TE_1 (film)", topics=(TopicView(tag="TE_1", node="film"),),
                                     relation_paths=(("no_such_relation",),), max_depth=3), session.guard)
        mixed = brain.analyse_batch([payloads[0], empty])
    assert [a.indicators for a in together] == [a.indicators for a in alone]
    assert [a.depth for a in together] == [a.depth for a in alone]
    assert alone[0].indicators[0].relations == ("directed_by",)
    assert alone[2].indicators[0].relations == ("directed_by", "directed_by^-1")
    assert mixed[0].indicators == alone[0].indicators
    assert isinstance(mixed[1], BrainError) and mixed[1].reason == "no_paths"
    assert brain.ledger.by_side()["brain"].calls == len(payloads)  # analyse books; analyse_batch does not


def test_the_hands_own_raw_planner_tells_a_clusters_relations_apart_where_the_words_do_not(store):
    """"who wrote Casino" shares no word with ``written_by``: the lexical scorer ties the cluster's three relations
    and keeps them all (the director's walk comes first), while the Hand's planner, trained on raw relations,
    finds ``written_by`` most likely. The Brain still sees clusters only."""
    answers = {}
    for resolve in ("question", "planner"):
        config = DualTowerConfig(privacy={"mode": "privacy"}, similarity="lexical", hand={"resolve_clusters": resolve})
        controller = build_controller(config, schema(), store=store, planner=shared_cluster_planner(),
                                      hand_planner=shared_planner())
        result = controller.answer("who wrote Casino", ["Casino"])
        assert not result.faults and "written_by" not in "".join(result.brain_payloads)
        answers[resolve] = result.answers
    assert answers == {"question": ("Martin Scorsese",), "planner": ("Nicholas Pileggi",)}


def test_resolving_clusters_with_the_hands_planner_needs_one():
    config = DualTowerConfig(privacy={"mode": "privacy"}, hand={"resolve_clusters": "planner"})
    with pytest.raises(ValueError, match="hand.planner is not set"):
        build_controller(config, schema(), planner=shared_cluster_planner())


def test_the_brain_selects_only_when_no_candidate_walks_its_indicator(planner, store):
    """``selection: ambiguous`` skips the Brain's selection when candidates walk the indicator's relation path; the
    local Brain's selection would rank that path first anyway, so the answers are those of ``always``."""
    runs = {}
    for selection in ("ambiguous", "always"):
        config = DualTowerConfig(similarity="lexical", selection=selection)
        controller = build_controller(config, schema(), store=store, planner=planner)
        runs[selection] = {q: controller.answer(q, topics) for q, topics, _ in QUESTIONS}
    for question, _, _ in QUESTIONS:
        skipped, asked = runs["ambiguous"][question], runs["always"][question]
        assert skipped.answers == asked.answers
        assert skipped.brain_calls == asked.brain_calls - skipped.indicator_selections
        assert asked.indicator_selections == 0
    casino = runs["ambiguous"]["who wrote Casino"]
    assert (casino.brain_calls, casino.indicator_selections) == (1, 1)
    assert [json.loads(p)["kind"] for p in casino.brain_payloads] == ["analysis"]
    assert casino.evidence[0] == "Casino → [written_by] → Nicholas Pileggi" and len(casino.evidence) == 3


def test_an_end_reached_by_the_wanted_clusters_label_passes_the_type_check_whatever_its_own_type(store):
    """An entity has one type in the schema, though it can play several roles: MetaQA's "2014" is a release year
    and a tag, and the KG-wide schema typed it as a tag's tail. Here "1995" is typed a person. A path that reaches
    it along the release-year cluster, whose label names the wanted type, is verified all the same."""
    types = {**TYPES, "1995": "person"}
    kg_schema = KGSchema.build(TRIPLES, types)
    planner = trained_planner(lambda path: kg_schema.view_path(path), epochs=60)
    config = DualTowerConfig(privacy={"mode": "privacy"}, similarity="lexical")
    result = build_controller(config, kg_schema, store=store, planner=planner).answer("when was Heat released", ["Heat"])
    assert result.answers == ("1995",) and result.fallback is None


def test_the_hybrid_drm_tells_opaque_cluster_labels_apart_where_words_differ():
    """Privacy mode's labels are cluster ids; the word overlap half of the hybrid DRM ranks the candidate that ends
    on the indicator's cluster above one ending on a neighbouring cluster, and equals the mean of its halves."""
    from rg.reasoning.dualtower.similarity import EncoderSimilarity, HybridSimilarity, LexicalSimilarity
    from rg.text.encoder import TextEncoder

    encoder = TextEncoder()
    indicator = "TE -[rel_05 (type_05→type_07)]-> ?x1 -[rel_03 (type_05→type_04)]-> ANSWER"
    texts = ["TE_1 → [rel_05 (type_05→type_07)] → (type_07) → [rel_03 (type_05→type_04)] → (type_04)",
             "TE_1 → [rel_05 (type_05→type_07)] → (type_07) → [rel_04 (type_05→type_06)] → (type_06)"]
    hybrid = HybridSimilarity(encoder).score(texts, indicator)
    halves = (EncoderSimilarity(encoder).score(texts, indicator) + LexicalSimilarity().score(texts, indicator)) / 2
    assert np.allclose(hybrid, halves) and hybrid[0] > hybrid[1]
    with pytest.raises(ConfigError, match="similarity"):
        validate_config({"similarity": "dense"}, DualTowerConfig)
