"""Exact tests of the graph engine on tiny hand-made graphs, plus a brute-force oracle check."""

from __future__ import annotations

import random

import numpy as np
import pytest

from rg.graph import KnowledgeGraph, Path, inverse, split_relation
from rg.graph.search import shortest_distance

# A ─r1→ B, A ─r2→ B (parallel), B ─r3→ C, A ─r4→ D, D ─r5→ C, F ─r7→ C, C ─r6→ E, E ─r8→ A
TRIPLES = [
    ("A", "r1", "B"),  # 0
    ("A", "r2", "B"),  # 1
    ("B", "r3", "C"),  # 2
    ("A", "r4", "D"),  # 3
    ("D", "r5", "C"),  # 4
    ("F", "r7", "C"),  # 5
    ("C", "r6", "E"),  # 6
    ("E", "r8", "A"),  # 7
]


@pytest.fixture()
def kg() -> KnowledgeGraph:
    return KnowledgeGraph.from_triples(TRIPLES)


def rel_paths(paths: list[Path]) -> list[tuple[str, ...]]:
    return [p.relation_path for p in paths]


def test_build_keeps_order_parallel_relations_and_csr(kg):
    assert kg.num_triples == 8 and kg.num_entities == 6 and kg.num_relations == 8
    assert kg.triples() == TRIPLES
    a, b = kg.entity_id("A"), kg.entity_id("B")
    out_a = kg.out_idx[kg.out_ptr[a] : kg.out_ptr[a + 1]].tolist()
    assert out_a == [0, 1, 3]
    in_b = kg.in_idx[kg.in_ptr[b] : kg.in_ptr[b + 1]].tolist()
    assert in_b == [0, 1]  # both parallel relations A→B are distinct triples


def test_dedup_drops_only_exact_repeats():
    kg = KnowledgeGraph.from_triples(TRIPLES + [("A", "r1", "B"), ("A", "r9", "B")], dedup=True)
    assert kg.triples() == TRIPLES + [("A", "r9", "B")]
    kept = KnowledgeGraph.from_triples(TRIPLES + [("A", "r1", "B")])
    assert kept.num_triples == 9


def test_empty_graph_and_lookup_errors():
    empty = KnowledgeGraph.from_triples([])
    assert empty.num_triples == 0 and empty.num_entities == 0
    kg = KnowledgeGraph.from_triples(TRIPLES)
    with pytest.raises(KeyError, match="'Z' is not in the graph"):
        kg.entity_id("Z")
    with pytest.raises(KeyError, match=r"\['Y', 'Z'\]"):
        kg.entity_ids(["A", "Y", "Z"])
    with pytest.raises(ValueError, match="expected 3"):
        KnowledgeGraph.from_triples([("A", "r")])


def test_neighbourhood(kg):
    assert kg.neighbourhood("A").tolist() == [0, 1, 3, 7]
    assert kg.neighbourhood("A", "out").tolist() == [0, 1, 3]
    assert kg.neighbourhood("C", "in").tolist() == [2, 4, 5]


def test_k_hop_both_directions(kg):
    one = kg.k_hop(["A"], 1)
    assert one.triple_ids.tolist() == [0, 1, 3, 7] and not one.truncated
    assert kg.entity_names[one.entity_ids].tolist() == ["A", "B", "D", "E"]
    two = kg.k_hop(["A"], 2)
    assert two.triple_ids.tolist() == [0, 1, 3, 7, 2, 4, 6]  # not F→C: C is at distance 2
    zero = kg.k_hop(["A"], 0)
    assert zero.triple_ids.tolist() == [] and kg.entity_names[zero.entity_ids].tolist() == ["A"]


def test_k_hop_directed_and_multi_seed(kg):
    assert kg.k_hop(["A"], 2, direction="out").triple_ids.tolist() == [0, 1, 3, 2, 4]
    assert kg.k_hop(["A"], 1, direction="in").triple_ids.tolist() == [7]
    assert kg.k_hop(["B", "F"], 1).triple_ids.tolist() == [0, 1, 2, 5]


def test_k_hop_cap_keeps_whole_rounds_then_cuts(kg):
    capped = kg.k_hop(["A"], 2, max_triples=5)
    assert capped.truncated and len(capped) == 5
    assert capped.triple_ids[:4].tolist() == [0, 1, 3, 7]
    assert capped.triple_ids[4] in (2, 4, 6)
    assert kg.k_hop(["A"], 2, max_triples=5).triple_ids.tolist() == capped.triple_ids.tolist()
    exact = kg.k_hop(["A"], 2, max_triples=7)
    assert not exact.truncated and len(exact) == 7
    with pytest.raises(ValueError, match="hops"):
        kg.k_hop(["A"], -1)


