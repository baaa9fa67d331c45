"""``python -m jobs.evaluate`` (retrieval mode): rank triples with retrievers and baselines and
measure triple and answer recall@K against weak, refined and reference labels."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from rg.config import Config
from rg.run.paths import resolve_data_path
from rg.data.splits import QuestionSetConfig, load_split_samples
from rg.evaluation.references import labels_reference, weak_reference, webqsp_gpt4o_reference
from rg.evaluation.report import ReportFiles, write_results
from rg.evaluation.retrieval import DEFAULT_KS, evaluate_retrieval
from rg.retrievers.scorer import RetrieverScorer
from rg.evaluation.scorers import CosineScorer, HopDistanceScorer, TripleScorer
from rg.retrievers.planner.config import DecodeConfig
from rg.retrievers.planner.scorer import PlannerScorer
from rg.text.encoder import EncoderConfig, TextEncoder


CHECKPOINT_KINDS = ("retriever", "planner")
"""Method kinds that load a trained checkpoint from ``path``."""
ENCODER_KINDS = ("retriever", "cosine")
"""Method kinds that encode text (the planner has its own tokenizer)."""


class MethodConfig(Config):
    """One ranking method: a trained retriever or planner checkpoint, or an untrained baseline."""

    kind: Literal["retriever", "planner", "cosine", "hop_distance"]
    path: str | None = Field(None, description="Checkpoint folder (kinds `retriever` and `planner` only).")
    decode: DecodeConfig | None = Field(
        None, description="Kind `planner` only: beam width and constrained/unconstrained decoding (defaults when unset)."
    )
    name: str | None = Field(
        None, description="Row label in the results (default: `kind:label source` for retrievers, the baseline's name)."
    )

    @model_validator(mode="after")
    def _path_for_checkpoints(self) -> "MethodConfig":
        if (self.kind in CHECKPOINT_KINDS) != (self.path is not None):
            raise ValueError(
                f"`path` is required for kind `{self.kind}`" if self.kind in CHECKPOINT_KINDS
                else f"`path` applies to kinds {list(CHECKPOINT_KINDS)} only, not `{self.kind}`; remove it"
            )
        if self.decode is not None and self.kind != "planner":
            raise ValueError(f"`decode` applies to kind `planner` only, not {self.kind!r}; remove it")
        return self


def check_planned_walks(walks: str, retriever: MethodConfig) -> None:
    """Refuse ``evidence.walks: planned`` over a retriever that decodes no paths (QA and the reader's training)."""
    if walks == "planned" and retriever.kind != "planner":
        raise ValueError(f"evidence.walks 'planned' grounds a planner's decoded paths, but retriever.kind is "
                         f"{retriever.kind!r}. Fix: set `retriever: {{kind: planner, path: ...}}` or "
                         "evidence.walks: bfs")


class EvaluateConfig(QuestionSetConfig):
    """Retrieval evaluation of several methods on one set of questions."""

    KIND: ClassVar[str] = "evaluate"

    by_hops: bool = Field(
        True, description="Also evaluate each hop count separately (into by_hops/<n>hop/) when there are several."
    )
    output_dir: str = Field(description="Where retrieval.json / .md / .png go.")
    methods: list[MethodConfig] = Field(min_length=1)
    weak_reference: bool = Field(True, description="Score against weak shortest-path labels.")
    labels: dict[str, str] = Field(default_factory=dict, description="Reference name → labels parquet folder.")
    gpt4o_labels: str | None = Field(None, description="WebQSP GPT-4o evidence labels (jsonl.gz).")
    ks: tuple[int, ...] = DEFAULT_KS
    encoder: EncoderConfig = Field(default_factory=EncoderConfig)


def build_scorer(method: MethodConfig, encoder: TextEncoder | None) -> TripleScorer:
    """The scorer a method names (``encoder`` may be None for kinds that need no text encoder)."""
    if method.kind == "planner":
        assert method.path is not None  # checked by the config validator
        return PlannerScorer(method.path, method.decode)
    if method.kind == "hop_distance":
        return HopDistanceScorer()
    if encoder is None:
        raise ValueError(f"method kind {method.kind!r} needs a text encoder")
    if method.kind == "retriever":
        assert method.path is not None  # checked by the config validator
        return RetrieverScorer(method.path, encoder)
    return CosineScorer(encoder)


def evaluate(cfg: EvaluateConfig) -> tuple[list[dict[str, Any]], ReportFiles]:
    """Evaluate every method on the chosen side (and per hop count); write and return the results."""
    samples = load_split_samples(cfg.input, cfg.split, (cfg.side,), cfg.limit)[cfg.side]
    if not samples:
        raise ValueError(f"no questions on side {cfg.side!r} of {cfg.input}; check `input`, `split` and `side`")
    references: dict[str, dict[str, tuple[int, ...]]] = {}
    if cfg.weak_reference:
        references["weak"] = weak_reference(samples)
    for name, path in cfg.labels.items():
        references[name] = labels_reference(resolve_data_path(path), samples=samples)
    if cfg.gpt4o_labels:
        references["gpt4o"] = webqsp_gpt4o_reference(resolve_data_path(cfg.gpt4o_labels))
    needs_encoder = any(m.kind in ENCODER_KINDS for m in cfg.methods)
    encoder = TextEncoder(cfg.encoder) if needs_encoder else None
    scorers = [build_scorer(m, encoder) for m in cfg.methods]
    for method, scorer in zip(cfg.methods, scorers):
        if method.name is not None:
            scorer.name = method.name
    name = ", ".join(Path(p).name for p in ([cfg.input] if isinstance(cfg.input, str) else cfg.input))
    groups = sorted({s.hops for s in samples if s.hops is not None})
    if cfg.by_hops and len(groups) > 1:
        for hops in groups:
            subset = [s for s in samples if s.hops == hops]
            results = [evaluate_retrieval(subset, scorer, references, cfg.ks) for scorer in scorers]
            write_results(results, Path(cfg.output_dir) / "by_hops" / f"{hops}hop",
                          title=f"{name} ({cfg.side}, {hops}-hop): {len(subset)} questions")
    results = [evaluate_retrieval(samples, scorer, references, cfg.ks) for scorer in scorers]
    files = write_results(results, Path(cfg.output_dir), title=f"{name} ({cfg.side}): {len(samples)} questions")
    return [r.to_dict() for r in results], files
