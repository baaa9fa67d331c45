"""Evidence chains on tiny hand-made graphs: BFS, dedup, merging, rendering and stats."""

from __future__ import annotations

import math

import pytest

from rg.config import ConfigError, validate_config
from rg.evidence import (
    EvidenceChain,
    EvidenceConfig,
    EvidenceGroup,
    build_evidence,
    expand_walks,
    top_k_triples,
    triple_evidence,
    unanchored_chains,
)

CHAIN = (("A", "r1", "B"), ("B", "r2", "C"), ("C", "r3", "D"), ("D", "r4", "E"))

# MetaQA-style: films point at their director, so the topic (the director) is a tail.
DIRECTOR = (
    ("F1", "directed_by", "Ann"),
    ("F2", "directed_by", "Ann"),
    ("F1", "starred_actors", "Bob"),
    ("F2", "release_year", "1999"),
)

# "Films directed by Ann that star Bob": two topic entities, overlapping ends {F2, F3}.
TWO_TOPICS = (
    ("F1", "directed_by", "Ann"),
    ("F2", "directed_by", "Ann"),
    ("F3", "directed_by", "Ann"),
    ("F2", "starred_actors", "Bob"),
    ("F3", "starred_actors", "Bob"),
    ("F4", "starred_actors", "Bob"),
)
TWO_TOPIC_SCORES = (0.2, 0.9, 0.8, 0.9, 0.7, 0.1)


def test_forward_chain_grows_to_the_length_limit():
    evidence = build_evidence(CHAIN, None, ["A"])
    assert evidence.lines() == (
        "A → [r1] → B",
        "A → [r1] → B → [r2] → C",
        "A → [r1] → B → [r2] → C → [r3] → D",
        "D → [r4] → E",  # out of reach at length 3: kept as an unanchored one-step chain
    )
    stats = evidence.stats
    assert (stats.triples_in, stats.topics, stats.walks, stats.triples_chained) == (4, 1, 3, 3)
    assert (stats.unanchored, stats.dropped, stats.chains, stats.groups, stats.chains_out) == (1, 0, 4, 0, 4)
    assert [c.anchored for c in evidence.chains()] == [True, True, True, False]


def test_length_limit_and_dropping_unused_triples():
    short = build_evidence(CHAIN, None, ["A"], EvidenceConfig(max_length=1))
    assert short.lines() == ("A → [r1] → B", "B → [r2] → C", "C → [r3] → D", "D → [r4] → E")
    dropped = build_evidence(CHAIN, None, ["A"], EvidenceConfig(max_length=2, keep_unanchored=False))
    assert dropped.lines() == ("A → [r1] → B", "A → [r1] → B → [r2] → C")
    assert (dropped.stats.unanchored, dropped.stats.dropped, dropped.stats.chains_out) == (0, 2, 2)


def test_backward_steps_and_multi_answer_merging():
    evidence = build_evidence(DIRECTOR, None, ["Ann"])
    assert evidence.lines() == (
        "Ann ← [directed_by] ← {F1 | F2}",
        "Ann ← [directed_by] ← F1 → [starred_actors] → Bob",
        "Ann ← [directed_by] ← F2 → [release_year] → 1999",
    )
    first = evidence.items[0]
    assert isinstance(first, EvidenceChain)
    assert first.relation_path == ("directed_by^-1",) and first.ends == ("F1", "F2")
    assert [w.path.triples() for w in first.walks] == [(DIRECTOR[0],), (DIRECTOR[1],)]
    assert evidence.items[1].relation_path == ("directed_by^-1", "starred_actors")
    assert evidence.ends() == ("F1", "F2", "Bob", "1999")
    assert [c.render() for c in evidence.supporting("F2")] == ["Ann ← [directed_by] ← F2"]

    unmerged = build_evidence(DIRECTOR, None, ["Ann"], EvidenceConfig(merge_answers=False))
    assert unmerged.lines()[:2] == ("Ann ← [directed_by] ← F1", "Ann ← [directed_by] ← F2")
    assert (unmerged.stats.chains_out, evidence.stats.chains_out) == (4, 3)


