"""The structure sanitiser and structural uniqueness, on tiny hand-made views."""

from __future__ import annotations

import numpy as np
import pytest

from rg.data.synthetic import SyntheticConfig, generate
from rg.privacy import KGSchema, PrivacyConfig, PrivacySession, SanitiserConfig, assess, sanitise, structural_uniqueness
from rg.privacy.structure import ViewGraph, personalised_pagerank, public_label, reachable

F = "ent_aaaa0001 (film)"
A1, A2, A3 = "ent_aaaa0011 (person)", "ent_aaaa0012 (person)", "ent_aaaa0013 (person)"
D = "ent_aaaa0021 (person)"
G = "ent_aaaa0031 (genre)"
F2 = "ent_aaaa0002 (film)"
STAR = [(F, "starred", A1), (F, "starred", A2), (F, "directed_by", D)]


def test_public_label_drops_the_pseudonym_only():
    assert public_label(F) == "film"
    assert public_label("lit_0123abcd (literal)") == "literal"
    assert public_label("ent_group_3 (person ×12)") == "person ×12"
    assert public_label("year 1987") == "year 1987"
    assert public_label("The Matrix") == "The Matrix"


def test_uniqueness_of_a_star_exactly():
    # A1 and A2 both star in the anchor film: one class of 2; D alone directs it: unique.
    u = structural_uniqueness(STAR, anchors={F})
    assert (u.entities, u.unique, u.k) == (3, 1, 1)
    assert u.share == pytest.approx(1 / 3)


def test_two_hops_split_what_one_hop_merges():
    # A1 and A2 each star in the anchor film and in one other film; only A2's other film has a
    # genre. One hop cannot tell them apart; two hops can.
    f3 = "ent_aaaa0003 (film)"
    view = [(F, "starred", A1), (F, "starred", A2), (f3, "starred", A1), (F2, "starred", A2), (F2, "has_genre", G)]
    one = structural_uniqueness(view, anchors={F}, rounds=1)
    two = structural_uniqueness(view, anchors={F}, rounds=2)
    assert (one.entities, one.unique, one.k) == (5, 3, 1)
    assert (two.entities, two.unique, two.k) == (5, 5, 1)


def test_uniqueness_of_nothing():
    u = structural_uniqueness([], anchors={F})
    assert (u.entities, u.unique, u.k, u.share) == (0, 0, 0, 0.0)


def test_grouping_merges_one_signature_and_keeps_members():
    view = STAR + [(F, "starred", A3)]
    out = sanitise(view, {F}, SanitiserConfig())
    group = "ent_group_1 (person ×3)"
    assert set(out.triples) == {(F, "starred", group), (F, "directed_by", D)}
    assert out.groups == {group: (A1, A2, A3)}
    assert out.node_of(A2) == group and out.node_of(D) == D
    # three starring actors hide among each other; the director is still unique
    after = structural_uniqueness(out.triples, {F}, out.weights())
    assert (after.entities, after.unique, after.k) == (4, 1, 1)


def test_rare_types_pool_under_a_generic_label_and_public_nodes_are_not_counted():
    view = [(F, "directed_by", D), (F, "has_genre", G), (F, "language", "English"), (G, "is_a", "Genre")]
    out = sanitise(view, {F}, SanitiserConfig())
    pooled = "ent_group_1 (entity ×2)"  # one director and one genre: each type alone, so pooled together
    assert out.groups == {pooled: (D, G)}
    assert set(out.triples) == {(F, "directed_by", pooled), (F, "has_genre", pooled), (F, "language", "English"),
                                (pooled, "is_a", "Genre")}
    before = structural_uniqueness(view, {F})
    assert (before.entities, before.unique) == (2, 2)  # 'English' and 'Genre' are public words, not counted
    assert structural_uniqueness(view, {F}, counted=lambda n: True).entities == 4
    after = structural_uniqueness(out.triples, {F}, out.weights())
    assert (after.entities, after.unique, after.k) == (2, 0, 2)


