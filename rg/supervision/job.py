"""The supervision-refinement job on Ray Data (ReG stage S(I) at scale).

Samples (RoG parquet/jsonl, or the subgraph builder's shards) flow through two stages: map
tasks compute each question's weak labels and compressed candidate pool, then an actor pool
runs the path selector — an LLM behind an OpenAI-compatible endpoint, or the local similarity
selector — with many questions in flight per actor (the client is created inside the actor).
The driver writes each finished batch as an atomic parquet part file, so a killed job loses
only the batches in flight; a restart skips ids already labelled. A JSON report (counts,
fallback reasons, pool sizes, tokens and calls) is written next to the labels.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Iterator, Literal

import numpy as np
from pydantic import Field, model_validator
from tqdm.auto import tqdm

from rg.config import Config
from rg.data.paths import resolve_data_path
from rg.data.records import BadRow
from rg.data.rog import iter_rog_rows, rog_files, sample_from_row
from rg.data.sample import Sample
from rg.data.splits import SplitConfig, SplitName
from rg.llm.usage import UsageLedger
from rg.runtime import RayConfig, init_ray
from rg.data.webqsp import read_webqsp_labels
from rg.supervision.candidates import CandidateConfig
from rg.supervision.evaluate import compare_with_reference
from rg.supervision.labels import Labels, iter_labels, write_labels
from rg.supervision.llm_selector import LLMPathSelector, LLMSelectorConfig
from rg.supervision.refine import finish_question, prepare_question
from rg.supervision.selectors import PathSelector, Selection, SimilarityPathSelector, SimilaritySelectorConfig
from rg.text.encoder import EncoderConfig, TextEncoder

if TYPE_CHECKING:
    import pyarrow as pa
    import ray

LABELS_DIR = "labels"
READ_CPUS = 0.25
"""CPUs reserved per read task; the actor pool must leave at least this much free."""
PREPARE_CPUS = 0.25
"""CPUs reserved per candidate-pool task (about 3 ms of work per question). Reserving a whole
CPU let only one such task run beside a pool of 4 LLM actors on 2 CPUs, and the pool starved."""
REPORT_FILE = "refine_report.json"


class RefineConfig(Config):
    """``python -m jobs.refine``: weak labels → candidate pool → path selection → labels parquet."""

    KIND: ClassVar[str] = "refine"

    input: str | list[str] = Field(
        description="RoG parquet/jsonl(.gz) file or folder of parquet shards, or a list of them; `@shared/...` allowed."
    )
    output_dir: str = Field(description="Labels go to <output_dir>/labels/, the report beside them.")
    selector: Literal["similarity", "llm"] = Field("similarity", description="Local similarity selector or an LLM.")
    similarity: SimilaritySelectorConfig = Field(default_factory=SimilaritySelectorConfig)
    encoder: EncoderConfig = Field(default_factory=EncoderConfig)
    llm: LLMSelectorConfig | None = Field(None, description="Endpoint and limits; required when selector is `llm`.")
    candidates: CandidateConfig = Field(default_factory=CandidateConfig)
    limit: int | None = Field(None, ge=1, description="Only the first N rows of each input (quick runs).")
    split: SplitConfig | None = Field(
        None,
        description="Refine only the questions on `sides` of this split (the training job's `split` section), "
        "e.g. the capped train and val sides of MetaQA's canonical split.",
    )
    sides: list[SplitName] = Field(default_factory=lambda: ["train", "val"], description="Sides of `split` to refine.")
    reference_labels: str | None = Field(
        None,
        description="WebQSP-style evidence labels (jsonl.gz with evidence_triple_idx) to score weak and refined labels against.",
    )
    num_actors: int = Field(2, ge=1, description="Selector actors in the Ray Data pool.")
    actor_cpus: float = Field(
        0.5,
        gt=0,
        description="CPUs reserved per selector actor; num_actors × actor_cpus must leave CPUs for reading "
        "(LLM selectors mostly wait on I/O: 0.25 is plenty).",
    )
    batch_size: int = Field(16, ge=1, description="Questions per actor call (selected concurrently).")
    calls_per_actor: int = Field(
        1, ge=1, description="Batches an actor works on at once; > 1 overlaps LLM waits across batches."
    )
    ray: RayConfig = Field(default_factory=RayConfig)

    @model_validator(mode="after")
    def _llm_needs_endpoint(self) -> "RefineConfig":
        if self.selector == "llm" and self.llm is None:
            raise ValueError("selector is `llm` but no `llm:` section is set; add llm.llm.base_url and llm.llm.model")
        return self


def build_selector(cfg: RefineConfig) -> PathSelector:
    """The configured selector (constructed where it runs, e.g. inside a Ray actor)."""
    import torch

    torch.set_num_threads(max(1, int(cfg.actor_cpus)))  # one process per actor: match its CPU share
    if cfg.selector == "llm":
        assert cfg.llm is not None  # checked by the config validator
        return LLMPathSelector(cfg.llm)
    return SimilarityPathSelector(cfg.similarity, TextEncoder(cfg.encoder))


def _prepare_batch(
    batch: "pa.Table", candidates: CandidateConfig, skip: frozenset[str], source: str
) -> dict[str, np.ndarray]:
    """Map task: validate rows, skip labelled ids, build weak labels and the candidate pool.

    Returns one output row per input row: ``kind`` is ``sample`` (payload: pickled
    ``(Sample, Prepared)``), ``skipped`` (already labelled) or ``bad`` (payload: the BadRow).
    """
    kinds, payloads = [], []
    for row in batch.to_pylist():
        item = sample_from_row(row, source, -1)
        if isinstance(item, BadRow):
            kinds.append("bad")
            payloads.append(pickle.dumps(item))
        elif item.id in skip:
            kinds.append("skipped")
            payloads.append(b"")
        else:
            try:
                prepared = prepare_question(item, candidates)
            except Exception as err:  # one broken question must not fail its whole batch
                kinds.append("bad")
                payloads.append(pickle.dumps(BadRow(source, -1, "bad_value", f"{item.id}: cannot build candidates: {err!r}")))
                continue
            kinds.append("sample")
            payloads.append(pickle.dumps((item, prepared)))
    return {"kind": np.array(kinds, dtype=object), "payload": np.array(payloads, dtype=object)}


class _SelectorActor:
    """Async actor: runs the selector on a batch of prepared questions concurrently."""

    def __init__(self, cfg: RefineConfig) -> None:
        self.selector = build_selector(cfg)

    async def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        kinds = list(batch["kind"])
        todo = [pickle.loads(p) for k, p in zip(kinds, batch["payload"]) if k == "sample"]
        outcomes = await asyncio.gather(*(self.selector.select(s, p.pool) for s, p in todo), return_exceptions=True)
        selections = [
            Selection(failure=f"selector_error:{type(o).__name__}") if isinstance(o, Exception) else o for o in outcomes
        ]
        labels = iter(finish_question(s, p, sel, self.selector.name) for (s, p), sel in zip(todo, selections))
        payloads = [pickle.dumps(next(labels)) if k == "sample" else p for k, p in zip(kinds, batch["payload"])]
        delta = ""
        if isinstance(self.selector, LLMPathSelector):
            delta = json.dumps(self.selector.client.ledger.drain().to_dict())
        return {
            "kind": np.array(kinds, dtype=object),
            "payload": np.array(payloads, dtype=object),
            "ledger": np.array([delta] + [""] * (len(kinds) - 1), dtype=object),
        }


def done_ids(labels_dir: Path) -> set[str]:
    """Ids already labelled by earlier runs (resume)."""
    return {x.id for x in iter_labels(labels_dir)} if labels_dir.is_dir() and any(labels_dir.glob("*.parquet")) else set()


def check_resources(cfg: RefineConfig, cluster_cpus: float) -> None:
    """Fail fast when the actor pool would take every CPU and starve the read tasks."""
    need = cfg.num_actors * cfg.actor_cpus + READ_CPUS
    if need > cluster_cpus:
        raise ValueError(
            f"num_actors × actor_cpus = {cfg.num_actors} × {cfg.actor_cpus} leaves no CPU for reading on a "
            f"cluster with {cluster_cpus:g} CPUs (needs {need:g}). Fix: lower `num_actors` or `actor_cpus`"
        )


def input_sources(cfg: RefineConfig) -> list[str]:
    return [cfg.input] if isinstance(cfg.input, str) else list(cfg.input)


def wanted_ids(cfg: RefineConfig) -> frozenset[str] | None:
    """The ids to refine when a split file restricts the input (None: every row)."""
    if cfg.split is None:
        return None
    if cfg.split.file is None:
        raise ValueError("refine's `split` needs `split.file`; a seeded split is decided by the training job")
    by_side = cfg.split.ids_from_file()
    return frozenset().union(*(by_side[side] for side in cfg.sides))


def read_input(source: str, limit: int | None, ids: frozenset[str] | None = None) -> "ray.data.Dataset":
    """One input as a streaming Ray Dataset (parquet files or shards, or jsonl/jsonl.gz).

    Args:
        source: A RoG file or folder.
        limit: Keep the first N rows (after the id filter).
        ids: Keep only these question ids.
    """
    import ray
    from ray.data.expressions import col

    files = [str(f) for f in rog_files(resolve_data_path(source))]
    if all(f.endswith(".parquet") for f in files):
        ds = ray.data.read_parquet(files, num_cpus=READ_CPUS)
    else:
        ds = ray.data.read_json(files, lines=True, num_cpus=READ_CPUS)
    if ids is not None:
        ds = ds.filter(expr=col("id").is_in(sorted(ids)))
    return ds.limit(limit) if limit is not None else ds


def refine(cfg: RefineConfig, progress: bool = True) -> dict[str, Any]:
    """Run the job; return (and write to ``output_dir/refine_report.json``) the report.

    Rows stream from the inputs through Ray Data (nothing is loaded whole on the driver);
    the driver writes each finished batch as an atomic parquet part file.
    """
    import ray

    out = Path(cfg.output_dir)
    labels_dir = out / LABELS_DIR
    labels_dir.mkdir(parents=True, exist_ok=True)
    skip = frozenset(done_ids(labels_dir))
    init_ray(cfg.ray)
    check_resources(cfg, ray.cluster_resources().get("CPU", 0.0))
    ledger, bad, counts = UsageLedger(), Counter(), Counter()
    start = time.perf_counter()
    ids = wanted_ids(cfg)
    for source in input_sources(cfg):
        ds = read_input(source, cfg.limit, ids)
        total = ds.count()
        ds = ds.repartition(target_num_rows_per_block=cfg.batch_size)  # spread questions over the actors
        ds = ds.map_batches(
            _prepare_batch,
            fn_kwargs={"candidates": cfg.candidates, "skip": skip, "source": source},
            batch_size=cfg.batch_size,
            batch_format="pyarrow",
            num_cpus=PREPARE_CPUS,
        )
        ds = ds.map_batches(
            _SelectorActor,
            fn_constructor_kwargs={"cfg": cfg},
            batch_size=cfg.batch_size,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(
                size=cfg.num_actors,
                max_concurrent_calls_per_actor=cfg.calls_per_actor,
                max_tasks_in_flight_per_actor=2 * cfg.calls_per_actor,
            ),
            num_cpus=cfg.actor_cpus,
        )
        bar = tqdm(total=total, unit="q", desc=f"refine {Path(source).name} ({cfg.selector})", disable=not progress)
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            labels = []
            for kind, payload in zip(batch["kind"], batch["payload"]):
                counts[kind] += 1
                if kind == "sample":
                    labels.append(pickle.loads(payload))
                elif kind == "bad":
                    bad[pickle.loads(payload).reason] += 1
            if labels:
                write_labels(labels, labels_dir / f"part-{uuid.uuid4().hex[:12]}.parquet")
            for delta in batch["ledger"]:
                if delta:
                    ledger.merge(UsageLedger.from_dict(json.loads(delta)))
            bar.update(len(batch["kind"]))
        bar.close()
    all_labels = list(iter_labels(labels_dir))
    report = summarize(
        all_labels, cfg, bad, counts["skipped"], counts["sample"], ledger, time.perf_counter() - start
    )
    if cfg.reference_labels:
        reference = {
            x.id: x.evidence_triple_idx for x in read_webqsp_labels(resolve_data_path(cfg.reference_labels))
        }
        report["vs_reference"] = compare_with_reference(iter_samples(cfg), all_labels, reference, cfg.candidates.weak)
    (out / REPORT_FILE).write_text(json.dumps(report, indent=2))
    return report


def iter_samples(cfg: RefineConfig) -> Iterator[Sample]:
    """The input samples, streamed on the driver (used only for scoring against references)."""
    ids = wanted_ids(cfg)
    for source in input_sources(cfg):
        n = 0
        for _, item in iter_rog_rows(resolve_data_path(source)):
            if cfg.limit is not None and n >= cfg.limit:
                break
            if isinstance(item, Sample) and (ids is None or item.id in ids):
                n += 1
                yield item


def summarize(
    labels: list[Labels], cfg: RefineConfig, bad: Counter, resumed: int, written: int,
    ledger: UsageLedger, seconds: float,
) -> dict[str, Any]:
    """Report over all labels in the output folder (this run and earlier ones)."""
    ids = [x.id for x in labels]
    before = np.array([x.pool_before for x in labels], dtype=float)
    after = np.array([x.pool_after for x in labels], dtype=float)
    sources = Counter(x.source for x in labels)
    return {
        "input": cfg.input,
        "selector": labels[0].selector if labels else cfg.selector,
        "prompt_ids": sorted({x.prompt_id for x in labels if x.prompt_id}),
        "questions": len(labels),
        "duplicate_ids": len(ids) - len(set(ids)),
        "this_run": written,
        "resumed": resumed,
        "bad_input_rows": dict(bad),
        "refined": sources.get("refined", 0),
        "weak_fallback": sources.get("weak", 0),
        "fallback_reasons": dict(Counter(x.fallback_reason for x in labels if x.fallback_reason)),
        "mean_pool_before": float(before.mean()) if labels else None,
        "mean_pool_after": float(after.mean()) if labels else None,
        "compression_ratio": float(before.sum() / after.sum()) if labels and after.sum() else None,
        "mean_positive_triples": float(np.mean([len(x.positive_triples) for x in labels])) if labels else None,
        "prompt_tokens": int(sum(x.prompt_tokens for x in labels)),
        "completion_tokens": int(sum(x.completion_tokens for x in labels)),
        "llm_usage_this_run": ledger.to_dict(),
        "seconds_this_run": seconds,
        "questions_per_s_this_run": written / seconds if seconds > 0 and written else None,
    }


def format_report(report: dict[str, Any]) -> str:
    """A short human-readable summary of a refine report."""
    lines = [
        f"selector {report['selector']}  prompts {report['prompt_ids'] or '-'}",
        f"questions {report['questions']:,} (this run {report['this_run']:,}, resumed {report['resumed']:,}, "
        f"duplicates {report['duplicate_ids']})",
        f"refined {report['refined']:,}  weak fallback {report['weak_fallback']:,} {report['fallback_reasons'] or ''}",
    ]
    if report["mean_pool_before"] is not None:
        lines.append(
            f"pool {report['mean_pool_before']:.1f} → {report['mean_pool_after']:.1f} candidates "
            f"(compression {report['compression_ratio']:.1f}x); positives {report['mean_positive_triples']:.1f}/question"
        )
    total = report["llm_usage_this_run"]["total"]
    lines.append(
        f"LLM calls {total['calls']} retries {total['retries']} failures {total['failures']} tokens "
        f"{total['prompt_tokens']:,}+{total['completion_tokens']:,}"
    )
    for name, q in report.get("vs_reference", {}).items():
        lines.append(
            f"vs reference, {name:<16} P {q['precision']:.3f} R {q['recall']:.3f} F1 {q['f1']:.3f} "
            f"({q['questions']} questions, {q['mean_positives']:.1f} positives)"
        )
    if report["bad_input_rows"]:
        lines.append(f"bad input rows: {report['bad_input_rows']}")
    return "\n".join(lines)
