"""The supervision-refinement job on Ray Data (ReG stage S(I) at scale).

Samples (RoG parquet/jsonl, or the subgraph builder's shards) flow through two stages: map
tasks compute each question's weak labels and compressed candidate pool, then an actor pool
runs the path selector — an LLM behind an OpenAI-compatible endpoint, or the local similarity
selector — with many questions in flight per actor (the client is created inside the actor).
The driver writes each finished batch as a verified parquet part file
(:mod:`rg.supervision.label_store`), so a killed job loses only the batches in flight; a restart
skips ids already labelled, drops damaged parts and asks again the questions whose fallback was
transient. Only one job writes into an output folder at a time (:mod:`rg.run.locks`). Every LLM
call is journaled by the actor that made it (:mod:`rg.llm.journal`); the JSON report (counts,
fallback reasons, pool sizes, tokens and calls of this run and of all runs) sits next to the labels.
"""

from __future__ import annotations

import asyncio
import json
import pickle
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Iterator, Literal

import numpy as np
from pydantic import Field, model_validator
from tqdm.auto import tqdm

from rg.config import Config
from rg.console import user_stream
from rg.run.paths import resolve_data_path
from rg.data.records import BadRow
from rg.data.rog import iter_rog_rows, sample_from_row
from rg.data.sample import Sample
from rg.data.splits import SplitConfig, SplitName
from rg.run.integrity import write_json_atomic
from rg.data.streaming import READ_CPUS, count_input, input_ids, read_input
from rg.llm.client import OpenAICompatibleClient
from rg.llm.journal import JOURNAL_FILE, UsageJournal, new_run_id, read_journal
from rg.llm.probe import EndpointDownError, probe_endpoint
from rg.llm.usage import Usage, UsageLedger
from rg.run.locks import output_lock
from rg.runtime import RayConfig, init_ray
from rg.data.webqsp import read_webqsp_labels
from rg.supervision.candidates import CandidateConfig
from rg.supervision.evaluate import compare_with_reference
from rg.supervision.label_store import (
    RetryFallbacks,
    iter_part_labels,
    remove_ids,
    retry_ids,
    scan_parts,
    write_part,
    written_calls,
)
from rg.data.labels import Labels, iter_labels
from rg.supervision.llm_selector import LLMPathSelector, LLMSelectorConfig
from rg.supervision.refine import finish_question, prepare_question
from rg.supervision.selectors import PathSelector, Selection, SimilarityPathSelector, SimilaritySelectorConfig
from rg.text.encoder import EncoderConfig, TextEncoder

if TYPE_CHECKING:
    import pyarrow as pa
    import ray.data