def test_k_hop_walk_cut_keeps_what_a_random_walk_takes(kg):
    # From A (degree 4): B holds 2/4 of the walk (two parallel triples), D and E 1/4 each. Round 2
    # offers B→C at 1/2 / 3, D→C at 1/4 / 2 and C→E at 1/4 / 2 (E has degree 2).
    walk = kg.k_hop(["A"], 2, max_triples=5, cut="walk")
    assert walk.triple_ids.tolist() == [0, 1, 3, 7, 2]
    scramble = kg.k_hop(["A"], 2, max_triples=5, cut="scramble")
    assert scramble.triple_ids[:4].tolist() == [0, 1, 3, 7] and len(scramble) == 5
    with pytest.raises(ValueError, match="cut must be 'scramble' or 'walk', got 'ppr'"):
        kg.k_hop(["A"], 2, max_triples=5, cut="ppr")


def test_k_hop_walk_cut_spares_the_low_degree_branch_behind_a_hub():
    # S → H (a hub with ten leaves) and S → B (two leaves); every leaf has one more triple out.
    hub = [("S", "r", "H"), ("S", "r", "B")]
    hub += [("H", "r", f"h{i}") for i in range(10)] + [("B", "r", f"b{i}") for i in range(2)]
    hub += [(f"h{i}", "r", f"x{i}") for i in range(10)] + [(f"b{i}", "r", f"y{i}") for i in range(2)]
    kg = KnowledgeGraph.from_triples(hub)
    two_rounds = 2 + 12
    walk = kg.k_hop(["S"], 3, max_triples=two_rounds + 2, cut="walk")
    # a leaf of B holds 1/2 / 3 of the walk against 1/2 / 11 for a leaf of H
    assert walk.truncated and kg.triples(walk.triple_ids[two_rounds:]) == [("b0", "r", "y0"), ("b1", "r", "y1")]
    scramble = kg.k_hop(["S"], 3, max_triples=two_rounds + 2, cut="scramble")
    assert scramble.triple_ids[:two_rounds].tolist() == walk.triple_ids[:two_rounds].tolist()
    assert len(scramble) == two_rounds + 2
    # uncapped, both orders are the same BFS
    assert kg.k_hop(["S"], 3, cut="walk").triple_ids.tolist() == kg.k_hop(["S"], 3, cut="scramble").triple_ids.tolist()


def test_shortest_paths_forward_keeps_parallel_relations(kg):
    paths = kg.shortest_paths("A", "C", "out")
    assert [p.triple_ids for p in paths] == [(0, 2), (1, 2), (3, 4)]
    assert rel_paths(paths) == [("r1", "r3"), ("r2", "r3"), ("r4", "r5")]
    assert paths[0].render() == "A → [r1] → B → [r3] → C"
    assert paths[0].triples() == (("A", "r1", "B"), ("B", "r3", "C"))


def test_shortest_paths_both_orientations(kg):
    # q→a over directed triples: C → E → A
    assert rel_paths(kg.shortest_paths("C", "A", "out")) == [("r6", "r8")]
    # a→q orientation walked from the topic: A ← E ← C
    back = kg.shortest_paths("A", "C", "in")
    assert rel_paths(back) == [("r8^-1", "r6^-1")]
    assert back[0].render() == "A ← [r8] ← E ← [r6] ← C"
    assert back[0].reversed() == kg.shortest_paths("C", "A", "out")[0]


def test_shortest_paths_mixed_directions(kg):
    paths = kg.shortest_paths("F", "A", "both")
    assert sorted(rel_paths(paths)) == sorted(
        [("r7", "r3^-1", "r1^-1"), ("r7", "r3^-1", "r2^-1"), ("r7", "r5^-1", "r4^-1"), ("r7", "r6", "r8")]
    )
    assert rel_paths(kg.shortest_paths("F", "A", "out")) == [("r7", "r6", "r8")]
    assert kg.shortest_paths("A", "F", "out") == []


def test_shortest_paths_limits(kg):
    assert kg.shortest_paths("F", "A", "both", max_len=2) == []
    assert len(kg.shortest_paths("F", "A", "both", max_len=3)) == 4
    assert len(kg.shortest_paths("A", "C", "out", max_paths=2)) == 2
    same = kg.shortest_paths("A", "A")
    assert len(same) == 1 and len(same[0]) == 0 and same[0].entities == ("A",)
    assert shortest_distance(kg, kg.entity_id("F"), kg.entity_id("A"), "both") == 3


