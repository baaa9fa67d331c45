"""``python -m jobs.privacy_report``: the privacy/utility trade-off of the Brain's view, measured.

For every question of one or more inputs (RoG shards, streamed with Ray Data to a pool of
actors), each privacy mode anonymises the question's working subgraph in a fresh
:class:`~rg.privacy.PrivacySession`; the view is then measured as it is and after the structure
sanitiser at each node budget (:mod:`rg.privacy.structure`): the share of exposed entities whose
2-hop signature is unique, the smallest signature class ``k``, the nodes and edges exposed, and
whether an answer is still reachable from a topic entity. Gold answers are used for that last
measure only, after the view is built.

The KG's schema (coarse types, relation clusters) is computed once, from the KB file when one is
given or else from the union of the inputs' subgraphs, and saved as ``privacy_schema.json``.
Writes ``privacy_report.json``, ``privacy_report.md`` (printed) and ``privacy_report.png``.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import Field, field_validator
from tqdm.auto import tqdm

from rg.config import Config
from rg.console import user_stream
from rg.data.records import BadRow
from rg.data.rog import read_rog, sample_from_row
from rg.data.sample import Sample
from rg.data.sources import KBSource, read_kb_rows
from rg.run.paths import resolve_data_path
from rg.data.streaming import read_input
from rg.privacy.config import PrivacyConfig, PrivacyMode
from rg.privacy.schema import SCHEMA_FILE, KGSchema, TypingConfig
from rg.privacy.session import PrivacySession
from rg.privacy.structure import SanitiserConfig, pseudonymous, reachable, sanitise, structural_uniqueness
from rg.runtime import RayConfig, init_ray

UNSANITISED = "anonymised only"
GROUPED = "grouped, no budget"
SCHEMA_VERSION = 2
"""Bumped when the saved schema's content changes (2: type aliases), so an older one is rebuilt."""


class NamedInput(Config):
    """One set of questions, named in the report."""

    name: str = Field(min_length=1, description="Label in the tables and plots, e.g. `metaqa_2hop`.")
    input: str = Field(description="RoG file or shard folder (`@shared/...` allowed).")


class PrivacyReportConfig(Config):
    """Which questions, modes and budgets the privacy report measures."""

    KIND: ClassVar[str] = "privacy_report"

    inputs: list[NamedInput] = Field(min_length=1, description="`[{name: metaqa_2hop, input: <shards>}, ...]`.")
    limit: int | None = Field(300, ge=1, description="First N questions of each input (None: all).")
    output_dir: str = Field(description="Where privacy_report.json / .md / .png and the schema go.")
    kb: KBSource | None = Field(
        None, description="The whole KB, to compute types and relation clusters from (else the inputs' subgraphs)."
    )
    typing: TypingConfig = Field(
        default_factory=TypingConfig, description="How entity types are derived where the KG asserts none."
    )
    modes: list[PrivacyMode] = Field(["plaintext", "utility", "privacy"], min_length=1)
    budgets: list[int] = Field([200, 100, 50, 20], description="Exposed-node budgets of the sanitiser.")
    sanitiser: SanitiserConfig = Field(default_factory=SanitiserConfig, description="Grouping and PageRank settings.")
    num_actors: int = Field(2, ge=1, description="Actors measuring questions in parallel.")
    batch_size: int = Field(8, ge=1, description="Questions per actor call.")
    ray: RayConfig = Field(default_factory=RayConfig)

    @field_validator("inputs")
    @classmethod
    def _distinct_names(cls, inputs: list[NamedInput]) -> list[NamedInput]:
        names = [i.name for i in inputs]
        if len(set(names)) != len(names):
            raise ValueError(f"input names repeat: {names}; give every input its own `name`")
        return inputs

    @field_validator("budgets")
    @classmethod
    def _positive(cls, budgets: list[int]) -> list[int]:
        if any(b < 1 for b in budgets):
            raise ValueError("every budget is a number of exposed nodes >= 1")
        return sorted(set(budgets), reverse=True)


@dataclass(frozen=True)
class Setting:
    """One row of the trade-off: a mode and a sanitiser setting (None: the view as anonymised)."""

    mode: str
    budget: str

    @staticmethod
    def label(max_nodes: int | None, sanitised: bool) -> str:
        if not sanitised:
            return UNSANITISED
        return GROUPED if max_nodes is None else f"≤ {max_nodes} nodes"


