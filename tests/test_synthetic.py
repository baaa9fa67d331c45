"""Tests for the synthetic Freebase-like KG and question generator (rg.data.synthetic)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from rg.config import ConfigError, load_config, validate_config
from rg.data.synthetic import (
    KG_FILE,
    QUESTIONS_FILE,
    TEMPLATES,
    SyntheticConfig,
    generate,
    invert_path,
    read_kg_folder,
)

DEFAULT_YAML = Path(__file__).resolve().parents[1] / "configs" / "synthetic_default.yaml"
DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


@pytest.fixture(scope="module")
def kg():
    """The default synthetic KG (generated once for the module)."""
    return generate(SyntheticConfig())


def edge_index(triples):
    """(entity, step) → neighbours, where step ``r^-1`` walks an ``r`` edge from tail to head."""
    index = defaultdict(set)
    for h, r, t in triples:
        index[(h, r)].add(t)
        index[(t, r + "^-1")].add(h)
    return index


def walk(index, start, path, avoid):
    """Independent reference path follower: ends of walks along ``path`` avoiding ``avoid``."""
    frontier = {start}
    for step in path:
        frontier = {n for e in frontier for n in index[(e, step)] if n not in avoid}
    return frontier


def test_same_seed_gives_identical_output(tmp_path):
    first, second = generate(SyntheticConfig(seed=7)), generate(SyntheticConfig(seed=7))
    assert first == second
    first.write(tmp_path / "a")
    second.write(tmp_path / "b")
    for name in (KG_FILE, QUESTIONS_FILE):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


def test_different_seed_gives_different_output():
    first, second = generate(SyntheticConfig(seed=1)), generate(SyntheticConfig(seed=2))
    assert first.triples != second.triples
    assert first.questions != second.questions


def test_answers_follow_gold_relation_paths(kg):
    index = edge_index(kg.triples)
    for q in kg.questions:
        assert len(q.relation_paths) == len(q.q_entities)
        avoid = set(q.q_entities)
        ends = [walk(index, e, p, avoid) for e, p in zip(q.q_entities, q.relation_paths)]
        assert set(q.answers) == set.intersection(*ends), q
        assert q.answers and len(q.answers) <= SyntheticConfig().max_answers
        assert q.hops == max(len(p) for p in q.relation_paths)
        assert not avoid & set(q.answers)


def test_spouse_question_excludes_the_topic_entity(kg):
    spouse = [q for q in kg.questions if q.relation_paths[0][-1] == "people.marriage.spouse"]
    assert spouse
    index = edge_index(kg.triples)
    for q in spouse:
        assert q.q_entities[0] not in q.answers
        # The plain walk through the marriage CVT also reaches the topic entity itself.
        assert q.q_entities[0] in walk(index, q.q_entities[0], q.relation_paths[0], set())


def test_kg_has_cvts_literals_types_and_parallel_relations(kg):
    types = kg.entity_types
    cvts = [e for e, t in types.items() if t == "cvt"]
    assert cvts and all(re.fullmatch(r"m\.0[0-9a-z_]{5}", e) for e in cvts)
    literals = [e for e, t in types.items() if t == "literal"]
    assert any(DATE.match(e) for e in literals)
    assert any(e.isdigit() for e in literals)
    relations_per_pair = defaultdict(set)
    for h, r, t in kg.triples:
        relations_per_pair[(h, t)].add(r)
    parallel = [rels for rels in relations_per_pair.values() if len(rels) > 1]
    assert any({"film.film.directed_by", "film.film.written_by"} <= rels for rels in parallel)
    assert any(r == "common.topic.notable_types" for _, r, _ in kg.triples)
    assert all(r.count(".") >= 2 for _, r, _ in kg.triples)


def test_entities_are_typed_unique_and_triples_distinct(kg):
    assert len(set(kg.triples)) == len(kg.triples)
    entities = {e for h, _, t in kg.triples for e in (h, t)}
    assert entities == set(kg.entity_types)
    people = [e for e, t in kg.entity_types.items() if t == "person"]
    assert len(people) == SyntheticConfig().people  # collisions were disambiguated
    assert not any("\t" in e or "\n" in e for e in entities)


def test_default_config_covers_every_question_kind(kg):
    assert {q.hops for q in kg.questions} >= {1, 2, 3}
    assert any(len(q.q_entities) == 2 for q in kg.questions)
    assert any(any(r.endswith("^-1") for p in q.relation_paths for r in p) for q in kg.questions)
    assert any(DATE.match(a) for q in kg.questions for a in q.answers)
    assert len(kg.questions) == SyntheticConfig().questions
    assert len({q.id for q in kg.questions}) == len(kg.questions)
    assert all(re.fullmatch(r"syn-\d{6}", q.id) for q in kg.questions)
    assert len({(q.question, q.q_entities) for q in kg.questions}) == len(kg.questions)


def test_write_then_read_is_exact(kg, tmp_path):
    kg.write(tmp_path)
    triples, questions = read_kg_folder(tmp_path)
    assert triples == kg.triples
    assert questions == kg.questions
    first_line = (tmp_path / KG_FILE).read_text(encoding="utf-8").splitlines()[0]
    assert first_line.count("\t") == 2


@pytest.mark.parametrize(
    ("kg_text", "questions_text", "where"),
    [
        ("a\tb\n", "", r"kg\.txt:1"),
        ("a\tb\tc\n", '{"id": "q1", "question": "?"}\n', r"questions\.jsonl:1"),
        ("a\tb\tc\n", "\nnot json\n", r"questions\.jsonl:2"),
    ],
)
def test_read_reports_malformed_line(tmp_path, kg_text, questions_text, where):
    (tmp_path / KG_FILE).write_text(kg_text, encoding="utf-8")
    (tmp_path / QUESTIONS_FILE).write_text(questions_text, encoding="utf-8")
    with pytest.raises(ValueError, match=where):
        read_kg_folder(tmp_path)


def test_yaml_mirrors_the_defaults():
    assert DEFAULT_YAML.read_text().startswith("# python -m ")
    assert load_config(DEFAULT_YAML, SyntheticConfig) == SyntheticConfig()


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"people": 0}, "people"),
        ({"parallel_relation_rate": 1.5}, "parallel_relation_rate"),
        ({"mix": {"one_hop": 0.9}}, "mix"),
        ({"cities": 2, "countries": 5}, "countries"),
        ({"people": 10, "actor_share": 0.1, "cast_size": 4}, "cast_size"),
        ({"peeple": 5}, "peeple"),
    ],
)
def test_config_validation_names_the_field(data, field):
    with pytest.raises(ConfigError, match=field):
        validate_config(data, SyntheticConfig)


def test_too_many_questions_fail_with_a_fix():
    config = SyntheticConfig(people=10, films=2, cities=2, countries=1, companies=1,
                             universities=1, actor_share=0.5, questions=500)
    with pytest.raises(ValueError, match="lower `questions`"):
        generate(config)


def test_invert_path_round_trips():
    for template in TEMPLATES:
        for path in template.paths:
            assert invert_path(invert_path(path)) == path
    assert invert_path(("a", "b^-1")) == ("b", "a^-1")