def test_merged_intermediates_render_as_sets():
    triples = (("A", "r", "X"), ("A", "r", "Y"), ("X", "s", "P"), ("Y", "s", "Q"))
    evidence = build_evidence(triples, None, ["A"])
    assert evidence.lines() == ("A → [r] → {X | Y}", "A → [r] → {X | Y} → [s] → {P | Q}")
    assert [w.path.entities for w in evidence.items[1].walks] == [("A", "X", "P"), ("A", "Y", "Q")]


def test_parallel_relation_keeps_one_walk_and_the_other_as_unanchored():
    triples = (("A", "directed", "F"), ("A", "wrote", "F"))
    best_wrote = build_evidence(triples, [0.5, 0.9], ["A"])
    assert best_wrote.lines() == ("A → [wrote] → F", "A → [directed] → F")
    assert [c.anchored for c in best_wrote.chains()] == [True, False]
    assert (best_wrote.stats.walks, best_wrote.stats.unanchored) == (1, 1)
    tie = build_evidence(triples, [0.5, 0.5], ["A"])  # equal scores: the better-ranked triple
    assert tie.lines() == ("A → [directed] → F", "A → [wrote] → F")


def test_source_end_pair_kept_once_shortest_then_highest_score():
    # Z is two steps away via X (score 0.1 + 0.5) or via Y (0.5 + 0.5): Y wins; C is one step
    # away directly and two steps via B: the direct step wins although its score is lower.
    triples = (
        ("A", "r", "X"), ("A", "r", "Y"), ("X", "s", "Z"), ("Y", "s", "Z"),
        ("A", "t", "B"), ("B", "u", "C"), ("A", "v", "C"),
    )
    scores = [0.1, 0.5, 0.5, 0.5, 0.9, 0.9, 0.2]
    walks = expand_walks(triples, scores, ["A"], 3)
    assert {w.end: w.path.triple_ids for w in walks} == {"X": (0,), "Y": (1,), "B": (4,), "C": (6,), "Z": (1, 3)}
    evidence = build_evidence(triples, scores, ["A"])
    assert evidence.lines() == (  # strongest weakest step first; then anchored, then shorter
        "A → [t] → B",
        "B → [u] → C",
        "A → [r] → {Y | X}",
        "A → [r] → Y → [s] → Z",
        "X → [s] → Z",
        "A → [v] → C",
    )
    assert evidence.stats.walks == 5 and evidence.stats.unanchored == 2


def test_no_entity_is_revisited_within_a_walk():
    cycle = (("A", "r", "B"), ("B", "r", "C"), ("C", "r", "A"))
    walks = expand_walks(cycle, [1.0, 1.0, 1.0], ["A"], 3)
    assert sorted(w.path.entities for w in walks) == [("A", "B"), ("A", "C")]
    assert all(len(set(w.path.entities)) == len(w.path.entities) for w in walks)


def test_two_topic_entities_group_on_shared_ends():
    evidence = build_evidence(TWO_TOPICS, TWO_TOPIC_SCORES, ["Ann", "Bob"], EvidenceConfig(max_length=1))
    assert evidence.lines() == (
        "Ann ← [directed_by] ← {F2 | F3} & Bob ← [starred_actors] ← {F2 | F3}",
        "Ann ← [directed_by] ← F1",
        "Bob ← [starred_actors] ← F4",
    )
    group = evidence.items[0]
    assert isinstance(group, EvidenceGroup)
    assert group.ends == ("F2", "F3") and [c.source for c in group.chains] == ["Ann", "Bob"]
    stats = evidence.stats
    assert (stats.topics, stats.walks, stats.chains, stats.groups, stats.chains_out) == (2, 6, 2, 1, 3)
    # every walk appears exactly once across the lines
    assert sorted(t for c in evidence.chains() for w in c.walks for t in w.path.triple_ids) == list(range(6))

    separate = build_evidence(
        TWO_TOPICS, TWO_TOPIC_SCORES, ["Ann", "Bob"], EvidenceConfig(max_length=1, merge_entities=False)
    )
    assert separate.lines() == ("Ann ← [directed_by] ← {F2 | F3 | F1}", "Bob ← [starred_actors] ← {F2 | F3 | F4}")


