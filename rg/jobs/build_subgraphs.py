"""The sharded subgraph builder on Ray Data: global KG + question files → RoG parquet shards.

The driver reads the question files (cheap), plans shards and skips those already written;
Ray Data sends the pending shards through a pool of actors that share one copy of the KG from
the object store, each actor writing its shard's parquet and stats. The driver follows progress
per question and merges the per-shard statistics into a coverage report.

With ``kg:`` instead of ``kb:`` the subgraphs are cut through a KG store
(:mod:`rg.subgraphs.store`): ``kind: memory`` shares one in-memory store from the object
store, ``kind: sparql`` gives every actor its own connection to the endpoint (Virtuoso), so the
KG never enters this process. Questions a stopped or failing endpoint could not serve are
reported as unfinished, and the same command builds them once the endpoint answers again.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator
from tqdm.auto import tqdm

from rg.config import Config, ConfigError
from rg.console import user_stream
from rg.run.integrity import write_json_atomic
from rg.run.paths import resolve_data_path
from rg.data.records import BadRow
from rg.data.sources import KBSource, load_kb, read_question_rows
from rg.subgraphs import ShardStats, ShardTask, SubgraphConfig, plan_shards, run_shard
from rg.data.synthetic import SyntheticConfig, generate
from rg.data.synthetic.io import KG_FILE
from rg.graph import KnowledgeGraph
from rg.stores.base import KGStore
from rg.linking.config import LinkingConfig, linking_setting
from rg.stores.config import MemoryStoreConfig, SparqlStoreConfig, StoreConfig
from rg.run.locks import output_lock
from rg.runtime import RayConfig, init_ray

REPORT_FILE = "build_report.json"
FINGERPRINT_FILE = "build_config.json"

SYNTHETIC_DATASET = "dataset"
"""Folder of a synthetic build's generated KG (``kg.txt``) and questions, inside its output folder."""


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
    ``output_dir/dataset``), ``kb`` + ``questions`` (files you bring, cut by the in-memory graph
    engine) or ``kg`` + ``questions`` (a KG store: ``{kind: memory, kb: ...}`` or
    ``{kind: sparql, endpoint: ..., graph: ...}``).
    """

    KIND: ClassVar[str] = "build_subgraphs"

    output_dir: str = Field(description="Where shards, the report and (synthetic) the dataset go.")
    synthetic: SyntheticConfig | None = Field(None, description="Generate the synthetic dataset.")
    kb: KBSource | None = None
    kg: StoreConfig | None = Field(
        None, description="Cut subgraphs through a KG store instead of `kb`: {kind: memory, kb: {...}} or "
                          "{kind: sparql, endpoint: http://127.0.0.1:8890/sparql, graph: ...} (rg.stores).")
    questions: list[QuestionSource] = Field(default_factory=list)
    subgraph: SubgraphConfig = Field(default_factory=SubgraphConfig)
    shard_size: int = Field(1000, ge=1, description="Questions per parquet shard (the resume unit).")
    num_actors: int = Field(2, ge=1, description="Actors in the Ray Data pool cutting subgraphs.")
    linking: LinkingConfig | None = Field(
        None, description="Link topic entities from the raw question (rg.linking) instead of taking the dataset's; "
                          "`true` for the defaults. The name index goes to `index_dir` (default "
                          "`<output_dir>/linking-index`).")
    ray: RayConfig = Field(default_factory=RayConfig)

    @field_validator("linking", mode="before")
    @classmethod
    def _linking_true(cls, value: Any) -> Any:
        return linking_setting(value)

    @model_validator(mode="after")
    def _one_input(self) -> "BuildSubgraphsConfig":
        given = [name for name, value in (("synthetic", self.synthetic), ("kb", self.kb), ("kg", self.kg))
                 if value is not None]
        if len(given) != 1:
            raise ValueError(f"set exactly one of `synthetic`, `kb` and `kg`, got {given or 'none'}")
        if self.synthetic is not None and self.questions:
            raise ValueError("`synthetic` generates its own questions: remove `questions`")
        if self.synthetic is None and not self.questions:
            raise ValueError(f"`{given[0]}` needs at least one entry in `questions`")
        names = [q.name for q in self.questions]
        if len(set(names)) != len(names):
            raise ValueError(f"question source names must be unique, got {names}")
        return self

    def fingerprint(self) -> str:
        """Hash of everything that changes the shards' content (not parallelism or Ray).

        It covers the config and the size and modification time of every input file, so that
        resuming over an edited KB or question file is refused instead of mixing old and new shards.
        """
        data = self.model_dump(exclude={"num_actors", "ray", "output_dir"})
        data["input_files"] = input_file_stamps(self)
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def input_file_stamps(cfg: BuildSubgraphsConfig) -> dict[str, list[int] | None]:
    """``path -> [size, mtime_ns]`` of the KB and question files (None for a missing one).

    The synthetic dataset is generated by the job itself from its config, so it has no stamps.
    """
    if cfg.synthetic is not None:
        return {}
    paths = [cfg.kb.path] if cfg.kb is not None else []
    if isinstance(cfg.kg, MemoryStoreConfig):
        paths.append(cfg.kg.kb.path)
    paths += [q.path for q in cfg.questions]
    stamps: dict[str, list[int] | None] = {}
    for text in paths:
        try:
            info = resolve_data_path(text).stat()
        except (FileNotFoundError, OSError):
            stamps[text] = None
            continue
        stamps[text] = [info.st_size, info.st_mtime_ns]
    return stamps


class _ShardBuilder:
    """Ray Data actor: holds the KG or an in-memory store (from the object store), or its own
    connection to a SPARQL store, and builds one shard per row."""

    def __init__(
        self, kg_ref: list, config: SubgraphConfig, sparql: SparqlStoreConfig | None = None, push: Any = None
    ) -> None:
        import ray

        if sparql is not None:
            from rg.stores.sparql import SparqlStore

            self.kg: KnowledgeGraph | KGStore = SparqlStore(sparql)
        else:
            self.kg = ray.get(kg_ref[0])
        self.config = config
        self.push = push  # rg.run.remote.ShardPusher when output_dir is a staged URI

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = []
        for text in batch["task"]:
            task = ShardTask.from_json(str(text))
            stats = run_shard(self.kg, task, self.config)
            if self.push is not None:
                self.push(task.parquet_path, Path(task.parquet_path).with_suffix(".stats.json"))
            out.append(json.dumps(stats.__dict__))
        return {"stats": np.array(out, dtype=object)}


def _shard_pusher(out: Path) -> Any:
    """A pusher for actors on other nodes when ``out`` is the staging folder of a URI output (else None)."""
    import ray

    from rg.run.remote import ShardPusher, remote_output_of

    uri = remote_output_of(out)
    return None if uri is None else ShardPusher(uri, str(out.resolve()), ray.get_runtime_context().get_node_id())


def _read_questions(source: QuestionSource) -> list:
    """The source's items in file order; a repeated question id becomes a ``duplicate_id`` BadRow (first kept)."""
    path = resolve_data_path(source.path)
    if not path.is_file():
        raise FileNotFoundError(
            f"question file {path} (questions[{source.name}].path = {source.path!r}) does not exist. "
            "Fix: set `path` of that question source to an existing file"
        )
    items: list = []
    seen: set[str] = set()
    for index, item in read_question_rows(path, source.format, source.hops, source.split_name):
        if source.limit is not None and index >= source.limit:
            break
        if not isinstance(item, BadRow):
            if item.id in seen:
                item = BadRow(str(path), index, "duplicate_id", f"question id {item.id!r} repeats an earlier line (first kept)")
            else:
                seen.add(item.id)
        items.append(item)
    return items