LABELS_DIR = "labels"
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
    actor_resources: dict[str, Annotated[float, Field(gt=0)]] = Field(
        default_factory=dict,
        description="Custom Ray resources per selector actor, e.g. {selector: 1} to place the actors on the nodes "
        "that offer `selector` (CPUs are `actor_cpus`).",
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


def build_selector(cfg: RefineConfig, journal: UsageJournal | None = None) -> PathSelector:
    """The configured selector (constructed where it runs, e.g. inside a Ray actor).

    Args:
        cfg: The job config.
        journal: Where an LLM selector's client appends each call as it completes.
    """
    import torch

    torch.set_num_threads(max(1, int(cfg.actor_cpus)))  # one process per actor: match its CPU share
    if cfg.selector == "llm":
        assert cfg.llm is not None  # checked by the config validator
        return LLMPathSelector(cfg.llm, client=OpenAICompatibleClient(cfg.llm.llm, journal=journal))
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
    """Async actor: runs the selector on a batch of prepared questions concurrently.

    An LLM actor whose first batch got no answer at all stops calling: its later questions fall
    back, unsent (no prompt id), with the reason its calls failed (``llm_connection``, ...), so a
    dead endpoint costs at most one batch per actor while the driver stops the job.
    """

    def __init__(self, cfg: RefineConfig, journal: str | None = None, run: str = "") -> None:
        self.selector = build_selector(cfg, UsageJournal(journal, run) if journal else None)
        self.endpoint = EndpointWatch()

    async def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        kinds = list(batch["kind"])
        todo = [pickle.loads(p) for k, p in zip(kinds, batch["payload"]) if k == "sample"]
        if self.endpoint.given_up:
            outcomes: list = [Selection(failure=self.endpoint.reason) for _ in todo]
        else:
            outcomes = await asyncio.gather(*(self.selector.select(s, p.pool) for s, p in todo), return_exceptions=True)
        selections = [
            Selection(failure=f"selector_error:{type(o).__name__}") if isinstance(o, Exception) else o for o in outcomes
        ]
        labels = iter(finish_question(s, p, sel, self.selector.name) for (s, p), sel in zip(todo, selections))
        payloads = [pickle.dumps(next(labels)) if k == "sample" else p for k, p in zip(kinds, batch["payload"])]
        delta = ""
        if isinstance(self.selector, LLMPathSelector):
            drained = self.selector.client.ledger.drain()
            self.endpoint.saw(drained.total(), [x.failure for x in selections])
            delta = json.dumps(drained.to_dict())
        return {
            "kind": np.array(kinds, dtype=object),
            "payload": np.array(payloads, dtype=object),
            "ledger": np.array([delta] + [""] * (len(kinds) - 1), dtype=object),
        }


class EndpointWatch:
    """Whether an actor's endpoint has ever answered; gives up after a first batch of only failures.

    Attributes:
        given_up: The first batch with calls got no answer: send no more.
        reason: The commonest failure of that batch, given to the questions not sent.
    """

    def __init__(self) -> None:
        self.answered = False
        self.given_up = False
        self.reason = "llm_connection"

    def saw(self, usage: Usage, failures: list[str | None]) -> None:
        """Record one batch's calls and its selections' failure reasons."""
        if usage.calls > usage.failures:
            self.answered = True
        elif usage.calls and not self.answered:
            self.given_up = True
            common = Counter(f for f in failures if f and f.startswith("llm_")).most_common(1)
            self.reason = common[0][0] if common else self.reason


def check_endpoint_answered(cfg: RefineConfig, labels: list[Labels], usage: Usage, reasons: Counter) -> None:
    """Stop at the first batch with LLM calls (or skipped calls) while none has been answered.

    Args:
        cfg: The job config.
        labels: The batch's labels.
        usage: The calls of this run so far, this batch included.
        reasons: Fallback reasons of this run so far (updated with this batch's).

    Raises:
        EndpointDownError: naming the endpoint, the fallback reasons and the fix.
    """
    reasons.update(x.fallback_reason for x in labels if x.fallback_reason)
    skipped = any(x.prompt_id is None and (x.fallback_reason or "").startswith("llm_") for x in labels)
    if cfg.llm is None or usage.calls > usage.failures or not (usage.calls or skipped):
        return
    raise EndpointDownError(
        f"LLM endpoint {cfg.llm.llm.base_url} (model {cfg.llm.llm.model}) answered none of the "
        f"{usage.calls} calls made ({usage.retries} retries): fallbacks {dict(reasons)}; nothing of this batch was "
        "written. "
        "Fix: check that the server is up and llm.llm.base_url, then rerun the same command"
    )


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


def refine(
    cfg: RefineConfig, progress: bool = True, fresh: bool = False, retry_fallbacks: RetryFallbacks = "transient"
) -> dict[str, Any]:
    """Run the job; return (and write to ``output_dir/refine_report.json``) the report.

    Rows stream from the inputs through Ray Data (nothing is loaded whole on the driver);
    the driver writes each finished batch as a verified parquet part file. The output folder
    is locked for the whole run.

    Args:
        cfg: The validated job config.
        progress: Show a progress bar.
        fresh: Delete ``output_dir`` first instead of resuming.
        retry_fallbacks: Which earlier weak fallbacks to ask again: ``transient`` (connection,
            timeout, rate limit, 5xx), ``all`` or ``none``.

    Raises:
        OutputLockedError: another job writes into ``output_dir``.
        MissingAPIKeyError: the LLM endpoint needs a key that is not set (checked before Ray starts).
        EndpointDownError: the LLM endpoint did not answer the preflight probe (before Ray
            starts), or answered none of the first batch's calls.
    """
    with output_lock(cfg.output_dir, "jobs.refine"):
        return _refine_locked(cfg, progress, fresh, retry_fallbacks)


def _refine_locked(cfg: RefineConfig, progress: bool, fresh: bool, retry_fallbacks: RetryFallbacks) -> dict[str, Any]:
    import ray

    out = Path(cfg.output_dir)
    if fresh and out.exists():
        shutil.rmtree(out)
    if cfg.llm is not None and cfg.selector == "llm":
        cfg.llm.llm.resolve_api_key()  # a missing key fails here, on the driver, not inside an actor
        probe_endpoint(cfg.llm.llm, key="llm.llm")  # a dead endpoint costs the probe only, before any Ray work
    labels_dir = out / LABELS_DIR
    labels_dir.mkdir(parents=True, exist_ok=True)
    parts, damaged = scan_parts(labels_dir)
    retry = retry_ids(parts, retry_fallbacks)
    parts = remove_ids(parts, retry)
    skip = frozenset(x.id for x in iter_part_labels(parts))
    init_ray(cfg.ray)
    check_resources(cfg, ray.cluster_resources().get("CPU", 0.0))
    run = new_run_id()
    journal = str((out / JOURNAL_FILE).resolve())  # the actors may run in another working directory
    ledger, bad, counts = UsageLedger(), Counter(), Counter()
    seen: set[str] = set(skip)
    early_reasons: Counter = Counter()  # fallback reasons while the endpoint has not answered yet
    now_refined = 0
    start = time.perf_counter()
    ids = wanted_ids(cfg)
    for source in input_sources(cfg):
        known = input_ids(source, cfg.limit, ids)
        if known is not None and all(i in skip for i in known):  # every question labelled already: no Ray Data pass
            counts["skipped"] += len(known)
            continue
        ds, total = _labelled(cfg, source, ids, skip, journal, run)
        bar = tqdm(total=total, unit="q", desc=f"refine {Path(source).name} ({cfg.selector})", disable=not progress,
                   file=user_stream())
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            labels, delta = _unpack(batch, seen, bad, counts)
            now_refined += sum(row.id in retry and row.source == "refined" for row in labels)
            before = ledger.total()
            if before.calls == before.failures:  # nothing answered before this batch
                check_endpoint_answered(cfg, labels, before + delta.total(), early_reasons)
            if labels:
                write_part(labels_dir, labels, delta.total().calls, run)
            ledger.merge(delta)
            bar.update(len(batch["kind"]))
        bar.close()
    all_labels = list(iter_labels(labels_dir))
    report = summarize(
        all_labels, cfg, bad, counts["skipped"], counts["sample"], ledger, time.perf_counter() - start
    )
    all_runs = read_journal(journal)
    report.update({
        "output_dir": str(out.resolve()),
        "damaged_parts": damaged,
        "retry_fallbacks": retry_fallbacks,
        "retried": len(retry),
        "retried_now_refined": now_refined,
        "llm_usage_all_runs": all_runs.to_dict(),
        "llm_calls_not_written": max(0, all_runs.total().calls - written_calls(labels_dir)),
    })
    if cfg.reference_labels:
        reference = {
            x.id: x.evidence_triple_idx for x in read_webqsp_labels(resolve_data_path(cfg.reference_labels))
        }
        report["vs_reference"] = compare_with_reference(iter_samples(cfg), all_labels, reference, cfg.candidates.weak)
    write_json_atomic(report, out / REPORT_FILE)
    return report


def _labelled(
    cfg: RefineConfig, source: str, ids: frozenset[str] | None, skip: frozenset[str], journal: str, run: str
) -> tuple["ray.data.Dataset", int]:
    """The lazy Ray Data pipeline of one input (rows → candidate pools → selector actor pool), and its rows."""
    import ray

    ds = read_input(source, cfg.limit, ids)
    total = count_input(source, cfg.limit, ids)
    total = ds.count() if total is None else total  # a jsonl input: counted by a Ray job
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
        fn_constructor_kwargs={"cfg": cfg, "journal": journal, "run": run},
        batch_size=cfg.batch_size,
        batch_format="numpy",
        compute=ray.data.ActorPoolStrategy(
            size=cfg.num_actors,
            max_concurrent_calls_per_actor=cfg.calls_per_actor,
            max_tasks_in_flight_per_actor=2 * cfg.calls_per_actor,
        ),
        num_cpus=cfg.actor_cpus,
        resources=cfg.actor_resources or None,
    )
    return ds, total


