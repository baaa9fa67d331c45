"""The QA job's Ray Data actor: one or several QA runs answered by one pool, models loaded once.

A QA run (one :class:`~rg.jobs.evaluate_qa.QAEvaluateConfig`) needs a triple scorer and a reader,
or a dual tower, or a traversal. Starting an actor and loading them costs seconds, and answering
the demo's 40 questions with a retriever-score reader costs a fraction of one. So a pool answers
every run it is given, each batch once per run, and runs that name the same text encoder or the
same triple scorer share one loaded copy (:class:`SharedModels`)::

    actor = QAActor({"chains": chains_cfg, "paths": paths_cfg})
    columns = await actor(batch)       # a row per question and run, with the run's name

:func:`shared_pool_key` says which runs can share a pool: the same questions and the same pool
settings, and no memory rounds (those answer the questions several times, in order).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rg.data.records import BadRow
from rg.data.rog import sample_from_row
from rg.data.sample import Sample
from rg.evaluation.qa import Prediction, answer_questions, build_reader, inference_view
from rg.evaluation.qa_metrics import Gold
from rg.evaluation.scorers import TripleScorer
from rg.jobs.evaluate import ENCODER_KINDS, build_scorer
from rg.llm.journal import UsageJournal
from rg.text.encoder import EncoderConfig, TextEncoder

if TYPE_CHECKING:
    import pyarrow as pa

    from rg.jobs.evaluate_qa import QAEvaluateConfig

POOL_FIELDS = ("input", "limit", "split", "side", "num_actors", "actor_cpus", "batch_size", "calls_per_actor", "ray")
"""The settings runs must agree on to share a pool: which questions, and how the pool is laid out."""


def shared_pool_key(cfg: QAEvaluateConfig) -> str | None:
    """What runs sharing a pool must have in common (as JSON), or None for a run that needs its own:
    one with memory rounds, which answers its questions several times with the memory kept between."""
    if cfg.memory is not None:
        return None
    return json.dumps(cfg.model_dump(mode="json", include=set(POOL_FIELDS)), sort_keys=True)


def memory_actor_name(cfg: QAEvaluateConfig) -> str:
    """The memory actor of this evaluation (one per output folder)."""
    return "rg-memory-" + hashlib.sha1(str(Path(cfg.output_dir).resolve()).encode()).hexdigest()[:10]


class SharedModels:
    """Text encoders and triple scorers loaded once per process, by their config, for every run that names them.

    A scorer holds no state between calls but the last call's plans (a planner's), read back by the
    same run's evidence step before another run scores: the runs of a batch are answered in turn.
    """

    def __init__(self) -> None:
        self._encoders: dict[str, TextEncoder] = {}
        self._scorers: dict[str, TripleScorer] = {}

    def encoder(self, config: EncoderConfig) -> TextEncoder:
        key = config.model_dump_json()
        if key not in self._encoders:
            self._encoders[key] = TextEncoder(config)
        return self._encoders[key]

    def scorer(self, cfg: QAEvaluateConfig) -> TripleScorer:
        """The run's triple scorer (its text encoder only for the kinds that use one)."""
        if cfg.retriever is None:
            raise ValueError("this evaluation has no triple scorer (reasoner: dualtower); set `retriever`")
        needs_encoder = cfg.retriever.kind in ENCODER_KINDS
        key = json.dumps([cfg.retriever.model_dump(mode="json"),
                          cfg.encoder.model_dump(mode="json") if needs_encoder else None], sort_keys=True)
        if key not in self._scorers:
            self._scorers[key] = build_scorer(cfg.retriever, self.encoder(cfg.encoder) if needs_encoder else None)
        return self._scorers[key]


def build_qa_scorer(cfg: QAEvaluateConfig) -> TripleScorer:
    """The configured scorer; the text encoder is loaded only for methods that need it."""
    return SharedModels().scorer(cfg)


@dataclass(frozen=True)
class RunBook:
    """Where one run's LLM calls are journaled: the usage journal file and the run id."""

    journal: str
    run: str