def test_anchors_are_never_grouped():
    view = [(F, "starred", A1), (F2, "starred", A1)]
    out = sanitise(view, {F, F2}, SanitiserConfig())
    assert out.groups == {} and set(out.triples) == set(view)


def test_node_budget_keeps_what_is_closest_to_the_anchor():
    chain = [(F, "r1", A1), (A1, "r2", D), (D, "r3", G)]
    out = sanitise(chain, {F}, SanitiserConfig(group=False, max_nodes=2))
    assert out.triples == ((F, "r1", A1),)
    view, report = assess(chain, {F}, {G}, SanitiserConfig(group=False, max_nodes=2))
    assert report.reachable_before and not report.reachable_after
    assert (report.nodes_before, report.nodes_after, report.edges_before, report.edges_after) == (4, 2, 3, 1)


def test_pruning_keeps_what_it_shows_connected_to_an_anchor():
    # found in review: a hub behind a bridge used to outrank the bridge and be kept alone
    hub = [(F, "r", A1), (A1, "r", D)] + [(D, "r", f"ent_0000{i:04d} (person)") for i in range(10)]
    assert sanitise(hub, {F}, SanitiserConfig(group=False, max_nodes=2)).triples == ((F, "r", A1),)
    triangle = [(A1, "q", D), (F, "r", A1), (F, "r", D)]
    assert len(sanitise(triangle, {F}, SanitiserConfig(group=False, max_edges=1)).triples) == 1
    assert F in sanitise(triangle, {F}, SanitiserConfig(group=False, max_edges=1)).triples[0]
    rng = np.random.default_rng(1)
    graph = [(f"n{a}", f"r{a % 3}", f"n{b}") for a, b in rng.integers(0, 60, (150, 2)).tolist()]
    for nodes, edges in ((3, None), (10, 12), (25, None), (None, 5)):
        kept = sanitise(graph, {"n0"}, SanitiserConfig(group=False, max_nodes=nodes, max_edges=edges)).triples
        shown = {n for h, _, t in kept for n in (h, t)}
        assert all(reachable(kept, {"n0"}, {n}) for n in shown)
        assert nodes is None or len(shown) <= nodes
        assert edges is None or len(kept) <= edges


def test_duplicate_triples_count_once():
    from rg.privacy.structure import prune

    out = prune([(F, "r", A1), (F, "r", A1), (A1, "r", D)], frozenset({F}), SanitiserConfig(group=False))
    assert out == [(F, "r", A1), (A1, "r", D)]


def test_expose_guards_the_relations_of_pruned_triples_in_privacy_mode():
    raw = [("Heat", "directed_by", "Michael Mann"), ("Heat", "starred_actors", "Al Pacino"),
           ("Al Pacino", "won_award", "Oscar")]
    with PrivacySession(PrivacyConfig(mode="privacy"), KGSchema.build(raw)) as session:
        shown = session.expose(raw, ["Heat"], SanitiserConfig(max_nodes=2, group=False), stage="explore")
        assert len(shown.triples) == 1
        assert session.guard.find("it uses won_award") == session.guard.find("via directed_by") == "relation"
        booked = session.exposure.to_dict()["stages"]["explore"]
    assert (booked["nodes"], booked["edges"], booked["brain_calls"]) == (2, 1, 0) and booked["k"] == 1


def test_edge_budget_and_disconnected_parts():
    view = [(F, "r1", A1), (F, "r2", D), (A1, "r3", D), (F2, "r4", G)]  # F2–G is not connected to the anchor
    out = sanitise(view, {F}, SanitiserConfig(group=False))
    assert (F2, "r4", G) not in out.triples and len(out.triples) == 3
    cut = sanitise(view, {F}, SanitiserConfig(group=False, max_edges=2))
    assert set(cut.triples) == {(F, "r1", A1), (F, "r2", D)}


