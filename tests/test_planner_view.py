"""The planner trained on the privacy view (rg.training.planner_view): targets, relations and
subgraphs written in the KG schema's relation clusters, exactly, on a hand-made film graph."""

from __future__ import annotations

import pytest

from rg.data.sample import Sample
from rg.graph import KnowledgeGraph
from rg.privacy import KGSchema
from rg.training.planner_data import PlanTarget
from rg.training.planner_view import load_view, view_name, view_references, view_relations, view_sample, view_target

TRIPLES = (
    ("Heat", "directed_by", "Michael Mann"),
    ("Heat", "written_by", "Michael Mann"),
    ("Heat", "starred_actors", "Al Pacino"),
    ("Heat", "release_year", "1995"),
    ("Collateral", "directed_by", "Michael Mann"),
)
TYPES = {"Heat": "film", "Collateral": "film", "Michael Mann": "person", "Al Pacino": "person", "1995": "year"}


@pytest.fixture()
def schema() -> KGSchema:
    return KGSchema.build(TRIPLES, TYPES)


def test_paths_targets_and_relations_are_written_in_clusters(schema):
    person = schema.relation_cluster("directed_by")
    year = schema.relation_cluster("release_year")
    assert person == schema.relation_cluster("written_by") == schema.relation_cluster("starred_actors") != year
    assert person.endswith("(film→person)")
    target = PlanTarget("q1", "which films share a director with Heat",
                        (("directed_by", "directed_by^-1"), ("written_by", "directed_by^-1"), ("release_year",)),
                        "weak", ("Heat",))
    viewed = view_target(target, schema)
    # the two person paths become one; order and everything else kept
    assert viewed.relation_paths == ((person, f"{person}^-1"), (year,))
    assert (viewed.id, viewed.question, viewed.source, viewed.topics) == (target.id, target.question, "weak", ("Heat",))
    assert view_target(target, None) is target
    assert view_relations(["directed_by", "written_by", "release_year"], schema) == {person, year}
    assert view_relations(["directed_by"], None) == {"directed_by"}
    assert view_references({"q1": (("release_year",), ("directed_by",))}, schema) == {"q1": ((year,), (person,))}
    assert (view_name(schema), view_name(None)) == ("privacy", "raw")


def test_a_cluster_path_grounds_on_the_viewed_subgraph_as_the_hand_grounds_it(schema):
    sample = Sample(id="q1", question="who wrote Heat", answers=("Michael Mann",), q_entities=("Heat",),
                    a_entities=("Michael Mann",), triples=TRIPLES, relation_paths=(("written_by",),))
    viewed = view_sample(sample, schema)
    person = schema.relation_cluster("directed_by")
    # Heat -directed_by-> Mann and Heat -written_by-> Mann become one triple
    assert len(viewed.triples) == 4 and viewed.triples[0] == ("Heat", person, "Michael Mann")
    assert viewed.relation_paths == ((person,),)
    assert (viewed.question, viewed.answers, viewed.q_entities) == (sample.question, sample.answers, sample.q_entities)
    kg = KnowledgeGraph.from_triples(viewed.triples)
    # the cluster stands for every film→person relation: the Hand's grounding reaches actors and writers alike
    assert sorted(p.end for p in kg.ground("Heat", (person,))) == ["Al Pacino", "Michael Mann"]


def test_a_missing_schema_is_refused_naming_the_field_and_the_fix(tmp_path, schema):
    assert load_view(None) is None
    with pytest.raises(FileNotFoundError, match=r"view_schema_dir .* holds no privacy_schema.json\. Fix: run "
                                                 r"`python -m jobs.privacy_report`"):
        load_view(str(tmp_path))
    schema.save(tmp_path)
    assert load_view(str(tmp_path)).clusters == schema.clusters