def _has_shards(out: Path) -> bool:
    return any(out.glob("*/shard-*.stats.json"))


def _check_fingerprint(cfg: BuildSubgraphsConfig, out: Path, fresh: bool) -> None:
    """Start over (``fresh``) or refuse to resume finished shards built under another fingerprint.

    A fingerprint left beside no finished shard (a build that failed before its first shard)
    is not held against the new config.
    """
    marker = out / FINGERPRINT_FILE
    if fresh and out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    if marker.is_file() and _has_shards(out):
        old = json.loads(marker.read_text()).get("fingerprint")
        if old != cfg.fingerprint():
            raise ConfigError(
                f"{out} holds shards built with a different config or other input files (fingerprint {old} != "
                f"{cfg.fingerprint()}). Fix: pass --fresh to rebuild, or choose another output_dir"
            )


def _write_fingerprint(cfg: BuildSubgraphsConfig, out: Path) -> None:
    """Record the fingerprint once shards exist (called as the first shard lands)."""
    record = {"fingerprint": cfg.fingerprint(), "config": cfg.model_dump(), "input_files": input_file_stamps(cfg)}
    write_json_atomic(record, out / FINGERPRINT_FILE)


def build_subgraphs(cfg: BuildSubgraphsConfig, fresh: bool = False, progress: bool = True) -> dict[str, Any]:
    """Run the build; return (and write to ``output_dir/build_report.json``) the report.

    Args:
        cfg: The validated job config.
        fresh: Delete ``output_dir`` first instead of resuming.
        progress: Show a progress bar over questions.

    Raises:
        OutputLockedError: another job writes into ``output_dir``.
    """
    with output_lock(cfg.output_dir, "jobs.build_subgraphs"):
        return _build_locked(cfg, fresh, progress)