def test_sanitise_is_deterministic_and_answers_in_groups_stay_reachable():
    view = STAR + [(F, "starred", A3)]
    first = sanitise(view, {F}, SanitiserConfig(max_nodes=3))
    assert first == sanitise(list(view), {F}, SanitiserConfig(max_nodes=3))
    _, report = assess(view, {F}, {A3}, SanitiserConfig())
    assert report.reachable_after  # A3 is inside the actors' supernode, which touches the anchor


def test_personalised_pagerank_properties():
    graph = ViewGraph([(F, "r", A1), (F, "r", A2), (A2, "r", D)])
    score = personalised_pagerank(graph, [graph.index[F]], restart=0.15, iterations=200)
    assert score.sum() == pytest.approx(1.0)
    assert score.argmax() == graph.index[F]
    assert score[graph.index[A2]] > score[graph.index[A1]] > score[graph.index[D]]  # A2 has D behind it
    assert np.all(personalised_pagerank(graph, [], 0.15, 10) == 0)


def numpy_pagerank(graph: ViewGraph, seeds: list[int], restart: float, iterations: int) -> np.ndarray:
    """The power iterations as numpy passes: what the compiled rounds must equal bit for bit."""
    n = len(graph)
    src, dst = np.concatenate([graph.heads, graph.tails]), np.concatenate([graph.tails, graph.heads])
    degree = np.bincount(src, minlength=n).astype(np.float64)
    jump = np.zeros(n)
    jump[seeds] = 1.0 / len(seeds)
    score, share = jump.copy(), np.divide(1.0, degree, out=np.zeros(n), where=degree > 0)
    for _ in range(iterations):
        score = restart * jump + (1.0 - restart) * np.bincount(dst, weights=(score * share)[src], minlength=n)
    return score


def random_view(rng: np.random.Generator, nodes: int, edges: int) -> list[tuple[str, str, str]]:
    pairs = rng.integers(0, nodes, (edges, 2)).tolist()
    return [(f"n{a}", f"r{(a + b) % 4}", f"n{b}") for a, b in pairs]  # self-loops and repeats included


def test_the_compiled_pagerank_rounds_equal_the_numpy_passes_bit_for_bit():
    rng = np.random.default_rng(7)
    for nodes, edges, seeds in ((1, 1, 1), (5, 3, 1), (40, 120, 2), (300, 900, 3), (2000, 2500, 1)):
        graph = ViewGraph(random_view(rng, nodes, edges), extra=[f"n{i}" for i in range(seeds)])
        picked = [graph.index[f"n{i}"] for i in range(seeds)]
        for restart, iterations in ((0.15, 40), (0.5, 3)):
            assert np.array_equal(personalised_pagerank(graph, picked, restart, iterations),
                                  numpy_pagerank(graph, picked, restart, iterations))


def python_prune(view: list[tuple[str, str, str]], anchors: frozenset[str], config: SanitiserConfig) -> list:
    """The pruning written out in Python: numpy PageRank, a heap of every edge a joined node offers."""
    import heapq
    import math

    triples = list(dict.fromkeys(view))
    graph = ViewGraph(triples, extra=sorted(anchors))
    seeds = [graph.index[a] for a in sorted(anchors)]
    score = numpy_pagerank(graph, seeds, config.restart, config.iterations)
    neighbours: list[list[tuple[int, int]]] = [[] for _ in range(len(graph))]
    for e, (h, t) in enumerate(zip(graph.heads.tolist(), graph.tails.tolist())):
        neighbours[h].append((t, e))
        neighbours[t].append((h, e))
    kept, tree, frontier = set(seeds), [], []
    limit = min(math.inf if config.max_nodes is None else max(0, config.max_nodes - len(seeds)),
                math.inf if config.max_edges is None else config.max_edges)
    for node in seeds:
        for other, e in neighbours[node]:
            heapq.heappush(frontier, (-score[other], other, e))
    while frontier and len(tree) < limit:
        _, node, e = heapq.heappop(frontier)
        if node not in kept:
            kept.add(node)
            tree.append(e)
            for other, via in neighbours[node]:
                if other not in kept:
                    heapq.heappush(frontier, (-score[other], other, via))
    others = [e for e, (h, t) in enumerate(zip(graph.heads.tolist(), graph.tails.tolist()))
              if h in kept and t in kept and e not in tree]
    others.sort(key=lambda e: (-min(score[graph.heads[e]], score[graph.tails[e]]), e))
    room = len(others) if config.max_edges is None else max(0, config.max_edges - len(tree))
    return [triples[e] for e in sorted(tree + others[:room])]


