"""``python -m jobs.evaluate`` (QA mode, ``kind: evaluate_qa``): answer a test set with Ray Data
batch inference and score the answers.

The driver reads the questions of one split side without their subgraphs and keeps their gold
answers; the rows themselves stream from the input files (``read_parquet`` with an id filter,
:mod:`rg.data.streaming`) through ``ray.data.Dataset.map_batches`` to a pool of actors
(:class:`rg.jobs.qa_pool.QAActor`), which answer the inference view of each question
(:func:`rg.evaluation.qa.inference_view`: no answers). Each actor loads the triple scorer (a
retriever checkpoint, or a baseline) and the reader once, and answers its batches with
:func:`rg.evaluation.qa.answer_questions`; an LLM reader's requests of a batch run concurrently
on the actor's event loop. :func:`evaluate_qa_runs` answers several runs over the same questions
with one pool, each model loaded once. The driver scores each prediction against the gold answers it kept
(:mod:`rg.evaluation.qa_metrics`) and writes the report (:mod:`rg.evaluation.qa_report`)::

    result = evaluate_qa(load_config("configs/evaluate_qa_synthetic.yaml", QAEvaluateConfig))
    result.summary.overall.hit, result.files.markdown
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from tqdm.auto import tqdm

from rg.console import user_stream
from rg.run.paths import resolve_data_path
from rg.data.sample import Sample
from rg.data.streaming import INPUT_CPUS, read_input
from rg.data.splits import DuplicateIdError, QuestionSetConfig, load_split_samples
from rg.jobs.evaluate import MethodConfig, check_planned_walks
from rg.jobs.qa_pool import POOL_FIELDS, QAActor, RunBook, memory_actor_name, shared_pool_key
from rg.evaluation.qa import Prediction, ReaderChoice, RetrieverReaderChoice
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
from rg.evidence import EvidenceConfig
from rg.linking.config import LinkingConfig, linking_setting
from rg.llm.journal import JOURNAL_FILE, journal_usage, new_run_id
from rg.llm.probe import probe_endpoints
from rg.metrics import MatchMode
from rg.memory.config import MemoryConfig
from rg.reasoning.dualtower.config import DualTowerConfig
from rg.reasoning.tuned_reader import evidence_mismatch
from rg.reasoning.traverse.config import TraverseConfig
from rg.runtime import RayConfig, init_ray
from rg.text.encoder import EncoderConfig


RUN = "qa"
"""The run name of a lone QA run in the actor pool (:class:`~rg.jobs.qa_pool.QAActor` answers named runs)."""


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


@dataclass(frozen=True)
class Answered:
    """One run's answers from the pool: predictions by id, by id whether the answers are in the subgraph
    (``Gold.covered``, computed where the subgraph is), the gold of each question a memory round
    rewrote, and the seconds the actors spent answering for this run (summed over actors)."""

    predictions: dict[str, Prediction]
    coverage: dict[str, bool]
    golds: dict[str, Gold]
    seconds: float


def _predict(
    runs: dict[str, QAEvaluateConfig], ids: frozenset[str], progress: bool, round_no: int = 1,
    books: dict[str, RunBook] | None = None, use_memory: bool = True,
) -> dict[str, Answered]:
    """Stream the questions ``ids`` from the inputs through one actor pool that answers them for every run
    (whose LLM calls are appended to the usage journal of ``books[run]``); ``use_memory`` false answers them
    with no memory (``memory.baseline``), round ``round_no``'s rewriting still applied.

    The runs share :func:`~rg.jobs.qa_pool.shared_pool_key`, so the first one's questions and pool settings
    are every run's. Rows go from the input files to the actors with Ray Data (an id filter, no
    ``from_items``), so the driver never holds the subgraphs.
    """
    import ray

    cfg = next(iter(runs.values()))
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
        QAActor,
        fn_constructor_kwargs={"runs": runs, "round_no": round_no, "books": books, "use_memory": use_memory},
        batch_size=cfg.batch_size,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(
            size=size,
            max_concurrent_calls_per_actor=cfg.calls_per_actor,
            max_tasks_in_flight_per_actor=2 * cfg.calls_per_actor,
        ),
        num_cpus=pool_cpus(cfg, size, cluster_cpus),
    )
    out = {name: Answered({}, {}, {}, 0.0) for name in runs}
    desc = "answer questions" if len(runs) == 1 else f"answer questions ({len(runs)} runs)"
    with tqdm(total=len(ids) * len(runs), unit="q", desc=desc, disable=not progress, file=user_stream()) as bar:
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            for name, seconds, text, covered, gold in zip(batch["run"], batch["seconds"], batch["prediction"],
                                                          batch["covered"], batch["gold"]):
                answered = out[name]
                prediction = Prediction.from_dict(json.loads(text))
                answered.predictions[prediction.id] = prediction
                answered.coverage[prediction.id] = bool(covered)
                if gold:
                    fields = json.loads(gold)
                    answered.golds[prediction.id] = Gold(**{**fields, "answers": tuple(fields["answers"])})
                out[name] = replace(answered, seconds=answered.seconds + float(seconds))
            bar.update(len(batch["prediction"]))
    return out


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
    if cfg.memory is None:
        return evaluate_qa_runs({RUN: cfg}, progress)[RUN]
    started = time.perf_counter()
    samples, gold = _questions(cfg)
    mismatch = reader_evidence_mismatch(cfg)
    _preflight(cfg)
    rounds: list[dict[str, Any]] = []
    book = RunBook(str((Path(cfg.output_dir) / JOURNAL_FILE).resolve()), new_run_id())  # actors: other cwd
    first: dict[str, float] | None = None  # round 1's Hits@1 by id
    from rg.memory.actor import memory_actor

    init_ray(cfg.ray)  # one owner of the memories for every worker and every round
    actor = memory_actor(cfg.memory, memory_actor_name(cfg))
    for round_no in range(1, cfg.memory.rounds + 1):
        answered = _predict({RUN: cfg}, frozenset(gold), progress, round_no, {RUN: book})[RUN]
        round_gold = _round_gold(gold, answered)
        scores = _scores(cfg, samples, answered, round_gold)
        side = "hand" if cfg.reasoner == "traverse" else "brain"
        rounds.append({**round_summary(round_no, scores, side, first), "kind": cfg.memory.round_kind,
                       "rewritten": len(answered.golds)})
        if cfg.memory.baseline:  # the same round's questions once more, with no memory at all; its calls
            # are journaled under their own run id: this run's usage stays the memory's, all runs' is the spend
            plain = _predict({RUN: cfg}, frozenset(gold), progress, round_no,
                             {RUN: replace(book, run=f"{book.run}-baseline")}, use_memory=False)[RUN]
            rounds[-1].update(without_memory(scores, plain.predictions, round_gold, cfg.match, side, cfg.output_dir,
                                             round_no))
        write_predictions(scores, round_predictions_path(cfg.output_dir, round_no))
        first = first if first is not None else {s.prediction.id: s.hits_at_1 for s in scores}
    import ray

    rounds_stats = ray.get(actor.stats.remote())
    ray.get(actor.close.remote())
    ray.kill(actor)
    summary = summarize(scores, cfg.match)
    run = _run_record(cfg, scores, time.perf_counter() - started, mismatch, book)
    run["memory_rounds"] = rounds
    run["memory_stats"] = rounds_stats
    files = write_qa_results(summary, scores, cfg.output_dir, run, _title(cfg, run))
    return QAResult(summary=summary, files=files, run=run)


def evaluate_qa_runs(runs: dict[str, QAEvaluateConfig], progress: bool = True) -> dict[str, QAResult]:
    """Answer the same questions for several runs with one actor pool, and score and write each run
    as :func:`evaluate_qa` would (each into its own ``output_dir``).

    Each actor starts once and loads every run's models once; runs naming the same encoder or
    scorer share it (:mod:`rg.jobs.qa_pool`). Each run record says which runs shared the pool
    (``shared_pool``), the pool's wall time (``seconds``) and the time the actors spent on this
    run (``answer_seconds``, summed over actors).

    Raises:
        ValueError: when the runs differ in their questions or pool settings, or one has memory
            rounds (:func:`~rg.jobs.qa_pool.shared_pool_key`); and as :func:`evaluate_qa`.
    """
    if not runs:
        raise ValueError("no QA runs given")
    keys = {name: shared_pool_key(cfg) for name, cfg in runs.items()}
    if None in keys.values() or len(set(keys.values())) > 1:
        raise ValueError(
            f"QA runs {sorted(runs)} cannot share one actor pool: each needs the same {', '.join(POOL_FIELDS)} "
            "and no memory rounds. Fix: run them one by one with evaluate_qa")
    started = time.perf_counter()
    cfg = next(iter(runs.values()))
    samples, gold = _questions(cfg)
    mismatch = {name: reader_evidence_mismatch(c) for name, c in runs.items()}
    for c in runs.values():
        _preflight(c)
    books = {name: RunBook(str((Path(c.output_dir) / JOURNAL_FILE).resolve()), new_run_id())  # actors: other cwd
             for name, c in runs.items()}
    answered = _predict(runs, frozenset(gold), progress, 1, books)
    seconds = time.perf_counter() - started
    results: dict[str, QAResult] = {}
    for name, c in runs.items():
        scores = _scores(c, samples, answered[name], _round_gold(gold, answered[name]))
        summary = summarize(scores, c.match)
        run = _run_record(c, scores, seconds, mismatch[name], books[name])
        if len(runs) > 1:
            run.update(shared_pool=list(runs), answer_seconds=answered[name].seconds)
        files = write_qa_results(summary, scores, c.output_dir, run, _title(c, run))
        results[name] = QAResult(summary=summary, files=files, run=run)
    return results


def _questions(cfg: QAEvaluateConfig) -> tuple[list[Sample], dict[str, Gold]]:
    """The side's questions without their subgraphs, and their gold answers (which stay on the driver)."""
    samples = load_split_samples(cfg.input, cfg.split, (cfg.side,), cfg.limit, graph=False)[cfg.side]
    if not samples:
        raise ValueError(f"no questions on side {cfg.side!r} of {cfg.input}; check `input`, `split` and `side`")
    gold = {s.id: Gold.of(s) for s in samples}
    if len(gold) != len(samples):
        raise DuplicateIdError([s.id for s in samples], str(cfg.input))
    return samples, gold