def test_three_topics_intersect_their_ends():
    triples = (
        ("M1", "genre", "Drama"), ("M2", "genre", "Drama"), ("M3", "genre", "Drama"),
        ("M1", "lang", "French"), ("M2", "lang", "French"),
        ("M2", "year", "1999"), ("M3", "year", "1999"),
    )
    evidence = build_evidence(triples, None, ["Drama", "French", "1999"], EvidenceConfig(max_length=1))
    assert evidence.lines() == (
        "Drama ← [genre] ← M2 & French ← [lang] ← M2 & 1999 ← [year] ← M2",
        "Drama ← [genre] ← {M1 | M3}",
        "French ← [lang] ← M1",
        "1999 ← [year] ← M3",
    )
    assert evidence.items[0].ends == ("M2",)


def test_walk_between_topics_is_not_repeated_backwards():
    evidence = build_evidence([("A", "r", "B")], None, ["A", "B"])
    assert evidence.lines() == ("A → [r] → B",)
    assert evidence.stats.walks == 1 and evidence.stats.groups == 0
    # B → X is new evidence (it meets A's walk at X); B → X → A only retraces A → X → B
    via = build_evidence([("A", "r", "X"), ("X", "s", "B")], None, ["A", "B"])
    assert via.lines() == ("A → [r] → X & B ← [s] ← X", "A → [r] → X → [s] → B")
    assert (via.stats.walks, via.stats.groups) == (3, 1)


def test_a_walk_through_another_topic_is_dropped_not_grouped():
    triples = (("A", "r", "B"), ("B", "s", "X"))
    dropped = build_evidence(triples, None, ["A", "B"])
    # A → B → X only repeats B → X behind the A–B link, which A → B keeps
    assert dropped.lines() == ("A → [r] → B", "B → [s] → X")
    assert (dropped.stats.walks, dropped.stats.groups, dropped.stats.unanchored) == (2, 0, 0)
    kept = build_evidence(triples, None, ["A", "B"], EvidenceConfig(through_topics="keep"))
    assert kept.lines() == ("B → [s] → X & A → [r] → B → [s] → X", "A → [r] → B")
    # one topic: nothing to pass through, the BFS walks stay
    assert build_evidence(triples, None, ["A"]).lines() == ("A → [r] → B", "A → [r] → B → [s] → X")


def test_two_topics_group_where_their_walks_first_meet_shortest_first():
    # born in A, studied at B: the two topics' walks meet at P (the answer) and at the CVT c;
    # they also reach P's spouse S, but only through P, and meet by chance at the country N
    triples = (
        ("P", "place_of_birth", "A"), ("P", "education", "c"), ("c", "institution", "B"),
        ("P", "nationality", "N"), ("A", "containedby", "N"), ("S", "spouse", "P"),
    )
    evidence = build_evidence(triples, None, ["A", "B"], EvidenceConfig(order="expected_relevant"))
    assert evidence.lines() == (
        "A ← [place_of_birth] ← P & B ← [institution] ← c ← [education] ← P",  # 3 steps
        "B ← [institution] ← c & A ← [place_of_birth] ← P → [education] → c",  # 3 steps
        "A → [containedby] → N & B ← [institution] ← c ← [education] ← P → [nationality] → N",  # 4 steps
        "A ← [place_of_birth] ← P → [education] → c → [institution] → B",
        "B ← [institution] ← c ← [education] ← P ← [spouse] ← S",  # both reach S past P: no group on S
        "A ← [place_of_birth] ← P ← [spouse] ← S",
    )
    assert [item.ends for item in evidence.items[:3]] == [("P",), ("c",), ("N",)]
    assert evidence.stats.groups == 3
    # every walk on exactly one line
    walks = [(w.source, w.end) for c in evidence.chains() for w in c.walks]
    assert len(walks) == len(set(walks)) == evidence.stats.walks == 9


def test_unanchored_triples_merge_around_a_shared_entity():
    triples = (("m1", "genre", "Drama"), ("m2", "genre", "Drama"), ("m1", "year", "1999"))
    chains = unanchored_chains(triples, [0.0, 0.0, 0.0], [0, 1, 2])
    assert [c.render() for c in chains] == ["Drama ← [genre] ← {m1 | m2}", "m1 → [year] → 1999"]
    evidence = build_evidence(triples, None, ["Nobody"])
    assert evidence.stats.topics == 0 and evidence.stats.chains_out == 2
    assert not any(c.anchored for c in evidence.chains())