def _unpack(
    batch: dict[str, np.ndarray], seen: set[str], bad: Counter, counts: Counter
) -> tuple[list[Labels], UsageLedger]:
    """One finished batch: its new labels rows (an id already ``seen`` counts as a duplicate, a bad row by its
    reason; every row by its kind) and the LLM usage its actors drained."""
    labels: list[Labels] = []
    delta = UsageLedger()
    for entry in batch["ledger"]:
        if entry:
            delta.merge(UsageLedger.from_dict(json.loads(entry)))
    for kind, payload in zip(batch["kind"], batch["payload"]):
        if kind == "sample":
            row = pickle.loads(payload)
            if row.id in seen:
                kind = "duplicate"
                bad["duplicate_id"] += 1
            else:
                seen.add(row.id)
                labels.append(row)
        elif kind == "bad":
            bad[pickle.loads(payload).reason] += 1
        counts[kind] += 1
    return labels, delta


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
    if "llm_usage_all_runs" in report:
        every = report["llm_usage_all_runs"]["total"]
        lines.append(
            f"all runs: LLM calls {every['calls']} tokens {every['prompt_tokens']:,}+{every['completion_tokens']:,}; "
            f"calls whose answers were never written {report['llm_calls_not_written']}"
        )
    if report.get("retried"):
        lines.append(f"retried {report['retried']} earlier fallbacks ({report['retry_fallbacks']}): "
                     f"{report['retried_now_refined']} now refined")
    for item in report.get("damaged_parts", []):
        lines.append(f"dropped damaged labels part {item['part']} ({item['reason']}); its questions were redone")
    for name, q in report.get("vs_reference", {}).items():
        lines.append(
            f"vs reference, {name:<16} P {q['precision']:.3f} R {q['recall']:.3f} F1 {q['f1']:.3f} "
            f"({q['questions']} questions, {q['mean_positives']:.1f} positives)"
        )
    if report["bad_input_rows"]:
        lines.append(f"bad input rows: {report['bad_input_rows']}")
    if "output_dir" in report:
        lines.append(f"labels and report: {report['output_dir']}")
    return "\n".join(lines)