def measure_question(sample: Sample, schema: KGSchema, cfg: PrivacyReportConfig) -> list[dict[str, Any]]:
    """One row per (mode, sanitiser setting) for one question (see the module docstring)."""
    rows: list[dict[str, Any]] = []
    subgraph_entities = {e for h, _, t in sample.triples for e in (h, t)}
    topics = [t for t in sample.q_entities if t in subgraph_entities] or list(sample.q_entities)
    for mode in cfg.modes:
        started = time.perf_counter()
        with PrivacySession(PrivacyConfig(mode=mode), schema) as session:
            view = list(dict.fromkeys(session.anonymise_triples(sample.triples, topics)))
            anchors = {session.entity(t, topic=True) for t in topics}
            anonymise_s = time.perf_counter() - started
            answers = {session.entity(a) for a in sample.a_entities if a in subgraph_entities}
        counted = pseudonymous if mode != "plaintext" else (lambda _: True)
        before = structural_uniqueness(view, anchors, rounds=cfg.sanitiser.wl_rounds, counted=counted)
        base = {"id": sample.id, "hops": sample.hops, "mode": mode, "anonymise_s": anonymise_s,
                "nodes_raw": len(subgraph_entities), "edges_raw": len(sample.triples)}
        nodes = len({n for h, _, t in view for n in (h, t)} | anchors)
        rows.append({**base, "setting": Setting.label(None, False), "share": before.share, "k": before.k,
                     "entities": before.entities, "nodes": nodes, "edges": len(view),
                     "reachable": reachable(view, anchors, answers), "sanitise_s": 0.0})
        for max_nodes in [None, *cfg.budgets]:
            started = time.perf_counter()
            settings = cfg.sanitiser.model_copy(update={"max_nodes": max_nodes})
            out = sanitise(view, anchors, settings)
            sanitise_s = time.perf_counter() - started
            after = structural_uniqueness(out.triples, anchors, out.weights(), settings.wl_rounds, counted)
            rows.append({**base, "setting": Setting.label(max_nodes, True), "share": after.share, "k": after.k,
                         "entities": after.entities, "nodes": len(out.nodes), "edges": len(out.triples),
                         "reachable": reachable(out.triples, anchors, {out.node_of(a) for a in answers}),
                         "sanitise_s": sanitise_s})
    return rows


class _ReportActor:
    """Ray Data actor: measures batches of RoG rows under every mode and budget."""

    def __init__(self, cfg: PrivacyReportConfig, schema: dict[str, Any], name: str) -> None:
        self.cfg = cfg
        self.schema = KGSchema(types=schema["types"], clusters=schema["clusters"], aliases=schema["aliases"])
        self.name = name

    def __call__(self, batch: Any) -> dict[str, np.ndarray]:
        out = []
        for row in batch.to_pylist():
            item = sample_from_row(row, self.name, -1)
            if isinstance(item, BadRow):
                out.append({"id": str(row.get("id")), "bad_row": item.reason})
                continue
            out.extend(measure_question(item, self.schema, self.cfg))
        return {"row": np.array([json.dumps({"input": self.name, **r}) for r in out], dtype=object)}


def kg_triples(cfg: PrivacyReportConfig) -> Iterable[tuple[str, str, str]]:
    """The triples the schema is computed from: the KB file, or every input subgraph (deduplicated)."""
    if cfg.kb is not None:
        path = resolve_data_path(cfg.kb.path)
        if not path.exists():
            raise FileNotFoundError(f"KB file {path} (from `kb.path: {cfg.kb.path}`) does not exist. "
                                    "Fix: point `kb.path` at the KB, or drop `kb` to use the inputs' subgraphs")
        return (item for _, item in read_kb_rows(path, cfg.kb.format) if not isinstance(item, BadRow))
    seen: dict[tuple[str, str, str], None] = {}
    for named in cfg.inputs:
        for sample in read_rog(resolve_data_path(named.input)):
            seen.update(dict.fromkeys(sample.triples))
    return seen


