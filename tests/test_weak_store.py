"""Answer-F1 weak relation paths searched through a KG store equal the in-memory search.

Exact output on a hand-made graph; the synthetic KG through Virtuoso path for path; config rules.
"""

from __future__ import annotations

import pytest

from rg.config import ConfigError, validate_config
from rg.subgraphs import SubgraphConfig, build_sample
from rg.data.synthetic import SyntheticConfig, generate
from rg.graph import KnowledgeGraph
from rg.stores.memory import MemoryStore
from rg.supervision.answer_paths import answer_f1_paths, score_relation_paths, search_kb
from rg.supervision.store_paths import score_store_paths, store_relation_steps
from rg.supervision.weak import WeakConfig
from tests.stores_virtuoso import load_graph

TRIPLES = [("Film A", "directed_by", "Ann Lee"), ("Film A", "written_by", "Ann Lee"),
           ("Film A", "starred_actors", "Bo Chen"), ("Film B", "starred_actors", "Bo Chen"),
           ("Film C", "directed_by", "Ann Lee"), ("Film C", "starred_actors", "Cy Dunn")]


def _scored(paths) -> list[tuple]:
    return sorted((p.relation_path, round(p.f1, 9), round(p.precision, 9), round(p.recall, 9)) for p in paths)


def test_steps_and_scores_on_a_tiny_graph():
    kg = KnowledgeGraph.from_triples(TRIPLES)
    store = MemoryStore(kg)
    assert store_relation_steps(store, frozenset({"Ann Lee"})) == [
        ("directed_by^-1", frozenset({"Film A", "Film C"})), ("written_by^-1", frozenset({"Film A"}))]
    # films directed by Ann Lee star whom: Bo Chen and Cy Dunn
    scored = score_store_paths(store, ["Ann Lee"], ["Bo Chen", "Cy Dunn"], 2)
    assert [(p.relation_path, p.f1) for p in scored[:1]] == [(("directed_by^-1", "starred_actors"), 1.0)]
    assert _scored(scored) == _scored(score_relation_paths(kg, ["Ann Lee"], ["Bo Chen", "Cy Dunn"], 2))
    assert score_store_paths(store, ["Nobody"], ["Bo Chen"], 2) == []
    assert score_store_paths(store, ["Ann Lee"], ["Ann Lee"], 2) == []  # a topic is never an answer


def test_synthetic_paths_through_virtuoso_equal_the_engine(virtuoso, tmp_path):
    data = generate(SyntheticConfig(seed=1, questions=40))
    kg = KnowledgeGraph.from_triples(data.triples, dedup=True)
    store = load_graph(virtuoso, kg, "http://rg.test/weak", tmp_path)
    compared = 0
    for question in data.questions:
        sample = build_sample(kg, question, SubgraphConfig(max_triples=None)).sample
        expected = answer_f1_paths(sample, 3, kb=kg)
        got = answer_f1_paths(sample, 3, kb=store)
        assert sorted(got) == sorted(expected), question.id
        compared += bool(expected)
    assert compared >= 35


def test_weak_kg_config_rules():
    with pytest.raises(ConfigError, match=r"`kg` is read by rule 'answer_f1' only"):
        validate_config({"kg": {"kind": "sparql", "endpoint": "http://127.0.0.1:8890/sparql"}}, WeakConfig)
    with pytest.raises(ConfigError, match=r"set `kb` or `kg`, not both"):
        validate_config({"rule": "answer_f1", "kb": {"path": "k", "format": "tsv"},
                         "kg": {"kind": "memory", "kb": {"path": "k", "format": "tsv"}}}, WeakConfig)


def test_search_kb_opens_the_configured_store(tmp_path):
    (tmp_path / "kb.txt").write_text("".join(f"{h}|{r}|{t}\n" for h, r, t in TRIPLES))
    memory = WeakConfig(rule="answer_f1", kg={"kind": "memory", "kb": {"path": str(tmp_path / "kb.txt"), "format": "metaqa"}})
    assert isinstance(search_kb(memory), KnowledgeGraph) and search_kb(memory).num_triples == len(TRIPLES)
    sparql = WeakConfig(rule="answer_f1", kg={"kind": "sparql", "endpoint": "http://127.0.0.1:9/sparql"})
    assert type(search_kb(sparql)).__name__ == "SparqlStore"
    assert search_kb(WeakConfig()) is None