def _round_gold(gold: dict[str, Gold], answered: Answered) -> dict[str, Gold]:
    """Each question's gold: a rewritten question's own, else the driver's with the actors' coverage."""
    return {i: answered.golds.get(i) or replace(g, covered=answered.coverage.get(i, False)) for i, g in gold.items()}


def _scores(cfg: QAEvaluateConfig, samples: list[Sample], answered: Answered,
            gold: dict[str, Gold]) -> list[QuestionScore]:
    """Every question scored; one the pool did not return is a failure (``LOST``), never dropped."""
    scores = []
    for sample in samples:
        prediction = answered.predictions.get(sample.id) or Prediction(id=sample.id, question=sample.question,
                                                                       failure=LOST)
        scores.append(score_prediction(prediction, gold[sample.id], cfg.match))
    return scores


def _preflight(cfg: QAEvaluateConfig) -> None:
    """Before any Ray work: probe the LLM endpoints the run calls, check the dual tower's Brain view."""
    brain = cfg.dualtower.brain.llm if cfg.reasoner == "dualtower" and cfg.dualtower is not None else None
    probe_endpoints({"reader.llm": getattr(cfg.reader, "llm", None), "dualtower.brain.llm": brain})
    if cfg.reasoner == "dualtower" and cfg.dualtower is not None:
        from rg.evaluation.dualtower_qa import check_brain_view

        check_brain_view(cfg.dualtower, cfg.schema_dir)


def _run_record(cfg: QAEvaluateConfig, scores: list[QuestionScore], seconds: float, mismatch: dict[str, Any],
                book: RunBook) -> dict[str, Any]:
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
        "run_id": book.run,
        **journal_usage(book.journal, book.run),
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