def _build_locked(cfg: BuildSubgraphsConfig, fresh: bool, progress: bool) -> dict[str, Any]:
    import ray

    out = Path(cfg.output_dir)
    _check_fingerprint(cfg, out, fresh)
    sources = list(cfg.questions)
    kb = cfg.kb
    if cfg.synthetic is not None:
        dataset = out / SYNTHETIC_DATASET
        generate(cfg.synthetic).write(dataset)
        kb = KBSource(path=str(dataset / KG_FILE), format="tsv")
        sources = [QuestionSource(name="synthetic", path=str(dataset / "questions.jsonl"), format="jsonl")]
    kg, kg_report = _open_kg(cfg, kb)
    linker = _linker(cfg, kg, out) if cfg.linking is not None else None
    linking: dict[str, Any] = {}

    pending: list[ShardTask] = []
    totals: dict[str, ShardStats] = {}
    for source in sources:
        items = _read_questions(source)
        if linker is not None:
            items, linking[source.name] = _link(items, linker, out / source.name)
        tasks, done = plan_shards(source.name, items, cfg.shard_size, out)
        pending += tasks
        totals[source.name] = ShardStats(source=source.name)
        for stats in done:
            totals[source.name] = totals[source.name].merge(stats)
    resumed = {name: s.lines for name, s in totals.items()}
    rebuilt = [{"shard": t.parquet_path, "reason": t.rebuild_reason} for t in pending if t.rebuild_reason]
    fingerprinted = any(s.shards for s in totals.values())
    if fingerprinted:
        _write_fingerprint(cfg, out)

    if pending:
        init_ray(cfg.ray)
        sparql = cfg.kg if isinstance(cfg.kg, SparqlStoreConfig) else None
        kg_ref = None if sparql is not None else ray.put(kg)
        ds = ray.data.from_items([{"task": t.to_json()} for t in pending], override_num_blocks=len(pending))
        ds = ds.map_batches(
            _ShardBuilder,
            batch_size=1,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(cfg.num_actors, len(pending))),
            fn_constructor_kwargs={"kg_ref": [kg_ref], "config": cfg.subgraph, "sparql": sparql,
                                   "push": _shard_pusher(out)},
        )
        bar = tqdm(total=sum(len(t.items) for t in pending), unit="q", desc="subgraphs", disable=not progress,
                   file=user_stream())
        for row in ds.iter_rows():
            stats = ShardStats(**json.loads(row["stats"]))
            if not fingerprinted:
                _write_fingerprint(cfg, out)
                fingerprinted = True
            totals[stats.source] = totals[stats.source].merge(stats)
            bar.update(stats.lines)
        bar.close()

    report = {
        "kb": kg_report,
        "subgraph": cfg.subgraph.model_dump(),
        "output_dir": str(out.resolve()),
        "sources": {name: {**s.summary(), "resumed_lines": resumed[name]} for name, s in totals.items()},
        "rebuilt_shards": rebuilt,
        "unfinished": sum(s.unfinished for s in totals.values()),
    }
    if linking:
        report["linking"] = linking
    write_json_atomic(report, out / REPORT_FILE)
    return report


def _open_kg(cfg: BuildSubgraphsConfig, kb: KBSource | None) -> tuple[KnowledgeGraph | KGStore, dict[str, Any]]:
    """The graph the shards are cut from (``kb``: the engine's graph; ``kg``: a store) and its report entry.

    Raises:
        StoreError: a SPARQL endpoint that does not answer (checked once here, before any work).
    """
    if isinstance(cfg.kg, SparqlStoreConfig):
        from rg.stores.sparql import SparqlStore

        store = SparqlStore(cfg.kg)
        store.ping()
        return store, {"store": "sparql", "endpoint": cfg.kg.endpoint, "graph": cfg.kg.graph}
    source = cfg.kg.kb if isinstance(cfg.kg, MemoryStoreConfig) else kb
    assert source is not None  # guaranteed by the config validator
    kg, bad = load_kb(source)
    report = {"path": source.path, "triples": kg.num_triples, "entities": kg.num_entities,
              "relations": kg.num_relations, "bad_lines": bad}
    if cfg.kg is None:
        return kg, report
    from rg.stores.memory import MemoryStore

    return MemoryStore(kg), {"store": "memory", **report}