def test_ground_respects_direction_and_parallel_relations(kg):
    paths = kg.ground("A", ["r1", "r3"])
    assert [p.entities for p in paths] == [("A", "B", "C")]
    back = kg.ground("C", ["r3^-1", "r1^-1"])
    assert [p.entities for p in back] == [("C", "B", "A")] and back[0].forward == (False, False)
    assert [p.entities for p in kg.ground("A", ["r1", "r1^-1"])] == [("A", "B", "A")]
    assert kg.ground("A", ["r3"]) == []  # r3 leaves B, not A
    assert kg.ground("A", ["nope"]) == []
    kg2 = KnowledgeGraph.from_triples(TRIPLES + [("A", "r1", "X")])
    assert sorted(p.end for p in kg2.ground("A", ["r1"])) == ["B", "X"]
    assert len(kg2.ground("A", ["r1"], max_paths=1)) == 1


def test_connecting_paths_two_and_three_topics(kg):
    two = kg.connecting_paths(["B", "D"], max_len=4)
    assert sorted(rel_paths(two)) == sorted([("r1^-1", "r4"), ("r2^-1", "r4"), ("r3", "r5^-1")])
    three = kg.connecting_paths(["B", "D", "F"], max_len=4)
    # every pair is 2 steps apart (via C or A), so every visiting order costs 4
    for walk in three:
        assert {"B", "D", "F"} <= set(walk.entities)
        assert len(walk) == len(three[0])
    assert {len(w) for w in three} == {4} and len(three) == 7
    assert "B → [r3] → C ← [r7] ← F → [r7] → C ← [r5] ← D" in [w.render() for w in three]
    assert kg.connecting_paths(["B", "D", "F"], max_len=3) == []
    assert kg.connecting_paths(["B"], max_len=3) == []


def test_relation_labels():
    assert inverse("r") == "r^-1" and inverse("r^-1") == "r"
    assert split_relation("a.b^-1") == ("a.b", False) and split_relation("a.b") == ("a.b", True)
    p = Path(("A", "B"), ("r",), (True,), (0,))
    with pytest.raises(ValueError, match="cannot join"):
        p.then(p)


# ------------------------------------------------------------------ brute-force oracle check
def _walks(triples, s, max_len, direction):
    """All simple walks from s up to max_len steps, as tuples of triple ids (pure Python)."""
    out, stack = [], [(s, (), {s})]
    while stack:
        v, steps, seen = stack.pop()
        out.append((v, steps))
        if len(steps) == max_len:
            continue
        for i, (h, _, t) in enumerate(triples):
            for a, b, ok in ((h, t, direction in ("out", "both")), (t, h, direction in ("in", "both"))):
                if ok and a == v and b not in seen:
                    stack.append((b, steps + (i,), seen | {b}))
    return out


@pytest.mark.parametrize("seed", range(25))
@pytest.mark.parametrize("direction", ["out", "in", "both"])
def test_shortest_paths_match_brute_force(seed, direction):
    rng = random.Random(seed)
    ents = [f"e{i}" for i in range(7)]
    triples = [(rng.choice(ents), f"r{rng.randrange(3)}", rng.choice(ents)) for _ in range(12)]
    triples = [t for t in triples if t[0] != t[2]]
    kg = KnowledgeGraph.from_triples(triples)
    names = sorted(set(kg.entity_names.tolist()))
    for s in names:
        walks = _walks(triples, s, 6, direction)
        for t in names:
            if s == t:
                continue
            found = [steps for end, steps in walks if end == t]
            got = sorted(p.triple_ids for p in kg.shortest_paths(s, t, direction))
            if not found:
                assert got == []
                continue
            best = min(len(w) for w in found)
            assert got == sorted(w for w in found if len(w) == best), (s, t)


@pytest.mark.parametrize("seed", range(10))
def test_k_hop_matches_distance_definition(seed):
    rng = np.random.default_rng(seed)
    triples = [(f"e{a}", "r", f"e{b}") for a, b in rng.integers(0, 15, size=(30, 2))]
    kg = KnowledgeGraph.from_triples(triples)
    for hops in range(4):
        sub = kg.k_hop(["e0"] if kg.has_entity("e0") else [triples[0][0]], hops)
        seed_name = "e0" if kg.has_entity("e0") else triples[0][0]
        dist = {seed_name: 0}
        frontier = [seed_name]
        for d in range(1, hops + 1):
            nxt = []
            for v in frontier:
                for h, _, t in triples:
                    for a, b in ((h, t), (t, h)):
                        if a == v and b not in dist:
                            dist[b] = d
                            nxt.append(b)
            frontier = nxt
        expected = {i for i, (h, _, t) in enumerate(triples) if dist.get(h, 99) < hops or dist.get(t, 99) < hops}
        assert set(sub.triple_ids.tolist()) == expected