def test_triple_evidence_is_one_line_per_triple_in_order():
    evidence = triple_evidence(DIRECTOR[::-1], topics=["Ann"])
    assert evidence.lines() == tuple(f"{h} → [{r}] → {t}" for h, r, t in DIRECTOR[::-1])
    assert (evidence.stats.triples_in, evidence.stats.chains_out, evidence.topics) == (4, 4, ("Ann",))


def test_top_k_is_stable_and_scores_are_checked():
    triples, scores = top_k_triples(DIRECTOR, [0.0, 1.0, 0.0, 1.0], 3)
    assert triples == (DIRECTOR[1], DIRECTOR[3], DIRECTOR[0]) and scores == (1.0, 1.0, 0.0)
    assert len(top_k_triples(DIRECTOR, [0.0] * 4, None)[0]) == 4
    floored, kept = top_k_triples(DIRECTOR, [-9.2, 1.0, -9.2, -8.0], None, min_score=-9.0)
    assert floored == (DIRECTOR[1], DIRECTOR[3]) and kept == (1.0, -8.0)
    assert top_k_triples(DIRECTOR, [-9.2, 1.0, -9.2, -8.0], 1, min_score=-9.0)[0] == (DIRECTOR[1],)
    with pytest.raises(ValueError, match="4 triples"):
        build_evidence(DIRECTOR, [1.0], ["Ann"])
    with pytest.raises(ValueError, match="NaN"):
        build_evidence(DIRECTOR, [1.0, math.nan, 0.0, 0.0], ["Ann"])
    with pytest.raises(ValueError, match=r"\+inf"):
        build_evidence(DIRECTOR, [1.0, math.inf, 0.0, 0.0], ["Ann"])
    unreachable = build_evidence(DIRECTOR, [0.0, 0.0, -math.inf, 0.0], ["Ann"])  # -inf ranks last
    assert unreachable.lines()[-1] == "Ann ← [directed_by] ← F1 → [starred_actors] → Bob"


def test_empty_input_and_config_validation():
    empty = build_evidence((), None, ["Ann"])
    assert empty.lines() == () and empty.text() == "" and empty.stats.chains_out == 0
    with pytest.raises(ConfigError, match="max_length"):
        validate_config({"max_length": 0}, EvidenceConfig)
    with pytest.raises(ConfigError, match="did you mean 'max_length'"):
        validate_config({"max_len": 2}, EvidenceConfig)


def test_expected_relevant_order_puts_a_chain_before_its_prefix():
    # A → B scores 2, B → C scores 1 (the 2-hop answer's step), A → D scores -3 (noise)
    triples = (("A", "r1", "B"), ("B", "r2", "C"), ("A", "r3", "D"))
    scores = (2.0, 1.0, -3.0)
    by_strength = build_evidence(triples, scores, ["A"])
    assert by_strength.lines() == ("A → [r1] → B", "A → [r1] → B → [r2] → C", "A → [r3] → D")
    by_relevance = build_evidence(triples, scores, ["A"], EvidenceConfig(order="expected_relevant"))
    assert by_relevance.lines() == ("A → [r1] → B → [r2] → C", "A → [r1] → B", "A → [r3] → D")
    sigmoid = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    assert [c.expected_relevant for c in by_relevance.chains()] == pytest.approx(
        [sigmoid(2) + sigmoid(1), sigmoid(2), sigmoid(-3)])
    # an extension by a hopeless step gains almost nothing, yet still ranks above its prefix
    noisy = build_evidence(triples + (("C", "r4", "E"),), scores + (-30.0,), ["A"], EvidenceConfig(order="expected_relevant"))
    assert noisy.lines()[:2] == ("A → [r1] → B → [r2] → C → [r4] → E", "A → [r1] → B → [r2] → C")


def test_unknown_line_order_is_refused_naming_the_field():
    with pytest.raises(ConfigError, match="order"):
        validate_config({"order": "length"}, EvidenceConfig)
