"""The planner trained on the privacy view: relations as the KG schema's clusters.

In ``privacy`` mode the dual tower's Brain sees relation cluster labels (``rel_05
(type_05→type_07)``), not raw relations, so its local implementation, the planner, must be trained
on that view (PrivGemo §4.2; the clustering is per KG, not per session, so it can be learned).
With ``view_schema_dir`` set, the planner job maps everything relational through the KG's saved
schema (:class:`rg.privacy.KGSchema`, written by ``jobs.privacy_report``):

- target paths are searched on the raw data as always, then written in the view
  (:func:`view_target`); paths that become equal are kept once;
- the relation vocabulary is the clusters of the subgraphs' relations;
- the evaluation grounds decoded cluster paths on the question's subgraph written in the view
  (:func:`view_sample`: each triple's relation replaced by its cluster), which is how the Hand
  grounds a cluster path: along any raw relation the cluster stands for.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from rg.run.paths import resolve_data_path
from rg.data.sample import Sample
from rg.privacy.schema import SCHEMA_FILE, KGSchema
from rg.training.planner_data import PlanTarget

RAW = "raw"
PRIVACY = "privacy"


def load_view(schema_dir: str | None) -> KGSchema | None:
    """The schema whose clusters the planner learns, or None (raw relations).

    Raises:
        FileNotFoundError: naming ``view_schema_dir`` and the fix, when the folder holds no schema.
    """
    if schema_dir is None:
        return None
    folder = resolve_data_path(schema_dir)
    if not (folder / SCHEMA_FILE).exists():
        raise FileNotFoundError(
            f"view_schema_dir {folder} holds no {SCHEMA_FILE}. Fix: run `python -m jobs.privacy_report` on the same "
            "KG (it writes the schema to its output_dir) and point view_schema_dir there, or drop view_schema_dir "
            "to train on raw relations")
    return KGSchema.load(folder)


def view_name(schema: KGSchema | None) -> str:
    """``raw`` or ``privacy``: the relations the planner writes (recorded in its report and checkpoint)."""
    return RAW if schema is None else PRIVACY


def view_paths(paths: Iterable[tuple[str, ...]], schema: KGSchema) -> tuple[tuple[str, ...], ...]:
    """Relation paths in the view, in order, each kept once."""
    return tuple(dict.fromkeys(schema.view_path(p) for p in paths))


def view_target(target: PlanTarget, schema: KGSchema | None) -> PlanTarget:
    """A target with its paths written in the view (unchanged without a schema)."""
    if schema is None:
        return target
    return dataclasses.replace(target, relation_paths=view_paths(target.relation_paths, schema))


def view_relations(relations: Iterable[str], schema: KGSchema | None) -> set[str]:
    """Relation names as the view writes them (the planner's path vocabulary)."""
    return set(relations) if schema is None else {schema.relation_cluster(r) for r in relations}


def view_sample(sample: Sample, schema: KGSchema | None) -> Sample:
    """A question with its subgraph and gold paths written in the view; triples that become equal are kept once."""
    if schema is None:
        return sample
    triples = tuple(dict.fromkeys((h, schema.relation_cluster(r), t) for h, r, t in sample.triples))
    return dataclasses.replace(sample, triples=triples, relation_paths=view_paths(sample.relation_paths, schema))


def view_references(references: Mapping[str, tuple[tuple[str, ...], ...]],
                    schema: KGSchema | None) -> dict[str, tuple[tuple[str, ...], ...]]:
    """Reference paths per question in the view."""
    if schema is None:
        return dict(references)
    return {qid: view_paths(paths, schema) for qid, paths in references.items()}