def _rounds(triples, seeds, hops, direction):
    """Oracle: per round, the ids of the triples a BFS takes (expanding ``direction``) from the seeds."""
    ends = {"out": lambda h, t: [(h, t)], "in": lambda h, t: [(t, h)], "both": lambda h, t: [(h, t), (t, h)]}[direction]
    dist, frontier, taken, rounds = {s: 0 for s in seeds}, set(seeds), set(), []
    for d in range(hops):
        layer = {i for i, (h, _, t) in enumerate(triples) for a, _b in ends(h, t) if a in frontier} - taken
        taken |= layer
        rounds.append(sorted(layer))
        frontier = set()
        for i in layer:
            for a, b in ends(triples[i][0], triples[i][2]):
                if dist.get(a) == d and b not in dist:
                    dist[b] = d + 1
                    frontier.add(b)
    return rounds


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("direction", ["out", "in", "both"])
def test_k_hop_rounds_and_caps_match_the_oracle(seed, direction):
    """Rounds in order (ids ascending within one); a cap the search never reaches changes nothing;
    a cap it reaches keeps whole rounds and cuts the next to exactly the budget, in both cut orders."""
    rng = np.random.default_rng(seed)
    triples = [(f"e{a}", f"r{a % 3}", f"e{b}") for a, b in rng.integers(0, 12, size=(30, 2))]
    kg = KnowledgeGraph.from_triples(triples, dedup=False)
    names = sorted({h for h, _, _ in triples})
    for seeds in (names[:1], names[:3]):
        for hops in range(4):
            rounds = [r for r in _rounds(triples, seeds, hops, direction) if r]
            full = kg.k_hop(seeds, hops, direction=direction)
            assert full.triple_ids.tolist() == [i for r in rounds for i in r] and not full.truncated
            ends = {e for i in full.triple_ids for e in (triples[i][0], triples[i][2])} | set(seeds)
            assert kg.entity_names[full.entity_ids].tolist() == sorted(ends, key=kg.entity_id)
            for cut in ("walk", "scramble"):
                same = kg.k_hop(seeds, hops, max_triples=len(full), direction=direction, cut=cut)
                assert same.triple_ids.tolist() == full.triple_ids.tolist() and not same.truncated
                assert same.entity_ids.tolist() == full.entity_ids.tolist()
                for cap in range(len(full)):
                    sub = kg.k_hop(seeds, hops, max_triples=cap, direction=direction, cut=cut)
                    whole = 0
                    while whole < len(rounds) and sum(map(len, rounds[: whole + 1])) <= cap:
                        whole += 1
                    kept = [i for r in rounds[:whole] for i in r]
                    assert sub.truncated and len(sub) == cap
                    assert sub.triple_ids[: len(kept)].tolist() == kept
                    assert set(sub.triple_ids[len(kept) :].tolist()) <= set(rounds[whole])


def test_k_hop_scramble_cut_with_several_seeds():
    """Regression: the scramble cut once kept the walk mass of the seeds and failed to broadcast it
    onto a larger frontier in round 2."""
    kg = KnowledgeGraph.from_triples([("A", "r", "B"), ("C", "r", "D"), ("B", "r", "E"), ("D", "r", "F"), ("D", "r", "G")])
    sub = kg.k_hop(["A", "C"], 2, max_triples=3, cut="scramble")
    assert sub.truncated and sub.triple_ids[:2].tolist() == [0, 1] and sub.triple_ids[2] in (2, 3, 4)


@pytest.mark.parametrize("seed", range(20))
def test_path_triples_equal_the_union_of_grounded_walks(seed):
    rng = random.Random(seed)
    ents = [f"e{i}" for i in range(6)]
    triples = [(rng.choice(ents), f"r{rng.randrange(2)}", rng.choice(ents)) for _ in range(14)]
    kg = KnowledgeGraph.from_triples(triples)
    labels = ["r0", "r1", "r0^-1", "r1^-1"]
    starts = sorted({triples[0][0], triples[1][2]})
    for length in (1, 2, 3):
        for _ in range(6):
            path = tuple(rng.choice(labels) for _ in range(length))
            walks = [walk for s in starts for walk in kg.ground(s, path)]
            assert kg.path_triples(starts, path).tolist() == sorted({t for w in walks for t in w.triple_ids})
            by_step = kg.path_step_triples(starts, path)
            assert [step.tolist() for step in by_step] == [sorted({w.triple_ids[i] for w in walks}) for i in range(length)]


def test_relation_steps_list_each_label_with_the_set_it_reaches(kg):
    from rg.graph.search import relation_steps

    steps = relation_steps(kg, kg.entity_ids(["A", "C"]))
    assert [label for label, _ in steps] == ["r1", "r2", "r4", "r6", "r3^-1", "r5^-1", "r7^-1", "r8^-1"]
    reached = {label: sorted(kg.entity_names[ids].tolist()) for label, ids in steps}
    assert reached["r1"] == ["B"] and reached["r6"] == ["E"] and reached["r8^-1"] == ["E"]
    assert reached["r3^-1"] == ["B"] and reached["r5^-1"] == ["D"]
