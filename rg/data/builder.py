"""The sharded subgraph builder on Ray Data: global KG + question files → RoG parquet shards.

The driver reads the question files (cheap), plans shards and skips those already written;
Ray Data sends the pending shards through a pool of actors that share one copy of the KG from
the object store, each actor writing its shard's parquet and stats. The driver follows progress
per question and merges the per-shard statistics into a coverage report.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator
from tqdm.auto import tqdm

from rg.config import Config
from rg.data.paths import resolve_data_path
from rg.data.records import BadRow
from rg.data.sources import KBSource, load_kb, read_question_rows
from rg.data.subgraphs import ShardStats, ShardTask, SubgraphConfig, plan_shards, run_shard
from rg.data.synthetic import SyntheticConfig, generate
from rg.graph import KnowledgeGraph
from rg.runtime import RayConfig, init_ray

REPORT_FILE = "build_report.json"
FINGERPRINT_FILE = "build_config.json"


class QuestionSource(Config):
    """One question file; its shards go to ``output_dir/<name>/``."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$", description="Folder name for its shards.")
    path: str = Field(description="Question file; `@shared/...` is relative to the shared data folder.")
    format: Literal["metaqa", "jsonl"]
    hops: int | None = Field(None, ge=1, description="Hop count of a MetaQA file.")
    split_name: str = Field("test", description="Split name used in MetaQA question ids.")
    limit: int | None = Field(None, ge=1, description="Only the first N lines (quick runs).")

    @model_validator(mode="after")
    def _metaqa_needs_hops(self) -> "QuestionSource":
        if self.format == "metaqa" and self.hops is None:
            raise ValueError(f"question source {self.name!r}: format metaqa needs `hops` (1, 2 or 3)")
        return self


class BuildSubgraphsConfig(Config):
    """``python -m jobs.build_subgraphs``: cut per-question subgraphs into parquet shards.

    Either ``synthetic`` (generate the embedded default KG and questions into
    ``output_dir/dataset``) or ``kb`` + ``questions`` (files you bring).
    """

    KIND: ClassVar[str] = "build_subgraphs"

    output_dir: str = Field(description="Where shards, the report and (synthetic) the dataset go.")
    synthetic: SyntheticConfig | None = Field(None, description="Generate the synthetic dataset.")
    kb: KBSource | None = None
    questions: list[QuestionSource] = Field(default_factory=list)
    subgraph: SubgraphConfig = Field(default_factory=SubgraphConfig)
    shard_size: int = Field(1000, ge=1, description="Questions per parquet shard (the resume unit).")
    num_actors: int = Field(2, ge=1, description="Actors in the Ray Data pool cutting subgraphs.")
    ray: RayConfig = Field(default_factory=RayConfig)

    @model_validator(mode="after")
    def _one_input(self) -> "BuildSubgraphsConfig":
        if self.synthetic is not None and (self.kb is not None or self.questions):
            raise ValueError("set either `synthetic` or `kb` + `questions`, not both")
        if self.synthetic is None and (self.kb is None or not self.questions):
            raise ValueError("set `kb` and at least one entry in `questions` (or `synthetic`)")
        names = [q.name for q in self.questions]
        if len(set(names)) != len(names):
            raise ValueError(f"question source names must be unique, got {names}")
        return self

    def fingerprint(self) -> str:
        """Hash of everything that changes the shards' content (not parallelism or Ray)."""
        data = self.model_dump(exclude={"num_actors", "ray", "output_dir"})
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


class _ShardBuilder:
    """Ray Data actor: holds the KG (from the object store) and builds one shard per row."""

    def __init__(self, kg_ref: list, config: SubgraphConfig) -> None:
        import ray

        self.kg: KnowledgeGraph = ray.get(kg_ref[0])
        self.config = config

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = []
        for text in batch["task"]:
            stats = run_shard(self.kg, ShardTask.from_json(str(text)), self.config)
            out.append(json.dumps(stats.__dict__))
        return {"stats": np.array(out, dtype=object)}


def _read_questions(source: QuestionSource) -> list:
    items = []
    for index, item in read_question_rows(resolve_data_path(source.path), source.format, source.hops, source.split_name):
        if source.limit is not None and index >= source.limit:
            break
        items.append(item)
    return items