def test_pruning_equals_the_growth_written_out_in_python():
    from rg.privacy.structure import prune

    rng = np.random.default_rng(11)
    for nodes, edges in ((8, 12), (60, 150), (400, 900)):
        view = random_view(rng, nodes, edges)
        for anchors in (frozenset({"n0"}), frozenset({"n1", "n2"})):
            anchors = frozenset(a for a in anchors if any(a in (h, t) for h, _, t in view)) or frozenset({view[0][0]})
            for budget, edge_budget in ((3, None), (20, None), (20, 25), (None, 40), (nodes * 2, None)):
                config = SanitiserConfig(group=False, max_nodes=budget, max_edges=edge_budget)
                assert prune(view, anchors, config) == python_prune(view, anchors, config), (nodes, budget, edge_budget)


def test_a_view_that_fits_the_node_budget_is_kept_whole_without_scores():
    from rg.privacy.structure import prune

    rng = np.random.default_rng(3)
    for nodes, edges in ((6, 8), (30, 45), (80, 200)):
        view = random_view(rng, nodes, edges) + [("island", "r0", "isle")]  # a part no anchor reaches
        anchors = frozenset({"n0"})
        unlimited = SanitiserConfig(group=False, max_nodes=nodes + 2)  # fits: no score is computed
        grown = SanitiserConfig(group=False, max_nodes=nodes + 2, max_edges=10**9)  # a budget: the scored growth
        kept = prune(view, anchors, unlimited)
        assert kept == prune(view, anchors, grown)
        assert kept == [t for t in dict.fromkeys(view) if reachable(view, anchors, {t[0]})]  # the anchor's part, in order


def test_reachable_follows_edges_either_way():
    assert reachable([(A1, "r", F)], {F}, {A1})
    assert not reachable([(A1, "r", D)], {F}, {A1})
    assert reachable([], {F}, {F})


def test_on_a_real_session_view_sanitisation_shrinks_uniqueness():
    syn = generate(SyntheticConfig(questions=20, seed=3))
    schema = KGSchema.build(syn.triples, syn.entity_types)
    question = syn.questions[0]
    topic = question.q_entities[0]
    near = [t for t in syn.triples if topic in (t[0], t[2])]
    two_hop = {e for h, _, t in near for e in (h, t)}
    triples = [t for t in syn.triples if t[0] in two_hop or t[2] in two_hop]
    with PrivacySession(PrivacyConfig(mode="privacy"), schema) as session:
        view = session.anonymise_triples(triples, [topic])
        anchor = session.entity(topic, topic=True)
        answers = {session.entity(a) for a in question.answers}
        sanitised, report = assess(view, {anchor}, answers, SanitiserConfig(max_nodes=40))
    assert report.nodes_after <= 40 < report.nodes_before
    assert report.after.share < report.before.share
    assert report.after.entities > report.nodes_after  # supernodes hide several entities each
    # nothing raw in the sanitised view: every node is a pseudonym, a group, a coarse literal or a schema word
    raw_names = {e for t in triples for e in (t[0], t[2]) if not schema.is_public(e)}
    shown = {n for h, _, t in sanitised.triples for n in (h, t)}
    assert not shown & raw_names