class RunAnswerer:
    """One QA run inside an actor: its answerer (scorer and reader, dual tower or traversal), the
    round's question rewriter and the entity linker, as its config asks."""

    def __init__(self, cfg: QAEvaluateConfig, models: SharedModels, round_no: int = 1,
                 book: RunBook | None = None, use_memory: bool = True) -> None:
        self.cfg = cfg
        self.answerer = None
        journal = UsageJournal(book.journal, book.run) if book else None
        if cfg.reasoner == "dualtower":
            from rg.evaluation.dualtower_qa import DualTowerQA

            assert cfg.dualtower is not None  # checked by the config
            # the QA run's encoder (its cache holds the KG's texts that training encoded): the tuned Hand's
            # retriever and the DRM encode every subgraph's names, a second or more per question without it
            encoder = models.encoder(cfg.encoder) if cfg.dualtower.needs_encoder else None
            self.answerer = DualTowerQA(cfg.dualtower, cfg.schema_dir, cfg.memory if use_memory else None,
                                        memory_actor_name(cfg), journal, encoder=encoder)
        elif cfg.reasoner == "traverse":
            from rg.evaluation.traverse_qa import TraverseQA

            assert cfg.traverse is not None  # checked by the config
            scorer = models.scorer(cfg) if cfg.retriever is not None else None
            self.answerer = TraverseQA(cfg.traverse, scorer, cfg.memory if use_memory else None,
                                       memory_actor_name(cfg), journal)
        else:
            self.scorer = models.scorer(cfg)
            self.reader = build_reader(cfg.reader, journal)
        self.rewriter = None
        if cfg.memory is not None and cfg.memory.round_kind != "same" and round_no > 1:
            from rg.evaluation.rounds import RoundRewriter

            memory = cfg.memory
            self.rewriter = RoundRewriter(memory.round_kind, memory.paraphrase, round_no, memory.rounds)
        self.linker = None
        if cfg.linking is not None:
            from rg.linking import EntityLinker, NameIndex

            self.linker = EntityLinker(NameIndex.load(cfg.linking.index_dir), cfg.linking)

    async def answer(self, rows: list[tuple[dict[str, Any], Sample | BadRow]]) -> dict[str, list[Any]]:
        """Predictions for parsed rows (a bad row becomes a failed prediction, never dropped), whether
        each answer is in its subgraph, and the gold of each question this round rewrote."""
        samples: list[Sample] = []
        bad: list[Prediction] = []
        covered: dict[str, bool] = {}  # needs the subgraph, which only the actors see
        golds: dict[str, str] = {}  # the gold of a rewritten question (rg.evaluation.rounds), for the driver only
        for row, item in rows:
            if isinstance(item, BadRow):
                bad.append(Prediction(id=str(row.get("id")), question=str(row.get("question") or ""),
                                      failure=f"bad_row:{item.reason}"))
                continue
            if self.rewriter is not None:
                item, changed = self.rewriter(item)
                if changed:
                    golds[item.id] = json.dumps(asdict(Gold.of(item)))
            covered[item.id] = Gold.of(item).covered
            samples.append(inference_view(item))
        if self.linker is not None:
            samples, failed = link_samples(samples, self.linker)
            bad += failed
        cfg = self.cfg
        if self.answerer is not None:  # the dual tower or the traversal answers whole questions
            predictions = await self.answerer.answer(samples)
        else:
            predictions = await answer_questions(
                samples, self.scorer, self.reader, top_k=cfg.top_k, chains=cfg.chains, evidence=cfg.evidence,
                min_score=cfg.min_triple_score,
            )
        done = [*predictions, *bad]
        return {"prediction": [json.dumps(p.to_dict()) for p in done],
                "covered": [covered.get(p.id, False) for p in done],
                "gold": [golds.get(p.id, "") for p in done]}


class QAActor:
    """Ray Data actor: answers each batch of RoG rows (as their inference views) once per run.

    Args:
        runs: Run name → its config; every run shares :func:`shared_pool_key` (one run: any config).
        round_no: The memory round (1 without memory).
        books: Run name → where its LLM calls are journaled (none: not journaled).
        use_memory: False answers with no memory (``memory.baseline``).

    Each output row carries its run's name (``run``) and its share of the seconds that run spent
    on the batch (``seconds``), so the driver splits the runs and times each.
    """

    def __init__(self, runs: dict[str, QAEvaluateConfig], round_no: int = 1,
                 books: dict[str, RunBook] | None = None, use_memory: bool = True) -> None:
        import torch

        first = next(iter(runs.values()))
        torch.set_num_threads(max(1, int(first.actor_cpus)))  # one process per actor: match its CPU share
        models = SharedModels()
        self.runs = {name: RunAnswerer(cfg, models, round_no, (books or {}).get(name), use_memory)
                     for name, cfg in runs.items()}

    async def __call__(self, batch: pa.Table) -> dict[str, np.ndarray]:
        rows = [(row, sample_from_row(row, "input", -1)) for row in batch.to_pylist()]  # parsed once for all runs
        out: dict[str, list[Any]] = {"run": [], "seconds": [], "prediction": [], "covered": [], "gold": []}
        for name, answerer in self.runs.items():  # in turn: a shared planner scorer keeps its last plans
            started = time.perf_counter()
            columns = await answerer.answer(rows)
            share = (time.perf_counter() - started) / max(1, len(columns["prediction"]))
            for key, values in columns.items():
                out[key] += values
            out["run"] += [name] * len(columns["prediction"])
            out["seconds"] += [share] * len(columns["prediction"])
        return {"run": np.array(out["run"], dtype=object), "seconds": np.array(out["seconds"], dtype=np.float64),
                "prediction": np.array(out["prediction"], dtype=object),
                "covered": np.array(out["covered"], dtype=bool), "gold": np.array(out["gold"], dtype=object)}


def link_samples(samples: list[Sample], linker) -> tuple[list[Sample], list[Prediction]]:
    """Replace each inference view's topic entities with those linked from its question text.

    A question that fails to link becomes a failed prediction ``link_ambiguous: ...`` or
    ``link_not_found: ...`` (scored as a miss, never dropped).
    """
    results = linker.link_many([s.question for s in samples])
    kept, failed = [], []
    for sample, result in zip(samples, results):
        if result.failure is not None:
            failed.append(Prediction(id=sample.id, question=sample.question,
                                     failure=f"link_{result.failure}: {result.detail}"))
        else:
            kept.append(replace(sample, q_entities=result.entities))
    return kept, failed