def _check_fingerprint(cfg: BuildSubgraphsConfig, out: Path, fresh: bool) -> None:
    marker = out / FINGERPRINT_FILE
    if fresh and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    if marker.is_file():
        old = json.loads(marker.read_text()).get("fingerprint")
        if old != cfg.fingerprint():
            raise ValueError(
                f"{out} holds shards built with a different config (fingerprint {old} != "
                f"{cfg.fingerprint()}). Fix: pass --fresh to rebuild, or choose another output_dir"
            )
    marker.write_text(json.dumps({"fingerprint": cfg.fingerprint(), "config": cfg.model_dump()}, indent=2))


def build_subgraphs(cfg: BuildSubgraphsConfig, fresh: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run the build; return (and write to ``output_dir/build_report.json``) the report.

    Args:
        cfg: The validated job config.
        fresh: Delete ``output_dir`` first instead of resuming.
        progress: Show a progress bar over questions.
    """
    import ray

    out = Path(cfg.output_dir)
    _check_fingerprint(cfg, out, fresh)
    sources = list(cfg.questions)
    kb = cfg.kb
    if cfg.synthetic is not None:
        dataset = out / "dataset"
        generate(cfg.synthetic).write(dataset)
        kb = KBSource(path=str(dataset / "kg.txt"), format="tsv")
        sources = [QuestionSource(name="synthetic", path=str(dataset / "questions.jsonl"), format="jsonl")]
    assert kb is not None  # guaranteed by the config validator
    kg, kb_bad = load_kb(kb)

    pending: list[ShardTask] = []
    totals: dict[str, ShardStats] = {}
    for source in sources:
        tasks, done = plan_shards(source.name, _read_questions(source), cfg.shard_size, out)
        pending += tasks
        totals[source.name] = ShardStats(source=source.name)
        for stats in done:
            totals[source.name] = totals[source.name].merge(stats)
    resumed = {name: s.lines for name, s in totals.items()}

    if pending:
        init_ray(cfg.ray)
        kg_ref = ray.put(kg)
        ds = ray.data.from_items([{"task": t.to_json()} for t in pending], override_num_blocks=len(pending))
        ds = ds.map_batches(
            _ShardBuilder,
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(cfg.num_actors, len(pending))),
            fn_constructor_kwargs={"kg_ref": [kg_ref], "config": cfg.subgraph},
        )
        bar = tqdm(total=sum(len(t.items) for t in pending), unit="q", desc="subgraphs", disable=not progress)
        for row in ds.iter_rows():
            stats = ShardStats(**json.loads(row["stats"]))
            totals[stats.source] = totals[stats.source].merge(stats)
            bar.update(stats.lines)
        bar.close()

    report = {
        "kb": {"path": kb.path, "triples": kg.num_triples, "entities": kg.num_entities,
               "relations": kg.num_relations, "bad_lines": kb_bad},
        "subgraph": cfg.subgraph.model_dump(),
        "output_dir": str(out),
        "sources": {name: {**s.summary(), "resumed_lines": resumed[name]} for name, s in totals.items()},
    }
    (out / REPORT_FILE).write_text(json.dumps(report, indent=2))
    return report


def format_report(report: dict[str, Any]) -> str:
    """A plain-text coverage table of a build report."""
    cap = report["subgraph"]["max_triples"]
    head = f"{'source':<14}{'lines':>8}{'built':>8}{'bad':>6}{'covered':>17}{'truncated':>10}{'cap cost':>9}{'mean T':>9}{'max T':>8}"
    lines = [f"KB: {report['kb']['triples']:,} triples, {report['kb']['entities']:,} entities; cap = {cap}", head]
    for name, s in report["sources"].items():
        cov = f"{s['covered']:,}/{s['lines']:,}"
        mean = f"{s['mean_triples']:.0f}" if s["mean_triples"] is not None else "-"
        lines.append(
            f"{name:<14}{s['lines']:>8,}{s['built']:>8,}{s['bad_total']:>6}{cov:>17}{s['truncated']:>10,}"
            f"{s['cap_cost']:>9}{mean:>9}{s['triples_max']:>8,}"
        )
        for reason, n in s["bad"].items():
            lines.append(f"{'':<14}bad: {reason} × {n}")
    lines.append(f"shards and report: {report['output_dir']}")
    return "\n".join(lines)