def test_expose_prunes_raw_then_anonymises_only_what_is_kept_and_guards_everything():
    raw = [("Heat", "directed_by", "Michael Mann"), ("Heat", "starred_actors", "Al Pacino"),
           ("Heat", "starred_actors", "Val Kilmer"), ("Al Pacino", "starred_in", "Scarface"),
           ("Scarface", "directed_by", "Brian De Palma")]
    types = {"Heat": "film", "Scarface": "film", "Michael Mann": "person", "Al Pacino": "person",
             "Val Kilmer": "person", "Brian De Palma": "person"}
    schema = KGSchema.build(raw, types)
    config = SanitiserConfig(max_nodes=4, group=False)
    with PrivacySession(PrivacyConfig(mode="utility"), schema) as session:
        shown = session.expose(raw, ["Heat"], config)
        mapped = session.mapped
        full = sanitise(session.anonymise_triples(raw, ["Heat"]), {session.entity("Heat", topic=True)}, config)
        refused = session.guard.find("who worked with brian de palma")
    assert shown.triples == full.triples and len(shown.nodes) == 4
    assert mapped == 4  # only the kept entities got pseudonyms
    assert refused == "entity_name"  # a pruned entity's name is guarded all the same


def test_subgraphs_of_0_and_100000_triples():
    schema = KGSchema.build([("a", "r", "b")], {"a": "thing", "b": "thing"})
    with PrivacySession(PrivacyConfig(mode="privacy"), schema) as session:
        empty = session.expose([], ["a"], SanitiserConfig(max_nodes=10))
        assert empty.triples == () and empty.groups == {}
    view, report = assess([], {F}, {A1}, SanitiserConfig())
    assert view.triples == () and (report.nodes_before, report.edges_after, report.reachable_after) == (1, 0, False)
    rng = np.random.default_rng(0)
    heads, tails = rng.integers(0, 20_000, 100_000), rng.integers(0, 20_000, 100_000)
    big = [(f"e{h}", f"r{h % 7}", f"e{t}") for h, t in zip(heads.tolist(), tails.tolist())]
    with PrivacySession(PrivacyConfig(mode="privacy"), schema) as session:
        shown = session.expose(big, ["e0"], SanitiserConfig(max_nodes=50))
        assert session.guard.find("is e19999 linked") == "entity_name"  # every name guarded, shown or not
        members = sum(len(m) for m in shown.groups.values()) + len(shown.nodes) - len(shown.groups)
    assert 1 < members <= 50 and session.mapped <= 50
    u = structural_uniqueness(shown.triples, shown.anchors, shown.weights())
    assert u.entities == members - 1  # every kept entity but the anchor is counted once


def test_entities_named_like_the_views_own_words_do_not_block_it():
    # found by bench.privacy on MetaQA: a film named "Entity" made the guard refuse every view
    # whose rare types were pooled as `ent_group_1 (entity ×2)`
    raw = [("Heat", "directed_by", "Michael Mann"), ("Heat", "has_genre", "Crime"), ("Entity", "has_genre", "Crime"),
           ("Year", "has_genre", "Crime")]
    types = {"Heat": "film", "Entity": "film", "Year": "film", "Michael Mann": "person", "Crime": "genre"}
    with PrivacySession(PrivacyConfig(mode="privacy"), KGSchema.build(raw, types)) as session:
        shown = session.expose(raw, ["Heat"], SanitiserConfig())
        masked = session.mask_question("is Heat like Entity by Michael Mann", ["Heat"],
                                       names=["Entity", "Year", "Michael Mann"])
        text = masked.text + "\n" + "\n".join(" ".join(t) for t in shown.triples)
        assert session.guard.find(text) is None
    # pooled label kept; a name the guard holds is masked, one that is a word of the view stays the question's
    assert "(entity ×2)" in text and "Michael Mann" not in masked.text
    assert masked.text.startswith("is TE_1 (film) like Entity by ent_")