def _linker(cfg: BuildSubgraphsConfig, kg: KnowledgeGraph | KGStore, out: Path):
    """The entity linker over the KG's names; the index is reloaded when built for the same KG before
    (the same KB files, or the same SPARQL endpoint and graph: ``--fresh`` rebuilds it)."""
    from rg.linking import EntityLinker, load_or_build_index
    from rg.linking.names import store_names
    from rg.stores import MemoryStore
    from rg.text.encoder import TextEncoder

    assert cfg.linking is not None
    stamps = input_file_stamps(cfg)
    kb_paths = {cfg.kb.path} if cfg.kb is not None else set()
    if isinstance(cfg.kg, MemoryStoreConfig):
        kb_paths.add(cfg.kg.kb.path)
    sparql = cfg.kg.model_dump(include={"endpoint", "graph", "namespace", "name_relation", "name_lang"}) \
        if isinstance(cfg.kg, SparqlStoreConfig) else None
    kg_key = json.dumps({"kb": {k: v for k, v in stamps.items() if k in kb_paths}, "sparql": sparql,
                         "synthetic": cfg.synthetic.model_dump() if cfg.synthetic else None,
                         "unnamed_pattern": cfg.linking.unnamed_pattern}, sort_keys=True)
    folder = Path(cfg.linking.index_dir) if cfg.linking.index_dir else out / "linking-index"
    encoder = TextEncoder(cfg.linking.encoder) if cfg.linking.dense != "off" else None
    store = MemoryStore(kg) if isinstance(kg, KnowledgeGraph) else kg
    index, _ = load_or_build_index(folder, lambda: store_names(store, cfg.linking.unnamed_pattern), encoder, kg_key)
    return EntityLinker(index, cfg.linking)


def _link(items: list, linker, folder: Path) -> tuple[list, dict[str, Any]]:
    """Link the questions of one source; write ``linking.jsonl`` there and return the items and a summary."""
    from rg.linking.questions import LINKING_FILE, link_questions, link_summary, write_link_records

    linked, records = link_questions(items, linker)
    write_link_records(records, folder / LINKING_FILE)
    return linked, link_summary(records)


def format_report(report: dict[str, Any]) -> str:
    """A plain-text coverage table of a build report."""
    cap = report["subgraph"]["max_triples"]
    head = f"{'source':<14}{'lines':>8}{'built':>8}{'bad':>6}{'covered':>17}{'truncated':>10}{'cap cost':>9}{'mean T':>9}{'max T':>8}"
    kg = report["kb"]
    if kg.get("store") == "sparql":
        where = f"KG: SPARQL store {kg['endpoint']} (graph {kg['graph']})"
    else:
        store = " (memory store)" if kg.get("store") == "memory" else ""
        where = f"KB{store}: {kg['triples']:,} triples, {kg['entities']:,} entities"
    lines = [f"{where}; cap = {cap}", head]
    for name, s in report["sources"].items():
        cov = f"{s['covered']:,}/{s['lines']:,}"
        mean = f"{s['mean_triples']:.0f}" if s["mean_triples"] is not None else "-"
        lines.append(
            f"{name:<14}{s['lines']:>8,}{s['built']:>8,}{s['bad_total']:>6}{cov:>17}{s['truncated']:>10,}"
            f"{s['cap_cost']:>9}{mean:>9}{s['triples_max']:>8,}"
        )
        for reason, n in s["bad"].items():
            lines.append(f"{'':<14}bad: {reason} × {n}")
    for item in report.get("rebuilt_shards", []):
        lines.append(f"rebuilt damaged shard {item['shard']}: {item['reason']}")
    if report.get("unfinished"):
        lines.append(f"{report['unfinished']:,} questions were not built on store errors (bad: store_* above); "
                     "run the same command again once the store answers to build them")
    lines.append(f"shards and report: {report['output_dir']}")
    return "\n".join(lines)
