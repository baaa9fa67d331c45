"""``python -m jobs.evaluate`` (QA mode, ``kind: evaluate_qa``): answer a test set with Ray Data
batch inference and score the answers.

The driver reads the questions of one split side without their subgraphs and keeps their gold
answers; the rows themselves stream from the input files (``read_parquet`` with an id filter,
:mod:`rg.data.streaming`) through ``ray.data.Dataset.map_batches`` to a pool of actors, which
answer the inference view of each question (:func:`rg.evaluation.qa.inference_view`: no answers). Each actor loads the triple scorer (a
retriever checkpoint, or a baseline) and the reader once, and answers its batches with
:func:`rg.evaluation.qa.answer_questions`; an LLM reader's requests of a batch run concurrently
on the actor's event loop. The driver scores each prediction against the gold answers it kept
(:mod:`rg.evaluation.qa_metrics`) and writes the report (:mod:`rg.evaluation.qa_report`)::

    result = evaluate_qa(load_config("configs/evaluate_qa_synthetic.yaml", QAEvaluateConfig))
    result.summary.overall.hit, result.files.markdown
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator
from tqdm.auto import tqdm

from rg.console import user_stream
from rg.run.paths import resolve_data_path
from rg.data.records import BadRow
from rg.data.rog import sample_from_row
from rg.data.sample import Sample
from rg.data.streaming import INPUT_CPUS, read_input
from rg.data.splits import DuplicateIdError, QuestionSetConfig, load_split_samples
from rg.jobs.evaluate import ENCODER_KINDS, MethodConfig, build_scorer, check_planned_walks
from rg.evaluation.qa import (
    Prediction,
    ReaderChoice,
    RetrieverReaderChoice,
    answer_questions,
    build_reader,
    inference_view,
)
from rg.evaluation.memory_rounds import LOST, round_summary, without_memory
from rg.evaluation.qa_metrics import Gold, QASummary, QuestionScore, score_prediction, summarize
from rg.evaluation.qa_report import (
    QAReportFiles,
    failure_line,
    markdown_table,
    exposure_totals,
    per_side,
    round_predictions_path,
    run_line,
    usage_line,
    write_predictions,
    write_qa_results,
)
from rg.evaluation.scorers import TripleScorer
from rg.evidence import EvidenceConfig
from rg.linking.config import LinkingConfig, linking_setting
from rg.llm.journal import JOURNAL_FILE, UsageJournal, journal_usage, new_run_id
from rg.llm.probe import probe_endpoints
from rg.metrics import MatchMode
from rg.memory.config import MemoryConfig
from rg.reasoning.dualtower.config import DualTowerConfig
from rg.reasoning.tuned_reader import evidence_mismatch
from rg.reasoning.traverse.config import TraverseConfig
from rg.runtime import RayConfig, init_ray
from rg.text.encoder import EncoderConfig, TextEncoder

if TYPE_CHECKING:
    import pyarrow as pa


class QAEvaluateConfig(QuestionSetConfig):
    """QA evaluation: retrieve, build evidence, read, and score the answers of one split side."""

    KIND: ClassVar[str] = "evaluate_qa"

    output_dir: str = Field(description="Where qa.json / .md / .png and predictions.jsonl go.")
    reasoner: Literal["retriever", "dualtower", "traverse"] = Field(
        "retriever",
        description="'retriever': a triple scorer, evidence chains and a reader (ReG). 'dualtower': PrivGemo's "
        "Hand/Brain controller (`dualtower`) on each question's subgraph; `retriever` is then unused. 'traverse': "
        "ReMindRAG's traversal (`traverse`), steered by `retriever`'s scores or a Hand-side LLM.",
    )
    retriever: MethodConfig | None = Field(
        None,
        description="Triple scorer: `{kind: retriever, path: <checkpoint folder>}`, `{kind: planner, path: "
        "<planner folder>, decode: {beam_width, mode}}` or a baseline (`{kind: cosine}`, `{kind: hop_distance}`).",
    )
    dualtower: DualTowerConfig | None = Field(
        None, description="reasoner dualtower: the controller (brain, privacy mode, W_max, D_max, W1, α).")
    traverse: TraverseConfig | None = Field(
        None, description="reasoner traverse: local or LLM guide, step budget, sufficiency floor (rg.reasoning.traverse).")
    schema_dir: str | None = Field(
        None, description="reasoner dualtower: folder of the KG's privacy_schema.json (a privacy report writes one); "
        "None derives types and relation clusters from each question's subgraph.")
    memory: MemoryConfig | None = Field(
        None, description="reasoner dualtower: the experience pool and edge memory (rg.memory), owned by one named "
        "Ray actor; reasoner traverse: the edge memory only. `memory.rounds` answers the questions that many "
        "times with the memory kept between rounds.")
    top_k: int | None = Field(100, ge=1, description="Retrieved triples per question (None: all, ranked).")
    min_triple_score: float | None = Field(
        None,
        description="Also drop retrieved triples scoring below this (None: no floor); e.g. the planner's "
        "triples on no decoded path score about -9.21, so -9 keeps exactly the decoded paths' triples.",
    )
    chains: bool = Field(
        True,
        description="Evidence chains (ReG S(II)) when true; false gives the reader one line per retrieved triple "
        "in rank order (the ablation).",
    )
    evidence: EvidenceConfig = Field(default_factory=EvidenceConfig, description="Chain length and merging.")
    reader: ReaderChoice = Field(
        default_factory=RetrieverReaderChoice,
        description="`{kind: retriever, ...}` (local, no LLM) or `{kind: llm, llm: {base_url, model}, ...}`.",
    )
    match: MatchMode = Field("exact", description="Hit / Hits@1 matching: `exact`, or `contains` as RoG's eval_hit.")
    num_actors: int = Field(2, ge=1, description="Inference actors in the Ray Data pool (the concurrency).")
    actor_cpus: float = Field(
        1.0, gt=0, description="CPUs per actor (a retriever checkpoint scores on CPU; an LLM reader waits: use 0.25)."
    )
    batch_size: int = Field(16, ge=1, description="Questions per actor call (scored together, read concurrently).")
    calls_per_actor: int = Field(
        1, ge=1, description="Batches an actor works on at once; > 1 overlaps LLM waits across batches."
    )
    encoder: EncoderConfig = Field(
        default_factory=EncoderConfig, description="Text encoder of the retriever checkpoint or the cosine baseline."
    )
    linking: LinkingConfig | None = Field(
        None, description="Replace each question's topic entities with those linked from its text (rg.linking) "
                          "through the saved name index at `linking.index_dir` (a build with `linking` writes one).")
    ray: RayConfig = Field(default_factory=RayConfig)

    @field_validator("linking", mode="before")
    @classmethod
    def _linking_true(cls, value: Any) -> Any:
        return linking_setting(value)

    @model_validator(mode="after")
    def _linking_needs_an_index(self) -> "QAEvaluateConfig":
        if self.linking is not None and self.linking.index_dir is None:
            raise ValueError("linking.index_dir is not set; the QA job links through a saved name index. Fix: "
                             "set `linking.index_dir` to the folder a build with `linking` wrote "
                             "(<output_dir>/linking-index)")
        return self

    @model_validator(mode="after")
    def _reasoner_has_its_parts(self) -> "QAEvaluateConfig":
        if self.reasoner == "retriever" and self.retriever is None:
            raise ValueError("retriever is not set; reasoner 'retriever' needs a triple scorer. Fix: set "
                             "`retriever: {kind: retriever, path: ...}` (or a baseline), or `reasoner: dualtower`")
        if self.memory is not None and self.reasoner not in ("dualtower", "traverse"):
            raise ValueError("`memory` is set but reasoner is not 'dualtower' or 'traverse'. Fix: set one of them or "
                             "drop memory")
        if self.reasoner == "traverse":
            if self.traverse is None:
                raise ValueError("reasoner is 'traverse' but `traverse` is not set. Fix: give `traverse: {kind: local}` "
                                 "(with a retriever) or `traverse: {kind: llm, llm: {base_url, model}}`")
            if self.traverse.kind == "local" and self.retriever is None:
                raise ValueError("traverse.kind is 'local' but retriever is not set; its scores steer the traversal. "
                                 "Fix: set `retriever: {kind: planner, path: ...}` (or a retriever or baseline)")
            if self.memory is not None and (self.memory.experience is not None or self.memory.edges is None):
                raise ValueError("reasoner 'traverse' uses the edge memory only. Fix: set memory.experience: null "
                                 "and keep memory.edges (memory.embedder chooses its embedder)")
        if self.reasoner == "dualtower" and self.dualtower is None:
            raise ValueError("reasoner is 'dualtower' but `dualtower` is not set. Fix: give `dualtower: {brain: "
                             "{kind: local, planner: <planner folder>}}` (see configs/dualtower_synthetic.yaml)")
        return self

    @model_validator(mode="after")
    def _planned_walks_need_a_planner(self) -> "QAEvaluateConfig":
        if self.reasoner != "retriever" or self.retriever is None:
            return self
        check_planned_walks(self.evidence.walks, self.retriever)
        return self


@dataclass(frozen=True)
class QAResult:
    """What :func:`evaluate_qa` returns: the aggregates, the files written, and the run record."""

    summary: QASummary
    files: QAReportFiles
    run: dict[str, Any]


def build_qa_scorer(cfg: QAEvaluateConfig) -> TripleScorer:
    """The configured scorer; the text encoder is loaded only for methods that need it."""
    if cfg.retriever is None:
        raise ValueError("this evaluation has no triple scorer (reasoner: dualtower); set `retriever`")
    needs_encoder = cfg.retriever.kind in ENCODER_KINDS
    return build_scorer(cfg.retriever, TextEncoder(cfg.encoder) if needs_encoder else None)


class _QAActor:
    """Ray Data actor: loads the scorer and reader once, answers batches of RoG rows (as their inference views).

    Its LLM clients (an LLM reader's, an LLM Brain's, a Hand LLM's) append each completed call to
    the usage journal ``journal`` under run id ``run``, from this process, as the call completes.
    """

    def __init__(self, cfg: QAEvaluateConfig, round_no: int = 1, journal: str | None = None, run: str = "",
                 use_memory: bool = True) -> None:
        import torch

        torch.set_num_threads(max(1, int(cfg.actor_cpus)))  # one process per actor: match its CPU share
        self.cfg = cfg
        self.answerer = None
        book = UsageJournal(journal, run) if journal else None
        if cfg.reasoner == "dualtower":
            from rg.evaluation.dualtower_qa import DualTowerQA

            assert cfg.dualtower is not None  # checked by the config
            # the QA run's encoder (its cache holds the KG's texts that training encoded): the tuned Hand's
            # retriever and the DRM encode every subgraph's names, a second or more per question without it
            encoder = TextEncoder(cfg.encoder) if cfg.dualtower.needs_encoder else None
            self.answerer = DualTowerQA(cfg.dualtower, cfg.schema_dir, cfg.memory if use_memory else None,
                                        memory_actor_name(cfg), book, encoder=encoder)
        elif cfg.reasoner == "traverse":
            from rg.evaluation.traverse_qa import TraverseQA

            assert cfg.traverse is not None  # checked by the config
            scorer = build_qa_scorer(cfg) if cfg.retriever is not None else None
            self.answerer = TraverseQA(cfg.traverse, scorer, cfg.memory if use_memory else None,
                                       memory_actor_name(cfg), book)
        else:
            self.scorer = build_qa_scorer(cfg)
            self.reader = build_reader(cfg.reader, book)
        self.rewriter = None
        if cfg.memory is not None and cfg.memory.round_kind != "same" and round_no > 1:
            from rg.evaluation.rounds import RoundRewriter

            memory = cfg.memory
            self.rewriter = RoundRewriter(memory.round_kind, memory.paraphrase, round_no, memory.rounds)
        self.linker = None
        if cfg.linking is not None:
            from rg.linking import EntityLinker, NameIndex

            self.linker = EntityLinker(NameIndex.load(cfg.linking.index_dir), cfg.linking)

    async def __call__(self, batch: "pa.Table") -> dict[str, np.ndarray]:
        samples: list[Sample] = []
        bad: list[Prediction] = []
        covered: dict[str, bool] = {}  # needs the subgraph, which only the actors see
        golds: dict[str, str] = {}  # the gold of a rewritten question (rg.evaluation.rounds), for the driver only
        for row in batch.to_pylist():  # RoG rows straight from the input files
            item = sample_from_row(row, "input", -1)
            if isinstance(item, BadRow):
                bad.append(Prediction(id=str(row.get("id")), question=str(row.get("question") or ""),
                                      failure=f"bad_row:{item.reason}"))
            else:
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
        return {"prediction": np.array([json.dumps(p.to_dict()) for p in done], dtype=object),
                "covered": np.array([covered.get(p.id, False) for p in done], dtype=bool),
                "gold": np.array([golds.get(p.id, "") for p in done], dtype=object)}


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


def check_resources(cfg: QAEvaluateConfig, cluster_cpus: float) -> None:
    """Fail fast when the actor pool cannot be scheduled (Ray Data would wait for ever)."""
    if cfg.actor_cpus > cluster_cpus:
        raise ValueError(
            f"actor_cpus = {cfg.actor_cpus} exceeds the cluster's {cluster_cpus:g} CPUs. Fix: lower `actor_cpus`"
        )


def pool_cpus(cfg: QAEvaluateConfig, size: int, cluster_cpus: float) -> float:
    """CPUs each of ``size`` actors reserves: ``actor_cpus``, lowered so that the pool leaves
    :data:`INPUT_CPUS` free for the Ray Data tasks that list and read the input files.

    The actors start first; if they held every CPU, the tasks that feed them could never run and
    the job would wait for ever (2 actors x 1 CPU on 2 CPUs did; so did 2 x 0.875, which left
    only the read tasks' own 0.25 CPU free).
    """
    return min(cfg.actor_cpus, max(0.01, (cluster_cpus - INPUT_CPUS) / max(1, size)))


def _title(cfg: QAEvaluateConfig, run: dict[str, Any]) -> str:
    inputs = [cfg.input] if isinstance(cfg.input, str) else cfg.input
    name = ", ".join(Path(p).name for p in inputs)
    evidence = "chains" if cfg.chains else "raw triples"
    scorer = str(run["scorer"]).split("==", 1)[0]
    return f"QA on {name} ({cfg.side}, {run['questions']} questions): {scorer} → {evidence} → {run['reader']}"


def _predict(
    cfg: QAEvaluateConfig, ids: frozenset[str], progress: bool, round_no: int = 1, journal: str | None = None,
    run: str = "", use_memory: bool = True,
) -> tuple[dict[str, Prediction], dict[str, bool], dict[str, Gold]]:
    """Stream the questions ``ids`` from the inputs through the actor pool (whose LLM calls are
    appended to the usage journal ``journal`` under run id ``run``); ``use_memory`` false answers
    them with no memory (``memory.baseline``), round ``round_no``'s rewriting still applied.

    Returns:
        Predictions by id, by id whether the answers are in the subgraph (``Gold.covered``,
        computed where the subgraph is), and the gold of each question a memory round rewrote.

    Rows go from the input files to the actors with Ray Data (an id filter, no ``from_items``),
    so the driver never holds the subgraphs.
    """
    import ray

    init_ray(cfg.ray)
    cluster_cpus = ray.cluster_resources().get("CPU", 0.0)
    check_resources(cfg, cluster_cpus)
    inputs = [cfg.input] if isinstance(cfg.input, str) else list(cfg.input)
    parts = [read_input(source, None, ids) for source in inputs]
    ds = parts[0].union(*parts[1:]) if len(parts) > 1 else parts[0]
    blocks = max(1, math.ceil(len(ids) / cfg.batch_size))
    size = min(cfg.num_actors, blocks)
    # small inputs are read as one block, which one actor would take whole: spread the batches
    ds = ds.repartition(target_num_rows_per_block=cfg.batch_size)
    ds = ds.map_batches(
        _QAActor,
        fn_constructor_kwargs={"cfg": cfg, "round_no": round_no, "journal": journal, "run": run,
                               "use_memory": use_memory},
        batch_size=cfg.batch_size,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(
            size=size,
            max_concurrent_calls_per_actor=cfg.calls_per_actor,
            max_tasks_in_flight_per_actor=2 * cfg.calls_per_actor,
        ),
        num_cpus=pool_cpus(cfg, size, cluster_cpus),
    )
    predictions: dict[str, Prediction] = {}
    coverage: dict[str, bool] = {}
    golds: dict[str, Gold] = {}
    with tqdm(total=len(ids), unit="q", desc="answer questions", disable=not progress, file=user_stream()) as bar:
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for text, covered, gold in zip(batch["prediction"], batch["covered"], batch["gold"]):
                prediction = Prediction.from_dict(json.loads(text))
                predictions[prediction.id] = prediction
                coverage[prediction.id] = bool(covered)
                if gold:
                    fields = json.loads(gold)
                    golds[prediction.id] = Gold(**{**fields, "answers": tuple(fields["answers"])})
            bar.update(len(batch["prediction"]))
    return predictions, coverage, golds


def memory_actor_name(cfg: QAEvaluateConfig) -> str:
    """The memory actor of this evaluation (one per output folder)."""
    import hashlib

    return "rg-memory-" + hashlib.sha1(str(Path(cfg.output_dir).resolve()).encode()).hexdigest()[:10]


def reader_evidence_mismatch(cfg: QAEvaluateConfig) -> dict[str, list[Any]]:
    """How this run's evidence differs from what its tuned reader was trained on (warned about on stderr)."""
    if cfg.reasoner != "retriever" or cfg.reader.kind != "tuned":
        return {}
    mismatch = evidence_mismatch(resolve_data_path(cfg.reader.checkpoint), cfg.evidence)
    if mismatch:
        shown = ", ".join(f"{key}: trained {was!r}, used {now!r}" for key, (was, now) in mismatch.items())
        print(f"warning: the tuned reader in {cfg.reader.checkpoint} was trained on other evidence settings ({shown}); "
              "its answers will be worse. Fix: set the same `evidence` values as its training config",
              file=user_stream())
    return mismatch


def evaluate_qa(cfg: QAEvaluateConfig, progress: bool = True) -> QAResult:
    """Answer every question of ``cfg.side``, score the answers, write and return the results.

    Every LLM call of the run (an LLM reader's, an LLM Brain's) is appended by the actor that made
    it, as it completes, to ``<output_dir>/llm_usage.jsonl`` (:mod:`rg.llm.journal`); the run record
    gets ``llm_usage_this_run`` and ``llm_usage_all_runs`` (every run into ``output_dir``, killed
    ones included), and ``llm_usage_all_runs_by_side`` (``hand`` / ``brain``).

    Raises:
        DuplicateIdError: when question ids repeat.
        ValueError: when the side holds no question, or the actor pool does not fit.
        EndpointDownError: the LLM reader's or the LLM Brain's endpoint did not answer the preflight
            probe (before any Ray work).
    """
    started = time.perf_counter()
    # the driver reads questions and answers only; the subgraphs stream from the files to the actors
    samples = load_split_samples(cfg.input, cfg.split, (cfg.side,), cfg.limit, graph=False)[cfg.side]
    if not samples:
        raise ValueError(f"no questions on side {cfg.side!r} of {cfg.input}; check `input`, `split` and `side`")
    gold = {s.id: Gold.of(s) for s in samples}  # stays on the driver: the evaluation side
    mismatch = reader_evidence_mismatch(cfg)
    if len(gold) != len(samples):
        raise DuplicateIdError([s.id for s in samples], str(cfg.input))
    _preflight(cfg)
    rounds: list[dict[str, Any]] = []
    run_id, journal = new_run_id(), str((Path(cfg.output_dir) / JOURNAL_FILE).resolve())  # actors: other cwd
    first: dict[str, float] | None = None  # round 1's Hits@1 by id
    actor = None
    if cfg.memory is not None:  # one owner of the memories for every worker and every round
        from rg.memory.actor import memory_actor

        init_ray(cfg.ray)
        actor = memory_actor(cfg.memory, memory_actor_name(cfg))
    for round_no in range(1, (cfg.memory.rounds if cfg.memory is not None else 1) + 1):
        predictions, coverage, rewritten = _predict(cfg, frozenset(gold), progress, round_no, journal, run_id)
        round_gold = {i: rewritten.get(i) or replace(g, covered=coverage.get(i, False)) for i, g in gold.items()}
        scores: list[QuestionScore] = []
        for sample in samples:
            prediction = predictions.get(sample.id) or Prediction(id=sample.id, question=sample.question, failure=LOST)
            scores.append(score_prediction(prediction, round_gold[sample.id], cfg.match))
        if cfg.memory is not None:
            side = "hand" if cfg.reasoner == "traverse" else "brain"
            rounds.append({**round_summary(round_no, scores, side, first), "kind": cfg.memory.round_kind,
                           "rewritten": len(rewritten)})
            if cfg.memory.baseline:  # the same round's questions once more, with no memory at all; its calls
                # are journaled under their own run id: this run's usage stays the memory's, all runs' is the spend
                plain, _, _ = _predict(cfg, frozenset(gold), progress, round_no, journal, f"{run_id}-baseline",
                                       use_memory=False)
                rounds[-1].update(without_memory(scores, plain, round_gold, cfg.match, side, cfg.output_dir, round_no))
            write_predictions(scores, round_predictions_path(cfg.output_dir, round_no))
            first = first if first is not None else {s.prediction.id: s.hits_at_1 for s in scores}
    gold = round_gold
    if actor is not None:
        import ray

        rounds_stats = ray.get(actor.stats.remote())
        ray.get(actor.close.remote())
        ray.kill(actor)
    summary = summarize(scores, cfg.match)
    run = _run_record(cfg, scores, time.perf_counter() - started, mismatch, run_id, journal)
    if cfg.memory is not None:
        run["memory_rounds"] = rounds
        run["memory_stats"] = rounds_stats
    files = write_qa_results(summary, scores, cfg.output_dir, run, _title(cfg, run))
    return QAResult(summary=summary, files=files, run=run)


def _preflight(cfg: QAEvaluateConfig) -> None:
    """Before any Ray work: probe the LLM endpoints the run calls, check the dual tower's Brain view."""
    brain = cfg.dualtower.brain.llm if cfg.reasoner == "dualtower" and cfg.dualtower is not None else None
    probe_endpoints({"reader.llm": getattr(cfg.reader, "llm", None), "dualtower.brain.llm": brain})
    if cfg.reasoner == "dualtower" and cfg.dualtower is not None:
        from rg.evaluation.dualtower_qa import check_brain_view

        check_brain_view(cfg.dualtower, cfg.schema_dir)


def _run_record(cfg: QAEvaluateConfig, scores: list[QuestionScore], seconds: float, mismatch: dict[str, Any],
                run_id: str, journal: str) -> dict[str, Any]:
    """The run's record: its settings, speed and LLM usage, and the reasoner's own totals."""
    first = scores[0].prediction
    run = {
        "input": cfg.input,
        "side": cfg.side,
        "questions": len(scores),
        "scorer": first.scorer or (cfg.retriever.kind if cfg.retriever is not None else cfg.reasoner),
        "reasoner": cfg.reasoner,
        "reader": first.reader or cfg.reader.kind,
        "chains": cfg.chains,
        "top_k": cfg.top_k,
        "min_triple_score": cfg.min_triple_score,
        "evidence": cfg.evidence.model_dump(),
        "reader_evidence_mismatch": mismatch,
        "match": cfg.match,
        "num_actors": cfg.num_actors,
        "batch_size": cfg.batch_size,
        "seconds": seconds,
        "questions_per_s": len(scores) / seconds if seconds > 0 else None,
        "run_id": run_id,
        **journal_usage(journal, run_id),
    }
    if cfg.dualtower is not None and cfg.reasoner == "dualtower":
        run["dualtower"] = cfg.dualtower.model_dump(mode="json", exclude={"brain": {"llm": {"api_key"}}})
        run["brain_calls_per_question"] = per_side(scores)["brain"]["calls"]
        run["usage_per_question_by_side"] = per_side(scores)
        run["exposure"] = exposure_totals(scores)
    if cfg.traverse is not None and cfg.reasoner == "traverse":
        run["traverse"] = cfg.traverse.model_dump(mode="json", exclude={"llm": {"api_key"}})
        run["hand_calls_per_question"] = sum(s.prediction.usage.calls for s in scores) / len(scores)
    if cfg.memory is not None:
        run["memory"] = cfg.memory.model_dump(mode="json")
    return run


def format_qa(result: QAResult) -> str:
    """The Markdown table with its run line, and where the files went."""
    files = result.files
    lines = [run_line(result.run), markdown_table(result.summary).rstrip(), failure_line(result.summary),
             usage_line(result.run)]
    lines.append(f"results: {Path(files.json).resolve()}  table: {Path(files.markdown).resolve()}  "
                 f"plot: {Path(files.plot).resolve()}  predictions: {Path(files.predictions).resolve()}")
    return "\n".join(line for line in lines if line)