def load_or_build_schema(cfg: PrivacyReportConfig) -> tuple[KGSchema, dict[str, Any]]:
    """The KG's schema, read from ``output_dir`` when computed before from the same source."""
    folder = Path(cfg.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    source = {"version": SCHEMA_VERSION, "kb": cfg.kb.model_dump() if cfg.kb else None,
              "inputs": None if cfg.kb else [i.input for i in cfg.inputs], "typing": cfg.typing.model_dump()}
    meta_path = folder / "privacy_schema.source.json"
    if (folder / SCHEMA_FILE).exists() and meta_path.exists() and json.loads(meta_path.read_text()) == source:
        schema = KGSchema.load(folder)
    else:
        schema = KGSchema.build(kg_triples(cfg), typing=cfg.typing)
        schema.save(folder)
        meta_path.write_text(json.dumps(source))
    info = {"source": source, "entities": len(schema.types), "types": len(set(schema.types.values())),
            "relations": len(schema.clusters), "relation_clusters": len(set(schema.clusters.values()))}
    return schema, info


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (input, mode, setting): means over questions of uniqueness, k, size and reachability
    (uniqueness and k over the questions whose view exposes at least one entity)."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        if "bad_row" not in row:
            groups[(row["input"], row["mode"], row["setting"])].append(row)
    table = []
    for (name, mode, setting), members in groups.items():
        exposed = [r for r in members if r["entities"]]  # a view of the anchors alone has no share
        ks = [r["k"] for r in exposed]
        table.append({
            "input": name, "mode": mode, "setting": setting, "questions": len(members),
            "unique_share": statistics.fmean(r["share"] for r in exposed) if exposed else 0.0,
            "k_median": statistics.median(ks) if ks else 0,
            "k_at_least_2": sum(k >= 2 for k in ks) / len(ks) if ks else 0.0,
            "nodes": statistics.fmean(r["nodes"] for r in members),
            "edges": statistics.fmean(r["edges"] for r in members),
            "answer_reachable": statistics.fmean(r["reachable"] for r in members),
            "ms_per_question": 1000 * statistics.fmean(r["anonymise_s"] + r["sanitise_s"] for r in members),
        })
    order = {m: i for i, m in enumerate(["plaintext", "utility", "privacy"])}
    return sorted(table, key=lambda r: (r["input"], order.get(r["mode"], 9), -_budget_rank(r["setting"])))


def _budget_rank(setting: str) -> float:
    if setting == UNSANITISED:
        return math.inf
    if setting == GROUPED:
        return 1e9
    return float(setting.split()[1])


def markdown(table: list[dict[str, Any]], title: str) -> str:
    lines = [f"## {title}", "",
             "| input | mode | view | questions | unique share | k (median) | k ≥ 2 | nodes | edges "
             "| answer reachable | ms/question |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in table:
        lines.append(f"| {r['input']} | {r['mode']} | {r['setting']} | {r['questions']} | {r['unique_share']:.3f} | "
                     f"{r['k_median']:g} | {r['k_at_least_2']:.3f} | {r['nodes']:.1f} | {r['edges']:.1f} | "
                     f"{r['answer_reachable']:.3f} | {r['ms_per_question']:.1f} |")
    return "\n".join(lines) + "\n"


def plot(table: list[dict[str, Any]], path: Path) -> None:
    """Per input: unique share and answer reachability against exposed nodes, one line per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    inputs = sorted({r["input"] for r in table})
    fig, axes = plt.subplots(2, len(inputs), figsize=(4.5 * len(inputs), 7), squeeze=False)
    for col, name in enumerate(inputs):
        for mode in sorted({r["mode"] for r in table if r["input"] == name}):
            rows = [r for r in table if r["input"] == name and r["mode"] == mode]
            x = [r["nodes"] for r in rows]
            for row, key in enumerate(("unique_share", "answer_reachable")):
                axes[row][col].plot(x, [r[key] for r in rows], marker="o", label=mode)
        axes[0][col].set_title(name)
        axes[0][col].set_ylabel("structurally unique share")
        axes[1][col].set_ylabel("answer reachable")
        for row in range(2):
            axes[row][col].set_xscale("log")
            axes[row][col].set_xlabel("exposed nodes per question (mean)")
            axes[row][col].grid(alpha=0.3)
        axes[0][col].legend(fontsize=8)
    fig.suptitle("Brain's view: anonymised only → grouped → node budgets (right to left)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass(frozen=True)
class PrivacyReport:
    table: list[dict[str, Any]]
    markdown: str
    files: Mapping[str, Path]


def privacy_report(cfg: PrivacyReportConfig, progress: bool = True) -> PrivacyReport:
    """Measure every input under every mode and budget; write JSON, Markdown and a plot."""
    import ray

    started = time.perf_counter()
    schema, schema_info = load_or_build_schema(cfg)
    init_ray(cfg.ray)
    schema_ref = {"types": dict(schema.types), "clusters": dict(schema.clusters), "aliases": dict(schema.aliases)}
    rows: list[dict[str, Any]] = []
    for named in cfg.inputs:
        name = named.name
        ds = read_input(named.input, cfg.limit).repartition(4 * cfg.num_actors).map_batches(
            _ReportActor, fn_constructor_kwargs={"cfg": cfg, "schema": schema_ref, "name": name},
            batch_size=cfg.batch_size, batch_format="pyarrow",
            compute=ray.data.ActorPoolStrategy(size=cfg.num_actors), num_cpus=0.5,
        )
        with tqdm(desc=f"privacy report {name}", unit="q", disable=not progress, file=user_stream()) as bar:
            for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
                done = [json.loads(r) for r in batch["row"]]
                rows.extend(done)
                bar.update(len({r["id"] for r in done}))
    table = summarise(rows)
    bad = sum("bad_row" in r for r in rows)
    seconds = time.perf_counter() - started
    questions = {i.name: len({r["id"] for r in rows if r["input"] == i.name and "bad_row" not in r})
                 for i in cfg.inputs}
    title = (f"Privacy report: {', '.join(f'{n} ({q} questions)' for n, q in questions.items())}; "
             f"schema {schema_info['types']} types, {schema_info['relation_clusters']} relation clusters")
    text = markdown(table, title)
    out = Path(cfg.output_dir)
    files = {"json": out / "privacy_report.json", "markdown": out / "privacy_report.md",
             "plot": out / "privacy_report.png", "rows": out / "privacy_rows.jsonl"}
    run = {"questions": questions, "bad_rows": bad, "seconds": seconds, "schema": schema_info,
           "modes": cfg.modes, "budgets": cfg.budgets, "sanitiser": cfg.sanitiser.model_dump()}
    files["json"].write_text(json.dumps({"run": run, "table": table}, indent=1))
    files["markdown"].write_text(text)
    files["rows"].write_text("".join(json.dumps(r) + "\n" for r in rows))
    plot(table, files["plot"])
    return PrivacyReport(table=table, markdown=text, files=files)
